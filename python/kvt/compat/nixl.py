# SPDX-License-Identifier: BSD-3-Clause
"""NIXL's Python agent (nixl._api.nixl_agent), method for method, over kvt.

vLLM's NixlConnector (and Dynamo, llm-d) drive NIXL's agent; switching
them to kvt is one import::

    from kvt.compat.nixl import nixl_agent, nixl_agent_config
    # was: from nixl._api import nixl_agent, nixl_agent_config

What the agent does on kvt:

- An agent is the process's kvt engine (one agent a process, as a serving
  worker has); its name is the engine's name.  ``backends`` name NIXL
  plugins and are accepted and ignored: kvt picks its transports (shm,
  nvlink, rdma, tcp) per peer.  ``nixl_agent_config(kvt_args=[...])``
  passes kvt options (``KVT_NIXL_ARGS`` in the environment too).
- Metadata (``get_agent_metadata``, ``add_remote_agent``) is an opaque
  bytes blob exchanged out of band, as in NIXL; it carries the agent's
  name and kvt address, and kvt's own handshake brings the regions.
- A prepared transfer (``make_prepped_xfer``) moves its descriptor pairs
  as one block list (``kvt_submit_blocks``: one submission with one
  status, which the NVLink gather kernel takes whole); its notification
  is sent once every byte landed, and arrives exactly once (kvt's
  promise, stronger than NIXL's).
- ``check_xfer_state`` answers "DONE", "PROC" or "ERR"; a failed request
  leaves no byte to land later (kvt.h).
"""
import errno
import json
import logging
import os
import threading

import kvt
from kvt.compat import await_regions

__all__ = ["nixl_agent", "nixl_agent_config", "nixlXferDList", "nixlRegDList",
           "DEFAULT_COMM_PORT"]

DEFAULT_COMM_PORT = 8080
NIXL_INIT_AGENT = "NIXL_INIT_AGENT"
_MAGIC = "kvt-nixl-1"
log = logging.getLogger("kvt.compat.nixl")
_MEMS = {"DRAM": "cpu", "cpu": "cpu", "VRAM": "cuda", "cuda": "cuda"}


class nixl_agent_config:
    """NIXL's agent configuration; kvt_args: kvt options (kvt's own)."""

    def __init__(self, enable_prog_thread=True, enable_listen_thread=False,
                 listen_port=0, backends=("UCX",), kvt_args=None):
        self.backends = list(backends)
        self.enable_pthread = enable_prog_thread
        self.enable_listen = enable_listen_thread
        self.port = listen_port
        self.kvt_args = list(kvt_args or [])


class _DList:
    """A descriptor list: (addr, len, dev) rows and a memory type."""

    def __init__(self, mem_type, descs):
        if mem_type not in _MEMS:
            raise ValueError("memory type %r: DRAM or VRAM" % (mem_type,))
        self.mem = _MEMS[mem_type]
        self.descs = [(int(d[0]), int(d[1]), int(d[2])) for d in descs]

    def __len__(self):
        return len(self.descs)

    def __getitem__(self, i):
        return self.descs[i]

    def loc(self, dev):
        return "%s:%d" % (self.mem, dev)


class nixlXferDList(_DList):
    pass


class nixlRegDList(_DList):
    pass


def _tensor_rows(tensors):
    rows, mem = [], None
    for t in tensors:
        dev = t.get_device()
        m = "cuda" if dev >= 0 else "cpu"
        if mem not in (None, m):
            raise ValueError("tensors on different kinds of memory")
        mem = m
        rows.append((t.data_ptr(), t.numel() * t.element_size(), max(dev, 0)))
    return mem, rows


def _dlist(cls, descs, mem_type, width):
    if isinstance(descs, _DList):
        return descs
    if hasattr(descs, "data_ptr"):
        descs = [descs]
    if len(descs) > 0 and hasattr(descs[0], "data_ptr"):
        mem, rows = _tensor_rows(descs)
        return cls(mem, rows)
    if mem_type is None:
        raise ValueError("a memory type is needed for a list of tuples")
    if any(len(d) < 3 or len(d) > width for d in descs):
        raise ValueError("descriptors are (addr, len, dev%s) tuples" %
                         (", meta" if width == 4 else ""))
    return cls(mem_type, descs)


class _Prepped:
    """A prepared descriptor list: whose, and its rows."""

    def __init__(self, agent_name, dlist):
        self.agent = agent_name
        self.dlist = dlist


class _Xfer:
    """A transfer request: pairs of rows, its peer and notification."""

    def __init__(self, op, peer, remote, pairs, notif):
        self.op, self.peer, self.remote = op, peer, remote
        self.pairs = pairs          # [(laddr, raddr, len)]
        self.notif = notif
        self.batch = None
        self.note_first = None      # index of the notification's submission
        self.state = "INIT"
        self.lock = threading.Lock()


class nixl_agent:
    """nixl._api.nixl_agent over kvt (one agent a process)."""

    _lock = threading.Lock()
    _engine = None

    def __init__(self, agent_name, nixl_conf=None, instantiate_all=False):
        conf = nixl_conf or nixl_agent_config()
        self.name = agent_name
        self.backends = {b: i for i, b in enumerate(conf.backends)}
        self.plugin_list = list(conf.backends)
        self.notifs = {}
        self._remotes = {}          # agent name -> kvt.Peer
        self._regions = {}          # addr -> kvt.Region
        self._handles = {}
        self._next = 1
        self._spare = []            # finished batches, reset, for reuse
        args = ["--", "--kvt-name", agent_name] + conf.kvt_args + \
            os.environ.get("KVT_NIXL_ARGS", "").split()
        with nixl_agent._lock:
            eng = kvt.current()
            if eng is None:
                eng = kvt.Engine(args)
            self._eng = eng

    # ---- plugins and backends (kvt chooses its transports) ----

    def get_plugin_list(self):
        return self.plugin_list

    def get_plugin_mem_types(self, backend):
        return ["DRAM", "VRAM"]

    def get_plugin_params(self, backend):
        return {}

    def get_backend_mem_types(self, backend):
        return ["DRAM", "VRAM"]

    def get_backend_params(self, backend):
        return {}

    def create_backend(self, backend, initParams=None):
        self.backends.setdefault(backend, len(self.backends))

    # ---- memory ----

    def get_reg_descs(self, descs, mem_type=None, is_sorted=False):
        return _dlist(nixlRegDList, descs, mem_type, 4)

    def get_xfer_descs(self, descs, mem_type=None, is_sorted=False):
        return _dlist(nixlXferDList, descs, mem_type, 3)

    def register_memory(self, reg_list, mem_type=None, is_sorted=False,
                        backends=()):
        """Register every region (for remote reads and writes)."""
        descs = self.get_reg_descs(reg_list, mem_type, is_sorted)
        done = []
        try:
            for addr, n, dev in descs:
                self._regions[addr] = self._eng.register(addr, n, descs.loc(dev))
                done.append(addr)
        except OSError:
            for addr in done:
                self._regions.pop(addr).close()
            raise
        return descs

    def deregister_memory(self, dereg_list, backends=()):
        for addr, _, _ in dereg_list:
            region = self._regions.pop(addr, None)
            if region is not None:
                region.close()

    # ---- metadata and peers ----

    def get_agent_metadata(self):
        """This agent's metadata: bytes for a peer's add_remote_agent."""
        return json.dumps({"magic": _MAGIC, "name": self.name,
                           "addr": self._eng.listen_addr}).encode()

    def get_partial_agent_metadata(self, descs=None, inc_conn_info=False,
                                   backends=()):
        return self.get_agent_metadata()

    def add_remote_agent(self, metadata):
        """Open the agent whose metadata this is; its name."""
        try:
            md = json.loads(bytes(metadata).decode())
            if md.get("magic") != _MAGIC:
                raise ValueError
        except (ValueError, UnicodeDecodeError):
            raise ValueError("not the metadata of a kvt NIXL agent")
        self._remotes[md["name"]] = self._eng.open_peer(md["addr"])
        return md["name"]

    def remove_remote_agent(self, agent):
        peer = self._remotes.pop(_name(agent), None)
        if peer is not None:
            peer.close()

    def check_remote_metadata(self, agent, descs=None):
        return _name(agent) in self._remotes

    def make_connection(self, remote_agent, backends=()):
        self._peer(remote_agent)

    def _peer(self, agent):
        try:
            return self._remotes[_name(agent)]
        except KeyError:
            raise ValueError("agent %r: no metadata (add_remote_agent first)"
                             % (agent,))

    # ---- transfers ----

    def _handle(self, obj):
        h = self._next
        self._next += 1
        self._handles[h] = obj
        return h

    def _get(self, h, cls):
        obj = self._handles.get(h)
        if not isinstance(obj, cls):
            raise ValueError("handle %r is not a live %s" % (h, cls.__name__))
        return obj

    def prep_xfer_dlist(self, agent_name, xfer_list, mem_type=None,
                        is_sorted=False, backends=()):
        descs = self.get_xfer_descs(xfer_list, mem_type, is_sorted)
        agent_name = _name(agent_name)
        if agent_name in ("", NIXL_INIT_AGENT):
            agent_name = NIXL_INIT_AGENT
        elif agent_name != self.name:
            peer = self._peer(agent_name)
            rows = [(a, n) for a, n, _ in descs if n]
            if rows and not await_regions(peer, [a for a, _ in rows],
                                          [n for _, n in rows]):
                raise ValueError("agent %r: a descriptor lies outside every "
                                 "region it registered" % (agent_name,))
        return self._handle(_Prepped(agent_name, descs))

    def make_prepped_xfer(self, operation, local_xfer_side, local_indices,
                          remote_xfer_side, remote_indices, notif_msg=b"",
                          backends=(), skip_desc_merge=False):
        op = self._op(operation)
        local = self._get(local_xfer_side, _Prepped)
        remote = self._get(remote_xfer_side, _Prepped)
        if len(local_indices) != len(remote_indices):
            raise ValueError("local and remote index lists differ in length")
        pairs = []
        for i, j in zip(local_indices, remote_indices):
            i, j = int(i), int(j)
            if not (0 <= i < len(local.dlist) and 0 <= j < len(remote.dlist)):
                raise ValueError("descriptor index %d or %d out of the lists "
                                 "(%d, %d)" % (i, j, len(local.dlist),
                                               len(remote.dlist)))
            la, ln, _ = local.dlist[i]
            ra, rn, _ = remote.dlist[j]
            if ln != rn:
                raise ValueError("descriptor %d (%d bytes) and %d (%d bytes) "
                                 "differ in length" % (i, ln, j, rn))
            pairs.append((la, ra, ln))
        agent = self.name if remote.agent == NIXL_INIT_AGENT else remote.agent
        return self._handle(_Xfer(op, self._target(agent), agent, pairs,
                                  _bytes(notif_msg)))

    def initialize_xfer(self, operation, local_descs, remote_descs,
                        remote_agent, notif_msg=b"", backends=()):
        op = self._op(operation)
        local = self.get_xfer_descs(local_descs)
        remote = self.get_xfer_descs(remote_descs)
        if len(local) != len(remote) or any(
                a[1] != b[1] for a, b in zip(local, remote)):
            raise ValueError("local and remote descriptors differ")
        pairs = [(a[0], b[0], a[1]) for a, b in zip(local, remote)]
        remote_agent = _name(remote_agent)
        return self._handle(_Xfer(op, self._target(remote_agent), remote_agent,
                                  pairs, _bytes(notif_msg)))

    def _target(self, agent):
        agent = _name(agent)
        if agent == self.name and agent not in self._remotes:
            self._remotes[agent] = self._eng.open_peer(self._eng.listen_addr)
        return self._peer(agent)

    @staticmethod
    def _op(operation):
        if operation == "WRITE":
            return kvt.OP_WRITE
        if operation == "READ":
            return kvt.OP_READ
        raise ValueError("operation %r: WRITE or READ" % (operation,))

    def transfer(self, handle, notif_msg=b""):
        """Post a transfer: "DONE", "PROC" or "ERR"."""
        x = self._get(handle, _Xfer)
        with x.lock:
            if x.state == "PROC":
                return "ERR"        # still moving: NIXL refuses a repost
            if notif_msg:
                x.notif = _bytes(notif_msg)
            self._put_batch(x)
            x.batch = self._take_batch(len(x.pairs) + 1)
            x.note_first = None
            try:
                _submit(x)
            except OSError as e:
                log.error("transfer %d to %s refused: %s", handle, x.remote, e)
                x.state = "ERR"
                return "ERR"
            x.state = "PROC"
        return self.check_xfer_state(handle)

    def check_xfer_state(self, handle):
        x = self._get(handle, _Xfer)
        with x.lock:
            if x.state != "PROC":
                return "ERR" if x.state == "ERR" else x.state
            if x.batch.poll() > 0:
                return "PROC"
            try:
                # Every submission finished, not only its requests
                # settled: its overlap claims are gone, so the next
                # transfer to these bytes is not refused as concurrent.
                x.batch.wait(0)
            except TimeoutError:
                return "PROC"
            try:
                x.batch.check()
            except OSError as e:
                log.error("transfer %d to %s failed: %s", handle, x.remote, e)
                x.state = "ERR"
                return "ERR"
            if x.notif and x.note_first is None:
                # Every byte landed: now the notification (exactly once).
                try:
                    x.note_first = x.batch.write(x.peer, 0, 0, [],
                                                 notify=_note(self.name, x.notif))
                except OSError as e:
                    log.error("transfer %d to %s: its notification failed: %s",
                              handle, x.remote, e)
                    x.state = "ERR"
                    return "ERR"
                return "PROC"
            x.state = "DONE"
            return "DONE"

    def release_xfer_handle(self, handle):
        x = self._get(handle, _Xfer)
        with x.lock:
            if x.state == "PROC":
                raise RuntimeError("transfer %r is still moving: kvt cannot "
                                   "cancel it; release it once its state is "
                                   "DONE or ERR" % handle)
            self._put_batch(x)
        del self._handles[handle]

    # A batch a transfer (one kvt request list): finished ones are reset
    # and kept for the next transfer, as a connector makes one a request.
    _SPARE_MAX = 64

    def _take_batch(self, need):
        for i, b in enumerate(self._spare):
            if b.capacity >= need:
                return self._spare.pop(i)
        return self._eng.batch(max(need, 64))

    def _put_batch(self, x):
        b, x.batch = x.batch, None
        if b is None:
            return
        try:
            b.reset()
        except OSError:
            b.close()               # still busy (a failed transfer's rest)
            return
        if len(self._spare) < self._SPARE_MAX:
            self._spare.append(b)
        else:
            b.close()

    def release_dlist_handle(self, handle):
        self._get(handle, _Prepped)
        del self._handles[handle]

    def query_xfer_backend(self, handle):
        self._get(handle, _Xfer)
        return "kvt"

    def get_xfer_telemetry(self, handle):
        x = self._get(handle, _Xfer)
        return {"descs": len(x.pairs), "bytes": sum(p[2] for p in x.pairs)}

    # ---- notifications ----

    def send_notif(self, remote_agent_name, notif_msg, backend=None):
        b = self._eng.batch(1)
        try:
            b.write(self._target(remote_agent_name), 0, 0, [],
                    notify=_note(self.name, _bytes(notif_msg)))
            b.wait(30.0)
            b.check()
        finally:
            b.close()

    def get_new_notifs(self, backends=()):
        """{agent name: [message bytes]} received since the last call."""
        out = {}
        while True:
            got = self._eng.notifications(64)
            for _, data in got:
                name, _, msg = bytes(data).partition(b"\0")
                out.setdefault(name.decode(errors="replace"), []).append(msg)
            if len(got) < 64:
                return out

    def update_notifs(self, backends=()):
        for name, msgs in self.get_new_notifs().items():
            self.notifs.setdefault(name, []).extend(msgs)
        return self.notifs

    def check_remote_xfer_done(self, remote_agent_name, lookup_tag,
                               backends=(), tag_is_prefix=True):
        self.update_notifs()
        msgs = self.notifs.get(_name(remote_agent_name), [])
        tag = _bytes(lookup_tag)
        for m in msgs:
            if (m.startswith(tag) if tag_is_prefix else tag in m):
                msgs.remove(m)
                return True
        return False


def _name(agent):
    """An agent's name as str (NIXL's add_remote_agent hands back bytes,
    which callers pass on)."""
    return agent.decode() if isinstance(agent, bytes) else agent


def _bytes(msg):
    return msg.encode() if isinstance(msg, str) else bytes(msg)


def _note(sender, msg):
    """A notification: the sender's agent name, NUL, the message."""
    note = sender.encode() + b"\0" + msg
    if len(note) > kvt.NOTIFY_MAX:
        raise ValueError("notification of %d bytes with the agent name: kvt "
                         "carries %d" % (len(note), kvt.NOTIFY_MAX))
    return note


def _submit(x):
    """Queue a transfer's pairs as one block list (kvt_submit_blocks): one
    submission with one status, its rows converted in C."""
    move = x.batch.write_blocks if x.op == kvt.OP_WRITE else \
        x.batch.read_blocks
    local, remote, lens = zip(*x.pairs)
    move(x.peer, local, remote, lens)

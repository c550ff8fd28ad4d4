# SPDX-License-Identifier: BSD-3-Clause
"""Mooncake's TransferEngine, method for method, over kvt.

SGLang and vLLM drive ``mooncake.engine.TransferEngine``; switching them
to kvt is one import::

    from kvt.compat.mooncake import TransferEngine

Same names, arguments and return codes (0 / negative; batch ids; check
status 1 done, 0 pending, -1 failed, -2 timed out).  Where they differ:

- Every ``TransferEngine`` of a process shares the process's one kvt
  engine (kvt.Engine); the first ``initialize`` chooses its transports,
  and a later one asking for a transport the engine lacks fails.
- ``initialize`` fails (-1, with the reason logged) for a protocol no
  started transport serves: "rdma" without an RDMA device, "nvlink"
  without CUDA, a name kvt does not know.  Mooncake starts tcp instead.
  Protocols: "tcp", "rdma", "nvlink", "shm", and "auto" (every transport
  kvt has; the best one reaching each peer carries its bytes).
- Lists of different lengths, unregistered addresses and lengths past a
  region return -1 before anything moves.
- A synchronous call returns only once every byte it sent is placed or
  its request failed for good: a -1 never leaves writes that can still
  land later (kvt settles every request within its peer timeout).
- kvt refuses two in-flight writes to overlapping destination bytes
  (they could mix).  This class then waits for the earlier write to
  settle and submits again, so both land, one after the other.
- Every call releases the GIL while it waits; memory registration too.
"""
import errno
import json
import logging
import os
import threading
import time

import kvt

__all__ = ["TransferEngine", "TransferNotify", "TransferOpcode"]

log = logging.getLogger("kvt.compat.mooncake")

#: How long a synchronous call waits in all (seconds): a bound far past
#: kvt's own peer timeout, after which a request is reported failed.
SYNC_TIMEOUT = float(os.environ.get("KVT_MOONCAKE_SYNC_TIMEOUT", "120"))

_PROTOCOLS = {
    "tcp": ["tcp"],
    "rdma": ["rdma"],
    "nvlink": ["nvlink"],
    "shm": ["shm"],
    "auto": [],
}


class TransferOpcode:
    READ = kvt.OP_READ
    WRITE = kvt.OP_WRITE


class TransferNotify:
    """A notification: who sent it and what it says."""

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __repr__(self):
        return "TransferNotify(%r, %r)" % (self.name, self.msg)


class _Shared:
    """The process's kvt engine and what the TransferEngines share."""

    lock = threading.Lock()
    engine = None
    protocol = None
    users = 0
    regions = {}        # addr -> [kvt.Region, length, refs]
    peers = {}          # "host:port" -> kvt.Peer
    pid = None
    # Asynchronous batches not yet reported: a write that overlaps one of
    # them can go only once it is polled (kvt releases a request's claim
    # on its destination when its batch sees it settled).
    outstanding = {}    # id(entry) -> _Async


class _Async:
    """An asynchronous submission: its batch and who may poll it."""

    def __init__(self, batch, first, n):
        self.batch, self.first, self.n = batch, first, n
        self.t0 = time.monotonic()
        self.lock = threading.Lock()

    def poll(self):
        """Pending requests, or None when another thread is polling."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return self.batch.poll()
        finally:
            self.lock.release()


def _while_busy(call):
    """call(), again while kvt refuses it for overlapping a write in
    flight (EBUSY), polling the outstanding batches meanwhile; at most
    SYNC_TIMEOUT."""
    end = time.monotonic() + SYNC_TIMEOUT
    while True:
        try:
            return call()
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > end:
                raise
        _poll_outstanding()
        time.sleep(0.0001)


def _poll_outstanding():
    with _Shared.lock:
        entries = list(_Shared.outstanding.values())
    for e in entries:
        try:
            e.poll()
        except OSError:
            pass


def _engine_args(local_hostname, metadata_server, protocol, device_name):
    if protocol not in _PROTOCOLS:
        raise ValueError("protocol %r: kvt serves %s" %
                         (protocol, ", ".join(sorted(_PROTOCOLS))))
    args = ["--"]
    for pmd in _PROTOCOLS[protocol]:
        args += ["--kvt-pmd", pmd]
    host, _, port = local_hostname.rpartition(":")
    if not host or not port.isdigit():
        host, port = local_hostname, "0"
    if host in ("localhost", ""):
        host = "127.0.0.1"
    args += ["--kvt-listen", "%s:%s" % (host, port)]
    meta = metadata_server or "P2PHANDSHAKE"
    if meta != "P2PHANDSHAKE":
        addr = meta[len("etcd://"):] if meta.startswith("etcd://") else meta
        if "://" in addr:
            raise ValueError("metadata server %r: kvt speaks P2PHANDSHAKE "
                             "and etcd only" % meta)
        args += ["--kvt-meta", "etcd://" + addr, "--kvt-name", local_hostname]
    nics = _nic_list(device_name)
    if nics and protocol in ("rdma", "auto"):
        args += ["--kvt-nic", ",".join(nics)]
    return args


def _nic_list(device_name):
    """"mlx5_0,mlx5_1", or a JSON map of GPU -> NICs (their union)."""
    if not device_name:
        return []
    text = device_name.strip()
    if text.startswith("{"):
        nics = []
        for v in json.loads(text).values():
            for n in v if isinstance(v, list) else [v]:
                if n not in nics:
                    nics.append(n)
        return nics
    return [n for n in text.split(",") if n]


class TransferEngine:
    """mooncake.engine.TransferEngine over kvt."""

    def __init__(self):
        self._initialized = False
        self._local = threading.local()
        self._async = {}
        self._async_lock = threading.Lock()
        self._next_id = 1

    # ---- set-up ----

    def initialize(self, local_hostname, metadata_server, protocol,
                   device_name):
        """Start (or join) the process's engine.  0, or -1."""
        try:
            args = _engine_args(local_hostname, metadata_server, protocol,
                                device_name)
        except ValueError as e:
            log.error("initialize: %s", e)
            return -1
        with _Shared.lock:
            if _Shared.engine is not None and _Shared.pid != os.getpid():
                _Shared.engine = None   # inherited through fork: not ours
                _Shared.users = 0
                _Shared.regions = {}
                _Shared.peers = {}
            if _Shared.engine is None:
                try:
                    _Shared.engine = kvt.Engine(args)
                except OSError as e:
                    log.error("initialize(%r, %r): %s", local_hostname,
                              protocol, e.strerror)
                    return -1
                _Shared.protocol = protocol
                _Shared.pid = os.getpid()
            elif not self._serves(protocol):
                log.error("initialize: this process's kvt engine runs %s, "
                          "not %s", _Shared.protocol, protocol)
                return -1
            if not self._initialized:
                _Shared.users += 1
            self._initialized = True
        return 0

    def initialize_ext(self, local_hostname, metadata_server, protocol,
                       device_name, metadata_type=None):
        return self.initialize(local_hostname, metadata_server, protocol,
                               device_name)

    @staticmethod
    def _serves(protocol):
        if protocol == _Shared.protocol or _Shared.protocol == "auto":
            return True
        pmds = {p["pmd"] for p in _Shared.engine.ports()}
        return protocol == "auto" or set(_PROTOCOLS[protocol]) <= pmds

    def _eng(self):
        if not self._initialized or _Shared.engine is None or \
                _Shared.engine.closed:
            raise OSError(errno.ENODEV, "initialize() first")
        return _Shared.engine

    def get_rpc_port(self):
        """The port peers reach this engine on ("host:port" names it)."""
        try:
            return int(self._eng().listen_addr.rpartition(":")[2])
        except OSError:
            return -1

    def get_engine(self):
        """The kvt.Engine underneath."""
        return self._eng()

    def get_local_ip(self):
        return self._eng().listen_addr.rpartition(":")[0]

    # ---- memory ----

    def register_memory(self, buffer_addr, capacity):
        """Register [buffer_addr, +capacity) for both directions.  0/-1."""
        try:
            eng = self._eng()
            with _Shared.lock:
                r = _Shared.regions.get(buffer_addr)
                if r is not None and r[1] == capacity:
                    r[2] += 1
                    return 0
            region = eng.register(int(buffer_addr), int(capacity))
        except (OSError, TypeError, ValueError) as e:
            log.error("register_memory(%#x, %d): %s", buffer_addr, capacity, e)
            return -1
        with _Shared.lock:
            _Shared.regions[buffer_addr] = [region, capacity, 1]
        return 0

    def unregister_memory(self, buffer_addr):
        with _Shared.lock:
            r = _Shared.regions.get(buffer_addr)
            if r is None:
                log.error("unregister_memory(%#x): not registered", buffer_addr)
                return -1
            if r[2] > 1:
                r[2] -= 1
                return 0
        try:
            r[0].close()
        except OSError as e:
            log.error("unregister_memory(%#x): %s", buffer_addr, e)
            return -1
        with _Shared.lock:
            _Shared.regions.pop(buffer_addr, None)
        return 0

    def batch_register_memory(self, buffer_addresses, capacities):
        if not isinstance(buffer_addresses, (list, tuple)) or \
                not isinstance(capacities, (list, tuple)) or \
                len(buffer_addresses) != len(capacities):
            log.error("batch_register_memory: two lists of one length needed")
            return -1
        done = []
        for a, n in zip(buffer_addresses, capacities):
            if self.register_memory(a, n) != 0:
                for b in done:
                    self.unregister_memory(b)
                return -1
            done.append(a)
        return 0

    def batch_unregister_memory(self, buffer_addresses):
        ret = 0
        for a in buffer_addresses:
            if self.unregister_memory(a) != 0:
                ret = -1
        return ret

    # ---- peers ----

    def _peer(self, target):
        eng = self._eng()
        with _Shared.lock:
            p = _Shared.peers.get(target)
        if p is not None and p.alive:
            return p
        fresh = eng.open_peer(target)
        with _Shared.lock:
            old = _Shared.peers.get(target)
            if old is not None and old.alive:
                keep, drop = old, fresh
            else:
                keep, drop = fresh, old
            _Shared.peers[target] = keep
        if drop is not None:
            drop.close()
        return keep

    def send_probe(self, target_hostname):
        """0 when the peer answers, -1 otherwise."""
        try:
            self._peer(target_hostname)
            return 0
        except OSError as e:
            log.error("peer %s: %s", target_hostname, e.strerror)
            return -1

    def get_first_buffer_address(self, segment_name):
        try:
            regions = [r for r in self._peer(segment_name).regions()
                       if r["fence_slots"] == 0]
        except OSError:
            return 0
        return min(r["base"] for r in regions) if regions else 0

    # ---- transfers ----

    def _batch(self, n):
        b = getattr(self._local, "batch", None)
        if b is None or b.closed or b.capacity < n:
            if b is not None and not b.closed:
                b.close()
            b = self._eng().batch(max(n, 64))
            self._local.batch = b
        return b

    def _submit(self, b, op, target, bufs, peers, lens, note):
        """Submit, waiting out overlapping writes in flight; the first
        index."""
        peer = self._peer(target)
        if op == kvt.OP_WRITE:
            return _while_busy(lambda: b.write(peer, bufs, peers, lens,
                                               notify=note))
        return _while_busy(lambda: b.read(peer, bufs, peers, lens,
                                          notify=note))

    def _sync_one(self, op, target, buf, peer_addr, length):
        """One block, the short path (submit, wait, status in one call)."""
        try:
            b = self._batch(1)
            peer = self._peer(target)
            sync = b.write_sync if op == kvt.OP_WRITE else b.read_sync
            try:
                _while_busy(lambda: sync(peer, buf, peer_addr, length,
                                         SYNC_TIMEOUT))
            except TimeoutError:
                self._local.batch = None
                b.close()       # pending: kept alive by the engine
                raise
            return 0
        except (OSError, TypeError, ValueError) as e:
            log.error("transfer to %s: %s", target, e)
            return -1

    def _sync(self, op, target, bufs, peers, lens, note=None):
        if isinstance(bufs, int) and note is None:
            return self._sync_one(op, target, bufs, peers, lens)
        n = 1 if isinstance(bufs, int) else len(bufs)
        if not isinstance(bufs, int) and (len(peers) != n or len(lens) != n):
            log.error("batch transfer: buffers, peer addresses and lengths "
                      "differ in length (%d, %d, %d)", n, len(peers), len(lens))
            return -1
        if n == 0:
            return 0
        try:
            b = self._batch(n)
            first = self._submit(b, op, target, bufs, peers, lens, note)
            self._settle(b)
            st = b.status(first, n) if n > 1 else [b.status(first)]
        except (OSError, TypeError, ValueError) as e:
            log.error("transfer to %s: %s", target, e)
            return -1
        bad = [s for s in st if s != 0]
        if bad:
            log.error("transfer to %s: %d of %d requests failed: %s", target,
                      len(bad), n, os.strerror(-bad[0]))
            return -1
        b.reset()
        return 0

    def _settle(self, b):
        """Wait until every request of b settled: kvt settles each within
        its peer timeout, so this ends; past SYNC_TIMEOUT the batch is
        left to finish alone (its memory stays) and the call fails."""
        try:
            b.wait(SYNC_TIMEOUT)
        except TimeoutError:
            self._local.batch = None
            b.close()       # pending: kept alive by the engine
            raise

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address,
                            length, transport_hint=""):
        return self._sync(kvt.OP_WRITE, target_hostname, buffer,
                          peer_buffer_address, length)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address,
                           length, transport_hint=""):
        return self._sync(kvt.OP_READ, target_hostname, buffer,
                          peer_buffer_address, length)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address,
                      length, opcode, notify=None, transport_hint=""):
        return self._sync(opcode, target_hostname, buffer, peer_buffer_address,
                          length, _note_bytes(notify))

    def batch_transfer_sync_write(self, target_hostname, buffers,
                                  peer_buffer_addresses, lengths,
                                  transport_hint=""):
        return self._sync(kvt.OP_WRITE, target_hostname, list(buffers),
                          list(peer_buffer_addresses), list(lengths))

    def batch_transfer_sync_read(self, target_hostname, buffers,
                                 peer_buffer_addresses, lengths,
                                 transport_hint=""):
        return self._sync(kvt.OP_READ, target_hostname, list(buffers),
                          list(peer_buffer_addresses), list(lengths))

    def batch_transfer_sync(self, target_hostname, buffers,
                            peer_buffer_addresses, lengths, opcode,
                            notify=None, transport_hint=""):
        return self._sync(opcode, target_hostname, list(buffers),
                          list(peer_buffer_addresses), list(lengths),
                          _note_bytes(notify))

    # ---- asynchronous ----

    def _async_submit(self, op, target, bufs, peers, lens):
        n = 1 if isinstance(bufs, int) else len(bufs)
        if not isinstance(bufs, int) and (len(peers) != n or len(lens) != n):
            log.error("batch transfer: lists of different lengths")
            return -1
        try:
            b = self._eng().batch(max(n, 1))
            try:
                first = self._submit(b, op, target, bufs, peers, lens, None)
            except BaseException:
                b.close()
                raise
        except (OSError, TypeError, ValueError) as e:
            log.error("transfer to %s: %s", target, e)
            return -1
        entry = _Async(b, first, n)
        with self._async_lock:
            bid = self._next_id
            self._next_id += 1
            self._async[bid] = entry
        with _Shared.lock:
            _Shared.outstanding[id(entry)] = entry
        return bid

    def transfer_submit_write(self, target_hostname, buffer,
                              peer_buffer_address, length, transport_hint=""):
        """A batch id for transfer_check_status(), or -1."""
        return self._async_submit(kvt.OP_WRITE, target_hostname, buffer,
                                  peer_buffer_address, length)

    def transfer_submit_read(self, target_hostname, buffer,
                             peer_buffer_address, length, transport_hint=""):
        return self._async_submit(kvt.OP_READ, target_hostname, buffer,
                                  peer_buffer_address, length)

    def batch_transfer_async_write(self, target_hostname, buffers,
                                   peer_buffer_addresses, lengths,
                                   transport_hint=""):
        bid = self._async_submit(kvt.OP_WRITE, target_hostname, list(buffers),
                                 list(peer_buffer_addresses), list(lengths))
        return bid if bid > 0 else 0

    def batch_transfer_async_read(self, target_hostname, buffers,
                                  peer_buffer_addresses, lengths,
                                  transport_hint=""):
        bid = self._async_submit(kvt.OP_READ, target_hostname, list(buffers),
                                 list(peer_buffer_addresses), list(lengths))
        return bid if bid > 0 else 0

    def transfer_check_status(self, batch_id):
        """1 done, 0 pending, -1 failed (or unknown id), -2 timed out.  A
        final answer forgets the id."""
        with self._async_lock:
            e = self._async.get(batch_id)
        if e is None:
            return -1
        with e.lock:
            try:
                pending = e.batch.poll()
            except OSError:
                pending = 0
            if pending:
                return -2 if time.monotonic() - e.t0 > SYNC_TIMEOUT else 0
            b = e.batch
            st = b.status(e.first, e.n) if e.n > 1 else [b.status(e.first)]
            with self._async_lock:
                self._async.pop(batch_id, None)
            with _Shared.lock:
                _Shared.outstanding.pop(id(e), None)
            b.close()
        return 1 if all(x == 0 for x in st) else -1

    def get_batch_transfer_status(self, batch_ids):
        """Wait for every batch: 0 when all succeeded, -1 otherwise."""
        ret = 0
        for bid in batch_ids:
            with self._async_lock:
                entry = self._async.get(bid)
            if entry is None:
                ret = -1
                continue
            end = time.monotonic() + SYNC_TIMEOUT
            while entry.poll() != 0 and time.monotonic() < end:
                time.sleep(0.00005)
            if self.transfer_check_status(bid) != 1:
                ret = -1
        return ret

    # ---- notifications ----

    def get_notifies(self):
        """Notifications received so far: [TransferNotify]."""
        out = []
        eng = self._eng()
        while True:
            got = eng.notifications(32)
            out += [TransferNotify(name, msg.decode(errors="replace"))
                    for name, msg in got]
            if len(got) < 32:
                return out


def _note_bytes(notify):
    if notify is None:
        return None
    msg = notify.msg if isinstance(notify, TransferNotify) else notify
    return msg.encode() if isinstance(msg, str) else bytes(msg)

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
import ctypes
import enum
import errno
import json
import logging
import operator
import os
import socket
import threading
import time

import kvt
from kvt.compat import await_regions

__all__ = ["TransferEngine", "TransferNotify", "TransferOpcode", "Read",
           "Write"]

log = logging.getLogger("kvt.compat.mooncake")


def _sync_timeout():
    """How long a synchronous call waits in all (seconds): a bound far
    past kvt's own peer timeout, after which a request is reported failed.
    MC_TRANSFER_TIMEOUT (Mooncake's, at least 5 s) sets it;
    KVT_MOONCAKE_SYNC_TIMEOUT too, taking precedence."""
    if "KVT_MOONCAKE_SYNC_TIMEOUT" in os.environ:
        return float(os.environ["KVT_MOONCAKE_SYNC_TIMEOUT"])
    if "MC_TRANSFER_TIMEOUT" in os.environ:
        return float(max(5, int(os.environ["MC_TRANSFER_TIMEOUT"])))
    return 120.0


SYNC_TIMEOUT = _sync_timeout()

_PROTOCOLS = {
    "tcp": ["tcp"],
    "rdma": ["rdma"],
    "nvlink": ["nvlink"],
    "shm": ["shm"],
    "auto": [],
}


class TransferOpcode(enum.IntEnum):
    """Mooncake's values: Read 0, Write 1 (READ, WRITE: the same)."""
    Read = 0
    Write = 1
    READ = 0
    WRITE = 1


Read = TransferOpcode.Read
Write = TransferOpcode.Write

# Mooncake's build switches, as its callers test them: kvt's compatible
# class serves none of these protocols ("nvlink" here is kvt's own).
SUPPORT_CUDA = False
SUPPORT_MNNVL = False
SUPPORT_INTRA_NVLINK = False
SUPPORT_HIP = False
SUPPORT_EFA = False
SUPPORT_MUSA = False


def _kvt_op(opcode):
    """kvt's op for a Mooncake opcode; ValueError for any other value."""
    try:
        code = operator.index(opcode)
    except TypeError:
        code = None
    if code == TransferOpcode.Read:
        return kvt.OP_READ
    if code == TransferOpcode.Write:
        return kvt.OP_WRITE
    raise ValueError("opcode %r: TransferOpcode.Read (0) or Write (1)"
                     % (opcode,))


def _logged_op(call, opcode):
    """kvt's op for a Mooncake opcode, or None with the refusal logged."""
    try:
        return _kvt_op(opcode)
    except ValueError as e:
        log.error("%s: %s", call, e)
        return None


def _env_true(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes",
                                                         "on")


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
    managed = {}        # addr -> length: allocate_managed_buffer's own
    pool = None         # _Pool of managed buffers
    first = None        # the first buffer registered (Mooncake's buffers[0])
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


def _while_busy(call, own_overlap=None):
    """call(), again while kvt refuses it for overlapping a write in
    flight (EBUSY), polling the outstanding batches meanwhile; at most
    SYNC_TIMEOUT.  own_overlap(): did the call overlap itself?  Then it
    is called again at once with allow_overlap (no other write can end
    that refusal)."""
    end = time.monotonic() + SYNC_TIMEOUT
    together = False
    while True:
        try:
            return call(together)
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > end:
                raise
            if not together and own_overlap is not None and own_overlap():
                together = True
                continue
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


def _protocol(protocol):
    """The protocol asked for, after Mooncake's MC_FORCE_TCP."""
    if _env_true("MC_FORCE_TCP"):
        return "tcp"
    return protocol


def _hint(protocol, asked):
    """How to ask for a protocol that works."""
    if asked != protocol:
        return " (MC_FORCE_TCP asked for tcp)"
    return ("; ask for \"tcp\", \"shm\" or \"auto\" (every transport "
            "kvt has), or set MC_FORCE_TCP=1 to run tcp whatever is asked")


def _env_args(protocol):
    """kvt options from the MC_* variables that map onto one."""
    args = []
    if os.environ.get("MC_SLICE_SIZE"):
        args += ["--kvt-slice", str(int(os.environ["MC_SLICE_SIZE"]))]
    rdma = []
    if os.environ.get("MC_NUM_QP_PER_EP"):
        rdma.append("qps=%d" % int(os.environ["MC_NUM_QP_PER_EP"]))
    if os.environ.get("MC_MAX_WR"):
        rdma.append("sq=%d" % int(os.environ["MC_MAX_WR"]))
    if rdma and protocol == "rdma":
        args += ["--kvt-pmd", "rdma," + ",".join(rdma)]
    return args


def _engine_args(local_hostname, metadata_server, protocol, device_name):
    if protocol not in _PROTOCOLS:
        raise ValueError("protocol %r: kvt serves %s" %
                         (protocol, ", ".join(sorted(_PROTOCOLS))))
    args = ["--"]
    env = _env_args(protocol)
    for pmd in _PROTOCOLS[protocol]:
        if not any(a.startswith(pmd + ",") for a in env):
            args += ["--kvt-pmd", pmd]
    args += env
    args += ["--kvt-listen", _listen_addr(local_hostname)]
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


def _listen_addr(local_hostname):
    """kvt's --kvt-listen for Mooncake's local_hostname: "ip", "ip:port",
    a host name, or IPv6 ("::1", "[::1]:port").  kvt's control and tcp
    paths speak IPv4: IPv6 loopback is taken as 127.0.0.1, another IPv6
    address is refused (ValueError)."""
    text = (local_hostname or "").strip()
    port = "0"
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest.startswith(":") and rest[1:].isdigit():
            port = rest[1:]
    elif text.count(":") > 1:
        host = text
    else:
        host, _, p = text.rpartition(":")
        if host and p.isdigit():
            port = p
        else:
            host = text
    if ":" in host:
        if host not in ("::1", "0:0:0:0:0:0:0:1"):
            raise ValueError("local address %r: kvt listens on IPv4 only (give "
                             "an IPv4 address or a host name)" % local_hostname)
        host = "127.0.0.1"
    if host in ("", "localhost"):
        host = "127.0.0.1"
    try:
        socket.inet_aton(host)
    except OSError:
        try:
            host = socket.gethostbyname(host)
        except OSError as e:
            raise ValueError("local address %r: %s" % (local_hostname, e))
    return "%s:%s" % (host, port)


def _peer_addr(target):
    """A peer's name as kvt opens it: IPv6 loopback ("[::1]:port") is
    127.0.0.1 (the peer listens there: see _listen_addr)."""
    if target.startswith("["):
        host, _, rest = target[1:].partition("]")
        if host in ("::1", "0:0:0:0:0:0:0:1") and rest.startswith(":"):
            return "127.0.0.1" + rest
    return target


class _Pool:
    """Mooncake's managed buffers come from a pool it allocates and
    registers when it starts (PASS_ALLOC=1 skips it); those larger than
    what is left get memory of their own.  First fit, 4 KiB pieces."""

    def __init__(self, base, size):
        self.base, self.size = base, size
        self.free = [(base, size)]      # sorted, coalesced
        self.used = {}                  # addr -> size

    def take(self, n):
        n = (max(n, 1) + 4095) & ~4095
        for i, (a, s) in enumerate(self.free):
            if s >= n:
                self.free[i:i + 1] = [(a + n, s - n)] if s > n else []
                self.used[a] = n
                return a
        return 0

    def give(self, addr):
        n = self.used.pop(addr, None)
        if n is None:
            return False
        self.free.append((addr, n))
        self.free.sort()
        merged = []
        for a, s in self.free:
            if merged and merged[-1][0] + merged[-1][1] == a:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((a, s))
        self.free = merged
        return True


#: Bytes of the managed-buffer pool an engine starts with (Mooncake's
#: is 2 GiB of lazily backed memory; kvt's shareable memory is backed
#: when allocated, so the pool is smaller and says so).
POOL_BYTES = int(os.environ.get("KVT_MOONCAKE_POOL", str(64 << 20)))


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


def _scalar(v):
    """An int from an int-like (numpy's integers too)."""
    return operator.index(v)


def _column(v):
    """An address or length column as kvt takes it in one call: a list or
    tuple as it is (its items converted in C, numpy integers included), a
    buffer of 8-byte integers (numpy) as it is, another integer array
    converted to uint64 at once."""
    if isinstance(v, (list, tuple)):
        return v
    dtype = getattr(v, "dtype", None)
    if dtype is not None:
        if dtype.kind not in "iu":
            raise TypeError("an integer array is needed, not %s" % dtype)
        return v if dtype.itemsize == 8 and v.flags.c_contiguous else \
            v.astype("uint64")
    return list(v)


def _overlapping(peers, lens):
    """Do two entries of one call write the same destination bytes?"""
    spans = sorted(zip((int(p) for p in peers), (int(n) for n in lens)))
    return any(a + n > b for (a, n), (b, _) in zip(spans, spans[1:]))


def _make_pool(eng):
    """The managed-buffer pool, allocated and registered; None when it
    cannot be (logged: managed buffers then get memory of their own)."""
    try:
        base = eng.alloc(POOL_BYTES)
        region = eng.register(base, POOL_BYTES)
    except OSError as e:
        log.warning("no managed-buffer pool (%d bytes): %s", POOL_BYTES, e)
        return None
    _Shared.regions[base] = [region, POOL_BYTES, 1]
    _Shared.first = base
    return _Pool(base, POOL_BYTES)


class TransferEngine:
    """mooncake.engine.TransferEngine over kvt."""

    TransferOpcode = TransferOpcode

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
        asked = protocol
        protocol = _protocol(protocol)
        try:
            args = _engine_args(local_hostname, metadata_server, protocol,
                                device_name)
        except ValueError as e:
            log.error("initialize: %s", e)
            return -1
        with _Shared.lock:
            if _Shared.engine is not None and (_Shared.pid != os.getpid() or
                                               _Shared.engine.closed):
                # Inherited through fork (not ours), or closed: start anew.
                _Shared.engine = None
                _Shared.users = 0
                _Shared.regions = {}
                _Shared.peers = {}
                _Shared.managed = {}
            if _Shared.engine is None:
                try:
                    _Shared.engine = kvt.Engine(args)
                except OSError as e:
                    log.error("initialize(%r, %r): %s%s", local_hostname,
                              protocol, e.strerror, _hint(protocol, asked))
                    return -1
                _Shared.protocol = protocol
                _Shared.pid = os.getpid()
                _Shared.pool = None
                _Shared.first = None
            if not self._serves(protocol):
                log.error("initialize: protocol %r is served by no transport "
                          "here (running: %s)%s", protocol,
                          ", ".join(self._running()) or "none",
                          _hint(protocol, asked))
                if _Shared.users == 0:
                    _Shared.engine.close()
                    _Shared.engine = None
                return -1
            if not self._initialized:
                _Shared.users += 1
            self._initialized = True
            if _Shared.pool is None and POOL_BYTES > 0 and \
                    not _env_true("PASS_ALLOC"):
                _Shared.pool = _make_pool(_Shared.engine)
        return 0

    def initialize_ext(self, local_hostname, metadata_server, protocol,
                       device_name, metadata_type=None):
        return self.initialize(local_hostname, metadata_server, protocol,
                               device_name)

    @staticmethod
    def _running():
        return sorted({p["pmd"] for p in _Shared.engine.ports()})

    @classmethod
    def _serves(cls, protocol):
        """Does the process's engine have a port of protocol's transport?"""
        pmds = set(cls._running())
        if protocol == "auto":
            return bool(pmds)
        return set(_PROTOCOLS[protocol]) <= pmds

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
        """The kvt.Engine underneath (Mooncake returns its C++ engine).
        Callers may use kvt's own API on it (register, open_peer, batch,
        notifications, ports); it is shared by every TransferEngine of the
        process, so closing it ends them all (the next initialize starts
        a fresh one).  It is not Mooncake's InnerTransferEngine: code that
        hands it to Mooncake's own C++ (mooncake.pg, the store's HiCache
        layer) cannot use it."""
        return self._eng()

    def get_local_ip(self):
        return self._eng().listen_addr.rpartition(":")[0]

    # ---- memory ----

    def register_memory(self, buffer_addr, capacity, location=None):
        """Register [buffer_addr, +capacity) for both directions; location
        "cpu:N", "cuda:N", or None / "*" (Mooncake's wildcard: detected).
        0/-1."""
        try:
            eng = self._eng()
            buffer_addr, capacity = _scalar(buffer_addr), _scalar(capacity)
            with _Shared.lock:
                r = _Shared.regions.get(buffer_addr)
                if r is not None and r[1] == capacity:
                    r[2] += 1
                    return 0
            loc = None if location in (None, "", "*") else location
            region = eng.register(buffer_addr, capacity, loc)
        except (OSError, TypeError, ValueError) as e:
            log.error("register_memory(%#x, %d): %s", buffer_addr, capacity, e)
            return -1
        with _Shared.lock:
            _Shared.regions[buffer_addr] = [region, capacity, 1]
            if _Shared.first is None:
                _Shared.first = buffer_addr
        return 0

    def unregister_memory(self, buffer_addr):
        buffer_addr = _scalar(buffer_addr)
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
            if _Shared.first == buffer_addr:
                _Shared.first = next(iter(_Shared.regions), None)
        return 0

    def batch_register_memory(self, buffer_addresses, capacities):
        try:
            buffer_addresses = list(buffer_addresses)
            capacities = list(capacities)
        except TypeError:
            buffer_addresses = capacities = None
        if buffer_addresses is None or len(buffer_addresses) != len(capacities):
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

    def allocate_managed_buffer(self, length):
        """Memory registered here for transfers (every local transport can
        share it): its address, or 0.  From the pool while it lasts."""
        try:
            eng = self._eng()
            length = _scalar(length)
            with _Shared.lock:
                addr = _Shared.pool.take(length) if _Shared.pool else 0
            if addr:
                return addr
            addr = eng.alloc(length)
        except (OSError, TypeError, ValueError) as e:
            log.error("allocate_managed_buffer(%r): %s", length, e)
            return 0
        if self.register_memory(addr, length) != 0:
            eng.free(addr)
            return 0
        with _Shared.lock:
            _Shared.managed[addr] = length
        return addr

    def free_managed_buffer(self, buffer_addr, length):
        """Free what allocate_managed_buffer gave.  0/-1."""
        buffer_addr = _scalar(buffer_addr)
        with _Shared.lock:
            if _Shared.pool is not None and _Shared.pool.give(buffer_addr):
                return 0
            known = _Shared.managed.pop(buffer_addr, None)
        if known is None:
            log.error("free_managed_buffer(%#x): not a managed buffer",
                      buffer_addr)
            return -1
        ret = self.unregister_memory(buffer_addr)
        try:
            self._eng().free(buffer_addr)
        except OSError as e:
            log.error("free_managed_buffer(%#x): %s", buffer_addr, e)
            return -1
        return ret

    @staticmethod
    def _registered(addr, length):
        """Is [addr, addr + length) inside memory registered here?"""
        with _Shared.lock:
            return any(a <= addr and addr + length <= a + r[1]
                       for a, r in _Shared.regions.items())

    def write_bytes_to_buffer(self, dest_address, src, length):
        """Copy length bytes of src (bytes) to dest_address, which must lie
        in registered memory (Mooncake copies anywhere).  0/-1."""
        dest_address, length = _scalar(dest_address), _scalar(length)
        src = bytes(src)
        if length > len(src) or not self._registered(dest_address, length):
            log.error("write_bytes_to_buffer(%#x, %d): outside registered "
                      "memory, or longer than the bytes given", dest_address,
                      length)
            return -1
        ctypes.memmove(dest_address, src, length)
        return 0

    def read_bytes_from_buffer(self, source_address, length):
        """length bytes at source_address, which must lie in registered
        memory (ValueError otherwise)."""
        source_address, length = _scalar(source_address), _scalar(length)
        if not self._registered(source_address, length):
            raise ValueError("read_bytes_from_buffer(%#x, %d): outside "
                             "registered memory" % (source_address, length))
        return ctypes.string_at(source_address, length)

    # ---- peers ----

    def _peer(self, target):
        eng = self._eng()
        target = _peer_addr(target)
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

    def _is_self(self, segment_name):
        host, _, port = _peer_addr(segment_name).rpartition(":")
        ip, _, mine = self._eng().listen_addr.rpartition(":")
        return port == mine and host in (ip, "127.0.0.1", "localhost",
                                         socket.gethostname())

    def get_first_buffer_address(self, segment_name):
        """This engine's own name: the first buffer registered here (the
        managed-buffer pool, as in Mooncake); a peer's: the lowest region
        it exports (its pool, if it is this class and registered nothing
        else below it).  0 when there is none."""
        try:
            if self._is_self(segment_name):
                with _Shared.lock:
                    return _Shared.first or 0
            regions = [r for r in self._peer(segment_name).regions()
                       if r["fence_slots"] == 0]
        except (OSError, ValueError):
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
        """Submit, waiting out overlapping writes in flight; the index of
        its one status (a list of blocks is one submission).  Entries of
        this one call that write the same bytes go together (their order
        among themselves is undefined, as in Mooncake): only other calls'
        writes are waited for."""
        peer = self._peer(target)
        many = not isinstance(lens, int)
        # A list is one submission with one status (kvt_submit_blocks).
        if many:
            fn = b.write_blocks if op == kvt.OP_WRITE else b.read_blocks
        else:
            fn = b.write if op == kvt.OP_WRITE else b.read
        own = None
        if op == kvt.OP_WRITE and many:
            def own():
                return _overlapping(peers, lens)

        # Empty entries are done (as in Mooncake): a list leaves them out
        # in C as it converts (None: nothing was left to move).
        extra = {"skip_empty": True} if many else {}

        def submit():
            return _while_busy(lambda together: fn(peer, bufs, peers, lens,
                                                   notify=note,
                                                   allow_overlap=together,
                                                   **extra),
                               own)
        try:
            return submit()
        except OSError as e:
            if e.errno != errno.ERANGE or not await_regions(peer, peers, lens):
                raise
        return submit()

    def _sync_one(self, op, target, buf, peer_addr, length):
        """One block, the short path (submit, wait, status in one call)."""
        try:
            b = self._batch(1)
            peer = self._peer(target)
            sync = b.write_sync if op == kvt.OP_WRITE else b.read_sync

            def once():
                _while_busy(lambda together: sync(peer, buf, peer_addr, length,
                                                  SYNC_TIMEOUT))
            try:
                try:
                    once()
                except OSError as e:
                    if e.errno != errno.ERANGE or \
                            not await_regions(peer, peer_addr, length):
                        raise
                    once()
            except TimeoutError:
                self._local.batch = None
                b.close()       # pending: kept alive by the engine
                raise
            return 0
        except (OSError, TypeError, ValueError) as e:
            log.error("transfer to %s: %s", target, e)
            return -1

    @staticmethod
    def _args(bufs, peers, lens, many):
        """The call's arguments as kvt takes them; many: lists or arrays
        (their empty entries are left out in C when submitted), else one
        block."""
        if not many:
            return _scalar(bufs), _scalar(peers), _scalar(lens)
        bufs, peers, lens = _column(bufs), _column(peers), _column(lens)
        if not (len(bufs) == len(peers) == len(lens)):
            raise ValueError("buffers, peer addresses and lengths differ in "
                             "length (%d, %d, %d)" % (len(bufs), len(peers),
                                                      len(lens)))
        return bufs, peers, lens

    def _sync(self, op, target, bufs, peers, lens, note=None, many=True):
        try:
            bufs, peers, lens = self._args(bufs, peers, lens, many)
        except (TypeError, ValueError) as e:
            log.error("transfer to %s: %s", target, e)
            return -1
        if not many:
            if lens == 0:
                return 0
            if note is None:
                return self._sync_one(op, target, bufs, peers, lens)
        n = len(lens) if many else 1
        if n == 0:
            return 0
        try:
            b = self._batch(n)
            first = self._submit(b, op, target, bufs, peers, lens, note)
            if first is None:
                return 0        # every entry was empty
            self._settle(b)
            err = b.status(first)
        except (OSError, TypeError, ValueError) as e:
            log.error("transfer to %s: %s", target, e)
            return -1
        if err != 0:
            log.error("transfer to %s of %d block(s) failed: %s", target, n,
                      os.strerror(-err))
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
                          peer_buffer_address, length, many=False)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address,
                           length, transport_hint=""):
        return self._sync(kvt.OP_READ, target_hostname, buffer,
                          peer_buffer_address, length, many=False)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address,
                      length, opcode, notify=None, transport_hint=""):
        """One block in the direction of opcode (TransferOpcode.Read or
        Write; any other value: -1)."""
        op = _logged_op("transfer_sync", opcode)
        if op is None:
            return -1
        return self._sync(op, target_hostname, buffer, peer_buffer_address,
                          length, _note_bytes(notify), many=False)

    def batch_transfer_sync_write(self, target_hostname, buffers,
                                  peer_buffer_addresses, lengths,
                                  transport_hint=""):
        return self._sync(kvt.OP_WRITE, target_hostname, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync_read(self, target_hostname, buffers,
                                 peer_buffer_addresses, lengths,
                                 transport_hint=""):
        return self._sync(kvt.OP_READ, target_hostname, buffers,
                          peer_buffer_addresses, lengths)

    def batch_transfer_sync(self, target_hostname, buffers,
                            peer_buffer_addresses, lengths, opcode,
                            notify=None, transport_hint=""):
        op = _logged_op("batch_transfer_sync", opcode)
        if op is None:
            return -1
        return self._sync(op, target_hostname, buffers, peer_buffer_addresses,
                          lengths, _note_bytes(notify))

    # ---- asynchronous ----

    def _async_submit(self, op, target, bufs, peers, lens, many=True):
        """A batch id for transfer_check_status(), or 0 (Mooncake's
        answer for a submission that failed)."""
        try:
            bufs, peers, lens = self._args(bufs, peers, lens, many)
            n = len(lens) if many else 1
            b = self._eng().batch(max(n, 1))
            try:
                first = self._submit(b, op, target, bufs, peers, lens,
                                     None) if n > 0 else 0
            except BaseException:
                b.close()
                raise
        except (OSError, TypeError, ValueError) as e:
            log.error("transfer to %s: %s", target, e)
            return 0
        entry = _Async(b, first or 0, 0 if first is None else min(n, 1))
        with self._async_lock:
            bid = self._next_id
            self._next_id += 1
            self._async[bid] = entry
        with _Shared.lock:
            _Shared.outstanding[id(entry)] = entry
        return bid

    def transfer_submit_write(self, target_hostname, buffer,
                              peer_buffer_address, length, transport_hint=""):
        """A batch id for transfer_check_status(), or 0."""
        return self._async_submit(kvt.OP_WRITE, target_hostname, buffer,
                                  peer_buffer_address, length, many=False)

    def transfer_submit_read(self, target_hostname, buffer,
                             peer_buffer_address, length, transport_hint=""):
        return self._async_submit(kvt.OP_READ, target_hostname, buffer,
                                  peer_buffer_address, length, many=False)

    def batch_transfer_async_write(self, target_hostname, buffers,
                                   peer_buffer_addresses, lengths,
                                   transport_hint=""):
        return self._async_submit(kvt.OP_WRITE, target_hostname, buffers,
                                  peer_buffer_addresses, lengths)

    def batch_transfer_async_read(self, target_hostname, buffers,
                                  peer_buffer_addresses, lengths,
                                  transport_hint=""):
        return self._async_submit(kvt.OP_READ, target_hostname, buffers,
                                  peer_buffer_addresses, lengths)

    def batch_transfer_async(self, target_hostname, buffers,
                             peer_buffer_addresses, lengths, opcode,
                             transport_hint=""):
        """As batch_transfer_async_write/read, by opcode (any other
        value: 0)."""
        op = _logged_op("batch_transfer_async", opcode)
        if op is None:
            return 0
        return self._async_submit(op, target_hostname, buffers,
                                  peer_buffer_addresses, lengths)

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
            st = [] if e.n == 0 else \
                b.status(e.first, e.n) if e.n > 1 else [b.status(e.first)]
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

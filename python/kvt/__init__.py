# SPDX-License-Identifier: BSD-3-Clause
"""kvt: KV-cache transfer between the processes of a serving deployment.

One engine per process::

    import kvt
    eng = kvt.Engine(["--kvt-pmd", "shm", "--kvt-pmd", "tcp"])
    region = eng.register(addr, length)            # exported read/write
    peer = eng.open_peer("10.0.0.2:7000")
    with eng.batch(128) as b:
        first = b.write(peer, local_addrs, remote_addrs, 65536)
        b.wait(5.0)
        b.check(first, len(local_addrs))           # raises on a failure

Addresses are ints; arrays of them (numpy, array('Q'), lists) go through
the buffer protocol in one call.  Every wait and submission releases the
GIL.  Errors raise OSError (errno, kvt's reason).  ``kvt.compat.mooncake``
has a TransferEngine with Mooncake's methods on top of this.
"""
import atexit
import errno
import os
import threading
import weakref

from kvt import _kvt

__all__ = ["Engine", "Region", "Peer", "Batch", "FenceTable", "KvtError",
           "OP_READ", "OP_WRITE"]

OP_READ = _kvt.OP_READ
OP_WRITE = _kvt.OP_WRITE
NOTIFY_MAX = _kvt.NOTIFY_MAX

#: What "remote" may say in Engine.register.
#: Priority classes of a submission (kvt_submit_opts.priority): urgent
#: work overtakes normal, normal overtakes bulk, and bulk still moves.
PRIORITIES = {"normal": _kvt.PRIO_NORMAL, "urgent": _kvt.PRIO_URGENT,
              "bulk": _kvt.PRIO_BULK}


def _flags(allow_overlap, priority):
    if priority not in PRIORITIES:
        raise ValueError("priority must be one of %s, not %r"
                         % (", ".join(PRIORITIES), priority))
    return ((_kvt.SUBMIT_ALLOW_OVERLAP if allow_overlap else 0) |
            PRIORITIES[priority] << _kvt.PRIO_SHIFT)


_PERMS = {"": 0, "-": 0, "r": _kvt.MEM_REMOTE_READ, "w": _kvt.MEM_REMOTE_WRITE,
          "rw": _kvt.MEM_REMOTE_READ | _kvt.MEM_REMOTE_WRITE,
          "wr": _kvt.MEM_REMOTE_READ | _kvt.MEM_REMOTE_WRITE}

KvtError = OSError

_lock = threading.Lock()
_current = None         # the open Engine of this process
_owner_pid = None       # the process that opened it


def _closed():
    return OSError(errno.ENODEV, "the kvt engine is closed")


def address_of(obj):
    """An int address for an int, a numpy array or a torch tensor."""
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "data_ptr"):
        return int(obj.data_ptr())
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        return int(iface["data"][0])
    raise TypeError("an address (int), a numpy array or a tensor is needed, "
                    "not %s" % type(obj).__name__)


def _length_of(obj):
    if hasattr(obj, "nbytes"):
        return int(obj.nbytes)
    if hasattr(obj, "numel") and hasattr(obj, "element_size"):
        return int(obj.numel() * obj.element_size())
    raise TypeError("a length is needed with a plain address")


def _fence_arg(fence):
    """A fence is (table, slot, room), table being FenceTable.handle."""
    if fence is None:
        return None
    table, slot, room = fence
    if isinstance(table, FenceTable):
        table = table.handle
    return (int(table), int(slot), int(room))


def _note_arg(notify):
    if notify is None:
        return None
    if isinstance(notify, str):
        notify = notify.encode()
    return notify


class _Child:
    """Something the engine handed out: dead once the engine closes."""

    def __init__(self, engine, handle):
        self._engine = engine
        self._h = handle
        engine._children.add(self)

    def _handle(self):
        if self._h == 0:
            raise _closed()
        return self._h

    def _invalidate(self):
        self._h = 0

    @property
    def closed(self):
        return self._h == 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Region(_Child):
    """A registered range of memory."""

    def __init__(self, engine, handle, addr, length):
        super().__init__(engine, handle)
        self.addr = addr
        self.length = length

    def close(self):
        """Unregister (EBUSY while local transfers still use it)."""
        if self._h != 0:
            _kvt.mem_unregister(self._h)
            self._h = 0

    unregister = close

    def __repr__(self):
        return "<kvt.Region %#x+%d%s>" % (self.addr, self.length,
                                          " closed" if self.closed else "")


class Peer(_Child):
    """Another engine, opened by "host:port" (or by name through etcd)."""

    def __init__(self, engine, handle, addr):
        super().__init__(engine, handle)
        self.addr = addr

    def close(self):
        if self._h != 0:
            h, self._h = self._h, 0
            _kvt.peer_close(h)

    @property
    def alive(self):
        """False once the peer was lost (its transfers fail)."""
        return self._h != 0 and _kvt.peer_state(self._h) == 0

    def regions(self):
        """The regions the peer exports: dicts of base, len, flags, ..."""
        return _kvt.peer_regions(self._handle())

    def stats(self):
        return _kvt.peer_stats(self._handle())

    def __repr__(self):
        return "<kvt.Peer %s%s>" % (self.addr, " closed" if self.closed else "")


class Batch(_Child):
    """Requests submitted together and polled together.

    One thread at a time per batch; use one batch per thread.
    """

    def __init__(self, engine, handle, capacity):
        super().__init__(engine, handle)
        self.capacity = capacity
        self.used = 0

    def _submit(self, op, peer, local, remote, length, fence, notify,
                allow_overlap, priority):
        flags = _flags(allow_overlap, priority)
        first = _kvt.submit(self._handle(), peer._handle(), op, local, remote,
                            length, flags, _fence_arg(fence), _note_arg(notify))
        self.used = max(self.used, first + 1)
        return first

    def write(self, peer, local, remote, length, *, fence=None, notify=None,
              allow_overlap=False, priority="normal"):
        """Write local -> remote.  Each of local, remote and length is an
        int or an array (all arrays of one length): one submission of that
        many requests.  fence=(table, slot, room) and notify=bytes go after
        all of them; priority is "urgent", "normal" or "bulk".  Returns the
        index of the first request."""
        return self._submit(OP_WRITE, peer, local, remote, length, fence,
                            notify, allow_overlap, priority)

    def read(self, peer, local, remote, length, *, fence=None, notify=None,
             allow_overlap=False, priority="normal"):
        """Read remote -> local; arguments as write()."""
        return self._submit(OP_READ, peer, local, remote, length, fence,
                            notify, allow_overlap, priority)

    def _pages(self, op, peer, page_size, local, remote, local_idx,
               remote_idx, fence, notify, allow_overlap, priority):
        flags = _flags(allow_overlap, priority)
        i = _kvt.submit_pages(self._handle(), peer._handle(), op, page_size,
                              local, remote, local_idx, remote_idx, flags,
                              _fence_arg(fence), _note_arg(notify))
        self.used = max(self.used, i + 1)
        return i

    def write_pages(self, peer, page_size, local, remote, local_idx,
                    remote_idx, *, fence=None, notify=None,
                    allow_overlap=False, priority="normal"):
        """Write pages local + local_idx[k] * page_size to remote +
        remote_idx[k] * page_size (index arrays: uint32 or uint64 numpy
        arrays, array(), lists).  One request, one status."""
        return self._pages(OP_WRITE, peer, page_size, local, remote,
                           local_idx, remote_idx, fence, notify, allow_overlap,
                           priority)

    def read_pages(self, peer, page_size, local, remote, local_idx,
                   remote_idx, *, fence=None, notify=None,
                   allow_overlap=False, priority="normal"):
        return self._pages(OP_READ, peer, page_size, local, remote,
                           local_idx, remote_idx, fence, notify, allow_overlap,
                           priority)

    def _blocks(self, op, peer, local, remote, length, fence, notify,
                allow_overlap, priority, skip_empty):
        flags = _flags(allow_overlap, priority)
        i = _kvt.submit_blocks(self._handle(), peer._handle(), op, local,
                               remote, length, flags, _fence_arg(fence),
                               _note_arg(notify), skip_empty)
        if i is not None:
            self.used = max(self.used, i + 1)
        return i

    def write_blocks(self, peer, local, remote, length, *, fence=None,
                     notify=None, allow_overlap=False, priority="normal",
                     skip_empty=False):
        """Write block k: length[k] bytes from local[k] to remote[k]
        (lists or tuples of ints, or uint64 numpy arrays, converted in C
        in one pass; an int stands for every block).  One submission with
        one status: status(index) reports the whole list.  It takes one
        slot per run of blocks in one local and one remote region.
        skip_empty: blocks of length 0 are left out (as Mooncake does)
        instead of refused; None when none is left."""
        return self._blocks(OP_WRITE, peer, local, remote, length, fence,
                            notify, allow_overlap, priority, skip_empty)

    def read_blocks(self, peer, local, remote, length, *, fence=None,
                    notify=None, allow_overlap=False, priority="normal",
                    skip_empty=False):
        """Read block k from remote[k] into local[k]; as write_blocks()."""
        return self._blocks(OP_READ, peer, local, remote, length, fence,
                            notify, allow_overlap, priority, skip_empty)

    def write_sync(self, peer, local, remote, length, timeout=10.0):
        """One write, waited for: None once its bytes are placed; OSError
        when it failed or was refused, TimeoutError when it is still
        pending after timeout seconds (the batch then keeps it).  The
        batch must be empty; it is empty again afterwards."""
        self._sync(OP_WRITE, peer, local, remote, length, timeout)

    def read_sync(self, peer, local, remote, length, timeout=10.0):
        """One read, waited for; as write_sync()."""
        self._sync(OP_READ, peer, local, remote, length, timeout)

    def _sync(self, op, peer, local, remote, length, timeout):
        st = _kvt.xfer_sync(self._handle(), peer._handle(), op, local, remote,
                            length, int(timeout * 1e6))
        if st == 0:
            return
        if st == -errno.ETIMEDOUT and self.poll() > 0:
            self.used = 1
            raise TimeoutError(errno.ETIMEDOUT,
                               "still pending after %.3f s" % timeout)
        raise OSError(-st, "transfer failed: %s" % os.strerror(-st))

    def poll(self):
        """Requests not yet settled (no waiting)."""
        return _kvt.poll(self._handle())

    def wait(self, timeout=10.0):
        """Wait until every request settled; TimeoutError after timeout
        seconds.  A settled request may have failed: see status()."""
        if not _kvt.wait(self._handle(), int(timeout * 1e6)):
            raise TimeoutError(errno.ETIMEDOUT,
                               "requests still pending after %.3f s" % timeout)

    def status(self, i, n=None):
        """0 done, -EINPROGRESS pending, or the request's -errno; with n,
        a list of n statuses from i."""
        if n is None:
            return _kvt.status(self._handle(), i)
        return _kvt.status(self._handle(), i, n)

    def first_error(self, first, n):
        """0 when requests [first, first+n) all succeeded, else the first
        one's -errno (-EINPROGRESS: pending); one scan in C, no list."""
        return _kvt.first_error(self._handle(), first, n)

    def check(self, first=0, n=None):
        """Raise OSError for the first failed request of [first, first+n)."""
        st = _kvt.first_error(self._handle(), first,
                              self.used - first if n is None else n)
        if st == -errno.EINPROGRESS:
            raise OSError(errno.EINPROGRESS, "a request is still pending")
        if st != 0:
            raise OSError(-st, "transfer failed: %s" % os.strerror(-st))

    def reset(self):
        """Empty the batch for reuse (EBUSY while requests are pending)."""
        _kvt.batch_reset(self._handle())
        self.used = 0

    def close(self):
        if self._h != 0:
            h, self._h = self._h, 0
            try:
                _kvt.batch_free(h)
            except OSError:
                # Requests still pending: their memory must stay.
                self._engine._orphans.append(h)


class FenceTable(_Child):
    """Fence slots a sender's writes end in: arm(slot, room), hand
    (handle, slot, room) to the sender, then wait(slot)."""

    def __init__(self, engine, handle, nslots):
        super().__init__(engine, handle)
        self.nslots = nslots
        self.handle = _kvt.fence_handle(handle)

    def arm(self, slot, room):
        _kvt.fence_arm(self._handle(), slot, room)

    def ref(self, slot, room):
        """The (table, slot, room) a sender passes as fence=."""
        return (self.handle, slot, room)

    def poll(self, slot):
        """True once the armed room arrived; False while empty; OSError
        ESTALE when another room's value is there."""
        st = _kvt.fence_poll(self._handle(), slot)
        if st == -errno.ESTALE:
            raise OSError(errno.ESTALE, "slot %d holds another room" % slot)
        return st == 0

    def wait(self, slot, timeout=10.0):
        """Return once the armed room arrived (its data is in place);
        TimeoutError, or OSError ESTALE for another room's value."""
        st = _kvt.fence_wait(self._handle(), slot, int(timeout * 1e6))
        if st == -errno.ETIMEDOUT:
            raise TimeoutError(errno.ETIMEDOUT,
                               "slot %d: nothing after %.3f s" % (slot, timeout))
        if st == -errno.ESTALE:
            raise OSError(errno.ESTALE, "slot %d holds another room" % slot)

    def close(self):
        if self._h != 0:
            h, self._h = self._h, 0
            _kvt.fence_destroy(h)


class Engine:
    """The process's kvt engine.

    args: kvt_init's arguments after the program name: EAL arguments, then
    "--", then --kvt-* options.  Without a "--" every argument is kvt's
    (EAL then picks defaults that need no hugepages).  The default idle
    policy is kvt's own ("wait": an idle lcore blocks until a submission
    or its transport wakes it, so an idle engine costs no cpu); set_idle()
    changes it.  Worker cpus are claimed so that the engines of several
    processes on one node do not collide.
    """

    def __init__(self, args=None):
        global _current, _owner_pid
        args = list(args or [])
        if "--" not in args:
            args = ["--"] + args
        with _lock:
            if _current is not None and _owner_pid == os.getpid():
                raise OSError(errno.EALREADY,
                              "a kvt engine is already open in this process")
            self._children = weakref.WeakSet()
            self._orphans = []
            self._open = False
            _kvt.init(args)
            self._open = True
            _current = self
            _owner_pid = os.getpid()

    @property
    def closed(self):
        return not self._open

    def _check(self):
        if not self._open:
            raise _closed()

    def close(self):
        """Stop the engine: pending work fails with ECANCELED, every
        handle it gave becomes unusable.  Idempotent."""
        global _current
        with _lock:
            if not self._open:
                return
            for c in list(self._children):
                c._invalidate()
            self._open = False
            if _current is self:
                _current = None
            if _owner_pid == os.getpid():
                _kvt.fini()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def listen_addr(self):
        """"ip:port" peers open this engine by."""
        self._check()
        return _kvt.listen_addr()

    @property
    def name(self):
        self._check()
        return _kvt.name()

    def set_idle(self, policy):
        """wait (the default), wait:US, spin, pause or sleep:US."""
        self._check()
        _kvt.set_idle(policy)

    def register(self, addr, length=None, loc=None, remote="rw"):
        """Register memory: addr an int, numpy array or tensor; loc
        "cpu:N", "cuda:N" or None (detected); remote "rw", "r", "w" or ""
        (private: usable only as the local side)."""
        self._check()
        a = address_of(addr)
        n = _length_of(addr) if length is None else int(length)
        flags = _PERMS[remote] if isinstance(remote, str) else int(remote)
        return Region(self, _kvt.mem_register(a, n, loc, flags), a, n)

    def alloc(self, length, loc="cpu:0"):
        """Memory every transport can share (kvt_mem_alloc): its address.
        Free it with free()."""
        self._check()
        return _kvt.mem_alloc(int(length), loc)

    def free(self, addr):
        self._check()
        _kvt.mem_free(int(addr))

    def open_peer(self, addr, timeout=None):
        """Open another engine ("host:port", or a name with etcd);
        timeout in seconds, None for the engine's --kvt-timeout."""
        self._check()
        ms = 0 if timeout is None else max(1, int(timeout * 1000))
        return Peer(self, _kvt.peer_open(addr, ms), addr)

    def batch(self, capacity=1024):
        """A batch of up to capacity requests."""
        self._check()
        return Batch(self, _kvt.batch_alloc(int(capacity)), int(capacity))

    def fence_table(self, nslots, loc=None):
        self._check()
        return FenceTable(self, _kvt.fence_create(int(nslots), loc),
                          int(nslots))

    def notifications(self, max=32):
        """Received notifications: [(sender name, bytes)]."""
        self._check()
        return _kvt.notify_poll(max)

    def ports(self):
        """Each port's name, transport, lcore, NUMA node and counters."""
        self._check()
        return _kvt.ports()


def current():
    """The open engine of this process, or None."""
    return _current if _owner_pid == os.getpid() else None


def _forked_child():
    # The child has the parent's memory but none of its engine threads:
    # what was open is unusable there and must not be shut down twice.
    global _current, _owner_pid
    if _current is not None:
        for c in list(_current._children):
            c._invalidate()
        _current._open = False
    _current = None
    _owner_pid = None


def _at_exit():
    eng = current()
    if eng is not None:
        eng.close()


os.register_at_fork(after_in_child=_forked_child)
atexit.register(_at_exit)

# SPDX-License-Identifier: BSD-3-Clause
"""kvt.compat.mooncake against what Mooncake's own wheel does, item by
item: its opcode values, MC_FORCE_TCP, the argument types its clients
pass, its buffer helpers, its return codes, repeated destinations in one
call, and a fresh start after the engine was closed.  Two processes each,
every byte checked."""
import time

import pytest

from test_compat import SETUP, compat_target

#: A source of 1 MiB filled with 7, registered, in the initiator.
SRC = SETUP % "tcp" + """
assert rc == 0
src = np.full(1 << 20, 7, dtype=np.uint8)
assert te.register_memory(src.ctypes.data, src.nbytes) == 0
S = src.ctypes.data
"""


def values(node, n=1 << 20, start=0):
    """The distinct byte values of the target's bytes [start, n)."""
    return node.run("result = sorted(set(int(x) for x in np.unique(buf[%d:%d])))"
                    % (start, n))


def test_opcode_values(nodes):
    """Read is 0 and Write 1, as in Mooncake (kvt had them as 1 and 2, so
    Mooncake's write read, overwriting the caller's buffer); any other
    value is refused and moves nothing."""
    t, session, base = compat_target(nodes, "tcp", size=1 << 20)
    i = nodes()
    got = i.run(SRC + """
import kvt.compat.mooncake as mc
names = [int(mc.TransferOpcode.Read), int(mc.TransferOpcode.Write),
         int(mc.Read), int(mc.Write), TransferEngine.TransferOpcode is mc.TransferOpcode]
r = [te.transfer_sync(%r, S, %d, 4096, 1),             # a write
     int(src[0]),
     te.transfer_sync(%r, S + 4096, %d, 4096, mc.TransferOpcode.Read),
     te.transfer_sync(%r, S, %d, 4096, 7),
     te.batch_transfer_sync(%r, [S], [%d + 8192], [4096], 1),
     te.batch_transfer_sync(%r, [S], [%d], [4096], 2)]
bid = te.batch_transfer_async(%r, [S], [%d + 12288], [4096], mc.Write)
r += [bid > 0, te.get_batch_transfer_status([bid]),
      te.batch_transfer_async(%r, [S], [%d], [4096], -1)]
result = [names, r]
""" % ((session, base) * 7))
    assert got[0] == [0, 1, 0, 1, True]
    # write; src untouched; read back; 7 refused; batch write; 2 refused;
    # async write by opcode; an unknown opcode's batch id is 0.
    assert got[1] == [0, 7, 0, -1, 0, -1, True, 0, 0]
    assert values(t, 4096) == [7]
    assert values(t, 16384, 8192) == [7]


def test_force_tcp(nodes):
    """SGLang and vLLM ask for "rdma"; MC_FORCE_TCP=1 makes it tcp, as in
    Mooncake.  Without it, on a host without an RDMA device, initialize
    fails and says which protocols would work."""
    t, session, base = compat_target(nodes, "tcp", size=1 << 20)
    i = nodes()
    assert i.run("""
import logging, os, io, numpy as np
from kvt.compat.mooncake import TransferEngine
log = io.StringIO()
logging.getLogger("kvt.compat.mooncake").addHandler(logging.StreamHandler(log))
te = TransferEngine()
no = te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "")
os.environ["MC_FORCE_TCP"] = "1"
yes = te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "")
src = np.full(4096, 3, dtype=np.uint8)
te.register_memory(src.ctypes.data, src.nbytes)
w = te.transfer_sync_write(%r, src.ctypes.data, %d, 4096)
ports = sorted(p["pmd"] for p in te.get_engine().ports())
result = [no, yes, w, ports, "MC_FORCE_TCP" in log.getvalue(),
          "tcp" in log.getvalue()]
""" % (session, base)) == [-1, 0, 0, ["tcp"], True, True]
    assert values(t, 4096) == [3]


def test_numpy_arguments_and_empty_entries(nodes):
    """Addresses and lengths as numpy arrays (int64 and uint64), as lists
    of numpy integers, and with zero-length entries (done, as Mooncake
    does): all move their bytes."""
    t, session, base = compat_target(nodes, "tcp", size=1 << 20)
    i = nodes()
    assert i.run(SRC + """
T = %d
a = np.array([S, S], dtype=np.uint64)
r = [te.batch_transfer_sync_write(%r, a, np.array([T, T + 4096], dtype=np.int64),
                                  np.array([4096, 4096], dtype=np.int64)),
     te.batch_transfer_sync_write(%r, [np.uint64(S)], [np.int64(T + 8192)],
                                  [np.int32(4096)]),
     te.batch_transfer_sync_write(%r, [S, S, S], [T + 12288, T, T + 16384],
                                  [4096, 0, 4096]),
     te.batch_transfer_sync_write(%r, np.array([S, S]), np.array([T, T + 20480]),
                                  np.array([0, 4096])),
     te.batch_transfer_sync_write(%r, [S], [T], [0]),
     te.transfer_sync_write(%r, np.uint64(S), np.int64(T + 24576), np.int64(4096)),
     te.transfer_sync_write(%r, S, T, 0),
     te.batch_transfer_sync_write(%r, [S], [T], [1.5])]
result = r
""" % ((base,) + (session,) * 8)) == [0, 0, 0, 0, 0, 0, 0, -1]
    assert values(t, 28672) == [7]


def test_managed_buffers(nodes):
    """allocate_managed_buffer and its byte helpers, as Mooncake's own
    tests use them: the memory is registered and carries a transfer."""
    t, session, base = compat_target(nodes, "tcp", size=1 << 20)
    i = nodes()
    got = i.run(SETUP % "tcp" + """
m = te.allocate_managed_buffer(1 << 16)
r = [m != 0, te.write_bytes_to_buffer(m, b"kvt managed" * 100, 1100),
     te.read_bytes_from_buffer(m, 11).decode()]
r.append(te.transfer_sync_write(%r, m, %d, 1100))
r.append(te.write_bytes_to_buffer(4096, b"x", 1))     # not registered
try:
    te.read_bytes_from_buffer(4096, 1)
    r.append("read anywhere")
except ValueError:
    r.append("refused")
r += [te.free_managed_buffer(m, 1 << 16), te.free_managed_buffer(m, 1 << 16)]
result = r
""" % (session, base))
    assert got == [True, 0, "kvt managed", 0, -1, "refused", 0, -1]
    assert t.run("result = bytes(buf[:11]).decode()") == "kvt managed"


def test_register_with_location(nodes):
    i = nodes()
    assert i.run(SETUP % "tcp" + """
a = np.zeros(1 << 16, dtype=np.uint8)
b = np.zeros(1 << 16, dtype=np.uint8)
result = [te.register_memory(a.ctypes.data, a.nbytes, "cpu:0"),
          te.register_memory(b.ctypes.data, b.nbytes, "*"),
          te.register_memory(a.ctypes.data + 1, 10, "nowhere:9")]
""") == [0, 0, -1]


def test_submit_failures_return_zero(nodes):
    """Mooncake's transfer_submit_write answers 0 (not a batch id) when
    the submission fails, as its batch_transfer_async_* do."""
    t, session, base = compat_target(nodes, "tcp", size=1 << 20)
    i = nodes()
    assert i.run(SRC + """
result = [te.transfer_submit_write("127.0.0.1:1", S, %d, 4096),
          te.transfer_submit_write(%r, 4096, %d, 4096),
          te.transfer_submit_write(%r, S, %d + (1 << 20), 4096),
          te.batch_transfer_async_write(%r, [S], [%d], [4096, 4]),
          te.transfer_submit_write(%r, S, %d, 4096) > 0]
""" % (base, session, base, session, base, session, base, session,
       base)) == [0, 0, 0, 0, True]


def test_repeated_destinations(nodes):
    """Entries of one call that write the same bytes: Mooncake moves them
    and returns 0 at once; kvt refused its own submission and the class
    waited 120 s.  Now they go together (their order is undefined), in
    a synchronous and an asynchronous call, and a call of 100 000 such
    entries takes well under the timeout."""
    t, session, base = compat_target(nodes, "tcp", size=1 << 20)
    i = nodes()
    got = i.run(SRC + """
T = %d
t0 = time.time()
r = [te.batch_transfer_sync_write(%r, [S, S + 4096], [T, T], [4096, 4096])]
bid = te.batch_transfer_async_write(%r, [S] * 3, [T + 4096] * 3, [4096] * 3)
r.append(te.get_batch_transfer_status([bid]))
n = 100000
r.append(te.batch_transfer_sync_write(%r, np.full(n, S, dtype=np.uint64),
                                      T + 8192 + (np.arange(n, dtype=np.uint64) %% 64) * 64,
                                      np.full(n, 64, dtype=np.uint64)))
result = [r, time.time() - t0]
""" % (base, session, session, session))
    assert got[0] == [0, 0, 0]
    assert got[1] < 60, "repeated destinations took %.1f s" % got[1]
    assert values(t, 12288) == [7]


def test_closed_engine_starts_anew(nodes):
    """After the shared engine was closed, a new TransferEngine's
    initialize starts a fresh one that works (it returned 0 and every
    later call failed)."""
    t, session, base = compat_target(nodes, "tcp", size=1 << 20)
    i = nodes()
    assert i.run(SRC + """
te.get_engine().close()
te2 = TransferEngine()
r = [te2.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")]
src2 = np.full(4096, 5, dtype=np.uint8)
r.append(te2.register_memory(src2.ctypes.data, src2.nbytes))
r.append(te2.transfer_sync_write(%r, src2.ctypes.data, %d, 4096))
result = r
""" % (session, base)) == [0, 0, 0]
    assert values(t, 4096) == [5]


def test_ipv6_local_addresses(nodes):
    """IPv6 loopback as Mooncake's local_hostname ("::1", "[::1]:port")
    starts the engine (it returned -1); a peer named "[::1]:port" is
    reached; another IPv6 address is refused with -1, not half served."""
    t = nodes()
    port = t.run("""
import numpy as np
from kvt.compat.mooncake import TransferEngine
te = TransferEngine()
assert te.initialize("[::1]:0", "P2PHANDSHAKE", "tcp", "") == 0
buf = np.zeros(1 << 20, dtype=np.uint8)
assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
result = [te.get_rpc_port(), buf.ctypes.data]
""")
    i = nodes()
    assert i.run("""
import numpy as np
from kvt.compat.mooncake import TransferEngine
te = TransferEngine()
r = [te.initialize("::1", "P2PHANDSHAKE", "tcp", "")]
src = np.full(4096, 9, dtype=np.uint8)
r.append(te.register_memory(src.ctypes.data, src.nbytes))
r.append(te.transfer_sync_write("[::1]:%d", src.ctypes.data, %d, 4096))
result = r
""" % (port[0], port[1])) == [0, 0, 0]
    assert values(t, 4096) == [9]
    other = nodes()
    assert other.run("""
from kvt.compat.mooncake import TransferEngine
result = TransferEngine().initialize("fe80::1", "P2PHANDSHAKE", "tcp", "")
""") == -1

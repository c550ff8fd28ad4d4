# SPDX-License-Identifier: BSD-3-Clause
"""kvt.compat.mooncake.TransferEngine driven the way SGLang and vLLM drive
Mooncake's, between two processes, every byte checked."""
import pytest

from conftest import NodeError

SETUP = """
import hashlib, os, time, numpy as np
from concurrent.futures import ThreadPoolExecutor
from kvt.compat.mooncake import TransferEngine
te = TransferEngine()
rc = te.initialize("127.0.0.1", "P2PHANDSHAKE", %r, "")
"""


def compat_target(make, protocol, size=64 << 20):
    t = make()
    rc = t.run(SETUP % protocol + """
buf = np.zeros(%d, dtype=np.uint8)
assert te.register_memory(buf.ctypes.data, buf.nbytes) == 0
result = [rc, "127.0.0.1:%%d" %% te.get_rpc_port(), buf.ctypes.data]
""" % size)
    assert rc[0] == 0
    return t, rc[1], rc[2]


def digest(node, var, n):
    return node.run("result = hashlib.sha256(%s[:%d].tobytes()).hexdigest()"
                    % (var, n))


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_sglang_sequence(nodes, protocol):
    """initialize, batch_register_memory, get_rpc_port, then
    batch_transfer_sync_write from a thread pool (a call per layer), then
    batch_unregister_memory."""
    t, session, base = compat_target(nodes, protocol)
    i = nodes()
    rets = i.run(SETUP % protocol + """
assert rc == 0
k_cache = np.random.default_rng(1).integers(0, 256, 32 << 20, dtype=np.uint8)
v_cache = np.random.default_rng(2).integers(0, 256, 32 << 20, dtype=np.uint8)
assert te.batch_register_memory([k_cache.ctypes.data, v_cache.ctypes.data],
                                [k_cache.nbytes, v_cache.nbytes]) == 0
assert te.get_rpc_port() > 0
layers, blk, per = 32, 16384, 64
def layer(l):
    src, off = (k_cache, 0) if l %% 2 == 0 else (v_cache, 32 << 20)
    bufs = [src.ctypes.data + (l * per + j) * blk for j in range(per)]
    dsts = [%d + off + (l * per + j) * blk for j in range(per)]
    return te.batch_transfer_sync_write(%r, bufs, dsts, [blk] * per)
with ThreadPoolExecutor(8) as pool:
    result = list(pool.map(layer, range(layers)))
assert te.batch_unregister_memory([k_cache.ctypes.data, v_cache.ctypes.data]) == 0
""" % (base, session))
    assert rets == [0] * 32
    # Even layers carried K into the first half, odd ones V into the second.
    want = i.run("""
out = np.zeros(64 << 20, dtype=np.uint8)
for l in range(layers):
    src, off = (k_cache, 0) if l % 2 == 0 else (v_cache, 32 << 20)
    a = l * per * blk
    out[off + a:off + a + per * blk] = src[a:a + per * blk]
result = hashlib.sha256(out.tobytes()).hexdigest()
""")
    assert digest(t, "buf", 64 << 20) == want


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_vllm_sequence(nodes, protocol):
    """register_memory, then transfer_sync_write per block from a pool,
    reads back with transfer_sync_read."""
    t, session, base = compat_target(nodes, protocol)
    i = nodes()
    assert i.run(SETUP % protocol + """
src = np.random.default_rng(3).integers(0, 256, 16 << 20, dtype=np.uint8)
back = np.zeros(16 << 20, dtype=np.uint8)
assert te.register_memory(src.ctypes.data, src.nbytes) == 0
assert te.register_memory(back.ctypes.data, back.nbytes) == 0
blk = 256 << 10
def one(j):
    return te.transfer_sync_write(%r, src.ctypes.data + j * blk, %d + j * blk, blk)
with ThreadPoolExecutor(16) as pool:
    w = list(pool.map(one, range(64)))
r = te.transfer_sync_read(%r, back.ctypes.data, %d, 16 << 20)
assert te.unregister_memory(src.ctypes.data) == 0
result = [w == [0] * 64, r, bool((back == src).all())]
""" % (session, base, session, base)) == [True, 0, True]
    assert digest(t, "buf", 16 << 20) == digest(i, "src", 16 << 20)


def test_async_and_status(nodes):
    t, session, base = compat_target(nodes, "tcp")
    i = nodes()
    assert i.run(SETUP % "tcp" + """
src = np.full(8 << 20, 9, dtype=np.uint8)
te.register_memory(src.ctypes.data, src.nbytes)
bid = te.transfer_submit_write(%r, src.ctypes.data, %d, 8 << 20)
st = 0
t0 = time.time()
while st == 0 and time.time() - t0 < 30:
    st = te.transfer_check_status(bid)
ids = [te.batch_transfer_async_write(%r, [src.ctypes.data], [%d + (8 << 20)], [4096])
       for _ in range(4)]
result = [bid > 0, st, te.get_batch_transfer_status(ids),
          te.transfer_check_status(12345)]
""" % (session, base, session, base)) == [True, 1, 0, -1]
    assert t.run("result = bool((buf[:8 << 20] == 9).all())")


def test_overlapping_writes_both_land(nodes):
    """kvt refuses overlapping writes in flight; the compat class waits
    for the first, so both calls succeed and the later one wins."""
    t, session, base = compat_target(nodes, "tcp")
    i = nodes()
    assert i.run(SETUP % "tcp" + """
a = np.full(4 << 20, 1, dtype=np.uint8)
b = np.full(4 << 20, 2, dtype=np.uint8)
te.register_memory(a.ctypes.data, a.nbytes)
te.register_memory(b.ctypes.data, b.nbytes)
with ThreadPoolExecutor(2) as pool:
    f1 = pool.submit(te.transfer_sync_write, %r, a.ctypes.data, %d, 4 << 20)
    f2 = pool.submit(te.transfer_sync_write, %r, b.ctypes.data, %d, 4 << 20)
    result = [f1.result(), f2.result()]
""" % (session, base, session, base)) == [0, 0]
    vals = t.run("result = sorted(set(int(x) for x in np.unique(buf[:4 << 20])))")
    assert vals in ([1], [2]), "the two writes mixed: %s" % vals


def test_errors_are_returned(nodes):
    t, session, base = compat_target(nodes, "tcp", size=1 << 20)
    i = nodes()
    got = i.run(SETUP % "tcp" + """
src = np.zeros(1 << 20, dtype=np.uint8)
r = []
r.append(te.batch_register_memory([src.ctypes.data], [1, 2]))
r.append(te.register_memory(src.ctypes.data, src.nbytes))
r.append(te.batch_transfer_sync_write(%r, [src.ctypes.data] * 2, [%d], [4, 4]))
r.append(te.transfer_sync_write(%r, src.ctypes.data, %d + (1 << 20), 4096))
r.append(te.transfer_sync_write(%r, 4096, %d, 4096))
r.append(te.transfer_sync_write("127.0.0.1:1", src.ctypes.data, %d, 4096))
r.append(te.unregister_memory(12345))
r.append(te.transfer_sync_write(%r, src.ctypes.data, %d, 4096))
result = r
""" % (session, base, session, base, session, base, base, session, base))
    assert got == [-1, 0, -1, -1, -1, -1, -1, 0]


@pytest.mark.parametrize("protocol", ["rdma", "nvlink", "infiniband-ish"])
def test_initialize_refuses_unserved_protocol(nodes, protocol):
    """No RDMA device and no GPU here: Mooncake's wheel would run tcp and
    return 0; kvt says no."""
    i = nodes()
    assert i.run(SETUP % protocol + "result = rc") == -1
    with pytest.raises(NodeError):
        i.run("te.get_engine()")


def test_engines_share_one_kvt(nodes):
    i = nodes()
    assert i.run(SETUP % "tcp" + """
te2 = TransferEngine()
rc2 = te2.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
result = [rc, rc2, te.get_rpc_port() == te2.get_rpc_port(),
          te.get_engine() is te2.get_engine()]
""") == [0, 0, True, True]

# SPDX-License-Identifier: BSD-3-Clause
"""kvt's native Python API between processes: bytes in place, fences,
notifications, page lists, threads, errors, a peer that dies, an engine
closed under its objects, and memory that does not grow."""
import errno
import time

import pytest

from conftest import NodeError, engine_code, target

PMDS = [["shm"], ["tcp"]]
SIZES = [1, 7, 4096, 65535, 1 << 20, (16 << 20) + 3, 64 << 20]


def initiator(make, pmds, src=64 << 20):
    i = make()
    i.run(engine_code(pmds) + """
src = np.zeros(%d, dtype=np.uint8)
dst = np.zeros(%d, dtype=np.uint8)
reg_src = eng.register(src, remote="")
reg_dst = eng.register(dst, remote="")
rng = np.random.default_rng(7)
""" % (src, src))
    return i


@pytest.mark.parametrize("pmds", PMDS, ids=lambda p: p[0])
def test_write_read_sizes(nodes, pmds):
    t, addr, base, _ = target(nodes, pmds)
    i = initiator(nodes, pmds)
    i.run("peer = eng.open_peer(%r)\nb = eng.batch(4)" % addr)
    for n in SIZES:
        ok = i.run("""
n = %d
src[:n] = rng.integers(0, 256, n, dtype=np.uint8)
dst[:n] = 0
b.write(peer, src.ctypes.data, %d, n)
b.wait(30); b.check(); b.reset()
b.read(peer, dst.ctypes.data, %d, n)
b.wait(30); b.check(); b.reset()
result = bool((src[:n] == dst[:n]).all())
""" % (n, base, base))
        assert ok, "%d bytes did not come back intact" % n
    # What the target holds is what was written last.
    assert t.run("result = buf[:%d].tobytes().hex()" % 64) == \
        i.run("result = src[:64].tobytes().hex()")


@pytest.mark.parametrize("pmds", PMDS, ids=lambda p: p[0])
def test_many_blocks_one_call(nodes, pmds):
    t, addr, base, _ = target(nodes, pmds)
    i = initiator(nodes, pmds)
    assert i.run("""
peer = eng.open_peer(%r)
n, blk = 4000, 4096
src[:n * blk] = rng.integers(0, 256, n * blk, dtype=np.uint8)
perm = rng.permutation(n).astype(np.uint64)
local = np.uint64(src.ctypes.data) + np.arange(n, dtype=np.uint64) * np.uint64(blk)
remote = np.uint64(%d) + perm * np.uint64(blk)
b = eng.batch(n)
first = b.write(peer, local, remote, blk)
b.wait(60); b.check(first, n)
result = first
""" % (addr, base)) == 0
    # Block k went to slot perm[k].
    got = t.run("result = buf[:4000 * 4096].tobytes().hex()")
    want = i.run("""
out = np.zeros(n * blk, dtype=np.uint8)
for k in range(n):
    p = int(perm[k]); out[p * blk:(p + 1) * blk] = src[k * blk:(k + 1) * blk]
result = out.tobytes().hex()
""")
    assert got == want


@pytest.mark.parametrize("pmds", PMDS, ids=lambda p: p[0])
@pytest.mark.parametrize("dtype", ["uint32", "uint64", "list"])
def test_page_lists(nodes, pmds, dtype):
    t, addr, base, _ = target(nodes, pmds)
    i = initiator(nodes, pmds)
    ok = i.run("""
peer = eng.open_peer(%r)
n, ps = 512, 16384
src[:n * ps] = rng.integers(0, 256, n * ps, dtype=np.uint8)
li = rng.permutation(n)
ri = rng.permutation(n)
conv = (lambda a: [int(x) for x in a]) if %r == "list" else (lambda a: a.astype(%r))
b = eng.batch(2)
k = b.write_pages(peer, ps, src.ctypes.data, %d, conv(li), conv(ri))
b.wait(60); b.check()
b.reset()
dst[:n * ps] = 0
b.read_pages(peer, ps, dst.ctypes.data, %d, conv(li), conv(ri))
b.wait(60); b.check()
result = bool((dst[:n * ps] == src[:n * ps]).all())
""" % (addr, dtype, dtype if dtype != "list" else "uint64", base, base))
    assert ok


@pytest.mark.parametrize("pmds", PMDS, ids=lambda p: p[0])
@pytest.mark.parametrize("kind", ["list", "uint64"])
def test_block_lists(nodes, pmds, kind):
    """Blocks of mixed sizes from two registered arrays, scattered over the
    target, as one block list with one status: every byte lands and comes
    back; a bad block in the middle refuses the list and moves nothing."""
    t, addr, base, _ = target(nodes, pmds)
    i = initiator(nodes, pmds)
    assert i.run("""
peer = eng.open_peer(%r)
n, slot = 3000, 16384
lens = rng.integers(1, slot + 1, n).astype(np.uint64)
lens[::7] = 1
lens[::11] = slot
src[:] = rng.integers(0, 256, src.size, dtype=np.uint8)
dst[:] = rng.integers(0, 256, dst.size, dtype=np.uint8)
orig = [src.copy(), dst.copy()]
# Runs of five blocks alternate between the two arrays.
which = (np.arange(n) // 5) %% 2
off = np.arange(n, dtype=np.uint64) * np.uint64(slot)
loc = np.where(which == 0, np.uint64(src.ctypes.data),
               np.uint64(dst.ctypes.data)).astype(np.uint64) + off
perm = rng.permutation(n).astype(np.uint64)
rem = np.uint64(%d) + perm * np.uint64(slot)
conv = (lambda a: [int(x) for x in a]) if %r == "list" else (lambda a: a)
b = eng.batch(n)
k = b.write_blocks(peer, conv(loc), conv(rem), conv(lens))
b.wait(60)
ok = [b.status(k) == 0]
b.reset()
src[:] = 0
dst[:] = 0
k = b.read_blocks(peer, conv(loc), conv(rem), conv(lens))
b.wait(60)
ok.append(b.status(k) == 0)
arrs = [src, dst]
for j in range(n):
    a, o, ln = which[j], int(off[j]), int(lens[j])
    if not (arrs[a][o:o + ln] == orig[a][o:o + ln]).all():
        ok.append(j)
        break
result = ok
""" % (addr, base, kind)) == [True, True]
    before = t.run("result = hex(hash(buf.tobytes()))")
    for bad, err in (("loc", errno.EFAULT), ("rem", errno.ERANGE)):
        with pytest.raises(NodeError) as e:
            i.run("""
stray = np.zeros(1 << 20, dtype=np.uint8)
l2, r2 = loc.copy(), rem.copy()
if %r == "loc":
    l2[n // 2] = stray.ctypes.data
else:
    r2[n // 2] = 4096
b.reset()
b.write_blocks(peer, conv(l2), conv(r2), conv(lens))
""" % bad)
        assert e.value.errno == err
        assert i.run("result = b.poll()") == 0
    assert t.run("result = hex(hash(buf.tobytes()))") == before


@pytest.mark.parametrize("pmds", PMDS, ids=lambda p: p[0])
def test_fence_and_notification(nodes, pmds):
    t, addr, base, ft = target(nodes, pmds)
    i = initiator(nodes, pmds)
    t.run("ft.arm(3, 0xabcdef01)")
    i.run("""
peer = eng.open_peer(%r)
src[:1 << 20] = 5
b = eng.batch(1)
b.write(peer, src.ctypes.data, %d, 1 << 20, fence=(%d, 3, 0xabcdef01),
        notify=b"room 0xabcdef01 done")
b.wait(30); b.check()
""" % (addr, base, ft))
    assert t.run("""
ft.wait(3, 10.0)
ok = bool((buf[:1 << 20] == 5).all())
notes = []
t0 = time.time()
while not notes and time.time() - t0 < 10:
    notes = eng.notifications()
result = [ok, [m.decode() for _, m in notes]]
""") == [True, ["room 0xabcdef01 done"]]
    # A slot armed for another room refuses this one: ESTALE, not success.
    t.run("ft.arm(4, 99)")
    i.run("""
b.reset()
b.write(peer, src.ctypes.data, %d, 4096, fence=(%d, 4, 98))
b.wait(30); b.check()
""" % (base, ft))
    with pytest.raises(NodeError) as e:
        t.run("ft.wait(4, 5.0)")
    assert e.value.errno == errno.ESTALE


def test_three_processes(nodes):
    """One initiator writes to two targets at once; each gets its own."""
    t1, a1, b1, _ = target(nodes, ["tcp"])
    t2, a2, b2, _ = target(nodes, ["tcp"])
    i = initiator(nodes, ["tcp"])
    i.run("""
p1, p2 = eng.open_peer(%r), eng.open_peer(%r)
src[:8 << 20] = 1
src[8 << 20:16 << 20] = 2
b = eng.batch(2)
b.write(p1, src.ctypes.data, %d, 8 << 20)
b.write(p2, src.ctypes.data + (8 << 20), %d, 8 << 20)
b.wait(30); b.check()
""" % (a1, a2, b1, b2))
    assert t1.run("result = bool((buf[:8 << 20] == 1).all())")
    assert t2.run("result = bool((buf[:8 << 20] == 2).all())")


def test_sixteen_threads(nodes):
    t, addr, base, _ = target(nodes, ["shm", "tcp"])
    i = initiator(nodes, ["shm", "tcp"])
    assert i.run("""
import threading
peer = eng.open_peer(%r)
errors = []
def worker(k):
    try:
        b = eng.batch(8)
        for r in range(50):
            off = (k * 50 + r) * 65536
            src[off:off + 65536] = (k * 7 + r) %% 251
            b.write(peer, src.ctypes.data + off, %d + off, 65536)
            b.wait(30); b.check(); b.reset()
        b.close()
    except Exception as e:
        errors.append(repr(e))
th = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
[x.start() for x in th]
[x.join(120) for x in th]
result = errors
""" % (addr, base)) == []
    assert t.run("result = buf[:16 * 50 * 65536].tobytes().hex()") == \
        i.run("result = src[:16 * 50 * 65536].tobytes().hex()")


def test_peer_killed_mid_transfer(nodes):
    t, addr, base, _ = target(nodes, ["tcp"])
    i = initiator(nodes, ["tcp"])
    i.run("""
peer = eng.open_peer(%r)
n = 1024
local = np.uint64(src.ctypes.data) + np.arange(n, dtype=np.uint64) %% 64 * np.uint64(1 << 20)
remote = np.uint64(%d) + np.arange(n, dtype=np.uint64) %% 64 * np.uint64(1 << 20)
b = eng.batch(n)
first = b.write(peer, local, remote, 1 << 20, allow_overlap=True)
""" % (addr, base))
    t.kill()
    t0 = time.time()
    st = i.run("""
b.wait(10)
result = b.status(first, n)
""")
    took = time.time() - t0
    assert took < 8, "requests settled %.1f s after the peer died" % took
    failed = [s for s in st if s != 0]
    assert failed, "no request failed although the peer died"
    assert set(failed) <= {-errno.ECONNRESET, -errno.ETIMEDOUT, -errno.EPIPE}
    assert i.run("result = peer.alive") is False


def test_bad_arguments(nodes):
    t, addr, base, _ = target(nodes, ["shm"], size=1 << 20)
    i = initiator(nodes, ["shm"], src=1 << 20)
    i.run("peer = eng.open_peer(%r)\nb = eng.batch(8)" % addr)
    cases = [
        ("b.write(peer, 'x', %d, 4)" % base, "TypeError", None),
        ("b.write(peer, 4096, %d, 4)" % base, "OSError", errno.EFAULT),
        ("b.write(peer, src.ctypes.data, %d, 2 << 20)" % base, "OSError",
         errno.EFAULT),
        ("b.write(peer, src.ctypes.data, %d, 4096)" % (base + (1 << 20) - 8),
         "OSError", errno.ERANGE),
        ("b.write(peer, src.ctypes.data, 12345, 4096)", "OSError", errno.ERANGE),
        ("b.write(peer, [src.ctypes.data] * 3, [%d] * 2, 4)" % base,
         "ValueError", None),
        ("b.write(peer, np.zeros(4, dtype=np.float64), %d, 4)" % base,
         "TypeError", None),
        ("b.write(peer, src.ctypes.data, %d, 4, notify=b'x' * 300)" % base,
         "ValueError", None),
        ("b.write(peer, src.ctypes.data, %d, 0)" % base, "OSError", errno.EINVAL),
        ("b.write_pages(peer, 4096, src.ctypes.data, %d, [0, 1], [0])" % base,
         "ValueError", None),
        ("eng.register(src.ctypes.data, 4096)", "OSError", errno.EEXIST),
        ("eng.open_peer('127.0.0.1:1', timeout=1)", "OSError", None),
        ("eng.open_peer('no port')", "OSError", errno.EINVAL),
        ("eng.fence_table(0)", "OSError", errno.EINVAL),
    ]
    for code, typ, err in cases:
        with pytest.raises(NodeError) as e:
            i.run(code)
        assert e.value.type == typ, "%s: %s" % (code, e.value)
        if err is not None:
            assert e.value.errno == err, "%s: %s" % (code, e.value)
    # Nothing was lost on the way: the batch still works.
    assert i.run("""
b.reset()
b.write(peer, src.ctypes.data, %d, 4096)
b.wait(10); b.check()
result = True
""" % base)


def test_kvt_reason_in_error(nodes):
    """The OSError carries kvt's own reason, not only the errno's."""
    i = initiator(nodes, ["shm"], src=1 << 20)
    with pytest.raises(NodeError) as e:
        i.run("eng.register(src.ctypes.data + 4096, 4096)")
    assert e.value.errno == errno.EEXIST
    assert "overlap" in str(e.value) or "registered" in str(e.value)


def test_closed_engine(nodes):
    t, addr, base, ft = target(nodes, ["shm"], size=1 << 20)
    i = initiator(nodes, ["shm"], src=1 << 20)
    i.run("""
peer = eng.open_peer(%r)
b = eng.batch(8)
ftab = eng.fence_table(4)
eng.close()
eng.close()
""" % addr)
    for code in ["b.write(peer, src.ctypes.data, %d, 4)" % base, "b.wait(1)",
                 "b.status(0)", "peer.regions()",
                 "eng.register(dst)", "eng.open_peer(%r)" % addr,
                 "ftab.arm(0, 1)", "eng.ports()", "eng.listen_addr"]:
        with pytest.raises(NodeError) as e:
            i.run(code)
        assert e.value.errno == errno.ENODEV, code
    # A new engine starts in the same process.
    assert i.run(engine_code(["shm"]) + """
peer = eng.open_peer(%r)
result = len(peer.regions()) > 0
""" % addr)


def test_rss_does_not_grow(nodes):
    t, addr, base, ft = target(nodes, ["shm"], size=1 << 20)
    i = initiator(nodes, ["shm"], src=1 << 20)
    grew = i.run("""
import resource
peer = eng.open_peer(%r)
b = eng.batch(4)
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def cycles(k):
    for _ in range(k):
        b.write(peer, src.ctypes.data, %d, 4096, fence=(%d, 0, 7))
        b.wait(10); b.check(); b.reset()
cycles(2000)
before = rss()
cycles(10000)
result = rss() - before
""" % (addr, base, ft))
    assert grew < (2 << 20), "RSS grew %d bytes over 10 000 cycles" % grew


def test_fork_child_leaves_engine_alone(nodes):
    t, addr, base, _ = target(nodes, ["shm"], size=1 << 20)
    i = initiator(nodes, ["shm"], src=1 << 20)
    assert i.run("""
peer = eng.open_peer(%r)
pid = os.fork()
if pid == 0:
    import sys
    ok = kvt.current() is None
    sys.exit(0 if ok else 3)   # atexit handlers run, the engine's too
_, status = os.waitpid(pid, 0)
b = eng.batch(1)
b.write(peer, src.ctypes.data, %d, 4096)
b.wait(10); b.check()
result = os.waitstatus_to_exitcode(status)
""" % (addr, base)) == 0


def test_ports_and_stats(nodes):
    t, addr, base, _ = target(nodes, ["shm"], size=1 << 20)
    i = initiator(nodes, ["shm"], src=1 << 20)
    ports, stats = i.run("""
peer = eng.open_peer(%r)
b = eng.batch(1)
b.write(peer, src.ctypes.data, %d, 65536)
b.wait(10); b.check()
result = [eng.ports(), peer.stats()]
""" % (addr, base))
    assert ports and ports[0]["pmd"] == "shm"
    assert sum(p["write_bytes"] for p in ports) >= 65536
    assert stats["write_bytes"] >= 65536


def test_sync_calls(nodes):
    """write_sync/read_sync: bytes in place on return, errors raised, the
    batch empty again for the next call."""
    t, addr, base, _ = target(nodes, ["tcp"], size=1 << 20)
    i = initiator(nodes, ["tcp"], src=1 << 20)
    assert i.run("""
peer = eng.open_peer(%r)
b = eng.batch(1)
src[:65536] = rng.integers(0, 256, 65536, dtype=np.uint8)
for k in range(100):
    b.write_sync(peer, src.ctypes.data + 4096 * (k %% 16), %d + 4096 * (k %% 16), 4096)
b.read_sync(peer, dst.ctypes.data, %d, 65536)
result = bool((dst[:65536] == src[:65536]).all()) and b.poll() == 0
""" % (addr, base, base))
    with pytest.raises(NodeError) as e:
        i.run("b.write_sync(peer, src.ctypes.data, %d, 4096)" % (base + (1 << 20)))
    assert e.value.errno == errno.ERANGE
    assert i.run("b.write_sync(peer, src.ctypes.data, %d, 8)\nresult = 1" % base) == 1


def test_array_module_and_memoryview(nodes):
    """Any buffer of 8-byte unsigned items carries addresses: array('Q')
    and a memoryview of one work as numpy does."""
    t, addr, base, _ = target(nodes, ["shm"], size=1 << 20)
    i = initiator(nodes, ["shm"], src=1 << 20)
    assert i.run("""
from array import array
peer = eng.open_peer(%r)
src[:64 * 1024] = rng.integers(0, 256, 64 * 1024, dtype=np.uint8)
local = array('Q', [src.ctypes.data + k * 1024 for k in range(64)])
remote = memoryview(array('Q', [%d + (63 - k) * 1024 for k in range(64)]))
b = eng.batch(64)
b.write(peer, local, remote, array('Q', [1024] * 64))
b.wait(10); b.check()
b.reset()
dst[:64 * 1024] = 0
b.read(peer, dst.ctypes.data, %d, 64 * 1024)
b.wait(10); b.check()
result = all((dst[(63 - k) * 1024:(64 - k) * 1024] == src[k * 1024:(k + 1) * 1024]).all()
             for k in range(64))
""" % (addr, base, base))


@pytest.mark.parametrize("pmds", PMDS, ids=lambda p: p[0])
def test_priority_classes(nodes, pmds):
    """Each class carries bytes; an unknown class is refused before
    anything moves."""
    t, addr, base, _ = target(nodes, pmds)
    i = initiator(nodes, pmds)
    assert i.run("""
peer = eng.open_peer(%r)
b = eng.batch(8)
src[:3 << 20] = rng.integers(0, 256, 3 << 20, dtype=np.uint8)
for k, prio in enumerate(("bulk", "normal", "urgent")):
    b.write(peer, src.ctypes.data + (k << 20), %d + (k << 20), 1 << 20,
            priority=prio)
b.write_pages(peer, 4096, src.ctypes.data, %d + (3 << 20), [0, 1], [0, 1],
              priority="urgent")
b.wait(30); b.check(); b.reset()
try:
    b.write(peer, src.ctypes.data, %d, 4096, priority="soon")
    result = "accepted"
except ValueError:
    result = b.used
""" % (addr, base, base, base)) == 0
    assert t.run("result = buf[:3 << 20].tobytes().hex()") == \
        i.run("result = src[:3 << 20].tobytes().hex()")


def test_urgent_beside_bulk(nodes):
    """Urgent writes over tcp's urgent lane while bulk writes fill the data
    sockets, round after round: every round completes.  A turn used to
    judge a lane's age against a clock read before it served that lane,
    and an age that wrapped gave up a healthy connection (ECONNRESET,
    a few rounds in 100 on a quiet box)."""
    t, addr, base, _ = target(nodes, ["tcp"])
    i = initiator(nodes, ["tcp"])
    assert i.run("""
peer = eng.open_peer(%r)
b = eng.batch(64)
src[:16 << 20] = rng.integers(0, 256, 16 << 20, dtype=np.uint8)
failed = []
for r in range(200):
    off = (r %% 4) << 22
    b.write(peer, src.ctypes.data + off, %d + off, 3 << 20, priority="bulk")
    for k in range(16):
        o = off + (3 << 20) + k * 65536
        b.write(peer, src.ctypes.data + o, %d + o, 65536, priority="urgent")
    b.wait(30)
    try:
        b.check()
    except OSError as e:
        failed.append((r, e.errno))
    b.reset()
result = failed
""" % (addr, base, base)) == []
    assert t.run("result = buf[:16 << 20].tobytes().hex()") == \
        i.run("result = src[:16 << 20].tobytes().hex()")

# SPDX-License-Identifier: BSD-3-Clause
"""The cases Mooncake's own wheel tests run against its TransferEngine
(mooncake-wheel/tests: the initiator/target pair, same-host managed
buffers, the GIL, batch registration, protocols), written again here and
run against kvt's class through a shim package named mooncake
(python/tests/shim): the code under test imports
``from mooncake.engine import TransferEngine`` as theirs does.  Nothing
is fetched."""
import os

import pytest

SHIM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")
#: KVT_MOONCAKE_UPSTREAM=1 runs these cases against the mooncake package
#: the interpreter has (Mooncake's own wheel), for a side-by-side report
#: (scripts/mooncake-side-by-side).
UPSTREAM = os.environ.get("KVT_MOONCAKE_UPSTREAM") == "1"
IMPORT = """
import sys
if %r:
    sys.path.insert(0, %r)
import ctypes, random, string, threading, time
from mooncake.engine import TransferEngine
import mooncake.engine as engine
""" % (not UPSTREAM, SHIM)


@pytest.mark.skipif(UPSTREAM, reason="running against Mooncake's wheel")
def test_shim_is_kvt(nodes):
    i = nodes()
    assert i.run(IMPORT + """
import kvt.compat.mooncake
result = [TransferEngine is kvt.compat.mooncake.TransferEngine,
          int(engine.TransferOpcode.Write), engine.SUPPORT_MNNVL]
""") == [True, 1, False]


def pair(nodes, protocol="tcp"):
    """A target and an initiator that each allocate a managed buffer (the
    pool, Mooncake makes on the first one, is then the first buffer); the
    initiator's names for both."""
    t = nodes()
    target = t.run(IMPORT + """
target = TransferEngine()
assert target.initialize("127.0.0.1:0", "P2PHANDSHAKE", %r, "") == 0
assert target.allocate_managed_buffer(1 << 20) != 0
result = "127.0.0.1:%%d" %% target.get_rpc_port()
""" % protocol)
    i = nodes()
    i.run(IMPORT + """
adaptor = TransferEngine()
assert adaptor.initialize("127.0.0.1:0", "P2PHANDSHAKE", %r, "") == 0
assert adaptor.allocate_managed_buffer(1 << 20) != 0
me = "127.0.0.1:%%d" %% adaptor.get_rpc_port()
target_name = %r
def text(n):
    return "".join(random.choices(string.ascii_letters + string.digits +
                                  string.punctuation, k=n)).encode()
result = None
""" % (protocol, target))
    return t, i


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_random_write_read_circles(nodes, protocol):
    """Random strings written to the local managed buffer, written to the
    target's, the local copy cleared, read back and compared: 300
    times."""
    _, i = pair(nodes, protocol)
    assert i.run("""
src = adaptor.get_first_buffer_address(me)
dst = adaptor.get_first_buffer_address(target_name)
bad = []
for k in range(300):
    data = text(random.randint(16, 256))
    n = len(data)
    ok = [adaptor.write_bytes_to_buffer(src, data, n),
          adaptor.transfer_sync_write(target_name, src, dst, n),
          adaptor.write_bytes_to_buffer(src, bytes(n), n),
          adaptor.transfer_sync_read(target_name, src, dst, n)]
    if ok != [0] * 4 or adaptor.read_bytes_from_buffer(src, n) != data:
        bad.append((k, ok))
result = [src != 0, dst != 0, bad]
""") == [True, True, []]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_batch_write_read(nodes, asynchronous):
    """100 strings at 1 KiB offsets, written and read back as one batch
    (synchronous, or batch_transfer_async_* and
    get_batch_transfer_status), 10 rounds."""
    _, i = pair(nodes)
    assert i.run("""
base_src = adaptor.get_first_buffer_address(me)
base_dst = adaptor.get_first_buffer_address(target_name)
srcs = [base_src + k * 1024 for k in range(100)]
dsts = [base_dst + k * 1024 for k in range(100)]
def move(op, lens):
    if not %r:
        fn = adaptor.batch_transfer_sync_write if op == "w" else adaptor.batch_transfer_sync_read
        return fn(target_name, srcs, dsts, lens)
    fn = adaptor.batch_transfer_async_write if op == "w" else adaptor.batch_transfer_async_read
    bid = fn(target_name, srcs, dsts, lens)
    return -9 if bid == 0 else adaptor.get_batch_transfer_status([bid])
bad = []
for r in range(10):
    data = [text(random.randint(32, 128)) for _ in range(100)]
    lens = [len(d) for d in data]
    for s, d in zip(srcs, data):
        adaptor.write_bytes_to_buffer(s, d, len(d))
    w = move("w", lens)
    for s, n in zip(srcs, lens):
        adaptor.write_bytes_to_buffer(s, bytes(n), n)
    rd = move("r", lens)
    back = [adaptor.read_bytes_from_buffer(s, n) for s, n in zip(srcs, lens)]
    if w != 0 or rd != 0 or back != data:
        bad.append((r, w, rd))
result = bad
""" % asynchronous) == []


def test_shm_managed_buffers_one_process(nodes):
    """Two TransferEngines of one process over shm (kvt: one engine under
    both), managed buffers both ways; a write into a large managed buffer
    after it was freed fails."""
    i = nodes()
    assert i.run(IMPORT + """
initiator, target = TransferEngine(), TransferEngine()
r = [initiator.initialize("127.0.0.1:0", "P2PHANDSHAKE", "shm", ""),
     target.initialize("127.0.0.1:0", "P2PHANDSHAKE", "shm", "")]
name = "127.0.0.1:%d" % target.get_rpc_port()
src = initiator.allocate_managed_buffer(4096)
dst = target.allocate_managed_buffer(4096)
payload = b"shm-managed-buffer-payload"
n = len(payload)
r += [initiator.write_bytes_to_buffer(src, payload, n),
      initiator.transfer_sync_write(name, src, dst, n),
      target.read_bytes_from_buffer(dst, n) == payload,
      initiator.write_bytes_to_buffer(src, bytes(n), n),
      initiator.transfer_sync_read(name, src, dst, n),
      initiator.read_bytes_from_buffer(src, n) == payload]
big = 256 * 1024 * 1024 + 4096
large = target.allocate_managed_buffer(big)
r += [large != 0, initiator.transfer_sync_write(name, src, large, n),
      target.read_bytes_from_buffer(large, n) == payload,
      target.free_managed_buffer(large, big)]
r.append(initiator.transfer_sync_write(name, src, large, n) != 0)
r += [initiator.free_managed_buffer(src, 4096), target.free_managed_buffer(dst, 4096)]
result = r
""") == [0, 0, 0, 0, True, 0, 0, True, True, 0, True, 0, True, 0, 0]


def test_registration_releases_the_gil(nodes):
    """A thread that waits for its turn runs while registrations and
    unregistrations go on, with the interpreter's switch interval at 10 s
    (only a call that lets go of the GIL lets it in)."""
    i = nodes()
    assert i.run(IMPORT + """
import mmap
n, size = 2048, 4096
region = mmap.mmap(-1, n * size)
base = ctypes.addressof(ctypes.c_char.from_buffer(region))
ctypes.memset(base, 0, n * size)
addrs = [base + k * size for k in range(n)]
te = TransferEngine()
assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") == 0
arm, ran, stop = threading.Event(), threading.Event(), threading.Event()
def worker():
    while not stop.is_set():
        if arm.wait(0.1):
            arm.clear()
            ran.set()
w = threading.Thread(target=worker, daemon=True)
w.start()
def observe(call):
    ran.clear()
    arm.set()
    for k in range(n):
        assert call(k) == 0
        if ran.is_set():
            break
    arm.clear()
    return ran.is_set(), k + 1
old = sys.getswitchinterval()
sys.setswitchinterval(10.0)
try:
    seen_reg, done = observe(lambda k: te.register_memory(addrs[k], size))
    assert te.batch_unregister_memory(addrs[:done]) == 0
    assert te.batch_register_memory(addrs, [size] * n) == 0
    seen_unreg = observe(lambda k: te.unregister_memory(addrs[k]))
finally:
    sys.setswitchinterval(old)
    stop.set()
    arm.set()
result = [seen_reg, seen_unreg[0]]
""") == [True, True]


@pytest.mark.parametrize("counts", [(1, 0), (2, 1), (1, 2), (0, 1)])
def test_batch_register_mismatched_lengths(nodes, counts):
    """Lists of different lengths: -1, and no prefix stays registered (the
    same buffers register afterwards)."""
    i = nodes()
    assert i.run(IMPORT + """
te = TransferEngine()
assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") == 0
bufs = [ctypes.create_string_buffer(4096) for _ in range(2)]
addrs = [ctypes.addressof(b) for b in bufs]
result = [te.batch_register_memory(addrs[:%d], [4096] * %d),
          te.batch_register_memory(addrs, [4096, 4096]),
          te.batch_unregister_memory(addrs), te.batch_register_memory([], [])]
""" % counts) == [-1, 0, 0, 0]


@pytest.mark.parametrize("protocol", ["nvlink_intra", "hip", "efa"])
def test_unsupported_protocol(nodes, protocol):
    """A protocol this build does not serve: initialize answers -1 (by the
    host name, as Mooncake's test calls it)."""
    i = nodes()
    assert i.run(IMPORT + """
import socket
result = TransferEngine().initialize(socket.gethostname(), "P2PHANDSHAKE",
                                     %r, "")
""" % protocol) == -1

# SPDX-License-Identifier: BSD-3-Clause
"""The calls SGLang's MooncakeTransferEngine wrapper and vLLM's
MooncakeConnectorWorker make on Mooncake's TransferEngine, in their
order and with their arguments, replayed against kvt's class by a
prefill and a decode process (written from reading their sources; no
code of theirs).  Both ask for protocol "rdma": on this host
MC_FORCE_TCP=1 runs it over tcp, as Mooncake's switch does; shm as the
protocol a vLLM config may name.  Every page is checked."""
import pytest

ENGINE = """
import hashlib, os, threading, numpy as np
from concurrent.futures import ThreadPoolExecutor
%s
from kvt.compat.mooncake import TransferEngine
"""

CASES = [("rdma", "os.environ['MC_FORCE_TCP'] = '1'"), ("shm", "")]


def start(node, protocol, env):
    return node.run(ENGINE % env + """
engine = TransferEngine()
hostname = "127.0.0.1"
if engine.initialize(hostname, "P2PHANDSHAKE", %r, "") != 0:
    raise RuntimeError("Mooncake Transfer Engine initialization failed.")
session_id = f"{hostname}:{engine.get_rpc_port()}"
result = session_id
""" % protocol)


@pytest.mark.parametrize("protocol,env", CASES)
def test_sglang_wrapper(nodes, protocol, env):
    """SGLang: initialize(hostname, "P2PHANDSHAKE", "rdma", ib_device or
    ""), get_rpc_port for its session id, register(ptr, length) for each
    of 32 KV buffers, then from 8 threads, for 10 requests of scattered
    16 KiB pages, batch_transfer_sync_write per buffer and
    transfer_sync_write for the auxiliary data; deregister at the end."""
    d, p = nodes(), nodes()
    session = start(d, protocol, env)
    start(p, protocol, env)
    nbuf, npages, page = 32, 64, 16384
    dst = d.run("""
kv = [np.zeros(%d * %d, dtype=np.uint8) for _ in range(%d)]
aux = np.zeros(4096, dtype=np.uint8)
for b in kv + [aux]:
    assert engine.register_memory(b.ctypes.data, b.nbytes) == 0
result = [[b.ctypes.data for b in kv], aux.ctypes.data]
""" % (npages, page, nbuf))
    rets = p.run("""
rng = np.random.default_rng(7)
kv = [rng.integers(0, 256, %d * %d, dtype=np.uint8) for _ in range(%d)]
aux = rng.integers(0, 256, 4096, dtype=np.uint8)
for b in kv + [aux]:
    engine.register_memory(b.ctypes.data, b.nbytes)
dst_kv, dst_aux = %r
# 10 requests, each a scattered set of pages of every buffer, mapped to
# a permutation of the decode side's pages.
reqs = []
perm = rng.permutation(%d)
for r in range(10):
    src_pages = rng.choice(%d, 6, replace=False)
    dst_pages = perm[r * 6:(r + 1) * 6]
    reqs.append((src_pages, dst_pages))
def send(job):
    r, i = job
    src_pages, dst_pages = reqs[r]
    bufs = [kv[i].ctypes.data + int(s) * %d for s in src_pages]
    peer = [dst_kv[i] + int(t) * %d for t in dst_pages]
    return engine.batch_transfer_sync_write(%r, bufs, peer, [%d] * len(bufs))
with ThreadPoolExecutor(8) as pool:
    rets = list(pool.map(send, [(r, i) for r in range(10) for i in range(%d)]))
rets.append(engine.transfer_sync_write(%r, aux.ctypes.data, dst_aux, 4096))
for b in kv + [aux]:
    engine.unregister_memory(b.ctypes.data)
want = hashlib.sha256()
for i in range(%d):
    for src_pages, dst_pages in reqs:
        for s, t in zip(src_pages, dst_pages):
            want.update(kv[i][int(s) * %d:(int(s) + 1) * %d].tobytes())
want.update(aux.tobytes())
result = [rets, want.hexdigest(), [[int(t) for t in dp] for _, dp in reqs]]
""" % (npages, page, nbuf, dst, npages, npages, page, page, session, page,
       nbuf, session, nbuf, page, page))
    assert rets[0] == [0] * (10 * nbuf + 1)
    got = d.run("""
h = hashlib.sha256()
for i in range(%d):
    for dp in %r:
        for t in dp:
            h.update(kv[i][t * %d:(t + 1) * %d].tobytes())
h.update(aux.tobytes())
result = h.hexdigest()
""" % (nbuf, rets[2], page, page))
    assert got == rets[1], "a page landed wrong"


@pytest.mark.parametrize("protocol,env", CASES)
def test_vllm_worker(nodes, protocol, env):
    """vLLM: initialize(get_ip(), "P2PHANDSHAKE", mooncake_protocol, ""),
    get_rpc_port, batch_register_memory(kv_data_ptrs, kv_data_lens) of
    every layer's cache; the decode worker sends its hostname, rpc port,
    cache base addresses and block ids; the prefill worker groups
    contiguous block runs and, per request on a pool of 10 sender
    threads, calls batch_transfer_sync_write(remote_session, src_ptrs,
    dst_ptrs, lengths) with one entry per layer and run."""
    d, p = nodes(), nodes()
    start(d, protocol, env)
    start(p, protocol, env)
    layers, blocks, block_len = 8, 128, 8192
    meta = d.run("""
caches = [np.zeros(%d * %d, dtype=np.uint8) for _ in range(%d)]
assert engine.batch_register_memory([c.ctypes.data for c in caches],
                                    [c.nbytes for c in caches]) == 0
rng = np.random.default_rng(11)
free = list(rng.permutation(%d))
block_ids = [sorted(int(b) for b in free[k * 12:(k + 1) * 12]) for k in range(6)]
result = dict(remote_hostname="127.0.0.1", remote_port=engine.get_rpc_port(),
              request_ids=["req-%%d" %% k for k in range(6)],
              kv_caches_base_addr=[c.ctypes.data for c in caches],
              block_ids=block_ids)
""" % (blocks, block_len, layers, blocks))
    sent = p.run("""
rng = np.random.default_rng(12)
caches = [rng.integers(0, 256, %d * %d, dtype=np.uint8) for _ in range(%d)]
assert engine.batch_register_memory([c.ctypes.data for c in caches],
                                    [c.nbytes for c in caches]) == 0
meta = %r
local_blocks = [sorted(int(b) for b in rng.choice(%d, 12, replace=False))
                for _ in meta["request_ids"]]
def runs(local, remote):
    # Runs contiguous on both sides, as vLLM's grouping does.
    out, cur = [], [(local[0], remote[0])]
    for l, r in zip(local[1:], remote[1:]):
        if l == cur[-1][0] + 1 and r == cur[-1][1] + 1:
            cur.append((l, r))
        else:
            out.append(cur)
            cur = [(l, r)]
    return out + [cur]
session = "%%s:%%d" %% (meta["remote_hostname"], meta["remote_port"])
def send_one(k):
    src, dst, lens = [], [], []
    for la, ra in zip([c.ctypes.data for c in caches], meta["kv_caches_base_addr"]):
        for run in runs(local_blocks[k], meta["block_ids"][k]):
            src.append(la + run[0][0] * %d)
            dst.append(ra + run[0][1] * %d)
            lens.append(%d * len(run))
    return engine.batch_transfer_sync_write(session, src, dst, lens)
with ThreadPoolExecutor(10) as pool:
    rets = list(pool.map(send_one, range(len(meta["request_ids"]))))
want = []
for k in range(len(local_blocks)):
    h = hashlib.sha256()
    for c in caches:
        for b in local_blocks[k]:
            h.update(c[b * %d:(b + 1) * %d].tobytes())
    want.append(h.hexdigest())
result = [rets, want]
""" % (blocks, block_len, layers, meta, blocks, block_len, block_len,
       block_len, block_len, block_len))
    assert sent[0] == [0] * 6
    got = d.run("""
out = []
for k in range(6):
    h = hashlib.sha256()
    for c in caches:
        for b in block_ids[k]:
            h.update(c[b * %d:(b + 1) * %d].tobytes())
    out.append(h.hexdigest())
result = out
""" % (block_len, block_len))
    assert got == sent[1], "a block landed wrong"

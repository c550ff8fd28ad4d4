# SPDX-License-Identifier: BSD-3-Clause
"""kvt.compat.nixl driven the way vLLM's NixlConnector drives NIXL's
agent (written from reading its source; no code of theirs): a decode and
a prefill worker register their KV caches (one region a layer), prepare
block descriptor lists on both sides, exchange agent metadata out of
band, and the decode worker reads the blocks of a request with
make_prepped_xfer and a notification the prefill worker takes; then the
push direction, a notification alone, and bad input.  Two processes,
every byte checked."""
import os

import pytest

from conftest import BASE, NodeError

#: KVT_NIXL_UPSTREAM=1 runs these cases against NIXL's own agent (the
#: nixl or nixl-cu12 wheel the interpreter has), for a side-by-side
#: report (scripts/nixl-side-by-side).
UPSTREAM = os.environ.get("KVT_NIXL_UPSTREAM") == "1"
if UPSTREAM:
    IMPORT = """
try:
    from nixl._api import nixl_agent, nixl_agent_config
except ImportError:
    from nixl_cu12._api import nixl_agent, nixl_agent_config
def config(kvt_args):
    return nixl_agent_config(backends=["UCX"])
"""
else:
    IMPORT = """
from kvt.compat.nixl import nixl_agent, nixl_agent_config
def config(kvt_args):
    return nixl_agent_config(backends=["UCX"], kvt_args=kvt_args)
"""

LAYERS, BLOCKS, BLOCK_LEN = 4, 64, 16384

AGENT = IMPORT + """
import hashlib, time, numpy as np
def name(n):
    return n.decode() if isinstance(n, bytes) else n
agent = nixl_agent(%r, config(%r))
rng = np.random.default_rng(%d)
caches = [rng.integers(0, 256, %d * %d, dtype=np.uint8) if %d else
          np.zeros(%d * %d, dtype=np.uint8) for _ in range(%d)]
caches_data = [(c.ctypes.data, c.nbytes, 0, "") for c in caches]
descs = agent.get_reg_descs(caches_data, "DRAM")
agent.register_memory(descs)
blocks_data = [(c.ctypes.data + b * %d, %d, 0) for c in caches for b in range(%d)]
local_h = agent.prep_xfer_dlist("NIXL_INIT_AGENT",
                                agent.get_xfer_descs(blocks_data, "DRAM"))
def ids(blocks):
    return [l * %d + b for l in range(%d) for b in blocks]
def digest(blocks):
    h = hashlib.sha256()
    for c in caches:
        for b in blocks:
            h.update(c[b * %d:(b + 1) * %d].tobytes())
    return h.hexdigest()
def wait(handle):
    t0 = time.time()
    st = agent.transfer(handle)
    while st == "PROC" and time.time() - t0 < 30:
        st = agent.check_xfer_state(handle)
    return st
result = [agent.get_agent_metadata().hex(), [c.ctypes.data for c in caches]]
"""


def agent(node, name, pmds, filled, seed, extra=()):
    args = []
    for p in pmds:
        args += ["--kvt-pmd", p]
    return node.run(AGENT % (name, args + BASE + list(extra), seed, BLOCKS, BLOCK_LEN,
                             filled, BLOCKS, BLOCK_LEN, LAYERS, BLOCK_LEN,
                             BLOCK_LEN, BLOCKS, BLOCKS, LAYERS, BLOCK_LEN,
                             BLOCK_LEN))


def pair(nodes, pmds, extra=()):
    """A prefill agent with filled caches, a decode agent with empty ones;
    the decode side has added the prefill side and prepared its blocks.
    extra: more kvt options for both."""
    p, d = nodes(), nodes()
    pmeta, pbases = agent(p, "prefill-0", pmds, 1, 5, extra)
    dmeta, _ = agent(d, "decode-0", pmds, 0, 6, extra)
    assert d.run("""
remote = agent.add_remote_agent(bytes.fromhex(%r))
remote_blocks = [(base + b * %d, %d, 0) for base in %r for b in range(%d)]
remote_h = agent.prep_xfer_dlist(remote, agent.get_xfer_descs(remote_blocks, "DRAM"))
result = name(remote)
""" % (pmeta, BLOCK_LEN, BLOCK_LEN, pbases, BLOCKS)) == "prefill-0"
    assert p.run("result = name(agent.add_remote_agent(bytes.fromhex(%r)))"
                 % dmeta) == \
        "decode-0"
    return p, d


@pytest.mark.parametrize("pmds", [["shm"], ["tcp"]])
def test_vllm_read_sequence(nodes, pmds):
    """The decode worker pulls scattered blocks of two requests (each its
    own prepped transfer with a notification); the prefill worker learns
    of each exactly once; the bytes are the prefill worker's."""
    p, d = pair(nodes, pmds)
    got = d.run("""
reqs = {"req-1": ([3, 4, 5, 9, 40], [10, 11, 12, 2, 63]),
        "req-2": ([0, 1, 2, 6], [20, 21, 22, 23])}
states = []
for name, (mine, theirs) in reqs.items():
    h = agent.make_prepped_xfer("READ", local_h, ids(mine), remote_h, ids(theirs),
                                notif_msg=("%s:1" % name).encode())
    states.append(wait(h))
    agent.release_xfer_handle(h)
result = [states, {k: digest(v[0]) for k, v in reqs.items()}]
""")
    assert got[0] == ["DONE", "DONE"]
    want = p.run("""
result = {"req-1": digest([10, 11, 12, 2, 63]), "req-2": digest([20, 21, 22, 23])}
""")
    assert got[1] == want
    notes = p.run("""
t0 = time.time()
seen = {}
while sum(len(v) for v in seen.values()) < 2 and time.time() - t0 < 10:
    for k, v in agent.get_new_notifs().items():
        seen.setdefault(k, []).extend(x.decode() for x in v)
time.sleep(0.2)
for k, v in agent.get_new_notifs().items():
    seen.setdefault(k, []).extend(x.decode() for x in v)
result = seen
""")
    assert notes == {"decode-0": ["req-1:1", "req-2:1"]}


def test_push_and_notif_alone(nodes):
    """The prefill worker writes blocks into the decode worker's cache
    (a push connector), then sends a notification alone (vLLM's answer
    for a request with no blocks to move); check_remote_xfer_done finds
    each by its tag."""
    p, d = pair(nodes, ["tcp"])
    dmeta_bases = d.run("result = [c.ctypes.data for c in caches]")
    assert p.run("""
remote_blocks = [(base + b * %d, %d, 0) for base in %r for b in range(%d)]
rh = agent.prep_xfer_dlist("decode-0", agent.get_xfer_descs(remote_blocks, "DRAM"))
h = agent.make_prepped_xfer("WRITE", local_h, ids([7, 8]), rh, ids([30, 31]),
                            notif_msg=b"pushed")
st = wait(h)
agent.release_xfer_handle(h)
agent.send_notif("decode-0", b"empty:1")
result = [st, digest([7, 8])]
""" % (BLOCK_LEN, BLOCK_LEN, dmeta_bases, BLOCKS)) == ["DONE", p.run(
        "result = digest([7, 8])")]
    assert d.run("""
t0 = time.time()
found = [False, False]
while not all(found) and time.time() - t0 < 10:
    found[0] = found[0] or agent.check_remote_xfer_done("prefill-0", b"pushed")
    found[1] = found[1] or agent.check_remote_xfer_done("prefill-0", b"empty")
result = [found, digest([30, 31])]
""") == [[True, True], p.run("result = digest([7, 8])")]


def test_same_blocks_again_and_again(nodes):
    """A block written again the moment the last write is DONE (as a
    decode worker reuses its KV blocks), 60 000 times over tcp with kvt's
    default idle policy: never refused.  DONE used to come once the
    requests settled, possibly while the finished write still held its
    claim on the bytes, and the next write was refused as concurrent:
    12 000-23 000 ERR of 60 000 in each of 3 runs on that code."""
    # kvt's default idle policy (the tests' sleep:50 hid the race).
    p, d = pair(nodes, ["tcp"], ["--kvt-idle", "wait"])
    states = d.run("""
states = {}
for i in range(60000):
    h = agent.make_prepped_xfer("WRITE", local_h, [i % 2], remote_h, [7])
    st = agent.transfer(h)
    while st == "PROC":
        st = agent.check_xfer_state(h)
    states[st] = states.get(st, 0) + 1
    agent.release_xfer_handle(h)
result = states
""")
    assert states == {"DONE": 60000}


def test_bad_input(nodes):
    """Bad input is refused with a clear error and moves nothing."""
    p, d = pair(nodes, ["tcp"])
    errs = d.run("""
def err(f):
    try:
        # NIXL logs some refusals and returns None.
        return "accepted" if f() is not None else "None"
    except Exception as e:
        return type(e).__name__
result = [
    err(lambda: agent.make_prepped_xfer("READ", local_h, [0, 1], remote_h, [0])),
    err(lambda: agent.make_prepped_xfer("FOO", local_h, [0], remote_h, [0])),
    err(lambda: agent.make_prepped_xfer("READ", 999, [0], remote_h, [0])),
    err(lambda: agent.make_prepped_xfer("READ", local_h, [10 ** 6], remote_h, [0])),
    err(lambda: agent.add_remote_agent(b"garbage")),
    err(lambda: agent.prep_xfer_dlist("nobody", [(1, 2, 0)], "DRAM")),
    err(lambda: agent.get_xfer_descs([(1, 2, 0)])),
    err(lambda: agent.check_xfer_state(12345)),
]
# A list outside the peer's registered memory is refused when prepared.
result.append(err(lambda: agent.prep_xfer_dlist(
    remote, agent.get_xfer_descs([(4096, %d, 0)], "DRAM"))))
""" % BLOCK_LEN)
    if UPSTREAM:
        # NIXL raises its own classes (nixlInvalidParamError, ...): any
        # refusal counts there.
        assert "accepted" not in errs, " ".join(errs)
    else:
        assert errs == ["ValueError"] * 9

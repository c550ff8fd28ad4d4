# SPDX-License-Identifier: BSD-3-Clause
"""python -m kvt.bench: the Python binding beside kvfwd, in one run.

Two local processes (this one and a target it starts), the same grid of
blocks and batches kvfwd measures, then one 4 KiB write at a time
(submit + wait, as a synchronous call does).  Each row gives the binding's
number, kvfwd's from the same run and their ratio.  With --mooncake and
Mooncake's wheel importable, its TransferEngine (tcp) runs the same grid
beside kvt's compat class.  With --nixl, kvt's NIXL agent
(kvt.compat.nixl) runs it as vLLM's NixlConnector does (one prepared
transfer a batch: make_prepped_xfer, transfer, poll check_xfer_state,
release), and NIXL's own agent beside it when its wheel is importable
(UCX, its transports limited to the one asked for by UCX_TLS).

    python -m kvt.bench [--transport shm|tcp] [--total 256M] [--kvfwd PATH]
                        [--mooncake] [--nixl] [--latency] [--idle POLICY]
                        [--json]

--latency measures only the one-at-a-time 4 KiB writes; --idle sets kvt's
idle policy (default: kvt's own default, the wait policy).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

GRID = [(4096, 128), (65536, 128), (1 << 20, 128), (16 << 20, 16)]
#: --kvt-idle for every kvt engine here; empty: kvt's default.
IDLE = ""


def idle_args():
    return ["--kvt-idle", IDLE] if IDLE else []


def size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.upper().rstrip("IB")
    return int(float(t[:-1]) * mult[t[-1]]) if t[-1] in mult else int(t)


# ---- the target process ----

def target_main(transport, buf_len, compat):
    """Serve a buffer; print its address line; exit when stdin closes."""
    import numpy as np
    buf = np.zeros(buf_len, dtype=np.uint8)
    if compat:
        from kvt.compat.mooncake import TransferEngine
        te = TransferEngine()
        if te.initialize("127.0.0.1", "P2PHANDSHAKE", transport, "") != 0:
            sys.exit(1)
        te.register_memory(buf.ctypes.data, buf_len)
        addr = "127.0.0.1:%d" % te.get_rpc_port()
        base = buf.ctypes.data
    else:
        import kvt
        eng = kvt.Engine(["--kvt-pmd", transport, *idle_args(),
                          "--kvt-listen", "127.0.0.1:0"])
        # Shareable memory, as kvfwd's target has: shm then maps it
        # instead of copying through the kernel (process_vm_writev), so
        # the two columns differ by the binding alone.
        base = eng.alloc(buf_len)
        eng.register(base, buf_len)
        addr = eng.listen_addr
    print("%s %d" % (addr, base), flush=True)
    sys.stdin.read()


def start_target(transport, buf_len, compat=False, mooncake=False):
    code = ("import sys; from kvt.bench import target_main, mooncake_target;"
            "(mooncake_target if %r else target_main)(%r, %d, %r)" %
            (mooncake, transport, buf_len, compat))
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    if len(line) != 2:
        p.kill()
        raise RuntimeError("the target did not start")
    return p, line[0], int(line[1])


def mooncake_target(transport, buf_len, compat):
    import numpy as np
    from mooncake.engine import TransferEngine
    buf = np.zeros(buf_len, dtype=np.uint8)
    te = TransferEngine()
    if te.initialize("127.0.0.1", "P2PHANDSHAKE", transport, "") != 0:
        sys.exit(1)
    te.register_memory(buf.ctypes.data, buf_len)
    print("127.0.0.1:%d %d" % (te.get_rpc_port(), buf.ctypes.data), flush=True)
    sys.stdin.read()


# ---- the measurements ----

def native_grid(transport, total, buf_len):
    import numpy as np
    import kvt
    t, addr, rbase = start_target(transport, buf_len)
    rows = {}
    try:
        eng = kvt.Engine(["--kvt-pmd", transport, *idle_args(),
                          "--kvt-listen", "127.0.0.1:0"])
        src = np.ones(buf_len, dtype=np.uint8)
        eng.register(src.ctypes.data, buf_len, remote="")
        peer = eng.open_peer(addr)
        for block, batch in GRID:
            n = min(batch, buf_len // block)
            offs = np.arange(n, dtype=np.uint64) * np.uint64(block)
            local = offs + np.uint64(src.ctypes.data)
            remote = offs + np.uint64(rbase)
            rounds = max(1, total // (block * n))
            b = eng.batch(n)
            b.write(peer, local, remote, block)      # warm-up
            b.wait(60)
            b.reset()
            t0 = time.perf_counter()
            for _ in range(rounds):
                b.write(peer, local, remote, block)
                b.wait(60)
                b.check(0, n)
                b.reset()
            dt = time.perf_counter() - t0
            rows[(block, batch)] = rounds * n * block / dt / 1e9
            b.close()
        # numpy's .ctypes.data costs microseconds: read it once.
        sa = src.ctypes.data
        rows["lat"] = latency(lambda b: b.write_sync(peer, sa, rbase, 4096),
                              eng.batch(1))
        eng.close()
    finally:
        t.stdin.close()
        t.wait(30)
    return rows


def latency(one, b, n=3000):
    lat = []
    for i in range(n + 200):
        t0 = time.perf_counter()
        one(b)
        if i >= 200:
            lat.append((time.perf_counter() - t0) * 1e6)
    lat.sort()
    return (lat[len(lat) // 2], lat[int(len(lat) * 0.99)])


def engine_grid(transport, total, buf_len, mooncake=False):
    """The same grid through a TransferEngine: kvt's compat class or
    Mooncake's own."""
    import numpy as np
    if mooncake:
        from mooncake.engine import TransferEngine
    else:
        from kvt.compat.mooncake import TransferEngine
    t, addr, rbase = start_target(transport, buf_len, compat=not mooncake,
                                  mooncake=mooncake)
    rows = {}
    try:
        te = TransferEngine()
        if te.initialize("127.0.0.1", "P2PHANDSHAKE", transport, "") != 0:
            raise RuntimeError("initialize failed")
        src = np.ones(buf_len, dtype=np.uint8)
        te.register_memory(src.ctypes.data, buf_len)
        for block, batch in GRID:
            n = min(batch, buf_len // block)
            local = [src.ctypes.data + i * block for i in range(n)]
            remote = [rbase + i * block for i in range(n)]
            lens = [block] * n
            rounds = max(1, total // (block * n))
            te.batch_transfer_sync_write(addr, local, remote, lens)
            t0 = time.perf_counter()
            for _ in range(rounds):
                if te.batch_transfer_sync_write(addr, local, remote, lens) != 0:
                    raise RuntimeError("a batch failed")
            rows[(block, batch)] = rounds * n * block / (time.perf_counter() - t0) / 1e9
        sa = src.ctypes.data
        rows["lat"] = latency(lambda _: te.transfer_sync_write(
            addr, sa, rbase, 4096), None)
    finally:
        t.stdin.close()
        t.wait(30)
    return rows


# ---- NIXL's agent: kvt's class or NIXL's own ----

#: UCX transports for NIXL's own agent, per --transport (its UCX backend
#: needs a transport with peer failure handling: tcp beside shared memory).
UCX_TLS = {"shm": "sm,tcp,self", "tcp": "tcp,self"}


def nixl_agent_for(name, transport, upstream):
    """An agent of kvt.compat.nixl, or of NIXL's wheel (upstream)."""
    if not upstream:
        from kvt.compat.nixl import nixl_agent, nixl_agent_config
        return nixl_agent(name, nixl_agent_config(
            backends=["UCX"], kvt_args=["--kvt-pmd", transport, *idle_args()]))
    os.environ["UCX_TLS"] = UCX_TLS[transport]
    try:
        from nixl._api import nixl_agent, nixl_agent_config
    except ImportError:
        from nixl_cu12._api import nixl_agent, nixl_agent_config
    return nixl_agent(name, nixl_agent_config(backends=["UCX"]))


def replies_fd():
    """A copy of stdout for replies; fd 1 goes to stderr (NIXL logs to
    stdout)."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return out


def nixl_target(transport, buf_len, upstream):
    """Serve a registered buffer; print the agent's metadata (hex) and the
    buffer's address; exit when stdin closes."""
    import numpy as np
    out = replies_fd()
    agent = nixl_agent_for("bench-target", transport, upstream)
    buf = np.zeros(buf_len, dtype=np.uint8)
    agent.register_memory(agent.get_reg_descs(
        [(buf.ctypes.data, buf_len, 0, "")], "DRAM"))
    print(agent.get_agent_metadata().hex(), buf.ctypes.data, file=out,
          flush=True)
    sys.stdin.read()


def nixl_run(agent, local, remote, idx):
    """One request as vLLM's connector makes it: prepared, posted,
    polled to DONE, released."""
    h = agent.make_prepped_xfer("WRITE", local, idx, remote, idx)
    state = agent.transfer(h)
    while state == "PROC":
        state = agent.check_xfer_state(h)
    agent.release_xfer_handle(h)
    if state != "DONE":
        raise RuntimeError("a NIXL transfer ended %s" % state)


def nixl_initiator(transport, total, buf_len, upstream):
    """The grid and the 4 KiB latency through a NIXL agent; prints the
    rows as JSON."""
    import numpy as np
    out = replies_fd()
    code = ("from kvt.bench import nixl_target; nixl_target(%r, %d, %r)" %
            (transport, buf_len, upstream))
    t = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    rows = {}
    try:
        meta, rbase = t.stdout.readline().split()
        rbase = int(rbase)
        agent = nixl_agent_for("bench-init", transport, upstream)
        src = np.ones(buf_len, dtype=np.uint8)
        sa = src.ctypes.data
        agent.register_memory(agent.get_reg_descs([(sa, buf_len, 0, "")],
                                                  "DRAM"))
        peer = agent.add_remote_agent(bytes.fromhex(meta))
        for block, batch in GRID + [(4096, 1)]:
            n = min(batch, buf_len // block)
            local = agent.prep_xfer_dlist("NIXL_INIT_AGENT", [
                (sa + i * block, block, 0) for i in range(n)], "DRAM")
            remote = agent.prep_xfer_dlist(peer, [
                (rbase + i * block, block, 0) for i in range(n)], "DRAM")
            idx = list(range(n))
            nixl_run(agent, local, remote, idx)         # warm-up
            if batch == 1:
                rows["lat"] = latency(lambda _: nixl_run(
                    agent, local, remote, idx), None)
            else:
                rounds = max(1, total // (block * n))
                t0 = time.perf_counter()
                for _ in range(rounds):
                    nixl_run(agent, local, remote, idx)
                rows["%dx%d" % (block, batch)] = \
                    rounds * n * block / (time.perf_counter() - t0) / 1e9
            agent.release_dlist_handle(local)
            agent.release_dlist_handle(remote)
    finally:
        t.stdin.close()
        t.wait(30)
    print(json.dumps(rows), file=out, flush=True)


def nixl_grid(transport, total, buf_len, upstream=False):
    """nixl_initiator in a process of its own (one agent a process, and
    UCX's environment its own); its rows."""
    code = ("from kvt import bench; bench.IDLE = %r; "
            "bench.GRID[:] = %r; bench.nixl_initiator(%r, %d, %d, %r)" %
            (IDLE, GRID, transport, total, buf_len, upstream))
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         text=True, timeout=1800)
    try:
        rows = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise RuntimeError("the NIXL run failed (status %d)" % out.returncode)
    if out.returncode != 0:
        # nixl-cu12 1.5.1 crashes at exit (status -11), its rows printed.
        print("%s NIXL run: its rows came, then it exited with status %d"
              % ("NIXL's own" if upstream else "kvt's", out.returncode),
              file=sys.stderr)
    return {(tuple(int(x) for x in k.split("x")) if "x" in k else k):
            (tuple(v) if k == "lat" else v) for k, v in rows.items()}


def kvfwd_grid(kvfwd, transport, total):
    rows = {}
    base = [kvfwd, "--", "--kvt-pmd", transport, *idle_args(),
            "loopback", "--op", "write", "--json"]
    for block, batch in GRID:
        out = subprocess.run(base + ["--block", str(block), "--batch", str(batch),
                                     "--total", str(max(total, block * batch))],
                             capture_output=True, text=True, timeout=600)
        rows[(block, batch)] = json.loads(out.stdout)["gbps"] if out.returncode == 0 else None
    out = subprocess.run(base + ["--block", "4096", "--batch", "1", "--total",
                                 str(3200 * 4096)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode == 0:
        r = json.loads(out.stdout)
        rows["lat"] = (r["req_p50_us"], r["req_p99_us"])
    return rows


def find_kvfwd(given):
    for c in (given, os.environ.get("KVT_KVFWD"), shutil.which("kvfwd"),
              os.path.join(os.path.dirname(__file__), "..", "..", "apps",
                           "kvfwd", "kvfwd")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m kvt.bench")
    ap.add_argument("--transport", default="shm", choices=["shm", "tcp"])
    ap.add_argument("--total", default="256M", type=size)
    ap.add_argument("--kvfwd", default=None)
    ap.add_argument("--mooncake", action="store_true",
                    help="also Mooncake's TransferEngine beside kvt's compat class")
    ap.add_argument("--nixl", action="store_true",
                    help="also kvt's NIXL agent, and NIXL's own beside it")
    ap.add_argument("--latency", action="store_true",
                    help="only one 4 KiB write at a time (no block x batch grid)")
    ap.add_argument("--idle", default="",
                    help="kvt's --kvt-idle policy (default: kvt's default)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    global IDLE
    IDLE = a.idle
    if a.latency:
        GRID.clear()
    buf_len = 256 << 20
    res = {"native": native_grid(a.transport, a.total, buf_len)}
    kvfwd = find_kvfwd(a.kvfwd)
    res["kvfwd"] = kvfwd_grid(kvfwd, a.transport, a.total) if kvfwd else {}
    if a.mooncake:
        res["compat"] = engine_grid(a.transport, a.total, buf_len)
        try:
            import mooncake.engine  # noqa: F401
            res["mooncake"] = engine_grid(a.transport, a.total, buf_len, True)
        except ImportError:
            print("mooncake is not importable: no side-by-side", file=sys.stderr)
    if a.nixl:
        res["kvt-nixl"] = nixl_grid(a.transport, a.total, buf_len)
        if nixl_importable():
            try:
                res["nixl"] = nixl_grid(a.transport, a.total, buf_len, True)
            except RuntimeError as e:
                print("NIXL's own agent: %s: no side-by-side" % e,
                      file=sys.stderr)
        else:
            print("nixl is not importable: no side-by-side", file=sys.stderr)
    report(res, a.transport, a.json)
    return 0


def nixl_importable():
    import importlib.util
    return any(importlib.util.find_spec(m) is not None
               for m in ("nixl", "nixl_cu12"))


def ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"


def report(res, transport, as_json):
    cols = [c for c in ("native", "kvfwd", "compat", "mooncake", "kvt-nixl",
                        "nixl") if c in res]
    if as_json:
        out = {c: {("%dx%d" % k if isinstance(k, tuple) else k): v
                   for k, v in res[c].items()} for c in cols}
        print(json.dumps({"transport": transport, **out}))
        return
    print("kvt.bench over %s: GB/s (4K row: p50/p99 us of one sync write)" % transport)
    print("%-12s" % "block x batch" + "".join("%12s" % c for c in cols) +
          "  native/kvfwd" + ("  compat/mooncake" if "mooncake" in res else "") +
          ("  kvt-nixl/nixl" if "nixl" in res else ""))
    for k in GRID:
        vals = [res[c].get(k) for c in cols]
        line = "%-12s" % ("%dK x %d" % (k[0] >> 10, k[1]))
        line += "".join("%12s" % ("%.2f" % v if v else "-") for v in vals)
        line += "  %12s" % ratio(res["native"].get(k), res["kvfwd"].get(k))
        if "mooncake" in res:
            line += "  %15s" % ratio(res["compat"].get(k), res["mooncake"].get(k))
        if "nixl" in res:
            line += "  %13s" % ratio(res["kvt-nixl"].get(k), res["nixl"].get(k))
        print(line)
    vals = [res[c].get("lat") for c in cols]
    print("%-12s" % "4K sync" + "".join(
        "%12s" % ("%.1f/%.1f" % v if v else "-") for v in vals))
    n, k = res["native"].get("lat"), res["kvfwd"].get("lat")
    if n and k:
        print("binding adds %.2f us at p50 over kvfwd" % (n[0] - k[0]))


if __name__ == "__main__":
    sys.exit(main())

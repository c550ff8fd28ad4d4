# SPDX-License-Identifier: BSD-3-Clause
"""python -m kvt.bench runs end to end: its one-at-a-time 4 KiB column
for the binding, kvfwd and kvt's NIXL agent (as vLLM's connector drives
it) over shm, as JSON.  Numbers are not judged here (scripts and the
bench report speed); a column that stops running is."""
import json
import os
import subprocess
import sys


def test_latency_columns():
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "kvt.bench", "--latency",
                          "--nixl", "--json"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["transport"] == "shm"
    for col in ("native", "kvt-nixl"):
        p50, p99 = res[col]["lat"]
        assert 0 < p50 <= p99, (col, res[col])
    if os.environ.get("KVT_KVFWD"):
        assert res["kvfwd"]["lat"][0] > 0, res["kvfwd"]

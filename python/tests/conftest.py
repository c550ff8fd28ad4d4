# SPDX-License-Identifier: BSD-3-Clause
"""Test processes: Node starts python/tests/node.py (a Python process
whose kvt engine the test drives by snippets of code)."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

#: Engine options every test node starts with: the sleeping idle policy
#: (several engines share two cores in CI) and loopback.
BASE = ["--kvt-idle", "sleep:50", "--kvt-listen", "127.0.0.1:0",
        "--kvt-timeout", "1000"]


class NodeError(Exception):
    def __init__(self, reply):
        super().__init__(reply["err"] + "\n" + reply.get("trace", ""))
        # OSError's subclasses (FileExistsError, ...) count as OSError.
        self.type = "OSError" if reply.get("oserror") else reply.get("type")
        self.errno = reply.get("errno")


class Node:
    def __init__(self, timeout=120):
        self.timeout = timeout
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "node.py")],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env)
        assert json.loads(self._line()) == {"ready": True}

    def _line(self):
        import select
        r, _, _ = select.select([self.p.stdout], [], [], self.timeout)
        if not r:
            self.kill()
            raise TimeoutError("the node did not answer in %d s" % self.timeout)
        line = self.p.stdout.readline()
        if not line:
            try:
                status = self.p.wait(5)
            except subprocess.TimeoutExpired:
                status = "none yet: its stdout closed"
            raise EOFError("the node exited (status %s)" % status)
        return line

    def send(self, code):
        self.p.stdin.write(json.dumps({"code": textwrap.dedent(code)}) + "\n")
        self.p.stdin.flush()

    def reply(self):
        r = json.loads(self._line())
        if "err" in r:
            raise NodeError(r)
        return r["ok"]

    def run(self, code):
        """Run code in the node; the value it left in `result`."""
        self.send(code)
        return self.reply()

    def kill(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            self.p.wait()

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
                self.p.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()


@pytest.fixture
def nodes():
    """Start nodes with nodes(); all are stopped after the test."""
    made = []

    def make(**kw):
        n = Node(**kw)
        made.append(n)
        return n
    yield make
    for n in made:
        n.close()


def engine_code(pmds, extra=()):
    args = []
    for p in pmds:
        args += ["--kvt-pmd", p]
    return ("import kvt, numpy as np, errno, os, time\n"
            "eng = kvt.Engine(%r)\n" % (args + BASE + list(extra)))


def target(make, pmds, size=64 << 20, extra=()):
    """A node exporting `buf` (size bytes, read/write) and a 16-slot fence
    table; its (address, base, fence handle)."""
    t = make()
    info = t.run(engine_code(pmds, extra) + """
buf = np.zeros(%d, dtype=np.uint8)
reg = eng.register(buf)
ft = eng.fence_table(16)
result = [eng.listen_addr, buf.ctypes.data, ft.handle]
""" % size)
    return t, info[0], info[1], info[2]


def pytest_runtest_logreport(report):
    """One [PASS]/[SKIP]/[FAIL] line a case, the form scripts/test-report
    counts (as Criterion's binaries print)."""
    name = "python::" + report.nodeid.split("::", 1)[-1]
    if report.when == "call" and report.passed:
        print("\n[PASS] " + name)
    elif report.skipped:
        print("\n[SKIP] %s: %s" % (name, report.longrepr[2]
                                   if isinstance(report.longrepr, tuple) else ""))
    elif report.failed:
        print("\n[FAIL] " + name)

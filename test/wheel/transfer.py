# SPDX-License-Identifier: BSD-3-Clause
"""Two processes move 8 MiB through the installed kvt wheel and compare
every byte (sha256), over each transport named on the command line.

    python transfer.py shm tcp rdma+tcp   the initiator (starts a target);
                                          a+b asks for both transports
    python transfer.py --target PMD       the target (used by the above)

Uses only the standard library and kvt: the box it runs on has nothing
else installed.
"""
import ctypes
import hashlib
import subprocess
import sys

import kvt

N = 8 << 20


def pmds(spec):
    return [a for p in spec.split("+") for a in ("--kvt-pmd", p)]


def target(pmd):
    eng = kvt.Engine(pmds(pmd) + ["--kvt-listen", "127.0.0.1:0"])
    base = eng.alloc(N)
    eng.register(base, N)
    print(eng.listen_addr, base, flush=True)
    sys.stdin.readline()            # the initiator is done
    print(hashlib.sha256(ctypes.string_at(base, N)).hexdigest(), flush=True)
    sys.stdin.readline()
    eng.close()


def initiator(pmd):
    t = subprocess.Popen([sys.executable, __file__, "--target", pmd],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        addr, base = t.stdout.readline().split()
        eng = kvt.Engine(pmds(pmd) + ["--kvt-listen", "127.0.0.1:0"])
        src = ctypes.create_string_buffer(bytes((i * 7 + 3) % 251
                                                for i in range(N)), N)
        eng.register(ctypes.addressof(src), N, remote="")
        peer = eng.open_peer(addr)
        b = eng.batch(16)
        for i in range(16):          # 16 writes of 512 KiB
            off = i * (N // 16)
            b.write(peer, ctypes.addressof(src) + off, int(base) + off,
                    N // 16)
        b.wait(30.0)
        b.check()
        mine = hashlib.sha256(src.raw).hexdigest()
        t.stdin.write("done\n")
        t.stdin.flush()
        theirs = t.stdout.readline().strip()
        eng.close()
    finally:
        t.stdin.close()
        t.wait(30)
    ok = mine == theirs
    print("%s: 8 MiB in 16 writes, %s" % (pmd, "every byte intact" if ok
                                           else "DAMAGED"), flush=True)
    return ok


if __name__ == "__main__":
    if sys.argv[1] == "--target":
        target(sys.argv[2])
    else:
        sys.exit(0 if all([initiator(p) for p in sys.argv[1:]]) else 1)

#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""No call cycles between the files of lib/: file A calls a function file B
defines and B, directly or through other files, calls back into A.  Read
from the built objects with nm (data such as the engine global does not
count: only text symbols).

    lib_cycles.py OBJECT... | DIRECTORY (its *.c.o files)
"""
import glob
import os
import subprocess
import sys


def symbols(obj):
    out = subprocess.run(["nm", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "Tt":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def main():
    objs = {}
    paths = sys.argv[1:]
    if len(paths) == 1 and os.path.isdir(paths[0]):
        paths = sorted(glob.glob(os.path.join(paths[0], "*.c.o")))
    for o in paths:
        name = os.path.basename(o).split(".c.o")[0] + ".c"
        objs[name] = symbols(o)
    owner = {}
    for name, (defined, _) in objs.items():
        for s in defined:
            owner[s] = name
    calls = {n: {} for n in objs}
    for name, (_, used) in objs.items():
        for s in used:
            o = owner.get(s)
            if o is not None and o != name:
                calls[name].setdefault(o, []).append(s)
    # Tarjan's strongly connected components.
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in calls[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(calls):
        if v not in index:
            visit(v)
    for comp in sccs:
        print("call cycle among " + ", ".join(comp) + ":")
        for a in comp:
            for b in comp:
                if b in calls[a]:
                    print(f"  {a} -> {b}: {', '.join(sorted(calls[a][b])[:6])}")
    print(f"{len(objs)} files, {len(sccs)} cycle(s)")
    return 1 if sccs or not objs else 0


if __name__ == "__main__":
    sys.exit(main())

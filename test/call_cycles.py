#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""No call cycles between the files of any folder: file A calls a function
file B of the same folder defines and B, directly or through other files
of that folder, calls back into A.  And none between folders: lib/ never
calls into pmd/, apps/ or test/, and so on, the way the folders are
layered; lib/'s own folders call only down the order LIB_LAYERS gives.

Read from the built objects with nm (data such as the engine global does
not count: only functions).  Every target of the build is a link unit
(its objects, from compile_commands.json); a call is an undefined symbol
of one object that another object of the same unit defines globally.

    call_cycles.py SOURCE_ROOT BUILD_ROOT
"""
import json
import os
import subprocess
import sys

#: lib/'s folders, top to bottom: each calls only into those after it.
LIB_LAYERS = ["lib/runtime", "lib/batch", "lib/peer", "lib/meta", "lib/mem",
              "lib/wire", "lib/core"]


def symbols(obj):
    out = subprocess.run(["nm", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "T":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def link_units(src_root, build_root):
    """{unit directory: {object path: source path from src_root}}"""
    with open(os.path.join(build_root, "compile_commands.json")) as f:
        entries = json.load(f)
    units = {}
    for e in entries:
        out = os.path.normpath(os.path.join(e["directory"], e["output"]))
        src = os.path.normpath(os.path.join(e["directory"], e["file"]))
        rel = os.path.relpath(src, src_root)
        # Generated sources (in the build tree) are nobody's folder.
        if rel.startswith("..") or not rel.endswith(".c") or \
                not os.path.exists(out):
            continue
        units.setdefault(os.path.dirname(out), {})[out] = rel
    return units


def edges(units):
    """{(file, file): set of symbols} over every link unit."""
    cache, calls = {}, {}
    for objs in units.values():
        syms = {}
        for o in objs:
            if o not in cache:
                cache[o] = symbols(o)
            syms[o] = cache[o]
        owner = {}
        for o, (defined, _) in syms.items():
            for s in defined:
                owner[s] = objs[o]
        for o, (_, used) in syms.items():
            for s in used:
                b = owner.get(s)
                if b is not None and b != objs[o]:
                    calls.setdefault((objs[o], b), set()).add(s)
    return calls


def cycles(nodes, succ):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ.get(v, ())):
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
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sccs


def report(what, sccs, calls, key):
    for comp in sccs:
        print(f"call cycle among {what} " + ", ".join(comp) + ":")
        for (a, b), syms in sorted(calls.items()):
            if key(a) in comp and key(b) in comp and key(a) != key(b):
                print(f"  {a} -> {b}: {', '.join(sorted(syms)[:6])}")


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[-1].strip())
        return 2
    calls = edges(link_units(sys.argv[1], sys.argv[2]))
    files = {f for pair in calls for f in pair}
    folder = os.path.dirname
    bad = 0
    # Files, folder by folder.
    by_folder = {}
    for f in files:
        by_folder.setdefault(folder(f), set()).add(f)
    for d in sorted(by_folder):
        succ = {}
        for (a, b) in calls:
            if folder(a) == d and folder(b) == d:
                succ.setdefault(a, set()).add(b)
        sccs = cycles(by_folder[d], succ)
        report("the files of " + d + ":", sccs,
               {k: v for k, v in calls.items()
                if folder(k[0]) == d and folder(k[1]) == d},
               lambda f: f)
        bad += len(sccs)
        print(f"{d}: {len(by_folder[d])} files, {len(sccs)} cycle(s)")
    # Folders.
    succ = {}
    for (a, b) in calls:
        if folder(a) != folder(b):
            succ.setdefault(folder(a), set()).add(folder(b))
    sccs = cycles(by_folder.keys(), succ)
    report("the folders", sccs, calls, folder)
    bad += len(sccs)
    print(f"{len(by_folder)} folders, {len(sccs)} cycle(s) between them")
    # lib/'s folders call down LIB_LAYERS only.
    up = 0
    for (a, b), syms in sorted(calls.items()):
        fa, fb = folder(a), folder(b)
        if fa.startswith("lib/") and fb.startswith("lib/") and fa != fb:
            if fa not in LIB_LAYERS or fb not in LIB_LAYERS:
                print(f"{fa} or {fb}: not in LIB_LAYERS")
                up += 1
            elif LIB_LAYERS.index(fa) > LIB_LAYERS.index(fb):
                print(f"call up the layers: {a} -> {b}: "
                      + ", ".join(sorted(syms)[:6]))
                up += 1
    print(f"lib/: {len(LIB_LAYERS)} layers, {up} call(s) against them")
    bad += up
    return 1 if bad or not files else 0


if __name__ == "__main__":
    sys.exit(main())

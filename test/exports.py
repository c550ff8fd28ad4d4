#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Every function an installed header declares is exported by libkvt.so
under the version node, and nothing else is exported (but DPDK's error
channel, rte_errno and rte_strerror, where DPDK is linked in: the API
reports through it).

    exports.py LIBKVT_SO HEADER...
"""
import re
import subprocess
import sys

NODE = "KVT_0"
#: Not kvt's, exported on purpose (kvt_version.map says why).
DPDK_ERRNO = {"per_lcore__rte_errno", "rte_strerror"}
DECL = re.compile(r"^(?!#|\s)[^;{}()#]*?\b(kvt_\w+)\s*\(", re.M)


def declared(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # Comments may quote calls; inline helpers are not exported.
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    names = set()
    for m in DECL.finditer(text):
        # The declaration begins after the last statement before it; a
        # static (inline) one is the header's own.
        start = max(text.rfind(c, 0, m.start()) for c in ";{}")
        if "static" not in text[start + 1:m.end()].split():
            names.add(m.group(1))
    return names


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", "--with-symbol-versions",
                          lib], check=True, capture_output=True, text=True).stdout
    syms, other = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 3 or parts[1] not in "TtDdBbRrWwVv":
            continue
        name, _, ver = parts[2].partition("@")
        if name.startswith("kvt_"):
            syms[name] = ver.lstrip("@")
        else:
            other[name] = ver.lstrip("@")
    return syms, other


def main():
    lib, headers = sys.argv[1], sys.argv[2:]
    want = set()
    for h in headers:
        want |= declared(h)
    have, other = exported(lib)
    bad = []
    for s in sorted(other):
        if s not in DPDK_ERRNO or other[s] != NODE:
            bad.append(f"{s}: exported, not kvt's")
    for s in sorted(want - have.keys()):
        bad.append(f"{s}: declared in an installed header, not exported")
    for s in sorted(have.keys() - want):
        bad.append(f"{s}: exported, declared in no installed header")
    for s in sorted(want & have.keys()):
        if have[s] != NODE:
            bad.append(f"{s}: version '{have[s]}', not {NODE}")
    print(f"{len(want)} functions declared, {len(have)} exported")
    for b in bad:
        print(b)
    return 1 if bad or not want else 0


if __name__ == "__main__":
    sys.exit(main())

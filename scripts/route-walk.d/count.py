#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Count the source files one write crosses and its returns to a file it
had left, from the traces of scripts/route-walk.

  count.py TRACE_DIR SOURCE_ROOT BUILD_DIR

TRACE_DIR holds trace.PID (hook.c) and window (walk.c).  Every thread of
every traced process is replayed; its current file is the file of the
innermost function on its stack defined in a .c file under lib/ or pmd/ of
SOURCE_ROOT: inline helpers of headers, application and test code are
transparent.  Inside the
window, each change of a thread's current file is a crossing, and a
crossing into a file that thread already visited in the window is a
return; a pair of files with a crossing between them (either way) is a
link.  Crossings and returns grow with the loop turns a thread makes in
the window (an lcore polling until the write completes); the files and
links are the route's shape.  Prints each thread that crossed anything,
then the totals: files and links (all threads together), crossings,
returns.
"""
import bisect
import collections
import os
import re
import subprocess
import sys

SCOPE = re.compile(r"^(lib|pmd)/.*\.c$")


def read_trace(path):
    maps, threads, cur = [], [], None
    with open(path) as f:
        for line in f:
            kind, rest = line[0], line[2:].split()
            if kind == "M":
                maps.append((int(rest[0], 16), int(rest[1], 16),
                             int(rest[2], 16), rest[3]))
            elif kind == "T":
                cur = (int(rest[0]), [])
                threads.append(cur)
            else:
                cur[1].append((int(rest[0]), kind == "E", int(rest[1], 16)))
    return sorted(maps), threads


def resolve(maps, addrs, src, build):
    """addr -> source file relative to src, or None outside the scope."""
    starts = [m[0] for m in maps]
    per_module = collections.defaultdict(list)
    for a in addrs:
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0 and a < maps[i][1]:
            lo, _, off, path = maps[i]
            per_module[path].append((a, a - lo + off))
    files = {}
    for path, pairs in per_module.items():
        out = subprocess.run(["addr2line", "-f", "-e", path] +
                             ["%x" % v for _, v in pairs],
                             capture_output=True, text=True, check=True)
        lines = out.stdout.splitlines()
        for k, (a, _) in enumerate(pairs):
            where = lines[2 * k + 1].split(":")[0]
            full = os.path.normpath(os.path.join(build, where))
            rel = os.path.relpath(full, src)
            files[a] = rel if SCOPE.match(rel) else None
    return files


def walk(events, files, t0, t1):
    stack, visited, links = [], set(), set()
    prev, crossings, returns = None, 0, 0

    def top():
        for f in reversed(stack):
            if f is not None:
                return f
        return None

    for ns, enter, fn in events:
        if enter:
            stack.append(files.get(fn))
        elif stack:
            stack.pop()
        if ns < t0:
            prev = top()
            continue
        if ns > t1:
            break
        if not visited and prev is not None:
            visited.add(prev)
        cur = top()
        if cur is None or cur == prev:
            continue
        crossings += 1
        if prev is not None:
            links.add(tuple(sorted((prev, cur))))
        if cur in visited:
            returns += 1
        visited.add(cur)
        prev = cur
    return visited, links, crossings, returns


def main():
    tdir, src, build = sys.argv[1:4]
    src, build = os.path.abspath(src), os.path.abspath(build)
    with open(os.path.join(tdir, "window")) as f:
        _, t0, t1 = (int(v) for v in f.read().split())
    allfiles, alllinks, tc, tr = set(), set(), 0, 0
    for name in sorted(os.listdir(tdir)):
        if not name.startswith("trace."):
            continue
        maps, threads = read_trace(os.path.join(tdir, name))
        addrs = {fn for _, evs in threads for _, _, fn in evs}
        files = resolve(maps, addrs, src, build)
        for tid, evs in threads:
            visited, links, c, r = walk(evs, files, t0, t1)
            if c == 0:
                continue
            print("process %s thread %d: %d files, %d links, %d crossings, "
                  "%d returns" % (name[6:], tid, len(visited), len(links), c, r))
            print("    " + " ".join(sorted(visited)))
            allfiles |= visited
            alllinks |= links
            tc += c
            tr += r
    print("one write: %d files, %d links, %d crossings, %d returns"
          % (len(allfiles), len(alllinks), tc, tr))


if __name__ == "__main__":
    main()

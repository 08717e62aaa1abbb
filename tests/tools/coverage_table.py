#!/usr/bin/env python3
# The coverage table of scripts/coverage: lcov's tracefile as markdown, per folder of the project (gguf/ kernels/ cache/ remote/ core/ fs/ tools/), then per file.
"""
    coverage_table.py TOP TRACEFILE

A source compiled more than once (the kernels: with and without the test
dispatch) appears once per compilation in the tracefile; a line counts as
covered when any compilation of it ran.  Tests, fuzz harnesses and test
tools are left out.
"""
import os
import sys

ROOMS = ("gguf", "kernels", "cache", "remote", "core", "fs", "tools")


def main():
    top, info = sys.argv[1], sys.argv[2]
    files, cur = {}, None
    with open(info) as f:
        for line in f:
            line = line.strip()
            if line.startswith("SF:"):
                cur = os.path.relpath(line[3:], top)
                cur = cur if cur.split("/")[0] in ROOMS else None
                if cur:
                    files.setdefault(cur, {})
            elif line.startswith("DA:") and cur:
                ln, hits = line[3:].split(",")[:2]
                files[cur][int(ln)] = files[cur].get(int(ln), 0) + int(hits)

    def pct(c, t):
        return "%.1f %%" % (100.0 * c / t) if t else "-"

    rooms, rows = {}, []
    for name in sorted(files):
        d = files[name]
        c, t = sum(1 for v in d.values() if v > 0), len(d)
        r = rooms.setdefault(name.split("/")[0] + "/", [0, 0])
        r[0] += c
        r[1] += t
        rows.append((name, t, c))
    tc = sum(r[0] for r in rooms.values())
    tt = sum(r[1] for r in rooms.values())
    print("| folder | lines | covered | coverage |")
    print("|---|---:|---:|---:|")
    for room in sorted(rooms):
        c, t = rooms[room]
        print("| `%s` | %d | %d | %s |" % (room, t, c, pct(c, t)))
    print("| all | %d | %d | %s |" % (tt, tc, pct(tc, tt)))
    print()
    print("| file | lines | covered | coverage |")
    print("|---|---:|---:|---:|")
    for name, t, c in rows:
        print("| `%s` | %d | %d | %s |" % (name, t, c, pct(c, t)))


if __name__ == "__main__":
    main()

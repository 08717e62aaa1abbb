#!/usr/bin/python3
"""No source file of the rooms over 800 lines (doc/HACKING.md): a file
that grows past it is split by job, its shared declarations in a
*_impl.h beside it.  Files that are only data (big static tables) are
exempt and listed in TABLES.

    check_sizes.py SRCDIR     (exit 0, or 1 with one line per file over)
"""
import os
import sys

LIMIT = 800
ROOMS = ("gguf", "kernels", "cache", "remote", "fs", "core")
# pure data: a table may be as long as its entries
TABLES = {
    "kernels/tables.c",
}


def over(src):
    out = []
    n = 0
    for room in ROOMS:
        for dirpath, _, files in os.walk(os.path.join(src, room)):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                n += 1
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, src).replace(os.sep, "/")
                with open(path, "rb") as f:
                    lines = f.read().count(b"\n")
                if lines > LIMIT and rel not in TABLES:
                    out.append("%s: %d lines, over %d: split it by job (or list it in "
                               "check_sizes.py's TABLES if it is only data)" % (rel, lines, LIMIT))
    return n, out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    n, found = over(src)
    for line in found:
        print(line)
    if n < 50:
        print("check_sizes: only %d sources found under %s: wrong directory?" % (n, src))
        return 1
    missing = [t for t in sorted(TABLES) if not os.path.exists(os.path.join(src, t))]
    for t in missing:
        print("check_sizes: %s is listed as a table but does not exist" % t)
    print("check_sizes: %d sources, %d over %d lines" % (n, len(found), LIMIT))
    return 1 if found or missing else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""The rooms' dependency rules (doc/HACKING.md), checked on the sources:
only fs/ includes a FUSE header; gguf/ includes nothing of the other rooms
and no libcurl; kernels/ only gguf/'s type tables and block layouts;
remote/ only gguf/; cache/ only gguf/ and kernels/; core/ (the model logic
without FUSE) gguf/, kernels/, cache/ and remote/, never fs/; tools/ only
gguf/.

    check_rooms.py SRCDIR     (exit 0, or 1 with one line per breach)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
# room: the other rooms it may include ("x/..." quoted includes)
MAY = {
    "gguf": set(),
    "kernels": {"gguf"},
    "remote": {"gguf"},
    "cache": {"gguf", "kernels"},
    "tools": {"gguf"},
    "core": {"gguf", "kernels", "remote", "cache"},
    "fs": {"gguf", "kernels", "remote", "cache", "core"},
}
ROOMS = set(MAY)


def breaches(src):
    out = []
    for room, may in sorted(MAY.items()):
        d = os.path.join(src, room)
        for dirpath, _, files in os.walk(d):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, src)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    top = inc.split("/")[0]
                    if "fuse" in inc and room != "fs":
                        out.append("%s: includes %s: only fs/ may include a FUSE header" % (rel, inc))
                    elif inc.startswith("curl/") and room not in ("remote",):
                        out.append("%s: includes %s: only remote/ may use libcurl" % (rel, inc))
                    elif "/" in inc and top in ROOMS and top != room and top not in may:
                        out.append("%s: includes %s: %s/ may not depend on %s/" % (rel, inc, room, top))
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found = breaches(src)
    for line in found:
        print(line)
    n = sum(1 for room in MAY for _, _, fs in os.walk(os.path.join(src, room)) for f in fs
            if f.endswith((".c", ".h")))
    if n < 50:
        print("check_rooms: only %d sources found under %s: wrong directory?" % (n, src))
        return 1
    print("check_rooms: %d sources, %d breaches" % (n, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

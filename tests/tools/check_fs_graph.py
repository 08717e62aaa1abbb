#!/usr/bin/python3
"""fs/'s include graph, checked on the sources: a file of fs/ depends on
another when it (or its header) includes that one's header.  The graph is
to point downward only (doc/HACKING.md).  Today ten files still form one
cycle through calls both ways (state and notify, state and nodes, read
and f32, commit, follow and underneath, whandle and commit); until it is
broken, this check is a ratchet:

  - every cycle lies within CYCLE, through the edges of CYCLE_EDGES only:
    a new edge that closes a cycle, or one more file drawn into it, fails;
  - an edge of CYCLE_EDGES that is gone fails too, until it is struck
    from the list (so the list only shrinks; when it is empty, fs/ is a
    downward graph and CYCLE goes).

    check_fs_graph.py SRCDIR     (exit 0, or 1 with one line per breach)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)

CYCLE = {"commit", "digest", "f32", "follow", "nodes", "notify", "read", "state",
         "underneath", "whandle"}
CYCLE_EDGES = {
    ("commit", "follow"), ("commit", "nodes"), ("commit", "notify"), ("commit", "state"),
    ("commit", "underneath"), ("commit", "whandle"),
    ("digest", "f32"), ("digest", "nodes"), ("digest", "read"), ("digest", "state"),
    ("digest", "underneath"),
    ("f32", "read"), ("f32", "state"), ("f32", "underneath"),
    ("follow", "commit"), ("follow", "state"), ("follow", "underneath"),
    ("nodes", "digest"), ("nodes", "read"), ("nodes", "state"),
    ("notify", "nodes"), ("notify", "state"),
    ("read", "f32"), ("read", "nodes"), ("read", "state"), ("read", "underneath"),
    ("state", "nodes"), ("state", "notify"), ("state", "underneath"),
    ("underneath", "follow"), ("underneath", "state"),
    ("whandle", "commit"), ("whandle", "nodes"), ("whandle", "notify"), ("whandle", "read"),
    ("whandle", "state"),
}


def graph(src):
    d = os.path.join(src, "fs")
    names = {f.rsplit(".", 1)[0] for f in os.listdir(d) if f.endswith((".c", ".h"))}
    g = {n: set() for n in names}
    for f in sorted(os.listdir(d)):
        if not f.endswith((".c", ".h")):
            continue
        m = f.rsplit(".", 1)[0]
        with open(os.path.join(d, f), encoding="utf-8", errors="replace") as fh:
            for inc in INCLUDE.findall(fh.read()):
                if "/" in inc and not inc.startswith("fs/"):
                    continue
                t = os.path.basename(inc).rsplit(".", 1)[0]
                if t != m and t in names and os.path.exists(os.path.join(d, t + ".h")):
                    g[m].add(t)
    return g


def sccs(g):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], 0
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = n
        n += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n
                    n += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def breaches(src):
    g = graph(src)
    out = []
    for comp in sccs(g):
        if len(comp) < 2:
            continue
        extra = comp - CYCLE
        if extra:
            out.append("fs/: %s drawn into the include cycle (%s): depend downward"
                       % (", ".join(sorted(extra)), ", ".join(sorted(comp))))
        for a in sorted(comp):
            for b in sorted(g[a] & comp):
                if (a, b) not in CYCLE_EDGES:
                    out.append("fs/%s includes %s.h: a new edge in the include cycle" % (a, b))
    for a, b in sorted(CYCLE_EDGES):
        if b not in g.get(a, ()):
            out.append("fs/%s no longer includes %s.h: strike (%r, %r) from CYCLE_EDGES"
                       % (a, b, a, b))
    return out, len(g)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found, n = breaches(src)
    for line in found:
        print(line)
    if n < 20:
        print("check_fs_graph: only %d files of fs/ under %s: wrong directory?" % (n, src))
        return 1
    print("check_fs_graph: %d files of fs/, %d edges left in the cycle, %d breaches"
          % (n, len(CYCLE_EDGES), len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

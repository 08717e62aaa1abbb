#!/usr/bin/python3
"""fs/'s include graph, checked on the sources: a file of fs/ depends on
another when it (or its header) includes that one's header.  The graph
points downward only (doc/HACKING.md, "Layout"): no file depends, through
any chain of includes, on one that depends on it.  Each cycle found is a
breach, named with its files and the includes that close it.

    check_fs_graph.py SRCDIR     (exit 0, or 1 with one line per breach)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)

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
        edges = ", ".join("%s -> %s" % (a, b) for a in sorted(comp) for b in sorted(g[a] & comp))
        out.append("fs/: %s include each other (%s): depend downward"
                   % (", ".join(sorted(comp)), edges))
    return out, g


def order(g):
    """The files bottom up: each after everything it includes."""
    done, out = set(), []
    while len(done) < len(g):
        ready = sorted(n for n in g if n not in done and g[n] <= done)
        if not ready:
            break
        out.append(" ".join(ready))
        done.update(ready)
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found, g = breaches(src)
    for line in found:
        print(line)
    if len(g) < 20:
        print("check_fs_graph: only %d files of fs/ under %s: wrong directory?" % (len(g), src))
        return 1
    if not found:
        for i, level in enumerate(order(g)):
            print("  level %d: %s" % (i, level))
    print("check_fs_graph: %d files of fs/, %d includes, %d breaches"
          % (len(g), sum(len(v) for v in g.values()), len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

# scripts/bench --part locks: gguffs' pthread lock takes per FUSE read request (f32 warm and cold, raw, meta/), counted by an LD_PRELOAD shim, with their call sites.
"""
Part locks: a count, not a time.  gguffs runs with the shim
tests/tools/lockcount.c preloaded (built with -Dtests=enabled), which
counts every pthread_mutex_*lock, pthread_rwlock_*lock and
pthread_spin_*lock call (gguffs' own and its libraries', libfuse's
included; not glibc's internal locks) per call site, and the condition
waits apart, in a window opened around the reads
(tests/integration/lockcount.py).  A generated model, one q8_0 tensor of
16 MiB of float32 (--quick: 4 MiB), is mounted with -o threads=0 and
with -o threads=2 (the f32 workers, one per CPU beyond two by default:
fixed here so that the counts do not depend on the machine), and read:
f32 cold (the first pass), f32 warm (every chunk in the block cache:
after the tensor's stats file), raw (spliced), meta/ pread (one READ
each, past the page cache) and meta/ cat (open, read, read, flush,
release).  The table: READ requests (the stats file's reads_KIND; for
meta/ the preads made), FUSE requests answered in the window, lock
takes per request (all; gguffs' own; libfuse's), condition waits; then
the call sites of each path, most first, as file:line (function) of the
take, and of its caller after "<-" (libfuse has no line table: offset and
nearest exported symbol).  The test locks bounds the warm f32 count.
"""
import os
import tempfile

import common
import harness
from common import need

NAME = "locks"
ALIASES = ()
THREADS = (0, 2)
TOP_SITES = 8


def run(work, args):
    import lockcount as L
    need(L.shim_path(), "build with -Dtests=enabled")
    if harness.sanitized():
        common.skip("a sanitizer build: its runtime's own locks would be counted")
    model = L.make_model(os.path.join(work, "locks.gguf"), rows=256 if args.quick else 1024)
    results = []
    for threads in THREADS:
        lc = L.LockCount()
        mnt = tempfile.mkdtemp(prefix="gguffs-mnt-", dir=work)
        try:
            with harness.mounted(model, ["-o", "threads=%d" % threads], mnt=mnt, env=lc.env()) as g:
                kept = []
                try:
                    for name in L.PATHS:
                        results.append((threads, name, L.READS[name](lc, g.mnt, kept)))
                finally:
                    L.close_kept(kept)
        finally:
            lc.close()
            os.rmdir(mnt)
    print("## Lock takes per FUSE request (part locks)\n")
    print("| threads | path | per | READs | FUSE requests | takes per | gguffs' own | libfuse "
          "and others | cond waits per | cache misses |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for threads, name, c in results:
        print("| %d | %s | %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %d |" % (
            threads, name, c.unit, c.n, c.requests(), c.per(c.total()), c.per(c.total(mine=True)),
            c.per(c.total(mine=False)), c.per(c.total(waits=True)), c.stats.get("misses", 0)))
    print()
    print("### Call sites (lock takes per request)\n")
    print("| threads | path | per | lock site <- its caller |")
    print("|---|---|---|---|")
    for threads, name, c in results:
        for site, n in c.by_site(TOP_SITES):
            print("| %d | %s | %.2f | %s |" % (threads, name, c.per(n), site.replace("|", "/")))
    print(flush=True)

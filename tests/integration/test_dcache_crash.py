#!/usr/bin/python3
# SIGKILL of a process writing the disk cache (cache/diskcache.c) at random points; after each kill a reopen finds only blocks with exactly their bytes, none rejected, within the bound.
"""
Each trial runs tests/tools/dcache_crash (GGUFFS_DCACHE_CRASH) as

    dcache_crash write DIR SEED

which writes blocks of one object into the cache in DIR from two threads
(a bound of 24 blocks of 65: evictions all the time; a batch size picked by
the seed: a sync per block, 2, 4 or the default), printing a line per
write.  The test reads a random number of those lines (1 to 400: the kill
lands after that many writes, wherever the writer then is — inside a
pwrite, between the data's sync and the map's, in an eviction between
clearing an entry and punching the hole, ...), kills it with SIGKILL, and
runs

    dcache_crash verify DIR

which reopens the cache (giving back the space of blocks written but not
marked) and reads every block: every block it returns must be exactly
right, none may be rejected (a block marked before its bytes were written
would be), and the files must take at most the bound.  The same DIR is
used for every trial, so each writer starts from what the last kill left.

A SIGKILL loses no page cache: it checks the order of the steps as the
process makes them.  Every other trial is a simulated power cut instead
(dcache_crash power DIR SEED): the tool logs the cache's pwrite, fallocate
and fdatasync calls and, at a call picked by the seed, undoes at random
the writes and hole punches not yet made durable by an fdatasync of their
file, then kills itself: a block marked before its bytes were synced, or a
hole punched before the clearing of its entry was synced, then shows as
rejected (or as wrong bytes).

    test_dcache_crash.py [--trials N] [--seed S] [--dir DIR] [-v]

Default 12 trials (CI); scripts/dcache-crash-test runs 200.
"""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def tool():
    t = os.environ.get("GGUFFS_DCACHE_CRASH")
    if not t:
        src = os.environ.get("GGUFFS_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
        t = os.path.join(src, "build", "tests", "tools", "dcache_crash")
    if not os.access(t, os.X_OK):
        if os.environ.get("CI"):
            print("FAIL: %s: not built" % t)
            sys.exit(1)
        print("SKIP: %s: not built" % t)
        sys.exit(77)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--dir", default=None)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    exe = tool()
    seed = harness.test_seed(a.seed)
    rng = random.Random(seed)
    print("seed %d, %d trials" % (seed, a.trials))
    top = tempfile.mkdtemp(prefix="gguffs-dcache-crash-", dir=a.dir)
    cdir = os.path.join(top, "cache")
    failed = 0
    presents = []
    kills = 0
    lost = kept = 0
    try:
        for trial in range(a.trials):
            power = trial % 2 == 1
            # a power cut kills the writer itself: read until it is gone
            lines = 1 << 30 if power else rng.randint(1, 400)
            wseed = rng.randrange(1 << 30)
            with tempfile.TemporaryFile() as err:
                p = subprocess.Popen([exe, "power" if power else "write", cdir, str(wseed)],
                                     stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
                seen = 0
                while seen < lines:
                    if not p.stdout.readline():
                        break
                    seen += 1
                killed = not power and p.poll() is None
                if killed:
                    p.send_signal(signal.SIGKILL)
                    kills += 1
                rc = p.wait()
                p.stdout.close()
                err.seek(0)
                etext = err.read().decode(errors="replace").strip()
            if power:
                m = re.search(r"power cut after (\d+) calls: (\d+) unsynced writes lost, (\d+) kept", etext)
                if rc != -signal.SIGKILL or not m:
                    print("FAIL trial %d: power cut (seed %d): exit %d: %s" % (trial, wseed, rc, etext))
                    failed += 1
                    continue
                kills += 1
                lost += int(m.group(2))
                kept += int(m.group(3))
                seen = int(m.group(1))
            elif not killed and rc != 0:
                print("FAIL trial %d: writer (seed %d) exited %d: %s" % (trial, wseed, rc, etext))
                failed += 1
                continue
            r = subprocess.run([exe, "verify", cdir], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=120)
            out = r.stdout.decode().strip()
            if r.returncode != 0:
                print("FAIL trial %d (%s seed %d, killed after %d %s): %s %s"
                      % (trial, "power" if power else "write", wseed, seen,
                         "calls" if power else "writes", out, r.stderr.decode(errors="replace").strip()))
                failed += 1
            else:
                presents.append(int(out.split()[1]))
                if a.verbose:
                    print("trial %d: %s after %d %s (seed %d): %s"
                          % (trial, "power cut" if power else "killed", seen,
                             "calls" if power else "writes", wseed, out))
    finally:
        shutil.rmtree(top, ignore_errors=True)
    if presents:
        print("%d kills and power cuts; blocks found after one: min %d, mean %.1f, max %d (of 65); "
              "power cuts: %d unsynced writes lost, %d kept"
              % (kills, min(presents), sum(presents) / len(presents), max(presents), lost, kept))
    print("%d passed, %d failed" % (a.trials - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

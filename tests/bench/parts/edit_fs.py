# scripts/bench --part edit-fs: a growing edit by file system (the local one: copied; loop-mounted XFS and btrfs: cloned) against cp, run by tests/bench/bench_edit_fs.py.
"""
Part edit-fs (root for the XFS and btrfs images): runs
tests/bench/bench_edit_fs.py --fs LIST (--fs, default local,xfs,btrfs)
with --edit-mb (default 4096) and --reps (default 5) and prints its table:
a growing edit through a mount on each file system against
cp --reflink=never and cp + fsync + rename on the same file system.
Without root (or without mkfs.xfs / mkfs.btrfs) only the local file
system is measured, and the output says so.
  --quick: a 16 MiB model, one run, every file system that can be made.
"""
import os
import shutil
import subprocess
import sys

import common
import harness
from common import TOP, skip

NAME = "edit-fs"
ALIASES = ()
SCRIPT = os.path.join(TOP, "tests", "bench", "bench_edit_fs.py")
MKFS = {"xfs": "mkfs.xfs", "btrfs": "mkfs.btrfs"}


def run(work, args):
    kinds = []
    for kind in (args.fs or "local,xfs,btrfs").split(","):
        if kind == "local":
            kinds.append(kind)
        elif kind not in MKFS:
            skip("--fs %s: not one of local, xfs, btrfs" % kind)
        elif os.geteuid() != 0:
            common.left_out(NAME, "%s not measured: loop-mounting an image needs root" % kind)
        elif not shutil.which(MKFS[kind]) and not common.IN_CI:
            # (with CI set, bench_edit_fs.py fails on it: scripts/setup
            # --tests installs xfsprogs and btrfs-progs)
            common.left_out(NAME, "%s not measured: %s is missing" % (kind, MKFS[kind]))
        else:
            kinds.append(kind)
    if not kinds:
        skip("no file system to measure")
    argv = [sys.executable, SCRIPT, "--fs", ",".join(kinds), "--dir", work,
            "--size-mb", str(args.edit_mb or (16 if args.quick else 4096)),
            "--reps", str(args.reps or (1 if args.quick else 5))]
    print("# part edit-fs: %s" % " ".join(os.path.relpath(a, TOP) if a == SCRIPT else a
                                          for a in argv[1:]), flush=True)
    # its lines go through our stdout, where scripts/bench counts the rows
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        print(line, end="", flush=True)
    p.stdout.close()
    rc = p.wait()
    if rc == harness.SKIP:
        skip("bench_edit_fs.py skipped (exit 77): see its output above")
    if rc != 0:
        raise RuntimeError("bench_edit_fs.py exited %d" % rc)
    print(flush=True)

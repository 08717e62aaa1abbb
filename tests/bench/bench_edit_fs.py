#!/usr/bin/python3
# Benchmark: a growing metadata edit through a gguffs mount (chat_template 8 KiB past the padding's room each time) on the local file system (copy) and on loop-mounted XFS/btrfs (clone), each as a ratio to a plain and a durable copy of the model on the same file system.
"""
Usage: tests/bench/bench_edit_fs.py [--size-mb N] [--reps N] [--dir DIR]
                                   [--fs LIST] [--quick]

For each file system in --fs (default "local,xfs": local is --dir's, a
temporary directory by default; xfs and btrfs are images made in --dir and
loop-mounted, root only):

  cp         cp --reflink=never MODEL COPY (the copy is removed afterwards)
  durable    cp --reflink=never + fsync(COPY) + rename over MODEL +
             fsync(directory): what a rewrite by gguffs guarantees when
             close() returns
  edit       echo TEMPLATE > meta/tokenizer.chat_template through a gguffs
             mount (open, write, close: the commit), the template 8 KiB
             longer than the room the padding key leaves (1-5 KiB where
             the file system clones, 64 KiB or more where a rewrite
             copies: gguf/pad.h), so the header outgrows its room every
             time

Each row is the median of --reps runs (default 5; --quick: 3 and a
1024 MiB model), every run after a sync and a read of the model (the page
cache holds it: warm).  The table gives edit / cp and edit / durable, and
how each edit was written (stats: cloned, copied, in place) with the bytes
gguffs wrote for it (write_bytes of /proc/PID/io).  Targets:
on XFS edit <= 0.01 x cp; on the local ext4 edit <= 1.2 x durable.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(TOP, "scripts"))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
sys.path.insert(0, os.path.join(TOP, "tests", "bench", "parts"))
os.environ.setdefault("GGUFFS_SRC", TOP)
import harness  # noqa: E402
import loopfs  # noqa: E402
from edit import make_edit_file  # noqa: E402  (part 3's model)

MiB = 1 << 20


def warm(path):
    """The model in the page cache, nothing dirty: the second sync flushes
    what the first one wrote through a loop device into its image file."""
    os.sync()
    with open(path, "rb") as f:
        while f.read(8 * MiB):
            pass
    os.sync()
    os.sync()


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def bench_cp(model, durable):
    d = os.path.dirname(model)
    copy = os.path.join(d, "copy.gguf")
    warm(model)
    t0 = time.perf_counter()
    subprocess.run(["cp", "--reflink=never", model, copy], check=True)
    if durable:
        fsync_path(copy)
        os.rename(copy, model)
        fsync_path(d)
    dt = time.perf_counter() - t0
    if not durable:
        os.unlink(copy)
    return dt


def stats(mnt):
    with open(os.path.join(mnt, "stats")) as f:
        return dict(line.split(" ", 1) for line in f.read().splitlines())


def bench_edits(model, reps):
    """Times reps growing edits through a mount; returns (times, kinds,
    write_bytes per edit)."""
    times, kinds, wbytes = [], [], []
    g = harness.Gguffs(model)
    try:
        tmpl = os.path.join(g.mnt, "meta", "tokenizer.chat_template")
        pad = os.path.join(g.mnt, "meta", "gguffs.padding")
        n = 0
        for i in range(reps):
            try:
                with open(pad) as f:
                    n += f.read().count("\n")     # one "0" per line
            except FileNotFoundError:
                pass
            n += 8192
            line = "{%% for m in messages %%}{{ m.content }}{%% endfor %%} %03d\n" % i
            text = (line * (n // len(line) + 1))[:n] + "."
            warm(model)
            before = stats(g.mnt)
            w0 = loopfs.write_bytes(g.pid)
            t0 = time.perf_counter()
            fd = os.open(tmpl, os.O_WRONLY | os.O_TRUNC)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
            times.append(time.perf_counter() - t0)
            wbytes.append(loopfs.write_bytes(g.pid) - w0)
            after = stats(g.mnt)
            kinds.append(",".join(k[len("edits_"):] for k in ("edits_in_place", "edits_cloned",
                                                              "edits_copied")
                                  if int(after[k]) > int(before[k])))
        g.stop()
    finally:
        g.close()
    return times, kinds, wbytes


def fstype(path):
    return subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True,
                          text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=None, help="model size (default 4096; --quick 1024)")
    ap.add_argument("--reps", type=int, default=None, help="runs per row (default 5; --quick 3)")
    ap.add_argument("--dir", default=None, help="where the local model and the images go")
    ap.add_argument("--fs", default="local,xfs", help="comma-separated: local, xfs, btrfs")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    size = args.size_mb or (1024 if args.quick else 4096)
    reps = args.reps or (3 if args.quick else 5)
    harness.gguffs_bin()
    work = tempfile.mkdtemp(prefix="gguffs-bench-edit-fs-", dir=args.dir)
    rows = []
    try:
        for kind in args.fs.split(","):
            lfs = None
            if kind == "local":
                d = os.path.join(work, "local")
            else:
                lfs = loopfs.LoopFs(kind, size_mb=3 * size + 1024)
                d = os.path.join(lfs.path, "m")
            os.mkdir(d)
            try:
                model = os.path.join(d, "model.gguf")
                t0 = time.perf_counter()
                make_edit_file(model, size, "bench-edit-fs")
                print("# %s (%s): %d MiB model written in %.1f s" % (kind, fstype(d), size,
                                                                    time.perf_counter() - t0),
                      flush=True)
                cp = statistics.median(bench_cp(model, False) for _ in range(reps))
                dur = statistics.median(bench_cp(model, True) for _ in range(reps))
                times, kinds, wb = bench_edits(model, reps)
                rows.append((kind, fstype(d), cp, dur, statistics.median(times), kinds,
                             statistics.median(wb)))
                print("# %s: cp %.3f s, durable %.3f s, edits %s (%s), write_bytes %s"
                      % (kind, cp, dur, " ".join("%.4f" % t for t in times), " ".join(kinds),
                         " ".join(str(x) for x in wb)), flush=True)
            finally:
                shutil.rmtree(d, ignore_errors=True)
                if lfs:
                    lfs.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print("Growing edit (chat_template 8 KiB past the padding's room each time) of a %d MiB model through a mount, "
          "warm, median of %d" % (size, reps))
    print()
    print("| file system | edit | how (stats) | bytes gguffs wrote | cp --reflink=never | "
          "cp + fsync + rename | edit / cp | edit / durable copy |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, ft, cp, dur, ed, kinds, wb in rows:
        print("| %s (%s) | %.4f s | %s | %.1f MiB | %.2f s | %.2f s | %.4f | %.4f |"
              % (kind, ft, ed, ",".join(sorted(set(kinds))), wb / MiB, cp, dur, ed / cp, ed / dur))
    return 0


if __name__ == "__main__":
    sys.exit(main())

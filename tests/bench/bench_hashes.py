#!/usr/bin/python3
# Benchmark: tensors' xxh64 and sha256 files and /hashes through a gguffs mount against sha256sum and xxhsum over the same raw bytes, and tensors' stats files against a first read of their f32 files: ratios measured in the same run.
"""
Usage: tests/bench/bench_hashes.py [--size-mb N] [--reps N] [--threads N]
                                  [--dir DIR] [--quick]

A model of three tensors of pseudo-random bytes (f16, q4_0 with finite
scales, little-endian f32), --size-mb in all (default 256), in --dir (a
temporary directory by default), in the page cache for every run (warm).
Each row is the median of --reps runs (default 3), each on a fresh mount
(nothing computed, nothing cached):

  digests   cat tensors/*/sha256 (each tensor's xxh64 and sha256 in one
            pass over raw)  vs  sha256sum + xxhsum of each tensor's raw
            bytes (copied to files beside the model, warm)
  hashes    cat hashes (every tensor's digests and the model's: each byte
            hashed twice by each)  vs  the same tools over each tensor's
            file and over their concatenation
  stats     cat tensors/*/stats  vs  a first read of tensors/*/f32 (1 MiB
            reads; the f32 tensor's stats read its raw bytes)

--threads passes -o threads=N (the workers that fill f32 chunks ahead of
stats and of f32 readers).  Prints one line per row: both times and their
ratio.  Not a test: nothing is asserted.
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
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
os.environ.setdefault("GGUFFS_SRC", TOP)
import harness  # noqa: E402
from gguf_write import GGUFWriter  # noqa: E402

import numpy as np  # noqa: E402

MiB = 1 << 20


def make_model(path, size_mb):
    rng = np.random.default_rng(23)
    per = size_mb * MiB // 3
    rows = max(1, per // (4096 * 2))
    f16 = rng.integers(0, 1 << 16, size=4096 * rows, dtype=np.uint16)
    f16 = np.where((f16 & 0x7c00) == 0x7c00, f16 & 0x83ff, f16).astype("<u2")   # finite
    qrows = max(1, per // (4096 // 32 * 18))
    q = rng.integers(0, 256, size=(4096 // 32 * qrows, 18), dtype=np.uint8)
    q[:, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)           # scales
    frows = max(1, per // (4096 * 4))
    f32 = rng.standard_normal(4096 * frows).astype("<f4")
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add_tensor("w.f16", "f16", [4096, rows], f16.tobytes())
    w.add_tensor("w.q4_0", "q4_0", [4096, qrows], q.tobytes())
    w.add_tensor("w.f32", "f32", [4096, frows], f32.tobytes())
    w.write(path)
    return ["w.f16", "w.q4_0", "w.f32"]


def warm(*paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(8 * MiB):
                pass


def cat(paths):
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(MiB):
                pass


def timed_mount(model, opts, paths):
    """Seconds to read paths (relative to the mount) on a fresh mount."""
    g = harness.Gguffs(model, opts)
    try:
        t0 = time.perf_counter()
        cat([os.path.join(g.mnt, p) for p in paths])
        return time.perf_counter() - t0
    finally:
        g.stop(None, "bench")
        g.close()


def timed_tools(files):
    t0 = time.perf_counter()
    for f in files:
        subprocess.run(["sha256sum", f], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["xxhsum", "-H64", f], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)     # its progress line
    return time.perf_counter() - t0


def row(name, ours, base, what):
    o, b = statistics.median(ours), statistics.median(base)
    print("%-8s %8.3f s  %-28s %8.3f s  ratio %.2f" % (name, o, what, b, o / b), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.size_mb, a.reps = 64, 1
    for tool in ("sha256sum", "xxhsum"):
        if not shutil.which(tool):
            sys.exit("bench_hashes: %s is missing (scripts/setup --tests installs xxhash)" % tool)
    opts = ("-o", "threads=%d" % a.threads) if a.threads is not None else ()
    tmp = tempfile.mkdtemp(prefix="gguffs-bench-hashes-", dir=a.dir)
    try:
        model = os.path.join(tmp, "m.gguf")
        names = make_model(model, a.size_mb)
        # the tensors' raw bytes as files, and their concatenation
        files = []
        with harness.mount(model) as mnt:
            for n in names:
                p = os.path.join(tmp, n + ".raw")
                shutil.copyfile(os.path.join(mnt, "tensors", n, "raw"), p)
                files.append(p)
        allp = os.path.join(tmp, "all.raw")
        with open(allp, "wb") as out:
            for p in files:
                with open(p, "rb") as f:
                    shutil.copyfileobj(f, out, 8 * MiB)
        size = os.path.getsize(allp)
        print("model %d MiB, tensors %d MiB (%s), %s, %d CPUs" % (
            os.path.getsize(model) // MiB, size // MiB, ", ".join(names),
            "threads=%d" % a.threads if a.threads is not None else "default threads",
            os.cpu_count()), flush=True)
        r = {k: [] for k in ("dig", "dig0", "hashes", "hashes0", "stats", "f32")}
        for _ in range(a.reps):
            warm(model, allp, *files)
            r["dig"].append(timed_mount(model, opts, ["tensors/%s/sha256" % n for n in names]))
            r["dig0"].append(timed_tools(files))
            r["hashes"].append(timed_mount(model, opts, ["hashes"]))
            r["hashes0"].append(timed_tools(files + [allp]))
            r["stats"].append(timed_mount(model, opts, ["tensors/%s/stats" % n for n in names]))
            r["f32"].append(timed_mount(model, opts, ["tensors/%s/f32" % n for n in names]))
        row("digests", r["dig"], r["dig0"], "sha256sum + xxhsum")
        row("hashes", r["hashes"], r["hashes0"], "the same, and of all")
        row("stats", r["stats"], r["f32"], "first read of f32")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

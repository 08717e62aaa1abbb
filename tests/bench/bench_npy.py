#!/usr/bin/python3
# Benchmark: reading tensors/NAME/f32.npy against tensors/NAME/f32 of the same tensors, each on a fresh mount; prints the ratio of their read rates.
"""
Usage: tests/bench/bench_npy.py [--model FILE] [--reps N] [--quick] [-o OPT]...

Without --model, bench_safetensors.py's llama-like model (q4_K, q6_K,
q8_0, f16 and f32 tensors; --quick: a quarter of it).  Each rep mounts the
model twice, each mount fresh (empty f32 cache, no page cache of the
mount's files), alternating which goes first:

  f32      every tensor's f32 file, in file order
  f32.npy  every tensor's f32.npy file (the NPY header, then the same
           floats), in file order

both read with 1 MiB reads; the model's own file is in the page cache
(read once before).  The table gives the median seconds of --reps runs
(default 5), the bytes, and the rate of f32.npy over f32's (the
target: >= 0.9).  Not a test: timings, printed, nothing asserted.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
sys.path.insert(0, HERE)
os.environ.setdefault("GGUFFS_SRC", TOP)
import harness  # noqa: E402
from bench_safetensors import MiB, make_model, read_file  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--model")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-o", dest="opts", action="append", default=[],
                    help="a mount option for both (e.g. threads=0)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gguffs-bench-npy-") as tmp:
        model = a.model
        if not model:
            model = os.path.join(tmp, "bench.gguf")
            make_model(model, 0.25 if a.quick else 1)
        opts = [x for o in a.opts for x in ("-o", o)]
        read_file(model)                       # warm: the source in the page cache
        with harness.mount(model, opts) as mnt:
            names = sorted(os.listdir(os.path.join(mnt, "tensors")))
            names = [n for n in names if os.path.exists(os.path.join(mnt, "tensors", n, "f32.npy"))]
        times = {"f32": [], "f32.npy": []}
        total = {"f32": 0, "f32.npy": 0}
        for rep in range(a.reps):
            for view in (("f32", "f32.npy") if rep % 2 == 0 else ("f32.npy", "f32")):
                with harness.mount(model, opts) as mnt:
                    t0 = time.perf_counter()
                    total[view] = sum(read_file(os.path.join(mnt, "tensors", n, view)) for n in names)
                    times[view].append(time.perf_counter() - t0)
        m = {v: statistics.median(t) for v, t in times.items()}
        rate = {v: total[v] / m[v] for v in m}
        print("model: %s (%d tensors with f32, %.1f MiB)" % (os.path.basename(model), len(names),
                                                             os.path.getsize(model) / MiB))
        print("%-8s %10s %12s %10s" % ("read", "seconds", "MiB", "MiB/s"))
        for v in ("f32", "f32.npy"):
            print("%-8s %10.3f %12.1f %10.0f" % (v, m[v], total[v] / MiB, rate[v] / MiB))
        print("f32.npy rate / f32 rate: %.2f (median of %d; runs: f32 %s, f32.npy %s)"
              % (rate["f32.npy"] / rate["f32"], a.reps, " ".join("%.3f" % x for x in times["f32"]),
                 " ".join("%.3f" % x for x in times["f32.npy"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())

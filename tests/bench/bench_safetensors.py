#!/usr/bin/python3
# Benchmark: reading model.safetensors in full against reading the same tensors' own files (raw or f32) one after the other, each on a fresh mount; prints the ratio.
"""
Usage: tests/bench/bench_safetensors.py [--model FILE] [--reps N] [--quick] [-o OPT]...

Without --model, a llama-like model is made with ggml's quantizer (q4_K
and q6_K matrices, q8_0, f16 and f32 tensors; --quick: a quarter of it).
Each rep mounts the model twice, each mount fresh (empty f32 cache, no
page cache of the mount's files):

  files        every tensor's own file in model.safetensors' order: raw
               for the types it serves as they are, f32 for the others
  safetensors  model.safetensors from start to end

both read with 1 MiB reads; the model's own file is in the page cache
(read once before).  The table gives the median seconds of --reps runs
(default 5), the bytes, and safetensors / files: the cost of one file
(the header, the pieces at tensor boundaries) against the tensors' own
files.  Not a test: timings, printed, nothing asserted.
"""
import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(TOP, "tests", "integration"))
os.environ.setdefault("GGUFFS_SRC", TOP)
import harness  # noqa: E402

MiB = 1 << 20


def make_model(path, scale):
    import numpy as np
    import ggml
    import gguf_write as gw
    rng = np.random.default_rng(1)
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "bench-safetensors")
    d, ff, layers = 2048, 5632, max(1, int(4 * scale))
    for i in range(layers):
        for name, t, ne in (("attn_q", "q4_K", [d, d]), ("attn_k", "q4_K", [d, d // 4]),
                            ("ffn_up", "q4_K", [d, ff]), ("ffn_down", "q6_K", [ff, d]),
                            ("attn_norm", "f32", [d]), ("ffn_norm", "f32", [d])):
            raw, _ = ggml.random_tensor_bytes(t, ne, rng)
            w.add_tensor("blk.%d.%s.weight" % (i, name), t, ne, raw)
    raw, _ = ggml.random_tensor_bytes("f16", [d, 8192], rng)
    w.add_tensor("token_embd.weight", "f16", [d, 8192], raw)
    raw, _ = ggml.random_tensor_bytes("q8_0", [d, 8192], rng)
    w.add_tensor("output.weight", "q8_0", [d, 8192], raw)
    w.write(path)


def read_file(path):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(MiB)
            if not b:
                return n
            n += len(b)


def spans(mnt):
    """Tensor file paths (under the mount) in model.safetensors' order
    (raw or f32)."""
    with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    import checks
    out = []
    for name, e in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        d = os.path.join(b"tensors", checks.escape_name(name.encode()))
        with open(os.path.join(os.fsencode(mnt), d, b"type")) as f:
            t = f.read().strip()
        plain = e["dtype"] != "F32" or t == "f32"
        out.append(os.path.join(d, b"raw" if plain else b"f32"))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--model")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("-o", dest="opts", action="append", default=[],
                    help="a mount option for both (e.g. threads=0)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gguffs-bench-st-") as tmp:
        model = a.model
        if not model:
            model = os.path.join(tmp, "bench.gguf")
            make_model(model, 0.25 if a.quick else 1)
        opts = [x for o in a.opts for x in ("-o", o)]
        read_file(model)                       # warm: the source in the page cache
        with harness.mount(model, opts) as mnt:
            order = spans(mnt)
        t_files, t_st = [], []
        total_files = total_st = 0
        for _ in range(a.reps):
            with harness.mount(model, opts) as mnt:
                t0 = time.perf_counter()
                total_files = sum(read_file(os.path.join(os.fsencode(mnt), p)) for p in order)
                t_files.append(time.perf_counter() - t0)
            with harness.mount(model, opts) as mnt:
                t0 = time.perf_counter()
                total_st = read_file(os.path.join(mnt, "model.safetensors"))
                t_st.append(time.perf_counter() - t0)
        mf, ms = statistics.median(t_files), statistics.median(t_st)
        print("model: %s (%d tensors, %.1f MiB)" % (os.path.basename(model), len(order),
                                                    os.path.getsize(model) / MiB))
        print("%-12s %10s %12s" % ("read", "seconds", "MiB"))
        print("%-12s %10.3f %12.1f" % ("files", mf, total_files / MiB))
        print("%-12s %10.3f %12.1f" % ("safetensors", ms, total_st / MiB))
        print("safetensors / files: %.2f (median of %d; runs: files %s, safetensors %s)"
              % (ms / mf, a.reps, " ".join("%.3f" % x for x in t_files),
                 " ".join("%.3f" % x for x in t_st)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

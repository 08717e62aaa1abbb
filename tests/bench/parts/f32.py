# scripts/bench --part 2: the dequantization kernels against ggml's to_float, and f32 read through a mount (cold, warm) against raw.
"""
Part 2 (f32), per type, GB/s of float32 output:
  ggml    ggml's to_float over ~64 MiB of output, blocks made by ggml's
          quantizer (tests/bench/bench_dequant.c; median of runs, same data,
          same process)
  ours 1  kern_dequant on one thread; ours N: split over all CPUs
  mount   a generated GGUF with one large tensor per main type (--f32-mb MiB
          of float32 each; --all-types for every type), read sequentially in
          1 MiB preads: tensors/NAME/f32 cold (fresh mount, page cache
          dropped, block cache empty) and warm (read again: the kernel's page
          cache serves it, keep_cache), and tensors/NAME/raw cold (GB/s of
          raw bytes).  "f32 cold / raw" compares the two cold rates.
  --quick: the kernels of f16 and q4_K over 1 MiB, one run; mounts of 1 MiB tensors.
"""
import math
import os
import statistics
import subprocess
import sys
import time

import common
import harness
from common import BUILD, ORACLE, GGUFWriter, drop_caches, need, read_throughput

NAME = "2"
ALIASES = ("f32",)
QUICK_TYPES = ["f16", "q4_K"]

# Types with SIMD kernels: one big tensor each in the mount benchmark.
MAIN_TYPES = ["f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_K", "q3_K",
              "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs", "mxfp4"]


def bench_kernels(quick):
    """tests/bench/bench_dequant: {type: (ggml, ours1, oursN)} in GB/s."""
    exe = os.path.join(BUILD, "tests", "bench", "bench_dequant")
    need(exe)
    reps, mb = ("1", "1") if quick else ("9", "64")
    r = subprocess.run([exe, ORACLE, reps, mb] + (QUICK_TYPES if quick else []),
                       capture_output=True, text=True)
    out = {}
    notes = [l for l in r.stdout.splitlines() if l.startswith("#")]
    for line in r.stdout.splitlines():
        f = line.split()
        if not f or f[0].startswith("#"):
            continue
        out[f[0]] = (float(f[1]), float(f[2]), float(f[3]), len(f) > 4 and f[4] == "MISMATCH")
    if r.returncode != 0:
        sys.stderr.write(r.stderr)
        notes.append("# bench_dequant exited %d: %s" % (r.returncode, r.stderr.strip()[:300]))
    return out, notes


def block_source(ggml, tname, rng):
    """A pool of blocks of tname made by ggml's quantizer from random floats
    (numpy array of shape (blocks, type_size))."""
    import numpy as np
    t = ggml.type_id(tname)
    _, bs, ts = ggml.ggml_types()[t]
    if bs == 1:
        per_row, rows = 4096, 16
    else:
        per_row = 16 if bs >= 256 else 128
        rows = 16 if tname.startswith(("iq1", "iq2", "iq3")) else 64
    x = rng.standard_normal(per_row * rows * bs).astype(np.float32)
    x *= np.exp(rng.uniform(-3, 3, per_row * rows)).astype(np.float32).repeat(bs)
    raw = ggml.quantize(tname, x, per_row * bs)
    return np.frombuffer(raw, np.uint8).reshape(per_row * rows, ts)


def make_types_file(path, types, f32_mib, big=None):
    """One tensor per type, [4096, rows], f32_mib MiB of float32 each; blocks
    drawn at random from a pool quantized by ggml (so not periodic).  big:
    (type, MiB), one more tensor, named big.TYPE, of that many MiB of
    float32.  Returns [(type, f32 bytes, raw bytes)], big's last."""
    import numpy as np
    import ggml
    rng = np.random.default_rng(1)
    ne0 = 4096
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    specs, pos = [], 0
    want = [("bench." + t, t, f32_mib) for t in types]
    if big:
        want.append(("big." + big[0], big[0], big[1]))
    for name, tname, mib in want:
        rows = max(1, (mib << 20) // 4 // ne0)
        _, bs, ts = ggml.ggml_types()[ggml.type_id(tname)]
        nb = ne0 * rows // bs * ts
        w.add_tensor(name, tname, [ne0, rows], data=b"", offset=pos, check=False)
        specs.append((tname, pos, nb, ne0 * rows * 4))
        pos = (pos + nb + 31) // 32 * 32
    hdr, _ = w.layout()
    pools = {}
    with open(path, "wb") as f:
        f.write(hdr)
        for tname, off, nb, _ in specs:
            if tname not in pools:
                pools[tname] = block_source(ggml, tname, rng)
            pool = pools[tname]
            ts = pool.shape[1]
            f.seek(len(hdr) + off)
            left = nb // ts
            while left:
                k = min(left, (64 << 20) // ts)
                f.write(pool[rng.integers(0, pool.shape[0], k)].tobytes())
                left -= k
        f.truncate(len(hdr) + pos)
    return [(t, f32b, nb) for t, _, nb, f32b in specs]


def bench_f32_mount(work, types, f32_mib, reps):
    """{type: (f32 cold, f32 warm, raw cold)} in GB/s; cold means a fresh
    mount with the page cache dropped (when root; else only a fresh mount)."""
    path = os.path.join(work, "types.gguf")
    t0 = time.perf_counter()
    made = make_types_file(path, types, f32_mib)
    print("# part 2: %d tensors of %d MiB of float32 written in %.1fs (%.0f MB file)"
          % (len(made), f32_mib, time.perf_counter() - t0, os.path.getsize(path) / 1e6),
          flush=True)
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    can_drop = drop_caches()
    res = {}
    for tname, f32_bytes, raw_bytes in made:
        d = os.path.join(mnt, "tensors", "bench.%s" % tname)
        cold, warm, raw = [], [], []
        for _ in range(reps):
            drop_caches()
            with harness.mounted(path, mnt=mnt):
                cold.append(read_throughput(os.path.join(d, "f32"), 0, f32_bytes))
                warm.append(read_throughput(os.path.join(d, "f32"), 0, f32_bytes))
            drop_caches()
            with harness.mounted(path, mnt=mnt):
                raw.append(read_throughput(os.path.join(d, "raw"), 0, raw_bytes))
        res[tname] = (statistics.median(cold), statistics.median(warm), statistics.median(raw))
    os.unlink(path)
    return res, can_drop


def run(work, args):
    need(ORACLE, "scripts/setup --tests fetches ggml's library")
    kern, notes = bench_kernels(args.quick)
    f32_mib = args.f32_mb or (1 if args.quick else 128)
    types = [t for t in (list(kern) if args.all_types else MAIN_TYPES) if t in kern]
    mnt_res, can_drop = bench_f32_mount(work, types, f32_mib, args.reps or (1 if args.quick else 3))
    if not can_drop:
        common.left_out(NAME, "not root: \"cold\" is a fresh mount only, page cache not dropped")
    for n in notes:
        print(n)
    print()
    print("Part 2: GB/s of float32 output (raw: GB/s of stored bytes); ratios in parentheses "
          "are against ggml's to_float")
    print("%s; mount tensors %d MiB of f32 each%s" % (
        "kernels: median of runs over the same data in one process", f32_mib,
        "" if can_drop else "; NOT root: \"cold\" is a fresh mount only, page cache not dropped"))
    print()
    print("| type | ggml to_float | ours 1 thread | ours all threads | f32 mount cold "
          "| f32 warm | raw mount | f32 cold / raw |")
    print("|---|---|---|---|---|---|---|---|")
    ratios, ratios_n = [], []
    for t, (g, o1, on, mism) in kern.items():
        ratios.append(o1 / g)
        ratios_n.append(on / g)
        m = mnt_res.get(t)
        cells = [t + (" (MISMATCH)" if mism else ""), "%.2f" % g, "%.2f (%.2fx)" % (o1, o1 / g),
                 "%.2f (%.2fx)" % (on, on / g)]
        if m:
            cells += ["%.2f" % m[0], "%.2f" % m[1], "%.2f" % m[2], "%.2f" % (m[0] / m[2])]
        else:
            cells += ["-"] * 4
        print("| %s |" % " | ".join(cells))
    if ratios:
        gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        gmn = math.exp(sum(math.log(r) for r in ratios_n) / len(ratios_n))
        worst = min(kern, key=lambda t: kern[t][1] / kern[t][0])
        print()
        print("geometric mean ours/ggml: %.2fx on one thread (target >= 2), %.2fx on all threads; "
              "lowest: %s %.2fx (target >= 1)" % (gm, gmn, worst, kern[worst][1] / kern[worst][0]))
    low = [t for t, m in mnt_res.items() if m[0] / m[2] < 0.8]
    if mnt_res:
        print("f32 cold / raw cold below 0.8 (target): %s" % (", ".join(low) or "none"))


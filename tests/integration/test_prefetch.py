#!/usr/bin/python3
# Prefetch that cannot thrash: 16 processes each read their own q4_K tensor's f32 from start to end with 14 workers and a 64 MiB cache; every chunk must be filled about once (misses <= 1.1 x the chunks), counted from the stats file, no timing.
"""
Each worker fills the chunks ahead of a sequential reader; when many
readers read at once, what all of them queue ahead together must fit in
the cache, or chunks filled ahead are evicted before their reader comes and
are filled again (16 readers, threads=14, cache_size=64M filled
1218 chunks for 528 on 2 CPUs, and 6125 fills for 2096 chunks on 16 CPUs).
The model: 16 q4_K tensors of 8 Mi elements (32 MiB of f32 each), made of
256 blocks quantized by ggml and repeated.  The readers start together (a
pipe) and read 4 MiB at a time; the first bytes of each read are compared
with ggml's dequantization of the blocks.  Counted: the stats file's
misses (chunks filled) against the chunks read, and prefetch_wasted
(chunks filled ahead and evicted unread).  GGUFFS_PREFETCH_READERS and
GGUFFS_PREFETCH_MIB change the shape (by hand).
"""
import multiprocessing
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

READERS = int(os.environ.get("GGUFFS_PREFETCH_READERS") or 16)
MIB = int(os.environ.get("GGUFFS_PREFETCH_MIB") or 32)      # of f32 per tensor
OPTS = ["-o", "threads=14,cache_size=64M"]


def make_model(ggml, path):
    rng = np.random.default_rng(2211)
    base = rng.standard_normal(256 * 256).astype(np.float32)
    blocks = ggml.quantize("q4_K", base, 256)
    n = MIB << 18                                    # elements: MIB MiB of f32
    reps = n // (256 * 256)
    raw = blocks * reps
    f32_one = ggml.dequant("q4_K", blocks)           # 256 blocks' floats
    tensors = [("t%02d" % i, "q4_K", [4096, n // 4096], raw) for i in range(READERS)]
    ggml.write_model(path, [("general.architecture", "string", "llama")], tensors)
    return f32_one.view("<u4").tobytes()


def reader(mnt, name, want, go, out, i):
    os.read(go, 1)
    fd = os.open(os.path.join(mnt, "tensors", name, "f32"), os.O_RDONLY)
    got = bad = 0
    try:
        while True:
            b = os.read(fd, 4 << 20)
            if not b:
                break
            off = got % len(want)
            k = min(len(b), 4096, len(want) - off)
            if b[:k] != want[off:off + k]:
                bad += 1
            got += len(b)
    finally:
        os.close(fd)
    out[2 * i], out[2 * i + 1] = got, bad


def main():
    h = harness.start("prefetch")
    ggml = harness.require_oracle()
    with tempfile.TemporaryDirectory(prefix="gguffs-prefetch-") as tmp:
        model = os.path.join(tmp, "m.gguf")
        want = make_model(ggml, model)
        with harness.mounted(model, OPTS) as g:
            s0 = harness.read_stats(g.mnt)
            ctx = multiprocessing.get_context("fork")
            out = ctx.Array("q", 2 * READERS, lock=False)
            go_r, go_w = os.pipe()
            procs = [ctx.Process(target=reader, args=(g.mnt, "t%02d" % i, want, go_r, out, i))
                     for i in range(READERS)]
            for p in procs:
                p.start()
            os.write(go_w, b"g" * READERS)
            for p in procs:
                p.join(600)
                h.check(p.exitcode == 0, "a reader failed or hung: %r" % p.exitcode)
            os.close(go_r)
            os.close(go_w)
            s = harness.read_stats(g.mnt)
        chunk = int(s.get("chunk_bytes") or s.get("block_bytes") or (1 << 20))
        chunks = READERS * -(-(MIB << 20) // chunk)
        total = sum(out[2 * i] for i in range(READERS))
        h.check(total == READERS * (MIB << 20), "read %d bytes, want %d" % (total, READERS * (MIB << 20)))
        h.check(sum(out[2 * i + 1] for i in range(READERS)) == 0, "reads gave wrong floats")
        misses = s["misses"] - s0["misses"]
        wasted = s.get("prefetch_wasted", 0) - s0.get("prefetch_wasted", 0)
        print("  %d readers, %d MiB of f32 each, %s: %d chunks of %d bytes, %d filled (%.2fx), "
              "%d prefetched, %d of them evicted unread, %d evictions"
              % (READERS, MIB, " ".join(OPTS[1::2]), chunks, chunk, misses, misses / chunks,
                 s["prefetched"] - s0["prefetched"], wasted, s["evictions"] - s0["evictions"]),
              flush=True)
        h.check("prefetch_wasted" in s, "stats has no prefetch_wasted")
        h.check(misses <= 1.1 * chunks, "%d fills for %d chunks: chunks filled ahead were evicted "
                "before their reader came (%d wasted)" % (misses, chunks, wasted))
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

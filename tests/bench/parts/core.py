# scripts/bench --part 1: parsing against ggml's gguf_init_from_file, mount to ready, raw reads against a direct read of the model file.
"""
Part 1 (core):
  parse   gguf_open() vs ggml's gguf_init_from_file(no_alloc) on a generated
          header with a 150k-string vocabulary and 1000 tensors (median of
          21 alternating runs in one process: tests/bench/bench_parse.c)
  mount   time from starting gguffs to a ready mount (the command returns)
  raw     sequential read of tensors/NAME/raw through the mount vs a direct
          read of the same bytes of the model file; cold (page cache dropped
          before each) and warm (read again)
  walk    `ls -lR`, `du -s`, `find -size +1k` and `tree -s -a` of a mount
          of 2000 tensors, the first walk after the mount (nothing cached
          by the kernel) and again, vs the same walks of the null FUSE
          server (tests/bench/nullfs, as many files per tensor folder, the
          same session setup) mounted in the same run; the same tree of
          directories and sparse files on the disk (TMPDIR) alongside;
          target 0.1 s per 1000 tensors
  --quick: a 15k-token header, 3 runs, 2 mounts, 16 MiB of raw, one read each,
  a walk of 200 tensors.
"""
import os
import random
import shutil
import statistics
import subprocess
import time

import common
import harness
from common import BUILD, ORACLE, GGUFWriter, drop_caches, make_big_file, need, \
    read_throughput, sh

NAME = "1"
ALIASES = ("core",)


def make_header_file(path, n_tok=150000, n_tensors=1000):
    """A vocabulary of n_tok strings, scores and types (and 2/3 as many
    merges), n_tensors small tensors."""
    rnd = random.Random(1)
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "bench")
    toks = ["tok%d_%s" % (i, "x" * rnd.randrange(1, 12)) for i in range(n_tok)]
    w.add("tokenizer.ggml.tokens", "array[string]", toks)
    w.add("tokenizer.ggml.scores", "array[f32]", [float(-i) for i in range(n_tok)])
    w.add("tokenizer.ggml.token_type", "array[i32]", [1] * n_tok)
    merges = ["a%d b%d" % (i, i) for i in range(n_tok * 2 // 3)]
    w.add("tokenizer.ggml.merges", "array[string]", merges)
    for i in range(n_tensors):
        w.add_tensor("blk.%d.ffn.weight" % i, "f32", [8, 4])
    w.write(path)


def bench_parse(work, rows, quick):
    path = os.path.join(work, "header.gguf")
    n_tok, n_t = (15000, 100) if quick else (150000, 1000)
    make_header_file(path, n_tok, n_t)
    exe = os.path.join(BUILD, "tests", "bench", "bench_parse")
    need(exe)
    out = sh(exe, path, ORACLE, "3" if quick else "21", capture_output=True, text=True).stdout
    vals = dict(kv.split("=") for kv in out.split())
    rows.append(("parse: %dk-token vocab + %d tensors (%.1f MB header)"
                 % (n_tok // 1000, n_t, os.path.getsize(path) / 1e6),
                 "%.2f ms" % float(vals["ours_ms"]),
                 "ggml gguf_init_from_file %.2f ms" % float(vals["ggml_ms"]),
                 "%.3f" % float(vals["ratio"]), "<= 0.1"))
    return path


def bench_mount(work, model, rows, quick):
    """From starting gguffs (daemonizing) until the command has returned
    and meta/ answers."""
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    times = []
    for _ in range(2 if quick else 7):
        t0 = time.perf_counter()
        with harness.mount_daemon(model, mnt=mnt):
            os.stat(os.path.join(mnt, "meta"))
            times.append(time.perf_counter() - t0)
    rows.append(("mount to ready (same file)", "%.1f ms" % (statistics.median(times) * 1e3),
                 "-", "-", "-"))


def bench_raw(work, size_mb, rows, quick):
    path = os.path.join(work, "big.gguf")
    hdr = make_big_file(path, size_mb)
    length = size_mb << 20
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    raw = os.path.join(mnt, "tensors", "big.weight", "raw")
    reps = 1 if quick else 3
    can_drop = drop_caches()
    if can_drop:
        direct = []
        fuse = []
        for _ in range(reps):
            drop_caches()
            direct.append(read_throughput(path, hdr, length))
            drop_caches()
            with harness.mounted(path, mnt=mnt):
                fuse.append(read_throughput(raw, 0, length))
        d, f = statistics.median(direct), statistics.median(fuse)
        rows.append(("raw read, cold (%d MiB, page cache dropped)" % size_mb,
                     "%.2f GB/s" % f, "direct read %.2f GB/s" % d, "%.2f" % (f / d), ">= 0.6"))
    with harness.mounted(path, mnt=mnt):
        read_throughput(raw, 0, length)
        read_throughput(path, hdr, length)
        direct = [read_throughput(path, hdr, length) for _ in range(reps)]
        fuse = [read_throughput(raw, 0, length) for _ in range(reps)]
    d, f = statistics.median(direct), statistics.median(fuse)
    rows.append(("raw read, warm (%d MiB, in page cache)" % size_mb,
                 "%.2f GB/s" % f, "direct read %.2f GB/s" % d, "%.2f" % (f / d), ">= 0.9"))
    os.unlink(path)
    return can_drop


PYWALK = ("import os, sys\n"
          "for d, ds, fs in os.walk(sys.argv[1]):\n"
          "    for f in fs: os.stat(os.path.join(d, f))\n")
WALKS = [("ls -lR", ["ls", "-lR"]), ("du -s", ["du", "-s"]),
         ("find -size +1k", ["find", None, "-size", "+1k"]), ("tree -s -a", ["tree", "-s", "-a"]),
         ("os.walk + os.stat", ["/usr/bin/python3", "-c", PYWALK])]


def walk_once(argv, root):
    """Seconds for one walk command on root."""
    argv = [root if a is None else a for a in argv] + ([] if None in argv else [root])
    t0 = time.perf_counter()
    sh(*argv, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def mirror(src, dst):
    """The tree under src made again under dst: directories, and sparse
    files of the same sizes."""
    for d, dirs, files in os.walk(src):
        rel = os.path.relpath(d, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for f in files:
            with open(os.path.join(dst, rel, f), "wb") as fh:
                fh.truncate(os.stat(os.path.join(d, f)).st_size)


def bench_walk(work, rows, quick):
    """Each walk of WALKS on a mount of n_t tensors, first after a new
    mount and again, against the same walk of the null FUSE server
    (tests/bench/nullfs, as many files per tensor folder) mounted in the
    same run, and of the same tree on the disk; medians of 5 mounts."""
    n_t = 200 if quick else 2000
    reps = 1 if quick else 5
    path = os.path.join(work, "walk.gguf")
    make_header_file(path, 1000, n_t)
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    with harness.mounted(path, mnt=mnt):
        tree = os.path.join(work, "walk-tree")
        mirror(mnt, tree)
        names = sorted(os.listdir(os.path.join(mnt, "tensors")))
        files = len(os.listdir(os.path.join(mnt, "tensors", names[0])))
    specs = ["%s:128:512" % n for n in names]
    have_tree = shutil.which("tree") is not None
    if not have_tree:
        common.left_out(NAME, "no tree(1): its walk rows")
    for label, argv in WALKS:
        if argv[0] == "tree" and not have_tree:
            continue
        runs = {"gguffs": [], "null": [], "disk": []}
        for _ in range(reps):
            # each walk on a new mount: the first finds nothing cached
            with harness.mounted(path, mnt=mnt):
                runs["gguffs"].append((walk_once(argv, mnt), walk_once(argv, mnt)))
            null = common.FuseMount([common.NULLFS, "-f", "-o", "files=%d" % files, mnt] + specs,
                                    mnt, 0, write_ra=False)
            try:
                runs["null"].append((walk_once(argv, mnt), walk_once(argv, mnt)))
            finally:
                null.close()
            runs["disk"].append((walk_once(argv, tree), walk_once(argv, tree)))
        for k, when in ((0, "first after the mount"), (1, "again")):
            g, n, d = (statistics.median(r[k] for r in runs[who]) for who in ("gguffs", "null", "disk"))
            rows.append(("walk: %s, %d tensors (%s)" % (label, n_t, when),
                         "%.3f s (%.3f s per 1000 tensors)" % (g, g * 1000 / n_t),
                         "null FUSE server %.3f s (disk %.3f s)" % (n, d), "%.2f" % (g / n),
                         "<= 0.1 s per 1000 tensors"))
    shutil.rmtree(tree, ignore_errors=True)
    os.unlink(path)


def run(work, args):
    need(ORACLE, "scripts/setup --tests fetches ggml's library")
    size_mb = args.size_mb or (16 if args.quick else 2048)
    rows = []
    hdr_file = bench_parse(work, rows, args.quick)
    bench_mount(work, hdr_file, rows, args.quick)
    bench_walk(work, rows, args.quick)
    if not bench_raw(work, size_mb, rows, args.quick):
        common.left_out(NAME, "not root: no cold raw rows (page cache not dropped)")
    print("Part 1")
    print()
    print("| benchmark | gguffs | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| %s |" % " | ".join(r))
    print(flush=True)

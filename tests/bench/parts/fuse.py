# scripts/bench --part fuse: every read through the mount against the ceiling of FUSE itself, the null FUSE server (tests/bench/nullfs) mounted in the same run.
"""
Part fuse: every read through the mount against the ceiling,
a null FUSE server (tests/bench/nullfs: same libfuse and session setup as
gguffs, every read answered from a static buffer) mounted the same way, in
the same run.  A generated model with one tensor of --f32-mb MiB of float32
output per type (default 64; types: f32 f16 bf16 q4_0 q8_0
q4_K q6_K iq4_xs iq2_xxs mxfp4, --types or --all-types to change) and
big.q4_K of twice that, read with -o cache_size of half its f32 size: a
tensor larger than the block cache (--no-big: without it).
For each readahead (--readahead; the mount's bdi read_ahead_kb, written
after mounting for both servers) and each read: read() 4 MiB to EOF
(dd-like), numpy.fromfile, random 1 MiB preads, mmap sequential and mmap
random (numpy.memmap, every page touched; fromfile and mmap on f32, f16
and q4_K only): the null server on a file of the same size, and gguffs' raw and f32 of every
type on a fresh mount (f32: the first read, not served by the block cache),
the model file page-cached and (read() and preads) evicted with
posix_fadvise(DONTNEED).  Also: the null
server with direct_io; warm re-reads (page cache of the FUSE file) of both
and direct reads of the page-cached model file; 8 readers of different tensors at once
(aggregate, gguffs' peak RSS); and the FUSE READ requests each server got
(count, average size: kernel tracepoints fuse:fuse_request_*, root; tracefs
is mounted at /sys/kernel/tracing for the run if it is not; and nullfs' own
counters) with gguffs' stats.  Best of --reps
(default 3).  Tables in markdown, GB/s with ratios to the null
server (same readahead, same size) and to its best over readahead settings.
Repetitions after the first are run only while they fit in --budget
seconds (default 540, from the start of the part): under 10 minutes on 2
shared cores.
  --quick: the first 8 of those types (enough for the 8 readers at once),
  1 MiB of float32 each and big.q4_K of twice that, readahead 1M, one
  repetition.
"""
import contextlib
import os
import random
import statistics
import subprocess
import sys
import time

import common
import harness
from common import GGUFFS, NULLFS, ORACLE, FuseMount, best, counters, cpu_between, fmt_gbs, fmt_ratio, \
    need, proc_cpu_ms, proc_status, self_cpu_ms, warm_up
from f32 import make_types_file

NAME = "fuse"
ALIASES = ()
QUICK_MIB = 1

# ------------------------------------------- part fuse: the FUSE ceiling ----------

DEFAULT_CACHE = 256 << 20    # gguffs' default cache_size (fs/options.h)
# The types of part fuse (--types or --all-types to change), and the type of
# the tensor larger than the block cache.
FUSE_TYPES = ["f32", "f16", "bf16", "q4_0", "q8_0", "q4_K", "q6_K", "iq4_xs", "iq2_xxs", "mxfp4"]
BIG_TYPE = "q4_K"
BIG_NAME = "big." + BIG_TYPE
READAHEADS = [(128 << 10, "128K"), (1 << 20, "1M"), (4 << 20, "4M")]   # --readahead
SEQ_BLOCK = 4 << 20          # dd bs=4M
RAND_BLOCK = 1 << 20         # random preads, and the windows of mmap random
PAGE = 4096
N_READERS = 8
RAND_SEED = 12
# The types numpy.fromfile and the mmap reads are run on: they ask gguffs
# for what read() 4 MiB does (fromfile) or for what the kernel's mapping of
# a FUSE file asks, whatever the type; these cover splice, f16 and a K-quant.
SOME_TYPES = ("f32", "f16", "q4_K")
# (key, label, views of gguffs it is run on, warm re-read, also with the
# model file not cached, types: None for all).  fromfile is numpy's float32
# reader: f32 only.  The big tensor is read sequentially (cached and not)
# and at random (cached).
PATTERNS = [
    ("seq", "read() 4 MiB", ("raw", "f32", "big"), True, True, None),
    ("fromfile", "numpy.fromfile", ("f32",), False, False, SOME_TYPES),
    ("rand", "random 1 MiB preads", ("raw", "f32", "big"), False, True, None),
    ("mmap", "mmap sequential", ("raw", "f32"), True, False, SOME_TYPES),
    ("mmap_rand", "mmap random", ("raw", "f32"), False, False, SOME_TYPES),
]
PAT = {p[0]: p for p in PATTERNS}
# (key, label, timer, block): the null server opened with direct_io
DIO = [("dio_seq1m", "read() 1 MiB", "seq", 1 << 20), ("dio_seq", "read() 4 MiB", "seq", SEQ_BLOCK),
       ("dio_rand", "random 1 MiB preads", "rand", RAND_BLOCK)]


def slots(size):
    """The fixed, seeded order of the 1 MiB windows of a file of size bytes."""
    s = list(range((size + RAND_BLOCK - 1) // RAND_BLOCK))
    random.Random(RAND_SEED).shuffle(s)
    return s


def touched(n):
    """A buffer of n bytes whose pages have been written once: the first
    touch of fresh memory costs a fault per page, which on this VM (shadowed
    page tables) is several microseconds, a few ms per 4 MiB, and is no part
    of the read being timed."""
    buf = bytearray(n)
    buf[:] = b"\1" * n
    return buf


def t_seq(path, size, block=SEQ_BLOCK):
    """dd-like: read() of block bytes until EOF; seconds (open not timed)."""
    buf = touched(block)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        t0 = time.perf_counter()
        while True:
            n = os.readv(fd, [buf])
            if n <= 0:
                break
            got += n
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
    if got != size:
        raise RuntimeError("%s: read %d bytes, expected %d" % (path, got, size))
    return dt


def t_fromfile(path, size, block=None):
    import numpy as np
    t0 = time.perf_counter()
    a = np.fromfile(path, dtype=np.float32)
    dt = time.perf_counter() - t0
    if a.nbytes != size:
        raise RuntimeError("%s: numpy.fromfile got %d bytes, expected %d" % (path, a.nbytes, size))
    return dt


def t_rand(path, size, block=RAND_BLOCK):
    """block-sized preads at every block-sized window of the file, in a seeded
    order."""
    buf = touched(block)
    mv = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        order = slots(size)
        got = 0
        t0 = time.perf_counter()
        for s in order:
            off = s * block
            got += os.preadv(fd, [mv[:min(block, size - off)]], off)
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
    if got != size:
        raise RuntimeError("%s: random preads got %d bytes, expected %d" % (path, got, size))
    return dt


def t_mmap(path, size, block=None):
    """numpy.memmap of the file (mmap, MAP_SHARED), one byte of every 4 KiB
    page touched in order: each page faulted in through the mapping (the
    mapping is timed too)."""
    import numpy as np
    t0 = time.perf_counter()
    m = np.memmap(path, dtype=np.uint8, mode="r")
    int(m[::PAGE].sum())
    dt = time.perf_counter() - t0
    n = m.size
    del m
    if n != size:
        raise RuntimeError("%s: mapped %d bytes, expected %d" % (path, n, size))
    return dt


def t_mmap_rand(path, size, block=None):
    """numpy.memmap; the pages of each 1 MiB window touched, windows in the
    order of the random preads."""
    import numpy as np
    order = slots(size)
    t0 = time.perf_counter()
    m = np.memmap(path, dtype=np.uint8, mode="r")
    for s in order:
        off = s * RAND_BLOCK
        int(m[off:off + RAND_BLOCK:PAGE].sum())
    dt = time.perf_counter() - t0
    del m
    return dt


TIMERS = {"seq": t_seq, "fromfile": t_fromfile, "rand": t_rand, "mmap": t_mmap,
          "mmap_rand": t_mmap_rand}


def gbs(pat, path, size, block=None):
    """GB/s of one timed read of path."""
    if block is None:
        return size / TIMERS[pat](path, size) / 1e9
    return size / TIMERS[pat](path, size, block) / 1e9


def evict(path):
    """The file's pages out of the page cache (it is clean: written and
    synced once), as drop_caches would, without emptying everyone else's
    cache; works without root (checked here with fincore: every page goes)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident(path, evict_first=False):
    """Bytes of path in the page cache (util-linux fincore), None if unknown."""
    if evict_first:
        evict(path)
    try:
        r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                           capture_output=True, text=True, check=True)
        return int(r.stdout.split()[0])
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        return None


def readers(paths, size, sampler=None):
    """N processes, one per path, each reading its file sequentially in
    4 MiB read()s, started together (a barrier after open); aggregate GB/s
    from the first start to the last end (CLOCK_MONOTONIC in every process).
    sampler (a context manager: harness.RssPeak) runs while they read,
    started after the fork."""
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    bar = ctx.Barrier(len(paths) + 1)
    q = ctx.Queue()

    def child(path):
        buf = bytearray(SEQ_BLOCK)
        fd = os.open(path, os.O_RDONLY)
        bar.wait()
        t0 = time.perf_counter()
        got = 0
        while True:
            n = os.readv(fd, [buf])
            if n <= 0:
                break
            got += n
        t1 = time.perf_counter()
        os.close(fd)
        q.put((got, t0, t1))

    procs = [ctx.Process(target=child, args=(p,)) for p in paths]
    for p in procs:
        p.start()
    try:
        with sampler or contextlib.nullcontext():
            bar.wait(timeout=60)
            res = [q.get(timeout=600) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.exitcode is None:
                p.kill()
    if any(r[0] != size for r in res):
        raise RuntimeError("readers: short reads %s" % [r[0] for r in res])
    return sum(r[0] for r in res) / (max(r[2] for r in res) - min(r[1] for r in res)) / 1e9


class FuseTracer:
    """FUSE READ requests of one mount, from the kernel's fuse tracepoints
    (fuse_request_send, fuse_request_end; Linux 6.15+) in a private tracefs
    instance (the global trace buffer is left alone): how many requests the
    kernel sent and how many bytes each reply carried, whatever the server.
    Needs root and tracefs mounted at /sys/kernel/tracing."""

    ROOT = "/sys/kernel/tracing"

    @classmethod
    def available(cls):
        return os.path.isdir(os.path.join(cls.ROOT, "events", "fuse", "fuse_request_end"))

    @classmethod
    def mount(cls):
        """Mounts tracefs where it belongs if it is not (root); True if this
        mounted it (then unmount() when done)."""
        if cls.available() or os.geteuid() != 0 or not os.path.isdir(cls.ROOT):
            return False
        r = subprocess.run(["mount", "-t", "tracefs", "tracefs", cls.ROOT],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return r.returncode == 0

    @classmethod
    def unmount(cls):
        subprocess.run(["umount", cls.ROOT], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def __init__(self):
        self.inst = os.path.join(self.ROOT, "instances", "gguffs-bench-%d" % os.getpid())
        os.mkdir(self.inst)
        self.put("buffer_size_kb", "16384")

    def put(self, rel, text):
        with open(os.path.join(self.inst, rel), "w") as f:
            f.write(text + "\n")

    def start(self, dev):
        """Records the requests of the mount whose st_dev is dev."""
        conn = (os.major(dev) << 20) | os.minor(dev)      # the kernel's dev_t
        self.put("trace", "")
        for ev, extra in (("fuse_request_send", " && opcode == 15"), ("fuse_request_end", "")):
            self.put("events/fuse/%s/filter" % ev, "connection == %d%s" % (conn, extra))
            self.put("events/fuse/%s/enable" % ev, "1")

    def stop(self):
        """(READ requests, bytes replied to them, complete: no event lost)."""
        for ev in ("fuse_request_send", "fuse_request_end"):
            self.put("events/fuse/%s/enable" % ev, "0")
        reads, ends, complete = set(), {}, True
        with open(os.path.join(self.inst, "trace")) as f:
            for line in f:
                if line.startswith("#"):
                    m = line.split("entries-in-buffer/entries-written:")
                    if len(m) == 2:
                        a, b = m[1].split()[0].split("/")
                        complete = a == b
                    continue
                w = line.split()
                try:
                    unique = int(w[w.index("req") + 1])
                    if "fuse_request_send:" in line:
                        reads.add(unique)
                    elif "fuse_request_end:" in line and int(w[w.index("error") + 1]) == 0:
                        ends[unique] = int(w[w.index("len") + 1]) - 16   # out header
                except (ValueError, IndexError):
                    complete = False
        self.put("trace", "")
        n = [ends[u] for u in reads if u in ends]
        return len(n), sum(n), complete and len(n) == len(reads)

    def close(self):
        try:
            os.rmdir(self.inst)
        except OSError:
            pass


class FuseBench:
    """Runs the measurements of part fuse and keeps every sample (GB/s)."""

    def __init__(self, work, model, made, big, args):
        self.work = work
        self.model = model
        self.model_size = os.path.getsize(model)
        self.made = made                              # [(type, f32 bytes, raw bytes)]
        self.types = [t for t, _, _ in made]
        self.raw_size = {t: rb for t, _, rb in made}
        self.f32 = made[0][1]
        self.big = big                                # (f32 bytes, raw bytes) or None
        self.big_cache = big[0] // 2 if big else None  # cache_size for it
        # the reads of the big tensor: (page cache, pattern)
        self.big_reads = {("cached", "seq")}
        if not args.quick:
            self.big_reads |= {("not cached", "seq"), ("cached", "rand")}
        self.mnt = os.path.join(work, "mnt")
        os.makedirs(self.mnt, exist_ok=True)
        self.g = {}       # (ra, pc, type, view, pattern, phase) -> [GB/s]; type BIG_NAME: big
        self.n = {}       # (ra, size, pattern, phase) -> [GB/s]; ra "dio": direct_io
        self.nreq = {}    # (ra, size, pattern) -> (requests, bytes): nullfs' stats, cold read
        self.direct = {}  # pattern -> [GB/s]: the page-cached model file, read directly
        self.many = {}    # (ra, "gguffs") and (ra, "null") -> [GB/s]
        self.rss = {}     # ra -> [(peak VmRSS kB, VmHWM kB)]
        self.cpu = {}     # (("null", None) or ("gguffs", type/view), ra) -> [server ms, reader ms,
                          # bytes]: read() 4 MiB cold, model cached, pooled over repetitions
        self.req = {}     # (ra, server, what, pattern) -> (requests, bytes, complete, gguffs stats)
        self.time = {}    # what -> seconds spent on it, mounts included
        self.req_error = None
        self.ra_seen = set()
        self.ra_gguffs = set()   # read_ahead_kb as gguffs left it (before ours)
        # nullfs files: one per distinct size (the f32 size, each raw size,
        # the big tensor's), named by size
        sizes = {self.f32} | set(self.raw_size.values())
        if big:
            sizes |= set(big)
        self.null_sizes = sorted(sizes)
        self.null_specs = ["s%d:%d:%d" % (s, s, s) for s in self.null_sizes]
        # and N_READERS files of the f32 size for the readers at once
        self.null_specs += ["many%d:%d:%d" % (i, self.f32, self.f32)
                            for i in range((N_READERS + 1) // 2)]

    # -- servers and files
    def gguffs(self, ra, cache=None):
        # below one request (128K): readahead=0, the kernel's own 128 KiB
        opts = "readahead=%d" % (ra if ra >= 1 << 20 else 0) + \
            (",cache_size=%d" % cache if cache else "")
        argv = [GGUFFS, "-f", "-o", opts, self.model, self.mnt]
        m = FuseMount(argv, self.mnt, ra, write_ra=False)
        return m

    def nullfs(self, ra, direct_io=False):
        argv = [NULLFS, "-f", "-o", "readahead=%d" % ra] + (["-o", "direct_io"] if direct_io else [])
        return FuseMount(argv + [self.mnt] + self.null_specs, self.mnt, ra)

    def gpath(self, t, view):
        if t == BIG_NAME:
            return os.path.join(self.mnt, "tensors", BIG_NAME, view)
        return os.path.join(self.mnt, "tensors", "bench.%s" % t, view)

    def gsize(self, t, view):
        if t == BIG_NAME:
            return self.big[0] if view == "f32" else self.big[1]
        return self.f32 if view == "f32" else self.raw_size[t]

    def npath(self, size):
        return os.path.join(self.mnt, "tensors", "s%d" % size, "raw")

    def add(self, d, key, v):
        d.setdefault(key, []).append(v)

    # -- one group: a readahead and a pattern
    def timed(self, key, pid, pat, path, size):
        """gbs() of one read; for sequential read(), its CPU (server and
        reader) added to self.cpu[key] (key: (what, readahead))."""
        if pat != "seq" or key is None:
            return gbs(pat, path, size)
        s0, r0 = proc_cpu_ms(pid), self_cpu_ms()
        v = gbs(pat, path, size)
        srv, r1 = cpu_between(s0, proc_cpu_ms(pid)), self_cpu_ms()
        if srv is not None:
            c = self.cpu.setdefault(key, [0.0, 0.0, 0])
            c[0] += srv
            c[1] += r1 - r0
            c[2] += size
        return v

    def spent(self, what, t0):
        self.time[what] = self.time.get(what, 0) + time.perf_counter() - t0

    def null_group(self, ra, pat):
        warm = PAT[pat][3]
        t0 = time.perf_counter()
        with self.nullfs(ra) as m:
            self.ra_seen.add(m.ra_kb)
            stats = os.path.join(self.mnt, "stats")
            for size in self.null_sizes:
                if pat == "fromfile" and size != self.f32:
                    continue
                c0 = counters(stats)
                key = (("null", None), ra) if size == self.f32 else None
                self.add(self.n, (ra, size, pat, "cold"),
                         self.timed(key, m.p.pid, pat, self.npath(size), size))
                c1 = counters(stats)
                self.nreq[(ra, size, pat)] = (c1["reads"] - c0["reads"], c1["bytes"] - c0["bytes"])
                if warm:
                    self.add(self.n, (ra, size, pat, "warm"), gbs(pat, self.npath(size), size))
        self.spent("null " + pat, t0)

    def gguffs_one(self, ra, pc, t, view, pat):
        t0 = time.perf_counter()
        if pc == "not cached":
            evict(self.model)
        with self.gguffs(ra, self.big_cache if t == BIG_NAME else None) as m:
            self.ra_gguffs.add(m.ra_kb)
            p, size = self.gpath(t, view), self.gsize(t, view)
            key = (("gguffs", "%s/%s" % (t, view)), ra) if pc == "cached" and t != BIG_NAME \
                else None
            self.add(self.g, (ra, pc, t, view, pat, "cold"), self.timed(key, m.p.pid, pat, p, size))
            if PAT[pat][3]:
                self.add(self.g, (ra, pc, t, view, pat, "warm"), gbs(pat, p, size))
        self.spent("gguffs %s %s%s" % (pat, "big" if t == BIG_NAME else view,
                                       ", not cached" if pc == "not cached" else ""), t0)

    def gguffs_group(self, ra, pat):
        _, _, views, _, uncached, types = PAT[pat]
        for pc in ("cached", "not cached") if uncached else ("cached",):
            if pc == "cached":
                warm_up(self.model)
            for t in self.types:
                if types and t not in types:
                    continue
                for view in ("raw", "f32"):
                    if view in views:
                        self.gguffs_one(ra, pc, t, view, pat)
            if self.big and "big" in views and (pc, pat) in self.big_reads:
                self.gguffs_one(ra, pc, BIG_NAME, "f32", pat)

    def measure_many(self, ra):
        """N_READERS processes at once, model cached, on gguffs and on the null
        server."""
        paths = [self.gpath(t, "f32") for t in self.types[:N_READERS]]
        warm_up(self.model)
        with self.gguffs(ra) as m:
            s = harness.RssPeak(m.p.pid, 0.005)
            self.add(self.many, (ra, "gguffs"), readers(paths, self.f32, s))
            self.add(self.rss, ra, (s.peak, proc_status(m.p.pid, "VmHWM") or 0))
        with self.nullfs(ra) as m:
            paths = [os.path.join(self.mnt, "tensors", "many%d" % (i // 2), ("raw", "f32")[i % 2])
                     for i in range(N_READERS)]
            self.add(self.many, (ra, "null"), readers(paths, self.f32))

    def measure_direct(self):
        """Warm reads of the page-cached model file itself, directly (read()
        4 MiB to EOF; numpy.memmap, every page touched)."""
        size = os.path.getsize(self.model)
        warm_up(self.model)
        for pat in ("seq", "mmap"):
            TIMERS[pat](self.model, size)
            self.add(self.direct, pat, gbs(pat, self.model, size))

    def measure_dio(self):
        """The null server with direct_io: no page cache, no readahead; reads
        go to the server as the caller's size (at most max_pages, 1 MiB, a
        request)."""
        with self.nullfs(READAHEADS[0][0], direct_io=True):
            for key, _, pat, block in DIO:
                self.add(self.n, ("dio", self.f32, key, "cold"),
                         gbs(pat, self.npath(self.f32), self.f32, block))

    def measure_requests(self):
        """Untimed: FUSE READ requests and their average size, for both
        servers, from the kernel's tracepoints; gguffs' stats after each."""
        tr = FuseTracer()
        try:
            # raw is spliced like f32 of the f32 type (and the mmap reads
            # ask what read() does)
            probes = [("f32", "f32"), (BIG_TYPE, "f32")]
            probes = [(t, v) for t, v in probes if t in self.types]
            for ra, _ in READAHEADS:
                for pat in ("seq", "rand"):
                    with self.nullfs(ra) as m:
                        tr.start(m.dev)
                        TIMERS[pat](self.npath(self.f32), self.f32)
                        self.req[(ra, "null", "f32", pat)] = tr.stop() + (None,)
                    warm_up(self.model)
                    for t, view in probes:
                        with self.gguffs(ra) as m:
                            tr.start(m.dev)
                            TIMERS[pat](self.gpath(t, view), self.gsize(t, view))
                            r = tr.stop()
                            st = counters(os.path.join(self.mnt, "stats"))
                            self.req[(ra, "gguffs", "%s/%s" % (t, view), pat)] = r + (st,)
        finally:
            tr.close()

    def run(self, reps, requests, deadline):
        """Repetitions while the next one (as long as the last) ends before
        deadline (time.perf_counter()); the first always runs.  Returns
        the number run."""
        if requests:
            t0 = time.perf_counter()
            try:
                self.measure_requests()
            except OSError as e:
                self.req.clear()
                self.req_error = "tracing failed: %s" % e
            print("# part fuse: requests traced in %.0fs" % (time.perf_counter() - t0), flush=True)
        many = len(self.types) >= N_READERS
        done = 0
        for rep in range(reps):
            t_rep = time.perf_counter()
            for ra, ra_name in READAHEADS:
                t0 = time.perf_counter()
                for pat in PAT:
                    self.null_group(ra, pat)
                    self.gguffs_group(ra, pat)
                if many:
                    t1 = time.perf_counter()
                    self.measure_many(ra)
                    self.spent("%d readers" % N_READERS, t1)
                print("# part fuse: repetition %d/%d, readahead %s: %.0fs"
                      % (rep + 1, reps, ra_name, time.perf_counter() - t0), flush=True)
            self.measure_direct()
            self.measure_dio()
            done += 1
            now = time.perf_counter()
            if rep + 1 < reps and now + (now - t_rep) > deadline:
                print("# part fuse: stopping after %d repetitions: another would end past "
                      "--budget" % done, flush=True)
                break
        return done


def fmt_cell(v, ref):
    """GB/s and, in parentheses, its ratio to ref."""
    if not v:
        return "-"
    return "%.2f (%s)" % (v, fmt_ratio(v, ref))


def fmt_req(n, nbytes):
    """requests and their average size"""
    if not n:
        return "-"
    return "%d × %.0f KiB" % (n, nbytes / n / 1024)


def report_fuse(b, reps, f32_mib, big_mib, notes):
    ras = [ra for ra, _ in READAHEADS]
    ra_name = dict(READAHEADS)

    def nb(ra, size, pat, phase="cold"):
        return best(b.n.get((ra, size, pat, phase), []))

    def nbest(size, pat, phase="cold"):
        return best([v for r in ras for v in b.n.get((r, size, pat, phase), [])])

    def gb(ra, pc, t, view, pat, phase="cold"):
        return best(b.g.get((ra, pc, t, view, pat, phase), []))

    def gbest(pc, t, view, pat, phase="cold"):
        return best([v for r in ras for v in b.g.get((r, pc, t, view, pat, phase), [])])

    rows = list(b.types) + ([BIG_NAME] if b.big else [])
    print()
    print("### Reads through the mount against a null FUSE server")
    print()
    print("Null server: tests/bench/nullfs, the same libfuse and session setup as gguffs "
          "(multi-threaded loop, max_write 1 MiB so max_pages 256, splice, keep_cache), every "
          "read answered from a static buffer.  GB/s = 10^9 bytes/s of the file read (f32: "
          "float32 output; raw: stored bytes), best of %d repetitions; every gguffs read is the "
          "first on a fresh mount (block cache empty) unless marked warm; the null server reads "
          "a file of the same size, first read on its mount.  Tensors: %d MiB of float32 each%s; "
          "gguffs with its default cache_size (%d MiB) otherwise.  Readahead: for the null server "
          "the mount's bdi read_ahead_kb written after mounting (seen: %s KiB); gguffs is given "
          "-o readahead=SIZE (0 for 128K: the kernel's own) and sets its mount's itself, rounded "
          "to whole read requests (seen below).  Model file "
          "'cached': read once before; 'not cached': evicted (fsync, posix_fadvise DONTNEED) "
          "before each mount."
          % (reps, f32_mib,
             ", and %s: %d MiB of float32, read with -o cache_size=%dM (twice the block cache)"
             % (BIG_NAME, big_mib, b.big_cache >> 20) if b.big else "", DEFAULT_CACHE >> 20,
             ", ".join(str(k) for k in sorted(x for x in b.ra_seen if x is not None))))
    for n in notes:
        print()
        print(n)

    # 1. the ceiling
    print()
    print("**The ceiling**: the null server, %d MiB file, GB/s (FUSE READ requests the null "
          "server answered for the first read: count × average size)" % f32_mib)
    print()
    print("| read | %s | best |" % " | ".join("readahead %s" % ra_name[r] for r in ras))
    print("|---|%s---|" % ("---|" * len(ras)))
    for pat, label, _, warm, _, _ in PATTERNS:
        for phase in ("cold", "warm") if warm else ("cold",):
            cells = []
            for r in ras:
                v = nb(r, b.f32, pat, phase)
                q = b.nreq.get((r, b.f32, pat)) if phase == "cold" else None
                cells.append("%s (%s)" % (fmt_gbs(v), fmt_req(*q)) if q and v else fmt_gbs(v))
            print("| %s%s | %s | %s |" % (label, ", warm re-read" if phase == "warm" else "",
                                        " | ".join(cells), fmt_gbs(nbest(b.f32, pat, phase))))
    if b.many:
        cells = [fmt_gbs(best(b.many.get((r, "null"), []))) for r in ras]
        print("| %d readers at once, read() 4 MiB, aggregate | %s | %s |" % (
            N_READERS, " | ".join(cells),
            fmt_gbs(best([v for r in ras for v in b.many.get((r, "null"), [])]))))
    for key, label, _, _ in DIO:
        v = best(b.n.get(("dio", b.f32, key, "cold"), []))
        print("| direct_io, %s | %s | %s |" % (label, " | ".join("" for _ in ras), fmt_gbs(v)))

    # 2. through gguffs, per read pattern
    misses = []

    def table(pat, pc):
        label = PAT[pat][1]
        views = [v for v in ("raw", "f32") if v in PAT[pat][2]]
        print()
        print("**%s, model file %s**: gguffs GB/s (ratio to the null server, same readahead, "
              "same size); 'best / ceiling': gguffs' best over readahead settings over the null "
              "server's%s" % (label, pc, "; f32/raw: bytes/s of f32 output over bytes/s of raw, "
                             "best of each" if len(views) == 2 else ""))
        print()
        head = []
        for v in views:
            head += ["%s %s" % (v, ra_name[r]) for r in ras] + ["%s best / ceiling" % v]
        if len(views) == 2:
            head.append("f32/raw")
        print("| type | %s |" % " | ".join(head))
        print("|---|%s" % ("---|" * len(head)))
        for t in rows:
            if t == BIG_NAME:
                if (pc, pat) not in b.big_reads:
                    continue
            elif PAT[pat][5] and t not in PAT[pat][5]:
                continue
            cells = []
            for v in views:
                if t == BIG_NAME and v == "raw":
                    cells += ["-"] * (len(ras) + 1)
                    continue
                size = b.gsize(t, v)
                for r in ras:
                    cells.append(fmt_cell(gb(r, pc, t, v, pat), nb(r, size, pat)))
                gbst, ceil = gbest(pc, t, v, pat), nbest(size, pat)
                cells.append(fmt_ratio(gbst, ceil))
                if pat == "seq" and pc == "cached" and gbst and ceil:
                    target = 0.9 if v == "raw" else 0.8
                    if gbst / ceil < target:
                        misses.append("%s %s %.2f (< %.1f)" % (t, v, gbst / ceil, target))
            if len(views) == 2:
                f, rw = gbest(pc, t, "f32", pat), gbest(pc, t, "raw", pat)
                cells.append(fmt_ratio(f, rw))
                if pat == "seq" and pc == "cached" and f and rw and f / rw < 0.8:
                    misses.append("%s f32/raw %.2f (< 0.8)" % (t, f / rw))
            print("| %s | %s |" % (t, " | ".join(cells)))

    for pat, _, _, _, uncached, _ in PATTERNS:
        for pc in ("cached", "not cached") if uncached else ("cached",):
            table(pat, pc)
    print()
    print("The targets (read() 4 MiB, model cached, best over readahead vs the null "
          "server's best: raw >= 0.9, f32 >= 0.8; f32/raw >= 0.8), missed: %s"
          % ("; ".join(misses) or "none"))

    # where the gap is: CPU per GB
    def cpu_at_best(what, cell):
        """(readahead, server ms/GB, reader ms/GB, CPU bound GB/s) at the
        readahead of the best figure (cell(ra) -> GB/s); None if unmeasured."""
        got = [(cell(r), r) for r in ras if cell(r) and b.cpu.get((what, r), [0, 0, 0])[2]]
        if not got:
            return None
        r = max(got)[1]
        c = b.cpu[(what, r)]
        srv, rdr = c[0] / (c[2] / 1e9), c[1] / (c[2] / 1e9)
        return r, srv, rdr, ncpu * 1000.0 / (srv + rdr)

    ncpu = os.cpu_count() or 1
    nc = cpu_at_best(("null", None), lambda r: nb(r, b.f32, "seq"))
    if nc:
        print()
        print("**CPU per GB**, read() 4 MiB, first read, model cached, at the readahead of each "
              "row's best figure, pooled over its repetitions: the server process (the run time of "
              "its threads, /proc/PID/task/*/schedstat) and the reader (getrusage of the reading "
              "process), ms per GB of the file read.  Server and reader share the machine's %d "
              "CPUs, so no pair goes faster than %d s of CPU over (server + reader) ms/GB: the "
              "'CPU bound'.  'bound / null's' is the ratio to the null server a server with this "
              "CPU cost reaches if it uses the CPUs as well as the null server does; 'best / bound' "
              "is how much of its bound each reached." % (ncpu, ncpu))
        print()
        print("| read | readahead | server ms/GB | reader ms/GB | CPU bound GB/s | bound / null's "
              "| best GB/s | best / bound |")
        print("|---|---|---|---|---|---|---|---|")
        nbst = nb(nc[0], b.f32, "seq")
        print("| null server, %d MiB | %s | %.0f | %.0f | %.2f | 1.00 | %s | %s |" % (
            f32_mib, ra_name[nc[0]], nc[1], nc[2], nc[3], fmt_gbs(nbst), fmt_ratio(nbst, nc[3])))
        for t in b.types:
            for v in ("raw", "f32"):
                gc = cpu_at_best(("gguffs", "%s/%s" % (t, v)),
                                 lambda r: gb(r, "cached", t, v, "seq"))
                if not gc:
                    continue
                g = gb(gc[0], "cached", t, v, "seq")
                print("| %s %s | %s | %.0f | %.0f | %.2f | %.2f | %s | %s |" % (
                    t, v, ra_name[gc[0]], gc[1], gc[2], gc[3], gc[3] / nc[3], fmt_gbs(g),
                    fmt_ratio(g, gc[3])))

    # 3. warm re-reads
    print()
    print("**Warm re-reads** (the second read on the same mount, from the kernel's page cache "
          "of the FUSE file, keep_cache), %d MiB: gguffs f32 (the median over types of each "
          "type's best, model cached), "
          "the null server, and the page-cached model file read directly (%.0f MB)"
          % (f32_mib, b.model_size / 1e6))
    print()
    print("| read | readahead | gguffs f32 | null | direct | gguffs / null | null / direct "
          "| gguffs / direct |")
    print("|---|---|---|---|---|---|---|---|")
    for pat in ("seq", "mmap"):
        d = best(b.direct.get(pat, []))
        for r in ras:
            per_type = [best(b.g[k]) for k in b.g
                        if k[:2] == (r, "cached") and k[3:] == ("f32", pat, "warm")
                        and k[2] != BIG_NAME]
            g = statistics.median(per_type) if per_type else None
            n = nb(r, b.f32, pat, "warm")
            print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                PAT[pat][1], ra_name[r], fmt_gbs(g), fmt_gbs(n), fmt_gbs(d),
                fmt_ratio(g, n), fmt_ratio(n, d), fmt_ratio(g, d)))

    # 4. requests
    if b.req:
        print()
        print("**FUSE READ requests** (kernel tracepoints fuse_request_send/end, one untimed "
              "read on a fresh mount, model cached): count × average bytes replied; gguffs' "
              "stats after the read, for f32: block-cache misses / hits")
        whats = []
        for (r, srv, what, pat) in b.req:
            if srv == "gguffs" and what not in whats:
                whats.append(what)
        print()
        print("| readahead | read | null %d MiB | %s |" % (
            f32_mib, " | ".join("gguffs %s" % w for w in whats)))
        print("|---|---|---|%s" % ("---|" * len(whats)))
        chunk = None
        for r in ras:
            for pat in ("seq", "rand"):
                q = b.req.get((r, "null", "f32", pat))
                if not q:
                    continue
                cells = [fmt_req(q[0], q[1]) + ("" if q[2] else " (events lost)")]
                for w in whats:
                    q = b.req.get((r, "gguffs", w, pat))
                    if not q:
                        cells.append("-")
                        continue
                    st = q[3] or {}
                    chunk = st.get("chunk_bytes", chunk)
                    c = fmt_req(q[0], q[1]) + ("" if q[2] else " (events lost)")
                    if "f32" in w and (st.get("misses") or st.get("hits")):
                        c += ", %s/%s" % (st.get("misses"), st.get("hits"))
                    cells.append(c)
                print("| %s | %s | %s |" % (ra_name[r], PAT[pat][1], " | ".join(cells)))
        if chunk:
            print()
            print("(gguffs' block-cache chunk: %s bytes of float32)" % chunk)

    # 5. many readers
    if b.many:
        print()
        print("**%d readers at once**, each a different tensor's f32 (%s), read() 4 MiB from a "
              "fresh mount, model cached, aggregate GB/s; gguffs with its default cache_size "
              "(%d MiB); peak RSS of gguffs: VmRSS sampled every 5 ms, or VmHWM (target: "
              "aggregate >= 0.8 of the null server's, RSS within cache_size + 32 MiB)"
              % (N_READERS, ", ".join(b.types[:N_READERS]), DEFAULT_CACHE >> 20))
        print()
        print("| readahead | gguffs | null | gguffs / null | gguffs / null best "
              "| gguffs peak RSS MiB |")
        print("|---|---|---|---|---|---|")
        nbst = best([v for r in ras for v in b.many.get((r, "null"), [])])
        for r in ras:
            g = best(b.many.get((r, "gguffs"), []))
            n = best(b.many.get((r, "null"), []))
            peak = max((max(a, h) for a, h in b.rss.get(r, [])), default=0)
            print("| %s | %s | %s | %s | %s | %.0f |" % (
                ra_name[r], fmt_gbs(g), fmt_gbs(n), fmt_ratio(g, n), fmt_ratio(g, nbst),
                peak / 1024))


def run(work, args):
    need(NULLFS)
    need(ORACLE, "scripts/setup --tests fetches ggml's library")
    f32_mib = args.f32_mb or (QUICK_MIB if args.quick else 64)
    big_mib = 2 * f32_mib          # mounted with cache_size half its f32 size
    READAHEADS[:] = []
    for r in (args.readahead or ("1M" if args.quick else "128K,1M,4M")).split(","):
        k = {"K": 10, "M": 20}.get(r[-1:].upper())
        if not k or not r[:-1].isdigit() or not 4 <= int(r[:-1]) << k >> 10 <= 1 << 20:
            sys.exit("bench: --readahead %s: not a list of sizes like 128K,1M,4M" % args.readahead)
        READAHEADS.append((int(r[:-1]) << k, r.upper()))
    reps = args.reps or (1 if args.quick else 3)
    if reps < 1:
        sys.exit("bench: --reps %d: at least 1" % reps)
    if args.types:
        types = args.types.split(",")
    elif args.all_types:
        import ggml
        types = [t for t in ggml.quantizable_types()
                 if t not in ("i8", "i16", "i32", "i64", "f64", "q8_1", "q8_K")]
    else:
        types = FUSE_TYPES[:N_READERS] if args.quick else FUSE_TYPES
    big = (BIG_TYPE, big_mib) if not args.no_big else None
    path = os.path.join(work, "fuse.gguf")
    t_start = t0 = time.perf_counter()
    made = make_types_file(path, types, f32_mib, big)
    os.sync()
    print("# part fuse: %d tensors of %d MiB of float32%s written in %.1fs (%.0f MB file)"
          % (len(types), f32_mib, " and %s of %d MiB" % (BIG_NAME, big_mib) if big else "",
             time.perf_counter() - t0, os.path.getsize(path) / 1e6), flush=True)
    big_sizes = (made[-1][1], made[-1][2]) if big else None
    if big:
        made = made[:-1]
    mounted_tracefs = FuseTracer.mount()
    requests = FuseTracer.available()
    notes = []
    if len(types) < N_READERS:
        common.left_out(NAME, "%d readers at once not run: %d types (needs %d)"
                        % (N_READERS, len(types), N_READERS))
    left = resident(path, evict_first=True)
    notes.append("Eviction checked: %s of the model file's %d bytes in the page cache after "
                 "posix_fadvise(DONTNEED)%s." % (
                     "?" if left is None else "%d" % left, os.path.getsize(path),
                     "" if left is None else " (fincore)"))
    if not requests:
        common.left_out(NAME, "FUSE requests not counted (no fuse tracepoints)")
        notes.append("FUSE requests of gguffs not counted: no fuse tracepoints (needs root, "
                     "Linux 6.15+ and tracefs at %s)" % FuseTracer.ROOT)
    load0 = os.getloadavg()[0]
    b = FuseBench(work, path, made, big_sizes, args)
    t0 = time.perf_counter()
    try:
        done = b.run(reps, requests, t_start + args.budget)
    finally:
        os.unlink(path)
        if mounted_tracefs:
            FuseTracer.unmount()
    if b.req_error:
        notes.append("FUSE requests of gguffs not counted: %s" % b.req_error)
    ra_g = sorted(x for x in b.ra_gguffs if x is not None)
    notes.insert(0, "Measured %s in %.0fs on %d CPUs; load average (1 min) %.2f before, "
                 "%.2f after; gguffs' own readahead (-o readahead, read back after mounting): "
                 "%s KiB."
                 % (time.strftime("%Y-%m-%d %H:%M %Z"), time.perf_counter() - t0,
                    os.cpu_count() or 0, load0, os.getloadavg()[0],
                    ", ".join(str(x) for x in ra_g) or "?"))
    notes.append("Time spent (mounts included): %s." % ", ".join(
        "%s %.0fs" % (k, v) for k, v in sorted(b.time.items(), key=lambda kv: -kv[1])))
    if done < reps:
        notes.append("Best of %d repetitions, not %d: another would have ended past --budget "
                     "%ds." % (done, reps, args.budget))
    report_fuse(b, done, f32_mib, big_mib, notes)
    print(flush=True)


#!/usr/bin/python3
# Mounts a file with a tensor of every dequantizable ggml type and bit-compares tensors/NAME/f32 with ggml's to_float: whole, random pread ranges, numpy.memmap, 8 concurrent readers (tiny and large cache), bounded RSS while streaming 10x cache_size, and sequential reads (one fill per chunk, requests of a chunk, blocks reused: counted in stats).
"""
Expectations come from ggml itself (tests/oracle/ggml.py): the file is
written by ggml's writer, quantized blocks are made by ggml's quantizers
(plus some blocks of random bytes, for which ggml's to_float is equally the
reference), and the expected floats are ggml's to_float of the raw bytes.

GGUFFS_TEST_QUICK=1 (the ASan run) shrinks sizes and counts.  The RSS
mount runs with ASAN_OPTIONS quarantine_size_mb=0 (appended), so that under
a sanitizer build freed cache chunks are not kept resident by ASan's
quarantine; the bound is the same.  Between the two passes the page cache of
each f32 file is dropped (POSIX_FADV_DONTNEED) so both passes go through
gguffs.
"""
import gc
import multiprocessing
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

QUICK = harness.QUICK
# Bytes of f32 per cache chunk: gguffs makes it its request size, at most
# 1 MiB (fs/session.c ggfs_request_size); set from the stats file once mounted
# (set_chunk), for the ranges that straddle chunk borders.  The shapes are
# made before, for chunks of at most 1 MiB.
CHUNK = 1 << 20
CHUNK_ELEMS = CHUNK // 4


def set_chunk(mnt):
    global CHUNK
    CHUNK = harness.read_stats(mnt).get("chunk_bytes") or CHUNK
PLAIN = ("f32", "i8", "i16", "i32", "i64", "f64")

# Filled before the concurrent readers fork: name -> (raw bytes, f32 bytes).
EXPECT = {}


# ------------------------------------------------------------------ making data

def block_pool(ggml, tname, rng, n_blocks):
    """n_blocks blocks of tname: drawn (with replacement, so nothing is
    periodic) from a pool quantized by ggml from random floats, about one in
    sixteen replaced by random bytes (any byte pattern is valid input)."""
    t = ggml.type_id(tname)
    _, bs, ts = ggml.ggml_types()[t]
    if tname in PLAIN:
        n = n_blocks
        if tname == "f32":
            return rng.standard_normal(n).astype("<f4").tobytes()
        if tname == "f64":
            return (rng.standard_normal(n) * 1000).astype("<f8").tobytes()
        dt = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64}[tname]
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, n, dtype=dt, endpoint=True) \
            .astype(np.dtype(dt).newbyteorder("<")).tobytes()
    slow = tname in ("iq2_xxs", "iq2_xs", "iq2_s", "iq1_s")
    pool_blocks = min(n_blocks, (16 if slow else 512) if bs > 1 else 4096)
    pool_blocks = max(pool_blocks, 1)
    # rows of at most 16 blocks (the iq quantizers want whole rows)
    per_row = min(pool_blocks, 16) if bs > 1 else pool_blocks
    pool_blocks = (pool_blocks + per_row - 1) // per_row * per_row
    x = rng.standard_normal(pool_blocks * bs).astype(np.float32)
    x *= np.exp(rng.uniform(-4, 4, pool_blocks)).astype(np.float32).repeat(bs)
    pool = np.frombuffer(ggml.quantize(tname, x, per_row * bs), np.uint8).reshape(pool_blocks, ts)
    pick = rng.integers(0, pool_blocks, n_blocks)
    out = pool[pick].copy()
    if tname != "f16" and tname != "bf16":
        rnd = rng.random(n_blocks) < 1 / 16
        out[rnd] = rng.integers(0, 256, (int(rnd.sum()), ts), dtype=np.uint8)
    return out.tobytes()


def shapes_for(i, bs, big):
    """A tensor shape (ggml order) for the i-th type: 1-D to 4-D, odd row
    lengths of many blocks; big ones hold more than one cache chunk and not a
    multiple of it."""
    k = [37, 11, 3, 1][i % 4]
    if bs == 1:
        k = [1001, 313, 77, 9][i % 4]
    small = [[bs * k], [bs * k, 5], [bs * k, 7, 3], [bs * k, 3, 5, 2]][i % 4]
    if not big:
        return [small]
    kb = max(1, (3000 // bs)) | 1
    ne0 = bs * kb
    target = 2 * CHUNK_ELEMS + 7777 + 9973 * i
    if QUICK:
        target = CHUNK_ELEMS + 5003 + 997 * i
    rows = max(1, target // ne0) | 1
    dims = [[rows], [-(-rows // 3) | 1, 3], [-(-rows // 15), 3, 5]][i % 3]
    ne = [ne0] + dims
    n = int(np.prod(ne))
    assert n > CHUNK_ELEMS and n % CHUNK_ELEMS, (ne, n)
    return [small, ne]


def make_model(ggml, path):
    rng = np.random.default_rng(20240601)
    types = [n for n in ggml.quantizable_types() if ggml.has_to_float(n)]
    for must in ("f32", "f16", "bf16", "i8", "i16", "i32", "i64", "f64"):
        if must not in types:
            types.append(must)
    tensors = []
    for i, tname in enumerate(types):
        t = ggml.type_id(tname)
        _, bs, ts = ggml.ggml_types()[t]
        big = (not QUICK) or i % 3 == 0
        for j, ne in enumerate(shapes_for(i, bs, big)):
            nblk = int(np.prod(ne)) // bs
            raw = block_pool(ggml, tname, rng, nblk)
            tensors.append(("t%02d.%s.%s" % (i, tname, "big" if j else "small"), tname, ne, raw))
    # q8_1 has no to_float: no f32 file (checked, not read)
    if "q8_1" in ggml.quantizable_types():
        tensors.append(("nof32.q8_1", "q8_1", [64, 3], None))
    made = ggml.write_model(path, [("general.architecture", "string", "llama")], tensors, seed=5)
    m = ggml.read_gguf(path)
    assert m is not None, ggml.last_log()
    out = []
    with open(path, "rb") as f:
        for (name, t, ne, raw, _), ti in zip(made, m.tensors):
            assert ti.name == name
            f.seek(m.data_offset + ti.offset)
            assert f.read(ti.nbytes) == raw
            want = ggml.dequant(t, raw) if ggml.has_to_float(t) else None
            out.append((name.decode(), ggml.ggml_types()[t][0], ne, raw, want))
    return out


# ------------------------------------------------------------------ checks

def read_ranges(rng, size, n):
    """n (offset, length) pairs over a file of size bytes: random unaligned
    ones, some straddling chunk boundaries, some at and past the end."""
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.35 and size > CHUNK:
            b = CHUNK * int(rng.integers(1, (size - 1) // CHUNK + 1))
            a = b - int(rng.integers(1, 300))
            ln = int(rng.integers(2, 5000))
        elif r < 0.5:
            a = size - int(rng.integers(0, min(size, 4000) + 1))
            ln = int(rng.integers(1, 9000))
        elif r < 0.55:
            a = size + int(rng.integers(0, 100))
            ln = int(rng.integers(1, 100))
        elif r < 0.65:
            a = int(rng.integers(0, size))
            ln = int(rng.integers(CHUNK // 2, 3 * CHUNK))
        else:
            a = int(rng.integers(0, size))
            ln = int(rng.integers(1, 4097))
        out.append((a, ln))
    return out


def first_bad(got, want):
    n = min(len(got), len(want))
    g = np.frombuffer(got[:n], np.uint8)
    w = np.frombuffer(want[:n], np.uint8)
    d = np.nonzero(g != w)[0]
    return int(d[0]) if d.size else n


def describe(name, tname, off, got, want):
    i = first_bad(got, want)
    if i == min(len(got), len(want)):
        return "%s (%s): read at byte %d: %d bytes, expected %d" % (name, tname, off, len(got), len(want))
    e = (off + i) // 4
    base = e * 4 - off
    gv = wv = "?"
    if base >= 0 and base + 4 <= min(len(got), len(want)):
        gv = "0x%08x" % int.from_bytes(got[base:base + 4], "little")
        wv = "0x%08x" % int.from_bytes(want[base:base + 4], "little")
    return ("%s (%s): read at byte %d (%d bytes): first difference at byte %d "
            "(element %d): got %s, ggml says %s" % (name, tname, off, len(want), off + i, e, gv, wv))


def check_tensors(h, mnt, tensors):
    set_chunk(mnt)
    tdir = os.path.join(mnt, "tensors")
    rng = np.random.default_rng(11)
    n_ranges = 0
    bad_types = {}
    for name, tname, ne, raw, want in tensors:
        d = os.path.join(tdir, name)
        fp = os.path.join(d, "f32")
        if want is None:
            h.check(not os.path.exists(fp), "%s (%s): has an f32 file, ggml has no to_float" % (name, tname))
            continue
        lab = "%s (%s, shape %s)" % (name, tname, list(reversed(ne)))
        with h.case(lab):
            wb = want.view("<u4").tobytes()
            st = os.stat(fp)
            h.check(st.st_size == len(wb), "%s: f32 st_size %d, expected %d" % (lab, st.st_size, len(wb)))
            with open(os.path.join(d, "shape")) as f:
                shp = [int(x) for x in f.read().split()]
            # (a) whole file through numpy.fromfile
            got = np.fromfile(fp, dtype="<u4")
            ok = got.size == want.size and np.array_equal(got, want.view("<u4"))
            if not ok:
                bad_types[tname] = bad_types.get(tname, 0) + 1
            h.check(ok, "%s: numpy.fromfile: %s" % (lab, describe(name, tname, 0, got.tobytes(), wb)))
            h.check(shp == list(reversed(ne)) and got.size == int(np.prod(shp)),
                    "%s: shape file says %r, %d floats read" % (lab, shp, got.size))
            # (b) random small ranges via pread
            fd = os.open(fp, os.O_RDONLY)
            try:
                for a, ln in read_ranges(rng, len(wb), 8 if QUICK else 12):
                    g = os.pread(fd, ln, a)
                    w = wb[a:a + ln]
                    n_ranges += 1
                    if not h.check(g == w, "%s: pread: %s" % (lab, describe(name, tname, a, g, w))):
                        bad_types[tname] = bad_types.get(tname, 0) + 1
            finally:
                os.close(fd)
            # (c) numpy.memmap: bytes at odd offsets, and floats
            mm = np.memmap(fp, dtype=np.uint8, mode="r")
            try:
                for _ in range(6):
                    a = int(rng.integers(0, len(wb)))
                    b = min(len(wb), a + int(rng.integers(1, 3 * CHUNK)))
                    g = mm[a:b].tobytes()
                    if not h.check(g == wb[a:b], "%s: memmap[%d:%d]: %s" % (
                            lab, a, b, describe(name, tname, a, g, wb[a:b]))):
                        bad_types[tname] = bad_types.get(tname, 0) + 1
            finally:
                del mm
            off = 4 * int(rng.integers(0, want.size))
            mf = np.memmap(fp, dtype="<u4", mode="r", offset=off)
            try:
                h.check(np.array_equal(mf, want.view("<u4")[off // 4:]),
                        "%s: memmap(offset=%d) as float32 differs" % (lab, off))
                idx = rng.integers(0, mf.size, 200)
                h.check(np.array_equal(mf[idx], want.view("<u4")[off // 4:][idx]),
                        "%s: memmap fancy-indexed elements differ" % lab)
            finally:
                del mf
            gc.collect()
    h.check(n_ranges >= 200, "only %d random ranges read" % n_ranges)
    print("  %d tensors, %d random pread ranges%s" % (
        sum(1 for t in tensors if t[4] is not None), n_ranges,
        "; types with differences: %s" % bad_types if bad_types else ""), flush=True)
    return bad_types


# ------------------------------------------------------------------ concurrency

def _reader(args):
    mnt, seed, reads = args
    rng = np.random.default_rng(seed)
    names = sorted(EXPECT)
    errors = []
    done = 0
    fds = {}
    try:
        for _ in range(reads):
            name = names[int(rng.integers(0, len(names)))]
            raw, f32 = EXPECT[name]
            view = "f32" if (f32 is not None and rng.random() < 0.75) else "raw"
            want_all = f32 if view == "f32" else raw
            p = os.path.join(mnt, "tensors", name, view)
            size = len(want_all)
            (a, ln), = read_ranges(rng, size, 1)
            if rng.random() < 0.2:     # a big read, several chunks
                a = int(rng.integers(0, size))
                ln = int(rng.integers(CHUNK, 4 * CHUNK))
            g = harness.pread_via(fds, p, ln, a, fresh=rng.random() < 0.3)
            done += 1
            w = want_all[a:a + ln]
            if g != w and len(errors) < 5:
                errors.append("%s/%s: %s" % (name, view, describe(name, view, a, g, w)))
    except Exception as e:  # noqa: BLE001
        errors.append("%s: %s" % (type(e).__name__, e))
    finally:
        for fd in fds.values():
            os.close(fd)
    return done, errors


def check_concurrent(h, model, tensors, cache, tiny):
    EXPECT.clear()
    for name, tname, ne, raw, want in tensors:
        EXPECT[name] = (raw, None if want is None else want.view("<u4").tobytes())
    label = "8 concurrent readers, -o cache_size=%s" % cache
    with h.case(label):
        with mount(model, ["-o", "cache_size=%s" % cache]) as mnt:
            reads = 150 if QUICK else 400
            ctx = multiprocessing.get_context("fork")
            t0 = time.time()
            with ctx.Pool(8) as pool:
                res = pool.map(_reader, [(mnt, 1000 + i, reads) for i in range(8)])
            dt = time.time() - t0
            total = sum(r[0] for r in res)
            errs = [e for r in res for e in r[1]]
            h.check(total == 8 * reads and not errs, "%s: %d of %d reads done; %d readers saw errors: %s"
                    % (label, total, 8 * reads, sum(1 for r in res if r[1]), errs[:4]))
            st = harness.read_stats(mnt)
            print("  %s: %d reads in %.1fs; stats %s" % (label, total, dt, st), flush=True)
            if tiny:
                h.check(st.get("evictions", 0) > 0, "%s: no evictions in stats: %s" % (label, st))
            h.check(st.get("fill_errors", 0) == 0, "%s: fill_errors in stats: %s" % (label, st))
            if "capacity" in st and "bytes_held" in st:
                # unpinned chunks never exceed the capacity; nothing is pinned now
                h.check(st["bytes_held"] <= st["capacity"] + 64 * 1024,
                        "%s: bytes_held %d > capacity %d" % (label, st["bytes_held"], st["capacity"]))


# ------------------------------------------------------------------ RSS

def make_rss_model(ggml, path, total_f32):
    """q8_0 and q4_K tensors of random blocks with finite scales, made with
    numpy (quick) rather than by quantizing: f32 views total total_f32 bytes."""
    rng = np.random.default_rng(77)
    specs = [("big.q8_0.a", "q8_0"), ("big.q4_K.a", "q4_K"), ("big.q8_0.b", "q8_0"),
             ("big.q4_K.b", "q4_K")]
    per = total_f32 // 4 // len(specs)
    tensors = []
    for name, tname in specs:
        t = ggml.type_id(tname)
        _, bs, ts = ggml.ggml_types()[t]
        ne0 = 4096
        rows = per // ne0 + 1
        nblk = ne0 * rows // bs
        blk = rng.integers(0, 256, (nblk, ts), dtype=np.uint8)
        nsc = 1 if tname == "q8_0" else 2     # q4_K: d and dmin
        sc = (rng.uniform(1e-3, 1.0, (nblk, nsc)) * rng.choice([-1, 1], (nblk, nsc))).astype("<f2")
        blk[:, :2 * nsc] = sc.view(np.uint8).reshape(nblk, 2 * nsc)
        tensors.append((name, tname, [ne0, rows], blk.tobytes()))
    ggml.write_model(path, [("general.architecture", "string", "llama")], tensors)
    return [(name, tname, raw, ggml.dequant(tname, raw).view("<u4").tobytes())
            for name, tname, _, raw in tensors]


def check_rss(h, ggml, tmp):
    cache_mb = 16
    total = (170 if QUICK else 200) << 20
    path = os.path.join(tmp, "rss.gguf")
    t0 = time.time()
    tens = make_rss_model(ggml, path, total)
    f32_total = sum(len(f) for *_, f in tens)
    print("  RSS file: %d tensors, %.0f MB of f32 (%.1fs to make)" % (
        len(tens), f32_total / 1e6, time.time() - t0), flush=True)
    h.check(f32_total >= 10 * (cache_mb << 20), "RSS file too small: %d bytes of f32" % f32_total)
    _check_rss_mounted(h, path, tens, f32_total, cache_mb)
    check_stream(h, path, tens)
    os.unlink(path)


def bdi_readahead_kib(mnt):
    """read_ahead_kb of the mount's bdi (its device in mountinfo), or None."""
    mnt = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == mnt:
                try:
                    with open("/sys/class/bdi/%s/read_ahead_kb" % fields[2]) as g:
                        return int(g.read())
                except OSError:
                    return None
    return None


def check_stream(h, path, tens):
    """Sequential reads of f32 with the default cache (256 MiB, more than
    the file): every chunk is filled once (a prefetch behind the reader
    would fill one again), the reads reach gguffs in requests of a chunk
    (the mount's readahead, as root, rounded to whole requests), and the
    chunks read whole are reused rather than kept: the cache holds a few
    blocks, not the file.  Two workers (-o threads=2: the default has none
    on two CPUs) prefetch on the sequential reads; then reads far apart on
    one descriptor (POSIX_FADV_RANDOM: no readahead) prefetch nothing.
    Counted in the stats file, never timed."""
    label = "sequential f32 reads: one fill per chunk, large requests, blocks reused"
    with h.case(label):
        with harness.mounted(path, ["-o", "readahead=2M,threads=2"]) as g:
            mnt = g.mnt
            set_chunk(mnt)
            h.check(128 << 10 <= CHUNK <= 1 << 20 and CHUNK % 4096 == 0,
                    "stats chunk_bytes %r: not whole pages from 128 KiB to 1 MiB" % CHUNK)
            # the readahead is rounded to whole requests (one chunk each)
            want_ra = max(1, ((2 << 20) + CHUNK // 2) // CHUNK) * CHUNK >> 10
            ra = bdi_readahead_kib(mnt)
            if os.geteuid() == 0:
                h.check(ra == want_ra, "-o readahead=2M: the mount's read_ahead_kb is %r, want %d"
                        % (ra, want_ra))
            elif harness.IN_CI:
                h.fail("-o readahead=2M: not root, so the mount's read_ahead_kb cannot be checked "
                       "(CI runs as root)")
            else:
                h.note("not root: the mount's read_ahead_kb not checked")
            buf = bytearray(4 << 20)
            mv = memoryview(buf)
            chunks = total = 0
            bad = []
            for name, tname, raw, want in tens:
                with open(os.path.join(mnt, "tensors", name, "f32"), "rb", buffering=0) as f:
                    pos = 0
                    while True:
                        n = f.readinto(mv)
                        if not n:
                            break
                        if mv[:n] != want[pos:pos + n] and len(bad) < 3:
                            bad.append(describe(name, tname, pos, bytes(mv[:n]), want[pos:pos + n]))
                        pos += n
                chunks += -(-len(want) // CHUNK)
                total += len(want)
            st = harness.read_stats(mnt)
            print("  %s: %d chunks; bdi read_ahead_kb %s; stats %s" % (label, chunks, ra, st), flush=True)
            h.check(not bad, "%s: wrong data: %s" % (label, bad))
            # The kernel asks for each page once, unless memory pressure
            # drops pages read ahead before the reader gets them (a loaded
            # machine): it then asks for them again, and such a page's chunk,
            # used up and reused meanwhile, is filled again.  Those requests
            # are counted (read_bytes_f32 past what was read), and each page
            # asked for again may cost one fill more, no other.
            again = st.get("read_bytes_f32", 0) - total
            h.check(0 <= again <= total // 100,
                    "%s: read_bytes_f32 %r, %d bytes read" % (label, st.get("read_bytes_f32"), total))
            if again:
                print("  %s: the kernel asked for %d bytes again (pages dropped under memory "
                      "pressure)" % (label, again), flush=True)
            h.check(chunks <= st.get("misses", 0) <= chunks + max(0, again) // 4096
                    and st.get("fill_errors") == 0,
                    "%s: %d chunks read, %r fills (misses), %r fill errors; %d bytes asked again"
                    % (label, chunks, st.get("misses"), st.get("fill_errors"), again))
            h.check(st.get("prefetched", 0) > 0, "%s: the workers prefetched nothing" % label)
            if os.geteuid() == 0 and ra == want_ra:
                h.check(st.get("read_max_f32", 0) == CHUNK,
                        "%s: the largest f32 request is %r bytes, want %d (the request size)"
                        % (label, st.get("read_max_f32"), CHUNK))
            # what a stream needs at once: the chunks of the requests in
            # flight (a readahead window, across borders), the prefetch depth
            # (2 per worker): far less than the file
            bound = (2 * 2 + 16) * (CHUNK + 8192)
            h.check(st.get("bytes_held", 0) <= bound,
                    "%s: the cache holds %r bytes after streaming %d chunks (reuse keeps less than %d)"
                    % (label, st.get("bytes_held"), chunks, bound))

            # random: of a tensor of n chunks, n-1, n-20, n-2, 2: each more
            # than 16 chunks behind the furthest one read or more than one
            # ahead (core/f32.c SEQ_BEHIND)
            name, tname, raw, want = tens[0]
            n = len(want) // CHUNK
            picks = [n - 1, n - 20, n - 2, 2]
            h.check(n >= 40, "%s: %s has too few chunks for the random reads" % (label, name))
            before = harness.read_stats(mnt)
            fd = os.open(os.path.join(mnt, "tensors", name, "f32"), os.O_RDONLY)
            try:
                # the sequential pass left the file in the page cache
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for c in picks:
                    got = os.pread(fd, 4096, c * CHUNK + 8192)
                    if got != want[c * CHUNK + 8192:c * CHUNK + 8192 + 4096] and len(bad) < 3:
                        bad.append(describe(name, tname, c * CHUNK + 8192, got,
                                            want[c * CHUNK + 8192:c * CHUNK + 8192 + 4096]))
            finally:
                os.close(fd)
            after = harness.read_stats(mnt)
            h.check(not bad, "%s: wrong data (random reads): %s" % (label, bad))
            h.check(after.get("reads_f32", 0) - before.get("reads_f32", 0) == len(picks),
                    "%s: %d random reads made %d requests" % (
                        label, len(picks), after.get("reads_f32", 0) - before.get("reads_f32", 0)))
            h.check(after.get("prefetched") == before.get("prefetched"),
                    "%s: random reads of chunks %s prefetched %d chunks" % (
                        label, picks, after.get("prefetched", 0) - before.get("prefetched", 0)))


def _check_rss_mounted(h, path, tens, f32_total, cache_mb):
    label = "RSS while reading %.0f MB of f32 twice, -o cache_size=%dM" % (f32_total / 1e6, cache_mb)
    with h.case(label):
        # A sanitizer build keeps freed memory in quarantine (256 MB by
        # default), which is no leak but would hide what the cache holds:
        # off (harness.no_quarantine_env).
        with harness.mounted(path, ["-o", "cache_size=%dM" % cache_mb],
                             env=harness.no_quarantine_env()) as g, harness.RssPeak(g.pid) as rss:
            mnt = g.mnt
            buf = bytearray(1 << 20)
            mv = memoryview(buf)
            bad = []
            t0 = time.time()
            for rep in range(2):
                for name, tname, raw, want in tens:
                    fd = os.open(os.path.join(mnt, "tensors", name, "f32"), os.O_RDONLY)
                    try:
                        pos = 0
                        while True:
                            n = os.preadv(fd, [mv], pos)
                            if n <= 0:
                                break
                            if mv[:n] != want[pos:pos + n] and len(bad) < 3:
                                bad.append(describe(name, tname, pos, bytes(mv[:n]), want[pos:pos + n]))
                            pos += n
                        # the second pass must reach gguffs again, not the
                        # kernel's page cache (keep_cache)
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)
                    if pos != len(want) and len(bad) < 3:
                        bad.append("%s: read %d bytes of f32, expected %d" % (name, pos, len(want)))
            dt = time.time() - t0
            rss.sample()
            st = harness.read_stats(mnt)
            grow = rss.grown_mib
            limit = cache_mb + 48
            san = harness.sanitized()
            print("  %s: RSS after mount %.1f MiB, peak %.1f MiB, growth %.1f MiB (limit %d MiB)"
                  "%s; %.0f MB read in %.1fs; stats %s" % (
                      label, rss.base / 1024.0, rss.peak / 1024.0, grow, limit,
                      " [sanitizer build]" if san else "", 2 * f32_total / 1e6, dt, st), flush=True)
            h.check(not bad, "%s: wrong data: %s" % (label, bad))
            if harness.tsan():
                h.note("RSS bound not checked under ThreadSanitizer (its shadow memory)")
            else:
                h.check(grow <= limit, "%s: RSS grew %.1f MiB, more than cache_size + 48 MiB%s"
                        % (label, grow, " (sanitizer build, quarantine off)" if san else ""))


def main():
    h = harness.start("f32")
    ggml = harness.require_oracle()
    with tempfile.TemporaryDirectory(prefix="gguffs-f32-") as tmp:
        model = os.path.join(tmp, "every-type.gguf")
        t0 = time.time()
        tensors = make_model(ggml, model)
        print("every-type file: %d tensors, %.1f MB, %.0f MB of f32 (%.1fs to make)" % (
            len(tensors), os.path.getsize(model) / 1e6,
            sum(w.nbytes for *_, w in tensors if w is not None) / 1e6, time.time() - t0), flush=True)
        with h.case("every type: mount"):
            with mount(model) as mnt:
                check_tensors(h, mnt, tensors)
        check_concurrent(h, model, tensors, "1M", tiny=True)
        check_concurrent(h, model, tensors, "512M", tiny=False)
        EXPECT.clear()
        del tensors
        gc.collect()
        check_rss(h, ggml, tmp)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

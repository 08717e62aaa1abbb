#!/usr/bin/python3
# The soak (scripts/soak): a mixed load on gguffs for as long as asked — 16+ readers of every view checking every byte, meta/ edits, remounts, signals, a remote model through the fault proxy — beside CPU burners; a read stuck past a limit is a hang, reported with gdb's stacks and the mount's stats.
"""
Usage: scripts/soak MINUTES [--build DIR] [--burners N] [--seed S]
                            [--stuck SECONDS] [--tmp DIR] [--hang-check]

Three models are made once with ggml's writer (tests/oracle/ggml.py) and
their expected bytes computed before anything is mounted:

  P  16 q4_K tensors of 8 Mi elements (32 MiB of f32 each, 512 MiB in
     all: 8x a 64M cache), 256 blocks quantized by ggml and repeated: the
     shape of a hang seen under load (16 readers, threads=14,
     cache_size=64M)
  M  12 tensors of mixed types (f32, f16, bf16, i32, f64, q4_0 ... q6_K,
     iq4_nl, iq4_xs), 1-5 MB of f32 each, rows of odd lengths
  S  400 small tensors of those types (many files, hashes and a
     model.safetensors header of many entries)

Each has the keys general.name (string "soak-N"), soak.counter (i32 N) and
soak.blob (array[i32] whose length and elements are a function of N): an
edit writes a new N (a sequence number that only grows), so every value
read is checked to be one that was written: N at most the last one
announced, and, for a fresh open, at least the last one whose close()
returned 0 (a new open sees the new version).

Rounds, until MINUTES have passed; each picks, from the seed, a model, a
remote mount (nginx and the fault proxy of tests/integration/remote.py:
resets, short bodies, 503s, stalls shorter and longer than -o timeout=5,
at random on a few percent of the requests; sometimes -o overlay= for
edits, -o cache_dir=) or a local one, and 1-3 segments.  A segment is one
mount with options drawn at random (cache_size 1M-512M, threads 0-14 or
the default, readahead, max_threads, -s, clone_fd, ro; remote:
remote_block, remote_cache, connections) and 16-24 reader processes, some
with two threads, reading for 10-40 s:

  f32, raw, f32.npy   random ranges (unaligned, across chunks, at and past
                      the end), through kept or fresh descriptors, half of
                      them after dropping the kernel's pages; compared
                      with ggml's dequantization and the raw bytes
  f32 stream          a whole tensor's f32 in 128K-4M reads (on P every
                      reader its own tensor: the hang's shape)
  stats               numpy over the expected floats (test_hashes'
                      check_stats)
  xxh64, sha256       hashlib and xxhash over the raw bytes
  hashes              llama-gguf-hash's output (test_hashes.want_hashes)
  model.safetensors   the header parsed (JSON, dtypes, shapes, contiguous
                      spans, __metadata__), then ranges across spans
                      compared with raw/f32
  meta/               the three edited keys (see above)

while, on a writable mount, one thread edits the three keys (in place, and
growing blobs that rewrite the file).  A segment ends by an unmount once
its readers stopped (gguffs must exit 0, mount gone, no sanitizer report),
or, one time in four, by SIGTERM or SIGINT to gguffs while the readers
read (then it must exit cleanly by itself within --stuck seconds).  After
a clean end the model file is read by ggml: every tensor's bytes as made.

A watchdog checks every half second: a read (or an open, a close, an
edit) not finished within --stuck seconds (default 60) while gguffs did no
work over those seconds (less than 0.2 s of CPU, no request to the fault
proxy), or not finished within 5 x --stuck seconds in any case, is a
hang: the stuck readers' kernel stacks, the FUSE connection's waiting
count, the mount's stats file and every gguffs thread's backtrace (gdb -p
PID -batch -ex 'thread apply all bt') are printed, then gguffs is killed
and the soak goes on.  So is a gguffs that does not exit within --stuck
seconds of a signal or an unmount.  A read past --stuck while gguffs works
is slow: printed and counted (a whole-file view of a remote model may
need hundreds of requests the proxy delays; a niced gguffs on a machine
loaded far beyond its CPUs may wait long for one).

At the end one line: rounds, segments, reads, bytes checked, hangs, wrong
bytes, unexpected errors, gguffs exits not clean; exit status 1 if any of
those (or a failed mount, or a model file changed) is not zero.
Read errors are expected only after a signal or a kill (the connection is
gone), and EIO on a remote mount with faults (retries can run out).

The soak runs under nice 10 (CPU burners too: it runs beside other work).
--build DIR picks the gguffs build (build, build-asan, build-tsan); the
sanitizer options are those scripts/test uses.
"""
import argparse
import collections
import ctypes
import errno
import io
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import harness  # noqa: E402
import remote  # noqa: E402

DESC = 200                 # bytes of a slot's description of its operation
NAME_BASE = "soak-"
KEYS = ("soak.counter", "general.name", "soak.blob")
# counters per slot
C_READS, C_BYTES, C_WRONG, C_WRONG_BYTES, C_ERR, C_ENDERR, C_REIO, C_MSGS, C_EDITS = range(9)
NC = 9
MAX_MSGS = 12              # messages a slot sends; the rest only counted
PLAIN_ST = {"f32": "F32", "f16": "F16", "bf16": "BF16", "f64": "F64", "i8": "I8",
            "i16": "I16", "i32": "I32", "i64": "I64"}
ST_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I8": 1, "I16": 2, "I32": 4, "I64": 8}
MIXED_TYPES = ("f32", "f16", "bf16", "i32", "f64", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0",
               "q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs")


def log(msg):
    print(msg, flush=True)


# ---- expected bytes ---------------------------------------------------------

class Flat:
    """Bytes held whole."""

    def __init__(self, data):
        self.data = data
        self.size = len(data)

    def at(self, a, n):
        return self.data[a:a + n] if a < self.size else b""

    def whole(self):
        return self.data


class Periodic:
    """size bytes of pattern repeated: slices without holding them whole."""

    def __init__(self, pattern, size, maxlen=5 << 20):
        self.p = len(pattern)
        self.size = size
        self.pattern = pattern
        self.ext = pattern * (maxlen // self.p + 2)

    def at(self, a, n):
        n = min(n, self.size - a)
        if n <= 0:
            return b""
        o = a % self.p
        if o + n <= len(self.ext):
            return self.ext[o:o + n]
        out = []
        while n > 0:
            k = min(n, len(self.ext) - o)
            out.append(self.ext[o:o + k])
            n -= k
            o = 0
        return b"".join(out)

    def whole(self):
        return self.at(0, self.size) if self.size <= len(self.ext) else \
            self.pattern * (self.size // self.p) + self.pattern[:self.size % self.p]


class Npy:
    """numpy's header, then the f32 bytes."""

    def __init__(self, hdr, f32):
        self.hdr = hdr
        self.f32 = f32
        self.size = len(hdr) + f32.size

    def at(self, a, n):
        hl = len(self.hdr)
        out = b""
        if a < hl:
            out = self.hdr[a:a + n]
            n -= len(out)
            a = hl
        return out + self.f32.at(a - hl, n) if n > 0 else out


def npy_header(shape):
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": "<f4", "fortran_order": False,
                                             "shape": tuple(shape)})
    return b.getvalue()


class TExp:
    """What one tensor's files must hold."""

    def __init__(self, name, tname, ne, raw, f32, stats, digests):
        self.name = name
        self.tname = tname
        self.views = {"raw": raw, "f32": f32}
        self.set_shape(list(reversed(ne)))
        self.stats = stats           # test_hashes.want_stats
        self.xxh64, self.sha256 = digests
        self.st_dtype = PLAIN_ST.get(tname, "F32")

    def set_shape(self, shape):
        """The shape as the file stores it (ggml's writer drops trailing
        dimensions of 1)."""
        self.shape = shape
        self.views["f32.npy"] = Npy(npy_header(shape), self.views["f32"])


class ModelExp:
    def __init__(self, key, path, tensors, hashes, st_meta):
        self.key = key
        self.path = path
        self.tensors = tensors            # [TExp]
        self.by_name = {t.name: t for t in tensors}
        self.hashes = hashes              # the hashes file
        self.st_meta = st_meta            # model.safetensors' __metadata__ but general.name
        self.sha = None                   # {name: sha256 of the bytes} (ggml's placement)
        self.seq = 0                      # the last sequence number written


def blob_values(n):
    """soak.blob for sequence number n: its length and elements follow
    from n (8 to ~3000 elements: the longer ones outgrow the header's
    room and rewrite the file)."""
    ln = 8 + (n * 7919) % 3001 if n % 3 else 8 + n % 50
    return [n] + [(n * 31 + i) % 1000003 for i in range(1, ln)]


def key_text(key, n):
    if key == "soak.counter":
        return "%d\n" % n
    if key == "general.name":
        return "%s%d\n" % (NAME_BASE, n)
    return "".join("%d\n" % v for v in blob_values(n))


def parse_key(key, text):
    """The sequence number a meta/ value stands for, or raises ValueError
    when it is not a value the soak writes."""
    if key == "soak.counter":
        return int(text.decode())
    if key == "general.name":
        t = text.decode()
        if not (t.startswith(NAME_BASE) and t.endswith("\n")):
            raise ValueError("not soak-N: %r" % t[:80])
        return int(t[len(NAME_BASE):-1])
    vals = [int(x) for x in text.decode().split("\n")[:-1]]
    if not text.endswith(b"\n") or not vals or blob_values(vals[0]) != vals:
        raise ValueError("soak.blob is no value the soak wrote (%d elements, first %r)"
                         % (len(vals), vals[:3]))
    return vals[0]


def kvs0():
    return [("general.architecture", "string", "llama"), ("general.name", "string", NAME_BASE + "0"),
            ("soak.counter", "i32", 0), ("soak.blob", "array[i32]", blob_values(0))]


def tensor_exp(th, name, tname, ne, raw, f32):
    import hashlib
    rawb = raw.whole()
    f32a = np.frombuffer(f32.whole(), "<f4")
    xx = th.xxhash.xxh64(rawb, seed=0).hexdigest()
    return TExp(name, tname, ne, raw, f32, th.want_stats(f32a.tobytes()),
                (xx, hashlib.sha256(rawb).hexdigest()))


def make_p(ggml, th, path):
    rng = np.random.default_rng(2211)
    base = rng.standard_normal(256 * 256).astype(np.float32)
    blocks = ggml.quantize("q4_K", base, 256)
    n = 32 << 18                                      # 32 MiB of f32
    reps = n // (256 * 256)
    raw_all = blocks * reps
    f32_one = ggml.dequant("q4_K", blocks).view("<u4").tobytes()
    tensors = [("p%02d" % i, "q4_K", [4096, n // 4096], raw_all) for i in range(16)]
    ggml.write_model(path, kvs0(), tensors)
    raw = Periodic(blocks, len(raw_all))
    f32 = Periodic(f32_one, n * 4)
    one = tensor_exp(th, "p00", "q4_K", [4096, n // 4096], raw, f32)
    out = []
    for name, tname, ne, _ in tensors:
        t = TExp(name, tname, ne, raw, f32, one.stats, (one.xxh64, one.sha256))
        out.append(t)
    return out


def pool_raw(ggml, rng, tname, ne0, rows):
    """Raw bytes of a tensor: for quantized types blocks of a pool that ggml
    quantized, drawn with replacement (quantizing every block would take
    minutes on a loaded machine)."""
    t = ggml.type_id(tname)
    _, bs, ts = ggml.ggml_types()[t]
    n = ne0 * rows
    if tname in ("f32", "f16", "bf16", "i32", "f64"):
        if tname == "i32":
            return rng.integers(-(1 << 31), 1 << 31, n, dtype=np.int64).astype("<i4").tobytes()
        if tname == "f64":
            return (rng.standard_normal(n) * 1000).astype("<f8").tobytes()
        x = rng.standard_normal(n).astype(np.float32)
        x *= np.exp(rng.uniform(-3, 3, n)).astype(np.float32)
        if tname == "f32":
            return x.astype("<f4").tobytes()
        return ggml.quantize(tname, x, ne0)
    nblk = n // bs
    pool_n = min(nblk, 1024)
    pool_n -= pool_n % 16 if pool_n >= 16 else 0
    x = rng.standard_normal(pool_n * bs).astype(np.float32)
    x *= np.exp(rng.uniform(-3, 3, pool_n)).astype(np.float32).repeat(bs)
    per_row = bs * 16 if pool_n % 16 == 0 else bs * pool_n
    pool = np.frombuffer(ggml.quantize(tname, x, per_row), np.uint8).reshape(pool_n, ts)
    return pool[rng.integers(0, pool_n, nblk)].tobytes()


def make_mixed(ggml, th, path, specs, seed):
    rng = np.random.default_rng(seed)
    tensors = []
    for name, tname, ne0, rows in specs:
        tensors.append((name, tname, [ne0, rows], pool_raw(ggml, rng, tname, ne0, rows)))
    ggml.write_model(path, kvs0(), tensors)
    return [tensor_exp(th, name, tname, ne, Flat(raw), Flat(ggml.dequant(tname, raw).view("<u4").tobytes()))
            for name, tname, ne, raw in tensors]


def make_models(ggml, th, d, seed):
    import pyreader
    rng = random.Random(seed)
    out = {}
    specs_m = []
    for i in range(12):
        tname = MIXED_TYPES[i % len(MIXED_TYPES)] if i < 8 else rng.choice(MIXED_TYPES)
        bs = ggml.ggml_types()[ggml.type_id(tname)][1]
        ne0 = bs * rng.choice([16, 40, 128, 509 // bs * 4 or 16])
        rows = ((1 << 20) + rng.randrange(4 << 20)) // 4 // ne0 | 1
        specs_m.append(("m%02d.%s" % (i, tname), tname, ne0, rows))
    specs_s = []
    for i in range(400):
        tname = rng.choice(MIXED_TYPES)
        bs = ggml.ggml_types()[ggml.type_id(tname)][1]
        specs_s.append(("blk.%d.s%03d.%s" % (i // 10, i, tname), tname, bs * rng.choice([1, 2, 3, 8]),
                        rng.choice([1, 2, 3, 5])))
    for key, make in (("P", lambda p: make_p(ggml, th, p)),
                      ("M", lambda p: make_mixed(ggml, th, p, specs_m, seed + 1)),
                      ("S", lambda p: make_mixed(ggml, th, p, specs_s, seed + 2))):
        t0 = time.time()
        path = os.path.join(d, "%s.gguf" % key)
        tens = make(path)
        hashes = th.want_hashes(path, {})
        pr = pyreader.read(path)
        shapes = {t.name.decode(): list(reversed(t.ne)) for t in pr.tensors}
        for t in tens:
            t.set_shape(shapes[t.name])
        meta = {"format": "pt"}
        for kv in pr.kvs:
            if kv.type == "string" and kv.key.decode() not in meta:
                meta[kv.key.decode()] = bytes(kv.value).decode()
        meta.pop("general.name")
        m = ModelExp(key, path, tens, hashes, meta)
        gm = ggml.read_gguf(path)
        m.sha = harness.tensor_hashes(gm, path)
        out[key] = m
        log("soak: model %s: %d tensors, %.1f MB file, %.1f MB of f32 (%.1f s to make)"
            % (key, len(tens), os.path.getsize(path) / 1e6, sum(t.views["f32"].size for t in tens) / 1e6,
               time.time() - t0))
    return out


# ---- what a segment shares with its readers (made before the fork) ----------

MAX_SLOTS = 64


class Shared:
    """Made once for the whole soak, cleared for each segment (reset): no
    shared memory is freed and handed out again while the soak runs."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.n = 0
        self.op_start = ctx.Array("d", MAX_SLOTS, lock=False)    # monotonic; 0: idle
        self.desc = ctx.Array("c", MAX_SLOTS * DESC, lock=False)
        self.cnt = ctx.Array("q", MAX_SLOTS * NC, lock=False)
        self.pid = ctx.Array("q", MAX_SLOTS, lock=False)
        self.tid = ctx.Array("q", MAX_SLOTS, lock=False)
        # stop, ending, announced sequence number
        self.flags = ctx.Array("q", 3, lock=False)
        self.committed = ctx.Array("q", len(KEYS), lock=False)
        self.msgs = None

    def reset(self, nslots):
        """For a segment of nslots slots (readers and the editor), before
        its readers fork."""
        assert nslots <= MAX_SLOTS
        self.n = nslots
        for a in (self.op_start, self.desc, self.cnt, self.pid, self.tid, self.flags, self.committed):
            ctypes.memset(ctypes.addressof(a), 0, ctypes.sizeof(a))
        # a new queue: a reader killed while it wrote could hold the old one's lock
        self.msgs = self.ctx.SimpleQueue()

    @property
    def stop(self):
        return self.flags[0]

    @property
    def ending(self):
        return self.flags[1]

    def begin(self, slot, what):
        b = what.encode(errors="replace")[:DESC - 1]
        self.desc[slot * DESC:slot * DESC + len(b) + 1] = b + b"\0"
        self.op_start[slot] = time.monotonic()

    def end(self, slot):
        self.op_start[slot] = 0.0

    def what(self, slot):
        return bytes(self.desc[slot * DESC:(slot + 1) * DESC]).split(b"\0")[0].decode(errors="replace")

    def add(self, slot, c, v=1):
        self.cnt[slot * NC + c] += v

    def total(self, c):
        return sum(self.cnt[i * NC + c] for i in range(self.n))

    def message(self, slot, text):
        if self.cnt[slot * NC + C_MSGS] < MAX_MSGS:
            self.cnt[slot * NC + C_MSGS] += 1
            self.msgs.put("slot %d: %s" % (slot, text))


class Seg:
    """A segment's configuration, as the readers see it."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


# ---- readers ----------------------------------------------------------------

def pick_range(rng, size, chunk):
    r = rng.random()
    if size == 0:
        return rng.randrange(0, 100), rng.randrange(1, 100)
    if r < 0.3 and size > chunk:
        b = chunk * rng.randrange(1, (size - 1) // chunk + 1)
        return max(0, b - rng.randrange(1, 600)), rng.randrange(2, 9000)
    if r < 0.4:
        return max(0, size - rng.randrange(0, min(size, 5000) + 1)), rng.randrange(1, 9000)
    if r < 0.43:
        return size + rng.randrange(0, 100), rng.randrange(1, 100)
    if r < 0.55:
        return rng.randrange(0, size), rng.randrange(chunk // 2, 3 * chunk)
    return rng.randrange(0, size), rng.randrange(1, 65537)


def ndiff(got, want):
    n = min(len(got), len(want))
    a = np.frombuffer(got[:n], np.uint8)
    b = np.frombuffer(want[:n], np.uint8)
    d = np.nonzero(a != b)[0]
    first = int(d[0]) if d.size else n
    return int(d.size) + abs(len(got) - len(want)), first


class Stop(Exception):
    pass


class Reader:
    def __init__(self, seg, sh, slot, rng):
        self.seg = seg
        self.sh = sh
        self.slot = slot
        self.rng = rng
        self.fds = {}
        self.own = None

    def timed(self, what, fn, *a):
        if self.sh.stop and not what.startswith("stream"):
            raise Stop()
        self.sh.begin(self.slot, what)
        try:
            return fn(*a)
        finally:
            self.sh.end(self.slot)

    def pread_all(self, what, fd, n, a):
        """os.pread of n bytes at a.  On a remote model with faults a read
        can end short: a request of the kernel's failed (EIO, the server
        stalled past timeout) after the pages before it were read, and the
        kernel returns those (a short read, as for any file); the rest is
        read again, which gives its bytes or raises that EIO."""
        got = self.timed(what, os.pread, fd, n, a)
        while self.seg.faults and 0 < len(got) < n:
            more = self.timed(what + " (the rest, after a short read)", os.pread, fd,
                              n - len(got), a + len(got))
            if not more:
                break
            got += more
        return got

    def fd(self, path, fresh):
        if fresh:
            return self.timed("open %s" % path, os.open, path, os.O_RDONLY), True
        if path not in self.fds:
            self.fds[path] = self.timed("open %s" % path, os.open, path, os.O_RDONLY)
        return self.fds[path], False

    def close(self, fd, fresh):
        if fresh:
            self.timed("close", os.close, fd)

    def check(self, what, got, want):
        sh, s = self.sh, self.slot
        if sh.ending and len(got) < len(want) and got == want[:len(got)]:
            # the connection went (a signal, a kill) in the middle of the
            # read's requests: the bytes before are the read's, right
            sh.add(s, C_ENDERR)
            raise Stop()
        sh.add(s, C_READS)
        sh.add(s, C_BYTES, len(got))
        if got != want:
            nd, first = ndiff(got, want)
            sh.add(s, C_WRONG)
            sh.add(s, C_WRONG_BYTES, nd)
            sh.message(s, "WRONG BYTES: %s: %d bytes, expected %d, %d differ, the first at +%d: "
                       "got %r, expected %r" % (what, len(got), len(want), nd, first,
                                                got[first:first + 16], want[first:first + 16]))
            return False
        return True

    def bad(self, what, text):
        sh, s = self.sh, self.slot
        sh.add(s, C_READS)
        sh.add(s, C_WRONG)
        sh.add(s, C_WRONG_BYTES, 1)
        sh.message(s, "WRONG: %s: %s" % (what, text))

    def tpath(self, t, view):
        return os.path.join(self.seg.mnt, "tensors", t.name, view)

    def read_whole(self, path):
        fd, _ = self.fd(path, True)
        try:
            out = []
            while True:
                b = self.timed("read %s at %d" % (path, sum(map(len, out))), os.read, fd, 1 << 20)
                if not b:
                    return b"".join(out)
                out.append(b)
        finally:
            self.close(fd, True)

    # the views
    def v_range(self, view):
        t = self.rng.choice(self.seg.exp.tensors)
        e = t.views[view]
        a, n = pick_range(self.rng, e.size, self.seg.chunk)
        path = self.tpath(t, view)
        fresh = self.rng.random() < 0.3
        fd, fresh = self.fd(path, fresh)
        try:
            if self.rng.random() < 0.5:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            got = self.pread_all("pread %s [%d, +%d)" % (path, a, n), fd, n, a)
        finally:
            self.close(fd, fresh)
        self.check("%s [%d, +%d)" % (path, a, n), got, e.at(a, n))

    def v_stream(self):
        if self.own is not None and self.rng.random() < 0.8:
            t = self.seg.exp.tensors[self.own % len(self.seg.exp.tensors)]
        else:
            t = self.rng.choice(self.seg.exp.tensors)
        e = t.views["f32"]
        path = self.tpath(t, "f32")
        blk = self.rng.choice([128 << 10, 1 << 20, 4 << 20, 4 << 20])
        fd, _ = self.fd(path, True)
        try:
            drop = self.rng.random()
            off = 0
            while not self.sh.stop:
                if self.rng.random() < drop:
                    # most reads reach gguffs, not the kernel's cache
                    os.posix_fadvise(fd, off, blk, os.POSIX_FADV_DONTNEED)
                b = self.timed("stream read %s at %d, %d bytes" % (path, off, blk), os.read, fd, blk)
                want = e.at(off, blk)
                if self.seg.faults and 0 < len(b) < len(want):
                    want = want[:len(b)]    # a short read (pread_all): the next goes on
                if not self.check("%s stream at %d" % (path, off), b, want) or not b:
                    break
                off += len(b)
        finally:
            self.close(fd, True)

    def v_stats(self):
        t = self.rng.choice(self.seg.exp.tensors)
        path = self.tpath(t, "stats")
        text = self.read_whole(path)
        col = Collect()
        try:
            self.seg.th.check_stats(col, path, self.seg.th.parse_stats(text), None, w=t.stats)
        except (AssertionError, ValueError) as e:
            col.fail("%s" % e)
        self.sh.add(self.slot, C_BYTES, len(text))
        if col.bad:
            self.bad(path, "; ".join(col.bad)[:600])
        else:
            self.sh.add(self.slot, C_READS)

    def v_digest(self):
        t = self.rng.choice(self.seg.exp.tensors)
        which = self.rng.choice(["xxh64", "sha256"])
        path = self.tpath(t, which)
        self.check(path, self.read_whole(path), (getattr(t, which) + "\n").encode())

    def v_hashes(self):
        path = os.path.join(self.seg.mnt, "hashes")
        self.check(path, self.read_whole(path), self.seg.exp.hashes)

    def v_meta(self):
        k = self.rng.randrange(len(KEYS))
        key = KEYS[k]
        low = self.sh.committed[k]
        path = os.path.join(self.seg.mnt, "meta", key)
        text = self.read_whole(path)
        up = self.sh.flags[2]
        self.check_seq(path, key, text, low, up)

    def check_seq(self, what, key, text, low, up):
        try:
            n = parse_key(key, text)
        except ValueError as e:
            self.bad(what, "%s: %r" % (e, text[:100]))
            return
        if not low <= n <= up:
            self.bad(what, "value %d, but the edits so far make it %d..%d (a fresh open after a "
                     "close() that returned 0 sees that edit)" % (n, low, up))
            return
        self.sh.add(self.slot, C_READS)
        self.sh.add(self.slot, C_BYTES, len(text))

    def v_safetensors(self):
        path = os.path.join(self.seg.mnt, "model.safetensors")
        fresh = self.rng.random() < 0.5
        low = self.sh.committed[1] if fresh else 0
        fd, fresh = self.fd(path, fresh)
        try:
            self._safetensors(path, fd, low)
        finally:
            self.close(fd, fresh)

    def _safetensors(self, path, fd, low):
        head = self.timed("pread %s [0, +8)" % path, os.pread, fd, 8, 0)
        if len(head) != 8:
            return self.bad(path, "%d bytes at 0" % len(head))
        n = struct.unpack("<Q", head)[0]
        if n > 64 << 20:
            return self.bad(path, "header length %d" % n)
        hdr = self.timed("pread %s [8, +%d)" % (path, n), os.pread, fd, n, 8)
        size = os.fstat(fd).st_size
        try:
            j = json.loads(hdr.decode())
            meta = j.pop("__metadata__")
            name = meta.pop("general.name", "")
            self.check_seq("%s __metadata__" % path, "general.name", (name + "\n").encode(),
                           low, self.sh.flags[2])
            if meta != self.seg.exp.st_meta:
                return self.bad(path, "__metadata__ %r, expected %r" % (meta, self.seg.exp.st_meta))
            if set(j) != set(self.seg.exp.by_name):
                return self.bad(path, "tensors %r" % sorted(set(j) ^ set(self.seg.exp.by_name))[:5])
            spans = []
            for nm, ent in j.items():
                t = self.seg.exp.by_name[nm]
                a, b = ent["data_offsets"]
                if ent["dtype"] != t.st_dtype or ent["shape"] != t.shape or \
                        b - a != int(np.prod(t.shape)) * ST_SIZE[t.st_dtype]:
                    return self.bad(path, "%s: %r, expected %s %r" % (nm, ent, t.st_dtype, t.shape))
                spans.append((a, b, t))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return self.bad(path, "header: %s: %r" % (e, hdr[:200]))
        spans.sort(key=lambda s: s[0])
        at = 0
        for a, b, t in spans:
            if a != at:
                return self.bad(path, "%s starts at %d, the previous ends at %d" % (t.name, a, at))
            at = b
        base = 8 + n
        if base + at != size:
            return self.bad(path, "st_size %d, the header says %d" % (size, base + at))
        self.sh.add(self.slot, C_READS)
        self.sh.add(self.slot, C_BYTES, 8 + n)
        starts = [base + a for a, _, _ in spans]
        prefix = head + hdr
        for _ in range(self.rng.randrange(1, 4)):
            if self.rng.random() < 0.5:
                a = max(0, self.rng.choice(starts) - self.rng.randrange(0, 5000))
            else:
                a = self.rng.randrange(0, size + 10)
            ln = self.rng.randrange(1, 3 * self.seg.chunk)
            got = self.pread_all("pread %s [%d, +%d)" % (path, a, ln), fd, ln, a)
            want = []
            p, left = a, min(ln, max(0, size - a))
            if p < base:
                want.append(prefix[p:p + left])
                left -= len(want[-1])
                p = base
            import bisect
            i = bisect.bisect_right(starts, p) - 1
            while left > 0 and i < len(spans):
                sa, sb, t = spans[i]
                v = t.views["f32" if t.st_dtype == "F32" else "raw"]
                k = min(left, base + sb - p)
                want.append(v.at(p - base - sa, k))
                left -= k
                p += k
                i += 1
            self.check("%s [%d, +%d)" % (path, a, ln), got, b"".join(want))

    def run(self):
        views = self.seg.views
        names = list(views)
        weights = [views[v] for v in names]
        try:
            while not self.sh.stop:
                v = self.rng.choices(names, weights)[0]
                try:
                    if v in ("f32", "raw", "f32.npy"):
                        self.v_range(v)
                    elif v == "stream":
                        self.v_stream()
                    else:
                        getattr(self, "v_" + v)()
                except Stop:
                    break
                except OSError as e:
                    self.drop_fds()
                    if self.sh.ending:
                        self.sh.add(self.slot, C_ENDERR)
                        break
                    if self.seg.faults and e.errno == errno.EIO:
                        self.sh.add(self.slot, C_REIO)
                        continue
                    self.sh.add(self.slot, C_ERR)
                    self.sh.message(self.slot, "ERROR: %s: %s" % (self.sh.what(self.slot), e))
        except Exception as e:  # noqa: BLE001 - a bug of the soak: reported, counted
            self.sh.add(self.slot, C_ERR)
            self.sh.message(self.slot, "ERROR (the reader): %s: %s" % (type(e).__name__, e))
        finally:
            self.drop_fds()

    def drop_fds(self):
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.fds = {}


class Collect:
    """What test_hashes.check_stats reports, as a list of failures."""

    def __init__(self):
        self.bad = []

    def check(self, cond, msg):
        if not cond:
            self.bad.append(msg)
        return bool(cond)

    def fail(self, msg):
        return self.check(False, msg)


libc = ctypes.CDLL(None, use_errno=True)


def gettid():
    return libc.syscall(186)       # SYS_gettid (x86-64)


def reader_proc(seg, sh, slots, seed, own):
    threads = []
    for k, slot in enumerate(slots):
        r = Reader(seg, sh, slot, random.Random(seed * 1000 + k))
        r.own = own

        def go(r=r):
            sh.pid[r.slot] = os.getpid()
            sh.tid[r.slot] = gettid()
            r.run()
        th = threading.Thread(target=go)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    sys.stdout.flush()
    os._exit(0)


# ---- the editor (a thread of the soak) --------------------------------------

def editor(seg, sh, slot, rng, model):
    sh.pid[slot] = os.getpid()
    sh.tid[slot] = gettid()
    while not sh.stop and not sh.ending:
        k = rng.choices(range(len(KEYS)), [5, 3, 2])[0]
        key = KEYS[k]
        model.seq += 1
        n = model.seq
        sh.flags[2] = n
        path = os.path.join(seg.mnt, "meta", key)
        sh.begin(slot, "edit %s = %d" % (path, n))
        try:
            with open(path, "w") as f:
                f.write(key_text(key, n))
            sh.committed[k] = n
            sh.add(slot, C_EDITS)
        except OSError as e:
            if not sh.ending:
                sh.add(slot, C_ERR)
                sh.message(slot, "ERROR: edit %s = %d: %s" % (key, n, e))
            else:
                sh.add(slot, C_ENDERR)
        finally:
            sh.end(slot)
        time.sleep(rng.uniform(0.05, 0.6))       # pacing, not synchronisation


# ---- faults of the remote mount ---------------------------------------------

class RandomRule(remote.Rule):
    """A rule of the fault proxy that applies to a random share p of the
    requests (drawn with the proxy's lock held, from a seeded generator)."""

    def __init__(self, fault, p, rng, **params):
        super().__init__(fault, **params)
        self.p = p
        self.rng = rng

    def pick(self, method, path):
        if not self._matches(method, path):
            return False
        if self.rng.random() < self.p:
            self.applied += 1
            return True
        return False


def fault_plan(rng, timeout):
    plan = []
    for _ in range(rng.randrange(1, 4)):
        kind = rng.choice(["reset", "short", "503", "delay", "stall", "headers"])
        p = rng.choice([0.01, 0.03, 0.06])
        if kind == "reset":
            plan.append(RandomRule("reset", p, rng, at=rng.randrange(0, 200000)))
        elif kind == "short":
            plan.append(RandomRule("short", p, rng, at=rng.randrange(0, 200000)))
        elif kind == "503":
            plan.append(RandomRule("status", p, rng, code=503))
        elif kind == "delay":
            plan.append(RandomRule("slow", p, rng, phase="body", at=rng.randrange(0, 100000),
                                   stall=rng.uniform(0.2, timeout - 2)))
        elif kind == "headers":
            plan.append(RandomRule("slow", p, rng, phase="headers", stall=rng.uniform(0.2, 2.0)))
        else:     # a stall past the timeout: gguffs must give up on it and retry
            plan.append(RandomRule("slow", p / 3, rng, phase="body", at=rng.randrange(0, 100000),
                                   stall=timeout + 3))
    return plan


# ---- hangs ------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")
MIN_CPU = 0.2          # seconds of CPU in --stuck seconds: less is no work


def cpu_ticks(pid):
    """utime + stime of every thread of pid (clock ticks); 0 once gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def mount_dev(mnt):
    """The mount's device number (major:minor) from the mount table,
    without asking the file system (a hung one would not answer)."""
    mnt = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split()
            if p[4].encode().decode("unicode_escape") == mnt:
                return p[2]
    return None


def fusectl(dev, name):
    if not dev:
        return None
    p = "/sys/fs/fuse/connections/%s/%s" % (dev.split(":")[1], name)
    try:
        with open(p) as f:
            return f.read().strip()
    except OSError:
        return None


def task_stacks(pid, tid=None):
    out = []
    try:
        tids = [str(tid)] if tid else sorted(os.listdir("/proc/%d/task" % pid), key=int)
    except OSError as e:
        return "  (%s)" % e
    for t in tids:
        try:
            with open("/proc/%d/task/%s/stack" % (pid, t)) as f:
                st = f.read().strip().replace("\n", " | ")
        except OSError as e:
            st = "(%s)" % e
        try:
            with open("/proc/%d/task/%s/wchan" % (pid, t)) as f:
                w = f.read()
        except OSError:
            w = "?"
        out.append("    task %s wchan %s: %s" % (t, w, st[:600]))
    return "\n".join(out)


# ---- the soak ---------------------------------------------------------------

class Totals:
    def __init__(self):
        self.rounds = self.segments = self.reads = self.bytes = self.hangs = 0
        self.wrong_reads = self.wrong_bytes = self.errors = self.unclean = self.mount_fail = 0
        self.model_bad = self.edits = self.end_errors = self.remote_eio = self.signals = 0
        self.remounts = self.remote_segments = 0
        self.served = self.served_bytes = self.fills = 0
        self.slow = self.slow_max = 0


class Soak:
    def __init__(self, args, models, ggml, th, tmp):
        self.args = args
        self.models = models
        self.ggml = ggml
        self.th = th
        self.tmp = tmp
        self.t = Totals()
        self.deadline = time.monotonic() + args.minutes * 60
        self.rng = random.Random(args.seed)
        self.www = os.path.join(tmp, "www")
        os.mkdir(self.www)
        for m in models.values():        # pristine copies: the remote models
            shutil.copyfile(m.path, os.path.join(self.www, os.path.basename(m.path)))
        self.remote_seq = {k: 0 for k in models}
        self.dcache = os.path.join(tmp, "dcache")
        self.stopped_once = False
        self.sh = Shared(multiprocessing.get_context("fork"))

    def left(self):
        return self.deadline - time.monotonic()

    def run(self):
        r = 0
        while self.left() > 8:
            r += 1
            self.round(r)
            self.t.rounds += 1
        return self.t

    def round(self, r):
        rng = random.Random(self.args.seed * 100003 + r)
        key = rng.choices(["P", "M", "S"], [35, 45, 20])[0]
        m = self.models[key]
        rem = rng.random() < 0.25
        nseg = rng.choice([1, 1, 2, 2, 3])
        overlay = os.path.join(self.tmp, "overlay-%d.gguf" % r) if rem and rng.random() < 0.5 else None
        log("round %d: model %s, %s%s, %d segment(s)" % (
            r, key, "remote" if rem else "local", " with an overlay" if overlay else "", nseg))
        ng = None
        try:
            if rem:
                ng = remote.Nginx(self.www, lifetime=max(120.0, self.left() + 600), access_log=False)
                ng.start()
            for s in range(nseg):
                if self.left() < 8:
                    break
                if s:
                    self.t.remounts += 1
                self.segment(r, s, rng, m, ng, overlay)
        finally:
            if ng is not None:
                ng.stop()
            if overlay and os.path.exists(overlay):
                os.unlink(overlay)

    def options(self, rng, m, rem, overlay):
        o = []
        if m.key == "P" and rng.random() < 0.5:
            o.append("threads=14,cache_size=64M")      # the hang's own shape
        else:
            o.append("cache_size=%s" % rng.choice(["1M", "4M", "16M", "64M", "512M"]))
            th = rng.choice([None, 0, 1, 2, 4, 14])
            if th is not None:
                o.append("threads=%d" % th)
        if rng.random() < 0.3:
            o.append("readahead=%s" % rng.choice(["0", "1M", "16M"]))
        if rng.random() < 0.2:
            o.append("max_threads=%d" % rng.choice([2, 4, 32]))
        if rng.random() < 0.1:
            o.append("clone_fd")
        ro = False
        if rem:
            timeout = 5
            blk = rng.choice(["64K", "1M", "4M"])
            mult = {"64K": 1, "1M": 16, "4M": 64}[blk]
            o.append("timeout=%d,remote_block=%s,remote_cache=%dK,connections=%d" % (
                timeout, blk, 64 * mult * rng.choice([4, 16, 64]), rng.choice([1, 2, 8])))
            if overlay:
                o.append("overlay=%s" % overlay)
            if rng.random() < 0.3:
                o.append("cache_dir=%s" % self.dcache)
            ro = not overlay
        elif rng.random() < 0.15:
            o.append("ro")
            ro = True
        args = ["-o", ",".join(o)]
        if rng.random() < 0.08:
            args.append("-s")
        return args, ro

    def views(self, rng, m, rem):
        base = {"f32": 6, "raw": 3, "f32.npy": 2, "stream": 3, "stats": 1, "digest": 1,
                "hashes": 0.3, "safetensors": 1.5, "meta": 1}
        if m.key == "P":
            base.update(stream=20, stats=0.2, hashes=0.05, digest=0.2)
        out = {}
        for v, w in base.items():
            out[v] = w * rng.choice([0, 0.5, 1, 1, 2, 4])
        if m.key == "P":
            out["stream"] = max(out["stream"], 10)
        if not any(out.values()):
            out["f32"] = 1
        return {v: w for v, w in out.items() if w > 0}

    def segment(self, r, s, rng, m, ng, overlay):
        t = self.t
        rem = ng is not None
        opts, ro = self.options(rng, m, rem, overlay)
        views = self.views(rng, m, rem)
        nproc = rng.randrange(16, 25)
        twos = rng.randrange(0, nproc // 2 + 1)
        nslots = 1 + nproc + twos
        dur = min(rng.uniform(10, 40), max(3.0, self.left() - 3))
        sig = rng.choice([signal.SIGTERM, signal.SIGINT]) if rng.random() < 0.25 else None
        sig_at = rng.uniform(0.2, 0.9) * dur if sig else None
        label = "round %d.%d" % (r, s + 1)
        px = None
        env = dict(os.environ)
        try:
            if rem:
                px = remote.FaultProxy(ng.base, lifetime=max(120.0, self.left() + 600),
                                       max_requests=1 << 40)
                px.start()
                src = px.url(os.path.basename(m.path))
            else:
                src = m.path
            try:
                g = harness.Gguffs(src, opts, env=env)
            except harness.MountError as e:
                t.mount_fail += 1
                log("%s: MOUNT FAILED: %s %s: %s" % (label, " ".join(opts), src, e))
                return
        except BaseException:
            if px is not None:
                px.stop()
            raise
        t.segments += 1
        t.remote_segments += rem
        plan = []
        try:
            ctx = multiprocessing.get_context("fork")
            sh = self.sh
            sh.reset(nslots)

            def first():
                # the chunk size, and what the mount shows now: the lower
                # bounds of the meta/ checks
                st0 = harness.read_stats(g.mnt)
                vals = []
                for key in KEYS:
                    with open(os.path.join(g.mnt, "meta", key), "rb") as f:
                        vals.append(parse_key(key, f.read()))
                return st0, vals
            got = self.guarded(label, g, sh, px, "the first reads of stats and meta/", first)
            if got is None:
                return
            st0, vals = got
            chunk = int(st0.get("chunk_bytes") or 1 << 20)
            for k, n in enumerate(vals):
                sh.committed[k] = n
                m.seq = max(m.seq, n)
            sh.flags[2] = m.seq
            if rem:
                plan = fault_plan(rng, 5)
                for rule in plan:
                    px.add(rule)
            seg = Seg(mnt=g.mnt, exp=m, chunk=chunk, views=views, th=self.th, faults=bool(plan))
            log("%s: %s %s, %d processes (%d readers), views %s, %.0f s%s" % (
                label, " ".join(opts), "remote (faults: %s)" % ", ".join(
                    "%s %s p=%.3f" % (x.fault, x.params, x.p) for x in plan) if rem else "local",
                nproc, nslots - 1, " ".join("%s:%g" % kv for kv in sorted(views.items())), dur,
                ", then %s at %.1f s" % (signal.Signals(sig).name, sig_at) if sig else ""))
            self.run_segment(label, g, sh, seg, ctx, rng, m, ro, nproc, twos, dur, sig, sig_at, px)
        finally:
            g.close()
            if px is not None:
                px.stop()

    def run_segment(self, label, g, sh, seg, ctx, rng, m, ro, nproc, twos, dur, sig, sig_at, px):
        t = self.t
        hangs0 = t.hangs
        procs = []
        slot = 1
        for i in range(nproc):
            k = 2 if i < twos else 1
            p = ctx.Process(target=reader_proc, args=(seg, sh, list(range(slot, slot + k)),
                                                      rng.randrange(1 << 30), i))
            slot += k
            procs.append(p)
        t0 = time.monotonic()
        for p in procs:
            p.start()
        ed = None
        if not ro:
            ed = threading.Thread(target=editor, args=(seg, sh, 0, random.Random(rng.random()), m),
                                  daemon=True)
            ed.start()
        hung = False
        signalled = None
        stopped_at = None
        gone_reported = False
        msgs = []
        slow = set()                 # (slot, start) of operations reported slow
        bad_starts = set()
        samples = collections.deque()  # (time, gguffs' CPU ticks, requests to the proxy)
        while True:
            sentinels = [p.sentinel for p in procs if p.exitcode is None]
            if sentinels:
                multiprocessing.connection.wait(sentinels, timeout=0.5)   # the watchdog's period
            else:
                time.sleep(0.2)
            while not sh.msgs.empty():
                msgs.append(sh.msgs.get())
                log("%s: %s" % (label, msgs[-1]))
            now = time.monotonic()
            el = now - t0
            # a read or an edit stuck past the limit: a hang when gguffs
            # did no work meanwhile (its CPU time and the fault proxy's
            # requests flat over the last --stuck seconds), or past 5 x
            # --stuck in any case.  Otherwise it is slow, reported and
            # counted: a whole-file view (hashes, stats) of a remote model
            # may need hundreds of requests, some delayed by the proxy, and
            # on a machine loaded beyond its CPUs a niced gguffs may wait
            # long for a CPU.
            samples.append((now, cpu_ticks(g.pid), px.n if px else 0))
            while len(samples) > 2 and samples[1][0] <= now - self.args.stuck:
                samples.popleft()
            then = samples[0]
            cpu_d = (samples[-1][1] - then[1]) / CLK_TCK
            req_d = samples[-1][2] - then[2]
            idle = then[0] <= now - self.args.stuck + 1 and cpu_d < MIN_CPU and req_d == 0
            over = []
            for i in range(sh.n):
                v = sh.op_start[i]
                if not v:
                    continue
                if not t0 - 1 <= v <= now + 1:       # never: the soak's own bug
                    if (i, v) not in bad_starts:
                        bad_starts.add((i, v))
                        t.errors += 1
                        log("%s: SOAK ERROR: slot %d's start %r is outside the segment [%.1f, %.1f]"
                            % (label, i, v, t0, now))
                    continue
                if now - v > self.args.stuck:
                    over.append((i, v))
            stuck = [i for i, v in over if idle or now - v > 5 * self.args.stuck]
            for i, v in over:
                if i not in stuck and (i, v) not in slow:
                    slow.add((i, v))
                    t.slow += 1
                    log("%s: SLOW (gguffs works: %.1f s of CPU and %d requests to the server in the "
                        "last %.0f s): slot %d for %.0f s: %s" % (label, cpu_d, req_d, now - then[0],
                                                                   i, now - v, sh.what(i)))
            for i, v in list(slow):
                if sh.op_start[i] != v:        # done
                    slow.discard((i, v))
                    t.slow_max = max(t.slow_max, now - v)
            if stuck and not hung:
                hung = True
                self.hang(label, g, sh, stuck, now, px, "%d operation(s) stuck for more than %.0f s; "
                          "gguffs used %.2f s of CPU%s in the last %.0f s"
                          % (len(stuck), self.args.stuck, cpu_d,
                             "" if px is None else " and the server got %d requests" % req_d,
                             now - then[0]))
            # gguffs gone by itself
            if g.proc.poll() is not None and signalled is None and not hung and not gone_reported:
                gone_reported = True
                sh.flags[1] = 1
                t.unclean += 1
                log("%s: GGUFFS EXITED (status %s) with nobody asking; stderr:\n%s"
                    % (label, g.proc.returncode, g.stderr()[-6000:]))
            if self.args.hang_check and not self.stopped_once and el >= dur / 3:
                # the watchdog's own check: a gguffs that answers nothing
                self.stopped_once = True
                log("%s: --hang-check: SIGSTOP to gguffs (pid %d)" % (label, g.pid))
                os.kill(g.pid, signal.SIGSTOP)
            if sig and signalled is None and not hung and el >= sig_at:
                sh.flags[1] = 1
                signalled = now
                t.signals += 1
                g.send_signal(sig)
            if signalled is not None and not hung and g.proc.poll() is None and \
                    now - signalled > self.args.stuck:
                hung = True
                self.hang(label, g, sh, [], now, px, "gguffs still running %.0f s after %s"
                          % (now - signalled, signal.Signals(sig).name))
            if el >= dur and stopped_at is None:
                sh.flags[0] = 1
                stopped_at = now
            alive = [p for p in procs if p.exitcode is None]
            if (stopped_at is not None or signalled is not None or hung or gone_reported) and \
                    not alive and (ed is None or not ed.is_alive()):
                break
            # readers that do not end once everything else is over (a bug of
            # the soak, or of the kernel): ended, reported
            if alive and ((hung or gone_reported) and now - t0 > dur + 4 * self.args.stuck):
                for p in alive:
                    log("%s: reader pid %d does not end; its stacks:\n%s" % (label, p.pid, task_stacks(p.pid)))
                    p.kill()
                    t.errors += 1
        for p in procs:
            p.join()
        if ed is not None:
            ed.join()
        while not sh.msgs.empty():
            log("%s: %s" % (label, sh.msgs.get()))
        # what reached gguffs (the rest came from the kernel's page cache)
        st = {}
        if not hung and not gone_reported and signalled is None:
            st = self.guarded(label, g, sh, px, "stats", harness.read_stats, g.mnt)
            hung = st is None and self.t.hangs > hangs0
            st = st or {}
        served = sum(v for k, v in st.items() if k.startswith("reads_"))
        served_bytes = sum(v for k, v in st.items() if k.startswith("read_bytes_"))
        t.served += served
        t.served_bytes += served_bytes
        t.fills += st.get("misses", 0)
        # the end: unmount, or the signal's exit
        clean = True
        problems = []
        if hung or gone_reported:
            clean = False
        elif signalled is not None:
            rc = g.wait(self.args.stuck)
            problems = g._problems(rc, self.args.stuck, True)
        else:
            ok = self.guarded(label, g, sh, px, "fusermount3 -u", harness.unmount, g.mnt)
            rc = g.wait(self.args.stuck) if ok is not None else None
            if rc is None and ok is not None:
                self.hang(label, g, sh, [], time.monotonic(), px,
                          "gguffs still running %.0f s after the unmount" % self.args.stuck)
            hung = hung or rc is None
            problems = [] if hung else g._problems(rc, self.args.stuck)
        if problems:
            clean = False
            t.unclean += 1
            for p in problems:
                log("%s: NOT CLEAN: %s" % (label, p))
        reads, nbytes = sh.total(C_READS), sh.total(C_BYTES)
        t.reads += reads
        t.bytes += nbytes
        t.wrong_reads += sh.total(C_WRONG)
        t.wrong_bytes += sh.total(C_WRONG_BYTES)
        t.errors += sh.total(C_ERR)
        t.end_errors += sh.total(C_ENDERR)
        t.remote_eio += sh.total(C_REIO)
        t.edits += sh.total(C_EDITS)
        log("%s: %.1f s, %d reads (%.0f MB) checked, %d wrong, %d errors, %d edits, %d errors after "
            "the end began, %d remote EIO%s; gguffs served %s; %s" % (
                label, time.monotonic() - t0, reads, nbytes / 1e6, sh.total(C_WRONG), sh.total(C_ERR),
                sh.total(C_EDITS), sh.total(C_ENDERR), sh.total(C_REIO),
                ", %d faults served" % sum(x.applied for x in px.plan) if px else "",
                "%d read requests (%.0f MB), %d chunks filled, %d prefetched, %d waits%s" % (
                    served, served_bytes / 1e6, st.get("misses", 0), st.get("prefetched", 0),
                    st.get("waits", 0), ", %d remote requests, %d retried" % (
                        st.get("remote_requests", 0), st.get("remote_retries", 0)) if px else "")
                if st else "(no stats: signalled)",
                "HANG" if hung else "clean exit" if clean else "NOT CLEAN"))
        if clean and not px:
            self.verify(label, m)

    def guarded(self, label, g, sh, px, what, fn, *a):
        """fn(*a) on a thread of its own, as a reader's operation: past
        --stuck seconds it is a hang (reported, gguffs killed) and the
        result None."""
        box = []

        def run():
            try:
                box.append(fn(*a))
            except Exception as e:  # noqa: BLE001 - reported below
                box.append(e)
        th = threading.Thread(target=run, daemon=True)
        t0 = time.monotonic()
        th.start()
        th.join(self.args.stuck)
        if th.is_alive():
            self.hang(label, g, sh, [], time.monotonic(), px, "%s: no answer in %.0f s"
                      % (what, time.monotonic() - t0))
            th.join(self.args.stuck)
            return None
        if isinstance(box[0], Exception):
            self.t.errors += 1
            log("%s: ERROR: %s: %s: %s" % (label, what, type(box[0]).__name__, box[0]))
            return None
        return box[0]

    def verify(self, label, m):
        """The model file after a clean end: ggml reads it, every tensor's
        bytes as made, the keys values the soak wrote."""
        gm = self.ggml.read_gguf(m.path)
        if gm is None:
            self.t.model_bad += 1
            log("%s: MODEL FILE: ggml refuses %s: %s" % (label, m.path, self.ggml.last_log()))
            return
        sha = harness.tensor_hashes(gm, m.path)
        if sha != m.sha:
            self.t.model_bad += 1
            log("%s: MODEL FILE: tensor bytes changed: %s" % (
                label, sorted(k for k in m.sha if sha.get(k) != m.sha[k])[:5]))
        kv = {k.decode(): v for k, _, v in gm.kvs}
        try:
            n = [int(kv["soak.counter"]), parse_key("general.name", bytes(kv["general.name"]) + b"\n"),
                 parse_key("soak.blob", "".join("%d\n" % x for x in kv["soak.blob"].items).encode())]
            if max(n) > m.seq:
                raise ValueError("values %r past the last edit %d" % (n, m.seq))
        except (KeyError, ValueError) as e:
            self.t.model_bad += 1
            log("%s: MODEL FILE: keys: %s" % (label, e))

    def hang(self, label, g, sh, stuck, now, px, why):
        self.t.hangs += 1
        sh.flags[1] = 1
        dev = mount_dev(g.mnt)
        out = ["%s: HANG #%d: %s; mount %s (fuse connection %s, %s requests waiting)"
               % (label, self.t.hangs, why, g.mnt, dev, fusectl(dev, "waiting"))]
        for i in stuck:
            pid, tid = sh.pid[i], sh.tid[i]
            out.append("  slot %d (pid %d, thread %d) for %.1f s: %s" % (
                i, pid, tid, now - sh.op_start[i], sh.what(i)))
            out.append(task_stacks(pid, tid))
        busy = [i for i in range(sh.n) if sh.op_start[i] and i not in stuck]
        out.append("  %d other operation(s) in flight: %s" % (len(busy), "; ".join(
            "%.0f s %s" % (now - sh.op_start[i], sh.what(i)) for i in busy[:40])))
        out.append("---- gguffs pid %d: stats\n%s" % (g.pid, harness._stats_text(g.mnt)))
        out.append("---- gguffs pid %d: threads\n%s" % (g.pid, harness.thread_stacks(g.pid, gdb_limit=None)))
        out.append("---- gguffs stderr (last 4000 bytes)\n%s" % g.stderr()[-4000:])
        if px is not None:
            out.append("---- fault proxy: the last requests\n%s" % "\n".join(repr(x) for x in px.log[-30:]))
        log("\n".join(out))
        # then kill: the connection goes with it, stuck readers get ENOTCONN
        g.kill()
        if dev and fusectl(dev, "waiting") is not None:
            try:
                with open("/sys/fs/fuse/connections/%s/abort" % dev.split(":")[1], "w") as f:
                    f.write("1")
            except OSError:
                pass
        subprocess.run(["fusermount3", "-uz", g.mnt], capture_output=True, timeout=60)


def sanitizer_env(build):
    exe = os.path.join(build, "fs", "gguffs")
    with open(exe, "rb") as f:
        data = f.read()
    kind = "tsan" if b"__tsan_init" in data else "asan" if b"__asan_init" in data else "plain"
    if kind == "asan":
        os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1")
        os.environ.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
    elif kind == "tsan":
        os.environ.setdefault("TSAN_OPTIONS", "halt_on_error=1:exitcode=66:second_deadlock_stack=1:"
                              "suppressions=%s" % os.path.join(TOP, "tests", "tsan.supp"))
    return kind


def burner():
    while True:
        pass


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(prog="scripts/soak", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("minutes", type=float, help="how long: rounds start until then")
    ap.add_argument("--build", default="build", help="the gguffs build directory (default: build)")
    ap.add_argument("--burners", type=int, default=2, help="CPU burner processes (default: 2)")
    ap.add_argument("--seed", type=int, default=None, help="the rounds' seed (default: a new one, printed)")
    ap.add_argument("--stuck", type=float, default=60.0,
                    help="seconds after which a read or an edit is a hang (default: 60)")
    ap.add_argument("--tmp", default=None, help="where the models go (default: TMPDIR)")
    ap.add_argument("--hang-check", action="store_true",
                    help="the watchdog's own check: stop gguffs (SIGSTOP) in the first segment; "
                    "the soak must report that hang with its stacks and fail")
    args = ap.parse_args()
    try:
        os.nice(max(0, 10 - os.nice(0)))
    except OSError:
        pass
    build = os.path.abspath(os.path.join(TOP, args.build) if not os.path.isabs(args.build) else args.build)
    os.environ["GGUFFS_BIN"] = os.path.join(build, "fs", "gguffs")
    os.environ.setdefault("GGUFFS_SRC", TOP)
    if not os.access(os.environ["GGUFFS_BIN"], os.X_OK):
        print("soak: no gguffs in %s (scripts/build %s -Dtests=enabled)" % (build, args.build), file=sys.stderr)
        return 2
    kind = sanitizer_env(build)
    harness.require_fuse()
    if remote.have_nginx():
        print("soak: %s" % remote.have_nginx(), file=sys.stderr)
        return 2
    ggml = harness.require_oracle()
    import test_hashes as th
    if th.xxhash is None:
        print("soak: python3-xxhash is missing (scripts/setup --tests)", file=sys.stderr)
        return 2
    if not os.path.isdir("/sys/fs/fuse/connections/") or not os.listdir("/sys/fs/fuse/connections/"):
        subprocess.run(["mount", "-t", "fusectl", "none", "/sys/fs/fuse/connections"], capture_output=True)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    rev = subprocess.run(["git", "-C", TOP, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip() or "?"
    log("soak: %.1f minutes, build %s (%s), seed %d, %d burners, stuck after %.0f s, load %s, "
        "%d CPUs, nice %d, source %s, %s" % (args.minutes, args.build, kind, args.seed, args.burners,
                                             args.stuck, loadavg(), os.cpu_count(), os.nice(0), rev,
                                             time.strftime("%Y-%m-%d %H:%M:%S %Z")))
    tmp = tempfile.mkdtemp(prefix="gguffs-soak-", dir=args.tmp)
    burners = []
    t0 = time.time()
    try:
        models = make_models(ggml, th, tmp, args.seed)
        ctx = multiprocessing.get_context("fork")
        for _ in range(args.burners):
            b = ctx.Process(target=burner, daemon=True)
            b.start()
            burners.append(b)
        soak = Soak(args, models, ggml, th, tmp)
        loads = []

        def sample():
            while True:
                loads.append(float(loadavg().split()[0]))
                time.sleep(30)
        threading.Thread(target=sample, daemon=True).start()
        t = soak.run()
    finally:
        for b in burners:
            b.kill()
            b.join()
        shutil.rmtree(tmp, ignore_errors=True)
    bad = t.hangs + t.wrong_reads + t.errors + t.unclean + t.mount_fail + t.model_bad
    log("soak: %s: %.1f min, build %s (%s), seed %d, %d burners, load avg %.1f (max %.1f): %d rounds, "
        "%d segments (%d remounts, %d remote), %d reads, %.2f GB checked (gguffs served %d read "
        "requests, %.2f GB; %d chunks filled), %d edits, %d signals, "
        "%d hangs, %d wrong bytes (%d reads), %d unexpected errors, %d gguffs exits not clean, "
        "%d failed mounts, %d model files wrong; %d read errors after a signal or kill, "
        "%d remote EIO (faults), %d slow remote reads (the longest %.0f s)" % (
            "FAIL" if bad else "PASS", (time.time() - t0) / 60, args.build, kind, args.seed,
            args.burners, sum(loads) / max(1, len(loads)), max(loads or [0]), t.rounds, t.segments,
            t.remounts, t.remote_segments, t.reads, t.bytes / 1e9, t.served, t.served_bytes / 1e9,
            t.fills, t.edits, t.signals, t.hangs,
            t.wrong_bytes, t.wrong_reads, t.errors, t.unclean, t.mount_fail, t.model_bad,
            t.end_errors, t.remote_eio, t.slow, t.slow_max))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# model.safetensors: read with a safetensors reader written here from the format's spec (8-byte LE length, JSON, dtypes, shapes, data_offsets contiguous, no holes, aligned), every tensor's span equal to its raw or f32 file, numpy.memmap, reads across tensor boundaries; corpus files, generated files of every type (big-endian, a split model, thousands of tensors) and an edit.
"""
For every mounted file:

  - model.safetensors parses with the reader below: an 8-byte
    little-endian length N, N bytes of JSON (an object; spaces after it up
    to a multiple of 8), "__metadata__" a dict of strings with "format":
    "pt"; every other entry {"dtype", "shape", "data_offsets"} with a
    dtype the format has, data_offsets [a, b] with b - a the shape's
    element count times the dtype's size, a multiple of the dtype's size;
    sorted by a the spans are contiguous from 0 to the end of the file (no
    holes), and the file's size (stat and read) is 8 + N + their sum;
  - the tensors are the GGUF's (pyreader), names as they are: those of a
    little-endian file of a plain type (f32, f16, bf16, f64, i8, i16, i32,
    i64) in their own dtype with their raw bytes, every other one with an
    f32 file as F32 with the f32 file's bytes; the rest (no f32 view, a
    name that is not UTF-8) are left out and listed in
    __metadata__["gguffs.omitted"]; shapes are the shape files'; the order
    is element size (largest first), then name;
  - __metadata__ holds the file's string keys (first occurrence, UTF-8);
  - numpy.memmap of each tensor's span gives its bytes;
  - reads at random offsets, and reads that start before a tensor's end
    and run over the next ones, equal the same slices of a full read;
  - stats counts the reads (reads_safetensors).

An edit: a model.safetensors opened before keeps its bytes, a new open
shows the new general.name.
"""
import json
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

import pyreader  # noqa: E402  (tests/oracle, put on the path by harness)
from test_views import make_ggml_model, make_py_models, read_all, _fname, write_split  # noqa: E402

QUICK = harness.QUICK
# the format's dtypes and their sizes (huggingface/safetensors, Dtype)
DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
          "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
PLAIN = {"f32": "F32", "f16": "F16", "bf16": "BF16", "f64": "F64", "i8": "I8", "i16": "I16",
         "i32": "I32", "i64": "I64"}
NP = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "F64": "<f8", "I8": "|i1", "I16": "<i2",
      "I32": "<i4", "I64": "<i8"}


class STError(Exception):
    pass


def parse(data):
    """(header length N, metadata, {name: (dtype, shape, a, b)}) of a
    safetensors file's bytes; STError when it breaks the format."""
    if len(data) < 8:
        raise STError("%d bytes: no length" % len(data))
    n = struct.unpack("<Q", data[:8])[0]
    if 8 + n > len(data):
        raise STError("header length %d past the end (%d bytes)" % (n, len(data)))
    raw = data[8:8 + n]
    if not raw.startswith(b"{"):
        raise STError("the header does not start with '{': %r" % raw[:20])
    text = raw.decode("utf-8")          # strict: the format says UTF-8
    hdr = json.loads(text)              # json.loads refuses trailing garbage
    if text.rstrip(" ") != text.rstrip():
        raise STError("the header is padded with something other than spaces")
    meta = hdr.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and
                                 all(isinstance(k, str) and isinstance(v, str)
                                     for k, v in meta.items())):
        raise STError("__metadata__ is not a dict of strings: %r" % meta)
    tens = {}
    for name, e in hdr.items():
        if set(e) != {"dtype", "shape", "data_offsets"}:
            raise STError("%r: keys %r" % (name, sorted(e)))
        dt, shape, (a, b) = e["dtype"], e["shape"], e["data_offsets"]
        if dt not in DTYPES or not all(isinstance(x, int) and x >= 0 for x in shape):
            raise STError("%r: dtype %r shape %r" % (name, dt, shape))
        if not (0 <= a <= b) or b - a != int(np.prod(shape, dtype=object)) * DTYPES[dt]:
            raise STError("%r: data_offsets %r for %s %r" % (name, (a, b), dt, shape))
        if a % DTYPES[dt]:
            raise STError("%r: starts at %d, not aligned to its %s" % (name, a, dt))
        tens[name] = (dt, shape, a, b)
    at = 0
    for name, (dt, shape, a, b) in sorted(tens.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if a != at:
            raise STError("%r starts at %d, the previous ends at %d (hole or overlap)"
                          % (name, a, at))
        at = b
    if 8 + n + at != len(data):
        raise STError("the tensors end at %d, the file at %d" % (8 + n + at, len(data)))
    return n, meta or {}, tens


def expected_meta(pr):
    out = {"format": "pt"}
    for kv in pr.kvs:
        if kv.type != "string":
            continue
        try:
            k, v = kv.key.decode("utf-8"), bytes(kv.value).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if k not in out and k != "gguffs.omitted":
            out[k] = v
    return out


def boundary_reads(h, lab, path, whole, starts, rng, n=12):
    """Reads starting a little before a span's start and running over the
    next ones, and at random offsets: slices of the whole file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        bad = 0
        for i in range(n):
            if starts and i % 2 == 0:
                s = starts[int(rng.integers(0, len(starts)))]
                a = max(0, s - int(rng.integers(0, 4100)))
            else:
                a = int(rng.integers(0, len(whole) + 1))
            ln = int(rng.integers(1, 3 << 20))
            got = os.pread(fd, ln, a)
            if got != whole[a:a + ln]:
                bad += 1
                h.fail("%s: pread(%d, at %d): %d bytes, differs from the full read"
                       % (lab, ln, a, len(got)))
        h.check(os.pread(fd, 10, len(whole) + 5) == b"", "%s: read past the end" % lab)
        return bad
    finally:
        os.close(fd)


def check_model(h, model, label, rng, full=True, options=(), url=None):
    """url: mount that (the same file served over HTTP) instead."""
    pr = harness.parsed_or_refused(h, model, label, pyreader.read)
    if pr is None:
        return
    with h.case("%s: mount" % label), mount(url or model, options) as mnt:
        check_mounted(h, mnt, pr, label, rng, full)


def check_mounted(h, mnt, pr, label, rng, full=True):
    p = os.path.join(mnt, "model.safetensors")
    before = harness.read_stats(mnt)
    data = read_all(p)
    h.check(os.stat(p).st_size == len(data), "%s: st_size %d, read %d bytes"
            % (label, os.stat(p).st_size, len(data)))
    try:
        n, meta, tens = parse(data)
    except (STError, ValueError) as e:
        h.fail("%s: model.safetensors: %s" % (label, e))
        return
    h.check(n % 8 == 0, "%s: header length %d, not a multiple of 8" % (label, n))
    h.check(meta.get("format") == "pt", "%s: __metadata__ format %r" % (label, meta.get("format")))
    omitted = meta.pop("gguffs.omitted", None)
    want = expected_meta(pr)
    h.check(meta == want, "%s: __metadata__ %r, expected %r" % (label, sorted(meta)[:8],
                                                                 sorted(want)[:8]))
    tdir = os.path.join(os.fsencode(mnt), b"tensors")
    base = 8 + n
    left = []
    order = []
    bad = []
    for i, t in enumerate(pr.tensors):
        d = os.path.join(tdir, _fname(t.name))
        try:
            name = t.name.decode("utf-8")
        except UnicodeDecodeError:
            name = None
        plain = not pr.big_endian and t.type_name in PLAIN
        has_f32 = os.path.exists(os.path.join(d, b"f32"))
        if name is None or name == "__metadata__" or not (plain or has_f32):
            left.append(t.name.decode("utf-8", "replace"))
            h.check(name not in tens, "%s: %r is there, expected left out" % (label, name))
            continue
        if not h.check(name in tens, "%s: %r (%s) missing" % (label, name, t.type_name)):
            continue
        dt, shape, a, b = tens[name]
        want_dt = PLAIN[t.type_name] if plain else "F32"
        with open(os.path.join(d, b"shape")) as f:
            want_shape = [int(x) for x in f.read().split()]
        if dt != want_dt or shape != want_shape:
            bad.append("%r: %s %r, expected %s %r" % (name, dt, shape, want_dt, want_shape))
            continue
        order.append((-DTYPES[dt], t.name, a))
        src = read_all(os.path.join(d, b"raw" if plain else b"f32"))
        if data[base + a:base + b] != src:
            bad.append("%r: span [%d, %d) differs from its %s file" % (name, a, b,
                                                                     "raw" if plain else "f32"))
            continue
        if b > a and (full or i < 40):
            m = np.memmap(p, dtype=NP[dt], mode="r", offset=base + a, shape=tuple(shape))
            if m.tobytes() != src:
                bad.append("%r: numpy.memmap gives other bytes" % name)
            del m
    h.check(not bad, "%s: %d tensors wrong, e.g. %s" % (label, len(bad), bad[:3]))
    h.check(len(tens) == len(pr.tensors) - len(left), "%s: %d tensors, %d in the file, %d left out"
            % (label, len(tens), len(pr.tensors), len(left)))
    h.check((omitted.split("\n") if omitted else []) == left,
            "%s: gguffs.omitted %r, expected %r" % (label, omitted, left))
    starts = [a for _, _, a in sorted(order)]
    h.check(starts == sorted(starts), "%s: not ordered by element size, then name" % label)
    boundary_reads(h, label, p, data, [base + s for s in starts], rng, 12 if full else 4)
    after = harness.read_stats(mnt)
    h.check(after.get("reads_safetensors", 0) > before.get("reads_safetensors", 0),
            "%s: stats did not count the reads of model.safetensors" % label)
    print("  %s: %d tensors (%d left out), header %d bytes, %d bytes" % (
        label, len(tens), len(left), n, len(data)), flush=True)


def make_many(tmp, n):
    """n small tensors of four types: a read of 1 MiB is thousands of
    spans, raw and f32 (q8_0)."""
    import gguf_write as gw
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    rng = np.random.default_rng(5)
    for i in range(n):
        t = ("f32", "i8", "f16", "q8_0")[i % 4]
        if t == "q8_0":
            blk = np.float16(rng.standard_normal() * 0.01).tobytes() + rng.bytes(32)
            w.add_tensor("blk.%d.q" % i, t, [32], blk)
        else:
            w.add_tensor("blk.%d.%s" % (i, t), t, [1 + i % 3],
                         gw.arange_bytes(t, 1 + i % 3))
    p = os.path.join(tmp, "many.gguf")
    w.write(p)
    return p


def split_model(h, ggml, tmp, rng):
    paths = write_split(ggml, tmp)
    with h.case("split model"), mount(paths[1]) as mnt:
        merged = os.path.join(tmp, "split-merged.gguf")
        with open(merged, "wb") as f:
            f.write(read_all(os.path.join(mnt, "model.gguf")))
        check_mounted(h, mnt, pyreader.read(merged), "split", rng)


def versions(h, tmp):
    """A model.safetensors opened before an edit keeps its bytes."""
    import gguf_write as gw
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "before")
    w.add_tensor("x", "f16", [4], gw.arange_bytes("f16", 4))
    p = os.path.join(tmp, "versions.gguf")
    w.write(p)
    with h.case("model.safetensors across an edit"), mount(p) as mnt:
        sp = os.path.join(mnt, "model.safetensors")
        fd = os.open(sp, os.O_RDONLY)
        try:
            old = os.pread(fd, 1 << 20, 0)
            h.check(b'"general.name":"before"' in old, "no general.name: %r" % old[:200])
            with open(os.path.join(mnt, "meta", "general.name"), "w") as f:
                f.write("after, \"quoted\"\n")
            h.check(os.pread(fd, 1 << 20, 0) == old, "an open model.safetensors changed")
            new = read_all(sp)
            _, meta, tens = parse(new)
            h.check(meta.get("general.name") == 'after, "quoted"',
                    "a new open shows general.name %r" % meta.get("general.name"))
            h.check(os.stat(sp).st_size == len(new), "new model.safetensors: st_size")
            h.check(new[-8:] == old[-8:] and list(tens) == ["x"], "the tensor changed")
        finally:
            os.close(fd)


def fills_once(h, model):
    """model.safetensors read from start to end on a fresh mount fills
    each chunk of every F32 span once (counted: stats' misses), though the
    workers prefetch along (its open file's stream follows the tensors)
    and requests straddle spans: nothing is filled twice."""
    with h.case("model.safetensors fills each chunk once"), mount(model) as mnt:
        before = harness.read_stats(mnt)
        cb = before.get("chunk_bytes") or (1 << 20)
        data = read_all(os.path.join(mnt, "model.safetensors"))
        after = harness.read_stats(mnt)
        _, _, tens = parse(data)
        chunks = 0
        for name, (dt, _, a, b) in tens.items():
            with open(os.path.join(mnt, "tensors", name, "type")) as f:
                if dt == "F32" and f.read().strip() != "f32":   # not served as raw
                    chunks += -(-(b - a) // cb)
        fills = after.get("misses", 0) - before.get("misses", 0)
        h.check(fills == chunks and fills > 2, "model.safetensors: %d fills for %d chunks"
                % (fills, chunks))


def remote_models(h, files, rng):
    """The same files over HTTP (nginx): raw spans come from the remote
    block cache, and the reads over many spans are copied from it."""
    import remote
    missing = remote.have_nginx()
    if missing:
        (h.fail if harness.IN_CI else h.note)("remote models not checked: %s" % missing)
        return
    with remote.Nginx(os.path.dirname(files[0])) as ng:
        for f in files:
            label = "remote " + os.path.basename(f)
            print("-- %s" % label, flush=True)
            check_model(h, f, label, rng, full=False, url=ng.url(os.path.basename(f)))


def main():
    h = harness.start("safetensors")
    ggml = harness.require_oracle()
    rng = np.random.default_rng(24)
    for f in harness.corpus_files() + harness.corpus_files("nonstandard"):
        print("-- %s" % os.path.basename(f), flush=True)
        check_model(h, f, os.path.basename(f), rng)
    with tempfile.TemporaryDirectory(prefix="gguffs-st-") as tmp:
        with h.case("making files"):
            p = os.path.join(tmp, "ggml-types.gguf")
            make_ggml_model(ggml, p)
            files = [p] + make_py_models(tmp)
        for f in files:
            print("-- %s" % os.path.basename(f), flush=True)
            check_model(h, f, os.path.basename(f), rng)
        fills_once(h, files[0])
        split_model(h, ggml, tmp, rng)
        versions(h, tmp)
        n = 2000 if QUICK else 8000
        print("-- %d tensors" % n, flush=True)
        many = make_many(tmp, n)
        check_model(h, many, "many", rng, full=False)
        remote_models(h, [files[0], many], rng)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

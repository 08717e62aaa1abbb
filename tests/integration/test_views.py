#!/usr/bin/python3
# The views: tensors/NAME/f32.npy and raw.npy (numpy.load, numpy's own header bytes, reads straddling the header) and info.json (json.load, equal to what tests/oracle/pyreader.py reads; 100k tensors; each version its own), on every corpus file and on generated files of many types, big-endian included.
"""
For every mounted file, every tensor:

  - f32.npy exists exactly where f32 does; its first bytes are what
    numpy.lib.format writes for a '<f4' array of the shape file's shape
    (format 1.0, data at a multiple of 64 bytes), its st_size is that
    header plus f32's size, numpy.load(mmap_mode='r') gives float32 of that
    shape, and its data bytes are f32's;
  - raw.npy exists exactly for f32, f16, f64, i8, i16, i32, i64 tensors,
    with the file's byte order ('|i1' for i8); numpy.load gives that dtype
    and shape, and its data bytes are raw's;
  - reads at random offsets that straddle the header's end equal the
    slices of header + data.

info.json parses with json.load and says what pyreader reads from the file:
version, byte order, alignment, data offset, file size; every key (its
bytes after surrogateescape, its type, a scalar's value compared by
meaning as meta/ files are, an array's element type and length); every
tensor (name, type, numpy shape, absolute offset, bytes, elements); totals
overall and per type.  A model of 100,000 tensors gets an info.json that
parses; after an edit an info.json opened before keeps its bytes, and a
new open shows the edit.  The generated files are also mounted over HTTP
(nginx, where it is installed), and a split model of three shards.  stats counts the reads of the new files.
"""
import io
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

import pyreader  # noqa: E402  (tests/oracle, put on the path by harness)
from expected import texts_match  # noqa: E402

NPY = {"f32": "f4", "f16": "f2", "f64": "f8", "i8": "i1", "i16": "i2", "i32": "i4", "i64": "i8"}
QUICK = harness.QUICK


def npy_header(descr, shape):
    """What numpy itself writes before the data of such an array."""
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        b, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    return b.getvalue()


def read_all(path):
    with open(path, "rb", buffering=0) as f:
        out = []
        while True:
            b = f.read(1 << 20)
            if not b:
                return b"".join(out)
            out.append(b)


def straddle_reads(h, lab, path, whole, hl, rng, n=6):
    """Reads that start in the header and end in the data (or past it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(n):
            a = int(rng.integers(0, hl))
            ln = int(rng.integers(hl - a + 1, hl - a + 1 + min(len(whole), 3 << 20)))
            got = os.pread(fd, ln, a)
            if not h.check(got == whole[a:a + ln], "%s: pread(%d, at %d) straddling the header "
                           "(%d bytes): %d bytes, differs" % (lab, ln, a, hl, len(got))):
                return
        # and reads of the data alone, at odd offsets
        for _ in range(3):
            a = int(rng.integers(hl, len(whole) + 1))
            ln = int(rng.integers(1, 70000))
            h.check(os.pread(fd, ln, a) == whole[a:a + ln],
                    "%s: pread(%d, at %d) past the header differs" % (lab, ln, a))
        h.check(os.pread(fd, 10, len(whole) + 3) == b"", "%s: read past the end not empty" % lab)
    finally:
        os.close(fd)


def check_tensors(h, mnt, pr, label, rng, full=True):
    tdir = os.path.join(os.fsencode(mnt), b"tensors")
    big = pr.big_endian
    n_npy = 0
    for i, t in enumerate(pr.tensors):
        d = os.path.join(tdir, _fname(t.name))
        lab = "%s: tensors/%s" % (label, _fname(t.name).decode(errors="replace"))
        tname = t.type_name
        with h.case(lab):
            with open(os.path.join(d, b"shape")) as f:
                shape = [int(x) for x in f.read().split()]
            h.check(shape == list(reversed(t.ne)), "%s: shape file %r" % (lab, shape))
            raw = read_all(os.path.join(d, b"raw"))
            # ---- f32.npy
            f32p, npyp = os.path.join(d, b"f32"), os.path.join(d, b"f32.npy")
            has = os.path.exists(f32p)
            h.check(os.path.exists(npyp) == has, "%s: f32 %s but f32.npy %s" % (
                lab, "exists" if has else "does not", "does" if os.path.exists(npyp) else "does not"))
            if has and os.path.exists(npyp) and (full or i < 12):
                n_npy += 1
                f32 = read_all(f32p)
                hdr = npy_header("<f4", shape)
                whole = read_all(npyp)
                h.check(len(hdr) % 64 == 0, "%s: numpy's header is %d bytes" % (lab, len(hdr)))
                h.check(whole[:len(hdr)] == hdr, "%s/f32.npy: header %r, numpy writes %r"
                        % (lab, whole[:len(hdr)], hdr))
                h.check(whole[len(hdr):] == f32, "%s/f32.npy: data differs from f32 (%d bytes, "
                        "%d expected)" % (lab, len(whole) - len(hdr), len(f32)))
                st = os.stat(npyp)
                h.check(st.st_size == len(hdr) + len(f32), "%s/f32.npy: st_size %d, expected %d"
                        % (lab, st.st_size, len(hdr) + len(f32)))
                a = np.load(npyp, mmap_mode="r")
                h.check(a.dtype == np.float32 and list(a.shape) == shape,
                        "%s/f32.npy: numpy.load gives %s %r" % (lab, a.dtype, a.shape))
                h.check(a.tobytes() == f32, "%s/f32.npy: numpy.load values differ from f32" % lab)
                del a
                straddle_reads(h, lab + "/f32.npy", npyp, hdr + f32, len(hdr), rng)
            # ---- raw.npy
            rp = os.path.join(d, b"raw.npy")
            want = tname in NPY
            h.check(os.path.exists(rp) == want, "%s (%s): raw.npy %s" % (
                lab, tname, "missing" if want else "present, numpy has no such dtype"))
            if want and os.path.exists(rp):
                n_npy += 1
                descr = ("|" if tname == "i8" else ">" if big else "<") + NPY[tname]
                hdr = npy_header(descr, shape)
                whole = read_all(rp)
                h.check(whole[:len(hdr)] == hdr, "%s/raw.npy: header %r, numpy writes %r"
                        % (lab, whole[:len(hdr)], hdr))
                h.check(whole[len(hdr):] == raw, "%s/raw.npy: data differs from raw" % lab)
                h.check(os.stat(rp).st_size == len(hdr) + len(raw), "%s/raw.npy: st_size" % lab)
                a = np.load(rp, mmap_mode="r")
                h.check(a.dtype == np.dtype(descr) and list(a.shape) == shape,
                        "%s/raw.npy: numpy.load gives %s %r, expected %s %r"
                        % (lab, a.dtype.str, a.shape, descr, shape))
                h.check(a.tobytes() == raw, "%s/raw.npy: values differ from raw" % lab)
                if a.size:
                    h.check(np.array_equal(np.asarray(a).ravel().astype(np.float64),
                                           np.frombuffer(raw, descr).astype(np.float64),
                                           equal_nan=True),
                            "%s/raw.npy: values differ from the stored ones" % lab)
                del a
                straddle_reads(h, lab + "/raw.npy", rp, hdr + raw, len(hdr), rng, n=3)
    return n_npy


def _fname(name):
    """The file name of a tensor (as checks.escape_name)."""
    import checks
    return checks.escape_name(name)


def expected_json(pr):
    """(tensor list, totals) as info.json should say, from pyreader."""
    tens = []
    tot = {"tensors": 0, "elements": 0, "bytes": 0, "by_type": {}}
    for t in pr.tensors:
        tn = t.type_name or "type_%d" % t.type
        tens.append((t.name, tn, list(reversed(t.ne)), pr.data_offset + t.offset,
                     t.nbytes, t.n_elems))
        tot["tensors"] += 1
        tot["elements"] += t.n_elems
        bt = tot["by_type"].setdefault(tn, {"tensors": 0, "elements": 0, "bytes": 0})
        bt["tensors"] += 1
        bt["elements"] += t.n_elems
        if t.nbytes is not None:
            tot["bytes"] += t.nbytes
            bt["bytes"] += t.nbytes
    return tens, tot


def check_info_json(h, mnt, pr, label):
    p = os.path.join(mnt, "info.json")
    with h.case("%s: info.json" % label):
        data = read_all(p)
        h.check(os.stat(p).st_size == len(data), "%s: info.json st_size %d, read %d bytes"
                % (label, os.stat(p).st_size, len(data)))
        j = json.loads(data)
        # numbers as their text too, for the values (compared by meaning)
        jt = json.loads(data, parse_float=str, parse_int=str)
        h.check(j["version"] == pr.version and
                j["byte_order"] == ("big" if pr.big_endian else "little") and
                j["alignment"] == pr.alignment and j["file_size"] == pr.file_size and
                j["header_size"] == pr.header_end,
                "%s: info.json header fields %r, pyreader: v%d %s align %d size %d header %d"
                % (label, {k: j.get(k) for k in ("version", "byte_order", "alignment", "file_size",
                                                  "header_size")},
                   pr.version, pr.big_endian, pr.alignment, pr.file_size, pr.header_end))
        if pr.tensors:
            h.check(j["data_offset"] == pr.data_offset, "%s: data_offset %r, pyreader %d"
                    % (label, j["data_offset"], pr.data_offset))
        md = j["metadata"]
        h.check(len(md) == len(pr.kvs), "%s: %d keys in info.json, %d in the file"
                % (label, len(md), len(pr.kvs)))
        bad = []
        for kv, m, mt in zip(pr.kvs, md, jt["metadata"]):
            key = m["key"].encode("utf-8", "surrogateescape")
            if key != kv.key or m["type"] != kv.type:
                bad.append("key %r type %r, file %r %r" % (key, m["type"], kv.key, kv.type))
                continue
            if kv.type.startswith("array"):
                if m.get("element_type") != kv.type[6:-1] or m.get("length") != len(kv.value) \
                        or "value" in m:
                    bad.append("%r: array as %r" % (kv.key, m))
                continue
            v = mt["value"]
            if kv.type == "string":
                got = m["value"].encode("utf-8", "surrogateescape")
            elif isinstance(v, bool):
                got = b"true" if v else b"false"
            else:
                got = str(v).encode()
            ok, _ = texts_match(kv.type, kv.value, got + b"\n")
            if not ok:
                bad.append("%r (%s): value %r" % (kv.key, kv.type, got[:80]))
        h.check(not bad, "%s: info.json metadata: %d wrong, e.g. %s" % (label, len(bad), bad[:3]))
        tens, tot = expected_json(pr)
        jtens = j["tensors"]
        h.check(len(jtens) == len(tens), "%s: %d tensors in info.json, %d in the file"
                % (label, len(jtens), len(tens)))
        bad = []
        for (name, tn, shape, off, nb, ne), x in zip(tens, jtens):
            got = (x["name"].encode("utf-8", "surrogateescape"), x["type"], x["shape"],
                   x["offset"], x["bytes"] if nb is not None else None, x["elements"])
            if got != (name, tn, shape, off, nb, ne):
                bad.append("%r: %r, expected %r" % (name, got, (name, tn, shape, off, nb, ne)))
        h.check(not bad, "%s: info.json tensors: %d wrong, e.g. %s" % (label, len(bad), bad[:2]))
        jt_tot = dict(j["totals"])
        if any(t.nbytes is None for t in pr.tensors):   # sizes derived: not pyreader's to say
            jt_tot["bytes"] = tot["bytes"] = 0
            for v in list(jt_tot["by_type"].values()) + list(tot["by_type"].values()):
                v["bytes"] = 0
        h.check(jt_tot == tot, "%s: info.json totals %r, expected %r" % (label, jt_tot, tot))
        return j


def check_model(h, model, label, rng, full=True, options=(), url=None):
    """url: mount that (the same file served over HTTP) instead."""
    pr = harness.parsed_or_refused(h, model, label, pyreader.read)
    if pr is None:
        return
    with h.case("%s: mount" % label):
        with mount(url or model, options) as mnt:
            before = harness.read_stats(mnt)
            n = check_tensors(h, mnt, pr, label, rng, full)
            check_info_json(h, mnt, pr, label)
            after = harness.read_stats(mnt)
            if n:
                got = sum(after.get(k, 0) - before.get(k, 0) for k in ("reads_f32_npy", "reads_raw_npy"))
                h.check(got > 0, "%s: stats counted %d reads of f32.npy and raw.npy" % (label, got))
            h.check(after.get("reads_info_json", 0) > before.get("reads_info_json", 0),
                    "%s: stats did not count the reads of info.json" % label)
            print("  %s: %d tensors, %d .npy files, %d keys" % (label, len(pr.tensors), n,
                                                                len(pr.kvs)), flush=True)


# ---- generated files ----------------------------------------------------------------

def make_ggml_model(ggml, path):
    """A tensor of every type ggml can encode, small ones 1-D to 4-D, and a
    q4_0 and an f16 tensor of more than two f32 chunks."""
    tensors = []
    for i, tname in enumerate(ggml.quantizable_types()):
        bs = ggml.ggml_types()[ggml.type_id(tname)][1]
        ne = [[bs * 3], [bs, 7], [bs * 2, 3, 5], [bs, 2, 3, 2]][i % 4]
        tensors.append(("t%02d.%s" % (i, tname), tname, ne))
    rows = 5 if QUICK else 11
    tensors.append(("big.q4_0", "q4_0", [4096 + 32 * 3, rows * 13]))
    tensors.append(("big.f16", "f16", [100003, rows]))
    ggml.write_model(path, [("general.architecture", "string", "llama"),
                            ("general.name", "string", "views"),
                            ("v.f32", "f32", 0.1), ("v.nan", "f32", float("nan")),
                            ("a.str", "array[string]", ["a", "b\nc"])], tensors, seed=23)


def make_py_models(tmp):
    import gguf_write as gw
    out = []
    for be in (False, True):
        e = ">" if be else "<"
        w = gw.GGUFWriter(version=3, big_endian=be)
        w.add("general.architecture", "string", "llama")
        w.add("s.bytes", "string", b"caf\xe9 \x00\x01\x1f\"\\ \xed\xa0\x80 \xf0\x9f\x99\x82 \xc3")
        w.add(b"key.\xff\xfe.bad", "u8", 7)
        w.add("f.inf", "f32", float("-inf"))
        w.add("f64.small", "f64", 5e-324)
        w.add("b.true", "bool", True)
        w.add("n", "array[array[i32]]", [[1], [2, 3]])
        w.add("e", "array[u8]", [])
        for t in ("f32", "f16", "f64", "i8", "i16", "i32", "i64"):
            w.add_tensor("%s.2d" % t, t, [5, 3], gw.arange_bytes(t, 15, e))
            w.add_tensor("%s.4d" % t, t, [3, 2, 1, 2], gw.arange_bytes(t, 12, e))
        w.add_tensor("bf16", "bf16", [4], bytes(range(8)))
        w.add_tensor("q", "q4_0", [64, 2], bytes(range(72)))
        if not be:      # a type id gguffs does not know: its size from the layout
            w.add_tensor("unknown", "type_57", [8], bytes(range(8)))
        w.add_tensor(b"name\xffodd/x", "f32", [2], gw.arange_bytes("f32", 2, e))
        p = os.path.join(tmp, "py-%s.gguf" % ("be" if be else "le"))
        w.write(p)
        out.append(p)
    w = gw.GGUFWriter(version=1)       # version 1: info.json describes the file
    w.add("general.architecture", "string", "llama")
    w.add_tensor("v1.i16", "i16", [9], gw.arange_bytes("i16", 9))
    p = os.path.join(tmp, "py-v1.gguf")
    w.write(p)
    out.append(p)
    return out


def many_tensors(h, tmp, rng):
    """100,000 tensors: info.json of some megabytes, served and parsed."""
    import gguf_write as gw
    n = 20000 if QUICK else 100000
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    for i in range(n):
        w.add_tensor("blk.%d.w" % i, ("f32", "i8", "f16")[i % 3], [1], bytes((4, 1, 2)[i % 3]))
    p = os.path.join(tmp, "many.gguf")
    w.write(p)
    pr = pyreader.read(p)
    with h.case("%d tensors: info.json" % n), mount(p) as mnt:
        j = check_info_json(h, mnt, pr, "many")
        h.check(j is not None and len(j["tensors"]) == n and j["totals"]["tensors"] == n,
                "many: info.json lists %r tensors" % (j and len(j["tensors"])))
        print("  many: %d tensors, info.json %d bytes" % (n, os.stat(os.path.join(mnt, "info.json")).st_size),
              flush=True)


def write_split(ggml, tmp, n=3):
    """A split model of n shards in tmp (two tensors of mixed types each,
    written by ggml): the shards' paths, in order."""
    types = ["q4_K", "f16", "q8_0", "f32", "i32", "bf16"]
    paths = []
    for i in range(n):
        kvs = [("split.no", "u16", i), ("split.count", "u16", n)]
        if i == 0:
            kvs = [("general.architecture", "string", "llama")] + kvs + \
                  [("split.tensors.count", "i32", 2 * n)]
        tensors = [("blk.%d.w%d" % (i, k), types[(2 * i + k) % len(types)], [256, 3 + k])
                   for k in range(2)]
        p = os.path.join(tmp, "split-%05d-of-%05d.gguf" % (i + 1, n))
        ggml.write_model(p, kvs, tensors, seed=i)
        paths.append(p)
    return paths


def split_model(h, ggml, tmp, rng):
    """A split model: info.json describes it merged, as model.gguf (read
    back by pyreader) is; the .npy views come from every shard."""
    n = 3
    paths = write_split(ggml, tmp, n)
    with h.case("split model"), mount(paths[1]) as mnt:
        merged = os.path.join(tmp, "split-merged.gguf")
        with open(merged, "wb") as f:
            f.write(read_all(os.path.join(mnt, "model.gguf")))
        pr = pyreader.read(merged)
        h.check(len(pr.tensors) == 2 * n and not any(kv.key.startswith(b"split.") for kv in pr.kvs),
                "split: model.gguf has %d tensors, keys %r" % (len(pr.tensors), [kv.key for kv in pr.kvs]))
        n_npy = check_tensors(h, mnt, pr, "split", rng)
        check_info_json(h, mnt, pr, "split")
        print("  split: %d shards, %d tensors, %d .npy files" % (n, len(pr.tensors), n_npy), flush=True)


def fills_once(h, model, name):
    """f32.npy read from the start on a fresh mount: each chunk of the f32
    view is filled once (counted: the misses in stats), though the header
    shifts every read across two chunks."""
    with h.case("f32.npy fills each chunk once"), mount(model) as mnt:
        before = harness.read_stats(mnt)
        cb = before.get("chunk_bytes") or (1 << 20)
        p = os.path.join(mnt, "tensors", name, "f32.npy")
        data = read_all(p)
        after = harness.read_stats(mnt)
        n = os.path.getsize(os.path.join(mnt, "tensors", name, "f32"))
        chunks = -(-n // cb)
        fills = after.get("misses", 0) - before.get("misses", 0)
        h.check(chunks > 1 and fills == chunks, "%s/f32.npy: %d fills for %d chunks" % (name, fills, chunks))
        h.check(data[-n:] == read_all(os.path.join(mnt, "tensors", name, "f32")),
                "%s/f32.npy: data differs from f32" % name)


def remote_models(h, files, rng):
    """The same files over HTTP (nginx): raw.npy's data comes from the
    remote block cache instead of a descriptor."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import remote
    missing = remote.have_nginx()
    if missing:
        (h.fail if harness.IN_CI else h.note)("remote models not checked: %s" % missing)
        return
    if not h.check(files, "remote models: no files to serve"):
        return
    root = os.path.dirname(files[0])
    with remote.Nginx(root) as ng:
        for f in files:
            label = "remote " + os.path.basename(f)
            print("-- %s" % label, flush=True)
            check_model(h, f, label, rng, url=ng.url(os.path.basename(f)))


def versions(h, tmp):
    """An info.json opened before an edit keeps its version."""
    import gguf_write as gw
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "before")
    w.add_tensor("x", "f32", [4], gw.arange_bytes("f32", 4))
    p = os.path.join(tmp, "versions.gguf")
    w.write(p)
    with h.case("info.json across an edit"), mount(p) as mnt:
        ip = os.path.join(mnt, "info.json")
        fd = os.open(ip, os.O_RDONLY)
        try:
            old = os.pread(fd, 1 << 20, 0)
            h.check(b'"before"' in old, "info.json does not show the name: %r" % old[:300])
            with open(os.path.join(mnt, "meta", "general.name"), "w") as f:
                f.write("after, and longer")
            again = os.pread(fd, 1 << 20, 0)
            h.check(again == old, "an info.json open before the edit changed")
            h.check(os.fstat(fd).st_size == len(old), "its size changed")
            new = read_all(ip)
            h.check(b'"after, and longer"' in new and b'"before"' not in new,
                    "a new open of info.json does not show the edit: %r" % new[:400])
            h.check(os.stat(ip).st_size == len(new), "new info.json: st_size %d, %d bytes"
                    % (os.stat(ip).st_size, len(new)))
            j = json.loads(new)
            h.check(j["file_size"] == os.stat(p).st_size, "new info.json: file size %r, file %d"
                    % (j["file_size"], os.stat(p).st_size))
        finally:
            os.close(fd)


def main():
    h = harness.start("views")
    ggml = harness.require_oracle()
    rng = np.random.default_rng(23)
    for f in harness.corpus_files() + harness.corpus_files("nonstandard"):
        print("-- %s" % os.path.basename(f), flush=True)
        check_model(h, f, os.path.basename(f), rng)
    with tempfile.TemporaryDirectory(prefix="gguffs-views-") as tmp:
        with h.case("making files"):
            p = os.path.join(tmp, "ggml-types.gguf")
            make_ggml_model(ggml, p)
            files = [p] + make_py_models(tmp)
        for f in files:
            print("-- %s" % os.path.basename(f), flush=True)
            check_model(h, f, os.path.basename(f), rng)
        fills_once(h, files[0], "big.q4_0")
        remote_models(h, [f for f in files if "v1" not in os.path.basename(f)], rng)
        split_model(h, ggml, tmp, rng)
        versions(h, tmp)
        many_tensors(h, tmp, rng)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

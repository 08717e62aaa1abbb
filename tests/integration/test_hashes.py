#!/usr/bin/python3
# The digests: tensors/NAME/stats (numpy over the same f32 floats), xxh64 and sha256 (python's xxhash and hashlib over raw), /hashes (llama-gguf-hash --xxh64 --sha256 reimplemented), kept for the mount (counted: no fill the second time), on every corpus file and on generated files of many types, big-endian, split and remote included.
"""
For every mounted file, every tensor:

  - stats exists exactly where f32 does (a tensor without f32 has none:
    not listed, ENOENT); its lines are count nan inf zeros min max absmax
    mean std, in that order; count, nan, inf and zeros are numpy's counts
    over f32's floats, min, max and absmax the exact floats over the
    finite ones (or "nan" when there is none), mean and std numpy's over
    the finite floats in float64 (std the population one) within a
    relative 1e-9 of the magnitudes involved: gguffs sums chunk by chunk
    and numpy pairwise, so the last digits may differ (each sum is within
    about n * 2^-53 of the exact one); st_size is the text's length;
  - xxh64 and sha256 are xxhash.xxh64 and hashlib.sha256 of raw, in
    lower-case hex and a newline; their sizes (17, 65) and /hashes' are
    known without computing them: over HTTP, a stat fetches nothing;
  - /hashes is what llama-gguf-hash --xxh64 --sha256 prints for the model
    as model.gguf (examples/gguf-hash/gguf-hash.cpp): per tensor in
    model.gguf's order "%-8s  %-s  %s\\n" with model.gguf:NAME, xxh64 then
    sha256, then the two digests of all tensors' bytes named model.gguf;
    xxh64 in its canonical (big-endian) bytes.  Reimplemented here over the
    model file's bytes (a split model: over the merged model.gguf).

Kept for the mount, counted rather than timed: a second read of every
stats file fills no chunk (the cache's misses do not move), an f32 read
after stats of a tensor that fits the cache fills none either (stats go
through the same chunks), /hashes after an edit of meta/ is the same
bytes, and the root stats file counts the reads of the four new files.
Two readers of /hashes at once get the same bytes.
"""
import hashlib
import os
import sys
import tempfile
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

import pyreader  # noqa: E402  (tests/oracle, put on the path by harness)
from test_views import make_ggml_model, make_py_models, read_all, _fname, write_split  # noqa: E402

try:
    import xxhash
except ImportError:          # python3-xxhash (scripts/setup --tests)
    xxhash = None

FIELDS = ["count", "nan", "inf", "zeros", "min", "max", "absmax", "mean", "std"]
# mean and std: relative to the magnitudes involved (see above)
RTOL = 1e-9


# the fixed-width layout (gguf/fstats.h): the name in 6 columns, a space,
# the value right-aligned in 24, so every stats file has the same size
LINE = 6 + 1 + 24 + 1
STATS_SIZE = 9 * LINE


def parse_stats(text):
    lines = text.decode().split("\n")
    assert lines[-1] == "", "stats does not end in a newline: %r" % text
    assert len(text) == STATS_SIZE and all(len(ln) + 1 == LINE for ln in lines[:-1]), \
        "stats is not in its fixed-width layout: %r" % text
    assert all(ln[:6].rstrip() == f and ln[6] == " " and ln[7:].strip() and ln[7:].strip() == ln[7:].lstrip()
               and ln[-1] != " " for ln, f in zip(lines[:-1], FIELDS)), "stats lines %r" % lines
    pairs = [ln.split() for ln in lines[:-1]]
    assert [p[0] for p in pairs] == FIELDS and all(len(p) == 2 for p in pairs), \
        "stats lines %r" % lines
    return {k: v for k, v in pairs}


def want_stats(f32):
    x = np.frombuffer(f32, "<f4")
    fin = x[np.isfinite(x)]
    w = {"count": x.size, "nan": int(np.isnan(x).sum()), "inf": int(np.isinf(x).sum()),
         "zeros": int((x == 0).sum())}
    if fin.size:
        d = fin.astype(np.float64)
        w.update(min=fin.min(), max=fin.max(), absmax=np.abs(fin).max(), mean=d.mean(),
                 std=d.std(), scale=np.abs(d).mean())
    return w


def check_stats(h, lab, got, f32, w=None):
    """got (parse_stats) against numpy over f32, or against w: what
    want_stats gave for it before (the soak computes it once per tensor)."""
    if w is None:
        w = want_stats(f32)
    for k in ("count", "nan", "inf", "zeros"):
        h.check(int(got[k]) == w[k], "%s/stats: %s %s, numpy %d" % (lab, k, got[k], w[k]))
    if "min" not in w:
        h.check(all(got[k] == "nan" for k in ("min", "max", "absmax", "mean", "std")),
                "%s/stats: no finite value, but %r" % (lab, got))
        return
    for k in ("min", "max", "absmax"):
        v = np.float32(float(got[k]))
        h.check(v == w[k], "%s/stats: %s %s, numpy %r" % (lab, k, got[k], w[k]))
    mean, std = float(got["mean"]), float(got["std"])
    tol = RTOL * (w["scale"] + abs(w["mean"]) + w["std"])
    h.check(abs(mean - w["mean"]) <= tol, "%s/stats: mean %r, numpy %r" % (lab, mean, w["mean"]))
    h.check(abs(std - w["std"]) <= tol, "%s/stats: std %r, numpy %r" % (lab, std, w["std"]))


def hex_lines(raw):
    x = xxhash.xxh64(raw, seed=0).hexdigest() if xxhash else None
    return x, hashlib.sha256(raw).hexdigest()


def want_hashes(model, sizes):
    """llama-gguf-hash --xxh64 --sha256's output for model (named
    model.gguf), over its bytes.  sizes: {name: bytes} for tensors whose
    size pyreader does not know (an unknown type: gguffs' raw size)."""
    pr = pyreader.read(model)
    out = []
    mx = xxhash.xxh64(seed=0)
    ms = hashlib.sha256()
    with open(model, "rb") as f:
        for t in pr.tensors:
            f.seek(pr.data_offset + t.offset)
            raw = f.read(t.nbytes if t.nbytes is not None else sizes[t.name])
            name = t.name.split(b"\0")[0]          # a C string there
            x, s = hex_lines(raw)
            out.append(b"%-8s  %s  model.gguf:%s\n" % (b"xxh64", x.encode(), name))
            out.append(b"%-8s  %s  model.gguf:%s\n" % (b"sha256", s.encode(), name))
            mx.update(raw)
            ms.update(raw)
    out.append(b"%-8s  %s  model.gguf\n" % (b"xxh64", mx.hexdigest().encode()))
    out.append(b"%-8s  %s  model.gguf\n" % (b"sha256", ms.hexdigest().encode()))
    return b"".join(out)


def check_tensors(h, mnt, pr, label):
    """Every tensor's stats, xxh64 and sha256; {name: raw size} of all."""
    tdir = os.path.join(os.fsencode(mnt), b"tensors")
    sizes = {}
    n_stats = 0
    for t in pr.tensors:
        d = os.path.join(tdir, _fname(t.name))
        lab = "%s: tensors/%s" % (label, _fname(t.name).decode(errors="replace"))
        with h.case(lab):
            raw = read_all(os.path.join(d, b"raw"))
            sizes[t.name] = len(raw)
            listed = set(os.listdir(d))
            has_f32 = b"f32" in listed
            sp = os.path.join(d, b"stats")
            h.check((b"stats" in listed) == has_f32 and os.path.exists(sp) == has_f32,
                    "%s: f32 %s, stats %s listed, %s" % (
                        lab, "exists" if has_f32 else "does not", "" if b"stats" in listed else
                        "not", "exists" if os.path.exists(sp) else "ENOENT"))
            if has_f32:
                n_stats += 1
                st = os.stat(sp)           # a stat first: the size is exact, and fixed
                text = read_all(sp)
                h.check(st.st_size == len(text) == STATS_SIZE, "%s/stats: st_size %d, %d bytes"
                        % (lab, st.st_size, len(text)))
                check_stats(h, lab, parse_stats(text), read_all(os.path.join(d, b"f32")))
            else:
                try:
                    os.stat(sp)
                    h.fail("%s: stats of a tensor without f32 exists" % lab)
                except FileNotFoundError:
                    h.check(True, "")
            x, s = hex_lines(raw)
            for name, want in ((b"xxh64", x), (b"sha256", s)):
                if want is None:
                    continue
                p = os.path.join(d, name)
                got = read_all(p)
                h.check(got == want.encode() + b"\n", "%s/%s: %r, expected %r"
                        % (lab, name.decode(), got, want))
                h.check(os.stat(p).st_size == len(got), "%s/%s: st_size" % (lab, name.decode()))
    return sizes, n_stats


def check_model(h, model, label, url=None, merged=None, options=()):
    """url: mount that instead (the same file over HTTP); merged: the
    file /hashes describes (a split model's model.gguf)."""
    pr = harness.parsed_or_refused(h, merged or model, label, pyreader.read)
    if pr is None:
        return
    with h.case("%s: mount" % label), mount(url or model, options) as mnt:
        before = harness.read_stats(mnt)
        sizes, n_stats = check_tensors(h, mnt, pr, label)
        hp = os.path.join(mnt, "hashes")
        got = read_all(hp)
        h.check(os.stat(hp).st_size == len(got), "%s: hashes st_size %d, %d bytes"
                % (label, os.stat(hp).st_size, len(got)))
        if xxhash:
            want = want_hashes(merged or model, sizes)
            h.check(got == want, "%s: hashes differs from llama-gguf-hash's:\n%s\nexpected\n%s"
                    % (label, got[:600].decode(errors="replace"), want[:600].decode(errors="replace")))
        # kept: a second read of every stats file fills nothing
        mid = harness.read_stats(mnt)
        tdir = os.path.join(os.fsencode(mnt), b"tensors")
        for t in pr.tensors:
            sp = os.path.join(tdir, _fname(t.name), b"stats")
            if os.path.exists(sp):
                read_all(sp)
        after = harness.read_stats(mnt)
        h.check(after.get("misses") == mid.get("misses"),
                "%s: a second read of the stats files filled %d chunks"
                % (label, after.get("misses", 0) - mid.get("misses", 0)))
        for k, n in (("reads_tensor_stats", n_stats), ("reads_hashes", 1),
                     ("reads_xxh64", len(pr.tensors) if xxhash else 0),
                     ("reads_sha256", len(pr.tensors))):
            h.check(after.get(k, 0) - before.get(k, 0) >= n, "%s: stats counted %d %s, "
                    "expected at least %d" % (label, after.get(k, 0) - before.get(k, 0), k, n))
        print("  %s: %d tensors, %d stats files" % (label, len(pr.tensors), n_stats), flush=True)


def make_edge_model(tmp):
    """Tensors whose stats are edge cases: empty, all NaN, infinities,
    signed zeros, subnormals, the largest floats (f32, and f16 and bf16
    through the cache), a constant."""
    import gguf_write as gw
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add_tensor("empty", "f32", [0], b"")
    w.add_tensor("allnan", "f32", [5], np.full(5, np.nan, "<f4").tobytes())
    w.add_tensor("infs", "f32", [4], np.array([np.inf, -np.inf, np.nan, np.inf], "<f4").tobytes())
    w.add_tensor("odd", "f32", [8], np.array([-0.0, 0.0, 1e-45, -1e-45, 3.4028235e38,
                                              -3.4028235e38, np.nan, 1.5], "<f4").tobytes())
    w.add_tensor("const", "f32", [4096], np.full(4096, 0.1, "<f4").tobytes())
    w.add_tensor("h", "f16", [6], np.array([np.inf, -0.0, 65504, -65504, 6e-8, np.nan],
                                           "<f2").tobytes())
    w.add_tensor("b", "bf16", [4], bytes.fromhex("807f80ff0000c07f"))   # inf -inf 0 nan
    p = os.path.join(tmp, "edge.gguf")
    w.write(p)
    return p


def cache_shared(h, model, name):
    """stats and f32 fill the same chunks: on a fresh mount, stats fill
    each chunk once, an f32 read after them fills none, and a second mount
    the other way round: f32 (a page of each chunk), then stats, fill
    nothing more."""
    with h.case("stats and f32 share the cache"):
        with mount(model) as mnt:
            d = os.path.join(mnt, "tensors", name)
            cb = harness.read_stats(mnt).get("chunk_bytes") or (1 << 20)
            chunks = -(-os.path.getsize(os.path.join(d, "f32")) // cb)
            s0 = harness.read_stats(mnt)
            read_all(os.path.join(d, "stats"))
            s1 = harness.read_stats(mnt)
            read_all(os.path.join(d, "f32"))
            s2 = harness.read_stats(mnt)
            h.check(chunks > 1 and s1["misses"] - s0["misses"] == chunks,
                    "%s/stats: %d fills for %d chunks" % (name, s1["misses"] - s0["misses"], chunks))
            h.check(s2["misses"] == s1["misses"], "%s/f32 after stats: %d fills"
                    % (name, s2["misses"] - s1["misses"]))
        with mount(model) as mnt:
            # A chunk whose bytes all went to the kernel is the first the
            # cache reuses, even before it is full (cache/cache.h: the
            # kernel keeps them in its page cache), so how many chunks a
            # whole f32 read leaves held depends on the order its requests
            # ran in.  So f32 reads a page of each chunk (no readahead):
            # every chunk filled, none used up.
            d = os.path.join(mnt, "tensors", name)
            s0 = harness.read_stats(mnt)
            fd = os.open(os.path.join(d, "f32"), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for k in range(chunks):
                    os.pread(fd, 4096, k * cb)
            finally:
                os.close(fd)
            s1 = harness.read_stats(mnt)
            read_all(os.path.join(d, "stats"))
            s2 = harness.read_stats(mnt)
            h.check(s1["misses"] - s0["misses"] == chunks, "%s/f32, a page a chunk: %d fills "
                    "for %d chunks" % (name, s1["misses"] - s0["misses"], chunks))
            h.check(s2["misses"] == s1["misses"], "%s/stats after f32: %d fills"
                    % (name, s2["misses"] - s1["misses"]))


def across_edit(h, model):
    """/hashes and stats are kept across an edit of meta/: the same bytes,
    nothing filled again; two readers of /hashes at once agree."""
    import shutil
    with tempfile.TemporaryDirectory(prefix="gguffs-hashes-edit-") as tmp:
        p = os.path.join(tmp, "m.gguf")
        shutil.copyfile(model, p)
        with h.case("hashes across an edit"), mount(p) as mnt:
            got = [None, None]

            def reader(i):
                got[i] = read_all(os.path.join(mnt, "hashes"))
            ts = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            h.check(got[0] == got[1] and got[0], "two readers of hashes at once differ")
            sp = os.path.join(mnt, "tensors", "big.q4_0", "stats")
            st0 = read_all(sp)
            s0 = harness.read_stats(mnt)
            with open(os.path.join(mnt, "meta", "general.name"), "w") as f:
                f.write("edited")
            again = read_all(os.path.join(mnt, "hashes"))
            h.check(again == got[0], "hashes changed with an edit of meta/")
            h.check(read_all(sp) == st0, "stats changed with an edit of meta/")
            s1 = harness.read_stats(mnt)
            h.check(s1["misses"] == s0["misses"], "stats after an edit filled %d chunks"
                    % (s1["misses"] - s0["misses"]))


def many_tensors(h, tmp):
    """20,000 tensors, one with a NUL in its name (llama-gguf-hash prints
    it up to the NUL): /hashes' size, known before it is computed, is its
    length, and its bytes are the tool's."""
    import gguf_write as gw
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add_tensor(b"nul\x00name", "i8", [3], b"abc")
    for i in range(20000):
        w.add_tensor("blk.%d.w" % i, ("f32", "i8", "f16")[i % 3], [1], bytes((4, 1, 2)[i % 3]))
    p = os.path.join(tmp, "many.gguf")
    w.write(p)
    with h.case("many tensors: hashes"), mount(p) as mnt:
        hp = os.path.join(mnt, "hashes")
        size = os.stat(hp).st_size
        got = read_all(hp)
        h.check(size == len(got), "many: hashes st_size %d, %d bytes" % (size, len(got)))
        if xxhash:
            h.check(got == want_hashes(p, {}), "many: hashes differs from llama-gguf-hash's")
        h.check(got.startswith(b"xxh64     ") and b"  model.gguf:nul\n" in got,
                "many: the name with a NUL: %r" % got[:200])


def split_model(h, ggml, tmp):
    """A split model: /hashes describes the merged model.gguf."""
    paths = write_split(ggml, tmp)
    merged = os.path.join(tmp, "split-merged.gguf")
    with h.case("split model"), mount(paths[0]) as mnt:
        with open(merged, "wb") as f:
            f.write(read_all(os.path.join(mnt, "model.gguf")))
    check_model(h, paths[1], "split", merged=merged)


def stat_fetches_nothing(h, url, pr):
    """A remote model: a stat of xxh64, sha256 and hashes (ls -l) fetches
    nothing (their sizes are known without them), the first read of
    hashes fetches the tensors once, and the tensors' digests after it
    fetch nothing more (kept)."""
    with h.case("remote: what stat and hashes fetch"), mount(url) as mnt:
        tdir = os.path.join(os.fsencode(mnt), b"tensors")
        s0 = harness.read_stats(mnt)
        sizes = {}
        for t in pr.tensors:
            for f in (b"xxh64", b"sha256"):
                sizes[f] = os.stat(os.path.join(tdir, _fname(t.name), f)).st_size
        hsize = os.stat(os.path.join(mnt, "hashes")).st_size
        s1 = harness.read_stats(mnt)
        h.check(sizes == {b"xxh64": 17, b"sha256": 65}, "sizes of xxh64, sha256: %r" % sizes)
        h.check(s1["remote_bytes"] == s0["remote_bytes"], "stat of the digests fetched %d bytes"
                % (s1["remote_bytes"] - s0["remote_bytes"]))
        h.check(len(read_all(os.path.join(mnt, "hashes"))) == hsize, "hashes: not its st_size")
        s2 = harness.read_stats(mnt)
        data = sum(t.nbytes for t in pr.tensors)
        # (the mount fetched the file's start with its header: with a
        # small model, perhaps all of it)
        h.check(s2["remote_bytes"] >= data,
                "hashes fetched %d bytes, %d in all, the tensors are %d"
                % (s2["remote_bytes"] - s1["remote_bytes"], s2["remote_bytes"], data))
        for t in pr.tensors:
            for f in (b"xxh64", b"sha256"):
                read_all(os.path.join(tdir, _fname(t.name), f))
        s3 = harness.read_stats(mnt)
        h.check(s3["remote_bytes"] == s2["remote_bytes"], "the digests after hashes fetched "
                "%d bytes" % (s3["remote_bytes"] - s2["remote_bytes"]))


def remote_models(h, files):
    """The same files over HTTP (nginx): digests of the remote blocks."""
    import remote
    missing = remote.have_nginx()
    if missing:
        (h.fail if harness.IN_CI else h.note)("remote models not checked: %s" % missing)
        return
    if not h.check(files, "remote models: no files to serve"):
        return
    root = os.path.dirname(files[0])
    with remote.Nginx(root) as ng:
        stat_fetches_nothing(h, ng.url(os.path.basename(files[0])), pyreader.read(files[0]))
        for f in files:
            label = "remote " + os.path.basename(f)
            print("-- %s" % label, flush=True)
            check_model(h, f, label, url=ng.url(os.path.basename(f)))


def main():
    h = harness.start("hashes")
    ggml = harness.require_oracle()
    if xxhash is None:
        if harness.IN_CI:
            harness.skip_or_fail("python3-xxhash is not installed")
        h.note("python3-xxhash missing: xxh64 and hashes not compared")
    for f in harness.corpus_files() + harness.corpus_files("nonstandard"):
        print("-- %s" % os.path.basename(f), flush=True)
        check_model(h, f, os.path.basename(f))
    with tempfile.TemporaryDirectory(prefix="gguffs-hashes-") as tmp:
        with h.case("making files"):
            p = os.path.join(tmp, "ggml-types.gguf")
            make_ggml_model(ggml, p)
            files = [p] + make_py_models(tmp) + [make_edge_model(tmp)]
        for f in files:
            print("-- %s" % os.path.basename(f), flush=True)
            check_model(h, f, os.path.basename(f))
        # -o threads: the workers fill the chunks ahead of stats
        check_model(h, files[0], "ggml-types, 2 workers", options=("-o", "threads=2"))
        cache_shared(h, files[0], "big.q4_0")
        across_edit(h, files[0])
        split_model(h, ggml, tmp)
        many_tensors(h, tmp)
        remote_models(h, [f for f in files if "v1" not in os.path.basename(f)])
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

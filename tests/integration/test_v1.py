#!/usr/bin/python3
# GGUF version 1 models: MOUNTPOINT/model.gguf is served as version 3 (which ggml loads) with the same keys, tensor infos and tensor bytes; MODEL.gguf keeps version 1, edits too.
"""
ggml no longer reads GGUF version 1 (32-bit counts and string lengths), so a
mount serves model.gguf of a v1 model as version 3 in the same byte order:
the same key/values (counts and lengths widened), the same tensor infos and
tensor bytes at offsets laid out again (contiguous, aligned).  Checked on
the real v1 file of the corpus (a vocabulary, no tensors) and on generated
v1 files with tensors (little- and big-endian, a general.alignment of 64,
tensors stored out of order with gaps, nested arrays), and on split models
of v1 shards (little- and big-endian):

  - model.gguf is version 3, in the file's byte order; the pure-Python
    reader finds the original's key/values, tensor infos and tensor bytes;
    ggml's reader loads it (little-endian files without nested arrays) with
    the same values and tensor bytes;
  - its size is what stat says; reads at random offsets and lengths (fresh
    and reused descriptors) equal the whole file's bytes;
  - info and gguffs --dump say that model.gguf is served as version 3;
  - MODEL.gguf is unchanged byte for byte by the mount and the reads;
  - cp of model.gguf mounts again with the same meta/ (names and texts) and
    tensors/ (raw bytes), and its model.gguf is that copy byte for byte;
  - an edit through meta/ keeps MODEL.gguf version 1 (the new value in it),
    and model.gguf, version 3, shows the new value.
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

import gguf_write as gw  # noqa: E402  (path set up by harness)
import pyreader  # noqa: E402

SERVED = "served as GGUF version 3"


def sha(b):
    return hashlib.sha256(b).hexdigest()


def kv_list(f):
    return [(kv.key, kv.type, harness.norm(kv.value)) for kv in f.kvs]


def tensor_data(f, data):
    """{name: bytes} of every tensor whose size the reader knows."""
    out = {}
    for t in f.tensors:
        if t.nbytes is not None:
            a = f.data_offset + t.offset
            out[t.name] = data[a:a + t.nbytes]
    return out


def plain_kvs(w):
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "v1 model")
    for t, v in (("u8", 200), ("i8", -5), ("u16", 60000), ("i16", -300), ("u32", 4000000000),
                 ("i32", -2000000000), ("u64", 1 << 60), ("i64", -(1 << 60)), ("f32", 1.5),
                 ("f64", -2.25), ("bool", 1)):
        w.add("test.scalar.%s" % t, t, v)
    w.add("test.empty", "string", "")
    w.add("tokenizer.ggml.tokens", "array[string]", ["<s>", "</s>", "héllo", "", "b" * 300])
    w.add("tokenizer.ggml.scores", "array[f32]", [0.0, -1.0, 2.5, 3.0, 4.0])
    w.add("test.arr.u64", "array[u64]", [1, 1 << 40, 3])
    w.add("test.arr.bool", "array[bool]", [1, 0, 1])
    w.add("test.arr.empty", "array[i32]", [])


def make_v1(path, big_endian, nested=False, alignment=64, gaps=True):
    w = gw.GGUFWriter(version=1, big_endian=big_endian, alignment=alignment)
    plain_kvs(w)
    if nested:
        w.add("test.nested", "array[array[i32]]", [[1, 2], [], [3]])
        w.add("test.nested.str", "array[array[string]]", [["a", "bc"], ["d"]])
    rng = random.Random(7 + big_endian)
    a = alignment or 32
    # out of order and with gaps (explicit offsets) when gaps: model.gguf
    # lays them out again
    specs = [("tok_embd.weight", "f32", [16, 8]), ("blk.0.attn_q.weight", "f16", [32, 4]),
             ("blk.0.ffn.weight", "q8_0", [64, 2]), ("output_norm.weight", "f32", [5])]
    offs = [10 * a, 0, 5 * a, 8 * a] if gaps else [None] * 4
    for (name, t, ne), off in zip(specs, offs):
        n = gw.tensor_nbytes(gw.type_id_of(t), ne)
        w.add_tensor(name, t, ne, data=rng.randbytes(n), offset=off)
    w.write(path)
    return path


def make_split_v1(d, n=3, big_endian=False):
    paths = []
    rng = random.Random(3)
    for i in range(n):
        w = gw.GGUFWriter(version=1, big_endian=big_endian)
        if i == 0:
            plain_kvs(w)
        w.add("split.no", "u16", i)
        w.add("split.count", "u16", n)
        if i == 0:
            w.add("split.tensors.count", "i32", 2 * n)
        for k in range(2):
            w.add_tensor("blk.%d.w%d" % (i, k), "f32", [24, 3 + k], data=rng.randbytes(24 * (3 + k) * 4))
        p = os.path.join(d, "sm%s-%05d-of-%05d.gguf" % ("-be" if big_endian else "", i + 1, n))
        w.write(p)
        paths.append(p)
    return paths


def tree(mnt):
    """{relative path: bytes} of meta/ and tensors/*/raw, shape, type."""
    out = {}
    meta = os.path.join(mnt, "meta")
    for k in sorted(os.listdir(meta)):
        out["meta/" + k] = harness.file_bytes(os.path.join(meta, k))
    td = os.path.join(mnt, "tensors")
    for t in sorted(os.listdir(td)):
        for f in ("raw", "shape", "type"):
            out["tensors/%s/%s" % (t, f)] = harness.file_bytes(os.path.join(td, t, f))
    return out


def infos_of(files):
    return [(t.name, t.ne, t.type) for f in files for t in f.tensors]


def check_served(h, lab, got, orig, big_endian, expect_kvs, expect_tensors, expect_infos=None):
    """model.gguf's bytes got against the v1 original (orig, a pyreader
    file; its key/values, tensor infos and {name: bytes}); returns its
    pyreader view."""
    f = pyreader.read_bytes(got)
    h.check(f.version == 3, "%s: model.gguf is version %d, not 3" % (lab, f.version))
    h.check(f.big_endian == big_endian, "%s: model.gguf's byte order changed" % lab)
    h.check(kv_list(f) == expect_kvs, "%s: model.gguf's key/values differ from the original's" % lab)
    h.check(f.alignment == orig.alignment, "%s: alignment %d, original %d" % (lab, f.alignment, orig.alignment))
    infos = infos_of([f])
    want = expect_infos if expect_infos is not None else infos_of([orig])
    h.check(infos == want, "%s: tensor infos differ: %r, want %r" % (lab, infos[:3], want[:3]))
    for t in f.tensors:
        h.check(t.offset % f.alignment == 0, "%s: tensor %r at offset %d, not aligned" % (lab, t.name, t.offset))
    data = tensor_data(f, got)
    h.check(data == expect_tensors, "%s: tensor bytes differ (%d of %d tensors equal)" % (
        lab, sum(1 for k, v in data.items() if expect_tensors.get(k) == v), len(expect_tensors)))
    if f.tensors:
        end = max(f.data_offset + t.offset + t.nbytes for t in f.tensors)
        h.check(len(got) >= end and len(got) - end < f.alignment,
                "%s: model.gguf has %d bytes, its last tensor ends at %d" % (lab, len(got), end))
    else:
        h.check(len(got) == f.header_end, "%s: model.gguf without tensors: %d bytes, header %d"
                % (lab, len(got), f.header_end))
    return f


def check_ggml(h, ggml, lab, path, expect_kvs, expect_tensors):
    m = ggml.read_gguf(path)
    if not h.check(m is not None, "%s: ggml refuses model.gguf: %s" % (lab, ggml.last_log())):
        return
    h.check(m.version == 3, "%s: ggml reads version %d" % (lab, m.version))
    got = [(k, t, harness.norm(v)) for k, t, v in m.kvs]
    want = [(k, t, v) for k, t, v in expect_kvs]
    h.check(len(got) == len(want), "%s: ggml reads %d key/values, want %d" % (lab, len(got), len(want)))
    for g, w in zip(got, want):
        if not h.check(g[0] == w[0] and g[1] == w[1] and g[2] == w[2],
                       "%s: ggml reads %r as %s %r, want %s %r" % (lab, w[0], g[1], str(g[2])[:60],
                                                                   w[1], str(w[2])[:60])):
            break
    hashes = harness.tensor_hashes(m, path)
    h.check(hashes == {k: sha(v) for k, v in expect_tensors.items()},
            "%s: ggml's tensor bytes differ" % lab)


def random_reads(h, lab, path, whole, rng, n=300):
    bad = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        for i in range(n):
            a = rng.randrange(0, len(whole) + 10)
            ln = rng.choice([1, 7, 31, 100, 4096, 5000, 65536, 200000, len(whole)])
            if i % 10 == 0:
                fresh = os.open(path, os.O_RDONLY)
                try:
                    got = os.pread(fresh, ln, a)
                finally:
                    os.close(fresh)
            else:
                got = os.pread(fd, ln, a)
            if got != whole[a:a + ln]:
                bad += 1
                if bad <= 3:
                    h.fail("%s: pread(%d, %d) of model.gguf differs from the whole file's bytes" % (lab, ln, a))
    finally:
        os.close(fd)
    h.check(bad == 0, "%s: %d of %d random reads differ" % (lab, bad, n))


def check_model(h, ggml, tmp, lab, path, use_ggml, shards=None):
    """Everything above for the v1 model at path (shards: all its files)."""
    shards = shards or [path]
    before = {p: sha(harness.file_bytes(p)) for p in shards}
    origs = [pyreader.read(p) for p in shards]
    orig = origs[0]
    h.check(orig.version == 1, "%s: the test file is version %d" % (lab, orig.version))
    big = orig.big_endian
    expect_kvs = [kv for kv in kv_list(orig) if not kv[0].startswith(b"split.")]
    expect_tensors = {}
    for p, f in zip(shards, origs):
        expect_tensors.update(tensor_data(f, harness.file_bytes(p)))
    export = os.path.join(tmp, "%s-export.gguf" % lab.replace(" ", "_"))
    rng = random.Random(lab)
    with mount(path) as mnt:
        mg = os.path.join(mnt, "model.gguf")
        whole = harness.file_bytes(mg)
        h.check(os.stat(mg).st_size == len(whole), "%s: stat says %d bytes, read %d"
                % (lab, os.stat(mg).st_size, len(whole)))
        check_served(h, lab, whole, orig, big, expect_kvs, expect_tensors, infos_of(origs))
        random_reads(h, lab, mg, whole, rng)
        h.check(harness.file_bytes(mg) == whole, "%s: a second whole read differs" % lab)
        info = harness.file_bytes(os.path.join(mnt, "info")).decode()
        h.check(SERVED in info or "model.gguf is served as version 3" in info,
                "%s: info does not say model.gguf is served as version 3" % lab)
        shutil.copyfile(mg, export)
        # a split mount's meta/ shows the first shard's split.* keys
        old_tree = {k: v for k, v in tree(mnt).items() if not k.startswith("meta/split.")}
    if use_ggml:
        check_ggml(h, ggml, lab, export, expect_kvs, expect_tensors)
    h.check({p: sha(harness.file_bytes(p)) for p in shards} == before,
            "%s: MODEL.gguf changed by the mount and its reads" % lab)
    with mount(export) as mnt:
        h.check(tree(mnt) == old_tree, "%s: the copy of model.gguf mounts with other meta/ or tensors/" % lab)
        h.check(harness.file_bytes(os.path.join(mnt, "model.gguf")) == harness.file_bytes(export),
                "%s: the copy's model.gguf is not the copy byte for byte" % lab)
        info = harness.file_bytes(os.path.join(mnt, "info")).decode()
        h.check(SERVED not in info, "%s: the version 3 copy's info says it is upgraded" % lab)
    return expect_kvs, expect_tensors


def check_edit(h, ggml, tmp, lab, src, use_ggml):
    """An edit of a v1 model keeps it v1; model.gguf stays v3 with the edit."""
    path = os.path.join(tmp, "edit-%s.gguf" % lab.replace(" ", "_"))
    shutil.copyfile(src, path)
    orig = pyreader.read(path)
    new_name = "edited v1 model, a longer name than before"
    with mount(path) as mnt:
        with open(os.path.join(mnt, "meta", "general.name"), "w") as f:
            f.write(new_name)
        with open(os.path.join(mnt, "meta", "test.added"), "w") as f:
            f.write("x" * 100)
        after = pyreader.read(path)
        h.check(after.version == 1, "%s: the edit made MODEL.gguf version %d" % (lab, after.version))
        h.check(after.big_endian == orig.big_endian, "%s: the edit changed the byte order" % lab)
        kv = {k: v for k, _, v in kv_list(after)}
        h.check(kv.get(b"general.name") == new_name and kv.get(b"test.added") == "x" * 100,
                "%s: MODEL.gguf lacks the edit" % lab)
        whole = harness.file_bytes(os.path.join(mnt, "model.gguf"))
        exp_kvs = kv_list(after)
        exp_t = tensor_data(orig, harness.file_bytes(src))
        check_served(h, lab + " after edit", whole, after, orig.big_endian, exp_kvs, exp_t)
        random_reads(h, lab + " after edit", os.path.join(mnt, "model.gguf"), whole, random.Random(5), 100)
        info = harness.file_bytes(os.path.join(mnt, "info")).decode()
        h.check(SERVED in info, "%s: info after the edit does not say model.gguf is served as version 3" % lab)
    if use_ggml:
        p = os.path.join(tmp, "edit-export.gguf")
        with open(p, "wb") as f:
            f.write(whole)
        check_ggml(h, ggml, lab + " after edit", p, exp_kvs, exp_t)


def check_dump(h, lab, path):
    r = subprocess.run([harness.gguffs_bin(), "--dump", path], capture_output=True, text=True, timeout=60)
    h.check(r.returncode == 0 and SERVED in r.stdout and "GGUF version:  1" in r.stdout,
            "%s: gguffs --dump does not say model.gguf is served as version 3: rc %d %r"
            % (lab, r.returncode, r.stdout[:200] + r.stderr[:200]))


def main():
    h = harness.start("v1")
    ggml = harness.require_oracle()
    tmp = tempfile.mkdtemp(prefix="gguffs-v1-")
    try:
        real = harness.corpus_file("llamacpp-vocab-llama-v1.gguf")
        with h.case("real v1 vocabulary"):
            check_model(h, ggml, tmp, "real v1", real, True)
            check_dump(h, "real v1", real)
        with h.case("real v1 vocabulary: an edit"):
            check_edit(h, ggml, tmp, "real v1", real, True)
        for big in (False, True):
            for nested in (False, True):
                lab = "generated v1 %s%s" % ("BE" if big else "LE", " nested" if nested else "")
                p = make_v1(os.path.join(tmp, lab.replace(" ", "-") + ".gguf"), big, nested)
                use_ggml = not big and not nested
                with h.case(lab):
                    check_model(h, ggml, tmp, lab, p, use_ggml)
                with h.case(lab + ": an edit"):
                    check_edit(h, ggml, tmp, lab, p, use_ggml)
        with h.case("generated v1 LE, default alignment, contiguous"):
            p = make_v1(os.path.join(tmp, "plain.gguf"), False, alignment=None, gaps=False)
            check_model(h, ggml, tmp, "v1 plain", p, True)
            check_dump(h, "v1 plain", p)
        with h.case("split model of v1 shards"):
            d = os.path.join(tmp, "split")
            os.mkdir(d)
            paths = make_split_v1(d)
            check_model(h, ggml, tmp, "v1 split", paths[1], True, shards=paths)
        with h.case("split model of big-endian v1 shards"):
            paths = make_split_v1(d, big_endian=True)
            check_model(h, ggml, tmp, "v1 split BE", paths[2], False, shards=paths)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

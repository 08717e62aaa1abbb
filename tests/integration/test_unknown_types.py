#!/usr/bin/python3
# Files with tensors of type ids gguffs does not know (newer, or removed from ggml) mount: raw/type/shape, no f32, info says so, edits keep every byte.
"""
The contract ("Mounting"): a tensor whose type id gguffs does not know does
not make the file unmountable: its bytes run from its offset to the next
tensor's offset (or the end of the data), checked not to overlap; it has
raw, type (type_NN), shape and raw's digests (xxh64, sha256) but no f32
(nor stats), and info says so.

Files are written with tests/oracle/gguf_write.py (any type id, given bytes),
in versions 1-3 and both byte orders, and mounted for real.  Checked: every
tensor's raw bytes (the unknown ones and their neighbours; an unknown
tensor's range includes the padding after its data), type, shape; no f32
for the unknown ones (ENOENT, not listed) while the known neighbours' f32
is bit-identical to ggml (tests/oracle/ggml.py); info lists type_NN and the
note; model.gguf is the file byte for byte (a v1 file's is version 3 with
the same tensor bytes); metadata edits (in place and
rewriting) keep every tensor byte; a split model with an unknown tensor
exports a model.gguf that mounts with the same bytes; ambiguous or
out-of-bounds layouts are refused with one line.
"""
import errno
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check_refused, mount  # noqa: E402

ALIGN = 32


def known_types():
    import gguf_write as gw
    return gw.GGML_TYPES


def expected_layout(data, tensors, data_off):
    """{name: expected raw bytes}: known types by their size, unknown ones
    from their offset to the next tensor's offset or the end of the file."""
    kt = known_types()
    offs = sorted(set(t["offset"] for t in tensors))
    out = {}
    for t in tensors:
        start = data_off + t["offset"]
        if t["type"] in kt:
            name, bs, ts = kt[t["type"]]
            n = 1
            for d in t["ne"]:
                n *= d
            end = start + n // bs * ts
        else:
            later = [o for o in offs if o > t["offset"]]
            end = data_off + later[0] if later else len(data)
        out[t["name"].decode()] = data[start:end]
    return out


def type_text(tid):
    kt = known_types()
    return (kt[tid][0] if tid in kt else "type_%d" % tid) + "\n"


def shape_text(ne):
    return " ".join(str(d) for d in reversed(ne)) + "\n"


def make_model(path, version, big_endian, ggml, rng):
    """A model with unknown tensors in the middle, after a known one, a
    removed id, and one last in the file; known neighbours of several
    types.  Returns the writer's tensor list."""
    import gguf_write as gw
    w = gw.GGUFWriter(version=version, big_endian=big_endian)
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "unknown types")
    w.add("llama.context_length", "u32", 4096)
    e = ">" if big_endian else "<"
    f16 = rng.standard_normal(33).astype(e + "f2").tobytes()
    f32 = rng.standard_normal(8).astype(e + "f4").tobytes()
    # ggml quantizes into little-endian blocks; a big-endian file gets them
    # swapped as gguf_convert_endian.py swaps them (q4_0 has an f32 view
    # there too)
    q4 = ggml.quantize("q4_0", rng.standard_normal(64 * 2).astype(np.float32), 64)
    w.add_tensor("tok.weight", "q4_0", [64, 2],
                 data=gw.byteswap_tensor("q4_0", q4) if big_endian else q4)
    w.add_tensor("new.weight", 57, [25, 4], data=rng.bytes(40))       # padded to 64
    w.add_tensor("out_norm", "f16", [33], data=f16)
    w.add_tensor("gone.weight", 4, [32, 1, 2], data=rng.bytes(20))    # removed id
    w.add_tensor("norm", "f32", [8], data=f32)
    w.add_tensor("odd.weight", 43, [96], data=rng.bytes(96))          # 96: no padding
    w.add_tensor("last.weight", 4000000000, [7], data=rng.bytes(13))  # to the end
    w.write(path)
    return w


def data_offset(path):
    import pyreader
    return pyreader.read(path).data_offset


def check_mounted(h, label, mnt, path, w, ggml, big_endian):
    """Everything a mount shows for model path written by w."""
    data = open(path, "rb").read()
    want = expected_layout(data, w.tensors, data_offset(path))
    tdir = os.path.join(mnt, "tensors")
    h.check(sorted(os.listdir(tdir)) == sorted(want), "%s: tensors %r" % (label, os.listdir(tdir)))
    kt = known_types()
    for t in w.tensors:
        name = t["name"].decode()
        d = os.path.join(tdir, name)
        known = t["type"] in kt
        raw = open(os.path.join(d, "raw"), "rb").read()
        h.check(raw == want[name], "%s: %s/raw: %d bytes, want %d%s" % (
            label, name, len(raw), len(want[name]), "" if len(raw) != len(want[name]) else " (differ)"))
        h.check(os.stat(os.path.join(d, "raw")).st_size == len(want[name]), "%s: %s/raw size" % (label, name))
        if raw and len(raw) > 9:
            # a read from the middle
            with open(os.path.join(d, "raw"), "rb") as fh:
                fh.seek(5)
                h.check(fh.read(4) == want[name][5:9], "%s: %s/raw read at 5" % (label, name))
        got_type = open(os.path.join(d, "type")).read()
        h.check(got_type == type_text(t["type"]), "%s: %s/type %r, want %r" % (
            label, name, got_type, type_text(t["type"])))
        got_shape = open(os.path.join(d, "shape")).read()
        h.check(got_shape == shape_text(t["ne"]), "%s: %s/shape %r" % (label, name, got_shape))
        files = sorted(os.listdir(d))
        if not known:
            h.check(files == ["raw", "sha256", "shape", "type", "xxh64"],
                    "%s: %s lists %r" % (label, name, files))
            try:
                open(os.path.join(d, "f32"), "rb").close()
                h.fail("%s: %s/f32 opens" % (label, name))
            except OSError as ex:
                h.check(ex.errno == errno.ENOENT, "%s: %s/f32: errno %d" % (label, name, ex.errno))
            h.check(not os.path.exists(os.path.join(d, "f32")), "%s: %s/f32 exists" % (label, name))
            continue
        tname = kt[t["type"]][0]
        import gguf_write as gw
        if big_endian and tname not in gw.PLAIN_SIZES and tname not in gw.BE_BLOCKS:
            h.check("f32" not in files, "%s: %s has f32 in a big-endian file" % (label, name))
            continue
        h.check("f32" in files, "%s: %s lacks f32" % (label, name))
        le = gw.byteswap_tensor(tname, raw) if big_endian else raw
        exp = ggml.dequant(tname, le).view(np.uint32)
        got = np.fromfile(os.path.join(d, "f32"), np.uint32)
        h.check(np.array_equal(got, exp), "%s: %s/f32 differs from ggml" % (label, name))

    info = open(os.path.join(mnt, "info")).read()
    for t in w.tensors:
        if t["type"] in kt:
            continue
        name = t["name"].decode()
        line = [ln for ln in info.split("\n") if (" %s " % name) in ln and "type_" in ln]
        h.check(len(line) == 1 and ("type_%d" % t["type"]) in line[0],
                "%s: info lists %s as type_%d: %r" % (label, name, t["type"], line))
        why = "removed from ggml" if t["type"] < 43 else "unknown to gguffs"
        note = "tensor '%s': type id %d %s (raw bytes only, size %d taken from " % (
            name, t["type"], why, len(want[name]))
        h.check(note in info, "%s: info lacks the note %r" % (label, note))
    served = open(os.path.join(mnt, "model.gguf"), "rb").read()
    import pyreader
    orig = pyreader.read_bytes(data)
    if orig.version != 1:
        h.check(served == data, "%s: model.gguf is not the file" % label)
        return
    # version 1 is served as version 3: the same tensors, laid out again
    f = pyreader.read_bytes(served)
    h.check(f.version == 3 and f.big_endian == orig.big_endian,
            "%s: model.gguf of a v1 file is v%d %s" % (label, f.version, "BE" if f.big_endian else "LE"))
    h.check([(t.name, t.ne, t.type) for t in f.tensors] == [(t.name, t.ne, t.type) for t in orig.tensors],
            "%s: model.gguf's tensor infos differ" % label)
    for t in f.tensors:
        name = t.name.decode()
        a = f.data_offset + t.offset
        h.check(served[a:a + len(want[name])] == want[name], "%s: model.gguf: %s's bytes differ" % (label, name))


def check_edits(h, label, path, w, ggml, big_endian):
    """Metadata edits through the mount keep every tensor byte and infos."""
    import pyreader
    before = pyreader.read(path)
    data0 = open(path, "rb").read()
    tail0 = data0[before.data_offset:]
    infos0 = [(t.name, t.ne, t.type, t.offset) for t in before.tensors]
    with mount(path) as mnt:
        meta = os.path.join(mnt, "meta")
        # same length: in place; then much longer: the file is rewritten
        for value in ("UNKNOWN TYPES", "a much longer name " * 20):
            with open(os.path.join(meta, "general.name"), "w") as fh:
                fh.write(value + "\n")
            got = open(os.path.join(meta, "general.name")).read()
            h.check(got == value + "\n", "%s: general.name reads %r" % (label, got[:40]))
            after = pyreader.read(path)
            data = open(path, "rb").read()
            kv = {k.key: k.value for k in after.kvs}
            h.check(kv.get(b"general.name") == value.encode(), "%s: the file has general.name %r"
                    % (label, kv.get(b"general.name", b"")[:40]))
            h.check(kv.get(b"llama.context_length") == 4096, "%s: other keys kept" % label)
            h.check([(t.name, t.ne, t.type, t.offset) for t in after.tensors] == infos0,
                    "%s: tensor infos changed by the edit" % label)
            h.check(data[after.data_offset:] == tail0, "%s: tensor data changed by the edit" % label)
            check_mounted(h, "%s, after edit %r" % (label, value[:12]), mnt, path, w, ggml, big_endian)


def split_case(h, tmp, ggml, rng):
    """A split model whose shards end with unknown tensors: model.gguf
    (generated) mounts with the same bytes in every tensor."""
    import gguf_write as gw
    n = 2
    paths = []
    raws = {}
    for i in range(n):
        w = gw.GGUFWriter()
        if i == 0:
            w.add("general.architecture", "string", "llama")
        w.add("split.no", "u16", i)
        w.add("split.count", "u16", n)
        if i == 0:
            w.add("split.tensors.count", "i32", 4)
        f32 = rng.standard_normal(8).astype("<f4").tobytes()
        w.add_tensor("blk.%d.norm" % i, "f32", [8], data=f32)
        w.add_tensor("blk.%d.new" % i, 60 + i, [5, 3], data=rng.bytes(15 + 40 * i))
        p = os.path.join(tmp, "split-%05d-of-%05d.gguf" % (i + 1, n))
        w.write(p)
        paths.append(p)
        data = open(p, "rb").read()
        raws.update(expected_layout(data, w.tensors, data_offset(p)))
    export = os.path.join(tmp, "export.gguf")
    with h.case("split model"), mount(paths[0]) as mnt:
        for name, want in raws.items():
            got = open(os.path.join(mnt, "tensors", name, "raw"), "rb").read()
            h.check(got == want, "split: %s/raw (%d bytes, want %d)" % (name, len(got), len(want)))
            h.check(not os.path.exists(os.path.join(mnt, "tensors", name, "f32")) or "new" not in name,
                    "split: %s/f32 exists" % name)
        shutil.copyfile(os.path.join(mnt, "model.gguf"), export)
    with h.case("split model.gguf mounts"), mount(export) as mnt:
        for name, want in raws.items():
            got = open(os.path.join(mnt, "tensors", name, "raw"), "rb").read()
            # the last tensor of the export ends with the file; earlier ones
            # run to the next (aligned) tensor: the shard's bytes, then zeros
            h.check(got[:len(want)] == want and not got[len(want):].strip(b"\0"),
                    "export: %s/raw (%d bytes, want %d)" % (name, len(got), len(want)))
            h.check(len(got) - len(want) < ALIGN, "export: %s/raw grew by %d" % (name, len(got) - len(want)))
        info = open(os.path.join(mnt, "info")).read()
        h.check("type_60" in info and "type_61" in info, "export: info lists type_60/type_61")


def refused_cases(h, tmp):
    """Ambiguous or out-of-bounds layouts: one line, nothing mounted."""
    import gguf_write as gw
    cases = []
    w = gw.GGUFWriter()
    w.add_tensor("a", "f32", [4], data=bytes(16))
    w.add_tensor("u1", 70, [4], data=bytes(16), offset=32)
    w.add_tensor("u2", 71, [4], data=bytes(16), offset=32)
    cases.append(("same-offset.gguf", w, "both start at offset 32: their sizes are ambiguous"))
    w = gw.GGUFWriter()
    w.add_tensor("a", "f32", [16], data=bytes(64))
    w.add_tensor("u", 70, [4], data=bytes(16), offset=32)
    cases.append(("overlap.gguf", w, "overlaps tensor 'a'"))
    w = gw.GGUFWriter()
    w.add_tensor("a", "f32", [8], data=bytes(32))
    w.add_tensor("u", 70, [4], data=b"", offset=32)        # at the end of the data
    cases.append(("at-end.gguf", w, "leaves no bytes for its 4 elements"))
    w = gw.GGUFWriter()
    w.add_tensor("a", "f32", [8], data=bytes(32))
    w.add_tensor("u", 70, [4], data=bytes(32), offset=64)   # cut off below
    cases.append(("past-end.gguf", w, "leaves no bytes"))
    for name, w, want in cases:
        p = os.path.join(tmp, name)
        b = w.to_bytes()
        if name == "past-end.gguf":
            b = b[:-64]          # the data ends before u's offset
        with open(p, "wb") as fh:
            fh.write(b)
        with h.case("refuse %s" % name):
            line = check_refused(h, p, name)
            h.check(want in line, "%s: %r lacks %r" % (name, line, want))


def cli_case(h, tmp):
    """gguf_write.py's command line takes type ids and type_NN names."""
    p = os.path.join(tmp, "cli.gguf")
    script = os.path.join(harness.SRC, "tests", "oracle", "gguf_write.py")
    r = subprocess.run([sys.executable, script, p, "--kv", "general.name", "string", "cli",
                        "--tensor", "a", "f32", "4", "--tensor", "b", "type_57", "5,2",
                        "--tensor", "c", "99", "3"], capture_output=True, text=True)
    h.check(r.returncode == 0, "gguf_write.py CLI: %s" % r.stderr)
    with h.case("CLI file"), mount(p) as mnt:
        t = os.path.join(mnt, "tensors")
        h.check(open(os.path.join(t, "b", "type")).read() == "type_57\n", "cli: b/type")
        h.check(open(os.path.join(t, "c", "type")).read() == "type_99\n", "cli: c/type")
        h.check(open(os.path.join(t, "b", "shape")).read() == "2 5\n", "cli: b/shape")
        b = open(os.path.join(t, "b", "raw"), "rb").read()
        h.check(b == bytes(range(10)) + bytes(22), "cli: b/raw %r" % b[:16])
        c = open(os.path.join(t, "c", "raw"), "rb").read()
        h.check(c == bytes(range(3)) + bytes(29), "cli: c/raw %r" % c[:16])
        a = np.fromfile(os.path.join(t, "a", "f32"), np.float32)
        h.check(list(a) == [0, 1, 2, 3], "cli: a/f32 %r" % a)


def main():
    h = harness.start("unknown-types")
    ggml = harness.require_oracle()

    tmp = tempfile.mkdtemp(prefix="gguffs-unknown-")
    rng = np.random.default_rng(20261123)
    try:
        for version in (1, 2, 3):
            for be in (False, True):
                label = "v%d%s" % (version, " big-endian" if be else "")
                path = os.path.join(tmp, "m-v%d%s.gguf" % (version, "-be" if be else ""))
                w = make_model(path, version, be, ggml, rng)
                with h.case(label), mount(path) as mnt:
                    check_mounted(h, label, mnt, path, w, ggml, be)
                with h.case("%s: edits" % label):
                    check_edits(h, label, path, w, ggml, be)
        with h.case("a file whose only tensor has an unknown type"):
            import gguf_write as gw
            for tid in (4, 99):
                p = os.path.join(tmp, "only-%d.gguf" % tid)
                w = gw.GGUFWriter()
                w.add_tensor("t", tid, [32], bytes(range(64)))
                w.write(p)
                with mount(p) as mnt:
                    check_mounted(h, "only %d" % tid, mnt, p, w, ggml, False)
        split_case(h, tmp, ggml, rng)
        refused_cases(h, tmp)
        cli_case(h, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

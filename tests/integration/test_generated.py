#!/usr/bin/python3
# Mounts GGUF files made by ggml's writer and by tests/oracle/gguf_write.py (every value and tensor type, v1/v2, big-endian, alignments, nested arrays, duplicate keys, odd names) and checks them; broken files must be refused.
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check_refused  # noqa: E402

ALL_SCALARS = ["u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f32", "f64", "bool", "string"]


def f32_from_bits(b):
    return np.frombuffer(struct.pack("<I", b), np.float32)[0]


def every_value_kvs():
    """One key per scalar edge value and per array type, for ggml's writer."""
    F32 = [0.0, -0.0, 1.0, -1.5, 1e-06, 10000.0, 0.1, 1e16, 3.4028235e38, 1.1754944e-38,
           1e-45, float("inf"), -float("inf"), float("nan"), 16777217.0, 123456789.0]
    F64 = [0.0, -0.0, 0.1, 1e-06, 10000.0, 1e16, 1e300, 5e-324, 1.7976931348623157e308,
           float("inf"), float("nan"), 2.0 ** 53 + 1, 1 / 3]
    kvs = [("general.architecture", "string", "llama")]
    ints = {"u8": (0, 255), "i8": (-128, 127), "u16": (0, 65535), "i16": (-32768, 32767),
            "u32": (0, 2 ** 32 - 1), "i32": (-2 ** 31, 2 ** 31 - 1),
            "u64": (0, 2 ** 64 - 1), "i64": (-2 ** 63, 2 ** 63 - 1)}
    for t, (lo, hi) in ints.items():
        kvs += [("v.%s.min" % t, t, lo), ("v.%s.max" % t, t, hi), ("v.%s.one" % t, t, 1)]
        kvs.append(("a.%s" % t, "array[%s]" % t, [lo, hi, 0, 1, 42]))
    for i, x in enumerate(F32):
        kvs.append(("v.f32.%d" % i, "f32", x))
    for i, x in enumerate(F64):
        kvs.append(("v.f64.%d" % i, "f64", x))
    kvs.append(("a.f32", "array[f32]", F32))
    kvs.append(("a.f64", "array[f64]", F64))
    kvs += [("v.bool.t", "bool", True), ("v.bool.f", "bool", False),
            ("a.bool", "array[bool]", [1, 0, 1])]
    kvs += [("v.str.empty", "string", b""), ("v.str.utf8", "string", "Grüße, 世界 🙂"),
            ("v.str.lines", "string", b"line one\nline two\r\nback\\slash\n"),
            ("v.str.template", "string", "{% for m in messages %}{{ m['content'] }}\n{% endfor %}")]
    kvs.append(("a.str", "array[string]", [b"plain", b"", b"new\nline", b"cr\rhere", b"back\\slash",
                                           b"\\n literal", "Grüße".encode(), b"tab\there"]))
    for t in ALL_SCALARS:
        kvs.append(("a.empty.%s" % t, "array[%s]" % t, []))
    return kvs


def make_ggml_files(tmp, ggml):
    out = []
    rng = np.random.default_rng(3)

    p = os.path.join(tmp, "ggml-values.gguf")
    ggml.write_model(p, every_value_kvs(), [])
    out.append(p)

    p = os.path.join(tmp, "ggml-big-array.gguf")
    toks = ["tok%06d\u2581%s" % (i, "x" * (i % 7)) for i in range(150000)]
    ggml.write_model(p, [("general.architecture", "string", "llama"),
                         ("tokenizer.ggml.tokens", "array[string]", toks),
                         ("tokenizer.ggml.scores", "array[f32]", rng.standard_normal(150000).astype(np.float32)),
                         ("tokenizer.ggml.token_type", "array[i32]", rng.integers(1, 6, 150000))], [])
    out.append(p)

    # every ggml type ggml can encode, 1-D to 4-D, odd shapes
    for tname in ggml.quantizable_types() + ["q8_K"]:
        t = ggml.type_id(tname)
        bs = ggml.ggml_types()[t][1]
        shapes = [[bs * 3], [bs, 7], [bs * 2, 3, 5], [bs, 2, 3, 2]]
        tensors = []
        for i, ne in enumerate(shapes):
            raw = None
            if tname == "q8_K":   # no quantizer in ggml_quantize_chunk: any bytes do
                n = int(np.prod(ne)) // bs * ggml.ggml_types()[t][2]
                raw = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            tensors.append(("blk.%d.%s.weight" % (i, tname), tname, ne, raw))
        p = os.path.join(tmp, "ggml-type-%s.gguf" % tname)
        ggml.write_model(p, [("general.architecture", "string", "test"),
                             ("test.type", "string", tname)], tensors, seed=t)
        out.append(p)

    # (ggml's writer ignores a general.alignment set with gguf_set_val_u32
    # when it places tensors, so other alignments come from gguf_write.py)
    return out


def make_pywriter_files(tmp):
    import gguf_write as gw
    out = []

    def finish(w, name):
        p = os.path.join(tmp, name)
        w.write(p)
        out.append(p)

    def tensors(w, e="<"):
        w.add_tensor("tok_embd.weight", "f32", [5, 3], gw.arange_bytes("f32", 15, e))
        w.add_tensor("norm", "f16", [7], gw.arange_bytes("f16", 7, e))
        w.add_tensor("ints", "i32", [3, 1, 2], gw.arange_bytes("i32", 6, e))
        w.add_tensor("wide", "f64", [2, 2, 2, 2], gw.arange_bytes("f64", 16, e))
        w.add_tensor("q", "q4_0", [64, 2], bytes(range(72)))
        w.add_tensor("trailing.ones", "f32", [4, 1], gw.arange_bytes("f32", 4, e))

    def scalars(w):
        for t, v in [("u8", 200), ("i8", -100), ("u16", 60000), ("i16", -30000),
                     ("u32", 4000000000), ("i32", -2000000000), ("u64", 2 ** 64 - 1),
                     ("i64", -2 ** 63), ("f32", 0.1), ("f64", 1e-06), ("bool", True),
                     ("string", "hello")]:
            w.add("s.%s" % t, t, v)
        w.add("a.str", "array[string]", ["x", "y\nz", ""])
        w.add("a.i16", "array[i16]", [1, -2, 3])
        w.add("a.f32", "array[f32]", [1.5, -0.0, 1e-06])

    for ver in (1, 2):
        w = gw.GGUFWriter(version=ver)
        w.add("general.architecture", "string", "llama")
        scalars(w)
        tensors(w)
        finish(w, "py-v%d.gguf" % ver)

    for ver in (2, 3):
        w = gw.GGUFWriter(version=ver, big_endian=True)
        w.add("general.architecture", "string", "llama")
        scalars(w)
        tensors(w, ">")
        finish(w, "py-bigendian-v%d.gguf" % ver)

    for a in (1, 8, 64, 4096):
        w = gw.GGUFWriter(alignment=a)
        w.add("general.name", "string", "align %d" % a)
        tensors(w)
        w.add_tensor("odd", "i8", [3], b"\x01\x02\x03")
        finish(w, "py-align%d.gguf" % a)

    w = gw.GGUFWriter()
    w.add("n.i32", "array[array[i32]]", [[1, 2, 3], [], [-4]])
    w.add("n.str", "array[array[string]]", [["a", "b\nc"], ['q"uote', "back\\slash", "tab\t"]])
    w.add("n.deep", "array[array[array[u8]]]", [[[1], [2, 3]], [[]]])
    w.add("n.mixed", "array[array]", [gw.Arr("i32", [1]), gw.Arr("string", ["x"]), gw.Arr("f32", [0.5, -0.0])])
    w.add("n.bool", "array[array[bool]]", [[True, False]])
    w.add("n.f64", "array[array[f64]]", [[1e-06, 10000.0, 1e16]])
    w.add("n.empty", "array[array[i32]]", [])
    finish(w, "py-nested.gguf")

    w = gw.GGUFWriter()
    w.add("general.file_type", "u32", 1)
    w.add("general.name", "string", "first")
    w.add("general.file_type", "u32", 2)
    w.add("general.name", "string", "second")
    w.add("general.file_type", "string", "third, another type")
    finish(w, "py-duplicates.gguf")

    w = gw.GGUFWriter()
    for k in ["a/b", ".x", "..", ".", "%", "50%/x", "%2F", "a#b", "", "sp ace", "ünï"]:
        w.add(k, "string", "value of %r" % k)
    for n in ["a/b", ".hidden", "%", "..", "x%2Fy"]:
        w.add_tensor(n, "f32", [2], gw.arange_bytes("f32", 2))
    finish(w, "py-names.gguf")

    w = gw.GGUFWriter()
    w.add_raw_kv("bool.two", struct.pack("<IB", 7, 2))
    w.add("f32.nan.payload", "f32", 0.0)
    w.kvs[-1] = (w.kvs[-1][0], struct.pack("<II", 6, 0x7FC00001))
    w.add("f32.neg.nan", "f32", 0.0)
    w.kvs[-1] = (w.kvs[-1][0], struct.pack("<II", 6, 0xFFC00000))
    w.add("str.nul", "string", b"a\x00b")
    w.add("str.latin1", "string", b"caf\xe9")
    finish(w, "py-odd-values.gguf")

    # tensors stored out of order with a gap; a row that is not a block multiple
    w = gw.GGUFWriter()
    w.add_tensor("second", "f32", [4], gw.arange_bytes("f32", 4), offset=256)
    w.add_tensor("first", "f32", [8], gw.arange_bytes("f32", 8), offset=0)
    w.add_tensor("q.rows16", "q4_0", [16, 4], bytes(range(36)), offset=512)
    w.add_tensor("after.gap", "i16", [3], gw.arange_bytes("i16", 3), offset=1024)
    finish(w, "py-layout.gguf")

    w = gw.GGUFWriter()   # a tensor offset that is not a multiple of the alignment
    w.add_tensor("aligned", "f32", [2], gw.arange_bytes("f32", 2))
    w.add_tensor("misaligned", "f32", [3], gw.arange_bytes("f32", 3), offset=40)
    finish(w, "py-misaligned.gguf")

    w = gw.GGUFWriter()   # no keys, no tensors
    finish(w, "py-empty.gguf")
    return out


def make_broken_files(tmp):
    """(path, label, expected offset or None)"""
    import gguf_write as gw
    out = []

    def put(name, data, off=None):
        p = os.path.join(tmp, name)
        with open(p, "wb") as f:
            f.write(data)
        out.append((p, name, off))

    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("a.str", "array[string]", ["x", "y"])
    w.add_tensor("t", "f32", [8], gw.arange_bytes("f32", 8))
    good = w.to_bytes()
    hdr, _ = w.layout()
    put("empty.gguf", b"")
    put("short.gguf", b"GGU")
    put("badmagic.gguf", b"GGUX" + good[4:], 0)
    put("version0.gguf", good[:4] + struct.pack("<I", 0) + good[8:], 4)
    put("version4.gguf", good[:4] + struct.pack("<I", 4) + good[8:], 4)
    for cut in (6, 12, 20, 30, 45, 60, len(hdr) - 40, len(hdr) - 3, len(good) - 1):
        put("truncated-at-%d.gguf" % cut, good[:cut])

    def one_kv(raw, name):
        w = gw.GGUFWriter()
        w.add_raw_kv("k", raw)
        put(name, w.to_bytes())
    one_kv(struct.pack("<I", 13) + b"\0" * 8, "valuetype13.gguf")
    one_kv(struct.pack("<IQ", 8, 1 << 60) + b"abc", "string-too-long.gguf")
    one_kv(struct.pack("<IIQ", 9, 5, 1 << 61), "array-count-huge.gguf")
    one_kv(struct.pack("<IIQ", 9, 99, 1), "array-elemtype99.gguf")

    # A type id gguffs does not know mounts (test_unknown_types.py) unless
    # no bytes are left for it: here the data section is empty.
    for tid, name in ((4, "tensortype-removed4-nodata.gguf"), (99, "tensortype99-nodata.gguf")):
        w = gw.GGUFWriter()
        w.add_tensor("t", tid, [32], b"")
        put(name, w.to_bytes())
    w = gw.GGUFWriter()
    w.add_tensor("t", "f32", [1, 1, 1, 1, 2], bytes(8))
    put("five-dims.gguf", w.to_bytes())
    w = gw.GGUFWriter()
    w.add_tensor("t", "f32", [1 << 40, 1 << 40], b"", check=False)
    put("ne-overflow.gguf", w.to_bytes())
    w = gw.GGUFWriter()
    w.add_tensor("t", "f32", [64], gw.arange_bytes("f32", 8), check=False)   # data past the end
    put("data-past-end.gguf", w.to_bytes())
    w = gw.GGUFWriter()
    w.add_tensor("t", "f32", [2], bytes(8)).add_tensor("t", "f32", [2], bytes(8))
    put("duplicate-tensor.gguf", w.to_bytes())
    for a in (0, 3, 48):
        w = gw.GGUFWriter(alignment=a if a else None)
        if not a:
            w.add("general.alignment", "u32", 0)
            w.alignment = 32
        w.add_tensor("t", "f32", [2], bytes(8))
        put("alignment-%d.gguf" % a, w.to_bytes())
    w = gw.GGUFWriter()
    w.add_tensor("t", "q4_0", [30], bytes(18), check=False)   # 30 elements: not whole blocks
    put("partial-block.gguf", w.to_bytes())
    return out


def main():
    h = harness.start("generated")
    ggml = harness.require_oracle()
    import checks

    only = os.environ.get("GGUFFS_TEST_ONLY")
    with tempfile.TemporaryDirectory(prefix="gguffs-gen-") as tmp:
        files = []
        with h.case("making files with ggml's writer"):
            files += make_ggml_files(tmp, ggml)
        with h.case("making files with gguf_write.py"):
            files += make_pywriter_files(tmp)
        for i, f in enumerate(files):
            if only and only not in f:
                continue
            print("-- %s" % os.path.basename(f), flush=True)
            # ggml reads a bool byte 2 as 1 and strings up to a NUL: trust pyreader there
            b = os.path.basename(f)
            checks.check_model(h, f, concurrent=("big-array" in b or "type-q4_K" in b or "nested" in b),
                               prefer_pyreader="odd-values" in b)
        broken = []
        with h.case("making broken files"):
            broken = make_broken_files(tmp)
        for p, label, off in broken:
            if only and only not in p:
                continue
            with h.case("refuse %s" % label):
                line = check_refused(h, p, label, want_offset=off)
                print("-- %s refused: %s" % (label, line), flush=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# Makes the golden outputs of tests/golden/ with the real tools (README.md says which, and when each was made); tests/integration/test_golden.py compares gguffs' views with them.
"""
    make_golden.py hashes TOOL [--xxh3]   # run an existing llama-gguf-hash
    make_golden.py big-endian             # ggml's writer, then gguf_convert_endian.py
    make_golden.py safetensors            # gguffs' model.safetensors read by safetensors

Run from anywhere, with Debian's python3 (numpy, ggml's library from
scripts/fetch-oracle), gguffs built in build/ and .deps/venv made by
`scripts/setup --tests`.  Each command rewrites its files under
tests/golden/; git diff shows what changed.  The goldens are made once
and committed: a test never makes them.

hashes: TOOL is a llama-gguf-hash binary built elsewhere (none of
llama.cpp's code lives here); it is run in a folder holding the corpus
file copied as model.gguf, the name gguffs' /hashes gives it:
`TOOL --xxh64 --sha256 model.gguf` > gguf-hash/NAME.txt, or with --xxh3
`TOOL --xxh64 --xxh3 --sha256 model.gguf` > gguf-hash/NAME.xxh3.txt.

big-endian: big-endian/quants.gguf is written by ggml's own gguf writer
(tests/oracle/ggml.py write_model) with a key of every value type and a
tensor of every type gguf_convert_endian.py converts, from random floats
by ggml's quantizer and, for the block types, from random bytes too
(scales that are NaN, infinite or subnormal); then copies of it and of
the corpus' hyllama-dummy.gguf are converted in place by gguf-py's
`python -m gguf.scripts.gguf_convert_endian FILE big` (answered YES):
big-endian/quants.be.gguf and hyllama-dummy.be.gguf.

safetensors: each file of SAFETENSORS is mounted with gguffs and its
model.safetensors read by pypi_read.py safetensors (.deps/venv) into
safetensors/NAME.json.
"""
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
import harness  # noqa: E402  (puts tests/oracle on the path)

import ggml  # noqa: E402

CORPUS = os.path.join(SRC, "tests", "corpus", "real")
VENV_PY = os.path.join(SRC, ".deps", "venv", "bin", "python")
# the corpus files llama-gguf-hash was run on: F32 tensors of 1-4 dims;
# F16 and F32 with a 32000-token vocabulary; 67 tensors not in name order
HASH_FILES = ["hyllama-dummy.gguf", "ollama-llama-2-tiny-random.gguf", "sdcpp-taesd-decoder.gguf"]
# model.safetensors read by safetensors: (golden name, the file mounted)
SAFETENSORS = [("hyllama-dummy", os.path.join(CORPUS, "hyllama-dummy.gguf")),
               ("ollama-llama-2-tiny-random", os.path.join(CORPUS, "ollama-llama-2-tiny-random.gguf")),
               ("quants.be", os.path.join(HERE, "big-endian", "quants.be.gguf"))]
# the types gguf_convert_endian.py (gguf 0.19.0) converts: F32, F16, BF16
# and those of its byteswap_tensors
BE_TYPES = ["f32", "f16", "bf16", "q4_0", "q8_0", "q4_K", "q6_K", "mxfp4", "nvfp4"]
BE_BLOCK_TYPES = ["q4_0", "q8_0", "q4_K", "q6_K", "mxfp4", "nvfp4"]


def golden(*parts):
    p = os.path.join(HERE, *parts)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    return p


def make_hashes(tool, xxh3):
    tool = os.path.abspath(tool)
    flags = ["--xxh64", "--xxh3", "--sha256"] if xxh3 else ["--xxh64", "--sha256"]
    for name in HASH_FILES:
        with tempfile.TemporaryDirectory(prefix="gguffs-golden-") as tmp:
            shutil.copyfile(os.path.join(CORPUS, name), os.path.join(tmp, "model.gguf"))
            r = subprocess.run([tool] + flags + ["model.gguf"], cwd=tmp, capture_output=True,
                               check=True)
        out = golden("gguf-hash", name[:-5] + (".xxh3.txt" if xxh3 else ".txt"))
        with open(out, "wb") as f:
            f.write(r.stdout)
        print("%s: %d lines" % (os.path.relpath(out, SRC), r.stdout.count(b"\n")))


def quants_kvs():
    """A key of every value type, arrays of each, and strings that are not ASCII."""
    kvs = [("general.architecture", "string", "llama"),
           ("general.name", "string", "golden big-endian \u00e9\u4e16"),
           ("g.u8", "u8", 0xfe), ("g.i8", "i8", -2), ("g.u16", "u16", 0xfedc),
           ("g.i16", "i16", -12345), ("g.u32", "u32", 0xfedcba98), ("g.i32", "i32", -123456789),
           ("g.u64", "u64", 0xfedcba9876543210), ("g.i64", "i64", -1234567890123456789),
           ("g.f32", "f32", 3.1415927), ("g.f64", "f64", -2.718281828459045),
           ("g.bool", "bool", True), ("g.empty", "string", "")]
    for t, vals in (("u8", [1, 2, 255]), ("i8", [-1, 2, -128]), ("u16", [1, 0x1234, 0xffff]),
                    ("i16", [-1, 0x1234, -32768]), ("u32", [1, 0x12345678, 0xffffffff]),
                    ("i32", [-1, 0x12345678, -2**31]), ("u64", [1, 0x123456789abcdef0, 2**64 - 1]),
                    ("i64", [-1, 0x123456789abcdef0, -2**63]), ("f32", [0.5, -1.25, 1e-30]),
                    ("f64", [0.5, -1.25, 1e-300]), ("bool", [True, False, True]),
                    ("string", ["a", "", "\u00e9t\u00e9", "x" * 70])):
        if t in ggml.NUMPY:       # exact: a list of big ints would pass through float64
            vals = np.array(vals, dtype=ggml.NUMPY[t])
        kvs.append(("g.arr.%s" % t, "array[%s]" % t, vals))
    kvs.append(("g.arr.empty", "array[i32]", []))
    return kvs


def quants_tensors():
    rng = np.random.default_rng(20260932)
    tensors = []
    for t in BE_TYPES:
        bs = ggml.ggml_types()[ggml.type_id(t)][1]
        ne = [max(bs, 32) * 2, 3]
        tensors.append(("q.%s" % t, t, ne))
        if t in BE_BLOCK_TYPES:         # any bytes: odd scales too
            size = ggml.ggml_types()[ggml.type_id(t)][2]
            tensors.append(("r.%s" % t, t, [bs * 8], rng.bytes(size * 8)))
    return tensors


def convert_endian(path):
    r = subprocess.run([VENV_PY, "-m", "gguf.scripts.gguf_convert_endian", path, "big"],
                       input="YES\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("gguf_convert_endian %s failed:\n%s%s" % (path, r.stdout, r.stderr))


def make_big_endian():
    le = golden("big-endian", "quants.gguf")
    ggml.write_model(le, quants_kvs(), quants_tensors(), seed=32)
    for src, dst in ((le, golden("big-endian", "quants.be.gguf")),
                     (os.path.join(CORPUS, "hyllama-dummy.gguf"),
                      golden("big-endian", "hyllama-dummy.be.gguf"))):
        shutil.copyfile(src, dst + ".tmp")
        convert_endian(dst + ".tmp")
        os.replace(dst + ".tmp", dst)
        print("%s: %d bytes" % (os.path.relpath(dst, SRC), os.path.getsize(dst)))


def make_safetensors():
    for name, model in SAFETENSORS:
        with harness.mount(model) as mnt:
            r = subprocess.run([VENV_PY, os.path.join(HERE, "pypi_read.py"), "safetensors",
                                os.path.join(mnt, "model.safetensors")],
                               capture_output=True, check=True)
        out = golden("safetensors", name + ".json")
        with open(out, "wb") as f:
            f.write(r.stdout)
        print("%s: %d bytes" % (os.path.relpath(out, SRC), len(r.stdout)))


def main(argv):
    if len(argv) >= 3 and argv[1] == "hashes" and argv[3:] in ([], ["--xxh3"]):
        make_hashes(argv[2], argv[3:] == ["--xxh3"])
    elif argv[1:] == ["big-endian"]:
        make_big_endian()
    elif argv[1:] == ["safetensors"]:
        make_safetensors()
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

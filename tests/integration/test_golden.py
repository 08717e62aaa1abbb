#!/usr/bin/python3
# The views against what the real tools made once (tests/golden/, README.md there says how): llama-gguf-hash's output, model.safetensors as the safetensors library reads it, big-endian files written by gguf-py's gguf_convert_endian.py; byte for byte.
"""
Golden outputs, each made once by the tool gguffs imitates and committed
(tests/golden/README.md: tool, version, commit, command):

  - gguf-hash/NAME.txt, `llama-gguf-hash --xxh64 --sha256 model.gguf`
    over a copy of the corpus file NAME.gguf: gguffs' /hashes must be
    these bytes, and tensors/T/xxh64 and sha256 each the digest of its
    line followed by a newline.  gguf-hash/NAME.xxh3.txt, the same with
    --xxh3 too (a version of the tool that has it): its lines but the xxh3
    ones are NAME.txt, and its xxh3 digests are python3-xxhash's xxh3_64
    of the tensors' raw files and of all of them, in /hashes' order.
  - safetensors/NAME.json, what safetensors (the PyPI package, framework
    "numpy") read in the model.safetensors of a mount: tests/golden/
    pypi_read.py, run by .deps/venv's python, must read the same bytes
    now, and each tensor it lists must be one of tensors/ (all of them,
    none left out), with the shape of its shape file and the sha256 of
    its f32 file (dtype F32) or raw file (any other dtype).
  - big-endian/*.be.gguf, written by gguf-py's gguf_convert_endian.py
    from big-endian/quants.gguf (ggml's writer: a key of every value type,
    a tensor of every type the script converts) and from the corpus'
    hyllama-dummy.gguf.  Mounted beside the little-endian original:
    meta/ holds the same files, byte for byte; every tensor's raw is the
    big-endian file's bytes where gguf-py's GGUFReader places them, and
    tests/oracle/gguf_write.py's byteswap_tensor of the original's raw;
    its type and shape files are the original's; f32 exists and equals
    the original's f32, and for a quantized type ggml's to_float of the
    original's raw; model.gguf is the big-endian file.

The PyPI readers come from .deps/venv (`scripts/setup --tests`, pinned in
tests/requirements.txt); without it the test skips, or fails under CI.
"""
import hashlib
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

import gguf_write as gw  # noqa: E402  (tests/oracle, put on the path by harness)
from checks import escape_name  # noqa: E402

GOLDEN = os.path.join(harness.SRC, "tests", "golden")
# the goldens' corpus files and models (tests/golden/make_golden.py makes them)
HASH_FILES = ["hyllama-dummy", "ollama-llama-2-tiny-random", "sdcpp-taesd-decoder"]
SAFETENSORS = [("hyllama-dummy", harness.corpus_file("hyllama-dummy.gguf")),
               ("ollama-llama-2-tiny-random", harness.corpus_file("ollama-llama-2-tiny-random.gguf")),
               ("quants.be", os.path.join(GOLDEN, "big-endian", "quants.be.gguf"))]
BIG_ENDIAN = [(os.path.join(GOLDEN, "big-endian", "quants.gguf"),
               os.path.join(GOLDEN, "big-endian", "quants.be.gguf")),
              (harness.corpus_file("hyllama-dummy.gguf"),
               os.path.join(GOLDEN, "big-endian", "hyllama-dummy.be.gguf"))]
PLAIN = ("f32", "f16", "bf16")


def read(path):
    with open(path, "rb", buffering=0) as f:
        return f.read()


def venv_python():
    py = os.path.join(harness.SRC, ".deps", "venv", "bin", "python")
    if not os.access(py, os.X_OK):
        harness.skip_or_fail("%s missing: the PyPI oracles (scripts/setup --tests)" % py)
    return py


def pypi_read(py, kind, path):
    """What tests/golden/pypi_read.py KIND prints for path: bytes."""
    r = subprocess.run([py, os.path.join(GOLDEN, "pypi_read.py"), kind, path],
                       capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("pypi_read.py %s %s: exit %d: %s" % (
            kind, path, r.returncode, r.stderr.decode(errors="replace")[-2000:]))
    return r.stdout


def first_diff(got, want):
    """The first line where got and want (bytes) differ, for a message."""
    g, w = got.split(b"\n"), want.split(b"\n")
    for i in range(max(len(g), len(w))):
        a = g[i] if i < len(g) else b"(missing)"
        b = w[i] if i < len(w) else b"(missing)"
        if a != b:
            return "line %d: %r, golden %r" % (i + 1, a.decode(errors="replace"),
                                               b.decode(errors="replace"))
    return "same lines"


def golden_lines(text):
    """[(kind, hex, name or None for the model)] of llama-gguf-hash's output."""
    out = []
    for line in text.split(b"\n")[:-1]:
        kind, digest, where = line.split()
        name = where.split(b":", 1)[1] if b":" in where else None
        out.append((kind.decode(), digest.decode(), name))
    return out


def check_hashes(h, xxhash):
    for name in HASH_FILES:
        want = read(os.path.join(GOLDEN, "gguf-hash", name + ".txt"))
        want3 = read(os.path.join(GOLDEN, "gguf-hash", name + ".xxh3.txt"))
        lab = "gguf-hash %s" % name
        with h.case(lab), mount(harness.corpus_file(name + ".gguf")) as mnt:
            got = read(os.path.join(mnt, "hashes"))
            h.check(got == want, "%s: /hashes differs from llama-gguf-hash's output: %s"
                    % (lab, first_diff(got, want)))
            tdir = os.path.join(os.fsencode(mnt), b"tensors")
            lines = golden_lines(want)
            n = 0
            for kind, digest, tname in lines:
                if tname is None:
                    continue
                p = os.path.join(tdir, escape_name(tname), kind.encode())
                g = read(p)
                h.check(g == digest.encode() + b"\n", "%s: tensors/%s/%s is %r, llama-gguf-hash %s"
                        % (lab, tname.decode(errors="replace"), kind, g, digest))
                n += 1
            h.check(n == len(lines) - 2 and n >= 2, "%s: %d tensor lines in the golden" % (lab, n))
            # the golden with xxh3: the same lines besides, and python's xxh3 of raw
            h.check(b"".join(ln + b"\n" for ln in want3.split(b"\n")[:-1]
                             if not ln.startswith(b"xxh3 ")) == want,
                    "%s: the golden with --xxh3 has other xxh64/sha256 lines" % lab)
            whole = xxhash.xxh3_64()
            n3 = 0
            for kind, digest, tname in golden_lines(want3):
                if kind != "xxh3":
                    continue
                if tname is None:
                    h.check(whole.hexdigest() == digest, "%s: xxh3 of all raw files %s, "
                            "llama-gguf-hash %s" % (lab, whole.hexdigest(), digest))
                    continue
                raw = read(os.path.join(tdir, escape_name(tname), b"raw"))
                whole.update(raw)
                x = xxhash.xxh3_64(raw).hexdigest()
                h.check(x == digest, "%s: xxh3 of tensors/%s/raw %s, llama-gguf-hash %s"
                        % (lab, tname.decode(errors="replace"), x, digest))
                n3 += 1
            h.check(n3 == n // 2, "%s: %d xxh3 lines for %d tensors" % (lab, n3, n // 2))
            print("  %s: /hashes and %d tensors' digests as llama-gguf-hash's" % (name, n // 2),
                  flush=True)


def check_safetensors(h, py):
    for name, model in SAFETENSORS:
        want = read(os.path.join(GOLDEN, "safetensors", name + ".json"))
        lab = "safetensors %s" % name
        with h.case(lab), mount(model) as mnt:
            got = pypi_read(py, "safetensors", os.path.join(mnt, "model.safetensors"))
            h.check(got == want, "%s: safetensors reads another model.safetensors than the "
                    "golden: %s" % (lab, first_diff(got, want)))
            st = json.loads(got)
            tdir = os.path.join(mnt, "tensors")
            names = [t["name"] for t in st["tensors"]]
            h.check(sorted(names) == sorted(os.listdir(tdir)),
                    "%s: safetensors read %d tensors, tensors/ has %d" % (
                        lab, len(names), len(os.listdir(tdir))))
            for t in st["tensors"]:
                d = os.path.join(tdir, escape_name(t["name"].encode()).decode())
                shape = [int(x) for x in read(os.path.join(d, "shape")).split()]
                h.check(t["shape"] == shape, "%s: %s: shape %r, the shape file %r"
                        % (lab, t["name"], t["shape"], shape))
                view = "f32" if t["dtype"] == "F32" else "raw"
                s = hashlib.sha256(read(os.path.join(d, view))).hexdigest()
                h.check(t["sha256"] == s, "%s: %s: %s bytes differ from tensors/%s/%s"
                        % (lab, t["name"], t["dtype"], t["name"], view))
            print("  %s: %d tensors read by safetensors as in the golden" % (name, len(names)),
                  flush=True)


def check_big_endian(h, py, ggml):
    for le, be in BIG_ENDIAN:
        lab = "big-endian %s" % os.path.basename(be)
        with h.case(lab):
            rb = json.loads(pypi_read(py, "gguf", be))
            rl = json.loads(pypi_read(py, "gguf", le))
            h.check(rb["endian"] == "BIG" and rl["endian"] == "LITTLE",
                    "%s: GGUFReader says %s and %s" % (lab, rb["endian"], rl["endian"]))
            h.check([(t["name"], t["type"], t["ne"]) for t in rb["tensors"]] ==
                    [(t["name"], t["type"], t["ne"]) for t in rl["tensors"]],
                    "%s: GGUFReader lists other tensors in the two files" % lab)
            data = read(be)
            with mount(le) as ml, mount(be) as mb:
                keys = sorted(os.listdir(os.path.join(ml, "meta")))
                h.check(sorted(os.listdir(os.path.join(mb, "meta"))) == keys,
                        "%s: meta/ lists other keys than the original's" % lab)
                for k in keys:
                    g = read(os.path.join(mb, "meta", k))
                    w = read(os.path.join(ml, "meta", k))
                    h.check(g == w, "%s: meta/%s is %r, the original's %r" % (lab, k, g[:80], w[:80]))
                h.check(read(os.path.join(mb, "model.gguf")) == data,
                        "%s: model.gguf differs from the file" % lab)
                n_q = 0
                for t in rb["tensors"]:
                    tl = "%s: %s (%s)" % (lab, t["name"], t["type"])
                    fn = escape_name(t["name"].encode()).decode()
                    db, dl = os.path.join(mb, "tensors", fn), os.path.join(ml, "tensors", fn)
                    raw = read(os.path.join(db, "raw"))
                    raw_le = read(os.path.join(dl, "raw"))
                    h.check(raw == data[t["offset"]:t["offset"] + t["nbytes"]],
                            "%s: raw differs from the bytes GGUFReader places" % tl)
                    tname = t["type"].lower().replace("_k", "_K")
                    h.check(raw == gw.byteswap_tensor(tname, raw_le),
                            "%s: raw is not byteswap_tensor of the original's" % tl)
                    for f in ("type", "shape"):
                        h.check(read(os.path.join(db, f)) == read(os.path.join(dl, f)),
                                "%s: %s differs from the original's" % (tl, f))
                    if not h.check(os.path.exists(os.path.join(db, "f32")),
                                   "%s: no f32 in the big-endian file" % tl):
                        continue
                    f32 = read(os.path.join(db, "f32"))
                    h.check(f32 == read(os.path.join(dl, "f32")),
                            "%s: f32 differs from the original's" % tl)
                    if tname not in PLAIN:
                        n_q += 1
                        ref = ggml.dequant(tname, raw_le).astype("<f4").tobytes()
                        h.check(f32 == ref, "%s: f32 differs from ggml's to_float of the "
                                "original's raw" % tl)
                print("  %s: %d keys, %d tensors (%d quantized) as the original's"
                      % (os.path.basename(be), len(keys), len(rb["tensors"]), n_q), flush=True)


def main():
    h = harness.start("golden")
    ggml = harness.require_oracle()
    py = venv_python()
    try:
        import xxhash
    except ImportError:
        harness.skip_or_fail("python3-xxhash missing (scripts/setup --tests)")
    check_hashes(h, xxhash)
    check_safetensors(h, py)
    check_big_endian(h, py, ggml)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# Big-endian files: f32 of the quantized types gguf-py's gguf_convert_endian.py converts (q4_0, q8_0, q4_K, q6_K, mxfp4, nvfp4) bit-identical to ggml's dequantization of the little-endian twin; other quantized types without f32; model.safetensors of the twin.
"""
A little-endian file with a tensor of every type ggml can encode (ggml's
quantizer on random floats) and, for the convertible types, one of random
bytes (scales that are NaN, infinite or subnormal), and its big-endian twin
made as gguf_convert_endian.py makes it (tests/oracle/gguf_write.py
byteswap_tensor; the types it cannot convert copied as they are).  Mounted:

  - in the twin, f32 (and f32.npy) exists for the plain types and the
    convertible ones, and for no other type;
  - where it exists, its bytes are ggml's to_float of the little-endian
    bytes (bit for bit), and equal the little-endian file's f32;
  - the twin's model.safetensors holds those tensors as F32 with the same
    bytes, and names the others in __metadata__["gguffs.omitted"].
"""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

import gguf_write as gw  # noqa: E402  (tests/oracle, put on the path by harness)
from test_safetensors import parse  # noqa: E402
from test_views import read_all  # noqa: E402


def make_twins(ggml, tmp):
    """(little-endian path, big-endian path, [(name, type, le bytes)])."""
    rng = np.random.default_rng(31)
    tensors = []
    for tname in ggml.quantizable_types():
        bs = ggml.ggml_types()[ggml.type_id(tname)][1]
        ne = [bs * 3, 5]
        raw, _ = ggml.random_tensor_bytes(tname, ne, rng)
        tensors.append(("t.%s" % tname, tname, ne, raw))
        if tname in gw.BE_BLOCKS:       # any bytes: odd scales too
            size = ggml.ggml_types()[ggml.type_id(tname)][2]
            tensors.append(("r.%s" % tname, tname, [bs * 40], rng.bytes(size * 40)))
    le, be = gw.GGUFWriter(), gw.GGUFWriter(big_endian=True)
    for w in (le, be):
        w.add("general.architecture", "string", "llama")
    for name, tname, ne, raw in tensors:
        le.add_tensor(name, tname, ne, raw)
        swapped = raw
        if tname in gw.BE_BLOCKS or tname in gw.PLAIN_SIZES:
            swapped = gw.byteswap_tensor(tname, raw)
        be.add_tensor(name, tname, ne, swapped)
    pl, pb = os.path.join(tmp, "le.gguf"), os.path.join(tmp, "be.gguf")
    le.write(pl)
    be.write(pb)
    return pl, pb, [(n, t, r) for n, t, _, r in tensors]


def main():
    h = harness.start("big-endian")
    ggml = harness.require_oracle()
    with tempfile.TemporaryDirectory(prefix="gguffs-be-") as tmp:
        pl, pb, tensors = make_twins(ggml, tmp)
        with mount(pl) as ml, mount(pb) as mb:
            st = read_all(os.path.join(mb, "model.safetensors"))
            n, meta, spans = parse(st)
            omitted = meta.get("gguffs.omitted", "").split("\n")
            n_f32 = 0
            for name, tname, raw in tensors:
                lab = "%s (%s)" % (name, tname)
                with h.case(lab):
                    want = tname in gw.BE_BLOCKS or tname in gw.PLAIN_SIZES
                    fb = os.path.join(mb, "tensors", name, "f32")
                    h.check(os.path.exists(fb) == want, "%s: f32 in the big-endian file %s"
                            % (lab, "missing" if want else "present, no big-endian layout"))
                    h.check(os.path.exists(fb + ".npy") == want, "%s: f32.npy" % lab)
                    if not want:
                        h.check(name in omitted and name not in spans,
                                "%s: not left out of model.safetensors" % lab)
                        continue
                    got = read_all(fb)
                    h.check(got == read_all(os.path.join(ml, "tensors", name, "f32")),
                            "%s: f32 differs from the little-endian file's" % lab)
                    if tname not in gw.PLAIN_SIZES:
                        n_f32 += 1
                        ref = ggml.dequant(tname, raw).astype("<f4").tobytes()
                        if got != ref:
                            g, r = np.frombuffer(got, "<u4"), np.frombuffer(ref, "<u4")
                            i = int(np.argmax(g != r)) if g.size == r.size else -1
                            h.fail("%s: f32 differs from ggml's to_float of the little-endian "
                                   "bytes (%d vs %d bytes, first at float %d)"
                                   % (lab, len(got), len(ref), i))
                        else:
                            h.passed += 1
                    sp = spans.get(name)
                    if h.check(sp is not None and sp[0] == "F32", "%s: model.safetensors has %r"
                               % (lab, sp and sp[0])):
                        h.check(st[8 + n + sp[2]:8 + n + sp[3]] == got,
                                "%s: model.safetensors' span differs from f32" % lab)
            print("  %d quantized tensors of a big-endian file dequantized, %d tensors"
                  % (n_f32, len(tensors)), flush=True)
            h.check(n_f32 >= 2 * len(gw.BE_BLOCKS), "only %d checked" % n_f32)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

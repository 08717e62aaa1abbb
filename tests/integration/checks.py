# Checks one mounted model against the oracles (ggml via ctypes, else the pure-Python reader): meta, xattrs, tensors, info, concurrent reads.
"""
check_model(h, model, label) mounts model and checks, against ggml's own
reader (or tests/oracle/pyreader.py for files ggml refuses: v1, duplicate
keys, nested arrays, big-endian):

  - the top level holds info, meta and tensors;
  - `ls meta` lists exactly the keys, escaped as the contract says, later
    occurrences of a key as KEY#2, KEY#3, ...;
  - each meta/KEY reads as the contract's text of the value (expected.py),
    its st_size is the text's length, its user.gguf.type is the type;
  - `ls tensors` lists exactly the tensors; raw equals the stored bytes
    (sha256) with the exact st_size; type and shape are right; f32, where
    present, is bit-identical to ggml's to_float (absent for a type with
    no dequantization);
  - info mentions every key and tensor;
  - 8 processes reading raw and meta files at once, with different chunk
    sizes, get the same bytes; reads at odd offsets and past the end work.
"""
import hashlib
import multiprocessing
import os

import numpy as np

import ggml
import gguf_write as gw
import pyreader
from expected import expected_text, texts_match, first_difference, explain_float_mismatch
from harness import mount

XATTR = "user.gguf.type"

# f32 of plain types in a big-endian file: the values, converted (our reading
# of the contract: "converted value by value").
BE_PLAIN = {
    "f32": lambda b: np.frombuffer(b, ">f4").astype(np.float32),
    "f16": lambda b: np.frombuffer(b, ">f2").astype(np.float32),
    "bf16": lambda b: (np.frombuffer(b, ">u2").astype(np.uint32) << 16).view(np.float32),
    "f64": lambda b: np.frombuffer(b, ">f8").astype(np.float32),
    "i8": lambda b: np.frombuffer(b, "i1").astype(np.float32),
    "i16": lambda b: np.frombuffer(b, ">i2").astype(np.float32),
    "i32": lambda b: np.frombuffer(b, ">i4").astype(np.float32),
    "i64": lambda b: np.frombuffer(b, ">i8").astype(np.float32),
}


def escape_name(name, dup=1):
    """The contract's file name for a key or tensor name (bytes)."""
    if name == b"":
        s = b"%"
    else:
        s = name.replace(b"%", b"%25").replace(b"/", b"%2F").replace(b"\0", b"%00")
        if s.startswith(b"."):
            s = b"%2E" + s[1:]
        # a name that itself ends in "#digits" would read as a duplicate:
        # its last '#' is escaped
        i = s.rfind(b"#")
        if i >= 0 and i + 1 < len(s) and s[i + 1:].isdigit():
            s = s[:i] + b"%23" + s[i + 1:]
    if dup > 1:
        s += b"#%d" % dup
    return s


class Expect:
    """What the mount should show for a model file."""

    def __init__(self, path, h=None, label="", prefer_pyreader=False):
        self.path = path
        self.pr = pyreader.read(path)
        self.m = None if prefer_pyreader else ggml.read_gguf(path)
        self.source = "ggml" if self.m else "pyreader (ggml refuses: %s)" % (
            ggml.last_log().splitlines() or ["?"])[0]
        pr = self.pr
        if self.m and h is not None:
            self._crosscheck(h, label)
        # keys: (file name, key, type, value)
        self.keys = []
        seen = {}
        src = self.m.kvs if self.m else [(kv.key, kv.type, kv.value) for kv in pr.kvs]
        for key, t, v in src:
            seen[key] = seen.get(key, 0) + 1
            self.keys.append((escape_name(key, seen[key]), key, t, v))
        # tensors: (file name, name, type name, ne (ggml order, stored dims), offset, nbytes)
        self.tensors = []
        for i, pt in enumerate(pr.tensors):
            if self.m:
                ti = self.m.tensors[i]
                tname, off, nb = ti.type_name, ti.offset, ti.nbytes
            else:
                tname, off, nb = pt.type_name, pt.offset, pt.nbytes
            self.tensors.append((escape_name(pt.name), pt.name, tname, pt.type, pt.ne, off, nb))
        self.data_offset = self.m.data_offset if self.m else pr.data_offset

    def _crosscheck(self, h, label):
        """Our pure-Python reader and ggml must agree (else the oracle is wrong)."""
        pr, m = self.pr, self.m
        ok = (m.version == pr.version and m.alignment == pr.alignment
              and m.data_offset == pr.data_offset and len(m.kvs) == len(pr.kvs)
              and len(m.tensors) == len(pr.tensors))
        if ok:
            for (k, t, v), kv in zip(m.kvs, pr.kvs):
                if k != kv.key or t != kv.type or expected_text(t, v) != expected_text(kv.type, kv.value):
                    ok = False
                    break
            for ti, pt in zip(m.tensors, pr.tensors):
                if (ti.name, ti.type, ti.offset, ti.nbytes) != (pt.name, pt.type, pt.offset, pt.nbytes) \
                        or ti.ne != pt.ne + [1] * (4 - len(pt.ne)):
                    ok = False
                    break
        h.check(ok, "%s: ORACLE: ggml and pyreader disagree about the file" % label)

    def raw(self, fh, off, nb):
        fh.seek(self.data_offset + off)
        return fh.read(nb)


def _sha(b):
    return hashlib.sha256(b).hexdigest()


def _read_all(path, chunk):
    out = []
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            out.append(b)
    return b"".join(out)


def _worker(args):
    paths, chunk = args
    return {p: _sha(_read_all(p, chunk)) for p in paths}


def check_model(h, model, label=None, concurrent=True, options=(), expect=None,
                prefer_pyreader=False):
    label = label or os.path.basename(model)
    exp = expect
    if exp is None:
        try:
            exp = Expect(model, h, label, prefer_pyreader)
        except Exception as e:  # noqa: BLE001
            h.fail("%s: ORACLE cannot read the file: %s: %s" % (label, type(e).__name__, e))
            return
    with h.case("%s: mount" % label):
        with mount(model, options) as mnt:
            _check_mounted(h, exp, mnt, label, concurrent)


def _check_mounted(h, exp, mnt, label, concurrent):
    mb = os.fsencode(mnt)
    top = set(os.listdir(mb))
    h.check({b"info", b"meta", b"tensors"} <= top,
            "%s: top level %r lacks info/meta/tensors" % (label, sorted(top)))
    big = exp.pr.big_endian

    # ---- meta
    meta = os.path.join(mb, b"meta")
    want = sorted(k[0] for k in exp.keys)
    got = sorted(os.listdir(meta))
    h.check(got == want, "%s: ls meta: expected %d names, got %d; missing %r, unexpected %r"
            % (label, len(want), len(got), sorted(set(want) - set(got))[:10],
               sorted(set(got) - set(want))[:10]))
    expected_hashes = {}
    for fname, key, t, v in exp.keys:
        p = os.path.join(meta, fname)
        with h.case("%s: meta/%r" % (label, fname)):
            data = _read_all(p, 1 << 16)
            ok, note = texts_match(t, v, data)
            if note:
                h.note("%s: meta/%s: %s" % (label, fname.decode(errors="replace"), note))
            if not h.check(ok, "%s: meta/%s (type %s): %s%s" % (
                    label, fname.decode(errors="replace"), t,
                    first_difference(expected_text(t, v), data),
                    explain_float_mismatch(t, expected_text(t, v), data))):
                continue
            st = os.stat(p)
            h.check(st.st_size == len(data), "%s: meta/%s: st_size %d, text is %d bytes"
                    % (label, fname.decode(errors="replace"), st.st_size, len(data)))
            try:
                xt = os.getxattr(p, XATTR)
            except OSError as e:
                xt = "error %s" % e
            h.check(xt == t.encode(), "%s: meta/%s: %s is %r, expected %r"
                    % (label, fname.decode(errors="replace"), XATTR, xt, t))
            expected_hashes[p] = _sha(data)

    # ---- tensors
    tdir = os.path.join(mb, b"tensors")
    want = sorted(t[0] for t in exp.tensors)
    got = sorted(os.listdir(tdir))
    h.check(got == want, "%s: ls tensors: missing %r, unexpected %r"
            % (label, sorted(set(want) - set(got))[:10], sorted(set(got) - set(want))[:10]))
    f32_missing = []
    with open(exp.path, "rb") as src:
        for fname, name, tname, tid, ne, off, nb in exp.tensors:
            d = os.path.join(tdir, fname)
            lab = "%s: tensors/%s" % (label, fname.decode(errors="replace"))
            with h.case(lab):
                raw = exp.raw(src, off, nb)
                rp = os.path.join(d, b"raw")
                h.check(os.stat(rp).st_size == nb, "%s/raw: st_size %d, expected %d"
                        % (lab, os.stat(rp).st_size, nb))
                got_raw = _read_all(rp, 1 << 20)
                h.check(_sha(got_raw) == _sha(raw), "%s/raw: sha256 differs (%s)"
                        % (lab, first_difference(raw, got_raw)))
                expected_hashes[rp] = _sha(raw)
                ty = _read_all(os.path.join(d, b"type"), 4096)
                h.check(ty == tname.encode() + b"\n", "%s/type: %r, expected %r" % (lab, ty, tname + "\n"))
                sh = _read_all(os.path.join(d, b"shape"), 4096)
                want_sh = (" ".join(str(x) for x in reversed(ne)) + "\n").encode()
                h.check(sh == want_sh, "%s/shape: %r, expected %r" % (lab, sh, want_sh))
                fp = os.path.join(d, b"f32")
                present = os.path.exists(fp)
                can = ggml.has_to_float(tid)
                if big and tname not in BE_PLAIN and tname not in gw.BE_BLOCKS:
                    can = False         # no big-endian layout: no f32
                if present and not can:
                    h.fail("%s/f32 exists but ggml has no dequantization for %s%s"
                           % (lab, tname, " in a big-endian file" if big else ""))
                elif can and not present:
                    f32_missing.append(fname)
                elif present:
                    # a quantized type of a big-endian file: ggml's values of
                    # the blocks made little-endian (gguf_convert_endian.py)
                    want_f = BE_PLAIN[tname](raw) if big and tname in BE_PLAIN else \
                        ggml.dequant(tid, gw.byteswap_tensor(tname, raw) if big else raw)
                    h.check(os.stat(fp).st_size == 4 * want_f.size, "%s/f32: st_size %d, expected %d"
                            % (lab, os.stat(fp).st_size, 4 * want_f.size))
                    got_f = np.frombuffer(_read_all(fp, 1 << 20), dtype="<u4")
                    same = got_f.size == want_f.size and np.array_equal(got_f, want_f.view("<u4"))
                    if not same and got_f.size == want_f.size:
                        i = int(np.argmax(got_f != want_f.view("<u4")))
                        h.fail("%s/f32: element %d is %r, ggml says %r" % (
                            lab, i, got_f[i:i + 1].view("<f4")[0], want_f[i]))
                    else:
                        h.check(same, "%s/f32: %d floats, expected %d" % (lab, got_f.size, want_f.size))
    h.check(not f32_missing, "%s: no tensors/NAME/f32 though ggml dequantizes the type: %r"
            % (label, f32_missing[:5]))

    # ---- info
    with h.case("%s: info" % label):
        info = _read_all(os.path.join(mb, b"info"), 1 << 16)
        missing = [k for _, k, _, _ in exp.keys if k and k not in info and escape_name(k) not in info]
        h.check(not missing, "%s: info does not mention keys %r" % (label, missing[:5]))
        missing = [n for _, n, *_ in exp.tensors if n and n not in info and escape_name(n) not in info]
        h.check(not missing, "%s: info does not mention tensors %r" % (label, missing[:5]))
        dups = [f for f, *_ in exp.keys if b"#" in f and not f.startswith(b"#")]
        if dups:
            h.check(dups[0] in info or b"duplicate" in info.lower(),
                    "%s: info does not say that a key is duplicated (%r)" % (label, dups[0]))

    # ---- odd-offset reads and reads past the end
    with h.case("%s: pread" % label), open(exp.path, "rb") as src:
        rng = np.random.default_rng(7)
        for fname, name, tname, tid, ne, off, nb in exp.tensors[:6]:
            raw = exp.raw(src, off, nb)
            fd = os.open(os.path.join(tdir, fname, b"raw"), os.O_RDONLY)
            try:
                for _ in range(8):
                    a = int(rng.integers(0, nb + 1))
                    n = int(rng.integers(0, 70000))
                    got = os.pread(fd, n, a)
                    h.check(got == raw[a:a + n], "%s: tensors/%s/raw: %d bytes read at offset %d are wrong"
                            % (label, fname.decode(errors="replace"), n, a))
                h.check(os.pread(fd, 100, nb + 10) == b"", "%s: read past the end is not empty" % label)
            finally:
                os.close(fd)

    # ---- concurrent readers
    if concurrent and expected_hashes:
        with h.case("%s: 8 concurrent readers" % label):
            paths = sorted(expected_hashes)
            ctx = multiprocessing.get_context("fork")
            jobs = [(paths[i::2] + paths[(i + 1)::2], 4096 * (i + 1) + 37 * i) for i in range(8)]
            with ctx.Pool(8) as pool:
                results = pool.map(_worker, jobs)
            bad = sorted({p for r in results for p, s in r.items() if s != expected_hashes[p]})
            h.check(not bad, "%s: concurrent readers got different bytes for %d files, e.g. %r"
                    % (label, len(bad), bad[:3]))

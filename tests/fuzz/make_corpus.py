#!/usr/bin/python3
# Writes the seed corpora of the fuzz harnesses (from the real files of tests/corpus/real and, where it exists, ../shared/corpus/real, and tests/oracle/gguf_write.py files) and, with --run, replays them once.
"""
    make_corpus.py --kind parse|value|roundtrip|http_hdr|overlay|estimate --out DIR [--run FUZZER]

parse      whole GGUF files: every real file of tests/corpus/real (or
           GGUFFS_CORPUS/real) and ../shared/corpus/real (or
           GGUFFS_CORPUS_EXTRA/real) where it exists, shrunk to a small file of the same shape
           (same version, byte order, keys, value types, tensor names and
           types; arrays cut to their first 24 elements, tensors to one
           block), the small real files as they are, the nonstandard
           (refused) ones, and files written by tests/oracle/gguf_write.py: v1,
           v2, v3, big-endian, every value type, nested and empty arrays,
           duplicate keys, alignments 1/64/4096, tensors of every type and
           of type ids gguffs does not know (removed, newer).
value      a selector byte (see value.c) + the contract's text of each kv of
           those files (tests/oracle/expected.py), + hand-written texts.
roundtrip  8-byte edit seeds + each parse seed that is a valid file.
overlay    flags + u32 length + each parse seed that is a valid file (the
           base) + an overlay of it (gguf/overlay.h) whose header is the
           base's own: intact, with checksums left to the harness (flags 1),
           with a renamed key, and damaged.
estimate   the parse seeds, each also with a last byte 0x01 (fuzz_estimate.c:
           the file is then 2^20 times the input)
http_hdr   HTTP response header blocks (remote/hdr.c): what nginx, the
           Hugging Face hub, S3 and CDNs send (206, 200, 302, 416, 429,
           503, HTTP/2 forms, interim 1xx), and broken ones (duplicates,
           folded lines, lying or overflowing numbers, odd dates).

Deterministic: the same files every time.  With --run, FUZZER is run once
over every seed (libFuzzer runs the files given on its command line and
exits), so a seed that trips an invariant fails the meson test.
"""
import argparse
import hashlib
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("GGUFFS_SRC") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "oracle"))

from gguf_write import GGUFWriter, Arr, GGML_TYPES  # noqa: E402
import pyreader  # noqa: E402
from expected import expected_text  # noqa: E402

CUT = 24            # array elements kept when shrinking
BASE = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
        "u64", "i64", "f64"]


def corpus_real():
    """The real/ folders: the repository's own, then ../shared's if there."""
    own = os.environ.get("GGUFFS_CORPUS") or os.path.join(SRC, "tests", "corpus")
    extra = os.environ.get("GGUFFS_CORPUS_EXTRA") or os.path.join(SRC, "..", "shared", "corpus")
    return [os.path.join(c, "real") for c in (own, extra) if os.path.isdir(os.path.join(c, "real"))]


def cut(v):
    if isinstance(v, pyreader.Arr):
        items = v.items[:CUT]
        if v.etype == "array":
            items = [cut(x) for x in items]
        return Arr(v.etype, items)
    return v


def shrink(f):
    """A small file with the shape of pyreader file f."""
    w = GGUFWriter(version=f.version, big_endian=f.big_endian)
    for kv in f.kvs:
        v = cut(kv.value)
        t = kv.type
        if isinstance(v, Arr) and v.etype == "array":
            t = "array[array]"          # element types come from the Arr values
        if kv.key == b"general.alignment" and t == "u32":
            w.alignment = int(v)
        w.add(kv.key, t, v)
    for t in f.tensors:
        info = GGML_TYPES.get(t.type)
        if info is None:
            continue
        ne = list(t.ne)
        if t.nbytes is None or t.nbytes > 4096:
            ne = [info[1]] + [1] * (len(ne) - 1) if ne else []
            if not ne and info[1] != 1:
                ne = [info[1]]
        w.add_tensor(t.name, t.type, ne)
    return w.to_bytes()


def synthetic():
    """Files made with gguf_write.py covering the format's corners."""
    out = {}
    for version in (1, 2, 3):
        for be in (False, True):
            w = GGUFWriter(version=version, big_endian=be)
            w.add("general.architecture", "string", "llama")
            for i, t in enumerate(BASE):
                v = {"string": "héllo\nworld\\", "bool": 1, "f32": 1e-06, "f64": -0.0}.get(t, i + 1)
                w.add("test.%s" % t, t, v)
                w.add("test.arr_%s" % t, "array[%s]" % t,
                      ["a", "", "b\\c\nd\re"] if t == "string" else [0, 1, 1] if t == "bool" else
                      [0, 1.5, float("nan"), float("-inf")] if t in ("f32", "f64") else [0, 1, 2])
            w.add("test.empty", "array[u32]", [])
            w.add("test.nested", "array[array[i32]]", [[1, 2], [], [3]])
            w.add("test.nested_str", "array[array[string]]", [["x", "y\"z"], ["\u00e9\t"]])
            w.add("test.mixed", "array[array]", [Arr("i32", [1]), Arr("string", ["x"]), Arr("f32", [])])
            w.add("test.deep", "array[array[array[u8]]]", [[[1], [2, 3]], [[]]])
            # inner arrays whose texts parse as each other's type (fuzz_parse found
            # [true] beside [0, 0] of u8 not a fixpoint): not settable as text
            w.add("test.mixed_bool", "array[array]", [Arr("bool", [1]), Arr("u8", [0, 0])])
            w.add("general.name", "string", "dup")
            w.add("general.name", "string", "dup again")
            for tid in sorted(GGML_TYPES):
                name, bs, ts = GGML_TYPES[tid]
                if version == 1 and tid > 28:
                    continue
                w.add_tensor("t.%s" % name, tid, [bs, 2] if tid % 2 else [bs])
            w.add_tensor("scalar0d", "f32", [])
            out["synth-v%d%s.gguf" % (version, "-be" if be else "")] = w.to_bytes()
    for a in (1, 64, 4096):
        w = GGUFWriter(version=3, alignment=a)
        w.add("general.architecture", "string", "x")
        w.add_tensor("a", "f32", [3])
        w.add_tensor("b", "q4_0", [32, 2])
        out["synth-align%d.gguf" % a] = w.to_bytes()
    w = GGUFWriter(version=3)                      # tensors out of order, a gap
    w.add_tensor("late", "f32", [4], offset=64)
    w.add_tensor("early", "f16", [8], offset=0)
    out["synth-unordered.gguf"] = w.to_bytes()
    for version, be in ((1, True), (2, False), (3, False)):
        # type ids gguffs does not know: sizes come from the layout
        w = GGUFWriter(version=version, big_endian=be)
        w.add("general.architecture", "string", "x")
        w.add_tensor("a", "f32", [4])
        w.add_tensor("new", 57, [25, 4], data=bytes(range(40)))
        w.add_tensor("gone", 4, [32], data=bytes(20))
        w.add_tensor("b", "q4_0", [32])
        w.add_tensor("none", 1000, [0, 5])
        w.add_tensor("last", 0xFFFFFFFF, [7], data=bytes(range(7)))
        out["synth-unknown-v%d%s.gguf" % (version, "-be" if be else "")] = w.to_bytes()
    w = GGUFWriter(version=3)                      # no kv, no tensor
    out["synth-empty.gguf"] = w.to_bytes()
    w = GGUFWriter(version=3)                      # odd names
    w.add("", "u8", 1)
    w.add("a/b", "u8", 2)
    w.add(".hidden", "u8", 3)
    w.add("x#2", "u8", 4)
    w.add("x", "u8", 5)
    w.add("x", "u8", 6)
    w.add("%", "u8", 7)
    w.add_tensor("..", "f32", [1])
    w.add_tensor("n\x00ul", "f32", [1])
    w.add_tensor("y" * 70, "f32", [1])
    out["synth-names.gguf"] = w.to_bytes()
    return out


def parse_seeds():
    seeds = dict(synthetic())
    reals = corpus_real()
    for real in reals:
        for sub in ("", "nonstandard"):
            d = os.path.join(real, sub)
            for n in sorted(os.listdir(d)):
                p = os.path.join(d, n)
                if not n.endswith(".gguf") or not os.path.isfile(p) or "real-" + n in seeds \
                        or "shrunk-" + n in seeds:
                    continue
                with open(p, "rb") as fh:
                    b = fh.read()
                if len(b) <= 16384:
                    seeds["real-" + n] = b
                try:
                    f = pyreader.read_bytes(b)
                except pyreader.GGUFError:
                    continue
                seeds["shrunk-" + n] = shrink(f)
    if not reals:
        print("make_corpus: no real corpus (tests/corpus is missing); synthetic seeds only",
              file=sys.stderr)
    return seeds


def selector(type_, big_endian, v1):
    levels = type_.split("[")
    depth = len(levels) - 1
    base = levels[-1].rstrip("]")
    if base not in BASE or depth > 3:
        return None
    return BASE.index(base) | depth << 4 | (0x40 if big_endian else 0) | (0x80 if v1 else 0)


HAND = [
    ("f32", b"nan(0x1)\n"), ("f32", b"-nan\n"), ("f32", b"1e-45"), ("f32", b"0x1p-149"),
    ("f32", b"3.4028235e+38"), ("f32", b"-0"), ("f64", b"inf"), ("f64", b"2.2250738585072014e-308"),
    ("f64", b"nan(0x8000000000001)"), ("bool", b"true\n"), ("bool", b"255"), ("bool", b"0"),
    ("u64", b"18446744073709551615"), ("i64", b"-9223372036854775808\n"), ("i8", b"+12"),
    ("u8", b"256"), ("string", b"caf\xc3\xa9\n"), ("string", b"\xf0\x9f\x98\x80\n\n"),
    ("array[string]", b"a\\\\b\\nc\\r\n\n"), ("array[u32]", b"1\n2\n3"), ("array[f32]", b""),
    ("array[array[string]]", b'["\\u00e9", "\\ud83d\\ude00", "\\"\\\\\\/\\b\\f\\n\\r\\t"]\n[]\n'),
    ("array[array[f64]]", b"[1e300, -0, nan]\n[ ]\n"),
    ("array[array[array[bool]]]", b"[[true, false], [], [2]]\n"),
]


def value_seeds(parse_files):
    seeds = {}
    for name, b in sorted(parse_files.items()):
        try:
            f = pyreader.read_bytes(b)
        except pyreader.GGUFError:
            continue
        for i, kv in enumerate(f.kvs):
            sel = selector(kv.type, f.big_endian, f.version == 1)
            if sel is None:
                continue
            try:
                txt = expected_text(kv.type, kv.value)
            except (ValueError, TypeError):
                continue
            seeds["%s-kv%d" % (name, i)] = bytes([sel]) + txt[:8192]
    for i, (t, txt) in enumerate(HAND):
        for enc in (0, 0x40, 0x80):
            seeds["hand%d-%02x" % (i, enc)] = bytes([selector(t, False, False) | enc]) + txt
    # one seed per selector value with a plausible text
    for sel in range(256):
        base = BASE[(sel & 15) % 12]
        depth = (sel >> 4) & 3
        elem = {"string": b"x", "bool": b"true", "f32": b"1.5", "f64": b"-2.5"}.get(base, b"7")
        if base == "string" and depth >= 2:
            elem = b'"x"'
        txt = elem
        for d in range(depth - 1):
            txt = b"[" + txt + b", " + txt + b"]"
        seeds["sel%03d" % sel] = bytes([sel]) + txt + b"\n"
    return seeds


def roundtrip_seeds(parse_files):
    seeds = {}
    for name, b in sorted(parse_files.items()):
        try:
            pyreader.read_bytes(b)
        except pyreader.GGUFError:
            continue
        for s in (0, 1, 2, 3):       # seed 0 (mod 8): no edit; others edit
            seeds["%s-s%d" % (name, s)] = struct.pack("<Q", s * 0x9E3779B97F4A7C15 % (1 << 64) | (s != 0)) + b
    return seeds


def cksum(b):
    """gguf/journal.c gguf_cksum."""
    mul, mask = 0x9E3779B97F4A7C15, (1 << 64) - 1
    h = 0xCBF29CE484222325 ^ len(b)
    n8 = len(b) - len(b) % 8
    for i in range(0, n8, 8):
        h = ((h ^ int.from_bytes(b[i:i + 8], "little")) * mul) & mask
        h ^= h >> 29
    for c in b[n8:]:
        h = ((h ^ c) * mul) & mask
        h ^= h >> 29
    h = ((h ^ (h >> 32)) * mul) & mask
    return h ^ (h >> 29)


def overlay_file(identity, name, base_size, base_data, hdr):
    rec = bytearray(64)
    rec[:8] = b"GGUFFSOV"
    struct.pack_into("<IIQQQI", rec, 8, 1, len(identity), base_size, base_data, len(hdr), len(name))
    payload = identity + name + hdr
    struct.pack_into("<Q", rec, 48, cksum(payload))
    struct.pack_into("<Q", rec, 56, cksum(bytes(rec[:56])))
    return bytes(rec) + payload


def overlay_seeds(parse_files):
    seeds = {}
    for name, b in sorted(parse_files.items()):
        if len(b) > 65536 - 4096:
            continue
        try:
            f = pyreader.read_bytes(b)
        except pyreader.GGUFError:
            continue
        a = f.alignment
        data_off = (f.header_end + a - 1) // a * a       # gguffs' data start
        base_data = min(data_off, len(b))
        has_data = any(t.nbytes for t in f.tensors)
        hdr = b[:data_off] if has_data else b[:f.header_end]
        ov = overlay_file(b"fuzz:base", b"fuzz://base", len(b), base_data, hdr)
        pre = lambda flags: bytes([flags]) + struct.pack("<I", len(b)) + b  # noqa: E731
        seeds["%s-intact" % name] = pre(0) + ov
        seeds["%s-reseal" % name] = pre(1) + ov[:48] + bytes(16) + ov[64:]
        seeds["%s-damaged" % name] = pre(0) + ov[:-1] + bytes([ov[-1] ^ 1])
        if f.kvs:
            k = f.kvs[0].key
            at = b.find(k)
            if 0 <= at < len(hdr) and k[:1] != b"Z":
                hdr2 = hdr[:at] + b"Z" + hdr[at + 1:]
                seeds["%s-renamed" % name] = pre(1) + overlay_file(b"fuzz:base", b"", len(b), base_data, hdr2)
    return seeds


HTTP_HDR = {
    "nginx-206": "HTTP/1.1 206 Partial Content\r\nServer: nginx/1.22.1\r\n"
                 "Date: Sun, 23 Nov 2025 14:18:00 GMT\r\nContent-Type: application/octet-stream\r\n"
                 "Content-Length: 2097152\r\nLast-Modified: Sun, 23 Nov 2025 14:18:00 GMT\r\n"
                 "Connection: keep-alive\r\nETag: \"6b046837-600000\"\r\n"
                 "Content-Range: bytes 0-2097151/6291456\r\n\r\n",
    "hub-302": "HTTP/1.1 302 Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
               "Content-Length: 1338\r\nX-Linked-Size: 397808192\r\n"
               "X-Linked-ETag: \"6f9d1c0ee1f9d8d8b4e8a0d2f2c1b0a9\"\r\n"
               "Location: https://cdn-lfs.example.co/repos/ab/cd/abcdef?response-content-disposition="
               "attachment%3B+filename%2A%3DUTF-8%27%27m.gguf&Expires=1732380000&Signature=abc~def"
               "&Key-Pair-Id=K3ESJI6DHPFC7\r\nVary: Origin, Accept\r\n\r\n",
    "cdn-206": "HTTP/2 206 \r\ncontent-type: binary/octet-stream\r\ncontent-length: 1048576\r\n"
               "content-range: bytes 2097152-3145727/397808192\r\naccept-ranges: bytes\r\n"
               "last-modified: Tue, 07 May 2024 10:11:12 GMT\r\n"
               "etag: \"a1b2c3d4e5f60718293a4b5c6d7e8f90-24\"\r\nx-cache: Hit from cloudfront\r\n\r\n",
    "s3-weak": "HTTP/1.1 206 Partial Content\r\nETag: W/\"abc\"\r\n"
               "Content-Range: bytes 100-199/*\r\nContent-Length: 100\r\n\r\n",
    "200-whole": "HTTP/1.1 200 OK\r\nContent-Length: 102400\r\nETag: \"x\"\r\n\r\n",
    "416": "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */0\r\n\r\n",
    "429": "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 120\r\nContent-Length: 0\r\n\r\n",
    "503-date": "HTTP/1.1 503 Service Unavailable\r\nRetry-After: Fri, 31 Dec 1999 23:59:59 GMT\r\n\r\n",
    "interim": "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
               "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-0/1\r\n\r\n"
               "X-Trailer: after\r\n",
    "dates": "HTTP/1.0 304 x\r\nLast-Modified: Sunday, 06-Nov-94 08:49:37 GMT\r\n"
             "Last-Modified: Sun Nov  6 08:49:37 1994\r\n\r\n",
    "broken": "HTTP/1.1 206 x\r\nContent-Range: bytes 0-99/1000\r\nContent-Range: bytes 0-9/10\r\n"
              "Content-Length: 100\r\nContent-Length: 101\r\n folded\r\nETag: \"a\" \"b\"\r\n"
              "Location: /a b\r\nContent-Encoding: gzip, identity\r\n"
              "Content-Range: bytes 0-9223372036854775807/9223372036854775808\r\n\r\n",
    "no-status": "Content-Range: bytes 0-1/2\r\n\r\n",
    "bare-lf": "HTTP/1.1 302 Found\nLocation: //cdn/x\n\n",
}


def estimate_seeds(parse_files):
    """The parse seeds (whole headers and cut ones), each also with a last
    byte that makes the file large (fuzz_estimate.c)."""
    seeds = {}
    for name, b in parse_files.items():
        seeds[name] = b
        seeds[name + "-large"] = b + b"\x01"
    return seeds


def http_hdr_seeds():
    return {k: v.encode("latin-1") for k, v in HTTP_HDR.items()}


def write(out, seeds):
    os.makedirs(out, exist_ok=True)
    paths = []
    for name, b in sorted(seeds.items()):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        p = os.path.join(out, "%s-%s" % (safe[:80], hashlib.sha1(b).hexdigest()[:8]))
        if not os.path.exists(p):
            with open(p, "wb") as fh:
                fh.write(b)
        paths.append(p)
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", required=True, choices=["parse", "value", "roundtrip", "http_hdr",
                                                     "overlay", "estimate"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", help="fuzzer to replay the seeds with")
    a = ap.parse_args()
    if a.kind == "http_hdr":
        seeds = http_hdr_seeds()
    else:
        pf = parse_seeds()
        seeds = {"parse": lambda: pf, "value": lambda: value_seeds(pf),
                 "roundtrip": lambda: roundtrip_seeds(pf),
                 "overlay": lambda: overlay_seeds(pf),
                 "estimate": lambda: estimate_seeds(pf)}[a.kind]()
    paths = write(a.out, seeds)
    print("make_corpus: %d %s seeds in %s (%d bytes largest)" % (
        len(paths), a.kind, a.out, max(len(b) for b in seeds.values())))
    if a.run:
        r = subprocess.run([a.run, "-runs=1"] + paths, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
        text = r.stdout.decode(errors="replace")
        if r.returncode != 0:
            print(text[-6000:])
            print("FAIL: %s exited %d on its seeds" % (a.run, r.returncode))
            return 1
        print("replayed %d seeds through %s: ok" % (len(paths), os.path.basename(a.run)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

# Writes GGUF files in pure Python (no ggml): v1/v2/v3, either byte order, any alignment, nested arrays, duplicate keys, raw tensors.
"""
The project's own GGUF writer, for the demo model (scripts/make-demo),
the fuzzers' seeds, scripts/bench and for test files that
ggml's writer cannot make.  It writes exactly what it is told: it does not
reject duplicate keys, unknown tensor type ids, odd names or offsets that
overlap, so it can make unusual (and broken) files on purpose.

Module use:

    from gguf_write import GGUFWriter, Arr
    w = GGUFWriter(version=3, big_endian=False)
    w.add("general.architecture", "string", "llama")
    w.add("general.alignment", "u32", 64)          # sets the alignment too
    w.add("tokens", "array[string]", ["a", "b"])
    w.add("nested", "array[array[i32]]", [[1, 2], [3]])
    w.add("mixed", "array[array]", [Arr("i32", [1]), Arr("string", ["x"])])
    w.add("general.name", "string", "again")       # duplicate keys are kept
    w.add_tensor("tok.weight", "f32", [4, 2], data=bytes(32))
    w.write("out.gguf")

Value types are named as in the user.gguf.type attribute: u8 i8 u16 i16
u32 i32 u64 i64 f32 f64 bool string, and array[T] (T itself may be an
array type).  Strings may be str (UTF-8) or bytes.  An array value may be a
list, a numpy array, or an Arr(element type, items) (for arrays of arrays
whose inner arrays have different element types).

Layout: magic "GGUF", version, tensor count and key/value count (u32 in
v1, u64 after), the key/values, the tensor infos (dims are u32 in v1), then
zero padding up to the alignment (general.alignment if present, else 32),
then the tensor data.  Each tensor is placed at the next aligned offset
unless add_tensor was given an explicit offset; padding follows each tensor
as ggml's writer does.  Integers in the header and scalar values are
written in the chosen byte order; tensor data bytes are written as given.

CLI:  gguf_write.py OUT.gguf [--version N] [--big-endian] [--alignment N]
                    [--kv KEY TYPE VALUE]... [--tensor NAME TYPE DIMS]...
      DIMS is comma-separated (ggml order, ne[0] first); TYPE is a ggml
      type name, a type id or type_NN; tensor contents are an arange
      (f32/f16/f64/integers), zero bytes (other known types), or, for an id
      the writer has no size for, one byte per element: 0, 1, 2, ... (mod
      256).
"""
import argparse
import struct
import sys

from ggml_types import GGML_TYPES  # beside this file

VALUE_TYPES = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5,
               "f32": 6, "bool": 7, "string": 8, "array": 9, "u64": 10,
               "i64": 11, "f64": 12}
SCALAR_FMT = {"u8": "B", "i8": "b", "u16": "H", "i16": "h", "u32": "I",
              "i32": "i", "f32": "f", "bool": "B", "u64": "Q", "i64": "q",
              "f64": "d"}

TYPE_IDS = {v[0]: k for k, v in GGML_TYPES.items()}


class Arr:
    """An array value with an explicit element type (needed when the inner
    arrays of an array of arrays have different element types)."""
    __slots__ = ("etype", "items")

    def __init__(self, etype, items):
        self.etype = etype
        self.items = items


def parse_type(t):
    """"array[array[i32]]" -> ["array", "array", "i32"]; "array" alone (as
    in "array[array]") means "element types given by Arr values"."""
    levels = []
    while t.startswith("array[") and t.endswith("]"):
        levels.append("array")
        t = t[6:-1]
    levels.append(t)
    if t not in VALUE_TYPES:
        raise ValueError("unknown value type %r" % t)
    return levels


def type_id_of(t):
    """A tensor type as given: a ggml type name ("q4_K"), an id (57, or
    "57"), or "type_NN" (how gguffs shows an id it does not know)."""
    if not isinstance(t, str):
        return int(t)
    if t in TYPE_IDS:
        return TYPE_IDS[t]
    d = t[5:] if t.startswith("type_") else t
    if d.isdigit() and int(d) < 1 << 32:
        return int(d)
    raise ValueError("unknown tensor type %r" % t)


def tensor_nbytes(type_id, ne):
    name, bs, ts = GGML_TYPES[type_id]
    n = 1
    for d in ne:
        n *= d
    return n // bs * ts


class GGUFWriter:
    def __init__(self, version=3, big_endian=False, alignment=None):
        """version 1, 2 or 3 (any u32 is written, for broken files);
        alignment, if given, adds a general.alignment u32 key."""
        self.version = version
        self.e = ">" if big_endian else "<"
        self.kvs = []          # (key bytes, encoded type + value bytes)
        self.tensors = []      # dicts
        self.alignment = 32
        if alignment is not None:
            self.add("general.alignment", "u32", alignment)

    # -- encoding ---------------------------------------------------------

    def _pack(self, fmt, *v):
        return struct.pack(self.e + fmt, *v)

    def _count(self, n):
        return self._pack("I" if self.version == 1 else "Q", n)

    def _str(self, s):
        b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        return self._count(len(b)) + b

    def _scalar(self, t, v):
        if t == "string":
            return self._str(v)
        if t == "bool" and isinstance(v, bool):
            v = int(v)
        if t in ("f32", "f64"):
            v = float(v)
        else:
            v = int(v)
        return self._pack(SCALAR_FMT[t], v)

    def _array_body(self, levels, value):
        """Element type, count and elements of an array whose element type
        is levels[0] (if "array", levels[1:] describe the inner arrays).  An
        Arr value (anything with .etype and .items) brings its own element
        type, e.g. Arr("i32", ...), Arr("array[f32]", ...), or Arr("array",
        [Arr(...), ...])."""
        if hasattr(value, "etype"):
            levels = parse_type(value.etype)
            value = value.items
        et = levels[0]
        items = list(value)
        out = [self._pack("I", VALUE_TYPES[et]), self._count(len(items))]
        if et == "array":
            for x in items:
                if not hasattr(x, "etype") and len(levels) < 2:
                    raise ValueError("inner element type unknown: give Arr values")
                out.append(self._array_body(levels[1:], x))
        elif et in SCALAR_FMT and et != "bool":
            # one struct call for the whole numeric array
            vals = [float(x) if et in ("f32", "f64") else int(x) for x in items]
            out.append(struct.pack("%s%d%s" % (self.e, len(vals), SCALAR_FMT[et]), *vals))
        else:
            out.extend(self._scalar(et, x) for x in items)
        return b"".join(out)

    def encode_value(self, type_, value):
        """The bytes after the key: value type, then the value."""
        levels = parse_type(type_)
        if levels[0] == "array":
            return self._pack("I", VALUE_TYPES["array"]) + self._array_body(levels[1:], value)
        return self._pack("I", VALUE_TYPES[levels[0]]) + self._scalar(levels[0], value)

    # -- building ---------------------------------------------------------

    def add(self, key, type_, value):
        """Adds a key/value (duplicates are kept, in order)."""
        kb = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        self.kvs.append((kb, self.encode_value(type_, value)))
        if kb == b"general.alignment" and type_ == "u32" and not any(
                k == kb for k, _ in self.kvs[:-1]):
            self.alignment = int(value)
        return self

    def add_raw_kv(self, key, raw):
        """Adds a key whose type+value bytes are given as is (broken files)."""
        kb = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        self.kvs.append((kb, bytes(raw)))
        return self

    def add_tensor(self, name, type_, ne, data=None, offset=None, check=True):
        """Adds a tensor: type_ is a ggml type name or id, or "type_NN" (any
        u32 id: ids ggml does not know, or has removed, are written as
        given), ne its dims in ggml order (ne[0] = row length, 0 to 4 or
        more dims as given), data its bytes (zeros of the right size if
        None; nothing for an id this writer has no size for), offset its
        offset in the data section (None: next aligned).  With check, data
        must have the size the type and dims imply (when the writer knows
        the type)."""
        tid = type_id_of(type_)
        if data is None:
            data = bytes(tensor_nbytes(tid, ne)) if tid in GGML_TYPES else b""
        if check and tid in GGML_TYPES and len(data) != tensor_nbytes(tid, ne):
            raise ValueError("tensor %r: %d bytes given, %s %r takes %d"
                             % (name, len(data), GGML_TYPES[tid][0], ne, tensor_nbytes(tid, ne)))
        nb = name.encode("utf-8") if isinstance(name, str) else bytes(name)
        self.tensors.append({"name": nb, "type": tid, "ne": list(ne),
                             "data": bytes(data), "offset": offset})
        return self

    def header_size(self):
        """Size of the header before the padding layout() adds."""
        return len(self._header())

    def _header(self):
        """Assigns offsets; the header without its padding."""
        a = self.alignment
        pos = 0
        for t in self.tensors:
            if t["offset"] is None:
                t["offset"] = (pos + a - 1) // a * a
            pos = max(pos, t["offset"] + len(t["data"]))
        hdr = [b"GGUF", self._pack("I", self.version),
               self._count(len(self.tensors)), self._count(len(self.kvs))]
        for k, v in self.kvs:
            hdr.append(self._str(k) + v)
        for t in self.tensors:
            hdr.append(self._str(t["name"]))
            hdr.append(self._pack("I", len(t["ne"])))
            hdr.extend(self._count(d) for d in t["ne"])
            hdr.append(self._pack("I", t["type"]))
            hdr.append(self._pack("Q", t["offset"]))
        return b"".join(hdr)

    def layout(self):
        """Assigns offsets; returns (header bytes incl. padding, data bytes)."""
        a = self.alignment
        hdr = self._header()
        if self.tensors:
            hdr += bytes((-len(hdr)) % a)
        data = bytearray()
        for t in self.tensors:
            end = t["offset"] + len(t["data"])
            if len(data) < end:
                data.extend(bytes(end - len(data)))
            data[t["offset"]:end] = t["data"]
        if self.tensors:
            data.extend(bytes((-len(data)) % a))
        return hdr, bytes(data)

    def to_bytes(self):
        hdr, data = self.layout()
        return hdr + data

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())
        return path


def arange_bytes(type_name, n, e="<"):
    """Tensor contents 0, 1, 2, ... for plain numeric types."""
    fmt = {"f32": "f", "f16": "e", "f64": "d", "i8": "b", "i16": "h",
           "i32": "i", "i64": "q"}[type_name]
    if type_name == "i8":
        vals = [(i + 128) % 256 - 128 for i in range(n)]
    else:
        vals = [float(i) if fmt in "fed" else i for i in range(n)]
    return struct.pack("%s%d%s" % (e, n, fmt), *vals)


# Big-endian tensor data as gguf-py's gguf_convert_endian.py makes it
# (byteswap_tensors, newest version): plain types element by element;
# q4_0, q8_0 their f16 scale d (bytes 0-1); q4_K d and dmin (bytes 0-1,
# 2-3); q6_K d (bytes 208-209); mxfp4 and nvfp4 nothing.  {type: (block bytes,
# offsets of its 2-byte fields)}; other quantized types have no
# big-endian layout.
BE_BLOCKS = {"q4_0": (18, (0,)), "q8_0": (34, (0,)), "q4_K": (144, (0, 2)),
             "q6_K": (210, (208,)), "mxfp4": (17, ()), "nvfp4": (36, ())}
PLAIN_SIZES = {"i8": 1, "f16": 2, "bf16": 2, "i16": 2, "f32": 4, "i32": 4, "f64": 8, "i64": 8}


def byteswap_tensor(type_name, raw):
    """raw (a tensor's bytes) in the other byte order, as
    gguf_convert_endian.py converts it (its own inverse); ValueError for a
    type it cannot convert."""
    raw = bytearray(raw)
    if type_name in PLAIN_SIZES:
        k = PLAIN_SIZES[type_name]
        for i in range(0, len(raw) - k + 1, k):
            raw[i:i + k] = raw[i:i + k][::-1]
        return bytes(raw)
    if type_name not in BE_BLOCKS:
        raise ValueError("gguf_convert_endian.py cannot convert %s" % type_name)
    size, fields = BE_BLOCKS[type_name]
    for b in range(0, len(raw) - size + 1, size):
        for f in fields:
            raw[b + f], raw[b + f + 1] = raw[b + f + 1], raw[b + f]
    return bytes(raw)


def _parse_cli_value(type_, text):
    levels = parse_type(type_)
    if levels[0] == "array":
        import json
        return json.loads(text)
    if type_ == "string":
        return text
    if type_ == "bool":
        return text in ("1", "true")
    return float(text) if type_ in ("f32", "f64") else int(text, 0)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write a GGUF file (pure Python).")
    ap.add_argument("out")
    ap.add_argument("--version", type=int, default=3)
    ap.add_argument("--big-endian", action="store_true")
    ap.add_argument("--alignment", type=int)
    ap.add_argument("--kv", nargs=3, action="append", default=[],
                    metavar=("KEY", "TYPE", "VALUE"),
                    help="array values as JSON, e.g. '[1,2]'")
    ap.add_argument("--tensor", nargs=3, action="append", default=[],
                    metavar=("NAME", "TYPE", "DIMS"))
    args = ap.parse_args(argv)
    w = GGUFWriter(args.version, args.big_endian, args.alignment)
    for k, t, v in args.kv:
        w.add(k, t, _parse_cli_value(t, v))
    for name, t, dims in args.tensor:
        ne = [int(d) for d in dims.split(",")]
        n = 1
        for d in ne:
            n *= d
        tid = type_id_of(t)
        if tid not in GGML_TYPES:
            data = bytes(i % 256 for i in range(n))
        elif GGML_TYPES[tid][0] in ("f32", "f16", "f64", "i8", "i16", "i32", "i64"):
            data = arange_bytes(GGML_TYPES[tid][0], n, w.e)
        else:
            data = None
        w.add_tensor(name, tid, ne, data)
    w.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

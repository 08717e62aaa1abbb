# A tiny independent pure-Python GGUF reader (v1/v2/v3, either byte order, nested arrays, duplicate keys) for test oracles.
"""
Used where ggml's own reader refuses a file whose meaning is unambiguous
(GGUF v1, duplicate keys, nested arrays, big-endian files) and to
cross-check ggml where both work.  It shares no code with gguffs.

    f = read("model.gguf")
    f.version, f.big_endian, f.alignment, f.data_offset, f.file_size
    for kv in f.kvs:      kv.key (bytes), kv.type ("u32", "array[string]"...), kv.value
    for t in f.tensors:   t.name (bytes), t.ne (list, ggml order), t.type (id),
                          t.offset (relative to data_offset), t.nbytes (or None
                          for an unknown type)

Values: integers are Python ints; f32/f64 are numpy.float32/float64 scalars
(bits preserved); bool is the stored byte as an int (0/1 normally); string
is bytes; an array is an Arr(etype, items) where items is a numpy array for
numeric and bool elements, a list of bytes for strings, and a list of Arr
for nested arrays.
"""
import struct

import numpy as np

from ggml_types import GGML_TYPES  # beside this file

SCALAR_NAMES = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32",
                6: "f32", 7: "bool", 8: "string", 10: "u64", 11: "i64",
                12: "f64"}
ARRAY = 9
NUMPY = {"u8": "u1", "i8": "i1", "u16": "u2", "i16": "i2", "u32": "u4",
         "i32": "i4", "f32": "f4", "bool": "u1", "u64": "u8", "i64": "i8",
         "f64": "f8"}
MAX_NEST = 8


class GGUFError(Exception):
    def __init__(self, msg, offset):
        super().__init__("%s (at byte offset %d)" % (msg, offset))
        self.msg = msg
        self.offset = offset


class Arr:
    """An array value: element type name and items."""
    __slots__ = ("etype", "items")

    def __init__(self, etype, items):
        self.etype = etype
        self.items = items

    def __len__(self):
        return len(self.items)

    def __repr__(self):
        return "Arr(%r, %r)" % (self.etype, self.items)


class KV:
    __slots__ = ("key", "type", "value", "offset")

    def __init__(self, key, type_, value, offset):
        self.key, self.type, self.value, self.offset = key, type_, value, offset


class Tensor:
    __slots__ = ("name", "ne", "type", "offset", "nbytes", "info_offset")

    def __init__(self, name, ne, type_, offset, nbytes, info_offset):
        self.name, self.ne, self.type = name, ne, type_
        self.offset, self.nbytes, self.info_offset = offset, nbytes, info_offset

    @property
    def type_name(self):
        t = GGML_TYPES.get(self.type)
        return t[0] if t else None

    @property
    def n_elems(self):
        n = 1
        for d in self.ne:
            n *= d
        return n


class GGUFFile:
    pass


class _Cursor:
    def __init__(self, buf, big_endian, v1):
        self.buf = buf
        self.pos = 0
        self.e = ">" if big_endian else "<"
        self.v1 = v1

    def need(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("%s runs past the end of the file" % what, self.pos)

    def unpack(self, fmt, what):
        size = struct.calcsize(fmt)
        self.need(size, what)
        v = struct.unpack_from(self.e + fmt, self.buf, self.pos)[0]
        self.pos += size
        return v

    def count(self, what):
        return self.unpack("I" if self.v1 else "Q", what)

    def string(self, what):
        n = self.count(what + " length")
        self.need(n, what)
        s = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return s


def _read_value(c, vtype, depth, what):
    if vtype == ARRAY:
        if depth >= MAX_NEST:
            raise GGUFError("%s: arrays nested too deeply" % what, c.pos)
        at = c.pos
        etype = c.unpack("I", what + " element type")
        if etype not in SCALAR_NAMES and etype != ARRAY:
            raise GGUFError("%s: unknown array element type %d" % (what, etype), at)
        n = c.count(what + " element count")
        if etype == ARRAY:
            if n > len(c.buf):
                raise GGUFError("%s: impossible element count" % what, at + 4)
            items = [_read_value(c, ARRAY, depth + 1, what) for _ in range(n)]
            return Arr("array", items)
        name = SCALAR_NAMES[etype]
        if name == "string":
            if n > len(c.buf):
                raise GGUFError("%s: impossible element count" % what, at + 4)
            return Arr(name, [c.string(what) for _ in range(n)])
        dt = np.dtype(NUMPY[name]).newbyteorder(c.e)
        c.need(n * dt.itemsize, what)
        a = np.frombuffer(c.buf, dtype=dt, count=n, offset=c.pos).astype(dt.newbyteorder("="))
        c.pos += n * dt.itemsize
        return Arr(name, a)
    name = SCALAR_NAMES.get(vtype)
    if name is None:
        raise GGUFError("%s: unknown value type %d" % (what, vtype), c.pos - 4)
    if name == "string":
        return c.string(what)
    dt = np.dtype(NUMPY[name]).newbyteorder(c.e)
    c.need(dt.itemsize, what)
    v = np.frombuffer(c.buf, dtype=dt, count=1, offset=c.pos).astype(dt.newbyteorder("="))[0]
    c.pos += dt.itemsize
    if name in ("f32", "f64"):
        return v
    return int(v)


def value_type_string(vtype, value):
    """The user.gguf.type text: nested element types come from the first
    element; an empty array of arrays reports array[array[u8]]."""
    if vtype != ARRAY:
        return SCALAR_NAMES[vtype]
    return _arr_type_string(value)


def _arr_type_string(a):
    if a.etype == "array":
        if len(a.items) == 0:
            return "array[array[u8]]"
        return "array[%s]" % _arr_type_string(a.items[0])
    return "array[%s]" % a.etype


def read_bytes(buf):
    buf = memoryview(buf)
    if len(buf) < 8:
        raise GGUFError("file too short for a GGUF header", 0)
    if bytes(buf[:4]) != b"GGUF":
        raise GGUFError("bad magic", 0)
    v_le = struct.unpack_from("<I", buf, 4)[0]
    v_be = struct.unpack_from(">I", buf, 4)[0]
    if 1 <= v_le <= 3:
        big, version = False, v_le
    elif 1 <= v_be <= 3:
        big, version = True, v_be
    else:
        raise GGUFError("unsupported version", 4)
    c = _Cursor(buf, big, version == 1)
    c.pos = 8
    n_tensors = c.count("tensor count")
    n_kv = c.count("key/value count")
    f = GGUFFile()
    f.version, f.big_endian, f.file_size = version, big, len(buf)
    f.kvs, f.tensors = [], []
    f.alignment = 32
    for i in range(n_kv):
        at = c.pos
        key = c.string("key")
        vtype = c.unpack("I", "value type")
        value = _read_value(c, vtype, 0, "key %r" % key)
        f.kvs.append(KV(key, value_type_string(vtype, value), value, at))
        if key == b"general.alignment" and SCALAR_NAMES.get(vtype) == "u32":
            f.alignment = value
    if f.alignment == 0 or f.alignment & (f.alignment - 1):
        raise GGUFError("general.alignment is not a power of two", 0)
    for i in range(n_tensors):
        at = c.pos
        name = c.string("tensor name")
        n_dims = c.unpack("I", "tensor dims")
        if n_dims > 4:
            raise GGUFError("too many dimensions", at)
        ne = [c.count("tensor dim") for _ in range(n_dims)]   # u32 in v1
        ttype = c.unpack("I", "tensor type")
        off = c.unpack("Q", "tensor offset")
        info = GGML_TYPES.get(ttype)
        nbytes = None
        if info:
            n = 1
            for d in ne:
                n *= d
            nbytes = n // info[1] * info[2]
        f.tensors.append(Tensor(name, ne, ttype, off, nbytes, at))
    hdr_end = c.pos
    f.header_end = hdr_end
    a = f.alignment
    # Like ggml: with no tensors there is no data section to align.
    f.data_offset = (hdr_end + a - 1) // a * a if n_tensors else hdr_end
    return f


def read(path):
    with open(path, "rb") as fh:
        return read_bytes(fh.read())


if __name__ == "__main__":
    import sys
    for p in sys.argv[1:]:
        f = read(p)
        print(p, "v%d" % f.version, "BE" if f.big_endian else "LE",
              "align", f.alignment, "data", f.data_offset)
        for kv in f.kvs:
            v = kv.value
            s = repr(v if not isinstance(v, Arr) else "[%d items]" % len(v))
            print("  %s %s %s" % (kv.key.decode(errors="replace"), kv.type, s[:60]))
        for t in f.tensors:
            print("  T %s %s %s off=%d nbytes=%s" % (t.name.decode(errors="replace"),
                  t.type_name, t.ne, t.offset, t.nbytes))

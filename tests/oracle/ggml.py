# ggml's own GGUF reader, writer, quantizers and dequantizers (libggml-base.so from npm) via ctypes, as a test oracle.
"""
The library is the one scripts/fetch-oracle downloads; its path comes from
env GGUFFS_ORACLE (default: .deps/oracle/... under the source tree).  No
headers ship with it, so the prototypes below are declared by hand from
ggml/include/ggml.h and gguf.h of the same ggml generation (types up to
Q2_0 = 42, gguf_get_tensor_ne present); check_abi() verifies the struct
layouts it relies on at load time.

    read_gguf(path)          -> Model or None if ggml refuses the file
    write_model(path, kvs, tensors, seed=0) -> list of written tensors
    dequant(type, raw)       -> numpy float32 array (ggml's to_float)
    quantize(type, floats)   -> bytes
    expected_text(type, value)  (from expected.py, computed in Python)

Nothing here aborts the process on bad input that Python can check first
(ggml calls abort() on misuse): block-size multiples, duplicate names, key
types are checked before calling into ggml.
"""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from expected import expected_text, texts_match, first_difference  # noqa: E402,F401 (re-exported)

__all__ = ["read_gguf", "write_model", "dequant", "quantize", "expected_text", "texts_match",
           "first_difference", "ggml_types", "type_id", "quantizable_types", "has_to_float",
           "last_log", "version"]
from pyreader import Arr, GGML_TYPES  # noqa: E402

GGUF_TYPE_IDS = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5,
                 "f32": 6, "bool": 7, "string": 8, "array": 9, "u64": 10,
                 "i64": 11, "f64": 12}
GGUF_TYPE_NAMES = {v: k for k, v in GGUF_TYPE_IDS.items()}
NUMPY = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16,
         "u32": np.uint32, "i32": np.int32, "f32": np.float32, "bool": np.uint8,
         "u64": np.uint64, "i64": np.int64, "f64": np.float64}
GGML_COUNT = 43   # GGML_TYPE_COUNT of this ggml


def default_lib_path():
    p = os.environ.get("GGUFFS_ORACLE")
    if p:
        return p
    src = os.environ.get("GGUFFS_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
    return os.path.join(src, ".deps/oracle/package/bins/linux-x64/libggml-base.so")


class gguf_init_params(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(ctypes.c_void_p))]


class ggml_init_params(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p),
                ("no_alloc", ctypes.c_bool)]


to_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
from_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class ggml_type_traits(ctypes.Structure):
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


log_cb_t = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_lib = None
_log_messages = []


@log_cb_t
def _log_cb(level, text, user):
    _log_messages.append(text.decode(errors="replace") if text else "")


def lib():
    """Loads libggml-base.so once and declares the prototypes."""
    global _lib
    if _lib is not None:
        return _lib
    path = default_lib_path()
    if not os.path.exists(path):
        raise FileNotFoundError("ggml oracle library not found: %s (run scripts/fetch-oracle)" % path)
    L = ctypes.CDLL(path)
    P, c = ctypes.c_void_p, ctypes
    sig = {
        "ggml_log_set": (None, [log_cb_t, P]),
        "gguf_init_from_file": (P, [c.c_char_p, gguf_init_params]),
        "gguf_init_empty": (P, []),
        "gguf_free": (None, [P]),
        "gguf_get_version": (c.c_uint32, [P]),
        "gguf_get_alignment": (c.c_size_t, [P]),
        "gguf_get_data_offset": (c.c_size_t, [P]),
        "gguf_get_n_kv": (c.c_int64, [P]),
        "gguf_get_key": (c.c_char_p, [P, c.c_int64]),
        "gguf_get_kv_type": (c.c_int, [P, c.c_int64]),
        "gguf_get_arr_type": (c.c_int, [P, c.c_int64]),
        "gguf_get_arr_n": (c.c_size_t, [P, c.c_int64]),
        "gguf_get_arr_data": (P, [P, c.c_int64]),
        "gguf_get_arr_str": (c.c_char_p, [P, c.c_int64, c.c_size_t]),
        "gguf_get_val_data": (P, [P, c.c_int64]),
        "gguf_get_val_str": (c.c_char_p, [P, c.c_int64]),
        "gguf_get_n_tensors": (c.c_int64, [P]),
        "gguf_get_tensor_name": (c.c_char_p, [P, c.c_int64]),
        "gguf_get_tensor_type": (c.c_int, [P, c.c_int64]),
        "gguf_get_tensor_offset": (c.c_size_t, [P, c.c_int64]),
        "gguf_get_tensor_size": (c.c_size_t, [P, c.c_int64]),
        "gguf_get_tensor_ne": (c.POINTER(c.c_int64), [P, c.c_int64]),
        "gguf_set_val_u8": (None, [P, c.c_char_p, c.c_uint8]),
        "gguf_set_val_i8": (None, [P, c.c_char_p, c.c_int8]),
        "gguf_set_val_u16": (None, [P, c.c_char_p, c.c_uint16]),
        "gguf_set_val_i16": (None, [P, c.c_char_p, c.c_int16]),
        "gguf_set_val_u32": (None, [P, c.c_char_p, c.c_uint32]),
        "gguf_set_val_i32": (None, [P, c.c_char_p, c.c_int32]),
        "gguf_set_val_f32": (None, [P, c.c_char_p, c.c_float]),
        "gguf_set_val_u64": (None, [P, c.c_char_p, c.c_uint64]),
        "gguf_set_val_i64": (None, [P, c.c_char_p, c.c_int64]),
        "gguf_set_val_f64": (None, [P, c.c_char_p, c.c_double]),
        "gguf_set_val_bool": (None, [P, c.c_char_p, c.c_bool]),
        "gguf_set_val_str": (None, [P, c.c_char_p, c.c_char_p]),
        "gguf_set_arr_data": (None, [P, c.c_char_p, c.c_int, P, c.c_size_t]),
        "gguf_set_arr_str": (None, [P, c.c_char_p, c.POINTER(c.c_char_p), c.c_size_t]),
        "gguf_add_tensor": (None, [P, P]),
        "gguf_write_to_file": (c.c_bool, [P, c.c_char_p, c.c_bool]),
        "ggml_init": (P, [ggml_init_params]),
        "ggml_free": (None, [P]),
        "ggml_tensor_overhead": (c.c_size_t, []),
        "ggml_new_tensor": (P, [P, c.c_int, c.c_int, c.POINTER(c.c_int64)]),
        "ggml_set_name": (P, [P, c.c_char_p]),
        "ggml_get_data": (P, [P]),
        "ggml_nbytes": (c.c_size_t, [P]),
        "ggml_type_name": (c.c_char_p, [c.c_int]),
        "ggml_blck_size": (c.c_int64, [c.c_int]),
        "ggml_type_size": (c.c_size_t, [c.c_int]),
        "ggml_row_size": (c.c_size_t, [c.c_int, c.c_int64]),
        "ggml_is_quantized": (c.c_bool, [c.c_int]),
        "ggml_get_type_traits": (c.POINTER(ggml_type_traits), [c.c_int]),
        "ggml_quantize_init": (None, [c.c_int]),
        "ggml_quantize_requires_imatrix": (c.c_bool, [c.c_int]),
        "ggml_quantize_chunk": (c.c_size_t, [c.c_int, P, P, c.c_int64, c.c_int64,
                                             c.c_int64, P]),
        "ggml_version": (c.c_char_p, []),
        "ggml_commit": (c.c_char_p, []),
    }
    for name, (res, args) in sig.items():
        fn = getattr(L, name)
        fn.restype, fn.argtypes = res, args
    L.ggml_log_set(_log_cb, None)
    _lib = L
    check_abi()
    return L


def check_abi():
    """The type traits struct layout and the type table agree with what
    ggml reports through its plain functions, and with pyreader's table."""
    L = _lib
    for t in range(GGML_COUNT):
        tr = L.ggml_get_type_traits(t).contents
        bs, ts = L.ggml_blck_size(t), L.ggml_type_size(t)
        if bs == 0:   # removed id
            continue
        assert tr.type_name == L.ggml_type_name(t), (t, tr.type_name)
        assert tr.blck_size == bs and tr.type_size == ts, (t, tr.blck_size, bs, tr.type_size, ts)
        if t in GGML_TYPES:
            assert GGML_TYPES[t] == (tr.type_name.decode(), bs, ts), (t, GGML_TYPES[t])


def ggml_types():
    """{id: (name, blck_size, type_size)} for every type this ggml knows."""
    L = lib()
    out = {}
    for t in range(GGML_COUNT):
        bs = L.ggml_blck_size(t)
        if bs:
            out[t] = (L.ggml_type_name(t).decode(), bs, L.ggml_type_size(t))
    return out


def type_id(name_or_id):
    if isinstance(name_or_id, int):
        return name_or_id
    for t, (n, _, _) in ggml_types().items():
        if n == name_or_id:
            return t
    raise KeyError(name_or_id)


def version():
    L = lib()
    return "%s (%s)" % (L.ggml_version().decode(), L.ggml_commit().decode())


# ---------------------------------------------------------------- reading

class Model:
    """What ggml reads from a file."""

    def __init__(self):
        self.version = self.alignment = self.data_offset = None
        self.kvs = []       # (key bytes, type string, value)
        self.tensors = []   # TensorInfo


class TensorInfo:
    __slots__ = ("name", "type_name", "type", "ne", "offset", "nbytes")

    def __repr__(self):
        return "TensorInfo(%r, %s, %r, off=%d, nbytes=%d)" % (
            self.name, self.type_name, self.ne, self.offset, self.nbytes)


def _read_array(L, ctx, i):
    et = L.gguf_get_arr_type(ctx, i)
    n = L.gguf_get_arr_n(ctx, i)
    ename = GGUF_TYPE_NAMES[et]
    if ename == "string":
        return Arr("string", [L.gguf_get_arr_str(ctx, i, j) for j in range(n)])
    if ename == "array":
        raise ValueError("ggml returned a nested array")
    dt = np.dtype(NUMPY[ename])
    if n == 0:
        return Arr(ename, np.zeros(0, dtype=dt))
    p = L.gguf_get_arr_data(ctx, i)
    buf = ctypes.string_at(p, n * dt.itemsize)
    return Arr(ename, np.frombuffer(buf, dtype=dt).copy())


def read_gguf(path):
    """Reads path with gguf_init_from_file; None if ggml refuses it (the
    reason is in last_log())."""
    L = lib()
    del _log_messages[:]
    ctx = L.gguf_init_from_file(os.fsencode(path), gguf_init_params(True, None))
    if not ctx:
        return None
    try:
        m = Model()
        m.version = L.gguf_get_version(ctx)
        m.alignment = L.gguf_get_alignment(ctx)
        m.data_offset = L.gguf_get_data_offset(ctx)
        for i in range(L.gguf_get_n_kv(ctx)):
            key = L.gguf_get_key(ctx, i)
            t = GGUF_TYPE_NAMES[L.gguf_get_kv_type(ctx, i)]
            if t == "array":
                v = _read_array(L, ctx, i)
                tname = "array[%s]" % v.etype
            elif t == "string":
                v, tname = L.gguf_get_val_str(ctx, i), t
            else:
                dt = np.dtype(NUMPY[t])
                raw = ctypes.string_at(L.gguf_get_val_data(ctx, i), dt.itemsize)
                v = np.frombuffer(raw, dtype=dt)[0]
                if t not in ("f32", "f64"):
                    v = int(v)
                tname = t
            m.kvs.append((key, tname, v))
        for i in range(L.gguf_get_n_tensors(ctx)):
            ti = TensorInfo()
            ti.name = L.gguf_get_tensor_name(ctx, i)
            ti.type = L.gguf_get_tensor_type(ctx, i)
            ti.type_name = L.ggml_type_name(ti.type).decode()
            nep = L.gguf_get_tensor_ne(ctx, i)
            ti.ne = [nep[d] for d in range(4)]
            ti.offset = L.gguf_get_tensor_offset(ctx, i)
            ti.nbytes = L.gguf_get_tensor_size(ctx, i)
            m.tensors.append(ti)
        return m
    finally:
        L.gguf_free(ctx)


def last_log():
    return "".join(_log_messages).strip()


# ------------------------------------------------- quantizing / dequantizing

def _traits(t):
    return lib().ggml_get_type_traits(t).contents


def quantize(t, x, n_per_row=None):
    """Encodes float32 array x (rows of n_per_row elements) as ggml type t
    (id or name) with ggml's own quantizer; returns bytes."""
    L = lib()
    t = type_id(t)
    x = np.ascontiguousarray(x, dtype=np.float32).ravel()
    n = x.size
    n_per_row = n_per_row or n
    bs = L.ggml_blck_size(t)
    if n_per_row % bs or n % n_per_row:
        raise ValueError("%d elements in rows of %d do not fit blocks of %d"
                         % (n, n_per_row, bs))
    nrows = n // n_per_row
    size = L.ggml_row_size(t, n_per_row) * nrows
    dst = ctypes.create_string_buffer(max(size, 1))
    name = L.ggml_type_name(t).decode()
    if name in ("q8_1", "q8_K"):
        # Not offered by ggml_quantize_chunk: use the reference row quantizer.
        fn = from_float_t(_traits(t).from_float_ref)
        fn(x.ctypes.data, ctypes.addressof(dst), n)
    else:
        L.ggml_quantize_init(t)
        imatrix = None
        if L.ggml_quantize_requires_imatrix(t):
            im = np.ones(n_per_row, dtype=np.float32)
            imatrix = im.ctypes.data
        got = L.ggml_quantize_chunk(t, x.ctypes.data, ctypes.addressof(dst), 0,
                                    nrows, n_per_row, imatrix)
        assert got == size, (name, got, size)
    return dst.raw[:size]


def dequant(t, raw):
    """ggml's dequantization of raw (bytes of type t) to float32.  Types
    without to_float (f32, integers, f64) are converted value by value."""
    t = type_id(t)
    name, bs, ts = ggml_types()[t]
    raw = bytes(raw)
    if len(raw) % ts:
        raise ValueError("%d bytes is not a whole number of %s blocks" % (len(raw), name))
    n = len(raw) // ts * bs
    simple = {"f32": "<f4", "i8": "i1", "i16": "<i2", "i32": "<i4", "i64": "<i8", "f64": "<f8"}
    if name in simple:
        return np.frombuffer(raw, dtype=simple[name]).astype(np.float32)
    tr = _traits(t)
    if not tr.to_float:
        raise ValueError("ggml has no to_float for %s" % name)
    out = np.empty(n, dtype=np.float32)
    src = ctypes.create_string_buffer(raw, max(len(raw), 1))
    to_float_t(tr.to_float)(ctypes.addressof(src), out.ctypes.data, n)
    return out


def has_to_float(t):
    name = ggml_types()[type_id(t)][0]
    return name in ("f32", "i8", "i16", "i32", "i64", "f64") or bool(_traits(type_id(t)).to_float)


def random_tensor_bytes(t, ne, rng):
    """Random contents for a tensor of type t and shape ne (ggml order):
    random integers for integer types, float64 for f64, otherwise random
    floats encoded with ggml's quantizer.  Returns (raw bytes, source)."""
    name = ggml_types()[type_id(t)][0]
    n = int(np.prod(ne)) if ne else 1
    ints = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64}
    if name in ints:
        info = np.iinfo(ints[name])
        a = rng.integers(info.min, info.max, size=n, dtype=ints[name], endpoint=True)
        return a.astype(np.dtype(ints[name]).newbyteorder("<")).tobytes(), a
    if name == "f64":
        a = rng.standard_normal(n) * 1000
        return a.astype("<f8").tobytes(), a
    if name == "f32":
        a = rng.standard_normal(n).astype(np.float32)
        return a.astype("<f4").tobytes(), a
    a = rng.standard_normal(n).astype(np.float32)
    return quantize(t, a, ne[0]), a


# ---------------------------------------------------------------- writing

def _set_kv(L, ctx, key, tname, value):
    k = key if isinstance(key, bytes) else key.encode()
    if tname == "string":
        L.gguf_set_val_str(ctx, k, value if isinstance(value, bytes) else value.encode())
    elif tname.startswith("array["):
        et = tname[6:-1]
        items = value.items if isinstance(value, Arr) else value
        if et == "string":
            enc = [s if isinstance(s, bytes) else s.encode() for s in items]
            arr = (ctypes.c_char_p * max(len(enc), 1))(*enc)
            L.gguf_set_arr_str(ctx, k, arr, len(enc))
        elif et in NUMPY:
            a = np.ascontiguousarray(np.asarray(items).astype(NUMPY[et]))
            L.gguf_set_arr_data(ctx, k, GGUF_TYPE_IDS[et], a.ctypes.data if a.size else None, a.size)
        else:
            raise ValueError("ggml cannot write %s" % tname)
    elif tname in NUMPY:
        fn = getattr(L, "gguf_set_val_" + tname)
        fn(ctx, k, bool(value) if tname == "bool" else value)
    else:
        raise ValueError("unknown type %r" % tname)


def write_model(path, kvs, tensors, seed=0):
    """Writes path with ggml's gguf writer.

    kvs: [(key, type string, value)], values as in expected.py (arrays may
    be plain lists).  Keys must be unique (ggml overwrites duplicates).
    tensors: [(name, type name or id, ne list in ggml order[, raw bytes])];
    without raw bytes random contents are made (see random_tensor_bytes).
    Returns [(name, type id, ne, raw bytes, source values or None)].
    """
    L = lib()
    rng = np.random.default_rng(seed)
    seen = set()
    for key, tname, _ in kvs:
        kb = key if isinstance(key, bytes) else key.encode()
        if kb in seen:
            raise ValueError("duplicate key %r (ggml would overwrite it)" % kb)
        seen.add(kb)
    made = []
    total = 0
    for spec in tensors:
        name, t, ne = spec[0], type_id(spec[1]), list(spec[2])
        tname, bs, ts = ggml_types()[t]
        if not 1 <= len(ne) <= 4 or ne[0] % bs:
            raise ValueError("%s: shape %r does not suit %s" % (name, ne, tname))
        nb = L.ggml_row_size(t, ne[0]) * int(np.prod(ne[1:] or [1]))
        if len(spec) > 3 and spec[3] is not None:
            raw, src = bytes(spec[3]), None
        else:
            raw, src = random_tensor_bytes(t, ne, rng)
        if len(raw) != nb:
            raise ValueError("%s: %d bytes given, %d needed" % (name, len(raw), nb))
        made.append((name if isinstance(name, bytes) else name.encode(), t, ne, raw, src))
        total += nb
    gctx = L.gguf_init_empty()
    mctx = None
    try:
        for key, tname, value in kvs:
            _set_kv(L, gctx, key, tname, value)
        if made:
            mem = total + len(made) * (L.ggml_tensor_overhead() + 64) + 1024
            mctx = L.ggml_init(ggml_init_params(mem, None, False))
            for name, t, ne, raw, _ in made:
                if len(name) >= 64:
                    raise ValueError("tensor name too long for ggml: %r" % name)
                nea = (ctypes.c_int64 * 4)(*ne)
                tp = L.ggml_new_tensor(mctx, t, len(ne), nea)
                L.ggml_set_name(tp, name)
                assert L.ggml_nbytes(tp) == len(raw)
                ctypes.memmove(L.ggml_get_data(tp), raw, len(raw))
                L.gguf_add_tensor(gctx, tp)
        if not L.gguf_write_to_file(gctx, os.fsencode(path), False):
            raise OSError("gguf_write_to_file failed for %s: %s" % (path, last_log()))
    finally:
        L.gguf_free(gctx)
        if mctx:
            L.ggml_free(mctx)
    return made


def quantizable_types():
    """Type names ggml can encode from floats here (everything with a
    quantizer), plus the plain numeric types."""
    out = []
    for t, (name, bs, ts) in sorted(ggml_types().items()):
        if name in ("f32", "f16", "bf16", "i8", "i16", "i32", "i64", "f64"):
            out.append(name)
        elif _traits(t).from_float_ref or name in ("iq2_xxs", "iq2_xs", "iq1_s", "iq1_m"):
            out.append(name)   # (the iq2/iq1 quantizers need an imatrix; see quantize)
    return out


if __name__ == "__main__":
    lib()
    print("ggml", version())
    for t, v in sorted(ggml_types().items()):
        tr = _traits(t)
        print(t, v, "to_float" if tr.to_float else "-", "from_float_ref" if tr.from_float_ref else "-")
    for p in sys.argv[1:]:
        m = read_gguf(p)
        if m is None:
            print(p, "refused:", last_log())
            continue
        print(p, "v%d align %d data %d" % (m.version, m.alignment, m.data_offset))
        for k, t, v in m.kvs:
            print("  ", k, t, expected_text(t, v)[:60])
        for ti in m.tensors:
            print("  ", ti)

# The contract's text form of GGUF metadata values, computed independently in Python (no gguffs code).
r"""
expected_text(type, value) -> bytes, for a type string as in the
user.gguf.type attribute ("u32", "f32", "string", "array[string]",
"array[array[i32]]", ...) and a value as produced by tests/oracle/pyreader.py
or tests/oracle/ggml.py:

  integers      decimal, "\n"
  f32, f64      the fewest significant digits (C "%.{p-1}e", p = 1, 2, ...)
                that strtof / strtod read back to the same bits, laid out
                like Python's repr: fixed notation when the decimal exponent
                is in [-4, 16), else d.ddde+XX: 1e-06, 10000, 1e+16,
                3.4028235e+38, -0, inf, -inf, nan, -nan; a NaN with another
                payload is nan(0xMANTISSA) (see texts_match)
  bool          true / false (another stored byte: its decimal value)
  string        the bytes, "\n"
  array         one element per line, each followed by "\n"; string
                elements escape \ -> \\, newline -> \n, CR -> \r;
                nested arrays one JSON array per line, ", " between
                elements as json.dumps does ([1, 2, 3], ["a", "b"],
                [[1], [2]]), strings as JSON strings with \" \\ \n \r \t
                \b \f and \u00XX escapes, other bytes as is; empty
                array -> empty text

texts_match(type, value, got) -> (ok, note) compares the bytes exactly;
when they differ but mean the same (JSON spacing or escapes of a nested
array, another spelling of a NaN payload), ok is False and note says so.
"""
import ctypes
import json
import math
import struct

import numpy as np

try:
    from pyreader import Arr
except ImportError:  # imported as tests.oracle.expected
    from .pyreader import Arr

_libc = ctypes.CDLL(None)
_libc.strtof.restype = ctypes.c_float
_libc.strtof.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
_libc.strtod.restype = ctypes.c_double
_libc.strtod.argtypes = [ctypes.c_char_p, ctypes.c_void_p]

INT_TYPES = ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64")


def f32_bits(x):
    return int(np.array(x, dtype=np.float32).view(np.uint32))


def f64_bits(x):
    return int(np.array(x, dtype=np.float64).view(np.uint64))


def strtof_bits(text):
    return struct.unpack("<I", struct.pack("<f", _libc.strtof(text, None)))[0]


def strtod_bits(text):
    return struct.unpack("<Q", struct.pack("<d", _libc.strtod(text, None)))[0]


def _fmt_float(bits, is32):
    """Shortest round-trip text of the float with these bits."""
    if is32:
        sign, exp, mant = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
        expmax, quiet = 0xFF, 0x400000
        val = struct.unpack("<f", struct.pack("<I", bits))[0]
        back, maxp = strtof_bits, 9
    else:
        sign, exp, mant = bits >> 63, (bits >> 52) & 0x7FF, bits & 0xFFFFFFFFFFFFF
        expmax, quiet = 0x7FF, 1 << 51
        val = struct.unpack("<d", struct.pack("<Q", bits))[0]
        back, maxp = strtod_bits, 17
    if exp == expmax:
        s = "-" if sign else ""
        if mant == 0:
            return s + "inf"
        if mant == quiet:
            return s + "nan"
        return s + "nan(0x%x)" % mant
    for p in range(1, maxp + 1):
        t = "%.*e" % (p - 1, val)
        if back(t.encode()) == bits:
            return _layout(t)
    raise AssertionError("no round-trip text for %x" % bits)


def _layout(t):
    """Lays out the digits of "-d.ddde+XX" like Python's repr: fixed
    notation when the decimal exponent is in [-4, 16), else d.ddde+XX."""
    neg = t.startswith("-")
    mant, exp = t.lstrip("-").split("e")
    exp = int(exp)
    digits = mant.replace(".", "").rstrip("0") or "0"
    if exp < -4 or exp >= 16:
        body = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        body += "e%s%02d" % ("-" if exp < 0 else "+", abs(exp))
    elif exp < 0:
        body = "0." + "0" * (-exp - 1) + digits
    else:
        ip = exp + 1
        body = digits[:ip].ljust(ip, "0")
        if len(digits) > ip:
            body += "." + digits[ip:]
    return ("-" if neg else "") + body


def fmt_f32(x):
    return _fmt_float(f32_bits(x), True)


def fmt_f64(x):
    return _fmt_float(f64_bits(x), False)


def scalar_text(etype, v):
    """The text of one scalar element, without the newline (str, or bytes
    for strings)."""
    if etype in INT_TYPES:
        return str(int(v))
    if etype == "f32":
        return fmt_f32(v)
    if etype == "f64":
        return fmt_f64(v)
    if etype == "bool":
        v = int(v)
        return "true" if v == 1 else "false" if v == 0 else str(v)
    raise ValueError("not a scalar type: %r" % etype)


def escape_line(b):
    return b.replace(b"\\", b"\\\\").replace(b"\n", b"\\n").replace(b"\r", b"\\r")


# JSON's two-character escapes; other control characters are \u00XX
_JSON_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t",
             "\b": "\\b", "\f": "\\f"}


def _json_string(b):
    out = ['"']
    for ch in b.decode("utf-8", errors="surrogateescape"):
        if ch in _JSON_ESC:
            out.append(_JSON_ESC[ch])
        elif ord(ch) < 0x20:
            out.append("\\u%04x" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out).encode("utf-8", errors="surrogateescape")


def _json_array(a):
    parts = []
    for x in a.items:
        if a.etype == "array":
            parts.append(_json_array(x))
        elif a.etype == "string":
            parts.append(_json_string(x))
        else:
            parts.append(scalar_text(a.etype, x).encode())
    return b"[" + b", ".join(parts) + b"]"


def expected_text(type_, value):
    if type_ == "string":
        return bytes(value) + b"\n"
    if not type_.startswith("array"):
        return scalar_text(type_, value).encode() + b"\n"
    if not isinstance(value, Arr):
        raise TypeError("array value expected, got %r" % type(value))
    if value.etype == "string":
        return b"".join(escape_line(x) + b"\n" for x in value.items)
    if value.etype == "array":
        return b"".join(_json_array(x) + b"\n" for x in value.items)
    et = value.etype
    return "".join(scalar_text(et, x) + "\n" for x in value.items).encode()


# --- comparison by meaning where the contract leaves the spelling open ---

def _nan_ok(got, bits, is32):
    try:
        t = got.decode()
    except UnicodeDecodeError:
        return False
    back = strtof_bits if is32 else strtod_bits
    return back(t.encode()) == bits


def _json_equal(a, parsed):
    if not isinstance(parsed, list) or len(parsed) != len(a.items):
        return False
    for x, p in zip(a.items, parsed):
        if a.etype == "array":
            if not _json_equal(x, p):
                return False
        elif a.etype == "string":
            if not isinstance(p, str) or p.encode("utf-8", "surrogateescape") != bytes(x):
                return False
        elif a.etype == "bool":
            if p is not bool(int(x)) and p != int(x):
                return False
        elif a.etype in INT_TYPES:
            if isinstance(p, bool) or p != int(x):
                return False
        else:
            is32 = a.etype == "f32"
            bits = f32_bits(x) if is32 else f64_bits(x)
            if isinstance(p, str):  # nan / inf spelled as we parse constants
                if (strtof_bits if is32 else strtod_bits)(p.encode()) != bits:
                    return False
            else:
                pf = float(p)
                if (f32_bits(np.float32(pf)) if is32 else f64_bits(pf)) != bits:
                    return False
    return True


def texts_match(type_, value, got):
    """(ok, note): ok if got is exactly the contract's text for value (the
    bytes); when it is not, note says whether it has the same meaning (a
    spelling that reads back to the same value is still a failure: the
    text is promised byte for byte)."""
    exp = expected_text(type_, value)
    if got == exp:
        return True, ""
    same, why = _same_meaning(type_, value, got, exp)
    return False, why if same else ""


def _same_meaning(type_, value, got, exp):
    if type_ in ("f32", "f64"):
        bits = f32_bits(value) if type_ == "f32" else f64_bits(value)
        is32 = type_ == "f32"
        if math.isnan(float(value)) and got.endswith(b"\n") and _nan_ok(got[:-1], bits, is32):
            return True, "NaN payload spelled %r (we expected %r)" % (got, exp)
        return False, ""
    if type_.startswith("array[array"):
        lines = got.split(b"\n")
        if lines[-1] != b"" and value.items:
            return False, ""
        lines = lines[:-1] if value.items else [l for l in lines if l]
        if len(lines) != len(value.items):
            return False, ""
        for line, inner in zip(lines, value.items):
            try:
                parsed = json.loads(line.decode("utf-8", "surrogateescape"),
                                    parse_constant=lambda c: c.lower())
            except ValueError:
                return False, ""
            if not _json_equal(inner, parsed):
                return False, ""
        return True, "nested array spelled differently (same meaning): got %r, expected %r" % (
            got[:80], exp[:80])
    return False, ""


def explain_float_mismatch(type_, exp, got):
    """For f32/f64 values and arrays: the first differing line, and whether
    gguffs' text still reads back to the same bits (then it is a valid but
    not the nearest shortest spelling, e.g. from double rounding)."""
    et = type_[6:-1] if type_.startswith("array[") else type_
    if et not in ("f32", "f64"):
        return ""
    for i, (a, b) in enumerate(zip(exp.split(b"\n"), got.split(b"\n"))):
        if a != b:
            back = strtof_bits if et == "f32" else strtod_bits
            same = back(a) == back(b)
            return "; element %d: expected %s, got %s%s" % (
                i, a.decode(errors="replace"), b.decode(errors="replace"),
                " (which reads back to the same bits: not the nearest shortest"
                " decimal, e.g. double rounding of printf's digits)" if same and len(a) == len(b) else
                " (reads back to the same bits but is longer)" if same else "")
    return ""


def first_difference(exp, got):
    """A short description of where two byte strings differ."""
    n = min(len(exp), len(got))
    i = 0
    while i < n and exp[i] == got[i]:
        i += 1
    return "first difference at byte %d: expected %r, got %r (lengths %d, %d)" % (
        i, exp[max(0, i - 20):i + 40], got[max(0, i - 20):i + 40], len(exp), len(got))

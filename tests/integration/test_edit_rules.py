#!/usr/bin/python3
# Edit rules: O_TRUNC then close commits (string, array) or fails with EINVAL (scalar) before close() returns, shells' dup2 pattern; key-name rule on create/rename; tool scratch names; sed -i and vim; the mount's log file says why an edit was refused.
"""
Part A (every value type, arrays of every element type, nested arrays; a
little-endian v3 file that ggml reads, a file of nested arrays, and the
same keys in a big-endian file):

  - os.open(O_WRONLY|O_TRUNC) + os.close() with no write, and the shell's
    `: > meta/KEY`: a string key holds "" and an array key [] in MODEL.gguf
    as soon as close() returns (read at once with pyreader, and ggml where
    ggml can read the file); a scalar key makes close() fail with EINVAL
    and MODEL.gguf stays the same byte for byte, meta/KEY still reads the
    old value;
  - the shells' pattern open(O_TRUNC), dup, close the first descriptor,
    write through the dup, close: the first close returns 0 and commits
    nothing for a scalar (for a string or array either the old or the
    empty value is accepted, and which one is printed as a NOTE), the last
    close commits the written value.  The same through bash (`printf`,
    `echo`, `echo -e`).

Part B: new key names must follow the GGUF rule, or create (open O_CREAT,
`echo x > meta/NAME`) and rename fail with EINVAL and change nothing;
existing odd names stay readable, writable, retypable, renamable to a valid
name and removable; tool scratch files (leading '.', leading '#', trailing
'~', sedXXXXXX, digits only) are created, written, read and removed
without touching MODEL.gguf, and renamed over a key they set its value;
sed -i, and vim -es (vim.tiny and vim, each if installed) on a string and
a u32 key.  A rename to a bad name gets EINVAL as a create does (mv words
every EINVAL of rename(2) as "cannot move ... to a subdirectory of
itself"), and the mount's log file has the reason.  Keys longer than 255
bytes are in info only: meta/ neither lists them nor finds them
(ENAMETOOLONG), `ls -l meta/` works, a key of 255 bytes is a file.

Part C, the log file at the mount's root: listed, read-only for everyone
who may read the model (0444 for a 0644 model: writes, truncation,
removal and renames fail with EACCES), st_size exactly what a read gives
(also after a message is added), one line per refused edit with a UTC
timestamp, the key and the reason; a descriptor opened before a message
keeps reading what was there at its open.
"""
import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

import gguf_write as gw  # noqa: E402  (path set up by harness)
import pyreader  # noqa: E402

# (key, type, original value, text written in the dup tests, value expected after it)
SCALARS = [
    ("t.u8", "u8", 200, "7\n", 7),
    ("t.i8", "i8", -100, "-7\n", -7),
    ("t.u16", "u16", 60000, "7\n", 7),
    ("t.i16", "i16", -30000, "-7\n", -7),
    ("t.u32", "u32", 4000000000, "7\n", 7),
    ("t.i32", "i32", -2000000000, "-7\n", -7),
    ("t.u64", "u64", 2 ** 63 + 5, "7\n", 7),
    ("t.i64", "i64", -2 ** 62, "-7\n", -7),
    ("t.f32", "f32", 1.5, "0.25\n", 0.25),
    ("t.f64", "f64", 2.5, "0.125\n", 0.125),
    ("t.bool", "bool", True, "false\n", 0),
]
STRINGS = [
    ("t.string", "string", "hello world", "new text\n", "new text"),
]
ARRAYS = [
    ("t.arr_u8", "array[u8]", [1, 2, 255], "9\n8\n", [9, 8]),
    ("t.arr_i8", "array[i8]", [-1, 2, -128], "9\n-8\n", [9, -8]),
    ("t.arr_u16", "array[u16]", [1, 65535], "9\n8\n", [9, 8]),
    ("t.arr_i16", "array[i16]", [-1, 32767], "9\n-8\n", [9, -8]),
    ("t.arr_u32", "array[u32]", [1, 2 ** 32 - 1], "9\n8\n", [9, 8]),
    ("t.arr_i32", "array[i32]", [-1, 2 ** 31 - 1], "9\n-8\n", [9, -8]),
    ("t.arr_u64", "array[u64]", [1, 2 ** 64 - 1], "9\n8\n", [9, 8]),
    ("t.arr_i64", "array[i64]", [-1, 2 ** 63 - 1], "9\n-8\n", [9, -8]),
    ("t.arr_f32", "array[f32]", [0.5, -1.25], "0.75\n2\n", [0.75, 2.0]),
    ("t.arr_f64", "array[f64]", [0.5, -1.25], "0.75\n2\n", [0.75, 2.0]),
    ("t.arr_bool", "array[bool]", [1, 0, 1], "false\ntrue\n", [0, 1]),
    ("t.arr_string", "array[string]", ["a", "b\nc", ""], "x\ny\\nz\n", ["x", "y\nz"]),
]
NESTED = [
    ("t.nest_i32", "array[array[i32]]", [[1, 2], [3]], "[4]\n[5, 6]\n", [[4], [5, 6]]),
    ("t.nest_f32", "array[array[f32]]", [[0.5], [1.5, 2.5]], "[0.25]\n", [[0.25]]),
    ("t.nest_str", "array[array[string]]", [["a", "b\nc"], ["d"]], '["x", "y"]\n', [["x", "y"]]),
    ("t.nest3", "array[array[array[u8]]]", [[[1], [2, 3]], [[4]]], "[[7]]\n", [[[7]]]),
]

BAD_NAMES = ["x.BadName", "x.dash-name", "x.a..b", "x.trailing.", "x.bad name", "x.ünï",
             "X", "x.Y", "a.b-c"]
GOOD_NAMES = ["x.good_name", "general.a1_b2.c3"]
ODD_NAMES = [("Odd-Key.Name", "u32", 5, "6\n", 6, "u64"),
             ("x..y", "string", "v", "12\n", "12", "u32"),
             ("has space.k", "string", "s p", "34\n", "34", "i16"),
             ("UPPER.arr", "array[i32]", [1, 2], "3\n4\n", [3, 4], "array[i64]")]
SCRATCH = [".x.swp", ".general.name.swp", "#general.name#", "general.name~", "sedAb3xQ9",
           "sed4kq9zt", "4913", "7"]


# ---- helpers -----------------------------------------------------------------

def want(v):
    """An expected value in the same form as harness.norm()."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (list, tuple)):
        return [want(x) for x in v]
    if isinstance(v, float):
        return float(v)
    return v


def state(data):
    """pyreader's view of a file's bytes: ({key str: (type, value, etype)}, file)."""
    f = pyreader.read_bytes(data)
    out = {}
    for kv in f.kvs:
        k = kv.key.decode("utf-8", "surrogateescape")
        out[k] = (kv.type, harness.norm(kv.value), getattr(kv.value, "etype", None))
    return out, f


def tensor_digest(data):
    """sha256 of each tensor's bytes in a file's bytes."""
    f = pyreader.read_bytes(data)
    return [hashlib.sha256(data[f.data_offset + t.offset:f.data_offset + t.offset + t.nbytes]).hexdigest()
            for t in f.tensors]


def bash(script, *args, cwd=None):
    return harness.run(["bash", "-c", script, "bash"] + list(args), cwd=cwd)


def errno_of(fn):
    """Runs fn; None if it returns, else the OSError's errno."""
    try:
        fn()
        return None
    except OSError as e:
        return e.errno


def open_errno(path, flags, mode):
    """os.open as (descriptor, None), or (None, errno) when it fails."""
    try:
        return os.open(path, flags, mode), None
    except OSError as e:
        return None, e.errno


def ename(e):
    return "no error" if e is None else errno.errorcode.get(e, str(e))


STEPS = ("trunc", "colon", "dup", "printf")


def make_model(path, specs, big_endian=False, steps=None):
    """A model with each key of specs, or with one copy KEY.STEP per step
    (so that no step depends on another having restored a value)."""
    w = gw.GGUFWriter(big_endian=big_endian)
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "rules")
    for key, typ, val, _, _ in specs:
        for s in (steps or [None]):
            w.add(key if s is None else "%s.%s" % (key, s), typ, val)
    w.add_tensor("w", "f32", [64, 2], data=bytes(range(256)) * 2)
    w.write(path)
    return path


# ---- Part A ------------------------------------------------------------------

class Checker:
    """Checks MODEL.gguf after an edit: pyreader (and ggml when use_ggml)."""

    def __init__(self, h, model, use_ggml, ggml):
        self.h, self.model, self.use_ggml, self.ggml = h, model, use_ggml, ggml
        self.digest0 = tensor_digest(harness.file_bytes(model))
        self.big0 = pyreader.read(model).big_endian

    def value(self, label, key, typ, expect, nested=False):
        """MODEL.gguf holds expect for key, with type typ (element type kept)."""
        h = self.h
        data = harness.file_bytes(self.model)      # one read: one version of the file
        try:
            kv, f = state(data)
        except Exception as e:  # noqa: BLE001
            return h.fail("%s: pyreader cannot read MODEL.gguf: %s" % (label, e))
        h.check(f.big_endian == self.big0, "%s: byte order changed" % label)
        h.check(tensor_digest(data) == self.digest0, "%s: tensor bytes changed" % label)
        got = kv.get(key)
        if not h.check(got is not None, "%s: key %s is gone" % (label, key)):
            return False
        ok = h.check(got[1] == want(expect), "%s: %s is %r, expected %r"
                     % (label, key, str(got[1])[:80], str(want(expect))[:80]))
        if nested:
            h.check(got[2] == "array", "%s: %s element type %r, expected array" % (label, key, got[2]))
        else:
            h.check(got[0] == typ, "%s: %s has type %s, expected %s" % (label, key, got[0], typ))
        if self.use_ggml:
            m = self.ggml.read_gguf(self.model)
            if h.check(m is not None, "%s: ggml refuses MODEL.gguf: %s" % (label, self.ggml.last_log())):
                gk = {k.decode(): (t, harness.norm(v)) for k, t, v in m.kvs}
                h.check(gk.get(key) == (typ, want(expect)), "%s: ggml reads %s as %r"
                        % (label, key, str(gk.get(key))[:80]))
        return ok


def trunc_tests(h, model, specs, label, ggml, use_ggml, observed):
    """Each step on its own copy of each key (KEY.STEP), see make_model."""
    chk = Checker(h, model, use_ggml, ggml)
    with mount(model) as mnt:
        meta = os.path.join(mnt, "meta")
        for key0, typ, val, newtext, newval in specs:
            kind = "scalar" if not typ.startswith("array") and typ != "string" else \
                "string" if typ == "string" else "array"
            nested = typ.startswith("array[array")
            empty = "" if kind == "string" else []
            orig_text = None

            def setup(step):
                key = "%s.%s" % (key0, step)
                p = os.path.join(meta, key)
                lab = "%s %s (%s)" % (label, key, typ)
                text = harness.file_bytes(p)
                t = os.getxattr(p, "user.gguf.type")
                h.check(t == typ.encode(), "%s: user.gguf.type %r" % (lab, t))
                return key, p, lab, text

            # 1. os.open(O_TRUNC) + os.close(), nothing written
            with h.case("%s %s trunc" % (label, key0)):
                key, p, lab, orig_text = setup("trunc")
                before = harness.file_bytes(model)
                fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
                e = errno_of(lambda: os.close(fd))
                after = harness.file_bytes(model)             # at once, no waiting
                if kind == "scalar":
                    h.check(e == errno.EINVAL, "%s: O_TRUNC+close: close() gave %s, expected EINVAL"
                            % (lab, ename(e)))
                    h.check(after == before, "%s: O_TRUNC+close: MODEL.gguf changed" % lab)
                    got = harness.file_bytes(p)
                    h.check(got == orig_text, "%s: O_TRUNC+close: meta reads %r, expected the old %r"
                            % (lab, got[:60], orig_text[:60]))
                else:
                    h.check(e is None, "%s: O_TRUNC+close: close() gave %s" % (lab, ename(e)))
                    chk.value("%s: O_TRUNC+close (MODEL.gguf read when close() returned)" % lab,
                              key, typ, empty, nested)
                    got = harness.file_bytes(p)
                    h.check(got == (b"\n" if kind == "string" else b""),
                            "%s: O_TRUNC+close: meta reads %r" % (lab, got[:60]))
                    t = os.getxattr(p, "user.gguf.type")
                    h.check(t.startswith(b"array[array[") if nested else t == typ.encode(),
                            "%s: O_TRUNC+close: type is now %r" % (lab, t))

            # 2. the shell's `: > meta/KEY`
            with h.case("%s %s colon" % (label, key0)):
                key, p, lab, orig_text = setup("colon")
                before = harness.file_bytes(model)
                r = bash(': > "$1"', p)
                after = harness.file_bytes(model)
                if kind == "scalar":
                    h.check(after == before, "%s: ': >': MODEL.gguf changed" % lab)
                    got = harness.file_bytes(p)
                    h.check(got == orig_text, "%s: ': >': meta reads %r, expected the old %r"
                            % (lab, got[:60], orig_text[:60]))
                else:
                    h.check(r.returncode == 0, "%s: ': >': rc %d %s" % (lab, r.returncode, r.stderr.strip()))
                    chk.value("%s: ': >' (MODEL.gguf read when bash exited)" % lab, key, typ, empty, nested)

            # 3. open(O_TRUNC), dup, close the first, write through the dup, close
            with h.case("%s %s dup" % (label, key0)):
                key, p, lab, orig_text = setup("dup")
                before = harness.file_bytes(model)
                fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
                fd2 = os.dup(fd)
                e = errno_of(lambda: os.close(fd))
                mid = harness.file_bytes(model)
                h.check(e is None, "%s: dup pattern: close() of the first descriptor gave %s"
                        % (lab, ename(e)))
                if kind == "scalar":
                    h.check(mid == before, "%s: dup pattern: the first close() changed MODEL.gguf" % lab)
                else:
                    try:
                        v = state(mid)[0].get(key, (None, None))[1]
                    except Exception as ex:  # noqa: BLE001
                        v = "unreadable: %s" % ex
                    seen = "old" if v == want(val) else "empty" if v == empty else "other: %r" % (v,)
                    h.check(seen in ("old", "empty"), "%s: dup pattern: after the first close %s holds %s"
                            % (lab, key, seen))
                    observed.setdefault(seen, []).append(key)
                e1 = errno_of(lambda: os.write(fd2, newtext.encode()))
                e2 = errno_of(lambda: os.close(fd2))
                h.check(e1 is None and e2 is None, "%s: dup pattern: write %s, close %s"
                        % (lab, ename(e1), ename(e2)))
                chk.value("%s: dup pattern (MODEL.gguf when the last close() returned)" % lab,
                          key, typ, newval, nested)

            # 4. the same through bash: printf > meta/KEY
            with h.case("%s %s printf" % (label, key0)):
                key, p, lab, orig_text = setup("printf")
                r = bash('printf "%s" "$2" > "$1"', p, newtext)
                h.check(r.returncode == 0 and not r.stderr, "%s: bash printf: rc %d %s"
                        % (lab, r.returncode, r.stderr.strip()))
                chk.value("%s: bash printf" % lab, key, typ, newval, nested)

        # the commands of the issue, as typed (on the .printf copies, set above)
        if "t.u32" in [s[0] for s in specs]:
            for cmd, key, typ, expect in (("echo 5 > meta/t.u32.printf", "t.u32.printf", "u32", 5),
                                          ("printf x > meta/t.string.printf", "t.string.printf",
                                           "string", "x"),
                                          ("echo -e 'a\\nb' > meta/t.arr_string.printf",
                                           "t.arr_string.printf", "array[string]", ["a", "b"])):
                with h.case("%s: %s" % (label, cmd)):
                    r = bash(cmd, cwd=mnt)
                    h.check(r.returncode == 0 and not r.stderr, "%s: %s: rc %d %s"
                            % (label, cmd, r.returncode, r.stderr.strip()))
                    chk.value("%s: %s" % (label, cmd), key, typ, expect)


# ---- Part B ------------------------------------------------------------------

@contextlib.contextmanager
def small_mount(h, tmp, ggml, name):
    """A model of a few strings and a u32 as tmp/name, mounted: yields
    (model, its Checker, the mount's meta/, the listing of meta/)."""
    model = make_model(os.path.join(tmp, name), STRINGS + [SCALARS[4]])
    chk = Checker(h, model, True, ggml)
    with mount(model) as mnt:
        meta = os.path.join(mnt, "meta")
        yield model, chk, meta, sorted(os.listdir(meta))


def name_rule_tests(h, tmp, ggml):
    with small_mount(h, tmp, ggml, "names.gguf") as (model, chk, meta, listing0):
        for bad in BAD_NAMES:
            with h.case("create %r" % bad):
                p = os.path.join(meta, bad)
                before = harness.file_bytes(model)
                fd, e = open_errno(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                if fd is not None:
                    errno_of(lambda: os.write(fd, b"1\n"))
                    e2 = errno_of(lambda: os.close(fd))
                    h.fail("create %r: open(O_CREAT) succeeded (close: %s), expected EINVAL"
                           % (bad, ename(e2)))
                    h.check(harness.file_bytes(model) == before, "create %r: MODEL.gguf changed" % bad)
                    errno_of(lambda: os.unlink(p))
                else:
                    h.check(e == errno.EINVAL, "create %r: open(O_CREAT) gave %s, expected EINVAL"
                            % (bad, ename(e)))
                h.check(harness.file_bytes(model) == before, "create %r: MODEL.gguf changed" % bad)
                h.check(sorted(os.listdir(meta)) == listing0, "create %r: meta/ lists %r"
                        % (bad, sorted(set(os.listdir(meta)) ^ set(listing0))))
                r = bash('echo x > "$1"', p)
                h.check(r.returncode != 0 and "Invalid argument" in r.stderr,
                        "echo x > %r: rc %d, stderr %r (expected 'Invalid argument')"
                        % (bad, r.returncode, r.stderr.strip()))
                h.check(harness.file_bytes(model) == before, "echo x > %r: MODEL.gguf changed" % bad)
                if os.path.lexists(p):
                    errno_of(lambda: os.unlink(p))
                h.check(sorted(os.listdir(meta)) == listing0, "echo x > %r: meta/ lists %r"
                        % (bad, sorted(set(os.listdir(meta)) ^ set(listing0))))
            with h.case("rename to %r" % bad):
                before = harness.file_bytes(model)
                e = errno_of(lambda: os.rename(os.path.join(meta, "t.string"), os.path.join(meta, bad)))
                h.check(e == errno.EINVAL, "rename t.string -> %r gave %s, expected EINVAL" % (bad, ename(e)))
                if e is None:      # put it back (best effort)
                    errno_of(lambda: os.rename(os.path.join(meta, bad), os.path.join(meta, "t.string")))
                else:
                    h.check(harness.file_bytes(model) == before, "rename to %r: MODEL.gguf changed" % bad)
                h.check(sorted(os.listdir(meta)) == listing0, "rename to %r: meta/ lists %r"
                        % (bad, sorted(set(os.listdir(meta)) ^ set(listing0))))
                if bad == BAD_NAMES[0]:
                    # (the first: later ones may meet the log's rate limit)
                    with open(os.path.join(meta, "..", "log")) as f:
                        log = f.read()
                    h.check(any("edit refused (Invalid argument): meta/t.string: '%s' is not a valid "
                                "GGUF key name" % bad in x for x in log.split("\n")),
                            "rename to %r: the mount's log does not say why: %r" % (bad, log[-1000:]))
                r = bash('mv "$1" "$2"', os.path.join(meta, "t.u32"), os.path.join(meta, bad))
                h.check(r.returncode != 0, "mv t.u32 %r: accepted" % bad)
                if r.returncode == 0:
                    bash('mv "$1" "$2"', os.path.join(meta, bad), os.path.join(meta, "t.u32"))
                else:
                    h.check(harness.file_bytes(model) == before, "mv to %r: MODEL.gguf changed" % bad)
        for good in GOOD_NAMES:
            with h.case("create %r" % good):
                r = bash('echo 41 > "$1"', os.path.join(meta, good))
                h.check(r.returncode == 0, "echo 41 > %s: rc %d %s" % (good, r.returncode, r.stderr.strip()))
                chk.value("create %s" % good, good, "i32", 41)
                listing0 = sorted(os.listdir(meta))
                h.check(good in listing0, "%s not listed" % good)
        with h.case("rename to a valid new name"):
            e = errno_of(lambda: os.rename(os.path.join(meta, "x.good_name"),
                                           os.path.join(meta, "x.renamed_ok")))
            h.check(e is None, "rename x.good_name -> x.renamed_ok: %s" % ename(e))
            chk.value("rename to a valid name", "x.renamed_ok", "i32", 41)
            h.check("x.good_name" not in state(harness.file_bytes(model))[0], "x.good_name still in the model after rename")


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (.*)$")


def log_file_tests(h, tmp, ggml):
    with small_mount(h, tmp, ggml, "log.gguf") as (model, chk, meta, listing0):
        mnt = os.path.dirname(meta)
        lp = os.path.join(mnt, "log")
        h.check("log" in os.listdir(mnt), "log is not listed in the mount's root")
        st = os.stat(lp)
        h.check(stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o444,
                "log: mode %o, want a regular file 444" % st.st_mode)
        with open(lp, "rb") as f:
            before = f.read()
        h.check(os.stat(lp).st_size == len(before), "log: st_size %d, a read gives %d bytes"
                % (os.stat(lp).st_size, len(before)))
        old = os.open(lp, os.O_RDONLY)
        try:
            r = bash('echo garbage > "$1"', os.path.join(meta, "t.u32"))
            h.check(r.returncode != 0 and "Invalid argument" in r.stderr,
                    "echo garbage > meta/t.u32: rc %d %r" % (r.returncode, r.stderr))
            size = os.stat(lp).st_size
            with open(lp, "rb") as f:
                after = f.read()
            h.check(size == len(after) and len(after) > len(before),
                    "log after a refused edit: st_size %d, a read gives %d bytes (before: %d)"
                    % (size, len(after), len(before)))
            # the same bytes read in small pieces at offsets
            with open(lp, "rb", buffering=0) as f:
                pieces = b"".join(iter(lambda: f.read(7), b""))
            h.check(pieces == after, "log read 7 bytes at a time differs from one read")
            new = after[len(before):].decode(errors="replace").split("\n")
            m = [LOG_LINE.match(x) for x in new if x]
            h.check(len(m) == 1 and m[0] and
                    m[0].group(1).startswith("%s: meta/t.u32: edit refused (Invalid argument): " % model)
                    and "garbage" in m[0].group(1) and after.endswith(b"\n"),
                    "log: want one line 'STAMP MODEL: meta/t.u32: edit refused (Invalid argument): "
                    "... garbage ...', got %r" % new)
            # a descriptor opened before: what was there at its open
            got = os.pread(old, 1 << 20, 0)
            h.check(got == before, "log opened before the edit reads %r, want %r" % (got, before))
        finally:
            os.close(old)
        for label, fn in (("open O_WRONLY", lambda: os.close(os.open(lp, os.O_WRONLY))),
                          ("open O_TRUNC", lambda: os.close(os.open(lp, os.O_RDONLY | os.O_TRUNC))),
                          ("truncate", lambda: os.truncate(lp, 0)),
                          ("unlink", lambda: os.unlink(lp)),
                          ("rename", lambda: os.rename(lp, os.path.join(mnt, "log2")))):
            e = errno_of(fn)
            h.check(e in (errno.EACCES, errno.EPERM), "log: %s gave %s, want EACCES"
                    % (label, ename(e)))
        with open(lp, "rb") as f:
            h.check(f.read() == after, "log changed by the refused writes")


def odd_name_tests(h, tmp, ggml):
    """Keys with names that break the rule, already in the file."""
    src = os.path.join(tmp, "odd-src.gguf")
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    for key, typ, val, _, _, _ in ODD_NAMES:
        w.add(key, typ, val)
    w.add("general.name", "string", "odd")
    w.add_tensor("w", "f32", [8], data=bytes(32))
    w.write(src)
    ggml_ok = ggml.read_gguf(src) is not None
    if not ggml_ok:
        h.note("ggml refuses a file with odd key names; checked with pyreader only")

    model = os.path.join(tmp, "odd.gguf")
    shutil.copyfile(src, model)
    chk = Checker(h, model, ggml_ok, ggml)
    with mount(model) as mnt:
        meta = os.path.join(mnt, "meta")
        for i, (key, typ, val, newtext, newval, newtype) in enumerate(ODD_NAMES):
            lab = "odd name %r" % key
            p = os.path.join(meta, key)
            with h.case(lab):
                h.check(key in os.listdir(meta), "%s: not listed in meta/" % lab)
                text = harness.file_bytes(p).decode()
                h.check(text == ("%s\n" % val if not isinstance(val, list)
                                 else "".join("%s\n" % x for x in val)),
                        "%s: reads %r" % (lab, text))
                r = bash('printf "%s" "$2" > "$1"', p, newtext)
                h.check(r.returncode == 0, "%s: rewrite: rc %d %s" % (lab, r.returncode, r.stderr.strip()))
                chk.value("%s: rewrite" % lab, key, typ, newval)
                e = errno_of(lambda: os.setxattr(p, "user.gguf.type", newtype.encode()))
                h.check(e is None, "%s: setxattr user.gguf.type %s: %s" % (lab, newtype, ename(e)))
                chk.value("%s: retype" % lab, key, newtype, want(newval) if typ != "string" else int(newval))
                to = "x.renamed_%d" % i
                e = errno_of(lambda: os.rename(p, os.path.join(meta, to)))
                h.check(e is None, "%s: rename to %s: %s" % (lab, to, ename(e)))
                chk.value("%s: rename" % lab, to, newtype, want(newval) if typ != "string" else int(newval))
                h.check(key not in state(harness.file_bytes(model))[0], "%s: still in the model after the rename" % lab)
                h.check(sorted(os.listdir(meta)) == sorted(state(harness.file_bytes(model))[0]),
                        "%s: meta/ lists %r" % (lab, sorted(os.listdir(meta))))

    model2 = os.path.join(tmp, "odd2.gguf")
    shutil.copyfile(src, model2)
    with mount(model2) as mnt:
        meta = os.path.join(mnt, "meta")
        for key, typ, val, _, _, _ in ODD_NAMES:
            lab = "odd name %r" % key
            with h.case(lab + " rm"):
                e = errno_of(lambda: os.unlink(os.path.join(meta, key)))
                h.check(e is None, "%s: unlink: %s" % (lab, ename(e)))
                kv = state(harness.file_bytes(model2))[0]
                h.check(key not in kv, "%s: still in the model after rm" % lab)
                h.check(kv.get("general.name", (0, 0))[1] == "odd", "%s: other keys lost: %r" % (lab, list(kv)))
                h.check(sorted(os.listdir(meta)) == sorted(kv), "%s: meta/ lists %r" % (lab, os.listdir(meta)))
    if ggml_ok:
        h.check(ggml.read_gguf(model2) is not None, "odd names: ggml refuses the file after rm")


def mixed_nested_tests(h, tmp, ggml):
    """A nested array whose inner arrays differ in element type ([true] of
    bool, [0, 0] of u8): shown, but open for writing fails with EPERM and the
    model is unchanged; it can be deleted."""
    import struct
    raw = struct.pack("<IIQ", 9, 9, 2)                      # array of 2 arrays
    raw += struct.pack("<IQ", 7, 1) + b"\x01"               # [true]
    raw += struct.pack("<IQ", 0, 2) + b"\x00\x00"           # [0, 0] of u8
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add_raw_kv("t.mixed", raw)
    w.add_tensor("w", "f32", [8], data=bytes(32))
    model = os.path.join(tmp, "mixed.gguf")
    w.write(model)
    before = harness.file_bytes(model)
    with mount(model) as mnt:
        p = os.path.join(mnt, "meta", "t.mixed")
        h.check(harness.file_bytes(p) == b"[true]\n[0, 0]\n", "mixed nested: reads %r" % harness.file_bytes(p))
        for flags in (os.O_WRONLY, os.O_WRONLY | os.O_TRUNC, os.O_RDWR):
            e = errno_of(lambda: os.close(os.open(p, flags)))
            h.check(e == errno.EPERM, "mixed nested: open flags %#x gave %s, not EPERM" % (flags, ename(e)))
        r = bash('printf "[true]\\n[0, 0]\\n" > "$1"', p)
        h.check(r.returncode != 0, "mixed nested: a shell rewrite succeeded")
        h.check(harness.file_bytes(model) == before, "mixed nested: the model changed")
        e = errno_of(lambda: os.unlink(p))
        h.check(e is None, "mixed nested: unlink: %s" % ename(e))
        h.check("t.mixed" not in state(harness.file_bytes(model))[0], "mixed nested: still there after rm")
    h.check(ggml.read_gguf(model) is not None, "mixed nested: ggml refuses the file after rm")


def long_name_tests(h, tmp, ggml):
    """Keys longer than 255 bytes (the kernel's name limit) are listed in
    info only: meta/ lists a key of 255 bytes and not one of 256 or 300 (a
    listed name that no program can stat would make `ls -l meta` fail);
    info names them; the path of a long key is ENAMETOOLONG."""
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    keys = {n: "t." + "k" * (n - 2) for n in (255, 256, 300)}
    for n, k in keys.items():
        w.add(k, "u32", n)
    w.add_tensor("w", "f32", [8], data=bytes(32))
    model = os.path.join(tmp, "long.gguf")
    w.write(model)
    with mount(model) as mnt:
        meta = os.path.join(mnt, "meta")
        names = set(os.listdir(meta))
        h.check(keys[255] in names, "long names: the 255-byte key is not listed in meta/")
        h.check(keys[256] not in names and keys[300] not in names,
                "long names: meta/ lists keys longer than 255 bytes: %r"
                % sorted(len(x) for x in names))
        r = subprocess.run(["ls", "-l", meta], capture_output=True, text=True)
        h.check(r.returncode == 0 and r.stderr == "", "long names: ls -l meta/: exit %d, %r"
                % (r.returncode, r.stderr[-300:]))
        h.check(harness.file_bytes(os.path.join(meta, keys[255])) == b"255\n",
                "long names: the 255-byte key does not read 255")
        e = errno_of(lambda: os.stat(os.path.join(meta, keys[300])))
        h.check(e == errno.ENAMETOOLONG, "long names: stat of a 300-byte key: %s" % ename(e))
        info = harness.file_bytes(os.path.join(mnt, "info")).decode()
        h.check(keys[256] in info and keys[300] in info, "long names: info does not list them")


def scratch_tests(h, tmp, ggml):
    with small_mount(h, tmp, ggml, "scratch.gguf") as (model, chk, meta, listing0):
        for s in SCRATCH:
            p = os.path.join(meta, s)
            lab = "scratch %r" % s
            with h.case(lab):
                before = harness.file_bytes(model)
                text = ("scratch %s\n" % s).encode()
                # as mkstemp (sed -i) and vim's swap file: O_CREAT|O_EXCL, write through that descriptor
                fd, e0 = open_errno(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                h.check(e0 is None, "%s: open(O_CREAT|O_EXCL): %s" % (lab, ename(e0)))
                if fd is not None:
                    e1 = errno_of(lambda: os.write(fd, text))
                    # listed while it exists, as ls -la during a vim session expects
                    h.check(os.listdir(meta).count(s) == 1, "%s: not listed while open: %r"
                            % (lab, os.listdir(meta)))
                    e2 = errno_of(lambda: os.close(fd))
                    h.check(e1 is None and e2 is None, "%s: write %s, close %s" % (lab, ename(e1), ename(e2)))
                h.check(sorted(os.listdir(meta)) == sorted(listing0 + [s]), "%s: after close meta/ lists %r"
                        % (lab, os.listdir(meta)))
                h.check(harness.file_bytes(model) == before, "%s: creating and writing it changed MODEL.gguf "
                        "(new keys %r)" % (lab, sorted(set(state(harness.file_bytes(model))[0]) - set(listing0))))
                try:
                    st = os.stat(p)
                    h.check(st.st_size == len(text), "%s: size %d, expected %d" % (lab, st.st_size, len(text)))
                except OSError as ex:
                    h.fail("%s: stat: %s" % (lab, ex))
                try:
                    got = harness.file_bytes(p)
                    h.check(got == text, "%s: reads %r" % (lab, got))
                except OSError as ex:
                    h.fail("%s: open for reading: %s" % (lab, ex))
                # written again by a new open(O_TRUNC), as emacs rewrites #FILE# at each auto-save
                text2 = ("again %s\n" % s).encode()
                try:
                    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
                    e1 = errno_of(lambda: os.write(fd, text2))
                    e2 = errno_of(lambda: os.close(fd))
                except OSError as ex:
                    e1, e2 = ex.errno, None
                h.check(e1 is None and e2 is None, "%s: reopen O_TRUNC + write: %s, close %s"
                        % (lab, ename(e1), ename(e2)))
                h.check(harness.file_bytes(model) == before, "%s: rewriting it changed MODEL.gguf" % lab)
                try:
                    got = harness.file_bytes(p)
                    h.check(got == text2, "%s: reads %r after the rewrite" % (lab, got))
                except OSError as ex:
                    h.fail("%s: open for reading after the rewrite: %s" % (lab, ex))
                e = errno_of(lambda: os.unlink(p))
                h.check(e is None, "%s: unlink: %s" % (lab, ename(e)))
                h.check(not os.path.lexists(p), "%s: still there after unlink" % lab)
                h.check(harness.file_bytes(model) == before, "%s: MODEL.gguf changed after create/write/unlink" % lab)
                h.check(sorted(os.listdir(meta)) == listing0, "%s: meta/ lists %r" % (lab, os.listdir(meta)))
            with h.case(lab + " via bash, renamed over a key"):
                before = harness.file_bytes(model)
                r = bash('printf "renamed %s\\n" "$2" > "$1"', p, s)
                h.check(r.returncode == 0, "%s: printf >: rc %d %s" % (lab, r.returncode, r.stderr.strip()))
                h.check(harness.file_bytes(model) == before, "%s: bash write changed MODEL.gguf" % lab)
                r = bash('mv "$1" "$2"', p, os.path.join(meta, "t.string"))
                h.check(r.returncode == 0, "%s: mv over t.string: rc %d %s" % (lab, r.returncode, r.stderr.strip()))
                chk.value("%s: mv over t.string" % lab, "t.string", "string", "renamed %s" % s)
                h.check(not os.path.lexists(p), "%s: still there after mv" % lab)
                if os.path.lexists(p):
                    errno_of(lambda: os.unlink(p))
            with h.case(lab + " renamed to a bad name"):
                errno_of(lambda: open(p, "w").write("x\n"))
                before = harness.file_bytes(model)
                e = errno_of(lambda: os.rename(p, os.path.join(meta, "x.BadName")))
                h.check(e == errno.EINVAL, "%s: rename to x.BadName gave %s, expected EINVAL" % (lab, ename(e)))
                h.check(harness.file_bytes(model) == before, "%s: rename to a bad name changed MODEL.gguf" % lab)
                for q in (p, os.path.join(meta, "x.BadName")):
                    if os.path.lexists(q):
                        errno_of(lambda: os.unlink(q))
                h.check(sorted(os.listdir(meta)) == listing0, "%s: meta/ lists %r" % (lab, os.listdir(meta)))
        with h.case("a scratch file is listed while it exists"):
            p = os.path.join(meta, ".x.swp")
            before = harness.file_bytes(model)
            fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, b"swap\n")
                h.check(".x.swp" in os.listdir(meta), ".x.swp not listed while open: %r" % os.listdir(meta))
            finally:
                os.close(fd)
            h.check(sorted(os.listdir(meta)) == sorted(listing0 + [".x.swp"]),
                    ".x.swp: meta/ lists %r after close" % os.listdir(meta))
            st = os.stat(p)
            h.check(stat.S_ISREG(st.st_mode) and st.st_size == 5, ".x.swp: stat %o size %d"
                    % (st.st_mode, st.st_size))
            # ls -l reads the xattrs of what it lists: none, not an error
            h.check(os.listxattr(p) == [], ".x.swp: xattrs %r" % os.listxattr(p))
            r = bash("ls -la", cwd=meta)
            h.check(r.returncode == 0 and not r.stderr and ".x.swp" in r.stdout,
                    "ls -la: rc %d %r %r" % (r.returncode, r.stderr.strip(), r.stdout))
            os.unlink(p)
            h.check(sorted(os.listdir(meta)) == listing0, ".x.swp: meta/ lists %r after rm" % os.listdir(meta))
            h.check(harness.file_bytes(model) == before, ".x.swp changed MODEL.gguf")
        with h.case("a created key is listed from its creation"):
            p = os.path.join(meta, "t.created")
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, b"5\n")
                h.check(os.listdir(meta).count("t.created") == 1, "t.created not listed while open: %r"
                        % os.listdir(meta))
            finally:
                os.close(fd)
            h.check(os.listdir(meta).count("t.created") == 1, "t.created: meta/ lists %r after close"
                    % os.listdir(meta))
            chk.value("created key", "t.created", "i32", 5)
            os.unlink(p)
            if "gguffs.padding" not in listing0 and "gguffs.padding" in os.listdir(meta):
                os.unlink(os.path.join(meta, "gguffs.padding"))   # the room the new key made
            h.check(sorted(os.listdir(meta)) == listing0, "t.created: meta/ lists %r after rm" % os.listdir(meta))
        with h.case("sed -i"):
            r = bash("sed -i 's/renamed/sedded/' t.string && sed -i 's/^4000000000$/17/' t.u32", cwd=meta)
            h.check(r.returncode == 0, "sed -i: rc %d %s" % (r.returncode, r.stderr.strip()))
            chk.value("sed -i string", "t.string", "string", "sedded %s" % SCRATCH[-1])
            chk.value("sed -i u32", "t.u32", "u32", 17)
            h.check(sorted(os.listdir(meta)) == listing0, "sed -i left %r" % os.listdir(meta))


def vim_tests(h, tmp, ggml):
    vims = [v for v in (shutil.which("vim.tiny"), shutil.which("vim")) if v]
    vims = [v for i, v in enumerate(vims) if os.path.realpath(v) not in map(os.path.realpath, vims[:i])]
    if not vims:
        if harness.IN_CI:
            h.fail("vim is not installed (vim-tiny or vim); CI must have it")
        else:
            h.note("vim is not installed: the vim edits are skipped")
        return
    for vim in vims:
        model = make_model(os.path.join(tmp, "vim.gguf"), STRINGS + [SCALARS[4]])
        chk = Checker(h, model, True, ggml)
        with mount(model) as mnt:
            meta = os.path.join(mnt, "meta")
            listing0 = sorted(os.listdir(meta))
            bare = [vim, "-es", "-N", "-u", "NONE", "-i", "NONE"]
            runs = [("bare", bare + ["-c", "%s/hello/hi/", "-c", "wq", "t.string"], "t.string", "string", "hi world"),
                    ("bare", bare + ["-c", "%s/4000000000/8192/", "-c", "wq", "t.u32"], "t.u32", "u32", 8192),
                    ("defaults", [vim, "-es", "-c", "%s/hi/hey/", "-c", "wq", "t.string"],
                     "t.string", "string", "hey world"),
                    ("defaults", [vim, "-es", "-c", "%s/8192/4096/", "-c", "wq", "t.u32"], "t.u32", "u32", 4096),
                    ("backupcopy=no", bare + ["-c", "set backupcopy=no writebackup", "-c", "%s/hey/yo/",
                                              "-c", "wq", "t.string"], "t.string", "string", "yo world"),
                    ("backupcopy=no", bare + ["-c", "set backupcopy=no writebackup", "-c", "%s/4096/2048/",
                                              "-c", "wq", "t.u32"], "t.u32", "u32", 2048)]
            for how, cmd, key, typ, expect in runs:
                lab = "%s (%s) on %s" % (os.path.basename(vim), how, key)
                with h.case(lab):
                    r = subprocess.run(cmd, cwd=meta, capture_output=True, text=True, timeout=60,
                                       stdin=subprocess.DEVNULL)
                    h.check(r.returncode == 0, "%s: rc %d %s %s" % (lab, r.returncode, r.stdout.strip(),
                                                                     r.stderr.strip()))
                    chk.value(lab, key, typ, expect)
                    h.check(sorted(os.listdir(meta)) == listing0, "%s: meta/ lists %r"
                            % (lab, sorted(set(os.listdir(meta)) ^ set(listing0))))
            # what meta/ lists during a vim session: vim's swap file, and after it nothing
            lab = "%s: ls -a during the session" % os.path.basename(vim)
            with h.case(lab):
                out = os.path.join(tmp, "vim-ls")
                r = subprocess.run([vim, "-es", "-c", "silent !ls -a > " + out, "-c", "%s/world/there/",
                                    "-c", "wq", "t.string"], cwd=meta, capture_output=True, text=True,
                                   timeout=60, stdin=subprocess.DEVNULL)
                h.check(r.returncode == 0, "%s: rc %d %s %s" % (lab, r.returncode, r.stdout.strip(),
                                                                 r.stderr.strip()))
                with open(out) as f:
                    during = f.read().split()
                h.check(".t.string.swp" in during and "t.string" in during, "%s: %r" % (lab, during))
                chk.value(lab, "t.string", "string", "yo there")
                h.check(sorted(os.listdir(meta)) == listing0, "%s: afterwards meta/ lists %r"
                        % (lab, sorted(set(os.listdir(meta)) ^ set(listing0))))


def main():
    h = harness.start("edit-rules")
    ggml = harness.require_oracle()
    tmp = tempfile.mkdtemp(prefix="gguffs-rules-")
    observed = {}
    try:
        plain = SCALARS + STRINGS + ARRAYS
        m = make_model(os.path.join(tmp, "le.gguf"), plain, steps=STEPS)
        with h.case("ggml reads the LE model"):
            h.check(ggml.read_gguf(m) is not None, "ggml refuses the test model: %s" % ggml.last_log())
        with h.case("A: little-endian"):
            trunc_tests(h, m, plain, "LE", ggml, True, observed)
        m = make_model(os.path.join(tmp, "nested.gguf"), NESTED, steps=STEPS)
        with h.case("A: nested arrays"):
            trunc_tests(h, m, NESTED, "nested", ggml, False, observed)
        m = make_model(os.path.join(tmp, "be.gguf"), plain + NESTED, big_endian=True, steps=STEPS)
        with h.case("A: big-endian"):
            h.check(pyreader.read(m).big_endian, "the BE model is not big-endian")
            trunc_tests(h, m, plain + NESTED, "BE", ggml, False, observed)
        for seen, keys in sorted(observed.items()):
            print("NOTE: dup pattern: after close() of the first descriptor (a dup still open), "
                  "%d string/array keys held the %s value (%s...)" % (len(keys), seen, ", ".join(keys[:4])),
                  flush=True)
        with h.case("B: key names"):
            name_rule_tests(h, tmp, ggml)
        with h.case("C: the log file"):
            log_file_tests(h, tmp, ggml)
        with h.case("B: odd names"):
            odd_name_tests(h, tmp, ggml)
        with h.case("B: mixed nested array"):
            mixed_nested_tests(h, tmp, ggml)
        with h.case("B: names longer than 255 bytes"):
            long_name_tests(h, tmp, ggml)
        with h.case("B: scratch files"):
            scratch_tests(h, tmp, ggml)
        with h.case("B: vim"):
            vim_tests(h, tmp, ggml)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

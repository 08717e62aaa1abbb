#!/usr/bin/python3
# Rename semantics across edits: a model.gguf, info or meta/KEY handle (read() or mmap) opened before an edit keeps its version until closed; a new open sees the new one.
"""
An edit changes the bytes of MOUNTPOINT/model.gguf, info and meta/KEY.  As
with a file replaced by rename, a descriptor (or mapping) opened before the
edit must keep showing the version it was opened on until it is closed,
and a new open must show the new version.  Edits in place (a value of the
same padded size) and growing/shrinking edits (a new key with a 64-byte
name, a 100 KiB chat template, back to a short one, a key removed) are
tested.  The expected bytes of each version of model.gguf are MODEL.gguf
itself, read right after the edit's close() returned.

1. read(): open, read the first half, edit (from another process or from
   this one), read the rest: the whole equals the old version byte for
   byte; fstat on the old descriptor gives the old size; a fresh open gives
   the new version; ggml loads both.  Same for info and meta/KEY.
2. mmap: map model.gguf, touch some pages, edit, read every page (touched
   or not): the old version; a new mapping: the new version.  Each run is
   in a child process, so that a SIGBUS is a failure, not a crash.
3. 8 reader processes (model.gguf by read() and by mmap, and info) across
   20 edits, in lock step: each round every reader opens (under a lock that
   orders opens against edits, so each reader knows its version exactly),
   reads part, says it is ready (the editor waits for all), keeps reading
   while the edit runs, then reads all and compares with the version it
   opened; a fresh open must give the next version.
4. A split model (3 shards, ggml's writer): model.gguf across an in-place
   and a growing edit (read() and mmap).
"""
import errno
import hashlib
import mmap
import multiprocessing as mp
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

import gguf_write as gw  # noqa: E402  (path set up by harness)

CHUNK = 128 << 10
PAGE = mmap.PAGESIZE
NREADERS = 8
ROUNDS = 20
HANG = 120.0          # guard: only reached if a process hangs
TENSOR_MB = 3

ctxm = mp.get_context("fork")


# ---- helpers -----------------------------------------------------------------

def read_range(fd, start, end=None):
    """pread from start to end (or to EOF) in CHUNK pieces."""
    out = []
    pos = start
    while end is None or pos < end:
        n = CHUNK if end is None else min(CHUNK, end - pos)
        b = os.pread(fd, n, pos)
        if not b:
            break
        out.append(b)
        pos += len(b)
    return b"".join(out)


def first_diff(a, b):
    n = min(len(a), len(b))
    for i in range(0, n, 4096):
        if a[i:i + 4096] != b[i:i + 4096]:
            for j in range(i, min(i + 4096, n)):
                if a[j] != b[j]:
                    return j
    return n if len(a) != len(b) else -1


def same(a, b):
    """'' if equal, else a short description of the difference."""
    if a == b:
        return ""
    d = first_diff(a, b)
    return "%d bytes vs %d expected, first difference at byte %d" % (len(a), len(b), d)


def name_value(i):
    return "name-%06d" % i            # same length: in place


def template(i, big):
    unit = "{%% for m in messages %%}{{ m.content }}{%% endfor %%} %d\n" % i
    if not big:
        return "tmpl %d: short\n" % i
    return ("tmpl %d:" % i + unit * ((100 << 10) // len(unit) + 1))[:100 << 10]


def newkey_name(i):
    base = "general.grow_%03d_" % i
    return base + "k" * (64 - len(base))     # 64 bytes


def make_model(path):
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", name_value(0))
    w.add("llama.context_length", "u32", 1000)
    w.add("tokenizer.chat_template", "string", template(0, False))
    w.add("tokenizer.ggml.tokens", "array[string]", ["<s>", "</s>", "a", "b"])
    rng = random.Random(11)
    n = (TENSOR_MB << 20) // 4 // 1024
    w.add_tensor("blk.0.w", "f32", [1024, n], data=rng.randbytes(1024 * n * 4))
    w.add_tensor("out", "f16", [256, 8], data=rng.randbytes(4096))
    w.write(path)
    return path


class Editor:
    """Edits through meta/: each kind by name; returns (key, expected text)."""

    def __init__(self, mnt):
        self.meta = os.path.join(mnt, "meta")
        self.n = 0
        self.added = []

    def write(self, key, text, via_shell=False):
        p = os.path.join(self.meta, key)
        if via_shell:
            r = subprocess.run(["bash", "-c", 'printf "%s" "$2" > "$1"', "bash", p, text],
                               capture_output=True, text=True, timeout=60)
            if r.returncode:
                raise OSError(errno.EIO, "bash printf > %s: %s" % (key, r.stderr.strip()))
        else:
            with open(p, "w") as f:
                f.write(text)

    def edit(self, kind, via_shell=False):
        self.n += 1
        i = self.n
        if kind == "name":
            self.write("general.name", name_value(i), via_shell)
            return "general.name", name_value(i)
        if kind == "u32":
            self.write("llama.context_length", "%d\n" % (1000 + i), via_shell)
            return "llama.context_length", str(1000 + i)
        if kind == "newkey":
            k = newkey_name(i)
            self.write(k, "v" * 64, via_shell)
            self.added.append(k)
            return k, "v" * 64
        if kind in ("big", "small"):
            t = template(i, kind == "big")
            self.write("tokenizer.chat_template", t, via_shell)
            return "tokenizer.chat_template", t.rstrip("\n")
        if kind == "delkey":
            k = self.added.pop()
            if via_shell:
                subprocess.run(["rm", os.path.join(self.meta, k)], check=True, timeout=60)
            else:
                os.unlink(os.path.join(self.meta, k))
            return k, None
        raise ValueError(kind)


def ggml_value(ggml, path, key):
    m = ggml.read_gguf(path)
    if m is None:
        return "ggml refuses: %s" % ggml.last_log()
    for k, _, v in m.kvs:
        if k.decode() == key:
            return v.decode() if isinstance(v, bytes) else str(v)
    return None


def in_child(label, fn, *args):
    """Runs fn(*args) -> [(cond, msg)] in a forked child; a child killed by a
    signal (SIGBUS from a mapping) becomes one failed check."""
    rd, wr = ctxm.Pipe(False)

    def run():
        try:
            res = fn(*args)
        except Exception as e:  # noqa: BLE001
            res = [(False, "%s: %s" % (type(e).__name__, e))]
        wr.send(res)

    p = ctxm.Process(target=run)
    p.start()
    wr.close()
    try:
        res = rd.recv()
    except EOFError:
        res = None
    p.join(HANG)
    if res is None:
        return [(False, "%s: the child process died (exit code %s%s)" % (
            label, p.exitcode, ", SIGBUS" if p.exitcode == -7 else ""))]
    return res


def edit_kind(model, before_stat):
    st = os.stat(model)
    if st.st_ino != before_stat.st_ino:
        return "rewrite (new file)"
    return "in place" if st.st_size == before_stat.st_size else "in place, size changed"


# ---- 1. read() across one edit ---------------------------------------------------

def read_tests(h, model, mnt, ggml, tmp, kinds_seen):
    ed = Editor(mnt)
    mg = os.path.join(mnt, "model.gguf")
    for n, (kind, shell) in enumerate([("name", False), ("u32", True), ("newkey", False), ("big", True),
                                       ("small", False), ("delkey", True)]):
        lab = "read() model.gguf across %s edit%s" % (kind, " (bash)" if shell else "")
        with h.case(lab):
            old = harness.file_bytes(model)
            st0 = os.stat(model)
            fd = os.open(mg, os.O_RDONLY)
            try:
                if n % 2 == 0:    # (this caches every page before the edit; odd n: only the first 1000 bytes)
                    d = same(read_range(fd, 0), old)
                    h.check(not d, "%s: model.gguf differs from MODEL.gguf before the edit: %s" % (lab, d))
                half = len(old) // 2 if n % 2 == 0 else 1000
                first = read_range(fd, 0, half)
                key, val = ed.edit(kind, shell)
                new = harness.file_bytes(model)
                kinds_seen.setdefault(kind, set()).add(edit_kind(model, st0))
                h.check(new != old, "%s: MODEL.gguf did not change" % lab)
                rest = read_range(fd, half)
                d = same(first + rest, old)
                h.check(not d, "%s: the descriptor opened before the edit: %s" % (lab, d))
                sz = os.fstat(fd).st_size
                h.check(sz == len(old), "%s: fstat on the old descriptor: %d, the old size is %d (new %d)"
                        % (lab, sz, len(old), len(new)))
                again = read_range(fd, 0)
                h.check(not same(again, old), "%s: re-reading the old descriptor from 0: %s"
                        % (lab, same(again, old)))
            finally:
                os.close(fd)
            fresh = harness.file_bytes(mg)
            h.check(not same(fresh, new), "%s: a fresh open: %s" % (lab, same(fresh, new)))
            h.check(os.stat(mg).st_size == len(new), "%s: stat size %d, new size %d"
                    % (lab, os.stat(mg).st_size, len(new)))
            oldp = os.path.join(tmp, "old.gguf")
            with open(oldp, "wb") as f:
                f.write(first + rest)
            gv_old = ggml_value(ggml, oldp, key)
            gv_new = ggml_value(ggml, model, key)
            h.check(gv_new == val, "%s: ggml reads %s in the new file as %r, expected %r"
                    % (lab, key, str(gv_new)[:60], str(val)[:60]))
            h.check(gv_old is None or not str(gv_old).startswith("ggml refuses"),
                    "%s: ggml on what the old descriptor read: %s" % (lab, gv_old))

    # info
    for kind in ("name", "big", "small"):
        lab = "read() info across %s edit" % kind
        with h.case(lab):
            ip = os.path.join(mnt, "info")
            old = harness.file_bytes(ip)
            fd = os.open(ip, os.O_RDONLY)
            try:
                first = read_range(fd, 0, len(old) // 2)
                ed.edit(kind)
                rest = read_range(fd, len(old) // 2)
                d = same(first + rest, old)
                h.check(not d, "%s: the descriptor opened before the edit: %s" % (lab, d))
                sz = os.fstat(fd).st_size
                h.check(sz == len(old), "%s: fstat on the old descriptor: %d, expected %d" % (lab, sz, len(old)))
            finally:
                os.close(fd)
            new = harness.file_bytes(ip)
            h.check(new != old, "%s: a fresh open of info shows no change" % lab)
            h.check(os.stat(ip).st_size == len(new), "%s: stat size %d, fresh read %d"
                    % (lab, os.stat(ip).st_size, len(new)))

    # meta/KEY
    for kind, key in (("name", "general.name"), ("big", "tokenizer.chat_template"),
                      ("small", "tokenizer.chat_template"), ("u32", "llama.context_length")):
        lab = "read() meta/%s across %s edit" % (key, kind)
        with h.case(lab):
            p = os.path.join(mnt, "meta", key)
            old = harness.file_bytes(p)
            fd = os.open(p, os.O_RDONLY)
            try:
                cut = min(3, len(old))
                first = os.pread(fd, cut, 0)
                _, val = ed.edit(kind)
                rest = read_range(fd, cut)
                h.check(first + rest == old, "%s: the descriptor opened before the edit read %r..., "
                        "expected the old %r..." % (lab, (first + rest)[:40], old[:40]))
            finally:
                os.close(fd)
            got = harness.file_bytes(p)
            h.check(got == (val + "\n").encode(), "%s: a fresh open reads %r..., expected %r..."
                    % (lab, got[:40], (val + "\n")[:40]))


# ---- 2. mmap across one edit -----------------------------------------------------

def mmap_run(model, mnt, kind, n_edits_before):
    """In a child: map, touch some pages, edit, read all pages."""
    res = []
    mg = os.path.join(mnt, "model.gguf")
    ed = Editor(mnt)
    ed.n = 1000 + n_edits_before          # distinct values from the parent's edits
    old = harness.file_bytes(model)
    with open(mg, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        res.append((len(mm) == len(old), "%s: mapping of %d bytes, model %d" % (kind, len(mm), len(old))))
        npages = (len(old) + PAGE - 1) // PAGE
        touched = list(range(0, npages, 3))
        bad = [p for p in touched if mm[p * PAGE:(p + 1) * PAGE] != old[p * PAGE:(p + 1) * PAGE]]
        res.append((not bad, "%s: pages differ before the edit: %r" % (kind, bad[:5])))
        ed.edit(kind)
        new = harness.file_bytes(model)
        res.append((new != old, "%s: MODEL.gguf did not change" % kind))
        got = mm[:]
        d = same(got, old)
        untouched_bad = [p for p in range(npages) if p % 3 and
                         got[p * PAGE:(p + 1) * PAGE] != old[p * PAGE:(p + 1) * PAGE]]
        touched_bad = [p for p in touched if got[p * PAGE:(p + 1) * PAGE] != old[p * PAGE:(p + 1) * PAGE]]
        res.append((not d, "%s: the mapping made before the edit: %s (%d of %d touched pages and %d of %d "
                    "untouched pages differ)" % (kind, d, len(touched_bad), len(touched),
                                                 len(untouched_bad), npages - len(touched))))
        got2 = read_range(f.fileno(), 0)
        res.append((not same(got2, old), "%s: read() on the mapped descriptor after the edit: %s"
                    % (kind, same(got2, old))))
        mm.close()
    with open(mg, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        d = same(mm[:], new)
        res.append((not d, "%s: a new mapping after the edit: %s" % (kind, d)))
        mm.close()
    return res


def mmap_tests(h, model, mnt):
    for i, kind in enumerate(("name", "u32", "big", "small", "newkey")):
        with h.case("mmap across %s edit" % kind):
            for cond, msg in in_child(kind, mmap_run, model, mnt, kind, i * 10):
                h.check(cond, "mmap model.gguf: " + msg)


# ---- 3. concurrent readers across 20 edits ---------------------------------------

EDITS = ["name", "u32", "newkey", "big", "name", "small", "u32", "newkey", "name", "big",
         "u32", "delkey", "name", "small", "newkey", "big", "u32", "name", "small", "delkey"]


def vpath(vdir, what, g):
    return os.path.join(vdir, "%s.%03d" % (what, g))


class Sync:
    """Lock-step without timing: lock orders opens against edits; ready[i] is
    the round reader i holds a descriptor for (partly read); dead[i] is set
    by the main process when reader i died (so the editor does not wait for
    it); done[r] is set when edit r+1 has been committed and recorded."""

    def __init__(self):
        self.G = ctxm.Value("q", 0, lock=False)
        self.lock = ctxm.Lock()
        self.cond = ctxm.Condition()
        self.ready = ctxm.Array("i", [-1] * NREADERS, lock=False)
        self.dead = ctxm.Array("b", [0] * NREADERS, lock=False)
        self.stop = ctxm.Value("b", 0, lock=False)
        self.done = [ctxm.Event() for _ in range(ROUNDS)]

    def all_ready(self, r):
        return self.stop.value or all(self.ready[i] >= r or self.dead[i] for i in range(NREADERS))


def reader_proc(idx, mnt, vdir, sy, out):
    """One reader: a descriptor (or mapping) per round, opened under the lock."""
    what = "model" if idx % 2 == 0 else "info"
    use_mmap = idx in (2, 6)
    path = os.path.join(mnt, "model.gguf" if what == "model" else "info")
    rng = random.Random(idx)
    ok = 0
    msgs = []

    def bad(m):
        if len(msgs) < 6:
            msgs.append("reader %d (%s%s): %s" % (idx, what, ", mmap" if use_mmap else "", m))

    try:
        for r in range(ROUNDS):
            with sy.lock:
                g = sy.G.value
                fd = os.open(path, os.O_RDONLY)
            try:
                if g != r:
                    bad("round %d: opened at generation %d" % (r, g))
                exp = harness.file_bytes(vpath(vdir, what, g))
                mm = None
                if use_mmap:
                    mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
                    if len(mm) != len(exp):
                        bad("round %d: mapping of %d bytes, version %d has %d" % (r, len(mm), g, len(exp)))

                def chunk(a, n):
                    return mm[a:a + n] if mm is not None else os.pread(fd, n, a)

                cut = rng.randrange(0, len(exp) + 1)
                if mm is None:
                    first = read_range(fd, 0, cut)
                    if first != exp[:cut]:
                        bad("round %d: before the edit, [0, %d) differs from version %d: %s"
                            % (r, cut, g, same(first, exp[:cut])))
                else:             # touch every 5th page
                    for a in range(0, len(exp), 5 * PAGE):
                        if mm[a:a + PAGE] != exp[a:a + PAGE]:
                            bad("round %d: before the edit, page at %d differs from version %d" % (r, a, g))
                            break
                with sy.cond:
                    sy.ready[idx] = r
                    sy.cond.notify_all()
                # while the edit runs
                while not sy.done[r].wait(0.002):
                    a = rng.randrange(0, max(1, len(exp)))
                    n = rng.choice([1, 512, 4096, 65536])
                    if chunk(a, n) != exp[a:a + n]:
                        bad("round %d: during the edit, [%d, +%d) differs from version %d" % (r, a, n, g))
                        sy.done[r].wait(HANG)
                        break
                if sy.stop.value:
                    break
                # after it
                whole = mm[:] if mm is not None else first + read_range(fd, cut)
                d = same(whole, exp)
                if d:
                    bad("round %d: descriptor opened on version %d, read after edit %d: %s" % (r, g, r + 1, d))
                else:
                    ok += 1
                sz = os.fstat(fd).st_size
                if sz != len(exp):
                    bad("round %d: fstat of the old descriptor %d, version %d has %d" % (r, sz, g, len(exp)))
                else:
                    ok += 1
                if mm is not None:
                    mm.close()
            finally:
                os.close(fd)
            with sy.lock:
                g2 = sy.G.value
                fd = os.open(path, os.O_RDONLY)
            try:
                exp2 = harness.file_bytes(vpath(vdir, what, g2))
                if g2 != r + 1:
                    bad("round %d: fresh open at generation %d" % (r, g2))
                d = same(read_range(fd, 0), exp2)
                if d:
                    bad("round %d: fresh open after edit %d: %s" % (r, g2, d))
                else:
                    ok += 1
            finally:
                os.close(fd)
    except Exception as e:  # noqa: BLE001
        bad("%s: %s" % (type(e).__name__, e))
        with sy.cond:
            sy.dead[idx] = 1
            sy.cond.notify_all()
    out.put((idx, ok, msgs))


def editor_proc(mnt, model, vdir, sy, out):
    ed = Editor(mnt)
    msgs = []
    kinds = {}
    try:
        for r in range(ROUNDS):
            with sy.cond:
                if not sy.cond.wait_for(lambda: sy.all_ready(r), HANG):
                    raise RuntimeError("round %d: readers not ready (ready %r)" % (r, list(sy.ready)))
            if sy.stop.value:
                break
            with sy.lock:
                st0 = os.stat(model)
                old_info = harness.file_bytes(vpath(vdir, "info", r))
                ed.edit(EDITS[r])
                data = harness.file_bytes(model)
                with open(vpath(vdir, "model", r + 1), "wb") as f:
                    f.write(data)
                info = harness.file_bytes(os.path.join(mnt, "info"))
                with open(vpath(vdir, "info", r + 1), "wb") as f:
                    f.write(info)
                if info == old_info:
                    msgs.append("edit %d (%s): a fresh open of info shows no change" % (r + 1, EDITS[r]))
                k = edit_kind(model, st0)
                kinds.setdefault(EDITS[r], set()).add(k)
                sy.G.value = r + 1
            sy.done[r].set()
    except Exception as e:  # noqa: BLE001
        msgs.append("editor: %s: %s" % (type(e).__name__, e))
        sy.stop.value = 1
        for ev in sy.done:
            ev.set()
    out.put(("editor", kinds, msgs))


def concurrent_tests(h, model, mnt, tmp, kinds_seen):
    vdir = os.path.join(tmp, "versions")
    os.mkdir(vdir)
    shutil.copyfile(model, vpath(vdir, "model", 0))
    with open(vpath(vdir, "info", 0), "wb") as f:
        f.write(harness.file_bytes(os.path.join(mnt, "info")))
    h.check(harness.file_bytes(os.path.join(mnt, "model.gguf")) == harness.file_bytes(model),
            "concurrent: model.gguf differs from MODEL.gguf at the start")
    sy = Sync()
    out = ctxm.Queue()
    procs = [ctxm.Process(target=reader_proc, args=(i, mnt, vdir, sy, out)) for i in range(NREADERS)]
    procs.append(ctxm.Process(target=editor_proc, args=(mnt, model, vdir, sy, out)))
    for p in procs:
        p.start()
    results = []
    reported = set()
    while len(results) < len(procs):
        try:
            res = out.get(timeout=1.0)
            results.append(res)
            reported.add(res[0])
            continue
        except queue.Empty:
            pass
        # a reader killed by a signal (SIGBUS from its mapping) never reports:
        # tell the editor not to wait for it
        for i in range(NREADERS):
            if procs[i].exitcode not in (None, 0) and not sy.dead[i]:
                with sy.cond:
                    sy.dead[i] = 1
                    sy.cond.notify_all()
        if procs[-1].exitcode not in (None, 0):
            sy.stop.value = 1
            for ev in sy.done:
                ev.set()
        if all(p.exitcode is not None for p in procs) and out.empty():
            break
    for p in procs:
        p.join(HANG)
        if p.is_alive():
            p.kill()
            p.join()
    for i, p in enumerate(procs):
        if p.exitcode != 0:
            h.fail("concurrent: %s %d exited with %s%s" % ("reader" if i < NREADERS else "editor", i, p.exitcode,
                                                           " (SIGBUS)" if p.exitcode == -7 else ""))
    total_ok = 0
    for res in results:
        if res[0] == "editor":
            for k, v in res[1].items():
                kinds_seen.setdefault(k, set()).update(v)
            for m in res[2]:
                h.fail("concurrent: " + m)
            h.check(not res[2], "concurrent: editor")
        else:
            idx, ok, msgs = res
            total_ok += ok
            for m in msgs:
                h.fail("concurrent: " + m)
            h.check(ok == 3 * ROUNDS, "concurrent: reader %d: %d of %d checks passed" % (idx, ok, 3 * ROUNDS))
    h.check(len(results) == len(procs), "concurrent: %d of %d processes reported" % (len(results), len(procs)))
    print("concurrent: %d readers x %d edits, %d of %d reader checks passed"
          % (NREADERS, ROUNDS, total_ok, 3 * ROUNDS * NREADERS), flush=True)


# ---- 4. split model ---------------------------------------------------------------

def split_run(mnt, first_shard, kind, use_mmap, tmp, ggml_check):
    res = []
    mg = os.path.join(mnt, "model.gguf")
    ed = Editor(mnt)
    ed.n = 5000 + len(kind) * 10 + use_mmap
    old = harness.file_bytes(mg)
    with open(mg, "rb") as f:
        if use_mmap:
            mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            for p in range(0, (len(old) + PAGE - 1) // PAGE, 4):
                _ = mm[p * PAGE]
        else:
            first = read_range(f.fileno(), 0, len(old) // 2)
        key, val = ed.edit(kind)
        if use_mmap:
            got = mm[:]
            mm.close()
        else:
            got = first + read_range(f.fileno(), len(old) // 2)
        d = same(got, old)
        res.append((not d, "split %s (%s): the handle opened before the edit: %s"
                    % (kind, "mmap" if use_mmap else "read()", d)))
        sz = os.fstat(f.fileno()).st_size
        res.append((sz == len(old), "split %s: fstat of the old handle %d, old size %d" % (kind, sz, len(old))))
    new = harness.file_bytes(mg)
    res.append((new != old, "split %s: model.gguf did not change" % kind))
    p = os.path.join(tmp, "split-new-%s-%d.gguf" % (kind, use_mmap))
    with open(p, "wb") as f:
        f.write(new)
    res.extend(ggml_check(p, key, val, "split %s: new model.gguf" % kind))
    p = os.path.join(tmp, "split-old-%s-%d.gguf" % (kind, use_mmap))
    with open(p, "wb") as f:
        f.write(got)
    res.extend(ggml_check(p, None, None, "split %s: what the old handle read" % kind))
    return res


def split_tests(h, tmp, ggml):
    sdir = os.path.join(tmp, "split")
    os.mkdir(sdir)
    n = 3
    written = {}
    paths = []
    for i in range(n):
        kvs = ([("general.architecture", "string", "llama"), ("general.name", "string", name_value(0)),
                ("llama.context_length", "u32", 2048), ("tokenizer.chat_template", "string", template(0, False))]
               if i == 0 else []) + [("split.no", "u16", i), ("split.count", "u16", n)]
        if i == 0:
            kvs.append(("split.tensors.count", "i32", 2 * n))
        tensors = [("blk.%d.w%d" % (i, k), "f32", [1024, 128]) for k in range(2)]
        p = os.path.join(sdir, "model-%05d-of-%05d.gguf" % (i + 1, n))
        for name, t, ne, raw, _ in ggml.write_model(p, kvs, tensors, seed=i):
            written[name.decode()] = hashlib.sha256(raw).hexdigest()
        paths.append(p)

    def ggml_check(path, key, val, lab):
        m = ggml.read_gguf(path)
        if m is None:
            return [(False, "%s: ggml refuses it: %s" % (lab, ggml.last_log()))]
        res = []
        data = harness.file_bytes(path)
        for t in m.tensors:
            a = m.data_offset + t.offset
            res.append((hashlib.sha256(data[a:a + t.nbytes]).hexdigest() == written[t.name.decode()],
                        "%s: tensor %s bytes differ" % (lab, t.name.decode())))
        if key:
            kv = {k.decode(): v for k, _, v in m.kvs}
            got = kv.get(key)
            got = got.decode() if isinstance(got, bytes) else str(got)
            res.append((got == val, "%s: %s is %r, expected %r" % (lab, key, got[:40], str(val)[:40])))
        return res

    with mount(paths[0]) as mnt:
        for kind, use_mmap in (("name", False), ("big", False), ("u32", True), ("small", True)):
            with h.case("split model.gguf across %s edit" % kind):
                # in a child process, so that a SIGBUS is a failure, not a crash
                for cond, msg in in_child("split %s (%s)" % (kind, "mmap" if use_mmap else "read()"), split_run, mnt, paths[0], kind, use_mmap, tmp, ggml_check):
                    h.check(cond, msg)


def main():
    h = harness.start("versions")
    ggml = harness.require_oracle()
    tmp = tempfile.mkdtemp(prefix="gguffs-versions-")
    kinds_seen = {}
    try:
        mdir = os.path.join(tmp, "model")
        os.mkdir(mdir)
        model = make_model(os.path.join(mdir, "m.gguf"))
        with h.case("read() and mmap across edits"), mount(model) as mnt:
            read_tests(h, model, mnt, ggml, tmp, kinds_seen)
            mmap_tests(h, model, mnt)
        with h.case("concurrent readers"), mount(model) as mnt:
            concurrent_tests(h, model, mnt, tmp, kinds_seen)
        with h.case("split model"):
            split_tests(h, tmp, ggml)
        h.check(sorted(os.listdir(mdir)) == ["m.gguf"], "files left beside the model: %r" % os.listdir(mdir))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("edits seen: %s" % ", ".join("%s: %s" % (k, "/".join(sorted(v))) for k, v in sorted(kinds_seen.items())),
          flush=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

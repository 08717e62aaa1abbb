#!/usr/bin/python3
# Growing edits on loop-mounted XFS (reflink) and btrfs: the tensor data is cloned, not copied (counted: FIEMAP shared extents, gguffs' write_bytes, space used), bit-identical, loaded by ggml; gguffs.padding's rules; crashes before every step; kill -9 trials.
"""
For each of XFS (mkfs.xfs -m reflink=1) and btrfs, on an image the test
makes and loop-mounts (tests/integration/loopfs.py; root; skipped, exit 77,
when mkfs or loop devices are missing and CI is not set):

  1. clone: a model with 64 MiB of tensor data is mounted and its
     tokenizer.chat_template grown by 8 KiB through meta/ (a header that
     outgrows its room).  Counted, no clocks: stats says edits_cloned 1;
     the new file's data region is in extents FIEMAP reports shared (with
     a hard link kept to the old version); gguffs' write_bytes
     (/proc/PID/io: pages it dirtied) grew by at most the header + 1 MiB,
     and the file system's used space by at most 4 MiB; the data is
     bit-identical; ggml loads the file (gguffs.padding a u8 array of
     zeros, the data start moved by whole blocks).  The same edit in the
     test's TMPDIR (ext4 or tmpfs here: no cloning) is the control: copied
     (write_bytes >= the data size), padded for the copy path (at least
     64 KiB to spare: tests/integration/test_padding.py).
  2. the padding key: 100 bytes more are written in place (same inode);
     meta/gguffs.padding shows one 0 per line and refuses writes, creation,
     renames and retyping (EPERM); rm removes it, a later growing edit
     brings it back (cloned again).
  3. crashes before every step (tests/tools/interrupt_edit "#N", torn
     writes and a clone done by halves included) of a cloned growing edit
     and of an edit the padding takes in place; after each, a mount
     (recovery) must show the old or the new version, byte for byte, with
     nothing left beside the model, and ggml must load it.
  4. the edit unit tests (tests/unit/test_edit: crash injection at every
     step of every commit path and of the recovery, kill -9 at random
     moments) with TMPDIR on the image, so the clone path really runs;
  5. kill -9 of gguffs during edits through the mount
     (test_edit_crash.py --fs KIND --require-clone).

Environment: as the other mount tests, plus GGUFFS_INTERRUPT_EDIT and
GGUFFS_TEST_EDIT (the test programs; meson sets them), GGUFFS_TEST_QUICK
(fewer trials).
"""
import errno
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import loopfs  # noqa: E402
from harness import Harness  # noqa: E402

QUICK = harness.QUICK
HERE = os.path.dirname(os.path.abspath(__file__))
DATA_MB = 64
MiB = 1 << 20


def make_model(path, data_mb, tmpl="{{ messages }}"):
    """A llama-like header and one f32 tensor of data_mb MiB (patterned);
    returns the header's size."""
    import gguf_write as gw
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "reflink")
    w.add("llama.context_length", "u32", 4096)
    w.add("tokenizer.chat_template", "string", tmpl)
    w.add("tokenizer.ggml.tokens", "array[string]", ["t%d" % i for i in range(500)])
    n = data_mb * MiB
    w.add_tensor("big.weight", "f32", [1024, n // 4096], data=b"", check=False)
    hdr, _ = w.layout()
    block = hashlib.sha256(b"gguffs").digest() * (MiB // 32)
    with open(path, "wb") as f:
        f.write(hdr)
        for i in range(data_mb):
            f.write(block[i % 32:] + block[:i % 32])
    return len(hdr)


def data_hash(path, off):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(off)
        while True:
            b = f.read(8 * MiB)
            if not b:
                return h.hexdigest()
            h.update(b)


def stats(mnt):
    with open(os.path.join(mnt, "stats")) as f:
        return {k: v for k, v in (line.split(" ", 1) for line in f.read().splitlines())}


def edits(mnt):
    s = stats(mnt)
    return tuple(int(s.get(k, -1)) for k in ("edits_in_place", "edits_cloned", "edits_copied"))


def write_key(mnt, key, text):
    with open(os.path.join(mnt, "meta", key), "w") as f:
        f.write(text)


def errno_of(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


def ggml_kvs(ggml, path):
    m = ggml.read_gguf(path)
    if m is None:
        return None, None
    return m, {k.decode(): v for k, _, v in m.kvs}


def pad_of(kv):
    """The padding key's bytes as ggml reads them, or None."""
    v = kv.get("gguffs.padding")
    if v is None:
        return None
    items = v.items if hasattr(v, "items") else v
    return [int(x) for x in items], getattr(v, "etype", None)


# ------------------------------------------------------------------ 1 and 2

def check_clone(h, ggml, kind, d, control_dir):
    """A growing edit through the mount, counted; then the padding key."""
    label = "%s: growing edit" % kind
    model = os.path.join(d, "m.gguf")
    hdr0 = make_model(model, DATA_MB)
    dlen = os.path.getsize(model) - hdr0
    dh = data_hash(model, hdr0)
    os.link(model, os.path.join(d, "old.gguf"))      # keeps the old version's blocks
    block = os.statvfs(d).f_bsize
    step = loopfs.clone_step(d)
    h.check(step == block, "%s: the file system does not clone (step %d)" % (label, step))
    # (no newline at the end: meta/ drops one written after a string)
    tmpl = "{% for m in messages %}{{ m.content }}{% endfor %}\n" * (8192 // 44) + "."
    used0 = loopfs.used_bytes(d)
    g = harness.Gguffs(model)
    try:
        mnt, pid = g.mnt, g.pid
        w0 = loopfs.write_bytes(pid)
        write_key(mnt, "tokenizer.chat_template", tmpl)
        w1 = loopfs.write_bytes(pid)
        ed = edits(mnt)
        h.check(ed == (0, 1, 0), "%s: stats edits (in place, cloned, copied) = %r, want (0, 1, 0)"
                % (label, ed))
        m, kv = ggml_kvs(ggml, model)
        if h.check(m is not None, "%s: ggml refuses the result: %s" % (label, ggml.last_log())):
            hdr1 = m.data_offset
            h.check(kv.get("tokenizer.chat_template", b"").decode() == tmpl,
                    "%s: ggml reads another template" % label)
            p = pad_of(kv)
            h.check(p is not None and p[1] == "u8" and not any(p[0]) and len(p[0]) >= 1024,
                    "%s: gguffs.padding is not a u8 array of >= 1024 zeros: %r"
                    % (label, None if p is None else (p[1], len(p[0]))))
            h.check((hdr1 - hdr0) % block == 0 and hdr1 > hdr0,
                    "%s: the data start moved from %d to %d: not by whole %d-byte blocks"
                    % (label, hdr0, hdr1, block))
            h.check(os.path.getsize(model) - hdr1 == dlen and data_hash(model, hdr1) == dh,
                    "%s: the tensor data differs" % label)
            shared = loopfs.shared_bytes(model, hdr1)
            h.check(shared >= dlen - 2 * block, "%s: %d of the %d data bytes are in shared "
                    "extents (FIEMAP): not cloned" % (label, shared, dlen))
            used1 = loopfs.used_bytes(d)
            wb = w1 - w0
            h.check(wb <= hdr1 + MiB, "%s: gguffs' write_bytes grew by %d for a %d-byte header "
                    "and %d data bytes" % (label, wb, hdr1, dlen))
            h.check(used1 - used0 <= 4 * MiB, "%s: %d bytes more in use on the file system "
                    "(data: %d)" % (label, used1 - used0, dlen))
            print("%s: %d MiB of tensor data: cloned; gguffs wrote %d bytes (write_bytes; "
                  "header %d), %d bytes more in use, %d bytes in shared extents"
                  % (label, dlen // MiB, wb, hdr1, used1 - used0, shared), flush=True)

        # 2. the padding key
        label = "%s: padding key" % kind
        ino = os.stat(model).st_ino
        w0 = loopfs.write_bytes(pid)
        write_key(mnt, "tokenizer.chat_template", tmpl + "x" * 100)
        ed = edits(mnt)
        h.check(ed == (1, 1, 0), "%s: 100 bytes more: stats %r, want in place (1, 1, 0)" % (label, ed))
        h.check(os.stat(model).st_ino == ino, "%s: an edit in place changed the inode" % label)
        wb = loopfs.write_bytes(pid) - w0
        h.check(wb <= 4 * MiB, "%s: an edit in place wrote %d bytes" % (label, wb))
        with open(os.path.join(mnt, "meta", "gguffs.padding")) as f:
            lines = f.read().split("\n")
        m, kv = ggml_kvs(ggml, model)
        n = len(pad_of(kv)[0]) if m and pad_of(kv) else -1
        h.check(lines[-1] == "" and set(lines[:-1]) == {"0"} and len(lines) - 1 == n,
                "%s: meta/gguffs.padding shows %d lines (%r...), the key has %d bytes"
                % (label, len(lines) - 1, lines[:3], n))
        pad = os.path.join(mnt, "meta", "gguffs.padding")
        for what, fn in [("write", lambda: os.open(pad, os.O_WRONLY | os.O_TRUNC)),
                         ("setfattr user.gguf.type", lambda: os.setxattr(pad, "user.gguf.type", b"u32")),
                         ("mv it", lambda: os.rename(pad, os.path.join(mnt, "meta", "general.pad"))),
                         ("mv a key over it", lambda: os.rename(os.path.join(mnt, "meta", "general.name"), pad))]:
            e = errno_of(fn)
            h.check(e == errno.EPERM, "%s: %s: errno %s, want EPERM" % (label, what, e))
        h.check(edits(mnt) == (1, 1, 0), "%s: a refused change committed something" % label)
        os.unlink(pad)
        ed = edits(mnt)
        m, kv = ggml_kvs(ggml, model)
        h.check(m is not None and "gguffs.padding" not in kv and ed[0] == 1 and ed[1] + ed[2] == 2,
                "%s: rm: stats %r; ggml: %s" % (label, ed, "refused" if m is None else sorted(kv)))
        e = errno_of(lambda: open(pad, "w").close())
        h.check(e == errno.EPERM, "%s: creating it: errno %s, want EPERM" % (label, e))
        write_key(mnt, "tokenizer.chat_template", tmpl * 2)
        ed2 = edits(mnt)
        m, kv = ggml_kvs(ggml, model)
        h.check(ed2[1] == ed[1] + 1 and m is not None and pad_of(kv) is not None,
                "%s: a growing edit after rm: stats %r, key %s" % (label, ed2,
                                                                  m and pad_of(kv) is not None))
        h.check(m is not None and data_hash(model, m.data_offset) == dh,
                "%s: the tensor data differs at the end" % label)
        g.stop(h, label)
    finally:
        g.close()

    # the control: the same edit where the file system does not clone
    if control_dir is None:
        return
    label = "control (%s)" % os.path.dirname(control_dir)
    cmodel = os.path.join(control_dir, "m.gguf")
    make_model(cmodel, DATA_MB)
    with harness.Gguffs(cmodel) as g:
        w0 = loopfs.write_bytes(g.pid)
        write_key(g.mnt, "tokenizer.chat_template", tmpl)
        wb = loopfs.write_bytes(g.pid) - w0
        ed = edits(g.mnt)
        g.stop(h, label)
    m, kv = ggml_kvs(ggml, cmodel)
    p = pad_of(kv) if m is not None else None
    h.check(ed == (0, 0, 1) and p is not None and len(p[0]) >= 64 << 10,
            "%s: stats %r, padding key of %s bytes: want copied, >= 64 KiB of padding"
            % (label, ed, None if p is None else len(p[0])))
    h.check(wb >= dlen, "%s: the copy wrote %d bytes (write_bytes), less than the data (%d): "
            "the measure is wrong" % (label, wb, dlen))
    print("%s: the same edit copied: gguffs wrote %d bytes (write_bytes)" % (label, wb), flush=True)
    os.unlink(cmodel)


# ---------------------------------------------------------------------- 3

def tool():
    p = os.environ.get("GGUFFS_INTERRUPT_EDIT") or os.path.join(harness.SRC, "build", "tests",
                                                                 "integration", "interrupt_edit")
    if not os.access(p, os.X_OK):
        harness.skip_or_fail("interrupt_edit not built (GGUFFS_INTERRUPT_EDIT=%r)" % p)
    return p


def crash_steps(h, ggml, kind, d, scenario):
    """A crash before every step of one edit; after each, recovery by a
    mount must give the old or the new version."""
    label = "%s: crash before every step (%s)" % (kind, scenario)
    model = os.path.join(d, "c.gguf")
    pristine = os.path.join(d, "pristine.gguf")
    for p in (model, pristine):
        if os.path.exists(p):
            os.unlink(p)
    base_tmpl = "{{ x }}"
    make_model(pristine, 8, base_tmpl)
    key, value = "tokenizer.chat_template", "t" * 6000
    if scenario == "padding in place":
        # a padded version first (cloned), then an edit that fits
        r = subprocess.run([tool(), pristine, key, value, "#999"], capture_output=True, text=True)
        h.check(r.returncode == 2 and "cloned" in r.stdout, "%s: making the padded model: %r %r"
                % (label, r.stdout, r.stderr))
        value += "u" * 200
    with open(pristine, "rb") as f:
        old = f.read()
    m0 = ggml.read_gguf(pristine)
    old_hdr = old[:m0.data_offset]
    dh = hashlib.sha256(old[m0.data_offset:]).hexdigest()
    # the new version: the edit run to its end
    shutil.copyfile(pristine, model)
    r = subprocess.run([tool(), model, key, value, "#999"], capture_output=True, text=True)
    want = "cloned" if scenario == "cloned" else "in place"
    if not h.check(r.returncode == 2 and want in r.stdout, "%s: the uninterrupted edit: rc %d, %r %r"
                   % (label, r.returncode, r.stdout, r.stderr)):
        return
    m1 = ggml.read_gguf(model)
    with open(model, "rb") as f:
        new_hdr = f.read(m1.data_offset)
    versions = [old_hdr, new_hdr]
    prev, n, outcomes = 0, 0, [0, 0]
    while True:
        shutil.copyfile(pristine, model)
        r = subprocess.run([tool(), model, key, value, "#%d" % n], capture_output=True, text=True)
        if not h.check(r.returncode in (0, 2), "%s: step %d: rc %d %r" % (label, n, r.returncode, r.stderr)):
            return
        step = r.stdout.strip()
        with harness.mount(model):      # recovery
            pass
        left = sorted(set(os.listdir(d)) - {"c.gguf", "pristine.gguf"})
        h.check(not left, "%s: %s: left beside the model: %r" % (label, step, left))
        with open(model, "rb") as f:
            cur = f.read()
        which = [i for i, v in enumerate(versions) if cur.startswith(v) and
                 hashlib.sha256(cur[len(v):]).hexdigest() == dh]
        if not h.check(which, "%s: %s: neither the old nor the new version (size %d)"
                       % (label, step, len(cur))):
            return
        w = which[-1]
        h.check(w >= prev, "%s: %s: back to the old version after the new one" % (label, step))
        m = ggml.read_gguf(model)
        h.check(m is not None and m.data_offset == len(versions[w]),
                "%s: %s: ggml: %s" % (label, step, ggml.last_log() if m is None else m.data_offset))
        prev = w
        outcomes[w] += 1
        if r.returncode == 2:
            break
        n += 1
    h.check(outcomes[0] and outcomes[1], "%s: outcomes old/new %r" % (label, outcomes))
    print("%s: %d steps, crashes before each then a mount: %d old, %d new" % (label, n, outcomes[0],
                                                                              outcomes[1] - 1), flush=True)
    os.unlink(model)
    os.unlink(pristine)


# ------------------------------------------------------------------ 4 and 5

def unit_tests(h, kind, d):
    exe = os.environ.get("GGUFFS_TEST_EDIT") or os.path.join(harness.SRC, "build", "tests", "unit",
                                                            "test_edit")
    if not os.access(exe, os.X_OK):
        harness.skip_or_fail("tests/unit/test_edit not built (GGUFFS_TEST_EDIT=%r)" % exe)
    env = dict(os.environ, TMPDIR=d, GGUFFS_CRASH_TRIALS="40" if QUICK else "100")
    r = subprocess.run([exe], capture_output=True, text=True, env=env)
    out = r.stdout + r.stderr
    h.check(r.returncode == 0 and "TMPDIR clones" in out,
            "%s: tests/unit/test_edit with TMPDIR on it: rc %d\n%s" % (kind, r.returncode, out[-3000:]))
    for line in out.splitlines():
        if "padded:" in line or "TMPDIR clones" in line or line.startswith("kill -9:"):
            print("%s: test_edit: %s" % (kind, line.strip()), flush=True)


def kill_trials(h, kind):
    trials = 8 if QUICK else 12
    r = subprocess.run([sys.executable, os.path.join(HERE, "test_edit_crash.py"), "--fs", kind,
                        "--require-clone", "--trials", str(trials), "--size-mb", "64"],
                       capture_output=True, text=True)
    out = r.stdout + r.stderr
    h.check(r.returncode == 0, "%s: test_edit_crash.py --fs %s: rc %d\n%s"
            % (kind, kind, r.returncode, out[-3000:]))
    for line in out.splitlines():
        if line.startswith(("trials:", "kills:", "rewrites planned", "edit-crash:")):
            print("%s: kill -9: %s" % (kind, line), flush=True)


def main():
    harness.require_fuse()
    harness.gguffs_bin()
    ggml = harness.require_oracle()
    for kind in ("xfs", "btrfs"):
        loopfs.require(kind)
    h = Harness("reflink")
    control = tempfile.mkdtemp(prefix="gguffs-reflink-control-")
    if loopfs.clone_step(control):
        print("TMPDIR clones: no copy control", flush=True)
        shutil.rmtree(control)
        control = None
    try:
        for kind in ("xfs", "btrfs"):
            fs = loopfs.LoopFs(kind, size_mb=512)
            try:
                d = os.path.join(fs.path, "models")
                os.mkdir(d)
                with h.case("%s: clone" % kind):
                    check_clone(h, ggml, kind, d, control)
                for f in os.listdir(d):
                    os.unlink(os.path.join(d, f))
                for scenario in ("cloned", "padding in place"):
                    with h.case("%s: crash steps, %s" % (kind, scenario)):
                        crash_steps(h, ggml, kind, d, scenario)
                u = os.path.join(fs.path, "unit")
                os.mkdir(u)
                with h.case("%s: unit tests" % kind):
                    unit_tests(h, kind, u)
            finally:
                fs.close()
            with h.case("%s: kill -9" % kind):
                kill_trials(h, kind)
    finally:
        if control:
            shutil.rmtree(control, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

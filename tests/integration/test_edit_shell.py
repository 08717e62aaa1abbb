#!/usr/bin/python3
# Shell edits that must fail where the shell sees it (write(), not close()), and the text forms editors save: arrays of numbers checked line by line as they are written, white space and CRLF around numbers, bools in any case.
"""
Each case runs a real shell command on a mounted model and checks the rule
of the Editing section: exit status 0 => the new value is in MODEL.gguf
(parsed afresh from the file); non-zero => MODEL.gguf is unchanged byte for
byte.

  array appends    `echo garbage >> meta/ARR` (f32, i32, u8, bool arrays)
                   fails (EINVAL in write(): the shell's exit status is not
                   0) and changes nothing; `echo 1.5 >> meta/ARR` appends;
                   `printf '1\\n2\\nx\\n3\\n' > meta/ARR` fails; a Python
                   writer that sends a valid array in 7-byte pieces (lines
                   cut across writes) succeeds; a pwrite that puts a bad
                   byte into a line written earlier fails in that write
  rename           `mv meta/general.ratio meta/tokenizer.ggml.bos_token_id`
                   (f32 over u32) fails (EEXIST) and changes nothing; a
                   rename over a key of the same type replaces it
  remount at once  20 times: an edit, fusermount3 -u, and a read-write
                   mount of the same model right away (the old gguffs may
                   still hold the model's write lock): it mounts (waits
                   for the lock, bounded) and shows the edit; the same
                   with the lock held by the test and let go once gguffs
                   has the model open (it mounts), and never let go (one
                   line after 10 s, exit 1, nothing mounted)
  editors' text    `printf '4096 \\n'`, `4096\\r\\n`, `\\t4096` set 4096;
                   `TRUE`/`False` set a bool; `yes` fails; a CRLF array
                   file sets the same array as LF
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import gguf_write as gw  # noqa: E402
import pyreader  # noqa: E402


def make_model(path):
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "shell edits")
    w.add("llama.context_length", "u32", 2048)
    w.add("t.flag", "bool", 0)
    w.add("general.ratio", "f32", 0.5)
    w.add("tokenizer.ggml.bos_token_id", "u32", 1)
    w.add("tokenizer.ggml.eos_token_id", "u32", 2)
    w.add("tokenizer.ggml.scores", "array[f32]", [0.5, -1.25, 3.0])
    w.add("t.ids", "array[i32]", [1, -2, 3])
    w.add("t.bytes", "array[u8]", [1, 2, 3])
    w.add("t.flags", "array[bool]", [1, 0])
    w.add_tensor("w", "f32", [8], data=bytes(range(32)))
    w.write(path)


def value(model, key):
    for kv in pyreader.read(model).kvs:
        if kv.key == key.encode():
            return harness.norm(kv.value)
    return None


def sh(script):
    return subprocess.run(["sh", "-c", script], capture_output=True, timeout=60)


class Case:
    """One command against a fresh copy of the model: (exit status, model
    bytes before, after)."""

    def __init__(self, h, tmp, base):
        self.h, self.tmp, self.base = h, tmp, base
        self.n = 0

    def run(self, label, script_of, want=None, key=None, fail=False, py=None):
        self.n += 1
        model = os.path.join(self.tmp, "m%d.gguf" % self.n)
        with open(self.base, "rb") as f, open(model, "wb") as g:
            g.write(f.read())
        before = open(model, "rb").read()
        with harness.mount(model) as mnt:
            meta = os.path.join(mnt, "meta")
            if py is not None:
                rc = py(meta)
                err = b""
            else:
                r = sh(script_of(meta))
                rc, err = r.returncode, r.stderr
        after = open(model, "rb").read()
        h = self.h
        if fail:
            h.check(rc != 0, "%s: exit status 0, but the edit must fail" % label)
            h.check(after == before, "%s: refused (exit %d) but MODEL.gguf changed" % (label, rc))
        else:
            if h.check(rc == 0, "%s: exit status %d: %r" % (label, rc, err)):
                got = value(model, key)
                h.check(got == want, "%s: %s in the file is %r, want %r" % (label, key, got, want))
        print("  %-60s exit %d%s" % (label, rc, ", file unchanged" if after == before else ""),
              flush=True)


def py_pieces(text, key, piece=7):
    """A writer that sends text in small pieces (lines cut across writes)."""
    def run(meta):
        fd = os.open(os.path.join(meta, key), os.O_WRONLY | os.O_TRUNC)
        try:
            for i in range(0, len(text), piece):
                os.write(fd, text[i:i + piece])
        except OSError:
            os.close(fd)
            return 1
        os.close(fd)
        return 0
    return run


def py_rewrite_early_line(key):
    """On one descriptor: appends valid lines, then pwrites a bad byte into
    the first line; that write fails, and so does close (nothing lands)."""
    def run(meta):
        fd = os.open(os.path.join(meta, key), os.O_RDWR)
        rc = 0
        try:
            end = os.fstat(fd).st_size
            os.pwrite(fd, b"7\n8\n", end)
            try:
                os.pwrite(fd, b"z", 0)
            except OSError:
                rc = 1            # the write that made the text invalid
        finally:
            try:
                os.close(fd)
            except OSError:
                rc = 1            # a refused write: the text is never committed
        return rc
    return run


def remount_at_once(h, tmp, base):
    model = os.path.join(tmp, "remount.gguf")
    with open(base, "rb") as f, open(model, "wb") as g:
        g.write(f.read())
    cycles = 10 if harness.QUICK else 20
    prev = harness.Gguffs(model)
    ok = 0
    try:
        for i in range(cycles):
            r = sh("echo %d > %s/meta/llama.context_length" % (1000 + i, prev.mnt))
            h.check(r.returncode == 0, "remount %d: the edit: %r" % (i, r.stderr))
            r = subprocess.run(["fusermount3", "-u", prev.mnt], capture_output=True)
            h.check(r.returncode == 0, "remount %d: fusermount3 -u: %r" % (i, r.stderr))
            try:
                g = harness.Gguffs(model)
            except harness.MountError as e:
                h.fail("remount %d: a read-write mount right after the unmount: %s" % (i, e))
                break
            prev.check_clean(h, "remount %d: the old mount" % i, signalled=False)
            prev.close()
            prev = g
            with open(os.path.join(g.mnt, "meta", "llama.context_length")) as f:
                ok += h.check(f.read() == "%d\n" % (1000 + i), "remount %d: the edit is not shown" % i)
        prev.stop(h, "the last remount")
    finally:
        prev.close()
    h.check(value(model, "llama.context_length") == 1000 + cycles - 1, "remount: the last edit")
    print("  %d of %d read-write remounts right after an unmount came up with the edit"
          % (ok, cycles), flush=True)


def ofd_lock(fd, kind):
    """F_OFD_SETLK of the whole file (kind: fcntl.F_WRLCK or F_UNLCK)."""
    import fcntl
    import struct
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, 0, 0, 0, 0))


def opened_by(pid, path):
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for d in fds:
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, d)) == path:
                return True
        except OSError:
            pass
    return False


def lock_held_by_test(h, tmp, base):
    import fcntl
    model = os.path.join(tmp, "held.gguf")
    with open(base, "rb") as f, open(model, "wb") as g:
        g.write(f.read())
    fd = os.open(model, os.O_RDWR)
    # what gguffs says at once, before it waits: who holds the lock (this
    # process), how long it waits
    waits = "gguffs: %s: %s (pid %d) holds a write lock on it; waiting up to 10 s" % (
        model, open("/proc/self/comm").read().strip(), os.getpid())
    try:
        # let go once gguffs has said it waits: it is then taking the lock
        ofd_lock(fd, fcntl.F_WRLCK)
        mnt = tempfile.mkdtemp(prefix="gguffs-held-")
        p = subprocess.Popen([harness.gguffs_bin(), "-f", model, mnt], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            # waits on the event (the line; gguffs ends within 10 s if it
            # never comes), no sleep
            first = p.stderr.readline().decode(errors="replace")
            seen = opened_by(p.pid, model)
            ofd_lock(fd, fcntl.F_UNLCK)
            h.check(first.startswith(waits), "held lock: the first line is %r, want it to start "
                    "with %r, said before the wait ends" % (first, waits))
            if not seen:
                h.fail("held lock: gguffs ended before opening the model: %r"
                       % (first.encode() + p.stderr.read(),))
            elif not harness.wait_mounted(mnt, p):
                h.fail("held lock let go: gguffs did not mount: %r"
                       % (p.stderr.read() if p.poll() is not None else b"(still running)",))
        finally:
            harness.unmount(mnt)
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()
            os.rmdir(mnt)
        # never let go: refused after the wait, one line after the first
        ofd_lock(fd, fcntl.F_WRLCK)
        mnt = tempfile.mkdtemp(prefix="gguffs-held-")
        try:
            rc, _, err = harness.run_gguffs(["-f", model, mnt], timeout=120)
            err = err.decode(errors="replace")
            lines = err.split("\n")
            h.check(rc == 1 and len(lines) == 3 and lines[0].startswith(waits) and
                    "waited 10 s" in lines[1] and "-o ro" in lines[1] and lines[2] == "" and
                    not harness.is_mounted(mnt),
                    "held lock kept: want exit 1, the line saying it waits, one line after the "
                    "wait: %d %r" % (rc, err))
        finally:
            harness.unmount(mnt)
            os.rmdir(mnt)
    finally:
        os.close(fd)
    h.check(open(model, "rb").read() == open(base, "rb").read(), "held lock: the model changed")


def main():
    h = harness.start("edit-shell")
    with tempfile.TemporaryDirectory(prefix="gguffs-shell-") as tmp:
        base = os.path.join(tmp, "base.gguf")
        make_model(base)
        c = Case(h, tmp, base)
        with h.case("array appends"):
            for key in ("tokenizer.ggml.scores", "t.ids", "t.bytes", "t.flags"):
                c.run("echo garbage >> %s" % key, lambda m, k=key: "echo garbage >> %s/%s" % (m, k),
                      fail=True)
                c.run("printf '1\\n2\\nx\\n3\\n' > %s" % key,
                      lambda m, k=key: "printf '1\\n2\\nx\\n3\\n' > %s/%s" % (m, k), fail=True)
            c.run("echo 1.5 >> tokenizer.ggml.scores",
                  lambda m: "echo 1.5 >> %s/tokenizer.ggml.scores" % m,
                  want=[0.5, -1.25, 3.0, 1.5], key="tokenizer.ggml.scores")
            c.run("echo -7 >> t.ids", lambda m: "echo -7 >> %s/t.ids" % m,
                  want=[1, -2, 3, -7], key="t.ids")
            text = b"".join(b"%d\n" % (i * 37 - 500) for i in range(200))
            c.run("200 i32 lines written 7 bytes at a time", None, py=py_pieces(text, "t.ids"),
                  want=[i * 37 - 500 for i in range(200)], key="t.ids")
            c.run("a bad byte pwritten into an earlier line", None,
                  py=py_rewrite_early_line("t.ids"), fail=True)
        with h.case("rename"):
            c.run("mv general.ratio (f32) over tokenizer.ggml.bos_token_id (u32)",
                  lambda m: "mv %s/general.ratio %s/tokenizer.ggml.bos_token_id" % (m, m), fail=True)
            c.run("mv eos_token_id over bos_token_id (both u32)",
                  lambda m: "mv %s/tokenizer.ggml.eos_token_id %s/tokenizer.ggml.bos_token_id" % (m, m),
                  want=2, key="tokenizer.ggml.bos_token_id")
        with h.case("remount at once"):
            remount_at_once(h, tmp, base)
            lock_held_by_test(h, tmp, base)
        with h.case("editors' text"):
            for text, shown in ((r"4096 \n", "'4096 '"), (r"4096\r\n", "CRLF"),
                                (r"\t4096\n", "tab before")):
                c.run("printf %s > llama.context_length" % shown,
                      lambda m, t=text: "printf '%s' > %s/llama.context_length" % (t, m),
                      want=4096, key="llama.context_length")
            c.run("echo TRUE > t.flag", lambda m: "echo TRUE > %s/t.flag" % m, want=1, key="t.flag")
            c.run("echo yes > t.flag", lambda m: "echo yes > %s/t.flag" % m, fail=True)
            c.run("a CRLF array file", lambda m: r"printf '5\r\n6\r\n' > %s/t.ids" % m,
                  want=[5, 6], key="t.ids")
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# A shell edit either lands durably or the shell sees it fail: read-only bind mount, unwritable folder (chattr +i), two rw mounts (OFD lock), -o ro beside a rw mount, -o log_file.
"""
The rule checked after every edit made through a shell (`sh -c 'echo V >
MNT/meta/KEY'`, and `sed -i` where it applies): exit status 0 => the new
value is in MODEL.gguf, parsed afresh with tests/oracle/pyreader.py;
non-zero => MODEL.gguf is unchanged byte for byte.  On top of the rule,
each case says which outcome it must have (the environment forbids the
edit: non-zero; it allows it: 0).

  - the model reached through a read-only bind mount of its folder, gguffs
    mounted read-write (the default): one stderr line at mount, every edit
    (echo, sed -i, setfattr, rm, mv) fails at once with EROFS;
  - the model's folder made immutable (chattr +i, undone in finally; on a
    loop-mounted ext4 image where the temporary directory's file system has
    no chattr) after the mount: an edit in place and one that outgrows the
    header's room (a new file) both fail with EACCES at open; once the
    folder is writable again the same edits land;
  - the folder immutable before the mount: one stderr line says edits
    cannot land and why, meta/ and its files show no write bit, edits fail
    with EACCES (also once the folder is writable again: that mount stays
    as it was said to be); a new mount edits;
  - two read-write mounts of one model: the second says at once that it
    waits and why, then is refused with one line naming the first's pid,
    exit 1, also after the first rewrote the file (the lock moved to the
    new inode); A's edits land; after A unmounts, B mounts;
  - -o ro beside a read-write mount: mounted, reads the model, its edits
    fail with EROFS;
  - -o log_file=F, daemonized: `echo garbage > meta/U32` fails, F (mode
    0600) has a line with a timestamp, the mount point, the key and the
    reason; 60 refused writes are each either a line or counted in a
    "suppressed" line once gguffs has exited (the rate limit loses no count);
  - a full disk (a 2 MiB tmpfs): an edit in place lands, one that needs a
    new file fails with EIO at close, the model is the old
    version, nothing is left behind, the log says why.

Needs root (bind mounts, chattr); skips without it unless CI is set.
"""
import errno
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import gguf_write as gw  # noqa: E402  (path set up by harness)
import pyreader  # noqa: E402

BIG = "x" * 20000          # outgrows any header's room: a rewrite


def make_model(path):
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "env")
    w.add("t.u32", "u32", 4096)
    w.add("t.string", "string", "hello world")
    w.add_tensor("w", "f32", [64, 2], data=bytes(range(256)) * 2)
    w.write(path)
    return path


def value(model, key):
    f = pyreader.read_bytes(harness.file_bytes(model))
    for kv in f.kvs:
        if kv.key.decode() == key:
            v = harness.norm(kv.value)
            return v.decode() if isinstance(v, bytes) else v
    return None


def sh(script):
    return harness.run(["sh", "-c", script])


class Rule:
    """Runs shell edits of one model and checks the rule after each."""

    def __init__(self, h, model):
        self.h, self.model = h, model

    def edit(self, label, script, key, expect, want_ok):
        """script (sh -c) should set key to expect; want_ok: the outcome
        the case requires (True: exit 0, False: non-zero, None: either)."""
        h = self.h
        before = harness.file_bytes(self.model)
        r = sh(script)
        if r.returncode == 0:
            got = value(self.model, key)
            h.check(got == expect, "%s: exit 0 but MODEL.gguf holds %s=%r, expected %r"
                    % (label, key, str(got)[:60], str(expect)[:60]))
        else:
            h.check(harness.file_bytes(self.model) == before,
                    "%s: exit %d but MODEL.gguf changed" % (label, r.returncode))
        if want_ok is not None:
            h.check((r.returncode == 0) == want_ok, "%s: exit %d (%s), expected %s"
                    % (label, r.returncode, r.stderr.strip()[:200],
                       "0" if want_ok else "non-zero"))
        return r

    def errno_of(self, label, fn, want):
        before = harness.file_bytes(self.model)
        try:
            fn()
            got = None
        except OSError as e:
            got = e.errno
        self.h.check(got == want, "%s: errno %s, expected %s" % (
            label, errno.errorcode.get(got, got), errno.errorcode.get(want, want)))
        if got is not None:
            self.h.check(harness.file_bytes(self.model) == before,
                         "%s: failed but MODEL.gguf changed" % label)


def run_ok(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError("%s: %s" % (" ".join(cmd), r.stderr.strip()))


# ---- cases -------------------------------------------------------------------

def case_ro_bind(h, tmp):
    d = os.path.join(tmp, "robind")
    ro = os.path.join(tmp, "robind-ro")
    os.mkdir(d)
    os.mkdir(ro)
    make_model(os.path.join(d, "m.gguf"))
    try:
        run_ok(["mount", "--bind", d, ro])
    except OSError as e:
        harness.skip_or_fail("bind mount: %s" % e)
    try:
        run_ok(["mount", "-o", "remount,bind,ro", ro])
        model = os.path.join(ro, "m.gguf")
        rule = Rule(h, model)
        with harness.mounted(model) as g:
            err = g.stderr()
            h.check("cannot be written" in err and "EROFS" in err,
                    "mount on a read-only bind mount: stderr does not say edits fail: %r" % err)
            m = g.mnt
            rule.edit("ro bind: echo", "echo 8192 > %s/meta/t.u32" % m, "t.u32", 8192, False)
            rule.edit("ro bind: echo (rewrite)", "echo %s > %s/meta/t.string" % (BIG, m),
                      "t.string", BIG, False)
            rule.edit("ro bind: sed -i", "sed -i s/hello/bye/ %s/meta/t.string" % m,
                      "t.string", "bye world", False)
            rule.edit("ro bind: create", "echo 1 > %s/meta/t.new_key" % m, "t.new_key", 1, False)
            p = os.path.join(m, "meta", "t.u32")
            rule.errno_of("ro bind: open O_WRONLY", lambda: os.close(os.open(p, os.O_WRONLY)),
                          errno.EROFS)
            rule.errno_of("ro bind: setxattr",
                          lambda: os.setxattr(p, "user.gguf.type", b"u64"), errno.EROFS)
            rule.errno_of("ro bind: unlink", lambda: os.unlink(p), errno.EROFS)
            rule.errno_of("ro bind: rename",
                          lambda: os.rename(p, os.path.join(m, "meta", "t.other")), errno.EROFS)
            h.check(open(p).read() == "4096\n", "ro bind: meta/t.u32 does not read 4096")
    finally:
        subprocess.run(["umount", ro], capture_output=True)


def immutable_dir(tmp):
    """A folder where chattr +i works: in tmp if its file system has it,
    else on a loop-mounted ext4 image (returned second, to close)."""
    d = os.path.join(tmp, "imm")
    os.mkdir(d)
    if subprocess.run(["chattr", "+i", d], capture_output=True).returncode == 0:
        subprocess.run(["chattr", "-i", d], capture_output=True)
        return d, None
    import loopfs
    fs = loopfs.LoopFs("ext4", 64)
    d = os.path.join(fs.path, "imm")
    os.mkdir(d)
    return d, fs


def case_immutable_dir(h, tmp):
    if not shutil.which("chattr"):
        harness.skip_or_fail("chattr is missing (e2fsprogs)")
    d, loop = immutable_dir(tmp)
    try:
        model = make_model(os.path.join(d, "m.gguf"))
        rule = Rule(h, model)
        with harness.mounted(model) as g:
            m = g.mnt
            run_ok(["chattr", "+i", d])
            try:
                rule.edit("chattr +i: echo (in place)", "echo 8192 > %s/meta/t.u32" % m,
                          "t.u32", 8192, False)
                rule.edit("chattr +i: echo (rewrite)", "echo %s > %s/meta/t.string" % (BIG, m),
                          "t.string", BIG, False)
                rule.edit("chattr +i: sed -i", "sed -i s/hello/bye/ %s/meta/t.string" % m,
                          "t.string", "bye world", False)
                p = os.path.join(m, "meta", "t.u32")
                rule.errno_of("chattr +i: open O_WRONLY",
                              lambda: os.close(os.open(p, os.O_WRONLY)), errno.EACCES)
            finally:
                subprocess.run(["chattr", "-i", d], capture_output=True)
            rule.edit("writable again: echo", "echo 8192 > %s/meta/t.u32" % m, "t.u32", 8192, True)
            rule.edit("writable again: echo (rewrite)",
                      "echo %s > %s/meta/t.string" % (BIG, m), "t.string", BIG, True)
        # immutable before the mount: said at mount, meta/ read-only
        model = os.path.join(d, "m.gguf")
        run_ok(["chattr", "+i", d])
        try:
            with harness.mounted(model) as g:
                m = g.mnt
                err = [x for x in g.stderr().split("\n") if x]
                h.check(len(err) == 1 and err[0].startswith("gguffs: %s: cannot be written: its "
                                                            "folder %s " % (model, os.path.realpath(d))) and
                        err[0].endswith("meta/ is read-only, edits fail with EACCES"),
                        "chattr +i at mount: want one line saying edits cannot land, got %r" % err)
                p = os.path.join(m, "meta", "t.u32")
                modes = [stat.S_IMODE(os.stat(x).st_mode) for x in (os.path.join(m, "meta"), p)]
                h.check(modes == [0o555, 0o444], "chattr +i at mount: meta/ and meta/t.u32 have "
                        "modes %s, want 555 and 444" % ["%o" % x for x in modes])
                rule.edit("chattr +i at mount: echo", "echo 8192 > %s/meta/t.u32" % m,
                          "t.u32", 8192, False)
                rule.errno_of("chattr +i at mount: open O_WRONLY",
                              lambda: os.close(os.open(p, os.O_WRONLY)), errno.EACCES)
                subprocess.run(["chattr", "-i", d], capture_output=True)
                rule.edit("chattr +i at mount, then -i: echo", "echo 8193 > %s/meta/t.u32" % m,
                          "t.u32", 8193, False)
        finally:
            subprocess.run(["chattr", "-i", d], capture_output=True)
        with harness.mounted(model) as g:
            h.check(g.stderr().strip() == "", "folder writable again: the mount says %r"
                    % g.stderr())
            rule.edit("folder writable again, new mount: echo",
                      "echo 8194 > %s/meta/t.u32" % g.mnt, "t.u32", 8194, True)
    finally:
        subprocess.run(["chattr", "-i", d], capture_output=True)
        if loop:
            loop.close()


def refused_second(h, label, model, pid):
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, out, err = harness.run_gguffs([model, mnt])
        text = err.decode(errors="replace").strip()
        h.check(rc == 1, "%s: second rw mount exited %d, expected 1 (%r)" % (label, rc, text))
        h.check(not harness.is_mounted(mnt), "%s: second rw mount is mounted" % label)
        lines = text.split("\n")
        who = "another gguffs mounts it read-write (pid %d)" % pid
        h.check(len(lines) == 2 and who in lines[0] and "waiting up to 10 s" in lines[0] and
                who in lines[1] and "waited 10 s" in lines[1],
                "%s: want a line saying it waits for pid %d, then one refusing, got %r"
                % (label, pid, text))
    finally:
        harness.unmount(mnt)
        os.rmdir(mnt)


def case_two_rw(h, tmp):
    d = os.path.join(tmp, "two")
    os.mkdir(d)
    model = make_model(os.path.join(d, "m.gguf"))
    rule = Rule(h, model)
    with harness.mounted(model) as a:
        refused_second(h, "two rw", model, a.pid)
        rule.edit("two rw: A writes 777", "echo 777 > %s/meta/t.u32" % a.mnt, "t.u32", 777, True)
        ino = os.stat(model).st_ino
        rule.edit("two rw: A rewrites", "echo %s > %s/meta/t.string" % (BIG, a.mnt),
                  "t.string", BIG, True)
        h.check(os.stat(model).st_ino != ino, "two rw: the growing edit did not write a new file")
        refused_second(h, "two rw, after A's rewrite", model, a.pid)
        with harness.mounted(model, ["-o", "ro"]) as b:
            h.check(open(os.path.join(b.mnt, "meta", "t.u32")).read() == "777\n",
                    "-o ro beside rw: meta/t.u32 does not read 777")
            rule.edit("-o ro beside rw: echo", "echo 888 > %s/meta/t.u32" % b.mnt,
                      "t.u32", 888, False)
            rule.errno_of("-o ro beside rw: open O_WRONLY",
                          lambda: os.close(os.open(os.path.join(b.mnt, "meta", "t.u32"),
                                                   os.O_WRONLY)), errno.EROFS)
        rule.edit("two rw: A writes 999", "echo 999 > %s/meta/t.u32" % a.mnt, "t.u32", 999, True)
    with harness.mounted(model) as b:
        rule.edit("after A unmounted: B writes 888", "echo 888 > %s/meta/t.u32" % b.mnt,
                  "t.u32", 888, True)


LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ gguffs\[\d+\]: (\S+): (.*)$")


def case_log_file(h, tmp):
    d = os.path.join(tmp, "log")
    os.mkdir(d)
    model = make_model(os.path.join(d, "m.gguf"))
    log = os.path.join(d, "gguffs.log")
    rule = Rule(h, model)
    n = 60
    with harness.mount_daemon(model, ["-o", "log_file=" + log]) as mnt:
        pid = harness.find_daemon(mnt)
        rule.edit("log: echo garbage", "echo garbage > %s/meta/t.u32" % mnt, "t.u32", None, False)
        with open(log) as f:
            lines = f.read().splitlines()
        h.check(stat.S_IMODE(os.stat(log).st_mode) == 0o600,
                "log: mode %o, expected 600" % stat.S_IMODE(os.stat(log).st_mode))
        ok = [ln for ln in lines if LINE.match(ln) and "meta/t.u32" in ln and
              "Invalid argument" in ln and "garbage" in ln]
        h.check(len(ok) == 1, "log: want one line with the timestamp, key and reason, got %r"
                % lines)
        h.check(all(LINE.match(ln) and LINE.match(ln).group(1) == os.path.realpath(mnt)
                     for ln in lines), "log: lines do not name the mount point: %r" % lines)
        r = sh("i=0; f=0; while [ $i -lt %d ]; do echo garbage > %s/meta/t.u32 || f=$((f+1)); "
               "i=$((i+1)); done; echo $f" % (n, mnt))
        h.check(r.stdout.strip() == str(n), "log: %s of %d refused writes failed"
                % (r.stdout.strip(), n))
    h.check(pid is not None and harness.wait_pid_exit(pid, harness.EXIT_WAIT),
            "log: the daemon did not exit after the unmount")
    with open(log) as f:
        lines = f.read().splitlines()
    refused = sum(1 for ln in lines if "meta/t.u32" in ln and "edit refused" in ln)
    suppressed = sum(int(m.group(1)) for m in
                     (re.search(r": (\d+) more messages? like the last one suppressed$", ln)
                      for ln in lines) if m)
    h.check(refused + suppressed == n + 1, "log: %d lines + %d suppressed, expected %d refusals"
            % (refused, suppressed, n + 1))
    h.check(refused <= n + 1, "log: more lines than refusals")
    h.check(value(model, "t.u32") == 4096, "log: t.u32 changed")


def case_full_disk(h, tmp):
    """The model on a 2 MiB tmpfs with 1.25 MiB of tensor data: an edit in
    place (a small journal) lands; one that outgrows the header's room
    needs a new file of the model's size, which the full disk refuses: it
    fails at close with EIO (as the README says; sh does not look at
    close), the model is the old version byte for byte, the partial new file is gone
    (the space is free again), the log names the key and the cause, and a
    later edit in place still lands."""
    d = os.path.join(tmp, "full")
    os.mkdir(d)
    run_ok(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", d])
    try:
        w = gw.GGUFWriter()
        w.add("general.architecture", "string", "llama")
        w.add("t.u32", "u32", 4096)
        w.add("t.string", "string", "hello world")
        w.add_tensor("w", "f32", [64, 5120], data=bytes(range(256)) * 5120)
        model = os.path.join(d, "m.gguf")
        w.write(model)
        rule = Rule(h, model)
        log = os.path.join(tmp, "full.log")
        free0 = os.statvfs(d).f_bavail
        with harness.mounted(model, ["-o", "log_file=" + log]) as g:
            meta = os.path.join(g.mnt, "meta")
            rule.edit("full disk: in place", "echo 8192 > %s/t.u32" % meta, "t.u32", 8192, True)
            # the failure comes at close, which sh ignores (README: only the
            # write itself fails at close): a program that checks close sees it

            def write_close():
                with open(os.path.join(meta, "t.string"), "w") as f:
                    f.write(BIG + "\n")
            for i in range(2):
                rule.errno_of("full disk: a rewrite, write then close (%d)" % (i + 1), write_close,
                              errno.EIO)
            left = [x for x in os.listdir(d) if x not in ("m.gguf", "m.gguf.gguffs-journal",
                                                           "m.gguf.gguffs-edits")]
            h.check(left == [], "full disk: files left beside the model: %r" % left)
            h.check(os.statvfs(d).f_bavail >= free0 - 8,
                    "full disk: %d blocks free after the failed edits, %d before"
                    % (os.statvfs(d).f_bavail, free0))
            rule.edit("full disk: in place after", "echo 77 > %s/t.u32" % meta, "t.u32", 77, True)
            with open(os.path.join(meta, "t.string")) as f:
                h.check(f.read() == "hello world\n", "full disk: meta/t.string is not the old value")
        with open(log) as f:
            lines = [ln for ln in f.read().splitlines() if "meta/t.string" in ln]
        h.check(len(lines) == 2 and all("failed (Input/output error)" in ln and
                                        "No space left on device" in ln for ln in lines),
                "full disk: want two log lines naming the key, EIO and ENOSPC: %r" % lines)
    finally:
        subprocess.run(["umount", d], capture_output=True)


def main():
    h = harness.start("edit-env")
    harness.require_fuse()
    harness.gguffs_bin()
    if os.geteuid() != 0:
        harness.skip_or_fail("bind mounts and chattr need root")
    tmp = tempfile.mkdtemp(prefix="gguffs-env-")
    try:
        for label, fn in (("read-only bind mount", case_ro_bind),
                          ("unwritable folder (chattr +i)", case_immutable_dir),
                          ("two read-write mounts, -o ro beside", case_two_rw),
                          ("-o log_file", case_log_file),
                          ("a full disk", case_full_disk)):
            with h.case(label):
                fn(h, tmp)
    finally:
        subprocess.run(["chattr", "-R", "-i", tmp], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(h.finish())


if __name__ == "__main__":
    main()

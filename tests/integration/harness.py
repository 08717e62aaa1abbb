# Mount-test plumbing: find gguffs, mount a model on a temp dir (gguffs -f as a child, its stderr checked), always unmount, count passes and failures.
"""
Environment: GGUFFS_BIN (build/gguffs), GGUFFS_ORACLE (libggml-base.so),
GGUFFS_CORPUS (../shared/corpus), GGUFFS_SRC (source tree), CI (set on CI:
missing prerequisites then fail instead of skipping with exit code 77).

    h = Harness("corpus")
    with h.case("some check"):
        with mount(model) as mnt:
            h.check(cond, "what was expected, what was got")
    sys.exit(h.finish())    # prints "N passed, N failed"

mount() runs `gguffs -f MODEL MNT` as a child process (class Gguffs), its
stdout and stderr going to a temporary file, so that what happens inside
the file system is seen: after the unmount the child must exit with status
0 and its stderr must hold no sanitizer report (AddressSanitizer,
LeakSanitizer, UndefinedBehaviorSanitizer's "runtime error:",
ThreadSanitizer) and no failed assertion; otherwise the test fails with
that stderr shown.  (The daemonizing mode, whose stderr is /dev/null, is
used only by the tests that check it: mount_daemon().)  Nothing here sleeps
to synchronise: the mount is awaited with poll() on /proc/self/mountinfo
(POLLPRI when the mount table changes) and on a pidfd of the child (its
exit), the exit with Popen.wait().
"""
import contextlib
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("GGUFFS_SRC") or os.path.abspath(os.path.join(HERE, "..", ".."))
# tests/oracle: ggml.py, pyreader.py, expected.py, gguf_write.py
sys.path.insert(0, os.path.join(SRC, "tests", "oracle"))

SKIP = 77
IN_CI = bool(os.environ.get("CI"))
# The sanitizer CI run (scripts/test sets GGUFFS_TEST_QUICK with ASan+UBSan)
QUICK = bool(os.environ.get("GGUFFS_TEST_QUICK"))
# Hang guards (a hang fails instead of waiting for meson's timeout), not
# performance bounds: how long a mount may take to appear, and a child to
# exit once unmounted (LeakSanitizer's scan at exit takes a while).
MOUNT_WAIT = 120.0
EXIT_WAIT = 60.0
# Lines on gguffs' stderr that mean a bug even when the exit status is 0.
SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "ThreadSanitizer",
                     "WARNING: ThreadSanitizer", "MemorySanitizer",
                     "UndefinedBehaviorSanitizer", "runtime error:", "Assertion `",
                     "Segmentation fault")
ERROR_LINE = re.compile(r"^gguffs: (.+?): (.+) \(at byte offset (\d+)\)$")


def skip_or_fail(why):
    """Missing prerequisite: exit 77 (skip), or fail when CI is set."""
    if IN_CI:
        print("FAIL: %s (CI is set, so this is an error)" % why)
        print("0 passed, 1 failed")
        sys.exit(1)
    print("SKIP: %s" % why)
    sys.exit(SKIP)


def gguffs_bin():
    b = os.environ.get("GGUFFS_BIN") or os.path.join(SRC, "build", "fs", "gguffs")
    if not os.path.exists(b):
        alt = os.path.join(SRC, "build", "gguffs")
        b = alt if os.path.exists(alt) else b
    if not os.access(b, os.X_OK):
        skip_or_fail("gguffs binary not found (GGUFFS_BIN=%r)" % b)
    return b


def require_fuse():
    if not os.path.exists("/dev/fuse"):
        skip_or_fail("/dev/fuse is missing")
    if not shutil.which("fusermount3"):
        skip_or_fail("fusermount3 is not installed")


def require_oracle():
    import ggml
    try:
        ggml.lib()
    except (OSError, FileNotFoundError) as e:
        skip_or_fail("ggml oracle unavailable: %s" % e)
    return ggml


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == path:
                return True
    return False


def unmount(mnt):
    """Unmounts every layer at mnt (fusermount3 -u, at once lazily (-z) if
    that fails: busy)."""
    for _ in range(5):
        if not is_mounted(mnt):
            return True
        r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
    return not is_mounted(mnt)


def pidfd(pid):
    """A pidfd of pid (readable once it has exited), or None if the kernel
    or Python has none."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def wait_mounted(mnt, proc, timeout=MOUNT_WAIT):
    """Waits until mnt is in the mount table or proc (a Popen) has exited,
    whichever comes first, without sleeping: poll() on /proc/self/mountinfo
    (the kernel reports POLLPRI|POLLERR on it when the mount table changes)
    and on a pidfd of proc.  True if mnt is mounted.  timeout only guards
    against a hang."""
    mfd = os.open("/proc/self/mountinfo", os.O_RDONLY)
    pfd = pidfd(proc.pid)
    try:
        p = select.poll()
        p.register(mfd, select.POLLPRI | select.POLLERR)
        if pfd is not None:
            p.register(pfd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            # (checked after opening mountinfo: a change from then on wakes poll)
            if is_mounted(mnt):
                return True
            if proc.poll() is not None:
                return is_mounted(mnt)
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # without a pidfd the child's exit is noticed on the next round
            # (the kernel reports each change once per open file; changes
            # anywhere in the namespace wake us too: we just look again)
            p.poll(1000 * (left if pfd is not None else min(left, 0.1)))
    finally:
        os.close(mfd)
        if pfd is not None:
            os.close(pfd)


def wait_unmounted(mnt, timeout=MOUNT_WAIT):
    """Waits (poll() on /proc/self/mountinfo) until mnt is no longer in the
    mount table.  True if it is gone; timeout only guards against a hang."""
    mfd = os.open("/proc/self/mountinfo", os.O_RDONLY)
    try:
        p = select.poll()
        p.register(mfd, select.POLLPRI | select.POLLERR)
        deadline = time.monotonic() + timeout
        while is_mounted(mnt):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            p.poll(1000 * left)
        return True
    finally:
        os.close(mfd)


def wait_pid_exit(pid, timeout):
    """Waits until process pid (not necessarily our child: a daemonized
    gguffs) has exited, with poll() on its pidfd.  True if it is gone."""
    fd = pidfd(pid)
    if fd is None:
        deadline = time.monotonic() + timeout     # no pidfd: look repeatedly
        while os.path.exists("/proc/%d" % pid) and time.monotonic() < deadline:
            select.select([], [], [], 0.05)
        return not os.path.exists("/proc/%d" % pid)
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        return bool(p.poll(1000 * timeout))
    finally:
        os.close(fd)


def sanitized():
    """True if the gguffs under test is built with a sanitizer (ASan or
    UBSan): slower, so hang guards that are tight otherwise are relaxed."""
    try:
        with open(gguffs_bin(), "rb") as f:
            data = f.read()
    except OSError:
        return False
    return b"__asan_init" in data or b"__ubsan_handle_" in data


def thread_stacks(pid):
    """The kernel stack and wchan of every thread of pid, and gdb's
    backtraces if gdb is installed: for reporting a hang."""
    out = []
    try:
        for tid in sorted(os.listdir("/proc/%d/task" % pid), key=int):
            try:
                with open("/proc/%d/task/%s/wchan" % (pid, tid)) as f:
                    w = f.read()
            except OSError:
                w = "?"
            try:
                with open("/proc/%d/task/%s/stack" % (pid, tid)) as f:
                    st = f.read().strip().replace("\n", " | ")
            except OSError:
                st = "(no stack)"
            out.append("  thread %s wchan %s: %s" % (tid, w, st[:400]))
    except OSError as e:
        out.append("  (%s)" % e)
    gdb = shutil.which("gdb")
    if gdb:
        try:
            r = subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            out.append("  gdb thread apply all bt:\n" + r.stdout[-12000:])
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append("  (gdb: %s)" % e)
    return "\n".join(out)


def sanitizer_report(text):
    """The part of gguffs' stderr from the first sanitizer (or assertion)
    line on, or None if there is none."""
    at = [text.find(m) for m in SANITIZER_MARKERS if m in text]
    if not at:
        return None
    start = text.rfind("\n", 0, min(at)) + 1
    return text[start:]


def run_gguffs(args, timeout=60):
    """Runs gguffs; returns (returncode, stdout bytes, stderr bytes).
    Output goes to files, not pipes, so a daemon keeping a descriptor open
    cannot hang the test."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        r = subprocess.run([gguffs_bin()] + list(args), stdout=out, stderr=err,
                           stdin=subprocess.DEVNULL, timeout=timeout)
        out.seek(0)
        err.seek(0)
        return r.returncode, out.read(), err.read()


class MountError(Exception):
    pass


class DaemonError(MountError):
    """gguffs ended badly: non-zero exit, a sanitizer report, still running
    or still mounted after the unmount."""


class Gguffs:
    """gguffs -f [OPTS] MODEL MNT as a child process of the test, stdout and
    stderr into a temporary file (a file, not a pipe: nothing can block on
    it).  The constructor returns once the mount is in the mount table
    (MountError, with gguffs' stderr, if gguffs exits first).

        g = Gguffs(model, ["-o", "ro"])          # mnt: a new temporary dir
        ... g.mnt, g.proc.pid, g.stderr() ...
        g.stop(h, "label")    # unmount, wait for the exit, check: status 0,
                              # no sanitizer report, mount gone
        g.close()             # always (finally): kills what is left, rmdir

    After a signal sent on purpose, check_clean(h, label) waits for the exit
    and checks the same without unmounting.  kill() is SIGKILL on purpose
    (crash tests): then only stderr is checked.  Problems go to h (one
    failure each) or, without h, raise DaemonError."""

    def __init__(self, model, opts=(), mnt=None, env=None):
        self.made = mnt is None
        self.mnt = tempfile.mkdtemp(prefix="gguffs-mnt-") if mnt is None else mnt
        self.model = model
        self.killed = False
        self.closed = False
        fd, self.errpath = tempfile.mkstemp(prefix="gguffs-stderr-")
        try:
            self.proc = subprocess.Popen([gguffs_bin(), "-f"] + list(opts) + [model, self.mnt],
                                         stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env)
        except BaseException:
            os.close(fd)
            self._remove()
            raise
        os.close(fd)
        try:
            ok = wait_mounted(self.mnt, self.proc)
        except BaseException:
            self.close()
            raise
        if not ok:
            rc = self.proc.poll()
            err = self.stderr().strip()
            self.close()
            if rc is None:
                raise MountError("gguffs -f %s: not mounted after %.0f s; stderr: %s"
                                 % (os.path.basename(model), MOUNT_WAIT, err[-3000:]))
            raise MountError("gguffs %s exited %d: %s" % (os.path.basename(model), rc, err[-3000:]))

    @property
    def pid(self):
        return self.proc.pid

    def stderr(self):
        try:
            with open(self.errpath, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=EXIT_WAIT):
        """The exit status, or None if still running after timeout."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def _report(self, h, label, problems):
        if not problems:
            return True
        msgs = ["%s%s" % (label + ": " if label else "", p) for p in problems]
        if h is None:
            raise DaemonError("; ".join(msgs))
        for m in msgs:
            h.fail(m)
        return False

    def _problems(self, rc, waited, signalled=False):
        out = []
        text = self.stderr()
        if rc is None:
            out.append("gguffs (pid %d) still running %.0f s after %s" % (
                self.proc.pid, waited, "the signal" if signalled else "the unmount"))
        elif rc != 0 and not self.killed:
            out.append("gguffs exited with status %d; stderr: %s" % (rc, text[-3000:] or "(empty)"))
        rep = sanitizer_report(text)
        if rep:
            out.append("gguffs' stderr has a sanitizer report or a failed assertion:\n%s"
                       % rep[:6000])
        if is_mounted(self.mnt) and not self.killed:
            out.append("%s is still mounted after gguffs ended" % self.mnt)
        return out

    def check_clean(self, h=None, label="", timeout=EXIT_WAIT, signalled=True):
        """Waits for gguffs to exit by itself (after a signal or an unmount
        done by the test) and checks it: status 0 within timeout, no
        sanitizer report, the mount gone.  Returns the exit status."""
        rc = self.wait(timeout)
        self._report(h, label, self._problems(rc, timeout, signalled))
        if rc is None:
            self.kill()
        return rc

    def stop(self, h=None, label=""):
        """Unmounts, waits for the exit and checks it (see check_clean)."""
        if self.proc.poll() is None:
            unmount(self.mnt)
        return self.check_clean(h, label, signalled=False)

    def kill(self, h=None, label=""):
        """SIGKILL on purpose (and wait); stderr is still checked for a
        sanitizer report printed before the kill."""
        self.killed = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        rep = sanitizer_report(self.stderr())
        if rep:
            self._report(h, label, ["gguffs' stderr has a sanitizer report (before the kill):\n%s"
                                    % rep[:6000]])

    def _remove(self):
        try:
            os.unlink(self.errpath)
        except OSError:
            pass
        if self.made:
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass

    def close(self):
        """Cleans up whatever state things are in: unmounts, kills a gguffs
        still running, removes the stderr file and a mount point it made.
        No checks (stop/check_clean do them)."""
        if self.closed:
            return
        self.closed = True
        if self.proc.poll() is None:
            unmount(self.mnt)
            if self.wait(EXIT_WAIT) is None:
                self.proc.kill()
                self.proc.wait()
        unmount(self.mnt)
        self._remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


@contextlib.contextmanager
def mount(model, options=(), mnt=None):
    """Mounts model with gguffs -f (class Gguffs) on a new temporary
    directory (or mnt), yields the mount point, and always unmounts and
    removes it afterwards; raises DaemonError if gguffs then exits non-zero
    or printed a sanitizer report."""
    g = Gguffs(model, options, mnt)
    try:
        yield g.mnt
    finally:
        try:
            g.stop(None, "gguffs -f %s" % os.path.basename(model))
        finally:
            g.close()


@contextlib.contextmanager
def mount_daemon(model, options=(), mnt=None):
    """Mounts model with the daemonizing gguffs (returns when the mount is
    ready; its stderr is /dev/null afterwards), yields the mount point, and
    always unmounts and removes it afterwards.  Only for tests of the
    daemon mode itself (test_cli, test_mount); the others use mount()."""
    made = mnt is None
    if made:
        mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, out, err = run_gguffs(list(options) + [model, mnt])
        if rc != 0:
            raise MountError("gguffs %s exited %d: %s" % (
                os.path.basename(model), rc, err.decode(errors="replace").strip()))
        if not is_mounted(mnt):
            raise MountError("gguffs returned 0 but %s is not mounted" % mnt)
        yield mnt
    finally:
        ok = unmount(mnt)
        if made:
            try:
                os.rmdir(mnt)
            except OSError:
                pass
        if not ok:
            raise MountError("could not unmount %s" % mnt)


def check_refused(h, model, label, want_offset=None):
    """gguffs refuses model: non-zero exit, exactly one stderr line of the
    form "gguffs: MODEL: what (at byte offset N)", nothing mounted."""
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, out, err = run_gguffs([model, mnt])
        mounted = is_mounted(mnt)
        text = err.decode(errors="replace")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        h.check(rc != 0, "%s: exit status should be non-zero, got %d" % (label, rc))
        h.check(not mounted, "%s: something is mounted after a refusal" % label)
        h.check(len(lines) == 1, "%s: want exactly one stderr line, got %d: %r" % (label, len(lines), text[:300]))
        m = ERROR_LINE.match(lines[0]) if lines else None
        h.check(m is not None, "%s: stderr line does not match 'gguffs: MODEL: ... (at byte offset N)': %r"
                % (label, lines[0] if lines else ""))
        if m:
            h.check(any(lines[0].startswith("gguffs: %s: " % p) for p in (model, os.path.basename(model))),
                    "%s: the line does not start with 'gguffs: %s: ': %r" % (label, model, lines[0]))
            if want_offset is not None:
                h.check(int(m.group(3)) == want_offset, "%s: offset %s, expected %d (%r)"
                        % (label, m.group(3), want_offset, lines[0]))
        return lines[0] if lines else ""
    finally:
        unmount(mnt)
        try:
            os.rmdir(mnt)
        except OSError:
            pass


class Harness:
    def __init__(self, name):
        self.name = name
        self.passed = 0
        self.failed = 0
        self.notes = []
        self.t0 = time.time()

    def check(self, cond, msg):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL: %s" % msg, flush=True)
        return bool(cond)

    def fail(self, msg):
        return self.check(False, msg)

    def note(self, msg):
        """An observation that is not a failure (an open point of the
        contract, a feature not there yet).  Printed once per kind: notes
        that differ only after "(first seen" count as the same."""
        kind = msg.split(" (first seen")[0]
        if kind not in self.notes:
            self.notes.append(kind)
            print("NOTE: %s" % msg, flush=True)

    @contextlib.contextmanager
    def case(self, label):
        """Runs a block; an exception in it is one failure, not a crash."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 - report and go on
            self.fail("%s: %s: %s" % (label, type(e).__name__, e))
            if os.environ.get("GGUFFS_TEST_TRACE"):
                traceback.print_exc()

    def finish(self):
        print("%s: %d passed, %d failed (%.1fs)" % (self.name, self.passed, self.failed,
                                                    time.time() - self.t0))
        return 1 if self.failed else 0

# Mount-test plumbing: find gguffs, mount a model on a temp dir (gguffs -f as a child, its stderr checked), always unmount, count passes and failures.
"""
Environment: GGUFFS_BIN (build/gguffs), GGUFFS_ORACLE (libggml-base.so),
GGUFFS_CORPUS (tests/corpus, the real files the repository carries),
GGUFFS_CORPUS_EXTRA (../shared/corpus: more real files where it exists beside
the checkout, read as well, never instead), GGUFFS_SRC (source tree), CI (set on CI:
missing prerequisites then fail instead of skipping with exit code 77).

    h = harness.start("corpus")     # /dev/fuse and gguffs there, or skip
    with h.case("some check"):
        with mount(model) as mnt:
            h.check(cond, "what was expected, what was got")
    sys.exit(h.finish())    # prints "N passed, N failed"

What every mount test shares lives here, in sections: prerequisites,
the mount table and unmounting, waiting without sleeping, gguffs seen from
outside (sanitizer builds, thread stacks, RSS, the stats file), the gguffs
child process (Gguffs, mounted, mount, mount_daemon, check_refused),
small helpers on files, commands and ggml's values, and the counting of
checks (Harness).

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
import hashlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
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


# ---- prerequisites -----------------------------------------------------------

def skip_or_fail(why):
    """Missing prerequisite: exit 77 (skip), or fail when CI is set."""
    if IN_CI:
        print("FAIL: %s (CI is set, so this is an error)" % why)
        print("0 passed, 1 failed")
        sys.exit(1)
    print("SKIP: %s" % why)
    sys.exit(SKIP)


def test_seed(given=None, env="GGUFFS_TEST_SEED", fixed=20261128):
    """The seed of a randomized test: given (--seed), else $env, else a
    fixed one when CI is set (a CI run is repeatable), else a new one (runs
    by hand explore).  The caller prints it, so a failure can be rerun."""
    import random
    if given is not None:
        return given
    if os.environ.get(env):
        return int(os.environ[env])
    return fixed if IN_CI else random.randrange(1 << 30)


def corpus_dirs():
    """The corpus folders, each holding real/ (and real/nonstandard/): the
    repository's own tests/corpus always, then $GGUFFS_CORPUS_EXTRA
    (../shared/corpus) where it exists."""
    own = os.environ.get("GGUFFS_CORPUS") or os.path.join(SRC, "tests", "corpus")
    extra = os.environ.get("GGUFFS_CORPUS_EXTRA") or os.path.join(SRC, "..", "shared", "corpus")
    dirs = [own]
    if os.path.isdir(os.path.join(extra, "real")) and \
            os.path.realpath(extra) != os.path.realpath(own):
        dirs.append(extra)
    return dirs


def corpus_files(sub=""):
    """The .gguf files of real/SUB over corpus_dirs(), one per name (the
    repository's copy first), sorted by name."""
    import glob
    seen = {}
    for d in corpus_dirs():
        for f in glob.glob(os.path.join(d, "real", sub, "*.gguf")):
            seen.setdefault(os.path.basename(f), f)
    return [seen[k] for k in sorted(seen)]


def corpus_file(name):
    """real/NAME of the repository's own corpus (tests/corpus): a file the
    tests can count on in any clone."""
    return os.path.join(corpus_dirs()[0], "real", name)


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


# ---- the mount table -----------------------------------------------------------

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
    that fails: busy; last umount -l, for a mount fusermount3 will not
    touch, e.g. one made by mount(8)).  True if nothing is mounted there."""
    for _ in range(5):
        if not is_mounted(mnt):
            return True
        r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
    if is_mounted(mnt):
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    return not is_mounted(mnt)


# ---- waiting without sleeping ------------------------------------------------

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


# ---- gguffs seen from outside ------------------------------------------------

def _built_with(*markers):
    try:
        with open(gguffs_bin(), "rb") as f:
            data = f.read()
    except OSError:
        return False
    return any(m in data for m in markers)


def sanitized():
    """True if the gguffs under test is built with a sanitizer (ASan, UBSan
    or TSan): slower, so hang guards that are tight otherwise are relaxed."""
    return _built_with(b"__asan_init", b"__ubsan_handle_", b"__tsan_init")


def tsan():
    """True if the gguffs under test is built with ThreadSanitizer, whose
    shadow memory (several times what the program touches) makes its RSS
    say nothing about what gguffs holds: RSS bounds are not checked then."""
    return _built_with(b"__tsan_init")


def no_quarantine_env():
    """The environment for a gguffs whose RSS is measured: ASan's quarantine
    (256 MB of freed memory kept resident) off.  No effect on other builds."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ((env["ASAN_OPTIONS"] + ":") if env.get("ASAN_OPTIONS") else "") + \
        "quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
    return env


def find_daemon(mnt):
    """The pid of the gguffs serving mnt (a daemonized one is not our
    child), or None."""
    mnt = os.path.realpath(mnt).encode()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if args and os.path.basename(args[0]) == b"gguffs" and \
                any(a and os.path.realpath(a) == mnt for a in args):
            return int(d)
    return None


def rss_kib(pid):
    """VmRSS of pid in KiB (OSError once it is gone)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class RssPeak:
    """Samples the RSS of pid every period seconds on a thread (a sampling
    period, not synchronisation) from the start of a with block to its end:
    base (KiB, at the start), peak (KiB), grown_mib (peak - base), gone
    (the process vanished while sampled)."""

    def __init__(self, pid, period=0.05):
        self.pid = pid
        self.period = period
        self.base = self.peak = rss_kib(pid)
        self.gone = False
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period)

    def sample(self):
        try:
            self.peak = max(self.peak, rss_kib(self.pid))
        except OSError:
            self.gone = True
        return not self.gone

    @property
    def grown_mib(self):
        return (self.peak - self.base) / 1024.0

    def __enter__(self):
        self._th.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._th.join()
        self.sample()
        return False


def read_stats(mnt):
    """MNT/stats as {name: int} (lines "name number"); {} if unreadable."""
    out = {}
    try:
        with open(os.path.join(mnt, "stats")) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if v.strip().isdigit():
                    out[k] = int(v)
    except OSError:
        pass
    return out


def thread_stacks(pid, gdb_limit=12000):
    """The kernel stack and wchan of every thread of pid, and gdb's
    backtraces if gdb is installed (the last gdb_limit characters; None:
    all of them): for reporting a hang."""
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
            out.append("  gdb thread apply all bt:\n" + (r.stdout if gdb_limit is None else r.stdout[-gdb_limit:]))
        except (OSError, subprocess.TimeoutExpired) as e:
            out.append("  (gdb: %s)" % e)
    return "\n".join(out)


def live_gguffs():
    """(pid, mount point) of every running gguffs of this build (the binary
    the tests run), children of the test or daemonized."""
    try:
        exe = os.path.realpath(gguffs_bin())
    except SystemExit:
        return []
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.path.realpath("/proc/%s/exe" % d) != exe:
                continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        out.append((int(d), args[-1] if args else "?"))
    return out


def _stats_text(mnt, limit=5.0):
    """MNT/stats as text, read on a thread of its own: a hung mount may
    never answer, and the report must not hang with it."""
    box = []

    def rd():
        try:
            with open(os.path.join(mnt, "stats")) as f:
                box.append(f.read())
        except OSError as e:
            box.append("(stats: %s)" % e)
    t = threading.Thread(target=rd, daemon=True)
    t.start()
    t.join(limit)
    return box[0] if box else "(stats: no answer in %.0f s)" % limit


def report_hang(reason, pids=None):
    """For a hang guard that fires: every live gguffs' threads (kernel
    stacks and gdb's backtraces: thread_stacks) and its mount's stats,
    printed into the test's log, before the caller kills anything."""
    procs = live_gguffs() if pids is None else [(p, m) for p, m in live_gguffs() if p in pids]
    print("HANG GUARD: %s; %d gguffs process(es)" % (reason, len(procs)), flush=True)
    for pid, mnt in procs:
        print("---- gguffs pid %d, mount %s: stats\n%s" % (pid, mnt, _stats_text(mnt)), flush=True)
        print("---- gguffs pid %d: threads\n%s" % (pid, thread_stacks(pid)), flush=True)


def _watchdog(name, limit):
    """Runs beside the test: past limit seconds, reports the hang
    (report_hang), kills every gguffs of this build, unmounts lazily and
    ends the test as failed. meson's own timeout would kill the test's
    process group after half a second, leaving no stacks."""
    time.sleep(limit)
    report_hang("%s still running after %.0f s (its meson timeout is near)" % (name, limit))
    for pid, mnt in live_gguffs():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True, timeout=30)
    print("FAIL: %s: the hang guard fired after %.0f s (stacks above)" % (name, limit), flush=True)
    sys.stdout.flush()
    os._exit(1)


def start_watchdog(name):
    """The test's hang guard, from GGUFFS_TEST_TIMEOUT (its meson timeout,
    set by tests/integration/meson.build) times
    GGUFFS_TEST_TIMEOUT_MULTIPLIER (meson test -t, set by scripts/test),
    less a margin, so that it fires before meson kills the test."""
    t = os.environ.get("GGUFFS_TEST_TIMEOUT")
    if not t:
        return
    total = float(t) * float(os.environ.get("GGUFFS_TEST_TIMEOUT_MULTIPLIER") or 1)
    limit = total - max(20.0, 0.05 * total)
    threading.Thread(target=_watchdog, args=(name, limit), daemon=True).start()


# ---- the gguffs child process -------------------------------------------------

def sanitizer_report(text):
    """The part of gguffs' stderr from the first sanitizer (or assertion)
    line on, or None if there is none."""
    at = [text.find(m) for m in SANITIZER_MARKERS if m in text]
    if not at:
        return None
    start = text.rfind("\n", 0, min(at)) + 1
    return text[start:]


# The line a daemonizing gguffs prints where no syslog daemon listens (no
# /dev/log: most containers and CI machines), saying that messages go to
# MOUNTPOINT/log.  run_gguffs leaves it out of the stderr it returns, so
# that the checks of other lines hold on machines with and without syslog;
# test_cli checks the line itself, with /dev/log made present and absent.
LOG_NOTICE = re.compile(rb"^gguffs: no syslog here \(/dev/log does not exist\): [^\n]*\n?", re.M)


def drop_log_notice(err):
    """err (bytes) without the no-syslog line (LOG_NOTICE)."""
    return LOG_NOTICE.sub(b"", err)


def run_gguffs(args, timeout=60, env=None, keep_notice=False):
    """Runs gguffs; returns (returncode, stdout bytes, stderr bytes), the
    no-syslog line left out of stderr unless keep_notice (LOG_NOTICE).
    Output goes to files, not pipes, so a daemon keeping a descriptor open
    cannot hang the test.  env: its environment (default: ours)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        r = subprocess.run([gguffs_bin()] + list(args), stdout=out, stderr=err,
                           stdin=subprocess.DEVNULL, timeout=timeout, env=env)
        out.seek(0)
        err.seek(0)
        e = err.read()
        return r.returncode, out.read(), e if keep_notice else drop_log_notice(e)


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

    def __init__(self, model, opts=(), mnt=None, env=None, argv=None):
        """argv: the whole command line instead of `gguffs -f OPTS MODEL
        MNT`, for another foreground FUSE server run and checked the same
        way (scripts/bench: the null server, another build); it must name
        mnt, which must then be given."""
        self.made = mnt is None
        self.mnt = tempfile.mkdtemp(prefix="gguffs-mnt-") if mnt is None else mnt
        self.model = model
        self.killed = False
        self.closed = False
        fd, self.errpath = tempfile.mkstemp(prefix="gguffs-stderr-")
        try:
            if argv is None:
                argv = [gguffs_bin(), "-f"] + list(opts) + [model, self.mnt]
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env)
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
            if rc is None:
                # a mount that does not answer: its threads first (a hang)
                report_hang("gguffs -f %s: not mounted after %.0f s" % (os.path.basename(model), MOUNT_WAIT),
                            [self.proc.pid])
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
def mounted(model, options=(), mnt=None, env=None):
    """Mounts model with gguffs -f (class Gguffs) on a new temporary
    directory (or mnt), yields the Gguffs (g.mnt, g.pid, ...), and always
    unmounts and removes it afterwards; raises DaemonError if gguffs then
    exits non-zero or printed a sanitizer report."""
    g = Gguffs(model, options, mnt, env)
    try:
        yield g
    finally:
        try:
            g.stop(None, "gguffs -f %s" % os.path.basename(model))
        finally:
            g.close()


@contextlib.contextmanager
def mount(model, options=(), mnt=None):
    """mounted(), yielding the mount point."""
    with mounted(model, options, mnt) as g:
        yield g.mnt


@contextlib.contextmanager
def mount_daemon(model, options=(), mnt=None, env=None):
    """Mounts model with the daemonizing gguffs (returns when the mount is
    ready; its stderr is /dev/null afterwards), yields the mount point, and
    always unmounts and removes it afterwards, once the daemon has exited.
    Only for tests of the daemon mode itself (test_cli, test_mount) and scripts/bench's
    mount-to-ready timings; the others use mount().  env: gguffs'
    environment (default: ours)."""
    made = mnt is None
    if made:
        mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    pid = None
    try:
        rc, out, err = run_gguffs(list(options) + [model, mnt], env=env)
        if rc != 0:
            raise MountError("gguffs %s exited %d: %s" % (
                os.path.basename(model), rc, err.decode(errors="replace").strip()))
        if not is_mounted(mnt):
            raise MountError("gguffs returned 0 but %s is not mounted" % mnt)
        pid = find_daemon(mnt)
        yield mnt
    finally:
        ok = unmount(mnt)
        # the daemon lets go of the model (its lock) when it exits, a
        # moment after the unmount: a mount of the same model next would
        # wait for it, and say so
        if pid is not None:
            wait_pid_exit(pid, EXIT_WAIT)
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


def parsed_or_refused(h, model, label, read):
    """read(model) (a Python reader's parse), or None for a file the
    reader cannot parse: allowed only for the corpus's nonstandard/ files,
    which gguffs must refuse too (checked); any other file that does not
    parse fails the test instead of going unchecked."""
    try:
        return read(model)
    except Exception as e:  # noqa: BLE001 - the reader's own error class
        if os.path.basename(os.path.dirname(model)) == "nonstandard":
            check_refused(h, model, label)
        else:
            h.fail("%s: the Python reader cannot parse it, so nothing would be checked: %s"
                   % (label, e))
        return None


# ---- files, commands, values ------------------------------------------------

def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def pread_via(fds, path, length, offset, fresh, drop=False):
    """os.pread of path through a new descriptor (fresh) or the one kept in
    fds[path] (opened on first use; the caller closes fds' descriptors).
    drop: the file's pages leave the kernel's cache first
    (POSIX_FADV_DONTNEED), so that the read reaches gguffs."""
    if fresh:
        fd = os.open(path, os.O_RDONLY)
    else:
        if path not in fds:
            fds[path] = os.open(path, os.O_RDONLY)
        fd = fds[path]
    try:
        if drop:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.pread(fd, length, offset)
    finally:
        if fresh:
            os.close(fd)


def run(cmd, cwd=None, input=None, timeout=60):
    """Runs cmd (a list, or a str for the shell) and returns the
    CompletedProcess, stdout and stderr as text; stdin is input or empty."""
    return subprocess.run(cmd, shell=isinstance(cmd, str), cwd=cwd, input=input,
                          stdin=subprocess.DEVNULL if input is None else None,
                          capture_output=True, text=True, errors="replace", timeout=timeout)


def beside(model):
    """The files in the model's folder, but for the idle journal that a rw
    mount keeps between in-place edits (MODEL.gguffs-journal starting with
    GGUFFSJ0: it guards nothing, and the unmount removes it) and the
    records of its edits for read-only mounts (MODEL.gguffs-edits, removed
    by the unmount too)."""
    d = os.path.dirname(model) or "."
    names = []
    for n in sorted(os.listdir(d)):
        p = os.path.join(d, n)
        if n == os.path.basename(model) + ".gguffs-edits":
            continue
        if n == os.path.basename(model) + ".gguffs-journal":
            try:
                with open(p, "rb") as f:
                    if f.read(8) == b"GGUFFSJ0":
                        continue
            except OSError:
                pass
        names.append(n)
    return names


def tensor_hashes(m, path):
    """sha256 of every tensor's bytes in path, as ggml's reader (m, from
    ggml.read_gguf) places them: {name: hex digest}."""
    out = {}
    with open(path, "rb") as f:
        for t in m.tensors:
            f.seek(m.data_offset + t.offset)
            out[t.name] = hashlib.sha256(f.read(t.nbytes)).hexdigest()
    return out


def norm(v):
    """A value from ggml's or the pure-Python reader as plain Python: str
    for strings, lists for arrays, float and int for numbers."""
    import numpy as np
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    if hasattr(v, "etype") and hasattr(v, "items"):
        return [norm(x) for x in v.items]
    if isinstance(v, (list, tuple, np.ndarray)):
        return [norm(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return float(v)
    if isinstance(v, (bool, int, np.integer)):
        return int(v)
    return v


# ---- counting checks ---------------------------------------------------------

def start(name):
    """The start of a mount test's main(): /dev/fuse and gguffs must be
    there (else skip, or fail on CI); returns Harness(name)."""
    require_fuse()
    gguffs_bin()
    return Harness(name)


class Harness:
    def __init__(self, name):
        start_watchdog(name)
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
        if self.passed == 0 and self.failed == 0:
            # a test that checked nothing has not passed
            self.fail("%s made no check at all" % self.name)
        print("%s: %d passed, %d failed (%.1fs)" % (self.name, self.passed, self.failed,
                                                    time.time() - self.t0))
        return 1 if self.failed else 0

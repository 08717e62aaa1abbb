# Mount-test plumbing: find gguffs, mount a model on a temp dir, always unmount, count passes and failures.
"""
Environment: GGUFFS_BIN (build/gguffs), GGUFFS_ORACLE (libggml-base.so),
GGUFFS_CORPUS (../shared/corpus), GGUFFS_SRC (source tree), CI (set on CI:
missing prerequisites then fail instead of skipping with exit code 77).

    h = Harness("corpus")
    with h.case("some check"):
        with mount(model) as mnt:
            h.check(cond, "what was expected, what was got")
    sys.exit(h.finish())    # prints "N passed, N failed"
"""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("GGUFFS_SRC") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "oracle"))
sys.path.insert(0, os.path.join(SRC, "scripts"))

SKIP = 77
IN_CI = bool(os.environ.get("CI"))
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
    """Unmounts every layer at mnt (fusermount3 -u, lazily if busy)."""
    for _ in range(5):
        if not is_mounted(mnt):
            return True
        r = subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        if r.returncode != 0:
            time.sleep(0.2)
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
    return not is_mounted(mnt)


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


@contextlib.contextmanager
def mount(model, options=(), mnt=None):
    """Mounts model on a new temporary directory (or mnt), yields the mount
    point, and always unmounts and removes it afterwards."""
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

#!/usr/bin/python3
# Checks gguffs' command line: --help, --version, bad options, missing files, -o ro, -f, busy, missing or dead (killed gguffs) mount points, --dump of a URL (nginx on loopback), --dump's objections, as an ordinary user (root runs gguffs as nobody in a private mount namespace): /dev/fuse not accessible, -o readahead ignored, a model in a folder the user cannot write; and where messages go without a syslog daemon (/dev/log present and absent, in a private mount namespace).
import errno
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
# the daemon mode is what this test checks: mount_daemon, not harness.mount
from harness import is_mounted, mount_daemon as mount, run_gguffs, unmount  # noqa: E402


def one_line(err):
    lines = err.decode(errors="replace").rstrip("\n").split("\n")
    return lines if lines != [""] else []


def run_env(args, env):
    """run_gguffs with another environment (HF_ENDPOINT)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        r = subprocess.run([harness.gguffs_bin()] + list(args), stdout=out, stderr=err,
                           stdin=subprocess.DEVNULL, timeout=60, env=env)
        out.seek(0)
        err.seek(0)
        return r.returncode, out.read(), err.read()


NOBODY = 65534
# Runs as root in a private mount namespace (unshare -m): a tmpfs on
# BASE/dev holds a /dev/fuse node (10, 229) of MODE, bind-mounted over
# /dev/fuse there only; then ARGS as user nobody, stderr to BASE/err, and
# says "rc=N", then "mounted", what nobody reads of the mount, the modes
# of meta/ and meta/llama.context_length ("modes=..." each) and the exit
# status of nobody's `echo 8192 > meta/llama.context_length` ("edit=N"),
# and unmounts it.  Neither the real /dev/fuse nor any other process's
# mount table is touched.
NS_SCRIPT = r"""
set -e
b=$1; mode=$2; shift 2
mount -t tmpfs -o mode=0755,size=64k gguffs-dev "$b/dev"
mknod -m "$mode" "$b/dev/fuse" c 10 229
mount --bind "$b/dev/fuse" /dev/fuse
set +e
setpriv --reuid=%(id)d --regid=%(id)d --clear-groups "$@" 2>"$b/err" </dev/null
echo "rc=$?"
if grep -q " $b/mnt " /proc/self/mountinfo; then
    echo mounted
    setpriv --reuid=%(id)d --regid=%(id)d --clear-groups cat "$b/mnt/meta/general.architecture"
    setpriv --reuid=%(id)d --regid=%(id)d --clear-groups \
        stat -c 'modes=%%A' "$b/mnt/meta" "$b/mnt/meta/llama.context_length"
    setpriv --reuid=%(id)d --regid=%(id)d --clear-groups \
        sh -c 'echo 8192 > "$1"' sh "$b/mnt/meta/llama.context_length" 2>/dev/null
    echo "edit=$?"
    fusermount3 -u "$b/mnt" || umount -l "$b/mnt"
fi
""" % {"id": NOBODY}


def nobody_missing():
    """None if gguffs can be run as nobody here, else what is missing."""
    if os.geteuid() != 0:
        return "root (to run gguffs as user nobody in a private mount namespace)"
    tools = [t for t in ("unshare", "setpriv", "mknod", "mount", "umount") if not shutil.which(t)]
    return "%s (util-linux, coreutils)" % ", ".join(tools) if tools else None


class Nobody:
    """A folder that user nobody can use (BASE: a copy of gguffs, a mount
    point nobody owns, nobody's copy of the model in a folder of nobody's,
    and another copy, nobody's too, in BASE, which is root's) and run():
    gguffs there as nobody with a /dev/fuse of the given mode (NS_SCRIPT)."""

    def __init__(self, model):
        self.base = tempfile.mkdtemp(prefix="gguffs-nobody-")
        os.chmod(self.base, 0o755)
        self.gguffs = os.path.join(self.base, "gguffs")
        shutil.copyfile(harness.gguffs_bin(), self.gguffs)
        os.chmod(self.gguffs, 0o755)
        own = os.path.join(self.base, "own")
        os.mkdir(own)
        os.chown(own, NOBODY, NOBODY)
        # nobody's own model in nobody's folder: a read-write mount says
        # nothing about it; the same in root's folder: edits cannot land
        self.model = os.path.join(own, "m.gguf")
        self.model_rootdir = os.path.join(self.base, "m.gguf")
        for m in (self.model, self.model_rootdir):
            shutil.copyfile(model, m)
            os.chmod(m, 0o644)
            os.chown(m, NOBODY, NOBODY)
        self.mnt = os.path.join(self.base, "mnt")
        os.mkdir(self.mnt)
        os.chown(self.mnt, NOBODY, NOBODY)
        os.mkdir(os.path.join(self.base, "dev"))

    def run(self, dev_mode, opts=(), model=None):
        """(gguffs' exit status or None, its stderr (without the no-syslog
        line: harness.LOG_NOTICE), mounted, what nobody read in
        meta/general.architecture, the script's own output); self.modes and
        self.edit: meta/'s and its file's modes, the edit's exit status."""
        r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", NS_SCRIPT, "sh",
                            self.base, "%04o" % dev_mode, self.gguffs] + list(opts) +
                           [model or self.model, self.mnt],
                           capture_output=True, timeout=120, stdin=subprocess.DEVNULL, cwd=self.base)
        # the daemon (same pid namespace) lets go of the model when it
        # exits, a moment after the unmount: the next run would wait for it
        pid = harness.find_daemon(self.mnt)
        if pid is not None:
            harness.wait_pid_exit(pid, harness.EXIT_WAIT)
        out = r.stdout.decode(errors="replace").split("\n")
        rc = next((int(x[3:]) for x in out if x.startswith("rc=") and x[3:].isdigit()), None)
        mounted = "mounted" in out
        read = out[out.index("mounted") + 1] if mounted and out.index("mounted") + 1 < len(out) else ""
        self.modes = [x[6:] for x in out if x.startswith("modes=")]
        self.edit = next((int(x[5:]) for x in out if x.startswith("edit=") and x[5:].isdigit()), None)
        with open(os.path.join(self.base, "err"), "rb") as f:
            err = harness.drop_log_notice(f.read())
        return rc, err, mounted, read, (r.stdout + r.stderr).decode(errors="replace")

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)


def as_nobody(h, model):
    """gguffs run by an ordinary user: /dev/fuse it cannot open is one line
    naming the cause and the fix, nothing mounted; -o readahead, which
    needs root, is said once to be ignored and the mount goes on.  None, or
    why it could not run."""
    missing = nobody_missing()
    if missing:
        return "the checks as an ordinary user need %s" % missing
    nb = Nobody(model)
    try:
        with h.case("/dev/fuse that the user cannot open"):
            rc, err, mounted, _, log = nb.run(0o600)
            lines = one_line(err)
            h.check(rc == 1 and not mounted, "/dev/fuse 0600, as nobody: exit %r, mounted %s: %s"
                    % (rc, mounted, log))
            h.check(len(lines) == 1 and lines[0].startswith("gguffs: /dev/fuse: Permission denied: ")
                    and "chmod 0666 /dev/fuse" in lines[0],
                    "/dev/fuse 0600, as nobody: want one line 'gguffs: /dev/fuse: Permission denied: "
                    "... chmod 0666 /dev/fuse ...', got %r" % err[:500])
        with h.case("-o readahead as an ordinary user"):
            for opts, want in ((["-o", "readahead=1M"], 1), ([], 0), (["-o", "readahead=0"], 0)):
                rc, err, mounted, read, log = nb.run(0o666, opts)
                lines = one_line(err)
                h.check(rc == 0 and mounted and read == "llama",
                        "as nobody, /dev/fuse 0666, %r: exit %r, mounted %s, read %r: %s"
                        % (opts, rc, mounted, read, log))
                h.check(len(lines) == want and all(x.startswith("gguffs: -o readahead ignored: ") and
                                                   "needs root" in x for x in lines),
                        "as nobody, %r: want %d line(s) 'gguffs: -o readahead ignored: ... needs "
                        "root ...', got %r" % (opts, want, err[:500]))
                h.check(nb.modes == ["drwxr-xr-x", "-rw-r--r--"] and nb.edit == 0,
                        "as nobody, own model in own folder, %r: meta/ and its file %r (want "
                        "drwxr-xr-x, -rw-r--r--), edit exit %r (want 0)" % (opts, nb.modes, nb.edit))
        with h.case("a model in a folder the user cannot write"):
            # the model is nobody's, its folder root's: an edit's journal or
            # new file cannot be made there, so no edit can land
            rc, err, mounted, read, log = nb.run(0o666, (), nb.model_rootdir)
            lines = one_line(err)
            h.check(rc == 0 and mounted and read == "llama",
                    "unwritable folder, as nobody: exit %r, mounted %s, read %r: %s"
                    % (rc, mounted, read, log))
            h.check(len(lines) == 1 and lines[0].startswith("gguffs: %s: cannot be written: its "
                                                            "folder " % nb.model_rootdir)
                    and "meta/ is read-only, edits fail with EACCES" in lines[0],
                    "unwritable folder, as nobody: want one line 'gguffs: MODEL: cannot be written: "
                    "its folder ... meta/ is read-only, edits fail with EACCES', got %r" % err[:500])
            h.check(nb.modes == ["dr-xr-xr-x", "-r--r--r--"],
                    "unwritable folder, as nobody: meta/ and its file show %r, want dr-xr-xr-x, "
                    "-r--r--r--" % nb.modes)
            h.check(nb.edit not in (0, None), "unwritable folder, as nobody: the edit exited %r"
                    % nb.edit)
    finally:
        nb.close()
    return None


SYSLOG_NS = "--syslog-namespace"


def syslog_in_namespace(base, model, present):
    """Runs as root in a private mount namespace (unshare -m, from
    syslog_cases): /dev there is a fresh tmpfs holding null and fuse, and,
    if present, a syslog socket at /dev/log that this process reads.
    Mounts model daemonized on BASE/mnt, writes text meta/llama.context_length
    refuses, and prints one JSON line: gguffs' exit status and stderr (all of
    it), the errno of the edit, the mount's log file (text, st_size, mode),
    the messages /dev/log received, whether the daemon exited after the
    unmount."""
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=64k", "gguffs-dev", "/dev"],
                   check=True, capture_output=True)
    for name, dev in (("null", os.makedev(1, 3)), ("fuse", os.makedev(10, 229))):
        os.mknod("/dev/" + name, stat.S_IFCHR | 0o666, dev)
        os.chmod("/dev/" + name, 0o666)
    sock = None
    if present:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind("/dev/log")
    mnt = os.path.join(base, "mnt")
    os.mkdir(mnt)
    res = {}
    rc, _, err = run_gguffs([model, mnt], keep_notice=True)
    res["rc"], res["err"], res["mnt"] = rc, err.decode(errors="replace"), os.path.realpath(mnt)
    if is_mounted(mnt):
        pid = harness.find_daemon(mnt)
        try:
            with open(os.path.join(mnt, "meta", "llama.context_length"), "w") as f:
                f.write("garbage\n")
            res["edit"] = 0
        except OSError as e:
            res["edit"] = e.errno
        lp = os.path.join(mnt, "log")
        try:
            st = os.stat(lp)
            res["log_size"], res["log_mode"] = st.st_size, stat.S_IMODE(st.st_mode)
            with open(lp, "rb") as f:
                res["log"] = f.read().decode(errors="replace")
        except OSError as e:
            res["log"] = "(%s)" % e
        if sock:
            sock.settimeout(harness.MOUNT_WAIT)      # a hang guard only
            got = []
            try:
                while not any("edit refused" in g for g in got):
                    got.append(sock.recv(65536).decode(errors="replace"))
            except socket.timeout:
                pass
            res["syslog"] = got
        unmount(mnt)
        res["exited"] = pid is not None and harness.wait_pid_exit(pid, harness.EXIT_WAIT)
    print(json.dumps(res))
    return 0


def syslog_cases(h, model):
    """Where a daemonized mount's messages go: with a syslog socket, to
    syslog and the mount's log file, nothing said at mount; with none
    (/dev/log missing, as in most containers), one line at mount saying
    they go to MOUNTPOINT/log.  None, or why it could not run."""
    if os.geteuid() != 0:
        return "the checks of /dev/log need root (a private mount namespace)"
    missing = [t for t in ("unshare", "mount") if not shutil.which(t)]
    if missing:
        return "the checks of /dev/log need %s (util-linux)" % ", ".join(missing)
    for present in (False, True):
        with h.case("messages with /dev/log %s" % ("present" if present else "missing")):
            base = tempfile.mkdtemp(prefix="gguffs-syslog-")
            try:
                m = os.path.join(base, "m.gguf")
                shutil.copyfile(model, m)
                os.chmod(m, 0o644)
                r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                                    os.path.abspath(__file__), SYSLOG_NS, base, m,
                                    "1" if present else "0"],
                                   capture_output=True, timeout=180, stdin=subprocess.DEVNULL)
                out = r.stdout.decode(errors="replace").strip().split("\n")[-1]
                try:
                    res = json.loads(out)
                except ValueError:
                    h.fail("/dev/log: the namespace run printed no result, exit %d: %r"
                           % (r.returncode, (r.stdout + r.stderr)[-2000:]))
                    continue
                label = "/dev/log %s" % ("present" if present else "missing")
                lines = [x for x in res["err"].split("\n") if x]
                want = [] if present else [
                    "gguffs: no syslog here (/dev/log does not exist): messages go to %s/log "
                    "(the last 200), or to a file with -o log_file=FILE" % res["mnt"]]
                h.check(res["rc"] == 0 and lines == want,
                        "%s: exit %d, stderr %r, want %r" % (label, res["rc"], lines, want))
                h.check(res.get("edit") == errno.EINVAL, "%s: the refused edit gave %r"
                        % (label, res.get("edit")))
                log = res.get("log", "")
                h.check(any("meta/llama.context_length: edit refused (Invalid argument)" in x and
                            "garbage" in x for x in log.split("\n")),
                        "%s: the log file has no line with the key and the reason: %r"
                        % (label, log[:1000]))
                h.check(res.get("log_size") == len(log.encode()) and res.get("log_mode") == 0o444,
                        "%s: log's st_size %r and mode %o, want %d and 444" % (
                            label, res.get("log_size"), res.get("log_mode", 0), len(log.encode())))
                if present:
                    h.check(any("gguffs[" in x and "edit refused" in x and "llama.context_length" in x
                                for x in res.get("syslog", [])),
                            "%s: syslog received %r" % (label, res.get("syslog")))
                h.check(res.get("exited") is True, "%s: the daemon did not exit after the unmount"
                        % label)
            finally:
                shutil.rmtree(base, ignore_errors=True)
    return None


def dump_url(h, tmp, gw):
    """gguffs --dump URL (http://, hf://) prints what --dump of the same file
    prints locally, but for the name on its first line, which is the URL
    as a remote mount's info names it; of the file it reads the header
    only (nginx's log).  None, or why it could not run (no nginx)."""
    missing = remote.have_nginx()
    if missing:
        return "--dump URL needs nginx: %s" % missing
    root = os.path.join(tmp, "www")
    os.mkdir(root)
    # 8 MiB of tensor data after a small header: more than the first
    # request's 2 MiB, so a read of the whole file shows in the log
    big = os.path.join(root, "big.gguf")
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "dump")
    w.add("llama.context_length", "u32", 4096)
    w.add_tensor("big", "f32", [1 << 21], gw.arange_bytes("f32", 1 << 21))
    w.add_tensor("small", "q8_0", [64], bytes(68))
    w.write(big)
    names = ["big.gguf"]
    corpus = harness.corpus_file("llamacpp-vocab-llama-spm.gguf")
    if os.path.exists(corpus):
        shutil.copyfile(corpus, os.path.join(root, os.path.basename(corpus)))
        names.append(os.path.basename(corpus))
    else:
        h.fail("the repository's corpus lacks %s" % corpus)
    with remote.Nginx(root) as ng:
        for name in names:
            local = os.path.join(root, name)
            size = os.path.getsize(local)
            rc, want, err = run_gguffs(["--dump", local])
            h.check(rc == 0 and want.startswith(("file:          %s\n" % local).encode()),
                    "--dump %s: exit %d %r %r" % (local, rc, want[:100], err[:300]))
            env = dict(os.environ)
            env.pop("HF_TOKEN", None)
            env["HF_ENDPOINT"] = ng.hf_endpoint
            for url in (ng.url(name), "hf://org/repo/%s" % name):
                mark = ng.mark()
                rc, got, err = run_env(["--dump", url], env)
                reqs = ng.requests_since(mark)
                first, _, rest = got.decode(errors="replace").partition("\n")
                h.check(rc == 0 and err == b"", "--dump %s: exit %d, stderr %r" % (url, rc, err[:300]))
                h.check(first == "file:          %s" % url,
                        "--dump %s: the first line names %r" % (url, first))
                h.check(rest.encode() == want.partition(b"\n")[2],
                        "--dump %s: the summary differs from --dump of the local file:\n%s\n---\n%s"
                        % (url, rest[:600], want.decode(errors="replace")[:600]))
                sent = sum(r["sent"] for r in reqs)
                files = [r for r in reqs if r["uri"].endswith("/" + name)]
                h.check(len(files) == 1 and files[0]["range"] and not files[0]["range"].endswith("-"),
                        "--dump %s: want one bounded range request for the file: %r" % (url, reqs))
                if size > (4 << 20):
                    h.check(sent < size // 2, "--dump %s: nginx sent %d bytes of a %d-byte file"
                            % (url, sent, size))
        # the same name and summary as the info of a mount of that URL
        url = ng.url("big.gguf")
        rc, got, err = run_gguffs(["--dump", url])
        with harness.mount(url) as mnt:
            with open(os.path.join(mnt, "info"), "rb") as f:
                info = f.read()
        h.check(rc == 0 and info.endswith(got) and got.startswith(b"file:"),
                "--dump %s is not the end of the mount's info:\n%r\n---\n%r" % (url, got[:300], info[:600]))
        # refusals: one line naming the URL, exit 1
        for url, what in ((ng.url("no-such.gguf"), "404"), ("hf://a", "hf://a")):
            rc, out, err = run_gguffs(["--dump", url])
            lines = one_line(err)
            h.check(rc == 1 and out == b"" and len(lines) == 1 and lines[0].startswith("gguffs: ")
                    and what in lines[0], "--dump %s: want one line, exit 1: %d %r" % (url, rc, err[:300]))
        with open(os.path.join(root, "not.gguf"), "wb") as f:
            f.write(b"GGUF" + bytes(100))
        rc, out, err = run_gguffs(["--dump", ng.url("not.gguf")])
        lines = one_line(err)
        h.check(rc == 1 and len(lines) == 1 and harness.ERROR_LINE.match(lines[0])
                and ng.url("not.gguf") in lines[0],
                "--dump of a bad remote file: want 'gguffs: URL: what (at byte offset N)': %d %r"
                % (rc, err[:300]))
    return None


def main():
    h = harness.start("cli")
    import gguf_write as gw

    tmp = tempfile.mkdtemp(prefix="gguffs-cli-")
    model = os.path.join(tmp, "demo.gguf")
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("llama.context_length", "u32", 4096)
    w.add_tensor("t", "f32", [4], gw.arange_bytes("f32", 4))
    w.write(model)
    with open(model, "rb") as f:
        model_bytes = f.read()

    with h.case("--help"):
        rc, out, err = run_gguffs(["--help"])
        text = (out + err).decode(errors="replace")
        h.check(rc == 0, "--help exits %d" % rc)
        h.check("usage" in text.lower() and "MOUNTPOINT" in text.upper(),
                "--help does not show a usage line with MOUNTPOINT: %r" % text[:200])
        h.check("ro" in text and "cache_size" in text and "threads" in text,
                "--help does not mention -o ro, cache_size and threads")
        # the tree: every entry, each at the start of a line of its own
        tree = {x.split()[0] for x in text.split("gguffs options:")[0].split("\n")
                if x.startswith("  ") and x.split() and not x.startswith("   ")}
        for entry in ("info", "info.json", "stats", "log", "model.gguf", "model.safetensors",
                      "hashes", "meta/KEY") + tuple("tensors/NAME/" + f for f in (
                          "raw", "f32", "type", "shape", "raw.npy", "f32.npy", "stats", "sha256",
                          "xxh64")):
            h.check(entry in tree, "--help's tree does not list %s: %r" % (entry, sorted(tree)))

    with h.case("--version"):
        rc, out, err = run_gguffs(["--version"])
        text = (out + err).decode(errors="replace")
        h.check(rc == 0, "--version exits %d" % rc)
        h.check("gguffs" in text and any(c.isdigit() for c in text),
                "--version does not name gguffs and a version: %r" % text[:200])

    with h.case("no arguments"):
        rc, out, err = run_gguffs([])
        h.check(rc != 0, "gguffs with no arguments exits 0")
        h.check(err.strip() != b"", "gguffs with no arguments prints nothing on stderr")

    # options libfuse does not know: one clean line naming them, before the
    # model is opened (so also for a model locked by another mount)
    for bad, names in ((["-o", "foo"], ["foo"]), (["-o", "foo,ro,bar=1"], ["foo", "bar=1"]),
                       (["--bogus-option"], ["--bogus-option"]),
                       (["-o", "ro", "-x", "-o", "allow_other,baz"], ["-x", "baz"])):
        with h.case("unknown option %r" % bad):
            mnt = tempfile.mkdtemp(dir=tmp)
            rc, out, err = run_gguffs(bad + [model, mnt])
            mounted = is_mounted(mnt)
            unmount(mnt)
            lines = one_line(err)
            m = re.match(r"^gguffs: unknown options? (.*) \(gguffs --help\)$", lines[0]) \
                if len(lines) == 1 else None
            got = re.findall(r"'([^']*)'", m.group(1)) if m else None
            h.check(rc == 1 and not mounted and got is not None and sorted(got) == sorted(names) and
                    lines[0].startswith("gguffs: unknown option%s " % ("s" if len(names) > 1 else "")),
                    "%r: exit %d, mounted %s, stderr %r; want exit 1 and one line "
                    "\"gguffs: unknown option(s) %s (gguffs --help)\"" % (
                        bad, rc, mounted, err[:300], ", ".join("'%s'" % n for n in names)))

    for bad in (["--bogus-option"], ["-o", "cache_size=lots"], ["-o", "threads=-3"]):
        with h.case("bad option %r" % bad):
            mnt = tempfile.mkdtemp(dir=tmp)
            rc, out, err = run_gguffs(bad + [model, mnt])
            mounted = is_mounted(mnt)
            unmount(mnt)
            h.check(rc != 0, "bad option %r: exit status 0" % bad)
            h.check(not mounted, "bad option %r: mounted anyway" % bad)
            h.check(err.strip() != b"" and b"Traceback" not in err and len(one_line(err)) <= 3,
                    "bad option %r: stderr should be a short error, got %r" % (bad, err[:300]))

    with h.case("missing model file"):
        mnt = tempfile.mkdtemp(dir=tmp)
        missing = os.path.join(tmp, "no-such.gguf")
        rc, out, err = run_gguffs([missing, mnt])
        mounted = is_mounted(mnt)
        unmount(mnt)
        lines = one_line(err)
        h.check(rc != 0, "missing model: exit status 0")
        h.check(not mounted, "missing model: mounted anyway")
        h.check(len(lines) == 1 and lines[0].startswith("gguffs: ") and "no-such.gguf" in lines[0],
                "missing model: want one line 'gguffs: .../no-such.gguf: ...', got %r" % err[:300])

    with h.case("model is a directory"):
        mnt = tempfile.mkdtemp(dir=tmp)
        rc, out, err = run_gguffs([tmp, mnt])
        mounted = is_mounted(mnt)
        unmount(mnt)
        h.check(rc != 0 and not mounted, "a directory as model: exit %d, mounted %s" % (rc, mounted))
        h.check(len(one_line(err)) == 1, "a directory as model: want one stderr line, got %r" % err[:300])

    with h.case("nonexistent mount point"):
        rc, out, err = run_gguffs([model, os.path.join(tmp, "no", "such", "dir")])
        h.check(rc != 0, "nonexistent mount point: exit status 0")
        h.check(err.strip() != b"" and len(one_line(err)) <= 2,
                "nonexistent mount point: want a short error, got %r" % err[:300])

    with h.case("mount point is a file"):
        rc, out, err = run_gguffs([model, model])
        h.check(rc != 0, "mount point is a regular file: exit status 0")
        unmount(model)

    with h.case("mount point busy (already mounted)"):
        with mount(model) as mnt:
            rc, out, err = run_gguffs([model, mnt])
            if rc == 0:
                h.fail("mounting again on a busy mount point %s exits 0 (stacked mount)" % mnt)
                subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
            else:
                h.check(len(one_line(err)) == 1 and ("fusermount3 -u %s" % mnt) in err.decode(),
                        "busy mount point: want one line with 'fusermount3 -u %s': %r" % (mnt, err))
            h.check(os.path.exists(os.path.join(mnt, "meta", "llama.context_length")),
                    "busy mount point: the first mount stopped working")

    with h.case("-o ro"):
        with mount(model, ["-o", "ro"]) as mnt:
            p = os.path.join(mnt, "meta", "llama.context_length")
            with open(p, "rb") as f:
                h.check(f.read() == b"4096\n", "-o ro: meta value unreadable")
            try:
                with open(p, "wb") as f:
                    f.write(b"8192\n")
                h.fail("-o ro: writing meta/llama.context_length succeeded")
            except OSError as e:
                h.check(e.errno == errno.EROFS,
                        "-o ro: write failed with %s, expected EROFS" % errno.errorcode.get(e.errno))
            for name in ("new.key",):
                try:
                    with open(os.path.join(mnt, "meta", name), "wb") as f:
                        f.write(b"1\n")
                    h.fail("-o ro: creating meta/%s succeeded" % name)
                except OSError as e:
                    h.check(e.errno == errno.EROFS, "-o ro: creating meta/%s failed with %s, expected EROFS"
                            % (name, errno.errorcode.get(e.errno)))
        with open(model, "rb") as f:
            h.check(f.read() == model_bytes, "-o ro: MODEL.gguf changed")

    with h.case("-f (foreground)"):
        mnt = tempfile.mkdtemp(dir=tmp)
        errf = open(os.path.join(tmp, "fg.err"), "w+b")
        p = subprocess.Popen([harness.gguffs_bin(), "-f", model, mnt], stdout=subprocess.DEVNULL,
                             stderr=errf, stdin=subprocess.DEVNULL)
        try:
            harness.wait_mounted(mnt, p)
            h.check(is_mounted(mnt), "-f: not mounted (exit %r)" % p.poll())
            h.check(p.poll() is None, "-f: the process returned while mounted")
            if is_mounted(mnt):
                with open(os.path.join(mnt, "tensors", "t", "raw"), "rb") as f:
                    h.check(f.read() == gw.arange_bytes("f32", 4), "-f: raw tensor bytes wrong")
            unmount(mnt)
            try:
                rc = p.wait(timeout=10)
                h.check(rc == 0, "-f: exit status %d after fusermount3 -u" % rc)
            except subprocess.TimeoutExpired:
                h.fail("-f: still running 10 s after unmount")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            unmount(mnt)
            errf.close()

    with h.case("mount returns when ready"):
        with mount(model) as mnt:
            # no sleeping: the tree must be there as soon as gguffs returns
            h.check(sorted(os.listdir(os.path.join(mnt, "meta"))) ==
                    ["general.architecture", "llama.context_length"],
                    "meta not listed right after mounting")

    with h.case("mount point left by a killed gguffs"):
        g = harness.Gguffs(model)
        try:
            g.kill()
            # (stat may answer from attributes the kernel cached; statfs asks)
            try:
                os.statvfs(g.mnt)
                state = 0
            except OSError as e:
                state = e.errno
            h.check(state == errno.ENOTCONN, "after kill -9 of gguffs -f, statfs of the mount point: %s"
                    % errno.errorcode.get(state, state))
            rc, out, err = run_gguffs([model, g.mnt])
            lines = one_line(err)
            h.check(rc != 0 and len(lines) == 1 and lines[0].startswith("gguffs: %s: " % g.mnt)
                    and ("fusermount3 -u %s" % g.mnt) in lines[0],
                    "mounting on a dead mount: want one line naming it with 'fusermount3 -u %s', "
                    "exit non-zero: %d %r" % (g.mnt, rc, err[:500]))
            r = subprocess.run(["fusermount3", "-u", g.mnt], capture_output=True)
            h.check(r.returncode == 0 and not is_mounted(g.mnt),
                    "fusermount3 -u of the dead mount: %d %r" % (r.returncode, r.stderr))
            with mount(model, mnt=g.mnt):
                h.check(os.path.exists(os.path.join(g.mnt, "meta", "llama.context_length")),
                        "mounting again after fusermount3 -u")
        finally:
            g.close()

    with h.case("-o readahead as root: no message"):
        mnt = tempfile.mkdtemp(dir=tmp)
        rc, out, err = run_gguffs(["-o", "readahead=1M", model, mnt])
        mounted = is_mounted(mnt)
        unmount(mnt)
        h.check(rc == 0 and mounted and (err == b"" or os.geteuid() != 0),
                "-o readahead=1M: exit %d, mounted %s, stderr %r" % (rc, mounted, err[:300]))

    with h.case("--dump names each tensor whose row ggml refuses"):
        # rows of 16 for q4_0's blocks of 32 (two rows a block): gguffs
        # mounts such a file, and info names each tensor ggml objects to
        # (past 8, the first 8 and the count)
        for n in (5, 11):
            odd = os.path.join(tmp, "rows%d.gguf" % n)
            w = gw.GGUFWriter()
            w.add("general.architecture", "string", "llama")
            for i in range(n):
                w.add_tensor("blk.%d.ffn_down.weight" % i, "q4_0", [16, 2], bytes(18))
            w.write(odd)
            rc, out, err = run_gguffs(["--dump", odd])
            text = out.decode(errors="replace")
            named = [i for i in range(n) if "tensor 'blk.%d.ffn_down.weight': row length 16 is "
                     "not a multiple of the q4_0 block size 32" % i in text]
            h.check(rc == 0 and named == list(range(min(n, 8))),
                    "--dump of %d such tensors: exit %d, names %r: %s" % (n, rc, named, text[-1500:]))
            h.check((n > 8) == ("%d tensors in all have a row length" % n in text),
                    "--dump of %d such tensors: the count: %s" % (n, text[-800:]))

    skipped = []
    why = as_nobody(h, model)
    if why:
        skipped.append(why)
    why = syslog_cases(h, model)
    if why:
        skipped.append(why)
    with h.case("--dump URL"):
        why = dump_url(h, tmp, gw)
        if why:
            skipped.append(why)

    for why in skipped:
        if harness.IN_CI:
            h.fail("%s (CI is set, so this is an error)" % why)
        else:
            print("SKIP: %s" % why)
    shutil.rmtree(tmp, ignore_errors=True)
    code = h.finish()
    # a run that skipped something has not passed (scripts/test counts skips)
    return harness.SKIP if skipped and not code and not harness.IN_CI else code


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == SYSLOG_NS:
        sys.exit(syslog_in_namespace(sys.argv[2], sys.argv[3], sys.argv[4] == "1"))
    sys.exit(main())

#!/usr/bin/python3
# Mounting the standard way (mount -t fuse.gguffs, fstab lines via mount -T, the options mount.fuse3 hands over) and the man page (renders; OPTIONS == --help == README).
"""
Docs checks run everywhere.  Option checks need /dev/fuse.  The mount(8)
checks need root, util-linux mount and unshare, and fuse3's mount.fuse3.

mount(8) removes PATH from the environment of mount.fuse3, which then runs
"gguffs ..." through /bin/sh with the shell's default path
(/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin).  So that the
build's gguffs is the one found, without touching the system, those checks
run in a private mount namespace (unshare -m) where a temporary directory
holding a symlink to it is bind-mounted over /usr/local/sbin.
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
import pyreader  # noqa: E402
from harness import Harness, is_mounted, mount, run_gguffs, unmount  # noqa: E402

IN_NAMESPACE = "--in-namespace"
SHADOWED = ("/usr/local/sbin", "/usr/local/bin")   # first dirs of sh's default PATH
GIB = 1 << 30


# ---- option lists of --help, the man page and the README -------------------

def option_items(text):
    """'-o a,b=X, -o c, -h, --help' -> {'-o a', '-o b', '-o c', '-h', '--help'}
    (values after '=' are dropped: libfuse's help says '-o max_threads')."""
    out = set()
    for m in re.finditer(r"(?:^|(?<=[\s,(]))(-o\s+[^\s,]+(?:,[^\s,]+)*|--?[A-Za-z][\w-]*)", text):
        tok = m.group(1)
        if tok.startswith("-o"):
            for name in re.split(r",", tok[2:].strip()):
                if name:
                    out.add("-o " + name.split("=")[0])
        else:
            out.add(tok)
    return out


def help_options(text):
    """Options named in the option column of --help, from 'gguffs options:' on."""
    text = text[text.index("gguffs options:"):]
    out = set()
    for line in text.split("\n"):
        if not line.startswith(" "):
            continue                          # headings, "Unmount with: ..."
        for part in re.split(r"\s{2,}", line.strip()):
            if part.startswith("-"):
                out |= option_items(part)
    return out


def roff_to_text(line):
    line = line.replace("\\-", "-").replace("\\&", "").replace("\\e", "\\")
    line = re.sub(r"\\f[BIRP]", "", line)
    if not line.startswith("."):
        return line
    macro, _, rest = line.partition(" ")
    args = [a[0] or a[1] for a in re.findall(r'"([^"]*)"|(\S+)', rest)]
    if macro in (".B", ".I", ".SM"):
        return " ".join(args)
    return "".join(args)                      # .BR .BI .IR .RB .IB .RI


def man_sections(src):
    sec, out = None, {}
    for line in src.split("\n"):
        if line.startswith(".SH "):
            sec = line[4:].strip().strip('"')
            out[sec] = []
        elif sec:
            out[sec].append(line)
    return out


def man_options(src):
    """Options in the tags (.TP/.TQ) of the man page's OPTIONS section."""
    lines = man_sections(src).get("OPTIONS", [])
    out = set()
    for i, line in enumerate(lines[:-1]):
        if line.strip() in (".TP", ".TQ"):
            out |= option_items(roff_to_text(lines[i + 1]))
    return out


def readme_options(text):
    """Options in the first column of the README's option table (Usage section)."""
    sec = text[text.index("## Usage"):text.index("## The tree")]
    out = set()
    for line in sec.split("\n"):
        if line.startswith("| `"):
            first = line.split("|")[1]
            for code in re.findall(r"`([^`]*)`", first):
                out |= option_items(code)
    return out


def check_docs(h):
    src_dir = harness.SRC
    man_path = os.path.join(src_dir, "doc", "gguffs.1")
    with h.case("man page: OPTIONS agree with --help"):
        rc, out, err = run_gguffs(["--help"])
        h.check(rc == 0, "--help exits %d" % rc)
        helps = help_options(out.decode(errors="replace"))
        with open(man_path) as f:
            src = f.read()
        mans = man_options(src)
        h.check(len(helps) > 20, "too few options found in --help (%d): %r" % (len(helps), sorted(helps)))
        for must in ("-o ro", "-o rw", "-o cache_size", "-o threads", "--dump", "-h", "--help",
                     "-V", "--version", "-f", "-d", "-s", "-o allow_other", "-o nofail", "-o x-NAME"):
            h.check(must in helps, "--help does not list %s" % must)
        h.check(not (helps - mans), "in --help but not in the man page's OPTIONS: %s" % sorted(helps - mans))
        h.check(not (mans - helps), "in the man page's OPTIONS but not in --help: %s" % sorted(mans - helps))
        with open(os.path.join(src_dir, "README.md")) as f:
            readme = readme_options(f.read())
        h.check(not (helps - readme), "in --help but not in README's option table: %s" % sorted(helps - readme))
        h.check(not (readme - helps), "in README's option table but not in --help: %s" % sorted(readme - helps))
        secs = man_sections(src)
        for sec in ("NAME", "SYNOPSIS", "DESCRIPTION", "EDITING", "OPTIONS", "EXIT STATUS",
                    "FILES", "EXAMPLES", "SEE ALSO"):
            h.check(sec in secs, "man page has no %s section" % sec)
        text = "\n".join(roff_to_text(x) for x in src.split("\n"))
        for word in ("fuse.gguffs", "fusermount3", "mount.fuse3", ".gguffs-journal", ".gguffs-new",
                     "user.gguf.type", "tensors/NAME/f32", "meta/KEY", "stats", "np.fromfile"):
            h.check(word in text, "man page does not mention %s" % word)
        h.check(all(ord(c) < 128 for c in src), "man page has non-ASCII characters")

    with h.case("man page renders without warnings"):
        groff = shutil.which("groff")
        if not groff:
            # scripts/setup --tests installs it
            (h.fail if harness.IN_CI else h.note)(
                "groff is not installed: rendering of doc/gguffs.1 not checked")
        else:
            r = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", man_path],
                               capture_output=True, timeout=60)
            h.check(r.returncode == 0 and r.stderr.strip() == b"",
                    "groff -man -ww doc/gguffs.1: exit %d, %r" % (r.returncode, r.stderr[:500]))

    with h.case("meson install puts bin/gguffs and the man page in place"):
        build = os.path.dirname(os.path.dirname(os.path.abspath(harness.gguffs_bin())))
        meson = shutil.which("meson")
        if not meson or not os.path.exists(os.path.join(build, "meson-private")):
            (h.fail if harness.IN_CI else h.note)(
                "meson or the build directory (%s) not found: install not checked" % build)
        else:
            dest = tempfile.mkdtemp(prefix="gguffs-destdir-")
            try:
                r = subprocess.run([meson, "install", "-C", build, "--no-rebuild", "--quiet",
                                    "--destdir", dest], capture_output=True, timeout=120)
                h.check(r.returncode == 0, "meson install --destdir: exit %d: %r"
                        % (r.returncode, (r.stdout + r.stderr)[-500:]))
                found = {os.path.relpath(os.path.join(d, f), dest)
                         for d, _, fs in os.walk(dest) for f in fs}
                h.check(any(p.endswith("bin/gguffs") for p in found),
                        "meson install did not install bin/gguffs: %s" % sorted(found))
                h.check(any(p.endswith("share/man/man1/gguffs.1") for p in found),
                        "meson install did not install share/man/man1/gguffs.1: %s" % sorted(found))
            finally:
                shutil.rmtree(dest, ignore_errors=True)


# ---- the options mount(8) and mount.fuse3 hand to gguffs -------------------

def write_model(path):
    import gguf_write as gw
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("llama.context_length", "u32", 4096)
    w.add_tensor("t", "f32", [4], gw.arange_bytes("f32", 4))
    w.write(path)


def read(p):
    with open(p, "rb") as f:
        return f.read()


def try_write(p, data=b"8192\n"):
    """None if the write worked, else the errno."""
    try:
        with open(p, "wb") as f:
            f.write(data)
        return None
    except OSError as e:
        return e.errno


def mount_options(mnt):
    """(fstype, options) of the mount at mnt, from /proc/self/mountinfo."""
    mnt = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a = line.split()
            if a[4].encode().decode("unicode_escape") == mnt:
                sep = a.index("-")
                return a[sep + 1], a[5] + "," + a[sep + 3]
    return None, ""


def check_stats_handle(h, model):
    """MNT/stats reads, through one handle, the counters as they were at its
    open: a read that goes on after the counters moved (a second read at
    the offset where the first ended, as every reader makes to find the
    end) continues the same text; a new open sees them moved."""
    with h.case("stats: one handle, one text"):
        with mount(model, []) as mnt:
            p = os.path.join(mnt, "stats")
            raw = os.path.join(mnt, "tensors", "t", "raw")
            fd = os.open(p, os.O_RDONLY)
            try:
                head = os.pread(fd, 40, 0)
                for _ in range(120):        # reads_raw 0 -> 120: grows by digits
                    rfd = os.open(raw, os.O_RDONLY)
                    os.posix_fadvise(rfd, 0, 0, os.POSIX_FADV_DONTNEED)   # reach gguffs
                    os.pread(rfd, 4096, 0)
                    os.close(rfd)
                rest = b""
                while True:
                    b = os.pread(fd, 4096, len(head) + len(rest))
                    if not b:
                        break
                    rest += b
                again = os.pread(fd, 1 << 16, 0)
            finally:
                os.close(fd)
            text = head + rest
            h.check(again == text, "stats: the handle's text changed under it:\n%r\n%r"
                    % (text[-200:], again[-200:]))
            lines = text.decode().splitlines()
            h.check(all(len(ln.split(" ")) == 2 for ln in lines) and
                    any(ln == "reads_raw 0" for ln in lines),
                    "stats: the handle's text is not the counters at its open: %r" % text[-300:])
            now = harness.read_stats(mnt)
            h.check(now.get("reads_raw", 0) >= 120, "stats: a new open does not see the reads: %r"
                    % now.get("reads_raw"))


def check_options(h, tmp, model):
    orig = read(model)
    # What mount(8) + mount.fuse3 handed over in practice (util-linux 2.38,
    # fuse3 3.14), and what mount.fuse3 run by hand passes on.
    for opts, ro in (("ro,cache_size=1G,dev,suid", True),
                     ("rw,dev,suid", False),
                     ("rw,noatime,relatime,nodev,nosuid,strictatime,lazytime,nodiratime,iversion,exec", False),
                     ("defaults,auto,noauto,nofail,user,nouser,users,owner,group,_netdev,"
                      "comment=x,x-systemd.automount,x-systemd.device-timeout=5,X-mount.mkdir", False),
                     ("nostrictatime,norelatime,nolazytime,diratime,noiversion,mand,nomand,silent,loud,"
                      "symfollow,nosymfollow,atime,sync,async,dirsync,noexec", False),
                     ("ro,rw", False), ("rw,ro", True)):
        with h.case("-o %s" % opts):
            with mount(model, ["-o", opts]) as mnt:
                h.check(read(os.path.join(mnt, "meta", "general.architecture")) == b"llama\n",
                        "-o %s: meta/general.architecture unreadable" % opts)
                p = os.path.join(mnt, "meta", "llama.context_length")
                e = try_write(p)
                if ro:
                    h.check(e == errno.EROFS, "-o %s: write should fail with EROFS, got %s"
                            % (opts, errno.errorcode.get(e, e)))
                else:
                    h.check(e is None, "-o %s: write failed with %s" % (opts, errno.errorcode.get(e, e)))
                    try_write(p, b"4096\n")
                if "cache_size=1G" in opts:
                    cap = harness.read_stats(mnt).get("capacity")
                    h.check(cap == GIB, "-o %s: stats capacity %r" % (opts, cap))
                fstype, mo = mount_options(mnt)
                h.check(fstype == "fuse.gguffs", "-o %s: file system type %r" % (opts, fstype))
                h.check(("ro" in mo.split(",")) == ro, "-o %s: kernel mount options %r" % (opts, mo))
            h.check(read(model) == orig, "-o %s: the model differs afterwards" % opts)

    with h.case("unknown option is still refused"):
        mnt = tempfile.mkdtemp(dir=tmp)
        rc, out, err = run_gguffs(["-o", "ro,bogus_option", model, mnt])
        mounted = is_mounted(mnt)
        unmount(mnt)
        h.check(rc != 0 and not mounted, "-o bogus_option: exit %d, mounted %s" % (rc, mounted))
        h.check(b"bogus_option" in err, "-o bogus_option: the error does not name it: %r" % err[:300])


# ---- modes derived from the model file's --------------------------------------

def want_modes(mode, writable):
    """{path under the mount: permission bits} for a model of mode (README
    "The tree"): its read bits on every file, with x where r is set on
    directories; its write bits on meta/ and meta/'s files when edits can
    be made."""
    r = mode & 0o444
    x = r >> 2
    w = mode & 0o222 if writable else 0
    return {"": r | x, "meta": r | x | w, "meta/llama.context_length": r | w,
            "info": r, "model.gguf": r, "stats": r, "tensors": r | x, "tensors/t": r | x,
            "tensors/t/raw": r, "tensors/t/f32": r, "tensors/t/type": r, "tensors/t/shape": r}


def check_tree_modes(h, label, mnt, mode, writable, uid, gid):
    for rel, want in sorted(want_modes(mode, writable).items()):
        st = os.stat(os.path.join(mnt, rel))
        h.check(stat.S_IMODE(st.st_mode) == want, "%s: %s has mode %o, want %o"
                % (label, rel or "the root", stat.S_IMODE(st.st_mode), want))
        h.check((st.st_uid, st.st_gid) == (uid, gid), "%s: %s is owned by %d:%d, want %d:%d"
                % (label, rel or "the root", st.st_uid, st.st_gid, uid, gid))


def as_nobody(code, *args):
    """Runs python code as user and group 65534 with no supplementary
    groups; (exit status, stdout + stderr)."""
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "/usr/bin/python3", "-c", code] + list(args),
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    return r.returncode, (r.stdout + r.stderr).strip()


# prints OK, or the errno's name of the failed open
NOBODY_OPEN = """
import errno, os, sys
path, how = sys.argv[1], sys.argv[2]
try:
    if how == "read":
        with open(path, "rb") as f:
            sys.stdout.write(f.read().decode())
    else:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, how.encode())
        finally:
            os.close(fd)
        print("OK")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
"""


def check_modes(h, tmp, model):
    root = os.geteuid() == 0
    # owned by someone other than the mounting user where root may chown
    uid, gid = (1234, 5678) if root else (os.getuid(), os.getgid())
    for mode in (0o600, 0o640, 0o666, 0o444):
        for ro in (False, True):
            label = "model mode %o%s" % (mode, ", -o ro" if ro else "")
            with h.case(label):
                m = os.path.join(tmp, "modes-%o.gguf" % mode)
                shutil.copyfile(model, m)
                os.chmod(m, mode)
                if root:
                    os.chown(m, uid, gid)
                # root may write a 0444 model: the tree shows its bits anyway
                # (default_permissions lets root through); another user may not
                writable = not ro and (root or mode & 0o200)
                with mount(m, ["-o", "ro"] if ro else []) as mnt:
                    check_tree_modes(h, label, mnt, mode, writable, uid, gid)
                    if not writable or ro:
                        continue
                    # an edit that outgrows the header: the model is
                    # rewritten and renamed over; the new file keeps the
                    # mode and owner, and so does the tree
                    p = os.path.join(mnt, "meta", "general.architecture")
                    e = try_write(p, b"x" * 200000 + b"\n")
                    h.check(e is None, "%s: growing edit: %s" % (label, errno.errorcode.get(e, e)))
                    ms = os.stat(m)
                    h.check((stat.S_IMODE(ms.st_mode), ms.st_uid, ms.st_gid) == (mode, uid, gid),
                            "%s: after the edit the model is %o %d:%d" % (label, stat.S_IMODE(ms.st_mode),
                                                                         ms.st_uid, ms.st_gid))
                    stats = harness.read_stats(mnt)
                    h.check(stats.get("edits_copied", 0) + stats.get("edits_cloned", 0) >= 1,
                            "%s: the growing edit did not rewrite the model: %r" % (label, stats))
                    check_tree_modes(h, label + ", after a rewrite", mnt, mode, writable, uid, gid)

    missing = [w for w, ok in (("root", root), ("setpriv", shutil.which("setpriv"))) if not ok]
    if missing:
        return "the checks as another user need %s" % " and ".join(missing)
    # another user through -o allow_other (root needs no user_allow_other)
    for mode, can_read, can_write in ((0o666, True, True), (0o644, True, False),
                                      (0o600, False, False)):
        label = "user nobody, model mode %o, -o allow_other" % mode
        with h.case(label):
            m = os.path.join(tmp, "nobody-%o.gguf" % mode)
            shutil.copyfile(model, m)
            os.chmod(m, mode)
            mnt = tempfile.mkdtemp(prefix="gguffs-nobody-")   # in /tmp: nobody can reach it
            try:
                with mount(m, ["-o", "allow_other"], mnt=mnt):
                    key = os.path.join(mnt, "meta", "llama.context_length")
                    rc, out = as_nobody(NOBODY_OPEN, key, "read")
                    if can_read:
                        h.check(rc == 0 and out == "4096", "%s: read gives %r (exit %d)" % (label, out, rc))
                    else:
                        h.check(rc == 0 and out == "EACCES", "%s: read gives %r (exit %d), want EACCES"
                                % (label, out, rc))
                    before = read(m)
                    rc, out = as_nobody(NOBODY_OPEN, key, "8192\n")
                    if can_write:
                        h.check(rc == 0 and out == "OK", "%s: write gives %r (exit %d)" % (label, out, rc))
                        h.check(read(key) == b"8192\n", "%s: meta/ reads %r after the write" % (label, read(key)))
                        f = pyreader.read(m)
                        got = [kv.value for kv in f.kvs if kv.key == b"llama.context_length"]
                        h.check(got == [8192], "%s: the model holds %r after the write" % (label, got))
                    else:
                        h.check(rc == 0 and out == "EACCES", "%s: write gives %r (exit %d), want EACCES"
                                % (label, out, rc))
                        h.check(read(m) == before, "%s: the model changed" % label)
            finally:
                unmount(mnt)
                shutil.rmtree(mnt, ignore_errors=True)
    return None


# ---- mount(8) --------------------------------------------------------------

def run(cmd):
    """(exit status, stdout and stderr as one text) of cmd."""
    r = harness.run(cmd)
    return r.returncode, (r.stdout + r.stderr).strip()


def check_mounted(h, label, mnt, ro, cache=None, allow_other=False):
    fstype, mo = mount_options(mnt)
    h.check(fstype == "fuse.gguffs", "%s: file system type %r, want fuse.gguffs" % (label, fstype))
    h.check(read(os.path.join(mnt, "meta", "general.architecture")) == b"llama\n",
            "%s: meta/general.architecture is not 'llama'" % label)
    if cache is not None:
        cap = harness.read_stats(mnt).get("capacity")
        h.check(cap == cache, "%s: stats capacity %r, want %d (cache_size did not reach gguffs)"
                % (label, cap, cache))
    e = try_write(os.path.join(mnt, "meta", "llama.context_length"))
    if ro:
        h.check(e == errno.EROFS, "%s: write to meta/ gave %s, want EROFS" % (label, errno.errorcode.get(e, e)))
        h.check("ro" in mo.split(","), "%s: kernel mount is not ro: %r" % (label, mo))
    else:
        h.check(e is None, "%s: write to meta/ failed: %s" % (label, errno.errorcode.get(e, e)))
        h.check(read(os.path.join(mnt, "meta", "llama.context_length")) == b"8192\n",
                "%s: the write did not stick" % label)
        try_write(os.path.join(mnt, "meta", "llama.context_length"), b"4096\n")
    if allow_other:
        h.check("allow_other" in mo.split(","), "%s: allow_other not in %r" % (label, mo))


def in_namespace():
    """Runs in a private mount namespace, as root (see the module comment)."""
    h = Harness("mount(8)")
    gguffs = harness.gguffs_bin()
    tmp = tempfile.mkdtemp(prefix="gguffs-mount8-")
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    os.symlink(os.path.abspath(gguffs), os.path.join(bindir, "gguffs"))
    shadow = next(d for d in SHADOWED if os.path.isdir(d))
    rc, out = run(["mount", "--bind", bindir, shadow])
    if rc != 0:
        h.fail("mount --bind %s %s: %s" % (bindir, shadow, out))
        return h.finish()
    # a space in the path: mount.fuse3 quotes it for /bin/sh, fstab says \040
    model = os.path.join(tmp, "my model.gguf")
    write_model(model)
    orig = read(model)
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    fstab = os.path.join(tmp, "fstab")

    def fstab_line(src, fstype, opts):
        esc = src.replace(" ", "\\040")
        with open(fstab, "w") as f:
            f.write("# test fstab\n%s %s %s %s 0 0\n" % (esc, mnt, fstype, opts))

    cases = [
        ("mount -t fuse.gguffs -o ro,cache_size=1G",
         ["mount", "-t", "fuse.gguffs", model, mnt, "-o", "ro,cache_size=1G"], True, GIB, False),
        ("mount -t fuse.gguffs (no options: rw)",
         ["mount", "-t", "fuse.gguffs", model, mnt], False, None, False),
        ("fstab: fuse.gguffs ro,cache_size=1G,allow_other",
         ("fuse.gguffs", "ro,cache_size=1G,allow_other"), True, GIB, True),
        ("fstab: fuse.gguffs with fstab-only options",
         ("fuse.gguffs", "defaults,noatime,nofail,_netdev,x-systemd.device-timeout=5,"
                         "comment=x,cache_size=64M,threads=2"), False, 64 << 20, False),
        ("mount -t fuse.gguffs -o ro,drop_privileges,cache_size=1G",
         ["mount", "-t", "fuse.gguffs", model, mnt, "-o", "ro,drop_privileges,cache_size=1G"], True, GIB, False),
        ("mount -t fuse.gguffs -o allow_other,default_permissions,drop_privileges",
         ["mount", "-t", "fuse.gguffs", model, mnt, "-o", "allow_other,default_permissions,drop_privileges"],
         False, None, True),
    ]
    for label, how, ro, cache, allow_other in cases:
        with h.case(label):
            try:
                if isinstance(how, tuple):
                    fstab_line(model, *how)
                    cmd = ["mount", "-T", fstab, mnt]
                else:
                    cmd = how
                rc, out = run(cmd)
                h.check(rc == 0, "%s: %s exits %d: %s" % (label, " ".join(cmd), rc, out))
                h.check(is_mounted(mnt), "%s: nothing mounted on %s" % (label, mnt))
                if rc == 0 and is_mounted(mnt):
                    check_mounted(h, label, mnt, ro, cache, allow_other)
                    rc, out = run(["umount", mnt])
                    h.check(rc == 0, "%s: umount exits %d: %s" % (label, rc, out))
                    h.check(not is_mounted(mnt), "%s: still mounted after umount" % label)
            finally:
                harness.unmount(mnt)
            h.check(read(model) == orig, "%s: the model differs afterwards" % label)

    with h.case("drop_privileges + allow_other without default_permissions is refused"):
        try:
            cmd = ["mount", "-t", "fuse.gguffs", model, mnt, "-o", "allow_other,drop_privileges"]
            rc, out = run(cmd)
            h.check(rc != 0, "%s exits 0: the mount would let anyone write meta/" % " ".join(cmd))
            h.check("default_permissions" in out, "the error does not say what to add: %r" % out)
        finally:
            harness.unmount(mnt)

    with h.case("a PATH without gguffs does not matter (mount(8) drops PATH)"):
        env = dict(os.environ, PATH="/nonexistent:" + os.environ.get("PATH", "/usr/bin:/bin"))
        r = subprocess.run(["mount", "-t", "fuse.gguffs", model, mnt, "-o", "ro"], env=env,
                           capture_output=True, timeout=60)
        try:
            h.check(r.returncode == 0 and is_mounted(mnt), "mount with PATH changed: exit %d %r"
                    % (r.returncode, r.stderr[:300]))
        finally:
            harness.unmount(mnt)

    run(["umount", shadow])
    shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


def check_mount8(h, tmp, model):
    """Runs in_namespace() under unshare and adds its counts to h."""
    missing = [p for p in ("mount", "umount", "unshare") if not shutil.which(p)]
    if not any(os.path.exists(p) for p in ("/sbin/mount.fuse3", "/usr/sbin/mount.fuse3")):
        missing.append("mount.fuse3")
    if os.geteuid() != 0:
        missing.append("root")
    if not any(os.path.isdir(d) for d in SHADOWED):
        missing.append(" or ".join(SHADOWED))
    if missing:
        return "mount(8) checks need %s" % ", ".join(missing)

    # the type#source form with an absolute path needs no namespace
    with h.case("mount -t fuse 'GGUFFS#MODEL' and its fstab line"):
        gguffs = os.path.abspath(harness.gguffs_bin())
        mnt = tempfile.mkdtemp(dir=tmp)
        fstab = os.path.join(tmp, "fstab-hash")
        with open(fstab, "w") as f:
            f.write("%s#%s %s fuse ro,cache_size=1G 0 0\n" % (gguffs, model, mnt))
        for cmd in (["mount", "-t", "fuse", "%s#%s" % (gguffs, model), mnt, "-o", "ro,cache_size=1G"],
                    ["mount", "-T", fstab, mnt]):
            try:
                rc, out = run(cmd)
                h.check(rc == 0 and is_mounted(mnt), "%s: exit %d: %s" % (" ".join(cmd), rc, out))
                if is_mounted(mnt):
                    h.check(read(os.path.join(mnt, "meta", "general.architecture")) == b"llama\n",
                            "%s: meta unreadable" % cmd[-1])
                    cap = harness.read_stats(mnt).get("capacity")
                    h.check(cap == GIB, "%s: capacity %r" % (cmd[-1], cap))
                    h.check(try_write(os.path.join(mnt, "meta", "llama.context_length")) == errno.EROFS,
                            "%s: -o ro did not make meta/ read-only" % cmd[-1])
                    rc, out = run(["umount", mnt])
                    h.check(rc == 0 and not is_mounted(mnt), "umount: exit %d: %s" % (rc, out))
            finally:
                harness.unmount(mnt)

    r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                        os.path.abspath(__file__), IN_NAMESPACE],
                       capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
    out = (r.stdout + r.stderr).decode(errors="replace")
    sys.stdout.write("".join("  " + x + "\n" for x in out.rstrip("\n").split("\n")))
    m = re.search(r"(\d+) passed, (\d+) failed", out)
    if not m:
        h.fail("the namespace run (unshare -m) printed no result, exit %d" % r.returncode)
    else:
        h.passed += int(m.group(1))
        h.failed += int(m.group(2))
        if r.returncode != 0 and int(m.group(2)) == 0:
            h.fail("the namespace run exits %d" % r.returncode)
    return None


def check_notify_threads(h, tmp, model):
    """A mount whose notify threads cannot start ends (status 1, one line
    saying why, nothing left mounted) instead of serving: its edits would
    leave the kernel's names and attributes stale for a year.  The shim
    (tests/tools/thread_fail_shim.c) fails the second notify thread."""
    label = "notify threads that cannot start end the mount"
    shim = os.environ.get("GGUFFS_THREAD_FAIL_SHIM")
    if harness.sanitized():
        print("  %s: not run in a sanitizer build (LD_PRELOAD would put the shim before "
              "the sanitizer's runtime)" % label, flush=True)
        return
    if not shim or not os.path.exists(shim):
        harness.skip_or_fail("GGUFFS_THREAD_FAIL_SHIM (tests/tools/thread_fail_shim.c) is not built")
    with h.case(label):
        mnt = tempfile.mkdtemp(prefix="gguffs-notify-", dir=tmp)
        env = dict(os.environ, LD_PRELOAD=shim, GGUFFS_TEST_FAIL_REPEATED_THREAD="1")
        try:
            rc, _, err = harness.run_gguffs(["-f", "-s", "-o", "threads=0", model, mnt],
                                            timeout=30, env=env)
        except subprocess.TimeoutExpired:
            rc, err = None, b""
        finally:
            mounted = harness.is_mounted(mnt)
            harness.unmount(mnt)
        h.check(rc == 1, "gguffs served (or exited %r) although its notify threads could "
                "not start" % rc)
        h.check(b"cannot start the notify threads" in err,
                "no line says why: %r" % err[-500:])
        h.check(not mounted, "still mounted after gguffs ended")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == IN_NAMESPACE:
        sys.exit(in_namespace())
    h = Harness("mount")
    check_docs(h)
    skipped = None
    if not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"):
        skipped = "/dev/fuse or fusermount3 is missing"
    else:
        tmp = tempfile.mkdtemp(prefix="gguffs-mount-")
        try:
            model = os.path.join(tmp, "m.gguf")
            write_model(model)
            check_options(h, tmp, model)
            check_notify_threads(h, tmp, model)
            check_stats_handle(h, model)
            skipped = check_modes(h, tmp, model)
            skipped8 = check_mount8(h, tmp, model)
            skipped = "; ".join(x for x in (skipped, skipped8) if x) or None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if skipped:
        if harness.IN_CI:
            h.fail("%s (CI is set, so this is an error)" % skipped)
        else:
            print("SKIP: %s" % skipped)
    code = h.finish()
    if skipped and not code and not harness.IN_CI:
        sys.exit(harness.SKIP)
    sys.exit(code)


if __name__ == "__main__":
    main()

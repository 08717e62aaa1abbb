#!/usr/bin/python3
# Checks gguffs' command line: --help, --version, bad options, missing files, -o ro, -f, busy or missing mount points.
import errno
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
# the daemon mode is what this test checks: mount_daemon, not harness.mount
from harness import is_mounted, mount_daemon as mount, run_gguffs, unmount  # noqa: E402


def one_line(err):
    lines = err.decode(errors="replace").rstrip("\n").split("\n")
    return lines if lines != [""] else []


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
                h.check(err.strip() != b"", "busy mount point: no error message")
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
                h.check(e.errno in (errno.EROFS, errno.EACCES, errno.EPERM),
                        "-o ro: write failed with %s, expected EROFS/EACCES/EPERM" % errno.errorcode.get(e.errno))
            for name in ("new.key",):
                try:
                    with open(os.path.join(mnt, "meta", name), "wb") as f:
                        f.write(b"1\n")
                    h.fail("-o ro: creating meta/%s succeeded" % name)
                except OSError:
                    h.check(True, "")
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

    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# The disk cache of remote mounts (-o cache_dir, -o cache_max) against nginx on loopback: the directory made (0700) or refused with one line, the files per remote identity, the stats lines, a second gguffs on the same model running without it (said once), a damaged map rebuilt, a second mount reading from the cache.
"""
Served by tests/integration/remote.py's Nginx.  The second-mount check
(what the first mount read costs no request) needs the in-memory cache of
remote blocks to store into and read from the disk cache: until that fill
path stores blocks (disk_cache_stored stays 0) it is a NOTE, not a failure.
"""
import os
import re
import shutil
import stat
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
from harness import Gguffs, Harness  # noqa: E402
from remote import Nginx  # noqa: E402

# models with tensors, the first one larger than the 2 MiB a mount fetches first
CORPUS_PICK = ("sdcpp-taesd-decoder.gguf", "ollama-llama-2-tiny-random.gguf", "hyllama-dummy.gguf")


def read_stats(mnt):
    out = {}
    for line in open(os.path.join(mnt, "stats")).read().splitlines():
        k, _, v = line.partition(" ")
        out[k] = int(v) if v.isdigit() else v
    return out


def read_all_raw(mnt):
    out = {}
    tdir = os.path.join(mnt, "tensors")
    for t in sorted(os.listdir(tdir)):
        with open(os.path.join(tdir, t, "raw"), "rb") as f:
            out[t] = f.read()
    return out


def refuse(url, opts):
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, _, err = harness.run_gguffs(list(opts) + [url, mnt], timeout=harness.MOUNT_WAIT)
        return rc, err.decode(errors="replace"), harness.is_mounted(mnt)
    finally:
        harness.unmount(mnt)
        os.rmdir(mnt)


def main():
    harness.require_fuse()
    harness.gguffs_bin()
    missing = remote.have_nginx()
    if missing:
        harness.skip_or_fail(missing)
    corpus = os.path.join(os.environ.get("GGUFFS_CORPUS") or os.path.join(harness.SRC, "..", "shared", "corpus"),
                          "real")
    picked = [c for c in CORPUS_PICK if os.path.exists(os.path.join(corpus, c))]
    if not picked:
        harness.skip_or_fail("no corpus file of %s in %s" % (CORPUS_PICK, corpus))
    tmp = tempfile.mkdtemp(prefix="gguffs-rdcache-")
    try:
        root = os.path.join(tmp, "root")
        os.mkdir(root)
        name = picked[0]
        shutil.copyfile(os.path.join(corpus, name), os.path.join(root, name))
        with Nginx(root) as ng:
            return run(tmp, ng, name, os.path.join(root, name))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp, ng, name, local):
    h = Harness("remote-dcache")
    url = ng.url(name)
    size = os.path.getsize(local)
    cdir = os.path.join(tmp, "cache", "made")
    os.mkdir(os.path.dirname(cdir))
    opts = ["-o", "cache_dir=%s" % cdir, "-o", "cache_max=1G"]

    with h.case("refusals"):
        f = os.path.join(tmp, "afile")
        open(f, "w").close()
        for o, want in ((["-o", "cache_dir=%s" % f], f),
                        (["-o", "cache_dir=%s" % os.path.join(tmp, "no", "such")], os.path.join(tmp, "no", "such")),
                        (["-o", "cache_dir=%s" % cdir, "-o", "cache_max=lots"], "cache_max"),
                        (["-o", "cache_max=1G"], "cache_dir")):
            rc, err, mounted = refuse(url, o)
            h.check(rc == 1 and not mounted and err.count("\n") == 1 and want in err,
                    "%s: want one line naming %s, exit 1: rc %d %r" % (o, want, rc, err))
        # a local model: the options are for remote ones
        mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
        try:
            rc, _, err = harness.run_gguffs(["-o", "cache_dir=%s" % cdir, local, mnt], timeout=harness.MOUNT_WAIT)
            err = err.decode(errors="replace")
            h.check(rc == 1 and "remote" in err and err.count("\n") == 1,
                    "cache_dir on a local model: rc %d %r" % (rc, err))
        finally:
            harness.unmount(mnt)
            os.rmdir(mnt)
        h.check(not os.path.exists(cdir), "a refused mount made the cache directory")

    # the bytes to expect: a local mount of the same file
    g = Gguffs(local, ["-o", "ro"])
    try:
        want = read_all_raw(g.mnt)
        g.stop(h, "local mount")
    finally:
        g.close()
    h.check(want and any(want.values()), "no tensor bytes in %s" % name)
    first = {}
    with h.case("first mount"):
        g = Gguffs(url, opts)
        try:
            st = os.stat(cdir)
            h.check(stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700,
                    "cache_dir not made with mode 0700: %o" % st.st_mode)
            files = sorted(os.listdir(cdir))
            h.check(len(files) == 2 and re.fullmatch(r"dc-[0-9a-f]{16}\.data", files[0])
                    and re.fullmatch(r"dc-[0-9a-f]{16}\.map", files[1]), "cache files: %r" % files)
            if len(files) == 2:
                h.check(os.path.getsize(os.path.join(cdir, files[0])) == size, "the data file's size")
            s0 = read_stats(g.mnt)
            for k in ("disk_cache_hits", "disk_cache_misses", "disk_cache_stored", "disk_cache_rejected"):
                h.check(k in s0, "stats lacks %s: %r" % (k, sorted(s0)))
            h.check(read_all_raw(g.mnt) == want, "first mount: raw bytes")
            first = read_stats(g.mnt)
            # a second gguffs on the same model and directory: without the
            # disk cache, said once, and it works
            g2 = Gguffs(url, opts)
            try:
                h.check(read_all_raw(g2.mnt) == want, "second process: raw bytes")
                s2 = read_stats(g2.mnt)
                h.check("disk_cache_hits" not in s2, "second process shows disk cache stats")
                g2.stop(h, "second process")
                err = g2.stderr()
                h.check(err.count("in use by another process") == 1 and url in err,
                        "second process: want one line saying the cache is in use: %r" % err)
            finally:
                g2.close()
            g.stop(h, "first mount")
        finally:
            g.close()

    with h.case("second mount reads from the disk cache"):
        mark = ng.mark()
        g = Gguffs(url, opts)
        try:
            h.check(read_all_raw(g.mnt) == want, "second mount: raw bytes")
            s = read_stats(g.mnt)
            g.stop(h, "second mount")
        finally:
            g.close()
        if first.get("disk_cache_stored", 0) == 0:
            h.note("the first mount stored no block in the disk cache (the fill path of the "
                   "remote block cache does not use it yet): second-mount check not made")
        else:
            h.check(s["disk_cache_hits"] > 0 and s["disk_cache_rejected"] == 0,
                    "second mount: disk cache hits %r" % s)
            reqs = ng.requests_since(mark)
            h.check(s.get("remote_bytes", 0) <= (4 << 20),
                    "second mount fetched %r bytes in %d requests" % (s.get("remote_bytes"), len(reqs)))

    with h.case("a damaged map is rebuilt"):
        maps = [f for f in os.listdir(cdir) if f.endswith(".map")]
        with open(os.path.join(cdir, maps[0]), "r+b") as f:
            f.seek(20)
            b = f.read(1)
            f.seek(20)
            f.write(bytes([b[0] ^ 0xff]))
        g = Gguffs(url, opts)
        try:
            h.check(read_all_raw(g.mnt) == want, "after a damaged map: raw bytes")
            s = read_stats(g.mnt)
            h.check(s["disk_cache_hits"] == 0 and s["disk_cache_rejected"] == 0,
                    "a damaged map: blocks used %r" % s)
            g.stop(h, "damaged map")
            h.check(g.stderr().strip() == "", "damaged map: stderr %r" % g.stderr())
        finally:
            g.close()
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# The disk cache of remote mounts (-o cache_dir, -o cache_max) against nginx on loopback: the directory made with its missing parents (0700 each) or refused with one line, the files per remote identity, the stats lines, a second gguffs on the same model running without it (said once), a damaged map rebuilt, a second mount reading from the cache.
"""
Served by tests/integration/remote.py's Nginx: a model made here by
tests/oracle/gguf_write.py (no ggml needed), three f32 tensors of random
bytes, about 14 MiB: past the 2 MiB a mount fetches first, several 4 MiB
blocks.  The second mount reads what the first one read from the disk
cache: through the block cache of remote bytes, whose fills ask the disk
cache first and store what they fetch; it makes no request for it.
"""
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
import harness  # noqa: E402
from gguf_write import GGUFWriter  # noqa: E402
import remote  # noqa: E402
from harness import Gguffs, Harness  # noqa: E402
from remote import Nginx  # noqa: E402



def make_model(path):
    """Three f32 tensors of random bytes; returns {name: raw bytes}."""
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "dcache")
    want = {}
    for i, n in enumerate((1 << 20, 1536 * 1024, 1 << 19)):   # floats
        name = "blk.%d.weight" % i
        want[name] = random.Random(harness.test_seed() + i).randbytes(4 * n)
        w.add_tensor(name, "f32", [n], data=want[name])
    w.write(path)
    return want


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


def connected(stats):
    """The fill path asks the disk cache."""
    return stats.get("disk_cache_hits", 0) + stats.get("disk_cache_misses", 0) > 0


def diff(got, want):
    """What differs between two {tensor: bytes} (for messages)."""
    if sorted(got) != sorted(want):
        return "tensors %r, want %r" % (sorted(got), sorted(want))
    bad = []
    for t in want:
        if got[t] != want[t]:
            g, w = got[t], want[t]
            first = next((i for i in range(min(len(g), len(w))) if g[i] != w[i]), min(len(g), len(w)))
            bad.append("%s: %d bytes, want %d, first difference at %d" % (t, len(g), len(w), first))
    return "; ".join(bad)


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
    tmp = tempfile.mkdtemp(prefix="gguffs-rdcache-")
    try:
        root = os.path.join(tmp, "root")
        os.mkdir(root)
        name = "model.gguf"
        want = make_model(os.path.join(root, name))
        with Nginx(root) as ng:
            return run(tmp, ng, name, os.path.join(root, name), want)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp, ng, name, local, want):
    h = Harness("remote-dcache")
    url = ng.url(name)
    size = os.path.getsize(local)
    # two levels below tmp, both missing: made as mkdir -p does, each 0700;
    # tmp itself, there already, keeps its mode
    cdir = os.path.join(tmp, "cache", "made")
    os.chmod(tmp, 0o755)
    opts = ["-o", "cache_dir=%s" % cdir, "-o", "cache_max=1G"]

    with h.case("refusals"):
        f = os.path.join(tmp, "afile")
        open(f, "w").close()
        for o, named in ((["-o", "cache_dir=%s" % f], f),
                        (["-o", "cache_dir=%s" % os.path.join(f, "sub", "dir")], os.path.join(f, "sub", "dir")),
                        (["-o", "cache_dir=%s" % cdir, "-o", "cache_max=lots"], "cache_max"),
                        (["-o", "cache_max=1G"], "cache_dir")):
            rc, err, mounted = refuse(url, o)
            h.check(rc == 1 and not mounted and err.count("\n") == 1 and named in err,
                    "%s: want one line naming %s, exit 1: rc %d %r" % (o, named, rc, err))
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
        h.check(not os.path.exists(os.path.dirname(cdir)), "a refused mount made the cache directory")

    first = {}
    with h.case("first mount"):
        g = Gguffs(url, opts)
        try:
            for d in (os.path.dirname(cdir), cdir):
                st = os.stat(d)
                h.check(stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700,
                        "%s not made with mode 0700: %o" % (d, st.st_mode))
            h.check(stat.S_IMODE(os.stat(tmp).st_mode) == 0o755,
                    "the existing directory above cache_dir changed mode: %o" % os.stat(tmp).st_mode)
            files = sorted(os.listdir(cdir))
            h.check(len(files) == 2 and re.fullmatch(r"dc-[0-9a-f]{16}\.data", files[0])
                    and re.fullmatch(r"dc-[0-9a-f]{16}\.map", files[1]), "cache files: %r" % files)
            if len(files) == 2:
                h.check(os.path.getsize(os.path.join(cdir, files[0])) == size, "the data file's size")
            s0 = read_stats(g.mnt)
            for k in ("disk_cache_hits", "disk_cache_misses", "disk_cache_stored", "disk_cache_rejected",
                      "disk_cache_blocks"):
                h.check(k in s0, "stats lacks %s: %r" % (k, sorted(s0)))
            got = read_all_raw(g.mnt)
            h.check(got == want, "first mount: raw bytes: %s" % diff(got, want))
            first = read_stats(g.mnt)
            # every block fetched was stored, and counted as it was written
            # (not only once the flusher made it durable, up to a second
            # later): read right after the reads
            h.check(first.get("disk_cache_stored", 0) > 0 and
                    first["disk_cache_stored"] == first["disk_cache_misses"] and
                    first.get("disk_cache_blocks") == first["disk_cache_stored"],
                    "first mount: disk_cache_stored/blocks do not count the blocks stored: %r"
                    % {k: v for k, v in first.items() if k.startswith("disk_cache")})
            # a second gguffs on the same model and directory: without the
            # disk cache, said once, and it works
            g2 = Gguffs(url, opts)
            try:
                got = read_all_raw(g2.mnt)
                h.check(got == want, "second process: raw bytes: %s" % diff(got, want))
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
        g = Gguffs(url, opts)
        try:
            s0 = read_stats(g.mnt)
            mark = ng.mark()
            got = read_all_raw(g.mnt)
            h.check(got == want, "second mount: raw bytes: %s" % diff(got, want))
            # model.gguf: the header from memory, the data spliced from the
            # cache's file, in reads that straddle both and the blocks
            whole = open(local, "rb").read()
            with open(os.path.join(g.mnt, "model.gguf"), "rb") as f:
                h.check(f.read() == whole, "second mount: model.gguf differs from the file served")
                for a in (0, 4090, (4 << 20) - 1000, (8 << 20) - 77):
                    f.seek(a)
                    h.check(f.read(1 << 20) == whole[a:a + (1 << 20)],
                            "second mount: model.gguf at %d" % a)
            s = read_stats(g.mnt)
            reqs = ng.requests_since(mark)
            g.stop(h, "second mount")
        finally:
            g.close()
        h.check(connected(first), "the first mount never asked the disk cache: %r" % first)
        h.check(s["disk_cache_hits"] > 0 and s["disk_cache_rejected"] == 0,
                "second mount: disk cache hits %r" % s)
        # what the first mount stored is there, and reused; this mount
        # stored nothing
        h.check(s.get("disk_cache_blocks") == first.get("disk_cache_stored") and
                s.get("disk_cache_stored") == 0,
                "second mount: disk_cache_blocks %r (want %r, stored by the first), "
                "disk_cache_stored %r (want 0)" % (s.get("disk_cache_blocks"),
                                                   first.get("disk_cache_stored"),
                                                   s.get("disk_cache_stored")))
        h.check(not reqs and s["remote_requests"] == s0["remote_requests"],
                "second mount: what the first read cost %d requests: %r"
                % (len(reqs), [r["uri"] for r in reqs][:5]))
        # raw reads of blocks all on disk are spliced from the data file
        h.check(s.get("disk_cache_spliced", 0) > 0, "second mount: nothing spliced: %r" % s)

    with h.case("a damaged block is read from the server"):
        # a flipped byte in the data file's block 1 (bytes 4-8 MiB: all
        # tensor data): a reply spliced from the cache checks a block's
        # bytes first, so the damage is found, the block dropped and read
        # from the server; nothing wrong reaches the reader
        data = [f for f in os.listdir(cdir) if f.endswith(".data")][0]
        with open(os.path.join(cdir, data), "r+b") as f:
            f.seek((5 << 20) + 3)
            b = f.read(1)
            f.seek((5 << 20) + 3)
            f.write(bytes([b[0] ^ 0x40]))
        g = Gguffs(url, opts)
        try:
            mark = ng.mark()
            got = read_all_raw(g.mnt)
            h.check(got == want, "a damaged block: raw bytes: %s" % diff(got, want))
            s = read_stats(g.mnt)
            reqs = ng.requests_since(mark)
            g.stop(h, "damaged block")
        finally:
            g.close()
        h.check(s["disk_cache_rejected"] == 1 and s.get("disk_cache_spliced", 0) > 0,
                "a damaged block: want one rejected, the rest spliced: %r" % s)
        h.check(len(reqs) >= 1, "a damaged block: no request for it")

    with h.case("a damaged map is rebuilt"):
        maps = [f for f in os.listdir(cdir) if f.endswith(".map")]
        with open(os.path.join(cdir, maps[0]), "r+b") as f:
            f.seek(20)
            b = f.read(1)
            f.seek(20)
            f.write(bytes([b[0] ^ 0xff]))
        g = Gguffs(url, opts)
        try:
            got = read_all_raw(g.mnt)
            h.check(got == want, "after a damaged map: raw bytes: %s" % diff(got, want))
            s = read_stats(g.mnt)
            # rebuilt empty: every block of the data missed once at least
            nblocks = (os.path.getsize(local) + (4 << 20) - 1) // (4 << 20)
            h.check(s["disk_cache_rejected"] == 0 and
                    s["disk_cache_misses"] >= nblocks - 1,
                    "a damaged map: %r" % {k: v for k, v in s.items() if k.startswith("disk")})
            g.stop(h, "damaged map")
            h.check(g.stderr().strip() == "", "damaged map: stderr %r" % g.stderr())
        finally:
            g.close()
    with h.case("unmount, then remount at once"):
        # fusermount3 -u returns before the old gguffs has flushed the
        # cache and let go of its lock: the new mount waits for it (bounded)
        # instead of reading everything from the server again.  Each cycle
        # starts from an empty cache directory, so that the first mount has
        # all of the model to flush when it is unmounted.
        cycles = 10 if harness.QUICK else 20
        served = 0
        for i in range(cycles):
            label = "remount %d" % i
            cd = os.path.join(tmp, "cycle-%d" % i)
            o = ["-o", "cache_dir=%s" % cd, "-o", "cache_max=1G"]
            first = Gguffs(url, o)
            second = None
            try:
                got = read_all_raw(first.mnt)
                h.check(got == want, "%s: first mount: raw bytes: %s" % (label, diff(got, want)))
                # at once: the process is still there, flushing, holding the cache
                r = subprocess.run(["fusermount3", "-u", first.mnt], capture_output=True)
                h.check(r.returncode == 0, "%s: fusermount3 -u: %r" % (label, r.stderr))
                second = Gguffs(url, o)
                mark = ng.mark()
                got = read_all_raw(second.mnt)
                s = read_stats(second.mnt)
                reqs = ng.requests_since(mark)
                ok = h.check(got == want, "%s: raw bytes: %s" % (label, diff(got, want)))
                ok &= h.check(s.get("disk_cache_hits", 0) > 0 and not reqs,
                              "%s: not served from the disk cache: %d requests, %r; stderr %r"
                              % (label, len(reqs), {k: v for k, v in s.items()
                                                    if k.startswith("disk")}, second.stderr()))
                served += ok
                first.check_clean(h, label + ": the first mount", signalled=False)
                second.stop(h, label + ": the second mount")
                h.check("in use" not in second.stderr(), "%s: %r" % (label, second.stderr()))
            finally:
                first.close()
                if second is not None:
                    second.close()
            shutil.rmtree(cd)
        print("  %d of %d remounts right after an unmount read all from the disk cache"
              % (served, cycles), flush=True)

    with h.case("two files with one ETag"):
        # nginx's ETag is mtime-size: a copy with the same mtime has the
        # same one; the caches are told apart by URL
        twin = os.path.join(os.path.dirname(local), "twin.gguf")
        shutil.copyfile(local, twin)
        st = os.stat(local)
        os.utime(twin, ns=(st.st_atime_ns, st.st_mtime_ns))
        g = Gguffs(url, opts)
        try:
            g2 = Gguffs(ng.url("twin.gguf"), opts)
            try:
                s1, s2 = read_stats(g.mnt), read_stats(g2.mnt)
                h.check("disk_cache_hits" in s1 and "disk_cache_hits" in s2,
                        "two files with one ETag: both have a disk cache")
                got = read_all_raw(g2.mnt)
                h.check(got == want, "twin: raw bytes: %s" % diff(got, want))
                g2.stop(h, "twin")
                h.check("in use" not in g2.stderr(), "twin: %r" % g2.stderr())
            finally:
                g2.close()
            g.stop(h, "twin's original")
        finally:
            g.close()
        h.check(len([f for f in os.listdir(cdir) if f.endswith(".map")]) == 2,
                "two files with one ETag: cache files %r" % os.listdir(cdir))
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

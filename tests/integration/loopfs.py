# Loop-mounted XFS (reflink=1), btrfs and ext4 images made by a test in a temporary directory, and what gguffs' clone path needs from them: a FICLONERANGE probe, FIEMAP shared extents, a process's write_bytes.
"""
    fs = LoopFs("xfs")          # or "btrfs", "ext4"; skip (exit 77) when mkfs, loop
    try:                        # devices or the kernel's support are missing
        ... fs.path ...         # and CI is not set (then: fail)
    finally:
        fs.close()              # unmounts (the loop device goes with it)

Needs root.  The image is a sparse file in a temporary directory (TMPDIR);
mkfs.xfs -m reflink=1, mkfs.btrfs, mkfs.ext4 (ext4: no cloning, the copy
path, for tests whose TMPDIR is not ext4).  Packages: xfsprogs,
btrfs-progs, e2fsprogs (scripts/setup --tests installs them).
"""
import fcntl
import math
import os
import shutil
import struct
import subprocess
import tempfile

import harness

MKFS = {"xfs": ["mkfs.xfs", "-q", "-f", "-m", "reflink=1"],
        "btrfs": ["mkfs.btrfs", "-q", "-f"],
        "ext4": ["mkfs.ext4", "-q", "-F"]}
MIN_MB = {"xfs": 320, "btrfs": 128, "ext4": 32}
PACKAGE = {"xfs": "xfsprogs", "btrfs": "btrfs-progs", "ext4": "e2fsprogs"}

# struct file_clone_range { s64 src_fd; u64 src_offset, src_length, dest_offset; }
FICLONERANGE = 0x4020940D
FS_IOC_FIEMAP = 0xC020660B
FIEMAP_EXTENT_LAST = 0x1
FIEMAP_EXTENT_SHARED = 0x2000
FIEMAP_FLAG_SYNC = 0x1


def require(kind):
    """Skips (or fails, with CI) unless a kind image can be made here."""
    if os.geteuid() != 0:
        harness.skip_or_fail("loop-mounting a %s image needs root" % kind)
    tool = MKFS[kind][0]
    if not shutil.which(tool):
        harness.skip_or_fail("%s is missing (apt-get install %s)" % (tool, PACKAGE[kind]))
    if not os.path.exists("/dev/loop-control") and not os.path.exists("/dev/loop0"):
        harness.skip_or_fail("no loop devices (/dev/loop-control)")


class LoopFs:
    def __init__(self, kind, size_mb=512):
        require(kind)
        self.kind = kind
        self.tmp = tempfile.mkdtemp(prefix="gguffs-%s-" % kind)
        self.image = os.path.join(self.tmp, "fs.img")
        self.path = os.path.join(self.tmp, "mnt")
        self.mounted = False
        os.mkdir(self.path)
        try:
            with open(self.image, "wb") as f:
                f.truncate(max(size_mb, MIN_MB[kind]) << 20)
            r = subprocess.run(MKFS[kind] + [self.image], capture_output=True, text=True)
            if r.returncode != 0:
                raise OSError("%s: %s" % (" ".join(MKFS[kind]), r.stderr.strip()))
            r = subprocess.run(["mount", "-t", kind, "-o", "loop", self.image, self.path],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise OSError("mount -o loop (%s): %s" % (kind, r.stderr.strip()))
            self.mounted = True
        except OSError as e:
            self.close()
            harness.skip_or_fail("cannot make a loop-mounted %s: %s" % (kind, e))

    def close(self):
        if self.mounted:
            r = subprocess.run(["umount", self.path], capture_output=True)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", self.path], capture_output=True)
            self.mounted = False
        shutil.rmtree(self.tmp, ignore_errors=True)



def fs_type(path):
    """The type of the file system holding path, as the mount table says
    ("ext4", "xfs", "tmpfs", ...): the mount whose point is the longest
    prefix of path (statfs's magic does not tell ext4 from ext2/3)."""
    path = os.path.realpath(path)
    best, kind = "", None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            point = left.split()[4].replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, right.split()[0]
    return kind


def used_bytes(path):
    """Bytes in use on the file system holding path, after a sync."""
    os.sync()
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def clone_step(directory, alignment=32):
    """What gguffs would pad for in directory: lcm(f_bsize, alignment) if
    its file system clones (FICLONERANGE of one block of a file into an
    unnamed file, as gguf_clone_block tries), else 0."""
    bs = os.statvfs(directory).f_bsize
    src = tempfile.NamedTemporaryFile(dir=directory)
    try:
        src.write(bytes(2 * bs))
        src.flush()
        try:
            t = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o600)
        except OSError:
            return 0
        try:
            fcntl.ioctl(t, FICLONERANGE, struct.pack("qQQQ", src.fileno(), 0, bs, bs))
        except OSError:
            return 0
        finally:
            os.close(t)
    finally:
        src.close()
    step = bs * alignment // math.gcd(bs, alignment)
    return step if step <= 64 << 20 else 0


def extents(path):
    """The file's extents as (logical offset, length, flags), from FIEMAP
    (synced first)."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        start = 0
        while True:
            n = 256
            # struct fiemap: start, length, flags, mapped, count, reserved
            req = bytearray(struct.pack("QQIIII", start, 2 ** 64 - 1 - start, FIEMAP_FLAG_SYNC,
                                        0, n, 0) + bytes(56 * n))
            fcntl.ioctl(fd, FS_IOC_FIEMAP, req)
            mapped = struct.unpack_from("I", req, 20)[0]
            last = None
            for i in range(mapped):
                lg, ph, ln, _, _, fl = struct.unpack_from("QQQQQI", req, 32 + 56 * i)
                out.append((lg, ln, fl))
                last = (lg, ln, fl)
            if not mapped or last[2] & FIEMAP_EXTENT_LAST:
                return out
            start = last[0] + last[1]
    finally:
        os.close(fd)


def shared_bytes(path, lo=0, hi=None):
    """Bytes of [lo, hi) in extents the file system reports as shared
    (FIEMAP_EXTENT_SHARED: also held by another file)."""
    total = 0
    for lg, ln, fl in extents(path):
        if fl & FIEMAP_EXTENT_SHARED:
            a, b = max(lg, lo), lg + ln if hi is None else min(lg + ln, hi)
            total += max(0, b - a)
    return total


def write_bytes(pid):
    """write_bytes of /proc/PID/io: bytes this process caused to be written
    to storage (pages it dirtied), all its threads."""
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise OSError("no write_bytes in /proc/%d/io" % pid)


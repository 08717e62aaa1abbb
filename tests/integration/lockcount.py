# Counting gguffs' pthread lock takes per FUSE read request: the LD_PRELOAD shim tests/tools/lockcount.c, its control socket, the call sites resolved with addr2line, and the four reads measured (test_locks, scripts/bench --part locks).
"""
gguffs runs with the shim preloaded (env()); a window is opened and closed
over the shim's socket around the reads measured, with the files opened
before it and closed after, so that what the window holds is the READ
requests and what they cause on every thread (the f32 workers' fills
included).  The read requests are counted by the mount's stats file
(reads_KIND, read before and after the window, never inside it); the FUSE
replies counted by the shim are every request the window held.

Each take's call site is the address its caller returns to, resolved with
addr2line -i (inlined functions give the innermost file:line first and
the function they were inlined into last); libfuse has no line table
here, so its sites are named by their nearest exported symbol.
"""
import collections
import os
import socket
import subprocess
import tempfile

import harness

SRC = os.environ.get("GGUFFS_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

# the four reads measured, in the order they are run and printed
PATHS = ("f32 cold", "f32 warm", "raw", "meta pread", "meta cat")


def shim_path():
    """The shim (GGUFFS_LOCKCOUNT_SHIM, else beside gguffs' build)."""
    p = os.environ.get("GGUFFS_LOCKCOUNT_SHIM")
    if p:
        return p
    build = os.path.dirname(os.path.dirname(harness.gguffs_bin()))
    return os.path.join(build, "tests", "tools", "liblockcount.so")


class Site:
    """Where a take was made: OBJ and OFF as the shim wrote them, the
    inline chain as addr2line read it ([(function, file:line)], innermost
    first)."""

    def __init__(self, obj, off, sym):
        self.obj, self.off, self.sym = obj, int(off, 16), sym
        self.chain = []

    def short(self):
        if self.chain and self.chain[0][1] and not self.chain[0][1].startswith("??"):
            fn, fl = self.chain[0]
            outer = self.chain[-1][0]
            return "%s (%s%s)" % (fl, fn, "" if outer == fn else " in " + outer)
        base = os.path.basename(self.obj)
        return "%s+%#x%s" % (base, self.off, " (near %s)" % self.sym if self.sym != "-" else "")

    def mine(self):
        """in gguffs itself (not libfuse, libc, ...)"""
        return os.path.basename(self.obj) == "gguffs"


class Counts:
    """One window: takes [(kind, n, site, caller's site)], replies {name: n},
    reads {KIND: n} (the stats file's reads_KIND, moved in the window),
    stats {name: n} (every counter of the stats file, as it moved)."""

    def __init__(self, text, reads):
        self.takes, self.replies, self.reads = [], {}, reads
        for line in text.splitlines():
            f = line.split()
            if f[:1] == ["take"] and len(f) == 9:
                self.takes.append((f[1], int(f[2]), Site(*f[3:6]), Site(*f[6:9])))
            elif f[:1] == ["reply"] and len(f) == 3:
                self.replies[f[1]] = int(f[2])

    def per_unit(self, n, unit):
        """what the counts are divided by: n units ("read": READ requests)"""
        self.n, self.unit = n, unit
        return self

    def per(self, x):
        return x / self.n if self.n else float("nan")

    def total(self, waits=False, mine=None):
        """lock takes (waits: the condition waits instead); mine: only
        gguffs' own (True) or only the libraries' (False)"""
        return sum(n for k, n, s1, _ in self.takes if k.startswith("pthread_cond_") == waits
                   and (mine is None or s1.mine() == mine))

    def requests(self):
        return sum(self.replies.values())

    def by_site(self, n=None, mine=None):
        """[("kind site <- caller", takes)], most first; mine: only gguffs' own
        (True) or only the libraries' (False)"""
        c = collections.Counter()
        for k, cnt, s1, s2 in self.takes:
            if k.startswith("pthread_cond_") or (mine is not None and s1.mine() != mine):
                continue
            c["%s %s <- %s" % (k.replace("pthread_", ""), s1.short(), s2.short())] += cnt
        return c.most_common(n)


def resolve(counts):
    """Fills each site's chain with addr2line -f -i -e OBJ (one run per object)."""
    sites = collections.defaultdict(list)
    for _, _, s1, s2 in counts.takes:
        for s in (s1, s2):
            if s.obj != "?" and os.path.exists(s.obj):
                sites[s.obj].append(s)
    for obj, ss in sites.items():
        # the address returned to, less one: inside the call instruction;
        # -a prints each address before its chain (where a chain begins)
        marked = ["addr2line", "-f", "-i", "-a", "-e", obj] + ["%#x" % (s.off - 1) for s in ss]
        try:
            out = subprocess.run(marked, capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        chains, cur = [], None
        lines = out.splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("0x"):
                cur = []
                chains.append(cur)
                i += 1
                continue
            if cur is not None and i + 1 < len(lines):
                fl = lines[i + 1]
                if fl.startswith("/"):
                    fl = os.path.normpath(fl)
                if fl.startswith(SRC + "/"):
                    fl = fl[len(SRC) + 1:]
                fl = fl.split(" (discriminator")[0]
                cur.append((lines[i], fl))
            i += 2
        for s, ch in zip(ss, chains):
            s.chain = ch


class LockCount:
    """The shim's socket in a temporary directory; env() is gguffs' environment."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gguffs-locks-")
        self.sock = os.path.join(self.dir, "ctl")

    def env(self):
        e = dict(os.environ)
        e["LD_PRELOAD"] = shim_path()
        e["GGUFFS_LOCKCOUNT_SOCK"] = self.sock
        return e

    def ask(self, cmd):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60)
            s.connect(self.sock)
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while True:
                b = s.recv(1 << 16)
                if not b:
                    break
                out += b
        text = out.decode()
        if cmd != "dump" and text != "ok\n" or cmd == "dump" and not text.endswith("end\n"):
            raise RuntimeError("lockcount %s: %r" % (cmd, text[-200:]))
        return text

    def measure(self, mnt, fn, kept):
        """fn() in a window: Counts of it, resolved.  The stats file read
        before and after it stays open (kept): its RELEASE would come in
        this window or the next."""
        before = read_stats_kept(mnt, kept)
        self.ask("start")
        try:
            fn()
        finally:
            self.ask("stop")
        text = self.ask("dump")
        after = read_stats_kept(mnt, kept)
        moved = {k: after[k] - before.get(k, 0) for k in after}
        c = Counts(text, {k[6:]: v for k, v in moved.items() if k.startswith("reads_") and v})
        c.stats = moved
        resolve(c)
        return c

    def close(self):
        for p in (self.sock,):
            try:
                os.unlink(p)
            except OSError:
                pass
        try:
            os.rmdir(self.dir)
        except OSError:
            pass


# ---- the model and the reads ---------------------------------------------------

TENSOR = "blk.0.q8"          # q8_0 [4096, ROWS]: ROWS * 16 KiB of f32
KEY = "general.name"


def make_model(path, rows=1024):
    """A q8_0 tensor of rows * 16 KiB of f32 (1024: 16 MiB, 16 chunks; every
    block's scale 1/64, its quants at random) and a string key."""
    import numpy as np
    from gguf_write import GGUFWriter
    rng = np.random.default_rng(33)
    nblocks = 4096 * rows // 32
    blocks = np.zeros((nblocks, 34), np.uint8)
    blocks[:, 0:2] = np.frombuffer(np.float16(1 / 64).tobytes(), np.uint8)
    blocks[:, 2:] = rng.integers(0, 256, (nblocks, 32), np.uint8)
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add(KEY, "string", "lock counting")
    w.add_tensor(TENSOR, "q8_0", [4096, rows], blocks.tobytes())
    w.write(path)
    return path


def read_to_end(fd, block=4 << 20):
    n = 0
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        b = os.read(fd, block)
        if not b:
            return n
        n += len(b)


def open_kept(path, kept):
    """path opened, its descriptor in kept: closed only after the last
    window (close_kept).  A file's RELEASE comes after its close, when the
    kernel gets to it: a close before a window could land in it."""
    fd = os.open(path, os.O_RDONLY)
    kept.append(fd)
    return fd


def read_stats_kept(mnt, kept):
    """harness.read_stats, the file left open (kept): {name: int}"""
    fd = open_kept(os.path.join(mnt, "stats"), kept)
    text = b""
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        text += b
    out = {}
    for line in text.decode().splitlines():
        k, _, v = line.partition(" ")
        if v.strip().isdigit():
            out[k] = int(v)
    return out


def close_kept(kept):
    while kept:
        os.close(kept.pop())


def _pass(lc, mnt, view, kept):
    fd = open_kept(os.path.join(mnt, "tensors", TENSOR, view), kept)
    c = lc.measure(mnt, lambda: read_to_end(fd), kept)
    return c.per_unit(c.reads.get("f32" if view == "f32" else "raw", 0), "read")


def f32_cold(lc, mnt, kept):
    """The first pass over f32 (each chunk dequantized, on the FUSE thread
    or by a worker ahead of it)."""
    return _pass(lc, mnt, "f32", kept)


def f32_warm_pass(mnt, measure, kept):
    """A pass over f32 with every chunk in the block cache, run by
    measure(fn) (its result returned).  A pass of its own would not leave
    them there (a used-up chunk is the first to go: the next miss takes
    its buffer); the tensor's stats file fills them all and uses none up,
    so the pass after it is all hits (the window's misses: 0).  The
    kernel's page cache of f32 is dropped before it."""
    os.read(open_kept(os.path.join(mnt, "tensors", TENSOR, "stats"), kept), 1 << 20)
    fd = open_kept(os.path.join(mnt, "tensors", TENSOR, "f32"), kept)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return measure(lambda: read_to_end(fd))


def f32_warm(lc, mnt, kept):
    """f32_warm_pass, counted"""
    c = f32_warm_pass(mnt, lambda fn: lc.measure(mnt, fn, kept), kept)
    return c.per_unit(c.reads.get("f32", 0), "read")


def raw(lc, mnt, kept):
    """The first pass over raw (spliced from the model file)."""
    return _pass(lc, mnt, "raw", kept)


def meta_pread(lc, mnt, kept, n=50):
    """n preads of a meta/ value on one open file (a read-write mount reads
    meta/ past the page cache: each pread is one READ request; stats has
    no reads_ kind for meta/, so n is the count)."""
    fd = open_kept(os.path.join(mnt, "meta", KEY), kept)
    c = lc.measure(mnt, lambda: [os.pread(fd, 4096, 0) for _ in range(n)], kept)
    return c.per_unit(n, "read")


def meta_cat(lc, mnt, kept, n=50):
    """n cats of a meta/ value (open, read, read the end, close), counted
    per cat: every request they make.  The last one's RELEASE may come
    after the window closes (one in n cats' count)."""
    p = os.path.join(mnt, "meta", KEY)

    def cats():
        for _ in range(n):
            with open(p, "rb") as f:
                f.read()
    return lc.measure(mnt, cats, kept).per_unit(n, "cat")


READS = {"f32 cold": f32_cold, "f32 warm": f32_warm, "raw": raw,
         "meta pread": meta_pread, "meta cat": meta_cat}

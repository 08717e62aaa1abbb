# What the parts of scripts/bench share: paths, skipping, the page cache, timed reads, CPU and memory of processes, FUSE servers mounted through the test harness, the delay proxy.
"""
Mounting, unmounting, waiting for a mount and RSS sampling are the test
harness's (tests/integration/harness.py: Gguffs, mounted, mount_daemon,
RssPeak); nginx is tests/integration/remote.py's Nginx; added latency is
scripts/delay-proxy (DelayProxy below).  What is here is what only the
benchmarks need: timed reads, CPU clocks of processes, the page cache.
"""
import os
import subprocess
import sys
import time

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
os.environ.setdefault("GGUFFS_SRC", TOP)
for _d in ("tests/oracle", "tests/integration"):
    if os.path.join(TOP, _d) not in sys.path:
        sys.path.insert(0, os.path.join(TOP, _d))
import harness  # noqa: E402
from gguf_write import GGUFWriter  # noqa: E402,F401  (the parts' model writer)

# The build: GGUFFS_BUILD (meson's build directory; the meson test
# bench-quick sets it) or build/ of the checkout; GGUFFS_BIN and
# GGUFFS_ORACLE as for the tests.
BUILD = os.environ.get("GGUFFS_BUILD") or os.path.join(TOP, "build")
GGUFFS = os.environ.get("GGUFFS_BIN") or os.path.join(BUILD, "fs", "gguffs")
os.environ["GGUFFS_BIN"] = GGUFFS        # harness.gguffs_bin() agrees
ORACLE = os.environ.get("GGUFFS_ORACLE") or \
    os.path.join(TOP, ".deps/oracle/package/bins/linux-x64/libggml-base.so")
NULLFS = os.path.join(BUILD, "tests", "bench", "nullfs")
CHUNK = 1 << 20
IN_CI = harness.IN_CI


class Skip(Exception):
    """A part (or a piece of one) cannot run here: what is missing."""


def skip(why):
    raise Skip(why)


# What the parts left out of this run (not root, no netem, ...): printed
# at the end by scripts/bench, one line each.
LEFT_OUT = []


def left_out(part, what):
    LEFT_OUT.append("part %s: %s" % (part, what))
    print("# part %s: %s" % (part, what), flush=True)


def need(path, what="run scripts/build"):
    if not os.path.exists(path):
        skip("%s missing (%s)" % (path, what))


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def make_big_file(path, size_mb):
    """One f16 tensor of size_mb MiB, data written in chunks."""
    n = size_mb * (1 << 20) // 2
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add_tensor("big.weight", "f16", [4096, n // 4096], data=b"", check=False)
    hdr, _ = w.layout()
    block = bytes(range(256)) * (CHUNK // 256)
    with open(path, "wb") as f:
        f.write(hdr)
        left = n * 2
        while left:
            k = min(left, CHUNK)
            f.write(block[:k])
            left -= k
    return len(hdr)


def read_throughput(path, offset, length, direct=False):
    """Sequential read of [offset, offset+length) in 1 MiB chunks: GB/s.
    direct: opened with O_DIRECT (no page cache; the buffer is an
    anonymous mapping, page-aligned, touched before timing)."""
    if direct:
        import mmap
        buf = mmap.mmap(-1, CHUNK)
        buf.write(b"\1" * CHUNK)
    else:
        buf = bytearray(CHUNK)
    mv = memoryview(buf)
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
    try:
        t0 = time.perf_counter()
        pos, end = offset, offset + length
        while pos < end:
            n = os.preadv(fd, [mv[:min(CHUNK, end - pos)]], pos)
            if n <= 0:
                raise RuntimeError("short read at %d" % pos)
            pos += n
        dt = time.perf_counter() - t0
    finally:
        os.close(fd)
        mv.release()
    return length / dt / 1e9


def edit_file(path, text):
    """What `echo text > path` does: open(O_TRUNC), write, close."""
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def warm_up(path):
    """Reads path once so that it is in the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        while os.read(fd, 8 * CHUNK):
            pass
    finally:
        os.close(fd)


# ---- CPU and memory of processes

def proc_cpu_ms(pid):
    """CPU time (user + system) of process pid so far, ms: the sum of its
    threads' run time (/proc/PID/task/*/schedstat, ns) as {tid: ms}, so that
    two samples can be compared thread by thread; None if gone."""
    out = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                out[tid] = int(f.read().split()[0]) / 1e6
        except (OSError, ValueError, IndexError):
            pass
    return out


def cpu_between(a, b):
    """ms of CPU between two proc_cpu_ms samples; None if a thread of the
    first is gone by the second (its time would be lost)."""
    if a is None or b is None or any(t not in b for t in a):
        return None
    return sum(ms - a.get(t, 0.0) for t, ms in b.items())


def proc_stat_ms(pid):
    """CPU time of process pid (all its threads, dead ones too), ms, in
    clock ticks; None if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def self_cpu_ms():
    """CPU time of this process (the reader of the timed reads), ms."""
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1000.0


def proc_status(pid, field):
    """Value of a /proc/PID/status field in kB (None if gone)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def nginx_cpu_ms(ng):
    """CPU time of a remote.Nginx (master and worker) so far, ms."""
    return sum(proc_stat_ms(pid) or 0.0 for pid in ng.pids())


# ---- files of numbers, formatting

def read_int(path):
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def counters(path):
    """A 'name value' per line file (gguffs' and nullfs' stats) as a dict."""
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(" ")
            try:
                out[k] = int(v)
            except ValueError:
                out[k] = v.strip()
    return out


def best(v):
    return max(v) if v else None


def fmt_gbs(v):
    return "%.2f" % v if v else "-"


def fmt_ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"


# ---- FUSE servers

class FuseMount:
    """gguffs or nullfs run with -f on mnt (harness.Gguffs: a child
    process whose exit status and stderr are checked after the unmount).
    Ready once the mount point answers a stat (the kernel has INIT's reply
    then); the readahead is then written to the mount's bdi by us for the
    null server (a value written before INIT's reply is handled is cut back
    to the 128 KiB the INIT request offered (min(bdi, max_readahead of the
    reply)), so a server cannot set it for itself before its loop runs).
    gguffs sets its own, from -o readahead, when it has replied to INIT
    (rounded to whole read requests, so that every window is cut into whole
    requests, each one f32 chunk): with write_ra False it is only read
    back.  argv: the whole command line (it names mnt)."""

    def __init__(self, argv, mnt, ra, write_ra=True):
        self.mnt = mnt
        self.g = harness.Gguffs(argv[0], mnt=mnt, argv=argv)
        self.p = self.g.proc
        try:
            st = os.stat(mnt)
            self.dev = st.st_dev
            self.bdi = "/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(st.st_dev),
                                                               os.minor(st.st_dev))
            self.ra_before = read_int(self.bdi)
            if write_ra:
                try:
                    with open(self.bdi, "w") as f:
                        f.write("%d\n" % (ra >> 10))
                except OSError:
                    pass
            self.ra_kb = read_int(self.bdi)
        except BaseException:
            self.g.close()
            raise

    def close(self):
        """Unmounts; raises harness.DaemonError if the server then exits
        badly (non-zero, a sanitizer report)."""
        try:
            self.g.stop(None, os.path.basename(self.g.proc.args[0]))
        finally:
            self.g.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DelayProxy:
    """scripts/delay-proxy in front of an upstream on 127.0.0.1: rtt_ms
    more per round trip, at most window bytes in flight per connection;
    rewrite (old, new): bytes replaced in the upstream's answers."""

    def __init__(self, port, rtt_ms, window=4 << 20, rewrite=None):
        argv = [sys.executable, os.path.join(TOP, "scripts", "delay-proxy")]
        if rewrite:
            argv += ["--rewrite", rewrite[0], rewrite[1]]
        argv += ["127.0.0.1", str(port), str(rtt_ms / 2.0), str(window)]
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("port "):
            self.close()
            raise RuntimeError("delay-proxy did not start")
        self.port = int(line.split()[1])

    def close(self):
        if self.p.poll() is None:
            self.p.terminate()
        self.p.wait()
        self.p.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

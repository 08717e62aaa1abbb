#!/usr/bin/python3
# A stalled or dead server costs a remote mount's reader at most `timeout`: with nginx stopped (SIGSTOP) mid-read, sequential (raw, f32 with workers prefetching, model.gguf) and random readers get EIO within the bound, nothing is retried past the timeout, each failure is logged (URL redacted, range, cause); once nginx runs again later reads return the right bytes.  A server that dies during a sequential read leaves a log line for the reader's EIO.
"""
    test_remote_stall.py

A model made here (tests/oracle/gguf_write.py: no ggml needed) is served
by tests/integration/remote.py's Nginx and mounted with -o timeout=2,
-o remote_block=64K (many small requests: a stall always meets some in
flight), -o threads=2 (f32 workers fill chunks ahead of the reader, their
fills asking the block cache's fetch threads) and -o log_file.  Its URL
carries a query string (a presigned URL's signature, which a message must
never show).

Stalled server, one case per reader, each with a stall of its own:

  1. a child process opens the file, reads a warm-up (sequential readers:
     the kernel's readahead and the fetch threads' prefetch are running)
     and says "ready";
  2. the test stops nginx (master and worker: SIGSTOP; the kernel still
     accepts connections, nothing answers) and tells the child to go on;
  3. the child reads on (sequentially, or 4 KiB at scattered blocks it
     never read) until a read fails, timing each read() call.

Checked: the read fails with EIO; no read() call lasted longer than the
hang guard, GUARD_FACTOR x (timeout + 1 s: libcurl looks at a stalled
transfer about once a second) — the code before the deadline took about
12 x timeout (six requests of `timeout` each, and the kernel asks twice);
`remote_retries` did not grow during the stall (a stalled request is not
retried: the time is up; before, every stalled request was retried five
times); the log file got a line naming the URL without its query, a
range of the file overlapping the reader's tensor (or model.gguf's bytes
it read) and the cause ("timed out").  Then nginx goes on (SIGCONT), a
spare tensor never read before is read whole (right bytes: the server
answers again, which also ends the hold of the failed blocks, see
cache/blocksrc.h), and the stalled file is read again whole: the right
bytes.

With the default timeout (30 s) one sequential reader is stalled the same
way (skipped with GGUFFS_TEST_QUICK, the sanitizer run: it costs 30 s).

Dead server: a FaultProxy in front of nginx holds the ninth request of a
sequential read (raw, then model.gguf) and is stopped while it does (its
listener closed, its connections cut): the read fails with EIO and the
log holds a line with the URL, a range and a cause (model.gguf's reads
failed without a line before).

Times are measured only against the hang guards; the counts are what is
asserted.
"""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
from gguf_write import GGUFWriter  # noqa: E402
from harness import Gguffs, Harness  # noqa: E402
from remote import FaultProxy, Nginx, Rule  # noqa: E402

TIMEOUT = 2
# the hang guard of one read() call: GUARD_FACTOR x (timeout + libcurl's
# second); the code before the deadline took about 12 x timeout
GUARD_FACTOR = 3
LIVE = 60.0                     # a child's warm-up, a healthy read: liveness bounds
SECRET = "X-Amz-Signature=gguffs-stall-secret-7c1e"
MIB = 1 << 20

# A reader: warm-up, "ready", waits for a line on stdin, reads on until a
# read fails or the range ends; the bytes it read go to OUT; one JSON line.
CHILD = r"""
import json, os, sys, time
mode, path, start, length, warm, out = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), sys.argv[6]
fd = os.open(path, os.O_RDONLY)
got = bytearray()
rep = {"err": None, "pos": None, "max_read": 0.0, "reads": 0}
pos = start
if mode == "seq":
    os.lseek(fd, start, os.SEEK_SET)
    while len(got) < warm:
        b = os.read(fd, min(128 << 10, warm - len(got)))
        if not b:
            break
        got += b
    pos = start + len(got)
print("ready", flush=True)
sys.stdin.readline()
i = 0
while pos < start + length:
    if mode == "seq":
        at, n = pos, min(128 << 10, start + length - pos)
    else:
        # 4 KiB in scattered 64 KiB blocks of the range, none read before
        blocks = length >> 16
        at, n = start + ((i * 37 + 5) % blocks << 16) + 100, 4096
        if i >= blocks:
            break
    t = time.monotonic()
    try:
        b = os.pread(fd, n, at)
    except OSError as e:
        rep["err"] = e.errno
        rep["pos"] = at
        rep["max_read"] = max(rep["max_read"], time.monotonic() - t)
        break
    rep["max_read"] = max(rep["max_read"], time.monotonic() - t)
    rep["reads"] += 1
    if not b:
        break
    if mode == "seq":
        got += b
        pos += len(b)
    i += 1
with open(out, "wb") as f:
    f.write(got)
print(json.dumps(rep), flush=True)
"""


def make_model(path):
    """Tensors past the 2 MiB a mount fetches first: {name: (file offset,
    raw bytes)}."""
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "stall")
    tensors = {"pad": os.urandom(3 * MIB)}
    for name, size in (("seq", 16 * MIB), ("mg", 16 * MIB), ("rand", 8 * MIB),
                       ("dflt", 16 * MIB), ("dead", 8 * MIB), ("deadmg", 8 * MIB)):
        tensors[name] = os.urandom(size)
    # q8_0: 32 weights in 34 bytes (an f16 scale 1.0, then 32 int8); its
    # f32 view is 16 MiB, filled by chunks from the remote blocks
    blocks = (4 * MIB) // 32
    q = bytearray(os.urandom(34 * blocks))
    for b in range(blocks):
        q[34 * b:34 * b + 2] = b"\x00\x3c"
    tensors["q8"] = bytes(q)
    for i in range(6):
        tensors["spare%d" % i] = os.urandom(256 << 10)
    for name, data in tensors.items():
        if name == "q8":
            w.add_tensor(name, "q8_0", [4096, (4 * MIB) // 4096], data=data)
        else:
            w.add_tensor(name, "f32", [len(data) // 4], data=data)
    hdr, _ = w.layout()
    w.write(path)
    offs = {t["name"].decode(): len(hdr) + t["offset"] for t in w.tensors}
    return {n: (offs[n], d) for n, d in tensors.items()}


class Child:
    def __init__(self, mode, path, start, length, warm, out):
        self.out = out
        self.p = subprocess.Popen([sys.executable, "-c", CHILD, mode, path, str(start), str(length),
                                   str(warm), out], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)

    def line(self, timeout):
        """The child's next stdout line, or None past timeout (a liveness
        bound)."""
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        return self.p.stdout.readline().decode().strip() if r else None

    def go(self):
        self.p.stdin.write(b"go\n")
        self.p.stdin.flush()

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def stop_server(ng, sig):
    for pid in ng.pids():
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def log_since(path, mark):
    try:
        with open(path, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def log_size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


RANGE = re.compile(r"\(reading bytes (\d+)-(\d+)\)$")


def check_log(h, label, lines, url_shown, span, cause=None):
    """A line names the URL as shown (no query), a range overlapping span
    and a cause (matching cause, if given); no line shows the secret."""
    h.check(not any(SECRET.split("=")[1] in x for x in lines), "%s: the log shows the URL's "
            "signature: %r" % (label, lines[:3]))
    good = []
    # the URL as shown: its query replaced by "?…" (remote/url.h)
    named = re.compile(re.escape(url_shown) + r"(\?…)?: ")
    for x in lines:
        m = RANGE.search(x)
        u = named.search(x)
        if not m or not u:
            continue
        a, b = int(m.group(1)), int(m.group(2))
        what = x[u.end():m.start()].strip()
        if a < span[1] and b >= span[0] and what and (cause is None or cause in what):
            good.append(x)
    return h.check(good, "%s: no log line with the URL %s, a range in bytes %d-%d and a cause%s: "
                   "%r" % (label, url_shown, span[0], span[1] - 1,
                           " (%s)" % cause if cause else "", lines[-5:]))


def stalled_read(h, ng, g, label, mode, rel, start, length, warm, want, timeout, tmp, logf,
                 url_shown, span):
    """One reader through one stall (see the module's doc); then nginx runs
    again.  want: the bytes of [start, start + length) of rel."""
    out = os.path.join(tmp, "%s.out" % label.replace(" ", "_"))
    guard = GUARD_FACTOR * (timeout + 1)
    c = Child(mode, os.path.join(g.mnt, rel), start, length, warm, out)
    stopped = False
    try:
        if not h.check(c.line(LIVE) == "ready", "%s: the reader's warm-up did not end within %.0f s"
                       % (label, LIVE)):
            return
        s0 = harness.read_stats(g.mnt)
        mark = log_size(logf)
        stop_server(ng, signal.SIGSTOP)
        stopped = True
        c.go()
        # a hang guard: every read() of the child is at most guard long, and
        # it reads cached blocks quickly before the one that stalls
        line = c.line(guard * 4 + 10)
        s1 = harness.read_stats(g.mnt)
        lines = log_since(logf, mark)
        stop_server(ng, signal.SIGCONT)
        stopped = False
        if not h.check(line, "%s: the stalled read did not end within %.0f s (a hang; the bound is "
                       "about %d s)" % (label, guard * 4 + 10, timeout + 1)):
            return
        rep = json.loads(line)
        print("%s: read() failed with %s after %.2f s (the longest read() call), %d reads before; "
              "requests %d, retries %d, fill errors %d during the stall"
              % (label, rep["err"] and os.strerror(rep["err"]), rep["max_read"], rep["reads"],
                 s1["remote_requests"] - s0["remote_requests"],
                 s1["remote_retries"] - s0["remote_retries"],
                 s1["remote_cache_fill_errors"] - s0["remote_cache_fill_errors"]), flush=True)
        h.check(rep["err"] == 5, "%s: want EIO from the stalled read, got %r" % (label, rep))
        h.check(rep["max_read"] < guard, "%s: a read() call lasted %.1f s; the bound is timeout + "
                "about 1 s = %d s, the hang guard %d s" % (label, rep["max_read"], timeout + 1, guard))
        h.check(s1["remote_retries"] == s0["remote_retries"], "%s: %d retries during the stall "
                "(a stalled request is not retried past the timeout)"
                % (label, s1["remote_retries"] - s0["remote_retries"]))
        check_log(h, label, lines, url_shown, span, "timed out")
        got = open(out, "rb").read()
        h.check(got == want[:len(got)], "%s: the bytes read before the stall are wrong" % label)
    finally:
        if stopped:
            stop_server(ng, signal.SIGCONT)
        c.kill()


def read_whole(path, start, length):
    fd = os.open(path, os.O_RDONLY)
    try:
        out = bytearray()
        while len(out) < length:
            b = os.pread(fd, min(MIB, length - len(out)), start + len(out))
            if not b:
                break
            out += b
        return bytes(out)
    finally:
        os.close(fd)


def after_stall(h, g, label, spare, rel, start, want):
    """nginx runs again: a tensor never read before, then the stalled
    file's range again, the right bytes each."""
    sp_rel = "tensors/%s/raw" % spare[0]
    got = read_whole(os.path.join(g.mnt, sp_rel), 0, len(spare[1]))
    h.check(got == spare[1], "%s: after the stall, %s: wrong bytes (%d, want %d)"
            % (label, sp_rel, len(got), len(spare[1])))
    got = read_whole(os.path.join(g.mnt, rel), start, len(want))
    h.check(got == want, "%s: after the stall, %s read again: wrong bytes (%d, want %d)"
            % (label, rel, len(got), len(want)))


def dead_server(h, ng, name, tmp, label, rel, start, length, span):
    """A sequential read whose third request the proxy holds; the proxy is
    stopped meanwhile: EIO, and a log line for it."""
    logf = os.path.join(tmp, "dead-%s.log" % label.replace(" ", "_").replace(".", "_"))
    out = os.path.join(tmp, "dead.out")
    px = FaultProxy(ng.base)
    px.start()
    try:
        url = px.url(name) + "?" + SECRET
        opts = ["-o", "timeout=%d" % TIMEOUT, "-o", "remote_block=64K", "-o", "log_file=" + logf]
        with harness.mounted(url, opts) as g:
            park = Rule("park", after=8, times=1, path=re.escape(name), method="GET")
            px.add(park)
            c = Child("seq", os.path.join(g.mnt, rel), start, length, 0, out)
            try:
                h.check(c.line(LIVE) == "ready", "%s: the reader did not start" % label)
                c.go()
                if not h.check(px.wait_parked(park, LIVE), "%s: no request of the read reached "
                               "the proxy within %.0f s" % (label, LIVE)):
                    return
                px.stop()           # the server dies: listener closed, connections cut
                line = c.line(GUARD_FACTOR * (TIMEOUT + 1) * 4 + 10)
                if not h.check(line, "%s: the read did not end after the server died" % label):
                    return
                rep = json.loads(line)
                h.check(rep["err"] == 5, "%s: want EIO once the server died, got %r" % (label, rep))
                lines = log_since(logf, 0)
                print("%s: EIO after %d reads; log: %r" % (label, rep["reads"], lines[-1:]), flush=True)
                check_log(h, label, lines, px.url(name), span)
            finally:
                c.kill()
    finally:
        px.stop()


def main():
    h = harness.start("remote-stall")
    missing = remote.have_nginx()
    if missing:
        harness.skip_or_fail(missing)
    tmp = tempfile.mkdtemp(prefix="gguffs-stall-")
    try:
        root = os.path.join(tmp, "root")
        os.mkdir(root)
        name = "stall.gguf"
        tensors = make_model(os.path.join(root, name))
        with Nginx(root) as ng:
            url = ng.url(name) + "?" + SECRET
            shown = ng.url(name)
            logf = os.path.join(tmp, "gguffs.log")
            opts = ["-o", "timeout=%d" % TIMEOUT, "-o", "remote_block=64K", "-o", "threads=2",
                    "-o", "log_file=" + logf]
            # the reference bytes of the f32 view: a local mount of the file
            with harness.mounted(os.path.join(root, name), ["-o", "ro"]) as loc:
                f32 = read_whole(os.path.join(loc.mnt, "tensors/q8/f32"), 0, 16 * MIB)
            spares = iter(("spare%d" % i, tensors["spare%d" % i][1]) for i in range(6))
            with harness.mounted(url, opts) as g:
                off, raw = tensors["seq"]
                with h.case("sequential raw"):
                    stalled_read(h, ng, g, "sequential raw", "seq", "tensors/seq/raw", 0, len(raw),
                                 MIB, raw, TIMEOUT, tmp, logf, shown, (off, off + len(raw)))
                    after_stall(h, g, "sequential raw", next(spares), "tensors/seq/raw", 0, raw)
                off, raw = tensors["rand"]
                with h.case("random raw"):
                    stalled_read(h, ng, g, "random raw", "rand", "tensors/rand/raw", 0, len(raw), 0,
                                 raw, TIMEOUT, tmp, logf, shown, (off, off + len(raw)))
                    after_stall(h, g, "random raw", next(spares), "tensors/rand/raw", 0, raw)
                off, raw = tensors["q8"]
                with h.case("sequential f32, workers prefetching"):
                    stalled_read(h, ng, g, "sequential f32", "seq", "tensors/q8/f32", 0, len(f32),
                                 MIB, f32, TIMEOUT, tmp, logf, shown, (off, off + len(raw)))
                    after_stall(h, g, "sequential f32", next(spares), "tensors/q8/f32", 0, f32)
                off, raw = tensors["mg"]
                with h.case("sequential model.gguf"):
                    stalled_read(h, ng, g, "sequential model.gguf", "seq", "model.gguf", off, len(raw),
                                 MIB, raw, TIMEOUT, tmp, logf, shown, (off, off + len(raw)))
                    after_stall(h, g, "sequential model.gguf", next(spares), "model.gguf", off, raw)
            if harness.QUICK:
                print("default timeout: skipped (GGUFFS_TEST_QUICK)", flush=True)
            else:
                dlog = os.path.join(tmp, "default.log")
                with harness.mounted(url, ["-o", "remote_block=64K", "-o", "log_file=" + dlog]) as g:
                    off, raw = tensors["dflt"]
                    with h.case("sequential raw, default timeout"):
                        stalled_read(h, ng, g, "default timeout", "seq", "tensors/dflt/raw", 0,
                                     len(raw), MIB, raw, 30, tmp, dlog, shown, (off, off + len(raw)))
                        after_stall(h, g, "default timeout", next(spares), "tensors/dflt/raw", 0, raw)
            off, raw = tensors["dead"]
            with h.case("server dies: raw"):
                dead_server(h, ng, name, tmp, "server dies: raw", "tensors/dead/raw", 0, len(raw),
                            (off, off + len(raw)))
            off, raw = tensors["deadmg"]
            with h.case("server dies: model.gguf"):
                dead_server(h, ng, name, tmp, "server dies: model.gguf", "model.gguf", off, len(raw),
                            (off, off + len(raw)))
        return h.finish()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

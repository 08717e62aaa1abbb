#!/usr/bin/python3
# The remote/ library through its test CLI (tests/tools/remote_get) against nginx and the fault proxy: right bytes for ranges, HTTPS with a test CA, the token only for the host it is meant for, retries, Retry-After, resets, short bodies, servers that ignore Range or lie, ETag changes, expired redirects, timeouts.
"""
remote_get [--token-file F] [--cacert F] [--timeout S] URL OFF LEN writes
the LEN bytes at OFF to stdout, and to stderr a line
`stats: requests=N bytes=N retries=N redirects=N` and the identity; on an
error it exits 1 with one line (naming the URL, credentials removed).
Found as GGUFFS_REMOTE_GET (set by tests/integration/meson.build), else in
the build directory.

Each run is bounded by a generous guard (GUARD seconds): a run that has not
ended then is a hang, a failure; no check is about how long anything took.
Retry-After is checked by counting requests, not by timing them.  Memory is
the CLI's peak RSS from wait4()'s rusage, compared with the largest of the
plain runs before.
"""
import email.utils
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
from harness import Harness  # noqa: E402
from remote import FaultProxy, Nginx, Rule  # noqa: E402

GUARD = 240.0                       # hang guard per run (not a time bound)
PREFIX = 2 << 20                    # what remote_open fetches first
SIZE = 6 << 20
TOKEN = "hf_gguffsTestToken_9c1e77d2b4"
STATS = re.compile(r"^stats: requests=(\d+) bytes=(\d+) retries=(\d+) redirects=(\d+)", re.M)
# the CLI's own peak RSS may grow by this much over the plain runs' while a
# server tries to send it a 200 MB body
RSS_SLACK_KIB = 32 << 10
# max_retries is 5 by default: the requests one read may cost at most
# (open + a redirect or two + 6 attempts + re-resolves), with slack
MAX_REQS_FAILING = 16


def tool():
    t = os.environ.get("GGUFFS_REMOTE_GET")
    if not t:
        for p in ("build/tests/tools/remote_get", "build/tests/integration/remote_get",
                  "build/remote/remote_get"):
            c = os.path.join(harness.SRC, p)
            if os.access(c, os.X_OK):
                t = c
                break
    if not t or not os.access(t, os.X_OK):
        harness.skip_or_fail("tests/tools/remote_get not found (GGUFFS_REMOTE_GET=%r): the remote/ "
                             "library is not built" % os.environ.get("GGUFFS_REMOTE_GET"))
    return t


class Run:
    """One remote_get run: rc (None: still running at the guard, killed),
    out, err (text), maxrss (KiB), stats (dict or None)."""

    def __init__(self, rc, out, err, maxrss):
        self.rc, self.out, self.err, self.maxrss = rc, out, err, maxrss
        m = STATS.search(err)
        self.stats = None if m is None else dict(zip(("requests", "bytes", "retries", "redirects"),
                                                     (int(x) for x in m.groups())))

    def lines(self):
        """stderr without the stats and identity lines."""
        return [x for x in self.err.splitlines()
                if x.strip() and not x.startswith("stats:") and not x.lower().startswith("identity")]

    def __repr__(self):
        return "rc %r, %d bytes out, stderr %r" % (self.rc, len(self.out), self.err[-600:])


def run_get(url, off, ln, token=None, cacert=None, timeout=None, guard=GUARD):
    args = [tool()]
    if token:
        args += ["--token-file", token]
    if cacert:
        args += ["--cacert", cacert]
    if timeout is not None:
        args += ["--timeout", str(timeout)]
    args += [url, str(off), str(ln)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        fd = harness.pidfd(proc.pid)
        try:
            p = select.poll()
            p.register(fd, select.POLLIN)
            ended = bool(p.poll(int(guard * 1000)))
        finally:
            os.close(fd)
        if not ended:
            os.kill(proc.pid, signal.SIGKILL)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Run(proc.returncode if ended else None, out.read(), err.read().decode(errors="replace"),
                   ru.ru_maxrss)


def redacted(url):
    """What a message may show of url: no userinfo, nothing after '?'."""
    u = re.sub(r"^([a-z]+://)[^/@]*@", r"\1", url)
    return u.split("?", 1)[0]


class T:
    def __init__(self, h, data, small):
        self.h = h
        self.data = data
        self.small = small
        self.max_plain_rss = 0
        self.secrets = [TOKEN, Nginx.SIGNATURE]

    def check_no_secrets(self, r, label):
        for s in self.secrets:
            self.h.check(s.encode() not in r.out and s not in r.err,
                         "%s: a secret (%s...) is on stdout or stderr: %r" % (label, s[:6], r.err[-400:]))

    def ok(self, r, off, ln, label, data=None):
        """rc 0, exactly the bytes, a stats line."""
        data = self.data if data is None else data
        want = data[off:off + ln]
        h = self.h
        if r.rc is None:
            return h.fail("%s: still running after %.0f s (a hang): %r" % (label, GUARD, r))
        good = h.check(r.rc == 0 and r.out == want, "%s: want rc 0 and %d right bytes, got %r%s"
                       % (label, len(want), r, "" if r.out == want else
                          " (%s)" % ("a prefix" if want.startswith(r.out) else "WRONG BYTES")))
        h.check(r.stats is not None, "%s: no stats line on stderr: %r" % (label, r.err[-400:]))
        self.check_no_secrets(r, label)
        if good:
            self.max_plain_rss = max(self.max_plain_rss, r.maxrss)
        return good

    def error(self, r, label, url=None, words=None, off=0):
        """rc 1, one error line (naming url, credentials removed; matching
        the regex words), never a wrong byte on stdout."""
        h = self.h
        if r.rc is None:
            return h.fail("%s: still running after %.0f s (a hang): %r" % (label, GUARD, r))
        want = self.data[off:]
        h.check(want.startswith(r.out), "%s: WRONG BYTES on stdout (%d bytes)" % (label, len(r.out)))
        lines = r.lines()
        ok = h.check(r.rc == 1 and len(lines) == 1, "%s: want exit 1 and one error line, got %r" % (label, r))
        if ok and url is not None:
            h.check(redacted(url) in lines[0], "%s: the error line does not name %s: %r"
                    % (label, redacted(url), lines[0]))
        if ok and words is not None:
            h.check(re.search(words, lines[0], re.I) is not None, "%s: the error line does not say /%s/: %r"
                    % (label, words, lines[0]))
        self.check_no_secrets(r, label)
        return ok


def main():
    missing = remote.have_nginx()
    if missing:
        harness.skip_or_fail(missing)
    tool()
    h = Harness("remote-http")
    tmp = tempfile.mkdtemp(prefix="gguffs-rhttp-")
    rng = np.random.default_rng(11)
    data = rng.integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    small = data[:100 << 10]
    for name, b in (("blob.bin", data), ("small.bin", small)):
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(b)
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write(TOKEN + "\n")
    t = T(h, data, small)
    try:
        with Nginx(tmp) as ng:
            with h.case("ranges over http"):
                ranges(t, ng, rng)
            with h.case("token scoping"):
                token_scoping(t, ng, token, None)
            with h.case("errors at open"):
                open_errors(t, ng, token)
            with h.case("status faults"):
                status_faults(t, ng)
            with h.case("Retry-After"):
                retry_after(t, ng)
            with h.case("resets and short bodies"):
                resets(t, ng)
            with h.case("servers that ignore Range"):
                ignore_range(t, ng)
            with h.case("lying Content-Range"):
                content_range(t, ng)
            with h.case("ETag change"):
                etag_change(t, ng)
            with h.case("expired redirects"):
                expiry(t, ng)
            with h.case("timeouts"):
                timeouts(t, ng)
        with Nginx(tmp, https=True) as ng:
            with h.case("https"):
                https(t, ng, tmp, rng)
            with h.case("token scoping over https"):
                token_scoping(t, ng, token, ng.ca_file)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


def ranges(t, ng, rng):
    h = t.h
    url = ng.url("blob.bin")
    cases = [(0, 1), (0, 4096), (PREFIX - 10, 20), (PREFIX, 1000), (SIZE - 1, 1), (SIZE - 4096, 4096),
             (12345, 3 << 20), (PREFIX + 1, 1 << 20)]
    cases += [(int(a), int(n)) for a, n in zip(rng.integers(0, SIZE - 1, 14), rng.integers(1, 1 << 20, 14))]
    for off, ln in cases:
        ln = min(ln, SIZE - off)
        mark = ng.mark()
        r = run_get(url, off, ln)
        if not t.ok(r, off, ln, "http %d+%d" % (off, ln)):
            continue
        reqs = ng.requests_since(mark)
        h.check(r.stats["requests"] == len(reqs), "http %d+%d: stats say %d requests, nginx logged %d: %r"
                % (off, ln, r.stats["requests"], len(reqs), reqs))
        h.check(r.stats["bytes"] >= ln, "http %d+%d: stats bytes %d < %d" % (off, ln, r.stats["bytes"], ln))
        h.check(r.stats["retries"] == 0 and r.stats["redirects"] == 0, "http %d+%d: %r" % (off, ln, r.stats))
        h.check(all(x["auth"] == "no" for x in reqs), "http: Authorization sent without a token")
    r = run_get(url, 0, 10)
    h.check("etag:" in r.err, "the identity is not the ETag (nginx sends a strong one): %r" % r.err[-300:])
    # a read that crosses the end: pread's answer (what is there) is our reading
    r = run_get(url, SIZE - 100, 1000)
    h.check(r.rc == 0 and r.out == t.data[SIZE - 100:],
            "a read across the end of the file gives %r, not the 100 bytes up to the end" % r)
    # a file smaller than the prefix
    r = run_get(ng.url("small.bin"), 1000, 5000)
    t.ok(r, 1000, 5000, "small file", t.small)


def https(t, ng, tmp, rng):
    h = t.h
    url = ng.url("blob.bin")
    for off, ln in ((0, 100), (PREFIX + 7, 1 << 20), (int(rng.integers(0, SIZE - 4096)), 4096)):
        mark = ng.mark()
        r = run_get(url, off, ln, cacert=ng.ca_file)
        if t.ok(r, off, ln, "https %d+%d" % (off, ln)):
            protos = {x["proto"] for x in ng.requests_since(mark)}
            h.check(protos == {"HTTP/2.0"}, "https: nginx offers HTTP/2, the client spoke %r" % protos)
    r = run_get(url, 0, 100)
    t.error(r, "https without --cacert", url, r"tls|ssl|certif")
    other, _ = remote.make_ca(tmp, "another-CA")
    r = run_get(url, 0, 100, cacert=other)
    t.error(r, "https with another CA", url, r"tls|ssl|certif")
    r = run_get(url, 0, 100, cacert=os.path.join(tmp, "no-such-ca.pem"))
    t.error(r, "https with a missing CA file")
    # the CA does not make plain http fail, nor the token go out
    r = run_get(ng.url("small.bin"), 0, 10, cacert=ng.ca_file)
    t.ok(r, 0, 10, "https small file", t.small)


def token_scoping(t, ng, token, ca):
    """The token goes to the host it is meant for (the hub: auth=yes on
    ng.port) and not to the redirect target (another port: auth=no), and is
    printed nowhere."""
    h = t.h
    lab = "token %s" % ng.scheme
    for off, ln in ((0, 1000), (PREFIX + 5, 1 << 20)):
        mark = ng.mark()
        r = run_get(ng.hf_url("blob.bin"), off, ln, token=token, cacert=ca)
        if not t.ok(r, off, ln, "%s: resolve %d+%d" % (lab, off, ln)):
            continue
        reqs = ng.requests_since(mark)
        hub = [x for x in reqs if x["port"] == ng.port]
        cdn = [x for x in reqs if x["port"] == ng.cdn_port]
        h.check(hub and all(x["auth"] == "yes" for x in hub),
                "%s: the resolve request did not carry the token: %r" % (lab, hub))
        h.check(cdn and all(x["auth"] == "no" for x in cdn),
                "%s: the token went to the redirect target (another host:port): %r" % (lab, cdn))
        h.check(all(x["status"] == 302 for x in hub), "%s: data came from the hub: %r" % (lab, hub))
        h.check(r.stats["redirects"] >= 1, "%s: stats count no redirect: %r" % (lab, r.stats))
    # no redirect: the token goes with every request to its host
    mark = ng.mark()
    r = run_get(ng.url("blob.bin"), PREFIX * 2, 100, token=token, cacert=ca)
    if t.ok(r, PREFIX * 2, 100, "%s: direct" % lab):
        reqs = ng.requests_since(mark)
        h.check(reqs and all(x["auth"] == "yes" for x in reqs), "%s: direct: %r" % (lab, reqs))
    # an error after a redirect: neither the token nor the signature in it
    r = run_get(ng.hf_url("missing.bin"), 0, 10, token=token, cacert=ca)
    t.error(r, "%s: missing file behind a redirect" % lab, words=r"404|not found")


def open_errors(t, ng, token):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()                           # nothing listens there now
    url = "http://127.0.0.1:%d/files/blob.bin" % port
    t.error(run_get(url, 0, 10), "connection refused", url)
    url = ng.url("missing.bin")
    t.error(run_get(url, 0, 10, token=token), "404", url, r"404|not found")
    url = "http://nonexistent.invalid/model.gguf"
    t.error(run_get(url, 0, 10, timeout=5), "DNS failure", url)
    url = "http://gguffs-user:pw-secret-41d9@127.0.0.1:%d/files/missing.bin" % ng.port
    r = run_get(url, 0, 10)
    t.error(r, "userinfo in the URL", url)
    t.h.check("pw-secret-41d9" not in r.err, "the password of the URL is on stderr: %r" % r.err)
    with FaultProxy(ng.base, [Rule("redirect", to=None)]) as px:
        loop = px.url("blob.bin")
        px.plan[0].params["to"] = loop
        r = run_get(loop, 0, 10)
        t.error(r, "redirect loop", loop)
        t.h.check(px.n <= 12 + 1, "redirect loop: %d requests (max 10 redirects)" % px.n)


def status_faults(t, ng):
    h = t.h
    off, ln = 3 << 20, 1 << 20
    for code in (500, 502, 503):
        with FaultProxy(ng.base, [Rule("status", code=code, after=1, times=2)]) as px:
            r = run_get(px.url("blob.bin"), off, ln)
            lab = "%d twice" % code
            if t.ok(r, off, ln, lab):
                h.check(len(px.faults()) == 2 and r.stats["retries"] >= 2,
                        "%s: %d faults served, stats %r" % (lab, len(px.faults()), r.stats))
                h.check(r.stats["requests"] == px.n, "%s: stats say %d requests, the proxy saw %d"
                        % (lab, r.stats["requests"], px.n))
    with FaultProxy(ng.base, [Rule("status", code=500, after=1)]) as px:
        url = px.url("blob.bin")
        t.error(run_get(url, off, ln), "500 forever", url, r"500")
        h.check(px.n <= MAX_REQS_FAILING, "500 forever: %d requests" % px.n)
    with FaultProxy(ng.base, [Rule("status", code=502, times=1)]) as px:
        r = run_get(px.url("blob.bin"), 0, 100)
        if h.check(r.rc == 0, "a 502 at open is not retried: %r" % r):
            t.ok(r, 0, 100, "502 at open")
            h.check(r.stats["retries"] >= 1, "502 at open: no retry counted: %r" % r.stats)


def retry_after(t, ng):
    h = t.h
    off, ln = 4 << 20, 100000
    for code in (429, 503):
        with FaultProxy(ng.base, [Rule("status", code=code, retry_after=1, after=1, times=2)]) as px:
            r = run_get(px.url("blob.bin"), off, ln)
            lab = "%d Retry-After: 1, twice" % code
            if t.ok(r, off, ln, lab):
                # counted, not timed: the open, two refusals, one success
                h.check(px.n == 4 and r.stats["retries"] == 2,
                        "%s: %d requests (want 4), stats %r" % (lab, px.n, r.stats))
    with FaultProxy(ng.base, [Rule("status", code=503, after=1, times=1,
                                   retry_after=email.utils.formatdate(0, usegmt=True))]) as px:
        r = run_get(px.url("blob.bin"), off, ln)
        t.ok(r, off, ln, "503 Retry-After: an HTTP date in the past")
    # an absurd Retry-After is capped to the timeout: no hang, whatever the outcome
    with FaultProxy(ng.base, [Rule("status", code=429, retry_after=86400, after=1, times=1)]) as px:
        r = run_get(px.url("blob.bin"), off, ln, timeout=3)
        if r.rc == 0:
            t.ok(r, off, ln, "429 Retry-After: 86400 with --timeout 3")
        else:
            t.error(r, "429 Retry-After: 86400 with --timeout 3", off=off)
    with FaultProxy(ng.base, [Rule("status", code=429, retry_after=1, after=1)]) as px:
        url = px.url("blob.bin")
        t.error(run_get(url, off, ln), "429 forever", url)
        h.check(px.n <= MAX_REQS_FAILING, "429 forever: %d requests" % px.n)


def resets(t, ng):
    h = t.h
    off, ln = PREFIX + 100, 1 << 20
    for fault, at in (("reset", 100000), ("reset", 0), ("short", 100000), ("short", 0)):
        lab = "%s after %d bytes of the body" % (fault, at)
        with FaultProxy(ng.base, [Rule(fault, at=at, after=1, times=1)]) as px:
            r = run_get(px.url("blob.bin"), off, ln)
            if t.ok(r, off, ln, lab):
                h.check(r.stats["retries"] >= 1 and len(px.faults(fault)) == 1, "%s: stats %r" % (lab, r.stats))
                # the retry asks for the rest only
                ranges = [e["range"] for e in px.requests() if e["range"] != "bytes=0-%d" % (PREFIX - 1)]
                firsts = [int(x.split("=")[1].split("-")[0]) for x in ranges]
                # (a reset may lose bytes in flight; a short body ends cleanly)
                lo = off + at if fault == "short" else off
                h.check(len(firsts) == 2 and firsts[0] == off and lo <= firsts[1] <= off + at
                        and ranges[1].endswith("-%d" % (off + ln - 1)),
                        "%s: the retry asks for the rest: %r" % (lab, ranges))
    for fault in ("reset", "short"):
        with FaultProxy(ng.base, [Rule(fault, at=5000, after=1)]) as px:
            url = px.url("blob.bin")
            t.error(run_get(url, off, ln), "%s forever" % fault, url, off=off)
            h.check(px.n <= MAX_REQS_FAILING, "%s forever: %d requests" % (fault, px.n))
    # at open too: the prefix request is cut short once
    with FaultProxy(ng.base, [Rule("short", at=1000, times=1)]) as px:
        r = run_get(px.url("blob.bin"), 0, 4096)
        if h.check(r.rc == 0, "a short body at open is not retried: %r" % r):
            t.ok(r, 0, 4096, "short body at open")


def ignore_range(t, ng):
    """A server that answers 200 with the whole body: an error, and the
    client must not take in the body (a 200 MB one here)."""
    h = t.h
    base_rss = t.max_plain_rss
    if not base_rss:
        h.fail("no plain run to compare peak RSS with")
    for after, lab in ((0, "at open"), (1, "on a read")):
        lab = "200 with a 200 MB body %s" % lab
        with FaultProxy(ng.base, [Rule("ignore_range", size=200 << 20, after=after)]) as px:
            url = px.url("blob.bin")
            r = run_get(url, PREFIX + 10, 1000)
            t.error(r, lab, url if after == 0 else None, r"range" if after == 0 else None, off=PREFIX + 10)
            h.check(r.maxrss <= base_rss + RSS_SLACK_KIB, "%s: peak RSS %d KiB, plain runs %d KiB"
                    % (lab, r.maxrss, base_rss))
    with FaultProxy(ng.base, [Rule("ignore_range", after=1)]) as px:
        t.error(run_get(px.url("blob.bin"), PREFIX + 10, 1000), "200 with the file on a read", off=PREFIX + 10)
    # a file smaller than the prefix sent whole at open is the file
    with FaultProxy(ng.base, [Rule("ignore_range", times=1)]) as px:
        r = run_get(px.url("small.bin"), 5000, 1000)
        t.ok(r, 5000, 1000, "200 with a 100 KiB file at open", t.small)


def content_range(t, ng):
    h = t.h
    off, ln = PREFIX + 1000, 50000
    for mode in ("start", "end", "total", "missing"):
        with FaultProxy(ng.base, [Rule("content_range", mode=mode, after=1)]) as px:
            r = run_get(px.url("blob.bin"), off, ln)
            t.error(r, "Content-Range %s on a read" % mode, off=off)
            h.check(px.n <= MAX_REQS_FAILING, "Content-Range %s: %d requests" % (mode, px.n))
    for mode in ("start", "end", "missing"):
        with FaultProxy(ng.base, [Rule("content_range", mode=mode)]) as px:
            url = px.url("blob.bin")
            t.error(run_get(url, 0, 100), "Content-Range %s at open" % mode, url)


def etag_change(t, ng):
    h = t.h
    off, ln = PREFIX + 2000, 70000
    with FaultProxy(ng.base, [Rule("etag", after=1)]) as px:
        r = run_get(px.url("blob.bin"), off, ln)
        t.error(r, "ETag changed after open", words=r"chang", off=off)
        h.check(px.n <= MAX_REQS_FAILING, "ETag changed: %d requests" % px.n)


def expiry(t, ng):
    """The presigned URL a resolve gave expires (403, 410, 401): resolved
    again from the original URL, right bytes."""
    h = t.h
    off, ln = PREFIX + 3000, 1 << 20
    for code in (403, 410, 401):
        lab = "redirect, then %d" % code
        with FaultProxy(ng.base, [Rule("expire", after=1, code=code)]) as px:
            r = run_get(px.resolve_url("blob.bin"), off, ln)
            if t.ok(r, off, ln, lab):
                h.check(px.resolves >= 2 and px.faults("expire"), "%s: %d resolves, %d expired answers"
                        % (lab, px.resolves, len(px.faults("expire"))))
                h.check(all(e["path"].startswith(("/resolve/", "/cdn/")) for e in px.requests()),
                        "%s: %r" % (lab, px.requests()))
    with FaultProxy(ng.base, [Rule("expire", after=0, generations=None)]) as px:
        url = px.resolve_url("blob.bin")
        t.error(run_get(url, off, ln), "every presigned URL expired", url)
        h.check(px.n <= MAX_REQS_FAILING, "always expired: %d requests" % px.n)
    # each presigned URL serves one request: a re-resolve per read, bounded
    with FaultProxy(ng.base, [Rule("expire", after=1, generations=None)]) as px:
        url = px.resolve_url("blob.bin")
        r = run_get(url, off, ln)
        if r.rc == 0:
            t.ok(r, off, ln, "presigned URLs good for one request")
        else:
            t.error(r, "presigned URLs good for one request", url, off=off)
        h.check(px.n <= MAX_REQS_FAILING, "presigned URLs good for one request: %d requests" % px.n)


def timeouts(t, ng):
    h = t.h
    off, ln = PREFIX + 4000, 1 << 20
    for rule, lab in ((Rule("slow", at=1000, stall=600, after=1), "a body that stalls"),
                      (Rule("slow", phase="headers", stall=600, after=1), "no answer to a read"),
                      (Rule("slow", at=1000, stall=600, trickle=True, interval=2.5, after=1),
                       "a body trickling at 0.4 B/s"),
                      (Rule("slow", phase="headers", stall=600), "no answer at open")):
        with FaultProxy(ng.base, [rule]) as px:
            r = run_get(px.url("blob.bin"), off, ln, timeout=2)
            t.error(r, "%s with --timeout 2" % lab, off=off)
            h.check(px.n <= MAX_REQS_FAILING, "%s: %d requests" % (lab, px.n))


if __name__ == "__main__":
    sys.exit(main())

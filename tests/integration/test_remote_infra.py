#!/usr/bin/python3
# The remote-test servers themselves (tests/integration/remote.py), checked with Python's own HTTP client: nginx's ranges, ETags, resolve redirect, HTTPS with the test CA, access log; every fault of the proxy; the bounds.
import email.utils
import http.client
import os
import random
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
from harness import Harness  # noqa: E402
from remote import FaultProxy, Nginx, Rule  # noqa: E402

SIZE = 3 << 20


def request(url, headers=None, ca=None, method="GET", timeout=60, read=True):
    """One request on a new connection: (status, headers dict, body bytes,
    error) where error is the exception that cut the body short, if any."""
    u = urllib.parse.urlsplit(url)
    if u.scheme == "https":
        ctx = ssl.create_default_context(cafile=ca)
        c = http.client.HTTPSConnection(u.hostname, u.port, timeout=timeout, context=ctx)
    else:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request(method, u.path + ("?" + u.query if u.query else ""), headers=headers or {})
        r = c.getresponse()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        body, err = b"", None
        if read:
            chunks = []
            try:
                while True:
                    b = r.read1(1 << 16) if hasattr(r, "read1") else r.read(1 << 16)
                    if not b:
                        break
                    chunks.append(b)
            except (OSError, http.client.HTTPException) as e:
                err = e
            body = b"".join(chunks)
            # http.client returns short reads at EOF without complaint
            n = hdrs.get("content-length")
            if err is None and n is not None and len(body) != int(n):
                err = http.client.IncompleteRead(body, int(n) - len(body))
        return r.status, hdrs, body, err
    finally:
        c.close()


def main():
    missing = remote.have_nginx()
    if missing:
        harness.skip_or_fail(missing)
    h = Harness("remote-infra")
    tmp = tempfile.mkdtemp(prefix="gguffs-rinfra-")
    data = random.Random(harness.test_seed()).randbytes(SIZE)
    with open(os.path.join(tmp, "blob.bin"), "wb") as f:
        f.write(data)
    try:
        with h.case("nginx http"), Nginx(tmp) as ng:
            nginx_checks(h, ng, data, None)
            with h.case("proxy"):
                proxy_checks(h, ng, data)
        with h.case("nginx https"), Nginx(tmp, https=True) as ng:
            nginx_checks(h, ng, data, ng.ca_file)
            with h.case("https without the CA"):
                try:
                    request(ng.url("blob.bin"))
                    h.fail("https without the test CA was accepted")
                except ssl.SSLError as e:
                    h.check("CERTIFICATE_VERIFY_FAILED" in str(e), "TLS error: %s" % e)
            st, _, body, _ = request(ng.url("blob.bin"), {"Range": "bytes=0-9"}, ng.ca_file)
            reqs = ng.requests()
            h.check(reqs[-1]["proto"] == "HTTP/1.1", "http.client speaks HTTP/1.1: %r" % reqs[-1])
        with h.case("nginx bounds"):
            bounds_checks(h, tmp)
        with h.case("nginx stopped"):
            ng2 = Nginx(tmp)
            ng2.start()
            pid, port = ng2.proc.pid, ng2.port
            ng2.stop()
            h.check(not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split()[2] == "Z",
                    "nginx still running after stop()")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=10).close()
                h.fail("the port still accepts after stop()")
            except OSError:
                h.check(True, "")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


def nginx_checks(h, ng, data, ca):
    lab = ng.scheme
    # ranges, an ETag, the same ETag on both ports
    etag = None
    for a, b in ((0, 0), (0, 9), (12345, 1 << 20), (SIZE - 7, SIZE - 1), (2 << 20, SIZE + 100)):
        st, hd, body, err = request(ng.url("blob.bin"), {"Range": "bytes=%d-%d" % (a, b)}, ca)
        want = data[a:b + 1]
        h.check(st == 206 and body == want and err is None, "%s range %d-%d: %d, %d bytes" % (lab, a, b, st, len(body)))
        h.check(hd.get("content-range") == "bytes %d-%d/%d" % (a, min(b, SIZE - 1), SIZE),
                "%s Content-Range %r" % (lab, hd.get("content-range")))
        etag = etag or hd.get("etag")
        h.check(hd.get("etag") == etag and etag and not etag.startswith("W/"), "%s strong ETag %r" % (lab, hd.get("etag")))
    st, hd, body, _ = request(ng.cdn_url("blob.bin"), {"Range": "bytes=5-6"}, ca)
    h.check(st == 206 and body == data[5:7] and hd.get("etag") == etag, "%s cdn port" % lab)
    st, hd, body, _ = request(ng.url("blob.bin"), {"Range": "bytes=5-6", "If-Match": etag}, ca)
    h.check(st == 206, "%s If-Match same tag: %d" % (lab, st))
    st, hd, body, _ = request(ng.url("blob.bin"), {"Range": "bytes=5-6", "If-Match": '"other"'}, ca)
    h.check(st == 412, "%s If-Match other tag: %d" % (lab, st))
    st, hd, body, _ = request(ng.url("blob.bin"), {"Range": "bytes=5-6", "If-Range": '"other"'}, ca)
    h.check(st == 200 and len(body) == SIZE, "%s If-Range other tag: %d, %d bytes" % (lab, st, len(body)))
    st, hd, body, _ = request(ng.url("blob.bin"), {"Range": "bytes=%d-" % (SIZE + 5)}, ca)
    h.check(st == 416, "%s range past the end: %d" % (lab, st))
    st, _, _, _ = request(ng.url("missing.bin"), {}, ca)
    h.check(st == 404, "%s missing file: %d" % (lab, st))
    h.check(hd.get("last-modified") is not None or True, "")
    # the hub-like resolve: 302 to the other port, with a signature
    mark = ng.mark()
    st, hd, _, _ = request(ng.hf_url("blob.bin"), {"Authorization": "Bearer hf_secret"}, ca)
    loc = hd.get("location", "")
    h.check(st == 302 and loc.startswith(ng.cdn_url("blob.bin") + "?") and Nginx.SIGNATURE in loc,
            "%s resolve: %d %r" % (lab, st, loc))
    st, hd, body, _ = request(loc, {"Range": "bytes=100-199"}, ca)
    h.check(st == 206 and body == data[100:200], "%s the redirect target: %d" % (lab, st))
    reqs = ng.requests_since(mark)
    h.check([(r["port"], r["auth"], r["status"]) for r in reqs] == [(ng.port, "yes", 302), (ng.cdn_port, "no", 206)],
            "%s access log: %r" % (lab, reqs))
    h.check("hf_secret" not in open(ng.log_path).read(), "%s the token is in the access log" % lab)
    # other org/repo/rev work too
    st, hd, _, _ = request(ng.hf_url("blob.bin", "o2", "r2", "abc123"), {}, ca)
    h.check(st == 302, "%s resolve with a revision: %d" % (lab, st))
    # connection reuse is visible in the log
    u = urllib.parse.urlsplit(ng.url("blob.bin"))
    if ca:
        c = http.client.HTTPSConnection(u.hostname, u.port, timeout=60, context=ssl.create_default_context(cafile=ca))
    else:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    mark = ng.mark()
    for i in range(3):
        c.request("GET", u.path, headers={"Range": "bytes=%d-%d" % (i, i)})
        r = c.getresponse()
        h.check(r.read() == data[i:i + 1], "%s keep-alive read %d" % (lab, i))
    c.close()
    reqs = ng.requests_since(mark)
    h.check(len({r["conn"] for r in reqs}) == 1 and [r["conn_requests"] for r in reqs] == [1, 2, 3],
            "%s one connection for three requests: %r" % (lab, reqs))


def proxy_checks(h, ng, data):
    url = lambda px: px.url("blob.bin")  # noqa: E731
    rng = {"Range": "bytes=1000-1999999"}
    want = data[1000:2000000]

    # pass-through, HEAD
    with FaultProxy(ng.base) as px:
        st, hd, body, err = request(url(px), rng)
        h.check(st == 206 and body == want and err is None, "proxy pass-through: %d" % st)
        h.check(hd.get("etag") and hd.get("content-range") == "bytes 1000-1999999/%d" % SIZE,
                "proxy forwards ETag and Content-Range: %r" % hd)
        st, hd, body, _ = request(url(px), rng, method="HEAD", read=False)
        h.check(st == 206 and hd.get("content-length") == str(len(want)), "proxy HEAD: %d %r" % (st, hd))
        st, hd, _, _ = request(url(px), {"Range": "bytes=1-2", "Authorization": "Bearer x"})
        h.check(px.requests()[-1]["auth"] == "yes" and px.requests()[0]["auth"] == "no", "proxy logs auth")

    # status faults: the first request passes, then two faults, then pass
    for code in (500, 502, 503, 429):
        plan = [Rule("status", code=code, after=1, times=2, retry_after=1 if code in (429, 503) else None)]
        with FaultProxy(ng.base, plan) as px:
            got = [request(url(px), {"Range": "bytes=0-3"}) for _ in range(4)]
            h.check([g[0] for g in got] == [206, code, code, 206], "status %d: %r" % (code, [g[0] for g in got]))
            if code in (429, 503):
                h.check(got[1][1].get("retry-after") == "1", "Retry-After: %r" % got[1][1])
            h.check(len(px.faults("status")) == 2 and px.n == 4, "status %d counted: %r" % (code, px.log))
    with FaultProxy(ng.base, [Rule("status", code=503, retry_after=email.utils.formatdate(0, usegmt=True))]) as px:
        st, hd, _, _ = request(url(px))
        h.check(st == 503 and hd.get("retry-after", "").endswith("GMT"), "Retry-After as a date: %r" % hd)

    # reset and short bodies
    with FaultProxy(ng.base, [Rule("reset", at=70000, times=1)]) as px:
        st, hd, body, err = request(url(px), rng)
        h.check(st == 206 and body == want[:len(body)] and len(body) <= 70000 and err is not None,
                "reset: %d bytes, %r" % (len(body), err))
        h.check(isinstance(err, (ConnectionResetError, http.client.IncompleteRead)), "reset: an RST: %r" % err)
        st, hd, body, err = request(url(px), rng)
        h.check(st == 206 and body == want, "after the reset: right bytes")
    with FaultProxy(ng.base, [Rule("short", at=12345)]) as px:
        st, hd, body, err = request(url(px), rng)
        h.check(st == 206 and body == want[:12345] and isinstance(err, http.client.IncompleteRead)
                and hd.get("content-length") == str(len(want)), "short: %d bytes, %r" % (len(body), err))

    # ignore Range: the file, or a huge generated body (read 4 MiB of it and go)
    with FaultProxy(ng.base, [Rule("ignore_range")]) as px:
        st, hd, body, _ = request(url(px), rng)
        h.check(st == 200 and body == data and "content-range" not in hd, "ignore_range: %d %d" % (st, len(body)))
    with FaultProxy(ng.base, [Rule("ignore_range", size=200 << 20)]) as px:
        u = urllib.parse.urlsplit(url(px))
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        c.request("GET", u.path, headers={"Range": "bytes=0-9"})
        r = c.getresponse()
        h.check(r.status == 200 and r.getheader("Content-Length") == str(200 << 20), "huge body headers")
        got = r.read(4 << 20)
        h.check(len(got) == 4 << 20, "huge body: %d bytes" % len(got))
        c.close()
    # the proxy's thread saw the client go (stop() joins it: a hang here fails the meson timeout)

    # lying Content-Range
    for mode, want_cr in (("start", "bytes 1001-2000000/%d" % SIZE), ("end", "bytes 1000-2000000/%d" % SIZE),
                          ("total", "bytes 1000-1999999/%d" % (SIZE + 1)), ("missing", None)):
        with FaultProxy(ng.base, [Rule("content_range", mode=mode)]) as px:
            st, hd, body, _ = request(url(px), rng)
            h.check(st == 206 and hd.get("content-range") == want_cr and body == want,
                    "content_range %s: %r" % (mode, hd.get("content-range")))

    # slow: a stall after 100 bytes, a stall before the headers, a trickle
    with FaultProxy(ng.base, [Rule("slow", at=100, stall=300)]) as px:
        st, hd, body, err = request(url(px), rng, timeout=2)
        h.check(st == 206 and body == want[:100] and isinstance(err, (socket.timeout, TimeoutError)),
                "slow body: %d bytes, %r" % (len(body), err))
    with FaultProxy(ng.base, [Rule("slow", phase="headers", stall=300)]) as px:
        try:
            request(url(px), rng, timeout=2)
            h.fail("slow headers: no timeout")
        except (socket.timeout, TimeoutError):
            h.check(True, "")
    with FaultProxy(ng.base, [Rule("slow", at=10, stall=3, trickle=True, interval=0.5)]) as px:
        st, hd, body, err = request(url(px), rng)
        h.check(st == 206 and 10 < len(body) < 20 and body[:10] == want[:10] and err is not None,
                "trickle: %d bytes, %r" % (len(body), err))

    # ETag change after the first request
    with FaultProxy(ng.base, [Rule("etag", after=1)]) as px:
        st, hd, _, _ = request(url(px), {"Range": "bytes=0-3"})
        old = hd.get("etag")
        st, hd, body, _ = request(url(px), {"Range": "bytes=0-3"})
        h.check(st == 206 and hd.get("etag") == '"gguffs-changed-0001"' and hd.get("etag") != old,
                "etag replaced: %r" % hd.get("etag"))
        st, hd, _, _ = request(url(px), {"Range": "bytes=0-3", "If-Match": old})
        h.check(st == 412, "etag: If-Match old: %d" % st)
        st, hd, body, _ = request(url(px), {"Range": "bytes=0-3", "If-Range": old})
        h.check(st == 200 and len(body) == SIZE, "etag: If-Range old: %d %d" % (st, len(body)))
        st, hd, body, _ = request(url(px), {"Range": "bytes=0-3", "If-Match": '"gguffs-changed-0001"'})
        h.check(st == 206 and body == data[:4], "etag: If-Match new: %d" % st)

    # resolve + expiry: generation 0 serves one request, then 403; a new resolve works
    with FaultProxy(ng.base, [Rule("expire", after=1)]) as px:
        st, hd, _, _ = request(px.resolve_url("blob.bin"), {"Authorization": "Bearer t"})
        loc0 = hd.get("location", "")
        h.check(st == 302 and "/cdn/0/files/blob.bin?" in loc0 and Nginx.SIGNATURE in loc0, "resolve: %r" % loc0)
        st0 = [request(loc0, {"Range": "bytes=0-3"})[0] for _ in range(2)]
        st, hd, _, _ = request(px.resolve_url("blob.bin"))
        loc1 = hd.get("location", "")
        st, _, body, _ = request(loc1, {"Range": "bytes=7-9"})
        h.check(st0 == [206, 403] and "/cdn/1/" in loc1 and st == 206 and body == data[7:10],
                "expire: %r then %r %d" % (st0, loc1, st))
        h.check(px.resolves == 2 and len(px.faults("expire")) == 1, "expire counted")
        st = [request(loc1, {"Range": "bytes=0-0"})[0] for _ in range(3)]
        h.check(st == [206] * 3, "expire: a later generation lives on: %r" % st)
    with FaultProxy(ng.base, [Rule("expire", after=1, generations=None)]) as px:
        locs = [request(px.resolve_url("blob.bin"))[1].get("location") for _ in range(2)]
        st = [request(loc, {"Range": "bytes=0-0"})[0] for loc in locs for _ in range(2)]
        h.check(st == [206, 403] * 2, "expire every generation: %r" % st)
    with FaultProxy(ng.base, [Rule("redirect", to="http://127.0.0.1:1/x")]) as px:
        st, hd, _, _ = request(url(px))
        h.check(st == 302 and hd.get("location") == "http://127.0.0.1:1/x", "redirect")

    # park: held, no byte sent, until the test releases it; the next passes
    park = Rule("park", times=1)
    with FaultProxy(ng.base, [park]) as px:
        got = []
        t = threading.Thread(target=lambda: got.append(request(url(px), rng)))
        t.start()
        try:
            h.check(px.wait_parked(park, 30) and park.holding == 1 and not got,
                    "park: the request is held (holding %d, answered %r)" % (park.holding, len(got)))
            st, _, body, _ = request(url(px), {"Range": "bytes=5-6"})
            h.check(st == 206 and body == data[5:7] and park.holding == 1 and not got,
                    "park: a second request passes while the first is held: %d" % st)
        finally:
            px.release(park)
            t.join(60)
        h.check(len(got) == 1 and got[0][0] == 206 and got[0][2] == want and park.parked == 1,
                "park: after the release the held request is answered: %r" % [g[0] for g in got])
        h.check([e["fault"] for e in px.requests()] == ["park", ""], "park logged: %r" % px.requests())

    # the request bound: past max_requests connections are closed at once
    with FaultProxy(ng.base, max_requests=2) as px:
        ok = [request(url(px), {"Range": "bytes=0-0"})[0] for _ in range(2)]
        try:
            request(url(px), {"Range": "bytes=0-0"})
            h.fail("proxy answered past max_requests")
        except (OSError, http.client.HTTPException):
            h.check(ok == [206, 206] and px.overflow, "proxy overflow: %r" % ok)
    # the lifetime bound
    px = FaultProxy(ng.base, [Rule("slow", phase="headers", stall=300)], lifetime=1)
    px.start()
    try:
        try:
            request(url(px), timeout=120)
            h.fail("a stalled request was answered")
        except (OSError, http.client.HTTPException):
            h.check(px.expired, "the stall ended by the lifetime bound")
    finally:
        px.stop()


def bounds_checks(h, tmp):
    """Past max_requests logged requests the watchdog stops nginx: it exits
    (waited for; nginx lets its worker finish what it is doing, so a few
    more requests may be answered meanwhile), and then the port refuses."""
    with Nginx(tmp, max_requests=3) as ng:
        # with the start's own request, the third is one too many: nginx
        # stops after answering it
        for _ in range(3):
            h.check(request(ng.url("blob.bin"), {"Range": "bytes=0-0"})[0] == 206, "bounded nginx answers")
        try:
            rc = ng.proc.wait(remote.STOP_WAIT)
        except subprocess.TimeoutExpired:
            rc = None
        h.check(ng.overflow and rc == 0, "nginx past max_requests: overflow %r, exit %r; %s"
                % (ng.overflow, rc, ng.error_log()[-1500:]))
        try:
            request(ng.url("blob.bin"), {"Range": "bytes=0-0"})
            h.fail("nginx answered after it stopped at max_requests")
        except (OSError, http.client.HTTPException):
            h.check(True, "")


if __name__ == "__main__":
    sys.exit(main())

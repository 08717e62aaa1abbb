# scripts/bench --part s3: reads of a model in an object store (s3://, OpenStack Swift with s3api on 127.0.0.1) against awscli's get-object of the same object, and the http:// mount against curl in the same run; mount to ready in requests.
"""
Part s3: a generated model with one f16 tensor of --remote-mb
MiB (default 1024), put (one PutObject) into a one-node OpenStack Swift
with s3api on 127.0.0.1 (tests/integration/s3store.py) and served by nginx
(tests/integration/remote.py) from the same file.  Timed, best of --reps
(default 3), in turns:

  - `aws s3api get-object` of the whole object to /dev/null (Debian's
    awscli, one stream; its start-up, about a second of Python, is part of
    its time and is also timed alone, as get-object of byte 0);
  - tensors/big.weight/raw of a fresh `gguffs s3://BUCKET/big.gguf` mount
    (requests signed by libcurl), read sequentially in 1 MiB preads, with
    the default remote_block (4M) and with 16M (a quarter of the requests:
    each request costs Swift's proxy its own authentication and, without
    memcached, account and container lookups);
  - `curl -s -o /dev/null -r A-B` of the tensor's bytes from nginx;
  - the same raw read through a fresh `gguffs http://…/big.gguf` mount.

The ratios: s3 mount / get-object (target >= 0.5), http mount / curl, and
the first over the second (target >= 1: signing costs no throughput beyond
what the store itself costs), and gguffs' CPU per GB read (all its
threads, /proc/PID/stat) for each mount: what signing costs the client.  Swift's proxy is Python: the two servers'
speeds differ, which is why each mount is compared with a client of its
own server.  Mount to ready: the requests of a fresh s3:// mount before
any read (gguffs' stats and the store's access log; target <= 3).
  --quick: an 8 MiB tensor, one repetition.
"""
import os
import subprocess
import time

import common
import remote
import s3store
from common import GGUFFS, FuseMount, counters, make_big_file, proc_stat_ms, read_throughput, \
    skip
from remote_blocks import curl_gbs

NAME = "s3"
ALIASES = ()


def aws_get(st, key, length=None):
    """Seconds of aws s3api get-object of key (bytes 0-0 with length 0)."""
    args = ["s3api", "get-object", "--bucket", "bench", "--key", key]
    if length == 0:
        args += ["--range", "bytes=0-0"]
    t0 = time.perf_counter()
    st.aws(*(args + ["/dev/null"]))
    return time.perf_counter() - t0


def mount_read(url, work, length, opts=()):
    """GB/s of raw through a fresh mount of url, and its stats after the
    mount and after the read."""
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    with FuseMount([GGUFFS, "-f", "-o", "ro"] + list(opts) + [url, mnt], mnt, 1 << 20,
                   write_ra=False) as m:
        ready = counters(os.path.join(mnt, "stats"))
        c0 = proc_stat_ms(m.p.pid)
        g = read_throughput(os.path.join(mnt, "tensors", "big.weight", "raw"), 0, length)
        c1 = proc_stat_ms(m.p.pid)
        after = counters(os.path.join(mnt, "stats"))
    # gguffs' CPU (all its threads), ms per GB read
    after["cpu_ms_per_gb"] = (c1 - c0) / (length / 1e9) if c0 is not None and c1 is not None \
        else None
    return g, ready, after


def mount_ready(url, work):
    """gguffs' stats of a fresh mount of url that reads nothing."""
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    with FuseMount([GGUFFS, "-f", "-o", "ro", url, mnt], mnt, 1 << 20, write_ra=False):
        return counters(os.path.join(mnt, "stats"))


def run(work, args):
    why = s3store.have_swift() or remote.have_nginx()
    if why:
        skip(why)
    if not os.path.exists(GGUFFS):
        skip("%s missing" % GGUFFS)
    size_mb = args.remote_mb or (8 if args.quick else 1024)
    reps = args.reps or (1 if args.quick else 3)
    root = os.path.join(work, "s3")
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, "big.gguf")
    hdr = make_big_file(path, size_mb)
    length = size_mb << 20
    size = os.path.getsize(path)
    saved = dict(os.environ)
    st = s3store.SwiftS3(lifetime=7200.0)
    ng = None
    try:
        st.start()
        t0 = time.perf_counter()
        st.aws("s3api", "create-bucket", "--bucket", "bench")
        st.put("bench", "big.gguf", path)
        print("# part s3: %d MiB object put in %.1fs" % (size >> 20, time.perf_counter() - t0),
              flush=True)
        ng = remote.Nginx(root, lifetime=7200.0, access_log=False).__enter__()
        os.environ.clear()
        os.environ.update(st.env(AWS_ENDPOINT_URL=st.endpoint))
        s3url, httpurl = "s3://bench/big.gguf", ng.url("big.gguf")
        # untimed: the page cache holds the file for nginx, Swift's object
        # file for the store; each client's code paths warmed once
        curl_gbs(httpurl, hdr, hdr + length)
        aws_get(st, "big.gguf")
        mount_read(s3url, work, length)
        before = len(st.requests())
        ready = mount_ready(s3url, work)
        at_store = len(st.requests()) - before
        best = {"s3": 0.0, "s3big": 0.0, "curl": 0.0, "http": 0.0}
        t_aws, t_start = [], []
        stats = {}
        for _ in range(reps):
            t_start.append(aws_get(st, "big.gguf", 0))
            t_aws.append(aws_get(st, "big.gguf"))
            g, _, s = mount_read(s3url, work, length)
            if g > best["s3"]:
                best["s3"], stats["s3"] = g, s
            g, _, s = mount_read(s3url, work, length, ["-o", "remote_block=16M"])
            if g > best["s3big"]:
                best["s3big"], stats["s3big"] = g, s
            best["curl"] = max(best["curl"], curl_gbs(httpurl, hdr, hdr + length))
            g, _, s = mount_read(httpurl, work, length)
            if g > best["http"]:
                best["http"], stats["http"] = g, s
            print("# part s3: aws get-object %.2f s, s3 mount %.3f GB/s, curl %.3f GB/s, http "
                  "mount %.3f GB/s" % (t_aws[-1], best["s3"], best["curl"], best["http"]),
                  flush=True)
        best["aws"] = size / min(t_aws) / 1e9
        # get-object without awscli's start-up (its fastest, from the slowest whole run's
        # time less the fastest start-up: the rate the download itself had at most)
        aws_net = size / max(1e-3, min(t_aws) - min(t_start)) / 1e9
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if ng:
            ng.stop()
        st.stop()
        os.unlink(path)
    r_s3 = best["s3"] / best["aws"]
    r_http = best["http"] / best["curl"]
    print()
    print("Part s3: sequential read of a %d MiB tensor (1 MiB preads, fresh mount each run) "
          "against a whole-object download by the store's own client, best of %d; OpenStack "
          "Swift 2.30 with s3api (one proxy process) and nginx, both on 127.0.0.1" % (size_mb, reps))
    print()
    def cpu(k):
        v = stats[k].get("cpu_ms_per_gb")
        return "%.0f" % v if v is not None else "-"
    print("| read | GB/s | ratio | target | requests | gguffs CPU ms/GB |")
    print("|---|---|---|---|---|---|")
    print("| aws s3api get-object (whole object, start-up included) | %.3f | 1.00 | | - | - |"
          % best["aws"])
    print("| gguffs s3:// mount, raw | %.3f | %.2f of get-object | >= 0.5 | %s | %s |"
          % (best["s3"], r_s3, stats["s3"].get("remote_requests", "-"), cpu("s3")))
    print("| gguffs s3:// mount, raw, -o remote_block=16M | %.3f | %.2f of get-object | | %s | %s |"
          % (best["s3big"], best["s3big"] / best["aws"], stats["s3big"].get("remote_requests", "-"),
             cpu("s3big")))
    print("| curl -r A-B from nginx | %.3f | 1.00 | | - | - |" % best["curl"])
    print("| gguffs http:// mount, raw | %.3f | %.2f of curl | | %s | %s |"
          % (best["http"], r_http, stats["http"].get("remote_requests", "-"), cpu("http")))
    print("| (s3 / get-object) / (http / curl) | | %.2f | >= 1 | | |" % (r_s3 / r_http))
    print()
    print("awscli's start-up (get-object of byte 0): best %.2f s; get-object without it: at most "
          "%.3f GB/s, the s3 mount %.2f of that" % (min(t_start), aws_net, best["s3"] / aws_net))
    print("mount to ready (s3://, %d MiB model, header %d bytes): %s requests in gguffs' stats, "
          "%d at the store (target <= 3)" % (size_mb, hdr, ready.get("remote_requests", "-"),
                                            at_store))

# scripts/bench --part remote: reads of a remote model through the block cache against curl of the same bytes, and against the null FUSE server; the disk cache; peak RSS.
"""
Part remote (the block cache of remote bytes; root: nginx, and
tc netem on a veth pair into a network namespace made for the run): a
generated model with one f16 tensor of --remote-mb MiB (default 1024),
served by nginx (1 worker, sendfile) and read sequentially in
1 MiB preads from a fresh mount (a cold block cache) of its URL:
tensors/big.weight/raw, and the same bytes of model.gguf, for each block
size (--blocks, -o remote_block); against `curl -s -o /dev/null -r A-B URL`
of the same bytes from the same server (one stream).  At each RTT of
--rtt (ms): 0 is nginx on 127.0.0.1; any other is nginx in a network
namespace reached through a veth pair whose two ends each delay by RTT/2
(tc qdisc ... netem delay), addresses of a 10.213.X.Y/30 that exist only on
this host; a kernel without netem gets scripts/delay-proxy instead (a TCP
proxy on 127.0.0.1 that delays each chunk by RTT/2 each way and moves at
most --window bytes, default 4 MiB, per round trip and connection, as TCP
with that receive window does).  --base-bin GGUFFS adds the same raw read with another build
(e.g. main's, before the block cache).  Peak RSS: VmHWM of gguffs after
streaming raw of a --rss-mb MiB tensor (default 4096) with the
default remote_cache (256M).  The disk cache: a mount with -o cache_dir
reads the tensor once (filling it), then later mounts read it again (from
the disk cache: no request) against a mount of the same file on the local
disk, both page-cached and after dropping the page cache.  Best of --reps
(default 3).
  --quick: an 8 MiB tensor, 16 MiB for the peak RSS, one repetition.
"""
import os
import subprocess
import time

import common
import remote
from common import GGUFFS, NULLFS, DelayProxy, FuseMount, counters, drop_caches, fmt_ratio, \
    make_big_file, need, nginx_cpu_ms, proc_stat_ms, proc_status, read_throughput, self_cpu_ms, \
    sh, skip

NAME = "remote"
ALIASES = ()

# Named and addressed by our pid, so that two runs at once (the meson test
# bench-quick of two checkouts) do not take each other's: one /30 of
# 10.213.0.0/16 each.
_K = os.getpid() % 16384
NETNS = "gguffs-bench-rtt-%d" % os.getpid()
VETH = ("ggb%da" % _K, "ggb%db" % _K)
VETH_ADDR = tuple("10.213.%d.%d" % ((_K * 4 + i) >> 8, (_K * 4 + i) & 255) for i in (1, 2))


def start_nginx(root, addr="127.0.0.1", netns=None):
    """remote.Nginx serving root under /files/ on addr (inside netns if
    given), no access log (nothing logged while reads are timed)."""
    ng = remote.Nginx(root, addr=addr, netns=netns, lifetime=7200.0, access_log=False)
    return ng.__enter__()


def netns_up(rtt_ms):
    """A namespace reached through a veth pair, each end delaying rtt/2."""
    netns_down()
    half = "%gms" % (rtt_ms / 2.0)
    cmds = [["ip", "netns", "add", NETNS],
            ["ip", "link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1]],
            ["ip", "link", "set", VETH[1], "netns", NETNS],
            ["ip", "addr", "add", VETH_ADDR[0] + "/30", "dev", VETH[0]],
            ["ip", "link", "set", VETH[0], "up"],
            ["ip", "netns", "exec", NETNS, "ip", "addr", "add", VETH_ADDR[1] + "/30", "dev", VETH[1]],
            ["ip", "netns", "exec", NETNS, "ip", "link", "set", VETH[1], "up"],
            ["ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up"],
            ["tc", "qdisc", "add", "dev", VETH[0], "root", "netem", "delay", half, "limit", "100000"],
            ["ip", "netns", "exec", NETNS, "tc", "qdisc", "add", "dev", VETH[1], "root", "netem",
             "delay", half, "limit", "100000"]]
    for c in cmds:
        sh(*c, capture_output=True)


def netns_down():
    subprocess.run(["ip", "link", "del", VETH[0]], stderr=subprocess.DEVNULL)
    subprocess.run(["ip", "netns", "del", NETNS], stderr=subprocess.DEVNULL)


def ping_rtt():
    r = subprocess.run(["ping", "-c", "3", "-i", "0.2", VETH_ADDR[1]], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if "min/avg/max" in line:
            return float(line.split("=")[1].split("/")[1])
    return None


def curl_gbs(url, a, b):
    t0 = time.perf_counter()
    sh("curl", "-s", "-o", "/dev/null", "-r", "%d-%d" % (a, b - 1), url)
    return (b - a) / (time.perf_counter() - t0) / 1e9


def remote_read(gg, url, rel, opts, work, hdr=None, length=None, direct=False):
    """GB/s of a sequential read of tensors/big.weight/raw (or, with hdr,
    of model.gguf at hdr) through a fresh mount; and gguffs' VmHWM (kB) and
    stats.  gg None: the null FUSE server instead (part fuse's ceiling), a
    file of the same length read the same way, nothing fetched."""
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    if gg is None:
        # the readahead gguffs sets by default (4M), written to the bdi
        argv = [NULLFS, "-f", "-o", "readahead=%d" % (4 << 20), mnt, "x:%d:%d" % (length, length)]
        fm = FuseMount(argv, mnt, 4 << 20)
    else:
        fm = FuseMount([gg, "-f"] + opts + [url, mnt], mnt, 1 << 20, write_ra=False)
    with fm as m:
        c0, r0 = proc_stat_ms(m.p.pid), self_cpu_ms()
        if gg is None:
            g = read_throughput(os.path.join(mnt, "tensors", "x", "raw"), 0, length, direct)
        elif hdr is None:
            g = read_throughput(os.path.join(mnt, "tensors", "big.weight", "raw"), 0, length, direct)
        else:
            g = read_throughput(os.path.join(mnt, "model.gguf"), hdr, length, direct)
        c1, r1 = proc_stat_ms(m.p.pid), self_cpu_ms()
        hwm = proc_status(m.p.pid, "VmHWM") if gg else None
        st = counters(os.path.join(mnt, "stats")) if gg else {}
    # CPU of the read: gguffs (all its threads), the reader (this process)
    st["cpu"] = (c1 - c0 if c0 is not None and c1 is not None else None, r1 - r0)
    return g, hwm, st


NULL_LABEL = "null FUSE server, raw"


def run(work, args):
    if os.geteuid() != 0:
        skip("needs root (tc netem on a veth pair into a network namespace, drop_caches)")
    missing = remote.have_nginx()
    if missing:
        skip(missing)
    need(NULLFS)
    size_mb = args.remote_mb or (8 if args.quick else 1024)
    rss_mb = args.rss_mb or (16 if args.quick else 4096)
    reps = args.reps or (1 if args.quick else 3)
    blocks = [b.strip() for b in args.blocks.split(",") if b.strip()]
    rtts = [float(x) for x in args.rtt.split(",")]
    root = os.path.join(work, "remote")
    os.makedirs(root, exist_ok=True)
    t0 = time.perf_counter()
    path = os.path.join(root, "big.gguf")
    hdr = make_big_file(path, size_mb)
    length = size_mb << 20
    print("# part remote: %d MiB tensor written in %.1fs" % (size_mb, time.perf_counter() - t0), flush=True)
    rows = []
    cpu_rows = []    # (rtt, label, nginx ms, client ms, reader ms or None, bytes)
    netem = True
    try:
        for rtt in rtts:
            px = None
            if rtt and netem:
                try:
                    netns_up(rtt)
                except subprocess.CalledProcessError:
                    netns_down()
                    netem = False
                    common.left_out(NAME, "no tc netem here: latency from scripts/delay-proxy")
            if rtt and netem:
                ng = start_nginx(root, VETH_ADDR[1], NETNS)
                measured = ping_rtt()
                where = "netns+veth, netem %g ms each way (ping %.1f ms)" % (rtt / 2, measured or -1)
            elif rtt:
                ng = start_nginx(root, "127.0.0.1")
                px = DelayProxy(ng.port, rtt, args.window)
                where = ("127.0.0.1 via scripts/delay-proxy (%g ms each way, window %d MiB per "
                         "connection)" % (rtt / 2, args.window >> 20))
            else:
                ng = start_nginx(root, "127.0.0.1")
                where = "127.0.0.1"
            try:
                url = ng.url("big.gguf")
                if px:
                    url = url.replace(":%d/" % ng.port, ":%d/" % px.port)
                # the page cache holds the file for every run alike
                curl_gbs(url, hdr, hdr + length)
                import resource
                runs = []
                if args.base_bin:
                    runs.append(("before (--base-bin) raw", args.base_bin, [], None, False))
                for b in blocks:
                    runs.append(("raw, remote_block=%s" % b, GGUFFS, ["-o", "remote_block=" + b],
                                 None, False))
                    runs.append(("model.gguf, remote_block=%s" % b, GGUFFS,
                                 ["-o", "remote_block=" + b], hdr, False))
                if rtt == 0:
                    # What FUSE itself carries for this read: the null
                    # server (no network, no work), through the page cache
                    # and with O_DIRECT; and gguffs read with O_DIRECT.
                    runs.append((NULL_LABEL, None, [], None, False))
                    runs.append((NULL_LABEL + ", O_DIRECT", None, [], None, True))
                    runs.append(("raw, O_DIRECT", GGUFFS, [], None, True))
                    runs.append(("model.gguf, O_DIRECT", GGUFFS, [], hdr, True))
                # One untimed read through a mount first, and the repetitions
                # taken in turns (curl, then each row): on a VM that returns
                # freed memory to its host, new memory costs a fault there,
                # and whichever row ran first paid for it (a row measured
                # first read 0.49x of curl, the same row measured second
                # 0.83x).
                remote_read(GGUFFS, url, None, [], work, None, length)
                curl, cc = 0.0, [0.0, 0.0, 0]
                res = [[0.0, 0, {}, [0.0, 0.0, 0.0, 0]] for _ in runs]
                for _ in range(reps):
                    n0, k0 = nginx_cpu_ms(ng), resource.getrusage(resource.RUSAGE_CHILDREN)
                    curl = max(curl, curl_gbs(url, hdr, hdr + length))
                    n1, k1 = nginx_cpu_ms(ng), resource.getrusage(resource.RUSAGE_CHILDREN)
                    cc[0] += n1 - n0
                    cc[1] += (k1.ru_utime + k1.ru_stime - k0.ru_utime - k0.ru_stime) * 1000.0
                    cc[2] += length
                    for (label, gg, opts, at, direct), r in zip(runs, res):
                        n0 = nginx_cpu_ms(ng)
                        g, h, s = remote_read(gg, url, None, opts, work, at, length, direct)
                        n1 = nginx_cpu_ms(ng)
                        if s["cpu"][0] is not None:
                            r[3][0] += n1 - n0
                            r[3][1] += s["cpu"][0]
                            r[3][2] += s["cpu"][1]
                            r[3][3] += length
                        if g > r[0]:
                            r[0], r[1], r[2] = g, h, s
                rows.append((rtt, where, "curl -r A-B (1 stream)", curl, curl, "", ""))
                cpu_rows.append((rtt, "curl -r A-B", cc[0], cc[1], None, cc[2]))
                for (label, gg, opts, at, direct), (best, hwm, st, c) in zip(runs, res):
                    cpu_rows.append((rtt, label, c[0], c[1], c[2], c[3]))
                    req = st.get("remote_requests")
                    rows.append((rtt, where, label, best, curl,
                                 "%s" % req if req is not None else "-",
                                 "%d MiB" % (hwm >> 10) if hwm else "-"))
                    print("# part remote: rtt %g: %s %.3f GB/s" % (rtt, label, best), flush=True)
            finally:
                if px:
                    px.close()
                ng.stop()
                if rtt and netem:
                    netns_down()
        # the disk cache: a second mount reads what the first one read from
        # -o cache_dir, against a mount of the same file on the local disk;
        # both with their files page-cached ("warm") and after dropping
        # the page cache ("cold")
        ng = start_nginx(root, "127.0.0.1")
        dcache_rows = []
        try:
            cdir = os.path.join(work, "dcache")
            opts = ["-o", "cache_dir=" + cdir]
            remote_read(GGUFFS, ng.url("big.gguf"), None, opts, work, None, length)
            for cold in (False, True):
                best_dc, st_dc, best_local = 0.0, {}, 0.0
                for _ in range(reps):
                    if cold:
                        drop_caches()
                    g, _, st = remote_read(GGUFFS, ng.url("big.gguf"), None, opts, work, None,
                                           length)
                    if g > best_dc:
                        best_dc, st_dc = g, st
                    if cold:
                        drop_caches()
                    best_local = max(best_local,
                                     remote_read(GGUFFS, path, None, [], work, None, length)[0])
                dcache_rows.append(("cold" if cold else "warm", best_dc, best_local, st_dc))
                print("# part remote: disk cache %s %.3f GB/s, local %.3f GB/s"
                      % ("cold" if cold else "warm", best_dc, best_local), flush=True)
        finally:
            ng.stop()
        # peak RSS streaming a large remote tensor (default cache)
        os.unlink(path)
        hdr = make_big_file(path, rss_mb)
        ng = start_nginx(root, "127.0.0.1")
        try:
            g, hwm, st = remote_read(GGUFFS, ng.url("big.gguf"), None, [], work, None, rss_mb << 20)
            rss = (rss_mb, g, hwm, st.get("remote_cache_capacity"))
            if args.base_bin:
                gb, hwmb, _ = remote_read(args.base_bin, ng.url("big.gguf"), None, [], work, None,
                                          rss_mb << 20)
                rss += (gb, hwmb)
        finally:
            ng.stop()
    finally:
        netns_down()
        if os.path.exists(path):
            os.unlink(path)
    print()
    print("Part remote: sequential read of %d MiB of tensor data over HTTP (nginx), 1 MiB preads, "
          "fresh mount each run, best of %d" % (size_mb, reps))
    print()
    # the null server's figures (measured at 0 ms; it fetches nothing)
    null = {lab: g for _, _, lab, g, _, _, _ in rows if lab.startswith(NULL_LABEL)}
    print("'vs null' (0 ms): the ratio to the null FUSE server reading a file of the same size "
          "the same way (through the page cache, or with O_DIRECT): what FUSE itself carries "
          "here, with no network and no work behind it.")
    print()
    print("| RTT | server | read | GB/s | vs curl | target | vs null | requests | gguffs VmHWM |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rtt, where, label, g, curl, req, hwm in rows:
        is_null = label.startswith(NULL_LABEL)
        target = "" if label.startswith("curl") or is_null or "O_DIRECT" in label else \
            (">= 0.8" if rtt == 0 else ">= 1.5")
        ref = null.get(NULL_LABEL + (", O_DIRECT" if "O_DIRECT" in label else ""))
        vs_null = "-" if is_null or label.startswith("curl") or not ref or rtt != 0 else \
            "%.2f" % (g / ref)
        print("| %g ms | %s | %s | %.3f | %.2f | %s | %s | %s | %s |"
              % (rtt, where if not is_null else "-", label, g, g / curl, target, vs_null,
                 req or "-", hwm or "-"))
    if cpu_rows:
        ncpu = os.cpu_count() or 1
        print()
        print("CPU per GB of those reads, pooled over the repetitions (clock ticks of /proc/PID/stat: "
              "nginx's master and workers; curl, or gguffs with all its threads; the reader, "
              "getrusage), ms per GB read.  nginx, the client and the reader share the machine's "
              "%d CPUs, so none of them can go faster than %d s of CPU over their sum: the 'CPU "
              "bound'; 'bound / curl's' is the ratio to curl a client with this CPU cost reaches "
              "if it uses the CPUs as well as curl does (the proxy of the RTT rows is not counted)."
              % (ncpu, ncpu))
        print()
        print("| RTT | read | nginx ms/GB | client ms/GB | reader ms/GB | CPU bound GB/s "
              "| bound / curl's |")
        print("|---|---|---|---|---|---|---|")
        curl_bound = {}
        for rtt, label, nms, cms, rms, nbytes in cpu_rows:
            if not nbytes:
                continue
            gb = nbytes / 1e9
            total = (nms + cms + (rms or 0.0)) / gb
            bound = ncpu * 1000.0 / total if total > 0 else None
            if rms is None:
                curl_bound[rtt] = bound
            cb = curl_bound.get(rtt)
            print("| %g ms | %s | %.0f | %.0f | %s | %s | %s |" % (
                rtt, label, nms / gb, cms / gb, "%.0f" % (rms / gb) if rms is not None else "-",
                "%.2f" % bound if bound else "-", fmt_ratio(bound, cb) if rms is not None else "1.00"))
    print()
    print("Second mount with -o cache_dir (127.0.0.1): raw of the same %d MiB, read by the first "
          "mount, against raw through a mount of the same file on the local disk, best of %d"
          % (size_mb, reps))
    print()
    print("| page cache | disk cache GB/s | local GB/s | ratio (target >= 0.8) | disk_cache_hits "
          "| remote_requests |")
    print("|---|---|---|---|---|---|")
    for what, g, loc, st in dcache_rows:
        print("| %s | %.3f | %.3f | %.2f | %s | %s |"
              % (what, g, loc, g / loc if loc else 0, st.get("disk_cache_hits", "-"),
                 st.get("remote_requests", "-")))
    print()
    print("Peak RSS streaming raw of a %d MiB remote tensor (127.0.0.1, default -o remote_cache=%d MiB): "
          "VmHWM %d MiB at %.3f GB/s (target <= cache + 64 MiB = %d MiB)"
          % (rss[0], (rss[3] or 0) >> 20, rss[2] >> 10, rss[1], ((rss[3] or 0) >> 20) + 64))
    if len(rss) > 4:
        print("  before (--base-bin): VmHWM %d MiB at %.3f GB/s" % (rss[5] >> 10, rss[4]))


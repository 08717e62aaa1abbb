# scripts/bench --part remote-mount: mount-to-ready of a remote model (nginx on 127.0.0.1, by URL and by hf://, with and without added round-trip time) against a local mount, and what two other clients would need.
"""
Part remote-mount: mount-to-ready of a remote model whose header
has a 150k-token vocabulary (tokens, scores, token types, 150k merges) and
291 tensor infos (H = 8.6 MiB), served by nginx on 127.0.0.1
(tests/integration/remote.py): `gguffs URL MNT` until `cat MNT/info`
succeeds, by its URL and by hf:// through nginx's hub-like /hf/ location
(302 to the "CDN" port), with no added latency and with +20 ms round trip
time (scripts/delay-proxy in front of each port, which
also points the redirect at the CDN's, with --rewrite).  Counted: requests and bytes
written at nginx (its access log, $bytes_sent), bytes taken by gguffs (its
stats), time (median of --reps, default 7); a local mount of the
same file as the baseline.  Against it, what @huggingface/gguf and gguf-parser-go would
need on the same header, computed from their chunk sizes (constants and
sources: see HF_CHUNK and GO_RING below).
  --quick: headers of 5000 and 4000 tokens, one mount each.
"""
import os
import random
import statistics
import time

import harness
import remote
from common import GGUFWriter, DelayProxy, skip

NAME = "remote-mount"
ALIASES = ()

REMOTE_VOCAB = 150000
REMOTE_TENSORS = 291             # a llama-7B-like tensor count
REMOTE_DATA_MIB = 256            # tensor bytes after the header (sparse file)
REMOTE_DELAY_MS = (0, 20)        # added round-trip time
# the headers: as many merges as tokens (the estimate made at 2 MiB holds),
# and Llama 3's shape, 128256 tokens and 280147 merges (2.2 per token: it
# falls short, a third range is asked for while the second is arriving)
REMOTE_HEADERS = (("vocab", REMOTE_VOCAB, REMOTE_VOCAB), ("llama3", 128256, 280147))
# --quick: the same shapes, small
QUICK_HEADERS = (("vocab", 5000, 5000), ("llama3", 4000, 8800))
# @huggingface/gguf, packages/gguf/src/gguf.ts (huggingface.js): fixed-size
# chunks (not doubling), one fetch() each, appended to one buffer; the next
# chunk is fetched when fewer than HTTP_DATA_LEEWAY bytes are left before a
# key/value or tensor info, or when a value does not fit (RangeError: fetch,
# parse the value again)
HF_CHUNK = 2 * 10 ** 6
HF_LEEWAY = 5 * 10 ** 5
# gguf-parser-go, util/httpx/file.go + file_option.go (SeekerFile): a HEAD
# request (size, Accept-Ranges) and a 4 MiB ring buffer refilled with one
# range request of its free space whenever a read does not fit; the
# parser (file.go, _GGUFReader) reads every value sequentially; the client
# (file_from_remote.go) disables keep-alive
GO_RING = 4 << 20


def make_vocab_file(path, n_tok=None, n_merges=None):
    """A vocabulary of n_tok tokens (default REMOTE_VOCAB: tokens, scores,
    token types, n_merges merges, default as many as tokens),
    REMOTE_TENSORS tensor infos, and REMOTE_DATA_MIB MiB of (sparse) tensor
    data.  Returns (header size with padding, [(kv start, kv end)],
    [(tensor info start, end)])."""
    n_tok = n_tok or REMOTE_VOCAB
    n_merges = n_merges or n_tok
    rnd = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "bench-remote")
    toks = ["".join(rnd.choice(letters) for _ in range(rnd.randrange(2, 12))) + str(i)
            for i in range(n_tok)]
    w.add("tokenizer.ggml.model", "string", "gpt2")
    w.add("tokenizer.ggml.tokens", "array[string]", toks)
    w.add("tokenizer.ggml.scores", "array[f32]", [float(-i) for i in range(n_tok)])
    w.add("tokenizer.ggml.token_type", "array[i32]", [1] * n_tok)
    w.add("tokenizer.ggml.merges", "array[string]",
          ["%s %s" % (toks[rnd.randrange(n_tok)], toks[rnd.randrange(n_tok)])
           for _ in range(n_merges)])
    w.add("tokenizer.chat_template", "string", "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    per = REMOTE_DATA_MIB * (1 << 20) // REMOTE_TENSORS // 4096 * 4096
    for i in range(REMOTE_TENSORS):
        w.add_tensor("blk.%d.weight" % i, "f32", [1024, per // 4096], data=b"", offset=i * per,
                     check=False)
    hdr, _ = w.layout()
    with open(path, "wb") as f:
        f.write(hdr)
        f.truncate(len(hdr) + per * REMOTE_TENSORS)
    return len(hdr), header_spans(hdr)


def header_spans(hdr):
    """[(start, end)] of every key/value and then every tensor info of a
    little-endian GGUF v3 header (what the two parsers step through)."""
    import struct
    pos = 8
    n_t, n_kv = struct.unpack_from("<QQ", hdr, pos)
    pos += 16
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def string(p):
        (n,) = struct.unpack_from("<Q", hdr, p)
        return p + 8 + n

    def value(t, p):
        if t == 8:
            return string(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", hdr, p)
            p += 12
            if et in sizes:
                return p + n * sizes[et]
            for _ in range(n):
                p = value(et, p)
            return p
        return p + sizes[t]

    kvs, tis = [], []
    for _ in range(n_kv):
        start = pos
        pos = string(pos)
        (t,) = struct.unpack_from("<I", hdr, pos)
        pos = value(t, pos + 4)
        kvs.append((start, pos))
    for _ in range(n_t):
        start = pos
        pos = string(pos)
        (nd,) = struct.unpack_from("<I", hdr, pos)
        pos += 4 + 8 * nd + 4 + 8
        tis.append((start, pos))
    return kvs, tis


def hf_strategy(kvs, tis, size):
    """(requests, bytes) of @huggingface/gguf's gguf() on this header."""
    have, n = HF_CHUNK, 1
    for start, end in kvs:
        if have - start < HF_LEEWAY:
            have, n = have + HF_CHUNK, n + 1
        while end > have:                   # RangeError: one more chunk
            have, n = have + HF_CHUNK, n + 1
    for start, end in tis:
        if have - start < HF_LEEWAY:
            have, n = have + HF_CHUNK, n + 1
    return n, min(have, size)


def go_strategy(kvs, tis, size):
    """(GET requests, bytes) of gguf-parser-go's SeekerFile: every refill
    asks for the ring's free space, which is the ring less the few bytes of
    the read that did not fit; taken as the whole ring (so at most one GET
    fewer than it really makes)."""
    end = tis[-1][1] if tis else kvs[-1][1]
    n = -(-end // GO_RING)
    return n, min(n * GO_RING, size)


def remote_mount_once(ng, url, mnt, env):
    """gguffs URL MNT (returns when the mount is ready), then cat info:
    (seconds, nginx requests [dicts], gguffs' stats {name: int}).  ng
    None: url is a local file (the baseline)."""
    mark = ng.mark() if ng else 0
    t0 = time.perf_counter()
    with harness.mount_daemon(url, mnt=mnt, env=env):
        with open(os.path.join(mnt, "info")) as f:
            f.read()
        dt = time.perf_counter() - t0
        stats = harness.read_stats(mnt)
    return dt, ng.requests_since(mark) if ng else [], stats


def run(work, args):
    missing = remote.have_nginx()
    if missing:
        skip(missing)
    root = os.path.join(work, "remote")
    os.makedirs(root, exist_ok=True)
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    reps = args.reps or (1 if args.quick else 7)
    MiB = float(1 << 20)
    for label, n_tok, n_merges in QUICK_HEADERS if args.quick else REMOTE_HEADERS:
        path = os.path.join(root, label + ".gguf")
        H, (kvs, tis) = make_vocab_file(path, n_tok, n_merges)
        size = os.path.getsize(path)
        print("# part remote-mount: %s, %d tokens, %d merges, %d tensors: header H = %d bytes "
              "(%.2f MiB), file %.0f MiB; target <= 3 round trips, <= H + 2 MiB = %.2f MiB"
              % (label, n_tok, n_merges, REMOTE_TENSORS, H, H / MiB, size / MiB, H / MiB + 2),
              flush=True)
        remote_mount_header(root, mnt, path, label, n_tok, n_merges, H, kvs, tis, size, reps)
        os.unlink(path)


def remote_mount_header(root, mnt, path, label, n_tok, n_merges, H, kvs, tis, size, reps):
    MiB = float(1 << 20)
    name = os.path.basename(path)
    rows = []
    local = sorted(remote_mount_once(None, path, mnt, dict(os.environ))[0] for _ in range(reps))
    with remote.Nginx(root) as ng:
        for delay in REMOTE_DELAY_MS:
            hub = cdn = None
            hub_port, cdn_port = ng.port, ng.cdn_port
            if delay:
                cdn = DelayProxy(ng.cdn_port, delay)
                hub = DelayProxy(ng.port, delay, rewrite=("127.0.0.1:%d/" % ng.cdn_port,
                                                          "127.0.0.1:%d/" % cdn.port))
                hub_port, cdn_port = hub.port, cdn.port
            try:
                for how in ("URL", "hf://"):
                    env = dict(os.environ)
                    env.pop("HF_TOKEN", None)
                    if how == "URL":
                        url = "http://127.0.0.1:%d/files/%s" % (cdn_port, name)
                    else:
                        url = "hf://org/repo/%s" % name
                        env["HF_ENDPOINT"] = "http://127.0.0.1:%d/hf" % hub_port
                    times, first = [], None
                    for _ in range(reps):
                        dt, reqs, stats = remote_mount_once(ng, url, mnt, env)
                        times.append(dt)
                        if first is None:
                            first = (reqs, stats)
                    reqs, stats = first
                    sent = sum(r["sent"] for r in reqs)
                    rows.append((delay, how, len(reqs), stats.get("remote_bytes", 0), sent,
                                 statistics.median(times), min(times),
                                 ", ".join("%d %s" % (r["status"], r["range"] or "-") for r in reqs)))
                    print("#   %2d ms %-6s %d requests (%s), gguffs took %.2f MiB, nginx sent "
                          "%.2f MiB, %.1f ms (median of %d)"
                          % (delay, how, len(reqs), rows[-1][7], rows[-1][3] / MiB, sent / MiB,
                             rows[-1][5] * 1e3, reps), flush=True)
            finally:
                for p in (hub, cdn):
                    if p is not None:
                        p.close()
    hf_n, hf_b = hf_strategy(kvs, tis, size)
    go_n, go_b = go_strategy(kvs, tis, size)
    print()
    print("Mount to ready (`gguffs URL MNT` until `cat MNT/info` succeeds), header %s: "
          "%d tokens, %d merges, H = %.2f MiB; requests counted at nginx, bytes as taken by "
          "gguffs (stats remote_bytes) and as written by nginx ($bytes_sent in its log: headers "
          "included, and what was still in the socket buffers when a stream was cut):"
          % (label, n_tok, n_merges, H / MiB))
    print()
    print("| client | redirect | requests | bytes | requests x 20 ms | measured, +0 ms RTT | "
          "measured, +20 ms RTT | target |")
    print("|---|---|---|---|---|---|---|---|")
    by = {(r[0], r[1]): r for r in rows}
    print("| gguffs, local file (baseline) | - | - | - | - | %.0f ms | - | - |"
          % (statistics.median(local) * 1e3))
    for how, redirect in (("URL", "no"), ("hf://", "yes (hub 302 to CDN)")):
        a, b = by.get((0, how)), by.get((20, how))
        print("| gguffs | %s | %d | H + %.2f MiB (nginx sent H + %.2f MiB) | %d ms | %.0f ms | "
              "%s | <= 3, <= H + 2 MiB |"
              % (redirect, a[2], (a[3] - H) / MiB, (a[4] - H) / MiB, a[2] * 20, a[5] * 1e3,
                 "%.0f ms" % (b[5] * 1e3) if b else "-"))
    for cname, n, nb, extra in (
            ("@huggingface/gguf (computed)", hf_n, hf_b, 0),
            ("gguf-parser-go (computed)", go_n, go_b, 1)):
        for redirect, mult in (("no", 1), ("yes, on every request", 2)):
            req = (n + extra) * mult
            print("| %s | %s | %d%s | H + %.2f MiB | %d ms%s | - | - | - |"
                  % (cname, redirect, req, " (%d HEAD)" % mult if extra else "", (nb - H) / MiB,
                     req * 20, " + %d connects" % req if extra else ""))
    print()
    print("Computed rows: requests from their chunk sizes on this header (@huggingface/gguf "
          "2 MB chunks, next one when < 500 kB are left; gguf-parser-go a HEAD and 4 MiB "
          "ring refills, no keep-alive, so each request also opens a connection: one more "
          "round trip each, not counted); their `fetch`/Go clients follow the redirect "
          "on every request.  gguffs keeps its connection (one per host).")
    print("Measured %s on %d CPUs, load average %.2f; median of %d mounts (fastest: local "
          "%.1f, %s ms).  Bytes sent by nginx: $bytes_sent in its log, at +0 ms (no "
          "relay in between); each header range ends 1 MiB past where the bytes before it "
          "say the header ends, and the next one is asked for once a range is half read if "
          "they say the header ends past it."
          % (time.strftime("%Y-%m-%d %H:%M %Z"), os.cpu_count() or 0, os.getloadavg()[0], reps,
             local[0] * 1e3, ", ".join("%.1f" % (r[6] * 1e3) for r in rows)))
    print()

#!/usr/bin/python3
# Remote mounts (gguffs URL MNT) against nginx on loopback: every check of the local mount tests (meta text, xattrs, raw, f32 bit-exact against ggml, model.gguf) on corpus and generated models over HTTP and HTTPS, split models from the first shard's URL, hf:// with HF_ENDPOINT and a token sent only to the hub, read-only without an overlay, stats and info, refusals, faults during reads.
"""
Served by tests/integration/remote.py's Nginx (and FaultProxy for the
faults).  The expected values come from the local copy of each file
(checks.Expect), the mount is of its URL.

"""
import errno
import os
import re
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
from harness import Gguffs, Harness, mount  # noqa: E402
from remote import FaultProxy, Nginx, Rule  # noqa: E402

TOKEN = "hf_gguffsMountToken_5e02b1c8aa"
# the mount option naming a CA file for HTTPS (remote_opts.ca_file)
CA_OPTION = "ca_file"
CORPUS_PICK = ("hyllama-dummy.gguf", "llamacpp-vocab-llama-spm.gguf", "llamacpp-vocab-dbrx.gguf")
TYPES = ["f32", "f16", "bf16", "q4_0", "q8_0", "q4_K", "q6_K", "iq4_xs"]


# a header longer than the first 2 MiB a mount fetches: what mount-to-ready
# costs (2 requests, 3 with the hub's redirect; at most H + 2 MiB
# written by the server, counted in nginx's log, $bytes_sent)
MiB = 1 << 20


def big_header(root, name, n_tokens, tok_len, merges_per_token):
    """A vocabulary laid out as llama.cpp's converters write one ("gpt2":
    tokens, token types, merges): returns (path, header bytes H)."""
    import random
    import gguf_write as gw
    rnd = random.Random(3)
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "remote")
    toks = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randrange(*tok_len)))
            for _ in range(n_tokens)]
    w.add("tokenizer.ggml.model", "string", "gpt2")
    w.add("tokenizer.ggml.tokens", "array[string]", toks)
    w.add("tokenizer.ggml.token_type", "array[i32]", [1] * n_tokens)
    w.add("tokenizer.ggml.merges", "array[string]",
          ["%s %s" % (rnd.choice(toks), rnd.choice(toks)) for _ in range(int(n_tokens * merges_per_token))])
    w.add("tokenizer.chat_template", "string", "{{ messages }}")
    for i in range(40):         # 40 MiB of (sparse) tensor data after it
        w.add_tensor("blk.%d.w" % i, "f32", [1024, 256], data=b"", offset=i * MiB, check=False)
    hdr, _ = w.layout()
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        f.write(hdr)
        f.truncate(len(hdr) + 40 * MiB)
    return path, len(hdr)


def mount_cost(h, ng, big, opts=()):
    """Mount-to-ready of headers of 3-5 MiB, by URL and by hf://: the
    requests, their ranges (each one bounded: an open-ended range would let
    the server fill its socket buffers, megabytes past the header) and the
    bytes nginx wrote.  big: [(path, H, requests by URL)]."""
    for path, H, want in big:
        name = os.path.basename(path)
        for how in ("URL", "hf://"):
            env = dict(os.environ)
            env.pop("HF_TOKEN", None)
            url = ng.url(name)
            if how == "hf://":
                env["HF_ENDPOINT"] = ng.hf_endpoint
                url = "hf://org/repo/%s" % name
            lab = "%s %s %s (H = %d)" % (ng.scheme, how, name, H)
            mark = ng.mark()
            g = Gguffs(url, opts, env=env)
            try:
                h.check(open(os.path.join(g.mnt, "meta", "tokenizer.chat_template")).read() == "{{ messages }}\n",
                        "%s: the key after the merges" % lab)
                h.check(len(os.listdir(os.path.join(g.mnt, "tensors"))) == 40, "%s: tensors" % lab)
                g.stop(h, lab)
            finally:
                g.close()
            n = want + (how == "hf://")
            reqs = ng.requests_since(mark)
            # a range abandoned half way is logged once nginx notices the
            # close: ask again (each a round trip to nginx) until it is there
            for _ in range(50):
                if len(reqs) >= n:
                    break
                reqs = ng.requests_since(mark)
            sent = sum(r["sent"] for r in reqs)
            h.check(len(reqs) == n, "%s: %d requests, want %d: %r" % (lab, len(reqs), n, reqs))
            h.check(all(r["range"] and not r["range"].endswith("-") for r in reqs),
                    "%s: an open-ended range: %r" % (lab, [r["range"] for r in reqs]))
            h.check(sent <= H + 2 * MiB, "%s: nginx wrote %d bytes (H + %.2f MiB), want at most H + 2 MiB"
                    % (lab, sent, (sent - H) / MiB))


def ahead(h, ng, path):
    """A header the estimate made at the prefix's end falls short of (merges
    1.5 times the tokens): the third range must be asked for while the
    second is still being received, so that its round trip overlaps that
    transfer.  The proxy holds the second range's last 256 KiB until a
    later request for the file comes (at most 20 s: then the log says
    hold-timeout)."""
    name = os.path.basename(path)
    with FaultProxy(ng.base, [Rule("hold", after=1, times=1, path=re.escape(name), wait=20)]) as px:
        g = Gguffs(px.url(name))
        try:
            h.check(open(os.path.join(g.mnt, "meta", "tokenizer.chat_template")).read() == "{{ messages }}\n",
                    "ahead: the key after the merges")
            g.stop(h, "ahead")
        finally:
            g.close()
        log = [e for e in px.requests() if e["path"].endswith(name)]
    h.check(len(log) == 3 and log[1]["fault"] == "hold",
            "ahead: want 3 requests, the third sent before the second ended: %r"
            % [(e["range"], e["fault"]) for e in log])


def url_support_or_skip(ng, name):
    """Fails at once (one clear line) if gguffs cannot mount a plain URL."""
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        url = ng.url(name)
        rc, _, err = harness.run_gguffs([url, mnt], timeout=harness.MOUNT_WAIT)
        text = err.decode(errors="replace").strip()
        if rc != 0:
            print("FAIL: gguffs %s MNT: exit %d: %s" % (url, rc, text))
            print("0 passed, 1 failed")
            sys.exit(1)
    finally:
        harness.unmount(mnt)
        os.rmdir(mnt)


def generated(tmp, ggml):
    """A model with tensors of several types and ~8 MiB of data (more than
    the first 2 MiB a mount fetches), and a 3-shard split model."""
    kvs = [("general.architecture", "string", "llama"), ("general.name", "string", "remote"),
           ("llama.context_length", "u32", 4096),
           ("tokenizer.ggml.tokens", "array[string]", ["tok%d\n" % i for i in range(20000)]),
           ("tokenizer.chat_template", "string", "{% for m in messages %}{{ m['content'] }}{% endfor %}")]
    tensors = [("blk.%d.%s" % (i, t), t, [4096, 64 if t != "f32" else 256]) for i, t in enumerate(TYPES)]
    single = os.path.join(tmp, "gen.gguf")
    ggml.write_model(single, kvs, tensors, seed=1)
    n = 3
    shards, written = [], {}
    for i in range(n):
        skv = (list(kvs) if i == 0 else []) + [("split.no", "u16", i), ("split.count", "u16", n)]
        if i == 0:
            skv.append(("split.tensors.count", "i32", 2 * n))
        ts = [("s%d.w%d" % (i, k), TYPES[(2 * i + k) % len(TYPES)], [1024, 40 + k]) for k in range(2)]
        p = os.path.join(tmp, "split-%05d-of-%05d.gguf" % (i + 1, n))
        for name, t, ne, raw, _ in ggml.write_model(p, skv, ts, seed=10 + i):
            written[name.decode()] = (t, raw)
        shards.append(p)
    return single, shards, written


def main():
    harness.require_fuse()
    harness.gguffs_bin()
    missing = remote.have_nginx()
    if missing:
        harness.skip_or_fail(missing)
    harness.require_oracle()
    import ggml
    import checks

    tmp = tempfile.mkdtemp(prefix="gguffs-rmount-")
    try:
        return run(tmp, ggml, checks)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp, ggml, checks):
    root = os.path.join(tmp, "root")
    os.mkdir(root)
    # the repository's own corpus: every pick is there in any clone
    picked = [c for c in CORPUS_PICK if os.path.exists(harness.corpus_file(c))]
    for c in picked:
        shutil.copyfile(harness.corpus_file(c), os.path.join(root, c))
    single, shards, written = generated(root, ggml)
    # 3.5 MiB: 2 requests.  8.6 MiB, the first 2 MiB cut in the tokens,
    # merges 1.5 times as many as tokens (Llama 3 has 2.2): the estimate of
    # the header's end made at 2 MiB falls short, a second range follows
    big = [big_header(root, "bpe.gguf", 94000, (1, 12), 1.0) + (2,),
           big_header(root, "bpe-merges.gguf", 20000, (90, 110), 1.5) + (3,)]
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")

    with Nginx(root) as ng:
        url_support_or_skip(ng, os.path.basename(single))
        h = Harness("remote-mount")
        if len(picked) != len(CORPUS_PICK):
            h.fail("the repository's corpus lacks %s" % sorted(set(CORPUS_PICK) - set(picked)))
        # ---- the local checks, on the remote mount
        for name in picked + [os.path.basename(single)]:
            local = os.path.join(root, name)
            checks.check_model(h, ng.url(name), "http %s" % name, expect=checks.Expect(local, h, name))
        with h.case("model.gguf"):
            model_gguf(h, ng, single)
        with h.case("split model"):
            split(h, ng, ggml, shards, written)
        with h.case("read-only without an overlay"):
            read_only(h, ng, single)
        with h.case("stats and info"):
            stats_info(h, ng, single)
        with h.case("hf:// and the token"):
            hf(h, ng, single, token_file)
        with h.case("refusals"):
            refusals(h, ng, single)
        with h.case("faults during reads"):
            faults(h, ng, single)
        with h.case("the block cache"):
            block_cache(h, ng, single)
        with h.case("the block cache: failed fills"):
            block_cache_faults(h, ng, single)
        with h.case("mount-to-ready: requests and bytes"):
            mount_cost(h, ng, big)
        with h.case("mount-to-ready: the next header range asked for early"):
            ahead(h, ng, big[1][0])
    with Nginx(root, https=True) as ng:
        name = os.path.basename(single)
        checks.check_model(h, ng.url(name), "https %s" % name, options=["-o", "%s=%s" % (CA_OPTION, ng.ca_file)],
                           expect=checks.Expect(single, h, name), concurrent=False)
        with h.case("https refusals"):
            rc, err, mounted = refuse(ng.url(name))
            h.check(rc != 0 and not mounted and err.count("\n") == 1 and ng.url(name) in err
                    and re.search(r"tls|ssl|certif", err, re.I),
                    "https without the CA: one line naming the URL and TLS: rc %d %r" % (rc, err))
        with h.case("hf:// over https"):
            hf(h, ng, single, token_file, ["-o", "%s=%s" % (CA_OPTION, ng.ca_file)])
        with h.case("https mount-to-ready: requests and bytes"):
            mount_cost(h, ng, big, ["-o", "%s=%s" % (CA_OPTION, ng.ca_file)])
    return h.finish()


def model_gguf(h, ng, single):
    data = open(single, "rb").read()
    with mount(ng.url(os.path.basename(single))) as mnt:
        p = os.path.join(mnt, "model.gguf")
        h.check(os.stat(p).st_size == len(data), "model.gguf st_size")
        h.check(open(p, "rb").read() == data, "model.gguf differs from the file served")
        rng = np.random.default_rng(4)
        fd = os.open(p, os.O_RDONLY)
        try:
            for _ in range(100):
                a = int(rng.integers(0, len(data)))
                n = int(rng.integers(1, 300000))
                h.check(os.pread(fd, n, a) == data[a:a + n], "model.gguf pread(%d, %d)" % (n, a))
        finally:
            os.close(fd)


def split(h, ng, ggml, shards, written):
    """The first shard's URL opens all shards."""
    with mount(ng.url(os.path.basename(shards[0]))) as mnt:
        names = sorted(os.listdir(os.path.join(mnt, "tensors")))
        h.check(names == sorted(written), "split: tensors %r" % names)
        for name, (t, raw) in written.items():
            got = open(os.path.join(mnt, "tensors", name, "raw"), "rb").read()
            h.check(got == raw, "split: %s/raw differs" % name)
            if ggml.has_to_float(t):
                f = np.fromfile(os.path.join(mnt, "tensors", name, "f32"), np.uint32)
                h.check(np.array_equal(f, ggml.dequant(t, raw).view(np.uint32)), "split: %s/f32" % name)
        info = open(os.path.join(mnt, "info")).read()
        h.check("split model of 3 shards" in info, "split: info names the shards")
        out = os.path.join(os.path.dirname(shards[0]), "..", "merged.gguf")
        shutil.copyfile(os.path.join(mnt, "model.gguf"), out)
        m = ggml.read_gguf(out)
        if h.check(m is not None, "split: ggml refuses model.gguf: %s" % ggml.last_log()):
            h.check(len(m.tensors) == len(written), "split: model.gguf tensor count")
            with open(out, "rb") as f:
                for ti in m.tensors:
                    f.seek(m.data_offset + ti.offset)
                    h.check(f.read(ti.nbytes) == written[ti.name.decode()][1], "split: %s in model.gguf" % ti.name)
        os.unlink(out)
    try:
        with mount(ng.url(os.path.basename(shards[1]))) as mnt:
            names = sorted(os.listdir(os.path.join(mnt, "tensors")))
            h.check(names == sorted(written), "split via shard 2: tensors %r" % names)
    except harness.MountError as e:
        h.fail("a split model is not mounted from shard 2's URL: %s" % e)


def read_only(h, ng, single):
    with mount(ng.url(os.path.basename(single))) as mnt:
        meta = os.path.join(mnt, "meta", "general.name")
        for what, fn in (("write meta/general.name", lambda: open(meta, "w").write("x\n")),
                         ("append to meta/general.name", lambda: open(meta, "a").write("x\n")),
                         ("truncate meta/general.name", lambda: os.truncate(meta, 0)),
                         ("create meta/new.key", lambda: open(os.path.join(mnt, "meta", "new.key"), "w").close()),
                         ("unlink meta/general.name", lambda: os.unlink(meta))):
            try:
                fn()
                h.fail("%s: allowed on a remote mount without an overlay" % what)
            except OSError as e:
                h.check(e.errno == errno.EROFS, "%s: %s, want EROFS" % (what, e))
        h.check(open(meta).read() == "remote\n", "general.name after the refused writes")


def stats_info(h, ng, single):
    url = ng.url(os.path.basename(single))
    with mount(url) as mnt:
        before = read_stats(os.path.join(mnt, "stats"))
        req = [k for k in before if "request" in k]
        h.check(req and "retries" in " ".join(before) and any("bytes" in k for k in before),
                "stats lacks the remote counters (requests, bytes, retries): %r" % before)
        last = sorted(os.listdir(os.path.join(mnt, "tensors")))[-1]
        open(os.path.join(mnt, "tensors", last, "raw"), "rb").read()
        after = read_stats(os.path.join(mnt, "stats"))
        if req:
            h.check(after[req[0]] > before[req[0]], "stats: %s did not grow with a read of tensor data: %r -> %r"
                    % (req[0], before[req[0]], after[req[0]]))
        info = open(os.path.join(mnt, "info")).read()
        h.check(url in info, "info does not name the URL")
    # credentials in the URL are not shown
    secret = "pw-mount-secret-77"
    cred = url.replace("://", "://gguffs:%s@" % secret)
    with mount(cred) as mnt:
        info = open(os.path.join(mnt, "info")).read()
        h.check(secret not in info and url in info, "info with a URL with userinfo: %r" % info[:300])


def read_stats(path):
    out = {}
    for line in open(path).read().splitlines():
        k, _, v = line.partition(" ")
        try:
            out[k] = int(v)
        except ValueError:
            out[k] = v
    return out


def hf(h, ng, single, token_file, opts=()):
    """hf://org/repo/FILE with HF_ENDPOINT: the token (HF_TOKEN, or
    -o bearer_token_file) goes to the hub, not to the CDN it redirects to,
    and appears nowhere."""
    name = os.path.basename(single)
    want = open(single, "rb").read()
    for how in ("HF_TOKEN", "bearer_token_file"):
        env = dict(os.environ)
        env["HF_ENDPOINT"] = ng.hf_endpoint
        o = list(opts)
        if how == "HF_TOKEN":
            env["HF_TOKEN"] = TOKEN
        else:
            env.pop("HF_TOKEN", None)
            o += ["-o", "bearer_token_file=%s" % token_file]
        mark = ng.mark()
        lab = "hf:// %s %s" % (ng.scheme, how)
        g = Gguffs("hf://org/repo/%s" % name, o, env=env)
        try:
            h.check(open(os.path.join(g.mnt, "meta", "general.name")).read() == "remote\n", "%s: meta" % lab)
            h.check(open(os.path.join(g.mnt, "model.gguf"), "rb").read() == want, "%s: model.gguf" % lab)
            texts = [open(os.path.join(g.mnt, f)).read() for f in ("info", "stats")]
            g.stop(h, lab)
            texts.append(g.stderr())
        finally:
            g.close()
        h.check(all(TOKEN not in t and Nginx.SIGNATURE not in t for t in texts),
                "%s: the token or the presigned signature is in info, stats or stderr" % lab)
        reqs = ng.requests_since(mark)
        hub = [r for r in reqs if r["port"] == ng.port]
        cdn = [r for r in reqs if r["port"] == ng.cdn_port]
        h.check(hub and all(r["auth"] == "yes" for r in hub), "%s: the hub got no token: %r" % (lab, hub))
        h.check(cdn and all(r["auth"] == "no" for r in cdn), "%s: the CDN got the token: %r" % (lab, cdn))
    # a revision
    env = dict(os.environ, HF_ENDPOINT=ng.hf_endpoint)
    with h.case("hf:// @revision"):
        mark = ng.mark()
        g = Gguffs("hf://org/repo/%s@0123abcd" % name, opts, env=env)
        try:
            g.stop(h, "hf:// @revision")
        finally:
            g.close()
        h.check(any("/resolve/0123abcd/" in r["uri"] for r in ng.requests_since(mark)), "revision not resolved")


def refuse(url, opts=(), env=None):
    """(rc, stderr text, mounted) of gguffs URL MNT expected to fail."""
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, _, err = harness.run_gguffs(list(opts) + [url, mnt], timeout=harness.MOUNT_WAIT)
        return rc, err.decode(errors="replace"), harness.is_mounted(mnt)
    finally:
        harness.unmount(mnt)
        os.rmdir(mnt)


def refusals(h, ng, single):
    url = ng.url("missing.gguf")
    rc, err, mounted = refuse(url)
    h.check(rc != 0 and not mounted and err.count("\n") == 1 and url in err and "404" in err,
            "404: one line naming the URL and the status: rc %d %r" % (rc, err))
    url = ng.url("small.bin")
    with open(os.path.join(ng.root, "small.bin"), "wb") as f:
        f.write(b"not a gguf file at all\n" * 10)
    rc, err, mounted = refuse(url)
    h.check(rc != 0 and not mounted and err.count("\n") == 1, "not a GGUF: rc %d %r" % (rc, err))
    with FaultProxy(ng.base, [Rule("ignore_range", size=200 << 20)]) as px:
        url = px.url(os.path.basename(single))
        rc, err, mounted = refuse(url)
        h.check(rc != 0 and not mounted and err.count("\n") == 1 and re.search("range", err, re.I),
                "a server ignoring Range at mount: rc %d %r" % (rc, err))


def faults(h, ng, single):
    """Faults once the mount is up: transient ones give right bytes, an
    ETag change gives EIO (again on the next read), never wrong bytes."""
    name = os.path.basename(single)
    import checks
    exp = checks.Expect(single)
    with open(single, "rb") as f:
        tensors = [(n.decode(), exp.raw(f, off, nb)) for _, n, _, _, _, off, nb in exp.tensors]
    # the last tensors lie past the first 2 MiB: not fetched at mount
    for rule in (Rule("status", code=503, times=2), Rule("status", code=429, retry_after=1, times=1),
                 Rule("reset", at=5000, times=1), Rule("short", at=5000, times=2)):
        with FaultProxy(ng.base) as px, mount(px.url(name)) as mnt:
            px.add(rule)
            tname, raw = tensors[-1]
            got = open(os.path.join(mnt, "tensors", tname, "raw"), "rb").read()
            h.check(got == raw, "%r after the mount: %s/raw differs" % (rule, tname))
            h.check(px.faults(), "%r: no fault was served" % rule)
    for rule in (Rule("etag"), Rule("content_range", mode="start"), Rule("ignore_range", size=200 << 20)):
        with FaultProxy(ng.base) as px, mount(px.url(name), ["-o", "timeout=5"]) as mnt:
            px.add(rule)
            for tname, raw in tensors[-2:]:
                for attempt in (1, 2):
                    try:
                        got = open(os.path.join(mnt, "tensors", tname, "raw"), "rb").read()
                        h.check(got == raw, "%r: WRONG BYTES in %s/raw" % (rule, tname))
                        h.fail("%r: %s/raw read without an error" % (rule, tname))
                    except OSError as e:
                        h.check(e.errno == errno.EIO, "%r: %s/raw (read %d): %s, want EIO" % (rule, tname, attempt, e))


# Small blocks and a small cache, so that the ~8 MiB model spans many blocks
# (reads straddle them, a 1 MiB read needs 16) and is larger than the cache.
SMALL_CACHE = ["-o", "remote_block=64K", "-o", "remote_cache=4M"]


def tensor_ranges(single):
    import checks
    exp = checks.Expect(single)
    return [(fname.decode() if isinstance(fname, bytes) else fname, exp.data_offset + off, nb)
            for fname, _, _, _, _, off, nb in exp.tensors]


def read_file(path, chunk=1 << 20):
    out = bytearray()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(chunk)
            if not b:
                return bytes(out)
            out += b


def block_cache(h, ng, single):
    """raw, f32 and model.gguf through the block cache equal the local
    file's; a second read of cached bytes (model.gguf after raw) costs no
    request; sequential reads prefetch."""
    data = open(single, "rb").read()
    name = os.path.basename(single)
    with mount(ng.url(name), SMALL_CACHE) as mnt, mount(single, ["-o", "ro"]) as local:
        for fname, off, nb in tensor_ranges(single):
            got = read_file(os.path.join(mnt, "tensors", fname, "raw"))
            h.check(got == data[off:off + nb], "block cache: %s/raw differs from the file" % fname)
            f32 = os.path.join(mnt, "tensors", fname, "f32")
            local_f32 = os.path.join(local, "tensors", fname, "f32")
            h.check(os.path.exists(f32) == os.path.exists(local_f32),
                    "block cache: %s/f32 exists %s remotely, %s locally"
                    % (fname, os.path.exists(f32), os.path.exists(local_f32)))
            if os.path.exists(f32) and os.path.exists(local_f32):
                h.check(read_file(f32) == read_file(local_f32),
                        "block cache: %s/f32 differs from the local mount's" % fname)
        st = read_stats(os.path.join(mnt, "stats"))
        h.check(st.get("remote_block_bytes") == 64 << 10 and st.get("remote_cache_capacity") == 4 << 20,
                "block cache: stats remote_block_bytes/remote_cache_capacity: %r" % st)
        h.check(st.get("remote_cache_misses", 0) > 0 and st.get("remote_prefetched", 0) > 0,
                "block cache: sequential reads neither missed nor prefetched: %r" % st)
        h.check("remote_prefetch_wasted" in st and st["remote_prefetch_wasted"] <= st["remote_prefetched"],
                "block cache: stats remote_prefetch_wasted missing or above remote_prefetched: %r" % st)
        h.check(st.get("remote_cache_bytes_held", 1 << 40) <= (4 << 20) + (16 << 20),
                "block cache: %d bytes held, cache of 4 MiB" % st.get("remote_cache_bytes_held", -1))
        # the last tensor again, through model.gguf: its blocks are cached
        fname, off, nb = tensor_ranges(single)[-1]
        if nb <= 2 << 20:
            read_file(os.path.join(mnt, "tensors", fname, "raw"))
            before = read_stats(os.path.join(mnt, "stats"))
            fd = os.open(os.path.join(mnt, "model.gguf"), os.O_RDONLY)
            try:
                got = os.pread(fd, nb, off)
            finally:
                os.close(fd)
            after = read_stats(os.path.join(mnt, "stats"))
            h.check(got == data[off:off + nb], "block cache: model.gguf range of %s differs" % fname)
            h.check(after["remote_requests"] == before["remote_requests"],
                    "block cache: a read of cached bytes made %d requests"
                    % (after["remote_requests"] - before["remote_requests"]))
            h.check(after["remote_cache_hits"] > before["remote_cache_hits"],
                    "block cache: no hits reading cached bytes: %r -> %r" % (before, after))
        # the whole file through model.gguf, in odd-sized reads
        fd = os.open(os.path.join(mnt, "model.gguf"), os.O_RDONLY)
        try:
            pos, bad = 0, 0
            while pos < len(data):
                b = os.pread(fd, 300007, pos)
                bad += b != data[pos:pos + len(b)]
                pos += len(b) if b else len(data)
            h.check(bad == 0 and pos == len(data), "block cache: model.gguf differs (%d reads)" % bad)
        finally:
            os.close(fd)


def block_cache_faults(h, ng, single):
    """A fill that fails (404: not retried) fails the read that needed it
    with EIO, or cuts it short, never with wrong bytes; it is not cached:
    the next read fetches it again and gets the right bytes."""
    data = open(single, "rb").read()
    name = os.path.basename(single)
    ranges = [r for r in tensor_ranges(single) if r[1] >= 2 << 20]   # past the prefix
    for k, (fname, off, nb) in enumerate(ranges[-2:]):
        with FaultProxy(ng.base) as px, mount(px.url(name), SMALL_CACHE) as mnt:
            px.add(Rule("status", code=404, times=1 + k))
            p = os.path.join(mnt, "tensors", fname, "raw")
            want = data[off:off + nb]
            try:
                got = read_file(p)
                h.check(got == want[:len(got)], "failed fill: WRONG BYTES in %s/raw" % fname)
            except OSError as e:
                h.check(e.errno == errno.EIO, "failed fill: %s/raw: %s, want EIO" % (fname, e))
            h.check(px.faults(), "failed fill: no fault was served")
            st = read_stats(os.path.join(mnt, "stats"))
            h.check(st.get("remote_cache_fill_errors", 0) >= 1,
                    "failed fill: remote_cache_fill_errors %r" % st.get("remote_cache_fill_errors"))
            # the page cache may hold what the first read got: read around it
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            got = read_file(p)
            h.check(got == want, "failed fill: the next read of %s/raw got %d wrong or missing bytes"
                    % (fname, sum(1 for a, b in zip(got, want) if a != b) + abs(len(want) - len(got))))
    # The file changes on the server: cached blocks are still served (bytes
    # of the identity fixed at mount), reads of the others fail with EIO.
    fname, off, nb = ranges[-1]
    far = [r for r in ranges if r[1] + r[2] + (64 << 10) < off]
    with FaultProxy(ng.base) as px, mount(px.url(name), SMALL_CACHE) as mnt:
        want = data[off:off + nb]
        h.check(read_file(os.path.join(mnt, "tensors", fname, "raw")) == want, "changed: first read")
        px.add(Rule("etag"))
        fd = os.open(os.path.join(mnt, "model.gguf"), os.O_RDONLY)
        try:
            h.check(os.pread(fd, nb, off) == want, "changed: cached bytes through model.gguf")
        finally:
            os.close(fd)
        if h.check(far, "changed: no tensor far from the last one"):
            f2, o2, n2 = far[0]
            try:
                got = read_file(os.path.join(mnt, "tensors", f2, "raw"))
                h.check(got == data[o2:o2 + len(got)], "changed: WRONG BYTES in %s/raw" % f2)
                h.fail("changed: %s/raw (not cached) read without an error" % f2)
            except OSError as e:
                h.check(e.errno == errno.EIO, "changed: %s/raw: %s, want EIO" % (f2, e))


if __name__ == "__main__":
    sys.exit(main())

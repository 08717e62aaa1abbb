#!/usr/bin/python3
# Models in object stores: s3:// against a real S3 store started by the test (OpenStack Swift with s3api, tests/integration/s3store.py) — mounts by environment, profile files and options, anonymous reads, the errors a user can act on, the store gone mid-read and back, an object replaced, split models, overlay, disk cache, every byte of raw and f32, 4 gguffs at once — and gs:// against nginx standing for Cloud Storage (STORAGE_EMULATOR_HOST, bearer token).
"""
The store is started once (about 4 s) and filled by one `aws s3 cp
--recursive` (one PutObject per file); the expected values come from the
local copies (checks.Expect, ggml).  gguffs reaches the store through
AWS_ENDPOINT_URL (path-style requests to 127.0.0.1), as the test user
test:tester unless a case says otherwise; AWS_CONFIG_FILE and
AWS_SHARED_CREDENTIALS_FILE are /dev/null but in the profile cases, so no
file of the machine is read.  Counts, not times: the store's own access
log (the proxy's requests) and gguffs' stats.
"""
import errno
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
import s3store  # noqa: E402
from harness import Gguffs, Harness, mount, read_stats  # noqa: E402
from remote import Nginx  # noqa: E402
from s3store import SwiftS3  # noqa: E402
from test_remote_mount import generated, tensor_ranges, read_file, SMALL_CACHE  # noqa: E402

GOOD_TOKEN = "FwoGZXIvYXdzEGgguffsGoodSessionToken0123"
OLD_TOKEN = "FwoGZXIvYXdzEGgguffsExpiredSessionToken77"
PROFILE_SECRET = s3store.SECRET_KEY
MiB = 1 << 20


def refuse(name, opts=(), env=None):
    """(rc, stderr text, mounted) of gguffs NAME MNT expected to fail."""
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, _, err = harness.run_gguffs(list(opts) + [name, mnt], timeout=harness.MOUNT_WAIT,
                                        env=env)
        return rc, err.decode(errors="replace"), harness.is_mounted(mnt)
    finally:
        harness.unmount(mnt)
        os.rmdir(mnt)


def one_line(h, lab, name, opts, env, *words, named=True):
    """gguffs refuses NAME: exit 1, one line naming it (unless not named:
    an option's error names the option) and holding words."""
    rc, err, mounted = refuse(name, opts, env)
    ok = rc == 1 and not mounted and err.count("\n") == 1 and \
        err.startswith("gguffs: %s: " % name if named else "gguffs: ")
    ok = ok and all(re.search(w, err) for w in words)
    h.check(ok, "%s: want exit 1 and one line naming %s with %r: rc %d %r" % (lab, name, words, rc, err))
    h.check(s3store.SECRET_KEY not in err and GOOD_TOKEN not in err and OLD_TOKEN not in err,
            "%s: a secret in the message: %r" % (lab, err))
    return err


def no_secret(h, lab, texts):
    bad = [t[:200] for t in texts if any(s in t for s in (s3store.SECRET_KEY, GOOD_TOKEN, OLD_TOKEN,
                                                         Nginx.GCS_TOKEN))]
    h.check(not bad, "%s: a secret in info, stats, stderr or /proc/mounts: %r" % (lab, bad))


def proc_mounts():
    with open("/proc/mounts") as f:
        return f.read()


# ---------------------------------------------------------------- cases

def mounts_by_env(h, st, single):
    """Env credentials: the tree, info (the store, region, whose
    credentials, never a secret), --dump, model.gguf whole; mount-to-ready
    in requests (the store's count and gguffs')."""
    data = open(single, "rb").read()
    name = "s3://models/%s" % os.path.basename(single)
    before = len(st.requests())
    g = Gguffs(name, ["-o", "ro"])
    try:
        ready = read_stats(g.mnt).get("remote_requests")
        at_store = len(st.requests()) - before
        print("s3 mount to ready: %s requests (gguffs' stats), %d at the store" % (ready, at_store))
        h.check(ready is not None and ready <= 3 and at_store <= 3,
                "mount to ready: %r requests (stats), %d at the store, want <= 3" % (ready, at_store))
        info = open(os.path.join(g.mnt, "info")).read()
        h.check(("remote: %s" % name) in info and "store: S3 at %s" % st.endpoint in info and
                "region: us-east-1" in info and "credentials: AWS_ACCESS_KEY_ID" in info,
                "info does not name the object, store, region and credentials: %r" % info[:600])
        h.check(open(os.path.join(g.mnt, "model.gguf"), "rb").read() == data,
                "model.gguf differs from the object")
        texts = [info, open(os.path.join(g.mnt, "stats")).read(),
                 open(os.path.join(g.mnt, "info.json")).read(), proc_mounts()]
        g.stop(h, "by env")
        texts.append(g.stderr())
    finally:
        g.close()
    no_secret(h, "by env", texts)
    rc, out, err = harness.run_gguffs(["--dump", name])
    h.check(rc == 0 and out.decode().startswith("file:          %s" % name) and not err,
            "--dump %s: rc %d %r %r" % (name, rc, out[:100], err))


def mounts_by_profile(h, st, single, tmp):
    """Credentials and settings from profile files (AWS_PROFILE, and
    -o aws_profile over keys in the environment), a secret file readable by
    others warned about once, options instead of files."""
    name = "s3://models/%s" % os.path.basename(single)
    want = tensor_bytes(single)[-1]
    cred = os.path.join(tmp, "credentials")
    conf = os.path.join(tmp, "config")
    with open(cred, "w") as f:
        f.write("[swift]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                "[other]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
                % (s3store.ACCESS_KEY, PROFILE_SECRET, s3store.ACCESS_KEY, PROFILE_SECRET))
    os.chmod(cred, 0o600)
    with open(conf, "w") as f:
        f.write("[profile swift]\nregion = us-east-1\ns3 =\n    endpoint_url = %s\n"
                "    addressing_style = path\n[profile other]\nregion = us-east-1\n" % st.endpoint)
    files = {"AWS_SHARED_CREDENTIALS_FILE": cred, "AWS_CONFIG_FILE": conf}
    env = st.env(**files)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        env.pop(k)
    env["AWS_PROFILE"] = "swift"
    for lab, opts, e in (
            ("AWS_PROFILE", [], env),
            # -o aws_profile: the environment's (wrong) keys are not looked at
            ("-o aws_profile", ["-o", "aws_profile=other", "-o", "s3_endpoint=%s" % st.endpoint],
             st.env(AWS_ACCESS_KEY_ID="wrong", AWS_SECRET_ACCESS_KEY="wrong", **files)),
            # options alone: endpoint, region, addressing
            ("options", ["-o", "s3_endpoint=%s" % st.endpoint, "-o", "s3_region=us-east-1",
                         "-o", "s3_addressing=path"], st.env())):
        g = Gguffs(name, opts, env=e)
        try:
            fname, raw = want
            h.check(read_file(os.path.join(g.mnt, "tensors", fname, "raw")) == raw,
                    "profile %s: %s/raw differs" % (lab, fname))
            info = open(os.path.join(g.mnt, "info")).read()
            who = {"AWS_PROFILE": "profile 'swift'", "-o aws_profile": "profile 'other'",
                   "options": "AWS_ACCESS_KEY_ID"}[lab]
            h.check("credentials: %s" % who in info, "profile %s: info: %r" % (lab, info[:500]))
            texts = [info, proc_mounts()]
            g.stop(h, "profile %s" % lab)
            texts.append(g.stderr())
            h.check("warning" not in g.stderr(), "profile %s: a warning: %r" % (lab, g.stderr()))
        finally:
            g.close()
        no_secret(h, "profile %s" % lab, texts)
    # readable by others: one warning line, the mount goes on
    os.chmod(cred, 0o644)
    g = Gguffs(name, [], env=env)
    try:
        g.stop(h, "profile 0644")
        err = g.stderr()
        warn = [ln for ln in err.splitlines() if "warning" in ln]
        h.check(len(warn) == 1 and cred in warn[0] and "readable" in warn[0] and PROFILE_SECRET not in err,
                "a credentials file of mode 0644: want one warning line naming it: %r" % err)
    finally:
        g.close()
    os.chmod(cred, 0o600)
    one_line(h, "a profile in neither file", name, [], dict(env, AWS_PROFILE="nosuch"),
             "profile 'nosuch'", "neither")


def anonymous(h, st, single):
    """No credentials: unsigned requests.  A public container (put-bucket-acl
    public-read: Swift's X-Container-Read .r:*) is read through Swift's own
    API; a private one is refused."""
    data = open(single, "rb").read()
    env = st.env(AWS_ENDPOINT_URL=st.swift_endpoint)
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        env.pop(k)
    g = Gguffs("s3://public/%s" % os.path.basename(single), [], env=env)
    try:
        h.check(open(os.path.join(g.mnt, "model.gguf"), "rb").read() == data,
                "anonymous: model.gguf of the public container differs")
        info = open(os.path.join(g.mnt, "info")).read()
        h.check("credentials: no credentials (anonymous)" in info, "anonymous: info: %r" % info[:500])
        g.stop(h, "anonymous")
    finally:
        g.close()
    one_line(h, "anonymous, a private container", "s3://models/%s" % os.path.basename(single), [],
             env, "HTTP 401")


def errors(h, st, single):
    """The errors a user can act on: one line each, exit 1, quoting the
    store's Code and Message."""
    name = "s3://models/%s" % os.path.basename(single)
    env = dict(os.environ)
    one_line(h, "wrong secret", name, [], dict(env, AWS_SECRET_ACCESS_KEY="wrong-secret"),
             "the credentials of AWS_ACCESS_KEY_ID were refused", "SignatureDoesNotMatch: The request "
             "signature we calculated")
    # (Swift's tempauth answers SignatureDoesNotMatch where AWS says InvalidAccessKeyId)
    one_line(h, "unknown access key", name, [], dict(env, AWS_ACCESS_KEY_ID="nobody:x"),
             "the credentials of AWS_ACCESS_KEY_ID were refused")
    one_line(h, "no permission", name, [],
             dict(env, AWS_ACCESS_KEY_ID=s3store.NOBODY_KEY, AWS_SECRET_ACCESS_KEY=s3store.NOBODY_SECRET),
             "access to key '%s' of bucket 'models' denied" % os.path.basename(single), r"AccessDenied: ")
    one_line(h, "missing key", "s3://models/missing.gguf", [], env,
             "no key 'missing.gguf' in bucket 'models'", r"NoSuchKey: The specified key does not exist")
    one_line(h, "missing bucket", "s3://nobucket/m.gguf", [], env,
             "no bucket 'nobucket'", r"NoSuchBucket: ")
    one_line(h, "expired token", name, [], dict(env, AWS_SESSION_TOKEN=OLD_TOKEN),
             "session token of AWS_ACCESS_KEY_ID has expired", r"ExpiredToken: The provided token has expired",
             "mount again")
    one_line(h, "refused token", name, [], dict(env, AWS_SESSION_TOKEN="not-a-token"),
             "session token of AWS_ACCESS_KEY_ID was refused", "InvalidToken")
    # a session token the store accepts: signed with it, and read
    with harness.mounted(name, [], env=dict(env, AWS_SESSION_TOKEN=GOOD_TOKEN)) as g:
        info = open(os.path.join(g.mnt, "info")).read()
        h.check("with a session token" in info and GOOD_TOKEN not in info, "session token: info %r" % info[:400])
    one_line(h, "bad option", name, ["-o", "s3_addressing=sideways"], env, "path or virtual",
             named=False)
    one_line(h, "bad name", "s3://models", [], env, "no key")
    with Nginx(os.path.dirname(single)) as ng:
        one_line(h, "not an S3 server", name, [], dict(env, AWS_ENDPOINT_URL=ng.base),
                 "HTTP 404", "no S3 error document", re.escape(ng.base))


def region(h, st, single):
    """A bucket in another region than asked: asked there once, info says so."""
    name = "s3://models/%s" % os.path.basename(single)
    before = len(st.requests())
    with harness.mounted(name, [], env=dict(os.environ, AWS_REGION="eu-west-3")) as g:
        ready = read_stats(g.mnt).get("remote_requests")
        info = open(os.path.join(g.mnt, "info")).read()
        h.check("region: us-east-1 (the bucket's" in info and "eu-west-3" in info,
                "region: info does not say the bucket's region was followed: %r" % info[:600])
    at_store = len(st.requests()) - before
    h.check(ready == 2 and at_store == 2, "region: mount to ready in %r requests (%d at the store), "
            "want 2: one per region" % (ready, at_store))


def tensor_bytes(path):
    import checks
    exp = checks.Expect(path)
    with open(path, "rb") as f:
        return [(n.decode() if isinstance(n, bytes) else n, exp.raw(f, off, nb))
                for n, _, _, _, _, off, nb in exp.tensors]


def store_gone(h, st, single):
    """The store stopped mid-read: the read fails with EIO (after the
    retries), the mount stays; once the store is back the same open file
    reads the right bytes."""
    name = "s3://models/%s" % os.path.basename(single)
    fname, raw = max(tensor_bytes(single), key=lambda t: len(t[1]))
    with harness.mounted(name, SMALL_CACHE + ["-o", "timeout=5"]) as g:
        p = os.path.join(g.mnt, "tensors", fname, "raw")
        fd = os.open(p, os.O_RDONLY)
        try:
            # no kernel readahead: the end of the file stays unread
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            first = os.pread(fd, 64 << 10, 0)
            h.check(first == raw[:64 << 10], "store gone: the first block")
            st.stop_proxy()
            try:
                os.pread(fd, 64 << 10, len(raw) - (64 << 10))
                h.fail("store gone: a read of an uncached block succeeded")
            except OSError as e:
                h.check(e.errno == errno.EIO, "store gone: %s, want EIO" % e)
            st.start_proxy()
            got = os.pread(fd, len(raw), 0)
            h.check(got == raw, "store back: the same open file reads %d wrong or missing bytes"
                    % (sum(a != b for a, b in zip(got, raw)) + abs(len(got) - len(raw))))
        finally:
            os.close(fd)
        log = g.stderr()
    h.check(re.search(re.escape(name) + r": cannot connect.*\(reading bytes", log),
            "store gone: no log line naming the object and the failure: %r" % log[-500:])


def replaced(h, st, single, tmp):
    """The object replaced in the store while mounted (same size, one
    tensor changed): cached bytes are served, uncached ones read EIO, never
    bytes of the new version; a new mount reads the new one."""
    name = "s3://models/replaced.gguf"
    st.put("models", "replaced.gguf", single)
    tb = tensor_bytes(single)
    data = bytearray(open(single, "rb").read())
    fname, raw = tb[-1]
    off = data.find(raw)
    data[off:off + 16] = bytes(16)
    newp = os.path.join(tmp, "replaced.gguf")
    with open(newp, "wb") as f:
        f.write(data)
    with harness.mounted(name, SMALL_CACHE) as g:
        # bytes of the first 2 MiB, held since the mount (no read ahead
        # towards the last tensor)
        first, fraw = tb[0]
        fd = os.open(os.path.join(g.mnt, "tensors", first, "raw"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            h.check(os.pread(fd, 64 << 10, 0) == fraw[:64 << 10], "replaced: first read")
        finally:
            os.close(fd)
        st.put("models", "replaced.gguf", newp)
        for attempt in (1, 2):
            try:
                got = read_file(os.path.join(g.mnt, "tensors", fname, "raw"))
                h.check(got == raw, "replaced: WRONG BYTES (a mix of versions) in %s/raw" % fname)
                h.fail("replaced: %s/raw read without an error after the object was replaced" % fname)
            except OSError as e:
                h.check(e.errno == errno.EIO, "replaced: read %d: %s, want EIO" % (attempt, e))
    with mount(name) as mnt:
        h.check(read_file(os.path.join(mnt, "tensors", fname, "raw")) == bytes(data[off:off + len(raw)]),
                "replaced: a new mount does not read the new version")


def split(h, ggml, shards, written):
    """The first shard's name mounts all three; raw and f32 of each tensor."""
    with mount("s3://models/%s" % os.path.basename(shards[0])) as mnt:
        names = sorted(os.listdir(os.path.join(mnt, "tensors")))
        h.check(names == sorted(written), "split: tensors %r" % names)
        for tname, (t, raw) in written.items():
            got = read_file(os.path.join(mnt, "tensors", tname, "raw"))
            h.check(got == raw, "split: %s/raw differs" % tname)
            if ggml.has_to_float(t):
                f = np.fromfile(os.path.join(mnt, "tensors", tname, "f32"), np.uint32)
                h.check(np.array_equal(f, ggml.dequant(t, raw).view(np.uint32)), "split: %s/f32" % tname)
        info = open(os.path.join(mnt, "info")).read()
        h.check("split model of 3 shards" in info and "s3://models/split-00002-of-00003.gguf" in info,
                "split: info does not name the shards: %r" % info[:400])
    one_line(h, "a missing shard", "s3://models/split-00001-of-00004.gguf", [], None, "shard|NoSuchKey")


def overlay(h, st, single, tmp):
    """-o overlay: an edit lands in the local file; model.gguf is the
    edited model with every tensor byte of the object; a remount shows it."""
    import pyreader
    name = "s3://models/%s" % os.path.basename(single)
    ov = os.path.join(tmp, "edits.overlay")
    out = os.path.join(tmp, "edited.gguf")
    with mount(name, ["-o", "overlay=%s" % ov]) as mnt:
        with open(os.path.join(mnt, "meta", "general.name"), "w") as f:
            f.write("edited in s3\n")
        shutil.copyfile(os.path.join(mnt, "model.gguf"), out)
    m = pyreader.read(out)
    kv = {k.key: k.value for k in m.kvs}
    h.check(kv.get(b"general.name") in ("edited in s3", b"edited in s3"),
            "overlay: model.gguf general.name %r" % kv.get(b"general.name"))
    with open(out, "rb") as f:
        for (tname, raw), t in zip(tensor_bytes(single), m.tensors):
            f.seek(m.data_offset + t.offset)
            h.check(f.read(len(raw)) == raw, "overlay: %s in model.gguf" % tname)
    with mount(name, ["-o", "overlay=%s" % ov]) as mnt:
        h.check(open(os.path.join(mnt, "meta", "general.name")).read() == "edited in s3\n",
                "overlay: the remount does not show the edit")
    os.unlink(out)


def disk_cache(h, st, single, tmp):
    """-o cache_dir: a second mount reads every tensor from the disk cache:
    its only request is the mount's."""
    name = "s3://models/%s" % os.path.basename(single)
    cdir = os.path.join(tmp, "dcache")
    tb = tensor_bytes(single)
    for round_ in (1, 2):
        with mount(name, ["-o", "cache_dir=%s" % cdir]) as mnt:
            ready = read_stats(mnt).get("remote_requests", 0)
            for tname, raw in tb:
                h.check(read_file(os.path.join(mnt, "tensors", tname, "raw")) == raw,
                        "disk cache round %d: %s/raw" % (round_, tname))
            s = read_stats(mnt)
            if round_ == 2:
                h.check(s["remote_requests"] == ready,
                        "disk cache: the second mount made %d requests for tensors"
                        % (s["remote_requests"] - ready))


def slowdown(h, st, single):
    """503 SlowDown (Retry-After: 0) twice: retried, right bytes."""
    fname, raw = tensor_bytes(single)[-1]
    with mount("s3://models/%s" % os.path.basename(single)) as mnt:
        before = read_stats(mnt)
        st.slowdown(2)
        h.check(read_file(os.path.join(mnt, "tensors", fname, "raw")) == raw, "SlowDown: bytes")
        after = read_stats(mnt)
        h.check(after["remote_retries"] - before["remote_retries"] >= 2,
                "SlowDown: %d retries, want >= 2" % (after["remote_retries"] - before["remote_retries"]))
    st.slowdown(0)


def _reader(args):
    mnt, names = args
    import hashlib
    out = {}
    for n in names:
        out[n] = hashlib.sha256(read_file(os.path.join(mnt, "tensors", n, "raw"), 128 << 10)).hexdigest()
    return out


def four_nodes(h, st, single):
    """4 gguffs processes mount the same object at once ("nodes": each its
    own caches); 4 readers read disjoint and overlapping tensors, one per
    mount; every byte right; the store's request count printed."""
    import hashlib
    name = "s3://models/%s" % os.path.basename(single)
    tb = tensor_bytes(single)
    want = {n: hashlib.sha256(raw).hexdigest() for n, raw in tb}
    names = [n for n, _ in tb]
    before = len(st.requests())
    gs = []
    try:
        for _ in range(4):
            gs.append(Gguffs(name, SMALL_CACHE))
        # node i: its quarter (disjoint), and the next node's first tensor (overlap)
        jobs = [(g.mnt, names[i::4] + names[(i + 1) % 4::4][:1]) for i, g in enumerate(gs)]
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(4) as pool:
            results = pool.map(_reader, jobs)
        bad = [(i, n) for i, r in enumerate(results) for n, s in r.items() if s != want[n]]
        h.check(not bad, "4 nodes: wrong bytes in %r" % bad[:5])
        h.check(sorted({n for r in results for n in r}) == sorted(names), "4 nodes: not every tensor read")
        per = [read_stats(g.mnt) for g in gs]
        for i, g in enumerate(gs):
            g.stop(h, "node %d" % i)
    finally:
        for g in gs:
            g.close()
    reqs = st.requests()[before:]
    gets = [r for r in reqs if r["method"] == "GET" and r["path"] == "/models/%s" % os.path.basename(single)]
    print("4 nodes: the store answered %d requests (%d GETs of the object, %d bytes); per node: %s"
          % (len(reqs), len(gets), sum(r["bytes"] for r in gets),
             ", ".join("%d requests %d bytes" % (s["remote_requests"], s["remote_bytes"]) for s in per)))
    # (a fetch ahead may still have been on its way when a node's stats were read)
    h.check(len(gets) >= sum(s["remote_requests"] for s in per) > 0,
            "4 nodes: the store saw %d GETs, the nodes count %d" % (len(gets), sum(s["remote_requests"] for s in per)))


def gs_cases(h, single, tmp):
    """gs:// through STORAGE_EMULATOR_HOST: nginx's /gcs/ serves only with
    the bearer token (GOOGLE_OAUTH_ACCESS_TOKEN or -o bearer_token_file),
    its /files/ anyone; HF_TOKEN is never sent there."""
    root = os.path.join(tmp, "gcs")
    os.makedirs(os.path.join(root, "bkt"))
    shutil.copyfile(single, os.path.join(root, "bkt", "m.gguf"))
    data = open(single, "rb").read()
    tokfile = os.path.join(tmp, "gcs-token")
    with open(tokfile, "w") as f:
        f.write(Nginx.GCS_TOKEN + "\n")
    with Nginx(root) as ng:
        base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        private = dict(base, STORAGE_EMULATOR_HOST=ng.base + "/gcs")
        for lab, env, opts in (("GOOGLE_OAUTH_ACCESS_TOKEN", dict(private, GOOGLE_OAUTH_ACCESS_TOKEN=Nginx.GCS_TOKEN), []),
                               ("bearer_token_file", private, ["-o", "bearer_token_file=%s" % tokfile]),
                               ("public", dict(base, STORAGE_EMULATOR_HOST=ng.base.replace("http://", "") + "/files",
                                               HF_TOKEN="hf_not_for_google"), [])):
            mark = ng.mark()
            g = Gguffs("gs://bkt/m.gguf", opts, env=env)
            try:
                h.check(open(os.path.join(g.mnt, "model.gguf"), "rb").read() == data, "gs %s: model.gguf" % lab)
                info = open(os.path.join(g.mnt, "info")).read()
                who = "none (anonymous)" if lab == "public" else "a bearer token"
                h.check("remote: gs://bkt/m.gguf" in info and "Cloud Storage" in info and
                        "credentials: %s" % who in info, "gs %s: info %r" % (lab, info[:300]))
                texts = [info, proc_mounts()]
                g.stop(h, "gs %s" % lab)
                texts.append(g.stderr())
            finally:
                g.close()
            no_secret(h, "gs %s" % lab, texts)
            reqs = ng.requests_since(mark)
            auth = "no" if lab == "public" else "yes"
            h.check(reqs and all(r["auth"] == auth and r["status"] in (200, 206) for r in reqs),
                    "gs %s: want Authorization %s on every request: %r" % (lab, auth, reqs))
        one_line(h, "gs without a token", "gs://bkt/m.gguf", [], private, "HTTP 401: AuthenticationRequired",
                 "no token was given")
        one_line(h, "gs with a wrong token", "gs://bkt/m.gguf", [], dict(private, GOOGLE_OAUTH_ACCESS_TOKEN="wrong"),
                 "HTTP 401: AuthenticationRequired")
        one_line(h, "gs missing object", "gs://bkt/missing.gguf", [], dict(base, STORAGE_EMULATOR_HOST=ng.base + "/files"),
                 "HTTP 404")
        one_line(h, "gs with s3 options", "gs://bkt/m.gguf", ["-o", "s3_region=us-east-1"], base,
                 "options of s3://", named=False)


# ---------------------------------------------------------------- main

def main():
    harness.require_fuse()
    harness.gguffs_bin()
    missing = s3store.have_swift() or remote.have_nginx()
    if missing:
        harness.skip_or_fail(missing)
    harness.require_oracle()
    import ggml
    tmp = tempfile.mkdtemp(prefix="gguffs-s3-")
    try:
        return run(tmp, ggml)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp, ggml):
    root = os.path.join(tmp, "root")
    os.mkdir(root)
    single, shards, written = generated(root, ggml)
    h = Harness("s3")
    with SwiftS3(valid_tokens=[GOOD_TOKEN], expired_tokens=[OLD_TOKEN]) as st:
        try:
            st.make_bucket("models")
            st.make_bucket("public", public=True)
            st.put_dir("models", root)
            st.put("public", os.path.basename(single), single)
            # gguffs' environment from here on: the store, the test user, no files
            env = st.env(AWS_ENDPOINT_URL=st.endpoint)
            os.environ.clear()
            os.environ.update(env)
            import checks
            checks.check_model(h, "s3://models/%s" % os.path.basename(single), "s3 gen.gguf",
                               expect=checks.Expect(single, h, "gen.gguf"))
            for lab, fn, args in (("mounts by env", mounts_by_env, (h, st, single)),
                                  ("mounts by profile and options", mounts_by_profile, (h, st, single, tmp)),
                                  ("anonymous", anonymous, (h, st, single)),
                                  ("errors", errors, (h, st, single)),
                                  ("region", region, (h, st, single)),
                                  ("split model", split, (h, ggml, shards, written)),
                                  ("overlay", overlay, (h, st, single, tmp)),
                                  ("disk cache", disk_cache, (h, st, single, tmp)),
                                  ("SlowDown", slowdown, (h, st, single)),
                                  ("4 nodes", four_nodes, (h, st, single)),
                                  ("store gone mid-read", store_gone, (h, st, single)),
                                  ("object replaced", replaced, (h, st, single, tmp))):
                with h.case(lab):
                    fn(*args)
            print("the store answered %d client requests in all" % len(st.requests()))
        except BaseException:
            print("--- the store's log:\n%s" % st.log_tail(80))
            raise
        if st.overflow or st.expired:
            h.fail("the store was stopped by its bounds (overflow %s, expired %s)" % (st.overflow, st.expired))
    with h.case("gs://"):
        gs_cases(h, single, tmp)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

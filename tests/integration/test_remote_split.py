#!/usr/bin/python3
# Remote split models: the URL of one shard opens all of them with their first requests in flight together (proved by a rendezvous in the fault proxy, not by timing), over plain URLs and hub-like redirects; a missing shard is named, and the first failure in shard order is the one reported.
"""
A 5-shard model written by tests/oracle/gguf_write.py, served by
tests/integration/remote.py's Nginx behind its FaultProxy.

Parallelism is counted, not timed: a "gate" rule holds the first request
of each shard's path until the first requests of all 5 shards have come
(bounded: GATE_WAIT seconds, then it lets them through and counts a
timeout).  Opening the shards one after another, the first request would
wait out the gate alone: every request then passes by timeout, and the
test fails on rule.timeouts.  The mount's own timeout is longer than the
gate's, so that case fails on the count, not on a refused mount.
"""
import os
import random
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
from harness import Harness, mount  # noqa: E402
from remote import FaultProxy, Nginx, Rule  # noqa: E402

sys.path.insert(0, os.path.join(harness.SRC, "tests", "oracle"))
from gguf_write import GGUFWriter  # noqa: E402

N = 5
GATE_WAIT = 20.0            # the rendezvous' bound (seconds)
MOUNT_OPTS = ["-o", "timeout=60"]


def shard_name(k, n=N, prefix="split"):
    return "%s-%05d-of-%05d.gguf" % (prefix, k, n)


def write_split(root, prefix="split"):
    """N shards, two f32 tensors each; returns {tensor name: raw bytes}."""
    rnd = random.Random(7)
    written = {}
    for i in range(N):
        w = GGUFWriter()
        if i == 0:
            w.add("general.architecture", "string", "llama")
            w.add("general.name", "string", "remote-split")
            w.add("split.tensors.count", "i32", 2 * N)
        w.add("split.no", "u16", i)
        w.add("split.count", "u16", N)
        for j in range(2):
            name = "s%d.w%d" % (i, j)
            raw = bytes(rnd.randrange(256) for _ in range(4 * 64 * (3 + j)))
            w.add_tensor(name, "f32", [64, 3 + j], data=raw)
            written[name] = raw
        w.write(os.path.join(root, shard_name(i + 1, prefix=prefix)))
    return written


def refuse(url, opts=()):
    """(rc, stderr text, mounted) of gguffs URL MNT expected to fail."""
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, _, err = harness.run_gguffs(list(opts) + [url, mnt], timeout=harness.MOUNT_WAIT)
        return rc, err.decode(errors="replace"), harness.is_mounted(mnt)
    finally:
        harness.unmount(mnt)
        os.rmdir(mnt)


def check_tree(h, mnt, written, label):
    names = sorted(os.listdir(os.path.join(mnt, "tensors")))
    h.check(names == sorted(written), "%s: tensors %r" % (label, names))
    for name, raw in written.items():
        got = open(os.path.join(mnt, "tensors", name, "raw"), "rb").read()
        h.check(got == raw, "%s: %s/raw differs" % (label, name))
    info = open(os.path.join(mnt, "info")).read()
    h.check("split model of %d shards" % N in info, "%s: info does not name the shards" % label)


def gated(h, ng, written, label, url_of, gate_path, per_shard):
    """Mounts url_of(px, shard) behind a gate on gate_path: all N first
    requests must be in flight together.  per_shard: the requests each
    shard's open should cost (1, or 2 with a redirect)."""
    gate = Rule("gate", path=gate_path, count=N, wait=GATE_WAIT)
    with FaultProxy(ng.base, [gate]) as px:
        with mount(url_of(px, 1), MOUNT_OPTS) as mnt:
            log = px.requests()
            h.check(gate.opened == N and gate.timeouts == 0,
                    "%s: the shards' first requests were not all in flight together "
                    "(gate: %d let through together, %d after waiting %.0f s alone)"
                    % (label, gate.opened, gate.timeouts, GATE_WAIT))
            h.check(len(log) == N * per_shard,
                    "%s: %d requests to open %d shards, want %d: %r"
                    % (label, len(log), N, N * per_shard, [(e["path"], e["range"]) for e in log]))
            check_tree(h, mnt, written, label)


def run(tmp):
    root = os.path.join(tmp, "root")
    os.mkdir(root)
    written = write_split(root)
    h = Harness("remote-split")
    with Nginx(root) as ng:
        with h.case("parallel shard opens"):
            gated(h, ng, written, "plain URLs", lambda px, k: px.url(shard_name(k)),
                  r"^/files/split-\d{5}-of-%05d\.gguf$" % N, 1)
        with h.case("parallel shard opens, named by shard 3"):
            gate = Rule("gate", path=r"-of-%05d\.gguf$" % N, count=N, wait=GATE_WAIT)
            with FaultProxy(ng.base, [gate]) as px, \
                    mount(px.url(shard_name(3)), MOUNT_OPTS) as mnt:
                h.check(gate.opened == N and gate.timeouts == 0,
                        "shard 3's URL: not all in flight together (%d, %d)"
                        % (gate.opened, gate.timeouts))
                check_tree(h, mnt, written, "shard 3's URL")
        with h.case("parallel shard opens through redirects"):
            # hub-like: /resolve/ 302s to a presigned /cdn/G/ URL per shard;
            # the gate is on the second hop, so the redirects too were
            # followed side by side
            gated(h, ng, written, "redirects", lambda px, k: px.resolve_url(shard_name(k)),
                  r"^/cdn/\d+/files/split-\d{5}-of-%05d\.gguf$" % N, 2)
        with h.case("a missing shard"):
            os.rename(os.path.join(root, shard_name(3)), os.path.join(tmp, "away"))
            try:
                url = ng.url(shard_name(1))
                rc, err, mounted = refuse(url)
                h.check(rc != 0 and not mounted and err.count("\n") == 1
                        and "shard 3 of %d is missing" % N in err and ng.url(shard_name(3)) in err,
                        "shard 3 missing: rc %d %r" % (rc, err))
                # shards 2 and 4 missing, shard 2's answer held back: the
                # message still names shard 2 (the first in shard order)
                os.rename(os.path.join(root, shard_name(2)), os.path.join(tmp, "away2"))
                slow = Rule("slow", path=r"-00002-of-", phase="headers", stall=2, times=1)
                with FaultProxy(ng.base, [slow]) as px:
                    url = px.url(shard_name(1))
                    rc, err, mounted = refuse(url)
                    h.check(rc != 0 and not mounted and err.count("\n") == 1
                            and "shard 2 of %d is missing" % N in err
                            and px.url(shard_name(2)) in err,
                            "shards 2 and 3 missing, 2 slow: rc %d %r" % (rc, err))
                    h.check(slow.applied == 1, "the slow rule was not applied: %r" % px.requests())
                    # nothing past the first failure is asked twice, and
                    # no more shards than fit in flight were asked at all
                    paths = [e["path"] for e in px.requests()]
                    h.check(all(paths.count(p) <= 2 for p in paths), "requests: %r" % paths)
                os.rename(os.path.join(tmp, "away2"), os.path.join(root, shard_name(2)))
            finally:
                os.rename(os.path.join(tmp, "away"), os.path.join(root, shard_name(3)))
        with h.case("a URL naming more shards than there are"):
            # the file says 5 shards, the name 9: refused as before, after
            # the shards' opens that were started are closed
            shutil.copyfile(os.path.join(root, shard_name(1)), os.path.join(root, shard_name(1, 9)))
            url = ng.url(shard_name(1, 9))
            rc, err, mounted = refuse(url)
            h.check(rc != 0 and not mounted and err.count("\n") == 1
                    and re.search(r"split\.count is 5", err), "name says 9: rc %d %r" % (rc, err))
    return h.finish()


def main():
    harness.require_fuse()
    harness.gguffs_bin()
    missing = remote.have_nginx()
    if missing:
        harness.skip_or_fail(missing)
    tmp = tempfile.mkdtemp(prefix="gguffs-rsplit-")
    try:
        return run(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

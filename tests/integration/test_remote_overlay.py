#!/usr/bin/python3
# Edits of a remote model into a local overlay (-o overlay=FILE) against nginx on loopback: set, create, delete, rename through meta/, model.gguf = edited header + remote tensor bytes (ggml loads it, every tensor byte equal), remount shows the edits, overlays of another model or damaged ones refused with their offset, EROFS without an overlay, versions kept by open handles, split models, and kill -9 during overlay commits (old or new afterwards, never anything else).
"""
    test_remote_overlay.py [--trials N] [--crash-only] [--seed S] [--verbose]

Served by tests/integration/remote.py's Nginx.  The expected values come
from the generated files.  The crash trials (default 10, GGUFFS_TEST_QUICK:
6; scripts/overlay-crash-test runs 120): each one mounts the remote model
with the overlay, has a child write tokenizer.chat_template (toggling
between a short and a ~256 KB text, so the header changes size) and close
it, kills gguffs with SIGKILL after a random delay in [0, 1.2 x the
measured close() time] (stratified), and checks that the overlay file is
byte for byte the old or the new version (both learned from unkilled
commits) and that a new mount shows that version; a close() that returned
0 must have left the new one.
"""
import argparse
import errno
import os
import random
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import remote  # noqa: E402
from harness import Gguffs, Harness, mounted  # noqa: E402
from remote import Nginx  # noqa: E402

TYPES = ["f32", "f16", "q4_0", "q8_0", "q4_K", "q6_K"]
NEW_SUFFIX = ".gguffs-new"
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def cksum(b):
    """gguf/journal.c gguf_cksum, independently."""
    mul, mask = 0x9E3779B97F4A7C15, (1 << 64) - 1
    h = 0xCBF29CE484222325 ^ len(b)
    n8 = len(b) - len(b) % 8
    for i in range(0, n8, 8):
        h = ((h ^ int.from_bytes(b[i:i + 8], "little")) * mul) & mask
        h ^= h >> 29
    for c in b[n8:]:
        h = ((h ^ c) * mul) & mask
        h ^= h >> 29
    h = ((h ^ (h >> 32)) * mul) & mask
    return h ^ (h >> 29)


def parse_overlay(data):
    """The fields of an intact overlay file (gguf/overlay.h), or a string
    saying what is wrong."""
    if len(data) < 64 or data[:8] != b"GGUFFSOV":
        return "no record"
    le = lambda a, n: int.from_bytes(data[a:a + n], "little")  # noqa: E731
    if le(56, 8) != cksum(data[:56]):
        return "record checksum"
    if le(48, 8) != cksum(data[64:]):
        return "payload checksum"
    idl, nl, hl = le(12, 4), le(40, 4), le(32, 8)
    if le(8, 4) != 1 or len(data) != 64 + idl + nl + hl:
        return "lengths"
    return {"identity": data[64:64 + idl].decode(), "name": data[64 + idl:64 + idl + nl].decode(),
            "base_size": le(16, 8), "base_data": le(24, 8), "header": data[64 + idl + nl:]}


def reseal(data):
    """data with both checksums made right again (a hostile overlay)."""
    b = bytearray(data)
    b[48:56] = cksum(bytes(b[64:])).to_bytes(8, "little")
    b[56:64] = cksum(bytes(b[:56])).to_bytes(8, "little")
    return bytes(b)


def generated(root, ggml):
    kvs = [("general.architecture", "string", "llama"), ("general.name", "string", "remote"),
           ("general.description", "string", "to be deleted"), ("general.alignment", "u32", 32),
           ("llama.context_length", "u32", 4096),
           ("tokenizer.ggml.scores", "array[f32]", [0.5, 1.5, -2.0]),
           ("tokenizer.ggml.tokens", "array[string]", ["tok%d" % i for i in range(20000)]),
           ("tokenizer.chat_template", "string", TEMPLATE)]
    tensors = [("blk.%d.%s" % (i, t), t, [4096, 48]) for i, t in enumerate(TYPES)]
    single = os.path.join(root, "gen.gguf")
    ggml.write_model(single, kvs, tensors, seed=3)
    other = os.path.join(root, "other.gguf")
    ggml.write_model(other, kvs[:4], tensors[:2], seed=4)
    n = 3
    shards, written = [], {}
    for i in range(n):
        skv = (list(kvs[:5]) if i == 0 else []) + [("split.no", "u16", i), ("split.count", "u16", n)]
        if i == 0:
            skv.append(("split.tensors.count", "i32", 2 * n))
        ts = [("s%d.w%d" % (i, k), TYPES[(2 * i + k) % len(TYPES)], [1024, 40 + k]) for k in range(2)]
        p = os.path.join(root, "split-%05d-of-%05d.gguf" % (i + 1, n))
        for name, t, ne, raw, _ in ggml.write_model(p, skv, ts, seed=10 + i):
            written[name.decode()] = raw
        shards.append(p)
    return single, other, shards, written


def data_section(path, ggml):
    m = ggml.read_gguf(path)
    with open(path, "rb") as f:
        f.seek(m.data_offset)
        return m, f.read()


def kv(m, key):
    for k, t, v in m.kvs:
        if k == key.encode():
            return t, v
    return None


def write(path, text):
    """open, write, close: the errno of the first step that fails, or 0."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o644)
    except OSError as e:
        return e.errno
    try:
        os.write(fd, text.encode())
    except OSError as e:
        try:
            os.close(fd)
        except OSError:
            pass
        return e.errno
    try:
        os.close(fd)
    except OSError as e:
        return e.errno
    return 0


def refused(h, label, args, overlay, want_offset=None, want=None):
    """gguffs args refuses the overlay: exit 1, one line
    'gguffs: OVERLAY: what (at byte offset N)', nothing mounted."""
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, _, err = harness.run_gguffs(list(args) + [mnt], timeout=harness.MOUNT_WAIT)
        text = err.decode(errors="replace")
        mounted_ = harness.is_mounted(mnt)
        lines = text.rstrip("\n").split("\n")
        m = harness.ERROR_LINE.match(lines[0]) if len(lines) == 1 else None
        h.check(rc == 1 and not mounted_, "%s: exit %d (want 1), mounted %s" % (label, rc, mounted_))
        if h.check(m is not None, "%s: want one line 'gguffs: OVERLAY: ... (at byte offset N)', got %r"
                   % (label, text[:400])):
            h.check(m.group(1) == os.path.realpath(overlay), "%s: the line names %r, not the overlay %r"
                    % (label, m.group(1), overlay))
            if want_offset is not None:
                h.check(int(m.group(3)) == want_offset, "%s: offset %s, want %d: %r"
                        % (label, m.group(3), want_offset, lines[0]))
            if want:
                h.check(re.search(want, m.group(2), re.I), "%s: %r does not say %r" % (label, lines[0], want))
        return text
    finally:
        harness.unmount(mnt)
        os.rmdir(mnt)


# ---- the cases ----------------------------------------------------------------------

def edits(h, ng, ggml, single, ov, tmp):
    """Edits through the mount, model.gguf, versions kept by open handles."""
    url = ng.url(os.path.basename(single))
    orig = open(single, "rb").read()
    om, odata = data_section(single, ggml)
    long_tmpl = "{# %s #}" % ("x" * 20000) + TEMPLATE
    with mounted(url, ["-o", "overlay=" + ov]) as g:
        mnt = g.mnt
        meta = os.path.join(mnt, "meta")
        info = open(os.path.join(mnt, "info")).read()
        h.check("\noverlay: %s\n" % os.path.realpath(ov) in info, "info has no 'overlay: PATH' line: %r"
                % info[:400])
        h.check(not os.path.exists(ov), "the overlay exists before the first edit")
        h.check(os.access(os.path.join(meta, "general.name"), os.W_OK), "meta/ is not writable")
        # handles opened before the edits keep their version
        fd_model = os.open(os.path.join(mnt, "model.gguf"), os.O_RDONLY)
        fd_info = os.open(os.path.join(mnt, "info"), os.O_RDONLY)
        try:
            h.check(write(os.path.join(meta, "llama.context_length"), "8192\n") == 0, "set a u32")
            h.check(os.path.exists(ov), "no overlay after the first edit")
            h.check(write(os.path.join(meta, "tokenizer.chat_template"), long_tmpl) == 0,
                    "set the chat template (the header grows)")
            h.check(write(os.path.join(meta, "tokenizer.ggml.scores"), "0.25\n-1\n3\n7\n") == 0, "set an array")
            h.check(write(os.path.join(meta, "general.note"), "hello\n") == 0, "create a key")
            try:
                os.unlink(os.path.join(meta, "general.description"))
                os.rename(os.path.join(meta, "general.name"), os.path.join(meta, "general.basename"))
            except OSError as e:
                h.fail("delete / rename: %s" % e)
            # refused edits change nothing
            before = open(ov, "rb").read()
            h.check(write(os.path.join(meta, "llama.context_length"), "abc\n") == errno.EINVAL,
                    "a u32 set to 'abc' is not EINVAL")
            h.check(write(os.path.join(meta, "llama.context_length"), "99999999999\n") == errno.EINVAL,
                    "an out-of-range u32 is not EINVAL")
            h.check(write(os.path.join(meta, "Bad-Name"), "1\n") == errno.EINVAL, "a bad new key name is not EINVAL")
            h.check(write(os.path.join(meta, "general.alignment"), "64\n") == errno.EPERM,
                    "setting general.alignment is not EPERM")
            try:
                os.rename(os.path.join(meta, "general.architecture"), os.path.join(meta, "general.alignment"))
                h.fail("rename onto general.alignment allowed")
            except OSError as e:
                h.check(e.errno == errno.EPERM, "rename onto general.alignment: %s, want EPERM" % e)
            h.check(open(ov, "rb").read() == before, "a refused edit changed the overlay")
            # meta/ shows the edits
            names = sorted(os.listdir(meta))
            h.check("general.basename" in names and "general.name" not in names and
                    "general.description" not in names and "general.note" in names,
                    "meta/ after the edits: %r" % names)
            got = {k: open(os.path.join(meta, k)).read() for k in
                   ("llama.context_length", "tokenizer.ggml.scores", "general.note", "general.basename")}
            h.check(got == {"llama.context_length": "8192\n", "tokenizer.ggml.scores": "0.25\n-1\n3\n7\n",
                            "general.note": "hello\n", "general.basename": "remote\n"}, "meta/ values %r" % got)
            h.check(open(os.path.join(meta, "tokenizer.chat_template")).read() == long_tmpl + "\n"
                    or open(os.path.join(meta, "tokenizer.chat_template")).read() == long_tmpl,
                    "meta/tokenizer.chat_template")
            # the handles opened before: the original bytes, the original info
            size = os.fstat(fd_model).st_size
            h.check(size == len(orig), "model.gguf opened before the edits: size %d, want %d" % (size, len(orig)))
            h.check(os.pread(fd_model, len(orig) + 10, 0) == orig, "model.gguf opened before the edits "
                    "does not read the original model")
            old_info = os.pread(fd_info, 1 << 20, 0).decode()
            h.check("llama.context_length" in old_info and "general.description" in old_info,
                    "info opened before the edits does not show the old keys")
        finally:
            os.close(fd_model)
            os.close(fd_info)
        fixed = os.path.join(tmp, "fixed.gguf")
        shutil.copyfile(os.path.join(mnt, "model.gguf"), fixed)
        h.check(os.path.getsize(fixed) == os.stat(os.path.join(mnt, "model.gguf")).st_size,
                "model.gguf: st_size differs from the bytes read")
        stats = harness.read_stats(mnt)
        h.check(stats.get("remote_requests", 0) > 0, "stats: no remote_requests with an overlay: %r" % stats)
    # ggml reads the fixed model: the edits, and every tensor byte
    m = ggml.read_gguf(fixed)
    if h.check(m is not None, "ggml refuses the copied model.gguf: %s" % ggml.last_log()):
        h.check(kv(m, "llama.context_length") == ("u32", 8192), "ggml: llama.context_length %r"
                % (kv(m, "llama.context_length"),))
        h.check(kv(m, "tokenizer.chat_template") == ("string", long_tmpl.encode()), "ggml: chat template")
        t, v = kv(m, "tokenizer.ggml.scores") or (None, None)
        h.check(t == "array[f32]" and list(v.items) == [0.25, -1.0, 3.0, 7.0], "ggml: scores %r %r" % (t, v))
        h.check(kv(m, "general.note") == ("string", b"hello"), "ggml: general.note")
        h.check(kv(m, "general.basename") == ("string", b"remote") and kv(m, "general.name") is None
                and kv(m, "general.description") is None, "ggml: renamed / deleted keys")
        h.check(len(kv(m, "tokenizer.ggml.tokens")[1].items) == 20000, "ggml: the vocabulary")
        _, fdata = data_section(fixed, ggml)
        h.check(fdata == odata, "the tensor data of model.gguf differs from the remote's")
        h.check([(t.name, t.offset, t.nbytes) for t in m.tensors] ==
                [(t.name, t.offset, t.nbytes) for t in om.tensors], "ggml: tensor infos")
        h.check(m.data_offset > om.data_offset, "the header did not grow (%d -> %d)" % (om.data_offset, m.data_offset))
    # the overlay file itself
    p = parse_overlay(open(ov, "rb").read())
    if h.check(isinstance(p, dict), "the overlay does not parse: %s" % p):
        h.check(p["base_size"] == len(orig) and p["base_data"] == om.data_offset and
                p["identity"].startswith("etag:"), "overlay record %r" % {k: v for k, v in p.items() if k != "header"})
        h.check(p["header"] == open(fixed, "rb").read()[:len(p["header"])] and
                len(p["header"]) == m.data_offset, "the overlay's header is not model.gguf's")
    return fixed


def remount(h, ng, single, ov, fixed):
    url = ng.url(os.path.basename(single))
    fixed_bytes = open(fixed, "rb").read()
    ov_bytes = open(ov, "rb").read()
    with mounted(url, ["-o", "overlay=" + ov]) as g:
        h.check(open(os.path.join(g.mnt, "meta", "llama.context_length")).read() == "8192\n",
                "remount: the edit is not shown")
        h.check(open(os.path.join(g.mnt, "model.gguf"), "rb").read() == fixed_bytes,
                "remount: model.gguf differs from the copy made before")
        h.check(not g.stderr().strip(), "remount: stderr %r" % g.stderr())
    # read-only with the overlay: the edits, no writes
    with mounted(url, ["-o", "overlay=" + ov, "-o", "ro"]) as g:
        meta = os.path.join(g.mnt, "meta")
        h.check(open(os.path.join(meta, "general.note")).read() == "hello\n", "ro remount: edits not shown")
        h.check(write(os.path.join(meta, "general.note"), "x\n") == errno.EROFS, "ro remount: a write is not EROFS")
    # a leftover of an interrupted write is removed at mount; the overlay stays
    junk = ov + NEW_SUFFIX
    with open(junk, "wb") as f:
        f.write(b"GGUFFSOV half-written")
    os.chmod(ov, 0o600)
    with mounted(url, ["-o", "overlay=" + ov]) as g:
        h.check(not os.path.exists(junk), "a leftover %s is not removed at mount" % junk)
        h.check(open(os.path.join(g.mnt, "meta", "llama.context_length")).read() == "8192\n",
                "after a leftover: the edit is not shown")
        # an edit and its undo: the overlay keeps its mode
        meta = os.path.join(g.mnt, "meta", "llama.context_length")
        h.check(write(meta, "1\n") == 0 and write(meta, "8192\n") == 0, "edits after a remount")
        h.check(os.stat(ov).st_mode & 0o7777 == 0o600, "the overlay's mode changed: %o" % os.stat(ov).st_mode)
    h.check(open(ov, "rb").read() == ov_bytes, "an edit and its undo do not give the same overlay")


def two_mounts(h, ng, single, tmp):
    """Two read-write mounts of one overlay (one writer per
    file).  The overlay does not exist when both mount; the first edit
    creates it locked (an OFD write lock of the mount that wrote it), so
    the other mount's edits fail at open with EBUSY and change nothing, and
    a third read-write mount is refused (exit 1, one line naming the
    holder's pid).  Once the first is unmounted the other's edit finds the
    file changed since it read it and fails with EIO, changing nothing;
    that mount then shows the first one's version, and its next edit
    builds on it."""
    url = ng.url(os.path.basename(single))
    ov = os.path.join(tmp, "shared.overlay")
    a = Gguffs(url, ["-o", "overlay=" + ov])
    b = None
    try:
        b = Gguffs(url, ["-o", "overlay=" + ov])
        ma, mb = os.path.join(a.mnt, "meta"), os.path.join(b.mnt, "meta")
        h.check(write(os.path.join(ma, "general.name"), "from a\n") == 0, "two mounts: edit in a")
        before = open(ov, "rb").read()
        h.check(write(os.path.join(mb, "llama.context_length"), "77\n") == errno.EBUSY,
                "two mounts: b's edit while a holds the overlay is not EBUSY")
        h.check(open(ov, "rb").read() == before, "two mounts: b's refused edit changed the overlay")
        mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
        try:
            rc, _, err = harness.run_gguffs([url, "-o", "overlay=" + ov, mnt], timeout=60)
            text = err.decode(errors="replace").strip()
            h.check(rc == 1 and not harness.is_mounted(mnt) and
                    "another gguffs mounts it read-write (pid %d)" % a.pid in text,
                    "two mounts: a third rw mount of a's overlay: exit %d, %r" % (rc, text))
        finally:
            harness.unmount(mnt)
            os.rmdir(mnt)
        a.stop(h, "two mounts: a")
        h.check(write(os.path.join(mb, "llama.context_length"), "77\n") == errno.EIO,
                "two mounts: b's edit over a's overlay is not EIO")
        h.check(open(ov, "rb").read() == before, "two mounts: b's refused edit changed the overlay")
        h.check(open(os.path.join(mb, "general.name")).read() == "from a\n",
                "two mounts: b does not show a's edit after its refused one")
        h.check(write(os.path.join(mb, "llama.context_length"), "77\n") == 0, "two mounts: b's next edit")
        h.check("changed by someone else" in b.stderr(), "two mounts: b logs no reason: %r" % b.stderr()[-300:])
        b.stop(h, "two mounts: b")
    finally:
        a.close()
        if b is not None:
            b.close()
    with mounted(url, ["-o", "overlay=" + ov]) as g:
        got = (open(os.path.join(g.mnt, "meta", "general.name")).read(),
               open(os.path.join(g.mnt, "meta", "llama.context_length")).read())
        h.check(got == ("from a\n", "77\n"), "two mounts: the overlay holds %r" % (got,))


def without_overlay(h, ng, single):
    with mounted(ng.url(os.path.basename(single))) as g:
        meta = os.path.join(g.mnt, "meta")
        h.check(write(os.path.join(meta, "general.name"), "x\n") == errno.EROFS, "no overlay: write not EROFS")
        h.check(write(os.path.join(meta, "new.key"), "x\n") == errno.EROFS, "no overlay: create not EROFS")
        info = open(os.path.join(g.mnt, "info")).read()
        h.check("overlay:" not in info, "no overlay: info has an overlay line")


def refusals(h, ng, single, other, ov, tmp):
    """Overlays of another model, damaged or hostile ones: refused at mount."""
    url = ng.url(os.path.basename(single))
    refused(h, "overlay of another model", [ng.url(os.path.basename(other)), "-o", "overlay=" + ov], ov,
            want_offset=64, want="another model")
    data = open(ov, "rb").read()
    p = parse_overlay(data)
    hdr_at = len(data) - len(p["header"])
    bad = os.path.join(tmp, "bad.overlay")
    cases = [
        ("damaged magic", b"XGUFFSOV" + data[8:], 0, "not a gguffs overlay"),
        ("too short", data[:40], 0, "not a gguffs overlay"),
        ("record changed", data[:16] + (12345).to_bytes(8, "little") + data[24:], 56, "record checksum"),
        ("a byte of the header flipped", data[:-100] + bytes([data[-100] ^ 1]) + data[-99:], 48, "checksum"),
        ("truncated", data[:-1], 32, "header length"),
        # hostile, with both checksums right
        ("version 2", reseal(data[:8] + (2).to_bytes(4, "little") + data[12:]), 8, "version"),
        ("header length past the file", reseal(data[:32] + (len(p["header"]) + 1).to_bytes(8, "little")
                                               + data[40:]), 32, "header length"),
        ("data start past the base", reseal(data[:24] + (p["base_size"] + 1).to_bytes(8, "little")
                                            + data[32:]), 24, "data start"),
        ("identity not printable", reseal(data[:64] + b"\x01" + data[65:]), 64, "printable"),
        ("not a GGUF header", reseal(data[:hdr_at] + b"XXXX" + data[hdr_at + 4:]), None, "GGUF"),
        ("tensor count changed", reseal(data[:hdr_at + 8] + (7).to_bytes(8, "little") + data[hdr_at + 16:]),
         None, None),
    ]
    for label, content, off, want in cases:
        with open(bad, "wb") as f:
            f.write(content)
        refused(h, label, [url, "-o", "overlay=" + bad], bad, want_offset=off, want=want)
    os.unlink(bad)
    # the overlay option is for remote models; a directory is not an overlay
    rc, _, err = harness.run_gguffs([single, "-o", "overlay=" + ov, tmp], timeout=60)
    h.check(rc == 1 and b"remote" in err and err.count(b"\n") == 1, "overlay on a local model: %d %r" % (rc, err))
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    try:
        rc, _, err = harness.run_gguffs([url, "-o", "overlay=" + tmp, mnt], timeout=60)
        h.check(rc == 1 and err.count(b"\n") == 1 and not harness.is_mounted(mnt),
                "a directory as the overlay: %d %r" % (rc, err))
        rc, _, err = harness.run_gguffs([url, "-o", "overlay=/nonexistent-dir/ov", mnt], timeout=60)
        h.check(rc == 1 and err.count(b"\n") == 1 and not harness.is_mounted(mnt),
                "an overlay in a missing directory: %d %r" % (rc, err))
    finally:
        harness.unmount(mnt)
        os.rmdir(mnt)


def split(h, ng, ggml, shards, written, tmp):
    """A split model: edits go to the first shard's header; model.gguf is
    the merged model."""
    ov = os.path.join(tmp, "split.overlay")
    url = ng.url(os.path.basename(shards[0]))
    with mounted(url, ["-o", "overlay=" + ov]) as g:
        meta = os.path.join(g.mnt, "meta")
        h.check(write(os.path.join(meta, "general.name"), "fixed split\n") == 0, "split: set general.name")
        h.check(write(os.path.join(meta, "general.note"), "n\n") == 0, "split: create a key")
        h.check(write(os.path.join(meta, "split.count"), "4\n") == errno.EPERM, "split: changing split.count "
                "is not EPERM")
        out = os.path.join(tmp, "merged.gguf")
        shutil.copyfile(os.path.join(g.mnt, "model.gguf"), out)
    m = ggml.read_gguf(out)
    if h.check(m is not None, "split: ggml refuses model.gguf: %s" % ggml.last_log()):
        h.check(kv(m, "general.name") == ("string", b"fixed split") and kv(m, "general.note") == ("string", b"n"),
                "split: the edits are not in model.gguf")
        with open(out, "rb") as f:
            for ti in m.tensors:
                f.seek(m.data_offset + ti.offset)
                h.check(f.read(ti.nbytes) == written[ti.name.decode()], "split: %s in model.gguf" % ti.name)
        h.check(len(m.tensors) == len(written), "split: tensor count")
    os.unlink(out)
    with mounted(url, ["-o", "overlay=" + ov]) as g:
        h.check(open(os.path.join(g.mnt, "meta", "general.name")).read() == "fixed split\n",
                "split: remount does not show the edit")
    # shard 2's URL mounts the same model: the overlay applies
    with mounted(ng.url(os.path.basename(shards[1])), ["-o", "overlay=" + ov]) as g:
        h.check(open(os.path.join(g.mnt, "meta", "general.name")).read() == "fixed split\n",
                "split: mounted from shard 2's URL, the edit is not shown")


def vocab_only(h, ng, ggml, root, tmp):
    """A model without tensor data (a vocabulary file, the header is the
    whole file): the overlay is the whole edited model."""
    corpus = harness.corpus_file("llamacpp-vocab-llama-spm.gguf")
    if not h.check(os.path.exists(corpus), "vocab: the repository's corpus lacks %s" % corpus):
        return
    shutil.copyfile(corpus, os.path.join(root, "vocab.gguf"))
    ov = os.path.join(tmp, "vocab.overlay")
    out = os.path.join(tmp, "vocab-fixed.gguf")
    with mounted(ng.url("vocab.gguf"), ["-o", "overlay=" + ov]) as g:
        h.check(write(os.path.join(g.mnt, "meta", "general.name"), "vocab fixed\n") == 0, "vocab: set general.name")
        shutil.copyfile(os.path.join(g.mnt, "model.gguf"), out)
    m = ggml.read_gguf(out)
    if h.check(m is not None, "vocab: ggml refuses model.gguf: %s" % ggml.last_log()):
        h.check(kv(m, "general.name") == ("string", b"vocab fixed"), "vocab: the edit is not in model.gguf")
        o = ggml.read_gguf(corpus)
        h.check(len(m.kvs) == len(o.kvs) and len(m.tensors) == len(o.tensors) == 0, "vocab: keys or tensors")
    with mounted(ng.url("vocab.gguf"), ["-o", "overlay=" + ov]) as g:
        h.check(open(os.path.join(g.mnt, "meta", "general.name")).read() == "vocab fixed\n",
                "vocab: remount does not show the edit")


# ---- kill -9 during overlay commits ------------------------------------------------

# The child that edits (open, write, report, close, report): the local
# crash test's own.
from test_edit_crash import WRITER  # noqa: E402


def crash(h, ng, single, tmp, trials, seed, verbose):
    url = ng.url(os.path.basename(single))
    ov = os.path.join(tmp, "crash.overlay")
    key = "tokenizer.chat_template"
    texts = ["{# short #}" + TEMPLATE, "{# %s #}" % ("y" * (256 << 10)) + TEMPLATE]
    valfile = os.path.join(tmp, "value")
    known = {}                      # text index -> the overlay's bytes with it
    close_times = []
    rng = random.Random(seed)
    S = 10
    strata = []
    counts = {"old": 0, "new": 0, "kill during close": 0, "kill after close returned": 0,
              "new file left": 0, "ok close then old (BUG)": 0}
    cur = None                      # index of the text the overlay holds (None: no overlay)
    mnt = tempfile.mkdtemp(prefix="gguffs-mnt-")
    g = None
    try:
        trial = 0
        calib = 0
        while trial < trials:
            nxt = 0 if cur == 1 else 1
            with open(valfile, "w") as f:
                f.write(texts[nxt])
            calibrating = nxt not in known or len(close_times) < 3
            delay = None
            if not calibrating:
                if not strata:
                    strata = list(range(S))
                    rng.shuffle(strata)
                k = strata.pop()
                delay = 1.2 * statistics.median(close_times[-15:]) * (k + rng.random()) / S
            label = "crash trial %d%s" % (trial, "" if delay is None else " (kill after %.2f ms)" % (delay * 1e3))
            try:
                g = Gguffs(url, ["-o", "overlay=" + ov], mnt=mnt)
            except harness.MountError as e:
                h.fail("%s: mount failed: %s" % (label, e))
                break
            before = open(ov, "rb").read() if os.path.exists(ov) else None
            if cur is not None:
                shown = open(os.path.join(mnt, "meta", key)).read().rstrip("\n")
                h.check(shown == texts[cur], "%s: the mount shows another version (%d bytes)" % (label, len(shown)))
            child = subprocess.Popen([sys.executable, "-c", WRITER, os.path.join(mnt, "meta", key), valfile],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     bufsize=0)
            r, _, _ = select.select([child.stdout], [], [], 60)
            line = child.stdout.readline() if r else b""
            if not h.check(line == b"w\n", "%s: the writer did not get to close(): %r" % (label, line)):
                child.kill()
                child.wait()
                break
            killed = False
            state_at_kill = None
            if delay is not None:
                time.sleep(delay)      # a random moment inside the commit (not synchronisation)
                state_at_kill = child.poll()
                g.kill(h, label)
                killed = True
            try:
                out = child.communicate(timeout=60)[0].decode()
            except subprocess.TimeoutExpired:
                child.kill()
                out = child.communicate()[0].decode()
                h.fail("%s: the writer hung in close()" % label)
            ok = out.startswith("ok")
            if ok:
                close_times.append(float(out.split()[1]))
            if not killed:
                if not h.check(ok, "%s: unkilled edit failed: %r (%s)" % (label, out, g.stderr()[-300:])):
                    break
                g.stop(h, label)
            else:
                counts["kill after close returned" if state_at_kill is not None or ok
                       else "kill during close"] += 1
                harness.unmount(mnt)
            g.close()
            g = None
            if os.path.exists(ov + NEW_SUFFIX):
                counts["new file left"] += 1
            after = open(ov, "rb").read() if os.path.exists(ov) else None
            if not killed:
                p = parse_overlay(after)
                h.check(isinstance(p, dict), "%s: the overlay does not parse: %s" % (label, p))
                if nxt in known:
                    h.check(after == known[nxt], "%s: the same edit gave other bytes" % label)
                known[nxt] = after
                cur = nxt
                calib += 1
                continue
            trial += 1
            if after == before:
                outcome = "old"
            elif after == known.get(nxt):
                outcome = "new"
            else:
                h.fail("%s: the overlay is neither the old nor the new version (%s)" % (
                    label, parse_overlay(after) if after else "missing"))
                break
            counts[outcome] += 1
            if ok and outcome != "new":
                counts["ok close then old (BUG)"] += 1
                h.fail("%s: close() returned 0 but the overlay is the old version" % label)
            if outcome == "new":
                cur = nxt
            if verbose:
                print("%s: close %s -> %s" % (label, out.strip() or "-", outcome), flush=True)
        # a last mount: the version left, and no leftover after it
        try:
            with mounted(url, ["-o", "overlay=" + ov], mnt=mnt) as g2:
                shown = open(os.path.join(g2.mnt, "meta", key)).read().rstrip("\n")
                h.check(cur is None or shown == texts[cur], "crash: the last mount shows another version")
            h.check(not os.path.exists(ov + NEW_SUFFIX), "crash: a leftover new overlay after a mount")
        except harness.MountError as e:
            h.fail("crash: the last mount failed: %s" % e)
    finally:
        if g is not None:
            g.close()
        harness.unmount(mnt)
        os.rmdir(mnt)
    med = statistics.median(close_times) * 1e3 if close_times else 0
    print("crash trials: %d (+%d unkilled commits, median close() %.2f ms): %s" % (
        trial, calib, med, ", ".join("%s %d" % kv_ for kv_ in counts.items())), flush=True)
    h.check(counts["ok close then old (BUG)"] == 0, "crash: a close() that returned 0 was lost")
    if trial >= 10:
        h.check(counts["old"] > 0 and counts["new"] > 0, "crash: the kills never left both outcomes: %r" % counts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=6 if harness.QUICK else 10)
    ap.add_argument("--crash-only", action="store_true")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    harness.require_fuse()
    harness.gguffs_bin()
    missing = remote.have_nginx()
    if missing:
        harness.skip_or_fail(missing)
    harness.require_oracle()
    import ggml
    seed = harness.test_seed(args.seed)
    print("seed %d" % seed, flush=True)
    tmp = tempfile.mkdtemp(prefix="gguffs-overlay-")
    try:
        root = os.path.join(tmp, "root")
        os.mkdir(root)
        single, other, shards, written = generated(root, ggml)
        h = Harness("remote-overlay")
        with Nginx(root) as ng:
            if not args.crash_only:
                ov = os.path.join(tmp, "model.overlay")
                fixed = None
                with h.case("edits through the mount"):
                    fixed = edits(h, ng, ggml, single, ov, tmp)
                if fixed and os.path.exists(ov):
                    with h.case("remount with the overlay"):
                        remount(h, ng, single, ov, fixed)
                    with h.case("refused overlays"):
                        refusals(h, ng, single, other, ov, tmp)
                with h.case("two mounts of one overlay"):
                    two_mounts(h, ng, single, tmp)
                with h.case("read-only without an overlay"):
                    without_overlay(h, ng, single)
                with h.case("split model"):
                    split(h, ng, ggml, shards, written, tmp)
                with h.case("a model without tensor data"):
                    vocab_only(h, ng, ggml, root, tmp)
            with h.case("kill -9 during overlay commits"):
                crash(h, ng, single, tmp, args.trials, seed, args.verbose)
        return h.finish()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

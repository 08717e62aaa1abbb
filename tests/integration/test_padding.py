#!/usr/bin/python3
# Growing edits on ext4 (no reflink): the first copies the model once and adds gguffs.padding (64 KiB or more to spare), the next ten are written in place; each result parsed afresh by ggml and the pure-Python reader, every tensor byte unchanged; kill -9 trials of the padded in-place edits.
"""
On ext4 — TMPDIR when it is ext4, else an image the test makes and
loop-mounts (tests/integration/loopfs.py; root; skipped, exit 77, without
mkfs.ext4 or loop devices when CI is not set) — a model of a few MiB
(a llama-like header, a chat template, 4 MiB of patterned tensor data):

  1. first growing edit (`sh -c 'echo ... > meta/tokenizer.chat_template'`,
     3 KB more than the header's room): stats edits_copied 1, nothing in
     place or cloned, a new inode; the file now has gguffs.padding, a u8
     array of zeros (ggml and tests/oracle/pyreader.py both read it) of at
     least max(64 KiB, 1/8 of the header) and less than that plus the
     alignment, the data start a multiple of general.alignment;
  2. ten further growing edits (echo into the template, `sed -i` of it,
     echo creating a key), each growing the header by 1-6 KB (43 KB in
     all, inside the room): edits_in_place +1 each, edits_copied never,
     the same inode and data start, the padding smaller by exactly the
     growth; after each, ggml's reader and the pure-Python reader parse
     the file afresh and read the expected value of every key, and every
     tensor byte (sha256 of each tensor and of the whole data region) is
     unchanged;
  3. rm meta/gguffs.padding: a rewrite without the key (the room given
     back); the next growing edit copies and adds it again;
  4. kill -9 of gguffs during edits through the mount on the same file
     system (test_edit_crash.py --require-padded: template edits the
     padding takes in place, and rewrites that copy, each killed at random
     moments and recovered to the old or the new version; the run fails
     unless both outcomes of padded in-place trials happened).

Counted, no clocks: stats, inode numbers, the readers' values.
Environment: as the other mount tests (GGUFFS_TEST_QUICK: fewer trials).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import loopfs  # noqa: E402
from harness import Harness  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
KiB, MiB = 1 << 10, 1 << 20
COPY_SLACK = 64 * KiB        # gguf/pad.h: GGUF_PAD_COPY_SLACK
PAD = "gguffs.padding"
MARK = "{# more #}"          # where sed -i inserts


def make_model(path):
    """A llama-like header and 4 MiB of patterned f32 data; returns the
    values of its keys as the readers give them (harness.norm)."""
    import gguf_write as gw
    w = gw.GGUFWriter()
    kv = {"general.architecture": "llama", "general.name": "padding",
          "llama.context_length": 4096,
          "tokenizer.chat_template": "{% for m in messages %}{{ m.content }}" + MARK + "{% endfor %}",
          "tokenizer.ggml.tokens": ["t%d" % i for i in range(300)]}
    for k, v in kv.items():
        w.add(k, "u32" if isinstance(v, int) else "array[string]" if isinstance(v, list)
              else "string", v)
    w.add_tensor("big.weight", "f32", [1024, 1024], data=b"", check=False)
    w.add_tensor("small.weight", "f32", [256], data=b"", offset=4 * MiB, check=False)
    hdr, _ = w.layout()
    block = hashlib.sha256(b"padding").digest() * (MiB // 32)
    with open(path, "wb") as f:
        f.write(hdr)
        for i in range(4):
            f.write(block[i:] + block[:i])
        f.write(block[:1024])
    return kv


def data_hash(path, off):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(off)
        while True:
            b = f.read(MiB)
            if not b:
                return h.hexdigest()
            h.update(b)


def edits(mnt):
    s = harness.read_stats(mnt)
    return tuple(s.get(k, -1) for k in ("edits_in_place", "edits_cloned", "edits_copied"))


class Readers:
    """The model as ggml and the pure-Python reader see it, parsed afresh."""

    def __init__(self, h, ggml, path, label):
        import pyreader
        self.ok = False
        m = ggml.read_gguf(path)
        if not h.check(m is not None, "%s: ggml refuses the file: %s" % (label, ggml.last_log())):
            return
        try:
            p = pyreader.read(path)
        except pyreader.GGUFError as e:
            h.fail("%s: pyreader refuses the file: %s" % (label, e))
            return
        self.m, self.p = m, p
        self.ggml = {k.decode(): (t, v) for k, t, v in m.kvs}
        self.py = {kv.key.decode(): (kv.type, kv.value) for kv in p.kvs}
        self.data_offset = m.data_offset
        self.hashes = harness.tensor_hashes(m, path)
        h.check(p.data_offset == m.data_offset, "%s: data offset: ggml %d, pyreader %d"
                % (label, m.data_offset, p.data_offset))
        h.check(list(self.ggml) == list(self.py), "%s: keys: ggml %r, pyreader %r"
                % (label, list(self.ggml), list(self.py)))
        self.ok = True

    def pad(self):
        """(ggml's, pyreader's) padding: its element type and bytes."""
        out = []
        for d in (self.ggml, self.py):
            t, v = d.get(PAD, (None, None))
            out.append(None if v is None else (t, bytes(harness.norm(v))))
        return out

    def check_values(self, h, want, label):
        for name, d in (("ggml", self.ggml), ("pyreader", self.py)):
            got = {k: harness.norm(v) for k, (_, v) in d.items() if k != PAD}
            bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            h.check(not bad, "%s: %s reads other values for %s" % (label, name, bad[:4]))


def check_padding(h, r, label, lo, hi):
    """The padding key as both readers see it: u8 zeros, lo <= n < hi."""
    g, p = r.pad()
    if not h.check(g is not None and p is not None, "%s: no %s key (ggml %s, pyreader %s)"
                   % (label, PAD, g is not None, p is not None)):
        return -1
    h.check(g == p, "%s: the readers disagree about the padding" % label)
    n = len(g[1])
    h.check(g[0] == "array[u8]" and not any(g[1]), "%s: %s is %s, not a u8 array of zeros"
            % (label, PAD, g[0]))
    h.check(lo <= n < hi, "%s: %s holds %d bytes, want [%d, %d)" % (label, PAD, n, lo, hi))
    return n


def sh(h, cmd, cwd, label):
    r = harness.run(["sh", "-c", cmd], cwd=cwd)
    return h.check(r.returncode == 0, "%s: %s: rc %d, %s" % (label, cmd[:60], r.returncode,
                                                           r.stderr.strip()[:300]))


def payload(n, i):
    """n bytes of template text without sed's special characters, not
    ending in a newline (the shell's $(...) would drop it)."""
    line = "{%% if loop.index == %d %%}{{ m.role }}{%% endif %%}\n" % i
    return (line * (n // len(line) + 1))[:n - 1] + "."


def edit_series(h, ggml, d):
    model = os.path.join(d, "m.gguf")
    kv = make_model(model)
    r0 = Readers(h, ggml, model, "the model")
    if not r0.ok:
        return
    h.check(r0.pad() == [None, None], "the generated model has a padding key")
    hashes0, dh0 = r0.hashes, data_hash(model, r0.data_offset)
    dlen = os.path.getsize(model) - r0.data_offset
    align = r0.m.alignment

    def fresh(label, ino=None):
        """Parses the model afresh; checks values and tensor bytes."""
        r = Readers(h, ggml, model, label)
        if not r.ok:
            return None
        r.check_values(h, kv, label)
        h.check(r.hashes == hashes0, "%s: tensor bytes changed" % label)
        h.check(os.path.getsize(model) - r.data_offset == dlen and
                data_hash(model, r.data_offset) == dh0, "%s: the data region differs" % label)
        h.check(r.data_offset % align == 0, "%s: data start %d is not a multiple of the "
                "alignment %d" % (label, r.data_offset, align))
        if ino is not None:
            h.check(os.stat(model).st_ino == ino, "%s: the model's inode changed (a rewrite)" % label)
        return r

    with harness.Gguffs(model) as g:
        mnt = g.mnt
        meta = os.path.join(mnt, "meta")
        h.check(edits(mnt) == (0, 0, 0), "stats at mount: %r" % (edits(mnt),))

        # 1. the first growing edit: copied once, padded
        label = "first growing edit"
        ino0 = os.stat(model).st_ino
        kv["tokenizer.chat_template"] += payload(3000, 0)
        with open(os.path.join(d, "value"), "w") as f:
            f.write(kv["tokenizer.chat_template"])
        sh(h, "echo \"$(cat %s)\" > tokenizer.chat_template" % os.path.join(d, "value"), meta, label)
        ed = edits(mnt)
        h.check(ed == (0, 0, 1), "%s: stats (in place, cloned, copied) %r, want (0, 0, 1)" % (label, ed))
        h.check(os.stat(model).st_ino != ino0, "%s: the same inode: not a rewrite" % label)
        r = fresh(label)
        if r is None:
            return
        base = r.data_offset - len(r.pad()[0][1] if r.pad()[0] else b"")
        slack = max(COPY_SLACK, base // 8)
        n = check_padding(h, r, label, slack, slack + align)
        print("%s: copied once; %s of %d bytes (the header without it: %d bytes), data at %d"
              % (label, PAD, n, base, r.data_offset), flush=True)
        with open(os.path.join(meta, PAD)) as f:
            lines = f.read().split("\n")
        h.check(lines[-1] == "" and set(lines[:-1]) == {"0"} and len(lines) - 1 == n,
                "%s: meta/%s shows %d lines, the key has %d bytes" % (label, PAD, len(lines) - 1, n))

        # 2. ten growing edits of 1-6 KB: all in place
        ino, off, copied = os.stat(model).st_ino, r.data_offset, ed[2]
        grow = [1000, 2500, 4000, 5500, 6000, 3000, 5000, 6000, 4500, 5500]
        assert sum(grow) < COPY_SLACK
        for i, k in enumerate(grow):
            how = ("echo", "sed -i", "echo (new key)")[i % 3]
            label = "growing edit %d (+%d bytes, %s)" % (i + 1, k, how)
            before = edits(mnt)
            if how == "echo":
                kv["tokenizer.chat_template"] += payload(k, i + 1)
                with open(os.path.join(d, "value"), "w") as f:
                    f.write(kv["tokenizer.chat_template"])
                sh(h, "echo \"$(cat %s)\" > tokenizer.chat_template"
                   % os.path.join(d, "value"), meta, label)
            elif how == "sed -i":
                p = payload(k, i + 1).replace("\n", " ")
                kv["tokenizer.chat_template"] = kv["tokenizer.chat_template"].replace(MARK, MARK + p, 1)
                with open(os.path.join(d, "sed"), "w") as f:
                    f.write("s/%s/%s%s/\n" % (MARK, MARK, p))
                sh(h, "sed -i -f %s tokenizer.chat_template" % os.path.join(d, "sed"), meta, label)
            else:
                # a new key: the name's length (8), the name, the type (4)
                # and the string's length (8) take len(name) + 20 bytes
                name = "general.note_%d" % i
                kv[name] = payload(k - len(name) - 20, i + 1).replace("\n", " ")
                with open(os.path.join(d, "value"), "w") as f:
                    f.write(kv[name])
                sh(h, "echo \"$(cat %s)\" > %s" % (os.path.join(d, "value"), name), meta, label)
            after = edits(mnt)
            h.check(after == (before[0] + 1, 0, copied), "%s: stats %r after %r: not in place"
                    % (label, after, before))
            r2 = fresh(label, ino)
            if r2 is None:
                return
            h.check(r2.data_offset == off, "%s: the data moved (%d -> %d)" % (label, off, r2.data_offset))
            n2 = check_padding(h, r2, label, 0, n)
            h.check(n2 == n - k, "%s: the padding went from %d to %d bytes, want %d"
                    % (label, n, n2, n - k))
            n = n2
        print("10 growing edits of 1000-6000 bytes (%d in all): stats %r (in place, cloned, "
              "copied); %s left: %d bytes" % (sum(grow), edits(mnt), PAD, n), flush=True)

        # 3. rm gives the room back (a rewrite); the next growing edit pads again
        label = "rm meta/%s" % PAD
        os.unlink(os.path.join(meta, PAD))
        ed = edits(mnt)
        h.check(ed[2] == copied + 1, "%s: stats %r: not a rewrite" % (label, ed))
        r = fresh(label)
        if r is None:
            return
        h.check(r.pad() == [None, None] and r.data_offset < off,
                "%s: the key is still there, or the data did not move down (%d -> %d)"
                % (label, off, r.data_offset))
        label = "a growing edit after rm"
        kv["general.name"] = "padding again " + "x" * 100      # past the alignment's zeros
        sh(h, "echo '%s' > general.name" % kv["general.name"], meta, label)
        ed2 = edits(mnt)
        h.check(ed2 == (ed[0], 0, ed[2] + 1), "%s: stats %r after %r" % (label, ed2, ed))
        r = fresh(label)
        if r is not None:
            base = r.data_offset - len(r.pad()[0][1] if r.pad()[0] else b"")
            slack = max(COPY_SLACK, base // 8)
            check_padding(h, r, label, slack, slack + align)
        g.stop(h, "the edits' mount")
    os.unlink(model)


def kill_trials(h, d):
    trials = 6 if harness.QUICK else 10
    r = subprocess.run([sys.executable, os.path.join(HERE, "test_edit_crash.py"), "--dir", d,
                        "--require-padded", "--trials", str(trials), "--size-mb", "32"],
                       capture_output=True, text=True)
    out = r.stdout + r.stderr
    h.check(r.returncode == 0, "kill -9: test_edit_crash.py --dir %s --require-padded: rc %d\n%s"
            % (d, r.returncode, out[-3000:]))
    for line in out.splitlines():
        if line.startswith(("file system", "trials:", "kills:", "kills at", "close() time", "edit-crash:")):
            print("kill -9: %s" % line, flush=True)


def main():
    harness.require_fuse()
    harness.gguffs_bin()
    ggml = harness.require_oracle()
    h = Harness("padding")
    tmp = tempfile.mkdtemp(prefix="gguffs-padding-")
    lfs = None
    try:
        kind = loopfs.fs_type(tmp)
        if kind == "ext4":
            d = tmp
        else:
            print("TMPDIR is %s: on a loop-mounted ext4 image" % kind, flush=True)
            loopfs.require("ext4")
            lfs = loopfs.LoopFs("ext4", size_mb=256)
            d = os.path.join(lfs.path, "models")
            os.mkdir(d)
        h.check(loopfs.fs_type(d) == "ext4" and not loopfs.clone_step(d),
                "%s: not ext4 (%s), or it clones" % (d, loopfs.fs_type(d)))
        print("file system of %s: %s" % (d, loopfs.fs_type(d)), flush=True)
        with h.case("growing edits"):
            edit_series(h, ggml, d)
        with h.case("kill -9"):
            kill_trials(h, d)
    finally:
        if lfs:
            lfs.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

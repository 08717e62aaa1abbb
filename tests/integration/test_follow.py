#!/usr/bin/python3
# A -o ro mount beside a read-write one follows its edits (in place, padded, rewrite, two at once): readers never fail, meta/ and the version files show the new values; another program's dd or rename is still noticed.
"""
Case "follows": mount A read-write and B -o ro (a small block cache, so
that f32 is dequantized again and again) on one model of f16, f32 and
q8_0 tensors.  A thread reads every tensor's raw and f32 on B all along,
each file whole through a new descriptor with its pages dropped from the
kernel's cache first, so every read reaches gguffs, and checks every byte
against the model's original tensor data (numpy's f16 -> f32, q8_0's
d * q): no error, no wrong byte.  Through A:

  in place     general.name, same length          (A's edits_in_place + 1)
  rewrite      a new 20000-byte key: the header   (edits_copied or
               outgrows its room, a new file        edits_cloned + 1)
  padded       that key grown by 100 bytes: into  (edits_in_place + 1)
               gguffs.padding, in place
  two at once  general.name twice, B not waited for between them

After each, B's views are polled (a hang guard, not a sleep) until they
show the new value: meta/KEY, meta/'s listing (read before the edit, so
one the kernel keeps), model.gguf byte for byte the file on disk,
info, info.json and model.safetensors' __metadata__; then on B: stats say
nothing changed underneath; info, model.gguf and meta/general.name opened
before the edit still read the version they were opened on; the reader
has finished a round since.  Stats count the edits followed.
MODEL.gguffs-edits (the records B follows) is beside the model while A is
mounted, and gone once A is unmounted.  Another program garbles the records (3000 random
bytes): A's next edit writes them whole again and B follows it.  Last,
the records garbled again, another program writes 16 bytes into the
tensor data (dd conv=notrunc, the size unchanged): B fails a raw read
with EIO, and says changed underneath.

Case "renamed over": A and B on a fresh copy, one edit followed, then
another program renames a file over the model: B is replaced underneath
(not followed): it keeps the version it showed, its reads right.
"""
import errno
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import gguf_write as gw  # noqa: E402

GUARD = 180.0 if harness.sanitized() else 60.0     # hang guard per wait
EDITS_FILE = ".gguffs-edits"


def make_model(path, seed):
    """f16, f32 and q8_0 tensors; returns {name: (raw, f32)}."""
    rng = np.random.default_rng(seed)
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", "follow-a")
    w.add("t.u32", "u32", 7)
    want = {}
    x = rng.standard_normal(131072).astype("<f2")
    w.add_tensor("w.f16", "f16", [131072], data=x.tobytes())
    want["w.f16"] = (x.tobytes(), x.astype("<f4").tobytes())
    y = rng.standard_normal(262144).astype("<f4")
    w.add_tensor("w.f32", "f32", [262144], data=y.tobytes())
    want["w.f32"] = (y.tobytes(), y.tobytes())
    nb = 524288 // 32
    d = (rng.random(nb) * 0.1 + 0.01).astype("<f2")
    q = rng.integers(-128, 128, size=(nb, 32), dtype=np.int8)
    blocks = np.zeros(nb, dtype=[("d", "<f2"), ("q", "i1", 32)])
    blocks["d"], blocks["q"] = d, q
    raw = blocks.tobytes()
    w.add_tensor("w.q8", "q8_0", [524288], data=raw)
    want["w.q8"] = (raw, (d.astype("<f4")[:, None] * q.astype("<f4")).astype("<f4").tobytes())
    z = rng.standard_normal(393216).astype("<f2")
    w.add_tensor("w.f16b", "f16", [1024, 384], data=z.tobytes())
    want["w.f16b"] = (z.tobytes(), z.astype("<f4").tobytes())
    w.write(path)
    return want


def read_fresh(path):
    """The whole file through a new descriptor, its pages dropped first."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        parts = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(parts)
            parts.append(b)
    finally:
        os.close(fd)


class Reader:
    """Reads every tensor's raw and f32 on mnt in a loop (a thread)."""

    def __init__(self, mnt, want):
        self.mnt, self.want = mnt, want
        self.rounds = 0
        self.bad = []
        self.stop = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        while not self.stop.is_set() and len(self.bad) < 10:
            for n in sorted(self.want):
                for k, view in enumerate(("raw", "f32")):
                    try:
                        got = read_fresh(os.path.join(self.mnt, "tensors", n, view))
                        if got != self.want[n][k]:
                            self.bad.append("%s/%s: wrong bytes (%d read) in round %d"
                                            % (n, view, len(got), self.rounds))
                    except OSError as e:
                        self.bad.append("%s/%s: %s in round %d" % (n, view, e, self.rounds))
            self.rounds += 1

    def wait_round(self):
        """Until a round that started after this call has ended."""
        start = self.rounds
        deadline = time.monotonic() + GUARD
        while self.rounds < start + 2 and self.th.is_alive() and time.monotonic() < deadline:
            self.stop.wait(0.01)
        return self.rounds >= start + 2

    def end(self):
        self.stop.set()
        self.th.join()


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def edit(mnt, key, value):
    with open(os.path.join(mnt, "meta", key), "w") as f:
        f.write(value + "\n")


def safetensors_meta(mnt):
    with open(os.path.join(mnt, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))["__metadata__"]


def info_json_value(mnt, key):
    with open(os.path.join(mnt, "info.json")) as f:
        j = json.load(f)
    for kv in j["metadata"]:
        if kv["key"] == key:
            return kv.get("value")
    return None


def late_views(b, model, key, value):
    """Which of B's views do not show A's edit of key to value yet: meta/KEY,
    model.gguf (the file on disk, byte for byte), and for general.name
    info, info.json and model.safetensors' __metadata__."""
    late = []
    try:
        if read_text(os.path.join(b.mnt, "meta", key)) != value + "\n":
            late.append("meta/" + key)
        if harness.file_bytes(os.path.join(b.mnt, "model.gguf")) != harness.file_bytes(model):
            late.append("model.gguf")
        # the listing the kernel keeps (it was read before the edit)
        if key not in os.listdir(os.path.join(b.mnt, "meta")):
            late.append("meta/'s listing")
        if key == "general.name":
            if value not in read_text(os.path.join(b.mnt, "info")):
                late.append("info")
            if info_json_value(b.mnt, key) != value:
                late.append("info.json")
            if safetensors_meta(b.mnt).get(key) != value:
                late.append("model.safetensors")
    except OSError as e:
        late.append(str(e))
    return late


def check_followed(h, label, b, model, key, value, held):
    """B after A's edit of key to value (see the top): its views polled
    until they show it (a hang guard, no sleep as synchronisation: the
    kernel learns of a new version's files a moment after meta/ shows
    it, as for readers of a local edit); held: files of B opened before
    the edit, with what they read then."""
    deadline = time.monotonic() + GUARD
    while True:
        late = late_views(b, model, key, value)
        if not late or time.monotonic() > deadline:
            break
        threading.Event().wait(0.005)
    ok = h.check(not late, "%s: after %.0f s B's %s do not show %s = %r"
                 % (label, GUARD, ", ".join(late), key, value[:60]))
    st = harness.read_stats(b.mnt)
    h.check(st.get("underneath_changed") == 0 and st.get("underneath_replaced") == 0 and
            st.get("underneath_eio") == 0,
            "%s: B's stats: %r" % (label, {k: v for k, v in st.items() if k.startswith("underneath")}))
    for path, (fd, n, before) in held.items():
        h.check(not ok or os.pread(fd, n, 0) == before,
                "%s: B's %s opened before the edit reads another version" % (label, path))
        os.close(fd)
    h.check(os.path.exists(model + EDITS_FILE), "%s: no %s beside the model while A is mounted"
            % (label, EDITS_FILE))
    return ok


def hold(b):
    """B's info, model.gguf (its first 64 KiB) and meta/general.name,
    opened now."""
    out = {}
    for name, n in (("info", 1 << 20), ("model.gguf", 65536), ("meta/general.name", 4096)):
        fd = os.open(os.path.join(b.mnt, name), os.O_RDONLY)
        out[name] = (fd, n, os.pread(fd, n, 0))
    return out


def case_follows(h, tmp):
    model = os.path.join(tmp, "m.gguf")
    want = make_model(model, 1)
    a = harness.Gguffs(model)
    b = None
    reader = None
    try:
        b = harness.Gguffs(model, ["-o", "ro,cache_size=2M"])
        reader = Reader(b.mnt, want)
        h.check(reader.wait_round(), "B: the reader made no round before the edits")
        big = "x" * 20000
        steps = [("in place", "general.name", ["follow-b"], "edits_in_place"),
                 ("rewrite", "t.big", [big], ("edits_copied", "edits_cloned")),
                 ("padded", "t.big", [big + "y" * 100], "edits_in_place"),
                 ("two at once", "general.name", ["follow-c", "follow-d"], "edits_in_place")]
        followed = 0
        for label, key, values, counter in steps:
            before = harness.read_stats(a.mnt)
            held = hold(b)
            listed = {os.path.basename(m): sorted(os.listdir(os.path.join(m, "meta")))
                      for m in (a.mnt, b.mnt)}
            for v in values:
                edit(a.mnt, key, v)
            after = harness.read_stats(a.mnt)
            names = counter if isinstance(counter, tuple) else (counter,)
            grew = sum(after.get(c, 0) - before.get(c, 0) for c in names)
            h.check(grew == len(values), "%s: A's %s grew by %d, expected %d (test setup)"
                    % (label, "/".join(names), grew, len(values)))
            if not check_followed(h, label, b, model, key, values[-1], held):
                break
            # both listings read before the edit: each has the key now (a
            # rewrite may add gguffs.padding too), and B's is A's
            now = {m: sorted(os.listdir(os.path.join(m, "meta"))) for m in (a.mnt, b.mnt)}
            for m, who in ((a.mnt, "A"), (b.mnt, "B")):
                was = listed[os.path.basename(m)]
                h.check(key in now[m] and set(was) <= set(now[m]),
                        "%s: %s's meta/ lists %r, before %r" % (label, who, now[m], was))
            h.check(now[a.mnt] == now[b.mnt], "%s: B's meta/ lists %r, A's %r"
                    % (label, now[b.mnt], now[a.mnt]))
            followed += 1
            h.check(reader.wait_round(), "%s: the reader made no round after the edit" % label)
            h.check(not reader.bad, "%s: reads on B: %r" % (label, reader.bad[:5]))
        st = harness.read_stats(b.mnt)
        h.check(st.get("underneath_followed", 0) >= followed,
                "B's underneath_followed is %r after %d edits followed"
                % (st.get("underneath_followed"), followed))
        h.check(harness.beside(model) == ["m.gguf"], "files beside the model: %r" % os.listdir(tmp))
        reader.end()
        h.check(not reader.bad, "reads on B: %r" % reader.bad[:5])
        print("  follows: %d edits followed, %d rounds of reads on B, stats of B: followed %s"
              % (followed, reader.rounds, st.get("underneath_followed")), flush=True)

        # the records garbled by another program: A's next edit writes
        # them whole again, and B follows it
        with open(model + EDITS_FILE, "r+b") as f:
            f.write(os.urandom(3000))
        edit(a.mnt, "t.u32", "8")
        check_followed(h, "garbled records, then an edit", b, model, "t.u32", "8", {})

        # another program's write into the tensor data, the records garbled
        # again: no evidence, EIO on B
        with open(model + EDITS_FILE, "r+b") as f:
            f.write(os.urandom(3000))
        m = open(model, "rb").read()
        off = len(m) - len(want["w.f16b"][0]) - 4096
        size = len(m)
        subprocess.run(["dd", "if=/dev/urandom", "of=" + model, "bs=16", "count=1",
                        "seek=%d" % (off // 16), "conv=notrunc"], check=True, capture_output=True)
        h.check(os.path.getsize(model) == size, "dd: the size changed (test setup)")
        try:
            read_fresh(os.path.join(b.mnt, "tensors", "w.f32", "raw"))
            h.fail("dd into the data: B's w.f32/raw read without error")
        except OSError as e:
            h.check(e.errno == errno.EIO, "dd into the data: B's w.f32/raw: %s, not EIO" % e)
        st = harness.read_stats(b.mnt)
        h.check(st.get("underneath_changed") == 1, "dd into the data: B's stats: %r"
                % {k: v for k, v in st.items() if k.startswith("underneath")})
        h.check("changed underneath" in read_text(os.path.join(b.mnt, "info")),
                "dd into the data: B's info does not say so")
        b.stop(h, "B")
        h.check("changed underneath:" in b.stderr(), "B's log: %r" % b.stderr()[-1000:])
        a.stop(h, "A")
        h.check(os.listdir(tmp) == ["m.gguf"], "left after the unmounts: %r" % os.listdir(tmp))
    finally:
        if reader:
            reader.end()
        for g in (b, a):
            if g:
                g.close()


def case_renamed(h, tmp):
    model = os.path.join(tmp, "r.gguf")
    want = make_model(model, 2)
    other = os.path.join(tmp, "other.gguf")
    make_model(other, 3)
    a = harness.Gguffs(model)
    b = None
    try:
        b = harness.Gguffs(model, ["-o", "ro"])
        edit(a.mnt, "general.name", "renamed")
        h.check(check_followed(h, "renamed over: the edit", b, model, "general.name", "renamed", {}),
                "renamed over: the edit before is not followed")
        followed = harness.file_bytes(model)
        shutil.copyfile(other, model + ".tmp")
        os.rename(model + ".tmp", model)
        text = read_text(os.path.join(b.mnt, "info"))
        h.check(text.startswith("replaced underneath: r.gguf was replaced or removed"),
                "renamed over: B's info: %r" % text[:200])
        h.check(read_text(os.path.join(b.mnt, "meta", "general.name")) == "renamed\n",
                "renamed over: B's meta/general.name is not the version it followed")
        h.check(harness.file_bytes(os.path.join(b.mnt, "model.gguf")) == followed,
                "renamed over: B's model.gguf is not the version it followed")
        for n in sorted(want):
            for k, view in enumerate(("raw", "f32")):
                try:
                    got = read_fresh(os.path.join(b.mnt, "tensors", n, view))
                    h.check(got == want[n][k], "renamed over: B's %s/%s: wrong bytes" % (n, view))
                except OSError as e:
                    h.fail("renamed over: B's %s/%s: %s" % (n, view, e))
        st = harness.read_stats(b.mnt)
        h.check(st.get("underneath_replaced") == 1 and st.get("underneath_changed") == 0,
                "renamed over: B's stats: %r" % {k: v for k, v in st.items() if k.startswith("underneath")})
        b.stop(h, "B (renamed over)")
        a.stop(h, "A (renamed over)")
    finally:
        for g in (b, a):
            if g:
                g.close()


def main():
    h = harness.start("follow")
    tmp = tempfile.mkdtemp(prefix="gguffs-follow-")
    try:
        with h.case("a -o ro mount follows a read-write mount's edits"):
            d = os.path.join(tmp, "follows")
            os.mkdir(d)
            case_follows(h, d)
        with h.case("a -o ro mount, the model renamed over by another program"):
            d = os.path.join(tmp, "renamed")
            os.mkdir(d)
            case_renamed(h, d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# Split models (written by ggml's own writer) mount as one tree; model.gguf exports the model as one file that ggml loads with every tensor byte intact.
import hashlib
import mmap
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402


def main():
    h = harness.start("split")
    ggml = harness.require_oracle()

    tmp = tempfile.mkdtemp(prefix="gguffs-split-")
    n = 3
    kvs0 = [("general.architecture", "string", "llama"), ("general.name", "string", "split"),
            ("llama.context_length", "u32", 2048),
            ("tokenizer.ggml.tokens", "array[string]", ["a", "b\nc", "d"])]
    types = ["q4_K", "f16", "q8_0", "f32", "iq4_xs", "bf16"]
    written = {}
    paths = []
    for i in range(n):
        kvs = (list(kvs0) if i == 0 else []) + [("split.no", "u16", i), ("split.count", "u16", n)]
        if i == 0:
            kvs.append(("split.tensors.count", "i32", 2 * n))
        tensors = [("blk.%d.w%d" % (i, k), types[(2 * i + k) % len(types)], [256, 3 + k])
                   for k in range(2)]
        p = os.path.join(tmp, "model-%05d-of-%05d.gguf" % (i + 1, n))
        for name, t, ne, raw, _ in ggml.write_model(p, kvs, tensors, seed=i):
            written[name.decode()] = (t, raw)
        paths.append(p)

    for given in paths:
        with h.case("mount via %s" % os.path.basename(given)), mount(given) as mnt:
            names = sorted(os.listdir(os.path.join(mnt, "tensors")))
            h.check(names == sorted(written), "tensors %r" % names)
            h.check(sorted(os.listdir(os.path.join(mnt, "meta")))[:1] == ["general.architecture"],
                    "meta from the first shard")
            for name, (t, raw) in written.items():
                got = open(os.path.join(mnt, "tensors", name, "raw"), "rb").read()
                h.check(got == raw, "%s/raw differs" % name)
                if ggml.has_to_float(t):
                    f = np.fromfile(os.path.join(mnt, "tensors", name, "f32"), np.uint32)
                    h.check(np.array_equal(f, ggml.dequant(t, raw).view(np.uint32)),
                            "%s/f32 differs from ggml" % name)
            info = open(os.path.join(mnt, "info")).read()
            h.check("split model of 3 shards" in info, "info names the shards")

    # one writer per model: the lock is on the first shard, the
    # file edits go to, whichever shard a mount names
    with h.case("one rw mount per split model"), harness.mounted(paths[1]) as g:
        for other in (paths[0], paths[2]):
            mnt2 = tempfile.mkdtemp(prefix="gguffs-mnt-")
            try:
                rc, _, err = harness.run_gguffs([other, mnt2])
                text = err.decode(errors="replace").strip()
                h.check(rc == 1 and not harness.is_mounted(mnt2) and
                        "another gguffs mounts it read-write (pid %d)" % g.pid in text,
                        "second rw mount via %s: exit %d, %r" % (os.path.basename(other), rc, text))
                rc, _, err = harness.run_gguffs(["-o", "ro", other, mnt2])
                h.check(rc == 0 and harness.is_mounted(mnt2),
                        "-o ro via %s beside a rw mount: exit %d, %r" % (os.path.basename(other), rc, err))
            finally:
                harness.unmount(mnt2)
                os.rmdir(mnt2)

    with h.case("model.gguf export"), mount(paths[1]) as mnt:
        out = os.path.join(tmp, "merged.gguf")
        shutil.copyfile(os.path.join(mnt, "model.gguf"), out)
        h.check(os.path.getsize(out) == os.stat(os.path.join(mnt, "model.gguf")).st_size, "size")
        m = ggml.read_gguf(out)
        if h.check(m is not None, "ggml refuses model.gguf: %s" % ggml.last_log()):
            keys = [k.decode() for k, _, _ in m.kvs]
            h.check(keys == [k for k, _, _ in kvs0], "keys %r (split.* must be dropped)" % keys)
            h.check(len(m.tensors) == 2 * n, "tensor count")
            with open(out, "rb") as f:
                for ti in m.tensors:
                    f.seek(m.data_offset + ti.offset)
                    h.check(f.read(ti.nbytes) == written[ti.name.decode()][1],
                            "%s bytes in model.gguf" % ti.name)
        # mmap works in place, as llama.cpp uses it
        with open(os.path.join(mnt, "model.gguf"), "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
            h.check(hashlib.sha256(mm).digest() == hashlib.sha256(open(out, "rb").read()).digest(),
                    "mmap of model.gguf")
            mm.close()
        # random ranges
        rng = np.random.default_rng(5)
        data = open(out, "rb").read()
        fd = os.open(os.path.join(mnt, "model.gguf"), os.O_RDONLY)
        for _ in range(200):
            a = int(rng.integers(0, len(data)))
            ln = int(rng.integers(1, 5000))
            h.check(os.pread(fd, ln, a) == data[a:a + ln], "pread(%d, %d)" % (a, ln))
        os.close(fd)
        # an edit goes to the first shard and shows in model.gguf
        subprocess.run("echo renamed > %s/meta/general.name" % mnt, shell=True, check=True)
        m2 = ggml.read_gguf(paths[0])
        h.check(m2 is not None and dict((k.decode(), v) for k, _, v in m2.kvs)["general.name"] == b"renamed",
                "edit in the first shard")
        shutil.copyfile(os.path.join(mnt, "model.gguf"), out)
        m3 = ggml.read_gguf(out)
        h.check(m3 is not None and dict((k.decode(), v) for k, _, v in m3.kvs)["general.name"] == b"renamed",
                "edit visible in model.gguf")

    with h.case("single file: model.gguf is the file"):
        single = os.path.join(tmp, "single.gguf")
        ggml.write_model(single, kvs0, [("w", "q4_0", [64, 2])])
        with mount(single) as mnt:
            h.check(open(os.path.join(mnt, "model.gguf"), "rb").read() == open(single, "rb").read(),
                    "model.gguf of a single file")

    with h.case("missing and foreign shards are refused"):
        hidden = paths[2] + ".away"
        os.rename(paths[2], hidden)
        line = harness.run_gguffs([paths[0], tmp])[2].decode()
        h.check("shard 3 of 3 is missing" in line and line.count("\n") == 1, "missing: %r" % line)
        ggml.write_model(paths[2], [("split.no", "u16", 1), ("split.count", "u16", n)],
                         [("x", "f32", [4])])
        line = harness.run_gguffs([paths[0], tmp])[2].decode()
        h.check("does not belong" in line and line.count("\n") == 1, "foreign: %r" % line)
        os.replace(hidden, paths[2])
    with h.case("an interrupted edit of shard 1, mounting shard 2"):
        interrupted_first_shard(h, ggml, paths, tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


def interrupted_first_shard(h, ggml, paths, tmp):
    """Shard 1 holds the metadata and takes the edits: an edit of it cut
    short (journal left, header half new) is refused by a read-only mount
    and rolled back by a writable one, whichever shard is named, exactly as
    when shard 1 is named."""
    tool = os.environ.get("GGUFFS_INTERRUPT_EDIT")
    if not tool:
        h.fail("GGUFFS_INTERRUPT_EDIT is not set (tests/integration/meson.build sets it)")
        return
    before = open(paths[0], "rb").read()
    with mount(paths[0], ["-o", "ro"]) as mnt:
        old_name = open(os.path.join(mnt, "meta", "general.name")).read()
    new_name = old_name.upper().rstrip("\n")      # the same size: an edit in place
    for given in (paths[0], paths[1]):
        r = subprocess.run([tool, paths[0], "general.name", new_name], capture_output=True)
        if not h.check(r.returncode == 0, "interrupt_edit: %r" % r.stderr):
            return
        h.check(os.path.exists(paths[0] + ".gguffs-journal"), "no journal left")
        h.check(open(paths[0], "rb").read() != before, "the header was not written")
        label = "read-only via %s" % os.path.basename(given)
        rc, _, err = harness.run_gguffs(["-o", "ro", given, tmp])
        line = err.decode()
        h.check(rc != 0 and not harness.is_mounted(tmp), "%s: mounted" % label)
        h.check("an edit was interrupted" in line and line.count("\n") == 1,
                "%s: stderr %r" % (label, line))
        h.check(os.path.exists(paths[0] + ".gguffs-journal"), "%s: the journal went" % label)
        with mount(given) as mnt:
            name = open(os.path.join(mnt, "meta", "general.name")).read()
            h.check(name == old_name, "writable via %s: general.name %r" % (given, name))
        h.check(open(paths[0], "rb").read() == before,
                "writable via %s: shard 1 is not the old version" % os.path.basename(given))
        h.check(not os.path.exists(paths[0] + ".gguffs-journal"), "the journal stayed")


if __name__ == "__main__":
    sys.exit(main())

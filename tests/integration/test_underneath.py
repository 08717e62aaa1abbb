#!/usr/bin/python3
# A local model changed underneath a mount by another program: cp over it, dd conv=notrunc into its data, a rename over it, and gguffs' own edits (which must not count).
"""
Each case mounts a fresh copy of a generated model (read-write, -f), reads
one tensor (raw and f32) so that gguffs and the kernel have cached it, then:

  cp over it       `cp other.gguf MODEL.gguf` (the same inode, other bytes,
                   another size): raw, f32 and model.gguf's data of tensors
                   not read before give EIO, never zeros nor the other
                   file's bytes; the tensor read before gives its old bytes
                   (cached) or EIO; meta/ still reads the mounted version;
                   info starts with "changed underneath: ..."; stats has
                   underneath_changed 1; `sh -c 'echo 1 > MNT/meta/...'`
                   exits non-zero and MODEL.gguf is byte for byte the other
                   file afterwards; one log line says so, before any
                   access to the mount (inotify)
  dd into it       16 bytes written into a tensor's data with dd
                   conv=notrunc (same size): noticed the same way
  renamed over     `cp other.gguf tmp && mv tmp MODEL.gguf`: the mount
                   stays on the file it opened: every raw, f32 and
                   model.gguf reads the old bytes right; info says
                   "replaced underneath"; underneath_changed stays 0; an
                   edit is refused and the new file is untouched
  split model      dd into the second shard of a mounted split model (a
                   file gguffs never writes): the same, info names it
  own edits        several edits through the mount (in place, growing: a
                   rewrite, shrinking, create, remove) while a reader reads
                   raw (page cache dropped), model.gguf (a new inode after
                   each edit) and f32 in a loop: no read fails, the model
                   is never taken for changed, every tensor reads right
                   after them

Nothing sleeps: the check is synchronous (an fstat before bytes leave the
file, and at each open of info, read of stats and edit), so the first read
after the change already sees it.
"""
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import gguf_write as gw  # noqa: E402

NAMES = ["t%d" % i for i in range(5)]


def make_model(path, seed, name, extra=False):
    """Tensors t0..t4 (f16 and f32, 64 KiB to 256 KiB each); returns
    {name: (raw, f32)}."""
    rng = np.random.default_rng(seed)
    w = gw.GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", name)
    want = {}
    for i, n in enumerate(NAMES):
        ne = 32768 * (1 + i % 3)
        if i % 2 == 0:
            x = rng.standard_normal(ne).astype("<f2")
            raw, f32 = x.tobytes(), x.astype("<f4").tobytes()
            w.add_tensor(n, "f16", [ne], data=raw)
        else:
            x = rng.standard_normal(ne).astype("<f4")
            raw = f32 = x.tobytes()
            w.add_tensor(n, "f32", [ne], data=raw)
        want[n] = (raw, f32)
    if extra:
        w.add_tensor("extra", "f32", [1024], data=bytes(4096))
    w.write(path)
    return want


def read_whole(path):
    """(bytes, None) or (None, error text)."""
    try:
        with open(path, "rb") as f:
            return f.read(), None
    except OSError as e:
        return None, e.strerror


def read_tensor(mnt, name, view):
    return read_whole(os.path.join(mnt, "tensors", name, view))


def info(mnt):
    got, err = read_whole(os.path.join(mnt, "info"))
    return (got or b"").decode("utf-8", "replace") if not err else "(%s)" % err


def edit(mnt, value):
    return subprocess.run(["sh", "-c", "echo %s > '%s'" % (value, os.path.join(mnt, "meta", "general.name"))],
                          capture_output=True, text=True, timeout=60)


def check_changed(h, label, g, model, want, other, read_before):
    """After another program changed the model in place: what the mount
    does (see the top)."""
    mnt = g.mnt
    eio = os.strerror(errno.EIO)
    for n in NAMES:
        for k, view in enumerate(("raw", "f32")):
            got, err = read_tensor(mnt, n, view)
            if n == read_before:
                h.check(got == want[n][k] or err == eio,
                        "%s: %s/%s (read before) gives %s" % (label, n, view, err or "other bytes"))
            else:
                h.check(err == eio, "%s: %s/%s (not read before) gives %s, not EIO"
                        % (label, n, view, err or ("zeros" if got and not any(got) else
                                                   "the other file's bytes" if other and got in other
                                                   else "%d bytes" % len(got))))
    # model.gguf: its header is in memory; its data is the file's
    with open(os.path.join(mnt, "model.gguf"), "rb") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            f.seek(size - 4096)
            got = f.read(4096)
            h.fail("%s: model.gguf's last 4 KiB read (%d bytes) after the change" % (label, len(got)))
        except OSError as e:
            h.check(e.errno == errno.EIO, "%s: model.gguf's data: %s, not EIO" % (label, e))
    with open(os.path.join(mnt, "meta", "general.name")) as f:
        h.check(f.read() == "mounted\n", "%s: meta/general.name is not the mounted version's" % label)
    text = info(mnt)
    h.check(text.startswith("changed underneath: %s was modified by another program at "
                            % os.path.basename(model)),
            "%s: info does not start with the change: %r" % (label, text[:300]))
    st = harness.read_stats(mnt)
    h.check(st.get("underneath_changed") == 1 and st.get("underneath_eio", 0) > 0,
            "%s: stats: %r" % (label, {k: v for k, v in st.items() if k.startswith("underneath")}))
    before = open(model, "rb").read()
    r = edit(mnt, "1")
    h.check(r.returncode != 0, "%s: an edit after the change exits 0" % label)
    h.check(open(model, "rb").read() == before,
            "%s: the edit wrote into the file another program changed" % label)
    for path in (model + ".gguffs-journal", model + ".gguffs-new"):
        h.check(not os.path.exists(path), "%s: %s left behind" % (label, path))
    h.check(harness.read_stats(mnt).get("underneath_refused", 0) >= 1,
            "%s: the refused edit is not counted" % label)


def mount_and_read(tmp, base, name):
    model = os.path.join(tmp, name)
    shutil.copyfile(base, model)
    g = harness.Gguffs(model)
    return model, g


def main():
    h = harness.start("underneath")
    tmp = tempfile.mkdtemp(prefix="gguffs-under-")
    try:
        base = os.path.join(tmp, "base.gguf")
        want = make_model(base, 1, "mounted")
        other = os.path.join(tmp, "other.gguf")
        owant = make_model(other, 2, "other", extra=True)
        other_bytes = [v for pair in owant.values() for v in pair]
        other_file = open(other, "rb").read()

        with h.case("cp over the model"):
            model, g = mount_and_read(tmp, base, "cp.gguf")
            try:
                for k, view in enumerate(("raw", "f32")):
                    h.check(read_tensor(g.mnt, "t0", view)[0] == want["t0"][k], "cp: t0/%s before" % view)
                ino = os.stat(model).st_ino
                subprocess.run(["cp", other, model], check=True)
                h.check(os.stat(model).st_ino == ino, "cp: not the same inode (test setup)")
                # inotify: the log line comes without any access to the mount
                # (a bounded number of reads of gguffs' stderr, no sleep)
                seen = False
                for _ in range(200000):
                    if "changed underneath:" in g.stderr():
                        seen = True
                        break
                h.check(seen, "cp over it: no log line without a read (inotify)")
                check_changed(h, "cp over it", g, model, want, other_bytes, "t0")
                h.check(open(model, "rb").read() == other_file,
                        "cp over it: MODEL.gguf is not byte for byte the other file")
                g.stop(h, "cp over it")
                h.check(g.stderr().count("changed underneath:") == 1,
                        "cp over it: log lines: %r" % g.stderr()[-2000:])
            finally:
                g.close()

        with h.case("dd conv=notrunc into the data"):
            model, g = mount_and_read(tmp, base, "dd.gguf")
            try:
                h.check(read_tensor(g.mnt, "t1", "f32")[0] == want["t1"][1], "dd: t1/f32 before")
                size = os.path.getsize(model)
                subprocess.run(["dd", "if=/dev/urandom", "of=" + model, "bs=16", "count=1",
                                "seek=%d" % ((size - 65536) // 16), "conv=notrunc"],
                               check=True, capture_output=True)
                h.check(os.path.getsize(model) == size, "dd: the size changed (test setup)")
                check_changed(h, "dd into it", g, model, want, None, "t1")
                g.stop(h, "dd into it")
            finally:
                g.close()

        with h.case("renamed over the model"):
            model, g = mount_and_read(tmp, base, "mv.gguf")
            try:
                h.check(read_tensor(g.mnt, "t0", "raw")[0] == want["t0"][0], "mv: t0/raw before")
                old_model = open(model, "rb").read()
                shutil.copyfile(other, model + ".tmp")
                os.rename(model + ".tmp", model)
                for n in NAMES:
                    for k, view in enumerate(("raw", "f32")):
                        got, err = read_tensor(g.mnt, n, view)
                        h.check(got == want[n][k], "renamed over: %s/%s reads %s"
                                % (n, view, err or "other bytes"))
                got, err = read_whole(os.path.join(g.mnt, "model.gguf"))
                h.check(got == old_model, "renamed over: model.gguf reads %s" % (err or "other bytes"))
                text = info(g.mnt)
                h.check(text.startswith("replaced underneath: mv.gguf was replaced or removed"),
                        "renamed over: info: %r" % text[:300])
                st = harness.read_stats(g.mnt)
                h.check(st.get("underneath_changed") == 0 and st.get("underneath_replaced") == 1,
                        "renamed over: stats: %r" % st)
                r = edit(g.mnt, "1")
                h.check(r.returncode != 0, "renamed over: an edit exits 0")
                h.check(open(model, "rb").read() == other_file,
                        "renamed over: the edit wrote into the new file")
                g.stop(h, "renamed over")
            finally:
                g.close()

        with h.case("dd into a split model's second shard"):
            rng = np.random.default_rng(3)
            paths, swant = [], {}
            for i in range(2):
                w = gw.GGUFWriter()
                if i == 0:
                    w.add("general.architecture", "string", "llama")
                    w.add("general.name", "string", "mounted")
                w.add("split.no", "u16", i)
                w.add("split.count", "u16", 2)
                if i == 0:
                    w.add("split.tensors.count", "i32", 4)
                for k in range(2):
                    x = rng.standard_normal(16384).astype("<f2")
                    n = "s%d.%d" % (i, k)
                    w.add_tensor(n, "f16", [16384], data=x.tobytes())
                    swant[n] = (x.tobytes(), x.astype("<f4").tobytes())
                paths.append(os.path.join(tmp, "sp-%05d-of-00002.gguf" % (i + 1)))
                w.write(paths[-1])
            g = harness.Gguffs(paths[0])
            try:
                h.check(read_tensor(g.mnt, "s1.0", "raw")[0] == swant["s1.0"][0], "split: s1.0/raw before")
                size = os.path.getsize(paths[1])
                subprocess.run(["dd", "if=/dev/urandom", "of=" + paths[1], "bs=16", "count=1",
                                "seek=%d" % ((size - 4096) // 16), "conv=notrunc"],
                               check=True, capture_output=True)
                first = open(paths[0], "rb").read()
                second = open(paths[1], "rb").read()
                for n in sorted(swant):
                    for k, view in enumerate(("raw", "f32")):
                        got, err = read_tensor(g.mnt, n, view)
                        if (n == "s1.0" and view == "raw") or n.startswith("s0."):
                            # read before (cached), or in the shard nobody changed:
                            # its bytes until the mount is marked changed (by this
                            # shard's read or inotify: either may come first), EIO after
                            h.check(got == swant[n][k] or err == os.strerror(errno.EIO),
                                    "split: %s/%s: %s" % (n, view, err or "other bytes"))
                        else:
                            # the shard that changed: its data not cached is EIO
                            h.check(err == os.strerror(errno.EIO),
                                    "split: %s/%s gives %s, not EIO" % (n, view, err or "bytes"))
                text = info(g.mnt)
                h.check(text.startswith("changed underneath: %s was modified" % os.path.basename(paths[1])),
                        "split: info: %r" % text[:300])
                r = edit(g.mnt, "1")
                h.check(r.returncode != 0, "split: an edit after the change exits 0")
                h.check(open(paths[0], "rb").read() == first and open(paths[1], "rb").read() == second,
                        "split: the refused edit wrote a shard")
                g.stop(h, "split")
            finally:
                g.close()

        with h.case("own edits"):
            model, g = mount_and_read(tmp, base, "own.gguf")
            stop = threading.Event()
            counts = {"reads": 0, "bad": []}

            def reader():
                i = 0
                while not stop.is_set() and len(counts["bad"]) < 5:
                    n = NAMES[i % len(NAMES)]
                    i += 1
                    try:
                        fd = os.open(os.path.join(g.mnt, "tensors", n, "raw"), os.O_RDONLY)
                        try:
                            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                            got = os.pread(fd, 8192, 4096)
                        finally:
                            os.close(fd)
                        if got != want[n][0][4096:4096 + 8192]:
                            counts["bad"].append("%s/raw: wrong bytes" % n)
                        with open(os.path.join(g.mnt, "model.gguf"), "rb") as f:
                            f.seek(os.fstat(f.fileno()).st_size - 4096)
                            got = f.read()
                        if got != want[NAMES[-1]][0][-4096:]:
                            counts["bad"].append("model.gguf: wrong bytes")
                        got, err = read_tensor(g.mnt, n, "f32")
                        if got != want[n][1]:
                            counts["bad"].append("%s/f32: %s" % (n, err or "wrong bytes"))
                    except OSError as e:
                        counts["bad"].append("%s: %s" % (n, e))
                    counts["reads"] += 1

            t = threading.Thread(target=reader)
            t.start()
            try:
                values = ["a", "b" * 100000, "c", "d" * 300000, "e"]
                for v in values:
                    try:
                        with open(os.path.join(g.mnt, "meta", "general.name"), "w") as f:
                            f.write(v + "\n")
                    except OSError as e:
                        h.fail("own edits: writing %s... (%d bytes): %s" % (v[:1], len(v), e))
                    st = harness.read_stats(g.mnt)
                    h.check(st.get("underneath_changed") == 0 and st.get("underneath_replaced") == 0,
                            "own edits: taken for a change after %s...: %r" % (v[:1], st))
                r = subprocess.run(["sh", "-c", "cd '%s' && echo 7 > general.made && rm general.made"
                                    % os.path.join(g.mnt, "meta")], capture_output=True, text=True)
                h.check(r.returncode == 0, "own edits: create and rm: %s" % r.stderr)
            finally:
                stop.set()
                t.join()
            h.check(not counts["bad"], "own edits: reads during the edits: %r" % counts["bad"])
            for n in NAMES:
                for k, view in enumerate(("raw", "f32")):
                    got, err = read_tensor(g.mnt, n, view)
                    h.check(got == want[n][k], "own edits: %s/%s reads %s" % (n, view, err or "wrong bytes"))
            st = harness.read_stats(g.mnt)
            h.check(st.get("underneath_changed") == 0 and st.get("underneath_replaced") == 0
                    and st.get("underneath_eio") == 0,
                    "own edits: stats at the end: %r" % st)
            h.check("underneath" not in info(g.mnt), "own edits: info speaks of a change")
            print("  own edits: %d edits, %d rounds of reads during them; in place %s, cloned %s, "
                  "copied %s" % (len(values) + 2, counts["reads"], st.get("edits_in_place"),
                                 st.get("edits_cloned"), st.get("edits_copied")), flush=True)
            g.stop(h, "own edits")
            h.check("underneath" not in g.stderr(), "own edits: log: %r" % g.stderr()[-2000:])
            g.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

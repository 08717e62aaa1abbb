#!/usr/bin/python3
# kill -9 of gguffs at random moments of metadata commits (in place and rewrite) on a >= 256 MB model; after each remount the file is exactly the old or the new version.
"""
Each trial, on a mount of a generated model (one big tensor of patterned
bytes, default 256 MiB):

  1. a child process opens meta/KEY, writes a new value, tells the test it
     is about to close(), and closes (the commit runs while close blocks);
  2. after a random delay in [0, 1.5 x the measured close() time]
     (stratified over the window, so early, middle and late kills all
     happen; a third of the window lies past the median close() time, so
     that kills after a rewrite's final rename come often enough, also
     under a sanitizer whose close() times spread widely), gguffs is
     killed with SIGKILL;
  3. the dead mount is unmounted, what the kill left on disk is noted
     (journal, new file, a header that is neither version), and the model is
     mounted again, which runs gguf_recover;
  4. checks: the model's size and header bytes are exactly those of the old
     or the new version (predicted byte for byte by tests/oracle/gguf_write.py),
     no MODEL.gguffs-journal / MODEL.gguffs-new is left, ggml's
     gguf_init_from_file loads it with the expected values, meta/KEY on the
     new mount reads the same version, tensor bytes are unchanged (samples
     every trial, the whole data region every --full-every trials and at
     the end), and if close() returned 0 before the kill the outcome is new.

Edits alternate at random between in place (llama.context_length, a u32,
or general.name, a same-length string) and tokenizer.chat_template edits
that change the header's size.  gguffs pads the header with gguffs.padding
(gguf/pad.h); the expected headers follow the same rule (predicted here
independently), and each trial's kind is the one predicted: "in place"
(the same header size), "padded" (a template edit the padding key takes:
in place, the header's bytes from the template on shifted under the
journal) or "rewrite" (a new file, the data start moved).

Where the model's file system clones (--fs xfs or btrfs: a loop-mounted
image made for the run, or a --dir on such a file system), the template
toggles between ~100 bytes and 4-12 KB: the rewrites clone the tensor data
(the data moves by whole blocks), or the padding takes the change.
Elsewhere (ext4, tmpfs: --fs ext4, or a --dir there) a rewrite copies the
data and leaves the padding's copy slack (64 KiB or more) to spare, so the
template is, at random, set to a length that fits that room ("padded", in
place; shrinking or growing by up to the room) or one that outgrows it by
up to 6 KB ("rewrite"); the run then also needs both outcomes of padded
trials.

    test_edit_crash.py [--trials N] [--size-mb N] [--dir DIR] [--seed S]
                       [--full-every N] [--verbose]
                       [--fs xfs|btrfs|ext4] [--require-clone] [--require-padded]

Defaults: 30 trials (GGUFFS_TEST_QUICK=1: 12), 256 MiB.  scripts/crash-test
runs it with 200 trials.  Trials are added (up to 3x) until each edit kind
has ended both old and new, each added one of a kind that still lacks an
outcome (not a kind drawn at random); a kind that had 3 random kills and still lacks
an outcome gets it by construction on its next trial: gguffs is killed
while the writer holds the file open before close() (the outcome must be
old), or right after close() returned (it must be new).  So the
(kind, outcome) pairs (four; six where the data is copied: padded too) do
not hang on luck on a loaded machine; the run still fails if no random
kill landed inside close(): a run that did not really try cannot pass.
"""
import argparse
import os
import random
import select
import shutil
import statistics
import string
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

QUICK = harness.QUICK
PAD_KEY = "gguffs.padding"
PAD_SLACK = 1024           # room a padded header keeps to spare where it clones (gguf/pad.h)
PAD_COPY_SLACK = 64 << 10  # ... where it is copied: max(this, header / 8)
ALIGN = 32                 # the model's general.alignment (the default)
MUL = np.uint64(0x9E3779B97F4A7C15)
CHUNK = 8 << 20            # bytes per pattern chunk (multiple of 8)
NAME_LEN = 10

# The child that edits: open, write, report, close, report.
WRITER = r"""
import os, sys, time
path, src = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
try:
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    v = memoryview(data)
    while v:
        v = v[os.write(fd, v):]
except OSError as e:
    print("pre %d" % e.errno, flush=True)
    sys.exit(0)
print("w", flush=True)
if len(sys.argv) > 3:
    sys.stdin.readline()       # the test killed gguffs first ("before" trials)
t0 = time.perf_counter()
try:
    os.close(fd)
    print("ok %.6f" % (time.perf_counter() - t0), flush=True)
except OSError as e:
    print("err %d" % e.errno, flush=True)
"""


def pattern(word0, nwords):
    """Data bytes from data-relative 8-byte word word0 on: every word differs."""
    return (np.arange(word0, word0 + nwords, dtype=np.uint64) * MUL).tobytes()


class Version:
    """One version of the model: values of the three edited keys, and the
    size of its padding key (None: it has none; gguffs appends it last)."""

    def __init__(self, name, ctx, tmpl, pad=None):
        self.name, self.ctx, self.tmpl, self.pad = name, ctx, tmpl, pad

    def writer(self, data_bytes, pad):
        import gguf_write as gw
        w = gw.GGUFWriter()
        w.add("general.architecture", "string", "llama")
        w.add("general.name", "string", self.name)
        w.add("llama.context_length", "u32", self.ctx)
        w.add("tokenizer.chat_template", "string", self.tmpl)
        w.add("general.file_type", "u32", 0)
        if pad is not None:
            w.add_raw_kv(PAD_KEY, w.encode_value("array[u8]", bytes(pad)))
        big = data_bytes - 4096
        w.add_tensor("big.weight", "f32", [4096, big // 4 // 4096], data=b"", offset=0, check=False)
        w.add_tensor("tail.weight", "f32", [1024], data=b"", offset=big, check=False)
        return w

    def header(self, data_bytes):
        hdr, _ = self.writer(data_bytes, self.pad).layout()
        return hdr

    def values(self):
        return {"general.name": self.name, "llama.context_length": self.ctx,
                "tokenizer.chat_template": self.tmpl}


def fitted(cur, cur_hdr, new, data_bytes, step):
    """new's header as gguffs writes it after cur (whose header is cur_hdr,
    its room): new.pad is set as gguf_pad_fit sizes it.  step: what the
    data may move by where the file system clones (lcm of its block size
    and the alignment), 0 where it does not."""
    room = len(cur_hdr)
    new.pad = cur.pad
    hdr = new.header(data_bytes)
    if len(hdr) == room:
        return hdr
    base = new.writer(data_bytes, b"").header_size()    # the key, 0 bytes
    if base <= room and (not step or room - base < step + PAD_SLACK):
        size = room
    elif step:
        want = base + PAD_SLACK
        size = (room + (want - room + step - 1) // step * step if want >= room
                else room - (room - want) // step * step)
    else:
        # outgrew its room, copied: moved by whole alignments, the copy
        # slack to spare
        want = base + max(PAD_COPY_SLACK, base // 8)
        size = room + (want - room + ALIGN - 1) // ALIGN * ALIGN
    new.pad = size - base
    hdr = new.header(data_bytes)
    assert len(hdr) == size, (len(hdr), size)
    return hdr


def make_model(path, v, data_bytes):
    hdr = v.header(data_bytes)
    with open(path, "wb") as f:
        f.write(hdr)
        for pos in range(0, data_bytes, CHUNK):
            n = min(CHUNK, data_bytes - pos)
            f.write(pattern(pos // 8, n // 8))
    return hdr


def check_data(path, data_off, data_bytes, rng, full):
    """None if the data region [data_off, end) holds the pattern (all of it
    when full, else 24 random 64 KiB pieces and both ends), else a message."""
    with open(path, "rb") as f:
        if full:
            pieces = [(p, min(CHUNK, data_bytes - p)) for p in range(0, data_bytes, CHUNK)]
        else:
            piece = 64 << 10
            starts = [0, data_bytes - piece] + [rng.randrange(0, data_bytes - piece) // 8 * 8
                                                for _ in range(24)]
            pieces = [(p, piece) for p in starts]
        for p, n in pieces:
            f.seek(data_off + p)
            got = f.read(n)
            if got != pattern(p // 8, n // 8):
                return "tensor data differs in [%d, %d) of the data region" % (p, p + n)
        if f.seek(0, 2) != data_off + data_bytes:
            return "size %d, expected %d" % (f.tell(), data_off + data_bytes)
    return None


# gguffs -f on mnt: the daemon is our child, so we kill exactly it, and its
# stderr is checked for sanitizer reports (harness.Gguffs).
Gguffs = harness.Gguffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=12 if harness.QUICK else 30)
    ap.add_argument("--size-mb", type=int, default=256)
    ap.add_argument("--dir", default=os.environ.get("GGUFFS_CRASH_DIR"))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--full-every", type=int, default=10,
                    help="check every tensor byte every N trials (always at the end)")
    ap.add_argument("--verbose", "-v", action="store_true")
    ap.add_argument("--fs", choices=["xfs", "btrfs", "ext4"],
                    help="run on a loop-mounted image of this file system (root)")
    ap.add_argument("--require-clone", action="store_true",
                    help="fail unless the model's file system clones (gguffs pads and clones)")
    ap.add_argument("--require-padded", action="store_true",
                    help="fail unless the model's file system does not clone (gguffs pads and "
                         "copies, then edits in place)")
    ap.add_argument("--force-after", type=int, default=3,
                    help="random kills of a kind before its missing outcome is forced (0: force "
                         "from the first trial, which tests the forcing itself)")
    args = ap.parse_args()

    h = harness.start("edit-crash")
    ggml = harness.require_oracle()

    seed = harness.test_seed(args.seed)
    rng = random.Random(seed)
    print("seed %d, %d trials, %d MiB model" % (seed, args.trials, args.size_mb), flush=True)

    lfs = None
    if args.fs:
        import loopfs
        lfs = loopfs.LoopFs(args.fs, size_mb=3 * args.size_mb + 256)
    try:
        return run(args, h, ggml, rng, lfs.path if lfs else args.dir)
    finally:
        if lfs:
            lfs.close()


def run(args, h, ggml, rng, where):
    import loopfs
    tmp = tempfile.mkdtemp(prefix="gguffs-crash-", dir=where)
    mdir = os.path.join(tmp, "model")          # holds the model and nothing else
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mdir)
    os.mkdir(mnt)
    model = os.path.join(mdir, "m.gguf")
    valfile = os.path.join(tmp, "value")
    data_bytes = (args.size_mb << 20) + 4096
    step = loopfs.clone_step(mdir)
    fstype = loopfs.fs_type(mdir)
    print("file system %s: %s" % (fstype, "clones: headers padded, data moved by %d-byte "
                                  "steps" % step if step else "does not clone: headers padded for "
                                  "copies (the copy slack to spare), then template edits in place"),
          flush=True)
    if args.require_clone and not step:
        shutil.rmtree(tmp, ignore_errors=True)
        h.fail("--require-clone: %s does not clone" % mdir)
        return h.finish()
    if args.require_padded and step:
        shutil.rmtree(tmp, ignore_errors=True)
        h.fail("--require-padded: %s clones" % mdir)
        return h.finish()

    def rand_name():
        return "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(NAME_LEN))

    def tmpl_of(n):
        line = "{%% for m in messages %%}{{ m.content }}{%% endfor %%} %d\n" % rng.randrange(10**6)
        return (line * (n // len(line) + 1))[:n].rstrip("\n") + "."

    def rand_tmpl(big):
        return tmpl_of(rng.randrange(4000, 12000) if big else rng.randrange(50, 200))

    def copy_tmpl(cur, cur_hdr, fit=None):
        """Where the data is copied: a template that fits the room (the
        padding takes it) or outgrows it by up to 6 KB: at random, or as
        fit says."""
        probe = Version(cur.name, cur.ctx, "")
        spare = len(cur_hdr) - probe.writer(data_bytes, b"").header_size()
        if fit if fit is not None else rng.random() < 0.5:
            return tmpl_of(rng.randrange(50, max(51, spare - 8)))
        return tmpl_of(spare + rng.randrange(1, 6000))

    cur = Version(rand_name(), 4096, rand_tmpl(False))
    t0 = time.time()
    cur_hdr = make_model(model, cur, data_bytes)
    print("model written: %d bytes in %.1fs" % (os.path.getsize(model), time.time() - t0), flush=True)

    counts = {"old": 0, "new": 0, "in place": 0, "padded": 0, "rewrite": 0,
              "kill before close": 0, "kill during close": 0, "kill after close returned": 0,
              "journal left": 0, "new file left": 0, "torn header before recovery": 0,
              "recovery messages": 0, "ok close then old (BUG)": 0, "rewrite by clone (planned)": 0,
              "random in place": 0, "random padded": 0, "random rewrite": 0,
              "forced before": 0, "forced after": 0}
    outcome_by_kind = {(k, o): 0 for k in ("in place", "padded", "rewrite") for o in ("old", "new")}
    # every kind must end old and new; where the data is copied the padded
    # path is what the copy buys, and it must be killed too
    required = [ko for ko in outcome_by_kind if step == 0 or ko[0] != "padded"]
    close_times = {"in place": [], "padded": [], "rewrite": []}
    strata = {"in place": [], "padded": [], "rewrite": []}
    S = 6

    def verify(label, versions, full):
        """Checks the model after a mount; returns the version index it is
        (0/1 of versions) or None after a failure."""
        leftovers = sorted(set(os.listdir(mdir)) - {"m.gguf"})
        h.check(not leftovers, "%s: files left beside the model after the remount: %r" % (label, leftovers))
        size = os.path.getsize(model)
        with open(model, "rb") as f:
            head = f.read(max(len(hh) for _, hh in versions))
        which = None
        for i, (v, hh) in enumerate(versions):
            if size == len(hh) + data_bytes and head[:len(hh)] == hh:
                which = i
        if not h.check(which is not None, "%s: the model is neither the old nor the new version "
                       "(size %d; header sizes %s)" % (label, size, [len(hh) for _, hh in versions])):
            return None
        v, hh = versions[which]
        m = ggml.read_gguf(model)
        if h.check(m is not None, "%s: ggml refuses the model: %s" % (label, ggml.last_log())):
            kv = {k.decode(): val for k, _, val in m.kvs}
            got = {k: (kv.get(k).decode("utf-8", "replace") if isinstance(kv.get(k), bytes) else kv.get(k))
                   for k in v.values()}
            h.check(got == v.values(), "%s: ggml reads %r, expected %r" % (
                label, {k: str(x)[:40] for k, x in got.items()}, {k: str(x)[:40] for k, x in v.values().items()}))
            h.check(m.data_offset == len(hh), "%s: ggml data offset %d, expected %d" % (label, m.data_offset, len(hh)))
        msg = check_data(model, len(hh), data_bytes, rng, full)
        h.check(msg is None, "%s: %s" % (label, msg))
        return which

    gf = None
    try:
        gf = Gguffs(model, mnt=mnt)
        verify("initial", [(cur, cur_hdr)], True)
        trial = 0
        planned = args.trials
        while trial < planned:
            # where the data is copied, template edits are half padded (in
            # place), half rewrites: a third each with the other in place.
            # Past the trials asked for, only kinds that still lack an
            # outcome are tried: chance gave one run 2 in-place kills of 18
            # (both new) and the run failed for want of an old one.
            lacking = sorted({k for k, o in required if not outcome_by_kind[(k, o)]})
            aim = rng.choice(lacking) if trial >= args.trials and lacking else None
            if aim:
                kind = "in place" if aim == "in place" else "rewrite"
            else:
                kind = rng.choice(["in place", "rewrite"] + ([] if step else ["rewrite"]))
            if kind == "in place":
                if rng.random() < 0.5:
                    key, new = "llama.context_length", Version(cur.name, rng.randrange(1, 1 << 32), cur.tmpl)
                    while new.ctx == cur.ctx:
                        new.ctx = rng.randrange(1, 1 << 32)
                    text = "%d\n" % new.ctx
                else:
                    key, new = "general.name", Version(rand_name(), cur.ctx, cur.tmpl)
                    text = new.name
            else:
                key = "tokenizer.chat_template"
                fit = None if aim is None or aim == "in place" else aim == "padded"
                new = Version(cur.name, cur.ctx, copy_tmpl(cur, cur_hdr, fit) if not step
                              else rand_tmpl(len(cur.tmpl) < 1000))
                text = new.tmpl
            new_hdr = fitted(cur, cur_hdr, new, data_bytes, step)
            if kind == "in place":
                h.check(len(new_hdr) == len(cur_hdr), "trial %d: test bug: %s edit changes "
                        "the header size %d -> %d" % (trial, kind, len(cur_hdr), len(new_hdr)))
            # what gguffs does with it (the padding may take a template edit)
            if len(new_hdr) != len(cur_hdr):
                kind = "rewrite"
            elif kind == "rewrite":
                kind = "padded"
            if kind == "rewrite" and step:
                h.check((len(new_hdr) - len(cur_hdr)) % step == 0, "trial %d: test bug: "
                        "a padded rewrite moves the data by %d" % (trial, len(new_hdr) - len(cur_hdr)))
                counts["rewrite by clone (planned)"] += 1
            with open(valfile, "w") as f:
                f.write(text)

            calibrating = len(close_times[kind]) < 3
            # a kind that had --force-after random kills and still lacks an
            # outcome gets it by construction: killed before close() (old)
            # or after close() returned (new)
            force = None
            if not calibrating and counts["random " + kind] >= args.force_after:
                if not outcome_by_kind[(kind, "new")] and (kind, "new") in required:
                    force = "after"
                elif not outcome_by_kind[(kind, "old")] and (kind, "old") in required:
                    force = "before"
            if calibrating or force:
                delay = None          # let the commit finish: measures close()
            else:
                if not strata[kind]:
                    strata[kind] = list(range(S))
                    rng.shuffle(strata[kind])
                k = strata[kind].pop()
                delay = 1.5 * statistics.median(close_times[kind][-15:]) * (k + rng.random()) / S
            label = "trial %d (%s, %s%s)" % (trial, kind, key,
                                             ", kill %s close()" % force if force else
                                             "" if delay is None else ", kill after %.1f ms" % (delay * 1e3))

            child = subprocess.Popen([sys.executable, "-c", WRITER, os.path.join(mnt, "meta", key), valfile]
                                     + (["wait"] if force == "before" else []),
                                     stdout=subprocess.PIPE,
                                     stdin=subprocess.PIPE if force == "before" else subprocess.DEVNULL,
                                     bufsize=0)
            line = b""
            r, _, _ = select.select([child.stdout], [], [], 30)
            if r:
                line = child.stdout.readline()
            if not h.check(line == b"w\n", "%s: the writer did not get to close(): %r" % (label, line)):
                child.kill()
                child.wait()
                break
            killed = False
            if force == "before":
                state_at_kill = None
                gf.kill(h, label)
                killed = True
                child.stdin.write(b"c\n")
                child.stdin.flush()
            elif delay is not None:
                # a random moment inside the commit (not synchronisation)
                time.sleep(delay)
                state_at_kill = child.poll()
                gf.kill(h, label)
                killed = True
            try:
                out = child.communicate(timeout=30)[0].decode()
            except subprocess.TimeoutExpired:
                child.kill()
                out = child.communicate()[0].decode()
                h.fail("%s: the writer hung in close() (after the kill: %s)" % (label, killed))
            ok = out.startswith("ok")
            if ok:
                close_times[kind].append(float(out.split()[1]))
            if force == "after":
                if not h.check(ok, "%s: edit failed: %r (%s)" % (label, out, gf.stderr()[-300:])):
                    break
                gf.kill(h, label)
                killed = True
                state_at_kill = 0
            if not killed:
                if not h.check(ok, "%s: unkilled edit failed: %r (%s)" % (label, out, gf.stderr()[-300:])):
                    break
                gf.stop(h, label)
            else:
                if state_at_kill is not None:
                    counts["kill after close returned"] += 1
                elif ok:
                    counts["kill after close returned"] += 1   # the reply raced the kill
                else:
                    counts["kill during close"] += 1
                harness.unmount(mnt)
            # what the kill left, before recovery
            left = set(os.listdir(mdir)) - {"m.gguf"}
            if any(n.endswith("gguffs-journal") for n in left):
                counts["journal left"] += 1
            if any(n.endswith("gguffs-new") for n in left):
                counts["new file left"] += 1
            with open(model, "rb") as f:
                head = f.read(max(len(cur_hdr), len(new_hdr)))
            size = os.path.getsize(model)
            if not any(size == len(hh) + data_bytes and head[:len(hh)] == hh for hh in (cur_hdr, new_hdr)):
                counts["torn header before recovery"] += 1

            gf.close()             # (its stderr was checked by stop/kill)
            # remount: gguf_recover runs
            try:
                gf = Gguffs(model, mnt=mnt)
            except harness.MountError as e:
                h.fail("%s: remount failed: %s" % (label, e))
                gf = None
                break
            err = gf.stderr()
            if err.strip():
                counts["recovery messages"] += 1
                if args.verbose:
                    print("  %s" % err.strip())
            full = (trial + 1) % args.full_every == 0
            which = verify(label, [(cur, cur_hdr), (new, new_hdr)], full)
            if which is None:
                break
            outcome = "new" if which == 1 else "old"
            if ok and outcome != "new":
                counts["ok close then old (BUG)"] += 1
                h.fail("%s: close() returned 0 but after the remount the model is the old version" % label)
            # the mount shows the same version
            with open(os.path.join(mnt, "meta", key)) as f:
                shown = f.read()
            want = (new if which else cur).values()[key]
            h.check(shown.rstrip("\n") == str(want), "%s: meta/%s on the remount reads %r, expected %r"
                    % (label, key, shown[:40], str(want)[:40]))
            if args.verbose:
                print("%s: close %s, %s%s" % (label, out.strip() or "-", outcome,
                                              " (recovery: %s)" % err.strip() if err.strip() else ""),
                      flush=True)
            if force == "before":
                h.check(outcome == "old", "%s: gguffs was killed before close(), yet the model "
                        "is the new version" % label)
            if killed:
                counts["forced " + force if force else "random " + kind] += 1
                counts[outcome] += 1
                counts[kind] += 1
                outcome_by_kind[(kind, outcome)] += 1
                trial += 1
                if trial == planned and planned < args.trials * 3 and not (
                        all(outcome_by_kind[ko] for ko in required) and counts["kill during close"]):
                    planned += 1       # keep trying until each kind ended old and new
            if which == 1:
                cur, cur_hdr = new, new_hdr
        if gf:
            gf.stop(h, "after the trials")
            gf.close()
            gf = None
        # final: a fresh mount, every tensor byte
        gf = Gguffs(model, mnt=mnt)
        verify("final", [(cur, cur_hdr)], True)
        gf.stop(h, "final mount")
        gf.close()
        gf = None
    finally:
        if gf:
            gf.close()
        harness.unmount(mnt)
        shutil.rmtree(tmp, ignore_errors=True)

    killed_n = counts["in place"] + counts["padded"] + counts["rewrite"]
    print("trials: %d killed (%d in place, %d padded: a template edit in place, %d rewrite); "
          "outcomes: %d old, %d new (%s)"
          % (killed_n, counts["in place"], counts["padded"], counts["rewrite"],
             counts["old"], counts["new"],
             ", ".join("%s %d old / %d new" % (k, outcome_by_kind.get((k, "old"), 0),
                                               outcome_by_kind.get((k, "new"), 0))
                       for k in ("in place", "padded", "rewrite"))))
    print("kills: %d during close() (the edit's commit), %d after close() returned; left for recovery: "
          "%d journals, %d new files, %d torn headers; %d remounts reported a recovery"
          % (counts["kill during close"], counts["kill after close returned"], counts["journal left"],
             counts["new file left"], counts["torn header before recovery"], counts["recovery messages"]))
    for kind, ts in close_times.items():
        if ts:
            print("close() time, %s: median %.1f ms (%d measured)" % (kind, statistics.median(ts) * 1e3, len(ts)))
    print("kills at a random moment: %d; forced (a kind lacking an outcome after %d): %d before close(), "
          "%d after close() returned"
          % (killed_n - counts["forced before"] - counts["forced after"], args.force_after,
             counts["forced before"], counts["forced after"]))
    print("close() returned 0 but the outcome was old: %d" % counts["ok close then old (BUG)"])
    if step:
        print("rewrites planned as clones (padded, data moved by whole %d-byte steps): %d"
              % (step, counts["rewrite by clone (planned)"]))
    for kind, outcome in required:
        n = outcome_by_kind[(kind, outcome)]
        h.check(n > 0, "no %s trial ended with the %s version: the kills did not cover the commit" % (kind, outcome))
    h.check(counts["kill during close"] > 0, "no kill landed inside close()")
    h.check(killed_n >= args.trials, "fewer trials than asked")
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

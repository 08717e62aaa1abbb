# scripts/bench --part 3: metadata edits through a mount (in place, growing past the padding: a rewrite, growing into the padding) against cp of the model.
"""
Part 3 (metadata edits), on a generated model of --edit-mb MiB
(default 4096) mounted with gguffs -f:
  in place   echo N > meta/llama.context_length (open, write, close() through
             the mount, done in-process: what the shell does), median of 9
  growing    tokenizer.chat_template grown by 8 KiB more than the room the
             header's padding key leaves (the header outgrows it: a rewrite
             of the whole file, which pads the header again), median of 5
             (--quick: 1)
  padded     after those rewrites (and once the file system has freed the
             files they replaced: waited for, its time printed), 8 growing
             edits in a row, the template
             8 KiB longer each time (64 KiB in all): the padding key a
             copying rewrite leaves (max(64 KiB, header / 8) to spare,
             gguf/pad.h) takes them in place; median of the 8, and how
             they were written (stats: edits_in_place, edits_copied)
  baseline   cp MODEL COPY in the same directory (same filesystem): the
             target's baseline; and cp + fsync(COPY) + rename over MODEL +
             fsync(directory), the same durability as a gguffs rewrite.
             After each run COPY replaces MODEL (same bytes), so each cp
             reads the file the previous one wrote, as each rewrite does
  memory     peak RSS of gguffs while it rewrites (VmRSS sampled every 5 ms,
             and VmHWM)
  Every run starts after a sync.  Warm rows: the model is read into the
  page cache before every timed growing edit and cp; cold rows (root only): the page cache is dropped
  before every timed edit and cp.  (On a VM the host may still cache the
  disk, so cold rows are noisy.)
  --quick: an 8 MiB model, 2 in-place edits, 1 rewrite, 2 padded edits, 1 cp.
"""
import os
import statistics
import time

import common
import harness
from common import CHUNK, GGUFWriter, drop_caches, edit_file, proc_status, sh, warm_up

NAME = "3"
ALIASES = ("edit",)
# The wait for the files the rewrites replaced to be freed (wait_freed):
# at most this long, and what may stay taken (the headers' growth).
FREE_WAIT_S = 60
FREE_SLACK = 64 << 20

def make_edit_file(path, size_mb, name="bench-edit"):
    """A llama-like header (32k-token vocabulary) and one f16 tensor of
    size_mb MiB (patterned), synced; also bench_edit_fs.py's model."""
    n = size_mb * (1 << 20) // 2
    w = GGUFWriter()
    w.add("general.architecture", "string", "llama")
    w.add("general.name", "string", name)
    w.add("llama.context_length", "u32", 4096)
    w.add("llama.embedding_length", "u32", 4096)
    w.add("tokenizer.chat_template", "string", "{{ messages }}")
    w.add("tokenizer.ggml.tokens", "array[string]", ["tok%d" % i for i in range(32000)])
    w.add_tensor("big.weight", "f16", [4096, n // 4096], data=b"", check=False)
    hdr, _ = w.layout()
    block = bytes(range(256)) * (8 * CHUNK // 256)
    with open(path, "wb") as f:
        f.write(hdr)
        left = n * 2
        while left:
            k = min(left, len(block))
            f.write(block[:k])
            left -= k
    os.sync()


def run(work, args):
    size_mb = args.edit_mb or (8 if args.quick else 4096)
    reps = 1 if args.quick else 5
    n_inplace, n_padded = (2, 2) if args.quick else (9, 8)
    path = os.path.join(work, "edit.gguf")
    copy = os.path.join(work, "copy.gguf")
    t0 = time.perf_counter()
    make_edit_file(path, size_mb)
    print("# part 3: %d MiB model written in %.1fs" % (size_mb, time.perf_counter() - t0), flush=True)
    modes = ["warm"] + (["cold"] if drop_caches() else [])
    if "cold" not in modes:
        common.left_out(NAME, "not root: no cold runs (page cache not dropped)")

    def prep(mode, whole=True):
        """No dirty data left from the previous run (sync); warm: the model
        is in the page cache; cold: nothing is."""
        os.sync()
        if mode == "cold":
            drop_caches()
        elif whole:
            warm_up(path)

    def cp(safe):
        """cp MODEL COPY, then COPY is renamed over MODEL (identical bytes),
        so that, like a rewrite by gguffs, every run reads the file the
        previous one wrote.  Timed: the cp alone, or (safe) cp + fsync +
        rename + fsync of the directory, which is what gguffs does."""
        t0 = time.perf_counter()
        sh("cp", path, copy)
        if safe:
            fd = os.open(copy, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            os.rename(copy, path)
            fd = os.open(work, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        dt = time.perf_counter() - t0
        if not safe:
            os.rename(copy, path)
        return dt

    # baselines: cp to the same filesystem; cp + fsync + rename over the model
    base = {}
    for mode in modes:
        cp_t, cps_t = [], []
        for _ in range(reps):
            prep(mode)
            cp_t.append(cp(False))
            prep(mode)
            cps_t.append(cp(True))
        base[mode] = (statistics.median(cp_t), statistics.median(cps_t))

    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    g = harness.Gguffs(path, mnt=mnt)
    meta = os.path.join(mnt, "meta")
    inplace, grow, padded, grow_how, padded_how, freed = {}, {}, {}, {}, {}, {}
    peak = [0]
    n_grow = [0]
    tmpl_len = [0]

    def free_bytes():
        st = os.statvfs(work)
        return st.f_bfree * st.f_frsize

    def wait_freed(before):
        """Seconds until the file system has the space back that the
        rewrites took (the files they replaced freed; what is left is the
        header's growth, far under the slack), or None after FREE_WAIT_S."""
        t0 = time.perf_counter()
        while free_bytes() < before - FREE_SLACK:
            if time.perf_counter() - t0 > FREE_WAIT_S:
                return None
            time.sleep(0.02)
        return time.perf_counter() - t0

    def edit_stats():
        with open(os.path.join(mnt, "stats")) as f:
            st = dict(line.split(" ", 1) for line in f.read().splitlines())
        return {k: int(st.get(k, 0)) for k in ("edits_in_place", "edits_cloned", "edits_copied")}

    def how(before, after):
        return ", ".join("%d %s" % (after[k] - before[k], k[len("edits_"):].replace("_", " "))
                         for k in ("edits_in_place", "edits_cloned", "edits_copied")
                         if after[k] > before[k])

    def pad_bytes():
        """The padding key's size (meta/gguffs.padding: one "0" per line),
        0 while the model has none."""
        try:
            with open(os.path.join(meta, "gguffs.padding")) as f:
                return f.read().count("\n")
        except FileNotFoundError:
            return 0

    def template():
        line = "{%% for m in messages %%}{{ m.content }}{%% endfor %%} %03d\n" % n_grow[0]
        return (line * (tmpl_len[0] // len(line) + 1))[:tmpl_len[0]]
    try:
        ctx = os.path.join(meta, "llama.context_length")
        tmpl = os.path.join(meta, "tokenizer.chat_template")
        size0 = os.path.getsize(path)
        rss0 = proc_status(g.pid, "VmRSS") or 0
        last = None
        for mode in modes:
            inplace[mode] = []
            for i in range(n_inplace):
                prep(mode, whole=False)
                last = 8192 + len(inplace[mode])
                t0 = time.perf_counter()
                edit_file(ctx, "%d\n" % last)
                inplace[mode].append(time.perf_counter() - t0)
            grow[mode] = []
            s0 = edit_stats()
            free0 = free_bytes()
            with harness.RssPeak(g.pid, 0.005) as rp:
                for i in range(reps):
                    # every edit makes the template 8 KiB longer than the
                    # padding's room: a rewrite
                    n_grow[0] += 1
                    tmpl_len[0] += 8192 + pad_bytes()
                    text = template()
                    prep(mode)
                    t0 = time.perf_counter()
                    edit_file(tmpl, text)
                    grow[mode].append(time.perf_counter() - t0)
            peak[0] = max(peak[0], rp.peak)
            grow_how[mode] = how(s0, edit_stats())
            # each rewrite replaced the model; gguffs frees the old version
            # off the writer's close() (core/commit.c), and the file system
            # then frees its 2 GiB (on a `discard` mount, 0.5-0.8 s that
            # fall on the next edits): the padded edits are timed once
            # that space is back, and the wait is reported
            freed[mode] = wait_freed(free0)
            # then growing edits the padding takes: 8 KiB more each, 64 KiB in all
            padded[mode] = []
            s0 = edit_stats()
            for i in range(n_padded):
                tmpl_len[0] += 8192
                text = template()
                prep(mode)
                t0 = time.perf_counter()
                edit_file(tmpl, text)
                padded[mode].append(time.perf_counter() - t0)
            padded_how[mode] = how(s0, edit_stats())
            print("# part 3: %s: rewrites %s s (%s); the replaced files freed %s; padded edits %s ms (%s)"
                  % (mode, " ".join("%.2f" % t for t in grow[mode]), grow_how[mode],
                     "%.2f s after the last rewrite" % freed[mode] if freed[mode] is not None
                     else "NOT seen within %d s" % FREE_WAIT_S,
                     " ".join("%.1f" % (t * 1e3) for t in padded[mode]), padded_how[mode]),
                  flush=True)
        hwm = proc_status(g.pid, "VmHWM") or 0
        grew = os.path.getsize(path) - size0
        with open(ctx) as f:
            ok = f.read().strip() == str(last)
        g.stop(None, "gguffs -f %s" % os.path.basename(path))
    finally:
        g.close()
    if not ok or grew <= 0:
        print("# part 3: WARNING: edits not seen (context_length ok: %s, file grew by %d bytes)" % (ok, grew))
    print("Part 3: metadata edits on a %d MiB model; cp to the same filesystem (ext4 here: no reflink); "
          "warm = the model in the page cache before each run%s"
          % (size_mb, "; cold = page cache dropped before each run" if "cold" in modes
             else "; NOT root: no cold runs"))
    print()
    print("| benchmark | gguffs | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    for mode in modes:
        cp_m, cps_m = base[mode]
        ip, gr = statistics.median(inplace[mode]), statistics.median(grow[mode])
        print("| %s: in-place edit, echo N > meta/llama.context_length incl. close (median of %d) "
              "| %.2f ms | cp %.2f s | %.4f | <= 0.01 |" % (mode, len(inplace[mode]), ip * 1e3, cp_m, ip / cp_m))
        print("| %s: growing edit, chat_template 8 KiB past the padding's room = rewrite "
              "(median of %d; %s) | %.2f s | cp %.2f s | %.2f | <= 1.2 |"
              % (mode, reps, grow_how[mode], gr, cp_m, gr / cp_m))
        print("| %s: growing edit vs the same durability by hand: cp + fsync + rename | %.2f s "
              "| cp+fsync+mv %.2f s | %.2f | - |" % (mode, gr, cps_m, gr / cps_m))
        pd = statistics.median(padded[mode])
        print("| %s: growing edit the padding takes, chat_template +8 KiB x %d after a rewrite, "
              "its replaced file freed (median of %d, max %.2f ms; %s) | %.2f ms | cp %.2f s | %.4f | <= 0.01 |"
              % (mode, n_padded, len(padded[mode]), max(padded[mode]) * 1e3, padded_how[mode], pd * 1e3,
                 cp_m, pd / cp_m))
    print("| gguffs peak RSS during the growing edits | %.1f MiB (VmHWM %.1f MiB; %.1f MiB before) "
          "| model %d MiB | %.4f | bounded |"
          % (peak[0] / 1024, hwm / 1024, rss0 / 1024, size_mb, peak[0] / 1024 / size_mb))
    print(flush=True)
    os.unlink(path)


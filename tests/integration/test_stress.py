#!/usr/bin/python3
# Stress: 8 processes read random ranges of tensors/*/f32 and raw for a bounded time, every read compared with ggml's dequantization, with -o cache_size=1M and a large cache with prefetch workers; RSS of gguffs sampled and bounded; a watchdog fails the test when reads stall.
"""
The model (written by ggml's writer) holds 8 tensors of f32, f16, bf16,
q4_0, q8_0, q4_K, q6_K and iq4_xs, 3 MB of f32 each (11-12 cache chunks,
not a whole number of them), made from blocks quantized by ggml and drawn
with replacement.  The expected f32 bytes are ggml's to_float of the raw
bytes, computed before the readers fork.  The large cache runs with two
prefetch workers (-o threads=2: the default has none on two CPUs), so
that they are under stress too.

Each of the 8 reader processes loops until the deadline and until it has
checked at least MIN_READS reads (counted work: a loaded machine runs
longer instead of failing): picks a tensor and
a view (f32 three times in four), a random range (unaligned, straddling
chunk boundaries, up to 3 chunks, at and past the end), reads it with pread
through a kept descriptor or a fresh open, and compares it with the
expectation; half of the reads first drop the file's pages from the
kernel's cache (POSIX_FADV_DONTNEED), so that they reach gguffs.  The
parent samples gguffs' RSS every 0.1 s on a thread (harness.RssPeak: a
sampling period, not synchronisation) and watches each
reader's last progress: no progress for 20 s (STALL, a hang guard) is a
deadlock; then gguffs' thread stacks are printed and it is killed.  gguffs
runs as a child (harness.mount: gguffs -f), so its exit status and stderr
(sanitizer reports) are checked after the unmount.

Duration per cache size: GGUFFS_STRESS_SECONDS, else 30 s (15 s with
GGUFFS_TEST_QUICK=1, as in the ASan run): about 120 000 reads checked with
the small cache and 250 000 with the large one on 2 CPUs.  The long runs
of the same readers, beside edits, remounts and signals, are scripts/soak's
(hours, doc/RELIABILITY.md).  RSS bound: growth after mount <=
min(cache_size, f32 bytes) + 64 MiB (under a sanitizer build ASan's
quarantine is turned off, as in test_f32.py; not checked under
ThreadSanitizer, whose shadow memory dwarfs it).  Prints reads checked, bytes,
duration, peak RSS and the cache's stats.
"""
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SECONDS = float(os.environ.get("GGUFFS_STRESS_SECONDS") or (15 if harness.QUICK else 30))
STALL = 20.0
MIN_READS = 100          # per reader, before it may stop
READERS = 8
CHUNK = 1 << 20          # bytes of f32 per cache chunk: set from the stats file (run)
TYPES = ("f32", "f16", "bf16", "q4_0", "q8_0", "q4_K", "q6_K", "iq4_xs")

EXPECT = {}      # name -> (raw bytes, f32 bytes); filled before the fork


def make_model(ggml, path):
    rng = np.random.default_rng(424242)
    tensors = []
    for i, tname in enumerate(TYPES):
        t = ggml.type_id(tname)
        _, bs, ts = ggml.ggml_types()[t]
        ne0 = 4096
        rows = (3 << 20) // 4 // ne0 + 2 * i + 1          # ~3 MB of f32, odd rows
        nblk = ne0 * rows // bs
        if tname == "f32":
            raw = rng.standard_normal(ne0 * rows).astype("<f4").tobytes()
        else:
            pool_n = min(nblk, 2048)
            x = rng.standard_normal(pool_n * bs).astype(np.float32)
            x *= np.exp(rng.uniform(-3, 3, pool_n)).astype(np.float32).repeat(bs)
            pool = np.frombuffer(ggml.quantize(tname, x, bs * 16 if pool_n % 16 == 0 else bs * pool_n),
                                 np.uint8).reshape(pool_n, ts)
            raw = pool[rng.integers(0, pool_n, nblk)].tobytes()
        tensors.append(("s%d.%s" % (i, tname), tname, [ne0, rows], raw))
    ggml.write_model(path, [("general.architecture", "string", "llama")], tensors)
    out = {}
    for name, tname, ne, raw in tensors:
        out[name] = (raw, ggml.dequant(tname, raw).view("<u4").tobytes())
    return out


def pick_range(rng, size):
    r = rng.random()
    if r < 0.3 and size > CHUNK:
        b = CHUNK * int(rng.integers(1, (size - 1) // CHUNK + 1))
        return b - int(rng.integers(1, 600)), int(rng.integers(2, 9000))
    if r < 0.4:
        return size - int(rng.integers(0, min(size, 5000) + 1)), int(rng.integers(1, 9000))
    if r < 0.43:
        return size + int(rng.integers(0, 100)), int(rng.integers(1, 100))
    if r < 0.55:
        return int(rng.integers(0, size)), int(rng.integers(CHUNK // 2, 3 * CHUNK))
    return int(rng.integers(0, size)), int(rng.integers(1, 65537))


def reader(idx, mnt, deadline, progress, counts, errq):
    rng = np.random.default_rng(9000 + idx)
    names = sorted(EXPECT)
    fds = {}
    reads = nbytes = 0
    try:
        while time.time() < deadline or reads < MIN_READS:
            name = names[int(rng.integers(0, len(names)))]
            raw, f32 = EXPECT[name]
            view = "f32" if rng.random() < 0.75 else "raw"
            want_all = f32 if view == "f32" else raw
            p = os.path.join(mnt, "tensors", name, view)
            a, ln = pick_range(rng, len(want_all))
            # the kernel keeps what it read (keep_cache): drop the pages often
            # so that most reads reach gguffs and its cache
            drop = rng.random() < 0.5
            got = harness.pread_via(fds, p, ln, a, fresh=rng.random() < 0.3, drop=drop)
            want = want_all[a:a + ln]
            reads += 1
            nbytes += len(got)
            if got != want:
                n = min(len(got), len(want))
                diff = next((i for i in range(n) if got[i] != want[i]), n)
                errq.put("reader %d: %s/%s [%d, +%d): %d bytes, expected %d; first "
                         "difference at byte %d" % (idx, name, view, a, ln, len(got),
                                                   len(want), a + diff))
                return
            progress[idx] = time.time()
            counts[2 * idx] = reads
            counts[2 * idx + 1] = nbytes
    except Exception as e:  # noqa: BLE001
        errq.put("reader %d: %s: %s" % (idx, type(e).__name__, e))
    finally:
        for fd in fds.values():
            os.close(fd)
        counts[2 * idx] = reads
        counts[2 * idx + 1] = nbytes


def run(h, model, cache, cache_bytes, f32_total, summary, opts=""):
    label = "stress, -o cache_size=%s%s" % (cache, opts)
    with h.case(label):
        with harness.mounted(model, ["-o", "cache_size=%s%s" % (cache, opts)],
                             env=harness.no_quarantine_env()) as g, harness.RssPeak(g.pid, 0.1) as rss:
            mnt, pid = g.mnt, g.pid
            global CHUNK        # the readers are forked: they see it
            CHUNK = harness.read_stats(mnt).get("chunk_bytes") or CHUNK
            ctx = multiprocessing.get_context("fork")
            progress = ctx.Array("d", READERS, lock=False)
            counts = ctx.Array("q", 2 * READERS, lock=False)
            errq = ctx.Queue()
            t0 = time.time()
            for i in range(READERS):
                progress[i] = t0
            deadline = t0 + SECONDS
            procs = [ctx.Process(target=reader, args=(i, mnt, deadline, progress, counts, errq))
                     for i in range(READERS)]
            for p in procs:
                p.start()
            stalled = None
            sentinels = [p.sentinel for p in procs]
            while any(p.is_alive() for p in procs):
                multiprocessing.connection.wait(sentinels, timeout=1.0)   # watchdog period
                if rss.gone:
                    h.fail("%s: gguffs (pid %d) is gone while reading" % (label, pid))
                    break
                now = time.time()
                for i, p in enumerate(procs):
                    if p.is_alive() and now - progress[i] > STALL:
                        stalled = (i, now - progress[i])
                if stalled:
                    break
            if stalled:
                h.fail("%s: reader %d made no progress for %.0f s (deadlock?); gguffs threads:\n%s"
                       % (label, stalled[0], stalled[1], harness.thread_stacks(pid)))
                os.kill(pid, signal.SIGKILL)    # aborts the connection: readers get ENOTCONN
            for p in procs:
                p.join(30)
                if p.is_alive():
                    p.kill()
                    p.join()
            dt = time.time() - t0
            errs = []
            while not errq.empty():
                errs.append(errq.get())
            reads = sum(counts[2 * i] for i in range(READERS))
            nbytes = sum(counts[2 * i + 1] for i in range(READERS))
            h.check(not errs, "%s: %d readers saw errors: %s" % (label, len(errs), errs[:4]))
            h.check(all(p.exitcode == 0 for p in procs), "%s: reader exit codes %s"
                    % (label, [p.exitcode for p in procs]))
            h.check(reads >= MIN_READS * READERS or stalled, "%s: only %d reads in %.0f s" % (label, reads, dt))
            if stalled:
                return
            rss.sample()
            peak, grow = rss.peak, rss.grown_mib
            st = harness.read_stats(mnt)
            h.check(st.get("fill_errors", 0) == 0, "%s: fill_errors: %s" % (label, st))
            limit = min(cache_bytes, f32_total) / 1048576.0 + 64
            print("  %s: %d reads checked (%.0f MB) by %d processes in %.1f s; gguffs RSS "
                  "%.1f MiB after mount, peak %.1f MiB (growth %.1f MiB, limit %.0f); stats %s"
                  % (label, reads, nbytes / 1e6, READERS, dt, rss.base / 1024.0, peak / 1024.0,
                     grow, limit, st), flush=True)
            summary.append((cache, reads, nbytes, dt, peak / 1024.0, grow))
            if harness.tsan():
                h.note("RSS bound not checked under ThreadSanitizer (its shadow memory)")
            else:
                h.check(grow <= limit, "%s: RSS grew %.1f MiB, more than %.0f MiB" % (label, grow, limit))
            h.check(harness.is_mounted(mnt) and os.path.exists("/proc/%d" % pid),
                    "%s: gguffs is not running any more" % label)


def main():
    h = harness.start("stress")
    ggml = harness.require_oracle()
    summary = []
    with tempfile.TemporaryDirectory(prefix="gguffs-stress-") as tmp:
        model = os.path.join(tmp, "stress.gguf")
        t0 = time.time()
        EXPECT.update(make_model(ggml, model))
        f32_total = sum(len(f) for _, f in EXPECT.values())
        print("stress model: %d tensors, %.1f MB raw, %.1f MB f32 (%.1fs to make); %d readers, "
              "%.0f s per cache size" % (len(EXPECT), sum(len(r) for r, _ in EXPECT.values()) / 1e6,
                                         f32_total / 1e6, time.time() - t0, READERS, SECONDS),
              flush=True)
        run(h, model, "1M", 1 << 20, f32_total, summary)
        run(h, model, "512M", 512 << 20, f32_total, summary, ",threads=2")
    if summary:
        print("stress summary: " + "; ".join(
            "cache_size=%s: %d reads checked in %.0f s, peak RSS %.1f MiB (+%.1f)"
            % (c, r, dt, p, g) for c, r, _, dt, p, g in summary))
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

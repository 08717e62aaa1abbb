#!/usr/bin/python3
# Padded growing edits, one build against another: the same edits through each, alternating, medians in ms.
"""
    tests/bench/bench_padded.py [--dir DIR] [--mb 64] [--edits 40] [--rounds 3]
                                [--template 450000] [--step 2048] [--cold]
                                BIN [BIN ...]

A model with part 3's header (32k tokens, scripts/bench --part 3) and
--mb MiB of tensor data is mounted with each gguffs binary in turn; a
first edit sets the chat template to --template bytes (a rewrite, which
gives the header its padding), then --edits edits each make it --step
bytes longer (open O_TRUNC, write, close: the padding takes them, in
place; checked in stats).  Each binary's median edit time is printed per
round; --cold drops the page cache before every edit (root).  The rounds
alternate the binaries so that a machine getting busier favours none.
Timing only: no assertion; the point is comparing builds on one machine.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "parts"))
import common  # noqa: E402
import harness  # noqa: E402
from common import edit_file  # noqa: E402
from edit import make_edit_file  # noqa: E402


def one(binary, path, mnt, args):
    os.environ["GGUFFS_BIN"] = binary
    g = harness.Gguffs(path, mnt=mnt)
    try:
        tmpl = os.path.join(mnt, "meta", "tokenizer.chat_template")
        line = "{% for m in messages %}{{ m.content }}{% endfor %} 000\n"
        size = [args.template]

        def text():
            return (line * (size[0] // len(line) + 1))[:size[0]]
        edit_file(tmpl, text())
        with open(os.path.join(mnt, "stats")) as f:
            before = dict(x.split(" ", 1) for x in f.read().splitlines())
        times = []
        for _ in range(args.edits):
            size[0] += args.step
            os.sync()
            if args.cold:
                common.drop_caches()
            t0 = time.perf_counter()
            edit_file(tmpl, text())
            times.append(time.perf_counter() - t0)
        with open(os.path.join(mnt, "stats")) as f:
            after = dict(x.split(" ", 1) for x in f.read().splitlines())
        in_place = int(after["edits_in_place"]) - int(before["edits_in_place"])
        if in_place != args.edits:
            print("# %s: only %d of %d edits in place (--step too large for the padding?)"
                  % (binary, in_place, args.edits))
        return statistics.median(times) * 1e3
    finally:
        g.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("bins", nargs="+", metavar="BIN")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--edits", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--template", type=int, default=450000)
    ap.add_argument("--step", type=int, default=2048)
    ap.add_argument("--cold", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gguffs-padded-", dir=args.dir)
    path, mnt = os.path.join(work, "edit.gguf"), os.path.join(work, "mnt")
    os.makedirs(mnt)
    for r in range(args.rounds):
        for b in args.bins:
            make_edit_file(path, args.mb)     # the same start for every binary
            print("round %d  %-50s median %.2f ms" % (r + 1, b, one(b, path, mnt, args)), flush=True)
    os.unlink(path)
    os.rmdir(mnt)
    os.rmdir(work)


if __name__ == "__main__":
    main()

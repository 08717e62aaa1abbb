#!/usr/bin/python3
# Mounts every real GGUF file of $GGUFFS_CORPUS/real and checks it against ggml (or the pure-Python reader); nonstandard/ files must be refused.
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check_refused  # noqa: E402


def main():
    corpus = os.environ.get("GGUFFS_CORPUS") or os.path.join(harness.SRC, "..", "shared", "corpus")
    real = os.path.join(corpus, "real")
    if not os.path.isdir(real):
        harness.skip_or_fail("corpus directory %s does not exist" % real)
    h = harness.start("corpus")
    harness.require_oracle()
    import checks

    files = sorted(glob.glob(os.path.join(real, "*.gguf")))
    only = os.environ.get("GGUFFS_TEST_ONLY")
    if only:
        files = [f for f in files if only in f]
    h.check(files, "no .gguf files in %s" % real)
    for i, f in enumerate(files):
        print("-- %s" % os.path.basename(f), flush=True)
        # concurrency on a few files is enough; it is slow on the big vocabularies
        checks.check_model(h, f, concurrent=(i % 4 == 0 or "tiny-random" in f or "dbrx" in f))
    for f in sorted(glob.glob(os.path.join(real, "nonstandard", "*.gguf"))):
        print("-- nonstandard/%s (must be refused)" % os.path.basename(f), flush=True)
        with h.case("refuse %s" % f):
            line = check_refused(h, f, "nonstandard/" + os.path.basename(f),
                                 want_offset=0 if "FUGG" in f else None)
            print("   %s" % line)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

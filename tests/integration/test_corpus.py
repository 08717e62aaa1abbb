#!/usr/bin/python3
# Mounts every real GGUF file of the corpus (tests/corpus/real, and ../shared/corpus/real where it exists) and checks it against ggml (or the pure-Python reader); nonstandard/ files must be refused.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check_refused  # noqa: E402


def main():
    h = harness.start("corpus")
    harness.require_oracle()
    import checks

    dirs = harness.corpus_dirs()
    print("corpus: %s" % ", ".join(dirs), flush=True)
    files = harness.corpus_files()
    nonstandard = harness.corpus_files("nonstandard")
    only = os.environ.get("GGUFFS_TEST_ONLY")
    if only:
        files = [f for f in files if only in f]
    # the repository's own files are always there: a clone without
    # ../shared reads them, a missing one is a failure
    h.check(files and nonstandard, "no .gguf files in %s" % dirs)
    own = os.path.join(dirs[0], "real")
    for f in ("hyllama-dummy.gguf", "llamacpp-vocab-llama-v1.gguf", "llamacpp-vocab-dbrx.gguf",
              "ollama-llama-2-tiny-random.gguf", "sdcpp-taesd-decoder.gguf"):
        h.check(os.path.exists(os.path.join(own, f)), "the repository's corpus lacks %s" % f)
    for i, f in enumerate(files):
        print("-- %s" % os.path.basename(f), flush=True)
        # concurrency on a few files is enough; it is slow on the big vocabularies
        checks.check_model(h, f, concurrent=(i % 4 == 0 or "tiny-random" in os.path.basename(f) or "dbrx" in os.path.basename(f)))
    for f in nonstandard:
        print("-- nonstandard/%s (must be refused)" % os.path.basename(f), flush=True)
        with h.case("refuse %s" % f):
            line = check_refused(h, f, "nonstandard/" + os.path.basename(f),
                                 want_offset=0 if "FUGG" in os.path.basename(f) else None)
            print("   %s" % line)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

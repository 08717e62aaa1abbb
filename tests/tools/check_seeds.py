#!/usr/bin/python3
"""A CI run is repeatable: every randomized test draws from a seed that is
fixed when CI is set (harness.test_seed, doc/TESTING.md), so a failure in
CI can be run again as it was.  Checked on the sources, so that a test
added with an unseeded draw fails here rather than flaking once in CI:

  - harness.test_seed() is the fixed seed with CI set and nothing given,
    the given seed or $GGUFFS_TEST_SEED otherwise (run in a child Python
    with a made-up environment);
  - no test, bench part or script draws from an unseeded generator:
    Python's module-level random.* functions, random.Random() and
    numpy.random.default_rng() with no seed, numpy's legacy global
    np.random.* draws.  The one allowed place is where a seed itself is
    drawn for a run by hand (ALLOWED), which prints it.

    check_seeds.py SRCDIR     (exit 0, or 1 with one line per breach)
"""
import os
import re
import subprocess
import sys

UNSEEDED = re.compile(
    r"\brandom\.(random|randrange|randint|choice|choices|shuffle|sample|randbytes|"
    r"uniform|getrandbits|gauss)\("
    r"|\brandom\.Random\(\s*\)"
    r"|\bdefault_rng\(\s*\)"
    r"|\bnp\.random\.(rand|randn|randint|random|choice|shuffle|permutation|bytes|"
    r"uniform|normal|standard_normal|integers)\(")
# (file, a fragment of the line): the seed of a run by hand, printed
ALLOWED = {
    ("tests/integration/harness.py", "return fixed if IN_CI else random.randrange(1 << 30)"),
    ("tests/integration/soak.py", "args.seed = random.randrange(1 << 30)"),
}
DIRS = ("tests/integration", "tests/bench", "tests/tools", "tests/oracle", "scripts")


def python_files(src):
    for d in DIRS:
        for dirpath, _, files in os.walk(os.path.join(src, d)):
            for name in sorted(files):
                path = os.path.join(dirpath, name)
                if name.endswith(".py"):
                    yield path
                elif "." not in name:
                    with open(path, "rb") as f:
                        first = f.readline()
                    if first.startswith(b"#!") and b"python" in first:
                        yield path


def draws(src):
    out = []
    for path in python_files(src):
        rel = os.path.relpath(path, src)
        if rel == "tests/tools/check_seeds.py":
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for no, line in enumerate(f, 1):
                code = line.split("#", 1)[0]
                if UNSEEDED.search(code) and not any(
                        rel == a and frag in line for a, frag in ALLOWED):
                    out.append("%s:%d: an unseeded draw (take it from harness.test_seed): %s"
                               % (rel, no, line.strip()))
    return out


def seeds(src):
    """harness.test_seed() under made-up environments, in a child."""
    prog = ("import sys; sys.path.insert(0, %r); import harness; "
            "print(harness.test_seed(), harness.test_seed(given=5))"
            % os.path.join(src, "tests", "integration"))
    out = []
    for env, want in (({"CI": "1"}, "20261128 5"), ({"CI": "1", "GGUFFS_TEST_SEED": "77"}, "77 5")):
        e = {k: v for k, v in os.environ.items() if k not in ("CI", "GGUFFS_TEST_SEED")}
        e.update(env)
        got = [subprocess.run([sys.executable, "-c", prog], env=e, capture_output=True,
                              text=True).stdout.strip() for _ in range(2)]
        if got != [want, want]:
            out.append("harness.test_seed() with %s gave %s, not %r both times" % (env, got, want))
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    bad = draws(src) + seeds(src)
    for b in bad:
        print(b)
    print("seeds: %d breaches" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

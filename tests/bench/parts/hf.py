# scripts/bench --part hf: transformers' from_pretrained(MNT/hf) against its own from_pretrained(dir, gguf_file=) of the same quantized file (time, peak RSS), and hf/model.safetensors' read rate against model.safetensors'.
"""
Part hf (issue 31): a random llama (tests/integration/hf_models.py
bench-make: hidden 1024, 8 layers, vocab 32000 — about 180M parameters —
in Q8_0 by gguf-py's quantizer; --quick: hidden 256, 2 layers) loaded by
transformers from .deps/venv, each in a fresh process: from_pretrained
(MNT/hf) on a fresh mount (every tensor dequantized by gguffs as it is
read) against transformers' own GGUF loader of the file
(from_pretrained(dir, gguf_file=) with GgufConfig(dequantize=True): every
weight dequantized to float32, the model hf/ gives), then a pass
over every weight (a loader that maps the file lazily has read nothing
until then), the model file page-cached for both; seconds and the
process's peak RSS (file pages of a mapping included; gguffs' own growth
beside).  Then the read rate of hf/model.safetensors and of
model.safetensors, read() 1 MiB to EOF on a fresh mount each (the f32
pieces computed on the way).  Best of --reps (default 3; --quick 1).
"""
import json
import os
import subprocess
import time

import common
import harness
from common import GGUFFS, need, skip

NAME = "hf"
ALIASES = ()
MODELS = os.path.join(common.TOP, "tests", "integration", "hf_models.py")
VENV_PY = os.path.join(common.TOP, ".deps", "venv", "bin", "python")
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
           TOKENIZERS_PARALLELISM="false")


def venv(*args, timeout=1800):
    r = subprocess.run([VENV_PY, MODELS] + list(args), capture_output=True, timeout=timeout,
                       env=ENV)
    if r.returncode:
        raise RuntimeError("hf_models.py %s: %s" % (args[0], r.stderr.decode()[-1500:]))
    return r.stdout.decode()


def read_rate(path):
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            n += len(b)
    return n / (time.perf_counter() - t0) / 1e9, n


def run(work, args):
    need(GGUFFS)
    if not os.access(VENV_PY, os.X_OK):
        skip("%s missing (scripts/setup --tests)" % VENV_PY)
    reps = args.reps or (1 if args.quick else 3)
    d = os.path.join(work, "hf")
    os.makedirs(d, exist_ok=True)
    hidden, layers = (256, 2) if args.quick else (1024, 8)
    t0 = time.perf_counter()
    venv("bench-make", d, str(hidden), str(layers), "Q8_0")
    model = os.path.join(d, "bench.gguf")
    size = os.path.getsize(model)
    print("# part hf: llama hidden %d, %d layers, Q8_0, %.0f MiB, made in %.0f s"
          % (hidden, layers, size / 2**20, time.perf_counter() - t0), flush=True)
    with open(model, "rb") as f:            # page-cached for both loaders
        while f.read(8 << 20):
            pass
    hf_s, hf_rss, g_rss, ref_s, ref_rss = [], [], [], [], []
    for _ in range(reps):
        with harness.mounted(model) as g:
            with harness.RssPeak(g.pid) as peak:
                r = json.loads(venv("bench-load", "hf", g.mnt).splitlines()[-1])
            hf_s.append(r["s"])
            hf_rss.append(r["maxrss_kib"] / 1024)
            g_rss.append(peak.grown_mib)
        r = json.loads(venv("bench-load", "gguf", d, "bench.gguf").splitlines()[-1])
        ref_s.append(r["s"])
        ref_rss.append(r["maxrss_kib"] / 1024)
    a, b = min(hf_s), min(ref_s)
    print("\n| load (%.0fM parameters, Q8_0) | seconds | peak RSS MiB | speed-up |" % (
        r["params"] / 1e6))
    print("|---|---|---|---|")
    print("| from_pretrained(MNT/hf) | %.2f | %.0f (+ gguffs grew %.0f) | %.2f |"
          % (a, min(hf_rss), min(g_rss), b / a))
    print("| from_pretrained(dir, gguf_file=) | %.2f | %.0f | 1.00 |" % (b, min(ref_rss)))
    rates = {"model.safetensors": [], "hf/model.safetensors": []}
    for _ in range(reps):
        for name in rates:
            with harness.mount(model) as mnt:
                gbs, n = read_rate(os.path.join(mnt, name))
                rates[name].append(gbs)
    base = max(rates["model.safetensors"])
    print("\n| read() 1 MiB to EOF, fresh mount | GB/s | ratio |")
    print("|---|---|---|")
    for name, v in rates.items():
        print("| %s | %.2f | %.2f |" % (name, max(v), max(v) / base))

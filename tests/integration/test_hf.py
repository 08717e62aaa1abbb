#!/usr/bin/python3
# hf/: the model as a Hugging Face folder, loaded by transformers, torch and safetensors from PyPI (.deps/venv): tiny random models of every architecture served (F32, F16, Q8_0, Q4_K, Q6_K) against transformers' own GGUF loader bit for bit, logits equal, the originals' weights; safetensors' readers on both files; a real llama of the corpus generating the same greedy tokens; an unsupported architecture has no hf/ and info says why; an edit shows at once, an open handle keeps its version.
"""
hf_models.py (run by .deps/venv's python) makes the models: transformers
builds each from a small config (LlamaConfig(hidden_size=64, ...) and kin),
gguf-py writes it as convert_hf_to_gguf.py would (Q/K rows permuted for
llama, gemma's norms plus 1, the experts split; Q8_0 by gguf-py's
quantizer, Q4_K and Q6_K by ggml's, tests/oracle/ggml.py).  Every model is
mounted, then one process checks them all (torch's import costs seconds):

  - AutoModelForCausalLM.from_pretrained(MNT/hf), with no tokenizer in the
    folder, has the same state dict as transformers' own GGUF loader of
    the file (a split model: the same model unsplit; one folder for all
    its shards) (from_pretrained(dir, gguf_file=): hf_models.py gguf_reference),
    tensor by tensor, bit for bit; the logits of a fixed prompt are equal;
  - F32 models: every tensor equals the original HF model's; F16 models:
    the original's rounded to f16 where the file has f16;
  - safetensors.safe_open and safetensors.torch.load_file read
    hf/model.safetensors (equal to the loaded model) and model.safetensors
    (equal to tensors/NAME/f32);
  - gguf-py's GGUFReader reads model.gguf: the keys and tensors of the file
    (a split model: the tensors of the same model unsplit).

Then: the corpus's llama (ollama-llama-2-tiny-random.gguf, in the
repository) generates the same greedy tokens through hf/ as through
gguf_file=; a model of another architecture has no hf/ (not listed, not
found) and info says why in one line; meta/ edited, hf/config.json shows
the new value at once while a handle opened before reads the old text, and
hf/model.safetensors opened before the edit reads on; creating, removing
or writing a file of hf/ is refused (EACCES).
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import mount  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "hf_models.py")
ENV = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
           TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="2")


def venv_python():
    py = os.path.join(harness.SRC, ".deps", "venv", "bin", "python")
    if not os.access(py, os.X_OK):
        harness.skip_or_fail("%s missing: transformers and torch (scripts/setup --tests)" % py)
    return py


def models_py(py, *args, timeout=600):
    r = subprocess.run([py, MODELS] + list(args), capture_output=True, timeout=timeout,
                       env=ENV)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check_models(h, py, d):
    rc, out, err = models_py(py, "make", d)
    if not h.check(rc == 0, "hf_models.py make: exit %d: %s" % (rc, err[-2000:])):
        return
    names = out.split()
    with contextlib.ExitStack() as stack:
        pairs = []
        for n in names:
            # (a split model's NAME.gguf links to its first shard)
            mnt = stack.enter_context(mount(os.path.realpath(os.path.join(d, n + ".gguf"))))
            pairs.append("%s=%s" % (n, mnt))
        rc, out, err = models_py(py, "check", d, *pairs)
    seen = set()
    for line in out.splitlines():
        name, _, rest = line.partition(": ")
        if name == "note":
            print("  %s" % line, flush=True)
        if name in names:
            seen.add(name)
            h.check(rest.endswith(", ok"), "hf/ of %s: %s" % (name, rest))
            print("  %s" % line, flush=True)
    h.check(seen == set(names), "hf_models.py check: no verdict for %s (exit %d: %s)"
            % (sorted(set(names) - seen), rc, err[-2000:]))
    h.check(rc == 0 or seen != set(names), "hf_models.py check: exit %d: %s" % (rc, err[-2000:]))


def check_real(h, py):
    """The corpus's llama (in the repository): greedy tokens through hf/
    and through transformers' own loader."""
    src = harness.corpus_file("ollama-llama-2-tiny-random.gguf")
    with tempfile.TemporaryDirectory() as d:
        os.symlink(src, os.path.join(d, "m.gguf"))
        with mount(src) as mnt:
            rc, out, err = models_py(py, "generate", d, "m.gguf", mnt, "12")
        if not h.check(rc == 0, "generate: exit %d: %s" % (rc, err[-2000:])):
            return
        got = json.loads(out.strip().splitlines()[-1])
        h.check(got["hf"] == got["gguf_file"] and len(got["hf"]) > 5,
                "greedy tokens differ: hf/ %s, gguf_file= %s" % (got["hf"], got["gguf_file"]))
        print("  %s: %d tokens the same through hf/ and gguf_file=" %
              (os.path.basename(src), len(got["hf"])), flush=True)


def check_unsupported(h):
    """A model transformers cannot load from GGUF: no hf/, info says why."""
    src = harness.corpus_file("hyllama-dummy.gguf")      # no general.architecture
    with mount(src) as mnt:
        h.check("hf" not in os.listdir(mnt), "hf/ listed for a model with no architecture")
        h.check(not os.path.exists(os.path.join(mnt, "hf")), "hf/ found for it")
        info = read(os.path.join(mnt, "info")).decode()
        lines = [ln for ln in info.splitlines() if ln.startswith("hf/")]
        h.check(len(lines) == 1 and "no hf/" in lines[0],
                "info does not say in one line why there is no hf/: %r" % lines)


def check_edit(h, d):
    """An edit shows in hf/ at once; handles opened before keep theirs."""
    src = os.path.join(d, "llama-f32.gguf")
    if not os.path.exists(src):
        return h.fail("no llama-f32.gguf to edit")
    model = os.path.join(d, "edit.gguf")
    shutil.copy(src, model)
    with mount(model) as mnt:
        cfg = os.path.join(mnt, "hf", "config.json")
        before = read(cfg)
        old = open(cfg, "rb")
        st = open(os.path.join(mnt, "hf", "model.safetensors"), "rb")
        st_before = st.read()
        try:
            with open(os.path.join(mnt, "meta", "llama.context_length"), "w") as f:
                f.write("777\n")
            now = json.loads(read(cfg))
            h.check(now.get("max_position_embeddings") == 777,
                    "hf/config.json after the edit: %r" % now.get("max_position_embeddings"))
            h.check(old.read() == before, "a config.json opened before the edit changed")
            st.seek(0)
            h.check(st.read() == st_before,
                    "hf/model.safetensors opened before the edit reads other bytes")
            # hf/ is read-only: no new file, no removal, no write
            for what, op in (("create", lambda: open(os.path.join(mnt, "hf", "x"), "w")),
                             ("unlink", lambda: os.unlink(cfg)),
                             ("write", lambda: open(cfg, "w"))):
                try:
                    op().close()
                    h.fail("hf/: %s succeeded" % what)
                except PermissionError:
                    h.check(True, "")
                except OSError as e:
                    h.fail("hf/: %s: %s, not EACCES" % (what, e))
            stats = harness.read_stats(mnt)
            h.check(stats.get("reads_hf", 0) > 0, "stats counts no reads_hf")
        finally:
            old.close()
            st.close()


def main():
    h = harness.start("hf")
    py = venv_python()
    d = tempfile.mkdtemp(prefix="gguffs-hf-")
    try:
        with h.case("models"):
            check_models(h, py, d)
        with h.case("real"):
            check_real(h, py)
        with h.case("unsupported"):
            check_unsupported(h)
        with h.case("edit"):
            check_edit(h, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
# tokenizer.json and tokenizer_config.json generated from a GGUF (gguf/hf_tokenizer.h): AutoTokenizer on them gives the ids, decoding and chat template of transformers' own gguf_file= tokenizer.
"""
The Hugging Face tokenizer files gguffs generates from a GGUF's metadata
(gguf/hf_tokenizer.h), against the reference they imitate: transformers'
`AutoTokenizer.from_pretrained(dir, gguf_file=...)`.

Models, made offline by this test with .deps/venv's `tokenizers` and
`gguf` (gguf-py's writer):
  - byte-level BPE ("gpt2"): a small ByteLevel BPE trained on a mixed text
    (English, CJK, emoji, accents), written once per tokenizer.ggml.pre
    that transformers knows (llama-bpe, qwen2, qwen35, tekken, gpt-4o),
    once with a name it does not know (GPT-2's split) and once with none;
    control tokens (ChatML's), a user-defined token, a bos spelled outside
    the byte alphabet (added past the vocabulary), a ChatML chat template;
  - sentencepiece ("llama"): <unk>, <s>, </s>, the 256 byte tokens, pieces
    with "▁" and scores (merges derived from them), a control and a
    user-defined token, a duplicated token, a llama-2 chat template; once
    with its merges written into the file, once as architecture phi3;
    as gemma2 and gemma3 (their own specials, tokens of spaces stored as
    spaces), and as tokenizer.ggml.model "gemma4";
  - unigram ("t5"): trained by `tokenizers`' UnigramTrainer, scores, the
    sentinels stored as "[PADn]" (renamed by transformers);
  - the corpus's real models when ../shared/corpus (GGUFFS_CORPUS_EXTRA)
    is there: the llama-2 SPM vocabularies and the byte-level ones of
    gpt-2, deepseek-coder, falcon, stablelm, starcoder (skipped without
    it; the models above never are).

For each: the ids of a text set (special tokens, CJK, emoji, combining
marks, whitespace runs, newlines, leading spaces, bytes outside the
vocabulary), with and without the special tokens added; the tokens; the
decoding (with and without special tokens); the vocabulary size and the
special tokens; and apply_chat_template with a few messages, as text and
as ids — all equal.  A model whose tokenizer cannot be expressed (a
"bert" vocabulary) is refused with a one-line reason.

The folder read is hf_folders() below: tests/tools/hf_tokenizer_dump
writes the two files for each model, and each model is mounted: where the
mount has hf/ (an architecture gguffs shows as a Hugging Face folder), its
two files must be the dump tool's byte for byte, and MNT/hf itself is the
folder AutoTokenizer loads.

All transformers work runs in one .deps/venv process (this file, run with
--worker); without the venv the test skips, or fails under CI.
"""
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------------------
# The worker: runs under .deps/venv's python (gguf, tokenizers, transformers).

TEXTS = [
    "Hello world",
    " leading space",
    "   three leading spaces and trailing  ",
    "tabs\tand\nnewlines\n\n\nand runs     of      spaces",
    "日本語の文章と中文字符，还有한국어",
    "emoji 😀🎉👍🏽 and a family 👨‍👩‍👧 ",
    "combining: e\u0301 n\u0303 a\u0308 \u0915\u093f",
    "<s> inline </s> specials <|im_start|>user\nhi<|im_end|>",
    "<think>reasoning</think> done",
    "<start_of_turn>user\n<mask> hi<end_of_turn>",
    "numbers 1234567 and 3.14159, don't we'll I'm",
    "code:\n    def f(x):\n        return x ** 2\n",
    "ÄÖÜß café naïve “quotes” ‘single’ — dash",
    "rare: ʃɐ∑∫♞ ꙮ 𝔘𝔫𝔦",
    "",
    " ",
    "\n",
    "\n\n  \n",
]

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello, 世界! 😀"},
    {"role": "assistant", "content": "Hi.\n\nHow can I help?"},
    {"role": "user", "content": "  Tell me a story  "},
]

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA2 = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
          "{% elif m['role'] == 'system' %}<<SYS>>\n{{ m['content'] }}\n<</SYS>>\n\n"
          "{% else %} {{ m['content'] }} {{ eos_token }}{% endif %}{% endfor %}")

GEMMA = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}<end_of_turn>\n"
         "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")

CORPUS_TEXT = """The quick brown fox jumps over the lazy dog. Once upon a time, there was a little
girl who loved to read stories about dragons and castles.  She said: "I'd like to
fly!" and they'll go; we're here, it's fine, you've seen, I'm sure.
日本語の文章と中文字符。東京は大きな都市です。我们今天去公园散步。한국어 문장입니다.
Emoji time: 😀 😀 🎉 🎉 👍 ❤️ — café, naïve, résumé, Ärger, Größe, señor, façade.
def main(argv):\n    for i in range(10):\n        print(i * 2, "done")\n    return 0
Numbers: 1234567890, 3.14159, 2024-06-01, $100.00, 50%.
"""


def _w_common(w, arch):
    w.add_uint32(arch + ".context_length", 128)
    w.add_uint32(arch + ".embedding_length", 64)
    w.add_uint32(arch + ".block_count", 1)
    w.add_uint32(arch + ".feed_forward_length", 128)
    w.add_uint32(arch + ".attention.head_count", 4)
    w.add_uint32(arch + ".attention.head_count_kv", 4)
    w.add_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32(arch + ".rope.dimension_count", 16)


def _write(path, arch, kv):
    import gguf
    w = gguf.GGUFWriter(path, arch)
    _w_common(w, arch)
    for key, (kind, value) in kv.items():
        getattr(w, "add_" + kind)(key, value) if kind != "array" else w.add_array(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_bpe(out):
    """Byte-level BPE models, one per pre-tokenizer name."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             special_tokens=[], show_progress=False)
    tk.train_from_iterator([CORPUS_TEXT] * 3, tr)
    j = json.loads(tk.to_str())
    vocab = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
    types = [1] * len(tokens)
    extra = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<think>", 4),
             ("</think>", 4), ("<｜begin▁of▁sentence｜>", 3)]
    for t, ty in extra:
        tokens.append(t)
        types.append(ty)
    bos = tokens.index("<｜begin▁of▁sentence｜>")
    eos = tokens.index("<|im_end|>")
    cases = []
    for pre in ["llama-bpe", "qwen2", "qwen35", "tekken", "gpt-4o", "gpt-2", None]:
        name = "bpe-%s" % (pre or "nopre")
        kv = {"tokenizer.ggml.model": ("string", "gpt2"),
              "tokenizer.ggml.tokens": ("array", tokens),
              "tokenizer.ggml.token_type": ("array", types),
              "tokenizer.ggml.merges": ("array", merges),
              "tokenizer.ggml.bos_token_id": ("uint32", bos),
              "tokenizer.ggml.eos_token_id": ("uint32", eos),
              "tokenizer.ggml.padding_token_id": ("uint32", tokens.index("<|endoftext|>")),
              "tokenizer.ggml.add_bos_token": ("bool", pre == "llama-bpe"),
              "tokenizer.chat_template": ("string", CHATML)}
        if pre:
            kv["tokenizer.ggml.pre"] = ("string", pre)
        path = os.path.join(out, name + ".gguf")
        _write(path, {"qwen2": "qwen2", "qwen35": "qwen3"}.get(pre, "llama"), kv)
        cases.append(path)
    return cases


def make_spm(out):
    """Sentencepiece-style llama vocabularies: byte tokens, scores, control tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tr = trainers.BpeTrainer(vocab_size=500, special_tokens=[], show_progress=False,
                             limit_alphabet=120)
    tk.train_from_iterator([CORPUS_TEXT] * 3, tr)
    j = json.loads(tk.to_str())
    learned = [t for t, _ in sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])]
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    for i, t in enumerate(learned):
        tokens.append(t)
        types.append(1)
        scores.append(-float(i))
    # a user-defined and a control token, and a piece listed twice
    for t, ty in [("<think>", 4), ("<|im_start|>", 3), ("\u2581the", 1)]:
        tokens.append(t)
        types.append(ty)
        scores.append(-1000.0)
    base = {"tokenizer.ggml.model": ("string", "llama"),
            "tokenizer.ggml.pre": ("string", "default"),
            "tokenizer.ggml.tokens": ("array", tokens),
            "tokenizer.ggml.scores": ("array", scores),
            "tokenizer.ggml.token_type": ("array", types),
            "tokenizer.ggml.bos_token_id": ("uint32", 1),
            "tokenizer.ggml.eos_token_id": ("uint32", 2),
            "tokenizer.ggml.unknown_token_id": ("uint32", 0),
            "tokenizer.ggml.add_space_prefix": ("bool", True),
            "tokenizer.chat_template": ("string", LLAMA2)}
    cases = []
    path = os.path.join(out, "spm.gguf")
    _write(path, "llama", base)
    cases.append(path)
    merged = dict(base)
    merged["tokenizer.ggml.merges"] = ("array", [" ".join(m) if isinstance(m, list) else m
                                                 for m in j["model"]["merges"]])
    merged["tokenizer.ggml.add_eos_token"] = ("bool", True)
    path = os.path.join(out, "spm-merges.gguf")
    _write(path, "llama", merged)
    cases.append(path)
    path = os.path.join(out, "spm-phi3.gguf")
    _write(path, "phi3", base)
    cases.append(path)
    # gemma-family: its own specials, tokens of spaces stored as spaces,
    # merges by place in the file; and "gemma4" vocabularies (scores, no bos)
    gtokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    gtypes = [3, 3, 3, 2, 4, 3, 3]
    gtokens += ["<0x%02X>" % b for b in range(256)]
    gtypes += [6] * 256
    gtokens += learned + ["  ", "   ", "\n\n", " \n"]
    gtypes += [1] * (len(learned) + 4)
    gscores = [0.0] * (len(gtokens) - len(learned) - 4) + [-float(i) for i in range(len(learned))] + [-5.0] * 4
    gemma = {"tokenizer.ggml.model": ("string", "llama"),
             "tokenizer.ggml.tokens": ("array", gtokens),
             "tokenizer.ggml.scores": ("array", gscores),
             "tokenizer.ggml.token_type": ("array", gtypes),
             "tokenizer.ggml.bos_token_id": ("uint32", 2),
             "tokenizer.ggml.eos_token_id": ("uint32", 1),
             "tokenizer.ggml.unknown_token_id": ("uint32", 3),
             "tokenizer.ggml.padding_token_id": ("uint32", 0),
             "tokenizer.chat_template": ("string", GEMMA)}
    for arch in ("gemma2", "gemma3"):
        path = os.path.join(out, "spm-%s.gguf" % arch)
        _write(path, arch, gemma)
        cases.append(path)
    g4 = dict(gemma, **{"tokenizer.ggml.model": ("string", "gemma4")})
    path = os.path.join(out, "spm-gemma4.gguf")
    _write(path, "gemma3", g4)
    cases.append(path)
    # unigram ("t5"): scores, sentinels stored as [PADn]
    from tokenizers import models as tmodels, trainers as ttrainers
    uk = Tokenizer(tmodels.Unigram())
    uk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    ut = ttrainers.UnigramTrainer(vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"],
                                  unk_token="<unk>", show_progress=False)
    uk.train_from_iterator([CORPUS_TEXT] * 3, ut)
    uv = json.loads(uk.to_str())["model"]["vocab"]
    ttokens = [t for t, _ in uv] + ["[PAD%d]" % (len(uv) + i) for i in range(3)]
    tscores = [float(sc) for _, sc in uv] + [0.0] * 3
    ttypes = [3, 3, 2] + [1] * (len(uv) - 3) + [4, 4, 3]
    t5 = {"tokenizer.ggml.model": ("string", "t5"),
          "tokenizer.ggml.tokens": ("array", ttokens),
          "tokenizer.ggml.scores": ("array", tscores),
          "tokenizer.ggml.token_type": ("array", ttypes),
          "tokenizer.ggml.eos_token_id": ("uint32", 1),
          "tokenizer.ggml.unknown_token_id": ("uint32", 2),
          "tokenizer.ggml.padding_token_id": ("uint32", 0),
          "tokenizer.ggml.add_eos_token": ("bool", True)}
    path = os.path.join(out, "unigram-t5.gguf")
    _write(path, "t5", t5)
    cases.append(path)
    bert = {"tokenizer.ggml.model": ("string", "bert"),
            "tokenizer.ggml.tokens": ("array", ["[PAD]", "[UNK]", "a"])}
    path = os.path.join(out, "refused-bert.gguf")
    _write(path, "llama", bert)
    cases.append(path)
    return cases


def compare(gguf_path, folder, with_config):
    """(label, ok, detail) for each check of one model: the folder as it is,
    then (with_config) a copy with the config.json transformers derives from
    the file, as hf/ has it: AutoTokenizer then also sees the model type.

    For a few model types (qwen2 among those a GGUF can hold) transformers
    5.24 overrides tokenizer_class and picks a class of its own that
    rebuilds the pipeline from the vocabulary and merges (Qwen2Tokenizer:
    NFC, its own split), which the gguf_file= path does not: ids then differ
    on text NFC changes, whatever the files say.  For those the vocabulary
    and the special tokens are compared, and a NOTE says so."""
    from transformers import AutoConfig, AutoTokenizer
    d, f = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    ref = AutoTokenizer.from_pretrained(d, gguf_file=f)
    got = AutoTokenizer.from_pretrained(folder)
    own = type(got).__name__ != "TokenizersBackend"     # MNT/hf has a config.json
    if own:
        print("NOTE: %s: with hf/'s config.json AutoTokenizer picks %s, which rebuilds its "
              "pipeline (transformers' class choice): vocabulary and special tokens compared, "
              "not ids" % (f, type(got).__name__), file=sys.stderr)
    out = compare_one(ref, got, ids=not own)
    if not with_config:
        return out
    with tempfile.TemporaryDirectory() as tmp:
        for name in os.listdir(folder):
            shutil.copy(os.path.join(folder, name), tmp)
        AutoConfig.from_pretrained(d, gguf_file=f).save_pretrained(tmp)
        got = AutoTokenizer.from_pretrained(tmp)
        own = type(got).__name__ != "TokenizersBackend"
        if own:
            print("NOTE: %s: with config.json AutoTokenizer picks %s, which rebuilds its pipeline "
                  "(transformers' class choice): vocabulary and special tokens compared, not ids"
                  % (f, type(got).__name__), file=sys.stderr)
        out += [("with config.json: " + label, ok, detail)
                for label, ok, detail in compare_one(ref, got, ids=not own)]
    return out


def compare_one(ref, got, ids=True):
    out = []

    def eq(label, a, b):
        if a == b:
            out.append((label, True, ""))
        elif isinstance(a, dict) and isinstance(b, dict):
            diff = sorted(set(a.items()) ^ set(b.items()), key=repr)
            out.append((label, False, "%d entries differ, first: %r" % (len(diff), diff[:6])))
        else:
            out.append((label, False, ("gguf_file=: %r, folder: %r" % (a, b))[:2000]))

    eq("vocabulary size", len(ref), len(got))
    eq("vocabulary", ref.get_vocab(), got.get_vocab())
    for attr in ("bos_token", "eos_token", "unk_token", "pad_token", "bos_token_id", "eos_token_id"):
        eq(attr, getattr(ref, attr), getattr(got, attr))
    eq("all_special_ids", sorted(ref.all_special_ids), sorted(got.all_special_ids))
    if not ids:
        return out
    for i, text in enumerate(TEXTS):
        for special in (True, False):
            a = ref(text, add_special_tokens=special)["input_ids"]
            b = got(text, add_special_tokens=special)["input_ids"]
            eq("text %d %r ids (add_special_tokens=%s)" % (i, text[:30], special), a, b)
        ids = ref(text)["input_ids"]
        eq("text %d tokens" % i, ref.convert_ids_to_tokens(ids), got.convert_ids_to_tokens(ids))
        for skip in (False, True):
            eq("text %d decode (skip_special_tokens=%s)" % (i, skip),
               ref.decode(ids, skip_special_tokens=skip), got.decode(ids, skip_special_tokens=skip))
    if ref.chat_template is not None:
        eq("chat template", ref.chat_template, got.chat_template)
        for gen in (True, False):
            a = ref.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=gen)
            b = got.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=gen)
            eq("chat text (add_generation_prompt=%s)" % gen, a, b)
            a = ref.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=gen, return_dict=False)
            b = got.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=gen, return_dict=False)
            eq("chat ids (add_generation_prompt=%s)" % gen, a, b)
    else:
        eq("no chat template", None, got.chat_template)
    return out


def worker(argv):
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if argv[0] == "make":
        print(json.dumps(make_bpe(argv[1]) + make_spm(argv[1])))
        return 0
    pairs = json.loads(sys.stdin.read())
    for gguf_path, folder, with_config in pairs:
        try:
            for label, ok, detail in compare(gguf_path, folder, with_config):
                print(json.dumps([os.path.basename(gguf_path), label, ok, detail]), flush=True)
        except Exception as e:  # noqa: BLE001 - one failure, then the next model
            print(json.dumps([os.path.basename(gguf_path), "load and compare", False,
                              "%s: %s" % (type(e).__name__, str(e)[:500])]), flush=True)
    return 0


# ---------------------------------------------------------------------------
# The test: /usr/bin/python3 with the harness.

# the corpus's real models transformers' gguf_file= path loads (quick: two)
CORPUS = ["ollama-llama-2-tiny-random", "llamacpp-vocab-llama-spm", "llamacpp-vocab-gpt-2",
          "llamacpp-vocab-deepseek-coder", "llamacpp-vocab-falcon", "llamacpp-vocab-stablelm",
          "llamacpp-vocab-starcoder"]
CORPUS_QUICK = ["ollama-llama-2-tiny-random", "llamacpp-vocab-deepseek-coder"]


def dump_tool():
    import harness
    exe = os.environ.get("GGUFFS_HF_TOKENIZER_DUMP") or os.path.join(
        harness.SRC, "build", "tests", "tools", "hf_tokenizer_dump")
    if not os.access(exe, os.X_OK):
        harness.skip_or_fail("%s missing (build with -Dtests=enabled)" % exe)
    return exe


TOK_FILES = ("tokenizer.json", "tokenizer_config.json")


def read_or_none(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def hf_folders(h, models, work):
    """({model: the folder holding its tokenizer.json and tokenizer_config.json},
    or {model: (None, code, why)} for a model refused; the models whose folder
    is MNT/hf of a mount).  The dump tool writes the files for every model;
    each model is also mounted: where the mount has hf/ (an architecture it
    shows), hf/ must hold the dump tool's files byte for byte (or neither,
    for a refused tokenizer), and the folder compared is MNT/hf itself, its
    config.json and model.safetensors beside them, as a user loads it."""
    import harness
    exe = dump_tool()
    folders, mounted = {}, set()
    with contextlib.ExitStack() as stack:
        for m in models:
            name = os.path.basename(m)
            d = os.path.join(work, "hf-" + name[:-5])
            os.makedirs(d)
            r = subprocess.run([exe, m, d], capture_output=True, text=True, timeout=120)
            folders[m] = d if r.returncode == 0 else (None, r.returncode, r.stderr.strip())
            g = stack.enter_context(harness.mounted(m))
            hf = os.path.join(g.mnt, "hf")
            if not os.path.isdir(hf):
                continue
            listed = set(os.listdir(hf))
            for f in TOK_FILES:
                dumped = read_or_none(os.path.join(d, f)) if r.returncode == 0 else None
                served = read_or_none(os.path.join(hf, f))
                h.check(served == dumped and (f in listed) == (dumped is not None),
                        "%s: hf/%s of the mount is not the dump tool's (%s, listed %s)"
                        % (name, f, "absent" if served is None else "%d bytes" % len(served),
                           f in listed))
            if r.returncode == 0 and all(f in listed for f in TOK_FILES):
                folders[m] = hf
                mounted.add(m)
        yield folders, mounted


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness
    h = harness.start("hf-tokenizer")
    py = os.path.join(harness.SRC, ".deps", "venv", "bin", "python")
    if not os.access(py, os.X_OK):
        harness.skip_or_fail("%s missing: transformers (scripts/setup --tests)" % py)
    me = os.path.abspath(__file__)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error",
               TOKENIZERS_PARALLELISM="false")
    work = tempfile.mkdtemp(prefix="gguffs-hftok-")
    try:
        r = subprocess.run([py, me, "--worker", "make", work], capture_output=True, text=True,
                           timeout=300, env=env)
        if not h.check(r.returncode == 0, "making the models: %s" % r.stderr[-3000:]):
            return h.finish()
        models = json.loads(r.stdout.strip().splitlines()[-1])
        real = {os.path.basename(p)[:-5]: p for p in harness.corpus_files()}
        want = CORPUS_QUICK if harness.QUICK else CORPUS
        missing = [n for n in want if n not in real]
        if missing:
            print("NOTE: corpus models not here (../shared/corpus): %s" % ", ".join(missing))
        models += [real[n] for n in want if n in real]
        pairs = []
        with hf_folders(h, models, work) as (folders, mounted):
            for m in models:
                f = folders[m]
                name = os.path.basename(m)
                if name.startswith("refused-"):
                    h.check(isinstance(f, tuple) and f[1] == 1 and f[2] and "\n" not in f[2],
                            "%s: refused with one line and exit 1 (got %r)" % (name, f))
                    continue
                if h.check(not isinstance(f, tuple), "%s: files generated (%r)" % (name, f)):
                    # with a config.json too: the models made here (the
                    # corpus's cost a few seconds each)
                    pairs.append([m, f, m.startswith(work) and m not in mounted])
            print("  %d of %d models read through MNT/hf (the others: no hf/ for their "
                  "architecture, read from the dump tool's folder)" % (len(mounted), len(pairs)))
            r = subprocess.run([py, me, "--worker", "compare"], input=json.dumps(pairs),
                               capture_output=True, text=True, timeout=1200, env=env)
            seen = set()
            for line in r.stdout.splitlines():
                if not line.startswith("["):
                    continue
                model, label, ok, detail = json.loads(line)
                seen.add(model)
                h.check(ok, "%s: %s: %s" % (model, label, detail))
            h.check(r.returncode == 0, "worker exit %d: %s" % (r.returncode, r.stderr[-3000:]))
            sys.stdout.write("".join(l + "\n" for l in r.stderr.splitlines() if l.startswith("NOTE:")))
            for m, _, _ in pairs:
                h.check(os.path.basename(m) in seen, "%s: no result from the worker" % m)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return h.finish()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        sys.exit(worker(sys.argv[2:]))
    sys.exit(main())

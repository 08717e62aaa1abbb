# hf_models.py — run by .deps/venv's python for test_hf.py (torch,
# transformers, safetensors and gguf from PyPI; offline).
#
#   hf_models.py make DIR          tiny random models of each architecture
#                                  hf/ serves, made by transformers from
#                                  small configs, written to DIR/NAME.gguf
#                                  with gguf-py's writer (as
#                                  convert_hf_to_gguf.py writes them: Q/K
#                                  rows permuted for llama, gemma's norms
#                                  plus 1, the experts split) in F32, F16,
#                                  Q8_0, Q4_K and Q6_K, and the original
#                                  weights to DIR/NAME.orig.safetensors;
#                                  prints the names, one a line
#   hf_models.py check DIR NAME=MNT ...
#                                  for each: from_pretrained(MNT/hf) against
#                                  transformers' own from_pretrained(DIR,
#                                  gguf_file=NAME.gguf): every state-dict
#                                  tensor bit for bit, the logits of a fixed
#                                  prompt equal; F32 models equal the
#                                  original weights, F16 ones the original
#                                  rounded as written; safetensors'
#                                  safe_open and load_file on
#                                  MNT/model.safetensors (against
#                                  tensors/NAME/f32) and MNT/hf/model.safetensors
#                                  (against the loaded model); prints one
#                                  line per model, exits 1 on a difference
#   hf_models.py bench-make DIR HIDDEN LAYERS QTYPE
#                                  a bigger random llama (scripts/bench
#                                  --part hf) in QTYPE, DIR/bench.gguf
#   hf_models.py bench-load hf MNT | gguf DIR NAME
#                                  from_pretrained of one path and a pass over
#                                  every weight, timed: prints {"s": seconds,
#                                  "maxrss_kib": peak RSS}
#   hf_models.py generate DIR NAME MNT N
#                                  greedy tokens of N steps through MNT/hf
#                                  and through gguf_file=, printed (a real
#                                  model of the corpus)
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers as T  # noqa: E402
import gguf  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))

PROMPT = [[1, 5, 9, 17, 33, 2, 60, 7]]

# name: (gguf arch, config class, config, quant types)
COMMON = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=96, bos_token_id=1, eos_token_id=2,
              pad_token_id=0, max_position_embeddings=128, rms_norm_eps=1e-5)


def models():
    c = COMMON
    k = dict(c, hidden_size=256, intermediate_size=512)     # K-quants: rows of 256
    moe = dict(c, num_experts=4, num_experts_per_tok=2)
    return {
        "llama": ("llama", T.LlamaConfig, dict(c, head_dim=16), ["F32", "F16", "Q8_0"]),
        "llama-k": ("llama", T.LlamaConfig, dict(k, head_dim=64), ["Q4_K", "Q6_K"]),
        "mistral": ("llama", T.MistralConfig, dict(c, head_dim=16, sliding_window=None), ["F32"]),
        "qwen2": ("qwen2", T.Qwen2Config, dict(c), ["F32", "Q8_0"]),
        # head_dim 128, Qwen3Config's default: transformers' GGUF loader
        # maps no key to it (hf/ does: attention.key_length)
        "qwen3": ("qwen3", T.Qwen3Config, dict(c, head_dim=128), ["F32", "F16"]),
        "phi3": ("phi3", T.Phi3Config, dict(c), ["F32"]),
        "gemma2": ("gemma2", T.Gemma2Config, dict(c, head_dim=16), ["F32", "Q8_0"]),
        "gemma3": ("gemma3", T.Gemma3TextConfig, dict(c, head_dim=16), ["F32"]),
        # the experts' sizes at the classes' defaults: transformers' own
        # loader takes them from there, not from the file
        "nemotron": ("nemotron", T.NemotronConfig, dict(c, tie_word_embeddings=False), ["F32"]),
        # vocab at Starcoder2Config's default: transformers maps no key to it
        "starcoder2": ("starcoder2", T.Starcoder2Config, dict(c, vocab_size=49152), ["F32"]),
        "stablelm": ("stablelm", T.StableLmConfig, dict(c), ["F32"]),
        "stablelm-bias": ("stablelm", T.StableLmConfig, dict(c, use_qkv_bias=True), ["F32"]),
        "qwen2moe": ("qwen2moe", T.Qwen2MoeConfig,
                     dict(moe, moe_intermediate_size=1408, shared_expert_intermediate_size=5632),
                     ["F32"]),
        "qwen3moe": ("qwen3moe", T.Qwen3MoeConfig,
                     dict(moe, head_dim=16, moe_intermediate_size=768, norm_topk_prob=True),
                     ["F32", "Q8_0"]),
    }


def permute(w, n_head, n_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute."""
    if n_kv is not None and n_head != n_kv:
        n_head = n_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def gguf_tensors(arch, cfg, sd):
    """[(gguf name, float32 array)] of an HF state dict, as
    convert_hf_to_gguf.py writes them."""
    arch_id = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    nmap = gguf.get_tensor_name_map(arch_id, cfg.num_hidden_layers)
    out = []
    for name, t in sd.items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        a = t.detach().float().numpy().copy()
        if name.endswith("mlp.experts.gate_up_proj"):
            b = name.split(".")[2]
            f = a.shape[1] // 2
            out.append(("blk.%s.ffn_gate_exps.weight" % b, a[:, :f, :].copy()))
            out.append(("blk.%s.ffn_up_exps.weight" % b, a[:, f:, :].copy()))
            continue
        if name.endswith("mlp.experts.down_proj"):
            out.append(("blk.%s.ffn_down_exps.weight" % name.split(".")[2], a))
            continue
        g = nmap.get_name(name, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise SystemExit("%s: no GGUF name for %s" % (arch, name))
        if arch == "llama" and ".attn_q." in g:
            a = permute(a, cfg.num_attention_heads, cfg.num_attention_heads)
        if arch == "llama" and ".attn_k." in g:
            a = permute(a, cfg.num_attention_heads, cfg.num_key_value_heads)
        if (arch.startswith("gemma") or arch == "nemotron") and "norm.weight" in g:
            a = a + 1
        if "ffn_gate_inp_shexp" in g:
            a = a.reshape(-1)
        out.append((g, a))
    return out


def quantize(qtype, a):
    """Bytes of a (rows of a.shape[-1]) in qtype: gguf-py's quantizer for
    Q8_0, ggml's own (tests/oracle/ggml.py) for the K-quants."""
    if qtype == "Q8_0":
        return gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
    import ggml
    raw = ggml.quantize(int(gguf.GGMLQuantizationType[qtype]), a.reshape(-1), a.shape[-1])
    bpr = len(raw) // (a.size // a.shape[-1])
    return np.frombuffer(raw, dtype=np.uint8).reshape(*a.shape[:-1], bpr)


def write(path, arch, cfg, tensors, qtype, name, split=0):
    w = gguf.GGUFWriter(path, arch, split_max_tensors=split)
    w.add_string("general.name", "mistral" if name.startswith("mistral") else "tiny-" + name)
    a = arch + "."
    w.add_uint32(a + "block_count", cfg.num_hidden_layers)
    w.add_uint32(a + "context_length", cfg.max_position_embeddings)
    w.add_uint32(a + "embedding_length", cfg.hidden_size)
    w.add_uint32(a + "feed_forward_length", cfg.intermediate_size)
    w.add_uint32(a + "attention.head_count", cfg.num_attention_heads)
    w.add_uint32(a + "attention.head_count_kv", cfg.num_key_value_heads)
    eps = getattr(cfg, "rms_norm_eps", None) or getattr(cfg, "norm_eps", None) or cfg.norm_epsilon
    eps = getattr(cfg, "layer_norm_eps", None) or eps
    w.add_float32(a + ("attention.layer_norm_epsilon" if arch in ("starcoder2", "stablelm")
                       else "attention.layer_norm_rms_epsilon"), eps)
    rp = cfg.rope_parameters
    theta = getattr(cfg, "rope_theta", None) or rp.get("rope_theta") or rp["full_attention"]["rope_theta"]
    w.add_float32(a + "rope.freq_base", float(theta))
    w.add_uint32(a + "vocab_size", cfg.vocab_size)
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if arch == "llama":
        w.add_uint32(a + "rope.dimension_count", hd)
    if arch in ("gemma2", "gemma3", "qwen3moe", "qwen3"):
        w.add_uint32(a + "attention.key_length", hd)
        w.add_uint32(a + "attention.value_length", hd)
    if arch.startswith("gemma"):
        w.add_uint32(a + "attention.sliding_window", cfg.sliding_window)
    if arch.endswith("moe"):
        w.add_uint32(a + "expert_count", cfg.num_experts)
        w.add_uint32(a + "expert_used_count", cfg.num_experts_per_tok)
        w.add_uint32(a + "expert_feed_forward_length", cfg.moe_intermediate_size)
    if arch == "qwen2moe":
        w.add_uint32(a + "expert_shared_feed_forward_length",
                     cfg.shared_expert_intermediate_size)
    w.add_uint32("tokenizer.ggml.bos_token_id", cfg.bos_token_id)
    w.add_uint32("tokenizer.ggml.eos_token_id", cfg.eos_token_id)
    w.add_uint32("tokenizer.ggml.padding_token_id", cfg.pad_token_id)
    written = {}
    for g, t in tensors:
        if qtype == "F32" or t.ndim < 2 or "norm" in g:
            arr = t.astype(np.float32)
            w.add_tensor(g, arr)
        elif qtype == "F16":
            arr = t.astype(np.float16)
            w.add_tensor(g, arr)
        else:
            blk = 32 if qtype == "Q8_0" else 256
            if t.shape[-1] % blk:
                arr = t.astype(np.float32)
                w.add_tensor(g, arr)
            else:
                q = quantize(qtype, np.ascontiguousarray(t, dtype=np.float32))
                w.add_tensor(g, q, raw_dtype=gguf.GGMLQuantizationType[qtype])
                arr = None
        written[g] = arr
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


def make(d):
    torch.manual_seed(20261128)
    names = []
    quick = os.environ.get("GGUFFS_TEST_QUICK")
    for name, (arch, C, kw, qtypes) in models().items():
        if quick:
            # each architecture once, the K-quants once; llama's Q8_0 too,
            # the split model's unsplit twin
            qtypes = ["F32", "Q8_0"] if name == "llama" else qtypes[:1]
        cfg = C(**kw)
        m = T.AutoModelForCausalLM.from_config(cfg).float().eval()
        # norms away from 1 (they start at exactly 1, or 0 for gemma)
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "norm" in n:
                    p.add_(torch.randn_like(p) * 0.1)
        sd = {k: v.contiguous() for k, v in m.state_dict().items()}
        tensors = gguf_tensors(arch, cfg, sd)
        for q in qtypes:
            full = "%s-%s" % (name, q.lower())
            write(os.path.join(d, full + ".gguf"), arch, cfg, tensors, q, name)
            names.append(full)
        if name == "llama":
            # a split model (3 shards): NAME-split.gguf is a link to the first
            write(os.path.join(d, "llama-q8_0-split.gguf"), arch, cfg, tensors, "Q8_0", name,
                  split=8)
            os.symlink("llama-q8_0-split-00001-of-00003.gguf",
                       os.path.join(d, "llama-split-q8_0.gguf"))
            names.append("llama-split-q8_0")
        keep = {k: v for k, v in sd.items()
                if not (k == "lm_head.weight" and cfg.tie_word_embeddings)}
        save_file(keep, os.path.join(d, name + ".orig.safetensors"))
    print("\n".join(names))


def bits_equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(torch.int32) if a.dtype == torch.float32 else a, 
        b.contiguous().view(torch.int32) if b.dtype == torch.float32 else b)


def gguf_reference(d, name):
    """transformers' own from_pretrained(d, gguf_file=name) (it wants
    accelerate, pinned in tests/requirements.txt), every weight dequantized
    to float32 (GgufConfig(dequantize=True): by default transformers 5.24
    keeps quantized weights in their GGUF blocks, which hf/ does not); the
    quantization_config that call adds to the config is dropped, so that
    the configs compare."""
    m = T.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=name, dtype=torch.float32,
        quantization_config=T.GgufConfig(dequantize=True)).eval()
    if hasattr(m.config, "quantization_config"):
        del m.config.quantization_config
    return m


def check_one(d, name, mnt, errors):
    base = name.rsplit("-", 1)[0]
    qtype = name.rsplit("-", 1)[1].upper()
    # a split model against transformers' loader of the same model unsplit
    refname = name.replace("-split", "")
    hf = T.AutoModelForCausalLM.from_pretrained(os.path.join(mnt, "hf")).eval()
    bad = []
    try:
        ref = gguf_reference(d, refname + ".gguf")
    except NotImplementedError as e:
        # transformers' loader cannot load it (mistral: gguf-py has no
        # such architecture): the original model is the reference
        print("note: %s: gguf_file= cannot load it: %s" % (name, str(e)[:80]))
        cfg = T.AutoConfig.from_pretrained(os.path.join(mnt, "hf"))
        ref = T.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        ref.load_state_dict(load_file(os.path.join(d, base + ".orig.safetensors")),
                            strict=False)
        ref.tie_weights()
        ref.eval()
    got, want = hf.state_dict(), ref.state_dict()
    if sorted(got) != sorted(want):
        bad.append("names differ: %s" % sorted(set(got) ^ set(want)))
    for k in sorted(set(got) & set(want)):
        if not bits_equal(got[k], want[k]):
            bad.append("%s differs from gguf_file= (%s %s vs %s %s)" % (
                k, got[k].dtype, tuple(got[k].shape), want[k].dtype, tuple(want[k].shape)))
    # the configs: the same model (names of where it came from aside)
    skip = {"_name_or_path", "name_or_path", "transformers_version", "_commit_hash",
            "architectures"}
    cg, cr = hf.config.to_dict(), ref.config.to_dict()
    for k in sorted(set(cg) | set(cr)):
        if k not in skip and cg.get(k) != cr.get(k):
            bad.append("config %s: hf/ %r, gguf_file= %r" % (k, cg.get(k), cr.get(k)))
    # one thread: a MoE's experts summed in another order differ in the
    # last bit between two runs of the same model
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.no_grad():
        lg = hf(torch.tensor(PROMPT)).logits
        lr = ref(torch.tensor(PROMPT)).logits
    torch.set_num_threads(threads)
    if not torch.equal(lg, lr):
        bad.append("logits differ: max |diff| %g" % (lg - lr).abs().max().item())
    if qtype in ("F32", "F16"):
        orig = load_file(os.path.join(d, base + ".orig.safetensors"))
        for k, v in orig.items():
            if k not in got:
                bad.append("%s: not in hf/" % k)
                continue
            if qtype == "F16" and v.dim() >= 2:
                v = v.half().float()
            if (base.startswith("gemma") or base == "nemotron") and "norm.weight" in k:
                v = (v + 1) - 1         # stored plus 1 in float32, loaded minus 1
            if not bits_equal(got[k], v):
                bad.append("%s differs from the original" % k)
    # safetensors' own readers on both files
    hst = os.path.join(mnt, "hf", "model.safetensors")
    lf = load_file(hst)
    with safe_open(hst, "pt") as f:
        keys = list(f.keys())
        for k in keys:
            t = f.get_tensor(k)
            if not torch.equal(t, lf[k]):
                bad.append("hf/model.safetensors %s: safe_open and load_file differ" % k)
            if not bits_equal(t.float(), got[k]):
                bad.append("hf/model.safetensors %s differs from the model" % k)
    mst = os.path.join(mnt, "model.safetensors")
    lf = load_file(mst)
    with safe_open(mst, "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            f32 = np.fromfile(os.path.join(mnt, "tensors", k, "f32"), dtype="<f4")
            if not torch.equal(t, lf[k]) or not np.array_equal(
                    t.float().numpy().reshape(-1).view(np.int32), f32.view(np.int32)):
                bad.append("model.safetensors %s differs from tensors/%s/f32" % (k, k))
    # gguf-py's GGUFReader on model.gguf: the tensors of the file itself (a
    # split model: of the same model unsplit), and its keys (not a split
    # model's: the merged file drops the split.* keys)
    from gguf import GGUFReader
    mine = GGUFReader(os.path.join(mnt, "model.gguf"))
    theirs = GGUFReader(os.path.join(d, refname + ".gguf"))
    if "-split" not in name and \
            [f.name for f in mine.fields.values()] != [f.name for f in theirs.fields.values()]:
        bad.append("model.gguf: GGUFReader's keys differ from the file's")
    tens = [(t.name, t.tensor_type, t.data.tobytes()) for t in mine.tensors]
    if not tens or tens != [(t.name, t.tensor_type, t.data.tobytes()) for t in theirs.tensors]:
        bad.append("model.gguf: GGUFReader's %d tensors differ from the file's" % len(tens))
    print("%s: %d tensors, %s" % (name, len(got), "ok" if not bad else "; ".join(bad[:6])))
    errors.extend(bad)


def check(d, pairs):
    errors = []
    for p in pairs:
        name, mnt = p.split("=", 1)
        try:
            check_one(d, name, mnt, errors)
        except Exception as e:  # noqa: BLE001  (one line per model, then the verdict)
            print("%s: %s: %s" % (name, type(e).__name__, str(e)[:800]))
            errors.append(name)
    sys.exit(1 if errors else 0)


def generate(d, name, mnt, n):
    ids = torch.tensor([[1, 450, 4996, 17354, 1701]])
    hf = T.AutoModelForCausalLM.from_pretrained(os.path.join(mnt, "hf")).eval()
    ref = gguf_reference(d, name)
    kw = dict(max_new_tokens=n, do_sample=False, pad_token_id=0)
    a = hf.generate(ids, **kw)[0].tolist()
    b = ref.generate(ids, **kw)[0].tolist()
    print(json.dumps({"hf": a, "gguf_file": b}))


def bench_make(d, hidden, layers, qtype):
    torch.manual_seed(1)
    cfg = T.LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 11 // 4 // 256 * 256,
                        num_hidden_layers=layers, num_attention_heads=hidden // 64,
                        num_key_value_heads=hidden // 128, head_dim=64, vocab_size=32000,
                        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    m = T.AutoModelForCausalLM.from_config(cfg).float().eval()
    sd = {k: v.contiguous() for k, v in m.state_dict().items()}
    write(os.path.join(d, "bench.gguf"), "llama", cfg, gguf_tensors("llama", cfg, sd), qtype,
          "bench")


def bench_load(how, args):
    import resource
    import time
    t0 = time.perf_counter()
    if how == "hf":
        m = T.AutoModelForCausalLM.from_pretrained(os.path.join(args[0], "hf"))
    else:
        m = gguf_reference(args[0], args[1])
    # every weight touched: a loader that maps the file lazily has read
    # (and gguffs dequantized) nothing until then
    n = 0
    with torch.no_grad():
        for p in m.state_dict().values():
            n += p.numel()
            p.float().sum().item()
    s = time.perf_counter() - t0
    print(json.dumps({"s": s, "params": n,
                      "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


if __name__ == "__main__":
    if sys.argv[1] == "bench-make":
        bench_make(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        sys.exit(0)
    if sys.argv[1] == "bench-load":
        bench_load(sys.argv[2], sys.argv[3:])
        sys.exit(0)
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3:])
    elif sys.argv[1] == "generate":
        generate(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))

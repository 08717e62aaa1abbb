/* gguf/hf.c — a model as a Hugging Face model folder (see hf.h). */
#include "hf.h"
#include "bytes.h"
#include "types.h"
#include "value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- architectures ------------------------------------------------------- */

enum family { F_LLAMA, F_QWEN2, F_QWEN3, F_PHI3, F_GEMMA, F_MOE, F_NEMOTRON, F_STARCODER2,
              F_STABLELM };

struct keymap {
    const char *gguf, *hf;
};

/* GGUF_CONFIG_MAPPING (transformers/integrations/ggml.py), per
 * architecture: the key after "ARCH." and the config's name for it. */
#define K_COMMON                                                                       \
    { "context_length", "max_position_embeddings" }, { "block_count", "num_hidden_layers" }, \
    { "feed_forward_length", "intermediate_size" }, { "embedding_length", "hidden_size" },  \
    { "rope.freq_base", "rope_theta" }, { "attention.head_count", "num_attention_heads" },  \
    { "attention.head_count_kv", "num_key_value_heads" },                                  \
    { "attention.layer_norm_rms_epsilon", "rms_norm_eps" }, { "vocab_size", "vocab_size" }
static const struct keymap k_llama[] = { K_COMMON, { "rope.dimension_count", "head_dim" },
                                         { NULL, NULL } };
static const struct keymap k_plain[] = { K_COMMON, { NULL, NULL } };
/* qwen3's head_dim: gguffs' own (transformers maps nothing to it and
 * leaves Qwen3Config's 128, which real Qwen3 models have) */
static const struct keymap k_qwen3[] = { K_COMMON, { "attention.key_length", "head_dim" },
                                         { NULL, NULL } };
/* qwen2moe's: expert_count and expert_used_count are transformers';
 * the experts' sizes are gguffs' own (transformers leaves them at the
 * class's defaults, and then cannot load a model of other sizes) */
static const struct keymap k_qwen2moe[] = {
    K_COMMON, { "expert_count", "num_experts" }, { "expert_used_count", "num_experts_per_tok" },
    { "expert_feed_forward_length", "moe_intermediate_size" },
    { "expert_shared_feed_forward_length", "shared_expert_intermediate_size" }, { NULL, NULL } };
static const struct keymap k_qwen3moe[] = {
    K_COMMON, { "attention.key_length", "head_dim" }, { "expert_count", "num_experts" },
    { "expert_used_count", "num_experts_per_tok" },
    { "expert_feed_forward_length", "moe_intermediate_size" }, { NULL, NULL } };
static const struct keymap k_gemma[] = {
    K_COMMON, { "attention.key_length", "head_dim" },
    { "attention.sliding_window", "sliding_window" }, { NULL, NULL } };
static const struct keymap k_nemotron[] = {
    { "context_length", "max_position_embeddings" }, { "block_count", "num_hidden_layers" },
    { "feed_forward_length", "intermediate_size" }, { "embedding_length", "hidden_size" },
    { "rope.freq_base", "rope_theta" }, { "attention.head_count", "num_attention_heads" },
    { "attention.head_count_kv", "num_key_value_heads" },
    { "attention.layer_norm_rms_epsilon", "norm_eps" }, { "vocab_size", "vocab_size" },
    { NULL, NULL } };
static const struct keymap k_starcoder2[] = {
    { "block_count", "num_hidden_layers" }, { "context_length", "max_position_embeddings" },
    { "embedding_length", "hidden_size" }, { "feed_forward_length", "intermediate_size" },
    { "attention.head_count", "num_attention_heads" },
    { "attention.head_count_kv", "num_key_value_heads" },
    { "attention.layer_norm_epsilon", "norm_epsilon" }, { NULL, NULL } };
static const struct keymap k_stablelm[] = {
    { "context_length", "max_position_embeddings" }, { "block_count", "num_hidden_layers" },
    { "feed_forward_length", "intermediate_size" }, { "embedding_length", "hidden_size" },
    { "attention.head_count", "num_attention_heads" },
    { "attention.head_count_kv", "num_key_value_heads" },
    { "attention.layer_norm_epsilon", "layer_norm_eps" }, { "vocab_size", "vocab_size" },
    { NULL, NULL } };
static const struct keymap k_tokenizer[] = {
    { "ggml.bos_token_id", "bos_token_id" }, { "ggml.eos_token_id", "eos_token_id" },
    { "ggml.unknown_token_id", "unk_token_id" }, { "ggml.padding_token_id", "pad_token_id" },
    { NULL, NULL } };

struct arch {
    const char *gguf;           /* general.architecture */
    const char *model_type;     /* the config's (after the loader's fix-ups) */
    const char *cls;            /* architectures[0] */
    enum family fam;
    const struct keymap *keys;
};

static const struct arch archs[] = {
    { "llama", "llama", "LlamaForCausalLM", F_LLAMA, k_llama },
    { "qwen2", "qwen2", "Qwen2ForCausalLM", F_QWEN2, k_plain },
    { "qwen3", "qwen3", "Qwen3ForCausalLM", F_QWEN3, k_qwen3 },
    { "qwen2moe", "qwen2_moe", "Qwen2MoeForCausalLM", F_MOE, k_qwen2moe },
    { "qwen3moe", "qwen3_moe", "Qwen3MoeForCausalLM", F_MOE, k_qwen3moe },
    { "phi3", "phi3", "Phi3ForCausalLM", F_PHI3, k_plain },
    { "gemma2", "gemma2", "Gemma2ForCausalLM", F_GEMMA, k_gemma },
    { "gemma3", "gemma3_text", "Gemma3ForCausalLM", F_GEMMA, k_gemma },
    { "nemotron", "nemotron", "NemotronForCausalLM", F_NEMOTRON, k_nemotron },
    { "starcoder2", "starcoder2", "Starcoder2ForCausalLM", F_STARCODER2, k_starcoder2 },
    { "stablelm", "stablelm", "StableLmForCausalLM", F_STABLELM, k_stablelm },
};
static const struct arch mistral = { "llama", "mistral", "MistralForCausalLM", F_LLAMA,
                                     k_llama };

/* ---- values ---------------------------------------------------------------- */

/* The value of key (a C string), first occurrence, or NULL. */
static const struct gguf_kv *find(const struct gguf_file *f, const char *key)
{
    int64_t i = gguf_find_key(f, key, strlen(key));
    return i < 0 ? NULL : &f->kv[i];
}

/* A string value's bytes (NULL: not a string, or not valid). */
static const char *str_val(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t *len)
{
    unsigned w = gguf_count_size(&f->enc);
    if (!kv || kv->type != GGUF_STRING || kv->val_size < w)
        return NULL;
    const uint8_t *v = f->hdr + kv->val_off;
    uint64_t n = gguf_rd_count(&f->enc, v);
    if (n > kv->val_size - w)
        return NULL;
    *len = n;
    return (const char *)v + w;
}

static bool str_is(const struct gguf_file *f, const char *key, const char *want)
{
    uint64_t n;
    const char *s = str_val(f, find(f, key), &n);
    return s && n == strlen(want) && !memcmp(s, want, n);
}

/* A JSON string of bytes s (valid UTF-8, checked by the caller). */
static void json_str(struct gguf_buf *out, const char *s, size_t n)
{
    gguf_buf_putc(out, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            gguf_buf_printf(out, "\\%c", c);
        else if (c < 0x20)
            gguf_buf_printf(out, "\\u%04x", c);
        else
            gguf_buf_putc(out, (char)c);
    }
    gguf_buf_putc(out, '"');
}

/* A float as Python's json writes a float: shortest round trip is not
 * needed, only the same double back (17 digits), and a point or an
 * exponent so that it stays a float; false for a NaN or an infinity (not
 * JSON). */
static bool json_float(struct gguf_buf *out, double v)
{
    if (!isfinite(v))
        return false;
    char b[40];
    snprintf(b, sizeof b, "%.17g", v);
    gguf_buf_printf(out, "%s%s", b, strpbrk(b, ".e") ? "" : ".0");
    return true;
}

/* One scalar of type t at p (size checked by the caller) as JSON. */
static bool json_scalar(const struct gguf_file *f, unsigned t, const uint8_t *p,
                        struct gguf_buf *out)
{
    const struct gguf_enc *e = &f->enc;
    switch (t) {
    case GGUF_U8: gguf_buf_printf(out, "%u", p[0]); return true;
    case GGUF_I8: gguf_buf_printf(out, "%d", (int8_t)p[0]); return true;
    case GGUF_U16: gguf_buf_printf(out, "%u", gguf_rd16(e, p)); return true;
    case GGUF_I16: gguf_buf_printf(out, "%d", (int16_t)gguf_rd16(e, p)); return true;
    case GGUF_U32: gguf_buf_printf(out, "%lu", (unsigned long)gguf_rd32(e, p)); return true;
    case GGUF_I32: gguf_buf_printf(out, "%ld", (long)(int32_t)gguf_rd32(e, p)); return true;
    case GGUF_U64:
        gguf_buf_printf(out, "%llu", (unsigned long long)gguf_rd64(e, p));
        return true;
    case GGUF_I64:
        gguf_buf_printf(out, "%lld", (long long)(int64_t)gguf_rd64(e, p));
        return true;
    case GGUF_BOOL: gguf_buf_printf(out, "%s", p[0] ? "true" : "false"); return true;
    case GGUF_F32: {
        uint32_t u = gguf_rd32(e, p);
        float v;
        memcpy(&v, &u, sizeof v);
        return json_float(out, v);
    }
    case GGUF_F64: {
        uint64_t u = gguf_rd64(e, p);
        double v;
        memcpy(&v, &u, sizeof v);
        return json_float(out, v);
    }
    default: return false;
    }
}

/* A key's value as the loader makes it (a one-element array as its
 * element, an array as a list; strings and nested arrays refused: no
 * mapped key has them): false when it cannot be written. */
static bool json_value(const struct gguf_file *f, const struct gguf_kv *kv, struct gguf_buf *out)
{
    if (kv->type == GGUF_STRING) {
        uint64_t n;
        const char *s = str_val(f, kv, &n);
        if (!s || gguf_utf8_valid(s, (size_t)n, NULL) != n)
            return false;
        json_str(out, s, (size_t)n);
        return true;
    }
    unsigned t = kv->type == GGUF_ARRAY ? kv->elem_type : kv->type;
    unsigned w = t < GGUF_VTYPE_COUNT && t != GGUF_STRING && t != GGUF_ARRAY ? gguf_vtype_size(t) : 0;
    uint64_t count = kv->type == GGUF_ARRAY ? kv->count : 1;
    if (!w || count == 0 || count > kv->val_size / w)
        return false;
    const uint8_t *p = f->hdr + kv->val_off;
    if (count == 1)
        return json_scalar(f, t, p, out);
    gguf_buf_putc(out, '[');
    for (uint64_t i = 0; i < count; i++) {
        if (i)
            gguf_buf_putc(out, ',');
        if (!json_scalar(f, t, p + i * w, out))
            return false;
    }
    gguf_buf_putc(out, ']');
    return true;
}

/* An integer value (a one-element array's too), for the loader's use of
 * it (head counts). */
static bool int_val(const struct gguf_file *f, const char *key, int64_t *out)
{
    const struct gguf_kv *kv = find(f, key);
    if (!kv)
        return false;
    if (kv->type == GGUF_ARRAY && kv->count == 1 && kv->elem_type != GGUF_STRING &&
        kv->elem_type != GGUF_ARRAY) {
        struct gguf_buf b = { 0 };
        bool ok = json_value(f, kv, &b) && !b.oom;
        char *end = NULL;
        long long v = ok ? strtoll(b.data, &end, 10) : 0;
        ok = ok && end && *end == '\0';
        gguf_buf_free(&b);
        *out = v;
        return ok;
    }
    return gguf_key_int(f, key, out);
}

/* ---- config.json ------------------------------------------------------------ */

#define CFG_MAX 48

struct cfg {
    const char *key[CFG_MAX];
    struct gguf_buf val[CFG_MAX];
    unsigned n;
};

/* The slot of key (a later value replaces an earlier one, as in the
 * loader's dict); NULL when full. */
static struct gguf_buf *cfg_set(struct cfg *c, const char *key)
{
    for (unsigned i = 0; i < c->n; i++)
        if (!strcmp(c->key[i], key)) {
            c->val[i].len = 0;
            return &c->val[i];
        }
    if (c->n == CFG_MAX)
        return NULL;
    c->key[c->n] = key;
    memset(&c->val[c->n], 0, sizeof c->val[c->n]);
    return &c->val[c->n++];
}

static bool cfg_has(const struct cfg *c, const char *key)
{
    for (unsigned i = 0; i < c->n; i++)
        if (!strcmp(c->key[i], key))
            return true;
    return false;
}

static void cfg_free(struct cfg *c)
{
    for (unsigned i = 0; i < c->n; i++)
        gguf_buf_free(&c->val[i]);
}

static void cfg_put(struct cfg *c, const char *key, const struct gguf_file *f,
                    const struct gguf_kv *kv)
{
    struct gguf_buf tmp = { 0 };
    if (json_value(f, kv, &tmp) && !tmp.oom) {
        struct gguf_buf *b = cfg_set(c, key);
        if (b) {
            gguf_buf_free(b);
            *b = tmp;
            return;
        }
    }
    gguf_buf_free(&tmp);
}

static void cfg_text(struct cfg *c, const char *key, const char *json)
{
    struct gguf_buf *b = cfg_set(c, key);
    if (b)
        gguf_buf_printf(b, "%s", json);
}

/* The mapped key of a GGUF key (prefix ARCH or tokenizer), or NULL. */
static const char *mapped(const struct arch *a, const char *key, size_t len)
{
    size_t al = strlen(a->gguf);
    const struct keymap *m = NULL;
    const char *rest = NULL;
    if (len > al && !memcmp(key, a->gguf, al) && key[al] == '.') {
        m = a->keys;
        rest = key + al + 1;
    } else if (len > 10 && !memcmp(key, "tokenizer.", 10)) {
        m = k_tokenizer;
        rest = key + 10;
    } else {
        return NULL;
    }
    size_t rl = len - (size_t)(rest - key);
    for (; m->gguf; m++)
        if (strlen(m->gguf) == rl && !memcmp(m->gguf, rest, rl))
            return m->hf;
    return NULL;
}

/* general.name as _model_name_or_path, the GGUF architecture in it
 * replaced by the loader's (qwen2moe -> qwen2_moe; it does so in every
 * string value, and general.name is the one mapped string but the
 * architecture). */
static void name_json(struct cfg *c, const struct gguf_file *f, const struct gguf_kv *kv,
                      const struct arch *a)
{
    uint64_t n;
    const char *s = str_val(f, kv, &n);
    if (!s || gguf_utf8_valid(s, (size_t)n, NULL) != n)
        return;
    const char *to = strcmp(a->model_type, "gemma3_text") ? a->model_type : a->gguf;
    size_t fl = strlen(a->gguf), tl = strlen(to);
    struct gguf_buf t = { 0 };
    for (uint64_t i = 0; i < n;) {
        if (n - i >= fl && !memcmp(s + i, a->gguf, fl)) {
            gguf_buf_put(&t, to, tl);
            i += fl;
        } else {
            gguf_buf_putc(&t, s[i++]);
        }
    }
    struct gguf_buf *b = cfg_set(c, "_model_name_or_path");
    if (b && !t.oom)
        json_str(b, t.data ? t.data : "", t.len);
    gguf_buf_free(&t);
}

/* What the loader learns from the tensors' names (stablelm). */
struct seen {
    bool tied;            /* no output.weight */
    bool qkv_bias;        /* a tensor named *attn_{q,k,v}.bias* */
    bool ffn_norm;        /* a tensor named *ffn_norm* */
};

static void write_config(const struct gguf_file *f, const struct arch *a,
                         const struct seen *seen, uint64_t vocab_fallback,
                         struct gguf_buf *out)
{
    struct cfg c;
    c.n = 0;
    cfg_text(&c, "tie_word_embeddings", seen->tied ? "true" : "false");
    if (a->fam == F_STABLELM) {
        cfg_text(&c, "use_qkv_bias", seen->qkv_bias ? "true" : "false");
        cfg_text(&c, "use_parallel_residual", seen->ffn_norm ? "false" : "true");
    }
    if (!strcmp(a->model_type, "qwen3_moe"))
        cfg_text(&c, "norm_topk_prob", "true");
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        const char *key = (const char *)f->hdr + kv->key_off;
        if (kv->dup > 1)
            continue;
        if (kv->key_len == 20 && !memcmp(key, "general.architecture", 20)) {
            struct gguf_buf *b = cfg_set(&c, "model_type");
            if (b)
                json_str(b, a->model_type, strlen(a->model_type));
            continue;
        }
        if (kv->key_len == 12 && !memcmp(key, "general.name", 12)) {
            name_json(&c, f, kv, a);
            continue;
        }
        const char *hk = mapped(a, key, kv->key_len);
        if (hk)
            cfg_put(&c, hk, f, kv);
    }
    if (!cfg_has(&c, "vocab_size")) {
        const struct gguf_kv *tok = find(f, "tokenizer.ggml.tokens");
        struct gguf_buf *b = cfg_set(&c, "vocab_size");
        if (b)
            gguf_buf_printf(b, "%llu",
                            (unsigned long long)(tok && tok->type == GGUF_ARRAY ? tok->count
                                                                                : vocab_fallback));
    }
    struct gguf_buf *b = cfg_set(&c, "architectures");
    if (b)
        gguf_buf_printf(b, "[\"%s\"]", a->cls);
    cfg_text(&c, "torch_dtype", "\"float32\"");
    gguf_buf_putc(out, '{');
    for (unsigned i = 0; i < c.n; i++) {
        gguf_buf_printf(out, "%s\n  \"%s\": ", i ? "," : "", c.key[i]);
        gguf_buf_put(out, c.val[i].data ? c.val[i].data : "null", c.val[i].len ? c.val[i].len : 4);
    }
    gguf_buf_printf(out, "\n}\n");
    cfg_free(&c);
}

static void write_generation(const struct gguf_file *f, struct gguf_buf *out)
{
    static const struct keymap ids[] = { { "tokenizer.ggml.bos_token_id", "bos_token_id" },
                                         { "tokenizer.ggml.eos_token_id", "eos_token_id" },
                                         { "tokenizer.ggml.padding_token_id", "pad_token_id" } };
    gguf_buf_putc(out, '{');
    bool first = true;
    for (unsigned i = 0; i < sizeof ids / sizeof *ids; i++) {
        const struct gguf_kv *kv = find(f, ids[i].gguf);
        struct gguf_buf v = { 0 };
        if (kv && json_value(f, kv, &v) && !v.oom) {
            gguf_buf_printf(out, "%s\n  \"%s\": ", first ? "" : ",", ids[i].hf);
            gguf_buf_put(out, v.data, v.len);
            first = false;
        }
        gguf_buf_free(&v);
    }
    gguf_buf_printf(out, "\n}\n");
}

/* ---- tensors ----------------------------------------------------------------- */

struct leaf {
    const char *gguf, *hf;
};

/* A block's tensors: GGUF's leaf name and the HF module under
 * model.layers.N (gguf-py's TensorNameMap for these architectures). */
static const struct leaf leaves_common[] = {
    { "attn_q", "self_attn.q_proj" }, { "attn_k", "self_attn.k_proj" },
    { "attn_v", "self_attn.v_proj" }, { "attn_output", "self_attn.o_proj" },
    { "attn_q_norm", "self_attn.q_norm" }, { "attn_k_norm", "self_attn.k_norm" },
    { "ffn_gate", "mlp.gate_proj" }, { "ffn_down", "mlp.down_proj" },
    { "attn_norm", "input_layernorm" }, { NULL, NULL } };
static const struct leaf leaves_llama[] = {
    { "ffn_up", "mlp.up_proj" }, { "ffn_norm", "post_attention_layernorm" }, { NULL, NULL } };
static const struct leaf leaves_phi3[] = {
    { "ffn_up", "mlp.gate_up_proj" }, { "attn_qkv", "self_attn.qkv_proj" },
    { "ffn_norm", "post_attention_layernorm" }, { NULL, NULL } };
static const struct leaf leaves_gemma[] = {
    { "ffn_up", "mlp.up_proj" }, { "post_attention_norm", "post_attention_layernorm" },
    { "ffn_norm", "pre_feedforward_layernorm" }, { "post_ffw_norm", "post_feedforward_layernorm" },
    { NULL, NULL } };
static const struct leaf leaves_moe[] = {
    { "ffn_norm", "post_attention_layernorm" }, { "ffn_gate_inp", "mlp.gate" },
    { "ffn_gate_inp_shexp", "mlp.shared_expert_gate" },
    { "ffn_gate_shexp", "mlp.shared_expert.gate_proj" },
    { "ffn_up_shexp", "mlp.shared_expert.up_proj" },
    { "ffn_down_shexp", "mlp.shared_expert.down_proj" }, { NULL, NULL } };

static const struct leaf leaves_nemotron[] = {
    { "ffn_up", "mlp.up_proj" }, { "ffn_norm", "post_attention_layernorm" }, { NULL, NULL } };
static const struct leaf leaves_starcoder2[] = {
    { "ffn_up", "mlp.c_fc" }, { "ffn_down", "mlp.c_proj" },
    { "ffn_norm", "post_attention_layernorm" }, { NULL, NULL } };

static const char *find_leaf(const struct leaf *l, const char *s, size_t n)
{
    for (; l->gguf; l++)
        if (strlen(l->gguf) == n && !memcmp(l->gguf, s, n))
            return l->hf;
    return NULL;
}

static bool is(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && !memcmp(s, lit, n);
}

/* The HF name of GGUF tensor name s (NUL-terminated into hf, of
 * GGUF_HF_NAME_MAX bytes), or false when it has none; *block: its block
 * (-1: none).  The experts' tensors are not named here (gguf_hf_build). */
static bool hf_name(const struct arch *a, const char *s, size_t n, uint64_t n_blocks,
                    char *hf, int64_t *block)
{
    *block = -1;
    const char *suffix = NULL;
    size_t base = 0;
    if (n > 7 && !memcmp(s + n - 7, ".weight", 7)) {
        suffix = ".weight";
        base = n - 7;
    } else if (n > 5 && !memcmp(s + n - 5, ".bias", 5)) {
        suffix = ".bias";
        base = n - 5;
    } else {
        return false;
    }
    if (is(s, base, "token_embd"))
        return snprintf(hf, GGUF_HF_NAME_MAX, "model.embed_tokens%s", suffix) > 0;
    if (is(s, base, "output_norm"))
        return snprintf(hf, GGUF_HF_NAME_MAX, "model.norm%s", suffix) > 0;
    if (is(s, base, "output"))
        return snprintf(hf, GGUF_HF_NAME_MAX, "lm_head%s", suffix) > 0;
    if (base < 6 || memcmp(s, "blk.", 4))
        return false;
    /* blk.N.LEAF: N in decimal as gguf-py writes it (no sign, no leading
     * zero), below the block count */
    size_t i = 4;
    uint64_t b = 0;
    while (i < base && s[i] >= '0' && s[i] <= '9' && b < n_blocks) {
        if (i > 4 && s[4] == '0')
            return false;
        b = b * 10 + (uint64_t)(s[i] - '0');
        i++;
    }
    if (i == 4 || i >= base || s[i] != '.' || b >= n_blocks)
        return false;
    const char *leaf = s + i + 1;
    size_t ll = base - i - 1;
    /* the family's names first (starcoder2's ffn_down is not the
     * others'), then the common ones */
    const struct leaf *fam = a->fam == F_PHI3 ? leaves_phi3 : a->fam == F_GEMMA ? leaves_gemma
                           : a->fam == F_MOE ? leaves_moe : a->fam == F_NEMOTRON ? leaves_nemotron
                           : a->fam == F_STARCODER2 ? leaves_starcoder2 : leaves_llama;
    const char *mod = find_leaf(fam, leaf, ll);
    if (!mod)
        mod = find_leaf(leaves_common, leaf, ll);
    if (!mod && a->fam == F_MOE && is(leaf, ll, "ffn_up"))
        mod = "mlp.up_proj";
    if (!mod)
        return false;
    *block = (int64_t)b;
    return snprintf(hf, GGUF_HF_NAME_MAX, "model.layers.%llu.%s%s", (unsigned long long)b, mod,
                    suffix) < GGUF_HF_NAME_MAX;
}

/* Of the raw types, those served as bytes (the loader makes float32 of
 * them exactly). */
static bool plain(uint32_t type)
{
    return type == GGML_T_F32 || type == GGML_T_F16 || type == GGML_T_BF16;
}

static void set_shape_np(struct gguf_hf_tensor *h, const struct gguf_tensor *t)
{
    h->n_dims = t->n_dims;
    for (unsigned d = 0; d < t->n_dims; d++)
        h->shape[d] = t->ne[t->n_dims - 1 - d];
    h->n_elems = t->n_elems;
}

static void set_name(struct gguf_hf_tensor *h, const char *name)
{
    size_t l = strlen(name);
    memcpy(h->name, name, l + 1);
    h->name_len = (uint32_t)l;
}

/* The tensor named name (a C string) among the caller's, or -1. */
static int64_t find_tensor(uint64_t n, gguf_st_get get, void *ctx, const char *name)
{
    size_t l = strlen(name);
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_st_in in;
        memset(&in, 0, sizeof in);
        get(ctx, i, &in);
        if (in.name_len == l && !memcmp(in.name, name, l))
            return (int64_t)i;
    }
    return -1;
}

static enum gguf_err refuse(struct gguf_diag *d, const char *what, const char *name)
{
    return gguf_diag_set(d, GGUF_E_NOENT, UINT64_MAX, "hf/: %s '%s'", what, name);
}

enum gguf_err gguf_hf_build(const struct gguf_file *meta, uint64_t n, gguf_st_get get,
                            void *ctx, struct gguf_hf *out, struct gguf_diag *diag)
{
    memset(out, 0, sizeof *out);
    uint64_t al;
    const char *arch = str_val(meta, find(meta, "general.architecture"), &al);
    if (!arch)
        return gguf_diag_set(diag, GGUF_E_NOENT, UINT64_MAX,
                             "hf/: no general.architecture: not a model transformers can load");
    const struct arch *a = NULL;
    for (unsigned i = 0; i < sizeof archs / sizeof *archs; i++)
        if (strlen(archs[i].gguf) == al && !memcmp(archs[i].gguf, arch, al))
            a = &archs[i];
    if (!a) {
        char nb[GGUF_DIAG_NAME_MAX];
        return gguf_diag_set(diag, GGUF_E_NOENT, UINT64_MAX,
                             "hf/: architecture '%s' is not one transformers loads from GGUF "
                             "(llama, mistral, qwen2, qwen3, qwen2moe, qwen3moe, phi3, gemma2, "
                             "gemma3, nemotron, starcoder2, stablelm)",
                             gguf_diag_name(arch, (uint32_t)al, nb));
    }
    /* the loader's mistral: a llama file whose general.name is "mistral" */
    if (a->fam == F_LLAMA && str_is(meta, "general.name", "mistral"))
        a = &mistral;
    out->model_type = a->model_type;
    char key[96];
    int64_t blocks = 0, heads = 0, kv_heads = 0;
    snprintf(key, sizeof key, "%s.block_count", a->gguf);
    if (!int_val(meta, key, &blocks) || blocks < 0)
        return refuse(diag, "no block count", key);
    snprintf(key, sizeof key, "%s.attention.head_count", a->gguf);
    bool have_heads = int_val(meta, key, &heads) && heads > 0;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", a->gguf);
    bool have_kv = int_val(meta, key, &kv_heads) && kv_heads > 0;

    /* the mapped tensors only, in an array grown by doubling (at most n:
     * each GGUF tensor gives one HF tensor or none) */
    uint64_t cap = 0;
    struct seen seen = { true, false, false };
    uint64_t vocab_rows = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_st_in in;
        memset(&in, 0, sizeof in);
        get(ctx, i, &in);
        char nm[GGUF_DIAG_NAME_MAX];
        const char *shown = gguf_diag_name(in.name, in.name_len, nm);
        if (is(in.name, in.name_len, "output.weight"))
            seen.tied = false;
        if (memmem(in.name, in.name_len, "attn_q.bias", 11) ||
            memmem(in.name, in.name_len, "attn_k.bias", 11) ||
            memmem(in.name, in.name_len, "attn_v.bias", 11))
            seen.qkv_bias = true;
        if (memmem(in.name, in.name_len, "ffn_norm", 8))
            seen.ffn_norm = true;
        if (is(in.name, in.name_len, "token_embd.weight") && in.t->n_dims == 2)
            vocab_rows = in.t->ne[1];
        char hn[GGUF_HF_NAME_MAX];
        int64_t block;
        bool up = false;
        const char *nm0 = in.name;
        size_t nl = in.name_len;
        struct gguf_hf_tensor cur;
        struct gguf_hf_tensor *h = &cur;
        memset(h, 0, sizeof *h);
        h->t = in.t;
        h->big_endian = in.big_endian;
        h->has_f32 = in.has_f32;
        h->src[0] = i;
        h->n_src = 1;
        h->op = GGUF_HF_COPY;
        set_shape_np(h, in.t);
        /* the experts: blk.N.ffn_{gate,up,down}_exps.weight */
        if (a->fam == F_MOE && nl > 17 && !memcmp(nm0 + nl - 12, "_exps.weight", 12) &&
            !memcmp(nm0, "blk.", 4)) {
            const char *dot = memchr(nm0 + 4, '.', nl - 4);
            if (!dot)
                continue;
            size_t bl = (size_t)(dot - nm0 - 4);
            const char *leaf = dot + 1;
            size_t leafl = nl - 12 - (size_t)(leaf - nm0);
            char bs[24];
            if (bl == 0 || bl >= sizeof bs)
                continue;
            memcpy(bs, nm0 + 4, bl);
            bs[bl] = '\0';
            char *end;
            unsigned long long b = strtoull(bs, &end, 10);
            if (*end || (bl > 1 && bs[0] == '0') || b >= (uint64_t)blocks || in.t->n_dims != 3)
                continue;
            if (is(leaf, leafl, "ffn_down")) {
                snprintf(hn, sizeof hn, "model.layers.%llu.mlp.experts.down_proj", b);
            } else if (is(leaf, leafl, "ffn_gate") || (up = is(leaf, leafl, "ffn_up"))) {
                /* joined: made once, at gate; up found by name */
                if (up)
                    continue;
                char other[64];
                snprintf(other, sizeof other, "blk.%llu.ffn_up_exps.weight", b);
                int64_t u = find_tensor(n, get, ctx, other);
                struct gguf_st_in ui;
                memset(&ui, 0, sizeof ui);
                if (u >= 0)
                    get(ctx, (uint64_t)u, &ui);
                if (in.t->n_elems > INT64_MAX / 2) {
                    gguf_hf_free(out);
                    return refuse(diag, "experts too large to join", shown);
                }
                if (u < 0 || ui.t->n_dims != 3 || memcmp(ui.t->ne, in.t->ne, sizeof in.t->ne)) {
                    gguf_hf_free(out);
                    return refuse(diag, "no up experts of the same shape beside", shown);
                }
                snprintf(hn, sizeof hn, "model.layers.%llu.mlp.experts.gate_up_proj", b);
                h->src[1] = (uint64_t)u;
                h->n_src = 2;
                h->op = GGUF_HF_JOIN;
                h->shape[1] *= 2;
                h->n_elems *= 2;
                h->has_f32 = in.has_f32 && ui.has_f32;
                if (ui.t->type != in.t->type || ui.big_endian != in.big_endian)
                    h->f32 = true;
            } else {
                continue;
            }
        } else if (!hf_name(a, in.name, in.name_len, (uint64_t)blocks, hn, &block)) {
            continue;       /* no HF parameter: the loader skips it too */
        }
        set_name(h, hn);
        size_t hl = h->name_len;
        if (a->fam == F_LLAMA && !strcmp(a->gguf, "llama") && have_heads && have_kv &&
            (strstr(hn, ".q_proj.") || strstr(hn, ".k_proj."))) {
            h->op = GGUF_HF_QK_ROWS;
            h->heads = (uint64_t)(strstr(hn, ".q_proj.") ? heads : kv_heads);
            if (h->shape[0] % (2 * h->heads)) {
                gguf_hf_free(out);
                return refuse(diag, "rows not a whole number of head pairs in", shown);
            }
        }
        if ((a->fam == F_GEMMA || a->fam == F_NEMOTRON) && nl >= 11 &&
            memmem(nm0, nl, "norm.weight", 11))
            h->op = GGUF_HF_MINUS1;
        if (a->fam == F_MOE && hl > 30 && strstr(hn, "shared_expert_gate.") && h->n_dims == 1) {
            h->n_dims = 2;
            h->shape[1] = h->shape[0];
            h->shape[0] = 1;
        }
        if (h->op == GGUF_HF_MINUS1 || h->big_endian || !plain(in.t->type))
            h->f32 = true;
        if (h->f32 && !h->has_f32) {
            gguf_hf_free(out);
            return refuse(diag, "no f32 view (a type without a dequantizer) of", shown);
        }
        if (out->n == cap) {
            uint64_t nc = cap ? 2 * cap : 64;
            struct gguf_hf_tensor *nt = nc <= SIZE_MAX / sizeof *nt
                                        ? realloc(out->t, (size_t)nc * sizeof *nt) : NULL;
            if (!nt) {
                gguf_hf_free(out);
                return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
            }
            out->t = nt;
            cap = nc;
        }
        out->t[out->n++] = cur;
    }
    write_config(meta, a, &seen, vocab_rows, &out->config);
    write_generation(meta, &out->generation);
    if (out->config.oom || out->generation.oom) {
        gguf_hf_free(out);
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    return GGUF_OK;
}

void gguf_hf_free(struct gguf_hf *hf)
{
    free(hf->t);
    gguf_buf_free(&hf->config);
    gguf_buf_free(&hf->generation);
    memset(hf, 0, sizeof *hf);
}

/* ---- bytes ------------------------------------------------------------------ */

unsigned gguf_hf_esize(const struct gguf_hf_tensor *h)
{
    return h->f32 || h->t->type == GGML_T_F32 ? 4 : 2;
}

void gguf_hf_seg(const struct gguf_hf_tensor *h, uint64_t in, uint64_t n,
                 struct gguf_hf_seg *out)
{
    uint64_t es = gguf_hf_esize(h);
    out->src = 0;
    out->off = in;
    out->len = n;
    if (h->op == GGUF_HF_QK_ROWS && h->shape[0]) {
        /* HF row r = (head, half j, i) of (heads, 2, dim); GGUF's is
         * (head, i, half j) of (heads, dim, 2) */
        uint64_t row = h->n_elems / h->shape[0] * es;
        uint64_t dim = h->shape[0] / h->heads / 2;
        uint64_t r = in / row, within = in % row;
        uint64_t head = r / (2 * dim), rem = r % (2 * dim);
        uint64_t j = rem / dim, i = rem % dim;
        uint64_t src_row = head * 2 * dim + i * 2 + j;
        out->off = src_row * row + within;
        out->len = row - within < n ? row - within : n;
    } else if (h->op == GGUF_HF_JOIN && h->shape[0]) {
        uint64_t blk = h->n_elems / h->shape[0] / 2 * es;   /* one source's expert */
        uint64_t e = in / (2 * blk), w = in % (2 * blk);
        out->src = w >= blk;
        out->off = e * blk + w % blk;
        out->len = blk - w % blk < n ? blk - w % blk : n;
    }
}

/* ---- hf/model.safetensors ---------------------------------------------------- */

static void hf_tensor(void *ctx, uint64_t i, struct gguf_st_in *out)
{
    const struct gguf_hf *hf = ctx;
    const struct gguf_hf_tensor *h = &hf->t[i];
    out->name = h->name;
    out->name_len = h->name_len;
    out->t = h->t;
    out->big_endian = h->big_endian;
    out->has_f32 = h->has_f32;
    out->shape = h->shape;
    out->n_dims = h->n_dims;
    out->n_elems = h->n_elems;
    out->force_f32 = h->f32;
}

enum gguf_err gguf_hf_safetensors(const struct gguf_file *meta, const struct gguf_hf *hf,
                                  struct gguf_st_layout *out, struct gguf_diag *diag)
{
    /* the data from a multiple of 64 bytes: a tensor torch maps in place
     * is then as aligned as one it allocates, and takes the same kernels
     * (unaligned, a MoE's grouped matmul sums in another order: logits
     * differ in the last bit from transformers' own loader's) */
    return gguf_safetensors_aligned(meta, hf->n, hf_tensor, (void *)hf, 64, out, diag);
}

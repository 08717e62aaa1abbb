/*
 * gguf/hf_config.c — the architectures transformers loads from GGUF, and
 * config.json and generation_config.json as its loader derives them from
 * the metadata (for hf.c; see hf.h and hf_impl.h).
 */
#include "hf_impl.h"
#include "bytes.h"
#include "value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- architectures ------------------------------------------------------- */

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
const struct gguf_kv *hf_find(const struct gguf_file *f, const char *key)
{
    int64_t i = gguf_find_key(f, key, strlen(key));
    return i < 0 ? NULL : &f->kv[i];
}

/* A string value's bytes (NULL: not a string, or not valid). */
const char *hf_str_val(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t *len)
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
    const char *s = hf_str_val(f, hf_find(f, key), &n);
    return s && n == strlen(want) && !memcmp(s, want, n);
}

const struct arch *hf_arch_find(const struct gguf_file *meta, const char *name, uint64_t len)
{
    const struct arch *a = NULL;
    for (unsigned i = 0; i < sizeof archs / sizeof *archs; i++)
        if (strlen(archs[i].gguf) == len && !memcmp(archs[i].gguf, name, len))
            a = &archs[i];
    /* the loader's mistral: a llama file whose general.name is "mistral" */
    if (a && a->fam == F_LLAMA && str_is(meta, "general.name", "mistral"))
        a = &mistral;
    return a;
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
        const char *s = hf_str_val(f, kv, &n);
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
bool hf_int_val(const struct gguf_file *f, const char *key, int64_t *out)
{
    const struct gguf_kv *kv = hf_find(f, key);
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
    const char *s = hf_str_val(f, kv, &n);
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

void hf_write_config(const struct gguf_file *f, const struct arch *a,
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
        const struct gguf_kv *tok = hf_find(f, "tokenizer.ggml.tokens");
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

void hf_write_generation(const struct gguf_file *f, struct gguf_buf *out)
{
    static const struct keymap ids[] = { { "tokenizer.ggml.bos_token_id", "bos_token_id" },
                                         { "tokenizer.ggml.eos_token_id", "eos_token_id" },
                                         { "tokenizer.ggml.padding_token_id", "pad_token_id" } };
    gguf_buf_putc(out, '{');
    bool first = true;
    for (unsigned i = 0; i < sizeof ids / sizeof *ids; i++) {
        const struct gguf_kv *kv = hf_find(f, ids[i].gguf);
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

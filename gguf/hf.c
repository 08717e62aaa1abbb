/* gguf/hf.c — a model as a Hugging Face model folder (see hf.h): the HF
 * tensors (names, shapes, how their bytes are made) and the folder's build;
 * the architectures and the two config files are hf_config.c's. */
#include "hf.h"
#include "hf_impl.h"
#include "types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    const char *arch = hf_str_val(meta, hf_find(meta, "general.architecture"), &al);
    if (!arch)
        return gguf_diag_set(diag, GGUF_E_NOENT, UINT64_MAX,
                             "hf/: no general.architecture: not a model transformers can load");
    const struct arch *a = hf_arch_find(meta, arch, al);
    if (!a) {
        char nb[GGUF_DIAG_NAME_MAX];
        return gguf_diag_set(diag, GGUF_E_NOENT, UINT64_MAX,
                             "hf/: architecture '%s' is not one transformers loads from GGUF "
                             "(llama, mistral, qwen2, qwen3, qwen2moe, qwen3moe, phi3, gemma2, "
                             "gemma3, nemotron, starcoder2, stablelm)",
                             gguf_diag_name(arch, (uint32_t)al, nb));
    }
    out->model_type = a->model_type;
    char key[96];
    int64_t blocks = 0, heads = 0, kv_heads = 0;
    snprintf(key, sizeof key, "%s.block_count", a->gguf);
    if (!hf_int_val(meta, key, &blocks) || blocks < 0)
        return refuse(diag, "no block count", key);
    snprintf(key, sizeof key, "%s.attention.head_count", a->gguf);
    bool have_heads = hf_int_val(meta, key, &heads) && heads > 0;
    snprintf(key, sizeof key, "%s.attention.head_count_kv", a->gguf);
    bool have_kv = hf_int_val(meta, key, &kv_heads) && kv_heads > 0;

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
    hf_write_config(meta, a, &seen, vocab_rows, &out->config);
    hf_write_generation(meta, &out->generation);
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

/*
 * gguf/hf_tokenizer.c — tokenizer.json and tokenizer_config.json from a
 * GGUF's tokenizer metadata (see hf_tokenizer.h for what is promised):
 * the metadata read and checked into one analysis (struct hft), then
 * written out.
 *
 * Both files come from that analysis: the token arrays read and checked
 * here, the vocabulary indexed, the merges read or derived and the added
 * tokens assigned ids in transformers' order by hf_tokenizer_vocab.c, the
 * JSON written by hf_tokenizer_json.c (shared declarations:
 * hf_tokenizer_impl.h).
 */
#include "hf_tokenizer.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "hf_tokenizer_impl.h"
#include "value.h"

static const char *const sp_key[SP_N] = {
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
};

int hft_refuse(struct hft *h, const char *fmt, ...)
{
    if (h->why && h->whylen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(h->why, h->whylen, fmt, ap);
        va_end(ap);
    }
    return 1;
}

static void hft_free(struct hft *h)
{
    free(h->tok);
    free(h->voc);
    free(h->spell);
    free(h->vt.e);
    free(h->merges);
    free(h->add);
    free(h->at.e);
}

static const struct gguf_kv *kv_get(const struct gguf_file *gf, const char *key)
{
    int64_t i = gguf_find_key(gf, key, strlen(key));
    return i < 0 ? NULL : &gf->kv[i];
}

static bool utf8_ok(const char *p, size_t n)
{
    return gguf_utf8_valid(p, n, NULL) == n;
}

/* A string value's bytes; false if kv is not a string or does not fit. */
static bool kv_str(const struct gguf_file *gf, const struct gguf_kv *kv, struct sv *s)
{
    unsigned cs = gguf_count_size(&gf->enc);
    if (kv->type != GGUF_STRING || kv->val_off > gf->hdr_size || gf->hdr_size - kv->val_off < cs)
        return false;
    uint64_t len = gguf_rd_count(&gf->enc, gf->hdr + kv->val_off);
    if (len > gf->hdr_size - kv->val_off - cs || len > UINT32_MAX)
        return false;
    s->p = (const char *)gf->hdr + kv->val_off + cs;
    s->n = (uint32_t)len;
    return true;
}

/* The elements of an array of strings, into a new array of views. */
int hft_str_array(struct hft *h, const struct gguf_kv *kv, const char *what,
                     struct sv **out, uint64_t *count)
{
    const struct gguf_file *gf = h->gf;
    unsigned cs = gguf_count_size(&gf->enc);
    if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING)
        return hft_refuse(h, "%s is not an array of strings", what);
    /* each element has at least its length field in the header */
    if (kv->count > (gf->hdr_size - (kv->val_off < gf->hdr_size ? kv->val_off : gf->hdr_size)) / cs ||
        kv->count >= INT32_MAX)
        return hft_refuse(h, "%s has more elements than its bytes can hold", what);
    struct sv *a = malloc((kv->count ? kv->count : 1) * sizeof *a);
    if (!a)
        return -1;
    uint64_t off = kv->val_off;
    for (uint64_t i = 0; i < kv->count; i++) {
        if (off > gf->hdr_size || gf->hdr_size - off < cs) {
            free(a);
            return hft_refuse(h, "%s: element %" PRIu64 " runs past the header", what, i);
        }
        uint64_t len = gguf_rd_count(&gf->enc, gf->hdr + off);
        if (len > gf->hdr_size - off - cs || len > UINT32_MAX) {
            free(a);
            return hft_refuse(h, "%s: element %" PRIu64 " runs past the header", what, i);
        }
        a[i].p = (const char *)gf->hdr + off + cs;
        a[i].n = (uint32_t)len;
        if (!utf8_ok(a[i].p, a[i].n)) {
            free(a);
            return hft_refuse(h, "%s: element %" PRIu64 " is not valid UTF-8 (transformers refuses the file)",
                          what, i);
        }
        off += cs + len;
    }
    *out = a;
    *count = kv->count;
    return 0;
}

/* Element i of a numeric array (validated: fits in the header) as a double. */
double hft_num_at(const struct gguf_enc *e, uint8_t t, const uint8_t *p)
{
    switch (t) {
    case GGUF_U8: return p[0];
    case GGUF_I8: return (int8_t)p[0];
    case GGUF_BOOL: return p[0] != 0;
    case GGUF_U16: return gguf_rd16(e, p);
    case GGUF_I16: return (int16_t)gguf_rd16(e, p);
    case GGUF_U32: return gguf_rd32(e, p);
    case GGUF_I32: return (int32_t)gguf_rd32(e, p);
    case GGUF_U64: return (double)gguf_rd64(e, p);
    case GGUF_I64: return (double)(int64_t)gguf_rd64(e, p);
    case GGUF_F32: {
        uint32_t u = gguf_rd32(e, p);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case GGUF_F64: {
        uint64_t u = gguf_rd64(e, p);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    default: return 0;
    }
}

/* A numeric array's first element and count; false if kv is not one. */
static bool num_array(const struct gguf_file *gf, const struct gguf_kv *kv, const uint8_t **p,
                      uint64_t *count, uint8_t *t)
{
    unsigned sz = kv->type == GGUF_ARRAY ? gguf_vtype_size(kv->elem_type) : 0;
    if (!sz || kv->val_off > gf->hdr_size || kv->count > (gf->hdr_size - kv->val_off) / sz)
        return false;
    *p = gf->hdr + kv->val_off;
    *count = kv->count;
    *t = kv->elem_type;
    return true;
}

/* A scalar flag (bool or integer): 1 true, 0 false, -1 absent, -2 other. */
static int kv_flag(const struct gguf_file *gf, const char *key)
{
    const struct gguf_kv *kv = kv_get(gf, key);
    if (!kv)
        return -1;
    if (kv->type == GGUF_BOOL || (kv->type != GGUF_STRING && kv->type != GGUF_ARRAY &&
                                  kv->type != GGUF_F32 && kv->type != GGUF_F64 &&
                                  kv->type < GGUF_VTYPE_COUNT)) {
        unsigned sz = gguf_vtype_size(kv->type);
        if (!sz || kv->val_off > gf->hdr_size || gf->hdr_size - kv->val_off < sz)
            return -2;
        return hft_num_at(&gf->enc, kv->type, gf->hdr + kv->val_off) != 0;
    }
    return -2;
}

static const struct {
    const char *name, *split;
} pre_splits[] = {
#define LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TEKKEN "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN35 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define GPT4O "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
    { "llama3", LLAMA3 }, { "llama-v3", LLAMA3 }, { "llama-bpe", LLAMA3 }, { "falcon3", LLAMA3 },
    { "falcon-h1", LLAMA3 }, { "pixtral", LLAMA3 }, { "midm-2.0", LLAMA3 }, { "lfm2", LLAMA3 },
    { "jina-v5-nano", LLAMA3 }, { "dbrx", LLAMA3 }, { "smaug-bpe", LLAMA3 },
    { "tekken", TEKKEN },
    { "qwen2", QWEN2 }, { "deepseek-r1-qwen", QWEN2 }, { "kormo", QWEN2 }, { "f2llmv2", QWEN2 },
    { "megrez", QWEN2 },
    { "qwen35", QWEN35 },
    { "gpt-4o", GPT4O }, { "llama4", GPT4O }, { "kanana2", GPT4O }, { "talkie", GPT4O },
    { "minimax-m2", GPT4O },
};

static bool sv_is(struct sv s, const char *c)
{
    return s.n == strlen(c) && !memcmp(s.p, c, s.n);
}

/* Reads and checks everything both files need.  0, 1 (refused), -1. */
static int analyse(struct hft *h)
{
    const struct gguf_file *gf = h->gf;
    struct sv model, arch = { "", 0 }, s;
    const struct gguf_kv *kv = kv_get(gf, "tokenizer.ggml.model");
    if (!kv)
        return hft_refuse(h, "no tokenizer.ggml.model: the file has no tokenizer");
    if (!kv_str(gf, kv, &model) || !utf8_ok(model.p, model.n))
        return hft_refuse(h, "tokenizer.ggml.model is not a UTF-8 string");
    if ((kv = kv_get(gf, "general.architecture")) && !kv_str(gf, kv, &arch))
        arch.n = 0;
    h->gemma_outer = arch.n >= 5 && !memcmp(arch.p, "gemma", 5);
    if (sv_is(model, "gpt2")) {
        h->bpe = true;
    } else if (sv_is(model, "llama")) {
        h->gemma = h->gemma_spaces =
            sv_is(arch, "gemma") || sv_is(arch, "gemma2") || sv_is(arch, "gemma3");
        h->phi3 = sv_is(arch, "phi3");
    } else if (sv_is(model, "gemma4")) {
        h->gemma = true;
    } else if (sv_is(model, "t5")) {
        h->t5 = true;
    } else {
        return hft_refuse(h, "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2, gemma4 and t5 are)",
                      (int)(model.n > 64 ? 64 : model.n), model.p);
    }
    if ((kv = kv_get(gf, "tokenizer.ggml.pre"))) {
        if (!kv_str(gf, kv, &s) || !utf8_ok(s.p, s.n))
            return hft_refuse(h, "tokenizer.ggml.pre is not a UTF-8 string");
        for (size_t i = 0; h->bpe && i < sizeof pre_splits / sizeof *pre_splits; i++)
            if (sv_is(s, pre_splits[i].name))
                h->split = pre_splits[i].split;
    }
    if (!(kv = kv_get(gf, "tokenizer.ggml.tokens")))
        return hft_refuse(h, "no tokenizer.ggml.tokens: the file has no vocabulary");
    uint64_t n;
    int r = hft_str_array(h, kv, "tokenizer.ggml.tokens", &h->tok, &n);
    if (r)
        return r;
    h->n = h->n_model = (uint32_t)n;
    if (h->bpe) {
        if ((r = hft_respell(h)))
            return r;
    } else if (h->gemma_spaces) {
        if ((r = hft_respell_spaces(h)))
            return r;
    } else {
        h->voc = malloc((n ? n : 1) * sizeof *h->voc);
        if (!h->voc)
            return -1;
        memcpy(h->voc, h->tok, n * sizeof *h->voc);
    }
    if (h->t5) {
        /* the model is the (token, score) pairs as far as both go */
        uint64_t n_sc;
        if (!(kv = kv_get(gf, "tokenizer.ggml.scores")))
            return hft_refuse(h, "a unigram vocabulary without tokenizer.ggml.scores");
        if (!num_array(gf, kv, &h->scores, &n_sc, &h->scores_t))
            return hft_refuse(h, "tokenizer.ggml.scores is not an array of numbers");
        if (n_sc < h->n)
            h->n_model = (uint32_t)n_sc;
        unsigned esz = gguf_vtype_size(h->scores_t);
        for (uint32_t i = 0; i < h->n_model; i++)
            if (!isfinite(hft_num_at(&gf->enc, h->scores_t, h->scores + (size_t)i * esz)))
                return hft_refuse(h, "score %" PRIu32 " is not a finite number", i);
        if (h->n_model < 3)
            return hft_refuse(h, "a unigram vocabulary of fewer than 3 tokens (its unknown token is id 2)");
        hft_t5_sentinels(h);
    }
    if ((r = hft_index_vocab(h)))
        return r;
    if ((kv = kv_get(gf, "tokenizer.ggml.token_type"))) {
        if (!num_array(gf, kv, &h->types, &h->n_types, &h->types_t))
            return hft_refuse(h, "tokenizer.ggml.token_type is not an array of numbers");
    }
    if (h->t5) {
        /* no merges */
    } else if ((kv = kv_get(gf, "tokenizer.ggml.merges"))) {
        if ((r = hft_file_merges(h, kv)))
            return r;
    } else if (h->bpe) {
        return hft_refuse(h, "a byte-level vocabulary without tokenizer.ggml.merges is not generated");
    } else {
        const uint8_t *sc = NULL;
        uint64_t n_sc = 0;
        uint8_t st = 0;
        /* gemma-family merges are ordered by place: no scores needed */
        if (!h->gemma_spaces) {
            if (!(kv = kv_get(gf, "tokenizer.ggml.scores")))
                return hft_refuse(h, "neither tokenizer.ggml.merges nor tokenizer.ggml.scores");
            if (!num_array(gf, kv, &sc, &n_sc, &st))
                return hft_refuse(h, "tokenizer.ggml.scores is not an array of numbers");
        }
        if ((r = hft_derive_merges(h, sc, n_sc, st)))
            return r;
    }
    for (int k = 0; k < SP_N; k++) {
        if (!kv_get(gf, sp_key[k]))
            continue;
        int64_t id;
        if (!gguf_key_int(gf, sp_key[k], &id))
            return hft_refuse(h, "%s is not an integer", sp_key[k]);
        if (id < 0 && id >= -(int64_t)h->n)
            id += h->n;             /* a Python list index */
        if (id < 0 || id >= (int64_t)h->n)
            return hft_refuse(h, "%s %" PRId64 " is outside the vocabulary", sp_key[k], id);
        h->has_sp[k] = true;
        h->sp[k] = h->tok[id];
    }
    int f = kv_flag(gf, "tokenizer.ggml.add_bos_token");
    if (f == -2)
        return hft_refuse(h, "tokenizer.ggml.add_bos_token is not a bool");
    h->add_bos = f == 1 || (f == -1 && !h->bpe && !h->t5);
    if (sv_is(model, "gemma4"))
        h->add_bos = false;         /* its chat template writes <bos> */
    if ((f = kv_flag(gf, "tokenizer.ggml.add_eos_token")) == -2)
        return hft_refuse(h, "tokenizer.ggml.add_eos_token is not a bool");
    h->add_eos = f == 1;
    /* as transformers' post-processor: no bos/eos to add without the token */
    h->add_bos = h->add_bos && h->has_sp[SP_BOS];
    h->add_eos = h->add_eos && h->has_sp[SP_EOS];
    if ((kv = kv_get(gf, "tokenizer.chat_template"))) {
        if (!kv_str(gf, kv, &h->tmpl) || !utf8_ok(h->tmpl.p, h->tmpl.n))
            return hft_refuse(h, "tokenizer.chat_template is not a UTF-8 string");
        h->has_tmpl = true;
    }
    return hft_add_tokens(h);
}

static int run(const struct gguf_file *gf, struct gguf_buf *out, char *why, size_t whylen, bool config)
{
    struct hft h = { .gf = gf, .why = why, .whylen = whylen };
    if (why && whylen)
        why[0] = '\0';
    int r = analyse(&h);
    if (r == 0)
        r = config ? hft_emit_config(out, &h) : hft_emit_tokenizer(out, &h);
    if (r < 0 && why && whylen)
        snprintf(why, whylen, "out of memory");
    hft_free(&h);
    return r;
}

int gguf_hf_tokenizer_json(const struct gguf_file *gf, struct gguf_buf *out, char *why, size_t whylen)
{
    return run(gf, out, why, whylen, false);
}

int gguf_hf_tokenizer_config_json(const struct gguf_file *gf, struct gguf_buf *out, char *why,
                                  size_t whylen)
{
    return run(gf, out, why, whylen, true);
}

/*
 * gguf/hf_tokenizer.c — tokenizer.json and tokenizer_config.json from a
 * GGUF's tokenizer metadata (see hf_tokenizer.h for what is promised).
 *
 * Both files come from one analysis (struct hft): the token arrays read
 * and checked, the vocabulary indexed by a hash table, the merges read or
 * derived, the added tokens assigned ids in transformers' order.  Strings
 * are views into the parsed header (gf->hdr), which the parser already
 * bounded by the file; every length is still checked against hdr_size
 * before it is used.
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
#include "value.h"

__extension__ typedef unsigned __int128 u128;

/* A string: len bytes at p (not NUL-terminated). */
struct sv {
    const char *p;
    uint32_t n;
};

/* ---- hashing: a polynomial over the bytes, mod 2^61 - 1 ------------------
 * H(s) = sum (s[i] + 1) * B^i.  A prefix's hash grows by one term per byte
 * and a suffix's is c + B * H(rest), so every split of a token into two is
 * looked up with no copy and no rehash (deriving merges). */

#define M61 ((UINT64_C(1) << 61) - 1)
#define HB UINT64_C(0x1f3a5c7e9b2d4f61)

static uint64_t mmul(uint64_t a, uint64_t b)
{
    u128 r = (u128)a * b;
    uint64_t s = (uint64_t)(r & M61) + (uint64_t)(r >> 61);
    while (s >= M61)
        s -= M61;
    return s;
}

static uint64_t madd(uint64_t a, uint64_t b)
{
    uint64_t s = a + b;
    return s >= M61 ? s - M61 : s;
}

static const uint64_t HBM = HB % M61;

/* H of p[0..n) continuing a prefix whose hash is h and whose next power of
 * B is *pw. */
static uint64_t hash_more(uint64_t h, uint64_t *pw, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h = madd(h, mmul((unsigned char)p[i] + 1u, *pw));
        *pw = mmul(*pw, HBM);
    }
    return h;
}

static uint64_t hash_sv(const char *p, size_t n)
{
    uint64_t pw = 1;
    return hash_more(0, &pw, p, n);
}

/* ---- a table of strings -> u32, open addressing ------------------------- */

struct ent {
    uint64_t h;
    const char *p;
    uint32_t n;
    uint32_t v;           /* UINT32_MAX: empty */
};

struct tab {
    struct ent *e;
    size_t mask;
};

static bool tab_init(struct tab *t, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2) {
        if (cap > SIZE_MAX / 4 / sizeof *t->e)
            return false;
        cap *= 2;
    }
    t->e = malloc(cap * sizeof *t->e);
    if (!t->e)
        return false;
    for (size_t i = 0; i < cap; i++)
        t->e[i].v = UINT32_MAX;
    t->mask = cap - 1;
    return true;
}

static size_t slot_of(const struct tab *t, uint64_t h, uint32_t n)
{
    uint64_t x = (h ^ ((uint64_t)n * UINT64_C(0x9e3779b97f4a7c15))) * UINT64_C(0xff51afd7ed558ccd);
    return (size_t)(x ^ (x >> 29)) & t->mask;
}

/* The entry of a+b (b may be empty), or the empty slot where it belongs. */
static struct ent *tab_slot2(const struct tab *t, uint64_t h, const char *a, uint32_t an,
                             const char *b, uint32_t bn)
{
    uint32_t n = an + bn;
    for (size_t i = slot_of(t, h, n);; i = (i + 1) & t->mask) {
        struct ent *e = &t->e[i];
        if (e->v == UINT32_MAX)
            return e;
        if (e->h == h && e->n == n && (an == 0 || !memcmp(e->p, a, an)) &&
            (bn == 0 || !memcmp(e->p + an, b, bn)))
            return e;
    }
}

static struct ent *tab_slot(const struct tab *t, uint64_t h, const char *p, uint32_t n)
{
    return tab_slot2(t, h, p, n, NULL, 0);
}

/* The value of s, or -1. */
static int64_t tab_get(const struct tab *t, const char *p, uint32_t n)
{
    struct ent *e = tab_slot(t, hash_sv(p, n), p, n);
    return e->v == UINT32_MAX ? -1 : (int64_t)e->v;
}

/* ---- the analysis ------------------------------------------------------- */

enum { SP_BOS, SP_EOS, SP_UNK, SP_PAD, SP_N };
static const char *const sp_key[SP_N] = {
    "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
};
static const char *const sp_name[SP_N] = { "bos_token", "eos_token", "unk_token", "pad_token" };

struct added {
    struct sv s;
    uint32_t id;
    bool special;
};

struct pair {
    struct sv l, r;
};

struct hft {
    const struct gguf_file *gf;
    char *why;
    size_t whylen;
    bool bpe;             /* gpt2: byte-level; else sentencepiece */
    bool phi3;            /* the prefix space from a normalizer */
    bool gemma;           /* GemmaTokenizer's pipeline */
    bool gemma_outer;     /* a gemma-family architecture: transformers' class
                             for it names "<mask>" its mask token */
    bool t5;              /* unigram (T5Tokenizer) */
    uint32_t n_model;     /* tokens in the model: n, or for t5 as far as
                             the scores go */
    const uint8_t *scores;/* t5: tokenizer.ggml.scores' elements */
    uint8_t scores_t;
    char extra[100][16];  /* t5: "<extra_id_N>" */
    bool gemma_spaces;    /* gemma-family: tokens of spaces respelled with
                             "▁", merges ordered by place in the file */
    const char *split;    /* the pre-tokenizer's regex, or NULL: GPT-2's */
    uint32_t n;           /* tokens */
    struct sv *tok;       /* as the file spells them */
    struct sv *voc;       /* as the vocabulary spells them (respelled: bpe) */
    char *spell;          /* the respelled bytes */
    struct tab vt;        /* voc -> its last index */
    uint32_t vocab_len;   /* distinct strings in voc */
    const uint8_t *types; /* tokenizer.ggml.token_type's elements, or NULL */
    uint64_t n_types;
    uint8_t types_t;
    struct pair *merges;
    size_t n_merges;
    struct added *add;
    size_t n_add, cap_add;
    struct tab at;        /* added content -> index in add */
    int64_t max_added;    /* -1: none */
    bool has_sp[SP_N];
    struct sv sp[SP_N];   /* bos, eos, unk, pad as the file spells them */
    bool add_bos, add_eos;
    bool has_tmpl;
    struct sv tmpl;       /* tokenizer.chat_template */
};

static int refuse(struct hft *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct hft *h, const char *fmt, ...)
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
static int str_array(struct hft *h, const struct gguf_kv *kv, const char *what,
                     struct sv **out, uint64_t *count)
{
    const struct gguf_file *gf = h->gf;
    unsigned cs = gguf_count_size(&gf->enc);
    if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING)
        return refuse(h, "%s is not an array of strings", what);
    /* each element has at least its length field in the header */
    if (kv->count > (gf->hdr_size - (kv->val_off < gf->hdr_size ? kv->val_off : gf->hdr_size)) / cs ||
        kv->count >= INT32_MAX)
        return refuse(h, "%s has more elements than its bytes can hold", what);
    struct sv *a = malloc((kv->count ? kv->count : 1) * sizeof *a);
    if (!a)
        return -1;
    uint64_t off = kv->val_off;
    for (uint64_t i = 0; i < kv->count; i++) {
        if (off > gf->hdr_size || gf->hdr_size - off < cs) {
            free(a);
            return refuse(h, "%s: element %" PRIu64 " runs past the header", what, i);
        }
        uint64_t len = gguf_rd_count(&gf->enc, gf->hdr + off);
        if (len > gf->hdr_size - off - cs || len > UINT32_MAX) {
            free(a);
            return refuse(h, "%s: element %" PRIu64 " runs past the header", what, i);
        }
        a[i].p = (const char *)gf->hdr + off + cs;
        a[i].n = (uint32_t)len;
        if (!utf8_ok(a[i].p, a[i].n)) {
            free(a);
            return refuse(h, "%s: element %" PRIu64 " is not valid UTF-8 (transformers refuses the file)",
                          what, i);
        }
        off += cs + len;
    }
    *out = a;
    *count = kv->count;
    return 0;
}

/* Element i of a numeric array (validated: fits in the header) as a double. */
static double num_at(const struct gguf_enc *e, uint8_t t, const uint8_t *p)
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
        return num_at(&gf->enc, kv->type, gf->hdr + kv->val_off) != 0;
    }
    return -2;
}

/* GPT-2's byte alphabet: byte b is written as the code point alpha(b). */
static unsigned alpha(unsigned b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))
        return b;
    /* the others, in order, from 256 on */
    unsigned k = b <= 32 ? b : b <= 160 ? 33 + (b - 127) : 67;
    return 256 + k;
}

static bool in_alphabet(uint32_t c)
{
    return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255 + 68);
}

/* The next code point of valid UTF-8 at p (n > 0), and its length. */
static uint32_t utf8_next(const unsigned char *p, unsigned *len)
{
    if (p[0] < 0x80) {
        *len = 1;
        return p[0];
    }
    if (p[0] < 0xe0) {
        *len = 2;
        return ((uint32_t)(p[0] & 0x1f) << 6) | (p[1] & 0x3f);
    }
    if (p[0] < 0xf0) {
        *len = 3;
        return ((uint32_t)(p[0] & 0x0f) << 12) | ((uint32_t)(p[1] & 0x3f) << 6) | (p[2] & 0x3f);
    }
    *len = 4;
    return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3f) << 12) |
           ((uint32_t)(p[2] & 0x3f) << 6) | (p[3] & 0x3f);
}

static size_t put_cp(char *o, uint32_t c)
{
    if (c < 0x80) {
        o[0] = (char)c;
        return 1;
    }
    o[0] = (char)(0xc0 | (c >> 6));
    o[1] = (char)(0x80 | (c & 0x3f));
    return 2;
}

/* Room for every token respelled at most k bytes a byte (h->spell) and
 * the new vocabulary (h->voc): 0, 1 refused (a token too long), -1 out of
 * memory. */
static int spell_alloc(struct hft *h, unsigned k)
{
    size_t total = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        if (h->tok[i].n > UINT32_MAX / k)
            return refuse(h, "token %" PRIu32 " is too long", i);
        total += (size_t)h->tok[i].n * k;
    }
    h->spell = malloc(total ? total : 1);
    h->voc = malloc((h->n ? h->n : 1) * sizeof *h->voc);
    return h->spell && h->voc ? 0 : -1;
}

/* Byte-level: a token spelled only with alphabet characters stays as it is;
 * any other is written byte by byte in the alphabet (at most 2 bytes each). */
static int respell(struct hft *h)
{
    int r = spell_alloc(h, 2);
    if (r)
        return r;
    size_t at = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        const unsigned char *p = (const unsigned char *)h->tok[i].p;
        uint32_t n = h->tok[i].n;
        bool keep = true;
        for (uint32_t k = 0; k < n && keep;) {
            unsigned l;
            keep = in_alphabet(utf8_next(p + k, &l));
            k += l;
        }
        if (keep) {
            h->voc[i] = h->tok[i];
            continue;
        }
        h->voc[i].p = h->spell + at;
        size_t start = at;
        for (uint32_t k = 0; k < n; k++)
            at += put_cp(h->spell + at, alpha(p[k]));
        h->voc[i].n = (uint32_t)(at - start);
    }
    return 0;
}

static bool spelled_in_alphabet(struct sv s)
{
    const unsigned char *p = (const unsigned char *)s.p;
    for (uint32_t k = 0; k < s.n;) {
        unsigned l;
        if (!in_alphabet(utf8_next(p + k, &l)))
            return false;
        k += l;
    }
    return true;
}

/* Python's str.isspace() for one code point. */
static bool py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Gemma-family files store a token of spaces as spaces, which the
 * tokenizer looks up as "▁"s: a token holding a ' ' and nothing but
 * whitespace becomes one "▁" per character (transformers' gemma_tokenizer). */
static int respell_spaces(struct hft *h)
{
    int r = spell_alloc(h, 3);
    if (r)
        return r;
    size_t at = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        const unsigned char *p = (const unsigned char *)h->tok[i].p;
        uint32_t n = h->tok[i].n, chars = 0;
        bool blank = memchr(p, ' ', n) != NULL;
        for (uint32_t k = 0; k < n && blank; chars++) {
            unsigned l;
            blank = py_space(utf8_next(p + k, &l));
            k += l;
        }
        h->voc[i] = h->tok[i];
        if (!blank)
            continue;
        h->voc[i].p = h->spell + at;
        for (uint32_t c = 0; c < chars; c++, at += 3)
            memcpy(h->spell + at, "\xe2\x96\x81", 3);
        h->voc[i].n = chars * 3;
    }
    return 0;
}

/* The vocabulary: voc -> the last index spelling it (a dict built in
 * order, as transformers builds it). */
static int index_vocab(struct hft *h)
{
    if (!tab_init(&h->vt, h->n_model))
        return -1;
    for (uint32_t i = 0; i < h->n_model; i++) {
        struct sv s = h->voc[i];
        uint64_t hh = hash_sv(s.p, s.n);
        struct ent *e = tab_slot(&h->vt, hh, s.p, s.n);
        if (e->v == UINT32_MAX) {
            e->h = hh;
            e->p = s.p;
            e->n = s.n;
            h->vocab_len++;
        }
        e->v = i;
    }
    if (h->t5)
        h->vocab_len = h->n_model;  /* a unigram model counts its entries */
    return 0;
}

/* T5 files call the sentinels "[PAD32099]"...: the first 100 tokens named so
 * become "<extra_id_99>" down to "<extra_id_0>" (transformers'
 * unigram_tokenizer). */
static void t5_sentinels(struct hft *h)
{
    for (int k = 0; k < 100; k++)
        snprintf(h->extra[k], sizeof h->extra[k], "<extra_id_%d>", k);
    int offset = 0;
    for (uint32_t i = 0; i < h->n && offset < 100; i++) {
        struct sv s = h->tok[i];
        if (s.n < 6 || memcmp(s.p, "[PAD", 4) || s.p[s.n - 1] != ']')
            continue;
        bool digits = true;
        for (uint32_t k = 4; k + 1 < s.n && digits; k++)
            digits = s.p[k] >= '0' && s.p[k] <= '9';
        if (!digits)
            continue;
        const char *e = h->extra[99 - offset++];
        h->voc[i] = (struct sv){ e, (uint32_t)strlen(e) };
    }
}

/* The merges of tokenizer.ggml.merges: "LEFT RIGHT", both and their
 * concatenation in the vocabulary. */
static int file_merges(struct hft *h, const struct gguf_kv *kv)
{
    struct sv *m;
    uint64_t n;
    int r = str_array(h, kv, "tokenizer.ggml.merges", &m, &n);
    if (r)
        return r;
    h->merges = malloc((n ? n : 1) * sizeof *h->merges);
    if (!h->merges) {
        free(m);
        return -1;
    }
    for (uint64_t i = 0; i < n; i++) {
        const char *sp = memchr(m[i].p, ' ', m[i].n);
        if (!sp || memchr(sp + 1, ' ', m[i].n - (uint32_t)(sp + 1 - m[i].p))) {
            free(m);
            return refuse(h, "merge %" PRIu64 " is not two tokens separated by one space", i);
        }
        struct sv l = { m[i].p, (uint32_t)(sp - m[i].p) };
        struct sv rr = { sp + 1, m[i].n - l.n - 1 };
        uint64_t pw = 1, hl = hash_more(0, &pw, l.p, l.n);
        uint64_t hlr = hash_more(hl, &pw, rr.p, rr.n);
        if (tab_slot(&h->vt, hl, l.p, l.n)->v == UINT32_MAX ||
            tab_get(&h->vt, rr.p, rr.n) < 0 ||
            tab_slot2(&h->vt, hlr, l.p, l.n, rr.p, rr.n)->v == UINT32_MAX) {
            free(m);
            return refuse(h, "merge %" PRIu64 " uses a token that is not in the vocabulary", i);
        }
        h->merges[i].l = l;
        h->merges[i].r = rr;
    }
    h->n_merges = n;
    free(m);
    return 0;
}

/* A derived merge, with what orders it. */
struct gm {
    struct pair m;
    double score;
    uint32_t ll, lr;      /* the pieces' lengths in characters */
    uint32_t il, ir;      /* the pieces' ids */
    size_t seq;           /* where generate_merges lists it before sorting */
};

static uint32_t n_chars(const char *p, uint32_t n)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < n; i++)
        c += ((unsigned char)p[i] & 0xc0) != 0x80;
    return c;
}

static int by_ids(const void *a, const void *b)
{
    const struct gm *x = a, *y = b;
    if (x->il != y->il)
        return x->il < y->il ? -1 : 1;
    if (x->ir != y->ir)
        return x->ir < y->ir ? -1 : 1;
    return 0;
}

/* Best first: score, then the left piece's length, then the right one's,
 * all descending; equal keys keep their order (Python's stable sort with
 * reverse=True).  A NaN score counts as below every number. */
static int by_score(const void *a, const void *b)
{
    const struct gm *x = a, *y = b;
    bool xn = isnan(x->score), yn = isnan(y->score);
    if (xn != yn)
        return xn ? 1 : -1;
    if (!xn && x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->ll != y->ll)
        return x->ll > y->ll ? -1 : 1;
    if (x->lr != y->lr)
        return x->lr > y->lr ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* transformers' generate_merges(vocab, scores): for each distinct token of
 * dict(zip(tokens, scores)) (first occurrence's place, last one's score),
 * every split at a character boundary into two vocabulary tokens, sorted
 * by the pieces' ids; then all of them best score first.  sc NULL: the
 * score of a token is minus its (last) index (gemma-family files). */
static int derive_merges(struct hft *h, const uint8_t *sc, uint64_t n_sc, uint8_t st)
{
    uint32_t ns = !sc || n_sc >= h->n ? h->n : (uint32_t)n_sc;
    unsigned esz = sc ? gguf_vtype_size(st) : 0;
    struct tab first = { 0 };
    double *score = malloc((ns ? ns : 1) * sizeof *score);
    uint64_t *suf = NULL;
    struct gm *all = NULL;
    size_t n_all = 0, cap_all = 0, longest = 0;
    int ret = -1;
    if (!score || !tab_init(&first, ns))
        goto out;
    for (uint32_t i = 0; i < ns; i++) {
        struct sv s = h->voc[i];
        uint64_t hh = hash_sv(s.p, s.n);
        struct ent *e = tab_slot(&first, hh, s.p, s.n);
        if (e->v == UINT32_MAX) {
            e->h = hh;
            e->p = s.p;
            e->n = s.n;
            e->v = i;
        }
        score[e->v] = sc ? num_at(&h->gf->enc, st, sc + (size_t)i * esz) : -(double)i;
        if (s.n > longest)
            longest = s.n;
    }
    suf = malloc((longest + 1) * sizeof *suf);
    if (!suf)
        goto out;
    for (uint32_t i = 0; i < ns; i++) {
        struct sv s = h->voc[i];
        if (tab_get(&first, s.p, s.n) != i || s.n < 2)
            continue;
        /* suffix hashes, then the prefixes grow one byte at a time */
        suf[s.n] = 0;
        for (uint32_t k = s.n; k-- > 0;)
            suf[k] = madd((unsigned char)s.p[k] + 1u, mmul(HBM, suf[k + 1]));
        uint64_t hp = 0, pw = 1;
        size_t local = n_all;
        for (uint32_t k = 1; k < s.n; k++) {
            hp = hash_more(hp, &pw, s.p + k - 1, 1);
            if (((unsigned char)s.p[k] & 0xc0) == 0x80)
                continue;           /* inside a character */
            struct ent *l = tab_slot(&h->vt, hp, s.p, k);
            if (l->v == UINT32_MAX)
                continue;
            struct ent *r = tab_slot(&h->vt, suf[k], s.p + k, s.n - k);
            if (r->v == UINT32_MAX)
                continue;
            if (n_all == cap_all) {
                size_t nc = cap_all ? cap_all * 2 : 1024;
                struct gm *na = nc <= SIZE_MAX / sizeof *na ? realloc(all, nc * sizeof *na) : NULL;
                if (!na)
                    goto out;
                all = na;
                cap_all = nc;
            }
            struct gm *g = &all[n_all++];
            g->m.l = (struct sv){ s.p, k };
            g->m.r = (struct sv){ s.p + k, s.n - k };
            g->score = score[i];
            g->ll = n_chars(s.p, k);
            g->lr = n_chars(s.p + k, s.n - k);
            g->il = l->v;
            g->ir = r->v;
        }
        if (n_all - local > 1)
            qsort(all + local, n_all - local, sizeof *all, by_ids);
    }
    for (size_t i = 0; i < n_all; i++)
        all[i].seq = i;
    if (n_all > 1)
        qsort(all, n_all, sizeof *all, by_score);
    h->merges = malloc((n_all ? n_all : 1) * sizeof *h->merges);
    if (!h->merges)
        goto out;
    for (size_t i = 0; i < n_all; i++)
        h->merges[i] = all[i].m;
    h->n_merges = n_all;
    ret = 0;
out:
    free(score);
    free(first.e);
    free(suf);
    free(all);
    return ret;
}

/* The id a token has now: an added token's, else the model's; -1 if none. */
static int64_t id_of(const struct hft *h, struct sv s)
{
    int64_t a = tab_get(&h->at, s.p, s.n);
    if (a >= 0)
        return h->add[a].id;
    return tab_get(&h->vt, s.p, s.n);
}

/* Adds a token as the tokenizers library does: nothing for an empty one;
 * an already added one keeps its id and takes the new special flag (when
 * restate: transformers skips the token before it reaches the library
 * otherwise); a new one gets the model's id when the vocabulary has it,
 * else the next id past the vocabulary and the added tokens. */
static int add_token(struct hft *h, struct sv s, bool special, bool restate)
{
    if (s.n == 0)
        return 0;
    uint64_t hh = hash_sv(s.p, s.n);
    struct ent *e = tab_slot(&h->at, hh, s.p, s.n);
    if (e->v != UINT32_MAX) {
        if (restate)
            h->add[e->v].special = special;
        return 0;
    }
    int64_t id = tab_get(&h->vt, s.p, s.n);
    if (id < 0) {
        if (h->max_added < 0 || h->max_added < (int64_t)h->vocab_len)
            id = h->vocab_len;
        else
            id = h->max_added + 1;
    }
    if (id > INT32_MAX)
        return refuse(h, "too many tokens");
    if (h->n_add == h->cap_add) {
        /* the table was sized for every token plus the defaults and specials */
        return refuse(h, "too many added tokens");
    }
    e->h = hh;
    e->p = s.p;
    e->n = s.n;
    e->v = (uint32_t)h->n_add;
    h->add[h->n_add++] = (struct added){ s, (uint32_t)id, special };
    if (id > h->max_added)
        h->max_added = id;
    return 0;
}

static int add_tokens(struct hft *h)
{
    size_t cap = (size_t)h->n + 108;
    h->add = malloc(cap * sizeof *h->add);
    if (!h->add || !tab_init(&h->at, cap))
        return -1;
    h->cap_add = cap;
    h->max_added = -1;
    int r;
    /* the builder class's own special tokens */
    static const char *const spm[] = { "<s>", "</s>", "<unk>" };
    static const char *const bpe[] = { "<|endoftext|>" };
    static const char *const gemma[] = { "<bos>", "<eos>", "<unk>", "<pad>", "<mask>" };
    static const char *const t5[] = { "</s>", "<unk>", "<pad>" };
    const char *const *d = h->bpe ? bpe : h->gemma ? gemma : h->t5 ? t5 : spm;
    size_t nd = h->bpe ? 1 : h->gemma ? 5 : 3;
    for (size_t i = 0; i < nd; i++)
        if ((r = add_token(h, (struct sv){ d[i], (uint32_t)strlen(d[i]) }, true, false)))
            return r;
    for (int k = 0; h->t5 && k < 100; k++)   /* T5Tokenizer's extra ids */
        if ((r = add_token(h, (struct sv){ h->extra[k], (uint32_t)strlen(h->extra[k]) }, true, false)))
            return r;
    /* CONTROL, then USER_DEFINED; token types as far as both arrays go */
    uint64_t nt = h->types ? (h->n_types < h->n ? h->n_types : h->n) : 0;
    unsigned esz = h->types ? gguf_vtype_size(h->types_t) : 0;
    for (uint64_t i = 0; i < nt; i++) {
        double t = num_at(&h->gf->enc, h->types_t, h->types + i * esz);
        if (t == 3 && (!h->bpe || spelled_in_alphabet(h->tok[i])))
            if ((r = add_token(h, h->tok[i], true, true)))
                return r;
    }
    for (uint64_t i = 0; i < nt; i++) {
        double t = num_at(&h->gf->enc, h->types_t, h->types + i * esz);
        if (t == 4 && id_of(h, h->tok[i]) >= 0)
            if ((r = add_token(h, h->tok[i], false, true)))
                return r;
    }
    /* the model's bos, eos, unk, pad */
    for (int k = 0; k < SP_N; k++)
        if (h->has_sp[k] && (r = add_token(h, h->sp[k], true, false)))
            return r;
    if (h->gemma_outer)
        return add_token(h, (struct sv){ "<mask>", 6 }, true, false);
    return 0;
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
        return refuse(h, "no tokenizer.ggml.model: the file has no tokenizer");
    if (!kv_str(gf, kv, &model) || !utf8_ok(model.p, model.n))
        return refuse(h, "tokenizer.ggml.model is not a UTF-8 string");
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
        return refuse(h, "tokenizer.ggml.model '%.*s' is not supported (llama, gpt2, gemma4 and t5 are)",
                      (int)(model.n > 64 ? 64 : model.n), model.p);
    }
    if ((kv = kv_get(gf, "tokenizer.ggml.pre"))) {
        if (!kv_str(gf, kv, &s) || !utf8_ok(s.p, s.n))
            return refuse(h, "tokenizer.ggml.pre is not a UTF-8 string");
        for (size_t i = 0; h->bpe && i < sizeof pre_splits / sizeof *pre_splits; i++)
            if (sv_is(s, pre_splits[i].name))
                h->split = pre_splits[i].split;
    }
    if (!(kv = kv_get(gf, "tokenizer.ggml.tokens")))
        return refuse(h, "no tokenizer.ggml.tokens: the file has no vocabulary");
    uint64_t n;
    int r = str_array(h, kv, "tokenizer.ggml.tokens", &h->tok, &n);
    if (r)
        return r;
    h->n = h->n_model = (uint32_t)n;
    if (h->bpe) {
        if ((r = respell(h)))
            return r;
    } else if (h->gemma_spaces) {
        if ((r = respell_spaces(h)))
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
            return refuse(h, "a unigram vocabulary without tokenizer.ggml.scores");
        if (!num_array(gf, kv, &h->scores, &n_sc, &h->scores_t))
            return refuse(h, "tokenizer.ggml.scores is not an array of numbers");
        if (n_sc < h->n)
            h->n_model = (uint32_t)n_sc;
        unsigned esz = gguf_vtype_size(h->scores_t);
        for (uint32_t i = 0; i < h->n_model; i++)
            if (!isfinite(num_at(&gf->enc, h->scores_t, h->scores + (size_t)i * esz)))
                return refuse(h, "score %" PRIu32 " is not a finite number", i);
        if (h->n_model < 3)
            return refuse(h, "a unigram vocabulary of fewer than 3 tokens (its unknown token is id 2)");
        t5_sentinels(h);
    }
    if ((r = index_vocab(h)))
        return r;
    if ((kv = kv_get(gf, "tokenizer.ggml.token_type"))) {
        if (!num_array(gf, kv, &h->types, &h->n_types, &h->types_t))
            return refuse(h, "tokenizer.ggml.token_type is not an array of numbers");
    }
    if (h->t5) {
        /* no merges */
    } else if ((kv = kv_get(gf, "tokenizer.ggml.merges"))) {
        if ((r = file_merges(h, kv)))
            return r;
    } else if (h->bpe) {
        return refuse(h, "a byte-level vocabulary without tokenizer.ggml.merges is not generated");
    } else {
        const uint8_t *sc = NULL;
        uint64_t n_sc = 0;
        uint8_t st = 0;
        /* gemma-family merges are ordered by place: no scores needed */
        if (!h->gemma_spaces) {
            if (!(kv = kv_get(gf, "tokenizer.ggml.scores")))
                return refuse(h, "neither tokenizer.ggml.merges nor tokenizer.ggml.scores");
            if (!num_array(gf, kv, &sc, &n_sc, &st))
                return refuse(h, "tokenizer.ggml.scores is not an array of numbers");
        }
        if ((r = derive_merges(h, sc, n_sc, st)))
            return r;
    }
    for (int k = 0; k < SP_N; k++) {
        if (!kv_get(gf, sp_key[k]))
            continue;
        int64_t id;
        if (!gguf_key_int(gf, sp_key[k], &id))
            return refuse(h, "%s is not an integer", sp_key[k]);
        if (id < 0 && id >= -(int64_t)h->n)
            id += h->n;             /* a Python list index */
        if (id < 0 || id >= (int64_t)h->n)
            return refuse(h, "%s %" PRId64 " is outside the vocabulary", sp_key[k], id);
        h->has_sp[k] = true;
        h->sp[k] = h->tok[id];
    }
    int f = kv_flag(gf, "tokenizer.ggml.add_bos_token");
    if (f == -2)
        return refuse(h, "tokenizer.ggml.add_bos_token is not a bool");
    h->add_bos = f == 1 || (f == -1 && !h->bpe && !h->t5);
    if (sv_is(model, "gemma4"))
        h->add_bos = false;         /* its chat template writes <bos> */
    if ((f = kv_flag(gf, "tokenizer.ggml.add_eos_token")) == -2)
        return refuse(h, "tokenizer.ggml.add_eos_token is not a bool");
    h->add_eos = f == 1;
    /* as transformers' post-processor: no bos/eos to add without the token */
    h->add_bos = h->add_bos && h->has_sp[SP_BOS];
    h->add_eos = h->add_eos && h->has_sp[SP_EOS];
    if ((kv = kv_get(gf, "tokenizer.chat_template"))) {
        if (!kv_str(gf, kv, &h->tmpl) || !utf8_ok(h->tmpl.p, h->tmpl.n))
            return refuse(h, "tokenizer.chat_template is not a UTF-8 string");
        h->has_tmpl = true;
    }
    return add_tokens(h);
}

/* ---- JSON --------------------------------------------------------------- */

/* A JSON string: '"', '\' and control characters escaped, valid UTF-8 as
 * it is, any byte that does not start a valid sequence as U+FFFD. */
static void jstr(struct gguf_buf *o, const char *p, size_t n)
{
    gguf_buf_putc(o, '"');
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && (unsigned char)p[j] >= 0x20 && (unsigned char)p[j] < 0x80 && p[j] != '"' &&
               p[j] != '\\')
            j++;
        gguf_buf_put(o, p + i, j - i);
        i = j;
        if (i >= n)
            break;
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x80) {
            size_t v = gguf_utf8_valid(p + i, n - i < 4 ? n - i : 4, NULL);
            unsigned l = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
            if (v >= l) {
                gguf_buf_put(o, p + i, l);
                i += l;
            } else {
                gguf_buf_put(o, "\\ufffd", 6);
                i++;
            }
            continue;
        }
        i++;
        switch (c) {
        case '"': gguf_buf_put(o, "\\\"", 2); break;
        case '\\': gguf_buf_put(o, "\\\\", 2); break;
        case '\n': gguf_buf_put(o, "\\n", 2); break;
        case '\r': gguf_buf_put(o, "\\r", 2); break;
        case '\t': gguf_buf_put(o, "\\t", 2); break;
        default: gguf_buf_printf(o, "\\u%04x", c); break;
        }
    }
    gguf_buf_putc(o, '"');
}

static void jsv(struct gguf_buf *o, struct sv s)
{
    jstr(o, s.p, s.n);
}

static void jc(struct gguf_buf *o, const char *s)
{
    gguf_buf_put(o, s, strlen(s));
}

static int by_id(const void *a, const void *b)
{
    const struct added *x = *(const struct added *const *)a, *y = *(const struct added *const *)b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* A TemplateProcessing piece. */
static void tp_special(struct gguf_buf *o, struct sv s, int type_id)
{
    jc(o, "{\"SpecialToken\":{\"id\":");
    jsv(o, s);
    gguf_buf_printf(o, ",\"type_id\":%d}}", type_id);
}

/* One sequence of a template: its bos and eos as the model adds them,
 * around sequence id (A or B) of type type_id. */
static void tp_sequence(struct gguf_buf *o, const struct hft *h, char id, int type_id)
{
    if (h->add_bos) {
        tp_special(o, h->sp[SP_BOS], type_id);
        jc(o, ",");
    }
    gguf_buf_printf(o, "{\"Sequence\":{\"id\":\"%c\",\"type_id\":%d}}", id, type_id);
    if (h->add_eos) {
        jc(o, ",");
        tp_special(o, h->sp[SP_EOS], type_id);
    }
}

static void post_processor(struct gguf_buf *o, const struct hft *h)
{
    jc(o, "{\"type\":\"TemplateProcessing\",\"single\":[");
    tp_sequence(o, h, 'A', 0);
    jc(o, "],\"pair\":[");
    tp_sequence(o, h, 'A', 0);
    jc(o, ",");
    tp_sequence(o, h, 'B', 1);
    jc(o, "],\"special_tokens\":{");
    bool first = true;
    for (int k = SP_BOS; k <= SP_EOS; k++) {
        if (!(k == SP_BOS ? h->add_bos : h->add_eos))
            continue;
        if (k == SP_EOS && h->add_bos && h->sp[SP_EOS].n == h->sp[SP_BOS].n &&
            !memcmp(h->sp[SP_EOS].p, h->sp[SP_BOS].p, h->sp[SP_BOS].n))
            continue;           /* one entry per token */
        if (!first)
            jc(o, ",");
        first = false;
        jsv(o, h->sp[k]);
        jc(o, ":{\"id\":");
        jsv(o, h->sp[k]);
        gguf_buf_printf(o, ",\"ids\":[%" PRId64 "],\"tokens\":[", id_of(h, h->sp[k]));
        jsv(o, h->sp[k]);
        jc(o, "]}");
    }
    jc(o, "}}");
}

static int emit_tokenizer(struct gguf_buf *o, const struct hft *h)
{
    jc(o, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
    const struct added **ord = malloc((h->n_add ? h->n_add : 1) * sizeof *ord);
    if (!ord)
        return -1;
    for (size_t i = 0; i < h->n_add; i++)
        ord[i] = &h->add[i];
    qsort(ord, h->n_add, sizeof *ord, by_id);
    for (size_t i = 0; i < h->n_add; i++) {
        gguf_buf_printf(o, "%s\n{\"id\":%" PRIu32 ",\"content\":", i ? "," : "", ord[i]->id);
        jsv(o, ord[i]->s);
        gguf_buf_printf(o, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                           "\"normalized\":false,\"special\":%s}",
                        ord[i]->special ? "true" : "false");
    }
    free(ord);
    jc(o, "],\n\"normalizer\":");
    if (h->gemma)
        jc(o, "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}");
    else if (h->phi3)
        jc(o, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\u2581\"},"
              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}]}");
    else
        jc(o, "null");
    jc(o, ",\n\"pre_tokenizer\":");
    if (h->t5) {
        jc(o, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":"
              "\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"always\",\"split\":true}]}");
    } else if (h->gemma) {
        jc(o, "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\","
              "\"invert\":false}");
    } else if (!h->bpe) {
        jc(o, h->phi3 ? "null"
                      : "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"first\","
                        "\"split\":false}");
    } else if (h->split) {
        jc(o, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":");
        jstr(o, h->split, strlen(h->split));
        jc(o, "},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
              "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}");
    } else {
        jc(o, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}");
    }
    jc(o, ",\n\"post_processor\":");
    post_processor(o, h);
    jc(o, ",\n\"decoder\":");
    if (h->t5)
        jc(o, "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"always\",\"split\":true}");
    else if (h->bpe)
        jc(o, "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}");
    else
        jc(o, h->gemma ? "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
                         "\"\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}"
                       : "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
                         "\"\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
                         "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}");
    if (h->t5) {
        jc(o, ",\n\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"byte_fallback\":false,\"vocab\":[");
        unsigned esz = gguf_vtype_size(h->scores_t);
        for (uint32_t i = 0; i < h->n_model; i++) {
            jc(o, i ? ",\n[" : "\n[");
            jsv(o, h->voc[i]);
            gguf_buf_printf(o, ",%.17g]", num_at(&h->gf->enc, h->scores_t, h->scores + (size_t)i * esz));
            if (o->oom)
                return -1;
        }
        jc(o, "]}}\n");
        return o->oom ? -1 : 0;
    }
    jc(o, h->gemma ? ",\n\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\","
                   : ",\n\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,");
    if (h->bpe)
        jc(o, "\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\",\"fuse_unk\":false,"
              "\"byte_fallback\":false,");
    else
        jc(o, "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,"
              "\"byte_fallback\":true,");
    jc(o, "\"ignore_merges\":false,\"vocab\":{");
    bool first = true;
    for (uint32_t i = 0; i < h->n; i++) {
        if (tab_get(&h->vt, h->voc[i].p, h->voc[i].n) != i)
            continue;               /* a later token spells it the same */
        if (!first)
            gguf_buf_putc(o, ',');
        first = false;
        gguf_buf_putc(o, '\n');
        jsv(o, h->voc[i]);
        gguf_buf_printf(o, ":%" PRIu32, i);
        if (o->oom)
            return -1;
    }
    jc(o, "},\"merges\":[");
    for (size_t i = 0; i < h->n_merges; i++) {
        jc(o, i ? ",\n[" : "\n[");
        jsv(o, h->merges[i].l);
        gguf_buf_putc(o, ',');
        jsv(o, h->merges[i].r);
        gguf_buf_putc(o, ']');
        if (o->oom)
            return -1;
    }
    jc(o, "]}}\n");
    return o->oom ? -1 : 0;
}

static void cfg_token(struct gguf_buf *o, const struct hft *h, int k)
{
    gguf_buf_printf(o, "  \"%s\": ", sp_name[k]);
    if (h->has_sp[k])
        jsv(o, h->sp[k]);
    else
        jc(o, "null");
    jc(o, ",\n");
}

static int emit_config(struct gguf_buf *o, const struct hft *h)
{
    gguf_buf_printf(o, "{\n  \"add_bos_token\": %s,\n  \"add_eos_token\": %s,\n"
                       "  \"backend\": \"tokenizers\",\n",
                    h->add_bos ? "true" : "false", h->add_eos ? "true" : "false");
    cfg_token(o, h, SP_BOS);
    if (h->has_tmpl) {
        jc(o, "  \"chat_template\": ");
        jsv(o, h->tmpl);
        jc(o, ",\n");
    }
    jc(o, "  \"clean_up_tokenization_spaces\": false,\n");
    cfg_token(o, h, SP_EOS);
    if (h->t5) {
        /* T5Tokenizer names its sentinels as extra special tokens */
        jc(o, "  \"extra_special_tokens\": [");
        for (int k = 0; k < 100; k++)
            gguf_buf_printf(o, "%s\"%s\"", k ? ", " : "", h->extra[k]);
        jc(o, "],\n");
    }
    if (h->gemma_outer)
        jc(o, "  \"mask_token\": \"<mask>\",\n");
    cfg_token(o, h, SP_PAD);
    jc(o, "  \"tokenizer_class\": \"TokenizersBackend\",\n");
    gguf_buf_printf(o, "  \"unk_token\": ");
    if (h->has_sp[SP_UNK])
        jsv(o, h->sp[SP_UNK]);
    else
        jc(o, "null");
    jc(o, "\n}\n");
    return o->oom ? -1 : 0;
}

static int run(const struct gguf_file *gf, struct gguf_buf *out, char *why, size_t whylen, bool config)
{
    struct hft h = { .gf = gf, .why = why, .whylen = whylen };
    if (why && whylen)
        why[0] = '\0';
    int r = analyse(&h);
    if (r == 0)
        r = config ? emit_config(out, &h) : emit_tokenizer(out, &h);
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

/*
 * gguf/hf_tokenizer_vocab.c — the tokenizer's vocabulary, merges and added
 * tokens (for hf_tokenizer.c; see hf_tokenizer_impl.h): the tokens
 * respelled as the vocabulary spells them, indexed by a hash table, the
 * merges read from the file or derived as transformers derives them, the
 * added tokens given ids in transformers' order.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hf_tokenizer_impl.h"

__extension__ typedef unsigned __int128 u128;

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
int64_t hft_tab_get(const struct tab *t, const char *p, uint32_t n)
{
    struct ent *e = tab_slot(t, hash_sv(p, n), p, n);
    return e->v == UINT32_MAX ? -1 : (int64_t)e->v;
}

/* ---- the vocabulary, its merges and added tokens ------------------------ */

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
            return hft_refuse(h, "token %" PRIu32 " is too long", i);
        total += (size_t)h->tok[i].n * k;
    }
    h->spell = malloc(total ? total : 1);
    h->voc = malloc((h->n ? h->n : 1) * sizeof *h->voc);
    return h->spell && h->voc ? 0 : -1;
}

/* Byte-level: a token spelled only with alphabet characters stays as it is;
 * any other is written byte by byte in the alphabet (at most 2 bytes each). */
int hft_respell(struct hft *h)
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
int hft_respell_spaces(struct hft *h)
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
int hft_index_vocab(struct hft *h)
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
void hft_t5_sentinels(struct hft *h)
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
int hft_file_merges(struct hft *h, const struct gguf_kv *kv)
{
    struct sv *m;
    uint64_t n;
    int r = hft_str_array(h, kv, "tokenizer.ggml.merges", &m, &n);
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
            return hft_refuse(h, "merge %" PRIu64 " is not two tokens separated by one space", i);
        }
        struct sv l = { m[i].p, (uint32_t)(sp - m[i].p) };
        struct sv rr = { sp + 1, m[i].n - l.n - 1 };
        uint64_t pw = 1, hl = hash_more(0, &pw, l.p, l.n);
        uint64_t hlr = hash_more(hl, &pw, rr.p, rr.n);
        if (tab_slot(&h->vt, hl, l.p, l.n)->v == UINT32_MAX ||
            hft_tab_get(&h->vt, rr.p, rr.n) < 0 ||
            tab_slot2(&h->vt, hlr, l.p, l.n, rr.p, rr.n)->v == UINT32_MAX) {
            free(m);
            return hft_refuse(h, "merge %" PRIu64 " uses a token that is not in the vocabulary", i);
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
int hft_derive_merges(struct hft *h, const uint8_t *sc, uint64_t n_sc, uint8_t st)
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
        score[e->v] = sc ? hft_num_at(&h->gf->enc, st, sc + (size_t)i * esz) : -(double)i;
        if (s.n > longest)
            longest = s.n;
    }
    suf = malloc((longest + 1) * sizeof *suf);
    if (!suf)
        goto out;
    for (uint32_t i = 0; i < ns; i++) {
        struct sv s = h->voc[i];
        if (hft_tab_get(&first, s.p, s.n) != i || s.n < 2)
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
int64_t hft_id_of(const struct hft *h, struct sv s)
{
    int64_t a = hft_tab_get(&h->at, s.p, s.n);
    if (a >= 0)
        return h->add[a].id;
    return hft_tab_get(&h->vt, s.p, s.n);
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
    int64_t id = hft_tab_get(&h->vt, s.p, s.n);
    if (id < 0) {
        if (h->max_added < 0 || h->max_added < (int64_t)h->vocab_len)
            id = h->vocab_len;
        else
            id = h->max_added + 1;
    }
    if (id > INT32_MAX)
        return hft_refuse(h, "too many tokens");
    if (h->n_add == h->cap_add) {
        /* the table was sized for every token plus the defaults and specials */
        return hft_refuse(h, "too many added tokens");
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

int hft_add_tokens(struct hft *h)
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
        double t = hft_num_at(&h->gf->enc, h->types_t, h->types + i * esz);
        if (t == 3 && (!h->bpe || spelled_in_alphabet(h->tok[i])))
            if ((r = add_token(h, h->tok[i], true, true)))
                return r;
    }
    for (uint64_t i = 0; i < nt; i++) {
        double t = hft_num_at(&h->gf->enc, h->types_t, h->types + i * esz);
        if (t == 4 && hft_id_of(h, h->tok[i]) >= 0)
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

/*
 * gguf/split.c — models split into shards, opened as one (see split.h).
 *
 * gguf_split_open: open and parse the named shard; if it is part of a
 * split model, open every other shard's source (all of them first, so an
 * opener can start them in parallel), parse each, then check them
 * together.  Tensor names across shards are checked with a name table
 * (ntab.h) over the global tensor index j, which counts shard by shard.
 */
#include "header.h"
#include "ntab.h"
#include "split.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TAIL "-00000-of-00000.gguf"
#define TAIL_LEN (sizeof TAIL - 1)

/* ---- names ------------------------------------------------------------------- */

static bool five_digits(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 5; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        *v = *v * 10 + (unsigned)(p[i] - '0');
    }
    return true;
}

bool gguf_split_name_parse(const char *name, size_t *prefix_len, unsigned *no,
                           unsigned *count)
{
    size_t n = strlen(name);
    if (n < TAIL_LEN)
        return false;
    const char *p = name + n - TAIL_LEN;
    if (p[0] != '-' || memcmp(p + 6, "-of-", 4) != 0 || memcmp(p + 15, ".gguf", 5) != 0 ||
        !five_digits(p + 1, no) || !five_digits(p + 10, count))
        return false;
    *prefix_len = (size_t)(p - name);
    return true;
}

char *gguf_split_name(const char *prefix, size_t prefix_len, unsigned no,
                      unsigned count)
{
    if (prefix_len > SIZE_MAX - TAIL_LEN - 1)
        return NULL;
    char *s = malloc(prefix_len + TAIL_LEN + 1);
    if (s) {
        memcpy(s, prefix, prefix_len);
        snprintf(s + prefix_len, TAIL_LEN + 1, "-%05u-of-%05u.gguf", no % 100000,
                 count % 100000);
    }
    return s;
}

/* ---- opening ------------------------------------------------------------------- */

enum gguf_err gguf_split_open_file(void *ctx, const char *name,
                                   struct gguf_source **out, struct gguf_diag *d)
{
    (void)ctx;
    enum gguf_err e = gguf_source_file(name, out, d);
    struct stat st;
    if (e == GGUF_E_IO && lstat(name, &st) != 0 && errno == ENOENT)
        e = GGUF_E_NOENT;
    return e;
}

void gguf_split_close(struct gguf_split *s)
{
    if (!s)
        return;
    for (unsigned i = 0; s->shards && i < s->n; i++) {
        gguf_close(s->shards[i].gf);
        gguf_source_close(s->shards[i].src);
        free(s->shards[i].name);
    }
    free(s->shards);
    free(s);
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

/* Prefixes d's message with "NAME: " (a diag about another shard). */
static enum gguf_err about(const struct gguf_split *s, unsigned k, enum gguf_err e,
                           struct gguf_diag *d)
{
    if (d && k != s->given) {
        char msg[2 * sizeof d->msg];
        snprintf(msg, sizeof msg, "%s: %s", s->shards[k].name, d->msg);
        memcpy(d->msg, msg, sizeof d->msg - 1);    /* cut to fit */
        d->msg[sizeof d->msg - 1] = '\0';
    }
    return e;
}

/* Opens and parses the shard named name as shard k (the name is taken). */
static enum gguf_err open_source(struct gguf_split *s, unsigned k, char *name,
                                 gguf_split_opener open, void *ctx, struct gguf_diag *d)
{
    s->shards[k].name = name;
    enum gguf_err e = open(ctx, name, &s->shards[k].src, d);
    if (e == GGUF_E_NOENT && k != s->given)
        return gguf_diag_set(d, e, UINT64_MAX, "shard %u of %u is missing: %s", k + 1,
                             s->n, name);
    return e ? about(s, k, e, d) : GGUF_OK;
}

static enum gguf_err parse_shard(struct gguf_split *s, unsigned k, struct gguf_diag *d)
{
    enum gguf_err e = gguf_open_source(s->shards[k].src, &s->shards[k].gf, d);
    return e ? about(s, k, e, d) : GGUF_OK;
}

/* The given shard (parsed) says the model has count shards and it is shard
 * no: the name must agree. */
static enum gguf_err check_given(const struct gguf_file *gf, const char *name,
                                 int64_t count, size_t *plen, struct gguf_diag *d)
{
    int64_t no = 0;
    unsigned fno, fcount;
    if (count > GGUF_SPLIT_MAX || !gguf_key_int(gf, "split.no", &no) ||
        !gguf_split_name_parse(name, plen, &fno, &fcount) || fcount != count ||
        fno != no + 1 || fno < 1 || fno > fcount)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "split.count is %lld but the "
                             "file is not named PREFIX-%05lld-of-%05lld.gguf with a "
                             "matching split.no", (long long)count, (long long)no + 1,
                             (long long)count);
    return GGUF_OK;
}

/* ---- checking the shards together ------------------------------------------------- */

/* Tensor j (counting shard by shard) in the name table's terms. */
struct tensors {
    const struct gguf_split *s;
    const uint64_t *first;       /* first[k]: j of shard k's first tensor */
};

static unsigned shard_of(const struct tensors *t, uint64_t j)
{
    unsigned lo = 0, hi = t->s->n - 1;
    while (lo < hi) {        /* the last shard whose first tensor is <= j */
        unsigned mid = (lo + hi + 1) / 2;
        if (t->first[mid] <= j)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static const void *tensor_name(const void *ctx, uint64_t j, size_t *len)
{
    const struct tensors *t = ctx;
    unsigned k = shard_of(t, j);
    const struct gguf_file *f = t->s->shards[k].gf;
    const struct gguf_tensor *x = &f->tensors[j - t->first[k]];
    *len = x->name_len;
    return f->hdr + x->name_off;
}

/* No tensor name in two shards (within one, the parser refused it). */
static enum gguf_err check_names(struct gguf_split *s, struct gguf_diag *d)
{
    uint64_t *first = malloc(s->n * sizeof *first);
    struct tensors t = { s, first };
    struct gguf_ntab tab = { 0 };
    enum gguf_err e = first ? gguf_ntab_init(&tab, s->n_tensors, tensor_name, &t)
                            : GGUF_E_NOMEM;
    uint64_t at = 0;
    for (unsigned k = 0; !e && k < s->n; k++) {
        first[k] = at;
        at += s->shards[k].gf->n_tensors;
    }
    for (uint64_t j = 0, prev; !e && j < s->n_tensors; j++) {
        if ((e = gguf_ntab_add(&tab, j, &prev)) != GGUF_E_EXIST)
            continue;
        unsigned k = shard_of(&t, j), pk = shard_of(&t, prev);
        const struct gguf_tensor *x = &s->shards[k].gf->tensors[j - first[k]];
        char nb[GGUF_DIAG_NAME_MAX];
        gguf_diag_set(d, GGUF_E_DUP, x->info_off, "tensor name '%s' occurs in two "
                      "shards (%u and %u)", gguf_diag_name(s->shards[k].gf->hdr +
                      x->name_off, x->name_len, nb), pk + 1, k + 1);
        e = about(s, k, GGUF_E_DUP, d);
    }
    if (e == GGUF_E_NOMEM)
        gguf_diag_set(d, e, UINT64_MAX, "out of memory");
    gguf_ntab_free(&tab);
    free(first);
    return e;
}

static enum gguf_err check_shards(struct gguf_split *s, struct gguf_diag *d)
{
    const struct gguf_file *f0 = s->shards[0].gf;
    s->n_tensors = 0;
    for (unsigned k = 0; k < s->n; k++) {
        const struct gguf_file *f = s->shards[k].gf;
        int64_t c, no;
        if (!gguf_key_int(f, "split.count", &c) || !gguf_key_int(f, "split.no", &no) ||
            c != s->n || no != k)
            return about(s, k, gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "does not "
                         "belong to this split model (split.no/split.count should "
                         "be %u/%u)", k, s->n), d);
        if (f->version != f0->version || f->enc.big_endian != f0->enc.big_endian)
            return about(s, k, gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "GGUF "
                         "version or byte order differs from the first shard"), d);
        s->n_tensors += f->n_tensors;
    }
    int64_t want;
    if (gguf_key_int(f0, "split.tensors.count", &want) && (uint64_t)want != s->n_tensors)
        return about(s, 0, gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "split.tensors."
                     "count is %lld but the shards hold %llu tensors", (long long)want,
                     (unsigned long long)s->n_tensors), d);
    return check_names(s, d);
}

/* ---- gguf_split_open ------------------------------------------------------------------ */

/* The other shards of a split model whose shard s->given is open: their
 * sources, then their indexes, then the checks. */
static enum gguf_err open_rest(struct gguf_split *s, const char *name, size_t plen,
                               gguf_split_opener open, void *ctx, struct gguf_diag *d)
{
    enum gguf_err e = GGUF_OK;
    for (unsigned k = 0; !e && k < s->n; k++) {
        if (k == s->given)
            continue;
        char *nk = gguf_split_name(name, plen, k + 1, s->n);
        e = nk ? open_source(s, k, nk, open, ctx, d)
               : gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    for (unsigned k = 0; !e && k < s->n; k++)
        if (k != s->given)
            e = parse_shard(s, k, d);
    return e ? e : check_shards(s, d);
}

enum gguf_err gguf_split_open(const char *name, gguf_split_opener open, void *ctx,
                              struct gguf_split **out, struct gguf_diag *d)
{
    struct gguf_diag scratch;
    if (!d)
        d = &scratch;
    *out = NULL;
    struct gguf_split *s = calloc(1, sizeof *s);
    char *given = dup_str(name);
    if (s)
        s->shards = calloc(1, sizeof *s->shards);
    if (!s || !given || !s->shards) {
        free(given);
        gguf_split_close(s);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    s->n = 1;
    enum gguf_err e = open_source(s, 0, given, open, ctx, d);
    if (!e)
        e = parse_shard(s, 0, d);
    int64_t count;
    size_t plen;
    if (!e && gguf_key_int(s->shards[0].gf, "split.count", &count) && count > 1 &&
        !(e = check_given(s->shards[0].gf, name, count, &plen, d))) {
        /* shard 0 is the named one, wherever it goes */
        struct gguf_shard named = s->shards[0];
        struct gguf_shard *all = calloc((size_t)count, sizeof *all);
        if (!all) {
            e = gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
        } else {
            int64_t no;
            gguf_key_int(named.gf, "split.no", &no);
            free(s->shards);
            s->shards = all;
            s->n = (unsigned)count;
            s->given = (unsigned)no;
            s->shards[s->given] = named;
            e = open_rest(s, name, plen, open, ctx, d);
        }
    } else if (!e) {
        s->n_tensors = s->shards[0].gf->n_tensors;
    }
    if (e) {
        gguf_split_close(s);
        return e;
    }
    *out = s;
    return GGUF_OK;
}

/* ---- the merged header ------------------------------------------------------------ */

/* A key the merged file drops: split.* of a model of several shards (a
 * single file, merged only to upgrade version 1, keeps all its keys). */
static bool is_split_key(const struct gguf_split *s, const struct gguf_file *f,
                         const struct gguf_kv *kv)
{
    return s->n > 1 && kv->key_len >= 6 && memcmp(f->hdr + kv->key_off, "split.", 6) == 0;
}

enum gguf_err gguf_split_merge(const struct gguf_split *s, struct gguf_merged *m,
                               struct gguf_diag *d)
{
    const struct gguf_file *f0 = s->shards[0].gf;
    /* version 1 (which ggml no longer reads) is served as version 3, in the
     * same byte order: counts and lengths widened to 64 bits */
    struct gguf_enc enc = { .big_endian = f0->enc.big_endian, .v1 = false };
    const struct gguf_enc *e = &enc;
    uint32_t version = f0->enc.v1 ? 3 : f0->version;
    uint64_t align = f0->alignment, n_kv = 0, pos = 0;
    memset(m, 0, sizeof *m);
    m->n_tensors = s->n_tensors;
    m->offset = calloc(s->n_tensors ? s->n_tensors : 1, sizeof *m->offset);
    if (!m->offset)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    for (uint64_t i = 0; i < f0->n_kv; i++)
        n_kv += !is_split_key(s, f0, &f0->kv[i]);
    gguf_put_preamble(&m->hdr, e, version, s->n_tensors, n_kv);
    for (uint64_t i = 0; i < f0->n_kv; i++) {
        if (is_split_key(s, f0, &f0->kv[i]))
            continue;
        struct gguf_newkv kv = gguf_newkv_of(f0, i);
        if (!gguf_put_kv_as(&m->hdr, e, &f0->enc, &kv) && !m->hdr.oom) {
            gguf_merged_free(m);
            return gguf_diag_set(d, GGUF_E_INVAL, f0->kv[i].rec_off,
                                 "key/value %llu cannot be re-encoded",
                                 (unsigned long long)i);
        }
    }
    uint64_t j = 0;
    for (unsigned k = 0; k < s->n; k++) {
        const struct gguf_file *f = s->shards[k].gf;
        for (uint64_t i = 0; i < f->n_tensors; i++, j++) {
            gguf_put_tensor_info(&m->hdr, e, f->hdr, &f->tensors[i], pos);
            m->offset[j] = pos;
            pos += f->tensors[i].nbytes;
            pos += (align - pos % align) % align;
        }
    }
    /* a model without tensors ends with its header, as converters write
     * vocabulary files (and as the file itself does) */
    if (s->n_tensors && !gguf_put_padding(&m->hdr, align)) {
        gguf_merged_free(m);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    if (m->hdr.oom) {
        gguf_merged_free(m);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    m->size = m->hdr.len + pos;
    return GGUF_OK;
}

void gguf_merged_free(struct gguf_merged *m)
{
    gguf_buf_free(&m->hdr);
    free(m->offset);
    m->offset = NULL;
}

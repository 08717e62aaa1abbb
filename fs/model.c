/*
 * fs/model.c — opening a model that may be split into shards, and the
 * merged header of MOUNTPOINT/model.gguf.
 *
 * Split models follow llama.cpp's gguf-split convention: files named
 * PREFIX-00001-of-00004.gguf ... with keys split.no (0-based), split.count
 * and, in the first shard, split.tensors.count.  Metadata lives in the
 * first shard.  Mounting any shard mounts the whole model: every shard is
 * opened and checked (present, numbered, counted consistently, no tensor
 * name twice) before anything is mounted.
 *
 * model.gguf is the model as one GGUF file, as it is now.  For a single
 * file that is the file itself.  For a split model it is generated: the
 * first shard's key/values without split.*, every tensor info with offsets
 * of a contiguous layout, then the tensor bytes read through from the
 * shards — nothing is copied.
 */
#include "fs.h"

#include "gguf/edit.h"
#include "gguf/types.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static enum gguf_err fail(struct gguf_diag *d, enum gguf_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static enum gguf_err fail(struct gguf_diag *d, enum gguf_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    d->offset = UINT64_MAX;
    return e;
}

/* An integer key of any integer type; false if absent or not an integer. */
static bool int_key(const struct gguf_file *f, const char *key, int64_t *out)
{
    int64_t i = gguf_find_key(f, key, strlen(key));
    if (i < 0)
        return false;
    const struct gguf_kv *kv = &f->kv[i];
    const uint8_t *p = f->hdr + kv->val_off;
    switch (kv->type) {
    case GGUF_U8: *out = p[0]; return true;
    case GGUF_I8: *out = (int8_t)p[0]; return true;
    case GGUF_U16: *out = gguf_rd16(&f->enc, p); return true;
    case GGUF_I16: *out = (int16_t)gguf_rd16(&f->enc, p); return true;
    case GGUF_U32: *out = gguf_rd32(&f->enc, p); return true;
    case GGUF_I32: *out = (int32_t)gguf_rd32(&f->enc, p); return true;
    case GGUF_U64: case GGUF_I64: *out = (int64_t)gguf_rd64(&f->enc, p); return true;
    default: return false;
    }
}

/* Opens and indexes one file; the diag names it when it is not the model
 * the user gave (given). */
static enum gguf_err open_one(const char *path, const char *given, struct shard *s,
                              struct gguf_diag *d)
{
    enum gguf_err e = gguf_source_file(path, &s->src, d);
    if (!e) {
        e = gguf_open_source(s->src, &s->gf, d);
        /* Tensor reads are mostly long sequential runs: a larger readahead
         * window keeps the disk busy while FUSE replies. */
        if (!e && s->src->fd >= 0)
            posix_fadvise(s->src->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
    if (e && strcmp(path, given) != 0) {
        char msg[sizeof d->msg];
        memcpy(msg, d->msg, sizeof msg);
        int n = snprintf(d->msg, sizeof d->msg, "%s: ", path);
        if (n > 0 && (size_t)n < sizeof d->msg)
            snprintf(d->msg + n, sizeof d->msg - (size_t)n, "%.*s",
                     (int)(sizeof d->msg - 1 - (size_t)n), msg);
    }
    if (e) {
        gguf_source_close(s->src);
        s->src = NULL;
    }
    return e;
}

void ggfs_shards_free(struct shard *s, unsigned n)
{
    for (unsigned i = 0; s && i < n; i++) {
        gguf_close(s[i].gf);
        gguf_source_close(s[i].src);
    }
    free(s);
}

/* "DIR/NAME-00002-of-00004.gguf" -> prefix length and the two numbers. */
static bool split_name(const char *path, size_t *prefix_len, unsigned *no, unsigned *count)
{
    size_t n = strlen(path);
    const char *tail = "-00000-of-00000.gguf";
    size_t tl = strlen(tail);
    if (n < tl)
        return false;
    const char *p = path + n - tl;
    if (sscanf(p, "-%5u-of-%5u.gguf", no, count) != 2 || strcmp(p + 15, ".gguf") != 0 ||
        p[0] != '-' || strncmp(p + 6, "-of-", 4) != 0)
        return false;
    for (int i = 1; i <= 5; i++)
        if (p[i] < '0' || p[i] > '9' || p[i + 9] < '0' || p[i + 9] > '9')
            return false;
    *prefix_len = (size_t)(p - path);
    return true;
}

/* Before the first shard is opened: finish an interrupted edit (it may be
 * written), or refuse a read-only mount while one is there.  Messages name
 * path unless it is the file the user gave. */
static enum gguf_err recover(const char *path, const char *given, bool read_only,
                             struct gguf_diag *d)
{
    const char *pre = strcmp(path, given) ? path : NULL;
    if (read_only) {
        char *j = malloc(strlen(path) + 32);
        if (!j)
            return fail(d, GGUF_E_NOMEM, "out of memory");
        sprintf(j, "%s.gguffs-journal", path);
        bool interrupted = access(j, F_OK) == 0;
        free(j);
        if (interrupted)
            return fail(d, GGUF_E_INVAL, "%s%san edit was interrupted; mount once without "
                        "-o ro to roll it back", pre ? pre : "", pre ? ": " : "");
        return GGUF_OK;
    }
    char what[256];
    enum gguf_err e = gguf_recover(path, GGUF_RECOVER_FIX, what, sizeof what, d);
    if (!e && what[0])
        fprintf(stderr, "gguffs: %s: %s\n", path, what);
    return e;
}

/* The other shards of the split model of which given (shard no of count)
 * is one: opened into s[], every shard checked. */
static enum gguf_err open_split(const char *path, struct shard *s, int64_t no, int64_t count,
                                size_t plen, bool read_only, struct gguf_diag *d)
{
    char *p = malloc(plen + 32);
    if (!p)
        return fail(d, GGUF_E_NOMEM, "out of memory");
    enum gguf_err e = GGUF_OK;
    for (int64_t i = 0; !e && i < count; i++) {
        if (i == no)
            continue;
        snprintf(p, plen + 32, "%.*s-%05lld-of-%05lld.gguf", (int)plen, path,
                 (long long)i + 1, (long long)count);
        if (i == 0 && (e = recover(p, path, read_only, d)))     /* edits go to the first */
            break;
        if (access(p, F_OK) != 0)
            e = fail(d, GGUF_E_IO, "shard %lld of %lld is missing: %s", (long long)i + 1,
                     (long long)count, p);
        else
            e = open_one(p, path, &s[i], d);
    }
    free(p);
    /* Every shard says it is shard i of count. */
    uint64_t total = 0;
    for (int64_t i = 0; !e && i < count; i++) {
        int64_t c2, n2;
        const struct gguf_file *f = s[i].gf;
        if (!int_key(f, "split.count", &c2) || !int_key(f, "split.no", &n2) ||
            c2 != count || n2 != i)
            e = fail(d, GGUF_E_INVAL, "%s: does not belong to this split model (split.no/"
                     "split.count should be %lld/%lld)", s[i].src->name, (long long)i,
                     (long long)count);
        else if (f->version != s[0].gf->version || f->enc.big_endian != s[0].gf->enc.big_endian)
            e = fail(d, GGUF_E_INVAL, "%s: GGUF version or byte order differs from the "
                     "first shard", s[i].src->name);
        else
            total += f->n_tensors;
    }
    int64_t want;
    if (!e && int_key(s[0].gf, "split.tensors.count", &want) && (uint64_t)want != total)
        e = fail(d, GGUF_E_INVAL, "%s: split.tensors.count is %lld but the shards hold %llu "
                 "tensors", s[0].src->name, (long long)want, (unsigned long long)total);
    return e;
}

enum gguf_err ggfs_open_model(const char *path, bool read_only, struct shard **out,
                              unsigned *n_out, struct gguf_diag *d)
{
    *out = NULL;
    *n_out = 0;
    size_t plen = 0;
    unsigned fno = 0, fcount = 0;
    /* Recover the given file if it is (or may be) the first shard; a later
     * shard's first is recovered in open_split before it is opened. */
    bool named = split_name(path, &plen, &fno, &fcount);
    enum gguf_err e = !named || fno == 1 ? recover(path, path, read_only, d) : GGUF_OK;
    struct shard given = { 0 };
    if (!e)
        e = open_one(path, path, &given, d);
    if (e)
        return e;
    int64_t count = 1, no = 0;
    if (!int_key(given.gf, "split.count", &count) || count <= 1) {
        struct shard *s = malloc(sizeof *s);
        if (!s) {
            gguf_close(given.gf);
            gguf_source_close(given.src);
            return fail(d, GGUF_E_NOMEM, "out of memory");
        }
        *s = given;
        *out = s;
        *n_out = 1;
        return GGUF_OK;
    }
    if (count > 99999 || !int_key(given.gf, "split.no", &no) || !named ||
        fcount != count || fno != no + 1) {
        gguf_close(given.gf);
        gguf_source_close(given.src);
        return fail(d, GGUF_E_INVAL, "split.count is %lld but the file is not named "
                    "PREFIX-%05lld-of-%05lld.gguf with a matching split.no",
                    (long long)count, (long long)no + 1, (long long)count);
    }
    struct shard *s = calloc((size_t)count, sizeof *s);
    if (!s) {
        gguf_close(given.gf);
        gguf_source_close(given.src);
        return fail(d, GGUF_E_NOMEM, "out of memory");
    }
    s[no] = given;
    e = open_split(path, s, no, count, plen, read_only, d);
    if (e) {
        ggfs_shards_free(s, (unsigned)count);
        return e;
    }
    *out = s;
    *n_out = (unsigned)count;
    return GGUF_OK;
}

/* ---- the merged header of model.gguf ------------------------------------- */

static bool put_count(struct gguf_buf *b, const struct gguf_enc *e, uint64_t v)
{
    if (e->v1) {
        uint32_t x = (uint32_t)v;
        if (e->big_endian)
            x = __builtin_bswap32(x);
        return gguf_buf_put(b, &x, 4);
    }
    if (e->big_endian)
        v = __builtin_bswap64(v);
    return gguf_buf_put(b, &v, 8);
}

static bool put_u32(struct gguf_buf *b, const struct gguf_enc *e, uint32_t v)
{
    if (e->big_endian)
        v = __builtin_bswap32(v);
    return gguf_buf_put(b, &v, 4);
}

static bool put_u64(struct gguf_buf *b, const struct gguf_enc *e, uint64_t v)
{
    if (e->big_endian)
        v = __builtin_bswap64(v);
    return gguf_buf_put(b, &v, 8);
}

int ggfs_build_merged(struct state *st)
{
    const struct gguf_file *f0 = st->shards[0].gf;
    const struct gguf_enc *e = &f0->enc;
    uint64_t align = f0->alignment;
    st->vt_off = calloc(st->n_tensors ? st->n_tensors : 1, sizeof *st->vt_off);
    if (!st->vt_off)
        return ENOMEM;
    struct gguf_buf b = { 0 };
    uint64_t n_kv = 0;
    for (uint64_t i = 0; i < f0->n_kv; i++)
        if (!(f0->kv[i].key_len >= 6 && memcmp(f0->hdr + f0->kv[i].key_off, "split.", 6) == 0))
            n_kv++;
    gguf_buf_put(&b, "GGUF", 4);
    put_u32(&b, e, f0->version);
    put_count(&b, e, st->n_tensors);
    put_count(&b, e, n_kv);
    for (uint64_t i = 0; i < f0->n_kv; i++) {
        const struct gguf_kv *kv = &f0->kv[i];
        if (kv->key_len >= 6 && memcmp(f0->hdr + kv->key_off, "split.", 6) == 0)
            continue;
        /* the record as stored: key, type (and array header), value */
        gguf_buf_put(&b, f0->hdr + kv->rec_off, kv->val_off + kv->val_size - kv->rec_off);
    }
    uint64_t pos = 0;
    for (uint64_t j = 0; j < st->n_tensors; j++) {
        const struct gguf_tensor *t = st->tens[j].t;
        const uint8_t *hdr = st->shards[st->tens[j].shard].gf->hdr;
        put_count(&b, e, t->name_len);
        gguf_buf_put(&b, hdr + t->name_off, t->name_len);
        put_u32(&b, e, t->n_dims);
        for (unsigned d = 0; d < t->n_dims; d++)
            put_count(&b, e, t->ne[d]);
        put_u32(&b, e, t->type);
        put_u64(&b, e, pos);
        st->vt_off[j] = pos;
        pos += t->nbytes;
        pos += (align - pos % align) % align;
    }
    while (b.len % align)
        gguf_buf_putc(&b, 0);
    if (b.oom) {
        gguf_buf_free(&b);
        return ENOMEM;
    }
    st->model_hdr.data = b.data;
    st->model_hdr.len = b.len;
    st->model_size = b.len + pos;
    return 0;
}

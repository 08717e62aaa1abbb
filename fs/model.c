/*
 * fs/model.c — opening a model that may be split into shards, and the
 * virtual MOUNTPOINT/model.gguf.
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
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void msg(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void msg(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
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

static int open_one(const char *path, struct shard *s, char *err, size_t cap)
{
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
        msg(err, cap, "%s: %s", path, strerror(errno));
        return errno;
    }
    struct gguf_diag d;
    if (gguf_open_fd(s->fd, &s->gf, &d) != GGUF_OK) {
        if (d.offset != UINT64_MAX)
            msg(err, cap, "%s: %s (at byte offset %llu)", path, d.msg,
                (unsigned long long)d.offset);
        else
            msg(err, cap, "%s: %s", path, d.msg);
        close(s->fd);
        s->fd = -1;
        return EINVAL;
    }
    s->path = strdup(path);
    if (!s->path) {
        gguf_close(s->gf);
        close(s->fd);
        return ENOMEM;
    }
    /* Tensor reads are mostly long sequential runs: a larger readahead
     * window keeps the disk busy while FUSE replies. */
    posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return 0;
}

void ggfs_shards_free(struct shard *s, unsigned n)
{
    for (unsigned i = 0; s && i < n; i++) {
        gguf_close(s[i].gf);
        if (s[i].fd >= 0)
            close(s[i].fd);
        free(s[i].path);
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

int ggfs_open_model(const char *path, struct shard **out, unsigned *n_out,
                    char *err, size_t cap)
{
    *out = NULL;
    *n_out = 0;
    struct shard given = { .fd = -1 };
    int e = open_one(path, &given, err, cap);
    if (e)
        return e;
    int64_t count = 1, no = 0;
    bool split = int_key(given.gf, "split.count", &count) && count > 1;
    if (!split) {
        struct shard *s = malloc(sizeof *s);
        if (!s) {
            ggfs_shards_free(&given, 0);
            return ENOMEM;
        }
        *s = given;
        *out = s;
        *n_out = 1;
        return 0;
    }
    size_t plen;
    unsigned fno, fcount;
    if (count > 99999 || !int_key(given.gf, "split.no", &no) ||
        !split_name(path, &plen, &fno, &fcount) || fcount != count || fno != no + 1) {
        msg(err, cap, "%s: split.count is %lld but the file is not named "
            "PREFIX-%05lld-of-%05lld.gguf with a matching split.no", path,
            (long long)count, (long long)no + 1, (long long)count);
        gguf_close(given.gf);
        close(given.fd);
        free(given.path);
        return EINVAL;
    }
    struct shard *s = calloc((size_t)count, sizeof *s);
    if (!s) {
        gguf_close(given.gf);
        close(given.fd);
        free(given.path);
        return ENOMEM;
    }
    for (int64_t i = 0; i < count; i++)
        s[i].fd = -1;
    s[no] = given;
    char *p = malloc(plen + 32);
    e = p ? 0 : ENOMEM;
    for (int64_t i = 0; !e && i < count; i++) {
        if (i == no)
            continue;
        snprintf(p, plen + 32, "%.*s-%05lld-of-%05lld.gguf", (int)plen, path,
                 (long long)i + 1, (long long)count);
        if (i == 0 && !g_fs.read_only) {
            /* edits go to the first shard: finish an interrupted one */
            char what[256];
            struct gguf_diag d;
            if (gguf_recover(p, what, sizeof what, &d) != GGUF_OK) {
                msg(err, cap, "%s: %s", p, d.msg);
                e = EIO;
                break;
            }
        }
        if (access(p, F_OK) != 0) {
            msg(err, cap, "shard %lld of %lld is missing: %s", (long long)i + 1,
                (long long)count, p);
            e = ENOENT;
            break;
        }
        e = open_one(p, &s[i], err, cap);
    }
    free(p);
    /* Every shard says it is shard i of count. */
    uint64_t total = 0;
    for (int64_t i = 0; !e && i < count; i++) {
        int64_t c2, n2;
        if (!int_key(s[i].gf, "split.count", &c2) || !int_key(s[i].gf, "split.no", &n2) ||
            c2 != count || n2 != i) {
            msg(err, cap, "%s: does not belong to this split model (split.no/"
                "split.count should be %lld/%lld)", s[i].path, (long long)i,
                (long long)count);
            e = EINVAL;
        }
        if (!e && (s[i].gf->version != s[0].gf->version ||
                   s[i].gf->enc.big_endian != s[0].gf->enc.big_endian)) {
            msg(err, cap, "%s: GGUF version or byte order differs from the first shard",
                s[i].path);
            e = EINVAL;
        }
        if (!e)
            total += s[i].gf->n_tensors;
    }
    int64_t want;
    if (!e && int_key(s[0].gf, "split.tensors.count", &want) && (uint64_t)want != total) {
        msg(err, cap, "%s: split.tensors.count is %lld but the shards hold %llu tensors",
            s[0].path, (long long)want, (unsigned long long)total);
        e = EINVAL;
    }
    if (e) {
        ggfs_shards_free(s, (unsigned)count);
        return e;
    }
    *out = s;
    *n_out = (unsigned)count;
    return 0;
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

static bool bv_grow(struct fuse_bufvec **bv, size_t *cap, size_t n)
{
    if (n < *cap)
        return true;
    size_t nc = *cap * 2;
    struct fuse_bufvec *nb = realloc(*bv, sizeof **bv + nc * sizeof(struct fuse_buf));
    if (!nb)
        return false;
    *bv = nb;
    *cap = nc;
    return true;
}

static const char zeros[4096];

/* A single file: the header and padding from the state's memory (an
 * in-place edit rewrites them in the file), the rest from the file. */
static void read_single(fuse_req_t req, const struct state *st, uint64_t a, uint64_t end)
{
    struct fuse_bufvec *bv = calloc(1, sizeof *bv + 16 * sizeof(struct fuse_buf));
    size_t cap = 16, n = 0;
    if (!bv)
        return (void)fuse_reply_err(req, ENOMEM);
    const struct gguf_file *gf = st->gf;
    while (a < end) {
        if (!bv_grow(&bv, &cap, n + 1)) {
            free(bv);
            return (void)fuse_reply_err(req, ENOMEM);
        }
        struct fuse_buf *fb = &bv->buf[n++];
        memset(fb, 0, sizeof *fb);
        uint64_t to;
        if (a < gf->hdr_size) {
            to = end < gf->hdr_size ? end : gf->hdr_size;
            fb->mem = gf->hdr + a;
        } else if (a < st->hdr_end && !st->pad_fd) {
            to = end < st->hdr_end ? end : st->hdr_end;
            if (st->pad) {
                fb->mem = st->pad + (a - gf->hdr_size);
            } else {
                if (to - a > sizeof zeros)
                    to = a + sizeof zeros;
                fb->mem = (void *)zeros;
            }
        } else {
            to = end;
            fb->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
            fb->fd = st->fd;
            fb->pos = (off_t)a;
        }
        fb->size = (size_t)(to - a);
        a = to;
    }
    bv->count = n;
    /* no page gifting: memory buffers are the state's */
    fuse_reply_data(req, bv, n == 1 && bv->buf[0].flags ? FUSE_BUF_SPLICE_MOVE : 0);
    free(bv);
}

/* Reply to a read of the merged model.gguf: header bytes from memory, then
 * each tensor's bytes spliced from its shard, zeros in the padding. */
void ggfs_read_model(fuse_req_t req, const struct state *st, size_t size, off_t off)
{
    uint64_t a = (uint64_t)off, end;
    if (a >= st->model_size)
        return (void)fuse_reply_buf(req, NULL, 0);
    end = a + size < st->model_size ? a + size : st->model_size;
    if (!st->model_hdr.data)
        return read_single(req, st, a, end);
    size_t cap = 16, n = 0;
    struct fuse_bufvec *bv = calloc(1, sizeof *bv + cap * sizeof(struct fuse_buf));
    if (!bv)
        return (void)fuse_reply_err(req, ENOMEM);
    uint64_t hl = st->model_hdr.len;
    /* first tensor whose data may overlap [a, end) */
    uint64_t lo = 0, hi = st->n_tensors;
    uint64_t da = a > hl ? a - hl : 0;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (st->vt_off[mid] + st->tens[mid].t->nbytes <= da)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t j = lo;
    while (a < end) {
        if (!bv_grow(&bv, &cap, n + 1)) {
            free(bv);
            return (void)fuse_reply_err(req, ENOMEM);
        }
        struct fuse_buf *fb = &bv->buf[n];
        memset(fb, 0, sizeof *fb);
        if (a < hl) {
            fb->mem = st->model_hdr.data + a;
            fb->size = (size_t)((end < hl ? end : hl) - a);
        } else {
            uint64_t d = a - hl;
            while (j < st->n_tensors && st->vt_off[j] + st->tens[j].t->nbytes <= d)
                j++;
            if (j < st->n_tensors && d >= st->vt_off[j]) {
                const struct gguf_tensor *t = st->tens[j].t;
                const struct shard *s = &st->shards[st->tens[j].shard];
                uint64_t in = d - st->vt_off[j];
                uint64_t len = t->nbytes - in;
                if (len > end - a)
                    len = end - a;
                fb->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
                fb->fd = s->fd;
                fb->pos = (off_t)(s->gf->data_off + t->offset + in);
                fb->size = (size_t)len;
            } else {
                /* padding up to the next tensor (or the end) */
                uint64_t next = j < st->n_tensors ? st->vt_off[j] : st->model_size - hl;
                uint64_t len = next - d;
                if (len > end - a)
                    len = end - a;
                if (len > sizeof zeros)
                    len = sizeof zeros;
                fb->mem = (void *)zeros;
                fb->size = (size_t)len;
            }
        }
        a += fb->size;
        n++;
    }
    bv->count = n;
    fuse_reply_data(req, bv, 0);
    free(bv);
}

/* fs/read.c — reads of raw, f32, model.gguf and model.safetensors.
 *
 * Bytes that exist in a file (raw tensor bytes, model.gguf's data) are
 * spliced from the source's descriptor when it has one: the kernel moves
 * them, gguffs never copies them.  A source without a descriptor (a remote
 * one) is read into a buffer.  f32 is gathered from pinned cache chunks.
 * raw.npy and f32.npy are an NPY header, then raw's and f32's paths.
 */
#include "fs.h"
#include "read.h"
#include "f32.h"
#include "model.h"
#include "nodes.h"
#include "state.h"
#include "underneath.h"

#include "cache/blocksrc.h"
#include "gguf/types.h"
#include "remote/source.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <stdlib.h>
#include <string.h>

void ggfs_reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off)
{
    if ((uint64_t)off >= len)
        return (void)fuse_reply_buf(req, NULL, 0);
    size_t n = len - (size_t)off < size ? len - (size_t)off : size;
    fuse_reply_buf(req, data + off, n);
}

void ggfs_source_failed(struct ggfs *fs, struct gguf_source *src, uint64_t pos, uint64_t len)
{
    struct remote *r = ggfs_remote(src);
    struct gguf_diag d;
    if (!r || !remote_error_at(r, pos, len, &d))
        return;
    /* A remote that changed fails every read not yet cached: say so once.
     * Other failures (after the retries) are rare enough to log each. */
    if (remote_changed(r) && atomic_exchange(&fs->changed_logged, true))
        return;
    fuse_log(FUSE_LOG_ERR, "gguffs: %s\n", d.msg);
}

/* The most blocks of the remote block cache one reply is written from (a
 * request of at most 1 MiB over blocks of at least 64 KiB, and one
 * straddled); more, and the bytes are copied into a buffer. */
#define REPLY_PINS 18

/* A local model's file changed underneath (underneath.c): written,
 * truncated or replaced in place by another program.  Its bytes are no
 * longer those of this version: every read of them is EIO, decided just
 * before the splice (one fstat).  A cut is such a change: spliced, the
 * missing bytes would make a short reply, whose pages the kernel fills up
 * with zeros, and with several requests of a readahead window in flight
 * it may keep those zeros as data.  (A change between this check and the
 * splice still gets through, a cut as a short reply.) */
static bool file_changed(const struct state *st, unsigned shard)
{
    return ggfs_under_check_shard(st->fs, st, shard) != 0;
}

/* Replies with size bytes of shard's source at pos. */
static void reply_source(fuse_req_t req, const struct state *st, unsigned shard, uint64_t pos,
                         size_t size)
{
    struct gguf_source *src = st->model->shards[shard].src;
    if (src->fd >= 0) {
        if (size && file_changed(st, shard)) {
            fuse_reply_err(req, EIO);
            return;
        }
        struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
        bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
        bv.buf[0].fd = src->fd;
        bv.buf[0].pos = (off_t)pos;
        fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
        return;
    }
    /* A remote source's bytes that its disk cache holds: spliced from the
     * cache's data file, as a local model's are. */
    struct blocksrc_span sp[REPLY_PINS];
    int ns = 0;
    if (size)
        blocksrc_hold_disk(src, pos, size, sp, REPLY_PINS, &ns);   /* EINVAL: not held */
    if (ns > 0) {
        struct fuse_bufvec *bv = malloc(sizeof *bv + (size_t)ns * sizeof bv->buf[0]);
        if (!bv) {
            blocksrc_release_disk(src, sp, ns);
            fuse_reply_err(req, ENOMEM);
            return;
        }
        *bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(0);
        bv->count = 0;
        /* blocks next to each other in the file are one piece: libfuse
         * splices a reply only if its pipe has room for a page per piece
         * beyond the bytes, and requests are sized to leave one */
        for (int i = 0; i < ns; i++) {
            struct fuse_buf *last = bv->count ? &bv->buf[bv->count - 1] : NULL;
            if (last && last->fd == sp[i].fd && (uint64_t)last->pos + last->size == sp[i].pos) {
                last->size += sp[i].len;
                continue;
            }
            bv->buf[bv->count++] = (struct fuse_buf){ .size = sp[i].len,
                                                      .flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK,
                                                      .fd = sp[i].fd, .pos = (off_t)sp[i].pos };
        }
        fuse_reply_data(req, bv, FUSE_BUF_SPLICE_MOVE);
        blocksrc_release_disk(src, sp, ns);
        free(bv);
        return;
    }
    /* A remote source's tensor bytes: written to the kernel straight from
     * the block cache (one copy), the blocks pinned meanwhile. */
    struct iovec iov[REPLY_PINS];
    struct cache_block *pins[REPLY_PINS];
    int n = 0;
    int pe = size ? blocksrc_pin(src, pos, size, iov, pins, REPLY_PINS, &n) : EINVAL;
    if (n > 0 || pe == EIO || pe == ENOMEM) {
        if (pe == EIO)
            ggfs_source_failed(req_fs(req), src, pos, size);
        if (pe) {
            fuse_reply_err(req, pe);
            return;
        }
        int r = fuse_reply_iov(req, iov, n);
        blocksrc_unpin(src, pins, iov, n, r == 0);
        return;
    }
    char *buf = malloc(size ? size : 1);
    int e = buf ? gguf_source_read_all(src, buf, size, pos) : ENOMEM;
    if (e == EIO)
        ggfs_source_failed(req_fs(req), src, pos, size);
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_buf(req, buf, size);
    free(buf);
}

void ggfs_read_raw(fuse_req_t req, const struct state *st, uint64_t idx, size_t size, off_t off)
{
    const struct gguf_tensor *t = st->tens[idx].t;
    if ((uint64_t)off >= t->nbytes)
        return (void)fuse_reply_buf(req, NULL, 0);
    if (size > t->nbytes - (uint64_t)off)
        size = (size_t)(t->nbytes - (uint64_t)off);
    const struct gguf_shard *sh = &st->model->shards[st->tens[idx].shard];
    reply_source(req, st, st->tens[idx].shard, sh->gf->data_off + t->offset + (uint64_t)off,
                 size);
}

/* Serves [off, off+size) of tensor idx's f32 view from pinned cache chunks,
 * after pre_len bytes of pre (an NPY header's end; size counts the view's
 * bytes only): the reply is written straight from the chunks (one copy,
 * into the kernel's pages; no pipe in between), then the chunks are
 * released with the bytes that went out, which the kernel keeps in its
 * page cache. */
static void read_f32(fuse_req_t req, struct state *st, uint64_t idx, size_t size, off_t off,
                     struct f32_stream *s, const char *pre, size_t pre_len)
{
    /* the kernel never asks for more than 1 MiB; a request that did would
     * get a short read, as reads may (ggfs_f32_pin cuts it); at or past
     * the end, only pre */
    struct f32_pin p;
    int err = ggfs_f32_pin(st, s, idx, (uint64_t)off, size, &p);
    if (err)
        return (void)fuse_reply_err(req, err);
    if (!p.n && !pre_len)
        return (void)fuse_reply_buf(req, NULL, 0);
    struct iovec iov[F32_PIN_MAX + 1];
    size_t n_pre = pre_len ? 1 : 0;
    if (n_pre)
        iov[0] = (struct iovec){ (void *)pre, pre_len };
    memcpy(iov + n_pre, p.iov, p.n * sizeof *iov);
    /* served only if the reply went out (the chunks then go first) */
    int r = fuse_reply_iov(req, iov, (int)(n_pre + p.n));
    ggfs_f32_unpin(st->fs, &p, r == 0);
}

/* float32 stored little-endian is its own f32 view: served like raw */
bool ggfs_f32_is_raw(const struct state *st, uint64_t idx)
{
    const struct tref *r = &st->tens[idx];
    return r->t->type == GGML_T_F32 && !st->model->shards[r->shard].gf->enc.big_endian;
}

void ggfs_read_f32(fuse_req_t req, struct state *st, uint64_t idx, size_t size, off_t off,
                   struct f32_stream *s)
{
    if (ggfs_f32_is_raw(st, idx))
        return ggfs_read_raw(req, st, idx, size, off);
    read_f32(req, st, idx, size, off, s, NULL, 0);
}

/* ---- model.gguf ----------------------------------------------------------- */

/* The pieces a read of model.gguf is made of: memory, a source's bytes, or
 * zeros.  A remote source's bytes are pinned blocks of its block cache or
 * spans of its disk cache's file, released after the reply; other sources
 * without a descriptor are read into buffers owned here. */
struct pieces {
    struct fuse_bufvec *bv;
    size_t cap;
    char **owned;
    size_t n_owned;
    /* pins and holds, per remote source */
    struct held {
        struct gguf_source *src;
        int n;
        bool disk;
        struct iovec iov[REPLY_PINS];
        struct cache_block *pins[REPLY_PINS];
        struct blocksrc_span sp[REPLY_PINS];
    } *held;
    size_t n_held, cap_held;
    /* chunks of the block cache pinned for the reply (model.safetensors'
     * f32 pieces), released after it with the bytes served */
    struct cache *cache;
    struct cache_block *pins[F32_PIN_MAX];
    size_t pin_used[F32_PIN_MAX];
    size_t n_pins;
    int err;
};

static const char zeros[4096];

static struct fuse_buf *piece(struct pieces *p)
{
    size_t n = p->bv ? p->bv->count : 0;
    if (!p->bv || n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 8;
        struct fuse_bufvec *nb = realloc(p->bv, sizeof *nb + nc * sizeof(struct fuse_buf));
        char **no = realloc(p->owned, nc * sizeof *no);
        if (nb)
            p->bv = nb;
        if (no)
            p->owned = no;
        if (!nb || !no) {
            p->err = ENOMEM;
            return NULL;
        }
        if (n == 0)
            memset(p->bv, 0, sizeof *p->bv);
        p->cap = nc;
    }
    struct fuse_buf *fb = &p->bv->buf[p->bv->count++];
    memset(fb, 0, sizeof *fb);
    return fb;
}

static void piece_mem(struct pieces *p, const void *mem, size_t size)
{
    struct fuse_buf *fb = piece(p);
    if (fb) {
        fb->mem = (void *)mem;
        fb->size = size;
    }
}

static void piece_source(struct pieces *p, const struct state *st, unsigned shard, uint64_t pos,
                         size_t size)
{
    struct gguf_source *src = st->model->shards[shard].src;
    struct fuse_buf *fb = piece(p);
    if (!fb)
        return;
    fb->size = size;
    if (src->fd >= 0) {
        if (size && file_changed(st, shard))
            p->err = EIO;
        fb->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
        fb->fd = src->fd;
        fb->pos = (off_t)pos;
        return;
    }
    if (p->n_held == p->cap_held) {
        size_t nc = p->cap_held ? 2 * p->cap_held : 2;
        struct held *nh = realloc(p->held, nc * sizeof *nh);
        if (!nh) {
            p->err = ENOMEM;
            return;
        }
        p->held = nh;
        p->cap_held = nc;
    }
    struct held *h = &p->held[p->n_held];
    h->src = src;
    h->disk = true;
    int pe = 0;
    blocksrc_hold_disk(src, pos, size, h->sp, REPLY_PINS, &h->n);     /* EINVAL: not held */
    if (h->n == 0) {
        h->disk = false;
        pe = blocksrc_pin(src, pos, size, h->iov, h->pins, REPLY_PINS, &h->n);
    }
    if (h->n > 0) {
        /* the piece made above becomes the first of the blocks' */
        p->n_held++;
        p->bv->count--;
        for (int i = 0; i < h->n && !p->err; i++) {
            struct fuse_buf *prev = p->bv->count ? &p->bv->buf[p->bv->count - 1] : NULL;
            if (h->disk && prev && (prev->flags & FUSE_BUF_IS_FD) &&
                prev->fd == h->sp[i].fd && (uint64_t)prev->pos + prev->size == h->sp[i].pos) {
                prev->size += h->sp[i].len;     /* one piece: see reply_source */
                continue;
            }
            struct fuse_buf *b = piece(p);
            if (!b)
                break;
            if (h->disk) {
                b->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
                b->fd = h->sp[i].fd;
                b->pos = (off_t)h->sp[i].pos;
                b->size = h->sp[i].len;
            } else {
                b->mem = h->iov[i].iov_base;
                b->size = h->iov[i].iov_len;
            }
        }
        return;
    }
    if (pe == EIO || pe == ENOMEM) {
        if (pe == EIO)
            ggfs_source_failed(st->fs, src, pos, size);
        p->err = pe;
        return;
    }
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        p->err = ENOMEM;
        return;
    }
    p->owned[p->n_owned++] = buf;
    fb->mem = buf;
    int e = gguf_source_read_all(src, buf, size, pos);
    if (e == EIO)
        ggfs_source_failed(st->fs, src, pos, size);
    if (e)
        p->err = e;
}

/* The most pieces of memory written with one writev (more: spliced). */
#define REPLY_IOV 64

static void pieces_reply(fuse_req_t req, struct pieces *p)
{
    bool all_mem = p->bv && p->bv->count <= REPLY_IOV;
    for (size_t i = 0; all_mem && i < p->bv->count; i++)
        all_mem = !(p->bv->buf[i].flags & FUSE_BUF_IS_FD);
    int r = -1;
    if (p->err || !p->bv) {
        fuse_reply_err(req, p->err ? p->err : EIO);
    } else if (all_mem) {
        /* memory only: written as it is, no pipe in between */
        struct iovec iov[REPLY_IOV];
        for (size_t i = 0; i < p->bv->count; i++)
            iov[i] = (struct iovec){ p->bv->buf[i].mem, p->bv->buf[i].size };
        r = fuse_reply_iov(req, iov, (int)p->bv->count);
    } else {        /* no page gifting: memory pieces are the state's */
        r = fuse_reply_data(req, p->bv, 0);
    }
    for (size_t i = 0; i < p->n_pins; i++)
        cache_put(p->cache, p->pins[i], r == 0 ? p->pin_used[i] : 0);
    for (size_t i = 0; i < p->n_held; i++) {
        struct held *h = &p->held[i];
        if (h->disk)
            blocksrc_release_disk(h->src, h->sp, h->n);
        else
            blocksrc_unpin(h->src, h->pins, h->iov, h->n, r == 0);
    }
    for (size_t i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    free(p->held);
    free(p->bv);
}

/* A single file: the header and padding from the state's memory (an
 * in-place edit rewrites them in the file), the rest from the file. */
static void model_single(struct pieces *p, const struct state *st, uint64_t a, uint64_t end)
{
    const struct gguf_file *gf = st_meta(st);
    while (a < end && !p->err) {
        uint64_t to;
        if (a < gf->hdr_size) {
            to = end < gf->hdr_size ? end : gf->hdr_size;
            piece_mem(p, gf->hdr + a, (size_t)(to - a));
        } else if (a < st->hdr_end && !st->pad_src) {
            to = end < st->hdr_end ? end : st->hdr_end;
            if (st->pad) {
                piece_mem(p, st->pad + (a - gf->hdr_size), (size_t)(to - a));
            } else {
                if (to - a > sizeof zeros)
                    to = a + sizeof zeros;
                piece_mem(p, zeros, (size_t)(to - a));
            }
        } else {
            to = end;
            piece_source(p, st, 0, a, (size_t)(to - a));
        }
        a = to;
    }
}

/* A split model: the merged header from memory, then each tensor's bytes
 * from its shard, zeros in the padding. */
static void model_merged(struct pieces *p, const struct state *st, uint64_t a, uint64_t end)
{
    uint64_t hl = st->merged.hdr.len;
    /* first tensor whose data may overlap [a, end) */
    uint64_t lo = 0, hi = st->n_tensors;
    uint64_t da = a > hl ? a - hl : 0;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (st->merged.offset[mid] + st->tens[mid].t->nbytes <= da)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t j = lo;
    while (a < end && !p->err) {
        uint64_t len;
        if (a < hl) {
            len = (end < hl ? end : hl) - a;
            piece_mem(p, st->merged.hdr.data + a, (size_t)len);
            a += len;
            continue;
        }
        uint64_t d = a - hl;
        while (j < st->n_tensors && st->merged.offset[j] + st->tens[j].t->nbytes <= d)
            j++;
        if (j < st->n_tensors && d >= st->merged.offset[j]) {
            const struct gguf_tensor *t = st->tens[j].t;
            const struct gguf_shard *s = &st->model->shards[st->tens[j].shard];
            uint64_t in = d - st->merged.offset[j];
            len = t->nbytes - in < end - a ? t->nbytes - in : end - a;
            piece_source(p, st, st->tens[j].shard, s->gf->data_off + t->offset + in,
                         (size_t)len);
        } else {
            /* padding up to the next tensor (or the end) */
            uint64_t next = j < st->n_tensors ? st->merged.offset[j] : st->model_size - hl;
            len = next - d < end - a ? next - d : end - a;
            if (len > sizeof zeros)
                len = sizeof zeros;
            piece_mem(p, zeros, (size_t)len);
        }
        a += len;
    }
}

void ggfs_read_model(fuse_req_t req, const struct state *st, size_t size, off_t off)
{
    uint64_t a = (uint64_t)off;
    if (a >= st->model_size)
        return (void)fuse_reply_buf(req, NULL, 0);
    uint64_t end = size < st->model_size - a ? a + size : st->model_size;
    struct pieces p = { 0 };
    if (st->merged.hdr.len)
        model_merged(&p, st, a, end);
    else
        model_single(&p, st, a, end);
    pieces_reply(req, &p);
}

/* ---- model.safetensors ------------------------------------------------------ */

/* The most pieces one reply of model.safetensors is made of; the rest of a
 * read over many small tensors is copied into one buffer (gguf/safetensors.h
 * allows a tensor per byte: a request of 1 MiB could otherwise be a
 * million pieces). */
#define ST_PIECES 64

/* Bytes [in, in+n) of span sp's f32 view, chunk by chunk: each chunk
 * pinned (ggfs_f32_pin) and handed to use(), which releases it; 0 or an
 * errno. */
static int span_f32(struct state *st, uint64_t tensor, uint64_t in, uint64_t n,
                    struct f32_stream *s,
                    void (*use)(void *ctx, struct cache_block *b, const char *src, size_t len),
                    void *ctx)
{
    while (n) {
        struct f32_pin p;
        int err = ggfs_f32_pin(st, s, tensor, in, n, &p);
        if (err)
            return err;
        if (!p.n)
            return EIO;     /* the span is inside the view: not reached */
        for (size_t i = 0; i < p.n; i++)
            use(ctx, p.b[i], p.iov[i].iov_base, p.iov[i].iov_len);
        in += p.len;
        n -= p.len;
    }
    return 0;
}

/* a chunk's bytes as a piece of the reply: pinned until it is sent (at
 * most F32_PIN_MAX), else copied into a buffer of the pieces' */
static void use_piece(void *ctx, struct cache_block *b, const char *src, size_t len)
{
    struct pieces *p = ctx;
    if (p->n_pins < F32_PIN_MAX) {
        p->pins[p->n_pins] = b;
        p->pin_used[p->n_pins++] = len;
        piece_mem(p, src, len);
        return;
    }
    struct fuse_buf *fb = piece(p);
    char *buf = fb ? malloc(len ? len : 1) : NULL;
    if (fb && buf) {
        p->owned[p->n_owned++] = buf;
        memcpy(buf, src, len);
        fb->mem = buf;
        fb->size = len;
    } else if (!p->err) {
        p->err = ENOMEM;
    }
    cache_put(p->cache, b, len);
}

struct copy_to {
    struct cache *cache;
    char *dst;
};

static void use_copy(void *ctx, struct cache_block *b, const char *src, size_t len)
{
    struct copy_to *c = ctx;
    memcpy(c->dst, src, len);
    c->dst += len;
    cache_put(c->cache, b, len);
}

/* The rest of a read, [a, end), copied into one buffer: 0 or an errno. */
static int safetensors_copy(struct state *st, const struct gguf_st_layout *l, uint64_t j,
                            uint64_t a, uint64_t end, char *dst)
{
    for (; a < end && j < l->n_span; j++) {
        const struct gguf_st_span *sp = &l->span[j];
        if (sp->start + sp->len <= a)
            continue;
        uint64_t in = a - sp->start;
        uint64_t n = sp->len - in < end - a ? sp->len - in : end - a;
        int e;
        if (sp->f32) {
            struct copy_to c = { st->fs->cache, dst };
            e = span_f32(st, sp->tensor, in, n, NULL, use_copy, &c);
        } else {
            const struct tref *r = &st->tens[sp->tensor];
            const struct gguf_shard *sh = &st->model->shards[r->shard];
            e = sh->src->fd >= 0 && file_changed(st, r->shard) ? EIO :
                gguf_source_read_all(sh->src, dst, (size_t)n,
                                     sh->gf->data_off + r->t->offset + in);
            if (e == EIO)
                ggfs_source_failed(st->fs, sh->src, sh->gf->data_off + r->t->offset + in, n);
        }
        if (e)
            return e;
        dst += n;
        a += n;
    }
    return 0;
}

/* The start of a read of [off, off + size) of a safetensors file laid out
 * as l (the layout's error e, if any): false when it is answered already
 * (an error, or nothing to read past the end); else *p holds the header's
 * piece, if the read starts in it, and [*a, *end) is the rest to serve. */
static bool st_read_start(fuse_req_t req, struct state *st, int e,
                          const struct gguf_st_layout *l, size_t size, off_t off,
                          struct pieces *p, uint64_t *a, uint64_t *end)
{
    if (e)
        return fuse_reply_err(req, e), false;
    *a = (uint64_t)off;
    if (*a >= l->size || !size)
        return fuse_reply_buf(req, NULL, 0), false;
    *end = size < l->size - *a ? *a + size : l->size;
    memset(p, 0, sizeof *p);
    p->cache = st->fs->cache;
    uint64_t hl = l->hdr.len;
    if (*a < hl) {
        uint64_t to = *end < hl ? *end : hl;
        piece_mem(p, l->hdr.data + *a, (size_t)(to - *a));
        *a = to;
    }
    return true;
}

void ggfs_read_safetensors(fuse_req_t req, struct state *st, size_t size, off_t off,
                           struct f32_stream *s)
{
    const struct gguf_st_layout *l = NULL;
    int e = ggfs_safetensors(st, &l);
    struct pieces p;
    uint64_t a = 0, end = 0;
    if (!st_read_start(req, st, e, l, size, off, &p, &a, &end))
        return;
    for (uint64_t j = gguf_st_find(l, a); a < end && !p.err && j < l->n_span; j++) {
        const struct gguf_st_span *sp = &l->span[j];
        if (sp->start + sp->len <= a)
            continue;                   /* an empty span */
        if (p.bv && p.bv->count >= ST_PIECES) {
            struct fuse_buf *fb = piece(&p);
            char *buf = fb ? malloc((size_t)(end - a)) : NULL;
            if (!buf) {
                p.err = ENOMEM;
                break;
            }
            p.owned[p.n_owned++] = buf;
            fb->mem = buf;
            fb->size = (size_t)(end - a);
            p.err = safetensors_copy(st, l, j, a, end, buf);
            break;
        }
        uint64_t in = a - sp->start;
        uint64_t n = sp->len - in < end - a ? sp->len - in : end - a;
        if (sp->f32) {
            int err = span_f32(st, sp->tensor, in, n, s, use_piece, &p);
            if (err && !p.err)
                p.err = err;
        } else {
            const struct tref *r = &st->tens[sp->tensor];
            const struct gguf_shard *sh = &st->model->shards[r->shard];
            piece_source(&p, st, r->shard, sh->gf->data_off + r->t->offset + in, (size_t)n);
        }
        a += n;
    }
    pieces_reply(req, &p);
}

/* ---- hf/model.safetensors ---------------------------------------------------- */

/* Bytes [off, off+len) of tensor idx's raw bytes (f32 false) or f32
 * view into dst: 0 or an errno. */
static int tensor_copy(struct state *st, uint64_t idx, bool f32, uint64_t off, uint64_t len,
                       char *dst)
{
    if (f32 && !ggfs_f32_is_raw(st, idx)) {
        struct copy_to c = { st->fs->cache, dst };
        return span_f32(st, idx, off, len, NULL, use_copy, &c);
    }
    const struct tref *r = &st->tens[idx];
    const struct gguf_shard *sh = &st->model->shards[r->shard];
    uint64_t pos = sh->gf->data_off + r->t->offset + off;
    int e = sh->src->fd >= 0 && file_changed(st, r->shard) ? EIO :
            gguf_source_read_all(sh->src, dst, (size_t)len, pos);
    if (e == EIO)
        ggfs_source_failed(st->fs, sh->src, pos, len);
    return e;
}

/* Bytes [in, in+n) of HF tensor h into dst, segment by segment
 * (gguf_hf_seg); a tensor whose values change (minus 1) is read whole
 * floats and changed in a buffer of its own: 0 or an errno. */
static int hf_copy(struct state *st, const struct gguf_hf_tensor *h, uint64_t in, uint64_t n,
                   char *dst)
{
    if (h->op == GGUF_HF_MINUS1) {
        uint64_t a = in / 4 * 4, b = (in + n + 3) / 4 * 4;
        float *tmp = malloc((size_t)(b - a));
        if (!tmp)
            return ENOMEM;
        int e = tensor_copy(st, h->src[0], true, a, b - a, (char *)tmp);
        if (!e) {
            for (uint64_t i = 0; i < (b - a) / 4; i++)
                tmp[i] -= 1.0f;
            memcpy(dst, (char *)tmp + (in - a), (size_t)n);
        }
        free(tmp);
        return e;
    }
    while (n) {
        struct gguf_hf_seg g;
        gguf_hf_seg(h, in, n, &g);
        int e = tensor_copy(st, h->src[g.src], h->f32, g.off, g.len, dst);
        if (e)
            return e;
        dst += g.len;
        in += g.len;
        n -= g.len;
    }
    return 0;
}

/* The rest of a read of hf/model.safetensors, [a, end), from span j on,
 * copied into one buffer: 0 or an errno. */
static int hf_copy_rest(struct state *st, const struct gguf_st_layout *l, uint64_t j,
                        uint64_t a, uint64_t end, char *dst)
{
    for (; a < end && j < l->n_span; j++) {
        const struct gguf_st_span *sp = &l->span[j];
        if (sp->start + sp->len <= a)
            continue;
        uint64_t in = a - sp->start;
        uint64_t n = sp->len - in < end - a ? sp->len - in : end - a;
        int e = hf_copy(st, &st->hf->t[sp->tensor], in, n, dst);
        if (e)
            return e;
        dst += n;
        a += n;
    }
    return 0;
}

void ggfs_read_hf_safetensors(fuse_req_t req, struct state *st, size_t size, off_t off,
                              struct f32_stream *s)
{
    const struct gguf_st_layout *l = NULL;
    int e = ggfs_hf_safetensors(st, &l);
    struct pieces p;
    uint64_t a = 0, end = 0;
    if (!st_read_start(req, st, e, l, size, off, &p, &a, &end))
        return;
    for (uint64_t j = gguf_st_find(l, a); a < end && !p.err && j < l->n_span; j++) {
        const struct gguf_st_span *sp = &l->span[j];
        if (sp->start + sp->len <= a)
            continue;                   /* an empty span */
        const struct gguf_hf_tensor *h = &st->hf->t[sp->tensor];
        uint64_t in = a - sp->start;
        uint64_t n = sp->len - in < end - a ? sp->len - in : end - a;
        /* pieces of the sources while they are few; then (many short rows,
         * or values that change) the rest copied into one buffer */
        while (n && !p.err && h->op != GGUF_HF_MINUS1 &&
               !(p.bv && p.bv->count >= ST_PIECES)) {
            struct gguf_hf_seg g;
            gguf_hf_seg(h, in, n, &g);
            uint64_t src = h->src[g.src];
            if (h->f32 && !ggfs_f32_is_raw(st, src)) {
                int err = span_f32(st, src, g.off, g.len, s, use_piece, &p);
                if (err && !p.err)
                    p.err = err;
            } else {
                const struct tref *r = &st->tens[src];
                const struct gguf_shard *sh = &st->model->shards[r->shard];
                piece_source(&p, st, r->shard, sh->gf->data_off + r->t->offset + g.off,
                             (size_t)g.len);
            }
            in += g.len;
            n -= g.len;
            a += g.len;
        }
        if (!n || p.err)
            continue;
        struct fuse_buf *fb = piece(&p);
        char *buf = fb ? malloc((size_t)(end - a)) : NULL;
        if (!buf) {
            p.err = ENOMEM;
            break;
        }
        p.owned[p.n_owned++] = buf;
        fb->mem = buf;
        fb->size = (size_t)(end - a);
        p.err = hf_copy_rest(st, l, j, a, end, buf);
        break;
    }
    pieces_reply(req, &p);
}

/* ---- raw.npy and f32.npy ---------------------------------------------------- */

const char *ggfs_npy_descr(const struct state *st, uint64_t idx)
{
    const struct tref *r = &st->tens[idx];
    bool be = st->model->shards[r->shard].gf->enc.big_endian;
    switch (r->t->type) {
    case GGML_T_F32: return be ? ">f4" : "<f4";
    case GGML_T_F16: return be ? ">f2" : "<f2";
    case GGML_T_F64: return be ? ">f8" : "<f8";
    case GGML_T_I8: return "|i1";
    case GGML_T_I16: return be ? ">i2" : "<i2";
    case GGML_T_I32: return be ? ">i4" : "<i4";
    case GGML_T_I64: return be ? ">i8" : "<i8";
    default: return NULL;
    }
}

size_t ggfs_npy_header(const struct state *st, uint64_t idx, enum tensor_file tf, char *buf)
{
    const struct gguf_tensor *t = st->tens[idx].t;
    const char *descr = tf == TF_F32_NPY ? "<f4" : ggfs_npy_descr(st, idx);
    if (!descr || !ggfs_tensor_has(st, idx, tf))
        return 0;
    return gguf_npy_header(descr, t->n_dims, t->ne, buf);
}

void ggfs_read_npy(fuse_req_t req, struct state *st, uint64_t idx, enum tensor_file tf,
                   size_t size, off_t off, struct f32_stream *s)
{
    char hdr[NPY_HEADER_MAX];
    size_t hl = ggfs_npy_header(st, idx, tf, hdr);
    if (!hl)
        return (void)fuse_reply_err(req, ENOENT);
    bool raw = tf == TF_RAW_NPY || ggfs_f32_is_raw(st, idx);
    uint64_t a = (uint64_t)off;
    if (a >= hl) {
        off_t d = (off_t)(a - hl);
        if (raw)
            return ggfs_read_raw(req, st, idx, size, d);
        return read_f32(req, st, idx, size, d, s, NULL, 0);
    }
    /* the header's end, then the data from its start */
    size_t pre = hl - (size_t)a < size ? hl - (size_t)a : size;
    size_t rest = size - pre;
    if (!raw)
        return read_f32(req, st, idx, rest, 0, s, hdr + a, pre);
    const struct gguf_tensor *t = st->tens[idx].t;
    if (rest > t->nbytes)
        rest = (size_t)t->nbytes;
    if (!rest)
        return (void)fuse_reply_buf(req, hdr + a, pre);
    struct pieces p = { 0 };
    const struct gguf_shard *sh = &st->model->shards[st->tens[idx].shard];
    piece_mem(&p, hdr + a, pre);
    if (!p.err)
        piece_source(&p, st, st->tens[idx].shard, sh->gf->data_off + t->offset, rest);
    pieces_reply(req, &p);
}

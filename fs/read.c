/* fs/read.c — reads of raw, f32, model.gguf and model.safetensors.
 *
 * A reply is a list of pieces: memory of the state's, a source's bytes as
 * the source lends them (gguf_source_spans: a descriptor's range, spliced
 * by the kernel, or memory the source holds, such as pinned blocks of the
 * remote block cache), f32 chunks pinned in the cache, or buffers copied
 * into; each piece released after the reply by its own call.  The handlers
 * do not know which kind of source they read.  raw.npy and f32.npy are an
 * NPY header, then raw's and f32's paths.
 */
#include "fs.h"
#include "read.h"
#include "core/f32.h"
#include "core/model.h"
#include "core/nodes.h"
#include "core/state.h"
#include "core/tensor.h"
#include "core/underneath.h"

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
     * get a short read, as reads may (core_f32_pin cuts it); at or past
     * the end, only pre */
    struct f32_pin p;
    int err = core_f32_pin(st, s, idx, (uint64_t)off, size, &p);
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
    core_f32_unpin(st->fs, &p, r == 0);
}

void ggfs_read_f32(fuse_req_t req, struct state *st, uint64_t idx, size_t size, off_t off,
                   struct f32_stream *s)
{
    if (core_f32_is_raw(st, idx))
        return ggfs_read_raw(req, st, idx, size, off);
    read_f32(req, st, idx, size, off, s, NULL, 0);
}

/* ---- model.gguf ----------------------------------------------------------- */

/* A local model's file changed underneath (underneath.c): written,
 * truncated or replaced in place by another program.  Its bytes are no
 * longer those of this version: every read of them is EIO, decided just
 * before the splice (one fstat; for other sources, nothing).  A cut is
 * such a change: spliced, the missing bytes would make a short reply,
 * whose pages the kernel fills up with zeros, and with several requests
 * of a readahead window in flight it may keep those zeros as data.  (A
 * change between this check and the splice still gets through, a cut as
 * a short reply.) */
static bool file_changed(const struct state *st, unsigned shard)
{
    return core_under_check_shard(st->fs, st, shard) != 0;
}

static const char zeros[4096];

/* The spans one source's piece of a reply may be lent as: a request of at
 * most 1 MiB over blocks of at least 64 KiB, one straddled, and the
 * remote prefix (more, and the bytes are copied: gguf_source_spans). */
#define REPLY_SPANS 18
/* Pieces a reply holds without an allocation. */
#define PIECES_INLINE (REPLY_SPANS + 2)

/* The pieces a reply is made of, in order, each a span (gguf/source.h)
 * released after the reply; err, once set, fails the reply. */
struct pieces {
    struct gguf_span *sp;
    size_t n, cap;
    struct gguf_span inl[PIECES_INLINE];
    size_t n_pins;          /* f32 chunks pinned (at most F32_PIN_MAX) */
    struct cache *cache;    /* theirs */
    int err;
};

static void pieces_init(struct pieces *p, struct cache *cache)
{
    p->sp = p->inl;
    p->n = 0;
    p->cap = PIECES_INLINE;
    p->n_pins = 0;
    p->cache = cache;
    p->err = 0;
}

/* Room for k more pieces: false (p->err ENOMEM) when there is none. */
static bool room(struct pieces *p, size_t k)
{
    if (p->n + k <= p->cap)
        return true;
    size_t nc = p->cap * 2 > p->n + k ? p->cap * 2 : p->n + k;
    struct gguf_span *ns = malloc(nc * sizeof *ns);
    if (!ns) {
        p->err = ENOMEM;
        return false;
    }
    memcpy(ns, p->sp, p->n * sizeof *ns);
    if (p->sp != p->inl)
        free(p->sp);
    p->sp = ns;
    p->cap = nc;
    return true;
}

static void piece_mem(struct pieces *p, const void *mem, size_t size)
{
    if (room(p, 1))
        p->sp[p->n++] = (struct gguf_span){ .mem = mem, .fd = -1, .len = size };
}

static void free_owned(const struct gguf_span *sp, bool used)
{
    (void)used;
    free(sp->hold);
}

/* A buffer of size bytes of the reply's own, to be filled: NULL (p->err
 * ENOMEM) when out of memory. */
static char *piece_buf(struct pieces *p, size_t size)
{
    char *buf = room(p, 1) ? malloc(size ? size : 1) : NULL;
    if (!buf) {
        p->err = ENOMEM;
        return NULL;
    }
    p->sp[p->n++] = (struct gguf_span){ .mem = buf, .fd = -1, .len = size,
                                        .release = free_owned, .hold = buf };
    return buf;
}

/* size bytes of shard's source at pos, as the source lends them. */
static void piece_source(struct pieces *p, const struct state *st, unsigned shard, uint64_t pos,
                         size_t size)
{
    struct gguf_source *src = st->model->shards[shard].src;
    if (!size || !room(p, REPLY_SPANS))
        return;
    if (file_changed(st, shard)) {
        p->err = EIO;
        return;
    }
    int n;
    int e = gguf_source_spans(src, pos, size, p->sp + p->n, REPLY_SPANS, &n);
    if (e == EIO)
        core_source_failed(st->fs, src, pos, size);
    if (e)
        p->err = e;
    else
        p->n += (size_t)n;
}

/* The most pieces of memory written with one writev (more: spliced). */
#define REPLY_IOV 64
/* Pieces of a bufvec without an allocation. */
#define REPLY_BUFS 24

/* Replies with the pieces (or p->err), then releases them: served only if
 * the reply went out.  Memory only: written as it is (one writev, no pipe
 * in between); else a bufvec, descriptor ranges next to each other in one
 * file one buffer (libfuse splices a reply only if its pipe has room for
 * a page per buffer beyond the bytes, and requests are sized to leave
 * one), spliced with the pages moved when the reply is descriptors only
 * (memory pieces are the state's or the caches': never gifted). */
static void pieces_reply(fuse_req_t req, struct pieces *p)
{
    int r = -1;
    bool all_mem = p->n <= REPLY_IOV, all_fd = true;
    for (size_t i = 0; i < p->n; i++) {
        if (p->sp[i].mem)
            all_fd = false;
        else
            all_mem = false;
    }
    if (p->err) {
        fuse_reply_err(req, p->err);
    } else if (!p->n) {
        r = fuse_reply_buf(req, NULL, 0);
    } else if (all_mem) {
        struct iovec iov[REPLY_IOV];
        for (size_t i = 0; i < p->n; i++)
            iov[i] = (struct iovec){ (void *)p->sp[i].mem, p->sp[i].len };
        r = fuse_reply_iov(req, iov, (int)p->n);
    } else {
        union {
            struct fuse_bufvec bv;
            char room[sizeof(struct fuse_bufvec) + REPLY_BUFS * sizeof(struct fuse_buf)];
        } local;
        struct fuse_bufvec *bv = &local.bv;
        if (p->n > REPLY_BUFS + 1)
            bv = malloc(sizeof *bv + p->n * sizeof bv->buf[0]);
        if (!bv) {
            fuse_reply_err(req, ENOMEM);
        } else {
            *bv = (struct fuse_bufvec)FUSE_BUFVEC_INIT(0);
            bv->count = 0;
            for (size_t i = 0; i < p->n; i++) {
                const struct gguf_span *sp = &p->sp[i];
                struct fuse_buf *last = bv->count ? &bv->buf[bv->count - 1] : NULL;
                if (!sp->mem && last && (last->flags & FUSE_BUF_IS_FD) && last->fd == sp->fd &&
                    (uint64_t)last->pos + last->size == sp->pos) {
                    last->size += sp->len;
                    continue;
                }
                struct fuse_buf *fb = &bv->buf[bv->count++];
                *fb = (struct fuse_buf){ .size = sp->len };
                if (sp->mem) {
                    fb->mem = (void *)sp->mem;
                } else {
                    fb->flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
                    fb->fd = sp->fd;
                    fb->pos = (off_t)sp->pos;
                }
            }
            r = fuse_reply_data(req, bv, all_fd ? FUSE_BUF_SPLICE_MOVE : 0);
            if (bv != &local.bv)
                free(bv);
        }
    }
    gguf_spans_release(p->sp, (int)p->n, r == 0);
    if (p->sp != p->inl)
        free(p->sp);
}

void ggfs_read_raw(fuse_req_t req, const struct state *st, uint64_t idx, size_t size, off_t off)
{
    const struct gguf_tensor *t = st->tens[idx].t;
    if ((uint64_t)off >= t->nbytes)
        return (void)fuse_reply_buf(req, NULL, 0);
    if (size > t->nbytes - (uint64_t)off)
        size = (size_t)(t->nbytes - (uint64_t)off);
    const struct gguf_shard *sh = &st->model->shards[st->tens[idx].shard];
    struct pieces p;
    pieces_init(&p, NULL);
    piece_source(&p, st, st->tens[idx].shard, sh->gf->data_off + t->offset + (uint64_t)off, size);
    pieces_reply(req, &p);
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
    struct pieces p;
    pieces_init(&p, NULL);
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
 * pinned (core_f32_pin) and handed to use(), which releases it; 0 or an
 * errno. */
static int span_f32(struct state *st, uint64_t tensor, uint64_t in, uint64_t n,
                    struct f32_stream *s,
                    void (*use)(void *ctx, struct cache_block *b, const char *src, size_t len),
                    void *ctx)
{
    while (n) {
        struct f32_pin p;
        int err = core_f32_pin(st, s, tensor, in, n, &p);
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

/* a pinned f32 chunk let go of after the reply */
static void put_chunk(const struct gguf_span *sp, bool used)
{
    cache_put(sp->owner, sp->hold, used ? sp->len : 0);
}

/* a chunk's bytes as a piece of the reply: pinned until it is sent (at
 * most F32_PIN_MAX), else copied into a buffer of the pieces' */
static void use_piece(void *ctx, struct cache_block *b, const char *src, size_t len)
{
    struct pieces *p = ctx;
    if (p->n_pins < F32_PIN_MAX && room(p, 1)) {
        p->n_pins++;
        p->sp[p->n++] = (struct gguf_span){ .mem = src, .fd = -1, .len = len,
                                            .release = put_chunk, .owner = p->cache,
                                            .hold = b };
        return;
    }
    char *buf = piece_buf(p, len);
    if (buf)
        memcpy(buf, src, len);
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
            e = file_changed(st, r->shard) ? EIO :
                gguf_source_read_all(sh->src, dst, (size_t)n,
                                     sh->gf->data_off + r->t->offset + in);
            if (e == EIO)
                core_source_failed(st->fs, sh->src, sh->gf->data_off + r->t->offset + in, n);
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
    pieces_init(p, st->fs->cache);
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
    int e = core_safetensors(st, &l);
    struct pieces p;
    uint64_t a = 0, end = 0;
    if (!st_read_start(req, st, e, l, size, off, &p, &a, &end))
        return;
    for (uint64_t j = gguf_st_find(l, a); a < end && !p.err && j < l->n_span; j++) {
        const struct gguf_st_span *sp = &l->span[j];
        if (sp->start + sp->len <= a)
            continue;                   /* an empty span */
        if (p.n >= ST_PIECES) {
            char *buf = piece_buf(&p, (size_t)(end - a));
            if (buf)
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
    if (f32 && !core_f32_is_raw(st, idx)) {
        struct copy_to c = { st->fs->cache, dst };
        return span_f32(st, idx, off, len, NULL, use_copy, &c);
    }
    const struct tref *r = &st->tens[idx];
    const struct gguf_shard *sh = &st->model->shards[r->shard];
    uint64_t pos = sh->gf->data_off + r->t->offset + off;
    int e = file_changed(st, r->shard) ? EIO :
            gguf_source_read_all(sh->src, dst, (size_t)len, pos);
    if (e == EIO)
        core_source_failed(st->fs, sh->src, pos, len);
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
    int e = core_hf_safetensors(st, &l);
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
               p.n < ST_PIECES) {
            struct gguf_hf_seg g;
            gguf_hf_seg(h, in, n, &g);
            uint64_t src = h->src[g.src];
            if (h->f32 && !core_f32_is_raw(st, src)) {
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
        char *buf = piece_buf(&p, (size_t)(end - a));
        if (buf)
            p.err = hf_copy_rest(st, l, j, a, end, buf);
        break;
    }
    pieces_reply(req, &p);
}

/* ---- raw.npy and f32.npy ---------------------------------------------------- */

void ggfs_read_npy(fuse_req_t req, struct state *st, uint64_t idx, enum tensor_file tf,
                   size_t size, off_t off, struct f32_stream *s)
{
    char hdr[NPY_HEADER_MAX];
    size_t hl = core_npy_header(st, idx, tf, hdr);
    if (!hl)
        return (void)fuse_reply_err(req, ENOENT);
    bool raw = tf == TF_RAW_NPY || core_f32_is_raw(st, idx);
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
    struct pieces p;
    pieces_init(&p, NULL);
    const struct gguf_shard *sh = &st->model->shards[st->tens[idx].shard];
    piece_mem(&p, hdr + a, pre);
    if (!p.err)
        piece_source(&p, st, st->tens[idx].shard, sh->gf->data_off + t->offset, rest);
    pieces_reply(req, &p);
}

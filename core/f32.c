/*
 * core/f32.c — the f32 view: dequantizing a chunk of a tensor into the cache,
 * and the workers that fill the chunks ahead of a sequential reader.
 */
#include "core/f32.h"
#include "core/state.h"
#include "core/underneath.h"
#include "cache/prefetch.h"
#include "cache/stream.h"

#include "gguf/types.h"
#include "kernels/dequant.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

size_t core_chunk_len(const struct state *st, uint64_t tensor, uint64_t chunk)
{
    uint64_t per = st->fs->chunk_bytes / sizeof(float);
    uint64_t n = st->tens[tensor].t->n_elems - chunk * per;
    return (size_t)(n < per ? n : per);
}

uint64_t core_chunks(const struct state *st, uint64_t tensor)
{
    uint64_t per = st->fs->chunk_bytes / sizeof(float);
    return (st->tens[tensor].t->n_elems + per - 1) / per;
}

/* Per-thread buffer for the source bytes of one chunk.  libfuse starts and
 * ends worker threads as load changes, so the buffer is freed by a
 * thread-exit destructor rather than left behind. */
struct srcbuf {
    uint8_t *p;
    size_t cap;
};
static pthread_key_t src_key;
static pthread_once_t src_once = PTHREAD_ONCE_INIT;

static void srcbuf_free(void *v)
{
    struct srcbuf *b = v;
    free(b->p);
    free(b);
}

static void src_key_init(void) { pthread_key_create(&src_key, srcbuf_free); }

static uint8_t *thread_buffer(size_t bytes)
{
    pthread_once(&src_once, src_key_init);
    struct srcbuf *b = pthread_getspecific(src_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b || pthread_setspecific(src_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (bytes > b->cap) {
        uint8_t *np = realloc(b->p, bytes);
        if (!np)
            return NULL;
        b->p = np;
        b->cap = bytes;
    }
    return b->p;
}

/* The state a fill reads is the call's (cache/cache.h: the caller of
 * cache_get or cache_fill_claimed passes it); the caller's reference keeps
 * it alive through the fill, with no lock held. */
static struct prefetch *engine(const struct mount *fs);

struct cache_block *core_chunk_get(const struct state *st, uint64_t tensor, uint64_t chunk,
                                   size_t len, int *err)
{
    struct mount *fs = st->fs;
    return prefetch_get(engine(fs), fs->cache, tensor, chunk, len, (void *)st, err);
}

int core_f32_pin(const struct state *st, struct f32_stream *s, uint64_t tensor,
                 uint64_t off, size_t len, struct f32_pin *p)
{
    struct mount *fs = st->fs;
    uint64_t total = st->tens[tensor].t->n_elems * sizeof(float), cb = fs->chunk_bytes;
    p->n = p->len = 0;
    if (off >= total || !len)
        return 0;
    if (len > total - off)
        len = (size_t)(total - off);
    if (len > (F32_PIN_MAX - 1) * cb)
        len = (size_t)((F32_PIN_MAX - 1) * cb);
    uint64_t first = off / cb, last = (off + len - 1) / cb;
    size_t count = (size_t)(last - first + 1);
    core_prefetch(fs, st, s, tensor, first, last, off + len);
    int err = 0;
    size_t k = count;               /* pinned: [k, count), last first (see f32.h) */
    while (k > 0) {
        uint64_t c = first + k - 1;
        p->b[k - 1] = core_chunk_get(st, tensor, c, core_chunk_len(st, tensor, c) * sizeof(float),
                                     &err);
        if (!p->b[k - 1])
            break;
        k--;
    }
    if (k > 0) {
        for (size_t i = k; i < count; i++)
            cache_put(fs->cache, p->b[i], 0);
        return err ? err : EIO;
    }
    uint64_t pos = off, end = off + len;
    for (size_t i = 0; i < count; i++) {
        uint64_t c_start = (first + i) * cb;
        uint64_t c_end = c_start + cache_len(p->b[i]);
        uint64_t to = end < c_end ? end : c_end;
        p->iov[i].iov_base = (char *)cache_data(p->b[i]) + (pos - c_start);
        p->iov[i].iov_len = (size_t)(to - pos);
        pos = to;
    }
    p->n = count;
    p->len = len;
    return 0;
}

void core_f32_unpin(struct mount *fs, struct f32_pin *p, bool served)
{
    for (size_t i = 0; i < p->n; i++)
        cache_put(fs->cache, p->b[i], served ? p->iov[i].iov_len : 0);
    p->n = p->len = 0;
}

/*
 * Fills one chunk.  The source bytes are read into the chunk's own block,
 * at its end, and dequantized forward from there: block k's floats end
 * before block k's source bytes begin as long as the source is no larger
 * than the floats, so each kern_dequant call gets a run of blocks whose
 * floats do not overlap its source (the kernels' contract), the first run
 * most of the chunk, each next one a fraction of the rest.  The slack past
 * the chunk (F32_CHUNK_SLACK) makes the last runs long.  No buffer besides
 * the block is touched: a thread's first fill costs no new memory.  Types
 * whose source is larger than their floats (f64, i64) go through a
 * per-thread buffer.
 */
int core_fill_chunk(void *ctx, void *call, uint64_t tensor, uint64_t chunk, void *dst,
                    size_t len)
{
    struct mount *fs = ctx;
    size_t n = len / sizeof(float);
    const struct state *st = call;         /* the caller holds a reference */
    if (!st || tensor >= st->n_tensors)
        return EINVAL;
    const struct tref *r = &st->tens[tensor];
    const struct ggml_type_info *ti = ggml_type_get(r->t->type);
    size_t room = fs->chunk_bytes + F32_CHUNK_SLACK;
    uint64_t first_block = chunk * (fs->chunk_bytes / sizeof(float) / ti->blck_elems);
    size_t n_blocks = n / ti->blck_elems;
    size_t bytes = n_blocks * ti->blck_bytes;
    size_t out_bytes = ti->blck_elems * sizeof(float);   /* floats of one block */
    bool in_place = bytes <= len;
    uint8_t *buf = in_place ? (uint8_t *)dst + room - bytes : thread_buffer(bytes);
    if (!buf)
        return ENOMEM;
    const struct gguf_shard *sh = &st->model->shards[r->shard];
    uint64_t pos = sh->gf->data_off + r->t->offset + first_block * ti->blck_bytes;
    /* a read error, or the file shrank underneath */
    if (gguf_source_read_all(sh->src, buf, bytes, pos) != 0) {
        core_source_failed(fs, sh->src, pos, bytes);
        return EIO;
    }
    /* the file changed underneath (underneath.c): checked after the read,
     * so bytes read before a change are kept and bytes read after it are
     * not (a write's mtime is updated before its bytes land) */
    if (core_under_check_shard(fs, st, r->shard))
        return EIO;
    if (sh->gf->enc.big_endian)       /* a type with a defined layout (nodes.c) */
        kern_dequant_be_swap(r->t->type, buf, n_blocks);
    if (!in_place) {
        kern_dequant(r->t->type, buf, dst, n_blocks);
        return 0;
    }
    size_t src_off = room - bytes;
    for (size_t k0 = 0; k0 < n_blocks;) {
        /* the blocks whose floats end by where block k0's source begins */
        size_t k1 = (src_off + k0 * ti->blck_bytes) / out_bytes;
        if (k1 > n_blocks)
            k1 = n_blocks;
        if (k1 <= k0)           /* a block larger than the slack: none is */
            return EIO;
        kern_dequant(r->t->type, buf + k0 * ti->blck_bytes,
                     (float *)dst + k0 * ti->blck_elems, k1 - k0);
        k0 = k1;
    }
    return 0;
}

/* ---- dequantization workers ---------------------------------------------
 *
 * The kernel sends a sequential reader's requests one readahead window at a
 * time; to use every core for one reader, workers fill the chunks ahead of
 * it into the cache while the reader's own thread serves the chunk it
 * asked for.  The workers are a prefetch engine's threads
 * (cache/prefetch.h: it bounds, queues, runs and hands back the fills);
 * what to fill ahead is decided here.  Each open f32 file (a stream)
 * learns its reader's pattern (cache/stream.h, the detector and ramp the
 * remote blocks use too): while reads follow each other, the depth of
 * chunks queued ahead of the read doubles with each read that goes
 * further, from 1 up to the workers' depth; a read elsewhere sets it to 0
 * (no prefetch on random access).  A read
 * that needs several chunks queues all but the first at the front of the
 * queue, so they are filled in parallel with it.  Nothing waits for the
 * queue: a chunk that a worker has not started is taken back and filled by
 * the reader that needs it (prefetch_get; a queued chunk the reader has
 * passed would be filled for nothing), and one that a worker is filling is
 * waited for (cache.c).  Each queued chunk holds a reference to the
 * version it was queued from (tensor data is the same in every version),
 * so a fill runs with no lock of the mount held: it may wait on a remote
 * server, and a commit's swap must not wait for it.
 *
 * What all readers together have queued or filling at once is bounded by
 * the engine's limit, the workers' depth: at most a quarter of what the
 * cache holds, so chunks filled ahead are not evicted by other chunks
 * filled ahead before their reader comes.  The depth of each sequential
 * stream is at most that bound shared by the streams reading sequentially:
 * without the share, many readers each queueing their full depth would
 * together queue more than the cache holds, and chunks filled ahead would
 * be evicted before their reader came and filled again
 * (tests/integration/test_prefetch.py counts the fills).
 */

/* How far behind the furthest chunk read a read may start and still count
 * as sequential: the requests of a readahead window of 16 MiB, which the
 * kernel sends at once and which may be served in any order; and how far
 * past it (one chunk skipped: one request overtaking another). */
#define SEQ_BEHIND 16
#define SEQ_GAP 1

struct f32_stream {
    struct glist link;              /* in fs->streams, under pend_mu */
    /* under the workers' mu (requests of one file may run at once) */
    uint64_t tensor;                /* the tensor it follows (0 at first) */
    struct stream pat;              /* its pattern (cache/stream.h): the
                                       window is the chunks to queue ahead */
    bool seq;                       /* counted in the workers' n_seq */
};

struct workers {
    struct prefetch *pf;            /* the threads and their queue */
    pthread_mutex_t mu;             /* the streams' patterns and n_seq */
    unsigned depth;                 /* the most chunks queued ahead of all reads */
    unsigned n_seq;                 /* streams reading sequentially */
};

/* The workers' prefetch engine, or NULL when none runs. */
static struct prefetch *engine(const struct mount *fs)
{
    return fs->workers ? fs->workers->pf : NULL;
}

/* The engine's run callback: fills a chunk from the version it was queued
 * from, or drops it (the fill refuses without a state: EINVAL, not
 * cached), and lets that version go. */
static void run_chunk(void *ctx, struct cache_block *blk, void *arg, bool drop)
{
    struct mount *fs = ctx;
    struct state *st = arg;
    cache_fill_claimed(fs->cache, blk, drop ? NULL : st);
    core_state_put(st);
}

int core_workers_start(struct mount *fs, unsigned n)
{
    /* Prefetching more chunks than a quarter of the cache would evict what
     * the readers are about to use. */
    uint64_t cap = cache_capacity_blocks(fs->cache) / 4;
    unsigned depth = 2 * n < cap ? 2 * n : (unsigned)cap;
    if (n == 0 || depth == 0)
        return 0;
    struct workers *wk = calloc(1, sizeof *wk);
    if (!wk)
        return ENOMEM;
    wk->pf = prefetch_new(fs->cache, depth, run_chunk, fs);
    if (!wk->pf) {
        free(wk);
        return ENOMEM;
    }
    wk->depth = depth;
    pthread_mutex_init(&wk->mu, NULL);
    fs->workers = wk;
    return prefetch_start(wk->pf, n) ? 0 : EAGAIN;
}

void core_workers_stop(struct mount *fs)
{
    struct workers *wk = fs->workers;
    if (!wk)
        return;
    prefetch_free(wk->pf);          /* joins; what was queued is dropped */
    pthread_mutex_destroy(&wk->mu);
    free(wk);
    fs->workers = NULL;
}

/* Queues chunk c of tensor for the workers (at the front if urgent),
 * filled from st (a reference the caller holds) unless it is cached or
 * being filled already; false when the engine's bound is reached. */
static bool enqueue(struct workers *wk, const struct state *st, uint64_t tensor, uint64_t c,
                    bool urgent)
{
    struct state *ref = core_state_ref((struct state *)st);
    enum prefetch_added r = prefetch_add(wk->pf, tensor, c,
                                         core_chunk_len(st, tensor, c) * sizeof(float), ref,
                                         urgent);
    if (r != PREFETCH_QUEUED)
        core_state_put(ref);        /* not the last: the caller holds one */
    return r != PREFETCH_FULL;
}

/* How far ahead to queue for a read of chunks [first, last] ending at
 * byte end of stream s (learns the pattern, see above): the chunks from
 * *from to *to (none: *from > *to).  Ahead of the furthest chunk read so
 * far, not of this read, and past what earlier reads queued: the kernel
 * sends a window's requests at once, and a request that runs late must
 * not queue chunks a later one has read already (they would be filled
 * again). */
static void stream_ahead(struct workers *wk, struct f32_stream *s, uint64_t first,
                         uint64_t last, uint64_t end, uint64_t n_chunks, uint64_t *from,
                         uint64_t *to)
{
    bool seq = stream_continues(&s->pat, first, SEQ_BEHIND, SEQ_GAP);
    if (seq != s->seq) {
        s->seq = seq;
        wk->n_seq += seq ? 1 : -1u;
    }
    if (!seq) {
        stream_start(&s->pat, first, last, end);
        *from = 1;
        *to = 0;
        return;
    }
    /* this stream's share of what may be queued ahead, at least one */
    unsigned max = wk->n_seq > 1 ? wk->depth / wk->n_seq : wk->depth;
    if (max == 0)
        max = 1;
    stream_move(&s->pat, last, end, max, n_chunks, from, to);
}

void core_prefetch(struct mount *fs, const struct state *st, struct f32_stream *s,
                   uint64_t tensor, uint64_t first, uint64_t last, uint64_t end)
{
    struct workers *wk = fs->workers;
    if (!wk)
        return;
    uint64_t n_chunks = core_chunks(st, tensor);
    /* The stream moves and the chunks ahead are queued at once (under the
     * streams' lock): a read that computed where to prefetch from before
     * another read went further would queue chunks that one has read. */
    pthread_mutex_lock(&wk->mu);
    uint64_t from = 1, to = 0;
    if (s && s->tensor != tensor) {
        s->tensor = tensor;            /* another tensor: from its start */
        stream_restart(&s->pat);
    }
    if (s)
        stream_ahead(wk, s, first, last, end, n_chunks, &from, &to);
    /* needed now, in order: the front of the queue gets first+1 last */
    for (uint64_t c = last; c > first; c--)
        enqueue(wk, st, tensor, c, true);
    for (uint64_t c = from; c <= to; c++)
        if (!enqueue(wk, st, tensor, c, false)) {
            stream_unclaim(&s->pat, s->pat.gen, c, to);    /* for a later read */
            break;
        }
    pthread_mutex_unlock(&wk->mu);
}

/* ---- streams ---------------------------------------------------------------- */

struct f32_stream *core_stream_new(struct mount *fs)
{
    struct f32_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_lock(&fs->pend_mu);
    glist_add(&fs->streams, &s->link);
    pthread_mutex_unlock(&fs->pend_mu);
    return s;
}

void core_stream_free(struct mount *fs, struct f32_stream *s)
{
    struct workers *wk = fs->workers;
    if (wk && s->seq) {
        pthread_mutex_lock(&wk->mu);
        wk->n_seq--;
        pthread_mutex_unlock(&wk->mu);
    }
    pthread_mutex_lock(&fs->pend_mu);
    glist_del(&s->link);
    pthread_mutex_unlock(&fs->pend_mu);
    free(s);
}

void core_streams_free(struct mount *fs)
{
    while (!glist_empty(&fs->streams)) {
        struct glist *l = fs->streams.next;
        glist_del(l);
        free(GLIST_ENTRY(l, struct f32_stream, link));
    }
}

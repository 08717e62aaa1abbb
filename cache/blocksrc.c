/* cache/blocksrc.c — a block cache for slow byte sources (see blocksrc.h).
 *
 * The fetch threads are a prefetch engine's (prefetch.h): it claims the
 * blocks it queues (cache_claim: in the table as being filled, so a
 * reader of the same block waits for them, or takes the job back, with
 * prefetch_get, when no thread has started it) and runs them on its
 * threads (cache_fill_claimed).  The cache's fill callback learns
 * which wrapped source a block is of from the call that fills it (a
 * struct fill_call: the reader's in cache_get, the fetch thread's in
 * cache_fill_claimed; a source NULL drops the block).  Block keys are
 * (source id, block number); ids are never reused, so a closed source's
 * blocks are never found by another.
 */
#include "blocksrc.h"
#include "cache.h"
#include "prefetch.h"
#include "stream.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

struct rcache {
    pthread_mutex_t mu;             /* refs and next_id */
    struct cache *cache;
    struct prefetch *pf;            /* the fetch threads */
    size_t block_bytes;
    unsigned fetchers;
    unsigned limit;                 /* fills queued or running, at most */
    unsigned max_window;            /* readahead, blocks */
    unsigned refs;                  /* the creator's and one per wrapper */
    uint64_t next_id;
    uint64_t fail_hold_ns, fail_slow_ns;
    _Atomic uint64_t hits, misses, prefetched, fill_errors, disk_hits, disk_spans, failed_held;
};

struct blocksrc {
    struct gguf_source s;
    struct rcache *rc;
    struct gguf_source *inner;
    uint64_t id;
    uint64_t direct_below;
    uint64_t nblocks;
    struct blocksrc_disk disk;
    pthread_mutex_t mu;             /* the streams and the failures */
    struct stream_set streams;
    /* blocks whose fill failed lately (a ring; at_ns 0: a free entry) */
    struct failed {
        uint64_t block;
        uint64_t at_ns;             /* CLOCK_MONOTONIC */
    } failed[BLOCKSRC_FAILED];
    unsigned failed_next;
    _Atomic unsigned n_failed;      /* entries in use */
};

/* What a fill is for: the source whose block it fills (NULL: drop it);
 * set by the fill: whether it ran (for a reader: a miss). */
struct fill_call {
    struct blocksrc *src;
    bool filled;
};

static const struct gguf_source_ops blocksrc_ops;

static size_t block_len(const struct blocksrc *b, uint64_t k)
{
    uint64_t a = k * b->rc->block_bytes;
    uint64_t n = b->s.size - a;
    return n < b->rc->block_bytes ? (size_t)n : b->rc->block_bytes;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Block k's fill from the wrapped source failed slowly (remembered), or
 * one succeeded: the source answers again, and every failure is
 * forgotten. */
static void note_fill(struct blocksrc *b, uint64_t k, bool ok)
{
    if (!b->rc->fail_hold_ns || (ok && !atomic_load(&b->n_failed)))
        return;
    pthread_mutex_lock(&b->mu);
    if (ok) {
        memset(b->failed, 0, sizeof b->failed);
        atomic_store(&b->n_failed, 0);
    } else {
        struct failed *f = NULL;
        for (unsigned i = 0; i < BLOCKSRC_FAILED && !f; i++)
            if (b->failed[i].at_ns && b->failed[i].block == k)
                f = &b->failed[i];
        if (!f) {
            f = &b->failed[b->failed_next];
            b->failed_next = (b->failed_next + 1) % BLOCKSRC_FAILED;
            if (!f->at_ns)
                atomic_fetch_add(&b->n_failed, 1);
        }
        *f = (struct failed){ k, now_ns() };
    }
    pthread_mutex_unlock(&b->mu);
}

/* Whether block k's fill failed slowly less than fail_hold_ns ago. */
static bool failed_lately(struct blocksrc *b, uint64_t k)
{
    if (!b->rc->fail_hold_ns || !atomic_load(&b->n_failed))
        return false;
    uint64_t now = now_ns();
    bool held = false;
    pthread_mutex_lock(&b->mu);
    for (unsigned i = 0; i < BLOCKSRC_FAILED && !held; i++)
        held = b->failed[i].at_ns && b->failed[i].block == k &&
               now - b->failed[i].at_ns < b->rc->fail_hold_ns;
    pthread_mutex_unlock(&b->mu);
    return held;
}

/* The cache's fill callback. */
static int fill_block(void *ctx, void *call, uint64_t id, uint64_t k, void *dst, size_t len)
{
    struct rcache *rc = ctx;
    struct fill_call *fc = call;
    struct blocksrc *b = fc->src;
    if (!b || b->id != id)
        return ECANCELED;           /* dropped: a closing source, or stopping */
    fc->filled = true;
    /* The persistent disk cache goes here: a block it holds costs no
     * request; a block fetched is handed to it. */
    if (b->disk.read && b->disk.read(b->disk.ctx, k, dst, len)) {
        atomic_fetch_add(&rc->disk_hits, 1);
        return 0;
    }
    uint64_t t0 = rc->fail_hold_ns ? now_ns() : 0;
    int e = gguf_source_read_all(b->inner, dst, len, k * rc->block_bytes);
    if (e) {
        atomic_fetch_add(&rc->fill_errors, 1);
        /* a slow failure is held (blocksrc.h, "Errors") */
        if (e == EIO && rc->fail_hold_ns && now_ns() - t0 >= rc->fail_slow_ns)
            note_fill(b, k, false);
        return e;
    }
    note_fill(b, k, true);
    if (b->disk.write)
        b->disk.write(b->disk.ctx, k, dst, len);
    return 0;
}

/* ---- the fetch threads ----------------------------------------------------- */

/* The engine's run callback: fills a block for the source it was queued
 * for, or drops it (a closing source, stopping). */
static void run_fetch(void *ctx, struct cache_block *blk, void *arg, bool drop)
{
    struct rcache *rc = ctx;
    struct fill_call fc = { .src = drop ? NULL : arg };
    cache_fill_claimed(rc->cache, blk, &fc);
}

/* Queues block k of b for the fetch threads.  false when the in-flight
 * limit is reached (or no thread runs); true when queued, or when there
 * is nothing to do (cached, being filled, no memory). */
static bool enqueue(struct rcache *rc, struct blocksrc *b, uint64_t k)
{
    enum prefetch_added r = prefetch_add(rc->pf, b->id, k, block_len(b, k), b, false);
    if (r == PREFETCH_QUEUED)
        atomic_fetch_add(&rc->prefetched, 1);
    return r != PREFETCH_FULL;
}

bool rcache_start(struct rcache *rc)
{
    prefetch_start(rc->pf, rc->fetchers);
    struct prefetch_stats ps;
    prefetch_get_stats(rc->pf, &ps);
    return ps.threads > 0;
}

void rcache_stop(struct rcache *rc)
{
    prefetch_stop(rc->pf);
}

/* ---- the rcache ------------------------------------------------------------ */

struct rcache *rcache_new(const struct rcache_opts *o)
{
    if (o->block_bytes < 4096 || o->block_bytes > (1u << 30) || o->fetchers < 1 ||
        o->fetchers > BLOCKSRC_MAX_FETCHERS)
        return NULL;
    struct rcache *rc = calloc(1, sizeof *rc);
    if (!rc)
        return NULL;
    rc->block_bytes = o->block_bytes;
    rc->fetchers = o->fetchers;
    rc->fail_hold_ns = (uint64_t)o->fail_hold_ms * 1000000u;
    rc->fail_slow_ns = (uint64_t)o->fail_slow_ms * 1000000u;
    rc->cache = cache_new(o->block_bytes, o->capacity, fill_block, rc);
    if (!rc->cache) {
        free(rc);
        return NULL;
    }
    /* A block read once may be read again (raw, then model.gguf; or after
     * the kernel dropped its pages): worth a request, so kept while there
     * is room; used-up blocks still go first once the cache is full. */
    cache_keep_used(rc->cache, true);
    /* Blocks pinned by fills ahead stay within half the cache, the
     * readahead within a quarter: the rest is for what readers use. */
    uint64_t nb = cache_capacity_blocks(rc->cache);
    rc->limit = (unsigned)(nb / 2 < o->fetchers ? nb / 2 : o->fetchers);
    uint64_t w = nb / 4 < 2ull * o->fetchers ? nb / 4 : 2ull * o->fetchers;
    rc->max_window = (unsigned)w;
    rc->pf = prefetch_new(rc->cache, rc->limit, run_fetch, rc);
    if (!rc->pf) {
        cache_free(rc->cache);
        free(rc);
        return NULL;
    }
    pthread_mutex_init(&rc->mu, NULL);
    rc->refs = 1;
    return rc;
}

static void rcache_unref(struct rcache *rc)
{
    pthread_mutex_lock(&rc->mu);
    bool last = --rc->refs == 0;
    pthread_mutex_unlock(&rc->mu);
    if (!last)
        return;
    prefetch_free(rc->pf);
    cache_free(rc->cache);
    pthread_mutex_destroy(&rc->mu);
    free(rc);
}

void rcache_put(struct rcache *rc)
{
    if (rc)
        rcache_unref(rc);
}

void rcache_get_stats(struct rcache *rc, struct rcache_stats *out)
{
    struct cache_stats cs;
    cache_get_stats(rc->cache, &cs);
    memset(out, 0, sizeof *out);
    out->hits = atomic_load(&rc->hits);
    out->misses = atomic_load(&rc->misses);
    out->prefetched = atomic_load(&rc->prefetched);
    out->fill_errors = atomic_load(&rc->fill_errors);
    out->failed_held = atomic_load(&rc->failed_held);
    out->disk_hits = atomic_load(&rc->disk_hits);
    out->disk_spans = atomic_load(&rc->disk_spans);
    out->bytes_held = cs.bytes_held;
    out->blocks_held = cs.blocks_held;
    out->capacity = cs.capacity;
    out->block_bytes = cs.block_bytes;
    out->prefetch_wasted = cs.prefetch_wasted;
    struct prefetch_stats ps;
    prefetch_get_stats(rc->pf, &ps);
    out->inflight = ps.inflight;
    out->inflight_max = ps.inflight_max;
}

/* ---- the wrapped source ---------------------------------------------------- */

/* Follows the streams with a read of blocks [first, last] ending at end,
 * and queues the blocks its stream's window asks for (with skip_disk,
 * only those the disk cache does not have).  true when the read continues
 * a long stream: one that has gone on for more than its full window.
 *
 * The stream lock is held only to move the stream and claim the blocks to
 * queue (pf_next moves past them at once, so a concurrent read of the
 * same stream claims the ones after); they are queued (the prefetch
 * engine's lock, then the cache's) and the disk hooks asked with no lock
 * of ours held.  Blocks the engine had no room for are given back, unless
 * the stream moved on or its slot went to another reader meanwhile (then
 * they are left to the reads: queueing ahead is a hint). */
static bool readahead(struct blocksrc *b, uint64_t first, uint64_t last, uint64_t end,
                      bool skip_disk)
{
    struct rcache *rc = b->rc;
    if (!rc->max_window)
        return false;
    pthread_mutex_lock(&b->mu);
    struct stream *s = stream_find(&b->streams, first, last, end);
    if (!s) {
        /* a new reader, or a jump: nothing ahead until it goes on */
        pthread_mutex_unlock(&b->mu);
        return false;
    }
    uint64_t from, to;
    stream_move(s, last, end, rc->max_window, b->nblocks, &from, &to);
    bool long_stream = stream_long(s, first, rc->max_window);
    uint64_t gen = s->gen;
    pthread_mutex_unlock(&b->mu);
    uint64_t k = from;
    for (; k <= to; k++) {
        if (skip_disk && b->disk.has(b->disk.ctx, k)) {
            if (b->disk.check_ahead)
                b->disk.check_ahead(b->disk.ctx, k);
            continue;
        }
        if (!enqueue(rc, b, k))
            break;
    }
    if (k <= to) {
        pthread_mutex_lock(&b->mu);
        stream_unclaim(s, gen, k, to);  /* the rest is queued by a later read */
        pthread_mutex_unlock(&b->mu);
    }
    return long_stream;
}

/* Queues blocks (*next .. last] of a read for the fetch threads, while
 * the in-flight limit allows. */
static void top_up(struct blocksrc *b, uint64_t *next, uint64_t last)
{
    struct rcache *rc = b->rc;
    while (*next <= last && enqueue(rc, b, *next))
        ++*next;
}

/* Block k of a read, pinned (filled by this thread if no one has it);
 * NULL with *err. */
static struct cache_block *get_block(struct blocksrc *b, uint64_t k, int *err)
{
    struct rcache *rc = b->rc;
    /* its fetch failed slowly a moment ago: the same answer, without
     * asking again (blocksrc.h, "Errors") */
    if (failed_lately(b, k)) {
        atomic_fetch_add(&rc->failed_held, 1);
        *err = EIO;
        return NULL;
    }
    /* queued and no fetch thread has taken it yet: filled here rather
     * than behind the queue */
    *err = 0;
    struct fill_call fc = { .src = b };
    struct cache_block *blk = prefetch_get(rc->pf, rc->cache, b->id, k, block_len(b, k), &fc, err);
    if (!blk)
        *err = *err == ENOMEM ? ENOMEM : EIO;
    else
        atomic_fetch_add(fc.filled ? &rc->misses : &rc->hits, 1);
    return blk;
}

/* A pinned block lent as a span: unpinned, its bytes counted as read
 * when they were served. */
static void unpin_span(const struct gguf_span *sp, bool used)
{
    cache_put(sp->owner, sp->hold, used ? sp->len : 0);
}

/* Pins the blocks that hold [a, end) (after the prefix) and points sp[]
 * at their bytes, at most max: 0 with their count in *count, or an errno
 * (nothing left pinned; ENOSPC: more than max blocks). */
static int pin_range(struct blocksrc *b, uint64_t a, uint64_t end, struct gguf_span *sp,
                     int max, int *count)
{
    struct rcache *rc = b->rc;
    uint64_t B = rc->block_bytes;
    uint64_t first = a / B, last = (end - 1) / B;
    *count = 0;
    if (last - first >= (uint64_t)max)
        return ENOSPC;
    uint64_t next = first + 1;      /* the read's next block to queue */
    top_up(b, &next, last);
    bool once = readahead(b, first, last, end, false);
    int n = 0;
    for (uint64_t k = first; k <= last; k++, n++) {
        top_up(b, &next, last);
        int err;
        struct cache_block *blk = get_block(b, k, &err);
        if (!blk) {
            gguf_spans_release(sp, n, false);
            return err;
        }
        if (once)
            cache_once(rc->cache, blk);
        uint64_t bs = k * B, be = bs + cache_len(blk);
        uint64_t to = end < be ? end : be;
        sp[n] = (struct gguf_span){ .mem = (uint8_t *)cache_data(blk) + (a - bs), .fd = -1,
                                    .len = (size_t)(to - a), .release = unpin_span,
                                    .owner = rc->cache, .hold = blk };
        a = to;
    }
    *count = n;
    return 0;
}

/* The most blocks one call of bs_read pins at once (then the next ones). */
#define READ_PINS 16

static ssize_t bs_read(struct gguf_source *s, void *vbuf, size_t len, uint64_t off)
{
    struct blocksrc *b = (struct blocksrc *)s;
    struct rcache *rc = b->rc;
    uint8_t *buf = vbuf;
    if (!(len = gguf_read_len(s->size, len, off)))
        return 0;
    size_t done = 0;
    if (off < b->direct_below) {
        /* the remote prefix: in memory already */
        uint64_t n = b->direct_below - off < len ? b->direct_below - off : len;
        int e = gguf_source_read_all(b->inner, buf, (size_t)n, off);
        if (e)
            return -e;
        done = (size_t)n;
        if (done == len)
            return (ssize_t)len;
    }
    uint64_t B = rc->block_bytes;
    uint64_t a = off + done, end = off + len;
    while (a < end) {
        /* at most READ_PINS blocks at a time */
        uint64_t stop = (a / B + READ_PINS) * B;
        if (stop > end)
            stop = end;
        struct gguf_span sp[READ_PINS];
        int n, e = pin_range(b, a, stop, sp, READ_PINS, &n);
        if (e)
            return -e;      /* the byte source's read: a negative errno */
        for (int i = 0; i < n; i++) {
            memcpy(buf + (a - off), sp[i].mem, sp[i].len);
            a += sp[i].len;
        }
        gguf_spans_release(sp, n, true);
    }
    return (ssize_t)len;
}

/* A block held by the disk cache lent as a span: let go of. */
static void release_disk(const struct gguf_span *sp, bool used)
{
    (void)used;
    struct blocksrc *b = sp->owner;
    b->disk.release(b->disk.ctx, (uint64_t)(uintptr_t)sp->hold);
}

/* When the disk cache holds every block of [a, end) (its hold hook),
 * points sp[] at where the bytes are in its file, in order, each block
 * held until its span is released, and follows the reader's stream as a
 * read would (the blocks its readahead asks for that the disk cache does
 * not have are fetched ahead; those it has are handed to check_ahead):
 * their count.  0 with nothing held when one of them is not held, when
 * there is no disk cache with hold, or when more than max blocks would be
 * needed. */
static int hold_disk(struct blocksrc *b, uint64_t a, uint64_t end, struct gguf_span *sp,
                     int max)
{
    if (!b->disk.hold || !b->disk.has || !b->disk.release)
        return 0;
    uint64_t B = b->rc->block_bytes;
    uint64_t first = a / B, last = (end - 1) / B;
    if (last - first >= (uint64_t)max)
        return 0;
    int n = 0;
    for (uint64_t k = first; k <= last; k++, n++) {
        int fd;
        uint64_t pos;
        if (!b->disk.hold(b->disk.ctx, k, block_len(b, k), &fd, &pos)) {
            gguf_spans_release(sp, n, false);
            return 0;
        }
        uint64_t bs = k * B, to = end < bs + block_len(b, k) ? end : bs + block_len(b, k);
        sp[n] = (struct gguf_span){ .fd = fd, .pos = pos + (a - bs), .len = (size_t)(to - a),
                                    .release = release_disk, .owner = b,
                                    .hold = (void *)(uintptr_t)k };
        a = to;
    }
    readahead(b, first, last, end, true);
    atomic_fetch_add(&b->rc->disk_spans, (uint64_t)n);
    return n;
}

/* The prefix is the wrapped source's (memory); past it, the disk cache's
 * file when it holds every block of the rest, else the pinned blocks. */
static int bs_spans(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp,
                    int max, int *count)
{
    struct blocksrc *b = (struct blocksrc *)s;
    uint64_t end = off + len;
    int n = 0;
    if (off < b->direct_below) {
        uint64_t pl = b->direct_below - off < len ? b->direct_below - off : len;
        int e = gguf_source_spans(b->inner, off, (size_t)pl, sp, max, &n);
        if (e)
            return e;
        off += pl;
    }
    if (off < end) {
        int m = n < max ? hold_disk(b, off, end, sp + n, max - n) : 0;
        int e = 0;
        if (!m)
            e = n < max ? pin_range(b, off, end, sp + n, max - n, &m) : ENOSPC;
        if (e) {
            gguf_spans_release(sp, n, false);
            return e;
        }
        n += m;
    }
    *count = n;
    return 0;
}

static void bs_close(struct gguf_source *s)
{
    struct blocksrc *b = (struct blocksrc *)s;
    struct rcache *rc = b->rc;
    prefetch_drop(rc->pf, b);
    gguf_source_close(b->inner);
    pthread_mutex_destroy(&b->mu);
    free(b);
    rcache_unref(rc);
}

static const struct gguf_source_ops blocksrc_ops = { .read = bs_read, .close = bs_close,
                                                     .spans = bs_spans };

enum gguf_err blocksrc_wrap(struct rcache *rc, struct gguf_source *inner, uint64_t direct_below,
                            const struct blocksrc_disk *disk, struct gguf_source **out)
{
    *out = NULL;
    struct blocksrc *b = calloc(1, sizeof *b);
    if (!b) {
        gguf_source_close(inner);
        return GGUF_E_NOMEM;
    }
    b->s.ops = &blocksrc_ops;
    b->s.size = inner->size;
    b->s.name = inner->name;            /* the inner source's, freed with it */
    b->s.identity = inner->identity;
    b->s.fd = -1;
    b->rc = rc;
    b->inner = inner;
    b->s.below = inner;
    b->direct_below = direct_below;
    b->nblocks = (inner->size + rc->block_bytes - 1) / rc->block_bytes;
    if (disk)
        b->disk = *disk;
    pthread_mutex_init(&b->mu, NULL);
    pthread_mutex_lock(&rc->mu);
    rc->refs++;
    b->id = rc->next_id++;
    pthread_mutex_unlock(&rc->mu);
    *out = &b->s;
    return GGUF_OK;
}

void blocksrc_set_disk(struct gguf_source *s, const struct blocksrc_disk *disk)
{
    ((struct blocksrc *)s)->disk = *disk;
}

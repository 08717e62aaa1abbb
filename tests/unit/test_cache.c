/*
 * tests/unit/test_cache.c — the block cache (fs/cache.h), without FUSE:
 * CLOCK eviction and the byte bound, pinning, placeholders (a chunk is
 * filled once, its other getters wait for that fill), failed fills,
 * cache_clear, the counters, and 8 threads getting and putting many chunks
 * at once.
 *
 * Nothing here sleeps or looks at a clock.  The fill callback can be held
 * at a gate the test opens; a thread waiting inside the cache for another
 * thread's fill is seen through pthread_cond_wait, wrapped at link time
 * (-Wl,--wrap=pthread_cond_wait, tests/unit/meson.build): the wrapper
 * counts the waiting threads and wakes the test, which then knows they are
 * waiting (the filler needs the shard lock they release in the wait).
 * cmocka's assertions run on the main thread only: worker threads count
 * what they saw and the main thread checks the counts.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache.h"

/* ---- the fill callback and its gate --------------------------------------- */

/* Element i of chunk (t, c): exact in a float (24 bits), different from
 * chunk to chunk and from element to element. */
static float pattern(uint64_t t, uint64_t c, size_t i)
{
    return (float)((t * 1000003u + c * 7919u + i * 13u) & 0xFFFFFFu);
}

/* Floats of d that are not chunk (t, c)'s pattern, looking at every
 * step-th one (and the last). */
static size_t bad_floats(const float *d, uint64_t t, uint64_t c, size_t n, size_t step)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i += step)
        bad += d[i] != pattern(t, c, i);
    if (n && d[n - 1] != pattern(t, c, n - 1))
        bad++;
    return bad;
}

/* The fill callback's state: call counters, a gate, failures on demand.
 * The gate's chunk, gate_err, fail_mod and fail_once are set by the main
 * thread before it starts the threads that fill (pthread_create orders
 * them) or while no fill runs; entered, open and waiters change under mu. */
static struct fill_ctl {
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* entered, open or waiters changed */
    atomic_uint_fast64_t calls, failed;
    bool gated;                     /* a fill of (gate_t, gate_c) waits for open */
    uint64_t gate_t, gate_c;
    int gate_err;                   /* what the gated fill returns */
    unsigned entered;               /* gated fills that reached the gate */
    bool open;
    unsigned waiters;               /* threads that waited inside the cache */
    uint64_t fail_mod;              /* fills of keys % fail_mod == FAIL_REM fail */
    uint64_t fail_once_t, fail_once_c;  /* the next fill of it fails (EIO) */
    bool fail_once;
} F = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

#define FAIL_REM 7u

static uint64_t key(uint64_t t, uint64_t c) { return t * 64u + c; }

static int fill(void *ctx, uint64_t t, uint64_t c, float *dst, size_t n)
{
    struct fill_ctl *f = ctx;
    atomic_fetch_add(&f->calls, 1);
    for (size_t i = 0; i < n; i++)
        dst[i] = pattern(t, c, i);
    int err = 0;
    if (f->gated && t == f->gate_t && c == f->gate_c) {
        pthread_mutex_lock(&f->mu);
        f->entered++;
        pthread_cond_broadcast(&f->cv);
        while (!f->open)
            pthread_cond_wait(&f->cv, &f->mu);
        err = f->gate_err;
        pthread_mutex_unlock(&f->mu);
    }
    if (f->fail_mod && key(t, c) % f->fail_mod == FAIL_REM)
        err = EIO;
    if (f->fail_once && t == f->fail_once_t && c == f->fail_once_c) {
        f->fail_once = false;
        err = EIO;
    }
    if (err)
        atomic_fetch_add(&f->failed, 1);
    return err;
}

/* pthread_cond_wait of everything linked into this program (cache.c's
 * waits, and the waits above) comes here: a thread's first wait on a
 * condition other than F.cv is a thread waiting inside the cache. */
int __real_pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu);
int __wrap_pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu);

static _Thread_local bool counted;

int __wrap_pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    if (cv != &F.cv && !counted) {
        counted = true;
        pthread_mutex_lock(&F.mu);
        F.waiters++;
        pthread_cond_broadcast(&F.cv);
        pthread_mutex_unlock(&F.mu);
    }
    return __real_pthread_cond_wait(cv, mu);
}

static int reset_fill(void **state)
{
    (void)state;
    atomic_store(&F.calls, 0);
    atomic_store(&F.failed, 0);
    F.gated = false;
    F.gate_err = 0;
    F.entered = 0;
    F.open = false;
    F.waiters = 0;
    F.fail_mod = 0;
    F.fail_once = false;
    return 0;
}

/* Waits (on F.cv) until *what >= n. */
static void wait_count(unsigned *what, unsigned n)
{
    pthread_mutex_lock(&F.mu);
    while (*what < n)
        pthread_cond_wait(&F.cv, &F.mu);
    pthread_mutex_unlock(&F.mu);
}

static void open_gate(void)
{
    pthread_mutex_lock(&F.mu);
    F.open = true;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
}

/* ---- helpers --------------------------------------------------------------- */

#define SMALL 64u       /* floats in the chunks of the single-threaded tests */

static struct cache_stats stats(struct cache *c)
{
    struct cache_stats s;
    cache_get_stats(c, &s);
    return s;
}

/* Bytes one chunk of n floats counts for (floats and bookkeeping). */
static uint64_t chunk_cost(size_t n)
{
    struct cache *c = cache_new(UINT64_C(1) << 30, fill, &F);
    assert_non_null(c);
    int err = 0;
    struct cache_chunk *ch = cache_get(c, 0, 0, n, &err);
    assert_non_null(ch);
    cache_put(c, ch);
    uint64_t b = stats(c).bytes_held;
    cache_free(c);
    atomic_store(&F.calls, 0);
    assert_true(b >= n * sizeof(float));
    return b;
}

/* Gets chunk (t, c), checks every float, keeps it pinned. */
static struct cache_chunk *pin(struct cache *c, uint64_t t, uint64_t ch, size_t n)
{
    int err = 0;
    struct cache_chunk *k = cache_get(c, t, ch, n, &err);
    assert_non_null(k);
    assert_int_equal(err, 0);
    assert_int_equal(bad_floats(cache_data(k), t, ch, n, 1), 0);
    return k;
}

static void get_put(struct cache *c, uint64_t t, uint64_t ch, size_t n)
{
    cache_put(c, pin(c, t, ch, n));
}

/* ---- eviction -------------------------------------------------------------- */

/* Three chunks fit.  With every reference bit set the hand goes round once
 * and evicts the oldest; a chunk read again since then gets a second
 * chance and the next one in line goes instead. */
static void test_clock_second_chance(void **state)
{
    (void)state;
    uint64_t u = chunk_cost(SMALL);
    struct cache *c = cache_new(3 * u, fill, &F);
    assert_non_null(c);
    for (uint64_t k = 0; k < 3; k++)                    /* A B C */
        get_put(c, 0, k, SMALL);
    struct cache_stats s = stats(c);
    assert_int_equal(s.chunks_held, 3);
    assert_int_equal(s.bytes_held, 3 * u);
    assert_int_equal(s.evictions, 0);

    get_put(c, 0, 3, SMALL);                            /* D evicts A */
    assert_false(cache_contains(c, 0, 0));
    for (uint64_t k = 1; k < 4; k++)
        assert_true(cache_contains(c, 0, k));
    assert_int_equal(stats(c).evictions, 1);

    get_put(c, 0, 1, SMALL);                            /* B again: a hit */
    assert_int_equal(atomic_load(&F.calls), 4);
    get_put(c, 0, 4, SMALL);                            /* E: B's second chance, C goes */
    assert_true(cache_contains(c, 0, 1));
    assert_false(cache_contains(c, 0, 2));
    assert_true(cache_contains(c, 0, 3));
    assert_true(cache_contains(c, 0, 4));
    s = stats(c);
    assert_int_equal(s.evictions, 2);
    assert_int_equal(s.chunks_held, 3);
    assert_true(s.bytes_held <= s.capacity);
    assert_int_equal(atomic_load(&F.calls), 5);
    cache_free(c);
}

/* Many chunks of several sizes over a cache of 4 shards: after every put
 * (nothing pinned) the bytes held stay within the capacity, and what is
 * read is always the chunk asked for. */
static void test_bytes_bounded(void **state)
{
    (void)state;
    uint64_t cap = 16u * CACHE_CHUNK_BYTES;
    struct cache *c = cache_new(cap, fill, &F);
    assert_non_null(c);
    assert_int_equal(cache_capacity_chunks(c), 16);
    uint64_t x = 12345, evictions = 0;
    for (int i = 0; i < 3000; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        uint64_t t = (x >> 33) % 5, k = (x >> 45) % 40;
        size_t n = 16384 - (size_t)((t * 7 + k) % 9) * 1500;
        get_put(c, t, k, n);
        struct cache_stats s = stats(c);
        assert_true(s.bytes_held <= cap);
        assert_true(s.evictions >= evictions);
        evictions = s.evictions;
    }
    struct cache_stats s = stats(c);
    assert_true(s.evictions > 0);               /* 200 chunks of ~44 KiB: it was full */
    assert_true(s.hits > 0);
    assert_int_equal(s.misses, atomic_load(&F.calls));
    assert_int_equal(s.hits + s.misses, 3000);
    cache_free(c);
}

/* A capacity below one chunk: a chunk in use is still served, but nothing
 * stays once it is put back. */
static void test_tiny_capacity(void **state)
{
    (void)state;
    struct cache *c = cache_new(0, fill, &F);
    assert_non_null(c);
    assert_int_equal(cache_capacity_chunks(c), 0);
    struct cache_chunk *a = pin(c, 1, 2, SMALL);
    struct cache_chunk *b = pin(c, 1, 3, SMALL);       /* both pinned: both held */
    assert_int_equal(stats(c).chunks_held, 2);
    assert_int_equal(bad_floats(cache_data(a), 1, 2, SMALL, 1), 0);
    cache_put(c, a);
    cache_put(c, b);
    struct cache_stats s = stats(c);
    assert_int_equal(s.chunks_held, 0);
    assert_int_equal(s.bytes_held, 0);
    get_put(c, 1, 2, SMALL);
    assert_int_equal(atomic_load(&F.calls), 3);
    cache_free(c);
}

/* n above CACHE_CHUNK_ELEMS is refused, not allocated. */
static void test_oversized_chunk(void **state)
{
    (void)state;
    struct cache *c = cache_new(8u * CACHE_CHUNK_BYTES, fill, &F);
    assert_non_null(c);
    int err = 0;
    assert_null(cache_get(c, 0, 0, (size_t)CACHE_CHUNK_ELEMS + 1, &err));
    assert_int_equal(err, EINVAL);
    err = 0;
    assert_null(cache_get(c, 0, 0, SIZE_MAX / 2, &err));
    assert_int_equal(err, EINVAL);
    assert_int_equal(atomic_load(&F.calls), 0);
    struct cache_chunk *k = pin(c, 0, 0, CACHE_CHUNK_ELEMS);
    cache_put(c, k);
    cache_free(c);
}

/* ---- pinning --------------------------------------------------------------- */

/* Bytes held never exceed the capacity except by pinned chunks: on a single
 * shard, bytes_held <= max(capacity, what the pinned chunks hold). */
static void assert_bound(struct cache *c, uint64_t u, unsigned npinned)
{
    struct cache_stats s = stats(c);
    uint64_t pinned = npinned * u;
    assert_true(s.bytes_held <= (s.capacity > pinned ? s.capacity : pinned));
}

static void test_pinning(void **state)
{
    (void)state;
    uint64_t u = chunk_cost(SMALL);
    struct cache *c = cache_new(2 * u, fill, &F);
    assert_non_null(c);

    /* A pinned chunk survives any amount of traffic, its floats intact. */
    struct cache_chunk *a = pin(c, 0, 0, SMALL);
    const float *ad = cache_data(a);
    for (uint64_t k = 1; k <= 40; k++) {
        get_put(c, 0, k, SMALL);
        assert_true(cache_contains(c, 0, 0));
        assert_ptr_equal(cache_data(a), ad);
        assert_int_equal(bad_floats(ad, 0, 0, SMALL, 1), 0);
        assert_bound(c, u, 1);
    }
    assert_true(stats(c).evictions >= 39);

    /* Three pinned chunks exceed the capacity (2 chunks); a fourth one
     * read and put back does not stay. */
    struct cache_chunk *b = pin(c, 1, 0, SMALL);
    struct cache_chunk *d = pin(c, 1, 1, SMALL);
    assert_int_equal(stats(c).bytes_held, 3 * u);
    assert_bound(c, u, 3);
    get_put(c, 1, 2, SMALL);
    assert_false(cache_contains(c, 1, 2));
    assert_int_equal(stats(c).bytes_held, 3 * u);

    /* ... and a prefetch into the full shard does not stay either. */
    cache_prefetch(c, 1, 3, SMALL);
    assert_int_equal(atomic_load(&F.calls), 45);
    assert_bound(c, u, 3);
    assert_int_equal(stats(c).bytes_held, 3 * u);

    /* Releasing pins shrinks the shard back within the capacity. */
    cache_put(c, a);
    assert_false(cache_contains(c, 0, 0));
    assert_bound(c, u, 2);
    assert_int_equal(stats(c).bytes_held, 2 * u);
    cache_put(c, b);
    cache_put(c, d);
    assert_int_equal(stats(c).bytes_held, 2 * u);
    assert_true(cache_contains(c, 1, 0));
    assert_true(cache_contains(c, 1, 1));
    cache_free(c);
}

/* The same chunk pinned twice is one chunk with two pins. */
static void test_pin_twice(void **state)
{
    (void)state;
    uint64_t u = chunk_cost(SMALL);
    struct cache *c = cache_new(u, fill, &F);
    assert_non_null(c);
    struct cache_chunk *a = pin(c, 3, 3, SMALL), *a2 = pin(c, 3, 3, SMALL);
    assert_ptr_equal(a, a2);
    assert_int_equal(atomic_load(&F.calls), 1);
    cache_put(c, a);
    get_put(c, 3, 4, SMALL);                /* (3, 3) still pinned once */
    assert_true(cache_contains(c, 3, 3));
    assert_false(cache_contains(c, 3, 4));
    assert_int_equal(bad_floats(cache_data(a2), 3, 3, SMALL, 1), 0);
    cache_put(c, a2);
    cache_free(c);
}

/* ---- placeholders ---------------------------------------------------------- */

struct getter {
    pthread_t th;
    struct cache *c;
    uint64_t t, ch;
    size_t n;
    struct cache_chunk *got;
    int err;
    size_t bad;
};

static void *getter_main(void *p)
{
    struct getter *g = p;
    g->got = cache_get(g->c, g->t, g->ch, g->n, &g->err);
    if (g->got)
        g->bad = bad_floats(cache_data(g->got), g->t, g->ch, g->n, 1);
    return NULL;
}

static void start_getter(struct getter *g, struct cache *c, uint64_t t, uint64_t ch, size_t n)
{
    *g = (struct getter){ .c = c, .t = t, .ch = ch, .n = n };
    assert_int_equal(pthread_create(&g->th, NULL, getter_main, g), 0);
}

#define WAITERS 4

/* g[0] gets chunk (t, ch) and its fill stops at the gate (then returns
 * err); g[1..WAITERS] get the same chunk and wait inside the cache.
 * Returns once all of them are there. */
static void start_gated(struct getter *g, struct cache *c, uint64_t t, uint64_t ch, int err)
{
    F.gated = true;
    F.gate_t = t;
    F.gate_c = ch;
    F.gate_err = err;
    start_getter(&g[0], c, t, ch, SMALL);
    wait_count(&F.entered, 1);
    for (int i = 1; i <= WAITERS; i++)
        start_getter(&g[i], c, t, ch, SMALL);
    wait_count(&F.waiters, WAITERS);
}

/* One thread fills (held at the gate) while WAITERS more ask for the same
 * chunk: they wait inside the cache (counted by the wrapped
 * pthread_cond_wait) and, once the gate opens, every one of them gets the
 * one chunk that was filled once. */
static void test_placeholder_waits(void **state)
{
    (void)state;
    struct cache *c = cache_new(8u * CACHE_CHUNK_BYTES, fill, &F);
    assert_non_null(c);
    struct getter g[1 + WAITERS];
    start_gated(g, c, 2, 5, 0);
    assert_true(cache_contains(c, 2, 5));       /* the placeholder is there */
    assert_int_equal(stats(c).hits, 0);         /* nobody has it yet */
    open_gate();
    for (int i = 0; i <= WAITERS; i++) {
        assert_int_equal(pthread_join(g[i].th, NULL), 0);
        assert_non_null(g[i].got);
        assert_int_equal(g[i].err, 0);
        assert_ptr_equal(g[i].got, g[0].got);
        assert_int_equal(g[i].bad, 0);
    }
    assert_int_equal(atomic_load(&F.calls), 1);
    struct cache_stats s = stats(c);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.hits, WAITERS);
    assert_int_equal(s.chunks_held, 1);
    for (int i = 0; i <= WAITERS; i++)
        cache_put(c, g[i].got);
    cache_free(c);
}

/* The same with a fill that fails: every waiter gets the error, nothing is
 * cached, and the next get fills again. */
static void test_failed_fill(void **state)
{
    (void)state;
    struct cache *c = cache_new(8u * CACHE_CHUNK_BYTES, fill, &F);
    assert_non_null(c);
    struct getter g[1 + WAITERS];
    start_gated(g, c, 7, 1, EIO);
    open_gate();
    for (int i = 0; i <= WAITERS; i++) {
        assert_int_equal(pthread_join(g[i].th, NULL), 0);
        assert_null(g[i].got);
        assert_int_equal(g[i].err, EIO);
    }
    assert_int_equal(atomic_load(&F.calls), 1);
    struct cache_stats s = stats(c);
    assert_int_equal(s.fill_errors, 1);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.hits, 0);
    assert_int_equal(s.chunks_held, 0);
    assert_int_equal(s.bytes_held, 0);
    assert_false(cache_contains(c, 7, 1));

    F.gate_err = 0;                             /* no fill runs now */
    get_put(c, 7, 1, SMALL);
    assert_int_equal(atomic_load(&F.calls), 2);
    s = stats(c);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.fill_errors, 1);
    assert_true(cache_contains(c, 7, 1));
    get_put(c, 7, 1, SMALL);                    /* now cached */
    assert_int_equal(atomic_load(&F.calls), 2);
    cache_free(c);
}

/* A failed fill with nobody waiting, and a failed prefetch. */
static void test_failed_fill_alone(void **state)
{
    (void)state;
    struct cache *c = cache_new(8u * CACHE_CHUNK_BYTES, fill, &F);
    assert_non_null(c);
    F.fail_once = true;
    F.fail_once_t = 1;
    F.fail_once_c = 1;
    int err = 0;
    assert_null(cache_get(c, 1, 1, SMALL, &err));
    assert_int_equal(err, EIO);
    assert_false(cache_contains(c, 1, 1));
    F.fail_once = true;
    cache_prefetch(c, 1, 1, SMALL);
    assert_false(cache_contains(c, 1, 1));
    cache_prefetch(c, 1, 1, SMALL);
    assert_true(cache_contains(c, 1, 1));
    cache_prefetch(c, 1, 1, SMALL);             /* there: no fill */
    assert_int_equal(atomic_load(&F.calls), 3);
    get_put(c, 1, 1, SMALL);
    struct cache_stats s = stats(c);
    assert_int_equal(s.fill_errors, 2);
    assert_int_equal(s.misses, 3);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.chunks_held, 1);
    cache_free(c);
}

/* A getter of a chunk a prefetch is filling waits for that fill too; the
 * prefetch leaves it unpinned. */
static void *prefetch_main(void *p)
{
    struct getter *g = p;
    cache_prefetch(g->c, g->t, g->ch, g->n);
    return NULL;
}

static void test_prefetch_placeholder(void **state)
{
    (void)state;
    struct cache *c = cache_new(8u * CACHE_CHUNK_BYTES, fill, &F);
    assert_non_null(c);
    F.gated = true;
    F.gate_t = 4;
    F.gate_c = 4;
    struct getter pf = { .c = c, .t = 4, .ch = 4, .n = SMALL }, g;
    assert_int_equal(pthread_create(&pf.th, NULL, prefetch_main, &pf), 0);
    wait_count(&F.entered, 1);
    cache_prefetch(c, 4, 4, SMALL);             /* being filled: returns at once */
    start_getter(&g, c, 4, 4, SMALL);
    wait_count(&F.waiters, 1);
    open_gate();
    assert_int_equal(pthread_join(pf.th, NULL), 0);
    assert_int_equal(pthread_join(g.th, NULL), 0);
    assert_non_null(g.got);
    assert_int_equal(g.bad, 0);
    assert_int_equal(atomic_load(&F.calls), 1);
    cache_put(c, g.got);
    /* unpinned now: a clear drops it */
    cache_clear(c);
    assert_false(cache_contains(c, 4, 4));
    cache_free(c);
}

/* ---- cache_clear ----------------------------------------------------------- */

/* Drops every unpinned chunk; a pinned one, and one being filled (pinned
 * by its filler), stay. */
static void test_clear(void **state)
{
    (void)state;
    uint64_t u = chunk_cost(SMALL);
    struct cache *c = cache_new(8 * u, fill, &F);
    assert_non_null(c);
    for (uint64_t k = 0; k < 5; k++)
        get_put(c, 5, k, SMALL);
    struct cache_chunk *kept = pin(c, 5, 2, SMALL);
    F.gated = true;
    F.gate_t = 6;
    F.gate_c = 0;
    struct getter g;
    start_getter(&g, c, 6, 0, SMALL);
    wait_count(&F.entered, 1);
    cache_clear(c);
    struct cache_stats s = stats(c);
    assert_int_equal(s.chunks_held, 2);
    assert_int_equal(s.bytes_held, 2 * u);
    assert_int_equal(s.evictions, 4);
    for (uint64_t k = 0; k < 5; k++)
        assert_true(cache_contains(c, 5, k) == (k == 2));
    assert_true(cache_contains(c, 6, 0));
    assert_int_equal(bad_floats(cache_data(kept), 5, 2, SMALL, 1), 0);
    open_gate();
    assert_int_equal(pthread_join(g.th, NULL), 0);
    assert_non_null(g.got);
    assert_int_equal(g.bad, 0);
    cache_put(c, g.got);
    cache_put(c, kept);
    get_put(c, 5, 0, SMALL);                    /* filled again */
    assert_int_equal(atomic_load(&F.calls), 7);
    cache_clear(c);
    s = stats(c);
    assert_int_equal(s.chunks_held, 0);
    assert_int_equal(s.bytes_held, 0);
    cache_clear(c);                             /* on an empty cache */
    cache_free(c);
}

/* ---- counters -------------------------------------------------------------- */

static void test_stats(void **state)
{
    (void)state;
    uint64_t u = chunk_cost(SMALL);
    struct cache *c = cache_new(4 * u, fill, &F);
    assert_non_null(c);
    struct cache_stats s = stats(c);
    assert_int_equal(s.capacity, 4 * u);
    assert_int_equal(s.hits + s.misses + s.evictions + s.fill_errors, 0);
    assert_int_equal(s.chunks_held + s.bytes_held, 0);
    get_put(c, 0, 0, SMALL);                    /* miss */
    get_put(c, 0, 0, SMALL);                    /* hit */
    get_put(c, 0, 1, SMALL);                    /* miss */
    F.fail_once = true;
    F.fail_once_t = 0;
    F.fail_once_c = 2;
    int err = 0;
    assert_null(cache_get(c, 0, 2, SMALL, &err));  /* miss, fill error */
    s = stats(c);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 3);
    assert_int_equal(s.fill_errors, 1);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.chunks_held, 2);
    assert_int_equal(s.bytes_held, 2 * u);
    for (uint64_t k = 10; k < 16; k++)          /* 6 more: 4 fit, 4 evicted */
        get_put(c, 0, k, SMALL);
    s = stats(c);
    assert_int_equal(s.misses, 9);
    assert_int_equal(s.evictions, 4);
    assert_int_equal(s.chunks_held, 4);
    assert_int_equal(s.bytes_held, 4 * u);
    assert_int_equal(s.misses, atomic_load(&F.calls));
    cache_free(c);
}

/* ---- 8 threads ------------------------------------------------------------- */

/*
 * 8 threads share a cache of 4 shards over 16 tensors x 64 chunks of
 * different lengths (~9 MiB in all, the cache holds 4 MiB): reads of 1 to
 * 3 neighbouring chunks, hot and cold, prefetches, lookups, now and then a
 * clear; the fills of every 101st chunk fail.  Every chunk a thread gets is
 * checked whole when it arrives and sampled again before it is put back.
 */
#define THREADS 8
#define TENSORS 16u
#define CHUNKS 64u

static size_t stress_len(uint64_t t, uint64_t c)
{
    return 256 + (size_t)((t * 131 + c * 71) % 4096);
}

static bool stress_fails(uint64_t t, uint64_t c)
{
    return key(t, c) % 101 == FAIL_REM;
}

struct worker {
    pthread_t th;
    struct cache *c;
    pthread_barrier_t *go;
    unsigned id, ops;
    /* what it saw */
    uint64_t gets, bad, wrong_err, over_bound;
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    uint64_t x = 0x9E3779B97F4A7C15u * (w->id + 1);
    struct cache_chunk *held[3];
    uint64_t held_t[3], held_c[3];
    pthread_barrier_wait(w->go);
    for (unsigned op = 0; op < w->ops; op++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned what = (unsigned)(x % 100);
        bool hot = (x >> 8) % 2;
        uint64_t t = hot ? (x >> 16) % 2 : (x >> 16) % TENSORS;
        uint64_t c = hot ? (x >> 24) % 16 : (x >> 24) % CHUNKS;
        if (what < 75) {                        /* a read of 1-3 chunks */
            unsigned k = 1 + (unsigned)((x >> 40) % 3), nheld = 0;
            for (unsigned i = 0; i < k && c + i < CHUNKS; i++) {
                int err = 0;
                size_t n = stress_len(t, c + i);
                struct cache_chunk *ch = cache_get(w->c, t, c + i, n, &err);
                w->gets++;
                if (!ch) {
                    w->wrong_err += !(stress_fails(t, c + i) && err == EIO);
                    continue;
                }
                w->wrong_err += stress_fails(t, c + i);
                w->bad += bad_floats(cache_data(ch), t, c + i, n, 1);
                held[nheld] = ch;
                held_t[nheld] = t;
                held_c[nheld++] = c + i;
            }
            for (unsigned i = 0; i < nheld; i++) {
                w->bad += bad_floats(cache_data(held[i]), held_t[i], held_c[i],
                                     stress_len(held_t[i], held_c[i]), 61);
                cache_put(w->c, held[i]);
            }
        } else if (what < 87) {
            cache_prefetch(w->c, t, c, stress_len(t, c));
        } else if (what < 96) {
            (void)cache_contains(w->c, t, c);
        } else if (what < 99 || (x >> 50) % 8) {
            struct cache_stats s;
            cache_get_stats(w->c, &s);
            /* over the capacity only by what is pinned or being filled:
             * at most 3 pins per thread, plus one prefetch */
            w->over_bound += s.bytes_held > s.capacity + THREADS * 4u * (5000u * sizeof(float) + 256u);
        } else {
            cache_clear(w->c);
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    uint64_t cap = 16u * CACHE_CHUNK_BYTES;
    struct cache *c = cache_new(cap, fill, &F);
    assert_non_null(c);
    F.fail_mod = 101;
    /* fewer operations in the sanitizer runs (scripts/test) */
    unsigned ops = getenv("GGUFFS_TEST_QUICK") ? 1500 : 4000;
    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, THREADS), 0);
    struct worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (struct worker){ .c = c, .go = &go, .id = i, .ops = ops };
        assert_int_equal(pthread_create(&w[i].th, NULL, worker_main, &w[i]), 0);
    }
    uint64_t gets = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_join(w[i].th, NULL), 0);
        assert_int_equal(w[i].bad, 0);
        assert_int_equal(w[i].wrong_err, 0);
        assert_int_equal(w[i].over_bound, 0);
        gets += w[i].gets;
    }
    pthread_barrier_destroy(&go);
    struct cache_stats s = stats(c);
    /* every miss is one fill, every failed fill a fill error */
    assert_int_equal(s.misses, atomic_load(&F.calls));
    assert_int_equal(s.fill_errors, atomic_load(&F.failed));
    assert_true(s.fill_errors > 0);
    assert_true(s.hits > 0);
    assert_true(s.evictions > 0);
    assert_true(gets > 0);
    assert_true(s.bytes_held <= cap);           /* nothing pinned now */
    for (uint64_t t = 0; t < TENSORS; t++)      /* failed fills were not kept */
        for (uint64_t k = 0; k < CHUNKS; k++)
            if (stress_fails(t, k))
                assert_false(cache_contains(c, t, k));
    cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_clock_second_chance, reset_fill),
        cmocka_unit_test_setup(test_bytes_bounded, reset_fill),
        cmocka_unit_test_setup(test_tiny_capacity, reset_fill),
        cmocka_unit_test_setup(test_oversized_chunk, reset_fill),
        cmocka_unit_test_setup(test_pinning, reset_fill),
        cmocka_unit_test_setup(test_pin_twice, reset_fill),
        cmocka_unit_test_setup(test_placeholder_waits, reset_fill),
        cmocka_unit_test_setup(test_failed_fill, reset_fill),
        cmocka_unit_test_setup(test_failed_fill_alone, reset_fill),
        cmocka_unit_test_setup(test_prefetch_placeholder, reset_fill),
        cmocka_unit_test_setup(test_clear, reset_fill),
        cmocka_unit_test_setup(test_stats, reset_fill),
        cmocka_unit_test_setup(test_threads, reset_fill),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}

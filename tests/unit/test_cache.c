/*
 * tests/unit/test_cache.c — the block cache (cache/cache.h), without FUSE:
 * CLOCK eviction and the byte bound, pinning, used-up blocks reused first
 * (and blocks marked cache_once before the cache grows under keep_used),
 * buffers reused rather than allocated, reserved buffers, buffers sharing huge pages,
 * placeholders (a block is filled
 * once, its other getters wait for that fill), claims (a prefetch in two
 * steps), failed fills, cache_clear, the counters, and 8 threads getting,
 * claiming and putting many blocks at once.
 * Blocks hold floats here (as the f32 view's chunks do): a block of n
 * floats is n * 4 bytes.
 *
 * Nothing here sleeps or looks at a clock.  The fill callback can be held
 * at a gate the test opens; a thread waiting inside the cache for another
 * thread's fill is seen through pthread_cond_wait, wrapped at link time
 * (-Wl,--wrap=pthread_cond_wait, tests/unit/meson.build): the wrapper
 * counts the waiting threads and wakes the test, which then knows they are
 * waiting (the filler needs the cache's lock they release in the wait).
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

#include "cache/cache.h"
#include "cache/slab.h"

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
    atomic_uint_fast64_t wrong_calls;   /* fills given another call context than CALL */
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

/* The call context every get, prefetch and claimed fill passes: each fill
 * must be given it (cache_fill_fn's call). */
static int call_token;
#define CALL ((void *)&call_token)

static int fill(void *ctx, void *call, uint64_t t, uint64_t c, void *dstv, size_t len)
{
    struct fill_ctl *f = ctx;
    float *dst = dstv;
    size_t n = len / sizeof(float);
    atomic_fetch_add(&f->calls, 1);
    if (call != CALL)
        atomic_fetch_add(&f->wrong_calls, 1);
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
    assert_int_equal(atomic_load(&F.wrong_calls), 0);   /* the test before */
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

#define SMALL 64u       /* floats in the blocks of the single-threaded tests */
#define BIG 16384u      /* floats in the blocks of the multi-size tests */
#define F4(n) ((size_t)(n) * sizeof(float))

static struct cache_stats stats(struct cache *c)
{
    struct cache_stats s;
    cache_get_stats(c, &s);
    return s;
}

/* A cache of blocks of n floats. */
static struct cache *new_cache(size_t n, uint64_t capacity)
{
    struct cache *c = cache_new(F4(n), capacity, fill, &F);
    assert_non_null(c);
    return c;
}

/* Bytes one buffer of a cache of blocks of n floats counts for (its room
 * and its bookkeeping). */
static uint64_t block_cost(size_t n)
{
    struct cache *c = new_cache(n, UINT64_C(1) << 30);
    int err = 0;
    struct cache_block *b = cache_get(c, 0, 0, F4(n), CALL, &err);
    assert_non_null(b);
    cache_put(c, b, 0);
    uint64_t bytes = stats(c).bytes_held;
    cache_free(c);
    atomic_store(&F.calls, 0);
    assert_true(bytes >= F4(n));
    return bytes;
}

/* Gets block (t, ch) of n floats, checks every float, keeps it pinned. */
static struct cache_block *pin(struct cache *c, uint64_t t, uint64_t ch, size_t n)
{
    int err = 0;
    struct cache_block *k = cache_get(c, t, ch, F4(n), CALL, &err);
    assert_non_null(k);
    assert_int_equal(err, 0);
    assert_int_equal(cache_len(k), F4(n));
    assert_int_equal(bad_floats(cache_data(k), t, ch, n, 1), 0);
    return k;
}

/* Gets and puts block (t, ch) back, none of it used. */
static void get_put(struct cache *c, uint64_t t, uint64_t ch, size_t n)
{
    cache_put(c, pin(c, t, ch, n), 0);
}

/* Gets and puts block (t, ch) back, all of it used. */
static void get_use(struct cache *c, uint64_t t, uint64_t ch, size_t n)
{
    cache_put(c, pin(c, t, ch, n), F4(n));
}

/* ---- eviction -------------------------------------------------------------- */

/* Three blocks fit.  With every reference bit set the hand goes round once
 * and evicts the oldest; a block read again since then gets a second
 * chance and the next one in line goes instead. */
static void test_clock_second_chance(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 3 * u);
    assert_int_equal(cache_capacity_blocks(c), 3);
    for (uint64_t k = 0; k < 3; k++)                    /* A B C */
        get_put(c, 0, k, SMALL);
    struct cache_stats s = stats(c);
    assert_int_equal(s.blocks_held, 3);
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
    assert_int_equal(s.blocks_held, 3);
    assert_true(s.bytes_held <= s.capacity);
    assert_int_equal(atomic_load(&F.calls), 5);
    cache_free(c);
}

/* Many blocks of several lengths: after every put (nothing pinned) the
 * bytes held stay within the capacity, and what is read is always the
 * block asked for. */
static void test_bytes_bounded(void **state)
{
    (void)state;
    uint64_t u = block_cost(BIG);
    uint64_t cap = 16 * u;
    struct cache *c = new_cache(BIG, cap);
    assert_int_equal(cache_capacity_blocks(c), 16);
    uint64_t x = 12345, evictions = 0;
    for (int i = 0; i < 3000; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        uint64_t t = (x >> 33) % 5, k = (x >> 45) % 40;
        size_t n = BIG - (size_t)((t * 7 + k) % 9) * 1500;
        get_put(c, t, k, n);
        struct cache_stats s = stats(c);
        assert_true(s.bytes_held <= cap);
        assert_true(s.evictions >= evictions);
        evictions = s.evictions;
    }
    struct cache_stats s = stats(c);
    assert_true(s.evictions > 0);               /* 200 blocks in 16 places: it was full */
    assert_true(s.hits > 0);
    assert_int_equal(s.misses, atomic_load(&F.calls));
    assert_int_equal(s.hits + s.misses, 3000);
    assert_int_equal(s.bytes_held, cap);
    cache_free(c);
}

/* A capacity below one block: a block in use is still served, but nothing
 * stays once it is put back. */
static void test_tiny_capacity(void **state)
{
    (void)state;
    struct cache *c = new_cache(SMALL, 0);
    assert_int_equal(cache_capacity_blocks(c), 0);
    struct cache_block *a = pin(c, 1, 2, SMALL);
    struct cache_block *b = pin(c, 1, 3, SMALL);       /* both pinned: both held */
    assert_int_equal(stats(c).blocks_held, 2);
    assert_int_equal(bad_floats(cache_data(a), 1, 2, SMALL, 1), 0);
    cache_put(c, a, 0);
    cache_put(c, b, 0);
    struct cache_stats s = stats(c);
    assert_int_equal(s.blocks_held, 0);
    assert_int_equal(s.bytes_held, 0);
    get_put(c, 1, 2, SMALL);
    assert_int_equal(atomic_load(&F.calls), 3);
    cache_free(c);
}

/* A length above the block size is refused, not allocated; a cache of
 * blocks of 0 bytes is not made. */
static void test_oversized_block(void **state)
{
    (void)state;
    struct cache *c = new_cache(BIG, 8 * block_cost(BIG));
    int err = 0;
    assert_null(cache_get(c, 0, 0, F4(BIG) + 1, CALL, &err));
    assert_int_equal(err, EINVAL);
    err = 0;
    assert_null(cache_get(c, 0, 0, SIZE_MAX / 2, CALL, &err));
    assert_int_equal(err, EINVAL);
    assert_false(cache_prefetch(c, 0, 0, F4(BIG) + 1, CALL));
    assert_int_equal(atomic_load(&F.calls), 0);
    struct cache_block *k = pin(c, 0, 0, BIG);
    cache_put(c, k, 0);
    cache_free(c);
    assert_null(cache_new(0, 1 << 20, fill, &F));
}

/* ---- used-up blocks and buffer reuse --------------------------------------- */

/* A block whose bytes have all been used is reused before the cache grows:
 * a stream of blocks read once each holds one buffer, whatever the
 * capacity, and every block after the first fills the same memory. */
static void test_used_reused_first(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 100 * u);
    struct cache_block *b = pin(c, 0, 0, SMALL);
    const void *mem = cache_data(b);
    cache_put(c, b, F4(SMALL));
    for (uint64_t k = 1; k < 50; k++) {
        b = pin(c, 0, k, SMALL);
        assert_ptr_equal(cache_data(b), mem);
        assert_false(cache_contains(c, 0, k - 1));
        cache_put(c, b, F4(SMALL));
    }
    struct cache_stats s = stats(c);
    assert_int_equal(s.bytes_held, u);
    assert_int_equal(s.blocks_held, 1);
    assert_int_equal(s.evictions, 49);
    assert_int_equal(s.misses, 50);

    /* Blocks not used up are kept: the first takes the used-up block's
     * buffer, then the cache grows with them. */
    for (uint64_t k = 100; k < 110; k++)
        get_put(c, 0, k, SMALL);
    assert_false(cache_contains(c, 0, 49));
    s = stats(c);
    assert_int_equal(s.blocks_held, 10);
    assert_int_equal(s.bytes_held, 10 * u);
    for (uint64_t k = 100; k < 110; k++)
        assert_true(cache_contains(c, 0, k));
    cache_free(c);
}

/* Uses add up: a block served in two halves is used up after the second;
 * one put back unused is not, and neither is one of which only part was
 * used.  The oldest used-up block goes first, and a used-up block read
 * again is a hit that keeps it. */
static void test_used_partial(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 100 * u);
    struct cache_block *a = pin(c, 1, 0, SMALL);
    cache_put(c, a, F4(SMALL / 2));                     /* half of A */
    get_put(c, 1, 1, SMALL);                            /* B: none */
    a = pin(c, 1, 0, SMALL);
    cache_put(c, a, F4(SMALL / 2));                     /* A: the other half */
    struct cache_block *d = pin(c, 1, 2, SMALL);        /* D reuses A */
    assert_false(cache_contains(c, 1, 0));
    assert_true(cache_contains(c, 1, 1));
    cache_put(c, d, F4(SMALL) - 1);                     /* all but a byte */
    get_use(c, 1, 3, SMALL);                            /* E: grows, used up */
    get_use(c, 1, 4, SMALL);                            /* F reuses E */
    assert_false(cache_contains(c, 1, 3));
    get_use(c, 1, 4, SMALL);                            /* F again: a hit */
    get_use(c, 1, 5, SMALL);                            /* G reuses F */
    assert_false(cache_contains(c, 1, 4));
    struct cache_stats s = stats(c);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.misses, 6);
    assert_int_equal(s.blocks_held, 3);                 /* B, D, G */
    assert_int_equal(s.bytes_held, 3 * u);
    assert_true(cache_contains(c, 1, 1));
    assert_true(cache_contains(c, 1, 2));
    cache_free(c);
}

/* Under cache_keep_used a used-up block stays while the cache has room,
 * but one marked cache_once goes first, before the cache grows: a long
 * stream of once-blocks holds one buffer whatever its length, the blocks
 * kept before it stay, and a once-block got again after it was used up is
 * a hit that makes it an ordinary block (kept). */
static void test_once_reused_first(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 100 * u);
    cache_keep_used(c, true);
    for (uint64_t k = 0; k < 5; k++)                    /* kept: room left */
        get_use(c, 3, k, SMALL);
    assert_int_equal(stats(c).blocks_held, 5);
    struct cache_block *b = pin(c, 3, 100, SMALL);
    const void *mem = cache_data(b);
    cache_once(c, b);
    cache_put(c, b, F4(SMALL));
    for (uint64_t k = 101; k < 200; k++) {
        b = pin(c, 3, k, SMALL);
        assert_ptr_equal(cache_data(b), mem);           /* the once-block's buffer */
        assert_false(cache_contains(c, 3, k - 1));
        cache_once(c, b);
        cache_put(c, b, F4(SMALL) / 2);                 /* in two halves */
        b = pin(c, 3, k, SMALL);
        cache_put(c, b, F4(SMALL) - F4(SMALL) / 2);
    }
    struct cache_stats s = stats(c);
    assert_int_equal(s.blocks_held, 6);
    assert_int_equal(s.bytes_held, 6 * u);
    for (uint64_t k = 0; k < 5; k++)
        assert_true(cache_contains(c, 3, k));
    /* got again after it was used up: an ordinary block from then on */
    get_use(c, 3, 199, SMALL);
    get_use(c, 3, 300, SMALL);                          /* grows: 199 is kept */
    assert_true(cache_contains(c, 3, 199));
    s = stats(c);
    assert_int_equal(s.blocks_held, 7);
    cache_free(c);
}

/* A full cache gives an evicted block's memory to the next block: the
 * buffers of the cache are all that is ever used. */
static void test_buffers_reused(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 4 * u);
    const void *mem[4];
    for (uint64_t k = 0; k < 4; k++) {
        struct cache_block *b = pin(c, 2, k, SMALL);
        mem[k] = cache_data(b);
        cache_put(c, b, 0);
    }
    for (uint64_t k = 4; k < 40; k++) {
        struct cache_block *b = pin(c, 2, k, SMALL);
        bool known = false;
        for (int i = 0; i < 4; i++)
            known |= cache_data(b) == mem[i];
        assert_true(known);
        cache_put(c, b, 0);
    }
    assert_int_equal(stats(c).bytes_held, 4 * u);
    cache_free(c);
}

/* Reserved buffers are taken by the first fills: the cache does not grow
 * past them; a reserve stops at the capacity, and makes nothing in a
 * cache below one block. */
static void test_reserve(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 4 * u);
    cache_reserve(c, 3);
    struct cache_stats s = stats(c);
    assert_int_equal(s.bytes_held, 3 * u);
    assert_int_equal(s.blocks_held, 0);
    for (uint64_t k = 0; k < 3; k++)
        get_put(c, 9, k, SMALL);
    s = stats(c);
    assert_int_equal(s.bytes_held, 3 * u);
    assert_int_equal(s.blocks_held, 3);
    cache_reserve(c, 10);
    assert_int_equal(stats(c).bytes_held, 4 * u);
    cache_reserve(c, 2);                        /* holds more already */
    assert_int_equal(stats(c).bytes_held, 4 * u);
    get_put(c, 9, 3, SMALL);                    /* takes the spare */
    s = stats(c);
    assert_int_equal(s.bytes_held, 4 * u);
    assert_int_equal(s.blocks_held, 4);
    assert_int_equal(s.evictions, 0);
    cache_free(c);
    c = new_cache(SMALL, 0);
    cache_reserve(c, 5);
    assert_int_equal(stats(c).bytes_held, 0);
    cache_free(c);
}

/* Blocks of a little under 1 MiB (an f32 chunk: 1008 KiB and a page) share
 * huge pages, two to one: their buffers never overlap, every block keeps its
 * own bytes while others are filled, freed and refilled (a freed slot of a
 * shared page is given back and reused), and a cache that is freed leaves
 * nothing behind (the sanitizer runs check that). */
#define CHUNKISH ((1032192u + 4096u) / 4u)

static void test_shared_huge_pages(void **state)
{
    (void)state;
    uint64_t u = block_cost(CHUNKISH);
    assert_true(u >= F4(CHUNKISH));
    assert_true(u <= (1u << 20) + 4096);         /* half a huge page, and bookkeeping */
    struct cache *c = new_cache(CHUNKISH, 6 * u);
    struct cache_block *b[9];
    for (uint64_t k = 0; k < 9; k++)             /* 3 above the capacity: pinned */
        b[k] = pin(c, 4, k, CHUNKISH);
    unsigned shared = 0;
    for (uint64_t i = 0; i < 9; i++) {
        const char *p = cache_data(b[i]);
        for (uint64_t j = 0; j < 9; j++) {
            const char *q = cache_data(b[j]);
            if (i != j)
                assert_true(p + F4(CHUNKISH) <= q || q + F4(CHUNKISH) <= p);
            if (i < j && (uintptr_t)p >> 21 == (uintptr_t)q >> 21)
                shared++;
        }
        assert_int_equal(bad_floats(cache_data(b[i]), 4, i, CHUNKISH, 97), 0);
    }
    /* pairs share a huge page (when the machine has them: the kernel may
     * refuse; 9 buffers are at least 4 pairs, or none at all) */
    assert_true(shared == 0 || shared >= 4);
    for (uint64_t k = 0; k < 9; k += 2)          /* back within the capacity: */
        cache_put(c, b[k], F4(CHUNKISH));        /* used-up slots freed */
    assert_true(stats(c).bytes_held <= 6 * u);
    for (uint64_t k = 1; k < 9; k += 2)          /* the others kept their bytes */
        assert_int_equal(bad_floats(cache_data(b[k]), 4, k, CHUNKISH, 1), 0);
    for (uint64_t k = 20; k < 40; k++)           /* refills reuse freed slots */
        get_put(c, 5, k, CHUNKISH);
    for (uint64_t k = 1; k < 9; k += 2) {
        assert_int_equal(bad_floats(cache_data(b[k]), 4, k, CHUNKISH, 1), 0);
        cache_put(c, b[k], 0);
    }
    for (uint64_t k = 36; k < 40; k++) {         /* the last ones are still there */
        struct cache_block *x = pin(c, 5, k, CHUNKISH);
        assert_int_equal(bad_floats(cache_data(x), 5, k, CHUNKISH, 1), 0);
        cache_put(c, x, 0);
    }
    assert_true(stats(c).bytes_held <= 6 * u);
    cache_clear(c);
    assert_int_equal(stats(c).bytes_held, 0);
    get_put(c, 6, 0, CHUNKISH);
    cache_free(c);
}

/* ---- pinning --------------------------------------------------------------- */

/* Bytes held never exceed the capacity except by pinned blocks:
 * bytes_held <= max(capacity, what the pinned blocks hold). */
static void assert_bound(struct cache *c, uint64_t u, unsigned npinned)
{
    struct cache_stats s = stats(c);
    uint64_t pinned = npinned * u;
    assert_true(s.bytes_held <= (s.capacity > pinned ? s.capacity : pinned));
}

static void test_pinning(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 2 * u);

    /* A pinned block survives any amount of traffic, its floats intact. */
    struct cache_block *a = pin(c, 0, 0, SMALL);
    const float *ad = cache_data(a);
    for (uint64_t k = 1; k <= 40; k++) {
        get_put(c, 0, k, SMALL);
        assert_true(cache_contains(c, 0, 0));
        assert_ptr_equal(cache_data(a), ad);
        assert_int_equal(bad_floats(ad, 0, 0, SMALL, 1), 0);
        assert_bound(c, u, 1);
    }
    assert_true(stats(c).evictions >= 39);

    /* Three pinned blocks exceed the capacity (2 blocks); a fourth one
     * read and put back does not stay. */
    struct cache_block *b = pin(c, 1, 0, SMALL);
    struct cache_block *d = pin(c, 1, 1, SMALL);
    assert_int_equal(stats(c).bytes_held, 3 * u);
    assert_bound(c, u, 3);
    get_put(c, 1, 2, SMALL);
    assert_false(cache_contains(c, 1, 2));
    assert_int_equal(stats(c).bytes_held, 3 * u);

    /* ... and a prefetch into the full cache does not stay either. */
    assert_true(cache_prefetch(c, 1, 3, F4(SMALL), CALL));
    assert_int_equal(atomic_load(&F.calls), 45);
    assert_bound(c, u, 3);
    assert_int_equal(stats(c).bytes_held, 3 * u);

    /* Releasing pins shrinks the cache back within the capacity. */
    cache_put(c, a, 0);
    assert_false(cache_contains(c, 0, 0));
    assert_bound(c, u, 2);
    assert_int_equal(stats(c).bytes_held, 2 * u);
    cache_put(c, b, 0);
    cache_put(c, d, 0);
    assert_int_equal(stats(c).bytes_held, 2 * u);
    assert_true(cache_contains(c, 1, 0));
    assert_true(cache_contains(c, 1, 1));
    cache_free(c);
}

/* The same block pinned twice is one block with two pins; a use while
 * another pin is held does not let it go. */
static void test_pin_twice(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, u);
    struct cache_block *a = pin(c, 3, 3, SMALL), *a2 = pin(c, 3, 3, SMALL);
    assert_ptr_equal(a, a2);
    assert_int_equal(atomic_load(&F.calls), 1);
    cache_put(c, a, F4(SMALL));
    get_put(c, 3, 4, SMALL);                /* (3, 3) still pinned once */
    assert_true(cache_contains(c, 3, 3));
    assert_false(cache_contains(c, 3, 4));
    assert_int_equal(bad_floats(cache_data(a2), 3, 3, SMALL, 1), 0);
    cache_put(c, a2, 0);                    /* now used up and unpinned */
    get_put(c, 3, 5, SMALL);
    assert_false(cache_contains(c, 3, 3));
    cache_free(c);
}

/* ---- placeholders ---------------------------------------------------------- */

struct getter {
    pthread_t th;
    struct cache *c;
    uint64_t t, ch;
    size_t n;
    struct cache_block *got;
    int err;
    size_t bad;
};

static void *getter_main(void *p)
{
    struct getter *g = p;
    g->got = cache_get(g->c, g->t, g->ch, F4(g->n), CALL, &g->err);
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

/* g[0] gets block (t, ch) and its fill stops at the gate (then returns
 * err); g[1..WAITERS] get the same block and wait inside the cache.
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
 * block: they wait inside the cache (counted by the wrapped
 * pthread_cond_wait, and by the cache's waits) and, once the gate opens,
 * every one of them gets the one block that was filled once. */
static void test_placeholder_waits(void **state)
{
    (void)state;
    struct cache *c = new_cache(SMALL, 8 * block_cost(SMALL));
    struct getter g[1 + WAITERS];
    start_gated(g, c, 2, 5, 0);
    assert_true(cache_contains(c, 2, 5));       /* the placeholder is there */
    assert_int_equal(stats(c).hits, 0);         /* nobody has it yet */
    assert_int_equal(stats(c).waits, WAITERS);
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
    assert_int_equal(s.waits, WAITERS);
    assert_int_equal(s.blocks_held, 1);
    for (int i = 0; i <= WAITERS; i++)
        cache_put(c, g[i].got, 0);
    cache_free(c);
}

/* The same with a fill that fails: every waiter gets the error, nothing is
 * cached, and the next get fills again, in the failed fill's buffer. */
static void test_failed_fill(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 8 * u);
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
    assert_int_equal(s.blocks_held, 0);
    assert_int_equal(s.bytes_held, u);          /* the spare buffer */
    assert_false(cache_contains(c, 7, 1));

    F.gate_err = 0;                             /* no fill runs now */
    get_put(c, 7, 1, SMALL);
    assert_int_equal(atomic_load(&F.calls), 2);
    s = stats(c);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.fill_errors, 1);
    assert_int_equal(s.bytes_held, u);          /* the spare was used */
    assert_true(cache_contains(c, 7, 1));
    get_put(c, 7, 1, SMALL);                    /* now cached */
    assert_int_equal(atomic_load(&F.calls), 2);
    cache_free(c);
}

/* A failed fill with nobody waiting, and a failed prefetch. */
static void test_failed_fill_alone(void **state)
{
    (void)state;
    struct cache *c = new_cache(SMALL, 8 * block_cost(SMALL));
    F.fail_once = true;
    F.fail_once_t = 1;
    F.fail_once_c = 1;
    int err = 0;
    assert_null(cache_get(c, 1, 1, F4(SMALL), CALL, &err));
    assert_int_equal(err, EIO);
    assert_false(cache_contains(c, 1, 1));
    F.fail_once = true;
    assert_false(cache_prefetch(c, 1, 1, F4(SMALL), CALL));
    assert_false(cache_contains(c, 1, 1));
    assert_true(cache_prefetch(c, 1, 1, F4(SMALL), CALL));
    assert_true(cache_contains(c, 1, 1));
    assert_false(cache_prefetch(c, 1, 1, F4(SMALL), CALL));  /* there: no fill */
    assert_int_equal(atomic_load(&F.calls), 3);
    get_put(c, 1, 1, SMALL);
    struct cache_stats s = stats(c);
    assert_int_equal(s.fill_errors, 2);
    assert_int_equal(s.misses, 3);
    assert_int_equal(s.prefetched, 2);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.blocks_held, 1);
    cache_free(c);
}

/* A getter of a block a prefetch is filling waits for that fill too; the
 * prefetch leaves it unpinned. */
static void *prefetch_main(void *p)
{
    struct getter *g = p;
    cache_prefetch(g->c, g->t, g->ch, F4(g->n), CALL);
    return NULL;
}

static void test_prefetch_placeholder(void **state)
{
    (void)state;
    struct cache *c = new_cache(SMALL, 8 * block_cost(SMALL));
    F.gated = true;
    F.gate_t = 4;
    F.gate_c = 4;
    struct getter pf = { .c = c, .t = 4, .ch = 4, .n = SMALL }, g;
    assert_int_equal(pthread_create(&pf.th, NULL, prefetch_main, &pf), 0);
    wait_count(&F.entered, 1);
    assert_false(cache_prefetch(c, 4, 4, F4(SMALL), CALL));  /* being filled: returns at once */
    start_getter(&g, c, 4, 4, SMALL);
    wait_count(&F.waiters, 1);
    open_gate();
    assert_int_equal(pthread_join(pf.th, NULL), 0);
    assert_int_equal(pthread_join(g.th, NULL), 0);
    assert_non_null(g.got);
    assert_int_equal(g.bad, 0);
    assert_int_equal(atomic_load(&F.calls), 1);
    cache_put(c, g.got, 0);
    /* unpinned now: a clear drops it */
    cache_clear(c);
    assert_false(cache_contains(c, 4, 4));
    cache_free(c);
}

/* A claimed block is being filled from the claim on: a getter waits for
 * it, a second claim and a prefetch leave it alone; cache_fill_claimed
 * fills it once and releases it. */
static void test_claim(void **state)
{
    (void)state;
    struct cache *c = new_cache(SMALL, 8 * block_cost(SMALL));
    struct cache_block *k = cache_claim(c, 8, 1, F4(SMALL));
    assert_non_null(k);
    assert_true(cache_contains(c, 8, 1));
    assert_null(cache_claim(c, 8, 1, F4(SMALL)));
    assert_false(cache_prefetch(c, 8, 1, F4(SMALL), CALL));
    assert_null(cache_claim(c, 8, 2, F4(SMALL) + 1));  /* too long */
    struct getter g;
    start_getter(&g, c, 8, 1, SMALL);
    wait_count(&F.waiters, 1);
    assert_int_equal(atomic_load(&F.calls), 0);
    assert_true(cache_fill_claimed(c, k, CALL));
    assert_int_equal(pthread_join(g.th, NULL), 0);
    assert_non_null(g.got);
    assert_int_equal(g.bad, 0);
    assert_int_equal(atomic_load(&F.calls), 1);
    cache_put(c, g.got, 0);
    struct cache_stats s = stats(c);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.prefetched, 1);
    assert_int_equal(s.waits, 1);
    assert_int_equal(s.hits, 1);
    /* a failed fill of a claimed block: not cached, reported */
    F.fail_once = true;
    F.fail_once_t = 8;
    F.fail_once_c = 3;
    k = cache_claim(c, 8, 3, F4(SMALL));
    assert_non_null(k);
    assert_false(cache_fill_claimed(c, k, CALL));
    assert_false(cache_contains(c, 8, 3));
    assert_int_equal(stats(c).fill_errors, 1);
    cache_free(c);
}

/* ---- cache_clear ----------------------------------------------------------- */

/* Drops every unpinned block and frees its memory; a pinned one, and one
 * being filled (pinned by its filler), stay. */
static void test_clear(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 8 * u);
    for (uint64_t k = 0; k < 5; k++)
        get_put(c, 5, k, SMALL);
    get_use(c, 5, 9, SMALL);                    /* a used-up one */
    struct cache_block *kept = pin(c, 5, 2, SMALL);
    F.gated = true;
    F.gate_t = 6;
    F.gate_c = 0;
    struct getter g;
    start_getter(&g, c, 6, 0, SMALL);
    wait_count(&F.entered, 1);
    cache_clear(c);
    struct cache_stats s = stats(c);
    assert_int_equal(s.blocks_held, 2);
    assert_int_equal(s.bytes_held, 2 * u);
    assert_int_equal(s.evictions, 5);
    for (uint64_t k = 0; k < 5; k++)
        assert_true(cache_contains(c, 5, k) == (k == 2));
    assert_false(cache_contains(c, 5, 9));
    assert_true(cache_contains(c, 6, 0));
    assert_int_equal(bad_floats(cache_data(kept), 5, 2, SMALL, 1), 0);
    open_gate();
    assert_int_equal(pthread_join(g.th, NULL), 0);
    assert_non_null(g.got);
    assert_int_equal(g.bad, 0);
    cache_put(c, g.got, 0);
    cache_put(c, kept, 0);
    get_put(c, 5, 0, SMALL);                    /* filled again */
    assert_int_equal(atomic_load(&F.calls), 8);
    cache_clear(c);
    s = stats(c);
    assert_int_equal(s.blocks_held, 0);
    assert_int_equal(s.bytes_held, 0);
    cache_clear(c);                             /* on an empty cache */
    cache_free(c);
}

/* ---- counters -------------------------------------------------------------- */

static void test_stats(void **state)
{
    (void)state;
    uint64_t u = block_cost(SMALL);
    struct cache *c = new_cache(SMALL, 4 * u);
    struct cache_stats s = stats(c);
    assert_int_equal(s.capacity, 4 * u);
    assert_int_equal(s.block_bytes, F4(SMALL));
    assert_int_equal(s.hits + s.misses + s.evictions + s.fill_errors + s.waits + s.prefetched, 0);
    assert_int_equal(s.blocks_held + s.bytes_held, 0);
    get_put(c, 0, 0, SMALL);                    /* miss */
    get_put(c, 0, 0, SMALL);                    /* hit */
    get_put(c, 0, 1, SMALL);                    /* miss */
    F.fail_once = true;
    F.fail_once_t = 0;
    F.fail_once_c = 2;
    int err = 0;
    assert_null(cache_get(c, 0, 2, F4(SMALL), CALL, &err));  /* miss, fill error */
    s = stats(c);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 3);
    assert_int_equal(s.fill_errors, 1);
    assert_int_equal(s.evictions, 0);
    assert_int_equal(s.blocks_held, 2);
    assert_int_equal(s.bytes_held, 3 * u);      /* two blocks and a spare */
    for (uint64_t k = 10; k < 16; k++)          /* 6 more: 4 fit, 4 evicted */
        get_put(c, 0, k, SMALL);
    s = stats(c);
    assert_int_equal(s.misses, 9);
    assert_int_equal(s.evictions, 4);
    assert_int_equal(s.blocks_held, 4);
    assert_int_equal(s.bytes_held, 4 * u);
    assert_int_equal(s.misses, atomic_load(&F.calls));
    cache_free(c);
}

/* ---- 8 threads ------------------------------------------------------------- */

/*
 * 8 threads share a cache over 16 tensors x 64 blocks of different lengths
 * (~9 MiB in all, the cache holds 16 blocks): reads of 1 to 3 neighbouring
 * blocks, hot and cold, some used up and some not, prefetches, lookups,
 * now and then a clear; the fills of every 101st block fail.  Every block
 * a thread gets is checked whole when it arrives and sampled again before
 * it is put back.
 */
#define THREADS 8
#define TENSORS 16u
#define CHUNKS 64u
#define STRESS_MAX (256 + 4095)

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
    uint64_t bound;                 /* bytes_held may not exceed it */
    /* what it saw */
    uint64_t gets, bad, wrong_err, over_bound;
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    uint64_t x = 0x9E3779B97F4A7C15u * (w->id + 1);
    struct cache_block *held[3];
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
        if (what < 75) {                        /* a read of 1-3 blocks */
            unsigned k = 1 + (unsigned)((x >> 40) % 3), nheld = 0;
            for (unsigned i = 0; i < k && c + i < CHUNKS; i++) {
                int err = 0;
                size_t n = stress_len(t, c + i);
                struct cache_block *ch = cache_get(w->c, t, c + i, F4(n), CALL, &err);
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
                size_t n = stress_len(held_t[i], held_c[i]);
                w->bad += bad_floats(cache_data(held[i]), held_t[i], held_c[i], n, 61);
                /* a third used whole, a third in part, a third not */
                size_t used = (x >> (50 + i)) % 3 == 0 ? F4(n) : (x >> (50 + i)) % 3 == 1 ? F4(n / 2) : 0;
                cache_put(w->c, held[i], used);
            }
        } else if (what < 84) {
            cache_prefetch(w->c, t, c, F4(stress_len(t, c)), CALL);
        } else if (what < 87) {
            struct cache_block *k = cache_claim(w->c, t, c, F4(stress_len(t, c)));
            if (k)
                cache_fill_claimed(w->c, k, CALL);
        } else if (what < 96) {
            (void)cache_contains(w->c, t, c);
        } else if (what < 99 || (x >> 50) % 8) {
            struct cache_stats s;
            cache_get_stats(w->c, &s);
            w->over_bound += s.bytes_held > w->bound;
        } else {
            cache_clear(w->c);
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    uint64_t u = block_cost(STRESS_MAX);
    uint64_t cap = 16 * u;
    struct cache *c = new_cache(STRESS_MAX, cap);
    F.fail_mod = 101;
    /* fewer operations in the sanitizer runs (scripts/test) */
    unsigned ops = getenv("GGUFFS_TEST_QUICK") ? 1500 : 4000;
    pthread_barrier_t go;
    assert_int_equal(pthread_barrier_init(&go, NULL, THREADS), 0);
    struct worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        /* over the capacity only by what is pinned or being filled: at
         * most 3 pins per thread, or one prefetch */
        w[i] = (struct worker){ .c = c, .go = &go, .id = i, .ops = ops,
                                .bound = cap + THREADS * 3 * u };
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

/* The buffers (cache/slab.c): buffers of under half a huge page share
 * one, two to a page for f32 chunks, each writable and apart; larger ones
 * get mappings of their own; everything put back leaves no slab. */
static void test_slab(void **state)
{
    (void)state;
    struct slab_alloc a;
    slab_init(&a, (1u << 20) - (16u << 10));        /* an f32 chunk */
    assert_int_equal(a.per_slab, 2);
    assert_int_equal(slab_buf_bytes(&a), SLAB_HUGE_BYTES / 2);
    struct slab *s[3];
    unsigned char *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = slab_get(&a, &s[i]);
        assert_non_null(p[i]);
        memset(p[i], i + 1, a.map_bytes);
    }
    /* the first two share a slab when huge pages can be had at all */
    if (s[0]) {
        assert_ptr_equal(s[0], s[1]);
        assert_true(p[0] != p[1]);
        uintptr_t base = (uintptr_t)(p[0] < p[1] ? p[0] : p[1]);
        assert_int_equal(base % SLAB_HUGE_BYTES, 0);
        assert_true(s[2] != s[0]);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(p[i][a.map_bytes - 1], i + 1);
    for (int i = 0; i < 3; i++)
        slab_put(&a, p[i], s[i]);
    assert_null(a.slabs);
    slab_fini(&a);

    slab_init(&a, 4u << 20);                        /* a remote block */
    assert_int_equal(a.per_slab, 0);
    assert_int_equal(slab_buf_bytes(&a), 4u << 20);
    struct slab *own;
    unsigned char *q = slab_get(&a, &own);
    assert_non_null(q);
    assert_null(own);
    q[(4u << 20) - 1] = 7;
    slab_put(&a, q, own);
    slab_fini(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slab),
        cmocka_unit_test_setup_teardown(test_clock_second_chance, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_bytes_bounded, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_tiny_capacity, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_oversized_block, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_used_reused_first, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_used_partial, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_once_reused_first, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_buffers_reused, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_reserve, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_shared_huge_pages, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_pinning, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_pin_twice, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_placeholder_waits, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_failed_fill, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_failed_fill_alone, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_prefetch_placeholder, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_claim, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_clear, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_stats, reset_fill, reset_fill),
        cmocka_unit_test_setup_teardown(test_threads, reset_fill, reset_fill),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}

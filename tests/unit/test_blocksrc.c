/*
 * tests/unit/test_blocksrc.c — the block cache of remote bytes
 * (cache/blocksrc.h) over a fake in-memory source that counts its reads:
 * bytes at every alignment and straddle (with and without fetch threads,
 * with a directly served prefix), a multi-block read filled in parallel,
 * sequential reads prefetching a window that ramps 1, 2, 4, ..., random
 * reads prefetching nothing, failed fills (EIO, not cached, retried by
 * the next read, never wrong bytes; with a hold, failed at once until the
 * source answers again or the hold ends), the memory bound, a long stream
 * reusing what it read, the disk-cache
 * hook, spans lent for replies (the disk cache's file, pinned blocks, the
 * prefix), closing a source with prefetches queued.
 *
 * Nothing sleeps or looks at a clock to decide anything (but the end of a
 * failure's hold of 1 ms, slept past by 20 ms).  The fake source
 * can hold reads made by threads other than the test's at a gate that the
 * test opens; the test waits for the number of reads inside the source
 * (a condition variable).  One hang guard: a wait for reads that do not
 * come gives up after HANG_GUARD seconds and fails with the count seen.
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
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/blocksrc.h"

#define BLK (64u << 10)            /* block bytes */
#define HANG_GUARD 60

/* ---- the fake source -------------------------------------------------------- */

struct fake {
    struct gguf_source s;
    uint8_t *data;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t main;                 /* the test's thread: never gated */
    bool gated;                     /* reads of other threads wait for !gated */
    unsigned inside, max_inside;    /* reads in progress */
    uint64_t reads, bytes;
    uint64_t fail_lo, fail_hi;      /* reads overlapping [lo, hi) fail ... */
    unsigned fail_n;                /* ... this many times */
    unsigned closed;
};

static uint8_t byte_at(uint64_t i)
{
    return (uint8_t)((i * 2654435761u) >> 13 ^ i);
}

static ssize_t fake_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    struct fake *f = (struct fake *)s;
    if (off >= s->size)
        return 0;
    if (len > s->size - off)
        len = (size_t)(s->size - off);
    pthread_mutex_lock(&f->mu);
    f->reads++;
    f->inside++;
    if (f->inside > f->max_inside)
        f->max_inside = f->inside;
    pthread_cond_broadcast(&f->cv);
    while (f->gated && !pthread_equal(pthread_self(), f->main))
        pthread_cond_wait(&f->cv, &f->mu);
    bool fail = f->fail_n && off < f->fail_hi && off + len > f->fail_lo;
    if (fail)
        f->fail_n--;
    else
        f->bytes += len;
    f->inside--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (fail)
        return -EIO;
    memcpy(buf, f->data + off, len);
    return (ssize_t)len;
}

static void fake_close(struct gguf_source *s)
{
    struct fake *f = (struct fake *)s;
    f->closed++;                    /* the struct is the test's */
}

static const struct gguf_source_ops fake_ops = { .read = fake_read, .close = fake_close };

static void fake_init(struct fake *f, uint64_t size)
{
    memset(f, 0, sizeof *f);
    f->s.ops = &fake_ops;
    f->s.size = size;
    f->s.name = "fake";
    f->s.identity = "fake:1";
    f->s.fd = -1;
    f->data = malloc(size ? size : 1);
    assert_non_null(f->data);
    for (uint64_t i = 0; i < size; i++)
        f->data[i] = byte_at(i);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->main = pthread_self();
}

static void fake_free(struct fake *f)
{
    free(f->data);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
}

static uint64_t fake_reads(struct fake *f)
{
    pthread_mutex_lock(&f->mu);
    uint64_t n = f->reads;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void fake_gate(struct fake *f, bool gated)
{
    pthread_mutex_lock(&f->mu);
    f->gated = gated;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Waits until n reads are inside the source at once (gated); the most
 * seen (the hang guard: fails after HANG_GUARD seconds). */
static unsigned wait_inside(struct fake *f, unsigned n)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HANG_GUARD;
    pthread_mutex_lock(&f->mu);
    while (f->inside < n)
        if (pthread_cond_timedwait(&f->cv, &f->mu, &until) == ETIMEDOUT)
            break;
    unsigned got = f->max_inside;
    pthread_mutex_unlock(&f->mu);
    return got;
}

static struct rcache *new_rc(uint64_t capacity_blocks, unsigned fetchers)
{
    /* a block costs its room and some bookkeeping (cache/cache.h) */
    struct rcache_opts o = { .block_bytes = BLK, .capacity = capacity_blocks * (BLK + 1024),
                             .fetchers = fetchers };
    struct rcache *rc = rcache_new(&o);
    assert_non_null(rc);
    return rc;
}

static struct gguf_source *wrap(struct rcache *rc, struct fake *f, uint64_t direct)
{
    struct gguf_source *s;
    assert_int_equal(blocksrc_wrap(rc, &f->s, direct, NULL, &s), GGUF_OK);
    assert_int_equal(s->size, f->s.size);
    assert_string_equal(s->identity, f->s.identity);
    assert_int_equal(s->fd, -1);
    assert_ptr_equal(s->below, &f->s);
    return s;
}

static bool read_ok(struct gguf_source *s, struct fake *f, uint64_t off, size_t len)
{
    uint8_t *buf = malloc(len ? len : 1);
    assert_non_null(buf);
    ssize_t r = s->ops->read(s, buf, len, off);
    uint64_t want = off >= f->s.size ? 0 : f->s.size - off < len ? f->s.size - off : len;
    bool ok = r == (ssize_t)want && memcmp(buf, f->data + off, (size_t)want) == 0;
    free(buf);
    return ok;
}

static struct rcache_stats stats(struct rcache *rc)
{
    struct rcache_stats st;
    rcache_get_stats(rc, &st);
    return st;
}

/* Waits until the fetch threads have nothing queued or running (they run
 * on their own: this only yields until they are done). */
static void drain(struct rcache *rc)
{
    while (stats(rc).inflight)
        sched_yield();
}

/* ---- bytes ------------------------------------------------------------------- */

static void alignments(bool threads)
{
    struct fake f;
    uint64_t size = 5ull * BLK + 1234;
    fake_init(&f, size);
    struct rcache *rc = new_rc(64, 4);
    if (threads)
        assert_true(rcache_start(rc));
    struct gguf_source *s = wrap(rc, &f, 1000);
    static const int64_t deltas[] = { -4097, -4096, -1, 0, 1, 7, 4096 };
    static const size_t lens[] = { 1, 2, 999, 4096, BLK - 1, BLK, BLK + 1, 2 * BLK + 3,
                                   3 * BLK, 6 * BLK };
    for (uint64_t k = 0; k <= 5; k++)
        for (size_t d = 0; d < sizeof deltas / sizeof *deltas; d++) {
            int64_t o = (int64_t)(k * BLK) + deltas[d];
            if (o < 0)
                continue;
            for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
                if (!read_ok(s, &f, (uint64_t)o, lens[l]))
                    fail_msg("bytes at %lld + %zu (threads %d)", (long long)o, lens[l], threads);
        }
    /* the prefix, and across its end */
    assert_true(read_ok(s, &f, 0, 1000));
    assert_true(read_ok(s, &f, 999, 2));
    assert_true(read_ok(s, &f, size - 1, 100));
    assert_true(read_ok(s, &f, size, 100));
    assert_true(read_ok(s, &f, 0, (size_t)size));
    /* every block was fetched once, whole: at most one read per block
     * besides the prefix's */
    uint64_t before = fake_reads(&f);
    for (uint64_t o = 0; o < size; o += 4096)
        assert_true(read_ok(s, &f, o, 4096));
    assert_int_equal(fake_reads(&f), before + 1);   /* the prefix: 1 read */
    gguf_source_close(s);
    assert_int_equal(f.closed, 1);
    rcache_put(rc);
    fake_free(&f);
}

static void test_alignments(void **state)
{
    (void)state;
    alignments(false);
    alignments(true);
}

/* ---- parallel fills ------------------------------------------------------------ */

struct reader {
    struct gguf_source *s;
    struct fake *f;
    uint64_t off;
    size_t len;
    bool ok;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    r->ok = read_ok(r->s, r->f, r->off, r->len);
    return NULL;
}

static void test_parallel(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, 16ull * BLK);
    struct rcache *rc = new_rc(64, 4);
    assert_true(rcache_start(rc));
    struct gguf_source *s = wrap(rc, &f, 0);
    /* the reader is not the test's thread: its fill is gated too */
    fake_gate(&f, true);
    struct reader r = { s, &f, BLK + 100, 4 * BLK - 200, false };   /* blocks 1-4 */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, reader_main, &r), 0);
    unsigned most = wait_inside(&f, 4);
    fake_gate(&f, false);
    pthread_join(th, NULL);
    assert_true(r.ok);
    if (most < 4)
        fail_msg("a read of 4 blocks: %u fills at once, want 4", most);
    assert_int_equal(fake_reads(&f), 4);
    struct rcache_stats st = stats(rc);
    assert_int_equal(st.prefetched, 3);
    assert_true(st.inflight_max <= 4);
    /* never more fills at once than the fetchers (+ the reader's own) */
    fake_gate(&f, true);
    r = (struct reader){ s, &f, 6 * BLK, 10 * BLK, false };
    assert_int_equal(pthread_create(&th, NULL, reader_main, &r), 0);
    most = wait_inside(&f, 5);
    fake_gate(&f, false);
    pthread_join(th, NULL);
    assert_true(r.ok);
    assert_int_equal(most, 5);
    assert_true(stats(rc).inflight_max <= 4);
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

/* ---- readahead ----------------------------------------------------------------- */

static void test_sequential_ramps(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, 64ull * BLK);
    struct rcache *rc = new_rc(128, 8);             /* limit 8, window up to 16 */
    assert_true(rcache_start(rc));
    struct gguf_source *s = wrap(rc, &f, 0);
    /* fetches ahead wait at the gate: what is queued is counted exactly */
    fake_gate(&f, true);
    /* all in block 0: a read of a block held at the gate would wait */
    const size_t step = BLK / 8;
    static const uint64_t want[] = { 0, 1, 2, 4, 8 };
    for (unsigned i = 0; i < 5; i++) {
        assert_true(read_ok(s, &f, i * step, step));
        if (stats(rc).prefetched != want[i])
            fail_msg("after sequential read %u: %llu blocks prefetched, want %llu", i + 1,
                     (unsigned long long)stats(rc).prefetched, (unsigned long long)want[i]);
    }
    /* the in-flight limit holds while the fetches are held */
    assert_true(read_ok(s, &f, 5 * step, step));
    assert_int_equal(stats(rc).prefetched, 8);
    fake_gate(&f, false);
    /* the stream goes on: the blocks ahead were fetched by the threads,
     * the reader's own fetches are few */
    uint64_t misses0 = stats(rc).misses;
    for (uint64_t o = 6 * step; o < 32ull * BLK; o += step)
        assert_true(read_ok(s, &f, o, step));
    struct rcache_stats st = stats(rc);
    /* a block reached while still queued is fetched by the reader, so the
     * queue moves with the reader even if the threads do not run */
    assert_true(st.prefetched >= 16);
    assert_true(st.inflight_max <= 8);
    (void)misses0;
    /* two streams at once, interleaved (past what the first one fetched
     * ahead: at most 16 blocks after block 31): both prefetch */
    drain(rc);
    uint64_t pf = stats(rc).prefetched;
    for (uint64_t i = 0; i < 2; i++) {
        assert_true(read_ok(s, &f, 50ull * BLK + i * step, step));
        assert_true(read_ok(s, &f, 58ull * BLK + i * step, step));
    }
    if (stats(rc).prefetched != pf + 2)
        fail_msg("two streams: %llu prefetched, before %llu",
                 (unsigned long long)stats(rc).prefetched, (unsigned long long)pf);
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

static void test_random_no_prefetch(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, 200ull * BLK);
    struct rcache *rc = new_rc(32, 8);
    assert_true(rcache_start(rc));
    struct gguf_source *s = wrap(rc, &f, 0);
    /* blocks far apart (37 apart, mod 200: no read lands next to any of
     * the 8 before it), small reads */
    for (unsigned i = 0; i < 100; i++) {
        uint64_t k = (i * 37u) % 200;
        assert_true(read_ok(s, &f, k * BLK + (i * 977) % (BLK - 512), 512));
    }
    struct rcache_stats st = stats(rc);
    assert_int_equal(st.prefetched, 0);
    assert_int_equal(st.hits + st.misses, 100);
    assert_int_equal(fake_reads(&f), st.misses);
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

/* ---- errors --------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, 32ull * BLK);
    struct rcache *rc = new_rc(64, 4);
    struct gguf_source *s = wrap(rc, &f, 0);
    uint8_t *buf = malloc(2 * BLK);
    assert_non_null(buf);
    /* no threads: the reader's own fill fails, is not cached, is retried */
    f.fail_lo = 3 * BLK;
    f.fail_hi = 3 * BLK + 1;
    f.fail_n = 1;
    assert_int_equal(s->ops->read(s, buf, 100, 3 * BLK + 50), -EIO);
    assert_int_equal(stats(rc).fill_errors, 1);
    uint64_t n = fake_reads(&f);
    assert_true(read_ok(s, &f, 3 * BLK + 50, 100));
    assert_int_equal(fake_reads(&f), n + 1);
    /* a read of two blocks whose second fails: EIO, and the first stays */
    f.fail_lo = 6 * BLK;
    f.fail_hi = 6 * BLK + 1;
    f.fail_n = 1;
    assert_int_equal(s->ops->read(s, buf, 2 * BLK, 5 * BLK), -EIO);
    n = fake_reads(&f);
    assert_true(read_ok(s, &f, 5 * BLK, 2 * BLK));
    assert_int_equal(fake_reads(&f), n + 1);        /* block 6 only */
    /* with threads: prefetched blocks fail; a read is right or EIO, and
     * the next one is right */
    assert_true(rcache_start(rc));
    f.fail_lo = 10 * BLK;
    f.fail_hi = 20 * BLK;
    f.fail_n = 4;
    unsigned eio = 0;
    for (uint64_t o = 8ull * BLK; o < 24ull * BLK; o += BLK / 2) {
        ssize_t r = s->ops->read(s, buf, BLK / 2, o);
        if (r == -EIO) {
            /* the next read tries again (and may meet a failure left) */
            eio++;
            bool ok = false;
            for (unsigned t = 0; t < 5 && !ok; t++)
                ok = read_ok(s, &f, o, BLK / 2);
            assert_true(ok);
        } else {
            assert_int_equal(r, BLK / 2);
            assert_memory_equal(buf, f.data + o, BLK / 2);
        }
    }
    pthread_mutex_lock(&f.mu);
    unsigned left = f.fail_n;
    pthread_mutex_unlock(&f.mu);
    assert_int_equal(left, 0);
    assert_true(eio <= 4);
    assert_true(stats(rc).fill_errors >= 2 + 4);
    free(buf);
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

/* A block whose fill failed slowly fails at once for fail_hold_ms (the
 * kernel's second request for the pages of a failed readahead must not
 * wait for the source again), until a fill of the source succeeds, or the
 * hold ends; a quick failure is not held.  (fail_slow_ms 0: every failure
 * is slow.) */
static void test_failure_hold(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, 32ull * BLK);
    struct rcache_opts o = { .block_bytes = BLK, .capacity = 64 * (BLK + 1024), .fetchers = 4,
                             .fail_hold_ms = 3600 * 1000 };
    struct rcache *rc = rcache_new(&o);
    assert_non_null(rc);
    struct gguf_source *s = wrap(rc, &f, 0);
    uint8_t *buf = malloc(BLK);
    assert_non_null(buf);
    /* the reader's own fill fails; the next read of that block fails at
     * once, without a read of the source */
    f.fail_lo = 3 * BLK;
    f.fail_hi = 3 * BLK + 1;
    f.fail_n = 1;
    assert_int_equal(s->ops->read(s, buf, 100, 3 * BLK + 50), -EIO);
    uint64_t n = fake_reads(&f);
    assert_int_equal(s->ops->read(s, buf, 100, 3 * BLK + 4000), -EIO);
    assert_int_equal(fake_reads(&f), n);
    assert_int_equal(stats(rc).failed_held, 1);
    /* another block is read from the source: it answers again, so the
     * failed block is asked for again too */
    assert_true(read_ok(s, &f, 9 * BLK, 100));
    assert_int_equal(fake_reads(&f), n + 1);
    assert_true(read_ok(s, &f, 3 * BLK + 50, 100));
    assert_int_equal(fake_reads(&f), n + 2);
    /* a prefetch that fails holds its block's failure the same way: a
     * sequential reader's window reaches block 12 and on, which fail (the
     * source is down from there).  Blocks 10 and 11 are cached first,
     * without threads: a fill of them that succeeded after block 12's
     * failure would end its hold (the source answers), so none may run
     * once the fetch threads do */
    for (uint64_t o2 = 10 * BLK; o2 < 12 * BLK; o2 += BLK / 2)
        assert_true(read_ok(s, &f, o2, BLK / 2));
    n = fake_reads(&f);
    f.fail_lo = 12 * BLK;
    f.fail_hi = 32 * BLK;
    f.fail_n = 1000;
    assert_true(rcache_start(rc));
    for (uint64_t o2 = 10 * BLK; o2 < 12 * BLK; o2 += BLK / 2)
        assert_true(read_ok(s, &f, o2, BLK / 2));
    drain(rc);
    assert_true(stats(rc).fill_errors >= 2);
    assert_true(fake_reads(&f) > n);    /* the prefetches asked */
    rcache_stop(rc);                /* no more prefetches: reads are counted */
    n = fake_reads(&f);
    uint64_t held = stats(rc).failed_held;
    assert_int_equal(s->ops->read(s, buf, 100, 12 * BLK), -EIO);
    assert_int_equal(fake_reads(&f), n);
    assert_int_equal(stats(rc).failed_held, held + 1);
    f.fail_n = 0;
    gguf_source_close(s);
    rcache_put(rc);

    /* the hold ends: after 1 ms, the block is asked for again (a sleep of
     * 20 ms is at least that long: nothing races) */
    o.fail_hold_ms = 1;
    rc = rcache_new(&o);
    assert_non_null(rc);
    s = wrap(rc, &f, 0);
    f.fail_lo = 5 * BLK;
    f.fail_hi = 5 * BLK + 1;
    f.fail_n = 1;
    assert_int_equal(s->ops->read(s, buf, 100, 5 * BLK), -EIO);
    nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
    n = fake_reads(&f);
    assert_true(read_ok(s, &f, 5 * BLK, 100));
    assert_int_equal(fake_reads(&f), n + 1);
    assert_int_equal(stats(rc).failed_held, 0);
    gguf_source_close(s);
    rcache_put(rc);

    /* only slow failures are held: one that takes less than fail_slow_ms
     * (the fake fails at once; a minute is far more) is asked for again by
     * the next read */
    o.fail_hold_ms = 3600 * 1000;
    o.fail_slow_ms = 60 * 1000;
    rc = rcache_new(&o);
    assert_non_null(rc);
    s = wrap(rc, &f, 0);
    f.fail_lo = 7 * BLK;
    f.fail_hi = 7 * BLK + 1;
    f.fail_n = 1;
    assert_int_equal(s->ops->read(s, buf, 100, 7 * BLK), -EIO);
    n = fake_reads(&f);
    assert_true(read_ok(s, &f, 7 * BLK, 100));
    assert_int_equal(fake_reads(&f), n + 1);
    assert_int_equal(stats(rc).failed_held, 0);
    free(buf);
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

/* ---- memory ----------------------------------------------------------------------- */

static void test_memory_bound(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, 300ull * BLK);
    struct rcache *rc = new_rc(8, 8);              /* limit 4, window 2 */
    assert_true(rcache_start(rc));
    struct gguf_source *s = wrap(rc, &f, 0);
    struct rcache_stats st = stats(rc);
    uint64_t cost = st.capacity / 8;                /* at least a block's */
    uint64_t most = 0;
    for (uint64_t o = 0; o < f.s.size; o += BLK / 3) {
        assert_true(read_ok(s, &f, o, BLK / 3));
        st = stats(rc);
        if (st.bytes_held > most)
            most = st.bytes_held;
    }
    /* the capacity, plus the blocks pinned by fills in flight (4) and by
     * the reader (1) */
    assert_true(most <= st.capacity + 5 * cost);
    assert_true(st.blocks_held <= 8 + 5);
    rcache_stop(rc);
    st = stats(rc);
    assert_true(st.bytes_held <= st.capacity);
    /* random reads over a large file */
    for (uint64_t i = 0, k = 5; i < 200; i++) {
        k = (k * 131 + 7) % 300;
        assert_true(read_ok(s, &f, k * BLK + 10, 2 * BLK));
        assert_true(stats(rc).bytes_held <= st.capacity + 2 * cost);
    }
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

/* A stream much longer than the cache: what it reads past its full
 * window (16 blocks here) is reused once read, so the cache holds the
 * start of the stream, the window and the pins, not the capacity; blocks
 * cached by other reads before it stay.  Without threads (exact counts),
 * then with them (a bound). */
static void long_stream(bool threads)
{
    struct fake f;
    fake_init(&f, 600ull * BLK);
    struct rcache *rc = new_rc(256, 8);             /* limit 8, window up to 16 */
    if (threads)
        assert_true(rcache_start(rc));
    struct gguf_source *s = wrap(rc, &f, 0);
    uint64_t cost = stats(rc).capacity / 256;
    /* a few random reads first: kept */
    for (uint64_t k = 0; k < 5; k++)
        assert_true(read_ok(s, &f, (450 + 2 * k) * BLK, 100));
    uint64_t most = 0;
    for (uint64_t o = 0; o < 400ull * BLK; o += BLK / 4) {
        assert_true(read_ok(s, &f, o, BLK / 4));
        uint64_t h = stats(rc).bytes_held;
        most = h > most ? h : most;
    }
    drain(rc);
    /* 5 random, 17 blocks at the start of the stream (0 to 16), the window
     * ahead (16) and what is in flight or pinned (8 + 1) */
    if (most > (5 + 17 + 16 + 9) * cost)
        fail_msg("long stream (threads %d): %llu blocks held at most", threads,
                 (unsigned long long)(most / cost));
    if (!threads)
        assert_int_equal(stats(rc).blocks_held, 5 + 17 + 1);
    /* the start of the stream and the random reads are still cached (read
     * backwards, as a stream would fetch ahead) */
    uint64_t before = fake_reads(&f);
    for (uint64_t k = 17; k-- > 0;)                 /* backwards: nothing ahead */
        assert_true(read_ok(s, &f, k * BLK + 5, 10));
    for (uint64_t k = 0; k < 5; k++)
        assert_true(read_ok(s, &f, (450 + 2 * k) * BLK, 100));
    assert_int_equal(fake_reads(&f), before);
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

static void test_long_stream(void **state)
{
    (void)state;
    long_stream(false);
    long_stream(true);
}

/* ---- the disk cache hook ------------------------------------------------------------ */

struct disk {
    uint64_t present;               /* blocks [0, present) are "on disk" */
    const uint8_t *data;
    atomic_uint_fast64_t reads, writes;
};

static bool disk_read(void *ctx, uint64_t block, void *dst, size_t len)
{
    struct disk *d = ctx;
    atomic_fetch_add(&d->reads, 1);
    if (block >= d->present)
        return false;
    memcpy(dst, d->data + block * BLK, len);
    return true;
}

static void disk_write(void *ctx, uint64_t block, const void *src, size_t len)
{
    struct disk *d = ctx;
    (void)block;
    (void)src;
    (void)len;
    atomic_fetch_add(&d->writes, 1);
}

static void test_disk_hook(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, 8ull * BLK + 5);
    struct rcache *rc = new_rc(64, 2);
    struct disk d = { .present = 4, .data = f.data };
    struct blocksrc_disk hook = { .read = disk_read, .write = disk_write, .ctx = &d };
    struct gguf_source *s;
    assert_int_equal(blocksrc_wrap(rc, &f.s, 0, &hook, &s), GGUF_OK);
    assert_true(read_ok(s, &f, 0, (size_t)f.s.size));
    assert_int_equal(fake_reads(&f), 5);            /* blocks 4-8 */
    assert_int_equal(atomic_load(&d.reads), 9);
    assert_int_equal(atomic_load(&d.writes), 5);
    assert_int_equal(stats(rc).disk_hits, 4);
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

/* A disk that holds blocks [0, present) in a memory file, for replies
 * spliced from it (the wrapper's spans). */
struct hdisk {
    struct disk d;
    int fd;
    atomic_int holds;
    atomic_uint_fast64_t present_reads;     /* fills of blocks it has */
};

static bool hdisk_read(void *ctx, uint64_t block, void *dst, size_t len)
{
    struct hdisk *h = ctx;
    if (block < h->d.present)
        atomic_fetch_add(&h->present_reads, 1);
    return disk_read(&h->d, block, dst, len);
}

static bool hdisk_has(void *ctx, uint64_t block)
{
    struct hdisk *h = ctx;
    return block < h->d.present;
}

static bool hdisk_hold(void *ctx, uint64_t block, size_t len, int *fd, uint64_t *pos)
{
    struct hdisk *h = ctx;
    if (block >= h->d.present || len != BLK)
        return false;
    atomic_fetch_add(&h->holds, 1);
    *fd = h->fd;
    *pos = block * BLK;
    return true;
}

static void hdisk_release(void *ctx, uint64_t block)
{
    struct hdisk *h = ctx;
    (void)block;
    atomic_fetch_sub(&h->holds, 1);
}

/* gguf_source_spans' count (it must succeed: 0) */
static int spans(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp, int max)
{
    int n = -1;
    assert_int_equal(gguf_source_spans(s, off, len, sp, max, &n), 0);
    return n;
}

/* The bytes spans sp[0..n) hold equal the source's at off, len in all. */
static bool spans_ok(const struct gguf_span *sp, int n, struct fake *f, uint64_t off,
                     size_t len)
{
    size_t done = 0;
    for (int i = 0; i < n; i++) {
        bool ok;
        if (sp[i].mem) {
            ok = memcmp(sp[i].mem, f->data + off + done, sp[i].len) == 0;
        } else {
            uint8_t *buf = malloc(sp[i].len);
            assert_non_null(buf);
            ok = pread(sp[i].fd, buf, sp[i].len, (off_t)sp[i].pos) == (ssize_t)sp[i].len &&
                 memcmp(buf, f->data + off + done, sp[i].len) == 0;
            free(buf);
        }
        if (!ok)
            return false;
        done += sp[i].len;
    }
    return done == len;
}

/* Spans of the disk cache's file while it holds every block of a range
 * (held until released); else pinned blocks (memory). */
static void test_disk_hold(void **state)
{
    (void)state;
    struct fake f;
    fake_init(&f, 16ull * BLK);
    struct rcache *rc = new_rc(64, 2);
    struct hdisk h = { .d = { .present = 6, .data = f.data } };
    h.fd = memfd_create("hdisk", 0);
    assert_true(h.fd >= 0);
    assert_int_equal(pwrite(h.fd, f.data, 6 * BLK, 0), (ssize_t)(6 * BLK));
    struct blocksrc_disk hook = { .read = hdisk_read, .write = disk_write, .has = hdisk_has,
                                  .hold = hdisk_hold, .release = hdisk_release, .ctx = &h };
    struct gguf_source *s;
    assert_int_equal(blocksrc_wrap(rc, &f.s, 0, &hook, &s), GGUF_OK);
    assert_true(rcache_start(rc));
    struct gguf_span sp[4];
    /* within a block, and straddling two: held while the spans are used */
    int n = spans(s, 100, 1000, sp, 4);
    assert_int_equal(n, 1);
    assert_null(sp[0].mem);
    assert_int_equal(sp[0].fd, h.fd);
    assert_int_equal(atomic_load(&h.holds), 1);
    assert_true(spans_ok(sp, n, &f, 100, 1000));
    gguf_spans_release(sp, n, true);
    assert_int_equal(atomic_load(&h.holds), 0);
    n = spans(s, BLK - 10, BLK + 5, sp, 4);
    assert_int_equal(n, 2);
    assert_true(sp[0].fd == h.fd && sp[1].fd == h.fd && !sp[0].mem && !sp[1].mem);
    assert_true(spans_ok(sp, n, &f, BLK - 10, BLK + 5));
    gguf_spans_release(sp, n, true);
    /* past the end: none */
    assert_int_equal(spans(s, 16 * BLK, 10, sp, 4), 0);
    /* a sequential reader through the held blocks: its readahead fetches
     * only blocks past them, never one the disk has */
    for (uint64_t o = 0; o < 6 * BLK; o += BLK / 2) {
        n = spans(s, o, BLK / 2, sp, 4);
        assert_int_equal(n, 1);
        assert_null(sp[0].mem);
        assert_true(spans_ok(sp, n, &f, o, BLK / 2));
        gguf_spans_release(sp, n, true);
    }
    rcache_stop(rc);
    struct rcache_stats st = stats(rc);
    assert_true(st.prefetched >= 1);
    assert_int_equal(atomic_load(&h.present_reads), 0);
    assert_int_equal(st.disk_spans, 1 + 2 + 12);
    /* and a read after them goes on from there, through the cache */
    assert_true(read_ok(s, &f, 6 * BLK, 2 * BLK));
    assert_int_equal(atomic_load(&h.present_reads), 0);
    /* more blocks than spans offered: copied (one span of memory); one
     * block the disk does not have: the blocks pinned (memory); nothing
     * left held either way */
    n = spans(s, 0, 5 * BLK, sp, 4);
    assert_int_equal(n, 1);
    assert_non_null(sp[0].mem);
    assert_true(spans_ok(sp, n, &f, 0, 5 * BLK));
    gguf_spans_release(sp, n, true);
    n = spans(s, 5 * BLK, 2 * BLK, sp, 4);
    assert_int_equal(n, 2);
    assert_true(sp[0].mem && sp[1].mem);
    assert_true(spans_ok(sp, n, &f, 5 * BLK, 2 * BLK));
    gguf_spans_release(sp, n, true);
    assert_int_equal(atomic_load(&h.holds), 0);
    assert_int_equal(stats(rc).disk_spans, 1 + 2 + 12);
    gguf_source_close(s);
    rcache_put(rc);
    close(h.fd);
    fake_free(&f);
}

/* Pinned blocks lent as memory (no disk cache): the prefix from the
 * wrapped source, blocks crossed at every border, cut at the end, a fill
 * that fails (EIO, nothing left pinned), and pins released: the cache
 * then holds no pinned block (a capacity of 4 blocks fills up again). */
static void test_spans(void **state)
{
    (void)state;
    struct fake f;
    uint64_t size = 6ull * BLK + 100;
    fake_init(&f, size);
    struct rcache *rc = new_rc(4, 1);
    struct gguf_source *s = wrap(rc, &f, 1000);
    struct gguf_span sp[4];
    /* the prefix alone, and across its end: the wrapped source's bytes
     * (copied: the fake lends none), then the first block */
    int n = spans(s, 10, 500, sp, 4);
    assert_int_equal(n, 1);
    assert_true(spans_ok(sp, n, &f, 10, 500));
    gguf_spans_release(sp, n, true);
    n = spans(s, 900, 200, sp, 4);
    assert_int_equal(n, 2);
    assert_int_equal(sp[0].len, 100);
    assert_true(spans_ok(sp, n, &f, 900, 200));
    gguf_spans_release(sp, n, true);
    /* across two and three blocks: one span per block, in order */
    n = spans(s, BLK - 1, 2, sp, 4);
    assert_int_equal(n, 2);
    assert_int_equal(sp[0].len, 1);
    assert_true(spans_ok(sp, n, &f, BLK - 1, 2));
    gguf_spans_release(sp, n, true);
    n = spans(s, 2 * BLK - 5, BLK + 10, sp, 4);
    assert_int_equal(n, 3);
    assert_true(sp[0].mem && sp[1].mem && sp[2].mem);
    assert_true(spans_ok(sp, n, &f, 2 * BLK - 5, BLK + 10));
    gguf_spans_release(sp, n, true);
    /* cut at the end of the source; none past it */
    n = spans(s, size - 50, 1000, sp, 4);
    assert_int_equal(n, 1);
    assert_true(spans_ok(sp, n, &f, size - 50, 50));
    gguf_spans_release(sp, n, true);
    assert_int_equal(spans(s, size, 10, sp, 4), 0);
    /* every block read once more, each pinned and released: with room
     * for 4 blocks, none left pinned */
    for (uint64_t o = 1000; o < size; o += BLK / 2) {
        n = spans(s, o, BLK / 2, sp, 4);
        assert_true(n >= 1);
        assert_true(spans_ok(sp, n, &f, o, o + BLK / 2 <= size ? BLK / 2 : size - o));
        gguf_spans_release(sp, n, true);
    }
    /* a failed fill: EIO, nothing held; the next try reads it */
    f.fail_lo = 3 * BLK;
    f.fail_hi = 3 * BLK + 1;
    f.fail_n = 1;
    n = -1;
    struct rcache_stats before = stats(rc);
    /* 2 blocks: the second (block 3, evicted by the reads after it)
     * fails once, after block 2 was pinned */
    int e = gguf_source_spans(s, 2 * BLK + 10, BLK, sp, 4, &n);
    assert_int_equal(stats(rc).fill_errors, before.fill_errors + 1);
    assert_int_equal(e, EIO);
    assert_int_equal(n, 0);
    n = spans(s, 2 * BLK + 10, BLK, sp, 4);
    assert_int_equal(n, 2);
    assert_true(spans_ok(sp, n, &f, 2 * BLK + 10, BLK));
    gguf_spans_release(sp, n, true);
    assert_int_equal(stats(rc).blocks_held <= 4, true);
    gguf_source_close(s);
    rcache_put(rc);
    fake_free(&f);
}

/* ---- closing ------------------------------------------------------------------------ */

static void test_close_with_queue(void **state)
{
    (void)state;
    struct fake f1, f2;
    fake_init(&f1, 64ull * BLK);
    fake_init(&f2, 64ull * BLK);
    struct rcache *rc = new_rc(64, 2);
    assert_true(rcache_start(rc));
    struct gguf_source *s1 = wrap(rc, &f1, 0), *s2 = wrap(rc, &f2, 0);
    fake_gate(&f1, true);
    /* sequential reads in block 0 queue what the limit allows; the fetches
     * wait at the gate */
    for (uint64_t i = 0; i < 4; i++)
        assert_true(read_ok(s1, &f1, i * (BLK / 4), BLK / 4));
    assert_true(wait_inside(&f1, 2) >= 2);
    fake_gate(&f1, false);
    gguf_source_close(s1);          /* drops the queue, waits for the fetches */
    assert_int_equal(f1.closed, 1);
    /* the other source still works, through the threads */
    assert_true(read_ok(s2, &f2, 0, 10 * BLK));
    /* the creator's reference first: freed with the last source */
    rcache_put(rc);
    assert_true(read_ok(s2, &f2, 20 * BLK, 3 * BLK));
    gguf_source_close(s2);
    fake_free(&f1);
    fake_free(&f2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignments),
        cmocka_unit_test(test_parallel),
        cmocka_unit_test(test_sequential_ramps),
        cmocka_unit_test(test_random_no_prefetch),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_failure_hold),
        cmocka_unit_test(test_memory_bound),
        cmocka_unit_test(test_long_stream),
        cmocka_unit_test(test_disk_hook),
        cmocka_unit_test(test_disk_hold),
        cmocka_unit_test(test_spans),
        cmocka_unit_test(test_close_with_queue),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_prefetch.c — the prefetch engine (cache/prefetch.h) over
 * a real block cache (cache/cache.h) whose fills are counted and can be
 * held at a gate: the bound (limit, then PREFETCH_FULL), the order (front
 * before back), a reader taking a queued job back (run on its own thread,
 * filled once), a job whose fill needs a block queued behind it on the
 * only thread (no deadlock: it takes that one back too), dropping one
 * arg's jobs (queued ones dropped, a running one waited for), stopping
 * (queued jobs dropped, adds refused after), and many threads adding,
 * taking back and getting at once (each job run once, no block filled by
 * two threads at once: also run under TSan).
 *
 * Nothing sleeps or looks at a clock to decide anything: the test waits
 * for the event itself (fills inside the gate, a thread inside a wait,
 * counted through the wrapped pthread_cond_wait and pthread_join).  One
 * hang guard: a wait that does not end gives up after HANG_GUARD seconds
 * and fails with what it saw.
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
#include <time.h>

#include <cmocka.h>

#include "cache/cache.h"
#include "cache/prefetch.h"

#define BLK 4096u
#define KEYS 64
#define HANG_GUARD 60

struct call {
    int tag;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct cache *cache;
    struct prefetch *pf;
    bool gated;                     /* fills wait for open */
    bool open;
    unsigned entered;               /* fills inside the gate */
    uint64_t order[KEYS * 4];       /* keys in the order their fills began */
    unsigned n_order;
    pthread_t filler[KEYS];         /* the thread of each key's last fill */
    atomic_uint fills[KEYS];        /* fills that ran (a call given) */
    atomic_uint refused;            /* fills without a call (dropped) */
    atomic_uint in_fill[KEYS];      /* fills of a key running now */
    atomic_uint overlap;            /* two fills of one key at once */
    atomic_uint drops_seen[3];      /* run callbacks told to drop, by tag */
    uint64_t nested_key;            /* a fill of key 0 first gets this one */
    bool nested;
    /* pthread_cond_wait and pthread_join, counted on flagged threads */
    unsigned waits, joins;
} F = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static _Thread_local bool watched;  /* this thread's waits and joins count */

int __real_pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu);
int __wrap_pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu);
int __real_pthread_join(pthread_t th, void **ret);
int __wrap_pthread_join(pthread_t th, void **ret);

static void note(unsigned *counter)
{
    pthread_mutex_lock(&F.mu);
    ++*counter;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
}

int __wrap_pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    if (watched && cv != &F.cv)
        note(&F.waits);
    return __real_pthread_cond_wait(cv, mu);
}

int __wrap_pthread_join(pthread_t th, void **ret)
{
    if (watched)
        note(&F.joins);
    return __real_pthread_join(th, ret);
}

/* Waits (F.mu held) until *counter reaches n; fails after HANG_GUARD s. */
static void wait_for(const unsigned *counter, unsigned n, const char *what)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HANG_GUARD;
    while (*counter < n) {
        if (pthread_cond_timedwait(&F.cv, &F.mu, &until) == ETIMEDOUT) {
            pthread_mutex_unlock(&F.mu);
            fail_msg("waited %d s for %u %s, saw %u", HANG_GUARD, n, what, *counter);
        }
    }
}

static void wait_count(const unsigned *counter, unsigned n, const char *what)
{
    pthread_mutex_lock(&F.mu);
    wait_for(counter, n, what);
    pthread_mutex_unlock(&F.mu);
}

static void open_gate(void)
{
    pthread_mutex_lock(&F.mu);
    F.open = true;
    pthread_cond_broadcast(&F.cv);
    pthread_mutex_unlock(&F.mu);
}

/* The cache's fill: block b of a = 0 gets the bytes b, b, b, ... */
static int fill(void *ctx, void *call, uint64_t a, uint64_t b, void *dst, size_t len)
{
    (void)ctx;
    (void)a;
    if (!call) {
        atomic_fetch_add(&F.refused, 1);
        return ECANCELED;
    }
    if (atomic_fetch_add(&F.in_fill[b], 1) != 0)
        atomic_fetch_add(&F.overlap, 1);
    pthread_mutex_lock(&F.mu);
    if (F.n_order < sizeof F.order / sizeof F.order[0])
        F.order[F.n_order++] = b;
    F.filler[b] = pthread_self();
    if (F.gated) {
        F.entered++;
        pthread_cond_broadcast(&F.cv);
        while (!F.open)
            pthread_cond_wait(&F.cv, &F.mu);
    }
    bool nested = F.nested && b == 0;
    uint64_t nk = F.nested_key;
    pthread_mutex_unlock(&F.mu);
    if (nested) {
        /* a fill that needs another block, as an f32 fill of a remote
         * model needs the remote blocks: taken back if queued */
        prefetch_steal(F.pf, 0, nk);
        int err = 0;
        struct call c = { 0 };
        struct cache_block *blk = cache_get(F.cache, 0, nk, BLK, &c, &err);
        assert_non_null(blk);
        cache_put(F.cache, blk, 0);
    }
    memset(dst, (int)b, len);
    atomic_fetch_add(&F.fills[b], 1);
    atomic_fetch_sub(&F.in_fill[b], 1);
    return 0;
}

static void run(void *ctx, struct cache_block *blk, void *arg, bool drop)
{
    (void)ctx;
    struct call *c = arg;
    if (drop)
        atomic_fetch_add(&F.drops_seen[c ? c->tag : 0], 1);
    cache_fill_claimed(F.cache, blk, drop ? NULL : c);
}

static struct call X = { 1 }, Y = { 2 };

static void setup_engine_in(unsigned limit, unsigned threads, unsigned cache_blocks)
{
    pthread_mutex_lock(&F.mu);
    F.gated = F.open = false;
    F.entered = F.n_order = F.waits = F.joins = 0;
    F.nested = false;
    pthread_mutex_unlock(&F.mu);
    for (unsigned i = 0; i < KEYS; i++) {
        atomic_store(&F.fills[i], 0);
        atomic_store(&F.in_fill[i], 0);
    }
    atomic_store(&F.refused, 0);
    atomic_store(&F.overlap, 0);
    for (unsigned i = 0; i < 3; i++)
        atomic_store(&F.drops_seen[i], 0);
    F.cache = cache_new(BLK, (uint64_t)cache_blocks * (BLK + 4096), fill, NULL);
    assert_non_null(F.cache);
    F.pf = prefetch_new(F.cache, limit, run, NULL);
    assert_non_null(F.pf);
    if (threads)
        assert_int_equal(prefetch_start(F.pf, threads), threads);
}

static void setup_engine(unsigned limit, unsigned threads)
{
    setup_engine_in(limit, threads, 2 * KEYS);
}

static void teardown_engine(void)
{
    prefetch_free(F.pf);
    cache_free(F.cache);
    F.pf = NULL;
    F.cache = NULL;
    assert_int_equal(atomic_load(&F.overlap), 0);
}

static enum prefetch_added add(uint64_t k, struct call *c, bool front)
{
    return prefetch_add(F.pf, 0, k, BLK, c, front);
}

/* Gets block k, checks its bytes and how many fills of it ran in all
 * (a get waits for a fill in progress: counted when it returns). */
static void get_check(uint64_t k, unsigned want_fills)
{
    int err = 0;
    struct call c = { 0 };
    struct cache_block *blk = cache_get(F.cache, 0, k, BLK, &c, &err);
    assert_non_null(blk);
    const unsigned char *d = cache_data(blk);
    assert_int_equal(d[0], (unsigned char)k);
    assert_int_equal(d[BLK - 1], (unsigned char)k);
    cache_put(F.cache, blk, 0);
    assert_int_equal(atomic_load(&F.fills[k]), want_fills);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_no_threads_refuses(void **state)
{
    (void)state;
    setup_engine(4, 0);
    assert_int_equal(add(1, &X, false), PREFETCH_FULL);
    assert_false(prefetch_steal(F.pf, 0, 1));
    get_check(1, 1);
    teardown_engine();
    /* limit 0: no thread starts, nothing queues */
    setup_engine(0, 0);
    assert_int_equal(prefetch_start(F.pf, 4), 0);
    assert_int_equal(add(2, &X, false), PREFETCH_FULL);
    teardown_engine();
}

static void test_bound(void **state)
{
    (void)state;
    setup_engine(4, 1);
    F.gated = true;
    assert_int_equal(add(0, &X, false), PREFETCH_QUEUED);
    wait_count(&F.entered, 1, "fills in the gate");        /* the thread runs 0 */
    for (uint64_t k = 1; k < 4; k++)
        assert_int_equal(add(k, &X, false), PREFETCH_QUEUED);
    assert_int_equal(add(4, &X, false), PREFETCH_FULL);      /* the limit */
    assert_int_equal(add(5, &X, true), PREFETCH_FULL);
    struct prefetch_stats ps;
    prefetch_get_stats(F.pf, &ps);
    assert_int_equal(ps.inflight, 4);
    assert_int_equal(ps.inflight_max, 4);
    assert_int_equal(ps.queued, 4);
    assert_int_equal(ps.threads, 1);
    open_gate();
    /* each block the engine filled is cached: a get fills nothing */
    for (uint64_t k = 0; k < 4; k++)
        get_check(k, 1);
    /* a block cached already is present, not queued again */
    assert_int_equal(add(0, &X, false), PREFETCH_PRESENT);
    prefetch_stop(F.pf);
    prefetch_get_stats(F.pf, &ps);
    assert_int_equal(ps.inflight, 0);
    assert_int_equal(ps.ran + ps.stolen, 4);
    assert_int_equal(ps.dropped, 0);
    assert_int_equal(ps.threads, 0);
    teardown_engine();
}

static void test_order(void **state)
{
    (void)state;
    setup_engine(8, 1);
    F.gated = true;
    assert_int_equal(add(10, &X, false), PREFETCH_QUEUED);
    wait_count(&F.entered, 1, "fills in the gate");
    assert_int_equal(add(11, &X, false), PREFETCH_QUEUED);
    assert_int_equal(add(12, &X, false), PREFETCH_QUEUED);
    assert_int_equal(add(13, &X, true), PREFETCH_QUEUED);
    assert_int_equal(add(14, &X, true), PREFETCH_QUEUED);
    open_gate();
    for (uint64_t k = 10; k <= 14; k++)
        get_check(k, 1);
    prefetch_stop(F.pf);
    static const uint64_t want[] = { 10, 14, 13, 11, 12 };
    assert_int_equal(F.n_order, 5);
    for (unsigned i = 0; i < 5; i++)
        assert_int_equal(F.order[i], want[i]);
    teardown_engine();
}

static void test_steal(void **state)
{
    (void)state;
    setup_engine(8, 1);
    F.gated = true;
    assert_int_equal(add(20, &X, false), PREFETCH_QUEUED);
    wait_count(&F.entered, 1, "fills in the gate");
    assert_int_equal(add(21, &X, false), PREFETCH_QUEUED);
    pthread_mutex_lock(&F.mu);
    F.gated = false;
    pthread_mutex_unlock(&F.mu);
    /* the reader takes 21 back and fills it itself, while 20 still runs */
    assert_true(prefetch_steal(F.pf, 0, 21));
    assert_true(pthread_equal(F.filler[21], pthread_self()));
    assert_false(prefetch_steal(F.pf, 0, 21));      /* run already */
    assert_false(prefetch_steal(F.pf, 0, 20));      /* running: not taken */
    get_check(21, 1);
    open_gate();
    get_check(20, 1);                            /* waited for, not refilled */
    prefetch_stop(F.pf);
    struct prefetch_stats ps;
    prefetch_get_stats(F.pf, &ps);
    assert_int_equal(ps.stolen, 1);
    assert_int_equal(ps.ran, 1);
    teardown_engine();
}

static void test_nested_no_deadlock(void **state)
{
    (void)state;
    setup_engine(8, 1);
    F.gated = true;
    F.nested = true;
    F.nested_key = 31;
    /* the only thread runs 0, whose fill needs 31, queued behind it */
    assert_int_equal(add(0, &X, false), PREFETCH_QUEUED);
    wait_count(&F.entered, 1, "fills in the gate");
    assert_int_equal(add(31, &X, false), PREFETCH_QUEUED);
    open_gate();
    get_check(0, 1);
    get_check(31, 1);
    assert_true(pthread_equal(F.filler[31], F.filler[0]));  /* taken back */
    prefetch_stop(F.pf);
    teardown_engine();
}

static void *dropper(void *arg)
{
    watched = true;
    prefetch_drop(F.pf, arg);
    return NULL;
}

static void test_drop_arg(void **state)
{
    (void)state;
    setup_engine(8, 1);
    F.gated = true;
    assert_int_equal(add(40, &X, false), PREFETCH_QUEUED);     /* runs */
    wait_count(&F.entered, 1, "fills in the gate");
    assert_int_equal(add(41, &X, false), PREFETCH_QUEUED);
    assert_int_equal(add(42, &Y, false), PREFETCH_QUEUED);
    assert_int_equal(add(43, &X, true), PREFETCH_QUEUED);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, dropper, &X), 0);
    /* the dropper drops 41 and 43, then waits for 40, which runs */
    wait_count(&F.waits, 1, "waits of the dropper");
    assert_int_equal(atomic_load(&F.drops_seen[1]), 2);
    assert_int_equal(atomic_load(&F.fills[40]), 0);
    open_gate();
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(atomic_load(&F.fills[40]), 1);    /* done before drop returned */
    assert_int_equal(atomic_load(&F.refused), 2);
    /* dropped blocks are not cached: a get fills them */
    get_check(41, 1);
    get_check(43, 1);
    get_check(42, 1);                               /* Y's: run by the thread */
    assert_int_equal(atomic_load(&F.drops_seen[2]), 0);
    prefetch_stop(F.pf);
    struct prefetch_stats ps;
    prefetch_get_stats(F.pf, &ps);
    assert_int_equal(ps.dropped, 2);
    assert_int_equal(ps.queued, ps.ran + ps.stolen + ps.dropped);
    teardown_engine();
}

static void *stopper(void *arg)
{
    (void)arg;
    watched = true;
    prefetch_stop(F.pf);
    return NULL;
}

static void test_stop_drops(void **state)
{
    (void)state;
    setup_engine(8, 1);
    F.gated = true;
    assert_int_equal(add(50, &X, false), PREFETCH_QUEUED);
    wait_count(&F.entered, 1, "fills in the gate");
    assert_int_equal(add(51, &X, false), PREFETCH_QUEUED);
    assert_int_equal(add(52, &Y, true), PREFETCH_QUEUED);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, stopper, NULL), 0);
    /* the stopper has told the thread to stop and joins it */
    wait_count(&F.joins, 1, "joins of the stopper");
    assert_int_equal(add(53, &X, false), PREFETCH_FULL);
    open_gate();
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(atomic_load(&F.fills[50]), 1);
    assert_int_equal(atomic_load(&F.drops_seen[1]) + atomic_load(&F.drops_seen[2]), 2);
    assert_int_equal(add(54, &X, false), PREFETCH_FULL);
    get_check(51, 1);
    get_check(52, 1);
    struct prefetch_stats ps;
    prefetch_get_stats(F.pf, &ps);
    assert_int_equal(ps.inflight, 0);
    assert_int_equal(ps.threads, 0);
    /* started again, it works again */
    assert_int_equal(prefetch_start(F.pf, 2), 2);
    assert_int_equal(prefetch_start(F.pf, 2), 0);          /* running already */
    assert_int_equal(add(55, &X, false), PREFETCH_QUEUED);
    prefetch_stop(F.pf);
    get_check(55, 1);
    teardown_engine();
}

/* Many readers at once: adds at both ends, takebacks, gets, drops of
 * their own arg; each job runs once, no block is filled twice at once. */
#define STRESS_THREADS 4
#define STRESS_OPS 3000

static void *stress_main(void *arg)
{
    struct call *me = arg;
    uint64_t x = 88172645463325252ull ^ (uint64_t)me->tag;
    for (int i = 0; i < STRESS_OPS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t k = x % KEYS;
        switch ((x >> 8) % 8) {
        case 0: case 1: case 2:
            prefetch_add(F.pf, 0, k, BLK, me, (x >> 16) & 1);
            break;
        case 3: case 4: {
            prefetch_steal(F.pf, 0, k);
            int err = 0;
            struct cache_block *blk = cache_get(F.cache, 0, k, BLK, me, &err);
            if (blk) {
                const unsigned char *d = cache_data(blk);
                if (d[0] != (unsigned char)k || d[BLK - 1] != (unsigned char)k)
                    atomic_fetch_add(&F.overlap, 1);
                cache_put(F.cache, blk, BLK);
            }
            break;
        }
        case 5:
            if ((x >> 20) % 16 == 0)
                prefetch_drop(F.pf, me);
            break;
        default: {
            struct prefetch_stats ps;
            prefetch_get_stats(F.pf, &ps);
            if (ps.inflight > ps.limit)
                atomic_fetch_add(&F.overlap, 1);
            break;
        }
        }
    }
    return NULL;
}

static void test_stress(void **state)
{
    (void)state;
    setup_engine_in(16, 4, 24);     /* a small cache: blocks come and go */
    static struct call calls[STRESS_THREADS];
    pthread_t th[STRESS_THREADS];
    for (int i = 0; i < STRESS_THREADS; i++) {
        calls[i].tag = 0;           /* drops_seen[0] counts them */
        assert_int_equal(pthread_create(&th[i], NULL, stress_main, &calls[i]), 0);
    }
    for (int i = 0; i < STRESS_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    prefetch_stop(F.pf);
    struct prefetch_stats ps;
    prefetch_get_stats(F.pf, &ps);
    assert_int_equal(ps.inflight, 0);
    assert_true(ps.inflight_max <= 16);
    assert_true(ps.queued > 0);
    assert_int_equal(ps.queued, ps.ran + ps.stolen + ps.dropped);
    assert_int_equal(atomic_load(&F.drops_seen[0]), ps.dropped);
    assert_int_equal(atomic_load(&F.refused), ps.dropped);
    teardown_engine();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_threads_refuses),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_steal),
        cmocka_unit_test(test_nested_no_deadlock),
        cmocka_unit_test(test_drop_arg),
        cmocka_unit_test(test_stop_drops),
        cmocka_unit_test(test_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* cache/prefetch.c — the prefetch engine (see prefetch.h).
 *
 * The queued jobs are a ring of at most limit entries (added at the back,
 * or at the front); a job taken off it (by a thread, a stealer or a drop)
 * moves to the running table until its run returns, so that prefetch_drop
 * can wait for the jobs of one arg, and prefetch_stop for the stealers.
 * The limit counts both.  Linear scans: limit is small (a quarter of a
 * cache's blocks at most, in practice tens).
 */
#include "prefetch.h"
#include "cache.h"
#include "thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct job {
    struct cache_block *blk;        /* claimed; NULL: a free running slot */
    void *arg;
    uint64_t a, b;
};

struct prefetch {
    pthread_mutex_t mu;             /* everything below */
    pthread_cond_t work;            /* a job was queued, or stopping */
    pthread_cond_t idle;            /* a job ended */
    struct cache *cache;
    prefetch_run_fn run;
    void *ctx;
    unsigned limit;
    struct job *q;                  /* ring of limit jobs: queued */
    unsigned head;
    atomic_uint len;                /* changed under mu; prefetch_steal looks
                                       without it */
    struct job *running;            /* limit slots: taken off the queue */
    unsigned n_running;
    pthread_t *th;
    unsigned nth;
    bool stopping;
    struct prefetch_stats st;
};

struct prefetch *prefetch_new(struct cache *c, unsigned limit, prefetch_run_fn run, void *ctx)
{
    struct prefetch *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (limit && (!(p->q = calloc(limit, sizeof *p->q)) ||
                  !(p->running = calloc(limit, sizeof *p->running)))) {
        free(p->q);
        free(p);
        return NULL;
    }
    p->cache = c;
    p->run = run;
    p->ctx = ctx;
    p->limit = limit;
    p->st.limit = limit;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    return p;
}

void prefetch_free(struct prefetch *p)
{
    if (!p)
        return;
    prefetch_stop(p);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->idle);
    free(p->q);
    free(p->running);
    free(p);
}

/* Queued job i (0: the front), off the queue; mu held. */
static struct job unqueue_at(struct prefetch *p, unsigned i)
{
    struct job j = p->q[(p->head + i) % p->limit];
    if (i == 0) {
        p->head = (p->head + 1) % p->limit;
    } else {
        for (unsigned k = i; k + 1 < p->len; k++)
            p->q[(p->head + k) % p->limit] = p->q[(p->head + k + 1) % p->limit];
    }
    p->len--;
    return j;
}

/* Moves job j to the running table (a slot is free: the limit counts
 * both); its slot.  mu held. */
static struct job *start_job(struct prefetch *p, struct job j)
{
    struct job *slot = p->running;
    while (slot->blk)
        slot++;
    *slot = j;
    p->n_running++;
    return slot;
}

/* Runs a job taken off the queue, mu not held; then frees its slot. */
static void run_job(struct prefetch *p, struct job *slot, bool drop)
{
    p->run(p->ctx, slot->blk, slot->arg, drop);
    pthread_mutex_lock(&p->mu);
    slot->blk = NULL;
    slot->arg = NULL;
    p->n_running--;
    p->st.inflight--;
    pthread_cond_broadcast(&p->idle);
    pthread_mutex_unlock(&p->mu);
}

static void *thread_main(void *arg)
{
    struct prefetch *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stopping && p->len == 0)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->stopping)
            break;
        struct job *slot = start_job(p, unqueue_at(p, 0));
        p->st.ran++;
        pthread_mutex_unlock(&p->mu);
        run_job(p, slot, false);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

unsigned prefetch_start(struct prefetch *p, unsigned threads)
{
    if (threads > PREFETCH_MAX_THREADS)
        threads = PREFETCH_MAX_THREADS;
    pthread_mutex_lock(&p->mu);
    if (p->nth || !p->limit || !threads) {
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    p->th = calloc(threads, sizeof *p->th);
    unsigned n = 0;
    p->stopping = false;
    while (p->th && n < threads && cache_thread_start(&p->th[n], thread_main, p) == 0)
        n++;
    p->nth = n;
    p->st.threads = n;
    if (!n) {
        free(p->th);
        p->th = NULL;
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Drops the queued jobs of arg (every one with all), one at a time, each
 * run with mu dropped. */
static void drop_queued(struct prefetch *p, const void *arg, bool all)
{
    pthread_mutex_lock(&p->mu);
    for (unsigned i = 0; i < p->len;) {
        if (!all && p->q[(p->head + i) % p->limit].arg != arg) {
            i++;
            continue;
        }
        struct job *slot = start_job(p, unqueue_at(p, i));
        p->st.dropped++;
        pthread_mutex_unlock(&p->mu);
        run_job(p, slot, true);
        pthread_mutex_lock(&p->mu);
        i = 0;                      /* the queue may have changed meanwhile */
    }
    pthread_mutex_unlock(&p->mu);
}

void prefetch_stop(struct prefetch *p)
{
    pthread_mutex_lock(&p->mu);
    unsigned n = p->nth;
    pthread_t *th = p->th;
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_lock(&p->mu);
    if (p->th == th) {
        p->nth = 0;
        p->st.threads = 0;
        p->th = NULL;
        free(th);
    }
    pthread_mutex_unlock(&p->mu);
    drop_queued(p, NULL, true);
    pthread_mutex_lock(&p->mu);
    while (p->n_running)
        pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

enum prefetch_added prefetch_add(struct prefetch *p, uint64_t a, uint64_t b, size_t len,
                                 void *arg, bool front)
{
    pthread_mutex_lock(&p->mu);
    enum prefetch_added r = PREFETCH_FULL;
    if (p->nth && !p->stopping && p->st.inflight < p->limit) {
        struct cache_block *blk = cache_claim(p->cache, a, b, len);
        r = PREFETCH_PRESENT;
        if (blk) {
            unsigned at;
            if (front) {
                p->head = (p->head + p->limit - 1) % p->limit;
                at = p->head;
            } else {
                at = (p->head + p->len) % p->limit;
            }
            p->q[at] = (struct job){ blk, arg, a, b };
            p->len++;
            p->st.queued++;
            if (++p->st.inflight > p->st.inflight_max)
                p->st.inflight_max = p->st.inflight;
            pthread_cond_signal(&p->work);
            r = PREFETCH_QUEUED;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

bool prefetch_steal(struct prefetch *p, uint64_t a, uint64_t b)
{
    /* Nothing queued (a reader of cached blocks, whose read-ahead queued
     * nothing): no lock.  A job another thread queues meanwhile is one
     * queued after this look, as if the lock had been taken first: the
     * get waits for its fill, as it would have. */
    if (atomic_load(&p->len) == 0)
        return false;
    pthread_mutex_lock(&p->mu);
    struct job *slot = NULL;
    for (unsigned i = 0; i < p->len; i++) {
        const struct job *j = &p->q[(p->head + i) % p->limit];
        if (j->a == a && j->b == b) {
            slot = start_job(p, unqueue_at(p, i));
            p->st.stolen++;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (slot)
        run_job(p, slot, false);
    return slot != NULL;
}

struct cache_block *prefetch_get(struct prefetch *p, struct cache *c, uint64_t a, uint64_t b,
                                 size_t len, void *call, int *err)
{
    if (p)
        prefetch_steal(p, a, b);
    return cache_get(c, a, b, len, call, err);
}

void prefetch_drop(struct prefetch *p, const void *arg)
{
    drop_queued(p, arg, false);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        bool busy = false;
        for (unsigned i = 0; i < p->limit && !busy; i++)
            busy = p->running[i].blk && p->running[i].arg == arg;
        if (!busy)
            break;
        pthread_cond_wait(&p->idle, &p->mu);
    }
    pthread_mutex_unlock(&p->mu);
}

void prefetch_get_stats(struct prefetch *p, struct prefetch_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
}

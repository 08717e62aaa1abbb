/*
 * cache/prefetch.h — the prefetch engine: a few threads that fill blocks of
 * a block cache (cache/cache.h) ahead of the readers who will want them.
 * One engine for both caches that prefetch: the f32 view's chunks
 * (core/f32.c, its dequantization workers) and the remote blocks
 * (cache/blocksrc.c, its fetch threads).  What to prefetch (the readers'
 * streams and windows) is the client's policy; how it is queued, bounded,
 * run, taken back and dropped is here.  No FUSE header: part of the cache
 * library (cache/meson.build), tested by tests/unit/test_prefetch.c.
 *
 * A job is a block of the cache, claimed when it is queued (cache_claim:
 * in the cache as being filled, so a reader that wants it never fills it a
 * second time), and an argument from the client (what the fill needs: the
 * version of the model a chunk is read from, the source a block is of).
 * The client's run callback fills it: cache_fill_claimed(cache, blk, call)
 * with a call built from arg, or, told to drop it, with a call that makes
 * its fill refuse (a failed fill is not cached: cache.h); either way it
 * releases what arg holds.
 *
 * Promises:
 *   - Bounded: at most limit jobs are queued or running at once (each pins
 *     one block of the cache); prefetch_add past that refuses, and the
 *     caller goes on without the hint (a hint is all it is).  A client that
 *     keeps limit within what the cache holds beside what its readers pin
 *     never has a block filled ahead evicted to make room for another block
 *     filled ahead (which would fill the same blocks again and again).
 *   - Nobody waits behind the queue: a reader gets a block with
 *     prefetch_get, which first runs that block's job on the reader's own
 *     thread if no thread has taken it yet (prefetch_steal).  So a reader
 *     waits only for a fill that is running, and jobs may themselves wait for other blocks (an f32 fill
 *     that reads remote blocks, with every thread busy) without a deadlock.
 *   - Each job runs once: on a thread, on a stealer, or dropped (run with
 *     drop true) by prefetch_drop or prefetch_stop.
 *   - Order: a job added at the front runs before every job queued before
 *     it (a read's own other blocks); otherwise first in, first out.
 *   - Threads: prefetch_start starts them (after a fork: threads do not
 *     survive it), each with every signal blocked (thread.h); before it,
 *     after prefetch_stop, and with 0 threads, prefetch_add refuses every
 *     job and readers fill what they need themselves, one after another.
 *
 * Locks: the engine's mu, then the cache's (cache_claim under it); the
 * run callback is called with no lock of the engine held.  A client may
 * hold a lock of its own around prefetch_add (its streams), above these.
 */
#ifndef CACHE_PREFETCH_H
#define CACHE_PREFETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;
struct cache_block;
struct prefetch;

/* Fills claimed block blk for arg (drop false) or makes it fail and
 * releases arg (drop true); always calls cache_fill_claimed on blk once.
 * ctx: the client's (prefetch_new). */
typedef void (*prefetch_run_fn)(void *ctx, struct cache_block *blk, void *arg, bool drop);

/* An engine over cache c, at most limit jobs at once (0: it never queues
 * any); NULL when out of memory. */
struct prefetch *prefetch_new(struct cache *c, unsigned limit, prefetch_run_fn run, void *ctx);
/* Stops it (prefetch_stop) and frees it; NULL is a no-op. */
void prefetch_free(struct prefetch *p);

/* Starts up to threads threads (at most PREFETCH_MAX_THREADS): how many
 * started.  A second start while threads run starts none. */
#define PREFETCH_MAX_THREADS 1024
unsigned prefetch_start(struct prefetch *p, unsigned threads);
/* Stops and joins the threads, then drops every queued job.  A job a
 * stealer runs is waited for. */
void prefetch_stop(struct prefetch *p);

enum prefetch_added {
    PREFETCH_QUEUED,    /* queued: arg now belongs to the job */
    PREFETCH_PRESENT,   /* cached or being filled already (or no memory for
                           a block): nothing to do, arg still the caller's */
    PREFETCH_FULL,      /* the limit is reached, or no thread runs: refused,
                           arg still the caller's */
};
/* Queues block (a, b) of len bytes (its length: cache_get's len), with
 * arg, at the front or the back. */
enum prefetch_added prefetch_add(struct prefetch *p, uint64_t a, uint64_t b, size_t len,
                                 void *arg, bool front);
/* A reader is about to get block (a, b): if it is queued and no thread
 * has taken it, runs its job here (then the get finds it cached).  true
 * if it did. */
bool prefetch_steal(struct prefetch *p, uint64_t a, uint64_t b);
/* A reader's get of block (a, b) of cache c (cache_get: len, call, err
 * as there), the block's job taken back first (prefetch_steal) so the
 * reader never waits behind the queue.  p NULL (no engine): cache_get
 * alone.  Every reader of a cache with an engine gets its blocks this
 * way. */
struct cache_block *prefetch_get(struct prefetch *p, struct cache *c, uint64_t a, uint64_t b,
                                 size_t len, void *call, int *err);
/* Drops every queued job whose arg is arg and waits until none of its
 * jobs is running (a source that closes: none of its blocks filled after
 * this returns).  Jobs of arg added meanwhile are the caller's business. */
void prefetch_drop(struct prefetch *p, const void *arg);

struct prefetch_stats {
    uint64_t queued;        /* jobs ever queued */
    uint64_t ran;           /* run by a thread */
    uint64_t stolen;        /* run by a reader (prefetch_steal) */
    uint64_t dropped;       /* dropped */
    unsigned inflight;      /* queued or running now */
    unsigned inflight_max;  /* the most at once */
    unsigned limit, threads;
};
void prefetch_get_stats(struct prefetch *p, struct prefetch_stats *out);

#endif

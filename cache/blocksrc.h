/*
 * cache/blocksrc.h — a block cache for slow byte sources (remote models).
 *
 * A struct rcache is a bounded in-memory cache of blocks of block_bytes
 * bytes (cache/cache.h) shared by any number of wrapped sources, with a few
 * fetch threads of its own (a prefetch engine: cache/prefetch.h).
 * blocksrc_wrap() makes a gguf_source that has the size, identity and name
 * of the source it wraps (no descriptor: fd -1; below: the wrapped
 * source) and serves its reads from
 * that cache, so that raw reads, f32 fills and model.gguf of a remote
 * mount all go through it unchanged.  No FUSE header: built as a library
 * of its own (cache/meson.build), tested by
 * tests/unit/test_blocksrc.c over a fake source.
 *
 * Promises:
 *   - Bytes: a read returns exactly the bytes the wrapped source returns
 *     at those offsets; reads below direct_below (the remote prefix, held
 *     in memory by the remote source) go straight to the wrapped source.
 *   - Blocks: block k of a source is bytes [k*B, (k+1)*B) (the last one
 *     shorter), fetched by one read of the wrapped source (a ranged
 *     request), keyed (source id, k) in the cache.
 *   - Parallel fills: a read that needs several blocks that are not
 *     cached hands all but the first to the fetch threads and fills the
 *     first itself, so they are fetched at once; never more fills queued
 *     or running on the fetch threads than the in-flight limit (at most
 *     the fetchers' count's worth of requests at once, and at most half
 *     the cache's blocks).
 *   - Readahead: each source follows up to STREAM_SET_MAX readers
 *     (streams, cache/stream.h: a read that starts in the block where a
 *     stream's last read ended, or the next one, continues it; so does a
 *     late read up to the stream's window behind that).  A read that continues
 *     a stream and moves it forward doubles the stream's window (1, 2, 4,
 *     ... blocks, at most the in-flight limit and a quarter of the cache)
 *     and queues the blocks of the window after the read that are neither
 *     cached nor queued.  A read that continues no stream starts a new one
 *     (replacing the least recently used) and prefetches nothing, so
 *     random reads fetch only what they need.
 *   - Eviction: blocks stay while the cache has room (cache_keep_used: a
 *     block read once may be read again, from another file or after the
 *     kernel dropped its pages); once it is full, a block whose bytes have
 *     all been read (cache_put's used) is the first to be reused
 *     (cache/cache.h), so blocks fetched ahead and not read yet stay while a
 *     stream consumes the blocks before them.  A long stream (one that has
 *     read more than its full window of blocks since it started) does not
 *     keep what it reads past that: those blocks are reused as soon as
 *     they are used up (cache_once), so streaming a file much larger than
 *     the cache keeps what other reads cached, and touches no more memory
 *     than the window and the start of the stream (new memory is not
 *     free: a page fault per page, on some machines a trip to the host).
 *     A short read (a tensor up to the window's size) stays cached whole.
 *   - Memory: the cache's capacity bounds the blocks held (plus the ones
 *     pinned at a time: one per reading thread, and the in-flight fills).
 *   - Errors: a failed fill is not cached; the reads that needed the block
 *     fail with that error (EIO), and the next read of it tries again —
 *     but for a slow failure: a fill that failed after fail_slow_ms or
 *     more (a stalled server, retries that used up its timeout) is held
 *     for fail_hold_ms, during which a read of that block fails at once
 *     with EIO, without asking the source (the kernel asks again at once
 *     for the pages of a readahead that failed, in a request of its own:
 *     without the hold, one read() of a stalled server would wait for it
 *     twice, or more), unless a fill of the source succeeded since (it
 *     answers again).  A failed prefetch costs nothing but the request
 *     (and holds the block's failure the same way).  Cached blocks stay
 *     valid whatever happens to the wrapped source later (they are bytes of
 *     its identity).
 *   - Spans (the wrapper's spans op, gguf/source.h): a reply is written
 *     without a copy of ours.  The prefix is lent by the wrapped source
 *     (its memory); past it, when the disk cache holds every block of the
 *     bytes (its hold hook), they are spans of the disk cache's file
 *     (spliced by the kernel, never passing through our memory), each
 *     block held until its span is released; else the blocks are pinned
 *     (filled if missing) and lent as memory, released with the bytes
 *     served counted as read (as after a read).  Either way the reader's
 *     stream is followed as by a read (with the disk cache, the blocks its
 *     readahead asks for that the disk does not have are fetched ahead,
 *     those it has handed to check_ahead).  ENOSPC (the caller copies)
 *     when more blocks than the spans offered would be needed.
 *   - Threads: rcache_start starts the fetch threads (call it after a
 *     fork: threads do not survive it); before, reads fill every block on
 *     the caller, one after another, and prefetch nothing.
 *     rcache_stop stops them (queued prefetches are dropped).  Reads may
 *     come from any number of threads at once.
 *
 * Locks: a source's stream lock is taken alone: a read moves its stream
 * and claims the blocks to queue ahead under it, then queues them (the
 * rcache's prefetch engine, cache/prefetch.h, then the cache's,
 * cache/cache.h) and asks the disk hooks has and check_ahead with it
 * released; the rcache's own lock (its references) is taken alone too.
 * The disk hooks are called with no lock of blocksrc held (they must not
 * call back into blocksrc); fills run without any lock.  The stream lock
 * also guards a source's failures held (see "Errors"): fills and reads
 * take it alone for them, briefly.
 */
#ifndef CACHE_BLOCKSRC_H
#define CACHE_BLOCKSRC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/source.h"

#define BLOCKSRC_MAX_FETCHERS 64
/* Failed blocks remembered per source for fail_hold_ms (the latest ones). */
#define BLOCKSRC_FAILED 16
/* What a mount holds a slow failure for: long enough for the kernel's
 * second request of the same pages, short beside any timeout; and what
 * it takes as slow: a second, far more than a request that fails at once
 * (a 404, a refused connection) and less than any timeout. */
#define BLOCKSRC_FAIL_HOLD_MS 1000
#define BLOCKSRC_FAIL_SLOW_MS 1000

struct rcache;

struct rcache_opts {
    size_t block_bytes;      /* B (at least 4096) */
    uint64_t capacity;       /* bytes of blocks held (cache/cache.h) */
    unsigned fetchers;       /* fetch threads: the connections (1 to 64) */
    unsigned fail_hold_ms;   /* a slow failure is held this long (see
                                "Errors"); 0: every read tries again */
    unsigned fail_slow_ms;   /* a failure is slow after this long (0: all) */
};

/* NULL when out of memory or for options out of range. */
struct rcache *rcache_new(const struct rcache_opts *o);
/* Starts the fetch threads; false if none could be started (reads then
 * work as before rcache_start). */
bool rcache_start(struct rcache *rc);
/* Stops and joins them; queued prefetches are dropped.  No read may be in
 * progress. */
void rcache_stop(struct rcache *rc);
/* Drops the creator's reference: the rcache is freed (threads stopped)
 * when its wrapped sources are closed too. */
void rcache_put(struct rcache *rc);

struct rcache_stats {
    uint64_t hits;           /* blocks a read found cached or being fetched */
    uint64_t misses;         /* blocks a read had to fetch itself */
    uint64_t prefetched;     /* blocks handed to the fetch threads (readahead
                                and the other blocks of a multi-block read) */
    uint64_t fill_errors;    /* fetches that failed */
    uint64_t failed_held;    /* reads of a block failed at once: its fetch
                                failed slowly less than fail_hold_ms before */
    uint64_t disk_hits;      /* fills served by a disk cache (blocksrc_disk) */
    uint64_t disk_spans;     /* blocks of replies spliced from it
                                (its spans: see "Spans") */
    uint64_t bytes_held, blocks_held, capacity, block_bytes;
    uint64_t prefetch_wasted;/* blocks fetched ahead and evicted before any
                                read wanted them (cache/cache.h) */
    uint64_t inflight;       /* fills queued or running on the threads now */
    uint64_t inflight_max;   /* the most at once */
};
void rcache_get_stats(struct rcache *rc, struct rcache_stats *out);

/*
 * The hook for a persistent disk cache (cache/diskcache.h, another module):
 * a fill asks read first (true: dst holds the block's len bytes), then the
 * wrapped source, then hands the bytes to write.  Both are called from any
 * thread, without locks held, for blocks of one source (block: the block
 * number of that source).  A NULL read or write is skipped.
 */
struct blocksrc_disk {
    bool (*read)(void *ctx, uint64_t block, void *dst, size_t len);
    void (*write)(void *ctx, uint64_t block, const void *src, size_t len);
    /* Optional, for spans of its file (see "Spans"; all three or none):
     * has is a cheap "stored" (no check); hold is true with the block's
     * len bytes at *pos of *fd, checked, kept there until release. */
    bool (*has)(void *ctx, uint64_t block);
    bool (*hold)(void *ctx, uint64_t block, size_t len, int *fd, uint64_t *pos);
    void (*release)(void *ctx, uint64_t block);
    /* optional: block will be held soon (a reader's readahead reached it):
     * make its check then cheap */
    void (*check_ahead)(void *ctx, uint64_t block);
    void *ctx;
};

/* Wraps inner (taken: closing the wrapper closes it) as a source read
 * through rc (see above).  disk may be NULL.  GGUF_E_NOMEM (inner is then
 * closed).  Close the wrapper (gguf_source_close) when no read of it is in
 * progress; its prefetches still queued are dropped and those running
 * waited for. */
enum gguf_err blocksrc_wrap(struct rcache *rc, struct gguf_source *inner, uint64_t direct_below,
                            const struct blocksrc_disk *disk, struct gguf_source **out);

/* Gives wrapper s (a source blocksrc_wrap made: the caller knows it, as
 * it made it) a disk cache after it was made (the mount opens the disk
 * cache once the model, and so each shard's identity, is known).  Only
 * while no read of s is in progress and no fetch thread runs (before
 * rcache_start). */
void blocksrc_set_disk(struct gguf_source *s, const struct blocksrc_disk *disk);

#endif

/*
 * cache/cache.h — a bounded cache of fixed-size blocks of bytes.  No FUSE
 * inside: built as a library of its own (cache/meson.build), tested by
 * tests/unit/test_cache.c.
 *
 * A block is identified by two numbers (a, b) chosen by the user (the f32
 * view: tensor index and chunk index; a remote source: file and block
 * number).  Every block of one cache has room for the same number of bytes,
 * fixed when the cache is made; a block may hold fewer (a tensor's last
 * chunk).  Its bytes are produced by a fill callback on a miss.
 *
 * Contract:
 *   - cache_get() returns a pinned block: its bytes stay valid and unchanged
 *     until cache_put() releases it, whatever other threads do.
 *   - Memory: the cache holds at most capacity bytes of blocks (each counts
 *     its room, block_bytes in whole pages, and its bookkeeping) when none
 *     is pinned.  Rooms are made of transparent huge pages where the kernel
 *     gives them (a first touch of a plain page is expensive on some
 *     virtual machines): blocks of at most half a huge page share one, and
 *     then count their share of it; the last huge page made may hold a
 *     room not yet in use.
 *     Pinned blocks may exceed it by at most the number of pins held at
 *     once; the excess is freed as the pins are released.  Below one block
 *     of capacity, a block lives only while it is pinned.
 *   - Buffers are reused: a block that leaves the cache gives its memory to
 *     the next block filled, so a cache that has reached its size (or a
 *     reader that keeps reusing what it has used) touches no new memory.
 *   - Which block leaves: first a block whose bytes have all been used
 *     (cache_put's used adds up to its length: served to the kernel, which
 *     keeps them in its page cache), oldest first; such a block is reused
 *     even before the cache is full, so a stream of reads holds a few blocks,
 *     not the capacity (unless cache_keep_used: then only once the cache is
 *     full; used-up blocks marked cache_once go first even then).
 *     Otherwise CLOCK (second chance) over the rest.
 *   - A block is filled once: a thread that asks for a block another thread
 *     is filling waits for that fill.
 *   - A failed fill is not cached: the error goes to the threads waiting
 *     for it, and the next get tries again.
 *   - Thread-safe: every function but cache_new/cache_free may be called
 *     from any number of threads at once.  One lock guards the table; it is
 *     held for lookups and bookkeeping only, never while a block is filled
 *     or its bytes are read.
 */
#ifndef CACHE_CACHE_H
#define CACHE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cache;
struct cache_block;

/* Fills dst with the len bytes of block (a, b); returns 0 or an errno.
 * dst has room for the cache's block_bytes: the fill may use the bytes past
 * len as scratch.  Runs without the cache's lock, on the thread that missed
 * the block (or that prefetches it).  ctx is the cache's (cache_new); call
 * is the context of the call that fills (cache_get, cache_prefetch,
 * cache_fill_claimed: what that caller passed, may be NULL), so that a
 * fill knows who asked without a lock or a thread-local: the state a
 * reader holds, the source a fetch is for. */
typedef int (*cache_fill_fn)(void *ctx, void *call, uint64_t a, uint64_t b, void *dst,
                             size_t len);

struct cache_stats {
    uint64_t hits, misses, evictions, fill_errors;
    uint64_t waits;          /* gets that waited for another thread's fill */
    uint64_t prefetched;     /* fills made by cache_prefetch */
    uint64_t prefetch_wasted;/* of those, blocks evicted before any get */
    uint64_t bytes_held;     /* every buffer the cache holds */
    uint64_t blocks_held;    /* blocks with bytes (or being filled) */
    uint64_t capacity, block_bytes;
};

/* A cache of blocks of up to block_bytes bytes (at least 1), holding at
 * most capacity bytes; NULL when out of memory or block_bytes is 0. */
struct cache *cache_new(size_t block_bytes, uint64_t capacity, cache_fill_fn fill, void *ctx);
void cache_free(struct cache *c);

/* Returns block (a, b) pinned, filling it on a miss with len bytes (its
 * length: at most block_bytes), the fill given call.  NULL with *err set:
 * the fill's error, ENOMEM, or EINVAL for len above block_bytes. */
struct cache_block *cache_get(struct cache *c, uint64_t a, uint64_t b, size_t len, void *call,
                              int *err);
const void *cache_data(const struct cache_block *blk);
size_t cache_len(const struct cache_block *blk);

/* Used-up blocks stay until the cache is full (then they are still the
 * first to go): for blocks that are expensive to fetch again (remote
 * bytes), which other files or readers may want after the kernel's page
 * cache dropped them.  Call before the first get. */
void cache_keep_used(struct cache *c, bool keep);

/* Marks pinned block blk as needed once (a long sequential read passing
 * through): once its uses add up to its length it is reused right after
 * the spare buffers, before other used-up blocks and, under
 * cache_keep_used, before the cache grows.  So a stream much longer than
 * the cache neither flushes what other reads keep nor touches more new
 * memory than it holds at once.  A get of it after it was used up (a
 * second reader) makes it an ordinary block again. */
void cache_once(struct cache *c, struct cache_block *blk);

/* Releases a pin.  used: how many of the block's bytes this caller used
 * for good (0 if unsure); once the uses of a block add up to its length,
 * it is the first to be reused (see above). */
void cache_put(struct cache *c, struct cache_block *blk, size_t used);

/* Fills block (a, b) if it is neither cached nor being filled (for
 * prefetch workers); does not pin it.  true if this call filled it. */
bool cache_prefetch(struct cache *c, uint64_t a, uint64_t b, size_t len, void *call);
/* cache_prefetch in two steps, for a caller that must decide under a lock
 * of its own that it fills a block, and fill it after releasing that lock:
 * cache_claim inserts block (a, b) as being filled (a getter waits for it)
 * and returns it, or NULL if it is cached or being filled already (or len
 * is above block_bytes, or out of memory).  A claimed block must be given
 * to cache_fill_claimed, which fills it and releases it (true if the fill
 * succeeded). */
struct cache_block *cache_claim(struct cache *c, uint64_t a, uint64_t b, size_t len);
bool cache_fill_claimed(struct cache *c, struct cache_block *blk, void *call);
/* true if block (a, b) is cached or being filled. */
bool cache_contains(struct cache *c, uint64_t a, uint64_t b);
/* Blocks that fit in the capacity. */
uint64_t cache_capacity_blocks(const struct cache *c);
/* Makes buffers (spare: no bytes yet) until the cache holds n, or its
 * capacity, so that the first fills take them rather than new memory
 * (new memory costs a page fault per page, or a page-table update, which
 * some machines make expensive).  Does the work without the lock: for a
 * thread of its own at startup. */
void cache_reserve(struct cache *c, uint64_t n);

/* Drops every unpinned block and frees its memory.  A block being filled
 * is pinned by its filler: it stays, so a caller that clears to invalidate
 * data must keep fills out meanwhile. */
void cache_clear(struct cache *c);

void cache_get_stats(struct cache *c, struct cache_stats *out);

#endif

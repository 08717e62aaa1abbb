/*
 * fs/cache.h — a bounded cache of dequantized chunks.  No FUSE inside: built
 * as a library of its own (fs/meson.build), tested by tests/unit/test_cache.c.
 *
 * The f32 view of a tensor is cut into chunks of CACHE_CHUNK_ELEMS floats
 * (a whole number of quantization blocks for every type, since every block
 * size divides it).  A chunk is identified by (tensor index, chunk index);
 * its floats are produced by a fill callback on a miss.
 *
 * Contract:
 *   - cache_get() returns a pinned chunk: its floats stay valid and
 *     unchanged until cache_put() releases it, whatever other threads do.
 *   - The bytes held by unpinned chunks never exceed the capacity; pinned
 *     chunks may exceed it by at most (threads × chunks pinned per read).
 *     A shard that went over (everything in it was pinned) shrinks back
 *     when a pin is released (cache_put, the end of a prefetch).  Bytes
 *     count each chunk's floats and its bookkeeping.
 *   - Eviction is CLOCK (second chance) per shard; lookups lock one shard
 *     only, so readers of different chunks rarely contend.
 *   - A chunk is filled once: a thread that misses a chunk another thread
 *     is filling waits for that fill.
 *   - A failed fill is not cached: the error goes to the threads waiting
 *     for it, and the next get tries again.
 *   - Thread-safe: every function but cache_new/cache_free may be called
 *     from any number of threads at once.
 */
#ifndef FS_CACHE_H
#define FS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CACHE_CHUNK_ELEMS 65536u            /* 256 KiB of float32 */
#define CACHE_CHUNK_BYTES (CACHE_CHUNK_ELEMS * 4u)

struct cache;
struct cache_chunk;

/* Fills dst with n floats of chunk (tensor, chunk); returns 0 or an errno. */
typedef int (*cache_fill_fn)(void *ctx, uint64_t tensor, uint64_t chunk,
                             float *dst, size_t n);

struct cache_stats {
    uint64_t hits, misses, evictions, fill_errors;
    uint64_t bytes_held, capacity;
    uint64_t chunks_held;
};

/* capacity in bytes.  A chunk in use is always allowed, even above it: a
 * capacity below one chunk caches nothing between a put and the next get. */
struct cache *cache_new(uint64_t capacity, cache_fill_fn fill, void *ctx);
void cache_free(struct cache *c);

/* Returns the pinned chunk, filling it on a miss (n floats: the chunk's
 * length, at most CACHE_CHUNK_ELEMS, shorter for a tensor's last chunk).
 * NULL with *err set: the fill's error, ENOMEM, or EINVAL for n above
 * CACHE_CHUNK_ELEMS. */
struct cache_chunk *cache_get(struct cache *c, uint64_t tensor, uint64_t chunk,
                              size_t n, int *err);
const float *cache_data(const struct cache_chunk *ch);

/* Fills the chunk if it is neither cached nor being filled (for prefetch
 * workers); does not pin it. */
void cache_prefetch(struct cache *c, uint64_t tensor, uint64_t chunk, size_t n);
bool cache_contains(struct cache *c, uint64_t tensor, uint64_t chunk);
uint64_t cache_capacity_chunks(const struct cache *c);
void cache_put(struct cache *c, struct cache_chunk *ch);

/* Drops every unpinned chunk (after an edit changes tensor data layout).
 * A chunk being filled is pinned by its filler: it stays, so a caller that
 * clears to invalidate data must keep fills out meanwhile. */
void cache_clear(struct cache *c);

void cache_get_stats(struct cache *c, struct cache_stats *out);

#endif

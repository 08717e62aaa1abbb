/*
 * core/f32.h — the f32 view (f32.c): dequantizing a chunk of a tensor into
 * the block cache (cache/cache.h), the workers that fill the chunks ahead
 * of sequential readers, and each open f32 file's reading pattern.
 *
 * The f32 view of a tensor is cut into chunks of fs->chunk_bytes / 4
 * floats, each a block of fs->cache keyed (tensor, chunk).  Promises: a
 * chunk's floats are those of the caller's version (tensor data is the
 * same in every version), filled once however many readers want it at
 * once (one fills, the others wait: cache.c), a failed fill not cached.
 * Prefetching is only a hint: a reader never waits for the queue (it
 * takes its chunk off it and fills it itself), the queue is bounded, and
 * what all sequential readers queue ahead is bounded by what the cache
 * can hold beside what they read now; a random reader prefetches nothing
 * but the chunks its own read needs.
 *
 * Locks: core_chunk_get and the fill run with a reference to the state
 * and no lock of the mount held (a fill may wait on a remote server);
 * the cache takes its own mu for bookkeeping only.  core_prefetch takes
 * workers.mu (the streams' patterns), then the prefetch engine's
 * (cache/prefetch.h) and states_mu (each queued chunk holds a reference to
 * its version); core_chunk_get takes the engine's alone, then the cache's; the workers run
 * fills with none held.  The streams' list is under pend_mu.
 */
#ifndef CORE_F32_H
#define CORE_F32_H

#include "core/mount.h"

#include <sys/uio.h>

struct f32_stream;               /* an open f32 file's reading pattern */

/* A chunk's block has room for its floats (fs->chunk_bytes) and some
 * slack, where a fill starts with the source bytes (f32.c
 * core_fill_chunk): at least the largest block of any type, so every run
 * of the fill has one block; a page, so the block is one page more than
 * its floats. */
#define F32_CHUNK_SLACK 4096u

/* The cache's fill callback (ctx: the struct mount; call: the state the
 * caller of cache_get or cache_fill_claimed holds a reference to —
 * core_chunk_get's, or a worker's): dequantizes chunk of tensor into dst
 * (len bytes: 4 per float), read from that state (tensor data is the same
 * in every version).  EINVAL without a state. */
int core_fill_chunk(void *ctx, void *call, uint64_t tensor, uint64_t chunk, void *dst,
                    size_t len);
/* cache_get of chunk (len bytes) of tensor, filled from st on a miss, off
 * the workers' queue first if no worker has taken it yet (prefetch_get:
 * the reader fills it, or finds it filled): st is a reference the caller
 * holds (not the state lock: a fill may wait on a remote server). */
struct cache_block *core_chunk_get(const struct state *st, uint64_t tensor, uint64_t chunk,
                                   size_t len, int *err);
/* Workers that fill chunks ahead of sequential f32 readers: a prefetch
 * engine of n threads (cache/prefetch.h), started after daemonizing
 * (threads do not survive fork); 0, or an errno when none could start.
 * Stopping drops what is queued. */
int core_workers_start(struct mount *fs, unsigned n);
void core_workers_stop(struct mount *fs);
/* A read of chunks [first, last] of tensor, ending at byte end of its
 * view, through stream s (NULL: none):
 * learns the pattern (a stream that moves to another tensor starts over
 * at its chunk 0: model.safetensors' stream), and queues for the workers the chunks the read needs
 * besides the first (filled in parallel with it) and, on a sequential
 * pattern, those after it.  st: a reference the caller holds. */
void core_prefetch(struct mount *fs, const struct state *st, struct f32_stream *s,
                   uint64_t tensor, uint64_t first, uint64_t last, uint64_t end);
/* The most chunks one pin holds: a read of up to (F32_PIN_MAX - 1) chunks
 * at any offset (the kernel asks at most 1 MiB, the chunks are at least
 * that: read.c cuts a longer request short, as reads may be). */
#define F32_PIN_MAX 4

/* Bytes of a tensor's f32 view pinned in the block cache: chunk i's block
 * b[i], and iov[i] the pinned range's bytes in it, in order; len bytes in
 * all. */
struct f32_pin {
    size_t n;
    size_t len;
    struct cache_block *b[F32_PIN_MAX];
    struct iovec iov[F32_PIN_MAX];
};

/* Pins bytes [off, off + len) of tensor's f32 view (st: a reference the
 * caller holds), cut at the view's end and at what F32_PIN_MAX chunks
 * hold from off (p->len says how much).  What the read teaches stream s
 * (NULL: none) is prefetched (core_prefetch); the chunks are pinned last
 * first, each off the workers' queue first (core_chunk_get): a read that
 * straddles a chunk border (each of f32.npy's does: its floats start after
 * its header) fills its own chunk before it waits for the one the read
 * before it is filling, so two reads in flight fill two chunks at once.
 * 0 with p filled (p->n may be 0 at or past the end), or an errno with
 * nothing pinned.  Release with core_f32_unpin, or hand each p->b[i] over
 * to whoever then calls cache_put on it. */
int core_f32_pin(const struct state *st, struct f32_stream *s, uint64_t tensor,
                 uint64_t off, size_t len, struct f32_pin *p);
/* Releases a pin: served, its bytes went to the kernel (cache_put counts
 * them as used); else nothing of it was used. */
void core_f32_unpin(struct mount *fs, struct f32_pin *p, bool served);
/* Floats in chunk of tensor (shorter for a tensor's last chunk). */
size_t core_chunk_len(const struct state *st, uint64_t tensor, uint64_t chunk);
/* Chunks of tensor's f32 view. */
uint64_t core_chunks(const struct state *st, uint64_t tensor);
/* An open f32 file's stream (listed in fs->streams), or NULL when out of
 * memory; freed by core_stream_free, or at the end by core_streams_free. */
struct f32_stream *core_stream_new(struct mount *fs);
void core_stream_free(struct mount *fs, struct f32_stream *s);
void core_streams_free(struct mount *fs);

#endif

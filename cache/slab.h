/*
 * cache/slab.h — the block cache's buffers, made of transparent huge pages
 * (slab.c).  No FUSE, no knowledge of blocks: a buffer is map_bytes of
 * memory (block_bytes rounded up to whole pages), its pages in place.
 *
 * Why huge pages: buffers live long and are reused (cache.c); what they
 * cost is the first touch of their pages.  Mapped with their pages in
 * place, that is still a fault per page on machines whose hypervisor
 * shadows page tables, and a fresh buffer's first fill ran far slower
 * than later ones; a transparent huge page is one fault per 2 MiB and runs
 * at full speed from the first touch.  So a buffer of whole huge pages
 * (remote blocks of 2, 4, 8 MiB) gets its own, smaller ones (f32 chunks of
 * a little under 1 MiB) share one, per_slab to a slab.  Without huge
 * pages, plain pages (MAP_POPULATE).
 *
 * Thread-safe: get and put take the allocator's own mutex (never held
 * while mapping memory is waited for by anyone else; it takes no other
 * lock), so they may be called with or without the cache's.
 */
#ifndef CACHE_SLAB_H
#define CACHE_SLAB_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SLAB_HUGE_BYTES (2u << 20)      /* a transparent huge page */

struct slab;

struct slab_alloc {
    pthread_mutex_t mu;
    size_t map_bytes;               /* one buffer: whole pages */
    unsigned per_slab;              /* buffers per huge page; below 2: none */
    struct slab *slabs;             /* those with a free slot */
};

/* Buffers of block_bytes (rounded up to whole pages: a->map_bytes). */
void slab_init(struct slab_alloc *a, size_t block_bytes);
/* Every buffer must have been put back. */
void slab_fini(struct slab_alloc *a);
/* A buffer, its pages in place; *slab: the shared huge page it is carved
 * from, or NULL (a mapping of its own), for slab_put.  NULL when out of
 * memory. */
unsigned char *slab_get(struct slab_alloc *a, struct slab **slab);
/* Gives a buffer back: a shared huge page goes with its last buffer; a
 * buffer of one still in use gives its pages back, so that a freed buffer
 * never holds memory. */
void slab_put(struct slab_alloc *a, unsigned char *data, struct slab *slab);
/* What one buffer costs: its room, or its share of a huge page. */
size_t slab_buf_bytes(const struct slab_alloc *a);

#endif

/*
 * cache/slab.c — the block cache's buffers, made of transparent huge pages
 * (see slab.h).
 */
#include "slab.h"

#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_BYTES SLAB_HUGE_BYTES

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* A huge page shared by several buffers. */
struct slab {
    unsigned char *base;            /* HUGE_BYTES, aligned to them */
    uint32_t free_slots;            /* bit i: slot i is not in use */
    struct slab *prev, *next;       /* a->slabs, the slabs with a free slot */
};

/* bytes (a multiple of HUGE_BYTES) mapped aligned to huge pages and asked
 * for them, pages in place; NULL if that fails. */
static unsigned char *map_huge(size_t bytes)
{
    if (bytes == 0 || bytes % HUGE_BYTES)
        return NULL;
    unsigned char *p = mmap(NULL, bytes + HUGE_BYTES, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)p + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1);
    size_t head = (size_t)(a - (uintptr_t)p);
    if (head)
        munmap(p, head);
    if (HUGE_BYTES - head)
        munmap((unsigned char *)a + bytes, HUGE_BYTES - head);
    p = (unsigned char *)a;
    madvise(p, bytes, MADV_HUGEPAGE);
    if (madvise(p, bytes, MADV_POPULATE_WRITE) != 0)
        for (size_t i = 0; i < bytes; i += 4096)
            p[i] = 0;
    return p;
}

static void slab_link(struct slab_alloc *a, struct slab *s)
{
    s->prev = NULL;
    s->next = a->slabs;
    if (a->slabs)
        a->slabs->prev = s;
    a->slabs = s;
}

static void slab_unlink(struct slab_alloc *a, struct slab *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        a->slabs = s->next;
    if (s->next)
        s->next->prev = s->prev;
}

/* A slot of a slab with a free slot, else of a new one; NULL if no huge
 * page could be had. */
static unsigned char *slot_take(struct slab_alloc *a, struct slab **out)
{
    pthread_mutex_lock(&a->mu);
    struct slab *s = a->slabs;
    if (!s) {
        s = calloc(1, sizeof *s);
        if (s && !(s->base = map_huge(HUGE_BYTES))) {
            free(s);
            s = NULL;
        }
        if (!s) {
            pthread_mutex_unlock(&a->mu);
            return NULL;
        }
        s->free_slots = (uint32_t)((1ull << a->per_slab) - 1);
        slab_link(a, s);
    }
    unsigned i = (unsigned)__builtin_ctz(s->free_slots);
    s->free_slots &= ~(1u << i);
    if (!s->free_slots)
        slab_unlink(a, s);
    pthread_mutex_unlock(&a->mu);
    *out = s;
    return s->base + (size_t)i * a->map_bytes;
}

static void slot_give(struct slab_alloc *a, unsigned char *data, struct slab *s)
{
    unsigned i = (unsigned)((size_t)(data - s->base) / a->map_bytes);
    uint32_t all = (uint32_t)((1ull << a->per_slab) - 1);
    pthread_mutex_lock(&a->mu);
    if (!s->free_slots)
        slab_link(a, s);
    s->free_slots |= 1u << i;
    bool empty = s->free_slots == all;
    if (empty)
        slab_unlink(a, s);
    pthread_mutex_unlock(&a->mu);
    if (empty) {
        munmap(s->base, HUGE_BYTES);
        free(s);
    } else {
        madvise(data, a->map_bytes, MADV_DONTNEED);
    }
}

void slab_init(struct slab_alloc *a, size_t block_bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = page > 0 ? (size_t)page : 4096;
    a->map_bytes = (block_bytes + pg - 1) / pg * pg;
    size_t per = HUGE_BYTES / a->map_bytes;
    a->per_slab = per >= 2 && per <= 32 ? (unsigned)per : 0;
    a->slabs = NULL;
    pthread_mutex_init(&a->mu, NULL);
}

void slab_fini(struct slab_alloc *a)
{
    pthread_mutex_destroy(&a->mu);
}

unsigned char *slab_get(struct slab_alloc *a, struct slab **slab)
{
    *slab = NULL;
    unsigned char *p;
    if (a->per_slab >= 2 && (p = slot_take(a, slab)))
        return p;
    p = map_huge(a->map_bytes);
    if (!p)
        p = mmap(NULL, a->map_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void slab_put(struct slab_alloc *a, unsigned char *data, struct slab *slab)
{
    if (slab)
        slot_give(a, data, slab);
    else
        munmap(data, a->map_bytes);
}

size_t slab_buf_bytes(const struct slab_alloc *a)
{
    return a->per_slab ? HUGE_BYTES / a->per_slab : a->map_bytes;
}

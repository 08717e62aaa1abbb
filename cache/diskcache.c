/* cache/diskcache.c — the persistent disk cache of remote blocks (see
 * diskcache.h for what it promises): the public glue — CRC32C, groups, the
 * files' names, sizes, the batch setting, stats and close.  The other jobs
 * are in cache/dcache_*.c (cache/dcache_impl.h lists them). */
#include "dcache_impl.h"
#include "kernels/crc32c.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- CRC32C (kernels/crc32c.h) --------------------------------------------- */

uint32_t dcache_crc32c(uint32_t crc, const void *buf, size_t len)
{
    return kern_crc32c(crc, buf, len);
}

uint32_t dcache_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    return kern_crc32c_sw(crc, buf, len);
}

/* ---- groups ------------------------------------------------------------------ */

struct dcache_group *dcache_group_new(void)
{
    struct dcache_group *g = calloc(1, sizeof *g);
    if (g)
        pthread_mutex_init(&g->mu, NULL);
    return g;
}

void dcache_group_free(struct dcache_group *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->mu);
    free(g->bases);
    free(g);
}

/* ---- names and sizes ----------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const uint8_t *s = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

void dcache_file_base(const char *identity, uint64_t size, char *out, size_t cap)
{
    uint8_t le[8];
    gguf_wr64(&dc_le, le, size);
    uint64_t h = fnv1a(0xcbf29ce484222325ull, identity, strlen(identity) + 1);
    h = fnv1a(h, le, 8);
    snprintf(out, cap, "dc-%016" PRIx64, h);
}

uint64_t dcache_blocks(const struct dcache *dc)
{
    return dc->nblocks;
}

size_t dcache_block_len(const struct dcache *dc, uint64_t b)
{
    if (b >= dc->nblocks)
        return 0;
    if (b + 1 < dc->nblocks)
        return dc->block_bytes;
    return (size_t)(dc->size - b * dc->block_bytes);
}

/* ---- settings, stats, close -------------------------------------------------- */

void dcache_set_batch(struct dcache *dc, unsigned n)
{
    pthread_mutex_lock(&dc->mu);
    if (n == 0) {
        n = DCACHE_BATCH_BYTES / dc->block_bytes;
        if (n == 0)
            n = 1;
        dc->sync_each = false;
        dc->timer = true;
    } else {
        dc->sync_each = n == 1;
        dc->timer = false;
    }
    dc->batch = n;
    pthread_cond_broadcast(&dc->cond);
    pthread_mutex_unlock(&dc->mu);
}

void dcache_get_stats(struct dcache *dc, struct dcache_stats *out)
{
    pthread_mutex_lock(&dc->mu);
    *out = dc->st;
    out->bytes_used = dc->own;
    out->others_bytes = dc->others;
    out->blocks = dc->readable;
    pthread_mutex_unlock(&dc->mu);
}

void dc_free(struct dcache *dc)
{
    if (dc->group) {
        pthread_mutex_lock(&dc->mu);
        dc_own_add(dc, -(int64_t)dc->own);
        pthread_mutex_unlock(&dc->mu);
        struct dcache_group *g = dc->group;
        pthread_mutex_lock(&g->mu);
        for (size_t i = 0; i < g->n && dc->in_group; i++)
            if (strcmp(g->bases[i], dc->base) == 0) {
                memcpy(g->bases[i], g->bases[--g->n], sizeof g->bases[i]);
                break;
            }
        pthread_mutex_unlock(&g->mu);
    }
    if (dc->map_fd >= 0)
        close(dc->map_fd);   /* drops the lock */
    if (dc->data_fd >= 0)
        close(dc->data_fd);
    pthread_mutex_destroy(&dc->mu);
    pthread_mutex_destroy(&dc->flush_mu);
    pthread_cond_destroy(&dc->cond);
    pthread_cond_destroy(&dc->checked);
    pthread_cond_destroy(&dc->cwork);
    free(dc->pend.v);
    free(dc->evict.v);
    free(dc->b);
    free(dc->dir);
    free(dc);
}

void dcache_close(struct dcache *dc)
{
    if (!dc)
        return;
    pthread_mutex_lock(&dc->mu);
    dc->stop = true;
    bool on = dc->flusher_on, checker = dc->checker_on;
    pthread_cond_broadcast(&dc->cond);
    pthread_cond_broadcast(&dc->cwork);
    pthread_mutex_unlock(&dc->mu);
    if (on)
        pthread_join(dc->flusher, NULL);
    if (checker)
        pthread_join(dc->checker, NULL);
    dcache_flush(dc);
    futimens(dc->map_fd, NULL);
    dc_free(dc);
}

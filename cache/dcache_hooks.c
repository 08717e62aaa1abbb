/*
 * cache/dcache_hooks.c — the disk cache beneath a block cache of remote
 * bytes: the hooks blocksrc_set_disk takes (cache/blocksrc.h), and the
 * name of a remote object's disk cache (cache/diskcache.h).
 */
#include "cache/diskcache.h"
#include "cache/blocksrc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool dc_read(void *ctx, uint64_t block, void *dst, size_t len)
{
    return dcache_read(ctx, block, dst, len);
}

static void dc_write(void *ctx, uint64_t block, const void *src, size_t len)
{
    dcache_write(ctx, block, src, len);
}

static bool dc_has(void *ctx, uint64_t block)
{
    return dcache_has(ctx, block);
}

static bool dc_hold(void *ctx, uint64_t block, size_t len, int *fd, uint64_t *pos)
{
    return dcache_hold(ctx, block, len, fd, pos);
}

static void dc_release(void *ctx, uint64_t block)
{
    dcache_release(ctx, block);
}

static void dc_check_ahead(void *ctx, uint64_t block)
{
    dcache_check_ahead(ctx, block);
}

void dcache_blocksrc_hooks(struct dcache *dc, struct blocksrc_disk *out)
{
    *out = (struct blocksrc_disk){ .read = dc_read, .write = dc_write, .has = dc_has,
                                   .hold = dc_hold, .release = dc_release,
                                   .check_ahead = dc_check_ahead, .ctx = dc };
}

enum gguf_err dcache_key(const char *identity, const char *url, char **out,
                         struct gguf_diag *d)
{
    *out = NULL;
    if (strncmp(identity, "size:", 5) == 0)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the server sends neither ETag nor "
                             "Last-Modified, a new version could not be told from this one");
    size_t n = strlen(identity) + strlen(url) + 2;
    char *key = malloc(n);
    if (!key)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    snprintf(key, n, "%s %s", identity, url);
    *out = key;
    return GGUF_OK;
}

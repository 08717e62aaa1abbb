/*
 * fs/mount_dcache.c — the disk cache of a remote model's blocks at mount
 * (see mount_dcache.h).
 */
#include "fs.h"
#include "mount_dcache.h"
#include "mount_open.h"
#include "core/model.h"
#include "options.h"

#include "cache/blocksrc.h"
#include "cache/diskcache.h"
#include "remote/http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* -o cache_dir: made if missing, and usable, before anything is fetched;
 * kept as an absolute path (the daemon runs in /).  A directory that
 * cannot be used is a mount error: one line naming it, exit 1. */
bool ggfs_check_cache_dir(struct options *o)
{
    if (!o->cache_dir)
        return true;
    struct gguf_diag d;
    if (dcache_check_dir(o->cache_dir, &d) != GGUF_OK) {
        fprintf(stderr, "gguffs: %s\n", d.msg);
        return false;
    }
    char *real = realpath(o->cache_dir, NULL);
    if (!real) {
        fprintf(stderr, "gguffs: cache_dir=%s: %s\n", o->cache_dir, strerror(errno));
        return false;
    }
    free(o->cache_dir);
    o->cache_dir = real;
    return true;
}

/* A disk cache per shard of a remote model (-o cache_dir).  A shard whose
 * cache cannot be opened (another gguffs has it open; a file error) is read
 * without one, said once on stderr: the mount goes on.  What names a
 * shard's cache: dcache_key (cache/diskcache.h). */
void ggfs_dcache_open(struct mount *fs, const struct options *o)
{
    if (!o->cache_dir || !fs->remote || !fs->rcache)
        return;
    /* the shards as opened at mount (an overlay's versions read through
     * fs->base's): core_open_model, given fs->rcache, made each remote
     * shard's source a block-cache wrapper, so blocksrc_set_disk may take
     * it */
    const struct gguf_split *m = fs->base ? fs->base : fs->st->model;
    fs->dcache_group = dcache_group_new();
    fs->dcache = calloc(m->n, sizeof *fs->dcache);
    if (!fs->dcache_group || !fs->dcache) {
        fprintf(stderr, "gguffs: %s: out of memory: no disk cache\n", fs->model_path);
        return;
    }
    fs->n_dcache = m->n;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 0; i < m->n; i++) {
        struct remote *r = core_remote(m->shards[i].src, fs->remote);
        if (!r)
            continue;
        char *key;
        struct gguf_diag d;
        enum gguf_err e = dcache_key(remote_identity(r), remote_display_url(r), &key, &d);
        if (e) {
            fprintf(stderr, "gguffs: %s: disk cache: %s; reading without it\n",
                    m->shards[i].src->name, d.msg);
            continue;
        }
        while ((e = dcache_open_in(fs->dcache_group, o->cache_dir, key,
                                   m->shards[i].src->size, (uint32_t)o->remote_block,
                                   o->cache_max, &fs->dcache[i], &d)) == GGUF_E_EXIST &&
               ggfs_held_wait_more(&t0))
            ;
        free(key);
        if (e) {
            fprintf(stderr, "gguffs: %s: disk cache: %s%s; reading without it\n",
                    m->shards[i].src->name, d.msg,
                    e == GGUF_E_EXIST ? " (waited 10 s for it)" : "");
            continue;
        }
        /* the block cache's fills ask it first, and store what they fetch
         * (blocks of remote_block bytes, as the disk cache's); replies of
         * blocks it holds are spliced from its data file */
        struct blocksrc_disk disk;
        dcache_blocksrc_hooks(fs->dcache[i], &disk);
        blocksrc_set_disk(m->shards[i].src, &disk);
    }
}

void ggfs_dcache_close(struct mount *fs)
{
    for (unsigned i = 0; i < fs->n_dcache; i++)
        dcache_close(fs->dcache[i]);
    free(fs->dcache);
    dcache_group_free(fs->dcache_group);
    fs->dcache = NULL;
    fs->n_dcache = 0;
    fs->dcache_group = NULL;
}

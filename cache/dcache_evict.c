/* cache/dcache_evict.c — the disk cache's bound (see diskcache.h, "Bounded"):
 * the bytes counted, with the group's; other models in the directory,
 * measured and removed; this model's blocks evicted by CLOCK; and a
 * writer's claim of room. */
#include "dcache_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the bytes counted ---------------------------------------------------------- */

/* Counts delta more bytes for dc (and its group); dc->mu held. */
void dc_own_add(struct dcache *dc, int64_t delta)
{
    dc->own += (uint64_t)delta;
    if (dc->group) {
        pthread_mutex_lock(&dc->group->mu);
        dc->group->used += (uint64_t)delta;
        pthread_mutex_unlock(&dc->group->mu);
    }
}

/* Bytes counted for dc and the rest of its group; dc->mu held. */
static uint64_t used(struct dcache *dc)
{
    if (!dc->group)
        return dc->own;
    pthread_mutex_lock(&dc->group->mu);
    uint64_t u = dc->group->used;
    pthread_mutex_unlock(&dc->group->mu);
    return u;
}

/* true if base (19 characters) is a member of dc's group (or dc's own). */
static bool ours(struct dcache *dc, const char *base)
{
    if (strncmp(base, dc->base, 19) == 0)
        return true;
    if (!dc->group)
        return false;
    bool found = false;
    pthread_mutex_lock(&dc->group->mu);
    for (size_t i = 0; i < dc->group->n && !found; i++)
        found = strncmp(base, dc->group->bases[i], 19) == 0;
    pthread_mutex_unlock(&dc->group->mu);
    return found;
}

/* ---- other models in the directory ------------------------------------------- */

struct other {
    char name[24];
    uint64_t bytes;
    struct timespec mtime;
};

static uint64_t file_bytes(int dirfd, const char *name, struct timespec *mtime)
{
    struct stat s;
    if (fstatat(dirfd, name, &s, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(s.st_mode))
        return 0;
    if (mtime)
        *mtime = s.st_mtim;
    return (uint64_t)s.st_blocks * 512;
}

static int cmp_other(const void *a, const void *b)
{
    const struct other *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The other models' files ("dc-" + 16 hex digits + ".map" or ".data"),
 * grouped by base; their bytes summed into *total.  NULL and 0 models when
 * the directory cannot be read or on ENOMEM. */
static struct other *scan_others(struct dcache *dc, size_t *n_out, uint64_t *total)
{
    *n_out = 0;
    *total = 0;
    DIR *d = opendir(dc->dir);
    if (!d)
        return NULL;
    struct other *o = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        size_t len = strlen(nm);
        bool map = len == 23 && strcmp(nm + 19, ".map") == 0;
        bool data = len == 24 && strcmp(nm + 19, ".data") == 0;
        if ((!map && !data) || strncmp(nm, "dc-", 3) != 0 ||
            strspn(nm + 3, "0123456789abcdef") != 16 || ours(dc, nm))
            continue;
        size_t i;
        for (i = 0; i < n && strncmp(o[i].name, nm, 19) != 0; i++)
            ;
        if (i == n) {
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 16;
                struct other *no = realloc(o, nc * sizeof *no);
                if (!no)
                    break;
                o = no;
                cap = nc;
            }
            memset(&o[n], 0, sizeof o[n]);
            memcpy(o[n].name, nm, 19);
            n++;
        }
        struct timespec mt = { 0 };
        uint64_t by = file_bytes(dirfd(d), nm, map ? &mt : NULL);
        o[i].bytes += by;
        *total += by;
        if (map)
            o[i].mtime = mt;
    }
    closedir(d);
    if (n)
        qsort(o, n, sizeof *o, cmp_other);
    *n_out = n;
    return o;
}

/* Removes the other model base (both files) if no process has it open:
 * true if it did. */
static bool remove_other(struct dcache *dc, const char *base)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.map", dc->dir, base);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    bool done = false;
    if (fd < 0) {
        /* a data file without its map: nobody can be using it */
        snprintf(path, sizeof path, "%s/%s.data", dc->dir, base);
        return errno == ENOENT && unlink(path) == 0;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        /* data first: a map without data is rebuilt, never trusted */
        snprintf(path, sizeof path, "%s/%s.data", dc->dir, base);
        done = unlink(path) == 0 || errno == ENOENT;
        snprintf(path, sizeof path, "%s/%s.map", dc->dir, base);
        done = done && unlink(path) == 0;
    }
    close(fd);
    return done;
}

/* Removes idle other models, least recently used first, until need bytes
 * fit beside this model; updates dc->others.  flush_mu held, mu not. */
static void evict_others(struct dcache *dc, uint64_t need)
{
    size_t n;
    uint64_t total;
    struct other *o = scan_others(dc, &n, &total);
    pthread_mutex_lock(&dc->mu);
    uint64_t own = used(dc);
    pthread_mutex_unlock(&dc->mu);
    uint64_t removed = 0;
    for (size_t i = 0; i < n && own + total + need > dc->max_bytes; i++) {
        if (remove_other(dc, o[i].name)) {
            total -= o[i].bytes;
            removed++;
        }
    }
    free(o);
    pthread_mutex_lock(&dc->mu);
    dc->others = total;
    dc->st.others_bytes = total;
    dc->st.models_removed += removed;
    pthread_mutex_unlock(&dc->mu);
}

/* Picks victims among this model's blocks (CLOCK) until need bytes fit,
 * with a batch more; mu held.  true if anything was picked. */
static bool pick_victims(struct dcache *dc, uint64_t need, uint64_t skip)
{
    uint64_t extra = (uint64_t)DCACHE_EVICT_BATCH * dc->block_bytes;
    if (extra > dc->max_bytes / 8)
        extra = dc->max_bytes / 8;
    uint64_t target = used(dc) + dc->others + need;   /* with the new block */
    uint64_t limit = dc->max_bytes;
    uint64_t freeing = 0;
    bool picked = false;
    /* two rounds of the hand: the first clears second chances */
    for (uint64_t steps = 0; steps < 2 * dc->nblocks && dc->nblocks; steps++) {
        if (target - freeing + extra <= limit)
            break;
        uint64_t b = dc->hand;
        dc->hand = (dc->hand + 1) % dc->nblocks;
        struct blk *k = &dc->b[b];
        if (b == skip || (k->state != B_PRESENT && k->state != B_PENDING) || k->holds)
            continue;
        if (k->ref) {
            k->ref = 0;
            continue;
        }
        if (k->state == B_PENDING) {
            /* never marked on disk: drop it from the waiting list */
            for (size_t i = 0; i < dc->pend.n; i++)
                if (dc->pend.v[i] == b) {
                    dc->pend.v[i] = dc->pend.v[--dc->pend.n];
                    break;
                }
        }
        if (!dc_vec_push(&dc->evict, b))
            break;
        k->state = B_EVICTING;
        dc->readable--;
        k->gen++;
        dc->st.evicted++;
        freeing += dc_blk_room(dc, b);
        picked = true;
    }
    return picked;
}

/* Claims block b for writing if it is absent and fits (making room if
 * needed): true with own counted.  mu held on entry and on return. */
bool dc_claim(struct dcache *dc, uint64_t b)
{
    uint64_t room = dc_blk_room(dc, b);
    for (int round = 0;; round++) {
        if (dc->broken || dc->b[b].state != B_ABSENT)
            return false;
        if (used(dc) + dc->others + room <= dc->max_bytes)
            break;
        if (round == 2) {
            dc->st.skipped++;
            return false;
        }
        /* make room: one writer at a time (flush_mu), without mu while
         * scanning the directory or syncing */
        pthread_mutex_unlock(&dc->mu);
        pthread_mutex_lock(&dc->flush_mu);
        pthread_mutex_lock(&dc->mu);
        if (used(dc) + dc->others + room > dc->max_bytes) {
            /* measure the others again (they grow too), and remove idle
             * ones if that is not enough */
            pthread_mutex_unlock(&dc->mu);
            evict_others(dc, room);
            pthread_mutex_lock(&dc->mu);
        }
        if (used(dc) + dc->others + room > dc->max_bytes)
            pick_victims(dc, room, b);
        pthread_mutex_unlock(&dc->mu);
        dc_flush_locked(dc);
        pthread_mutex_unlock(&dc->flush_mu);
        pthread_mutex_lock(&dc->mu);
    }
    dc->b[b].state = B_WRITING;
    dc_own_add(dc, (int64_t)room);
    return true;
}

void dc_measure_others(struct dcache *dc)
{
    size_t n;
    uint64_t total;
    free(scan_others(dc, &n, &total));
    dc->others = total;
}

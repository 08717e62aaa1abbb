/* fs/diskcache.c — the persistent disk cache of remote blocks (see
 * diskcache.h for what it promises). */
#include "diskcache.h"
#include "thread.h"
#include "kernels/crc32c.h"
#include "gguf/bytes.h"
#include "gguf/journal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HDR_SIZE 4096u
#define ENTRY_SIZE 8u
#define PAGE 4096u
#define MAGIC "GGUFFSDC"
#define VERSION 1u
/* header layout (little-endian) */
#define H_MAGIC 0
#define H_VERSION 8
#define H_HDRSIZE 12
#define H_SIZE 16
#define H_BLOCK 24
#define H_IDLEN 28
#define H_NBLOCKS 32
#define H_CRC 40
#define H_ID 48
#define PENDING_BATCHES 4u

/* The files' integers are little-endian (gguf/bytes.h). */
static const struct gguf_enc dc_le = { .big_endian = false, .v1 = false };

/* ---- CRC32C (kernels/crc32c.h) --------------------------------------------- */

uint32_t dcache_crc32c(uint32_t crc, const void *buf, size_t len)
{
    return ggfs_crc32c(crc, buf, len);
}

uint32_t dcache_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    return ggfs_crc32c_sw(crc, buf, len);
}

/* ---- the cache ----------------------------------------------------------------- */

enum bstate {
    B_ABSENT,     /* not stored (a hole, or space to give back) */
    B_WRITING,    /* a writer is writing its bytes */
    B_PENDING,    /* written, waiting for a flush (readable) */
    B_FLUSHING,   /* in the flush under way (readable) */
    B_PRESENT,    /* durable and marked (readable) */
    B_EVICTING,   /* to be cleared and punched (not readable) */
};

struct blk {
    uint32_t crc;     /* of the bytes, while readable */
    uint32_t gen;     /* +1 each time it stops being readable */
    uint32_t vgen;    /* gen + 1 once its bytes on disk were checked */
    uint16_t holds;   /* dcache_hold: not evicted while > 0 */
    uint8_t checking; /* a hold is checking its bytes (others wait: checked) */
    uint8_t state;
    uint8_t ref;      /* CLOCK: read since the hand passed */
};

struct vec {
    uint64_t *v;
    size_t n, cap;
};

struct dcache_group {
    pthread_mutex_t mu;
    uint64_t used;            /* the members' own bytes, summed */
    char (*bases)[24];        /* the members' file bases */
    size_t n, cap;
};

struct dcache {
    struct dcache_group *group;
    bool in_group;            /* its base is listed in group */
    char *dir;
    char base[24];            /* "dc-HASH" */
    int map_fd, data_fd;
    uint64_t size, nblocks, max_bytes, map_bytes;
    uint32_t block_bytes;
    unsigned batch;           /* blocks per flush */
    bool sync_each;           /* dcache_set_batch(1) */
    bool timer;               /* flush DCACHE_FLUSH_MS after a write too */

    pthread_mutex_t mu;       /* everything below */
    pthread_cond_t cond;      /* flusher: work; writers: a flush ended */
    pthread_cond_t checked;   /* a hold's check of a block ended */
    struct blk *b;
    struct vec pend, evict;   /* blocks waiting to be marked / cleared */
    uint64_t hand;            /* CLOCK */
    uint64_t own;             /* bytes counted (see stats.bytes_used) */
    uint64_t readable;        /* blocks PENDING, FLUSHING or PRESENT */
    uint64_t others;          /* other models' bytes, last measured */
    bool stop, broken;
    struct timespec first_pending;
    struct dcache_stats st;

    pthread_mutex_t flush_mu; /* one flush (or room making) at a time */
    pthread_t flusher;
    bool flusher_on;

    /* checks ahead (dcache_check_ahead), under mu: a ring of blocks, one
     * thread started at the first */
    uint64_t cq[DCACHE_CHECK_AHEAD];
    unsigned cq_head, cq_len;
    bool checker_on, checker_busy;
    pthread_t checker;
    pthread_cond_t cwork;     /* the ring got a block, or stopping */
};

static bool vec_push(struct vec *v, uint64_t x)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 64;
        uint64_t *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv)
            return false;
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return true;
}

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

/* Counts delta more bytes for dc (and its group); dc->mu held. */
static void own_add(struct dcache *dc, int64_t delta)
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

/* Bytes a block takes on disk, as counted. */
static uint64_t blk_room(const struct dcache *dc, uint64_t b)
{
    return ((uint64_t)dcache_block_len(dc, b) + PAGE - 1) / PAGE * PAGE;
}

static bool readable(uint8_t s)
{
    return s == B_PENDING || s == B_FLUSHING || s == B_PRESENT;
}

/* The check of an entry: never 0 (the top bit is set), so that a zeroed
 * entry means "not stored". */
static uint32_t entry_check(uint64_t b, uint32_t crc, uint32_t len)
{
    uint8_t in[16];
    gguf_wr64(&dc_le, in, b);
    gguf_wr32(&dc_le, in + 8, crc);
    gguf_wr32(&dc_le, in + 12, len);
    return dcache_crc32c(0x5a17c0deu, in, sizeof in) | 0x80000000u;
}

static int do_sync(struct dcache *dc, int fd)
{
    int r;
    do
        r = fdatasync(fd);
    while (r != 0 && errno == EINTR);
    pthread_mutex_lock(&dc->mu);
    dc->st.syncs++;
    pthread_mutex_unlock(&dc->mu);
    return r;
}

static int write_entry(struct dcache *dc, uint64_t b, uint32_t crc, bool present)
{
    uint8_t e[ENTRY_SIZE] = { 0 };
    if (present) {
        gguf_wr32(&dc_le, e, crc);
        gguf_wr32(&dc_le, e + 4, entry_check(b, crc, (uint32_t)dcache_block_len(dc, b)));
    }
    return gguf_pwrite_all(dc->map_fd, e, sizeof e, HDR_SIZE + b * ENTRY_SIZE) ? 0 : errno;
}

static void punch(int fd, uint64_t off, uint64_t len)
{
    /* nothing to do about a failure: the space stays used until the next
     * open gives it back (the entry is cleared) */
    (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len);
}

/* Turns the cache off after a disk error (mu held). */
static void set_broken(struct dcache *dc)
{
    dc->broken = true;
    dc->st.broken = true;
}

/*
 * One flush: the blocks waiting are synced and marked, the victims cleared
 * and punched.  flush_mu held, mu not.
 */
static void flush_locked(struct dcache *dc)
{
    pthread_mutex_lock(&dc->mu);
    struct vec p = dc->pend, e = dc->evict;
    dc->pend = (struct vec){ 0 };
    dc->evict = (struct vec){ 0 };
    for (size_t i = 0; i < p.n; i++)
        dc->b[p.v[i]].state = B_FLUSHING;
    bool broken = dc->broken;
    pthread_mutex_unlock(&dc->mu);
    if (!p.n && !e.n)
        goto done;
    bool data_ok = true, map_ok = !broken;
    if (p.n && !broken)
        data_ok = do_sync(dc, dc->data_fd) == 0;
    bool wrote = false;
    for (size_t i = 0; i < e.n && map_ok; i++) {
        map_ok = write_entry(dc, e.v[i], 0, false) == 0;
        wrote = true;
    }
    if (data_ok) {
        for (size_t i = 0; i < p.n && map_ok; i++) {
            uint64_t b = p.v[i];
            pthread_mutex_lock(&dc->mu);
            uint32_t crc = dc->b[b].crc;
            pthread_mutex_unlock(&dc->mu);
            map_ok = write_entry(dc, b, crc, true) == 0;
            wrote = true;
        }
    }
    if (wrote && map_ok)
        map_ok = do_sync(dc, dc->map_fd) == 0;
    /* the clearing entries are durable: the holes may be punched */
    if (map_ok)
        for (size_t i = 0; i < e.n; i++)
            punch(dc->data_fd, e.v[i] * dc->block_bytes, blk_room(dc, e.v[i]));
    /* blocks whose bytes did not sync have no entry on disk: their space
     * goes at once */
    if (!data_ok)
        for (size_t i = 0; i < p.n; i++)
            punch(dc->data_fd, p.v[i] * dc->block_bytes, blk_room(dc, p.v[i]));
    pthread_mutex_lock(&dc->mu);
    if (!map_ok || !data_ok)
        set_broken(dc);
    for (size_t i = 0; i < p.n; i++) {
        struct blk *k = &dc->b[p.v[i]];
        if (data_ok && map_ok) {
            k->state = B_PRESENT;
            k->vgen = k->gen + 1;       /* its bytes are ours, written and synced */
            dc->st.stored++;
        } else {
            /* not known to be on disk: gone (its space is given back at
             * the next open) */
            k->state = B_ABSENT;
            dc->readable--;
            k->gen++;
            own_add(dc, -(int64_t)blk_room(dc, p.v[i]));
        }
    }
    for (size_t i = 0; i < e.n; i++) {
        dc->b[e.v[i]].state = B_ABSENT;
        own_add(dc, -(int64_t)blk_room(dc, e.v[i]));
    }
    dc->st.flushes++;
    pthread_mutex_unlock(&dc->mu);
done:
    free(p.v);
    free(e.v);
    pthread_mutex_lock(&dc->mu);
    pthread_cond_broadcast(&dc->cond);
    pthread_mutex_unlock(&dc->mu);
}

void dcache_flush(struct dcache *dc)
{
    pthread_mutex_lock(&dc->flush_mu);
    flush_locked(dc);
    pthread_mutex_unlock(&dc->flush_mu);
}

static void *flusher_main(void *arg)
{
    struct dcache *dc = arg;
    pthread_mutex_lock(&dc->mu);
    while (!dc->stop) {
        bool due = dc->evict.n > 0 || dc->pend.n >= dc->batch;
        if (!due && dc->pend.n && dc->timer) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            int64_t ms = (int64_t)(now.tv_sec - dc->first_pending.tv_sec) * 1000 +
                         (now.tv_nsec - dc->first_pending.tv_nsec) / 1000000;
            due = ms >= (int64_t)DCACHE_FLUSH_MS;
        }
        if (due) {
            pthread_mutex_unlock(&dc->mu);
            dcache_flush(dc);
            pthread_mutex_lock(&dc->mu);
            continue;
        }
        if (dc->pend.n && dc->timer) {
            struct timespec t = dc->first_pending;
            t.tv_sec += DCACHE_FLUSH_MS / 1000;
            t.tv_nsec += (long)(DCACHE_FLUSH_MS % 1000) * 1000000;
            if (t.tv_nsec >= 1000000000) {
                t.tv_sec++;
                t.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&dc->cond, &dc->mu, &t);
        } else {
            pthread_cond_wait(&dc->cond, &dc->mu);
        }
    }
    pthread_mutex_unlock(&dc->mu);
    return NULL;
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
        if (!vec_push(&dc->evict, b))
            break;
        k->state = B_EVICTING;
        dc->readable--;
        k->gen++;
        dc->st.evicted++;
        freeing += blk_room(dc, b);
        picked = true;
    }
    return picked;
}

/* ---- read and write ------------------------------------------------------------ */

static void reject(struct dcache *dc, uint64_t b, uint32_t gen);

bool dcache_read(struct dcache *dc, uint64_t b, void *dst, size_t len)
{
    pthread_mutex_lock(&dc->mu);
    if (b >= dc->nblocks || len != dcache_block_len(dc, b) || dc->broken ||
        !readable(dc->b[b].state)) {
        dc->st.misses++;
        pthread_mutex_unlock(&dc->mu);
        return false;
    }
    uint32_t crc = dc->b[b].crc, gen = dc->b[b].gen;
    dc->b[b].ref = 1;
    pthread_mutex_unlock(&dc->mu);
    bool ok = gguf_pread_all(dc->data_fd, dst, len, b * dc->block_bytes) &&
              dcache_crc32c(0, dst, len) == crc;
    pthread_mutex_lock(&dc->mu);
    struct blk *k = &dc->b[b];
    if (ok) {
        dc->st.hits++;
        if (k->gen == gen && k->state == B_PRESENT)
            k->vgen = gen + 1;
    } else {
        dc->st.misses++;
        reject(dc, b, gen);
    }
    pthread_mutex_unlock(&dc->mu);
    return ok;
}

/* Block b's bytes did not check (read when its generation was gen): if it
 * is still that block, it is dropped (cleared and punched by the flusher);
 * evicted meanwhile, it was a plain miss.  mu held. */
static void reject(struct dcache *dc, uint64_t b, uint32_t gen)
{
    struct blk *k = &dc->b[b];
    /* (a block in the flush under way is rejected at a later read) */
    if (k->gen != gen || !readable(k->state) || k->state == B_FLUSHING)
        return;
    if (k->state == B_PENDING)
        for (size_t i = 0; i < dc->pend.n; i++)
            if (dc->pend.v[i] == b) {
                dc->pend.v[i] = dc->pend.v[--dc->pend.n];
                break;
            }
    if (vec_push(&dc->evict, b)) {
        k->state = B_EVICTING;
        dc->readable--;
        k->gen++;
        dc->st.rejected++;
        pthread_cond_broadcast(&dc->cond);
    }
}

/* The most a block is held at once (more holders: a miss for them). */
#define MAX_HOLDS 0xffffu

/* CRC32C of len bytes of fd at pos, read in pieces that stay in the CPU's
 * cache; false if they cannot be read.  (Not through a mapping of the
 * file: under virtualisation, a TLB miss per page made that 6 times
 * slower here than pread's copy from the kernel's own mapping.) */
static bool file_crc(int fd, uint64_t pos, size_t len, uint32_t *out)
{
    uint8_t piece[64 << 10];
    uint32_t c = 0;
    for (size_t at = 0; at < len; at += sizeof piece) {
        size_t n = len - at < sizeof piece ? len - at : sizeof piece;
        if (!gguf_pread_all(fd, piece, n, pos + at))
            return false;
        c = dcache_crc32c(c, piece, n);
    }
    *out = c;
    return true;
}

/* Checks block b's bytes on disk (k->checking set by the caller, mu held
 * on entry and return, dropped meanwhile): true if they match and the
 * block is still the one checked, which is then checked for this process;
 * false if they do not (the block is dropped) or it went meanwhile. */
static bool check_block(struct dcache *dc, uint64_t b)
{
    struct blk *k = &dc->b[b];
    uint32_t crc = k->crc, gen = k->gen;
    size_t len = dcache_block_len(dc, b);
    pthread_mutex_unlock(&dc->mu);
    uint32_t c = 0;
    bool ok = file_crc(dc->data_fd, b * dc->block_bytes, len, &c) && c == crc;
    pthread_mutex_lock(&dc->mu);
    k->checking = 0;
    pthread_cond_broadcast(&dc->checked);
    if (ok && k->gen != gen) {
        ok = false;             /* dropped meanwhile (a read found it bad) */
    } else if (ok) {
        dc->st.hits++;
        k->vgen = gen + 1;
    } else {
        dc->st.misses++;
        reject(dc, b, gen);
    }
    return ok;
}

bool dcache_hold(struct dcache *dc, uint64_t b, size_t len, int *fd, uint64_t *pos)
{
    pthread_mutex_lock(&dc->mu);
    struct blk *k = b < dc->nblocks ? &dc->b[b] : NULL;
    /* one check at a time per block: the others wait for its verdict */
    while (k && k->checking)
        pthread_cond_wait(&dc->checked, &dc->mu);
    if (!k || len != dcache_block_len(dc, b) || dc->broken || k->state != B_PRESENT ||
        k->holds == MAX_HOLDS) {
        pthread_mutex_unlock(&dc->mu);
        return false;
    }
    k->holds++;
    k->ref = 1;
    *fd = dc->data_fd;
    *pos = b * dc->block_bytes;
    bool ok = true;
    if (k->vgen != k->gen + 1) {
        /* the first hold in this process checks the bytes */
        k->checking = 1;
        ok = check_block(dc, b);
        if (!ok)
            k->holds--;
    }
    pthread_mutex_unlock(&dc->mu);
    return ok;
}

static void *checker_main(void *arg)
{
    struct dcache *dc = arg;
    pthread_mutex_lock(&dc->mu);
    for (;;) {
        while (!dc->stop && dc->cq_len == 0)
            pthread_cond_wait(&dc->cwork, &dc->mu);
        if (dc->stop)
            break;
        uint64_t b = dc->cq[dc->cq_head];
        dc->cq_head = (dc->cq_head + 1) % DCACHE_CHECK_AHEAD;
        dc->cq_len--;
        struct blk *k = &dc->b[b];
        /* not if a hold checks it now, or it went meanwhile */
        if (!k->checking && k->state == B_PRESENT && !dc->broken && k->vgen != k->gen + 1) {
            k->checking = 1;
            dc->checker_busy = true;
            check_block(dc, b);
            dc->checker_busy = false;
            dc->st.checked_ahead++;
        }
        pthread_cond_broadcast(&dc->checked);
    }
    pthread_mutex_unlock(&dc->mu);
    return NULL;
}

void dcache_check_ahead(struct dcache *dc, uint64_t b)
{
    pthread_mutex_lock(&dc->mu);
    if (b >= dc->nblocks || dc->stop || dc->broken || dc->b[b].state != B_PRESENT ||
        dc->b[b].checking || dc->b[b].vgen == dc->b[b].gen + 1 || dc->cq_len == DCACHE_CHECK_AHEAD)
        goto out;
    for (unsigned i = 0; i < dc->cq_len; i++)
        if (dc->cq[(dc->cq_head + i) % DCACHE_CHECK_AHEAD] == b)
            goto out;
    if (!dc->checker_on) {
        /* started at the first (after any fork); it takes no signal */
        dc->checker_on = ggfs_thread_start(&dc->checker, checker_main, dc) == 0;
        if (!dc->checker_on)
            goto out;
    }
    dc->cq[(dc->cq_head + dc->cq_len++) % DCACHE_CHECK_AHEAD] = b;
    pthread_cond_signal(&dc->cwork);
out:
    pthread_mutex_unlock(&dc->mu);
}

void dcache_checks_wait(struct dcache *dc)
{
    pthread_mutex_lock(&dc->mu);
    while (dc->checker_on && (dc->cq_len || dc->checker_busy))
        pthread_cond_wait(&dc->checked, &dc->mu);
    pthread_mutex_unlock(&dc->mu);
}

bool dcache_has(struct dcache *dc, uint64_t b)
{
    pthread_mutex_lock(&dc->mu);
    bool has = b < dc->nblocks && !dc->broken && dc->b[b].state == B_PRESENT;
    pthread_mutex_unlock(&dc->mu);
    return has;
}

void dcache_release(struct dcache *dc, uint64_t b)
{
    pthread_mutex_lock(&dc->mu);
    if (b < dc->nblocks && dc->b[b].holds)
        dc->b[b].holds--;
    pthread_mutex_unlock(&dc->mu);
}

/* Claims block b for writing if it is absent and fits (making room if
 * needed): true with own counted.  mu held on entry and on return. */
static bool claim(struct dcache *dc, uint64_t b)
{
    uint64_t room = blk_room(dc, b);
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
        flush_locked(dc);
        pthread_mutex_unlock(&dc->flush_mu);
        pthread_mutex_lock(&dc->mu);
    }
    dc->b[b].state = B_WRITING;
    own_add(dc, (int64_t)room);
    return true;
}

void dcache_write(struct dcache *dc, uint64_t b, const void *src, size_t len)
{
    if (b >= dc->nblocks || len != dcache_block_len(dc, b))
        return;
    pthread_mutex_lock(&dc->mu);
    /* back-pressure: at most PENDING_BATCHES batches wait */
    while (!dc->broken && dc->pend.n >= (size_t)PENDING_BATCHES * dc->batch)
        pthread_cond_wait(&dc->cond, &dc->mu);
    if (!claim(dc, b)) {
        pthread_mutex_unlock(&dc->mu);
        return;
    }
    pthread_mutex_unlock(&dc->mu);
    uint32_t crc = dcache_crc32c(0, src, len);
    bool wrote = gguf_pwrite_all(dc->data_fd, src, len, b * dc->block_bytes);
    pthread_mutex_lock(&dc->mu);
    struct blk *k = &dc->b[b];
    if (!wrote || !vec_push(&dc->pend, b)) {
        /* its bytes may be partly there: clear and punch at a flush */
        if (vec_push(&dc->evict, b)) {
            k->state = B_EVICTING;
        } else {
            k->state = B_ABSENT;
            own_add(dc, -(int64_t)blk_room(dc, b));
        }
        k->gen++;
        pthread_mutex_unlock(&dc->mu);
        return;
    }
    k->crc = crc;
    k->state = B_PENDING;
    dc->readable++;
    /* the flusher starts with the first write (not at open: a process that
     * daemonizes after opening keeps no thread across its fork) */
    if (!dc->flusher_on && !dc->sync_each && !dc->stop) {
        /* signals are for the thread running the FUSE loop: the flusher
         * takes none (whatever the mask of the thread that starts it) */
        if (ggfs_thread_start(&dc->flusher, flusher_main, dc) == 0)
            dc->flusher_on = true;
        else
            dc->sync_each = true;    /* no thread: sync here */
    }
    k->ref = 1;
    if (dc->pend.n == 1)
        clock_gettime(CLOCK_MONOTONIC, &dc->first_pending);
    bool now = dc->sync_each;
    if (!now && (dc->pend.n == 1 || dc->pend.n >= dc->batch))
        pthread_cond_broadcast(&dc->cond);
    pthread_mutex_unlock(&dc->mu);
    if (now)
        dcache_flush(dc);
}

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

/* ---- opening --------------------------------------------------------------------- */

/* mkdir -p: makes dir and the directories above it that are missing, each
 * with mode 0700 whatever the umask (a cache of someone's downloads is
 * theirs alone); those that exist are left as they are.  0, or an errno
 * with *at the length of the prefix of dir that could not be made. */
static int make_dirs(const char *dir, size_t *at)
{
    char *p = strdup(dir);
    if (!p)
        return ENOMEM;
    int e = 0;
    size_t n = strlen(p);
    for (size_t i = 1; i <= n && !e; i++) {
        if (i < n && (p[i] != '/' || p[i - 1] == '/'))
            continue;           /* not the end of a component */
        char c = p[i];
        p[i] = '\0';
        struct stat s;
        if (stat(p, &s) == 0) {
            if (!S_ISDIR(s.st_mode))
                e = ENOTDIR;
        } else if (errno != ENOENT) {
            e = errno;
        } else if (mkdir(p, 0700) == 0) {
            /* the umask may have taken bits of 0700 away */
            if (stat(p, &s) != 0 || ((s.st_mode & 07777) != 0700 && chmod(p, 0700) != 0))
                e = errno;
        } else if (errno != EEXIST) {   /* EEXIST: made by someone else meanwhile */
            e = errno;
        }
        if (e)
            *at = i;
        p[i] = c;
    }
    free(p);
    return e;
}

enum gguf_err dcache_check_dir(const char *dir, struct gguf_diag *diag)
{
    struct stat s;
    if (!dir || !*dir)
        return gguf_diag_set(diag, GGUF_E_INVAL, UINT64_MAX, "cache_dir: empty");
    size_t at = 0;
    int e = make_dirs(dir, &at);
    if (e == ENOMEM)
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    if (e && at < strlen(dir))
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %.*s: %s",
                             dir, (int)at, dir, strerror(e));
    if (e)
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %s", dir, strerror(e));
    if (stat(dir, &s) != 0)
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %s", dir,
                             strerror(errno));
    if (!S_ISDIR(s.st_mode))
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %s", dir,
                             strerror(ENOTDIR));
    if (access(dir, R_OK | W_OK | X_OK) != 0)
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %s", dir,
                             strerror(errno));
    return GGUF_OK;
}

static void dc_free(struct dcache *dc)
{
    if (dc->group) {
        pthread_mutex_lock(&dc->mu);
        own_add(dc, -(int64_t)dc->own);
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

/* The header this cache would write. */
static void make_header(const struct dcache *dc, const char *identity, uint8_t *h)
{
    size_t idlen = strlen(identity);
    memset(h, 0, HDR_SIZE);
    memcpy(h + H_MAGIC, MAGIC, 8);
    gguf_wr32(&dc_le, h + H_VERSION, VERSION);
    gguf_wr32(&dc_le, h + H_HDRSIZE, HDR_SIZE);
    gguf_wr64(&dc_le, h + H_SIZE, dc->size);
    gguf_wr32(&dc_le, h + H_BLOCK, dc->block_bytes);
    gguf_wr32(&dc_le, h + H_IDLEN, (uint32_t)idlen);
    gguf_wr64(&dc_le, h + H_NBLOCKS, dc->nblocks);
    memcpy(h + H_ID, identity, idlen);
    gguf_wr32(&dc_le, h + H_CRC, dcache_crc32c(0, h, HDR_SIZE));
}

/* Empties both files and writes a new header: every entry "not stored". */
static int rebuild(struct dcache *dc, const uint8_t *hdr)
{
    /* data first: no byte of the old data survives under the new map */
    if (ftruncate(dc->data_fd, 0) != 0 || ftruncate(dc->map_fd, 0) != 0 ||
        fsync(dc->data_fd) != 0 || fsync(dc->map_fd) != 0)
        return errno;
    if (ftruncate(dc->map_fd, (off_t)(HDR_SIZE + dc->nblocks * ENTRY_SIZE)) != 0)
        return errno;
    if (!gguf_pwrite_all(dc->map_fd, hdr, HDR_SIZE, 0))
        return errno;
    if (ftruncate(dc->data_fd, (off_t)dc->size) != 0 || fsync(dc->data_fd) != 0 ||
        fsync(dc->map_fd) != 0)
        return errno;
    return 0;
}

/* Loads the entries of a valid map; invalid entries are cleared (synced);
 * space under blocks not stored is given back.  0 or an errno. */
static int load(struct dcache *dc)
{
    size_t n = (size_t)dc->nblocks * ENTRY_SIZE, chunk = 1 << 16;
    uint8_t *buf = malloc(chunk);
    if (!buf)
        return ENOMEM;
    bool cleared = false;
    int err = 0;
    for (size_t off = 0; off < n && !err; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        if (!gguf_pread_all(dc->map_fd, buf, len, HDR_SIZE + off))
            err = errno;
        for (size_t i = 0; i < len && !err; i += ENTRY_SIZE) {
            uint64_t b = (off + i) / ENTRY_SIZE;
            uint32_t crc = gguf_rd32(&dc_le, buf + i), chk = gguf_rd32(&dc_le, buf + i + 4);
            if (chk == entry_check(b, crc, (uint32_t)dcache_block_len(dc, b))) {
                dc->b[b].state = B_PRESENT;
                dc->readable++;
                dc->b[b].crc = crc;
                own_add(dc, (int64_t)blk_room(dc, b));
            } else if (crc || chk) {
                err = write_entry(dc, b, 0, false);
                cleared = true;
            }
        }
    }
    free(buf);
    if (!err && cleared && fdatasync(dc->map_fd) != 0)
        err = errno;
    if (err)
        return err;
    /* data under blocks not stored: written before a crash, or cleared and
     * not punched yet */
    off_t pos = 0;
    while (pos < (off_t)dc->size) {
        off_t d = lseek(dc->data_fd, pos, SEEK_DATA);
        if (d < 0)
            break;
        off_t h = lseek(dc->data_fd, d, SEEK_HOLE);
        if (h < 0)
            h = (off_t)dc->size;
        for (uint64_t b = (uint64_t)d / dc->block_bytes;
             b < dc->nblocks && b * dc->block_bytes < (uint64_t)h; b++)
            if (dc->b[b].state == B_ABSENT)
                punch(dc->data_fd, b * dc->block_bytes, blk_room(dc, b));
        pos = h > d ? h : d + 1;
    }
    return 0;
}

enum gguf_err dcache_open(const char *dir, const char *identity, uint64_t size,
                          uint32_t block_bytes, uint64_t max_bytes, struct dcache **out,
                          struct gguf_diag *diag)
{
    return dcache_open_in(NULL, dir, identity, size, block_bytes, max_bytes, out, diag);
}

enum gguf_err dcache_open_in(struct dcache_group *group, const char *dir, const char *identity,
                             uint64_t size, uint32_t block_bytes, uint64_t max_bytes,
                             struct dcache **out, struct gguf_diag *diag)
{
    *out = NULL;
    if (!dir || !identity || block_bytes == 0 || block_bytes % PAGE || block_bytes > (1u << 30))
        return gguf_diag_set(diag, GGUF_E_INVAL, UINT64_MAX,
                             "disk cache: bad arguments (block size %" PRIu32 ")", block_bytes);
    if (strlen(identity) > DCACHE_MAX_IDENTITY)
        return gguf_diag_set(diag, GGUF_E_RANGE, UINT64_MAX,
                             "disk cache: identity longer than %u bytes", DCACHE_MAX_IDENTITY);
    uint64_t nblocks = size / block_bytes + (size % block_bytes != 0);
    if (nblocks > DCACHE_MAX_BLOCKS || size > (uint64_t)INT64_MAX)
        return gguf_diag_set(diag, GGUF_E_RANGE, UINT64_MAX,
                             "disk cache: %" PRIu64 " bytes is more than %u blocks of %" PRIu32,
                             size, DCACHE_MAX_BLOCKS, block_bytes);
    /* the map, and the file system's blocks that map a fragmented data file
     * (ext4's extent tree, XFS's bmap btree: they count in st_blocks), a
     * page per 256 blocks */
    uint64_t map_bytes = (HDR_SIZE + nblocks * ENTRY_SIZE + PAGE - 1) / PAGE * PAGE +
                         (nblocks / 256 + 1) * PAGE;
    if (max_bytes < map_bytes + block_bytes)
        return gguf_diag_set(diag, GGUF_E_RANGE, UINT64_MAX,
                             "disk cache: cache_max %" PRIu64 " is less than the map "
                             "(%" PRIu64 " bytes) and one block", max_bytes, map_bytes);
    struct dcache *dc = calloc(1, sizeof *dc);
    if (!dc)
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    dc->map_fd = dc->data_fd = -1;
    pthread_mutex_init(&dc->mu, NULL);
    pthread_mutex_init(&dc->flush_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&dc->cond, &ca);
    pthread_cond_init(&dc->checked, NULL);
    pthread_cond_init(&dc->cwork, NULL);
    pthread_condattr_destroy(&ca);
    dc->size = size;
    dc->nblocks = nblocks;
    dc->block_bytes = block_bytes;
    dc->max_bytes = max_bytes;
    dc->map_bytes = map_bytes;
    dc->dir = strdup(dir);
    dc->b = calloc(nblocks ? nblocks : 1, sizeof *dc->b);
    uint8_t *hdr = malloc(2 * HDR_SIZE);
    if (!dc->dir || !dc->b || !hdr) {
        free(hdr);
        dc_free(dc);
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    dcache_set_batch(dc, 0);
    dcache_file_base(identity, size, dc->base, sizeof dc->base);
    dc->group = group;
    if (group) {
        pthread_mutex_lock(&group->mu);
        if (group->n == group->cap) {
            size_t cap = group->cap ? 2 * group->cap : 8;
            char (*nb)[24] = realloc(group->bases, cap * sizeof *nb);
            if (nb) {
                group->bases = nb;
                group->cap = cap;
            }
        }
        if (group->n < group->cap) {
            memcpy(group->bases[group->n++], dc->base, sizeof dc->base);
            dc->in_group = true;
        }
        pthread_mutex_unlock(&group->mu);
        if (!dc->in_group) {
            free(hdr);
            dc_free(dc);
            return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
        }
    }
    pthread_mutex_lock(&dc->mu);
    own_add(dc, (int64_t)map_bytes);
    pthread_mutex_unlock(&dc->mu);
    char map_path[4096], data_path[4096];
    if ((size_t)snprintf(map_path, sizeof map_path, "%s/%s.map", dir, dc->base) >=
        sizeof map_path) {
        free(hdr);
        dc_free(dc);
        return gguf_diag_set(diag, GGUF_E_INVAL, UINT64_MAX, "cache_dir: path too long");
    }
    snprintf(data_path, sizeof data_path, "%s/%s.data", dir, dc->base);
    enum gguf_err ge = GGUF_OK;
    const char *what = map_path;
    int err = 0;
    /* the lock is the map's: after taking it, make sure the file is still
     * the one at that name (a process removing it to make room holds the
     * lock while it unlinks) */
    for (int tries = 0;; tries++) {
        dc->map_fd = open(map_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (dc->map_fd < 0) {
            err = errno;
            goto fail;
        }
        if (flock(dc->map_fd, LOCK_EX | LOCK_NB) != 0) {
            err = errno;
            if (err == EWOULDBLOCK) {
                ge = GGUF_E_EXIST;
                goto fail;
            }
            goto fail;
        }
        struct stat a, b;
        if (fstat(dc->map_fd, &a) != 0) {
            err = errno;
            goto fail;
        }
        if (stat(map_path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
            if (!S_ISREG(a.st_mode)) {
                err = EINVAL;
                goto fail;
            }
            break;
        }
        close(dc->map_fd);
        dc->map_fd = -1;
        if (tries == 3) {
            err = EAGAIN;
            goto fail;
        }
    }
    what = data_path;
    dc->data_fd = open(data_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (dc->data_fd < 0) {
        err = errno;
        goto fail;
    }
    struct stat ms, ds;
    if (fstat(dc->map_fd, &ms) != 0 || fstat(dc->data_fd, &ds) != 0) {
        err = errno;
        goto fail;
    }
    if (!S_ISREG(ds.st_mode)) {
        err = EINVAL;
        goto fail;
    }
    /* eviction punches holes: a file system that cannot would let the
     * files outgrow the bound (a no-op punch past the end tells) */
    if (fallocate(dc->data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)((ds.st_size + PAGE) / PAGE * PAGE), PAGE) != 0) {
        err = errno;
        what = data_path;
        goto fail;
    }
    /* valid only if every word is what this cache would have written */
    uint8_t *want = hdr, *have = hdr + HDR_SIZE;
    make_header(dc, identity, want);
    bool valid = (uint64_t)ms.st_size == HDR_SIZE + nblocks * ENTRY_SIZE &&
                 (uint64_t)ds.st_size == size &&
                 gguf_pread_all(dc->map_fd, have, HDR_SIZE, 0) &&
                 memcmp(want, have, HDR_SIZE) == 0;
    what = map_path;
    if (valid) {
        err = load(dc);
    } else {
        dc->st.reset = true;
        err = rebuild(dc, want);
    }
    if (err)
        goto fail;
    /* recency: this model was used now */
    futimens(dc->map_fd, NULL);
    size_t n;
    uint64_t total;
    free(scan_others(dc, &n, &total));
    dc->others = total;
    free(hdr);
    *out = dc;
    return GGUF_OK;
fail:
    free(hdr);
    dc_free(dc);
    if (ge == GGUF_E_EXIST)
        return gguf_diag_set(diag, ge, UINT64_MAX, "%s: in use by another process", map_path);
    return gguf_diag_set(diag, err == ENOMEM ? GGUF_E_NOMEM : GGUF_E_IO, UINT64_MAX, "%s: %s",
                         what, strerror(err));
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

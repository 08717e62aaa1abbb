/* cache/dcache_table.c — the disk cache's block table (cache/dcache_impl.h):
 * the entries on disk, dcache_read and dcache_write, and the batched flush
 * with its thread (see diskcache.h, "Crash-safe" and "Batched"). */
#include "dcache_impl.h"
#include "thread.h"
#include "gguf/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PENDING_BATCHES 4u

bool dc_vec_push(struct vec *v, uint64_t x)
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

/* Bytes a block takes on disk, as counted. */
uint64_t dc_blk_room(const struct dcache *dc, uint64_t b)
{
    return ((uint64_t)dcache_block_len(dc, b) + PAGE - 1) / PAGE * PAGE;
}

/* The check of an entry: never 0 (the top bit is set), so that a zeroed
 * entry means "not stored". */
uint32_t dc_entry_check(uint64_t b, uint32_t crc, uint32_t len)
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

int dc_write_entry(struct dcache *dc, uint64_t b, uint32_t crc, bool present)
{
    uint8_t e[ENTRY_SIZE] = { 0 };
    if (present) {
        gguf_wr32(&dc_le, e, crc);
        gguf_wr32(&dc_le, e + 4, dc_entry_check(b, crc, (uint32_t)dcache_block_len(dc, b)));
    }
    return gguf_pwrite_all(dc->map_fd, e, sizeof e, HDR_SIZE + b * ENTRY_SIZE) ? 0 : errno;
}

void dc_punch(int fd, uint64_t off, uint64_t len)
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
void dc_flush_locked(struct dcache *dc)
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
        map_ok = dc_write_entry(dc, e.v[i], 0, false) == 0;
        wrote = true;
    }
    if (data_ok) {
        for (size_t i = 0; i < p.n && map_ok; i++) {
            uint64_t b = p.v[i];
            pthread_mutex_lock(&dc->mu);
            uint32_t crc = dc->b[b].crc;
            pthread_mutex_unlock(&dc->mu);
            map_ok = dc_write_entry(dc, b, crc, true) == 0;
            wrote = true;
        }
    }
    if (wrote && map_ok)
        map_ok = do_sync(dc, dc->map_fd) == 0;
    /* the clearing entries are durable: the holes may be punched */
    if (map_ok)
        for (size_t i = 0; i < e.n; i++)
            dc_punch(dc->data_fd, e.v[i] * dc->block_bytes, dc_blk_room(dc, e.v[i]));
    /* blocks whose bytes did not sync have no entry on disk: their space
     * goes at once */
    if (!data_ok)
        for (size_t i = 0; i < p.n; i++)
            dc_punch(dc->data_fd, p.v[i] * dc->block_bytes, dc_blk_room(dc, p.v[i]));
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
            dc_own_add(dc, -(int64_t)dc_blk_room(dc, p.v[i]));
        }
    }
    for (size_t i = 0; i < e.n; i++) {
        dc->b[e.v[i]].state = B_ABSENT;
        dc_own_add(dc, -(int64_t)dc_blk_room(dc, e.v[i]));
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
    dc_flush_locked(dc);
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

/* ---- read and write ------------------------------------------------------------ */

bool dcache_read(struct dcache *dc, uint64_t b, void *dst, size_t len)
{
    pthread_mutex_lock(&dc->mu);
    if (b >= dc->nblocks || len != dcache_block_len(dc, b) || dc->broken ||
        !dc_readable(dc->b[b].state)) {
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
        dc_reject(dc, b, gen);
    }
    pthread_mutex_unlock(&dc->mu);
    return ok;
}

/* Block b's bytes did not check (read when its generation was gen): if it
 * is still that block, it is dropped (cleared and punched by the flusher);
 * evicted meanwhile, it was a plain miss.  mu held. */
void dc_reject(struct dcache *dc, uint64_t b, uint32_t gen)
{
    struct blk *k = &dc->b[b];
    /* (a block in the flush under way is rejected at a later read) */
    if (k->gen != gen || !dc_readable(k->state) || k->state == B_FLUSHING)
        return;
    if (k->state == B_PENDING)
        for (size_t i = 0; i < dc->pend.n; i++)
            if (dc->pend.v[i] == b) {
                dc->pend.v[i] = dc->pend.v[--dc->pend.n];
                break;
            }
    if (dc_vec_push(&dc->evict, b)) {
        k->state = B_EVICTING;
        dc->readable--;
        k->gen++;
        dc->st.rejected++;
        pthread_cond_broadcast(&dc->cond);
    }
}

void dcache_write(struct dcache *dc, uint64_t b, const void *src, size_t len)
{
    if (b >= dc->nblocks || len != dcache_block_len(dc, b))
        return;
    pthread_mutex_lock(&dc->mu);
    /* back-pressure: at most PENDING_BATCHES batches wait */
    while (!dc->broken && dc->pend.n >= (size_t)PENDING_BATCHES * dc->batch)
        pthread_cond_wait(&dc->cond, &dc->mu);
    if (!dc_claim(dc, b)) {
        pthread_mutex_unlock(&dc->mu);
        return;
    }
    pthread_mutex_unlock(&dc->mu);
    uint32_t crc = dcache_crc32c(0, src, len);
    bool wrote = gguf_pwrite_all(dc->data_fd, src, len, b * dc->block_bytes);
    pthread_mutex_lock(&dc->mu);
    struct blk *k = &dc->b[b];
    if (!wrote || !dc_vec_push(&dc->pend, b)) {
        /* its bytes may be partly there: clear and punch at a flush */
        if (dc_vec_push(&dc->evict, b)) {
            k->state = B_EVICTING;
        } else {
            k->state = B_ABSENT;
            dc_own_add(dc, -(int64_t)dc_blk_room(dc, b));
        }
        k->gen++;
        pthread_mutex_unlock(&dc->mu);
        return;
    }
    k->crc = crc;
    k->state = B_PENDING;
    dc->readable++;
    dc->st.written++;
    /* the flusher starts with the first write (not at open: a process that
     * daemonizes after opening keeps no thread across its fork) */
    if (!dc->flusher_on && !dc->sync_each && !dc->stop) {
        /* signals are for the thread running the FUSE loop: the flusher
         * takes none (whatever the mask of the thread that starts it) */
        if (cache_thread_start(&dc->flusher, flusher_main, dc) == 0)
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

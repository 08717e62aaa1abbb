/* cache/dcache_check.c — replies spliced from the data file: dcache_hold and
 * dcache_release, the check of a block's bytes on disk at its first hold,
 * and the checks ahead with their thread (see diskcache.h, dcache_hold and
 * dcache_check_ahead). */
#include "dcache_impl.h"
#include "thread.h"
#include "gguf/journal.h"

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
        dc_reject(dc, b, gen);
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
        dc->checker_on = cache_thread_start(&dc->checker, checker_main, dc) == 0;
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

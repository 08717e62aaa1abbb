/*
 * tests/tools/dcache_crash.c — the disk cache (cache/diskcache.h) killed at
 * random points, for tests/integration/test_dcache_crash.py
 * (scripts/dcache-crash-test runs many trials by hand).
 *
 *   dcache_crash write DIR SEED
 *       opens the cache of a fixed object (BLOCKS blocks of 64 KiB and a
 *       short one, the bound BOUND_BLOCKS blocks: evictions all the time),
 *       with a batch size picked by SEED (1: a sync per block, 2, 4, the
 *       default), and writes blocks in an order picked by SEED from two
 *       threads, reading some back, flushing now and then; prints "w" and
 *       a newline after each write (the test kills it with SIGKILL after a
 *       number of lines it picks).  Exits 0 after 100000 writes, 3 if a
 *       read returned wrong bytes.
 *   dcache_crash power DIR SEED
 *       the same, but a power cut is simulated instead of a kill: the
 *       cache's pwrite, fallocate and fdatasync are wrapped (-Wl,--wrap) and
 *       logged; at a point picked by SEED (the Nth of those calls) every
 *       write or hole punch not yet made durable by an fdatasync of its file
 *       is undone or kept, each at random (undone newest first, from the
 *       bytes saved before it), as a power cut may lose any of them, and the
 *       process kills itself (SIGKILL).  Unlike a kill, this loses unsynced
 *       bytes: a block marked before its bytes were synced, or a hole
 *       punched before its entry was cleared for good, shows as rejected.
 *   dcache_crash verify DIR
 *       opens the same cache and reads every block: prints
 *       "present N bad N rejected N allocated N max N reset N" and exits 0
 *       if no block read returned bytes other than its own, none was
 *       rejected (a marked block whose bytes were not durable first would
 *       be), and the files take at most the bound; 1 otherwise.
 *
 * A block's bytes depend on its number only, so every process agrees on
 * what is right.
 */
#include "cache/diskcache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BS (64u << 10)
#define BLOCKS 64u
#define SIZE ((uint64_t)BLOCKS * BS + 4321)
#define NB (BLOCKS + 1)
#define BOUND_BLOCKS 24u
#define ID "etag:\"dcache-crash-test\""
#define WRITES 100000

static char *dir;
static uint64_t max_bytes;

/* ---- the simulated power cut ---------------------------------------------- */

ssize_t __real_pwrite64(int fd, const void *buf, size_t n, off_t off);
int __real_fallocate64(int fd, int mode, off_t off, off_t len);
int __real_fdatasync(int fd);
ssize_t __wrap_pwrite64(int fd, const void *buf, size_t n, off_t off);
int __wrap_fallocate64(int fd, int mode, off_t off, off_t len);
int __wrap_fdatasync(int fd);

struct undo {
    int fd;
    off_t off, old_size;
    size_t len;
    uint8_t *old;
};

static pthread_mutex_t power_mu = PTHREAD_MUTEX_INITIALIZER;
static bool power_on;
static uint64_t power_ops, power_at, power_rng;
static struct undo *undos;
static size_t n_undos, cap_undos;
static unsigned lost, kept;

static uint64_t rnd(void)
{
    power_rng ^= power_rng << 13;
    power_rng ^= power_rng >> 7;
    power_rng ^= power_rng << 17;
    return power_rng;
}

/* Every write not synced: undone (newest first) or kept, at random; then
 * the process dies.  power_mu held. */
static void power_cut(void)
{
    for (size_t i = n_undos; i-- > 0;) {
        struct undo *u = &undos[i];
        if (rnd() % 2) {
            kept++;
            continue;
        }
        lost++;
        __real_pwrite64(u->fd, u->old, u->len, u->off);
        struct stat st;
        if (fstat(u->fd, &st) == 0 && st.st_size > u->old_size)
            (void)ftruncate(u->fd, u->old_size);
    }
    fprintf(stderr, "power cut after %llu calls: %u unsynced writes lost, %u kept\n",
            (unsigned long long)power_ops, lost, kept);
    kill(getpid(), SIGKILL);
    pause();
}

/* Saves what [off, off+len) of fd holds before a write; counts the call,
 * and cuts the power at the chosen one.  power_mu held. */
static void before_write(int fd, off_t off, size_t len)
{
    if (++power_ops == power_at)
        power_cut();
    struct stat st;
    if (fstat(fd, &st) != 0)
        abort();
    if (n_undos == cap_undos) {
        cap_undos = cap_undos ? 2 * cap_undos : 256;
        undos = realloc(undos, cap_undos * sizeof *undos);
        if (!undos)
            abort();
    }
    struct undo *u = &undos[n_undos++];
    u->fd = fd;
    u->off = off;
    u->len = len;
    u->old_size = st.st_size;
    u->old = calloc(1, len ? len : 1);
    if (!u->old)
        abort();
    ssize_t r = pread(fd, u->old, len, off);
    (void)r;              /* past the end: zeros, and the size restored */
}

ssize_t __wrap_pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    if (!power_on)
        return __real_pwrite64(fd, buf, n, off);
    pthread_mutex_lock(&power_mu);
    before_write(fd, off, n);
    ssize_t r = __real_pwrite64(fd, buf, n, off);
    pthread_mutex_unlock(&power_mu);
    return r;
}

int __wrap_fallocate64(int fd, int mode, off_t off, off_t len)
{
    if (!power_on)
        return __real_fallocate64(fd, mode, off, len);
    pthread_mutex_lock(&power_mu);
    before_write(fd, off, (size_t)len);
    int r = __real_fallocate64(fd, mode, off, len);
    pthread_mutex_unlock(&power_mu);
    return r;
}

int __wrap_fdatasync(int fd)
{
    if (!power_on)
        return __real_fdatasync(fd);
    pthread_mutex_lock(&power_mu);
    if (++power_ops == power_at)
        power_cut();
    int r = __real_fdatasync(fd);
    /* what fd's writes did is durable now */
    size_t k = 0;
    for (size_t i = 0; i < n_undos; i++) {
        if (undos[i].fd == fd && r == 0)
            free(undos[i].old);
        else
            undos[k++] = undos[i];
    }
    n_undos = k;
    pthread_mutex_unlock(&power_mu);
    return r;
}

static uint8_t pat(uint64_t b, size_t i)
{
    uint32_t x = (uint32_t)(b * 2654435761u) ^ (uint32_t)(i * 40503u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    return (uint8_t)(x >> 15);
}

static size_t blen(uint64_t b)
{
    return b + 1 < NB ? BS : (size_t)(SIZE - (uint64_t)(NB - 1) * BS);
}

static struct dcache *open_cache(void)
{
    struct dcache *dc;
    struct gguf_diag d;
    enum gguf_err e = dcache_check_dir(dir, &d);
    if (!e)
        e = dcache_open(dir, ID, SIZE, BS, max_bytes, &dc, &d);
    if (e) {
        fprintf(stderr, "dcache_crash: %s\n", d.msg);
        exit(1);
    }
    return dc;
}

struct writer {
    struct dcache *dc;
    uint32_t x;
};

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    uint8_t *buf = malloc(BS), *got = malloc(BS);
    for (int n = 0; n < WRITES / 2; n++) {
        w->x ^= w->x << 13;
        w->x ^= w->x >> 17;
        w->x ^= w->x << 5;
        uint64_t b = w->x % NB;
        size_t len = blen(b);
        for (size_t i = 0; i < len; i++)
            buf[i] = pat(b, i);
        dcache_write(w->dc, b, buf, len);
        if ((w->x >> 9) % 4 == 0 && dcache_read(w->dc, b, got, len) && memcmp(got, buf, len)) {
            fprintf(stderr, "dcache_crash: block %llu read wrong bytes\n", (unsigned long long)b);
            exit(3);
        }
        if ((w->x >> 12) % (power_on ? 256 : 16) == 0)
            dcache_flush(w->dc);
        pthread_mutex_lock(&out_mu);
        fputs("w\n", stdout);
        fflush(stdout);
        pthread_mutex_unlock(&out_mu);
    }
    free(buf);
    free(got);
    return NULL;
}

static int do_write(unsigned seed, bool power)
{
    struct dcache *dc = open_cache();
    if (power) {
        /* the cut comes at one of the first 3000 calls after the open */
        power_rng = seed * 2654435761u + 12345;
        power_at = 1 + rnd() % 3000;
        power_on = true;
    }
    /* a power cut loses more with larger batches */
    static const unsigned batches[] = { 1, 2, 4, 0 }, power_batches[] = { 8, 16, 0, 0 };
    dcache_set_batch(dc, (power ? power_batches : batches)[seed % 4]);
    struct writer w[2] = { { dc, seed * 2654435761u | 1 }, { dc, seed * 40503u + 77 } };
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, writer_main, &w[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    dcache_close(dc);
    return 0;
}

static uint64_t allocated(const char *ext)
{
    char base[32], path[8192];
    dcache_file_base(ID, SIZE, base, sizeof base);
    snprintf(path, sizeof path, "%s/%s.%s", dir, base, ext);
    struct stat s;
    return stat(path, &s) == 0 ? (uint64_t)s.st_blocks * 512 : 0;
}

static int do_verify(void)
{
    struct dcache *dc = open_cache();
    uint8_t *got = malloc(BS);
    unsigned present = 0, bad = 0;
    for (uint64_t b = 0; b < NB; b++) {
        size_t len = blen(b);
        if (!dcache_read(dc, b, got, len))
            continue;
        present++;
        for (size_t i = 0; i < len; i++)
            if (got[i] != pat(b, i)) {
                bad++;
                break;
            }
    }
    free(got);
    struct dcache_stats s;
    dcache_get_stats(dc, &s);
    uint64_t alloc = allocated("map") + allocated("data");
    printf("present %u bad %u rejected %llu allocated %llu max %llu reset %d\n", present, bad,
           (unsigned long long)s.rejected, (unsigned long long)alloc,
           (unsigned long long)max_bytes, (int)s.reset);
    dcache_close(dc);
    return bad || s.rejected || alloc > max_bytes ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "verify") != 0 && argc < 4)) {
        fprintf(stderr, "usage: dcache_crash write|power DIR SEED | verify DIR\n");
        return 1;
    }
    dir = argv[2];
    /* the map (a page of header, a page of entries), a page of extent
     * tree, and BOUND_BLOCKS blocks */
    max_bytes = 3 * 4096 + (uint64_t)BOUND_BLOCKS * BS;
    if (strcmp(argv[1], "write") == 0 || strcmp(argv[1], "power") == 0)
        return do_write((unsigned)strtoul(argv[3], NULL, 10), strcmp(argv[1], "power") == 0);
    if (strcmp(argv[1], "verify") == 0)
        return do_verify();
    fprintf(stderr, "dcache_crash: %s: not write or verify\n", argv[1]);
    return 1;
}

/*
 * tests/tools/dcache_crash.c — the disk cache (fs/diskcache.h) killed at
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
#include "diskcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
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
        if ((w->x >> 12) % 16 == 0)
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

static int do_write(unsigned seed)
{
    struct dcache *dc = open_cache();
    static const unsigned batches[] = { 1, 2, 4, 0 };
    dcache_set_batch(dc, batches[seed % 4]);
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
    if (argc < 3 || (strcmp(argv[1], "write") == 0 && argc < 4)) {
        fprintf(stderr, "usage: dcache_crash write DIR SEED | verify DIR\n");
        return 1;
    }
    dir = argv[2];
    /* the map (a page of header, a page of entries), a page of extent
     * tree, and BOUND_BLOCKS blocks */
    max_bytes = 3 * 4096 + (uint64_t)BOUND_BLOCKS * BS;
    if (strcmp(argv[1], "write") == 0)
        return do_write((unsigned)strtoul(argv[3], NULL, 10));
    if (strcmp(argv[1], "verify") == 0)
        return do_verify();
    fprintf(stderr, "dcache_crash: %s: not write or verify\n", argv[1]);
    return 1;
}

/*
 * tests/bench/bench_dcache.c — the disk cache's (cache/diskcache.h) streaming
 * cost: writes an object of MB MiB in blocks of BLOCK KiB (default 4096)
 * into a new cache in DIR with THREADS writer threads, as a remote fill
 * would, then flushes; then reads every block back (CRC checked).
 * Printed, per batch setting given (1 = an fdatasync pair per block, 0 =
 * the default batching, N = every N blocks):
 *
 *   batch B: write MB/s (syncs S, flushes F), flush ms, read MB/s
 *
 * The page cache is dropped (posix_fadvise DONTNEED on the data file)
 * before the read pass when DROP=1 is set in the environment (a cold read
 * from the disk); otherwise the read is of cached pages.  Not a test:
 * numbers for doc/BENCHMARKS.md (scripts/bench or by hand).
 *
 *   bench_dcache DIR MB [BATCH...] [--block KIB] [--threads N]
 */
#include "cache/diskcache.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

struct job {
    struct dcache *dc;
    uint64_t first, step, n;
    uint32_t bs;
};

static void *writer(void *arg)
{
    struct job *j = arg;
    uint8_t *buf = malloc(j->bs);
    for (uint64_t b = j->first; b < j->n; b += j->step) {
        size_t len = dcache_block_len(j->dc, b);
        memset(buf, (int)(b * 37 + 1), len);
        buf[0] = (uint8_t)b;
        dcache_write(j->dc, b, buf, len);
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_dcache DIR MB [BATCH...] [--block KIB] [--threads N]\n");
        return 1;
    }
    const char *dir = argv[1];
    uint64_t mb = strtoull(argv[2], NULL, 10);
    uint32_t bs = 4u << 20;
    unsigned threads = 1;
    int batches[16], nb = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--block") == 0 && i + 1 < argc)
            bs = (uint32_t)strtoul(argv[++i], NULL, 10) << 10;
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (nb < 16)
            batches[nb++] = atoi(argv[i]);
    }
    if (!nb) {
        batches[nb++] = 1;
        batches[nb++] = 0;
    }
    if (threads < 1 || threads > 64)
        threads = 1;
    struct gguf_diag d;
    if (dcache_check_dir(dir, &d)) {
        fprintf(stderr, "bench_dcache: %s\n", d.msg);
        return 1;
    }
    uint64_t size = mb << 20;
    uint8_t *buf = malloc(bs);
    for (int k = 0; k < nb; k++) {
        char id[64];
        snprintf(id, sizeof id, "etag:\"bench-%d-%ld\"", k, (long)getpid());
        struct dcache *dc;
        if (dcache_open(dir, id, size, bs, size + (64u << 20), &dc, &d)) {
            fprintf(stderr, "bench_dcache: %s\n", d.msg);
            return 1;
        }
        dcache_set_batch(dc, (unsigned)batches[k]);
        uint64_t n = dcache_blocks(dc);
        double t0 = now();
        pthread_t t[64];
        struct job j[64];
        for (unsigned i = 0; i < threads; i++) {
            j[i] = (struct job){ dc, i, threads, n, bs };
            pthread_create(&t[i], NULL, writer, &j[i]);
        }
        for (unsigned i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
        double t1 = now();
        dcache_flush(dc);
        double t2 = now();
        struct dcache_stats s;
        dcache_get_stats(dc, &s);
        if (getenv("DROP") && strcmp(getenv("DROP"), "1") == 0) {
            char base[32], path[4096];
            dcache_file_base(id, size, base, sizeof base);
            snprintf(path, sizeof path, "%s/%s.data", dir, base);
            int fd = open(path, O_RDONLY);
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
        double t3 = now();
        uint64_t hits = 0;
        for (uint64_t b = 0; b < n; b++)
            hits += dcache_read(dc, b, buf, dcache_block_len(dc, b));
        double t4 = now();
        printf("batch %d: write %.0f MB/s (%llu blocks, syncs %llu, flushes %llu), "
               "final flush %.0f ms, write+flush %.0f MB/s; read %.0f MB/s (%llu/%llu hits)\n",
               batches[k], (double)mb / (t1 - t0), (unsigned long long)n,
               (unsigned long long)s.syncs, (unsigned long long)s.flushes, (t2 - t1) * 1e3,
               (double)mb / (t2 - t0), (double)mb / (t4 - t3), (unsigned long long)hits,
               (unsigned long long)n);
        fflush(stdout);
        /* remove it: the next setting starts from nothing */
        char base[32], path[4096];
        dcache_file_base(id, size, base, sizeof base);
        dcache_close(dc);
        snprintf(path, sizeof path, "%s/%s.data", dir, base);
        unlink(path);
        snprintf(path, sizeof path, "%s/%s.map", dir, base);
        unlink(path);
    }
    free(buf);
    return 0;
}

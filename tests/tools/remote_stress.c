/*
 * tests/tools/remote_stress.c — concurrent remote_read against a local copy
 * of the same file, for thread-safety runs (build with -Db_sanitize=thread
 * or address) against a test server.
 *
 *   remote_stress [--connections N] [--max-len BYTES] [--cacert F] URL FILE THREADS READS
 *
 * Opens URL (remote_open), checks its size against FILE, then THREADS
 * threads each make READS reads of random offsets and lengths (1 to
 * max-len, default 262144; some crossing the end of the file) and compare
 * every byte with FILE; another thread reads the stats and the last error
 * meanwhile.  Prints "ok: N reads, N bytes" and the stats line (as
 * remote_get does) and exits 0, or names the first difference or error and
 * exits 1.
 */
#include "remote/http.h"
#include "remote/url.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static struct remote *R;
static const unsigned char *local;
static uint64_t size;
static unsigned reads_each;
static size_t max_len = 262144;
static atomic_bool failed, done;
static atomic_ullong total_reads, total_bytes;

static uint64_t next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void *reader(void *arg)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull * ((uintptr_t)arg + 1);
    unsigned char *buf = malloc(max_len);
    if (!buf) {
        atomic_store(&failed, true);
        return NULL;
    }
    for (unsigned i = 0; i < reads_each && !atomic_load(&failed); i++) {
        uint64_t off = next(&seed) % (size + 1);
        size_t len = 1 + (size_t)(next(&seed) % max_len);
        if (next(&seed) % 8 == 0 && size > len)
            off = size - len / 2;                /* across the end */
        struct gguf_diag d;
        ssize_t r = remote_read_diag(R, buf, len, off, &d);
        size_t want = off >= size ? 0 : (len < size - off ? len : (size_t)(size - off));
        if (r < 0) {
            fprintf(stderr, "remote_stress: %s\n", d.msg);
            atomic_store(&failed, true);
        } else if ((size_t)r != want || memcmp(buf, local + off, want) != 0) {
            fprintf(stderr, "remote_stress: WRONG BYTES for %zu at %llu (got %zd)\n", len,
                    (unsigned long long)off, r);
            atomic_store(&failed, true);
        } else {
            atomic_fetch_add(&total_reads, 1);
            atomic_fetch_add(&total_bytes, want);
        }
    }
    free(buf);
    return NULL;
}

static void *watcher(void *arg)
{
    (void)arg;
    while (!atomic_load(&done)) {
        struct remote_stats st;
        struct gguf_diag d;
        remote_get_stats(R, &st);
        (void)remote_last_error(R, &d);
        (void)remote_changed(R);
        usleep(1000);
    }
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: remote_stress [--connections N] [--max-len BYTES] [--cacert F] "
                    "URL FILE THREADS READS\n");
    exit(2);
}

int main(int argc, char **argv)
{
    struct remote_opts o = { 0 };
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--connections") == 0)
            o.connections = (unsigned)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--max-len") == 0)
            max_len = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--cacert") == 0)
            o.ca_file = argv[i + 1];
        else
            usage();
    }
    if (argc - i != 4 || max_len == 0)
        usage();
    int threads = atoi(argv[i + 2]);
    reads_each = (unsigned)atoi(argv[i + 3]);
    if (threads < 1 || threads > 256)
        usage();
    int fd = open(argv[i + 1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        fprintf(stderr, "remote_stress: %s: %s\n", argv[i + 1], fd < 0 ? strerror(errno) : "empty");
        return 1;
    }
    local = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (local == MAP_FAILED) {
        perror("remote_stress: mmap");
        return 1;
    }
    struct gguf_diag d;
    char *url;
    if (remote_url_expand(argv[i], &url, &d) != GGUF_OK) {
        fprintf(stderr, "remote_stress: %s\n", d.msg);
        return 1;
    }
    o.url = url;
    if (remote_open(&o, &R, &d) != GGUF_OK) {
        fprintf(stderr, "remote_stress: %s\n", d.msg);
        free(url);
        return 1;
    }
    size = remote_size(R);
    if (size != (uint64_t)st.st_size) {
        fprintf(stderr, "remote_stress: remote size %llu, local %llu\n",
                (unsigned long long)size, (unsigned long long)st.st_size);
        remote_close(R);
        free(url);
        return 1;
    }
    pthread_t th[257];
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, reader, (void *)(uintptr_t)t);
    pthread_create(&th[threads], NULL, watcher, NULL);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    atomic_store(&done, true);
    pthread_join(th[threads], NULL);
    struct remote_stats s;
    remote_get_stats(R, &s);
    printf("%s: %llu reads, %llu bytes\n", atomic_load(&failed) ? "FAILED" : "ok",
           (unsigned long long)atomic_load(&total_reads),
           (unsigned long long)atomic_load(&total_bytes));
    printf("stats: requests=%llu bytes=%llu retries=%llu redirects=%llu\n",
           (unsigned long long)s.requests, (unsigned long long)s.bytes,
           (unsigned long long)s.retries, (unsigned long long)s.redirects);
    remote_close(R);
    free(url);
    return atomic_load(&failed) ? 1 : 0;
}

/*
 * tests/fuzz/fuzz_common.h — helpers shared by the libFuzzer harnesses.
 *
 * guarded_copy() places the input at the very end of a private mapping that
 * is followed by a PROT_NONE page, so that a read even one byte past the
 * input faults at once (AddressSanitizer alone would catch heap over-reads
 * too, but not reads that stay inside the libFuzzer's own input buffer's
 * redzone rounding, and this also works in a build without ASan).  The
 * pattern is libdeflate's scripts/libFuzzer alloc_guarded_buffer.
 *
 * CHECK() aborts with a message: libFuzzer reports an abort as a crash and
 * saves the input.  It is used for the invariants the harnesses assert
 * (never assert(), which NDEBUG would remove).
 */
#ifndef GGUFFS_FUZZ_COMMON_H
#define GGUFFS_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__,       \
                    __LINE__, #cond);                                         \
            fprintf(stderr, __VA_ARGS__);                                     \
            fputc('\n', stderr);                                              \
            abort();                                                          \
        }                                                                     \
    } while (0)

struct guarded {
    uint8_t *map;       /* whole mapping: data pages + guard page */
    size_t map_len;
    uint8_t *p;         /* the copy: p[0 .. len) ends at the guard page */
};

/* Copies len bytes to the end of fresh pages followed by a guard page. */
static inline struct guarded guarded_copy(const uint8_t *data, size_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (len + pg - 1) / pg;
    struct guarded g;
    g.map_len = (data_pages + 1) * pg;
    g.map = mmap(NULL, g.map_len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(g.map != MAP_FAILED, "mmap of %zu bytes failed", g.map_len);
    CHECK(mprotect(g.map + data_pages * pg, pg, PROT_NONE) == 0, "mprotect");
    g.p = g.map + data_pages * pg - len;
    if (len)
        memcpy(g.p, data, len);
    /* the input is read-only for the code under test */
    if (data_pages)
        CHECK(mprotect(g.map, data_pages * pg, PROT_READ) == 0, "mprotect");
    return g;
}

static inline void guarded_free(struct guarded *g)
{
    munmap(g->map, g->map_len);
}

/* A small deterministic generator (splitmix64) driven by fuzz bytes. */
static inline uint64_t fuzz_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif

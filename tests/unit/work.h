/*
 * tests/unit/work.h — counts work instead of timing it: a counting allocator
 * and counted comparisons, for tests linked with
 *   -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=memcmp,--wrap=bcmp
 * (see tests/unit/meson.build).  Include it in exactly one file of a test
 * executable.  A count does not depend on the machine's load, so a bound on
 * it ("8 x the input costs at most 10 x the work") cannot flake.
 *
 *   mem_live, mem_peak   bytes the program asked for and still holds / the
 *                        peak of that (reset mem_peak = mem_live to measure)
 *   mem_cap              requests above it fail (NULL); the largest is kept
 *                        in mem_refused
 *   work                 allocations, bytes asked for, bytes a realloc may
 *                        have moved, memcmp/bcmp calls (work_reset() zeroes)
 *   cmp_budget           more comparisons make the process _exit(42) with a
 *                        message: endless or quadratic probing stops at once
 */
#ifndef GGUFFS_TESTS_WORK_H
#define GGUFFS_TESTS_WORK_H

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* ---- a counting allocator (linked with -Wl,--wrap=malloc,...) ------------ */
/* and counted comparisons (-Wl,--wrap=memcmp,--wrap=bcmp) */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t m);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);
char *__real_realpath(const char *path, char *resolved);
char *__wrap_realpath(const char *path, char *resolved);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t max);
int __real_memcmp(const void *a, const void *b, size_t n);
int __wrap_memcmp(const void *a, const void *b, size_t n);
int __real_bcmp(const void *a, const void *b, size_t n);
int __wrap_bcmp(const void *a, const void *b, size_t n);

/* Work done, counted (never timed): calls that allocate, bytes asked for,
 * bytes a realloc may have moved, memcmp/bcmp calls.  work_reset() zeroes
 * them; a test reads them after the call it measures. */
struct work {
    uint64_t allocs, alloc_bytes, moved_bytes, cmps;
};
static struct work work;
/* More comparisons than this make the process say so and
 * _exit(CMP_BUDGET_EXIT): a parse that probes without end (a full name
 * table) or quadratically stops at once, deterministically, instead of
 * running into meson's timeout. */
static uint64_t cmp_budget = UINT64_MAX;
#define CMP_BUDGET_EXIT 42

static void work_reset(void) { memset(&work, 0, sizeof work); }

static void cmp_count(void)
{
    if (++work.cmps <= cmp_budget)
        return;
    static const char m[] = "\nFAIL: the comparison budget is spent (quadratic or "
                            "endless probing, e.g. of the parser's name table)\n";
    if (write(2, m, sizeof m - 1) < 0) {
        /* exiting anyway */
    }
    _exit(CMP_BUDGET_EXIT);
}

int __wrap_memcmp(const void *a, const void *b, size_t n)
{
    cmp_count();
    return __real_memcmp(a, b, n);
}

/* clang turns memcmp(...) == 0 into bcmp */
int __wrap_bcmp(const void *a, const void *b, size_t n)
{
    cmp_count();
    return __real_bcmp(a, b, n);
}

/* Every block carries a 16-byte header holding its size, so that free can
 * subtract it.  What the C library allocates itself for the program
 * (realpath, strdup, strndup: calls inside it are not wrapped) is made through
 * the wrappers too, by __wrap_realpath, __wrap_strdup and __wrap_strndup below (a block
 * of the C library's own could not be told from ours without reading
 * outside it).  live/peak count the bytes the program asked for.  The
 * counts are updated atomically: a test's threads (a queue's, freeing
 * what the test allocated) may allocate and free beside it. */
static size_t mem_live, mem_peak;
/* Requests above mem_cap fail (return NULL) and are remembered in
 * mem_refused: a test can see a huge request without making it. */
static size_t mem_cap = SIZE_MAX, mem_refused;
#define MEM_HDR 16

static void *mem_note(void *h, size_t n)
{
    if (!h)
        return NULL;
    memcpy(h, &n, sizeof n);
    __atomic_add_fetch(&work.allocs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&work.alloc_bytes, n, __ATOMIC_RELAXED);
    size_t live = __atomic_add_fetch(&mem_live, n, __ATOMIC_RELAXED);
    size_t peak = __atomic_load_n(&mem_peak, __ATOMIC_RELAXED);
    while (live > peak && !__atomic_compare_exchange_n(&mem_peak, &peak, live, true,
                                                       __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    return (char *)h + MEM_HDR;
}

static bool mem_over(size_t n)
{
    if (n <= __atomic_load_n(&mem_cap, __ATOMIC_RELAXED))
        return false;
    size_t r = __atomic_load_n(&mem_refused, __ATOMIC_RELAXED);
    while (n > r && !__atomic_compare_exchange_n(&mem_refused, &r, n, true, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED))
        ;
    return true;
}

void *__wrap_malloc(size_t n)
{
    if (n > SIZE_MAX - MEM_HDR || mem_over(n))
        return NULL;
    return mem_note(__real_malloc(n + MEM_HDR), n);
}

void *__wrap_calloc(size_t n, size_t m)
{
    if ((m && n > (SIZE_MAX - MEM_HDR) / m) || mem_over(n * m))
        return NULL;
    return mem_note(__real_calloc(1, n * m + MEM_HDR), n * m);
}

void __wrap_free(void *p)
{
    if (!p)
        return;
    char *h = (char *)p - MEM_HDR;
    size_t n;
    memcpy(&n, h, sizeof n);
    __atomic_sub_fetch(&mem_live, n, __ATOMIC_RELAXED);
    __real_free(h);
}

void *__wrap_realloc(void *p, size_t n)
{
    if (!p)
        return __wrap_malloc(n);
    if (n > SIZE_MAX - MEM_HDR || mem_over(n))
        return NULL;
    char *h = (char *)p - MEM_HDR;
    size_t old;
    memcpy(&old, h, sizeof old);
    char *nh = __real_realloc(h, n + MEM_HDR);
    if (!nh)
        return NULL;
    __atomic_sub_fetch(&mem_live, old, __ATOMIC_RELAXED);
    __atomic_add_fetch(&work.moved_bytes, old < n ? old : n, __ATOMIC_RELAXED);
    return mem_note(nh, n);
}

/* realpath(path, NULL), strdup and strndup: the C library's blocks, copied into
 * the wrappers' own (and so counted, and refused above mem_cap). */
char *__wrap_realpath(const char *path, char *resolved)
{
    if (resolved)
        return __real_realpath(path, resolved);
    char buf[PATH_MAX];
    if (!__real_realpath(path, buf))
        return NULL;
    return __wrap_strdup(buf);
}

char *__wrap_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = __wrap_malloc(n);
    if (!d) {
        errno = ENOMEM;
        return NULL;
    }
    return memcpy(d, s, n);
}

char *__wrap_strndup(const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    char *d = __wrap_malloc(n + 1);
    if (!d) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

#endif

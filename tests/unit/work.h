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

#include <stdbool.h>
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
 * subtract it, and a mark: memory the C library allocated for itself
 * (realpath, strdup: calls inside it are not wrapped) has none, and is
 * freed or reallocated as it is, uncounted.  live/peak count the bytes the program asked for.  The
 * counts are updated atomically: a test's threads (a queue's, freeing
 * what the test allocated) may allocate and free beside it. */
static size_t mem_live, mem_peak;
/* Requests above mem_cap fail (return NULL) and are remembered in
 * mem_refused: a test can see a huge request without making it. */
static size_t mem_cap = SIZE_MAX, mem_refused;
#define MEM_HDR 16
#define MEM_MARK 0x6767756666736d6bull

/* p was allocated by the wrappers (its header carries the mark). */
static bool mem_ours(const void *p)
{
    uint64_t m;
    memcpy(&m, (const char *)p - MEM_HDR + 8, sizeof m);
    return m == MEM_MARK;
}

static void *mem_note(void *h, size_t n)
{
    if (!h)
        return NULL;
    memcpy(h, &n, sizeof n);
    uint64_t mark = MEM_MARK;
    memcpy((char *)h + 8, &mark, sizeof mark);
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
    if (!mem_ours(p)) {
        __real_free(p);
        return;
    }
    char *h = (char *)p - MEM_HDR;
    size_t n;
    memcpy(&n, h, sizeof n);
    memset(h + 8, 0, 8);
    __atomic_sub_fetch(&mem_live, n, __ATOMIC_RELAXED);
    __real_free(h);
}

void *__wrap_realloc(void *p, size_t n)
{
    if (!p)
        return __wrap_malloc(n);
    if (n > SIZE_MAX - MEM_HDR || mem_over(n))
        return NULL;
    if (!mem_ours(p))
        return __real_realloc(p, n);
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

#endif

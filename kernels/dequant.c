/*
 * kernels/dequant.c — picks, once, the fastest kernel of each type.
 *
 * The dispatch table starts as the scalar reference, so kern_dequant works
 * even before kern_dequant_init.  Init asks the CPU (CPUID, and XGETBV for
 * whether the OS saves the wide registers) which ISA levels it has, and
 * lays each level's kernels over the table in increasing order: a level
 * only has to provide the types it makes faster.
 *
 * Built twice (kernels/meson.build): for gguffs, where the CPU alone
 * decides, and for the tests, with KERN_TEST_SUPPORT defined (libdeflate's
 * TEST_SUPPORT pattern).  Only the test build honours
 * GGFS_DISABLE_CPU_FEATURES=avx512,avx2 (comma-separated, or "all"; cpu.c), which
 * turns levels off, and has the per-level API of dequant_impl.h: so one
 * machine can test every variant, and no environment variable changes
 * what gguffs runs.
 */
#include "dequant.h"
#include "dequant_impl.h"
#include "cpu.h"

#include <stdlib.h>

/* One ISA level above the scalar reference. */
struct level {
    const char *name;               /* the CPU feature it needs (cpu.h) */
    void (*fill)(kern_dequant_fn fn[GGML_T_COUNT]);
};


/* In increasing order; each level is assumed to imply the ones before. */
static const struct level levels[] = {
#if defined(__x86_64__) || defined(__i386__)
    {"avx2", kern_avx2_fill},
    {"avx512", kern_avx512_fill},
#endif
    {NULL, NULL} /* sentinel: keeps the array non-empty everywhere */
};
enum { N_LEVELS = sizeof levels / sizeof levels[0] - 1 };

/* The chosen table and the name of its level (see the top comment). */
static kern_dequant_fn table[GGML_T_COUNT];
static bool table_ready;
static const char *table_level = "scalar";

/* Levels usable here, as indices into levels[] (computed by init). */
static int usable[N_LEVELS + 1];
static int n_usable = -1;

static void find_levels(void)
{
    int n = 0;
    for (int i = 0; i < (int)N_LEVELS; i++)
        if (kern_cpu_has(levels[i].name))
            usable[n++] = i;
    n_usable = n;
}

/* Fills fn with the table of level (0 = scalar; k = the k-th usable). */
static void build(int level, kern_dequant_fn fn[GGML_T_COUNT])
{
    for (uint32_t t = 0; t < GGML_T_COUNT; t++)
        fn[t] = kern_ref_kernel(t);
    for (int k = 0; k < level && k < n_usable; k++)
        levels[usable[k]].fill(fn);
}

const char *kern_dequant_init(void)
{
    if (!table_ready) {
        find_levels();
        build(n_usable, table);
        if (n_usable > 0)
            table_level = levels[usable[n_usable - 1]].name;
        table_ready = true;
    }
    return table_level;
}

const char *kern_dequant_level(void)
{
    return table_level;
}

bool kern_dequant_supported(uint32_t type)
{
    return kern_ref_kernel(type) != NULL;
}

void kern_dequant(uint32_t type, const void *src, float *dst, size_t n_blocks)
{
    kern_dequant_fn fn = table_ready ? table[type] : kern_ref_kernel(type);
    fn(src, dst, n_blocks);
}

#ifdef KERN_TEST_SUPPORT
/* ---- per-level access for tests and benchmarks ---- */

int kern_dequant_level_count(void)
{
    if (n_usable < 0)
        find_levels();
    return n_usable + 1;
}

const char *kern_dequant_level_name(int level)
{
    if (level <= 0 || level > kern_dequant_level_count() - 1)
        return "scalar";
    return levels[usable[level - 1]].name;
}

void kern_dequant_level_run(int level, uint32_t type, const void *src,
                            float *dst, size_t n_blocks)
{
    /* Rebuilding the whole table per call is cheap next to any real
     * amount of dequantization, and keeps this free of shared state. */
    kern_dequant_fn fn[GGML_T_COUNT];
    if (n_usable < 0)
        find_levels();
    build(level, fn);
    fn[type](src, dst, n_blocks);
}

bool kern_dequant_level_has_own(int level, uint32_t type)
{
    kern_dequant_fn below[GGML_T_COUNT], here[GGML_T_COUNT];
    if (level <= 0)
        return kern_ref_kernel(type) != NULL;
    if (n_usable < 0)
        find_levels();
    build(level - 1, below);
    build(level, here);
    return here[type] != below[type];
}
#endif

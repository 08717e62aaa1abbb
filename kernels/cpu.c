/* kernels/cpu.c — the CPU's features and GGFS_DISABLE_CPU_FEATURES (see
 * cpu.h). */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XCR0: which register states the OS saves across context switches. */
static unsigned xcr0(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return lo;
}

/* EBX of CPUID leaf 7 (sub-leaf 0): AVX2 and the AVX-512 subsets. */
static unsigned cpuid7_ebx(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) ? b : 0;
}

/* ECX of CPUID leaf 1. */
static unsigned cpuid1_ecx(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) ? c : 0;
}

/* SSE4.2 (leaf 1, ECX bit 20): the crc32 instruction.  No OS support is
 * needed beyond what any x86 OS gives (no new registers). */
static bool has_sse42(void)
{
    return cpuid1_ecx() & (1u << 20);
}

/* AVX2 kernels need AVX2 and F16C from the CPU, and the OS must save the
 * YMM registers (OSXSAVE, and XCR0 bits 1-2).  Asked of CPUID directly:
 * not every compiler's __builtin_cpu_supports knows "f16c". */
static bool has_avx2(void)
{
    const unsigned need = (1u << 27) | (1u << 28) | (1u << 29); /* OSXSAVE AVX F16C */
    if ((cpuid1_ecx() & need) != need || (xcr0() & 0x6) != 0x6)
        return false;
    return cpuid7_ebx() & (1u << 5); /* AVX2 */
}

/* AVX-512 kernels use F, BW, VL and DQ (plus the AVX2 level's needs), and
 * the OS must also save the opmask registers and all 512 bits of the 32
 * vector registers: XCR0 bits 5 (opmask), 6 (upper halves of ZMM0-15) and
 * 7 (ZMM16-31), besides 1-2. */
static bool has_avx512(void)
{
    const unsigned need = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31); /* F DQ BW VL */
    return has_avx2() && (xcr0() & 0xe6) == 0xe6 && (cpuid7_ebx() & need) == need;
}

static bool cpu_has(const char *name)
{
    return strcmp(name, "sse4.2") == 0 ? has_sse42()
         : strcmp(name, "avx2") == 0 ? has_avx2()
         : strcmp(name, "avx512") == 0 ? has_avx512() : false;
}
#else
static bool cpu_has(const char *name)
{
    (void)name;
    return false;
}
#endif

bool kern_cpu_has(const char *name)
{
    return !kern_cpu_disabled(name) && cpu_has(name);
}

#ifdef KERN_TEST_SUPPORT
/* true if name appears in the comma-separated list (or the list is "all"). */
static bool listed(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if ((n == len && strncmp(p, name, n) == 0) ||
            (n == 3 && strncmp(p, "all", 3) == 0))
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

bool kern_cpu_disabled(const char *name)
{
    const char *off = getenv("GGFS_DISABLE_CPU_FEATURES");
    return off && listed(off, name);
}
#else
bool kern_cpu_disabled(const char *name)
{
    (void)name;
    return false;
}
#endif

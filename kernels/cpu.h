/*
 * kernels/cpu.h — the one reader of the CPU's features (CPUID, XCR0) for
 * the dispatchers (dequant.c, crc32c.c), and the test override.
 *
 * Feature names: "sse4.2" (the crc32 instruction), "avx2" (AVX2 and F16C,
 * YMM state saved by the OS), "avx512" (F, BW, VL, DQ besides avx2's,
 * opmask and ZMM state saved).  Elsewhere than x86 none is had.
 *
 * Built twice with them (kernels/meson.build): in gguffs's build nothing is
 * ever turned off; in the test build (KERN_TEST_SUPPORT) the environment
 * variable GGFS_DISABLE_CPU_FEATURES, a comma-separated list of feature
 * names or "all", turns those off, so one machine can test every variant.
 * Not part of any public API.  Thread-safe (reads the CPU each call; the
 * dispatchers ask once).
 */
#ifndef KERNELS_CPU_H
#define KERNELS_CPU_H

#include <stdbool.h>

/* true if the feature may be used: the CPU and the OS have it, and (test
 * build only) it is not turned off. */
bool kern_cpu_has(const char *name);
/* true if the feature name must not be used (test build only). */
bool kern_cpu_disabled(const char *name);

#endif

/*
 * kernels/cpu.h — the test override of the CPU features the dispatchers
 * (dequant.c, crc32c.c) may use.
 *
 * Built twice with them (kernels/meson.build): in gguffs's build nothing is
 * ever turned off; in the test build (GGFS_TEST_SUPPORT) the environment
 * variable GGFS_DISABLE_CPU_FEATURES, a comma-separated list of feature
 * names ("avx512", "avx2", "sse4.2") or "all", turns those off, so one
 * machine can test every variant.  Not part of any public API.
 */
#ifndef KERNELS_CPU_H
#define KERNELS_CPU_H

#include <stdbool.h>

/* true if the feature name must not be used (test build only). */
bool ggfs_cpu_disabled(const char *name);

#endif

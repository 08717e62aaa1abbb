/*
 * kernels/crc32c.h — CRC32C (Castagnoli, the polynomial 0x1EDC6F41,
 * bit-reflected), the checksum of the disk cache's blocks and map
 * (cache/diskcache.h).
 *
 * Pure functions over memory, like the rest of kernels/: nothing here
 * knows about files or FUSE.
 *
 * Promises:
 *   - kern_crc32c(crc, buf, len) is the CRC32C of len bytes continuing
 *     from crc (0 to start): kern_crc32c(kern_crc32c(0, a), b) is the CRC
 *     of a then b.  "123456789" gives 0xE3069283.
 *   - Every level gives the same answer as the portable code
 *     (kern_crc32c_sw), for any length and any alignment of buf.
 *   - The level is picked at the first call (CPUID: SSE4.2's crc32
 *     instruction on x86), like the dequantization kernels' (dequant.c);
 *     in the test build (kernels_test_dep) GGFS_DISABLE_CPU_FEATURES=sse4.2
 *     (or "all") turns it off.  Any number of threads may call at once.
 *
 * Tested by tests/kernels/test_crc32c.c at every level.
 */
#ifndef KERNELS_CRC32C_H
#define KERNELS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t kern_crc32c(uint32_t crc, const void *buf, size_t len);

/* The portable code (a slicing-by-8 table), under the same contract. */
uint32_t kern_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* The level kern_crc32c uses: "sse4.2" or "scalar".  A static string. */
const char *kern_crc32c_level(void);

#endif

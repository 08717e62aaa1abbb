/*
 * kernels/crc32c_impl.h — what crc32c.c and the ISA file of CRC32C
 * share, and the entry point the tests call directly.  Not part of the
 * public API (crc32c.h): only kernels/ and tests/kernels include this.
 */
#ifndef KERNELS_CRC32C_IMPL_H
#define KERNELS_CRC32C_IMPL_H

#include <stddef.h>
#include <stdint.h>

#define KERN_CRC32C_POLY 0x82F63B78u  /* Castagnoli, bit-reflected */

/* The SSE4.2 version (x86/crc32c_sse42.c), under crc32c.h's contract; only
 * on x86-64, and only to be called when the CPU has SSE4.2. */
uint32_t kern_crc32c_sse42(uint32_t crc, const void *buf, size_t len);

#endif

/*
 * kernels/dequant.h — dequantize ggml tensor blocks into float32.
 *
 * Pure functions over memory: nothing here knows about files, threads or
 * FUSE.  Types are ggml type ids (gguf/types.h).  A "block" is the unit of
 * storage of a type (32 elements for q4_0, 256 for q4_K, 1 for f16...).
 *
 * The output is bit-identical to ggml's own to_float (ggml_get_type_traits
 * (type)->to_float) for every input block, including blocks whose scales
 * are NaN, infinite or subnormal.  Integer types (i8, i16, i32, i64) and f64
 * are converted value by value (as C converts them to float).
 *
 * Source data is little-endian, as ggml stores it.
 */
#ifndef KERNELS_DEQUANT_H
#define KERNELS_DEQUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* true if type can be dequantized (has an f32 view). */
bool ggfs_dequant_supported(uint32_t type);

/*
 * Dequantizes n_blocks whole blocks of type from src into dst, using the
 * best implementation for this CPU (chosen once by ggfs_dequant_init).
 * dst receives n_blocks * blck_elems floats.  src need not be aligned.
 * type must satisfy ggfs_dequant_supported.
 */
void ggfs_dequant(uint32_t type, const void *src, float *dst, size_t n_blocks);

/* The portable scalar reference for the same contract. */
void ggfs_dequant_ref(uint32_t type, const void *src, float *dst,
                      size_t n_blocks);

/* Picks implementations from CPUID; call once before any thread uses
 * ggfs_dequant (calling it again is harmless).  Returns the name of the
 * best ISA level in use, e.g. "avx2" or "scalar". */
const char *ggfs_dequant_init(void);

#endif

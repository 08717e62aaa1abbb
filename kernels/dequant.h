/*
 * kernels/dequant.h — dequantize ggml tensor blocks into float32.
 *
 * Pure functions over memory: nothing here knows about files, threads or
 * FUSE.  Types are ggml type ids (gguf/types.h).  A "block" is the unit of
 * storage of a type: blck_elems elements in blck_bytes bytes (32 elements
 * in 18 bytes for q4_0, 256 for q4_K, 1 for f16...; layouts in
 * gguf/blocks.h).
 *
 * Promises:
 *   - The output is bit-identical to ggml's own to_float
 *     (ggml_get_type_traits(type)->to_float) for every input block,
 *     including blocks whose scales are NaN, infinite or subnormal, at
 *     every ISA level.  Integer types (i8, i16, i32, i64) and f64, which
 *     ggml has no to_float for, are converted value by value as C
 *     converts them to float.
 *   - Any bytes are a valid input: a kernel reads exactly the n_blocks
 *     blocks at src and writes exactly n_blocks * blck_elems floats at
 *     dst.  Source data is little-endian, as ggml stores it, and neither
 *     pointer needs any alignment.
 *   - Once kern_dequant_init has returned, nothing here changes state:
 *     any number of threads may dequantize at once.
 *
 * Tests check every level against libggml-base.so (tests/kernels); the
 * hooks they use are in dequant_impl.h.
 */
#ifndef KERNELS_DEQUANT_H
#define KERNELS_DEQUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Picks the best implementation of every type for this CPU (from CPUID
 * and what the OS saves); call once, before any thread uses kern_dequant
 * (calling it again is harmless).  Returns kern_dequant_level(). */
const char *kern_dequant_init(void);

/* The ISA level kern_dequant uses: "avx512", "avx2" or "scalar" (also
 * the answer before kern_dequant_init, when the scalar reference runs).
 * A level's table holds its own kernels for the types it speeds up and
 * those of the levels below for the rest.  A static string. */
const char *kern_dequant_level(void);

/* true if type can be dequantized (has an f32 view): the types ggml has
 * a to_float for, plus f32, the integer types and f64.  False for ids
 * out of range or unknown. */
bool kern_dequant_supported(uint32_t type);

/*
 * Dequantizes n_blocks whole blocks of type from src into dst with the
 * implementation chosen by kern_dequant_init (the scalar reference
 * before it).  type must satisfy kern_dequant_supported.
 */
void kern_dequant(uint32_t type, const void *src, float *dst, size_t n_blocks);

/*
 * Big-endian files (kernels/byteorder.c).  A type has an f32 view in a
 * big-endian file only where its big-endian layout is defined: the plain
 * types (f32, f16, bf16, f64, i8, i16, i32, i64) element by element, and
 * the quantized types gguf-py's gguf_convert_endian.py converts (its
 * byteswap_tensors, newest version: q4_0 and q8_0 swap their f16 scale d,
 * q4_K its f16 d and dmin, q6_K its f16 d, the block's last two bytes;
 * mxfp4 and nvfp4 have only bytes).  Every other quantized type has no
 * agreed big-endian layout: false.
 */
bool kern_dequant_be_supported(uint32_t type);
/* Makes n_blocks blocks (elements, for a plain type) of type, which must
 * satisfy kern_dequant_be_supported, little-endian in place. */
void kern_dequant_be_swap(uint32_t type, void *blocks, size_t n_blocks);

/* The portable scalar reference, under the same contract. */
void kern_dequant_ref(uint32_t type, const void *src, float *dst,
                      size_t n_blocks);

#endif

/*
 * kernels/tables.h — lookup tables of ggml's quantization formats.
 *
 * The "i-quants" (iq1_*, iq2_*, iq3_*) do not store numbers: they store
 * indices into fixed codebooks ("grids") of 4 or 8 small magnitudes, plus
 * sign bits.  iq4_nl/iq4_xs map 4-bit codes to a non-linear set of levels,
 * and mxfp4/nvfp4 map 4-bit codes to FP4 (E2M1) values.  These tables are
 * part of the file format: a byte of a GGUF tensor means nothing without
 * them, so they are reproduced here exactly.
 *
 * Facts derived from ggml (MIT licence, Copyright (c) 2023-2024 The ggml
 * authors): the values were read out of libggml-base.so (the oracle the
 * tests compare against) and agree with ggml/src/ggml-common.h.
 */
#ifndef KERNELS_TABLES_H
#define KERNELS_TABLES_H

#include <stdint.h>

/* 8 unsigned magnitudes per entry, one per byte, element 0 in the low
 * byte (so a little-endian load of the uint64_t gives the bytes in order). */
extern const uint64_t kern_iq2xxs_grid[256];
extern const uint64_t kern_iq2xs_grid[512];
extern const uint64_t kern_iq2s_grid[1024];
/* 4 unsigned magnitudes per entry, element 0 in the low byte. */
extern const uint32_t kern_iq3xxs_grid[256];
extern const uint32_t kern_iq3s_grid[512];
/* 8 signed values (-1, 0, +1) per entry, as int8_t bytes. */
extern const uint64_t kern_iq1s_grid[2048];

/* 7 stored sign bits -> 8 sign bits: bit 7 makes the count of set bits
 * even (the eighth sign is implied by parity). */
extern const uint8_t kern_ksigns_iq2xs[128];

/* The 16 non-linear levels of iq4_nl and iq4_xs. */
extern const int8_t kern_kvalues_iq4nl[16];
/* FP4 (E2M1) values doubled, so that they are integers: 0, 0.5, 1, 1.5,
 * 2, 3, 4, 6 (and negatives) become 0, 1, 2, 3, 4, 6, 8, 12.  The scales
 * of mxfp4 and nvfp4 are halved to compensate. */
extern const int8_t kern_kvalues_mxfp4[16];

/* nvfp4's per-16-element scale: an unsigned E4M3 byte (bias 7, 3 mantissa
 * bits, bit 7 ignored) decoded to float and halved, as ggml's
 * ggml_ue4m3_to_fp32 does; codes 0x00 and 0x7F decode to 0, but 0xFF
 * (0x7F with bit 7 set) decodes to 240, as in ggml. */
extern const float kern_ue4m3_half[256];

#endif

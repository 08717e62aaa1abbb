/*
 * gguf/blocks.h — the byte layout of every ggml block type.
 *
 * A quantized tensor is a run of fixed-size blocks.  A block of type t
 * holds a fixed number of elements (GGML_QK*, its "block size") in
 * sizeof(struct ggml_block_t) bytes, laid out as the struct says.  This
 * header is the one place those facts live: gguf/types.c takes every
 * type's elements and bytes per block from it, and the dequantization
 * kernels (kernels/) read every field of a block through it.
 *
 * Promises:
 *   - Every field is an array of bytes, so every struct has alignment 1
 *     and no padding: a block pointer may point anywhere (a window into a
 *     tensor need not be aligned), and sizeof is the size in the file.
 *   - Multi-byte fields are stored little-endian, as ggml writes them,
 *     and are declared as bytes (an f16 is `uint8_t d[2]`): they are read
 *     with explicit little-endian loads, never as host integers.
 *   - GGML_BLOCK_BYTES pins each size at compile time to ggml's formula
 *     (in which a 2 is an f16 field); tests/kernels/test_dequant.c checks
 *     every size against libggml-base.so at run time as well.
 *
 * Field names are ggml's, except where ggml packs two kinds of data into
 * one array: those are split here (iq2_s: qs | signs; iq3_xxs: qs |
 * scales_signs), so that code can name what it reads.
 *
 * Layouts derived from ggml (ggml/src/ggml-common.h; MIT, "The ggml
 * authors"); the declarations are our own.
 */
#ifndef GGUF_BLOCKS_H
#define GGUF_BLOCKS_H

#include <stdint.h>

/* Fails the build unless a block of type t takes exactly n bytes. */
#define GGML_BLOCK_BYTES(t, n) \
    _Static_assert(sizeof(struct ggml_block_##t) == (n), #t " block size")

/* Elements per block. */
#define GGML_QK4_0 32
#define GGML_QK4_1 32
#define GGML_QK5_0 32
#define GGML_QK5_1 32
#define GGML_QK8_0 32
#define GGML_QK8_1 32
#define GGML_QK4_NL 32
#define GGML_QK_MXFP4 32
#define GGML_QK_NVFP4 64
#define GGML_QK_NVFP4_SUB 16 /* elements per nvfp4 scale */
#define GGML_QK1_0 128
#define GGML_QK2_0 64
#define GGML_QK_K 256        /* every k-quant, i-quant (but iq4_nl), tq */
#define GGML_K_SCALE_SIZE 12 /* packed 6-bit scales of q3_K, q4_K, q5_K */

/* ---- small blocks: one scale (or four) per 32 to 128 elements ---- */

struct ggml_block_q4_0 {
    uint8_t d[2];               /* f16 scale */
    uint8_t qs[GGML_QK4_0 / 2]; /* nibbles: low = elements 0..15 */
};
GGML_BLOCK_BYTES(q4_0, 2 + GGML_QK4_0 / 2);

struct ggml_block_q4_1 {
    uint8_t d[2], m[2];         /* f16 scale, f16 minimum */
    uint8_t qs[GGML_QK4_1 / 2];
};
GGML_BLOCK_BYTES(q4_1, 2 + 2 + GGML_QK4_1 / 2);

struct ggml_block_q5_0 {
    uint8_t d[2];
    uint8_t qh[4];              /* fifth bits, one per element */
    uint8_t qs[GGML_QK5_0 / 2];
};
GGML_BLOCK_BYTES(q5_0, 2 + 4 + GGML_QK5_0 / 2);

struct ggml_block_q5_1 {
    uint8_t d[2], m[2];
    uint8_t qh[4];
    uint8_t qs[GGML_QK5_1 / 2];
};
GGML_BLOCK_BYTES(q5_1, 2 + 2 + 4 + GGML_QK5_1 / 2);

struct ggml_block_q8_0 {
    uint8_t d[2];
    uint8_t qs[GGML_QK8_0];     /* int8 */
};
GGML_BLOCK_BYTES(q8_0, 2 + GGML_QK8_0);

struct ggml_block_q8_1 {
    uint8_t d[2], s[2];         /* f16 scale, f16 d * sum(qs) */
    uint8_t qs[GGML_QK8_1];
};
GGML_BLOCK_BYTES(q8_1, 2 + 2 + GGML_QK8_1);

struct ggml_block_iq4_nl {
    uint8_t d[2];
    uint8_t qs[GGML_QK4_NL / 2]; /* nibbles indexing the iq4_nl levels */
};
GGML_BLOCK_BYTES(iq4_nl, 2 + GGML_QK4_NL / 2);

struct ggml_block_mxfp4 {
    uint8_t e;                    /* E8M0 scale */
    uint8_t qs[GGML_QK_MXFP4 / 2]; /* FP4 (E2M1) nibbles */
};
GGML_BLOCK_BYTES(mxfp4, 1 + GGML_QK_MXFP4 / 2);

struct ggml_block_nvfp4 {
    uint8_t d[GGML_QK_NVFP4 / GGML_QK_NVFP4_SUB]; /* UE4M3 scale per 16 */
    uint8_t qs[GGML_QK_NVFP4 / 2];               /* 8 bytes per 16 */
};
GGML_BLOCK_BYTES(nvfp4, GGML_QK_NVFP4 / GGML_QK_NVFP4_SUB + GGML_QK_NVFP4 / 2);

struct ggml_block_q1_0 {
    uint8_t d[2];
    uint8_t qs[GGML_QK1_0 / 8]; /* one sign bit per element */
};
GGML_BLOCK_BYTES(q1_0, 2 + GGML_QK1_0 / 8);

struct ggml_block_q2_0 {
    uint8_t d[2];
    uint8_t qs[GGML_QK2_0 / 4]; /* 2-bit codes */
};
GGML_BLOCK_BYTES(q2_0, 2 + GGML_QK2_0 / 4);

/* ---- k-quants: 256-element super-blocks of 16- or 32-element groups ---- */

struct ggml_block_q2_K {
    uint8_t scales[GGML_QK_K / 16]; /* 4-bit scale | 4-bit min << 4 */
    uint8_t qs[GGML_QK_K / 4];      /* 2-bit codes */
    uint8_t d[2], dmin[2];
};
GGML_BLOCK_BYTES(q2_K, 2 + 2 + GGML_QK_K / 16 + GGML_QK_K / 4);

struct ggml_block_q3_K {
    uint8_t hmask[GGML_QK_K / 8];       /* third bits */
    uint8_t qs[GGML_QK_K / 4];          /* low 2 bits */
    uint8_t scales[GGML_K_SCALE_SIZE];  /* sixteen 6-bit scales */
    uint8_t d[2];
};
GGML_BLOCK_BYTES(q3_K, 2 + GGML_QK_K / 4 + GGML_QK_K / 8 + GGML_K_SCALE_SIZE);

struct ggml_block_q4_K {
    uint8_t d[2], dmin[2];
    uint8_t scales[GGML_K_SCALE_SIZE];  /* eight 6-bit scales, eight mins */
    uint8_t qs[GGML_QK_K / 2];
};
GGML_BLOCK_BYTES(q4_K, 2 + 2 + GGML_K_SCALE_SIZE + GGML_QK_K / 2);

struct ggml_block_q5_K {
    uint8_t d[2], dmin[2];
    uint8_t scales[GGML_K_SCALE_SIZE];
    uint8_t qh[GGML_QK_K / 8];          /* fifth bits */
    uint8_t qs[GGML_QK_K / 2];
};
GGML_BLOCK_BYTES(q5_K, 2 + 2 + GGML_K_SCALE_SIZE + GGML_QK_K / 8 + GGML_QK_K / 2);

struct ggml_block_q6_K {
    uint8_t ql[GGML_QK_K / 2];          /* low 4 bits */
    uint8_t qh[GGML_QK_K / 4];          /* high 2 bits */
    uint8_t scales[GGML_QK_K / 16];     /* int8 */
    uint8_t d[2];
};
GGML_BLOCK_BYTES(q6_K, 2 + GGML_QK_K / 16 + 3 * GGML_QK_K / 4);

struct ggml_block_q8_K {
    uint8_t d[4];                       /* float32, not f16 */
    uint8_t qs[GGML_QK_K];              /* int8 */
    uint8_t bsums[2 * (GGML_QK_K / 16)]; /* int16 sums of groups of 16 */
};
GGML_BLOCK_BYTES(q8_K, 4 + GGML_QK_K + 2 * (GGML_QK_K / 16));

/* ---- i-quants ---- */

struct ggml_block_iq2_xxs {
    uint8_t d[2];
    uint8_t qs[GGML_QK_K / 4]; /* per 32 elements: 4 grid indices, then a
                                * 32-bit word of 4 x 7 sign bits + scale */
};
GGML_BLOCK_BYTES(iq2_xxs, 2 + GGML_QK_K / 4);

struct ggml_block_iq2_xs {
    uint8_t d[2];
    uint8_t qs[GGML_QK_K / 4];      /* 16-bit words: 9-bit index, 7 signs */
    uint8_t scales[GGML_QK_K / 32]; /* two 4-bit scales per 32 elements */
};
GGML_BLOCK_BYTES(iq2_xs, 2 + GGML_QK_K / 4 + GGML_QK_K / 32);

struct ggml_block_iq2_s {
    uint8_t d[2];
    uint8_t qs[GGML_QK_K / 8];      /* low 8 bits of the grid indices */
    uint8_t signs[GGML_QK_K / 8];   /* (ggml: the second half of qs) */
    uint8_t qh[GGML_QK_K / 32];     /* high 2 bits of 4 indices */
    uint8_t scales[GGML_QK_K / 32];
};
GGML_BLOCK_BYTES(iq2_s, 2 + GGML_QK_K / 4 + GGML_QK_K / 16);

struct ggml_block_iq3_xxs {
    uint8_t d[2];
    uint8_t qs[GGML_QK_K / 4];           /* grid indices */
    uint8_t scales_signs[GGML_QK_K / 8]; /* (ggml: the rest of qs) per 32
                                          * elements a 32-bit word of
                                          * 4 x 7 sign bits + scale */
};
GGML_BLOCK_BYTES(iq3_xxs, 2 + 3 * (GGML_QK_K / 8));

struct ggml_block_iq3_s {
    uint8_t d[2];
    uint8_t qs[GGML_QK_K / 4];      /* low 8 bits of the grid indices */
    uint8_t qh[GGML_QK_K / 32];     /* ninth bits */
    uint8_t signs[GGML_QK_K / 8];
    uint8_t scales[GGML_QK_K / 64]; /* two 4-bit scales per 64 elements */
};
GGML_BLOCK_BYTES(iq3_s, 2 + 13 * (GGML_QK_K / 32) + GGML_QK_K / 64);

struct ggml_block_iq1_s {
    uint8_t d[2];
    uint8_t qs[GGML_QK_K / 8];      /* low 8 bits of the grid indices */
    uint8_t qh[2 * (GGML_QK_K / 32)]; /* 16-bit words: 4 x 3 index bits,
                                       * 3-bit scale, shift sign */
};
GGML_BLOCK_BYTES(iq1_s, 2 + GGML_QK_K / 8 + GGML_QK_K / 16);

struct ggml_block_iq1_m {
    uint8_t qs[GGML_QK_K / 8];      /* low 8 bits of the grid indices */
    uint8_t qh[GGML_QK_K / 16];     /* per index: 3 high bits, shift sign */
    uint8_t scales[GGML_QK_K / 32]; /* 3-bit scales; the f16 super-block
                                     * scale is spread over the top nibbles
                                     * of their four 16-bit words */
};
GGML_BLOCK_BYTES(iq1_m, GGML_QK_K / 8 + GGML_QK_K / 16 + GGML_QK_K / 32);

struct ggml_block_iq4_xs {
    uint8_t d[2];
    uint8_t scales_h[2];            /* 16-bit word: high 2 bits of 8 scales */
    uint8_t scales_l[GGML_QK_K / 64]; /* low 4 bits of 8 scales */
    uint8_t qs[GGML_QK_K / 2];      /* nibbles indexing the iq4_nl levels */
};
GGML_BLOCK_BYTES(iq4_xs, 2 + 2 + GGML_QK_K / 64 + GGML_QK_K / 2);

/* ---- ternary ---- */

struct ggml_block_tq1_0 {
    uint8_t qs[(GGML_QK_K - 4 * GGML_QK_K / 64) / 5]; /* 5 trits a byte */
    uint8_t qh[GGML_QK_K / 64];                       /* 4 trits a byte */
    uint8_t d[2];
};
GGML_BLOCK_BYTES(tq1_0, 2 + GGML_QK_K / 64 + (GGML_QK_K - 4 * GGML_QK_K / 64) / 5);

struct ggml_block_tq2_0 {
    uint8_t qs[GGML_QK_K / 4]; /* 2-bit codes */
    uint8_t d[2];
};
GGML_BLOCK_BYTES(tq2_0, 2 + GGML_QK_K / 4);

#undef GGML_BLOCK_BYTES

#endif

/*
 * kernels/unpack.h — the packed fields of k-quant and i-quant blocks,
 * unpacked in one place for every ISA file.
 *
 * Many block types squeeze their per-group scales (and the i-quants their
 * codebook indices) into bit fields shared between bytes.  Each function
 * here decodes one such field exactly as ggml does (ggml-quants.c; MIT,
 * "The ggml authors"), so the scalar reference and the SIMD kernels agree
 * by construction.  Where a function returns a float scale, it performs
 * ggml's float operations in ggml's order (see dequant_ref.c on why that
 * matters); the integer fields are exact.
 *
 * All are static inline and free of ISA-specific code, so a kernel compiled
 * for any target can call them.  A kernel that decodes a field with vector
 * instructions instead (the AVX-512 q3_K, q4_K and q5_K scales) must agree
 * with the function here; the tests check that bit for bit.
 *
 * Internal to kernels/: not part of the public API (dequant.h).
 */
#ifndef KERNELS_UNPACK_H
#define KERNELS_UNPACK_H

#include <stdint.h>

#include "dequant_impl.h"
#include "gguf/blocks.h"

/* ---- k-quants ---- */

/*
 * q4_K and q5_K: the 6-bit scale and 6-bit min of 32-element group j
 * (0..7), from the 12 bytes q of the block's scales (ggml's
 * get_scale_min_k4).  Groups 0..3 use the low 6 bits of bytes 0..3
 * (scale) and 4..7 (min); groups 4..7 take their low 4 bits from the
 * nibbles of bytes 8..11 and their top 2 bits from the spare top bits of
 * bytes 0..7.
 */
static inline void kern_k4_scale_min(int j, const uint8_t q[GGML_K_SCALE_SIZE],
                                     int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* q4_K and q5_K: group j's scale times d and its min times dmin, the
 * block's two f16 factors (exact products, as in ggml). */
static inline void kern_k4_dm(int j, const uint8_t q[GGML_K_SCALE_SIZE],
                              float d, float dmin, float *dl, float *ml)
{
    int sc, mn;
    kern_k4_scale_min(j, q, &sc, &mn);
    *dl = d * (float)sc;
    *ml = dmin * (float)mn;
}

/*
 * q3_K: the signed scale (-32..31) of 16-element group j (0..15), from the
 * 12 bytes s of the block's scales: the low 4 bits are nibble j / 8 of
 * s[j % 8], the high 2 bits are bits 2 (j / 4) of s[8 + j % 4], and the
 * 6-bit result is biased by 32.
 */
static inline int kern_q3k_scale(int j, const uint8_t s[GGML_K_SCALE_SIZE])
{
    const int lo = j < 8 ? s[j] & 0x0f : s[j - 8] >> 4;
    const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* ---- i-quants: scales ---- */

/*
 * iq4_xs: the signed scale (-32..31) of 32-element group ib (0..7): low 4
 * bits from nibble ib % 2 of scales_l[ib / 2], high 2 bits from bits 2 ib
 * of the 16-bit word scales_h (passed already loaded), biased by 32.
 */
static inline int kern_iq4xs_scale(int ib, uint16_t scales_h,
                                   const uint8_t scales_l[GGML_QK_K / 64])
{
    const int ls = ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) |
                   (((scales_h >> (2 * ib)) & 3) << 4);
    return ls - 32;
}

/* iq2_xxs, iq2_xs, iq2_s: the scale of a group from its 4-bit code s,
 * d * (0.5 + s) / 4, rounded as ggml rounds it. */
static inline float kern_iq2_scale(float d, unsigned s)
{
    return d * (0.5f + (float)s) * 0.25f;
}

/* iq3_xxs: the same with a factor 1/2: d * (0.5 + s) / 2. */
static inline float kern_iq3xxs_scale(float d, unsigned s)
{
    return d * (0.5f + (float)s) * 0.5f;
}

/* iq3_s: the scale of 32-element group ib (0..7), d * (1 + 2 s), with s
 * nibble ib % 2 of scales[ib / 2]. */
static inline float kern_iq3s_scale(float d, int ib,
                                    const uint8_t scales[GGML_QK_K / 64])
{
    const uint8_t s = scales[ib / 2];
    return d * (float)(1 + 2 * (ib % 2 ? s >> 4 : s & 0x0f));
}

/* iq1_s, iq1_m: a group's scale from its 3-bit code s (higher bits are
 * ignored), d * (2 s + 1). */
static inline float kern_iq1_scale(float d, unsigned s)
{
    return d * (float)(2 * (s & 7) + 1);
}

/* iq1_m: loads the four 16-bit scale words of x into sc (the 3-bit
 * group scales, for kern_iq1_scale) and returns the super-block scale d,
 * an f16 whose 4 nibbles are the words' top nibbles (lowest in sc[0]). */
static inline float kern_iq1m_scales(const struct ggml_block_iq1_m *x,
                                     uint16_t sc[4])
{
    for (int k = 0; k < 4; k++)
        sc[k] = kern_le16(x->scales + 2 * k);
    return kern_f16_to_f32((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                      ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
}

/* ---- i-quants: codebook indices ---- */

/* iq2_s: the 10-bit grid index of row l (0..3) of a 32-element group: the
 * byte qs[l], plus bits 2 l, 2 l + 1 of the group's qh byte as bits 8-9. */
static inline int kern_iq2s_index(const uint8_t qs[4], uint8_t qh, int l)
{
    return qs[l] | ((qh << (8 - 2 * l)) & 0x300);
}

/* iq3_s: the 9-bit grid index of half-row k (0..7) of a 32-element group:
 * the byte qs[k], plus bit k of the group's qh byte as bit 8. */
static inline int kern_iq3s_index(const uint8_t qs[8], uint8_t qh, int k)
{
    return qs[k] | ((qh << (8 - k)) & 256);
}

/* iq1_s: the 11-bit grid index of row l (0..3) of a 32-element group: the
 * byte qs[l], plus bits 3 l .. 3 l + 2 of the group's 16-bit qh word. */
static inline int kern_iq1s_index(const uint8_t qs[4], uint16_t qh, int l)
{
    return qs[l] | (((qh >> (3 * l)) & 7) << 8);
}

/* iq1_m: the 11-bit grid index of row l (0..3) of a 32-element group: the
 * byte qs[l], plus the low 3 bits of nibble l % 2 of qh[l / 2] (the
 * nibble's top bit is the sign of the row's shift, not part of it). */
static inline int kern_iq1m_index(const uint8_t qs[4], const uint8_t qh[2], int l)
{
    return qs[l] | ((qh[l / 2] << (8 - 4 * (l % 2))) & 0x700);
}

#endif

/*
 * kernels/x86/dequant_avx2.c — AVX2 + F16C kernels for the common types.
 *
 * Same contract as the scalar reference (dequant_ref.c): bit-identical to
 * ggml.  That is easier than it sounds, because of how ggml's formulas are
 * built: the integer part of every value is exact, scale products such as
 * d * sc are exact in float (an 11-bit half times a small integer), and so
 * each output is one rounded multiply, optionally followed by one rounded
 * add or subtract.  Vector multiplies and adds round the same way as
 * scalar ones, so doing 8 at a time changes nothing, provided that:
 *
 *   - per-block scales are computed exactly as the reference does (they
 *     are scalar here too, with the same software half conversion);
 *   - no FMA is used (ggml rounds the product before the add);
 *   - the operand order of an add is ggml's (q*d + m, not m + q*d): when
 *     both operands are NaN, x86 returns the first one's payload;
 *   - a sign flip is an XOR of the sign bit, as in ggml's compiled code.
 *
 * Each function carries __attribute__((target("avx2,f16c"))), so this file
 * builds with the project's normal flags and the code only runs after
 * dequant.c has checked the CPU.  Types not here use the reference.
 */
#include "kernels/dequant_impl.h"
#include "kernels/tables.h"
#include "kernels/unpack.h"
#include "gguf/blocks.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))

/* ---- building blocks ---- */

/* 8 signed bytes (low half of v) -> 8 floats. */
AVX2 static inline __m256 i8x8_to_ps(__m128i v)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

/* y[0..15] = (float)v[i] * d for the 16 signed bytes of v. */
AVX2 static inline void put16_mul(float *y, __m128i v, __m256 d)
{
    _mm256_storeu_ps(y, _mm256_mul_ps(i8x8_to_ps(v), d));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(v, 8)), d));
}

/* y[0..15] = (float)v[i] * d + m  (q4_1, q5_1: ggml's operand order). */
AVX2 static inline void put16_mul_add(float *y, __m128i v, __m256 d, __m256 m)
{
    _mm256_storeu_ps(y, _mm256_add_ps(_mm256_mul_ps(i8x8_to_ps(v), d), m));
    _mm256_storeu_ps(y + 8, _mm256_add_ps(
        _mm256_mul_ps(i8x8_to_ps(_mm_srli_si128(v, 8)), d), m));
}

/* y[0..15] = d * (float)v[i] - m  (k-quants with mins). */
AVX2 static inline void put16_mul_sub(float *y, __m128i v, __m256 d, __m256 m)
{
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(d, i8x8_to_ps(v)), m));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(
        _mm256_mul_ps(d, i8x8_to_ps(_mm_srli_si128(v, 8))), m));
}

/* The 16 bytes at p split into low nibbles (lo) and high nibbles (hi). */
AVX2 static inline void nibbles(const uint8_t *p, __m128i *lo, __m128i *hi)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)p);
    const __m128i mask = _mm_set1_epi8(0x0f);
    *lo = _mm_and_si128(v, mask);
    *hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
}

/* The fifth bits of q5_0/q5_1: byte j of the result is 0x10 if bit j of
 * qh is set, else 0 (j = 0..31, in two 16-byte halves). */
AVX2 static inline __m256i q5_high_bits(uint32_t qh)
{
    /* byte j <- byte j/8 of qh, then test bit j%8 */
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)qh),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

/* ---- plain element types ---- */

AVX2 static void avx2_f16(const void *src, float *y, size_t n)
{
    /* vcvtph2ps is exact for every half and quiets NaNs exactly as
     * ggml's software conversion does (checked for all 65536 values). */
    const uint8_t *p = src;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(p + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(p + 2 * i + 16));
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(y + i + 8, _mm256_cvtph_ps(b));
    }
    for (; i < n; i++)
        y[i] = kern_ld_f16(p + 2 * i);
}

AVX2 static void avx2_bf16(const void *src, float *y, size_t n)
{
    /* widen to 32 bits and shift into the top half: pure bit moves */
    const uint8_t *p = src;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + 2 * i));
        __m256i a = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16);
        __m256i b = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16);
        _mm256_storeu_si256((__m256i *)(y + i), a);
        _mm256_storeu_si256((__m256i *)(y + i + 8), b);
    }
    for (; i < n; i++)
        y[i] = kern_bits_to_f32((uint32_t)kern_le16(p + 2 * i) << 16);
}

/* ---- 32-element blocks ---- */

AVX2 static void avx2_q4_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_0 *x = src;
    const __m128i eight = _mm_set1_epi8(8);
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        __m128i lo, hi;
        nibbles(x->qs, &lo, &hi);
        put16_mul(y, _mm_sub_epi8(lo, eight), d);
        put16_mul(y + 16, _mm_sub_epi8(hi, eight), d);
    }
}

AVX2 static void avx2_q4_1(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_1 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        const __m256 m = _mm256_set1_ps(kern_ld_f16(x->m));
        __m128i lo, hi;
        nibbles(x->qs, &lo, &hi);
        put16_mul_add(y, lo, d, m);
        put16_mul_add(y + 16, hi, d, m);
    }
}

AVX2 static void avx2_q5_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_0 *x = src;
    const __m128i sixteen = _mm_set1_epi8(16);
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        const __m256i h = q5_high_bits(kern_le32(x->qh));
        __m128i lo, hi;
        nibbles(x->qs, &lo, &hi);
        lo = _mm_sub_epi8(_mm_or_si128(lo, _mm256_castsi256_si128(h)), sixteen);
        hi = _mm_sub_epi8(_mm_or_si128(hi, _mm256_extracti128_si256(h, 1)), sixteen);
        put16_mul(y, lo, d);
        put16_mul(y + 16, hi, d);
    }
}

AVX2 static void avx2_q5_1(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_1 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        const __m256 m = _mm256_set1_ps(kern_ld_f16(x->m));
        const __m256i h = q5_high_bits(kern_le32(x->qh));
        __m128i lo, hi;
        nibbles(x->qs, &lo, &hi);
        put16_mul_add(y, _mm_or_si128(lo, _mm256_castsi256_si128(h)), d, m);
        put16_mul_add(y + 16, _mm_or_si128(hi, _mm256_extracti128_si256(h, 1)), d, m);
    }
}

AVX2 static void avx2_q8_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q8_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        put16_mul(y, _mm_loadu_si128((const __m128i *)x->qs), d);
        put16_mul(y + 16, _mm_loadu_si128((const __m128i *)(x->qs + 16)), d);
    }
}

/* Nibble -> table entry, 16 at a time: pshufb is a 16-entry byte lookup. */
AVX2 static inline void lookup16(const uint8_t *p, __m128i table, __m128i *lo,
                                 __m128i *hi)
{
    nibbles(p, lo, hi);
    *lo = _mm_shuffle_epi8(table, *lo);
    *hi = _mm_shuffle_epi8(table, *hi);
}

AVX2 static void avx2_iq4_nl(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq4_nl *x = src;
    const __m128i table = _mm_loadu_si128((const __m128i *)kern_kvalues_iq4nl);
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        /* ggml: d * level; both orders give the same bits (level is an
         * exact integer, never NaN) */
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        __m128i lo, hi;
        lookup16(x->qs, table, &lo, &hi);
        put16_mul(y, lo, d);
        put16_mul(y + 16, hi, d);
    }
}

AVX2 static void avx2_mxfp4(const void *src, float *y, size_t nb)
{
    const struct ggml_block_mxfp4 *x = src;
    const __m128i table = _mm_loadu_si128((const __m128i *)kern_kvalues_mxfp4);
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        const __m256 d = _mm256_set1_ps(kern_e8m0_half(x->e));
        __m128i lo, hi;
        lookup16(x->qs, table, &lo, &hi);
        put16_mul(y, lo, d);
        put16_mul(y + 16, hi, d);
    }
}

/* y[0..31]: sub-blocks s and s + 1 of an nvfp4 block (16 elements and
 * one scale each), whose nibbles are the 16 bytes at x->qs + 8 s: 8 per
 * sub-block, low nibbles then high nibbles. */
AVX2 static inline void nvfp4_pair(float *y, const struct ggml_block_nvfp4 *x, int s,
                                   __m128i table)
{
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i v = _mm_loadu_si128((const __m128i *)(x->qs + 8 * s));
    const __m128i lo = _mm_and_si128(v, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    /* sub-block s: lo[0..7], hi[0..7]; s+1: lo[8..15], hi[8..15] */
    const __m128i s0 = _mm_shuffle_epi8(table, _mm_unpacklo_epi64(lo, hi));
    const __m128i s1 = _mm_shuffle_epi8(table, _mm_unpackhi_epi64(lo, hi));
    put16_mul(y, s0, _mm256_set1_ps(kern_ue4m3_half[x->d[s]]));
    put16_mul(y + 16, s1, _mm256_set1_ps(kern_ue4m3_half[x->d[s + 1]]));
}

AVX2 static void avx2_nvfp4(const void *src, float *y, size_t nb)
{
    const struct ggml_block_nvfp4 *x = src;
    const __m128i table = _mm_loadu_si128((const __m128i *)kern_kvalues_mxfp4);
    for (size_t i = 0; i < nb; i++, x++, y += 64) {
        nvfp4_pair(y, x, 0, table);
        nvfp4_pair(y + 32, x, 2, table);
    }
}

/* ---- k-quants ---- */

/* y[0..31] = d1 * v - m1 for the 32 bytes of v. */
AVX2 static inline void put32_mul_sub(float *y, __m256i v, float d1, float m1)
{
    const __m256 d = _mm256_set1_ps(d1), m = _mm256_set1_ps(m1);
    put16_mul_sub(y, _mm256_castsi256_si128(v), d, m);
    put16_mul_sub(y + 16, _mm256_extracti128_si256(v, 1), d, m);
}

AVX2 static void avx2_q4_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_K *x = src;
    const __m256i mask = _mm256_set1_epi8(0x0f);
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d), dmin = kern_ld_f16(x->dmin);
        const uint8_t *q = x->qs;
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            float d1, m1, d2, m2;
            const __m256i v = _mm256_loadu_si256((const __m256i *)q);
            kern_k4_dm(j, x->scales, d, dmin, &d1, &m1);
            kern_k4_dm(j + 1, x->scales, d, dmin, &d2, &m2);
            put32_mul_sub(y, _mm256_and_si256(v, mask), d1, m1);
            put32_mul_sub(y + 32, _mm256_and_si256(_mm256_srli_epi16(v, 4), mask), d2, m2);
        }
    }
}

AVX2 static void avx2_q5_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_K *x = src;
    const __m256i mask = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d), dmin = kern_ld_f16(x->dmin);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
        const uint8_t *q = x->qs;
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            float d1, m1, d2, m2;
            const __m256i v = _mm256_loadu_si256((const __m256i *)q);
            /* fifth bits: bit j of qh[l] for the low nibbles, bit j+1 for
             * the high ones, moved to bit 4 */
            const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(
                _mm256_srli_epi16(qh, j), one), 4);
            const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(
                _mm256_srli_epi16(qh, j + 1), one), 4);
            kern_k4_dm(j, x->scales, d, dmin, &d1, &m1);
            kern_k4_dm(j + 1, x->scales, d, dmin, &d2, &m2);
            put32_mul_sub(y, _mm256_or_si256(_mm256_and_si256(v, mask), h0), d1, m1);
            put32_mul_sub(y + 32, _mm256_or_si256(_mm256_and_si256(
                              _mm256_srli_epi16(v, 4), mask), h1), d2, m2);
        }
    }
}

/* y[0..31] = (16 with scale s0, 16 with scale s1) * v, v 32 signed bytes */
AVX2 static inline void put32_two_scales(float *y, __m256i v, float s0, float s1)
{
    put16_mul(y, _mm256_castsi256_si128(v), _mm256_set1_ps(s0));
    put16_mul(y + 16, _mm256_extracti128_si256(v, 1), _mm256_set1_ps(s1));
}

AVX2 static void avx2_q6_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q6_K *x = src;
    const __m256i mask4 = _mm256_set1_epi8(0x0f), mask2 = _mm256_set1_epi8(3);
    const __m256i bias = _mm256_set1_epi8(32);
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *ql = x->ql, *qh = x->qh;
        const int8_t *sc = (const int8_t *)x->scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
            /* four 6-bit planes: (low nibble | 2 high bits << 4) - 32 */
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, mask4),
                                   _mm256_slli_epi16(_mm256_and_si256(h, mask2), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, mask4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), mask2), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), mask4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), mask2), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), mask4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), mask2), 4));
            for (int k = 0; k < 4; k++)
                /* ggml: (d * scale) * q; d * scale is exact */
                put32_two_scales(y + 32 * k, _mm256_sub_epi8(q[k], bias),
                                 d * (float)sc[2 * k], d * (float)sc[2 * k + 1]);
        }
    }
}

/* y[0..31] = (dl0 * v - ml0 for 16, dl1 * v - ml1 for 16) */
AVX2 static inline void put32_two_mul_sub(float *y, __m256i v, float dl0,
                                          float ml0, float dl1, float ml1)
{
    put16_mul_sub(y, _mm256_castsi256_si128(v), _mm256_set1_ps(dl0), _mm256_set1_ps(ml0));
    put16_mul_sub(y + 16, _mm256_extracti128_si256(v, 1), _mm256_set1_ps(dl1),
                  _mm256_set1_ps(ml1));
}

AVX2 static void avx2_q2_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q2_K *x = src;
    const __m256i mask2 = _mm256_set1_epi8(3);
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d), dmin = kern_ld_f16(x->dmin);
        const uint8_t *sc = x->scales, *q = x->qs;
        for (int half = 0; half < 2; half++, q += 32) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)q);
            for (int shift = 0; shift < 8; shift += 2, sc += 2, y += 32) {
                const __m256i p = _mm256_and_si256(_mm256_srli_epi16(v, shift), mask2);
                put32_two_mul_sub(y, p, d * (float)(sc[0] & 0x0f), dmin * (float)(sc[0] >> 4),
                                  d * (float)(sc[1] & 0x0f), dmin * (float)(sc[1] >> 4));
            }
        }
    }
}

AVX2 static void avx2_q3_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q3_K *x = src;
    const __m256i mask2 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    for (size_t i = 0; i < nb; i++, x++) {
        const float d_all = kern_ld_f16(x->d);
        const uint8_t *s = x->scales, *q = x->qs;
        const __m256i hm = _mm256_loadu_si256((const __m256i *)x->hmask);
        float dl[16];
        for (int j = 0; j < 16; j++)
            dl[j] = d_all * (float)kern_q3k_scale(j, s);
        int is = 0, bit = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)q);
            for (int shift = 0; shift < 8; shift += 2, bit++, is += 2, y += 32) {
                const __m256i m = _mm256_set1_epi8((char)(1 << bit));
                /* subtract 4 where the high bit is clear */
                const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, m),
                                                        _mm256_setzero_si256());
                const __m256i p = _mm256_sub_epi8(
                    _mm256_and_si256(_mm256_srli_epi16(v, shift), mask2),
                    _mm256_and_si256(clear, four));
                put32_two_scales(y, p, dl[is], dl[is + 1]);
            }
        }
    }
}

AVX2 static void avx2_iq4_xs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq4_xs *x = src;
    const __m128i table = _mm_loadu_si128((const __m128i *)kern_kvalues_iq4nl);
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint16_t sh = kern_le16(x->scales_h);
        const uint8_t *qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 16, y += 32) {
            const __m256 dl = _mm256_set1_ps(d * (float)kern_iq4xs_scale(ib, sh, x->scales_l));
            __m128i lo, hi;
            lookup16(qs, table, &lo, &hi);
            put16_mul(y, lo, dl);
            put16_mul(y + 16, hi, dl);
        }
    }
}

/* ---- i-quants: codebook rows, explicit signs ---- */

/* A mask with the sign bit set in lane j where bit j of signs is set. */
AVX2 static inline __m256 sign_mask8(unsigned signs)
{
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i set = _mm256_cmpeq_epi32(
        _mm256_and_si256(_mm256_set1_epi32((int)signs), bits), bits);
    return _mm256_castsi256_ps(_mm256_slli_epi32(set, 31));
}

/* y[0..7] = db * grid byte j, sign-flipped (XOR, as ggml) per signs. */
AVX2 static inline void grid8(float *y, __m256 db, uint64_t grid, unsigned signs)
{
    const __m256 g = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)grid)));
    _mm256_storeu_ps(y, _mm256_xor_ps(_mm256_mul_ps(db, g), sign_mask8(signs)));
}

AVX2 static void avx2_iq2_xxs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq2_xxs *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *idx = x->qs + 8 * ib;
            const uint32_t aux = kern_le32(idx + 4);
            const __m256 db = _mm256_set1_ps(kern_iq2_scale(d, aux >> 28));
            for (int l = 0; l < 4; l++, y += 8)
                grid8(y, db, kern_iq2xxs_grid[idx[l]],
                      kern_ksigns_iq2xs[(aux >> (7 * l)) & 127]);
        }
    }
}

AVX2 static void avx2_iq2_xs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq2_xs *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t s = x->scales[ib];
            const __m256 db0 = _mm256_set1_ps(kern_iq2_scale(d, s & 0x0f));
            const __m256 db1 = _mm256_set1_ps(kern_iq2_scale(d, s >> 4));
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t w = kern_le16(x->qs + 2 * (4 * ib + l));
                grid8(y, l < 2 ? db0 : db1, kern_iq2xs_grid[w & 511],
                      kern_ksigns_iq2xs[w >> 9]);
            }
        }
    }
}

AVX2 static void avx2_iq2_s(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq2_s *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *qs = x->qs, *signs = x->signs, *qh = x->qh;
        for (int ib = 0; ib < 8; ib++, qs += 4, signs += 4) {
            const uint8_t s = x->scales[ib];
            const __m256 db0 = _mm256_set1_ps(kern_iq2_scale(d, s & 0x0f));
            const __m256 db1 = _mm256_set1_ps(kern_iq2_scale(d, s >> 4));
            for (int l = 0; l < 4; l++, y += 8) {
                grid8(y, l < 2 ? db0 : db1, kern_iq2s_grid[kern_iq2s_index(qs, qh[ib], l)],
                      signs[l]);
            }
        }
    }
}

/* Two 4-magnitude rows side by side, as one 8-byte row. */
static inline uint64_t pair(uint32_t a, uint32_t b)
{
    return (uint64_t)a | ((uint64_t)b << 32);
}

AVX2 static void avx2_iq3_xxs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq3_xxs *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const uint32_t aux = kern_le32(x->scales_signs + 4 * ib);
            const __m256 db = _mm256_set1_ps(kern_iq3xxs_scale(d, aux >> 28));
            for (int l = 0; l < 4; l++, y += 8)
                grid8(y, db, pair(kern_iq3xxs_grid[qs[2 * l]], kern_iq3xxs_grid[qs[2 * l + 1]]),
                      kern_ksigns_iq2xs[(aux >> (7 * l)) & 127]);
        }
    }
}

AVX2 static void avx2_iq3_s(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq3_s *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *qs = x->qs, *qh = x->qh, *signs = x->signs;
        for (int ib = 0; ib < 8; ib++, qs += 8, signs += 4) {
            const __m256 db = _mm256_set1_ps(kern_iq3s_scale(d, ib, x->scales));
            for (int l = 0; l < 4; l++, y += 8) {
                const int i1 = kern_iq3s_index(qs, qh[ib], 2 * l);
                const int i2 = kern_iq3s_index(qs, qh[ib], 2 * l + 1);
                grid8(y, db, pair(kern_iq3s_grid[i1], kern_iq3s_grid[i2]), signs[l]);
            }
        }
    }
}

/* y[0..7] = dl * ((float)grid byte j + delta), grid bytes signed. */
AVX2 static inline void grid8_delta(float *y, __m256 dl, uint64_t grid, __m256 delta)
{
    const __m256 g = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_cvtsi64_si128((long long)grid)));
    _mm256_storeu_ps(y, _mm256_mul_ps(dl, _mm256_add_ps(g, delta)));
}

/* +1/8, or -1/8 if sign (the shift's sign bit, already moved to bit 31)
 * is set, in all 8 lanes.  Built from the bits with integer operations
 * only: the shift signs are random, and written as "bit != 0" or "?:" the
 * compiler turned the choice into a branch, mispredicted half the time.
 * iq1_m has 4 of them per 32 outputs, which made it run at a quarter of
 * iq1_s's speed. */
AVX2 static inline __m256 iq1_delta(uint32_t sign)
{
    return _mm256_castsi256_ps(_mm256_set1_epi32((int)(0x3e000000u | sign)));
}

AVX2 static void avx2_iq1_s(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq1_s *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 4) {
            const uint16_t qh = kern_le16(x->qh + 2 * ib);
            const __m256 dl = _mm256_set1_ps(kern_iq1_scale(d, qh >> 12));
            const __m256 delta = iq1_delta((uint32_t)(qh & 0x8000) << 16);
            for (int l = 0; l < 4; l++, y += 8)
                grid8_delta(y, dl, kern_iq1s_grid[kern_iq1s_index(qs, qh, l)], delta);
        }
    }
}

AVX2 static void avx2_iq1_m(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq1_m *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        uint16_t sc[4];
        const float d = kern_iq1m_scales(x, sc);
        const uint8_t *qs = x->qs, *qh = x->qh;
        for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
            const int sh = 6 * (ib % 2);
            const __m256 dl1 = _mm256_set1_ps(kern_iq1_scale(d, sc[ib / 2] >> sh));
            const __m256 dl2 = _mm256_set1_ps(kern_iq1_scale(d, sc[ib / 2] >> (sh + 3)));
            grid8_delta(y, dl1, kern_iq1s_grid[kern_iq1m_index(qs, qh, 0)],
                        iq1_delta((uint32_t)(qh[0] & 0x08) << 28));
            grid8_delta(y + 8, dl1, kern_iq1s_grid[kern_iq1m_index(qs, qh, 1)],
                        iq1_delta((uint32_t)(qh[0] & 0x80) << 24));
            grid8_delta(y + 16, dl2, kern_iq1s_grid[kern_iq1m_index(qs, qh, 2)],
                        iq1_delta((uint32_t)(qh[1] & 0x08) << 28));
            grid8_delta(y + 24, dl2, kern_iq1s_grid[kern_iq1m_index(qs, qh, 3)],
                        iq1_delta((uint32_t)(qh[1] & 0x80) << 24));
            y += 32;
        }
    }
}

/* ---- ternary and 1/2-bit ---- */

AVX2 static void avx2_tq2_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_tq2_0 *x = src;
    const __m256i mask2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (size_t i = 0; i < nb; i++, x++) {
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        for (int j = 0; j < 64; j += 32) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x->qs + j));
            for (int shift = 0; shift < 8; shift += 2, y += 32) {
                const __m256i q = _mm256_sub_epi8(
                    _mm256_and_si256(_mm256_srli_epi16(v, shift), mask2), one);
                put16_mul(y, _mm256_castsi256_si128(q), d);
                put16_mul(y + 16, _mm256_extracti128_si256(q, 1), d);
            }
        }
    }
}

/* tq1_0's trit extraction on 16 bytes at once: q = byte * 3^n (mod 256),
 * trit = (q * 3) >> 8, minus 1.  16-bit lanes hold the products. */
AVX2 static inline __m128i trits16(__m128i bytes, int pow3)
{
    const __m256i w = _mm256_cvtepu8_epi16(bytes);
    const __m256i q = _mm256_and_si256(_mm256_mullo_epi16(w, _mm256_set1_epi16((short)pow3)),
                                       _mm256_set1_epi16(0xff));
    const __m256i t = _mm256_srli_epi16(_mm256_mullo_epi16(q, _mm256_set1_epi16(3)), 8);
    const __m128i packed = _mm_packus_epi16(_mm256_castsi256_si128(t),
                                            _mm256_extracti128_si256(t, 1));
    return _mm_sub_epi8(packed, _mm_set1_epi8(1));
}

AVX2 static void avx2_tq1_0(const void *src, float *y, size_t nb)
{
    static const int pow3[5] = {1, 3, 9, 27, 81};
    const struct ggml_block_tq1_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += 256) {
        const float df = kern_ld_f16(x->d);
        const __m256 d = _mm256_set1_ps(df);
        const __m128i a0 = _mm_loadu_si128((const __m128i *)x->qs);
        const __m128i a1 = _mm_loadu_si128((const __m128i *)(x->qs + 16));
        const __m128i a2 = _mm_loadu_si128((const __m128i *)(x->qs + 32));
        for (int n = 0; n < 5; n++) {
            put16_mul(y + 32 * n, trits16(a0, pow3[n]), d);
            put16_mul(y + 32 * n + 16, trits16(a1, pow3[n]), d);
            put16_mul(y + 160 + 16 * n, trits16(a2, pow3[n]), d);
        }
        /* the last 16 elements: 4 trits of each byte of qh */
        for (int n = 0; n < 4; n++)
            for (int m = 0; m < 4; m++) {
                const uint8_t q = (uint8_t)(x->qh[m] * pow3[n]);
                y[240 + 4 * n + m] = (float)(((q * 3) >> 8) - 1) * df;
            }
    }
}

AVX2 static void avx2_q1_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q1_0 *x = src;
    const __m256i bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (size_t i = 0; i < nb; i++, x++) {
        /* ggml: bit ? d : -d, i.e. d with the sign flipped where clear */
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        for (int k = 0; k < 16; k++, y += 8) {
            const __m256i clear = _mm256_cmpeq_epi32(
                _mm256_and_si256(_mm256_set1_epi32(x->qs[k]), bits), _mm256_setzero_si256());
            _mm256_storeu_ps(y, _mm256_xor_ps(d, _mm256_castsi256_ps(_mm256_slli_epi32(clear, 31))));
        }
    }
}

AVX2 static void avx2_q2_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q2_0 *x = src;
    const __m256i shifts = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    const __m256i mask2 = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
    for (size_t i = 0; i < nb; i++, x++) {
        const __m256 d = _mm256_set1_ps(kern_ld_f16(x->d));
        for (int k = 0; k < 16; k += 2, y += 8) {
            /* elements 4k..4k+7: bytes k, k+1, four 2-bit codes each */
            const int b0 = x->qs[k], b1 = x->qs[k + 1];
            const __m256i v = _mm256_setr_epi32(b0, b0, b0, b0, b1, b1, b1, b1);
            const __m256i q = _mm256_sub_epi32(
                _mm256_and_si256(_mm256_srlv_epi32(v, shifts), mask2), one);
            _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

void kern_avx2_fill(kern_dequant_fn fn[GGML_T_COUNT])
{
    fn[GGML_T_F16] = avx2_f16;
    fn[GGML_T_BF16] = avx2_bf16;
    fn[GGML_T_Q4_0] = avx2_q4_0;
    fn[GGML_T_Q4_1] = avx2_q4_1;
    fn[GGML_T_Q5_0] = avx2_q5_0;
    fn[GGML_T_Q5_1] = avx2_q5_1;
    fn[GGML_T_Q8_0] = avx2_q8_0;
    fn[GGML_T_Q2_K] = avx2_q2_K;
    fn[GGML_T_Q3_K] = avx2_q3_K;
    fn[GGML_T_Q4_K] = avx2_q4_K;
    fn[GGML_T_Q5_K] = avx2_q5_K;
    fn[GGML_T_Q6_K] = avx2_q6_K;
    fn[GGML_T_IQ4_NL] = avx2_iq4_nl;
    fn[GGML_T_IQ4_XS] = avx2_iq4_xs;
    fn[GGML_T_MXFP4] = avx2_mxfp4;
    fn[GGML_T_NVFP4] = avx2_nvfp4;
    fn[GGML_T_IQ2_XXS] = avx2_iq2_xxs;
    fn[GGML_T_IQ2_XS] = avx2_iq2_xs;
    fn[GGML_T_IQ2_S] = avx2_iq2_s;
    fn[GGML_T_IQ3_XXS] = avx2_iq3_xxs;
    fn[GGML_T_IQ3_S] = avx2_iq3_s;
    fn[GGML_T_IQ1_S] = avx2_iq1_s;
    fn[GGML_T_IQ1_M] = avx2_iq1_m;
    fn[GGML_T_TQ1_0] = avx2_tq1_0;
    fn[GGML_T_TQ2_0] = avx2_tq2_0;
    fn[GGML_T_Q1_0] = avx2_q1_0;
    fn[GGML_T_Q2_0] = avx2_q2_0;
}

#else /* not x86: no AVX2 level (dequant.c never calls this) */

void kern_avx2_fill(kern_dequant_fn fn[GGML_T_COUNT])
{
    (void)fn;
}

#endif

/*
 * kernels/x86/dequant_avx512.c — AVX-512 (F, BW, VL, DQ) + F16C kernels.
 *
 * The exactness argument is the AVX2 one (see x86/dequant_avx2.c): every
 * output of ggml is one rounded multiply of exact operands, optionally
 * followed by one rounded add or subtract in a fixed operand order, so any
 * code that performs those same operations on the same operands, in any
 * vector width, gives the same bits.  No FMA, ggml's operand order for
 * adds and subtracts, scales computed as the reference does.
 *
 * What changes with AVX-512 is where the time goes.  On the cores we run
 * on, 512-bit float work issues on one port only, so "widen bytes to
 * dwords, convert to float, multiply" per element is no faster than AVX2.
 * The 4- and 5-bit formats are instead done by table: a block (or
 * sub-block) has at most 16 or 32 distinct codes, so its 16/32 possible
 * outputs are computed once per block with the exact per-element formula
 * (e.g. T[k] = (float)(k - 8) * d for q4_0), and the outputs are then
 * picked from the table by vpermps / vpermt2ps with the codes as indices.
 * Each output is the very same rounded value ggml computes for its code,
 * NaN payloads included, and the work per output is one shuffle.
 * vpermps reads only the low 4 bits of each index (vpermt2ps the low 5),
 * so codes need no masking when their garbage lies above those bits.
 *
 * Types with wider codes (q8_0, q6_K, q3_K, q2_K) use the direct method at
 * 512 bits, with the bit fiddling done on 64 bytes at a time.
 *
 * Per-function target attributes, as in the AVX2 file; dequant.c only
 * installs these after checking CPUID and XCR0 (opmask and ZMM state).
 * Types not here fall back to the AVX2 kernels.
 */
#include "kernels/dequant_impl.h"
#include "kernels/tables.h"
#include "kernels/unpack.h"
#include "gguf/blocks.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))

/* ---- building blocks ---- */

/* The fp16 at p, converted by vcvtph2ps: exact for every half, and it
 * quiets NaNs as ggml does (same as the AVX2 f16 kernel relies on); no
 * branches, unlike the portable software conversion. */
AVX512 static inline float f16_at(const uint8_t *p)
{
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(kern_le16(p))));
}

AVX512 static inline __m512 f16_bcast(const uint8_t *p)
{
    return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(kern_le16(p))));
}

/* 16 signed bytes -> 16 floats. */
AVX512 static inline __m512 i8x16_to_ps(__m128i v)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}

/* 16 bytes at p, zero-extended to dword lanes: table indices. */
AVX512 static inline __m512i idx16(const uint8_t *p)
{
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}

/* The 16 floats of a signed-byte table (iq4_nl levels, FP4 values). */
AVX512 static inline __m512 table_ps(const int8_t *t)
{
    return i8x16_to_ps(_mm_loadu_si128((const __m128i *)t));
}

/* y[0..31] from 16 nibble-pair bytes at p through the 16-entry table t:
 * low nibbles give y[0..15], high nibbles y[16..31] (the layout of every
 * 32-element 4-bit block).  The index lanes hold whole bytes; vpermps
 * ignores bits 4..31, so the low nibble needs no mask. */
AVX512 static inline void put32_nibbles(float *y, const uint8_t *p, __m512 t)
{
    const __m512i v = idx16(p);
    _mm512_storeu_ps(y, _mm512_permutexvar_ps(v, t));
    _mm512_storeu_ps(y + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), t));
}

/* y[0..63] = the 64 signed bytes of v, 16 at a time, times dl[0..3]. */
AVX512 static inline void put64_scaled(float *y, __m512i v, const float *dl)
{
    _mm512_storeu_ps(y, _mm512_mul_ps(
        i8x16_to_ps(_mm512_castsi512_si128(v)), _mm512_set1_ps(dl[0])));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(
        i8x16_to_ps(_mm512_extracti32x4_epi32(v, 1)), _mm512_set1_ps(dl[1])));
    _mm512_storeu_ps(y + 32, _mm512_mul_ps(
        i8x16_to_ps(_mm512_extracti32x4_epi32(v, 2)), _mm512_set1_ps(dl[2])));
    _mm512_storeu_ps(y + 48, _mm512_mul_ps(
        i8x16_to_ps(_mm512_extracti32x4_epi32(v, 3)), _mm512_set1_ps(dl[3])));
}

/* 0, 1, ..., 15 and 16, ..., 31 as floats: the codes of table entries. */
AVX512 static inline __m512 iota_ps(float base)
{
    return _mm512_add_ps(_mm512_set1_ps(base),
        _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

/* ---- plain element types ---- */

AVX512 static void avx512_f16(const void *src, float *y, size_t n)
{
    const uint8_t *p = src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(p + 2 * i));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(p + 2 * i + 32));
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(a));
        _mm512_storeu_ps(y + i + 16, _mm512_cvtph_ps(b));
    }
    for (; i < n; i++)
        y[i] = kern_ld_f16(p + 2 * i);
}

AVX512 static void avx512_bf16(const void *src, float *y, size_t n)
{
    /* bit moves only: bf16 is the top half of a float */
    const uint8_t *p = src;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(p + 2 * i));
        const __m256i b = _mm256_loadu_si256((const __m256i *)(p + 2 * i + 32));
        _mm512_storeu_si512(y + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(a), 16));
        _mm512_storeu_si512(y + i + 16, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
    for (; i < n; i++)
        y[i] = kern_bits_to_f32((uint32_t)kern_le16(p + 2 * i) << 16);
}

/* ---- 32-element blocks: one table per block ---- */

AVX512 static void avx512_q4_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_0 *x = src;
    const __m512 codes = iota_ps(-8.0f); /* (float)(nibble - 8) */
    for (size_t i = 0; i < nb; i++, x++, y += 32)
        /* ggml: (nibble - 8) * d */
        put32_nibbles(y, x->qs, _mm512_mul_ps(codes, f16_bcast(x->d)));
}

AVX512 static void avx512_q4_1(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_1 *x = src;
    const __m512 codes = iota_ps(0.0f);
    for (size_t i = 0; i < nb; i++, x++, y += 32)
        /* ggml: nibble * d + m, product first */
        put32_nibbles(y, x->qs, _mm512_add_ps(_mm512_mul_ps(codes, f16_bcast(x->d)),
                                              f16_bcast(x->m)));
}

/* q5_0/q5_1 indices: the 32 five-bit codes of a block as bytes, in
 * output order (low nibbles, then high nibbles), with bit 4 of code j
 * taken from bit j of qh.  qh is already an opmask in that order. */
AVX512 static inline __m256i q5_codes(const uint8_t *qs, uint32_t qh)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i n = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1),
        _mm256_set1_epi8(0x0f));
    /* (bytes have no masked OR; bit 4 is clear, so adding 16 sets it) */
    return _mm256_mask_add_epi8(n, (__mmask32)qh, n, _mm256_set1_epi8(0x10));
}

/* y[0..31] from 32 five-bit codes through the 32-entry table (lo, hi). */
AVX512 static inline void put32_codes32(float *y, __m256i c, __m512 lo, __m512 hi)
{
    const __m512i a = _mm512_cvtepu8_epi32(_mm256_castsi256_si128(c));
    const __m512i b = _mm512_cvtepu8_epi32(_mm256_extracti128_si256(c, 1));
    _mm512_storeu_ps(y, _mm512_permutex2var_ps(lo, a, hi));
    _mm512_storeu_ps(y + 16, _mm512_permutex2var_ps(lo, b, hi));
}

AVX512 static void avx512_q5_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_0 *x = src;
    const __m512 c_lo = iota_ps(-16.0f), c_hi = iota_ps(0.0f);
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        /* ggml: (code - 16) * d */
        const __m512 d = f16_bcast(x->d);
        put32_codes32(y, q5_codes(x->qs, kern_le32(x->qh)),
                      _mm512_mul_ps(c_lo, d), _mm512_mul_ps(c_hi, d));
    }
}

AVX512 static void avx512_q5_1(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_1 *x = src;
    const __m512 c_lo = iota_ps(0.0f), c_hi = iota_ps(16.0f);
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        /* ggml: code * d + m */
        const __m512 d = f16_bcast(x->d), m = f16_bcast(x->m);
        put32_codes32(y, q5_codes(x->qs, kern_le32(x->qh)),
                      _mm512_add_ps(_mm512_mul_ps(c_lo, d), m),
                      _mm512_add_ps(_mm512_mul_ps(c_hi, d), m));
    }
}

AVX512 static void avx512_q8_0(const void *src, float *y, size_t nb)
{
    /* 256 codes: too many for a table; convert and multiply directly */
    const struct ggml_block_q8_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += 32) {
        const __m512 d = f16_bcast(x->d);
        _mm512_storeu_ps(y, _mm512_mul_ps(
            i8x16_to_ps(_mm_loadu_si128((const __m128i *)x->qs)), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(
            i8x16_to_ps(_mm_loadu_si128((const __m128i *)(x->qs + 16))), d));
    }
}

AVX512 static void avx512_iq4_nl(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq4_nl *x = src;
    const __m512 levels = table_ps(kern_kvalues_iq4nl);
    for (size_t i = 0; i < nb; i++, x++, y += 32)
        /* ggml: d * level (one non-NaN operand: order is immaterial) */
        put32_nibbles(y, x->qs, _mm512_mul_ps(f16_bcast(x->d), levels));
}

AVX512 static void avx512_mxfp4(const void *src, float *y, size_t nb)
{
    const struct ggml_block_mxfp4 *x = src;
    const __m512 levels = table_ps(kern_kvalues_mxfp4);
    for (size_t i = 0; i < nb; i++, x++, y += 32)
        put32_nibbles(y, x->qs, _mm512_mul_ps(levels, _mm512_set1_ps(kern_e8m0_half(x->e))));
}

AVX512 static void avx512_nvfp4(const void *src, float *y, size_t nb)
{
    const struct ggml_block_nvfp4 *x = src;
    const __m512 levels = table_ps(kern_kvalues_mxfp4);
    for (size_t i = 0; i < nb; i++, x++, y += 64) {
        /* sub-block s (16 elements, own scale) is bytes 8s..8s+7: their
         * low nibbles, then their high nibbles.  Shifting the 16-bit lanes
         * right by 4 puts each high nibble in its byte's low bits (the
         * neighbour's bits above them are ignored by vpermps). */
        for (int s = 0; s < 4; s += 2) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(x->qs + 8 * s));
            const __m128i h = _mm_srli_epi16(v, 4);
            const __m512 t0 = _mm512_mul_ps(levels, _mm512_set1_ps(kern_ue4m3_half[x->d[s]]));
            const __m512 t1 = _mm512_mul_ps(levels, _mm512_set1_ps(kern_ue4m3_half[x->d[s + 1]]));
            _mm512_storeu_ps(y + 16 * s, _mm512_permutexvar_ps(
                _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(v, h)), t0));
            _mm512_storeu_ps(y + 16 * s + 16, _mm512_permutexvar_ps(
                _mm512_cvtepu8_epi32(_mm_unpackhi_epi64(v, h)), t1));
        }
    }
}

/* ---- k-quants ---- */

/*
 * q4_K/q5_K: the 8 six-bit scales and 8 mins packed in the 12 bytes at q,
 * decoded in registers (lanes 0-7 scales, 8-15 mins) and multiplied by
 * d (scales) or dmin (mins): out[j] = d * sc_j, out[8 + j] = dmin * m_j,
 * exact products as in ggml.  The packing, lane by lane (the vector
 * form of kern_k4_scale_min in unpack.h, which the tests hold it to):
 *   j < 4:  sc = q[j] & 63,            m = q[j + 4] & 63
 *   j >= 4: sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4,
 *           m  = (q[j + 4] >> 4) | (q[j] >> 6) << 4
 * 16 bytes are loaded from q; both block types have them.  The scalar
 * decode, with a broadcast per table, cost a fifth of q5_K's time.
 */
AVX512 static inline void k4_scales(const uint8_t *q, __m512 d_dmin, float out[16])
{
    const __m128i x = _mm_loadu_si128((const __m128i *)q);
    /* low bits: byte, shift, mask per lane */
    const __m512i a = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(x, _mm_setr_epi8(
        0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11)));
    const __m512i lo = _mm512_and_si512(
        _mm512_srlv_epi32(a, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0,
                                               0, 0, 0, 0, 4, 4, 4, 4)),
        _mm512_setr_epi32(63, 63, 63, 63, 15, 15, 15, 15,
                          63, 63, 63, 63, 15, 15, 15, 15));
    /* high 2 bits (j >= 4 only; index -1 gives a zero byte) */
    const __m512i h = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(x, _mm_setr_epi8(
        -1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7)));
    const __m512i v = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_srli_epi32(h, 6), 4));
    _mm512_storeu_ps(out, _mm512_mul_ps(d_dmin, _mm512_cvtepi32_ps(v)));
}

/* [d x 8, dmin x 8] from the halves d and dmin. */
AVX512 static inline __m512 d_dmin(const uint8_t *d, const uint8_t *dmin)
{
    return _mm512_insertf32x8(_mm512_set1_ps(f16_at(d)),
                              _mm256_set1_ps(f16_at(dmin)), 1);
}

AVX512 static void avx512_q4_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_K *x = src;
    const __m512 codes = iota_ps(0.0f);
    for (size_t i = 0; i < nb; i++, x++) {
        float dm[16];
        k4_scales(x->scales, d_dmin(x->d, x->dmin), dm);
        const uint8_t *q = x->qs;
        /* 32 bytes per pair of sub-blocks: low nibbles are sub-block j,
         * high nibbles sub-block j + 1; a table per sub-block */
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            /* ggml: (d * sc) * nibble - dmin * m */
            const __m512 t0 = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(dm[j]), codes),
                                            _mm512_set1_ps(dm[8 + j]));
            const __m512 t1 = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(dm[j + 1]), codes),
                                            _mm512_set1_ps(dm[9 + j]));
            const __m512i a = idx16(q), c = idx16(q + 16);
            _mm512_storeu_ps(y, _mm512_permutexvar_ps(a, t0));
            _mm512_storeu_ps(y + 16, _mm512_permutexvar_ps(c, t0));
            _mm512_storeu_ps(y + 32, _mm512_permutexvar_ps(_mm512_srli_epi32(a, 4), t1));
            _mm512_storeu_ps(y + 48, _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), t1));
        }
    }
}

AVX512 static void avx512_q5_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_K *x = src;
    const __m512 c_lo = iota_ps(0.0f), c_hi = iota_ps(16.0f);
    const __m256i mask4 = _mm256_set1_epi8(0x0f), sixteen = _mm256_set1_epi8(0x10);
    for (size_t i = 0; i < nb; i++, x++) {
        float dm[16];
        k4_scales(x->scales, d_dmin(x->d, x->dmin), dm);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
        const uint8_t *q = x->qs;
        for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)q);
            /* fifth bit of code l: bit j (low nibbles) or j + 1 (high
             * nibbles) of qh[l], as an opmask straight from vptestmb,
             * then added (bit 4 of a nibble is clear) */
            const __m256i c0 = _mm256_mask_add_epi8(
                _mm256_and_si256(v, mask4),
                _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << j))),
                _mm256_and_si256(v, mask4), sixteen);
            const __m256i n1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask4);
            const __m256i c1 = _mm256_mask_add_epi8(
                n1, _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << (j + 1)))),
                n1, sixteen);
            for (int h = 0; h < 2; h++) {
                /* ggml: d1 * code - m1 */
                const __m512 d1 = _mm512_set1_ps(dm[j + h]);
                const __m512 m1 = _mm512_set1_ps(dm[8 + j + h]);
                put32_codes32(y + 32 * h, h ? c1 : c0,
                              _mm512_sub_ps(_mm512_mul_ps(d1, c_lo), m1),
                              _mm512_sub_ps(_mm512_mul_ps(d1, c_hi), m1));
            }
        }
    }
}

AVX512 static void avx512_q6_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q6_K *x = src;
    const __m512i mask4 = _mm512_set1_epi8(0x0f), mask2 = _mm512_set1_epi8(3);
    const __m512i bias = _mm512_set1_epi8(32);
    for (size_t i = 0; i < nb; i++, x++) {
        const __m512 d = f16_bcast(x->d);
        /* the 16 scales at once: (d * sc) is exact, as in ggml */
        float dl[16];
        _mm512_storeu_ps(dl, _mm512_mul_ps(d, i8x16_to_ps(
                                 _mm_loadu_si128((const __m128i *)x->scales))));
        const uint8_t *ql = x->ql, *qh = x->qh;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32) {
            /* planes 0|1 take the low nibbles of ql[0..63] and bits 0-1 |
             * 2-3 of qh; planes 2|3 the high nibbles and bits 4-5 | 6-7.
             * Putting qh and qh >> 2 side by side makes each pair one
             * 64-byte operation. */
            const __m512i l = _mm512_loadu_si512(ql);
            const __m256i h32 = _mm256_loadu_si256((const __m256i *)qh);
            const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(h32),
                                                 _mm256_srli_epi16(h32, 2), 1);
            const __m512i p01 = _mm512_sub_epi8(_mm512_or_si512(
                _mm512_and_si512(l, mask4),
                _mm512_slli_epi16(_mm512_and_si512(h, mask2), 4)), bias);
            const __m512i p23 = _mm512_sub_epi8(_mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi16(l, 4), mask4),
                _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), mask2), 4)), bias);
            put64_scaled(y, p01, dl + 8 * half);
            put64_scaled(y + 64, p23, dl + 8 * half + 4);
        }
    }
}

AVX512 static void avx512_q2_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q2_K *x = src;
    const __m512i mask2 = _mm512_set1_epi8(3);
    for (size_t i = 0; i < nb; i++, x++) {
        const __m512 d = f16_bcast(x->d), dmin = f16_bcast(x->dmin);
        /* 16 scale/min nibble pairs, in output order: d * (sc & 15) and
         * dmin * (sc >> 4), exact products */
        const __m512i sc = idx16(x->scales);
        float dl[16], ml[16];
        _mm512_storeu_ps(dl, _mm512_mul_ps(d, _mm512_cvtepi32_ps(
                                 _mm512_and_si512(sc, _mm512_set1_epi32(15)))));
        _mm512_storeu_ps(ml, _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(
                                 _mm512_srli_epi32(sc, 4))));
        /* 64 bytes of codes: half h is bytes 32h..32h+31, and shift 2s of
         * byte l is element 128h + 32s + l.  One 64-byte shift covers both
         * halves; their pieces are then stored 128 floats apart. */
        const __m512i v = _mm512_loadu_si512(x->qs);
        for (int s = 0; s < 4; s++) {
            const __m512i p = _mm512_and_si512(_mm512_srli_epi16(v, 2 * s), mask2);
            /* lanes 0,1 (half 0) then 2,3 (half 1) */
            const __m512i lo = _mm512_castsi256_si512(_mm512_castsi512_si256(p));
            const __m512i hi = _mm512_castsi256_si512(_mm512_extracti64x4_epi64(p, 1));
            for (int k = 0; k < 2; k++) {
                const __m512i part = k ? hi : lo;
                float *o = y + 128 * k + 32 * s;
                const int is = 8 * k + 2 * s;
                for (int e = 0; e < 2; e++) {
                    const __m128i q = e ? _mm512_extracti32x4_epi32(part, 1)
                                        : _mm512_castsi512_si128(part);
                    _mm512_storeu_ps(o + 16 * e, _mm512_sub_ps(
                        _mm512_mul_ps(_mm512_set1_ps(dl[is + e]), i8x16_to_ps(q)),
                        _mm512_set1_ps(ml[is + e])));
                }
            }
        }
        y += 256;
    }
}

AVX512 static void avx512_q3_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q3_K *x = src;
    const __m512i mask2 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    for (size_t i = 0; i < nb; i++, x++) {
        /* The 16 six-bit scales (the 12 bytes s of x->scales), one per
         * dword lane j, decoded as kern_q3k_scale (unpack.h) does: low 4
         * bits from nibble j / 8 of s[j % 8], high 2 bits from bits
         * 2 (j / 4) of s[8 + j % 4].  Done in registers: the scalar
         * decode took as long as the rest of the block.  The
         * 16 bytes loaded are the block's last, so the load stays inside
         * it: s is bytes 2..13 of them (d is 14..15). */
        const __m128i tail = _mm_loadu_si128((const __m128i *)((const uint8_t *)(x + 1) - 16));
        const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(
            _mm512_cvtepu8_epi32(_mm_shuffle_epi8(tail, _mm_setr_epi8(
                2, 3, 4, 5, 6, 7, 8, 9, 2, 3, 4, 5, 6, 7, 8, 9))),
            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4)),
            _mm512_set1_epi32(0x0f));
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(
            _mm512_cvtepu8_epi32(_mm_shuffle_epi8(tail, _mm_setr_epi8(
                10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13, 10, 11, 12, 13))),
            _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6)),
            _mm512_set1_epi32(3));
        /* ggml: d_all * (scale - 32), an exact product */
        float dl[16];
        _mm512_storeu_ps(dl, _mm512_mul_ps(f16_bcast(x->d), _mm512_cvtepi32_ps(
            _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)),
                             _mm512_set1_epi32(32)))));
        /* Same layout as q2_K: shift 2s of byte l of half h is element
         * 128h + 32s + l; its high bit is bit 4h + s of hmask[l].  With
         * hmask in both halves of a register, one vptestnmb per shift
         * finds the codes to lower by 4 in both halves. */
        const __m512i v = _mm512_loadu_si512(x->qs);
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->hmask));
        for (int sh = 0; sh < 4; sh++) {
            const __m512i bit = _mm512_inserti64x4(
                _mm512_set1_epi8((char)(1 << sh)), _mm256_set1_epi8((char)(1 << (4 + sh))), 1);
            __m512i p = _mm512_and_si512(_mm512_srli_epi16(v, 2 * sh), mask2);
            p = _mm512_mask_sub_epi8(p, _mm512_testn_epi8_mask(hm, bit), p, four);
            for (int k = 0; k < 2; k++) {
                const __m256i part = k ? _mm512_extracti64x4_epi64(p, 1)
                                       : _mm512_castsi512_si256(p);
                float *o = y + 128 * k + 32 * sh;
                const int is = 8 * k + 2 * sh;
                /* ggml: dl * code */
                _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_set1_ps(dl[is]),
                                                  i8x16_to_ps(_mm256_castsi256_si128(part))));
                _mm512_storeu_ps(o + 16, _mm512_mul_ps(_mm512_set1_ps(dl[is + 1]),
                                                       i8x16_to_ps(_mm256_extracti128_si256(part, 1))));
            }
        }
        y += 256;
    }
}

AVX512 static void avx512_iq4_xs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq4_xs *x = src;
    const __m512 levels = table_ps(kern_kvalues_iq4nl);
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = f16_at(x->d);
        const uint16_t sh = kern_le16(x->scales_h);
        const uint8_t *qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 16, y += 32) {
            /* ggml: dl * level, dl = d * scale (exact) */
            const float dl = d * (float)kern_iq4xs_scale(ib, sh, x->scales_l);
            put32_nibbles(y, qs, _mm512_mul_ps(_mm512_set1_ps(dl), levels));
        }
    }
}

/* ---- ternary ---- */

AVX512 static void avx512_tq2_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_tq2_0 *x = src;
    /* codes 0..3 mean -1..2; the table repeats every 4 entries, so the
     * shifted byte's bits 2-3 (the next code) do not matter */
    const __m512 codes = _mm512_setr_ps(-1, 0, 1, 2, -1, 0, 1, 2,
                                        -1, 0, 1, 2, -1, 0, 1, 2);
    for (size_t i = 0; i < nb; i++, x++) {
        /* ggml: (float)(code - 1) * d */
        const __m512 t = _mm512_mul_ps(codes, f16_bcast(x->d));
        for (int j = 0; j < 64; j += 32, y += 128)
            for (int e = 0; e < 32; e += 16) {
                const __m512i v = idx16(x->qs + j + e);
                for (int sh = 0; sh < 4; sh++)
                    _mm512_storeu_ps(y + 32 * sh + e, _mm512_permutexvar_ps(
                        _mm512_srli_epi32(v, 2 * sh), t));
            }
    }
}

void kern_avx512_fill(kern_dequant_fn fn[GGML_T_COUNT])
{
    fn[GGML_T_F16] = avx512_f16;
    fn[GGML_T_BF16] = avx512_bf16;
    fn[GGML_T_Q4_0] = avx512_q4_0;
    fn[GGML_T_Q4_1] = avx512_q4_1;
    fn[GGML_T_Q5_0] = avx512_q5_0;
    fn[GGML_T_Q5_1] = avx512_q5_1;
    fn[GGML_T_Q8_0] = avx512_q8_0;
    fn[GGML_T_Q2_K] = avx512_q2_K;
    fn[GGML_T_Q3_K] = avx512_q3_K;
    fn[GGML_T_Q4_K] = avx512_q4_K;
    fn[GGML_T_Q5_K] = avx512_q5_K;
    fn[GGML_T_Q6_K] = avx512_q6_K;
    fn[GGML_T_IQ4_NL] = avx512_iq4_nl;
    fn[GGML_T_IQ4_XS] = avx512_iq4_xs;
    fn[GGML_T_MXFP4] = avx512_mxfp4;
    fn[GGML_T_NVFP4] = avx512_nvfp4;
    fn[GGML_T_TQ2_0] = avx512_tq2_0;
}

#else /* not x86: no AVX-512 level (dequant.c never calls this) */

void kern_avx512_fill(kern_dequant_fn fn[GGML_T_COUNT])
{
    (void)fn;
}

#endif

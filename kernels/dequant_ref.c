/*
 * kernels/dequant_ref.c — the portable scalar reference for every type.
 *
 * One function per ggml type, each decoding whole blocks.  The block
 * layouts and the arithmetic are those of ggml (ggml-common.h and
 * ggml-quants.c; MIT, "The ggml authors"); the code is our own.
 *
 * "Bit-identical to ggml" constrains more than the formulas: each output is
 * the result of a fixed sequence of float operations, each rounded, so the
 * operations below happen in ggml's order and grouping (e.g. q6_K is
 * (d * scale) * q, not d * (scale * q)), without fused multiply-add (ggml's
 * base library is built for plain x86-64, which has none; meson passes
 * -ffp-contract=off so the compiler cannot fuse them either), and
 * negation is a sign flip, as ggml's compiled code does it (that matters
 * only for NaN).  Integer parts are computed in int, as in ggml, and
 * converted once.
 *
 * Blocks are read through their layouts in gguf/blocks.h, whose fields
 * are all bytes: a block may sit at any address, and multi-byte fields are
 * assembled little-endian by the loads of dequant_impl.h.
 */
#include "dequant_impl.h"
#include "tables.h"
#include "unpack.h"

#include "dequant.h"
#include "gguf/blocks.h"

/* ---------------- plain element types ---------------- */

static void deq_f32(const void *src, float *dst, size_t n)
{
    /* Copy bits: a signalling NaN must stay signalling. */
    memcpy(dst, src, n * sizeof(float));
}

static void deq_f16(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = kern_ld_f16(p + 2 * i);
}

static void deq_bf16(const void *src, float *dst, size_t n)
{
    /* bf16 is the top half of a float: no rounding, NaN kept as is. */
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = kern_bits_to_f32((uint32_t)kern_le16(p + 2 * i) << 16);
}

/* Integers and f64 have no ggml to_float; they are converted value by
 * value as C converts them (round to nearest for i32/i64/f64). */
static void deq_i8(const void *src, float *dst, size_t n)
{
    const int8_t *p = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)p[i];
}

static void deq_i16(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)(int16_t)kern_le16(p + 2 * i);
}

static void deq_i32(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)(int32_t)kern_le32(p + 4 * i);
}

static void deq_i64(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)(int64_t)kern_le64(p + 8 * i);
}

static void deq_f64(const void *src, float *dst, size_t n)
{
    const uint8_t *p = src;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = kern_le64(p + 8 * i);
        double d;
        memcpy(&d, &u, sizeof d);
        dst[i] = (float)d;
    }
}

/* ---------------- 32-element blocks: q4_0 ... q8_0 ---------------- */

/* q4_0: d (f16), 16 bytes of nibbles.  Low nibbles are elements 0..15,
 * high nibbles 16..31; value = (q - 8) * d. */
static void deq_q4_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK4_0) {
        const float d = kern_ld_f16(x->d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x->qs[j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((x->qs[j] >> 4) - 8) * d;
        }
    }
}

/* q4_1: d, m (f16), nibbles as q4_0; value = q * d + m (two roundings). */
static void deq_q4_1(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_1 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK4_1) {
        const float d = kern_ld_f16(x->d), m = kern_ld_f16(x->m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x->qs[j] & 0x0f) * d + m;
            y[j + 16] = (float)(x->qs[j] >> 4) * d + m;
        }
    }
}

/* q5_0: d, 32 high bits (bit j is the fifth bit of element j), nibbles;
 * value = (q - 16) * d. */
static void deq_q5_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK5_0) {
        const float d = kern_ld_f16(x->d);
        const uint32_t qh = kern_le32(x->qh);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(((x->qs[j] & 0x0f) | h0) - 16) * d;
            y[j + 16] = (float)(((x->qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

/* q5_1: d, m, high bits, nibbles; value = q * d + m. */
static void deq_q5_1(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_1 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK5_1) {
        const float d = kern_ld_f16(x->d), m = kern_ld_f16(x->m);
        const uint32_t qh = kern_le32(x->qh);
        for (int j = 0; j < 16; j++) {
            const int h0 = (int)((qh >> j) & 1) << 4;
            const int h1 = (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)((x->qs[j] & 0x0f) | h0) * d + m;
            y[j + 16] = (float)((x->qs[j] >> 4) | h1) * d + m;
        }
    }
}

/* q8_0: d, 32 signed bytes; value = q * d. */
static void deq_q8_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q8_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK8_0) {
        const float d = kern_ld_f16(x->d);
        for (int j = 0; j < GGML_QK8_0; j++)
            y[j] = (float)(int8_t)x->qs[j] * d;
    }
}

/* iq4_nl: d, nibbles indexing the non-linear level table. */
static void deq_iq4_nl(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq4_nl *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK4_NL) {
        const float d = kern_ld_f16(x->d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)kern_kvalues_iq4nl[x->qs[j] & 0x0f];
            y[j + 16] = d * (float)kern_kvalues_iq4nl[x->qs[j] >> 4];
        }
    }
}

/* mxfp4: one E8M0 exponent, nibbles indexing the (doubled) FP4 table. */
static void deq_mxfp4(const void *src, float *y, size_t nb)
{
    const struct ggml_block_mxfp4 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK_MXFP4) {
        const float d = kern_e8m0_half(x->e);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)kern_kvalues_mxfp4[x->qs[j] & 0x0f] * d;
            y[j + 16] = (float)kern_kvalues_mxfp4[x->qs[j] >> 4] * d;
        }
    }
}

/* nvfp4: 64 elements as four sub-blocks of 16, each with its own UE4M3
 * scale byte, then 8 bytes of nibbles per sub-block (low nibbles first 8
 * elements, high nibbles last 8). */
static void deq_nvfp4(const void *src, float *y, size_t nb)
{
    const struct ggml_block_nvfp4 *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        for (int s = 0; s < 4; s++, y += GGML_QK_NVFP4_SUB) {
            const float d = kern_ue4m3_half[x->d[s]];
            const uint8_t *q = x->qs + 8 * s;
            for (int j = 0; j < 8; j++) {
                y[j] = (float)kern_kvalues_mxfp4[q[j] & 0x0f] * d;
                y[j + 8] = (float)kern_kvalues_mxfp4[q[j] >> 4] * d;
            }
        }
    }
}

/* q1_0: d, then one bit per element (element j is bit j%8 of byte j/8):
 * set means +d, clear means -d. */
static void deq_q1_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q1_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK1_0) {
        /* ggml: bit ? d : -d; the sign flip is done on the bits (no
         * branch on random data) */
        uint32_t du;
        const float d = kern_ld_f16(x->d);
        memcpy(&du, &d, sizeof du);
        for (int j = 0; j < GGML_QK1_0; j++) {
            const uint32_t clear = ~((uint32_t)x->qs[j / 8] >> (j % 8)) & 1;
            y[j] = kern_bits_to_f32(du ^ (clear << 31));
        }
    }
}

/* q2_0: d, then 2 bits per element, element j at bits 2*(j%4) of byte
 * j/4; codes 0..3 mean -1, 0, +1, +2 times d. */
static void deq_q2_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q2_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++, y += GGML_QK2_0) {
        const float d = kern_ld_f16(x->d);
        for (int j = 0; j < GGML_QK2_0; j++)
            y[j] = (float)(((x->qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

/* ---------------- k-quants: 256-element super-blocks ---------------- */

/* q2_K: 16 bytes of (scale | min << 4), 64 bytes of 2-bit quants, d, dmin.
 * Each 32-byte half of qs holds 128 elements in four 2-bit planes;
 * value = (d * scale) * q - (dmin * min). */
static void deq_q2_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q2_K *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d), dmin = kern_ld_f16(x->dmin);
        const uint8_t *sc = x->scales, *q = x->qs;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++) { /* two 16-element groups */
                    const uint8_t s = *sc++;
                    const float dl = d * (float)(s & 0x0f);
                    const float ml = dmin * (float)(s >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (float)((q[16 * k + l] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* q3_K: 32 bytes of high bits, 64 bytes of low 2 bits, 12 bytes holding
 * sixteen 6-bit scales (biased by 32), d.  A clear high bit subtracts 4;
 * value = (d * (scale - 32)) * q. */
static void deq_q3_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q3_K *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d_all = kern_ld_f16(x->d);
        const uint8_t *hm = x->hmask, *q = x->qs, *s = x->scales;
        int scale[16];
        for (int j = 0; j < 16; j++)
            scale[j] = kern_q3k_scale(j, s);
        int is = 0;
        uint8_t m = 1;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++) {
                    const float dl = d_all * (float)scale[is++];
                    for (int l = 16 * k; l < 16 * k + 16; l++) {
                        const int v = ((q[l] >> shift) & 3) - (hm[l] & m ? 0 : 4);
                        *y++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

/* q4_K: d, dmin, 12 scale bytes, 128 bytes of nibbles; each 32 bytes hold
 * 64 elements (low nibbles first).  value = (d*sc) * q - (dmin*min). */
static void deq_q4_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q4_K *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d), dmin = kern_ld_f16(x->dmin);
        const uint8_t *q = x->qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            float d1, m1, d2, m2;
            kern_k4_dm(j, x->scales, d, dmin, &d1, &m1);
            kern_k4_dm(j + 1, x->scales, d, dmin, &d2, &m2);
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 0x0f) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* q5_K: as q4_K plus 32 bytes of fifth bits: element l of the 64-element
 * group g takes bit 2g (low nibble) or 2g+1 (high nibble) of qh[l]. */
static void deq_q5_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q5_K *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d), dmin = kern_ld_f16(x->dmin);
        const uint8_t *qh = x->qh, *q = x->qs;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 8; j += 2, q += 32, u1 <<= 2, u2 <<= 2) {
            float d1, m1, d2, m2;
            kern_k4_dm(j, x->scales, d, dmin, &d1, &m1);
            kern_k4_dm(j + 1, x->scales, d, dmin, &d2, &m2);
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] & 0x0f) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* q6_K: 128 bytes of low nibbles, 64 bytes of 2-bit high parts, 16 signed
 * 8-bit scales, d.  Each 128-element half uses 64 ql, 32 qh bytes and 8
 * scales; value = (d * scale) * (q - 32). */
static void deq_q6_K(const void *src, float *y, size_t nb)
{
    const struct ggml_block_q6_K *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *ql = x->ql, *qh = x->qh;
        const int8_t *sc = (const int8_t *)x->scales;
        for (int half = 0; half < 2; half++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

/* ---------------- ternary ---------------- */

/* tq1_0: 48 bytes of 5 trits each, 4 bytes of 4 trits each, d.  A byte
 * holds its trits as a base-3 fraction: multiplying it by 3^n (mod 256)
 * brings trit n to the top, and (q * 3) >> 8 extracts it (0, 1, 2). */
static void deq_tq1_0(const void *src, float *y, size_t nb)
{
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const struct ggml_block_tq1_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        /* qs[0..31]: 5 planes of 32; qs[32..47]: 5 planes of 16; qh: 4
         * planes of 4 */
        for (int n = 0; n < 5; n++)
            for (int m = 0; m < 32; m++) {
                const uint8_t q = (uint8_t)(x->qs[m] * pow3[n]);
                *y++ = (float)(((q * 3) >> 8) - 1) * d;
            }
        for (int n = 0; n < 5; n++)
            for (int m = 32; m < 48; m++) {
                const uint8_t q = (uint8_t)(x->qs[m] * pow3[n]);
                *y++ = (float)(((q * 3) >> 8) - 1) * d;
            }
        for (int n = 0; n < 4; n++)
            for (int m = 0; m < 4; m++) {
                const uint8_t q = (uint8_t)(x->qh[m] * pow3[n]);
                *y++ = (float)(((q * 3) >> 8) - 1) * d;
            }
    }
}

/* tq2_0: 64 bytes of 2-bit codes (four planes of 32 per 32 bytes), d;
 * value = (q - 1) * d. */
static void deq_tq2_0(const void *src, float *y, size_t nb)
{
    const struct ggml_block_tq2_0 *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        for (int j = 0; j < 64; j += 32)
            for (int shift = 0; shift < 8; shift += 2)
                for (int m = 0; m < 32; m++)
                    *y++ = (float)(((x->qs[j + m] >> shift) & 3) - 1) * d;
    }
}

/* ---------------- i-quants ---------------- */

/* v with its sign flipped if bit is 1 — a sign flip, like ggml's compiled
 * "v * (sign ? -1 : 1)", so a NaN's sign flips too.  Done on the bits
 * because the sign bits are random: a branch would be mispredicted half
 * the time. */
static inline float flip_sign(float v, unsigned bit)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return kern_bits_to_f32(u ^ ((uint32_t)(bit & 1) << 31));
}

/* Eight grid bytes times db, each negated where its sign bit is set
 * (ggml: db * grid[j] * (signs & (1 << j) ? -1 : 1)). */
static inline void grid8(float *y, float db, uint64_t grid, uint8_t signs)
{
    for (int j = 0; j < 8; j++)
        y[j] = flip_sign(db * (float)(uint8_t)(grid >> (8 * j)), signs >> j);
}

static inline void grid4(float *y, float db, uint32_t grid, uint8_t signs)
{
    for (int j = 0; j < 4; j++)
        y[j] = flip_sign(db * (float)(uint8_t)(grid >> (8 * j)), signs >> j);
}

/* iq2_xxs: d, then per 32 elements two 32-bit words: four 8-bit grid
 * indices, and 4 x 7 sign bits plus a 4-bit scale in the top bits. */
static void deq_iq2_xxs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq2_xxs *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *idx = x->qs + 8 * ib;
            const uint32_t aux = kern_le32(idx + 4);
            const float db = kern_iq2_scale(d, aux >> 28);
            for (int l = 0; l < 4; l++, y += 8)
                grid8(y, db, kern_iq2xxs_grid[idx[l]],
                      kern_ksigns_iq2xs[(aux >> (7 * l)) & 127]);
        }
    }
}

/* iq2_xs: d, 32 16-bit words (9-bit grid index, 7 sign bits), then eight
 * bytes of two 4-bit scales (one per 16 elements). */
static void deq_iq2_xs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq2_xs *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t s = x->scales[ib];
            const float db[2] = {kern_iq2_scale(d, s & 0x0f), kern_iq2_scale(d, s >> 4)};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint16_t w = kern_le16(x->qs + 2 * (4 * ib + l));
                grid8(y, db[l / 2], kern_iq2xs_grid[w & 511],
                      kern_ksigns_iq2xs[w >> 9]);
            }
        }
    }
}

/* iq2_s: d, 32 bytes of low grid-index bits, 32 bytes of explicit signs,
 * 8 bytes of high index bits (2 per group of 8), 8 bytes of scales. */
static void deq_iq2_s(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq2_s *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *qs = x->qs, *signs = x->signs, *qh = x->qh;
        for (int ib = 0; ib < 8; ib++, qs += 4, signs += 4) {
            const uint8_t s = x->scales[ib];
            const float db[2] = {kern_iq2_scale(d, s & 0x0f), kern_iq2_scale(d, s >> 4)};
            for (int l = 0; l < 4; l++, y += 8) {
                grid8(y, db[l / 2], kern_iq2s_grid[kern_iq2s_index(qs, qh[ib], l)],
                      signs[l]);
            }
        }
    }
}

/* iq3_xxs: d, 64 bytes of 8-bit indices into a grid of 4 magnitudes, then
 * per 32 elements a 32-bit word of 4 x 7 sign bits and a 4-bit scale. */
static void deq_iq3_xxs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq3_xxs *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const uint32_t aux = kern_le32(x->scales_signs + 4 * ib);
            const float db = kern_iq3xxs_scale(d, aux >> 28);
            for (int l = 0; l < 4; l++, y += 8) {
                const uint8_t signs = kern_ksigns_iq2xs[(aux >> (7 * l)) & 127];
                grid4(y, db, kern_iq3xxs_grid[qs[2 * l]], signs);
                grid4(y + 4, db, kern_iq3xxs_grid[qs[2 * l + 1]], signs >> 4);
            }
        }
    }
}

/* iq3_s: d, 64 bytes of low index bits, 8 bytes of ninth index bits, 32
 * bytes of explicit signs, 4 bytes of two 4-bit scales (odd: 1 + 2s). */
static void deq_iq3_s(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq3_s *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *qs = x->qs, *qh = x->qh, *signs = x->signs;
        for (int ib = 0; ib < 8; ib++, qs += 8, signs += 4) {
            const float db = kern_iq3s_scale(d, ib, x->scales);
            for (int l = 0; l < 4; l++, y += 8) {
                grid4(y, db, kern_iq3s_grid[kern_iq3s_index(qs, qh[ib], 2 * l)],
                      signs[l]);
                grid4(y + 4, db, kern_iq3s_grid[kern_iq3s_index(qs, qh[ib], 2 * l + 1)],
                      signs[l] >> 4);
            }
        }
    }
}

/* iq1_s: d, 32 bytes of low index bits, eight 16-bit words: 4 x 3 high
 * index bits, a 3-bit scale and the sign of a +-1/8 shift.
 * value = (d * (2s + 1)) * (grid + delta). */
static void deq_iq1_s(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq1_s *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint8_t *qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 4) {
            const uint16_t qh = kern_le16(x->qh + 2 * ib);
            const float dl = kern_iq1_scale(d, qh >> 12);
            const float delta = qh & 0x8000 ? -0.125f : 0.125f;
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t g = kern_iq1s_grid[kern_iq1s_index(qs, qh, l)];
                for (int j = 0; j < 8; j++)
                    y[j] = dl * ((float)(int8_t)(g >> (8 * j)) + delta);
            }
        }
    }
}

/* iq1_m: 32 bytes of low index bits, 16 bytes of (3 high index bits +
 * shift sign) nibbles, 8 bytes of 3-bit scales whose spare top nibbles
 * (one per 16-bit word) together form the f16 super-block scale. */
static void deq_iq1_m(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq1_m *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        uint16_t sc[4];
        const float d = kern_iq1m_scales(x, sc);
        const uint8_t *qs = x->qs, *qh = x->qh;
        for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
            const int sh = 6 * (ib % 2);
            const float dl1 = kern_iq1_scale(d, sc[ib / 2] >> sh);
            const float dl2 = kern_iq1_scale(d, sc[ib / 2] >> (sh + 3));
            const int idx[4] = {kern_iq1m_index(qs, qh, 0), kern_iq1m_index(qs, qh, 1),
                                kern_iq1m_index(qs, qh, 2), kern_iq1m_index(qs, qh, 3)};
            const float delta[4] = {qh[0] & 0x08 ? -0.125f : 0.125f,
                                    qh[0] & 0x80 ? -0.125f : 0.125f,
                                    qh[1] & 0x08 ? -0.125f : 0.125f,
                                    qh[1] & 0x80 ? -0.125f : 0.125f};
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t g = kern_iq1s_grid[idx[l]];
                const float dl = l < 2 ? dl1 : dl2;
                for (int j = 0; j < 8; j++)
                    y[j] = dl * ((float)(int8_t)(g >> (8 * j)) + delta[l]);
            }
        }
    }
}

/* iq4_xs: d, 16-bit word of high scale bits (2 per 32 elements), 4 bytes
 * of low scale nibbles, 128 bytes of iq4_nl-style nibbles;
 * value = (d * (scale - 32)) * level. */
static void deq_iq4_xs(const void *src, float *y, size_t nb)
{
    const struct ggml_block_iq4_xs *x = src;
    for (size_t i = 0; i < nb; i++, x++) {
        const float d = kern_ld_f16(x->d);
        const uint16_t sh = kern_le16(x->scales_h);
        const uint8_t *qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 16, y += 32) {
            const float dl = d * (float)kern_iq4xs_scale(ib, sh, x->scales_l);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)kern_kvalues_iq4nl[qs[j] & 0x0f];
                y[j + 16] = dl * (float)kern_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* ---------------- the table ---------------- */

static const kern_dequant_fn ref_kernels[GGML_T_COUNT] = {
    [GGML_T_F32] = deq_f32,         [GGML_T_F16] = deq_f16,
    [GGML_T_BF16] = deq_bf16,       [GGML_T_I8] = deq_i8,
    [GGML_T_I16] = deq_i16,         [GGML_T_I32] = deq_i32,
    [GGML_T_I64] = deq_i64,         [GGML_T_F64] = deq_f64,
    [GGML_T_Q4_0] = deq_q4_0,       [GGML_T_Q4_1] = deq_q4_1,
    [GGML_T_Q5_0] = deq_q5_0,       [GGML_T_Q5_1] = deq_q5_1,
    [GGML_T_Q8_0] = deq_q8_0,       [GGML_T_Q2_K] = deq_q2_K,
    [GGML_T_Q3_K] = deq_q3_K,       [GGML_T_Q4_K] = deq_q4_K,
    [GGML_T_Q5_K] = deq_q5_K,       [GGML_T_Q6_K] = deq_q6_K,
    [GGML_T_IQ2_XXS] = deq_iq2_xxs, [GGML_T_IQ2_XS] = deq_iq2_xs,
    [GGML_T_IQ2_S] = deq_iq2_s,     [GGML_T_IQ3_XXS] = deq_iq3_xxs,
    [GGML_T_IQ3_S] = deq_iq3_s,     [GGML_T_IQ1_S] = deq_iq1_s,
    [GGML_T_IQ1_M] = deq_iq1_m,     [GGML_T_IQ4_NL] = deq_iq4_nl,
    [GGML_T_IQ4_XS] = deq_iq4_xs,   [GGML_T_TQ1_0] = deq_tq1_0,
    [GGML_T_TQ2_0] = deq_tq2_0,     [GGML_T_MXFP4] = deq_mxfp4,
    [GGML_T_NVFP4] = deq_nvfp4,     [GGML_T_Q1_0] = deq_q1_0,
    [GGML_T_Q2_0] = deq_q2_0,
    /* q8_1 and q8_K: ggml has no to_float for them (they are only the
     * intermediate format of dot products), so neither do we. */
};

kern_dequant_fn kern_ref_kernel(uint32_t type)
{
    return type < GGML_T_COUNT ? ref_kernels[type] : NULL;
}

void kern_dequant_ref(uint32_t type, const void *src, float *dst,
                      size_t n_blocks)
{
    ref_kernels[type](src, dst, n_blocks);
}

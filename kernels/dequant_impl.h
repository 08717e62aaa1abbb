/*
 * kernels/dequant_impl.h — what the kernel files share, and the per-ISA
 * entry points the tests use.
 *
 * Every kernel has the same shape: n_blocks whole blocks of one type in,
 * n_blocks * blck_elems floats out, under the contract of dequant.h.  The
 * scalar reference (dequant_ref.c) has one for every supported type; each
 * ISA file (x86/dequant_avx2.c, x86/dequant_avx512.c) has them only for
 * the types it speeds up and leaves the rest to the level below.
 * dequant.c stacks the levels into one table at start-up.
 *
 * Not part of the public API (dequant.h): only kernels/ and tests/kernels
 * include this.  Helpers for the packed fields of block types are in
 * unpack.h, the codebooks of the i-quants in tables.h.
 */
#ifndef KERNELS_DEQUANT_IMPL_H
#define KERNELS_DEQUANT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/types.h"

typedef void (*kern_dequant_fn)(const void *src, float *dst, size_t n_blocks);

/* The scalar reference kernel of type, or NULL if type is not supported. */
kern_dequant_fn kern_ref_kernel(uint32_t type);

/* Each ISA level fills in fn[type] for the types it implements and leaves
 * the other entries alone.  Only called when the CPU has the level. */
void kern_avx2_fill(kern_dequant_fn fn[GGML_T_COUNT]);
void kern_avx512_fill(kern_dequant_fn fn[GGML_T_COUNT]);

#ifdef KERN_TEST_SUPPORT
/*
 * ISA levels, for tests and benchmarks; only in the test build of the
 * dispatcher (kernels_test_dep, which defines KERN_TEST_SUPPORT for its
 * users too).  Level 0 is "scalar"; the others are the levels this CPU
 * has and that GGFS_DISABLE_CPU_FEATURES does not turn off, in increasing
 * order.  kern_dequant_level_run() dequantizes with exactly that level's
 * table (its own kernels over those of the levels below), so one process
 * can check every variant.
 */
int kern_dequant_level_count(void);
const char *kern_dequant_level_name(int level);
void kern_dequant_level_run(int level, uint32_t type, const void *src,
                            float *dst, size_t n_blocks);
/* true if level has a kernel of its own for type (not inherited). */
bool kern_dequant_level_has_own(int level, uint32_t type);
#endif

/* ---- helpers shared by the kernel files ---- */

/* Little-endian loads from unaligned memory.  Byte assembly keeps them
 * correct on any host; compilers turn them into single loads on x86. */
static inline uint16_t kern_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t kern_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

static inline uint64_t kern_le64(const uint8_t *p)
{
    return (uint64_t)kern_le32(p) | ((uint64_t)kern_le32(p + 4) << 32);
}

static inline float kern_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/*
 * IEEE half -> float, bit-exact with ggml's ggml_compute_fp16_to_fp32 (and
 * with F16C's vcvtph2ps).  Every finite half is exactly representable as a
 * float, so the only choices are for NaN: ggml builds the float by a
 * multiplication, which quiets a signalling NaN (sets mantissa bit 22) and
 * keeps sign and payload.  Done here with integer operations only, so the
 * result cannot depend on compiler flags or on the FPU's rounding mode.
 */
static inline float kern_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0x1f) /* inf, or NaN made quiet */
        return kern_bits_to_f32(sign | 0x7f800000u | (mant << 13) |
                                (mant ? 0x00400000u : 0));
    if (exp != 0) /* normal: rebias 15 -> 127 */
        return kern_bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0)
        return kern_bits_to_f32(sign);
    /* subnormal half = mant * 2^-24: normalize the mantissa */
    uint32_t e = 113; /* biased exponent of 2^-14, the top of the range */
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return kern_bits_to_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

/* The fp16 stored little-endian at p, as float. */
static inline float kern_ld_f16(const uint8_t *p)
{
    return kern_f16_to_f32(kern_le16(p));
}

/*
 * mxfp4's E8M0 block scale, halved to match the doubled FP4 table (as
 * ggml's ggml_e8m0_to_fp32_half): 2^(e-128).  e = 0 and 1 give subnormals;
 * e = 255 gives 2^127, not NaN (ggml does not special-case it).
 */
static inline float kern_e8m0_half(uint8_t e)
{
    return kern_bits_to_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

#endif

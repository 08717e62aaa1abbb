/*
 * tests/kernels/test_dequant.c — every kernel against ggml itself.
 *
 * For each type, three kinds of input are dequantized by ggml's to_float
 * (libggml-base.so, loaded from $GGUFFS_ORACLE) and by every variant of
 * ours (the scalar reference, each ISA level this CPU has, and the
 * dispatched kern_dequant), and the outputs must be equal bit for bit,
 * NaN payloads included:
 *
 *   random    blocks of random bytes: NaN/inf/subnormal scales, every code
 *             (f16 and bf16 also get all 65536 values once);
 *   finite    the same with every f16 scale field overwritten by a random
 *             finite half, so that the quantized values are exercised with
 *             real numbers rather than drowned in NaN;
 *   quantized blocks made by ggml's own quantizer (ggml_quantize_chunk)
 *             from random floats: what real models contain.
 *
 * Integer types and f64 have no to_float in ggml; they are checked against
 * C's own conversion.  Block counts: 100000 per kind by default,
 * GGUFFS_TEST_QUICK=1 divides them by 20 (for sanitizer builds),
 * GGUFFS_TEST_BLOCKS=N sets them.  GGUFFS_TEST_SEED=N changes the seed.
 * ggml's i-quant quantizers manage only thousands of blocks a second, so
 * the quantized kind also stops after GGUFFS_TEST_QUANT_SECONDS (1, or 0.2
 * when quick) per type, not counting ggml_quantize_init, whose table set-up
 * for iq1_s/iq1_m/iq2_* alone takes ~15 s (quick runs skip those); the
 * count reached is printed.
 *
 * "test_dequant --bench" prints the throughput of ggml and of each of our
 * levels instead (meson test --benchmark).
 *
 * Without the oracle the test is skipped (exit 77), unless CI is set, when
 * a missing oracle is a failure.
 */
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "gguf/blocks.h"
#include "gguf/types.h"
#include "kernels/dequant.h"
#include "kernels/dequant_impl.h"
#include "ggml_oracle.h"

/* The oracle (libggml-base.so), loaded by load_oracle. */
static struct ggml_oracle oracle;

static size_t n_blocks_random = 100000, n_blocks_quant = 100000;
static uint64_t seed = 0x9e3779b97f4a7c15u;
static double quant_seconds = 1.0; /* per type, for ggml's quantizers */
static size_t blocks_quantized;    /* by the last run_quantized */
static bool quick;                 /* GGUFFS_TEST_QUICK */

/* ---- random numbers: splitmix64, reproducible from the seed ---- */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static void rng_fill(uint64_t *s, uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint64_t v = rng_next(s);
        memcpy(p, &v, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = rng_next(s);
        memcpy(p, &v, n);
    }
}

/* When set, forced scales are moderate normal numbers rather than any
 * finite half: for benchmarks, whose timings subnormals would distort. */
static bool moderate_scales;

/* A uniformly random finite half (exponent field not all ones), or one
 * between 2^-10 and 2^-3 if moderate_scales. */
static uint16_t rng_finite_half(uint64_t *s)
{
    uint16_t h = (uint16_t)rng_next(s);
    if (moderate_scales)
        return (uint16_t)((h & 0x83ff) | ((5 + (h >> 10) % 8) << 10));
    if ((h & 0x7c00) == 0x7c00)
        h ^= 0x4000;
    return h;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Overwrites the scale fields of one block with finite values. */
static void force_finite(uint32_t type, uint8_t *b, uint32_t bs, uint64_t *s)
{
#define F1(t, T, f) {GGML_T_##T, {(int)offsetof(struct ggml_block_##t, f), -1}}
#define F2(t, T, f, g) {GGML_T_##T, {(int)offsetof(struct ggml_block_##t, f), \
                                     (int)offsetof(struct ggml_block_##t, g)}}
    static const struct { uint32_t type; int off[2]; } f16_fields[] = {
        {GGML_T_F16, {0, -1}},        F1(q4_0, Q4_0, d),
        F2(q4_1, Q4_1, d, m),         F1(q5_0, Q5_0, d),
        F2(q5_1, Q5_1, d, m),         F1(q8_0, Q8_0, d),
        F2(q2_K, Q2_K, d, dmin),      F1(q3_K, Q3_K, d),
        F2(q4_K, Q4_K, d, dmin),      F2(q5_K, Q5_K, d, dmin),
        F1(q6_K, Q6_K, d),            F1(iq2_xxs, IQ2_XXS, d),
        F1(iq2_xs, IQ2_XS, d),        F1(iq2_s, IQ2_S, d),
        F1(iq3_xxs, IQ3_XXS, d),      F1(iq3_s, IQ3_S, d),
        F1(iq1_s, IQ1_S, d),          F1(iq4_nl, IQ4_NL, d),
        F1(iq4_xs, IQ4_XS, d),        F1(tq1_0, TQ1_0, d),
        F1(tq2_0, TQ2_0, d),          F1(q1_0, Q1_0, d),
        F1(q2_0, Q2_0, d),
    };
#undef F1
#undef F2
    for (size_t i = 0; i < sizeof f16_fields / sizeof f16_fields[0]; i++) {
        if (f16_fields[i].type != type)
            continue;
        for (int k = 0; k < 2; k++)
            if (f16_fields[i].off[k] >= 0)
                put16(b + f16_fields[i].off[k], rng_finite_half(s));
        return;
    }
    switch (type) {
    case GGML_T_BF16: /* exponent not all ones */
        if ((b[1] & 0x7f) == 0x7f && (b[0] & 0x80))
            b[1] ^= 0x40;
        break;
    case GGML_T_F32:
        if ((b[3] & 0x7f) == 0x7f && (b[2] & 0x80))
            b[3] ^= 0x40;
        break;
    case GGML_T_IQ1_M: { /* the f16 is spread over the top nibbles of the
                          * four 16-bit scale words (their odd bytes) */
        uint8_t *hi = b + offsetof(struct ggml_block_iq1_m, scales) + 1;
        uint16_t h = rng_finite_half(s);
        for (int k = 0; k < 4; k++)
            hi[2 * k] = (uint8_t)((hi[2 * k] & 0x0f) | (((h >> (4 * k)) & 0xf) << 4));
        break;
    }
    case GGML_T_MXFP4: /* E8M0 is never NaN; keep 12 * 2^(e-128) finite */
        b[offsetof(struct ggml_block_mxfp4, e)] = (uint8_t)(rng_next(s) % 251);
        break;
    default: /* nvfp4 scales, integers, f64: nothing to force */
        (void)bs;
        break;
    }
}

/* ---- the expected output ---- */

/* Types ggml has no to_float for, converted as C converts them. */
static void expected_by_c(uint32_t type, const uint8_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (type) {
        case GGML_T_F32: memcpy(&dst[i], src + 4 * i, 4); break;
        case GGML_T_I8: dst[i] = (float)(int8_t)src[i]; break;
        case GGML_T_I16: { int16_t v; memcpy(&v, src + 2 * i, 2); dst[i] = (float)v; break; }
        case GGML_T_I32: { int32_t v; memcpy(&v, src + 4 * i, 4); dst[i] = (float)v; break; }
        case GGML_T_I64: { int64_t v; memcpy(&v, src + 8 * i, 8); dst[i] = (float)v; break; }
        case GGML_T_F64: { double v; memcpy(&v, src + 8 * i, 8); dst[i] = (float)v; break; }
        default: fail_msg("no expected values for type %u", type);
        }
    }
}

static void expected(uint32_t type, const uint8_t *src, float *dst, size_t nb)
{
    const struct ggml_type_info *ti = ggml_type_get(type);
    const struct ggml_type_traits *tr = oracle.traits((int)type);
    if (tr->to_float)
        tr->to_float(src, dst, (int64_t)(nb * ti->blck_elems));
    else
        expected_by_c(type, src, dst, nb);
}

/* ---- comparison ---- */

static int mismatches_reported;

/* Compares got with want; on a difference prints where and fails. */
static void compare(uint32_t type, const char *kind, const char *variant,
                    const uint8_t *src, const float *want, const float *got,
                    size_t nb)
{
    const struct ggml_type_info *ti = ggml_type_get(type);
    size_t n = nb * ti->blck_elems;
    if (memcmp(want, got, n * sizeof(float)) == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        uint32_t w, g;
        memcpy(&w, &want[i], 4);
        memcpy(&g, &got[i], 4);
        if (w == g)
            continue;
        size_t blk = i / ti->blck_elems;
        print_error("%s %s [%s]: block %zu element %zu: ggml %08" PRIx32
                    " (%g), ours %08" PRIx32 " (%g)\n  block:",
                    ti->name, kind, variant, blk, i % ti->blck_elems, w,
                    (double)want[i], g, (double)got[i]);
        for (uint32_t k = 0; k < ti->blck_bytes; k++)
            print_error(" %02x", src[blk * ti->blck_bytes + k]);
        print_error("\n");
        break;
    }
    mismatches_reported++;
    fail_msg("%s: %s output differs from ggml (%s)", ti->name, variant, kind);
}

/* Runs every variant over nb blocks at src and compares with ggml. */
static void check_all(uint32_t type, const char *kind, const uint8_t *src,
                      size_t nb, float *want, float *got)
{
    size_t n = nb * ggml_type_get(type)->blck_elems;
    expected(type, src, want, nb);

    memset(got, 0xa5, n * sizeof(float));
    kern_dequant_ref(type, src, got, nb);
    compare(type, kind, "ref", src, want, got, nb);

    memset(got, 0xa5, n * sizeof(float));
    kern_dequant(type, src, got, nb);
    compare(type, kind, "dispatched", src, want, got, nb);

    for (int lv = 1; lv < kern_dequant_level_count(); lv++) {
        if (!kern_dequant_level_has_own(lv, type))
            continue;
        memset(got, 0xa5, n * sizeof(float));
        kern_dequant_level_run(lv, type, src, got, nb);
        compare(type, kind, kern_dequant_level_name(lv), src, want, got, nb);
    }
}

/* ---- the three kinds of input ---- */

enum { CHUNK = 4096 }; /* blocks per round: bounds memory, not coverage */

static void run_random(uint32_t type, bool finite)
{
    const struct ggml_type_info *ti = ggml_type_get(type);
    uint64_t s = seed ^ ((uint64_t)type << 32) ^ (finite ? 0xf1f1 : 0);
    uint8_t *src = malloc((size_t)CHUNK * ti->blck_bytes);
    float *want = malloc((size_t)CHUNK * ti->blck_elems * sizeof(float));
    float *got = malloc((size_t)CHUNK * ti->blck_elems * sizeof(float));
    assert_non_null(src);
    assert_non_null(want);
    assert_non_null(got);

    /* f16 and bf16: every value once, before the random ones */
    size_t done = 0;
    if (!finite && (type == GGML_T_F16 || type == GGML_T_BF16)) {
        for (uint32_t base = 0; base < 65536; base += CHUNK) {
            for (uint32_t k = 0; k < CHUNK; k++)
                put16(src + 2 * k, (uint16_t)(base + k));
            check_all(type, "all values", src, CHUNK, want, got);
        }
    }
    while (done < n_blocks_random) {
        size_t nb = n_blocks_random - done < CHUNK ? n_blocks_random - done : CHUNK;
        rng_fill(&s, src, nb * ti->blck_bytes);
        if (finite)
            for (size_t k = 0; k < nb; k++)
                force_finite(type, src + k * ti->blck_bytes, ti->blck_bytes, &s);
        check_all(type, finite ? "finite scales" : "random bytes", src, nb,
                  want, got);
        done += nb;
    }
    free(src);
    free(want);
    free(got);
}

/* Roughly normal floats, with a scale that changes from row to row (from
 * 2^-12 to 2^12) and the odd zero or outlier, as weights look. */
static void random_row(uint64_t *s, float *x, size_t n)
{
    const float scale = ldexpf(1.0f, (int)(rng_next(s) % 25) - 12);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rng_next(s);
        float u = (float)((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff)) / 65536.0f - 1.5f;
        if ((r >> 48) % 97 == 0)
            u *= 20.0f;
        if ((r >> 48) % 89 == 0)
            u = 0.0f;
        x[i] = u * scale;
    }
}

static bool ggml_can_quantize(uint32_t type)
{
    const struct ggml_type_traits *tr = oracle.traits((int)type);
    /* ggml_quantize_chunk handles exactly the types with a to_float, plus
     * f32 (a copy); integers and f64 it does not know. */
    return tr->to_float != NULL || type == GGML_T_F32;
}

/* ggml_quantize_init builds search tables for these: 1 to 8 s each. */
static bool slow_quantize_init(uint32_t type)
{
    return type == GGML_T_IQ2_XXS || type == GGML_T_IQ2_XS ||
           type == GGML_T_IQ2_S || type == GGML_T_IQ1_S || type == GGML_T_IQ1_M;
}

static void run_quantized(uint32_t type)
{
    const struct ggml_type_info *ti = ggml_type_get(type);
    if (!ggml_can_quantize(type))
        return;
    /* Quick runs (sanitizers, the per-level dispatch runs) leave these to
     * the full run rather than spend ~15 s on ggml's table set-up. */
    if (quick && slow_quantize_init(type))
        return;
    enum { ROW = 4096 }; /* a multiple of every block size */
    const size_t blocks_per_row = ROW / ti->blck_elems;
    size_t total = n_blocks_quant;
    /* 4 rows of 4096 per round: small enough that the time budget is not
     * spent on one round of the slowest quantizers */
    const size_t rows_per_chunk = 4;
    uint64_t s = seed ^ ((uint64_t)type << 40) ^ 0x9a9a;

    float *x = malloc(rows_per_chunk * ROW * sizeof(float));
    uint8_t *q = malloc(rows_per_chunk * blocks_per_row * ti->blck_bytes);
    float *want = malloc(rows_per_chunk * ROW * sizeof(float));
    float *got = malloc(rows_per_chunk * ROW * sizeof(float));
    float *imatrix = malloc(ROW * sizeof(float));
    assert_non_null(x);
    assert_non_null(q);
    assert_non_null(want);
    assert_non_null(got);
    assert_non_null(imatrix);
    for (size_t i = 0; i < ROW; i++)
        imatrix[i] = 1.0f;
    const float *im = oracle.requires_imatrix((int)type) ? imatrix : NULL;
    oracle.quantize_init((int)type);

    /* Stop early once the time budget is spent: some quantizers do
     * thousands of blocks a second, not millions. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t done = 0;
    while (done < total) {
        size_t rows = (total - done + blocks_per_row - 1) / blocks_per_row;
        if (rows > rows_per_chunk)
            rows = rows_per_chunk;
        for (size_t r = 0; r < rows; r++)
            random_row(&s, x + r * ROW, ROW);
        size_t bytes = oracle.quantize_chunk((int)type, x, q, 0, (int64_t)rows, ROW, im);
        assert_int_equal(bytes, rows * blocks_per_row * ti->blck_bytes);
        check_all(type, "quantized by ggml", q, rows * blocks_per_row, want, got);
        done += rows * blocks_per_row;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) > quant_seconds)
            break;
    }
    blocks_quantized = done;
    free(x);
    free(q);
    free(want);
    free(got);
    free(imatrix);
}

static void test_type(void **state)
{
    const uint32_t type = *(const uint32_t *)*state;
    assert_true(kern_dequant_supported(type));
    blocks_quantized = 0;
    run_random(type, false);
    run_random(type, true);
    run_quantized(type);
    printf("# %s: %zu random, %zu finite-scale, %zu ggml-quantized blocks;"
           " variants: ref dispatched", ggml_type_name_of(type), n_blocks_random,
           n_blocks_random, blocks_quantized);
    for (int lv = 1; lv < kern_dequant_level_count(); lv++)
        if (kern_dequant_level_has_own(lv, type))
            printf(" %s", kern_dequant_level_name(lv));
    printf("\n");
}

/* kern_dequant_supported is true exactly for the types with an f32 view:
 * those ggml has a to_float for, plus f32, integers and f64. */
static void test_supported(void **state)
{
    (void)state;
    for (uint32_t t = 0; t < GGML_T_COUNT + 5; t++) {
        bool want = false;
        if (t < GGML_T_COUNT && ggml_type_get(t)) {
            want = oracle.traits((int)t)->to_float != NULL;
            switch (t) {
            case GGML_T_F32: case GGML_T_I8: case GGML_T_I16:
            case GGML_T_I32: case GGML_T_I64: case GGML_T_F64:
                want = true;
                break;
            default:
                break;
            }
        }
        if (kern_dequant_supported(t) != want)
            fail_msg("kern_dequant_supported(%u) = %d, expected %d", t,
                     !want, want);
    }
    assert_false(kern_dequant_supported(UINT32_MAX));
}

/* What kern_dequant_level() said before kern_dequant_init (set by main). */
static const char *level_before_init;

/* kern_dequant_level names the table kern_dequant uses: "scalar" before
 * init, then the highest level this run may use (in the meson variants
 * with GGFS_DISABLE_CPU_FEATURES, the highest one left). */
static void test_level(void **state)
{
    (void)state;
    assert_string_equal(level_before_init, "scalar");
    const char *top = kern_dequant_level_name(kern_dequant_level_count() - 1);
    assert_string_equal(kern_dequant_level(), top);
    assert_ptr_equal(kern_dequant_init(), kern_dequant_level());
    const char *off = getenv("GGFS_DISABLE_CPU_FEATURES");
    if (off && strcmp(off, "all") == 0)
        assert_string_equal(kern_dequant_level(), "scalar");
}

/* ---- throughput (test_dequant --bench; not part of the test) ---- */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* GB/s of float output of fn (variant < 0: ggml; else that level) over the
 * same input, best of several rounds of ~0.1 s each. */
static double bench_one(uint32_t type, int variant, const uint8_t *src,
                        float *dst, size_t nb)
{
    const struct ggml_type_info *ti = ggml_type_get(type);
    double best = 0;
    for (int round = 0; round < 5; round++) {
        size_t reps = 0;
        double t0 = now(), t;
        do {
            if (variant < 0)
                expected(type, src, dst, nb);
            else
                kern_dequant_level_run(variant, type, src, dst, nb);
            reps++;
        } while ((t = now() - t0) < 0.1);
        double gbs = (double)reps * (double)nb * ti->blck_elems * 4 / t / 1e9;
        if (gbs > best)
            best = gbs;
    }
    return best;
}

static int run_bench(void)
{
    moderate_scales = true;
    printf("%-8s %10s", "type", "ggml");
    for (int lv = 0; lv < kern_dequant_level_count(); lv++)
        printf(" %10s", kern_dequant_level_name(lv));
    printf("   (GB/s of float output, 4 MiB of floats per call, one thread)\n");
    for (uint32_t t = 0; t < GGML_T_COUNT; t++) {
        const struct ggml_type_info *ti = ggml_type_get(t);
        if (!kern_dequant_supported(t) || !oracle.traits((int)t)->to_float)
            continue;
        size_t nb = ((size_t)1 << 20) / ti->blck_elems;
        uint8_t *src = malloc(nb * ti->blck_bytes);
        float *dst = malloc(nb * ti->blck_elems * sizeof(float));
        if (!src || !dst)
            return 1;
        uint64_t s = seed ^ t;
        rng_fill(&s, src, nb * ti->blck_bytes);
        for (size_t k = 0; k < nb; k++)
            force_finite(t, src + k * ti->blck_bytes, ti->blck_bytes, &s);
        printf("%-8s %10.2f", ti->name, bench_one(t, -1, src, dst, nb));
        for (int lv = 0; lv < kern_dequant_level_count(); lv++) {
            if (lv > 0 && !kern_dequant_level_has_own(lv, t))
                printf(" %10s", "-");
            else
                printf(" %10.2f", bench_one(t, lv, src, dst, nb));
        }
        printf("\n");
        free(src);
        free(dst);
    }
    return 0;
}

/* ---- set-up ---- */

static size_t env_size(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    return (size_t)strtoull(v, NULL, 0);
}

/* Loads the oracle; returns 0, 77 (skip) or 1 (fail). */
static int load_oracle(void)
{
    const char *path = getenv("GGUFFS_ORACLE");
    const char *why = !path || !*path ? "GGUFFS_ORACLE is not set"
                                      : ggml_oracle_load(path, &oracle);
    if (why && oracle.handle) { /* loaded, but not the library we know */
        fprintf(stderr, "test_dequant: %s: %s\n", path, why);
        return 1;
    }
    if (why) {
        bool ci = getenv("CI") && *getenv("CI");
        fprintf(stderr, "test_dequant: %s ggml oracle unavailable: %s "
                "(run scripts/fetch-oracle)\n", ci ? "FAIL:" : "skip:", why);
        return ci ? 1 : 77;
    }
    /* The traits struct is declared by hand: check it against known facts. */
    const struct ggml_type_traits *a = oracle.traits(GGML_T_Q4_0), *b = oracle.traits(GGML_T_Q6_K);
    if (strcmp(a->type_name, "q4_0") != 0 || a->blck_size != 32 || a->type_size != 18 ||
        !a->is_quantized || !a->to_float || strcmp(b->type_name, "q6_K") != 0 ||
        b->blck_size != 256 || b->type_size != 210) {
        fprintf(stderr, "test_dequant: ggml_type_traits layout is not as expected\n");
        return 1;
    }
    for (uint32_t t = 0; t < GGML_T_COUNT; t++) {
        const struct ggml_type_info *ti = ggml_type_get(t);
        const struct ggml_type_traits *tr = oracle.traits((int)t);
        if (ti && (strcmp(ti->name, tr->type_name) != 0 ||
                   ti->blck_elems != tr->blck_size || ti->blck_bytes != tr->type_size)) {
            fprintf(stderr, "test_dequant: type %u differs from ggml's\n", t);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep our lines among cmocka's */
    int rc = load_oracle();
    if (rc)
        return rc;
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) {
        kern_dequant_init();
        return run_bench();
    }
    quick = getenv("GGUFFS_TEST_QUICK") && *getenv("GGUFFS_TEST_QUICK");
    if (quick) {
        n_blocks_random /= 20;
        n_blocks_quant /= 20;
        quant_seconds = 0.2;
    }
    n_blocks_random = env_size("GGUFFS_TEST_BLOCKS", n_blocks_random);
    n_blocks_quant = env_size("GGUFFS_TEST_BLOCKS", n_blocks_quant);
    seed = env_size("GGUFFS_TEST_SEED", seed);
    if (getenv("GGUFFS_TEST_QUANT_SECONDS"))
        quant_seconds = strtod(getenv("GGUFFS_TEST_QUANT_SECONDS"), NULL);

    level_before_init = kern_dequant_level();
    const char *best = kern_dequant_init();
    /* The level this run is registered for must be the one reached: a CPU
     * without it would test the levels below twice and pass. */
    const char *want = getenv("GGUFFS_TEST_LEVEL");
    if (want && *want && strcmp(want, best) != 0) {
        bool ci = getenv("CI") && *getenv("CI");
        printf("%s this CPU does not reach the level %s (best: %s)%s\n", ci ? "FAIL:" : "skip:",
               want, best, ci ? "; CI is set, so every level must run" : "");
        return ci ? 1 : 77;
    }
    printf("# kernels: best level %s; levels:", best);
    for (int lv = 0; lv < kern_dequant_level_count(); lv++)
        printf(" %s", kern_dequant_level_name(lv));
    printf("; %zu random and %zu quantized blocks per type, seed %#" PRIx64 "\n",
           n_blocks_random, n_blocks_quant, seed);

    static uint32_t ids[GGML_T_COUNT];
    struct CMUnitTest tests[GGML_T_COUNT + 2];
    size_t n = 0;
    tests[n++] = (struct CMUnitTest){"level", test_level, NULL, NULL, NULL};
    tests[n++] = (struct CMUnitTest){"supported", test_supported, NULL, NULL, NULL};
    for (uint32_t t = 0; t < GGML_T_COUNT; t++) {
        if (!kern_dequant_supported(t))
            continue;
        ids[t] = t;
        tests[n++] = (struct CMUnitTest){ggml_type_name_of(t), test_type, NULL, NULL, &ids[t]};
    }
    return _cmocka_run_group_tests("dequant", tests, n, NULL, NULL);
}

/*
 * gguf/fstats.h — summary statistics of float32 values: what a tensor's
 * stats file shows (core/digests.c feeds it the tensor's f32 view, chunk by
 * chunk).
 *
 * Promises:
 *   - count, nan, inf and zeros (== 0, either sign) are exact counts;
 *   - min, max and absmax are the exact floats, over the finite values;
 *   - mean and std (the population one: divided by the number of finite
 *     values) over the finite values, accumulated in double: each run
 *     given to gguf_fstats_add is summed in order, then its squared
 *     deviations from its own mean (two passes over memory); runs are
 *     combined with Chan et al.'s update, so std does not lose its digits
 *     to a large mean as a sum of squares would.  The mean is the sum of
 *     the runs' sums divided by the count.  Summation order differs from
 *     numpy's pairwise sum: the last digits may differ;
 *   - no finite value (an empty tensor, all NaN or infinite): min, max,
 *     absmax, mean and std are "nan".
 * The text (gguf_fstats_render): one "name value" line each, in the order
 * count nan inf zeros min max absmax mean std; min, max and absmax in the
 * shortest form that reads back to the same float (gguf/numfmt.h), mean
 * and std with "%.17g".  Fixed width: the name left-aligned in 6 columns,
 * a space, the value right-aligned in 24 (wide enough for any u64 and any
 * "%.17g" double), so every stats file is GGUF_FSTATS_TEXT_LEN bytes and
 * its size is known before anything is computed.
 *
 * No FUSE, no allocation, no printing.
 */
#ifndef GGUF_FSTATS_H
#define GGUF_FSTATS_H

#include <stddef.h>
#include <stdint.h>

struct gguf_fstats {
    uint64_t count, nan, inf, zeros, finite;
    float min, max, absmax;     /* over the finite values (finite > 0) */
    double sum;                 /* of the finite values */
    double mean, m2;            /* running mean, sum of squared deviations */
};

/* The layout: every line is a name in NAME_WIDTH columns, a space, the
 * value right-aligned in VALUE_WIDTH columns, "\n"; nine lines. */
#define GGUF_FSTATS_NAME_WIDTH 6
#define GGUF_FSTATS_VALUE_WIDTH 24
#define GGUF_FSTATS_LINE (GGUF_FSTATS_NAME_WIDTH + 1 + GGUF_FSTATS_VALUE_WIDTH + 1)
/* The text's length: the same for every tensor. */
#define GGUF_FSTATS_TEXT_LEN (9 * GGUF_FSTATS_LINE)
/* Room for the text, NUL included. */
#define GGUF_FSTATS_TEXT_MAX (GGUF_FSTATS_TEXT_LEN + 1)

void gguf_fstats_init(struct gguf_fstats *s);
/* Adds n values. */
void gguf_fstats_add(struct gguf_fstats *s, const float *v, size_t n);
/* Adds what b counted to a (as if b's values had been added to a). */
void gguf_fstats_merge(struct gguf_fstats *a, const struct gguf_fstats *b);
/* The text into buf (GGUF_FSTATS_TEXT_MAX bytes); its length,
 * GGUF_FSTATS_TEXT_LEN. */
size_t gguf_fstats_render(const struct gguf_fstats *s, char *buf);

#endif

/* gguf/fstats.c — summary statistics of float32 values (fstats.h). */
#include "fstats.h"
#include "numfmt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void gguf_fstats_init(struct gguf_fstats *s)
{
    memset(s, 0, sizeof *s);
}

void gguf_fstats_merge(struct gguf_fstats *a, const struct gguf_fstats *b)
{
    a->count += b->count;
    a->nan += b->nan;
    a->inf += b->inf;
    a->zeros += b->zeros;
    if (!b->finite)
        return;
    if (!a->finite) {
        a->min = b->min;
        a->max = b->max;
        a->absmax = b->absmax;
    } else {
        a->min = b->min < a->min ? b->min : a->min;
        a->max = b->max > a->max ? b->max : a->max;
        a->absmax = b->absmax > a->absmax ? b->absmax : a->absmax;
    }
    /* Chan, Golub and LeVeque: the pairwise update of mean and M2 */
    double na = (double)a->finite, nb = (double)b->finite, n = na + nb;
    double delta = b->mean - a->mean;
    a->mean += delta * (nb / n);
    a->m2 += b->m2 + delta * delta * (na * nb / n);
    a->sum += b->sum;
    a->finite += b->finite;
}

/* Lanes of the sums: independent accumulators, so that an addition need
 * not wait for the one before (a dependency chain of double additions is
 * several times slower than the rest of the loop). */
#define LANES 8

static inline int nonfinite(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7f800000u) == 0x7f800000u;
}

void gguf_fstats_add(struct gguf_fstats *s, const float *v, size_t n)
{
    struct gguf_fstats r;
    gguf_fstats_init(&r);
    r.count = n;
    float mn[LANES], mx[LANES];
    double sum[LANES] = { 0 };
    uint64_t zeros = 0, bad = 0;
    for (int k = 0; k < LANES; k++) {
        mn[k] = INFINITY;
        mx[k] = -INFINITY;
    }
    /* pass 1: counts, extremes and the sum; blocks without a NaN or an
     * infinity (the usual case) take the branch-free path */
    size_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        int any = 0;
        for (int k = 0; k < LANES; k++)
            any |= nonfinite(v[i + k]);
        if (!any) {
            for (int k = 0; k < LANES; k++) {
                float x = v[i + k];
                mn[k] = x < mn[k] ? x : mn[k];
                mx[k] = x > mx[k] ? x : mx[k];
                zeros += x == 0;
                sum[k] += x;
            }
            continue;
        }
        for (int k = 0; k < LANES; k++) {
            float x = v[i + k];
            if (nonfinite(x)) {
                bad++;
                r.nan += isnan(x) != 0;
                continue;
            }
            mn[k] = x < mn[k] ? x : mn[k];
            mx[k] = x > mx[k] ? x : mx[k];
            zeros += x == 0;
            sum[k] += x;
        }
    }
    for (; i < n; i++) {
        float x = v[i];
        if (nonfinite(x)) {
            bad++;
            r.nan += isnan(x) != 0;
            continue;
        }
        mn[0] = x < mn[0] ? x : mn[0];
        mx[0] = x > mx[0] ? x : mx[0];
        zeros += x == 0;
        sum[0] += x;
    }
    r.inf = bad - r.nan;
    r.zeros = zeros;
    r.finite = n - bad;
    if (r.finite) {
        float a = mn[0], b = mx[0];
        for (int k = 1; k < LANES; k++) {
            a = mn[k] < a ? mn[k] : a;
            b = mx[k] > b ? mx[k] : b;
        }
        r.min = a;
        r.max = b;
        r.absmax = fabsf(a) > fabsf(b) ? fabsf(a) : fabsf(b);
        r.sum = 0;
        for (int k = 0; k < LANES; k++)
            r.sum += sum[k];
        r.mean = r.sum / (double)r.finite;
        /* pass 2: squared deviations from the run's mean */
        double q[LANES] = { 0 };
        i = 0;
        if (!bad)
            for (; i + LANES <= n; i += LANES)
                for (int k = 0; k < LANES; k++) {
                    double d = v[i + k] - r.mean;
                    q[k] += d * d;
                }
        for (; i < n; i++) {
            if (nonfinite(v[i]))
                continue;
            double d = v[i] - r.mean;
            q[0] += d * d;
        }
        r.m2 = 0;
        for (int k = 0; k < LANES; k++)
            r.m2 += q[k];
    }
    gguf_fstats_merge(s, &r);
}

size_t gguf_fstats_render(const struct gguf_fstats *s, char *buf)
{
    char v[9][GGUF_FSTATS_VALUE_WIDTH + 8];
    snprintf(v[0], sizeof v[0], "%llu", (unsigned long long)s->count);
    snprintf(v[1], sizeof v[1], "%llu", (unsigned long long)s->nan);
    snprintf(v[2], sizeof v[2], "%llu", (unsigned long long)s->inf);
    snprintf(v[3], sizeof v[3], "%llu", (unsigned long long)s->zeros);
    for (int i = 4; i < 9; i++)
        strcpy(v[i], "nan");
    if (s->finite) {
        gguf_fmt_f32(s->min, v[4], sizeof v[4]);
        gguf_fmt_f32(s->max, v[5], sizeof v[5]);
        gguf_fmt_f32(s->absmax, v[6], sizeof v[6]);
        snprintf(v[7], sizeof v[7], "%.17g", s->sum / (double)s->finite);
        snprintf(v[8], sizeof v[8], "%.17g", sqrt(s->m2 / (double)s->finite));
    }
    static const char *const name[9] = { "count", "nan", "inf", "zeros", "min", "max",
                                         "absmax", "mean", "std" };
    size_t len = 0;
    for (int i = 0; i < 9; i++) {
        /* every value fits its column (a u64 has 20 digits, "%.17g" of a
         * double at most 24 characters): each line has the same length */
        int n = snprintf(buf + len, GGUF_FSTATS_TEXT_MAX - len, "%-*s %*s\n",
                         GGUF_FSTATS_NAME_WIDTH, name[i], GGUF_FSTATS_VALUE_WIDTH, v[i]);
        if (n != GGUF_FSTATS_LINE)
            return 0;
        len += (size_t)n;
    }
    return len;
}

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
    char mn[GGUF_FMT_MAX] = "nan", mx[GGUF_FMT_MAX] = "nan", am[GGUF_FMT_MAX] = "nan";
    char mean[40] = "nan", sd[40] = "nan";
    if (s->finite) {
        gguf_fmt_f32(s->min, mn, sizeof mn);
        gguf_fmt_f32(s->max, mx, sizeof mx);
        gguf_fmt_f32(s->absmax, am, sizeof am);
        snprintf(mean, sizeof mean, "%.17g", s->sum / (double)s->finite);
        snprintf(sd, sizeof sd, "%.17g", sqrt(s->m2 / (double)s->finite));
    }
    int len = snprintf(buf, GGUF_FSTATS_TEXT_MAX,
                       "count %llu\nnan %llu\ninf %llu\nzeros %llu\n"
                       "min %s\nmax %s\nabsmax %s\nmean %s\nstd %s\n",
                       (unsigned long long)s->count, (unsigned long long)s->nan,
                       (unsigned long long)s->inf, (unsigned long long)s->zeros,
                       mn, mx, am, mean, sd);
    return len < 0 ? 0 : (size_t)len < GGUF_FSTATS_TEXT_MAX ? (size_t)len
                                                           : GGUF_FSTATS_TEXT_MAX - 1;
}

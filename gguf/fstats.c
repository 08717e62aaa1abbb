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

void gguf_fstats_add(struct gguf_fstats *s, const float *v, size_t n)
{
    struct gguf_fstats r;
    gguf_fstats_init(&r);
    r.count = n;
    float mn = INFINITY, mx = -INFINITY, am = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        float x = v[i];
        if (isnan(x)) {
            r.nan++;
            continue;
        }
        if (isinf(x)) {
            r.inf++;
            continue;
        }
        r.zeros += x == 0;
        r.finite++;
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
        float a = fabsf(x);
        am = a > am ? a : am;
        sum += x;
    }
    if (r.finite) {
        r.min = mn;
        r.max = mx;
        r.absmax = am;
        r.sum = sum;
        r.mean = sum / (double)r.finite;
        double m2 = 0;
        for (size_t i = 0; i < n; i++) {
            if (!isfinite(v[i]))
                continue;
            double d = v[i] - r.mean;
            m2 += d * d;
        }
        r.m2 = m2;
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

/*
 * gguf/numfmt.c — numbers as text (see numfmt.h).
 *
 * The shortest float text is found without printing every precision: one
 * snprintf gives 9 (f32) or 17 (f64) significant digits, which always read
 * back; candidates with fewer digits are cut from those and checked with
 * strtof/strtod, binary-searching the least digit count (fmt_finite).
 */
#include "numfmt.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Decimal digits of v, written backwards ending at end; returns the start. */
static char *utoa_rev(uint64_t v, char *end)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

size_t gguf_fmt_u64(uint64_t v, char *buf)
{
    char tmp[24];
    char *s = utoa_rev(v, tmp + sizeof tmp);
    size_t n = (size_t)(tmp + sizeof tmp - s);
    memcpy(buf, s, n);
    buf[n] = '\0';
    return n;
}

size_t gguf_fmt_i64(int64_t v, char *buf)
{
    /* magnitude via unsigned arithmetic so INT64_MIN does not overflow */
    uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    if (v >= 0)
        return gguf_fmt_u64(m, buf);
    buf[0] = '-';
    return 1 + gguf_fmt_u64(m, buf + 1);
}

static bool roundtrips(const char *s, double v, bool f32)
{
    if (f32) {
        float a = strtof(s, NULL), b = (float)v;
        return memcmp(&a, &b, sizeof a) == 0;
    }
    double a = strtod(s, NULL);
    return memcmp(&a, &v, sizeof a) == 0;
}

/* The first p of the significand digits d[0..n), plus one unit in the last
 * place if up; a carry out of the first digit becomes "1" and bumps *exp. */
static void cut_digits(const char *d, int p, bool up, char *out, int *exp)
{
    memcpy(out, d, (size_t)p);
    if (!up)
        return;
    int i = p - 1;
    while (i >= 0 && out[i] == '9')
        out[i--] = '0';
    if (i >= 0) {
        out[i]++;
    } else {
        out[0] = '1';
        (*exp)++;
    }
}

/*
 * Is there a p-digit decimal that reads back as a?  The candidates are the
 * p-digit numbers just below and just above a, i.e. printf's digits cut to
 * p, and that plus one unit (printf's digits round a, so the cut is never
 * below the lower neighbour nor above the upper one).  The nearer one is
 * tried first; the one found goes to cand and *exp.
 */
static bool p_digits_suffice(const char *d, int n, int p, int exp0, double a,
                             bool f32, char *cand, int *exp)
{
    bool up_first = p < n && d[p] >= '5';
    for (int k = 0; k < 2; k++) {
        bool up = k == 0 ? up_first : !up_first;
        if (up && p == n)
            continue;   /* printf's own digits: no other candidate */
        char t[48], *q = t;
        *exp = exp0;
        cut_digits(d, p, up, cand, exp);
        /* "D.DDDe-X", built by hand: printf here would double the cost */
        *q++ = cand[0];
        *q++ = '.';
        memcpy(q, cand + 1, (size_t)p - 1);
        q += p - 1;
        *q++ = 'e';
        if (*exp < 0)
            *q++ = '-';
        char num[8], *ds = utoa_rev((uint64_t)(*exp < 0 ? -*exp : *exp),
                                    num + sizeof num);
        memcpy(q, ds, (size_t)(num + sizeof num - ds));
        q += num + sizeof num - ds;
        *q = '\0';
        if (roundtrips(t, a, f32))
            return true;
    }
    return false;
}

/* The significant digits of printf's "d.ddde+XX" (n bytes) into d. */
static int split_e(const char *s, int n, char *d, size_t cap)
{
    int nd = 0;
    for (int i = 0; i < n && s[i] != 'e'; i++)
        if (s[i] >= '0' && s[i] <= '9' && (size_t)nd < cap)
            d[nd++] = s[i];
    return nd;
}

/* The decimal exponent of printf's "d.ddde+XX". */
static int exp_e(const char *s)
{
    const char *e = strchr(s, 'e');
    return e ? atoi(e + 1) : 0;
}

/*
 * The least number of significant digits of a (finite, > 0) that reads back
 * to the same bits: the digits (without trailing zeros) go to cand, their
 * count is returned, the decimal exponent of the first goes to *exp.
 *
 * The answer is the least p for which "%.{p-1}e" reads back.  Instead of
 * printing every p, printf runs once for 9 (f32) or 17 (f64) digits, which
 * always read back; the least p is found by cutting candidates from those
 * digits and checking them with strtof/strtod, and only the final text is
 * printed again.
 */
static int shortest_digits(double a, bool f32, char cand[24], int *exp)
{
    int maxp = f32 ? 9 : 17;
    char full[48], digits[24];
    int nd = split_e(full, snprintf(full, sizeof full, "%.*e", maxp - 1, a),
                     digits, 24), exp0 = exp_e(full);

    /* A p-digit decimal is also a (p+1)-digit one, so "p digits suffice"
     * is monotone in p: binary search for the least p.  Real data (scores,
     * weights) mostly needs nearly all digits, so the first probe is near
     * the top. */
    int lo = 1, hi = nd, e;
    for (int mid = nd - 2; lo < hi; mid = (lo + hi) / 2) {
        if (mid < lo)
            mid = lo;
        if (p_digits_suffice(digits, nd, mid, exp0, a, f32, cand, &e))
            hi = mid;
        else
            lo = mid + 1;
    }
    /* The text is a correctly rounded "%.*e" (digits cut from a rounded
     * string can round the other way in ties), with the least p >= hi that
     * reads back: usually hi itself; the loop covers the rare case where
     * only the farther p-digit neighbour of a power of two reads back. */
    *exp = exp0;
    for (int p = hi; p <= maxp; p++) {
        snprintf(full, sizeof full, "%.*e", p - 1, a);
        if (roundtrips(full, a, f32) || p == maxp) {
            hi = split_e(full, (int)strlen(full), cand, 24);
            *exp = exp_e(full);
            break;
        }
    }
    int n = hi;
    while (n > 1 && cand[n - 1] == '0')
        n--;
    return n;
}

/* Lays out n significant digits d with decimal exponent exp into res (at
 * least 40 bytes): fixed notation for exponents in [-4, 16), else
 * d.ddde+XX.  Returns the length (no NUL). */
static size_t lay_out(const char *d, int n, int exp, char *res)
{
    size_t k = 0;
    if (exp < -4 || exp >= 16) {
        res[k++] = d[0];
        if (n > 1) {
            res[k++] = '.';
            memcpy(res + k, d + 1, (size_t)n - 1);
            k += (size_t)n - 1;
        }
        res[k++] = 'e';
        res[k++] = exp < 0 ? '-' : '+';
        int x = exp < 0 ? -exp : exp;
        if (x >= 100)
            res[k++] = (char)('0' + x / 100);
        res[k++] = (char)('0' + x / 10 % 10);
        res[k++] = (char)('0' + x % 10);
    } else if (exp < 0) {
        res[k++] = '0';
        res[k++] = '.';
        for (int z = -1; z > exp; z--)
            res[k++] = '0';
        memcpy(res + k, d, (size_t)n);
        k += (size_t)n;
    } else {
        int ip = exp + 1;   /* digits before the point */
        for (int i = 0; i < ip; i++)
            res[k++] = i < n ? d[i] : '0';
        if (n > ip) {
            res[k++] = '.';
            memcpy(res + k, d + ip, (size_t)(n - ip));
            k += (size_t)(n - ip);
        }
    }
    return k;
}

/* Shortest text for a finite v, laid out like Python's repr without ".0". */
static size_t fmt_finite(double v, bool f32, char *buf, size_t cap)
{
    bool neg = signbit(v);
    double a = fabs(v);
    char res[64];
    size_t k = 0;
    if (neg)
        res[k++] = '-';
    if (a < (f32 ? 16777216.0 : 9007199254740992.0) && a == floor(a)) {
        /* Integers below 2^24 (f32) / 2^53 (f64): every integer nearby is
         * representable, so the integer's own digits are the shortest. */
        k += gguf_fmt_u64((uint64_t)a, res + k);
    } else {
        char cand[24];
        int exp, n = shortest_digits(a, f32, cand, &exp);
        k += lay_out(cand, n, exp, res + k);
    }
    res[k] = '\0';
    snprintf(buf, cap, "%s", res);
    return k < cap ? k : cap - 1;
}

/* "nan", "-nan", "nan(0x1)": the default quiet NaN is plain, others carry
 * their mantissa bits so that they round-trip. */
static size_t fmt_nan(bool neg, uint64_t mant, uint64_t quiet, char *buf,
                      size_t cap)
{
    int n;
    if (mant == quiet)
        n = snprintf(buf, cap, "%snan", neg ? "-" : "");
    else
        n = snprintf(buf, cap, "%snan(0x%llx)", neg ? "-" : "",
                     (unsigned long long)mant);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

size_t gguf_fmt_f32(float v, char *buf, size_t cap)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    bool neg = bits >> 31;
    if (isnan(v))
        return fmt_nan(neg, bits & 0x7fffff, 0x400000, buf, cap);
    if (isinf(v))
        return (size_t)snprintf(buf, cap, "%s", neg ? "-inf" : "inf");
    return fmt_finite(v, true, buf, cap);
}

size_t gguf_fmt_f64(double v, char *buf, size_t cap)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    bool neg = bits >> 63;
    if (isnan(v))
        return fmt_nan(neg, bits & 0xfffffffffffffull, 0x8000000000000ull,
                       buf, cap);
    if (isinf(v))
        return (size_t)snprintf(buf, cap, "%s", neg ? "-inf" : "inf");
    return fmt_finite(v, false, buf, cap);
}

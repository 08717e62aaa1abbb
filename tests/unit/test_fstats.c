/*
 * tests/unit/test_fstats.c — summary statistics of float32 values
 * (gguf/fstats.h): counts, the exact extremes, mean and std against a
 * two-pass sum in long double, runs merged in any split, the text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "gguf/fstats.h"

/* The value of "name" in text t, as a string (into out). */
static void field(const char *t, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *p = t; *p;) {
        const char *e = strchr(p, '\n');
        assert_non_null(e);
        if ((size_t)(e - p) > nl && strncmp(p, name, nl) == 0 && p[nl] == ' ') {
            size_t len = (size_t)(e - p) - nl - 1;
            assert_true(len < cap);
            memcpy(out, p + nl + 1, len);
            out[len] = '\0';
            return;
        }
        p = e + 1;
    }
    fail_msg("no %s in %s", name, t);
}

/* Renders s, checks the fixed-width layout (nine lines of the same
 * length: the name left-aligned, the value right-aligned, so the size is
 * known before anything is computed), then rewrites buf as "name value"
 * lines for the comparisons below. */
static void render(const struct gguf_fstats *s, char *buf)
{
    static const char *const names[9] = { "count", "nan", "inf", "zeros", "min", "max",
                                          "absmax", "mean", "std" };
    size_t len = gguf_fstats_render(s, buf);
    assert_int_equal(len, GGUF_FSTATS_TEXT_LEN);
    assert_int_equal(buf[len], '\0');
    char compact[GGUF_FSTATS_TEXT_MAX];
    size_t n = 0;
    for (int i = 0; i < 9; i++) {
        const char *line = buf + i * GGUF_FSTATS_LINE;
        size_t nl = strlen(names[i]);
        assert_memory_equal(line, names[i], nl);
        for (size_t c = nl; c <= GGUF_FSTATS_NAME_WIDTH; c++)
            assert_int_equal(line[c], ' ');
        assert_int_equal(line[GGUF_FSTATS_LINE - 1], '\n');
        const char *v = line + GGUF_FSTATS_NAME_WIDTH + 1;
        size_t pad = strspn(v, " ");
        assert_true(pad < GGUF_FSTATS_VALUE_WIDTH);   /* a value, right-aligned */
        size_t vl = GGUF_FSTATS_VALUE_WIDTH - pad;
        assert_null(memchr(v + pad, ' ', vl));
        n += (size_t)snprintf(compact + n, sizeof compact - n, "%s %.*s\n", names[i], (int)vl,
                              v + pad);
    }
    memcpy(buf, compact, n + 1);
}

static void test_empty_and_all_nan(void **state)
{
    (void)state;
    char buf[GGUF_FSTATS_TEXT_MAX];
    struct gguf_fstats s;
    gguf_fstats_init(&s);
    render(&s, buf);
    assert_string_equal(buf, "count 0\nnan 0\ninf 0\nzeros 0\nmin nan\nmax nan\n"
                             "absmax nan\nmean nan\nstd nan\n");
    float v[] = { NAN, -NAN, INFINITY, -INFINITY };
    gguf_fstats_add(&s, v, 4);
    render(&s, buf);
    assert_string_equal(buf, "count 4\nnan 2\ninf 2\nzeros 0\nmin nan\nmax nan\n"
                             "absmax nan\nmean nan\nstd nan\n");
}

/* The widest values there are still fit their columns: the size a stat
 * gives is the text's, whatever the tensor holds. */
static void test_widest(void **state)
{
    (void)state;
    char buf[GGUF_FSTATS_TEXT_MAX];
    struct gguf_fstats s;
    gguf_fstats_init(&s);
    s.count = s.nan = s.inf = s.zeros = UINT64_MAX;
    s.finite = 1;
    s.min = -1.17549435e-38f;              /* "-1.1754944e-38" */
    s.max = s.absmax = -1.40129846e-45f;
    s.sum = -4.9406564584124654e-324;      /* "%.17g": 24 characters */
    s.m2 = 1.2345678901234567e+300;
    render(&s, buf);
    assert_non_null(strstr(buf, "count 18446744073709551615\n"));
    assert_non_null(strstr(buf, "mean -4.9406564584124654e-324\n"));
}

static void test_small(void **state)
{
    (void)state;
    char buf[GGUF_FSTATS_TEXT_MAX];
    struct gguf_fstats s;
    gguf_fstats_init(&s);
    float v[] = { 1.5f, -0.0f, 0.0f, NAN, -3.25f, INFINITY, 0.1f, 2 };
    gguf_fstats_add(&s, v, 8);
    render(&s, buf);
    /* finite: 1.5 -0 0 -3.25 0.1 2; mean and std of those, in double */
    double x[] = { 1.5, -0.0, 0.0, -3.25, (double)0.1f, 2 }, m = 0, q = 0;
    for (int i = 0; i < 6; i++)
        m += x[i];
    m /= 6;
    for (int i = 0; i < 6; i++)
        q += (x[i] - m) * (x[i] - m);
    char want[GGUF_FSTATS_TEXT_MAX];
    snprintf(want, sizeof want, "count 8\nnan 1\ninf 1\nzeros 2\nmin -3.25\nmax 2\n"
             "absmax 3.25\nmean %.17g\nstd %.17g\n", m, sqrt(q / 6));
    assert_string_equal(buf, want);
}

/* The extremes are the exact floats, in the shortest form. */
static void test_extremes_exact(void **state)
{
    (void)state;
    char buf[GGUF_FSTATS_TEXT_MAX], f[64];
    struct gguf_fstats s;
    gguf_fstats_init(&s);
    float v[] = { 3.4028235e38f, -1e-45f, 0.1f };
    gguf_fstats_add(&s, v, 3);
    render(&s, buf);
    field(buf, "max", f, sizeof f);
    assert_string_equal(f, "3.4028235e+38");
    field(buf, "min", f, sizeof f);
    assert_true(strtof(f, NULL) == -1e-45f);
    field(buf, "absmax", f, sizeof f);
    assert_string_equal(f, "3.4028235e+38");
    /* the mean overflows no float: accumulated in double */
    field(buf, "mean", f, sizeof f);
    assert_true(isfinite(strtod(f, NULL)));
}

/* A large mean and a small spread: std keeps its digits, and the same
 * values split into runs anywhere give (nearly) the same numbers. */
static void test_runs_merge(void **state)
{
    (void)state;
    enum { N = 100003 };
    float *v = malloc(N * sizeof *v);
    assert_non_null(v);
    uint64_t r = 12345;
    for (int i = 0; i < N; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = 1e6f + (float)((r >> 40) % 1000) / 64.0f;
        if (i % 977 == 0)
            v[i] = NAN;
    }
    long double m = 0, q = 0;
    uint64_t n = 0;
    for (int i = 0; i < N; i++)
        if (!isnan(v[i])) {
            m += v[i];
            n++;
        }
    m /= n;
    for (int i = 0; i < N; i++)
        if (!isnan(v[i]))
            q += (v[i] - m) * (v[i] - m);
    double sd = (double)sqrtl(q / n);
    static const size_t splits[] = { N, 1, 7, 4096, 65536 };
    for (size_t k = 0; k < sizeof splits / sizeof *splits; k++) {
        struct gguf_fstats s;
        gguf_fstats_init(&s);
        for (size_t a = 0; a < N; a += splits[k])
            gguf_fstats_add(&s, v + a, a + splits[k] < N ? splits[k] : N - a);
        char buf[GGUF_FSTATS_TEXT_MAX], f[64];
        render(&s, buf);
        field(buf, "count", f, sizeof f);
        assert_int_equal(strtoull(f, NULL, 10), N);
        field(buf, "nan", f, sizeof f);
        assert_int_equal(strtoull(f, NULL, 10), N - n);
        field(buf, "mean", f, sizeof f);
        assert_true(fabs(strtod(f, NULL) - (double)m) <= 1e-12 * (double)m);
        field(buf, "std", f, sizeof f);
        double got = strtod(f, NULL);
        assert_true(fabs(got - sd) <= 1e-9 * sd);
    }
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_and_all_nan),
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_widest),
        cmocka_unit_test(test_extremes_exact),
        cmocka_unit_test(test_runs_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

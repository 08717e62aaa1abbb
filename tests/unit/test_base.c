/*
 * tests/unit/test_base.c — the small modules everything in gguf/ uses:
 * buffers (buf.h), byte order (bytes.h), errors (diag.h) and the name
 * table (ntab.h).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/buf.h"
#include "gguf/bytes.h"
#include "gguf/diag.h"
#include "gguf/ntab.h"

/* ---- buf.h --------------------------------------------------------------------- */

static void test_buf(void **state)
{
    (void)state;
    struct gguf_buf b = { 0 };
    for (int i = 0; i < 10000; i++)
        assert_true(gguf_buf_printf(&b, "%d,", i));
    assert_true(b.len > 10000 * 2);
    assert_memory_equal(b.data, "0,1,2,", 6);
    assert_memory_equal(b.data + b.len - 5, "9999,", 5);
    /* a long printf that does not fit the first try */
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    size_t l0 = b.len;
    assert_true(gguf_buf_printf(&b, "<%s>", big));
    assert_int_equal(b.len, l0 + 1001);
    assert_true(gguf_buf_put(&b, "", 0));
    gguf_buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
}

static void test_buf_oom_sticky(void **state)
{
    (void)state;
    struct gguf_buf b = { 0 };
    assert_true(gguf_buf_putc(&b, 'a'));
    /* an append that cannot be satisfied sets oom; later appends fail */
    assert_false(gguf_buf_put(&b, "x", SIZE_MAX - 8));
    assert_true(b.oom);
    assert_false(gguf_buf_putc(&b, 'b'));
    assert_false(gguf_buf_printf(&b, "%d", 1));
    assert_int_equal(b.len, 1);
    gguf_buf_free(&b);
    assert_false(b.oom);
}

/* ---- bytes.h ------------------------------------------------------------------- */

static void test_bytes(void **state)
{
    (void)state;
    const struct gguf_enc le = { false, false }, be = { true, false },
                          le1 = { false, true }, be1 = { true, true };
    uint8_t p[8];
    gguf_wr16(&le, p, 0x0102);
    assert_memory_equal(p, "\x02\x01", 2);
    gguf_wr16(&be, p, 0x0102);
    assert_memory_equal(p, "\x01\x02", 2);
    gguf_wr32(&le, p, 0x01020304);
    assert_memory_equal(p, "\x04\x03\x02\x01", 4);
    assert_int_equal(gguf_rd32(&le, p), 0x01020304);
    assert_int_equal(gguf_rd32(&be, p), 0x04030201);
    gguf_wr64(&be, p, 0x0102030405060708ull);
    assert_memory_equal(p, "\x01\x02\x03\x04\x05\x06\x07\x08", 8);
    assert_true(gguf_rd64(&be, p) == 0x0102030405060708ull);
    assert_true(gguf_rd64(&le, p) == 0x0807060504030201ull);
    assert_int_equal(gguf_rd16(&be, p + 1), 0x0203);

    /* counts: u32 in version 1, u64 after */
    assert_int_equal(gguf_count_size(&le), 8);
    assert_int_equal(gguf_count_size(&be1), 4);
    memset(p, 0xee, sizeof p);
    gguf_wr_count(&le1, p, 7);
    assert_memory_equal(p, "\x07\0\0\0\xee", 5);
    assert_int_equal(gguf_rd_count(&le1, p), 7);
    gguf_wr_count(&be1, p, 7);
    assert_memory_equal(p, "\0\0\0\x07", 4);
    gguf_wr_count(&be, p, 7);
    assert_memory_equal(p, "\0\0\0\0\0\0\0\x07", 8);
    assert_int_equal(gguf_rd_count(&be, p), 7);

    /* appending */
    struct gguf_buf b = { 0 };
    assert_true(gguf_put16(&b, &be, 0x0102));
    assert_true(gguf_put32(&b, &le, 0x03040506));
    assert_true(gguf_put64(&b, &be, 7));
    assert_true(gguf_put_count(&b, &le1, 9));
    assert_true(gguf_put_count(&b, &be, 10));
    assert_int_equal(b.len, 2 + 4 + 8 + 4 + 8);
    assert_memory_equal(b.data, "\x01\x02\x06\x05\x04\x03\0\0\0\0\0\0\0\x07\x09\0\0\0"
                                "\0\0\0\0\0\0\0\x0a", b.len);
    gguf_buf_free(&b);
}

/* ---- diag.h -------------------------------------------------------------------- */

static void test_diag_format(void **state)
{
    (void)state;
    struct gguf_diag d;
    char line[512];
    assert_int_equal(gguf_diag_set(&d, GGUF_E_RANGE, 24, "tensor count %d cannot fit", 9),
                     GGUF_E_RANGE);
    size_t n = gguf_diag_format(&d, "m.gguf", line, sizeof line);
    assert_string_equal(line, "m.gguf: tensor count 9 cannot fit (at byte offset 24)");
    assert_int_equal(n, strlen(line));
    /* no offset: no "(at byte offset ...)" */
    gguf_diag_set(&d, GGUF_E_IO, UINT64_MAX, "No such file or directory");
    gguf_diag_format(&d, "dir/x.gguf", line, sizeof line);
    assert_string_equal(line, "dir/x.gguf: No such file or directory");
    /* no name */
    gguf_diag_format(&d, NULL, line, sizeof line);
    assert_string_equal(line, "No such file or directory");
    /* offset 0 is an offset; the largest offsets print in full */
    gguf_diag_set(&d, GGUF_E_MAGIC, 0, "not a GGUF file");
    gguf_diag_format(&d, "a", line, sizeof line);
    assert_string_equal(line, "a: not a GGUF file (at byte offset 0)");
    d.offset = UINT64_MAX - 1;
    gguf_diag_format(&d, "a", line, sizeof line);
    assert_string_equal(line, "a: not a GGUF file (at byte offset 18446744073709551614)");
    /* cut to fit, NUL-terminated, the full length returned */
    char small[8];
    n = gguf_diag_format(&d, "a", small, sizeof small);
    assert_string_equal(small, "a: not ");
    assert_int_equal(n, strlen(line));
    assert_int_equal(gguf_diag_format(&d, "a", NULL, 0), strlen(line));
    /* a NULL diag is allowed when setting */
    assert_int_equal(gguf_diag_set(NULL, GGUF_E_NOMEM, 0, "x"), GGUF_E_NOMEM);
}

static void test_diag_names(void **state)
{
    (void)state;
    char buf[GGUF_DIAG_NAME_MAX];
    assert_string_equal(gguf_diag_name("general.name", 12, buf), "general.name");
    assert_string_equal(gguf_diag_name("a\nb\x80", 4, buf), "a?b?");
    char longn[100];
    memset(longn, 'k', sizeof longn);
    gguf_diag_name(longn, sizeof longn, buf);
    assert_int_equal(strlen(buf), 63);
    assert_memory_equal(buf + 60, "...", 3);
    assert_string_equal(gguf_diag_name("", 0, buf), "");
    /* every code has a description; codes are stable */
    for (int e = GGUF_OK; e <= GGUF_E_INTERRUPTED; e++)
        assert_string_not_equal(gguf_strerror((enum gguf_err)e), "unknown error");
    assert_string_equal(gguf_strerror((enum gguf_err)99), "unknown error");
    assert_int_equal(GGUF_E_INVAL, 10);
    assert_int_equal(GGUF_E_PERM, 11);
    assert_int_equal(GGUF_E_NOENT, 12);
    assert_int_equal(GGUF_E_EXIST, 13);
    assert_int_equal(GGUF_E_INTERRUPTED, 14);
}

/* ---- ntab.h -------------------------------------------------------------------- */

/* Names "n<i>" laid out in one buffer that moves (realloc) as it grows, the
 * way the parser's header buffer does: the table must find them anyway. */
struct names {
    char *buf;
    size_t len, cap;
    uint64_t *off;      /* name i at buf + off[i], len[i] bytes */
    uint32_t *nlen;
    uint64_t n, ncap;
};

static const void *name_of(const void *ctx, uint64_t i, size_t *len)
{
    const struct names *nm = ctx;
    *len = nm->nlen[i];
    return nm->buf + nm->off[i];
}

static uint64_t names_add(struct names *nm, const char *s, size_t len)
{
    if (nm->len + len > nm->cap) {
        nm->cap = (nm->len + len) * 2;
        nm->buf = realloc(nm->buf, nm->cap);   /* moves the names */
        assert_non_null(nm->buf);
    }
    if (nm->n == nm->ncap) {
        nm->ncap = nm->ncap ? nm->ncap * 2 : 16;
        nm->off = realloc(nm->off, nm->ncap * sizeof *nm->off);
        nm->nlen = realloc(nm->nlen, nm->ncap * sizeof *nm->nlen);
        assert_true(nm->off && nm->nlen);
    }
    memcpy(nm->buf + nm->len, s, len);
    nm->off[nm->n] = nm->len;
    nm->nlen[nm->n] = (uint32_t)len;
    nm->len += len;
    return nm->n++;
}

static void names_free(struct names *nm)
{
    free(nm->buf);
    free(nm->off);
    free(nm->nlen);
}

static void test_ntab_basic(void **state)
{
    (void)state;
    struct names nm = { 0 };
    struct gguf_ntab t;
    /* a hostile expected count is capped: nothing big is allocated */
    assert_int_equal(gguf_ntab_init(&t, UINT64_MAX, name_of, &nm), GGUF_OK);
    assert_true(t.mask + 1 <= 2 * (uint64_t)GGUF_NTAB_EXPECT_MAX);
    gguf_ntab_free(&t);
    assert_int_equal(gguf_ntab_init(&t, 0, name_of, &nm), GGUF_OK);
    uint64_t v, prev;
    assert_false(gguf_ntab_find(&t, "a", 1, &v));

    const char *words[] = { "general.name", "", "a", "a\0b", "ab", "general.nam" };
    size_t lens[] = { 12, 0, 1, 3, 2, 11 };
    for (size_t i = 0; i < 6; i++) {
        uint64_t id = names_add(&nm, words[i], lens[i]);
        assert_int_equal(gguf_ntab_add(&t, id, &prev), GGUF_OK);
        assert_true(prev == UINT64_MAX);
    }
    for (size_t i = 0; i < 6; i++) {
        assert_true(gguf_ntab_find(&t, words[i], lens[i], &v));
        assert_int_equal(v, i);
    }
    assert_false(gguf_ntab_find(&t, "b", 1, &v));
    assert_false(gguf_ntab_find(&t, "a\0c", 3, &v));
    /* a second value under an existing name: refused, the first is named */
    uint64_t id = names_add(&nm, "a\0b", 3);
    assert_int_equal(gguf_ntab_add(&t, id, &prev), GGUF_E_EXIST);
    assert_int_equal(prev, 3);
    assert_int_equal(t.n, 6);
    assert_true(gguf_ntab_find(&t, "a\0b", 3, &v) && v == 3);
    /* UINT64_MAX cannot be a value */
    assert_int_equal(gguf_ntab_add(&t, UINT64_MAX, NULL), GGUF_E_INVAL);
    gguf_ntab_free(&t);
    assert_false(gguf_ntab_find(&t, "a", 1, &v));
    names_free(&nm);
}

/* More than 2^21 names (the parser's old table stopped growing there and
 * looped forever: test_corrupt.c test_known_many_distinct_keys), in a
 * buffer that moves while they are added. */
static void test_ntab_many(void **state)
{
    (void)state;
    struct names nm = { 0 };
    struct gguf_ntab t;
    uint64_t n = (1ull << 21) + 1000;
    assert_int_equal(gguf_ntab_init(&t, 16, name_of, &nm), GGUF_OK);
    char s[32];
    for (uint64_t i = 0; i < n; i++) {
        int k = snprintf(s, sizeof s, "blk.%llu.w", (unsigned long long)i);
        uint64_t id = names_add(&nm, s, (size_t)k);
        assert_int_equal(gguf_ntab_add(&t, id, NULL), GGUF_OK);
        assert_true((t.n + 0) * 2 <= t.mask + 1);   /* at most half full */
    }
    assert_int_equal(t.n, n);
    for (uint64_t i = 0; i < n; i += 997) {
        int k = snprintf(s, sizeof s, "blk.%llu.w", (unsigned long long)i);
        uint64_t v;
        assert_true(gguf_ntab_find(&t, s, (size_t)k, &v));
        assert_int_equal(v, i);
        uint64_t id = names_add(&nm, s, (size_t)k), prev;
        assert_int_equal(gguf_ntab_add(&t, id, &prev), GGUF_E_EXIST);
        assert_int_equal(prev, i);
    }
    assert_false(gguf_ntab_find(&t, "blk.x.w", 7, NULL));
    gguf_ntab_free(&t);
    names_free(&nm);
}

/* The one errno edge (gguf/diag.h): every code as the table says, for
 * what a caller asked and for a file gguffs makes from what it read (EIO
 * but for ENOMEM and EFBIG); every errno positive. */
static void test_errno_edge(void **state)
{
    (void)state;
    static const struct { enum gguf_err e; int asked, made; } t[] = {
        { GGUF_OK, 0, 0 }, { GGUF_E_IO, EIO, EIO }, { GGUF_E_MAGIC, EINVAL, EIO },
        { GGUF_E_VERSION, EINVAL, EIO }, { GGUF_E_TRUNCATED, EINVAL, EIO },
        { GGUF_E_RANGE, EINVAL, EIO }, { GGUF_E_TYPE, EINVAL, EIO }, { GGUF_E_DUP, EINVAL, EIO },
        { GGUF_E_NOMEM, ENOMEM, ENOMEM }, { GGUF_E_SYNTAX, EINVAL, EIO },
        { GGUF_E_INVAL, EINVAL, EIO }, { GGUF_E_PERM, EPERM, EIO }, { GGUF_E_NOENT, ENOENT, EIO },
        { GGUF_E_EXIST, EEXIST, EIO }, { GGUF_E_INTERRUPTED, EIO, EIO },
        { GGUF_E_TOOBIG, EFBIG, EFBIG },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        assert_int_equal(gguf_err_errno(t[i].e), t[i].asked);
        assert_int_equal(gguf_err_errno_made(t[i].e), t[i].made);
        assert_string_not_equal(gguf_strerror(t[i].e), "unknown error");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buf),
        cmocka_unit_test(test_buf_oom_sticky),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_diag_format),
        cmocka_unit_test(test_diag_names),
        cmocka_unit_test(test_errno_edge),
        cmocka_unit_test(test_ntab_basic),
        cmocka_unit_test(test_ntab_many),
    };
    return cmocka_run_group_tests_name("base", tests, NULL, NULL);
}

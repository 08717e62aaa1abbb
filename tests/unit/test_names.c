/*
 * tests/unit/test_names.c — names as file names (gguf/names.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/names.h"

struct name_case {
    const char *name;
    size_t len;
    const char *fname;   /* encoding with dup 1 */
};

#define C(n, f) { n, sizeof n - 1, f }
static const struct name_case cases[] = {
    C("", "%"),
    C(".", "%2E"),
    C("..", "%2E."),
    C("...", "%2E.."),
    C(".hidden", "%2Ehidden"),
    C("a/b", "a%2Fb"),
    C("/", "%2F"),
    C("//", "%2F%2F"),
    C("%", "%25"),
    C("%%", "%25%25"),
    C("x%2F", "x%252F"),
    C("%2E", "%252E"),
    C("a\0b", "a%00b"),
    C("\0", "%00"),
    C("a.b.c", "a.b.c"),
    C("general.name", "general.name"),
    C("tokenizer.ggml.tokens", "tokenizer.ggml.tokens"),
    C("blk.0.attn_q.weight", "blk.0.attn_q.weight"),
    C("trailing.", "trailing."),
    C("#", "#"),
    C("a#", "a#"),
    C("a#b", "a#b"),
    C("x#2", "x%232"),          /* would read as a duplicate suffix */
    C("x#0", "x%230"),
    C("x#01", "x%2301"),
    C("#2", "%232"),
    C("a#1#2", "a#1%232"),
    C("a#2b", "a#2b"),
    C("a#2#", "a#2#"),
    C("%#2", "%25%232"),
    C(".#3", "%2E%233"),
    C("sp ace\ttab\nnl", "sp ace\ttab\nnl"),
    C("caf\xc3\xa9", "caf\xc3\xa9"),
    C("\xff\xfe", "\xff\xfe"),
    C("A%B/C.D", "A%25B%2FC.D"),
};

static char *enc(const char *name, size_t len, unsigned dup, size_t *n)
{
    struct gguf_buf b = { 0 };
    assert_true(gguf_name_encode(name, len, dup, &b));
    gguf_buf_putc(&b, '\0');
    *n = b.len - 1;
    return b.data;
}

static void decodes_to(const char *fname, size_t flen, const char *name,
                       size_t len, unsigned dup)
{
    struct gguf_buf b = { 0 };
    gguf_buf_put(&b, "pre", 3);   /* decode appends */
    unsigned d = 0;
    if (!gguf_name_decode(fname, flen, &b, &d))
        fail_msg("\"%.*s\" did not decode", (int)flen, fname);
    assert_int_equal(d, dup);
    assert_int_equal(b.len, 3 + len);
    assert_memory_equal(b.data, "pre", 3);
    if (len)
        assert_memory_equal(b.data + 3, name, len);
    gguf_buf_free(&b);
}

static void rejected(const char *fname, size_t flen)
{
    struct gguf_buf b = { 0 };
    gguf_buf_put(&b, "pre", 3);
    unsigned d = 77;
    if (gguf_name_decode(fname, flen, &b, &d))
        fail_msg("\"%.*s\" decoded but should not", (int)flen, fname);
    assert_int_equal(b.len, 3);   /* out unchanged */
    assert_int_equal(d, 77);
    gguf_buf_free(&b);
}

static void test_encode(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n;
        char *f = enc(cases[i].name, cases[i].len, 1, &n);
        if (strcmp(f, cases[i].fname) != 0)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, f, cases[i].fname);
        /* a file name: not empty, no '/', no NUL, not "." or ".." */
        assert_true(n > 0);
        assert_null(memchr(f, '/', n));
        assert_int_equal(strlen(f), n);
        assert_true(strcmp(f, ".") != 0 && strcmp(f, "..") != 0);
        assert_true(f[0] != '.');
        free(f);
        /* dup 0 is treated as 1 */
        f = enc(cases[i].name, cases[i].len, 0, &n);
        assert_string_equal(f, cases[i].fname);
        free(f);
    }
    size_t n;
    char *f = enc("general.name", 12, 2, &n);
    assert_string_equal(f, "general.name#2");
    free(f);
    f = enc("x#2", 3, 3, &n);
    assert_string_equal(f, "x%232#3");
    free(f);
    f = enc("", 0, 12, &n);
    assert_string_equal(f, "%#12");
    free(f);
    f = enc(".", 1, 4294967295u, &n);
    assert_string_equal(f, "%2E#4294967295");
    free(f);
}

static void test_roundtrip(void **state)
{
    (void)state;
    static const unsigned dups[] = { 1, 2, 3, 10, 65535, 4294967295u };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (size_t k = 0; k < sizeof dups / sizeof *dups; k++) {
            size_t n;
            char *f = enc(cases[i].name, cases[i].len, dups[k], &n);
            decodes_to(f, n, cases[i].name, cases[i].len, dups[k]);
            free(f);
        }
    /* every single byte and every pair of interesting bytes */
    const char interesting[] = { '.', '/', '%', '#', '\0', '2', 'F', 'a' };
    for (unsigned c = 0; c < 256; c++) {
        char s[1] = { (char)c };
        size_t n;
        char *f = enc(s, 1, 1, &n);
        decodes_to(f, n, s, 1, 1);
        free(f);
    }
    for (size_t a = 0; a < sizeof interesting; a++)
        for (size_t b = 0; b < sizeof interesting; b++)
            for (size_t c = 0; c < sizeof interesting; c++) {
                char s[3] = { interesting[a], interesting[b], interesting[c] };
                size_t n;
                char *f = enc(s, 3, 1, &n);
                decodes_to(f, n, s, 3, 1);
                free(f);
                f = enc(s, 3, 5, &n);
                decodes_to(f, n, s, 3, 5);
                free(f);
            }
}

static void test_decode_lower_hex(void **state)
{
    (void)state;
    decodes_to("a%2fb", 5, "a/b", 3, 1);
    decodes_to("%2ehidden", 9, ".hidden", 7, 1);
    decodes_to("%2E%2f", 6, "./", 2, 1);   /* hex case is free per escape */
    decodes_to("%2e%2F%25", 9, "./%", 3, 1);
    decodes_to("x%232", 5, "x#2", 3, 1);
    decodes_to("x#2", 3, "x", 1, 2);
    decodes_to("%", 1, "", 0, 1);
    decodes_to("%#2", 3, "", 0, 2);
    decodes_to("a%00b", 5, "a\0b", 3, 1);
    decodes_to("#", 1, "#", 1, 1);
    decodes_to("a#b#2", 5, "a#b", 3, 2);
}

static void test_decode_rejects(void **state)
{
    (void)state;
    static const char *bad[] = {
        "",            /* not a file name */
        ".",           /* leading '.' must be escaped */
        "..",
        ".hidden",
        "a/b",         /* '/' must be escaped */
        "%%",          /* bare '%' that is not the whole name */
        "a%",
        "%2",
        "a%2",
        "%zz",
        "%g0",
        "%41",         /* 'A' is not escaped by the encoder */
        "%2e%2e%2e",   /* only a leading '.' is escaped */
        "a%2E",
        "%23",         /* '#' not before digits is not escaped */
        "a%23b",
        "#2",          /* empty base */
        "x#0",         /* duplicate numbers start at 2 */
        "x#1",
        "x#01",
        "x#002",
        "x#4294967296",
        "x#99999999999999999999",
        "%#1",
        "%#0",
        "%2F#1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        rejected(bad[i], strlen(bad[i]));
    rejected("a\0b", 3);   /* NUL must be escaped */
    rejected("%2F\0", 4);
}

static void test_key_name_valid(void **state)
{
    (void)state;
    static const char *good[] = {
        "a", "general.name", "llama.context_length", "tokenizer.ggml.tokens",
        "a.b.c", "x_1.y_2", "0", "_", "a.0.b", "blk.10.attn_q",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        assert_true(gguf_key_name_valid(good[i], strlen(good[i])));
    static const char *bad[] = {
        "", ".", "..", ".a", "a.", "a..b", "A", "general.Name", "a-b", "a b",
        "a/b", "caf\xc3\xa9", "a\tb", "a#2", "a%", "llama.context length",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(gguf_key_name_valid(bad[i], strlen(bad[i])));
    assert_false(gguf_key_name_valid("a\0b", 3));
    /* length limit: shorter than 65536 */
    char *k = malloc(65536);
    memset(k, 'a', 65536);
    assert_true(gguf_key_name_valid(k, 65535));
    assert_false(gguf_key_name_valid(k, 65536));
    free(k);
}

/* Tools' temporary files in meta/ are told from attempts at new keys. */
static void test_scratch_names(void **state)
{
    (void)state;
    static const char *const scratch[] = {
        ".x.swp", ".general.name.swp", "#general.name#", "general.name~", "sedAb3xQ9",
        "sed4kq9zt", "sedabcdef", "4913", "7", ".", "~",
    };
    static const char *const not_scratch[] = {
        "general.name", "x.BadName", "sed", "sedAb3xQ", "sedAb3xQ9z", "sedAb-xQ9",
        "4913x", "x~y", "", "a#", "491.3",
    };
    for (size_t i = 0; i < sizeof scratch / sizeof *scratch; i++)
        assert_true(gguf_name_is_scratch(scratch[i], strlen(scratch[i])));
    for (size_t i = 0; i < sizeof not_scratch / sizeof *not_scratch; i++)
        assert_false(gguf_name_is_scratch(not_scratch[i], strlen(not_scratch[i])));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_decode_lower_hex),
        cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_key_name_valid),
        cmocka_unit_test(test_scratch_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_value.c — metadata values as text (gguf/value.h).
 *
 * The central property: for every value, render -> parse with the key's
 * type -> the same bytes as in the file.  Values are built here in the
 * "bin" encoding (what follows the value type field), placed at the very end
 * of a heap block so that AddressSanitizer catches any read past the value.
 */
#include <float.h>
#include <stdbool.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/value.h"
/* the counting allocator (-Wl,--wrap=..., tests/unit/meson.build) */
#include "work.h"

static const struct gguf_enc LE = { false, false };
static const struct gguf_enc BE = { true, false };
static const struct gguf_enc V1 = { false, true };
static const struct gguf_enc BE1 = { true, true };

/* ---- building encoded values ------------------------------------------------ */

static void b8(struct gguf_buf *b, uint8_t v)
{
    gguf_buf_putc(b, (char)v);
}

static void b16(const struct gguf_enc *e, struct gguf_buf *b, uint16_t v)
{
    uint8_t x[2] = { (uint8_t)v, (uint8_t)(v >> 8) };
    if (e->big_endian) {
        uint8_t t = x[0]; x[0] = x[1]; x[1] = t;
    }
    gguf_buf_put(b, x, 2);
}

static void b32(const struct gguf_enc *e, struct gguf_buf *b, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        b8(b, (uint8_t)(v >> (e->big_endian ? 24 - 8 * i : 8 * i)));
}

static void b64(const struct gguf_enc *e, struct gguf_buf *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b8(b, (uint8_t)(v >> (e->big_endian ? 56 - 8 * i : 8 * i)));
}

static void bcnt(const struct gguf_enc *e, struct gguf_buf *b, uint64_t v)
{
    if (e->v1)
        b32(e, b, (uint32_t)v);
    else
        b64(e, b, v);
}

static void bstr(const struct gguf_enc *e, struct gguf_buf *b, const char *s,
                 size_t n)
{
    bcnt(e, b, n);
    gguf_buf_put(b, s, n);
}

static void barr(const struct gguf_enc *e, struct gguf_buf *b, unsigned et,
                 uint64_t n)
{
    b32(e, b, et);
    bcnt(e, b, n);
}

static uint64_t rdcnt(const struct gguf_enc *e, const uint8_t *p)
{
    return e->v1 ? gguf_rd32(e, p) : gguf_rd64(e, p);
}

/* ---- helpers ------------------------------------------------------------ */

/* A gguf_file holding one key whose value is bin (n bytes), which ends
 * exactly where the heap block ends. */
struct onekv {
    struct gguf_file f;
    struct gguf_kv kv;
};

static void onekv_init(struct onekv *o, const struct gguf_enc *e,
                       unsigned type, const void *bin, size_t n)
{
    memset(o, 0, sizeof *o);
    o->f.hdr = malloc(n + 8);
    assert_non_null(o->f.hdr);
    memset(o->f.hdr, 0xAA, 8);
    if (n)
        memcpy(o->f.hdr + 8, bin, n);
    o->f.hdr_size = n + 8;
    o->f.enc = *e;
    o->f.n_kv = 1;
    o->f.kv = &o->kv;
    o->kv.type = (uint8_t)type;
    o->kv.count = 1;
    o->kv.dup = 1;
    o->kv.val_off = 8;
    if (type == GGUF_ARRAY) {
        unsigned hw = 4 + (e->v1 ? 4 : 8);
        assert_true(n >= hw);
        o->kv.elem_type = (uint8_t)gguf_rd32(e, o->f.hdr + 8);
        o->kv.count = rdcnt(e, o->f.hdr + 12);
        o->kv.val_off += hw;
    }
    o->kv.val_size = o->f.hdr_size - o->kv.val_off;
}

static char *typedesc_str(const struct gguf_typedesc *t)
{
    struct gguf_buf b = { 0 };
    assert_true(gguf_typedesc_format(t, &b));
    gguf_buf_putc(&b, '\0');
    return b.data;
}

/*
 * The round trip: bin renders as `text` (if not NULL; tlen bytes), its type
 * reads as tdesc, and parsing the rendered text with tdesc gives bin back.
 */
static void rt_n(const struct gguf_enc *e, const char *tdesc, const void *bin,
                 size_t n, const char *text, size_t tlen)
{
    struct gguf_typedesc t;
    assert_true(gguf_typedesc_parse(tdesc, strlen(tdesc), &t));
    struct onekv o;
    onekv_init(&o, e, t.levels[0], bin, n);

    struct gguf_typedesc kt;
    gguf_kv_typedesc(&o.f, &o.kv, &kt);
    char *ks = typedesc_str(&kt);
    assert_string_equal(ks, tdesc);
    free(ks);

    struct gguf_buf out = { 0 };
    assert_int_equal(gguf_render_kv(&o.f, &o.kv, &out), GGUF_OK);
    if (text) {
        if (out.len != tlen || (tlen && memcmp(out.data, text, tlen) != 0))
            print_error("rendered \"%.*s\", expected \"%.*s\"\n", (int)out.len,
                        out.data ? out.data : "", (int)tlen, text);
        assert_int_equal(out.len, tlen);
        if (tlen)
            assert_memory_equal(out.data, text, tlen);
    }

    struct gguf_buf back = { 0 };
    struct gguf_diag d = { "", 0 };
    enum gguf_err err = gguf_parse_value(e, &t, out.data, out.len, &back, &d);
    if (err)
        print_error("parse of \"%.*s\" failed: %s\n", (int)out.len, out.data,
                    d.msg);
    assert_int_equal(err, GGUF_OK);
    assert_int_equal(back.len, n);
    if (n)
        assert_memory_equal(back.data, bin, n);
    gguf_buf_free(&out);
    gguf_buf_free(&back);
    free(o.f.hdr);
}

static void rt(const struct gguf_enc *e, const char *tdesc,
               const struct gguf_buf *bin, const char *text)
{
    rt_n(e, tdesc, bin->data, bin->len, text, text ? strlen(text) : 0);
}

/* Parses text as tdesc and expects the encoding bin. */
static void parses_to(const struct gguf_enc *e, const char *tdesc,
                      const char *text, size_t tlen, const struct gguf_buf *bin)
{
    struct gguf_typedesc t;
    assert_true(gguf_typedesc_parse(tdesc, strlen(tdesc), &t));
    struct gguf_buf out = { 0 };
    struct gguf_diag d = { "", 0 };
    enum gguf_err err = gguf_parse_value(e, &t, text, tlen, &out, &d);
    if (err)
        print_error("parse of \"%.*s\" as %s failed: %s\n", (int)tlen, text,
                    tdesc, d.msg);
    assert_int_equal(err, GGUF_OK);
    assert_int_equal(out.len, bin->len);
    if (bin->len)
        assert_memory_equal(out.data, bin->data, bin->len);
    gguf_buf_free(&out);
}

/* Parsing text as tdesc fails with code at offset, msg containing frag
 * (if not NULL), and leaves out unchanged. */
static void fails_n(const struct gguf_enc *e, const char *tdesc,
                    const char *text, size_t tlen, enum gguf_err code,
                    uint64_t offset, const char *frag)
{
    struct gguf_typedesc t;
    assert_true(gguf_typedesc_parse(tdesc, strlen(tdesc), &t));
    struct gguf_buf out = { 0 };
    gguf_buf_put(&out, "keep", 4);
    struct gguf_diag d = { "", 12345 };
    enum gguf_err err = gguf_parse_value(e, &t, text, tlen, &out, &d);
    if (err != code || d.offset != offset ||
        (frag && !strstr(d.msg, frag)))
        print_error("\"%.*s\" as %s: got err %d offset %llu msg \"%s\"; "
                    "expected err %d offset %llu msg ~ \"%s\"\n", (int)tlen,
                    text, tdesc, err, (unsigned long long)d.offset, d.msg,
                    code, (unsigned long long)offset, frag ? frag : "");
    assert_int_equal(err, code);
    assert_int_equal(d.offset, offset);
    if (frag)
        assert_non_null(strstr(d.msg, frag));
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, "keep", 4);
    gguf_buf_free(&out);
}

static void fails(const char *tdesc, const char *text, enum gguf_err code,
                  uint64_t offset, const char *frag)
{
    fails_n(&LE, tdesc, text, strlen(text), code, offset, frag);
}

static const struct gguf_enc *const ALL_ENC[] = { &LE, &BE, &V1, &BE1 };

/* ---- names of types ---------------------------------------------------- */

static void test_vtype_name(void **state)
{
    (void)state;
    const char *want[] = { "u8", "i8", "u16", "i16", "u32", "i32", "f32",
                           "bool", "string", "array", "u64", "i64", "f64" };
    for (unsigned i = 0; i < GGUF_VTYPE_COUNT; i++)
        assert_string_equal(gguf_vtype_name(i), want[i]);
    assert_string_equal(gguf_vtype_name(13), "?");
    assert_string_equal(gguf_vtype_name(0xffffffffu), "?");
}

static void test_typedesc(void **state)
{
    (void)state;
    const char *good[] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
        "u64", "i64", "f64", "array[u8]", "array[string]", "array[array[i32]]",
        "array[array[array[string]]]",
        "array[array[array[array[array[array[array[array[f64]]]]]]]]",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        struct gguf_typedesc t;
        assert_true(gguf_typedesc_parse(good[i], strlen(good[i]), &t));
        char *s = typedesc_str(&t);
        assert_string_equal(s, good[i]);
        free(s);
    }
    struct gguf_typedesc t;
    assert_true(gguf_typedesc_parse("array[array[i32]]", 17, &t));
    assert_int_equal(t.depth, 3);
    assert_int_equal(t.levels[0], GGUF_ARRAY);
    assert_int_equal(t.levels[1], GGUF_ARRAY);
    assert_int_equal(t.levels[2], GGUF_I32);
    /* length-delimited, not NUL-terminated */
    assert_true(gguf_typedesc_parse("u32xyz", 3, &t));
    assert_int_equal(t.depth, 1);
    assert_int_equal(t.levels[0], GGUF_U32);

    const char *bad[] = {
        "", "array", "array[]", "array[u8", "u8]", "array[u8]]", "U8", " u8",
        "u8 ", "u8\n", "array[array]", "array(u8)", "uint8", "str", "[u8]",
        "array[[u8]]", "?",
        /* nine levels of arrays: one more than GGUF_MAX_NEST */
        "array[array[array[array[array[array[array[array[array[u8]]]]]]]]]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_false(gguf_typedesc_parse(bad[i], strlen(bad[i]), &t));

    /* format refuses malformed descriptions */
    struct gguf_buf b = { 0 };
    struct gguf_typedesc x = { 0 };
    assert_false(gguf_typedesc_format(&x, &b));            /* depth 0 */
    x.depth = 1;
    x.levels[0] = GGUF_ARRAY;
    assert_false(gguf_typedesc_format(&x, &b));            /* no elem type */
    x.levels[0] = 13;
    assert_false(gguf_typedesc_format(&x, &b));
    x.depth = 2;
    x.levels[0] = GGUF_U8;
    x.levels[1] = GGUF_U8;
    assert_false(gguf_typedesc_format(&x, &b));            /* u8 of u8 */
    x.depth = GGUF_MAX_NEST + 2;
    assert_false(gguf_typedesc_format(&x, &b));
    assert_int_equal(b.len, 0);
    gguf_buf_free(&b);

    /* parse_value refuses them too */
    struct gguf_diag d;
    x.depth = 1;
    x.levels[0] = GGUF_ARRAY;
    assert_int_equal(gguf_parse_value(&LE, &x, "1", 1, &b, &d), GGUF_E_INVAL);
    assert_int_equal(b.len, 0);
}

/* ---- integers ------------------------------------------------------------------- */

struct ival {
    const char *type;
    unsigned size;
    uint64_t bits;
    const char *text;
};

static void test_integers(void **state)
{
    (void)state;
    static const struct ival v[] = {
        { "u8", 1, 0, "0" }, { "u8", 1, 255, "255" }, { "u8", 1, 7, "7" },
        { "i8", 1, 0x80, "-128" }, { "i8", 1, 0x7f, "127" },
        { "i8", 1, 0xff, "-1" }, { "i8", 1, 0, "0" },
        { "u16", 2, 65535, "65535" }, { "u16", 2, 0x1234, "4660" },
        { "i16", 2, 0x8000, "-32768" }, { "i16", 2, 0x7fff, "32767" },
        { "u32", 4, 4294967295u, "4294967295" }, { "u32", 4, 8192, "8192" },
        { "i32", 4, 0x80000000u, "-2147483648" },
        { "i32", 4, 0x7fffffff, "2147483647" }, { "i32", 4, 0xffffffffu, "-1" },
        { "u64", 8, UINT64_MAX, "18446744073709551615" }, { "u64", 8, 0, "0" },
        { "u64", 8, 1ull << 53, "9007199254740992" },
        { "i64", 8, 1ull << 63, "-9223372036854775808" },
        { "i64", 8, INT64_MAX, "9223372036854775807" },
        { "i64", 8, UINT64_MAX, "-1" },
    };
    for (size_t k = 0; k < sizeof ALL_ENC / sizeof *ALL_ENC; k++) {
        const struct gguf_enc *e = ALL_ENC[k];
        for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
            struct gguf_buf b = { 0 };
            switch (v[i].size) {
            case 1: b8(&b, (uint8_t)v[i].bits); break;
            case 2: b16(e, &b, (uint16_t)v[i].bits); break;
            case 4: b32(e, &b, (uint32_t)v[i].bits); break;
            default: b64(e, &b, v[i].bits); break;
            }
            char text[64];
            snprintf(text, sizeof text, "%s\n", v[i].text);
            rt(e, v[i].type, &b, text);
            /* without the trailing newline, with a '+' */
            parses_to(e, v[i].type, v[i].text, strlen(v[i].text), &b);
            if (v[i].text[0] != '-') {
                snprintf(text, sizeof text, "+%s", v[i].text);
                parses_to(e, v[i].type, text, strlen(text), &b);
            }
            gguf_buf_free(&b);
        }
    }
    /* byte order on the wire */
    struct gguf_buf b = { 0 };
    gguf_buf_put(&b, "\x01\x02\x03\x04", 4);
    parses_to(&BE, "u32", "16909060", 8, &b);
    parses_to(&LE, "u32", "67305985", 8, &b);
    gguf_buf_free(&b);
    /* "-0", leading zeros */
    b8(&b, 0);
    parses_to(&LE, "u8", "-0", 2, &b);
    parses_to(&LE, "i8", "-0\n", 3, &b);
    gguf_buf_free(&b);
    b8(&b, 7);
    parses_to(&LE, "u8", "007", 3, &b);
    gguf_buf_free(&b);
}

static void test_integer_errors(void **state)
{
    (void)state;
    fails("u8", "256", GGUF_E_RANGE, 0, "\"256\" is out of range for u8");
    fails("u8", "-1", GGUF_E_RANGE, 0, "out of range for u8");
    fails("i8", "128", GGUF_E_RANGE, 0, "out of range for i8");
    fails("i8", "-129", GGUF_E_RANGE, 0, NULL);
    fails("u16", "65536", GGUF_E_RANGE, 0, NULL);
    fails("i16", "-32769", GGUF_E_RANGE, 0, NULL);
    fails("i16", "32768", GGUF_E_RANGE, 0, NULL);
    fails("u32", "4294967296", GGUF_E_RANGE, 0, NULL);
    fails("i32", "2147483648", GGUF_E_RANGE, 0, NULL);
    fails("i32", "-2147483649", GGUF_E_RANGE, 0, NULL);
    fails("u64", "18446744073709551616", GGUF_E_RANGE, 0, NULL);
    fails("u64", "99999999999999999999999", GGUF_E_RANGE, 0, NULL);
    fails("u64", "-1", GGUF_E_RANGE, 0, NULL);
    fails("i64", "9223372036854775808", GGUF_E_RANGE, 0, NULL);
    fails("i64", "-9223372036854775809", GGUF_E_RANGE, 0, NULL);

    fails("u8", "", GGUF_E_SYNTAX, 0, "\"\" is not a u8");
    fails("u8", "\n", GGUF_E_SYNTAX, 0, "\"\" is not a u8");
    fails("i32", "abc", GGUF_E_SYNTAX, 0, "\"abc\" is not an i32");
    fails("u32", "1.5", GGUF_E_SYNTAX, 0, "\"1.5\" is not a u32");
    fails("u32", "0x10", GGUF_E_SYNTAX, 0, NULL);
    fails("u32", "1e3", GGUF_E_SYNTAX, 0, NULL);
    /* white space around a number is ignored (what editors save) */
    {
        struct gguf_buf one = { 0 };
        gguf_put32(&one, &LE, 1);
        static const char *const around[] = { " 1", "1 ", "1\n\n", "\n1", "1\r\n",
                                              "\t 1 \r\n", "1\r" };
        for (size_t i = 0; i < sizeof around / sizeof *around; i++)
            parses_to(&LE, "u32", around[i], strlen(around[i]), &one);
        gguf_buf_free(&one);
    }
    fails("u32", "1 2", GGUF_E_SYNTAX, 0, "\"1 2\" is not a u32");
    fails("u32", " \r\n", GGUF_E_SYNTAX, 2, "\"\" is not a u32");
    fails("u32", "1\x0b\x0bx", GGUF_E_SYNTAX, 0, NULL);
    fails("i64", "+", GGUF_E_SYNTAX, 0, NULL);
    fails("i64", "-", GGUF_E_SYNTAX, 0, NULL);
    fails("i64", "--1", GGUF_E_SYNTAX, 0, NULL);
    fails("i64", "+-1", GGUF_E_SYNTAX, 0, NULL);
    /* syntax wins over range: a huge number with garbage is a syntax error */
    fails("u64", "99999999999999999999999x", GGUF_E_SYNTAX, 0, NULL);
    fails_n(&LE, "u8", "1\0", 2, GGUF_E_SYNTAX, 0, "\"1\\x00\"");
    /* long text is shortened in the message */
    fails("u8", "1111111111222222222233333333334444444444555555555",
          GGUF_E_RANGE, 0, "4444444444...\" is out of range");
}

/* ---- floats --------------------------------------------------------------------- */

static void f32_bits_rt(const struct gguf_enc *e, uint32_t bits, const char *text)
{
    struct gguf_buf b = { 0 };
    b32(e, &b, bits);
    char t[80];
    if (text)
        snprintf(t, sizeof t, "%s\n", text);
    rt(e, "f32", &b, text ? t : NULL);
    gguf_buf_free(&b);
}

static void f64_bits_rt(const struct gguf_enc *e, uint64_t bits, const char *text)
{
    struct gguf_buf b = { 0 };
    b64(e, &b, bits);
    char t[80];
    if (text)
        snprintf(t, sizeof t, "%s\n", text);
    rt(e, "f64", &b, text ? t : NULL);
    gguf_buf_free(&b);
}

static uint32_t f32bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint64_t f64bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, 8);
    return u;
}

static void test_floats(void **state)
{
    (void)state;
    static const struct { float v; const char *t; } f[] = {
        { 1e-06f, "1e-06" }, { 10000.0f, "10000" }, { 0.1f, "0.1" },
        { 0.0f, "0" }, { -0.0f, "-0" }, { 1.0f, "1" }, { -2.5f, "-2.5" },
        { 1e-05f, "1e-05" }, { 0.0001f, "0.0001" }, { 1e+16f, "1e+16" },
        { 1e15f, "1000000000000000" }, { 123456789.0f, "123456790" },
        { 16777216.0f, "16777216" }, { 3.14159265f, "3.1415927" },
        { FLT_MAX, "3.4028235e+38" }, { -FLT_MAX, "-3.4028235e+38" },
        { FLT_MIN, "1.1754944e-38" }, { FLT_TRUE_MIN, "1e-45" },
        { 500000.0f, "500000" }, { 0.00015f, "0.00015" },
        { 0.3f, "0.3" }, { 2.0f / 3.0f, "0.6666667" },
    };
    for (size_t k = 0; k < sizeof ALL_ENC / sizeof *ALL_ENC; k++)
        for (size_t i = 0; i < sizeof f / sizeof *f; i++)
            f32_bits_rt(ALL_ENC[k], f32bits(f[i].v), f[i].t);

    static const struct { double v; const char *t; } d[] = {
        { 1e-06, "1e-06" }, { 10000.0, "10000" }, { 0.1, "0.1" },
        { 0.0, "0" }, { -0.0, "-0" }, { 1e16, "1e+16" }, { 1e15, "1000000000000000" },
        { 9007199254740993.0, "9007199254740992" },
        { 1234567890123456.7, "1234567890123456.8" },
        { 0.30000000000000004, "0.30000000000000004" },
        { DBL_MAX, "1.7976931348623157e+308" }, { DBL_MIN, "2.2250738585072014e-308" },
        { DBL_TRUE_MIN, "5e-324" }, { -DBL_TRUE_MIN, "-5e-324" },
        { 1e300, "1e+300" }, { 1e-300, "1e-300" }, { 100.0, "100" },
        { 1.0 / 3.0, "0.3333333333333333" }, { 10000000.5, "10000000.5" },
    };
    for (size_t k = 0; k < sizeof ALL_ENC / sizeof *ALL_ENC; k++)
        for (size_t i = 0; i < sizeof d / sizeof *d; i++)
            f64_bits_rt(ALL_ENC[k], f64bits(d[i].v), d[i].t);

    /* non-finite */
    f32_bits_rt(&LE, 0x7f800000, "inf");
    f32_bits_rt(&LE, 0xff800000, "-inf");
    f32_bits_rt(&LE, 0x7fc00000, "nan");
    f32_bits_rt(&LE, 0xffc00000, "-nan");
    f32_bits_rt(&LE, 0x7fc00001, "nan(0x400001)");
    f32_bits_rt(&LE, 0x7f800001, "nan(0x1)");        /* signalling */
    f32_bits_rt(&BE, 0xffbfffff, "-nan(0x3fffff)");
    f32_bits_rt(&LE, 0x7fffffff, "nan(0x7fffff)");
    f64_bits_rt(&LE, 0x7ff0000000000000ull, "inf");
    f64_bits_rt(&LE, 0xfff0000000000000ull, "-inf");
    f64_bits_rt(&LE, 0x7ff8000000000000ull, "nan");
    f64_bits_rt(&LE, 0xfff8000000000000ull, "-nan");
    f64_bits_rt(&BE, 0x7ff0000000000001ull, "nan(0x1)");
    f64_bits_rt(&LE, 0xfff8000000000123ull, "-nan(0x8000000000123)");
    f64_bits_rt(&LE, 0x7fffffffffffffffull, "nan(0xfffffffffffff)");

    /* every f32 subnormal boundary and a sweep of exponents */
    for (uint32_t e8 = 0; e8 < 256; e8++)
        for (uint32_t m = 0; m < 4; m++) {
            uint32_t mant = m == 0 ? 0 : m == 1 ? 1 : m == 2 ? 0x400000 : 0x7fffff;
            f32_bits_rt(&LE, e8 << 23 | mant, NULL);
            f32_bits_rt(&LE, 1u << 31 | e8 << 23 | mant, NULL);
        }
    for (uint64_t e11 = 0; e11 < 2048; e11 += 7) {
        f64_bits_rt(&LE, e11 << 52 | 1, NULL);
        f64_bits_rt(&LE, e11 << 52 | 0xfffffffffffffull, NULL);
    }

    /* gguf_fmt_* directly */
    char buf[48];
    assert_int_equal(gguf_fmt_f32(1e-06f, buf, sizeof buf), 5);
    assert_string_equal(buf, "1e-06");
    assert_int_equal(gguf_fmt_f64(-1.5, buf, sizeof buf), 4);
    assert_string_equal(buf, "-1.5");
    gguf_fmt_f64(-INFINITY, buf, sizeof buf);
    assert_string_equal(buf, "-inf");
}

static void float_parses(const char *type, const char *text, uint64_t bits)
{
    struct gguf_buf b = { 0 };
    if (strcmp(type, "f32") == 0)
        b32(&LE, &b, (uint32_t)bits);
    else
        b64(&LE, &b, bits);
    parses_to(&LE, type, text, strlen(text), &b);
    gguf_buf_free(&b);
}

static void test_float_parse(void **state)
{
    (void)state;
    float_parses("f32", "1e3", f32bits(1000.0f));
    float_parses("f32", "0x1p-3\n", f32bits(0.125f));
    float_parses("f32", "+1.5", f32bits(1.5f));
    float_parses("f32", ".5", f32bits(0.5f));
    float_parses("f32", "5.", f32bits(5.0f));
    float_parses("f32", "1E-6", f32bits(1e-06f));
    float_parses("f32", "inf", 0x7f800000);
    float_parses("f32", "-Infinity", 0xff800000);
    float_parses("f32", "INF", 0x7f800000);
    float_parses("f32", "nan", 0x7fc00000);
    float_parses("f32", "NaN", 0x7fc00000);
    float_parses("f32", "-NAN", 0xffc00000);
    float_parses("f32", "nan()", 0x7fc00000);
    float_parses("f32", "nan(0x400000)", 0x7fc00000);
    float_parses("f32", "nan(0X1)", 0x7f800001);
    float_parses("f32", "nan(0xaBc)", 0x7f800abc);
    float_parses("f32", "+nan(3)", 0x7f800003);
    float_parses("f64", "nan(0x1)", 0x7ff0000000000001ull);
    float_parses("f64", "-nan", 0xfff8000000000000ull);
    float_parses("f64", "0.1", f64bits(0.1));
    float_parses("f64", "1e-400", 0);                   /* underflows to 0 */
    float_parses("f64", "-1e-400", 1ull << 63);
    float_parses("f64", "4e-324", 1);                    /* rounds to min */
    float_parses("f32", "1e-46", 0);
    float_parses("f32", "1.4e-45", 1);
    /* f32 parsed as float directly: a double-rounding case */
    float_parses("f32", "1.00000005960464477539062500001", 0x3f800001);
    /* a long number is fine */
    char longnum[400];
    memset(longnum, '0', sizeof longnum);
    longnum[0] = '1';
    longnum[1] = '.';
    longnum[sizeof longnum - 1] = '\0';
    float_parses("f64", longnum, f64bits(1.0));

    fails("f32", "", GGUF_E_SYNTAX, 0, "\"\" is not an f32");
    fails("f64", "abc", GGUF_E_SYNTAX, 0, "\"abc\" is not an f64");
    float_parses("f32", " 1", f32bits(1.0f));
    float_parses("f32", "\t1", f32bits(1.0f));
    float_parses("f32", "1 \r\n", f32bits(1.0f));
    fails("f32", "1 .5", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "1e", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "1.5x", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "1,5", GGUF_E_SYNTAX, 0, NULL);
    float_parses("f32", "1\n\n", f32bits(1.0f));
    fails("f32", "nanx", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "nan(", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "nan(0x)", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "nan(xyz)", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "nan(1)x", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "infx", GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "-", GGUF_E_SYNTAX, 0, NULL);
    fails_n(&LE, "f32", "1\0", 2, GGUF_E_SYNTAX, 0, NULL);
    fails("f32", "1e39", GGUF_E_RANGE, 0, "\"1e39\" is out of range for f32");
    fails("f32", "-3.5e38", GGUF_E_RANGE, 0, NULL);
    fails("f64", "1e309", GGUF_E_RANGE, 0, "out of range for f64");
    fails("f32", "nan(0x0)", GGUF_E_RANGE, 0, NULL);     /* would be inf */
    fails("f32", "nan(0x800000)", GGUF_E_RANGE, 0, NULL);
    fails("f64", "nan(0x10000000000000)", GGUF_E_RANGE, 0, NULL);
    fails("f64", "nan(0xffffffffffffffffffffffff)", GGUF_E_RANGE, 0, NULL);
}

/* xorshift64*: deterministic random bits */
static uint64_t rnd_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 2685821657736338717ull;
}

static void test_float_random(void **state)
{
    (void)state;
    const int N = 1000000;
    struct gguf_typedesc t32, t64;
    assert_true(gguf_typedesc_parse("f32", 3, &t32));
    assert_true(gguf_typedesc_parse("f64", 3, &t64));
    struct gguf_buf out = { 0 };
    struct gguf_diag d;
    char text[64];
    for (int i = 0; i < N; i++) {
        uint32_t bits = (uint32_t)(rnd() >> 32);
        float v;
        memcpy(&v, &bits, 4);
        size_t n = gguf_fmt_f32(v, text, sizeof text);
        out.len = 0;
        enum gguf_err err = gguf_parse_value(&LE, &t32, text, n, &out, &d);
        if (err || out.len != 4 || memcmp(out.data, &bits, 4) != 0)
            fail_msg("f32 0x%08x -> \"%s\" does not round-trip", bits, text);
    }
    for (int i = 0; i < N; i++) {
        uint64_t bits = rnd();
        double v;
        memcpy(&v, &bits, 8);
        size_t n = gguf_fmt_f64(v, text, sizeof text);
        out.len = 0;
        enum gguf_err err = gguf_parse_value(&LE, &t64, text, n, &out, &d);
        if (err || out.len != 8 || memcmp(out.data, &bits, 8) != 0)
            fail_msg("f64 0x%016llx -> \"%s\" does not round-trip",
                     (unsigned long long)bits, text);
    }
    gguf_buf_free(&out);
}

/* The definition: the least p for which "%.{p-1}e" reads back, correctly
 * rounded (cutting digits from a longer rounded string is not the same). */
static void test_float_reference(void **state)
{
    (void)state;
    char got[64], t[64];
    for (int i = 0; i < 200000; i++) {
        bool f32 = i & 1;
        double v;
        uint64_t r = rnd();
        if (f32) {
            uint32_t u = (uint32_t)r;
            float f;
            if (i % 4 == 1)   /* decimal-looking data, e.g. 46.558002 */
                f = (float)(int)(u % 100000) * 0.001f;
            else
                memcpy(&f, &u, 4);
            if (!isfinite(f))
                continue;
            v = f;
            gguf_fmt_f32(f, got, sizeof got);
        } else {
            memcpy(&v, &r, 8);
            if (i % 4 == 2)
                v = (double)(r % 1000000) * 0.001;
            if (!isfinite(v))
                continue;
            gguf_fmt_f64(v, got, sizeof got);
        }
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*e", p - 1, v);
            if (f32 ? strtof(t, NULL) == (float)v : strtod(t, NULL) == v)
                break;
        }
        /* same digits: both texts read back to the same double */
        if (strtod(got, NULL) != strtod(t, NULL))
            fail_msg("%s: got \"%s\", the reference is \"%s\"",
                     f32 ? "f32" : "f64", got, t);
    }
    /* a case where cutting 46.5580025 (printf's 9 digits) rounds up */
    char buf[48];
    gguf_fmt_f32((float)46558 * 0.001f, buf, sizeof buf);
    assert_string_equal(buf, "46.558002");
}

/* ---- bool ------------------------------------------------------------------------ */

static void test_bool(void **state)
{
    (void)state;
    struct gguf_buf b = { 0 };
    b8(&b, 0);
    rt(&LE, "bool", &b, "false\n");
    parses_to(&LE, "bool", "0", 1, &b);
    parses_to(&LE, "bool", "false", 5, &b);
    gguf_buf_free(&b);
    b8(&b, 1);
    rt(&BE1, "bool", &b, "true\n");
    parses_to(&LE, "bool", "1\n", 2, &b);
    parses_to(&LE, "bool", "true", 4, &b);
    /* any case, white space around it ignored */
    parses_to(&LE, "bool", "TRUE", 4, &b);
    parses_to(&LE, "bool", "True \r\n", 7, &b);
    gguf_buf_free(&b);
    b8(&b, 0);
    parses_to(&LE, "bool", " FALSE\n", 7, &b);
    gguf_buf_free(&b);
    /* odd bytes render as their decimal value and round-trip */
    b8(&b, 2);
    rt(&LE, "bool", &b, "2\n");
    gguf_buf_free(&b);
    b8(&b, 255);
    rt(&LE, "bool", &b, "255\n");
    gguf_buf_free(&b);
    /* in arrays too */
    barr(&LE, &b, GGUF_BOOL, 4);
    b8(&b, 1); b8(&b, 0); b8(&b, 2); b8(&b, 1);
    rt(&LE, "array[bool]", &b, "true\nfalse\n2\ntrue\n");
    gguf_buf_free(&b);

    fails("bool", "yes", GGUF_E_SYNTAX, 0, "\"yes\" is not a bool");
    fails("bool", "no", GGUF_E_SYNTAX, 0, "\"no\" is not a bool");
    fails("bool", "truee", GGUF_E_SYNTAX, 0, NULL);
    fails("bool", "", GGUF_E_SYNTAX, 0, NULL);
    fails("bool", "1.0", GGUF_E_SYNTAX, 0, NULL);
    fails("bool", "256", GGUF_E_RANGE, 0, "out of range for bool");
    fails("bool", "-1", GGUF_E_RANGE, 0, NULL);
    fails("array[bool]", "true\nfalse\nmaybe\n", GGUF_E_SYNTAX, 11,
          "line 3: \"maybe\" is not a bool");
}

/* ---- strings --------------------------------------------------------------------- */

static void str_rt(const struct gguf_enc *e, const char *s, size_t n)
{
    struct gguf_buf b = { 0 }, t = { 0 };
    bstr(e, &b, s, n);
    gguf_buf_put(&t, s, n);
    gguf_buf_putc(&t, '\n');
    rt_n(e, "string", b.data, b.len, t.data, t.len);
    gguf_buf_free(&b);
    gguf_buf_free(&t);
}

static void test_strings(void **state)
{
    (void)state;
    static const char *s[] = {
        "", "hello", "llama", "a\nb", "ends with newline\n", "\n", "\n\n",
        "back\\slash", "cr\r\n", "tab\there", "caf\xc3\xa9", "\xe2\x82\xac",
        "\xf0\x9f\xa6\x99 emoji", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf",
        "{% for message in messages %}{{ message['content'] }}{% endfor %}",
    };
    for (size_t k = 0; k < sizeof ALL_ENC / sizeof *ALL_ENC; k++)
        for (size_t i = 0; i < sizeof s / sizeof *s; i++)
            str_rt(ALL_ENC[k], s[i], strlen(s[i]));
    str_rt(&LE, "nul\0inside", 10);
    str_rt(&BE, "\0", 1);

    /* one trailing newline is removed, no more */
    struct gguf_buf b = { 0 };
    bstr(&LE, &b, "abc", 3);
    parses_to(&LE, "string", "abc", 3, &b);
    parses_to(&LE, "string", "abc\n", 4, &b);
    gguf_buf_free(&b);
    bstr(&LE, &b, "abc\n", 4);
    parses_to(&LE, "string", "abc\n\n", 5, &b);
    gguf_buf_free(&b);
    bstr(&V1, &b, "", 0);
    assert_int_equal(b.len, 4);
    parses_to(&V1, "string", "\n", 1, &b);
    parses_to(&V1, "string", "", 0, &b);
    gguf_buf_free(&b);
    /* wire format: BE v1 length */
    gguf_buf_put(&b, "\x00\x00\x00\x02hi", 6);
    parses_to(&BE1, "string", "hi\n", 3, &b);
    gguf_buf_free(&b);
}

static void test_utf8_errors(void **state)
{
    (void)state;
    static const struct { const char *s; uint64_t off; } bad[] = {
        { "\x80", 0 },                      /* lone continuation */
        { "ab\xbf", 2 },
        { "\xc0\x80", 0 },                  /* overlong NUL */
        { "\xc1\xbf", 0 },                  /* overlong */
        { "x\xe0\x80\x80", 1 },             /* overlong 3-byte */
        { "x\xe0\x9f\xbf", 1 },
        { "\xf0\x80\x80\x80", 0 },          /* overlong 4-byte */
        { "\xf0\x8f\xbf\xbf", 0 },
        { "ok\xed\xa0\x80", 2 },            /* surrogate U+D800 */
        { "\xed\xbf\xbf", 0 },              /* surrogate U+DFFF */
        { "\xf4\x90\x80\x80", 0 },          /* U+110000 */
        { "\xf5\x80\x80\x80", 0 },
        { "\xff", 0 }, { "\xfe", 0 },
        { "abc\xe2\x82", 3 },               /* truncated */
        { "\xe2\x82x", 0 },
        { "\xc3", 0 },
        { "\xf0\x9f\xa6", 0 },
        { "\xc3\xa9\xc3", 2 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        fails("string", bad[i].s, GGUF_E_SYNTAX, bad[i].off, "invalid UTF-8");
        /* the same inside an array of strings, on line 2 */
        char t[64];
        snprintf(t, sizeof t, "fine\n%s\n", bad[i].s);
        fails("array[string]", t, GGUF_E_SYNTAX, 5 + bad[i].off,
              "line 2: invalid UTF-8");
    }
    /* valid edge cases pass */
    struct gguf_buf b = { 0 };
    bstr(&LE, &b, "\xed\x9f\xbf\xee\x80\x80", 6);  /* U+D7FF U+E000 */
    parses_to(&LE, "string", "\xed\x9f\xbf\xee\x80\x80", 6, &b);
    gguf_buf_free(&b);
}

/* ---- arrays --------------------------------------------------------------------- */

static void test_arrays_scalar(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof ALL_ENC / sizeof *ALL_ENC; k++) {
        const struct gguf_enc *e = ALL_ENC[k];
        struct gguf_buf b = { 0 };
        barr(e, &b, GGUF_I32, 5);
        b32(e, &b, 0); b32(e, &b, 1); b32(e, &b, 0xffffffffu);
        b32(e, &b, 0x80000000u); b32(e, &b, 0x7fffffff);
        rt(e, "array[i32]", &b, "0\n1\n-1\n-2147483648\n2147483647\n");
        /* the final newline is optional */
        parses_to(e, "array[i32]", "0\n1\n-1\n-2147483648\n2147483647",
                  strlen("0\n1\n-1\n-2147483648\n2147483647"), &b);
        gguf_buf_free(&b);

        barr(e, &b, GGUF_F32, 3);
        b32(e, &b, f32bits(1e-06f)); b32(e, &b, 0x7fc00000);
        b32(e, &b, f32bits(-0.0f));
        rt(e, "array[f32]", &b, "1e-06\nnan\n-0\n");
        gguf_buf_free(&b);

        barr(e, &b, GGUF_U64, 2);
        b64(e, &b, UINT64_MAX); b64(e, &b, 0);
        rt(e, "array[u64]", &b, "18446744073709551615\n0\n");
        gguf_buf_free(&b);

        barr(e, &b, GGUF_I64, 1);
        b64(e, &b, 1ull << 63);
        rt(e, "array[i64]", &b, "-9223372036854775808\n");
        gguf_buf_free(&b);

        barr(e, &b, GGUF_F64, 2);
        b64(e, &b, f64bits(DBL_TRUE_MIN)); b64(e, &b, 0xfff0000000000000ull);
        rt(e, "array[f64]", &b, "5e-324\n-inf\n");
        gguf_buf_free(&b);

        barr(e, &b, GGUF_U8, 3);
        b8(&b, 0); b8(&b, 128); b8(&b, 255);
        rt(e, "array[u8]", &b, "0\n128\n255\n");
        gguf_buf_free(&b);

        barr(e, &b, GGUF_I8, 2);
        b8(&b, 0x80); b8(&b, 0x7f);
        rt(e, "array[i8]", &b, "-128\n127\n");
        gguf_buf_free(&b);

        barr(e, &b, GGUF_U16, 2);
        b16(e, &b, 0xffff); b16(e, &b, 0x0102);
        rt(e, "array[u16]", &b, "65535\n258\n");
        gguf_buf_free(&b);

        barr(e, &b, GGUF_I16, 2);
        b16(e, &b, 0x8000); b16(e, &b, 1);
        rt(e, "array[i16]", &b, "-32768\n1\n");
        gguf_buf_free(&b);

        barr(e, &b, GGUF_U32, 1);
        b32(e, &b, 0xffffffffu);
        rt(e, "array[u32]", &b, "4294967295\n");
        gguf_buf_free(&b);

        /* empty arrays are empty text */
        for (unsigned t = 0; t < GGUF_VTYPE_COUNT; t++) {
            if (t == GGUF_ARRAY)
                continue;
            barr(e, &b, t, 0);
            char td[32];
            snprintf(td, sizeof td, "array[%s]", gguf_vtype_name(t));
            rt(e, td, &b, "");
            gguf_buf_free(&b);
        }
    }
}

static void test_arrays_string(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof ALL_ENC / sizeof *ALL_ENC; k++) {
        const struct gguf_enc *e = ALL_ENC[k];
        struct gguf_buf b = { 0 };
        const char *el[] = { "hello", "", "a\nb", "back\\slash", "cr\rlf\r\n",
                             "\\n", "\\", "\n", "tab\t", "\xc4\xa0the",
                             "<|endoftext|>", "nul\\0" };
        barr(e, &b, GGUF_STRING, sizeof el / sizeof *el);
        for (size_t i = 0; i < sizeof el / sizeof *el; i++)
            bstr(e, &b, el[i], strlen(el[i]));
        rt(e, "array[string]", &b,
           "hello\n\na\\nb\nback\\\\slash\ncr\\rlf\\r\\n\n\\\\n\n\\\\\n\\n\n"
           "tab\t\n\xc4\xa0the\n<|endoftext|>\nnul\\\\0\n");
        gguf_buf_free(&b);

        /* one empty string is "\n"; two are "\n\n" */
        barr(e, &b, GGUF_STRING, 1);
        bstr(e, &b, "", 0);
        rt(e, "array[string]", &b, "\n");
        gguf_buf_free(&b);
        barr(e, &b, GGUF_STRING, 2);
        bstr(e, &b, "", 0);
        bstr(e, &b, "", 0);
        rt(e, "array[string]", &b, "\n\n");
        gguf_buf_free(&b);

        /* a NUL inside an element */
        barr(e, &b, GGUF_STRING, 2);
        bstr(e, &b, "a\0b", 3);
        bstr(e, &b, "c", 1);
        rt_n(e, "array[string]", b.data, b.len, "a\0b\nc\n", 6);
        gguf_buf_free(&b);
    }
    /* without the final newline; a literal CR is kept */
    struct gguf_buf b = { 0 };
    barr(&LE, &b, GGUF_STRING, 2);
    bstr(&LE, &b, "x", 1);
    bstr(&LE, &b, "y\r", 2);
    parses_to(&LE, "array[string]", "x\ny\r", 4, &b);
    gguf_buf_free(&b);

    fails("array[string]", "ok\nbad\\t\n", GGUF_E_SYNTAX, 6,
          "line 2: bad escape \"\\\\t\"");
    fails("array[string]", "trailing\\", GGUF_E_SYNTAX, 8, "line 1: bad escape");
    fails("array[string]", "a\nb\ntrailing\\\n", GGUF_E_SYNTAX, 12, "line 3");
    fails("array[string]", "\\x41", GGUF_E_SYNTAX, 0, NULL);
    fails("array[string]", "\\\"", GGUF_E_SYNTAX, 0, NULL);
}

static void test_array_errors(void **state)
{
    (void)state;
    fails("array[u8]", "1\n2\nabc\n", GGUF_E_SYNTAX, 4,
          "line 3: \"abc\" is not a u8");
    fails("array[u8]", "1\n2\n300\n", GGUF_E_RANGE, 4,
          "line 3: \"300\" is out of range for u8");
    fails("array[i32]", "1\n\n2\n", GGUF_E_SYNTAX, 2, "line 2: \"\" is not an i32");
    fails("array[i32]", "1\n2\n\n", GGUF_E_SYNTAX, 4, "line 3");
    fails("array[i32]", "\n", GGUF_E_SYNTAX, 0, "line 1");
    fails("array[i32]", " 1 x\n", GGUF_E_SYNTAX, 1, "line 1");
    {
        /* CRLF lines and blanks around elements: the same array */
        struct gguf_typedesc t;
        assert_true(gguf_typedesc_parse("array[i32]", 10, &t));
        struct gguf_buf a = { 0 }, b = { 0 };
        struct gguf_diag d;
        assert_int_equal(gguf_parse_value(&LE, &t, "1\n2\n", 4, &a, &d), GGUF_OK);
        assert_int_equal(gguf_parse_value(&LE, &t, " 1\r\n2 \t\r\n", 9, &b, &d), GGUF_OK);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.data, b.data, a.len);
        gguf_buf_free(&a);
        gguf_buf_free(&b);
    }
    fails("array[f32]", "1\n2\n3\n4\nx", GGUF_E_SYNTAX, 8, "line 5: \"x\" is not an f32");
    fails("array[f64]", "1\n1e999\n", GGUF_E_RANGE, 2, "line 2");
    fails("array[u64]", "1,2,3\n", GGUF_E_SYNTAX, 0, NULL);
}

/* ---- nested arrays ------------------------------------------------------------------ */

static void test_nested(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof ALL_ENC / sizeof *ALL_ENC; k++) {
        const struct gguf_enc *e = ALL_ENC[k];
        struct gguf_buf b = { 0 };

        /* [[1, 2, 3], [], [-1]] */
        barr(e, &b, GGUF_ARRAY, 3);
        barr(e, &b, GGUF_I32, 3);
        b32(e, &b, 1); b32(e, &b, 2); b32(e, &b, 3);
        barr(e, &b, GGUF_I32, 0);
        barr(e, &b, GGUF_I32, 1);
        b32(e, &b, 0xffffffffu);
        rt(e, "array[array[i32]]", &b, "[1, 2, 3]\n[]\n[-1]\n");
        parses_to(e, "array[array[i32]]", "[1,2,3]\n [ ] \n\t[ -1 ]",
                  strlen("[1,2,3]\n [ ] \n\t[ -1 ]"), &b);
        gguf_buf_free(&b);

        /* strings as JSON strings */
        barr(e, &b, GGUF_ARRAY, 2);
        barr(e, &b, GGUF_STRING, 3);
        bstr(e, &b, "a\"b", 3);
        bstr(e, &b, "back\\slash\n\r\t\b\f\x01\x1f\x7f", 18);
        bstr(e, &b, "caf\xc3\xa9", 5);
        barr(e, &b, GGUF_STRING, 2);
        bstr(e, &b, "", 0);
        bstr(e, &b, "nul\0", 4);
        rt_n(e, "array[array[string]]", b.data, b.len,
             "[\"a\\\"b\", \"back\\\\slash\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\", "
             "\"caf\xc3\xa9\"]\n[\"\", \"nul\\u0000\"]\n",
             strlen("[\"a\\\"b\", \"back\\\\slash\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\", "
                    "\"caf\xc3\xa9\"]\n[\"\", \"nul\\u0000\"]\n"));
        gguf_buf_free(&b);

        /* floats and bools inside JSON */
        barr(e, &b, GGUF_ARRAY, 1);
        barr(e, &b, GGUF_F32, 4);
        b32(e, &b, 0x7fc00000); b32(e, &b, 0xff800000);
        b32(e, &b, f32bits(1e-06f)); b32(e, &b, 0x7f800001);
        rt(e, "array[array[f32]]", &b, "[nan, -inf, 1e-06, nan(0x1)]\n");
        gguf_buf_free(&b);
        barr(e, &b, GGUF_ARRAY, 1);
        barr(e, &b, GGUF_BOOL, 3);
        b8(&b, 1); b8(&b, 0); b8(&b, 7);
        rt(e, "array[array[bool]]", &b, "[true, false, 7]\n");
        gguf_buf_free(&b);

        /* three levels: [[1], []], [] and [[2, 3]] */
        barr(e, &b, GGUF_ARRAY, 3);
        barr(e, &b, GGUF_ARRAY, 2);
        barr(e, &b, GGUF_U16, 1);
        b16(e, &b, 1);
        barr(e, &b, GGUF_U16, 0);
        barr(e, &b, GGUF_ARRAY, 0);
        barr(e, &b, GGUF_ARRAY, 1);
        barr(e, &b, GGUF_U16, 2);
        b16(e, &b, 2); b16(e, &b, 3);
        rt(e, "array[array[array[u16]]]", &b, "[[1], []]\n[]\n[[2, 3]]\n");
        gguf_buf_free(&b);

        /* 3 levels of strings */
        barr(e, &b, GGUF_ARRAY, 1);
        barr(e, &b, GGUF_ARRAY, 1);
        barr(e, &b, GGUF_STRING, 1);
        bstr(e, &b, "x]y,\"z", 6);
        rt(e, "array[array[array[string]]]", &b, "[[\"x]y,\\\"z\"]]\n");
        gguf_buf_free(&b);

        /* an empty array of arrays */
        barr(e, &b, GGUF_ARRAY, 0);
        rt(e, "array[array[u8]]", &b, "");
        gguf_buf_free(&b);

        /* the deepest nesting allowed: 8 array levels */
        for (int i = 0; i < GGUF_MAX_NEST - 1; i++)
            barr(e, &b, GGUF_ARRAY, 1);
        barr(e, &b, GGUF_I8, 1);
        b8(&b, 0xff);
        rt(e, "array[array[array[array[array[array[array[array[i8]]]]]]]]", &b,
           "[[[[[[[-1]]]]]]]\n");
        gguf_buf_free(&b);
    }
}

static void test_nested_json_parse(void **state)
{
    (void)state;
    struct gguf_buf b = { 0 };
    /* escapes: \/ \u00e9, a surrogate pair, upper-case hex */
    barr(&LE, &b, GGUF_ARRAY, 1);
    barr(&LE, &b, GGUF_STRING, 3);
    bstr(&LE, &b, "/\xc3\xa9", 3);
    bstr(&LE, &b, "\xf0\x9f\x98\x80", 4);
    bstr(&LE, &b, "\xe2\x82\xac", 3);
    const char *t = "[\"\\/\\u00e9\", \"\\ud83d\\ude00\", \"\\u20AC\"]";
    parses_to(&LE, "array[array[string]]", t, strlen(t), &b);
    gguf_buf_free(&b);

    /* JSON syntax errors; offsets are into the whole text */
    fails("array[array[i32]]", "[1]\n[1,]\n", GGUF_E_SYNTAX, 7,
          "line 2: \"\" is not an i32");
    fails("array[array[i32]]", "[1 2]", GGUF_E_SYNTAX, 3, "expected ',' or ']'");
    fails("array[array[i32]]", "[1]x", GGUF_E_SYNTAX, 3, "trailing");
    fails("array[array[i32]]", "[1] [2]", GGUF_E_SYNTAX, 4, "trailing");
    fails("array[array[i32]]", "1", GGUF_E_SYNTAX, 0, "expected '['");
    fails("array[array[i32]]", "[", GGUF_E_SYNTAX, 1, NULL);
    fails("array[array[i32]]", "[1", GGUF_E_SYNTAX, 2, NULL);
}

static void test_nested_json_errors(void **state)
{
    (void)state;
    fails("array[array[i32]]", "[,]", GGUF_E_SYNTAX, 1, NULL);
    fails("array[array[i32]]", "[1.5]", GGUF_E_SYNTAX, 1, "\"1.5\" is not an i32");
    fails("array[array[u8]]", "[1]\n[2, 256]", GGUF_E_RANGE, 8,
          "line 2: \"256\" is out of range for u8");
    fails("array[array[i32]]", "[[1]]", GGUF_E_SYNTAX, 1, NULL);
    fails("array[array[array[i32]]]", "[1]", GGUF_E_SYNTAX, 1, "expected '['");
    fails("array[array[string]]", "[abc]", GGUF_E_SYNTAX, 1,
          "expected a JSON string");
    fails("array[array[string]]", "[\"abc]", GGUF_E_SYNTAX, 1,
          "unterminated string");
    fails("array[array[string]]", "[\"abc\\\"]", GGUF_E_SYNTAX, 1,
          "unterminated string");
    fails("array[array[string]]", "[\"a\\x\"]", GGUF_E_SYNTAX, 3, "bad escape");
    fails("array[array[string]]", "[\"a\\u12\"]", GGUF_E_SYNTAX, 3, "bad \\u");
    fails("array[array[string]]", "[\"a\\u12g4\"]", GGUF_E_SYNTAX, 3, "bad \\u");
    fails("array[array[string]]", "[\"\\ud800\"]", GGUF_E_SYNTAX, 2, "bad \\u");
    fails("array[array[string]]", "[\"\\ud800\\u0041\"]", GGUF_E_SYNTAX, 2, NULL);
    fails("array[array[string]]", "[\"\\udc00\"]", GGUF_E_SYNTAX, 2, NULL);
    fails("array[array[string]]", "[\"a\tb\"]", GGUF_E_SYNTAX, 3, "control byte");
    fails("array[array[string]]", "[\"\xc3\x28\"]", GGUF_E_SYNTAX, 2,
          "invalid UTF-8");
    fails("array[array[string]]", "[\"a\" \"b\"]", GGUF_E_SYNTAX, 5, NULL);
    fails("array[array[bool]]", "[yes]", GGUF_E_SYNTAX, 1, "not a bool");
    fails("array[array[f32]]", "[1e39]", GGUF_E_RANGE, 1, NULL);
}

/* ---- typedesc from the file -------------------------------------------------------- */

static void kv_type_is(const struct gguf_enc *e, unsigned type,
                       const struct gguf_buf *bin, const char *want)
{
    struct onekv o;
    onekv_init(&o, e, type, bin->data, bin->len);
    struct gguf_typedesc t;
    gguf_kv_typedesc(&o.f, &o.kv, &t);
    char *s = typedesc_str(&t);
    assert_string_equal(s, want);
    free(s);
    free(o.f.hdr);
}

static void test_kv_typedesc(void **state)
{
    (void)state;
    struct gguf_buf b = { 0 };
    b32(&LE, &b, 5);
    kv_type_is(&LE, GGUF_U32, &b, "u32");
    gguf_buf_free(&b);
    bstr(&BE1, &b, "x", 1);
    kv_type_is(&BE1, GGUF_STRING, &b, "string");
    gguf_buf_free(&b);
    barr(&LE, &b, GGUF_STRING, 0);
    kv_type_is(&LE, GGUF_ARRAY, &b, "array[string]");
    gguf_buf_free(&b);
    /* empty nested array: u8 */
    barr(&LE, &b, GGUF_ARRAY, 0);
    kv_type_is(&LE, GGUF_ARRAY, &b, "array[array[u8]]");
    gguf_buf_free(&b);
    /* the first element decides, even if empty */
    barr(&BE, &b, GGUF_ARRAY, 2);
    barr(&BE, &b, GGUF_F64, 0);
    barr(&BE, &b, GGUF_I8, 1);
    b8(&b, 1);
    kv_type_is(&BE, GGUF_ARRAY, &b, "array[array[f64]]");
    gguf_buf_free(&b);
    /* 3 levels, first inner array empty: innermost reported as u8 */
    barr(&V1, &b, GGUF_ARRAY, 1);
    barr(&V1, &b, GGUF_ARRAY, 0);
    kv_type_is(&V1, GGUF_ARRAY, &b, "array[array[array[u8]]]");
    gguf_buf_free(&b);
    barr(&V1, &b, GGUF_ARRAY, 1);
    barr(&V1, &b, GGUF_ARRAY, 1);
    barr(&V1, &b, GGUF_STRING, 0);
    kv_type_is(&V1, GGUF_ARRAY, &b, "array[array[array[string]]]");
    gguf_buf_free(&b);
}

/* ---- malformed encodings given to the renderer ---------------------------------------- */

static void test_render_errors(void **state)
{
    (void)state;
    struct gguf_buf out = { 0 };
    gguf_buf_put(&out, "keep", 4);
    uint8_t *v = malloc(16);
    memset(v, 0xff, 16);
    /* too short */
    assert_int_equal(gguf_render_value(&LE, GGUF_U32, 0, v, 1, 3, &out),
                     GGUF_E_TRUNCATED);
    assert_int_equal(gguf_render_value(&LE, GGUF_STRING, 0, v, 1, 7, &out),
                     GGUF_E_TRUNCATED);
    assert_int_equal(gguf_render_value(&LE, GGUF_STRING, 0, v + 8, 1, 8, &out),
                     GGUF_E_TRUNCATED);   /* length 2^64-1 */
    assert_int_equal(gguf_render_value(&LE, GGUF_ARRAY, GGUF_U16, v, 9, 16, &out),
                     GGUF_E_TRUNCATED);
    assert_int_equal(gguf_render_value(&LE, GGUF_ARRAY, GGUF_U64, v, UINT64_MAX,
                                       16, &out), GGUF_E_TRUNCATED);
    assert_int_equal(gguf_render_value(&LE, GGUF_ARRAY, GGUF_STRING, v, 1, 16,
                                       &out), GGUF_E_TRUNCATED);
    assert_int_equal(gguf_render_value(&LE, GGUF_ARRAY, GGUF_ARRAY, v, 1, 16,
                                       &out), GGUF_E_TYPE);  /* elem type 2^32-1 */
    /* bad types */
    assert_int_equal(gguf_render_value(&LE, 13, 0, v, 1, 16, &out), GGUF_E_TYPE);
    assert_int_equal(gguf_render_value(&LE, GGUF_ARRAY, 13, v, 1, 16, &out),
                     GGUF_E_TYPE);
    assert_int_equal(out.len, 4);
    /* a prefix of an array (count smaller than stored) renders fine */
    memset(v, 0, 16);
    assert_int_equal(gguf_render_value(&LE, GGUF_ARRAY, GGUF_U16, v, 2, 16, &out),
                     GGUF_OK);
    assert_int_equal(out.len, 8);
    assert_memory_equal(out.data, "keep0\n0\n", 8);
    free(v);

    /* nested deeper than GGUF_MAX_NEST */
    struct gguf_buf b = { 0 };
    for (int i = 0; i < GGUF_MAX_NEST; i++)
        barr(&LE, &b, GGUF_ARRAY, 1);
    barr(&LE, &b, GGUF_U8, 0);
    out.len = 0;
    assert_int_equal(gguf_render_value(&LE, GGUF_ARRAY, GGUF_ARRAY,
                                       (uint8_t *)b.data + 12, 1, b.len - 12,
                                       &out), GGUF_E_RANGE);
    assert_int_equal(out.len, 0);
    /* nested truncated */
    assert_int_equal(gguf_render_value(&LE, GGUF_ARRAY, GGUF_ARRAY,
                                       (uint8_t *)b.data + 12, 1, 20, &out),
                     GGUF_E_TRUNCATED);
    gguf_buf_free(&b);

    /* a kv whose offsets lie outside the header */
    struct onekv o;
    uint8_t one = 1;
    onekv_init(&o, &LE, GGUF_U8, &one, 1);
    o.kv.val_size = 2;
    assert_int_equal(gguf_render_kv(&o.f, &o.kv, &out), GGUF_E_TRUNCATED);
    o.kv.val_off = 100;
    assert_int_equal(gguf_render_kv(&o.f, &o.kv, &out), GGUF_E_TRUNCATED);
    free(o.f.hdr);
    gguf_buf_free(&out);
}

/* ---- work: a vocabulary -------------------------------------------------------- */

/* Renders and parses back an array of n tokens; returns the work counted
 * (tests/unit/work.h) for the render (w[0]) and the parse (w[1]). */
static void vocab_work(unsigned n, struct work w[2])
{
    struct gguf_buf b = { 0 };
    barr(&LE, &b, GGUF_STRING, n);
    char tok[32];
    for (unsigned i = 0; i < n; i++) {
        int len = snprintf(tok, sizeof tok, "\xc4\xa0tok%u%s", i,
                           i % 1000 == 0 ? "\\\n" : "");
        bstr(&LE, &b, tok, (size_t)len);
    }
    struct onekv o;
    onekv_init(&o, &LE, GGUF_ARRAY, b.data, b.len);
    struct gguf_buf out = { 0 };
    work_reset();
    assert_int_equal(gguf_render_kv(&o.f, &o.kv, &out), GGUF_OK);
    w[0] = work;
    struct gguf_typedesc t;
    assert_true(gguf_typedesc_parse("array[string]", 13, &t));
    struct gguf_buf back = { 0 };
    struct gguf_diag d;
    work_reset();
    assert_int_equal(gguf_parse_value(&LE, &t, out.data, out.len, &back, &d),
                     GGUF_OK);
    w[1] = work;
    assert_int_equal(back.len, b.len);
    assert_memory_equal(back.data, b.data, b.len);
    gguf_buf_free(&out);
    gguf_buf_free(&back);
    gguf_buf_free(&b);
    free(o.f.hdr);
}

/* A 150k-token vocabulary renders and parses back to the same bytes, with
 * work linear in the tokens: counted, not timed (8 x the tokens may cost at
 * most 10 x each count; quadratic growth of a buffer would be 64 x). */
static void test_vocab_work(void **state)
{
    (void)state;
    const unsigned N = 150000;
    struct work small[2], big[2];
    vocab_work(N / 8, small);
    vocab_work(N, big);
    static const char *const step[2] = { "render", "parse" };
    for (int k = 0; k < 2; k++) {
        const uint64_t a[3] = { small[k].allocs, small[k].alloc_bytes, small[k].moved_bytes };
        const uint64_t z[3] = { big[k].allocs, big[k].alloc_bytes, big[k].moved_bytes };
        static const char *const what[3] = { "allocations", "bytes allocated",
                                             "bytes moved by realloc" };
        for (int m = 0; m < 3; m++) {
            print_message("vocabulary %s, %u then %u tokens: %s %llu -> %llu\n", step[k],
                          N / 8, N, what[m], (unsigned long long)a[m],
                          (unsigned long long)z[m]);
            if (z[m] > 10 * a[m] + 4096)
                fail_msg("%s of %u tokens: %llu %s, %u tokens: %llu (more than 10x for 8x)",
                         step[k], N / 8, (unsigned long long)a[m], what[m], N,
                         (unsigned long long)z[m]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vtype_name),
        cmocka_unit_test(test_typedesc),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_integer_errors),
        cmocka_unit_test(test_floats),
        cmocka_unit_test(test_float_parse),
        cmocka_unit_test(test_float_random),
        cmocka_unit_test(test_float_reference),
        cmocka_unit_test(test_bool),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_utf8_errors),
        cmocka_unit_test(test_arrays_scalar),
        cmocka_unit_test(test_arrays_string),
        cmocka_unit_test(test_array_errors),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_nested_json_parse),
        cmocka_unit_test(test_nested_json_errors),
        cmocka_unit_test(test_kv_typedesc),
        cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_vocab_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_safetensors.c — model.safetensors' layout
 * (gguf/safetensors.h): the header's bytes, the order and alignment of the
 * spans, what is left out and why, the metadata's keys, sizes that would
 * overflow, and a layout of a million tensors.  The integration test
 * (tests/integration/test_safetensors.py) reads the file with a reader of
 * its own and json.loads.
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

#include "gb.h"
#include "gguf/gguf.h"
#include "gguf/safetensors.h"
#include "gguf/types.h"

/* Tensors described by hand: the layout reads only these fields. */
struct fake {
    const char *name;
    size_t name_len;        /* 0: strlen(name) */
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
    bool big_endian, has_f32;
    struct gguf_tensor t;
};

struct fakes {
    struct fake *f;
    uint64_t n;
};

static void get(void *ctx, uint64_t i, struct gguf_st_in *out)
{
    struct fakes *fs = ctx;
    struct fake *f = &fs->f[i];
    out->name = f->name;
    out->name_len = (uint32_t)(f->name_len ? f->name_len : strlen(f->name));
    out->t = &f->t;
    out->big_endian = f->big_endian;
    out->has_f32 = f->has_f32;
}

/* Fills t from the fake: element count, and nbytes as the parser would. */
static void fill(struct fake *f, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_tensor *t = &f[i].t;
        memset(t, 0, sizeof *t);
        t->type = f[i].type;
        t->n_dims = f[i].n_dims;
        t->n_elems = 1;
        for (unsigned d = 0; d < t->n_dims; d++) {
            t->ne[d] = f[i].ne[d];
            t->n_elems *= t->ne[d];
        }
        const struct ggml_type_info *ti = ggml_type_get(t->type);
        t->nbytes = ti ? t->n_elems / ti->blck_elems * ti->blck_bytes : 8;
    }
}

/* The header's JSON as a C string (hdr without the length, padding kept). */
static char *json_of(const struct gguf_st_layout *l)
{
    uint64_t n = 0;
    for (unsigned b = 0; b < 8; b++)
        n |= (uint64_t)(unsigned char)l->hdr.data[b] << (8 * b);
    assert_int_equal(n + 8, l->hdr.len);
    char *s = malloc(n + 1);
    assert_non_null(s);
    memcpy(s, l->hdr.data + 8, n);
    s[n] = '\0';
    return s;
}

/* Spans: contiguous from the header's end, each aligned to its element
 * size in the file, sizes largest first; the file's size their end. */
static void check_spans(const struct gguf_st_layout *l)
{
    assert_int_equal(l->hdr.len % 8, 0);
    uint64_t at = l->hdr.len;
    for (uint64_t i = 0; i < l->n_span; i++) {
        const struct gguf_st_span *s = &l->span[i];
        assert_int_equal(s->start, at);
        assert_int_equal(s->start % s->esize, 0);
        assert_int_equal(s->len % s->esize, 0);
        if (i)
            assert_true(l->span[i - 1].esize >= s->esize);
        at += s->len;
    }
    assert_int_equal(l->size, at);
}

static void test_layout(void **state)
{
    (void)state;
    struct fake f[] = {
        { .name = "b.i8", .type = GGML_T_I8, .n_dims = 1, .ne = { 3 } },
        { .name = "a.f16", .type = GGML_T_F16, .n_dims = 2, .ne = { 5, 3 } },
        { .name = "q", .type = GGML_T_Q4_0, .n_dims = 2, .ne = { 64, 2 }, .has_f32 = true },
        { .name = "d.f64", .type = GGML_T_F64, .n_dims = 1, .ne = { 1 } },
        { .name = "c.f32", .type = GGML_T_F32, .n_dims = 4, .ne = { 2, 3, 1, 2 } },
        { .name = "e.bf16", .type = GGML_T_BF16, .n_dims = 1, .ne = { 1 } },
        { .name = "a.i64", .type = GGML_T_I64, .n_dims = 1, .ne = { 2 } },
        { .name = "empty", .type = GGML_T_I32, .n_dims = 2, .ne = { 0, 4 } },
    };
    uint64_t n = sizeof f / sizeof *f;
    fill(f, n);
    struct fakes fs = { f, n };
    struct gguf_st_layout l;
    struct gguf_diag d;
    assert_int_equal(gguf_safetensors(NULL, n, get, &fs, &l, &d), GGUF_OK);
    assert_int_equal(l.n_span, n);
    assert_int_equal(l.n_omitted, 0);
    check_spans(&l);
    /* order: 8-byte (a.i64, d.f64), 4-byte (c.f32, empty, q), 2-byte
     * (a.f16, e.bf16), 1-byte (b.i8) */
    const char *order[] = { "a.i64", "d.f64", "c.f32", "empty", "q", "a.f16", "e.bf16", "b.i8" };
    for (uint64_t i = 0; i < n; i++)
        assert_string_equal(l.span[i].name, order[i]);
    assert_true(l.span[4].f32);          /* q: its f32 bytes */
    assert_int_equal(l.span[4].len, 128 * 4);
    assert_false(l.span[5].f32);
    assert_int_equal(l.span[5].len, 30);
    assert_int_equal(l.span[3].len, 0);
    char *j = json_of(&l);
    /* the exact text of a few entries: dtype, numpy shape, offsets */
    assert_non_null(strstr(j, "{\"__metadata__\":{\"format\":\"pt\"},"
                              "\"a.i64\":{\"dtype\":\"I64\",\"shape\":[2],"
                              "\"data_offsets\":[0,16]},"
                              "\"d.f64\":{\"dtype\":\"F64\",\"shape\":[1],"
                              "\"data_offsets\":[16,24]},"
                              "\"c.f32\":{\"dtype\":\"F32\",\"shape\":[2,1,3,2],"
                              "\"data_offsets\":[24,72]},"
                              "\"empty\":{\"dtype\":\"I32\",\"shape\":[4,0],"
                              "\"data_offsets\":[72,72]},"
                              "\"q\":{\"dtype\":\"F32\",\"shape\":[2,64],"
                              "\"data_offsets\":[72,584]},"));
    assert_non_null(strstr(j, "\"e.bf16\":{\"dtype\":\"BF16\""));
    assert_non_null(strstr(j, "\"b.i8\":{\"dtype\":\"I8\",\"shape\":[3],"
                              "\"data_offsets\":[616,619]}}"));
    /* padded with spaces to a multiple of 8 */
    size_t jl = strlen(j);
    while (jl && j[jl - 1] == ' ')
        jl--;
    assert_int_equal(j[jl - 1], '}');
    assert_true(l.hdr.len - 8 - jl < 8);
    /* find: the span holding an offset, empty spans skipped */
    assert_int_equal(gguf_st_find(&l, l.hdr.len), 0);
    assert_int_equal(gguf_st_find(&l, l.hdr.len + 16), 1);
    assert_int_equal(gguf_st_find(&l, l.hdr.len + 72), 4);   /* not "empty" */
    assert_int_equal(gguf_st_find(&l, l.size - 1), n - 1);
    assert_int_equal(gguf_st_find(&l, l.size), n);
    free(j);
    gguf_st_free(&l);
}

/* Big-endian files: every tensor as F32 with its f32 bytes, a tensor
 * without an f32 view left out; names JSON can not hold left out too. */
static void test_left_out(void **state)
{
    (void)state;
    struct fake f[] = {
        { .name = "be.f16", .type = GGML_T_F16, .n_dims = 1, .ne = { 3 }, .big_endian = true,
          .has_f32 = true },
        { .name = "be.q", .type = GGML_T_Q4_0, .n_dims = 1, .ne = { 32 }, .big_endian = true },
        { .name = "unknown", .type = 57, .n_dims = 1, .ne = { 8 } },
        { .name = "bad\xff" "name", .type = GGML_T_F32, .n_dims = 1, .ne = { 1 } },
        { .name = "__metadata__", .type = GGML_T_F32, .n_dims = 1, .ne = { 1 } },
        { .name = "quote\"back\\slash\x01\ttab \xc3\xa9", .type = GGML_T_I8, .n_dims = 1,
          .ne = { 1 } },
        { .name = "nul\0in", .name_len = 6, .type = GGML_T_I8, .n_dims = 1, .ne = { 1 } },
    };
    uint64_t n = sizeof f / sizeof *f;
    fill(f, n);
    struct fakes fs = { f, n };
    struct gguf_st_layout l;
    assert_int_equal(gguf_safetensors(NULL, n, get, &fs, &l, NULL), GGUF_OK);
    check_spans(&l);
    assert_int_equal(l.n_span, 3);
    assert_int_equal(l.n_omitted, 4);
    assert_string_equal(l.span[0].name, "be.f16");
    assert_true(l.span[0].f32);
    assert_int_equal(l.span[0].len, 12);
    char *j = json_of(&l);
    assert_non_null(strstr(j, "\"be.f16\":{\"dtype\":\"F32\",\"shape\":[3]"));
    assert_non_null(strstr(j, "\"gguffs.omitted\":\"be.q\\u000aunknown\\u000abad\xef\xbf\xbd"
                              "name\\u000a__metadata__\"}"));
    assert_non_null(strstr(j, "\"nul\\u0000in\":{"));
    assert_non_null(strstr(j, "\"quote\\\"back\\\\slash\\u0001\\u0009tab \xc3\xa9\":{"));
    assert_null(strstr(j, "\"bad"));
    free(j);
    gguf_st_free(&l);
}

/* __metadata__: the file's scalar string keys, first occurrence, UTF-8
 * only, never "format" (that is "pt"). */
static void test_metadata(void **state)
{
    (void)state;
    for (int be = 0; be < 2; be++) {
        struct gb b = { .be = be };
        gb_header(&b, 3, 0, 7);
        gb_kv_str(&b, "general.name", "a \"model\"\n\x7f");
        gb_kv_u32(&b, "general.alignment", 32);
        gb_kv_str(&b, "format", "gguf");
        gb_kv_str(&b, "bad.value", "caf\xe9");
        gb_kv_str(&b, "bad.key\xff", "x");
        gb_kv_str(&b, "general.name", "second");
        gb_kv_str(&b, "empty", "");
        struct gguf_file *gf = NULL;
        struct gguf_diag d;
        assert_int_equal(gguf_parse(b.p, b.len, b.len, &gf, &d, NULL), GGUF_OK);
        struct fakes fs = { NULL, 0 };
        struct gguf_st_layout l;
        assert_int_equal(gguf_safetensors(gf, 0, get, &fs, &l, &d), GGUF_OK);
        char *j = json_of(&l);
        assert_non_null(strstr(j, "{\"__metadata__\":{\"format\":\"pt\","
                                  "\"general.name\":\"a \\\"model\\\"\\u000a\x7f\","
                                  "\"empty\":\"\"}}"));
        assert_int_equal(l.n_span, 0);
        assert_int_equal(l.size, l.hdr.len);
        free(j);
        gguf_st_free(&l);
        gguf_close(gf);
        free(b.p);
    }
}

/* Sizes that do not fit an off_t are refused, never wrapped. */
static void test_overflow(void **state)
{
    (void)state;
    struct fake f[] = {
        { .name = "huge", .type = GGML_T_Q8_0, .n_dims = 1, .ne = { 0 }, .has_f32 = true },
    };
    fill(f, 1);
    f[0].t.n_elems = f[0].t.ne[0] = (uint64_t)1 << 62;     /* f32: 2^64 bytes */
    struct fakes fs = { f, 1 };
    struct gguf_st_layout l;
    struct gguf_diag d;
    /* too large: EFBIG at the errno edge (gguf/diag.h), for a stat as for
     * a read of the file */
    enum gguf_err e = gguf_safetensors(NULL, 1, get, &fs, &l, &d);
    assert_int_equal(gguf_err_errno(e), EFBIG);
    assert_int_equal(gguf_err_errno_made(e), EFBIG);
    assert_non_null(strstr(d.msg, "huge"));
    gguf_st_free(&l);
    /* each fits, the sum does not */
    struct fake g[] = {
        { .name = "a", .type = GGML_T_Q8_0, .n_dims = 1, .has_f32 = true },
        { .name = "b", .type = GGML_T_Q8_0, .n_dims = 1, .has_f32 = true },
    };
    fill(g, 2);
    g[0].t.n_elems = g[1].t.n_elems = (uint64_t)1 << 60;
    fs = (struct fakes){ g, 2 };
    assert_int_equal(gguf_err_errno(gguf_safetensors(NULL, 2, get, &fs, &l, &d)), EFBIG);
    gguf_st_free(&l);
    /* a plain type's nbytes that is not n_elems * its size */
    struct fake h[] = { { .name = "odd", .type = GGML_T_F16, .n_dims = 1, .ne = { 4 } } };
    fill(h, 1);
    h[0].t.nbytes = 7;
    fs = (struct fakes){ h, 1 };
    assert_int_equal(gguf_safetensors(NULL, 1, get, &fs, &l, &d), GGUF_E_RANGE);
    assert_int_equal(gguf_err_errno_made(GGUF_E_RANGE), EIO);     /* bad data, not too large */
    gguf_st_free(&l);
}

/* A million tensors: the header is exact, the order and offsets right. */
static void test_many(void **state)
{
    (void)state;
    uint64_t n = 1000000;
    struct fake *f = calloc(n, sizeof *f);
    char *names = malloc(n * 16);
    assert_non_null(f);
    assert_non_null(names);
    static const uint32_t types[] = { GGML_T_F32, GGML_T_I8, GGML_T_F16, GGML_T_Q8_0 };
    for (uint64_t i = 0; i < n; i++) {
        snprintf(names + i * 16, 16, "blk.%llu.w", (unsigned long long)(n - i));
        f[i].name = names + i * 16;
        f[i].type = types[i % 4];
        f[i].n_dims = 1;
        f[i].ne[0] = f[i].type == GGML_T_Q8_0 ? 32 : 1 + i % 5;
        f[i].has_f32 = true;
    }
    fill(f, n);
    struct fakes fs = { f, n };
    struct gguf_st_layout l;
    assert_int_equal(gguf_safetensors(NULL, n, get, &fs, &l, NULL), GGUF_OK);
    assert_int_equal(l.n_span, n);
    check_spans(&l);
    for (uint64_t i = 1; i < n; i++) {
        const struct gguf_st_span *a = &l.span[i - 1], *b = &l.span[i];
        if (a->esize == b->esize)
            assert_true(strcmp(a->name, b->name) < 0);
    }
    for (uint64_t i = 0; i < n; i += 9973)
        assert_int_equal(gguf_st_find(&l, l.span[i].start), i);
    char *j = json_of(&l);
    assert_int_equal(j[strlen(j) - 1] == ' ' || j[strlen(j) - 1] == '}', 1);
    free(j);
    gguf_st_free(&l);
    free(names);
    free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_left_out),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_many),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

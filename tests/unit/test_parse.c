/*
 * tests/unit/test_parse.c — the GGUF parser on handcrafted files: every
 * validation error path, truncation at every byte, hostile counts, and the
 * objections noted for files ggml refuses but that are unambiguous.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf/info.h"
#include "gguf/source.h"
#include "gguf/types.h"

/* ---- a tiny GGUF builder ------------------------------------------------ */

#include "gb.h"

static void gb_zeros(struct gb *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        gb_u8(b, 0);
}

static enum gguf_err parse(const struct gb *b, struct gguf_file **f, struct gguf_diag *d)
{
    return gguf_parse(b->p, b->len, b->len, f, d, NULL);
}

/* Parses and expects failure e, with the message containing want. */
static void expect_fail(const struct gb *b, enum gguf_err e, const char *want,
                        uint64_t offset)
{
    struct gguf_file *f = (void *)1;
    struct gguf_diag d;
    enum gguf_err got = parse(b, &f, &d);
    if (got != e || !strstr(d.msg, want) || (offset != UINT64_MAX && d.offset != offset))
        fail_msg("expected error %d containing \"%s\" at %llu, got %d \"%s\" at %llu",
                 e, want, (unsigned long long)offset, got, d.msg,
                 (unsigned long long)d.offset);
    assert_null(f);
}

/* A valid file with a few keys of several kinds and two tensors. */
static void build_valid(struct gb *b, uint32_t version, bool be)
{
    memset(b, 0, sizeof *b);
    b->be = be;
    gb_header(b, version, 2, 4);
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "llama.context_length", 4096);
    gb_str(b, "tokenizer.ggml.tokens");
    gb_u32(b, GGUF_ARRAY);
    gb_u32(b, GGUF_STRING);
    gb_count(b, 3);
    gb_str(b, "<s>");
    gb_str(b, "");
    gb_str(b, "a\nb");
    gb_str(b, "nested");
    gb_u32(b, GGUF_ARRAY);
    gb_u32(b, GGUF_ARRAY);
    gb_count(b, 2);
    gb_u32(b, GGUF_I32);
    gb_count(b, 2);
    gb_u32(b, 1);
    gb_u32(b, 2);
    gb_u32(b, GGUF_I32);
    gb_count(b, 0);
    uint64_t ne1[2] = { 32, 2 }, ne2[1] = { 8 };
    gb_tensor(b, "blk.0.weight", 2, ne1, GGML_T_Q4_0, 0);
    gb_tensor(b, "output_norm", 1, ne2, GGML_T_F32, 64);
    gb_pad(b, 32);
    gb_zeros(b, 64 + 32);
}

static void test_valid_v3(void **state)
{
    (void)state;
    struct gb b;
    build_valid(&b, 3, false);
    struct gguf_file *f;
    struct gguf_diag d;
    assert_int_equal(parse(&b, &f, &d), GGUF_OK);
    assert_int_equal(f->version, 3);
    assert_false(f->enc.big_endian);
    assert_int_equal(f->n_kv, 4);
    assert_int_equal(f->n_tensors, 2);
    assert_int_equal(f->kv[2].type, GGUF_ARRAY);
    assert_int_equal(f->kv[2].elem_type, GGUF_STRING);
    assert_int_equal(f->kv[2].count, 3);
    assert_int_equal(f->kv[3].elem_type, GGUF_ARRAY);
    assert_int_equal(f->tensors[0].nbytes, 2 * 18);
    assert_int_equal(f->tensors[0].n_elems, 64);
    assert_int_equal(f->tensors[1].nbytes, 32);
    assert_int_equal(f->data_off % 32, 0);
    assert_int_equal(f->data_off, (f->hdr_size + 31) / 32 * 32);
    /* the padding came with the buffer: kept after the header */
    assert_int_equal(f->pad_have, f->data_off - f->hdr_size);
    for (uint64_t i = 0; i < f->pad_have; i++)
        assert_int_equal(f->hdr[f->hdr_size + i], b.p[f->hdr_size + i]);
    assert_int_equal(gguf_find_key(f, "llama.context_length", 20), 1);
    assert_int_equal(gguf_rd32(&f->enc, f->hdr + f->kv[1].val_off), 4096);
    assert_null(f->notes);
    /* a buffer that ends inside the padding: only what is there is kept */
    uint64_t hs = f->hdr_size, pad = f->data_off - f->hdr_size;
    gguf_close(f);
    assert_int_equal(gguf_parse(b.p, hs + 1, b.len, &f, &d, NULL), GGUF_OK);
    assert_int_equal(f->pad_have, pad < 1 ? pad : 1);
    gguf_close(f);
    free(b.p);
}

static void test_valid_v1_and_be(void **state)
{
    (void)state;
    for (int v = 1; v <= 3; v++)
        for (int be = 0; be <= 1; be++) {
            struct gb b;
            build_valid(&b, (uint32_t)v, be);
            struct gguf_file *f;
            struct gguf_diag d;
            if (parse(&b, &f, &d) != GGUF_OK)
                fail_msg("v%d be=%d: %s at %llu", v, be, d.msg,
                         (unsigned long long)d.offset);
            assert_int_equal(f->version, v);
            assert_int_equal(f->enc.big_endian, be);
            assert_int_equal(f->enc.v1, v == 1);
            assert_int_equal(f->n_kv, 4);
            assert_int_equal(gguf_rd32(&f->enc, f->hdr + f->kv[1].val_off), 4096);
            assert_int_equal(f->tensors[1].ne[0], 8);
            assert_int_equal(f->tensors[0].ne[1], 2);
            if (v == 1)
                assert_non_null(strstr(f->notes, "version 1"));
            if (be)
                assert_non_null(strstr(f->notes, "big-endian"));
            gguf_close(f);
            free(b.p);
        }
}

/* Every prefix of a valid file is refused (never a crash, never success),
 * and the error offset lies within the prefix. */
static void test_truncation_everywhere(void **state)
{
    (void)state;
    for (int v = 1; v <= 3; v++) {
        struct gb b;
        build_valid(&b, (uint32_t)v, v == 2);
        for (size_t len = 0; len < b.len; len++) {
            struct gguf_file *f = (void *)1;
            struct gguf_diag d;
            enum gguf_err e = gguf_parse(b.p, len, len, &f, &d, NULL);
            if (e == GGUF_OK)
                fail_msg("v%d: prefix of %zu/%zu bytes accepted", v, len, b.len);
            assert_null(f);
            assert_true(d.msg[0] != '\0');
            assert_true(d.offset <= len);
        }
        free(b.p);
    }
}

/* The incremental path: a short buffer of a longer file asks for more. */
static void test_need_more(void **state)
{
    (void)state;
    struct gb b;
    build_valid(&b, 3, false);
    for (size_t len = 0; len < 200; len++) {
        struct gguf_file *f;
        struct gguf_diag d;
        bool more;
        enum gguf_err e = gguf_parse(b.p, len, b.len, &f, &d, &more);
        assert_int_not_equal(e, GGUF_OK);
        assert_true(more);
        assert_true(d.offset > len && d.offset <= b.len);
    }
    free(b.p);
}

/* gguf_open_fd on a file whose header is larger than the first read. */
static void test_open_big_header(void **state)
{
    (void)state;
    struct gb b = { 0 };
    gb_header(&b, 3, 0, 2);
    char *big = malloc(3u << 20);
    memset(big, 'x', 3u << 20);
    big[(3u << 20) - 1] = '\0';
    gb_kv_str(&b, "big", big);
    gb_kv_u32(&b, "after", 7);
    free(big);
    char path[] = "/tmp/gguffs-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.p, b.len), (ssize_t)b.len);
    struct gguf_file *f;
    struct gguf_diag d;
    assert_int_equal(gguf_open_fd(fd, &f, &d), GGUF_OK);
    assert_int_equal(f->n_kv, 2);
    assert_int_equal(gguf_rd32(&f->enc, f->hdr + f->kv[1].val_off), 7);
    gguf_close(f);
    /* and a missing path */
    assert_int_equal(gguf_open("/nonexistent/x.gguf", &f, &d), GGUF_E_IO);
    assert_null(f);
    close(fd);
    unlink(path);
    free(b.p);
}

/* A source over a local file that counts how far the parser's reads went
 * (the reads that wait for the disk; refill takes bytes past them from the
 * page cache itself, through the descriptor). */
struct counting_src {
    struct gguf_source base;
    uint64_t end;          /* the highest off + len returned */
};

static ssize_t counting_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    struct counting_src *c = (struct counting_src *)s;
    ssize_t r = pread(s->fd, buf, len, (off_t)off);
    if (r > 0 && off + (uint64_t)r > c->end)
        c->end = off + (uint64_t)r;
    return r < 0 ? -1 : r;
}

static void counting_close(struct gguf_source *s)
{
    (void)s;
}

/* A 1.25 MiB header before 8 MiB of tensor data: a local file's parse
 * waits for at most 256 KiB past the header (the data after it may be cold
 * on the disk; before: the buffer's whole 2 MiB) and gives the same index
 * as gguf_open_fd. */
static void test_open_reads_little_past_header(void **state)
{
    (void)state;
    struct gb b = { 0 };
    gb_header(&b, 3, 1, 1);
    size_t n = (5u << 18);            /* 1.25 MiB */
    char *big = malloc(n + 1);
    memset(big, 'y', n);
    big[n] = '\0';
    gb_kv_str(&b, "big", big);
    free(big);
    uint64_t ne[1] = { 2u << 20 };    /* 8 MiB of f32 */
    gb_tensor(&b, "t", 1, ne, GGML_T_F32, 0);
    gb_pad(&b, 32);
    size_t hdr = b.len;
    char path[] = "/tmp/gguffs-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, b.p, b.len), (ssize_t)b.len);
    assert_int_equal(ftruncate(fd, (off_t)(hdr + (8u << 20))), 0);
    static const struct gguf_source_ops ops = { .read = counting_read, .close = counting_close };
    struct counting_src c = { .base = { .ops = &ops, .size = hdr + (8u << 20), .name = path,
                                        .fd = fd } };
    struct gguf_file *f, *g;
    struct gguf_diag d;
    assert_int_equal(gguf_open_source(&c.base, &f, &d), GGUF_OK);
    if (c.end > hdr + (256u << 10))
        fail_msg("the parse waited for %llu bytes of a %zu-byte header",
                 (unsigned long long)c.end, hdr);
    assert_int_equal(gguf_open_fd(fd, &g, &d), GGUF_OK);
    assert_int_equal(f->hdr_size, g->hdr_size);
    assert_int_equal(f->data_off, g->data_off);
    assert_int_equal(f->data_off, hdr);
    assert_memory_equal(f->hdr, g->hdr, f->hdr_size);
    gguf_close(f);
    gguf_close(g);
    close(fd);
    unlink(path);
    free(b.p);
}

static void test_magic_and_version(void **state)
{
    (void)state;
    struct gb b = { 0 };
    gb_put(&b, "FUGG", 4);
    gb_u32(&b, 1);
    gb_zeros(&b, 16);
    expect_fail(&b, GGUF_E_MAGIC, "not a GGUF file", 0);
    b.len = 0;
    gb_header(&b, 4, 0, 0);
    expect_fail(&b, GGUF_E_VERSION, "unsupported GGUF version 4", 4);
    b.len = 0;
    gb_header(&b, 0, 0, 0);
    expect_fail(&b, GGUF_E_VERSION, "version 0", 4);
    b.len = 0;
    gb_put(&b, "GG", 2);
    expect_fail(&b, GGUF_E_TRUNCATED, "magic", 0);
    free(b.p);
}

static void test_hostile_counts(void **state)
{
    (void)state;
    struct gb b = { 0 };
    gb_header(&b, 3, UINT64_MAX, 0);
    expect_fail(&b, GGUF_E_RANGE, "tensor count", 8);
    b.len = 0;
    gb_header(&b, 3, 0, 1ull << 40);
    expect_fail(&b, GGUF_E_RANGE, "key/value count", 16);
    /* a string length far past the end */
    b.len = 0;
    gb_header(&b, 3, 0, 1);
    gb_count(&b, UINT64_MAX - 3);
    gb_zeros(&b, 8);
    expect_fail(&b, GGUF_E_RANGE, "length", 24);
    /* array count that cannot fit */
    b.len = 0;
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "a");
    gb_u32(&b, GGUF_ARRAY);
    gb_u32(&b, GGUF_U64);
    gb_count(&b, 1ull << 61);
    gb_zeros(&b, 64);
    expect_fail(&b, GGUF_E_RANGE, "array count", UINT64_MAX);
    /* array of strings whose count fits but whose strings do not */
    b.len = 0;
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "a");
    gb_u32(&b, GGUF_ARRAY);
    gb_u32(&b, GGUF_STRING);
    gb_count(&b, 4);
    gb_str(&b, "x");
    gb_count(&b, 1000);
    gb_zeros(&b, 20);
    expect_fail(&b, GGUF_E_RANGE, "string length 1000", UINT64_MAX);
    free(b.p);
}

static void test_bad_types(void **state)
{
    (void)state;
    struct gb b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "dict1");
    gb_u32(&b, 13);
    gb_zeros(&b, 8);
    expect_fail(&b, GGUF_E_TYPE, "key 'dict1': unknown value type 13", 37);
    b.len = 0;
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "arr");
    gb_u32(&b, GGUF_ARRAY);
    gb_u32(&b, 99);
    gb_count(&b, 0);
    expect_fail(&b, GGUF_E_TYPE, "unknown array element type 99", UINT64_MAX);
    /* arrays nested deeper than the limit */
    b.len = 0;
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "deep");
    gb_u32(&b, GGUF_ARRAY);
    for (int i = 0; i < GGUF_MAX_NEST + 2; i++) {
        gb_u32(&b, GGUF_ARRAY);
        gb_count(&b, 1);
    }
    gb_zeros(&b, 64);
    expect_fail(&b, GGUF_E_RANGE, "nested deeper", UINT64_MAX);
    free(b.p);
}

static void test_duplicate_keys(void **state)
{
    (void)state;
    struct gb b = { 0 };
    gb_header(&b, 3, 0, 4);
    gb_kv_u32(&b, "general.file_type", 1);
    gb_kv_u32(&b, "x", 2);
    gb_kv_u32(&b, "general.file_type", 3);
    gb_kv_u32(&b, "general.file_type", 4);
    struct gguf_file *f;
    struct gguf_diag d;
    assert_int_equal(parse(&b, &f, &d), GGUF_OK);
    assert_int_equal(f->kv[0].dup, 1);
    assert_int_equal(f->kv[1].dup, 1);
    assert_int_equal(f->kv[2].dup, 2);
    assert_int_equal(f->kv[3].dup, 3);
    assert_non_null(strstr(f->notes, "general.file_type#2"));
    assert_int_equal(gguf_find_key(f, "general.file_type", 17), 0);
    gguf_close(f);
    free(b.p);
}

static void test_alignment(void **state)
{
    (void)state;
    struct gb b = { 0 };
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 4096);
    uint64_t ne[1] = { 4 };
    gb_tensor(&b, "t", 1, ne, GGML_T_F32, 0);
    gb_pad(&b, 4096);
    gb_zeros(&b, 16);
    struct gguf_file *f;
    struct gguf_diag d;
    assert_int_equal(parse(&b, &f, &d), GGUF_OK);
    assert_int_equal(f->alignment, 4096);
    assert_int_equal(f->data_off, 4096);
    gguf_close(f);

    b.len = 0;
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.alignment", 48);
    expect_fail(&b, GGUF_E_RANGE, "not a power of two", UINT64_MAX);
    b.len = 0;
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.alignment", 0);
    expect_fail(&b, GGUF_E_RANGE, "not a power of two", UINT64_MAX);
    b.len = 0;
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.alignment", "32");
    expect_fail(&b, GGUF_E_TYPE, "general.alignment has type string", 24);
    b.len = 0;
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "general.alignment", 32);
    gb_kv_u32(&b, "general.alignment", 64);
    expect_fail(&b, GGUF_E_RANGE, "twice with different values", UINT64_MAX);
    free(b.p);
}

/* One tensor with the given dims/type at offset 0 and data_bytes of data. */
static void build_tensor(struct gb *b, uint32_t n_dims, const uint64_t *ne,
                         uint32_t type, uint64_t offset, size_t data_bytes)
{
    b->len = 0;
    gb_header(b, 3, 1, 0);
    gb_tensor(b, "w", n_dims, ne, type, offset);
    gb_pad(b, 32);
    gb_zeros(b, data_bytes);
}

static void test_tensor_errors(void **state)
{
    (void)state;
    struct gb b = { 0 };
    uint64_t ne[5] = { 32, 1, 1, 1, 1 };
    build_tensor(&b, 5, ne, GGML_T_F32, 0, 128);
    expect_fail(&b, GGUF_E_RANGE, "5 dimensions", UINT64_MAX);
    uint64_t neg[1] = { (uint64_t)-5 };
    build_tensor(&b, 1, neg, GGML_T_F32, 0, 128);
    expect_fail(&b, GGUF_E_RANGE, "negative", UINT64_MAX);
    uint64_t big[3] = { 1ull << 31, 1ull << 31, 1ull << 31 };
    build_tensor(&b, 3, big, GGML_T_F32, 0, 128);
    expect_fail(&b, GGUF_E_RANGE, "element count overflows", UINT64_MAX);
    uint64_t odd[1] = { 33 };
    build_tensor(&b, 1, odd, GGML_T_Q4_0, 0, 128);
    expect_fail(&b, GGUF_E_RANGE, "not a whole number of q4_0 blocks", UINT64_MAX);
    build_tensor(&b, 1, ne, GGML_T_F32, 0, 127);
    expect_fail(&b, GGUF_E_RANGE, "outside the file", UINT64_MAX);
    build_tensor(&b, 1, ne, GGML_T_F32, UINT64_MAX - 8, 128);
    expect_fail(&b, GGUF_E_RANGE, "outside the file", UINT64_MAX);
    uint64_t huge[1] = { 1ull << 60 };
    build_tensor(&b, 1, huge, GGML_T_F32, 0, 128);
    expect_fail(&b, GGUF_E_RANGE, "outside the file", UINT64_MAX);

    /* duplicate tensor names */
    b.len = 0;
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "w", 1, ne, GGML_T_F32, 0);
    gb_tensor(&b, "w", 1, ne, GGML_T_F32, 128);
    gb_pad(&b, 32);
    gb_zeros(&b, 256);
    expect_fail(&b, GGUF_E_DUP, "tensor name 'w' occurs twice", UINT64_MAX);

    /* overlapping tensors */
    b.len = 0;
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, ne, GGML_T_F32, 0);
    gb_tensor(&b, "b", 1, ne, GGML_T_F32, 64);
    gb_pad(&b, 32);
    gb_zeros(&b, 256);
    expect_fail(&b, GGUF_E_RANGE, "overlaps", UINT64_MAX);

    /* a tensor name longer than the limit */
    b.len = 0;
    gb_header(&b, 3, 1, 0);
    gb_count(&b, GGUF_MAX_NAME + 1);
    gb_zeros(&b, GGUF_MAX_NAME + 64);
    expect_fail(&b, GGUF_E_RANGE, "name is 65536 bytes", UINT64_MAX);
    free(b.p);
}

/* Unambiguous files ggml refuses: accepted, with the objection noted. */
static void test_noted_objections(void **state)
{
    (void)state;
    struct gb b = { 0 };
    struct gguf_file *f;
    struct gguf_diag d;
    /* row not a multiple of the block size, element count is */
    uint64_t ne[2] = { 16, 2 };
    build_tensor(&b, 2, ne, GGML_T_Q4_0, 0, 18);
    assert_int_equal(parse(&b, &f, &d), GGUF_OK);
    assert_non_null(strstr(f->notes, "row length 16"));
    gguf_close(f);
    /* out of order, with a gap, misaligned */
    uint64_t ne1[1] = { 4 };
    b.len = 0;
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, ne1, GGML_T_F32, 100);
    gb_tensor(&b, "b", 1, ne1, GGML_T_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 128);
    assert_int_equal(parse(&b, &f, &d), GGUF_OK);
    assert_non_null(strstr(f->notes, "not stored contiguously"));
    assert_non_null(strstr(f->notes, "not a multiple of the alignment"));
    gguf_close(f);
    /* a long tensor name */
    char name[100];
    memset(name, 'n', 99);
    name[99] = '\0';
    b.len = 0;
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, name, 1, ne1, GGML_T_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 16);
    assert_int_equal(parse(&b, &f, &d), GGUF_OK);
    assert_non_null(strstr(f->notes, "longer than 63"));
    gguf_close(f);
    /* zero-sized tensors overlap nothing */
    uint64_t z[2] = { 0, 7 };
    b.len = 0;
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "z1", 2, z, GGML_T_Q4_K, 0);
    gb_tensor(&b, "z2", 2, z, GGML_T_F32, 0);
    assert_int_equal(parse(&b, &f, &d), GGUF_OK);
    assert_int_equal(f->tensors[0].nbytes, 0);
    gguf_close(f);
    free(b.p);
}

/* ---- tensors of types gguffs does not know ------------------------------- */

/* Parses b, which must be accepted; fails with the message otherwise. */
static struct gguf_file *accept(const struct gb *b)
{
    struct gguf_file *f = NULL;
    struct gguf_diag d;
    enum gguf_err e = parse(b, &f, &d);
    if (e != GGUF_OK)
        fail_msg("refused (%d): %s at %llu", e, d.msg, (unsigned long long)d.offset);
    return f;
}

static void expect_note(const struct gguf_file *f, const char *want)
{
    if (!f->notes || !strstr(f->notes, want))
        fail_msg("notes lack \"%s\": %s", want, f->notes ? f->notes : "(none)");
}

static void expect_no_note(const struct gguf_file *f, const char *unwanted)
{
    if (f->notes && strstr(f->notes, unwanted))
        fail_msg("notes have \"%s\": %s", unwanted, f->notes);
}

/* n q4_0 tensors "r0", "r1", ... whose rows (16) are not a multiple of the
 * block (32) while their element counts are: each is named in the notes
 * up to 8 of them, then one note gives how many there are in all. */
static void test_row_notes(void **state)
{
    (void)state;
    static const unsigned counts[] = { 1, 5, 8, 9, 12 };
    for (unsigned c = 0; c < sizeof counts / sizeof *counts; c++) {
        unsigned n = counts[c];
        struct gb b = { 0 };
        struct gguf_file *f;
        struct gguf_diag d;
        uint64_t ne[2] = { 16, 2 };
        gb_header(&b, 3, n, 0);
        for (unsigned i = 0; i < n; i++) {
            char name[16];
            snprintf(name, sizeof name, "r%u", i);
            gb_tensor(&b, name, 2, ne, GGML_T_Q4_0, 32ull * i);
        }
        gb_pad(&b, 32);
        gb_zeros(&b, 32ull * n);
        assert_int_equal(parse(&b, &f, &d), GGUF_OK);
        for (unsigned i = 0; i < n; i++) {
            char want[64];
            snprintf(want, sizeof want, "'r%u': row length 16 is not a multiple", i);
            if (i < 8)
                expect_note(f, want);
            else
                expect_no_note(f, want);
        }
        if (n > 8)
            expect_note(f, n == 9 ? "9 tensors in all have a row length" :
                                    "12 tensors in all have a row length");
        else
            expect_no_note(f, "tensors in all");
        gguf_close(f);
        free(b.p);
    }
}

/* The info text of f contains want. */
static void expect_info(const struct gguf_file *f, const char *want)
{
    struct gguf_buf out = { 0 };
    assert_int_equal(gguf_info_render(f, "m.gguf", &out), GGUF_OK);
    assert_non_null(out.data);
    if (!strstr(out.data, want))
        fail_msg("info lacks \"%s\":\n%s", want, out.data);
    gguf_buf_free(&out);
}

/* f32 "a" (8 elements, 32 bytes at 0), "u" of type id uid (100 elements,
 * at 32, 40 bytes of data then padding to 96), f32 "b" (8 elements at 96),
 * 128 bytes of data in all, in the given version and byte order. */
static void build_middle(struct gb *b, uint32_t version, bool be, uint32_t uid)
{
    memset(b, 0, sizeof *b);
    b->be = be;
    gb_header(b, version, 3, 1);
    gb_kv_str(b, "general.architecture", "llama");
    uint64_t n8[1] = { 8 }, n100[2] = { 25, 4 };
    gb_tensor(b, "a", 1, n8, GGML_T_F32, 0);
    gb_tensor(b, "u", 2, n100, uid, 32);
    gb_tensor(b, "b", 1, n8, GGML_T_F32, 96);
    gb_pad(b, 32);
    for (int i = 0; i < 128; i++)
        gb_u8(b, (uint8_t)(i * 7 + 1));
}

/* An unknown type in the middle of the data: its size runs to the next
 * tensor's offset (its padding included), for every version and byte
 * order; the type reads type_NN; info lists it; the note says so. */
static void test_unknown_middle(void **state)
{
    (void)state;
    static const uint32_t ids[] = { 43, 57, 1000, UINT32_MAX };
    for (int v = 1; v <= 3; v++)
        for (int be = 0; be <= 1; be++)
            for (size_t k = 0; k < sizeof ids / sizeof ids[0]; k++) {
                struct gb b;
                build_middle(&b, (uint32_t)v, be, ids[k]);
                struct gguf_file *f = accept(&b);
                assert_int_equal(f->n_tensors, 3);
                const struct gguf_tensor *u = &f->tensors[1];
                assert_int_equal(u->type, ids[k]);
                assert_null(ggml_type_get(u->type));
                assert_int_equal(u->n_dims, 2);
                assert_int_equal(u->ne[0], 25);
                assert_int_equal(u->ne[1], 4);
                assert_int_equal(u->n_elems, 100);
                assert_int_equal(u->offset, 32);
                assert_int_equal(u->nbytes, 64);
                assert_int_equal(f->tensors[0].nbytes, 32);
                assert_int_equal(f->tensors[2].nbytes, 32);
                char want[160], name[24];
                snprintf(want, sizeof want, "tensor 'u': type id %u unknown to "
                         "gguffs (raw bytes only, size 64 taken from the next "
                         "tensor's offset)", ids[k]);
                expect_note(f, want);
                /* it sits where ggml would put it: no other objection */
                expect_no_note(f, "contiguously");
                expect_no_note(f, "alignment");
                snprintf(name, sizeof name, "type_%u", ids[k]);
                assert_string_equal(ggml_type_name_of(u->type), name);
                expect_info(f, name);
                expect_info(f, want);
                gguf_close(f);
                free(b.p);
            }
}

/* Last in the file: the size runs to the end of the file (any padding
 * after its data included). */
static void test_unknown_last(void **state)
{
    (void)state;
    for (int v = 1; v <= 3; v++)
        for (int be = 0; be <= 1; be++) {
            struct gb b = { .be = be };
            uint64_t n8[1] = { 8 }, n3[1] = { 3 };
            gb_header(&b, (uint32_t)v, 2, 0);
            gb_tensor(&b, "a", 1, n8, GGML_T_F32, 0);
            gb_tensor(&b, "u", 1, n3, 77, 32);
            gb_pad(&b, 32);
            gb_zeros(&b, 32 + 45);           /* 45 bytes after u's offset */
            struct gguf_file *f = accept(&b);
            assert_int_equal(f->tensors[1].nbytes, 45);
            assert_int_equal(f->tensors[1].n_elems, 3);
            assert_int_equal(f->data_off + 32 + 45, f->file_size);
            expect_note(f, "tensor 'u': type id 77 unknown to gguffs (raw bytes "
                        "only, size 45 taken from the end of the file)");
            gguf_close(f);
            free(b.p);
        }
    /* the only tensor, at offset 0 (build_tensor: header padded, then data) */
    struct gb b = { 0 };
    uint64_t ne[1] = { 32 };
    build_tensor(&b, 1, ne, 43, 0, 128);
    struct gguf_file *f = accept(&b);
    assert_int_equal(f->tensors[0].nbytes, 128);
    expect_note(f, "type id 43 unknown to gguffs");
    gguf_close(f);
    free(b.p);
}

/* Ids ggml removed: the same treatment, said so. */
static void test_removed_ids(void **state)
{
    (void)state;
    static const uint32_t removed[] = { 4, 5, 31, 32, 33, 36, 37, 38 };
    for (size_t k = 0; k < sizeof removed / sizeof removed[0]; k++) {
        struct gb b;
        build_middle(&b, 3, false, removed[k]);
        struct gguf_file *f = accept(&b);
        assert_int_equal(f->tensors[1].nbytes, 64);
        char want[128], name[16];
        snprintf(want, sizeof want, "tensor 'u': type id %u removed from ggml (raw "
                 "bytes only, size 64 taken from the next tensor's offset)", removed[k]);
        expect_note(f, want);
        snprintf(name, sizeof name, "type_%u", removed[k]);
        assert_string_equal(ggml_type_name_of(removed[k]), name);
        expect_info(f, name);
        gguf_close(f);
        free(b.p);
    }
}

/* Several unknown tensors, in header order different from data order, one
 * of them misaligned (noted, as for any type), one with no elements. */
static void test_several_unknown(void **state)
{
    (void)state;
    struct gb b = { 0 };
    uint64_t n1[1] = { 1 }, n0[2] = { 5, 0 }, n8[1] = { 8 };
    gb_header(&b, 3, 5, 0);
    gb_tensor(&b, "w", 1, n1, 50, 64);      /* [64, 100): next is x at 100 */
    gb_tensor(&b, "v", 1, n1, 51, 0);       /* [0, 32): next is f at 32 */
    gb_tensor(&b, "f", 1, n8, GGML_T_F32, 32);
    gb_tensor(&b, "x", 1, n1, 52, 100);     /* misaligned; to the end: 28 bytes */
    gb_tensor(&b, "z", 2, n0, 53, 0);       /* no elements: no bytes */
    gb_pad(&b, 32);
    gb_zeros(&b, 128);
    struct gguf_file *f = accept(&b);
    assert_int_equal(f->tensors[0].nbytes, 36);
    assert_int_equal(f->tensors[1].nbytes, 32);
    assert_int_equal(f->tensors[2].nbytes, 32);
    assert_int_equal(f->tensors[3].nbytes, 28);
    assert_int_equal(f->tensors[4].nbytes, 0);
    assert_int_equal(f->tensors[4].n_elems, 0);
    expect_note(f, "tensor 'w': type id 50 unknown to gguffs (raw bytes only, "
                "size 36 taken from the next tensor's offset)");
    expect_note(f, "tensor 'v': type id 51 unknown to gguffs (raw bytes only, "
                "size 32 taken from the next tensor's offset)");
    expect_note(f, "tensor 'x': type id 52 unknown to gguffs (raw bytes only, "
                "size 28 taken from the end of the file)");
    expect_no_note(f, "'z'");
    expect_note(f, "tensor 'x': offset 100 is not a multiple of the alignment 32");
    expect_note(f, "not stored contiguously");
    gguf_close(f);
    free(b.p);
}

/* Shared offsets: two unknown tensors with elements at one offset are
 * ambiguous; an unknown one at the offset of a known one with bytes
 * overlaps it; one with no bytes beside it is fine (ggml puts a tensor
 * without elements where the next one starts). */
static void test_unknown_same_offset(void **state)
{
    (void)state;
    struct gb b = { 0 };
    uint64_t n4[1] = { 4 }, n0[1] = { 0 };
    gb_header(&b, 3, 3, 0);
    gb_tensor(&b, "a", 1, n4, GGML_T_F32, 0);
    gb_tensor(&b, "u1", 1, n4, 60, 32);
    gb_tensor(&b, "u2", 1, n4, 61, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 96);
    expect_fail(&b, GGUF_E_RANGE, "tensors 'u1' and 'u2' (type ids 60 and 61, "
                "unknown to gguffs) both start at offset 32: their sizes are "
                "ambiguous", UINT64_MAX);

    /* unknown at the offset of a known tensor with bytes: they overlap */
    b.len = 0;
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, n4, GGML_T_F32, 0);
    gb_tensor(&b, "u", 1, n4, 60, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 64);
    expect_fail(&b, GGUF_E_RANGE, "tensor 'u' [0, +64) overlaps tensor 'a' [0, +16)",
                UINT64_MAX);

    /* beside tensors without elements, known or not: accepted */
    b.len = 0;
    gb_header(&b, 3, 4, 0);
    gb_tensor(&b, "e1", 1, n0, GGML_T_Q4_K, 32);
    gb_tensor(&b, "e2", 1, n0, 70, 32);
    gb_tensor(&b, "u", 1, n4, 71, 32);
    gb_tensor(&b, "a", 1, n4, GGML_T_F32, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 96);
    struct gguf_file *f = accept(&b);
    assert_int_equal(f->tensors[0].nbytes, 0);
    assert_int_equal(f->tensors[1].nbytes, 0);
    assert_int_equal(f->tensors[2].nbytes, 64);
    assert_int_equal(f->tensors[3].nbytes, 16);
    gguf_close(f);

    /* a tensor without elements later in the data still bounds the range */
    b.len = 0;
    gb_header(&b, 3, 3, 0);
    gb_tensor(&b, "u", 1, n4, 71, 0);
    gb_tensor(&b, "e", 1, n0, GGML_T_F32, 64);
    gb_tensor(&b, "a", 1, n4, GGML_T_F32, 64);
    gb_pad(&b, 32);
    gb_zeros(&b, 96);
    f = accept(&b);
    assert_int_equal(f->tensors[0].nbytes, 64);
    gguf_close(f);
    free(b.p);
}

/* Out of bounds and overlaps are refused as for any type. */
static void test_unknown_refused(void **state)
{
    (void)state;
    struct gb b = { 0 };
    uint64_t n4[1] = { 4 }, n16[1] = { 16 };
    /* a known tensor that runs into the unknown one */
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, n16, GGML_T_F32, 0);   /* [0, 64) */
    gb_tensor(&b, "u", 1, n4, 60, 32);
    gb_pad(&b, 32);
    gb_zeros(&b, 128);
    expect_fail(&b, GGUF_E_RANGE, "tensor 'u' [32, +96) overlaps tensor 'a' [0, +64)",
                UINT64_MAX);

    /* at the end of the data, or past it: no bytes for its elements */
    for (uint64_t off = 128; off <= 160; off += 32) {
        b.len = 0;
        gb_header(&b, 3, 2, 0);
        gb_tensor(&b, "a", 1, n4, GGML_T_F32, 0);
        gb_tensor(&b, "u", 1, n4, 60, off);
        gb_pad(&b, 32);
        gb_zeros(&b, 128);
        expect_fail(&b, GGUF_E_RANGE, "tensor 'u': type id 60 is unknown to "
                    "gguffs and its offset", UINT64_MAX);
    }
    b.len = 0;
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "u", 1, n4, 60, UINT64_MAX - 31);
    gb_pad(&b, 32);
    gb_zeros(&b, 128);
    expect_fail(&b, GGUF_E_RANGE, "leaves no bytes for its 4 elements", UINT64_MAX);

    /* a header without data (none follows the tensor infos) */
    b.len = 0;
    gb_header(&b, 3, 1, 0);
    gb_tensor(&b, "u", 1, n4, 60, 0);
    expect_fail(&b, GGUF_E_RANGE, "leaves no bytes", UINT64_MAX);

    /* the next tensor lies past the end: the unknown one ends with the
     * data, the next one is refused */
    b.len = 0;
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "u", 1, n4, 60, 0);
    gb_tensor(&b, "a", 1, n4, GGML_T_F32, 4096);
    gb_pad(&b, 32);
    gb_zeros(&b, 128);
    expect_fail(&b, GGUF_E_RANGE, "tensor 'a': data [4096, +16) lies outside the file",
                UINT64_MAX);

    /* dims are checked as usual */
    uint64_t big[3] = { 1ull << 31, 1ull << 31, 1ull << 31 }, neg[1] = { (uint64_t)-5 };
    build_tensor(&b, 3, big, 99, 0, 128);
    expect_fail(&b, GGUF_E_RANGE, "element count overflows", UINT64_MAX);
    build_tensor(&b, 1, neg, 99, 0, 128);
    expect_fail(&b, GGUF_E_RANGE, "negative", UINT64_MAX);
    uint64_t five[5] = { 1, 1, 1, 1, 1 };
    build_tensor(&b, 5, five, 99, 0, 128);
    expect_fail(&b, GGUF_E_RANGE, "5 dimensions", UINT64_MAX);
    free(b.p);
}

/* The type table agrees with facts that ggml prints. */
static void test_type_table(void **state)
{
    (void)state;
    assert_string_equal(ggml_type_name_of(GGML_T_Q4_K), "q4_K");
    assert_int_equal(ggml_type_get(GGML_T_Q4_K)->blck_bytes, 144);
    assert_int_equal(ggml_type_get(GGML_T_NVFP4)->blck_elems, 64);
    assert_null(ggml_type_get(4));
    assert_null(ggml_type_get(43));
    assert_string_equal(ggml_type_name_of(36), "type_36");
    assert_string_equal(ggml_type_name_of(1000), "type_1000");
    assert_string_equal(ggml_type_name_of(UINT32_MAX), "type_4294967295");
    /* a few type_NN names can be held at once */
    const char *n[GGML_TYPE_NAME_RING];
    for (unsigned i = 0; i < GGML_TYPE_NAME_RING; i++)
        n[i] = ggml_type_name_of(100 + i);
    for (unsigned i = 0; i < GGML_TYPE_NAME_RING; i++) {
        char want[16];
        snprintf(want, sizeof want, "type_%u", 100 + i);
        assert_string_equal(n[i], want);
    }
    assert_int_equal(ggml_type_by_name("iq4_xs"), GGML_T_IQ4_XS);
    assert_int_equal(ggml_type_by_name("nope"), -1);
    assert_int_equal(ggml_type_by_name("type_57"), 57);
    assert_int_equal(ggml_type_by_name("type_4"), 4);
    assert_int_equal(ggml_type_by_name("type_2147483647"), 2147483647);
    assert_int_equal(ggml_type_by_name("type_2"), -1);      /* that is q4_0 */
    assert_int_equal(ggml_type_by_name("type_057"), -1);
    assert_int_equal(ggml_type_by_name("type_"), -1);
    assert_int_equal(ggml_type_by_name("type_5x"), -1);
    assert_int_equal(ggml_type_by_name("type_-5"), -1);
    assert_int_equal(ggml_type_by_name("type_99999999999999999999"), -1);
    int known = 0;
    for (uint32_t i = 0; i < GGML_T_COUNT; i++)
        known += ggml_type_get(i) != NULL;
    assert_int_equal(known, 43 - 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_v3),
        cmocka_unit_test(test_valid_v1_and_be),
        cmocka_unit_test(test_truncation_everywhere),
        cmocka_unit_test(test_need_more),
        cmocka_unit_test(test_open_big_header),
        cmocka_unit_test(test_open_reads_little_past_header),
        cmocka_unit_test(test_magic_and_version),
        cmocka_unit_test(test_hostile_counts),
        cmocka_unit_test(test_bad_types),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_alignment),
        cmocka_unit_test(test_tensor_errors),
        cmocka_unit_test(test_noted_objections),
        cmocka_unit_test(test_row_notes),
        cmocka_unit_test(test_unknown_middle),
        cmocka_unit_test(test_unknown_last),
        cmocka_unit_test(test_removed_ids),
        cmocka_unit_test(test_several_unknown),
        cmocka_unit_test(test_unknown_same_offset),
        cmocka_unit_test(test_unknown_refused),
        cmocka_unit_test(test_type_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

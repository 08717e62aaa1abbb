/*
 * tests/unit/test_kvedit.c — one metadata change into a new header
 * (gguf/kvedit.h): set, create, delete, rename, retype, each rule with its
 * code, on little- and big-endian files of versions 1 and 3; the padding
 * key (gguffs.padding: only deleted); type inference, the UTF-8 prefix
 * check and file-name decoding.
 *
 * Every header a change gives is parsed back (with the model's tensor data
 * size after it) and its key list compared with what the change must give.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/kvedit.h"
#include "gguf/pad.h"

#include "gb.h"

/* ---- the model --------------------------------------------------------------------- */

/*
 * Keys, in order:
 *   0 general.alignment u32 64    3 a.arr   array[i32] {1, 2}
 *   1 general.name      "m"       4 Odd.Name u32 1 (not a valid new name)
 *   2 a.u8              u8 7      5 x u32 1,  6 x u32 2 (shown as x#2)
 * and one f32 tensor of 4 elements.
 */
enum { K_ALIGN, K_NAME, K_U8, K_ARR, K_ODD, K_X, K_X2, N_KEYS };

static struct gguf_file *model(uint32_t version, bool be, struct gb *b)
{
    memset(b, 0, sizeof *b);
    b->be = be;
    gb_header(b, version, 1, N_KEYS);
    gb_kv_u32(b, "general.alignment", 64);
    gb_kv_str(b, "general.name", "m");
    gb_str(b, "a.u8");
    gb_u32(b, GGUF_U8);
    gb_u8(b, 7);
    gb_str(b, "a.arr");
    gb_u32(b, GGUF_ARRAY);
    gb_u32(b, GGUF_I32);
    gb_count(b, 2);
    gb_u32(b, 1);
    gb_u32(b, 2);
    gb_kv_u32(b, "Odd.Name", 1);
    gb_kv_u32(b, "x", 1);
    gb_kv_u32(b, "x", 2);
    uint64_t ne[1] = { 4 };
    gb_tensor(b, "w", 1, ne, 0 /* f32 */, 0);
    gb_pad(b, 64);
    for (int i = 0; i < 16; i++)
        gb_u8(b, (uint8_t)i);
    struct gguf_file *f;
    struct gguf_diag d;
    if (gguf_parse(b->p, b->len, b->len, &f, &d, NULL) != GGUF_OK)
        fail_msg("the test model does not parse: %s", d.msg);
    assert_int_equal(f->n_kv, N_KEYS);
    assert_int_equal(f->kv[K_X2].dup, 2);
    return f;
}

/* The header hdr built for f, parsed with f's tensor data after it. */
static struct gguf_file *reparse(const struct gguf_file *f, const struct gguf_buf *hdr)
{
    struct gguf_file *nf;
    struct gguf_diag d;
    uint64_t data = f->file_size - f->data_off;
    if (gguf_parse((const uint8_t *)hdr->data, hdr->len, hdr->len + data, &nf, &d,
                   NULL) != GGUF_OK)
        fail_msg("the built header does not parse: %s", d.msg);
    assert_int_equal(nf->n_tensors, f->n_tensors);
    assert_int_equal(nf->data_off, hdr->len);
    return nf;
}

/* "name=type:text|..." for every key of f (text without its last "\n"). */
static char *summary(const struct gguf_file *f)
{
    struct gguf_buf s = { 0 }, t = { 0 };
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        struct gguf_typedesc td;
        t.len = 0;
        assert_int_equal(gguf_render_kv(f, kv, &t), GGUF_OK);
        gguf_kv_typedesc(f, kv, &td);
        gguf_buf_printf(&s, "%s%.*s=", i ? "|" : "", (int)kv->key_len,
                        (const char *)f->hdr + kv->key_off);
        gguf_typedesc_format(&td, &s);
        gguf_buf_printf(&s, ":%.*s", (int)(t.len && t.data[t.len - 1] == '\n' ?
                        t.len - 1 : t.len), t.data ? t.data : "");
    }
    gguf_buf_putc(&s, '\0');
    gguf_buf_free(&t);
    return s.data;
}

/* The model's keys as summary() shows them. */
static const char *const base_keys[N_KEYS] = {
    "general.alignment=u32:64", "general.name=string:m", "a.u8=u8:7",
    "a.arr=array[i32]:1\n2", "Odd.Name=u32:1", "x=u32:1", "x=u32:2",
};

/* The summary of the model's keys with key i shown as with (NULL: i is
 * gone) and key j gone (j < 0: none).  Static storage. */
static const char *edited(int i, const char *with, int j)
{
    static char buf[1024];
    size_t k = 0;
    for (int n = 0; n < N_KEYS; n++) {
        const char *e = n == i ? with : n == j ? NULL : base_keys[n];
        if (e)
            k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s", k ? "|" : "", e);
    }
    return buf;
}

/* The summary of the model's keys as they are. */
static const char *unedited(void)
{
    return edited(-1, NULL, -1);
}

/* The change gave GGUF_OK: the new header's keys are want. */
static void gives(const struct gguf_file *f, enum gguf_err e, struct gguf_buf *hdr,
                  const struct gguf_diag *d, const char *want)
{
    if (e != GGUF_OK)
        fail_msg("error %d: %s", e, d->msg);
    struct gguf_file *nf = reparse(f, hdr);
    char *got = summary(nf);
    assert_string_equal(got, want);
    free(got);
    gguf_close(nf);
    gguf_buf_free(hdr);
}

/* The change failed with e, the message holds msg, hdr is untouched. */
static void refused(enum gguf_err got, enum gguf_err want, const struct gguf_buf *hdr,
                    const struct gguf_diag *d, const char *msg, uint64_t offset)
{
    if (got != want)
        fail_msg("error %d, expected %d (%s)", got, want, d->msg);
    assert_null(hdr->data);
    if (!strstr(d->msg, msg))
        fail_msg("\"%s\" does not say \"%s\"", d->msg, msg);
    assert_true(d->offset == offset);
}

static const struct { uint32_t version; bool be; } encs[] = {
    { 3, false }, { 3, true }, { 1, false }, { 2, true },
};
#define N_ENCS (sizeof encs / sizeof *encs)

/* ---- set ------------------------------------------------------------------------------ */

static void test_set(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_ENCS; k++) {
        struct gb b;
        struct gguf_file *f = model(encs[k].version, encs[k].be, &b);
        struct gguf_buf h = { 0 };
        struct gguf_diag d;
        char *s0 = summary(f);
        assert_string_equal(s0, unedited());
        free(s0);

        gives(f, gguf_kvedit_set(f, K_NAME, "hello\n", 6, &h, &d), &h, &d,
              edited(K_NAME, "general.name=string:hello", -1));
        gives(f, gguf_kvedit_set(f, K_ARR, "3\n-4\n5\n", 7, &h, &d), &h, &d,
              edited(K_ARR, "a.arr=array[i32]:3\n-4\n5", -1));
        /* the second occurrence of a duplicated key, by its index */
        gives(f, gguf_kvedit_set(f, K_X2, "9", 1, &h, &d), &h, &d,
              edited(K_X2, "x=u32:9", -1));
        /* reading a value and writing it back changes nothing */
        gives(f, gguf_kvedit_set(f, K_U8, "7\n", 2, &h, &d), &h, &d, unedited());

        refused(gguf_kvedit_set(f, K_U8, "300\n", 4, &h, &d), GGUF_E_RANGE, &h, &d,
                "out of range", 0);
        refused(gguf_kvedit_set(f, K_U8, "1 1", 3, &h, &d), GGUF_E_SYNTAX, &h, &d,
                "is not a u8", 0);
        refused(gguf_kvedit_set(f, K_ARR, "1\nx\n", 4, &h, &d), GGUF_E_SYNTAX, &h, &d,
                "line 2", 2);
        refused(gguf_kvedit_set(f, K_NAME, "a\xff", 2, &h, &d), GGUF_E_SYNTAX, &h, &d,
                "invalid UTF-8", 1);
        refused(gguf_kvedit_set(f, K_ALIGN, "64", 2, &h, &d), GGUF_E_PERM, &h, &d,
                "general.alignment cannot be changed", UINT64_MAX);
        refused(gguf_kvedit_set(f, N_KEYS, "1", 1, &h, &d), GGUF_E_NOENT, &h, &d,
                "gone", UINT64_MAX);
        refused(gguf_kvedit_set(f, UINT64_MAX, "1", 1, &h, &d), GGUF_E_NOENT, &h, &d,
                "gone", UINT64_MAX);
        gguf_close(f);
        free(b.p);
    }
}

/* ---- create ----------------------------------------------------------------------------- */

static void creates(const struct gguf_file *f, const char *key,
                    const struct gguf_typedesc *t, const char *text, const char *want)
{
    struct gguf_buf h = { 0 };
    struct gguf_diag d;
    char exp[512];
    snprintf(exp, sizeof exp, "%s|%s", unedited(), want);
    gives(f, gguf_kvedit_create(f, key, strlen(key), t, text, strlen(text), &h, &d),
          &h, &d, exp);
}

static void test_create(void **state)
{
    (void)state;
    struct gguf_typedesc u64, u8, astr;
    assert_true(gguf_typedesc_parse("u64", 3, &u64));
    assert_true(gguf_typedesc_parse("u8", 2, &u8));
    assert_true(gguf_typedesc_parse("array[string]", 13, &astr));
    for (size_t k = 0; k < N_ENCS; k++) {
        struct gb b;
        struct gguf_file *f = model(encs[k].version, encs[k].be, &b);
        struct gguf_buf h = { 0 };
        struct gguf_diag d;
        /* the type inferred as gguf-py does, or given */
        creates(f, "n.a", NULL, "42\n", "n.a=i32:42");
        creates(f, "n.a", NULL, "-3000000000", "n.a=i64:-3000000000");
        creates(f, "n.a", NULL, "true\n", "n.a=bool:true");
        creates(f, "n.a", NULL, "1.5", "n.a=f32:1.5");
        creates(f, "n.a", NULL, "hello world\n", "n.a=string:hello world");
        creates(f, "n.a", NULL, "", "n.a=string:");
        creates(f, "n.a", &u64, "42", "n.a=u64:42");
        creates(f, "n.a", &astr, "a\\nb\nc\n", "n.a=array[string]:a\\nb\nc");

        refused(gguf_kvedit_create(f, "general.name", 12, NULL, "x", 1, &h, &d),
                GGUF_E_EXIST, &h, &d, "exists", UINT64_MAX);
        refused(gguf_kvedit_create(f, "Odd.Name", 8, NULL, "x", 1, &h, &d),
                GGUF_E_EXIST, &h, &d, "exists", UINT64_MAX);
        refused(gguf_kvedit_create(f, "general.alignment", 17, NULL, "64", 2, &h, &d),
                GGUF_E_PERM, &h, &d, "cannot be created", UINT64_MAX);
        refused(gguf_kvedit_create(f, "New.Key", 7, NULL, "1", 1, &h, &d),
                GGUF_E_INVAL, &h, &d, "not a valid GGUF key name", UINT64_MAX);
        refused(gguf_kvedit_create(f, "a..b", 4, NULL, "1", 1, &h, &d),
                GGUF_E_INVAL, &h, &d, "not a valid GGUF key name", UINT64_MAX);
        refused(gguf_kvedit_create(f, "", 0, NULL, "1", 1, &h, &d),
                GGUF_E_INVAL, &h, &d, "not a valid GGUF key name", UINT64_MAX);
        refused(gguf_kvedit_create(f, "n.a", 3, &u8, "256", 3, &h, &d),
                GGUF_E_RANGE, &h, &d, "out of range", 0);
        refused(gguf_kvedit_create(f, "n.a", 3, &u8, "1\nx", 3, &h, &d),
                GGUF_E_SYNTAX, &h, &d, "is not a u8", 0);
        struct gguf_typedesc bad = { 0 };
        refused(gguf_kvedit_create(f, "n.a", 3, &bad, "1", 1, &h, &d),
                GGUF_E_INVAL, &h, &d, "invalid type", 0);
        gguf_close(f);
        free(b.p);
    }
}

/* ---- delete ---------------------------------------------------------------------------- */

static void test_delete(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_ENCS; k++) {
        struct gb b;
        struct gguf_file *f = model(encs[k].version, encs[k].be, &b);
        struct gguf_buf h = { 0 };
        struct gguf_diag d;
        gives(f, gguf_kvedit_delete(f, K_U8, &h, &d), &h, &d, edited(K_U8, NULL, -1));
        /* one occurrence of a duplicated key: the other stays */
        gives(f, gguf_kvedit_delete(f, K_X, &h, &d), &h, &d, edited(K_X, NULL, -1));
        gives(f, gguf_kvedit_delete(f, K_X2, &h, &d), &h, &d, edited(K_X2, NULL, -1));
        refused(gguf_kvedit_delete(f, K_ALIGN, &h, &d), GGUF_E_PERM, &h, &d,
                "cannot be deleted", UINT64_MAX);
        refused(gguf_kvedit_delete(f, N_KEYS, &h, &d), GGUF_E_NOENT, &h, &d,
                "gone", UINT64_MAX);
        gguf_close(f);
        free(b.p);
    }
}

/* ---- rename ------------------------------------------------------------------------------- */

static void renames(const struct gguf_file *f, uint64_t i, const char *to, const char *want)
{
    struct gguf_buf h = { 0 };
    struct gguf_diag d;
    gives(f, gguf_kvedit_rename(f, i, to, strlen(to), &h, &d), &h, &d, want);
}

static void test_rename(void **state)
{
    (void)state;
    for (size_t k = 0; k < N_ENCS; k++) {
        struct gb b;
        struct gguf_file *f = model(encs[k].version, encs[k].be, &b);
        struct gguf_buf h = { 0 };
        struct gguf_diag d;
        /* a new name: the key keeps its place, type and value */
        renames(f, K_U8, "b.u8", edited(K_U8, "b.u8=u8:7", -1));
        /* an odd existing name can be renamed to a valid one */
        renames(f, K_ODD, "odd.name", edited(K_ODD, "odd.name=u32:1", -1));
        /* over an existing key of the same type: that one goes, the renamed
         * one keeps its place; an existing odd name is allowed (it is not a
         * new name) */
        renames(f, K_X, "Odd.Name", edited(K_X, "Odd.Name=u32:1", K_ODD));
        /* over a key of another type: refused (a rename keeps types) */
        refused(gguf_kvedit_rename(f, K_U8, "general.name", 12, &h, &d), GGUF_E_EXIST, &h, &d,
                "'general.name' is of type string, the key renamed over it u8", UINT64_MAX);
        refused(gguf_kvedit_rename(f, K_NAME, "x", 1, &h, &d), GGUF_E_EXIST, &h, &d,
                "a rename keeps types", UINT64_MAX);
        refused(gguf_kvedit_rename(f, K_U8, "Odd.Name", 8, &h, &d), GGUF_E_EXIST, &h, &d,
                "a rename keeps types", UINT64_MAX);
        refused(gguf_kvedit_rename(f, K_ARR, "a.u8", 4, &h, &d), GGUF_E_EXIST, &h, &d,
                "is of type u8, the key renamed over it array[i32]", UINT64_MAX);
        /* the second x over the first one */
        renames(f, K_X2, "x", edited(K_X, NULL, -1));
        /* to its own name: nothing changes (general.alignment too) */
        renames(f, K_U8, "a.u8", unedited());
        renames(f, K_ALIGN, "general.alignment", unedited());
        assert_int_equal(gguf_kvedit_rename(f, K_U8, "a.u8", 4, &h, &d), GGUF_OK);
        assert_int_equal(h.len, f->data_off);
        assert_memory_equal(h.data, b.p, h.len);
        gguf_buf_free(&h);

        refused(gguf_kvedit_rename(f, K_U8, "B.u8", 4, &h, &d), GGUF_E_INVAL, &h, &d,
                "not a valid GGUF key name", UINT64_MAX);
        refused(gguf_kvedit_rename(f, K_ALIGN, "general.align", 13, &h, &d),
                GGUF_E_PERM, &h, &d, "cannot be renamed", UINT64_MAX);
        refused(gguf_kvedit_rename(f, K_U8, "general.alignment", 17, &h, &d),
                GGUF_E_PERM, &h, &d, "replaced", UINT64_MAX);
        refused(gguf_kvedit_rename(f, N_KEYS, "a.b", 3, &h, &d), GGUF_E_NOENT, &h, &d,
                "gone", UINT64_MAX);
        gguf_close(f);
        free(b.p);
    }
}

/* ---- the padding key ---------------------------------------------------------------- */

/* gguffs.padding is sized by gguffs: deleted, yes; set, created, renamed
 * (from or to), retyped, no (EPERM), whatever its type. */
static void test_padding_key(void **state)
{
    (void)state;
    struct gguf_typedesc u32;
    assert_true(gguf_typedesc_parse("u32", 3, &u32));
    for (size_t k = 0; k < N_ENCS; k++) {
        for (int foreign = 0; foreign < 2; foreign++) {
            struct gb b = { .be = encs[k].be };
            gb_header(&b, encs[k].version, 1, 3);
            gb_kv_str(&b, "general.name", "m");
            gb_str(&b, GGUF_KEY_PADDING);
            if (foreign) {      /* someone else's key of that name */
                gb_u32(&b, GGUF_STRING);
                gb_str(&b, "pad");
            } else {
                gb_u32(&b, GGUF_ARRAY);
                gb_u32(&b, GGUF_U8);
                gb_count(&b, 5);
                for (int i = 0; i < 5; i++)
                    gb_u8(&b, 0);
            }
            gb_kv_u32(&b, "a.b", 1);
            uint64_t ne[1] = { 4 };
            gb_tensor(&b, "w", 1, ne, 0, 0);
            gb_pad(&b, 32);
            for (int i = 0; i < 16; i++)
                gb_u8(&b, (uint8_t)i);
            struct gguf_file *f;
            struct gguf_diag d;
            if (gguf_parse(b.p, b.len, b.len, &f, &d, NULL) != GGUF_OK)
                fail_msg("the test model does not parse: %s", d.msg);
            struct gguf_buf h = { 0 };
            refused(gguf_kvedit_set(f, 1, "1\n2\n", 4, &h, &d), GGUF_E_PERM, &h, &d,
                    "gguffs.padding cannot be changed", UINT64_MAX);
            refused(gguf_kvedit_retype(f, 1, &u32, &h, &d), GGUF_E_PERM, &h, &d,
                    "cannot be retyped", UINT64_MAX);
            refused(gguf_kvedit_rename(f, 1, "a.c", 3, &h, &d), GGUF_E_PERM, &h, &d,
                    "cannot be renamed", UINT64_MAX);
            refused(gguf_kvedit_rename(f, 2, GGUF_KEY_PADDING, 14, &h, &d), GGUF_E_PERM,
                    &h, &d, "cannot be the name of another key", UINT64_MAX);
            refused(gguf_kvedit_create(f, GGUF_KEY_PADDING, 14, NULL, "1", 1, &h, &d),
                    GGUF_E_PERM, &h, &d, "cannot be created", UINT64_MAX);
            /* to its own name: nothing changes */
            assert_int_equal(gguf_kvedit_rename(f, 1, GGUF_KEY_PADDING, 14, &h, &d), GGUF_OK);
            assert_memory_equal(h.data, b.p, h.len);
            gguf_buf_free(&h);
            gives(f, gguf_kvedit_delete(f, 1, &h, &d), &h, &d,
                  "general.name=string:m|a.b=u32:1");
            gguf_close(f);
            free(b.p);
        }
    }
}

/* ---- retype ------------------------------------------------------------------------------- */

static void test_retype(void **state)
{
    (void)state;
    struct gguf_typedesc u32, f32, str, af32, u8, ai8;
    assert_true(gguf_typedesc_parse("u32", 3, &u32));
    assert_true(gguf_typedesc_parse("f32", 3, &f32));
    assert_true(gguf_typedesc_parse("string", 6, &str));
    assert_true(gguf_typedesc_parse("array[f32]", 10, &af32));
    assert_true(gguf_typedesc_parse("u8", 2, &u8));
    assert_true(gguf_typedesc_parse("array[i8]", 9, &ai8));
    for (size_t k = 0; k < N_ENCS; k++) {
        struct gb b;
        struct gguf_file *f = model(encs[k].version, encs[k].be, &b);
        struct gguf_buf h = { 0 };
        struct gguf_diag d;
        gives(f, gguf_kvedit_retype(f, K_U8, &u32, &h, &d), &h, &d,
              edited(K_U8, "a.u8=u32:7", -1));
        gives(f, gguf_kvedit_retype(f, K_U8, &f32, &h, &d), &h, &d,
              edited(K_U8, "a.u8=f32:7", -1));
        gives(f, gguf_kvedit_retype(f, K_U8, &str, &h, &d), &h, &d,
              edited(K_U8, "a.u8=string:7", -1));
        gives(f, gguf_kvedit_retype(f, K_ARR, &af32, &h, &d), &h, &d,
              edited(K_ARR, "a.arr=array[f32]:1\n2", -1));
        gives(f, gguf_kvedit_retype(f, K_ARR, &ai8, &h, &d), &h, &d,
              edited(K_ARR, "a.arr=array[i8]:1\n2", -1));

        refused(gguf_kvedit_retype(f, K_NAME, &u8, &h, &d), GGUF_E_SYNTAX, &h, &d,
                "\"m\" is not a u8", 0);
        refused(gguf_kvedit_retype(f, K_ARR, &u32, &h, &d), GGUF_E_SYNTAX, &h, &d,
                "is not a u32", 0);
        refused(gguf_kvedit_retype(f, K_ALIGN, &u32, &h, &d), GGUF_E_PERM, &h, &d,
                "cannot be retyped", UINT64_MAX);
        refused(gguf_kvedit_retype(f, N_KEYS, &u32, &h, &d), GGUF_E_NOENT, &h, &d,
                "gone", UINT64_MAX);
        gguf_close(f);
        free(b.p);
    }
}

/* ---- helpers ---------------------------------------------------------------------------------- */

static void infers(const char *text, const char *type)
{
    struct gguf_typedesc t;
    struct gguf_buf b = { 0 };
    gguf_kvedit_infer(text, strlen(text), &t);
    assert_true(gguf_typedesc_format(&t, &b));
    gguf_buf_putc(&b, '\0');
    if (strcmp(b.data, type) != 0)
        fail_msg("\"%s\" is inferred as %s, not %s", text, b.data, type);
    gguf_buf_free(&b);
}

static void test_infer(void **state)
{
    (void)state;
    infers("true", "bool");
    infers("false\n", "bool");
    infers("True", "string");
    infers("0", "i32");
    infers("-2147483648", "i32");
    infers("2147483647\n", "i32");
    infers("2147483648", "i64");
    infers("+5", "i32");
    infers("-9223372036854775808", "i64");
    infers("9223372036854775808", "f32");     /* past i64: a number */
    infers("1.5", "f32");
    infers("1e-3", "f32");
    infers("inf", "f32");
    infers("nan", "f32");
    infers("1e999", "f32");
    infers(".5", "f32");
    infers("1e-999", "f32");
    infers("0x10", "f32");                     /* strtod reads hex */
    infers(" 1", "string");
    infers("1 ", "string");
    infers("12abc", "string");
    infers("", "string");
    infers("\n", "string");
    infers("1\n2\n", "string");
    infers("hello", "string");
    char longnum[80];
    memset(longnum, '1', sizeof longnum - 1);
    longnum[sizeof longnum - 1] = '\0';
    infers(longnum, "string");                 /* 64 bytes or more: a string */
}

static void test_utf8_prefix(void **state)
{
    (void)state;
    assert_true(gguf_utf8_prefix_ok("", 0));
    assert_true(gguf_utf8_prefix_ok("abc", 3));
    assert_true(gguf_utf8_prefix_ok("\xc3\xa9", 2));          /* é */
    assert_true(gguf_utf8_prefix_ok("a\xc3", 2));             /* é, first byte */
    assert_true(gguf_utf8_prefix_ok("\xe2\x82", 2));          /* € cut */
    assert_true(gguf_utf8_prefix_ok("\xf0\x9f\x98", 3));      /* emoji cut */
    assert_false(gguf_utf8_prefix_ok("\xc3(", 2));            /* bad continuation */
    assert_false(gguf_utf8_prefix_ok("\xff", 1));
    assert_false(gguf_utf8_prefix_ok("\xc0\x80", 2));         /* overlong */
    assert_false(gguf_utf8_prefix_ok("\xe0\x80", 2));         /* overlong, cut */
    assert_false(gguf_utf8_prefix_ok("\xed\xa0", 2));         /* surrogate, cut */
    assert_false(gguf_utf8_prefix_ok("\xf4\x90", 2));         /* > U+10FFFF, cut */
    assert_false(gguf_utf8_prefix_ok("\xc3\xa9\x80", 3));     /* stray continuation */
    assert_false(gguf_utf8_prefix_ok("\xe2\x82x", 3));        /* cut, then more */
}

/* gguf_utf8_valid byte by byte, as it was before it skipped ASCII eight
 * bytes at a time: the fast path must not change an answer. */
static size_t ref_utf8_valid(const unsigned char *s, size_t n, bool *truncated)
{
    size_t i = 0;
    *truncated = false;
    while (i < n) {
        unsigned c = s[i], lo = 0x80, hi = 0xbf;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            lo = c == 0xe0 ? 0xa0 : lo;
            hi = c == 0xed ? 0x9f : hi;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            lo = c == 0xf0 ? 0x90 : lo;
            hi = c == 0xf4 ? 0x8f : hi;
        } else {
            return i;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n) {
                *truncated = true;
                return i;
            }
            if (s[i + j] < (j == 1 ? lo : 0x80) || s[i + j] > (j == 1 ? hi : 0xbf))
                return i;
        }
        i += k + 1;
    }
    return n;
}

static void test_utf8_runs(void **state)
{
    (void)state;
    static const char *pieces[] = { "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\x80",
                                    "\xff", "\xc3", "\xe0\x80", "\xed\xa0\x80", "\n" };
    unsigned char buf[600];
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int trial = 0; trial < 3000; trial++) {
        size_t n = 0;
        while (n < 500) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            unsigned run = (unsigned)(r >> 33) % 40;       /* ASCII, 0 to 39 bytes */
            for (unsigned k = 0; k < run; k++)
                buf[n++] = (unsigned char)('a' + (r >> (k % 32)) % 26);
            unsigned pick = (unsigned)(r >> 20) % 64;
            if (pick < sizeof pieces / sizeof *pieces && (pick >= 3 || trial % 4 == 0)) {
                size_t pl = strlen(pieces[pick]);
                memcpy(buf + n, pieces[pick], pl);
                n += pl;
            }
        }
        /* every prefix and a few starts: the skip sees every alignment */
        for (size_t start = 0; start < 9; start++)
            for (size_t len = 0; start + len <= n; len += 1 + len / 16) {
                bool t1, t2;
                size_t a = gguf_utf8_valid((const char *)buf + start, len, &t1);
                size_t b = ref_utf8_valid(buf + start, len, &t2);
                if (a != b || t1 != t2)
                    fail_msg("trial %d, start %zu, len %zu: %zu/%d, expected %zu/%d",
                             trial, start, len, a, t1, b, t2);
            }
    }
}

static void test_decode_name(void **state)
{
    (void)state;
    struct gguf_buf b = { 0 };
    struct gguf_diag d;
    assert_int_equal(gguf_kvedit_decode_name("general.name", 12, true, &b, &d), GGUF_OK);
    assert_int_equal(b.len, 12);
    assert_memory_equal(b.data, "general.name", 12);
    b.len = 0;
    /* an odd existing name decodes when it need not be a valid new one */
    assert_int_equal(gguf_kvedit_decode_name("A%2FB", 5, false, &b, &d), GGUF_OK);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, "A/B", 3);
    b.len = 0;
    assert_int_equal(gguf_kvedit_decode_name("A%2FB", 5, true, &b, &d), GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "not a valid GGUF key name"));
    assert_int_equal(b.len, 0);
    assert_int_equal(gguf_kvedit_decode_name("x#2", 3, false, &b, &d), GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "occurrence 2"));
    assert_int_equal(b.len, 0);
    assert_int_equal(gguf_kvedit_decode_name("a%2", 3, false, &b, &d), GGUF_E_INVAL);
    assert_int_equal(gguf_kvedit_decode_name("%41", 3, false, &b, &d), GGUF_E_INVAL);
    assert_int_equal(b.len, 0);
    gguf_buf_free(&b);
}

/* A nested array whose arrays at one level differ in element type cannot be
 * set as text (its text parses back as one type per level, which would turn
 * [0, 0] of u8 into [false, false] of bool): GGUF_E_PERM, nothing built.  A
 * uniform one is set; both can still be deleted.  (Found by fuzz_parse.) */
static void test_nested_mixed(void **state)
{
    (void)state;
    for (uint32_t version = 1; version <= 3; version += 2) {
        struct gb b;
        memset(&b, 0, sizeof b);
        gb_header(&b, version, 0, 2);
        gb_str(&b, "t.mixed");                /* [[true], [0, 0]] */
        gb_u32(&b, GGUF_ARRAY);
        gb_u32(&b, GGUF_ARRAY);
        gb_count(&b, 2);
        gb_u32(&b, GGUF_BOOL);
        gb_count(&b, 1);
        gb_u8(&b, 1);
        gb_u32(&b, GGUF_U8);
        gb_count(&b, 2);
        gb_u8(&b, 0);
        gb_u8(&b, 0);
        gb_str(&b, "t.same");                 /* [[1], [2, 3]] of i32 */
        gb_u32(&b, GGUF_ARRAY);
        gb_u32(&b, GGUF_ARRAY);
        gb_count(&b, 2);
        gb_u32(&b, GGUF_I32);
        gb_count(&b, 1);
        gb_u32(&b, 1);
        gb_u32(&b, GGUF_I32);
        gb_count(&b, 2);
        gb_u32(&b, 2);
        gb_u32(&b, 3);
        struct gguf_file *f;
        struct gguf_diag d;
        if (gguf_parse(b.p, b.len, b.len, &f, &d, NULL) != GGUF_OK)
            fail_msg("the test model does not parse: %s", d.msg);
        assert_false(gguf_kv_uniform(f, &f->kv[0]));
        assert_true(gguf_kv_uniform(f, &f->kv[1]));
        struct gguf_buf hdr = { 0 };
        const char *same = "[true]\n[0, 0]\n";
        assert_int_equal(gguf_kvedit_set(f, 0, same, strlen(same), &hdr, &d), GGUF_E_PERM);
        assert_non_null(strstr(d.msg, "t.mixed"));
        assert_int_equal(hdr.len, 0);
        const char *t = "[4, 5]\n";
        assert_int_equal(gguf_kvedit_set(f, 1, t, strlen(t), &hdr, &d), GGUF_OK);
        gguf_buf_free(&hdr);
        assert_int_equal(gguf_kvedit_delete(f, 0, &hdr, &d), GGUF_OK);
        gguf_buf_free(&hdr);
        gguf_close(f);
        free(b.p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_nested_mixed),
        cmocka_unit_test(test_create),
        cmocka_unit_test(test_delete),
        cmocka_unit_test(test_rename),
        cmocka_unit_test(test_padding_key),
        cmocka_unit_test(test_retype),
        cmocka_unit_test(test_infer),
        cmocka_unit_test(test_utf8_prefix),
        cmocka_unit_test(test_utf8_runs),
        cmocka_unit_test(test_decode_name),
    };
    return cmocka_run_group_tests_name("kvedit", tests, NULL, NULL);
}

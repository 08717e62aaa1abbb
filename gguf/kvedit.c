/*
 * gguf/kvedit.c — one metadata change into a new header (see kvedit.h).
 *
 * Each change starts from f's list of key/values as they are in the file
 * (gguf_newkv_all), edits one entry, and hands the list to
 * gguf_header_build, which checks every value's encoding by parsing the
 * result back.  New values are encoded by gguf_parse_value in f's byte
 * order and count width.
 */
#include "kvedit.h"
#include "names.h"
#include "pad.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- checks ------------------------------------------------------------------ */

static enum gguf_err no_key(const struct gguf_file *f, uint64_t i, struct gguf_diag *d)
{
    return gguf_diag_set(d, GGUF_E_NOENT, UINT64_MAX, "no key #%llu (the file has "
                         "%llu): it is gone", (unsigned long long)i,
                         (unsigned long long)f->n_kv);
}

static enum gguf_err alignment(const char *verb, struct gguf_diag *d)
{
    return gguf_diag_set(d, GGUF_E_PERM, UINT64_MAX, "general.alignment cannot be "
                         "%s: it decides where tensor data starts", verb);
}

static enum gguf_err padding(const char *verb, struct gguf_diag *d)
{
    return gguf_diag_set(d, GGUF_E_PERM, UINT64_MAX, GGUF_KEY_PADDING " cannot be %s "
                         "(only deleted): gguffs sizes it to keep tensor data in "
                         "place", verb);
}

/* Key i exists and is not general.alignment. */
static enum gguf_err editable(const struct gguf_file *f, uint64_t i, const char *verb,
                              struct gguf_diag *d)
{
    if (i >= f->n_kv)
        return no_key(f, i, d);
    const struct gguf_kv *kv = &f->kv[i];
    if (gguf_key_is_alignment(f->hdr + kv->key_off, kv->key_len))
        return alignment(verb, d);
    if (!strcmp(verb, "changed") && !gguf_kv_uniform(f, kv)) {
        char nb[GGUF_DIAG_NAME_MAX];
        return gguf_diag_set(d, GGUF_E_PERM, UINT64_MAX, "'%s' is a nested array whose "
                             "arrays have different element types: its text cannot "
                             "be parsed back to the same value, so it cannot be set "
                             "(retype it first)",
                             gguf_diag_name(f->hdr + kv->key_off, kv->key_len, nb));
    }
    return GGUF_OK;
}

/* Key i is editable and is not gguffs.padding (which can only be deleted). */
static enum gguf_err changeable(const struct gguf_file *f, uint64_t i, const char *verb,
                                struct gguf_diag *d)
{
    enum gguf_err err = editable(f, i, verb, d);
    if (!err && gguf_key_is_padding(f->hdr + f->kv[i].key_off, f->kv[i].key_len))
        err = padding(verb, d);
    return err;
}

static enum gguf_err bad_name(const char *name, size_t len, struct gguf_diag *d)
{
    char nb[GGUF_DIAG_NAME_MAX];
    return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "'%s' is not a valid GGUF key "
                         "name (ASCII, '.'-separated lower_snake_case segments, "
                         "shorter than 65536 bytes)", gguf_diag_name(name, len, nb));
}

/* ---- building --------------------------------------------------------------------- */

/* Serializes kvs (n entries) for f into hdr, then frees kvs. */
static enum gguf_err build(const struct gguf_file *f, struct gguf_newkv *kvs, size_t n,
                           struct gguf_buf *hdr, struct gguf_diag *d)
{
    enum gguf_err err = gguf_header_build(f, kvs, n, hdr, d);
    free(kvs);
    return err;
}

/* f's list with room for one more entry; NULL (diag set) when out of memory. */
static struct gguf_newkv *list_of(const struct gguf_file *f, struct gguf_diag *d)
{
    struct gguf_newkv *kvs = gguf_newkv_all(f, 1);
    if (!kvs)
        gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    return kvs;
}

/* Removes entry j of kvs (n entries). */
static void drop(struct gguf_newkv *kvs, size_t n, size_t j)
{
    memmove(&kvs[j], &kvs[j + 1], (n - j - 1) * sizeof *kvs);
}

/* Replaces entry i's type and value by type and the encoding in bin. */
static enum gguf_err with_value(const struct gguf_file *f, uint64_t i, uint32_t type,
                                const struct gguf_buf *bin, struct gguf_buf *hdr,
                                struct gguf_diag *d)
{
    struct gguf_newkv *kvs = list_of(f, d);
    if (!kvs)
        return GGUF_E_NOMEM;
    kvs[i].type = type;
    kvs[i].val = (const uint8_t *)bin->data;
    kvs[i].val_len = bin->len;
    return build(f, kvs, (size_t)f->n_kv, hdr, d);
}

/* ---- the changes ---------------------------------------------------------------------- */

enum gguf_err gguf_kvedit_set(const struct gguf_file *f, uint64_t i,
                              const char *text, size_t len,
                              struct gguf_buf *hdr, struct gguf_diag *d)
{
    enum gguf_err err = changeable(f, i, "changed", d);
    if (err)
        return err;
    struct gguf_typedesc td;
    struct gguf_buf bin = { 0 };
    gguf_kv_typedesc(f, &f->kv[i], &td);
    err = gguf_parse_value(&f->enc, &td, text, len, &bin, d);
    if (!err)
        err = with_value(f, i, f->kv[i].type, &bin, hdr, d);
    gguf_buf_free(&bin);
    return err;
}

enum gguf_err gguf_kvedit_retype(const struct gguf_file *f, uint64_t i,
                                 const struct gguf_typedesc *type,
                                 struct gguf_buf *hdr, struct gguf_diag *d)
{
    enum gguf_err err = changeable(f, i, "retyped", d);
    if (err)
        return err;
    struct gguf_buf text = { 0 }, bin = { 0 };
    if (gguf_render_kv(f, &f->kv[i], &text) != GGUF_OK)
        err = gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    else
        err = gguf_parse_value(&f->enc, type, text.data ? text.data : "", text.len,
                               &bin, d);
    if (!err)
        err = with_value(f, i, type->levels[0], &bin, hdr, d);
    gguf_buf_free(&text);
    gguf_buf_free(&bin);
    return err;
}

enum gguf_err gguf_kvedit_create(const struct gguf_file *f,
                                 const char *key, size_t key_len,
                                 const struct gguf_typedesc *type,
                                 const char *text, size_t len,
                                 struct gguf_buf *hdr, struct gguf_diag *d)
{
    char nb[GGUF_DIAG_NAME_MAX];
    if (gguf_key_is_alignment(key, key_len))
        return alignment("created", d);
    if (gguf_key_is_padding(key, key_len))
        return padding("created", d);
    if (gguf_find_key(f, key, key_len) >= 0)
        return gguf_diag_set(d, GGUF_E_EXIST, UINT64_MAX, "key '%s' exists",
                             gguf_diag_name(key, key_len, nb));
    if (!gguf_key_name_valid(key, key_len))
        return bad_name(key, key_len, d);
    struct gguf_typedesc td;
    if (type)
        td = *type;
    else
        gguf_kvedit_infer(text, len, &td);
    struct gguf_buf bin = { 0 };
    enum gguf_err err = gguf_parse_value(&f->enc, &td, text, len, &bin, d);
    struct gguf_newkv *kvs = err ? NULL : list_of(f, d);
    if (!err && !kvs)
        err = GGUF_E_NOMEM;
    if (!err) {
        size_t n = (size_t)f->n_kv;
        kvs[n] = (struct gguf_newkv){ key, key_len, td.levels[0],
                                      (const uint8_t *)bin.data, bin.len };
        err = build(f, kvs, n + 1, hdr, d);
    }
    gguf_buf_free(&bin);
    return err;
}

enum gguf_err gguf_kvedit_delete(const struct gguf_file *f, uint64_t i,
                                 struct gguf_buf *hdr, struct gguf_diag *d)
{
    enum gguf_err err = editable(f, i, "deleted", d);
    struct gguf_newkv *kvs = err ? NULL : list_of(f, d);
    if (err || !kvs)
        return err ? err : GGUF_E_NOMEM;
    drop(kvs, (size_t)f->n_kv, (size_t)i);
    return build(f, kvs, (size_t)f->n_kv - 1, hdr, d);
}

enum gguf_err gguf_kvedit_rename(const struct gguf_file *f, uint64_t i,
                                 const char *to, size_t to_len,
                                 struct gguf_buf *hdr, struct gguf_diag *d)
{
    if (i >= f->n_kv)
        return no_key(f, i, d);
    int64_t j = gguf_find_key(f, to, to_len);
    if (j == (int64_t)i)
        j = -1, to = NULL;      /* its own name: nothing changes */
    enum gguf_err err = to ? changeable(f, i, "renamed", d) : GGUF_OK;
    if (err)
        return err;
    /* a new name must follow the rule; an existing one is kept as it is */
    if (to && j < 0 && !gguf_key_name_valid(to, to_len))
        return bad_name(to, to_len, d);
    if (j >= 0 && gguf_key_is_alignment(to, to_len))
        return alignment("replaced by a rename", d);
    if (to && gguf_key_is_padding(to, to_len))
        return padding("the name of another key", d);
    if (j >= 0) {
        /* over a key of another type: refused, so that a key a loader
         * needs as u32 cannot silently become an f32 (the target's value
         * can be written instead, which keeps its type) */
        struct gguf_typedesc a, b;
        gguf_kv_typedesc(f, &f->kv[i], &a);
        gguf_kv_typedesc(f, &f->kv[j], &b);
        if (a.depth != b.depth || memcmp(a.levels, b.levels, a.depth) != 0) {
            struct gguf_buf ta = { 0 }, tb = { 0 };
            gguf_typedesc_format(&a, &ta);
            gguf_typedesc_format(&b, &tb);
            err = gguf_diag_set(d, GGUF_E_EXIST, UINT64_MAX,
                                "'%.*s' is of type %.*s, the key renamed over it %.*s: a "
                                "rename keeps types (write the value instead)",
                                (int)(to_len > 200 ? 200 : to_len), to,
                                (int)tb.len, tb.data ? tb.data : "",
                                (int)ta.len, ta.data ? ta.data : "");
            gguf_buf_free(&ta);
            gguf_buf_free(&tb);
            return err;
        }
    }
    struct gguf_newkv *kvs = list_of(f, d);
    if (!kvs)
        return GGUF_E_NOMEM;
    size_t n = (size_t)f->n_kv;
    if (to) {
        kvs[i].key = to;
        kvs[i].key_len = to_len;
    }
    if (j >= 0)     /* over an existing key: that one goes */
        drop(kvs, n--, (size_t)j);
    return build(f, kvs, n, hdr, d);
}

/* ---- helpers ---------------------------------------------------------------------------- */

void gguf_kvedit_infer(const char *s, size_t len, struct gguf_typedesc *t)
{
    char buf[64];
    memset(t, 0, sizeof *t);
    t->depth = 1;
    t->levels[0] = GGUF_STRING;
    if (len && s[len - 1] == '\n')
        len--;
    if (len == 0 || len >= sizeof buf || memchr(s, '\n', len))
        return;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (strcmp(buf, "true") == 0 || strcmp(buf, "false") == 0) {
        t->levels[0] = GGUF_BOOL;
        return;
    }
    char *end;
    const char *digits = buf[0] == '-' || buf[0] == '+' ? buf + 1 : buf;
    if (*digits >= '0' && *digits <= '9') {
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (*end == '\0' && errno == 0) {
            t->levels[0] = v >= INT32_MIN && v <= INT32_MAX ? GGUF_I32 : GGUF_I64;
            return;
        }
    }
    if (buf[0] == ' ' || buf[0] == '\t')
        return;
    errno = 0;
    double v = strtod(buf, &end);
    if (*end == '\0' && end != buf && (errno == 0 || v == 0 || isinf(v)))
        t->levels[0] = GGUF_F32;
}

bool gguf_utf8_prefix_ok(const char *s, size_t n)
{
    bool truncated;
    return gguf_utf8_valid(s, n, &truncated) == n || truncated;
}

enum gguf_err gguf_kvedit_decode_name(const char *fname, size_t len, bool new_key,
                                      struct gguf_buf *out, struct gguf_diag *d)
{
    char nb[GGUF_DIAG_NAME_MAX];
    size_t start = out->len;
    unsigned dup;
    if (!gguf_name_decode(fname, len, out, &dup))
        return gguf_diag_set(d, out->oom ? GGUF_E_NOMEM : GGUF_E_INVAL, UINT64_MAX,
                             "'%s' is not a file name meta/ shows",
                             gguf_diag_name(fname, len, nb));
    if (dup != 1) {
        out->len = start;
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "'%s' names occurrence %u "
                             "of a key, not a key", gguf_diag_name(fname, len, nb), dup);
    }
    if (new_key && !gguf_key_name_valid(out->data ? out->data + start : "",
                                        out->len - start)) {
        out->len = start;
        return bad_name(fname, len, d);
    }
    return GGUF_OK;
}

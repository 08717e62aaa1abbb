/*
 * gguf/header.c — serializing a header (see header.h).
 *
 * gguf_header_build checks the list (limits, general.alignment), writes the
 * records, then parses the result back: a value whose encoding is not what
 * it claims would shift every later record, so the parsed index must put
 * each record where it was written and keep the tensor infos as they were.
 * When the header does not parse, each record is parsed alone to name the
 * key at fault.
 */
#include "header.h"

#include <stdlib.h>
#include <string.h>

struct gguf_newkv gguf_newkv_of(const struct gguf_file *f, uint64_t i)
{
    const struct gguf_kv *kv = &f->kv[i];
    uint64_t bin = kv->rec_off + gguf_count_size(&f->enc) + kv->key_len + 4;
    struct gguf_newkv n = {
        .key = (const char *)f->hdr + kv->key_off,
        .key_len = kv->key_len,
        .type = kv->type,
        .val = f->hdr + bin,
        .val_len = (size_t)(kv->val_off + kv->val_size - bin),
    };
    return n;
}

struct gguf_newkv *gguf_newkv_all(const struct gguf_file *f, size_t extra)
{
    if (extra > SIZE_MAX / sizeof(struct gguf_newkv) - f->n_kv - 1)
        return NULL;
    struct gguf_newkv *kvs = calloc((size_t)f->n_kv + extra + 1, sizeof *kvs);
    for (uint64_t i = 0; kvs && i < f->n_kv; i++)
        kvs[i] = gguf_newkv_of(f, i);
    return kvs;
}

/* ---- record writers ---------------------------------------------------------- */

bool gguf_put_preamble(struct gguf_buf *out, const struct gguf_enc *e,
                       uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gguf_buf_put(out, "GGUF", 4);
    gguf_put32(out, e, version);
    gguf_put_count(out, e, n_tensors);
    return gguf_put_count(out, e, n_kv);
}

bool gguf_put_kv(struct gguf_buf *out, const struct gguf_enc *e,
                 const struct gguf_newkv *kv)
{
    gguf_put_count(out, e, kv->key_len);
    gguf_buf_put(out, kv->key, kv->key_len);
    gguf_put32(out, e, kv->type);
    return gguf_buf_put(out, kv->val, kv->val_len);
}

/* Copies n scalars of sz bytes from p into out, in to's byte order. */
static bool put_scalars(struct gguf_buf *out, bool swap, unsigned sz, const uint8_t *p,
                        uint64_t n)
{
    if (!swap || sz == 1)
        return gguf_buf_put(out, p, (size_t)(n * sz));
    for (uint64_t i = 0; i < n; i++, p += sz) {
        uint8_t x[8];
        for (unsigned k = 0; k < sz; k++)
            x[k] = p[sz - 1 - k];
        if (!gguf_buf_put(out, x, sz))
            return false;
    }
    return true;
}

/* One value of type t at *p (before end), in encoding from, appended in
 * encoding to; *p moves past it.  False when it is not well formed, a
 * count does not fit in to's count field, or out is out of memory. */
static bool put_value_as(struct gguf_buf *out, const struct gguf_enc *to,
                         const struct gguf_enc *from, uint32_t t, const uint8_t **p,
                         const uint8_t *end, unsigned depth)
{
    bool swap = to->big_endian != from->big_endian;
    unsigned cs = gguf_count_size(from);
    unsigned sz = gguf_vtype_size(t);
    if (sz) {
        if ((size_t)(end - *p) < sz)
            return false;
        bool ok = put_scalars(out, swap, sz, *p, 1);
        *p += sz;
        return ok;
    }
    if (t == GGUF_STRING) {
        if ((size_t)(end - *p) < cs)
            return false;
        uint64_t len = gguf_rd_count(from, *p);
        *p += cs;
        if (len > (uint64_t)(end - *p) || (to->v1 && len > UINT32_MAX))
            return false;
        gguf_put_count(out, to, len);
        bool ok = gguf_buf_put(out, *p, (size_t)len);
        *p += len;
        return ok;
    }
    if (t != GGUF_ARRAY || depth >= GGUF_MAX_NEST || (size_t)(end - *p) < 4 + cs)
        return false;
    uint32_t et = gguf_rd32(from, *p);
    uint64_t n = gguf_rd_count(from, *p + 4);
    *p += 4 + cs;
    if (et >= GGUF_VTYPE_COUNT || (to->v1 && n > UINT32_MAX))
        return false;
    gguf_put32(out, to, et);
    gguf_put_count(out, to, n);
    unsigned esz = gguf_vtype_size(et);
    if (esz) {
        if (n > (uint64_t)(end - *p) / esz)
            return false;
        bool ok = put_scalars(out, swap, esz, *p, n);
        *p += n * esz;
        return ok;
    }
    for (uint64_t i = 0; i < n; i++)
        if (!put_value_as(out, to, from, et, p, end, depth + 1))
            return false;
    return !out->oom;
}

bool gguf_put_kv_as(struct gguf_buf *out, const struct gguf_enc *to,
                    const struct gguf_enc *from, const struct gguf_newkv *kv)
{
    if (to->v1 == from->v1 && to->big_endian == from->big_endian)
        return gguf_put_kv(out, to, kv);
    gguf_put_count(out, to, kv->key_len);
    gguf_buf_put(out, kv->key, kv->key_len);
    gguf_put32(out, to, kv->type);
    const uint8_t *p = kv->val, *end = kv->val + kv->val_len;
    return put_value_as(out, to, from, kv->type, &p, end, 0) && p == end && !out->oom;
}

bool gguf_put_tensor_info(struct gguf_buf *out, const struct gguf_enc *e,
                          const uint8_t *hdr, const struct gguf_tensor *t,
                          uint64_t offset)
{
    gguf_put_count(out, e, t->name_len);
    gguf_buf_put(out, hdr + t->name_off, t->name_len);
    gguf_put32(out, e, t->n_dims);
    for (unsigned d = 0; d < t->n_dims; d++)
        gguf_put_count(out, e, t->ne[d]);
    gguf_put32(out, e, t->type);
    return gguf_put64(out, e, offset);
}

bool gguf_put_padding(struct gguf_buf *out, uint64_t align)
{
    static const uint8_t zeros[64];
    while (!out->oom && out->len % align) {
        uint64_t k = align - out->len % align;
        gguf_buf_put(out, zeros, k < sizeof zeros ? (size_t)k : sizeof zeros);
    }
    return !out->oom;
}

/* ---- checks before writing ------------------------------------------------------ */

/* general.alignment must stay exactly as it is. */
static enum gguf_err check_alignment(const struct gguf_file *f,
                                     const struct gguf_newkv *kvs, size_t n,
                                     struct gguf_diag *d)
{
    bool had = gguf_find_key(f, GGUF_KEY_ALIGNMENT, 17) >= 0, has = false;
    for (size_t i = 0; i < n; i++) {
        if (!gguf_key_is_alignment(kvs[i].key, kvs[i].key_len))
            continue;
        if (!had)
            return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                                 "general.alignment cannot be added (the file uses "
                                 "the default, 32): it decides where tensor data "
                                 "starts");
        if (kvs[i].type != GGUF_U32 || kvs[i].val_len != 4 ||
            gguf_rd32(&f->enc, kvs[i].val) != f->alignment)
            return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                                 "general.alignment cannot be changed (it is u32 "
                                 "%llu): it decides where tensor data starts",
                                 (unsigned long long)f->alignment);
        has = true;
    }
    if (had && !has)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                             "general.alignment cannot be removed: it decides "
                             "where tensor data starts");
    return GGUF_OK;
}

/* Counts, key lengths, types, general.alignment. */
static enum gguf_err check_list(const struct gguf_file *f,
                                const struct gguf_newkv *kvs, size_t n,
                                struct gguf_diag *d)
{
    char nb[GGUF_DIAG_NAME_MAX];
    if (f->enc.v1 && n > UINT32_MAX)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                             "%zu key/values: a version 1 file counts at most %u",
                             n, UINT32_MAX);
    for (size_t i = 0; i < n; i++) {
        if (kvs[i].key_len > GGUF_MAX_NAME)
            return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                                 "key '%s' is %zu bytes long (the limit is %d)",
                                 gguf_diag_name(kvs[i].key, kvs[i].key_len, nb),
                                 kvs[i].key_len, GGUF_MAX_NAME);
        if (kvs[i].type >= GGUF_VTYPE_COUNT)
            return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                                 "key '%s': unknown value type %u",
                                 gguf_diag_name(kvs[i].key, kvs[i].key_len, nb),
                                 kvs[i].type);
    }
    return check_alignment(f, kvs, n, d);
}

/* ---- checks after writing -------------------------------------------------------- */

/* Parses a header holding kv alone; GGUF_OK if its value is well formed
 * and exactly val_len bytes long.  (Only used to explain a failure.) */
static enum gguf_err check_one(const struct gguf_file *f,
                               const struct gguf_newkv *kv, struct gguf_diag *d)
{
    struct gguf_buf b = { 0 };
    gguf_put_preamble(&b, &f->enc, f->version, 0, 1);
    if (!gguf_put_kv(&b, &f->enc, kv)) {
        gguf_buf_free(&b);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    struct gguf_file *nf = NULL;
    enum gguf_err err = gguf_parse((const uint8_t *)b.data, b.len, b.len, &nf, d,
                                   NULL);
    if (!err && nf->hdr_size != b.len)
        err = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%zu bytes given, %zu parsed",
                            kv->val_len, kv->val_len - (size_t)(b.len - nf->hdr_size));
    gguf_close(nf);
    gguf_buf_free(&b);
    return err;
}

/* Parses the built header b back (with f's data size after it): every
 * record where it was written (rec[i]), with the value length given, and
 * the same tensor infos, alignment and data start. */
static enum gguf_err verify(const struct gguf_file *f, const struct gguf_newkv *kvs,
                            size_t n, const uint64_t *rec, const struct gguf_buf *b,
                            struct gguf_diag *d)
{
    char nb[GGUF_DIAG_NAME_MAX];
    uint64_t data_len = f->file_size > f->data_off ? f->file_size - f->data_off : 0;
    struct gguf_file *nf = NULL;
    struct gguf_diag pd;
    enum gguf_err err = gguf_parse((const uint8_t *)b->data, b->len, b->len + data_len,
                                   &nf, &pd, NULL);
    if (err == GGUF_E_NOMEM)
        return gguf_diag_set(d, err, UINT64_MAX, "out of memory checking the header");
    if (err) {
        /* find the key at fault by parsing each record alone */
        size_t k = 0;
        struct gguf_diag kd;
        while (k < n && check_one(f, &kvs[k], &kd) == GGUF_OK)
            k++;
        if (k < n)
            return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "key '%s': the value "
                                 "is not a well-formed %s encoding (%s)",
                                 gguf_diag_name(kvs[k].key, kvs[k].key_len, nb),
                                 gguf_vtype_name(kvs[k].type), kd.msg);
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                             "the new header does not parse: %s", pd.msg);
    }
    for (size_t i = 0; !err && i < n && i < nf->n_kv; i++) {
        size_t got = gguf_newkv_of(nf, i).val_len;
        if (nf->kv[i].rec_off != rec[i] || got != kvs[i].val_len)
            err = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "key '%s': the value is "
                                "not a well-formed %s encoding (%zu bytes given, "
                                "%zu parsed)", gguf_diag_name(kvs[i].key,
                                kvs[i].key_len, nb), gguf_vtype_name(kvs[i].type),
                                kvs[i].val_len, got);
    }
    bool same = nf->n_kv == n && nf->n_tensors == f->n_tensors &&
                nf->alignment == f->alignment &&
                (nf->data_off == b->len || !gguf_has_tensor_data(f));
    for (uint64_t i = 0; same && i < f->n_tensors; i++)
        same = nf->tensors[i].offset == f->tensors[i].offset &&
               nf->tensors[i].nbytes == f->tensors[i].nbytes;
    if (!err && !same)
        err = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the new header does not "
                            "describe the same key count, tensors or alignment");
    gguf_close(nf);
    return err;
}

enum gguf_err gguf_header_build(const struct gguf_file *f,
                                const struct gguf_newkv *kvs, size_t n,
                                struct gguf_buf *out, struct gguf_diag *d)
{
    struct gguf_diag scratch;
    if (!d)
        d = &scratch;
    gguf_diag_set(d, GGUF_OK, UINT64_MAX, "%s", "");
    enum gguf_err err = check_list(f, kvs, n, d);
    if (err)
        return err;

    uint64_t ti_off = f->n_tensors ? f->tensors[0].info_off : f->hdr_size;
    uint64_t *rec = malloc((n ? n : 1) * sizeof *rec);
    if (!rec)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    struct gguf_buf b = { 0 };
    gguf_put_preamble(&b, &f->enc, f->version, f->n_tensors, n);
    for (size_t i = 0; i < n; i++) {
        rec[i] = b.len;
        gguf_put_kv(&b, &f->enc, &kvs[i]);
    }
    gguf_buf_put(&b, f->hdr + ti_off, f->hdr_size - ti_off);
    /* Padding only matters where tensor bytes follow; a file without any
     * (a vocabulary file) ends with its header, as converters write them,
     * so a huge general.alignment costs nothing there. */
    if (gguf_has_tensor_data(f))
        gguf_put_padding(&b, f->alignment);
    if (b.oom)
        err = gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX,
                            "out of memory building the header");
    else
        err = verify(f, kvs, n, rec, &b, d);
    free(rec);
    if (err) {
        gguf_buf_free(&b);
        return err;
    }
    gguf_buf_free(out);
    *out = b;
    return GGUF_OK;
}

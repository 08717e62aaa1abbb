/* gguf/safetensors.c — a model as a safetensors file (see safetensors.h). */
#include "safetensors.h"
#include "types.h"
#include "value.h"

#include <stdlib.h>
#include <string.h>

/* The dtype of a tensor served with its raw bytes, and its element size;
 * NULL for a type that is served as F32 (or not at all). */
static const char *raw_dtype(uint32_t type, uint8_t *esize)
{
    switch (type) {
    case GGML_T_F64: *esize = 8; return "F64";
    case GGML_T_I64: *esize = 8; return "I64";
    case GGML_T_F32: *esize = 4; return "F32";
    case GGML_T_I32: *esize = 4; return "I32";
    case GGML_T_F16: *esize = 2; return "F16";
    case GGML_T_BF16: *esize = 2; return "BF16";
    case GGML_T_I16: *esize = 2; return "I16";
    case GGML_T_I8: *esize = 1; return "I8";
    default: return NULL;
    }
}

/* A JSON string of valid UTF-8 (checked by the caller): '"' and '\'
 * escaped, control characters as \u00XX, everything else as it is. */
static void json_str(struct gguf_buf *out, const char *s, size_t n)
{
    gguf_buf_putc(out, '"');
    size_t i = 0;
    while (i < n && !out->oom) {
        size_t j = i;
        while (j < n && (unsigned char)s[j] >= 0x20 && s[j] != '"' && s[j] != '\\')
            j++;
        gguf_buf_put(out, s + i, j - i);
        if (j == n)
            break;
        unsigned char c = (unsigned char)s[j];
        if (c == '"' || c == '\\') {
            gguf_buf_putc(out, '\\');
            gguf_buf_putc(out, (char)c);
        } else {
            gguf_buf_printf(out, "\\u%04x", c);
        }
        i = j + 1;
    }
    gguf_buf_putc(out, '"');
}

static bool utf8(const char *s, size_t n)
{
    return gguf_utf8_valid(s, n, NULL) == n;
}

/* Appends name to the list of omitted names (newline-separated), bytes of
 * invalid sequences as U+FFFD: the list is then valid UTF-8. */
static void omit(struct gguf_buf *list, const char *s, size_t n)
{
    if (list->len)
        gguf_buf_putc(list, '\n');
    size_t i = 0;
    while (i < n) {
        size_t ok = gguf_utf8_valid(s + i, n - i, NULL);
        gguf_buf_put(list, s + i, ok);
        i += ok;
        if (i < n) {
            gguf_buf_put(list, "\xef\xbf\xbd", 3);
            i++;
        }
    }
}

static int by_size_name(const void *a, const void *b)
{
    const struct gguf_st_span *x = a, *y = b;
    if (x->esize != y->esize)
        return x->esize > y->esize ? -1 : 1;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    if (c)
        return c;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len;
}

/* __metadata__: "format": "pt", the scalar string keys of meta (first
 * occurrence; key and value UTF-8; not "format"), gguffs.omitted. */
static void metadata(const struct gguf_file *meta, const struct gguf_buf *omitted,
                     struct gguf_buf *out)
{
    gguf_buf_printf(out, "\"__metadata__\":{\"format\":\"pt\"");
    for (uint64_t i = 0; meta && i < meta->n_kv && !out->oom; i++) {
        const struct gguf_kv *kv = &meta->kv[i];
        const char *key = (const char *)meta->hdr + kv->key_off;
        if (kv->type != GGUF_STRING || kv->dup > 1 || !utf8(key, kv->key_len) ||
            (kv->key_len == 6 && !memcmp(key, "format", 6)) ||
            (kv->key_len == 14 && !memcmp(key, "gguffs.omitted", 14)))
            continue;
        /* the parser checked that the value lies in the header; its
         * length is checked against val_size all the same */
        unsigned w = gguf_count_size(&meta->enc);
        if (kv->val_size < w)
            continue;
        const uint8_t *v = meta->hdr + kv->val_off;
        uint64_t len = gguf_rd_count(&meta->enc, v);
        if (len > kv->val_size - w || !utf8((const char *)v + w, (size_t)len))
            continue;
        gguf_buf_putc(out, ',');
        json_str(out, key, kv->key_len);
        gguf_buf_putc(out, ':');
        json_str(out, (const char *)v + w, (size_t)len);
    }
    if (omitted->len) {
        gguf_buf_printf(out, ",\"gguffs.omitted\":");
        json_str(out, omitted->data, omitted->len);
    }
    gguf_buf_putc(out, '}');
}

enum gguf_err gguf_safetensors(const struct gguf_file *meta, uint64_t n, gguf_st_get get,
                               void *ctx, struct gguf_st_layout *out, struct gguf_diag *diag)
{
    return gguf_safetensors_aligned(meta, n, get, ctx, 8, out, diag);
}

enum gguf_err gguf_safetensors_aligned(const struct gguf_file *meta, uint64_t n,
                                       gguf_st_get get, void *ctx, unsigned align,
                                       struct gguf_st_layout *out, struct gguf_diag *diag)
{
    memset(out, 0, sizeof *out);
    /* n is the caller's count of tensors it holds in memory; the product
     * is checked all the same */
    if (n > SIZE_MAX / sizeof *out->span)
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "too many tensors");
    out->span = n ? malloc(n * sizeof *out->span) : NULL;
    if (n && !out->span)
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    struct gguf_buf omitted = { 0 };
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_st_in in;
        memset(&in, 0, sizeof in);
        get(ctx, i, &in);
        const struct gguf_tensor *t = in.t;
        struct gguf_st_span *s = &out->span[k];
        s->tensor = i;
        s->t = t;
        s->name = in.name;
        s->name_len = in.name_len;
        s->f32 = in.big_endian || in.force_f32 || !raw_dtype(t->type, &s->esize);
        s->shape = in.shape;
        s->n_dims = in.shape ? in.n_dims : t->n_dims;
        uint64_t n_elems = in.shape ? in.n_elems : t->n_elems;
        if ((s->f32 && !in.has_f32) || !utf8(in.name, in.name_len) ||
            (in.name_len == 12 && !memcmp(in.name, "__metadata__", 12))) {
            omit(&omitted, in.name, in.name_len);
            out->n_omitted++;
            continue;
        }
        if (s->f32) {
            s->esize = 4;
            if (n_elems > INT64_MAX / 4)
                goto too_large;
            s->len = n_elems * 4;
        } else {
            /* nbytes of a plain type is n_elems * esize (the parser) */
            if (n_elems > INT64_MAX / s->esize || t->n_elems > INT64_MAX / s->esize)
                goto too_large;
            if (t->nbytes != t->n_elems * s->esize) {
                char nb[GGUF_DIAG_NAME_MAX];
                gguf_buf_free(&omitted);
                return gguf_diag_set(diag, GGUF_E_RANGE, UINT64_MAX,
                                     "tensor '%s': %llu bytes for %llu elements",
                                     gguf_diag_name(in.name, in.name_len, nb),
                                     (unsigned long long)t->nbytes,
                                     (unsigned long long)t->n_elems);
            }
            s->len = n_elems * s->esize;
        }
        k++;
        continue;
too_large: {
            char nb[GGUF_DIAG_NAME_MAX];
            gguf_buf_free(&omitted);
            return gguf_diag_set(diag, GGUF_E_TOOBIG, UINT64_MAX,
                                 "tensor '%s': too large for model.safetensors",
                                 gguf_diag_name(in.name, in.name_len, nb));
        }
    }
    out->n_span = k;
    if (k)
        qsort(out->span, k, sizeof *out->span, by_size_name);

    struct gguf_buf *h = &out->hdr;
    gguf_buf_put(h, "\0\0\0\0\0\0\0\0{", 9);
    metadata(meta, &omitted, h);
    gguf_buf_free(&omitted);
    uint64_t at = 0;
    for (uint64_t i = 0; i < k && !h->oom; i++) {
        struct gguf_st_span *s = &out->span[i];
        const struct gguf_tensor *t = s->t;
        uint8_t es;
        if (s->len > (uint64_t)INT64_MAX - at) {
            char nb[GGUF_DIAG_NAME_MAX];
            return gguf_diag_set(diag, GGUF_E_TOOBIG, UINT64_MAX,
                                 "tensor '%s': model.safetensors would be too large",
                                 gguf_diag_name(s->name, s->name_len, nb));
        }
        gguf_buf_putc(h, ',');
        json_str(h, s->name, s->name_len);
        gguf_buf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[",
                        s->f32 ? "F32" : raw_dtype(t->type, &es));
        for (unsigned d = 0; d < s->n_dims; d++)
            gguf_buf_printf(h, "%s%llu", d ? "," : "",
                            (unsigned long long)(s->shape ? s->shape[d]
                                                          : t->ne[s->n_dims - 1 - d]));
        gguf_buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                        (unsigned long long)(at + s->len));
        s->start = at;
        at += s->len;
    }
    gguf_buf_putc(h, '}');
    /* a putc that cannot grow the buffer sets h->oom: stop there */
    while (h->len % align && gguf_buf_putc(h, ' '))
        ;
    if (h->oom)
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    if (at > (uint64_t)INT64_MAX - h->len)
        return gguf_diag_set(diag, GGUF_E_TOOBIG, UINT64_MAX,
                             "model.safetensors would be too large");
    uint64_t len = h->len - 8;
    for (unsigned b = 0; b < 8; b++)
        h->data[b] = (char)(len >> (8 * b));
    for (uint64_t i = 0; i < k; i++)
        out->span[i].start += h->len;
    out->size = h->len + at;
    return GGUF_OK;
}

void gguf_st_free(struct gguf_st_layout *l)
{
    gguf_buf_free(&l->hdr);
    free(l->span);
    memset(l, 0, sizeof *l);
}

uint64_t gguf_st_find(const struct gguf_st_layout *l, uint64_t pos)
{
    uint64_t lo = 0, hi = l->n_span;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (l->span[mid].start + l->span[mid].len <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

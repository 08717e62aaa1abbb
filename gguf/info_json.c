/* gguf/info_json.c — the summary of a GGUF file as JSON (info.json). */
#include "info.h"
#include "names.h"
#include "types.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128;

/* A JSON string of n bytes: '"' and '\' escaped, control characters as
 * \n, \r, \t or \u00XX, valid UTF-8 as it is, and each byte of an invalid
 * sequence (b >= 0x80) as the lone surrogate \udcXX (U+DC00 + b): what
 * Python's "surrogateescape" decoding makes of it, so that
 * s.encode("utf-8", "surrogateescape") gives the bytes back. */
static void json_str(struct gguf_buf *out, const char *s, size_t n)
{
    gguf_buf_putc(out, '"');
    size_t i = 0;
    while (i < n && !out->oom) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            /* one sequence: its length from the lead byte, then checked */
            size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 :
                         c >= 0xf0 && c <= 0xf4 ? 4 : 0;
            if (len && len <= n - i && gguf_utf8_valid(s + i, len, NULL) == len) {
                gguf_buf_put(out, s + i, len);
                i += len;
            } else {
                gguf_buf_printf(out, "\\udc%02x", c);
                i++;
            }
            continue;
        }
        /* a run of plain ASCII, then what ends it */
        size_t j = i;
        while (j < n && (unsigned char)s[j] >= 0x20 && (unsigned char)s[j] < 0x80 &&
               s[j] != '"' && s[j] != '\\')
            j++;
        gguf_buf_put(out, s + i, j - i);
        i = j;
        if (i >= n || (unsigned char)s[i] >= 0x80)
            continue;
        c = (unsigned char)s[i++];
        if (c == '"' || c == '\\') {
            gguf_buf_putc(out, '\\');
            gguf_buf_putc(out, (char)c);
        } else if (c == '\n') {
            gguf_buf_put(out, "\\n", 2);
        } else if (c == '\r') {
            gguf_buf_put(out, "\\r", 2);
        } else if (c == '\t') {
            gguf_buf_put(out, "\\t", 2);
        } else {
            gguf_buf_printf(out, "\\u%04x", c);
        }
    }
    gguf_buf_putc(out, '"');
}

static void put_u128(struct gguf_buf *out, u128 v)
{
    char d[48];
    size_t k = sizeof d;
    do {
        d[--k] = (char)('0' + (unsigned)(v % 10));
        v /= 10;
    } while (v);
    gguf_buf_put(out, d + k, sizeof d - k);
}

/* A scalar's value: numbers and bools as JSON numbers and literals (the
 * contract's text: value.h); a float that is not finite as its text in a
 * JSON string ("nan", "-inf", "nan(0x...)"); a string as a JSON string. */
static void json_value(const struct gguf_file *f, const struct gguf_kv *kv, struct gguf_buf *out,
                       struct gguf_buf *tmp)
{
    tmp->len = 0;
    if (gguf_render_kv(f, kv, tmp) != GGUF_OK) {
        out->oom = true;
        return;
    }
    size_t n = tmp->len && tmp->data[tmp->len - 1] == '\n' ? tmp->len - 1 : tmp->len;
    if (kv->type == GGUF_STRING) {
        json_str(out, tmp->data, n);
        return;
    }
    const char *t = tmp->data;
    bool number = n && ((t[0] >= '0' && t[0] <= '9') ||
                        (t[0] == '-' && n > 1 && t[1] >= '0' && t[1] <= '9'));
    bool literal = (n == 4 && !memcmp(t, "true", 4)) || (n == 5 && !memcmp(t, "false", 5));
    if (number || literal)
        gguf_buf_put(out, t, n);
    else
        json_str(out, t, n);
}

struct type_of {
    uint32_t type;
    uint64_t i;
};

static int by_type(const void *a, const void *b)
{
    const struct type_of *x = a, *y = b;
    if (x->type != y->type)
        return x->type < y->type ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Totals, and per type in the order of type ids: an index sorted by type,
 * one pair per tensor (as much memory as the parser's index holds per
 * tensor, and less). */
static void totals(const struct gguf_file *f, struct gguf_buf *out)
{
    uint64_t n = f->n_tensors;
    /* n was checked by the parser (every tensor has its bytes in the
     * header), and is checked again against the product */
    struct type_of *kt = n <= SIZE_MAX / sizeof *kt ? malloc((n ? n : 1) * sizeof *kt) : NULL;
    if (!kt) {
        out->oom = true;
        return;
    }
    u128 elems = 0, bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        kt[i] = (struct type_of){ f->tensors[i].type, i };
        elems += f->tensors[i].n_elems;
        bytes += f->tensors[i].nbytes;
    }
    qsort(kt, n, sizeof *kt, by_type);
    gguf_buf_printf(out, "  \"totals\": {\"tensors\": %llu, \"elements\": ",
                    (unsigned long long)n);
    put_u128(out, elems);
    gguf_buf_printf(out, ", \"bytes\": ");
    put_u128(out, bytes);
    gguf_buf_printf(out, ",\n    \"by_type\": {");
    for (uint64_t a = 0; a < n && !out->oom;) {
        uint64_t b = a;
        u128 e = 0, by = 0;
        for (; b < n && kt[b].type == kt[a].type; b++) {
            e += f->tensors[kt[b].i].n_elems;
            by += f->tensors[kt[b].i].nbytes;
        }
        gguf_buf_printf(out, "%s\n      \"%s\": {\"tensors\": %llu, \"elements\": ",
                        a ? "," : "", ggml_type_name_of(kt[a].type),
                        (unsigned long long)(b - a));
        put_u128(out, e);
        gguf_buf_printf(out, ", \"bytes\": ");
        put_u128(out, by);
        gguf_buf_putc(out, '}');
        a = b;
    }
    gguf_buf_printf(out, "%s}}", n ? "\n    " : "");
    free(kt);
}

enum gguf_err gguf_info_json(const struct gguf_file *f, struct gguf_buf *out)
{
    gguf_buf_printf(out, "{\n  \"version\": %u,\n  \"byte_order\": \"%s\",\n"
                    "  \"alignment\": %llu,\n  \"header_size\": %llu,\n"
                    "  \"data_offset\": %llu,\n  \"file_size\": %llu,\n",
                    f->version, f->enc.big_endian ? "big" : "little",
                    (unsigned long long)f->alignment, (unsigned long long)f->hdr_size,
                    (unsigned long long)f->data_off, (unsigned long long)f->file_size);

    struct gguf_buf name = { 0 }, type = { 0 }, tmp = { 0 };
    gguf_buf_printf(out, "  \"metadata\": [");
    for (uint64_t i = 0; i < f->n_kv && !out->oom; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        const char *key = (const char *)f->hdr + kv->key_off;
        struct gguf_typedesc td;
        name.len = type.len = 0;
        gguf_name_encode(key, kv->key_len, kv->dup, &name);
        gguf_kv_typedesc(f, kv, &td);
        gguf_typedesc_format(&td, &type);
        if (name.oom || type.oom) {
            out->oom = true;
            break;
        }
        gguf_buf_printf(out, "%s\n    {\"key\": ", i ? "," : "");
        json_str(out, key, kv->key_len);
        gguf_buf_printf(out, ", \"file\": ");
        json_str(out, name.data, name.len);
        gguf_buf_printf(out, ", \"type\": \"%.*s\"", (int)type.len, type.data);
        if (kv->dup > 1)
            gguf_buf_printf(out, ", \"occurrence\": %u", kv->dup);
        if (kv->type == GGUF_ARRAY) {
            /* "array[T]": T, the element type */
            gguf_buf_printf(out, ", \"element_type\": \"%.*s\", \"length\": %llu}",
                            (int)type.len - 7, type.data + 6, (unsigned long long)kv->count);
        } else {
            gguf_buf_printf(out, ", \"value\": ");
            json_value(f, kv, out, &tmp);
            gguf_buf_putc(out, '}');
        }
    }
    gguf_buf_printf(out, "%s],\n  \"tensors\": [", f->n_kv ? "\n  " : "");
    for (uint64_t i = 0; i < f->n_tensors && !out->oom; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const char *tn = (const char *)f->hdr + t->name_off;
        name.len = 0;
        if (!gguf_name_encode(tn, t->name_len, 1, &name)) {
            out->oom = true;
            break;
        }
        gguf_buf_printf(out, "%s\n    {\"name\": ", i ? "," : "");
        json_str(out, tn, t->name_len);
        gguf_buf_printf(out, ", \"file\": ");
        json_str(out, name.data, name.len);
        gguf_buf_printf(out, ", \"type\": \"%s\", \"shape\": [", ggml_type_name_of(t->type));
        for (unsigned d = t->n_dims; d-- > 0;)
            gguf_buf_printf(out, "%s%llu", d + 1 == t->n_dims ? "" : ", ",
                            (unsigned long long)t->ne[d]);
        gguf_buf_printf(out, "], \"offset\": %llu, \"bytes\": %llu, \"elements\": %llu}",
                        (unsigned long long)(f->data_off + t->offset),
                        (unsigned long long)t->nbytes, (unsigned long long)t->n_elems);
    }
    gguf_buf_printf(out, "%s],\n", f->n_tensors ? "\n  " : "");
    gguf_buf_free(&name);
    gguf_buf_free(&type);
    gguf_buf_free(&tmp);
    if (!out->oom)
        totals(f, out);
    gguf_buf_printf(out, ",\n  \"ggml_objections\": [");
    const char *p = f->notes;
    bool first = true;
    while (p && *p && !out->oom) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        gguf_buf_printf(out, "%s\n    ", first ? "" : ",");
        json_str(out, p, n);
        first = false;
        p += n + (nl ? 1 : 0);
    }
    gguf_buf_printf(out, "%s]\n}\n", first ? "" : "\n  ");
    return out->oom ? GGUF_E_NOMEM : GGUF_OK;
}

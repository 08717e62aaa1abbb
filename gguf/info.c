/* gguf/info.c — the human-readable summary of a GGUF file (like gguf-dump). */
#include "info.h"
#include "names.h"
#include "types.h"

#include <stdio.h>
#include <string.h>

#define SHORT_VALUE 72     /* bytes of a value shown before "..." */
#define SHORT_ELEMS 4      /* array elements shown */

/* Appends text with control characters escaped, cut at max bytes. */
static void put_short(struct gguf_buf *out, const char *s, size_t n, size_t max)
{
    size_t shown = 0;
    for (size_t i = 0; i < n && shown < max; i++, shown++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n')
            gguf_buf_put(out, "\\n", 2);
        else if (ch == '\r')
            gguf_buf_put(out, "\\r", 2);
        else if (ch == '\t')
            gguf_buf_put(out, "\\t", 2);
        else if (ch < 0x20 || ch == 0x7f)
            gguf_buf_printf(out, "\\x%02x", ch);
        else
            gguf_buf_putc(out, (char)ch);
    }
    if (shown < n)
        gguf_buf_put(out, "...", 3);
}

static void short_value(const struct gguf_file *f, const struct gguf_kv *kv,
                        struct gguf_buf *out)
{
    struct gguf_buf txt = { 0 };
    if (kv->type == GGUF_ARRAY) {
        uint64_t k = kv->count < SHORT_ELEMS ? kv->count : SHORT_ELEMS;
        gguf_render_value(&f->enc, kv->type, kv->elem_type, f->hdr + kv->val_off,
                          k, kv->val_size, &txt);
        gguf_buf_printf(out, "[%llu] ", (unsigned long long)kv->count);
        /* elements are one per line: show them comma-separated */
        size_t start = 0, shown = 0;
        for (size_t i = 0; i < txt.len; i++) {
            if (txt.data[i] != '\n')
                continue;
            if (shown++)
                gguf_buf_put(out, ", ", 2);
            if (kv->elem_type == GGUF_STRING)
                gguf_buf_putc(out, '"');
            put_short(out, txt.data + start, i - start, SHORT_VALUE / SHORT_ELEMS);
            if (kv->elem_type == GGUF_STRING)
                gguf_buf_putc(out, '"');
            start = i + 1;
        }
        if (kv->count > k)
            gguf_buf_put(out, ", ...", 5);
    } else {
        gguf_render_kv(f, kv, &txt);
        size_t n = txt.len && txt.data[txt.len - 1] == '\n' ? txt.len - 1 : txt.len;
        if (kv->type == GGUF_STRING)
            gguf_buf_putc(out, '"');
        put_short(out, txt.data, n, SHORT_VALUE);
        if (kv->type == GGUF_STRING)
            gguf_buf_putc(out, '"');
    }
    gguf_buf_free(&txt);
}

enum gguf_err gguf_info_render(const struct gguf_file *f, const char *path,
                               struct gguf_buf *out)
{
    gguf_buf_printf(out, "file:          %s\n", path);
    gguf_buf_printf(out, "GGUF version:  %u (%s-endian)\n", f->version,
                    f->enc.big_endian ? "big" : "little");
    if (f->enc.v1)
        gguf_buf_printf(out, "model.gguf:    served as GGUF version 3 (64-bit counts and "
                        "lengths, which ggml reads); this file stays version 1\n");
    gguf_buf_printf(out, "file size:     %llu bytes\n", (unsigned long long)f->file_size);
    gguf_buf_printf(out, "header size:   %llu bytes\n", (unsigned long long)f->hdr_size);
    gguf_buf_printf(out, "alignment:     %llu\n", (unsigned long long)f->alignment);
    gguf_buf_printf(out, "tensor data:   from byte %llu\n", (unsigned long long)f->data_off);
    gguf_buf_printf(out, "key/values:    %llu\n", (unsigned long long)f->n_kv);
    gguf_buf_printf(out, "tensors:       %llu\n", (unsigned long long)f->n_tensors);

    gguf_buf_printf(out, "\nkey/values (file name under meta/, type, value):\n");
    struct gguf_buf name = { 0 }, type = { 0 };
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        struct gguf_typedesc td;
        name.len = type.len = 0;
        gguf_name_encode((const char *)f->hdr + kv->key_off, kv->key_len, kv->dup, &name);
        gguf_kv_typedesc(f, kv, &td);
        gguf_typedesc_format(&td, &type);
        gguf_buf_printf(out, "  %5llu  %-40.*s %-14.*s ", (unsigned long long)i,
                        (int)name.len, name.data, (int)type.len, type.data);
        short_value(f, kv, out);
        if (kv->dup > 1)
            gguf_buf_printf(out, "   (duplicate key, occurrence %u)", kv->dup);
        gguf_buf_putc(out, '\n');
    }

    gguf_buf_printf(out, "\ntensors (name, type, shape in numpy order, offset "
                         "from data start, bytes):\n");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        name.len = 0;
        gguf_name_encode((const char *)f->hdr + t->name_off, t->name_len, 1, &name);
        char shape[128];
        size_t sl = 0;
        shape[0] = '\0';
        for (unsigned d = t->n_dims; d-- > 0;)
            sl += (size_t)snprintf(shape + sl, sizeof shape - sl, "%s%llu",
                                   sl ? " x " : "", (unsigned long long)t->ne[d]);
        if (t->n_dims == 0)
            snprintf(shape, sizeof shape, "scalar");
        gguf_buf_printf(out, "  %5llu  %-40.*s %-8s %-24s %12llu %12llu\n",
                        (unsigned long long)i, (int)name.len, name.data,
                        ggml_type_name_of(t->type), shape,
                        (unsigned long long)t->offset, (unsigned long long)t->nbytes);
    }
    gguf_buf_free(&name);
    gguf_buf_free(&type);

    if (f->notes) {
        gguf_buf_printf(out, "\nggml would object to:\n");
        const char *p = f->notes;
        while (*p) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            gguf_buf_printf(out, "  - %.*s\n", (int)n, p);
            p += n + (nl ? 1 : 0);
        }
    } else {
        gguf_buf_printf(out, "\nggml would object to: nothing\n");
    }
    return out->oom ? GGUF_E_NOMEM : GGUF_OK;
}

/*
 * gguf/value_type.c — value types: names, sizes, type descriptions
 * ("array[array[i32]]", see value.h).
 *
 * The array nesting limit follows parse.c: at most GGUF_MAX_NEST array
 * levels counting the outermost one, so a typedesc has at most
 * GGUF_MAX_NEST + 1 levels.
 */
#include "value.h"

#include <string.h>

static const char *const vtype_names[GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
    "array", "u64", "i64", "f64",
};

const char *gguf_vtype_name(unsigned t)
{
    return t < GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

unsigned gguf_vtype_size(unsigned t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* A typedesc is well formed when every level but the last is ARRAY. */
bool gguf_typedesc_valid(const struct gguf_typedesc *t)
{
    if (t->depth < 1 || t->depth > GGUF_MAX_NEST + 1)
        return false;
    for (unsigned i = 0; i < t->depth; i++) {
        bool last = i + 1 == t->depth;
        if (t->levels[i] >= GGUF_VTYPE_COUNT)
            return false;
        if ((t->levels[i] == GGUF_ARRAY) == last)
            return false;
    }
    return true;
}

bool gguf_typedesc_parse(const char *s, size_t len, struct gguf_typedesc *t)
{
    struct gguf_typedesc d = { 0 };
    size_t i = 0;
    while (len - i >= 6 && memcmp(s + i, "array[", 6) == 0) {
        if (d.depth == GGUF_MAX_NEST)
            return false;
        d.levels[d.depth++] = GGUF_ARRAY;
        i += 6;
    }
    /* the innermost name, then one ']' per "array[" */
    if (len < d.depth || len - d.depth < i)
        return false;
    size_t end = len - d.depth;
    for (size_t k = end; k < len; k++)
        if (s[k] != ']')
            return false;
    for (unsigned v = 0; v < GGUF_VTYPE_COUNT; v++) {
        if (v == GGUF_ARRAY)
            continue;   /* "array" alone names no complete type */
        size_t n = strlen(vtype_names[v]);
        if (n == end - i && memcmp(s + i, vtype_names[v], n) == 0) {
            d.levels[d.depth++] = (uint8_t)v;
            *t = d;
            return true;
        }
    }
    return false;
}

bool gguf_typedesc_format(const struct gguf_typedesc *t, struct gguf_buf *out)
{
    if (!gguf_typedesc_valid(t))
        return false;
    for (unsigned i = 0; i + 1 < t->depth; i++)
        gguf_buf_put(out, "array[", 6);
    const char *n = vtype_names[t->levels[t->depth - 1]];
    gguf_buf_put(out, n, strlen(n));
    for (unsigned i = 0; i + 1 < t->depth; i++)
        gguf_buf_putc(out, ']');
    return !out->oom;
}

void gguf_kv_typedesc(const struct gguf_file *f, const struct gguf_kv *kv,
                      struct gguf_typedesc *t)
{
    memset(t, 0, sizeof *t);
    t->levels[0] = kv->type < GGUF_VTYPE_COUNT ? kv->type : GGUF_U8;
    t->depth = 1;
    if (kv->type != GGUF_ARRAY)
        return;
    t->levels[t->depth++] = kv->elem_type < GGUF_VTYPE_COUNT ? kv->elem_type
                                                             : GGUF_U8;
    /* Walk down the first elements of nested arrays; bounds-checked even
     * though gguf_open validated the value. */
    const uint8_t *p = NULL;
    uint64_t rem = 0, n = kv->count;
    if (kv->val_off <= f->hdr_size && kv->val_size <= f->hdr_size - kv->val_off) {
        p = f->hdr + kv->val_off;
        rem = kv->val_size;
    }
    unsigned hw = 4 + gguf_count_size(&f->enc);
    while (t->levels[t->depth - 1] == GGUF_ARRAY) {
        if (t->depth == GGUF_MAX_NEST + 1) {   /* too deep: cannot happen */
            t->levels[t->depth - 1] = GGUF_U8;
            break;
        }
        if (n == 0 || rem < hw) {              /* no first element to look at */
            t->levels[t->depth++] = GGUF_U8;
            break;
        }
        uint32_t et = gguf_rd32(&f->enc, p);
        n = gguf_rd_count(&f->enc, p + 4);
        t->levels[t->depth++] = et < GGUF_VTYPE_COUNT ? (uint8_t)et : GGUF_U8;
        p += hw;
        rem -= hw;
    }
}

/* p points at a nested array's header (element type, count), size bytes
 * available; its element type must be t->levels[k], and so on below.
 * *used is set to the bytes the array takes. */
static bool nested_uniform(const struct gguf_enc *e, const uint8_t *p, uint64_t size,
                           const struct gguf_typedesc *t, unsigned k, uint64_t *used)
{
    unsigned hw = 4 + gguf_count_size(e), cw = gguf_count_size(e);
    if (k >= t->depth || size < hw)
        return false;
    uint32_t et = gguf_rd32(e, p);
    uint64_t n = gguf_rd_count(e, p + 4), off = hw;
    if (et != t->levels[k])
        return false;
    unsigned sz = gguf_vtype_size(et);
    if (sz) {
        if (n > (size - off) / sz)
            return false;
        off += n * sz;
    } else {
        for (uint64_t i = 0; i < n; i++) {
            uint64_t u;
            if (et == GGUF_STRING) {
                if (size - off < cw)
                    return false;
                u = gguf_rd_count(e, p + off);
                if (u > size - off - cw)
                    return false;
                u += cw;
            } else if (et != GGUF_ARRAY ||
                       !nested_uniform(e, p + off, size - off, t, k + 1, &u)) {
                return false;
            }
            off += u;
        }
    }
    *used = off;
    return true;
}

bool gguf_kv_uniform(const struct gguf_file *f, const struct gguf_kv *kv)
{
    if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_ARRAY)
        return true;
    if (kv->val_off > f->hdr_size || kv->val_size > f->hdr_size - kv->val_off)
        return false;
    struct gguf_typedesc t;
    gguf_kv_typedesc(f, kv, &t);
    const uint8_t *p = f->hdr + kv->val_off;
    uint64_t rem = kv->val_size;
    for (uint64_t i = 0; i < kv->count; i++) {
        uint64_t u;
        if (!nested_uniform(&f->enc, p, rem, &t, 2, &u))
            return false;
        p += u;
        rem -= u;
    }
    return true;
}

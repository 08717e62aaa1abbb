/*
 * gguf/value_render.c — metadata values as text (the form in value.h).
 *
 * Layout assumed for struct gguf_kv (agreed with gguf/parse.c):
 *   - scalar:  val_off at the value bytes, count = 1;
 *   - string:  val_off at the length field (u64, u32 for v1), count = 1;
 *   - array:   val_off at the first element (after element type and count),
 *              count = element count, elem_type set;
 *   - val_size = bytes from val_off to the end of the value.
 *
 * Choices value.h leaves open:
 *   - bool: byte 0 -> "false", 1 -> "true", any other byte -> its decimal
 *     value (parsing accepts decimals 0..255), so odd bytes round-trip.
 *   - nested arrays: each line is a JSON array, elements separated by ", "
 *     (as Python's json.dumps does); numbers as in the scalar form, so
 *     "nan", "inf" and "nan(0x1)" appear unquoted; bools as true/false (or
 *     the decimal byte); strings as JSON strings with \" \\ \n \r \t \b \f
 *     and \u00XX for other control bytes, every other byte as is.  Each
 *     inner array is rendered with its own element type, but parsed with the
 *     typedesc of the key (taken from the first element).
 *   - a string stored in the file that is not valid UTF-8 renders as its
 *     bytes but cannot be written back (writes must be valid UTF-8).
 *
 * Every read is bounds-checked against the size given, although gguf_open
 * validated the values: gguf_render_value also renders values that are
 * not in a gguf_file.
 */
#include "numfmt.h"
#include "value.h"

#include <stdio.h>
#include <string.h>

static void put_u64(struct gguf_buf *out, uint64_t v)
{
    char tmp[GGUF_FMT_MAX];
    gguf_buf_put(out, tmp, gguf_fmt_u64(v, tmp));
}

static void put_i64(struct gguf_buf *out, int64_t v)
{
    char tmp[GGUF_FMT_MAX];
    gguf_buf_put(out, tmp, gguf_fmt_i64(v, tmp));
}

/* Text of one scalar of type t at p (gguf_vtype_size(t) bytes available). */
static void render_scalar(const struct gguf_enc *e, unsigned t,
                          const uint8_t *p, struct gguf_buf *out)
{
    char tmp[64];
    switch (t) {
    case GGUF_U8: put_u64(out, p[0]); break;
    case GGUF_I8: put_i64(out, (int8_t)p[0]); break;
    case GGUF_U16: put_u64(out, gguf_rd16(e, p)); break;
    case GGUF_I16: put_i64(out, (int16_t)gguf_rd16(e, p)); break;
    case GGUF_U32: put_u64(out, gguf_rd32(e, p)); break;
    case GGUF_I32: put_i64(out, (int32_t)gguf_rd32(e, p)); break;
    case GGUF_U64: put_u64(out, gguf_rd64(e, p)); break;
    case GGUF_I64: put_i64(out, (int64_t)gguf_rd64(e, p)); break;
    case GGUF_BOOL:
        if (p[0] == 0)
            gguf_buf_put(out, "false", 5);
        else if (p[0] == 1)
            gguf_buf_put(out, "true", 4);
        else
            put_u64(out, p[0]);   /* keeps odd bytes round-tripping */
        break;
    case GGUF_F32: {
        uint32_t b = gguf_rd32(e, p);
        float v;
        memcpy(&v, &b, 4);
        gguf_buf_put(out, tmp, gguf_fmt_f32(v, tmp, sizeof tmp));
        break;
    }
    case GGUF_F64: {
        uint64_t b = gguf_rd64(e, p);
        double v;
        memcpy(&v, &b, 8);
        gguf_buf_put(out, tmp, gguf_fmt_f64(v, tmp, sizeof tmp));
        break;
    }
    default: break;
    }
}

/* ---- rendering: strings and arrays ------------------------------------------ */

/* An element of a flat string array: '\' -> "\\", LF -> "\n", CR -> "\r". */
static void put_escaped_line(struct gguf_buf *out, const uint8_t *s, uint64_t n)
{
    uint64_t run = 0;   /* start of the bytes not yet copied */
    for (uint64_t i = 0; i < n; i++) {
        const char *esc;
        switch (s[i]) {
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        default: continue;
        }
        gguf_buf_put(out, s + run, i - run);
        gguf_buf_put(out, esc, 2);
        run = i + 1;
    }
    gguf_buf_put(out, s + run, n - run);
}

static void put_json_string(struct gguf_buf *out, const uint8_t *s, uint64_t n)
{
    gguf_buf_putc(out, '"');
    uint64_t run = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        gguf_buf_put(out, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': gguf_buf_put(out, "\\\"", 2); break;
        case '\\': gguf_buf_put(out, "\\\\", 2); break;
        case '\n': gguf_buf_put(out, "\\n", 2); break;
        case '\r': gguf_buf_put(out, "\\r", 2); break;
        case '\t': gguf_buf_put(out, "\\t", 2); break;
        case '\b': gguf_buf_put(out, "\\b", 2); break;
        case '\f': gguf_buf_put(out, "\\f", 2); break;
        default: gguf_buf_printf(out, "\\u%04x", c); break;
        }
    }
    gguf_buf_put(out, s + run, n - run);
    gguf_buf_putc(out, '"');
}

/* Reads a string header at p with size bytes available: *n = its length.
 * Returns the header width, or 0 if it or the bytes do not fit. */
static unsigned str_at(const struct gguf_enc *e, const uint8_t *p,
                       uint64_t size, uint64_t *n)
{
    unsigned w = gguf_count_size(e);
    if (size < w)
        return 0;
    *n = gguf_rd_count(e, p);
    return *n <= size - w ? w : 0;
}

/*
 * A nested array as JSON.  p points at its element type field, size bytes
 * available; level is the array level of this array (the outermost is 1).
 * *used is set to the bytes it takes.
 */
static enum gguf_err render_json(const struct gguf_enc *e, const uint8_t *p,
                                 uint64_t size, unsigned level,
                                 struct gguf_buf *out, uint64_t *used)
{
    unsigned hw = 4 + gguf_count_size(e);
    if (level > GGUF_MAX_NEST)
        return GGUF_E_RANGE;
    if (size < hw)
        return GGUF_E_TRUNCATED;
    uint32_t et = gguf_rd32(e, p);
    uint64_t n = gguf_rd_count(e, p + 4);
    uint64_t off = hw;
    unsigned sz = gguf_vtype_size(et);
    if (et >= GGUF_VTYPE_COUNT)
        return GGUF_E_TYPE;
    if (sz && n > (size - off) / sz)
        return GGUF_E_TRUNCATED;
    gguf_buf_putc(out, '[');
    for (uint64_t i = 0; i < n; i++) {
        if (out->oom)
            return GGUF_E_NOMEM;
        if (i)
            gguf_buf_put(out, ", ", 2);
        if (sz) {
            render_scalar(e, et, p + off, out);
            off += sz;
        } else if (et == GGUF_STRING) {
            uint64_t len;
            unsigned w = str_at(e, p + off, size - off, &len);
            if (!w)
                return GGUF_E_TRUNCATED;
            put_json_string(out, p + off + w, len);
            off += w + len;
        } else {
            uint64_t u;
            enum gguf_err err = render_json(e, p + off, size - off, level + 1,
                                            out, &u);
            if (err)
                return err;
            off += u;
        }
    }
    gguf_buf_putc(out, ']');
    *used = off;
    return out->oom ? GGUF_E_NOMEM : GGUF_OK;
}

static enum gguf_err render_array(const struct gguf_enc *e, unsigned et,
                                  const uint8_t *p, uint64_t count,
                                  uint64_t size, struct gguf_buf *out)
{
    unsigned sz = gguf_vtype_size(et);
    if (sz) {
        if (count > size / sz)
            return GGUF_E_TRUNCATED;
        for (uint64_t i = 0; i < count && !out->oom; i++) {
            render_scalar(e, et, p + i * sz, out);
            gguf_buf_putc(out, '\n');
        }
        return out->oom ? GGUF_E_NOMEM : GGUF_OK;
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (out->oom)
            return GGUF_E_NOMEM;
        if (et == GGUF_STRING) {
            uint64_t len;
            unsigned w = str_at(e, p + off, size - off, &len);
            if (!w)
                return GGUF_E_TRUNCATED;
            put_escaped_line(out, p + off + w, len);
            off += w + len;
        } else if (et == GGUF_ARRAY) {
            uint64_t u;
            enum gguf_err err = render_json(e, p + off, size - off, 2, out, &u);
            if (err)
                return err;
            off += u;
        } else {
            return GGUF_E_TYPE;
        }
        gguf_buf_putc(out, '\n');
    }
    return out->oom ? GGUF_E_NOMEM : GGUF_OK;
}

enum gguf_err gguf_render_value(const struct gguf_enc *e, uint8_t type,
                                uint8_t elem_type, const uint8_t *val,
                                uint64_t count, uint64_t size,
                                struct gguf_buf *out)
{
    size_t start = out->len;
    enum gguf_err err = GGUF_OK;
    if (out->oom)
        return GGUF_E_NOMEM;
    if (type == GGUF_ARRAY) {
        err = render_array(e, elem_type, val, count, size, out);
    } else if (type == GGUF_STRING) {
        uint64_t len;
        unsigned w = str_at(e, val, size, &len);
        if (!w) {
            err = GGUF_E_TRUNCATED;
        } else {
            gguf_buf_put(out, val + w, len);
            gguf_buf_putc(out, '\n');
        }
    } else if (gguf_vtype_size(type)) {
        if (size < gguf_vtype_size(type)) {
            err = GGUF_E_TRUNCATED;
        } else {
            render_scalar(e, type, val, out);
            gguf_buf_putc(out, '\n');
        }
    } else {
        err = GGUF_E_TYPE;
    }
    if (!err && out->oom)
        err = GGUF_E_NOMEM;
    if (err)
        out->len = start;
    return err;
}

enum gguf_err gguf_render_kv(const struct gguf_file *f,
                             const struct gguf_kv *kv, struct gguf_buf *out)
{
    if (kv->val_off > f->hdr_size || kv->val_size > f->hdr_size - kv->val_off)
        return GGUF_E_TRUNCATED;
    return gguf_render_value(&f->enc, kv->type, kv->elem_type,
                             f->hdr + kv->val_off, kv->count, kv->val_size, out);
}

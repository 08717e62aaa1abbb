/*
 * tests/fuzz/value.c — libFuzzer harness for the value text parser
 * (gguf_parse_value) and renderer (gguf_render_value), for every type.
 *
 * Input: byte 0 picks the type and encoding, the rest is the text (placed
 * before a guard page, so any read past it faults):
 *
 *   bits 0-3  the innermost value type: (b & 15) % 12 indexes the twelve
 *             non-array types (u8 i8 u16 i16 u32 i32 f32 bool string u64
 *             i64 f64)
 *   bits 4-5  how many array levels wrap it (0: a scalar, 1: array[T],
 *             2: array[array[T]], 3: array[array[array[T]]])
 *   bit 6     big-endian encoding
 *   bit 7     version 1 encoding (32-bit counts and lengths)
 *
 * Property: if the text parses, its encoding renders (without error) to a
 * text that parses again to exactly the same bytes, and renders again to
 * the same text.  If it does not parse, the message is non-empty and the
 * error offset lies within the text.
 */
#include "fuzz_common.h"

#include "gguf/value.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t base_types[12] = {
    GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16, GGUF_U32, GGUF_I32, GGUF_F32,
    GGUF_BOOL, GGUF_STRING, GGUF_U64, GGUF_I64, GGUF_F64,
};

/* Renders an encoding of type td (as gguf_parse_value produced it). */
static enum gguf_err render_bin(const struct gguf_enc *e, const struct gguf_typedesc *td,
                                const uint8_t *bin, size_t n, struct gguf_buf *out)
{
    if (td->depth == 1)
        return gguf_render_value(e, td->levels[0], 0, bin, 1, n, out);
    size_t cs = e->v1 ? 4 : 8;
    CHECK(n >= 4 + cs, "array encoding of %zu bytes", n);
    uint32_t et = gguf_rd32(e, bin);
    uint64_t count = e->v1 ? gguf_rd32(e, bin + 4) : gguf_rd64(e, bin + 4);
    CHECK(et == td->levels[1], "element type %u, expected %u", et, td->levels[1]);
    return gguf_render_value(e, GGUF_ARRAY, (uint8_t)et, bin + 4 + cs, count,
                             n - 4 - cs, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    struct gguf_typedesc td = { 0 };
    unsigned arrays = (sel >> 4) & 3;
    for (unsigned i = 0; i < arrays; i++)
        td.levels[td.depth++] = GGUF_ARRAY;
    td.levels[td.depth++] = base_types[(sel & 15) % 12];
    struct gguf_enc enc = { .big_endian = (sel & 0x40) != 0, .v1 = (sel & 0x80) != 0 };

    struct guarded g = guarded_copy(data + 1, size - 1);
    const char *text = (const char *)g.p;
    size_t len = size - 1;

    struct gguf_buf b1 = { 0 }, t1 = { 0 }, b2 = { 0 }, t2 = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_parse_value(&enc, &td, text, len, &b1, &d);
    if (e != GGUF_OK) {
        CHECK(e == GGUF_E_SYNTAX || e == GGUF_E_RANGE || e == GGUF_E_NOMEM,
              "parse_value error code %d", e);
        CHECK(b1.len == 0, "output changed on error");
        CHECK(d.msg[0] != '\0' && memchr(d.msg, '\0', sizeof d.msg),
              "empty or unterminated message");
        CHECK(d.offset <= len, "error offset %llu past the %zu bytes of text",
              (unsigned long long)d.offset, len);
        goto out;
    }
    e = render_bin(&enc, &td, (const uint8_t *)b1.data, b1.len, &t1);
    CHECK(e == GGUF_OK, "parsed value does not render: error %d", e);
    e = gguf_parse_value(&enc, &td, t1.data ? t1.data : "", t1.len, &b2, &d);
    CHECK(e == GGUF_OK, "rendered text does not parse back: %s (at %llu) in \"%.*s\"",
          d.msg, (unsigned long long)d.offset, (int)(t1.len > 200 ? 200 : t1.len),
          t1.data ? t1.data : "");
    CHECK(b1.len == b2.len && memcmp(b1.data, b2.data, b1.len) == 0,
          "text -> bytes -> text -> bytes changed the bytes (%zu vs %zu bytes)",
          b1.len, b2.len);
    e = render_bin(&enc, &td, (const uint8_t *)b2.data, b2.len, &t2);
    CHECK(e == GGUF_OK && t1.len == t2.len &&
          (t1.len == 0 || memcmp(t1.data, t2.data, t1.len) == 0),
          "rendering is not stable");
out:
    gguf_buf_free(&b1);
    gguf_buf_free(&t1);
    gguf_buf_free(&b2);
    gguf_buf_free(&t2);
    guarded_free(&g);
    return 0;
}

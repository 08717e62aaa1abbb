/*
 * gguf/value.h — metadata values as text, and text back into values.
 *
 * The text form is the one users read and write through meta/KEY files
 * (see README "Metadata values as text"):
 *
 *   u8 … u64, i8 … i64   decimal, then "\n"
 *   f32, f64             shortest text that reads back to the same bits
 *                        ("1e-06", "10000", "-0", "nan", "-nan", "inf");
 *                        a NaN with a payload other than the default quiet
 *                        NaN is written "nan(0xPAYLOAD)" (mantissa bits)
 *   bool                 "true" / "false" (a stored byte other than 0 or 1
 *                        is rendered as its decimal value so it round-trips)
 *   string               the bytes, then "\n"
 *   array                one element per line, each followed by "\n";
 *                        string elements escape '\' as "\\", newline as
 *                        "\n" and CR as "\r"; an empty array is empty text;
 *                        nested arrays are one JSON array per line (strings
 *                        as JSON strings, numbers as above)
 *
 * Rendering a value and parsing the text back with the same type gives the
 * same bytes, bit for bit.
 *
 * Encoded values ("bin") are the bytes that follow the value type field in
 * a GGUF key/value record, in the byte order and count width of a given
 * struct gguf_enc: for a scalar its bytes; for a string its length then
 * bytes; for an array its element type (u32), count, then the elements.
 *
 * Implemented by value_type.c (type names and descriptions),
 * value_render.c (value -> text) and value_parse.c (text -> value), with
 * numbers formatted by numfmt.h.
 */
#ifndef GGUF_VALUE_H
#define GGUF_VALUE_H

#include "buf.h"
#include "gguf.h"
#include "numfmt.h"

/*
 * A value type, possibly nested: levels[0] is the outer type; for each
 * GGUF_ARRAY level the next entry is its element type.  "array[array[i32]]"
 * is {ARRAY, ARRAY, I32}, depth 3.  A scalar is depth 1.
 */
struct gguf_typedesc {
    uint8_t depth;
    uint8_t levels[GGUF_MAX_NEST + 1];
};

/* true if t is well formed: depth 1 to GGUF_MAX_NEST + 1, every level but
 * the last GGUF_ARRAY, the last a known non-array type. */
bool gguf_typedesc_valid(const struct gguf_typedesc *t);
/* "array[array[i32]]" -> typedesc; false if the text is not a type name. */
bool gguf_typedesc_parse(const char *s, size_t len, struct gguf_typedesc *t);
/* typedesc -> "array[array[i32]]" (appends, no NUL). */
bool gguf_typedesc_format(const struct gguf_typedesc *t, struct gguf_buf *out);
/* The type of a key/value in the file; nested array element types are taken
 * from the first element (an empty nested array reports "array[array[u8]]"). */
void gguf_kv_typedesc(const struct gguf_file *f, const struct gguf_kv *kv,
                      struct gguf_typedesc *t);
/* false for a nested array whose arrays at one level do not all declare the
 * element type gguf_kv_typedesc reports (say [[true], [0, 0]]: bool, then
 * u8).  Its text cannot be parsed back to the same value (parsing uses one
 * type per level), so such a value is shown but not edited as text. */
bool gguf_kv_uniform(const struct gguf_file *f, const struct gguf_kv *kv);

/*
 * Appends the text of the value of kv to out.  Returns GGUF_OK, or
 * GGUF_E_NOMEM.  The value was validated by gguf_open, so this cannot fail
 * otherwise.
 */
enum gguf_err gguf_render_kv(const struct gguf_file *f,
                             const struct gguf_kv *kv, struct gguf_buf *out);

/*
 * Renders an encoded value: type/elem_type as in struct gguf_kv, val points
 * at the value (for arrays at the first element), count elements (1 for a
 * scalar), size bytes available from val.  Used for values that are not in
 * a gguf_file (edits).  Every read stays within size: a value that does
 * not fit gives GGUF_E_TRUNCATED, an unknown type GGUF_E_TYPE, arrays
 * nested deeper than GGUF_MAX_NEST GGUF_E_RANGE; out is then unchanged.
 */
enum gguf_err gguf_render_value(const struct gguf_enc *e, uint8_t type,
                                uint8_t elem_type, const uint8_t *val,
                                uint64_t count, uint64_t size,
                                struct gguf_buf *out);

/*
 * Parses text (len bytes, need not be NUL-terminated) as a value of type t
 * and appends its encoding (see "bin" above) in encoding e to out.
 * Accepts exactly the text form above, plus:
 *   - integers: optional leading '+'/'-', range-checked for the type;
 *   - floats: any strtod-style number ("1e3", "0x1p-3", "inf", "nan");
 *   - bool: "true", "false", "1", "0" (and decimals 0..255, see above);
 *   - string: one trailing "\n" is removed if present; must be valid UTF-8;
 *   - scalars: one trailing "\n" is allowed;
 *   - arrays: elements separated by "\n", a final "\n" optional.
 * On failure returns GGUF_E_SYNTAX (does not parse) or GGUF_E_RANGE (out
 * of range), out is unchanged, and diag->msg says why and diag->offset is
 * the byte offset in text where the problem is.
 */
enum gguf_err gguf_parse_value(const struct gguf_enc *e,
                               const struct gguf_typedesc *t,
                               const char *text, size_t len,
                               struct gguf_buf *out, struct gguf_diag *diag);

/*
 * UTF-8 as string values must be: the length of the longest prefix of
 * s[0..n) made of whole valid sequences (no overlongs, no surrogates,
 * nothing above U+10FFFF), n if s is valid.  If truncated is not NULL it
 * tells whether what ends the prefix is a sequence cut off by the end of s
 * and valid so far (more bytes may complete it: a write in progress).
 */
size_t gguf_utf8_valid(const char *s, size_t n, bool *truncated);

#endif

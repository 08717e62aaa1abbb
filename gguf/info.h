/*
 * gguf/info.h — the human-readable summary shown as MOUNTPOINT/info and by
 * `gguf-dump FILE`: header fields, every key with its type and a short
 * value, every tensor with type, shape, offset and size, and what ggml
 * would object to.
 */
#ifndef GGUF_INFO_H
#define GGUF_INFO_H

#include "value.h"

/* Appends the summary of f to out; path is shown in the first line. */
enum gguf_err gguf_info_render(const struct gguf_file *f, const char *path,
                               struct gguf_buf *out);

/* Appends the summary of f as one JSON object (info.json): version, byte
 * order, alignment, header size, data offset, file size; every key (its
 * bytes, file name under meta/, type as in user.gguf.type, and the value
 * of a scalar or string, or an array's element type and length); every
 * tensor in file order (name, file name, type, shape in numpy order,
 * absolute offset, bytes, elements); totals, also per type; what ggml
 * would object to.  Strings are JSON strings; bytes that are not UTF-8 are
 * escaped one by one as lone surrogates \udcXX (U+DC00 + the byte: Python's
 * "surrogateescape"); a float that is not finite is its text as a string
 * ("nan", "-inf", "nan(0x...)").  Its size follows the header's. */
enum gguf_err gguf_info_json(const struct gguf_file *f, struct gguf_buf *out);

#endif

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

#endif

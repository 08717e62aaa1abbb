/*
 * gguf/parse_impl.h — shared between the parser's two files (parse.c reads
 * the records, layout.c checks where tensor data lies).  Not for users of
 * the library.
 */
#ifndef GGUF_PARSE_IMPL_H
#define GGUF_PARSE_IMPL_H

#include "gguf.h"

/* Appends a line to the '\n'-separated notes (gguf_file.notes): an
 * objection ggml would raise.  At most 32 are kept; losing one to an
 * allocation failure is not an error (notes are advisory). */
void gguf_note(char **notes, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Sizes tensors of unknown types and checks every tensor's byte range
 * (inside the file, no overlap), noting what ggml would object to
 * (alignment, order).  f is complete but for that; GGUF_OK or an error
 * with d filled. */
enum gguf_err gguf_layout_check(struct gguf_file *f, struct gguf_diag *d,
                                char **notes);

#endif

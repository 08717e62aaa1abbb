/*
 * gguf/buf.h — a growable byte buffer.
 *
 * Everything gguf/ produces (rendered text, encoded values, new headers,
 * summaries) is appended to a struct gguf_buf.  Appends are amortised O(1)
 * (the capacity doubles), and an allocation failure is sticky: once a
 * buffer could not grow, oom is set, every later append does nothing and
 * returns false, and the caller checks oom once at the end instead of after
 * every append.
 *
 * Zero-initialise a buffer ({ 0 }) before its first use; release it with
 * gguf_buf_free.  data is not NUL-terminated (append a '\0' when a C string
 * is wanted); data is NULL until something was appended.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_BUF_H
#define GGUF_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct gguf_buf {
    char *data;
    size_t len, cap;
    bool oom;             /* an append failed: the contents are incomplete */
};

/* Frees data and resets the buffer to its zero state (oom cleared). */
void gguf_buf_free(struct gguf_buf *b);

/* Appends n bytes from p (p may be NULL when n is 0).  false on oom. */
bool gguf_buf_put(struct gguf_buf *b, const void *p, size_t n);

/* Makes room for n more bytes at once (appends of up to n then do not
 * move data).  false on oom. */
bool gguf_buf_reserve(struct gguf_buf *b, size_t n);

/* Appends n zero bytes.  false on oom. */
bool gguf_buf_zeros(struct gguf_buf *b, size_t n);

/* Appends one byte.  false on oom. */
bool gguf_buf_putc(struct gguf_buf *b, char c);

/* Appends printf-formatted text (no NUL).  false on oom or a bad format. */
bool gguf_buf_printf(struct gguf_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Small strings, malloc'd (NULL when out of memory; malloc rather than
 * strdup, so that tests that wrap malloc and free see them): the n bytes at s,
 * NUL bytes among them copied as they are, and a NUL after them; a and b
 * one after the other. */
char *gguf_str_dup_n(const char *s, size_t n);
char *gguf_str_concat(const char *a, const char *b);

#endif

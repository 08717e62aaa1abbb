/* gguf/buf.c — a growable byte buffer (see buf.h). */
#include "buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gguf_buf_free(struct gguf_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}

/* Makes room for n more bytes (plus a NUL that printf may write). */
static bool buf_reserve(struct gguf_buf *b, size_t n)
{
    if (b->oom)
        return false;
    if (b->cap - b->len > n)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len <= n) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return false;
        }
        cap *= 2;   /* geometric growth: appends are amortised O(1) */
    }
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

bool gguf_buf_put(struct gguf_buf *b, const void *p, size_t n)
{
    if (!buf_reserve(b, n))
        return false;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return true;
}

bool gguf_buf_reserve(struct gguf_buf *b, size_t n)
{
    return buf_reserve(b, n);
}

bool gguf_buf_zeros(struct gguf_buf *b, size_t n)
{
    if (!buf_reserve(b, n))
        return false;
    memset(b->data + b->len, 0, n);
    b->len += n;
    return true;
}

bool gguf_buf_putc(struct gguf_buf *b, char c)
{
    if (!buf_reserve(b, 1))
        return false;
    b->data[b->len++] = c;
    return true;
}

bool gguf_buf_printf(struct gguf_buf *b, const char *fmt, ...)
{
    if (!buf_reserve(b, 64))
        return false;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return false;
    if ((size_t)n >= b->cap - b->len) {
        if (!buf_reserve(b, (size_t)n))
            return false;
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
    return true;
}

char *gguf_str_dup_n(const char *s, size_t n)
{
    char *p = n < SIZE_MAX ? malloc(n + 1) : NULL;
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

char *gguf_str_concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

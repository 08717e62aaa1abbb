/* gguf/diag.c — error codes, diagnostics and the one-line message (diag.h). */
#include "diag.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *gguf_strerror(enum gguf_err e)
{
    switch (e) {
    case GGUF_OK: return "success";
    case GGUF_E_IO: return "read error";
    case GGUF_E_MAGIC: return "not a GGUF file";
    case GGUF_E_VERSION: return "unsupported GGUF version";
    case GGUF_E_TRUNCATED: return "file truncated";
    case GGUF_E_RANGE: return "value out of range";
    case GGUF_E_TYPE: return "unknown type";
    case GGUF_E_DUP: return "duplicate name";
    case GGUF_E_NOMEM: return "out of memory";
    case GGUF_E_SYNTAX: return "syntax error";
    case GGUF_E_INVAL: return "invalid argument";
    case GGUF_E_PERM: return "not allowed";
    case GGUF_E_NOENT: return "no such key or file";
    case GGUF_E_EXIST: return "already exists";
    case GGUF_E_INTERRUPTED: return "an interrupted edit must be rolled back";
    case GGUF_E_TOOBIG: return "too large";
    }
    return "unknown error";
}

size_t gguf_diag_format(const struct gguf_diag *d, const char *name,
                        char *out, size_t cap)
{
    char at[48] = "";
    if (d->offset != UINT64_MAX)
        snprintf(at, sizeof at, " (at byte offset %llu)",
                 (unsigned long long)d->offset);
    int n = snprintf(out, cap, "%s%s%.*s%s", name ? name : "", name ? ": " : "",
                     (int)sizeof d->msg, d->msg, at);
    return n < 0 ? 0 : (size_t)n;
}

enum gguf_err gguf_diag_set(struct gguf_diag *d, enum gguf_err e, uint64_t offset,
                            const char *fmt, ...)
{
    if (!d)
        return e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    d->offset = offset;
    return e;
}

const char *gguf_diag_name(const void *name, uint64_t len,
                           char buf[GGUF_DIAG_NAME_MAX])
{
    const unsigned char *p = name;
    uint64_t k = len > 60 ? 60 : len, i;
    for (i = 0; i < k; i++)
        buf[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? (char)p[i] : '?';
    if (len > k) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

int gguf_err_errno(enum gguf_err e)
{
    switch (e) {
    case GGUF_OK: return 0;
    case GGUF_E_IO: case GGUF_E_INTERRUPTED: return EIO;
    case GGUF_E_NOMEM: return ENOMEM;
    case GGUF_E_PERM: return EPERM;
    case GGUF_E_NOENT: return ENOENT;
    case GGUF_E_EXIST: return EEXIST;
    case GGUF_E_TOOBIG: return EFBIG;
    default: return EINVAL;
    }
}

int gguf_err_errno_made(enum gguf_err e)
{
    switch (e) {
    case GGUF_OK: case GGUF_E_NOMEM: case GGUF_E_TOOBIG: return gguf_err_errno(e);
    default: return EIO;
    }
}

/*
 * gguf/diag.h — errors: codes, diagnostics, and the one-line message.
 *
 * Every call of gguf/ that can fail returns an enum gguf_err and, where the
 * caller passes one, fills a struct gguf_diag: a message that names what is
 * wrong (the key, tensor, shard or step concerned, and the bad value) and
 * the byte offset it applies to.  That is the only error convention here:
 * no errno (except the byte-source seam's read, gguf/source.h), no
 * printing.  The FUSE layer turns codes into errno at one edge (the table
 * below) and a failed mount into one line made by gguf_diag_format.
 */
#ifndef GGUF_DIAG_H
#define GGUF_DIAG_H

#include <stddef.h>
#include <stdint.h>

/*
 * Error codes.  Numbers are stable: new codes are added at the end.  The
 * right column is the errno each maps to at the FUSE edge (fs/ maps them
 * in one place).  A failed gguf_commit (gguf/commit.h) is EIO whatever its
 * code: the write did not happen and the model is the old version.
 */
enum gguf_err {
    GGUF_OK = 0,
    GGUF_E_IO = 1,          /* a read or write failed                   EIO    */
    GGUF_E_MAGIC = 2,       /* not a GGUF file                          EINVAL */
    GGUF_E_VERSION = 3,     /* unsupported GGUF version                 EINVAL */
    GGUF_E_TRUNCATED = 4,   /* a field runs past the end of the file    EINVAL */
    GGUF_E_RANGE = 5,       /* a count, length or offset is impossible;
                               (text) a number out of range for its type
                                                                        EINVAL */
    GGUF_E_TYPE = 6,        /* unknown value type                       EINVAL */
    GGUF_E_DUP = 7,         /* duplicate tensor name                    EINVAL */
    GGUF_E_NOMEM = 8,       /* out of memory                            ENOMEM */
    GGUF_E_SYNTAX = 9,      /* (text) the text does not parse           EINVAL */
    GGUF_E_INVAL = 10,      /* a malformed argument, or an edit that
                               cannot be made (bad key name, bad value) EINVAL */
    GGUF_E_PERM = 11,       /* not allowed: general.alignment cannot be
                               changed, created, deleted or renamed     EPERM  */
    GGUF_E_NOENT = 12,      /* no such key; no such file                ENOENT */
    GGUF_E_EXIST = 13,      /* a key of that name exists                EEXIST */
    GGUF_E_INTERRUPTED = 14,/* an interrupted edit must be rolled back
                               (gguf_recover) before the model is read  EIO    */
    GGUF_E_TOOBIG = 15,     /* what would be made is too large (a file
                               past 2^63 bytes: model.safetensors)      EFBIG  */
};

/* What went wrong, filled by the call that returned the error. */
struct gguf_diag {
    char msg[256];        /* one line, NUL-terminated, no final period */
    uint64_t offset;      /* byte offset in the file (or, for text being
                             parsed, in the text), or UINT64_MAX */
};

/* A short generic description of e ("not a GGUF file"). */
const char *gguf_strerror(enum gguf_err e);

/* The errno of e, as the table above gives it (0 for GGUF_OK): the one
 * place the codes become errno, for fs/ and the tools.  Every errno is
 * positive, in gguf/, cache/ and fs/ alike; only the byte source's read
 * (gguf/source.h: a count, or a negative errno, as read(2) and the kernel
 * have it) carries a sign. */
int gguf_err_errno(enum gguf_err e);

/* The errno of e where gguffs makes a file's bytes from what it has read
 * (info.json of a merged header, info): not the caller's argument being
 * wrong but the data, so every code is EIO but for GGUF_OK (0),
 * GGUF_E_NOMEM (ENOMEM) and GGUF_E_TOOBIG (EFBIG). */
int gguf_err_errno_made(enum gguf_err e);

/*
 * Writes the one-line form of d into out (cap bytes, NUL-terminated,
 * truncated to fit; no newline):
 *
 *     NAME: <msg> (at byte offset N)
 *
 * without "NAME: " when name is NULL and without " (at byte offset N)" when
 * d->offset is UINT64_MAX.  Returns the length of the whole line (as
 * snprintf does: cap or more means it was cut).  A mount prefixes the
 * program name: "gguffs: MODEL.gguf: <msg> (at byte offset N)".
 */
size_t gguf_diag_format(const struct gguf_diag *d, const char *name,
                        char *out, size_t cap);

/* ---- for writing diagnostics (used across gguf/) ------------------------ */

/* Fills d, when d is not NULL, with the printf-formatted message and
 * offset; returns e, so that "return gguf_diag_set(d, GGUF_E_RANGE, off,
 * ...);" reports and fails in one statement. */
enum gguf_err gguf_diag_set(struct gguf_diag *d, enum gguf_err e, uint64_t offset,
                            const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A key or tensor name as messages show it, in buf: at most 60 bytes
 * (then "..."), bytes outside printable ASCII as '?'.  Returns buf. */
#define GGUF_DIAG_NAME_MAX 72
const char *gguf_diag_name(const void *name, uint64_t len,
                           char buf[GGUF_DIAG_NAME_MAX]);

#endif

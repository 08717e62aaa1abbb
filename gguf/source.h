/*
 * gguf/source.h — where a model's bytes come from.
 *
 * Everything that reads a model — the parser, raw and f32 reads, model.gguf,
 * opening the shards of a split model, the copy made by a rewriting edit —
 * reads through a source.  A local file is one kind (gguf_source_file); a
 * remote object read by HTTP range requests is another.  Readers do not know
 * which kind they read, with one exception: a source may offer a file
 * descriptor that holds the same bytes at the same offsets, so that callers
 * can move bytes without copying them (splice, copy_file_range).
 *
 * Promises of every source:
 *   - size and identity are fixed when it is opened.  The identity names
 *     one version of the bytes: two sources with the same identity hold the
 *     same bytes ("file:DEV:INO:MTIME_NS:SIZE" for a local file; a remote
 *     source uses the server's ETag, else Last-Modified and size).
 *   - read may be called from any number of threads at once.
 *   - read never returns bytes of another version: if the bytes behind the
 *     source change or go away, reads fail (or, for a local file that
 *     shrank, come up short) rather than mix versions, as far as the kind
 *     of source can tell.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_SOURCE_H
#define GGUF_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gguf.h"

struct gguf_source;

/* A piece of a source's bytes lent to a reply: len bytes at mem, or (mem
 * NULL) len bytes at pos of descriptor fd.  The bytes stay valid and
 * unchanged until release is called (NULL: nothing to release), once;
 * used: they were served (a cache then lets them go first).  owner and
 * hold are release's own. */
struct gguf_span {
    const void *mem;
    int fd;
    uint64_t pos;
    size_t len;
    void (*release)(const struct gguf_span *sp, bool used);
    void *owner;
    void *hold;
};

struct gguf_source_ops {
    /* Reads up to len bytes at off into buf: the count read (short only at
     * the end of the source, or, while a remote model is being opened, at
     * the end of the range it streams: remote/source.h; callers loop), or
     * a negative errno. */
    ssize_t (*read)(struct gguf_source *s, void *buf, size_t len, uint64_t off);
    /* Frees the source (called once, by gguf_source_close). */
    void (*close)(struct gguf_source *s);
    /* Optional (NULL): the header parser's copy of bytes 0..len-1, told
     * right before it reads from len on; valid for that read only.  A
     * remote source sizes the range it asks for by them (remote/source.h). */
    void (*head)(struct gguf_source *s, const void *bytes, size_t len);
    /* Optional (NULL: the bytes are copied, see gguf_source_spans): lends
     * the bytes [off, off + len), off < size and len cut at the end of the
     * source by the caller, as at most max spans sp[0..*count), in order,
     * covering them all: 0, or a positive errno with nothing lent (*count
     * 0): ENOSPC when more than max spans would be needed or the source
     * does not hold these bytes in a form it can lend (the caller then
     * copies them), EIO or ENOMEM as a read. */
    int (*spans)(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp,
                 int max, int *count);
};

struct gguf_source {
    const struct gguf_source_ops *ops;
    uint64_t size;         /* bytes */
    char *name;            /* for messages: a path, or a URL without credentials */
    char *identity;        /* see above */
    int fd;                /* a descriptor with the same bytes, or -1 */
    /* The source a wrapper reads through (an overlay's spliced source:
     * its base; the block cache of remote bytes: its inner source), set by
     * the wrapper when it is made; NULL for a source that reads its bytes
     * itself.  Callers walk it down to the source that holds the bytes
     * instead of asking a source what kind it is. */
    struct gguf_source *below;
};

/* Opens the regular file (or block device) at path, read-only.  GGUF_E_IO
 * with diag (the errno text, offset UINT64_MAX) when it cannot. */
enum gguf_err gguf_source_file(const char *path, struct gguf_source **out,
                               struct gguf_diag *diag);

/* The same for a descriptor the caller keeps (it is not closed). */
enum gguf_err gguf_source_fd(int fd, const char *name, struct gguf_source **out,
                             struct gguf_diag *diag);

/* Reads exactly len bytes at off (retrying short reads): 0, or a positive
 * errno (EIO when the source ends before off + len). */
int gguf_source_read_all(struct gguf_source *s, void *buf, size_t len, uint64_t off);

/* For a read op: how much of len bytes at off of an object of size bytes
 * it may return: 0 at or past the end (or for len 0), at most the bytes
 * left, and at most SSIZE_MAX rounded down to whole pages (the count must
 * fit its ssize_t). */
size_t gguf_read_len(uint64_t size, size_t len, uint64_t off);

void gguf_source_close(struct gguf_source *s);

/* The bytes [off, off + len) of s, cut at its end, as spans for a reply
 * (see struct gguf_span): the source's own (its spans op), else (no op,
 * or ENOSPC) one span of memory the bytes are read into, freed by its
 * release.  max is at least 1.  0 with the spans in sp[0..*count) (none
 * at or past the end, or for len 0), or a positive errno with nothing
 * held (*count 0): EIO when the bytes cannot be read (or the source ends
 * early), ENOMEM. */
int gguf_source_spans(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp,
                      int max, int *count);
/* Releases spans sp[0..n) (each by its release). */
void gguf_spans_release(const struct gguf_span *sp, int n, bool used);

/* Opens and indexes the GGUF file held by src (see gguf_open in gguf.h);
 * the header is read on demand through src, tensor data never is. */
enum gguf_err gguf_open_source(struct gguf_source *src, struct gguf_file **out,
                               struct gguf_diag *diag);

#endif

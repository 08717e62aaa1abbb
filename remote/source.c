/* remote/source.c — a remote object as a gguf_source (see source.h). */
#include "source.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct remote_source {
    struct gguf_source s;
    struct remote *r;
    atomic_bool opening;        /* the stream may be used */
    pthread_mutex_t mu;         /* st, stream_tried */
    struct remote_stream *st;
    bool stream_tried;          /* a stream is started at most once */
};

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

/* Serves what follows the stream's position from the stream; returns the
 * bytes taken (0: the caller reads with remote_read). */
static size_t from_stream(struct remote_source *rs, uint8_t *buf, size_t len, uint64_t off)
{
    size_t n = 0;
    pthread_mutex_lock(&rs->mu);
    if (atomic_load(&rs->opening)) {
        if (!rs->st && !rs->stream_tried) {
            rs->stream_tried = true;
            rs->st = remote_stream_start(rs->r, off);
        }
        if (rs->st && remote_stream_pos(rs->st) == off)
            n = remote_stream_read(rs->st, buf, len);
        if (rs->st && n < len) {
            /* ended, failed or not followed: plain ranges from now on */
            remote_stream_stop(rs->st);
            rs->st = NULL;
        }
    }
    pthread_mutex_unlock(&rs->mu);
    return n;
}

static ssize_t rsrc_read(struct gguf_source *s, void *vbuf, size_t len, uint64_t off)
{
    struct remote_source *rs = (struct remote_source *)s;
    uint8_t *buf = vbuf;
    if (off >= s->size || len == 0)
        return 0;
    if (len > s->size - off)
        len = (size_t)(s->size - off);
    if (len > (size_t)SSIZE_MAX)
        len = (size_t)SSIZE_MAX & ~(size_t)4095;
    size_t done = 0;
    size_t plen;
    const uint8_t *prefix = remote_prefix(rs->r, &plen);
    if (prefix && off < plen) {
        done = len < plen - off ? len : (size_t)(plen - off);
        memcpy(buf, prefix + off, done);
    }
    if (done < len && atomic_load(&rs->opening))
        done += from_stream(rs, buf + done, len - done, off + done);
    while (done < len) {
        ssize_t r = remote_read(rs->r, buf + done, len - done, off + done);
        if (r < 0)
            return r;
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static void rsrc_close(struct gguf_source *s)
{
    struct remote_source *rs = (struct remote_source *)s;
    remote_source_opened(s);
    remote_close(rs->r);
    pthread_mutex_destroy(&rs->mu);
    free(s->name);
    free(s->identity);
    free(rs);
}

static const struct gguf_source_ops remote_ops = { .read = rsrc_read, .close = rsrc_close };

enum gguf_err remote_source_open(const struct remote_opts *opts, struct gguf_source **out,
                                 struct gguf_diag *diag)
{
    *out = NULL;
    struct remote *r;
    enum gguf_err e = remote_open(opts, &r, diag);
    if (e)
        return e;
    struct remote_source *rs = calloc(1, sizeof *rs);
    if (rs) {
        rs->s.name = dup_str(remote_display_url(r));
        rs->s.identity = dup_str(remote_identity(r));
    }
    if (!rs || !rs->s.name || !rs->s.identity) {
        if (rs) {
            free(rs->s.name);
            free(rs->s.identity);
            free(rs);
        }
        remote_close(r);
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    rs->s.ops = &remote_ops;
    rs->s.size = remote_size(r);
    rs->s.fd = -1;
    rs->r = r;
    atomic_init(&rs->opening, true);
    pthread_mutex_init(&rs->mu, NULL);
    *out = &rs->s;
    return GGUF_OK;
}

void remote_source_opened(struct gguf_source *s)
{
    if (!s || s->ops != &remote_ops)
        return;
    struct remote_source *rs = (struct remote_source *)s;
    pthread_mutex_lock(&rs->mu);
    atomic_store(&rs->opening, false);
    if (rs->st) {
        remote_stream_stop(rs->st);
        rs->st = NULL;
    }
    pthread_mutex_unlock(&rs->mu);
}

struct remote *remote_source_remote(struct gguf_source *s)
{
    if (!s || s->ops != &remote_ops)
        return NULL;
    return ((struct remote_source *)s)->r;
}

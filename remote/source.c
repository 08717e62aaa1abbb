/* remote/source.c — a remote object as a gguf_source (see source.h). */
#include "source.h"
#include "estimate.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Past the end the bytes read so far foretell, a stream range runs this
 * much further (and at least this far: the parser reads 1 MiB ahead);
 * from the third range on twice as far as the one before, so that a header
 * the estimate keeps missing costs a logarithmic number of requests. */
#define EST_MARGIN (1u << 20)

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

struct remote_source {
    struct gguf_source s;
    struct remote *r;
    atomic_bool opening;        /* the stream may be used */
    /* mu guards busy, head and head_len, held briefly and never across a
     * network wait.  The stream's fields (st .. no_stream) belong to the
     * one read that set busy (from_stream), which uses them without mu: a
     * read that finds the stream busy reads plain ranges instead of
     * waiting, and remote_source_opened waits (on cv) for it to finish. */
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* busy went false */
    bool busy;
    struct remote_stream *st;   /* the current range, or NULL */
    uint64_t st_first, st_last; /* its first and last byte */
    struct remote_stream *ahead;/* the range after it, asked for early */
    uint64_t ahead_last;        /* its last byte */
    uint64_t next;              /* after a range: where the next one starts */
    unsigned ranges;            /* ranges started */
    bool no_stream;             /* plain ranges from now on */
    /* the parser's bytes 0..head_len-1 (rsrc_head), for the read from
     * head_len that follows only: from_stream clears it; a read it does not
     * reach is served by the prefix, so head_len < any offset from_stream
     * sees and a stale pointer is never used */
    const uint8_t *head;
    size_t head_len;
    /* the owner's copy of them for this read (est_end), without mu */
    const uint8_t *cur_head;
    size_t cur_head_len;
};

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

/* Where the header's first off bytes (the parser's, or the prefix's) say
 * it probably ends: true with *end (at least off). */
static bool est_end(struct remote_source *rs, uint64_t off, uint64_t *end)
{
    size_t plen;
    const uint8_t *prefix = remote_prefix(rs->r, &plen);
    const uint8_t *b = rs->cur_head;
    uint64_t n = rs->cur_head_len;
    if (!rs->cur_head || rs->cur_head_len != off) {
        b = prefix;             /* without the parser's bytes: the prefix's */
        n = plen;
    }
    if (!b || n != off || !remote_header_estimate(b, n, rs->s.size, end))
        return false;
    if (*end < off)
        *end = off;
    return true;
}

/* The last byte of the next stream range, from off: the margin past where
 * the header's first off bytes say it ends, and at least past off;
 * UINT64_MAX (to the end of the file) when they say nothing. */
static uint64_t range_last(struct remote_source *rs, uint64_t off)
{
    uint64_t end;
    if (!est_end(rs, off, &end))
        return UINT64_MAX;
    unsigned doublings = rs->ranges < 2 ? 0 : rs->ranges - 1;
    if (doublings > 10)
        doublings = 10;
    return sat_add(end, ((uint64_t)EST_MARGIN << doublings) - 1);
}

/* Once the current range is half read, if the bytes read so far say the
 * header ends past it, the next range is asked for at once (1 MiB past
 * that estimate), so that its round trip overlaps the rest of this one's
 * transfer instead of following it. */
static void ask_ahead(struct remote_source *rs, uint64_t off)
{
    uint64_t end;
    if (!rs->st || rs->ahead || rs->st_last + 1 >= rs->s.size ||
        off - rs->st_first < (rs->st_last - rs->st_first + 1) / 2 || !est_end(rs, off, &end) ||
        end <= rs->st_last + 1)
        return;
    uint64_t last = sat_add(end, (uint64_t)EST_MARGIN - 1);
    rs->ahead = remote_stream_start(rs->r, rs->st_last + 1, last);
    if (rs->ahead) {
        rs->ranges++;
        rs->ahead_last = last < rs->s.size - 1 ? last : rs->s.size - 1;
    }
}

static void stream_end(struct remote_source *rs)
{
    remote_stream_stop(rs->st);
    rs->st = NULL;
}

/* No more streaming: the current range and the one asked for ahead. */
static void streams_off(struct remote_source *rs)
{
    if (rs->st)
        stream_end(rs);
    if (rs->ahead)
        remote_stream_stop(rs->ahead);
    rs->ahead = NULL;
    rs->no_stream = true;
}

/* Serves what follows the stream's position from the stream; returns the
 * bytes taken (0: the caller reads with remote_read) and sets *range_end
 * when they end the current range (the caller returns a short read). */
static size_t from_stream(struct remote_source *rs, uint8_t *buf, size_t len, uint64_t off,
                          bool *range_end)
{
    size_t n = 0;
    pthread_mutex_lock(&rs->mu);
    bool mine = atomic_load(&rs->opening) && !rs->busy;
    if (mine)
        rs->busy = true;
    /* est_end reads the parser's bytes: copied for the stream's owner, and
     * the pointer cleared for everyone (see head above) */
    const uint8_t *head = rs->head;
    size_t head_len = rs->head_len;
    rs->head = NULL;
    pthread_mutex_unlock(&rs->mu);
    if (!mine)
        return 0;
    rs->cur_head = head;
    rs->cur_head_len = head_len;
    if (rs->no_stream)
        goto out;
    if ((rs->st && remote_stream_pos(rs->st) != off) || (!rs->st && rs->next && rs->next != off)) {
        streams_off(rs);        /* not followed: plain ranges from now on */
        goto out;
    }
    if (!rs->st) {
        uint64_t last = range_last(rs, off);
        rs->st = remote_stream_start(rs->r, off, last);
        if (!rs->st) {
            rs->no_stream = true;
            goto out;
        }
        rs->ranges++;
        rs->st_first = off;
        rs->st_last = last < rs->s.size - 1 ? last : rs->s.size - 1;
    }
    ask_ahead(rs, off);
    size_t want = len;
    if (want > rs->st_last - off + 1)
        want = (size_t)(rs->st_last - off + 1);
    n = remote_stream_read(rs->st, buf, want);
    if (n < want) {
        streams_off(rs);        /* ended early or failed */
    } else if (off + n == rs->st_last + 1) {
        /* the range is done; the next read goes on with the one asked for
         * ahead, or starts another */
        stream_end(rs);
        rs->next = rs->st_last + 1;
        *range_end = rs->next < rs->s.size;
        if (rs->ahead) {
            rs->st = rs->ahead;
            rs->st_first = rs->next;
            rs->st_last = rs->ahead_last;
            rs->ahead = NULL;
        }
    }
out:
    rs->cur_head = NULL;
    pthread_mutex_lock(&rs->mu);
    rs->busy = false;
    pthread_cond_broadcast(&rs->cv);
    pthread_mutex_unlock(&rs->mu);
    return n;
}

static ssize_t rsrc_read(struct gguf_source *s, void *vbuf, size_t len, uint64_t off)
{
    struct remote_source *rs = (struct remote_source *)s;
    uint8_t *buf = vbuf;
    if (!(len = gguf_read_len(s->size, len, off)))
        return 0;
    size_t done = 0;
    size_t plen;
    const uint8_t *prefix = remote_prefix(rs->r, &plen);
    if (prefix && off < plen) {
        done = len < plen - off ? len : (size_t)(plen - off);
        memcpy(buf, prefix + off, done);
    }
    if (done < len && atomic_load(&rs->opening)) {
        bool range_end = false;
        done += from_stream(rs, buf + done, len - done, off + done, &range_end);
        if (range_end && done < len)
            return (ssize_t)done;
    }
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

static void rsrc_head(struct gguf_source *s, const void *bytes, size_t len)
{
    struct remote_source *rs = (struct remote_source *)s;
    if (!atomic_load(&rs->opening))
        return;
    pthread_mutex_lock(&rs->mu);
    rs->head = bytes;
    rs->head_len = len;
    pthread_mutex_unlock(&rs->mu);
}

static void rsrc_close(struct gguf_source *s)
{
    struct remote_source *rs = (struct remote_source *)s;
    remote_source_opened(s);
    remote_close(rs->r);
    pthread_mutex_destroy(&rs->mu);
    pthread_cond_destroy(&rs->cv);
    free(s->name);
    free(s->identity);
    free(rs);
}

/* The prefix is in memory for the remote's life: lent as it is.  Bytes
 * past it are fetched by a read (ENOSPC: copied), or lent by the block
 * cache that wraps the source (cache/blocksrc.h). */
static int rsrc_spans(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp,
                      int max, int *count)
{
    (void)max;
    struct remote_source *rs = (struct remote_source *)s;
    size_t plen;
    const uint8_t *prefix = remote_prefix(rs->r, &plen);
    if (!prefix || off >= plen || len > plen - off || atomic_load(&rs->opening))
        return ENOSPC;
    sp[0] = (struct gguf_span){ .mem = prefix + off, .fd = -1, .len = len };
    *count = 1;
    return 0;
}

static const struct gguf_source_ops remote_ops = { .read = rsrc_read, .close = rsrc_close,
                                                    .head = rsrc_head, .spans = rsrc_spans };

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
    pthread_cond_init(&rs->cv, NULL);
    *out = &rs->s;
    return GGUF_OK;
}

void remote_source_opened(struct gguf_source *s)
{
    struct remote_source *rs = (struct remote_source *)s;
    pthread_mutex_lock(&rs->mu);
    atomic_store(&rs->opening, false);
    /* a read that streams still owns the stream: it ends first (no new
     * one takes it: opening is false) */
    while (rs->busy)
        pthread_cond_wait(&rs->cv, &rs->mu);
    rs->head = NULL;
    pthread_mutex_unlock(&rs->mu);
    streams_off(rs);
}

struct remote *remote_source_remote(struct gguf_source *s)
{
    return ((struct remote_source *)s)->r;
}

/*
 * remote/http_read.c — reading a struct remote once it is open (see http.h,
 * "Reading" and "Streaming"): validated range reads (one rh_fetch each, the
 * reasons of the latest failures kept for remote_error_at), the stream (one range)
 * the header parser reads from (a thread of its own running the transfer,
 * handing bytes straight into the reader's buffers), and the accessors.
 */
#include "http_int.h"
#include "gguf/source.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- reads ------------------------------------------------------------------------------ */

/* Keeps a failure of bytes first..last (inclusive) and its reason. */
static void record_error(struct remote *r, const struct gguf_diag *d, uint64_t first,
                         uint64_t last)
{
    pthread_mutex_lock(&r->mu);
    r->errs[r->errs_next] = (struct rh_error){ first, last, *d };
    r->errs_next = (r->errs_next + 1) % REMOTE_ERRORS_KEPT;
    if (r->errs_n < REMOTE_ERRORS_KEPT)
        r->errs_n++;
    pthread_mutex_unlock(&r->mu);
}

bool remote_error_at(struct remote *r, uint64_t off, uint64_t len, struct gguf_diag *out)
{
    pthread_mutex_lock(&r->mu);
    bool has = r->errs_n > 0;
    const struct rh_error *pick = NULL;
    /* newest first */
    for (unsigned i = 1; i <= r->errs_n && !pick; i++) {
        const struct rh_error *e =
            &r->errs[(r->errs_next + REMOTE_ERRORS_KEPT - i) % REMOTE_ERRORS_KEPT];
        if (len && e->first < off + len && e->last >= off)
            pick = e;
    }
    if (has)
        *out = (pick ? pick : &r->errs[(r->errs_next + REMOTE_ERRORS_KEPT - 1) %
                                       REMOTE_ERRORS_KEPT])->d;
    pthread_mutex_unlock(&r->mu);
    return has;
}

bool remote_last_error(struct remote *r, struct gguf_diag *out)
{
    return remote_error_at(r, 0, 0, out);
}

ssize_t remote_read_diag(struct remote *r, void *buf, size_t len, uint64_t off,
                         struct gguf_diag *diag)
{
    if (!(len = gguf_read_len(r->size, len, off)))
        return 0;
    struct gguf_diag d;
    char shown[100];
    remote_url_redact_to(r->display, shown, sizeof shown);
    if (atomic_load(&r->changed)) {
        gguf_diag_set(&d, GGUF_E_IO, UINT64_MAX, "%s: the file changed since it was opened "
                      "(reading bytes %llu-%llu)", shown, (unsigned long long)off,
                      (unsigned long long)(off + len - 1));
        atomic_fetch_add(&r->n_errors, 1);
        record_error(r, &d, off, off + len - 1);
        if (diag)
            *diag = d;
        return -EIO;
    }
    /* the read's clock (http.h, "Timeouts") starts now; waiting for a
     * handle counts, unless the transfers that hold them make progress */
    uint64_t start = rh_now_ns();
    /* the server was found silent a moment ago: this read waits for it no
     * longer than a moment after that (a request the kernel or a queue held
     * back meanwhile does not wait a whole timeout more) */
    uint64_t probe_of = rh_silent_since(r, start);
    bool timed_out;
    struct slot *s = rh_acquire_by(r, start, probe_of, &timed_out);
    if (!s) {
        if (timed_out)
            gguf_diag_set(&d, GGUF_E_IO, UINT64_MAX, "%s: timed out: every connection busy and "
                          "the server has sent nothing for %u s (timeout=%u) (reading bytes "
                          "%llu-%llu)", shown, r->timeout_s, r->timeout_s, (unsigned long long)off,
                          (unsigned long long)(off + len - 1));
        else
            gguf_diag_set(&d, GGUF_E_NOMEM, UINT64_MAX, "%s: out of memory (libcurl handle)",
                          shown);
        atomic_fetch_add(&r->n_errors, 1);
        record_error(r, &d, off, off + len - 1);
        if (diag)
            *diag = d;
        return timed_out ? -EIO : -ENOMEM;
    }
    uint64_t since = atomic_load(&r->progress_ns);
    struct xfer x = { .r = r, .s = s, .kind = K_RANGE, .off = off,
                      .last = off + len - 1, .buf = buf,
                      .since_ns = since > start ? since : start, .probe_of = probe_of };
    enum outcome o = rh_fetch(&x, NULL);
    rh_release(r, s);
    if (o == O_OK) {
        atomic_store(&r->progress_ns, rh_now_ns());     /* it answered */
        return (ssize_t)len;
    }
    if (o == O_CHANGED)
        atomic_store(&r->changed, true);
    atomic_fetch_add(&r->n_errors, 1);
    gguf_diag_set(&d, o == O_NOMEM ? GGUF_E_NOMEM : GGUF_E_IO, UINT64_MAX,
                  "%s: %s (reading bytes %llu-%llu)", shown, x.msg,
                  (unsigned long long)off, (unsigned long long)(off + len - 1));
    record_error(r, &d, off, off + len - 1);
    if (diag)
        *diag = d;
    return o == O_NOMEM ? -ENOMEM : -EIO;
}

ssize_t remote_read(struct remote *r, void *buf, size_t len, uint64_t off)
{
    return remote_read_diag(r, buf, len, off, NULL);
}

/* ---- streaming --------------------------------------------------------------------------- */

/* The body callback of a stream: hands p over to the reader's buffers,
 * waiting for them; 0 (ends the transfer) when stopped. */
size_t rh_stream_take(struct xfer *x, const char *p, size_t len)
{
    struct remote_stream *st = x->st;
    if (len > x->cap - x->got) {
        rh_fail(x, O_FATAL, "the server sent more than the %zu bytes it announced", x->cap);
        return 0;
    }
    x->got += len;
    size_t done = 0;
    pthread_mutex_lock(&st->mu);
    while (done < len) {
        while (!atomic_load(&st->cancel) && (!st->dst || st->got == st->want))
            pthread_cond_wait(&st->cv, &st->mu);
        if (atomic_load(&st->cancel))
            break;
        size_t c = len - done;
        if (c > st->want - st->got)
            c = st->want - st->got;
        memcpy(st->dst + st->got, p + done, c);
        st->got += c;
        done += c;
        if (st->got == st->want)
            pthread_cond_broadcast(&st->cv);
    }
    pthread_mutex_unlock(&st->mu);
    if (done < len) {
        rh_fail(x, O_FATAL, "stream stopped");
        return 0;
    }
    return len;
}

static void *stream_main(void *arg)
{
    struct remote_stream *st = arg;
    enum outcome o = rh_perform(&st->x, st->url);
    if (o == O_CHANGED) {
        atomic_store(&st->r->changed, true);
        struct gguf_diag d;
        char shown[140];
        gguf_diag_set(&d, GGUF_E_IO, UINT64_MAX, "%s: %s (streaming from byte %llu)",
                      remote_url_redact_to(st->r->display, shown, sizeof shown), st->x.msg,
                      (unsigned long long)st->x.off);
        record_error(st->r, &d, st->x.off, st->x.last);
    }
    pthread_mutex_lock(&st->mu);
    st->ended = true;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

struct remote_stream *remote_stream_start(struct remote *r, uint64_t off, uint64_t last)
{
    if (off >= r->size || last < off || atomic_load(&r->changed))
        return NULL;
    if (last > r->size - 1)
        last = r->size - 1;
    struct remote_stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->url = rh_current_url(r);
    if (!st->url) {
        free(st);
        return NULL;
    }
    st->s = rh_acquire(r, true);
    if (!st->s) {
        free(st->url);
        free(st);
        return NULL;
    }
    st->r = r;
    st->pos = off;
    atomic_init(&st->cancel, false);
    st->x = (struct xfer){ .r = r, .s = st->s, .kind = K_STREAM, .off = off,
                           .last = last, .cap = (size_t)(last - off + 1), .st = st };
    if ((uint64_t)st->x.cap != last - off + 1)
        st->x.cap = SIZE_MAX;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    if (pthread_create(&st->th, NULL, stream_main, st) != 0) {
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->cv);
        rh_release(r, st->s);
        free(st->url);
        free(st);
        return NULL;
    }
    return st;
}

size_t remote_stream_read(struct remote_stream *st, void *buf, size_t len)
{
    if (len == 0)
        return 0;
    pthread_mutex_lock(&st->mu);
    if (st->ended) {
        pthread_mutex_unlock(&st->mu);
        return 0;
    }
    st->dst = buf;
    st->want = len;
    st->got = 0;
    pthread_cond_broadcast(&st->cv);
    while (st->got < st->want && !st->ended)
        pthread_cond_wait(&st->cv, &st->mu);
    size_t n = st->got;
    st->dst = NULL;
    st->want = st->got = 0;
    pthread_mutex_unlock(&st->mu);
    st->pos += n;
    return n;
}

uint64_t remote_stream_pos(const struct remote_stream *st)
{
    return st->pos;
}

void remote_stream_stop(struct remote_stream *st)
{
    if (!st)
        return;
    pthread_mutex_lock(&st->mu);
    atomic_store(&st->cancel, true);
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    pthread_join(st->th, NULL);
    rh_release(st->r, st->s);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st->url);
    free(st);
}

/* ---- the rest ------------------------------------------------------------------------------ */

bool remote_changed(const struct remote *r)
{
    return atomic_load(&((struct remote *)r)->changed);
}

uint64_t remote_size(const struct remote *r)
{
    return r->size;
}

const char *remote_identity(const struct remote *r)
{
    return r->identity;
}

const char *remote_display_url(const struct remote *r)
{
    return r->display;
}

const char *remote_store_lines(const struct remote *r)
{
    return r->store ? rh_store_info(r->store) : NULL;
}

void remote_get_stats(const struct remote *cr, struct remote_stats *out)
{
    struct remote *r = (struct remote *)cr;
    out->requests = atomic_load(&r->n_requests);
    out->bytes = atomic_load(&r->n_bytes);
    out->retries = atomic_load(&r->n_retries);
    out->redirects = atomic_load(&r->n_redirects);
    out->reresolves = atomic_load(&r->n_reresolves);
    out->errors = atomic_load(&r->n_errors);
}

const void *remote_prefix(const struct remote *r, size_t *len)
{
    *len = r->prefix ? r->prefix_len : 0;
    return r->prefix;
}

void remote_drop_prefix(struct remote *r)
{
    free(r->prefix);
    r->prefix = NULL;
    r->prefix_len = 0;
}

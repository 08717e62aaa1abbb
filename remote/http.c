/* remote/http.c — one remote object read by HTTP range requests (see http.h). */
#include "http.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hdr.h"
#include "url.h"

/* An error body (404 page, ...) is read up to this much, so that the
 * connection stays usable; a longer one ends the transfer. */
#define DRAIN_MAX (64u << 10)
/* libcurl's receive buffer: the largest piece handed to the callbacks. */
#define RECV_BUFFER (256L << 10)
#define TOKEN_MAX 16384

struct slot {
    CURL *h;
    struct slot *next_free;
    char err[CURL_ERROR_SIZE];
    struct remote_resp resp;
};

struct remote {
    char *url;                  /* the original URL */
    char *display;              /* the original URL, redacted */
    char *auth;                 /* "Authorization: Bearer TOKEN", or NULL */
    size_t auth_len;
    char *ca_file;              /* or NULL */
    unsigned connections, timeout_s, max_retries;

    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];

    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    struct slot *slots;         /* [connections] */
    unsigned created;
    struct slot *free_list;     /* most recently released first */

    pthread_mutex_t mu;         /* final_url, last_err */
    char *final_url;
    struct gguf_diag last_err;
    bool has_err;

    /* fixed at open */
    uint64_t size;
    char *identity;
    bool has_etag, etag_strong;
    char etag[REMOTE_ETAG_MAX + 1];
    bool has_lm, lm_required;
    int64_t lm;
    char lm_raw[40];
    uint8_t *prefix;
    size_t prefix_len;

    atomic_bool changed;
    _Atomic uint64_t n_requests, n_bytes, n_retries, n_redirects, n_reresolves, n_errors;
};

enum kind { K_OPEN, K_RANGE, K_STREAM };
enum outcome { O_OK, O_REDIRECT, O_RETRY, O_EXPIRED, O_CHANGED, O_FATAL, O_NOMEM };
enum sink { S_NONE, S_BUF, S_DRAIN, S_STREAM };

/* One request and what its callbacks make of the answer. */
struct xfer {
    struct remote *r;
    struct slot *s;
    enum kind kind;
    bool at_open;               /* a request of remote_open (also its redirects) */
    uint64_t off, last;         /* the range asked, inclusive */
    uint8_t *buf;               /* S_BUF: the destination */
    size_t cap, got;
    struct remote_stream *st;   /* S_STREAM */
    enum sink sink;
    size_t drained;
    bool drain_cut;             /* an error body was cut at DRAIN_MAX */
    bool empty;                 /* open: 416 "bytes * /0", an empty file */
    enum outcome why;           /* set when a callback ended the transfer */
    char msg[200];              /* what went wrong, for any outcome but O_OK */
};

struct remote_stream {
    struct remote *r;
    struct slot *s;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint8_t *dst;               /* the reader's buffer, want bytes, got so far */
    size_t want, got;
    bool ended;                 /* the transfer is over (or failed) */
    atomic_bool cancel;
    uint64_t pos;               /* the reader's position */
    char *url;
    struct xfer x;
};

/* ---- small things ----------------------------------------------------------- */

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

static void wipe_free(char *p, size_t n)
{
    if (p) {
        explicit_bzero(p, n);
        free(p);
    }
}

static void sleep_ms(uint64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
        ;
}

/* printf into x->msg; returns false (for "return fail(...)" in callbacks). */
__attribute__((format(printf, 3, 4)))
static bool fail(struct xfer *x, enum outcome o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->msg, sizeof x->msg, fmt, ap);
    va_end(ap);
    x->why = o;
    return false;
}

/* s (from the server or libcurl) with bytes outside printable ASCII as '?'
 * and at most n bytes, in out. */
static const char *clean(const char *s, char *out, size_t cap, size_t n)
{
    size_t i = 0;
    for (; s[i] && i < n && i + 1 < cap; i++)
        out[i] = (s[i] >= 0x20 && s[i] <= 0x7e) ? s[i] : '?';
    out[i] = '\0';
    return out;
}

static void http_status_msg(struct xfer *x, enum outcome o, int status)
{
    const char *reason = remote_http_reason(status);
    if (*reason)
        fail(x, o, "HTTP %d (%s)", status, reason);
    else
        fail(x, o, "HTTP %d", status);
}

/* ---- the share object's locks ------------------------------------------------ */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
    (void)h;
    (void)access;
    struct remote *r = arg;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&r->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *arg)
{
    (void)h;
    struct remote *r = arg;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&r->share_mu[data]);
}

/* ---- callbacks ---------------------------------------------------------------- */

static bool is_redirect(int st)
{
    return st == 301 || st == 302 || st == 303 || st == 307 || st == 308;
}

/* The validators of an answer against those recorded at open. */
static bool validators_ok(struct xfer *x)
{
    struct remote *r = x->r;
    const struct remote_resp *h = &x->s->resp;
    char a[48], b[48];
    if (r->has_etag) {
        if (!h->has_etag)
            return fail(x, O_CHANGED, "the file changed since it was opened: the answer has "
                        "no ETag (it was %s)", clean(r->etag, a, sizeof a, 40));
        if (strcmp(h->etag, r->etag) != 0)
            return fail(x, O_CHANGED, "the file changed since it was opened: ETag %s is now %s",
                        clean(r->etag, a, sizeof a, 40), clean(h->etag, b, sizeof b, 40));
    }
    if (r->has_lm) {
        if (!h->has_lm && r->lm_required)
            return fail(x, O_CHANGED, "the file may have changed since it was opened: the "
                        "answer has no Last-Modified (it was %s)", r->lm_raw);
        if (h->has_lm && h->lm != r->lm)
            return fail(x, O_CHANGED, "the file changed since it was opened: Last-Modified "
                        "%s is now %s", r->lm_raw, h->lm_raw);
    }
    return true;
}

/* At the end of the final answer's headers: take the body, drain it, or
 * end the transfer (false) before a byte of it is used. */
static bool decide(struct xfer *x)
{
    struct remote *r = x->r;
    const struct remote_resp *h = &x->s->resp;
    int st = h->status;
    if (h->bad)
        return fail(x, O_FATAL, "the server sent %s", h->bad_what);
    if (st == 206) {
        const struct remote_crange *c = &h->crange;
        if (!h->has_crange || c->unsatisfied)
            return fail(x, O_FATAL, "the server answered a range request with 206 but "
                        "no Content-Range");
        if (!c->complete_known)
            return fail(x, O_FATAL, "the server's Content-Range does not give the file's size");
        if (h->encoded)
            return fail(x, O_FATAL, "the server sent a range with a Content-Encoding (not "
                        "the file's bytes)");
        if (h->has_clen && h->clen != c->last - c->first + 1)
            return fail(x, O_FATAL, "the server's Content-Length %llu disagrees with its "
                        "Content-Range bytes %llu-%llu", (unsigned long long)h->clen,
                        (unsigned long long)c->first, (unsigned long long)c->last);
        if (x->kind == K_OPEN) {
            uint64_t want = c->complete < REMOTE_PREFIX_SIZE ? c->complete : REMOTE_PREFIX_SIZE;
            if (c->first != 0 || c->last != want - 1)
                return fail(x, O_FATAL, "the server answered bytes %llu-%llu of %llu to a "
                            "request of bytes 0-%u", (unsigned long long)c->first,
                            (unsigned long long)c->last, (unsigned long long)c->complete,
                            REMOTE_PREFIX_SIZE - 1);
            x->sink = S_BUF;
            x->cap = (size_t)want;
            return true;
        }
        if (c->complete != r->size)
            return fail(x, O_CHANGED, "the file changed since it was opened: its size was "
                        "%llu, is now %llu", (unsigned long long)r->size,
                        (unsigned long long)c->complete);
        if (!validators_ok(x))
            return false;
        if (c->first != x->off || c->last != x->last)
            return fail(x, O_FATAL, "the server answered bytes %llu-%llu to a request of "
                        "bytes %llu-%llu", (unsigned long long)c->first,
                        (unsigned long long)c->last, (unsigned long long)x->off,
                        (unsigned long long)x->last);
        if (x->kind == K_STREAM) {
            x->sink = S_STREAM;
        } else {
            x->sink = S_BUF;
            x->cap = (size_t)(x->last - x->off + 1);
        }
        return true;
    }
    if (st == 200) {
        if (x->kind == K_OPEN && !h->encoded &&
            !(h->has_clen && h->clen > REMOTE_PREFIX_SIZE)) {
            /* maybe the whole of a small file: taken if it fits the prefix */
            x->sink = S_BUF;
            x->cap = REMOTE_PREFIX_SIZE;
            return true;
        }
        if (h->encoded)
            return fail(x, O_FATAL, "the server ignores Range requests (200 with a "
                        "Content-Encoding)");
        return fail(x, O_FATAL, "the server ignores Range requests (it answered 200 with "
                    "%s%llu bytes)", h->has_clen ? "" : "more than ",
                    (unsigned long long)(h->has_clen ? h->clen : REMOTE_PREFIX_SIZE));
    }
    if (st == 412 && x->kind != K_OPEN)
        return fail(x, O_CHANGED, "the file changed since it was opened (HTTP 412: the "
                    "server's precondition on its identity failed)");
    if (st == 416) {
        if (x->kind == K_OPEN && h->has_crange && h->crange.unsatisfied &&
            h->crange.complete == 0) {
            x->empty = true;
            x->sink = S_DRAIN;
            return true;
        }
        if (x->kind != K_OPEN)
            return fail(x, O_CHANGED, "the file changed since it was opened: HTTP 416 for "
                        "bytes %llu-%llu of %llu", (unsigned long long)x->off,
                        (unsigned long long)x->last, (unsigned long long)r->size);
    }
    /* redirects and errors: their bodies are not looked at */
    x->sink = S_DRAIN;
    return true;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = size * n;
    enum remote_hdr_step step = remote_resp_line(&x->s->resp, p, len, (int64_t)time(NULL));
    if (step == REMOTE_HDR_FAIL) {
        fail(x, O_FATAL, "the server sent %s", x->s->resp.bad_what);
        return 0;
    }
    if (step == REMOTE_HDR_END && !decide(x))
        return 0;
    return len;
}

static size_t stream_take(struct xfer *x, const char *p, size_t len);

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = size * n;
    atomic_fetch_add_explicit(&x->r->n_bytes, len, memory_order_relaxed);
    switch (x->sink) {
    case S_BUF:
        if (len > x->cap - x->got) {
            if (x->kind == K_OPEN && x->s->resp.status == 200)
                fail(x, O_FATAL, "the server ignores Range requests (it answered 200 with "
                     "more than %u bytes)", REMOTE_PREFIX_SIZE);
            else
                fail(x, O_FATAL, "the server sent more than the %zu bytes it announced",
                     x->cap);
            return 0;
        }
        memcpy(x->buf + x->got, p, len);
        x->got += len;
        return len;
    case S_DRAIN:
        x->drained += len;
        if (x->drained > DRAIN_MAX) {
            x->drain_cut = true;
            return 0;
        }
        return len;
    case S_STREAM:
        return stream_take(x, p, len);
    default:
        fail(x, O_FATAL, "the server sent a body before its headers");
        return 0;
    }
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)dn;
    (void)ut;
    (void)un;
    struct xfer *x = arg;
    return x->st && atomic_load(&x->st->cancel) ? 1 : 0;
}

/* ---- one request -------------------------------------------------------------- */

static enum outcome transport_error(struct xfer *x, CURLcode rc)
{
    char e[CURL_ERROR_SIZE];
    const char *text = x->s->err[0] ? x->s->err : curl_easy_strerror(rc);
    clean(text, e, sizeof e, 150);
    switch (rc) {
    case CURLE_OUT_OF_MEMORY:
        fail(x, O_NOMEM, "out of memory");
        return O_NOMEM;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        fail(x, O_FATAL, "%s", e);
        return O_FATAL;
    case CURLE_COULDNT_RESOLVE_HOST:
        /* at open a name that does not resolve is a typo, not a hiccup */
        fail(x, x->at_open ? O_FATAL : O_RETRY, "name resolution failed: %s", e);
        return x->why;
    case CURLE_SSL_CONNECT_ERROR:
        fail(x, x->at_open ? O_FATAL : O_RETRY, "TLS: %s", e);
        return x->why;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_USE_SSL_FAILED:
        fail(x, O_FATAL, "TLS: %s", e);
        return O_FATAL;
    case CURLE_OPERATION_TIMEDOUT:
        fail(x, O_RETRY, "timed out: %s", e);
        return O_RETRY;
    case CURLE_COULDNT_CONNECT:
        fail(x, O_RETRY, "cannot connect: %s", e);
        return O_RETRY;
    default:
        /* resets, short bodies, HTTP/2 stream errors, ... */
        fail(x, O_RETRY, "%s", e);
        return O_RETRY;
    }
}

static enum outcome classify(struct xfer *x, CURLcode rc)
{
    const struct remote_resp *h = &x->s->resp;
    if (x->why != O_OK)
        return x->why;
    if (rc != CURLE_OK && !(x->drain_cut && rc == CURLE_WRITE_ERROR))
        return transport_error(x, rc);
    if (!h->done) {
        fail(x, O_RETRY, "the connection closed before an answer");
        return O_RETRY;
    }
    int st = h->status;
    if (x->kind == K_STREAM)
        return O_OK;            /* ended, and nothing more to say */
    if (st == 206 || (st == 200 && x->kind == K_OPEN)) {
        size_t want = x->cap;
        if (st == 200)
            want = h->has_clen ? (size_t)h->clen : x->got;
        if (x->got != want) {
            fail(x, O_RETRY, "the body ended after %zu of %zu bytes", x->got, want);
            return O_RETRY;
        }
        return O_OK;
    }
    if (x->empty)
        return O_OK;
    if (is_redirect(st)) {
        if (!h->has_location)
            return fail(x, O_FATAL, "a redirect (HTTP %d) without a Location", st), O_FATAL;
        return O_REDIRECT;
    }
    if (st == 401 || st == 403 || st == 410) {
        http_status_msg(x, O_EXPIRED, st);
        return O_EXPIRED;
    }
    if (st == 408 || st == 429 || (st >= 500 && st <= 599)) {
        http_status_msg(x, O_RETRY, st);
        return O_RETRY;
    }
    http_status_msg(x, O_FATAL, st);
    return O_FATAL;
}

static enum outcome perform(struct xfer *x, const char *url)
{
    struct remote *r = x->r;
    struct slot *s = x->s;
    CURL *h = s->h;
    x->got = 0;
    x->sink = S_NONE;
    x->drained = 0;
    x->drain_cut = false;
    x->empty = false;
    x->why = O_OK;
    x->msg[0] = '\0';
    remote_resp_init(&s->resp);
    s->err[0] = '\0';

    char range[48];
    if (x->kind == K_STREAM)
        snprintf(range, sizeof range, "%llu-", (unsigned long long)x->off);
    else
        snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)x->off,
                 (unsigned long long)x->last);
    struct curl_slist *hl = NULL, *t;
    bool oom = false;
    if (r->auth && remote_url_same_origin(url, r->url)) {
        oom |= !(t = curl_slist_append(hl, r->auth));
        hl = t ? t : hl;
    }
    char cond[REMOTE_ETAG_MAX + 64];
    cond[0] = '\0';
    if (x->kind != K_OPEN) {
        if (r->etag_strong)
            snprintf(cond, sizeof cond, "If-Match: %s", r->etag);
        else if (r->has_lm)
            snprintf(cond, sizeof cond, "If-Unmodified-Since: %s", r->lm_raw);
    }
    if (cond[0]) {
        oom |= !(t = curl_slist_append(hl, cond));
        hl = t ? t : hl;
    }
    enum outcome o;
    if (oom) {
        fail(x, O_NOMEM, "out of memory");
        o = O_NOMEM;
    } else {
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_RANGE, range);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, x->kind == K_STREAM ? 0L : 1L);
        atomic_fetch_add_explicit(&r->n_requests, 1, memory_order_relaxed);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        o = classify(x, rc);
    }
    for (t = hl; t; t = t->next)
        explicit_bzero(t->data, strlen(t->data));
    curl_slist_free_all(hl);
    return o;
}

/* ---- the pool ------------------------------------------------------------------ */

static bool slot_setup(struct remote *r, struct slot *s)
{
    s->h = curl_easy_init();
    if (!s->h)
        return false;
    CURL *h = s->h;
    bool ok = true;
    ok &= curl_easy_setopt(h, CURLOPT_SHARE, r->share) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_VERBOSE, 0L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK;
    if (r->ca_file)
        ok &= curl_easy_setopt(h, CURLOPT_CAINFO, r->ca_file) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)r->timeout_s) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, (long)REMOTE_LOW_SPEED) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)r->timeout_s) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_BUFFERSIZE, RECV_BUFFER) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_USERAGENT, "gguffs") == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, s->err) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress) == CURLE_OK;
    if (!ok) {
        curl_easy_cleanup(h);
        s->h = NULL;
    }
    return ok;
}

/* A free handle (waiting for one while all are busy unless try_only);
 * NULL when none can be made. */
static struct slot *acquire(struct remote *r, bool try_only)
{
    pthread_mutex_lock(&r->pool_mu);
    for (;;) {
        if (r->free_list) {
            struct slot *s = r->free_list;
            r->free_list = s->next_free;
            pthread_mutex_unlock(&r->pool_mu);
            return s;
        }
        if (r->created < r->connections) {
            struct slot *s = &r->slots[r->created];
            if (!slot_setup(r, s)) {
                pthread_mutex_unlock(&r->pool_mu);
                return NULL;
            }
            r->created++;
            pthread_mutex_unlock(&r->pool_mu);
            return s;
        }
        if (try_only) {
            pthread_mutex_unlock(&r->pool_mu);
            return NULL;
        }
        pthread_cond_wait(&r->pool_cv, &r->pool_mu);
    }
}

static void release(struct remote *r, struct slot *s)
{
    pthread_mutex_lock(&r->pool_mu);
    s->next_free = r->free_list;
    r->free_list = s;
    pthread_cond_signal(&r->pool_cv);
    pthread_mutex_unlock(&r->pool_mu);
}

/* ---- requests with redirects, retries and re-resolving ---------------------------- */

static char *current_url(struct remote *r)
{
    pthread_mutex_lock(&r->mu);
    char *u = dup_str(r->final_url);
    pthread_mutex_unlock(&r->mu);
    return u;
}

/* Runs x to the end: O_OK, or the failure with x->msg.  At open (final
 * non-NULL) it starts from the original URL and returns the final one. */
static enum outcome fetch(struct xfer *x, char **final)
{
    struct remote *r = x->r;
    char *url = x->at_open ? dup_str(r->url) : current_url(r);
    if (!url)
        return fail(x, O_NOMEM, "out of memory"), O_NOMEM;
    unsigned hops = 0, retries = 0;
    bool reresolved = false, resolving = x->at_open;
    for (;;) {
        enum outcome o = perform(x, url);
        const struct remote_resp *h = &x->s->resp;
        switch (o) {
        case O_OK:
            if (final) {
                *final = url;
            } else if (resolving) {
                pthread_mutex_lock(&r->mu);
                free(r->final_url);
                r->final_url = url;
                pthread_mutex_unlock(&r->mu);
            } else {
                free(url);
            }
            return O_OK;
        case O_REDIRECT: {
            if (++hops > REMOTE_MAX_REDIRECTS) {
                fail(x, O_FATAL, "more than %d redirects", REMOTE_MAX_REDIRECTS);
                free(url);
                return O_FATAL;
            }
            char *next = remote_url_resolve(url, h->location);
            if (!next) {
                fail(x, O_FATAL, "a redirect (HTTP %d) to a Location that is not an http:// "
                     "or https:// URL", h->status);
                free(url);
                return O_FATAL;
            }
            if (remote_url_is_downgrade(url, next)) {
                fail(x, O_FATAL, "a redirect from https:// to http:// (refused)");
                free(next);
                free(url);
                return O_FATAL;
            }
            atomic_fetch_add_explicit(&r->n_redirects, 1, memory_order_relaxed);
            free(url);
            url = next;
            continue;
        }
        case O_EXPIRED:
            if (x->at_open || reresolved) {
                if (x->at_open && !r->auth && (h->status == 401 || h->status == 403)) {
                    size_t n = strlen(x->msg);
                    snprintf(x->msg + n, sizeof x->msg - n, "; no bearer token was given");
                }
                free(url);
                return O_FATAL;
            }
            /* a presigned URL that expired: from the original URL again */
            reresolved = resolving = true;
            hops = 0;
            atomic_fetch_add_explicit(&r->n_reresolves, 1, memory_order_relaxed);
            free(url);
            url = dup_str(r->url);
            if (!url)
                return fail(x, O_NOMEM, "out of memory"), O_NOMEM;
            continue;
        case O_RETRY: {
            if (retries >= r->max_retries) {
                size_t n = strlen(x->msg);
                snprintf(x->msg + n, sizeof x->msg - n, " (after %u retries)", retries);
                free(url);
                return O_FATAL;
            }
            uint64_t cap_ms = (uint64_t)r->timeout_s * 1000;
            uint64_t ms = retries < 20 ? 100ull << retries : cap_ms;
            if (h->has_retry_after && (h->status == 429 || h->status == 503))
                ms = h->retry_after < cap_ms / 1000 ? h->retry_after * 1000 : cap_ms;
            if (ms > cap_ms)
                ms = cap_ms;
            retries++;
            atomic_fetch_add_explicit(&r->n_retries, 1, memory_order_relaxed);
            sleep_ms(ms);
            continue;
        }
        default:
            free(url);
            return o;
        }
    }
}

/* ---- open ---------------------------------------------------------------------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void free_remote(struct remote *r)
{
    if (!r)
        return;
    for (unsigned i = 0; i < r->created; i++)
        curl_easy_cleanup(r->slots[i].h);
    free(r->slots);
    if (r->share)
        curl_share_cleanup(r->share);
    for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&r->share_mu[i]);
    pthread_mutex_destroy(&r->pool_mu);
    pthread_cond_destroy(&r->pool_cv);
    pthread_mutex_destroy(&r->mu);
    free(r->url);
    free(r->display);
    free(r->ca_file);
    wipe_free(r->auth, r->auth_len);
    free(r->final_url);
    free(r->identity);
    free(r->prefix);
    free(r);
}

static enum gguf_err open_fail(struct remote *r, struct gguf_diag *d, enum gguf_err e,
                               const char *what)
{
    char shown[140];
    remote_url_redact_to(r ? r->url : "", shown, sizeof shown);
    gguf_diag_set(d, e, UINT64_MAX, "%s: %s", shown, what);
    free_remote(r);
    return e;
}

static bool bad_token(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > TOKEN_MAX)
        return true;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] == 0x7f)
            return true;
    return false;
}

enum gguf_err remote_open(const struct remote_opts *o, struct remote **out,
                          struct gguf_diag *d)
{
    *out = NULL;
    if (!o || !o->url)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "no URL");
    unsigned conns = o->connections ? o->connections : REMOTE_DEFAULT_CONNECTIONS;
    unsigned tmo = o->timeout_s ? o->timeout_s : REMOTE_DEFAULT_TIMEOUT;
    unsigned retries = o->max_retries ? o->max_retries : REMOTE_DEFAULT_RETRIES;
    if (conns > REMOTE_MAX_CONNECTIONS)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "connections=%u: at most %u", conns,
                             REMOTE_MAX_CONNECTIONS);
    if (tmo > REMOTE_MAX_TIMEOUT)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "timeout=%u: at most %u seconds", tmo,
                             REMOTE_MAX_TIMEOUT);
    if (retries > REMOTE_MAX_RETRIES)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "retries=%u: at most %u", retries,
                             REMOTE_MAX_RETRIES);
    if (o->bearer_token && bad_token(o->bearer_token))
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                             "the bearer token is empty, longer than %u bytes, or has blanks "
                             "or control characters", TOKEN_MAX);
    if (o->ca_file) {
        int fd = open(o->ca_file, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "CA file %s: %s", o->ca_file,
                                 strerror(errno));
        close(fd);
    }
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "libcurl: %s",
                             curl_easy_strerror(global_rc));

    struct remote *r = calloc(1, sizeof *r);
    if (!r)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&r->share_mu[i], NULL);
    pthread_mutex_init(&r->pool_mu, NULL);
    pthread_cond_init(&r->pool_cv, NULL);
    pthread_mutex_init(&r->mu, NULL);
    r->connections = conns;
    r->timeout_s = tmo;
    r->max_retries = retries;
    r->url = dup_str(o->url);
    r->display = remote_url_redact(o->url);
    r->ca_file = o->ca_file ? dup_str(o->ca_file) : NULL;
    r->slots = calloc(conns, sizeof *r->slots);
    r->prefix = malloc(REMOTE_PREFIX_SIZE);
    r->share = curl_share_init();
    if (o->bearer_token) {
        static const char pre[] = "Authorization: Bearer ";
        r->auth_len = sizeof pre + strlen(o->bearer_token);
        r->auth = malloc(r->auth_len);
        if (r->auth)
            snprintf(r->auth, r->auth_len, "%s%s", pre, o->bearer_token);
    }
    if (!r->url || !r->display || (o->ca_file && !r->ca_file) || !r->slots || !r->prefix ||
        !r->share || (o->bearer_token && !r->auth))
        return open_fail(r, d, GGUF_E_NOMEM, "out of memory");
    if (curl_share_setopt(r->share, CURLSHOPT_LOCKFUNC, share_lock) != CURLSHE_OK ||
        curl_share_setopt(r->share, CURLSHOPT_UNLOCKFUNC, share_unlock) != CURLSHE_OK ||
        curl_share_setopt(r->share, CURLSHOPT_USERDATA, r) != CURLSHE_OK ||
        curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
        return open_fail(r, d, GGUF_E_IO, "libcurl: cannot set up a share object");

    struct slot *s = acquire(r, false);
    if (!s)
        return open_fail(r, d, GGUF_E_NOMEM, "libcurl: cannot make a handle");
    struct xfer x = { .r = r, .s = s, .kind = K_OPEN, .at_open = true, .off = 0,
                      .last = REMOTE_PREFIX_SIZE - 1, .buf = r->prefix };
    char *final = NULL;
    enum outcome oc = fetch(&x, &final);
    if (oc != O_OK) {
        /* 404: nothing of that name (what a split model's opener needs to
         * know about a shard); the answer's status is still in the slot */
        enum gguf_err e = oc == O_NOMEM ? GGUF_E_NOMEM
                        : s->resp.done && s->resp.status == 404 && oc == O_FATAL ? GGUF_E_NOENT
                        : GGUF_E_IO;
        release(r, s);
        atomic_fetch_add(&r->n_errors, 1);
        return open_fail(r, d, e, x.msg);
    }
    const struct remote_resp *h = &s->resp;
    r->final_url = final;
    if (x.empty) {
        r->size = 0;
        r->prefix_len = 0;
    } else {
        r->size = h->status == 206 ? h->crange.complete : x.got;
        r->prefix_len = x.got;
    }
    r->has_etag = h->has_etag;
    r->etag_strong = h->has_etag && !h->etag_weak;
    memcpy(r->etag, h->etag, sizeof r->etag);
    r->has_lm = h->has_lm;
    r->lm = h->lm;
    memcpy(r->lm_raw, h->lm_raw, sizeof r->lm_raw);
    r->lm_required = r->has_lm && !r->etag_strong;
    release(r, s);
    char id[REMOTE_ETAG_MAX + 64];
    if (r->etag_strong)
        snprintf(id, sizeof id, "etag:%s", r->etag);
    else if (r->has_lm)
        snprintf(id, sizeof id, "lm:%lld:%llu", (long long)r->lm, (unsigned long long)r->size);
    else
        snprintf(id, sizeof id, "size:%llu", (unsigned long long)r->size);
    r->identity = dup_str(id);
    if (!r->identity)
        return open_fail(r, d, GGUF_E_NOMEM, "out of memory");
    if (r->prefix_len < REMOTE_PREFIX_SIZE) {
        uint8_t *p = realloc(r->prefix, r->prefix_len ? r->prefix_len : 1);
        if (p)
            r->prefix = p;
    }
    *out = r;
    return GGUF_OK;
}

/* ---- reads ------------------------------------------------------------------------------ */

static void record_error(struct remote *r, const struct gguf_diag *d)
{
    pthread_mutex_lock(&r->mu);
    r->last_err = *d;
    r->has_err = true;
    pthread_mutex_unlock(&r->mu);
}

bool remote_last_error(struct remote *r, struct gguf_diag *out)
{
    pthread_mutex_lock(&r->mu);
    bool has = r->has_err;
    if (has)
        *out = r->last_err;
    pthread_mutex_unlock(&r->mu);
    return has;
}

ssize_t remote_read_diag(struct remote *r, void *buf, size_t len, uint64_t off,
                         struct gguf_diag *diag)
{
    if (off >= r->size || len == 0)
        return 0;
    if (len > r->size - off)
        len = (size_t)(r->size - off);
    if (len > (size_t)SSIZE_MAX)
        len = (size_t)SSIZE_MAX & ~(size_t)4095;
    struct gguf_diag d;
    char shown[100];
    remote_url_redact_to(r->url, shown, sizeof shown);
    if (atomic_load(&r->changed)) {
        gguf_diag_set(&d, GGUF_E_IO, UINT64_MAX, "%s: the file changed since it was opened "
                      "(reading bytes %llu-%llu)", shown, (unsigned long long)off,
                      (unsigned long long)(off + len - 1));
        atomic_fetch_add(&r->n_errors, 1);
        if (diag)
            *diag = d;
        return -EIO;
    }
    struct slot *s = acquire(r, false);
    if (!s) {
        gguf_diag_set(&d, GGUF_E_NOMEM, UINT64_MAX, "%s: out of memory (libcurl handle)", shown);
        record_error(r, &d);
        if (diag)
            *diag = d;
        return -ENOMEM;
    }
    struct xfer x = { .r = r, .s = s, .kind = K_RANGE, .off = off,
                      .last = off + len - 1, .buf = buf };
    enum outcome o = fetch(&x, NULL);
    release(r, s);
    if (o == O_OK)
        return (ssize_t)len;
    if (o == O_CHANGED)
        atomic_store(&r->changed, true);
    atomic_fetch_add(&r->n_errors, 1);
    gguf_diag_set(&d, o == O_NOMEM ? GGUF_E_NOMEM : GGUF_E_IO, UINT64_MAX,
                  "%s: %s (reading bytes %llu-%llu)", shown, x.msg,
                  (unsigned long long)off, (unsigned long long)(off + len - 1));
    record_error(r, &d);
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
static size_t stream_take(struct xfer *x, const char *p, size_t len)
{
    struct remote_stream *st = x->st;
    if (len > x->cap - x->got) {
        fail(x, O_FATAL, "the server sent more than the %zu bytes it announced", x->cap);
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
        fail(x, O_FATAL, "stream stopped");
        return 0;
    }
    return len;
}

static void *stream_main(void *arg)
{
    struct remote_stream *st = arg;
    enum outcome o = perform(&st->x, st->url);
    if (o == O_CHANGED) {
        atomic_store(&st->r->changed, true);
        struct gguf_diag d;
        char shown[140];
        gguf_diag_set(&d, GGUF_E_IO, UINT64_MAX, "%s: %s (streaming from byte %llu)",
                      remote_url_redact_to(st->r->url, shown, sizeof shown), st->x.msg,
                      (unsigned long long)st->x.off);
        record_error(st->r, &d);
    }
    pthread_mutex_lock(&st->mu);
    st->ended = true;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

struct remote_stream *remote_stream_start(struct remote *r, uint64_t off)
{
    if (off >= r->size || atomic_load(&r->changed))
        return NULL;
    struct remote_stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->url = current_url(r);
    if (!st->url) {
        free(st);
        return NULL;
    }
    st->s = acquire(r, true);
    if (!st->s) {
        free(st->url);
        free(st);
        return NULL;
    }
    st->r = r;
    st->pos = off;
    atomic_init(&st->cancel, false);
    st->x = (struct xfer){ .r = r, .s = st->s, .kind = K_STREAM, .off = off,
                           .last = r->size - 1, .cap = (size_t)(r->size - off), .st = st };
    if ((uint64_t)st->x.cap != r->size - off)
        st->x.cap = SIZE_MAX;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    if (pthread_create(&st->th, NULL, stream_main, st) != 0) {
        pthread_mutex_destroy(&st->mu);
        pthread_cond_destroy(&st->cv);
        release(r, st->s);
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
    release(st->r, st->s);
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

void remote_close(struct remote *r)
{
    free_remote(r);
}

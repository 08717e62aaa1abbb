/*
 * remote/http_xfer.c — one request of a struct remote and the loop around it
 * (see http.h, "Reading"): the header and body callbacks decide on each
 * answer (status, Content-Range, validators against those of the open)
 * before a byte of its body is used, and put the body where it goes (the
 * caller's buffer, the stream, or drained); a transfer's end is classified
 * (done, redirect, retry, expired, changed, fatal); rh_fetch follows
 * redirects by hand, retries with backoff (Retry-After honoured) and
 * resolves an expired final URL again from the original one.  An object in
 * a store (r->store) also goes through http_store.c's hooks: before each
 * request (signing), on each header line, and on each request's outcome
 * (its error document).
 */
#include "http_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- small things ----------------------------------------------------------- */

char *rh_dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

uint64_t rh_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void rh_set_silent(struct remote *r, uint64_t now)
{
    atomic_store(&r->silent_ns, now);
    pthread_mutex_lock(&r->pool_mu);
    pthread_cond_broadcast(&r->pool_cv);
    pthread_mutex_unlock(&r->pool_mu);
}

bool rh_silenced(struct remote *r, uint64_t since_ns)
{
    uint64_t s = atomic_load(&r->silent_ns);
    return s && s > since_ns && atomic_load(&r->progress_ns) < s;
}

uint64_t rh_silent_since(struct remote *r, uint64_t now)
{
    uint64_t s = atomic_load(&r->silent_ns);
    return s && now - s < SILENT_HOLD_NS && atomic_load(&r->progress_ns) < s ? s : 0;
}

bool rh_probe_over(struct remote *r, uint64_t silent, uint64_t now)
{
    return silent && now >= silent + SILENT_HOLD_NS && atomic_load(&r->progress_ns) < silent;
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

/* printf into x->msg; returns false (for "return rh_fail(...)" in callbacks). */
__attribute__((format(printf, 3, 4)))
bool rh_fail(struct xfer *x, enum outcome o, const char *fmt, ...)
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
        rh_fail(x, o, "HTTP %d (%s)", status, reason);
    else
        rh_fail(x, o, "HTTP %d", status);
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
            return rh_fail(x, O_CHANGED, "the file changed since it was opened: the answer has "
                        "no ETag (it was %s)", clean(r->etag, a, sizeof a, 40));
        if (strcmp(h->etag, r->etag) != 0)
            return rh_fail(x, O_CHANGED, "the file changed since it was opened: ETag %s is now %s",
                        clean(r->etag, a, sizeof a, 40), clean(h->etag, b, sizeof b, 40));
    }
    if (r->has_lm) {
        if (!h->has_lm && r->lm_required)
            return rh_fail(x, O_CHANGED, "the file may have changed since it was opened: the "
                        "answer has no Last-Modified (it was %s)", r->lm_raw);
        if (h->has_lm && h->lm != r->lm)
            return rh_fail(x, O_CHANGED, "the file changed since it was opened: Last-Modified "
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
        return rh_fail(x, O_FATAL, "the server sent %s", h->bad_what);
    if (st == 206) {
        const struct remote_crange *c = &h->crange;
        if (!h->has_crange || c->unsatisfied)
            return rh_fail(x, O_FATAL, "the server answered a range request with 206 but "
                        "no Content-Range");
        if (!c->complete_known)
            return rh_fail(x, O_FATAL, "the server's Content-Range does not give the file's size");
        if (h->encoded)
            return rh_fail(x, O_FATAL, "the server sent a range with a Content-Encoding (not "
                        "the file's bytes)");
        if (h->has_clen && h->clen != c->last - c->first + 1)
            return rh_fail(x, O_FATAL, "the server's Content-Length %llu disagrees with its "
                        "Content-Range bytes %llu-%llu", (unsigned long long)h->clen,
                        (unsigned long long)c->first, (unsigned long long)c->last);
        if (x->kind == K_OPEN) {
            uint64_t want = c->complete < REMOTE_PREFIX_SIZE ? c->complete : REMOTE_PREFIX_SIZE;
            if (c->first != 0 || c->last != want - 1)
                return rh_fail(x, O_FATAL, "the server answered bytes %llu-%llu of %llu to a "
                            "request of bytes 0-%u", (unsigned long long)c->first,
                            (unsigned long long)c->last, (unsigned long long)c->complete,
                            REMOTE_PREFIX_SIZE - 1);
            x->sink = S_BUF;
            x->cap = (size_t)want;
            return true;
        }
        if (c->complete != r->size)
            return rh_fail(x, O_CHANGED, "the file changed since it was opened: its size was "
                        "%llu, is now %llu", (unsigned long long)r->size,
                        (unsigned long long)c->complete);
        if (!validators_ok(x))
            return false;
        if (c->first != x->off || c->last != x->last)
            return rh_fail(x, O_FATAL, "the server answered bytes %llu-%llu to a request of "
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
            return rh_fail(x, O_FATAL, "the server ignores Range requests (200 with a "
                        "Content-Encoding)");
        return rh_fail(x, O_FATAL, "the server ignores Range requests (it answered 200 with "
                    "%s%llu bytes)", h->has_clen ? "" : "more than ",
                    (unsigned long long)(h->has_clen ? h->clen : REMOTE_PREFIX_SIZE));
    }
    if (st == 412 && x->kind != K_OPEN)
        return rh_fail(x, O_CHANGED, "the file changed since it was opened (HTTP 412: the "
                    "server's precondition on its identity failed)");
    if (st == 416) {
        if (x->kind == K_OPEN && h->has_crange && h->crange.unsatisfied &&
            h->crange.complete == 0) {
            x->empty = true;
            x->sink = S_DRAIN;
            return true;
        }
        if (x->kind != K_OPEN)
            return rh_fail(x, O_CHANGED, "the file changed since it was opened: HTTP 416 for "
                        "bytes %llu-%llu of %llu", (unsigned long long)x->off,
                        (unsigned long long)x->last, (unsigned long long)r->size);
    }
    /* redirects and errors: their bodies are not looked at */
    x->sink = S_DRAIN;
    return true;
}

size_t rh_on_header(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = size * n;
    if (x->r->store)
        rh_store_header(x, p, len);
    enum remote_hdr_step step = remote_resp_line(&x->s->resp, p, len, (int64_t)time(NULL));
    if (step == REMOTE_HDR_FAIL) {
        rh_fail(x, O_FATAL, "the server sent %s", x->s->resp.bad_what);
        return 0;
    }
    if (step == REMOTE_HDR_END && !decide(x))
        return 0;
    return len;
}
size_t rh_on_body(char *p, size_t size, size_t n, void *arg)
{
    struct xfer *x = arg;
    size_t len = size * n;
    atomic_fetch_add_explicit(&x->r->n_bytes, len, memory_order_relaxed);
    switch (x->sink) {
    case S_BUF:
        if (len > x->cap - x->got) {
            if (x->kind == K_OPEN && x->s->resp.status == 200)
                rh_fail(x, O_FATAL, "the server ignores Range requests (it answered 200 with "
                     "more than %u bytes)", REMOTE_PREFIX_SIZE);
            else
                rh_fail(x, O_FATAL, "the server sent more than the %zu bytes it announced",
                     x->cap);
            return 0;
        }
        memcpy(x->buf + x->got, p, len);
        x->got += len;
        return len;
    case S_DRAIN:
        if (x->ebody_len < sizeof x->ebody) {
            size_t k = sizeof x->ebody - x->ebody_len < len ? sizeof x->ebody - x->ebody_len : len;
            memcpy(x->ebody + x->ebody_len, p, k);
            x->ebody_len += k;
        }
        x->drained += len;
        if (x->drained > DRAIN_MAX) {
            x->drain_cut = true;
            return 0;
        }
        return len;
    case S_STREAM:
        return rh_stream_take(x, p, len);
    default:
        rh_fail(x, O_FATAL, "the server sent a body before its headers");
        return 0;
    }
}

/* The read's deadline: timeout_s past its clock (http_int.h, since_ns). */
static uint64_t deadline_ns(const struct xfer *x)
{
    return x->since_ns + (uint64_t)x->r->timeout_s * 1000000000u;
}

/* Called by libcurl while a transfer runs (often while bytes arrive, about
 * once a second while none do): a stream told to stop ends; a read's clock
 * moves on each KiB of its answer (REMOTE_LOW_SPEED bytes), and a read
 * whose clock ran past its timeout ends (a trickle of a few bytes moves
 * nothing) — if nothing came to any other read meanwhile either, the
 * server is silent (rh_set_silent) — and so does a read that waited
 * through a silence found by another. */
int rh_on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt;
    (void)ut;
    (void)un;
    struct xfer *x = arg;
    if (x->st && atomic_load(&x->st->cancel))
        return 1;
    if (!x->since_ns)
        return 0;
    uint64_t now = rh_now_ns();
    if (dn >= 0 && (uint64_t)dn >= x->mark + REMOTE_LOW_SPEED) {
        x->mark = (uint64_t)dn;
        x->since_ns = now;
        atomic_store(&x->r->progress_ns, now);
        return 0;
    }
    /* libcurl calls about once a second while nothing comes, counted from
     * the request's start, which is the clock's start or just after it: a
     * call a few milliseconds short of the deadline is taken as on it,
     * rather than a second late */
    if (now + 20000000u >= deadline_ns(x)) {
        if (atomic_load(&x->r->progress_ns) <= x->since_ns)
            rh_set_silent(x->r, now);
        rh_fail(x, O_TIMEDOUT, "timed out: nothing came for %u s (timeout=%u)",
                x->r->timeout_s, x->r->timeout_s);
        return 1;
    }
    if (rh_silenced(x->r, x->since_ns) || rh_probe_over(x->r, x->probe_of, now)) {
        rh_fail(x, O_TIMEDOUT, "timed out: the server has sent nothing for %u s "
                "(timeout=%u)", x->r->timeout_s, x->r->timeout_s);
        return 1;
    }
    return 0;
}

/* ---- one request -------------------------------------------------------------- */

static enum outcome transport_error(struct xfer *x, CURLcode rc)
{
    char e[CURL_ERROR_SIZE];
    const char *text = x->s->err[0] ? x->s->err : curl_easy_strerror(rc);
    clean(text, e, sizeof e, 150);
    switch (rc) {
    case CURLE_OUT_OF_MEMORY:
        rh_fail(x, O_NOMEM, "out of memory");
        return O_NOMEM;
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
        rh_fail(x, O_FATAL, "%s", e);
        return O_FATAL;
    case CURLE_COULDNT_RESOLVE_HOST:
        /* at open a name that does not resolve is a typo, not a hiccup */
        rh_fail(x, x->at_open ? O_FATAL : O_RETRY, "name resolution failed: %s", e);
        return x->why;
    case CURLE_SSL_CONNECT_ERROR:
        rh_fail(x, x->at_open ? O_FATAL : O_RETRY, "TLS: %s", e);
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
        rh_fail(x, O_FATAL, "TLS: %s", e);
        return O_FATAL;
    case CURLE_OPERATION_TIMEDOUT:
        rh_fail(x, O_RETRY, "timed out: %s", e);
        return O_RETRY;
    case CURLE_COULDNT_CONNECT:
        rh_fail(x, O_RETRY, "cannot connect: %s", e);
        return O_RETRY;
    default:
        /* resets, short bodies, HTTP/2 stream errors, ... */
        rh_fail(x, O_RETRY, "%s", e);
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
        rh_fail(x, O_RETRY, "the connection closed before an answer");
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
            rh_fail(x, O_RETRY, "the body ended after %zu of %zu bytes", x->got, want);
            return O_RETRY;
        }
        return O_OK;
    }
    if (x->empty)
        return O_OK;
    if (is_redirect(st)) {
        if (!h->has_location)
            return rh_fail(x, O_FATAL, "a redirect (HTTP %d) without a Location", st), O_FATAL;
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

enum outcome rh_perform(struct xfer *x, const char *url)
{
    struct remote *r = x->r;
    struct slot *s = x->s;
    CURL *h = s->h;
    x->got = 0;
    x->sink = S_NONE;
    x->drained = 0;
    x->drain_cut = false;
    x->ebody_len = 0;
    x->region_hdr[0] = '\0';
    x->empty = false;
    x->why = O_OK;
    x->msg[0] = '\0';
    x->mark = 0;
    remote_resp_init(&s->resp);
    s->err[0] = '\0';

    char range[48];
    if (x->kind == K_STREAM && x->last == r->size - 1)
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
    if (r->store)
        oom |= !rh_store_prepare(x, url, &hl);
    enum outcome o;
    if (oom) {
        rh_fail(x, O_NOMEM, "out of memory");
        o = O_NOMEM;
    } else {
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_RANGE, range);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, x->kind == K_STREAM || x->since_ns ? 0L : 1L);
        /* connecting may take timeout_s, and no longer than a read has left */
        uint64_t conn_ms = (uint64_t)r->timeout_s * 1000;
        if (x->since_ns) {
            uint64_t now = rh_now_ns(), dl = deadline_ns(x);
            uint64_t left = dl > now ? (dl - now) / 1000000 : 0;
            conn_ms = left < conn_ms ? left : conn_ms;
            if (conn_ms < 1)
                conn_ms = 1;
        }
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)conn_ms);
        atomic_fetch_add_explicit(&r->n_requests, 1, memory_order_relaxed);
        CURLcode rc = curl_easy_perform(h);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        o = classify(x, rc);
        if (r->store)
            o = rh_store_outcome(x, o);
    }
    for (t = hl; t; t = t->next)
        explicit_bzero(t->data, strlen(t->data));
    curl_slist_free_all(hl);
    return o;
}

/* ---- requests with redirects, retries and re-resolving ---------------------------- */

char *rh_current_url(struct remote *r)
{
    pthread_mutex_lock(&r->mu);
    char *u = rh_dup_str(r->final_url);
    pthread_mutex_unlock(&r->mu);
    return u;
}

/* Runs x to the end: O_OK, or the failure with x->msg.  At open (final
 * non-NULL) it starts from the original URL and returns the final one. */
enum outcome rh_fetch(struct xfer *x, char **final)
{
    struct remote *r = x->r;
    char *url = x->at_open ? rh_dup_str(r->url) : rh_current_url(r);
    if (!url)
        return rh_fail(x, O_NOMEM, "out of memory"), O_NOMEM;
    unsigned hops = 0, retries = 0;
    bool reresolved = false, resolving = x->at_open;
    for (;;) {
        enum outcome o = rh_perform(x, url);
        const struct remote_resp *h = &x->s->resp;
        if (o != O_OK && x->kind == K_RANGE && x->got) {
            /* part of a checked body arrived (a 206 of this identity):
             * the next attempt, if any, asks for the rest only */
            x->done += x->got;
            x->off += x->got;
            x->buf += x->got;
            x->got = 0;
            if (x->off > x->last && (o == O_RETRY || o == O_TIMEDOUT))
                o = O_OK;       /* every byte came; only the ending failed */
        }
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
                rh_fail(x, O_FATAL, "more than %d redirects", REMOTE_MAX_REDIRECTS);
                free(url);
                return O_FATAL;
            }
            char *next = remote_url_resolve(url, h->location);
            if (!next) {
                rh_fail(x, O_FATAL, "a redirect (HTTP %d) to a Location that is not an http:// "
                     "or https:// URL", h->status);
                free(url);
                return O_FATAL;
            }
            if (remote_url_is_downgrade(url, next)) {
                rh_fail(x, O_FATAL, "a redirect from https:// to http:// (refused)");
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
            url = rh_dup_str(r->url);
            if (!url)
                return rh_fail(x, O_NOMEM, "out of memory"), O_NOMEM;
            continue;
        case O_TIMEDOUT: {
            /* the read's timeout ran out during a request */
            size_t n = strlen(x->msg);
            if (retries)
                snprintf(x->msg + n, sizeof x->msg - n, " (after %u retries)", retries);
            free(url);
            return O_FATAL;
        }
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
            /* a read does not wait past its timeout for a retry: what it
             * would then get is an answer later than it may wait; nor
             * retry while the server is found silent */
            uint64_t woken = rh_now_ns() + ms * 1000000u;
            if (x->since_ns && (woken >= deadline_ns(x) || rh_silenced(r, x->since_ns) ||
                                rh_probe_over(r, x->probe_of, woken))) {
                size_t n = strlen(x->msg);
                snprintf(x->msg + n, sizeof x->msg - n, " (after %u retries; no time left "
                         "for another within timeout=%u)", retries, r->timeout_s);
                free(url);
                return O_FATAL;
            }
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

/*
 * remote/http_int.h — the insides of a struct remote (remote/http.h), shared
 * by the files that implement it; nothing outside remote/http_*.c includes
 * this.  remote/http.h is the manual of what they promise together:
 *
 *   http_pool.c   the libcurl easy-handle pool and the share object's locks
 *   http_xfer.c   one request (callbacks that check each answer before a
 *                 byte of it is used, the outcome of a transfer) and the
 *                 loop around it: redirects, retries with backoff,
 *                 re-resolving an expired URL
 *   http_open.c   remote_open (the first request: size, identity, prefix)
 *                 and remote_close
 *   http_read.c   validated range reads, the header stream, the accessors
 *
 * Functions shared between these files carry the prefix rh_.
 */
#ifndef REMOTE_HTTP_INT_H
#define REMOTE_HTTP_INT_H

#include "http.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>

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
    size_t done;                /* K_RANGE: bytes of earlier attempts (a retry
                                   asks for the rest: off and buf moved on) */
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

/* ---- http_xfer.c ---------------------------------------------------------------- */

char *rh_dup_str(const char *s);
/* printf into x->msg; returns false (for "return rh_fail(...)" in callbacks). */
__attribute__((format(printf, 3, 4)))
bool rh_fail(struct xfer *x, enum outcome o, const char *fmt, ...);
size_t rh_on_header(char *p, size_t size, size_t n, void *arg);
size_t rh_on_body(char *p, size_t size, size_t n, void *arg);
int rh_on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un);
/* One request of x to url (no redirect followed): its outcome, x->msg. */
enum outcome rh_perform(struct xfer *x, const char *url);
/* The final URL now (a copy), or NULL when memory is short. */
char *rh_current_url(struct remote *r);
/* Runs x to the end: O_OK, or the failure with x->msg.  At open (final
 * non-NULL) it starts from the original URL and returns the final one. */
enum outcome rh_fetch(struct xfer *x, char **final);

/* ---- http_pool.c ----------------------------------------------------------------- */

void rh_share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg);
void rh_share_unlock(CURL *h, curl_lock_data data, void *arg);
/* A free handle (waiting for one while all are busy unless try_only);
 * NULL when none can be made. */
struct slot *rh_acquire(struct remote *r, bool try_only);
void rh_release(struct remote *r, struct slot *s);

/* ---- http_read.c ----------------------------------------------------------------- */

/* The body callback of a stream: hands p over to the reader's buffers,
 * waiting for them; 0 (ends the transfer) when stopped. */
size_t rh_stream_take(struct xfer *x, const char *p, size_t len);

#endif

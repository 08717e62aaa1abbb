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
 *   http_store.c  an object in a store (s3://, gs://): signing, the error
 *                 documents, a bucket in another region (hooks called by
 *                 http_xfer.c and http_open.c when r->store is set)
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
/* failures kept for remote_error_at */
#define REMOTE_ERRORS_KEPT 16
/* how long after the server was found silent reads starting then may
 * wait for it at most */
#define SILENT_HOLD_NS 1000000000ull
/* The first bytes of an error body kept for http_store.c (an S3 error
 * document is a few hundred bytes). */
#define EBODY_MAX 4096

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
    struct rh_store *store;     /* s3:// or gs:// (http_store.c), or NULL */
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

    pthread_mutex_t mu;         /* final_url, errs */
    char *final_url;
    /* the latest failures (a ring, errs_n of them, the newest at
     * (errs_next - 1)): what each was reading and why it failed */
    struct rh_error {
        uint64_t first, last;
        struct gguf_diag d;
    } errs[REMOTE_ERRORS_KEPT];
    unsigned errs_n, errs_next;

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
    /* when a read last received a KiB, or ended well (CLOCK_MONOTONIC ns,
     * 0: never): a read that waited for a handle meanwhile starts its
     * clock there */
    _Atomic uint64_t progress_ns;
    /* when a read found the server silent: nothing came from it, to any
     * request, for the whole of that read's timeout (0: never).  Unless
     * something comes, the reads that waited meanwhile fail, and those that
     * start within SILENT_HOLD_NS of it wait no longer than that (http.h,
     * "Timeouts") */
    _Atomic uint64_t silent_ns;
    _Atomic uint64_t n_requests, n_bytes, n_retries, n_redirects, n_reresolves, n_errors;
};

enum kind { K_OPEN, K_RANGE, K_STREAM };
/* O_REGION: a store's bucket is in another region (x->region_hdr), at open */
enum outcome { O_OK, O_REDIRECT, O_RETRY, O_EXPIRED, O_CHANGED, O_FATAL, O_NOMEM, O_TIMEDOUT,
               O_REGION };
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
    /* K_RANGE: the read's clock (http.h, "Timeouts"), CLOCK_MONOTONIC ns:
     * its start, moved on each time a KiB of its answer arrives; the read
     * gives up timeout_s after it.  0: no deadline (the open, streams). */
    uint64_t since_ns;
    /* K_RANGE started within SILENT_HOLD_NS of the server found silent: when
     * it was (the read ends SILENT_HOLD_NS after it unless something comes
     * from the server); 0: not */
    uint64_t probe_of;
    uint64_t mark;              /* body bytes of this request at that move */
    enum outcome why;           /* set when a callback ended the transfer */
    char msg[256];              /* what went wrong, for any outcome but O_OK */
    char ebody[EBODY_MAX];      /* the start of a drained (error) body */
    size_t ebody_len;
    char region_hdr[64];        /* a store's x-amz-bucket-region, or "" */
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
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t rh_now_ns(void);
/* The server was found silent now (see silent_ns): wakes the reads that
 * wait for a handle, so that they fail. */
void rh_set_silent(struct remote *r, uint64_t now);
/* Whether a read whose clock was last at since_ns (its start, or its last
 * KiB) waited through a silence of the server that is still on: true once
 * the server was found silent after since_ns and nothing came since. */
bool rh_silenced(struct remote *r, uint64_t since_ns);
/* For a read starting now: the time the server was found silent if that
 * was less than SILENT_HOLD_NS ago and nothing came since (the read then
 * waits no later than SILENT_HOLD_NS after it), else 0. */
uint64_t rh_silent_since(struct remote *r, uint64_t now);
/* Whether a read started after the server was found silent at silent
 * (rh_silent_since) has waited long enough: now is SILENT_HOLD_NS past
 * it, and nothing came since. */
bool rh_probe_over(struct remote *r, uint64_t silent, uint64_t now);
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

/* ---- http_store.c ---------------------------------------------------------------- */

struct remote_store;
struct rh_store;
/* r->store for the object name in cfg, and r->url its URL; bearer: a
 * bearer token goes with the requests (gs://). */
enum gguf_err rh_store_open(struct remote *r, const struct remote_store *cfg, const char *name,
                            bool bearer, struct gguf_diag *d);
void rh_store_free(struct rh_store *s);
/* Lines for the info file: where the store is, its region, whose credentials. */
const char *rh_store_info(const struct rh_store *s);
/* Before a request of x to url: signing and its headers; false when memory
 * is short. */
bool rh_store_prepare(struct xfer *x, const char *url, struct curl_slist **hl);
/* Each header line of an answer. */
void rh_store_header(struct xfer *x, const char *line, size_t len);
/* After a request: the outcome o, or another one, with x->msg from the
 * answer's error document. */
enum outcome rh_store_outcome(struct xfer *x, enum outcome o);
/* The object in region: r->url and the signing scope; false when memory
 * is short. */
bool rh_store_move(struct remote *r, const char *region);

/* ---- http_pool.c ----------------------------------------------------------------- */

void rh_share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg);
void rh_share_unlock(CURL *h, curl_lock_data data, void *arg);
/* A free handle (waiting for one while all are busy unless try_only);
 * NULL when none can be made. */
struct slot *rh_acquire(struct remote *r, bool try_only);
/* The same for a read that started at start_ns: it waits no longer than
 * timeout_s past the later of start_ns and the last KiB any read of r
 * received (a busy pool of working transfers is no stall; a stalled one
 * is), nor once the server is found silent while it waits, nor, for a read
 * started within SILENT_HOLD_NS of a silence found at probe_of (non-zero),
 * past the end of that.  NULL with *timed_out true when that came, false
 * when no handle can be made. */
struct slot *rh_acquire_by(struct remote *r, uint64_t start_ns, uint64_t probe_of,
                           bool *timed_out);
void rh_release(struct remote *r, struct slot *s);

/* ---- http_read.c ----------------------------------------------------------------- */

/* The body callback of a stream: hands p over to the reader's buffers,
 * waiting for them; 0 (ends the transfer) when stopped. */
size_t rh_stream_take(struct xfer *x, const char *p, size_t len);

#endif

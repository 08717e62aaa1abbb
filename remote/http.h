/*
 * remote/http.h — one remote object read by HTTP range requests (libcurl).
 *
 * A struct remote is a file on an HTTP(S) server, pinned to one version of
 * its bytes when it is opened.  It reads byte ranges, following redirects
 * by hand, retrying what can be retried, and refusing whatever cannot be
 * shown to be bytes of that version.  It performs no printing and no
 * logging: errors come back as a one-line message (struct gguf_diag), in
 * which every URL is redacted (remote/url.h).  No FUSE header.
 *
 * Opening (remote_open) costs one request, plus one per redirect:
 *   GET URL with "Range: bytes=0-2097151" (REMOTE_PREFIX_SIZE), redirects
 *   followed by hand (at most REMOTE_MAX_REDIRECTS; 301/302/303/307/308,
 *   only to http:// or https://, never from https:// down to http://).
 *   The answer fixes:
 *   - the size: COMPLETE of "Content-Range: bytes 0-LAST/COMPLETE"; a 200
 *     (the server ignored the Range) is accepted only when its body is at
 *     most REMOTE_PREFIX_SIZE bytes — that body is then the whole file —
 *     and otherwise refused ("server ignores Range requests") as soon as
 *     its headers say so, before any of the body is taken in.  A 416 with
 *     "bytes * /0" is an empty file.
 *   - the identity: "etag:TAG" for a strong ETag (TAG as sent, quotes
 *     included), else "lm:SECONDS:SIZE" for a Last-Modified date, else
 *     "size:SIZE" (then a change that keeps the size cannot be seen).
 *   - the final URL (after the redirects): later reads go there directly.
 *     Hub "resolve" URLs redirect to presigned CDN URLs that expire; a
 *     read answered 401, 403 or 410 resolves again from the original URL,
 *     once per read, and keeps the new final URL.
 *   - the prefix: the first REMOTE_PREFIX_SIZE bytes (or the whole file),
 *     kept for the header parser until remote_drop_prefix.
 *
 * Reading (remote_read, from any number of threads at once):
 *   one request "Range: bytes=OFF-END" to the final URL, conditional on
 *   the identity ("If-Match: TAG" for a strong ETag, else
 *   "If-Unmodified-Since: DATE" for a Last-Modified), and every answer is
 *   checked before a byte of its body is used:
 *   - 206 with Content-Range "bytes OFF-END/SIZE" exactly (first, last and
 *     complete length), a Content-Length (if any) that agrees, no
 *     Content-Encoding, and the same validators as at open (the ETag if
 *     there was one — present and byte-equal; the Last-Modified if the
 *     identity rests on it).  The body goes straight into the caller's
 *     buffer; one byte more than asked ends the transfer at once.  Nothing
 *     is buffered beyond len.
 *   - a changed size, ETag or Last-Modified, 412 (If-Match failed) or 416
 *     (the range is gone): the remote changed.  -EIO, and remote_changed()
 *     is true from then on (the caller logs it once).  No byte of that
 *     answer reaches the buffer.
 *   - 200 to a range request, a wrong first or last byte, a malformed
 *     header, a body longer than announced: the server is broken; -EIO.
 *   - retried, up to max_retries times with a delay of 100 ms x 2^k
 *     (k = 0, 1, ...; at most timeout_s), as long as the read's timeout
 *     leaves time for it (see "Timeouts"): 5xx, 408, 429, connection
 *     failures and resets, timeouts, bodies that end short, failed name
 *     resolution.  A Retry-After on 429/503 replaces the delay, capped to
 *     timeout_s.  When part of a checked body had arrived, the next
 *     request asks for the rest only (its answer is checked the same way:
 *     "bytes REST-END/SIZE", the same validators).  The request of
 *     remote_open is retried the same way (from its start),
 *     except that a name that does not resolve and a failed TLS handshake
 *     end it at once (they are not hiccups there).
 *   - 401, 403, 410: resolved again from the original URL (see above),
 *     then the read goes on; a second one in the same read is an error.
 *   - other statuses (404, ...): -EIO at once.
 *   A read past the end is short (like pread); off at or past the end
 *   reads 0 bytes without a request.
 *
 * Timeouts: connecting (DNS, TCP, TLS) may take timeout_s seconds; a
 * transfer (waiting for the answer or receiving the body) is aborted when
 * it moves fewer than REMOTE_LOW_SPEED bytes per second for timeout_s
 * seconds.  A read (remote_read) has, besides, a clock: it starts when the
 * read is called and moves on each time a KiB (REMOTE_LOW_SPEED bytes) of
 * its answer arrives; the read fails (-EIO, "timed out: nothing came for
 * N s") once timeout_s passed on it, retries, redirects and waiting for a
 * pooled handle included: a retry whose delay would end past it is not
 * made (the read fails at once, after the failure it would retry).  So a
 * read that receives nothing — a stalled server — waits timeout_s and then
 * fails (libcurl looks about once a second: a few milliseconds more, at
 * most a second), and one that keeps receiving goes on however long the
 * answer takes.  A read waiting for a handle while every handle is busy
 * starts its clock anew each time any read of the remote receives a KiB
 * (a busy pool of working transfers is no stall).
 * When a read's clock runs out while nothing came to any read of the
 * remote either, the server is silent: the reads that waited through it
 * fail at once (they would get nothing either), and a read that starts
 * within a second of it waits at most until that second is over (a
 * request held back meanwhile — by the kernel's queue of FUSE requests, or
 * a queue of fetches — does not wait a whole timeout more), unless
 * something comes from the server meanwhile.  Later reads wait their whole
 * timeout again: a server that comes back is read from again.
 * The open (remote_open) and streams are bounded per request only, as
 * above, with their retries.  No read waits more than about timeout_s
 * while nothing arrives from the server.
 *
 * The token (bearer_token) is sent as "Authorization: Bearer TOKEN" only
 * to URLs of the same origin as the original URL (scheme, host and port:
 * remote_url_same_origin), so never to the CDN a hub redirects to.  It is
 * never part of a message; libcurl's verbose output is never turned on.
 * TLS peers are always verified (against ca_file when given, else the
 * system's CAs); there is no switch to turn that off.
 *
 * Object stores (opts->store, remote/s3.h; http_store.c): opts->url is
 * then an object's name, s3://BUCKET/KEY or gs://BUCKET/OBJECT, shown as
 * it is (remote_display_url), and the requests go to the store's URL of
 * it.  An s3:// request to that URL's origin, when the store has
 * credentials, is signed by libcurl (CURLOPT_AWS_SIGV4 "aws:amz:REGION:s3",
 * the access key and secret as CURLOPT_USERNAME and CURLOPT_PASSWORD),
 * with "x-amz-content-sha256: UNSIGNED-PAYLOAD" and, with a session token,
 * "x-amz-security-token"; a request elsewhere, or of a store without
 * credentials, is not.  (gs:// objects take a bearer token, as above.)
 * The error document of a failed answer (the first EBODY_MAX bytes of its
 * body) makes the message: its Code and Message, and for what a user can
 * act on, what they mean — the credentials of (who) refused
 * (SignatureDoesNotMatch, InvalidAccessKeyId), an expired or refused
 * session token (ExpiredToken: a new mount reads new credentials), access
 * denied to the key (AccessDenied), no such bucket or key — or, without
 * one, that the server does not seem to be an S3 (or Cloud Storage)
 * endpoint.  A 401, 403 or 410 of a store is not an expired URL: it is
 * not resolved again.  A bucket in another region (301 or 400 naming it,
 * by x-amz-bucket-region or the document's Region) is asked again in that
 * region at open, once (one request more), and remote_store_lines says so.
 *
 * Connections: a pool of up to `connections` libcurl easy handles; a read
 * takes one (waiting while all are busy) and gives it back, most recently
 * used first, so that a handle's open connection (HTTP/1.1 keep-alive, or
 * HTTP/2 when the server offers it over TLS) is reused.  The handles share
 * their DNS cache and TLS sessions (a libcurl share object).  They do not
 * share one connection cache: libcurl does not support using shared
 * connections from concurrent threads.
 *
 * Streaming (remote_stream_*): one request "bytes=OFF-LAST" (or "OFF-")
 * read sequentially, for the header parser when a header is longer than
 * the prefix: the bytes are handed over in the order they arrive, straight
 * into the reader's buffers (the transfer waits while nobody reads: at
 * most one libcurl buffer is held, and TCP's flow control holds the
 * server back — but not before it has filled its socket buffers, which is
 * why remote/source.c bounds the range).  Any failure simply ends the
 * stream; the reader then goes on with remote_read, which retries.
 * remote_stream_stop aborts the transfer (if the range is not done).
 */
#ifndef REMOTE_HTTP_H
#define REMOTE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gguf/diag.h"

#define REMOTE_PREFIX_SIZE (2u << 20)
#define REMOTE_MAX_REDIRECTS 10
#define REMOTE_LOW_SPEED 1024           /* bytes per second */
#define REMOTE_DEFAULT_CONNECTIONS 8
#define REMOTE_DEFAULT_TIMEOUT 30
#define REMOTE_DEFAULT_RETRIES 5
#define REMOTE_MAX_CONNECTIONS 256
#define REMOTE_MAX_TIMEOUT 3600
#define REMOTE_MAX_RETRIES 30

struct remote_store;

struct remote_opts {
    const char *url;           /* http:// or https:// (remote_url_expand); with
                                  store, s3://BUCKET/KEY or gs://BUCKET/OBJECT */
    const struct remote_store *store;  /* the object store (remote/s3.h), or NULL;
                                  copied: it may go once remote_open returned */
    const char *bearer_token;  /* or NULL; no control characters */
    const char *ca_file;       /* PEM CA bundle for TLS, or NULL: the system's */
    unsigned connections;      /* the pool; 0: REMOTE_DEFAULT_CONNECTIONS */
    unsigned timeout_s;        /* 0: REMOTE_DEFAULT_TIMEOUT */
    unsigned max_retries;      /* 0: REMOTE_DEFAULT_RETRIES */
};

struct remote;

/* Counters since open, all requests included (the open's, redirects,
 * retries, streams). */
struct remote_stats {
    uint64_t requests;      /* HTTP requests sent */
    uint64_t bytes;         /* body bytes received */
    uint64_t retries;       /* requests repeated after a retryable failure */
    uint64_t redirects;     /* redirects followed */
    uint64_t reresolves;    /* expired final URLs resolved again */
    uint64_t errors;        /* failed opens and reads */
};

/* Opens opts->url (see above).  GGUF_E_IO with a one-line message naming
 * the redacted URL and what went wrong (name resolution, connection, TLS
 * with libcurl's message, HTTP status, a refused answer); GGUF_E_NOENT,
 * with the same kind of message, when the (final) answer was 404 Not
 * Found (a split model's opener takes that as "no such shard");
 * GGUF_E_INVAL for bad options (a token with control characters, an
 * unreadable ca_file, a value out of range); GGUF_E_NOMEM. */
enum gguf_err remote_open(const struct remote_opts *opts, struct remote **out,
                          struct gguf_diag *diag);

/* Reads up to len bytes at off into buf (see above): the count (short
 * only at the end of the file) or -EIO (-ENOMEM).  Thread-safe. */
ssize_t remote_read(struct remote *r, void *buf, size_t len, uint64_t off);

/* The same, and on failure the one-line reason in diag: "URL: what went
 * wrong (reading bytes A-B)", offset UINT64_MAX. */
ssize_t remote_read_diag(struct remote *r, void *buf, size_t len, uint64_t off,
                         struct gguf_diag *diag);

/* The reason of the latest failed read or stream (of any thread), for
 * callers that only saw -EIO: false when none failed yet. */
bool remote_last_error(struct remote *r, struct gguf_diag *out);

/* The reason of the latest failed read (or stream) whose range overlaps
 * [off, off + len), among the last few failures; else the latest one, as
 * remote_last_error: for a caller whose read of those bytes failed, maybe
 * because another thread's fetch of them did (a block cache).  false when
 * none failed yet. */
bool remote_error_at(struct remote *r, uint64_t off, uint64_t len, struct gguf_diag *out);

/* True once a read found the remote changed since it was opened. */
bool remote_changed(const struct remote *r);

uint64_t remote_size(const struct remote *r);
const char *remote_identity(const struct remote *r);
/* The original URL, redacted: for messages and the info file. */
const char *remote_display_url(const struct remote *r);
void remote_get_stats(const struct remote *r, struct remote_stats *out);
/* For the info file, an object in a store: "store: ...\nregion: ...\n
 * credentials: ...\n" (where its requests go, the region and where it came
 * from, whose credentials: never a secret); NULL for an HTTP(S) URL. */
const char *remote_store_lines(const struct remote *r);

/* The first min(size, REMOTE_PREFIX_SIZE) bytes, fetched at open; NULL
 * (*len 0) after remote_drop_prefix.  remote_drop_prefix frees it: call it
 * only while no other thread uses the pointer. */
const void *remote_prefix(const struct remote *r, size_t *len);
void remote_drop_prefix(struct remote *r);

/* Frees everything.  No read, stream or other call may be in progress. */
void remote_close(struct remote *r);

/* ---- streaming (see above) ------------------------------------------------- */

struct remote_stream;

/* Starts "bytes=OFF-LAST" ("bytes=OFF-" when last is at or past the end
 * of the file) on a free pooled handle, in a thread of its own.  NULL when
 * off is at or past the end, last < off, no handle is free right now, or
 * memory or a thread is short: the caller reads with remote_read. */
struct remote_stream *remote_stream_start(struct remote *r, uint64_t off, uint64_t last);

/* Takes the next len bytes of the stream into buf, waiting for them: the
 * count taken, len unless the stream ended or failed (then the rest must
 * be read with remote_read from remote_stream_pos).  Not thread-safe: one
 * reader. */
size_t remote_stream_read(struct remote_stream *s, void *buf, size_t len);

/* The offset of the next byte remote_stream_read would take. */
uint64_t remote_stream_pos(const struct remote_stream *s);

/* Aborts the transfer (if still going), waits for its thread, frees s. */
void remote_stream_stop(struct remote_stream *s);

#endif

/*
 * remote/hdr.h — the HTTP response headers remote/ acts on, parsed by hand.
 *
 * Every byte of a response comes from a server that may be broken or
 * hostile, so the few header fields whose values decide what is done with
 * the body are parsed here, strictly, by pure functions (no allocation, no
 * I/O, no clock: "now" is an argument), which the unit tests
 * (tests/unit/test_hdr.c) and a libFuzzer harness (tests/fuzz/fuzz_http_hdr.c)
 * drive directly.  libcurl does the transport; it hands over the response
 * one header line at a time, and remote_resp_line() folds those lines into
 * a struct remote_resp.
 *
 * The fields (RFC 9110, RFC 9111):
 *
 *   status line     "HTTP/1.1 206 Partial Content", "HTTP/2 206": the code.
 *                   Each status line starts a new response (1xx interim
 *                   responses come before the final one).
 *   Content-Range   "bytes FIRST-LAST/COMPLETE"; COMPLETE may be '*'
 *                   (unknown), and an unsatisfied range is "bytes " '*'
 *                   "/COMPLETE" (416).
 *                   Decimal digits only, no sign, no overflow, at most
 *                   2^63-1, FIRST <= LAST < COMPLETE.
 *   Content-Length  decimal digits only, at most 2^63-1.
 *   ETag            W/"..." (weak) or "..." (strong); inside the quotes
 *                   only the visible ASCII characters other than '"'.
 *                   Kept exactly as sent (quotes included), at most
 *                   REMOTE_ETAG_MAX bytes: it is sent back in If-Match and
 *                   compared byte for byte.
 *   Last-Modified   an HTTP-date (IMF-fixdate, RFC 850 or asctime form),
 *                   kept as seconds since the epoch and as sent.
 *   Retry-After     delta-seconds or an HTTP-date, turned into seconds from
 *                   now (0 for a date in the past; saturating, never
 *                   wrapping).
 *   Location        kept as sent (trimmed), at most REMOTE_LOCATION_MAX
 *                   bytes of visible ASCII; resolving it against the
 *                   request's URL is remote/url.h's job.
 *   Content-Encoding  anything but "identity" means the body is not the
 *                   file's bytes.
 *
 * What is malformed:
 *   - a field remote/ relies on (Content-Range, Content-Length, Location)
 *     that does not parse, or that appears twice with different values,
 *     makes the response "bad" (bad_what says which, as a static string);
 *     the transfer is then refused.  A malformed ETag, Last-Modified or
 *     Retry-After is ignored as if absent (validation then fails where it
 *     needs them: an absent ETag does not match a recorded one).
 *   - more than REMOTE_HDR_MAX_BYTES of header lines, more than
 *     REMOTE_HDR_MAX_INTERIM interim responses, or a status line that does
 *     not parse end the transfer (REMOTE_HDR_FAIL).
 *   - lines that are not "name: value" are ignored, so are header lines
 *     after the final response's blank line (trailers).
 */
#ifndef REMOTE_HDR_H
#define REMOTE_HDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REMOTE_ETAG_MAX 200          /* bytes of an ETag kept (longer: ignored) */
#define REMOTE_LOCATION_MAX 8192     /* bytes of a Location kept (longer: bad) */
#define REMOTE_HDR_MAX_BYTES 65536   /* header bytes of one request, all responses */
#define REMOTE_HDR_MAX_INTERIM 8     /* 1xx responses before the final one */
#define REMOTE_HDR_NUM_MAX ((uint64_t)INT64_MAX) /* the largest offset, length or size */

/* A Content-Range value. */
struct remote_crange {
    bool unsatisfied;       /* "bytes * /COMPLETE" (416): first, last unset */
    bool complete_known;    /* COMPLETE was a number, not "*" */
    uint64_t first, last;   /* inclusive */
    uint64_t complete;      /* the whole representation's length */
};

/* The headers of one response, as remote_resp_line() folds them in. */
struct remote_resp {
    int status;             /* of the current response; 0 before a status line */
    bool done;              /* the final response's headers are complete */
    bool bad;               /* see above; bad_what names the field */
    const char *bad_what;
    unsigned interim;       /* 1xx responses seen */
    size_t header_bytes;    /* all header lines of this request so far */
    int last_field;         /* internal: the field of the previous line */

    bool has_crange;
    struct remote_crange crange;
    bool has_clen;
    uint64_t clen;
    bool has_etag;
    bool etag_weak;
    char etag[REMOTE_ETAG_MAX + 1];
    bool has_lm;
    int64_t lm;                 /* seconds since the epoch */
    char lm_raw[40];            /* as sent (an IMF-fixdate is 29 bytes) */
    bool has_retry_after;
    uint64_t retry_after;       /* seconds from now */
    bool has_location;
    char location[REMOTE_LOCATION_MAX + 1];
    bool encoded;               /* a Content-Encoding other than identity */
};

/* Clears r for a new request. */
void remote_resp_init(struct remote_resp *r);

enum remote_hdr_step {
    REMOTE_HDR_CONTINUE,    /* more lines to come */
    REMOTE_HDR_END,         /* this (blank) line ended the final response's
                               headers: decide about the body now (returned
                               once per request) */
    REMOTE_HDR_FAIL,        /* give up on this transfer (r->bad_what says why) */
};

/* Folds one header line (as libcurl delivers it: a status line, a
 * "name: value" line or the blank line, with or without its CR LF; len
 * bytes, not NUL-terminated, any bytes) into r.  now is the current time
 * in seconds since the epoch (for Retry-After dates). */
enum remote_hdr_step remote_resp_line(struct remote_resp *r, const char *line, size_t len,
                                      int64_t now);

/* ---- the field parsers (v: len bytes, surrounding blanks allowed) ------- */

bool remote_hdr_content_range(const char *v, size_t len, struct remote_crange *out);
bool remote_hdr_uint(const char *v, size_t len, uint64_t *out);
/* Copies the tag as sent into out (cap bytes incl. the NUL; false when it
 * does not fit or is not an entity-tag). */
bool remote_hdr_etag(const char *v, size_t len, char *out, size_t cap, bool *weak);
/* An HTTP-date (the three forms of RFC 9110 5.6.7), in seconds since the
 * epoch; years 1900-9999, a two-digit RFC 850 year means 1970-2069; the
 * day name is not checked against the date. */
bool remote_hdr_date(const char *v, size_t len, int64_t *out);
bool remote_hdr_retry_after(const char *v, size_t len, int64_t now, uint64_t *secs);
/* A status line: the code (100-999) and the HTTP version x 10. */
bool remote_hdr_status(const char *line, size_t len, int *status, int *version);

/* A short English name for an HTTP status code ("Not Found"), or "" for
 * codes without one; never the server's reason phrase (hostile text). */
const char *remote_http_reason(int status);

#endif

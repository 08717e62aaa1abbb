/*
 * tests/fuzz/fuzz_http_hdr.c — libFuzzer harness for the hand-parsed HTTP
 * response headers (remote/hdr.h).
 *
 * The input is a response's header block as a server might send it.  It
 * is cut into lines at '\n' (each keeps its '\n', as libcurl hands them
 * over), each line copied to a heap block of its exact size (ASan catches
 * a read past it), and folded
 * into a struct remote_resp with remote_resp_line.  After every line the
 * response must be consistent:
 *   - a Content-Range kept has first <= last (< complete when known), all
 *     at most 2^63-1; a Content-Length kept is at most 2^63-1;
 *   - an ETag kept is NUL-terminated within REMOTE_ETAG_MAX bytes, is "..."
 *     or W/"..." of visible ASCII; a Location kept is 1..REMOTE_LOCATION_MAX
 *     bytes of visible ASCII; a Last-Modified kept is printable and parses
 *     again to the same time;
 *   - bad (and FAIL) carry a message; the header bytes never exceed
 *     REMOTE_HDR_MAX_BYTES; END comes at most once, and after it nothing
 *     changes (trailers are ignored).
 * Then every field parser runs on the whole input as one value (placed
 * right before a PROT_NONE guard page), and what each accepts must
 * survive a round trip: a Content-Range printed back and parsed gives the
 * same numbers, an ETag copied parses to itself, a date printed as an
 * IMF-fixdate parses to the same time.
 */
#include "fuzz_common.h"
#include "remote/hdr.h"

#include <inttypes.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool visible(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return false;
    return true;
}

static void check_resp(const struct remote_resp *r)
{
    CHECK(r->header_bytes <= REMOTE_HDR_MAX_BYTES, "header bytes %zu", r->header_bytes);
    CHECK(!r->bad || r->bad_what, "bad without a message");
    if (r->has_crange) {
        const struct remote_crange *c = &r->crange;
        if (!c->unsatisfied) {
            CHECK(c->first <= c->last, "Content-Range %" PRIu64 "-%" PRIu64, c->first, c->last);
            CHECK(c->last <= (uint64_t)INT64_MAX, "Content-Range last too big");
        }
        if (c->complete_known) {
            CHECK(c->complete <= (uint64_t)INT64_MAX, "complete too big");
            CHECK(c->unsatisfied || c->last < c->complete, "last >= complete");
        }
    }
    if (r->has_clen)
        CHECK(r->clen <= (uint64_t)INT64_MAX, "Content-Length too big");
    if (r->has_etag) {
        size_t n = strnlen(r->etag, sizeof r->etag);
        CHECK(n <= REMOTE_ETAG_MAX && n >= 2, "ETag length %zu", n);
        CHECK(visible(r->etag), "ETag not visible ASCII");
        CHECK(r->etag[n - 1] == '"', "ETag does not end with a quote");
        CHECK(r->etag[0] == '"' || (r->etag_weak && strncmp(r->etag, "W/\"", 3) == 0),
              "ETag does not start with a quote or W/\"");
    }
    if (r->has_location) {
        size_t n = strnlen(r->location, sizeof r->location);
        CHECK(n >= 1 && n <= REMOTE_LOCATION_MAX, "Location length %zu", n);
        for (size_t i = 0; i < n; i++)
            CHECK(r->location[i] > 0x20 && r->location[i] < 0x7f, "Location byte %d",
                  r->location[i]);
    }
    if (r->has_lm) {
        CHECK(strnlen(r->lm_raw, sizeof r->lm_raw) < sizeof r->lm_raw, "lm_raw unterminated");
        CHECK(visible(r->lm_raw), "Last-Modified not printable");
        int64_t t;
        CHECK(remote_hdr_date(r->lm_raw, strlen(r->lm_raw), &t) && t == r->lm,
              "Last-Modified '%s' does not parse back", r->lm_raw);
    }
    if (r->done)
        CHECK(r->status >= 200 && r->status <= 999, "done with status %d", r->status);
}

static void fold_lines(const uint8_t *data, size_t size)
{
    static struct remote_resp r, snap;
    remote_resp_init(&r);
    int ends = 0;
    bool failed = false;
    size_t i = 0;
    while (i < size && !failed) {
        size_t j = i;
        while (j < size && data[j] != '\n')
            j++;
        size_t n = (j < size ? j + 1 : j) - i;
        /* a heap copy of exactly the line: ASan's redzone catches a read
         * past it (a guard page per line would cost two syscalls each) */
        char *line = malloc(n ? n : 1);
        CHECK(line != NULL, "malloc");
        memcpy(line, data + i, n);
        enum remote_hdr_step s = remote_resp_line(&r, line, n, 1700000000);
        free(line);
        if (ends)
            CHECK(memcmp(&r, &snap, sizeof r) == 0, "the response changed after its end");
        check_resp(&r);
        if (s == REMOTE_HDR_END) {
            CHECK(++ends == 1, "END twice");
            CHECK(r.done, "END without done");
            memcpy(&snap, &r, sizeof r);
        } else if (s == REMOTE_HDR_FAIL) {
            CHECK(r.bad_what != NULL, "FAIL without a message");
            failed = true;
        }
        i += n;
    }
}

static void field_parsers(const uint8_t *data, size_t size)
{
    struct guarded g = guarded_copy(data, size);
    const char *v = (const char *)g.p;
    struct remote_crange c;
    if (remote_hdr_content_range(v, size, &c)) {
        char b[96];
        int n;
        if (c.unsatisfied)
            n = snprintf(b, sizeof b, "bytes */%" PRIu64, c.complete);
        else if (c.complete_known)
            n = snprintf(b, sizeof b, "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, c.first, c.last,
                         c.complete);
        else
            n = snprintf(b, sizeof b, "bytes %" PRIu64 "-%" PRIu64 "/*", c.first, c.last);
        struct remote_crange c2;
        CHECK(remote_hdr_content_range(b, (size_t)n, &c2), "'%s' does not parse back", b);
        CHECK(c2.unsatisfied == c.unsatisfied && c2.complete_known == c.complete_known &&
              c2.complete == c.complete && (c.unsatisfied || (c2.first == c.first &&
              c2.last == c.last)), "'%s' parses back differently", b);
    }
    uint64_t u;
    if (remote_hdr_uint(v, size, &u))
        CHECK(u <= (uint64_t)INT64_MAX, "uint too big");
    char tag[REMOTE_ETAG_MAX + 1], tag2[REMOTE_ETAG_MAX + 1];
    bool weak, weak2;
    if (remote_hdr_etag(v, size, tag, sizeof tag, &weak)) {
        CHECK(remote_hdr_etag(tag, strlen(tag), tag2, sizeof tag2, &weak2) &&
              strcmp(tag, tag2) == 0 && weak == weak2, "ETag '%s' does not parse back", tag);
    }
    int64_t t;
    if (remote_hdr_date(v, size, &t)) {
        CHECK(t >= -2208988800LL && t <= 253402300800LL, "date %" PRId64 " out of range", t);
        time_t tt = (time_t)t;
        struct tm tm;
        CHECK(gmtime_r(&tt, &tm) != NULL, "gmtime");
        char b[64];
        size_t n = strftime(b, sizeof b, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        int64_t t2;
        /* leap seconds (:60) print as the next minute */
        CHECK(n && remote_hdr_date(b, n, &t2) && t2 == t, "date '%s' (%" PRId64 ") does not "
              "parse back", b, t);
    }
    uint64_t secs;
    (void)remote_hdr_retry_after(v, size, 1700000000, &secs);
    int st, ver;
    if (remote_hdr_status(v, size, &st, &ver))
        CHECK(st >= 100 && st <= 999, "status %d", st);
    guarded_free(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fold_lines(data, size);
    field_parsers(data, size);
    return 0;
}

/*
 * tests/unit/test_hdr.c — the hand-parsed HTTP response headers (remote/hdr.h):
 * every field's grammar, the edges of its numbers, hostile and conflicting
 * values, and how header lines fold into a response.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "remote/hdr.h"

#define S(lit) lit, sizeof lit - 1

static void test_content_range(void **state)
{
    (void)state;
    struct remote_crange c;
    assert_true(remote_hdr_content_range(S("bytes 0-99/1000"), &c));
    assert_false(c.unsatisfied);
    assert_true(c.complete_known);
    assert_int_equal(c.first, 0);
    assert_int_equal(c.last, 99);
    assert_int_equal(c.complete, 1000);
    assert_true(remote_hdr_content_range(S("  BYTES 5-5/6 \t"), &c));
    assert_int_equal(c.first, 5);
    assert_int_equal(c.complete, 6);
    assert_true(remote_hdr_content_range(S("bytes 10-20/*"), &c));
    assert_false(c.complete_known);
    assert_int_equal(c.last, 20);
    assert_true(remote_hdr_content_range(S("bytes */0"), &c));
    assert_true(c.unsatisfied);
    assert_int_equal(c.complete, 0);
    assert_true(remote_hdr_content_range(S("bytes */12345"), &c));
    assert_int_equal(c.complete, 12345);
    /* the largest: 2^63-1 */
    assert_true(remote_hdr_content_range(S("bytes 0-9223372036854775806/9223372036854775807"), &c));
    assert_int_equal(c.complete, INT64_MAX);

    static const char *const bad[] = {
        "", "bytes", "bytes ", "bytes 0-99", "bytes 0-99/", "bytes 0-/100", "bytes -99/100",
        "bytes 99-0/100",             /* last < first */
        "bytes 0-100/100",            /* last = complete */
        "bytes 0-99/99",
        "bytes 0-99/1000x", "bytes 0-99 /1000", "bytes 0 -99/1000", "bytes 0- 99/1000",
        "bytes +0-99/1000", "bytes 0-+99/1000", "bytes 0-99/+1000", "bytes 0x0-99/1000",
        "bytes 0-99/-1", "bytes=0-99/1000", "bits 0-99/1000", "bytes0-99/1000",
        "bytes 0-99/1000/1000", "bytes 0-99,200-299/1000", "bytes */", "bytes */*",
        "bytes *-1/100", "bytes */100x",
        "bytes 0-9223372036854775807/9223372036854775808",    /* 2^63 */
        "bytes 0-1/99999999999999999999999",
        "bytes 18446744073709551615-18446744073709551615/18446744073709551616",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct remote_crange x;
        if (remote_hdr_content_range(bad[i], strlen(bad[i]), &x))
            fail_msg("accepted Content-Range '%s'", bad[i]);
    }
    /* a NUL inside is not a digit */
    assert_false(remote_hdr_content_range("bytes 0-9\0/100", 14, &c));
}

static void test_uint(void **state)
{
    (void)state;
    uint64_t v;
    assert_true(remote_hdr_uint(S("0"), &v));
    assert_int_equal(v, 0);
    assert_true(remote_hdr_uint(S(" 2097152 "), &v));
    assert_int_equal(v, 2097152);
    assert_true(remote_hdr_uint(S("9223372036854775807"), &v));
    assert_false(remote_hdr_uint(S("9223372036854775808"), &v));
    assert_false(remote_hdr_uint(S(""), &v));
    assert_false(remote_hdr_uint(S("-1"), &v));
    assert_false(remote_hdr_uint(S("12 34"), &v));
    assert_false(remote_hdr_uint(S("5, 5"), &v));
    assert_false(remote_hdr_uint(S("0x10"), &v));
}

static void test_etag(void **state)
{
    (void)state;
    char t[REMOTE_ETAG_MAX + 1];
    bool weak;
    assert_true(remote_hdr_etag(S("\"abc\""), t, sizeof t, &weak));
    assert_string_equal(t, "\"abc\"");
    assert_false(weak);
    assert_true(remote_hdr_etag(S(" W/\"6b04-600000\" "), t, sizeof t, &weak));
    assert_string_equal(t, "W/\"6b04-600000\"");
    assert_true(weak);
    assert_true(remote_hdr_etag(S("\"\""), t, sizeof t, &weak));
    assert_string_equal(t, "\"\"");
    static const char *const bad[] = {
        "", "abc", "\"abc", "abc\"", "\"", "w/\"abc\"", "W/abc", "W/", "\"a\"b\"",
        "\"a b\"", "\"a\tb\"", "\"a\x7f\"", "\"\xc3\xa9\"", "\"a\"\"b\"",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (remote_hdr_etag(bad[i], strlen(bad[i]), t, sizeof t, &weak))
            fail_msg("accepted ETag '%s'", bad[i]);
    /* too long for the buffer: refused, nothing cut */
    char big[REMOTE_ETAG_MAX + 8];
    memset(big, 'x', sizeof big);
    big[0] = '"';
    big[sizeof big - 1] = '"';
    assert_false(remote_hdr_etag(big, sizeof big, t, sizeof t, &weak));
    assert_true(remote_hdr_etag(big, REMOTE_ETAG_MAX - 1, t, sizeof t, &weak) == false);
    big[REMOTE_ETAG_MAX - 1] = '"';
    assert_true(remote_hdr_etag(big, REMOTE_ETAG_MAX, t, sizeof t, &weak));
    assert_int_equal(strlen(t), REMOTE_ETAG_MAX);
}

static void test_date(void **state)
{
    (void)state;
    int64_t t;
    assert_true(remote_hdr_date(S("Sun, 06 Nov 1994 08:49:37 GMT"), &t));
    assert_int_equal(t, 784111777);
    assert_true(remote_hdr_date(S("Sunday, 06-Nov-94 08:49:37 GMT"), &t));
    assert_int_equal(t, 784111777);
    assert_true(remote_hdr_date(S("Sun Nov  6 08:49:37 1994"), &t));
    assert_int_equal(t, 784111777);
    assert_true(remote_hdr_date(S("Thu, 01 Jan 1970 00:00:00 GMT"), &t));
    assert_int_equal(t, 0);
    assert_true(remote_hdr_date(S("Tue, 29 Feb 2000 23:59:59 GMT"), &t));
    assert_int_equal(t, 951868799);
    assert_true(remote_hdr_date(S("Wed, 01 Jan 2025 00:00:00 gmt"), &t));
    assert_int_equal(t, 1735689600);
    /* the day name is not checked against the date (servers get it wrong) */
    assert_true(remote_hdr_date(S("Mon, 01 Jan 2025 00:00:00 GMT"), &t));
    assert_int_equal(t, 1735689600);
    /* two-digit years: 70-99 are 19xx, 00-69 20xx */
    assert_true(remote_hdr_date(S("Friday, 01-Jan-10 00:00:00 GMT"), &t));
    assert_int_equal(t, 1262304000);
    static const char *const bad[] = {
        "", "Sun", "Sun, 06 Nov 1994 08:49:37", "Sun, 06 Nov 1994 08:49:37 UTC",
        "Sun, 6 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 94 08:49:37 GMT",
        "Sun, 06 Xyz 1994 08:49:37 GMT", "Sun, 31 Nov 1994 08:49:37 GMT",
        "Sun, 29 Feb 1900 08:49:37 GMT", "Sun, 00 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1899 08:49:37 GMT", "Sun, 06 Nov 0000 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:60:00 GMT",
        "Sun, 06 Nov 1994 08:49:61 GMT", "Sun, 06 Nov 1994 8:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT", "Sun,06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMTX", "Sun Nov 6 08:49:37 1994",
        "Sun Nov  6 08:49:37 94", "Sunday, 06 Nov 1994 08:49:37 GMT",
        "1994-11-06T08:49:37Z", "Sun, -6 Nov 1994 08:49:37 GMT",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (remote_hdr_date(bad[i], strlen(bad[i]), &t))
            fail_msg("accepted date '%s'", bad[i]);
}

static void test_retry_after(void **state)
{
    (void)state;
    uint64_t s;
    assert_true(remote_hdr_retry_after(S("120"), 0, &s));
    assert_int_equal(s, 120);
    assert_true(remote_hdr_retry_after(S(" 0 "), 0, &s));
    assert_int_equal(s, 0);
    /* huge: saturates */
    assert_true(remote_hdr_retry_after(S("99999999999999999999999999"), 0, &s));
    assert_int_equal(s, INT64_MAX);
    /* a date: seconds from now, 0 for the past */
    assert_true(remote_hdr_retry_after(S("Thu, 01 Jan 1970 00:01:40 GMT"), 40, &s));
    assert_int_equal(s, 60);
    assert_true(remote_hdr_retry_after(S("Thu, 01 Jan 1970 00:01:40 GMT"), 1000, &s));
    assert_int_equal(s, 0);
    assert_false(remote_hdr_retry_after(S(""), 0, &s));
    assert_false(remote_hdr_retry_after(S("-1"), 0, &s));
    assert_false(remote_hdr_retry_after(S("1.5"), 0, &s));
    assert_false(remote_hdr_retry_after(S("soon"), 0, &s));
}

static void test_status(void **state)
{
    (void)state;
    int st, v;
    assert_true(remote_hdr_status(S("HTTP/1.1 206 Partial Content"), &st, &v));
    assert_int_equal(st, 206);
    assert_int_equal(v, 11);
    assert_true(remote_hdr_status(S("HTTP/2 200"), &st, &v));
    assert_int_equal(st, 200);
    assert_int_equal(v, 20);
    assert_true(remote_hdr_status(S("HTTP/1.0 404 "), &st, &v));
    assert_int_equal(st, 404);
    static const char *const bad[] = {
        "HTTP/1.1", "HTTP/1.1 20", "HTTP/1.1 2000 x", "HTTP/1.1 099 x", "HTTP/x 200",
        "HTTP/1.1  200", "HTTP/1.1 20a", "http/1.1 200", "ICY 200 OK", "HTTP/11.1 200",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (remote_hdr_status(bad[i], strlen(bad[i]), &st, &v))
            fail_msg("accepted status line '%s'", bad[i]);
}

/* Feeds lines (NULL-terminated) and returns the last step. */
static enum remote_hdr_step feed(struct remote_resp *r, const char *const *lines)
{
    enum remote_hdr_step s = REMOTE_HDR_CONTINUE;
    for (; *lines; lines++) {
        s = remote_resp_line(r, *lines, strlen(*lines), 1000);
        if (s != REMOTE_HDR_CONTINUE)
            return s;
    }
    return s;
}

static void test_resp_206(void **state)
{
    (void)state;
    static struct remote_resp r;
    remote_resp_init(&r);
    const char *const lines[] = {
        "HTTP/1.1 206 Partial Content\r\n", "Server: nginx\r\n",
        "Content-Range: bytes 0-2097151/6291456\r\n", "content-length: 2097152\r\n",
        "ETag: \"6b04-600000\"\r\n", "Last-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
        "X-Other: whatever \x01\x02\r\n", "Content-Encoding: identity\r\n", "\r\n", NULL,
    };
    assert_int_equal(feed(&r, lines), REMOTE_HDR_END);
    assert_int_equal(r.status, 206);
    assert_true(r.done);
    assert_false(r.bad);
    assert_true(r.has_crange);
    assert_int_equal(r.crange.last, 2097151);
    assert_int_equal(r.crange.complete, 6291456);
    assert_true(r.has_clen);
    assert_int_equal(r.clen, 2097152);
    assert_true(r.has_etag);
    assert_string_equal(r.etag, "\"6b04-600000\"");
    assert_true(r.has_lm);
    assert_int_equal(r.lm, 784111777);
    assert_string_equal(r.lm_raw, "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_false(r.encoded);
    /* trailers after the end change nothing */
    assert_int_equal(remote_resp_line(&r, S("ETag: \"other\"\r\n"), 0), REMOTE_HDR_CONTINUE);
    assert_string_equal(r.etag, "\"6b04-600000\"");
}

static void test_resp_interim_and_redirect(void **state)
{
    (void)state;
    static struct remote_resp r;
    remote_resp_init(&r);
    const char *const lines[] = {
        "HTTP/1.1 100 Continue\r\n", "\r\n", "HTTP/1.1 103 Early Hints\r\n",
        "Location: /nope\r\n", "\r\n", "HTTP/1.1 302 Found\r\n",
        "Location:   https://cdn.example/x?sig=1  \r\n", "Retry-After: 5\r\n", "\n", NULL,
    };
    assert_int_equal(feed(&r, lines), REMOTE_HDR_END);
    assert_int_equal(r.status, 302);
    assert_int_equal(r.interim, 2);
    assert_true(r.has_location);
    assert_string_equal(r.location, "https://cdn.example/x?sig=1");
    assert_true(r.has_retry_after);
    assert_int_equal(r.retry_after, 5);
    assert_false(r.bad);
}

static void test_resp_bad(void **state)
{
    (void)state;
    static struct remote_resp r;
    struct {
        const char *lines[6];
        const char *what;       /* substring of bad_what, NULL: not bad */
        enum remote_hdr_step step;
    } cases[] = {
        { { "HTTP/1.1 206 x", "Content-Range: bytes 0-1/10", "Content-Range: bytes 0-1/10", "",
            NULL }, "two Content-Range", REMOTE_HDR_END },
        { { "HTTP/1.1 206 x", "Content-Range: bytes 0-1/x", "", NULL }, "malformed Content-Range",
          REMOTE_HDR_END },
        { { "HTTP/1.1 206 x", "Content-Length: 5", "Content-Length: 6", "", NULL },
          "Content-Length", REMOTE_HDR_END },
        { { "HTTP/1.1 206 x", "Content-Length: 5", "Content-Length: 5", "", NULL }, NULL,
          REMOTE_HDR_END },
        { { "HTTP/1.1 206 x", "Content-Length: -5", "", NULL }, "Content-Length",
          REMOTE_HDR_END },
        { { "HTTP/1.1 206 x", "ETag: \"a\"", "ETag: \"b\"", "", NULL }, "ETag", REMOTE_HDR_END },
        { { "HTTP/1.1 206 x", "ETag: garbage", "", NULL }, NULL, REMOTE_HDR_END },
        { { "HTTP/1.1 302 x", "Location: /a", "Location: /b", "", NULL }, "Location",
          REMOTE_HDR_END },
        { { "HTTP/1.1 302 x", "Location: /a b", "", NULL }, "Location", REMOTE_HDR_END },
        { { "HTTP/1.1 302 x", "Location:", "", NULL }, "Location", REMOTE_HDR_END },
        { { "HTTP/1.1 206 x", "Content-Range: bytes 0-1/10", " folded", "", NULL }, "folded",
          REMOTE_HDR_END },
        { { "HTTP/1.1 206 x", "X-A: 1", " folded", "", NULL }, NULL, REMOTE_HDR_END },
        { { "Content-Range: bytes 0-1/10", NULL }, "status line", REMOTE_HDR_FAIL },
        { { "HTTP/1.1 abc", NULL }, "status line", REMOTE_HDR_FAIL },
        { { "HTTP/1.1 100 x", "", "X: y", NULL }, "status line", REMOTE_HDR_FAIL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        remote_resp_init(&r);
        enum remote_hdr_step s = feed(&r, cases[i].lines);
        if (s != cases[i].step)
            fail_msg("case %zu: step %d, want %d", i, s, cases[i].step);
        if (cases[i].what) {
            if (!r.bad || !strstr(r.bad_what, cases[i].what))
                fail_msg("case %zu: bad %d '%s', want '%s'", i, r.bad,
                         r.bad_what ? r.bad_what : "", cases[i].what);
        } else if (r.bad) {
            fail_msg("case %zu: bad '%s'", i, r.bad_what);
        }
    }
    /* a NUL inside one of our fields */
    remote_resp_init(&r);
    remote_resp_line(&r, S("HTTP/1.1 206 x\r\n"), 0);
    remote_resp_line(&r, S("Content-Range: bytes 0-1/10\0x\r\n"), 0);
    assert_true(r.bad);
    /* content encodings */
    remote_resp_init(&r);
    const char *const enc[] = { "HTTP/2 206", "Content-Encoding: identity, gzip", "", NULL };
    feed(&r, enc);
    assert_true(r.encoded);
}

static void test_resp_limits(void **state)
{
    (void)state;
    static struct remote_resp r;
    /* header bytes: a run of long lines ends the transfer */
    remote_resp_init(&r);
    char line[4096];
    memset(line, 'a', sizeof line);
    memcpy(line, "X-Pad: ", 7);
    assert_int_equal(remote_resp_line(&r, S("HTTP/1.1 200 OK\r\n"), 0), REMOTE_HDR_CONTINUE);
    enum remote_hdr_step s = REMOTE_HDR_CONTINUE;
    int n = 0;
    while (s == REMOTE_HDR_CONTINUE && n < 100) {
        s = remote_resp_line(&r, line, sizeof line, 0);
        n++;
    }
    assert_int_equal(s, REMOTE_HDR_FAIL);
    assert_true(n <= REMOTE_HDR_MAX_BYTES / (int)sizeof line + 1);
    /* interim responses */
    remote_resp_init(&r);
    s = REMOTE_HDR_CONTINUE;
    for (n = 0; n < 100 && s == REMOTE_HDR_CONTINUE; n++) {
        s = remote_resp_line(&r, S("HTTP/1.1 100 Continue\r\n"), 0);
        if (s == REMOTE_HDR_CONTINUE)
            s = remote_resp_line(&r, S("\r\n"), 0);
    }
    assert_int_equal(s, REMOTE_HDR_FAIL);
    assert_int_equal(n, REMOTE_HDR_MAX_INTERIM + 1);
    /* a Location of the maximum length is kept, one more byte is bad */
    static char loc[REMOTE_LOCATION_MAX + 32];
    for (size_t extra = 0; extra < 2; extra++) {
        remote_resp_init(&r);
        remote_resp_line(&r, S("HTTP/1.1 302 Found\r\n"), 0);
        size_t n0 = strlen("Location: ");
        memcpy(loc, "Location: ", n0);
        memset(loc + n0, 'b', REMOTE_LOCATION_MAX + extra);
        remote_resp_line(&r, loc, n0 + REMOTE_LOCATION_MAX + extra, 0);
        assert_int_equal(r.bad, extra == 1);
        assert_int_equal(r.has_location, extra == 0);
    }
}

static void test_reason(void **state)
{
    (void)state;
    assert_string_equal(remote_http_reason(404), "Not Found");
    assert_string_equal(remote_http_reason(503), "Service Unavailable");
    assert_string_equal(remote_http_reason(599), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_range),
        cmocka_unit_test(test_uint),
        cmocka_unit_test(test_etag),
        cmocka_unit_test(test_date),
        cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_status),
        cmocka_unit_test(test_resp_206),
        cmocka_unit_test(test_resp_interim_and_redirect),
        cmocka_unit_test(test_resp_bad),
        cmocka_unit_test(test_resp_limits),
        cmocka_unit_test(test_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

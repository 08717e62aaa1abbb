/* remote/hdr.c — hand-parsed HTTP response headers (see hdr.h). */
#include "hdr.h"

#include <string.h>

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* tchar of RFC 9110 5.6.2 */
static bool is_tchar(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return true;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* Strips blanks on both ends of v[0..*len). */
static const char *trim(const char *v, size_t *len)
{
    size_t n = *len;
    while (n && is_blank(*v)) {
        v++;
        n--;
    }
    while (n && is_blank(v[n - 1]))
        n--;
    *len = n;
    return v;
}

static bool ieq(const char *a, size_t alen, const char *lit)
{
    size_t n = strlen(lit);
    if (alen != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lower(a[i]) != lit[i])
            return false;
    return true;
}

/* Decimal digits (at least one) at v[*i..len), at most REMOTE_HDR_NUM_MAX. */
static bool digits(const char *v, size_t len, size_t *i, uint64_t *out)
{
    size_t start = *i;
    uint64_t x = 0;
    while (*i < len && is_digit(v[*i])) {
        unsigned d = (unsigned)(v[*i] - '0');
        if (x > (REMOTE_HDR_NUM_MAX - d) / 10)
            return false;
        x = x * 10 + d;
        (*i)++;
    }
    if (*i == start)
        return false;
    *out = x;
    return true;
}

bool remote_hdr_uint(const char *v, size_t len, uint64_t *out)
{
    v = trim(v, &len);
    size_t i = 0;
    uint64_t x;
    if (!digits(v, len, &i, &x) || i != len)
        return false;
    *out = x;
    return true;
}

bool remote_hdr_content_range(const char *v, size_t len, struct remote_crange *out)
{
    v = trim(v, &len);
    if (len < 6 || !ieq(v, 5, "bytes") || !is_blank(v[5]))
        return false;
    size_t i = 5;
    while (i < len && is_blank(v[i]))
        i++;
    struct remote_crange c = { 0 };
    if (i < len && v[i] == '*') {
        i++;
        if (i >= len || v[i] != '/')
            return false;
        i++;
        if (!digits(v, len, &i, &c.complete) || i != len)
            return false;
        c.unsatisfied = true;
        c.complete_known = true;
        *out = c;
        return true;
    }
    if (!digits(v, len, &i, &c.first) || i >= len || v[i] != '-')
        return false;
    i++;
    if (!digits(v, len, &i, &c.last) || i >= len || v[i] != '/')
        return false;
    i++;
    if (c.last < c.first)
        return false;
    if (i < len && v[i] == '*') {
        if (i + 1 != len)
            return false;
    } else {
        if (!digits(v, len, &i, &c.complete) || i != len)
            return false;
        if (c.last >= c.complete)
            return false;
        c.complete_known = true;
    }
    *out = c;
    return true;
}

bool remote_hdr_etag(const char *v, size_t len, char *out, size_t cap, bool *weak)
{
    v = trim(v, &len);
    size_t i = 0;
    bool w = false;
    if (len >= 2 && v[0] == 'W' && v[1] == '/') {
        w = true;
        i = 2;
    }
    if (len - i < 2 || v[i] != '"' || v[len - 1] != '"')
        return false;
    for (size_t k = i + 1; k < len - 1; k++) {
        unsigned char c = (unsigned char)v[k];
        if (c < 0x21 || c == '"' || c > 0x7e)
            return false;
    }
    if (len + 1 > cap)
        return false;
    memcpy(out, v, len);
    out[len] = '\0';
    *weak = w;
    return true;
}

/* ---- HTTP-date ------------------------------------------------------------ */

static const char *const months[12] = { "jan", "feb", "mar", "apr", "may", "jun",
                                        "jul", "aug", "sep", "oct", "nov", "dec" };
static const char *const wkdays[7] = { "mon", "tue", "wed", "thu", "fri", "sat", "sun" };
static const char *const weekdays[7] = { "monday", "tuesday", "wednesday", "thursday",
                                         "friday", "saturday", "sunday" };

static bool leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; Howard Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* Exactly n digits at v[*i]. */
static bool ndigits(const char *v, size_t len, size_t *i, int n, int *out)
{
    int x = 0;
    for (int k = 0; k < n; k++) {
        if (*i >= len || !is_digit(v[*i]))
            return false;
        x = x * 10 + (v[*i] - '0');
        (*i)++;
    }
    *out = x;
    return true;
}

static bool lit(const char *v, size_t len, size_t *i, char c)
{
    if (*i >= len || v[*i] != c)
        return false;
    (*i)++;
    return true;
}

static int month_at(const char *v, size_t len, size_t *i)
{
    if (len - *i < 3)
        return -1;
    for (int m = 0; m < 12; m++)
        if (ieq(v + *i, 3, months[m])) {
            *i += 3;
            return m + 1;
        }
    return -1;
}

static bool hms(const char *v, size_t len, size_t *i, int *h, int *mi, int *s)
{
    return ndigits(v, len, i, 2, h) && lit(v, len, i, ':') && ndigits(v, len, i, 2, mi) &&
           lit(v, len, i, ':') && ndigits(v, len, i, 2, s);
}

static bool make_time(int64_t y, int mo, int d, int h, int mi, int s, int64_t *out)
{
    static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
    if (y < 1900 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || s > 60)
        return false;
    if (d > mdays[mo - 1] + (mo == 2 && leap(y)))
        return false;
    *out = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
    return true;
}

bool remote_hdr_date(const char *v, size_t len, int64_t *out)
{
    v = trim(v, &len);
    size_t i = 0;
    int d, mo, y, h, mi, s;
    /* the day name: 3 letters then ", " (IMF-fixdate) or " " (asctime), or
     * a full name then ", " (RFC 850) */
    size_t name = 0;
    while (name < len && ((v[name] | 0x20) >= 'a' && (v[name] | 0x20) <= 'z'))
        name++;
    bool known = false;
    for (int k = 0; k < 7; k++)
        if (ieq(v, name, wkdays[k]) || ieq(v, name, weekdays[k]))
            known = true;
    if (!known)
        return false;
    i = name;
    if (name == 3 && i < len && v[i] == ',') {
        /* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
        i++;
        if (!lit(v, len, &i, ' ') || !ndigits(v, len, &i, 2, &d) || !lit(v, len, &i, ' '))
            return false;
        if ((mo = month_at(v, len, &i)) < 0 || !lit(v, len, &i, ' ') ||
            !ndigits(v, len, &i, 4, &y) || !lit(v, len, &i, ' ') ||
            !hms(v, len, &i, &h, &mi, &s) || !lit(v, len, &i, ' '))
            return false;
        if (len - i != 3 || !ieq(v + i, 3, "gmt"))
            return false;
        return make_time(y, mo, d, h, mi, s, out);
    }
    if (name > 3 && i < len && v[i] == ',') {
        /* RFC 850: Sunday, 06-Nov-94 08:49:37 GMT */
        i++;
        if (!lit(v, len, &i, ' ') || !ndigits(v, len, &i, 2, &d) || !lit(v, len, &i, '-'))
            return false;
        if ((mo = month_at(v, len, &i)) < 0 || !lit(v, len, &i, '-') ||
            !ndigits(v, len, &i, 2, &y) || !lit(v, len, &i, ' ') ||
            !hms(v, len, &i, &h, &mi, &s) || !lit(v, len, &i, ' '))
            return false;
        if (len - i != 3 || !ieq(v + i, 3, "gmt"))
            return false;
        return make_time(y < 70 ? 2000 + y : 1900 + y, mo, d, h, mi, s, out);
    }
    if (name == 3 && i < len && v[i] == ' ') {
        /* asctime: Sun Nov  6 08:49:37 1994 */
        i++;
        if ((mo = month_at(v, len, &i)) < 0 || !lit(v, len, &i, ' '))
            return false;
        if (i < len && v[i] == ' ') {
            i++;
            if (!ndigits(v, len, &i, 1, &d))
                return false;
        } else if (!ndigits(v, len, &i, 2, &d)) {
            return false;
        }
        if (!lit(v, len, &i, ' ') || !hms(v, len, &i, &h, &mi, &s) || !lit(v, len, &i, ' ') ||
            !ndigits(v, len, &i, 4, &y) || i != len)
            return false;
        return make_time(y, mo, d, h, mi, s, out);
    }
    return false;
}

bool remote_hdr_retry_after(const char *v, size_t len, int64_t now, uint64_t *secs)
{
    v = trim(v, &len);
    if (len && is_digit(v[0])) {
        /* delta-seconds: saturate rather than refuse a huge number */
        uint64_t x = 0;
        for (size_t i = 0; i < len; i++) {
            if (!is_digit(v[i]))
                return false;
            x = x > (uint64_t)REMOTE_HDR_NUM_MAX / 10 ? (uint64_t)REMOTE_HDR_NUM_MAX
                                                      : x * 10 + (uint64_t)(v[i] - '0');
        }
        *secs = x;
        return true;
    }
    int64_t t;
    if (!remote_hdr_date(v, len, &t))
        return false;
    *secs = t > now ? (uint64_t)t - (uint64_t)now : 0;
    return true;
}

bool remote_hdr_status(const char *line, size_t len, int *status, int *version)
{
    size_t i = 0;
    if (len < 5 || memcmp(line, "HTTP/", 5) != 0)
        return false;
    i = 5;
    int major, minor = 0;
    if (!ndigits(line, len, &i, 1, &major))
        return false;
    if (i < len && line[i] == '.') {
        i++;
        if (!ndigits(line, len, &i, 1, &minor))
            return false;
    }
    if (!lit(line, len, &i, ' '))
        return false;
    int code;
    if (!ndigits(line, len, &i, 3, &code) || code < 100)
        return false;
    /* then the end, or a blank and a reason phrase (not looked at) */
    if (i < len && !is_blank(line[i]))
        return false;
    *status = code;
    *version = major * 10 + minor;
    return true;
}

/* ---- folding lines into a response ---------------------------------------- */

enum field { F_NONE, F_OTHER, F_CRANGE, F_CLEN, F_ETAG, F_LM, F_RETRY, F_LOCATION, F_CENC };

void remote_resp_init(struct remote_resp *r)
{
    memset(r, 0, sizeof *r);
}

/* A new response (status line): everything but the request-wide counters. */
static void resp_reset(struct remote_resp *r, int status)
{
    unsigned interim = r->interim;
    size_t bytes = r->header_bytes;
    /* the strings are cleared by their has_ flags; resetting only the
     * scalars keeps this cheap */
    r->status = status;
    r->done = false;
    r->bad = false;
    r->bad_what = NULL;
    r->last_field = F_NONE;
    r->has_crange = r->has_clen = r->has_etag = r->etag_weak = false;
    r->has_lm = r->has_retry_after = r->has_location = r->encoded = false;
    r->etag[0] = r->lm_raw[0] = r->location[0] = '\0';
    r->interim = interim;
    r->header_bytes = bytes;
}

static void set_bad(struct remote_resp *r, const char *what)
{
    if (!r->bad) {
        r->bad = true;
        r->bad_what = what;
    }
}

static void field(struct remote_resp *r, enum field f, const char *v, size_t n, int64_t now)
{
    switch (f) {
    case F_CRANGE: {
        struct remote_crange c;
        if (!remote_hdr_content_range(v, n, &c))
            set_bad(r, "a malformed Content-Range");
        else if (r->has_crange)
            set_bad(r, "two Content-Range headers");
        else {
            r->has_crange = true;
            r->crange = c;
        }
        break;
    }
    case F_CLEN: {
        uint64_t x;
        if (!remote_hdr_uint(v, n, &x))
            set_bad(r, "a malformed Content-Length");
        else if (r->has_clen && r->clen != x)
            set_bad(r, "two different Content-Length headers");
        else {
            r->has_clen = true;
            r->clen = x;
        }
        break;
    }
    case F_ETAG: {
        char tag[REMOTE_ETAG_MAX + 1];
        bool weak;
        if (!remote_hdr_etag(v, n, tag, sizeof tag, &weak))
            break;                              /* ignored: as if absent */
        if (r->has_etag && strcmp(tag, r->etag) != 0) {
            set_bad(r, "two different ETag headers");
            break;
        }
        memcpy(r->etag, tag, strlen(tag) + 1);
        r->etag_weak = weak;
        r->has_etag = true;
        break;
    }
    case F_LM: {
        int64_t t;
        size_t tn = n;
        const char *tv = trim(v, &tn);
        if (!remote_hdr_date(tv, tn, &t) || tn >= sizeof r->lm_raw)
            break;                              /* ignored */
        if (r->has_lm && r->lm != t) {
            set_bad(r, "two different Last-Modified headers");
            break;
        }
        r->has_lm = true;
        r->lm = t;
        memcpy(r->lm_raw, tv, tn);
        r->lm_raw[tn] = '\0';
        break;
    }
    case F_RETRY: {
        uint64_t s;
        if (!r->has_retry_after && remote_hdr_retry_after(v, n, now, &s)) {
            r->has_retry_after = true;
            r->retry_after = s;
        }
        break;
    }
    case F_LOCATION: {
        size_t tn = n;
        const char *tv = trim(v, &tn);
        if (r->has_location) {
            set_bad(r, "two Location headers");
            break;
        }
        if (tn == 0 || tn > REMOTE_LOCATION_MAX) {
            set_bad(r, "a malformed Location");
            break;
        }
        for (size_t i = 0; i < tn; i++) {
            unsigned char c = (unsigned char)tv[i];
            if (c < 0x21 || c > 0x7e) {
                set_bad(r, "a malformed Location");
                return;
            }
        }
        memcpy(r->location, tv, tn);
        r->location[tn] = '\0';
        r->has_location = true;
        break;
    }
    case F_CENC: {
        /* a list: every member must be identity */
        size_t i = 0;
        while (i <= n) {
            size_t j = i;
            while (j < n && v[j] != ',')
                j++;
            size_t mn = j - i;
            const char *m = trim(v + i, &mn);
            if (mn && !ieq(m, mn, "identity"))
                r->encoded = true;
            i = j + 1;
        }
        break;
    }
    default:
        break;
    }
}

enum remote_hdr_step remote_resp_line(struct remote_resp *r, const char *line, size_t len,
                                      int64_t now)
{
    if (r->done)
        return REMOTE_HDR_CONTINUE;         /* trailers: not looked at */
    if (len > REMOTE_HDR_MAX_BYTES - r->header_bytes) {
        r->bad = true;
        r->bad_what = "response headers too large";
        return REMOTE_HDR_FAIL;
    }
    r->header_bytes += len;
    if (len && line[len - 1] == '\n')
        len--;
    if (len && line[len - 1] == '\r')
        len--;
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        int status, version;
        if (!remote_hdr_status(line, len, &status, &version)) {
            r->bad = true;
            r->bad_what = "a malformed status line";
            return REMOTE_HDR_FAIL;
        }
        resp_reset(r, status);
        return REMOTE_HDR_CONTINUE;
    }
    if (r->status == 0) {
        /* a header before any status line */
        r->bad = true;
        r->bad_what = "a malformed status line";
        return REMOTE_HDR_FAIL;
    }
    if (len == 0) {
        if (r->status < 200) {
            if (++r->interim > REMOTE_HDR_MAX_INTERIM) {
                r->bad = true;
                r->bad_what = "too many interim (1xx) responses";
                return REMOTE_HDR_FAIL;
            }
            r->status = 0;      /* the next line must be a status line */
            return REMOTE_HDR_CONTINUE;
        }
        r->done = true;
        return REMOTE_HDR_END;
    }
    if (is_blank(line[0])) {
        /* obsolete line folding: continues the previous field; refused for
         * the fields looked at, ignored otherwise */
        if (r->last_field != F_NONE && r->last_field != F_OTHER)
            set_bad(r, "a folded header line");
        return REMOTE_HDR_CONTINUE;
    }
    size_t colon = 0;
    while (colon < len && is_tchar((unsigned char)line[colon]))
        colon++;
    if (colon == 0 || colon >= len || line[colon] != ':') {
        r->last_field = F_OTHER;
        return REMOTE_HDR_CONTINUE;          /* not "name: value": ignored */
    }
    enum field f = F_OTHER;
    if (ieq(line, colon, "content-range"))
        f = F_CRANGE;
    else if (ieq(line, colon, "content-length"))
        f = F_CLEN;
    else if (ieq(line, colon, "etag"))
        f = F_ETAG;
    else if (ieq(line, colon, "last-modified"))
        f = F_LM;
    else if (ieq(line, colon, "retry-after"))
        f = F_RETRY;
    else if (ieq(line, colon, "location"))
        f = F_LOCATION;
    else if (ieq(line, colon, "content-encoding"))
        f = F_CENC;
    r->last_field = (int)f;
    const char *v = line + colon + 1;
    size_t n = len - colon - 1;
    for (size_t i = 0; i < n; i++)
        if (v[i] == '\0' || v[i] == '\r' || v[i] == '\n') {
            /* a NUL or a bare CR/LF inside a line: nothing here is trusted */
            if (f != F_OTHER)
                set_bad(r, "a control character in a header");
            return REMOTE_HDR_CONTINUE;
        }
    field(r, f, v, n, now);
    return REMOTE_HDR_CONTINUE;
}

const char *remote_http_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 407: return "Proxy Authentication Required";
    case 408: return "Request Timeout";
    case 410: return "Gone";
    case 412: return "Precondition Failed";
    case 416: return "Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
    }
}

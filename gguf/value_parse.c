/*
 * gguf/value_parse.c — text back into values (the form in value.h).
 *
 * Every failure says where: the message names the offending token (quoted,
 * escaped) and, for arrays, its line; diag->offset is its byte offset in
 * the text.  Encodings are appended to the caller's buffer and the buffer
 * is put back as it was on failure.
 *
 * Numbers and bools may be surrounded by ASCII white space (space, tab,
 * CR, LF, VT, FF), which is ignored: what editors save (`4096 \n`,
 * `4096\r\n`) means the number.  Bools are true/false in any case, or an
 * integer.  The token itself is then strict: integers are scanned by hand
 * (strtoll would accept inner blanks and has no unsigned 64-bit range check
 * of its own); floats go through strtof/strtod after a check that they
 * start with no blank; NaN payloads are built bit by bit (libc's handling
 * of them varies).
 */
#include "value.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* "an i32", "a u8": for messages. */
static const char *article(unsigned t)
{
    const char *n = gguf_vtype_name(t);
    return n[0] == 'i' || n[0] == 'f' ? "an" : "a";
}

/* State of one gguf_parse_value call. */
struct pctx {
    const struct gguf_enc *e;
    const char *text;       /* the whole text, for offsets */
    struct gguf_buf *out;
    struct gguf_diag *diag;
    unsigned line;          /* 1-based element line, 0 for a scalar value */
};

/* Quotes up to 40 bytes of s for a message, escaping what is not printable. */
static void quote(char *dst, size_t cap, const char *s, size_t n)
{
    size_t k = 0, i = 0;
    dst[k++] = '"';
    for (; i < n && i < 40 && k + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            dst[k++] = '\\';
            dst[k++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            k += (size_t)snprintf(dst + k, cap - k, "\\x%02x", c);
        } else {
            dst[k++] = (char)c;
        }
    }
    if (i < n && k + 4 < cap) {
        memcpy(dst + k, "...", 3);
        k += 3;
    }
    dst[k++] = '"';
    dst[k] = '\0';
}

__attribute__((format(printf, 4, 5)))
static enum gguf_err fail(struct pctx *c, enum gguf_err code, const char *at,
                          const char *fmt, ...)
{
    if (!c->diag)
        return code;
    int k = 0;
    if (c->line)
        k = snprintf(c->diag->msg, sizeof c->diag->msg, "line %u: ", c->line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->diag->msg + k, sizeof c->diag->msg - (size_t)k, fmt, ap);
    va_end(ap);
    c->diag->offset = at && c->text ? (uint64_t)(at - c->text) : 0;
    return code;
}

/* "<token> is not a u8" */
static enum gguf_err not_a(struct pctx *c, const char *s, size_t n, unsigned t)
{
    char q[200];
    quote(q, sizeof q, s, n);
    return fail(c, GGUF_E_SYNTAX, s, "%s is not %s %s", q, article(t),
                gguf_vtype_name(t));
}

static enum gguf_err out_of_range(struct pctx *c, const char *s, size_t n,
                                  unsigned t)
{
    char q[200];
    quote(q, sizeof q, s, n);
    return fail(c, GGUF_E_RANGE, s, "%s is out of range for %s", q,
                gguf_vtype_name(t));
}

/* Reserves a length/count field; fill it in with patch_count. */
static size_t put_count_slot(struct pctx *c)
{
    static const char zero[8];
    size_t at = c->out->len;
    gguf_buf_put(c->out, zero, gguf_count_size(c->e));
    return at;
}

/* Fills in a count field; false if it does not fit v1's 32 bits. */
static bool patch_count(struct pctx *c, size_t at, uint64_t v)
{
    if (c->out->oom)
        return true;   /* reported as NOMEM by the caller */
    if (c->e->v1 && v > UINT32_MAX)
        return false;
    gguf_wr_count(c->e, c->out->data + at, v);
    return true;
}

size_t gguf_utf8_valid(const char *text, size_t n, bool *truncated)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    if (truncated)
        *truncated = false;
    while (i < n) {
        /* ASCII, eight bytes at a time: a template or a token list is
         * mostly ASCII, and every write() of a string key checks it */
        while (n - i >= 8) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned lo = 0x80, hi = 0xbf;   /* range of the second byte */
        if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            if (c == 0xe0)
                lo = 0xa0;   /* overlong */
            if (c == 0xed)
                hi = 0x9f;   /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            if (c == 0xf0)
                lo = 0x90;   /* overlong */
            if (c == 0xf4)
                hi = 0x8f;   /* above U+10FFFF */
        } else {
            return i;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n) {
                if (truncated)
                    *truncated = true;   /* more bytes may complete it */
                return i;
            }
            if (s[i + j] < (j == 1 ? lo : 0x80) || s[i + j] > (j == 1 ? hi : 0xbf))
                return i;
        }
        i += k + 1;
    }
    return n;
}

static enum gguf_err check_utf8(struct pctx *c, const char *s, size_t n)
{
    size_t bad = gguf_utf8_valid(s, n, NULL);
    if (bad == n)
        return GGUF_OK;
    return fail(c, GGUF_E_SYNTAX, s + bad,
                "invalid UTF-8 (byte 0x%02x at offset %zu)",
                (unsigned char)s[bad], (size_t)(s + bad - c->text));
}

/*
 * Decimal integer: optional sign, at least one digit, nothing else.  *mag is
 * the magnitude; returns 0, or 1 for a syntax error, 2 if it exceeds 2^64-1.
 */
static int scan_int(const char *s, size_t n, bool *neg, uint64_t *mag)
{
    size_t i = 0;
    *neg = false;
    if (n && (s[0] == '+' || s[0] == '-')) {
        *neg = s[0] == '-';
        i = 1;
    }
    if (i == n)
        return 1;
    for (size_t k = i; k < n; k++)
        if (s[k] < '0' || s[k] > '9')
            return 1;
    uint64_t v = 0;
    for (; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 2;
        v = v * 10 + d;
    }
    *mag = v;
    return 0;
}

/* Integer types: the value's bits, range-checked. */
static enum gguf_err parse_int(struct pctx *c, const char *s, size_t n,
                               unsigned t, uint64_t *bits)
{
    static const uint64_t umax[GGUF_VTYPE_COUNT] = {
        [GGUF_U8] = UINT8_MAX, [GGUF_U16] = UINT16_MAX,
        [GGUF_U32] = UINT32_MAX, [GGUF_U64] = UINT64_MAX,
        [GGUF_BOOL] = UINT8_MAX,
        [GGUF_I8] = INT8_MAX, [GGUF_I16] = INT16_MAX,
        [GGUF_I32] = INT32_MAX, [GGUF_I64] = INT64_MAX,
    };
    bool is_signed = t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 ||
                     t == GGUF_I64;
    bool neg;
    uint64_t mag = 0;
    int r = scan_int(s, n, &neg, &mag);
    if (r == 1)
        return not_a(c, s, n, t);
    if (r == 2)
        return out_of_range(c, s, n, t);
    if (!neg) {
        if (mag > umax[t])
            return out_of_range(c, s, n, t);
        *bits = mag;
    } else if (mag == 0) {
        *bits = 0;   /* "-0" */
    } else {
        if (!is_signed || mag > umax[t] + 1)
            return out_of_range(c, s, n, t);
        *bits = 0 - mag;   /* two's complement; truncated to the width later */
    }
    return GGUF_OK;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/*
 * "nan", "-nan", "nan(0xPAYLOAD)", "nan(DECIMAL)" (any case), built bit by
 * bit here because libc's handling of NaN payloads varies.  Returns 0 if s
 * is not a NaN at all, 1 if it is one (*bits set), -1 if it starts like one
 * but is malformed, -2 if the payload does not fit.
 */
static int scan_nan(const char *s, size_t n, bool f32, uint64_t *bits)
{
    size_t i = 0;
    bool neg = false;
    if (n && (s[0] == '+' || s[0] == '-')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (n - i < 3 || strncasecmp(s + i, "nan", 3) != 0)
        return 0;
    i += 3;
    uint64_t mbits = f32 ? 23 : 52;
    uint64_t mmask = (1ull << mbits) - 1;
    uint64_t quiet = 1ull << (mbits - 1);
    uint64_t payload = quiet;
    if (i < n) {
        if (s[i] != '(' || s[n - 1] != ')')
            return -1;
        const char *p = s + i + 1, *end = s + n - 1;
        if (p < end) {
            unsigned base = 10;
            if (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
                base = 16;
                p += 2;
            }
            uint64_t v = 0;
            for (; p < end; p++) {
                int d = hexval(*p);
                if (d < 0 || (unsigned)d >= base)
                    return -1;
                if (v > mmask)
                    return -2;   /* keep going would overflow; already too big */
                v = v * base + (unsigned)d;
            }
            if (v == 0 || v > mmask)
                return -2;   /* 0 would be infinity */
            payload = v;
        }
    }
    uint64_t expo = f32 ? 0xffull << 23 : 0x7ffull << 52;
    uint64_t sign = neg ? 1ull << (f32 ? 31 : 63) : 0;
    *bits = sign | expo | payload;
    return 1;
}

/* f32 / f64: the value's bits. */
static enum gguf_err parse_float(struct pctx *c, const char *s, size_t n,
                                 unsigned t, uint64_t *bits)
{
    bool f32 = t == GGUF_F32;
    int r = scan_nan(s, n, f32, bits);
    if (r == 1)
        return GGUF_OK;
    if (r == -2)
        return out_of_range(c, s, n, t);
    /* strtod skips leading space and needs a NUL-terminated copy */
    if (r == -1 || n == 0 || memchr(s, '\0', n) ||
        strchr(" \t\n\v\f\r", s[0]))
        return not_a(c, s, n, t);
    char small[128];
    char *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf) {
        c->out->oom = true;
        return GGUF_E_NOMEM;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    bool bad, big;
    if (f32) {
        float v = strtof(buf, &end);
        uint32_t b;
        memcpy(&b, &v, 4);
        *bits = b;
        big = isinf(v);
    } else {
        double v = strtod(buf, &end);
        memcpy(bits, &v, 8);
        big = isinf(v);
    }
    bad = end != buf + n || end == buf;
    /* ERANGE also flags underflow (subnormal or zero results), which is
     * fine; only a finite number that overflowed to infinity is refused. */
    big = big && errno == ERANGE;
    if (buf != small)
        free(buf);
    if (bad)
        return not_a(c, s, n, t);
    if (big)
        return out_of_range(c, s, n, t);
    return GGUF_OK;
}

static enum gguf_err parse_bool(struct pctx *c, const char *s, size_t n,
                                uint64_t *bits)
{
    if (n == 4 && strncasecmp(s, "true", 4) == 0) {
        *bits = 1;
        return GGUF_OK;
    }
    if (n == 5 && strncasecmp(s, "false", 5) == 0) {
        *bits = 0;
        return GGUF_OK;
    }
    bool neg;
    uint64_t mag;
    if (scan_int(s, n, &neg, &mag) == 1)
        return not_a(c, s, n, GGUF_BOOL);
    return parse_int(c, s, n, GGUF_BOOL, bits);
}

static bool blank(char ch)
{
    return ch == ' ' || (ch >= '\t' && ch <= '\r');
}

/* One scalar token (not a string), white space around it ignored -> its
 * encoding. */
static enum gguf_err parse_scalar(struct pctx *c, unsigned t, const char *s,
                                  size_t n)
{
    uint64_t v = 0;
    enum gguf_err err;
    while (n && blank(s[0]))
        s++, n--;
    while (n && blank(s[n - 1]))
        n--;
    if (t == GGUF_F32 || t == GGUF_F64)
        err = parse_float(c, s, n, t, &v);
    else if (t == GGUF_BOOL)
        err = parse_bool(c, s, n, &v);
    else
        err = parse_int(c, s, n, t, &v);
    if (err)
        return err;
    switch (gguf_vtype_size(t)) {
    case 1: gguf_buf_putc(c->out, (char)(uint8_t)v); break;
    case 2: gguf_put16(c->out, c->e, (uint16_t)v); break;
    case 4: gguf_put32(c->out, c->e, (uint32_t)v); break;
    default: gguf_put64(c->out, c->e, v); break;
    }
    return GGUF_OK;
}

/* Length then bytes. */
static enum gguf_err put_string(struct pctx *c, const char *s, size_t n)
{
    if (c->e->v1 && n > UINT32_MAX)
        return fail(c, GGUF_E_RANGE, s, "string of %zu bytes is too long "
                    "for GGUF v1", n);
    gguf_put_count(c->out, c->e, n);
    gguf_buf_put(c->out, s, n);
    return GGUF_OK;
}

/* An element line of a flat string array: un-escapes \\, \n, \r. */
static enum gguf_err parse_escaped_line(struct pctx *c, const char *s, size_t n)
{
    enum gguf_err err = check_utf8(c, s, n);
    if (err)
        return err;
    size_t slot = put_count_slot(c), len = 0, run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\')
            continue;
        char ch = i + 1 < n ? s[i + 1] : '\0';
        char r = ch == '\\' ? '\\' : ch == 'n' ? '\n' : ch == 'r' ? '\r' : 0;
        if (!r) {
            char q[200];
            quote(q, sizeof q, s + i, i + 1 < n ? 2 : 1);
            return fail(c, GGUF_E_SYNTAX, s + i, "bad escape %s (only \\\\, "
                        "\\n and \\r are allowed)", q);
        }
        gguf_buf_put(c->out, s + run, i - run);
        gguf_buf_putc(c->out, r);
        len += i - run + 1;
        i++;
        run = i + 1;
    }
    gguf_buf_put(c->out, s + run, n - run);
    len += n - run;
    if (!patch_count(c, slot, len))
        return fail(c, GGUF_E_RANGE, s, "string of %zu bytes is too long "
                    "for GGUF v1", len);
    return GGUF_OK;
}

/* ---- parsing: nested arrays as JSON ------------------------------------------ */

struct jcur {
    const char *s;   /* the line */
    size_t n, i;
};

static void jskip_ws(struct jcur *j)
{
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' ||
                           j->s[j->i] == '\r'))
        j->i++;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int d = hexval(p[k]);
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t utf8_put(char *dst, uint32_t cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xc0 | cp >> 6);
        dst[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xe0 | cp >> 12);
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        dst[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    dst[0] = (char)(0xf0 | cp >> 18);
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    dst[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A JSON string at j->i (the opening quote) -> length and bytes. */
static enum gguf_err json_string(struct pctx *c, struct jcur *j)
{
    const char *s = j->s;
    size_t start = j->i + 1, k = start;
    while (k < j->n && s[k] != '"')
        k += s[k] == '\\' ? 2 : 1;
    if (k >= j->n)
        return fail(c, GGUF_E_SYNTAX, s + j->i, "unterminated string");
    enum gguf_err err = check_utf8(c, s + start, k - start);
    if (err)
        return err;
    size_t slot = put_count_slot(c), len = 0;
    for (size_t i = start; i < k; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20)
            return fail(c, GGUF_E_SYNTAX, s + i, "control byte 0x%02x in a "
                        "JSON string (write it as \\u%04x)", ch, ch);
        if (ch != '\\') {
            size_t r = i;
            while (i + 1 < k && s[i + 1] != '\\' && (unsigned char)s[i + 1] >= 0x20)
                i++;
            gguf_buf_put(c->out, s + r, i - r + 1);
            len += i - r + 1;
            continue;
        }
        char e = s[i + 1], u[4];
        size_t un = 1;
        switch (e) {
        case '"': case '\\': case '/': u[0] = e; break;
        case 'b': u[0] = '\b'; break;
        case 'f': u[0] = '\f'; break;
        case 'n': u[0] = '\n'; break;
        case 'r': u[0] = '\r'; break;
        case 't': u[0] = '\t'; break;
        case 'u': {
            int cp = k - i >= 6 ? hex4(s + i + 2) : -1;
            size_t esc = 6;
            if (cp >= 0xd800 && cp <= 0xdbff) {   /* needs its low half */
                int lo = k - i >= 12 && s[i + 6] == '\\' && s[i + 7] == 'u'
                         ? hex4(s + i + 8) : -1;
                if (lo < 0xdc00 || lo > 0xdfff)
                    cp = -1;
                else
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                esc = 12;
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                cp = -1;
            }
            if (cp < 0)
                return fail(c, GGUF_E_SYNTAX, s + i, "bad \\u escape");
            un = utf8_put(u, (uint32_t)cp);
            i += esc - 2;
            break;
        }
        default: {
            char q[200];
            quote(q, sizeof q, s + i, 2);
            return fail(c, GGUF_E_SYNTAX, s + i, "bad escape %s", q);
        }
        }
        gguf_buf_put(c->out, u, un);
        len += un;
        i++;
    }
    if (!patch_count(c, slot, len))
        return fail(c, GGUF_E_RANGE, s + start, "string of %zu bytes is too "
                    "long for GGUF v1", len);
    j->i = k + 1;
    return GGUF_OK;
}

/* A JSON array at j->i whose type is levels[0] == ARRAY, levels[1]... */
static enum gguf_err json_array(struct pctx *c, struct jcur *j,
                                const uint8_t *levels)
{
    unsigned et = levels[1];
    jskip_ws(j);
    if (j->i >= j->n || j->s[j->i] != '[')
        return fail(c, GGUF_E_SYNTAX, j->s + j->i, "expected '['");
    const char *open = j->s + j->i;
    j->i++;
    gguf_put32(c->out, c->e, et);
    size_t slot = put_count_slot(c);
    uint64_t count = 0;
    jskip_ws(j);
    if (j->i < j->n && j->s[j->i] == ']') {
        j->i++;
    } else {
        for (;;) {
            enum gguf_err err;
            jskip_ws(j);
            if (et == GGUF_ARRAY) {
                err = json_array(c, j, levels + 1);
            } else if (et == GGUF_STRING) {
                if (j->i >= j->n || j->s[j->i] != '"')
                    return fail(c, GGUF_E_SYNTAX, j->s + j->i,
                                "expected a JSON string");
                err = json_string(c, j);
            } else {
                size_t a = j->i;
                while (j->i < j->n && !strchr(",] \t\r", j->s[j->i]))
                    j->i++;
                err = parse_scalar(c, et, j->s + a, j->i - a);
            }
            if (err)
                return err;
            count++;
            jskip_ws(j);
            if (j->i < j->n && j->s[j->i] == ',') {
                j->i++;
                continue;
            }
            if (j->i < j->n && j->s[j->i] == ']') {
                j->i++;
                break;
            }
            return fail(c, GGUF_E_SYNTAX, j->s + j->i, "expected ',' or ']'");
        }
    }
    if (!patch_count(c, slot, count))
        return fail(c, GGUF_E_RANGE, open, "too many elements for GGUF v1");
    return GGUF_OK;
}

/* One line of an array of arrays. */
static enum gguf_err parse_json_line(struct pctx *c, const char *s, size_t n,
                                     const uint8_t *levels)
{
    struct jcur j = { s, n, 0 };
    enum gguf_err err = json_array(c, &j, levels);
    if (err)
        return err;
    jskip_ws(&j);
    if (j.i != n)
        return fail(c, GGUF_E_SYNTAX, s + j.i, "trailing text after the array");
    return GGUF_OK;
}

/* ---- parsing: top level -------------------------------------------------- */

static enum gguf_err parse_array(struct pctx *c, const struct gguf_typedesc *t,
                                 const char *text, size_t len)
{
    unsigned et = t->levels[1];
    gguf_put32(c->out, c->e, et);
    size_t slot = put_count_slot(c);
    uint64_t count = 0;
    /* "" is the empty array; otherwise one element per line, the last line's
     * "\n" optional (so "\n" is one empty element). */
    if (len) {
        size_t body = text[len - 1] == '\n' ? len - 1 : len, i = 0;
        for (;;) {
            const char *nl = memchr(text + i, '\n', body - i);
            size_t end = nl ? (size_t)(nl - text) : body;
            const char *s = text + i;
            size_t n = end - i;
            enum gguf_err err;
            c->line = (unsigned)(count + 1 > UINT32_MAX ? UINT32_MAX : count + 1);
            if (et == GGUF_STRING)
                err = parse_escaped_line(c, s, n);
            else if (et == GGUF_ARRAY)
                err = parse_json_line(c, s, n, t->levels + 1);
            else
                err = parse_scalar(c, et, s, n);
            if (err)
                return err;
            if (c->out->oom)
                return GGUF_E_NOMEM;
            count++;
            if (!nl)
                break;
            i = end + 1;
        }
    }
    c->line = 0;
    if (!patch_count(c, slot, count))
        return fail(c, GGUF_E_RANGE, text, "%llu elements are too many for "
                    "GGUF v1", (unsigned long long)count);
    return GGUF_OK;
}

enum gguf_err gguf_parse_value(const struct gguf_enc *e,
                               const struct gguf_typedesc *t,
                               const char *text, size_t len,
                               struct gguf_buf *out, struct gguf_diag *diag)
{
    struct pctx c = { e, text, out, diag, 0 };
    size_t start = out->len;
    enum gguf_err err;
    if (!gguf_typedesc_valid(t)) {
        err = fail(&c, GGUF_E_INVAL, text, "invalid type description");
    } else if (out->oom) {
        err = GGUF_E_NOMEM;
    } else {
        unsigned ty = t->levels[0];
        if (ty == GGUF_ARRAY) {
            err = parse_array(&c, t, text, len);
        } else {
            /* a scalar or string: one trailing "\n" is not part of it */
            size_t n = len && text[len - 1] == '\n' ? len - 1 : len;
            if (ty == GGUF_STRING) {
                err = check_utf8(&c, text, n);
                if (!err)
                    err = put_string(&c, text, n);
            } else {
                err = parse_scalar(&c, ty, text, n);
            }
        }
    }
    if (!err && out->oom)
        err = GGUF_E_NOMEM;
    if (err == GGUF_E_NOMEM && diag) {
        snprintf(diag->msg, sizeof diag->msg, "out of memory");
        diag->offset = 0;
    }
    if (err)
        out->len = start;   /* out unchanged (except its capacity) */
    return err;
}

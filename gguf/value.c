/*
 * gguf/value.c — metadata values as text, and text back into values.
 *
 * Layout assumed for struct gguf_kv (agreed with gguf/parse.c):
 *   - scalar:  val_off at the value bytes, count = 1;
 *   - string:  val_off at the length field (u64, u32 for v1), count = 1;
 *   - array:   val_off at the first element (after element type and count),
 *              count = element count, elem_type set;
 *   - val_size = bytes from val_off to the end of the value.
 * The array nesting limit follows parse.c: at most GGUF_MAX_NEST array
 * levels counting the outermost one, so a typedesc has at most
 * GGUF_MAX_NEST + 1 levels.
 *
 * Choices the header leaves open:
 *   - bool: byte 0 -> "false", 1 -> "true", any other byte -> its decimal
 *     value; parsing accepts true/false and decimals 0..255.
 *   - nested arrays: each line is a JSON array, elements separated by ", "
 *     (as Python's json.dumps does); numbers as in the scalar form, so
 *     "nan", "inf" and "nan(0x1)" appear unquoted; bools as true/false (or
 *     the decimal byte); strings as JSON strings with \" \\ \n \r \t \b \f
 *     and \u00XX for other control bytes, every other byte as is.  Each
 *     inner array is rendered with its own element type, but parsed with the
 *     typedesc of the key (taken from the first element).
 *   - a string stored in the file that is not valid UTF-8 renders as its
 *     bytes but cannot be written back (writes must be valid UTF-8).
 *   - floats: the shortest digit string that reads back to the same bits,
 *     in fixed notation when the decimal exponent is in [-4, 16) and
 *     otherwise as %g does ("1e-06", "10000", "1e+16", "3.4028235e+38").
 *
 * Number formatting and strtod depend on LC_NUMERIC; the daemon never calls
 * setlocale, so they use the "C" locale.
 */
#include "value.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- growable buffer ------------------------------------------------------ */

void gguf_buf_free(struct gguf_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = false;
}

/* Makes room for n more bytes (plus a NUL that printf may write). */
static bool buf_reserve(struct gguf_buf *b, size_t n)
{
    if (b->oom)
        return false;
    if (b->cap - b->len > n)
        return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len <= n) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return false;
        }
        cap *= 2;   /* geometric growth: appends are amortised O(1) */
    }
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

bool gguf_buf_put(struct gguf_buf *b, const void *p, size_t n)
{
    if (!buf_reserve(b, n))
        return false;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return true;
}

bool gguf_buf_putc(struct gguf_buf *b, char c)
{
    if (!buf_reserve(b, 1))
        return false;
    b->data[b->len++] = c;
    return true;
}

bool gguf_buf_printf(struct gguf_buf *b, const char *fmt, ...)
{
    if (!buf_reserve(b, 64))
        return false;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return false;
    if ((size_t)n >= b->cap - b->len) {
        if (!buf_reserve(b, (size_t)n))
            return false;
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    b->len += (size_t)n;
    return true;
}

/* ---- types -------------------------------------------------------------- */

static const char *const vtype_names[GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
    "array", "u64", "i64", "f64",
};

const char *gguf_vtype_name(unsigned t)
{
    return t < GGUF_VTYPE_COUNT ? vtype_names[t] : "?";
}

/* "an i32", "a u8": for messages. */
static const char *article(unsigned t)
{
    const char *n = gguf_vtype_name(t);
    return n[0] == 'i' || n[0] == 'f' ? "an" : "a";
}

static unsigned scalar_size(unsigned t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* Width of string lengths and array counts. */
static unsigned cw(const struct gguf_enc *e)
{
    return e->v1 ? 4 : 8;
}

static uint64_t rd_count(const struct gguf_enc *e, const uint8_t *p)
{
    return e->v1 ? gguf_rd32(e, p) : gguf_rd64(e, p);
}

/* A typedesc is well formed when every level but the last is ARRAY. */
static bool typedesc_ok(const struct gguf_typedesc *t)
{
    if (t->depth < 1 || t->depth > GGUF_MAX_NEST + 1)
        return false;
    for (unsigned i = 0; i < t->depth; i++) {
        bool last = i + 1 == t->depth;
        if (t->levels[i] >= GGUF_VTYPE_COUNT)
            return false;
        if ((t->levels[i] == GGUF_ARRAY) == last)
            return false;
    }
    return true;
}

bool gguf_typedesc_parse(const char *s, size_t len, struct gguf_typedesc *t)
{
    struct gguf_typedesc d = { 0 };
    size_t i = 0;
    while (len - i >= 6 && memcmp(s + i, "array[", 6) == 0) {
        if (d.depth == GGUF_MAX_NEST)
            return false;
        d.levels[d.depth++] = GGUF_ARRAY;
        i += 6;
    }
    /* the innermost name, then one ']' per "array[" */
    if (len < d.depth || len - d.depth < i)
        return false;
    size_t end = len - d.depth;
    for (size_t k = end; k < len; k++)
        if (s[k] != ']')
            return false;
    for (unsigned v = 0; v < GGUF_VTYPE_COUNT; v++) {
        if (v == GGUF_ARRAY)
            continue;   /* "array" alone names no complete type */
        size_t n = strlen(vtype_names[v]);
        if (n == end - i && memcmp(s + i, vtype_names[v], n) == 0) {
            d.levels[d.depth++] = (uint8_t)v;
            *t = d;
            return true;
        }
    }
    return false;
}

bool gguf_typedesc_format(const struct gguf_typedesc *t, struct gguf_buf *out)
{
    if (!typedesc_ok(t))
        return false;
    for (unsigned i = 0; i + 1 < t->depth; i++)
        gguf_buf_put(out, "array[", 6);
    const char *n = vtype_names[t->levels[t->depth - 1]];
    gguf_buf_put(out, n, strlen(n));
    for (unsigned i = 0; i + 1 < t->depth; i++)
        gguf_buf_putc(out, ']');
    return !out->oom;
}

void gguf_kv_typedesc(const struct gguf_file *f, const struct gguf_kv *kv,
                      struct gguf_typedesc *t)
{
    memset(t, 0, sizeof *t);
    t->levels[0] = kv->type < GGUF_VTYPE_COUNT ? kv->type : GGUF_U8;
    t->depth = 1;
    if (kv->type != GGUF_ARRAY)
        return;
    t->levels[t->depth++] = kv->elem_type < GGUF_VTYPE_COUNT ? kv->elem_type
                                                             : GGUF_U8;
    /* Walk down the first elements of nested arrays; bounds-checked even
     * though gguf_open validated the value. */
    const uint8_t *p = NULL;
    uint64_t rem = 0, n = kv->count;
    if (kv->val_off <= f->hdr_size && kv->val_size <= f->hdr_size - kv->val_off) {
        p = f->hdr + kv->val_off;
        rem = kv->val_size;
    }
    unsigned hw = 4 + cw(&f->enc);
    while (t->levels[t->depth - 1] == GGUF_ARRAY) {
        if (t->depth == GGUF_MAX_NEST + 1) {   /* too deep: cannot happen */
            t->levels[t->depth - 1] = GGUF_U8;
            break;
        }
        if (n == 0 || rem < hw) {              /* no first element to look at */
            t->levels[t->depth++] = GGUF_U8;
            break;
        }
        uint32_t et = gguf_rd32(&f->enc, p);
        n = rd_count(&f->enc, p + 4);
        t->levels[t->depth++] = et < GGUF_VTYPE_COUNT ? (uint8_t)et : GGUF_U8;
        p += hw;
        rem -= hw;
    }
}

/* ---- rendering: numbers ---------------------------------------------------- */

/* Decimal digits of v, written backwards ending at end; returns the start. */
static char *utoa_rev(uint64_t v, char *end)
{
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return end;
}

static void put_u64(struct gguf_buf *out, uint64_t v)
{
    char tmp[24];
    char *s = utoa_rev(v, tmp + sizeof tmp);
    gguf_buf_put(out, s, (size_t)(tmp + sizeof tmp - s));
}

static void put_i64(struct gguf_buf *out, int64_t v)
{
    char tmp[24];
    /* magnitude via unsigned arithmetic so INT64_MIN does not overflow */
    uint64_t m = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    char *s = utoa_rev(m, tmp + sizeof tmp);
    if (v < 0)
        *--s = '-';
    gguf_buf_put(out, s, (size_t)(tmp + sizeof tmp - s));
}

static bool roundtrips(const char *s, double v, bool f32)
{
    if (f32) {
        float a = strtof(s, NULL), b = (float)v;
        return memcmp(&a, &b, sizeof a) == 0;
    }
    double a = strtod(s, NULL);
    return memcmp(&a, &v, sizeof a) == 0;
}

/* The first p of the significand digits d[0..n), plus one unit in the last
 * place if up; a carry out of the first digit becomes "1" and bumps *exp. */
static void cut_digits(const char *d, int p, bool up, char *out, int *exp)
{
    memcpy(out, d, (size_t)p);
    if (!up)
        return;
    int i = p - 1;
    while (i >= 0 && out[i] == '9')
        out[i--] = '0';
    if (i >= 0) {
        out[i]++;
    } else {
        out[0] = '1';
        (*exp)++;
    }
}

/*
 * Is there a p-digit decimal that reads back as a?  The candidates are the
 * p-digit numbers just below and just above a, i.e. printf's digits cut to
 * p, and that plus one unit (printf's digits round a, so the cut is never
 * below the lower neighbour nor above the upper one).  The nearer one is
 * tried first; the one found goes to cand and *exp.
 */
static bool p_digits_suffice(const char *d, int n, int p, int exp0, double a,
                             bool f32, char *cand, int *exp)
{
    bool up_first = p < n && d[p] >= '5';
    for (int k = 0; k < 2; k++) {
        bool up = k == 0 ? up_first : !up_first;
        if (up && p == n)
            continue;   /* printf's own digits: no other candidate */
        char t[48], *q = t;
        *exp = exp0;
        cut_digits(d, p, up, cand, exp);
        /* "D.DDDe-X", built by hand: printf here would double the cost */
        *q++ = cand[0];
        *q++ = '.';
        memcpy(q, cand + 1, (size_t)p - 1);
        q += p - 1;
        *q++ = 'e';
        if (*exp < 0)
            *q++ = '-';
        char num[8], *ds = utoa_rev((uint64_t)(*exp < 0 ? -*exp : *exp),
                                    num + sizeof num);
        memcpy(q, ds, (size_t)(num + sizeof num - ds));
        q += num + sizeof num - ds;
        *q = '\0';
        if (roundtrips(t, a, f32))
            return true;
    }
    return false;
}

/* The significant digits of printf's "d.ddde+XX" (n bytes) into d. */
static int split_e(const char *s, int n, char *d, size_t cap)
{
    int nd = 0;
    for (int i = 0; i < n && s[i] != 'e'; i++)
        if (s[i] >= '0' && s[i] <= '9' && (size_t)nd < cap)
            d[nd++] = s[i];
    return nd;
}

/* The decimal exponent of printf's "d.ddde+XX". */
static int exp_e(const char *s)
{
    const char *e = strchr(s, 'e');
    return e ? atoi(e + 1) : 0;
}

/*
 * Shortest digits for a finite v, laid out like Python's repr without the
 * ".0": fixed notation for decimal exponents in [-4, 16), else d.ddde+XX.
 *
 * The text is the same as taking the least p for which "%.{p-1}e" reads
 * back to v.  Speed matters (vocabularies carry 100k+ scores), so instead
 * of printing every p, printf runs once for 9 (f32) or 17 (f64) digits,
 * which always read back; the least p is found by cutting candidates from
 * those digits and checking them with strtof/strtod, and only the final
 * text is printed again.
 */
static size_t fmt_finite(double v, bool f32, char *buf, size_t cap)
{
    bool neg = signbit(v);
    double a = fabs(v);
    char res[64];
    size_t k = 0;
    if (neg)
        res[k++] = '-';

    /* Integers below 2^24 (f32) / 2^53 (f64): every integer nearby is
     * representable, so the integer's own digits are the shortest text. */
    if (a < (f32 ? 16777216.0 : 9007199254740992.0) && a == floor(a)) {
        char tmp[24];
        char *s = utoa_rev((uint64_t)a, tmp + sizeof tmp);
        size_t n = (size_t)(tmp + sizeof tmp - s);
        memcpy(res + k, s, n);
        k += n;
        res[k] = '\0';
        snprintf(buf, cap, "%s", res);
        return k < cap ? k : cap - 1;
    }

    int maxp = f32 ? 9 : 17;
    char full[48], digits[24], cand[24];
    int nd = split_e(full, snprintf(full, sizeof full, "%.*e", maxp - 1, a),
                     digits, sizeof digits), exp0 = exp_e(full);

    /* A p-digit decimal is also a (p+1)-digit one, so "p digits suffice"
     * is monotone in p: binary search for the least p.  Real data (scores,
     * weights) mostly needs nearly all digits, so the first probe is near
     * the top. */
    int lo = 1, hi = nd, e;
    for (int mid = nd - 2; lo < hi; mid = (lo + hi) / 2) {
        if (mid < lo)
            mid = lo;
        if (p_digits_suffice(digits, nd, mid, exp0, a, f32, cand, &e))
            hi = mid;
        else
            lo = mid + 1;
    }
    /* The text is a correctly rounded "%.*e" (digits cut from a rounded
     * string can round the other way in ties), with the least p >= hi that
     * reads back: usually hi itself; the loop covers the rare case where
     * only the farther p-digit neighbour of a power of two reads back. */
    int exp = exp0;
    for (int p = hi; p <= maxp; p++) {
        snprintf(full, sizeof full, "%.*e", p - 1, a);
        if (roundtrips(full, a, f32) || p == maxp) {
            hi = split_e(full, strlen(full), cand, sizeof cand);
            exp = exp_e(full);
            break;
        }
    }
    int n = hi;
    while (n > 1 && cand[n - 1] == '0')
        n--;

    if (exp < -4 || exp >= 16) {
        res[k++] = cand[0];
        if (n > 1) {
            res[k++] = '.';
            memcpy(res + k, cand + 1, (size_t)n - 1);
            k += (size_t)n - 1;
        }
        k += (size_t)snprintf(res + k, sizeof res - k, "e%c%02d",
                              exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        res[k++] = '0';
        res[k++] = '.';
        for (int z = -1; z > exp; z--)
            res[k++] = '0';
        memcpy(res + k, cand, (size_t)n);
        k += (size_t)n;
    } else {
        int ip = exp + 1;   /* digits before the point */
        for (int i = 0; i < ip; i++)
            res[k++] = i < n ? cand[i] : '0';
        if (n > ip) {
            res[k++] = '.';
            memcpy(res + k, cand + ip, (size_t)(n - ip));
            k += (size_t)(n - ip);
        }
    }
    res[k] = '\0';
    snprintf(buf, cap, "%s", res);
    return k < cap ? k : cap - 1;
}

/* "nan", "-nan", "nan(0x1)": the default quiet NaN is plain, others carry
 * their mantissa bits so that they round-trip. */
static size_t fmt_nan(bool neg, uint64_t mant, uint64_t quiet, char *buf,
                      size_t cap)
{
    int n;
    if (mant == quiet)
        n = snprintf(buf, cap, "%snan", neg ? "-" : "");
    else
        n = snprintf(buf, cap, "%snan(0x%llx)", neg ? "-" : "",
                     (unsigned long long)mant);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

size_t gguf_fmt_f32(float v, char *buf, size_t cap)
{
    uint32_t bits;
    memcpy(&bits, &v, 4);
    bool neg = bits >> 31;
    if (isnan(v))
        return fmt_nan(neg, bits & 0x7fffff, 0x400000, buf, cap);
    if (isinf(v))
        return (size_t)snprintf(buf, cap, "%s", neg ? "-inf" : "inf");
    return fmt_finite(v, true, buf, cap);
}

size_t gguf_fmt_f64(double v, char *buf, size_t cap)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    bool neg = bits >> 63;
    if (isnan(v))
        return fmt_nan(neg, bits & 0xfffffffffffffull, 0x8000000000000ull,
                       buf, cap);
    if (isinf(v))
        return (size_t)snprintf(buf, cap, "%s", neg ? "-inf" : "inf");
    return fmt_finite(v, false, buf, cap);
}

/* Text of one scalar of type t at p (scalar_size(t) bytes available). */
static void render_scalar(const struct gguf_enc *e, unsigned t,
                          const uint8_t *p, struct gguf_buf *out)
{
    char tmp[64];
    switch (t) {
    case GGUF_U8: put_u64(out, p[0]); break;
    case GGUF_I8: put_i64(out, (int8_t)p[0]); break;
    case GGUF_U16: put_u64(out, gguf_rd16(e, p)); break;
    case GGUF_I16: put_i64(out, (int16_t)gguf_rd16(e, p)); break;
    case GGUF_U32: put_u64(out, gguf_rd32(e, p)); break;
    case GGUF_I32: put_i64(out, (int32_t)gguf_rd32(e, p)); break;
    case GGUF_U64: put_u64(out, gguf_rd64(e, p)); break;
    case GGUF_I64: put_i64(out, (int64_t)gguf_rd64(e, p)); break;
    case GGUF_BOOL:
        if (p[0] == 0)
            gguf_buf_put(out, "false", 5);
        else if (p[0] == 1)
            gguf_buf_put(out, "true", 4);
        else
            put_u64(out, p[0]);   /* keeps odd bytes round-tripping */
        break;
    case GGUF_F32: {
        uint32_t b = gguf_rd32(e, p);
        float v;
        memcpy(&v, &b, 4);
        gguf_buf_put(out, tmp, gguf_fmt_f32(v, tmp, sizeof tmp));
        break;
    }
    case GGUF_F64: {
        uint64_t b = gguf_rd64(e, p);
        double v;
        memcpy(&v, &b, 8);
        gguf_buf_put(out, tmp, gguf_fmt_f64(v, tmp, sizeof tmp));
        break;
    }
    default: break;
    }
}

/* ---- rendering: strings and arrays ------------------------------------------ */

/* An element of a flat string array: '\' -> "\\", LF -> "\n", CR -> "\r". */
static void put_escaped_line(struct gguf_buf *out, const uint8_t *s, uint64_t n)
{
    uint64_t run = 0;   /* start of the bytes not yet copied */
    for (uint64_t i = 0; i < n; i++) {
        const char *esc;
        switch (s[i]) {
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        default: continue;
        }
        gguf_buf_put(out, s + run, i - run);
        gguf_buf_put(out, esc, 2);
        run = i + 1;
    }
    gguf_buf_put(out, s + run, n - run);
}

static void put_json_string(struct gguf_buf *out, const uint8_t *s, uint64_t n)
{
    gguf_buf_putc(out, '"');
    uint64_t run = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        gguf_buf_put(out, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': gguf_buf_put(out, "\\\"", 2); break;
        case '\\': gguf_buf_put(out, "\\\\", 2); break;
        case '\n': gguf_buf_put(out, "\\n", 2); break;
        case '\r': gguf_buf_put(out, "\\r", 2); break;
        case '\t': gguf_buf_put(out, "\\t", 2); break;
        case '\b': gguf_buf_put(out, "\\b", 2); break;
        case '\f': gguf_buf_put(out, "\\f", 2); break;
        default: gguf_buf_printf(out, "\\u%04x", c); break;
        }
    }
    gguf_buf_put(out, s + run, n - run);
    gguf_buf_putc(out, '"');
}

/* Reads a string header at p with size bytes available: *n = its length.
 * Returns the header width, or 0 if it or the bytes do not fit. */
static unsigned str_at(const struct gguf_enc *e, const uint8_t *p,
                       uint64_t size, uint64_t *n)
{
    unsigned w = cw(e);
    if (size < w)
        return 0;
    *n = rd_count(e, p);
    return *n <= size - w ? w : 0;
}

/*
 * A nested array as JSON.  p points at its element type field, size bytes
 * available; level is the array level of this array (the outermost is 1).
 * *used is set to the bytes it takes.
 */
static enum gguf_err render_json(const struct gguf_enc *e, const uint8_t *p,
                                 uint64_t size, unsigned level,
                                 struct gguf_buf *out, uint64_t *used)
{
    unsigned hw = 4 + cw(e);
    if (level > GGUF_MAX_NEST)
        return GGUF_E_RANGE;
    if (size < hw)
        return GGUF_E_TRUNCATED;
    uint32_t et = gguf_rd32(e, p);
    uint64_t n = rd_count(e, p + 4);
    uint64_t off = hw;
    unsigned sz = scalar_size(et);
    if (et >= GGUF_VTYPE_COUNT)
        return GGUF_E_TYPE;
    if (sz && n > (size - off) / sz)
        return GGUF_E_TRUNCATED;
    gguf_buf_putc(out, '[');
    for (uint64_t i = 0; i < n; i++) {
        if (out->oom)
            return GGUF_E_NOMEM;
        if (i)
            gguf_buf_put(out, ", ", 2);
        if (sz) {
            render_scalar(e, et, p + off, out);
            off += sz;
        } else if (et == GGUF_STRING) {
            uint64_t len;
            unsigned w = str_at(e, p + off, size - off, &len);
            if (!w)
                return GGUF_E_TRUNCATED;
            put_json_string(out, p + off + w, len);
            off += w + len;
        } else {
            uint64_t u;
            enum gguf_err err = render_json(e, p + off, size - off, level + 1,
                                            out, &u);
            if (err)
                return err;
            off += u;
        }
    }
    gguf_buf_putc(out, ']');
    *used = off;
    return out->oom ? GGUF_E_NOMEM : GGUF_OK;
}

static enum gguf_err render_array(const struct gguf_enc *e, unsigned et,
                                  const uint8_t *p, uint64_t count,
                                  uint64_t size, struct gguf_buf *out)
{
    unsigned sz = scalar_size(et);
    if (sz) {
        if (count > size / sz)
            return GGUF_E_TRUNCATED;
        for (uint64_t i = 0; i < count && !out->oom; i++) {
            render_scalar(e, et, p + i * sz, out);
            gguf_buf_putc(out, '\n');
        }
        return out->oom ? GGUF_E_NOMEM : GGUF_OK;
    }
    uint64_t off = 0;
    for (uint64_t i = 0; i < count; i++) {
        if (out->oom)
            return GGUF_E_NOMEM;
        if (et == GGUF_STRING) {
            uint64_t len;
            unsigned w = str_at(e, p + off, size - off, &len);
            if (!w)
                return GGUF_E_TRUNCATED;
            put_escaped_line(out, p + off + w, len);
            off += w + len;
        } else if (et == GGUF_ARRAY) {
            uint64_t u;
            enum gguf_err err = render_json(e, p + off, size - off, 2, out, &u);
            if (err)
                return err;
            off += u;
        } else {
            return GGUF_E_TYPE;
        }
        gguf_buf_putc(out, '\n');
    }
    return out->oom ? GGUF_E_NOMEM : GGUF_OK;
}

enum gguf_err gguf_render_value(const struct gguf_enc *e, uint8_t type,
                                uint8_t elem_type, const uint8_t *val,
                                uint64_t count, uint64_t size,
                                struct gguf_buf *out)
{
    size_t start = out->len;
    enum gguf_err err = GGUF_OK;
    if (out->oom)
        return GGUF_E_NOMEM;
    if (type == GGUF_ARRAY) {
        err = render_array(e, elem_type, val, count, size, out);
    } else if (type == GGUF_STRING) {
        uint64_t len;
        unsigned w = str_at(e, val, size, &len);
        if (!w) {
            err = GGUF_E_TRUNCATED;
        } else {
            gguf_buf_put(out, val + w, len);
            gguf_buf_putc(out, '\n');
        }
    } else if (scalar_size(type)) {
        if (size < scalar_size(type)) {
            err = GGUF_E_TRUNCATED;
        } else {
            render_scalar(e, type, val, out);
            gguf_buf_putc(out, '\n');
        }
    } else {
        err = GGUF_E_TYPE;
    }
    if (!err && out->oom)
        err = GGUF_E_NOMEM;
    if (err)
        out->len = start;
    return err;
}

enum gguf_err gguf_render_kv(const struct gguf_file *f,
                             const struct gguf_kv *kv, struct gguf_buf *out)
{
    if (kv->val_off > f->hdr_size || kv->val_size > f->hdr_size - kv->val_off)
        return GGUF_E_TRUNCATED;
    return gguf_render_value(&f->enc, kv->type, kv->elem_type,
                             f->hdr + kv->val_off, kv->count, kv->val_size, out);
}

/* ---- parsing ------------------------------------------------------------- */

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

static void put16(struct gguf_buf *out, const struct gguf_enc *e, uint16_t v)
{
    if (e->big_endian)
        v = __builtin_bswap16(v);
    gguf_buf_put(out, &v, 2);
}

static void wr32(const struct gguf_enc *e, void *p, uint32_t v)
{
    if (e->big_endian)
        v = __builtin_bswap32(v);
    memcpy(p, &v, 4);
}

static void wr64(const struct gguf_enc *e, void *p, uint64_t v)
{
    if (e->big_endian)
        v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
}

static void put32(struct gguf_buf *out, const struct gguf_enc *e, uint32_t v)
{
    char b[4];
    wr32(e, b, v);
    gguf_buf_put(out, b, 4);
}

static void put64(struct gguf_buf *out, const struct gguf_enc *e, uint64_t v)
{
    char b[8];
    wr64(e, b, v);
    gguf_buf_put(out, b, 8);
}

/* Reserves a length/count field; fill it in with patch_count. */
static size_t put_count_slot(struct pctx *c)
{
    static const char zero[8];
    size_t at = c->out->len;
    gguf_buf_put(c->out, zero, cw(c->e));
    return at;
}

/* Fills in a count field; false if it does not fit v1's 32 bits. */
static bool patch_count(struct pctx *c, size_t at, uint64_t v)
{
    if (c->out->oom)
        return true;   /* reported as NOMEM by the caller */
    if (c->e->v1) {
        if (v > UINT32_MAX)
            return false;
        wr32(c->e, c->out->data + at, (uint32_t)v);
    } else {
        wr64(c->e, c->out->data + at, v);
    }
    return true;
}

/* Offset of the first byte of s[0..n) that is not part of valid UTF-8
 * (no overlongs, no surrogates, nothing above U+10FFFF), or n. */
static size_t utf8_bad(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned lo = 0x80, hi = 0xbf;   /* range of the second byte */
        if (c >= 0xc2 && c <= 0xdf)
            k = 1;
        else if (c >= 0xe0 && c <= 0xef) {
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
        if (n - i <= k || s[i + 1] < lo || s[i + 1] > hi)
            return i;
        for (size_t j = 2; j <= k; j++)
            if (s[i + j] < 0x80 || s[i + j] > 0xbf)
                return i;
        i += k + 1;
    }
    return n;
}

static enum gguf_err check_utf8(struct pctx *c, const char *s, size_t n)
{
    size_t bad = utf8_bad((const unsigned char *)s, n);
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
    if (n == 4 && memcmp(s, "true", 4) == 0) {
        *bits = 1;
        return GGUF_OK;
    }
    if (n == 5 && memcmp(s, "false", 5) == 0) {
        *bits = 0;
        return GGUF_OK;
    }
    bool neg;
    uint64_t mag;
    if (scan_int(s, n, &neg, &mag) == 1)
        return not_a(c, s, n, GGUF_BOOL);
    return parse_int(c, s, n, GGUF_BOOL, bits);
}

/* One scalar token (not a string) -> its encoding. */
static enum gguf_err parse_scalar(struct pctx *c, unsigned t, const char *s,
                                  size_t n)
{
    uint64_t v = 0;
    enum gguf_err err;
    if (t == GGUF_F32 || t == GGUF_F64)
        err = parse_float(c, s, n, t, &v);
    else if (t == GGUF_BOOL)
        err = parse_bool(c, s, n, &v);
    else
        err = parse_int(c, s, n, t, &v);
    if (err)
        return err;
    switch (scalar_size(t)) {
    case 1: gguf_buf_putc(c->out, (char)(uint8_t)v); break;
    case 2: put16(c->out, c->e, (uint16_t)v); break;
    case 4: put32(c->out, c->e, (uint32_t)v); break;
    default: put64(c->out, c->e, v); break;
    }
    return GGUF_OK;
}

/* Length then bytes. */
static enum gguf_err put_string(struct pctx *c, const char *s, size_t n)
{
    if (c->e->v1 && n > UINT32_MAX)
        return fail(c, GGUF_E_RANGE, s, "string of %zu bytes is too long "
                    "for GGUF v1", n);
    if (c->e->v1)
        put32(c->out, c->e, (uint32_t)n);
    else
        put64(c->out, c->e, n);
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
    put32(c->out, c->e, et);
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
    put32(c->out, c->e, et);
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
    if (!typedesc_ok(t)) {
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

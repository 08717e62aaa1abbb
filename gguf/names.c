/*
 * gguf/names.c — key and tensor names as file names, and back.
 *
 * One addition to the escaping in names.h: a name that itself ends in '#'
 * followed by digits ("x#2") would read back as a duplicate suffix, so that
 * one '#' (the last one, and only when digits follow it to the end) is
 * written "%23".  Every other '#' is kept.
 *
 * Decoding is strict: a file name is accepted only if encoding the decoded
 * name gives it back (hex digits of escapes may be lower case).  So each
 * name has exactly one file name, and "a%2e", ".x", "%41" or "x#01" are
 * refused rather than aliased.
 */
#include "names.h"

#include <ctype.h>
#include <string.h>

/* The position of a '#' that would be mistaken for a "#N" suffix, or len. */
static size_t suffix_hash(const char *s, size_t len)
{
    const char *h = NULL;
    for (size_t i = len; i > 0; i--)
        if (s[i - 1] == '#') {
            h = s + i - 1;
            break;
        }
    if (!h || h + 1 == s + len)
        return len;
    for (const char *p = h + 1; p < s + len; p++)
        if (*p < '0' || *p > '9')
            return len;
    return (size_t)(h - s);
}

bool gguf_name_encode(const char *name, size_t len, unsigned dup,
                      struct gguf_buf *out)
{
    if (len == 0)
        gguf_buf_putc(out, '%');
    size_t hash = suffix_hash(name, len), run = 0;
    for (size_t i = 0; i < len; i++) {
        const char *esc;
        switch (name[i]) {
        case '/': esc = "%2F"; break;
        case '%': esc = "%25"; break;
        case '\0': esc = "%00"; break;
        case '.': if (i != 0) continue; esc = "%2E"; break;
        case '#': if (i != hash) continue; esc = "%23"; break;
        default: continue;
        }
        gguf_buf_put(out, name + run, i - run);
        gguf_buf_put(out, esc, 3);
        run = i + 1;
    }
    gguf_buf_put(out, name + run, len - run);
    if (dup > 1)
        gguf_buf_printf(out, "#%u", dup);
    return !out->oom;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* fname equals enc except that hex digits of enc's escapes may differ in
 * case. */
static bool same_encoding(const char *fname, size_t len, const char *enc,
                          size_t elen)
{
    if (len != elen)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (fname[i] == enc[i])
            continue;
        bool in_hex = (i >= 1 && enc[i - 1] == '%') ||
                      (i >= 2 && enc[i - 2] == '%' && enc[i - 1] != '%');
        if (!in_hex || tolower((unsigned char)fname[i]) !=
                           tolower((unsigned char)enc[i]))
            return false;
    }
    return true;
}

bool gguf_name_decode(const char *fname, size_t len, struct gguf_buf *out,
                      unsigned *dup)
{
    size_t start = out->len;
    unsigned d = 1;

    /* a "#N" suffix: N >= 2, no leading zero */
    size_t base = suffix_hash(fname, len);
    if (base < len) {
        if (fname[base + 1] == '0')
            return false;
        unsigned long long v = 0;
        for (size_t i = base + 1; i < len; i++) {
            v = v * 10 + (unsigned)(fname[i] - '0');
            if (v > 0xffffffffull)
                return false;
        }
        if (v < 2)
            return false;
        d = (unsigned)v;
    }
    if (base == 0)
        return false;   /* encoding never yields an empty base */

    if (!(base == 1 && fname[0] == '%')) {   /* "%" is the empty name */
        for (size_t i = 0; i < base; i++) {
            char c = fname[i];
            if (c == '%') {
                int hi = i + 2 < base ? hexval(fname[i + 1]) : -1;
                int lo = hi >= 0 ? hexval(fname[i + 2]) : -1;
                if (lo < 0) {
                    out->len = start;
                    return false;
                }
                c = (char)(hi * 16 + lo);
                i += 2;
            }
            gguf_buf_putc(out, c);
        }
    }
    if (out->oom) {
        out->len = start;
        return false;
    }

    /* Strictness: only the canonical spelling of each name is accepted. */
    struct gguf_buf enc = { 0 };
    bool ok = gguf_name_encode(out->data ? out->data + start : "",
                               out->len - start, d, &enc) &&
              same_encoding(fname, len, enc.data, enc.len);
    gguf_buf_free(&enc);
    if (!ok) {
        out->len = start;
        return false;
    }
    *dup = d;
    return true;
}

bool gguf_key_name_valid(const char *name, size_t len)
{
    if (len == 0 || len > GGUF_MAX_NAME)
        return false;
    bool seg_empty = true;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (c == '.') {
            if (seg_empty)
                return false;
            seg_empty = true;
        } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') {
            seg_empty = false;
        } else {
            return false;
        }
    }
    return !seg_empty;
}

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool gguf_name_is_scratch(const char *fname, size_t len)
{
    if (len == 0)
        return false;
    if (fname[0] == '.' || fname[0] == '#' || fname[len - 1] == '~')
        return true;
    if (len == 9 && memcmp(fname, "sed", 3) == 0) {
        bool alnum = true;
        for (size_t i = 3; i < 9; i++)
            alnum = alnum && is_alnum(fname[i]);
        if (alnum)
            return true;
    }
    for (size_t i = 0; i < len; i++)
        if (fname[i] < '0' || fname[i] > '9')
            return false;
    return true;
}

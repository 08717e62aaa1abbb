/* remote/s3.c — object store names, URLs and error documents (see s3.h);
 * the profile files are s3_profile.c's, loading a store s3_load.c's. */
#include "s3.h"
#include "s3_impl.h"
#include "gguf/buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 1024
#define BUCKET_MAX 255

char s3_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

bool s3_prefix_ci(const char *s, const char *lit)
{
    for (; *lit; s++, lit++)
        if (s3_lower(*s) != *lit)
            return false;
    return true;
}

char *s3_dup_s(const char *s)
{
    return s ? gguf_str_dup_n(s, strlen(s)) : NULL;
}

void s3_wipe_free(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

/* ---- names ------------------------------------------------------------------------- */

bool remote_store_is_store(const char *arg)
{
    return s3_prefix_ci(arg, "s3://") || s3_prefix_ci(arg, "gs://");
}

static bool bucket_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

/* The bucket and key of a name, checked: NULL on success, else why not. */
const char *s3_parse_name(const char *name, const char **bucket, size_t *bn,
                              const char **key, size_t *kn)
{
    if (!remote_store_is_store(name))
        return "not an s3:// or gs:// name";
    const char *b = name + 5;
    size_t n = strcspn(b, "/");
    if (n == 0)
        return "no bucket (expected s3://BUCKET/KEY or gs://BUCKET/OBJECT)";
    if (!b[n] || !b[n + 1])
        return "no key after the bucket (expected s3://BUCKET/KEY or gs://BUCKET/OBJECT)";
    if (n > BUCKET_MAX)
        return "a bucket name longer than 255 bytes";
    for (size_t i = 0; i < n; i++)
        if (!bucket_char(b[i]))
            return "a bucket name is letters, digits, '.', '_' and '-'";
    const char *k = b + n + 1;
    size_t klen = strlen(k);
    if (klen > KEY_MAX)
        return "a key longer than 1024 bytes";
    for (size_t i = 0; i < klen; i++)
        if ((unsigned char)k[i] < 0x20 || k[i] == 0x7f)
            return "a key cannot contain control characters";
    for (size_t i = 0; i <= klen;) {
        size_t j = i;
        while (j < klen && k[j] != '/')
            j++;
        size_t sn = j - i;
        if (sn == 0 || (sn == 1 && k[i] == '.') || (sn == 2 && k[i] == '.' && k[i + 1] == '.'))
            return "a key with an empty, '.' or '..' path segment";
        i = j + 1;
    }
    *bucket = b;
    *bn = n;
    *key = k;
    *kn = klen;
    return NULL;
}

/* name as it may be shown: printable ASCII, at most 160 bytes */
static const char *shown_name(const char *name, char *out, size_t cap)
{
    size_t i = 0, n = strlen(name);
    for (; i < n && i + 1 < cap && i < 160; i++)
        out[i] = (name[i] >= 0x20 && name[i] <= 0x7e) ? name[i] : '?';
    out[i] = '\0';
    return out;
}

enum gguf_err remote_store_check_name(const char *name, struct gguf_diag *d)
{
    const char *b, *k;
    size_t bn, kn;
    const char *why = s3_parse_name(name, &b, &bn, &k, &kn);
    if (!why)
        return GGUF_OK;
    char shown[170];
    return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: %s",
                         shown_name(name, shown, sizeof shown), why);
}

bool remote_store_split_name(const char *name, char **bucket, char **key)
{
    const char *b, *k;
    size_t bn, kn;
    *bucket = *key = NULL;
    if (s3_parse_name(name, &b, &bn, &k, &kn))
        return false;
    *bucket = gguf_str_dup_n(b, bn);
    *key = gguf_str_dup_n(k, kn);
    if (!*bucket || !*key) {
        free(*bucket);
        free(*key);
        *bucket = *key = NULL;
        return false;
    }
    return true;
}

/* ---- URLs ---------------------------------------------------------------------------- */

/* A bucket that can be the first label of a host name (and match a
 * "*.s3.amazonaws.com" certificate): 3 to 63 of [a-z0-9-], not starting
 * or ending with '-'. */
bool s3_dns_bucket(const char *b, size_t n)
{
    if (n < 3 || n > 63 || b[0] == '-' || b[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-'))
            return false;
    return true;
}

static void enc(char *out, size_t *len, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '~' || c == '-' ||
                     c == '/';
        if (plain) {
            out[(*len)++] = (char)c;
        } else {
            out[(*len)++] = '%';
            out[(*len)++] = hex[c >> 4];
            out[(*len)++] = hex[c & 15];
        }
    }
}

char *remote_store_url(const struct remote_store *s, const char *name, const char *region)
{
    const char *b, *k;
    size_t bn, kn;
    if (s3_parse_name(name, &b, &bn, &k, &kn))
        return NULL;
    if (!region)
        region = s->region;
    bool virt = s->kind == REMOTE_STORE_S3 && !s->path_style && s3_dns_bucket(b, bn);
    char base[600];
    if (s->endpoint) {
        size_t sl = strstr(s->endpoint, "://") - s->endpoint + 3;
        if (virt)
            snprintf(base, sizeof base, "%.*s%.*s.%s", (int)sl, s->endpoint, (int)bn, b,
                     s->endpoint + sl);
        else
            snprintf(base, sizeof base, "%s/%.*s", s->endpoint, (int)bn, b);
    } else {
        const char *suffix = strncmp(region, "cn-", 3) == 0 ? "amazonaws.com.cn"
                                                             : "amazonaws.com";
        if (virt)
            snprintf(base, sizeof base, "https://%.*s.s3.%s.%s", (int)bn, b, region, suffix);
        else
            snprintf(base, sizeof base, "https://s3.%s.%s/%.*s", region, suffix, (int)bn, b);
    }
    size_t cap = strlen(base) + 1 + 3 * kn + 1, n = strlen(base);
    char *u = malloc(cap);
    if (!u)
        return NULL;
    memcpy(u, base, n);
    u[n++] = '/';
    enc(u, &n, k, kn);
    u[n] = '\0';
    return u;
}

/* ---- error documents ----------------------------------------------------------------------- */

/* The text of the first <tag>...</tag> in body, decoded and cleaned into
 * out (cap bytes); false when there is none. */
static bool element(const char *body, size_t len, const char *tag, char *out, size_t cap)
{
    char open[40], close[40];
    int on = snprintf(open, sizeof open, "<%s>", tag);
    int cn = snprintf(close, sizeof close, "</%s>", tag);
    const char *p = NULL;
    for (size_t i = 0; i + (size_t)on <= len; i++)
        if (memcmp(body + i, open, (size_t)on) == 0) {
            p = body + i + on;
            break;
        }
    if (!p)
        return false;
    size_t rest = len - (size_t)(p - body);
    const char *end = NULL;
    for (size_t i = 0; i + (size_t)cn <= rest; i++)
        if (memcmp(p + i, close, (size_t)cn) == 0) {
            end = p + i;
            break;
        }
    if (!end)
        return false;
    static const struct { const char *ent; char c; } ents[] = {
        { "&lt;", '<' }, { "&gt;", '>' }, { "&amp;", '&' }, { "&quot;", '"' }, { "&apos;", '\'' },
    };
    size_t k = 0;
    for (const char *q = p; q < end && k + 1 < cap;) {
        char c = *q;
        size_t adv = 1;
        if (c == '&') {
            for (size_t x = 0; x < sizeof ents / sizeof ents[0]; x++) {
                size_t n = strlen(ents[x].ent);
                if ((size_t)(end - q) >= n && memcmp(q, ents[x].ent, n) == 0) {
                    c = ents[x].c;
                    adv = n;
                    break;
                }
            }
        }
        if (c == '\n' || c == '\r' || c == '\t')
            c = ' ';
        out[k++] = (c >= 0x20 && c <= 0x7e) ? c : '?';
        q += adv;
    }
    while (k && out[k - 1] == ' ')
        k--;
    out[k] = '\0';
    return true;
}

bool remote_s3_error_parse(const char *body, size_t len, struct remote_s3_error *e)
{
    memset(e, 0, sizeof *e);
    if (!body || !len)
        return false;
    const char *start = NULL;
    for (size_t i = 0; i + 7 <= len; i++)
        if (memcmp(body + i, "<Error>", 7) == 0) {
            start = body + i;
            break;
        }
    if (!start)
        return false;
    size_t rest = len - (size_t)(start - body);
    if (!element(start, rest, "Code", e->code, sizeof e->code) || !e->code[0])
        return false;
    element(start, rest, "Message", e->message, sizeof e->message);
    char region[sizeof e->region + 8];
    if (element(start, rest, "Region", region, sizeof region) && remote_store_region_ok(region))
        memcpy(e->region, region, strlen(region) + 1);
    element(start, rest, "Endpoint", e->endpoint, sizeof e->endpoint);
    return true;
}

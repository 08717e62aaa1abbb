/* remote/url.c — URLs of remote models (see url.h). */
#include "url.h"
#include "s3.h"
#include "gguf/buf.h"

#include <curl/curl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_DEFAULT_ENDPOINT "https://huggingface.co"

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool prefix_ci(const char *s, const char *lit)
{
    for (; *lit; s++, lit++)
        if (lower(*s) != *lit)
            return false;
    return true;
}

bool remote_url_is_remote(const char *arg)
{
    return prefix_ci(arg, "http://") || prefix_ci(arg, "https://") || prefix_ci(arg, "hf://") ||
           remote_store_is_store(arg);
}

/* ---- redaction ------------------------------------------------------------ */

/* Length of a scheme followed by "://" at s, or 0. */
static size_t scheme_len(const char *s)
{
    size_t i = 0;
    while (s[i] && i < 32 &&
           (((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z') ||
            (i > 0 && ((s[i] >= '0' && s[i] <= '9') || s[i] == '+' || s[i] == '-' || s[i] == '.'))))
        i++;
    if (i > 0 && strncmp(s + i, "://", 3) == 0)
        return i + 3;
    return 0;
}

/* Writes the redacted form of url through put (called with pieces). */
struct sink {
    char *out;
    size_t cap, len;    /* len counts every byte, also those that did not fit */
};

static void put(struct sink *k, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char o = (c < 0x20 || c > 0x7e) ? '?' : (char)c;
        if (k->out && k->len + 1 < k->cap)
            k->out[k->len] = o;
        k->len++;
    }
}

static void put_raw(struct sink *k, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++) {
        if (k->out && k->len + 1 < k->cap)
            k->out[k->len] = s[i];
        k->len++;
    }
}

static void redact(const char *url, struct sink *k)
{
    size_t sl = scheme_len(url);
    const char *p = url + sl;
    put(k, url, sl);
    /* the authority: up to the first '/', '?' or '#'; userinfo ends at its
     * last '@' (without a scheme, the same up to the first '/') */
    size_t alen = strcspn(p, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (p[i] == '@')
            at = p + i;
    if (at) {
        alen -= (size_t)(at + 1 - p);
        p = at + 1;
    }
    size_t rest = strcspn(p, "?#");
    put(k, p, rest);
    if (p[rest] == '?')
        put_raw(k, "?\xe2\x80\xa6");        /* "?…" */
}

char *remote_url_redact(const char *url)
{
    struct sink k = { 0 };
    redact(url, &k);
    char *out = malloc(k.len + 1);
    if (!out)
        return NULL;
    k.out = out;
    k.cap = k.len + 1;
    k.len = 0;
    redact(url, &k);
    out[k.len] = '\0';
    return out;
}

char *remote_url_redact_to(const char *url, char *out, size_t cap)
{
    if (cap == 0)
        return out;
    char *full = remote_url_redact(url);
    if (!full) {
        snprintf(out, cap, "%s", "(URL)");
        return out;
    }
    size_t n = strlen(full);
    if (n < cap) {
        memcpy(out, full, n + 1);
    } else if (cap < 16) {
        memcpy(out, full, cap - 1);
        out[cap - 1] = '\0';
    } else {
        /* head + "…" (3 bytes) + tail; cut neither inside "…" of the
         * query marker (the tail is plain ASCII unless it holds "?…") */
        size_t room = cap - 1 - 3;
        size_t head = room * 2 / 3, tail = room - head;
        const char *t = full + n - tail;
        /* do not start the tail inside a UTF-8 sequence */
        while (tail && ((unsigned char)*t & 0xc0) == 0x80) {
            t++;
            tail--;
        }
        memcpy(out, full, head);
        memcpy(out + head, "\xe2\x80\xa6", 3);
        memcpy(out + head + 3, t, tail);
        out[head + 3 + tail] = '\0';
    }
    free(full);
    return out;
}

/* ---- libcurl's view of a URL ---------------------------------------------- */

static CURLU *parse(const char *url)
{
    CURLU *h = curl_url();
    if (!h)
        return NULL;
    if (curl_url_set(h, CURLUPART_URL, url, 0) != CURLUE_OK) {
        curl_url_cleanup(h);
        return NULL;
    }
    return h;
}

static char *part(CURLU *h, CURLUPart what, unsigned flags)
{
    char *v = NULL;
    if (curl_url_get(h, what, &v, flags) != CURLUE_OK)
        return NULL;
    size_t n = strlen(v);
    char *copy = gguf_str_dup_n(v, n);
    curl_free(v);
    if (copy)
        for (size_t i = 0; i < n; i++)
            copy[i] = lower(copy[i]);
    return copy;
}

static bool is_http_scheme(const char *s)
{
    return s && (strcmp(s, "http") == 0 || strcmp(s, "https") == 0);
}

char *remote_url_host(const char *url)
{
    CURLU *h = parse(url);
    if (!h)
        return NULL;
    char *host = part(h, CURLUPART_HOST, 0);
    char *port = part(h, CURLUPART_PORT, 0);   /* only when written */
    char *out = NULL;
    if (host) {
        size_t n = strlen(host) + (port ? strlen(port) + 1 : 0) + 1;
        out = malloc(n);
        if (out)
            snprintf(out, n, "%s%s%s", host, port ? ":" : "", port ? port : "");
    }
    free(host);
    free(port);
    curl_url_cleanup(h);
    return out;
}

struct origin {
    char *scheme, *host, *port;
};

static bool origin_of(const char *url, struct origin *o)
{
    memset(o, 0, sizeof *o);
    CURLU *h = parse(url);
    if (!h)
        return false;
    o->scheme = part(h, CURLUPART_SCHEME, 0);
    o->host = part(h, CURLUPART_HOST, 0);
    o->port = part(h, CURLUPART_PORT, CURLU_DEFAULT_PORT);
    curl_url_cleanup(h);
    return o->scheme && o->host && o->port;
}

static void origin_free(struct origin *o)
{
    free(o->scheme);
    free(o->host);
    free(o->port);
}

bool remote_url_same_origin(const char *a, const char *b)
{
    struct origin oa, ob;
    bool oka = origin_of(a, &oa);
    bool okb = origin_of(b, &ob);
    bool same = oka && okb && strcmp(oa.scheme, ob.scheme) == 0 &&
                strcmp(oa.host, ob.host) == 0 && strcmp(oa.port, ob.port) == 0;
    origin_free(&oa);
    origin_free(&ob);
    return same;
}

bool remote_url_is_downgrade(const char *from, const char *to)
{
    return prefix_ci(from, "https://") && !prefix_ci(to, "https://");
}

char *remote_url_resolve(const char *base, const char *location)
{
    CURLU *h = parse(base);
    if (!h)
        return NULL;
    char *out = NULL;
    if (curl_url_set(h, CURLUPART_URL, location, 0) == CURLUE_OK) {
        char *scheme = part(h, CURLUPART_SCHEME, 0);
        char *host = part(h, CURLUPART_HOST, 0);
        char *v = NULL;
        if (is_http_scheme(scheme) && host && *host &&
            curl_url_get(h, CURLUPART_URL, &v, 0) == CURLUE_OK) {
            out = gguf_str_dup_n(v, strlen(v));
            curl_free(v);
        }
        free(scheme);
        free(host);
    }
    curl_url_cleanup(h);
    return out;
}

/* ---- expansion ------------------------------------------------------------ */

static enum gguf_err refuse(struct gguf_diag *d, const char *arg, const char *why)
{
    char shown[160];
    remote_url_redact_to(arg, shown, sizeof shown);
    return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: %s", shown, why);
}

static bool has_blank_or_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s == 0x7f)
            return true;
    return false;
}

static enum gguf_err check_http(const char *arg, struct gguf_diag *d)
{
    if (has_blank_or_control(arg))
        return refuse(d, arg, "a URL cannot contain blanks or control characters");
    /* libcurl reads "https:///x" as host x: refused here as the typo it is */
    size_t sl = scheme_len(arg);
    if (sl && (arg[sl] == '/' || arg[sl] == '\0' || arg[sl] == '?' || arg[sl] == '#'))
        return refuse(d, arg, "not a valid URL (no host)");
    CURLU *h = parse(arg);
    if (!h)
        return refuse(d, arg, "not a valid URL");
    char *scheme = part(h, CURLUPART_SCHEME, 0);
    char *host = part(h, CURLUPART_HOST, 0);
    curl_url_cleanup(h);
    bool ok = is_http_scheme(scheme) && host && *host;
    free(scheme);
    free(host);
    return ok ? GGUF_OK : refuse(d, arg, "not a valid URL (no host)");
}

/* Appends s[0..n) to b (at *len, within cap) percent-encoding bytes
 * outside [A-Za-z0-9._~-] and, unless keep_slash, '/'. */
static void enc(char *b, size_t *len, const char *s, size_t n, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                     (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '~' || c == '-' ||
                     (keep_slash && c == '/');
        if (plain) {
            b[(*len)++] = (char)c;
        } else {
            b[(*len)++] = '%';
            b[(*len)++] = hex[c >> 4];
            b[(*len)++] = hex[c & 15];
        }
    }
}

/* A repo name component: [A-Za-z0-9._-]+, not "." or "..". */
static bool good_name(const char *s, size_t n)
{
    if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* PATH: segments that are neither empty nor "." nor "..". */
static bool good_path(const char *s, size_t n)
{
    size_t i = 0;
    while (i <= n) {
        size_t j = i;
        while (j < n && s[j] != '/')
            j++;
        size_t sn = j - i;
        if (sn == 0 || (sn == 1 && s[i] == '.') || (sn == 2 && s[i] == '.' && s[i + 1] == '.'))
            return false;
        i = j + 1;
    }
    return true;
}

static enum gguf_err expand_hf(const char *arg, char **url, struct gguf_diag *d)
{
    if (has_blank_or_control(arg))
        return refuse(d, arg, "an hf:// name cannot contain blanks or control characters");
    const char *p = arg + 5;             /* after "hf://" */
    bool dataset = false;
    if (strncmp(p, "datasets/", 9) == 0) {
        dataset = true;
        p += 9;
    }
    const char *org = p;
    size_t org_n = strcspn(org, "/");
    if (!org[org_n])
        return refuse(d, arg, "expected hf://ORG/REPO/FILE.gguf[@REVISION]");
    const char *repo = org + org_n + 1;
    size_t repo_n = strcspn(repo, "/");
    if (!repo[repo_n])
        return refuse(d, arg, "expected hf://ORG/REPO/FILE.gguf[@REVISION]");
    if (!good_name(org, org_n) || !good_name(repo, repo_n))
        return refuse(d, arg,
                      "ORG and REPO of hf://ORG/REPO/FILE are letters, digits, '.', '_' and '-'");
    const char *path = repo + repo_n + 1;
    size_t path_n = strlen(path);
    const char *rev = "main";
    size_t rev_n = 4;
    const char *at = strrchr(path, '@');
    if (at) {
        rev = at + 1;
        rev_n = strlen(rev);
        path_n = (size_t)(at - path);
        if (rev_n == 0)
            return refuse(d, arg, "an empty revision after '@'");
    }
    if (!good_path(path, path_n))
        return refuse(d, arg,
                      "the file path of hf://ORG/REPO/FILE has an empty, '.' or '..' component");
    const char *endpoint = getenv("HF_ENDPOINT");
    if (!endpoint || !*endpoint)
        endpoint = HF_DEFAULT_ENDPOINT;
    size_t ep_n = strlen(endpoint);
    while (ep_n && endpoint[ep_n - 1] == '/')
        ep_n--;
    char *ep = gguf_str_dup_n(endpoint, ep_n);
    if (!ep)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    if (check_http(ep, NULL) != GGUF_OK) {
        char shown[120];
        remote_url_redact_to(ep, shown, sizeof shown);
        free(ep);
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                             "HF_ENDPOINT: '%s' is not an http:// or https:// URL", shown);
    }
    /* ENDPOINT [/datasets] /ORG/REPO/resolve/REV/PATH, every encoded byte 3x */
    size_t cap = ep_n + 9 + 1 + org_n + 1 + repo_n + 9 + 3 * rev_n + 1 + 3 * path_n + 1;
    char *b = malloc(cap);
    if (!b) {
        free(ep);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    size_t n = 0;
    memcpy(b, ep, ep_n);
    n = ep_n;
    free(ep);
    if (dataset) {
        memcpy(b + n, "/datasets", 9);
        n += 9;
    }
    b[n++] = '/';
    memcpy(b + n, org, org_n);
    n += org_n;
    b[n++] = '/';
    memcpy(b + n, repo, repo_n);
    n += repo_n;
    memcpy(b + n, "/resolve/", 9);
    n += 9;
    enc(b, &n, rev, rev_n, false);
    b[n++] = '/';
    enc(b, &n, path, path_n, true);
    b[n] = '\0';
    *url = b;
    return GGUF_OK;
}

enum gguf_err remote_url_expand(const char *arg, char **url, struct gguf_diag *d)
{
    *url = NULL;
    if (prefix_ci(arg, "hf://"))
        return expand_hf(arg, url, d);
    if (remote_store_is_store(arg)) {
        enum gguf_err e = remote_store_check_name(arg, d);
        if (e)
            return e;
        *url = gguf_str_dup_n(arg, strlen(arg));
        return *url ? GGUF_OK : gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    if (!prefix_ci(arg, "http://") && !prefix_ci(arg, "https://")) {
        size_t sl = scheme_len(arg);
        if (sl)
            return refuse(d, arg, "unsupported URL scheme (http://, https://, hf://, s3:// and "
                          "gs:// are)");
        return refuse(d, arg, "not a URL (http://, https://, hf://, s3:// or gs://)");
    }
    enum gguf_err e = check_http(arg, d);
    if (e)
        return e;
    *url = gguf_str_dup_n(arg, strlen(arg));
    return *url ? GGUF_OK : gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
}

/* ---- split models --------------------------------------------------------- */

/* Where "-KKKKK-of-NNNNN.gguf" starts in url (end of the path), or -1. */
static long split_at(const char *url, unsigned *n, unsigned *k)
{
    static const char tail[] = "-00000-of-00000.gguf";
    const size_t tl = sizeof tail - 1;      /* 20 */
    size_t sl = scheme_len(url);
    size_t end = sl + strcspn(url + sl, "?#");
    if (end < sl + tl)
        return -1;
    const char *t = url + end - tl;
    unsigned kk = 0, nn = 0;
    for (size_t i = 0; i < tl; i++) {
        if (tail[i] == '0') {
            if (t[i] < '0' || t[i] > '9')
                return -1;
            if (i < 6)
                kk = kk * 10 + (unsigned)(t[i] - '0');
            else
                nn = nn * 10 + (unsigned)(t[i] - '0');
        } else if (t[i] != tail[i]) {
            return -1;
        }
    }
    if (kk < 1 || nn < 1 || kk > nn)
        return -1;
    *n = nn;
    *k = kk;
    return (long)(end - tl);
}

bool remote_url_is_split(const char *url, unsigned *n, unsigned *k)
{
    unsigned nn, kk;
    if (split_at(url, &nn, &kk) < 0)
        return false;
    *n = nn;
    *k = kk;
    return true;
}

char *remote_url_shard(const char *url, unsigned k)
{
    unsigned n, cur;
    long at = split_at(url, &n, &cur);
    if (at < 0 || k < 1 || k > n)
        return NULL;
    char *out = gguf_str_dup_n(url, strlen(url));
    if (!out)
        return NULL;
    char digits[16];
    snprintf(digits, sizeof digits, "%05u", k);
    memcpy(out + at + 1, digits, 5);
    return out;
}

void remote_text_redact(char *text, size_t cap)
{
    char out[1024];
    size_t k = 0;
    for (const char *p = text; *p && k + 1 < sizeof out;) {
        const char *u = strstr(p, "://");
        const char *start = u;
        while (start && start > p && ((start[-1] >= 'a' && start[-1] <= 'z') ||
                                      (start[-1] >= 'A' && start[-1] <= 'Z')))
            start--;
        if (!u || start == u) {
            size_t n = u ? (size_t)(u + 3 - p) : strlen(p);
            if (n > sizeof out - 1 - k)
                n = sizeof out - 1 - k;
            memcpy(out + k, p, n);
            k += n;
            p += n;
            continue;
        }
        memcpy(out + k, p, (size_t)(start - p) < sizeof out - 1 - k ? (size_t)(start - p)
                                                                    : sizeof out - 1 - k);
        k += (size_t)(start - p) < sizeof out - 1 - k ? (size_t)(start - p) : sizeof out - 1 - k;
        size_t n = strcspn(start, " \t\n\"'");
        if (n && start[n - 1] == ':')
            n--;
        char url[2048], red[1024];
        snprintf(url, sizeof url, "%.*s", (int)(n < sizeof url ? n : sizeof url - 1), start);
        remote_url_redact_to(url, red, sizeof red);
        size_t rn = strlen(red);
        if (rn > sizeof out - 1 - k)
            rn = sizeof out - 1 - k;
        memcpy(out + k, red, rn);
        k += rn;
        p = start + n;
    }
    out[k] = '\0';
    size_t n = k < cap - 1 ? k : cap - 1;
    memcpy(text, out, n);
    text[n] = '\0';
}

/*
 * remote/http_store.c — the requests of a struct remote that is an object in
 * a store (s3:// or gs://; remote/s3.h), as hooks of the request loop of
 * http_xfer.c (see http.h, "Object stores"):
 *
 *   rh_store_open     the store's URL of the object, its SigV4 scope
 *   rh_store_prepare  per request: libcurl signs it (CURLOPT_AWS_SIGV4 with
 *                     the key pair as CURLOPT_USERNAME/PASSWORD) when it
 *                     goes to the object's own origin, with
 *                     "x-amz-content-sha256: UNSIGNED-PAYLOAD" (libcurl
 *                     7.88 adds none; S3 refuses a signed request without
 *                     it) and the session token; anything else unsigned
 *   rh_store_header   notes x-amz-bucket-region
 *   rh_store_outcome  reads the error document of a failed answer: a
 *                     bucket in another region (O_REGION, at open, once),
 *                     and a message quoting its Code and Message, for
 *                     credentials refused, access denied, no such bucket or
 *                     key, an expired token, or a server that is no store
 *   rh_store_move     the object in the bucket's region: new URL and scope
 */
#include "http_int.h"
#include "s3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rh_store {
    struct remote_store *cfg;   /* a copy of the mount's store */
    char *name;                 /* s3://BUCKET/KEY or gs://BUCKET/OBJECT */
    char *bucket, *key;
    char sigv4[32 + REMOTE_REGION_MAX];    /* "aws:amz:REGION:s3" */
    char *token_hdr;            /* "x-amz-security-token: TOKEN", or NULL */
    size_t token_len;
    char asked[REMOTE_REGION_MAX + 1];     /* the region asked first, once moved */
    bool moved;
    bool bearer;                /* gs://: a bearer token goes with the requests */
    char info[700];
};

static void set_info(struct rh_store *s)
{
    const struct remote_store *c = s->cfg;
    char where[300], region[300];
    if (c->kind == REMOTE_STORE_GS)
        snprintf(where, sizeof where, "Cloud Storage (XML API) at %s%s%s", c->endpoint,
                 strcmp(c->endpoint_from, "STORAGE_EMULATOR_HOST") == 0 ? ", from " : "",
                 strcmp(c->endpoint_from, "STORAGE_EMULATOR_HOST") == 0 ? c->endpoint_from : "");
    else if (c->endpoint)
        snprintf(where, sizeof where, "S3 at %.200s (from %s), %s addressing", c->endpoint,
                 c->endpoint_from, c->path_style ? "path-style" : "virtual-hosted");
    else
        snprintf(where, sizeof where, "AWS S3, %s addressing",
                 c->path_style ? "path-style" : "virtual-hosted");
    if (c->kind == REMOTE_STORE_GS)
        region[0] = '\0';
    else if (s->moved)
        snprintf(region, sizeof region, "region: %s (the bucket's: it answered a request "
                 "signed for %s, from %s, that it is there)\n", c->region, s->asked,
                 c->region_from);
    else
        snprintf(region, sizeof region, "region: %s (from %s)\n", c->region, c->region_from);
    const char *who = c->kind == REMOTE_STORE_S3 ? c->who
                    : s->bearer ? "a bearer token" : "none (anonymous)";
    snprintf(s->info, sizeof s->info, "store: %s\n%scredentials: %s%s\n", where, region, who,
             c->kind == REMOTE_STORE_S3 && c->session_token ? ", with a session token" : "");
}

static void set_scope(struct rh_store *s)
{
    snprintf(s->sigv4, sizeof s->sigv4, "aws:amz:%s:s3", s->cfg->region);
}

enum gguf_err rh_store_open(struct remote *r, const struct remote_store *cfg, const char *name,
                            bool bearer, struct gguf_diag *d)
{
    struct rh_store *s = calloc(1, sizeof *s);
    if (!s)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    r->store = s;
    s->bearer = bearer;
    if (remote_store_check_name(name, d) != GGUF_OK)
        return GGUF_E_INVAL;
    s->cfg = remote_store_dup(cfg);
    s->name = rh_dup_str(name);
    if (!s->cfg || !s->name || !remote_store_split_name(name, &s->bucket, &s->key))
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    if (s->cfg->session_token) {
        static const char pre[] = "x-amz-security-token: ";
        s->token_len = sizeof pre + strlen(s->cfg->session_token);
        s->token_hdr = malloc(s->token_len);
        if (!s->token_hdr)
            return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
        snprintf(s->token_hdr, s->token_len, "%s%s", pre, s->cfg->session_token);
    }
    set_scope(s);
    set_info(s);
    r->url = remote_store_url(s->cfg, name, NULL);
    return r->url ? GGUF_OK : gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
}

void rh_store_free(struct rh_store *s)
{
    if (!s)
        return;
    remote_store_free(s->cfg);
    if (s->token_hdr) {
        explicit_bzero(s->token_hdr, s->token_len);
        free(s->token_hdr);
    }
    free(s->name);
    free(s->bucket);
    free(s->key);
    free(s);
}

const char *rh_store_info(const struct rh_store *s)
{
    return s->info;
}

bool rh_store_prepare(struct xfer *x, const char *url, struct curl_slist **hl)
{
    struct rh_store *s = x->r->store;
    CURL *h = x->s->h;
    if (s->cfg->kind != REMOTE_STORE_S3 || !s->cfg->access_key)
        return true;            /* anonymous, or a bearer token (http_xfer.c's) */
    if (!remote_url_same_origin(url, x->r->url)) {
        /* not the store (a redirect elsewhere): no credentials there */
        curl_easy_setopt(h, CURLOPT_USERNAME, NULL);
        curl_easy_setopt(h, CURLOPT_PASSWORD, NULL);
        return true;
    }
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
    curl_easy_setopt(h, CURLOPT_USERNAME, s->cfg->access_key);
    curl_easy_setopt(h, CURLOPT_PASSWORD, s->cfg->secret_key);
    struct curl_slist *t = curl_slist_append(*hl, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!t)
        return false;
    *hl = t;
    if (s->token_hdr) {
        if (!(t = curl_slist_append(*hl, s->token_hdr)))
            return false;
        *hl = t;
    }
    return true;
}

void rh_store_header(struct xfer *x, const char *line, size_t len)
{
    static const char name[] = "x-amz-bucket-region:";
    size_t n = sizeof name - 1;
    if (len <= n || strncasecmp(line, name, n) != 0)
        return;
    const char *v = line + n;
    size_t vn = len - n;
    while (vn && (*v == ' ' || *v == '\t')) {
        v++;
        vn--;
    }
    while (vn && (v[vn - 1] == '\r' || v[vn - 1] == '\n' || v[vn - 1] == ' '))
        vn--;
    char region[REMOTE_REGION_MAX + 1];
    if (vn == 0 || vn > REMOTE_REGION_MAX)
        return;
    memcpy(region, v, vn);
    region[vn] = '\0';
    if (remote_store_region_ok(region))
        memcpy(x->region_hdr, region, vn + 1);
}

/* s as it may be shown in a message: at most n bytes, then "…". */
static const char *cut(const char *s, char *out, size_t cap, size_t n)
{
    size_t len = strlen(s);
    if (len <= n || cap < 8)
        snprintf(out, cap, "%s", s);
    else
        snprintf(out, cap, "%.*s\xe2\x80\xa6", (int)(n < cap - 4 ? n : cap - 4), s);
    return out;
}

enum outcome rh_store_outcome(struct xfer *x, enum outcome o)
{
    struct remote *r = x->r;
    struct rh_store *s = r->store;
    const struct remote_resp *h = &x->s->resp;
    if (o == O_OK || o == O_NOMEM || o == O_CHANGED || !h->done || h->status < 300)
        return o;
    int st = h->status;
    bool s3 = s->cfg->kind == REMOTE_STORE_S3;
    struct remote_s3_error e;
    bool doc = remote_s3_error_parse(x->ebody, x->ebody_len, &e);

    /* a bucket in another region: asked there (at open, once) */
    const char *region = x->region_hdr[0] ? x->region_hdr : e.region;
    bool region_answer = (st == 301 || st == 400) &&
                         (!doc || strcmp(e.code, "PermanentRedirect") == 0 ||
                          strcmp(e.code, "AuthorizationHeaderMalformed") == 0 ||
                          strcmp(e.code, "IllegalLocationConstraintException") == 0);
    if (s3 && region_answer && region[0] && strcmp(region, s->cfg->region) != 0) {
        if (x->at_open && !s->moved) {
            snprintf(x->region_hdr, sizeof x->region_hdr, "%s", region);
            rh_fail(x, O_REGION, "the bucket is in region %s", region);
            return O_REGION;
        }
        rh_fail(x, O_FATAL, "the bucket answered that it is in region %s%s (%s)", region,
                s->moved ? " after it was asked there" : "", doc ? e.code : "no error document");
        return O_FATAL;
    }
    if (o == O_REDIRECT)
        return o;

    char key[80], bucket[80];
    cut(s->key, key, sizeof key, 60);
    cut(s->bucket, bucket, sizeof bucket, 60);
    const char *reason = remote_http_reason(st);
    if (!doc) {
        if (o == O_RETRY)
            return o;
        char ep[120];
        cut(s->cfg->endpoint ? s->cfg->endpoint : "AWS", ep, sizeof ep, 80);
        if (st == 404 && !s3)
            rh_fail(x, O_FATAL, "HTTP 404 (Not Found): no object '%s' in bucket '%s'", key,
                    bucket);
        else
            rh_fail(x, O_FATAL, "HTTP %d%s%s%s, and no %s error document: is %s %s?", st,
                    *reason ? " (" : "", reason, *reason ? ")" : "",
                    s3 ? "S3" : "Cloud Storage", ep,
                    s3 ? "an S3 endpoint" : "Cloud Storage or its emulator");
        return O_FATAL;
    }
    const char *c = e.code;
    if (o == O_RETRY) {
        rh_fail(x, O_RETRY, "HTTP %d: %s: %s", st, c, e.message);
        return O_RETRY;
    }
    const char *who = s->cfg->who;
    bool anonymous = s3 ? !s->cfg->access_key : !r->auth;
    if (strcmp(c, "SignatureDoesNotMatch") == 0 || strcmp(c, "InvalidAccessKeyId") == 0 ||
        strcmp(c, "InvalidSecurity") == 0)
        rh_fail(x, O_FATAL, "the credentials of %s were refused: %s: %s", who, c, e.message);
    else if (strcmp(c, "ExpiredToken") == 0 || strcmp(c, "TokenRefreshRequired") == 0)
        rh_fail(x, O_FATAL, "the session token of %s has expired (%s: %s): get new credentials "
                "and mount again, a new mount reads them", who, c, e.message);
    else if (strcmp(c, "InvalidToken") == 0)
        rh_fail(x, O_FATAL, "the session token of %s was refused: %s: %s", who, c, e.message);
    else if (strcmp(c, "AccessDenied") == 0 || strcmp(c, "AllAccessDisabled") == 0 ||
             strcmp(c, "AccountProblem") == 0)
        rh_fail(x, O_FATAL, "access to key '%s' of bucket '%s' denied (%s: %s)", key, bucket,
                c, e.message);
    else if (strcmp(c, "NoSuchBucket") == 0)
        rh_fail(x, O_FATAL, "no bucket '%s' (%s: %s)", bucket, c, e.message);
    else if (strcmp(c, "NoSuchKey") == 0)
        rh_fail(x, O_FATAL, "no key '%s' in bucket '%s' (%s: %s)", key, bucket, c, e.message);
    else
        rh_fail(x, O_FATAL, "HTTP %d: %s: %s", st, c, e.message);
    if (anonymous && (st == 401 || st == 403)) {
        /* the hint goes in whole or not at all (the message is cut at its end) */
        const char *hint = s3 ? "; no credentials were found: the request was anonymous"
                              : "; no token was given (GOOGLE_OAUTH_ACCESS_TOKEN or -o "
                                "bearer_token_file)";
        size_t n = strlen(x->msg);
        if (n + strlen(hint) < sizeof x->msg)
            memcpy(x->msg + n, hint, strlen(hint) + 1);
    }
    return O_FATAL;
}

bool rh_store_move(struct remote *r, const char *region)
{
    struct rh_store *s = r->store;
    char *url = remote_store_url(s->cfg, s->name, region);
    if (!url)
        return false;
    snprintf(s->asked, sizeof s->asked, "%s", s->cfg->region);
    snprintf(s->cfg->region, sizeof s->cfg->region, "%s", region);
    s->moved = true;
    set_scope(s);
    set_info(s);
    free(r->url);
    r->url = url;
    return true;
}

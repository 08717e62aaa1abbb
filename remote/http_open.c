/*
 * remote/http_open.c — opening and closing a struct remote (see http.h,
 * "Opening"): options checked, libcurl set up once per process, the share
 * object and the pool made, then the first request (the prefix), whose
 * answer fixes the size, the identity and the final URL.
 */
#include "http_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void wipe_free(char *p, size_t n)
{
    if (p) {
        explicit_bzero(p, n);
        free(p);
    }
}

/* ---- open ---------------------------------------------------------------------------- */

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc;

static void global_init(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void free_remote(struct remote *r)
{
    if (!r)
        return;
    for (unsigned i = 0; i < r->created; i++)
        curl_easy_cleanup(r->slots[i].h);
    free(r->slots);
    if (r->share)
        curl_share_cleanup(r->share);
    for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&r->share_mu[i]);
    pthread_mutex_destroy(&r->pool_mu);
    pthread_cond_destroy(&r->pool_cv);
    pthread_mutex_destroy(&r->mu);
    rh_store_free(r->store);
    free(r->url);
    free(r->display);
    free(r->ca_file);
    wipe_free(r->auth, r->auth_len);
    free(r->final_url);
    free(r->identity);
    free(r->prefix);
    free(r);
}

static enum gguf_err open_fail(struct remote *r, struct gguf_diag *d, enum gguf_err e,
                               const char *what)
{
    char shown[140];
    remote_url_redact_to(r ? (r->display ? r->display : r->url ? r->url : "") : "", shown,
                         sizeof shown);
    gguf_diag_set(d, e, UINT64_MAX, "%s: %s", shown, what);
    free_remote(r);
    return e;
}

static bool bad_token(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > TOKEN_MAX)
        return true;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] < 0x21 || (unsigned char)t[i] == 0x7f)
            return true;
    return false;
}

enum gguf_err remote_open(const struct remote_opts *o, struct remote **out,
                          struct gguf_diag *d)
{
    *out = NULL;
    if (!o || !o->url)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "no URL");
    unsigned conns = o->connections ? o->connections : REMOTE_DEFAULT_CONNECTIONS;
    unsigned tmo = o->timeout_s ? o->timeout_s : REMOTE_DEFAULT_TIMEOUT;
    unsigned retries = o->max_retries ? o->max_retries : REMOTE_DEFAULT_RETRIES;
    if (conns > REMOTE_MAX_CONNECTIONS)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "connections=%u: at most %u", conns,
                             REMOTE_MAX_CONNECTIONS);
    if (tmo > REMOTE_MAX_TIMEOUT)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "timeout=%u: at most %u seconds", tmo,
                             REMOTE_MAX_TIMEOUT);
    if (retries > REMOTE_MAX_RETRIES)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "retries=%u: at most %u", retries,
                             REMOTE_MAX_RETRIES);
    if (o->bearer_token && bad_token(o->bearer_token))
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                             "the bearer token is empty, longer than %u bytes, or has blanks "
                             "or control characters", TOKEN_MAX);
    if (o->ca_file) {
        int fd = open(o->ca_file, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "CA file %s: %s", o->ca_file,
                                 strerror(errno));
        close(fd);
    }
    pthread_once(&global_once, global_init);
    if (global_rc != CURLE_OK)
        return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "libcurl: %s",
                             curl_easy_strerror(global_rc));

    struct remote *r = calloc(1, sizeof *r);
    if (!r)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    for (unsigned i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&r->share_mu[i], NULL);
    pthread_mutex_init(&r->pool_mu, NULL);
    /* reads wait for a handle until a deadline of CLOCK_MONOTONIC */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->pool_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&r->mu, NULL);
    r->connections = conns;
    r->timeout_s = tmo;
    r->max_retries = retries;
    if (o->store) {
        /* an object in a store: its name is shown, its URL is asked */
        r->display = remote_url_redact(o->url);
        enum gguf_err e = rh_store_open(r, o->store, o->url, o->bearer_token != NULL, d);
        if (e) {
            free_remote(r);
            return e;
        }
    } else {
        r->url = rh_dup_str(o->url);
        r->display = remote_url_redact(o->url);
    }
    r->ca_file = o->ca_file ? rh_dup_str(o->ca_file) : NULL;
    r->slots = calloc(conns, sizeof *r->slots);
    r->prefix = malloc(REMOTE_PREFIX_SIZE);
    r->share = curl_share_init();
    if (o->bearer_token) {
        static const char pre[] = "Authorization: Bearer ";
        r->auth_len = sizeof pre + strlen(o->bearer_token);
        r->auth = malloc(r->auth_len);
        if (r->auth)
            snprintf(r->auth, r->auth_len, "%s%s", pre, o->bearer_token);
    }
    if (!r->url || !r->display || (o->ca_file && !r->ca_file) || !r->slots || !r->prefix ||
        !r->share || (o->bearer_token && !r->auth))
        return open_fail(r, d, GGUF_E_NOMEM, "out of memory");
    if (curl_share_setopt(r->share, CURLSHOPT_LOCKFUNC, rh_share_lock) != CURLSHE_OK ||
        curl_share_setopt(r->share, CURLSHOPT_UNLOCKFUNC, rh_share_unlock) != CURLSHE_OK ||
        curl_share_setopt(r->share, CURLSHOPT_USERDATA, r) != CURLSHE_OK ||
        curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
        curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK)
        return open_fail(r, d, GGUF_E_IO, "libcurl: cannot set up a share object");

    struct slot *s = rh_acquire(r, false);
    if (!s)
        return open_fail(r, d, GGUF_E_NOMEM, "libcurl: cannot make a handle");
    struct xfer x = { .r = r, .s = s, .kind = K_OPEN, .at_open = true, .off = 0,
                      .last = REMOTE_PREFIX_SIZE - 1, .buf = r->prefix };
    char *final = NULL;
    enum outcome oc = rh_fetch(&x, &final);
    if (oc == O_REGION) {
        /* the bucket is in another region: asked there, once */
        char region[sizeof x.region_hdr];
        memcpy(region, x.region_hdr, sizeof region);
        oc = rh_store_move(r, region) ? rh_fetch(&x, &final) : O_NOMEM;
        if (oc == O_NOMEM)
            snprintf(x.msg, sizeof x.msg, "out of memory");
    }
    if (oc != O_OK) {
        /* 404: nothing of that name (what a split model's opener needs to
         * know about a shard); the answer's status is still in the slot */
        enum gguf_err e = oc == O_NOMEM ? GGUF_E_NOMEM
                        : s->resp.done && s->resp.status == 404 && oc == O_FATAL ? GGUF_E_NOENT
                        : GGUF_E_IO;
        rh_release(r, s);
        atomic_fetch_add(&r->n_errors, 1);
        return open_fail(r, d, e, x.msg);
    }
    const struct remote_resp *h = &s->resp;
    r->final_url = final;
    if (x.empty) {
        r->size = 0;
        r->prefix_len = 0;
    } else {
        r->size = h->status == 206 ? h->crange.complete : x.got;
        r->prefix_len = x.got;
    }
    r->has_etag = h->has_etag;
    r->etag_strong = h->has_etag && !h->etag_weak;
    memcpy(r->etag, h->etag, sizeof r->etag);
    r->has_lm = h->has_lm;
    r->lm = h->lm;
    memcpy(r->lm_raw, h->lm_raw, sizeof r->lm_raw);
    r->lm_required = r->has_lm && !r->etag_strong;
    rh_release(r, s);
    char id[REMOTE_ETAG_MAX + 64];
    if (r->etag_strong)
        snprintf(id, sizeof id, "etag:%s", r->etag);
    else if (r->has_lm)
        snprintf(id, sizeof id, "lm:%lld:%llu", (long long)r->lm, (unsigned long long)r->size);
    else
        snprintf(id, sizeof id, "size:%llu", (unsigned long long)r->size);
    r->identity = rh_dup_str(id);
    if (!r->identity)
        return open_fail(r, d, GGUF_E_NOMEM, "out of memory");
    if (r->prefix_len < REMOTE_PREFIX_SIZE) {
        uint8_t *p = realloc(r->prefix, r->prefix_len ? r->prefix_len : 1);
        if (p)
            r->prefix = p;
    }
    *out = r;
    return GGUF_OK;
}

void remote_close(struct remote *r)
{
    free_remote(r);
}

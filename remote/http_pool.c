/*
 * remote/http_pool.c — the libcurl side of a struct remote (see http.h,
 * "Connections"): the share object's locks (DNS cache and TLS sessions are
 * shared by the handles) and the pool of easy handles, made on demand up to
 * `connections`, set up once (TLS verification, timeouts, callbacks), and
 * handed out most recently used first so that their connections are reused;
 * a read waits for one no longer than its timeout allows.
 */
#include "http_int.h"

#include <time.h>

/* ---- the share object's locks ------------------------------------------------ */

void rh_share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
    (void)h;
    (void)access;
    struct remote *r = arg;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&r->share_mu[data]);
}

void rh_share_unlock(CURL *h, curl_lock_data data, void *arg)
{
    (void)h;
    struct remote *r = arg;
    if ((unsigned)data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&r->share_mu[data]);
}

/* ---- the pool ------------------------------------------------------------------ */

static bool slot_setup(struct remote *r, struct slot *s)
{
    s->h = curl_easy_init();
    if (!s->h)
        return false;
    CURL *h = s->h;
    bool ok = true;
    ok &= curl_easy_setopt(h, CURLOPT_SHARE, r->share) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https") == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_VERBOSE, 0L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L) == CURLE_OK;
    if (r->ca_file)
        ok &= curl_easy_setopt(h, CURLOPT_CAINFO, r->ca_file) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)r->timeout_s) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, (long)REMOTE_LOW_SPEED) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)r->timeout_s) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_BUFFERSIZE, RECV_BUFFER) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_USERAGENT, "gguffs") == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, s->err) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, rh_on_header) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, rh_on_body) == CURLE_OK;
    ok &= curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, rh_on_progress) == CURLE_OK;
    if (!ok) {
        curl_easy_cleanup(h);
        s->h = NULL;
    }
    return ok;
}

/* A free slot, or a new one while fewer than `connections` exist: 1; 0 when
 * all are busy; -1 when a handle cannot be made.  pool_mu held. */
static int take_slot(struct remote *r, struct slot **out)
{
    if (r->free_list) {
        *out = r->free_list;
        r->free_list = (*out)->next_free;
        return 1;
    }
    if (r->created < r->connections) {
        struct slot *s = &r->slots[r->created];
        if (!slot_setup(r, s))
            return -1;
        r->created++;
        *out = s;
        return 1;
    }
    return 0;
}

/* A free handle (waiting for one while all are busy unless try_only);
 * NULL when none can be made. */
struct slot *rh_acquire(struct remote *r, bool try_only)
{
    struct slot *s = NULL;
    pthread_mutex_lock(&r->pool_mu);
    int got;
    while ((got = take_slot(r, &s)) == 0 && !try_only)
        pthread_cond_wait(&r->pool_cv, &r->pool_mu);
    pthread_mutex_unlock(&r->pool_mu);
    return got == 1 ? s : NULL;
}

struct slot *rh_acquire_by(struct remote *r, uint64_t start_ns, uint64_t probe_of,
                           bool *timed_out)
{
    struct slot *s = NULL;
    const uint64_t tmo = (uint64_t)r->timeout_s * 1000000000u;
    *timed_out = false;
    pthread_mutex_lock(&r->pool_mu);
    int got;
    while ((got = take_slot(r, &s)) == 0) {
        uint64_t base = atomic_load(&r->progress_ns);
        if (base < start_ns)
            base = start_ns;
        uint64_t until = base + tmo, now = rh_now_ns();
        if (probe_of && probe_of + SILENT_HOLD_NS < until)
            until = probe_of + SILENT_HOLD_NS;
        if (now >= base + tmo || rh_silenced(r, base) || rh_probe_over(r, probe_of, now)) {
            /* nothing came for a whole timeout to the transfers that hold
             * every handle: the server is silent */
            if (now >= base + tmo) {
                atomic_store(&r->silent_ns, now);
                pthread_cond_broadcast(&r->pool_cv);
            }
            *timed_out = true;
            break;
        }
        struct timespec t = { .tv_sec = (time_t)(until / 1000000000u),
                              .tv_nsec = (long)(until % 1000000000u) };
        pthread_cond_timedwait(&r->pool_cv, &r->pool_mu, &t);
    }
    pthread_mutex_unlock(&r->pool_mu);
    return got == 1 ? s : NULL;
}

void rh_release(struct remote *r, struct slot *s)
{
    pthread_mutex_lock(&r->pool_mu);
    s->next_free = r->free_list;
    r->free_list = s;
    pthread_cond_signal(&r->pool_cv);
    pthread_mutex_unlock(&r->pool_mu);
}

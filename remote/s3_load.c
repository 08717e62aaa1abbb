/*
 * remote/s3_load.c — a store's settings and credentials, found as the AWS
 * CLI finds them: the mount's options, the environment, the profile files
 * (s3_profile.c); gs://'s endpoint and token (see s3.h and s3_impl.h).
 */
#include "s3.h"
#include "s3_impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SECRET_MAX 128
#define TOKEN_MAX 8192
#define PROFILE_MAX 128

/* ---- checks of values ------------------------------------------------------------------ */

bool remote_store_region_ok(const char *r)
{
    size_t n = strlen(r);
    if (n == 0 || n > REMOTE_REGION_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((r[i] >= 'a' && r[i] <= 'z') || (r[i] >= '0' && r[i] <= '9') || r[i] == '-'))
            return false;
    return true;
}

static bool secret_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return false;
    return true;
}

/* An endpoint URL: http:// or https://, a host, no userinfo, query,
 * fragment, blanks or control characters; NULL when fine, else why not. */
static const char *endpoint_problem(const char *u)
{
    size_t sl = s3_prefix_ci(u, "https://") ? 8 : s3_prefix_ci(u, "http://") ? 7 : 0;
    if (!sl)
        return "not an http:// or https:// URL";
    if (strlen(u) > 400)
        return "longer than 400 bytes";
    for (const char *p = u; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return "has blanks or control characters";
    size_t hn = strcspn(u + sl, "/?#");
    if (hn == 0)
        return "has no host";
    if (memchr(u + sl, '@', hn))
        return "has credentials in it (user@host)";
    if (strpbrk(u, "?#"))
        return "has a query or fragment";
    return NULL;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* ---- loading --------------------------------------------------------------------------------- */

static enum gguf_err load_gs(struct remote_store *s, struct gguf_diag *d)
{
    const char *emu = env("STORAGE_EMULATOR_HOST");
    s->path_style = true;
    snprintf(s->region, sizeof s->region, "%s", "auto");
    s->region_from = "";
    if (!emu) {
        s->endpoint = s3_dup_s(REMOTE_GCS_ENDPOINT);
        s->endpoint_from = "Cloud Storage";
    } else {
        bool scheme = s3_prefix_ci(emu, "http://") || s3_prefix_ci(emu, "https://");
        size_t n = strlen(emu) + 8;
        s->endpoint = malloc(n);
        if (s->endpoint)
            snprintf(s->endpoint, n, "%s%s", scheme ? "" : "http://", emu);
        s->endpoint_from = "STORAGE_EMULATOR_HOST";
    }
    if (!s->endpoint)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    size_t n = strlen(s->endpoint);
    while (n && s->endpoint[n - 1] == '/')
        s->endpoint[--n] = '\0';
    const char *why = endpoint_problem(s->endpoint);
    if (why)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "STORAGE_EMULATOR_HOST: %s", why);
    s->who = s3_dup_s("the bearer token");
    return s->who ? GGUF_OK : gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
}

static enum gguf_err set_endpoint(struct remote_store *s, const char *v, const char *from,
                                  struct gguf_diag *d)
{
    const char *why = endpoint_problem(v);
    if (why)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: the endpoint %s", from, why);
    s->endpoint = s3_dup_s(v);
    if (!s->endpoint)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    size_t n = strlen(s->endpoint);
    while (n > 8 && s->endpoint[n - 1] == '/')
        s->endpoint[--n] = '\0';
    s->endpoint_from = from;
    return GGUF_OK;
}

/* The warning for a file that holds a secret and that others may read. */
static void check_mode(struct remote_store *s, const struct profile *p)
{
    if (!(p->mode & (S_IRGRP | S_IROTH)) || s->warning)
        return;
    size_t n = strlen(p->path) + 160;
    s->warning = malloc(n);
    if (s->warning)
        snprintf(s->warning, n, "%s holds a secret and is readable by %s (mode %04o): "
                 "chmod 600 %s", p->path, (p->mode & S_IROTH) ? "every user" : "its group",
                 (unsigned)(p->mode & 07777), p->path);
}

static enum gguf_err take_keys(struct remote_store *s, struct profile *p, const char *what,
                               struct gguf_diag *d)
{
    if (!p->v[V_KEY_ID] != !p->v[V_SECRET])
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s has %s but not %s", what,
                             p->v[V_KEY_ID] ? "aws_access_key_id" : "aws_secret_access_key",
                             p->v[V_KEY_ID] ? "aws_secret_access_key" : "aws_access_key_id");
    if (!secret_ok(p->v[V_KEY_ID], SECRET_MAX) || !secret_ok(p->v[V_SECRET], SECRET_MAX))
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: an access key or secret that is "
                             "empty, longer than %u bytes, or has blanks or control characters",
                             what, SECRET_MAX);
    if (p->v[V_TOKEN] && !secret_ok(p->v[V_TOKEN], TOKEN_MAX))
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: a session token that is empty, "
                             "longer than %u bytes, or has blanks or control characters", what,
                             TOKEN_MAX);
    s->access_key = p->v[V_KEY_ID];
    s->secret_key = p->v[V_SECRET];
    s->session_token = p->v[V_TOKEN];
    p->v[V_KEY_ID] = p->v[V_SECRET] = p->v[V_TOKEN] = NULL;
    check_mode(s, p);
    return GGUF_OK;
}

static enum gguf_err load_s3(struct remote_store *s, const struct remote_store_opts *o,
                             struct gguf_diag *d)
{
    enum gguf_err e = GGUF_OK;
    const char *profile = o->profile;
    bool named = profile != NULL;
    const char *profile_from = "-o aws_profile";
    if (!profile && (profile = env("AWS_PROFILE")) != NULL)
        profile_from = "AWS_PROFILE";
    if (!profile && (profile = env("AWS_DEFAULT_PROFILE")) != NULL)
        profile_from = "AWS_DEFAULT_PROFILE";
    named |= profile != NULL;
    if (!profile)
        profile = "default";
    bool bad = strlen(profile) > PROFILE_MAX;
    for (const char *c = profile; *c; c++)
        bad |= (unsigned char)*c < 0x20 || *c == 0x7f || *c == ']';
    if (bad)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: not a profile name (at most %u "
                             "bytes, no control characters or ']')", profile_from, PROFILE_MAX);

    /* the two files: [NAME] in credentials; [profile NAME] (or [default])
     * in config */
    struct profile cred = { 0 }, conf = { 0 };
    char *cred_path = env("AWS_SHARED_CREDENTIALS_FILE") ? s3_dup_s(env("AWS_SHARED_CREDENTIALS_FILE"))
                                                         : s3_home_file(".aws/credentials");
    char *conf_path = env("AWS_CONFIG_FILE") ? s3_dup_s(env("AWS_CONFIG_FILE"))
                                             : s3_home_file(".aws/config");
    char section[PROFILE_MAX + 16];
    if (strcmp(profile, "default") == 0)
        snprintf(section, sizeof section, "default");
    else
        snprintf(section, sizeof section, "profile %s", profile);
    if (cred_path)
        e = s3_read_profile_file(cred_path, profile, &cred, d);
    if (!e && conf_path)
        e = s3_read_profile_file(conf_path, section, &conf, d);
    if (!e && conf_path && strcmp(profile, "default") == 0 && !conf.found)
        e = s3_read_profile_file(conf_path, "profile default", &conf, d);
    free(cred_path);
    free(conf_path);
    if (e)
        goto out;
    if (named && !cred.found && !conf.found) {
        e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the profile '%s' (%s) is in neither "
                          "the credentials file nor the config file", profile, profile_from);
        goto out;
    }

    /* credentials */
    const char *ek = env("AWS_ACCESS_KEY_ID"), *es = env("AWS_SECRET_ACCESS_KEY");
    char who[PROFILE_MAX + 32];
    snprintf(who, sizeof who, "profile '%s'", profile);
    if (!o->profile && (ek || es)) {
        if (!ek || !es) {
            e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s is set but %s is not",
                              ek ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
                              ek ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
            goto out;
        }
        const char *et = env("AWS_SESSION_TOKEN");
        if (!secret_ok(ek, SECRET_MAX) || !secret_ok(es, SECRET_MAX) ||
            (et && !secret_ok(et, TOKEN_MAX))) {
            e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "AWS_ACCESS_KEY_ID, "
                              "AWS_SECRET_ACCESS_KEY or AWS_SESSION_TOKEN is too long or has "
                              "blanks or control characters");
            goto out;
        }
        s->access_key = s3_dup_s(ek);
        s->secret_key = s3_dup_s(es);
        s->session_token = et ? s3_dup_s(et) : NULL;
        s->who = s3_dup_s("AWS_ACCESS_KEY_ID");
        if (!s->access_key || !s->secret_key || (et && !s->session_token) || !s->who) {
            e = gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
            goto out;
        }
    } else if (cred.v[V_KEY_ID] || cred.v[V_SECRET]) {
        char what[PROFILE_MAX + 600];
        snprintf(what, sizeof what, "the profile '%s' in %s", profile, cred.path);
        if ((e = take_keys(s, &cred, what, d)) != GGUF_OK)
            goto out;
        s->who = s3_dup_s(who);
    } else if (conf.v[V_KEY_ID] || conf.v[V_SECRET]) {
        char what[PROFILE_MAX + 600];
        snprintf(what, sizeof what, "the profile '%s' in %s", profile, conf.path);
        if ((e = take_keys(s, &conf, what, d)) != GGUF_OK)
            goto out;
        s->who = s3_dup_s(who);
    } else {
        static const int other[] = { V_ROLE_ARN, V_CRED_PROCESS, V_SSO_URL, V_SSO_SESSION,
                                     V_WEB_IDENTITY };
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
            const struct profile *p = cred.v[other[i]] ? &cred : conf.v[other[i]] ? &conf : NULL;
            if (p) {
                e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the profile '%s' gets its "
                                  "credentials by %s, which gguffs does not do: export them "
                                  "first (eval \"$(aws configure export-credentials --profile %s "
                                  "--format env)\")", profile, s3_val_names[other[i]], profile);
                goto out;
            }
        }
        s->who = s3_dup_s("no credentials (anonymous)");
    }
    if (!s->who) {
        e = gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
        goto out;
    }

    /* region */
    const char *region = o->region;
    s->region_from = "-o s3_region";
    if (!region && (region = env("AWS_REGION")) != NULL)
        s->region_from = "AWS_REGION";
    if (!region && (region = env("AWS_DEFAULT_REGION")) != NULL)
        s->region_from = "AWS_DEFAULT_REGION";
    if (!region && (region = conf.v[V_REGION]) != NULL)
        s->region_from = "the profile";
    if (!region) {
        region = REMOTE_DEFAULT_REGION;
        s->region_from = "the default";
    }
    if (!remote_store_region_ok(region)) {
        e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: '%.64s' is not a region name "
                          "(lowercase letters, digits and '-')", s->region_from, region);
        goto out;
    }
    snprintf(s->region, sizeof s->region, "%s", region);

    /* endpoint */
    if (o->endpoint)
        e = set_endpoint(s, o->endpoint, "-o s3_endpoint", d);
    else if (env("AWS_ENDPOINT_URL_S3"))
        e = set_endpoint(s, env("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3", d);
    else if (env("AWS_ENDPOINT_URL"))
        e = set_endpoint(s, env("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL", d);
    else if (conf.v[V_S3_ENDPOINT])
        e = set_endpoint(s, conf.v[V_S3_ENDPOINT], "the profile's s3 endpoint_url", d);
    else if (conf.v[V_ENDPOINT])
        e = set_endpoint(s, conf.v[V_ENDPOINT], "the profile's endpoint_url", d);
    if (e)
        goto out;

    /* addressing */
    const char *style = o->addressing;
    const char *style_from = "-o s3_addressing";
    if (!style && conf.v[V_S3_ADDRESSING]) {
        style = conf.v[V_S3_ADDRESSING];
        style_from = "the profile's s3 addressing_style";
        if (strcmp(style, "auto") == 0)
            style = NULL;
    }
    if (style && strcmp(style, "path") != 0 && strcmp(style, "virtual") != 0) {
        e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: '%.32s' is neither path nor virtual",
                          style_from, style);
        goto out;
    }
    s->path_style = style ? strcmp(style, "path") == 0 : s->endpoint != NULL;
out:
    s3_profile_clear(&cred);
    s3_profile_clear(&conf);
    return e;
}

enum gguf_err remote_store_load(const char *name, const struct remote_store_opts *o,
                                struct remote_store **out, struct gguf_diag *d)
{
    static const struct remote_store_opts none = { 0 };
    *out = NULL;
    if (!o)
        o = &none;
    enum gguf_err e = remote_store_check_name(name, d);
    if (e)
        return e;
    struct remote_store *s = calloc(1, sizeof *s);
    if (!s)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    s->endpoint_from = "AWS";
    if (s3_prefix_ci(name, "gs://")) {
        s->kind = REMOTE_STORE_GS;
        if (o->profile || o->endpoint || o->region || o->addressing)
            e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "aws_profile, s3_endpoint, s3_region "
                              "and s3_addressing are options of s3:// models");
        else
            e = load_gs(s, d);
    } else {
        s->kind = REMOTE_STORE_S3;
        e = load_s3(s, o, d);
    }
    if (!e) {
        /* a virtual-hosted bucket must be a DNS label */
        const char *b, *k;
        size_t bn, kn;
        s3_parse_name(name, &b, &bn, &k, &kn);
        if (s->kind == REMOTE_STORE_S3 && o->addressing && strcmp(o->addressing, "virtual") == 0 &&
            !s3_dns_bucket(b, bn))
            e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "s3_addressing=virtual: the bucket "
                              "'%.*s' cannot be a host name (3 to 63 of a-z, 0-9 and '-')",
                              (int)(bn < 64 ? bn : 64), b);
    }
    if (e) {
        remote_store_free(s);
        return e;
    }
    *out = s;
    return GGUF_OK;
}

struct remote_store *remote_store_dup(const struct remote_store *s)
{
    struct remote_store *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    *c = *s;
    c->endpoint = s3_dup_s(s->endpoint);
    c->access_key = s3_dup_s(s->access_key);
    c->secret_key = s3_dup_s(s->secret_key);
    c->session_token = s3_dup_s(s->session_token);
    c->who = s3_dup_s(s->who);
    c->warning = s3_dup_s(s->warning);
    if ((s->endpoint && !c->endpoint) || (s->access_key && !c->access_key) ||
        (s->secret_key && !c->secret_key) || (s->session_token && !c->session_token) ||
        (s->who && !c->who) || (s->warning && !c->warning)) {
        remote_store_free(c);
        return NULL;
    }
    return c;
}

void remote_store_free(struct remote_store *s)
{
    if (!s)
        return;
    free(s->endpoint);
    s3_wipe_free(s->access_key);
    s3_wipe_free(s->secret_key);
    s3_wipe_free(s->session_token);
    free(s->who);
    free(s->warning);
    free(s);
}

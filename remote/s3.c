/* remote/s3.c — object store names, settings and credentials (see s3.h). */
#include "s3.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_MAX 1024
#define BUCKET_MAX 255
#define SECRET_MAX 128
#define TOKEN_MAX 8192
#define PROFILE_MAX 128

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

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static char *dup_s(const char *s)
{
    return s ? dup_n(s, strlen(s)) : NULL;
}

static void wipe_free(char *s)
{
    if (s) {
        explicit_bzero(s, strlen(s));
        free(s);
    }
}

/* ---- names ------------------------------------------------------------------------- */

bool remote_store_is_store(const char *arg)
{
    return prefix_ci(arg, "s3://") || prefix_ci(arg, "gs://");
}

static bool bucket_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

/* The bucket and key of a name, checked: NULL on success, else why not. */
static const char *parse_name(const char *name, const char **bucket, size_t *bn,
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
    const char *why = parse_name(name, &b, &bn, &k, &kn);
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
    if (parse_name(name, &b, &bn, &k, &kn))
        return false;
    *bucket = dup_n(b, bn);
    *key = dup_n(k, kn);
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
static bool dns_bucket(const char *b, size_t n)
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
    if (parse_name(name, &b, &bn, &k, &kn))
        return NULL;
    if (!region)
        region = s->region;
    bool virt = s->kind == REMOTE_STORE_S3 && !s->path_style && dns_bucket(b, bn);
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
    size_t sl = prefix_ci(u, "https://") ? 8 : prefix_ci(u, "http://") ? 7 : 0;
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

/* ---- the profile files ---------------------------------------------------------------------- */

enum { V_KEY_ID, V_SECRET, V_TOKEN, V_REGION, V_ENDPOINT, V_S3_ENDPOINT, V_S3_ADDRESSING,
       V_ROLE_ARN, V_CRED_PROCESS, V_SSO_URL, V_SSO_SESSION, V_WEB_IDENTITY, V_N };

static const char *const val_names[V_N] = {
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "region",
    "endpoint_url", "s3.endpoint_url", "s3.addressing_style", "role_arn",
    "credential_process", "sso_start_url", "sso_session", "web_identity_token_file",
};

struct profile {
    char *v[V_N];
    bool found;                 /* the section exists */
    char path[512];             /* the file it was found in, for messages */
    mode_t mode;
};

static void profile_clear(struct profile *p)
{
    for (int i = 0; i < V_N; i++) {
        wipe_free(p->v[i]);
        p->v[i] = NULL;
    }
}

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

static void trim(const char **s, size_t *n)
{
    while (*n && blank(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && (blank((*s)[*n - 1]) || (*s)[*n - 1] == '\r'))
        (*n)--;
}

/* Scans an INI text for the section named want (exact), keeping the
 * values of val_names (later ones win).  false with d set on a syntax
 * error. */
static bool ini_scan(const char *path, const char *buf, size_t len, const char *want,
                     struct profile *p, struct gguf_diag *d)
{
    bool in = false;
    char parent[32] = "";       /* a key with no value: its indented sub-keys */
    unsigned line = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && buf[j] != '\n')
            j++;
        line++;
        const char *s = buf + i;
        size_t n = j - i;
        i = j + 1;
        if (n > REMOTE_STORE_LINE_MAX) {
            gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s:%u: a line longer than %u bytes",
                          path, line, REMOTE_STORE_LINE_MAX);
            return false;
        }
        for (size_t k = 0; k < n; k++)
            if (s[k] == '\0') {
                gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s:%u: a NUL byte", path, line);
                return false;
            }
        bool indented = n && blank(s[0]);
        const char *t = s;
        size_t tn = n;
        trim(&t, &tn);
        if (tn == 0 || t[0] == '#' || t[0] == ';')
            continue;
        if (!indented && t[0] == '[') {
            const char *e = memchr(t, ']', tn);
            if (!e) {
                gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s:%u: a section header without "
                              "']'", path, line);
                return false;
            }
            const char *nm = t + 1;
            size_t nn = (size_t)(e - nm);
            trim(&nm, &nn);
            in = nn == strlen(want) && memcmp(nm, want, nn) == 0;
            p->found |= in;
            parent[0] = '\0';
            continue;
        }
        size_t eq = 0;
        while (eq < tn && t[eq] != '=' && t[eq] != ':')
            eq++;
        if (eq == tn) {
            if (indented)
                continue;       /* the continuation of a multi-line value */
            gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s:%u: not 'key = value'", path, line);
            return false;
        }
        const char *k = t, *v = t + eq + 1;
        size_t kn = eq, vn = tn - eq - 1;
        trim(&k, &kn);
        trim(&v, &vn);
        if (!in)
            continue;
        char name[64];
        if (kn == 0 || kn >= 31)
            continue;
        if (indented && parent[0]) {
            snprintf(name, sizeof name, "%s.%.*s", parent, (int)kn, k);
        } else {
            snprintf(name, sizeof name, "%.*s", (int)kn, k);
            if (vn == 0) {
                snprintf(parent, sizeof parent, "%.*s", (int)kn, k);
                for (char *c = parent; *c; c++)
                    *c = lower(*c);
                continue;
            }
            parent[0] = '\0';
        }
        for (char *c = name; *c; c++)
            *c = lower(*c);
        for (int x = 0; x < V_N; x++) {
            if (strcmp(name, val_names[x]) != 0)
                continue;
            char *copy = dup_n(v, vn);
            if (!copy) {
                gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
                return false;
            }
            wipe_free(p->v[x]);
            p->v[x] = copy;
        }
    }
    return true;
}

/* Reads path (at most REMOTE_STORE_FILE_MAX bytes) and scans it for the
 * section want.  A missing file is no section (true); given: the file was
 * named by an environment variable (then missing is fine too, as for the
 * CLI). */
static enum gguf_err read_profile_file(const char *path, const char *want, struct profile *p,
                                       struct gguf_diag *d)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return GGUF_OK;
        return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int en = errno;
        close(fd);
        return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s: %s", path, strerror(en));
    }
    if (S_ISCHR(st.st_mode)) {  /* /dev/null: empty */
        close(fd);
        return GGUF_OK;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: not a regular file", path);
    }
    if (st.st_size > (off_t)REMOTE_STORE_FILE_MAX) {
        close(fd);
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: larger than %u bytes", path,
                             REMOTE_STORE_FILE_MAX);
    }
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    size_t len = 0;
    while (len < (size_t)st.st_size + 1) {
        ssize_t got = read(fd, buf + len, (size_t)st.st_size + 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int en = errno;
            explicit_bzero(buf, len);
            free(buf);
            close(fd);
            return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s: %s", path, strerror(en));
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    if (len > (size_t)st.st_size) {     /* grew while read: still bounded */
        explicit_bzero(buf, len);
        free(buf);
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: changed while it was read", path);
    }
    bool was = p->found;
    p->found = false;
    enum gguf_err e = ini_scan(path, buf, len, want, p, d) ? GGUF_OK
                    : strcmp(d->msg, "out of memory") == 0 ? GGUF_E_NOMEM : GGUF_E_INVAL;
    if (p->found) {
        snprintf(p->path, sizeof p->path, "%s", path);
        p->mode = st.st_mode;
    }
    p->found |= was;
    explicit_bzero(buf, len);
    free(buf);
    return e;
}

/* $HOME/rest (the passwd entry's home when HOME is unset), or NULL. */
static char *home_file(const char *rest)
{
    const char *home = getenv("HOME");
    if (!home || !*home) {
        struct passwd *pw = getpwuid(getuid());
        home = pw ? pw->pw_dir : NULL;
    }
    if (!home)
        return NULL;
    size_t n = strlen(home) + strlen(rest) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", home, rest);
    return p;
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
        s->endpoint = dup_s(REMOTE_GCS_ENDPOINT);
        s->endpoint_from = "Cloud Storage";
    } else {
        bool scheme = prefix_ci(emu, "http://") || prefix_ci(emu, "https://");
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
    s->who = dup_s("the bearer token");
    return s->who ? GGUF_OK : gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
}

static enum gguf_err set_endpoint(struct remote_store *s, const char *v, const char *from,
                                  struct gguf_diag *d)
{
    const char *why = endpoint_problem(v);
    if (why)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s: the endpoint %s", from, why);
    s->endpoint = dup_s(v);
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
    char *cred_path = env("AWS_SHARED_CREDENTIALS_FILE") ? dup_s(env("AWS_SHARED_CREDENTIALS_FILE"))
                                                         : home_file(".aws/credentials");
    char *conf_path = env("AWS_CONFIG_FILE") ? dup_s(env("AWS_CONFIG_FILE"))
                                             : home_file(".aws/config");
    char section[PROFILE_MAX + 16];
    if (strcmp(profile, "default") == 0)
        snprintf(section, sizeof section, "default");
    else
        snprintf(section, sizeof section, "profile %s", profile);
    if (cred_path)
        e = read_profile_file(cred_path, profile, &cred, d);
    if (!e && conf_path)
        e = read_profile_file(conf_path, section, &conf, d);
    if (!e && conf_path && strcmp(profile, "default") == 0 && !conf.found)
        e = read_profile_file(conf_path, "profile default", &conf, d);
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
        s->access_key = dup_s(ek);
        s->secret_key = dup_s(es);
        s->session_token = et ? dup_s(et) : NULL;
        s->who = dup_s("AWS_ACCESS_KEY_ID");
        if (!s->access_key || !s->secret_key || (et && !s->session_token) || !s->who) {
            e = gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
            goto out;
        }
    } else if (cred.v[V_KEY_ID] || cred.v[V_SECRET]) {
        char what[PROFILE_MAX + 600];
        snprintf(what, sizeof what, "the profile '%s' in %s", profile, cred.path);
        if ((e = take_keys(s, &cred, what, d)) != GGUF_OK)
            goto out;
        s->who = dup_s(who);
    } else if (conf.v[V_KEY_ID] || conf.v[V_SECRET]) {
        char what[PROFILE_MAX + 600];
        snprintf(what, sizeof what, "the profile '%s' in %s", profile, conf.path);
        if ((e = take_keys(s, &conf, what, d)) != GGUF_OK)
            goto out;
        s->who = dup_s(who);
    } else {
        static const int other[] = { V_ROLE_ARN, V_CRED_PROCESS, V_SSO_URL, V_SSO_SESSION,
                                     V_WEB_IDENTITY };
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
            const struct profile *p = cred.v[other[i]] ? &cred : conf.v[other[i]] ? &conf : NULL;
            if (p) {
                e = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the profile '%s' gets its "
                                  "credentials by %s, which gguffs does not do: export them "
                                  "first (eval \"$(aws configure export-credentials --profile %s "
                                  "--format env)\")", profile, val_names[other[i]], profile);
                goto out;
            }
        }
        s->who = dup_s("no credentials (anonymous)");
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
    profile_clear(&cred);
    profile_clear(&conf);
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
    if (prefix_ci(name, "gs://")) {
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
        parse_name(name, &b, &bn, &k, &kn);
        if (s->kind == REMOTE_STORE_S3 && o->addressing && strcmp(o->addressing, "virtual") == 0 &&
            !dns_bucket(b, bn))
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
    c->endpoint = dup_s(s->endpoint);
    c->access_key = dup_s(s->access_key);
    c->secret_key = dup_s(s->secret_key);
    c->session_token = dup_s(s->session_token);
    c->who = dup_s(s->who);
    c->warning = dup_s(s->warning);
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
    wipe_free(s->access_key);
    wipe_free(s->secret_key);
    wipe_free(s->session_token);
    free(s->who);
    free(s->warning);
    free(s);
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

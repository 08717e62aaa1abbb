/*
 * remote/s3_profile.c — the AWS CLI's profile files (~/.aws/credentials,
 * ~/.aws/config): one section's values read from an INI text, bounded
 * and checked (for s3_load.c; see s3_impl.h).
 */
#include "s3_impl.h"
#include "gguf/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const s3_val_names[V_N] = {
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "region",
    "endpoint_url", "s3.endpoint_url", "s3.addressing_style", "role_arn",
    "credential_process", "sso_start_url", "sso_session", "web_identity_token_file",
};

void s3_profile_clear(struct profile *p)
{
    for (int i = 0; i < V_N; i++) {
        s3_wipe_free(p->v[i]);
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
 * values of s3_val_names (later ones win).  false with d set on a syntax
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
                    *c = s3_lower(*c);
                continue;
            }
            parent[0] = '\0';
        }
        for (char *c = name; *c; c++)
            *c = s3_lower(*c);
        for (int x = 0; x < V_N; x++) {
            if (strcmp(name, s3_val_names[x]) != 0)
                continue;
            char *copy = gguf_str_dup_n(v, vn);
            if (!copy) {
                gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
                return false;
            }
            s3_wipe_free(p->v[x]);
            p->v[x] = copy;
        }
    }
    return true;
}

/* Reads path (at most REMOTE_STORE_FILE_MAX bytes) and scans it for the
 * section want.  A missing file is no section (true); given: the file was
 * named by an environment variable (then missing is fine too, as for the
 * CLI). */
enum gguf_err s3_read_profile_file(const char *path, const char *want, struct profile *p,
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
char *s3_home_file(const char *rest)
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

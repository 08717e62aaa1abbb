/*
 * fs/remote_setup.c — what opens a remote model: the URL, the token, the
 * object store; the one-line refusals at mount (see remote_setup.h).
 */
#include "remote_setup.h"
#include "options.h"

#include "gguf/diag.h"
#include "remote/http.h"
#include "remote/s3.h"
#include "remote/url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The one-line refusal: "gguffs: MODEL: what (at byte offset N)". */
int ggfs_refuse(const char *model, const struct gguf_diag *d)
{
    char line[1024];
    gguf_diag_format(d, model, line, sizeof line);
    fprintf(stderr, "gguffs: %s\n", line);
    return 1;
}

/* The one-line refusal of a remote model: the diag's own URL when it
 * names one (HTTP errors do), else the given one, redacted either way. */
void ggfs_remote_refuse(const char *model, struct gguf_diag *d)
{
    char shown[1024], line[1536];
    remote_text_redact(d->msg, sizeof d->msg);
    remote_url_redact_to(model, shown, sizeof shown);
    gguf_diag_format(d, strstr(d->msg, "://") ? NULL : shown, line, sizeof line);
    fprintf(stderr, "gguffs: %s\n", line);
}

/* The token for a remote model: -o bearer_token_file, else HF_TOKEN
 * (GOOGLE_OAUTH_ACCESS_TOKEN for gs://; none for s3://, whose requests
 * are signed), else none.  *tok is NULL (none) or malloc'd; false after a
 * one-line error. */
static bool read_token(const struct options *o, char **tok)
{
    *tok = NULL;
    if (!o->bearer_token_file) {
        const char *var = strncasecmp(o->model, "gs://", 5) == 0 ? "GOOGLE_OAUTH_ACCESS_TOKEN"
                        : strncasecmp(o->model, "s3://", 5) == 0 ? NULL : "HF_TOKEN";
        const char *env = var ? getenv(var) : NULL;
        if (env && *env && !(*tok = strdup(env))) {
            fprintf(stderr, "gguffs: out of memory\n");
            return false;
        }
        return true;
    }
    FILE *f = fopen(o->bearer_token_file, "re");
    if (!f) {
        fprintf(stderr, "gguffs: bearer_token_file=%s: %s\n", o->bearer_token_file,
                strerror(errno));
        return false;
    }
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    bool big = n == sizeof buf;
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    bool ctl = false;
    for (size_t i = 0; i < n; i++)
        ctl |= (unsigned char)buf[i] < 0x20 || buf[i] == 0x7f;
    if (big || ctl || n == 0) {
        fprintf(stderr, "gguffs: bearer_token_file=%s: %s\n", o->bearer_token_file,
                big ? "larger than 8 KiB" : ctl ? "holds control characters besides "
                "a final newline" : "empty");
        explicit_bzero(buf, sizeof buf);
        return false;
    }
    *tok = strndup(buf, n);
    explicit_bzero(buf, sizeof buf);
    if (!*tok)
        fprintf(stderr, "gguffs: out of memory\n");
    return *tok != NULL;
}

/* What opens a remote model, for a mount and for --dump: the URL to read
 * (*real: hf:// expanded; malloc'd, shown only redacted), the token
 * (*token: NULL or malloc'd; free_token), the object store of an s3:// or
 * gs:// model (*store: NULL or remote_store_free; its warning, a
 * credentials file others may read, printed here) and the options of
 * remote_open pointing at them.  False after a one-line error. */
bool ggfs_remote_setup(const struct options *o, char **real, char **token,
                         struct remote_store **store, struct remote_opts *ro)
{
    struct gguf_diag d;
    *real = *token = NULL;
    *store = NULL;
    if (remote_url_expand(o->model, real, &d) != GGUF_OK) {
        ggfs_remote_refuse(o->model, &d);
        return false;
    }
    if (remote_store_is_store(o->model)) {
        struct remote_store_opts so = { .profile = o->aws_profile, .endpoint = o->s3_endpoint,
                                        .region = o->s3_region,
                                        .addressing = o->s3_addressing };
        if (remote_store_load(o->model, &so, store, &d) != GGUF_OK) {
            ggfs_remote_refuse(o->model, &d);
            free(*real);
            *real = NULL;
            return false;
        }
        if ((*store)->warning)
            fprintf(stderr, "gguffs: warning: %s\n", (*store)->warning);
    }
    if (!read_token(o, token)) {
        free(*real);
        *real = NULL;
        remote_store_free(*store);
        *store = NULL;
        return false;
    }
    *ro = (struct remote_opts){ .url = *real, .store = *store, .bearer_token = *token,
                                .ca_file = o->ca_file, .connections = o->connections,
                                .timeout_s = o->timeout };
    return true;
}

void ggfs_token_free(char *token)
{
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
}

/*
 * fs/dump.c — gguffs --dump (see dump.h).
 */
#include "dump.h"
#include "options.h"
#include "remote_setup.h"

#include "gguf/gguf.h"
#include "gguf/info.h"
#include "remote/http.h"
#include "remote/s3.h"
#include "remote/source.h"
#include "remote/url.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static int dump_local(const char *model)
{
    struct gguf_file *gf;
    struct gguf_diag d;
    if (gguf_open(model, &gf, &d) != GGUF_OK)
        return ggfs_refuse(model, &d);
    struct gguf_buf b = { 0 };
    enum gguf_err e = gguf_info_render(gf, model, &b);
    if (e == GGUF_OK)
        fwrite(b.data, 1, b.len, stdout);
    gguf_buf_free(&b);
    gguf_close(gf);
    return e == GGUF_OK ? 0 : 1;
}

/* --dump URL: the summary --dump MODEL.gguf prints, named by the URL as a
 * mount's info names it (redacted).  Like a local --dump, it reads the one
 * file named (a shard is not opened with the others) and of it only the
 * header: the first request's prefix, and ranges after it when the header
 * is longer (remote/source.h). */
static int dump_remote(const struct options *o)
{
    char *real, *token;
    struct remote_store *store;
    struct remote_opts ro;
    if (!ggfs_remote_setup(o, &real, &token, &store, &ro))
        return 1;
    struct gguf_source *src = NULL;
    struct gguf_file *gf = NULL;
    struct gguf_diag d;
    enum gguf_err e = remote_source_open(&ro, &src, &d);
    ggfs_token_free(token);
    remote_store_free(store);
    free(real);
    if (e == GGUF_OK)
        e = gguf_open_source(src, &gf, &d);
    gguf_source_close(src);
    if (e != GGUF_OK) {
        ggfs_remote_refuse(o->model, &d);
        return 1;
    }
    char *shown = remote_url_redact(o->model);
    struct gguf_buf b = { 0 };
    bool ok = shown && gguf_info_render(gf, shown, &b) == GGUF_OK && !b.oom;
    if (ok)
        fwrite(b.data, 1, b.len, stdout);
    else
        fprintf(stderr, "gguffs: out of memory\n");
    gguf_buf_free(&b);
    free(shown);
    gguf_close(gf);
    return ok ? 0 : 1;
}

int ggfs_dump(const struct options *o)
{
    return o->remote ? dump_remote(o) : dump_local(o->model);
}

/*
 * tests/tools/remote_get.c — the remote/ library from the command line, for
 * the tests (tests/integration drives remote/ through it; not installed).
 *
 *   remote_get [--token-file F] [--cacert F] [--timeout S] URL OFF LEN
 *   remote_get [--token-file F] [--cacert F] [--timeout S] --gguf URL
 *
 * URL is anything remote_url_expand takes (http://, https://, hf:// with
 * HF_ENDPOINT).  The token is the first line of F (trailing blanks and the
 * line end removed); HF_TOKEN is not looked at.  The first form opens URL
 * (remote_source_open) and writes the LEN bytes at OFF to stdout (fewer
 * when the file ends first: as pread would), read through the source: the
 * prefix fetched at open, then validated range requests (no stream).  The
 * reads are not clipped to the file's size here: a read across the end
 * asks the source for all of it, and the source's short answer (0 at the
 * end) is what the tests check.  The
 * second opens URL and parses its GGUF header through the source (the
 * prefix, then the stream, as a mount does) and writes
 * "size=N hdr_size=N n_kv=N n_tensors=N" to stdout.
 *
 * Either way stderr then gets two lines:
 *   stats: requests=N bytes=N retries=N redirects=N
 *   identity: ID
 * and the exit status is 0.  On an error: one line "remote_get: MESSAGE"
 * (the URL in it redacted, never the token), the two lines above when the
 * URL was opened, exit status 1.  A usage error exits 2.
 */
#include "gguf/source.h"
#include "remote/source.h"
#include "remote/url.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK (64u << 20)

static void usage(void)
{
    fprintf(stderr, "usage: remote_get [--token-file F] [--cacert F] [--timeout S] URL OFF LEN\n"
                    "       remote_get [--token-file F] [--cacert F] [--timeout S] --gguf URL\n");
    exit(2);
}

static int error_line(const struct gguf_diag *d)
{
    char line[512];
    gguf_diag_format(d, NULL, line, sizeof line);
    fprintf(stderr, "remote_get: %s\n", line);
    return 1;
}

static bool number(const char *s, unsigned long long max, unsigned long long *out)
{
    if (!*s || *s < '0' || *s > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max)
        return false;
    *out = v;
    return true;
}

/* The first line of path, without its line end and trailing blanks. */
static char *read_token(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "remote_get: token file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    static char buf[16384 + 2];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    buf[strcspn(buf, "\r\n")] = '\0';
    n = strlen(buf);
    while (n && (buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (!n) {
        fprintf(stderr, "remote_get: token file %s: empty\n", path);
        return NULL;
    }
    return buf;
}

static void print_stats(struct remote *r)
{
    struct remote_stats st;
    remote_get_stats(r, &st);
    fprintf(stderr, "stats: requests=%llu bytes=%llu retries=%llu redirects=%llu\n",
            (unsigned long long)st.requests, (unsigned long long)st.bytes,
            (unsigned long long)st.retries, (unsigned long long)st.redirects);
    fprintf(stderr, "identity: %s\n", remote_identity(r));
}

static bool write_all(const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(1, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

int main(int argc, char **argv)
{
    struct remote_opts o = { 0 };
    const char *token_file = NULL;
    bool gguf = false;
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        unsigned long long v;
        if (strcmp(argv[i], "--gguf") == 0) {
            gguf = true;
        } else if (i + 1 >= argc) {
            usage();
        } else if (strcmp(argv[i], "--token-file") == 0) {
            token_file = argv[++i];
        } else if (strcmp(argv[i], "--cacert") == 0) {
            o.ca_file = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0) {
            if (!number(argv[++i], REMOTE_MAX_TIMEOUT, &v) || v == 0)
                usage();
            o.timeout_s = (unsigned)v;
        } else {
            usage();
        }
    }
    if (argc - i != (gguf ? 1 : 3))
        usage();
    unsigned long long off = 0, len = 0;
    if (!gguf && (!number(argv[i + 1], UINT64_MAX, &off) || !number(argv[i + 2], UINT64_MAX, &len)))
        usage();
    if (token_file && !(o.bearer_token = read_token(token_file)))
        return 1;

    struct gguf_diag d;
    char *url;
    if (remote_url_expand(argv[i], &url, &d) != GGUF_OK)
        return error_line(&d);
    o.url = url;
    struct gguf_source *src;
    enum gguf_err e = remote_source_open(&o, &src, &d);
    if (e) {
        free(url);
        return error_line(&d);
    }
    struct remote *r = remote_source_remote(src);
    int rc = 0;
    if (gguf) {
        struct gguf_file *f;
        e = gguf_open_source(src, &f, &d);
        remote_source_opened(src);
        if (e) {
            struct gguf_diag rd;
            if (e == GGUF_E_IO && remote_last_error(r, &rd))
                d = rd;
            rc = error_line(&d);
        } else {
            printf("size=%llu hdr_size=%llu n_kv=%llu n_tensors=%llu\n",
                   (unsigned long long)src->size, (unsigned long long)f->hdr_size,
                   (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
            gguf_close(f);
        }
    } else {
        remote_source_opened(src);
        uint64_t end = len > UINT64_MAX - off ? UINT64_MAX : off + len;
        size_t bufsz = end - off < CHUNK ? (size_t)(end - off) : CHUNK;
        char *buf = malloc(bufsz ? bufsz : 1);
        if (!buf) {
            fprintf(stderr, "remote_get: out of memory\n");
            rc = 1;
        }
        for (uint64_t at = off; !rc && at < end;) {
            size_t n = end - at < bufsz ? (size_t)(end - at) : bufsz;
            ssize_t got = src->ops->read(src, buf, n, at);
            if (got == 0)
                break;          /* the end of the file */
            if (got < 0) {
                if (!remote_last_error(r, &d))
                    gguf_diag_set(&d, GGUF_E_IO, at, "%s: read failed: %s", src->name,
                                  strerror(got ? (int)-got : EIO));
                rc = error_line(&d);
                break;
            }
            if (!write_all(buf, (size_t)got)) {
                fprintf(stderr, "remote_get: writing to stdout: %s\n", strerror(errno));
                rc = 1;
                break;
            }
            at += (uint64_t)got;
        }
        free(buf);
    }
    print_stats(r);
    gguf_source_close(src);
    free(url);
    return rc;
}

/*
 * remote/url.h — the URLs of remote models: what a user may write, what may
 * be shown, and which host a token belongs to.
 *
 * What a user may write (remote_url_expand):
 *
 *   https://HOST[:PORT]/PATH[?QUERY]   passed on as written (after a syntax
 *   http://HOST[:PORT]/PATH[?QUERY]    check by libcurl's URL parser)
 *   hf://ORG/REPO/PATH[@REVISION]      a file of a Hugging Face model repo:
 *        ENDPOINT/ORG/REPO/resolve/REVISION/PATH, with ENDPOINT the
 *        environment variable HF_ENDPOINT (an http:// or https:// URL,
 *        trailing '/' dropped) or https://huggingface.co, REVISION "main"
 *        when not given.  PATH may have '/'; its bytes other than
 *        [A-Za-z0-9._~/-] are percent-encoded, as are REVISION's (so
 *        "@refs/pr/1" becomes "refs%2Fpr%2F1").  "@" starts the revision
 *        at its last occurrence.  hf://datasets/ORG/REPO/PATH is a file of
 *        a dataset repo (ENDPOINT/datasets/ORG/REPO/resolve/...).
 *   s3://BUCKET/KEY, gs://BUCKET/OBJECT   an object in a store: checked
 *        (remote_store_check_name, remote/s3.h) and passed on as written;
 *        remote_open opens it with a store (remote_opts.store).
 *
 * Anything else (another scheme, a URL without a host, control characters
 * or blanks, an empty or "." or ".." component of an hf:// name) is
 * refused with GGUF_E_INVAL and a one-line message that shows the argument
 * redacted.
 *
 * What may be shown (remote_url_redact): every message, log line and the
 * info file name a URL only in its redacted form: no userinfo
 * ("user:password@"), nothing after '?' (presigned URLs carry their
 * signature in the query: it is replaced by "?…"), no fragment, and bytes
 * outside printable ASCII as '?'.  Redaction is textual and conservative:
 * it works on any string, URL or not, and removes rather than keeps when in
 * doubt (everything up to the last '@' of the authority).
 *
 * Which host a token belongs to (remote_url_same_origin): two URLs are of
 * the same origin when libcurl's own URL parser gives them the same scheme,
 * host (case-insensitively) and port (the scheme's default when not
 * written).  libcurl connects where its parser says, so the check cannot
 * disagree with where a request goes.
 *
 * Split models: llama.cpp names the shards of one model
 * NAME-00001-of-00003.gguf ... NAME-00003-of-00003.gguf (5 digits each).
 *
 * Returned strings are malloc'd (the caller frees them); NULL means out of
 * memory, or for remote_url_resolve and remote_url_shard, no such URL.
 * No function here prints or does I/O (expand reads HF_ENDPOINT).
 */
#ifndef REMOTE_URL_H
#define REMOTE_URL_H

#include <stdbool.h>
#include <stddef.h>

#include "gguf/diag.h"

/* Turns what the user wrote into the URL to open (*url, malloc'd). */
enum gguf_err remote_url_expand(const char *arg, char **url, struct gguf_diag *diag);

/* True when arg looks like a remote model (http://, https://, hf://, s3://
 * or gs://, case-insensitively) rather than a local path. */
bool remote_url_is_remote(const char *arg);

/* A copy of url fit to be shown (see above). */
char *remote_url_redact(const char *url);

/* The same written into out (cap bytes, NUL-terminated); a result longer
 * than cap - 1 bytes keeps its beginning and its end around "…".  Returns
 * out. */
char *remote_url_redact_to(const char *url, char *out, size_t cap);

/* Rewrites in place every URL in text (cap bytes, NUL-terminated) as
 * remote_url_redact shows it: a message that names a URL (a diag of a
 * shard, an HTTP error) can then be shown.  A URL is letters, "://", and
 * what follows up to white space or a quote (a final ':' kept out); text
 * that grows is cut to cap - 1 bytes, and to 1023 in any case. */
void remote_text_redact(char *text, size_t cap);

/* "host" or "host:port" (lowercase, as written in the URL; no userinfo),
 * or NULL when url does not parse. */
char *remote_url_host(const char *url);

/* See above; false when either does not parse. */
bool remote_url_same_origin(const char *a, const char *b);

/* True for an https URL going to an http one: a downgrade. */
bool remote_url_is_downgrade(const char *from, const char *to);

/* The absolute URL of a redirect's Location (absolute, scheme-relative,
 * absolute-path or relative reference) against the URL that was
 * requested.  NULL when the result does not parse or is not http(s). */
char *remote_url_resolve(const char *base, const char *location);

/* Recognises "-KKKKK-of-NNNNN.gguf" at the end of url's path: 1 <= k <= n.
 * n and k are set only when true. */
bool remote_url_is_split(const char *url, unsigned *n, unsigned *k);

/* url with its shard number replaced by k (1 <= k <= n); NULL when url is
 * not a shard name or k is out of range.  The query string, if any, is
 * kept as it is. */
char *remote_url_shard(const char *url, unsigned k);

#endif

/*
 * remote/s3.h — models in object stores: s3://BUCKET/KEY and
 * gs://BUCKET/OBJECT, where their requests go, and with which
 * credentials, found as the AWS CLI finds them.
 *
 * A store (struct remote_store) is loaded once per mount from the
 * environment, the AWS profile files and the mount's options; remote_open
 * (remote/http.h, opts->store) then opens any object of it by name — the
 * model, or a shard of a split model, whose name is the model's with its
 * shard number changed.  Nothing here uses libcurl, prints or logs; the
 * requests themselves (signed by libcurl's CURLOPT_AWS_SIGV4) and the
 * reading of a store's error documents are remote/http_store.c's.
 *
 * Names (remote_store_check_name):
 *   s3://BUCKET/KEY       BUCKET: 1 to 255 bytes of [A-Za-z0-9._-]; KEY:
 *   gs://BUCKET/OBJECT    1 to 1024 bytes, no control characters, no
 *                         empty, "." or ".." path segment (libcurl would
 *                         remove dot segments, and the signature would not
 *                         match what was asked).  KEY is percent-encoded
 *                         in the URL (bytes other than [A-Za-z0-9._~/-]),
 *                         which is also what SigV4's canonical URI is.
 *
 * s3:// — credentials, in this order (the AWS CLI's):
 *   1. AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN),
 *      unless a profile was named by -o aws_profile (as `aws --profile`
 *      skips them too); one without the other is an error;
 *   2. the profile (-o aws_profile, else AWS_PROFILE, else
 *      AWS_DEFAULT_PROFILE, else "default"): aws_access_key_id,
 *      aws_secret_access_key, aws_session_token of its section in the
 *      credentials file (AWS_SHARED_CREDENTIALS_FILE, else
 *      ~/.aws/credentials: [NAME]), then in the config file
 *      (AWS_CONFIG_FILE, else ~/.aws/config: [profile NAME], or [default]);
 *   3. none: anonymous requests (public buckets), unsigned.
 * A profile named explicitly (option or AWS_PROFILE) must exist in one of
 * the files; one that only has role_arn, credential_process, sso_* or
 * web_identity_token_file (credentials gguffs cannot make) is an error that
 * says how to export credentials instead.  The default profile may be
 * missing (then anonymous, unless the environment has keys).
 *
 * Region: -o s3_region, AWS_REGION, AWS_DEFAULT_REGION, the profile's
 * `region` (config file), else us-east-1.  A bucket that answers that it is
 * in another region is asked again there, once, at open (http_store.c).
 *
 * Endpoint: -o s3_endpoint, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the
 * profile's nested `s3 = ... endpoint_url`, its `endpoint_url`; each an
 * http:// or https:// URL, possibly with a path (a trailing '/' dropped),
 * no userinfo, query or fragment.  With one, requests use path-style
 * addressing (ENDPOINT/BUCKET/KEY: what Ceph RGW, Swift and MinIO expect);
 * without one, AWS: https://BUCKET.s3.REGION.amazonaws.com/KEY
 * (virtual-hosted; amazonaws.com.cn for cn-* regions), or
 * https://s3.REGION.amazonaws.com/BUCKET/KEY (path-style) for a bucket name
 * that is not a DNS label ('.', '_' or capitals: the certificate would not
 * match).  -o s3_addressing=path|virtual, else the profile's nested
 * `s3 = ... addressing_style`, overrides the choice; virtual needs a DNS
 * label bucket.
 *
 * gs:// — https://storage.googleapis.com/BUCKET/OBJECT (Cloud Storage's XML
 * API), or STORAGE_EMULATOR_HOST's URL ("http://" added when it has no
 * scheme) in its place; no signing: the caller passes a bearer token
 * (-o bearer_token_file or GOOGLE_OAUTH_ACCESS_TOKEN) in remote_opts,
 * none for public objects.
 *
 * Files are hostile input: at most REMOTE_STORE_FILE_MAX bytes, lines of
 * at most REMOTE_STORE_LINE_MAX, INI syntax (sections "[NAME]", "key =
 * value" or "key: value" split at the first '=' or ':', keys
 * case-insensitive, '#' and ';' comment lines, indented "sub = value"
 * lines under a key with no value); anything else is a one-line error
 * naming FILE:LINE.  Secrets are 1 to 128 printable bytes without blanks
 * (tokens up to 8192); they are never part of a message.  A file that
 * supplies a secret and is readable by group or others gets a warning
 * (remote_store.warning, for the caller to print once).
 */
#ifndef REMOTE_S3_H
#define REMOTE_S3_H

#include <stdbool.h>
#include <stddef.h>

#include "gguf/diag.h"

#define REMOTE_STORE_FILE_MAX (1u << 20)
#define REMOTE_STORE_LINE_MAX 16384
#define REMOTE_REGION_MAX 63
#define REMOTE_DEFAULT_REGION "us-east-1"
#define REMOTE_GCS_ENDPOINT "https://storage.googleapis.com"

enum remote_store_kind { REMOTE_STORE_S3, REMOTE_STORE_GS };

/* What the mount's options say (each NULL when not given). */
struct remote_store_opts {
    const char *profile;        /* -o aws_profile */
    const char *endpoint;       /* -o s3_endpoint */
    const char *region;         /* -o s3_region */
    const char *addressing;     /* -o s3_addressing: "path" or "virtual" */
};

struct remote_store {
    enum remote_store_kind kind;
    char *endpoint;             /* base URL, no trailing '/'; NULL: AWS's */
    const char *endpoint_from;  /* which setting named it (static text) */
    bool path_style;
    char region[REMOTE_REGION_MAX + 1];
    const char *region_from;    /* which setting named it (static text) */
    char *access_key, *secret_key, *session_token;  /* NULL: anonymous */
    char *who;                  /* whose credentials, for messages: "profile
                                   'NAME'", "AWS_ACCESS_KEY_ID", "no
                                   credentials (anonymous)" */
    char *warning;              /* NULL, or one line to print once */
};

/* True when arg starts with s3:// or gs:// (case-insensitively). */
bool remote_store_is_store(const char *arg);

/* Checks a name (see above): GGUF_OK, or GGUF_E_INVAL with a one-line
 * message. */
enum gguf_err remote_store_check_name(const char *name, struct gguf_diag *d);

/* Loads the store of name (s3:// or gs://; see above) from the
 * environment, the profile files and o (NULL: no options).  GGUF_E_INVAL
 * (bad option, bad or missing profile, malformed file, partial
 * credentials), GGUF_E_IO (a file that cannot be read), GGUF_E_NOMEM, with
 * a one-line message. */
enum gguf_err remote_store_load(const char *name, const struct remote_store_opts *o,
                                struct remote_store **out, struct gguf_diag *d);

/* A deep copy (NULL when memory is short). */
struct remote_store *remote_store_dup(const struct remote_store *s);

/* Frees s, wiping its secrets. */
void remote_store_free(struct remote_store *s);

/* The HTTP(S) URL of name (an s3:// or gs:// name that
 * remote_store_check_name accepts) in s, for region (NULL: s->region; AWS
 * URLs name it).  NULL when name is not valid or memory is short. */
char *remote_store_url(const struct remote_store *s, const char *name, const char *region);

/* "BUCKET" and "KEY" of a valid name, malloc'd; false when it is not. */
bool remote_store_split_name(const char *name, char **bucket, char **key);

/* ---- error documents ------------------------------------------------------------ */

/* What an S3 (or Cloud Storage XML API) error document says:
 * <Error><Code>..</Code><Message>..</Message>[<Region>..</Region>]
 * [<Endpoint>..</Endpoint>]</Error>, each text with the XML entities
 * &lt; &gt; &amp; &quot; &apos; decoded, bytes outside printable ASCII as
 * '?', cut to its field's size. */
struct remote_s3_error {
    char code[64];
    char message[160];
    char region[REMOTE_REGION_MAX + 1];
    char endpoint[128];
};

/* Parses body (len bytes, not NUL-terminated, any bytes): true when it
 * is an error document with a Code. */
bool remote_s3_error_parse(const char *body, size_t len, struct remote_s3_error *e);

/* True for a region name: 1 to REMOTE_REGION_MAX bytes of [a-z0-9-]. */
bool remote_store_region_ok(const char *r);

#endif

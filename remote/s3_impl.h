/*
 * remote/s3_impl.h — shared between the files of object stores (s3.c:
 * names, URLs, error documents; s3_profile.c: the AWS profile files;
 * s3_load.c: a store's settings and credentials from the options, the
 * environment and the profile).  Not for users of the library: see s3.h
 * for what is promised.
 */
#ifndef REMOTE_S3_IMPL_H
#define REMOTE_S3_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "s3.h"
#include "gguf/diag.h"

/* ---- helpers (s3.c) ------------------------------------------------------------------------ */

/* c in lower case (ASCII). */
char s3_lower(char c);
/* s starts with lit (lower case), ignoring the case of s. */
bool s3_prefix_ci(const char *s, const char *lit);
/* A copy of s (NULL for NULL, or out of memory). */
char *s3_dup_s(const char *s);
/* Frees a secret, zeroing it first; NULL is fine. */
void s3_wipe_free(char *s);

/* The bucket and key of a name, checked: NULL on success, else why not. */
const char *s3_parse_name(const char *name, const char **bucket, size_t *bn, const char **key,
                          size_t *kn);
/* A bucket that can be the first label of a host name. */
bool s3_dns_bucket(const char *b, size_t n);

/* ---- the profile files (s3_profile.c) --------------------------------------------------------- */

enum { V_KEY_ID, V_SECRET, V_TOKEN, V_REGION, V_ENDPOINT, V_S3_ENDPOINT, V_S3_ADDRESSING,
       V_ROLE_ARN, V_CRED_PROCESS, V_SSO_URL, V_SSO_SESSION, V_WEB_IDENTITY, V_N };

/* The names of the values above, as the files spell them. */
extern const char *const s3_val_names[V_N];

struct profile {
    char *v[V_N];
    bool found;                 /* the section exists */
    char path[512];             /* the file it was found in, for messages */
    mode_t mode;
};

/* Frees (wiping) the values of p. */
void s3_profile_clear(struct profile *p);

/* Reads path (at most REMOTE_STORE_FILE_MAX bytes) and scans it for the
 * section want, into p (later values win; p->found, p->path and p->mode
 * when the section is there).  A missing file is no section (GGUF_OK). */
enum gguf_err s3_read_profile_file(const char *path, const char *want, struct profile *p,
                                   struct gguf_diag *d);

/* $HOME/rest (the passwd entry's home when HOME is unset), or NULL. */
char *s3_home_file(const char *rest);

#endif

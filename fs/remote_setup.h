/*
 * fs/remote_setup.h — what opens a remote model, for a mount and for
 * --dump: the URL to read (hf:// expanded), the token (-o
 * bearer_token_file, else HF_TOKEN, or GOOGLE_OAUTH_ACCESS_TOKEN for
 * gs://), the object store of an s3:// or gs:// model; and the one-line
 * refusals of a model at mount (remote_setup.c).  Run before the mount,
 * in the one thread there is: errors go to stderr, one line each.
 */
#ifndef FS_REMOTE_SETUP_H
#define FS_REMOTE_SETUP_H

#include <stdbool.h>

struct options;
struct gguf_diag;
struct remote_store;
struct remote_opts;

/* "gguffs: MODEL: what (at byte offset N)" on stderr; returns 1. */
int ggfs_refuse(const char *model, const struct gguf_diag *d);
/* The same for a remote model: the diag's own URL when it names one
 * (HTTP errors do), else model; redacted either way (no credentials). */
void ggfs_remote_refuse(const char *model, struct gguf_diag *d);
/* *real: the URL to read (malloc'd, shown only redacted), *token (NULL or
 * malloc'd: ggfs_token_free), *store (NULL or remote_store_free; its
 * warning, a credentials file others may read, printed here) and *ro
 * pointing at them.  False after a one-line error (nothing to free). */
bool ggfs_remote_setup(const struct options *o, char **real, char **token,
                       struct remote_store **store, struct remote_opts *ro);
/* Wipes the token, then frees it (NULL: nothing). */
void ggfs_token_free(char *token);

#endif

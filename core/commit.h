/*
 * core/commit.h — committing a new header an edit of meta/ built
 * (gguf/kvedit.h, in whandle.c) to the model (commit.c): the commit
 * (gguf/commit.h: the one writer of the file; with -o overlay, the overlay
 * file: core/overlay.h), a new state swapped in and the kernel told what
 * changed (notify.h).  Also the checks every edit starts with (may the
 * model be written now? is that key reserved? is that a valid new key
 * name?) and the log line of a refused edit.
 *
 * Promises: an edit is applied whole or not at all (gguf/commit.h is
 * crash-safe), the new version becoming fs->st only once its file is
 * written and re-read; readers of the old version keep it until they are
 * done.  A refused edit changes nothing and is logged with the key and
 * the reason (core_edit_refused).  Handlers are never blocked by a commit
 * in progress, only, briefly, by the swap.
 *
 * Locks: core_commit_header runs with commit_mu held:
 * nobody else can swap the state meanwhile, so fs->st is stable without
 * the state lock; the swap itself takes the lock for writing, which waits
 * for the handlers that only look (in memory, quick).  Reads hold a
 * reference to their version instead of the lock, so the swap never
 * waits for a read's fetch or fill, and the old version lives until its
 * last read drops it.  core_write_check runs under commit_mu too (at the
 * start of every edit); core_edit_refused, core_key_is_reserved and
 * core_key_name_new take no lock (a write() refused logs without
 * commit_mu).
 */
#ifndef CORE_COMMIT_H
#define CORE_COMMIT_H

#include "core/mount.h"

#include "gguf/buf.h"

/* Functions marked (C) run with commit_mu held and may commit; they return
 * 0 or an errno. */

/* 0 if an edit may write the model now, else the errno every edit fails
 * with at once (at open, create, rename, unlink, setxattr), and *why says
 * why in words: EROFS for -o ro or a model on a read-only file system
 * (remounted so after the mount too), EACCES when gguffs may not write
 * the model or the folder that holds it (where the journal and a
 * rewrite's new file go).  A few system calls, no I/O on the model. */
int core_write_check(struct mount *fs, const char **why);
/* Logs that an edit of meta/fname was refused with errno err, and why;
 * returns err. */
int core_edit_refused(struct mount *fs, const char *fname, int err, const char *why);
/* (C) Commits the header hdr an edit of meta/fname built (e: the
 * builder's result, d its reason, logged when e is not GGUF_OK; why:
 * "edit", "delete", ... for the log), and frees hdr: 0, or the refusal
 * as an errno. */
int core_commit_header(struct mount *fs, enum gguf_err e, struct gguf_buf *hdr,
                       const struct gguf_diag *d, const char *fname, const char *why);

/* Asks the kernel to read st's header into the page cache, without
 * waiting: the commit reads it back to see that the model is the one
 * indexed (gguf/commit.c, check_unchanged), and where the page cache no
 * longer holds it that read took a few ms of a growing edit's time
 * (megabyte headers, ext4).  Called when an edit opens and when it is
 * applied, so that the disk works while the text is written and the new
 * header built.  A hint: nothing waits for it, nothing fails without it;
 * nothing for an overlay.  No lock: st is the caller's. */
void core_edit_ahead(const struct mount *fs, const struct state *st);

/* Key i cannot be written (general.alignment, gguffs.padding:
 * EPERM); fname decodes to a valid new key name (gguf/kvedit.h). */
bool core_key_is_reserved(const struct gguf_file *gf, uint64_t i);
bool core_key_name_new(const char *fname, size_t len);

#endif

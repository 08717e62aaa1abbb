/*
 * fs/overlay.h — edits of a remote model in a local overlay file
 * (overlay.c; -o overlay=FILE; the file's format and the spliced source
 * are gguf/overlay.h).
 *
 * The remote model is opened once, at mount (fs->base), and lives until
 * the end; every version of the model is base with the overlay's edited
 * header spliced before the remote's tensor data, parsed from memory (no
 * request).  Promises: the file on disk is the truth (an edit writes the
 * whole overlay anew, crash-safely, and the model is read back from it);
 * one read-write mount per overlay file (an OFD lock on it); an overlay
 * changed by someone else since this mount read it is never written over.
 *
 * Locks: before the session, or under commit_mu once mounted (commit.c);
 * they take none of the mount's.
 */
#ifndef FS_OVERLAY_H
#define FS_OVERLAY_H

#include "fs.h"

/* The model shown by an overlay mount: fs->base with the edits of the
 * overlay file (none while there is no file).  At mount and after every
 * commit; errors (an overlay of another model, a damaged one) name the
 * byte offset in the overlay file. */
enum gguf_err ggfs_overlay_model(struct ggfs *fs, struct gguf_split **out,
                                 struct gguf_diag *d);
/* Writes hdr, an edit of fs->st's model, into the overlay, crash-safely
 * (gguf/overlay.h).  GGUF_E_PERM for a change of a split model's split.*
 * keys; GGUF_E_IO when the overlay cannot be written, or was changed by
 * someone else since this mount read it.  Under commit_mu. */
enum gguf_err ggfs_overlay_commit(struct ggfs *fs, const struct gguf_buf *hdr,
                                  struct gguf_diag *d);
/* The mount's OFD write lock on the overlay file (fs->lock_fd), taken
 * when there is none yet: at mount, before a leftover new file is
 * removed, and before an edit (the file may have been created since, by
 * this mount or another): 0 (held), EAGAIN (another process holds one),
 * or the errno of opening it (ENOENT: no file yet, nothing to lock; the
 * first edit creates it locked).  Under commit_mu once mounted. */
int ggfs_overlay_lock(struct ggfs *fs);
/* -o overlay=given as an absolute path (symbolic links resolved; the
 * file need not exist, its directory must), malloc'd; NULL with why set
 * (cap bytes) when it cannot be one: not a regular file, or (writable)
 * its directory is not writable. */
char *ggfs_overlay_path(const char *given, bool writable, char *why, size_t cap);

#endif

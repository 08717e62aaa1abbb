/*
 * core/overlay.h — edits of a remote model in a local overlay file
 * (overlay.c; -o overlay=FILE; the file's format and the spliced source
 * are gguf/overlay.h).  No FUSE, no struct mount: the mount (fs/) passes
 * the overlay's path, the base model, and the checksum and lock it keeps;
 * tested by tests/unit/test_core_overlay.c.
 *
 * The remote model (the base) is opened once, at mount, and lives until
 * the end; every version of the model is base with the overlay's edited
 * header spliced before the remote's tensor data, parsed from memory (no
 * request).  Promises: the file on disk is the truth (an edit writes the
 * whole overlay anew, crash-safely, and the model is read back from it);
 * one read-write mount per overlay file (an OFD lock on it); an overlay
 * changed by someone else since this mount read it is never written over
 * (*sum: its checksum as the mount last read or wrote it, 0 while there
 * is no file).
 *
 * Locks: before the session, or under commit_mu once mounted
 * (core/commit.c); they take none of the mount's.
 */
#ifndef CORE_OVERLAY_H
#define CORE_OVERLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/buf.h"
#include "gguf/gguf.h"

struct gguf_split;

/* The model shown by an overlay mount: base with the edits of the overlay
 * file at path (none while there is no file); *sum is set to the file's
 * checksum (0: no file).  At mount and after every commit; errors (an
 * overlay of another model, a damaged one) name the byte offset in the
 * overlay file. */
enum gguf_err core_overlay_model(const char *path, const struct gguf_split *base,
                                 uint64_t *sum, struct gguf_split **out, struct gguf_diag *d);
/* Writes hdr, an edit of a version of base, into the overlay at path,
 * crash-safely (gguf/overlay.h); *sum follows the file written, and
 * *lock_fd (the mount's lock, -1 if none) is moved onto the new file.
 * GGUF_E_PERM for a change of a split model's split.* keys; GGUF_E_IO
 * when the overlay cannot be written, or its checksum is no longer *sum
 * (someone else changed it since this mount read it).  Under commit_mu. */
enum gguf_err core_overlay_commit(const char *path, const struct gguf_split *base,
                                  uint64_t *sum, int *lock_fd, const struct gguf_buf *hdr,
                                  struct gguf_diag *d);
/* The mount's OFD write lock on the overlay file at path (*lock_fd),
 * taken when there is none yet (*lock_fd -1): at mount, before a leftover
 * new file is removed, and before an edit (the file may have been created
 * since, by this mount or another): 0 (held), EAGAIN (another process
 * holds one), or the errno of opening it (ENOENT: no file yet, nothing to
 * lock; the first edit creates it locked).  Under commit_mu once
 * mounted. */
int core_overlay_lock(const char *path, int *lock_fd);
/* -o overlay=given as an absolute path (symbolic links resolved; the
 * file need not exist, its directory must), malloc'd; NULL with why set
 * (cap bytes) when it cannot be one: not a regular file, or (writable)
 * its directory is not writable. */
char *core_overlay_path(const char *given, bool writable, char *why, size_t cap);

#endif

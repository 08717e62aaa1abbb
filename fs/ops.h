/*
 * fs/ops.h — the FUSE low-level handlers (the table in ops.c, the handlers
 * by job in ops_dir.c, ops_open.c, ops_edit.c and ops_xattr.c) and what
 * session.c needs of them.
 *
 * Promises: every handler ends in exactly one fuse_reply_*.  Handlers
 * that only look (lookup, getattr, readdir, open, xattrs, statfs) see one
 * version of the model from start to end; reads hold a reference to the
 * version they read (the handle's, or the current one's), never the state
 * lock, since their bytes may wait on a server; handlers that may edit
 * take commit_mu (commit.h), and namespace changes outside meta/ are
 * refused without it (see the lock order in core/mount.h).
 *
 * Locks: the handlers take what they need (the state lock for reading,
 * commit_mu); ggfs_count_read takes none; ggfs_opens_free runs at the
 * end, after the session.
 */
#ifndef FS_OPS_H
#define FS_OPS_H

#include "fs.h"

/* Counts a read request of size bytes. */
void ggfs_count_read(struct mount *fs, enum read_kind k, size_t size);

/* Frees what open files hold whose release never came (gguffs ended by a
 * signal while they were open): meta/ snapshots and model.safetensors
 * handles (at the end, before the streams and the versions they hold are
 * freed from their own lists). */
void ggfs_opens_free(struct mount *fs);

/* The low-level operations table (ops.c). */
extern const struct fuse_lowlevel_ops ggfs_ops;

#endif

/*
 * fs/ops_impl.h — what the files of the FUSE handlers share (ops.c,
 * ops_dir.c, ops_open.c, ops_edit.c, ops_xattr.c): how fi->fh tells an open
 * file's kind, the READ_LOCKED wrapper, and the handlers the operations
 * table in ops.c names.
 *
 * Promises: every handler ends in exactly one fuse_reply_*.  Handlers
 * that only look (lookup, getattr, readdir, open, xattrs, statfs) run with
 * the state lock held for reading (READ_LOCKED below); reads hold a
 * reference to the version they read instead (the handle's, or the
 * current one's), never the lock, since their bytes may wait on a server;
 * those that may edit take the commit lock (see the lock order in core/mount.h).
 */
#ifndef FS_OPS_IMPL_H
#define FS_OPS_IMPL_H

#include "fs.h"

/* fi->fh of an open file, told apart by its low bits (allocations are
 * aligned): 0 nothing (raw, type, shape, stats), a write handle
 * (whandle.c) with tag 0, a snapshot of a meta/ value with tag 1, a state
 * (the version an open info, info.json or model.gguf reads) with tag 2
 * (model.safetensors, told by its inode: a struct st_open), an f32 file's
 * stream (f32.c) with tag 3. */
#define FH_TAG 3u
#define FH_SNAPSHOT 1u
#define FH_STATE 2u
#define FH_F32 3u
#define IS_SNAPSHOT(fi) (((fi)->fh & FH_TAG) == FH_SNAPSHOT)
#define IS_STATE(fi) (((fi)->fh & FH_TAG) == FH_STATE)
#define IS_F32(fi) (((fi)->fh & FH_TAG) == FH_F32)
#define IS_WHANDLE(fi) ((fi)->fh && ((fi)->fh & FH_TAG) == 0)
#define SNAPSHOT(fi) ((struct snap *)(uintptr_t)((fi)->fh & ~(uint64_t)FH_TAG))
#define FH_STATE_OF(fi) ((struct state *)(uintptr_t)((fi)->fh & ~(uint64_t)FH_TAG))
#define FH_STREAM(fi) ((struct f32_stream *)(uintptr_t)((fi)->fh & ~(uint64_t)FH_TAG))
#define FH_ST_OPEN(fi) ((struct st_open *)(uintptr_t)((fi)->fh & ~(uint64_t)FH_TAG))
#define IS_SAFETENSORS(ino) ((ino) >= VERSION_BASE && (ino) < TENSOR_BASE && \
                             (((ino) - VERSION_BASE) % VERSION_STRIDE == VS_SAFETENSORS || \
                              ((ino) - VERSION_BASE) % VERSION_STRIDE == VS_HF_SAFETENSORS))

/* Writes the mount's readahead (-o readahead) to its bdi once, at the first
 * request after INIT that can come before an open (ops.c). */
void ggfs_set_readahead(struct mount *fs);

/* Defines ggfs_op_NAME: the handler do_NAME(req, fs, st, ...) with the
 * state lock held for reading, so it sees one version from start to end. */
#define UNUSED __attribute__((unused))

#define READ_LOCKED(name, params, ...)                  \
    void ggfs_op_##name params                          \
    {                                                   \
        struct mount *fs = req_fs(req);                  \
        ggfs_set_readahead(fs);                         \
        pthread_rwlock_rdlock(&fs->lock);               \
        do_##name(req, fs, fs->st, __VA_ARGS__);        \
        pthread_rwlock_unlock(&fs->lock);               \
    }

/* The handlers (ops.c's table names them): ops_dir.c */
void ggfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void ggfs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ggfs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ggfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                     struct fuse_file_info *fi);
void ggfs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         struct fuse_file_info *fi);
/* ops_open.c */
void ggfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ggfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                  struct fuse_file_info *fi);
void ggfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* ops_edit.c */
void ggfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void ggfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                    struct fuse_file_info *fi);
void ggfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi);
void ggfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void ggfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void ggfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                    fuse_ino_t newparent, const char *newname, unsigned int flags);
void ggfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                     struct fuse_file_info *fi);
/* ops_xattr.c */
void ggfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void ggfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void ggfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                      size_t size, int flags);
/* ops.c */
void ggfs_op_statfs(fuse_req_t req, fuse_ino_t ino);

#endif

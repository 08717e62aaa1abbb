/*
 * fs/ops_edit.c — the FUSE handlers that may edit meta/: create, write,
 * flush, unlink, rename, setattr (and mkdir, refused).  They take
 * commit_mu, not the state lock (commit.h); namespace changes outside
 * meta/ are refused without it.
 */
#include "fs.h"
#include "ops_impl.h"
#include "core/commit.h"
#include "core/nodes.h"
#include "core/state.h"
#include "whandle.h"

#include <errno.h>
#include <linux/fs.h>

void ggfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    (void)parent, (void)name, (void)mode;
    fuse_reply_err(req, EPERM);       /* the tree has no place for directories */
}

/* ---- handlers that may edit (commit_mu, not the read lock: commit.c) ---- */

/* Namespace changes outside meta/ are refused without the commit lock: the
 * kernel holds the parent directory's lock meanwhile, and a commit waits
 * for the invalidation of names in / (notify.c). */
static int not_meta(fuse_ino_t parent)
{
    return parent == INO_META ? 0 : parent == INO_ROOT || parent == INO_TENSORS || parent == INO_HF ||
           parent >= TENSOR_BASE ? EACCES : ENOENT;
}

void ggfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
                           mode_t mode, struct fuse_file_info *fi)
{
    (void)mode;
    struct mount *fs = req_fs(req);
    int e = not_meta(parent);
    if (e)
        return (void)fuse_reply_err(req, e);
    pthread_mutex_lock(&fs->commit_mu);
    ggfs_edit_create(req, name, fi);
    pthread_mutex_unlock(&fs->commit_mu);
}

void ggfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
                          size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    int e = IS_WHANDLE(fi) ? ggfs_edit_write(fi, buf, size, off) : EBADF;
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_write(req, size);
}

void ggfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct mount *fs = req_fs(req);
    int e = 0;
    if (IS_WHANDLE(fi)) {
        pthread_mutex_lock(&fs->commit_mu);
        e = ggfs_edit_flush(fs, fi, fuse_req_ctx(req)->pid);
        pthread_mutex_unlock(&fs->commit_mu);
    }
    fuse_reply_err(req, e);
}

void ggfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct mount *fs = req_fs(req);
    int e = not_meta(parent);
    if (!e) {
        pthread_mutex_lock(&fs->commit_mu);
        e = ggfs_edit_unlink(fs, name);
        pthread_mutex_unlock(&fs->commit_mu);
    }
    fuse_reply_err(req, e);
}

void ggfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                           fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    struct mount *fs = req_fs(req);
    int e = not_meta(parent);
    if (!e && newparent != parent)
        e = EXDEV;
    else if (!e && (flags & ~RENAME_NOREPLACE))
        e = EINVAL;
    if (!e) {
        pthread_mutex_lock(&fs->commit_mu);
        if ((flags & RENAME_NOREPLACE) && core_ntab_find(&fs->st->meta_names, newname) >= 0)
            e = EEXIST;
        else
            e = ggfs_edit_rename(fs, name, newname);
        pthread_mutex_unlock(&fs->commit_mu);
    }
    fuse_reply_err(req, e);
}

void ggfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                            int to_set, struct fuse_file_info *fi)
{
    struct mount *fs = req_fs(req);
    pthread_mutex_lock(&fs->commit_mu);
    struct node n = core_classify(fs->st, ino);
    size_t psize = 0;
    bool pend = n.kind == K_NONE && ino >= KV_BASE && ino < VERSION_BASE &&
                ggfs_pending_size(fs, ino - KV_BASE, NULL, NULL, &psize);
    int e = 0;
    if (n.kind == K_NONE && !pend) {
        e = ENOENT;
    } else if (to_set & FUSE_SET_ATTR_SIZE) {
        if (n.kind != K_KV && !pend)
            e = n.kind == K_TENSOR || n.kind == K_INFO || n.kind == K_STATS ||
                n.kind == K_MODEL || n.kind == K_INFO_JSON || n.kind == K_SAFETENSORS ||
                n.kind == K_HASHES || n.kind == K_LOG || n.kind == K_HF_FILE ?
                EACCES : EISDIR;
        else
            e = ggfs_edit_truncate(fs, fi && IS_WHANDLE(fi) ? fi : NULL, n.idx,
                                   n.kind == K_KV, attr->st_size);
    } else if ((to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) &&
               n.kind != K_KV && !pend) {
        e = EPERM;
    }
    /* Times (touch), and mode and owner of meta/ files (sed -i copies them
     * to its temporary file), are accepted and ignored: they are the
     * model's. */
    struct stat out;
    if (!e && pend) {
        if (ggfs_pending_size(fs, ino - KV_BASE, NULL, NULL, &psize))
            core_stat_pending(fs->st, ino, psize, &out);
        else
            e = ENOENT;
    } else if (!e) {
        e = core_stat(fs, fs->st, ino, &out);
    }
    bool own = !e && !pend && fi && IS_WHANDLE(fi) && n.kind == K_KV;
    if (own)    /* a handle open for writing: the size of its text, as fstat says */
        out.st_size = (off_t)ggfs_edit_size(fi);
    pthread_mutex_unlock(&fs->commit_mu);
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_attr(req, &out, pend || own ? 0 : ggfs_timeout(fs));
}

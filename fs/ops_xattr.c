/*
 * fs/ops_xattr.c — the FUSE handlers of extended attributes: a meta/
 * file's user.gguf.type (getxattr, listxattr with the state lock held for
 * reading; setxattr, which retypes a key, under commit_mu).
 */
#include "fs.h"
#include "ops_impl.h"
#include "core/commit.h"
#include "core/nodes.h"
#include "whandle.h"

#include "gguf/value.h"

#include <errno.h>
#include <string.h>

#define XATTR_TYPE "user.gguf.type"

/* ino is a pending file of meta/ (a created key not closed yet, a scratch
 * file): listed by readdir, so ls -l asks for its xattrs (none). */
static bool is_pending(struct mount *fs, fuse_ino_t ino)
{
    return ino >= KV_BASE && ino < VERSION_BASE && ggfs_pending_exists(fs, ino - KV_BASE, NULL);
}

static void do_getxattr(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                        const char *name, size_t size)
{
    struct node n = core_classify(st, ino);
    if (n.kind == K_NONE && !is_pending(fs, ino))
        return (void)fuse_reply_err(req, ENOENT);
    if (n.kind != K_KV || strcmp(name, XATTR_TYPE) != 0)
        return (void)fuse_reply_err(req, ENODATA);
    const struct gguf_file *gf = st_meta(st);
    struct gguf_typedesc td;
    struct gguf_buf b = { 0 };
    gguf_kv_typedesc(gf, &gf->kv[n.idx], &td);
    if (!gguf_typedesc_format(&td, &b))
        fuse_reply_err(req, ENOMEM);
    else if (size == 0)
        fuse_reply_xattr(req, b.len);
    else if (size < b.len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, b.data, b.len);
    gguf_buf_free(&b);
}
READ_LOCKED(getxattr, (fuse_req_t req, fuse_ino_t ino, const char *name, size_t size),
            ino, name, size)

static void do_listxattr(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                         size_t size)
{
    struct node n = core_classify(st, ino);
    if (n.kind == K_NONE && !is_pending(fs, ino))
        return (void)fuse_reply_err(req, ENOENT);
    static const char list[] = XATTR_TYPE;     /* with its NUL */
    size_t len = n.kind == K_KV ? sizeof list : 0;
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, list, len);
}
READ_LOCKED(listxattr, (fuse_req_t req, fuse_ino_t ino, size_t size), ino, size)

void ggfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                             const char *value, size_t size, int flags)
{
    (void)flags;
    struct mount *fs = req_fs(req);
    pthread_mutex_lock(&fs->commit_mu);
    struct node n = core_classify(fs->st, ino);
    bool pend = n.kind == K_NONE && ino >= KV_BASE && ino < VERSION_BASE &&
                ggfs_pending_exists(fs, ino - KV_BASE, NULL);
    int e;
    if (n.kind == K_NONE && !pend)
        e = ENOENT;
    else if ((n.kind != K_KV && !pend) || strcmp(name, XATTR_TYPE) != 0)
        e = ENOTSUP;
    else
        e = ggfs_edit_settype(fs, ino - KV_BASE, value, size);
    pthread_mutex_unlock(&fs->commit_mu);
    fuse_reply_err(req, e);
}

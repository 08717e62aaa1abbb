/*
 * fs/ops.c — the FUSE operations table, and the handlers of the mount as a
 * whole: init (what gguffs asks of the kernel), the readahead written
 * before the first open, statfs.  The other handlers are by job:
 * ops_dir.c (names and directories), ops_open.c (opening, reading and
 * releasing files), ops_edit.c (creating, writing, removing and renaming
 * meta/'s files, setattr), ops_xattr.c (extended attributes); what they
 * share is ops_impl.h.
 */
#include "fs.h"
#include "ops.h"
#include "ops_impl.h"

#include <stdio.h>
#include <string.h>

/* The mount's readahead (-o readahead) is its bdi's read_ahead_kb.  The
 * kernel sets that to at most what it asked for in INIT (the default, 128
 * KiB) when it handles the reply to INIT, undoing a value written before:
 * so it is written by the first request after INIT that can come before
 * an open (lookup, getattr, ...).  An open reads it (a file's readahead is
 * fixed at open), so every open sees the value written. */
void ggfs_set_readahead(struct mount *fs)
{
    if (!atomic_load_explicit(&fs->ra_pending, memory_order_acquire) ||
        !atomic_exchange(&fs->ra_pending, false))
        return;
    char path[96];
    snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", fs->bdi);
    FILE *f = fopen(path, "we");
    if (!f)
        return;                 /* not root: the kernel's default stays */
    fprintf(f, "%llu\n", (unsigned long long)(fs->readahead >> 10));
    fclose(f);
}

static void ggfs_op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct mount *fs = userdata;
    /* Let the kernel move raw tensor bytes from the model's fd by splice. */
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE)
        conn->want |= FUSE_CAP_SPLICE_MOVE;
    /* The request size (libfuse asks the kernel for max_write's pages). */
    conn->max_write = fs->req_bytes;
    conn->max_readahead = conn->max_readahead ? conn->max_readahead : UINT32_MAX;
    /* The bytes of an inode never change (a new version of info or
     * model.gguf is a new inode): no invalidation on open. */
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
    /* A walk opens every directory: with no OPENDIR and RELEASEDIR asked
     * (two of the four requests a first listing costs, all of a second
     * one), the kernel keeps each listing until told (do_opendir). */
    if (conn->capable & FUSE_CAP_POSIX_ACL)
        conn->want |= FUSE_CAP_POSIX_ACL;
    if (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) {
        conn->want |= FUSE_CAP_NO_OPENDIR_SUPPORT;
        fs->no_opendir = true;
    }
}

static void do_statfs(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino)
{
    (void)fs, (void)ino;
    struct statvfs sv;
    memset(&sv, 0, sizeof sv);
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    sv.f_blocks = (st->model_size + 4095) / 4096;
    sv.f_files = KV_BASE + st_meta(st)->n_kv + st->n_tensors * TF_COUNT;
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
}
READ_LOCKED(statfs, (fuse_req_t req, fuse_ino_t ino), ino)

const struct fuse_lowlevel_ops ggfs_ops = {
    .init = ggfs_op_init,
    .lookup = ggfs_op_lookup,
    .getattr = ggfs_op_getattr,
    .setattr = ggfs_op_setattr,
    .opendir = ggfs_op_opendir,
    .readdir = ggfs_op_readdir,
    .readdirplus = ggfs_op_readdirplus,
    .open = ggfs_op_open,
    .read = ggfs_op_read,
    .getxattr = ggfs_op_getxattr,
    .listxattr = ggfs_op_listxattr,
    .setxattr = ggfs_op_setxattr,
    .statfs = ggfs_op_statfs,
    .unlink = ggfs_op_unlink,
    .rename = ggfs_op_rename,
    .create = ggfs_op_create,
    .mkdir = ggfs_op_mkdir,
    .write = ggfs_op_write,
    .flush = ggfs_op_flush,
    .release = ggfs_op_release,
};

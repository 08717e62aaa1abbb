/*
 * fs/ops_dir.c — the FUSE handlers of names and directories: lookup,
 * getattr, opendir, readdir and readdirplus.  They only look: each runs
 * with the state lock held for reading, so it sees one version of the
 * model from start to end.
 */
#include "fs.h"
#include "ops_impl.h"
#include "core/nodes.h"
#include "core/state.h"
#include "core/tensor.h"
#include "whandle.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ----------------------------------------------------------------- */

static void reply_entry(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    int err = core_stat(fs, st, ino, &e.attr);
    if (err)
        return (void)fuse_reply_err(req, err);
    e.ino = ino;
    e.generation = 1;
    /* log grows with every message: its size is asked for each stat */
    e.attr_timeout = ino == INO_LOG ? 0 : ggfs_timeout(fs);
    e.entry_timeout = ggfs_timeout(fs);
    fuse_reply_entry(req, &e);
}

/* A key created and not committed yet: a new file until its close, so no
 * caching (timeouts 0). */
static bool reply_pending(fuse_req_t req, struct mount *fs, struct state *st, const char *name)
{
    uint64_t id;
    size_t size;
    if (!ggfs_pending_size(fs, 0, name, &id, &size))
        return false;
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = KV_BASE + id;
    e.generation = 1;
    core_stat_pending(st, e.ino, size, &e.attr);
    fuse_reply_entry(req, &e);
    return true;
}

static void do_lookup(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t parent,
                      const char *name)
{
    struct node p = core_classify(st, parent);
    int64_t i;
    switch (p.kind) {
    case K_ROOT:
        for (unsigned e = 0; e < core_root_n; e++)
            if (strcmp(name, core_root[e].name) == 0 && core_root_has(st, e))
                return reply_entry(req, fs, st, core_root_ino(st, e));
        break;
    case K_HF:
        for (unsigned e = 0; e < core_hf_files_n; e++)
            if (strcmp(name, core_hf_files[e].name) == 0 &&
                core_hf_has(st, core_hf_files[e].slot))
                return reply_entry(req, fs, st, INO_HF_FILE(st->gen, core_hf_files[e].slot));
        break;
    case K_META:
        /* a key longer than a file name may be (statfs says 255, as most
         * file systems a copy would go to) is in info only, as README
         * says: not listed (readdir), not found */
        if (strlen(name) > NAME_MAX)
            return (void)fuse_reply_err(req, ENAMETOOLONG);
        if ((i = core_ntab_find(&st->meta_names, name)) >= 0)
            return reply_entry(req, fs, st, KV_BASE + st->kv_id[i]);
        if (reply_pending(req, fs, st, name))
            return;
        break;
    case K_TENSORS:
        if ((i = core_ntab_find(&st->tensor_names, name)) >= 0)
            return reply_entry(req, fs, st, core_tensor_ino((uint64_t)i, TF_DIR));
        break;
    case K_TENSOR:
        if (p.tf != TF_DIR)
            return (void)fuse_reply_err(req, ENOTDIR);
        for (int f = TF_RAW; f < TF_COUNT; f++)
            if (strcmp(name, core_tensor_files[f]) == 0 &&
                core_tensor_has(st, p.idx, (enum tensor_file)f))
                return reply_entry(req, fs, st, core_tensor_ino(p.idx, (enum tensor_file)f));
        break;
    case K_NONE:
        return (void)fuse_reply_err(req, ENOENT);
    default:
        return (void)fuse_reply_err(req, ENOTDIR);
    }
    /* A negative entry: the name appears only by an edit, which says so. */
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.entry_timeout = ggfs_timeout(fs);
    fuse_reply_entry(req, &e);
}
/* Every size is known from the header (a stats file's and the digests' are
 * fixed): a lookup computes nothing; a read computes them, holding a
 * reference to its state and no lock. */
READ_LOCKED(lookup, (fuse_req_t req, fuse_ino_t parent, const char *name), parent, name)

static void do_getattr(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    struct stat out;
    int err = core_stat(fs, st, ino, &out);
    size_t psize;
    if (!err && fi && IS_WHANDLE(fi) && S_ISREG(out.st_mode)) {
        /* fstat of a meta/ file open for writing: the text it holds
         * (lseek(SEEK_END) asks this), not the committed value */
        out.st_size = (off_t)ggfs_edit_size(fi);
        return (void)fuse_reply_attr(req, &out, 0);
    }
    if (err == ENOENT && ino >= KV_BASE && ino < VERSION_BASE &&
        ggfs_pending_size(fs, ino - KV_BASE, NULL, NULL, &psize)) {
        core_stat_pending(st, ino, psize, &out);
        return (void)fuse_reply_attr(req, &out, 0);
    }
    if (err)
        return (void)fuse_reply_err(req, err);
    bool writing = ino >= KV_BASE && ino < VERSION_BASE && ggfs_edit_is_open(fs, ino - KV_BASE);
    fuse_reply_attr(req, &out, writing || ino == INO_LOG ? 0 : ggfs_timeout(fs));
}
READ_LOCKED(getattr, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi), ino, fi)

/* Entry e (0-based, "." and ".." first) of directory n: false past the end. */
static bool dir_entry(struct state *st, fuse_ino_t ino, const struct node *n, uint64_t e,
                      const char **name, fuse_ino_t *child, mode_t *mode)
{
    *mode = S_IFREG;
    if (e < 2) {
        *name = e ? ".." : ".";
        *child = e ? (n->kind == K_TENSOR ? INO_TENSORS : INO_ROOT) : ino;
        *mode = S_IFDIR;
        return true;
    }
    e -= 2;
    switch (n->kind) {
    case K_ROOT:
        if (e >= core_root_n)
            return false;
        *name = core_root[e].name;
        *child = core_root_ino(st, (unsigned)e);
        if (core_root[e].kind == K_META || core_root[e].kind == K_TENSORS ||
            core_root[e].kind == K_HF)
            *mode = S_IFDIR;
        return true;
    case K_HF:
        if (e >= core_hf_files_n)
            return false;
        *name = core_hf_files[e].name;
        *child = INO_HF_FILE(st->gen, core_hf_files[e].slot);
        return true;
    case K_META:
        if (e >= st_meta(st)->n_kv)
            return false;
        *name = st->meta_names.names[e];
        *child = KV_BASE + st->kv_id[e];
        return true;
    case K_TENSORS:
        if (e >= st->n_tensors)
            return false;
        *name = st->tensor_names.names[e];
        *child = core_tensor_ino(e, TF_DIR);
        *mode = S_IFDIR;
        return true;
    default:
        if (e + 1 >= TF_COUNT)
            return false;
        *name = core_tensor_files[e + 1];
        *child = core_tensor_ino(n->idx, (enum tensor_file)(e + 1));
        return true;
    }
}

/* The offsets of meta/'s pending files start here (above any key's). */
#define PEND_OFF (1ull << 40)

/* One entry of a readdir (plus: a readdirplus, with the entry's attributes,
 * so that ls -l, find and du need no lookup of each name); its size, which
 * is past the room left when it does not fit. */
static size_t add_entry(fuse_req_t req, struct mount *fs, struct state *st, bool plus, char *buf,
                        size_t room, const char *name, fuse_ino_t child, mode_t mode, off_t next)
{
    if (!plus) {
        struct stat a = { .st_ino = child, .st_mode = mode };
        return fuse_add_direntry(req, buf, room, name, &a, next);
    }
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    /* "." and "..", or an entry without attributes (a key created and not
     * committed: no caching), go with ino 0: the kernel lists the name
     * and looks it up when asked */
    if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
        core_stat(fs, st, child, &e.attr) == 0) {
        e.ino = child;
        e.generation = 1;
        e.attr_timeout = ggfs_timeout(fs);
        e.entry_timeout = ggfs_timeout(fs);
    } else {
        e.attr.st_ino = child;
        e.attr.st_mode = mode;
    }
    return fuse_add_direntry_plus(req, buf, room, name, &e, next);
}

/* 0 for a directory of the tree; ENOENT for nothing, ENOTDIR for a file
 * (what opendir and readdir answer). */
static int dir_error(struct node n)
{
    if (n.kind == K_NONE)
        return ENOENT;
    return n.kind == K_ROOT || n.kind == K_META || n.kind == K_TENSORS || n.kind == K_HF ||
           (n.kind == K_TENSOR && n.tf == TF_DIR) ? 0 : ENOTDIR;
}

static void do_readdir_any(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                           size_t size, off_t off, bool plus)
{
    struct node n = core_classify(st, ino);
    int not_dir = dir_error(n);
    if (not_dir)
        return (void)fuse_reply_err(req, not_dir);
    if (size > 1u << 20)
        size = 1u << 20;
    char *buf = malloc(size);
    if (!buf)
        return (void)fuse_reply_err(req, ENOMEM);
    size_t used = 0;
    const char *name;
    fuse_ino_t child;
    mode_t mode;
    bool full = false;
    /* entry k is followed by offset k+1 */
    for (uint64_t k = (uint64_t)off; dir_entry(st, ino, &n, k, &name, &child, &mode); k++) {
        if (n.kind == K_TENSOR && k >= 2 && !core_tensor_has(st, n.idx, (enum tensor_file)(child % TENSOR_STRIDE)))
            continue;
        if (n.kind == K_META && k >= 2 && strlen(name) > NAME_MAX)
            continue;           /* in info only (do_lookup) */
        if (n.kind == K_ROOT && k >= 2 && !core_root_has(st, (unsigned)(k - 2)))
            continue;
        if (n.kind == K_HF && k >= 2 && !core_hf_has(st, core_hf_files[k - 2].slot))
            continue;
        size_t len = add_entry(req, fs, st, plus, buf + used, size - used, name, child, mode,
                               (off_t)(k + 1));
        if (len > size - used) {
            full = true;
            break;
        }
        used += len;
    }
    /* then meta/'s pending files: keys created and not closed yet, tools'
     * scratch files (doc/DETAILS.md "Editing metadata"), by id, entry id followed
     * by offset PEND_OFF + id + 1 (an id keeps its place whatever is
     * created or committed meanwhile) */
    char pname[NAME_MAX + 1];
    uint64_t id = (uint64_t)off >= PEND_OFF ? (uint64_t)off - PEND_OFF : 0;
    while (n.kind == K_META && !full && ggfs_pending_next(fs, id, &id, pname, sizeof pname)) {
        if (core_ntab_find(&st->meta_names, pname) < 0) {    /* committed meanwhile */
            struct stat a = { .st_ino = KV_BASE + id, .st_mode = S_IFREG };
            size_t len;
            if (plus) {
                struct fuse_entry_param e = { .attr = a };      /* ino 0: no caching */
                len = fuse_add_direntry_plus(req, buf + used, size - used, pname, &e,
                                             (off_t)(PEND_OFF + id + 1));
            } else {
                len = fuse_add_direntry(req, buf + used, size - used, pname, &a,
                                        (off_t)(PEND_OFF + id + 1));
            }
            if (len > size - used)
                break;
            used += len;
        }
        id++;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}
/* tensors/ and a tensor's folder list the same entries, with the same
 * inodes, in every version of the model (tensor names and data never
 * change): the kernel may keep what readdir said (FOPEN_CACHE_DIR), so a
 * second walk of the tree (du after ls -lR) asks for none of them again.
 * Where the kernel can open directories by itself (fs->no_opendir), the
 * first OPENDIR is answered ENOSYS: it never asks again and keeps every
 * listing, the root's and meta/'s too, which notify.c invalidates when
 * they change (a new version, a pending file of meta/ gone); otherwise
 * the root (its version inodes) and meta/ (keys come and go) are not
 * cached. */
static void do_opendir(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    if (fs->no_opendir)
        return (void)fuse_reply_err(req, ENOSYS);
    struct node n = core_classify(st, ino);
    int not_dir = dir_error(n);
    if (not_dir)
        return (void)fuse_reply_err(req, not_dir);
    if (n.kind == K_TENSORS || n.kind == K_TENSOR) {
        fi->cache_readdir = 1;
        fi->keep_cache = 1;
    }
    fuse_reply_open(req, fi);
}
READ_LOCKED(opendir, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi), ino, fi)

static void do_readdir(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                       size_t size, off_t off)
{
    do_readdir_any(req, fs, st, ino, size, off, false);
}
static void do_readdirplus(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                           size_t size, off_t off)
{
    do_readdir_any(req, fs, st, ino, size, off, true);
}
READ_LOCKED(readdir, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info *fi UNUSED), ino, size, off)
READ_LOCKED(readdirplus, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                          struct fuse_file_info *fi UNUSED), ino, size, off)

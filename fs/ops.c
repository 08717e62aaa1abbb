/*
 * fs/ops.c — the FUSE low-level handlers.  Every handler ends in exactly one
 * fuse_reply_*.  Handlers that only look (lookup, getattr, readdir, open,
 * xattrs, statfs) run with the state lock held for reading (READ_LOCKED
 * below); reads hold a reference to the version they read instead (the
 * handle's, or the current one's), never the lock, since their bytes may
 * wait on a server; those that may edit take the commit lock (see the lock
 * order in fs.h).
 */
#include "fs.h"
#include "digest.h"
#include "ops.h"
#include "commit.h"
#include "f32.h"
#include "log.h"
#include "nodes.h"
#include "read.h"
#include "state.h"
#include "underneath.h"
#include "follow.h"
#include "whandle.h"

#include "gguf/value.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <linux/fs.h>

#define XATTR_TYPE "user.gguf.type"

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

/* An open model.safetensors (or hf/model.safetensors): its version, and the reading pattern of its
 * f32 pieces, for prefetching (s NULL: none).  Counted, as a snapshot is:
 * a read holds a reference while it replies (a release may race it).
 * Listed, as a snapshot is, so that one whose release never comes (gguffs
 * ended by a signal while the file was open) is freed at the end. */
struct st_open {
    _Atomic unsigned refs;
    struct ggfs *fs;
    struct glist link;             /* in fs->st_opens, under pend_mu */
    struct state *v;
    struct f32_stream *s;
};

static void st_open_put(struct st_open *so)
{
    if (atomic_fetch_sub(&so->refs, 1) != 1)
        return;
    struct ggfs *fs = so->fs;
    pthread_mutex_lock(&fs->pend_mu);
    glist_del(&so->link);
    pthread_mutex_unlock(&fs->pend_mu);
    if (so->s)
        ggfs_stream_free(fs, so->s);
    ggfs_state_put(so->v);
    free(so);
}

/* A read-only open of a meta/ file of a writable mount gets a copy of the
 * committed text taken at open (see do_open), and so does an open of log.
 * Reads hold a reference while they reply, so a release racing a read (the
 * kernel sends it once the reply is copied) never frees under it. */
struct snap {
    struct ggfs *fs;
    _Atomic unsigned refs;
    struct glist link;             /* in fs->snaps, under pend_mu */
    size_t len;
    char data[];
};

static void snap_put(struct snap *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    struct ggfs *fs = s->fs;
    pthread_mutex_lock(&fs->pend_mu);
    glist_del(&s->link);
    pthread_mutex_unlock(&fs->pend_mu);
    free(s);
}

/* A snapshot of len bytes at data, listed in fs->snaps; NULL when out of
 * memory. */
static struct snap *snap_new(struct ggfs *fs, const char *data, size_t len)
{
    struct snap *snap = malloc(sizeof *snap + len);
    if (!snap)
        return NULL;
    atomic_init(&snap->refs, 1);
    snap->fs = fs;
    snap->len = len;
    if (len)              /* an empty text may have no buffer at all */
        memcpy(snap->data, data, len);
    /* listed, so that those whose release never comes are freed */
    pthread_mutex_lock(&fs->pend_mu);
    glist_add(&fs->snaps, &snap->link);
    pthread_mutex_unlock(&fs->pend_mu);
    return snap;
}

void ggfs_opens_free(struct ggfs *fs)
{
    while (!glist_empty(&fs->snaps)) {
        struct glist *l = fs->snaps.next;
        glist_del(l);
        free(GLIST_ENTRY(l, struct snap, link));
    }
    /* their streams and versions are on the lists of those, freed after */
    while (!glist_empty(&fs->st_opens)) {
        struct glist *l = fs->st_opens.next;
        glist_del(l);
        free(GLIST_ENTRY(l, struct st_open, link));
    }
}

/* The mount's readahead (-o readahead) is its bdi's read_ahead_kb.  The
 * kernel sets that to at most what it asked for in INIT (the default, 128
 * KiB) when it handles the reply to INIT, undoing a value written before:
 * so it is written by the first request after INIT that can come before
 * an open (lookup, getattr, ...).  An open reads it (a file's readahead is
 * fixed at open), so every open sees the value written. */
static void set_readahead(struct ggfs *fs)
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

/* Defines ggfs_op_NAME: the handler do_NAME(req, fs, st, ...) with the
 * state lock held for reading, so it sees one version from start to end. */
#define UNUSED __attribute__((unused))

#define READ_LOCKED(name, params, ...)                  \
    static void ggfs_op_##name params                   \
    {                                                   \
        struct ggfs *fs = req_fs(req);                  \
        set_readahead(fs);                              \
        pthread_rwlock_rdlock(&fs->lock);               \
        do_##name(req, fs, fs->st, __VA_ARGS__);        \
        pthread_rwlock_unlock(&fs->lock);               \
    }

static void ggfs_op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct ggfs *fs = userdata;
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

/* ---- names ----------------------------------------------------------------- */

static void reply_entry(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    int err = ggfs_stat(fs, st, ino, &e.attr);
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
static bool reply_pending(fuse_req_t req, struct ggfs *fs, struct state *st, const char *name)
{
    uint64_t id;
    size_t size;
    if (!ggfs_pending_size(fs, 0, name, &id, &size))
        return false;
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = KV_BASE + id;
    e.generation = 1;
    ggfs_stat_pending(st, e.ino, size, &e.attr);
    fuse_reply_entry(req, &e);
    return true;
}

static void do_lookup(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t parent,
                      const char *name)
{
    struct node p = ggfs_classify(st, parent);
    int64_t i;
    switch (p.kind) {
    case K_ROOT:
        for (unsigned e = 0; e < ggfs_root_n; e++)
            if (strcmp(name, ggfs_root[e].name) == 0 && ggfs_root_has(st, e))
                return reply_entry(req, fs, st, ggfs_root_ino(st, e));
        break;
    case K_HF:
        for (unsigned e = 0; e < ggfs_hf_files_n; e++)
            if (strcmp(name, ggfs_hf_files[e].name) == 0 &&
                ggfs_hf_has(st, ggfs_hf_files[e].slot))
                return reply_entry(req, fs, st, INO_HF_FILE(st->gen, ggfs_hf_files[e].slot));
        break;
    case K_META:
        /* a key longer than a file name may be (statfs says 255, as most
         * file systems a copy would go to) is in info only, as README
         * says: not listed (readdir), not found */
        if (strlen(name) > NAME_MAX)
            return (void)fuse_reply_err(req, ENAMETOOLONG);
        if ((i = ntab_find(&st->meta_names, name)) >= 0)
            return reply_entry(req, fs, st, KV_BASE + st->kv_id[i]);
        if (reply_pending(req, fs, st, name))
            return;
        break;
    case K_TENSORS:
        if ((i = ntab_find(&st->tensor_names, name)) >= 0)
            return reply_entry(req, fs, st, ggfs_tensor_ino((uint64_t)i, TF_DIR));
        break;
    case K_TENSOR:
        if (p.tf != TF_DIR)
            return (void)fuse_reply_err(req, ENOTDIR);
        for (int f = TF_RAW; f < TF_COUNT; f++)
            if (strcmp(name, ggfs_tensor_files[f]) == 0 &&
                ggfs_tensor_has(st, p.idx, (enum tensor_file)f))
                return reply_entry(req, fs, st, ggfs_tensor_ino(p.idx, (enum tensor_file)f));
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
static void ggfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct ggfs *fs = req_fs(req);
    set_readahead(fs);
    pthread_rwlock_rdlock(&fs->lock);
    do_lookup(req, fs, fs->st, parent, name);
    pthread_rwlock_unlock(&fs->lock);
}

static void do_getattr(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    struct stat out;
    int err = ggfs_stat(fs, st, ino, &out);
    size_t psize;
    if (!err && fi && IS_WHANDLE(fi) && S_ISREG(out.st_mode)) {
        /* fstat of a meta/ file open for writing: the text it holds
         * (lseek(SEEK_END) asks this), not the committed value */
        out.st_size = (off_t)ggfs_edit_size(fi);
        return (void)fuse_reply_attr(req, &out, 0);
    }
    if (err == ENOENT && ino >= KV_BASE && ino < VERSION_BASE &&
        ggfs_pending_size(fs, ino - KV_BASE, NULL, NULL, &psize)) {
        ggfs_stat_pending(st, ino, psize, &out);
        return (void)fuse_reply_attr(req, &out, 0);
    }
    if (err)
        return (void)fuse_reply_err(req, err);
    bool writing = ino >= KV_BASE && ino < VERSION_BASE && ggfs_edit_is_open(fs, ino - KV_BASE);
    fuse_reply_attr(req, &out, writing || ino == INO_LOG ? 0 : ggfs_timeout(fs));
}
static void ggfs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct ggfs *fs = req_fs(req);
    set_readahead(fs);
    pthread_rwlock_rdlock(&fs->lock);
    do_getattr(req, fs, fs->st, ino, fi);
    pthread_rwlock_unlock(&fs->lock);
}

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
        if (e >= ggfs_root_n)
            return false;
        *name = ggfs_root[e].name;
        *child = ggfs_root_ino(st, (unsigned)e);
        if (ggfs_root[e].kind == K_META || ggfs_root[e].kind == K_TENSORS ||
            ggfs_root[e].kind == K_HF)
            *mode = S_IFDIR;
        return true;
    case K_HF:
        if (e >= ggfs_hf_files_n)
            return false;
        *name = ggfs_hf_files[e].name;
        *child = INO_HF_FILE(st->gen, ggfs_hf_files[e].slot);
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
        *child = ggfs_tensor_ino(e, TF_DIR);
        *mode = S_IFDIR;
        return true;
    default:
        if (e + 1 >= TF_COUNT)
            return false;
        *name = ggfs_tensor_files[e + 1];
        *child = ggfs_tensor_ino(n->idx, (enum tensor_file)(e + 1));
        return true;
    }
}

/* The offsets of meta/'s pending files start here (above any key's). */
#define PEND_OFF (1ull << 40)

/* One entry of a readdir (plus: a readdirplus, with the entry's attributes,
 * so that ls -l, find and du need no lookup of each name); its size, which
 * is past the room left when it does not fit. */
static size_t add_entry(fuse_req_t req, struct ggfs *fs, struct state *st, bool plus, char *buf,
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
        ggfs_stat(fs, st, child, &e.attr) == 0) {
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

static void do_readdir_any(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                           size_t size, off_t off, bool plus)
{
    struct node n = ggfs_classify(st, ino);
    if (n.kind == K_NONE)
        return (void)fuse_reply_err(req, ENOENT);
    if (!(n.kind == K_ROOT || n.kind == K_META || n.kind == K_TENSORS || n.kind == K_HF ||
          (n.kind == K_TENSOR && n.tf == TF_DIR)))
        return (void)fuse_reply_err(req, ENOTDIR);
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
        if (n.kind == K_TENSOR && k >= 2 && !ggfs_tensor_has(st, n.idx, (enum tensor_file)(child % TENSOR_STRIDE)))
            continue;
        if (n.kind == K_META && k >= 2 && strlen(name) > NAME_MAX)
            continue;           /* in info only (do_lookup) */
        if (n.kind == K_ROOT && k >= 2 && !ggfs_root_has(st, (unsigned)(k - 2)))
            continue;
        if (n.kind == K_HF && k >= 2 && !ggfs_hf_has(st, ggfs_hf_files[k - 2].slot))
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
        if (ntab_find(&st->meta_names, pname) < 0) {    /* committed meanwhile */
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
static void do_opendir(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                       struct fuse_file_info *fi)
{
    if (fs->no_opendir)
        return (void)fuse_reply_err(req, ENOSYS);
    struct node n = ggfs_classify(st, ino);
    if (n.kind == K_NONE)
        return (void)fuse_reply_err(req, ENOENT);
    if (!(n.kind == K_ROOT || n.kind == K_META || n.kind == K_TENSORS || n.kind == K_HF ||
          (n.kind == K_TENSOR && n.tf == TF_DIR)))
        return (void)fuse_reply_err(req, ENOTDIR);
    if (n.kind == K_TENSORS || n.kind == K_TENSOR) {
        fi->cache_readdir = 1;
        fi->keep_cache = 1;
    }
    fuse_reply_open(req, fi);
}
READ_LOCKED(opendir, (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi), ino, fi)

static void do_readdir(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                       size_t size, off_t off)
{
    do_readdir_any(req, fs, st, ino, size, off, false);
}
static void do_readdirplus(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                           size_t size, off_t off)
{
    do_readdir_any(req, fs, st, ino, size, off, true);
}
READ_LOCKED(readdir, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info *fi UNUSED), ino, size, off)
READ_LOCKED(readdirplus, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                          struct fuse_file_info *fi UNUSED), ino, size, off)

/* ---- opening and reading ---------------------------------------------------- */

static void do_open(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                    struct fuse_file_info *fi)
{
    struct node n = ggfs_classify(st, ino);
    if (n.kind == K_NONE)
        return (void)fuse_reply_err(req, ENOENT);
    if (n.kind != K_INFO && n.kind != K_KV && n.kind != K_STATS && n.kind != K_MODEL &&
        n.kind != K_INFO_JSON && n.kind != K_SAFETENSORS && n.kind != K_HASHES &&
        n.kind != K_LOG && n.kind != K_HF_FILE && !(n.kind == K_TENSOR && n.tf != TF_DIR))
        return (void)fuse_reply_err(req, EISDIR);
    if (n.kind == K_STATS) {
        fi->direct_io = 1;    /* changes all the time: never cache it */
    } else if (n.kind == K_LOG) {
        /* the lines as they are at open, read past the page cache (each
         * open its own copy; a message logged meanwhile is the next
         * open's) */
        size_t len;
        char *text = ggfs_log_copy(&len);
        struct snap *snap = text ? snap_new(fs, text, len) : NULL;
        free(text);
        if (!snap)
            return (void)fuse_reply_err(req, ENOMEM);
        fi->fh = (uint64_t)(uintptr_t)snap | FH_SNAPSHOT;
        fi->direct_io = 1;
    } else if (n.kind == K_INFO || n.kind == K_MODEL || n.kind == K_INFO_JSON ||
               n.kind == K_SAFETENSORS || n.kind == K_HF_FILE) {
        /* The handle reads the version it was opened on (see fs.h). */
        struct state *v = ggfs_version(st, n.gen);
        if (!v)
            return (void)fuse_reply_err(req, ESTALE);
        if (n.kind == K_HF_FILE && !ggfs_hf_has(v, (enum version_slot)n.idx)) {
            ggfs_state_put(v);
            return (void)fuse_reply_err(req, ENOENT);
        }
        fi->fh = (uint64_t)(uintptr_t)v | FH_STATE;
        if (IS_SAFETENSORS(ino)) {
            struct st_open *so = malloc(sizeof *so);
            if (!so) {
                ggfs_state_put(v);
                return (void)fuse_reply_err(req, ENOMEM);
            }
            atomic_init(&so->refs, 1);
            so->fs = fs;
            so->v = v;
            so->s = ggfs_stream_new(fs);      /* NULL: no prefetching */
            pthread_mutex_lock(&fs->pend_mu);
            glist_add(&fs->st_opens, &so->link);
            pthread_mutex_unlock(&fs->pend_mu);
            fi->fh = (uint64_t)(uintptr_t)so | FH_STATE;
        }
        /* info of a model changed underneath says so first (a line that
         * its size as the kernel cached it does not count): read past the
         * page cache */
        if (n.kind == K_INFO && ggfs_under_check(fs, st))
            fi->direct_io = 1;
        else
            fi->keep_cache = 1;
    } else if (n.kind == K_KV && (!fs->read_only || ggfs_follows(fs))) {
        /* A writer of the same file changes the kernel's idea of its size
         * (O_TRUNC, ftruncate) before anything is committed, so the page
         * cache could hand a reader zeros or nothing.  Readers get a copy
         * of the committed text taken at open, read past the page cache:
         * a value is always one committed version, never torn, and a
         * handle keeps the version it was opened on.  So on a read-only
         * mount that follows another gguffs' edits (follow.h) too. */
        const struct text *t = ggfs_kv_text(st, n.idx);
        struct snap *snap = t ? snap_new(fs, t->data, t->len) : NULL;
        if (!snap)
            return (void)fuse_reply_err(req, ENOMEM);
        fi->fh = (uint64_t)(uintptr_t)snap | FH_SNAPSHOT;
        fi->direct_io = 1;
    } else {
        fi->keep_cache = 1;
        /* its reading pattern, for prefetching; without one (out of
         * memory) reads work, with no prefetch */
        struct f32_stream *s = n.tf == TF_F32 || n.tf == TF_F32_NPY ? ggfs_stream_new(fs) : NULL;
        if (s)
            fi->fh = (uint64_t)(uintptr_t)s | FH_F32;
    }
    fuse_reply_open(req, fi);
}

static int open_for_edit(struct ggfs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct node n = ggfs_classify(fs->st, ino);
    switch (n.kind) {
    case K_NONE:              /* perhaps a tool's scratch file (whandle.c) */
        return ino >= KV_BASE && ino < VERSION_BASE ?
               ggfs_edit_reopen(fs, ino - KV_BASE, fi->flags, fi) : ENOENT;
    case K_KV:
        return ggfs_edit_open(fs, n.idx, fi->flags, fi);
    case K_ROOT: case K_META: case K_TENSORS: case K_HF:
        return EISDIR;
    default:
        return n.kind == K_TENSOR && n.tf == TF_DIR ? EISDIR : EACCES;
    }
}

static void ggfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct ggfs *fs = req_fs(req);
    set_readahead(fs);
    bool rdonly = (fi->flags & O_ACCMODE) == O_RDONLY && !(fi->flags & O_TRUNC);
    if (rdonly) {
        pthread_rwlock_rdlock(&fs->lock);
        bool known = ggfs_classify(fs->st, ino).kind != K_NONE;
        if (known)
            do_open(req, fs, fs->st, ino, fi);
        pthread_rwlock_unlock(&fs->lock);
        if (known)
            return;
        /* else perhaps a tool's scratch file */
    }
    pthread_mutex_lock(&fs->commit_mu);
    if (rdonly && ggfs_classify(fs->st, ino).kind != K_NONE) {
        /* committed meanwhile: an ordinary read-only open */
        pthread_mutex_unlock(&fs->commit_mu);
        return ggfs_op_open(req, ino, fi);
    }
    int e = open_for_edit(fs, ino, fi);
    pthread_mutex_unlock(&fs->commit_mu);
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_open(req, fi);
}

void ggfs_count_read(struct ggfs *fs, enum read_kind k, size_t size)
{
    atomic_fetch_add_explicit(&fs->reads[k].n, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&fs->reads[k].bytes, size, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&fs->reads[k].max, memory_order_relaxed);
    while (size > m && !atomic_compare_exchange_weak(&fs->reads[k].max, &m, size))
        ;
}

static void do_read(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                    size_t size, off_t off, struct f32_stream *s)
{
    struct node n = ggfs_classify(st, ino);
    char buf[STATS_TEXT_MAX];
    switch (n.kind) {
    case K_KV: {
        const struct text *t = ggfs_kv_text(st, n.idx);
        if (!t)
            return (void)fuse_reply_err(req, ENOMEM);
        return ggfs_reply_slice(req, t->data, t->len, size, off);
    }
    case K_STATS:
        ggfs_under_check(fs, st);       /* counts what happened until now */
        return ggfs_reply_slice(req, buf, ggfs_stats_text(fs, buf, sizeof buf), size, off);
    case K_LOG: {                       /* (an open gives a snapshot: not here) */
        size_t len;
        char *text = ggfs_log_copy(&len);
        if (!text)
            return (void)fuse_reply_err(req, ENOMEM);
        ggfs_reply_slice(req, text, len, size, off);
        free(text);
        return;
    }
    case K_HASHES: {
        ggfs_count_read(fs, RK_HASHES, size);
        int err = 0;
        const struct text *h = ggfs_hashes(st, &err);
        if (!h)
            return (void)fuse_reply_err(req, err);
        return ggfs_reply_slice(req, h->data, h->len, size, off);
    }
    case K_TENSOR:
        break;
    case K_NONE:
        return (void)fuse_reply_err(req, ENOENT);
    default:
        return (void)fuse_reply_err(req, EISDIR);
    }
    switch (n.tf) {
    case TF_RAW:
        ggfs_count_read(fs, RK_RAW, size);
        return ggfs_read_raw(req, st, n.idx, size, off);
    case TF_F32:
        ggfs_count_read(fs, RK_F32, size);
        return ggfs_read_f32(req, st, n.idx, size, off, s);
    case TF_RAW_NPY:
        ggfs_count_read(fs, RK_RAW_NPY, size);
        return ggfs_read_npy(req, st, n.idx, n.tf, size, off, NULL);
    case TF_F32_NPY:
        ggfs_count_read(fs, RK_F32_NPY, size);
        return ggfs_read_npy(req, st, n.idx, n.tf, size, off, s);
    case TF_STATS: case TF_XXH64: case TF_SHA256: {
        static const enum read_kind rk[] = { RK_TENSOR_STATS, RK_XXH64, RK_SHA256 };
        ggfs_count_read(fs, rk[n.tf - TF_STATS], size);
        int err = 0;
        const struct text *t = ggfs_tensor_digest(st, n.idx, n.tf, &err);
        if (!t)
            return (void)fuse_reply_err(req, err);
        return ggfs_reply_slice(req, t->data, t->len, size, off);
    }
    case TF_TYPE: case TF_SHAPE:
        return ggfs_reply_slice(req, buf, ggfs_tensor_text(st, n.idx, n.tf, buf, sizeof buf),
                                size, off);
    default:
        return (void)fuse_reply_err(req, EISDIR);
    }
}

/* info: the line about a change underneath (underneath.c), then the text */
static void reply_info(fuse_req_t req, struct ggfs *fs, const struct state *v, size_t size,
                       off_t off)
{
    char line[1024];
    size_t ll = ggfs_under_line(fs, line, sizeof line);
    if (!ll)
        return ggfs_reply_slice(req, v->info.data, v->info.len, size, off);
    uint64_t a = (uint64_t)off, end = a + size, total = ll + v->info.len;
    if (end > total)
        end = total;
    if (a >= end)
        return (void)fuse_reply_buf(req, NULL, 0);
    struct iovec iov[2];
    int n = 0;
    if (a < ll) {
        uint64_t to = end < ll ? end : ll;
        iov[n++] = (struct iovec){ line + a, (size_t)(to - a) };
        a = to;
    }
    if (a < end)
        iov[n++] = (struct iovec){ v->info.data + (a - ll), (size_t)(end - a) };
    fuse_reply_iov(req, iov, n);
}

static void ggfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         struct fuse_file_info *fi)
{
    struct ggfs *fs = req_fs(req);
    if (off < 0)
        return (void)fuse_reply_err(req, EINVAL);
    if (IS_STATE(fi)) {                   /* a version's file: its version */
        /* held across the reply, like a snapshot (a release may race it) */
        struct st_open *so = IS_SAFETENSORS(ino) ? FH_ST_OPEN(fi) : NULL;
        if (so)
            atomic_fetch_add(&so->refs, 1);
        struct state *v = ggfs_state_ref(so ? so->v : FH_STATE_OF(fi));
        uint64_t slot = (ino - VERSION_BASE) % VERSION_STRIDE;
        if (slot == VS_MODEL) {
            ggfs_count_read(fs, RK_MODEL, size);
            ggfs_read_model(req, v, size, off);
        } else if (slot == VS_SAFETENSORS) {
            ggfs_count_read(fs, RK_SAFETENSORS, size);
            /* f32 pieces are filled from v, whose reference this read
             * holds (no lock: a fill may wait on a remote server) */
            ggfs_read_safetensors(req, v, size, off, so->s);
        } else if (slot == VS_HF_SAFETENSORS) {
            ggfs_count_read(fs, RK_HF, size);
            ggfs_read_hf_safetensors(req, v, size, off, so->s);
        } else if (slot == VS_HF_CONFIG || slot == VS_HF_GENERATION ||
                   slot == VS_HF_TOKENIZER || slot == VS_HF_TOKENIZER_CONFIG) {
            ggfs_count_read(fs, RK_HF, size);
            const char *d = NULL;
            size_t len = 0;
            int e = ggfs_hf_text(v, (enum version_slot)slot, &d, &len);
            if (e)
                fuse_reply_err(req, e);
            else
                ggfs_reply_slice(req, d, len, size, off);
        } else if (slot == VS_INFO_JSON) {
            ggfs_count_read(fs, RK_INFO_JSON, size);
            const struct text *j;
            int je = ggfs_info_json(v, &j);
            if (je)
                fuse_reply_err(req, je);
            else
                ggfs_reply_slice(req, j->data, j->len, size, off);
        } else {
            reply_info(req, fs, v, size, off);
        }
        ggfs_state_put(v);
        if (so)
            st_open_put(so);
    } else if (IS_SNAPSHOT(fi)) {         /* meta/ open for reading */
        struct snap *sn = SNAPSHOT(fi);
        atomic_fetch_add(&sn->refs, 1);
        ggfs_reply_slice(req, sn->data, sn->len, size, off);
        snap_put(sn);
    } else if (IS_WHANDLE(fi)) {          /* a meta/ file open for writing */
        ggfs_edit_read(fi, req, size, off);
    } else {
        /* raw, f32 and their .npy views, a tensor's stats and digests,
         * hashes, the stats file, meta/ of a read-only
         * mount: the current version, held by a reference, not the state
         * lock.  A fill, fetch or splice may wait (on a slow server); the
         * lock held meanwhile would make a commit's swap wait, and every
         * handler after it (the lock prefers writers): see fs.h. */
        struct state *st = ggfs_state_current(fs);
        do_read(req, fs, st, ino, size, off, IS_F32(fi) ? FH_STREAM(fi) : NULL);
        ggfs_state_put(st);
    }
}

/* ---- attributes, xattrs, statfs ---------------------------------------------- */

/* ino is a pending file of meta/ (a created key not closed yet, a scratch
 * file): listed by readdir, so ls -l asks for its xattrs (none). */
static bool is_pending(struct ggfs *fs, fuse_ino_t ino)
{
    return ino >= KV_BASE && ino < VERSION_BASE && ggfs_pending_exists(fs, ino - KV_BASE, NULL);
}

static void do_getxattr(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                        const char *name, size_t size)
{
    struct node n = ggfs_classify(st, ino);
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

static void do_listxattr(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino,
                         size_t size)
{
    struct node n = ggfs_classify(st, ino);
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

static void do_statfs(fuse_req_t req, struct ggfs *fs, struct state *st, fuse_ino_t ino)
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

static void ggfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
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

static void ggfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
                           mode_t mode, struct fuse_file_info *fi)
{
    (void)mode;
    struct ggfs *fs = req_fs(req);
    int e = not_meta(parent);
    if (e)
        return (void)fuse_reply_err(req, e);
    pthread_mutex_lock(&fs->commit_mu);
    ggfs_edit_create(req, name, fi);
    pthread_mutex_unlock(&fs->commit_mu);
}

static void ggfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
                          size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    int e = IS_WHANDLE(fi) ? ggfs_edit_write(fi, buf, size, off) : EBADF;
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_write(req, size);
}

static void ggfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct ggfs *fs = req_fs(req);
    int e = 0;
    if (IS_WHANDLE(fi)) {
        pthread_mutex_lock(&fs->commit_mu);
        e = ggfs_edit_flush(fs, fi, fuse_req_ctx(req)->pid);
        pthread_mutex_unlock(&fs->commit_mu);
    }
    fuse_reply_err(req, e);
}

static void ggfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct ggfs *fs = req_fs(req);
    if (IS_SNAPSHOT(fi)) {
        snap_put(SNAPSHOT(fi));
    } else if (IS_STATE(fi) && IS_SAFETENSORS(ino)) {
        st_open_put(FH_ST_OPEN(fi));
    } else if (IS_STATE(fi)) {
        ggfs_state_put(FH_STATE_OF(fi));
    } else if (IS_F32(fi)) {
        ggfs_stream_free(fs, FH_STREAM(fi));
    } else if (IS_WHANDLE(fi)) {
        pthread_mutex_lock(&fs->commit_mu);
        ggfs_edit_release(fs, fi);
        pthread_mutex_unlock(&fs->commit_mu);
    }
    fuse_reply_err(req, 0);
}

static void ggfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct ggfs *fs = req_fs(req);
    int e = not_meta(parent);
    if (!e) {
        pthread_mutex_lock(&fs->commit_mu);
        e = ggfs_edit_unlink(fs, name);
        pthread_mutex_unlock(&fs->commit_mu);
    }
    fuse_reply_err(req, e);
}

static void ggfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                           fuse_ino_t newparent, const char *newname, unsigned int flags)
{
    struct ggfs *fs = req_fs(req);
    int e = not_meta(parent);
    if (!e && newparent != parent)
        e = EXDEV;
    else if (!e && (flags & ~RENAME_NOREPLACE))
        e = EINVAL;
    if (!e) {
        pthread_mutex_lock(&fs->commit_mu);
        if ((flags & RENAME_NOREPLACE) && ntab_find(&fs->st->meta_names, newname) >= 0)
            e = EEXIST;
        else
            e = ggfs_edit_rename(fs, name, newname);
        pthread_mutex_unlock(&fs->commit_mu);
    }
    fuse_reply_err(req, e);
}

static void ggfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                             const char *value, size_t size, int flags)
{
    (void)flags;
    struct ggfs *fs = req_fs(req);
    pthread_mutex_lock(&fs->commit_mu);
    struct node n = ggfs_classify(fs->st, ino);
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

static void ggfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                            int to_set, struct fuse_file_info *fi)
{
    struct ggfs *fs = req_fs(req);
    pthread_mutex_lock(&fs->commit_mu);
    struct node n = ggfs_classify(fs->st, ino);
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
            ggfs_stat_pending(fs->st, ino, psize, &out);
        else
            e = ENOENT;
    } else if (!e) {
        e = ggfs_stat(fs, fs->st, ino, &out);
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

/*
 * fs/ops_open.c — the FUSE handlers that open, read and release files, and
 * what an open file holds: a snapshot of a meta/ value or of the log, the
 * version an open info, info.json, model.gguf or hf/ file reads, an open
 * model.safetensors, an f32 file's stream.  Reads hold a reference to the
 * version they read (the handle's, or the current one's), never the state
 * lock, since their bytes may wait on a server.
 */
#include "fs.h"
#include "ops.h"
#include "ops_impl.h"
#include "core/digests.h"
#include "core/f32.h"
#include "log.h"
#include "core/nodes.h"
#include "read.h"
#include "core/state.h"
#include "core/underneath.h"
#include "core/follow.h"
#include "whandle.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* An open model.safetensors (or hf/model.safetensors): its version, and the reading pattern of its
 * f32 pieces, for prefetching (s NULL: none).  Counted, as a snapshot is:
 * a read holds a reference while it replies (a release may race it).
 * Listed, as a snapshot is, so that one whose release never comes (gguffs
 * ended by a signal while the file was open) is freed at the end. */
struct st_open {
    _Atomic unsigned refs;
    struct mount *fs;
    struct glist link;             /* in fs->st_opens, under pend_mu */
    struct state *v;
    struct f32_stream *s;
};

static void st_open_put(struct st_open *so)
{
    if (atomic_fetch_sub(&so->refs, 1) != 1)
        return;
    struct mount *fs = so->fs;
    pthread_mutex_lock(&fs->pend_mu);
    glist_del(&so->link);
    pthread_mutex_unlock(&fs->pend_mu);
    if (so->s)
        core_stream_free(fs, so->s);
    core_state_put(so->v);
    free(so);
}

/* A read-only open of a meta/ file of a writable mount gets a copy of the
 * committed text taken at open (see do_open), and so does an open of log.
 * Reads hold a reference while they reply, so a release racing a read (the
 * kernel sends it once the reply is copied) never frees under it. */
struct snap {
    struct mount *fs;
    _Atomic unsigned refs;
    struct glist link;             /* in fs->snaps, under pend_mu */
    size_t len;
    char data[];
};

static void snap_put(struct snap *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    struct mount *fs = s->fs;
    pthread_mutex_lock(&fs->pend_mu);
    glist_del(&s->link);
    pthread_mutex_unlock(&fs->pend_mu);
    free(s);
}

/* A snapshot of len bytes at data, listed in fs->snaps; NULL when out of
 * memory. */
static struct snap *snap_new(struct mount *fs, const char *data, size_t len)
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

void ggfs_opens_free(struct mount *fs)
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

/* ---- opening and reading ---------------------------------------------------- */

static void do_open(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                    struct fuse_file_info *fi)
{
    struct node n = core_classify(st, ino);
    if (n.kind == K_NONE)
        return (void)fuse_reply_err(req, ENOENT);
    if (n.kind != K_INFO && n.kind != K_KV && n.kind != K_STATS && n.kind != K_MODEL &&
        n.kind != K_INFO_JSON && n.kind != K_SAFETENSORS && n.kind != K_HASHES &&
        n.kind != K_LOG && n.kind != K_HF_FILE && !(n.kind == K_TENSOR && n.tf != TF_DIR))
        return (void)fuse_reply_err(req, EISDIR);
    if (n.kind == K_STATS) {
        /* the counters as they are at open, read past the page cache
         * (each open its own copy).  Made anew at every read, a handle's
         * second read (the one that finds the end) could start inside a
         * line of a longer text: "_hf 0", the tail of "read_max_hf 0",
         * after a counter had grown a digit (seen by test_walk). */
        char buf[STATS_TEXT_MAX];
        core_under_check(fs, st);       /* counts what happened until now */
        struct snap *snap = snap_new(fs, buf, core_stats_text(fs, buf, sizeof buf));
        if (!snap)
            return (void)fuse_reply_err(req, ENOMEM);
        fi->fh = (uint64_t)(uintptr_t)snap | FH_SNAPSHOT;
        fi->direct_io = 1;
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
        /* The handle reads the version it was opened on (see core/mount.h). */
        struct state *v = core_version(st, n.gen);
        if (!v)
            return (void)fuse_reply_err(req, ESTALE);
        if (n.kind == K_HF_FILE && !core_hf_has(v, (enum version_slot)n.idx)) {
            core_state_put(v);
            return (void)fuse_reply_err(req, ENOENT);
        }
        fi->fh = (uint64_t)(uintptr_t)v | FH_STATE;
        if (IS_SAFETENSORS(ino)) {
            struct st_open *so = malloc(sizeof *so);
            if (!so) {
                core_state_put(v);
                return (void)fuse_reply_err(req, ENOMEM);
            }
            atomic_init(&so->refs, 1);
            so->fs = fs;
            so->v = v;
            so->s = core_stream_new(fs);      /* NULL: no prefetching */
            pthread_mutex_lock(&fs->pend_mu);
            glist_add(&fs->st_opens, &so->link);
            pthread_mutex_unlock(&fs->pend_mu);
            fi->fh = (uint64_t)(uintptr_t)so | FH_STATE;
        }
        /* info of a model changed underneath says so first (a line that
         * its size as the kernel cached it does not count): read past the
         * page cache */
        if (n.kind == K_INFO && core_under_check(fs, st))
            fi->direct_io = 1;
        else
            fi->keep_cache = 1;
    } else if (n.kind == K_KV && (!fs->read_only || core_follows(fs))) {
        /* A writer of the same file changes the kernel's idea of its size
         * (O_TRUNC, ftruncate) before anything is committed, so the page
         * cache could hand a reader zeros or nothing.  Readers get a copy
         * of the committed text taken at open, read past the page cache:
         * a value is always one committed version, never torn, and a
         * handle keeps the version it was opened on.  So on a read-only
         * mount that follows another gguffs' edits (follow.h) too. */
        const struct text *t = core_kv_text(st, n.idx);
        struct snap *snap = t ? snap_new(fs, t->data, t->len) : NULL;
        if (!snap)
            return (void)fuse_reply_err(req, ENOMEM);
        fi->fh = (uint64_t)(uintptr_t)snap | FH_SNAPSHOT;
        fi->direct_io = 1;
    } else {
        fi->keep_cache = 1;
        /* its reading pattern, for prefetching; without one (out of
         * memory) reads work, with no prefetch */
        struct f32_stream *s = n.tf == TF_F32 || n.tf == TF_F32_NPY ? core_stream_new(fs) : NULL;
        if (s)
            fi->fh = (uint64_t)(uintptr_t)s | FH_F32;
    }
    fuse_reply_open(req, fi);
}

static int open_for_edit(struct mount *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct node n = core_classify(fs->st, ino);
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

void ggfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mount *fs = req_fs(req);
    ggfs_set_readahead(fs);
    bool rdonly = (fi->flags & O_ACCMODE) == O_RDONLY && !(fi->flags & O_TRUNC);
    if (rdonly) {
        pthread_rwlock_rdlock(&fs->lock);
        bool known = core_classify(fs->st, ino).kind != K_NONE;
        if (known)
            do_open(req, fs, fs->st, ino, fi);
        pthread_rwlock_unlock(&fs->lock);
        if (known)
            return;
        /* else perhaps a tool's scratch file */
    }
    pthread_mutex_lock(&fs->commit_mu);
    if (rdonly && core_classify(fs->st, ino).kind != K_NONE) {
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

void ggfs_count_read(struct mount *fs, enum read_kind k, size_t size)
{
    atomic_fetch_add_explicit(&fs->reads[k].n, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&fs->reads[k].bytes, size, memory_order_relaxed);
    uint64_t m = atomic_load_explicit(&fs->reads[k].max, memory_order_relaxed);
    while (size > m && !atomic_compare_exchange_weak(&fs->reads[k].max, &m, size))
        ;
}

static void do_read(fuse_req_t req, struct mount *fs, struct state *st, fuse_ino_t ino,
                    size_t size, off_t off, struct f32_stream *s)
{
    struct node n = core_classify(st, ino);
    char buf[STATS_TEXT_MAX];
    switch (n.kind) {
    case K_KV: {
        const struct text *t = core_kv_text(st, n.idx);
        if (!t)
            return (void)fuse_reply_err(req, ENOMEM);
        return ggfs_reply_slice(req, t->data, t->len, size, off);
    }
    case K_STATS:
        core_under_check(fs, st);       /* counts what happened until now */
        return ggfs_reply_slice(req, buf, core_stats_text(fs, buf, sizeof buf), size, off);
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
        const struct text *h = core_hashes(st, &err);
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
        const struct text *t = core_tensor_digest(st, n.idx, n.tf, &err);
        if (!t)
            return (void)fuse_reply_err(req, err);
        return ggfs_reply_slice(req, t->data, t->len, size, off);
    }
    case TF_TYPE: case TF_SHAPE:
        return ggfs_reply_slice(req, buf, core_tensor_text(st, n.idx, n.tf, buf, sizeof buf),
                                size, off);
    default:
        return (void)fuse_reply_err(req, EISDIR);
    }
}

/* info: the line about a change underneath (underneath.c), then the text */
static void reply_info(fuse_req_t req, struct mount *fs, const struct state *v, size_t size,
                       off_t off)
{
    char line[1024];
    size_t ll = core_under_line(fs, line, sizeof line);
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

void ggfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         struct fuse_file_info *fi)
{
    struct mount *fs = req_fs(req);
    if (off < 0)
        return (void)fuse_reply_err(req, EINVAL);
    if (IS_STATE(fi)) {                   /* a version's file: its version */
        /* held across the reply, like a snapshot (a release may race it) */
        struct st_open *so = IS_SAFETENSORS(ino) ? FH_ST_OPEN(fi) : NULL;
        if (so)
            atomic_fetch_add(&so->refs, 1);
        struct state *v = core_state_ref(so ? so->v : FH_STATE_OF(fi));
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
            int e = core_hf_text(v, (enum version_slot)slot, &d, &len);
            if (e)
                fuse_reply_err(req, e);
            else
                ggfs_reply_slice(req, d, len, size, off);
        } else if (slot == VS_INFO_JSON) {
            ggfs_count_read(fs, RK_INFO_JSON, size);
            const struct text *j;
            int je = core_info_json(v, &j);
            if (je)
                fuse_reply_err(req, je);
            else
                ggfs_reply_slice(req, j->data, j->len, size, off);
        } else {
            reply_info(req, fs, v, size, off);
        }
        core_state_put(v);
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
         * handler after it (the lock prefers writers): see core/mount.h. */
        struct state *st = core_state_current(fs);
        do_read(req, fs, st, ino, size, off, IS_F32(fi) ? FH_STREAM(fi) : NULL);
        core_state_put(st);
    }
}

void ggfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mount *fs = req_fs(req);
    if (IS_SNAPSHOT(fi)) {
        snap_put(SNAPSHOT(fi));
    } else if (IS_STATE(fi) && IS_SAFETENSORS(ino)) {
        st_open_put(FH_ST_OPEN(fi));
    } else if (IS_STATE(fi)) {
        core_state_put(FH_STATE_OF(fi));
    } else if (IS_F32(fi)) {
        core_stream_free(fs, FH_STREAM(fi));
    } else if (IS_WHANDLE(fi)) {
        pthread_mutex_lock(&fs->commit_mu);
        ggfs_edit_release(fs, fi);
        pthread_mutex_unlock(&fs->commit_mu);
    }
    fuse_reply_err(req, 0);
}

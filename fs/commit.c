/*
 * fs/commit.c — applying an edit of meta/ to MODEL.gguf: the change turned
 * into a new header (gguf/kvedit.h), the commit (gguf/commit.h: the one
 * writer of the file), a new state swapped in, and the kernel told what
 * changed.
 *
 * Every function here runs with commit_mu held: nobody else can swap the
 * state meanwhile, so fs->st is stable without the state lock; the swap
 * itself takes the lock for writing, which waits for the handlers that
 * only look (lookup, readdir, ...: in memory, quick).  Reads hold a
 * reference to their version instead of the lock, so the swap never waits
 * for a read's fetch or fill (a slow server), and the old version lives
 * until its last read drops it.  Handlers are never blocked by a commit in
 * progress (a rewrite of a big model can take a while), only, briefly, by
 * the swap.
 */
#include "fs.h"
#include "commit.h"
#include "follow.h"
#include "core/model.h"
#include "nodes.h"
#include "notify.h"
#include "core/overlay.h"
#include "state.h"
#include "underneath.h"
#include "whandle.h"

#include "gguf/commit.h"
#include "gguf/kvedit.h"
#include "gguf/pad.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

int ggfs_edit_refused(struct ggfs *fs, const char *fname, int err, const char *why)
{
    fuse_log(FUSE_LOG_ERR, "gguffs: %s: meta/%s: edit refused (%s): %s\n", fs->model_path,
             fname, strerror(err), why);
    return err;
}

/* Logs why an edit of meta/NAME was refused, and gives its errno. */
static int refused(struct ggfs *fs, const char *fname, enum gguf_err e, const struct gguf_diag *d)
{
    char line[1024];
    char name[300];
    snprintf(name, sizeof name, "meta/%s", fname);
    gguf_diag_format(d, name, line, sizeof line);
    fuse_log(FUSE_LOG_ERR, "gguffs: %s: edit refused (%s): %s\n", fs->model_path,
             strerror(gguf_err_errno(e)), line);
    return gguf_err_errno(e);
}

/* errno of a failed access(2) of something gguffs must write */
static int access_errno(int e)
{
    return e == EROFS ? EROFS : EACCES;
}

int ggfs_write_check(struct ggfs *fs, const char **why)
{
    *why = "";
    if (fs->read_only) {
        *why = "mounted read-only (-o ro)";
        return EROFS;
    }
    if (fs->write_err) {
        *why = fs->write_err == EROFS ? "the model's file system was read-only at mount "
                                        "(mount again to edit)"
                                      : "gguffs could not write the model or its folder "
                                        "at mount (mount again to edit)";
        return fs->write_err;
    }
    /* a model changed or replaced underneath by another program: an edit
     * would write this version's header over another file (underneath.c).
     * EIO: the file gguffs mounted is no longer what it shows. */
    if (!fs->overlay && !fs->remote && ggfs_under_check(fs, fs->st)) {
        *why = ggfs_under_why(fs);
        atomic_fetch_add(&fs->under_refused, 1);
        return EIO;
    }
    /* one writer per overlay: its lock, if the file exists now */
    if (fs->overlay) {
        int e = core_overlay_lock(fs->overlay, &fs->lock_fd);
        if (e == EAGAIN) {
            *why = "another gguffs writes the overlay";
            return EBUSY;
        }
    }
    /* the file written: the model (in place), or the overlay; the folder
     * that holds it takes the journal, a rewrite's new file, the rename */
    const char *file = fs->overlay ? fs->overlay : fs->model_real;
    const char *slash = strrchr(file, '/');
    char dir[4096];
    if (!slash || (size_t)(slash - file) >= sizeof dir)
        return 0;
    size_t dl = slash == file ? 1 : (size_t)(slash - file);
    memcpy(dir, file, dl);
    dir[dl] = '\0';
    struct statvfs sv;
    if (statvfs(dir, &sv) == 0 && (sv.f_flag & ST_RDONLY)) {
        *why = "the model's file system is read-only";
        return EROFS;
    }
    if (!fs->overlay && faccessat(AT_FDCWD, file, W_OK, 0) != 0) {
        int e = access_errno(errno);
        *why = e == EROFS ? "the model's file system is read-only"
                          : "the model file is not writable by gguffs";
        return e;
    }
    if (faccessat(AT_FDCWD, dir, W_OK | X_OK, 0) != 0) {
        int e = access_errno(errno);
        *why = e == EROFS ? "the model's file system is read-only"
                          : fs->overlay ? "the overlay's folder is not writable by gguffs"
                                        : "the model's folder is not writable by gguffs (an edit "
                                          "writes its journal or new file there)";
        return e;
    }
    return 0;
}

/* Writes the new header into the model, re-opens it and swaps the new state
 * in.  Returns 0 or an errno; on error the model and the state are
 * unchanged. */
static int commit(struct ggfs *fs, const struct gguf_buf *hdr, const char *fname,
                  const char *why)
{
    struct state *old = fs->st;
    struct gguf_diag d;
    struct gguf_commit_info how;
    enum gguf_err ce;
    if (fs->overlay) {
        /* a remote model: the edited header goes to the overlay file */
        ce = core_overlay_commit(fs->overlay, fs->base, &fs->overlay_sum, &fs->lock_fd, hdr,
                                 &d);
        if (ce == GGUF_E_PERM) {
            fuse_log(FUSE_LOG_ERR, "gguffs: %s: meta/%s: %s refused (%s): %s\n",
                     fs->model_path, fname, why, strerror(EPERM), d.msg);
            return EPERM;      /* refused: nothing written */
        }
    } else if (ggfs_under_check(fs, old)) {
        /* changed underneath since the edit was opened: checked here,
         * under commit_mu, where no write of gguffs' own can race it */
        atomic_fetch_add(&fs->under_refused, 1);
        fuse_log(FUSE_LOG_ERR, "gguffs: %s: meta/%s: %s refused (%s): %s\n", fs->model_path,
                 fname, why, strerror(EIO), ggfs_under_why(fs));
        return EIO;
    } else {
        /* padded (gguffs.padding) to be written in place, or cloned where
         * the file system can: O(metadata) either way; elsewhere a header
         * that outgrows its room is copied once, with room to spare */
        int nfd = -1;
        ggfs_under_begin(fs);   /* our own writes: not a change underneath */
        ggfs_follow_begin(fs, old);     /* read-only mounts: a commit under way */
        ce = gguf_commit_edit_locked(fs->model_real, st_meta(old), old->model->shards[0].src,
                                     (const uint8_t *)hdr->data, hdr->len, &how,
                                     fs->lock_fd >= 0 ? &nfd : NULL, &d);
        if (nfd >= 0) {
            /* a rewrite: the new file (the model now) came locked */
            close(fs->lock_fd);
            fs->lock_fd = nfd;
        }
    }
    if (ce != GGUF_OK)
        fuse_log(FUSE_LOG_ERR, "gguffs: %s: meta/%s: %s failed (%s): %s\n", fs->model_path,
                 fname, why, strerror(EIO), d.msg);
    else if (!fs->overlay)
        atomic_fetch_add(how.in_place ? &fs->edits_in_place : how.cloned ? &fs->edits_cloned
                                                                          : &fs->edits_copied, 1);

    /* Re-open whatever the commit returned: the file on disk is the truth.
     * (Other shards of a split model are re-opened too: cheap, headers.
     * An overlay is re-read and its model built from memory.) */
    struct gguf_split *model;
    char note[512] = "";
    enum gguf_err oe = fs->overlay
        ? core_overlay_model(fs->overlay, fs->base, &fs->overlay_sum, &model, &d)
        : core_open_model(fs->model_real, fs->read_only, true, NULL, NULL, note, sizeof note,
                          &model, &d);
    if (note[0])
        fuse_log(FUSE_LOG_WARNING, "gguffs: %s\n", note);
    if (oe != GGUF_OK) {
        fuse_log(FUSE_LOG_ERR, "gguffs: %s: after %s: %s\n", fs->model_path, why, d.msg);
        if (!fs->overlay) {
            ggfs_under_end(fs);
            ggfs_follow_end(fs, NULL);
        }
        return EIO;
    }
    struct state *ns;
    int e = ggfs_state_new(fs, model, old->gen + 1, &ns);
    /* the files as this commit left them, the new state's included (its
     * sig was taken after the last write): the window closes; read-only
     * mounts get the record of the edit (follow.h) */
    if (!fs->overlay) {
        ggfs_under_end(fs);
        ggfs_follow_end(fs, e ? NULL : ns);
    }
    if (e) {
        gguf_split_close(model);
        return e;
    }
    ggfs_state_swap(fs, ns);
    return ce == GGUF_OK ? 0 : EIO;
}

void ggfs_state_swap(struct ggfs *fs, struct state *ns)
{
    struct state *old = fs->st;
    pthread_rwlock_wrlock(&fs->lock);
    fs->st = ns;
    pthread_rwlock_unlock(&fs->lock);
    if (!fs->overlay)
        ggfs_under_rewatch(fs);     /* a rewrite put a new file at the path */

    /* Tell the kernel (notify.c): info, info.json, model.gguf and
     * model.safetensors of the new version are new inodes, found by the next lookup while open ones keep theirs
     * (see fs.h); every name and file of the old meta/ may have changed
     * (values, sizes, which names exist).  The commit returns once the root
     * names are invalidated; flush also waits for meta/'s. */
    ggfs_notify_versions(fs);
    for (uint64_t i = 0; i < st_meta(old)->n_kv; i++) {
        ggfs_notify_meta_entry(fs, old->meta_names.names[i]);
        ggfs_notify_inode(fs, KV_BASE + old->kv_id[i]);
    }
    for (uint64_t i = 0; i < st_meta(ns)->n_kv; i++)
        ggfs_notify_meta_entry(fs, ns->meta_names.names[i]);
    ggfs_notify_inode(fs, INO_META);
    ggfs_notify_inode(fs, FUSE_ROOT_ID);     /* a listing the kernel keeps */
    ggfs_notify_wait_root(fs);
    /* The old version lives on while info or model.gguf of it is open.
     * Freeing it closes its descriptor; after a rewrite that is the last
     * reference to the old file, and the file system then frees its blocks
     * (a second for 4 GB on ext4 or btrfs): ggfs_state_put does that on
     * the notify thread for frees (fs/notify.c), which nobody waits for,
     * so the writer's close() does not wait for it. */
    ggfs_state_put(old);
}

/* Commits the header an edit built: 0, or its refusal as an errno. */
static int apply(struct ggfs *fs, enum gguf_err e, struct gguf_buf *hdr,
                 const struct gguf_diag *d, const char *fname, const char *why)
{
    int r = e ? refused(fs, fname, e, d) : commit(fs, hdr, fname, why);
    gguf_buf_free(hdr);
    return r;
}

bool ggfs_key_is_reserved(const struct gguf_file *gf, uint64_t i)
{
    const void *key = gf->hdr + gf->kv[i].key_off;
    return gguf_key_is_alignment(key, gf->kv[i].key_len) ||
           gguf_key_is_padding(key, gf->kv[i].key_len);
}

bool ggfs_key_name_new(const char *fname, size_t len)
{
    struct gguf_buf key = { 0 };
    struct gguf_diag d;
    bool ok = gguf_kvedit_decode_name(fname, len, true, &key, &d) == GGUF_OK;
    gguf_buf_free(&key);
    return ok;
}

/* The index of key id in st, or -1 when it is gone. */
static int64_t key_index(const struct state *st, uint64_t id)
{
    return id < st->n_ids ? st->id_kv[id] : -1;
}

void ggfs_edit_ahead(const struct ggfs *fs, const struct state *st)
{
    if (fs->overlay)
        return;
    const struct gguf_source *src = st->model->shards[0].src;
    const struct gguf_file *gf = st_meta(st);
    uint64_t room = gguf_has_tensor_data(gf) ? gf->data_off : gf->file_size;
    if (src->fd >= 0 && room > 0)
        (void)posix_fadvise(src->fd, 0, (off_t)room, POSIX_FADV_WILLNEED);
}

int ggfs_edit_apply(struct whandle *h)
{
    if (!h->dirty || h->kind == WH_SCRATCH || h->kind == WH_DROPPED)
        return 0;
    if (h->bad)
        return EINVAL;
    struct ggfs *fs = h->fs;
    ggfs_edit_ahead(fs, fs->st);
    const struct gguf_file *gf = st_meta(fs->st);
    struct gguf_buf hdr = { 0 }, key = { 0 };
    struct gguf_diag d;
    enum gguf_err e;
    if (h->kind == WH_NEW) {
        e = gguf_kvedit_decode_name(h->fname, strlen(h->fname), true, &key, &d);
        if (!e && key_index(fs->st, h->id) >= 0)
            e = GGUF_E_EXIST;   /* someone committed the same name meanwhile */
        if (!e)
            e = gguf_kvedit_create(gf, key.data, key.len, h->typed ? &h->type : NULL,
                                   h->text.data, h->text.len, &hdr, &d);
    } else {
        int64_t i = key_index(fs->st, h->id);   /* < 0: deleted while open */
        e = i < 0 ? GGUF_E_NOENT
                  : gguf_kvedit_set(gf, (uint64_t)i, h->text.data, h->text.len, &hdr, &d);
    }
    gguf_buf_free(&key);
    int r = apply(fs, e, &hdr, &d, h->fname, "edit");
    if (!r) {
        h->dirty = false;
        h->kind = WH_KEY;
    }
    return r;
}

/* ---- unlink, rename, setxattr ------------------------------------------------ */

int ggfs_edit_unlink(struct ggfs *fs, const char *name)
{
    const char *why;
    int w = ggfs_write_check(fs, &why);
    if (w == EROFS && fs->read_only)
        return ggfs_edit_refused(fs, name, w, why);
    struct whandle *p = wh_pending_find(fs, 0, name);
    if (p) {                 /* a created key not committed, or a scratch: forget it */
        pthread_mutex_lock(&p->mu);
        p->dirty = false;
        pthread_mutex_unlock(&p->mu);
        wh_pending_remove(p);
        if (p->opens == 0)
            wh_free(p);
        else
            p->kind = WH_DROPPED;  /* its release frees it, applying nothing */
        return 0;
    }
    int64_t i = ntab_find(&fs->st->meta_names, name);
    if (i < 0)
        return ENOENT;
    if (w)
        return ggfs_edit_refused(fs, name, w, why);
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_delete(st_meta(fs->st), (uint64_t)i, &hdr, &d);
    return apply(fs, e, &hdr, &d, name, "delete");
}

/* rename(scratch, key): the way sed -i and editors save.  The scratch's
 * text becomes the key's value (parsed for the key's type, or inferred for
 * a new key). */
static int rename_scratch(struct ggfs *fs, struct whandle *p, const char *to)
{
    if (p->opens)
        return EBUSY;
    int64_t j = ntab_find(&fs->st->meta_names, to);
    struct whandle *h;
    int e;
    if (j >= 0) {
        struct fuse_file_info fi = { .flags = O_WRONLY | O_TRUNC };
        e = ggfs_edit_open(fs, (uint64_t)j, O_WRONLY | O_TRUNC, &fi);
        if (e)
            return e;
        h = (struct whandle *)(uintptr_t)fi.fh;
    } else {
        if (!ggfs_key_name_new(to, strlen(to)))
            return ggfs_edit_refused(fs, to, EINVAL, "not a valid new key name ('.'-separated "
                                     "lower_snake_case segments)");
        int64_t id = ggfs_key_id(fs, to);
        if (id < 0 || !(h = wh_new(fs, (uint64_t)id, to, WH_NEW)))
            return ENOMEM;
        h->typed = p->typed;
        h->type = p->type;
    }
    pthread_mutex_lock(&h->mu);
    struct gguf_buf tmp = h->text;   /* lend the scratch's text */
    h->text = p->text;
    p->text = tmp;
    h->dirty = h->written = true;
    e = ggfs_edit_apply(h);
    tmp = h->text;                   /* and take it back */
    h->text = p->text;
    p->text = tmp;
    pthread_mutex_unlock(&h->mu);
    wh_free(h);
    if (!e) {
        wh_pending_remove(p);
        wh_free(p);
    }
    return e;
}

int ggfs_edit_rename(struct ggfs *fs, const char *from, const char *to)
{
    const char *why;
    int w = ggfs_write_check(fs, &why);
    if (w)
        return ggfs_edit_refused(fs, to, w, why);
    struct whandle *p = wh_pending_find(fs, 0, from);
    if (p && p->kind == WH_SCRATCH)
        return rename_scratch(fs, p, to);
    const struct state *st = fs->st;
    int64_t i = ntab_find(&st->meta_names, from);
    if (i < 0)
        return p ? EBUSY : ENOENT;
    if (strcmp(from, to) == 0)
        return 0;
    /* a new name must follow the rule; an existing one is kept as it is */
    bool exists = ntab_find(&st->meta_names, to) >= 0;
    struct gguf_buf key = { 0 }, hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_decode_name(to, strlen(to), !exists, &key, &d);
    if (!e)
        e = gguf_kvedit_rename(st_meta(st), (uint64_t)i, key.data ? key.data : "", key.len,
                               &hdr, &d);
    gguf_buf_free(&key);
    return apply(fs, e, &hdr, &d, from, "rename");
}

int ggfs_edit_settype(struct ggfs *fs, uint64_t id, const char *value, size_t size)
{
    const char *why;
    int w = ggfs_write_check(fs, &why);
    const char *fname = id < fs->ids.n ? fs->ids.names[id] : "?";
    if (w == EROFS && fs->read_only)
        return ggfs_edit_refused(fs, fname, w, why);
    struct gguf_typedesc td;
    if (!gguf_typedesc_parse(value, size, &td))
        return ggfs_edit_refused(fs, fname, EINVAL, "user.gguf.type: not a type");
    struct whandle *p = wh_pending_find(fs, id, NULL);
    if (p) {                 /* a new key: the type to parse it as at close */
        p->type = td;
        p->typed = true;
        return 0;
    }
    int64_t i = key_index(fs->st, id);
    if (i < 0)
        return ENOENT;
    if (w)
        return ggfs_edit_refused(fs, fname, w, why);
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_retype(st_meta(fs->st), (uint64_t)i, &td, &hdr, &d);
    return apply(fs, e, &hdr, &d, fs->st->meta_names.names[i], "set type");
}

/*
 * core/commit.c — applying an edit of meta/ to MODEL.gguf: the change turned
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
#include "core/commit.h"
#include "core/follow.h"
#include "core/log.h"
#include "core/model.h"
#include "core/overlay.h"
#include "core/state.h"
#include "core/underneath.h"

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

int core_edit_refused(struct mount *fs, const char *fname, int err, const char *why)
{
    core_log(LOG_ERR, "gguffs: %s: meta/%s: edit refused (%s): %s\n", fs->model_path,
             fname, strerror(err), why);
    return err;
}

/* Logs why an edit of meta/NAME was refused, and gives its errno. */
static int refused(struct mount *fs, const char *fname, enum gguf_err e, const struct gguf_diag *d)
{
    char line[1024];
    char name[300];
    snprintf(name, sizeof name, "meta/%s", fname);
    gguf_diag_format(d, name, line, sizeof line);
    core_log(LOG_ERR, "gguffs: %s: edit refused (%s): %s\n", fs->model_path,
             strerror(gguf_err_errno(e)), line);
    return gguf_err_errno(e);
}

/* errno of a failed access(2) of something gguffs must write */
static int access_errno(int e)
{
    return e == EROFS ? EROFS : EACCES;
}

int core_write_check(struct mount *fs, const char **why)
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
    if (!fs->overlay && !fs->remote && core_under_check(fs, fs->st)) {
        *why = core_under_why(fs);
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
 * in.  Returns 0 or an errno.  On error the model is the old version or,
 * when only the re-open or the new state failed, the new one, whole; the
 * state is the old one, or the file re-read (a commit that failed wrote
 * nothing: a new version of the old bytes). */
static int commit(struct mount *fs, const struct gguf_buf *hdr, const char *fname,
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
            core_log(LOG_ERR, "gguffs: %s: meta/%s: %s refused (%s): %s\n",
                     fs->model_path, fname, why, strerror(EPERM), d.msg);
            return EPERM;      /* refused: nothing written */
        }
    } else if (core_under_check(fs, old)) {
        /* changed underneath since the edit was opened: checked here,
         * under commit_mu, where no write of gguffs' own can race it */
        atomic_fetch_add(&fs->under_refused, 1);
        core_log(LOG_ERR, "gguffs: %s: meta/%s: %s refused (%s): %s\n", fs->model_path,
                 fname, why, strerror(EIO), core_under_why(fs));
        return EIO;
    } else {
        /* padded (gguffs.padding) to be written in place, or cloned where
         * the file system can: O(metadata) either way; elsewhere a header
         * that outgrows its room is copied once, with room to spare */
        int nfd = -1;
        core_under_begin(fs);   /* our own writes: not a change underneath */
        core_follow_begin(fs, old);     /* read-only mounts: a commit under way */
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
        core_log(LOG_ERR, "gguffs: %s: meta/%s: %s failed (%s): %s\n", fs->model_path,
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
        core_log(LOG_WARNING, "gguffs: %s\n", note);
    if (oe != GGUF_OK) {
        core_log(LOG_ERR, "gguffs: %s: after %s: %s\n", fs->model_path, why, d.msg);
        if (!fs->overlay) {
            core_under_end(fs);
            core_follow_end(fs, NULL);
        }
        return EIO;
    }
    struct state *ns;
    int e = core_state_new(fs, model, old->gen + 1, &ns);
    /* the files as this commit left them, the new state's included (its
     * sig was taken after the last write): the window closes; read-only
     * mounts get the record of the edit (follow.h) */
    if (!fs->overlay) {
        core_under_end(fs);
        core_follow_end(fs, e ? NULL : ns);
    }
    if (e) {
        gguf_split_close(model);
        return e;
    }
    core_state_swap(fs, ns);
    if (!fs->overlay)
        core_under_rewatch(fs);     /* a rewrite put a new file at the path */
    return ce == GGUF_OK ? 0 : EIO;
}

int core_commit_header(struct mount *fs, enum gguf_err e, struct gguf_buf *hdr,
                 const struct gguf_diag *d, const char *fname, const char *why)
{
    int r = e ? refused(fs, fname, e, d) : commit(fs, hdr, fname, why);
    gguf_buf_free(hdr);
    return r;
}

bool core_key_is_reserved(const struct gguf_file *gf, uint64_t i)
{
    const void *key = gf->hdr + gf->kv[i].key_off;
    return gguf_key_is_alignment(key, gf->kv[i].key_len) ||
           gguf_key_is_padding(key, gf->kv[i].key_len);
}

bool core_key_name_new(const char *fname, size_t len)
{
    struct gguf_buf key = { 0 };
    struct gguf_diag d;
    bool ok = gguf_kvedit_decode_name(fname, len, true, &key, &d) == GGUF_OK;
    gguf_buf_free(&key);
    return ok;
}

void core_edit_ahead(const struct mount *fs, const struct state *st)
{
    if (fs->overlay)
        return;
    const struct gguf_source *src = st->model->shards[0].src;
    const struct gguf_file *gf = st_meta(st);
    uint64_t room = gguf_has_tensor_data(gf) ? gf->data_off : gf->file_size;
    if (src->fd >= 0 && room > 0)
        (void)posix_fadvise(src->fd, 0, (off_t)room, POSIX_FADV_WILLNEED);
}

/*
 * gguf/recover.c — finishing what a crash interrupted (see commit.h; why
 * each case is safe is argued at the top of commit.c).
 *
 * Each removal is followed by an fsync of the directory, and the journal
 * is removed only after the model's bytes (old, or complete and new) are
 * durable, so a crash during recovery leaves a state that the next
 * gguf_recover handles the same way: a range that is not the new one stays
 * so while its old bytes are written back (each of its bytes is old or new,
 * and one that differs from the new byte is old, and stays old).
 */
#include "journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Appends s to what ("; "-separated). */
static void say(char *what, size_t cap, const char *s)
{
    if (!what || !cap)
        return;
    size_t l = strlen(what);
    snprintf(what + l, cap - l, "%s%s", l ? "; " : "", s);
}

/* Removes a leftover file as step name, then makes that durable. */
static enum gguf_err remove_durably(const struct gguf_jpaths *p, struct gguf_steps *s,
                                    const char *path, const char *name,
                                    struct gguf_diag *d)
{
    gguf_step(s, name);
    if (unlink(path) != 0)
        return gguf_io_fail(d, name, errno);
    gguf_step(s, "fsync of the directory");
    if (gguf_fsync_dir(p->dir) != 0)
        return gguf_io_fail(d, "fsync of the directory", errno);
    return GGUF_OK;
}

/* Opens the model (read-write to fix, read-only to check) and checks that
 * the complete journal r belongs to it. */
static enum gguf_err open_for(const struct gguf_jpaths *p, const struct gguf_jrec *r,
                              bool fix, int *fd, struct gguf_diag *d)
{
    struct stat st;
    *fd = open(p->model, (fix ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (*fd < 0 || fstat(*fd, &st) != 0)
        return gguf_io_fail(d, "opening the model to roll back an interrupted edit",
                            errno);
    uint64_t size = (uint64_t)st.st_size;
    if (size != r->model_size || r->lo > size || r->len > size - r->lo)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s does not belong to the "
                             "model (it is %llu bytes, the journal is for %llu "
                             "bytes): remove it by hand", p->journal,
                             (unsigned long long)size,
                             (unsigned long long)r->model_size);
    return GGUF_OK;
}

/* What the model's runs of the complete journal r (payload pl, their old
 * bytes one after another) hold. */
enum range { R_OLD, R_NEW, R_OTHER };

static enum gguf_err read_range(int fd, const struct gguf_jrec *r, const uint8_t *pl,
                                enum range *out, struct gguf_diag *d)
{
    size_t len = (size_t)r->old_len, at = 0;
    uint8_t *cur = malloc(len ? len : 1);
    if (!cur)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    for (size_t i = 0; i < r->nruns; i++) {
        if (!gguf_pread_all(fd, cur + at, (size_t)r->runs[i].len, r->runs[i].off)) {
            int er = errno;
            free(cur);
            return gguf_io_fail(d, "reading the model's header", er);
        }
        at += (size_t)r->runs[i].len;
    }
    *out = memcmp(cur, pl, len) == 0 ? R_OLD
         : r->has_new && gguf_cksum(cur, len) == r->new_ck ? R_NEW : R_OTHER;
    free(cur);
    return GGUF_OK;
}

/* A complete journal r with payload pl, the model's runs holding rg: a
 * complete new range is kept; otherwise the old bytes go back (unless
 * they are there).  The model is fdatasync'd either way (its bytes may be
 * cached only: the runs are written in place, so only the data matters),
 * then the journal is removed. */
static enum gguf_err finish(const struct gguf_jpaths *p, struct gguf_steps *s,
                            int fd, const struct gguf_jrec *r, const uint8_t *pl,
                            enum range rg, char *what, size_t cap, struct gguf_diag *d)
{
    for (size_t i = 0, at = 0; rg == R_OTHER && i < r->nruns; i++) {
        const struct gguf_jrun *u = &r->runs[i];
        if (!gguf_write_step(s, "restoring the old header", fd, pl + at, (size_t)u->len, u->off))
            return gguf_io_fail(d, "restoring the old header", errno);
        at += (size_t)u->len;
    }
    gguf_step(s, "fdatasync of the model");
    if (fdatasync(fd) != 0)
        return gguf_io_fail(d, "fdatasync of the model", errno);
    enum gguf_err err = remove_durably(p, s, p->journal, "removing the journal", d);
    if (!err)
        say(what, cap, rg == R_OLD ? "removed the journal of an interrupted edit (the "
            "model had not been modified)" : rg == R_NEW ? "finished an interrupted "
            "edit (the new header was written completely; its journal was removed)"
            : "rolled back an interrupted edit (the old header was restored from "
            "the journal)");
    return err;
}

/* MODEL.gguffs-journal, if there is one. */
static enum gguf_err journal(const struct gguf_jpaths *p, struct gguf_steps *s,
                             bool fix, bool live, char *what, size_t cap,
                             struct gguf_diag *d)
{
    struct stat st;
    if (lstat(p->journal, &st) != 0)
        return GGUF_OK;
    if (gguf_journal_state(p->journal) == GGUF_J_IDLE) {
        /* kept for the next edit, or by a mount that ended without
         * removing it: no edit ran */
        if (!fix || live)
            return GGUF_OK;
        enum gguf_err err = remove_durably(p, s, p->journal, "removing an idle journal", d);
        if (!err)
            say(what, cap, "removed the idle journal an earlier mount left (no edit "
                "was interrupted)");
        return err;
    }
    struct gguf_jrec r;
    uint8_t *pl = NULL;
    int c = gguf_journal_read(p->journal, &r, &pl);
    if (c < 0 && errno == EINVAL)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s holds a run table that "
                             "gguffs does not write: remove it by hand", p->journal);
    if (c < 0)
        return gguf_io_fail(d, "reading the journal", errno);
    if (c == 0) {
        /* never made durable, so the model was not touched */
        if (!fix) {
            say(what, cap, "an incomplete journal of an interrupted edit is left "
                "(the model was not modified)");
            return GGUF_OK;
        }
        enum gguf_err err = remove_durably(p, s, p->journal,
                                           "removing an incomplete journal", d);
        if (!err)
            say(what, cap, "removed the incomplete journal of an interrupted edit "
                "(the model had not been modified)");
        return err;
    }
    int fd;
    enum range rg = R_OTHER;
    enum gguf_err err = open_for(p, &r, fix, &fd, d);
    if (!err)
        err = read_range(fd, &r, pl, &rg, d);
    if (!err && fix) {
        err = finish(p, s, fd, &r, pl, rg, what, cap, d);
    } else if (!err && rg == R_NEW) {
        say(what, cap, "an edit was finished but its journal is left (the model "
            "is the new version)");
    } else if (!err) {
        say(what, cap, "an edit was interrupted: the journal holds the old header "
            "(the model may be partly written until it is rolled back)");
        err = gguf_diag_set(d, GGUF_E_INTERRUPTED, UINT64_MAX, "an edit was "
                            "interrupted (%s): the model may be partly written "
                            "until gguf_recover rolls it back", p->journal);
    }
    if (fd >= 0)
        close(fd);
    free(pl);
    gguf_jrec_free(&r);
    return err;
}

enum gguf_err gguf_recover(const char *path, enum gguf_recover_mode mode,
                           char *what, size_t cap, struct gguf_diag *d)
{
    struct gguf_diag scratch;
    if (!d)
        d = &scratch;
    gguf_diag_set(d, GGUF_OK, UINT64_MAX, "%s", "");
    if (what && cap)
        what[0] = '\0';
    bool fix = mode != GGUF_RECOVER_CHECK;
    struct gguf_jpaths p;
    enum gguf_err err = gguf_jpaths_init(path, &p, d);
    if (err == GGUF_E_IO && errno == ENOENT) {
        d->msg[0] = '\0';
        return GGUF_OK;     /* no model: nothing to do */
    }
    if (err)
        return err;

    struct gguf_steps s = { 0 };
    struct stat st;
    err = journal(&p, &s, fix, mode == GGUF_RECOVER_FIX_LIVE, what, cap, d);
    if ((!err || err == GGUF_E_INTERRUPTED) && lstat(p.newf, &st) == 0) {
        /* a rewrite that did not reach its rename: the model is the old one */
        if (!fix) {
            say(what, cap, "the unfinished new file of an interrupted rewrite is "
                "left (the model was not modified)");
        } else if (!(err = remove_durably(&p, &s, p.newf,
                                          "removing an unfinished new file", d))) {
            say(what, cap, "removed the unfinished new file of an interrupted "
                "rewrite (the model had not been modified)");
        }
    }
    gguf_jpaths_free(&p);
    return err;
}

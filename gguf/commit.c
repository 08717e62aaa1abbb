/*
 * gguf/commit.c — putting a new header into the model, crash-safely (see
 * commit.h; the journal's format is in journal.h).
 *
 * The argument for crash safety (a crash may be a kill -9 between any two
 * system calls, or a power loss that keeps only what was fsync'd):
 *
 * In place.  The model's bytes [lo, hi) (the pages of them that change)
 * are overwritten only after the journal holding their old value is
 * durable (fsync of a new journal, then of the directory that names it; or
 * the idle journal of an earlier edit, written over, truncated to its
 * length and fdatasync'd: its name is already durable).  The journal is
 * verifiable: its record and its payload carry checksums and its length is
 * exact, so a journal torn by a crash while it was written reads as
 * incomplete, and an incomplete journal proves that its fsync had not
 * returned, hence that the model had not been touched: gguf_recover just
 * removes it.  A complete journal may guard a model that is old, torn or
 * new.  The journal also carries the
 * checksum of the new bytes: when the model's range has exactly the new
 * bytes, the edit was written completely, and gguf_recover keeps it
 * (fdatasync of the model, then the journal is removed); otherwise it
 * writes the old bytes back, fdatasyncs the model (even when the bytes
 * already match: they may be in the page cache only), and only then
 * removes the journal.  gguf_commit returns once the new bytes are durable
 * (fdatasync of the model: the write changes neither the file's size nor
 * its blocks, so only its times are left to the file system's next
 * commit).  The journal is then kept, marked idle (its magic rewritten)
 * with no fsync, for the next edit to write over: a journal whose marker
 * did not reach the disk before a power loss finds the model's range
 * complete and new, and recovery keeps the new version.  So a returned
 * gguf_commit is never rolled back, with two waits on the disk instead of
 * four, and no file created or removed per edit.  (A journal left that way
 * and a model overwritten in place by another program before the marker
 * is written back, a few seconds, would be rolled back over that
 * program's bytes, unless its size differs: the price of the two waits.)
 * An idle journal read at any time is either the idle marker, or, on the
 * disk, a complete record of the last committed edit (its range new) or a
 * torn mix with the next edit's record, which cannot verify (checksums,
 * exact length): the model is not touched before that next record is
 * durable.  A rewrite removes an idle journal durably before its rename. 
 *
 * Rewrite.  The model is not written at all: the new file is written and
 * fsync'd (data, mode, owner) before rename() atomically replaces the
 * model's name, and the directory is fsync'd before gguf_commit returns.
 * Before the rename a crash leaves the old model plus a MODEL.gguffs-new
 * that gguf_recover removes; after it, the new model.  A rewrite that
 * clones the tensor data (FICLONERANGE) instead of copying it is the same
 * sequence: the clone only adds blocks to the new file (the model's are
 * shared, copy on write, never changed), and the fsync of the new file
 * makes the clone durable with the rest of it before the rename.
 */
#include "journal.h"

#include "pad.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#define COPY_BUF (1u << 20)
#define CFR_CHUNK ((size_t)1 << 30)

/* The last step of both paths: the directory's fsync makes the new
 * version durable; if it fails, the new version is in place but might be
 * lost (what) on a power loss. */
static enum gguf_err sync_dir_last(const struct gguf_jpaths *p, struct gguf_steps *s,
                                   const char *what, struct gguf_diag *d)
{
    gguf_step(s, "fsync of the directory");
    if (gguf_fsync_dir(p->dir) == 0)
        return GGUF_OK;
    return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "new version in place, but the "
                         "fsync of the directory failed (%s): %s", what,
                         strerror(errno));
}

/* ---- rewrite ------------------------------------------------------------------- */

/* Copies [in_off, in_off + len) of src to out at out_off: copy_file_range
 * from src's descriptor when it has one (a reflink where the file system
 * can), else through a 1 MiB buffer read through src. */
static enum gguf_err copy_data(struct gguf_steps *s, struct gguf_source *src,
                               uint64_t in_off, int out, uint64_t out_off,
                               uint64_t len, struct gguf_diag *d)
{
    const char *what = "copying the tensor data";
    bool cfr = src->fd >= 0 && !(gguf_edit_hooks && gguf_edit_hooks->no_copy_file_range);
    uint64_t half = gguf_edit_hooks ? len / 2 : 0, end = in_off + len;
    uint8_t *buf = NULL;
    enum gguf_err err = GGUF_OK;
    gguf_step(s, what);
    while (!err && in_off < end) {
        uint64_t want = end - in_off;
        if (half) {
            /* under test hooks: a step in the middle (a torn copy) */
            uint64_t mid = end - len + half;
            if (in_off < mid) {
                want = mid - in_off;
            } else if (in_off == mid) {
                gguf_step(s, what);
                half = 0;
            }
        }
        if (cfr) {
            loff_t io = (loff_t)in_off, oo = (loff_t)out_off;
            ssize_t r = copy_file_range(src->fd, &io, out, &oo,
                                        want < CFR_CHUNK ? (size_t)want : CFR_CHUNK, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP ||
                          errno == EINVAL || errno == EBADF || errno == ETXTBSY)) {
                cfr = false;    /* not supported here: copy through a buffer */
                continue;
            }
            if (r < 0)
                err = gguf_io_fail(d, what, errno);
            else if (r == 0)
                err = gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s: the model ended "
                                    "early (it shrank?)", what);
            in_off += r > 0 ? (uint64_t)r : 0;
            out_off += r > 0 ? (uint64_t)r : 0;
            continue;
        }
        if (!buf && !(buf = malloc(COPY_BUF))) {
            err = gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
            break;
        }
        size_t k = want < COPY_BUF ? (size_t)want : COPY_BUF;
        int re = gguf_source_read_all(src, buf, k, in_off);
        if (re)
            err = gguf_io_fail(d, what, re);
        else if (!gguf_pwrite_all(out, buf, k, out_off))
            err = gguf_io_fail(d, what, errno);
        in_off += k;
        out_off += k;
    }
    free(buf);
    return err;
}

/* Errors of FICLONERANGE that mean "not here" (the file system does not
 * clone, the files are on different file systems, offsets it refuses):
 * the data is copied instead. */
static bool clone_refused(int e)
{
    return e == EOPNOTSUPP || e == ENOTTY || e == EXDEV || e == EINVAL || e == ENOSYS ||
           e == EBADF || e == ETXTBSY || e == EPERM;
}

/* One FICLONERANGE: src [so, so + len) (len 0: to its end) to out at oo. */
static int clone_range(int src, uint64_t so, uint64_t len, int out, uint64_t oo)
{
    struct file_clone_range r = { .src_fd = src, .src_offset = so, .src_length = len,
                                  .dest_offset = oo };
    int rc;
    do
        rc = ioctl(out, FICLONERANGE, &r);
    while (rc < 0 && errno == EINTR);
    return rc < 0 ? errno : 0;
}

/* The data start moves from old_off to new_off, by a multiple of the
 * file system's block size bs: clones src from the block holding old_off
 * to its end into out, at the block holding new_off (the bytes before
 * new_off, old header bytes, are then overwritten by the new header).
 * *cloned false and GGUF_OK when the file system refuses (out is then
 * empty again): the caller copies. */
static enum gguf_err clone_data(struct gguf_steps *s, struct gguf_source *src,
                                uint64_t old_off, int out, uint64_t new_off,
                                uint64_t len, uint64_t bs, bool *cloned,
                                struct gguf_diag *d)
{
    const char *what = "cloning the tensor data";
    uint64_t so = old_off - old_off % bs, oo = new_off - new_off % bs;
    uint64_t total = old_off + len - so;
    /* under test hooks: a step in the middle (a clone half done) */
    uint64_t half = gguf_edit_hooks ? total / 2 / bs * bs : 0;
    *cloned = false;
    gguf_step(s, what);
    int e = clone_range(src->fd, so, half, out, oo);
    if (!e && half) {
        gguf_step(s, what);
        e = clone_range(src->fd, so + half, 0, out, oo + half);
    }
    if (!e) {
        *cloned = true;
        return GGUF_OK;
    }
    if (!clone_refused(e))
        return gguf_io_fail(d, what, e);
    gguf_step(s, what = "emptying the new file after a refused clone");
    if (ftruncate(out, 0) != 0)
        return gguf_io_fail(d, what, errno);
    return GGUF_OK;
}

/* The block size to clone with, if the data start moves from old_off to
 * new_off by a multiple of it and src has a descriptor; else 0. */
static uint64_t clone_block_for(struct gguf_source *src, uint64_t old_off, uint64_t new_off)
{
    struct statfs sf;
    if (src->fd < 0 || (gguf_edit_hooks && gguf_edit_hooks->no_clone) ||
        fstatfs(src->fd, &sf) != 0 || sf.f_bsize <= 0)
        return 0;
    uint64_t bs = (uint64_t)sf.f_bsize;
    uint64_t shift = new_off > old_off ? new_off - old_off : old_off - new_off;
    return shift % bs == 0 ? bs : 0;
}

uint64_t gguf_clone_block(const char *path)
{
    /* File systems that never clone are not asked: on ext4 the probe's
     * unnamed file is an inode created and freed in its journal, a cost
     * every growing edit would pay for nothing. */
    struct statfs sf;
    if (statfs(path, &sf) == 0 && (sf.f_type == EXT4_SUPER_MAGIC || sf.f_type == TMPFS_MAGIC))
        return 0;
    struct gguf_jpaths p;
    struct gguf_diag d;
    if (gguf_jpaths_init(path, &p, &d) != GGUF_OK)
        return 0;
    uint64_t bs = 0;
    struct stat st;
    int fd = open(p.model, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && fstatfs(fd, &sf) == 0 && sf.f_bsize > 0 && fstat(fd, &st) == 0 &&
        S_ISREG(st.st_mode) && st.st_size > 0) {
        /* an unnamed file in the model's directory: nothing is left behind */
        int t = open(p.dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        uint64_t b = (uint64_t)sf.f_bsize;
        if (t >= 0 && clone_range(fd, 0, (uint64_t)st.st_size > b ? b : 0, t, b) == 0)
            bs = b;
        if (t >= 0)
            close(t);
    }
    if (fd >= 0)
        close(fd);
    gguf_jpaths_free(&p);
    return bs;
}

/* Gives the new file the model's owner, group and mode: a failure is an
 * error (ownership never silently changes).  errno on false. */
static bool same_owner_and_mode(struct gguf_steps *s, int nfd, const struct stat *st,
                                const char **what)
{
    struct stat ns;
    *what = "setting the new file's owner";
    if (fstat(nfd, &ns) != 0)
        return false;
    if (ns.st_uid != st->st_uid || ns.st_gid != st->st_gid) {
        gguf_step(s, *what);
        if (fchown(nfd, st->st_uid, st->st_gid) != 0)
            return false;
    }
    gguf_step(s, *what = "setting the new file's mode");
    return fchmod(nfd, st->st_mode & 07777) == 0;
}

/* An OFD write lock on the whole file open at fd (errno on false). */
static bool ofd_wrlock(int fd)
{
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    return fcntl(fd, F_OFD_SETLK, &l) == 0;
}

static enum gguf_err commit_rewrite(const struct gguf_jpaths *p, const struct stat *st,
                                    const struct gguf_file *f, struct gguf_source *old,
                                    const uint8_t *hdr, size_t hdr_len, bool *cloned,
                                    int *lock_fd, struct gguf_diag *d)
{
    struct gguf_steps s = { 0 };
    struct stat ns;
    uint64_t data_len = f->file_size > f->data_off ? f->file_size - f->data_off : 0;
    enum gguf_err err;
    const char *what;

    if (lstat(p->newf, &ns) == 0) {
        gguf_step(&s, "removing a leftover new file");
        if (unlink(p->newf) != 0)
            return gguf_io_fail(d, "removing a leftover new file", errno);
    }
    gguf_step(&s, "creating the new file");
    int nfd = open(p->newf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (nfd < 0)
        return gguf_io_fail(d, "creating the new file", errno);
    /* the data first when it can be cloned: the header then overwrites
     * what the clone put before the data start */
    uint64_t bs = data_len ? clone_block_for(old, f->data_off, hdr_len) : 0;
    *cloned = false;
    if (bs && (err = clone_data(&s, old, f->data_off, nfd, hdr_len, data_len, bs, cloned, d)))
        goto fail;
    if (!gguf_write_step(&s, what = "writing the new header", nfd, hdr, hdr_len, 0))
        goto io;
    if (!*cloned && (err = copy_data(&s, old, f->data_off, nfd, hdr_len, data_len, d)))
        goto fail;
    if (!same_owner_and_mode(&s, nfd, st, &what))
        goto io;
    gguf_step(&s, what = "fsync of the new file");
    if (fsync(nfd) != 0)
        goto io;
    /* the caller's write lock moves to the new file before its name is
     * the model's: the model is never seen unlocked */
    if (lock_fd && !ofd_wrlock(nfd)) {
        what = "locking the new file";
        goto io;
    }
    if (!lock_fd && close(nfd) != 0) {
        nfd = -1;
        what = "closing the new file";
        goto io;
    }
    if (!lock_fd)
        nfd = -1;
    /* An idle journal (of an earlier in-place edit) goes first, durably:
     * its marker may not be on the disk yet, and a journal that reads as
     * complete there is for a model of another size once the new file is
     * the model. */
    struct stat js;
    if (lstat(p->journal, &js) == 0) {
        gguf_step(&s, what = "removing the idle journal");
        if (unlink(p->journal) != 0)
            goto io;
        gguf_step(&s, what = "fsync of the directory (journal)");
        if (gguf_fsync_dir(p->dir) != 0)
            goto io;
    }
    gguf_step(&s, what = "renaming the new file over the model");
    if (rename(p->newf, p->model) != 0)
        goto io;
    if (lock_fd)
        *lock_fd = nfd;
    return sync_dir_last(p, &s, "it may not survive a power loss", d);

io:
    err = gguf_io_fail(d, what, errno);
fail:
    if (nfd >= 0)
        close(nfd);
    unlink(p->newf);
    return err;
}

/* ---- in place --------------------------------------------------------------------- */

/* Writes the journal (its image j of n bytes: the payload after the
 * record, then the record) and makes it durable: over the idle journal of an earlier edit when
 * there is one (an overwrite and an fdatasync), else in a new file (an
 * fsync of it and of the directory); on failure nothing is left (the
 * model was not touched). */
static enum gguf_err write_journal(const struct gguf_jpaths *p, struct gguf_steps *s,
                                   const uint8_t *j, size_t n, struct gguf_diag *d)
{
    const char *what;
    /* check_unchanged saw no journal, or an idle one */
    int jfd = open(p->journal, O_WRONLY | O_CLOEXEC);
    bool fresh = jfd < 0;
    if (fresh && errno != ENOENT)
        return gguf_io_fail(d, "opening the idle journal", errno);
    if (fresh) {
        gguf_step(s, what = "creating the journal");
        jfd = open(p->journal, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (jfd < 0) {
            if (errno == EEXIST)
                return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s exists (an "
                                     "interrupted edit): gguf_recover must run first",
                                     p->journal);
            return gguf_io_fail(d, what, errno);
        }
    }
    bool ok = gguf_write_step(s, what = "writing the journal", jfd, j + GGUF_JREC,
                              n - GGUF_JREC, GGUF_JREC) &&
              gguf_write_step(s, what = "writing the journal's record", jfd, j, GGUF_JREC, 0);
    if (ok && !fresh) {
        gguf_step(s, what = "truncating the journal to its length");
        ok = ftruncate(jfd, (off_t)n) == 0;
    }
    if (ok) {
        gguf_step(s, what = "fsync of the journal");
        ok = (fresh ? fsync(jfd) : fdatasync(jfd)) == 0;
    }
    int er = errno;
    if (close(jfd) != 0 && ok) {
        ok = false;
        er = errno;
        what = "closing the journal";
    }
    if (ok && fresh) {
        gguf_step(s, what = "fsync of the directory (journal)");
        ok = gguf_fsync_dir(p->dir) == 0;
        er = errno;
    }
    if (ok)
        return GGUF_OK;
    unlink(p->journal);     /* the model was not touched */
    return gguf_io_fail(d, what, er);
}

/* The model's range [lo, hi) is written where it changes: in pages of
 * MODEL_PAGE bytes (aligned in the file), each written only if the new
 * header differs from the old one there, runs of changed pages each in
 * one write.  A value that grows by the padding keeps most of its bytes
 * where they were (its length field before them changes, and what follows
 * its end moves): those pages are not written again, and the fdatasync
 * after has that much less to write (a chat template of 1 MB grown at its
 * end: its length field's page and the pages from its end to the padding,
 * not the megabyte between).  The journal holds the old bytes of the runs
 * only (journal.h), the same argument holding run by run: a byte outside
 * them is the same in the old and the new header, and is never written. */
#define MODEL_PAGE 4096u

static size_t page_end(size_t at, size_t hi)
{
    size_t e = (at / MODEL_PAGE + 1) * MODEL_PAGE;
    return e < hi ? e : hi;
}

/* The runs of changed pages of [lo, hi) into runs (room for one per page);
 * their number. */
static size_t changed_runs(const uint8_t *old, const uint8_t *hdr, size_t lo, size_t hi,
                           struct gguf_jrun *runs)
{
    size_t n = 0, a = lo;
    while (a < hi) {
        size_t e = page_end(a, hi);
        if (memcmp(old + a, hdr + a, e - a) == 0) {
            a = e;                  /* the same: not written */
            continue;
        }
        size_t b = e;
        while (b < hi) {
            e = page_end(b, hi);
            if (memcmp(old + b, hdr + b, e - b) == 0)
                break;
            b = e;
        }
        runs[n++] = (struct gguf_jrun){ a, b - a };
        a = b;
    }
    return n;
}

static enum gguf_err commit_in_place(const struct gguf_jpaths *p, int fd,
                                     const struct gguf_file *f,
                                     const uint8_t *old, const uint8_t *hdr,
                                     size_t hdr_len, struct gguf_diag *d)
{
    struct gguf_steps s = { 0 };
    size_t lo = 0, hi = hdr_len;
    while (lo < hdr_len && old[lo] == hdr[lo])
        lo++;
    if (lo == hdr_len)
        return GGUF_OK;     /* nothing changes */
    while (old[hi - 1] == hdr[hi - 1])
        hi--;
    size_t len = hi - lo;

    struct gguf_jrun *runs = malloc((len / MODEL_PAGE + 2) * sizeof *runs);
    size_t nruns = runs ? changed_runs(old, hdr, lo, hi, runs) : 0, jlen;
    uint8_t *j = runs ? gguf_journal_build(f->file_size, lo, len, runs, nruns, old, hdr,
                                           &jlen) : NULL;
    if (!j) {
        free(runs);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    enum gguf_err err = write_journal(p, &s, j, jlen, d);
    free(j);
    if (err) {
        free(runs);
        return err;
    }

    /* The journal is durable: the model may be written. */
    const char *what;
    for (size_t i = 0; i < nruns; i++)
        if (!gguf_write_step(&s, what = "writing the header in place", fd,
                             hdr + runs[i].off, (size_t)runs[i].len, runs[i].off))
            goto undo;
    free(runs);
    runs = NULL;
    gguf_step(&s, what = "fdatasync of the model");
    if (fdatasync(fd) != 0)
        goto undo;
    /* The new bytes are durable: the edit is committed (see the top).  The
     * journal is kept, idle, for the next edit to write over. */
    gguf_step(&s, what = "marking the journal idle");
    int jfd = open(p->journal, O_WRONLY | O_CLOEXEC);
    bool idle = jfd >= 0 && gguf_journal_set_idle(jfd);
    if (jfd >= 0)
        close(jfd);
    if (!idle && unlink(p->journal) != 0)
        return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "new version in place, but "
                             "removing %s failed (%s): the next mount removes it",
                             p->journal, strerror(errno));
    return GGUF_OK;

undo: {
        /* write the old bytes back (all of [lo, hi): outside the runs they
         * are the new ones too); if that is durable the journal can go */
        int er = errno;
        free(runs);
        if (gguf_pwrite_all(fd, old + lo, len, lo) && fdatasync(fd) == 0) {
            if (unlink(p->journal) == 0)
                gguf_fsync_dir(p->dir);
            return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s: %s (the old header "
                                 "was restored)", what, strerror(er));
        }
        return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s: %s (the old header could "
                             "not be restored: %s keeps it for gguf_recover)", what,
                             strerror(er), p->journal);
    }
}

/* ---- gguf_commit -------------------------------------------------------------------- */

/* Is the model open at fd still the one f describes (regular, same size,
 * same header bytes), with no interrupted edit?  Its first cmp bytes are
 * read into *old (to be freed). */
static enum gguf_err check_unchanged(const struct gguf_jpaths *p, int fd,
                                     const struct gguf_file *f, size_t cmp,
                                     struct stat *st, uint8_t **old,
                                     struct gguf_diag *d)
{
    if (fstat(fd, st) != 0)
        return gguf_io_fail(d, "stat of the model", errno);
    if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size != f->file_size)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the model changed since "
                             "it was indexed (size %llu, was %llu)",
                             (unsigned long long)st->st_size,
                             (unsigned long long)f->file_size);
    if (!(*old = malloc(cmp ? cmp : 1)))
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    if (!gguf_pread_all(fd, *old, cmp, 0))
        return gguf_io_fail(d, "reading the model's header", errno);
    if (memcmp(*old, f->hdr, f->hdr_size) != 0)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the model changed since "
                             "it was indexed (its header differs)");
    switch (gguf_journal_state(p->journal)) {
    case GGUF_J_NONE:
    case GGUF_J_IDLE:       /* an earlier edit's, to be written over */
        return GGUF_OK;
    case GGUF_J_BUSY:
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "%s exists (an interrupted "
                             "edit): gguf_recover must run first", p->journal);
    default:
        return gguf_io_fail(d, "reading the journal", errno);
    }
}

/* gguf_commit, saying how (info: in place, cloned, the header's size). */
static enum gguf_err commit(const char *path, const struct gguf_file *f,
                            struct gguf_source *old_src, const uint8_t *hdr,
                            size_t hdr_len, struct gguf_commit_info *info,
                            int *lock_fd, struct gguf_diag *d)
{
    gguf_diag_set(d, GGUF_OK, UINT64_MAX, "%s", "");
    memset(info, 0, sizeof *info);
    if (lock_fd)
        *lock_fd = -1;
    info->hdr_len = hdr_len;
    if (hdr_len < 24 || memcmp(hdr, "GGUF", 4) != 0 ||
        (gguf_has_tensor_data(f) && hdr_len % f->alignment))
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the new header is malformed "
                             "(no magic, or its size %zu is not a multiple of the "
                             "alignment %llu)", hdr_len, (unsigned long long)f->alignment);
    if (!old_src || old_src->size != f->file_size)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "the model's source is not "
                             "the version indexed (%llu bytes, the index is for %llu)",
                             (unsigned long long)(old_src ? old_src->size : 0),
                             (unsigned long long)f->file_size);

    struct gguf_jpaths p;
    enum gguf_err err = gguf_jpaths_init(path, &p, d);
    if (err)
        return err;
    /* In place when the new header takes exactly the room of the old one:
     * up to the data start, or, in a file without tensor bytes (headers
     * not padded), the whole file. */
    uint64_t room = gguf_has_tensor_data(f) ? f->data_off : f->file_size;
    bool ip = hdr_len == room && f->file_size >= room;
    uint8_t *old = NULL;
    struct stat st;
    int fd = open(p.model, (ip ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0)
        err = gguf_io_fail(d, "opening the model", errno);
    else
        err = check_unchanged(&p, fd, f, ip ? (size_t)room : (size_t)f->hdr_size,
                              &st, &old, d);
    if (!err && ip) {
        err = commit_in_place(&p, fd, f, old, hdr, hdr_len, d);
        info->in_place = err == GGUF_OK;
    } else if (!err) {
        err = commit_rewrite(&p, &st, f, old_src, hdr, hdr_len, &info->cloned, lock_fd, d);
    }
    if (err)
        info->cloned = false;
    if (fd >= 0)
        close(fd);
    free(old);
    gguf_jpaths_free(&p);
    return err;
}

enum gguf_err gguf_commit(const char *path, const struct gguf_file *f,
                          struct gguf_source *old_src, const uint8_t *hdr,
                          size_t hdr_len, bool *in_place, struct gguf_diag *d)
{
    struct gguf_diag scratch;
    struct gguf_commit_info info;
    enum gguf_err err = commit(path, f, old_src, hdr, hdr_len, &info, NULL, d ? d : &scratch);
    if (in_place)
        *in_place = info.in_place;
    return err;
}

enum gguf_err gguf_commit_edit(const char *path, const struct gguf_file *f,
                               struct gguf_source *old_src, const uint8_t *hdr,
                               size_t hdr_len, struct gguf_commit_info *info,
                               struct gguf_diag *d)
{
    return gguf_commit_edit_locked(path, f, old_src, hdr, hdr_len, info, NULL, d);
}

enum gguf_err gguf_commit_edit_locked(const char *path, const struct gguf_file *f,
                                      struct gguf_source *old_src, const uint8_t *hdr,
                                      size_t hdr_len, struct gguf_commit_info *info,
                                      int *lock_fd, struct gguf_diag *d)
{
    struct gguf_diag scratch;
    struct gguf_commit_info is;
    if (!d)
        d = &scratch;
    if (!info)
        info = &is;
    memset(info, 0, sizeof *info);
    /* A header of another size: in place if the padding key can take the
     * change; else padded to move the data by whole blocks where the file
     * system clones, by whole multiples of the alignment, with room to
     * spare for the next edits, where the data is copied.  (Whether it
     * clones is asked each time: one block into an unnamed file, little
     * next to the fsyncs.) */
    uint64_t step = 0;
    if (gguf_has_tensor_data(f) && hdr_len != f->data_off)
        step = gguf_pad_step(gguf_clone_block(path), f->alignment);
    struct gguf_buf fit = { 0 };
    enum gguf_err err = gguf_pad_fit(f, hdr, hdr_len, step, &fit, d);
    if (!err)
        err = commit(path, f, old_src, (const uint8_t *)fit.data, fit.len, info, lock_fd, d);
    gguf_buf_free(&fit);
    return err;
}

void gguf_commit_end(const char *path)
{
    struct gguf_jpaths p;
    struct gguf_diag d;
    if (gguf_jpaths_init(path, &p, &d) != GGUF_OK)
        return;
    if (gguf_journal_state(p.journal) == GGUF_J_IDLE)
        unlink(p.journal);
    gguf_jpaths_free(&p);
}

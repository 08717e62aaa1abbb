/*
 * gguf/commit.h — putting a new header into a model file, crash-safely,
 * and finishing what a crash interrupted.
 *
 * gguf_commit writes a header built by gguf_header_build (gguf/header.h)
 * into the model, either in place (guarded by an undo journal) or by
 * writing a new file beside it and renaming it over the model.
 * gguf_recover is called before a model is opened (at mount) to finish
 * what a crash interrupted.  Together they guarantee: whatever happens
 * during gguf_commit (an error, kill -9, power loss at any point), after
 * gguf_recover the model is bit for bit either the old or the new version.
 * Once gguf_commit has returned GGUF_OK the new version is durable.  Tensor
 * data is never held in memory: the rewrite streams it (copy_file_range,
 * else through a 1 MiB buffer), and memory use is proportional to the
 * header only.  gguf_commit_edit first pads the header (gguf/pad.h) so
 * that, where the file system clones (XFS with reflink, btrfs), an edit
 * that outgrows its room clones the tensor data instead of copying it, and
 * elsewhere the copy leaves room for the next growing edits to be written
 * in place.
 *
 * Files beside the model (MODEL is the model's path with symbolic links
 * resolved, so a link to a model keeps pointing at it):
 *
 *   MODEL.gguffs-journal  undo journal of an in-place edit: the old bytes
 *                         of the header pages being overwritten; kept,
 *                         idle, between edits (gguf_commit_end).
 *   MODEL.gguffs-new      the new file of a rewrite, before its rename.
 *
 * The directory holding the model must therefore be writable.  Calls for
 * the same model must not run concurrently (the caller serializes them);
 * nothing else may write the model meanwhile (gguf_commit checks that the
 * header on disk is still the one indexed, and refuses otherwise).
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_COMMIT_H
#define GGUF_COMMIT_H

#include "gguf.h"
#include "source.h"

#define GGUF_JOURNAL_SUFFIX ".gguffs-journal"
#define GGUF_NEW_SUFFIX ".gguffs-new"

/*
 * Writes a new header hdr (hdr_len bytes, from gguf_header_build for f)
 * into the model at path, whose current index is f.  old holds the bytes
 * of that version (the source f was opened from): a rewrite copies the
 * tensor data from it, with copy_file_range from old->fd when it has a
 * descriptor, else through old's read.  First checks that the file at
 * path is still the one f describes (same size, same header bytes) and
 * that old has f's size.
 *
 * In place, when hdr_len == f->data_off (*in_place = true; for a file
 * without tensor bytes, whose header is not padded: hdr_len == the file's
 * size): only the range [lo, hi) where the new header differs from the old
 * is written, and of it only the runs of 4 KiB pages (aligned in the file)
 * that differ.
 *   1. MODEL.gguffs-journal is written (gguf/journal.h): a 64-byte record
 *      (magic, model size, lo, hi - lo, checksums of the payload and of the
 *      runs' new bytes, the number of runs, checksum of the record), then
 *      the table of runs and their old bytes as payload; over the idle
 *      journal an earlier edit left (then truncated to its length), else
 *      in a new file (O_EXCL);
 *   2. fdatasync(journal); for a new file, fsync(journal) and
 *      fsync(directory): the journal is durable;
 *   3. pwrite of each run's new bytes into the model, fdatasync(model):
 *      the edit is committed (a journal found later with the model's runs
 *      complete and new is kept: gguf_recover finishes the edit);
 *   4. the journal is marked idle (no fsync) and kept for the next edit,
 *      until gguf_commit_end or gguf_recover removes it.
 *   An identical header writes nothing.  The model is opened O_RDWR here
 *   only; its inode, mode, owner and links stay as they are.
 *
 * Otherwise by rewrite (*in_place = false):
 *   1. MODEL.gguffs-new is created (O_EXCL, a leftover is removed first)
 *      and written: the new header, then the tensor data [f->data_off,
 *      file end) copied from old.  When the data start moves by a multiple
 *      of the file system's block size (statfs f_bsize; gguf/pad.h pads
 *      headers so) and old has a descriptor, the data is cloned instead
 *      (FICLONERANGE, from the block holding the old data start to the
 *      end, before the header is written over the first block's head):
 *      the new file shares the model's blocks, O(metadata) however large
 *      the model.  A file system that refuses (EOPNOTSUPP, EXDEV, EINVAL,
 *      ...) gets the copy;
 *   2. fchmod to the model's mode, fchown to its owner and group when they
 *      differ (failure is an error: ownership never silently changes);
 *   3. fsync(new file); an idle journal is removed (unlink, fsync of the
 *      directory); rename over MODEL, fsync(directory).
 *   The model gets a new inode: readers holding the old one keep reading
 *   the old version; other hard links to it keep the old version; extended
 *   attributes and ACLs are not copied.
 *
 * The mtime is that of the write (an edit is a modification).
 *
 * Errors (GGUF_E_IO, or GGUF_E_INVAL for a model that changed since f was
 * indexed, an old source of another size, a leftover journal — call
 * gguf_recover — or a malformed hdr):
 * diag names the step and the errno text; temporary files are removed and
 * the model is the old version.  One exception: if the final fsync of the
 * directory fails, the new version is in place but maybe not durable;
 * diag then says "new version in place".  Callers re-open the model after
 * every gguf_commit, whatever it returned.
 */
enum gguf_err gguf_commit(const char *path, const struct gguf_file *f,
                          struct gguf_source *old, const uint8_t *hdr,
                          size_t hdr_len, bool *in_place, struct gguf_diag *d);

/* How an edit was written. */
struct gguf_commit_info {
    bool in_place;      /* in place, under the journal */
    bool cloned;        /* a rewrite that cloned the tensor data */
    uint64_t hdr_len;   /* the size of the header given to gguf_commit */
};

/*
 * What an editor calls: hdr (the edit's header from gguf_header_build or
 * gguf/kvedit.h) fitted by gguf_pad_fit (gguf/pad.h), then gguf_commit.
 * For a header of another size than the old one's room, step is that of
 * gguf_clone_block(path) (0 where the file system does not clone):
 *   - a padding key takes the change by resizing when it can: in place, on
 *     any file system (where it clones, unless that would leave a block
 *     and more to spare: then the data moves down by whole blocks);
 *   - where the file system clones, padded (the key added, or resized) so
 *     that the data moves by whole blocks: a rewrite that clones the data;
 *   - elsewhere padded (the key added, or resized) so that the data moves
 *     by whole multiples of the alignment, with gguf_pad_copy_slack() to
 *     spare: a rewrite that copies the data, after which growing edits of
 *     up to that much are in place;
 *   - a header that deletes the key: as it is (a rewrite), as gguf_commit.
 * info (may be NULL) says which, and the size of the header written.
 * Errors as gguf_commit's, and gguf_pad_fit's.
 */
enum gguf_err gguf_commit_edit(const char *path, const struct gguf_file *f,
                               struct gguf_source *old, const uint8_t *hdr,
                               size_t hdr_len, struct gguf_commit_info *info,
                               struct gguf_diag *d);

/*
 * gguf_commit_edit for a caller that holds an OFD write lock (fcntl
 * F_OFD_SETLK, F_WRLCK, whole file) on the model: lock_fd is set to -1,
 * or, after a rewrite (a new inode renamed over the model), to a
 * descriptor of the new file that holds such a lock, taken before the
 * rename, so that the model is never unlocked; the caller keeps it (and
 * closes its descriptor of the old file).  A lock that cannot be taken
 * fails the edit (GGUF_E_IO) before the rename.
 */
enum gguf_err gguf_commit_edit_locked(const char *path, const struct gguf_file *f,
                                      struct gguf_source *old, const uint8_t *hdr,
                                      size_t hdr_len, struct gguf_commit_info *info,
                                      int *lock_fd, struct gguf_diag *d);

/*
 * Removes the idle journal the in-place edits of the model at path keep
 * between them: called when the model will not be edited any more (at
 * unmount).  A journal that is not idle (an interrupted edit) is left for
 * gguf_recover.  Errors are ignored: a journal left is removed by the
 * next gguf_recover.
 */
void gguf_commit_end(const char *path);

/*
 * The file system's block size (statfs f_bsize) if it clones ranges of the
 * model at path into new files in its directory — tried, with one block
 * into an unnamed file (O_TMPFILE) that disappears when closed; 0 when it
 * refuses, or anything fails.  ext2/3/4 and tmpfs, which never clone, are
 * answered 0 without the probe.
 */
uint64_t gguf_clone_block(const char *path);

enum gguf_recover_mode {
    GGUF_RECOVER_FIX = 0,      /* finish what a crash interrupted */
    GGUF_RECOVER_CHECK = 1,    /* only say what there is; touch nothing */
    GGUF_RECOVER_FIX_LIVE = 2, /* FIX, but an idle journal is kept: for the
                                  editor of the model, re-opening it after
                                  its own gguf_commit */
};

/*
 * Run before opening the model at path, never while an edit of it is
 * running.  In GGUF_RECOVER_FIX mode (a writable mount):
 *   - MODEL.gguffs-journal complete (record and payload checksums match,
 *     its length is exact; journals of the earlier format, one range, too):
 *     if the model's runs hold exactly the new bytes (their checksum is in
 *     the journal), the edit was written completely: fdatasync, then the
 *     journal is removed (+ directory fsync): the model is the new
 *     version.  Otherwise the edit may have been partly written, so the
 *     old bytes are written back, fdatasync, then the journal is removed
 *     (+ directory fsync): the model is the old version.  If the model's
 *     size is not the one the journal records, the journal belongs to
 *     another file; if its run table is not one gguf_commit writes, it
 *     was not written by gguffs: nothing is done, GGUF_E_INVAL.
 *   - journal incomplete: it was never made durable, so the model was not
 *     touched: it is removed.
 *   - journal idle (kept between edits, see gguf_commit): removed, except
 *     in GGUF_RECOVER_FIX_LIVE mode, which keeps it for the next edit.
 *   - MODEL.gguffs-new: a rewrite that did not reach its rename; the model
 *     is the old version: it is removed.
 * Idempotent: a crash during gguf_recover is recovered by the next call.
 *
 * In GGUF_RECOVER_CHECK mode (a read-only mount) nothing is written,
 * created or removed.  The answer says whether the model can be read as
 * it is: GGUF_E_INTERRUPTED (diag says why) when a complete journal is
 * there and the model's range is not the new bytes (the model may be
 * partly written until a FIX run rolls it back); GGUF_OK when it is (the
 * edit is complete, only its journal is left);
 * GGUF_E_INVAL when that journal belongs to another file, as FIX would
 * answer; otherwise GGUF_OK — an incomplete journal or a leftover new
 * file do not affect the model.
 *
 * *what (cap bytes, may be NULL) is set to a short description of what was
 * done (FIX) or found (CHECK), "" if nothing.  A model that does not exist
 * is not an error here (nothing is done).
 */
enum gguf_err gguf_recover(const char *path, enum gguf_recover_mode mode,
                           char *what, size_t cap, struct gguf_diag *d);

/*
 * Testing.  When gguf_edit_hooks is non-NULL (it is NULL unless a test
 * sets it), step() is called before every action of gguf_commit and
 * gguf_recover that changes what is on disk (each create, write, fsync,
 * rename, unlink), with a step number counting from 0 in each call and a
 * short name.  A test's step() may _exit() to simulate a crash there.
 * While hooks are set, writes of the journal, header and copied data are
 * split in two with a step between, so that torn writes are simulated too.
 * no_copy_file_range forces the buffered copy; no_clone makes a rewrite
 * copy the data even where it could clone it (gguf_clone_block still
 * answers).  Production code pays one pointer test per step.
 */
struct gguf_edit_hooks {
    void (*step)(unsigned n, const char *what, void *arg);
    void *arg;
    bool no_copy_file_range;
    bool no_clone;
};
extern struct gguf_edit_hooks *gguf_edit_hooks;

#endif

/*
 * gguf/journal.h — what commit.c and recover.c share: the names of the
 * files beside the model, the undo journal's format, and writes that are
 * steps (counted for the test hooks of gguf/commit.h).  Not for users of
 * the library: they call gguf_commit and gguf_recover.
 *
 * Journal format (all integers little-endian):
 *
 *   0  "GGUFFSJ2"        8  model size       16 lo (offset in the model)
 *   24 len (the span [lo, lo + len) that holds the runs)
 *   32 payload checksum  40 checksum of the new bytes of the runs
 *   48 number of runs n  56 checksum of bytes [0, 56)
 *   64 payload: the run table, n times (offset in the model, length),
 *      ascending and apart, inside the span; then the model's old bytes
 *      of each run, one run after another
 *
 * The runs are the pages of the span that the edit changes (gguf_commit
 * writes nothing else of the model): a value grown into the padding keeps
 * most of its bytes where they were, and its journal holds only what is
 * written over.  The journal file is exactly 64 + 16 n + (the runs'
 * lengths) bytes long, so a journal torn by a crash while it was written
 * reads as incomplete: a wrong length, or a checksum that does not match.
 *
 * Journals of earlier versions, "GGUFFSJ1", are one run: 24 is len, 48
 * flags (bit 0: the checksum of the new bytes at 40 is there), and the
 * payload the old bytes [lo, lo + len), the file exactly 64 + len bytes.
 * gguf_recover reads both; gguf_commit writes J2.
 *
 * An idle journal starts with "GGUFFSJ0" instead: the journal of an edit
 * that was committed, kept so that the next edit writes over its blocks
 * (cheaper than creating a file, fsyncing its directory and removing it at
 * every edit).  It guards nothing: recovery removes it like an incomplete
 * one, and gguf_commit_end removes it when the model will not be edited
 * any more.  The marker is written without an fsync: until it reaches the
 * disk, the journal reads as complete there, with the model's range
 * complete and new, which recovery keeps.  The checksum is an FNV-1a style hash
 * taking 8 bytes per step, with a multiplier and shift that spread every
 * input bit over the whole state.
 */
#ifndef GGUF_JOURNAL_H
#define GGUF_JOURNAL_H

#include "commit.h"

#define GGUF_JREC 64

/* The model's real path (symbolic links resolved), its directory and the
 * names beside it.  All allocated. */
struct gguf_jpaths {
    char *model, *dir, *journal, *newf;
};

/* GGUF_OK; GGUF_E_IO with errno kept (ENOENT: no model); GGUF_E_NOMEM. */
enum gguf_err gguf_jpaths_init(const char *path, struct gguf_jpaths *p,
                               struct gguf_diag *d);
void gguf_jpaths_free(struct gguf_jpaths *p);

/* A run of the model's bytes that an in-place edit writes. */
struct gguf_jrun {
    uint64_t off, len;
};

/* The journal of an edit of the model's runs (n of them, ascending and
 * apart, each in [lo, lo + len)): old and nw are the model's first bytes
 * before and after (indexed by offset in the model).  An allocated image
 * of *size bytes, the record first; NULL with errno ENOMEM. */
uint8_t *gguf_journal_build(uint64_t model_size, uint64_t lo, uint64_t len,
                            const struct gguf_jrun *runs, size_t n,
                            const uint8_t *old, const uint8_t *nw, size_t *size);

/* The checksum of the journal (and of gguf/overlay.h's files). */
uint64_t gguf_cksum(const uint8_t *p, size_t n);

/* A complete journal's record. */
struct gguf_jrec {
    uint64_t model_size, lo, len;
    bool has_new;           /* new_ck is there (J2, and J1 journals that have it) */
    uint64_t new_ck;        /* gguf_cksum of the new bytes of the runs, one after another */
    size_t nruns;
    struct gguf_jrun *runs; /* allocated (a J1 journal: one run, [lo, lo + len)) */
    uint64_t old_len;       /* the runs' lengths together: the payload's */
};

/* Whether there is a journal at path, and whether it is idle. */
enum gguf_jstate { GGUF_J_NONE, GGUF_J_IDLE, GGUF_J_BUSY, GGUF_J_ERROR /* errno */ };
enum gguf_jstate gguf_journal_state(const char *path);

/* Marks the journal open at fd idle (no fsync); false with errno. */
bool gguf_journal_set_idle(int fd);

/* Reads the journal at path: 1 if complete (record and runs in *r, to be
 * freed with gguf_jrec_free; the runs' old bytes, one after another, in
 * *payload, to be freed), 0 if incomplete, -1 on error (errno; EINVAL: a
 * complete journal whose run table is not one gguf_commit writes). */
int gguf_journal_read(const char *path, struct gguf_jrec *r, uint8_t **payload);
void gguf_jrec_free(struct gguf_jrec *r);

/* ---- steps ------------------------------------------------------------------ */

/* Steps of one gguf_commit / gguf_recover call, for the test hooks. */
struct gguf_steps {
    unsigned n;
};

/* Announces the next step to the hooks (gguf_edit_hooks), if any. */
void gguf_step(struct gguf_steps *s, const char *what);

/* Writes / reads exactly n bytes at off, retrying short transfers; false
 * with errno on failure (EIO for a file that ends early). */
bool gguf_pwrite_all(int fd, const void *p, size_t n, uint64_t off);
bool gguf_pread_all(int fd, void *p, size_t n, uint64_t off);

/* A write that is one step; split in two (a torn write) under test hooks. */
bool gguf_write_step(struct gguf_steps *s, const char *what, int fd,
                     const void *p, size_t n, uint64_t off);

/* fsync of a directory (making a create, rename or unlink durable); -1
 * with errno on failure. */
int gguf_fsync_dir(const char *dir);

/* Records an I/O failure of step ("what: strerror(err)") and returns
 * GGUF_E_IO. */
enum gguf_err gguf_io_fail(struct gguf_diag *d, const char *what, int err);

#endif

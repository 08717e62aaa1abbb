/*
 * fs/whandle.h — a meta/ file open for writing (whandle.c): open, create,
 * write, read, truncate, flush, release, and the pending list of created
 * keys and scratch files.  What an edit does to the model is commit.c's
 * (commit.h).
 *
 * A write handle buffers the file's text; nothing is parsed or written
 * until flush (close): then the text is parsed for the key's type and
 * committed, or an error (EINVAL) is returned from close with nothing
 * changed.  Scalars and strings are also checked as they are written, so
 * that `echo abc > meta/u32key` fails in write(), which shells report.
 *
 * Kinds of handle:
 *   WH_KEY      a key of the model, opened for writing
 *   WH_NEW      a key created in meta/ and not committed yet; listed as
 *               pending so that lookup, getattr and readdir find it
 *               before close
 *   WH_SCRATCH  a tool's temporary file (sed -i, editors: see
 *               gguf_name_is_scratch), pending, never committed: kept in
 *               memory until renamed over a key or removed, and can be
 *               opened again meanwhile; listed by readdir while it exists
 *   WH_DROPPED  a pending file removed while open: its release frees it
 *               and applies nothing
 *
 * Locks: ops_edit.c and ops_open.c take commit_mu around the functions marked (C) below.  A
 * handle's text and flags are under its mu (whandle.mu, below commit_mu):
 * write and read take it without commit_mu.  The pending and live lists
 * are under pend_mu, which ggfs_pending_* and wh_* take themselves:
 * lookup, getattr and readdir ask the pending list with the state lock
 * held (read).  ggfs_edit_stop runs at the end, after the session.
 */
#ifndef FS_WHANDLE_H
#define FS_WHANDLE_H

#include "fs.h"

/* ---- edits through meta/ (ops_edit.c, ops_open.c) ----
 * Functions marked (C) run with commit_mu held and may commit; they return
 * 0 or an errno. */

void ggfs_edit_stop(struct mount *fs);       /* frees handles never released */
int ggfs_edit_open(struct mount *fs, uint64_t idx, int flags, struct fuse_file_info *fi); /* (C) */
/* Opens a tool's scratch file again (any mode); EBUSY for a new key that
 * is being written, ENOENT if there is no such file. */
int ggfs_edit_reopen(struct mount *fs, uint64_t id, int flags, struct fuse_file_info *fi); /* (C) */
void ggfs_edit_create(fuse_req_t req, const char *name, struct fuse_file_info *fi);  /* (C) */
int ggfs_edit_write(struct fuse_file_info *fi, const char *buf, size_t size, off_t off);
void ggfs_edit_read(struct fuse_file_info *fi, fuse_req_t req, size_t size, off_t off);
/* The size of the text a handle holds: what fstat of it says (0 right
 * after an open with O_TRUNC), not the size of the committed value. */
size_t ggfs_edit_size(const struct fuse_file_info *fi);
/* Is a handle open for writing key id?  Its attributes are then given
 * with no cache time, so that the writer's lseek(SEEK_END) asks again
 * (with its handle: ggfs_edit_size). */
bool ggfs_edit_is_open(struct mount *fs, uint64_t id);
/* truncate of key idx (has_idx) or of an open handle (fi) */
int ggfs_edit_truncate(struct mount *fs, struct fuse_file_info *fi, uint64_t idx,
                       bool has_idx, off_t size);                                   /* (C) */
/* pid: the caller of close (fuse_req_ctx), to tell a dup'ed descriptor's
 * close from the last one */
int ggfs_edit_flush(struct mount *fs, struct fuse_file_info *fi, pid_t pid);        /* (C) */
void ggfs_edit_release(struct mount *fs, struct fuse_file_info *fi);                /* (C) */
/* unlink, rename and setxattr (user.gguf.type) of meta/ files: of a key
 * (committed at once), or of a pending file (a scratch renamed over a key
 * commits its text) */
int ggfs_edit_unlink(struct mount *fs, const char *name);                            /* (C) */
int ggfs_edit_rename(struct mount *fs, const char *from, const char *to);            /* (C) */
int ggfs_edit_settype(struct mount *fs, uint64_t id, const char *value, size_t size);/* (C) */
/* Size (and id) of a created key or scratch file not committed, found by
 * id or, if fname is not NULL, by file name; false if there is none. */
bool ggfs_pending_size(struct mount *fs, uint64_t id, const char *fname, uint64_t *id_out,
                       size_t *size);
bool ggfs_pending_exists(struct mount *fs, uint64_t id, const char *fname);
/* The pending file (a created key not committed yet, a scratch file) of
 * the smallest id >= from: its id and name (at most cap bytes with the
 * NUL); false when there is none (readdir of meta/ lists them). */
bool ggfs_pending_next(struct mount *fs, uint64_t from, uint64_t *id, char *name, size_t cap);

/* ---- the handles (whandle.c and commit.c) ---- */

#define MAX_TEXT (256u << 20)      /* largest text a write handle holds */

enum wh_kind { WH_KEY, WH_NEW, WH_SCRATCH, WH_DROPPED };

/* How write() checks text as it arrives (fixed at open): a scalar once its
 * line is complete, a string's UTF-8, each complete line of an array of
 * numbers or bools. */
enum wh_check { CHECK_NONE, CHECK_SCALAR, CHECK_UTF8, CHECK_LINES };

struct whandle {
    struct mount *fs;               /* immutable */
    uint64_t id;                   /* immutable: key id, inode KV_BASE + id */
    char *fname;                   /* immutable: encoded file name */
    enum wh_check check_kind;      /* immutable */
    struct gguf_typedesc check;    /* immutable: the scalar type of CHECK_SCALAR,
                                      an element's of CHECK_LINES */

    enum wh_kind kind;             /* commit_mu */
    unsigned opens;                /* commit_mu: open file descriptions using it */
    bool typed;                    /* commit_mu: a new key's type set by setxattr */
    struct gguf_typedesc type;     /* commit_mu: that type */

    pthread_mutex_t mu;
    struct gguf_buf text;          /* mu */
    bool dirty;                    /* mu: text differs from what was committed */
    bool written;                  /* mu: write() or truncate() was called */
    bool bad;                      /* mu: a write was refused: never commit */
    size_t checked;                /* mu: CHECK_LINES: text before it is whole
                                      lines, each a valid element; CHECK_UTF8:
                                      valid UTF-8 ending at a character's start */
    _Atomic size_t size;           /* text.len, read without locks by getattr */

    struct whandle *next;          /* pend_mu: the pending list */
    struct glist link;             /* pend_mu: in fs->live */
};

/* whandle.c */
struct whandle *wh_new(struct mount *fs, uint64_t id, const char *fname, enum wh_kind kind);
void wh_free(struct whandle *h);
void wh_pending_add(struct whandle *h);
void wh_pending_remove(struct whandle *h);
/* The pending handle of id or (fname not NULL) of fname; NULL if none. */
struct whandle *wh_pending_find(struct mount *fs, uint64_t id, const char *fname);

#endif

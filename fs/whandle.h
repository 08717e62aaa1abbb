/*
 * fs/whandle.h — a meta/ file open for writing, inside fs/ (whandle.c,
 * commit.c).
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
 */
#ifndef FS_WHANDLE_H
#define FS_WHANDLE_H

#include "fs.h"

#define MAX_TEXT (256u << 20)      /* largest text a write handle holds */

enum wh_kind { WH_KEY, WH_NEW, WH_SCRATCH, WH_DROPPED };

/* How write() checks text as it arrives (fixed at open): a scalar once its
 * line is complete, a string's UTF-8, each complete line of an array of
 * numbers or bools. */
enum wh_check { CHECK_NONE, CHECK_SCALAR, CHECK_UTF8, CHECK_LINES };

struct whandle {
    struct ggfs *fs;               /* immutable */
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
                                      lines, each a valid element */
    _Atomic size_t size;           /* text.len, read without locks by getattr */

    struct whandle *next;          /* pend_mu: the pending list */
    struct glist link;             /* pend_mu: in fs->live */
};

/* whandle.c */
struct whandle *wh_new(struct ggfs *fs, uint64_t id, const char *fname, enum wh_kind kind);
void wh_free(struct whandle *h);
void wh_pending_add(struct whandle *h);
void wh_pending_remove(struct whandle *h);
/* The pending handle of id or (fname not NULL) of fname; NULL if none. */
struct whandle *wh_pending_find(struct ggfs *fs, uint64_t id, const char *fname);

/* commit.c: key i cannot be written (general.alignment, gguffs.padding:
 * EPERM); fname decodes to a valid new key name (gguf/kvedit.h). */
bool wh_is_reserved(const struct gguf_file *gf, uint64_t i);
bool wh_new_key_name(const char *fname, size_t len);

/* commit.c: applies a handle's text to the model (commit_mu and h->mu
 * held); 0 when there is nothing to apply. */
int wh_apply(struct whandle *h);

#endif

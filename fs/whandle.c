/*
 * fs/whandle.c — meta/ files open for writing (see whandle.h): open,
 * create, write, read, truncate, flush, release, and the pending list of
 * created keys and scratch files; applying a handle's text, and unlink,
 * rename and setxattr of meta/ files, as a new header that commit.c
 * commits.
 */
#include "fs.h"
#include "whandle.h"
#include "core/commit.h"
#include "core/nodes.h"
#include "notify.h"
#include "read.h"
#include "core/state.h"

#include "gguf/kvedit.h"
#include "gguf/names.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int edit_apply(struct whandle *h);

/* ---- the handle lists -------------------------------------------------------
 * Every live handle is listed (the kernel may never send a release for the
 * last ones: unmount, SIGTERM), so that they are freed at the end; created
 * keys and scratch files are also pending, so that lookup and getattr find
 * them before they are committed.  Both under pend_mu. */

struct whandle *wh_new(struct mount *fs, uint64_t id, const char *fname, enum wh_kind kind)
{
    struct whandle *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->fname = strdup(fname);
    if (!h->fname) {
        free(h);
        return NULL;
    }
    pthread_mutex_init(&h->mu, NULL);
    h->fs = fs;
    h->id = id;
    h->kind = kind;
    pthread_mutex_lock(&fs->pend_mu);
    glist_add(&fs->live, &h->link);
    pthread_mutex_unlock(&fs->pend_mu);
    return h;
}

void wh_free(struct whandle *h)
{
    struct mount *fs = h->fs;
    pthread_mutex_lock(&fs->pend_mu);
    glist_del(&h->link);
    pthread_mutex_unlock(&fs->pend_mu);
    pthread_mutex_destroy(&h->mu);
    gguf_buf_free(&h->text);
    free(h->fname);
    free(h);
}

void wh_pending_add(struct whandle *h)
{
    pthread_mutex_lock(&h->fs->pend_mu);
    h->next = h->fs->pending;
    h->fs->pending = h;
    pthread_mutex_unlock(&h->fs->pend_mu);
}

void wh_pending_remove(struct whandle *h)
{
    pthread_mutex_lock(&h->fs->pend_mu);
    for (struct whandle **pp = &h->fs->pending; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    pthread_mutex_unlock(&h->fs->pend_mu);
    /* meta/ listed it: a listing the kernel keeps (fs->no_opendir) must
     * not show it once gone */
    if (h->fs->no_opendir)
        ggfs_notify_inode(h->fs, INO_META);
}

static struct whandle *find_locked(struct mount *fs, uint64_t id, const char *fname)
{
    struct whandle *h = fs->pending;
    while (h && !(fname ? strcmp(h->fname, fname) == 0 : h->id == id))
        h = h->next;
    return h;
}

struct whandle *wh_pending_find(struct mount *fs, uint64_t id, const char *fname)
{
    pthread_mutex_lock(&fs->pend_mu);
    struct whandle *h = find_locked(fs, id, fname);
    pthread_mutex_unlock(&fs->pend_mu);
    return h;
}

bool ggfs_pending_size(struct mount *fs, uint64_t id, const char *fname, uint64_t *id_out,
                       size_t *size)
{
    /* under pend_mu: a handle is taken off the list before it is freed */
    pthread_mutex_lock(&fs->pend_mu);
    struct whandle *h = find_locked(fs, id, fname);
    if (h) {
        *size = atomic_load(&h->size);
        if (id_out)
            *id_out = h->id;
    }
    pthread_mutex_unlock(&fs->pend_mu);
    return h != NULL;
}

bool ggfs_edit_is_open(struct mount *fs, uint64_t id)
{
    bool found = false;
    pthread_mutex_lock(&fs->pend_mu);
    for (struct glist *l = fs->live.next; l != &fs->live && !found; l = l->next)
        found = GLIST_ENTRY(l, struct whandle, link)->id == id;
    pthread_mutex_unlock(&fs->pend_mu);
    return found;
}

bool ggfs_pending_exists(struct mount *fs, uint64_t id, const char *fname)
{
    return wh_pending_find(fs, id, fname) != NULL;
}

bool ggfs_pending_next(struct mount *fs, uint64_t from, uint64_t *id, char *name, size_t cap)
{
    pthread_mutex_lock(&fs->pend_mu);
    const struct whandle *best = NULL;
    for (const struct whandle *h = fs->pending; h; h = h->next)
        if (h->id >= from && (!best || h->id < best->id) && strlen(h->fname) < cap)
            best = h;
    if (best) {
        *id = best->id;
        strcpy(name, best->fname);
    }
    pthread_mutex_unlock(&fs->pend_mu);
    return best != NULL;
}

void ggfs_edit_stop(struct mount *fs)
{
    fs->pending = NULL;
    while (!glist_empty(&fs->live))
        wh_free(GLIST_ENTRY(fs->live.next, struct whandle, link));
}

/* ---- open, create ------------------------------------------------------------ */

static void set_fh(struct fuse_file_info *fi, struct whandle *h)
{
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->direct_io = 1;        /* reads and writes go through the handle */
}

int ggfs_edit_open(struct mount *fs, uint64_t idx, int flags, struct fuse_file_info *fi)
{
    const struct state *st = fs->st;
    const struct gguf_file *gf = st_meta(st);
    const char *why, *fname = st->meta_names.names[idx];
    int w = core_write_check(fs, &why);
    if (w)
        return core_edit_refused(fs, fname, w, why);
    if (core_key_is_reserved(gf, idx))
        return core_edit_refused(fs, fname, EPERM, "this key decides the file's layout");
    if (!gguf_kv_uniform(gf, &gf->kv[idx]))
        return core_edit_refused(fs, fname, EPERM, "an array whose elements differ in type "
                                 "cannot be written as text");
    struct whandle *h = wh_new(fs, st->kv_id[idx], st->meta_names.names[idx], WH_KEY);
    if (!h)
        return ENOMEM;
    core_edit_ahead(fs, st);
    gguf_kv_typedesc(gf, &gf->kv[idx], &h->check);
    if (h->check.depth == 1) {
        h->check_kind = h->check.levels[0] == GGUF_STRING ? CHECK_UTF8 : CHECK_SCALAR;
    } else if (h->check.depth == 2 && h->check.levels[1] != GGUF_STRING) {
        /* an array of numbers or bools: each line is checked as an element */
        h->check_kind = CHECK_LINES;
        h->check = (struct gguf_typedesc){ .depth = 1, .levels = { h->check.levels[1] } };
    }
    if (flags & O_TRUNC) {
        h->dirty = true;
    } else if (gguf_render_kv(gf, &gf->kv[idx], &h->text) != GGUF_OK) {
        wh_free(h);
        return ENOMEM;
    }
    h->checked = h->text.len;     /* the value as it is: valid lines */
    atomic_store(&h->size, h->text.len);
    h->opens = 1;
    set_fh(fi, h);
    return 0;
}

int ggfs_edit_reopen(struct mount *fs, uint64_t id, int flags, struct fuse_file_info *fi)
{
    struct whandle *h = wh_pending_find(fs, id, NULL);
    if (!h)
        return ENOENT;
    if (h->kind != WH_SCRATCH)
        return EBUSY;         /* a new key being written by someone else */
    pthread_mutex_lock(&h->mu);
    if (flags & O_TRUNC) {
        h->text.len = 0;
        atomic_store(&h->size, 0);
    }
    pthread_mutex_unlock(&h->mu);
    h->opens++;
    set_fh(fi, h);
    return 0;
}

void ggfs_edit_create(fuse_req_t req, const char *name, struct fuse_file_info *fi)
{
    struct mount *fs = req_fs(req);
    const struct state *st = fs->st;
    const char *why;
    int w = core_write_check(fs, &why);
    if (w)
        return (void)fuse_reply_err(req, core_edit_refused(fs, name, w, why));
    if (strcmp(name, "general.alignment") == 0 || strcmp(name, "gguffs.padding") == 0)
        return (void)fuse_reply_err(req, core_edit_refused(fs, name, EPERM, "this key "
                                                           "decides the file's layout"));
    if (core_ntab_find(&st->meta_names, name) >= 0 || wh_pending_find(fs, 0, name))
        return (void)fuse_reply_err(req, EEXIST);
    /* A tool's temporary file, or a new key whose name must follow the
     * GGUF rule (scratch names first: sed's may look like a key). */
    bool scratch = gguf_name_is_scratch(name, strlen(name));
    if (!scratch && !core_key_name_new(name, strlen(name)))
        return (void)fuse_reply_err(req, core_edit_refused(fs, name, EINVAL, "not a valid new "
                                                           "key name ('.'-separated "
                                                           "lower_snake_case segments)"));
    int64_t id = core_key_id(fs, name);
    struct whandle *h = id < 0 ? NULL : wh_new(fs, (uint64_t)id, name,
                                               scratch ? WH_SCRATCH : WH_NEW);
    if (!h)
        return (void)fuse_reply_err(req, ENOMEM);
    h->dirty = true;
    h->opens = 1;
    wh_pending_add(h);
    set_fh(fi, h);
    struct fuse_entry_param ep;
    memset(&ep, 0, sizeof ep);
    ep.ino = KV_BASE + (uint64_t)id;
    ep.generation = 1;
    core_stat_pending(st, ep.ino, 0, &ep.attr);
    /* timeouts 0: the file's size and existence change at close */
    if (fuse_reply_create(req, &ep, fi) != 0) {
        wh_pending_remove(h);
        wh_free(h);
    }
}

/* ---- text ---------------------------------------------------------------------- */

/* Makes the text at least end bytes long (a hole reads as zeros). */
static int grow(struct whandle *h, size_t end)
{
    if (end <= h->text.len)
        return 0;
    if (end > h->text.cap) {
        size_t nc = h->text.cap ? h->text.cap : 256;
        while (nc < end)
            nc *= 2;
        char *p = realloc(h->text.data, nc);
        if (!p)
            return ENOMEM;
        h->text.data = p;
        h->text.cap = nc;
    }
    memset(h->text.data + h->text.len, 0, end - h->text.len);
    h->text.len = end;
    return 0;
}

/* A scalar's text is one short line: once it is complete, parse it now so
 * that `echo abc > meta/u8key` fails in write(), which shells report (they
 * ignore errors from close).  A string must be UTF-8: a sequence that can
 * no longer become valid fails here too. */
static int check_text(struct whandle *h)
{
    const char *t = h->text.data;
    size_t n = h->text.len;
    if (h->check_kind == CHECK_UTF8) {
        /* from where the text was last valid (a character's start), so
         * that a long text written in many pieces is checked once */
        bool truncated;
        size_t a = h->checked, ok = gguf_utf8_valid(t + a, n - a, &truncated);
        if (ok != n - a && !truncated)
            return core_edit_refused(h->fs, h->fname, EINVAL, "not UTF-8");
        h->checked = a + ok;
    }
    if (h->check_kind == CHECK_LINES) {
        /* each whole line not checked yet must parse as an element, so
         * that `echo garbage >> meta/tokenizer.ggml.scores` fails in
         * write(); lines checked once are not parsed again */
        const char *nl;
        size_t a = h->checked;
        for (; a < n && (nl = memchr(t + a, '\n', n - a)); a = (size_t)(nl - t) + 1) {
            struct gguf_buf bin = { 0 };
            struct gguf_diag d;
            struct gguf_enc enc = { 0 };
            enum gguf_err e = gguf_parse_value(&enc, &h->check, t + a, (size_t)(nl - t) + 1 - a,
                                               &bin, &d);
            gguf_buf_free(&bin);
            if (e) {
                char line[1024];
                gguf_diag_format(&d, NULL, line, sizeof line);
                return core_edit_refused(h->fs, h->fname, EINVAL, line);
            }
        }
        h->checked = a;
    }
    if (h->check_kind == CHECK_SCALAR && n && t[n - 1] == '\n') {
        struct gguf_buf bin = { 0 };
        struct gguf_diag d;
        struct gguf_enc enc = { 0 };
        enum gguf_err e = gguf_parse_value(&enc, &h->check, t, n, &bin, &d);
        gguf_buf_free(&bin);
        if (e) {
            char line[1024];
            gguf_diag_format(&d, NULL, line, sizeof line);
            return core_edit_refused(h->fs, h->fname, EINVAL, line);
        }
    }
    return 0;
}

int ggfs_edit_write(struct fuse_file_info *fi, const char *buf, size_t size, off_t off)
{
    struct whandle *h = (struct whandle *)(uintptr_t)fi->fh;
    if (off < 0 || (uint64_t)off > MAX_TEXT || size > MAX_TEXT - (uint64_t)off)
        return EFBIG;
    if (size == 0)
        return 0;
    pthread_mutex_lock(&h->mu);
    int e = grow(h, (size_t)off + size);
    if (!e) {
        if ((size_t)off < h->checked) {
            /* a line checked before is written again: check from its start */
            const char *t = h->text.data;
            size_t a = (size_t)off;
            while (a > 0 && t[a - 1] != '\n')
                a--;
            h->checked = a;
        }
        memcpy(h->text.data + off, buf, size);
        atomic_store(&h->size, h->text.len);
        h->dirty = true;
        h->written = true;
        if ((e = check_text(h)))
            h->bad = true;
    }
    pthread_mutex_unlock(&h->mu);
    return e;
}

size_t ggfs_edit_size(const struct fuse_file_info *fi)
{
    const struct whandle *h = (const struct whandle *)(uintptr_t)fi->fh;
    return atomic_load(&h->size);
}

void ggfs_edit_read(struct fuse_file_info *fi, fuse_req_t req, size_t size, off_t off)
{
    struct whandle *h = (struct whandle *)(uintptr_t)fi->fh;
    pthread_mutex_lock(&h->mu);
    ggfs_reply_slice(req, h->text.data, h->text.len, size, off);
    pthread_mutex_unlock(&h->mu);
}

int ggfs_edit_truncate(struct mount *fs, struct fuse_file_info *fi, uint64_t idx,
                       bool has_idx, off_t size)
{
    const char *why;
    int w = fi || !has_idx ? 0 : core_write_check(fs, &why);
    if (w)
        return core_edit_refused(fs, fs->st->meta_names.names[idx], w, why);
    if (size < 0 || (uint64_t)size > MAX_TEXT)
        return EFBIG;
    struct whandle *h = fi ? (struct whandle *)(uintptr_t)fi->fh : NULL;
    bool temp = false;
    if (!h) {
        /* truncate(path): a handle of our own, applied at once */
        if (!has_idx)
            return ENOENT;
        struct fuse_file_info tfi = { .flags = O_WRONLY };
        int e = ggfs_edit_open(fs, idx, O_WRONLY, &tfi);
        if (e)
            return e;
        h = (struct whandle *)(uintptr_t)tfi.fh;
        temp = true;
    }
    pthread_mutex_lock(&h->mu);
    int e = 0;
    if ((size_t)size > h->text.len)
        e = grow(h, (size_t)size);
    else
        h->text.len = (size_t)size;
    if (h->checked > h->text.len) {
        /* the last line kept may be cut: checked again when whole */
        size_t a = h->text.len;
        while (a > 0 && h->text.data[a - 1] != '\n')
            a--;
        h->checked = a;
    }
    if (!e) {
        atomic_store(&h->size, h->text.len);
        h->dirty = true;
        h->bad = false;
        h->written = true;
        if (temp)
            e = edit_apply(h);
    }
    pthread_mutex_unlock(&h->mu);
    if (temp)
        wh_free(h);
    return e;
}

/* ---- close ------------------------------------------------------------------- */

/* true if process pid still has a descriptor open on inode ino of this
 * mount.  At a flush the descriptor being closed is already gone from its
 * table, so this tells a close of one of several descriptors (dup2) from
 * the last one.  false when it cannot tell (no /proc, unknown mount id). */
static bool open_elsewhere(const struct mount *fs, pid_t pid, uint64_t ino)
{
    if (pid <= 0 || fs->mnt_id < 0)
        return false;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fdinfo", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        char buf[256];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        const char *m = strstr(buf, "\nmnt_id:"), *i = strstr(buf, "\nino:");
        found = m && i && strtoll(m + 8, NULL, 10) == fs->mnt_id &&
                strtoull(i + 5, NULL, 10) == ino;
    }
    closedir(d);
    return found;
}

int ggfs_edit_flush(struct mount *fs, struct fuse_file_info *fi, pid_t pid)
{
    struct whandle *h = (struct whandle *)(uintptr_t)fi->fh;
    pthread_mutex_lock(&h->mu);
    /* Shells open with O_TRUNC, dup2 and close the first descriptor before
     * writing through the second: a flush before any write is the end of
     * the edit (an emptied value, a new empty key) only when no other
     * descriptor of the caller refers to the file.  Committing the empty
     * value before the real one would cost a rewrite of the model twice. */
    bool was_dirty = h->dirty;
    int e = 0;
    if (h->written || (h->dirty && !open_elsewhere(fs, pid, KV_BASE + h->id)))
        e = edit_apply(h);
    if (e)
        h->dirty = false;     /* reported by this close; release adds nothing */
    pthread_mutex_unlock(&h->mu);
    if (!e && h->kind == WH_KEY)
        wh_pending_remove(h); /* a new key just committed */
    if (was_dirty && !e)
        ggfs_notify_wait_all(fs);
    return e;
}

void ggfs_edit_release(struct mount *fs, struct fuse_file_info *fi)
{
    (void)fs;
    struct whandle *h = (struct whandle *)(uintptr_t)fi->fh;
    if (--h->opens > 0 || h->kind == WH_SCRATCH)
        return;       /* a scratch stays (pending) until renamed or removed */
    pthread_mutex_lock(&h->mu);
    if (h->kind != WH_DROPPED)
        edit_apply(h);  /* close() already reported a flush error; what still fails is lost */
    pthread_mutex_unlock(&h->mu);
    wh_pending_remove(h);
    wh_free(h);
}

/* ---- applying a handle's text; unlink, rename, setxattr ------------------- */

/* Applies a handle's text to the model (commit_mu and h->mu held); 0
 * when there is nothing to apply. */
static int edit_apply(struct whandle *h)
{
    if (!h->dirty || h->kind == WH_SCRATCH || h->kind == WH_DROPPED)
        return 0;
    if (h->bad)
        return EINVAL;
    struct mount *fs = h->fs;
    core_edit_ahead(fs, fs->st);
    const struct gguf_file *gf = st_meta(fs->st);
    struct gguf_buf hdr = { 0 }, key = { 0 };
    struct gguf_diag d;
    enum gguf_err e;
    if (h->kind == WH_NEW) {
        e = gguf_kvedit_decode_name(h->fname, strlen(h->fname), true, &key, &d);
        if (!e && core_key_index(fs->st, h->id) >= 0)
            e = GGUF_E_EXIST;   /* someone committed the same name meanwhile */
        if (!e)
            e = gguf_kvedit_create(gf, key.data, key.len, h->typed ? &h->type : NULL,
                                   h->text.data, h->text.len, &hdr, &d);
    } else {
        int64_t i = core_key_index(fs->st, h->id);   /* < 0: deleted while open */
        e = i < 0 ? GGUF_E_NOENT
                  : gguf_kvedit_set(gf, (uint64_t)i, h->text.data, h->text.len, &hdr, &d);
    }
    gguf_buf_free(&key);
    int r = core_commit_header(fs, e, &hdr, &d, h->fname, "edit");
    if (!r) {
        h->dirty = false;
        h->kind = WH_KEY;
    }
    return r;
}

/* ---- unlink, rename, setxattr ------------------------------------------------ */

int ggfs_edit_unlink(struct mount *fs, const char *name)
{
    const char *why;
    int w = core_write_check(fs, &why);
    if (w == EROFS && fs->read_only)
        return core_edit_refused(fs, name, w, why);
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
    int64_t i = core_ntab_find(&fs->st->meta_names, name);
    if (i < 0)
        return ENOENT;
    if (w)
        return core_edit_refused(fs, name, w, why);
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_delete(st_meta(fs->st), (uint64_t)i, &hdr, &d);
    return core_commit_header(fs, e, &hdr, &d, name, "delete");
}

/* rename(scratch, key): the way sed -i and editors save.  The scratch's
 * text becomes the key's value (parsed for the key's type, or inferred for
 * a new key). */
static int rename_scratch(struct mount *fs, struct whandle *p, const char *to)
{
    if (p->opens)
        return EBUSY;
    int64_t j = core_ntab_find(&fs->st->meta_names, to);
    struct whandle *h;
    int e;
    if (j >= 0) {
        struct fuse_file_info fi = { .flags = O_WRONLY | O_TRUNC };
        e = ggfs_edit_open(fs, (uint64_t)j, O_WRONLY | O_TRUNC, &fi);
        if (e)
            return e;
        h = (struct whandle *)(uintptr_t)fi.fh;
    } else {
        if (!core_key_name_new(to, strlen(to)))
            return core_edit_refused(fs, to, EINVAL, "not a valid new key name ('.'-separated "
                                     "lower_snake_case segments)");
        int64_t id = core_key_id(fs, to);
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
    e = edit_apply(h);
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

int ggfs_edit_rename(struct mount *fs, const char *from, const char *to)
{
    const char *why;
    int w = core_write_check(fs, &why);
    if (w)
        return core_edit_refused(fs, to, w, why);
    struct whandle *p = wh_pending_find(fs, 0, from);
    if (p && p->kind == WH_SCRATCH)
        return rename_scratch(fs, p, to);
    const struct state *st = fs->st;
    int64_t i = core_ntab_find(&st->meta_names, from);
    if (i < 0)
        return p ? EBUSY : ENOENT;
    if (strcmp(from, to) == 0)
        return 0;
    /* a new name must follow the rule; an existing one is kept as it is */
    bool exists = core_ntab_find(&st->meta_names, to) >= 0;
    struct gguf_buf key = { 0 }, hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_decode_name(to, strlen(to), !exists, &key, &d);
    if (!e)
        e = gguf_kvedit_rename(st_meta(st), (uint64_t)i, key.data ? key.data : "", key.len,
                               &hdr, &d);
    gguf_buf_free(&key);
    return core_commit_header(fs, e, &hdr, &d, from, "rename");
}

int ggfs_edit_settype(struct mount *fs, uint64_t id, const char *value, size_t size)
{
    const char *why;
    int w = core_write_check(fs, &why);
    const char *fname = id < fs->ids.n ? fs->ids.names[id] : "?";
    if (w == EROFS && fs->read_only)
        return core_edit_refused(fs, fname, w, why);
    struct gguf_typedesc td;
    if (!gguf_typedesc_parse(value, size, &td))
        return core_edit_refused(fs, fname, EINVAL, "user.gguf.type: not a type");
    struct whandle *p = wh_pending_find(fs, id, NULL);
    if (p) {                 /* a new key: the type to parse it as at close */
        p->type = td;
        p->typed = true;
        return 0;
    }
    int64_t i = core_key_index(fs->st, id);
    if (i < 0)
        return ENOENT;
    if (w)
        return core_edit_refused(fs, fname, w, why);
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_retype(st_meta(fs->st), (uint64_t)i, &td, &hdr, &d);
    return core_commit_header(fs, e, &hdr, &d, fs->st->meta_names.names[i], "set type");
}

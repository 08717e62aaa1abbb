/*
 * fs/edit.c — metadata edits through meta/: write handles, create, unlink,
 * rename, setxattr user.gguf.type, truncate; and the commit that applies
 * an edit to MODEL.gguf (through gguf/edit, the one writer of the file).
 *
 * Locking: handlers that only read take g_fs.lock for reading (ops.c).
 * Handlers that may commit take g_fs.commit_mu instead: while it is held
 * nobody else can swap the state, so ST is stable without the read lock;
 * the swap itself takes g_fs.lock for writing, which waits for readers of
 * the old state to finish.  Readers are never blocked by a commit in
 * progress (a rewrite of a big model can take a while), only by the swap.
 *
 * A write handle buffers the file's text; nothing is parsed or written
 * until flush (close): then the text is parsed for the key's type, and an
 * error (EINVAL) is returned from close with nothing changed.
 */
#include "fs.h"

#include "gguf/edit.h"
#include "gguf/names.h"
#include "gguf/value.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define MAX_TEXT (256u << 20)      /* largest text a write handle holds */

struct whandle {
    pthread_mutex_t mu;
    uint64_t id;                   /* key id: inode KV_BASE + id */
    char *fname;                   /* encoded file name */
    struct gguf_buf text;
    bool dirty;
    bool written;                  /* write() was called (not just O_TRUNC) */
    bool bad;                      /* a write was refused: never commit */
    struct gguf_typedesc check;    /* scalar type to check writes against */
    bool checked;
    bool utf8;                     /* a string: check writes are UTF-8 */
    bool created;                  /* a new key, not in the file yet */
    bool scratch;                  /* not a key name: a tool's temporary file
                                      (sed -i, editors), kept in memory until
                                      renamed over a key or removed */
    unsigned opens;                /* open file descriptions using it */
    _Atomic size_t size;           /* text.len, for getattr of pending files */
    bool typed;                    /* created, with a type from setxattr */
    struct gguf_typedesc type;
    struct whandle *next;          /* in the pending list (created ones) */
    struct whandle *lprev, *lnext; /* every live handle (freed at unmount) */
};

/* Created keys not committed yet, so that getattr/lookup of a new file work
 * between create and close.  Protected by pend_mu (readers look too). */
static struct whandle *pending;
static pthread_mutex_t pend_mu = PTHREAD_MUTEX_INITIALIZER;
/* Every live handle: the kernel may never send a release for the last
 * ones (unmount, SIGTERM), so they are freed at the end. Under pend_mu. */
static struct whandle *live;

static void handle_free(struct whandle *h);

void ggfs_edit_stop(void)
{
    /* the session is over: handles whose release never came */
    pending = NULL;
    while (live)
        handle_free(live);
}

/* ---- commit ----------------------------------------------------------------- */

/* Writes the header for kvs into the model, re-opens it and swaps the new
 * state in.  Called with commit_mu held.  Returns 0 or an errno; on error
 * the model and the state are unchanged. */
static int commit(const struct gguf_newkv *kvs, size_t n, const char *why)
{
    const struct gguf_file *gf = ST->gf;
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    if (gguf_header_build(gf, kvs, n, &hdr, &d) != GGUF_OK) {
        gguf_buf_free(&hdr);
        fuse_log(FUSE_LOG_ERR, "gguffs: %s: %s: %s\n", g_fs.model_path, why, d.msg);
        return EINVAL;
    }
    bool in_place;
    enum gguf_err ce = gguf_commit(g_fs.model_real, gf, (const uint8_t *)hdr.data,
                                   hdr.len, &in_place, &d);
    gguf_buf_free(&hdr);
    if (ce != GGUF_OK)
        fuse_log(FUSE_LOG_ERR, "gguffs: %s: %s: %s\n", g_fs.model_path, why, d.msg);

    /* Re-open whatever the commit returned: the file on disk is the truth.
     * (Other shards of a split model are re-opened too: cheap, headers.) */
    struct shard *shards;
    unsigned n_shards;
    char err[512];
    int e = ggfs_open_model(g_fs.model_real, &shards, &n_shards, err, sizeof err);
    if (e) {
        fuse_log(FUSE_LOG_ERR, "gguffs: after %s: %s\n", why, err);
        return EIO;
    }
    struct state *ns;
    e = ggfs_state_new(shards, n_shards, g_fs.model_path, ST->gen + 1, &ns);
    if (e) {
        ggfs_shards_free(shards, n_shards);
        return e;
    }
    struct state *old = ST;
    pthread_rwlock_wrlock(&g_fs.lock);
    g_fs.st = ns;
    pthread_rwlock_unlock(&g_fs.lock);

    /* Tell the kernel (fs/notify.c): info and model.gguf of the new
     * version are new inodes, found by the next lookup while open ones keep
     * theirs (see fs.h); every name and file of the old meta/ may have
     * changed (values, sizes, which names exist).  The commit returns once
     * the root names are invalidated; flush also waits for meta/'s. */
    ggfs_notify_root_entry("info");
    ggfs_notify_root_entry("model.gguf");
    for (uint64_t i = 0; i < old->gf->n_kv; i++) {
        ggfs_notify_meta_entry(old->meta_names.names[i]);
        ggfs_notify_inode(KV_BASE + old->kv_id[i]);
    }
    for (uint64_t i = 0; i < ns->gf->n_kv; i++)
        ggfs_notify_meta_entry(ns->meta_names.names[i]);
    ggfs_notify_inode(INO_META);
    ggfs_notify_wait_root();
    /* The old version lives on while info or model.gguf of it is open.
     * Freeing it closes its descriptor; after a rewrite that is the last
     * reference to the old file, and the file system then frees its blocks
     * (a second for 4 GB): ggfs_state_put does that on the notifier thread,
     * not while the writer waits. */
    ggfs_state_put(old);
    return ce == GGUF_OK ? 0 : EIO;
}

/* All keys of the current file as a new list (caller edits it). */
static struct gguf_newkv *current_kvs(size_t extra)
{
    const struct gguf_file *gf = ST->gf;
    struct gguf_newkv *kvs = calloc(gf->n_kv + extra + 1, sizeof *kvs);
    if (!kvs)
        return NULL;
    for (uint64_t i = 0; i < gf->n_kv; i++)
        kvs[i] = gguf_newkv_of(gf, i);
    return kvs;
}

static bool is_alignment(const struct gguf_file *gf, uint64_t i)
{
    const struct gguf_kv *kv = &gf->kv[i];
    return kv->key_len == 17 && memcmp(gf->hdr + kv->key_off, "general.alignment", 17) == 0;
}

/* Type inference for a new key, as gguf-py does: true/false -> bool, an
 * integer -> i32 (i64 if it does not fit), a number -> f32, else string. */
static void infer_type(const char *s, size_t len, struct gguf_typedesc *t)
{
    char buf[64];
    t->depth = 1;
    t->levels[0] = GGUF_STRING;
    if (len && s[len - 1] == '\n')
        len--;
    if (len == 0 || len >= sizeof buf || memchr(s, '\n', len))
        return;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (strcmp(buf, "true") == 0 || strcmp(buf, "false") == 0) {
        t->levels[0] = GGUF_BOOL;
        return;
    }
    char *end;
    const char *digits = buf[0] == '-' || buf[0] == '+' ? buf + 1 : buf;
    if (*digits >= '0' && *digits <= '9') {
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (*end == '\0' && errno == 0) {
            t->levels[0] = v >= INT32_MIN && v <= INT32_MAX ? GGUF_I32 : GGUF_I64;
            return;
        }
    }
    if (buf[0] == ' ' || buf[0] == '\t')
        return;
    errno = 0;
    double d = strtod(buf, &end);
    if (*end == '\0' && end != buf && (errno == 0 || d == 0 || isinf(d)))
        t->levels[0] = GGUF_F32;
}

/* Parses text for type t into bin (appended); EINVAL with a log line when
 * it does not parse. */
static int parse_text(const struct gguf_typedesc *t, const char *text, size_t len,
                      struct gguf_buf *bin, const char *fname)
{
    struct gguf_diag d;
    if (gguf_parse_value(&ST->gf->enc, t, text, len, bin, &d) != GGUF_OK) {
        fuse_log(FUSE_LOG_ERR, "gguffs: meta/%s: %s (at byte %llu of the text)\n",
                 fname, d.msg, (unsigned long long)d.offset);
        return EINVAL;
    }
    return 0;
}

/* Decodes fname; the raw key name goes to out.  EINVAL for a name that is
 * not one meta/ could show, or (when need_valid) not a valid new key name. */
static int decode_key(const char *fname, struct gguf_buf *out, bool need_valid)
{
    unsigned dup;
    if (!gguf_name_decode(fname, strlen(fname), out, &dup) || dup != 1)
        return EINVAL;
    if (need_valid && !gguf_key_name_valid(out->data ? out->data : "", out->len))
        return EINVAL;
    return 0;
}

/* Applies the text of a write handle.  commit_mu held. */
static int apply_handle(struct whandle *h)
{
    if (!h->dirty || h->scratch)
        return 0;
    if (h->bad)
        return EINVAL;
    struct gguf_buf bin = { 0 }, key = { 0 };
    struct gguf_typedesc td;
    int e = 0;
    struct gguf_newkv *kvs = current_kvs(1);
    if (!kvs)
        return ENOMEM;
    size_t n = ST->gf->n_kv;
    if (h->created) {
        if (h->typed)
            td = h->type;
        else
            infer_type(h->text.data, h->text.len, &td);
        e = decode_key(h->fname, &key, true);
        if (!e && (int64_t)h->id < (int64_t)ST->n_ids && ST->id_kv[h->id] >= 0)
            e = EEXIST;     /* someone committed the same name meanwhile */
        if (!e)
            e = parse_text(&td, h->text.data, h->text.len, &bin, h->fname);
        if (!e) {
            kvs[n].key = key.data;
            kvs[n].key_len = key.len;
            kvs[n].type = td.levels[0];
            kvs[n].val = (const uint8_t *)bin.data;
            kvs[n].val_len = bin.len;
            n++;
        }
    } else {
        if (h->id >= ST->n_ids || ST->id_kv[h->id] < 0) {
            e = ENOENT;     /* the key was deleted while this was open */
        } else {
            uint64_t i = (uint64_t)ST->id_kv[h->id];
            if (is_alignment(ST->gf, i)) {
                e = EPERM;
            } else {
                gguf_kv_typedesc(ST->gf, &ST->gf->kv[i], &td);
                e = parse_text(&td, h->text.data, h->text.len, &bin, h->fname);
                if (!e) {
                    kvs[i].val = (const uint8_t *)bin.data;
                    kvs[i].val_len = bin.len;
                }
            }
        }
    }
    if (!e)
        e = commit(kvs, n, "edit");
    if (!e) {
        h->dirty = false;
        h->created = false;
    }
    free(kvs);
    gguf_buf_free(&bin);
    gguf_buf_free(&key);
    return e;
}

/* true if s is valid UTF-8, or valid but for an incomplete last sequence. */
static bool utf8_prefix_ok(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2
                 : c >= 0xf0 && c <= 0xf4 ? 3 : 9;
        if (k == 9)
            return false;
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n)
                return true;           /* may be completed by the next write */
            unsigned d = p[i + j];
            if ((d & 0xc0) != 0x80)
                return false;
            if (j == 1 && ((c == 0xe0 && d < 0xa0) || (c == 0xed && d > 0x9f) ||
                           (c == 0xf0 && d < 0x90) || (c == 0xf4 && d > 0x8f)))
                return false;          /* overlong, surrogate, > U+10FFFF */
        }
        i += k + 1;
    }
    return true;
}

/* ---- handles ------------------------------------------------------------------ */

static struct whandle *handle_new(uint64_t id, const char *fname)
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
    h->id = id;
    pthread_mutex_lock(&pend_mu);
    h->lnext = live;
    if (live)
        live->lprev = h;
    live = h;
    pthread_mutex_unlock(&pend_mu);
    return h;
}

static void handle_free(struct whandle *h)
{
    pthread_mutex_lock(&pend_mu);
    if (h->lprev)
        h->lprev->lnext = h->lnext;
    else
        live = h->lnext;
    if (h->lnext)
        h->lnext->lprev = h->lprev;
    pthread_mutex_unlock(&pend_mu);
    pthread_mutex_destroy(&h->mu);
    gguf_buf_free(&h->text);
    free(h->fname);
    free(h);
}

static void pending_remove(struct whandle *h)
{
    pthread_mutex_lock(&pend_mu);
    for (struct whandle **pp = &pending; *pp; pp = &(*pp)->next)
        if (*pp == h) {
            *pp = h->next;
            break;
        }
    pthread_mutex_unlock(&pend_mu);
}

static struct whandle *pending_find(uint64_t id, const char *fname)
{
    struct whandle *h;
    pthread_mutex_lock(&pend_mu);
    for (h = pending; h; h = h->next)
        if (fname ? strcmp(h->fname, fname) == 0 : h->id == id)
            break;
    pthread_mutex_unlock(&pend_mu);
    return h;
}

struct whandle *ggfs_pending_by_id(uint64_t id) { return pending_find(id, NULL); }
struct whandle *ggfs_pending_by_name(const char *fname) { return pending_find(0, fname); }

bool ggfs_pending_size(uint64_t id, const char *fname, uint64_t *id_out, size_t *size)
{
    /* under pend_mu: a handle is taken off the list before it is freed */
    bool found = false;
    pthread_mutex_lock(&pend_mu);
    for (struct whandle *h = pending; h; h = h->next)
        if (fname ? strcmp(h->fname, fname) == 0 : h->id == id) {
            *size = atomic_load(&h->size);
            if (id_out)
                *id_out = h->id;
            found = true;
            break;
        }
    pthread_mutex_unlock(&pend_mu);
    return found;
}

/* Opens meta key idx for writing (commit_mu held). */
int ggfs_edit_open(uint64_t idx, int flags, struct fuse_file_info *fi)
{
    if (g_fs.read_only)
        return EROFS;
    if (is_alignment(ST->gf, idx))
        return EPERM;
    struct whandle *h = handle_new(ST->kv_id[idx], ST->meta_names.names[idx]);
    if (!h)
        return ENOMEM;
    gguf_kv_typedesc(ST->gf, &ST->gf->kv[idx], &h->check);
    h->checked = h->check.depth == 1 && h->check.levels[0] != GGUF_STRING;
    h->utf8 = h->check.depth == 1 && h->check.levels[0] == GGUF_STRING;
    if (flags & O_TRUNC) {
        h->dirty = true;
    } else if (gguf_render_kv(ST->gf, &ST->gf->kv[idx], &h->text) != GGUF_OK) {
        handle_free(h);
        return ENOMEM;
    }
    h->opens = 1;
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->direct_io = 1;        /* reads and writes go through the handle */
    return 0;
}

int ggfs_edit_reopen(uint64_t id, int flags, struct fuse_file_info *fi)
{
    struct whandle *h = ggfs_pending_by_id(id);
    if (!h)
        return ENOENT;
    if (!h->scratch)
        return EBUSY;         /* a new key being written by someone else */
    pthread_mutex_lock(&h->mu);
    if (flags & O_TRUNC) {
        h->text.len = 0;
        atomic_store(&h->size, 0);
    }
    h->opens++;
    pthread_mutex_unlock(&h->mu);
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->direct_io = 1;
    return 0;
}

void ggfs_edit_create(fuse_req_t req, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    (void)mode;
    if (g_fs.read_only)
        return (void)fuse_reply_err(req, EROFS);
    if (strcmp(name, "general.alignment") == 0)
        return (void)fuse_reply_err(req, EPERM);    /* decides the layout */
    if (ntab_find(&ST->meta_names, name) >= 0 || ggfs_pending_by_name(name))
        return (void)fuse_reply_err(req, EEXIST);
    /* A tool's temporary file, or a new key whose name must follow the
     * GGUF rule (scratch names first: sed's may look like a key). */
    bool scratch = gguf_name_is_scratch(name, strlen(name));
    struct gguf_buf key = { 0 };
    bool valid = decode_key(name, &key, true) == 0;
    gguf_buf_free(&key);
    if (!scratch && !valid)
        return (void)fuse_reply_err(req, EINVAL);
    int64_t id = ggfs_key_id(name);
    struct whandle *h = id < 0 ? NULL : handle_new((uint64_t)id, name);
    if (!h)
        return (void)fuse_reply_err(req, ENOMEM);
    h->created = true;
    h->dirty = true;
    h->scratch = scratch;
    h->opens = 1;
    pthread_mutex_lock(&pend_mu);
    h->next = pending;
    pending = h;
    pthread_mutex_unlock(&pend_mu);
    fi->fh = (uint64_t)(uintptr_t)h;
    fi->direct_io = 1;
    struct fuse_entry_param ep;
    memset(&ep, 0, sizeof ep);
    ep.ino = KV_BASE + (uint64_t)id;
    ep.generation = 1;
    ep.attr.st_ino = ep.ino;
    ep.attr.st_mode = S_IFREG | 0644;
    ep.attr.st_nlink = 1;
    ep.attr.st_uid = ST->model_st.st_uid;
    ep.attr.st_gid = ST->model_st.st_gid;
    ep.attr.st_mtim = ST->model_st.st_mtim;
    /* short timeouts: the file's size and existence change at close */
    ep.attr_timeout = 0;
    ep.entry_timeout = 0;
    if (fuse_reply_create(req, &ep, fi) != 0) {
        pending_remove(h);
        handle_free(h);
    }
}

int ggfs_edit_write(struct fuse_file_info *fi, const char *buf, size_t size, off_t off)
{
    struct whandle *h = (struct whandle *)(uintptr_t)fi->fh;
    if (!h)
        return EBADF;
    if (off < 0 || (uint64_t)off > MAX_TEXT || size > MAX_TEXT - (uint64_t)off)
        return EFBIG;
    if (size == 0)
        return 0;
    pthread_mutex_lock(&h->mu);
    size_t end = (size_t)off + size;
    if (end > h->text.len) {
        size_t old = h->text.len;
        /* grow (zero-filling a hole) */
        if (end > h->text.cap) {
            size_t nc = h->text.cap ? h->text.cap : 256;
            while (nc < end)
                nc *= 2;
            char *p = realloc(h->text.data, nc);
            if (!p) {
                pthread_mutex_unlock(&h->mu);
                return ENOMEM;
            }
            h->text.data = p;
            h->text.cap = nc;
        }
        memset(h->text.data + old, 0, end - old);
        h->text.len = end;
    }
    memcpy(h->text.data + off, buf, size);
    atomic_store(&h->size, h->text.len);
    h->dirty = true;
    h->written = true;
    /* A scalar's text is one short line: once it is complete, parse it now
     * so that `echo abc > meta/u8key` fails in write(), which shells report
     * (they ignore errors from close).  A string must be UTF-8: a sequence
     * that can no longer become valid fails here too. */
    int e = 0;
    if (h->utf8 && !utf8_prefix_ok(h->text.data, h->text.len)) {
        h->bad = true;
        e = EINVAL;
    }
    if (h->checked && h->text.len && h->text.data[h->text.len - 1] == '\n') {
        struct gguf_buf bin = { 0 };
        struct gguf_diag d;
        struct gguf_enc enc = { 0 };
        if (gguf_parse_value(&enc, &h->check, h->text.data, h->text.len, &bin, &d) != GGUF_OK) {
            h->bad = true;
            e = EINVAL;
        }
        gguf_buf_free(&bin);
    }
    pthread_mutex_unlock(&h->mu);
    return e;
}

int ggfs_edit_read(struct fuse_file_info *fi, fuse_req_t req, size_t size, off_t off)
{
    struct whandle *h = (struct whandle *)(uintptr_t)fi->fh;
    pthread_mutex_lock(&h->mu);
    if (off < 0 || (uint64_t)off >= h->text.len)
        fuse_reply_buf(req, NULL, 0);
    else
        fuse_reply_buf(req, h->text.data + off,
                       h->text.len - (size_t)off < size ? h->text.len - (size_t)off : size);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

int ggfs_edit_truncate(struct fuse_file_info *fi, uint64_t idx_or_none, bool has_idx,
                       off_t size)
{
    if (g_fs.read_only)
        return EROFS;
    if (size < 0 || (uint64_t)size > MAX_TEXT)
        return EFBIG;
    struct whandle *h = fi ? (struct whandle *)(uintptr_t)fi->fh : NULL;
    bool temp = false;
    if (!h) {
        /* truncate(path): a handle of our own, applied at once */
        if (!has_idx)
            return ENOENT;
        struct fuse_file_info tfi = { .flags = O_WRONLY };
        int e = ggfs_edit_open(idx_or_none, O_WRONLY, &tfi);
        if (e)
            return e;
        h = (struct whandle *)(uintptr_t)tfi.fh;
        temp = true;
    }
    pthread_mutex_lock(&h->mu);
    if ((size_t)size > h->text.cap) {
        char *np = realloc(h->text.data, (size_t)size);
        if (!np) {
            pthread_mutex_unlock(&h->mu);
            if (temp)
                handle_free(h);
            return ENOMEM;
        }
        h->text.data = np;
        h->text.cap = (size_t)size;
    }
    if ((size_t)size > h->text.len)
        memset(h->text.data + h->text.len, 0, (size_t)size - h->text.len);
    h->text.len = (size_t)size;
    atomic_store(&h->size, h->text.len);
    h->dirty = true;
    h->bad = false;
    h->written = true;
    pthread_mutex_unlock(&h->mu);
    int e = 0;
    if (temp) {
        e = apply_handle(h);
        handle_free(h);
    }
    return e;
}

/* true if process pid still has a descriptor open on inode ino of this
 * mount.  At a flush the descriptor being closed is already gone from its
 * table, so this tells a close of one of several descriptors (dup2) from
 * the last one.  false when it cannot tell (no /proc, unknown mount id). */
static bool open_elsewhere(pid_t pid, uint64_t ino)
{
    if (pid <= 0 || g_fs.mnt_id < 0)
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
        found = m && i && strtoll(m + 8, NULL, 10) == g_fs.mnt_id &&
                strtoull(i + 5, NULL, 10) == ino;
    }
    closedir(d);
    return found;
}

int ggfs_edit_flush(struct fuse_file_info *fi, pid_t pid)
{
    struct whandle *h = (struct whandle *)(uintptr_t)fi->fh;
    if (!h)
        return 0;
    pthread_mutex_lock(&h->mu);
    /* Shells open with O_TRUNC, dup2 and close the first descriptor before
     * writing through the second: a flush before any write is the end of
     * the edit (an emptied value, a new empty key) only when no other
     * descriptor of the caller refers to the file.  Committing the empty
     * value before the real one would cost a rewrite of the model twice. */
    bool was_dirty = h->dirty;
    int e = 0;
    if (h->written || (h->dirty && !open_elsewhere(pid, KV_BASE + h->id)))
        e = apply_handle(h);
    if (e)
        h->dirty = false;     /* reported by this close; release adds nothing */
    if (!e && !h->created)
        pending_remove(h);
    pthread_mutex_unlock(&h->mu);
    if (was_dirty && !e)
        ggfs_notify_wait_all();
    return e;
}

void ggfs_edit_release(struct fuse_file_info *fi)
{
    struct whandle *h = (struct whandle *)(uintptr_t)fi->fh;
    if (!h)
        return;
    if (--h->opens > 0 || h->scratch)
        return;                /* a scratch stays (in pending) until renamed or removed */
    pthread_mutex_lock(&h->mu);
    /* close() already reported a flush error; what still fails is lost */
    apply_handle(h);
    pthread_mutex_unlock(&h->mu);
    pending_remove(h);
    handle_free(h);
}

int ggfs_edit_unlink(const char *name)
{
    if (g_fs.read_only)
        return EROFS;
    struct whandle *p = ggfs_pending_by_name(name);
    if (p) {                 /* a created key not written yet: forget it */
        p->dirty = false;
        p->created = false;
        pending_remove(p);
        if (p->scratch && !p->opens)
            handle_free(p);
        else
            p->scratch = false;    /* its release frees it, applying nothing */
        return 0;
    }
    int64_t i = ntab_find(&ST->meta_names, name);
    if (i < 0)
        return ENOENT;
    if (is_alignment(ST->gf, (uint64_t)i))
        return EPERM;
    struct gguf_newkv *kvs = current_kvs(0);
    if (!kvs)
        return ENOMEM;
    size_t n = ST->gf->n_kv;
    memmove(&kvs[i], &kvs[i + 1], (n - (size_t)i - 1) * sizeof *kvs);
    int e = commit(kvs, n - 1, "delete");
    free(kvs);
    return e;
}

/* rename(scratch, key): the way sed -i and editors save.  The scratch's
 * text becomes the key's value (parsed for the key's type, or inferred for
 * a new key). */
static int rename_scratch(struct whandle *p, const char *to)
{
    if (p->opens)
        return EBUSY;
    int64_t j = ntab_find(&ST->meta_names, to);
    struct whandle *h;
    int e;
    if (j >= 0) {
        struct fuse_file_info fi = { .flags = O_WRONLY | O_TRUNC };
        e = ggfs_edit_open((uint64_t)j, O_WRONLY | O_TRUNC, &fi);
        if (e)
            return e;
        h = (struct whandle *)(uintptr_t)fi.fh;
    } else {
        struct gguf_buf key = { 0 };
        e = decode_key(to, &key, true);
        gguf_buf_free(&key);
        int64_t id = e ? -1 : ggfs_key_id(to);
        if (e || id < 0)
            return e ? e : ENOMEM;
        h = handle_new((uint64_t)id, to);
        if (!h)
            return ENOMEM;
        h->created = true;
    }
    h->typed = j < 0 && p->typed;
    h->type = p->type;
    struct gguf_buf tmp = h->text;
    h->text = p->text;
    p->text = tmp;
    h->dirty = h->written = true;
    e = apply_handle(h);
    tmp = h->text;             /* give the text back on failure */
    h->text = p->text;
    p->text = tmp;
    handle_free(h);
    if (!e) {
        pending_remove(p);
        handle_free(p);
    }
    return e;
}

int ggfs_edit_rename(const char *from, const char *to)
{
    if (g_fs.read_only)
        return EROFS;
    struct whandle *p = ggfs_pending_by_name(from);
    if (p && p->scratch)
        return rename_scratch(p, to);
    int64_t i = ntab_find(&ST->meta_names, from);
    if (i < 0)
        return p ? EBUSY : ENOENT;
    if (strcmp(from, to) == 0)
        return 0;
    if (is_alignment(ST->gf, (uint64_t)i))
        return EPERM;
    struct gguf_buf key = { 0 };
    int64_t j = ntab_find(&ST->meta_names, to);
    /* a new name must follow the rule; an existing one is kept as it is */
    int e = decode_key(to, &key, j < 0);
    if (!e && j >= 0 && is_alignment(ST->gf, (uint64_t)j))
        e = EPERM;
    struct gguf_newkv *kvs = e ? NULL : current_kvs(0);
    if (!e && !kvs)
        e = ENOMEM;
    if (!e) {
        size_t n = ST->gf->n_kv;
        kvs[i].key = key.data;
        kvs[i].key_len = key.len;
        if (j >= 0) {       /* over an existing key: that one goes */
            memmove(&kvs[j], &kvs[j + 1], (n - (size_t)j - 1) * sizeof *kvs);
            n--;
        }
        e = commit(kvs, n, "rename");
    }
    free(kvs);
    gguf_buf_free(&key);
    return e;
}

int ggfs_edit_settype(uint64_t id, const char *value, size_t size)
{
    if (g_fs.read_only)
        return EROFS;
    struct gguf_typedesc td;
    if (!gguf_typedesc_parse(value, size, &td))
        return EINVAL;
    struct whandle *p = ggfs_pending_by_id(id);
    if (p) {                 /* a new key: the type to parse it as at close */
        p->type = td;
        p->typed = true;
        return 0;
    }
    if (id >= ST->n_ids || ST->id_kv[id] < 0)
        return ENOENT;
    uint64_t i = (uint64_t)ST->id_kv[id];
    if (is_alignment(ST->gf, i))
        return EPERM;
    /* Convert: the value's text, parsed as the new type. */
    struct gguf_buf text = { 0 }, bin = { 0 };
    int e = gguf_render_kv(ST->gf, &ST->gf->kv[i], &text) == GGUF_OK ? 0 : ENOMEM;
    if (!e)
        e = parse_text(&td, text.data, text.len, &bin, ST->meta_names.names[i]);
    struct gguf_newkv *kvs = e ? NULL : current_kvs(0);
    if (!e && !kvs)
        e = ENOMEM;
    if (!e) {
        kvs[i].type = td.levels[0];
        kvs[i].val = (const uint8_t *)bin.data;
        kvs[i].val_len = bin.len;
        e = commit(kvs, ST->gf->n_kv, "set type");
    }
    free(kvs);
    gguf_buf_free(&text);
    gguf_buf_free(&bin);
    return e;
}

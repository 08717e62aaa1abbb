/*
 * fs/commit.c — applying an edit of meta/ to MODEL.gguf: the new list of
 * key/values, the new header (gguf/edit: the one writer of the file), the
 * commit, a new state swapped in, and the kernel told what changed.
 *
 * Every function here runs with commit_mu held: nobody else can swap the
 * state meanwhile, so fs->st is stable without the state lock; the swap
 * itself takes the lock for writing, which waits for readers of the old
 * state to finish.  Readers are never blocked by a commit in progress (a
 * rewrite of a big model can take a while), only by the swap.
 */
#include "whandle.h"

#include "gguf/edit.h"
#include "gguf/names.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ggfs_errno(enum gguf_err e)
{
    switch (e) {
    case GGUF_OK: return 0;
    case GGUF_E_NOMEM: return ENOMEM;
    case GGUF_E_IO: return EIO;
    default: return EINVAL;
    }
}

/* Writes the header for kvs into the model, re-opens it and swaps the new
 * state in.  Returns 0 or an errno; on error the model and the state are
 * unchanged. */
static int commit(struct ggfs *fs, const struct gguf_newkv *kvs, size_t n, const char *why)
{
    struct state *old = fs->st;
    const struct gguf_file *gf = st_meta(old);
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    if (gguf_header_build(gf, kvs, n, &hdr, &d) != GGUF_OK) {
        gguf_buf_free(&hdr);
        fuse_log(FUSE_LOG_ERR, "gguffs: %s: %s: %s\n", fs->model_path, why, d.msg);
        return EINVAL;
    }
    bool in_place;
    enum gguf_err ce = gguf_commit(fs->model_real, gf, old->shards[0].src,
                                   (const uint8_t *)hdr.data, hdr.len, &in_place, &d);
    gguf_buf_free(&hdr);
    if (ce != GGUF_OK)
        fuse_log(FUSE_LOG_ERR, "gguffs: %s: %s: %s\n", fs->model_path, why, d.msg);

    /* Re-open whatever the commit returned: the file on disk is the truth.
     * (Other shards of a split model are re-opened too: cheap, headers.) */
    struct shard *shards;
    unsigned n_shards;
    if (ggfs_open_model(fs->model_real, fs->read_only, &shards, &n_shards, &d) != GGUF_OK) {
        fuse_log(FUSE_LOG_ERR, "gguffs: %s: after %s: %s\n", fs->model_path, why, d.msg);
        return EIO;
    }
    struct state *ns;
    int e = ggfs_state_new(fs, shards, n_shards, old->gen + 1, &ns);
    if (e) {
        ggfs_shards_free(shards, n_shards);
        return e;
    }
    pthread_rwlock_wrlock(&fs->lock);
    fs->st = ns;
    pthread_rwlock_unlock(&fs->lock);

    /* Tell the kernel (notify.c): info and model.gguf of the new version
     * are new inodes, found by the next lookup while open ones keep theirs
     * (see fs.h); every name and file of the old meta/ may have changed
     * (values, sizes, which names exist).  The commit returns once the root
     * names are invalidated; flush also waits for meta/'s. */
    ggfs_notify_root_entry(fs, "info");
    ggfs_notify_root_entry(fs, "model.gguf");
    for (uint64_t i = 0; i < st_meta(old)->n_kv; i++) {
        ggfs_notify_meta_entry(fs, old->meta_names.names[i]);
        ggfs_notify_inode(fs, KV_BASE + old->kv_id[i]);
    }
    for (uint64_t i = 0; i < st_meta(ns)->n_kv; i++)
        ggfs_notify_meta_entry(fs, ns->meta_names.names[i]);
    ggfs_notify_inode(fs, INO_META);
    ggfs_notify_wait_root(fs);
    /* The old version lives on while info or model.gguf of it is open.
     * Freeing it closes its descriptor; after a rewrite that is the last
     * reference to the old file, and the file system then frees its blocks
     * (a second for 4 GB): ggfs_state_put does that on a notify thread, not
     * while the writer waits. */
    ggfs_state_put(old);
    return ce == GGUF_OK ? 0 : EIO;
}

/* All keys of the current file as a new list (the caller edits it). */
static struct gguf_newkv *current_kvs(const struct gguf_file *gf, size_t extra)
{
    struct gguf_newkv *kvs = calloc(gf->n_kv + extra + 1, sizeof *kvs);
    if (!kvs)
        return NULL;
    for (uint64_t i = 0; i < gf->n_kv; i++)
        kvs[i] = gguf_newkv_of(gf, i);
    return kvs;
}

bool wh_is_alignment(const struct gguf_file *gf, uint64_t i)
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

bool wh_utf8_prefix_ok(const char *s, size_t n)
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

/* Parses text for type t into bin (appended); EINVAL with a log line when
 * it does not parse. */
static int parse_text(const struct state *st, const struct gguf_typedesc *t, const char *text,
                      size_t len, struct gguf_buf *bin, const char *fname)
{
    struct gguf_diag d;
    if (gguf_parse_value(&st_meta(st)->enc, t, text, len, bin, &d) != GGUF_OK) {
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

bool wh_new_key_name(const char *fname, size_t len)
{
    (void)len;
    struct gguf_buf key = { 0 };
    bool ok = decode_key(fname, &key, true) == 0;
    gguf_buf_free(&key);
    return ok;
}

/* The new key/value of a created key: name, type (set or inferred), value. */
static int new_kv(const struct state *st, struct whandle *h, struct gguf_buf *key,
                  struct gguf_buf *bin, struct gguf_newkv *out)
{
    struct gguf_typedesc td;
    if (h->typed)
        td = h->type;
    else
        infer_type(h->text.data, h->text.len, &td);
    int e = decode_key(h->fname, key, true);
    if (!e && h->id < st->n_ids && st->id_kv[h->id] >= 0)
        e = EEXIST;     /* someone committed the same name meanwhile */
    if (!e)
        e = parse_text(st, &td, h->text.data, h->text.len, bin, h->fname);
    if (!e)
        *out = (struct gguf_newkv){ key->data, key->len, td.levels[0],
                                    (const uint8_t *)bin->data, bin->len };
    return e;
}

/* The new value of an existing key. */
static int set_kv(const struct state *st, struct whandle *h, struct gguf_buf *bin,
                  struct gguf_newkv *kvs)
{
    if (h->id >= st->n_ids || st->id_kv[h->id] < 0)
        return ENOENT;  /* the key was deleted while this was open */
    uint64_t i = (uint64_t)st->id_kv[h->id];
    const struct gguf_file *gf = st_meta(st);
    if (wh_is_alignment(gf, i))
        return EPERM;
    struct gguf_typedesc td;
    gguf_kv_typedesc(gf, &gf->kv[i], &td);
    int e = parse_text(st, &td, h->text.data, h->text.len, bin, h->fname);
    if (!e) {
        kvs[i].val = (const uint8_t *)bin->data;
        kvs[i].val_len = bin->len;
    }
    return e;
}

int wh_apply(struct whandle *h)
{
    if (!h->dirty || h->kind == WH_SCRATCH || h->kind == WH_DROPPED)
        return 0;
    if (h->bad)
        return EINVAL;
    struct ggfs *fs = h->fs;
    const struct state *st = fs->st;
    struct gguf_buf bin = { 0 }, key = { 0 };
    struct gguf_newkv *kvs = current_kvs(st_meta(st), 1);
    if (!kvs)
        return ENOMEM;
    size_t n = st_meta(st)->n_kv;
    int e = h->kind == WH_NEW ? new_kv(st, h, &key, &bin, &kvs[n++]) : set_kv(st, h, &bin, kvs);
    if (!e)
        e = commit(fs, kvs, n, "edit");
    if (!e) {
        h->dirty = false;
        h->kind = WH_KEY;
    }
    free(kvs);
    gguf_buf_free(&bin);
    gguf_buf_free(&key);
    return e;
}

/* ---- unlink, rename, setxattr ------------------------------------------------ */

int ggfs_edit_unlink(struct ggfs *fs, const char *name)
{
    if (fs->read_only)
        return EROFS;
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
    const struct state *st = fs->st;
    int64_t i = ntab_find(&st->meta_names, name);
    if (i < 0)
        return ENOENT;
    if (wh_is_alignment(st_meta(st), (uint64_t)i))
        return EPERM;
    struct gguf_newkv *kvs = current_kvs(st_meta(st), 0);
    if (!kvs)
        return ENOMEM;
    size_t n = st_meta(st)->n_kv;
    memmove(&kvs[i], &kvs[i + 1], (n - (size_t)i - 1) * sizeof *kvs);
    int e = commit(fs, kvs, n - 1, "delete");
    free(kvs);
    return e;
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
        if (!wh_new_key_name(to, strlen(to)))
            return EINVAL;
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
    e = wh_apply(h);
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
    if (fs->read_only)
        return EROFS;
    struct whandle *p = wh_pending_find(fs, 0, from);
    if (p && p->kind == WH_SCRATCH)
        return rename_scratch(fs, p, to);
    const struct state *st = fs->st;
    const struct gguf_file *gf = st_meta(st);
    int64_t i = ntab_find(&st->meta_names, from);
    if (i < 0)
        return p ? EBUSY : ENOENT;
    if (strcmp(from, to) == 0)
        return 0;
    if (wh_is_alignment(gf, (uint64_t)i))
        return EPERM;
    struct gguf_buf key = { 0 };
    int64_t j = ntab_find(&st->meta_names, to);
    /* a new name must follow the rule; an existing one is kept as it is */
    int e = decode_key(to, &key, j < 0);
    if (!e && j >= 0 && wh_is_alignment(gf, (uint64_t)j))
        e = EPERM;
    struct gguf_newkv *kvs = e ? NULL : current_kvs(gf, 0);
    if (!e && !kvs)
        e = ENOMEM;
    if (!e) {
        size_t n = gf->n_kv;
        kvs[i].key = key.data;
        kvs[i].key_len = key.len;
        if (j >= 0) {       /* over an existing key: that one goes */
            memmove(&kvs[j], &kvs[j + 1], (n - (size_t)j - 1) * sizeof *kvs);
            n--;
        }
        e = commit(fs, kvs, n, "rename");
    }
    free(kvs);
    gguf_buf_free(&key);
    return e;
}

int ggfs_edit_settype(struct ggfs *fs, uint64_t id, const char *value, size_t size)
{
    if (fs->read_only)
        return EROFS;
    struct gguf_typedesc td;
    if (!gguf_typedesc_parse(value, size, &td))
        return EINVAL;
    struct whandle *p = wh_pending_find(fs, id, NULL);
    if (p) {                 /* a new key: the type to parse it as at close */
        p->type = td;
        p->typed = true;
        return 0;
    }
    const struct state *st = fs->st;
    const struct gguf_file *gf = st_meta(st);
    if (id >= st->n_ids || st->id_kv[id] < 0)
        return ENOENT;
    uint64_t i = (uint64_t)st->id_kv[id];
    if (wh_is_alignment(gf, i))
        return EPERM;
    /* Convert: the value's text, parsed as the new type. */
    struct gguf_buf text = { 0 }, bin = { 0 };
    int e = gguf_render_kv(gf, &gf->kv[i], &text) == GGUF_OK ? 0 : ENOMEM;
    if (!e)
        e = parse_text(st, &td, text.data, text.len, &bin, st->meta_names.names[i]);
    struct gguf_newkv *kvs = e ? NULL : current_kvs(gf, 0);
    if (!e && !kvs)
        e = ENOMEM;
    if (!e) {
        kvs[i].type = td.levels[0];
        kvs[i].val = (const uint8_t *)bin.data;
        kvs[i].val_len = bin.len;
        e = commit(fs, kvs, gf->n_kv, "set type");
    }
    free(kvs);
    gguf_buf_free(&text);
    gguf_buf_free(&bin);
    return e;
}

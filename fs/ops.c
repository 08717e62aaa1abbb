/*
 * fs/ops.c — the FUSE low-level handlers.  Every handler ends in exactly one
 * fuse_reply_*.  Handlers that only read run with the state lock held for
 * reading (see struct state); those that may edit take the commit lock
 * (fs/edit.c).
 */
#include "fs.h"

#include "gguf/names.h"
#include "gguf/types.h"
#include "gguf/value.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <linux/fs.h>

#define XATTR_TYPE "user.gguf.type"

/* fi->fh of a read-only meta/ open: a snapshot of the text, tagged in its
 * low bit (malloc'd pointers are aligned) to tell it from a write handle.
 * Reads hold a reference while they reply, so a release racing a read
 * (the kernel sends it once the reply is copied) never frees under it. */
struct snap {
    _Atomic unsigned refs;
    size_t len;
    char data[];
};
/* fi->fh of an open file, told apart by its low bits (allocations are
 * aligned): 0 nothing (tensor files, stats), a write handle (fs/edit.c)
 * with tag 0, a snapshot of a meta/ value with tag 1, a state (the version
 * an open info or model.gguf reads) with tag 2. */
#define FH_TAG 3u
#define FH_SNAPSHOT 1u
#define FH_STATE 2u
#define IS_SNAPSHOT(fi) (((fi)->fh & FH_TAG) == FH_SNAPSHOT)
#define IS_STATE(fi) (((fi)->fh & FH_TAG) == FH_STATE)
#define IS_WHANDLE(fi) ((fi)->fh && ((fi)->fh & FH_TAG) == 0)
#define SNAPSHOT(fi) ((struct snap *)(uintptr_t)((fi)->fh & ~(uint64_t)FH_TAG))
#define FH_STATE_OF(fi) ((struct state *)(uintptr_t)((fi)->fh & ~(uint64_t)FH_TAG))

static void snap_put(struct snap *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        free(s);
}

/* ---- inode classification ---------------------------------------------- */

enum kind { K_NONE, K_ROOT, K_INFO, K_META, K_TENSORS, K_KV, K_TENSOR, K_STATS, K_MODEL };

struct node {
    enum kind kind;
    uint64_t idx;            /* key or tensor index */
    enum tensor_file tf;     /* for K_TENSOR */
    uint64_t gen;            /* for K_INFO and K_MODEL: the version */
};

static bool tensor_has(enum tensor_file tf, uint64_t idx)
{
    return tf != TF_F32 || ggfs_has_f32(idx);
}

static struct node classify(fuse_ino_t ino)
{
    struct node n = { K_NONE, 0, TF_DIR, 0 };
    switch (ino) {
    case INO_ROOT: n.kind = K_ROOT; return n;
    case INO_META: n.kind = K_META; return n;
    case INO_TENSORS: n.kind = K_TENSORS; return n;
    case INO_STATS: n.kind = K_STATS; return n;
    }
    if (ino >= VERSION_BASE && ino < TENSOR_BASE) {
        n.kind = (ino - VERSION_BASE) % 2 ? K_MODEL : K_INFO;
        n.gen = (ino - VERSION_BASE) / 2;
    } else if (ino >= KV_BASE && ino < VERSION_BASE) {
        uint64_t id = ino - KV_BASE;
        if (id < ST->n_ids && ST->id_kv[id] >= 0) {
            n.kind = K_KV;
            n.idx = (uint64_t)ST->id_kv[id];
        }
    } else if (ino >= TENSOR_BASE &&
               (ino - TENSOR_BASE) / TENSOR_STRIDE < ST->n_tensors) {
        uint64_t rel = ino - TENSOR_BASE;
        n.idx = rel / TENSOR_STRIDE;
        n.tf = (enum tensor_file)(rel % TENSOR_STRIDE);
        if (n.tf < TF_COUNT && tensor_has(n.tf, n.idx))
            n.kind = K_TENSOR;
    }
    return n;
}

static fuse_ino_t tensor_ino(uint64_t idx, enum tensor_file tf)
{
    return TENSOR_BASE + idx * TENSOR_STRIDE + tf;
}

/* ---- file contents ------------------------------------------------------ */

/* The rendered value of key i, rendered on first use and kept. */
static const struct text *kv_text(uint64_t i)
{
    struct text *t = atomic_load_explicit(&ST->kv_text[i], memory_order_acquire);
    if (t)
        return t;
    struct gguf_buf b = { 0 };
    if (gguf_render_kv(ST->gf, &ST->gf->kv[i], &b) != GGUF_OK) {
        gguf_buf_free(&b);
        return NULL;
    }
    t = malloc(sizeof *t);
    if (!t) {
        gguf_buf_free(&b);
        return NULL;
    }
    t->data = b.data;
    t->len = b.len;
    struct text *expected = NULL;
    if (!atomic_compare_exchange_strong(&ST->kv_text[i], &expected, t)) {
        free(t->data);       /* another thread won the race: use its copy */
        free(t);
        t = expected;
    }
    return t;
}

static const char *tensor_small_text(uint64_t idx, enum tensor_file tf,
                                     char *buf, size_t cap, size_t *len)
{
    const struct gguf_tensor *t = ST->tens[idx].t;
    size_t n = 0;
    if (tf == TF_TYPE) {
        n = (size_t)snprintf(buf, cap, "%s\n", ggml_type_name_of(t->type));
    } else {
        /* numpy order: ne reversed */
        buf[0] = '\0';
        for (unsigned d = t->n_dims; d-- > 0;)
            n += (size_t)snprintf(buf + n, cap - n, "%s%llu", n ? " " : "",
                                  (unsigned long long)t->ne[d]);
        n += (size_t)snprintf(buf + n, cap - n, "\n");
    }
    *len = n;
    return buf;
}

/* The block cache counters, as "name value" lines. */
static size_t stats_text(char *buf, size_t cap)
{
    struct cache_stats cs;
    cache_get_stats(g_fs.cache, &cs);
    int n = snprintf(buf, cap,
                     "hits %llu\nmisses %llu\nevictions %llu\nfill_errors %llu\n"
                     "chunks_held %llu\nbytes_held %llu\ncapacity %llu\n"
                     "chunk_bytes %u\n",
                     (unsigned long long)cs.hits, (unsigned long long)cs.misses,
                     (unsigned long long)cs.evictions, (unsigned long long)cs.fill_errors,
                     (unsigned long long)cs.chunks_held, (unsigned long long)cs.bytes_held,
                     (unsigned long long)cs.capacity, CACHE_CHUNK_BYTES);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* ---- attributes --------------------------------------------------------- */

static void fill_common(struct stat *st, fuse_ino_t ino)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    st->st_uid = ST->model_st.st_uid;
    st->st_gid = ST->model_st.st_gid;
    st->st_atim = ST->model_st.st_atim;
    st->st_mtim = ST->model_st.st_mtim;
    st->st_ctim = ST->model_st.st_ctim;
    st->st_blksize = 1 << 20;
}

/* The state of version gen with a reference (ggfs_state_put it), or NULL
 * when that version is gone: ESTALE then makes the kernel look the name up
 * again (open and stat retry once with a fresh lookup). */
static struct state *version(uint64_t gen)
{
    return gen == ST->gen ? ggfs_state_ref(ST) : ggfs_state_by_gen(gen);
}

static int stat_node(fuse_ino_t ino, struct stat *st)
{
    struct node n = classify(ino);
    fill_common(st, ino);
    switch (n.kind) {
    case K_NONE:
        return ENOENT;
    case K_ROOT:
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 4;
        break;
    case K_META:
        st->st_mode = S_IFDIR | (g_fs.read_only ? 0555 : 0755);
        st->st_nlink = 2;
        break;
    case K_TENSORS:
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2 + (ST->n_tensors < 1u << 30 ? ST->n_tensors : 1u << 30);
        break;
    case K_INFO:
    case K_MODEL: {
        struct state *v = version(n.gen);
        if (!v)
            return ESTALE;
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)(n.kind == K_INFO ? v->info.len : v->model_size);
        ggfs_state_put(v);
        break;
    }
    case K_STATS: {
        char buf[512];
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)stats_text(buf, sizeof buf);
        break;
    }
    case K_KV: {
        const struct text *t = kv_text(n.idx);
        if (!t)
            return ENOMEM;
        st->st_mode = S_IFREG | (g_fs.read_only ? 0444 : 0644);
        st->st_nlink = 1;
        st->st_size = (off_t)t->len;
        break;
    }
    case K_TENSOR: {
        const struct gguf_tensor *t = ST->tens[n.idx].t;
        st->st_nlink = 1;
        st->st_mode = S_IFREG | 0444;
        if (n.tf == TF_DIR) {
            st->st_mode = S_IFDIR | 0555;
            st->st_nlink = 2;
        } else if (n.tf == TF_RAW) {
            st->st_size = (off_t)t->nbytes;
        } else if (n.tf == TF_F32) {
            st->st_size = (off_t)(t->n_elems * 4);
        } else {
            char buf[160];
            size_t len;
            tensor_small_text(n.idx, n.tf, buf, sizeof buf, &len);
            st->st_size = (off_t)len;
        }
        break;
    }
    }
    st->st_blocks = (st->st_size + 511) / 512;
    return 0;
}

static void reply_entry(fuse_req_t req, fuse_ino_t ino)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    int err = stat_node(ino, &e.attr);
    if (err)
        return (void)fuse_reply_err(req, err);
    e.ino = ino;
    e.generation = 1;
    e.attr_timeout = g_fs.timeout;
    e.entry_timeout = g_fs.timeout;
    fuse_reply_entry(req, &e);
}

/* Attributes of a key created and not committed yet. */
static void fill_pending(struct stat *st, fuse_ino_t ino, size_t size)
{
    fill_common(st, ino);
    st->st_mode = S_IFREG | 0644;
    st->st_nlink = 1;
    st->st_size = (off_t)size;
}

/* ---- handlers ----------------------------------------------------------- */

static void ggfs_op_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    /* Let the kernel move raw tensor bytes from the model's fd by splice. */
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE)
        conn->want |= FUSE_CAP_SPLICE_MOVE;
    /* The largest requests the kernel allows: 1 MiB (FUSE_MAX_MAX_PAGES). */
    conn->max_write = 1u << 20;
    conn->max_readahead = conn->max_readahead ? conn->max_readahead : UINT32_MAX;
    /* Data never changes under a read-only tree: no invalidation on open. */
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct node p = classify(parent);
    int64_t i;
    switch (p.kind) {
    case K_ROOT:
        if (strcmp(name, "info") == 0)
            return reply_entry(req, INO_INFO(ST->gen));
        if (strcmp(name, "meta") == 0)
            return reply_entry(req, INO_META);
        if (strcmp(name, "tensors") == 0)
            return reply_entry(req, INO_TENSORS);
        if (strcmp(name, "stats") == 0)
            return reply_entry(req, INO_STATS);
        if (strcmp(name, "model.gguf") == 0)
            return reply_entry(req, INO_MODEL(ST->gen));
        break;
    case K_META: {
        if ((i = ntab_find(&ST->meta_names, name)) >= 0)
            return reply_entry(req, KV_BASE + ST->kv_id[i]);
        uint64_t id;
        size_t size;
        if (ggfs_pending_size(0, name, &id, &size)) {
            /* a new file until its close: no caching (timeouts 0) */
            struct fuse_entry_param e;
            memset(&e, 0, sizeof e);
            e.ino = KV_BASE + id;
            e.generation = 1;
            fill_pending(&e.attr, e.ino, size);
            return (void)fuse_reply_entry(req, &e);
        }
        break;
    }
    case K_TENSORS:
        if ((i = ntab_find(&ST->tensor_names, name)) >= 0)
            return reply_entry(req, tensor_ino((uint64_t)i, TF_DIR));
        break;
    case K_TENSOR:
        if (p.tf != TF_DIR)
            return (void)fuse_reply_err(req, ENOTDIR);
        static const char *const files[TF_COUNT] = { NULL, "raw", "f32", "type", "shape" };
        for (int f = TF_RAW; f < TF_COUNT; f++)
            if (strcmp(name, files[f]) == 0 &&
                tensor_has((enum tensor_file)f, p.idx))
                return reply_entry(req, tensor_ino(p.idx, (enum tensor_file)f));
        break;
    case K_NONE:
        return (void)fuse_reply_err(req, ENOENT);
    default:
        return (void)fuse_reply_err(req, ENOTDIR);
    }
    /* A negative entry: the name cannot appear while the tree is immutable. */
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.entry_timeout = g_fs.timeout;
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    int err = stat_node(ino, &st);
    size_t psize;
    if (err == ENOENT && ino >= KV_BASE && ino < TENSOR_BASE &&
        ggfs_pending_size(ino - KV_BASE, NULL, NULL, &psize)) {
        fill_pending(&st, ino, psize);
        return (void)fuse_reply_attr(req, &st, 0);
    }
    if (err)
        return (void)fuse_reply_err(req, err);
    fuse_reply_attr(req, &st, g_fs.timeout);
}

/* Adds one directory entry; false when the reply buffer is full. */
static bool add_dirent(fuse_req_t req, char *buf, size_t cap, size_t *used,
                       const char *name, fuse_ino_t ino, mode_t mode, off_t next)
{
    struct stat st;
    memset(&st, 0, sizeof st);
    st.st_ino = ino;
    st.st_mode = mode;
    size_t n = fuse_add_direntry(req, buf + *used, cap - *used, name, &st, next);
    if (n > cap - *used)
        return false;
    *used += n;
    return true;
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                            off_t off, struct fuse_file_info *fi)
{
    (void)fi;
    struct node n = classify(ino);
    bool dir = n.kind == K_ROOT || n.kind == K_META || n.kind == K_TENSORS ||
               (n.kind == K_TENSOR && n.tf == TF_DIR);
    if (n.kind == K_NONE)
        return (void)fuse_reply_err(req, ENOENT);
    if (!dir)
        return (void)fuse_reply_err(req, ENOTDIR);
    if (size > 1u << 20)
        size = 1u << 20;
    char *buf = malloc(size);
    if (!buf)
        return (void)fuse_reply_err(req, ENOMEM);
    size_t used = 0;
    /* Entry k (0-based) is followed by offset k+1: "." and ".." are 0 and 1. */
    uint64_t count;
    switch (n.kind) {
    case K_ROOT: count = 5; break;
    case K_META: count = ST->gf->n_kv; break;
    case K_TENSORS: count = ST->n_tensors; break;
    default: count = TF_COUNT - 1; break;
    }
    for (uint64_t k = (uint64_t)off; k < count + 2; k++) {
        const char *name;
        fuse_ino_t child;
        mode_t mode = S_IFREG;
        if (k == 0) {
            name = ".", child = ino, mode = S_IFDIR;
        } else if (k == 1) {
            name = "..", mode = S_IFDIR;
            child = n.kind == K_TENSOR ? INO_TENSORS : INO_ROOT;
        } else {
            uint64_t e = k - 2;
            switch (n.kind) {
            case K_ROOT: {
                static const char *const names[5] = { "info", "meta", "tensors", "stats",
                                                      "model.gguf" };
                const fuse_ino_t inos[5] = { INO_INFO(ST->gen), INO_META, INO_TENSORS,
                                             INO_STATS, INO_MODEL(ST->gen) };
                name = names[e];
                child = inos[e];
                mode = (e == 1 || e == 2) ? S_IFDIR : S_IFREG;
                break;
            }
            case K_META:
                name = ST->meta_names.names[e];
                child = KV_BASE + ST->kv_id[e];
                break;
            case K_TENSORS:
                name = ST->tensor_names.names[e];
                child = tensor_ino(e, TF_DIR);
                mode = S_IFDIR;
                break;
            default: {
                static const char *const files[TF_COUNT - 1] = { "raw", "f32", "type", "shape" };
                enum tensor_file tf = (enum tensor_file)(e + 1);
                if (!tensor_has(tf, n.idx))
                    continue;
                name = files[e];
                child = tensor_ino(n.idx, tf);
                break;
            }
            }
        }
        if (!add_dirent(req, buf, size, &used, name, child, mode, (off_t)(k + 1)))
            break;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct node n = classify(ino);
    if (n.kind == K_NONE)
        return (void)fuse_reply_err(req, ENOENT);
    if (n.kind != K_INFO && n.kind != K_KV && n.kind != K_STATS && n.kind != K_MODEL &&
        !(n.kind == K_TENSOR && n.tf != TF_DIR))
        return (void)fuse_reply_err(req, EISDIR);
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        if (n.kind != K_KV)    /* tensor data and info are read-only */
            return (void)fuse_reply_err(req, EACCES);
        /* meta/ writes: with the commit lock, not the read lock */
        return (void)fuse_reply_err(req, EAGAIN);
    }
    if (n.kind == K_STATS) {
        fi->direct_io = 1;    /* changes all the time: never cache it */
    } else if (n.kind == K_INFO || n.kind == K_MODEL) {
        /* The handle reads the version it was opened on (see fs.h). */
        struct state *v = version(n.gen);
        if (!v)
            return (void)fuse_reply_err(req, ESTALE);
        fi->fh = (uint64_t)(uintptr_t)v | FH_STATE;
        fi->keep_cache = 1;
    } else if (n.kind == K_KV && !g_fs.read_only) {
        /* A writer of the same file changes the kernel's idea of its size
         * (O_TRUNC, ftruncate) before anything is committed, so the page
         * cache could hand a reader zeros or nothing.  Readers get a copy
         * of the committed text taken at open, read past the page cache:
         * a value is always one committed version, never torn. */
        const struct text *t = kv_text(n.idx);
        struct snap *snap = t ? malloc(sizeof *snap + t->len) : NULL;
        if (snap) {
            atomic_init(&snap->refs, 1);
            snap->len = t->len;
            if (t->len)       /* an empty value has no buffer at all */
                memcpy(snap->data, t->data, t->len);
        }
        if (!snap)
            return (void)fuse_reply_err(req, ENOMEM);
        fi->fh = (uint64_t)(uintptr_t)snap | FH_SNAPSHOT;
        fi->direct_io = 1;
    } else {
        fi->keep_cache = 1;
    }
    fuse_reply_open(req, fi);
}

static void reply_slice(fuse_req_t req, const char *data, size_t len,
                        size_t size, off_t off)
{
    if ((uint64_t)off >= len)
        return (void)fuse_reply_buf(req, NULL, 0);
    size_t n = len - (size_t)off < size ? len - (size_t)off : size;
    fuse_reply_buf(req, data + off, n);
}

/* Serves [off, off+size) of tensor idx's f32 view from pinned cache chunks:
 * the reply is gathered straight from the chunks (one copy, into the
 * kernel), then the chunks are released. */
static void read_f32(fuse_req_t req, uint64_t idx, size_t size, off_t off)
{
    const struct gguf_tensor *t = ST->tens[idx].t;
    uint64_t total = t->n_elems * 4;
    if ((uint64_t)off >= total)
        return (void)fuse_reply_buf(req, NULL, 0);
    if (size > total - (uint64_t)off)
        size = (size_t)(total - (uint64_t)off);
    uint64_t first = (uint64_t)off / CACHE_CHUNK_BYTES;
    uint64_t last = ((uint64_t)off + size - 1) / CACHE_CHUNK_BYTES;
    size_t count = (size_t)(last - first + 1);
    struct cache_chunk **pinned = calloc(count, sizeof *pinned);
    struct fuse_bufvec *bv = calloc(1, sizeof *bv + count * sizeof(struct fuse_buf));
    int err = 0;
    if (!pinned || !bv) {
        err = ENOMEM;
        goto out;
    }
    bv->count = count;
    uint64_t pos = (uint64_t)off, end = (uint64_t)off + size;
    for (size_t k = 0; k < count; k++) {
        uint64_t c = first + k;
        uint64_t c_start = c * CACHE_CHUNK_BYTES;
        uint64_t c_elems = t->n_elems - c * CACHE_CHUNK_ELEMS;
        if (c_elems > CACHE_CHUNK_ELEMS)
            c_elems = CACHE_CHUNK_ELEMS;
        pinned[k] = cache_get(g_fs.cache, idx, c, (size_t)c_elems, &err);
        if (!pinned[k])
            goto out;
        uint64_t c_end = c_start + c_elems * 4;
        uint64_t to = end < c_end ? end : c_end;
        bv->buf[k].mem = (char *)cache_data(pinned[k]) + (pos - c_start);
        bv->buf[k].size = (size_t)(to - pos);
        pos = to;
    }
    fuse_reply_data(req, bv, 0);    /* no page gifting: chunks stay ours */
    ggfs_prefetch_after(idx, last);
out:
    if (err)
        fuse_reply_err(req, err);
    for (size_t k = 0; pinned && k < count && pinned[k]; k++)
        cache_put(g_fs.cache, pinned[k]);
    free(pinned);
    free(bv);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         struct fuse_file_info *fi)
{
    (void)fi;
    struct node n = classify(ino);
    if (off < 0)
        return (void)fuse_reply_err(req, EINVAL);
    switch (n.kind) {
    case K_KV: {
        const struct text *t = kv_text(n.idx);
        if (!t)
            return (void)fuse_reply_err(req, ENOMEM);
        return reply_slice(req, t->data, t->len, size, off);
    }
    case K_STATS: {
        char buf[512];
        size_t len = stats_text(buf, sizeof buf);
        return reply_slice(req, buf, len, size, off);
    }
    case K_TENSOR:
        break;
    default:
        return (void)fuse_reply_err(req, EISDIR);
    }
    const struct gguf_tensor *t = ST->tens[n.idx].t;
    if (n.tf == TF_TYPE || n.tf == TF_SHAPE) {
        char buf[160];
        size_t len;
        tensor_small_text(n.idx, n.tf, buf, sizeof buf, &len);
        return reply_slice(req, buf, len, size, off);
    }
    if (n.tf == TF_F32)
        return read_f32(req, n.idx, size, off);
    if (n.tf != TF_RAW)
        return (void)fuse_reply_err(req, EIO);
    if ((uint64_t)off >= t->nbytes)
        return (void)fuse_reply_buf(req, NULL, 0);
    if (size > t->nbytes - (uint64_t)off)
        size = (size_t)(t->nbytes - (uint64_t)off);
    /* Zero-copy: the kernel splices the bytes from the model's descriptor. */
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
    bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    const struct shard *sh = &ST->shards[ST->tens[n.idx].shard];
    bv.buf[0].fd = sh->fd;
    bv.buf[0].pos = (off_t)(sh->gf->data_off + t->offset + (uint64_t)off);
    fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                             size_t size)
{
    struct node n = classify(ino);
    if (n.kind == K_NONE)
        return (void)fuse_reply_err(req, ENOENT);
    if (n.kind != K_KV || strcmp(name, XATTR_TYPE) != 0)
        return (void)fuse_reply_err(req, ENODATA);
    struct gguf_typedesc td;
    struct gguf_buf b = { 0 };
    gguf_kv_typedesc(ST->gf, &ST->gf->kv[n.idx], &td);
    if (!gguf_typedesc_format(&td, &b)) {
        gguf_buf_free(&b);
        return (void)fuse_reply_err(req, ENOMEM);
    }
    if (size == 0)
        fuse_reply_xattr(req, b.len);
    else if (size < b.len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, b.data, b.len);
    gguf_buf_free(&b);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct node n = classify(ino);
    if (n.kind == K_NONE)
        return (void)fuse_reply_err(req, ENOENT);
    static const char list[] = XATTR_TYPE;     /* with its NUL */
    size_t len = n.kind == K_KV ? sizeof list : 0;
    if (size == 0)
        fuse_reply_xattr(req, len);
    else if (size < len)
        fuse_reply_err(req, ERANGE);
    else
        fuse_reply_buf(req, list, len);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs sv;
    memset(&sv, 0, sizeof sv);
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    sv.f_blocks = (ST->gf->file_size + 4095) / 4096;
    sv.f_files = KV_BASE + ST->gf->n_kv + ST->n_tensors * TF_COUNT;
    sv.f_namemax = 255;
    fuse_reply_statfs(req, &sv);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
                          mode_t mode)
{
    (void)parent, (void)name, (void)mode;
    fuse_reply_err(req, EPERM);       /* the tree has no place for directories */
}

/* Every handler runs with the state lock held for reading, so it sees one
 * version of the model from start to end (see struct state). */
static void ggfs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    pthread_rwlock_rdlock(&g_fs.lock);
    op_lookup(req, parent, name);
    pthread_rwlock_unlock(&g_fs.lock);
}

static void ggfs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    pthread_rwlock_rdlock(&g_fs.lock);
    op_getattr(req, ino, fi);
    pthread_rwlock_unlock(&g_fs.lock);
}

static void ggfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
                            off_t off, struct fuse_file_info *fi)
{
    pthread_rwlock_rdlock(&g_fs.lock);
    op_readdir(req, ino, size, off, fi);
    pthread_rwlock_unlock(&g_fs.lock);
}

static void ggfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                         struct fuse_file_info *fi)
{
    if (IS_STATE(fi)) {                   /* info or model.gguf: its version */
        /* held across the reply, like a snapshot (a release may race it) */
        struct state *v = ggfs_state_ref(FH_STATE_OF(fi));
        if (off < 0)
            fuse_reply_err(req, EINVAL);
        else if ((ino - VERSION_BASE) % 2)
            ggfs_read_model(req, v, size, off);
        else
            reply_slice(req, v->info.data, v->info.len, size, off);
        ggfs_state_put(v);
        return;
    }
    if (IS_SNAPSHOT(fi)) {                /* meta/ open for reading */
        struct snap *sn = SNAPSHOT(fi);
        atomic_fetch_add(&sn->refs, 1);
        reply_slice(req, sn->data, sn->len, size, off);
        snap_put(sn);
        return;
    }
    if (fi->fh) {                 /* a meta/ file open for writing */
        ggfs_edit_read(fi, req, size, off);
        return;
    }
    pthread_rwlock_rdlock(&g_fs.lock);
    op_read(req, ino, size, off, fi);
    pthread_rwlock_unlock(&g_fs.lock);
}

static void ggfs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                             size_t size)
{
    pthread_rwlock_rdlock(&g_fs.lock);
    op_getxattr(req, ino, name, size);
    pthread_rwlock_unlock(&g_fs.lock);
}

static void ggfs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    pthread_rwlock_rdlock(&g_fs.lock);
    op_listxattr(req, ino, size);
    pthread_rwlock_unlock(&g_fs.lock);
}

static void ggfs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    pthread_rwlock_rdlock(&g_fs.lock);
    op_statfs(req, ino);
    pthread_rwlock_unlock(&g_fs.lock);
}

static void ggfs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
                          mode_t mode)
{
    pthread_rwlock_rdlock(&g_fs.lock);
    op_mkdir(req, parent, name, mode);
    pthread_rwlock_unlock(&g_fs.lock);
}

/* ---- handlers that may edit (commit_mu, not the read lock: fs/edit.c) ---- */

static void ggfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    bool rdonly = (fi->flags & O_ACCMODE) == O_RDONLY && !(fi->flags & O_TRUNC);
    if (rdonly) {
        pthread_rwlock_rdlock(&g_fs.lock);
        bool known = classify(ino).kind != K_NONE;
        if (known)
            op_open(req, ino, fi);
        pthread_rwlock_unlock(&g_fs.lock);
        if (known)
            return;
        /* else perhaps a tool's scratch file (fs/edit.c) */
    }
    pthread_mutex_lock(&g_fs.commit_mu);
    struct node n = classify(ino);
    if (rdonly && n.kind != K_NONE) {
        /* committed meanwhile: an ordinary read-only open */
        pthread_mutex_unlock(&g_fs.commit_mu);
        pthread_rwlock_rdlock(&g_fs.lock);
        op_open(req, ino, fi);
        pthread_rwlock_unlock(&g_fs.lock);
        return;
    }
    int e;
    if (n.kind == K_NONE)
        e = ino >= KV_BASE && ino < VERSION_BASE ?
            ggfs_edit_reopen(ino - KV_BASE, fi->flags, fi) : ENOENT;
    else if (n.kind == K_KV)
        e = ggfs_edit_open(n.idx, fi->flags, fi);
    else if (n.kind == K_META || n.kind == K_ROOT || n.kind == K_TENSORS ||
             (n.kind == K_TENSOR && n.tf == TF_DIR))
        e = EISDIR;
    else
        e = EACCES;
    pthread_mutex_unlock(&g_fs.commit_mu);
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_open(req, fi);
}

/* Namespace changes outside meta/ are refused without the commit lock: the
 * kernel holds the parent directory's lock meanwhile, and a commit waits
 * for the invalidation of names in / (fs/notify.c). */
static int not_meta(fuse_ino_t parent)
{
    return parent == INO_META ? 0 : parent == INO_ROOT || parent == INO_TENSORS ||
           parent >= TENSOR_BASE ? EACCES : ENOENT;
}

static void ggfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
                           mode_t mode, struct fuse_file_info *fi)
{
    int e = not_meta(parent);
    if (e)
        return (void)fuse_reply_err(req, e);
    pthread_mutex_lock(&g_fs.commit_mu);
    ggfs_edit_create(req, name, mode, fi);
    pthread_mutex_unlock(&g_fs.commit_mu);
}

static void ggfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
                          size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    int e = IS_WHANDLE(fi) ? ggfs_edit_write(fi, buf, size, off) : EBADF;
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_write(req, size);
}

static void ggfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    int e = 0;
    if (IS_WHANDLE(fi)) {
        pthread_mutex_lock(&g_fs.commit_mu);
        e = ggfs_edit_flush(fi, fuse_req_ctx(req)->pid);
        pthread_mutex_unlock(&g_fs.commit_mu);
    }
    fuse_reply_err(req, e);
}

static void ggfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    if (IS_SNAPSHOT(fi)) {
        snap_put(SNAPSHOT(fi));
    } else if (IS_STATE(fi)) {
        ggfs_state_put(FH_STATE_OF(fi));
    } else if (fi->fh) {
        pthread_mutex_lock(&g_fs.commit_mu);
        ggfs_edit_release(fi);
        pthread_mutex_unlock(&g_fs.commit_mu);
    }
    fuse_reply_err(req, 0);
}

static void ggfs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    int e = not_meta(parent);
    if (!e) {
        pthread_mutex_lock(&g_fs.commit_mu);
        e = ggfs_edit_unlink(name);
        pthread_mutex_unlock(&g_fs.commit_mu);
    }
    fuse_reply_err(req, e);
}

static void ggfs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
                           fuse_ino_t newparent, const char *newname,
                           unsigned int flags)
{
    int e = not_meta(parent);
    if (!e && newparent != parent)
        e = EXDEV;
    else if (!e && (flags & ~RENAME_NOREPLACE))
        e = EINVAL;
    if (!e) {
        pthread_mutex_lock(&g_fs.commit_mu);
        if ((flags & RENAME_NOREPLACE) && ntab_find(&ST->meta_names, newname) >= 0)
            e = EEXIST;
        else
            e = ggfs_edit_rename(name, newname);
        pthread_mutex_unlock(&g_fs.commit_mu);
    }
    fuse_reply_err(req, e);
}

static void ggfs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
                             const char *value, size_t size, int flags)
{
    (void)flags;
    pthread_mutex_lock(&g_fs.commit_mu);
    struct node n = classify(ino);
    int e;
    bool pend = n.kind == K_NONE && ino >= KV_BASE && ggfs_pending_by_id(ino - KV_BASE);
    if (n.kind == K_NONE && !pend)
        e = ENOENT;
    else if (n.kind != K_KV && !pend)
        e = ENOTSUP;
    else if (strcmp(name, XATTR_TYPE) != 0)
        e = ENOTSUP;
    else
        e = ggfs_edit_settype(ino - KV_BASE, value, size);
    pthread_mutex_unlock(&g_fs.commit_mu);
    fuse_reply_err(req, e);
}

static void ggfs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
                            int to_set, struct fuse_file_info *fi)
{
    pthread_mutex_lock(&g_fs.commit_mu);
    struct node n = classify(ino);
    bool pend = n.kind == K_NONE && ino >= KV_BASE && ggfs_pending_by_id(ino - KV_BASE);
    int e = 0;
    if (n.kind == K_NONE && !pend) {
        e = ENOENT;
    } else if (to_set & FUSE_SET_ATTR_SIZE) {
        if (n.kind != K_KV && !pend)
            e = n.kind == K_TENSOR || n.kind == K_INFO || n.kind == K_STATS ||
                n.kind == K_MODEL ? EACCES : EISDIR;
        else
            e = ggfs_edit_truncate(fi && IS_WHANDLE(fi) ? fi : NULL, n.idx, n.kind == K_KV,
                                   attr->st_size);
    } else if ((to_set & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) &&
               n.kind != K_KV && !pend) {
        e = EPERM;
    }
    /* Times (touch), and mode and owner of meta/ files (sed -i copies them
     * to its temporary file), are accepted and ignored: they are the
     * model's. */
    struct stat st;
    if (!e) {
        size_t psize;
        if (pend && ggfs_pending_size(ino - KV_BASE, NULL, NULL, &psize)) {
            fill_pending(&st, ino, psize);
        } else if (pend) {
            e = ENOENT;
        } else {
            e = stat_node(ino, &st);
        }
    }
    pthread_mutex_unlock(&g_fs.commit_mu);
    if (e)
        fuse_reply_err(req, e);
    else
        fuse_reply_attr(req, &st, pend ? 0 : g_fs.timeout);
}

const struct fuse_lowlevel_ops ggfs_ops = {
    .init = ggfs_op_init,
    .lookup = ggfs_op_lookup,
    .getattr = ggfs_op_getattr,
    .setattr = ggfs_op_setattr,
    .readdir = ggfs_op_readdir,
    .open = ggfs_op_open,
    .read = ggfs_op_read,
    .getxattr = ggfs_op_getxattr,
    .listxattr = ggfs_op_listxattr,
    .setxattr = ggfs_op_setxattr,
    .statfs = ggfs_op_statfs,
    .unlink = ggfs_op_unlink,
    .rename = ggfs_op_rename,
    .create = ggfs_op_create,
    .mkdir = ggfs_op_mkdir,
    .write = ggfs_op_write,
    .flush = ggfs_op_flush,
    .release = ggfs_op_release,
};

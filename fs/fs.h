/*
 * fs/fs.h — the gguffs FUSE driver: state shared by the handlers.
 *
 * Inode numbers are computed from the index, never allocated:
 *
 *   1 (FUSE_ROOT_ID)  /                 3  /meta
 *   4                 /tensors          5  /stats (block cache counters)
 *   KV_BASE + id      /meta/<key>, id stable per file name (see state.c)
 *   VERSION_BASE + 2g     /info of version g of the model
 *   VERSION_BASE + 2g + 1 /model.gguf of version g
 *   tensor j:         TENSOR_BASE + j*TENSOR_STRIDE + {0 dir, 1 raw, 2 f32,
 *                                                       3 type, 4 shape}
 *
 * TENSOR_BASE is fixed (not after the keys), so tensor inodes do not move
 * when keys are added or removed.  An edit changes the bytes of info and
 * model.gguf, so each version of the model (each state, below) has inodes
 * of its own for them: a descriptor or a mapping opened before an edit
 * keeps the inode, the page cache and the state of its version until it is
 * closed, as a file replaced by rename does; the next lookup finds the new
 * version.  Tensor data never changes, so raw and f32 keep their inodes.
 *
 * Names and attributes are cached by the kernel with long timeouts; after
 * an edit the names and inodes that changed are invalidated (fs/edit.c).
 */
#ifndef FS_FS_H
#define FS_FS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "cache.h"

enum {
    INO_ROOT = FUSE_ROOT_ID,
    INO_META = 3,
    INO_TENSORS = 4,
    INO_STATS = 5,
    KV_BASE = 16,
    TENSOR_STRIDE = 8,
};
#define VERSION_BASE (1ull << 39)
#define TENSOR_BASE (1ull << 40)
#define INO_INFO(gen) ((fuse_ino_t)(VERSION_BASE + 2 * (gen)))
#define INO_MODEL(gen) ((fuse_ino_t)(VERSION_BASE + 2 * (gen) + 1))

enum tensor_file { TF_DIR = 0, TF_RAW, TF_F32, TF_TYPE, TF_SHAPE, TF_COUNT };

/* A name table: file name (escaped) -> index, open addressing. */
struct ntab {
    char **names;        /* names[i]: NUL-terminated file name of entry i */
    uint32_t *slot;      /* index+1, 0 = empty */
    uint64_t mask;
    uint64_t n;
};

/* Text rendered on first use and kept (values of meta/ keys). */
struct text {
    char *data;
    size_t len;
};

/* One file of the model (a split model has several). */
struct shard {
    struct gguf_file *gf;
    int fd;                      /* O_RDONLY */
    char *path;
};

/* Tensor j of the model: which shard holds it, and its info there. */
struct tref {
    const struct gguf_tensor *t;
    uint32_t shard;
};

/*
 * What one version of the model file looks like: its index and everything
 * derived from it.  A state never changes once built; an edit builds a new
 * one and swaps it in (g_fs.lock held for writing), so a handler that holds
 * the lock for reading sees one consistent version from start to end.
 * States are counted: g_fs.st holds one reference, and every open info or
 * model.gguf holds one, so a version lives until its last reader is done.
 */
struct state {
    unsigned refs;               /* under states_mu (state.c) */
    uint64_t gen;                /* version: 0 at mount, +1 per commit */
    struct state *lprev, *lnext; /* live states, under states_mu */
    struct gguf_file *gf;        /* the first shard's: metadata lives there */
    int fd;                      /* the first shard's descriptor */
    struct shard *shards;
    unsigned n_shards;
    struct tref *tens;           /* every tensor, shard by shard */
    uint64_t n_tensors;
    struct text model_hdr;       /* model.gguf's header (split models only) */
    uint64_t model_size;         /* model.gguf's size */
    /* A single file: model.gguf's bytes [hdr_size, hdr_end) (the padding
     * after the header), kept so that an in-place edit of the file cannot
     * change what this version shows (NULL: all zeros, or, when pad_fd is
     * set, non-zero padding too large to keep, read from the file). */
    uint8_t *pad;
    uint64_t hdr_end;            /* min(data_off, file size) */
    bool pad_fd;
    uint64_t *vt_off;            /* tensor offsets in model.gguf's data */
    struct stat model_st;        /* times and owner shown on every node */
    struct ntab meta_names;      /* key file names */
    struct ntab tensor_names;    /* tensor directory names */
    _Atomic(struct text *) *kv_text;   /* per key, rendered lazily */
    struct text info;            /* /info, rendered when built */
    uint64_t *kv_id;             /* key index -> id (inode KV_BASE + id) */
    int64_t *id_kv;              /* id -> key index, -1: no such key now */
    uint64_t n_ids;
};

/* The stable id of a key file name (registered on first use); -1 on ENOMEM.
 * Only while building a state or under the commit lock. */
int64_t ggfs_key_id(const char *fname);

struct ggfs {
    const char *model_path;      /* as given, for messages */
    bool read_only;
    double timeout;              /* entry/attr timeout, seconds */
    const char *model_real;      /* absolute path (daemonizing chdirs to /) */
    pthread_rwlock_t lock;       /* read: any handler; write: swapping st */
    pthread_mutex_t commit_mu;   /* one edit at a time (fs/edit.c) */
    struct fuse_session *se;     /* for cache invalidations */
    struct state *st;            /* the current version */
    struct cache *cache;         /* dequantized f32 chunks */
    uint64_t cache_size;
    unsigned threads;            /* -o threads (0: default) */
    long long mnt_id;            /* the mount's id in /proc (-1: unknown) */
};

/* The current state; only valid while g_fs.lock is held. */
#define ST (g_fs.st)

extern struct ggfs g_fs;

/* Opens the model at path; a shard of a split model opens every shard
 * (fs/model.c).  0, or an errno with a one-line message in err. */
int ggfs_open_model(const char *path, struct shard **out, unsigned *n,
                    char *err, size_t cap);
void ggfs_shards_free(struct shard *s, unsigned n);
/* model.gguf of a split model: header and layout; reads. */
int ggfs_build_merged(struct state *st);
/* Replies to a read of model.gguf of version st. */
void ggfs_read_model(fuse_req_t req, const struct state *st, size_t size, off_t off);

/* Builds the state (version gen) for an opened model, with one reference
 * (takes the shards on success); 0 or an errno (EEXIST: a tensor name
 * occurs in two shards). */
int ggfs_state_new(struct shard *shards, unsigned n, const char *path,
                   uint64_t gen, struct state **out);
/* Another reference to st. */
struct state *ggfs_state_ref(struct state *st);
/* Drops a reference; the last one frees the state (on the notifier thread
 * when it runs: closing a replaced model file may take a while). */
void ggfs_state_put(struct state *st);
/* The live state of version gen, with a reference; NULL if it is gone. */
struct state *ggfs_state_by_gen(uint64_t gen);
/* Frees st now (the last reference is gone). */
void ggfs_state_free(struct state *st);

/* Index of name in t, or -1. */
int64_t ntab_find(const struct ntab *t, const char *name);

/* true if tensor i has an f32 view (its type can be dequantized). */
bool ggfs_has_f32(uint64_t i);

/* The cache's fill callback: dequantizes one chunk of tensor i. */
int ggfs_fill_chunk(void *ctx, uint64_t tensor, uint64_t chunk, float *dst,
                    size_t n);

/* Dequantization workers that fill chunks ahead of sequential f32 readers
 * (started after daemonizing: threads do not survive fork). */
int ggfs_workers_start(unsigned n);
void ggfs_workers_stop(void);
/* A reader just used chunk of tensor: queue the following ones. */
void ggfs_prefetch_after(uint64_t tensor, uint64_t chunk);

/* Telling the kernel what an edit changed (fs/notify.c): names and inodes
 * to invalidate are queued and sent by threads of their own. */
int ggfs_notify_start(void);
void ggfs_notify_stop(void);                /* sends what is queued first */
void ggfs_notify_meta_entry(const char *name);
void ggfs_notify_inode(fuse_ino_t ino);
void ggfs_notify_root_entry(const char *name);
/* Queues st to be freed on the notifier thread; false if it is not running. */
bool ggfs_notify_free_state(struct state *st);
/* Wait (at most a second) until what was queued so far has been sent:
 * the root names only, or everything. */
void ggfs_notify_wait_root(void);
void ggfs_notify_wait_all(void);

/* Metadata edits (fs/edit.c).  Functions marked (C) run with commit_mu
 * held and may commit; they return 0 or an errno. */
struct whandle;
void ggfs_edit_stop(void);                  /* frees handles never released */
int ggfs_edit_open(uint64_t idx, int flags, struct fuse_file_info *fi);   /* (C) */
/* Opens a tool's scratch file again (any mode); EBUSY for a new key that
 * is being written, ENOENT if there is no such file. */
int ggfs_edit_reopen(uint64_t id, int flags, struct fuse_file_info *fi);    /* (C) */
void ggfs_edit_create(fuse_req_t req, const char *name, mode_t mode,
                      struct fuse_file_info *fi);                           /* (C) */
int ggfs_edit_write(struct fuse_file_info *fi, const char *buf, size_t size, off_t off);
int ggfs_edit_read(struct fuse_file_info *fi, fuse_req_t req, size_t size, off_t off);
int ggfs_edit_truncate(struct fuse_file_info *fi, uint64_t idx, bool has_idx,
                       off_t size);                                         /* (C) */
/* pid: the caller of close (fuse_req_ctx), to tell a dup'ed descriptor's
 * close from the last one */
int ggfs_edit_flush(struct fuse_file_info *fi, pid_t pid);                   /* (C) */
void ggfs_edit_release(struct fuse_file_info *fi);                           /* (C) */
int ggfs_edit_unlink(const char *name);                                      /* (C) */
int ggfs_edit_rename(const char *from, const char *to);                      /* (C) */
int ggfs_edit_settype(uint64_t id, const char *value, size_t size);          /* (C) */
/* A created key not committed yet, by id or file name; NULL if none. */
struct whandle *ggfs_pending_by_id(uint64_t id);
struct whandle *ggfs_pending_by_name(const char *fname);
/* Size (and id) of a created key not committed yet, found by id or, if
 * fname is not NULL, by file name; false if there is none. */
bool ggfs_pending_size(uint64_t id, const char *fname, uint64_t *id_out, size_t *size);

/* The low-level operations table. */
extern const struct fuse_lowlevel_ops ggfs_ops;

#endif

/*
 * fs/fs.h — the gguffs FUSE driver: state shared by the handlers.
 *
 * Inode numbers are computed from the index, never allocated:
 *
 *   1 (FUSE_ROOT_ID)  /                 2  /info
 *   3                 /meta             4  /tensors
 *   5                 /stats (block cache counters)
 *   KV_BASE + i       /meta/<key i>
 *   tensor j:         TENSOR_BASE + j*TENSOR_STRIDE + {0 dir, 1 raw, 2 f32,
 *                                                       3 type, 4 shape}
 *
 * The tree is immutable for the life of the mount (read-only in this
 * version), so lookups reply with very long timeouts, forget is a no-op,
 * and the kernel may cache data (keep_cache).
 */
#ifndef FS_FS_H
#define FS_FS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "cache.h"

enum {
    INO_ROOT = FUSE_ROOT_ID,
    INO_INFO = 2,
    INO_META = 3,
    INO_TENSORS = 4,
    INO_STATS = 5,
    KV_BASE = 16,
    TENSOR_STRIDE = 8,
};

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

struct ggfs {
    const char *model_path;      /* as given, for messages */
    int fd;                      /* MODEL.gguf, O_RDONLY */
    struct gguf_file *gf;
    struct stat model_st;        /* times and owner shown on every node */
    bool read_only;

    struct ntab meta_names;      /* key file names */
    struct ntab tensor_names;    /* tensor directory names */
    _Atomic(struct text *) *kv_text;   /* per key, rendered lazily */
    struct text info;            /* /info, rendered at mount */

    uint64_t tensor_base;        /* first tensor inode */
    struct cache *cache;         /* dequantized f32 chunks */
    uint64_t cache_size;
    unsigned threads;            /* -o threads (0: default) */
    double timeout;              /* entry/attr timeout, seconds */
};

extern struct ggfs g_fs;

/* Builds name tables and the info text; 0 or an errno. */
int ggfs_tree_init(struct ggfs *fs);
void ggfs_tree_free(struct ggfs *fs);

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

/* The low-level operations table. */
extern const struct fuse_lowlevel_ops ggfs_ops;

#endif

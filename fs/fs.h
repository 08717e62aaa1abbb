/*
 * fs/fs.h — the gguffs FUSE driver: the context every handler works with.
 *
 * Rooms of fs/ (only this directory includes a FUSE header; the caches it
 * uses, with no FUSE in them, are in cache/: cache.h the bounded cache of
 * fixed-size blocks that holds the dequantized chunks and the remote
 * blocks, blocksrc.h the remote blocks' byte source with its fetch
 * threads, diskcache.h the disk cache of remote blocks, thread.h helper
 * threads that take no signal):
 *
 *   main.c      gguffs(1): options, mount point check, model open, session
 *   options.c   the command line: option table, sizes, --help
 *   model.c     opening a model (every shard, through byte sources) and
 *               reading model.gguf
 *   state.c     one version of the model: name tables, key ids, text; the
 *               counted list of live versions
 *   nodes.c     the inode layout: what an inode is, its attributes, the
 *               small texts (type, shape, stats, meta/ values)
 *   ops.c       the FUSE handlers and the operations table
 *   read.c      reads of raw, f32, model.gguf and model.safetensors;
 *               raw.npy and f32.npy (their NPY header, then raw's and
 *               f32's paths)
 *   f32.c       dequantizing chunks, the workers that fill them ahead, and
 *               each open f32 file's reading pattern
 *   digest.c    what is computed on first use and kept for the mount: a
 *               tensor's stats (over f32, through the cache), its xxh64
 *               and sha256 (over raw), and /hashes
 *   whandle.c   meta/ files open for writing, created keys, scratch files
 *   commit.c    applying an edit: new header, commit, new state, swap
 *   overlay.c   a remote model's edits in a local file (-o overlay)
 *   notify.c    telling the kernel what an edit changed
 *   underneath.c noticing a local model changed by another program while
 *               mounted (inotify, and fstat before bytes are served)
 *
 * Inode numbers are computed from the index, never allocated:
 *
 *   1 (FUSE_ROOT_ID)  /                 3  /meta
 *   4                 /tensors          5  /stats (block cache counters)
 *   KV_BASE + id      /meta/<key>, id stable per file name (see state.c)
 *   VERSION_BASE + 5g     /info of version g of the model
 *   VERSION_BASE + 5g + 1 /model.gguf of version g
 *   VERSION_BASE + 5g + 2 /info.json of version g
 *   VERSION_BASE + 5g + 3 /hashes (the same bytes in every version:
 *                         tensor names and data never change)
 *   VERSION_BASE + 5g + 4 /model.safetensors of version g
 *   tensor j:         TENSOR_BASE + j*TENSOR_STRIDE + {0 dir, 1 raw, 2 f32,
 *                                                       3 type, 4 shape,
 *                                                       5 raw.npy, 6 f32.npy,
 *                                                       7 stats, 8 xxh64,
 *                                                       9 sha256}
 *
 * TENSOR_BASE is fixed (not after the keys), so tensor inodes do not move
 * when keys are added or removed.  An edit changes the bytes of info,
 * info.json, model.gguf and model.safetensors (its __metadata__), so each version of the model (each state, below) has inodes
 * of its own for them: a descriptor or a mapping opened before an edit
 * keeps the inode, the page cache and the state of its version until it is
 * closed, as a file replaced by rename does; the next lookup finds the new
 * version.  Tensor data never changes, so raw and f32 keep their inodes.
 * Names and attributes are cached by the kernel with long timeouts; after
 * an edit the names and inodes that changed are invalidated (notify.c).
 *
 * Locks, in the order they are taken (a thread holding one may take only
 * those below it):
 *
 *   hashes_mu         one /hashes computation at a time (digest.c), taken
 *                     by a read holding a state reference and no lock
 *   commit_mu         one edit at a time: handlers that may commit (open
 *                     for writing, create, write handles' flush and
 *                     release, unlink, rename, setxattr, setattr); while it
 *                     is held, fs->st cannot change, so those read it
 *                     without the state lock
 *   whandle.mu        a write handle's text and flags (whandle.c)
 *   lock (write)      swapping fs->st in (commit.c), briefly
 *   lock (read)       the handlers that only look (lookup, getattr,
 *                     readdir, open, xattrs, statfs), for their whole
 *                     run: each sees one version from start to end.
 *                     Reads (ops.c's read handler, f32.c's workers) hold
 *                     it only while they take a reference to fs->st
 *                     (ggfs_state_current), then run with the reference
 *                     alone: it keeps that version's memory (index,
 *                     sources, shards) alive; info, info.json and
 *                     model.gguf read the version their handle holds.
 *                     Writer-preferring, so readers cannot starve a swap;
 *                     and so no handler may wait on the network (a fetch,
 *                     a fill, a splice of remote bytes) with it held: the
 *                     swap would wait for that handler and every handler
 *                     after it for the swap, and one slow server would
 *                     stall the whole mount.
 *   pend_mu           the lists of created keys, live handles, snapshots,
 *                     f32 streams
 *   workers.mu        the prefetch queue (f32.c); a worker takes its state
 *                     reference with the queue's lock dropped, then takes
 *                     it again
 *   cache mu          (cache/cache.c); held for bookkeeping only, never during a
 *                     fill
 *   blocksrc locks    a remote source's streams, then its rcache's queue,
 *                     then that cache's mu (cache/blocksrc.h); reached from reads
 *                     of a source, never held during a fetch
 *   states_mu         the counted list of live states (state.c)
 *   sig_mu            what gguffs knows of the model's files: each
 *                     state's sig[], own_writing, own_epoch (underneath.c);
 *                     held for a copy or an update, never during I/O
 *   notify queue mu   (notify.c), last: never held while waiting
 *
 * The notify queues' threads take no lock above their own but the state
 * list's; the kernel may make them wait for a directory's lock, which is
 * why no handler holding the root directory's lock waits for commit_mu
 * (ops.c refuses namespace changes outside meta/ without it).
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
#include "gguf/source.h"
#include "gguf/safetensors.h"
#include "gguf/split.h"
#include "gguf/ntab.h"
#include "gguf/value.h"
#include "cache/cache.h"
#include "list.h"

enum {
    INO_ROOT = FUSE_ROOT_ID,
    INO_META = 3,
    INO_TENSORS = 4,
    INO_STATS = 5,
    KV_BASE = 16,
    TENSOR_STRIDE = 16,
};
#define VERSION_BASE (1ull << 39)
#define TENSOR_BASE (1ull << 40)
/* a version's files: slot s of version g is VERSION_BASE + VERSION_STRIDE*g + s */
enum version_slot { VS_INFO = 0, VS_MODEL, VS_INFO_JSON, VS_HASHES, VS_SAFETENSORS,
                    VERSION_STRIDE };
#define INO_VERSION(gen, slot) ((fuse_ino_t)(VERSION_BASE + VERSION_STRIDE * (gen) + (slot)))
#define INO_INFO(gen) INO_VERSION(gen, VS_INFO)
#define INO_MODEL(gen) INO_VERSION(gen, VS_MODEL)
#define INO_INFO_JSON(gen) INO_VERSION(gen, VS_INFO_JSON)
#define INO_SAFETENSORS(gen) INO_VERSION(gen, VS_SAFETENSORS)
#define INO_HASHES(gen) INO_VERSION(gen, VS_HASHES)
/* which of a version's files ino is (enum version_slot) */
#define VERSION_SLOT(ino) (((ino) - VERSION_BASE) % VERSION_STRIDE)

/* raw.npy and f32.npy: raw and f32 behind an NPY header (read.c); stats,
 * xxh64 and sha256: computed on first use (digest.c) */
enum tensor_file { TF_DIR = 0, TF_RAW, TF_F32, TF_TYPE, TF_SHAPE, TF_RAW_NPY, TF_F32_NPY,
                   TF_STATS, TF_XXH64, TF_SHA256, TF_COUNT };
_Static_assert((int)TF_COUNT <= (int)TENSOR_STRIDE, "a tensor's files fit its inode stride");

/* A chunk's block has room for its floats (fs->chunk_bytes) and some
 * slack, where a fill starts with the source bytes (f32.c
 * ggfs_fill_chunk): at least the largest block of any type, so every run
 * of the fill has one block; a page, so the block is one page more than
 * its floats. */
#define F32_CHUNK_SLACK 4096u

/* Room for the stats file's text. */
#define STATS_TEXT_MAX 4096

struct ggfs;

/* A name table: file name (escaped) -> index. */
struct ntab {
    char **names;        /* names[i]: NUL-terminated file name of entry i */
    uint64_t n, cap;
    struct gguf_ntab t;  /* file name -> i */
};

/* Index of name in t, or -1. */
int64_t ntab_find(const struct ntab *t, const char *name);

/* Text rendered on first use and kept (values of meta/ keys). */
struct text {
    char *data;
    size_t len;
};

/* Tensor j of the model: which shard holds it, and its info there. */
struct tref {
    const struct gguf_tensor *t;
    uint32_t shard;
};

/*
 * What one version of the model file looks like: its index and everything
 * derived from it.  A state never changes once built; an edit builds a new
 * one and swaps it in (fs->lock held for writing), so a handler that holds
 * the lock for reading sees one consistent version from start to end.
 * States are counted: fs->st holds one reference, every open info,
 * info.json or model.gguf holds one, and so does every read while it runs
 * (it holds no lock: ggfs_state_current), so a version lives until its
 * last reader is done.
 * Metadata lives in the first shard: model->shards[0].
 */
struct state {
    struct ggfs *fs;
    unsigned refs;               /* under fs->states_mu */
    uint64_t gen;                /* version: 0 at mount, +1 per commit */
    struct glist link;           /* in fs->states, under fs->states_mu */
    struct gguf_split *model;    /* its files (one, or every shard) */
    struct tref *tens;           /* every tensor, shard by shard */
    uint64_t n_tensors;
    struct gguf_merged merged;   /* model.gguf's header and layout (split
                                    models only; merged.hdr.len 0 otherwise) */
    uint64_t model_size;         /* model.gguf's size */
    /* A single file: model.gguf's bytes [hdr_size, hdr_end) (the padding
     * after the header), kept so that an in-place edit of the file cannot
     * change what this version shows (NULL: all zeros, or, when pad_src is
     * set, non-zero padding too large to keep, read from the file). */
    uint8_t *pad;
    /* Per shard: the file as this version knows it (underneath.c): its
     * inode, size and times when the state was built, shard 0's updated
     * by gguffs' own commits; under fs->sig_mu. */
    struct fsig *sig;
    uint64_t hdr_end;            /* min(data_off, file size) */
    bool pad_src;
    struct stat model_st;        /* times, owner and modes (ggfs_perm) of every node */
    struct ntab meta_names;      /* key file names */
    struct ntab tensor_names;    /* tensor directory names */
    _Atomic(struct text *) *kv_text;   /* per key, rendered lazily */
    struct text info;            /* /info, rendered when built */
    _Atomic(struct text *) info_json;  /* /info.json, rendered on first use */
    /* /model.safetensors: its header and spans, laid out on first use */
    _Atomic(struct gguf_st_layout *) safetensors;
    uint64_t *kv_id;             /* key index -> id (inode KV_BASE + id) */
    int64_t *id_kv;              /* id -> key index, -1: no such key now */
    uint64_t n_ids;
};

/* The file that holds the metadata (the first shard's index). */
static inline const struct gguf_file *st_meta(const struct state *st)
{
    return st->model->shards[0].gf;
}

/* What fstat says of a model file, compared to notice a change made by
 * another program (underneath.c). */
struct fsig {
    dev_t dev;
    ino_t ino;
    off_t size;
    nlink_t nlink;
    struct timespec mtime, ctime;
};

/* fs->under: what was noticed (bits, never cleared during a mount) */
enum { UNDER_CHANGED = 1, UNDER_REPLACED = 2 };

/* Read requests are counted per kind of file (the stats file). */
enum read_kind { RK_RAW, RK_F32, RK_MODEL, RK_RAW_NPY, RK_F32_NPY, RK_INFO_JSON,
                 RK_SAFETENSORS, RK_TENSOR_STATS, RK_XXH64, RK_SHA256, RK_HASHES,
                 RK_COUNT };

struct workers;                  /* f32.c */
struct digests;                  /* digest.c */
struct notify;                   /* notify.c */
struct whandle;                  /* whandle.c */
struct snap;                     /* ops.c */

/* The mount: passed to every handler as the session's userdata. */
struct ggfs {
    /* set before the session starts, then read-only */
    const char *model_path;      /* as given, for messages */
    const char *model_real;      /* the first shard's absolute path (edits go there) */
    bool read_only;
    /* Why the model cannot be written, found at mount (0: it can): EROFS
     * (its file system is read-only), EACCES (gguffs may not write it).
     * Every edit then fails at open with it (ggfs_write_check). */
    int write_err;
    /* A descriptor of the model (the first shard) holding an OFD write
     * lock on the whole file, taken at mount: one read-write mount per
     * model.  -1: none (-o ro, a remote model, or a file system without
     * locks).  A rewrite replaces it with the new file's (commit.c);
     * under commit_mu after the mount.  With -o overlay, the lock is on
     * the overlay file instead (overlay.c), once it exists. */
    int lock_fd;
    bool remote;                 /* the model is read by HTTP (remote/) */
    /* -o overlay (overlay.c): a remote model's edits go to this local
     * file (its absolute path; NULL without), and every version's shards
     * read through base's sources: the remote model as opened at mount,
     * closed at the end */
    const char *overlay;
    struct gguf_split *base;
    double timeout;              /* entry/attr timeout, seconds */
    uint64_t cache_size;
    int threads;                 /* -o threads (-1: the default) */
    /* The size of the kernel's read requests (main.c ggfs_request_size),
     * and of f32 chunks: the f32 view of a tensor is cut into chunks of
     * chunk_bytes / 4 floats, the blocks of fs->cache.  A whole number of
     * pages, so a whole number of quantization blocks for every type (every
     * block size divides 1 KiB of floats); one chunk per request when the
     * readahead is a whole number of requests (see ops.c set_readahead). */
    uint32_t req_bytes, chunk_bytes;
    long long mnt_id;            /* the mount's id in /proc (-1: unknown) */
    struct fuse_session *se;
    struct cache *cache;         /* dequantized f32 chunks */
    struct rcache *rcache;       /* remote blocks (blocksrc.h), NULL for a
                                    local model */
    uint64_t readahead;          /* -o readahead: bytes (whole requests),
                                    0 for the kernel's */
    char bdi[32];                /* the mount's bdi ("0:NN"), "" if unknown */
    atomic_bool ra_pending;      /* readahead still to be written (ops.c) */

    pthread_rwlock_t lock;       /* read: handlers that only look, and reads
                                    while they take a reference to st;
                                    write: swapping st (see the lock order) */
    pthread_mutex_t commit_mu;   /* one edit at a time (commit.c) */
    struct state *st;            /* the current version: under lock, or commit_mu */
    struct ntab ids;             /* key ids: a meta/ file name -> a number for
                                    the life of the mount (state.c); under
                                    commit_mu (or before the session) */

    pthread_mutex_t states_mu;
    struct glist states;         /* every live state, under states_mu */

    pthread_mutex_t pend_mu;
    struct whandle *pending;     /* created keys and scratch files, under pend_mu */
    struct glist live;           /* every handle, freed at the end; under pend_mu */
    struct glist snaps;          /* every meta/ snapshot (ops.c), under pend_mu */
    struct glist streams;        /* every open f32 file's stream (f32.c), under pend_mu */

    /* Read requests and their bytes, by file (the stats file). */
    struct {
        _Atomic uint64_t n, bytes, max;
    } reads[RK_COUNT];           /* enum read_kind */

    struct workers *workers;
    /* tensors' stats and digests and /hashes, kept for the mount once
     * computed (digest.c); made before the session, freed after it */
    struct digests *digests;
    struct notify *notify;
    atomic_bool changed_logged;  /* a remote changed: logged once (read.c) */

    /* A local model changed underneath (underneath.c). */
    pthread_mutex_t sig_mu;
    bool own_writing;            /* gguffs commits an edit now; under sig_mu */
    uint64_t own_epoch;          /* +1 at each commit's end; under sig_mu */
    /* the file gguffs put at model_real (its last rewrite's, or the one
     * mounted): what a stat of the path must find; under sig_mu */
    dev_t path_dev;
    ino_t path_ino;
    atomic_int under;            /* UNDER_* bits */
    char under_file[512];        /* the file, and when: set once, before */
    struct timespec under_when;  /*   the bit (release) */
    atomic_uint_least64_t under_eio, under_refused;   /* stats */
    int in_fd;                   /* inotify (-1: none) */
    int in_stop[2];              /* a pipe that ends its thread */
    pthread_t in_thread;

    /* The disk cache of a remote model (-o cache_dir, cache/diskcache.h): one
     * per shard of the model (the model is fixed for a remote mount), NULL
     * for a shard without one (another process has it open, or it could
     * not be opened: said once on stderr).  Opened before the session,
     * closed (made durable) after it; read with ggfs_dcache. */
    struct dcache_group *dcache_group;
    struct dcache **dcache;      /* n_dcache entries, or NULL */
    unsigned n_dcache;

    /* edits committed (stats): in place, rewrites that cloned the tensor
     * data, rewrites that copied it; written under commit_mu */
    atomic_uint_least64_t edits_in_place, edits_cloned, edits_copied;
    /* the overlay's checksum as this mount last read or wrote it (0: no
     * file); under commit_mu */
    uint64_t overlay_sum;
};


/* The disk cache of shard i of the model, or NULL when there is none.  Its
 * blocks are the block cache's (-o remote_block bytes, block b at
 * b * remote_block): main.c hands it to the shard's blocksrc wrapper
 * (blocksrc_set_disk), whose fills read it first and store what they
 * fetch. */
struct dcache;
static inline struct dcache *ggfs_dcache(const struct ggfs *fs, unsigned shard)
{
    return fs->dcache && shard < fs->n_dcache ? fs->dcache[shard] : NULL;
}

/* Counts a read request of size bytes. */
void ggfs_count_read(struct ggfs *fs, enum read_kind k, size_t size);

/* The context of a request. */
static inline struct ggfs *req_fs(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* ---- model.c ---- */

/* Opens the model at path (absolute); a shard of a split model opens
 * every shard.  Recovers an interrupted edit of the first shard first, or,
 * read-only, refuses the model while one is there.  With remote options,
 * path is a URL and every shard a remote source (remote/source.h).  The
 * diag's message names the file concerned when it is not path. */
struct remote_opts;
struct rcache;
/* With rc, every remote shard is read through that block cache
 * (blocksrc.h); the first REMOTE_PREFIX_SIZE bytes stay the remote
 * source's (in memory). */
enum gguf_err ggfs_open_model(const char *path, bool read_only,
                              const struct remote_opts *remote, struct rcache *rc,
                              struct gguf_split **out, struct gguf_diag *d);
/* The remote behind a shard's source (through an overlay's spliced source
 * and the block cache), or NULL for a local file. */
struct remote *ggfs_remote(struct gguf_source *src);

/* ---- overlay.c ---- */

/* The model shown by an overlay mount: fs->base with the edits of the
 * overlay file (none while there is no file).  At mount and after every
 * commit; errors (an overlay of another model, a damaged one) name the
 * byte offset in the overlay file. */
enum gguf_err ggfs_overlay_model(struct ggfs *fs, struct gguf_split **out,
                                 struct gguf_diag *d);
/* Writes hdr, an edit of fs->st's model, into the overlay, crash-safely
 * (gguf/overlay.h).  GGUF_E_PERM for a change of a split model's split.*
 * keys; GGUF_E_IO when the overlay cannot be written, or was changed by
 * someone else since this mount read it.  Under commit_mu. */
enum gguf_err ggfs_overlay_commit(struct ggfs *fs, const struct gguf_buf *hdr,
                                  struct gguf_diag *d);
/* The mount's OFD write lock on the overlay file (fs->lock_fd), taken
 * when there is none yet: at mount, before a leftover new file is
 * removed, and before an edit (the file may have been created since, by
 * this mount or another): 0 (held), EAGAIN (another process holds one),
 * or the errno of opening it (ENOENT: no file yet, nothing to lock; the
 * first edit creates it locked).  Under commit_mu once mounted. */
int ggfs_overlay_lock(struct ggfs *fs);
/* -o overlay=given as an absolute path (symbolic links resolved; the
 * file need not exist, its directory must), malloc'd; NULL with why set
 * (cap bytes) when it cannot be one: not a regular file, or (writable)
 * its directory is not writable. */
char *ggfs_overlay_path(const char *given, bool writable, char *why, size_t cap);

/* ---- underneath.c ---- */

/* fstat of fd into out; false when fstat fails. */
bool ggfs_sig_take(int fd, struct fsig *out);
/* 0 when shard i of st's model is as gguffs knows it (or remote), else EIO:
 * another program changed it (the mount is marked, logged once).  Called
 * before a tensor's bytes are spliced from the file and after a chunk's
 * bytes were read for f32. */
int ggfs_under_check_shard(struct ggfs *fs, const struct state *st, unsigned i);
/* Every shard of st, and whether their paths still name the files
 * mounted: the mount's UNDER_* bits after the check. */
int ggfs_under_check(struct ggfs *fs, const struct state *st);
/* Around gguffs' own commit of an edit (under commit_mu): its writes are
 * not a change underneath.  end records the files as the commit left them. */
void ggfs_under_begin(struct ggfs *fs);
void ggfs_under_end(struct ggfs *fs);
/* info's line about it into buf (0: nothing noticed). */
size_t ggfs_under_line(struct ggfs *fs, char *buf, size_t cap);
/* Why an edit is refused now (under commit_mu, after ggfs_under_check), or
 * NULL. */
const char *ggfs_under_why(struct ggfs *fs);
/* The inotify watch of every shard (a thread; after daemonizing). */
void ggfs_under_start(struct ggfs *fs);
void ggfs_under_stop(struct ggfs *fs);
/* Watches path again (a rewrite put a new file there); under commit_mu. */
void ggfs_under_rewatch(struct ggfs *fs);

/* ---- state.c ---- */

/* Builds the state (version gen) for an opened model, with one reference
 * (takes model on success); 0 or an errno.  Under commit_mu, or before
 * the session. */
int ggfs_state_new(struct ggfs *fs, struct gguf_split *model, uint64_t gen,
                   struct state **out);
struct state *ggfs_state_ref(struct state *st);
/* fs->st with a reference, taken under the state lock (read) and nothing
 * else: for a handler or thread that may wait (on a fetch, a fill, a
 * splice) and so must not hold the lock meanwhile.  Drop it with
 * ggfs_state_put. */
struct state *ggfs_state_current(struct ggfs *fs);
/* Drops a reference; the last one frees the state (on a notify thread
 * when they run: closing a replaced model file may take a while). */
void ggfs_state_put(struct state *st);
/* The live state of version gen, with a reference; NULL if it is gone. */
struct state *ggfs_state_by_gen(struct ggfs *fs, uint64_t gen);
void ggfs_state_free(struct state *st);
/* The stable id of a key file name (registered on first use); -1 on ENOMEM.
 * Under commit_mu, or before the session. */
int64_t ggfs_key_id(struct ggfs *fs, const char *fname);
void ggfs_key_ids_free(struct ntab *ids);

/* ---- nodes.c: the inode layout ---- */

enum kind { K_NONE, K_ROOT, K_INFO, K_META, K_TENSORS, K_KV, K_TENSOR, K_STATS, K_MODEL,
            K_INFO_JSON, K_SAFETENSORS, K_HASHES };

struct node {
    enum kind kind;
    uint64_t idx;            /* key or tensor index */
    enum tensor_file tf;     /* for K_TENSOR */
    uint64_t gen;            /* for a version's files (K_INFO, K_MODEL, K_INFO_JSON,
                                K_SAFETENSORS): the version */
};

/* What inode ino is in state st (any version's info and model.gguf). */
struct node ggfs_classify(const struct state *st, fuse_ino_t ino);
/* The entries of /, in readdir order: lookup and readdir share it. */
struct root_entry {
    const char *name;
    enum kind kind;
};
extern const struct root_entry ggfs_root[];
extern const unsigned ggfs_root_n;
/* The inode of root entry e in state st. */
fuse_ino_t ggfs_root_ino(const struct state *st, unsigned e);
fuse_ino_t ggfs_tensor_ino(uint64_t idx, enum tensor_file tf);
extern const char *const ggfs_tensor_files[TF_COUNT];   /* NULL, "raw", ... */
/* true if tensor idx has file tf (f32, f32.npy and stats only for types
 * with a dequantizer, raw.npy only for types numpy has: ggfs_npy_descr). */
bool ggfs_tensor_has(const struct state *st, uint64_t idx, enum tensor_file tf);
/* The state of version gen with a reference, or NULL when it is gone. */
struct state *ggfs_version(struct state *st, uint64_t gen);
/* Attributes of ino: 0 or an errno (ESTALE: a version that is gone). */
int ggfs_stat(struct ggfs *fs, struct state *st, fuse_ino_t ino, struct stat *out);
/* Permission bits of the tree's nodes, derived from the model file's
 * (nodes.c). */
enum perm_of { PERM_FILE, PERM_DIR, PERM_META_FILE, PERM_META_DIR };
mode_t ggfs_perm(const struct state *st, enum perm_of of);
/* Attributes of a key created and not committed yet. */
void ggfs_stat_pending(const struct state *st, fuse_ino_t ino, size_t size,
                       struct stat *out);
/* info.json of st (rendered on first use, kept); NULL when out of memory. */
const struct text *ggfs_info_json(struct state *st);
/* model.safetensors' layout of st (laid out on first use, kept; see
 * gguf/safetensors.h) into *out: 0, ENOMEM, or EFBIG for a model whose
 * safetensors file would be too large (logged). */
int ggfs_safetensors(struct state *st, const struct gguf_st_layout **out);
/* The rendered value of key i (kept in st); NULL when out of memory. */
const struct text *ggfs_kv_text(struct state *st, uint64_t i);
/* type or shape of tensor idx into buf; its length. */
size_t ggfs_tensor_text(const struct state *st, uint64_t idx, enum tensor_file tf,
                        char *buf, size_t cap);
/* The stats file's text into buf; its length. */
size_t ggfs_stats_text(struct ggfs *fs, char *buf, size_t cap);

/* ---- read.c ---- */

/* A read of src failed with EIO: logs the reason if src is remote (a
 * remote that changed is logged once per mount). */
void ggfs_source_failed(struct ggfs *fs, struct gguf_source *src);
void ggfs_read_raw(fuse_req_t req, const struct state *st, uint64_t idx, size_t size, off_t off);
struct f32_stream;
/* s: the open file's stream (NULL: none, no prefetching) */
void ggfs_read_f32(fuse_req_t req, struct state *st, uint64_t idx, size_t size, off_t off,
                   struct f32_stream *s);
void ggfs_read_model(fuse_req_t req, const struct state *st, size_t size, off_t off);
/* true if tensor idx's f32 view is its raw bytes (little-endian float32):
 * served as raw, never through the cache. */
bool ggfs_f32_is_raw(const struct state *st, uint64_t idx);
/* model.safetensors of version st: the header from memory, then each
 * tensor's raw bytes (as raw reads are served) or f32 bytes (through the
 * block cache, prefetched as f32 files are by the open file's stream s,
 * which follows the tensor being read), piece by piece.  Under the state
 * lock (read). */
void ggfs_read_safetensors(fuse_req_t req, struct state *st, size_t size, off_t off,
                           struct f32_stream *s);
/* The NPY header (format 1.0, what numpy.save writes) of raw.npy or
 * f32.npy of tensor idx into buf (NPY_HEADER_MAX bytes): its length, a
 * multiple of 64; 0 if the tensor has no such file. */
#define NPY_HEADER_MAX 256
size_t ggfs_npy_header(const struct state *st, uint64_t idx, enum tensor_file tf, char *buf);
/* numpy's dtype of tensor idx's raw bytes ("<f2", "|i1", ...), or NULL. */
const char *ggfs_npy_descr(const struct state *st, uint64_t idx);
/* raw.npy and f32.npy: the header, then raw's or f32's bytes (the same
 * paths, the offset shifted; a read may straddle the two). */
void ggfs_read_npy(fuse_req_t req, struct state *st, uint64_t idx, enum tensor_file tf,
                   size_t size, off_t off, struct f32_stream *s);
/* Replies with [off, off+size) of a buffer of len bytes. */
void ggfs_reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off);

/* ---- f32.c ---- */

/* The cache's fill callback (ctx: the struct ggfs; call: the state the
 * caller of cache_get or cache_fill_claimed holds a reference to —
 * ggfs_chunk_get's, or a worker's): dequantizes chunk of tensor into dst
 * (len bytes: 4 per float), read from that state (tensor data is the same
 * in every version).  EINVAL without a state. */
int ggfs_fill_chunk(void *ctx, void *call, uint64_t tensor, uint64_t chunk, void *dst,
                    size_t len);
/* cache_get of chunk (len bytes) of tensor, filled from st on a miss: st
 * is a reference the caller holds (not the state lock: a fill may wait on
 * a remote server). */
struct cache_block *ggfs_chunk_get(const struct state *st, uint64_t tensor, uint64_t chunk,
                                   size_t len, int *err);
/* Workers that fill chunks ahead of sequential f32 readers (started after
 * daemonizing: threads do not survive fork). */
int ggfs_workers_start(struct ggfs *fs, unsigned n);
void ggfs_workers_stop(struct ggfs *fs);
/* A read of chunks [first, last] of tensor through stream s (NULL: none):
 * learns the pattern (a stream that moves to another tensor starts over
 * at its chunk 0: model.safetensors' stream), and queues for the workers the chunks the read needs
 * besides the first (filled in parallel with it) and, on a sequential
 * pattern, those after it.  st: a reference the caller holds. */
void ggfs_prefetch(struct ggfs *fs, const struct state *st, struct f32_stream *s,
                   uint64_t tensor, uint64_t first, uint64_t last);
/* A reader is about to get chunk c of tensor: off the queue, if a worker
 * has not taken it yet (the reader fills it, or finds it filled). */
void ggfs_unqueue(struct ggfs *fs, uint64_t tensor, uint64_t c);
/* Floats in chunk of tensor (shorter for a tensor's last chunk). */
size_t ggfs_chunk_len(const struct state *st, uint64_t tensor, uint64_t chunk);
/* Chunks of tensor's f32 view. */
uint64_t ggfs_chunks(const struct state *st, uint64_t tensor);
/* An open f32 file's stream (listed in fs->streams), or NULL when out of
 * memory; freed by ggfs_stream_free, or at the end by ggfs_streams_free. */
struct f32_stream *ggfs_stream_new(struct ggfs *fs);
void ggfs_stream_free(struct ggfs *fs, struct f32_stream *s);
void ggfs_streams_free(struct ggfs *fs);

/* ---- digest.c ---- */

/* The table of what digest.c keeps, for n_tensors tensors (fs->digests):
 * 0 or ENOMEM.  Before the session; freed after it. */
int ggfs_digests_new(struct ggfs *fs, uint64_t n_tensors);
void ggfs_digests_free(struct ggfs *fs);
/* The text of tensor idx's stats, xxh64 or sha256 file (tf), computed on
 * first use and kept for the mount; NULL with *err set (EIO, ENOMEM).  st:
 * a reference the caller holds (a read), or the state lock or commit_mu
 * (a computation then runs under it: lookup and getattr call
 * ggfs_digest_prepare first, so that it does not). */
const struct text *ggfs_tensor_digest(struct state *st, uint64_t idx, enum tensor_file tf,
                                      int *err);
/* /hashes likewise (the same text in every version); with a reference
 * and no lock held (a read): it takes hashes_mu. */
const struct text *ggfs_hashes(struct state *st, int *err);
/* /hashes' size, known without the digests (as xxh64's, 17, and
 * sha256's, 65): a stat computes nothing but a stats file. */
uint64_t ggfs_hashes_size(const struct state *st);
/* Called by lookup and getattr before they take the state lock: computes
 * the stats file ino when it is one and not known yet (its size is its
 * text's), with a reference to the current state, not the lock.  0, or
 * the errno the handler replies with. */
int ggfs_digest_prepare(struct ggfs *fs, fuse_ino_t ino);
/* What a lookup of entry name of directory parent needs (a stats file). */
int ggfs_digest_prepare_name(struct ggfs *fs, fuse_ino_t parent, const char *name);

/* ---- notify.c ---- */

int ggfs_notify_start(struct ggfs *fs);
void ggfs_notify_stop(struct ggfs *fs);     /* sends what is queued first */
void ggfs_notify_meta_entry(struct ggfs *fs, const char *name);
void ggfs_notify_inode(struct ggfs *fs, fuse_ino_t ino);
void ggfs_notify_root_entry(struct ggfs *fs, const char *name);
/* Queues st to be freed on a notify thread; false if they do not run. */
bool ggfs_notify_free_state(struct ggfs *fs, struct state *st);
/* Wait (at most a second) until what was queued so far has been sent:
 * the root names only, or everything. */
void ggfs_notify_wait_root(struct ggfs *fs);
void ggfs_notify_wait_all(struct ggfs *fs);

/* ---- whandle.c and commit.c: edits through meta/ ----
 * Functions marked (C) run with commit_mu held and may commit; they return
 * 0 or an errno. */

void ggfs_edit_stop(struct ggfs *fs);       /* frees handles never released */
/* 0 if an edit may write the model now, else the errno every edit fails
 * with at once (at open, create, rename, unlink, setxattr), and *why says
 * why in words: EROFS for -o ro or a model on a read-only file system
 * (remounted so after the mount too), EACCES when gguffs may not write
 * the model or the folder that holds it (where the journal and a
 * rewrite's new file go).  A few system calls, no I/O on the model. */
int ggfs_write_check(struct ggfs *fs, const char **why);
/* Logs that an edit of meta/fname was refused with errno err, and why;
 * returns err. */
int ggfs_edit_refused(struct ggfs *fs, const char *fname, int err, const char *why);
int ggfs_edit_open(struct ggfs *fs, uint64_t idx, int flags, struct fuse_file_info *fi); /* (C) */
/* Opens a tool's scratch file again (any mode); EBUSY for a new key that
 * is being written, ENOENT if there is no such file. */
int ggfs_edit_reopen(struct ggfs *fs, uint64_t id, int flags, struct fuse_file_info *fi); /* (C) */
void ggfs_edit_create(fuse_req_t req, const char *name, struct fuse_file_info *fi);  /* (C) */
int ggfs_edit_write(struct fuse_file_info *fi, const char *buf, size_t size, off_t off);
void ggfs_edit_read(struct fuse_file_info *fi, fuse_req_t req, size_t size, off_t off);
/* truncate of key idx (has_idx) or of an open handle (fi) */
int ggfs_edit_truncate(struct ggfs *fs, struct fuse_file_info *fi, uint64_t idx,
                       bool has_idx, off_t size);                                   /* (C) */
/* pid: the caller of close (fuse_req_ctx), to tell a dup'ed descriptor's
 * close from the last one */
int ggfs_edit_flush(struct ggfs *fs, struct fuse_file_info *fi, pid_t pid);        /* (C) */
void ggfs_edit_release(struct ggfs *fs, struct fuse_file_info *fi);                /* (C) */
int ggfs_edit_unlink(struct ggfs *fs, const char *name);                            /* (C) */
int ggfs_edit_rename(struct ggfs *fs, const char *from, const char *to);            /* (C) */
int ggfs_edit_settype(struct ggfs *fs, uint64_t id, const char *value, size_t size);/* (C) */
/* Size (and id) of a created key or scratch file not committed, found by
 * id or, if fname is not NULL, by file name; false if there is none. */
bool ggfs_pending_size(struct ggfs *fs, uint64_t id, const char *fname, uint64_t *id_out,
                       size_t *size);
bool ggfs_pending_exists(struct ggfs *fs, uint64_t id, const char *fname);
/* The pending file (a created key not committed yet, a scratch file) of
 * the smallest id >= from: its id and name (at most cap bytes with the
 * NUL); false when there is none (readdir of meta/ lists them). */
bool ggfs_pending_next(struct ggfs *fs, uint64_t from, uint64_t *id, char *name, size_t cap);

/* Frees the meta/ snapshots whose release never came (at the end). */
void ggfs_snaps_free(struct ggfs *fs);

/* The low-level operations table (ops.c). */
extern const struct fuse_lowlevel_ops ggfs_ops;

#endif

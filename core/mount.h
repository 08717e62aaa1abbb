/*
 * core/mount.h — what a mount is, without FUSE: the inode numbers, struct
 * mount (the mount: its options, locks, current version and counters),
 * struct state (one version of the model) and the types in them.  fs/
 * (the FUSE driver, fs/fs.h) and core/'s logic of a mount (state.c,
 * tensor.c, f32.c, digests.c, underneath.c, follow.c) share it; nothing
 * here calls into FUSE, and the FUSE objects a mount holds (its session)
 * are opaque pointers core/ never follows.
 * The files of fs/ and core/ and the job of each are listed in
 * doc/HACKING.md ("Layout").
 *
 * Inode numbers are computed from the index, never allocated:
 *
 *   1 (FUSE_ROOT_ID)  /                 3  /meta
 *   4                 /tensors          5  /stats (block cache counters)
 *   6                 /log (the last messages: log.h)
 *   7                 /hf (the model as a Hugging Face folder: gguf/hf.h;
 *                     absent for an architecture it cannot show)
 *   KV_BASE + id      /meta/<key>, id stable per file name (see state.c)
 *   VERSION_BASE + 10g     /info of version g of the model
 *   VERSION_BASE + 10g + 1 /model.gguf of version g
 *   VERSION_BASE + 10g + 2 /info.json of version g
 *   VERSION_BASE + 10g + 3 /hashes (the same bytes in every version:
 *                         tensor names and data never change)
 *   VERSION_BASE + 10g + 4 /model.safetensors of version g
 *   VERSION_BASE + 10g + 5 /hf/config.json of version g
 *   VERSION_BASE + 10g + 6 /hf/generation_config.json of version g
 *   VERSION_BASE + 10g + 7 /hf/model.safetensors of version g
 *   VERSION_BASE + 10g + 8 /hf/tokenizer.json of version g
 *   VERSION_BASE + 10g + 9 /hf/tokenizer_config.json of version g
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
 * an edit the names and inodes that changed are invalidated (fs/notify.c).
 *
 * Locks: the complete table, in the order they are taken (a thread
 * holding one may take only those below it), with what each guards, is in
 * doc/HACKING.md ("Locks, in the order they are taken"); each module's
 * header says which of them its functions expect.  In short: hashes_mu,
 * commit_mu, a write handle's mu, the state lock (write, then read),
 * pend_mu, workers.mu, a prefetch engine's mu, the cache's mu, the remote
 * sources' and caches' own (each alone), states_mu, sig_mu, the notify
 * queues' mu.  Writer-preferring, the state lock is never held while
 * waiting on the network: the swap would wait for that handler and every
 * handler after it for the swap.
 */
#ifndef CORE_MOUNT_H
#define CORE_MOUNT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "gguf/source.h"
#include "gguf/safetensors.h"
#include "gguf/hf.h"
#include "gguf/split.h"
#include "gguf/ntab.h"
#include "gguf/value.h"
#include "cache/cache.h"
#include "core/list.h"

enum {
    INO_ROOT = 1,                /* FUSE_ROOT_ID (fs/fs.h checks it) */
    INO_META = 3,
    INO_TENSORS = 4,
    INO_STATS = 5,
    INO_LOG = 6,
    INO_HF = 7,
    KV_BASE = 16,
    TENSOR_STRIDE = 16,
};
#define VERSION_BASE (1ull << 39)
#define TENSOR_BASE (1ull << 40)
/* a version's files: slot s of version g is VERSION_BASE + VERSION_STRIDE*g + s */
/* hf/'s files are a version's too (generated from its metadata), each
 * with its row in state.c's core_hf_files */
enum version_slot { VS_INFO = 0, VS_MODEL, VS_INFO_JSON, VS_HASHES, VS_SAFETENSORS,
                    VS_HF_CONFIG, VS_HF_GENERATION, VS_HF_SAFETENSORS,
                    VS_HF_TOKENIZER, VS_HF_TOKENIZER_CONFIG, VERSION_STRIDE };
#define INO_VERSION(gen, slot) ((uint64_t)(VERSION_BASE + VERSION_STRIDE * (gen) + (slot)))
#define INO_INFO(gen) INO_VERSION(gen, VS_INFO)
#define INO_MODEL(gen) INO_VERSION(gen, VS_MODEL)
#define INO_INFO_JSON(gen) INO_VERSION(gen, VS_INFO_JSON)
#define INO_SAFETENSORS(gen) INO_VERSION(gen, VS_SAFETENSORS)
#define INO_HASHES(gen) INO_VERSION(gen, VS_HASHES)
#define INO_HF_FILE(gen, slot) INO_VERSION(gen, slot)
/* which of a version's files ino is (enum version_slot) */
#define VERSION_SLOT(ino) (((ino) - VERSION_BASE) % VERSION_STRIDE)

/* raw.npy and f32.npy: raw and f32 behind an NPY header (fs/read.c); stats,
 * xxh64 and sha256: computed on first use (core/digests.c) */
enum tensor_file { TF_DIR = 0, TF_RAW, TF_F32, TF_TYPE, TF_SHAPE, TF_RAW_NPY, TF_F32_NPY,
                   TF_STATS, TF_XXH64, TF_SHA256, TF_COUNT };
_Static_assert((int)TF_COUNT <= (int)TENSOR_STRIDE, "a tensor's files fit its inode stride");

struct mount;

/* A name table: file name (escaped) -> index. */
struct ntab {
    char **names;        /* names[i]: NUL-terminated file name of entry i */
    uint64_t n, cap;
    struct gguf_ntab t;  /* file name -> i */
};

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
 * (it holds no lock: core_state_current), so a version lives until its
 * last reader is done.
 * Metadata lives in the first shard: model->shards[0].
 */
struct state {
    struct mount *fs;
    atomic_uint refs;            /* references (state.c: counted without a
                                    lock; revived from 0 never) */
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
    /* Per shard: the file as this version knows it (core/underneath.c): its
     * inode, size and times when the state was built, shard 0's updated
     * by gguffs' own commits; under fs->sig_mu. */
    struct fsig *sig;
    uint64_t hdr_end;            /* min(data_off, file size) */
    bool pad_src;
    struct stat model_st;        /* times, owner and modes (core_perm) of every node */
    struct ntab meta_names;      /* key file names */
    struct ntab tensor_names;    /* tensor directory names */
    _Atomic(struct text *) *kv_text;   /* per key, rendered lazily */
    struct text info;            /* /info, rendered when built */
    _Atomic(struct text *) info_json;  /* /info.json, rendered on first use */
    /* /model.safetensors: its header and spans, laid out on first use */
    _Atomic(struct gguf_st_layout *) safetensors;
    /* /hf: the HF view, built with the state (NULL: none, hf_why says
     * why), and hf/model.safetensors' layout, laid out on first use */
    struct gguf_hf *hf;
    char hf_why[256];            /* as long as a gguf_diag message */
    _Atomic(struct gguf_st_layout *) hf_st;
    /* hf/tokenizer.json and hf/tokenizer_config.json (gguf/hf_tokenizer.h),
     * made on first use (a lookup, listing, stat or read of them): data
     * NULL when the tokenizer cannot be expressed (the files are absent) */
    _Atomic(struct text *) hf_tok[2];
    uint64_t *kv_id;             /* key index -> id (inode KV_BASE + id) */
    int64_t *id_kv;              /* id -> key index, -1: no such key now */
    uint64_t n_ids;
};

/* A mount with nothing in it yet (mount.c): every field zero but the
 * descriptors (-1), the mount id (-1) and the timeout (a year); the state
 * lock writer-preferring (readers must not starve a commit waiting to
 * swap), the mutexes made, the lists empty.  fini destroys the locks
 * (what the mount holds is its owner's to free first). */
void core_mount_init(struct mount *fs);
void core_mount_fini(struct mount *fs);

/* The file that holds the metadata (the first shard's index). */
static inline const struct gguf_file *st_meta(const struct state *st)
{
    return st->model->shards[0].gf;
}

/* fs->under: what was noticed (bits, never cleared during a mount) */
enum { UNDER_CHANGED = 1, UNDER_REPLACED = 2 };

/* Read requests are counted per kind of file (the stats file). */
enum read_kind { RK_RAW, RK_F32, RK_MODEL, RK_RAW_NPY, RK_F32_NPY, RK_INFO_JSON,
                 RK_SAFETENSORS, RK_TENSOR_STATS, RK_XXH64, RK_SHA256, RK_HASHES,
                 RK_HF, RK_COUNT };

struct workers;                  /* core/f32.c */
struct digests;                  /* core/digests.c */
struct notify;                   /* fs/notify.c */
struct whandle;                  /* fs/whandle.c */
struct snap;                     /* fs/ops_open.c */
struct follow;                   /* core/follow.c */

/* The mount: passed to every handler as the session's userdata. */
struct mount {
    /* set before the session starts, then read-only */
    const char *model_path;      /* as given, for messages */
    const char *model_real;      /* the first shard's absolute path (edits go there) */
    bool read_only;
    /* Why the model cannot be written, found at mount (0: it can): EROFS
     * (its file system is read-only), EACCES (gguffs may not write it).
     * Every edit then fails at open with it (core_write_check). */
    int write_err;
    /* A descriptor of the model (the first shard) holding an OFD write
     * lock on the whole file, taken at mount: one read-write mount per
     * model.  -1: none (-o ro, a remote model, or a file system without
     * locks).  A rewrite replaces it with the new file's (core/commit.c);
     * under commit_mu after the mount.  With -o overlay, the lock is on
     * the overlay file instead (core/overlay.c), once it exists. */
    int lock_fd;
    bool remote;                 /* the model is read by HTTP (remote/) */
    /* -o overlay (core/overlay.c): a remote model's edits go to this local
     * file (its absolute path; NULL without), and every version's shards
     * read through base's sources: the remote model as opened at mount,
     * closed at the end */
    const char *overlay;
    struct gguf_split *base;
    double timeout;              /* entry/attr timeout, seconds (read
                                    through ggfs_timeout) */
    /* The kernel opens directories without asking (FUSE_CAP_NO_OPENDIR_
     * SUPPORT, set at init): it then keeps every listing (FOPEN_CACHE_DIR),
     * and fs/notify.c invalidates the root's and meta/'s when they change. */
    bool no_opendir;
    uint64_t cache_size;
    int threads;                 /* -o threads (-1: the default) */
    /* The size of the kernel's read requests (fs/session.c ggfs_request_size),
     * and of f32 chunks: the f32 view of a tensor is cut into chunks of
     * chunk_bytes / 4 floats, the blocks of fs->cache.  A whole number of
     * pages, so a whole number of quantization blocks for every type (every
     * block size divides 1 KiB of floats); one chunk per request when the
     * readahead is a whole number of requests (see fs/ops.c ggfs_set_readahead). */
    uint32_t req_bytes, chunk_bytes;
    long long mnt_id;            /* the mount's id in /proc (-1: unknown) */
    struct fuse_session *se;
    struct cache *cache;         /* dequantized f32 chunks */
    struct rcache *rcache;       /* remote blocks (blocksrc.h), NULL for a
                                    local model */
    uint64_t readahead;          /* -o readahead: bytes (whole requests),
                                    0 for the kernel's */
    char bdi[32];                /* the mount's bdi ("0:NN"), "" if unknown */
    atomic_bool ra_pending;      /* readahead still to be written (fs/ops.c) */

    pthread_rwlock_t lock;       /* read: handlers that only look, and reads
                                    while they take a reference to st;
                                    write: swapping st (see the lock order) */
    pthread_mutex_t commit_mu;   /* one edit at a time (core/commit.c) */
    struct state *st;            /* the current version: under lock, or commit_mu */
    struct ntab ids;             /* key ids: a meta/ file name -> a number for
                                    the life of the mount (state.c); under
                                    commit_mu (or before the session) */

    pthread_mutex_t states_mu;
    struct glist states;         /* every live state, under states_mu */

    pthread_mutex_t pend_mu;
    struct whandle *pending;     /* created keys and scratch files, under pend_mu */
    struct glist live;           /* every handle, freed at the end; under pend_mu */
    struct glist snaps;          /* every meta/ snapshot (fs/ops_open.c), under pend_mu */
    struct glist st_opens;       /* every open model.safetensors (fs/ops_open.c), under pend_mu */
    struct glist streams;        /* every open f32 file's stream (core/f32.c), under pend_mu */

    /* Read requests and their bytes, by file (the stats file). */
    struct {
        _Atomic uint64_t n, bytes, max;
    } reads[RK_COUNT];           /* enum read_kind */

    struct workers *workers;
    /* tensors' stats and digests and /hashes, kept for the mount once
     * computed (core/digests.c); made before the session, freed after it */
    struct digests *digests;
    struct notify *notify;
    /* Hands a state whose last reference went to another thread to free
     * (fs/notify.c sets it when its threads start; NULL, or false returned:
     * the caller frees it), so that state.c needs no notify.h. */
    _Atomic(bool (*)(struct mount *, struct state *)) free_later;
    /* Told by core_state_swap that ns replaced old as the current version
     * (notify.c sets it while its threads run, to invalidate what the
     * kernel keeps of them; NULL: nobody to tell). */
    _Atomic(void (*)(struct mount *, const struct state *old, const struct state *ns)) swapped;
    /* The size of the file log at the root (fs/log.c's kept lines; set
     * before the session; NULL: 0). */
    size_t (*log_size)(void);
    atomic_bool changed_logged;  /* a remote changed: logged once (core/underneath.c) */

    /* A local model changed underneath (core/underneath.c). */
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
    /* edits of another gguffs followed (core/follow.c: a read-only mount) */
    atomic_uint_least64_t under_followed;
    int in_fd;                   /* inotify (-1: none) */
    int in_dir_wd;               /* its watch of the model's folder (-1: none) */
    int in_stop[2];              /* a pipe that ends its thread */
    pthread_t in_thread;
    /* The records of edits beside the model (follow.h): this mount's, or
     * another gguffs' that this read-only mount follows; NULL for a
     * remote model.  Made before the session, freed after it. */
    struct follow *follow;

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
    /* invalidations that could not be queued (fs/notify.c; stats): from the
     * first on, the entry and attribute timeouts are 0 (ggfs_timeout) */
    atomic_uint_least64_t notes_lost;
};

#endif

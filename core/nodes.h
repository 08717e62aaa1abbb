/*
 * core/nodes.h — the inode layout (nodes.c; the numbers are in core/mount.h): what
 * an inode is in a version of the model, its attributes, and the small
 * texts the tree shows (type, shape, stats, meta/ values).  No FUSE; tested
 * by tests/unit/test_nodes.c.
 *
 * Promises: an inode is classified from its number and the state's index
 * (a key's through the state's id table: ids are stable per file name),
 * so the same number means the same file in every version that has it (a
 * version's own files, info, model.gguf, info.json and model.safetensors,
 * say which version they are).  Attributes come from the state alone
 * (sizes, the model file's times, owner and modes; a pending meta/
 * file's size is its handle's, passed in).  A meta/ value is rendered on
 * first use and kept in the state.
 *
 * Locks: the caller holds the state it passes: the state lock (read),
 * commit_mu (fs->st), or a reference.  core_version takes states_mu; the
 * stats text reads the caches' counters under their own locks.
 */
#ifndef CORE_NODES_H
#define CORE_NODES_H

#include "core/mount.h"

/* Room for the stats file's text. */
#define STATS_TEXT_MAX 4096

enum kind { K_NONE, K_ROOT, K_INFO, K_META, K_TENSORS, K_KV, K_TENSOR, K_STATS, K_MODEL,
            K_INFO_JSON, K_SAFETENSORS, K_HASHES, K_LOG, K_HF, K_HF_FILE };

struct node {
    enum kind kind;
    uint64_t idx;            /* key or tensor index; K_HF_FILE: its version slot */
    enum tensor_file tf;     /* for K_TENSOR */
    uint64_t gen;            /* for a version's files (K_INFO, K_MODEL, K_INFO_JSON,
                                K_SAFETENSORS): the version */
};

/* What inode ino is in state st (any version's info and model.gguf). */
struct node core_classify(const struct state *st, uint64_t ino);
/* The entries of /, in readdir order: lookup and readdir share it. */
struct root_entry {
    const char *name;
    enum kind kind;
};
extern const struct root_entry core_root[];
extern const unsigned core_root_n;
/* The inode of root entry e in state st. */
uint64_t core_root_ino(const struct state *st, unsigned e);
uint64_t core_tensor_ino(uint64_t idx, enum tensor_file tf);
extern const char *const core_tensor_files[TF_COUNT];   /* NULL, "raw", ... */
/* The state of version gen with a reference, or NULL when it is gone. */
struct state *core_version(struct state *st, uint64_t gen);
/* true if root entry e is in st's tree (hf/ only for a model it can
 * show). */
bool core_root_has(const struct state *st, unsigned e);
/* Attributes of ino: 0 or an errno (ESTALE: a version that is gone). */
int core_stat(struct mount *fs, struct state *st, uint64_t ino, struct stat *out);
/* Permission bits of the tree's nodes, derived from the model file's
 * (nodes.c). */
enum perm_of { PERM_FILE, PERM_DIR, PERM_META_FILE, PERM_META_DIR };
mode_t core_perm(const struct state *st, enum perm_of of);
/* Attributes of a key created and not committed yet. */
void core_stat_pending(const struct state *st, uint64_t ino, size_t size,
                       struct stat *out);
/* The rendered value of key i (kept in st); NULL when out of memory. */
const struct text *core_kv_text(struct state *st, uint64_t i);
/* type or shape of tensor idx into buf (cap bytes); its length.  A text
 * longer than cap - 1 bytes is cut there (its length then cap - 1),
 * NUL-terminated; nothing is written past cap (cap 0: nothing, 0). */
size_t core_tensor_text(const struct state *st, uint64_t idx, enum tensor_file tf,
                        char *buf, size_t cap);
/* The stats file's text into buf; its length (cut short as
 * core_tensor_text's). */
size_t core_stats_text(struct mount *fs, char *buf, size_t cap);

#endif

/*
 * fs/state.h — one version of the model (state.c): its name tables, key
 * ids and rendered texts (struct state, fs.h), and the counted list of
 * live versions.
 *
 * Promises: a state never changes once built (info.json and
 * model.safetensors' layout, like a key's value in nodes.c, are made on
 * first use and kept: any number of threads may ask at once, one copy
 * wins, so a version nobody asks about costs nothing); it lives while
 * anyone holds a reference (fs->st, every open info, info.json,
 * model.gguf or model.safetensors, every read while it runs), and is
 * freed with its model by the last ggfs_state_put.  A key file
 * name keeps its id (its inode, KV_BASE + id) for the life of the mount.
 *
 * Locks: ggfs_state_current takes the state lock (read) and so must not
 * be called with it or anything below it held (commit_mu is fine);
 * ggfs_state_ref takes no lock (an atomic count); ggfs_state_by_gen takes
 * states_mu, and so does the ggfs_state_put that drops the last reference.
 * ggfs_state_new and ggfs_key_id run under commit_mu (or before the
 * session).  The rest read a state the caller holds (a reference, the
 * state lock, or commit_mu for fs->st).
 */
#ifndef FS_STATE_H
#define FS_STATE_H

#include "fs.h"

/* What fstat says of a model file, compared to notice a change made by
 * another program (underneath.c). */
struct fsig {
    dev_t dev;
    ino_t ino;
    off_t size;
    nlink_t nlink;
    struct timespec mtime, ctime;
};

/* fstat of fd into out; false when fstat fails. */
bool ggfs_sig_take(int fd, struct fsig *out);

/* Index of name in t, or -1. */
int64_t ntab_find(const struct ntab *t, const char *name);

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
/* The index in st of the key of id, or -1 when st has no such key. */
static inline int64_t ggfs_key_index(const struct state *st, uint64_t id)
{
    return id < st->n_ids ? st->id_kv[id] : -1;
}
/* info.json of st (rendered on first use, kept) into *out: 0, or the
 * errno of the failure as gguf_err_errno_made gives it (ENOMEM; EIO, and
 * logged, for a merged header that does not parse). */
int ggfs_info_json(struct state *st, const struct text **out);
/* model.safetensors' layout of st (laid out on first use, kept; see
 * gguf/safetensors.h) into *out: 0, or the errno of the failure as
 * gguf_err_errno_made gives it: ENOMEM, EFBIG for a model whose
 * safetensors file would be too large (logged). */
int ggfs_safetensors(struct state *st, const struct gguf_st_layout **out);
/* hf/model.safetensors' layout of st (gguf/hf.h), laid out on first use
 * and kept, its errors mapped, as model.safetensors'; ENOENT when st has
 * no hf/. */
int ggfs_hf_safetensors(struct state *st, const struct gguf_st_layout **out);
/* hf/'s files, in readdir order: name and version slot (fs.h). */
struct hf_file {
    const char *name;
    enum version_slot slot;
};
extern const struct hf_file ggfs_hf_files[];
extern const unsigned ggfs_hf_files_n;
/* true if st has hf/ and hf/'s file in slot (its presence may depend on
 * what the model holds: the tokenizer's files). */
bool ggfs_hf_has(const struct state *st, enum version_slot slot);
/* The text of hf/'s file in slot (config.json, generation_config.json)
 * of st: 0, or ENOENT (no such file in st). */
int ggfs_hf_text(struct state *st, enum version_slot slot, const char **data,
                 size_t *len);
/* The size of hf/'s file in slot of st: 0 or an errno. */
int ggfs_hf_size(struct state *st, enum version_slot slot, uint64_t *size);

#endif

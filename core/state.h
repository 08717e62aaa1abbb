/*
 * core/state.h — one version of the model (state.c): its name tables, key
 * ids and rendered texts (struct state, core/mount.h), and the counted
 * list of live versions.  No FUSE: fs/ builds its tree on it; tested by
 * tests/unit/test_state.c.
 *
 * Promises: a state never changes once built (info.json and
 * model.safetensors' layout, like a key's value in nodes.c, are made on
 * first use and kept: any number of threads may ask at once, one copy
 * wins, so a version nobody asks about costs nothing); it lives while
 * anyone holds a reference (fs->st, every open info, info.json,
 * model.gguf or model.safetensors, every read while it runs), and is
 * freed with its model by the last core_state_put.  A key file
 * name keeps its id (its inode, KV_BASE + id) for the life of the mount.
 *
 * Locks: core_state_current takes the state lock (read) and so must not
 * be called with it or anything below it held (commit_mu is fine);
 * core_state_ref takes no lock (an atomic count); core_state_by_gen takes
 * states_mu, and so does the core_state_put that drops the last reference.
 * core_state_new and core_key_id run under commit_mu (or before the
 * session).  The rest read a state the caller holds (a reference, the
 * state lock, or commit_mu for fs->st).
 */
#ifndef CORE_STATE_H
#define CORE_STATE_H

#include "core/mount.h"

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
bool core_sig_take(int fd, struct fsig *out);

/* Index of name in t, or -1. */
int64_t core_ntab_find(const struct ntab *t, const char *name);

/* Builds the state (version gen) for an opened model, with one reference
 * (takes model on success); 0 or an errno.  Under commit_mu, or before
 * the session. */
int core_state_new(struct mount *fs, struct gguf_split *model, uint64_t gen,
                   struct state **out);
struct state *core_state_ref(struct state *st);
/* fs->st with a reference, taken under the state lock (read) and nothing
 * else: for a handler or thread that may wait (on a fetch, a fill, a
 * splice) and so must not hold the lock meanwhile.  Drop it with
 * core_state_put. */
struct state *core_state_current(struct mount *fs);
/* Drops a reference; the last one frees the state (on a notify thread
 * when they run: closing a replaced model file may take a while). */
void core_state_put(struct state *st);
/* Makes ns (with the reference the caller gives it) the current version,
 * under commit_mu: swapped in under the state lock (write), fs->swapped
 * told (fs/notify.c: the kernel's caches of what changed), and the old
 * version's reference dropped (open handles keep it).  After a commit,
 * and when a read-only mount adopts another gguffs' edit (follow.c). */
void core_state_swap(struct mount *fs, struct state *ns);
/* The live state of version gen, with a reference; NULL if it is gone. */
struct state *core_state_by_gen(struct mount *fs, uint64_t gen);
void core_state_free(struct state *st);
/* The stable id of a key file name (registered on first use); -1 on ENOMEM.
 * Under commit_mu, or before the session. */
int64_t core_key_id(struct mount *fs, const char *fname);
void core_key_ids_free(struct ntab *ids);
/* The index in st of the key of id, or -1 when st has no such key. */
static inline int64_t core_key_index(const struct state *st, uint64_t id)
{
    return id < st->n_ids ? st->id_kv[id] : -1;
}
/* info.json of st (rendered on first use, kept) into *out: 0, or the
 * errno of the failure as gguf_err_errno_made gives it (ENOMEM; EIO, and
 * logged, for a merged header that does not parse). */
int core_info_json(struct state *st, const struct text **out);
/* model.safetensors' layout of st (laid out on first use, kept; see
 * gguf/safetensors.h) into *out: 0, or the errno of the failure as
 * gguf_err_errno_made gives it: ENOMEM, EFBIG for a model whose
 * safetensors file would be too large (logged). */
int core_safetensors(struct state *st, const struct gguf_st_layout **out);
/* hf/model.safetensors' layout of st (gguf/hf.h), laid out on first use
 * and kept, its errors mapped, as model.safetensors'; ENOENT when st has
 * no hf/. */
int core_hf_safetensors(struct state *st, const struct gguf_st_layout **out);
/* hf/'s files, in readdir order: name and version slot (core/mount.h). */
struct hf_file {
    const char *name;
    enum version_slot slot;
};
extern const struct hf_file core_hf_files[];
extern const unsigned core_hf_files_n;
/* true if st has hf/ and hf/'s file in slot (its presence may depend on
 * what the model holds: the tokenizer's files). */
bool core_hf_has(const struct state *st, enum version_slot slot);
/* The text of hf/'s file in slot (config.json, generation_config.json)
 * of st: 0, or ENOENT (no such file in st). */
int core_hf_text(struct state *st, enum version_slot slot, const char **data,
                 size_t *len);
/* The size of hf/'s file in slot of st: 0 or an errno. */
int core_hf_size(struct state *st, enum version_slot slot, uint64_t *size);

#endif

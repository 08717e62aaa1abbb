/*
 * core/digests.h — what is computed on first use and kept for the mount
 * (digests.c): a tensor's stats (over its f32 values, through the block
 * cache, so a later f32 read is served from it and vice versa), its xxh64
 * and sha256 (over its raw bytes, from the same sources as raw reads), and
 * /hashes (what llama-gguf-hash --xxh64 --sha256 prints for the model as
 * model.gguf).  Tensor data never changes, so what is computed once holds
 * for every version of the model.
 *
 * Every file's size is known without computing it (hex digits of a fixed
 * length; /hashes: lines of fixed length around the names; stats: a
 * fixed-width layout, gguf/fstats.h), so only a read computes anything: a
 * stat, lookup or readdir (ls -lR, du, find) reads no tensor data.
 *
 * Locks: hashes_mu (first in the lock order) serializes /hashes'
 * computations; a computation runs with a reference to a state (a read),
 * never under the state lock.
 */
#ifndef CORE_DIGESTS_H
#define CORE_DIGESTS_H

#include "core/mount.h"

/* The table of what digest.c keeps, for n_tensors tensors (fs->digests):
 * 0 or ENOMEM.  Before the session; freed after it. */
int core_digests_new(struct mount *fs, uint64_t n_tensors);
void core_digests_free(struct mount *fs);
/* The text of tensor idx's stats, xxh64 or sha256 file (tf), computed on
 * first use and kept for the mount; NULL with *err set (EIO, ENOMEM).  st:
 * a reference the caller holds (a read). */
const struct text *core_tensor_digest(struct state *st, uint64_t idx, enum tensor_file tf,
                                      int *err);
/* /hashes likewise (the same text in every version); with a reference
 * and no lock held (a read): it takes hashes_mu. */
const struct text *core_hashes(struct state *st, int *err);
/* /hashes' size, known without the digests (as xxh64's, 17, sha256's, 65,
 * and a stats file's, GGUF_FSTATS_TEXT_LEN): a stat computes nothing. */
uint64_t core_hashes_size(const struct state *st);

#endif

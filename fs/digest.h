/*
 * fs/digest.h — what is computed on first use and kept for the mount
 * (digest.c): a tensor's stats (over its f32 values, through the block
 * cache, so a later f32 read is served from it and vice versa), its xxh64
 * and sha256 (over its raw bytes, from the same sources as raw reads), and
 * /hashes (what llama-gguf-hash --xxh64 --sha256 prints for the model as
 * model.gguf).  Tensor data never changes, so what is computed once holds
 * for every version of the model.
 *
 * Locks: hashes_mu (first in the lock order) serializes /hashes'
 * computations; a computation is never run under the state lock by a
 * read: lookup and getattr call ggfs_digest_prepare before they take it.
 */
#ifndef FS_DIGEST_H
#define FS_DIGEST_H

#include "fs.h"

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

#endif

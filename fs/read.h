/*
 * fs/read.h — reads of raw, f32, model.gguf and model.safetensors; raw.npy
 * and f32.npy (read.c).  Each read replies to its request itself (exactly
 * one fuse_reply_*).
 *
 * Promises: bytes of a source (raw tensor bytes, model.gguf's data) are
 * served as the source lends them (gguf_source_spans): a file's are
 * spliced from its descriptor (the kernel moves them, gguffs never copies
 * them), a remote's written from the pinned blocks of the block cache or
 * spliced from the disk cache's file; a source that lends none is read
 * into a buffer.  f32 is gathered from pinned cache
 * chunks (f32.h), filled on a miss.  raw.npy and f32.npy are an NPY
 * header, then raw's and f32's paths.  A local model changed underneath
 * reads EIO (underneath.h), and so does a failed read of a source.
 *
 * Locks: the ggfs_read_* functions run with none held: the caller holds a
 * reference to the version read (the handle's, or core_state_current's),
 * never the state lock, since a splice, fetch or fill may wait on a slow
 * server (see the lock order in core/mount.h).  The others take no lock and may
 * be called under any.
 */
#ifndef FS_READ_H
#define FS_READ_H

#include "fs.h"


void ggfs_read_raw(fuse_req_t req, const struct state *st, uint64_t idx, size_t size, off_t off);
struct f32_stream;
/* s: the open file's stream (NULL: none, no prefetching) */
void ggfs_read_f32(fuse_req_t req, struct state *st, uint64_t idx, size_t size, off_t off,
                   struct f32_stream *s);
void ggfs_read_model(fuse_req_t req, const struct state *st, size_t size, off_t off);
/* model.safetensors of version st: the header from memory, then each
 * tensor's raw bytes (as raw reads are served) or f32 bytes (through the
 * block cache, prefetched as f32 files are by the open file's stream s,
 * which follows the tensor being read), piece by piece.  st: a reference
 * the caller holds (the handle's version), not the state lock: an f32
 * piece's fill may wait on a remote server. */
void ggfs_read_safetensors(fuse_req_t req, struct state *st, size_t size, off_t off,
                           struct f32_stream *s);
/* hf/model.safetensors of version st (gguf/hf.h): as model.safetensors
 * is served, each tensor from its sources' ranges (gguf_hf_seg): raw
 * bytes spliced, f32 bytes from pinned chunks, while a reply has few
 * pieces; the rest of a reply (many short rows, gemma's norms minus 1)
 * copied into one buffer.  ENOENT when st has no hf/. */
void ggfs_read_hf_safetensors(fuse_req_t req, struct state *st, size_t size, off_t off,
                              struct f32_stream *s);
/* raw.npy and f32.npy: the header, then raw's or f32's bytes (the same
 * paths, the offset shifted; a read may straddle the two). */
void ggfs_read_npy(fuse_req_t req, struct state *st, uint64_t idx, enum tensor_file tf,
                   size_t size, off_t off, struct f32_stream *s);
/* Replies with [off, off+size) of a buffer of len bytes. */
void ggfs_reply_slice(fuse_req_t req, const char *data, size_t len, size_t size, off_t off);

#endif

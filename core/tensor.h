/*
 * core/tensor.h — what files a tensor's directory holds, and how its views
 * are laid out (tensor.c): the facts about a tensor of a version that
 * every layer above asks (the state's model.safetensors layout, the
 * inodes' attributes, the reads), from the tensor's type and its file's
 * byte order alone.
 *
 * Promises: pure functions of the state's index (which never changes):
 * no lock, no I/O, no allocation; callable from any thread holding the
 * state it passes.
 */
#ifndef CORE_TENSOR_H
#define CORE_TENSOR_H

#include "core/mount.h"

#include "gguf/npy.h"

/* true if tensor idx has file tf (f32, f32.npy and stats only for types
 * with a dequantizer, raw.npy only for types numpy has: core_npy_descr). */
bool core_tensor_has(const struct state *st, uint64_t idx, enum tensor_file tf);
/* true if tensor idx's f32 view is its raw bytes (little-endian float32):
 * served as raw, never through the cache. */
bool core_f32_is_raw(const struct state *st, uint64_t idx);
/* numpy's dtype of tensor idx's raw bytes ("<f2", "|i1", ...), or NULL. */
const char *core_npy_descr(const struct state *st, uint64_t idx);
/* The NPY header (format 1.0, what numpy.save writes: gguf/npy.h) of
 * raw.npy or f32.npy of tensor idx into buf (NPY_HEADER_MAX bytes): its
 * length, a multiple of 64; 0 if the tensor has no such file. */
#define NPY_HEADER_MAX GGUF_NPY_HEADER_MAX
size_t core_npy_header(const struct state *st, uint64_t idx, enum tensor_file tf, char *buf);

#endif

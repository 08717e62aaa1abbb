/*
 * gguf/safetensors.h — a model as a safetensors file (model.safetensors):
 * its header and where each tensor's bytes lie in it.
 *
 * The file (the format of huggingface/safetensors): an 8-byte
 * little-endian length N, a JSON object of N bytes (padded with spaces to
 * a multiple of 8), then the tensors' bytes, contiguous from the end of
 * the header to the end of the file (no holes).  The object has
 * "__metadata__" first (strings only: "format": "pt", which transformers
 * wants, then the GGUF's scalar string keys, first occurrence, as they
 * are), then one entry per tensor: {"dtype", "shape", "data_offsets"}.
 *
 * What each tensor becomes (the caller says, per tensor, what it has):
 *
 *   - F32, F16, BF16, F64, I8, I16, I32, I64 of a little-endian file: its
 *     own dtype, its raw bytes (span.f32 false);
 *   - any other tensor with an f32 view (a quantized type, any tensor of
 *     a big-endian file): "F32", its f32 bytes (span.f32 true);
 *   - left out, and named in __metadata__'s "gguffs.omitted" (one name a
 *     line, bytes that are not UTF-8 as U+FFFD): a tensor with no f32 view
 *     (a type without a dequantizer), one whose name is not UTF-8 (JSON
 *     readers refuse it) and one named "__metadata__".
 *
 * Shapes are in numpy order (ne reversed, as the shape file gives them).
 * Tensors are ordered by element size, largest first, then by name
 * (bytes): every span then starts at a multiple of its element size, in
 * the data and in the file (the header's end is a multiple of 8).
 * Metadata keys or values that are not UTF-8, and a key "format", are not
 * copied.  Names are GGUF's (as in tensors/), not Hugging Face's.
 *
 * Bounds: memory is the header (proportional to the names and the string
 * values, each escaped at most 6 bytes a byte) plus a span (56 bytes) per tensor;
 * the caller's index bounds the count.  Sizes are checked: a layout whose
 * size would not fit in an off_t is refused (GGUF_E_TOOBIG), never wrapped.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_SAFETENSORS_H
#define GGUF_SAFETENSORS_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "diag.h"
#include "gguf.h"

/* What the layout needs of tensor i (the caller's numbering). */
struct gguf_st_in {
    const char *name;             /* its bytes, valid as long as the layout */
    uint32_t name_len;
    const struct gguf_tensor *t;  /* type, dims, element count, nbytes */
    bool big_endian;              /* of the file that holds it */
    bool has_f32;                 /* it has an f32 view (n_elems * 4 bytes) */
    /* A view of another shape (hf/model.safetensors: gguf/hf.h); left
     * zero, the tensor's own.  shape: n_dims sizes in numpy order, with
     * n_elems their product; force_f32: served as F32 whatever the type. */
    const uint64_t *shape;
    uint32_t n_dims;
    uint64_t n_elems;
    bool force_f32;
};
typedef void (*gguf_st_get)(void *ctx, uint64_t i, struct gguf_st_in *out);

/* One tensor's bytes in the file. */
struct gguf_st_span {
    uint64_t start;       /* offset in the file: hdr.len + its data_offsets[0] */
    uint64_t len;
    uint64_t tensor;      /* the caller's index */
    bool f32;             /* its f32 bytes; else its raw bytes */
    uint8_t esize;        /* element size: 1, 2, 4 or 8 */
    uint32_t name_len;    /* its name and info (the caller's) */
    const char *name;
    const struct gguf_tensor *t;
    const uint64_t *shape;  /* the caller's shape (numpy order), or NULL: t's */
    uint32_t n_dims;
};

struct gguf_st_layout {
    struct gguf_buf hdr;          /* the file's first hdr.len bytes: N, the JSON */
    struct gguf_st_span *span;    /* in file order; NULL when n_span is 0 */
    uint64_t n_span;
    uint64_t n_omitted;           /* tensors left out */
    uint64_t size;                /* the file's size */
};

/*
 * Lays n tensors out (get gives each; meta, when not NULL, gives the
 * scalar string keys for __metadata__) into *out (zeroed first; free with
 * gguf_st_free, also after a failure).  GGUF_OK, GGUF_E_NOMEM,
 * GGUF_E_TOOBIG (diag says which tensor) when a size overflows, or
 * GGUF_E_RANGE when a plain tensor's byte count is not its elements'.
 */
enum gguf_err gguf_safetensors(const struct gguf_file *meta, uint64_t n, gguf_st_get get,
                               void *ctx, struct gguf_st_layout *out, struct gguf_diag *diag);
/* The same, the header padded to a multiple of align bytes (a power of
 * two, at least 8): the data then starts at a multiple of align in the
 * file and in a mapping of it. */
enum gguf_err gguf_safetensors_aligned(const struct gguf_file *meta, uint64_t n,
                                       gguf_st_get get, void *ctx, unsigned align,
                                       struct gguf_st_layout *out, struct gguf_diag *diag);
void gguf_st_free(struct gguf_st_layout *l);

/* The first span that ends after file offset pos (its index in l->span;
 * n_span when none does): for hdr.len <= pos < size, the span holding
 * pos, never an empty one.  Binary search. */
uint64_t gguf_st_find(const struct gguf_st_layout *l, uint64_t pos);

#endif

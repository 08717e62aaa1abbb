/*
 * gguf/gguf.h — a validating GGUF reader with a compact index.
 *
 * gguf_open() reads a GGUF file's header (magic, version, key/values and
 * tensor infos), checks every count, length, type and offset against the
 * file size, and builds an index whose size is proportional to the number of
 * keys and tensors, not to the number of array elements.  Tensor data is
 * never read.  The header bytes are copied into memory once; everything the
 * index points at lives in that copy, so a model file that changes or
 * shrinks later cannot make rendering fault.
 *
 * Supported: GGUF versions 1 (32-bit counts and lengths), 2 and 3, little-
 * and big-endian files (detected from the version field), any power-of-two
 * general.alignment, and every tensor type in gguf/types.h.
 *
 * A tensor whose type id has no entry there (newer than gguffs, or removed
 * from ggml: ggml_type_get() is NULL) does not make the file unopenable.
 * Its ne[] and element count are checked as usual; its nbytes cannot come
 * from the type, so it is derived from the layout: 0 without elements (as
 * for any type), else from its offset to the next offset where another
 * tensor starts, or to the end of the file, whichever is first.  In a file
 * ggml wrote that is the tensor's data plus the padding after it (the
 * padding is part of the range; nothing else can be).  The range is then
 * checked like any other (inside the file, no overlap), and a note says
 * the size was derived.  Refused: two such tensors with elements at the
 * same offset (ambiguous), and one whose offset leaves no bytes before the
 * end of the file.  Callers tell a derived size by ggml_type_get(type) ==
 * NULL; such a tensor has no f32 view.
 *
 * A file that is not valid GGUF yields GGUF_E_* and a gguf_diag naming what
 * is wrong, the key or tensor concerned and the byte offset.  A file that
 * ggml would refuse but whose meaning is unambiguous (version 1, a duplicate
 * key, a row not a multiple of the block size while the element count is,
 * tensors not stored contiguously or not aligned, long tensor names, type
 * ids unknown to gguffs) opens, and the objections are listed in
 * gguf_file.notes.
 *
 * The library, one module per header (each documents its promises):
 *
 *   gguf.h    this reader and its index     source.h  where bytes come from
 *   diag.h    error codes, diagnostics      bytes.h   integers in byte order
 *   buf.h     growable buffers              ntab.h    tables of names
 *   types.h   ggml tensor types             value.h   values as text (numfmt.h)
 *   names.h   names as file names           info.h    the summary (gguf-dump)
 *   split.h   split models as one           edit.h    edits: kvedit.h (one
 *             (model.gguf's header)                   change), header.h (a new
 *                                                     header), commit.h (into
 *                                                     the file, crash-safely)
 *   safetensors.h  the model as a safetensors file (model.safetensors)
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_GGUF_H
#define GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bytes.h"
#include "diag.h"

/* Value types as numbered in the GGUF specification. */
enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4,
    GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8,
    GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
    GGUF_VTYPE_COUNT = 13
};

/* Limits enforced while parsing (beyond "fits in the file"). */
#define GGUF_MAX_DIMS 4            /* ggml's GGML_MAX_DIMS */
#define GGUF_MAX_NEST 8            /* nesting depth of arrays of arrays */
#define GGUF_MAX_NAME 65535        /* longest key or tensor name accepted */
#define GGML_MAX_NAME_LEN 63       /* longest tensor name ggml accepts */

/* One key/value.  Offsets point into gguf_file.hdr. */
struct gguf_kv {
    uint64_t key_off;     /* key bytes (not NUL-terminated) */
    uint32_t key_len;
    uint8_t type;         /* enum gguf_vtype */
    uint8_t elem_type;    /* for arrays: the element type */
    uint16_t dup;         /* 1 for the first occurrence of a key, 2, 3... */
    uint64_t val_off;     /* value; for arrays, the first element */
    uint64_t count;       /* array element count; 1 for scalars */
    uint64_t val_size;    /* bytes from val_off to the end of the value */
    uint64_t rec_off;     /* where this key/value record starts */
};

struct gguf_tensor {
    uint64_t name_off;    /* name bytes in hdr (not NUL-terminated) */
    uint32_t name_len;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];   /* ggml order: ne[0] is the row length */
    uint32_t type;        /* ggml type id: any u32 (see above) */
    uint64_t offset;      /* relative to gguf_file.data_off */
    uint64_t n_elems;     /* product of ne[] */
    uint64_t nbytes;      /* from the type; derived from the layout when
                             ggml_type_get(type) is NULL (see above) */
    uint64_t info_off;    /* where this tensor info starts in the file */
};

struct gguf_file {
    uint8_t *hdr;         /* bytes [0, hdr_size) of the file */
    uint64_t hdr_size;    /* end of the tensor infos */
    uint64_t file_size;
    uint32_t version;
    struct gguf_enc enc;
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    uint64_t alignment;   /* general.alignment or 32 */
    uint64_t data_off;    /* start of tensor data: hdr_size aligned up */
    char *notes;          /* '\n'-separated objections ggml would raise, or NULL */
    uint64_t pad_have;    /* bytes of the padding [hdr_size, data_off) that
                             follow the header in hdr (the parser had read
                             them already; at most GGUF_PAD_HAVE_MAX): a
                             reader of the padding needs no read for these */
};

#define GGUF_PAD_HAVE_MAX (1u << 20)

/*
 * Opens and indexes the GGUF file at path.  On success *out is a new index
 * (free with gguf_close) and GGUF_OK is returned.  On failure *out is NULL
 * and diag says what is wrong.  Memory used: the header bytes plus a few
 * dozen bytes per key and per tensor.
 */
enum gguf_err gguf_open(const char *path, struct gguf_file **out,
                        struct gguf_diag *diag);

/* Same, from an open descriptor (read with pread; the offset is unused).
 * Any other byte source: gguf_open_source (gguf/source.h). */
enum gguf_err gguf_open_fd(int fd, struct gguf_file **out,
                           struct gguf_diag *diag);

/*
 * Parses a header held in memory.  buf holds the first len bytes of a file
 * of file_size bytes (len <= file_size).  If the header runs past len but
 * not past file_size, returns GGUF_E_TRUNCATED with diag->offset set to the
 * number of bytes needed, and *need_more set to true; callers then retry
 * with more bytes.  Without need_more (NULL), len is taken as the whole
 * file.  On success takes a private copy of the header bytes.
 */
enum gguf_err gguf_parse(const uint8_t *buf, uint64_t len, uint64_t file_size,
                         struct gguf_file **out, struct gguf_diag *diag,
                         bool *need_more);

void gguf_close(struct gguf_file *f);

/* The index of the key/value named key (first occurrence), or -1. */
int64_t gguf_find_key(const struct gguf_file *f, const char *key, size_t len);

/* The value of the key named key (a C string; first occurrence) if it is
 * an integer of any type whose value fits in an int64_t; false if the key
 * is absent, not an integer, or a u64 above INT64_MAX. */
bool gguf_key_int(const struct gguf_file *f, const char *key, int64_t *out);

/* general.alignment decides where tensor data starts; edits never change
 * it (gguf/header.h, gguf/kvedit.h). */
#define GGUF_KEY_ALIGNMENT "general.alignment"
bool gguf_key_is_alignment(const void *key, size_t len);

/* true if some tensor of f has bytes.  Only then is the header padded to
 * the alignment: a file without tensor bytes ends with its header. */
bool gguf_has_tensor_data(const struct gguf_file *f);

/* Scalar value type names as used in the user.gguf.type attribute:
 * "u8" ... "f64", "bool", "string", "array"; "?" if out of range.
 * (Full names such as "array[array[i32]]" come from gguf/value.h.) */
const char *gguf_vtype_name(unsigned t);

/* Bytes of a scalar of value type t; 0 for strings, arrays and unknown
 * types (whose size depends on their contents). */
unsigned gguf_vtype_size(unsigned t);

#endif

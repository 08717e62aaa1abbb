/*
 * gguf/header.h — serializing a GGUF header: an edit's new key/values
 * with a file's tensor infos, ready for gguf_commit (gguf/commit.h); and
 * the record writers that a merged header (gguf/split.h) uses too.
 *
 * Promise of gguf_header_build: the header it returns parses (gguf_parse)
 * to exactly the key/values given, in the given order, and exactly the
 * file's tensor infos, alignment and tensor data size — anything else is
 * refused before a byte is written anywhere.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_HEADER_H
#define GGUF_HEADER_H

#include "value.h"

/*
 * One key/value of a new header: key bytes (key_len of them, no NUL
 * needed), value type (enum gguf_vtype), and the value encoded as in
 * value.h "bin", in the file's encoding (byte order and count width of
 * f->enc): what gguf_parse_value() produces, or what gguf_newkv_of()
 * returns for a key/value already in the file.
 */
struct gguf_newkv {
    const char *key;
    size_t key_len;
    uint32_t type;
    const uint8_t *val;
    size_t val_len;
};

/* The key/value kv_index of f, as it is in the file (pointers into f->hdr,
 * valid while f is open): copying untouched keys into a new list. */
struct gguf_newkv gguf_newkv_of(const struct gguf_file *f, uint64_t kv_index);

/* All key/values of f as a new list (gguf_newkv_of each), with room for
 * extra more entries after them; NULL when out of memory.  free() it. */
struct gguf_newkv *gguf_newkv_all(const struct gguf_file *f, size_t extra);

/*
 * Serializes a full header for file f into out (replacing what out held;
 * out->len is then the header's size): "GGUF", f's version and byte order,
 * counts, the n given key/values in the given order, then f's tensor infos
 * copied byte for byte (tensor offsets are relative to the data start, so
 * the tensor data keeps its bytes), then, when some tensor has bytes, zero
 * padding up to f->alignment (a file without tensor bytes ends with its
 * header, as converters write vocabulary files).
 *
 * Refused with GGUF_E_INVAL and a diag naming the key:
 *   - a list that changes general.alignment (another value or type), drops
 *     it when f has it, or adds it when f has none (its default, 32, is
 *     implied);
 *   - a key longer than GGUF_MAX_NAME, an unknown type, more key/values
 *     than a version 1 file can count;
 *   - values whose encoding is not well formed: the built header is parsed
 *     back (gguf_parse) and must give exactly the given records, f's tensor
 *     infos and f's data size.
 * Key names and duplicates are the caller's business (a duplicate present
 * in the file can be kept; gguf/kvedit.h applies the rules for new names).
 * On error out is unchanged.
 */
enum gguf_err gguf_header_build(const struct gguf_file *f,
                                const struct gguf_newkv *kvs, size_t n,
                                struct gguf_buf *out, struct gguf_diag *d);

/* ---- record writers (encoding e; false once out is out of memory) ------- */

/* "GGUF", version, tensor count, key/value count. */
bool gguf_put_preamble(struct gguf_buf *out, const struct gguf_enc *e,
                       uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* A key/value record: key, type, value bytes. */
bool gguf_put_kv(struct gguf_buf *out, const struct gguf_enc *e,
                 const struct gguf_newkv *kv);
/* The same record with its value (kv->val, encoded in from) re-encoded in
 * to: string lengths and array counts in to's count width (a version 1
 * file's 32-bit ones widened to 64 bits), numbers in to's byte order.
 * False when out is out of memory, or when the value is not well formed
 * or a count does not fit in to's (out then holds part of the record). */
bool gguf_put_kv_as(struct gguf_buf *out, const struct gguf_enc *to,
                    const struct gguf_enc *from, const struct gguf_newkv *kv);
/* A tensor info: t's name (in hdr, the header t was parsed from), dims and
 * type, at the given data offset. */
bool gguf_put_tensor_info(struct gguf_buf *out, const struct gguf_enc *e,
                          const uint8_t *hdr, const struct gguf_tensor *t,
                          uint64_t offset);
/* Zero bytes up to a multiple of align (a power of two). */
bool gguf_put_padding(struct gguf_buf *out, uint64_t align);

#endif

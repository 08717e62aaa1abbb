/*
 * gguf/kvedit.h — one metadata change, as a user makes it, turned into a
 * new header for gguf_commit (gguf/commit.h).
 *
 * The changes are those of meta/ in a mount: set a key's value from its
 * text, create a key from text, delete a key, rename it, change its type.
 * Each call takes the model's index f, applies one change to f's list of
 * key/values and serializes the result with gguf_header_build
 * (gguf/header.h) into hdr (replacing what hdr held).  Nothing is written
 * to any file; f is not changed.
 *
 * Existing keys are named by their index in f->kv (gguf_find_key gives the
 * first occurrence of a name; a mount maps file names such as "KEY#2" to
 * later occurrences).  An index past the end is a key that is gone.
 *
 * Rules (the contract's "Editing" section), each with its code:
 *   - general.alignment decides where tensor data starts: it cannot be
 *     set, created, deleted, renamed or retyped, and no key can be renamed
 *     over it                                             GGUF_E_PERM
 *   - gguffs.padding (gguf/pad.h) is sized by gguffs: it can be deleted,
 *     but not set, created, renamed or retyped, and no key can be renamed
 *     to it                                               GGUF_E_PERM
 *   - a nested array whose arrays differ in element type
 *     (gguf_kv_uniform, value.h) cannot be set as text   GGUF_E_PERM
 *   - an index past the end of f->kv                      GGUF_E_NOENT
 *   - creating a key whose name exists, or renaming a key over one of
 *     another type                                        GGUF_E_EXIST
 *   - a new name (created, or renamed to and not existing yet) must
 *     follow the GGUF rule, gguf_key_name_valid (gguf/names.h); existing
 *     names are kept as they are, however odd            GGUF_E_INVAL
 *   - text that does not parse for the type: GGUF_E_SYNTAX, GGUF_E_RANGE
 *     (out of range) or GGUF_E_INVAL (a malformed type), with diag->offset
 *     the byte in the text where it fails (gguf_parse_value, value.h)
 *   - what gguf_header_build refuses: GGUF_E_INVAL (offset UINT64_MAX)
 * On error hdr is unchanged.  GGUF_E_NOMEM when out of memory.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_KVEDIT_H
#define GGUF_KVEDIT_H

#include "header.h"

/* Sets key i's value from text (len bytes, in the value.h text form),
 * parsed for the key's type (gguf_kv_typedesc); the type stays. */
enum gguf_err gguf_kvedit_set(const struct gguf_file *f, uint64_t i,
                              const char *text, size_t len,
                              struct gguf_buf *hdr, struct gguf_diag *d);

/* Appends a new key named key (key_len raw bytes) with the value of text,
 * parsed as type, or, when type is NULL, as the type gguf_kvedit_infer
 * gives the text. */
enum gguf_err gguf_kvedit_create(const struct gguf_file *f,
                                 const char *key, size_t key_len,
                                 const struct gguf_typedesc *type,
                                 const char *text, size_t len,
                                 struct gguf_buf *hdr, struct gguf_diag *d);

/* Removes key i (other occurrences of its name stay). */
enum gguf_err gguf_kvedit_delete(const struct gguf_file *f, uint64_t i,
                                 struct gguf_buf *hdr, struct gguf_diag *d);

/* Renames key i to to (to_len raw bytes).  If a key of that name exists
 * (its first occurrence, j), key i replaces it: j is removed and i takes
 * the name in its own place — only if both have the same type, else
 * GGUF_E_EXIST (a rename never changes the type a name has).  Renaming a
 * key to its own name (j == i) gives the unchanged header. */
enum gguf_err gguf_kvedit_rename(const struct gguf_file *f, uint64_t i,
                                 const char *to, size_t to_len,
                                 struct gguf_buf *hdr, struct gguf_diag *d);

/* Changes key i's type to type: the value's text (gguf_render_kv) parsed
 * as the new type ("1" u32 -> "1" f32; "1.5" f32 -> u8 fails). */
enum gguf_err gguf_kvedit_retype(const struct gguf_file *f, uint64_t i,
                                 const struct gguf_typedesc *type,
                                 struct gguf_buf *hdr, struct gguf_diag *d);

/* ---- helpers for the texts and names of a change -------------------------- */

/* The type of a new key from its text, as gguf-py infers it: "true" /
 * "false" -> bool; an integer -> i32, or i64 if it does not fit i32; any
 * other number (strtod) -> f32; anything else -> string.  One trailing
 * newline is ignored; text of several lines is a string. */
void gguf_kvedit_infer(const char *text, size_t len, struct gguf_typedesc *t);

/* true if s (n bytes) is valid UTF-8 but for, possibly, an incomplete last
 * sequence: what a string value being written may look like before its
 * last write.  false once no more bytes can make it valid. */
bool gguf_utf8_prefix_ok(const char *s, size_t n);

/* Decodes a file name as meta/ shows it (gguf_name_decode, names.h) into
 * the raw key name, appended to out.  GGUF_E_INVAL when fname is not the
 * encoding of a name, names a later occurrence ("KEY#2"), or, when
 * new_key, is not a valid GGUF key name. */
enum gguf_err gguf_kvedit_decode_name(const char *fname, size_t len, bool new_key,
                                      struct gguf_buf *out, struct gguf_diag *d);

#endif

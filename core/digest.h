/*
 * core/digest.h — a tensor's and a model's digests as llama-gguf-hash
 * prints them (digest.c): xxh64 (seed 0, its canonical big-endian bytes)
 * and sha256, in lower-case hex, and the lines of /hashes.  No FUSE, no
 * struct mount: core/digests.c reads the bytes (from the sources raw reads
 * use), feeds them here, and keeps the texts for the mount; tested by
 * tests/unit/test_core.c.
 *
 * Promises: a hex text is CORE_XXH64_HEX or CORE_SHA256_HEX bytes, "\n"
 * included, no NUL; a line's length is known without its digest
 * (core_hash_line_len), so /hashes' size is known before anything is
 * hashed.  Locks: none; a struct core_hash is one thread's at a time.
 */
#ifndef CORE_DIGEST_H
#define CORE_DIGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/buf.h"

#define CORE_XXH64_HEX 17       /* 16 hex digits and "\n" */
#define CORE_SHA256_HEX 65      /* 64 hex digits and "\n" */

/* xxh64 and sha256 over the same bytes. */
struct core_hash;

/* NULL when out of memory.  Reset it before the first bytes. */
struct core_hash *core_hash_new(void);
void core_hash_free(struct core_hash *h);
/* Starts over (xxh64's seed 0, as llama-gguf-hash): 0 or ENOMEM. */
int core_hash_reset(struct core_hash *h);
/* Feeds n bytes: 0 or ENOMEM. */
int core_hash_update(struct core_hash *h, const void *p, size_t n);
/* The digests of the bytes fed since the reset, as hex lines: 0 or
 * ENOMEM.  Reset h before feeding it again. */
int core_hash_hex(struct core_hash *h, char xxh[CORE_XXH64_HEX], char sha[CORE_SHA256_HEX]);

/* The length of a line of core_hash_line for a hex text of hex_len bytes
 * ("\n" included), named by a tensor's name of name_len bytes or (!named)
 * the model's. */
uint64_t core_hash_line_len(uint64_t hex_len, bool named, uint64_t name_len);
/* Appends one line as llama-gguf-hash prints it ("%-8s  %s  model.gguf",
 * then ":" and the name when name is not NULL, then "\n"); type is at
 * most 8 bytes ("xxh64", "sha256"). */
void core_hash_line(struct gguf_buf *b, const char *type, const char *hex, size_t hex_len,
                    const char *name, size_t name_len);
/* The bytes llama-gguf-hash prints as a tensor's name of len bytes: up to
 * a NUL (a C string there). */
size_t core_hash_name_len(const char *name, size_t len);

#endif

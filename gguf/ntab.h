/*
 * gguf/ntab.h — a hash table from names (byte strings) to 64-bit values.
 *
 * Used wherever names must be found fast: the parser's duplicate key and
 * tensor names, a split model's tensor names across shards, the file
 * names of a mount.
 *
 * The table stores values only.  The name of a value is told by the
 * owner's function key_of(ctx, value), which the table calls to compare
 * names and to re-insert them when it grows.  So names are never copied,
 * and they may live in a buffer that moves (the parser's header buffer
 * grows by realloc while names are added): key_of looks them up where they
 * are at the time of the call.
 *
 * Promises:
 *   - lookups and inserts take O(1) expected time, whatever the number of
 *     names: open addressing with linear probing, never more than half
 *     full (the table doubles when an insert would pass that);
 *   - memory is 8 bytes per slot, at most 4 slots per name once more than
 *     a few names are in; the first allocation is sized by expect but
 *     capped (GGUF_NTAB_EXPECT_MAX), so a count read from a hostile file
 *     costs nothing until names are actually added;
 *   - a failed allocation is reported (GGUF_E_NOMEM) and leaves the table
 *     as it was.
 * Not thread-safe for writers; any number of concurrent readers (find)
 * is fine while nobody adds.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_NTAB_H
#define GGUF_NTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diag.h"

/* The name of value (its bytes and, in *len, their count). */
typedef const void *(*gguf_ntab_key_fn)(const void *ctx, uint64_t value, size_t *len);

struct gguf_ntab {
    uint64_t *slot;           /* value + 1; 0 = empty */
    uint64_t mask;            /* slot count - 1 (a power of two) */
    uint64_t n;               /* values in the table */
    gguf_ntab_key_fn key_of;
    const void *ctx;
};

#define GGUF_NTAB_EXPECT_MAX (1u << 20)

/* An empty table for about expect names (capped, see above). */
enum gguf_err gguf_ntab_init(struct gguf_ntab *t, uint64_t expect,
                             gguf_ntab_key_fn key_of, const void *ctx);

/* Adds value (< UINT64_MAX) under its name, key_of(ctx, value), which must
 * stay the same while value is in the table.  Returns GGUF_OK with *prev =
 * UINT64_MAX; GGUF_E_EXIST with *prev = the value already there under that
 * name (nothing added); or GGUF_E_NOMEM.  prev may be NULL. */
enum gguf_err gguf_ntab_add(struct gguf_ntab *t, uint64_t value, uint64_t *prev);

/* The value of name (len bytes) into *value; false if there is none. */
bool gguf_ntab_find(const struct gguf_ntab *t, const void *name, size_t len,
                    uint64_t *value);

/* Frees the slots (the names are the owner's). */
void gguf_ntab_free(struct gguf_ntab *t);

#endif

/*
 * gguf/split.h — models split into shards, opened as one.
 *
 * Split models follow llama.cpp's gguf-split convention: files named
 * PREFIX-00001-of-00004.gguf ... PREFIX-00004-of-00004.gguf, each a GGUF
 * file with the keys split.no (0-based), split.count and, in the first
 * shard, split.tensors.count (any integer types).  The metadata lives in
 * the first shard; the tensors are spread over all of them.
 *
 * gguf_split_open, given any shard, opens them all and refuses the model
 * unless:
 *   - the name given has the form above, with split.no + 1 and
 *     split.count (at most GGUF_SPLIT_MAX) matching it;
 *   - every shard exists ("shard 3 of 4 is missing: NAME");
 *   - every shard says it is shard i of that count, with the first
 *     shard's GGUF version and byte order;
 *   - split.tensors.count, when present, is the number of tensors held;
 *   - no tensor name is in two shards.
 * A file without split.count, or with split.count 0 or 1, opens as a
 * model of one shard.
 *
 * Bytes are read through byte sources (gguf/source.h): the caller's opener
 * turns a shard's name into a source, so the same code opens local files,
 * remote objects or anything else.  Shard names are built from the given
 * name by replacing its "-NNNNN-of-NNNNN.gguf" tail.  The opener is
 * called for the named shard first, then for shards 1, 2, ... in order,
 * stopping at the first error; all of them before any but the named one is
 * parsed.  So an opener may start the reads of every shard at once and
 * hand out the results in that order (core/model.c does, for remote shards,
 * from threads of its own: this library starts none).  Recovering interrupted edits (gguf/commit.h) is the
 * opener's business: an opener of files that may be edited runs
 * gguf_recover on each name before opening it.
 *
 * Diagnostics: a diag about the shard that was named carries its message
 * as the parser gave it; a diag about another shard starts with that
 * shard's name ("NAME: ..."), and its offset is in that shard.  So
 * gguf_diag_format(d, given_name, ...) gives the mount's one line.
 *
 * gguf_split_merge builds the header of the model as one file (a mount's
 * model.gguf): the first shard's key/values without split.* (a model of
 * one shard keeps them), then every
 * tensor info (shard by shard, in order) with offsets of a contiguous
 * layout aligned to the first shard's alignment (no padding after the
 * header of a model without tensors).  The tensor bytes are not copied:
 * the caller serves them from the shards.  Keys and tensor infos keep
 * their bytes, except that a model of GGUF version 1 (which ggml no longer
 * reads) gets a version 3 header in the same byte order: every count and
 * length (tensor and key/value counts, key and name lengths, dims, string
 * lengths, array counts) widened from 32 to 64 bits.  A mount serves a
 * single version 1 file through this too (gguf_split_merge of a model of
 * one shard), so that its model.gguf is a file ggml loads.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_SPLIT_H
#define GGUF_SPLIT_H

#include "buf.h"
#include "gguf.h"
#include "source.h"

#define GGUF_SPLIT_MAX 99999     /* five digits in the file names */

/* One file of the model. */
struct gguf_shard {
    char *name;                  /* as given to the opener */
    struct gguf_source *src;
    struct gguf_file *gf;
};

struct gguf_split {
    unsigned n;                  /* shards; 1 for a model that is not split */
    struct gguf_shard *shards;   /* shards[k] is shard k + 1; [0] has the metadata */
    unsigned given;              /* which of them was named */
    uint64_t n_tensors;          /* in all shards */
};

/* Turns a shard's name into an open byte source.  GGUF_E_NOENT (a missing
 * shard) when there is nothing of that name; any other error with d set. */
typedef enum gguf_err (*gguf_split_opener)(void *ctx, const char *name,
                                           struct gguf_source **out,
                                           struct gguf_diag *d);

/* The opener of local files: gguf_source_file, and GGUF_E_NOENT for a
 * name that does not exist (ctx unused). */
enum gguf_err gguf_split_open_file(void *ctx, const char *name,
                                   struct gguf_source **out, struct gguf_diag *d);

/* Opens the model that the file or object name belongs to (see above).
 * On success *out is the model (free with gguf_split_close); on failure
 * *out is NULL and d says what is wrong. */
enum gguf_err gguf_split_open(const char *name, gguf_split_opener open, void *ctx,
                              struct gguf_split **out, struct gguf_diag *d);

void gguf_split_close(struct gguf_split *s);

/* "DIR/NAME-00002-of-00004.gguf": true, with the length of the prefix
 * ("DIR/NAME"), the shard number (2, 1-based) and the count (4).  Exactly
 * five digits each; false for anything else. */
bool gguf_split_name_parse(const char *name, size_t *prefix_len, unsigned *no,
                           unsigned *count);

/* PREFIX-NNNNN-of-CCCCC.gguf for shard no (1-based) of count, from the
 * first prefix_len bytes of prefix; NULL when out of memory.  free() it. */
char *gguf_split_name(const char *prefix, size_t prefix_len, unsigned no,
                      unsigned count);

/* The merged header of a split model (see above). */
struct gguf_merged {
    struct gguf_buf hdr;         /* the header, padded to the alignment
                                    (when there are tensors) */
    uint64_t n_tensors;
    uint64_t *offset;            /* tensor j's data at hdr.len + offset[j]
                                    (j counts shard by shard, in order) */
    uint64_t size;               /* of the whole merged file */
};

/* Builds it into *m (free with gguf_merged_free): GGUF_OK, GGUF_E_NOMEM,
 * or GGUF_E_INVAL for a value that cannot be re-encoded (not well formed:
 * the parser refuses such files first). */
enum gguf_err gguf_split_merge(const struct gguf_split *s, struct gguf_merged *m,
                               struct gguf_diag *d);
void gguf_merged_free(struct gguf_merged *m);

#endif

/*
 * gguf/types.h — the ggml tensor type table.
 *
 * Every tensor in a GGUF file names its element encoding by a ggml type id.
 * This table gives, for each of ggml's 43 ids (0..42), the canonical name
 * ggml prints ("q4_K", "bf16", ...), how many elements one block holds and
 * how many bytes that block takes (from the layouts in gguf/blocks.h).
 * Ids that ggml has removed (4, 5, 31-33, 36-38) stay in the table with
 * blck_elems == 0: ggml_type_get() gives NULL for them as for ids newer
 * than this table (>= 43).
 *
 * A file with such a tensor still opens (gguf/gguf.h): its byte size cannot
 * be computed from the type, so the parser derives it from where the next
 * tensor starts, the tensor is shown by its id ("type_57") and has no f32
 * view (kernels/ has no kernel for it).
 *
 * Facts (ids, names, block sizes) derived from ggml (MIT, "The ggml authors")
 * and checked against libggml-base.so when tests/kernels/test_dequant.c
 * starts (every id with an entry here must have ggml's name, block size and
 * block bytes); tests/unit/test_parse.c (test_type_table) checks a few of
 * them and the names of ids without an entry.
 */
#ifndef GGUF_TYPES_H
#define GGUF_TYPES_H

#include <stdbool.h>
#include <stdint.h>

enum ggml_type_id {
    GGML_T_F32 = 0, GGML_T_F16 = 1, GGML_T_Q4_0 = 2, GGML_T_Q4_1 = 3,
    GGML_T_Q5_0 = 6, GGML_T_Q5_1 = 7, GGML_T_Q8_0 = 8, GGML_T_Q8_1 = 9,
    GGML_T_Q2_K = 10, GGML_T_Q3_K = 11, GGML_T_Q4_K = 12, GGML_T_Q5_K = 13,
    GGML_T_Q6_K = 14, GGML_T_Q8_K = 15, GGML_T_IQ2_XXS = 16,
    GGML_T_IQ2_XS = 17, GGML_T_IQ3_XXS = 18, GGML_T_IQ1_S = 19,
    GGML_T_IQ4_NL = 20, GGML_T_IQ3_S = 21, GGML_T_IQ2_S = 22,
    GGML_T_IQ4_XS = 23, GGML_T_I8 = 24, GGML_T_I16 = 25, GGML_T_I32 = 26,
    GGML_T_I64 = 27, GGML_T_F64 = 28, GGML_T_IQ1_M = 29, GGML_T_BF16 = 30,
    GGML_T_TQ1_0 = 34, GGML_T_TQ2_0 = 35, GGML_T_MXFP4 = 39,
    GGML_T_NVFP4 = 40, GGML_T_Q1_0 = 41, GGML_T_Q2_0 = 42,
    GGML_T_COUNT = 43
};

struct ggml_type_info {
    const char *name;     /* ggml's name, e.g. "q4_K"; NULL for removed ids */
    uint32_t blck_elems;  /* elements per block; 0 for removed ids */
    uint32_t blck_bytes;  /* bytes per block */
};

/* The entry for id, or NULL when id is out of range or was removed from
 * ggml.  A non-NULL result always has blck_elems > 0 and blck_bytes > 0. */
const struct ggml_type_info *ggml_type_get(uint32_t id);

/* ggml's name for id; for an id without an entry (removed from ggml, or
 * newer than this table) "type_NN" with NN the id in decimal.  Never NULL.
 * A "type_NN" string lives in a per-thread ring of GGML_TYPE_NAME_RING
 * buffers: it stays valid until the same thread has made that many more
 * such calls (names of known ids are static). */
#define GGML_TYPE_NAME_RING 4
const char *ggml_type_name_of(uint32_t id);

/* Looks a type up by its name as printed by ggml_type_name_of (including
 * "type_NN" for an id without an entry, up to INT32_MAX); -1 if none. */
int ggml_type_by_name(const char *name);

#endif

/* gguf/types.c — ggml's type table (facts derived from ggml, MIT). */
#include "types.h"
#include "blocks.h"

#include <stdio.h>
#include <string.h>

/* A plain type: one element per block, of the given size. */
#define P(id, nm, bytes) [GGML_T_##id] = { #nm, 1, bytes }
/* A block type: its elements and bytes per block (gguf/blocks.h). */
#define B(id, nm, qk) [GGML_T_##id] = { #nm, qk, sizeof(struct ggml_block_##nm) }
static const struct ggml_type_info table[GGML_T_COUNT] = {
    P(F32, f32, 4),                    P(F16, f16, 2),
    B(Q4_0, q4_0, GGML_QK4_0),         B(Q4_1, q4_1, GGML_QK4_1),
    B(Q5_0, q5_0, GGML_QK5_0),         B(Q5_1, q5_1, GGML_QK5_1),
    B(Q8_0, q8_0, GGML_QK8_0),         B(Q8_1, q8_1, GGML_QK8_1),
    B(Q2_K, q2_K, GGML_QK_K),          B(Q3_K, q3_K, GGML_QK_K),
    B(Q4_K, q4_K, GGML_QK_K),          B(Q5_K, q5_K, GGML_QK_K),
    B(Q6_K, q6_K, GGML_QK_K),          B(Q8_K, q8_K, GGML_QK_K),
    B(IQ2_XXS, iq2_xxs, GGML_QK_K),    B(IQ2_XS, iq2_xs, GGML_QK_K),
    B(IQ3_XXS, iq3_xxs, GGML_QK_K),    B(IQ1_S, iq1_s, GGML_QK_K),
    B(IQ4_NL, iq4_nl, GGML_QK4_NL),    B(IQ3_S, iq3_s, GGML_QK_K),
    B(IQ2_S, iq2_s, GGML_QK_K),        B(IQ4_XS, iq4_xs, GGML_QK_K),
    P(I8, i8, 1),                      P(I16, i16, 2),
    P(I32, i32, 4),                    P(I64, i64, 8),
    P(F64, f64, 8),                    B(IQ1_M, iq1_m, GGML_QK_K),
    P(BF16, bf16, 2),                  B(TQ1_0, tq1_0, GGML_QK_K),
    B(TQ2_0, tq2_0, GGML_QK_K),        B(MXFP4, mxfp4, GGML_QK_MXFP4),
    B(NVFP4, nvfp4, GGML_QK_NVFP4),    B(Q1_0, q1_0, GGML_QK1_0),
    B(Q2_0, q2_0, GGML_QK2_0),
};
#undef P
#undef B

const struct ggml_type_info *ggml_type_get(uint32_t id)
{
    if (id >= GGML_T_COUNT || table[id].blck_elems == 0)
        return NULL;
    return &table[id];
}

const char *ggml_type_name_of(uint32_t id)
{
    const struct ggml_type_info *t = ggml_type_get(id);
    if (t)
        return t->name;
    /* "type_4294967295" is the longest: 16 bytes with the NUL.  A small
     * ring per thread, so that a few names can be in use at once (one
     * printf with several of them). */
    static _Thread_local char ring[GGML_TYPE_NAME_RING][16];
    static _Thread_local unsigned next;
    char *buf = ring[next++ % GGML_TYPE_NAME_RING];
    snprintf(buf, sizeof ring[0], "type_%u", id);
    return buf;
}

int ggml_type_by_name(const char *name)
{
    for (uint32_t i = 0; i < GGML_T_COUNT; i++)
        if (table[i].name && strcmp(table[i].name, name) == 0)
            return (int)i;
    /* "type_NN" names an id that has no name of its own (decimal, no sign,
     * no leading zero): the other half of ggml_type_name_of. */
    if (strncmp(name, "type_", 5) != 0)
        return -1;
    const char *d = name + 5;
    if (d[0] < '0' || d[0] > '9' || (d[0] == '0' && d[1] != '\0'))
        return -1;
    uint64_t v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return -1;
        v = v * 10 + (uint64_t)(*d - '0');
        if (v > INT32_MAX)
            return -1;
    }
    return ggml_type_get((uint32_t)v) ? -1 : (int)v;
}

/* gguf/types.c — ggml's type table (facts derived from ggml, MIT). */
#include "types.h"

#include <stdio.h>
#include <string.h>

#define T(id, nm, be, bb) [id] = { nm, be, bb }
static const struct ggml_type_info table[GGML_T_COUNT] = {
    T(GGML_T_F32, "f32", 1, 4),           T(GGML_T_F16, "f16", 1, 2),
    T(GGML_T_Q4_0, "q4_0", 32, 18),       T(GGML_T_Q4_1, "q4_1", 32, 20),
    T(GGML_T_Q5_0, "q5_0", 32, 22),       T(GGML_T_Q5_1, "q5_1", 32, 24),
    T(GGML_T_Q8_0, "q8_0", 32, 34),       T(GGML_T_Q8_1, "q8_1", 32, 36),
    T(GGML_T_Q2_K, "q2_K", 256, 84),      T(GGML_T_Q3_K, "q3_K", 256, 110),
    T(GGML_T_Q4_K, "q4_K", 256, 144),     T(GGML_T_Q5_K, "q5_K", 256, 176),
    T(GGML_T_Q6_K, "q6_K", 256, 210),     T(GGML_T_Q8_K, "q8_K", 256, 292),
    T(GGML_T_IQ2_XXS, "iq2_xxs", 256, 66), T(GGML_T_IQ2_XS, "iq2_xs", 256, 74),
    T(GGML_T_IQ3_XXS, "iq3_xxs", 256, 98), T(GGML_T_IQ1_S, "iq1_s", 256, 50),
    T(GGML_T_IQ4_NL, "iq4_nl", 32, 18),   T(GGML_T_IQ3_S, "iq3_s", 256, 110),
    T(GGML_T_IQ2_S, "iq2_s", 256, 82),    T(GGML_T_IQ4_XS, "iq4_xs", 256, 136),
    T(GGML_T_I8, "i8", 1, 1),             T(GGML_T_I16, "i16", 1, 2),
    T(GGML_T_I32, "i32", 1, 4),           T(GGML_T_I64, "i64", 1, 8),
    T(GGML_T_F64, "f64", 1, 8),           T(GGML_T_IQ1_M, "iq1_m", 256, 56),
    T(GGML_T_BF16, "bf16", 1, 2),         T(GGML_T_TQ1_0, "tq1_0", 256, 54),
    T(GGML_T_TQ2_0, "tq2_0", 256, 66),    T(GGML_T_MXFP4, "mxfp4", 32, 17),
    T(GGML_T_NVFP4, "nvfp4", 64, 36),     T(GGML_T_Q1_0, "q1_0", 128, 18),
    T(GGML_T_Q2_0, "q2_0", 64, 18),
};
#undef T

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

/* kernels/byteorder.c — big-endian tensor data made little-endian (see
 * dequant.h: kern_dequant_be_supported). */
#include "dequant.h"

#include "gguf/blocks.h"
#include "gguf/types.h"

#include <stddef.h>
#include <stdint.h>

static void swap2(uint8_t *p)
{
    uint8_t x = p[0];
    p[0] = p[1];
    p[1] = x;
}

/* Bytes of one element of a plain type; 0 for any other type. */
static unsigned plain_size(uint32_t type)
{
    switch (type) {
    case GGML_T_I8: return 1;
    case GGML_T_F16: case GGML_T_BF16: case GGML_T_I16: return 2;
    case GGML_T_F32: case GGML_T_I32: return 4;
    case GGML_T_I64: case GGML_T_F64: return 8;
    default: return 0;
    }
}

bool kern_dequant_be_supported(uint32_t type)
{
    switch (type) {
    case GGML_T_Q4_0: case GGML_T_Q8_0: case GGML_T_Q4_K: case GGML_T_Q6_K:
    case GGML_T_MXFP4: case GGML_T_NVFP4:
        return true;
    default:
        return plain_size(type) != 0;
    }
}

void kern_dequant_be_swap(uint32_t type, void *blocks, size_t n_blocks)
{
    uint8_t *p = blocks;
    unsigned size = plain_size(type);
    if (size > 1) {
        for (size_t i = 0; i < n_blocks; i++, p += size)
            for (unsigned a = 0, b = size - 1; a < b; a++, b--) {
                uint8_t x = p[a];
                p[a] = p[b];
                p[b] = x;
            }
        return;
    }
    switch (type) {
    case GGML_T_Q4_0:          /* the f16 scale d first, then nibbles */
        for (size_t i = 0; i < n_blocks; i++)
            swap2(p + i * sizeof(struct ggml_block_q4_0) + offsetof(struct ggml_block_q4_0, d));
        break;
    case GGML_T_Q8_0:          /* the f16 scale d first, then int8 */
        for (size_t i = 0; i < n_blocks; i++)
            swap2(p + i * sizeof(struct ggml_block_q8_0) + offsetof(struct ggml_block_q8_0, d));
        break;
    case GGML_T_Q4_K:          /* f16 d and dmin, then bytes */
        for (size_t i = 0; i < n_blocks; i++) {
            uint8_t *b = p + i * sizeof(struct ggml_block_q4_K);
            swap2(b + offsetof(struct ggml_block_q4_K, d));
            swap2(b + offsetof(struct ggml_block_q4_K, dmin));
        }
        break;
    case GGML_T_Q6_K:          /* bytes, then the f16 scale d last */
        for (size_t i = 0; i < n_blocks; i++)
            swap2(p + i * sizeof(struct ggml_block_q6_K) + offsetof(struct ggml_block_q6_K, d));
        break;
    default:                   /* i8, mxfp4, nvfp4: bytes only */
        break;
    }
}

/*
 * gguf/npy.c — the NPY header numpy.save writes (see npy.h).
 *
 * Its longest: magic, version and length (10 bytes), the dict's fixed
 * text (about 50), a dtype of GGUF_NPY_DESCR_MAX bytes, four dimensions of
 * at most 20 digits each with their separators (90), the first
 * dimension's room to grow (21 - its digits) and "\n": under 192, padded
 * to a multiple of 64, so at most GGUF_NPY_HEADER_MAX.
 */
#include "npy.h"

#include "gguf.h"

#include <stdio.h>
#include <string.h>

_Static_assert(GGUF_MAX_DIMS <= 4, "the NPY header's bound assumes at most 4 dimensions");

size_t gguf_npy_header(const char *descr, uint32_t n_dims, const uint64_t *ne, char *buf)
{
    if (n_dims > GGUF_MAX_DIMS || strlen(descr) > GGUF_NPY_DESCR_MAX)
        return 0;
    char dict[GGUF_NPY_HEADER_MAX];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    char first[24] = "";
    for (uint32_t d = n_dims; d-- > 0;) {
        char num[24];
        snprintf(num, sizeof num, "%llu", (unsigned long long)ne[d]);
        if (d + 1 == n_dims)
            memcpy(first, num, sizeof num);
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%s", d + 1 == n_dims ? "" : ", ",
                      num);
    }
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", n_dims == 1 ? "," : "");
    size_t hl = (size_t)n;
    if (n_dims) {
        size_t grow = 21 - strlen(first);     /* GROWTH_AXIS_MAX_DIGITS */
        memset(dict + hl, ' ', grow);
        hl += grow;
    }
    /* magic (6) + version (2) + length (2) + dict + padding + "\n" */
    size_t pad = 64 - (10 + hl + 1) % 64;
    size_t total = 10 + hl + pad + 1;
    if (total > GGUF_NPY_HEADER_MAX)
        return 0;                       /* cannot happen: see above */
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    uint16_t len = (uint16_t)(hl + pad + 1);
    buf[8] = (char)(len & 0xff);
    buf[9] = (char)(len >> 8);
    memcpy(buf + 10, dict, hl);
    memset(buf + 10 + hl, ' ', pad);
    buf[total - 1] = '\n';
    return total;
}

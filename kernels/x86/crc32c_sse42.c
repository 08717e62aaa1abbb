/*
 * kernels/x86/crc32c_sse42.c — CRC32C with SSE4.2's crc32 instruction.
 *
 * Same contract as the portable code (crc32c.c).  The functions carry
 * __attribute__((target("sse4.2"))), so this file builds with the
 * project's normal flags and the code only runs after crc32c.c has
 * checked the CPU.
 */
#include "kernels/crc32c_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <string.h>

/* CRC arithmetic on the bit-reflected register (the polynomial's x^0 is
 * bit 31): the register after bytes A then B, from r, is
 * mulmod(x^(8|B|), reg after A) ^ (the register after B from 0), which
 * lets independent streams over thirds of a block be joined. */
static uint32_t mulmod(uint32_t a, uint32_t b)
{
    uint32_t prod = 0;
    for (uint32_t bit = 1u << 31; bit; bit >>= 1) {
        if (a & bit)
            prod ^= b;
        b = (b & 1) ? (b >> 1) ^ KERN_CRC32C_POLY : b >> 1;
    }
    return prod;
}

/* x^(8 n) modulo the polynomial, by squaring: x^(2^k) for k = 3, 4, ... */
static uint32_t x8n(uint64_t n)
{
    uint32_t r = 1u << 31, sq = 1u << 23;       /* x^0, x^8 */
    for (; n; n >>= 1) {
        if (n & 1)
            r = mulmod(r, sq);
        sq = mulmod(sq, sq);
    }
    return r;
}

/* Below this, one stream; above, three interleaved (the instruction takes
 * three cycles and issues one a cycle, so three chains fill it). */
#define CRC_3WAY_MIN 1024

__attribute__((target("sse4.2"))) static uint64_t crc_hw_words(uint64_t c, const uint8_t *p,
                                                                size_t len)
{
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    while (len--)
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return c;
}

__attribute__((target("sse4.2"))) uint32_t kern_crc32c_sse42(uint32_t crc, const void *buf,
                                                              size_t len)
{
    const uint8_t *p = buf;
    uint64_t c = (uint32_t)~crc;
    while (len && ((uintptr_t)p & 7)) {
        c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        len--;
    }
    if (len >= CRC_3WAY_MIN) {
        size_t third = len / 24 * 8;
        const uint8_t *q = p + third, *r = p + 2 * third;
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < third; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8);
            memcpy(&b, q + i, 8);
            memcpy(&d, r + i, 8);
            c = __builtin_ia32_crc32di(c, a);
            c1 = __builtin_ia32_crc32di(c1, b);
            c2 = __builtin_ia32_crc32di(c2, d);
        }
        uint32_t shift = x8n(third);
        c = mulmod(shift, mulmod(shift, (uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * third;
        len -= 3 * third;
    }
    return ~(uint32_t)crc_hw_words(c, p, len);
}

#endif

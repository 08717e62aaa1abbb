/*
 * kernels/crc32c.c — CRC32C: the portable code and the dispatcher (see
 * crc32c.h).  The SSE4.2 version is in x86/crc32c_sse42.c.
 *
 * Built twice, like dequant.c (kernels/meson.build): the test build
 * honours GGFS_DISABLE_CPU_FEATURES through cpu.c.
 */
#include "crc32c.h"
#include "crc32c_impl.h"
#include "cpu.h"

#include <endian.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

static uint32_t crc_tab[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ KERN_CRC32C_POLY : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
}

uint32_t kern_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = buf;
    uint32_t c = ~crc;
    while (len && ((uintptr_t)p & 7)) {
        c = crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w = le64toh(w) ^ c;
        c = crc_tab[7][w & 0xff] ^ crc_tab[6][(w >> 8) & 0xff] ^ crc_tab[5][(w >> 16) & 0xff] ^
            crc_tab[4][(w >> 24) & 0xff] ^ crc_tab[3][(w >> 32) & 0xff] ^
            crc_tab[2][(w >> 40) & 0xff] ^ crc_tab[1][(w >> 48) & 0xff] ^ crc_tab[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = crc_tab[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_HW 1
#else
#define HAVE_HW 0
#endif

/* -1: not asked yet; 0: scalar; 1: SSE4.2.  Asked at the first call: the
 * answer is the same whichever thread asks, so a race only asks twice. */
static int level = -1;

static int pick(void)
{
    int l = __atomic_load_n(&level, __ATOMIC_RELAXED);
    if (l < 0) {
#if HAVE_HW
        l = kern_cpu_has("sse4.2");
#else
        l = 0;
#endif
        __atomic_store_n(&level, l, __ATOMIC_RELAXED);
    }
    return l;
}

uint32_t kern_crc32c(uint32_t crc, const void *buf, size_t len)
{
#if HAVE_HW
    if (pick())
        return kern_crc32c_sse42(crc, buf, len);
#else
    (void)pick;
#endif
    return kern_crc32c_sw(crc, buf, len);
}

const char *kern_crc32c_level(void)
{
    return pick() ? "sse4.2" : "scalar";
}

/*
 * tests/kernels/test_crc32c.c — CRC32C (kernels/crc32c.h): the known
 * answer, continuation, and every level against the portable code on many
 * lengths, alignments and start values.
 *
 * Linked with the test build of the dispatchers (kernels_test_dep) and
 * registered once per level (tests/kernels/meson.build): with
 * GGFS_DISABLE_CPU_FEATURES=all the dispatcher must run the portable code;
 * otherwise it must use SSE4.2 when the CPU has it.  The SSE4.2 version is
 * also called directly, whatever the variable says, when the CPU has it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/crc32c.h"
#include "kernels/crc32c_impl.h"

static bool cpu_sse42(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2");
#else
    return false;
#endif
}

static uint8_t pat(size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u;
    return (uint8_t)(x >> 13 ^ x >> 24);
}

typedef uint32_t (*crc_fn)(uint32_t, const void *, size_t);

/* fn against the portable code: every length up to 3100 (around the
 * three-stream switch at 1024 and the thirds' rounding) at every
 * alignment 0-15, several start values, and a long run. */
static void against_sw(crc_fn fn)
{
    static uint8_t buf[3100 + 16];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = pat(i);
    static const uint32_t starts[] = { 0, 0xffffffffu, 0x1234567u };
    for (size_t off = 0; off < 16; off++)
        for (size_t len = 0; len <= 3100; len += off ? 13 : 1)
            for (size_t s = 0; s < 3; s++)
                assert_int_equal(fn(starts[s], buf + off, len),
                                 kern_crc32c_sw(starts[s], buf + off, len));
    size_t n = (4u << 20) + 77;
    uint8_t *big = malloc(n);
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = pat(i * 7 + 3);
    assert_int_equal(fn(0, big, n), kern_crc32c_sw(0, big, n));
    assert_int_equal(fn(9, big + 3, n - 3), kern_crc32c_sw(9, big + 3, n - 3));
    free(big);
}

static void test_known(void **state)
{
    (void)state;
    assert_int_equal(kern_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(kern_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(kern_crc32c(0, "", 0), 0);
    assert_int_equal(kern_crc32c(0x5a17c0deu, "", 0), 0x5a17c0deu);
    static uint8_t buf[5000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = pat(i);
    /* continuing a CRC is the CRC of the whole, at every cut */
    for (size_t cut = 0; cut <= sizeof buf; cut += 37) {
        uint32_t c = kern_crc32c(0, buf, cut);
        assert_int_equal(kern_crc32c(c, buf + cut, sizeof buf - cut),
                         kern_crc32c(0, buf, sizeof buf));
        c = kern_crc32c_sw(0, buf, cut);
        assert_int_equal(kern_crc32c_sw(c, buf + cut, sizeof buf - cut),
                         kern_crc32c_sw(0, buf, sizeof buf));
    }
}

/* The dispatcher picks what the CPU and GGFS_DISABLE_CPU_FEATURES allow. */
static void test_level(void **state)
{
    (void)state;
    const char *off = getenv("GGFS_DISABLE_CPU_FEATURES");
    bool disabled = off && (strstr(off, "all") || strstr(off, "sse4.2"));
    const char *want = cpu_sse42() && !disabled ? "sse4.2" : "scalar";
    assert_string_equal(kern_crc32c_level(), want);
}

static void test_dispatched(void **state)
{
    (void)state;
    against_sw(kern_crc32c);
}

/* A CPU without SSE4.2 cannot run that level: skipped on a laptop, a
 * failure when CI is set (every level must run there). */
static void no_level(void)
{
    if (getenv("CI") && *getenv("CI"))
        fail_msg("this CPU has no SSE4.2: CI is set, so every level must run");
    skip();
}

static void test_sse42(void **state)
{
    (void)state;
#if defined(__x86_64__) && defined(__GNUC__)
    if (!cpu_sse42())
        no_level();
    else
        against_sw(kern_crc32c_sse42);
#else
    no_level();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known),
        cmocka_unit_test(test_level),
        cmocka_unit_test(test_dispatched),
        cmocka_unit_test(test_sse42),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

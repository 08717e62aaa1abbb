/*
 * tests/unit/test_npy.c — the NPY header of raw.npy and f32.npy
 * (gguf/npy.h): byte for byte what numpy writes, refusals, the bound.
 *
 * The expected headers are numpy's own (numpy 1.24,
 * numpy.lib.format.write_array_header_1_0 with fortran_order False, which
 * numpy.save calls), pasted as C strings: format 1.0, the dict with its
 * keys sorted, room for the first dimension to grow, "\n" at a multiple
 * of 64 bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/npy.h"

#define BIG 9223372036854775807ull      /* INT64_MAX: numpy's widest dimension */
#define P15 1000000000000000ull

static const struct npy_case {
    const char *descr;
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS];         /* GGUF's order */
    size_t len;
    const char *want;
} cases[] = {
    /* 1-D: "(n,)": numpy (3,) */
    { "<f4", 1, { 3ull }, 128,
      "\223NUMPY\001\000v\000"
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }       "
      "                                                     \n"
    },
    /* 2-D: numpy's shape is ne[] reversed: numpy (2, 3) */
    { "<f4", 2, { 3ull, 2ull }, 128,
      "\223NUMPY\001\000v\000"
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }     "
      "                                                     \n"
    },
    /* a token embedding: numpy (4096, 32000) */
    { "<f2", 2, { 32000ull, 4096ull }, 128,
      "\223NUMPY\001\000v\000"
      "{'descr': '<f2', 'fortran_order': False, 'shape': (4096, 32000),"
      " }                                                   \n"
    },
    /* four dimensions, no byte order: numpy (1, 2, 3, 4) */
    { "|i1", 4, { 4ull, 3ull, 2ull, 1ull }, 128,
      "\223NUMPY\001\000v\000"
      "{'descr': '|i1', 'fortran_order': False, 'shape': (1, 2, 3, 4), "
      "}                                                    \n"
    },
    /* 0-d: no room to grow: numpy () */
    { ">f8", 0, { 0 }, 128,
      "\223NUMPY\001\000v\000"
      "{'descr': '>f8', 'fortran_order': False, 'shape': (), }         "
      "                                                     \n"
    },
    /* the widest first dimension numpy takes: numpy (BIG,) */
    { "<i8", 1, { BIG }, 128,
      "\223NUMPY\001\000v\000"
      "{'descr': '<i8', 'fortran_order': False, 'shape': (9223372036854"
      "775807,), }                                          \n"
    },
    /* four of them: 192 bytes: numpy (BIG,) * 4 */
    { "<f4", 4, { BIG, BIG, BIG, BIG }, 192,
      "\223NUMPY\001\000\266\000"
      "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854"
      "775807, 9223372036854775807, 9223372036854775807, 92233720368547"
      "75807), }                                            \n"
    },
    /* room to grow after 13 digits: numpy (1234567890123, 7) */
    { "<i4", 2, { 7ull, 1234567890123ull }, 128,
      "\223NUMPY\001\000v\000"
      "{'descr': '<i4', 'fortran_order': False, 'shape': (1234567890123"
      ", 7), }                                              \n"
    },
    /* the first dimension's room to grow crosses 64 bytes: numpy
     * (1, 10**15, 10**15, 10**15) */
    { "<f4", 4, { P15, P15, P15, 1 }, 192,
      "\223NUMPY\001\000\266\000"
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1000000000"
      "000000, 1000000000000000, 1000000000000000), }                  "
      "                                                     \n"
    },
};

static void test_as_numpy(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const struct npy_case *c = &cases[i];
        char buf[GGUF_NPY_HEADER_MAX];
        memset(buf, 0x55, sizeof buf);
        size_t n = gguf_npy_header(c->descr, c->n_dims, c->ne, buf);
        assert_int_equal(n, c->len);
        assert_memory_equal(buf, c->want, c->len);
        /* the length field counts what follows it */
        assert_int_equal((unsigned char)buf[8] | (unsigned char)buf[9] << 8, n - 10);
    }
}

/* The longest header there is: four dimensions of 20 digits (a u64 numpy
 * could not take, but a hostile file may hold) and the longest dtype fit
 * the buffer, aligned, ending in "\n". */
static void test_bound(void **state)
{
    (void)state;
    const uint64_t ne[GGUF_MAX_DIMS] = { UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX };
    char buf[GGUF_NPY_HEADER_MAX];
    size_t n = gguf_npy_header("<f4xxxxx", GGUF_MAX_DIMS, ne, buf);
    assert_true(n > 0 && n <= GGUF_NPY_HEADER_MAX);
    assert_int_equal(n % 64, 0);
    assert_int_equal(buf[n - 1], '\n');
    static const char dims[] = "(18446744073709551615, 18446744073709551615, ";
    assert_non_null(memmem(buf, n, dims, sizeof dims - 1));
}

/* More dimensions than GGUF has, or a dtype longer than any numpy's: 0,
 * nothing written. */
static void test_refused(void **state)
{
    (void)state;
    const uint64_t ne[GGUF_MAX_DIMS + 1] = { 1, 2, 3, 4, 5 };
    char buf[GGUF_NPY_HEADER_MAX];
    memset(buf, 0x55, sizeof buf);
    assert_int_equal(gguf_npy_header("<f4", GGUF_MAX_DIMS + 1, ne, buf), 0);
    assert_int_equal(gguf_npy_header("<f4xxxxxx", 1, ne, buf), 0);
    for (size_t i = 0; i < sizeof buf; i++)
        assert_int_equal((unsigned char)buf[i], 0x55);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_as_numpy),
        cmocka_unit_test(test_bound),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

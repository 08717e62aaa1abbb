/*
 * tests/unit/test_stream.c — the detector of sequential readers and its
 * ramp (cache/stream.h): a sequential reader's window doubles 1, 2, 4, ...
 * up to its cap and what it claims ahead is never claimed twice; a late
 * read keeps the window and claims nothing new; random reads start over
 * and claim nothing; two interleaved readers in a set each keep their
 * own stream; units given back are claimed again by the next read; a
 * stream moving to another object keeps its window.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache/stream.h"

#define U 1000u         /* bytes per unit */

/* A read of units [first, last] (whole units) that continues s: the
 * claimed range's size (0: none); [*from, *to] the range. */
static uint64_t move(struct stream *s, uint64_t first, uint64_t last, unsigned max,
                     uint64_t *from, uint64_t *to)
{
    assert_true(stream_continues(s, first, 16, 1));
    stream_move(s, last, (last + 1) * U, max, 1000, from, to);
    return *from <= *to ? *to - *from + 1 : 0;
}

static void test_sequential_ramp(void **state)
{
    (void)state;
    struct stream s = { 0 };        /* at unit 0, nothing read */
    uint64_t from, to;
    /* the window doubles with each read that goes further, capped at 8 */
    static const unsigned want[] = { 1, 2, 4, 8, 8, 8 };
    uint64_t claimed_to = 0;
    for (unsigned i = 0; i < 6; i++) {
        uint64_t n = move(&s, i, i, 8, &from, &to);
        assert_int_equal(s.window, want[i]);
        assert_int_equal(to, i + want[i]);
        /* claimed from just past the furthest read or the last claim */
        assert_int_equal(from, i == 0 ? 1 : claimed_to + 1);
        assert_int_equal(n, to - from + 1);
        claimed_to = to;
    }
    /* the same read again (nothing further): the window is kept, nothing
     * new is claimed */
    assert_int_equal(move(&s, 5, 5, 8, &from, &to), 0);
    assert_int_equal(s.window, 8);
    /* a late read, behind: continues, claims nothing new */
    assert_int_equal(move(&s, 3, 3, 8, &from, &to), 0);
    assert_int_equal(s.window, 8);
    /* below the cap too: a read again, or a late one, keeps the window */
    struct stream r = { 0 };
    move(&r, 0, 0, 8, &from, &to);
    move(&r, 1, 1, 8, &from, &to);
    assert_int_equal(r.window, 2);
    assert_int_equal(move(&r, 1, 1, 8, &from, &to), 0);
    assert_int_equal(move(&r, 0, 0, 8, &from, &to), 0);
    assert_int_equal(r.window, 2);
    /* a lower cap (a bound shared with other streams) cuts the window */
    move(&s, 6, 6, 2, &from, &to);
    assert_int_equal(s.window, 2);
    /* claims stop at the object's last unit */
    struct stream e = { 0 };
    stream_move(&e, 0, U, 8, 3, &from, &to);
    stream_move(&e, 1, 2 * U, 8, 3, &from, &to);
    assert_int_equal(to, 2);
    stream_move(&e, 2, 3 * U, 8, 3, &from, &to);
    assert_true(from > to);
    /* long: more than units past where it started */
    assert_false(stream_long(&s, 8, 8));
    assert_true(stream_long(&s, 9, 8));
}

static void test_random(void **state)
{
    (void)state;
    struct stream s = { 0 };
    uint64_t from, to;
    move(&s, 0, 0, 8, &from, &to);
    move(&s, 1, 1, 8, &from, &to);
    assert_int_equal(s.window, 2);
    /* a jump: no longer sequential; started there, nothing ahead */
    assert_false(stream_continues(&s, 500, 16, 1));
    uint64_t gen = s.gen;
    stream_start(&s, 500, 500, 501 * U);
    assert_int_equal(s.window, 0);
    assert_int_equal(s.gen, gen + 1);
    assert_int_equal(s.start, 500);
    /* far behind: not sequential either */
    assert_false(stream_continues(&s, 480, 16, 1));
    assert_true(stream_continues(&s, 485, 16, 1));
    /* one unit skipped continues with gap 1, not with gap 0 */
    assert_true(stream_continues(&s, 502, 16, 1));
    assert_false(stream_continues(&s, 502, 16, 0));
    /* random reads in a set: each starts a stream, none claims */
    struct stream_set set = { 0 };
    static const uint64_t at[] = { 900, 10, 400, 70, 650, 230 };
    for (unsigned i = 0; i < 6; i++)
        assert_null(stream_find(&set, at[i], at[i], (at[i] + 1) * U));
    for (unsigned i = 0; i < STREAM_SET_MAX; i++)
        assert_int_equal(set.st[i].window, 0);
}

static void test_interleaved(void **state)
{
    (void)state;
    struct stream_set set = { 0 };
    uint64_t from, to;
    /* two readers, one from 0 and one from 100, their reads alternating */
    assert_null(stream_find(&set, 0, 0, U));
    assert_null(stream_find(&set, 100, 100, 101 * U));
    for (uint64_t i = 1; i <= 4; i++) {
        struct stream *a = stream_find(&set, i, i, (i + 1) * U);
        struct stream *b = stream_find(&set, 100 + i, 100 + i, (101 + i) * U);
        assert_non_null(a);
        assert_non_null(b);
        assert_ptr_not_equal(a, b);
        stream_move(a, i, (i + 1) * U, 8, 1000, &from, &to);
        assert_int_equal(to, i + a->window);
        stream_move(b, 100 + i, (101 + i) * U, 8, 1000, &from, &to);
        assert_int_equal(to, 100 + i + b->window);
        /* each ramps on its own: 1, 2, 4, 8 */
        assert_int_equal(a->window, 1u << (i - 1));
        assert_int_equal(b->window, 1u << (i - 1));
    }
    /* a late read of b (window 8, furthest unit 104): up to the window and
     * 2 units behind the unit after its furthest continues it; further
     * behind starts a stream of its own */
    struct stream *b = stream_find(&set, 105 - 10, 105 - 10, 1);
    assert_non_null(b);
    assert_int_equal(b->window, 8);
    assert_int_equal(b->start, 100);
    struct stream_set one = { 0 };
    assert_null(stream_find(&one, 50, 50, 51 * U));
    stream_move(stream_find(&one, 51, 51, 52 * U), 51, 52 * U, 8, 1000, &from, &to);
    assert_non_null(stream_find(&one, 52 - 3, 52 - 3, 1));     /* window 1 + 2 behind */
    assert_null(stream_find(&one, 52 - 4, 52 - 4, 1));
    /* more readers than slots: the least recently used slot goes */
    for (uint64_t r = 0; r < STREAM_SET_MAX; r++)
        assert_null(stream_find(&set, 1000 + 100 * r, 1000 + 100 * r, 1));
    assert_null(stream_find(&set, 5, 5, 6 * U));     /* reader a's slot went */
}

static void test_unclaim(void **state)
{
    (void)state;
    struct stream s = { 0 };
    uint64_t from, to;
    move(&s, 0, 0, 8, &from, &to);
    move(&s, 1, 1, 8, &from, &to);
    assert_int_equal(from, 2);
    assert_int_equal(to, 3);
    /* unit 3 could not be queued: given back, the next read claims it */
    stream_unclaim(&s, s.gen, 3, to);
    move(&s, 2, 2, 8, &from, &to);
    assert_int_equal(from, 3);
    assert_int_equal(to, 6);
    /* a give-back after the stream claimed past it, or started over, is
     * ignored */
    uint64_t gen = s.gen;
    stream_unclaim(&s, gen, 2, 3);
    assert_int_equal(s.ahead, 7);
    stream_start(&s, 50, 50, 51 * U);
    stream_unclaim(&s, gen, 40, 50);
    assert_int_equal(s.ahead, 51);
    /* another object: from its unit 0, the window kept */
    move(&s, 51, 51, 8, &from, &to);
    unsigned w = s.window;
    stream_restart(&s);
    assert_int_equal(s.next, 0);
    assert_int_equal(s.window, w);
    assert_true(stream_continues(&s, 0, 16, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequential_ramp),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_interleaved),
        cmocka_unit_test(test_unclaim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

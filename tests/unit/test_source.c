/*
 * tests/unit/test_source.c — a source's bytes lent as spans
 * (gguf_source_spans, gguf/source.h): a local file's one descriptor range
 * (cut at the end, none past it), the copy made for a source that lends
 * none (its bytes, its errors, freed by its release), and a spliced
 * source's (gguf/overlay.h) new header from memory followed by its
 * base's spans, across the border and past the end.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf/overlay.h"
#include "gguf/source.h"

#define SIZE 10000u

static uint8_t byte_at(uint64_t i)
{
    return (uint8_t)((i * 2654435761u) >> 13 ^ i);
}

/* A memory file of SIZE bytes as a file source. */
static struct gguf_source *file_src(int *fd)
{
    *fd = memfd_create("src", 0);
    assert_true(*fd >= 0);
    uint8_t buf[SIZE];
    for (unsigned i = 0; i < SIZE; i++)
        buf[i] = byte_at(i);
    assert_int_equal(pwrite(*fd, buf, SIZE, 0), SIZE);
    struct gguf_source *s;
    struct gguf_diag d;
    assert_int_equal(gguf_source_fd(*fd, "memfd", &s, &d), GGUF_OK);
    return s;
}

/* The bytes spans sp[0..n) hold, gathered into out (at most cap). */
static size_t gather(const struct gguf_span *sp, int n, uint8_t *out, size_t cap)
{
    size_t done = 0;
    for (int i = 0; i < n; i++) {
        assert_true(done + sp[i].len <= cap);
        if (sp[i].mem)
            memcpy(out + done, sp[i].mem, sp[i].len);
        else
            assert_int_equal(pread(sp[i].fd, out + done, sp[i].len, (off_t)sp[i].pos),
                             (ssize_t)sp[i].len);
        done += sp[i].len;
    }
    return done;
}

/* Spans sp[0..n) hold len bytes, the source's at off (byte_at). */
static void assert_bytes(const struct gguf_span *sp, int n, uint64_t off, size_t len)
{
    static uint8_t got[SIZE];
    assert_int_equal(gather(sp, n, got, sizeof got), len);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(got[i], byte_at(off + i));
}

static void test_file(void **state)
{
    (void)state;
    int fd;
    struct gguf_source *s = file_src(&fd);
    struct gguf_span sp[4];
    int n = -1;
    /* one range of the descriptor, no copy, nothing to release */
    assert_int_equal(gguf_source_spans(s, 100, 1000, sp, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_null(sp[0].mem);
    assert_int_equal(sp[0].fd, fd);
    assert_int_equal(sp[0].pos, 100);
    assert_int_equal(sp[0].len, 1000);
    assert_null(sp[0].release);
    /* cut at the end; none at or past it, or for nothing */
    assert_int_equal(gguf_source_spans(s, SIZE - 10, 1000, sp, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sp[0].len, 10);
    assert_int_equal(gguf_source_spans(s, SIZE, 10, sp, 4, &n), 0);
    assert_int_equal(n, 0);
    assert_int_equal(gguf_source_spans(s, 0, 0, sp, 4, &n), 0);
    assert_int_equal(n, 0);
    gguf_source_close(s);
    close(fd);
}

/* A source that lends nothing: its bytes at off are byte_at(off); reads
 * overlapping fail_at fail with EIO. */
static uint64_t fail_at = UINT64_MAX;
static int released;

static ssize_t plain_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    if (off >= s->size)
        return 0;
    if (len > s->size - off)
        len = (size_t)(s->size - off);
    if (fail_at >= off && fail_at < off + len)
        return -EIO;
    /* short reads: the copy loops */
    if (len > 300)
        len = 300;
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)buf)[i] = byte_at(off + i);
    return (ssize_t)len;
}

static void plain_close(struct gguf_source *s)
{
    (void)s;
}

static const struct gguf_source_ops plain_ops = { .read = plain_read, .close = plain_close };

static void test_copy(void **state)
{
    (void)state;
    struct gguf_source s = { .ops = &plain_ops, .size = SIZE, .name = "plain",
                             .identity = "plain:1", .fd = -1 };
    struct gguf_span sp[2];
    int n = -1;
    /* one span of memory of its own, the bytes read into it */
    assert_int_equal(gguf_source_spans(&s, 50, 2000, sp, 2, &n), 0);
    assert_int_equal(n, 1);
    assert_non_null(sp[0].mem);
    assert_non_null(sp[0].release);
    assert_bytes(sp, n, 50, 2000);
    gguf_spans_release(sp, n, true);
    /* cut at the end */
    assert_int_equal(gguf_source_spans(&s, SIZE - 7, 100, sp, 2, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sp[0].len, 7);
    gguf_spans_release(sp, n, false);
    /* a failed read: its errno (positive), nothing held */
    fail_at = 1500;
    n = -1;
    assert_int_equal(gguf_source_spans(&s, 1000, 1000, sp, 2, &n), EIO);
    assert_int_equal(n, 0);
    fail_at = UINT64_MAX;
}

/* A source that lends spans of its own but ENOSPC past max: released
 * spans are counted. */
static void count_release(const struct gguf_span *sp, bool used)
{
    (void)sp;
    (void)used;
    released++;
}

static int lend_spans(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp,
                      int max, int *count)
{
    (void)s;
    int need = (int)((len + 99) / 100);
    if (need > max)
        return ENOSPC;
    for (int i = 0; i < need; i++) {
        size_t l = len - (size_t)i * 100 < 100 ? len - (size_t)i * 100 : 100;
        static uint8_t mem[SIZE];
        for (size_t j = 0; j < l; j++)
            mem[off + (size_t)i * 100 + j] = byte_at(off + (size_t)i * 100 + j);
        sp[i] = (struct gguf_span){ .mem = mem + off + (size_t)i * 100, .fd = -1, .len = l,
                                    .release = count_release };
    }
    *count = need;
    return 0;
}

static const struct gguf_source_ops lend_ops = { .read = plain_read, .close = plain_close,
                                                 .spans = lend_spans };

static void test_lend_or_copy(void **state)
{
    (void)state;
    struct gguf_source s = { .ops = &lend_ops, .size = SIZE, .name = "lend",
                             .identity = "lend:1", .fd = -1 };
    struct gguf_span sp[4];
    int n;
    released = 0;
    assert_int_equal(gguf_source_spans(&s, 10, 350, sp, 4, &n), 0);
    assert_int_equal(n, 4);
    assert_bytes(sp, n, 10, 350);
    gguf_spans_release(sp, n, true);
    assert_int_equal(released, 4);
    /* more than max: copied into one span */
    assert_int_equal(gguf_source_spans(&s, 10, 450, sp, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_bytes(sp, n, 10, 450);
    gguf_spans_release(sp, n, true);
    assert_int_equal(released, 4);
}

static void test_splice(void **state)
{
    (void)state;
    int fd;
    struct gguf_source *base = file_src(&fd);
    uint8_t hdr[64];
    memset(hdr, 'H', sizeof hdr);
    struct gguf_source *sp_src;
    struct gguf_diag d;
    /* a new header of 64 bytes in place of the base's first 1000 */
    assert_int_equal(gguf_splice_source(hdr, sizeof hdr, base, 1000, &sp_src, &d), GGUF_OK);
    assert_int_equal(sp_src->size, 64 + SIZE - 1000);
    struct gguf_span sp[4];
    int n;
    uint8_t got[SIZE];
    /* across the border: the header from memory, then the base's
     * descriptor at the shifted offset */
    assert_int_equal(gguf_source_spans(sp_src, 60, 100, sp, 4, &n), 0);
    assert_int_equal(n, 2);
    assert_non_null(sp[0].mem);
    assert_int_equal(sp[0].len, 4);
    assert_null(sp[1].mem);
    assert_int_equal(sp[1].fd, fd);
    assert_int_equal(sp[1].pos, 1000);
    assert_int_equal(gather(sp, n, got, sizeof got), 100);
    assert_memory_equal(got, "HHHH", 4);
    for (unsigned i = 4; i < 100; i++)
        assert_int_equal(got[i], byte_at(1000 + i - 4));
    gguf_spans_release(sp, n, true);
    /* in the header only; in the base only, cut at the end */
    assert_int_equal(gguf_source_spans(sp_src, 0, 10, sp, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sp[0].len, 10);
    assert_int_equal(gguf_source_spans(sp_src, sp_src->size - 5, 100, sp, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(sp[0].pos, SIZE - 5);
    assert_int_equal(sp[0].len, 5);
    /* one span offered and the header in the way: copied */
    assert_int_equal(gguf_source_spans(sp_src, 60, 100, sp, 1, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(gather(sp, n, got, sizeof got), 100);
    assert_memory_equal(got, "HHHH", 4);
    for (unsigned i = 4; i < 100; i++)
        assert_int_equal(got[i], byte_at(1000 + i - 4));
    gguf_spans_release(sp, n, true);
    gguf_source_close(sp_src);
    gguf_source_close(base);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_copy),
        cmocka_unit_test(test_lend_or_copy),
        cmocka_unit_test(test_splice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/*
 * tests/unit/test_log.c — the lines fs/log.c keeps for a mount's log file
 * (fs/log.h): nothing before ggfs_log_keep, then every message as one
 * "STAMP message\n" line (the program's "gguffs: " left out, a newline or
 * CR inside a message a space, a long one cut to LOG_LINE_MAX), the last
 * LOG_KEEP of them in order, the size what a copy holds.  Messages go
 * through fuse_log, as in gguffs, each with a format of its own so that
 * the rate limit (per format) lets every one through; the handler writes
 * them to a log_file too (daemonized: not to stderr, not to syslog).
 */
#include "fs/fs.h"
#include "fs/log.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define N_MESSAGES (LOG_KEEP + 100)

/* The kept lines, NUL-terminated (malloc'd); its length checked against
 * ggfs_log_size. */
static char *kept(size_t *len)
{
    size_t size = ggfs_log_size();
    char *p = ggfs_log_copy(len);
    assert_non_null(p);
    assert_int_equal(*len, size);
    char *s = malloc(*len + 1);
    assert_non_null(s);
    memcpy(s, p, *len);
    s[*len] = '\0';
    free(p);
    return s;
}

/* "2026-01-02T03:04:05Z " at the start of line. */
static void expect_stamp(const char *line)
{
    int y, mo, d, h, mi, s;
    char z, sp;
    assert_int_equal(sscanf(line, "%4d-%2d-%2dT%2d:%2d:%2d%c%c", &y, &mo, &d, &h, &mi, &s, &z,
                            &sp), 8);
    assert_int_equal(z, 'Z');
    assert_int_equal(sp, ' ');
    assert_int_equal(line[20], ' ');
}

static void test_kept_lines(void **state)
{
    (void)state;
    char path[] = "/tmp/gguffs-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_true(ggfs_log_open("/mnt/x", path));
    ggfs_log_daemonized();        /* the file only: no stderr, no syslog */

    /* before the mount is made: not kept */
    fuse_log(FUSE_LOG_ERR, "gguffs: m.gguf: before the mount\n");
    size_t len;
    char *s = kept(&len);
    assert_int_equal(len, 0);
    free(s);

    ggfs_log_keep();
    /* distinct formats (pointers): the rate limit passes each */
    static char fmts[N_MESSAGES][40];
    for (int i = 0; i < N_MESSAGES; i++) {
        snprintf(fmts[i], sizeof fmts[i], "gguffs: m.gguf: message %%d\n");
        fuse_log(FUSE_LOG_ERR, fmts[i], i);
    }
    s = kept(&len);
    /* the last LOG_KEEP, oldest first, one line each */
    unsigned lines = 0;
    for (char *line = s; *line; lines++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = '\0';
        expect_stamp(line);
        char want[64];
        snprintf(want, sizeof want, "m.gguf: message %u", N_MESSAGES - LOG_KEEP + lines);
        assert_string_equal(line + 21, want);
        line = nl + 1;
    }
    assert_int_equal(lines, LOG_KEEP);
    free(s);

    /* one message, one line; a long one cut, still one line */
    fuse_log(FUSE_LOG_ERR, "gguffs: a\nb\rc %s\n", "d\ne");
    char big[3 * LOG_LINE_MAX];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    fuse_log(FUSE_LOG_WARNING, "gguffs: long %s\n", big);
    s = kept(&len);
    assert_true(len > 2);
    char *end = s + len;
    assert_int_equal(end[-1], '\n');
    char *last = end - 2;
    while (last > s && last[-1] != '\n')
        last--;
    char *prev = last - 1;
    while (prev > s && prev[-1] != '\n')
        prev--;
    assert_int_equal(last - prev, 21 + strlen("a b c d e") + 1);
    assert_memory_equal(prev + 21, "a b c d e\n", 10);
    assert_true(end - last <= LOG_LINE_MAX);
    assert_memory_equal(last + 21, "long xxx", 8);
    assert_null(memchr(last, '\n', (size_t)(end - last) - 1));
    free(s);

    /* still LOG_KEEP lines */
    s = kept(&len);
    unsigned n = 0;
    for (size_t i = 0; i < len; i++)
        n += s[i] == '\n';
    assert_int_equal(n, LOG_KEEP);
    free(s);

    ggfs_log_close();
    assert_int_equal(ggfs_log_size(), 0);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

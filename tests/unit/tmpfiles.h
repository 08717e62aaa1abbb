/*
 * tests/unit/tmpfiles.h — the files a unit test makes in its temporary
 * folder: tmpdir (the test's main makes it, with mkdtemp), tpath (a name
 * in it; four results stay valid at a time) and put_file (a whole file
 * written, or the test fails).  Included after cmocka.h.
 */
#ifndef TESTS_UNIT_TMPFILES_H
#define TESTS_UNIT_TMPFILES_H

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

static char tmpdir[4096];

static inline const char *tpath(const char *name)
{
    static char p[4][4200];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", tmpdir, name);
    return p[i];
}

static inline void put_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    assert_int_equal(close(fd), 0);
}

#endif

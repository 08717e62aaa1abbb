/*
 * tests/unit/tmpfiles.h — the files a unit test makes in its temporary
 * folder: tmpdir (the test's main makes it, with mkdtemp), tpath (a name
 * in it; four results stay valid at a time) and put_file (a whole file
 * written, or the test fails), and a split model written there.  Included
 * after cmocka.h.
 */
#ifndef TESTS_UNIT_TMPFILES_H
#define TESTS_UNIT_TMPFILES_H

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "gb.h"

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


/* A model of count shards (gb_shard's, context length 2048) written to
 * m-0000K-of-0000N.gguf in tmpdir; shard_name is shard k's path (a tpath). */
static inline const char *shard_name(unsigned k, unsigned count)
{
    char n[64];
    snprintf(n, sizeof n, "m-%05u-of-%05u.gguf", k + 1, count);
    return tpath(n);
}

static inline void write_split(unsigned count)
{
    for (unsigned k = 0; k < count; k++) {
        struct gb b = gb_shard(k, count, 2048, count);
        put_file(shard_name(k, count), b.p, b.len);
        free(b.p);
    }
}

static inline void remove_split(unsigned count)
{
    for (unsigned k = 0; k < count; k++)
        unlink(shard_name(k, count));
}

#endif

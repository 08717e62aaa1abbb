/* gguf/source.c — the byte source of a local file (see source.h). */
#include "source.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct file_source {
    struct gguf_source s;
    bool own_fd;
};

static ssize_t file_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    for (;;) {
        ssize_t r = pread(s->fd, buf, len, (off_t)off);
        if (r >= 0)
            return r;
        if (errno != EINTR)
            return -errno;
    }
}

static void file_close(struct gguf_source *s)
{
    struct file_source *f = (struct file_source *)s;
    if (f->own_fd)
        close(s->fd);
    free(s->name);
    free(s->identity);
    free(f);
}

/* A file's bytes are its descriptor's: one range, spliced by the kernel. */
static int file_spans(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp,
                      int max, int *count)
{
    (void)max;
    sp[0] = (struct gguf_span){ .fd = s->fd, .pos = off, .len = len };
    *count = 1;
    return 0;
}

static const struct gguf_source_ops file_ops = { .read = file_read, .close = file_close,
                                                 .spans = file_spans };

/* malloc + memcpy rather than strdup: tests wrap malloc and free. */
static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

static enum gguf_err io_fail(struct gguf_diag *d, const char *what)
{
    return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s", what);
}

static enum gguf_err wrap(int fd, bool own, const char *name, struct gguf_source **out,
                          struct gguf_diag *d)
{
    *out = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return io_fail(d, strerror(errno));
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
        return io_fail(d, "not a regular file");
    uint64_t size = (uint64_t)st.st_size;
    if (S_ISBLK(st.st_mode)) {
        off_t end = lseek(fd, 0, SEEK_END);
        if (end < 0)
            return io_fail(d, strerror(errno));
        size = (uint64_t)end;
    }
    struct file_source *f = calloc(1, sizeof *f);
    char id[96];
    snprintf(id, sizeof id, "file:%llu:%llu:%lld%09ld:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec, (unsigned long long)size);
    if (f) {
        f->s.name = dup_str(name ? name : "");
        f->s.identity = dup_str(id);
    }
    if (!f || !f->s.name || !f->s.identity) {
        if (f) {
            free(f->s.name);
            free(f->s.identity);
            free(f);
        }
        return io_fail(d, "out of memory");
    }
    f->s.ops = &file_ops;
    f->s.size = size;
    f->s.fd = fd;
    f->own_fd = own;
    *out = &f->s;
    return GGUF_OK;
}

enum gguf_err gguf_source_file(const char *path, struct gguf_source **out,
                               struct gguf_diag *d)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return io_fail(d, strerror(errno));
    enum gguf_err e = wrap(fd, true, path, out, d);
    if (e)
        close(fd);
    return e;
}

enum gguf_err gguf_source_fd(int fd, const char *name, struct gguf_source **out,
                             struct gguf_diag *d)
{
    return wrap(fd, false, name, out, d);
}

int gguf_source_read_all(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    for (size_t got = 0; got < len;) {
        ssize_t r = s->ops->read(s, (char *)buf + got, len - got, off + got);
        if (r < 0)
            return (int)-r;
        if (r == 0)
            return EIO;
        got += (size_t)r;
    }
    return 0;
}

void gguf_source_close(struct gguf_source *s)
{
    if (s)
        s->ops->close(s);
}

static void free_copy(const struct gguf_span *sp, bool used)
{
    (void)used;
    free(sp->hold);
}

int gguf_source_spans(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp,
                      int max, int *count)
{
    *count = 0;
    if (!(len = gguf_read_len(s->size, len, off)))
        return 0;
    if (s->ops->spans) {
        int e = s->ops->spans(s, off, len, sp, max, count);
        if (e != ENOSPC)
            return e;
        *count = 0;
    }
    /* copied: the source lends no spans for these bytes */
    char *buf = malloc(len);
    if (!buf)
        return ENOMEM;
    int e = gguf_source_read_all(s, buf, len, off);
    if (e) {
        free(buf);
        return e;
    }
    sp[0] = (struct gguf_span){ .mem = buf, .fd = -1, .len = len, .release = free_copy,
                                .hold = buf };
    *count = 1;
    return 0;
}

void gguf_spans_release(const struct gguf_span *sp, int n, bool used)
{
    for (int i = 0; i < n; i++)
        if (sp[i].release)
            sp[i].release(&sp[i], used);
}

size_t gguf_read_len(uint64_t size, size_t len, uint64_t off)
{
    if (off >= size || len == 0)
        return 0;
    if (len > size - off)
        len = (size_t)(size - off);
    if (len > (size_t)SSIZE_MAX)
        len = (size_t)SSIZE_MAX & ~(size_t)4095;
    return len;
}

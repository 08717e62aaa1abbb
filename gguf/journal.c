/* gguf/journal.c — files beside the model, the journal, steps (journal.h). */
#include "journal.h"

#include "buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct gguf_edit_hooks *gguf_edit_hooks;

static const char jmagic1[8] = { 'G', 'G', 'U', 'F', 'F', 'S', 'J', '1' };
static const char jmagic2[8] = { 'G', 'G', 'U', 'F', 'F', 'S', 'J', '2' };
static const char jidle[8] = { 'G', 'G', 'U', 'F', 'F', 'S', 'J', '0' };

/* The journal is little-endian whatever the model's byte order. */
static const struct gguf_enc jenc = { .big_endian = false, .v1 = false };

enum gguf_err gguf_io_fail(struct gguf_diag *d, const char *what, int err)
{
    return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s: %s", what, strerror(err));
}

/* ---- names ------------------------------------------------------------------- */

void gguf_jpaths_free(struct gguf_jpaths *p)
{
    free(p->model);
    free(p->dir);
    free(p->journal);
    free(p->newf);
}

enum gguf_err gguf_jpaths_init(const char *path, struct gguf_jpaths *p,
                               struct gguf_diag *d)
{
    memset(p, 0, sizeof *p);
    p->model = realpath(path, NULL);
    if (!p->model) {
        int e = errno;
        gguf_io_fail(d, "resolving the model's path", e);
        errno = e;
        return GGUF_E_IO;
    }
    const char *slash = strrchr(p->model, '/');
    size_t dl = slash == p->model ? 1 : (size_t)(slash - p->model);
    p->dir = malloc(dl + 1);
    if (p->dir) {
        memcpy(p->dir, p->model, dl);
        p->dir[dl] = '\0';
    }
    p->journal = gguf_str_concat(p->model, GGUF_JOURNAL_SUFFIX);
    p->newf = gguf_str_concat(p->model, GGUF_NEW_SUFFIX);
    if (!p->dir || !p->journal || !p->newf) {
        gguf_jpaths_free(p);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    return GGUF_OK;
}

/* ---- the journal ----------------------------------------------------------------- */

uint64_t gguf_cksum(const uint8_t *p, size_t n)
{
    const uint64_t mul = 0x9e3779b97f4a7c15ull;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        h = (h ^ gguf_rd64(&jenc, p + i)) * mul;
        h ^= h >> 29;
    }
    for (; i < n; i++) {
        h = (h ^ p[i]) * mul;
        h ^= h >> 29;
    }
    h = (h ^ (h >> 32)) * mul;
    return h ^ (h >> 29);
}

uint8_t *gguf_journal_build(uint64_t model_size, uint64_t lo, uint64_t len,
                            const struct gguf_jrun *runs, size_t n,
                            const uint8_t *old, const uint8_t *nw, size_t *size)
{
    size_t olen = 0;
    for (size_t i = 0; i < n; i++)
        olen += (size_t)runs[i].len;
    size_t tab = 16 * n;
    uint8_t *j = calloc(1, GGUF_JREC + tab + olen);   /* calloc: gcc -O2 sees the gathered bytes as unset */
    if (!j) {
        errno = ENOMEM;
        return NULL;
    }
    uint8_t *t = j + GGUF_JREC, *o = t + tab;
    /* the new bytes' checksum: of the runs' new bytes one after another,
     * gathered first where the old ones go */
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(o + at, nw + runs[i].off, (size_t)runs[i].len);
        at += (size_t)runs[i].len;
    }
    uint64_t new_ck = gguf_cksum(o, at);
    at = 0;
    for (size_t i = 0; i < n; i++) {
        gguf_wr64(&jenc, t + 16 * i, runs[i].off);
        gguf_wr64(&jenc, t + 16 * i + 8, runs[i].len);
        memcpy(o + at, old + runs[i].off, (size_t)runs[i].len);
        at += (size_t)runs[i].len;
    }
    memset(j, 0, GGUF_JREC);
    memcpy(j, jmagic2, 8);
    gguf_wr64(&jenc, j + 8, model_size);
    gguf_wr64(&jenc, j + 16, lo);
    gguf_wr64(&jenc, j + 24, len);
    gguf_wr64(&jenc, j + 32, gguf_cksum(t, tab + olen));
    gguf_wr64(&jenc, j + 40, new_ck);
    gguf_wr64(&jenc, j + 48, n);
    gguf_wr64(&jenc, j + 56, gguf_cksum(j, 56));
    *size = GGUF_JREC + tab + olen;
    return j;
}

enum gguf_jstate gguf_journal_state(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? GGUF_J_NONE : GGUF_J_ERROR;
    char m[8];
    ssize_t r;
    while ((r = pread(fd, m, sizeof m, 0)) < 0 && errno == EINTR)
        ;
    int e = errno;
    close(fd);
    errno = e;
    if (r < 0)
        return GGUF_J_ERROR;
    return r == (ssize_t)sizeof m && memcmp(m, jidle, sizeof m) == 0 ? GGUF_J_IDLE : GGUF_J_BUSY;
}

bool gguf_journal_set_idle(int fd)
{
    return gguf_pwrite_all(fd, jidle, sizeof jidle, 0);
}

void gguf_jrec_free(struct gguf_jrec *r)
{
    free(r->runs);
    r->runs = NULL;
}

/* The run table of a J2 journal (n runs, then their old bytes, in pl of
 * plen bytes) into r; false if it is not one gguf_journal_build writes. */
static bool read_runs(struct gguf_jrec *r, uint64_t n, const uint8_t *pl, uint64_t plen)
{
    if (!(r->runs = malloc((size_t)n * sizeof *r->runs)))
        return false;
    r->nruns = (size_t)n;
    uint64_t at = r->lo, end = r->lo + r->len, sum = 0;
    if (end < r->lo)
        return false;
    for (uint64_t i = 0; i < n; i++) {
        struct gguf_jrun *u = &r->runs[i];
        u->off = gguf_rd64(&jenc, pl + 16 * i);
        u->len = gguf_rd64(&jenc, pl + 16 * i + 8);
        if (u->len == 0 || u->off < at || u->off > end || u->len > end - u->off)
            return false;
        at = u->off + u->len;
        sum += u->len;
    }
    r->old_len = sum;
    return sum == plen - 16 * n;
}

int gguf_journal_read(const char *path, struct gguf_jrec *r, uint8_t **payload)
{
    *payload = NULL;
    memset(r, 0, sizeof *r);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    uint8_t rec[GGUF_JREC], *pl = NULL;
    int res = -1;
    if (fstat(fd, &st) != 0)
        goto out;
    res = 0;
    if (st.st_size < GGUF_JREC)
        goto out;     /* incomplete */
    if (!gguf_pread_all(fd, rec, GGUF_JREC, 0)) {
        res = -1;
        goto out;
    }
    bool j2 = memcmp(rec, jmagic2, 8) == 0;
    if ((!j2 && memcmp(rec, jmagic1, 8) != 0) || gguf_rd64(&jenc, rec + 56) != gguf_cksum(rec, 56))
        goto out;     /* incomplete */
    uint64_t plen = (uint64_t)st.st_size - GGUF_JREC, n = gguf_rd64(&jenc, rec + 48);
    r->model_size = gguf_rd64(&jenc, rec + 8);
    r->lo = gguf_rd64(&jenc, rec + 16);
    r->len = gguf_rd64(&jenc, rec + 24);
    r->new_ck = gguf_rd64(&jenc, rec + 40);
    r->has_new = j2 || (n & 1);
    /* J1: the payload is the span; J2: its table needs n * 16 bytes */
    if (j2 ? n == 0 || n > plen / 16 : r->len != plen)
        goto out;     /* incomplete */
    /* the length is the file's: bounded by what the disk holds */
    if (!(pl = malloc(plen ? (size_t)plen : 1))) {
        errno = ENOMEM;
        res = -1;
        goto out;
    }
    if (!gguf_pread_all(fd, pl, (size_t)plen, GGUF_JREC)) {
        res = -1;
        goto out;
    }
    if (gguf_cksum(pl, (size_t)plen) != gguf_rd64(&jenc, rec + 32))
        goto out;     /* incomplete */
    if (!j2) {
        if (!(r->runs = malloc(sizeof *r->runs))) {
            errno = ENOMEM;
            res = -1;
            goto out;
        }
        r->nruns = 1;
        r->runs[0] = (struct gguf_jrun){ r->lo, r->len };
        r->old_len = r->len;
    } else if (!read_runs(r, n, pl, plen)) {
        errno = r->runs ? EINVAL : ENOMEM;
        res = -1;
        goto out;
    } else {
        /* the old bytes to the front */
        memmove(pl, pl + 16 * n, (size_t)r->old_len);
    }
    *payload = pl;
    pl = NULL;
    res = 1;
out:
    {
        int e = errno;
        free(pl);
        if (res != 1)
            gguf_jrec_free(r);
        close(fd);
        errno = e;
    }
    return res;
}

/* ---- steps and durable I/O ---------------------------------------------------------- */

void gguf_step(struct gguf_steps *s, const char *what)
{
    struct gguf_edit_hooks *h = gguf_edit_hooks;
    if (h && h->step)
        h->step(s->n, what, h->arg);
    s->n++;
}

/* pwrite (wr) or pread of exactly n bytes at off. */
static bool xfer_all(int fd, void *buf, size_t n, uint64_t off, bool wr)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = wr ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return false;
        if (r == 0) {
            errno = EIO;
            return false;
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return true;
}

bool gguf_pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
    return xfer_all(fd, (void *)buf, n, off, true);
}

bool gguf_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    return xfer_all(fd, buf, n, off, false);
}

bool gguf_write_step(struct gguf_steps *s, const char *what, int fd,
                     const void *buf, size_t n, uint64_t off)
{
    const uint8_t *p = buf;
    gguf_step(s, what);
    if (gguf_edit_hooks && n > 1) {
        size_t half = n / 2;
        if (!gguf_pwrite_all(fd, p, half, off))
            return false;
        gguf_step(s, what);
        return gguf_pwrite_all(fd, p + half, n - half, off + half);
    }
    return gguf_pwrite_all(fd, p, n, off);
}

int gguf_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return r;
}

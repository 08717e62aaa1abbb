/*
 * gguf/edit.c — building a new header and committing it crash-safely.
 *
 * The argument for crash safety (a crash may be a kill -9 between any two
 * system calls, or a power loss that keeps only what was fsync'd):
 *
 * In place.  The model's bytes [lo, hi) are overwritten only after the
 * journal holding their old value is durable (fsync of the journal, then of
 * the directory that names it).  The journal is verifiable: its record and
 * its payload carry checksums and its length is exact, so a journal torn by
 * a crash while it was written reads as incomplete, and an incomplete
 * journal proves that its fsync had not returned, hence that the model had
 * not been touched: gguf_recover just removes it.  A complete journal may
 * guard a model that is old, torn or new: gguf_recover writes the old bytes
 * back, fsyncs the model (even when the bytes already match: they may be
 * in the page cache only), and only then removes the journal.  The new
 * header is fsync'd before the journal is unlinked, so the journal's
 * removal (made durable by a directory fsync before gguf_commit returns)
 * can never be seen with a model that is not fully new.
 *
 * Rewrite.  The model is not written at all: the new file is written and
 * fsync'd (data, mode, owner) before rename() atomically replaces the
 * model's name, and the directory is fsync'd before gguf_commit returns.
 * Before the rename a crash leaves the old model plus a MODEL.gguffs-new
 * that gguf_recover removes; after it, the new model.
 *
 * Journal format (all integers little-endian):
 *
 *   0  "GGUFFSJ1"        8  model size       16 lo (offset in the model)
 *   24 len (= hi - lo)   32 payload checksum  40..55 zero
 *   56 checksum of bytes [0, 56)
 *   64 payload: the model's old bytes [lo, lo + len)
 *
 * The journal file is exactly 64 + len bytes long.  The checksum is an
 * FNV-1a style hash taking 8 bytes per step, with a multiplier and shift
 * that spread every input bit over the whole state.
 */
#include "edit.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct gguf_edit_hooks *gguf_edit_hooks;

#define JOURNAL_SUFFIX ".gguffs-journal"
#define NEW_SUFFIX ".gguffs-new"
#define JREC 64
#define COPY_BUF (1u << 20)
#define CFR_CHUNK ((size_t)1 << 30)

static const char jmagic[8] = { 'G', 'G', 'U', 'F', 'F', 'S', 'J', '1' };

/* ---- small helpers -------------------------------------------------------- */

static void setd(struct gguf_diag *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void setd(struct gguf_diag *d, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    d->offset = UINT64_MAX;
}

/* Records an I/O failure of step (errno-based) and returns GGUF_E_IO. */
static enum gguf_err io_fail(struct gguf_diag *d, const char *step, int err)
{
    setd(d, "%s: %s", step, strerror(err));
    return GGUF_E_IO;
}

static uint64_t cksum(const uint8_t *p, size_t n)
{
    const uint64_t mul = 0x9e3779b97f4a7c15ull;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = 0;
        for (unsigned k = 0; k < 8; k++)
            w |= (uint64_t)p[i + k] << (8 * k);
        h = (h ^ w) * mul;
        h ^= h >> 29;
    }
    for (; i < n; i++) {
        h = (h ^ p[i]) * mul;
        h ^= h >> 29;
    }
    h = (h ^ (h >> 32)) * mul;
    return h ^ (h >> 29);
}

static void le64(uint8_t *p, uint64_t v)
{
    for (unsigned k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

static uint64_t rdle64(const uint8_t *p)
{
    uint64_t v = 0;
    for (unsigned k = 0; k < 8; k++)
        v |= (uint64_t)p[k] << (8 * k);
    return v;
}

/* Steps of one gguf_commit / gguf_recover call, for the test hooks. */
struct steps {
    unsigned n;
};

static void step(struct steps *s, const char *what)
{
    struct gguf_edit_hooks *h = gguf_edit_hooks;
    if (h && h->step)
        h->step(s->n, what, h->arg);
    s->n++;
}

static bool pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return false;
        if (w == 0) {
            errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return true;
}

/* A write that is one step; split in two (a torn write) under test hooks. */
static bool write_step(struct steps *s, const char *what, int fd,
                       const uint8_t *p, size_t n, uint64_t off)
{
    step(s, what);
    if (gguf_edit_hooks && n > 1) {
        size_t half = n / 2;
        if (!pwrite_all(fd, p, half, off))
            return false;
        step(s, what);
        return pwrite_all(fd, p + half, n - half, off + half);
    }
    return pwrite_all(fd, p, n, off);
}

/* Reads exactly n bytes at off; a short file is an error (EIO). */
static bool pread_all(int fd, uint8_t *p, size_t n, uint64_t off)
{
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
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

static int fsync_dir(const char *dir)
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

/* The model's real path, its directory and the names beside it. */
struct paths {
    char *model, *dir, *journal, *newf;
};

static void paths_free(struct paths *p)
{
    free(p->model);
    free(p->dir);
    free(p->journal);
    free(p->newf);
}

static char *concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

/* Returns GGUF_OK, GGUF_E_IO (errno kept, e.g. ENOENT) or GGUF_E_NOMEM. */
static enum gguf_err paths_init(const char *path, struct paths *p,
                                struct gguf_diag *d)
{
    memset(p, 0, sizeof *p);
    p->model = realpath(path, NULL);
    if (!p->model)
        return io_fail(d, "resolving the model's path", errno);
    const char *slash = strrchr(p->model, '/');
    size_t dl = slash == p->model ? 1 : (size_t)(slash - p->model);
    p->dir = malloc(dl + 1);
    if (p->dir) {
        memcpy(p->dir, p->model, dl);
        p->dir[dl] = '\0';
    }
    p->journal = concat(p->model, JOURNAL_SUFFIX);
    p->newf = concat(p->model, NEW_SUFFIX);
    if (!p->dir || !p->journal || !p->newf) {
        paths_free(p);
        setd(d, "out of memory");
        return GGUF_E_NOMEM;
    }
    return GGUF_OK;
}

/* true if some tensor has bytes: then the header must be padded to the
 * alignment, since the data starts there. */
static bool has_tensor_data(const struct gguf_file *f)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].nbytes)
            return true;
    return false;
}

static bool is_alignment_key(const char *k, size_t n)
{
    return n == 17 && memcmp(k, "general.alignment", 17) == 0;
}

/* Shows a key for a message: at most 60 bytes, non-printables as '?'. */
static const char *shown(const char *p, size_t n, char buf[72])
{
    size_t k = n > 60 ? 60 : n, i;
    for (i = 0; i < k; i++)
        buf[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '?';
    if (n > k) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

/* ---- building a header ------------------------------------------------------ */

struct gguf_newkv gguf_newkv_of(const struct gguf_file *f, uint64_t i)
{
    const struct gguf_kv *kv = &f->kv[i];
    uint64_t cs = f->enc.v1 ? 4 : 8;
    uint64_t bin = kv->rec_off + cs + kv->key_len + 4;
    struct gguf_newkv n = {
        .key = (const char *)f->hdr + kv->key_off,
        .key_len = kv->key_len,
        .type = kv->type,
        .val = f->hdr + bin,
        .val_len = (size_t)(kv->val_off + kv->val_size - bin),
    };
    return n;
}

static void put_u32(struct gguf_buf *b, const struct gguf_enc *e, uint32_t v)
{
    if (e->big_endian)
        v = __builtin_bswap32(v);
    gguf_buf_put(b, &v, 4);
}

static void put_count(struct gguf_buf *b, const struct gguf_enc *e, uint64_t v)
{
    if (e->v1) {
        put_u32(b, e, (uint32_t)v);
        return;
    }
    if (e->big_endian)
        v = __builtin_bswap64(v);
    gguf_buf_put(b, &v, 8);
}

/* general.alignment must stay exactly as it is. */
static enum gguf_err check_alignment(const struct gguf_file *f,
                                     const struct gguf_newkv *kvs, size_t n,
                                     struct gguf_diag *d)
{
    bool had = gguf_find_key(f, "general.alignment", 17) >= 0, has = false;
    for (size_t i = 0; i < n; i++) {
        if (!is_alignment_key(kvs[i].key, kvs[i].key_len))
            continue;
        if (!had) {
            setd(d, "general.alignment cannot be added (the file uses the "
                 "default, 32): it decides where tensor data starts");
            return GGUF_E_INVAL;
        }
        if (kvs[i].type != GGUF_U32 || kvs[i].val_len != 4 ||
            gguf_rd32(&f->enc, kvs[i].val) != f->alignment) {
            setd(d, "general.alignment cannot be changed (it is u32 %llu): it "
                 "decides where tensor data starts",
                 (unsigned long long)f->alignment);
            return GGUF_E_INVAL;
        }
        has = true;
    }
    if (had && !has) {
        setd(d, "general.alignment cannot be removed: it decides where "
             "tensor data starts");
        return GGUF_E_INVAL;
    }
    return GGUF_OK;
}

/* Parses a header holding kv alone; GGUF_OK if its value is well formed
 * and exactly val_len bytes long.  (Only used to explain a failure.) */
static enum gguf_err check_one(const struct gguf_file *f,
                               const struct gguf_newkv *kv, struct gguf_diag *d)
{
    const struct gguf_enc *e = &f->enc;
    struct gguf_buf b = { 0 };
    gguf_buf_put(&b, "GGUF", 4);
    put_u32(&b, e, f->version);
    put_count(&b, e, 0);
    put_count(&b, e, 1);
    put_count(&b, e, kv->key_len);
    gguf_buf_put(&b, kv->key, kv->key_len);
    put_u32(&b, e, kv->type);
    gguf_buf_put(&b, kv->val, kv->val_len);
    if (b.oom) {
        gguf_buf_free(&b);
        setd(d, "out of memory");
        return GGUF_E_NOMEM;
    }
    struct gguf_file *nf = NULL;
    enum gguf_err err = gguf_parse((const uint8_t *)b.data, b.len, b.len, &nf, d,
                                   NULL);
    if (!err && nf->hdr_size != b.len) {
        setd(d, "%zu bytes given, %zu parsed", kv->val_len,
             kv->val_len - (size_t)(b.len - nf->hdr_size));
        err = GGUF_E_INVAL;
    }
    gguf_close(nf);
    gguf_buf_free(&b);
    return err;
}

enum gguf_err gguf_header_build(const struct gguf_file *f,
                                const struct gguf_newkv *kvs, size_t n,
                                struct gguf_buf *out, struct gguf_diag *d)
{
    struct gguf_diag scratch;
    if (!d)
        d = &scratch;
    d->msg[0] = '\0';
    d->offset = UINT64_MAX;
    const struct gguf_enc *e = &f->enc;
    char nb[72];

    if (e->v1 && n > UINT32_MAX) {
        setd(d, "%zu key/values: a version 1 file counts at most %u", n,
             UINT32_MAX);
        return GGUF_E_INVAL;
    }
    for (size_t i = 0; i < n; i++) {
        if (kvs[i].key_len > GGUF_MAX_NAME) {
            setd(d, "key '%s' is %zu bytes long (the limit is %d)",
                 shown(kvs[i].key, kvs[i].key_len, nb), kvs[i].key_len,
                 GGUF_MAX_NAME);
            return GGUF_E_INVAL;
        }
        if (kvs[i].type >= GGUF_VTYPE_COUNT) {
            setd(d, "key '%s': unknown value type %u",
                 shown(kvs[i].key, kvs[i].key_len, nb), kvs[i].type);
            return GGUF_E_INVAL;
        }
    }
    enum gguf_err err = check_alignment(f, kvs, n, d);
    if (err)
        return err;

    uint64_t ti_off = f->n_tensors ? f->tensors[0].info_off : f->hdr_size;
    uint64_t *rec = malloc((n ? n : 1) * sizeof *rec);
    if (!rec) {
        setd(d, "out of memory");
        return GGUF_E_NOMEM;
    }
    struct gguf_buf b = { 0 };
    gguf_buf_put(&b, "GGUF", 4);
    put_u32(&b, e, f->version);
    put_count(&b, e, f->n_tensors);
    put_count(&b, e, n);
    for (size_t i = 0; i < n; i++) {
        rec[i] = b.len;
        put_count(&b, e, kvs[i].key_len);
        gguf_buf_put(&b, kvs[i].key, kvs[i].key_len);
        put_u32(&b, e, kvs[i].type);
        gguf_buf_put(&b, kvs[i].val, kvs[i].val_len);
    }
    gguf_buf_put(&b, f->hdr + ti_off, f->hdr_size - ti_off);
    static const uint8_t zeros[64];
    /* Padding only matters where tensor bytes follow; a file without any
     * (a vocabulary file) ends with its header, as converters write them,
     * so a huge general.alignment costs nothing there. */
    while (!b.oom && has_tensor_data(f) && b.len % f->alignment) {
        size_t k = f->alignment - b.len % f->alignment;
        gguf_buf_put(&b, zeros, k < sizeof zeros ? k : sizeof zeros);
    }
    if (b.oom) {
        free(rec);
        gguf_buf_free(&b);
        setd(d, "out of memory building the header");
        return GGUF_E_NOMEM;
    }

    /* Parse it back: every value must have the length it claims, so that the
     * records and the tensor infos land where they were put. */
    uint64_t data_len = f->file_size > f->data_off ? f->file_size - f->data_off : 0;
    struct gguf_file *nf = NULL;
    struct gguf_diag pd;
    err = gguf_parse((const uint8_t *)b.data, b.len, b.len + data_len, &nf,
                     &pd, NULL);
    if (err == GGUF_E_NOMEM) {
        setd(d, "out of memory checking the header");
    } else if (err) {
        /* find the key at fault by parsing each record alone */
        size_t k = 0;
        struct gguf_diag kd;
        while (k < n && check_one(f, &kvs[k], &kd) == GGUF_OK)
            k++;
        if (k < n)
            setd(d, "key '%s': the value is not a well-formed %s encoding (%s)",
                 shown(kvs[k].key, kvs[k].key_len, nb),
                 gguf_vtype_name(kvs[k].type), kd.msg);
        else
            setd(d, "the new header does not parse: %s", pd.msg);
        err = GGUF_E_INVAL;
    } else {
        for (size_t i = 0; !err && i < n && i < nf->n_kv; i++) {
            size_t got = gguf_newkv_of(nf, i).val_len;
            if (nf->kv[i].rec_off != rec[i] || got != kvs[i].val_len) {
                setd(d, "key '%s': the value is not a well-formed %s encoding "
                     "(%zu bytes given, %zu parsed)",
                     shown(kvs[i].key, kvs[i].key_len, nb),
                     gguf_vtype_name(kvs[i].type), kvs[i].val_len, got);
                err = GGUF_E_INVAL;
            }
        }
        bool same = nf->n_kv == n && nf->n_tensors == f->n_tensors &&
                    nf->alignment == f->alignment &&
                    (nf->data_off == b.len || !has_tensor_data(f));
        for (uint64_t i = 0; same && i < f->n_tensors; i++)
            same = nf->tensors[i].offset == f->tensors[i].offset &&
                   nf->tensors[i].nbytes == f->tensors[i].nbytes;
        if (!err && !same) {
            setd(d, "the new header does not describe the same key count, "
                 "tensors or alignment");
            err = GGUF_E_INVAL;
        }
    }
    gguf_close(nf);
    free(rec);
    if (err) {
        gguf_buf_free(&b);
        return err;
    }
    gguf_buf_free(out);
    *out = b;
    return GGUF_OK;
}

/* ---- committing --------------------------------------------------------------- */

/* Copies len bytes from in at in_off to out at out_off. */
static enum gguf_err copy_data(struct steps *s, int in, uint64_t in_off,
                               int out, uint64_t out_off, uint64_t len,
                               struct gguf_diag *d)
{
    const char *what = "copying the tensor data";
    bool cfr = !(gguf_edit_hooks && gguf_edit_hooks->no_copy_file_range);
    uint64_t half = gguf_edit_hooks ? len / 2 : 0, end = in_off + len;
    uint8_t *buf = NULL;
    step(s, what);
    while (in_off < end) {
        uint64_t want = end - in_off;
        if (half) {
            /* under test hooks: a step in the middle (a torn copy) */
            uint64_t mid = end - len + half;
            if (in_off < mid)
                want = mid - in_off;
            else if (in_off == mid) {
                step(s, what);
                half = 0;
            }
        }
        if (cfr) {
            loff_t io = (loff_t)in_off, oo = (loff_t)out_off;
            ssize_t r = copy_file_range(in, &io, out, &oo,
                                        want < CFR_CHUNK ? (size_t)want : CFR_CHUNK, 0);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP ||
                          errno == EINVAL || errno == EBADF || errno == ETXTBSY)) {
                cfr = false;    /* not supported here: copy through a buffer */
                continue;
            }
            if (r < 0) {
                free(buf);
                return io_fail(d, what, errno);
            }
            if (r == 0) {
                free(buf);
                setd(d, "%s: the model ended early (it shrank?)", what);
                return GGUF_E_IO;
            }
            in_off += (uint64_t)r;
            out_off += (uint64_t)r;
            continue;
        }
        if (!buf && !(buf = malloc(COPY_BUF))) {
            setd(d, "out of memory");
            return GGUF_E_NOMEM;
        }
        size_t k = want < COPY_BUF ? (size_t)want : COPY_BUF;
        if (!pread_all(in, buf, k, in_off) || !pwrite_all(out, buf, k, out_off)) {
            int er = errno;
            free(buf);
            return io_fail(d, what, er);
        }
        in_off += k;
        out_off += k;
    }
    free(buf);
    return GGUF_OK;
}

static enum gguf_err commit_rewrite(const struct paths *p, int fd,
                                    const struct stat *st,
                                    const struct gguf_file *f,
                                    const uint8_t *hdr, size_t hdr_len,
                                    struct gguf_diag *d)
{
    struct steps s = { 0 };
    struct stat ns;
    uint64_t data_len = f->file_size > f->data_off ? f->file_size - f->data_off : 0;
    enum gguf_err err;
    const char *what;

    if (lstat(p->newf, &ns) == 0) {
        step(&s, "removing a leftover new file");
        if (unlink(p->newf) != 0)
            return io_fail(d, "removing a leftover new file", errno);
    }
    step(&s, "creating the new file");
    int nfd = open(p->newf, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (nfd < 0)
        return io_fail(d, "creating the new file", errno);
    if (!write_step(&s, what = "writing the new header", nfd, hdr, hdr_len, 0))
        goto io;
    if ((err = copy_data(&s, fd, f->data_off, nfd, hdr_len, data_len, d)))
        goto fail;
    what = "setting the new file's owner";
    if (fstat(nfd, &ns) != 0)
        goto io;
    if (ns.st_uid != st->st_uid || ns.st_gid != st->st_gid) {
        step(&s, what);
        if (fchown(nfd, st->st_uid, st->st_gid) != 0)
            goto io;
    }
    step(&s, what = "setting the new file's mode");
    if (fchmod(nfd, st->st_mode & 07777) != 0)
        goto io;
    step(&s, what = "fsync of the new file");
    if (fsync(nfd) != 0)
        goto io;
    if (close(nfd) != 0) {
        nfd = -1;
        what = "closing the new file";
        goto io;
    }
    nfd = -1;
    step(&s, what = "renaming the new file over the model");
    if (rename(p->newf, p->model) != 0)
        goto io;
    step(&s, "fsync of the directory");
    if (fsync_dir(p->dir) != 0) {
        setd(d, "new version in place, but the fsync of the directory failed "
             "(it may not survive a power loss): %s", strerror(errno));
        return GGUF_E_IO;
    }
    return GGUF_OK;

io:
    err = io_fail(d, what, errno);
fail:
    if (nfd >= 0)
        close(nfd);
    unlink(p->newf);
    return err;
}

/* Writes old bytes back after a failed in-place write; true if durable. */
static bool rollback(int fd, const uint8_t *old, size_t len, uint64_t lo)
{
    return pwrite_all(fd, old, len, lo) && fsync(fd) == 0;
}

static enum gguf_err commit_in_place(const struct paths *p, int fd,
                                     const struct gguf_file *f,
                                     const uint8_t *old, const uint8_t *hdr,
                                     size_t hdr_len, struct gguf_diag *d)
{
    struct steps s = { 0 };
    size_t lo = 0, hi = hdr_len;
    while (lo < hdr_len && old[lo] == hdr[lo])
        lo++;
    if (lo == hdr_len)
        return GGUF_OK;     /* nothing changes */
    while (old[hi - 1] == hdr[hi - 1])
        hi--;
    size_t len = hi - lo;

    uint8_t *j = malloc(JREC + len);
    if (!j) {
        setd(d, "out of memory");
        return GGUF_E_NOMEM;
    }
    memset(j, 0, JREC);
    memcpy(j, jmagic, 8);
    le64(j + 8, f->file_size);
    le64(j + 16, lo);
    le64(j + 24, len);
    memcpy(j + JREC, old + lo, len);
    le64(j + 32, cksum(j + JREC, len));
    le64(j + 56, cksum(j, 56));

    const char *what;
    step(&s, what = "creating the journal");
    int jfd = open(p->journal, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (jfd < 0) {
        int er = errno;
        free(j);
        if (er == EEXIST) {
            setd(d, "%s exists (an interrupted edit): gguf_recover must run "
                 "first", p->journal);
            return GGUF_E_INVAL;
        }
        return io_fail(d, what, er);
    }
    bool ok = write_step(&s, what = "writing the journal", jfd, j, JREC + len, 0);
    free(j);
    if (ok) {
        step(&s, what = "fsync of the journal");
        ok = fsync(jfd) == 0;
    }
    int er = errno;
    if (close(jfd) != 0 && ok) {
        ok = false;
        er = errno;
        what = "closing the journal";
    }
    if (ok) {
        step(&s, what = "fsync of the directory (journal)");
        ok = fsync_dir(p->dir) == 0;
        er = errno;
    }
    if (!ok) {
        unlink(p->journal);     /* the model was not touched */
        return io_fail(d, what, er);
    }

    /* The journal is durable: the model may be written. */
    if (!write_step(&s, what = "writing the header in place", fd, hdr + lo, len, lo))
        goto undo;
    step(&s, what = "fsync of the model");
    if (fsync(fd) != 0)
        goto undo;
    step(&s, what = "removing the journal");
    if (unlink(p->journal) != 0)
        goto undo;
    step(&s, "fsync of the directory");
    if (fsync_dir(p->dir) != 0) {
        setd(d, "new version in place, but the fsync of the directory failed "
             "(it may be rolled back after a power loss): %s", strerror(errno));
        return GGUF_E_IO;
    }
    return GGUF_OK;

undo:
    er = errno;
    if (rollback(fd, old + lo, len, lo)) {
        if (unlink(p->journal) == 0)
            fsync_dir(p->dir);
        setd(d, "%s: %s (the old header was restored)", what, strerror(er));
    } else {
        setd(d, "%s: %s (the old header could not be restored: %s keeps it "
             "for gguf_recover)", what, strerror(er), p->journal);
    }
    return GGUF_E_IO;
}

enum gguf_err gguf_commit(const char *path, const struct gguf_file *f,
                          const uint8_t *hdr, size_t hdr_len, bool *in_place,
                          struct gguf_diag *d)
{
    struct gguf_diag scratch;
    bool ip_scratch;
    if (!d)
        d = &scratch;
    if (!in_place)
        in_place = &ip_scratch;
    d->msg[0] = '\0';
    d->offset = UINT64_MAX;
    *in_place = false;
    if (hdr_len < 24 || memcmp(hdr, "GGUF", 4) != 0 ||
        (has_tensor_data(f) && hdr_len % f->alignment)) {
        setd(d, "the new header is malformed (no magic, or its size %zu is not "
             "a multiple of the alignment %llu)", hdr_len,
             (unsigned long long)f->alignment);
        return GGUF_E_INVAL;
    }

    struct paths p;
    enum gguf_err err = paths_init(path, &p, d);
    if (err)
        return err;
    /* In place when the new header takes exactly the room of the old one:
     * up to the data start, or, in a file without tensor bytes (headers
     * not padded), the whole file. */
    uint64_t room = has_tensor_data(f) ? f->data_off : f->file_size;
    bool ip = hdr_len == room && f->file_size >= room;
    uint8_t *old = NULL;
    struct stat st;
    int fd = open(p.model, (ip ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
        err = io_fail(d, "opening the model", errno);
        goto out;
    }
    /* Is the file still the one f describes? */
    if (fstat(fd, &st) != 0) {
        err = io_fail(d, "stat of the model", errno);
        goto out;
    }
    size_t cmp = ip ? room : f->hdr_size;
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != f->file_size) {
        setd(d, "the model changed since it was indexed (size %llu, was %llu)",
             (unsigned long long)st.st_size, (unsigned long long)f->file_size);
        err = GGUF_E_INVAL;
        goto out;
    }
    if (!(old = malloc(cmp ? cmp : 1))) {
        setd(d, "out of memory");
        err = GGUF_E_NOMEM;
        goto out;
    }
    if (!pread_all(fd, old, cmp, 0)) {
        err = io_fail(d, "reading the model's header", errno);
        goto out;
    }
    if (memcmp(old, f->hdr, f->hdr_size) != 0) {
        setd(d, "the model changed since it was indexed (its header differs)");
        err = GGUF_E_INVAL;
        goto out;
    }
    if (access(p.journal, F_OK) == 0) {
        setd(d, "%s exists (an interrupted edit): gguf_recover must run first",
             p.journal);
        err = GGUF_E_INVAL;
        goto out;
    }
    if (ip) {
        err = commit_in_place(&p, fd, f, old, hdr, hdr_len, d);
        *in_place = err == GGUF_OK;
    } else {
        err = commit_rewrite(&p, fd, &st, f, hdr, hdr_len, d);
    }
out:
    if (fd >= 0)
        close(fd);
    free(old);
    paths_free(&p);
    return err;
}

/* ---- recovery ------------------------------------------------------------------ */

static void say(char *what, size_t cap, const char *s)
{
    if (!what || !cap)
        return;
    size_t l = strlen(what);
    snprintf(what + l, cap - l, "%s%s", l ? "; " : "", s);
}

/* Reads the journal at path.  Returns 1 if complete (the record in rec, the
 * payload in *payload), 0 if incomplete, -1 on error (errno). */
static int read_journal(const char *path, uint8_t rec[JREC], uint8_t **payload)
{
    *payload = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    int r = 0;
    if (fstat(fd, &st) != 0) {
        r = -1;
        goto out;
    }
    if (st.st_size < JREC)
        goto out;
    if (!pread_all(fd, rec, JREC, 0)) {
        r = -1;
        goto out;
    }
    if (memcmp(rec, jmagic, 8) != 0 || rdle64(rec + 56) != cksum(rec, 56) ||
        rdle64(rec + 24) != (uint64_t)st.st_size - JREC)
        goto out;   /* incomplete */
    size_t len = (size_t)rdle64(rec + 24);
    uint8_t *pl = malloc(len ? len : 1);
    if (!pl) {
        errno = ENOMEM;
        r = -1;
        goto out;
    }
    if (!pread_all(fd, pl, len, JREC)) {
        free(pl);
        r = -1;
        goto out;
    }
    if (cksum(pl, len) != rdle64(rec + 32)) {
        free(pl);
        goto out;
    }
    *payload = pl;
    r = 1;
out:
    {
        int e = errno;
        close(fd);
        errno = e;
    }
    return r;
}

enum gguf_err gguf_recover(const char *path, char *what, size_t cap,
                           struct gguf_diag *d)
{
    struct gguf_diag scratch;
    if (!d)
        d = &scratch;
    d->msg[0] = '\0';
    d->offset = UINT64_MAX;
    if (what && cap)
        what[0] = '\0';
    struct paths p;
    enum gguf_err err = paths_init(path, &p, d);
    if (err == GGUF_E_IO && errno == ENOENT) {
        d->msg[0] = '\0';
        return GGUF_OK;
    }
    if (err)
        return err;

    struct steps s = { 0 };
    struct stat st;
    uint8_t rec[JREC], *pl = NULL;
    int fd = -1;
    if (lstat(p.journal, &st) == 0) {
        int c = read_journal(p.journal, rec, &pl);
        if (c < 0) {
            err = io_fail(d, "reading the journal", errno);
            goto out;
        }
        if (c == 0) {
            step(&s, "removing an incomplete journal");
            if (unlink(p.journal) != 0) {
                err = io_fail(d, "removing an incomplete journal", errno);
                goto out;
            }
            step(&s, "fsync of the directory");
            if (fsync_dir(p.dir) != 0) {
                err = io_fail(d, "fsync of the directory", errno);
                goto out;
            }
            say(what, cap, "removed the incomplete journal of an interrupted "
                "edit (the model had not been modified)");
        } else {
            uint64_t size = rdle64(rec + 8), lo = rdle64(rec + 16);
            size_t len = (size_t)rdle64(rec + 24);
            fd = open(p.model, O_RDWR | O_CLOEXEC);
            if (fd < 0 || fstat(fd, &st) != 0) {
                err = io_fail(d, "opening the model to roll back an interrupted "
                              "edit", errno);
                goto out;
            }
            if ((uint64_t)st.st_size != size || lo > size || len > size - lo) {
                setd(d, "%s does not belong to the model (it is %llu bytes, the "
                     "journal is for %llu bytes): remove it by hand", p.journal,
                     (unsigned long long)st.st_size, (unsigned long long)size);
                err = GGUF_E_INVAL;
                goto out;
            }
            uint8_t *cur = malloc(len ? len : 1);
            if (!cur) {
                setd(d, "out of memory");
                err = GGUF_E_NOMEM;
                goto out;
            }
            bool same = pread_all(fd, cur, len, lo) && memcmp(cur, pl, len) == 0;
            free(cur);
            if (!same) {
                if (!write_step(&s, "restoring the old header", fd, pl, len, lo)) {
                    err = io_fail(d, "restoring the old header", errno);
                    goto out;
                }
            }
            /* fsync even if the bytes match: they may be cached only. */
            step(&s, "fsync of the model");
            if (fsync(fd) != 0) {
                err = io_fail(d, "fsync of the model", errno);
                goto out;
            }
            step(&s, "removing the journal");
            if (unlink(p.journal) != 0) {
                err = io_fail(d, "removing the journal", errno);
                goto out;
            }
            step(&s, "fsync of the directory");
            if (fsync_dir(p.dir) != 0) {
                err = io_fail(d, "fsync of the directory", errno);
                goto out;
            }
            say(what, cap, same ? "removed the journal of an interrupted edit "
                "(the model had not been modified)" : "rolled back an "
                "interrupted edit (the old header was restored from the journal)");
        }
    }
    if (lstat(p.newf, &st) == 0) {
        step(&s, "removing an unfinished new file");
        if (unlink(p.newf) != 0) {
            err = io_fail(d, "removing an unfinished new file", errno);
            goto out;
        }
        step(&s, "fsync of the directory");
        if (fsync_dir(p.dir) != 0) {
            err = io_fail(d, "fsync of the directory", errno);
            goto out;
        }
        say(what, cap, "removed the unfinished new file of an interrupted "
            "rewrite (the model had not been modified)");
    }
out:
    if (fd >= 0)
        close(fd);
    free(pl);
    paths_free(&p);
    return err;
}

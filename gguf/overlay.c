/* gguf/overlay.c — overlay files and spliced sources (see overlay.h). */
#include "overlay.h"

#include "journal.h"

#include "buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char omagic[8] = { 'G', 'G', 'U', 'F', 'F', 'S', 'O', 'V' };
static const struct gguf_enc oenc = { .big_endian = false, .v1 = false };

/* ---- the spliced source ------------------------------------------------------ */

struct splice {
    struct gguf_source s;
    struct gguf_source *base;
    uint8_t *hdr;
    size_t hdr_len;
    uint64_t base_off;
};

static ssize_t splice_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    struct splice *sp = (struct splice *)s;
    if (off >= s->size)
        return 0;
    if (len > s->size - off)
        len = (size_t)(s->size - off);
    size_t n = 0;
    if (off < sp->hdr_len) {
        n = sp->hdr_len - (size_t)off < len ? sp->hdr_len - (size_t)off : len;
        memcpy(buf, sp->hdr + off, n);
    }
    if (n == len)
        return (ssize_t)n;
    ssize_t r = sp->base->ops->read(sp->base, (char *)buf + n, len - n,
                                    sp->base_off + (off + n - sp->hdr_len));
    if (r < 0)
        return n ? (ssize_t)n : r;
    return (ssize_t)(n + (size_t)r);
}

static void splice_close(struct gguf_source *s)
{
    struct splice *sp = (struct splice *)s;
    free(sp->hdr);
    free(s->name);
    free(s->identity);
    free(sp);
}

/* The new header from memory, then the base's own spans (a remote base's
 * pinned blocks, a local one's descriptor) shifted to where they are in
 * the base. */
static int splice_spans(struct gguf_source *s, uint64_t off, size_t len, struct gguf_span *sp,
                        int max, int *count)
{
    struct splice *spl = (struct splice *)s;
    int n = 0;
    if (off < spl->hdr_len) {
        size_t h = spl->hdr_len - (size_t)off < len ? spl->hdr_len - (size_t)off : len;
        sp[n++] = (struct gguf_span){ .mem = spl->hdr + off, .fd = -1, .len = h };
        off += h;
        len -= h;
    }
    if (len) {
        if (n == max)
            return ENOSPC;
        int m;
        int e = gguf_source_spans(spl->base, spl->base_off + (off - spl->hdr_len), len,
                                  sp + n, max - n, &m);
        if (e)
            return e;
        n += m;
    }
    *count = n;
    return 0;
}

static const struct gguf_source_ops splice_ops = { .read = splice_read, .close = splice_close,
                                                   .spans = splice_spans };

enum gguf_err gguf_splice_source(const uint8_t *hdr, size_t hdr_len,
                                 struct gguf_source *base, uint64_t base_off,
                                 struct gguf_source **out, struct gguf_diag *d)
{
    *out = NULL;
    if (base_off > base->size)
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX,
                             "splice at %llu past the end of %s (%llu bytes)",
                             (unsigned long long)base_off, base->name,
                             (unsigned long long)base->size);
    if (hdr_len > UINT64_MAX - (base->size - base_off))
        return gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "spliced source too large");
    struct splice *sp = calloc(1, sizeof *sp);
    if (!sp)
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    sp->s.ops = &splice_ops;
    sp->s.fd = -1;
    sp->s.below = base;
    sp->s.size = hdr_len + (base->size - base_off);
    sp->base = base;
    sp->hdr_len = hdr_len;
    sp->base_off = base_off;
    sp->s.name = gguf_str_dup_n(base->name, strlen(base->name));
    bool same = hdr_len == 0 && base_off == 0;
    if (same) {
        sp->s.identity = gguf_str_dup_n(base->identity, strlen(base->identity));
    } else {
        char pre[64];
        int n = snprintf(pre, sizeof pre, "overlay:%016llx:",
                         (unsigned long long)(gguf_cksum(hdr, hdr_len) ^ base_off));
        size_t il = strlen(base->identity);
        if ((sp->s.identity = malloc((size_t)n + il + 1))) {
            memcpy(sp->s.identity, pre, (size_t)n);
            memcpy(sp->s.identity + n, base->identity, il + 1);
        }
        if (hdr_len && (sp->hdr = malloc(hdr_len)))
            memcpy(sp->hdr, hdr, hdr_len);
    }
    if (!sp->s.name || !sp->s.identity || (hdr_len && !sp->hdr)) {
        splice_close(&sp->s);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    *out = &sp->s;
    return GGUF_OK;
}

/* ---- overlay files --------------------------------------------------------------- */

void gguf_overlay_free(struct gguf_overlay *ov)
{
    free(ov->identity);
    free(ov->name);
    free(ov->hdr);
    memset(ov, 0, sizeof *ov);
}

uint64_t gguf_overlay_base_data(const struct gguf_file *base_gf)
{
    return base_gf->data_off < base_gf->file_size ? base_gf->data_off : base_gf->file_size;
}

static enum gguf_err bad(struct gguf_diag *d, enum gguf_err e, uint64_t off, const char *what)
{
    return gguf_diag_set(d, e, off, "%s", what);
}

enum gguf_err gguf_overlay_parse(const uint8_t *data, uint64_t size, struct gguf_overlay *ov,
                                 struct gguf_diag *d)
{
    memset(ov, 0, sizeof *ov);
    if (size < GGUF_OVERLAY_REC)
        return gguf_diag_set(d, GGUF_E_MAGIC, 0, "not a gguffs overlay (%llu bytes, shorter "
                             "than its 64-byte record)", (unsigned long long)size);
    const uint8_t *rec = data;
    if (memcmp(rec, omagic, 8) != 0)
        return bad(d, GGUF_E_MAGIC, 0, "not a gguffs overlay (no GGUFFSOV magic)");
    if (gguf_rd64(&oenc, rec + 56) != gguf_cksum(rec, 56))
        return bad(d, GGUF_E_INVAL, 56, "overlay record checksum mismatch (the file is damaged)");
    uint32_t version = gguf_rd32(&oenc, rec + 8);
    uint32_t id_len = gguf_rd32(&oenc, rec + 12);
    uint32_t name_len = gguf_rd32(&oenc, rec + 40);
    uint64_t base_size = gguf_rd64(&oenc, rec + 16);
    uint64_t base_data = gguf_rd64(&oenc, rec + 24);
    uint64_t hdr_len = gguf_rd64(&oenc, rec + 32);
    if (version != GGUF_OVERLAY_VERSION)
        return gguf_diag_set(d, GGUF_E_VERSION, 8, "unsupported overlay version %u "
                             "(supported: %u)", version, GGUF_OVERLAY_VERSION);
    if (id_len == 0 || id_len > GGUF_OVERLAY_ID_MAX)
        return gguf_diag_set(d, GGUF_E_RANGE, 12, "identity length %u out of range (1 to %u)",
                             id_len, GGUF_OVERLAY_ID_MAX);
    if (name_len > GGUF_OVERLAY_NAME_MAX)
        return gguf_diag_set(d, GGUF_E_RANGE, 40, "name length %u out of range (at most %u)",
                             name_len, GGUF_OVERLAY_NAME_MAX);
    if (gguf_rd32(&oenc, rec + 44) != 0)
        return bad(d, GGUF_E_INVAL, 44, "reserved field is not zero");
    if (base_data > base_size)
        return gguf_diag_set(d, GGUF_E_RANGE, 24, "data start %llu past the base's size %llu",
                             (unsigned long long)base_data, (unsigned long long)base_size);
    uint64_t hdr_at = GGUF_OVERLAY_REC + (uint64_t)id_len + name_len;
    if (size < hdr_at || hdr_len != size - hdr_at)
        return gguf_diag_set(d, GGUF_E_RANGE, 32, "header length %llu does not match the "
                             "file's size (%llu bytes)", (unsigned long long)hdr_len,
                             (unsigned long long)size);
    if (hdr_len > UINT64_MAX - (base_size - base_data))
        return bad(d, GGUF_E_RANGE, 32, "header length too large");
    if (gguf_cksum(data + GGUF_OVERLAY_REC, (size_t)(size - GGUF_OVERLAY_REC)) !=
        gguf_rd64(&oenc, rec + 48))
        return bad(d, GGUF_E_INVAL, 48, "overlay checksum mismatch (the file is damaged)");
    const uint8_t *pl = data + GGUF_OVERLAY_REC;
    for (uint32_t i = 0; i < id_len + name_len; i++)
        if (pl[i] < 0x20 || pl[i] > 0x7e)
            return gguf_diag_set(d, GGUF_E_INVAL, GGUF_OVERLAY_REC + i, "%s is not printable "
                                 "ASCII", i < id_len ? "identity" : "name");
    ov->identity = gguf_str_dup_n((const char *)pl, id_len);
    ov->name = gguf_str_dup_n((const char *)pl + id_len, name_len);
    if (hdr_len && (ov->hdr = malloc((size_t)hdr_len)))
        memcpy(ov->hdr, pl + id_len + name_len, (size_t)hdr_len);
    if (!ov->identity || !ov->name || (hdr_len && !ov->hdr)) {
        gguf_overlay_free(ov);
        return bad(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    ov->base_size = base_size;
    ov->base_data = base_data;
    ov->hdr_len = hdr_len;
    ov->hdr_at = hdr_at;
    ov->sum = gguf_rd64(&oenc, rec + 56);
    return GGUF_OK;
}

enum gguf_err gguf_overlay_read(const char *path, struct gguf_overlay *ov,
                                struct gguf_diag *d)
{
    memset(ov, 0, sizeof *ov);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        enum gguf_err err = e == ENOENT ? GGUF_E_NOENT : GGUF_E_IO;
        return gguf_diag_set(d, err, UINT64_MAX, "%s", strerror(e));
    }
    enum gguf_err err;
    uint8_t *data = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err = gguf_io_fail(d, "fstat", errno);
    } else if (!S_ISREG(st.st_mode)) {
        err = bad(d, GGUF_E_IO, UINT64_MAX, "not a regular file");
    } else if ((uint64_t)st.st_size > SIZE_MAX ||
               !(data = malloc(st.st_size ? (size_t)st.st_size : 1))) {
        /* the size is the file's: bounded by what the disk holds */
        err = bad(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    } else if (!gguf_pread_all(fd, data, (size_t)st.st_size, 0)) {
        err = gguf_io_fail(d, "read", errno);
    } else {
        err = gguf_overlay_parse(data, (uint64_t)st.st_size, ov, d);
    }
    free(data);
    close(fd);
    return err;
}

/* A field of a header in the overlay at hdr_at + off. */
static uint64_t at(const struct gguf_overlay *ov, uint64_t off)
{
    return off == UINT64_MAX ? off : ov->hdr_at + off;
}

enum gguf_err gguf_overlay_match(const struct gguf_overlay *ov, const struct gguf_source *base,
                                 const struct gguf_file *bg, struct gguf_file **out,
                                 struct gguf_diag *d)
{
    *out = NULL;
    if (strcmp(ov->identity, base->identity) != 0 || ov->base_size != base->size)
        return gguf_diag_set(d, GGUF_E_INVAL, GGUF_OVERLAY_REC,
                             "overlay made for another model: %.60s (identity %.60s, %llu "
                             "bytes), not %.60s (identity %.60s, %llu bytes)",
                             ov->name, ov->identity, (unsigned long long)ov->base_size,
                             base->name, base->identity, (unsigned long long)base->size);
    if (ov->base_data != gguf_overlay_base_data(bg))
        return gguf_diag_set(d, GGUF_E_INVAL, 24, "data start %llu is not the model's (%llu)",
                             (unsigned long long)ov->base_data,
                             (unsigned long long)gguf_overlay_base_data(bg));
    struct gguf_file *f;
    enum gguf_err e = gguf_parse(ov->hdr, ov->hdr_len, ov->hdr_len + (ov->base_size - ov->base_data),
                                 &f, d, NULL);
    if (e) {
        if (e == GGUF_E_TRUNCATED && d && !d->msg[0])
            gguf_diag_set(d, e, ov->hdr_len, "the header runs past its length");
        if (d)
            d->offset = at(ov, d->offset);
        return e;
    }
    const char *why = NULL;
    uint64_t where = 0;
    if (f->version != bg->version || f->enc.big_endian != bg->enc.big_endian) {
        why = "GGUF version or byte order differs from the model's";
        where = 4;
    } else if (f->alignment != bg->alignment) {
        why = "alignment differs from the model's";
    } else if (f->n_tensors != bg->n_tensors) {
        why = "tensor count differs from the model's";
        where = 8;
    } else if (f->n_tensors &&
               (f->hdr_size - f->tensors[0].info_off != bg->hdr_size - bg->tensors[0].info_off ||
                memcmp(f->hdr + f->tensors[0].info_off, bg->hdr + bg->tensors[0].info_off,
                       (size_t)(f->hdr_size - f->tensors[0].info_off)) != 0)) {
        why = "tensor infos differ from the model's";
        where = f->tensors[0].info_off;
    } else if (f->hdr_size > ov->hdr_len || ov->hdr_len > f->data_off ||
               (gguf_has_tensor_data(f) && ov->hdr_len != f->data_off)) {
        why = "header length does not end where the tensor data starts";
        where = f->hdr_size;
    }
    if (why) {
        gguf_close(f);
        return gguf_diag_set(d, GGUF_E_INVAL, at(ov, where), "%s", why);
    }
    *out = f;
    return GGUF_OK;
}

/* The directory of path, for its fsync. */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return gguf_str_dup_n(".", 1);
    return gguf_str_dup_n(path, slash == path ? 1 : (size_t)(slash - path));
}

enum gguf_err gguf_overlay_write(const char *path, struct gguf_overlay *ov, bool *renamed,
                                 struct gguf_diag *d)
{
    return gguf_overlay_write_locked(path, ov, renamed, NULL, d);
}

enum gguf_err gguf_overlay_write_locked(const char *path, struct gguf_overlay *ov,
                                        bool *renamed, int *lock_fd, struct gguf_diag *d)
{
    if (renamed)
        *renamed = false;
    if (lock_fd)
        *lock_fd = -1;
    size_t id_len = strlen(ov->identity), name_len = strlen(ov->name);
    if (id_len == 0 || id_len > GGUF_OVERLAY_ID_MAX)
        return bad(d, GGUF_E_INVAL, UINT64_MAX, "identity too long for an overlay");
    if (name_len > GGUF_OVERLAY_NAME_MAX)
        name_len = GGUF_OVERLAY_NAME_MAX;    /* for messages only */
    if (ov->hdr_len > SIZE_MAX - GGUF_OVERLAY_REC - id_len - name_len)
        return bad(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    size_t total = GGUF_OVERLAY_REC + id_len + name_len + (size_t)ov->hdr_len;
    uint8_t *buf = calloc(1, total);
    char *tmp = gguf_str_concat(path, GGUF_NEW_SUFFIX);
    char *dir = dir_of(path);
    enum gguf_err err = GGUF_OK;
    int fd = -1;
    if (!buf || !tmp || !dir) {
        err = bad(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
        goto out;
    }
    memcpy(buf, omagic, 8);
    gguf_wr32(&oenc, buf + 8, GGUF_OVERLAY_VERSION);
    gguf_wr32(&oenc, buf + 12, (uint32_t)id_len);
    gguf_wr64(&oenc, buf + 16, ov->base_size);
    gguf_wr64(&oenc, buf + 24, ov->base_data);
    gguf_wr64(&oenc, buf + 32, ov->hdr_len);
    gguf_wr32(&oenc, buf + 40, (uint32_t)name_len);
    memcpy(buf + GGUF_OVERLAY_REC, ov->identity, id_len);
    memcpy(buf + GGUF_OVERLAY_REC + id_len, ov->name, name_len);
    /* the name is for messages: bytes outside printable ASCII become '?' */
    for (size_t i = 0; i < name_len; i++) {
        uint8_t *c = buf + GGUF_OVERLAY_REC + id_len + i;
        if (*c < 0x20 || *c > 0x7e)
            *c = '?';
    }
    for (size_t i = 0; i < id_len; i++)
        if (buf[GGUF_OVERLAY_REC + i] < 0x20 || buf[GGUF_OVERLAY_REC + i] > 0x7e) {
            err = bad(d, GGUF_E_INVAL, UINT64_MAX, "identity is not printable ASCII");
            goto out;
        }
    if (ov->hdr_len)
        memcpy(buf + GGUF_OVERLAY_REC + id_len + name_len, ov->hdr, (size_t)ov->hdr_len);
    gguf_wr64(&oenc, buf + 48, gguf_cksum(buf + GGUF_OVERLAY_REC, total - GGUF_OVERLAY_REC));
    gguf_wr64(&oenc, buf + 56, gguf_cksum(buf, 56));

    struct gguf_steps steps = { 0 };
    gguf_step(&steps, "create new overlay");
    if (unlink(tmp) != 0 && errno != ENOENT) {
        err = gguf_io_fail(d, "removing a leftover new overlay", errno);
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = gguf_io_fail(d, "creating the new overlay", errno);
        goto out;
    }
    /* a new version keeps the mode of the one it replaces */
    struct stat st;
    if (stat(path, &st) == 0 && fchmod(fd, st.st_mode & 07777) != 0) {
        err = gguf_io_fail(d, "fchmod of the new overlay", errno);
        goto out;
    }
    if (!gguf_write_step(&steps, "write new overlay", fd, buf, total, 0)) {
        err = gguf_io_fail(d, "writing the new overlay", errno);
        goto out;
    }
    gguf_step(&steps, "fsync new overlay");
    if (fsync(fd) != 0) {
        err = gguf_io_fail(d, "fsync of the new overlay", errno);
        goto out;
    }
    if (lock_fd) {
        /* locked before its name is the overlay's: never seen unlocked */
        struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
        if (fcntl(fd, F_OFD_SETLK, &l) != 0) {
            err = gguf_io_fail(d, "locking the new overlay", errno);
            goto out;
        }
    } else {
        close(fd);
        fd = -1;
    }
    gguf_step(&steps, "rename overlay");
    if (rename(tmp, path) != 0) {
        err = gguf_io_fail(d, "renaming the new overlay", errno);
        goto out;
    }
    if (renamed)
        *renamed = true;
    if (lock_fd) {
        *lock_fd = fd;
        fd = -1;
    }
    ov->sum = gguf_rd64(&oenc, buf + 56);
    gguf_step(&steps, "fsync directory");
    if (gguf_fsync_dir(dir) != 0) {
        err = gguf_io_fail(d, "fsync of the directory (new version in place)", errno);
        goto out;
    }
out:
    if (fd >= 0)
        close(fd);
    if (err && tmp && !(renamed && *renamed))
        unlink(tmp);
    free(buf);
    free(tmp);
    free(dir);
    return err;
}

int gguf_overlay_sum(const char *path, uint64_t *sum)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    uint8_t rec[GGUF_OVERLAY_REC];
    bool ok = gguf_pread_all(fd, rec, sizeof rec, 0);
    int e = errno;
    close(fd);
    if (!ok) {
        errno = e == EIO ? EINVAL : e;
        return -1;
    }
    if (memcmp(rec, omagic, 8) != 0 || gguf_rd64(&oenc, rec + 56) != gguf_cksum(rec, 56)) {
        errno = EINVAL;
        return -1;
    }
    *sum = gguf_rd64(&oenc, rec + 56);
    return 1;
}

int gguf_overlay_clean(const char *path)
{
    char *tmp = gguf_str_concat(path, GGUF_NEW_SUFFIX);
    if (!tmp) {
        errno = ENOMEM;
        return -1;
    }
    int r = unlink(tmp);
    int e = errno;
    free(tmp);
    if (r != 0 && e == ENOENT)
        return 0;
    errno = e;
    return r;
}

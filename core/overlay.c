/*
 * core/overlay.c — edits of a remote model in a local overlay file
 * (-o overlay=FILE; the file's format and the spliced source are
 * gguf/overlay.h).
 *
 * The remote model is opened once, at mount (the base), and lives until
 * the end: every version of the model (core/state.c) is a gguf_split of its
 * own whose shards borrow base's sources — the first shard through a
 * spliced source that puts the overlay's edited header before the
 * remote's tensor data, the others as they are.  A version's headers are
 * parsed from memory, so building one costs no request.
 *
 * An edit (core/commit.c) builds its header from the current version as a
 * local edit does, writes the whole overlay anew (gguf_overlay_write:
 * new file, fsync, rename, fsync of the directory) and re-reads it: the
 * file on disk is the truth.  A split model's edits go to its first shard,
 * as for local files; its split.* keys cannot change (they tie the shards
 * together).
 */
#include "overlay.h"

#include "gguf/overlay.h"
#include "gguf/split.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

static const char *const split_keys[] = { "split.no", "split.count", "split.tensors.count" };

/* The split.* keys of f and base agree (present in both with the same
 * value, or absent from both). */
static bool same_split_keys(const struct gguf_file *f, const struct gguf_file *base)
{
    for (size_t i = 0; i < sizeof split_keys / sizeof *split_keys; i++) {
        int64_t a, b;
        bool ha = gguf_key_int(f, split_keys[i], &a), hb = gguf_key_int(base, split_keys[i], &b);
        if (ha != hb || (ha && a != b))
            return false;
    }
    return true;
}

/* Shard k of a version: base's shard k borrowed, with its header (the
 * overlay's for shard 0 when ov is not NULL) parsed from memory. */
static enum gguf_err borrow_shard(const struct gguf_split *base, unsigned k,
                                  const struct gguf_overlay *ov, struct gguf_shard *out,
                                  struct gguf_diag *d)
{
    const struct gguf_shard *b = &base->shards[k];
    enum gguf_err e;
    if (!(out->name = dup_str(b->name)))
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    if (ov) {
        e = gguf_overlay_match(ov, b->src, b->gf, &out->gf, d);
        if (!e && base->n > 1 && !same_split_keys(out->gf, b->gf))
            e = gguf_diag_set(d, GGUF_E_INVAL, ov->hdr_at, "the split.* keys differ from "
                              "the first shard's");
        if (!e)
            e = gguf_splice_source(ov->hdr, (size_t)ov->hdr_len, b->src, ov->base_data,
                                   &out->src, d);
        return e;
    }
    e = gguf_parse(b->gf->hdr, b->gf->hdr_size, b->gf->file_size, &out->gf, d, NULL);
    if (!e)
        e = gguf_splice_source(NULL, 0, b->src, 0, &out->src, d);
    return e;
}

enum gguf_err core_overlay_model(const char *path, const struct gguf_split *base,
                                 uint64_t *sum, struct gguf_split **out, struct gguf_diag *d)
{
    *out = NULL;
    struct gguf_overlay ov;
    enum gguf_err e = gguf_overlay_read(path, &ov, d);
    if (e && e != GGUF_E_NOENT)
        return e;
    bool have = e == GGUF_OK;
    struct gguf_split *s = calloc(1, sizeof *s);
    if (s)
        s->shards = calloc(base->n, sizeof *s->shards);
    if (!s || !s->shards) {
        free(s);
        gguf_overlay_free(&ov);
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    s->n = base->n;
    s->given = base->given;
    s->n_tensors = base->n_tensors;
    e = GGUF_OK;
    for (unsigned k = 0; k < s->n && !e; k++)
        e = borrow_shard(base, k, k == 0 && have ? &ov : NULL, &s->shards[k], d);
    if (e) {
        gguf_split_close(s);
        s = NULL;
    } else {
        *sum = have ? ov.sum : 0;
    }
    gguf_overlay_free(&ov);
    *out = s;
    return e;
}

enum gguf_err core_overlay_commit(const char *path, const struct gguf_split *base,
                                  uint64_t *sum, int *lock_fd, const struct gguf_buf *hdr,
                                  struct gguf_diag *d)
{
    const struct gguf_shard *b = &base->shards[0];
    /* a split model's shards are tied by their split.* keys */
    if (base->n > 1) {
        struct gguf_file *f;
        enum gguf_err e = gguf_parse((const uint8_t *)hdr->data, hdr->len,
                                     hdr->len + (b->gf->file_size - gguf_overlay_base_data(b->gf)),
                                     &f, d, NULL);
        if (e)
            return e;
        bool same = same_split_keys(f, b->gf);
        gguf_close(f);
        if (!same)
            return gguf_diag_set(d, GGUF_E_PERM, UINT64_MAX, "the split.* keys of a split "
                                 "model cannot be changed");
    }
    /* Nobody else may have written the overlay since this mount read or
     * wrote it (another mount of the same overlay): its edits would be
     * lost. */
    uint64_t now = 0;
    int r = gguf_overlay_sum(path, &now);
    if (r < 0 || (r == 1 && now != *sum))
        return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "%s: %s", path,
                             r < 0 ? strerror(errno) : "changed by someone else since this "
                             "mount read it (mount again to see it)");
    struct gguf_overlay ov = {
        .identity = b->src->identity, .name = b->src->name,
        .base_size = b->src->size, .base_data = gguf_overlay_base_data(b->gf),
        .hdr = (uint8_t *)hdr->data, .hdr_len = hdr->len,
    };
    bool renamed;
    int nfd = -1;
    enum gguf_err e = gguf_overlay_write_locked(path, &ov, &renamed, &nfd, d);
    if (renamed)
        *sum = ov.sum;
    if (nfd >= 0) {
        /* the new overlay came locked: the mount's lock is on it now */
        if (*lock_fd >= 0)
            close(*lock_fd);
        *lock_fd = nfd;
    }
    if (e && d) {
        char msg[2 * sizeof d->msg];
        snprintf(msg, sizeof msg, "%s: %s", path, d->msg);
        memcpy(d->msg, msg, sizeof d->msg - 1);    /* cut to fit */
        d->msg[sizeof d->msg - 1] = '\0';
    }
    return e;
}

int core_overlay_lock(const char *path, int *lock_fd)
{
    if (*lock_fd >= 0)
        return 0;
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return errno;
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    if (fcntl(fd, F_OFD_SETLK, &l) != 0) {
        int e = errno == EACCES ? EAGAIN : errno;
        close(fd);
        return e;
    }
    *lock_fd = fd;
    return 0;
}

char *core_overlay_path(const char *given, bool writable, char *why, size_t cap)
{
    why[0] = '\0';
    char *path = realpath(given, NULL);
    if (!path && errno == ENOENT) {
        /* not there yet: the first edit creates it, in a directory that
         * must exist */
        const char *slash = strrchr(given, '/');
        const char *base = slash ? slash + 1 : given;
        char *dir = slash ? strndup(given, slash == given ? 1 : (size_t)(slash - given))
                          : strdup(".");
        char *rdir = dir ? realpath(dir, NULL) : NULL;
        if (rdir && *base && strcmp(base, ".") && strcmp(base, "..") &&
            (path = malloc(strlen(rdir) + strlen(base) + 2)))
            sprintf(path, "%s%s%s", rdir, strcmp(rdir, "/") ? "/" : "", base);
        else if (rdir && (!*base || !strcmp(base, ".") || !strcmp(base, "..")))
            errno = EISDIR;
        free(dir);
        free(rdir);
    }
    if (!path) {
        snprintf(why, cap, "%s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(why, cap, "not a regular file");
    } else if (writable) {
        /* edits replace the file by rename: its directory must be writable */
        char *slash = strrchr(path, '/');
        *slash = '\0';
        if (access(slash == path ? "/" : path, W_OK | X_OK) != 0)
            snprintf(why, cap, "its directory is not writable: %s", strerror(errno));
        *slash = '/';
    }
    if (why[0]) {
        free(path);
        return NULL;
    }
    return path;
}

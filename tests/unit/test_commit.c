/*
 * tests/unit/test_commit.c — core/commit.c without FUSE: the checks every
 * edit of meta/ starts with (core_write_check: -o ro, a model or folder
 * gguffs may not write, a read-only file system, a model changed or
 * replaced underneath, another writer of the overlay), the commit of a
 * new header an edit built (core_commit_header: in place or by rewrite,
 * the new version swapped in while the old one lives on for its holders,
 * a builder's error refused and logged, a commit that fails, an overlay's
 * commits), the reserved keys and new key names, and the read-ahead hint
 * (core_edit_ahead).
 *
 * A struct mount is set up as fs/main.c and fs/mount_open.c do (the
 * model's OFD lock, core_open_model, core_state_new, core_follow_init,
 * the path's device and inode as core_under_start records them; no
 * inotify thread, no notify threads: nothing is told of a swap).  New
 * headers are built with gguf/kvedit.h as fs/whandle.c does.  core/'s
 * log lines are captured (core_log_set).  posix_fadvise64 is wrapped
 * (-Wl,--wrap) to count the hints, and core_open_model and
 * core_state_new (as commit.c calls them) to fail on demand; allocations
 * fail above mem_cap (tests/unit/work.h).
 *
 * A model or folder gguffs may not write is made so with the immutable
 * flag (FS_IOC_SETFLAGS: root bypasses permission bits, not that flag),
 * or with chmod when not root; a read-only file system is a read-only
 * bind mount in a mount namespace of the test's own (root only: the case
 * is skipped, and said, elsewhere).
 *
 * Environment: TMPDIR.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/commit.h"
#include "core/follow.h"
#include "core/log.h"
#include "core/model.h"
#include "core/overlay.h"
#include "core/state.h"
#include "core/underneath.h"
#include "gguf/commit.h"
#include "gguf/kvedit.h"
#include "gguf/pad.h"
#include "gguf/split.h"
#include "gguf/types.h"
#include "gguf/value.h"

#include "gb.h"
#include "tmpfiles.h"
#include "work.h"

/* ---- wrapped calls ------------------------------------------------------------------ */

/* posix_fadvise as commit.c calls it (_FILE_OFFSET_BITS=64): counted */
int __real_posix_fadvise64(int fd, off_t off, off_t len, int advice);
int __wrap_posix_fadvise64(int fd, off_t off, off_t len, int advice);
static unsigned fadvised;
static int fadvise_fd;
static off_t fadvise_off, fadvise_len;
static int fadvise_advice;

int __wrap_posix_fadvise64(int fd, off_t off, off_t len, int advice)
{
    fadvised++;
    fadvise_fd = fd;
    fadvise_off = off;
    fadvise_len = len;
    fadvise_advice = advice;
    return __real_posix_fadvise64(fd, off, len, advice);
}

/* The re-open after a commit and the new version's state fail on demand
 * (only commit.c's calls are wrapped: the test's own go straight). */
enum gguf_err __real_core_open_model(const char *path, bool read_only, bool reopen,
                                     const struct remote_opts *remote, struct rcache *rc,
                                     char *note, size_t note_cap, struct gguf_split **out,
                                     struct gguf_diag *d);
enum gguf_err __wrap_core_open_model(const char *path, bool read_only, bool reopen,
                                     const struct remote_opts *remote, struct rcache *rc,
                                     char *note, size_t note_cap, struct gguf_split **out,
                                     struct gguf_diag *d);
int __real_core_state_new(struct mount *fs, struct gguf_split *model, uint64_t gen,
                          struct state **out);
int __wrap_core_state_new(struct mount *fs, struct gguf_split *model, uint64_t gen,
                          struct state **out);
static bool fail_reopen, fail_state;
static const char *reopen_note;     /* the note the re-open gives */

enum gguf_err __wrap_core_open_model(const char *path, bool read_only, bool reopen,
                                     const struct remote_opts *remote, struct rcache *rc,
                                     char *note, size_t note_cap, struct gguf_split **out,
                                     struct gguf_diag *d)
{
    if (fail_reopen) {
        snprintf(d->msg, sizeof d->msg, "%s: injected failure", path);
        d->offset = UINT64_MAX;
        return GGUF_E_IO;
    }
    enum gguf_err e = __real_core_open_model(path, read_only, reopen, remote, rc, note,
                                             note_cap, out, d);
    if (reopen_note && note)
        snprintf(note, note_cap, "%s", reopen_note);
    return e;
}

int __wrap_core_state_new(struct mount *fs, struct gguf_split *model, uint64_t gen,
                          struct state **out)
{
    if (fail_state)
        return ENOMEM;
    return __real_core_state_new(fs, model, gen, out);
}

/* ---- core/'s log lines -------------------------------------------------------------- */

static char logbuf[16384];
static size_t loglen;
static unsigned loglines;

static void capture(int level, const char *fmt, va_list ap)
{
    (void)level;
    if (loglen < sizeof logbuf - 1) {
        int n = vsnprintf(logbuf + loglen, sizeof logbuf - loglen, fmt, ap);
        if (n > 0)
            loglen += (size_t)n < sizeof logbuf - loglen ? (size_t)n : sizeof logbuf - loglen - 1;
    }
    loglines++;
}

static void log_reset(void)
{
    logbuf[0] = '\0';
    loglen = 0;
    loglines = 0;
}

static bool logged(const char *s)
{
    return strstr(logbuf, s) != NULL;
}

/* ---- models ------------------------------------------------------------------------- */

/* The whole file at path (malloc'd, *n bytes). */
static uint8_t *get_file(const char *path, size_t *n)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    uint8_t *p = malloc((size_t)sb.st_size + 1);
    assert_non_null(p);
    assert_int_equal(pread(fd, p, (size_t)sb.st_size, 0), sb.st_size);
    close(fd);
    *n = (size_t)sb.st_size;
    return p;
}

static bool same_file(const char *path, const uint8_t *p, size_t n)
{
    size_t m;
    uint8_t *q = get_file(path, &m);
    bool same = m == n && memcmp(p, q, n) == 0;
    free(q);
    return same;
}

/* A model: general.architecture, llama.context_length (ctx),
 * general.name, general.alignment 32 and, with pad > 0, gguffs.padding of
 * pad zero bytes; one f32 tensor of 4 patterned elements (or none). */
static struct gb model_bytes(uint32_t ctx, const char *name, unsigned pad, bool tensor)
{
    struct gb b = { 0 };
    gb_header(&b, 3, tensor ? 1 : 0, 4 + (pad > 0));
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.context_length", ctx);
    gb_kv_str(&b, "general.name", name);
    gb_kv_u32(&b, "general.alignment", 32);
    if (pad) {
        gb_str(&b, GGUF_KEY_PADDING);
        gb_u32(&b, GGUF_ARRAY);
        gb_u32(&b, GGUF_U8);
        gb_u64(&b, pad);
        for (unsigned i = 0; i < pad; i++)
            gb_u8(&b, 0);
    }
    if (tensor) {
        uint64_t ne[1] = { 4 };
        gb_tensor(&b, "blk.0.w", 1, ne, GGML_T_F32, 0);
        gb_pad(&b, 32);
        for (unsigned i = 0; i < 16; i++)
            gb_u8(&b, (uint8_t)(i + 1));
    }
    return b;
}

static const char *write_model(const char *name, uint32_t ctx, const char *gname,
                               unsigned pad, bool tensor)
{
    const char *p = tpath(name);
    struct gb b = model_bytes(ctx, gname, pad, tensor);
    put_file(p, b.p, b.len);
    free(b.p);
    return p;
}

/* Shard k of a 2-shard split model (the overlay's base): shard 0 holds the
 * metadata; one f32 tensor each. */
static const char *write_shard(unsigned k)
{
    struct gb b = gb_shard(k, 2, 2048, 2);
    char n[64];
    snprintf(n, sizeof n, "s-%05u-of-00002.gguf", k + 1);
    const char *p = tpath(n);
    put_file(p, b.p, b.len);
    free(b.p);
    return p;
}

/* The value of key in gf as text (gguf_render_kv), malloc'd; NULL: no key. */
static char *value_of(const struct gguf_file *gf, const char *key)
{
    int64_t i = gguf_find_key(gf, key, strlen(key));
    if (i < 0)
        return NULL;
    struct gguf_buf b = { 0 };
    assert_int_equal(gguf_render_kv(gf, &gf->kv[i], &b), GGUF_OK);
    while (b.len && b.data[b.len - 1] == '\n')
        b.len--;        /* the rendered text's final newline */
    assert_true(gguf_buf_putc(&b, '\0'));
    return b.data;
}

static void assert_value(const struct gguf_file *gf, const char *key, const char *want)
{
    char *v = value_of(gf, key);
    assert_non_null(v);
    assert_string_equal(v, want);
    free(v);
}

/* The model file at path as a fresh open finds it: key's value. */
static void assert_file_value(const char *path, const char *key, const char *want)
{
    struct gguf_split *m;
    struct gguf_diag d;
    assert_int_equal(__real_core_open_model(path, true, false, NULL, NULL, NULL, 0, &m, &d),
                     GGUF_OK);
    assert_value(m->shards[0].gf, key, want);
    gguf_split_close(m);
}

static uint64_t key_index(const struct state *st, const char *key)
{
    int64_t i = gguf_find_key(st_meta(st), key, strlen(key));
    assert_true(i >= 0);
    return (uint64_t)i;
}

/* ---- a mount, as fs/main.c and fs/mount_open.c set one up --------------------------- */

static size_t mem_base;

/* A local model at path, read-write (its OFD lock taken) unless ro. */
static void mount_local(struct mount *fs, const char *path, bool ro)
{
    core_mount_init(fs);
    fs->model_path = path;
    fs->read_only = ro;
    char *real = realpath(path, NULL);
    assert_non_null(real);
    if (!ro) {
        int fd = open(real, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
        assert_int_equal(fcntl(fd, F_OFD_SETLK, &l), 0);
        fs->lock_fd = fd;
    }
    struct gguf_split *model;
    struct gguf_diag d;
    assert_int_equal(__real_core_open_model(real, ro, false, NULL, NULL, NULL, 0, &model, &d),
                     GGUF_OK);
    assert_int_equal(__real_core_state_new(fs, model, 0, &fs->st), 0);
    fs->model_real = real;
    assert_int_equal(core_follow_init(fs), 0);
    /* as core_under_start records them (its inotify thread is not started) */
    fs->path_dev = fs->st->sig[0].dev;
    fs->path_ino = fs->st->sig[0].ino;
}

/* -o overlay over base (a local split model opened read-only: commit.c
 * never looks at fs->remote once fs->overlay is set, and state.c would
 * take a local source for a remote one). */
static void mount_overlay(struct mount *fs, const char *ov, struct gguf_split *base)
{
    core_mount_init(fs);
    fs->model_path = "https://example.invalid/s-00001-of-00002.gguf";
    fs->overlay = ov;
    fs->base = base;
    int le = core_overlay_lock(ov, &fs->lock_fd);
    assert_true(le == 0 || le == ENOENT || le == EAGAIN);
    struct gguf_split *model;
    struct gguf_diag d;
    assert_int_equal(core_overlay_model(ov, base, &fs->overlay_sum, &model, &d), GGUF_OK);
    assert_int_equal(__real_core_state_new(fs, model, 0, &fs->st), 0);
    fs->model_real = strdup(model->shards[0].name);
    assert_non_null(fs->model_real);
    assert_int_equal(core_follow_init(fs), 0);
    assert_null(fs->follow);
}

static void unmount(struct mount *fs)
{
    core_state_put(fs->st);
    assert_true(glist_empty(&fs->states));  /* every version was dropped */
    core_key_ids_free(&fs->ids);
    core_follow_fini(fs);
    if (!fs->overlay && !fs->read_only && !fs->write_err)
        gguf_commit_end(fs->model_real);
    free((char *)fs->model_real);
    if (fs->lock_fd >= 0)
        close(fs->lock_fd);
    core_mount_fini(fs);
}

/* An edit of meta/key as fs/whandle.c applies it: the new header built
 * from fs->st, committed under commit_mu. */
static int edit(struct mount *fs, const char *key, const char *text)
{
    pthread_mutex_lock(&fs->commit_mu);
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_set(st_meta(fs->st), key_index(fs->st, key), text,
                                      strlen(text), &hdr, &d);
    int r = core_commit_header(fs, e, &hdr, &d, key, "edit");
    pthread_mutex_unlock(&fs->commit_mu);
    return r;
}

static int check(struct mount *fs, const char **why)
{
    pthread_mutex_lock(&fs->commit_mu);
    int r = core_write_check(fs, why);
    pthread_mutex_unlock(&fs->commit_mu);
    return r;
}

static uint64_t edits(const struct mount *fs)
{
    return atomic_load(&fs->edits_in_place) + atomic_load(&fs->edits_cloned) +
           atomic_load(&fs->edits_copied);
}

static int setup(void **state)
{
    (void)state;
    log_reset();
    mem_cap = SIZE_MAX;
    fail_reopen = fail_state = false;
    reopen_note = NULL;
    mem_base = mem_live;
    work_reset();
    return 0;
}

/* nothing leaked: the test's blocks are all freed */
static int teardown(void **state)
{
    (void)state;
    mem_cap = SIZE_MAX;
    assert_int_equal(mem_live, mem_base);
    return 0;
}

/* ---- an edit applied ---------------------------------------------------------------- */

/* In place when the header keeps its size; a rewrite when it outgrows its
 * room (copied with room to spare on ext4, cloned where the file system
 * can), after which a growing edit is in place again.  Each commit makes
 * a new version (gen + 1) that the file re-read shows; a holder of the
 * old one keeps reading it. */
static void edit_applied(void **state)
{
    (void)state;
    const char *p = write_model("m.gguf", 2048, "tiny", 0, true);
    struct mount fs;
    mount_local(&fs, p, false);
    struct state *v0 = core_state_ref(fs.st);
    struct stat sb0;
    assert_int_equal(stat(p, &sb0), 0);
    int lock0 = fs.lock_fd;

    /* the same size: in place */
    const char *why;
    assert_int_equal(check(&fs, &why), 0);
    assert_string_equal(why, "");
    assert_int_equal(edit(&fs, "llama.context_length", "4096"), 0);
    assert_int_equal(fs.edits_in_place, 1);
    assert_int_equal(edits(&fs), 1);
    assert_ptr_not_equal(fs.st, v0);
    assert_int_equal(fs.st->gen, 1);
    assert_value(st_meta(fs.st), "llama.context_length", "4096");
    assert_file_value(p, "llama.context_length", "4096");
    /* the old version, still held, reads as it was */
    assert_int_equal(v0->gen, 0);
    assert_value(st_meta(v0), "llama.context_length", "2048");
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_ino, sb0.st_ino);
    assert_int_equal(fs.lock_fd, lock0);
    assert_int_equal(loglines, 0);

    /* a name that outgrows the header's room: a rewrite, a new file */
    char big[200];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    struct state *v1 = core_state_ref(fs.st);
    assert_int_equal(edit(&fs, "general.name", big), 0);
    assert_int_equal(fs.edits_in_place, 1);
    assert_int_equal(fs.edits_cloned + fs.edits_copied, 1);
    assert_int_equal(fs.st->gen, 2);
    assert_file_value(p, "general.name", big);
    assert_value(st_meta(fs.st), "general.name", big);
    assert_value(st_meta(fs.st), "llama.context_length", "4096");
    assert_int_equal(stat(p, &sb), 0);
    assert_int_not_equal(sb.st_ino, sb0.st_ino);
    assert_int_equal(sb.st_ino, fs.path_ino);     /* not a change underneath */
    /* the lock moved to the new file: another writer is refused there */
    assert_int_not_equal(fs.lock_fd, lock0);
    struct stat lsb;
    assert_int_equal(fstat(fs.lock_fd, &lsb), 0);
    assert_int_equal(lsb.st_ino, sb.st_ino);
    int other = open(p, O_RDWR);
    assert_true(other >= 0);
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    assert_int_equal(fcntl(other, F_OFD_SETLK, &l), -1);
    close(other);
    /* the versions before keep their file and bytes: the tensor's data */
    assert_value(st_meta(v1), "general.name", "tiny");
    uint8_t t[16];
    const struct gguf_file *g0 = st_meta(v0);
    assert_int_equal(pread(v0->model->shards[0].src->fd, t, 16, (off_t)g0->data_off), 16);
    for (unsigned i = 0; i < 16; i++)
        assert_int_equal(t[i], i + 1);
    assert_int_equal(check(&fs, &why), 0);      /* our own writes: no change */

    /* a growing edit within the room the rewrite left: in place */
    char bigger[300];
    memset(bigger, 'y', sizeof bigger - 1);
    bigger[sizeof bigger - 1] = '\0';
    assert_int_equal(edit(&fs, "general.name", bigger), 0);
    assert_int_equal(fs.edits_in_place, 2);
    assert_int_equal(fs.st->gen, 3);
    assert_file_value(p, "general.name", bigger);

    /* a key created, a key deleted (whandle.c's builders) */
    pthread_mutex_lock(&fs.commit_mu);
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_create(st_meta(fs.st), "general.license", 15, NULL, "mit", 3,
                                         &hdr, &d);
    assert_int_equal(core_commit_header(&fs, e, &hdr, &d, "general.license", "edit"), 0);
    e = gguf_kvedit_delete(st_meta(fs.st), key_index(fs.st, "general.name"), &hdr, &d);
    assert_int_equal(core_commit_header(&fs, e, &hdr, &d, "general.name", "delete"), 0);
    pthread_mutex_unlock(&fs.commit_mu);
    assert_int_equal(fs.st->gen, 5);
    assert_file_value(p, "general.license", "mit");
    assert_null(value_of(st_meta(fs.st), "general.name"));
    assert_int_equal(loglines, 0);
    assert_int_equal(fs.under_refused, 0);
    assert_int_equal(atomic_load(&fs.under), 0);

    core_state_put(v1);
    core_state_put(v0);
    unmount(&fs);
    unlink(p);
}

/* A builder's error: refused, logged with the key and the reason, nothing
 * changed; the header (whatever it held) freed. */
static void edit_refused(void **state)
{
    (void)state;
    const char *p = write_model("r.gguf", 2048, "tiny", 0, true);
    size_t n;
    uint8_t *before = get_file(p, &n);
    struct mount fs;
    mount_local(&fs, p, false);
    struct state *v0 = fs.st;

    assert_int_equal(edit(&fs, "llama.context_length", "lots"), EINVAL);
    assert_true(logged("meta/llama.context_length"));
    assert_true(logged("edit refused (Invalid argument)"));
    assert_true(logged(p));
    assert_int_equal(loglines, 1);
    log_reset();
    assert_int_equal(edit(&fs, "llama.context_length", "99999999999"), EINVAL);
    assert_true(logged("meta/llama.context_length"));
    assert_true(logged("out of range"));
    log_reset();
    assert_int_equal(edit(&fs, "general.alignment", "64"), EPERM);
    assert_true(logged("meta/general.alignment"));
    assert_true(logged("edit refused (Operation not permitted)"));

    /* a header the builder left half made is freed all the same */
    pthread_mutex_lock(&fs.commit_mu);
    struct gguf_buf hdr = { 0 };
    assert_true(gguf_buf_put(&hdr, "junk", 4));
    struct gguf_diag d = { "a reason of the builder's", UINT64_MAX };
    assert_int_equal(core_commit_header(&fs, GGUF_E_EXIST, &hdr, &d, "some.key", "edit"),
                     EEXIST);
    pthread_mutex_unlock(&fs.commit_mu);
    assert_true(logged("meta/some.key"));
    assert_true(logged("a reason of the builder's"));

    assert_ptr_equal(fs.st, v0);
    assert_int_equal(edits(&fs), 0);
    assert_true(same_file(p, before, n));

    /* core_edit_refused: the line, and the errno back */
    log_reset();
    assert_int_equal(core_edit_refused(&fs, "a.b", EROFS, "mounted read-only (-o ro)"), EROFS);
    assert_true(logged(p));
    assert_true(logged("meta/a.b: edit refused (Read-only file system): mounted read-only "
                       "(-o ro)"));
    assert_int_equal(loglines, 1);
    unmount(&fs);
    free(before);
    unlink(p);
}

/* A commit that fails writes nothing: the model as it was; the file is
 * re-read all the same (the file is the truth) and the edit fails with
 * EIO, said in the log. */
static void commit_fails(void **state)
{
    (void)state;
    const char *p = write_model("f.gguf", 2048, "tiny", 0, true);
    size_t n;
    uint8_t *before = get_file(p, &n);
    struct mount fs;
    mount_local(&fs, p, false);
    /* a rewrite's new file cannot be made: a folder in its place */
    char nw[4300];
    snprintf(nw, sizeof nw, "%s%s", fs.model_real, GGUF_NEW_SUFFIX);
    assert_int_equal(mkdir(nw, 0755), 0);
    char big[200];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    int lock0 = fs.lock_fd;
    assert_int_equal(edit(&fs, "general.name", big), EIO);
    assert_true(logged("meta/general.name: edit failed (Input/output error)"));
    assert_true(same_file(p, before, n));
    assert_int_equal(edits(&fs), 0);
    assert_int_equal(fs.lock_fd, lock0);
    assert_value(st_meta(fs.st), "general.name", "tiny");
    assert_int_equal(rmdir(nw), 0);
    /* and the mount edits on */
    const char *why;
    assert_int_equal(check(&fs, &why), 0);
    assert_int_equal(edit(&fs, "general.name", big), 0);
    assert_file_value(p, "general.name", big);
    unmount(&fs);
    free(before);
    unlink(p);
}

/* The file written, its re-open or its new state failing: the edit fails
 * (EIO, or the state's errno), the version shown stays, the window of
 * gguffs' own writes is closed (the next check sees no change
 * underneath), and a note of the re-open is logged. */
static void reopen_fails(void **state)
{
    (void)state;
    const char *p = write_model("o.gguf", 2048, "tiny", 0, true);
    struct mount fs;
    mount_local(&fs, p, false);
    struct state *v0 = fs.st;

    fail_reopen = true;
    assert_int_equal(edit(&fs, "llama.context_length", "4096"), EIO);
    fail_reopen = false;
    assert_true(logged("after edit: "));
    assert_true(logged("injected failure"));
    assert_ptr_equal(fs.st, v0);
    assert_int_equal(fs.edits_in_place, 1);        /* written: the file is the new one */
    assert_file_value(p, "llama.context_length", "4096");
    pthread_mutex_lock(&fs.sig_mu);
    assert_false(fs.own_writing);
    assert_int_equal(fs.own_epoch, 1);
    pthread_mutex_unlock(&fs.sig_mu);
    const char *why;
    assert_int_equal(check(&fs, &why), 0);
    unmount(&fs);

    /* the new version's state cannot be made */
    mount_local(&fs, p, false);
    v0 = fs.st;
    log_reset();
    fail_state = true;
    assert_int_equal(edit(&fs, "llama.context_length", "8192"), ENOMEM);
    fail_state = false;
    assert_ptr_equal(fs.st, v0);
    assert_file_value(p, "llama.context_length", "8192");
    pthread_mutex_lock(&fs.sig_mu);
    assert_false(fs.own_writing);
    pthread_mutex_unlock(&fs.sig_mu);
    assert_int_equal(check(&fs, &why), 0);
    /* the version shown is behind the file: the next edit, built from it,
     * is refused by the commit (the header on disk is not the one
     * indexed), which re-reads the file; the one after goes through */
    log_reset();
    assert_int_equal(edit(&fs, "general.name", "next"), EIO);
    assert_true(logged("meta/general.name: edit failed"));
    assert_int_equal(fs.st->gen, 1);
    assert_value(st_meta(fs.st), "llama.context_length", "8192");
    assert_value(st_meta(fs.st), "general.name", "tiny");
    assert_file_value(p, "general.name", "tiny");
    assert_int_equal(edit(&fs, "general.name", "next"), 0);
    assert_int_equal(fs.st->gen, 2);
    assert_file_value(p, "general.name", "next");
    assert_file_value(p, "llama.context_length", "8192");

    /* the re-open's note (an interrupted edit it finished) is logged */
    reopen_note = "o.gguf: an interrupted edit was finished";
    log_reset();
    unmount(&fs);
    mount_local(&fs, p, false);
    assert_int_equal(edit(&fs, "llama.context_length", "16"), 0);
    assert_true(logged("gguffs: o.gguf: an interrupted edit was finished"));
    unmount(&fs);
    unlink(p);
}

/* ---- may the model be written now? ------------------------------------------------- */

/* Sets or clears the immutable flag of path: true if it could (root, a
 * file system that has the flag). */
static bool immutable(const char *path, bool on)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return false;
    int flags;
    bool ok = ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
    if (ok) {
        flags = on ? flags | FS_IMMUTABLE_FL : flags & ~FS_IMMUTABLE_FL;
        ok = ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
    }
    close(fd);
    return ok;
}

/* Makes path not writable by this process (true), or writable again. */
static bool unwritable(const char *path, bool on, mode_t mode)
{
    if (geteuid() != 0)
        return chmod(path, on ? mode & ~0222 : mode) == 0;
    return immutable(path, on);
}

static void write_check(void **state)
{
    (void)state;
    assert_int_equal(mkdir(tpath("w"), 0755), 0);
    const char *p = write_model("w/m.gguf", 2048, "tiny", 0, true);
    struct mount fs;
    const char *why;

    /* -o ro */
    mount_local(&fs, p, true);
    assert_int_equal(check(&fs, &why), EROFS);
    assert_string_equal(why, "mounted read-only (-o ro)");
    unmount(&fs);

    /* what the mount found: a read-only file system, a model it may not
     * write */
    mount_local(&fs, p, false);
    fs.write_err = EROFS;
    assert_int_equal(check(&fs, &why), EROFS);
    assert_non_null(strstr(why, "read-only at mount"));
    fs.write_err = EACCES;
    assert_int_equal(check(&fs, &why), EACCES);
    assert_non_null(strstr(why, "could not write the model or its folder at mount"));
    fs.write_err = 0;
    assert_int_equal(check(&fs, &why), 0);

    /* since the mount: the model, then its folder, made unwritable.  The
     * model's new mode or flag is a new ctime, which the check underneath
     * takes for another program's change: its signature is taken again (as
     * after a commit of gguffs' own), so that the access check answers */
    if (unwritable(p, true, 0644)) {
        pthread_mutex_lock(&fs.commit_mu);
        core_under_begin(&fs);
        core_under_end(&fs);
        pthread_mutex_unlock(&fs.commit_mu);
        assert_int_equal(check(&fs, &why), EACCES);
        assert_string_equal(why, "the model file is not writable by gguffs");
        assert_true(unwritable(p, false, 0644));
        pthread_mutex_lock(&fs.commit_mu);
        core_under_begin(&fs);
        core_under_end(&fs);
        pthread_mutex_unlock(&fs.commit_mu);
        assert_int_equal(check(&fs, &why), 0);
    } else {
        assert_null(getenv("CI"));
        print_message("write_check: cannot make the model unwritable here: skipped\n");
    }
    if (unwritable(tpath("w"), true, 0755)) {
        assert_int_equal(check(&fs, &why), EACCES);
        assert_non_null(strstr(why, "the model's folder is not writable by gguffs"));
        assert_true(unwritable(tpath("w"), false, 0755));
        assert_int_equal(check(&fs, &why), 0);
    } else {
        assert_null(getenv("CI"));
        print_message("write_check: cannot make the folder unwritable here: skipped\n");
    }
    unmount(&fs);

    /* a path without a folder (never the mount's: model_real is
     * absolute): nothing to look at */
    memset(&fs, 0, sizeof fs);
    fs.model_real = "rel.gguf";
    fs.lock_fd = -1;
    fs.remote = true;            /* no state to check underneath */
    assert_int_equal(core_write_check(&fs, &why), 0);
    assert_string_equal(why, "");

    unlink(p);
    rmdir(tpath("w"));
}

/* A read-only file system (remounted so after the mount): EROFS.  A
 * read-only bind mount of the model's folder, in a mount namespace of
 * this process's own. */
static void write_check_rofs(void **state)
{
    (void)state;
    assert_int_equal(mkdir(tpath("ro"), 0755), 0);
    const char *p = write_model("ro/m.gguf", 2048, "tiny", 0, true);
    struct mount fs;
    mount_local(&fs, p, false);
    const char *why;
    char *dir = strdup(tpath("ro"));
    assert_non_null(dir);
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount(dir, dir, NULL, MS_BIND, NULL) != 0) {
        assert_true(geteuid() != 0);
        print_message("write_check_rofs: no mount namespace here (not root): skipped\n");
    } else {
        assert_int_equal(mount(NULL, dir, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL), 0);
        assert_int_equal(check(&fs, &why), EROFS);
        assert_string_equal(why, "the model's file system is read-only");
        assert_int_equal(umount(dir), 0);
        assert_int_equal(check(&fs, &why), 0);
    }
    unmount(&fs);
    unlink(p);
    rmdir(dir);
    free(dir);
}

/* Another program changed the model (EIO at once, and at the commit
 * between the check and the commit), or replaced it. */
static void changed_underneath(void **state)
{
    (void)state;
    const char *p = write_model("u.gguf", 2048, "tiny", 0, true);
    size_t n;
    uint8_t *before = get_file(p, &n);
    struct mount fs;
    mount_local(&fs, p, false);
    struct state *v0 = fs.st;
    const char *why;
    assert_int_equal(check(&fs, &why), 0);
    /* the edit being built: another program appends to the model */
    pthread_mutex_lock(&fs.commit_mu);
    struct gguf_buf hdr = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_kvedit_set(st_meta(fs.st), key_index(fs.st, "llama.context_length"),
                                      "4096", 4, &hdr, &d);
    assert_int_equal(e, GGUF_OK);
    int fd = open(p, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "!", 1), 1);
    close(fd);
    assert_int_equal(core_commit_header(&fs, e, &hdr, &d, "llama.context_length", "edit"), EIO);
    pthread_mutex_unlock(&fs.commit_mu);
    assert_int_equal(fs.under_refused, 1);
    assert_true(logged("meta/llama.context_length: edit refused (Input/output error)"));
    assert_true(logged("changed underneath"));
    assert_ptr_equal(fs.st, v0);
    assert_int_equal(edits(&fs), 0);
    /* nothing of gguffs' written: the old bytes and the appended one */
    size_t m;
    uint8_t *after = get_file(p, &m);
    assert_int_equal(m, n + 1);
    assert_memory_equal(after, before, n);
    free(after);
    /* and every edit from now on is refused at once */
    assert_int_equal(check(&fs, &why), EIO);
    assert_non_null(strstr(why, "changed underneath by another program"));
    assert_int_equal(fs.under_refused, 2);
    unmount(&fs);

    /* renamed over: replaced */
    put_file(p, before, n);
    mount_local(&fs, p, false);
    const char *q = write_model("u2.gguf", 2048, "other", 0, true);
    assert_int_equal(rename(q, p), 0);
    assert_int_equal(check(&fs, &why), EIO);
    assert_non_null(strstr(why, "replaced underneath"));
    assert_int_equal(fs.under_refused, 1);
    assert_int_equal(edit(&fs, "llama.context_length", "4096"), EIO);
    assert_int_equal(fs.under_refused, 2);
    assert_file_value(p, "general.name", "other");
    unmount(&fs);
    free(before);
    unlink(p);
}

/* ---- -o overlay --------------------------------------------------------------------- */

static void overlay_commits(void **state)
{
    (void)state;
    char *s0 = strdup(write_shard(0));
    assert_non_null(s0);
    size_t n0;
    uint8_t *base0 = get_file(s0, &n0);
    write_shard(1);
    struct gguf_split *base;
    struct gguf_diag d;
    assert_int_equal(__real_core_open_model(s0, true, false, NULL, NULL, NULL, 0, &base, &d),
                     GGUF_OK);
    assert_int_equal(base->n, 2);
    assert_int_equal(mkdir(tpath("ov"), 0755), 0);
    char *ov = strdup(tpath("ov/edits.ov"));
    assert_non_null(ov);

    struct mount fs;
    mount_overlay(&fs, ov, base);
    const char *why;
    assert_int_equal(check(&fs, &why), 0);         /* no file yet: nothing to lock */
    assert_int_equal(fs.lock_fd, -1);
    struct state *v0 = core_state_ref(fs.st);
    assert_int_equal(edit(&fs, "llama.context_length", "4096"), 0);
    assert_int_equal(fs.st->gen, 1);
    assert_value(st_meta(fs.st), "llama.context_length", "4096");
    assert_value(st_meta(v0), "llama.context_length", "2048");
    assert_true(fs.lock_fd >= 0);                   /* the new overlay, locked */
    assert_int_not_equal(fs.overlay_sum, 0);
    assert_int_equal(edits(&fs), 0);                /* the model is not written */
    assert_true(same_file(s0, base0, n0));
    assert_int_equal(check(&fs, &why), 0);
    /* the overlay read anew has the edit */
    struct gguf_split *m;
    uint64_t sum;
    assert_int_equal(core_overlay_model(ov, base, &sum, &m, &d), GGUF_OK);
    assert_value(m->shards[0].gf, "llama.context_length", "4096");
    assert_int_equal(sum, fs.overlay_sum);
    gguf_split_close(m);

    /* a split model's split.* keys: refused, nothing written */
    size_t on;
    uint8_t *ov1 = get_file(ov, &on);
    assert_int_equal(edit(&fs, "split.count", "3"), EPERM);
    assert_true(logged("meta/split.count: edit refused (Operation not permitted)"));
    assert_int_equal(fs.st->gen, 1);
    assert_true(same_file(ov, ov1, on));

    /* a second mount of the same overlay: another gguffs writes it */
    struct mount fs2;
    mount_overlay(&fs2, ov, base);
    assert_int_equal(fs2.lock_fd, -1);
    assert_int_equal(check(&fs2, &why), EBUSY);
    assert_string_equal(why, "another gguffs writes the overlay");
    unmount(&fs2);

    /* the overlay's folder not writable */
    if (unwritable(tpath("ov"), true, 0755)) {
        assert_int_equal(check(&fs, &why), EACCES);
        assert_string_equal(why, "the overlay's folder is not writable by gguffs");
        assert_true(unwritable(tpath("ov"), false, 0755));
    } else {
        assert_null(getenv("CI"));
        print_message("overlay_commits: cannot make the folder unwritable here: skipped\n");
    }

    /* written by someone else since: not written over; the edit fails,
     * the file (the truth) is read back */
    struct gguf_buf hdr = { 0 };
    assert_int_equal(gguf_kvedit_set(st_meta(fs.st), key_index(fs.st, "llama.context_length"),
                                     "777", 3, &hdr, &d), GGUF_OK);
    uint64_t other_sum = fs.overlay_sum;
    int other_lock = -1;
    assert_int_equal(core_overlay_commit(ov, base, &other_sum, &other_lock, &hdr, &d), GGUF_OK);
    gguf_buf_free(&hdr);
    if (other_lock >= 0)
        close(other_lock);
    log_reset();
    assert_int_equal(edit(&fs, "llama.context_length", "8192"), EIO);
    assert_true(logged("meta/llama.context_length: edit failed (Input/output error)"));
    assert_int_equal(fs.st->gen, 2);
    assert_value(st_meta(fs.st), "llama.context_length", "777");
    assert_int_equal(fs.overlay_sum, other_sum);

    /* a damaged overlay: the edit fails, the version shown stays */
    struct state *v2 = fs.st;
    put_file(ov, "not an overlay", 14);
    log_reset();
    assert_int_equal(edit(&fs, "llama.context_length", "1"), EIO);
    assert_true(logged("after edit: "));
    assert_ptr_equal(fs.st, v2);

    /* the hint is for a local model's page cache: nothing here */
    fadvised = 0;
    core_edit_ahead(&fs, fs.st);
    assert_int_equal(fadvised, 0);

    core_state_put(v0);
    unmount(&fs);
    gguf_split_close(base);
    free(ov1);
    free(base0);
    unlink(ov);
    rmdir(tpath("ov"));
    free(ov);
    unlink(s0);
    free(s0);
    unlink(tpath("s-00002-of-00002.gguf"));
}

/* ---- keys, names, the hint ---------------------------------------------------------- */

static void reserved_and_names(void **state)
{
    (void)state;
    const char *p = write_model("k.gguf", 2048, "tiny", 64, true);
    struct mount fs;
    mount_local(&fs, p, true);
    const struct gguf_file *gf = st_meta(fs.st);
    unsigned reserved = 0;
    for (uint64_t i = 0; i < gf->n_kv; i++) {
        const char *k = (const char *)gf->hdr + gf->kv[i].key_off;
        bool want = (gf->kv[i].key_len == 17 && memcmp(k, "general.alignment", 17) == 0) ||
                    (gf->kv[i].key_len == 14 && memcmp(k, GGUF_KEY_PADDING, 14) == 0);
        assert_int_equal(core_key_is_reserved(gf, i), want);
        reserved += want;
    }
    assert_int_equal(reserved, 2);
    assert_true(core_key_is_reserved(gf, key_index(fs.st, "general.alignment")));
    assert_true(core_key_is_reserved(gf, key_index(fs.st, GGUF_KEY_PADDING)));
    assert_false(core_key_is_reserved(gf, key_index(fs.st, "general.name")));
    unmount(&fs);
    unlink(p);

    assert_true(core_key_name_new("general.license", 15));
    assert_true(core_key_name_new("a.b_2.c", 7));
    assert_true(core_key_name_new("general.license-and-more", 15));    /* len counts */
    assert_false(core_key_name_new("General.License", 15));
    assert_false(core_key_name_new("a..b", 4));
    assert_false(core_key_name_new("", 0));
    assert_false(core_key_name_new("a.b#2", 5));
    assert_false(core_key_name_new("%zz", 3));
    /* out of memory: not a valid name, nothing leaked */
    mem_cap = 0;
    assert_false(core_key_name_new("general.license", 15));
    mem_cap = SIZE_MAX;
}

static void edit_ahead(void **state)
{
    (void)state;
    const char *p = write_model("a.gguf", 2048, "tiny", 0, true);
    struct mount fs;
    mount_local(&fs, p, false);
    /* (model.c's opens advise too: only the hint's own call is counted) */
    fadvised = 0;
    core_edit_ahead(&fs, fs.st);
    assert_int_equal(fadvised, 1);
    assert_int_equal(fadvise_fd, fs.st->model->shards[0].src->fd);
    assert_int_equal(fadvise_off, 0);
    assert_int_equal(fadvise_len, (off_t)st_meta(fs.st)->data_off);
    assert_int_equal(fadvise_advice, POSIX_FADV_WILLNEED);
    /* an old version's own file */
    struct state *v0 = core_state_ref(fs.st);
    assert_int_equal(edit(&fs, "llama.context_length", "1"), 0);
    fadvised = 0;
    core_edit_ahead(&fs, v0);
    assert_int_equal(fadvised, 1);
    assert_int_equal(fadvise_fd, v0->model->shards[0].src->fd);
    core_state_put(v0);
    unmount(&fs);
    unlink(p);

    /* a model without tensor data: the whole file */
    p = write_model("a0.gguf", 2048, "tiny", 0, false);
    mount_local(&fs, p, true);
    fadvised = 0;
    core_edit_ahead(&fs, fs.st);
    assert_int_equal(fadvised, 1);
    assert_int_equal(fadvise_len, (off_t)st_meta(fs.st)->file_size);
    unmount(&fs);
    unlink(p);
}

/* ---- out of memory ------------------------------------------------------------------ */

/* Every allocation above the cap fails, for caps from 0 up until the
 * edit goes through: the edit fails (ENOMEM or EIO, said) or is applied
 * whole; a failed one leaves the version shown, the file old or new
 * (never torn), and nothing leaked. */
static void out_of_memory(void **state)
{
    (void)state;
    char big[200];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int growing = 0; growing < 2; growing++) {
        const char *text = growing ? big : "4096";
        const char *key = growing ? "general.name" : "llama.context_length";
        const char *old = growing ? "tiny" : "2048";
        unsigned failed = 0, swapped = 0;
        bool applied = false;
        for (size_t cap = 0; !applied; cap = cap < 64 ? cap + 8 : cap + cap / 8) {
            assert_true(cap < ((size_t)64 << 20));
            const char *p = write_model("n.gguf", 2048, "tiny", 0, true);
            size_t live0 = mem_live;
            struct mount fs;
            mount_local(&fs, p, false);
            struct state *v0 = fs.st;
            pthread_mutex_lock(&fs.commit_mu);
            struct gguf_buf hdr = { 0 };
            struct gguf_diag d;
            enum gguf_err e = gguf_kvedit_set(st_meta(fs.st), key_index(fs.st, key), text,
                                              strlen(text), &hdr, &d);
            assert_int_equal(e, GGUF_OK);
            log_reset();
            mem_cap = cap;
            int r = core_commit_header(&fs, e, &hdr, &d, key, "edit");
            mem_cap = SIZE_MAX;
            pthread_mutex_unlock(&fs.commit_mu);
            char *now = NULL;
            struct gguf_split *m;
            assert_int_equal(__real_core_open_model(p, true, false, NULL, NULL, NULL, 0, &m,
                                                    &d), GGUF_OK);
            now = value_of(m->shards[0].gf, key);
            gguf_split_close(m);
            if (r == 0) {
                applied = true;
                assert_int_equal(fs.st->gen, 1);
                assert_string_equal(now, text);
                assert_value(st_meta(fs.st), key, text);
            } else {
                failed++;
                assert_true(r == ENOMEM || r == EIO);
                assert_true(loglines > 0);
                assert_true(strcmp(now, old) == 0 || strcmp(now, text) == 0);
                /* the version shown stays, or is the file re-read (a
                 * commit that failed: the old bytes, a new version) */
                if (fs.st != v0) {
                    swapped++;
                    assert_int_equal(r, EIO);
                    assert_int_equal(fs.st->gen, 1);
                    assert_value(st_meta(fs.st), key, now);
                }
            }
            free(now);
            pthread_mutex_lock(&fs.sig_mu);
            assert_false(fs.own_writing);
            pthread_mutex_unlock(&fs.sig_mu);
            unmount(&fs);
            assert_int_equal(mem_live, live0);
            /* no journal of an interrupted edit, no new file left */
            assert_int_not_equal(access(tpath("n.gguf" GGUF_JOURNAL_SUFFIX), F_OK), 0);
            assert_int_not_equal(access(tpath("n.gguf" GGUF_NEW_SUFFIX), F_OK), 0);
            unlink(p);
        }
        assert_true(failed > 0);
        print_message("out_of_memory: %s edit: %u caps failed (%u re-read the file), "
                      "then applied\n", growing ? "a growing" : "an in-place", failed, swapped);
    }
}

/* What a test that failed midway left in tmpdir: made mutable (folders
 * before what they hold), then removed (what they hold first). */
static int mutable_left(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    immutable(path, false);
    return 0;
}

static int remove_left(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ggfs-commit-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    core_log_set(capture);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(edit_applied, setup, teardown),
        cmocka_unit_test_setup_teardown(edit_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(commit_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(reopen_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(write_check, setup, teardown),
        cmocka_unit_test_setup_teardown(changed_underneath, setup, teardown),
        cmocka_unit_test_setup_teardown(overlay_commits, setup, teardown),
        cmocka_unit_test_setup_teardown(reserved_and_names, setup, teardown),
        cmocka_unit_test_setup_teardown(edit_ahead, setup, teardown),
        cmocka_unit_test_setup_teardown(out_of_memory, setup, teardown),
        /* last: it moves the test into a mount namespace of its own */
        cmocka_unit_test_setup_teardown(write_check_rofs, setup, teardown),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    core_log_set(NULL);
    if (geteuid() == 0)
        nftw(tmpdir, mutable_left, 16, FTW_PHYS);
    nftw(tmpdir, remove_left, 16, FTW_DEPTH | FTW_PHYS);
    return r;
}

/*
 * tests/unit/test_core.c — core/ without a mount: opening a model
 * (core/model.c: a local file or split model, recovering or refusing an
 * interrupted edit, a remote model's shards opened in parallel and wrapped
 * by the block cache), a remote model's overlay (core/overlay.c: its
 * versions, commits, lock and path) and the digests and lines of /hashes
 * (core/digest.c, against xxhsum's and sha256sum's).
 *
 * Remote objects are faked: remote_source_open, remote_source_opened,
 * remote_source_remote and remote_prefix are wrapped (-Wl,--wrap) to serve
 * in-memory shards by URL, counting opens and closes; blocksrc_wrap and
 * cache_thread_start are wrapped to fail on demand.  Allocations fail
 * above mem_cap (tests/unit/work.h).
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/blocksrc.h"
#include "core/digest.h"
#include "core/model.h"
#include "core/overlay.h"
#include "gguf/commit.h"
#include "gguf/journal.h"
#include "gguf/overlay.h"
#include "gguf/split.h"
#include "gguf/types.h"
#include "remote/http.h"
#include "remote/source.h"

#include "gb.h"
#include "tmpfiles.h"
#include "work.h"

/* ---- models ------------------------------------------------------------------------- */

static int64_t ctx_of(const struct gguf_split *m)
{
    int64_t v = -1;
    assert_true(gguf_key_int(m->shards[0].gf, "llama.context_length", &v));
    return v;
}

/* ---- fake remote objects ------------------------------------------------------------ */

#define FAKES 8

struct fake {
    struct gguf_source s;       /* first: the source handed out */
    char url[256];
    struct gb b;
    enum gguf_err fail;         /* what opening it gives (GGUF_OK: opens) */
    bool starve;                /* its failure comes with memory short */
    bool open;
};

static struct fake fakes[FAKES];
static unsigned n_fakes;
static atomic_uint opens, closes, opened_calls, misused;
static bool fail_wrap;          /* blocksrc_wrap fails */
static int threads_left = -1;   /* cache_thread_start fails once spent (-1: never) */
static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fake_cv = PTHREAD_COND_INITIALIZER;
/* Opening this URL waits until another shard's open has begun (another
 * thread's: the opens run in parallel); a hang guard ends the wait. */
static const char *gate_url;
static bool gate_timed_out;

static ssize_t fake_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    const struct fake *f = (const struct fake *)s;
    size_t n = gguf_read_len(s->size, len, off);
    memcpy(buf, f->b.p + off, n);
    return (ssize_t)n;
}

static void fake_close(struct gguf_source *s)
{
    ((struct fake *)s)->open = false;
    atomic_fetch_add(&closes, 1);
}

static const struct gguf_source_ops fake_ops = { .read = fake_read, .close = fake_close };

/* Serves url as the bytes of b (taken), or fails opening it with fail. */
static struct fake *fake_add(const char *url, struct gb b, enum gguf_err fail)
{
    assert_true(n_fakes < FAKES);
    struct fake *f = &fakes[n_fakes++];
    memset(f, 0, sizeof *f);
    snprintf(f->url, sizeof f->url, "%s", url);
    f->b = b;
    f->fail = fail;
    f->s.ops = &fake_ops;
    f->s.size = b.len;
    f->s.name = f->url;
    f->s.identity = f->url;
    f->s.fd = -1;
    return f;
}

/* The shards of a remote split model: shards [0, have) of count. */
static void fake_split(const char *prefix, unsigned have, unsigned count)
{
    for (unsigned k = 0; k < have; k++) {
        char url[256];
        snprintf(url, sizeof url, "%s-%05u-of-%05u.gguf", prefix, k + 1, count);
        fake_add(url, gb_shard(k, count, 2048, count), GGUF_OK);
    }
}

static void fakes_reset(void)
{
    assert_int_equal(atomic_load(&misused), 0);
    for (unsigned i = 0; i < n_fakes; i++) {
        assert_false(fakes[i].open);    /* every source opened was closed */
        free(fakes[i].b.p);
    }
    n_fakes = 0;
    atomic_store(&opens, 0);
    atomic_store(&closes, 0);
    atomic_store(&opened_calls, 0);
    fail_wrap = false;
    threads_left = -1;
    gate_url = NULL;
    gate_timed_out = false;
    mem_cap = SIZE_MAX;
}

enum gguf_err __wrap_remote_source_open(const struct remote_opts *o, struct gguf_source **out,
                                        struct gguf_diag *d);
enum gguf_err __wrap_remote_source_open(const struct remote_opts *o, struct gguf_source **out,
                                        struct gguf_diag *d)
{
    *out = NULL;
    for (unsigned i = 0; i < n_fakes; i++) {
        struct fake *f = &fakes[i];
        if (strcmp(f->url, o->url) != 0)
            continue;
        if (f->fail) {
            if (f->starve)          /* the opener cannot keep the diag */
                __atomic_store_n(&mem_cap, sizeof(struct gguf_diag) - 1, __ATOMIC_RELAXED);
            return gguf_diag_set(d, f->fail, UINT64_MAX, "%s: refused", o->url);
        }
        pthread_mutex_lock(&fake_mu);
        assert_false(f->open);
        f->open = true;
        unsigned mine = atomic_fetch_add(&opens, 1) + 1;
        pthread_cond_broadcast(&fake_cv);
        if (gate_url && strcmp(gate_url, o->url) == 0) {
            struct timespec guard;
            clock_gettime(CLOCK_REALTIME, &guard);
            guard.tv_sec += 60;
            while (atomic_load(&opens) == mine && !gate_timed_out)
                gate_timed_out = pthread_cond_timedwait(&fake_cv, &fake_mu, &guard) != 0;
        }
        pthread_mutex_unlock(&fake_mu);
        *out = &f->s;
        return GGUF_OK;
    }
    return gguf_diag_set(d, GGUF_E_NOENT, UINT64_MAX, "%s: not found", o->url);
}

/* Both are only for a source remote_source_open made: anything else
 * counts as a misuse (misused), which the tests check is none. */
void __wrap_remote_source_opened(struct gguf_source *src);
void __wrap_remote_source_opened(struct gguf_source *src)
{
    if (src && src->ops == &fake_ops)
        atomic_fetch_add(&opened_calls, 1);
    else
        atomic_fetch_add(&misused, 1);
}

/* The remote behind a fake source: the fake itself stands for it. */
struct remote *__wrap_remote_source_remote(struct gguf_source *src);
struct remote *__wrap_remote_source_remote(struct gguf_source *src)
{
    if (src && src->ops == &fake_ops)
        return (struct remote *)src;
    atomic_fetch_add(&misused, 1);
    return NULL;
}

const void *__wrap_remote_prefix(const struct remote *r, size_t *len);
const void *__wrap_remote_prefix(const struct remote *r, size_t *len)
{
    const struct fake *f = (const struct fake *)r;
    *len = 32;
    return f->b.p;
}

enum gguf_err __real_blocksrc_wrap(struct rcache *rc, struct gguf_source *inner,
                                   uint64_t direct_below, const struct blocksrc_disk *disk,
                                   struct gguf_source **out);
enum gguf_err __wrap_blocksrc_wrap(struct rcache *rc, struct gguf_source *inner,
                                   uint64_t direct_below, const struct blocksrc_disk *disk,
                                   struct gguf_source **out);
enum gguf_err __wrap_blocksrc_wrap(struct rcache *rc, struct gguf_source *inner,
                                   uint64_t direct_below, const struct blocksrc_disk *disk,
                                   struct gguf_source **out)
{
    if (fail_wrap) {
        gguf_source_close(inner);
        *out = NULL;
        return GGUF_E_NOMEM;
    }
    return __real_blocksrc_wrap(rc, inner, direct_below, disk, out);
}

int __real_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);
int __wrap_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);
int __wrap_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg)
{
    if (threads_left == 0)
        return EAGAIN;
    if (threads_left > 0)
        threads_left--;
    return __real_cache_thread_start(th, fn, arg);
}

static struct rcache *new_rcache(void)
{
    struct rcache_opts o = { .block_bytes = 4096, .capacity = 1 << 20, .fetchers = 1 };
    struct rcache *rc = rcache_new(&o);
    assert_non_null(rc);
    return rc;
}

static enum gguf_err open_url(const char *url, struct rcache *rc, struct gguf_split **m,
                              struct gguf_diag *d)
{
    struct remote_opts ro = { .url = url };
    return core_open_model(url, true, false, &ro, rc, NULL, 0, m, d);
}

/* Every shard of m reads as its fake, through the block cache when rc. */
static void check_remote_shards(const struct gguf_split *m, bool rc)
{
    for (unsigned k = 0; k < m->n; k++) {
        struct gguf_source *src = m->shards[k].src;
        struct fake *f = (struct fake *)core_remote(src, true);
        assert_non_null(f);
        assert_ptr_equal(rc ? src->below : src, &f->s);
        uint8_t buf[1024];
        assert_true(f->b.len <= sizeof buf);
        assert_int_equal(gguf_source_read_all(src, buf, f->b.len, 0), 0);
        assert_memory_equal(buf, f->b.p, f->b.len);
    }
}

/* ---- core/model.c: local models ----------------------------------------------------- */

static void local_single(void **state)
{
    (void)state;
    struct gb b = gb_shard(0, 1, 2048, 1);
    const char *path = tpath("m.gguf");
    put_file(path, b.p, b.len);
    char note[256] = "x";
    struct gguf_split *m;
    struct gguf_diag d;
    for (int mode = 0; mode < 3; mode++) {
        /* read-write, read-only, and reopened after the mount's own edit */
        assert_int_equal(core_open_model(path, mode == 1, mode == 2, NULL, NULL, note,
                                         sizeof note, &m, &d), GGUF_OK);
        assert_string_equal(note, "");
        assert_int_equal(m->n, 1);
        assert_true(m->shards[0].src->fd >= 0);
        assert_null(core_remote(m->shards[0].src, false));
        assert_int_equal(ctx_of(m), 2048);
        gguf_split_close(m);
    }
    /* no note asked for */
    assert_int_equal(core_open_model(path, false, false, NULL, NULL, NULL, 0, &m, &d), GGUF_OK);
    gguf_split_close(m);
    assert_null(core_remote(NULL, true));
    assert_int_equal(atomic_load(&misused), 0);     /* local: nothing asked of remote/ */
    /* no such file */
    assert_int_not_equal(core_open_model(tpath("none.gguf"), false, false, NULL, NULL, note,
                                         sizeof note, &m, &d), GGUF_OK);
    unlink(path);
    free(b.p);
}

/* An interrupted edit: a rewrite's leftover new file, an in-place edit's
 * journal (refused read-only, rolled back read-write), a journal that
 * cannot be read. */
static void local_recover(void **state)
{
    (void)state;
    struct gb b = gb_shard(0, 1, 2048, 1), nb = gb_shard(0, 1, 4096, 1);
    assert_int_equal(b.len, nb.len);
    const char *path = tpath("m.gguf");
    char newf[4300], jr[4300];
    snprintf(newf, sizeof newf, "%s" GGUF_NEW_SUFFIX, path);
    snprintf(jr, sizeof jr, "%s.gguffs-journal", path);
    put_file(path, b.p, b.len);
    char note[512];
    struct gguf_split *m;
    struct gguf_diag d;

    put_file(newf, "x", 1);
    assert_int_equal(core_open_model(path, false, false, NULL, NULL, note, sizeof note, &m, &d),
                     GGUF_OK);
    gguf_split_close(m);
    assert_non_null(strstr(note, path));
    assert_non_null(strstr(note, "removed the unfinished new file"));
    assert_int_equal(access(newf, F_OK), -1);

    /* a journal of an edit from 2048 to 4096 over a model that holds 2048 */
    size_t jlen;
    struct gguf_jrun run = { 0, b.len };
    uint8_t *j = gguf_journal_build(b.len, 0, b.len, &run, 1, b.p, nb.p, &jlen);
    assert_non_null(j);
    put_file(jr, j, jlen);
    assert_int_equal(core_open_model(path, true, false, NULL, NULL, note, sizeof note, &m, &d),
                     GGUF_E_INTERRUPTED);
    assert_non_null(strstr(d.msg, "without -o ro"));
    assert_string_equal(note, "");
    assert_int_equal(core_open_model(path, false, false, NULL, NULL, note, sizeof note, &m, &d),
                     GGUF_OK);
    assert_int_equal(ctx_of(m), 2048);
    gguf_split_close(m);
    assert_non_null(strstr(note, path));
    free(j);

    /* a journal that cannot be read: the recovery's error */
    unlink(jr);
    assert_int_equal(mkdir(jr, 0755), 0);
    assert_int_not_equal(core_open_model(path, false, false, NULL, NULL, note, sizeof note,
                                         &m, &d), GGUF_OK);
    rmdir(jr);
    unlink(path);
    free(b.p);
    free(nb.p);
}

/* A local split model through its second shard: only the first shard (the
 * one edits go to) is recovered. */
static void local_split(void **state)
{
    (void)state;
    write_split(3);
    char new1[4300], new2[4300];
    snprintf(new1, sizeof new1, "%s" GGUF_NEW_SUFFIX, shard_name(0, 3));
    snprintf(new2, sizeof new2, "%s" GGUF_NEW_SUFFIX, shard_name(1, 3));
    put_file(new1, "x", 1);
    put_file(new2, "x", 1);
    char note[512];
    struct gguf_split *m;
    struct gguf_diag d;
    assert_int_equal(core_open_model(shard_name(1, 3), false, false, NULL, NULL, note,
                                     sizeof note, &m, &d), GGUF_OK);
    assert_int_equal(m->n, 3);
    assert_int_equal(m->given, 1);
    for (unsigned k = 0; k < 3; k++)
        assert_null(core_remote(m->shards[k].src, false));
    gguf_split_close(m);
    assert_non_null(strstr(note, shard_name(0, 3)));
    assert_int_equal(access(new1, F_OK), -1);
    assert_int_equal(access(new2, F_OK), 0);
    unlink(new2);
    remove_split(3);
}

/* ---- core/model.c: remote models ---------------------------------------------------- */

static void remote_single(void **state)
{
    (void)state;
    fake_add("http://h/one.gguf", gb_shard(0, 1, 2048, 1), GGUF_OK);
    struct gguf_split *m;
    struct gguf_diag d;
    /* straight from the remote */
    assert_int_equal(open_url("http://h/one.gguf", NULL, &m, &d), GGUF_OK);
    assert_int_equal(atomic_load(&opened_calls), 1);
    check_remote_shards(m, false);
    gguf_split_close(m);
    /* through the block cache; and an overlay's spliced source over that */
    struct rcache *rc = new_rcache();
    assert_int_equal(open_url("http://h/one.gguf", rc, &m, &d), GGUF_OK);
    check_remote_shards(m, true);
    struct gguf_source *sp;
    assert_int_equal(gguf_splice_source(NULL, 0, m->shards[0].src, 0, &sp, &d), GGUF_OK);
    assert_ptr_equal(core_remote(sp, true), &fakes[0]);
    gguf_source_close(sp);
    gguf_split_close(m);
    /* a name that is one shard of one: opened as one */
    fake_add("http://h/m-00001-of-00001.gguf", gb_shard(0, 1, 2048, 1), GGUF_OK);
    assert_int_equal(open_url("http://h/m-00001-of-00001.gguf", rc, &m, &d), GGUF_OK);
    gguf_split_close(m);
    /* the block cache cannot wrap it: out of memory, nothing left open */
    fail_wrap = true;
    m = (struct gguf_split *)&d;
    assert_int_equal(open_url("http://h/one.gguf", rc, &m, &d), GGUF_E_NOMEM);
    assert_null(m);
    assert_string_equal(d.msg, "out of memory");
    rcache_put(rc);
    assert_int_equal(atomic_load(&opens), atomic_load(&closes));
    fakes_reset();
}

static void remote_split(void **state)
{
    (void)state;
    struct rcache *rc = new_rcache();
    fake_split("http://h/m", 3, 3);
    struct gguf_split *m;
    struct gguf_diag d;
    /* opened in parallel through any shard (the named shard's open waits
     * for another's to begin); then with fewer threads than shards, and
     * with none (the opener opens each itself) */
    const int threads[] = { -1, 1, 0 };
    for (unsigned t = 0; t < 3; t++) {
        threads_left = threads[t];
        gate_url = t == 0 ? "http://h/m-00002-of-00003.gguf" : NULL;
        atomic_store(&opens, 0);
        assert_int_equal(open_url("http://h/m-00002-of-00003.gguf", rc, &m, &d), GGUF_OK);
        assert_false(gate_timed_out);
        assert_int_equal(m->n, 3);
        assert_int_equal(m->given, 1);
        assert_int_equal(atomic_load(&opens), 3);
        check_remote_shards(m, true);
        gguf_split_close(m);
    }
    rcache_put(rc);
    fakes_reset();
}

/* A missing or failing shard: the error of opening them in order, every
 * shard opened closed again. */
static void remote_split_errors(void **state)
{
    (void)state;
    struct gguf_split *m;
    struct gguf_diag d;
    /* four named, three there */
    fake_split("http://h/m", 3, 4);
    assert_int_equal(open_url("http://h/m-00001-of-00004.gguf", NULL, &m, &d), GGUF_E_NOENT);
    assert_non_null(strstr(d.msg, "m-00004-of-00004.gguf"));
    assert_int_equal(atomic_load(&opens), atomic_load(&closes));
    fakes_reset();

    /* the second shard fails: its message */
    fake_split("http://h/m", 3, 3);
    fakes[1].fail = GGUF_E_IO;
    assert_int_equal(open_url("http://h/m-00001-of-00003.gguf", NULL, &m, &d), GGUF_E_IO);
    assert_non_null(strstr(d.msg, "refused"));
    assert_int_equal(atomic_load(&opens), atomic_load(&closes));
    /* and when its message cannot be kept: the error's own text */
    fakes[1].starve = true;
    enum gguf_err e = open_url("http://h/m-00001-of-00003.gguf", NULL, &m, &d);
    mem_cap = SIZE_MAX;
    assert_int_not_equal(e, GGUF_OK);
    assert_int_equal(atomic_load(&opens), atomic_load(&closes));
    fakes_reset();

    /* memory too short to open in parallel: one by one (here, out of
     * memory for the split code as well) */
    fake_split("http://h/m", 2, 2);
    mem_cap = 2 * sizeof(void *) + 8;   /* less than the shards' table */
    e = open_url("http://h/m-00001-of-00002.gguf", NULL, &m, &d);
    mem_cap = SIZE_MAX;
    assert_int_not_equal(e, GGUF_OK);
    assert_int_equal(atomic_load(&opens), atomic_load(&closes));
    fakes_reset();
    /* room for the table but not for a shard's long name */
    char prefix[200];
    memset(prefix, 'a', sizeof prefix);
    memcpy(prefix, "http://h/", 9);
    prefix[sizeof prefix - 1] = '\0';
    fake_split(prefix, 2, 2);
    mem_cap = 150;
    e = open_url(fakes[0].url, NULL, &m, &d);
    mem_cap = SIZE_MAX;
    assert_int_not_equal(e, GGUF_OK);
    assert_int_equal(atomic_load(&opens), atomic_load(&closes));
    fakes_reset();
}

/* ---- core/overlay.c ----------------------------------------------------------------- */

static void overlay_path(void **state)
{
    (void)state;
    char why[256];
    const char *f = tpath("ov");
    /* not there yet, in a directory that is */
    char *p = core_overlay_path(f, true, why, sizeof why);
    assert_non_null(p);
    assert_string_equal(p, f);
    free(p);
    /* there */
    put_file(f, "x", 1);
    p = core_overlay_path(f, false, why, sizeof why);
    assert_string_equal(p, f);
    free(p);
    unlink(f);
    /* relative, in the working directory */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0);
    p = core_overlay_path("rel.ov", true, why, sizeof why);
    assert_string_equal(p, tpath("rel.ov"));
    free(p);
    /* refused: a directory, a name that is no file's, a missing directory */
    assert_null(core_overlay_path(tmpdir, false, why, sizeof why));
    assert_string_equal(why, "not a regular file");
    assert_null(core_overlay_path("..", false, why, sizeof why));
    assert_null(core_overlay_path(tpath("."), false, why, sizeof why));
    assert_null(core_overlay_path(tpath("no/such"), false, why, sizeof why));
    assert_string_equal(why, strerror(ENOENT));
    assert_int_equal(chdir(cwd), 0);
}

static void overlay_lock(void **state)
{
    (void)state;
    const char *f = tpath("ov");
    int fd = -1;
    assert_int_equal(core_overlay_lock(f, &fd), ENOENT);
    assert_int_equal(fd, -1);
    put_file(f, "x", 1);
    assert_int_equal(core_overlay_lock(f, &fd), 0);
    assert_true(fd >= 0);
    int held = fd;
    assert_int_equal(core_overlay_lock(f, &fd), 0);     /* held already */
    assert_int_equal(fd, held);
    int other = -1;                                     /* another writer */
    assert_int_equal(core_overlay_lock(f, &other), EAGAIN);
    assert_int_equal(other, -1);
    close(fd);
    unlink(f);
}

/* The header of shard 0 of a count-shard model with context length ctx
 * (split.count saying count_key), as an edit would make it. */
static struct gguf_buf header_of(unsigned count, uint32_t ctx, uint32_t count_key)
{
    struct gb b = gb_shard(0, count, ctx, count_key);
    size_t hdr = b.len - 16;        /* the tensor data is the last 16 bytes */
    struct gguf_buf h = { 0 };
    assert_true(gguf_buf_put(&h, b.p, hdr));
    free(b.p);
    return h;
}

static void overlay_round_trip(void **state)
{
    (void)state;
    struct gb b = gb_shard(0, 1, 2048, 1);
    put_file(tpath("m.gguf"), b.p, b.len);
    free(b.p);
    struct gguf_split *base, *m;
    struct gguf_diag d;
    assert_int_equal(core_open_model(tpath("m.gguf"), true, false, NULL, NULL, NULL, 0, &base,
                                     &d), GGUF_OK);
    const char *ov = tpath("m.ov");
    uint64_t sum = 7;
    int lock = -1;
    /* no overlay yet: the base's shards, borrowed */
    assert_int_equal(core_overlay_model(ov, base, &sum, &m, &d), GGUF_OK);
    assert_int_equal(sum, 0);
    assert_ptr_equal(m->shards[0].src->below, base->shards[0].src);
    assert_int_equal(ctx_of(m), 2048);
    gguf_split_close(m);
    /* an edit, written and read back; the lock comes with the new file */
    struct gguf_buf h = header_of(1, 4096, 1);
    assert_int_equal(core_overlay_commit(ov, base, &sum, &lock, &h, &d), GGUF_OK);
    assert_int_not_equal(sum, 0);
    assert_true(lock >= 0);
    uint64_t sum1 = sum;
    assert_int_equal(core_overlay_model(ov, base, &sum, &m, &d), GGUF_OK);
    assert_int_equal(sum, sum1);
    assert_int_equal(ctx_of(m), 4096);
    assert_ptr_equal(m->shards[0].src->below, base->shards[0].src);
    gguf_split_close(m);
    /* another edit: the lock moves to the newer file */
    gguf_buf_free(&h);
    h = header_of(1, 8192, 1);
    int old_lock = lock;
    assert_int_equal(core_overlay_commit(ov, base, &sum, &lock, &h, &d), GGUF_OK);
    assert_int_not_equal(sum, sum1);
    assert_true(lock >= 0);
    assert_true(fcntl(old_lock, F_GETFD) == -1 || lock == old_lock);
    /* changed by someone else since: refused, nothing written */
    uint64_t mine = sum;
    sum = 1;
    assert_int_equal(core_overlay_commit(ov, base, &sum, &lock, &h, &d), GGUF_E_IO);
    assert_non_null(strstr(d.msg, "changed by someone else"));
    sum = mine;
    /* a damaged overlay is refused */
    put_file(ov, "not an overlay", 14);
    assert_int_not_equal(core_overlay_model(ov, base, &sum, &m, &d), GGUF_OK);
    assert_int_equal(core_overlay_commit(ov, base, &sum, &lock, &h, &d), GGUF_E_IO);
    unlink(ov);
    close(lock);
    /* an overlay that cannot be written: the message names it */
    const char *gone = tpath("no/m.ov");
    sum = 0;
    lock = -1;
    assert_int_not_equal(core_overlay_commit(gone, base, &sum, &lock, &h, &d), GGUF_OK);
    assert_non_null(strstr(d.msg, gone));
    assert_int_equal(lock, -1);
    /* out of memory building a version */
    mem_cap = 0;
    assert_int_equal(core_overlay_model(ov, base, &sum, &m, &d), GGUF_E_NOMEM);
    mem_cap = SIZE_MAX;
    assert_null(m);
    mem_cap = sizeof(struct gguf_shard) + 8;    /* the tables, not the shard's name */
    assert_int_equal(core_overlay_model(ov, base, &sum, &m, &d), GGUF_E_NOMEM);
    mem_cap = SIZE_MAX;
    assert_null(m);
    gguf_buf_free(&h);
    gguf_split_close(base);
    unlink(tpath("m.gguf"));
}

/* A split model's overlay: its split.* keys cannot change. */
static void overlay_split(void **state)
{
    (void)state;
    write_split(2);
    struct gguf_split *base, *m;
    struct gguf_diag d;
    assert_int_equal(core_open_model(shard_name(0, 2), true, false, NULL, NULL, NULL, 0, &base,
                                     &d), GGUF_OK);
    const char *ov = tpath("s.ov");
    uint64_t sum = 0;
    int lock = -1;
    struct gguf_buf h = header_of(2, 4096, 3);
    assert_int_equal(core_overlay_commit(ov, base, &sum, &lock, &h, &d), GGUF_E_PERM);
    assert_int_equal(access(ov, F_OK), -1);
    gguf_buf_free(&h);
    h = (struct gguf_buf){ 0 };
    assert_true(gguf_buf_put(&h, "GGUF", 4));                   /* no header at all */
    assert_int_not_equal(core_overlay_commit(ov, base, &sum, &lock, &h, &d), GGUF_OK);
    gguf_buf_free(&h);
    h = header_of(2, 4096, 2);
    assert_int_equal(core_overlay_commit(ov, base, &sum, &lock, &h, &d), GGUF_OK);
    gguf_buf_free(&h);
    assert_int_equal(core_overlay_model(ov, base, &sum, &m, &d), GGUF_OK);
    assert_int_equal(m->n, 2);
    assert_int_equal(ctx_of(m), 4096);
    assert_ptr_equal(m->shards[1].src->below, base->shards[1].src);
    gguf_split_close(m);
    /* an overlay written past the check with other split.* keys */
    h = header_of(2, 4096, 3);
    const struct gguf_shard *b = &base->shards[0];
    struct gguf_overlay o = {
        .identity = b->src->identity, .name = b->src->name, .base_size = b->src->size,
        .base_data = gguf_overlay_base_data(b->gf), .hdr = (uint8_t *)h.data,
        .hdr_len = h.len,
    };
    bool renamed;
    assert_int_equal(gguf_overlay_write(ov, &o, &renamed, &d), GGUF_OK);
    assert_int_equal(core_overlay_model(ov, base, &sum, &m, &d), GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "split.* keys differ"));
    gguf_buf_free(&h);
    close(lock);
    unlink(ov);
    gguf_split_close(base);
    remove_split(2);
}

/* ---- core/digest.c ------------------------------------------------------------------ */

/* xxhsum -H64 and sha256sum of "abcdef" */
#define XXH_ABCDEF "fa8afd82c423144d"
#define SHA_ABCDEF "bef57ec7f53a6d40beb640a780a639c83bc29ac8a9816f1fc6c5c6dcd93c4721"

/* A known digest pair: the bytes, fed in pieces of at most piece bytes
 * after a reset, give xxh and sha (hex, without "\n"). */
struct known_hash {
    const char *bytes;
    size_t piece;
    const char *xxh, *sha;
};

static void digests(void **state)
{
    (void)state;
    struct core_hash *h = core_hash_new();
    assert_non_null(h);
    char x[CORE_XXH64_HEX], sh[CORE_SHA256_HEX];
    /* no bytes; "abc" in one piece; "abcdef" in two, each after a reset */
    static const struct known_hash known[] = {
        { "", 1, "ef46db3751d8e999",
          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
        { "abc", 3, "44bc2cf5ad770999",
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
        { "abcdef", 3, XXH_ABCDEF, SHA_ABCDEF },
    };
    for (size_t k = 0; k < sizeof known / sizeof *known; k++) {
        assert_int_equal(core_hash_reset(h), 0);
        size_t len = strlen(known[k].bytes);
        for (size_t at = 0, n; at < len; at += n) {
            n = len - at < known[k].piece ? len - at : known[k].piece;
            assert_int_equal(core_hash_update(h, known[k].bytes + at, n), 0);
        }
        assert_int_equal(core_hash_hex(h, x, sh), 0);
        assert_memory_equal(x, known[k].xxh, 16);
        assert_memory_equal(sh, known[k].sha, 64);
        assert_true(x[16] == '\n' && sh[64] == '\n');
    }
    core_hash_free(h);
    core_hash_free(NULL);
    /* out of memory: no state */
    mem_cap = 0;
    assert_null(core_hash_new());
    mem_cap = SIZE_MAX;

    /* the lines, each as long as said beforehand */
    struct gguf_buf b = { 0 };
    core_hash_line(&b, "xxh64", x, sizeof x, "blk.0.w", 7);
    assert_int_equal(b.len, core_hash_line_len(CORE_XXH64_HEX, true, 7));
    size_t first = b.len;
    core_hash_line(&b, "sha256", sh, sizeof sh, NULL, 0);
    assert_int_equal(b.len - first, core_hash_line_len(CORE_SHA256_HEX, false, 0));
    assert_true(gguf_buf_putc(&b, '\0'));
    assert_string_equal(b.data, "xxh64     " XXH_ABCDEF "  model.gguf:blk.0.w\n"
                        "sha256    " SHA_ABCDEF "  model.gguf\n");
    gguf_buf_free(&b);
    /* a name is what comes before a NUL */
    assert_int_equal(core_hash_name_len("a\0b", 3), 1);
    assert_int_equal(core_hash_name_len("abc", 3), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(local_single),
        cmocka_unit_test(local_recover),
        cmocka_unit_test(local_split),
        cmocka_unit_test(remote_single),
        cmocka_unit_test(remote_split),
        cmocka_unit_test(remote_split_errors),
        cmocka_unit_test(overlay_path),
        cmocka_unit_test(overlay_lock),
        cmocka_unit_test(overlay_round_trip),
        cmocka_unit_test(overlay_split),
        cmocka_unit_test(digests),
    };
    /* a long name: a shard's name is longer than the tables of a version */
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/gguffs-core-with-a-long-enough-name-XXXXXX",
             t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir))
        return 1;
    work_reset();
    int failed = cmocka_run_group_tests_name("core", tests, NULL, NULL);
    return rmdir(tmpdir) == 0 ? failed : 1;
}

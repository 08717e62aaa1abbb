/*
 * tests/unit/test_underneath.c — a local model changed underneath a mount
 * (core/underneath.c) and a read-only mount following the edits of a
 * read-write one (core/follow.c), without FUSE: struct mount set up as
 * fs/main.c and fs/mount_open.c do, models made with gb.h and opened with
 * core_open_model, edits committed as fs/commit.c does (gguf_commit
 * between core_under_begin/core_follow_begin and core_under_end/
 * core_follow_end).
 *
 * Files are changed as another program would (pwrite into tensor data,
 * ftruncate, chmod, rename over, unlink); before a change that keeps the
 * size, the test waits until the clock has moved past the file's times
 * (tick_past), so that the change is visible to fstat, as it is to a
 * mount in practice (a change in the same timestamp tick is the race
 * underneath.c documents).
 *
 * Wrapped (-Wl,--wrap): core_remote, remote_error_at and remote_changed
 * (a fake remote for core_source_failed); core_sig_take (fails, or runs
 * a hook between a check's two looks: a commit of gguffs' own beginning
 * or ending there); poll (counted, so that a test waits for the inotify
 * thread to come back to it; it fails or returns EINTR on demand),
 * inotify_add_watch (counted: the thread watches a rewrite's new file)
 * and core_follow_update (counted: the thread has checked); cache_thread_start,
 * core_state_new and core_open_model (fail, or run a hook, on demand).
 * Allocations fail above mem_cap (tests/unit/work.h).  Messages are
 * captured with core_log_set.
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
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/follow.h"
#include "core/log.h"
#include "core/model.h"
#include "core/state.h"
#include "core/underneath.h"
#include "gguf/commit.h"
#include "gguf/split.h"
#include "gguf/types.h"
#include "remote/http.h"

#include "gb.h"
#include "tmpfiles.h"
#include "work.h"

/* ---- captured messages -------------------------------------------------------------- */

#define LOGS 64
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char logs[LOGS][1024];
static unsigned n_logs;

static void log_fn(int level, const char *fmt, va_list ap)
{
    (void)level;
    pthread_mutex_lock(&log_mu);
    if (n_logs < LOGS)
        vsnprintf(logs[n_logs++], sizeof logs[0], fmt, ap);
    pthread_mutex_unlock(&log_mu);
}

/* Lines logged that contain s. */
static unsigned logged(const char *s)
{
    unsigned k = 0;
    pthread_mutex_lock(&log_mu);
    for (unsigned i = 0; i < n_logs; i++)
        k += strstr(logs[i], s) != NULL;
    pthread_mutex_unlock(&log_mu);
    return k;
}

static unsigned logs_total(void)
{
    pthread_mutex_lock(&log_mu);
    unsigned n = n_logs;
    pthread_mutex_unlock(&log_mu);
    return n;
}

/* ---- wrapped calls ------------------------------------------------------------------ */

/* What the inotify thread did, for a test to wait on: its polls and its
 * calls of core_follow_update (after each check). */
static pthread_mutex_t ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ev_cv = PTHREAD_COND_INITIALIZER;
static atomic_uint polls, updates;
static atomic_int poll_eintr, poll_ready, poll_fail;   /* the next polls do that */

static void ev_signal(atomic_uint *count)
{
    pthread_mutex_lock(&ev_mu);
    atomic_fetch_add(count, 1);
    pthread_cond_broadcast(&ev_cv);
    pthread_mutex_unlock(&ev_mu);
}

/* Waits (under ev_mu, woken by the thread's polls, watches and updates)
 * until cond(arg); half a minute is the hang guard.  Whether it holds. */
static bool wait_for(bool (*cond)(void *), void *arg)
{
    struct timespec guard;
    clock_gettime(CLOCK_REALTIME, &guard);
    guard.tv_sec += 30;
    pthread_mutex_lock(&ev_mu);
    bool ok;
    while (!(ok = cond(arg)))
        if (pthread_cond_timedwait(&ev_cv, &ev_mu, &guard) == ETIMEDOUT) {
            ok = cond(arg);
            break;
        }
    pthread_mutex_unlock(&ev_mu);
    return ok;
}

static bool polls_reach(void *arg)
{
    return atomic_load(&polls) >= *(unsigned *)arg;
}

/* The thread came back to poll n times in all. */
static void wait_polls(unsigned n)
{
    assert_true(wait_for(polls_reach, &n));
}

int __real_poll(struct pollfd *fds, nfds_t n, int timeout);
int __wrap_poll(struct pollfd *fds, nfds_t n, int timeout);
int __wrap_poll(struct pollfd *fds, nfds_t n, int timeout)
{
    ev_signal(&polls);
    if (atomic_load(&poll_eintr) > 0) {
        atomic_fetch_sub(&poll_eintr, 1);
        errno = EINTR;
        return -1;
    }
    if (atomic_load(&poll_fail) > 0) {
        atomic_fetch_sub(&poll_fail, 1);
        errno = EBADF;
        return -1;
    }
    if (atomic_load(&poll_ready) > 0 && n == 2) {
        /* says the inotify descriptor has events when it has none */
        atomic_fetch_sub(&poll_ready, 1);
        fds[0].revents = POLLIN;
        fds[1].revents = 0;
        return 1;
    }
    return __real_poll(fds, n, timeout);
}

int __real_core_follow_update(struct mount *fs);
int __wrap_core_follow_update(struct mount *fs);
int __wrap_core_follow_update(struct mount *fs)
{
    int r = __real_core_follow_update(fs);
    ev_signal(&updates);
    return r;
}

/* inotify_add_watch calls done (the thread's rewatch among them) */
static atomic_uint watches;

int __real_inotify_add_watch(int fd, const char *path, uint32_t mask);
int __wrap_inotify_add_watch(int fd, const char *path, uint32_t mask);
int __wrap_inotify_add_watch(int fd, const char *path, uint32_t mask)
{
    int r = __real_inotify_add_watch(fd, path, mask);
    ev_signal(&watches);
    return r;
}

static atomic_bool fail_thread;     /* cache_thread_start fails */

int __real_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);
int __wrap_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);
int __wrap_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg)
{
    if (atomic_load(&fail_thread))
        return EAGAIN;
    return __real_cache_thread_start(th, fn, arg);
}

/* core_sig_take (called by underneath.c and follow.c): fails sig_fail
 * times, or runs sig_hook(sig_hook_fs) after its fstat sig_hook_n times
 * (not within the hook itself). */
static int sig_fail;
static void (*sig_hook)(struct mount *);
static struct mount *sig_hook_fs;
static int sig_hook_n;
static bool in_hook;

bool __real_core_sig_take(int fd, struct fsig *out);
bool __wrap_core_sig_take(int fd, struct fsig *out);
bool __wrap_core_sig_take(int fd, struct fsig *out)
{
    if (sig_fail > 0) {
        sig_fail--;
        return false;
    }
    bool r = __real_core_sig_take(fd, out);
    if (sig_hook && sig_hook_n > 0 && !in_hook) {
        sig_hook_n--;
        in_hook = true;
        sig_hook(sig_hook_fs);
        in_hook = false;
    }
    return r;
}

/* core_state_new fails (follow.c's adopt) when fail_state_new */
static bool fail_state_new;

int __real_core_state_new(struct mount *fs, struct gguf_split *model, uint64_t gen,
                          struct state **out);
int __wrap_core_state_new(struct mount *fs, struct gguf_split *model, uint64_t gen,
                          struct state **out);
int __wrap_core_state_new(struct mount *fs, struct gguf_split *model, uint64_t gen,
                          struct state **out)
{
    if (fail_state_new) {
        *out = NULL;
        return ENOMEM;
    }
    return __real_core_state_new(fs, model, gen, out);
}

/* core_open_model runs open_hook once after opening (follow.c's adopt:
 * something happening between its two reads of the records) */
static void (*open_hook)(void);

enum gguf_err __real_core_open_model(const char *path, bool read_only, bool reopen,
                                     const struct remote_opts *remote, struct rcache *rc,
                                     char *note, size_t note_cap, struct gguf_split **out,
                                     struct gguf_diag *d);
enum gguf_err __wrap_core_open_model(const char *path, bool read_only, bool reopen,
                                     const struct remote_opts *remote, struct rcache *rc,
                                     char *note, size_t note_cap, struct gguf_split **out,
                                     struct gguf_diag *d);
enum gguf_err __wrap_core_open_model(const char *path, bool read_only, bool reopen,
                                     const struct remote_opts *remote, struct rcache *rc,
                                     char *note, size_t note_cap, struct gguf_split **out,
                                     struct gguf_diag *d)
{
    enum gguf_err e = __real_core_open_model(path, read_only, reopen, remote, rc, note,
                                             note_cap, out, d);
    void (*h)(void) = open_hook;
    open_hook = NULL;
    if (h)
        h();
    return e;
}

/* A fake remote behind every source of a mount with fs->remote. */
static char fake_remote_obj;
static bool fake_has_error, fake_changed;
static unsigned error_at_calls;

struct remote *__real_core_remote(struct gguf_source *src, bool remote);
struct remote *__wrap_core_remote(struct gguf_source *src, bool remote);
struct remote *__wrap_core_remote(struct gguf_source *src, bool remote)
{
    if (remote)
        return (struct remote *)&fake_remote_obj;
    return __real_core_remote(src, remote);
}

bool __wrap_remote_error_at(struct remote *r, uint64_t off, uint64_t len, struct gguf_diag *out);
bool __wrap_remote_error_at(struct remote *r, uint64_t off, uint64_t len, struct gguf_diag *out)
{
    assert_ptr_equal(r, &fake_remote_obj);
    error_at_calls++;
    if (!fake_has_error)
        return false;
    snprintf(out->msg, sizeof out->msg, "https://h.example/m.gguf: bytes %llu-%llu: HTTP 503",
             (unsigned long long)off, (unsigned long long)(off + len - 1));
    out->offset = off;
    return true;
}

bool __wrap_remote_changed(const struct remote *r);
bool __wrap_remote_changed(const struct remote *r)
{
    assert_ptr_equal(r, &fake_remote_obj);
    return fake_changed;
}

/* ---- models ------------------------------------------------------------------------- */

/* A model: general.architecture, llama.context_length ctx, and, for a
 * longer header (an edit that rewrites), general.name of name_len bytes;
 * n_tensors f32 tensors "blk.J.w" of ne elements, each patterned; extra
 * bytes after the data.  *doff: the data offset. */
static struct gb model_bytes(uint32_t ctx, unsigned name_len, unsigned n_tensors, uint64_t ne,
                             unsigned extra, uint64_t *doff)
{
    struct gb b = { 0 };
    gb_header(&b, 3, n_tensors, name_len ? 3 : 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.context_length", ctx);
    if (name_len) {
        char name[256];
        assert_true(name_len < sizeof name);
        memset(name, 'x', name_len);
        name[name_len] = '\0';
        gb_kv_str(&b, "general.name", name);
    }
    for (unsigned j = 0; j < n_tensors; j++) {
        char tn[32];
        snprintf(tn, sizeof tn, "blk.%u.w", j);
        uint64_t dims[1] = { ne };
        gb_tensor(&b, tn, 1, dims, GGML_T_F32, j * ((ne * 4 + 31) / 32 * 32));
    }
    gb_pad(&b, 32);
    if (doff)
        *doff = b.len;
    for (unsigned j = 0; j < n_tensors; j++) {
        for (uint64_t i = 0; i < ne * 4; i++)
            gb_u8(&b, (uint8_t)(j * 16 + i + 1));
        gb_pad(&b, 32);
    }
    for (unsigned i = 0; i < extra; i++)
        gb_u8(&b, 0xee);
    return b;
}

static void put_model(const char *path, uint32_t ctx, unsigned name_len)
{
    struct gb b = model_bytes(ctx, name_len, 1, 4, 0, NULL);
    put_file(path, b.p, b.len);
    free(b.p);
}

/* Waits until the clock is past the file's mtime and ctime, so that a
 * change made now gives it other times (a few milliseconds: the clock's
 * tick; a minute is the hang guard). */
static void tick_past(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    for (int i = 0; i < 60000; i++) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME_COARSE, &now);
        bool past = true;
        const struct timespec *t[2] = { &sb.st_mtim, &sb.st_ctim };
        for (int k = 0; k < 2; k++)
            past = past && (now.tv_sec > t[k]->tv_sec ||
                            (now.tv_sec == t[k]->tv_sec && now.tv_nsec > t[k]->tv_nsec));
        if (past)
            return;
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
    fail_msg("the clock did not move past %s's times", path);
}

/* Another program writes n bytes at off into the file (in place). */
static void scribble(const char *path, uint64_t off, size_t n)
{
    tick_past(path);
    uint8_t junk[64];
    assert_true(n <= sizeof junk);
    memset(junk, 0x5a, n);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, junk, n, (off_t)off), (ssize_t)n);
    close(fd);
}

/* Another program truncates the file open as fd (a descriptor of ours,
 * read-only: reopened for writing through /proc). */
static void truncate_fd(int fd, off_t len)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    int w = open(p, O_WRONLY);
    assert_true(w >= 0);
    assert_int_equal(ftruncate(w, len), 0);
    close(w);
}

/* ---- a mount without FUSE ---------------------------------------------------------- */

/* As fs/main.c and fs/mount_open.c set one up: locks, lists, the model
 * opened (ro: read-only, a follower), version 0, the path's file as
 * core_under_start records it, and the mount's role (core_follow_init). */
static void mount_init(struct mount *fs, const char *path, bool ro)
{
    core_mount_init(fs);
    fs->model_path = path;
    fs->model_real = path;
    fs->read_only = ro;
    struct gguf_split *m;
    struct gguf_diag d;
    assert_int_equal(core_open_model(path, ro, false, NULL, NULL, NULL, 0, &m, &d), GGUF_OK);
    assert_int_equal(core_state_new(fs, m, 0, &fs->st), 0);
    fs->path_dev = fs->st->sig[0].dev;
    fs->path_ino = fs->st->sig[0].ino;
    assert_int_equal(core_follow_init(fs), 0);
}

static void mount_fini(struct mount *fs)
{
    core_under_stop(fs);
    core_follow_fini(fs);
    core_state_put(fs->st);
    /* every version the test held was put: nothing left */
    assert_true(glist_empty(&fs->states));
    core_key_ids_free(&fs->ids);
    core_mount_fini(fs);
}

/* st's signature of shard i, as it is now (under sig_mu). */
static struct fsig sig_of(struct mount *fs, const struct state *st, unsigned i)
{
    pthread_mutex_lock(&fs->sig_mu);
    struct fsig s = st->sig[i];
    pthread_mutex_unlock(&fs->sig_mu);
    return s;
}

static struct fsig sig_of_path(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (struct fsig){ sb.st_dev, sb.st_ino, sb.st_size, sb.st_nlink, sb.st_mtim,
                          sb.st_ctim };
}

static uint64_t gen_now(struct mount *fs)
{
    struct state *st = core_state_current(fs);
    uint64_t g = st->gen;
    core_state_put(st);
    return g;
}

static int64_t ctx_now(struct mount *fs)
{
    struct state *st = core_state_current(fs);
    int64_t v = -1;
    assert_true(gguf_key_int(st_meta(st), "llama.context_length", &v));
    core_state_put(st);
    return v;
}

/* An edit as fs/commit.c commits it: the check, gguffs' own window and
 * the records around gguf_commit of the header of nb (its first doff
 * bytes), the model re-opened, the new version swapped in.  during (may
 * be NULL) runs while the commit is under way (the records locked).
 * Whether it was written in place. */
static bool commit_as_gguffs(struct mount *w, const struct gb *nb, uint64_t doff,
                             void (*during)(struct mount *))
{
    pthread_mutex_lock(&w->commit_mu);
    struct state *old = w->st;
    assert_int_equal(core_under_check(w, old), 0);
    tick_past(w->model_real);
    core_under_begin(w);
    core_follow_begin(w, old);
    if (during)
        during(w);
    bool in_place = false;
    struct gguf_diag d;
    enum gguf_err ce = gguf_commit(w->model_real, st_meta(old), old->model->shards[0].src, nb->p,
                                   doff, &in_place, &d);
    assert_int_equal(ce, GGUF_OK);
    struct gguf_split *m;
    assert_int_equal(core_open_model(w->model_real, false, true, NULL, NULL, NULL, 0, &m, &d),
                     GGUF_OK);
    struct state *ns;
    assert_int_equal(core_state_new(w, m, old->gen + 1, &ns), 0);
    core_under_end(w);
    core_follow_end(w, ns);
    core_state_swap(w, ns);
    core_under_rewatch(w);
    pthread_mutex_unlock(&w->commit_mu);
    return in_place;
}

/* An edit of llama.context_length (the header keeps its size, with a
 * general.name of name_len bytes): in place. */
static void edit_ctx_named(struct mount *w, uint32_t ctx, unsigned name_len)
{
    uint64_t doff;
    struct gb b = model_bytes(ctx, name_len, 1, 4, 0, &doff);
    assert_true(commit_as_gguffs(w, &b, doff, NULL));
    free(b.p);
}

static void edit_ctx(struct mount *w, uint32_t ctx)
{
    edit_ctx_named(w, ctx, 0);
}

/* An edit that adds general.name (a longer header): a rewrite. */
static void edit_name(struct mount *w, unsigned name_len)
{
    uint64_t doff;
    struct gb b = model_bytes((uint32_t)ctx_now(w), name_len, 1, 4, 0, &doff);
    assert_false(commit_as_gguffs(w, &b, doff, NULL));
    free(b.p);
}

/* ---- the records' format, as follow.h describes it ---------------------------------- */

#define HEAD 64
#define REC 144
#define KEEP 8

static void wr64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t fnv(const uint8_t *img, unsigned n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < HEAD + (size_t)n * REC; i++) {
        if (i >= 56 && i < HEAD)
            continue;
        h ^= img[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

struct trec {
    uint64_t seq, kind, doff_before, doff_after;
    struct fsig before, after;
};

static void put_sig(uint8_t *p, const struct fsig *s)
{
    wr64(p, (uint64_t)s->dev);
    wr64(p + 8, (uint64_t)s->ino);
    wr64(p + 16, (uint64_t)s->size);
    wr64(p + 24, (uint64_t)s->mtime.tv_sec);
    wr64(p + 32, (uint64_t)s->mtime.tv_nsec);
    wr64(p + 40, (uint64_t)s->ctime.tv_sec);
    wr64(p + 48, (uint64_t)s->ctime.tv_nsec);
}

static void get_sig(const uint8_t *p, struct fsig *s)
{
    memset(s, 0, sizeof *s);
    s->dev = (dev_t)rd64(p);
    s->ino = (ino_t)rd64(p + 8);
    s->size = (off_t)rd64(p + 16);
    s->mtime.tv_sec = (time_t)rd64(p + 24);
    s->mtime.tv_nsec = (long)rd64(p + 32);
    s->ctime.tv_sec = (time_t)rd64(p + 40);
    s->ctime.tv_nsec = (long)rd64(p + 48);
}

/* The file's bytes for n records (n_field in the header); the checksum
 * right.  Its length. */
static size_t image(uint8_t *img, uint64_t writer, uint64_t seq, uint64_t n_field,
                    const struct trec *r, unsigned n)
{
    memset(img, 0, HEAD + (size_t)n * REC);
    memcpy(img, "GGUFFSE1", 8);
    wr64(img + 8, writer);
    wr64(img + 16, seq);
    wr64(img + 24, n_field);
    for (unsigned i = 0; i < n; i++) {
        uint8_t *p = img + HEAD + (size_t)i * REC;
        wr64(p, r[i].seq);
        wr64(p + 8, r[i].kind);
        wr64(p + 16, r[i].doff_before);
        wr64(p + 24, r[i].doff_after);
        put_sig(p + 32, &r[i].before);
        put_sig(p + 88, &r[i].after);
    }
    wr64(img + 56, fnv(img, n));
    return HEAD + (size_t)n * REC;
}

static void reseal(uint8_t *img, unsigned n)
{
    wr64(img + 56, fnv(img, n));
}

static const char *edits_path(const char *model)
{
    static char p[4200];
    snprintf(p, sizeof p, "%s%s", model, CORE_EDITS_SUFFIX);
    return p;
}

/* A made-up signature: s with its mtime moved by k nanoseconds. */
static struct fsig sig_plus(struct fsig s, long k)
{
    s.mtime.tv_nsec = (s.mtime.tv_nsec + k) % 1000000000;
    s.ctime.tv_nsec = (s.ctime.tv_nsec + k) % 1000000000;
    return s;
}

static bool sig_same(const struct fsig *a, const struct fsig *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

/* The records file of model, decoded by the test: n records into r (at
 * most KEEP); checks the header and the checksum.  Its length. */
static size_t read_records(const char *model, uint64_t *writer, uint64_t *seq, unsigned *n,
                           struct trec *r)
{
    uint8_t img[HEAD + KEEP * REC + 16];
    int fd = open(edits_path(model), O_RDONLY);
    assert_true(fd >= 0);
    ssize_t len = pread(fd, img, sizeof img, 0);
    close(fd);
    assert_true(len >= HEAD);
    assert_memory_equal(img, "GGUFFSE1", 8);
    *writer = rd64(img + 8);
    *seq = rd64(img + 16);
    uint64_t nn = rd64(img + 24);
    assert_true(nn <= KEEP);
    *n = (unsigned)nn;
    for (int i = 32; i < 56; i++)
        assert_int_equal(img[i], 0);        /* zeros */
    assert_int_equal((size_t)len, HEAD + (size_t)nn * REC);
    assert_true(rd64(img + 56) == fnv(img, *n));
    for (unsigned i = 0; i < *n; i++) {
        const uint8_t *p = img + HEAD + (size_t)i * REC;
        r[i].seq = rd64(p);
        r[i].kind = rd64(p + 8);
        r[i].doff_before = rd64(p + 16);
        r[i].doff_after = rd64(p + 24);
        get_sig(p + 32, &r[i].before);
        get_sig(p + 88, &r[i].after);
    }
    return (size_t)len;
}

/* Whether byte 0 of the records file is write-locked by someone. */
static bool records_locked(const char *model)
{
    int fd = open(edits_path(model), O_RDONLY);
    assert_true(fd >= 0);
    struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    assert_int_equal(fcntl(fd, F_OFD_GETLK, &l), 0);
    close(fd);
    return l.l_type != F_UNLCK;
}

/* Takes the lock a writer holds during a commit (an OFD lock of byte 0
 * of the records file, type F_WRLCK or F_RDLCK); the descriptor. */
static int hold_lock(const char *model, short type)
{
    int fd = open(edits_path(model), O_RDWR | O_CREAT, 0644);
    assert_true(fd >= 0);
    struct flock l = { .l_type = type, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    assert_int_equal(fcntl(fd, F_OFD_SETLK, &l), 0);
    return fd;
}

/* ---- fixtures ------------------------------------------------------------------------- */

static const char *model;       /* the model of each test: tpath("m.gguf") */

static void remove_all(void)
{
    const char *names[] = { "m.gguf", "m.gguf" CORE_EDITS_SUFFIX, "m.gguf.gguffs-journal",
                            "m.gguf.gguffs-new", "other.gguf", "unrelated",
                            "m-00001-of-00002.gguf", "m-00002-of-00002.gguf",
                            "m-00001-of-00002.gguf" CORE_EDITS_SUFFIX,
                            "m-00001-of-00002.gguf.gguffs-journal", "target" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *p = tpath(names[i]);
        if (unlink(p) != 0 && errno == EISDIR)
            rmdir(p);
        rmdir(p);
    }
}

static int setup(void **state)
{
    (void)state;
    remove_all();
    model = strdup(tpath("m.gguf"));
    put_model(model, 2048, 0);
    pthread_mutex_lock(&log_mu);
    n_logs = 0;
    pthread_mutex_unlock(&log_mu);
    core_log_set(log_fn);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    core_log_set(NULL);
    sig_fail = 0;
    sig_hook = NULL;
    sig_hook_n = 0;
    fail_state_new = false;
    open_hook = NULL;
    atomic_store(&fail_thread, false);
    atomic_store(&poll_eintr, 0);
    atomic_store(&poll_ready, 0);
    atomic_store(&poll_fail, 0);
    fake_has_error = fake_changed = false;
    error_at_calls = 0;
    mem_cap = SIZE_MAX;
    remove_all();
    free((char *)model);
    return 0;
}

/* ======================================================================================
 * underneath.c
 * ====================================================================================== */

/* Data offset of the fixture's model (tensor bytes lie from there on). */
static uint64_t data_off(struct mount *fs)
{
    return st_meta(fs->st)->data_off;
}

static void test_untouched(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    assert_false(core_follows(&fs));
    assert_null(core_follow_file(&fs));
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(core_under_check(&fs, fs.st), 0);
    /* a shard the model does not have: nothing to check */
    assert_int_equal(core_under_check_shard(&fs, fs.st, 1), 0);
    char line[256] = "x";
    assert_int_equal(core_under_line(&fs, line, sizeof line), 0);
    assert_null(core_under_why(&fs));
    assert_int_equal(atomic_load(&fs.under_eio), 0);
    assert_int_equal(logs_total(), 0);
    mount_fini(&fs);
}

/* A write into the tensor data (same size, same inode): changed, EIO for
 * every check from then on, counted, logged once; info's line and the
 * reason an edit is refused say so. */
static void test_written_in_place(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    scribble(model, data_off(&fs) + 4, 4);
    struct fsig now = sig_of_path(model);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    assert_int_equal(atomic_load(&fs.under), UNDER_CHANGED);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    assert_int_equal(core_under_check(&fs, fs.st), UNDER_CHANGED);
    assert_int_equal(atomic_load(&fs.under_eio), 2);
    assert_int_equal(logged("changed underneath"), 1);
    assert_int_equal(logs_total(), 1);
    assert_non_null(strstr(logs[0], model));

    char want[512], when[64];
    struct tm tm;
    time_t t = now.mtime.tv_sec;
    assert_non_null(gmtime_r(&t, &tm));
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(want, sizeof want, "changed underneath: m.gguf was modified by another program "
             "at %s; tensor data not cached reads EIO, edits are refused; remount to see it\n",
             when);
    char line[512];
    assert_int_equal(core_under_line(&fs, line, sizeof line), strlen(want));
    assert_string_equal(line, want);
    /* cut to the room given, NUL-terminated */
    char small[16];
    assert_int_equal(core_under_line(&fs, small, sizeof small), sizeof small - 1);
    assert_int_equal(strncmp(small, want, sizeof small - 1), 0);
    assert_int_equal(small[sizeof small - 1], '\0');
    assert_int_equal(core_under_line(&fs, line, 0), 0);
    assert_string_equal(core_under_why(&fs),
                        "the model was changed underneath by another program (remount to see it)");
    /* a time gmtime cannot say */
    fs.under_when.tv_sec = (time_t)INT64_MAX;
    assert_true(core_under_line(&fs, line, sizeof line) > 0);
    assert_non_null(strstr(line, " at ?;"));
    mount_fini(&fs);
}

static void test_truncated(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    assert_int_equal(truncate(model, (off_t)data_off(&fs) + 8), 0);
    assert_int_equal(core_under_check(&fs, fs.st), UNDER_CHANGED);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    assert_int_equal(atomic_load(&fs.under_eio), 1);
    assert_int_equal(logged("changed underneath"), 1);
    mount_fini(&fs);
}

/* chmod: only the ctime tells (a write whose mtime was put back looks
 * the same) */
static void test_chmod(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    tick_past(model);
    assert_int_equal(chmod(model, 0600), 0);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    assert_int_equal(atomic_load(&fs.under), UNDER_CHANGED);
    assert_int_equal(logged("changed underneath"), 1);
    mount_fini(&fs);
}

/* A file renamed over the path: replaced, reads go on from the file
 * opened (its ctime changed with its link: not a change of its bytes);
 * edits are refused, logged once. */
static void test_renamed_over(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    put_model(tpath("other.gguf"), 4096, 0);
    tick_past(model);
    assert_int_equal(rename(tpath("other.gguf"), model), 0);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(atomic_load(&fs.under), 0);       /* only the path tells */
    assert_int_equal(core_under_check(&fs, fs.st), UNDER_REPLACED);
    assert_int_equal(core_under_check(&fs, fs.st), UNDER_REPLACED);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(atomic_load(&fs.under_eio), 0);
    assert_int_equal(logged("replaced underneath"), 1);
    assert_int_equal(logs_total(), 1);
    assert_string_equal(core_under_why(&fs),
                        "the model was replaced underneath (renamed over or removed) by another "
                        "program: an edit would write the new file (remount to edit it)");
    char line[512];
    assert_true(core_under_line(&fs, line, sizeof line) > 0);
    assert_int_equal(strncmp(line, "replaced underneath: m.gguf was replaced or removed by "
                             "another program (noticed at ", 76), 0);
    /* a change of the file opened, later, adds its bit, logged too */
    assert_int_equal(truncate(model, 0), 0);    /* the new file: not the mount's */
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    truncate_fd(fs.st->model->shards[0].src->fd, 8);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    assert_int_equal(atomic_load(&fs.under), UNDER_CHANGED | UNDER_REPLACED);
    assert_int_equal(logged("changed underneath"), 1);
    assert_string_equal(core_under_why(&fs),
                        "the model was changed underneath by another program (remount to see it)");
    mount_fini(&fs);
}

static void test_removed(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    assert_int_equal(unlink(model), 0);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(core_under_check(&fs, fs.st), UNDER_REPLACED);
    assert_int_equal(logged("replaced underneath"), 1);
    mount_fini(&fs);
}

/* gguffs' own commits (in place, then a rewrite) are not a change: the
 * version before as well as the new one check clean, for the file opened
 * and for the path. */
static void test_own_commits(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    struct state *v0 = core_state_ref(fs.st);
    edit_ctx(&fs, 4096);
    assert_int_equal(fs.st->gen, 1);
    assert_int_equal(ctx_now(&fs), 4096);
    assert_int_equal(core_under_check_shard(&fs, v0, 0), 0);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(core_under_check(&fs, v0), 0);
    assert_int_equal(core_under_check(&fs, fs.st), 0);
    edit_name(&fs, 40);
    assert_int_equal(fs.st->gen, 2);
    assert_int_equal(core_under_check_shard(&fs, v0, 0), 0);
    assert_int_equal(core_under_check(&fs, v0), 0);
    assert_int_equal(core_under_check(&fs, fs.st), 0);
    assert_int_equal(atomic_load(&fs.under), 0);
    assert_int_equal(logs_total(), 0);
    /* a write of another program after them is still one */
    scribble(model, data_off(&fs), 4);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    core_state_put(v0);
    gguf_commit_end(model);
    mount_fini(&fs);
}

/* While a commit of gguffs' own writes (between begin and end), shard 0
 * is taken as unchanged; end records the file as it is then. */
static void test_own_window(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    core_under_begin(&fs);
    scribble(model, 8, 4);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(core_under_check(&fs, fs.st), 0);
    core_under_end(&fs);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_true(sig_same(&fs.st->sig[0], &(struct fsig){ 0 }) == false);
    struct fsig now = sig_of_path(model);
    struct fsig rec = sig_of(&fs, fs.st, 0);
    assert_true(sig_same(&rec, &now));
    assert_int_equal(atomic_load(&fs.under), 0);
    mount_fini(&fs);
}

/* The hooks run between a check's fstat and its second look. */
static void hook_commit(struct mount *fs)
{
    core_under_begin(fs);
    core_under_end(fs);
}

static void hook_begin(struct mount *fs)
{
    core_under_begin(fs);
}

static void hook_epoch(struct mount *fs)
{
    pthread_mutex_lock(&fs->sig_mu);
    fs->own_epoch++;
    pthread_mutex_unlock(&fs->sig_mu);
}

/* Another reader finds the change while this one is checking: marked
 * and logged once, both reads fail. */
static void hook_reader(struct mount *fs)
{
    assert_int_equal(core_under_check_shard(fs, fs->st, 0), EIO);
}

static void test_two_readers(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    scribble(model, data_off(&fs), 4);
    sig_hook = hook_reader;
    sig_hook_fs = &fs;
    sig_hook_n = 1;
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    assert_int_equal(sig_hook_n, 0);
    assert_int_equal(atomic_load(&fs.under_eio), 2);
    assert_int_equal(logs_total(), 1);
    mount_fini(&fs);
}

/* The race with gguffs' own commit, each way a check can meet it. */
static void test_own_race(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    /* a commit that began after the first look and ended before the
     * second: compared again with what it recorded, unchanged */
    scribble(model, 8, 4);
    sig_hook = hook_commit;
    sig_hook_fs = &fs;
    sig_hook_n = 1;
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(sig_hook_n, 0);
    assert_int_equal(atomic_load(&fs.under), 0);
    /* one that began and is still writing at the second look */
    scribble(model, 8, 4);
    sig_hook = hook_begin;
    sig_hook_n = 1;
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(atomic_load(&fs.under), 0);
    core_under_end(&fs);
    /* commits that end at every look: the check gives up, bounded */
    scribble(model, 8, 4);
    sig_hook = hook_epoch;
    sig_hook_n = 100;
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(sig_hook_n, 100 - 4);
    assert_int_equal(atomic_load(&fs.under), 0);
    sig_hook = NULL;
    /* fstat failing: cannot tell, the read itself says */
    sig_fail = 1;
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(sig_fail, 0);
    /* and then it is a change */
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    mount_fini(&fs);
}

/* A split model: every shard is checked, by its own signature and path;
 * gguffs' own window covers shard 0 only (it never writes the others). */
static void test_split(void **state)
{
    (void)state;
    write_split(2);
    const char *s0 = strdup(shard_name(0, 2));
    const char *s1 = strdup(shard_name(1, 2));
    struct mount fs;
    mount_init(&fs, s0, false);
    assert_int_equal(fs.st->model->n, 2);
    assert_int_equal(core_under_check(&fs, fs.st), 0);
    /* shard 1 renamed over */
    put_model(tpath("other.gguf"), 1, 0);
    assert_int_equal(rename(tpath("other.gguf"), s1), 0);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 1), 0);
    assert_int_equal(core_under_check(&fs, fs.st), UNDER_REPLACED);
    assert_non_null(strstr(fs.under_file, "m-00002-of-00002.gguf"));
    /* shard 1's file opened, written while a commit of gguffs' own is
     * under way: still a change */
    core_under_begin(&fs);
    truncate_fd(fs.st->model->shards[1].src->fd, 4);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 1), EIO);
    core_under_end(&fs);
    assert_int_equal(atomic_load(&fs.under), UNDER_CHANGED | UNDER_REPLACED);
    mount_fini(&fs);
    free((char *)s0);
    free((char *)s1);
}

/* Remote and overlay mounts are not checked (core_remote's bytes are the
 * block cache's), nor is a state without signatures. */
static void test_not_local(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    assert_int_equal(truncate(model, 8), 0);
    fs.remote = true;
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    assert_int_equal(core_under_check(&fs, fs.st), 0);
    core_under_start(&fs);
    assert_int_equal(fs.in_fd, -1);
    fs.remote = false;
    fs.overlay = "/nonexistent/overlay";
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    core_under_start(&fs);
    assert_int_equal(fs.in_fd, -1);
    fs.overlay = NULL;
    struct fsig *sig = fs.st->sig;
    fs.st->sig = NULL;
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), 0);
    core_under_start(&fs);
    assert_int_equal(fs.in_fd, -1);
    core_under_stop(&fs);       /* nothing started: nothing to stop */
    core_under_rewatch(&fs);
    fs.st->sig = sig;
    assert_int_equal(atomic_load(&fs.under), 0);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    mount_fini(&fs);
}

/* ---- the inotify thread ---- */

static bool under_set(void *arg)
{
    return atomic_load(&((struct mount *)arg)->under) != 0;
}

static bool under_both(void *arg)
{
    return atomic_load(&((struct mount *)arg)->under) == (UNDER_CHANGED | UNDER_REPLACED);
}

/* A write into the file while mounted: the thread notices and marks the
 * mount before anyone reads (info and stats know). */
static void test_thread_notices(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    unsigned p0 = atomic_load(&polls);
    core_under_start(&fs);
    assert_true(fs.in_fd >= 0);
    assert_int_equal(fs.in_dir_wd, -1);     /* not a follower: no folder watch */
    wait_polls(p0 + 1);
    tick_past(model);
    int fd = open(model, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "zzzz", 4, (off_t)data_off(&fs)), 4);
    assert_true(wait_for(under_set, &fs));
    close(fd);
    assert_int_equal(atomic_load(&fs.under), UNDER_CHANGED);
    assert_int_equal(atomic_load(&fs.under_eio), 0);   /* no read failed: the thread's check */
    assert_int_equal(logged("changed underneath"), 1);
    /* the model moved away (IN_MOVE_SELF): replaced too */
    assert_int_equal(rename(model, tpath("other.gguf")), 0);
    assert_true(wait_for(under_both, &fs));
    assert_int_equal(logged("replaced underneath"), 1);
    core_under_stop(&fs);
    assert_int_equal(fs.in_fd, -1);
    mount_fini(&fs);
}

/* Once both are marked, events are not checked any more. */
static void test_thread_done(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    atomic_store(&fs.under, UNDER_CHANGED | UNDER_REPLACED);
    unsigned p0 = atomic_load(&polls), u = atomic_load(&updates);
    core_under_start(&fs);
    wait_polls(p0 + 1);
    assert_int_equal(truncate(model, 8), 0);
    wait_polls(p0 + 2);
    assert_int_equal(atomic_load(&updates), u);
    assert_int_equal(logs_total(), 0);
    mount_fini(&fs);
}

/* A rename over the model: the thread marks it replaced. */
static void test_thread_replaced(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    core_under_start(&fs);
    put_model(tpath("other.gguf"), 1, 0);
    assert_int_equal(rename(tpath("other.gguf"), model), 0);
    assert_true(wait_for(under_set, &fs));
    assert_int_equal(atomic_load(&fs.under), UNDER_REPLACED);
    mount_fini(&fs);
}

/* The thread's poll interrupted, or woken with nothing to read: it goes
 * on; its poll failing: it ends, and stop still joins it. */
static void test_thread_poll(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    unsigned p0 = atomic_load(&polls);
    atomic_store(&poll_eintr, 1);
    atomic_store(&poll_ready, 1);
    core_under_start(&fs);
    wait_polls(p0 + 3);
    assert_int_equal(atomic_load(&poll_eintr), 0);
    assert_int_equal(atomic_load(&poll_ready), 0);
    assert_int_equal(atomic_load(&fs.under), 0);
    /* still watching */
    assert_int_equal(truncate(model, 8), 0);
    assert_true(wait_for(under_set, &fs));
    core_under_stop(&fs);

    atomic_store(&poll_fail, 1);
    p0 = atomic_load(&polls);
    core_under_start(&fs);
    wait_polls(p0 + 1);
    core_under_stop(&fs);
    assert_int_equal(atomic_load(&poll_fail), 0);
    assert_int_equal(fs.in_fd, -1);
    /* no thread: no watch, and nothing to stop */
    atomic_store(&fail_thread, true);
    core_under_start(&fs);
    assert_int_equal(fs.in_fd, -1);
    core_under_stop(&fs);
    mount_fini(&fs);
}

/* No descriptor left for inotify, or for the pipe that stops the thread:
 * no watch, no thread, nothing leaked; the checks still work. */
static void test_thread_no_fds(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    struct rlimit lim = { 64, old.rlim_max };
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &lim), 0);
    int fds[64], n = 0;
    while (n < 64 && (fds[n] = open("/dev/null", O_RDONLY)) >= 0)
        n++;
    assert_true(n > 1 && n < 64);
    core_under_start(&fs);              /* none: inotify_init1 fails */
    assert_int_equal(fs.in_fd, -1);
    close(fds[--n]);
    core_under_start(&fs);              /* one: the pipe fails */
    assert_int_equal(fs.in_fd, -1);
    int probe = open("/dev/null", O_RDONLY);
    assert_true(probe >= 0);            /* the one inotify took is free again */
    close(probe);
    while (n > 0)
        close(fds[--n]);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    core_under_stop(&fs);
    assert_int_equal(truncate(model, 8), 0);
    assert_int_equal(core_under_check_shard(&fs, fs.st, 0), EIO);
    mount_fini(&fs);
}

/* ---- core_source_failed ---- */

static void test_source_failed(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, model, false);
    struct gguf_source *src = fs.st->model->shards[0].src;
    /* a local source: nothing to say */
    core_source_failed(&fs, src, 0, 10);
    assert_int_equal(error_at_calls, 0);
    assert_int_equal(logs_total(), 0);
    fs.remote = true;
    /* a remote with no failure recorded for those bytes: nothing */
    core_source_failed(&fs, src, 0, 10);
    assert_int_equal(error_at_calls, 1);
    assert_int_equal(logs_total(), 0);
    /* failures: each said, with its range and cause */
    fake_has_error = true;
    core_source_failed(&fs, src, 100, 10);
    core_source_failed(&fs, src, 200, 10);
    assert_int_equal(logs_total(), 2);
    assert_int_equal(logged("gguffs: https://h.example/m.gguf: bytes 100-109: HTTP 503\n"), 1);
    assert_int_equal(logged("bytes 200-209"), 1);
    /* a remote that changed: said once for the mount */
    fake_changed = true;
    core_source_failed(&fs, src, 300, 10);
    core_source_failed(&fs, src, 400, 10);
    core_source_failed(&fs, src, 500, 10);
    assert_int_equal(logs_total(), 3);
    assert_int_equal(logged("bytes 300-309"), 1);
    fs.remote = false;
    mount_fini(&fs);
}

/* ======================================================================================
 * follow.c
 * ====================================================================================== */

static void test_follow_roles(void **state)
{
    (void)state;
    /* a leftover records file: removed by the read-write mount holding
     * the model's lock */
    put_file(edits_path(model), "old", 3);
    struct mount w;
    mount_init(&w, model, true);
    assert_true(core_follows(&w));
    assert_string_equal(core_follow_file(&w), "m.gguf" CORE_EDITS_SUFFIX);
    assert_int_equal(access(edits_path(model), F_OK), 0);      /* a follower leaves it */
    mount_fini(&w);
    mount_init(&w, model, false);
    assert_false(core_follows(&w));
    assert_int_equal(access(edits_path(model), F_OK), 0);      /* no lock: left */
    core_follow_fini(&w);
    w.lock_fd = open(model, O_RDONLY);
    assert_int_equal(core_follow_init(&w), 0);
    assert_int_equal(access(edits_path(model), F_OK), -1);
    close(w.lock_fd);
    /* a model that cannot be written follows too */
    core_follow_fini(&w);
    w.write_err = EROFS;
    work_reset();
    assert_int_equal(core_follow_init(&w), 0);
    assert_int_equal(work.allocs, 2);       /* its struct and the records' path */
    assert_true(core_follows(&w));
    core_follow_fini(&w);
    core_follow_fini(&w);       /* twice: nothing */
    /* remote, overlay: neither */
    w.remote = true;
    assert_int_equal(core_follow_init(&w), 0);
    assert_null(w.follow);
    assert_false(core_follows(&w));
    assert_int_equal(core_follow_update(&w), 0);
    struct fsig s = sig_of(&w, w.st, 0);
    assert_int_equal(core_follow_check(&w, &s, &s), FOLLOW_NO);
    assert_int_equal(core_follow_path(&w, &s), FOLLOW_NO);
    core_follow_begin(&w, w.st);
    core_follow_end(&w, w.st);
    w.remote = false;
    /* no memory */
    mem_cap = 0;
    assert_int_equal(core_follow_init(&w), ENOMEM);
    mem_cap = SIZE_MAX;
    assert_null(w.follow);
    /* the writer's calls on a follower, the follower's on a writer: nothing */
    w.write_err = 0;
    assert_int_equal(core_follow_init(&w), 0);
    assert_int_equal(core_follow_check(&w, &s, &s), FOLLOW_NO);
    assert_int_equal(core_follow_path(&w, &s), FOLLOW_NO);
    assert_int_equal(core_follow_update(&w), 0);
    mount_fini(&w);
}

static void check_locked(struct mount *w)
{
    assert_true(records_locked(w->model_real));
}

/* The writer's records: the file is locked while a commit is under way,
 * then holds the documented header, checksum and one record per commit
 * (in place, then a rewrite), and is removed at the end. */
static void test_writer_records(void **state)
{
    (void)state;
    struct mount w;
    mount_init(&w, model, false);
    assert_int_equal(access(edits_path(model), F_OK), -1);     /* nothing before a commit */
    struct fsig s0 = sig_of(&w, w.st, 0);
    uint64_t d0 = data_off(&w);
    uint64_t doff;
    struct gb b = model_bytes(4096, 0, 1, 4, 0, &doff);
    assert_true(commit_as_gguffs(&w, &b, doff, check_locked));
    free(b.p);
    assert_false(records_locked(model));
    struct fsig s1 = sig_of(&w, w.st, 0);
    assert_false(sig_same(&s0, &s1));
    uint64_t writer, seq;
    unsigned n;
    struct trec r[KEEP];
    read_records(model, &writer, &seq, &n, r);
    assert_int_equal(seq, 1);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].seq, 1);
    assert_int_equal(r[0].kind, 1);
    assert_int_equal(r[0].doff_before, d0);
    assert_int_equal(r[0].doff_after, d0);
    assert_true(sig_same(&r[0].before, &s0));
    assert_true(sig_same(&r[0].after, &s1));

    edit_name(&w, 100);
    struct fsig s2 = sig_of(&w, w.st, 0);
    assert_int_not_equal(s2.ino, s1.ino);
    uint64_t writer2;
    read_records(model, &writer2, &seq, &n, r);
    assert_true(writer2 == writer);
    assert_int_equal(seq, 2);
    assert_int_equal(n, 2);
    assert_int_equal(r[1].seq, 2);
    assert_int_equal(r[1].kind, 2);
    assert_int_equal(r[1].doff_before, d0);
    assert_true(r[1].doff_after > d0);
    assert_true(sig_same(&r[1].before, &s1));
    assert_true(sig_same(&r[1].after, &s2));
    gguf_commit_end(model);
    mount_fini(&w);
    assert_int_equal(access(edits_path(model), F_OK), -1);     /* removed */
}

/* Eight records are kept: the ninth commit drops the oldest. */
static void test_writer_keeps_eight(void **state)
{
    (void)state;
    struct mount w;
    mount_init(&w, model, false);
    struct fsig sig[10];
    sig[0] = sig_of(&w, w.st, 0);
    for (unsigned i = 1; i <= 9; i++) {
        edit_ctx(&w, 1000 + i);
        sig[i] = sig_of(&w, w.st, 0);
    }
    uint64_t writer, seq;
    unsigned n;
    struct trec r[KEEP];
    read_records(model, &writer, &seq, &n, r);
    assert_int_equal(seq, 9);
    assert_int_equal(n, 8);
    for (unsigned i = 0; i < 8; i++) {
        assert_int_equal(r[i].seq, i + 2);
        assert_true(sig_same(&r[i].before, &sig[i + 1]));
        assert_true(sig_same(&r[i].after, &sig[i + 2]));
    }
    gguf_commit_end(model);
    mount_fini(&w);
}

/* What the writer cannot do is said once, and never stops a commit: a
 * records path that is not a regular file, a lock another holds, a write
 * that fails; a commit that left no model (end with NULL) records
 * nothing; a record is never "in place" with a moved data offset. */
static void test_writer_trouble(void **state)
{
    (void)state;
    signal(SIGXFSZ, SIG_IGN);
    struct mount w;
    mount_init(&w, model, false);
    /* a folder there */
    assert_int_equal(mkdir(edits_path(model), 0755), 0);
    core_follow_begin(&w, w.st);
    core_follow_end(&w, w.st);
    assert_int_equal(logged("cannot create"), 1);
    core_follow_begin(&w, w.st);
    core_follow_end(&w, w.st);
    assert_int_equal(logs_total(), 1);
    assert_int_equal(rmdir(edits_path(model)), 0);
    mount_fini(&w);

    /* a FIFO with a reader: opens, but is no file */
    n_logs = 0;
    mount_init(&w, model, false);
    assert_int_equal(mkfifo(edits_path(model), 0644), 0);
    int rd = open(edits_path(model), O_RDONLY | O_NONBLOCK);
    assert_true(rd >= 0);
    core_follow_begin(&w, w.st);
    core_follow_end(&w, w.st);
    assert_int_equal(logged("cannot create"), 1);
    assert_non_null(strstr(logs[0], strerror(EINVAL)));
    close(rd);
    assert_int_equal(unlink(edits_path(model)), 0);
    mount_fini(&w);

    /* another holds the lock: said; the record is still written */
    n_logs = 0;
    mount_init(&w, model, false);
    int lk = hold_lock(model, F_RDLCK);
    core_follow_begin(&w, w.st);
    core_follow_end(&w, w.st);
    close(lk);
    assert_int_equal(logged("cannot lock"), 1);
    uint64_t writer, seq;
    unsigned n;
    struct trec r[KEEP];
    read_records(model, &writer, &seq, &n, r);
    assert_int_equal(n, 1);
    /* no model after the commit: no record, the lock released */
    core_follow_begin(&w, w.st);
    assert_true(records_locked(model));
    core_follow_end(&w, NULL);
    assert_false(records_locked(model));
    read_records(model, &writer, &seq, &n, r);
    assert_int_equal(n, 1);
    core_follow_end(&w, w.st);          /* no commit began: nothing */
    read_records(model, &writer, &seq, &n, r);
    assert_int_equal(n, 1);
    mount_fini(&w);

    /* a write that fails (the file size limit) */
    n_logs = 0;
    mount_init(&w, model, false);
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    core_follow_begin(&w, w.st);
    struct rlimit lim = { 100, old.rlim_max };
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    core_follow_end(&w, w.st);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(logged("cannot write"), 1);
    mount_fini(&w);

    /* the same file with its data moved (written over by the test, not
     * gguffs): recorded as a rewrite */
    n_logs = 0;
    mount_init(&w, model, false);
    core_follow_begin(&w, w.st);
    uint64_t doff;
    struct gb b = model_bytes(7, 200, 1, 4, 0, &doff);
    put_file(model, b.p, b.len);
    free(b.p);
    struct gguf_split *m;
    struct gguf_diag d;
    assert_int_equal(core_open_model(model, true, false, NULL, NULL, NULL, 0, &m, &d), GGUF_OK);
    struct state *ns;
    assert_int_equal(core_state_new(&w, m, 1, &ns), 0);
    core_follow_end(&w, ns);
    read_records(model, &writer, &seq, &n, r);
    assert_int_equal(n, 1);
    assert_int_equal(r[0].kind, 2);
    assert_int_equal(r[0].before.ino, r[0].after.ino);
    assert_int_equal(r[0].doff_after, doff);
    core_state_put(ns);
    assert_int_equal(logs_total(), 0);
    /* a mount that ends with a commit begun (its descriptor still open):
     * the lock goes with it, the file too */
    core_follow_begin(&w, w.st);
    assert_true(records_locked(model));
    mount_fini(&w);
    assert_int_equal(access(edits_path(model), F_OK), -1);
}

/* A follower verifies the writer's edits in place: its reads go on, the
 * version known learns the new signature; the inotify-free update then
 * adopts the new version. */
static void test_follow_in_place(void **state)
{
    (void)state;
    struct mount w, f;
    mount_init(&w, model, false);
    mount_init(&f, model, true);
    struct state *f0 = core_state_ref(f.st);
    edit_ctx(&w, 4096);
    struct fsig now = sig_of_path(model);
    assert_int_equal(core_under_check_shard(&f, f.st, 0), 0);
    assert_int_equal(core_under_check(&f, f.st), 0);
    assert_int_equal(atomic_load(&f.under), 0);
    struct fsig learned = sig_of(&f, f0, 0);
    assert_true(sig_same(&learned, &now));
    assert_int_equal(ctx_now(&f), 2048);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(gen_now(&f), 1);
    assert_int_equal(ctx_now(&f), 4096);
    assert_int_equal(atomic_load(&f.under_followed), 1);
    /* nothing new: nothing done */
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(gen_now(&f), 1);
    /* two edits in a row, followed at once */
    edit_ctx(&w, 1);
    edit_ctx(&w, 2);
    assert_int_equal(core_under_check_shard(&f, f0, 0), 0);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(ctx_now(&f), 2);
    assert_int_equal(gen_now(&f), 2);
    assert_int_equal(core_under_check(&f, f.st), 0);
    /* an edit that writes the header as it was: recorded, nothing new
     * to show */
    edit_ctx(&w, 2);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(gen_now(&f), 2);
    assert_int_equal(atomic_load(&f.under_followed), 2);
    /* another program's write after them: changed */
    scribble(model, data_off(&f), 4);
    assert_int_equal(core_under_check_shard(&f, f0, 0), EIO);
    assert_int_equal(core_follow_update(&f), 0);        /* marked: nothing adopted */
    assert_int_equal(logs_total(), 1);
    core_state_put(f0);
    gguf_commit_end(model);
    mount_fini(&f);
    mount_fini(&w);
}

/* A rewrite of the writer's: the follower's path check verifies it, the
 * update adopts the new file (FOLLOW_NEW_FILE), the old version reads
 * the old file. */
static void test_follow_rewrite(void **state)
{
    (void)state;
    struct mount w, f;
    mount_init(&w, model, false);
    mount_init(&f, model, true);
    struct state *f0 = core_state_ref(f.st);
    edit_name(&w, 60);
    assert_int_equal(core_under_check(&f, f.st), 0);
    assert_int_equal(core_follow_update(&f), FOLLOW_NEW_FILE);
    assert_int_equal(gen_now(&f), 1);
    struct fsig now = sig_of_path(model);
    assert_true(f.path_ino == now.ino);
    assert_true(f.st->sig[0].ino == now.ino);
    assert_true(f0->sig[0].ino != now.ino);
    assert_int_equal(core_under_check(&f, f.st), 0);
    assert_int_equal(core_under_check_shard(&f, f0, 0), 0);
    /* then in place on the new file */
    edit_ctx_named(&w, 77, 60);
    assert_int_equal(core_under_check(&f, f.st), 0);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(ctx_now(&f), 77);
    assert_int_equal(atomic_load(&f.under), 0);
    assert_int_equal(atomic_load(&f.under_followed), 2);
    core_state_put(f0);
    gguf_commit_end(model);
    mount_fini(&f);
    mount_fini(&w);
}

/* While the writer's lock is held a commit is under way: the header
 * changing is its write, tensor bytes are served; nothing is adopted. */
static void test_follow_busy(void **state)
{
    (void)state;
    struct mount f;
    mount_init(&f, model, true);
    int lk = hold_lock(model, F_WRLCK);
    scribble(model, 8, 4);
    assert_int_equal(core_under_check_shard(&f, f.st, 0), 0);
    struct fsig want = sig_of(&f, f.st, 0), now = sig_of_path(model);
    assert_int_equal(core_follow_check(&f, &want, &now), FOLLOW_BUSY);
    assert_int_equal(core_follow_path(&f, &now), FOLLOW_BUSY);
    assert_int_equal(core_follow_update(&f), 0);
    put_model(tpath("other.gguf"), 1, 0);
    assert_int_equal(rename(tpath("other.gguf"), model), 0);
    assert_int_equal(core_under_check(&f, f.st), 0);
    assert_int_equal(atomic_load(&f.under), 0);
    /* the lock gone with no record: another program's */
    close(lk);
    assert_int_equal(core_follow_check(&f, &want, &now), FOLLOW_NO);
    assert_int_equal(core_under_check_shard(&f, f.st, 0), EIO);
    assert_int_equal(core_under_check(&f, f.st), UNDER_CHANGED | UNDER_REPLACED);
    mount_fini(&f);
}

/* A file in place changed by another program: the update says changed
 * (not verified), or replaced for another file at the path. */
static void test_follow_unverified(void **state)
{
    (void)state;
    struct mount f;
    mount_init(&f, model, true);
    scribble(model, data_off(&f), 4);
    assert_int_equal(core_follow_update(&f), UNDER_CHANGED);
    assert_int_equal(atomic_load(&f.under), 0);     /* the caller marks */
    mount_fini(&f);
    mount_init(&f, model, true);
    put_model(tpath("other.gguf"), 1, 0);
    assert_int_equal(rename(tpath("other.gguf"), model), 0);
    assert_int_equal(core_follow_update(&f), UNDER_REPLACED);
    /* the model gone: the path's check says so, not the update */
    assert_int_equal(unlink(model), 0);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(core_under_check(&f, f.st), UNDER_REPLACED);
    mount_fini(&f);
}

/* Records: checked before use, none sizing anything. */

/* Writes img (len bytes) as the records file. */
static void put_records(const void *img, size_t len)
{
    put_file(edits_path(model), img, len);
}

/* Made-up signatures A -> B -> C of the model's file. */
struct abc {
    struct fsig a, b, c;
    uint64_t doff;
};

static struct abc abc_of(struct mount *f)
{
    struct abc s;
    s.a = sig_plus(sig_of(f, f->st, 0), 0);
    s.a.dev = 1001;             /* no version knows it: nothing learned by accident */
    s.b = sig_plus(s.a, 1);
    s.c = sig_plus(s.a, 2);
    s.doff = 96;
    return s;
}

static struct trec rec_of(uint64_t seq, uint64_t kind, const struct fsig *before,
                          const struct fsig *after, uint64_t doff)
{
    return (struct trec){ seq, kind, doff, doff + (kind == 2 ? 32 : 0), *before, *after };
}

static void test_follow_chains(void **state)
{
    (void)state;
    struct mount f;
    mount_init(&f, model, true);
    struct abc s = abc_of(&f);
    uint8_t img[HEAD + KEEP * REC];
    struct trec r[3] = { rec_of(1, 1, &s.a, &s.b, s.doff), rec_of(2, 1, &s.b, &s.c, s.doff) };
    /* no file: no evidence */
    assert_int_equal(core_follow_check(&f, &s.a, &s.b), FOLLOW_NO);
    size_t len = image(img, 7, 2, 2, r, 2);
    put_records(img, len);
    assert_int_equal(core_follow_check(&f, &s.a, &s.b), FOLLOW_OK);
    assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_OK);
    assert_int_equal(core_follow_check(&f, &s.b, &s.c), FOLLOW_OK);
    assert_int_equal(core_follow_check(&f, &s.a, &s.a), FOLLOW_OK);
    assert_int_equal(core_follow_check(&f, &s.c, &s.a), FOLLOW_NO);    /* backwards */
    assert_int_equal(core_follow_check(&f, &s.b, &s.a), FOLLOW_NO);
    /* another history after the first step */
    struct fsig x = sig_plus(s.a, 7);
    r[1].before = x;
    put_records(img, image(img, 7, 2, 2, r, 2));
    assert_int_equal(core_follow_check(&f, &s.a, &s.b), FOLLOW_OK);
    assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    assert_int_equal(core_follow_check(&f, &x, &s.c), FOLLOW_OK);
    /* a rewrite: not in place (the check), a path's (core_follow_path) */
    struct fsig known = sig_of(&f, f.st, 0);
    struct fsig moved = sig_plus(known, 3);
    moved.ino += 1000;
    r[0] = rec_of(1, 2, &known, &moved, s.doff);
    put_records(img, image(img, 7, 1, 1, r, 1));
    assert_int_equal(core_follow_check(&f, &known, &moved), FOLLOW_NO);
    assert_int_equal(core_follow_path(&f, &moved), FOLLOW_OK);
    assert_int_equal(core_follow_path(&f, &known), FOLLOW_OK);  /* nothing changed */
    struct fsig other = moved;
    other.ino += 1;
    assert_int_equal(core_follow_path(&f, &other), FOLLOW_NO);
    /* every field of a signature counts */
    for (int field = 0; field < 7; field++) {
        struct trec q = rec_of(1, 1, &s.a, &s.b, s.doff);
        struct fsig *t = field % 2 ? &q.before : &q.after;
        switch (field) {
        case 0: t->dev++; break;
        case 1: t->ino++; break;
        case 2: t->size++; break;
        case 3: t->mtime.tv_sec++; break;
        case 4: t->mtime.tv_nsec++; break;
        case 5: t->ctime.tv_sec++; break;
        default: t->ctime.tv_nsec++; break;
        }
        put_records(img, image(img, 7, 1, 1, &q, 1));
        assert_int_equal(core_follow_check(&f, &s.a, &s.b), FOLLOW_NO);
    }
    /* the learning: the version knowing the signature learns the new one */
    struct fsig k2 = sig_plus(known, 5);
    r[0] = rec_of(1, 1, &known, &k2, s.doff);
    put_records(img, image(img, 7, 1, 1, r, 1));
    assert_int_equal(core_follow_check(&f, &known, &k2), FOLLOW_OK);
    struct fsig got = sig_of(&f, f.st, 0);
    assert_true(sig_same(&got, &k2));
    assert_int_equal(atomic_load(&f.under), 0);
    assert_int_equal(logs_total(), 0);
    mount_fini(&f);
}

/* Records that are not the writer's: torn, forged, another format. */
static void test_follow_hostile(void **state)
{
    (void)state;
    struct mount f;
    mount_init(&f, model, true);
    struct abc s = abc_of(&f);
    uint8_t img[HEAD + KEEP * REC + 64];
    struct trec r[KEEP];
    for (unsigned i = 0; i < KEEP; i++)
        r[i] = rec_of(i + 1, 1, i ? &s.b : &s.a, &s.b, s.doff);
    r[0] = rec_of(1, 1, &s.a, &s.b, s.doff);
    r[1] = rec_of(2, 1, &s.b, &s.c, s.doff);
    size_t len = image(img, 7, 2, 2, r, 2);
    uint8_t good[sizeof img];
    memcpy(good, img, len);
    put_records(good, len);
    assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_OK);
    /* every byte flipped: the checksum, or a field, refuses it */
    for (size_t i = 0; i < len; i++) {
        memcpy(img, good, len);
        img[i] ^= 0x40;
        put_records(img, len);
        assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    }
    /* cut anywhere (a torn read) */
    for (size_t cut = 0; cut < len; cut++) {
        put_records(good, cut);
        assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    }
    /* resealed forgeries of each field */
    struct {
        size_t at;
        uint64_t v;
    } forge[] = {
        { 24, 3 },                      /* n beyond the records there */
        { 24, 9 },                      /* more than kept */
        { 24, UINT64_MAX },
        { 24, (uint64_t)1 << 61 },      /* n * 144 wraps */
        { HEAD + 8, 0 },                /* kind */
        { HEAD + 8, 3 },
        { HEAD + REC + 8, UINT64_MAX },
        { HEAD + 16, 0 },               /* in place with the data moved */
        { HEAD + REC + 24, 4096 },
    };
    for (size_t k = 0; k < sizeof forge / sizeof *forge; k++) {
        memcpy(img, good, len);
        wr64(img + forge[k].at, forge[k].v);
        reseal(img, 2);
        put_records(img, len);
        assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    }
    /* a longer file (garbage after the records) is fine; another magic is not */
    memcpy(img, good, len);
    memset(img + len, 0xff, 64);
    put_records(img, len + 64);
    assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_OK);
    memcpy(img, good, len);
    memcpy(img, "GGUFFSE2", 8);
    reseal(img, 2);
    put_records(img, len);
    assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    /* random files, some with the magic, a plausible count and their
     * checksum right, so that the records themselves are read */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int it = 0; it < 300; it++) {
        size_t n = 0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t flen = x % sizeof img;
        for (size_t i = 0; i < flen; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            img[i] = (uint8_t)x;
        }
        if (it % 2 && flen >= HEAD) {
            memcpy(img, "GGUFFSE1", 8);
            n = (flen - HEAD) / REC;
            wr64(img + 24, n);
            for (size_t i = 0; i < n; i++)
                wr64(img + HEAD + i * REC + 8, 1 + (x >> i) % 2);
            reseal(img, (unsigned)n);
        }
        put_records(img, flen);
        assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    }
    /* not a file: a link to good records, a FIFO, a folder */
    put_file(tpath("target"), good, len);
    assert_int_equal(unlink(edits_path(model)), 0);
    assert_int_equal(symlink(tpath("target"), edits_path(model)), 0);
    assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    assert_int_equal(unlink(edits_path(model)), 0);
    assert_int_equal(mkfifo(edits_path(model), 0644), 0);
    assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    assert_int_equal(unlink(edits_path(model)), 0);
    assert_int_equal(mkdir(edits_path(model), 0755), 0);
    assert_int_equal(core_follow_check(&f, &s.a, &s.c), FOLLOW_NO);
    assert_int_equal(core_follow_path(&f, &s.c), FOLLOW_NO);
    assert_int_equal(rmdir(edits_path(model)), 0);
    /* garbage records while the file changed: nothing adopted, nothing
     * marked by the update (the check decides) */
    put_records("garbage", 7);
    scribble(model, 8, 4);
    assert_int_equal(core_follow_path(&f, &s.c), FOLLOW_NO);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(gen_now(&f), 0);
    assert_int_equal(core_under_check_shard(&f, f.st, 0), EIO);
    assert_int_equal(atomic_load(&f.under), UNDER_CHANGED);
    assert_int_equal(logged("changed underneath"), 1);
    mount_fini(&f);
}

/* Forged records that verify a file whose tensors are not the version
 * mounted's, or one that does not parse: not followed. */
static void forge_rewrite(struct mount *f, const struct gb *nb)
{
    /* as a writer does: under the lock, whose release (a close after
     * writing) wakes the followers */
    int lk = hold_lock(model, F_WRLCK);
    struct fsig known = sig_of(f, f->st, 0);
    put_file(tpath("other.gguf"), nb->p, nb->len);
    assert_int_equal(rename(tpath("other.gguf"), model), 0);
    struct fsig now = sig_of_path(model);
    struct trec r = rec_of(1, 2, &known, &now, data_off(f));
    uint8_t img[HEAD + REC];
    put_records(img, image(img, 9, 1, 1, &r, 1));
    close(lk);
}

static void test_follow_refuses_tensors(void **state)
{
    (void)state;
    struct {
        unsigned n_tensors;
        uint64_t ne;
        unsigned extra;
    } other[] = { { 2, 4, 0 }, { 1, 8, 0 }, { 1, 4, 32 } };
    for (size_t k = 0; k < sizeof other / sizeof *other; k++) {
        struct mount f;
        mount_init(&f, model, true);
        struct gb b = model_bytes(2048, 0, other[k].n_tensors, other[k].ne, other[k].extra, NULL);
        forge_rewrite(&f, &b);
        free(b.p);
        assert_int_equal(core_under_check(&f, f.st), 0);   /* the path verifies */
        assert_int_equal(core_follow_update(&f), UNDER_CHANGED);
        assert_int_equal(logged("not following an edit"), k + 1);
        assert_int_equal(gen_now(&f), 0);
        mount_fini(&f);
        put_model(model, 2048, 0);
    }
    /* a file that does not parse: said once, nothing adopted */
    struct mount f;
    mount_init(&f, model, true);
    struct gb junk = { 0 };
    gb_put(&junk, "GGUF\x03\0\0\0garbage", 15);
    forge_rewrite(&f, &junk);
    free(junk.p);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(logged(": following an edit"), 1);
    assert_int_equal(gen_now(&f), 0);
    mount_fini(&f);
}

/* The records changing between the update's two reads of them (a commit
 * that began meanwhile): tried again; no memory for the new version:
 * said, nothing adopted. */
static void bump_records(void)
{
    uint64_t writer, seq;
    unsigned n;
    struct trec r[KEEP];
    read_records(model, &writer, &seq, &n, r);
    uint8_t img[HEAD + KEEP * REC];
    put_records(img, image(img, writer, seq + 1, n, r, n));
}

static void test_follow_update_races(void **state)
{
    (void)state;
    struct mount w, f;
    mount_init(&w, model, false);
    mount_init(&f, model, true);
    edit_ctx(&w, 4096);
    open_hook = bump_records;
    assert_int_equal(core_follow_update(&f), 0);
    assert_null(open_hook);
    assert_int_equal(ctx_now(&f), 4096);        /* adopted at the second try */
    edit_ctx(&w, 5);
    fail_state_new = true;
    assert_int_equal(core_follow_update(&f), 0);
    fail_state_new = false;
    assert_int_equal(logged("following an edit: " "Cannot allocate memory"), 1);
    assert_int_equal(ctx_now(&f), 4096);
    assert_int_equal(atomic_load(&f.under), 0);
    /* the rewrite the same way: the next update adopts it */
    edit_name(&w, 30);
    fail_state_new = true;
    assert_int_equal(core_follow_update(&f), 0);
    fail_state_new = false;
    assert_int_equal(core_follow_update(&f), FOLLOW_NEW_FILE);
    assert_int_equal(ctx_now(&f), 5);
    gguf_commit_end(model);
    mount_fini(&f);
    mount_fini(&w);
}

/* A split model: the other shards must be as they were. */
static void test_follow_split(void **state)
{
    (void)state;
    write_split(2);
    const char *s0 = strdup(shard_name(0, 2));
    const char *s1 = strdup(shard_name(1, 2));
    struct mount w, f;
    mount_init(&w, s0, false);
    mount_init(&f, s0, true);
    struct gb b = gb_shard(0, 2, 4096, 2);
    uint64_t doff = st_meta(w.st)->data_off;
    assert_true(commit_as_gguffs(&w, &b, doff, NULL));
    free(b.p);
    assert_int_equal(core_under_check(&f, f.st), 0);
    assert_int_equal(core_follow_update(&f), 0);
    assert_int_equal(ctx_now(&f), 4096);
    /* shard 1 rewritten by another program, then an edit of shard 0 */
    struct gb b1 = gb_shard(1, 2, 0, 2);
    tick_past(s1);
    put_file(s1, b1.p, b1.len);
    free(b1.p);
    b = gb_shard(0, 2, 8192, 2);
    pthread_mutex_lock(&w.commit_mu);
    struct state *old = w.st;
    tick_past(s0);
    core_under_begin(&w);
    core_follow_begin(&w, old);
    bool in_place;
    struct gguf_diag d;
    assert_int_equal(gguf_commit(s0, st_meta(old), old->model->shards[0].src, b.p, doff,
                                 &in_place, &d), GGUF_OK);
    free(b.p);
    struct gguf_split *m;
    assert_int_equal(core_open_model(s0, false, true, NULL, NULL, NULL, 0, &m, &d), GGUF_OK);
    struct state *ns;
    assert_int_equal(core_state_new(&w, m, old->gen + 1, &ns), 0);
    core_under_end(&w);
    core_follow_end(&w, ns);
    core_state_swap(&w, ns);
    pthread_mutex_unlock(&w.commit_mu);
    assert_int_equal(core_follow_update(&f), UNDER_CHANGED);
    assert_int_equal(logged("not following an edit"), 1);
    assert_int_equal(ctx_now(&f), 4096);
    gguf_commit_end(s0);
    mount_fini(&f);
    mount_fini(&w);
    free((char *)s0);
    free((char *)s1);
}

/* ---- the follower's inotify thread ---- */

static bool gen_reach(void *arg)
{
    struct mount *fs = arg;
    return gen_now(fs) >= 1 && ctx_now(fs) == 4096;
}

static bool gen2_reach(void *arg)
{
    return gen_now((struct mount *)arg) >= 2;
}

static bool watches_reach(void *arg)
{
    return atomic_load(&watches) >= *(unsigned *)arg;
}

/* The thread of a read-only mount adopts the writer's edits (in place,
 * then a rewrite, whose new file it then watches), ignores other files
 * of the folder, and marks a change that forged records cannot explain. */
static void test_follow_thread(void **state)
{
    (void)state;
    struct mount w, f;
    mount_init(&w, model, false);
    mount_init(&f, model, true);
    unsigned p0 = atomic_load(&polls);
    unsigned w0 = atomic_load(&watches);
    core_under_start(&f);
    assert_int_equal(atomic_load(&watches), w0 + 2);    /* the file, the folder */
    assert_true(f.in_fd >= 0);
    assert_true(f.in_dir_wd >= 0);
    wait_polls(p0 + 1);
    /* another file of the folder: not the model's business */
    unsigned u = atomic_load(&updates), p = atomic_load(&polls);
    put_file(tpath("unrelated"), "x", 1);
    wait_polls(p + 1);
    assert_int_equal(atomic_load(&updates), u);
    /* an edit in place */
    edit_ctx(&w, 4096);
    assert_true(wait_for(gen_reach, &f));
    assert_int_equal(atomic_load(&f.under), 0);
    /* a rewrite: the new file adopted and watched */
    edit_name(&w, 50);
    assert_true(wait_for(gen2_reach, &f));
    unsigned w3 = w0 + 3;
    assert_true(wait_for(watches_reach, &w3));
    struct fsig now = sig_of_path(model);
    struct state *st = core_state_current(&f);
    assert_true(sig_of(&f, st, 0).ino == now.ino);
    core_state_put(st);
    assert_int_equal(atomic_load(&f.under), 0);
    /* the new file written in place by another program (its descriptor
     * kept open: the folder's watch sees no close): its own watch tells */
    tick_past(model);
    int fd = open(model, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "zzzz", 4, (off_t)data_off(&f)), 4);
    assert_true(wait_for(under_set, &f));
    close(fd);
    assert_int_equal(atomic_load(&f.under), UNDER_CHANGED);
    assert_int_equal(atomic_load(&f.under_followed), 2);
    gguf_commit_end(model);
    mount_fini(&f);
    mount_fini(&w);
}

/* Forged records verifying a rename over the model with other tensors:
 * the path's check lets it through, the thread's update marks it. */
static void test_follow_thread_forged(void **state)
{
    (void)state;
    struct mount f;
    mount_init(&f, model, true);
    core_under_start(&f);
    struct gb b = model_bytes(2048, 0, 2, 4, 0, NULL);
    forge_rewrite(&f, &b);
    free(b.p);
    assert_true(wait_for(under_set, &f));
    assert_int_equal(atomic_load(&f.under), UNDER_CHANGED);
    assert_int_equal(logged("not following an edit"), 1);
    assert_non_null(strstr(f.under_file, model));
    mount_fini(&f);
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/gguffs-under-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpl) || !realpath(tmpl, tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_untouched),
        T(test_written_in_place),
        T(test_truncated),
        T(test_chmod),
        T(test_renamed_over),
        T(test_removed),
        T(test_own_commits),
        T(test_own_window),
        T(test_two_readers),
        T(test_own_race),
        T(test_split),
        T(test_not_local),
        T(test_thread_notices),
        T(test_thread_done),
        T(test_thread_replaced),
        T(test_thread_poll),
        T(test_thread_no_fds),
        T(test_source_failed),
        T(test_follow_roles),
        T(test_writer_records),
        T(test_writer_keeps_eight),
        T(test_writer_trouble),
        T(test_follow_in_place),
        T(test_follow_rewrite),
        T(test_follow_busy),
        T(test_follow_unverified),
        T(test_follow_chains),
        T(test_follow_hostile),
        T(test_follow_refuses_tensors),
        T(test_follow_update_races),
        T(test_follow_split),
        T(test_follow_thread),
        T(test_follow_thread_forged),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(tmpdir);
    return r;
}

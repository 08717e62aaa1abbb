/*
 * tests/unit/test_notify.c — fs/notify.c's promises (fs/notify.h) with the
 * kernel's side recorded: the session's descriptor is /dev/null's
 * (fuse_session_fd is wrapped), and what the notify threads write to
 * their copy of it is read as the kernel reads it (writev is wrapped:
 * the FUSE_NOTIFY_INVAL_* messages of linux/fuse.h, checked and logged);
 * allocations fail on demand (tests/unit/work.h's mem_cap), and so does
 * pthread_create (wrapped).
 *
 *   - ggfs_notify_start starts its three threads or none: a thread that
 *     cannot start fails it, and leaves nothing running (the mount then
 *     does not go on: fs/session.c);
 *   - what is queued is sent, in order, before a wait returns;
 *   - a notification that cannot be queued (its note cannot be allocated)
 *     is not lost: the queue sweeps (every version name of /; meta/ and
 *     every name and inode of the current version), a wait waits for the
 *     sweep, the loss is counted and the mount's timeouts turn to 0.
 */
#include "fs/fs.h"
#include "core/nodes.h"
#include "fs/notify.h"
#include "core/state.h"
#include "work.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

/* ---- the kernel's side, recorded ------------------------------------------ */

#define LOG_MAX 64
static struct sent {
    bool entry;
    fuse_ino_t ino;
    char name[64];
} sent[LOG_MAX];
static unsigned n_sent;
static pthread_mutex_t sent_mu = PTHREAD_MUTEX_INITIALIZER;

static void record(bool entry, fuse_ino_t ino, const char *name, size_t len)
{
    pthread_mutex_lock(&sent_mu);
    if (n_sent < LOG_MAX) {
        sent[n_sent] = (struct sent){ .entry = entry, .ino = ino };
        if (name)
            snprintf(sent[n_sent].name, sizeof sent[n_sent].name, "%.*s", (int)len, name);
        n_sent++;
    }
    pthread_mutex_unlock(&sent_mu);
}

/* The session's descriptor: /dev/null's (setup), which notify.c copies;
 * the copy the notifications were last written to. */
static int session_fd = -1, written_fd = -1;
int __wrap_fuse_session_fd(struct fuse_session *se);
int __wrap_fuse_session_fd(struct fuse_session *se)
{
    (void)se;
    return session_fd;
}

/* The kernel's reading of a notification (fs/fuse/dev.c): one message per
 * write, its length in the header, the code in its error field; an entry's
 * name is namelen bytes and a NUL.  Anything else fails the test. */
ssize_t __real_writev(int fd, const struct iovec *iov, int n);
ssize_t __wrap_writev(int fd, const struct iovec *iov, int n);
ssize_t __wrap_writev(int fd, const struct iovec *iov, int n)
{
    struct stat to, null;
    if (session_fd < 0 || fstat(fd, &to) != 0 || fstat(session_fd, &null) != 0 ||
        to.st_rdev != null.st_rdev || !S_ISCHR(to.st_mode))
        return __real_writev(fd, iov, n);
    /* never the session's own descriptor, which an unmount closes */
    assert_int_not_equal(fd, session_fd);
    pthread_mutex_lock(&sent_mu);
    written_fd = fd;
    pthread_mutex_unlock(&sent_mu);
    unsigned char msg[512];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        assert_true(len + iov[i].iov_len <= sizeof msg);
        memcpy(msg + len, iov[i].iov_base, iov[i].iov_len);
        len += iov[i].iov_len;
    }
    struct fuse_out_header h;
    assert_true(len >= sizeof h);
    memcpy(&h, msg, sizeof h);
    assert_int_equal(h.len, len);
    assert_int_equal(h.unique, 0);
    if (h.error == FUSE_NOTIFY_INVAL_ENTRY) {
        struct fuse_notify_inval_entry_out a;
        assert_true(len >= sizeof h + sizeof a);
        memcpy(&a, msg + sizeof h, sizeof a);
        assert_int_equal(len, sizeof h + sizeof a + a.namelen + 1);
        assert_int_equal(msg[len - 1], 0);
        assert_int_equal(a.flags, 0);
        record(true, a.parent, (const char *)msg + sizeof h + sizeof a, a.namelen);
    } else {
        struct fuse_notify_inval_inode_out a;
        assert_int_equal(h.error, FUSE_NOTIFY_INVAL_INODE);
        assert_int_equal(len, sizeof h + sizeof a);
        memcpy(&a, msg + sizeof h, sizeof a);
        assert_true(a.off == 0 && a.len == 0);      /* all of its data */
        record(false, a.ino, NULL, 0);
    }
    return (ssize_t)len;
}

/* Whether (entry, ino, name) was sent. */
static bool was_sent(bool entry, fuse_ino_t ino, const char *name)
{
    bool found = false;
    pthread_mutex_lock(&sent_mu);
    for (unsigned i = 0; i < n_sent && !found; i++)
        found = sent[i].entry == entry && sent[i].ino == ino &&
                (!name || strcmp(sent[i].name, name) == 0);
    pthread_mutex_unlock(&sent_mu);
    return found;
}

/* pthread_create fails (EAGAIN) from its create_ok-th call on */
static int creates, create_ok = 1 << 30;
int __real_pthread_create(pthread_t *th, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *th, const pthread_attr_t *a, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *th, const pthread_attr_t *a, void *(*fn)(void *), void *arg)
{
    if (creates >= create_ok)
        return EAGAIN;
    creates++;
    return __real_pthread_create(th, a, fn, arg);
}

/* ---- the states notify.c sees (core/state.c's calls, stood in for) ---------- */

static char name0[] = "general.name", name1[] = "general.architecture";
static char *names[] = { name0, name1 };
static uint64_t ids[] = { 7, 9 };
static struct gguf_file meta_file = { .n_kv = 2 };
static struct gguf_shard shard = { .gf = &meta_file };
static struct gguf_split split = { .n = 1, .shards = &shard };
static struct state current = { .model = &split, .meta_names = { .names = names, .n = 2 },
                                .kv_id = ids };
static int refs, freed;

struct state *core_state_current(struct mount *fs)
{
    (void)fs;
    __atomic_add_fetch(&refs, 1, __ATOMIC_SEQ_CST);
    return &current;
}

void core_state_put(struct state *st)
{
    assert_ptr_equal(st, &current);
    __atomic_sub_fetch(&refs, 1, __ATOMIC_SEQ_CST);
}

void core_state_free(struct state *st)
{
    (void)st;
    __atomic_add_fetch(&freed, 1, __ATOMIC_SEQ_CST);
}

/* hf/'s files (core/state.c): a version's, invalidated with the root's names */
const struct hf_file core_hf_files[] = { { "config.json", VS_HF_CONFIG } };
const unsigned core_hf_files_n = 1;

/* ---- the tests ------------------------------------------------------------ */

static struct mount fs;

static int setup(void **state)
{
    (void)state;
    memset(&fs, 0, sizeof fs);
    fs.timeout = 365.0 * 86400;
    fs.se = (struct fuse_session *)&fs;     /* never dereferenced: fuse_session_fd is wrapped */
    if (session_fd < 0)
        session_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(session_fd >= 0);
    n_sent = 0;
    creates = 0;
    create_ok = 1 << 30;
    mem_cap = SIZE_MAX;
    refs = freed = 0;
    work_reset();
    return 0;
}

/* A notify thread that cannot start fails the start, and leaves none
 * running and nothing to stop. */
static void test_start_all_or_none(void **state)
{
    (void)state;
    for (int ok = 0; ok < 3; ok++) {
        setup(NULL);
        create_ok = ok;
        assert_int_equal(ggfs_notify_start(&fs), EAGAIN);
        assert_null(fs.notify);
        assert_null(atomic_load(&fs.free_later));   /* state.c frees at once */
        /* the calls do nothing then (the caller frees a state itself) */
        ggfs_notify_meta_entry(&fs, "general.name");
        ggfs_notify_wait_all(&fs);
        assert_false(ggfs_notify_free_state(&fs, &current));
        assert_int_equal(n_sent, 0);
        ggfs_notify_stop(&fs);
    }
}

/* What is queued is sent, in order, before a wait returns. */
static void test_sent_in_order(void **state)
{
    (void)state;
    assert_int_equal(ggfs_notify_start(&fs), 0);
    ggfs_notify_versions(&fs);
    ggfs_notify_wait_root(&fs);
    /* info, model.gguf, info.json, model.safetensors, hf; hf/'s files */
    assert_int_equal(n_sent, 6);
    assert_string_equal(sent[0].name, "info");
    assert_string_equal(sent[1].name, "model.gguf");
    assert_string_equal(sent[4].name, "hf");
    assert_true(sent[5].entry && sent[5].ino == INO_HF);
    assert_string_equal(sent[5].name, "config.json");
    ggfs_notify_meta_entry(&fs, "general.name");
    ggfs_notify_inode(&fs, KV_BASE + 7);
    ggfs_notify_wait_all(&fs);
    assert_int_equal(n_sent, 8);
    assert_true(sent[6].entry && sent[6].ino == INO_META);
    assert_string_equal(sent[6].name, "general.name");
    assert_true(!sent[7].entry && sent[7].ino == KV_BASE + 7);
    assert_true(ggfs_notify_free_state(&fs, &current));
    /* state.c hands a state over through the hook while the threads run */
    assert_ptr_equal(atomic_load(&fs.free_later), ggfs_notify_free_state);
    ggfs_notify_stop(&fs);
    assert_null(atomic_load(&fs.free_later));
    /* the threads' copy of the descriptor is closed with them */
    assert_true(written_fd >= 0);
    assert_int_equal(fcntl(written_fd, F_GETFD), -1);
    assert_int_equal(fcntl(session_fd, F_GETFD), FD_CLOEXEC);
    assert_int_equal(freed, 1);
    assert_int_equal(atomic_load(&fs.notes_lost), 0);
    assert_true(ggfs_timeout(&fs) > 0);
}

/* What a swap tells the kernel (fs->swapped, set while the threads run):
 * the root's version names, every old and new meta/ name, the old keys'
 * inodes, meta/ and / (the root's sent before it returns). */
static void test_swapped(void **state)
{
    (void)state;
    char *next_names[] = { "general.name", "llama.context_length" };
    uint64_t next_ids[] = { 7, 12 };
    struct state next = { .model = &split, .meta_names = { .names = next_names, .n = 2 },
                          .kv_id = next_ids };
    assert_null(atomic_load(&fs.swapped));
    assert_int_equal(ggfs_notify_start(&fs), 0);
    void (*told)(struct mount *, const struct state *, const struct state *) =
        atomic_load(&fs.swapped);
    assert_non_null(told);
    told(&fs, &current, &next);
    assert_true(was_sent(true, INO_ROOT, "info"));
    assert_true(was_sent(true, INO_HF, "config.json"));
    ggfs_notify_wait_all(&fs);
    assert_true(was_sent(true, INO_META, "general.name"));
    assert_true(was_sent(true, INO_META, names[1]));
    assert_true(was_sent(true, INO_META, "llama.context_length"));
    assert_true(was_sent(false, KV_BASE + 7, NULL));
    assert_true(was_sent(false, KV_BASE + 9, NULL));
    assert_false(was_sent(false, KV_BASE + 12, NULL));  /* a new key: no inode to drop */
    assert_true(was_sent(false, INO_META, NULL));
    assert_true(was_sent(false, INO_ROOT, NULL));
    ggfs_notify_stop(&fs);
    assert_null(atomic_load(&fs.swapped));
}

/* Notes that cannot be allocated: the queues sweep, waits wait for it, and
 * from then on the kernel keeps nothing (timeouts 0). */
static void test_lost_note_sweeps(void **state)
{
    (void)state;
    assert_int_equal(ggfs_notify_start(&fs), 0);
    mem_cap = 0;                    /* every note's allocation fails */
    ggfs_notify_meta_entry(&fs, "general.name");
    ggfs_notify_inode(&fs, KV_BASE + 7);
    ggfs_notify_versions(&fs);
    mem_cap = SIZE_MAX;
    ggfs_notify_wait_all(&fs);
    /* the root's version names */
    assert_true(was_sent(true, INO_ROOT, "info"));
    assert_true(was_sent(true, INO_ROOT, "model.gguf"));
    assert_true(was_sent(true, INO_ROOT, "info.json"));
    assert_true(was_sent(true, INO_ROOT, "model.safetensors"));
    assert_true(was_sent(true, INO_ROOT, "hf"));
    assert_true(was_sent(true, INO_HF, "config.json"));
    assert_true(was_sent(false, INO_ROOT, NULL));      /* its listing */
    /* meta/, its names and their inodes, in the current version */
    assert_true(was_sent(false, INO_META, NULL));
    assert_true(was_sent(true, INO_META, "general.name"));
    assert_true(was_sent(true, INO_META, "general.architecture"));
    assert_true(was_sent(false, KV_BASE + 7, NULL));
    assert_true(was_sent(false, KV_BASE + 9, NULL));
    assert_int_equal(refs, 0);
    assert_int_equal(atomic_load(&fs.notes_lost), 8);
    assert_true(ggfs_timeout(&fs) == 0);
    /* the queues go on: a note that can be made is sent as ever */
    n_sent = 0;
    ggfs_notify_meta_entry(&fs, "general.name");
    ggfs_notify_wait_all(&fs);
    assert_int_equal(n_sent, 1);
    ggfs_notify_stop(&fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_all_or_none),
        cmocka_unit_test_setup(test_sent_in_order, setup),
        cmocka_unit_test_setup(test_swapped, setup),
        cmocka_unit_test_setup(test_lost_note_sweeps, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

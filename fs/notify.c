/*
 * fs/notify.c — telling the kernel what an edit changed.
 *
 * The kernel caches names, attributes and data for a year (entry and attr
 * timeouts); after a commit it is told what changed.  libfuse allows the
 * notify calls from any thread, but a notification sent from a handler may
 * wait for a lock the kernel holds for that very request (an unlink in
 * meta/ holds meta/'s lock, which invalidating a name in meta/ takes), so
 * they are sent from threads of their own:
 *
 *   the meta queue   names and inodes in meta/;
 *   the root queue   the names info and model.gguf, which every commit
 *                    changes.  No handler that holds the root directory's
 *                    lock waits for the commit lock (fs/ops_edit.c answers
 *                    namespace changes in / without it), so these go
 *                    through while the committing request still holds
 *                    meta/'s lock, and a commit can wait for them;
 *   the free queue   retired states to free: closing the replaced model
 *                    file frees its blocks, which takes a second for 4 GB
 *                    on ext4 or btrfs.  Nobody waits for this queue, so
 *                    an edit's close() (which waits for the other two)
 *                    does not wait for the previous version to go.
 *
 * Each queue is FIFO; a waiter waits until what was queued before it has
 * been sent, at most a second (then it goes on: a cache may be stale).
 *
 * The notifications are written here, to a descriptor of the notify
 * threads' own: a duplicate of the session's /dev/fuse descriptor, closed
 * once the threads are joined.  Unmounting closes the session's descriptor
 * (fuse_session_unmount) while a notification may still be on its way
 * (the threads are joined after the unmount: see fs/session.c); through
 * libfuse's notify calls, such a notification was written to a closed
 * descriptor, or to whatever file was opened next under its number (seen
 * by TSan in CI: close() in the main thread against writev() in a notify
 * thread).  The messages are the kernel's (linux/fuse.h): FUSE_NOTIFY_
 * INVAL_ENTRY and FUSE_NOTIFY_INVAL_INODE, as libfuse writes them.
 *
 * A notification is never dropped silently.  One that cannot be queued
 * (no memory for its note) marks its queue for a sweep, which needs no
 * memory: the queue's thread then invalidates everything that queue is
 * ever told about (the root's version names; meta/ itself and every name
 * and inode of the current version), after the notes queued before it.
 * And from the first such loss on, the mount's entry and attribute
 * timeouts are 0 (ggfs_timeout, fs.h), so nothing the sweep could not
 * name (a key an edit removed) stays cached either.  A waiter counts a
 * sweep as one more thing queued.
 */
#include "fs.h"
#include "notify.h"
#include "core/state.h"
#include "cache/thread.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

/* One allocation: the name is stored after it. */
struct note {
    struct state *free_state;      /* or: a retired state to free */
    bool entry;                    /* inval_entry(parent, name) or inval_inode */
    fuse_ino_t ino;
    struct note *next;
    char name[];
};

/* The names in / that change with every version (core/mount.h: each version has
 * inodes of its own for them). */
static const char *const version_names[] = { "info", "model.gguf", "info.json",
                                             "model.safetensors", "hf" };

struct queue {
    struct mount *fs;
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* a note was queued, or stop */
    pthread_cond_t done_cv;        /* a note was sent */
    struct note *head, **tail;
    uint64_t queued, done;         /* notes (and sweeps) ever queued / sent */
    uint64_t sweeps;               /* notes lost since the last sweep began */
    bool is_meta;                  /* what a sweep invalidates: meta/, or / */
    pthread_t thread;
    bool running, stop;
};

struct notify {
    struct queue meta, root, free;
    int fd;                        /* the threads' /dev/fuse, or -1 */
};

/* The kernel's answers are not looked at: ENOENT (nothing cached under
 * that name or inode) is the common one, and after an unmount ENODEV. */
static void inval_entry(int fd, fuse_ino_t parent, const char *name)
{
    size_t len = strlen(name);
    struct fuse_notify_inval_entry_out arg = { .parent = parent, .namelen = (uint32_t)len };
    struct fuse_out_header h = { .error = FUSE_NOTIFY_INVAL_ENTRY };
    struct iovec iov[] = { { &h, sizeof h }, { &arg, sizeof arg },
                           { (char *)name, len + 1 } };
    h.len = (uint32_t)(sizeof h + sizeof arg + len + 1);
    if (fd >= 0)
        (void)!writev(fd, iov, 3);
}

/* The inode's attributes and all its cached data. */
static void inval_inode(int fd, fuse_ino_t ino)
{
    struct fuse_notify_inval_inode_out arg = { .ino = ino, .off = 0, .len = 0 };
    struct fuse_out_header h = { .len = sizeof h + sizeof arg,
                                 .error = FUSE_NOTIFY_INVAL_INODE };
    struct iovec iov[] = { { &h, sizeof h }, { &arg, sizeof arg } };
    if (fd >= 0)
        (void)!writev(fd, iov, 2);
}

static void send_note(struct mount *fs, const struct note *n)
{
    if (n->free_state)
        core_state_free(n->free_state);
    else if (n->entry)
        inval_entry(fs->notify->fd, n->ino, n->name);
    else
        inval_inode(fs->notify->fd, n->ino);
}

/* Everything a queue is ever told about, for notes that were lost: the
 * root's version names, or meta/ and every name and inode of the current
 * version (a reference to it, taken under the state lock, which no
 * thread holds while it waits for this queue). */
static void sweep(struct mount *fs, bool meta)
{
    int fd = fs->notify->fd;
    if (fd < 0)
        return;
    if (!meta) {
        for (size_t i = 0; i < sizeof version_names / sizeof *version_names; i++)
            inval_entry(fd, INO_ROOT, version_names[i]);
        for (unsigned i = 0; i < core_hf_files_n; i++)
            inval_entry(fd, INO_HF, core_hf_files[i].name);
        inval_inode(fd, INO_ROOT);
        return;
    }
    struct state *st = core_state_current(fs);
    if (st) {
        for (uint64_t i = 0; i < st_meta(st)->n_kv; i++) {
            inval_entry(fd, INO_META, st->meta_names.names[i]);
            inval_inode(fd, KV_BASE + st->kv_id[i]);
        }
        core_state_put(st);
    }
    inval_inode(fd, INO_META);
}

static void *queue_main(void *arg)
{
    struct queue *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->sweeps && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->head) {
            struct note *n = q->head;
            q->head = n->next;
            if (!q->head)
                q->tail = &q->head;
            pthread_mutex_unlock(&q->mu);
            send_note(q->fs, n);
            free(n);
            pthread_mutex_lock(&q->mu);
            q->done++;
        } else if (q->sweeps) {
            /* after every note queued before the loss: the sweep comes
             * last, so an older note cannot undo it */
            uint64_t k = q->sweeps;
            q->sweeps = 0;
            pthread_mutex_unlock(&q->mu);
            sweep(q->fs, q->is_meta);
            pthread_mutex_lock(&q->mu);
            q->done += k;
        } else {
            break;
        }
        pthread_cond_broadcast(&q->done_cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* Queues n; false (n not taken) when the queue's thread is not running. */
static bool queue_put(struct queue *q, struct note *n)
{
    pthread_mutex_lock(&q->mu);
    bool ok = q->running && !q->stop;
    if (ok) {
        *q->tail = n;
        q->tail = &n->next;
        q->queued++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return ok;
}

static void queue_wait(struct queue *q)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    pthread_mutex_lock(&q->mu);
    uint64_t want = q->queued;
    while (q->running && q->done < want)
        if (pthread_cond_timedwait(&q->done_cv, &q->mu, &until) != 0)
            break;
    pthread_mutex_unlock(&q->mu);
}

/* A note for q could not be made: the caches' timeouts turn down for the
 * rest of the mount, and q's thread sweeps (it counts for waiters). */
static void lose(struct mount *fs, struct queue *q)
{
    atomic_fetch_add(&fs->notes_lost, 1);
    pthread_mutex_lock(&q->mu);
    if (q->running && !q->stop) {
        q->sweeps++;
        q->queued++;
        pthread_cond_signal(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
}

static int queue_start(struct mount *fs, struct queue *q, bool is_meta)
{
    q->fs = fs;
    q->is_meta = is_meta;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    q->tail = &q->head;
    q->stop = false;
    int e = cache_thread_start(&q->thread, queue_main, q);
    q->running = e == 0;
    if (e) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        pthread_cond_destroy(&q->done_cv);
    }
    return e;
}

/* Sends what is queued, then ends the thread. */
static void queue_stop(struct queue *q)
{
    if (!q->running)
        return;
    pthread_mutex_lock(&q->mu);
    q->stop = true;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    q->running = false;
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    pthread_cond_destroy(&q->done_cv);
}

static void note(struct mount *fs, struct queue *q, bool entry, fuse_ino_t ino,
                 const char *name)
{
    size_t len = name ? strlen(name) + 1 : 0;
    struct note *n = calloc(1, sizeof *n + len);
    if (!n)
        return lose(fs, q);
    n->entry = entry;
    n->ino = ino;
    if (len)
        memcpy(n->name, name, len);
    if (!queue_put(q, n)) {
        free(n);
        lose(fs, q);
    }
}

static void swapped(struct mount *fs, const struct state *old, const struct state *ns);

int ggfs_notify_start(struct mount *fs)
{
    struct notify *nt = calloc(1, sizeof *nt);
    if (!nt)
        return ENOMEM;
    nt->fd = -1;
    if (fs->se) {
        nt->fd = fcntl(fuse_session_fd(fs->se), F_DUPFD_CLOEXEC, 3);
        if (nt->fd < 0) {
            int e = errno;
            free(nt);
            return e;
        }
    }
    fs->notify = nt;
    atomic_store(&fs->free_later, ggfs_notify_free_state);
    atomic_store(&fs->swapped, swapped);
    int e = queue_start(fs, &nt->meta, true);
    if (!e)
        e = queue_start(fs, &nt->root, false);
    if (!e)
        e = queue_start(fs, &nt->free, false);
    if (e)
        ggfs_notify_stop(fs);       /* the threads that did start */
    return e;
}

void ggfs_notify_stop(struct mount *fs)
{
    struct notify *nt = fs->notify;
    if (!nt)
        return;
    atomic_store(&fs->free_later, NULL);
    atomic_store(&fs->swapped, NULL);
    queue_stop(&nt->root);
    queue_stop(&nt->meta);
    queue_stop(&nt->free);
    if (nt->fd >= 0)
        close(nt->fd);          /* after the threads: none writes to it now */
    fs->notify = NULL;
    free(nt);
}

void ggfs_notify_meta_entry(struct mount *fs, const char *name)
{
    if (fs->notify)
        note(fs, &fs->notify->meta, true, INO_META, name);
}

void ggfs_notify_inode(struct mount *fs, fuse_ino_t ino)
{
    if (fs->notify)
        note(fs, &fs->notify->meta, false, ino, NULL);
}

void ggfs_notify_versions(struct mount *fs)
{
    if (!fs->notify)
        return;
    for (size_t i = 0; i < sizeof version_names / sizeof *version_names; i++)
        note(fs, &fs->notify->root, true, INO_ROOT, version_names[i]);
    for (unsigned i = 0; i < core_hf_files_n; i++)
        note(fs, &fs->notify->root, true, INO_HF, core_hf_files[i].name);
}

bool ggfs_notify_free_state(struct mount *fs, struct state *st)
{
    if (!fs->notify)
        return false;
    struct note *n = calloc(1, sizeof *n);
    if (!n)
        return false;
    n->free_state = st;
    if (queue_put(&fs->notify->free, n))
        return true;
    free(n);
    return false;
}

void ggfs_notify_wait_root(struct mount *fs)
{
    if (fs->notify)
        queue_wait(&fs->notify->root);
}

void ggfs_notify_wait_all(struct mount *fs)
{
    if (fs->notify) {
        queue_wait(&fs->notify->root);
        queue_wait(&fs->notify->meta);
    }
}

/* ---- a new version made current ------------------------------------------ */

/* fs->swapped (core_state_swap): old was current, ns is now.  Tells the
 * kernel: info, info.json, model.gguf and model.safetensors of the new
 * version are new inodes, found by the next lookup while open ones keep
 * theirs (see core/mount.h); every name and file of the old meta/ may have
 * changed (values, sizes, which names exist).  The commit returns once
 * the root names are invalidated; flush also waits for meta/'s. */
static void swapped(struct mount *fs, const struct state *old, const struct state *ns)
{
    ggfs_notify_versions(fs);
    for (uint64_t i = 0; i < st_meta(old)->n_kv; i++) {
        ggfs_notify_meta_entry(fs, old->meta_names.names[i]);
        ggfs_notify_inode(fs, KV_BASE + old->kv_id[i]);
    }
    for (uint64_t i = 0; i < st_meta(ns)->n_kv; i++)
        ggfs_notify_meta_entry(fs, ns->meta_names.names[i]);
    ggfs_notify_inode(fs, INO_META);
    ggfs_notify_inode(fs, FUSE_ROOT_ID);     /* a listing the kernel keeps */
    ggfs_notify_wait_root(fs);
}

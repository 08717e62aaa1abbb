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
 *                    lock waits for the commit lock (fs/ops.c answers
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
 */
#include "fs.h"
#include "notify.h"
#include "state.h"
#include "cache/thread.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct note {
    struct state *free_state;      /* or: a retired state to free */
    bool entry;                    /* inval_entry(parent, name) or inval_inode */
    fuse_ino_t ino;
    char *name;
    struct note *next;
};

struct queue {
    struct ggfs *fs;
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* a note was queued, or stop */
    pthread_cond_t done_cv;        /* a note was sent */
    struct note *head, **tail;
    uint64_t queued, done;         /* notes ever queued / sent */
    pthread_t thread;
    bool running, stop;
};

struct notify {
    struct queue meta, root, free;
};

static void send_note(struct ggfs *fs, const struct note *n)
{
    if (n->free_state)
        ggfs_state_free(n->free_state);
    else if (!fs->se)
        return;
    else if (n->entry)
        fuse_lowlevel_notify_inval_entry(fs->se, n->ino, n->name, strlen(n->name));
    else
        fuse_lowlevel_notify_inval_inode(fs->se, n->ino, 0, 0);
}

static void *queue_main(void *arg)
{
    struct queue *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop)
            pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head)
            break;
        struct note *n = q->head;
        q->head = n->next;
        if (!q->head)
            q->tail = &q->head;
        pthread_mutex_unlock(&q->mu);
        send_note(q->fs, n);
        free(n->name);
        free(n);
        pthread_mutex_lock(&q->mu);
        q->done++;
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

static int queue_start(struct ggfs *fs, struct queue *q)
{
    q->fs = fs;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pthread_cond_init(&q->done_cv, NULL);
    q->tail = &q->head;
    q->stop = false;
    int e = ggfs_thread_start(&q->thread, queue_main, q);
    q->running = e == 0;
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

static void note(struct queue *q, bool entry, fuse_ino_t ino, const char *name)
{
    struct note *n = calloc(1, sizeof *n);
    if (!n)
        return;
    n->entry = entry;
    n->ino = ino;
    n->name = name ? strdup(name) : NULL;
    if ((entry && !n->name) || !queue_put(q, n)) {
        free(n->name);
        free(n);
    }
}

int ggfs_notify_start(struct ggfs *fs)
{
    struct notify *nt = calloc(1, sizeof *nt);
    if (!nt)
        return ENOMEM;
    fs->notify = nt;
    int e = queue_start(fs, &nt->meta);
    if (!e)
        e = queue_start(fs, &nt->root);
    return e ? e : queue_start(fs, &nt->free);
}

void ggfs_notify_stop(struct ggfs *fs)
{
    struct notify *nt = fs->notify;
    if (!nt)
        return;
    queue_stop(&nt->root);
    queue_stop(&nt->meta);
    queue_stop(&nt->free);
    fs->notify = NULL;
    free(nt);
}

void ggfs_notify_meta_entry(struct ggfs *fs, const char *name)
{
    if (fs->notify)
        note(&fs->notify->meta, true, INO_META, name);
}

void ggfs_notify_inode(struct ggfs *fs, fuse_ino_t ino)
{
    if (fs->notify)
        note(&fs->notify->meta, false, ino, NULL);
}

void ggfs_notify_root_entry(struct ggfs *fs, const char *name)
{
    if (fs->notify)
        note(&fs->notify->root, true, INO_ROOT, name);
}

void ggfs_notify_hf_entry(struct ggfs *fs, const char *name)
{
    if (fs->notify)
        note(&fs->notify->root, true, INO_HF, name);
}

bool ggfs_notify_free_state(struct ggfs *fs, struct state *st)
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

void ggfs_notify_wait_root(struct ggfs *fs)
{
    if (fs->notify)
        queue_wait(&fs->notify->root);
}

void ggfs_notify_wait_all(struct ggfs *fs)
{
    if (fs->notify) {
        queue_wait(&fs->notify->root);
        queue_wait(&fs->notify->meta);
    }
}

/*
 * core/underneath.c — noticing that another program changed a local model
 * while it is mounted (`cp other.gguf MODEL.gguf`, `dd conv=notrunc`, a
 * truncate: the same inode written in place).
 *
 * gguffs serves tensor bytes from the file and keeps only the header in
 * memory, so once the file's bytes are not those it indexed, a tensor read
 * would give another file's bytes (or zeros past a cut), and an edit would
 * write this mount's header over the other file.  So:
 *
 *   - Each state records, per shard, what fstat said of the file it opened
 *     (struct fsig: device, inode, size, mtime, ctime).  Before a tensor's
 *     bytes are spliced from a shard (raw, model.gguf's data) and after a
 *     chunk's bytes were read for f32, the shard's descriptor is fstat'ed
 *     (one system call, no I/O) and compared: any difference marks the
 *     mount changed (UNDER_CHANGED, for good: remount to see the file), and
 *     every such read fails with EIO from then on.  What gguffs' caches
 *     already hold (f32 chunks, the kernel's pages) is still served: it is
 *     this version's.  meta/, info and type/shape are this version's too,
 *     from memory, and keep working; info says what happened.
 *   - ctime counts: chmod or chown of the model count as a change, since
 *     a write whose mtime was put back (cp -p, rsync -t, touch -d) differs
 *     from the file gguffs read only by its ctime.  Except when the link
 *     count changed too: removing the model, or renaming another file over
 *     it, changes the ctime of the file gguffs holds, not its bytes (only
 *     inode, size and mtime are compared then).
 *   - The paths: a file put in the model's place by rename (or the model
 *     removed) leaves the mount on the file it opened, as for any open
 *     file; the check of a whole state (info, stats, every edit) also
 *     stat()s each shard's path and marks UNDER_REPLACED when it names
 *     another inode.  Reads go on from the old file; edits are refused,
 *     since they would write the path's new file.
 *   - inotify watches every shard for IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE,
 *     IN_MOVE_SELF and IN_DELETE_SELF; an event only triggers the check of
 *     the current state, so that info, stats and the log know of a change
 *     before any read.  The check itself is the truth (events carry no
 *     pid: gguffs cannot tell its own from another program's).
 *   - Every edit (open for writing, create, rename, unlink, setxattr: see
 *     core_write_check) and every commit runs the check of the whole state
 *     first, under commit_mu, and is refused with EIO, logged, once the
 *     mount is marked.
 *   - A mount that never writes follows the edits of a read-write gguffs
 *     mount of the same model (follow.h): where shard 0's fstat or its
 *     path differ, the records that mount keeps beside the model decide
 *     before anything is marked (a commit under way: the header is being
 *     written, tensor bytes are served; edits recorded from the signature
 *     known to the file's now: learned, served; anything else: marked as
 *     above).  Its inotify thread also watches the model's folder (events
 *     naming the model or the records' file: the close that ends a
 *     commit) and, after the check, adopts the new version.
 *
 * gguffs' own edits write the model too (in place: the header, mtime and
 * ctime change; a rewrite: a new inode renamed over the path, and the old
 * inode's ctime changes as its link goes).  The race: a reader that
 * fstat()s while a commit is writing sees times that no state records yet.
 * It is closed with a sequence under sig_mu: core_under_begin sets
 * own_writing before the commit's first write; core_under_end, after its
 * last write and the re-open, fstat()s every live state's shard 0 again,
 * records that, clears own_writing and increments own_epoch.  A check
 * copies the recorded sig, own_writing and own_epoch under sig_mu, then
 * fstat()s without it, then looks at own_writing and own_epoch again: a
 * difference counts only when no commit was writing at either look and
 * none ended in between (else it compares again with what that commit
 * recorded; while a commit writes, shard 0 is taken as unchanged).  Every
 * commit first checks under commit_mu, with no writer possible, so a
 * change made before it is never absorbed.  What remains: a change by
 * another program made *while* gguffs commits (milliseconds for an
 * in-place edit, the copy of a rewrite) is taken for gguffs' own, as is
 * one within the same timestamp tick after it that keeps the size on a
 * file system with coarse timestamps; both are a race with gguffs' own
 * writing of the file, which the OFD lock cannot stop (cp does not look
 * at locks).
 */
#include "core/underneath.h"
#include "core/follow.h"
#include "core/log.h"
#include "core/model.h"
#include "core/state.h"
#include "cache/thread.h"
#include "remote/source.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#define WATCH_MASK (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVE_SELF | IN_DELETE_SELF)

static bool ts_eq(struct timespec a, struct timespec b)
{
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* The same bytes: the same inode, size and mtime, and the same ctime
 * unless the link count changed (the model removed or renamed over: its
 * ctime changes, its bytes do not). */
static bool sig_eq(const struct fsig *a, const struct fsig *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           ts_eq(a->mtime, b->mtime) && (a->nlink != b->nlink || ts_eq(a->ctime, b->ctime));
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* Marks the mount (bit), once per bit logged. */
static void mark(struct mount *fs, int bit, const char *file, const struct timespec *when)
{
    pthread_mutex_lock(&fs->sig_mu);
    if (!atomic_load(&fs->under)) {
        snprintf(fs->under_file, sizeof fs->under_file, "%s", file);
        if (when)
            fs->under_when = *when;
        else
            clock_gettime(CLOCK_REALTIME, &fs->under_when);
    }
    int old = atomic_fetch_or(&fs->under, bit);
    pthread_mutex_unlock(&fs->sig_mu);
    if (old & bit)
        return;
    if (bit == UNDER_CHANGED)
        core_log(LOG_ERR, "gguffs: %s: changed underneath: %s was modified by another "
                 "program; reads of tensor data not cached fail with EIO and edits are "
                 "refused; remount to see it\n", fs->model_path, file);
    else
        core_log(LOG_ERR, "gguffs: %s: replaced underneath: %s now names another file "
                 "(renamed over or removed); the mount still reads the file it opened, "
                 "edits are refused; remount to see the new one\n", fs->model_path, file);
}

static bool local(const struct mount *fs, const struct state *st, unsigned i)
{
    return !fs->remote && !fs->overlay && i < st->model->n && st->sig &&
           st->model->shards[i].src->fd >= 0;
}

/* true when shard i is not as recorded (the mount is then marked) */
static bool changed(struct mount *fs, const struct state *st, unsigned i)
{
    if (atomic_load(&fs->under) & UNDER_CHANGED)
        return true;
    for (int tries = 0; tries < 4; tries++) {
        pthread_mutex_lock(&fs->sig_mu);
        struct fsig want = st->sig[i];
        bool w1 = fs->own_writing;
        uint64_t e1 = fs->own_epoch;
        pthread_mutex_unlock(&fs->sig_mu);
        struct fsig now;
        if (!core_sig_take(st->model->shards[i].src->fd, &now))
            return false;       /* cannot tell: the read itself will say */
        if (sig_eq(&want, &now))
            return false;
        if (w1 && i == 0)
            return false;       /* gguffs is writing it (see the top) */
        pthread_mutex_lock(&fs->sig_mu);
        bool w2 = fs->own_writing;
        uint64_t e2 = fs->own_epoch;
        pthread_mutex_unlock(&fs->sig_mu);
        if (w2 && i == 0)
            return false;
        if (e1 != e2)
            continue;           /* a commit ended meanwhile: compare again */
        if (i == 0 && core_follows(fs)) {
            /* a read-only mount: another gguffs' edit of the header? */
            enum follow_verdict v = core_follow_check(fs, &want, &now);
            if (v == FOLLOW_BUSY)
                return false;   /* its commit is under way (follow.h) */
            if (v == FOLLOW_OK)
                continue;       /* verified and learned: compare again */
        }
        mark(fs, UNDER_CHANGED, st->model->shards[i].src->name, &now.mtime);
        return true;
    }
    return false;
}

int core_under_check_shard(struct mount *fs, const struct state *st, unsigned i)
{
    if (!local(fs, st, i) || !changed(fs, st, i))
        return 0;
    atomic_fetch_add(&fs->under_eio, 1);
    return EIO;
}

int core_under_check(struct mount *fs, const struct state *st)
{
    for (unsigned i = 0; i < st->model->n; i++) {
        if (!local(fs, st, i))
            continue;
        changed(fs, st, i);
        if (atomic_load(&fs->under) & UNDER_REPLACED)
            continue;
        /* shard 0: the file gguffs last put there, which need not be
         * st's (st may be a version a rewrite of gguffs' own replaced);
         * other shards: st's, gguffs never writes them */
        pthread_mutex_lock(&fs->sig_mu);
        dev_t dev = i ? st->sig[i].dev : fs->path_dev;
        ino_t ino = i ? st->sig[i].ino : fs->path_ino;
        bool w1 = fs->own_writing;
        uint64_t e1 = fs->own_epoch;
        pthread_mutex_unlock(&fs->sig_mu);
        struct stat sb;
        const char *path = st->model->shards[i].src->name;
        bool there = stat(path, &sb) == 0;
        bool same = there && sb.st_dev == dev && sb.st_ino == ino;
        if (same || w1)
            continue;           /* a rewrite of gguffs' own puts a new file there */
        pthread_mutex_lock(&fs->sig_mu);
        bool quiet = !fs->own_writing && fs->own_epoch == e1;
        pthread_mutex_unlock(&fs->sig_mu);
        if (quiet && there && i == 0 && core_follows(fs)) {
            /* a read-only mount: another gguffs' rewrite (follow.h)?  The
             * inotify thread then opens the new file */
            struct fsig now = { sb.st_dev, sb.st_ino, sb.st_size, sb.st_nlink, sb.st_mtim,
                                sb.st_ctim };
            if (core_follow_path(fs, &now) != FOLLOW_NO)
                continue;
        }
        if (quiet)
            mark(fs, UNDER_REPLACED, path, NULL);
    }
    return atomic_load(&fs->under);
}

void core_under_begin(struct mount *fs)
{
    pthread_mutex_lock(&fs->sig_mu);
    fs->own_writing = true;
    pthread_mutex_unlock(&fs->sig_mu);
}

void core_under_end(struct mount *fs)
{
    /* every live version's first shard as the commit left it: the file
     * written in place, or the old file renamed over (its ctime) */
    pthread_mutex_lock(&fs->states_mu);
    pthread_mutex_lock(&fs->sig_mu);
    for (struct glist *l = fs->states.next; l != &fs->states; l = l->next) {
        struct state *st = GLIST_ENTRY(l, struct state, link);
        if (local(fs, st, 0))
            core_sig_take(st->model->shards[0].src->fd, &st->sig[0]);
    }
    /* the file at the path is the commit's (a rewrite renamed a new one
     * there) */
    struct stat sb;
    if (stat(fs->model_real, &sb) == 0) {
        fs->path_dev = sb.st_dev;
        fs->path_ino = sb.st_ino;
    }
    fs->own_writing = false;
    fs->own_epoch++;
    pthread_mutex_unlock(&fs->sig_mu);
    pthread_mutex_unlock(&fs->states_mu);
}

size_t core_under_line(struct mount *fs, char *buf, size_t cap)
{
    int u = atomic_load(&fs->under);
    if (!u || !cap)
        return 0;
    char when[64] = "?";
    struct tm tm;
    time_t t = fs->under_when.tv_sec;
    if (gmtime_r(&t, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n;
    if (u & UNDER_CHANGED)
        n = snprintf(buf, cap, "changed underneath: %s was modified by another program at %s; "
                     "tensor data not cached reads EIO, edits are refused; remount to see it\n",
                     base_name(fs->under_file), when);
    else
        n = snprintf(buf, cap, "replaced underneath: %s was replaced or removed by another "
                     "program (noticed at %s); this mount shows the file it opened, edits are "
                     "refused; remount to see the new one\n", base_name(fs->under_file), when);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

const char *core_under_why(struct mount *fs)
{
    int u = atomic_load(&fs->under);
    if (u & UNDER_CHANGED)
        return "the model was changed underneath by another program (remount to see it)";
    if (u & UNDER_REPLACED)
        return "the model was replaced underneath (renamed over or removed) by another "
               "program: an edit would write the new file (remount to edit it)";
    return NULL;
}

/* ---- inotify ---------------------------------------------------------------- */

/* Whether the n bytes of events at buf concern the model: any event of
 * a model file's watch; of the folder's (a follower's), those naming the
 * model (a rename over it) or the records' file (an edit recorded). */
static bool relevant(struct mount *fs, const char *buf, size_t n)
{
    const char *rec = core_follow_file(fs), *model = base_name(fs->model_real);
    for (size_t at = 0; at + sizeof(struct inotify_event) <= n;) {
        const struct inotify_event *ev = (const void *)(buf + at);
        size_t len = sizeof *ev + ev->len;
        if (len > n - at)
            return true;
        if ((ev->mask & IN_Q_OVERFLOW) || ev->wd != fs->in_dir_wd ||
            (ev->len && ((rec && strcmp(ev->name, rec) == 0) || strcmp(ev->name, model) == 0)))
            return true;
        at += len;
    }
    return false;
}

static void *watch_main(void *arg)
{
    struct mount *fs = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    struct pollfd pf[2] = { { fs->in_fd, POLLIN, 0 }, { fs->in_stop[0], POLLIN, 0 } };
    for (;;) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pf[1].revents)
            break;
        ssize_t n = read(fs->in_fd, buf, sizeof buf);
        if (n <= 0 && errno != EINTR && errno != EAGAIN)
            break;
        if (n <= 0 || atomic_load(&fs->under) == (UNDER_CHANGED | UNDER_REPLACED) ||
            !relevant(fs, buf, (size_t)n))
            continue;
        /* whatever the events, the check decides; a read-only mount then
         * adopts what another gguffs' edit made of the model (follow.h) */
        struct state *st = core_state_current(fs);
        core_under_check(fs, st);
        core_state_put(st);
        int r = core_follow_update(fs);
        if (r & (UNDER_CHANGED | UNDER_REPLACED))
            mark(fs, r & (UNDER_CHANGED | UNDER_REPLACED), fs->model_real, NULL);
        if (r & FOLLOW_NEW_FILE) {
            pthread_mutex_lock(&fs->commit_mu);
            core_under_rewatch(fs);
            pthread_mutex_unlock(&fs->commit_mu);
        }
    }
    return NULL;
}

void core_under_start(struct mount *fs)
{
    fs->in_fd = -1;
    fs->in_dir_wd = -1;
    if (fs->remote || fs->overlay || !fs->st->sig)
        return;
    pthread_mutex_lock(&fs->sig_mu);
    fs->path_dev = fs->st->sig[0].dev;
    fs->path_ino = fs->st->sig[0].ino;
    pthread_mutex_unlock(&fs->sig_mu);
    int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0)
        return;
    if (pipe(fs->in_stop) != 0) {
        close(fd);
        return;
    }
    fs->in_fd = fd;
    const struct gguf_split *m = fs->st->model;
    for (unsigned i = 0; i < m->n; i++)
        inotify_add_watch(fd, m->shards[i].src->name, WATCH_MASK);
    /* a follower: the folder too, for the records' file (its close after
     * a commit) and a rename over the model */
    const char *slash = strrchr(fs->model_real, '/');
    if (core_follows(fs) && slash) {
        char dir[4096];
        size_t dl = slash == fs->model_real ? 1 : (size_t)(slash - fs->model_real);
        if (dl < sizeof dir) {
            memcpy(dir, fs->model_real, dl);
            dir[dl] = '\0';
            fs->in_dir_wd = inotify_add_watch(fd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_ONLYDIR);
        }
    }
    if (cache_thread_start(&fs->in_thread, watch_main, fs) != 0) {
        close(fd);
        close(fs->in_stop[0]);
        close(fs->in_stop[1]);
        fs->in_fd = -1;
    }
}

void core_under_rewatch(struct mount *fs)
{
    if (fs->in_fd >= 0)
        inotify_add_watch(fs->in_fd, fs->st->model->shards[0].src->name, WATCH_MASK);
}

void core_under_stop(struct mount *fs)
{
    if (fs->in_fd < 0)
        return;
    char c = 0;
    if (write(fs->in_stop[1], &c, 1) != 1)
        return;                 /* cannot happen: leave the thread */
    pthread_join(fs->in_thread, NULL);
    close(fs->in_fd);
    close(fs->in_stop[0]);
    close(fs->in_stop[1]);
    fs->in_fd = -1;
}

/* ---- a source's failure, said ----------------------------------------------- */

void core_source_failed(struct mount *fs, struct gguf_source *src, uint64_t pos, uint64_t len)
{
    struct remote *r = core_remote(src, fs->remote);
    struct gguf_diag d;
    if (!r || !remote_error_at(r, pos, len, &d))
        return;
    /* A remote that changed fails every read not yet cached: say so once.
     * Other failures (after the retries) are rare enough to log each. */
    if (remote_changed(r) && atomic_exchange(&fs->changed_logged, true))
        return;
    core_log(LOG_ERR, "gguffs: %s\n", d.msg);
}

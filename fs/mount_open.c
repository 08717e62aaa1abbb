/*
 * fs/mount_open.c — opening the model for a mount: local or remote, the
 * overlay, the one-writer lock (see mount_open.h).
 */
#include "fs.h"
#include "mount_open.h"
#include "core/model.h"
#include "options.h"
#include "core/overlay.h"
#include "remote_setup.h"
#include "core/state.h"
#include "core/follow.h"

#include "cache/blocksrc.h"
#include "gguf/commit.h"
#include "gguf/overlay.h"
#include "remote/http.h"
#include "remote/s3.h"
#include "remote/source.h"
#include "remote/url.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pid_t lock_holder(int fd, char comm[64]);


/* How long a mount waits for what another process holds of its model: the
 * model's write lock (one writer per model), the overlay's, the disk
 * cache.  That process is most often a gguffs just unmounted: fusermount3
 * -u returns before the old process has flushed and exited, and a remount
 * right away would otherwise be refused (the lock) or read everything
 * from the server again (the cache).  Beside a live mount the wait ends
 * after this long, and the mount is refused or reads without the cache. */
#define HELD_WAIT_MS 10000        /* the messages say 10 s */
#define HELD_RETRY_MS 20

/* true after a pause of HELD_RETRY_MS, if less than HELD_WAIT_MS have
 * passed since t0; false once they have (no pause then). */
bool ggfs_held_wait_more(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long ms = (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
    if (ms >= HELD_WAIT_MS)
        return false;
    struct timespec retry = { 0, HELD_RETRY_MS * 1000000L };
    nanosleep(&retry, NULL);
    return true;
}


/* Who holds the write lock on the file open at fd (another gguffs, with its
 * pid; another program; unknown), for the lines that say so: "another
 * gguffs mounts it read-write (pid 1234)". */
static void say_holder(int fd, char *out, size_t cap)
{
    char comm[64];
    pid_t pid = fd >= 0 ? lock_holder(fd, comm) : 0;
    if (pid && strcmp(comm, "gguffs") == 0)
        snprintf(out, cap, "another gguffs mounts it read-write (pid %d)", (int)pid);
    else if (pid)
        snprintf(out, cap, "%s (pid %d) holds a write lock on it", comm[0] ? comm : "a process",
                 (int)pid);
    else
        snprintf(out, cap, "another gguffs mounts it read-write (or another program holds a "
                 "write lock on it)");
}

/* Said at once when a lock is found held, before the wait: what holds it
 * and how long gguffs waits for it (an unmounted gguffs still exiting lets
 * go within it). */
static void say_waiting(const char *name, int fd)
{
    char who[160];
    say_holder(fd, who, sizeof who);
    fprintf(stderr, "gguffs: %s: %s; waiting up to 10 s for it to end (a gguffs just "
            "unmounted may still be exiting)\n", name, who);
}

/* -o overlay: the remote model just opened becomes fs->base (closed at
 * the end), and *model the one the overlay's edits make; false after a
 * one-line error naming the overlay file. */
static bool open_overlay(struct mount *fs, const struct options *o, struct gguf_split **model)
{
    char why[512];
    char *path = core_overlay_path(o->overlay, !o->ro, why, sizeof why);
    if (!path) {
        fprintf(stderr, "gguffs: overlay=%s: %s\n", o->overlay, why);
        gguf_split_close(*model);
        return false;
    }
    fs->overlay = path;
    fs->base = *model;
    *model = NULL;
    /* one writer per overlay, as per local model: its lock before the
     * leftover below is removed (it could be another mount's edit) */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int le;
    bool said = false;
    while ((le = o->ro ? 0 : core_overlay_lock(path, &fs->lock_fd)) == EAGAIN) {
        if (!said) {
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            say_waiting(path, fd);
            if (fd >= 0)
                close(fd);
            said = true;
        }
        if (!ggfs_held_wait_more(&t0))
            break;
    }
    if (le == EAGAIN) {
        char who[160];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        say_holder(fd, who, sizeof who);
        if (fd >= 0)
            close(fd);
        fprintf(stderr, "gguffs: %s: %s; -o ro mounts it read-only meanwhile (waited 10 s)\n",
                path, who);
        return false;
    }
    /* a write that a crash interrupted before its rename: the overlay is
     * the old one, the new file a leftover */
    if (!o->ro && gguf_overlay_clean(path) != 0)
        fprintf(stderr, "gguffs: %s%s: %s (left there)\n", path, GGUF_NEW_SUFFIX,
                strerror(errno));
    struct gguf_diag d;
    if (core_overlay_model(path, fs->base, &fs->overlay_sum, model, &d) != GGUF_OK) {
        ggfs_refuse(path, &d);
        return false;
    }
    return true;
}

/* The process (other than this one) whose open file description holds an
 * OFD write lock on the file open at fd, and its name (comm); 0 if none
 * is found (another user's, no /proc).  Only when a mount is refused. */
static pid_t lock_holder(int fd, char comm[64])
{
    struct stat want;
    DIR *procs = fstat(fd, &want) == 0 ? opendir("/proc") : NULL;
    if (!procs)
        return 0;
    pid_t found = 0;
    struct dirent *pe;
    while (!found && (pe = readdir(procs)) != NULL) {
        char *end;
        long pid = strtol(pe->d_name, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid())
            continue;
        char path[320];
        snprintf(path, sizeof path, "/proc/%ld/fdinfo", pid);
        DIR *fds = opendir(path);
        if (!fds)
            continue;
        struct dirent *fe;
        while (!found && (fe = readdir(fds)) != NULL) {
            if (fe->d_name[0] < '0' || fe->d_name[0] > '9')
                continue;
            struct stat s;
            snprintf(path, sizeof path, "/proc/%ld/fd/%s", pid, fe->d_name);
            if (stat(path, &s) != 0 || s.st_dev != want.st_dev || s.st_ino != want.st_ino)
                continue;
            snprintf(path, sizeof path, "/proc/%ld/fdinfo/%s", pid, fe->d_name);
            char buf[1024];
            int ifd = open(path, O_RDONLY | O_CLOEXEC);
            ssize_t n = ifd >= 0 ? read(ifd, buf, sizeof buf - 1) : -1;
            if (ifd >= 0)
                close(ifd);
            if (n <= 0)
                continue;
            buf[n] = '\0';
            const char *l = strstr(buf, "OFDLCK");
            if (l && strstr(l, "WRITE"))
                found = (pid_t)pid;
        }
        closedir(fds);
    }
    closedir(procs);
    comm[0] = '\0';
    if (found) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/comm", (int)found);
        FILE *f = fopen(path, "re");
        if (f) {
            if (fgets(comm, 64, f))
                comm[strcspn(comm, "\n")] = '\0';
            fclose(f);
        }
    }
    return found;
}

/* One writer per model: a read-write mount of a local model takes an OFD
 * write lock on the file edits go to (the first shard), before an
 * interrupted edit is recovered, kept for the life of the mount (the
 * descriptor is inherited by the daemon); a rewrite moves it to the new
 * file (commit.c).  A second read-write mount is refused; read-only
 * mounts take no lock.  A model that cannot be opened for writing (a
 * read-only file system, a file gguffs may not write), or whose folder
 * gguffs may not write (an edit writes its journal or new file there), is
 * mounted with meta/ read-only and every edit failing at open with EROFS
 * or EACCES, said on stderr in one line.  false after a one-line error. */
static bool lock_model(struct mount *fs, const char *real, const char *given)
{
    size_t plen;
    unsigned no, count;
    char *first = NULL;
    if (gguf_split_name_parse(real, &plen, &no, &count) && no != 1)
        first = gguf_split_name(real, plen, 1, count);
    const char *target = first ? first : real;
    int fd = open(target, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        /* a file that is not there or not a file: the open of the model
         * says so */
        if (e != ENOENT && e != EISDIR) {
            fs->write_err = e == EROFS ? EROFS : EACCES;
            fprintf(stderr, "gguffs: %s: cannot be written (%s): meta/ is read-only, edits "
                    "fail with %s\n", given, strerror(e), fs->write_err == EROFS ? "EROFS"
                                                                               : "EACCES");
        }
        free(first);
        return true;
    }
    /* the folder takes the journal, a rewrite's new file and its rename */
    const char *slash = strrchr(target, '/');
    char *dir = slash ? strndup(target, slash == target ? 1 : (size_t)(slash - target)) : NULL;
    if (dir && faccessat(AT_FDCWD, dir, W_OK | X_OK, 0) != 0) {
        int e = errno;
        fs->write_err = e == EROFS ? EROFS : EACCES;
        fprintf(stderr, "gguffs: %s: cannot be written: its folder %s is not writable by "
                "gguffs (%s; an edit writes its journal or new file there): meta/ is "
                "read-only, edits fail with %s\n", given, dir, strerror(e),
                fs->write_err == EROFS ? "EROFS" : "EACCES");
        free(dir);
        close(fd);
        free(first);
        return true;
    }
    free(dir);
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int lr, e = 0;
    bool said = false;
    while ((lr = fcntl(fd, F_OFD_SETLK, &l)) != 0 && ((e = errno) == EAGAIN || e == EACCES)) {
        if (!said)
            say_waiting(given, fd);
        said = true;
        if (!ggfs_held_wait_more(&t0))
            break;
    }
    if (lr != 0) {
        if (e == EAGAIN || e == EACCES) {
            char who[160];
            say_holder(fd, who, sizeof who);
            fprintf(stderr, "gguffs: %s: %s; -o ro mounts it read-only meanwhile (waited "
                    "10 s)\n", given, who);
            close(fd);
            free(first);
            return false;
        }
        /* no OFD locks here (EINVAL, ENOLCK): mounted, unguarded */
        fprintf(stderr, "gguffs: %s: cannot lock it (%s): a second read-write mount of it "
                "would not be refused\n", given, strerror(e));
        close(fd);
        fd = -1;
    }
    fs->lock_fd = fd;
    free(first);
    return true;
}

/* Opens and validates the model (every shard) and builds the first state:
 * before anything is mounted. */
bool ggfs_mount_model(struct mount *fs, const struct options *o)
{
    char *real = NULL, *token = NULL;
    struct remote_store *store = NULL;
    struct remote_opts ro = { 0 };
    struct gguf_diag d;
    enum gguf_err ge;
    struct gguf_split *model = NULL;
    if (o->remote) {
        if (!ggfs_remote_setup(o, &real, &token, &store, &ro))
            return false;
        /* the block cache of remote bytes: one fetch thread per connection */
        unsigned conns = o->connections ? o->connections : REMOTE_DEFAULT_CONNECTIONS;
        struct rcache_opts rco = { .block_bytes = (size_t)o->remote_block,
                                   .capacity = o->remote_cache,
                                   .fetchers = conns < BLOCKSRC_MAX_FETCHERS
                                               ? conns : BLOCKSRC_MAX_FETCHERS,
                                   .fail_hold_ms = BLOCKSRC_FAIL_HOLD_MS,
                                   .fail_slow_ms = BLOCKSRC_FAIL_SLOW_MS };
        fs->rcache = rcache_new(&rco);
        if (!fs->rcache) {
            fprintf(stderr, "gguffs: out of memory\n");
            free(real);
            ggfs_token_free(token);
            remote_store_free(store);
            return false;
        }
        ge = core_open_model(real, true, false, &ro, fs->rcache, NULL, 0, &model, &d);
        ggfs_token_free(token);
        remote_store_free(store);
    } else {
        /* Edits rename files beside the model and daemonizing changes to /:
         * keep the absolute path. */
        real = realpath(o->model, NULL);
        if (!real) {
            fprintf(stderr, "gguffs: %s: %s\n", o->model, strerror(errno));
            return false;
        }
        /* before an interrupted edit is recovered: that is a write */
        if (!o->ro && !lock_model(fs, real, o->model)) {
            free(real);
            return false;
        }
        char note[512];
        ge = core_open_model(real, o->ro || fs->write_err, false, NULL, NULL, note, sizeof note,
                             &model, &d);
        if (note[0])
            fuse_log(FUSE_LOG_WARNING, "gguffs: %s\n", note);
    }
    free(real);
    if (ge) {
        if (o->remote)
            ggfs_remote_refuse(o->model, &d);
        else
            ggfs_refuse(o->model, &d);
        return false;
    }
    if (o->remote && o->overlay && !open_overlay(fs, o, &model))
        return false;
    /* edits go to the first shard, wherever the user pointed */
    char *first = strdup(model->shards[0].name);
    int e = first ? core_state_new(fs, model, 0, &fs->st) : ENOMEM;
    if (e) {
        free(first);
        gguf_split_close(model);
        fprintf(stderr, "gguffs: %s: %s\n", fs->model_path, strerror(e));
        return false;
    }
    fs->model_real = first;
    return true;
}

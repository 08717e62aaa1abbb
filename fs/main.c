/*
 * fs/main.c — gguffs: mount a GGUF model file as a directory tree.
 *
 *   gguffs [options] MODEL.gguf MOUNTPOINT
 *
 * The model is opened and validated before anything is mounted: a bad file
 * is refused with one line on stderr and a non-zero exit.  Then the mount
 * is made, the process daemonizes (unless -f) and the parent returns once
 * the mount is in place.
 */
#include "fs.h"
#include "digest.h"
#include "f32.h"
#include "model.h"
#include "notify.h"
#include "ops.h"
#include "overlay.h"
#include "state.h"
#include "underneath.h"
#include "follow.h"
#include "whandle.h"
#include "cache/thread.h"
#include "cache/diskcache.h"
#include "log.h"
#include "options.h"
#include "devio.h"
#include "signals.h"

#include "gguf/info.h"
#include "cache/blocksrc.h"
#include "gguf/commit.h"
#include "gguf/overlay.h"
#include "remote/http.h"
#include "remote/source.h"
#include "remote/url.h"
#include "remote/s3.h"
#include "kernels/dequant.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

/* The one-line refusal: "gguffs: MODEL: what (at byte offset N)". */
static int refuse(const char *model, const struct gguf_diag *d)
{
    char line[1024];
    gguf_diag_format(d, model, line, sizeof line);
    fprintf(stderr, "gguffs: %s\n", line);
    return 1;
}

static int dump(const char *model)
{
    struct gguf_file *gf;
    struct gguf_diag d;
    if (gguf_open(model, &gf, &d) != GGUF_OK)
        return refuse(model, &d);
    struct gguf_buf b = { 0 };
    enum gguf_err e = gguf_info_render(gf, model, &b);
    if (e == GGUF_OK)
        fwrite(b.data, 1, b.len, stdout);
    gguf_buf_free(&b);
    gguf_close(gf);
    return e == GGUF_OK ? 0 : 1;
}

/* true if dir (with st and sf its stat and statfs) is the root of a FUSE
 * mount: mounting over it would hide a live mount (most often a gguffs
 * mounted there before). */
static bool already_fuse_mounted(const char *dir, const struct stat *st,
                                 const struct statfs *sf)
{
    if (sf->f_type != 0x65735546 /* FUSE_SUPER_MAGIC */)
        return false;
    char *parent = malloc(strlen(dir) + 4);
    if (!parent)
        return false;
    sprintf(parent, "%s/..", dir);
    struct stat pst;
    bool root = stat(parent, &pst) == 0 && pst.st_dev != st->st_dev;
    free(parent);
    return root;
}

/* The mount point can take the mount; else a one-line error, false. */
static bool check_mountpoint(const struct options *o)
{
    const char *mp = o->copts.mountpoint;
    /* "/dev/fd/N": mount.fuse3 -o drop_privileges made the mount and hands
     * over its /dev/fuse descriptor, which libfuse then uses as is. */
    unsigned fuse_fd;
    char tail;
    if (sscanf(mp, "/dev/fd/%u%c", &fuse_fd, &tail) == 1) {
        /* That mount lacks the default_permissions gguffs adds to its own
         * mounts: with allow_other, anyone could write meta/. */
        if (o->allow_other && !o->default_permissions) {
            fprintf(stderr, "gguffs: with drop_privileges, allow_other needs "
                    "default_permissions too (umount the mount point, mount again)\n");
            return false;
        }
        return true;
    }
    /* statfs too: on the root of a mount whose gguffs was killed, stat
     * may still answer from the attributes the kernel cached (for the
     * mount's timeout), statfs always asks the file system: ENOTCONN */
    struct stat mst;
    struct statfs sf;
    if (stat(mp, &mst) != 0 || statfs(mp, &sf) != 0) {
        options_mountpoint_error(mp, errno);
        return false;
    }
    if (!S_ISDIR(mst.st_mode)) {
        fprintf(stderr, "gguffs: %s: not a directory\n", mp);
        return false;
    }
    if (already_fuse_mounted(mp, &mst, &sf)) {
        fprintf(stderr, "gguffs: %s: already a FUSE mount point (unmount it first: "
                "fusermount3 -u %s)\n", mp, mp);
        return false;
    }
    return true;
}

/* libfuse opens /dev/fuse itself before it mounts (fusermount3, setuid
 * root, comes only after that open worked), so a user who may not open it
 * got libfuse's "fuse: failed to open /dev/fuse: Permission denied" and
 * then "cannot mount".  Checked here instead, before the model is opened
 * or anything fetched: one line with the cause and the fix.  Not for
 * "/dev/fd/N" (mount.fuse3 -o drop_privileges opened it already). */
static bool check_dev_fuse(const struct options *o)
{
    unsigned fuse_fd;
    char tail;
    if (sscanf(o->copts.mountpoint, "/dev/fd/%u%c", &fuse_fd, &tail) == 1)
        return true;
    int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return true;
    }
    int e = errno;
    const char *fix = NULL;
    if (e == EACCES || e == EPERM)
        fix = "an ordinary user needs read and write access to /dev/fuse (ls -l /dev/fuse; "
              "as root: chmod 0666 /dev/fuse, or a udev rule that makes it so)";
    else if (e == ENOENT || e == ENODEV || e == ENXIO)
        fix = "no FUSE in this kernel or container (as root: modprobe fuse; a container "
              "needs the device, e.g. docker run --device /dev/fuse)";
    fprintf(stderr, "gguffs: /dev/fuse: %s%s%s\n", strerror(e), fix ? ": " : "", fix ? fix : "");
    return false;
}

/* The one-line refusal of a remote model: the diag's own URL when it
 * names one (HTTP errors do), else the given one, redacted either way. */
static void remote_refuse(const char *model, struct gguf_diag *d)
{
    char shown[1024], line[1536];
    remote_text_redact(d->msg, sizeof d->msg);
    remote_url_redact_to(model, shown, sizeof shown);
    gguf_diag_format(d, strstr(d->msg, "://") ? NULL : shown, line, sizeof line);
    fprintf(stderr, "gguffs: %s\n", line);
}

/* The token for a remote model: -o bearer_token_file, else HF_TOKEN
 * (GOOGLE_OAUTH_ACCESS_TOKEN for gs://; none for s3://, whose requests
 * are signed), else none.  *tok is NULL (none) or malloc'd; false after a
 * one-line error. */
static bool read_token(const struct options *o, char **tok)
{
    *tok = NULL;
    if (!o->bearer_token_file) {
        const char *var = strncasecmp(o->model, "gs://", 5) == 0 ? "GOOGLE_OAUTH_ACCESS_TOKEN"
                        : strncasecmp(o->model, "s3://", 5) == 0 ? NULL : "HF_TOKEN";
        const char *env = var ? getenv(var) : NULL;
        if (env && *env && !(*tok = strdup(env))) {
            fprintf(stderr, "gguffs: out of memory\n");
            return false;
        }
        return true;
    }
    FILE *f = fopen(o->bearer_token_file, "re");
    if (!f) {
        fprintf(stderr, "gguffs: bearer_token_file=%s: %s\n", o->bearer_token_file,
                strerror(errno));
        return false;
    }
    char buf[8192];
    size_t n = fread(buf, 1, sizeof buf, f);
    bool big = n == sizeof buf;
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    bool ctl = false;
    for (size_t i = 0; i < n; i++)
        ctl |= (unsigned char)buf[i] < 0x20 || buf[i] == 0x7f;
    if (big || ctl || n == 0) {
        fprintf(stderr, "gguffs: bearer_token_file=%s: %s\n", o->bearer_token_file,
                big ? "larger than 8 KiB" : ctl ? "holds control characters besides "
                "a final newline" : "empty");
        explicit_bzero(buf, sizeof buf);
        return false;
    }
    *tok = strndup(buf, n);
    explicit_bzero(buf, sizeof buf);
    if (!*tok)
        fprintf(stderr, "gguffs: out of memory\n");
    return *tok != NULL;
}

/* What opens a remote model, for a mount and for --dump: the URL to read
 * (*real: hf:// expanded; malloc'd, shown only redacted), the token
 * (*token: NULL or malloc'd; free_token), the object store of an s3:// or
 * gs:// model (*store: NULL or remote_store_free; its warning, a
 * credentials file others may read, printed here) and the options of
 * remote_open pointing at them.  False after a one-line error. */
static bool remote_setup(const struct options *o, char **real, char **token,
                         struct remote_store **store, struct remote_opts *ro)
{
    struct gguf_diag d;
    *real = *token = NULL;
    *store = NULL;
    if (remote_url_expand(o->model, real, &d) != GGUF_OK) {
        remote_refuse(o->model, &d);
        return false;
    }
    if (remote_store_is_store(o->model)) {
        struct remote_store_opts so = { .profile = o->aws_profile, .endpoint = o->s3_endpoint,
                                        .region = o->s3_region,
                                        .addressing = o->s3_addressing };
        if (remote_store_load(o->model, &so, store, &d) != GGUF_OK) {
            remote_refuse(o->model, &d);
            free(*real);
            *real = NULL;
            return false;
        }
        if ((*store)->warning)
            fprintf(stderr, "gguffs: warning: %s\n", (*store)->warning);
    }
    if (!read_token(o, token)) {
        free(*real);
        *real = NULL;
        remote_store_free(*store);
        *store = NULL;
        return false;
    }
    *ro = (struct remote_opts){ .url = *real, .store = *store, .bearer_token = *token,
                                .ca_file = o->ca_file, .connections = o->connections,
                                .timeout_s = o->timeout };
    return true;
}

static void free_token(char *token)
{
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
}

/* --dump URL: the summary --dump MODEL.gguf prints, named by the URL as a
 * mount's info names it (redacted).  Like a local --dump, it reads the one
 * file named (a shard is not opened with the others) and of it only the
 * header: the first request's prefix, and ranges after it when the header
 * is longer (remote/source.h). */
static int dump_remote(const struct options *o)
{
    char *real, *token;
    struct remote_store *store;
    struct remote_opts ro;
    if (!remote_setup(o, &real, &token, &store, &ro))
        return 1;
    struct gguf_source *src = NULL;
    struct gguf_file *gf = NULL;
    struct gguf_diag d;
    enum gguf_err e = remote_source_open(&ro, &src, &d);
    free_token(token);
    remote_store_free(store);
    free(real);
    if (e == GGUF_OK)
        e = gguf_open_source(src, &gf, &d);
    gguf_source_close(src);
    if (e != GGUF_OK) {
        remote_refuse(o->model, &d);
        return 1;
    }
    char *shown = remote_url_redact(o->model);
    struct gguf_buf b = { 0 };
    bool ok = shown && gguf_info_render(gf, shown, &b) == GGUF_OK && !b.oom;
    if (ok)
        fwrite(b.data, 1, b.len, stdout);
    else
        fprintf(stderr, "gguffs: out of memory\n");
    gguf_buf_free(&b);
    free(shown);
    gguf_close(gf);
    return ok ? 0 : 1;
}
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
static bool held_wait_more(const struct timespec *t0)
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
static bool open_overlay(struct ggfs *fs, const struct options *o, struct gguf_split **model)
{
    char why[512];
    char *path = ggfs_overlay_path(o->overlay, !o->ro, why, sizeof why);
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
    while ((le = o->ro ? 0 : ggfs_overlay_lock(fs)) == EAGAIN) {
        if (!said) {
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            say_waiting(path, fd);
            if (fd >= 0)
                close(fd);
            said = true;
        }
        if (!held_wait_more(&t0))
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
    if (ggfs_overlay_model(fs, model, &d) != GGUF_OK) {
        refuse(path, &d);
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
static bool lock_model(struct ggfs *fs, const char *real, const char *given)
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
        if (!held_wait_more(&t0))
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
static bool open_model(struct ggfs *fs, const struct options *o)
{
    char *real = NULL, *token = NULL;
    struct remote_store *store = NULL;
    struct remote_opts ro = { 0 };
    struct gguf_diag d;
    enum gguf_err ge;
    struct gguf_split *model = NULL;
    if (o->remote) {
        if (!remote_setup(o, &real, &token, &store, &ro))
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
            free_token(token);
            remote_store_free(store);
            return false;
        }
        ge = ggfs_open_model(real, true, false, &ro, fs->rcache, &model, &d);
        free_token(token);
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
        ge = ggfs_open_model(real, o->ro || fs->write_err, false, NULL, NULL, &model, &d);
    }
    free(real);
    if (ge) {
        if (o->remote)
            remote_refuse(o->model, &d);
        else
            refuse(o->model, &d);
        return false;
    }
    if (o->remote && o->overlay && !open_overlay(fs, o, &model))
        return false;
    /* edits go to the first shard, wherever the user pointed */
    char *first = strdup(model->shards[0].name);
    int e = first ? ggfs_state_new(fs, model, 0, &fs->st) : ENOMEM;
    if (e) {
        free(first);
        gguf_split_close(model);
        fprintf(stderr, "gguffs: %s: %s\n", fs->model_path, strerror(e));
        return false;
    }
    fs->model_real = first;
    return true;
}

/* -o cache_dir: made if missing, and usable, before anything is fetched;
 * kept as an absolute path (the daemon runs in /).  A directory that
 * cannot be used is a mount error: one line naming it, exit 1. */
static bool check_cache_dir(struct options *o)
{
    if (!o->cache_dir)
        return true;
    struct gguf_diag d;
    if (dcache_check_dir(o->cache_dir, &d) != GGUF_OK) {
        fprintf(stderr, "gguffs: %s\n", d.msg);
        return false;
    }
    char *real = realpath(o->cache_dir, NULL);
    if (!real) {
        fprintf(stderr, "gguffs: cache_dir=%s: %s\n", o->cache_dir, strerror(errno));
        return false;
    }
    free(o->cache_dir);
    o->cache_dir = real;
    return true;
}

/* A disk cache per shard of a remote model (-o cache_dir).  A shard whose
 * cache cannot be opened (another gguffs has it open; a file error) is read
 * without one, said once on stderr: the mount goes on.
 *
 * What names a shard's cache: its identity and its URL (redacted: no
 * credentials, no query), since an ETag names a version of one file, not a
 * file (nginx's, "mtime-size", is the same for two files of one size
 * written in the same second: the shards of a split model, often).  A
 * shard whose server sent neither ETag nor Last-Modified ("size:N") gets no
 * disk cache: a later version of the same size could not be told from
 * this one. */
static bool dc_read(void *ctx, uint64_t block, void *dst, size_t len)
{
    return dcache_read(ctx, block, dst, len);
}

static void dc_write(void *ctx, uint64_t block, const void *src, size_t len)
{
    dcache_write(ctx, block, src, len);
}

static bool dc_has(void *ctx, uint64_t block)
{
    return dcache_has(ctx, block);
}

static bool dc_hold(void *ctx, uint64_t block, size_t len, int *fd, uint64_t *pos)
{
    return dcache_hold(ctx, block, len, fd, pos);
}

static void dc_release(void *ctx, uint64_t block)
{
    dcache_release(ctx, block);
}

static void dc_check_ahead(void *ctx, uint64_t block)
{
    dcache_check_ahead(ctx, block);
}

static void open_dcache(struct ggfs *fs, const struct options *o)
{
    if (!o->cache_dir || !fs->remote)
        return;
    /* the shards as opened at mount, each wrapped by the block cache (an
     * overlay's versions read through fs->base's) */
    const struct gguf_split *m = fs->base ? fs->base : fs->st->model;
    fs->dcache_group = dcache_group_new();
    fs->dcache = calloc(m->n, sizeof *fs->dcache);
    if (!fs->dcache_group || !fs->dcache) {
        fprintf(stderr, "gguffs: %s: out of memory: no disk cache\n", fs->model_path);
        return;
    }
    fs->n_dcache = m->n;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned i = 0; i < m->n; i++) {
        struct remote *r = ggfs_remote(m->shards[i].src);
        if (!r)
            continue;
        const char *id = remote_identity(r), *url = remote_display_url(r);
        if (strncmp(id, "size:", 5) == 0) {
            fprintf(stderr, "gguffs: %s: disk cache: the server sends neither ETag nor "
                    "Last-Modified, a new version could not be told from this one; "
                    "reading without it\n", m->shards[i].src->name);
            continue;
        }
        char *key = malloc(strlen(id) + strlen(url) + 2);
        if (!key) {
            fprintf(stderr, "gguffs: %s: out of memory: no disk cache\n", fs->model_path);
            continue;
        }
        sprintf(key, "%s %s", id, url);
        struct gguf_diag d;
        enum gguf_err e;
        while ((e = dcache_open_in(fs->dcache_group, o->cache_dir, key,
                                   m->shards[i].src->size, (uint32_t)o->remote_block,
                                   o->cache_max, &fs->dcache[i], &d)) == GGUF_E_EXIST &&
               held_wait_more(&t0))
            ;
        free(key);
        if (e) {
            fprintf(stderr, "gguffs: %s: disk cache: %s%s; reading without it\n",
                    m->shards[i].src->name, d.msg,
                    e == GGUF_E_EXIST ? " (waited 10 s for it)" : "");
            continue;
        }
        /* the block cache's fills ask it first, and store what they fetch
         * (blocks of remote_block bytes, as the disk cache's); replies of
         * blocks it holds are spliced from its data file */
        struct blocksrc_disk disk = { .read = dc_read, .write = dc_write, .has = dc_has,
                                      .hold = dc_hold, .release = dc_release,
                                      .check_ahead = dc_check_ahead,
                                      .ctx = fs->dcache[i] };
        blocksrc_set_disk(m->shards[i].src, &disk);
    }
}

static void close_dcache(struct ggfs *fs)
{
    for (unsigned i = 0; i < fs->n_dcache; i++)
        dcache_close(fs->dcache[i]);
    free(fs->dcache);
    dcache_group_free(fs->dcache_group);
    fs->dcache = NULL;
    fs->n_dcache = 0;
    fs->dcache_group = NULL;
}

/* The id /proc gives our mount (fdinfo's mnt_id) and its device ("0:NN",
 * the name of its bdi in sysfs): the newest gguffs mount on mountpoint in
 * /proc/self/mountinfo; -1 if not found. */
static long long find_mount(const char *mountpoint, char dev[32])
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    long long id = -1;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        long long mid;
        char mp[4096], fstype[64], mm[32];
        if (sscanf(line, "%lld %*d %31s %*s %4095s", &mid, mm, mp) != 3)
            continue;
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(sep + 3, "%63s", fstype) != 1 || strcmp(fstype, "fuse.gguffs") != 0)
            continue;
        /* mountinfo escapes space, tab, newline and backslash as \ooo */
        char un[4096];
        size_t k = 0;
        for (const char *p = mp; *p && k + 1 < sizeof un; k++) {
            if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
                p[3] >= '0' && p[3] <= '7') {
                un[k] = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
                p += 4;
            } else {
                un[k] = *p++;
            }
        }
        un[k] = '\0';
        if (strcmp(un, mountpoint) == 0) {
            id = mid;
            memcpy(dev, mm, sizeof mm);
        }
    }
    free(line);
    fclose(f);
    return id;
}

/* The largest request that libfuse can still splice from a file: it
 * wants a pipe of the reply (16 bytes of header and the data) plus three
 * pages, and a pipe is at most /proc/sys/fs/pipe-max-size (1 MiB by
 * default) for a process without CAP_SYS_RESOURCE.  Larger replies are
 * read into a buffer allocated for each one, then written: twice the
 * copies, and a fresh buffer that costs a page fault per page.  At most
 * 1 MiB (the kernel's limit, FUSE_MAX_MAX_PAGES), at least 128 KiB; whole
 * pages.  1 MiB less 16 KiB by default. */
static uint32_t request_size(void)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned long pipe_max = 1ul << 20;
    FILE *f = fopen("/proc/sys/fs/pipe-max-size", "re");
    if (f) {
        if (fscanf(f, "%lu", &pipe_max) != 1)
            pipe_max = 1ul << 20;
        fclose(f);
    }
    unsigned long pg = page > 0 ? (unsigned long)page : 4096;
    unsigned long m = pipe_max > 4 * pg ? pipe_max - 4 * pg : 0;
    m -= m % pg;
    return m > (1ul << 20) ? 1u << 20 : m < (128ul << 10) ? 128u << 10 : (uint32_t)m;
}

/* Buffers for the blocks of a readahead window's requests and two more
 * (one across a border, one for the workers), at most the cache's. */
static void *reserve_main(void *arg)
{
    struct ggfs *fs = arg;
    cache_reserve(fs->cache, fs->readahead / fs->req_bytes + 2);
    return NULL;
}

static bool start_reserve(struct ggfs *fs, pthread_t *th)
{
    return ggfs_thread_start(th, reserve_main, fs) == 0;
}

/* Mounts, serves until unmounted or signalled, unmounts; the exit status. */
static int run_session(struct ggfs *fs, struct options *o, struct fuse_args *args)
{
    char *fsname = options_fsname(fs->model_path);
    if (!fsname || fuse_opt_add_arg(args, fsname) != 0 ||
        (o->remote && !o->overlay && fuse_opt_add_arg(args, "-oro") != 0) ||
        fuse_opt_add_arg(args, "-osubtype=gguffs") != 0 ||
        fuse_opt_add_arg(args, "-odefault_permissions") != 0) {
        free(fsname);
        fprintf(stderr, "gguffs: out of memory\n");
        return 1;
    }
    free(fsname);
    int ret = 1;
    struct fuse_session *se = fuse_session_new(args, &ggfs_ops, sizeof ggfs_ops, fs);
    if (!se)
        return 1;
    fs->se = se;
    /* from here a signal ends the session (signals.h), whenever it comes:
     * blocked in this thread (and so in every thread it starts), pending
     * until the signal thread, started after the fork, takes it */
    signals_attach(se);
    if (fuse_session_mount(se, o->copts.mountpoint) != 0) {
        fprintf(stderr, "gguffs: %s: cannot mount\n", o->copts.mountpoint);
        goto out_session;
    }
    /* an unmount reads as one, whichever error the kernel gives (devio.h) */
    devio_attach(se);
    /* from here every message is also kept for the log file (log.h) */
    ggfs_log_keep();
    char dev[32] = "";
    fs->mnt_id = find_mount(o->copts.mountpoint, dev);
    /* written by the first request after INIT (ops.c set_readahead) */
    memcpy(fs->bdi, dev, sizeof dev);
    /* a whole number of requests, so that every window of the kernel's
     * readahead is cut into whole requests, each one chunk of f32 */
    fs->readahead = o->readahead ? (o->readahead + fs->req_bytes / 2) / fs->req_bytes * fs->req_bytes : 0;
    if (o->readahead && !fs->readahead)
        fs->readahead = fs->req_bytes;
    bool ra = dev[0] && o->readahead;
    if (ra) {
        /* written by root only: without, the kernel's default stays (and
         * -o readahead given by the user is said to be ignored, once,
         * while stderr is still the user's) */
        char path[96];
        snprintf(path, sizeof path, "/sys/class/bdi/%s/read_ahead_kb", dev);
        if (access(path, W_OK) != 0) {
            int e = errno;
            if (o->readahead_given)
                fprintf(stderr, "gguffs: -o readahead ignored: %s: %s: %s (the kernel's "
                        "default stays)\n", path, strerror(e),
                        e == EACCES || e == EPERM ? "setting a mount's readahead needs root"
                                                  : "cannot be set");
            ra = false;
        }
    }
    atomic_store(&fs->ra_pending, ra);
    /* The mount exists now: requests queue until the loop runs, so the
     * parent may return; once it has, stderr is gone: if messages would
     * be lost then (no syslog daemon), it says first where they go. */
    if (!o->copts.foreground)
        ggfs_log_say_where();
    pid_t before = getpid();
    fuse_daemonize(o->copts.foreground);
    if (getpid() != before)
        ggfs_log_daemonized();      /* stderr is /dev/null now */
    /* after the fork (threads do not survive it, and a process forked
     * with threads running can inherit a lock one of them held: gguffs
     * forks with none of its own) */
    if (!signals_start()) {
        fuse_session_unmount(se);
        goto out_session;
    }
    /* Workers only help with cores to spare: the kernel sends the
     * requests of a readahead window at once and FUSE threads fill their
     * chunks in parallel, so one core goes to those, one to the reader.
     * With fewer, workers cost more than they give (measured on 2 CPUs:
     * more CPU per GB, more blocks, no gain in throughput). */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (fs->rcache)
        rcache_start(fs->rcache);
    ggfs_workers_start(fs, fs->threads >= 0 ? (unsigned)fs->threads
                           : ncpu > 2 ? (unsigned)(ncpu - 2) : 0);
    /* A few buffers for the first fills, made while the first requests
     * are on their way rather than by them (cache.h cache_reserve). */
    pthread_t reserve;
    bool reserving = start_reserve(fs, &reserve);
    /* without the notify threads an edit would leave the kernel's caches
     * stale for a year: then no session (the mount goes as at a signal) */
    int ne = ggfs_notify_start(fs);
    if (ne) {
        fuse_log(FUSE_LOG_ERR, "gguffs: cannot start the notify threads: %s\n", strerror(ne));
        fuse_session_exit(se);
    }
    ggfs_under_start(fs);
    signals_loop_enter();
    if (ne) {
        ret = -ne;
    } else if (o->copts.singlethread) {
        ret = fuse_session_loop(se);
    } else {
        struct fuse_loop_config *cfg = fuse_loop_cfg_create();
        fuse_loop_cfg_set_clone_fd(cfg, o->copts.clone_fd);
        if (o->copts.max_idle_threads <= 100000)      /* UINT_MAX: not given */
            fuse_loop_cfg_set_idle_threads(cfg, o->copts.max_idle_threads);
        if (o->copts.max_threads > 0 && o->copts.max_threads <= 100000)
            fuse_loop_cfg_set_max_threads(cfg, o->copts.max_threads);
        ret = fuse_session_loop_mt(se, cfg);
        fuse_loop_cfg_destroy(cfg);
    }
    signals_loop_leave();
    /* an unmount or a signal: a clean end; an error of /dev/fuse: not
     * (ECONNABORTED is an unmount, where devio_attach could not say so) */
    ret = ret < 0 && ret != -ECONNABORTED;
    if (reserving)
        pthread_join(reserve, NULL);
    ggfs_workers_stop(fs);
    ggfs_under_stop(fs);
    if (fs->rcache)
        rcache_stop(fs->rcache);
    /* Unmount before the notify threads are joined: a notification being
     * sent may wait for a kernel lock held by a request nobody will answer
     * now; unmounting aborts those requests and so frees it. */
    fuse_session_unmount(se);
    ggfs_notify_stop(fs);
    ggfs_edit_stop(fs);
    ggfs_opens_free(fs);
    ggfs_streams_free(fs);
out_session:
    fuse_session_destroy(se);
    return ret;
}

/* Memory freed by one request is kept for the next rather than given back
 * to the kernel: a first touch of a fresh page costs a fault, and on
 * virtual machines that shadow page tables several microseconds (an edit
 * of a 0.5 MB header spent a third of its time in faults on the buffers
 * it builds the header in, all freed and mapped again by the next edit).
 * Blocks up to 32 MiB (glibc's own upper bound for its moving threshold)
 * come from the heap, which is trimmed only past 128 MiB free at its top:
 * peak memory is unchanged; what stays after a peak is reused. */
static void keep_freed_memory(void)
{
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

int main(int argc, char *argv[])
{
    /* the loop's wake and SIGPIPE (signals.h) */
    signals_init();
    keep_freed_memory();
    struct options o;
    struct fuse_args args;
    int ret = 1;
    struct ggfs fs = { .mnt_id = -1, .timeout = 365.0 * 86400, .lock_fd = -1 };

    enum options_result r = options_parse(argc, argv, &o, &args);
    if (r != OPTS_RUN) {
        options_free(&o, &args);
        return r == OPTS_DONE ? 0 : 1;
    }
    if (o.dump) {
        ret = o.remote ? dump_remote(&o) : dump(o.model);
        options_free(&o, &args);
        return ret;
    }
    /* messages and mountinfo name a URL only without its credentials */
    char *shown = o.remote ? remote_url_redact(o.model) : NULL;
    if (o.remote && !shown) {
        fprintf(stderr, "gguffs: out of memory\n");
        options_free(&o, &args);
        return 1;
    }
    fs.model_path = o.remote ? shown : o.model;
    fs.remote = o.remote;
    fs.read_only = o.ro;
    fs.cache_size = o.cache_size;
    fs.threads = o.threads;
    fs.req_bytes = fs.chunk_bytes = request_size();
    /* Readers must not starve a commit waiting to swap the state in. */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&fs.lock, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&fs.commit_mu, NULL);
    pthread_mutex_init(&fs.states_mu, NULL);
    pthread_mutex_init(&fs.sig_mu, NULL);
    fs.in_fd = -1;
    fs.in_dir_wd = -1;
    pthread_mutex_init(&fs.pend_mu, NULL);
    glist_init(&fs.states);
    glist_init(&fs.live);
    glist_init(&fs.snaps);
    glist_init(&fs.st_opens);
    glist_init(&fs.streams);

    if (check_mountpoint(&o) && check_dev_fuse(&o) && check_cache_dir(&o) &&
        ggfs_log_open(o.copts.mountpoint, o.log_file) && open_model(&fs, &o)) {
        open_dcache(&fs, &o);
        ggfs_dequant_init();
        fs.cache = cache_new(fs.chunk_bytes + F32_CHUNK_SLACK, fs.cache_size, ggfs_fill_chunk, &fs);
        /* tensors never change: their stats and digests are kept per tensor */
        if (fs.cache && ggfs_digests_new(&fs, fs.st->n_tensors) == 0 &&
            ggfs_follow_init(&fs) == 0)
            ret = run_session(&fs, &o, &args);
        else
            fprintf(stderr, "gguffs: out of memory\n");
        ggfs_digests_free(&fs);
        cache_free(fs.cache);
        close_dcache(&fs);
        ggfs_state_put(fs.st);
        /* versions still held by opens whose release never came */
        while (!glist_empty(&fs.states)) {
            struct glist *l = fs.states.next;
            glist_del(l);
            ggfs_state_free(GLIST_ENTRY(l, struct state, link));
        }
    }
    gguf_split_close(fs.base);   /* after every version that borrowed it */
    free((char *)fs.overlay);
    rcache_put(fs.rcache);     /* freed with the last shard's source */
    ggfs_key_ids_free(&fs.ids);
    /* the records of this mount's edits (follow.h), while the model is
     * still locked */
    ggfs_follow_fini(&fs);
    /* the idle journal in-place edits kept between them (still locked) */
    if (fs.model_real && !fs.overlay && !fs.remote && !fs.read_only && !fs.write_err)
        gguf_commit_end(fs.model_real);
    free((char *)fs.model_real);
    if (fs.lock_fd >= 0)
        close(fs.lock_fd);
    ggfs_log_close();
    pthread_rwlock_destroy(&fs.lock);
    pthread_mutex_destroy(&fs.commit_mu);
    pthread_mutex_destroy(&fs.states_mu);
    pthread_mutex_destroy(&fs.pend_mu);
    free(shown);
    options_free(&o, &args);
    signals_stop();
    return ret;
}

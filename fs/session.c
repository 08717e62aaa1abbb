/*
 * fs/session.c — the FUSE session and the threads around it (see
 * session.h).
 */
#include "fs.h"
#include "session.h"
#include "devio.h"
#include "core/f32.h"
#include "log.h"
#include "mountinfo.h"
#include "notify.h"
#include "ops.h"
#include "options.h"
#include "signals.h"
#include "core/underneath.h"
#include "whandle.h"

#include "cache/blocksrc.h"
#include "cache/cache.h"
#include "cache/thread.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The largest request that libfuse can still splice from a file: it
 * wants a pipe of the reply (16 bytes of header and the data) plus three
 * pages, and a pipe is at most /proc/sys/fs/pipe-max-size (1 MiB by
 * default) for a process without CAP_SYS_RESOURCE.  Larger replies are
 * read into a buffer allocated for each one, then written: twice the
 * copies, and a fresh buffer that costs a page fault per page.  At most
 * 1 MiB (the kernel's limit, FUSE_MAX_MAX_PAGES), at least 128 KiB; whole
 * pages.  1 MiB less 16 KiB by default. */
uint32_t ggfs_request_size(void)
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
    struct mount *fs = arg;
    cache_reserve(fs->cache, fs->readahead / fs->req_bytes + 2);
    return NULL;
}

static bool start_reserve(struct mount *fs, pthread_t *th)
{
    return cache_thread_start(th, reserve_main, fs) == 0;
}

/* Mounts, serves until unmounted or signalled, unmounts; the exit status. */
int ggfs_session_run(struct mount *fs, struct options *o, struct fuse_args *args)
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
    fs->mnt_id = ggfs_mountinfo_self("fuse.gguffs", o->copts.mountpoint, dev);
    /* written by the first request after INIT (ops.c ggfs_set_readahead) */
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
     * With fewer, workers cost more than they give: more CPU per GB and
     * more blocks, with no core to run them beside the reader. */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (fs->rcache)
        rcache_start(fs->rcache);
    core_workers_start(fs, fs->threads >= 0 ? (unsigned)fs->threads
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
    core_under_start(fs);
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
    core_workers_stop(fs);
    core_under_stop(fs);
    if (fs->rcache)
        rcache_stop(fs->rcache);
    /* Unmount before the notify threads are joined: a notification being
     * sent may wait for a kernel lock held by a request nobody will answer
     * now; unmounting aborts those requests and so frees it. */
    fuse_session_unmount(se);
    ggfs_notify_stop(fs);
    ggfs_edit_stop(fs);
    ggfs_opens_free(fs);
    core_streams_free(fs);
out_session:
    fuse_session_destroy(se);
    return ret;
}

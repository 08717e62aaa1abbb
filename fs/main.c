/*
 * fs/main.c — gguffs: mount a GGUF model file as a directory tree.
 *
 *   gguffs [options] MODEL.gguf MOUNTPOINT
 *
 * The model is opened and validated before anything is mounted: a bad file
 * is refused with one line on stderr and a non-zero exit.  Then the mount
 * is made, the process daemonizes (unless -f) and the parent returns once
 * the mount is in place.  Each step is a module of its own: the options
 * (options.h), --dump (dump.h), the mount point and /dev/fuse
 * (mountpoint.h), the model with its overlay and writer's lock
 * (mount_open.h), the disk cache (mount_dcache.h), the session
 * (session.h).
 */
#include "fs.h"
#include "core/digests.h"
#include "dump.h"
#include "core/f32.h"
#include "core/follow.h"
#include "log.h"
#include "mount_dcache.h"
#include "mount_open.h"
#include "mountpoint.h"
#include "options.h"
#include "session.h"
#include "signals.h"
#include "core/state.h"

#include "cache/blocksrc.h"
#include "cache/cache.h"
#include "gguf/commit.h"
#include "kernels/dequant.h"
#include "remote/url.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
    struct mount fs;

    enum options_result r = options_parse(argc, argv, &o, &args);
    if (r != OPTS_RUN) {
        options_free(&o, &args);
        return r == OPTS_DONE ? 0 : 1;
    }
    if (o.dump) {
        ret = ggfs_dump(&o);
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
    core_mount_init(&fs);
    fs.model_path = o.remote ? shown : o.model;
    fs.remote = o.remote;
    fs.read_only = o.ro;
    fs.cache_size = o.cache_size;
    fs.threads = o.threads;
    fs.req_bytes = fs.chunk_bytes = ggfs_request_size();
    fs.log_size = ggfs_log_size;

    if (ggfs_check_mountpoint(&o) && ggfs_check_dev_fuse(&o) && ggfs_check_cache_dir(&o) &&
        ggfs_log_open(o.copts.mountpoint, o.log_file) && ggfs_mount_model(&fs, &o)) {
        ggfs_dcache_open(&fs, &o);
        kern_dequant_init();
        fs.cache = cache_new(fs.chunk_bytes + F32_CHUNK_SLACK, fs.cache_size, core_fill_chunk, &fs);
        /* tensors never change: their stats and digests are kept per tensor */
        if (fs.cache && core_digests_new(&fs, fs.st->n_tensors) == 0 &&
            core_follow_init(&fs) == 0)
            ret = ggfs_session_run(&fs, &o, &args);
        else
            fprintf(stderr, "gguffs: out of memory\n");
        core_digests_free(&fs);
        cache_free(fs.cache);
        ggfs_dcache_close(&fs);
        core_state_put(fs.st);
        /* versions still held by opens whose release never came */
        while (!glist_empty(&fs.states)) {
            struct glist *l = fs.states.next;
            glist_del(l);
            core_state_free(GLIST_ENTRY(l, struct state, link));
        }
    }
    gguf_split_close(fs.base);   /* after every version that borrowed it */
    free((char *)fs.overlay);
    rcache_put(fs.rcache);     /* freed with the last shard's source */
    core_key_ids_free(&fs.ids);
    /* the records of this mount's edits (follow.h), while the model is
     * still locked */
    core_follow_fini(&fs);
    /* the idle journal in-place edits kept between them (still locked) */
    if (fs.model_real && !fs.overlay && !fs.remote && !fs.read_only && !fs.write_err)
        gguf_commit_end(fs.model_real);
    free((char *)fs.model_real);
    if (fs.lock_fd >= 0)
        close(fs.lock_fd);
    ggfs_log_close();
    core_mount_fini(&fs);
    free(shown);
    options_free(&o, &args);
    signals_stop();
    return ret;
}


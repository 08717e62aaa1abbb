/*
 * fs/session.h — the FUSE session (session.c): mount, daemonize, serve
 * until unmounted or signalled, unmount, and the helper threads around it
 * (signals, f32 workers, notify, inotify, the first buffers), started
 * after the fork and stopped in order at the end.
 */
#ifndef FS_SESSION_H
#define FS_SESSION_H

#include <stdint.h>

struct mount;
struct options;
struct fuse_args;

/* The size of the kernel's read requests and of f32 chunks: the largest
 * reply libfuse can still splice (1 MiB less 16 KiB by default). */
uint32_t ggfs_request_size(void);
/* Mounts fs at o's mount point and serves it; the exit status (0: an
 * unmount or a signal; 1: a mount, thread or /dev/fuse error, said). */
int ggfs_session_run(struct mount *fs, struct options *o, struct fuse_args *args);

#endif

/*
 * fs/devio.h — reads of /dev/fuse that end the session the same way at
 * every unmount.
 *
 * An unmount ends the connection: a worker's next read of /dev/fuse fails
 * with ENODEV, and libfuse ends its loop with success.  But a worker that
 * takes a request off the kernel's queue in the instant the connection is
 * torn down (the last file of a lazily unmounted mount closed while
 * requests were queued) gets ECONNABORTED instead (fs/fuse/dev.c,
 * fuse_dev_do_read: "must not put request on fpq->io queue after having
 * been shut down").  libfuse (3.14, and its master as of 2026) knows only
 * ENODEV: it prints "fuse: reading device: Software caused connection
 * abort" and ends the loop with an error, and gguffs exited with status 1
 * after an unmount that was clean (about one lazy unmount in fifteen with
 * four readers active, tests/integration/test_signals.py).
 *
 * Both errors mean the same: the kernel has no more requests for us, and
 * whatever was under way was answered with an error by the kernel itself.
 * devio_attach gives the session reads (read and splice, the two ways
 * libfuse takes a request) that report ECONNABORTED as ENODEV; replies are
 * written as libfuse would.  A connection aborted through
 * /sys/fs/fuse/connections/N/abort already reads as ENODEV (the kernel
 * says ECONNABORTED there only to a server that asked for it at INIT,
 * which libfuse does not), so nothing else changes.
 *
 * Promises:
 *   - devio_attach(se), after fuse_session_mount and before the loop: the
 *     reads above, on the session's descriptor and on any clone_fd
 *     descriptor of a worker.  false (and nothing changed) where libfuse
 *     cannot take them (before 3.13, or out of memory): the session then
 *     runs as before, and main() still counts an ECONNABORTED end as an
 *     unmount.
 */
#ifndef GGUFFS_FS_DEVIO_H
#define GGUFFS_FS_DEVIO_H

#include <stdbool.h>

struct fuse_session;

bool devio_attach(struct fuse_session *se);

#endif

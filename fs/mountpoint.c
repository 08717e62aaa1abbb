/*
 * fs/mountpoint.c — the mount point and /dev/fuse, checked before anything
 * else (see mountpoint.h).
 */
#include "mountpoint.h"
#include "options.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

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
bool ggfs_check_mountpoint(const struct options *o)
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
bool ggfs_check_dev_fuse(const struct options *o)
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

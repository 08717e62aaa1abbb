/*
 * fs/mountpoint.h — what must hold before anything is opened or fetched
 * (mountpoint.c): the mount point can take the mount (a directory, not the
 * root of a live FUSE mount), and /dev/fuse can be opened.  Each false
 * comes after one line on stderr naming the cause and the fix.  A mount
 * point "/dev/fd/N" (mount.fuse3 -o drop_privileges made the mount) is
 * checked only for the options it needs.
 */
#ifndef FS_MOUNTPOINT_H
#define FS_MOUNTPOINT_H

#include <stdbool.h>

struct options;

bool ggfs_check_mountpoint(const struct options *o);
bool ggfs_check_dev_fuse(const struct options *o);

#endif

/*
 * fs/mountinfo.h — finding a mount in /proc/self/mountinfo (mountinfo.c).
 *
 * No FUSE here: tests/bench/nullfs.c links it too, and
 * tests/unit/test_mountinfo.c tests it on made-up files.  Lines that do not
 * parse are skipped; a mount point is compared unescaped (mountinfo writes
 * space, tab, newline and backslash as \ooo); a path longer than 4095
 * bytes matches nothing.
 */
#ifndef GGFS_MOUNTINFO_H
#define GGFS_MOUNTINFO_H

#include <stdio.h>

/* The last line of f (mountinfo's format) of file system type fstype
 * ("fuse.gguffs") mounted on mountpoint: its mount id (fdinfo's mnt_id),
 * and its device ("0:NN", the name of its bdi in sysfs) into dev; -1, dev
 * untouched, when there is none.  The last is the newest mount. */
long long ggfs_mountinfo_find(FILE *f, const char *fstype, const char *mountpoint,
                              char dev[32]);

/* The same in /proc/self/mountinfo; -1 when it cannot be read. */
long long ggfs_mountinfo_self(const char *fstype, const char *mountpoint, char dev[32]);

#endif

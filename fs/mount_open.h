/*
 * fs/mount_open.h — opening the model for a mount, before anything is
 * mounted (mount_open.c): local or remote (every shard, validated), the
 * overlay of a remote model's edits (-o overlay), and one writer per
 * model: a read-write mount holds an OFD write lock on the model (or on
 * the overlay), and waits up to 10 s for one another process holds (a
 * gguffs just unmounted may still be exiting), saying so at once.
 */
#ifndef FS_MOUNT_OPEN_H
#define FS_MOUNT_OPEN_H

#include <stdbool.h>
#include <time.h>

struct mount;
struct options;

/* Opens and validates the model (every shard) and builds the first state
 * (fs->st), takes the writer's lock; false after a one-line error. */
bool ggfs_mount_model(struct mount *fs, const struct options *o);
/* For waits on what another process holds (the lock, the disk cache):
 * true after a short pause, if less than 10 s have passed since t0
 * (CLOCK_MONOTONIC); false once they have (no pause then). */
bool ggfs_held_wait_more(const struct timespec *t0);

#endif

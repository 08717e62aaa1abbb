/*
 * fs/notify.h — telling the kernel what an edit changed (notify.c).
 *
 * The kernel caches names, attributes and data with long timeouts; after
 * a commit it is told which names and inodes changed.  The notifications
 * are sent from threads of their own (a notification sent from a handler
 * may wait for a lock the kernel holds for that very request), through
 * three FIFO queues: meta/'s names and inodes, the root's names (info,
 * model.gguf, ...: every commit changes them), and retired states to free
 * (closing a replaced model file may take a second).  Promises: what is
 * queued is sent in order; a wait returns once what was queued before it
 * has been sent, or after a second (then a cache may be stale); nobody
 * waits for the free queue.  Nothing is dropped silently: a notification
 * that cannot be queued (out of memory) is counted in fs->notes_lost,
 * turns the mount's entry and attribute timeouts to 0 (ggfs_timeout), and
 * makes its queue's thread invalidate everything that queue covers (every
 * version name of /, or meta/ and every name and inode of the current
 * version), which a waiter waits for as for a notification.
 * ggfs_notify_start starts all three threads or none (then it returns the
 * errno, and the mount must not go on: edits would leave the kernel's
 * caches stale for a year).  Without the threads (before they start, or
 * after ggfs_notify_stop) the calls do nothing (ggfs_notify_free_state
 * returns false: the caller frees the state itself).  While the threads
 * run, fs->free_later is ggfs_notify_free_state: a state's last
 * core_state_put (state.c, below this file) hands the state over
 * through it.
 *
 * Locks: the notify queues' mu is last in the lock order, never held
 * while waiting, so any of these may be called with any lock held; the
 * waits are called under commit_mu (by a commit, or a write handle's
 * close), never with the root directory's lock held by the kernel for
 * the caller (core/mount.h).  The threads take no lock above their own but the
 * state list's, and the state lock (read) for a sweep.
 */
#ifndef FS_NOTIFY_H
#define FS_NOTIFY_H

#include "fs.h"

/* 0, or an errno (no thread runs then). */
int ggfs_notify_start(struct mount *fs);
void ggfs_notify_stop(struct mount *fs);     /* sends what is queued first */
void ggfs_notify_meta_entry(struct mount *fs, const char *name);
void ggfs_notify_inode(struct mount *fs, fuse_ino_t ino);
/* The names in / that every version has its own inodes for (info,
 * model.gguf, info.json, model.safetensors, hf: core/mount.h), and the files of
 * hf/ (a version's too), on the root's queue: the commit waits for them. */
void ggfs_notify_versions(struct mount *fs);
/* Queues st to be freed on a notify thread; false if they do not run. */
bool ggfs_notify_free_state(struct mount *fs, struct state *st);
/* Wait (at most a second) until what was queued so far has been sent:
 * the root names only, or everything. */
void ggfs_notify_wait_root(struct mount *fs);
void ggfs_notify_wait_all(struct mount *fs);

#endif

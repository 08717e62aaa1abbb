/*
 * core/follow.h — a read-only mount that follows the edits a read-write
 * mount of the same local model makes (follow.c).
 *
 * fstat cannot tell gguffs' own edit of the header from another program's
 * write into the tensor data (same size, same inode, new times either
 * way), so the writing gguffs leaves evidence beside the model, and a
 * mount that never writes (-o ro, or a model it could not open for
 * writing) checks it before it serves a byte of the changed file:
 *
 *   MODEL.gguffs-edits   the last edits the read-write mount committed
 *                        (8 of them): for each, the model's signature
 *                        before (the one the commit verified: the
 *                        writer checks underneath before committing, see
 *                        underneath.h) and after (device, inode, size,
 *                        mtime, ctime: struct fsig), how it was written
 *                        (in place: only bytes below the data offset
 *                        changed; rewrite: a new file whose tensor data
 *                        is the old file's, copied or cloned) and the
 *                        data offset before and after.  Written whole
 *                        at each commit with one pwrite, no fsync (it
 *                        guards nothing: a record lost to a crash only
 *                        leaves a follower unable to verify: the EIO
 *                        of a change underneath).  A byte of it ([0, 1)) is
 *                        write-locked (OFD lock) from before the
 *                        commit's first write of the model until its
 *                        record is written: while it is held a
 *                        follower knows that a commit is under way and
 *                        that what changes is the header; a writer that
 *                        dies loses the lock with it.  The file is
 *                        opened for each commit and closed after the
 *                        unlock, so its close (IN_CLOSE_WRITE) wakes
 *                        the followers once the record can be read.  The
 *                        unmount removes it (a leftover is removed by
 *                        the next read-write mount).
 *
 * Format (u64 little-endian): a 64-byte header, "GGUFFSE1", writer (a
 * random number per read-write mount), seq (edits this writer recorded),
 * n (records, at most 8), zeros, and at 56 the checksum (FNV-1a) of the
 * header's first 56 bytes and the records; then n records of 144 bytes,
 * oldest first: seq, kind (1 in place, 2 rewrite), data offset before,
 * after, the signatures before and after (dev, ino, size, mtime s, ns,
 * ctime s, ns).  A file that does not verify (a torn read of a record
 * being written, another format, a hostile one: every field is checked
 * before use, none sizes anything) counts as no evidence.
 *
 * A follower, when its file is not as it knows it:
 *   - a commit is under way (the lock is held): the change is gguffs'
 *     header write, tensor data is served as before;
 *   - else the records must chain from the signature it knows to the one
 *     the file has now (each record's before the previous one's after;
 *     in-place records keep the data offset): then the change was
 *     gguffs' edits, tensor bytes did not move, and every version of the
 *     mount that reads that inode is marked as knowing the new signature;
 *   - else it is another program's change: UNDER_CHANGED (or, for the
 *     path, UNDER_REPLACED), EIO for tensor bytes, as before
 *     (underneath.h).
 * Adopting the new version happens on the inotify thread
 * (core_follow_update): with no commit under way and the chain verified
 * to the file at the path, the model is opened anew (a rewrite's new
 * file: the old versions keep the old descriptor), its tensor table is
 * compared with the current one (names, types, shapes, sizes, offsets
 * relative to the data, the data's length; other shards unchanged), the
 * lock and the records are read again (no commit began meanwhile: the
 * header parsed is the one recorded), and the new state is swapped in as
 * after a local edit (core/state.h core_state_swap: new inodes for info,
 * info.json, model.gguf and model.safetensors, the kernel's caches of
 * meta/ invalidated; handles opened before keep their version, a meta/
 * value too: on such a mount it is read from a copy taken at open, ops_open.c).
 * A tensor table that differs marks the mount changed.
 *
 * What remains: a change by another program while a commit is under way,
 * or in the same timestamp tick after one without changing the size, is
 * taken for gguffs' (the writer's own window, underneath.c); the records
 * are evidence against accidents, not a defence against a program that
 * forges them; a follower that looks only after the writer unmounted
 * (the file removed) cannot verify and fails with EIO.
 *
 * Locks: the writer's calls run under commit_mu (commit.c).  The
 * follower's core_follow_check and core_follow_path take no lock of the
 * mount while they read the records (a few system calls on a small local
 * file), then states_mu and sig_mu to record what they verified, so they
 * may be called with any lock above states_mu held (underneath.c calls
 * them from reads and from handlers that hold the state lock for
 * reading).  core_follow_update takes commit_mu (it builds and swaps a
 * state, like a commit) and is called with no lock held (the inotify
 * thread).
 */
#ifndef CORE_FOLLOW_H
#define CORE_FOLLOW_H

#include "core/mount.h"

#define CORE_EDITS_SUFFIX ".gguffs-edits"

struct fsig;

/* Sets the mount's role, after the model is open and before the session:
 * a local read-write mount writes the records (and removes a leftover
 * file of an earlier mount now, holding the model's lock); a local mount
 * that never writes follows them; any other records nothing.  0 or
 * ENOMEM. */
int core_follow_init(struct mount *fs);
/* At the end: the writer removes its file (before the model's lock goes). */
void core_follow_fini(struct mount *fs);

/* ---- the writer (commit.c, under commit_mu) ---- */

/* Before the commit's first write: the lock taken, old's shard 0 as the
 * commit verified it remembered. */
void core_follow_begin(struct mount *fs, const struct state *old);
/* After the commit and the re-open: the record of old -> ns written (ns
 * NULL: none, the model could not be re-opened), the lock released, the
 * file closed. */
void core_follow_end(struct mount *fs, const struct state *ns);

/* ---- the follower ---- */

/* Whether this mount follows a writer's records. */
bool core_follows(const struct mount *fs);

enum follow_verdict {
    FOLLOW_NO,      /* not an edit of gguffs' that can be verified */
    FOLLOW_BUSY,    /* a commit is under way: the header is being written */
    FOLLOW_OK,      /* verified: the signature known is now the file's */
};

/* st's shard 0 (the file it reads) is now as fstat said (now), not as st
 * knew it (want): verified as gguffs' edits in place, every live state
 * knowing want learns now (FOLLOW_OK). */
enum follow_verdict core_follow_check(struct mount *fs, const struct fsig *want,
                                      const struct fsig *now);
/* The model's path names another file now (now: its stat): a rewrite of
 * gguffs' (FOLLOW_OK: core_follow_update will open it) or not. */
enum follow_verdict core_follow_path(struct mount *fs, const struct fsig *now);
/* Adopts the version at the model's path if the records verify it (see
 * the top).  Returns what the caller (the inotify thread, no lock held:
 * underneath.c) is to do: 0 nothing; UNDER_CHANGED or UNDER_REPLACED:
 * the file changed and the records do not verify it, mark the mount;
 * FOLLOW_NEW_FILE: a rewrite's new file was adopted, watch it. */
enum { FOLLOW_NEW_FILE = 4 };
int core_follow_update(struct mount *fs);
/* The records' file name (no folder), for the inotify watch of the
 * model's folder; NULL when this mount does not follow. */
const char *core_follow_file(const struct mount *fs);

#endif

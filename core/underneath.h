/*
 * core/underneath.h — noticing that another program changed a local model
 * while it is mounted (underneath.c: inotify, and fstat before bytes are
 * served); and, for a remote model, saying in the log why a read of its
 * source failed (core_source_failed, last).
 *
 * Each state records, per shard, what fstat said of the file it opened
 * (struct fsig, below).  Promises: once a shard's file is not the one a
 * state indexed (written in place, truncated, chmod'ed), the mount is
 * marked UNDER_CHANGED for good, logged once, and every read of a tensor's
 * bytes from the file fails with EIO (what the caches already hold is
 * still served: it is this version's); a path that names another file now
 * (a rename over it, the model removed) marks UNDER_REPLACED, and reads go
 * on from the file opened.  Either way every edit is refused with EIO.  gguffs' own commits are not a change
 * (core_under_begin/end); what remains of that race is in underneath.c.
 * Nor, for a mount that never writes (-o ro), are the commits of a
 * read-write gguffs mount of the same model: before it marks the mount,
 * the check of shard 0 and of its path asks follow.h whether the records
 * that mount keeps beside the model verify the change (a commit under
 * way, or edits recorded from the signature known to the file's now), and
 * the inotify thread (which also watches the model's folder then, for
 * the records' file) adopts the new version (core_follow_update).
 *
 * Locks: the checks and begin take sig_mu alone (for a copy or an update,
 * never during I/O), which is below every lock but the notify queues'
 * (core/mount.h), so they may be called with any of those above held: from reads
 * holding a state reference, from handlers holding the state lock (read),
 * from edits under commit_mu; line and why take none (the UNDER_* bits
 * are atomic, the file and time set before them).  A follower's checks
 * call follow.h (no lock while they read the records, then states_mu and
 * sig_mu to record what they verified).  core_under_end takes
 * states_mu, then sig_mu (it records every live state's shard 0); it,
 * begin and rewatch run under commit_mu.  The inotify thread holds none:
 * it checks the current state through a reference (core_state_current),
 * then, for a follower, takes commit_mu to adopt a new version.
 */
#ifndef CORE_UNDERNEATH_H
#define CORE_UNDERNEATH_H

#include "core/mount.h"

/* 0 when shard i of st's model is as gguffs knows it (or remote), else EIO:
 * another program changed it (the mount is marked, logged once).  Called
 * before a tensor's bytes are spliced from the file and after a chunk's
 * bytes were read for f32. */
int core_under_check_shard(struct mount *fs, const struct state *st, unsigned i);
/* Every shard of st, and whether their paths still name the files
 * mounted: the mount's UNDER_* bits after the check. */
int core_under_check(struct mount *fs, const struct state *st);
/* Around gguffs' own commit of an edit (under commit_mu): its writes are
 * not a change underneath.  end records the files as the commit left them. */
void core_under_begin(struct mount *fs);
void core_under_end(struct mount *fs);
/* info's line about it into buf (0: nothing noticed). */
size_t core_under_line(struct mount *fs, char *buf, size_t cap);
/* Why an edit is refused now (under commit_mu, after core_under_check), or
 * NULL. */
const char *core_under_why(struct mount *fs);
/* The inotify watch of every shard (a thread; after daemonizing). */
void core_under_start(struct mount *fs);
void core_under_stop(struct mount *fs);
/* Watches path again (a rewrite put a new file there); under commit_mu. */
void core_under_rewatch(struct mount *fs);

/* A read of len bytes at pos of src failed with EIO: if src is remote,
 * logs one line (core/log.h; fs/log.h rate-limits it) with the reason: the redacted
 * URL, the range that failed (the latest failure among those of these
 * bytes, as remote_error_at finds it) and its cause.  A remote that
 * changed is logged once per mount.  Called wherever a read of a remote
 * source fails with EIO — a reply's (raw, model.gguf, model.safetensors,
 * the npy views), a digest's, an f32 chunk's fill (one line for all the
 * readers waiting on it) — so that no EIO reaches a reader unsaid. */
void core_source_failed(struct mount *fs, struct gguf_source *src, uint64_t pos, uint64_t len);

#endif

/*
 * fs/model.h — opening the model a mount shows (model.c): a single file or
 * every shard of a split model (gguf/split.h), each through a byte source
 * (a local file, or a remote one: remote/source.h, read through the block
 * cache), after finishing (or, read-only, refusing) an interrupted edit of
 * the file that edits go to.
 *
 * Promises: a model comes back with every shard open and its header
 * parsed, or not at all (an error and a one-line diag).  A remote split
 * model's shards are opened in parallel, its errors being those of
 * opening them one after another (see model.c).
 *
 * Locks: none of the mount's.  ggfs_open_model is called before the
 * session (mount_open.c) or, to open the file an edit left, under commit_mu
 * (commit.c); ggfs_remote from any thread.
 */
#ifndef FS_MODEL_H
#define FS_MODEL_H

#include "fs.h"

/* Opens the model at path (absolute); a shard of a split model opens
 * every shard.  Recovers an interrupted edit of the first shard first, or,
 * read-only, refuses the model while one is there; reopen (the mount's own
 * edit was just committed) keeps the idle journal for the next edit.  With remote options,
 * path is a URL and every shard a remote source (remote/source.h).  The
 * diag's message names the file concerned when it is not path. */
struct remote_opts;
struct rcache;
/* With rc, every remote shard is read through that block cache
 * (blocksrc.h); the first REMOTE_PREFIX_SIZE bytes stay the remote
 * source's (in memory). */
enum gguf_err ggfs_open_model(const char *path, bool read_only, bool reopen,
                              const struct remote_opts *remote, struct rcache *rc,
                              struct gguf_split **out, struct gguf_diag *d);
/* The remote behind a shard's source (through an overlay's spliced source
 * and the block cache), or NULL for a local file. */
struct remote *ggfs_remote(struct gguf_source *src);

#endif

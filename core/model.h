/*
 * core/model.h — opening the model a mount shows (model.c): a single file
 * or every shard of a split model (gguf/split.h), each through a byte
 * source (a local file, or a remote one: remote/source.h, read through the
 * block cache), after finishing (or, read-only, refusing) an interrupted
 * edit of the file that edits go to.  No FUSE, no struct mount: the mount
 * (fs/) passes what it knows; tested by tests/unit/test_model.c.
 *
 * Promises: a model comes back with every shard open and its header
 * parsed, or not at all (an error and a one-line diag).  A remote split
 * model's shards are opened in parallel, its errors being those of
 * opening them one after another (see model.c).  Nothing is printed: what
 * a recovery did comes back in a note for the caller to log.
 *
 * Locks: none of the mount's.  core_open_model is called before the
 * session (fs/mount_open.c) or, to open the file an edit left, under
 * commit_mu (core/commit.c); core_remote from any thread.
 */
#ifndef CORE_MODEL_H
#define CORE_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "gguf/gguf.h"
#include "gguf/source.h"

struct gguf_split;
struct remote;
struct remote_opts;
struct rcache;

/* Opens the model at path (absolute); a shard of a split model opens
 * every shard.  Recovers an interrupted edit of the first shard first, or,
 * read-only, refuses the model while one is there; reopen (the mount's own
 * edit was just committed) keeps the idle journal for the next edit.  With
 * remote options, path is a URL and every shard a remote source
 * (remote/source.h).  The diag's message names the file concerned when it
 * is not path.  note (note_cap bytes; may be NULL) receives "FILE: what
 * was done" when an interrupted edit was rolled back or finished, else "".
 * With rc, every remote shard's source is a block-cache wrapper
 * (blocksrc_wrap, cache/blocksrc.h: blocksrc_set_disk may take it) that
 * reads through rc; the first REMOTE_PREFIX_SIZE bytes stay the remote
 * source's (in memory). */
enum gguf_err core_open_model(const char *path, bool read_only, bool reopen,
                              const struct remote_opts *remote, struct rcache *rc,
                              char *note, size_t note_cap,
                              struct gguf_split **out, struct gguf_diag *d);
/* The remote behind a shard's source (through an overlay's spliced source
 * and the block cache: gguf_source.below) of a model core_open_model opened
 * with remote options (remote: the caller knows, as it asked for them);
 * NULL when !remote (a local file) or src is NULL. */
struct remote *core_remote(struct gguf_source *src, bool remote);

#endif

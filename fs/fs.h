/*
 * fs/fs.h — the gguffs FUSE driver: the context every handler works with.
 *
 * Only fs/ includes a FUSE header.  What a mount is (the inode numbers,
 * struct mount, struct state, the lock order) is core/mount.h's, without
 * FUSE; the caches are cache/'s.  The files of fs/ and the job of each are
 * listed in doc/HACKING.md ("Layout").  Each file's functions are declared
 * in the header of its name, which says what it promises and which locks
 * its functions expect; this header adds to core/mount.h only what ties
 * it to FUSE and small helpers on the mount.  It includes none of the
 * module headers; each of them includes it.
 */
#ifndef FS_FS_H
#define FS_FS_H

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "core/mount.h"

_Static_assert(INO_ROOT == FUSE_ROOT_ID, "/ is FUSE's root inode");
_Static_assert(sizeof(fuse_ino_t) == sizeof(uint64_t), "inode numbers are 64-bit");

/* The entry and attribute timeout of a reply: the mount's, or 0 once an
 * invalidation could not be queued (notify.c: what the kernel keeps is
 * then asked again rather than trusted). */
static inline double ggfs_timeout(struct mount *fs)
{
    return atomic_load(&fs->notes_lost) ? 0 : fs->timeout;
}

/* The disk cache of shard i of the model, or NULL when there is none.  Its
 * blocks are the block cache's (-o remote_block bytes, block b at
 * b * remote_block): mount_dcache.c hands it to the shard's blocksrc wrapper
 * (blocksrc_set_disk), whose fills read it first and store what they
 * fetch. */
struct dcache;
static inline struct dcache *ggfs_dcache(const struct mount *fs, unsigned shard)
{
    return fs->dcache && shard < fs->n_dcache ? fs->dcache[shard] : NULL;
}

/* The context of a request. */
static inline struct mount *req_fs(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

#endif

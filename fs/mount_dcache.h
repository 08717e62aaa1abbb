/*
 * fs/mount_dcache.h — the disk cache of a remote model's blocks at mount
 * (-o cache_dir, mount_dcache.c): the directory checked (made if missing,
 * kept as an absolute path) before anything is fetched; a disk cache per
 * shard opened once the model is (a shard whose cache cannot be opened is
 * read without one, said once on stderr), handed to the shard's block
 * cache (cache/diskcache.h dcache_blocksrc_hooks); closed (made durable)
 * after the session.
 */
#ifndef FS_MOUNT_DCACHE_H
#define FS_MOUNT_DCACHE_H

#include <stdbool.h>

struct mount;
struct options;

/* false after a one-line error (a directory that cannot be used). */
bool ggfs_check_cache_dir(struct options *o);
void ggfs_dcache_open(struct mount *fs, const struct options *o);
void ggfs_dcache_close(struct mount *fs);

#endif

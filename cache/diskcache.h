/*
 * cache/diskcache.h — a persistent cache of the blocks of a remote model on a
 * local disk (-o cache_dir=DIR, -o cache_max=SIZE).  No FUSE inside: built
 * as a library of its own (cache/meson.build), tested by
 * tests/unit/test_diskcache.c and, for crashes, tests/tools/dcache_crash.c
 * driven by tests/integration/test_dcache_crash.py.
 *
 * The caller (the in-memory block cache of remote bytes) cuts a remote
 * object of size bytes into blocks of block_bytes (the last one may be
 * short); on a miss it asks dcache_read first, and after a fill from the
 * remote it gives the block to dcache_write.  A second mount of the same
 * remote object (same identity, same size) finds what the first one
 * stored: it costs no request.
 *
 * Files: in DIR, per remote object, two files named after a 64-bit hash
 * (FNV-1a) of its identity and size:
 *   dc-HASH.data  sparse, exactly size bytes: block b at b * block_bytes;
 *                 a block not stored is a hole.
 *   dc-HASH.map   a 4 KiB header (magic, version, size, block_bytes, block
 *                 count, the identity itself, a CRC32C of the header), then
 *                 8 bytes per block: the block's CRC32C and a check of that
 *                 entry (a CRC32C of block number, CRC and length); an
 *                 entry whose check does not hold (all zeros, torn, stale)
 *                 means "not stored".
 *
 * Promises:
 *   - Never trusted: dcache_read returns true only when the bytes it read
 *     have the CRC32C recorded for that block when it was stored.  A
 *     mismatch (a flipped bit on disk, a file changed by someone else)
 *     drops the block (counted as rejected) and returns false: the caller
 *     reads the remote.  A map whose header is wrong in any way — another
 *     identity (a hash collision, or an old version of the remote object),
 *     another size or block size, a bad magic, version or checksum, a file
 *     of the wrong length — or a data file of the wrong length is foreign:
 *     both files are emptied and rebuilt at open (stats.reset).  Every
 *     number read from the files is compared with the caller's before
 *     anything is sized by it: nothing is allocated from a file's word.
 *     dcache_hold (replies spliced from the data file, whose bytes never
 *     pass through this process) checks a block once per process, at its
 *     first hold (or trusts this process's own write, or a dcache_read of
 *     it that checked): bytes changed by another program after that check
 *     are not seen until the next open — the directory is made 0700 and
 *     the map is locked, so that program would be the user's own.
 *   - Crash-safe: a block is marked stored on disk only after its bytes
 *     are: its bytes are written (pwrite), the data file synced
 *     (fdatasync), and only then its entry written and the map synced.
 *     Eviction clears the entry and syncs the map before punching the hole
 *     (fallocate PUNCH_HOLE | KEEP_SIZE).  After a crash at any point a
 *     reopen finds each block either absent or with exactly its bytes; the
 *     space of blocks written but not marked (or cleared but not punched)
 *     is given back at the next open (holes punched where the map says
 *     "not stored" but the data file has data).
 *   - Batched: dcache_write does not sync.  Written blocks wait (readable
 *     at once: they are in the page cache) until a flusher thread syncs
 *     them, two fdatasyncs for the whole batch: when DCACHE_BATCH_BYTES are
 *     waiting, every DCACHE_FLUSH_MS otherwise, and at dcache_flush and
 *     dcache_close.  A crash loses at most the blocks still waiting.
 *     Writers wait (back-pressure) while four batches are waiting.
 *   - Bounded: the bytes allocated to the cache files of DIR (st_blocks of
 *     every dc-* file: this object's, counted exactly, and the others', as
 *     measured at open and each time room is made) stay at most max_bytes
 *     after each flush (other processes' growth since they were measured
 *     aside).  Policy, when a block does not fit: first the
 *     least recently used other models (the mtime of their map, touched
 *     at open and close) that no process has open are removed, whole,
 *     oldest first; then blocks of this model go, chosen by CLOCK (a block
 *     read since the hand last passed gets a second chance), a batch at
 *     once (DCACHE_EVICT_BATCH blocks, at most an eighth of max_bytes) so
 *     that the clearing sync is paid once per batch.  The victims are
 *     cleared and punched (a synchronous flush) before the new block is
 *     written.  Models another process has open are not touched; if what
 *     they hold leaves no room, the block is not stored (stats.skipped).
 *   - One process per model: dcache_open takes flock(LOCK_EX|LOCK_NB) on
 *     the map; a second process (or a second dcache_open of the same
 *     object) gets GGUF_E_EXIST (run without the disk cache for that
 *     model).  Two processes with different models share DIR safely.
 *   - Thread-safe: dcache_read, dcache_write, dcache_flush and
 *     dcache_get_stats may be called from any number of threads at once.
 *     One mutex guards the block table, held for bookkeeping only, never
 *     while bytes are read, written or synced; reads and writes of bytes
 *     are pread/pwrite at the block's offset.  A block read while it is
 *     being evicted reads as a miss, never as a rejection, never as wrong
 *     bytes.
 *   - Disk errors: a failed write of a block drops that block; a failed
 *     sync (of either file) or write of the map turns the cache off for
 *     the rest of the session (every read a miss, every write ignored:
 *     stats.broken), since what is on disk is no longer known; the next
 *     open checks it all again.
 *
 * No printing: errors come back as a gguf_diag (the caller says them).
 */
#ifndef CACHE_DISKCACHE_H
#define CACHE_DISKCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/diag.h"

struct dcache;

#define DCACHE_BATCH_BYTES (64u << 20)   /* a flush per this many bytes written */
#define DCACHE_FLUSH_MS 1000u            /* or this long after the first write */
#define DCACHE_EVICT_BATCH 16u           /* blocks evicted at once (see above) */
#define DCACHE_MAX_BLOCKS (1u << 22)     /* blocks per object (16 TiB of 4 MiB) */
#define DCACHE_MAX_IDENTITY 3968u        /* bytes of identity kept in the header */

/* Makes DIR ready: creates it and the directories above it that are
 * missing (mkdir -p; each mode 0700, whatever the umask; existing ones are
 * left as they are), and checks it is a directory this process can search
 * and write.  GGUF_E_IO with a one-line diag (the errno text, and the
 * directory above DIR that could not be made) otherwise. */
enum gguf_err dcache_check_dir(const char *dir, struct gguf_diag *diag);

/*
 * Opens (or creates, or rebuilds) the cache of the object named identity of
 * size bytes, cut in blocks of block_bytes (a multiple of 4096 up to
 * 1 GiB; at most DCACHE_MAX_BLOCKS blocks), in dir (dcache_check_dir
 * first; an absolute path if the process changes directory later), bounded
 * by max_bytes.  The flusher thread starts at the first write (so a process
 * may open the cache, then fork: the lock goes with the descriptors).  Errors (with
 * diag): GGUF_E_INVAL bad arguments; GGUF_E_RANGE too many blocks, an
 * identity longer than DCACHE_MAX_IDENTITY, or max_bytes below the map's
 * size plus one block; GGUF_E_EXIST the cache of this object is open in
 * another process (or another dcache); GGUF_E_IO a file could not be
 * opened, read or written, or the file system cannot punch holes
 * (fallocate: EOPNOTSUPP); GGUF_E_NOMEM.
 */
enum gguf_err dcache_open(const char *dir, const char *identity, uint64_t size,
                          uint32_t block_bytes, uint64_t max_bytes, struct dcache **out,
                          struct gguf_diag *diag);

/*
 * The shards of a split model: caches opened in one group share max_bytes
 * (the sum of what they count stays within it; a block that does not fit
 * evicts blocks of the cache it goes to) and never count or remove each
 * other as "other models".  A group outlives its caches.
 */
struct dcache_group;
struct dcache_group *dcache_group_new(void);         /* NULL: out of memory */
void dcache_group_free(struct dcache_group *g);
enum gguf_err dcache_open_in(struct dcache_group *g, const char *dir, const char *identity,
                             uint64_t size, uint32_t block_bytes, uint64_t max_bytes,
                             struct dcache **out, struct gguf_diag *diag);

/* Flushes what waits (as dcache_flush), stops the flusher, touches the map's
 * mtime (recency), unlocks and frees.  NULL is fine.  No other call on dc
 * may be running or come after. */
void dcache_close(struct dcache *dc);

/* Blocks of the object, and the length of block b (0 if b is past the end). */
uint64_t dcache_blocks(const struct dcache *dc);
size_t dcache_block_len(const struct dcache *dc, uint64_t block);

/* Copies block into dst (len bytes: the block's length, else it is a miss)
 * if it is stored and its bytes check: true.  false: a miss (dst's bytes
 * are then undefined). */
bool dcache_read(struct dcache *dc, uint64_t block, void *dst, size_t len);

/* For a reply spliced from the data file (no copy into memory): if block
 * (len bytes: its length) is stored and durable (not one still waiting for
 * a flush), holds it and sets *fd, *pos to where its bytes are in the data
 * file: true.  A held block is not evicted until dcache_release.  Its bytes
 * are checked against their CRC32C at the first hold in this process (read
 * in pieces, not kept; a block this process stored or dcache_read checked
 * counts as checked): a mismatch drops the block, as in dcache_read, and is
 * false (a miss; nothing held).  The descriptor stays open until
 * dcache_close.  Counted in stats.hits / misses at its check only. */
bool dcache_hold(struct dcache *dc, uint64_t block, size_t len, int *fd, uint64_t *pos);
void dcache_release(struct dcache *dc, uint64_t block);
/* Whether dcache_hold would find block stored and durable (unchecked). */
bool dcache_has(struct dcache *dc, uint64_t block);
/* Asks for block's check (as at its first hold) on a thread of the cache's
 * own, so that a reader's hold of it later finds it done: for blocks a
 * sequential reader will reach.  Nothing if the block is not stored and
 * durable, is checked or being checked, or DCACHE_CHECK_AHEAD blocks wait
 * already.  A hold of a block being checked waits for the verdict.  The
 * thread starts at the first call (after any fork) and takes no signal;
 * dcache_close stops it (blocks still waiting are not checked). */
#define DCACHE_CHECK_AHEAD 16u
void dcache_check_ahead(struct dcache *dc, uint64_t block);
/* For tests: returns once no check ahead waits or runs. */
void dcache_checks_wait(struct dcache *dc);
/* Stores block (len bytes: its length, else ignored), best effort: never
 * fails the caller; a block stored already, being stored, or that finds no
 * room is left alone.  May wait for a flush (back-pressure, eviction). */
void dcache_write(struct dcache *dc, uint64_t block, const void *src, size_t len);

/* Makes every block written so far durable (and marked), and every
 * eviction done (punched): returns when they are. */
void dcache_flush(struct dcache *dc);

/* For tests and benchmarks: flush after every batch_blocks blocks written,
 * on that count only (no timer; 1: every write syncs before it returns,
 * "one fsync per block"); 0: the default, DCACHE_BATCH_BYTES of blocks or
 * DCACHE_FLUSH_MS. */
void dcache_set_batch(struct dcache *dc, unsigned batch_blocks);

struct dcache_stats {
    uint64_t hits, misses;   /* dcache_read: true, false */
    uint64_t written;        /* blocks written by this process: stored, or
                                waiting for the flusher to make them so */
    uint64_t stored;         /* of those, blocks made durable and marked */
    uint64_t evicted;        /* blocks removed to make room */
    uint64_t rejected;       /* blocks whose bytes did not check: dropped */
    uint64_t checked_ahead;  /* checks made by dcache_check_ahead's thread */
    uint64_t skipped;        /* writes not stored: no room */
    uint64_t flushes, syncs; /* flush batches; fdatasync calls */
    uint64_t blocks;         /* blocks stored or waiting now */
    uint64_t bytes_used;     /* this object's files: bytes counted (block
                                lengths in whole pages, the map, and a
                                page per 256 blocks for the file system's
                                extent tree of the data file) */
    uint64_t others_bytes;   /* other models' files in DIR, last measured */
    uint64_t models_removed; /* other models removed to make room */
    bool reset;              /* the files were created or rebuilt at open */
    bool broken;             /* a disk error turned the cache off */
};
void dcache_get_stats(struct dcache *dc, struct dcache_stats *out);

/* CRC32C (Castagnoli) of len bytes, continuing from crc (0 to start):
 * the per-block checksum.  dcache_crc32c_sw is the portable code, for the
 * tests to compare against (the other uses SSE4.2 when the CPU has it).
 * Both are kernels/crc32c.h's kern_crc32c and kern_crc32c_sw. */
uint32_t dcache_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t dcache_crc32c_sw(uint32_t crc, const void *buf, size_t len);

/* The base of the files of an object in dir ("dc-%016llx"), into out (at
 * least 20 bytes): for tests that damage them. */
void dcache_file_base(const char *identity, uint64_t size, char *out, size_t cap);

/*
 * The disk cache beneath a block cache of remote bytes (cache/blocksrc.h,
 * dcache_hooks.c): its fills read the disk cache first and store what they
 * fetch (blocks of the disk cache's block_bytes); replies of blocks it
 * holds are spliced from its data file.
 */
struct blocksrc_disk;
/* *out: the hooks of blocksrc_set_disk over dc (dc stays the caller's). */
void dcache_blocksrc_hooks(struct dcache *dc, struct blocksrc_disk *out);
/* What names a remote object's disk cache (the identity given to
 * dcache_open_in): its identity and its URL, "IDENTITY URL", since an ETag
 * names a version of one file, not a file (nginx's, "mtime-size", is the
 * same for two files of one size written in the same second: the shards
 * of a split model, often).  url is shown in file headers: give it
 * redacted (no credentials, no query).  *out is malloc'd; GGUF_E_INVAL,
 * with *out NULL and d saying why, for an identity that is only a size
 * ("size:N": the server sent neither ETag nor Last-Modified, and a later
 * version of the same size could not be told from this one);
 * GGUF_E_NOMEM. */
enum gguf_err dcache_key(const char *identity, const char *url, char **out,
                         struct gguf_diag *d);

#endif

/*
 * cache/dcache_impl.h — what the files of the disk cache share: the struct, the
 * block table's states, the map's layout and the internal functions.  Not
 * part of the API (cache/diskcache.h, whose promises these files keep): only
 * cache/diskcache.c and cache/dcache_*.c include it.
 *
 * The files, by job:
 *   diskcache.c     the public glue: groups, file names, sizes, the batch
 *                   setting, stats, close
 *   dcache_table.c  the block table: entries on disk, dcache_read,
 *                   dcache_write, the flush and the flusher thread
 *   dcache_evict.c  the bound: bytes counted (with the group's), other
 *                   models measured and removed, this model's blocks
 *                   evicted (CLOCK), a writer's claim of room
 *   dcache_check.c  hold / release, checks of bytes on disk, check-ahead
 *                   and its thread
 *   dcache_open.c   the directory, the map's header, open (lock, files,
 *                   check or rebuild, load)
 *
 * Locks (doc/HACKING.md): flush_mu before mu; mu before a group's mu.
 */
#ifndef CACHE_DCACHE_IMPL_H
#define CACHE_DCACHE_IMPL_H

#include "diskcache.h"
#include "gguf/bytes.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

/* ---- the map file ---- */

#define HDR_SIZE 4096u
#define ENTRY_SIZE 8u
#define PAGE 4096u
#define MAGIC "GGUFFSDC"
#define VERSION 1u
/* header layout (little-endian) */
#define H_MAGIC 0
#define H_VERSION 8
#define H_HDRSIZE 12
#define H_SIZE 16
#define H_BLOCK 24
#define H_IDLEN 28
#define H_NBLOCKS 32
#define H_CRC 40
#define H_ID 48

/* The files' integers are little-endian (gguf/bytes.h). */
static const struct gguf_enc dc_le = { .big_endian = false, .v1 = false };

/* ---- the cache ---- */

enum bstate {
    B_ABSENT,     /* not stored (a hole, or space to give back) */
    B_WRITING,    /* a writer is writing its bytes */
    B_PENDING,    /* written, waiting for a flush (readable) */
    B_FLUSHING,   /* in the flush under way (readable) */
    B_PRESENT,    /* durable and marked (readable) */
    B_EVICTING,   /* to be cleared and punched (not readable) */
};

struct blk {
    uint32_t crc;     /* of the bytes, while readable */
    uint32_t gen;     /* +1 each time it stops being readable */
    uint32_t vgen;    /* gen + 1 once its bytes on disk were checked */
    uint16_t holds;   /* dcache_hold: not evicted while > 0 */
    uint8_t checking; /* a hold is checking its bytes (others wait: checked) */
    uint8_t state;
    uint8_t ref;      /* CLOCK: read since the hand passed */
};

struct vec {
    uint64_t *v;
    size_t n, cap;
};

struct dcache_group {
    pthread_mutex_t mu;
    uint64_t used;            /* the members' own bytes, summed */
    char (*bases)[24];        /* the members' file bases */
    size_t n, cap;
};

struct dcache {
    struct dcache_group *group;
    bool in_group;            /* its base is listed in group */
    char *dir;
    char base[24];            /* "dc-HASH" */
    int map_fd, data_fd;
    uint64_t size, nblocks, max_bytes, map_bytes;
    uint32_t block_bytes;
    unsigned batch;           /* blocks per flush */
    bool sync_each;           /* dcache_set_batch(1) */
    bool timer;               /* flush DCACHE_FLUSH_MS after a write too */

    pthread_mutex_t mu;       /* everything below */
    pthread_cond_t cond;      /* flusher: work; writers: a flush ended */
    pthread_cond_t checked;   /* a hold's check of a block ended */
    struct blk *b;
    struct vec pend, evict;   /* blocks waiting to be marked / cleared */
    uint64_t hand;            /* CLOCK */
    uint64_t own;             /* bytes counted (see stats.bytes_used) */
    uint64_t readable;        /* blocks PENDING, FLUSHING or PRESENT */
    uint64_t others;          /* other models' bytes, last measured */
    bool stop, broken;
    struct timespec first_pending;
    struct dcache_stats st;

    pthread_mutex_t flush_mu; /* one flush (or room making) at a time */
    pthread_t flusher;
    bool flusher_on;

    /* checks ahead (dcache_check_ahead), under mu: a ring of blocks, one
     * thread started at the first */
    uint64_t cq[DCACHE_CHECK_AHEAD];
    unsigned cq_head, cq_len;
    bool checker_on, checker_busy;
    pthread_t checker;
    pthread_cond_t cwork;     /* the ring got a block, or stopping */
};

static inline bool dc_readable(uint8_t s)
{
    return s == B_PENDING || s == B_FLUSHING || s == B_PRESENT;
}

/* ---- diskcache.c ---- */

/* Closes the files (dropping the lock), leaves the group and frees. */
void dc_free(struct dcache *dc);

/* ---- dcache_table.c ---- */

bool dc_vec_push(struct vec *v, uint64_t x);
/* Bytes a block takes on disk, as counted. */
uint64_t dc_blk_room(const struct dcache *dc, uint64_t b);
/* The check of an entry: never 0 (the top bit is set). */
uint32_t dc_entry_check(uint64_t b, uint32_t crc, uint32_t len);
/* Writes block b's entry (present: its crc; else zeros): 0 or an errno. */
int dc_write_entry(struct dcache *dc, uint64_t b, uint32_t crc, bool present);
/* Punches a hole (a failure is ignored: the space is given back at the
 * next open). */
void dc_punch(int fd, uint64_t off, uint64_t len);
/* One flush: the blocks waiting are synced and marked, the victims
 * cleared and punched.  flush_mu held, mu not. */
void dc_flush_locked(struct dcache *dc);
/* Block b's bytes did not check (read at generation gen): dropped if it is
 * still that block.  mu held. */
void dc_reject(struct dcache *dc, uint64_t b, uint32_t gen);

/* ---- dcache_evict.c ---- */

/* Counts delta more bytes for dc (and its group); dc->mu held. */
void dc_own_add(struct dcache *dc, int64_t delta);
/* Claims block b for writing if it is absent and fits (making room if
 * needed): true with own counted.  mu held on entry and on return. */
bool dc_claim(struct dcache *dc, uint64_t b);
/* Measures the other models' files into dc->others (at open: no lock). */
void dc_measure_others(struct dcache *dc);

#endif

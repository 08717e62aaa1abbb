/*
 * cache/stream.h — sequential readers and how far ahead to fill for them:
 * one detector and one ramp for both caches that prefetch, the f32 view's
 * chunks (core/f32.c: a stream per open f32 file) and the remote blocks
 * (cache/blocksrc.c: a few streams per source, matched by where a read
 * starts: struct stream_set).  Positions are units of the client's cache
 * (chunks, blocks) and, for "moved forward", bytes.  No FUSE header, no
 * lock: the client holds its own around every call (its streams' lock);
 * tested by tests/unit/test_stream.c.
 *
 * Promises:
 *   - A read of units [first, last] continues a stream when it starts at
 *     most gap units past the unit after the furthest one read (next),
 *     and at most behind units before next: the kernel sends a readahead
 *     window's requests at once and they may be served in any order, so a
 *     late read behind ones that followed it still continues the stream.
 *   - The ramp: a read that continues a stream and goes past the furthest
 *     byte read doubles its window (0, 1, 2, 4, ... units), at most max; a
 *     late read keeps it.  The window never exceeds the max of the latest
 *     call (a client whose bound is shared among its streams lowers it).
 *   - Ahead: the units to fill are those after the furthest unit read, up
 *     to the window's end, that no earlier read of the stream claimed
 *     (each unit is claimed once while the stream goes on: a late read
 *     never claims units a later read has claimed or read).  Units the
 *     client could not queue are given back (stream_unclaim) for a later
 *     read to claim, unless the stream claimed past them meanwhile.
 *   - A read that continues no stream starts one there (stream_start):
 *     window 0, nothing ahead, so random reads fill only what they read.
 *     A stream that is all zeros is one at unit 0 that nothing has read.
 */
#ifndef CACHE_STREAM_H
#define CACHE_STREAM_H

#include <stdbool.h>
#include <stdint.h>

struct stream {
    bool live;          /* in use (a set's slot) */
    uint64_t start;     /* the first unit of the read that started it */
    uint64_t next;      /* the unit after the furthest one read */
    uint64_t end;       /* the furthest byte read, +1 */
    uint64_t ahead;     /* the first unit not claimed ahead */
    unsigned window;    /* units to keep ahead; 0 until it moves on */
    uint64_t tick;      /* a set's: least recently used goes first */
    uint64_t gen;       /* +1 each time it starts over with a new reader */
};

/* Whether a read starting at unit first continues s (see above). */
bool stream_continues(const struct stream *s, uint64_t first, uint64_t behind, uint64_t gap);

/* s starts over at a read of units [first, last] ending at byte end. */
void stream_start(struct stream *s, uint64_t first, uint64_t last, uint64_t end);

/* s goes on at unit 0 of another object, its window kept (a reader that
 * reads one object after another: model.safetensors' tensors). */
void stream_restart(struct stream *s);

/* s follows a read of units [.., last] ending at byte end that continues
 * it (stream_continues): the window ramps (at most max), and the units to
 * fill ahead are claimed: [*from, *to] (none: *from > *to), cut at unit
 * n_units - 1 (the object's last). */
void stream_move(struct stream *s, uint64_t last, uint64_t end, unsigned max, uint64_t n_units,
                 uint64_t *from, uint64_t *to);

/* Units [k, to] of a claim [.., to] made at generation gen were not
 * queued: claimed again by a later read, unless s started over or claimed
 * past to meanwhile. */
void stream_unclaim(struct stream *s, uint64_t gen, uint64_t k, uint64_t to);

/* Whether a read starting at first is more than units past where s
 * started (a long stream: a client lets what it reads go at once). */
bool stream_long(const struct stream *s, uint64_t first, unsigned units);

/* A few streams of one reader's object, matched by position. */
#define STREAM_SET_MAX 8
struct stream_set {
    struct stream st[STREAM_SET_MAX];
    uint64_t tick;
};

/* The stream of set that a read of units [first, last] ending at byte end
 * continues (the first that does: it starts within its window + 2 units
 * before next, and at most at next), marked most recently used; or NULL
 * after a new stream was started there in the least recently used slot. */
struct stream *stream_find(struct stream_set *set, uint64_t first, uint64_t last, uint64_t end);

#endif

/* cache/cache.c — a bounded cache of fixed-size blocks (see cache.h).
 *
 * Every block (struct cache_block and its buffer of block_bytes) is on one
 * of four lists, or on none while a failed fill's waiters still hold it:
 *
 *   ring    blocks in the table that are not used up, pinned or not, and
 *           blocks being filled: CLOCK sweeps it with the hand
 *   used    unpinned blocks in the table whose bytes have all been used
 *           (cache_put), oldest first: reused before the rest of the ring
 *   once    used-up blocks marked cache_once, oldest first: reused right
 *           after spare, even under keep_used
 *   spare   buffers without bytes (a failed fill's, or left by a clear of
 *           pinned blocks): reused first of all
 *
 * A miss takes a buffer from spare, else the oldest block of once, else the
 * oldest used-up block (under keep_used: only once the cache is full), else
 * a new one while the cache is below its capacity, else the CLOCK victim, and
 * only when everything is pinned a new one above the capacity (freed again
 * as pins are released: trim).
 */
#include "cache.h"
#include "slab.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum where { W_NONE, W_RING, W_USED, W_ONCE, W_SPARE };

struct cache_block {
    uint64_t a, b;
    size_t len;                     /* bytes of data */
    size_t used;                    /* bytes callers used (cache_put), at most len */
    unsigned pins;
    unsigned char where;            /* enum where */
    bool in_table;
    bool ref;                       /* CLOCK's second-chance bit */
    bool filling;                   /* placeholder: bytes not there yet */
    bool once;                      /* cache_once: goes to once when used up */
    bool ahead;                     /* filled by cache_claim, not yet got */
    int fill_err;                   /* set with filling=false on failure */
    struct cache_block *hnext;      /* hash bucket chain */
    struct cache_block *prev, *next;/* the list it is on (circular) */
    unsigned char *data;            /* block_bytes of room */
    struct slab *slab;              /* the huge page it is carved from, or NULL
                                       (slab.h) */
};

struct cache {
    pthread_mutex_t mu;
    pthread_cond_t filled;          /* a placeholder became ready or failed */
    size_t block_bytes;
    uint64_t capacity, max_blocks;
    cache_fill_fn fill;
    void *ctx;
    struct cache_block **bucket;
    uint64_t nbucket;               /* power of two */
    struct cache_block *hand;       /* the ring, at CLOCK's hand; NULL: empty */
    struct cache_block *used;       /* the used-up list, oldest first */
    struct cache_block *once;       /* used-up blocks marked cache_once */
    struct cache_block *spare;
    uint64_t nbuf;                  /* buffers allocated, wherever they are */
    /* the buffers (slab.h); map_buffer runs with and without mu */
    struct slab_alloc bufs;
    uint64_t in_table;
    bool keep_used;                 /* cache_keep_used */
    uint64_t hits, misses, evictions, fill_errors, waits, prefetched, wasted;
};

static uint64_t mix(uint64_t a, uint64_t b)
{
    uint64_t h = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 29);
}

/* What one buffer counts for: its room (whole pages; its share of a huge
 * page when buffers share them) and its bookkeeping. */
static uint64_t buf_cost(const struct cache *c)
{
    return sizeof(struct cache_block) + slab_buf_bytes(&c->bufs);
}

/* ---- lists ---------------------------------------------------------------- */

static void list_add_tail(struct cache_block **head, struct cache_block *x)
{
    if (!*head) {
        x->prev = x->next = x;
        *head = x;
    } else {                        /* just behind the head: reached last */
        x->next = *head;
        x->prev = (*head)->prev;
        (*head)->prev->next = x;
        (*head)->prev = x;
    }
}

static void list_del(struct cache_block **head, struct cache_block *x)
{
    if (x->next == x) {
        *head = NULL;
    } else {
        x->prev->next = x->next;
        x->next->prev = x->prev;
        if (*head == x)
            *head = x->next;
    }
}

static struct cache_block **list_of(struct cache *c, enum where w)
{
    return w == W_RING ? &c->hand : w == W_USED ? &c->used : w == W_ONCE ? &c->once : &c->spare;
}

static void move_to(struct cache *c, struct cache_block *x, enum where w)
{
    if (x->where != W_NONE)
        list_del(list_of(c, x->where), x);
    x->where = (unsigned char)w;
    if (w != W_NONE)
        list_add_tail(list_of(c, w), x);
}

/* ---- buffers (slab.h: huge pages) ----------------------------------------- */

static struct cache_block *map_buffer(struct cache *c)
{
    struct cache_block *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->data = slab_get(&c->bufs, &x->slab);
    if (!x->data) {
        free(x);
        return NULL;
    }
    return x;
}

static struct cache_block *new_buffer(struct cache *c)
{
    struct cache_block *x = map_buffer(c);
    if (x)
        c->nbuf++;
    return x;
}

static void free_buffer(struct cache *c, struct cache_block *x)
{
    c->nbuf--;
    slab_put(&c->bufs, x->data, x->slab);
    free(x);
}

/* ---- the table ------------------------------------------------------------ */

static struct cache_block **bucket_of(struct cache *c, uint64_t a, uint64_t b)
{
    return &c->bucket[(mix(a, b) >> 8) & (c->nbucket - 1)];
}

static struct cache_block *lookup(struct cache *c, uint64_t a, uint64_t b)
{
    for (struct cache_block *x = *bucket_of(c, a, b); x; x = x->hnext)
        if (x->a == a && x->b == b)
            return x;
    return NULL;
}

static void table_del(struct cache *c, struct cache_block *x)
{
    struct cache_block **pp = bucket_of(c, x->a, x->b);
    while (*pp != x)
        pp = &(*pp)->hnext;
    *pp = x->hnext;
    x->in_table = false;
    c->in_table--;
}

/* Takes unpinned block x out of the table and off its list. */
static void evict(struct cache *c, struct cache_block *x)
{
    table_del(c, x);
    move_to(c, x, W_NONE);
    c->evictions++;
    if (x->ahead)
        c->wasted++;                /* filled ahead, never got */
}

/* The CLOCK victim: an unpinned block of the ring whose second chance is
 * spent; NULL after two full turns (everything pinned). */
static struct cache_block *clock_victim(struct cache *c)
{
    for (uint64_t steps = 2 * c->in_table + 2; c->hand && steps--;) {
        struct cache_block *x = c->hand;
        c->hand = x->next;
        if (x->pins)
            continue;
        if (x->ref) {
            x->ref = false;
            continue;
        }
        return x;
    }
    return NULL;
}

/* A buffer for a new block (see the top of this file); NULL: ENOMEM. */
static struct cache_block *take_buffer(struct cache *c)
{
    struct cache_block *x;
    if ((x = c->spare)) {
        move_to(c, x, W_NONE);
        return x;
    }
    if ((x = c->once)) {
        evict(c, x);
        return x;
    }
    if (c->keep_used && c->nbuf < c->max_blocks && (x = new_buffer(c)))
        return x;
    if ((x = c->used) || (c->nbuf >= c->max_blocks && (x = clock_victim(c)))) {
        evict(c, x);
        return x;
    }
    return new_buffer(c);
}

/* Frees buffers until the cache is within its capacity again, or only
 * pinned blocks are left. */
static void trim(struct cache *c)
{
    while (c->nbuf > c->max_blocks) {
        struct cache_block *x = c->spare;
        if (x)
            move_to(c, x, W_NONE);
        else if ((x = c->once) || (x = c->used) || (x = clock_victim(c)))
            evict(c, x);
        else
            return;
        free_buffer(c, x);
    }
}

/* A buffer nobody holds any more and that is in no table: spare, or freed
 * when the cache is over its capacity. */
static void release_buffer(struct cache *c, struct cache_block *x)
{
    if (c->nbuf > c->max_blocks)
        free_buffer(c, x);
    else
        move_to(c, x, W_SPARE);
}

/* Drops one pin of x and records its use; the lock is held. */
static void unpin(struct cache *c, struct cache_block *x, size_t used)
{
    x->used = used < x->len - x->used ? x->used + used : x->len;
    if (--x->pins == 0) {
        if (!x->in_table)
            release_buffer(c, x);
        else if (x->used >= x->len && x->where == W_RING)
            move_to(c, x, x->once ? W_ONCE : W_USED);
    }
    if (c->nbuf > c->max_blocks)
        trim(c);
}

/* ---- the cache ------------------------------------------------------------ */

struct cache *cache_new(size_t block_bytes, uint64_t capacity, cache_fill_fn fill, void *ctx)
{
    if (block_bytes == 0 || block_bytes > SIZE_MAX / 2)
        return NULL;
    struct cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->block_bytes = block_bytes;
    slab_init(&c->bufs, block_bytes);
    c->capacity = capacity;
    c->max_blocks = capacity / buf_cost(c);
    c->fill = fill;
    c->ctx = ctx;
    uint64_t nb = 16;
    while (nb < 2 * c->max_blocks && nb < (1u << 20))
        nb *= 2;
    c->nbucket = nb;
    c->bucket = calloc(nb, sizeof *c->bucket);
    if (!c->bucket) {
        slab_fini(&c->bufs);
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->filled, NULL);
    return c;
}

static void free_list(struct cache *c, struct cache_block **head)
{
    while (*head) {
        struct cache_block *x = *head;
        list_del(head, x);
        free_buffer(c, x);
    }
}

void cache_free(struct cache *c)
{
    if (!c)
        return;
    free_list(c, &c->hand);
    free_list(c, &c->used);
    free_list(c, &c->once);
    free_list(c, &c->spare);
    free(c->bucket);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->filled);
    slab_fini(&c->bufs);
    free(c);
}

/* Inserts a pinned placeholder for block (a, b) (absent: the lock is
 * held), counted as a miss; NULL when out of memory. */
static struct cache_block *insert(struct cache *c, uint64_t a, uint64_t b, size_t len,
                                  bool prefetch)
{
    c->misses++;
    struct cache_block *x = take_buffer(c);
    if (!x)
        return NULL;
    x->a = a;
    x->b = b;
    x->len = len;
    x->used = 0;
    x->once = false;
    x->ahead = prefetch;
    x->pins = 1;
    x->ref = true;
    x->filling = true;
    x->fill_err = 0;
    struct cache_block **bk = bucket_of(c, a, b);
    x->hnext = *bk;
    *bk = x;
    x->in_table = true;
    c->in_table++;
    move_to(c, x, W_RING);          /* just behind the hand: swept last */
    if (prefetch)
        c->prefetched++;
    return x;
}

/* Fills placeholder x (pinned once by the caller), unlocked; then wakes its
 * waiters.  0, or the fill's error: the block has left the table and the
 * caller's pin is gone. */
static int fill(struct cache *c, struct cache_block *x, void *call)
{
    /* Fill outside the lock: producing the bytes is the slow part. */
    int e = c->fill(c->ctx, call, x->a, x->b, x->data, x->len);
    pthread_mutex_lock(&c->mu);
    x->filling = false;
    pthread_cond_broadcast(&c->filled);
    if (e) {
        /* Out of the table; waiters see fill_err, the last one releases. */
        table_del(c, x);
        move_to(c, x, W_NONE);
        c->fill_errors++;
        x->fill_err = e;
        unpin(c, x, 0);
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

/*
 * Hits and misses.  A miss inserts a pinned placeholder first, so a second
 * getter of the same block waits for the first one's fill instead of doing
 * it again; the fill itself runs unlocked.
 */
struct cache_block *cache_get(struct cache *c, uint64_t a, uint64_t b, size_t len, void *call,
                              int *err)
{
    if (len > c->block_bytes) {     /* never sized by an unchecked number */
        *err = EINVAL;
        return NULL;
    }
    pthread_mutex_lock(&c->mu);
    struct cache_block *x;
    while ((x = lookup(c, a, b))) {
        x->pins++;
        x->ahead = false;           /* got: a prefetch that was of use */
        if (!x->filling) {
            x->ref = true;
            if (x->where == W_USED || x->where == W_ONCE) { /* wanted again: back in the ring */
                x->once = false;
                move_to(c, x, W_RING);
            }
            c->hits++;
            pthread_mutex_unlock(&c->mu);
            return x;
        }
        /* Someone is filling it: wait, then look again (it may have
         * failed and left the table). */
        c->waits++;
        while (x->filling)
            pthread_cond_wait(&c->filled, &c->mu);
        if (x->fill_err) {
            int e = x->fill_err;
            unpin(c, x, 0);
            pthread_mutex_unlock(&c->mu);
            *err = e;
            return NULL;
        }
        x->pins--;                  /* the hit above pins it again */
    }
    x = insert(c, a, b, len, false);
    pthread_mutex_unlock(&c->mu);
    if (!x) {
        *err = ENOMEM;
        return NULL;
    }
    int e = fill(c, x, call);
    if (e) {
        *err = e;
        return NULL;
    }
    return x;
}

struct cache_block *cache_claim(struct cache *c, uint64_t a, uint64_t b, size_t len)
{
    if (len > c->block_bytes)
        return NULL;
    pthread_mutex_lock(&c->mu);
    struct cache_block *x = lookup(c, a, b) ? NULL : insert(c, a, b, len, true);
    pthread_mutex_unlock(&c->mu);
    return x;
}

bool cache_fill_claimed(struct cache *c, struct cache_block *blk, void *call)
{
    if (fill(c, blk, call) != 0)
        return false;
    cache_put(c, blk, 0);
    return true;
}

bool cache_prefetch(struct cache *c, uint64_t a, uint64_t b, size_t len, void *call)
{
    struct cache_block *x = cache_claim(c, a, b, len);
    return x && cache_fill_claimed(c, x, call);
}

bool cache_contains(struct cache *c, uint64_t a, uint64_t b)
{
    pthread_mutex_lock(&c->mu);
    bool r = lookup(c, a, b) != NULL;
    pthread_mutex_unlock(&c->mu);
    return r;
}

uint64_t cache_capacity_blocks(const struct cache *c)
{
    return c->max_blocks;
}

void cache_reserve(struct cache *c, uint64_t n)
{
    for (;;) {
        pthread_mutex_lock(&c->mu);
        bool more = c->nbuf < n && c->nbuf < c->max_blocks;
        if (more)
            c->nbuf++;          /* counted now: nobody grows past n meanwhile */
        pthread_mutex_unlock(&c->mu);
        if (!more)
            return;
        struct cache_block *x = map_buffer(c);
        pthread_mutex_lock(&c->mu);
        if (x)
            move_to(c, x, W_SPARE);
        else
            c->nbuf--;
        pthread_mutex_unlock(&c->mu);
        if (!x)
            return;
    }
}

void cache_keep_used(struct cache *c, bool keep)
{
    pthread_mutex_lock(&c->mu);
    c->keep_used = keep;
    pthread_mutex_unlock(&c->mu);
}

const void *cache_data(const struct cache_block *blk) { return blk->data; }

size_t cache_len(const struct cache_block *blk) { return blk->len; }

void cache_put(struct cache *c, struct cache_block *blk, size_t used)
{
    pthread_mutex_lock(&c->mu);
    unpin(c, blk, used);
    pthread_mutex_unlock(&c->mu);
}

void cache_once(struct cache *c, struct cache_block *blk)
{
    pthread_mutex_lock(&c->mu);
    blk->once = true;
    pthread_mutex_unlock(&c->mu);
}

void cache_clear(struct cache *c)
{
    pthread_mutex_lock(&c->mu);
    while (c->once || c->used) {
        struct cache_block *x = c->once ? c->once : c->used;
        evict(c, x);
        free_buffer(c, x);
    }
    /* one turn of the ring: the unpinned blocks go, the pinned stay */
    for (uint64_t n = c->in_table; c->hand && n--;) {
        struct cache_block *x = c->hand;
        c->hand = x->next;
        if (!x->pins) {
            evict(c, x);
            free_buffer(c, x);
        }
    }
    while (c->spare) {
        struct cache_block *x = c->spare;
        move_to(c, x, W_NONE);
        free_buffer(c, x);
    }
    pthread_mutex_unlock(&c->mu);
}

void cache_get_stats(struct cache *c, struct cache_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    out->hits = c->hits;
    out->misses = c->misses;
    out->evictions = c->evictions;
    out->fill_errors = c->fill_errors;
    out->waits = c->waits;
    out->prefetched = c->prefetched;
    out->prefetch_wasted = c->wasted;
    out->bytes_held = c->nbuf * buf_cost(c);
    out->blocks_held = c->in_table;
    out->capacity = c->capacity;
    out->block_bytes = c->block_bytes;
    pthread_mutex_unlock(&c->mu);
}

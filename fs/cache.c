/* fs/cache.c — sharded CLOCK cache of dequantized chunks (see cache.h). */
#include "cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct cache_chunk {
    uint64_t tensor, chunk;
    size_t n;                       /* floats */
    unsigned pins;
    bool ref;                       /* CLOCK's second-chance bit */
    bool filling;                   /* placeholder: data not there yet */
    int fill_err;                   /* set with filling=false on failure */
    struct cache_chunk *hnext;      /* hash bucket chain */
    struct cache_chunk *prev, *next;/* CLOCK ring */
    float data[];
};

struct shard {
    pthread_mutex_t mu;
    pthread_cond_t filled;          /* a placeholder became ready or failed */
    struct cache_chunk **bucket;
    uint64_t nbucket;               /* power of two */
    struct cache_chunk *hand;       /* CLOCK hand; NULL when empty */
    uint64_t bytes, cap, chunks;
    uint64_t hits, misses, evictions, fill_errors;
};

struct cache {
    struct shard *shard;
    unsigned nshard;                /* power of two */
    uint64_t capacity;
    cache_fill_fn fill;
    void *ctx;
};

static uint64_t mix(uint64_t tensor, uint64_t chunk)
{
    uint64_t h = tensor * 0x9E3779B97F4A7C15ull ^ (chunk + 0x632BE59BD9B4E019ull);
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ull;
    return h ^ (h >> 29);
}

static size_t chunk_bytes(size_t n) { return sizeof(struct cache_chunk) + n * sizeof(float); }

struct cache *cache_new(uint64_t capacity, cache_fill_fn fill, void *ctx)
{
    struct cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    /* Enough shards that readers rarely meet, but each must hold a few
     * chunks or the cache would thrash long before it is full. */
    unsigned n = 1;
    while (n < 64 && capacity / (n * 2) >= 4ull * CACHE_CHUNK_BYTES)
        n *= 2;
    c->nshard = n;
    c->capacity = capacity;
    c->fill = fill;
    c->ctx = ctx;
    c->shard = calloc(n, sizeof *c->shard);
    if (!c->shard) {
        free(c);
        return NULL;
    }
    for (unsigned i = 0; i < n; i++) {
        struct shard *s = &c->shard[i];
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->filled, NULL);
        s->cap = capacity / n;
        uint64_t nb = 16;
        while (nb < 2 * (s->cap / CACHE_CHUNK_BYTES + 1))
            nb *= 2;
        s->nbucket = nb;
        s->bucket = calloc(nb, sizeof *s->bucket);
        if (!s->bucket) {
            c->nshard = i + 1;
            cache_free(c);
            return NULL;
        }
    }
    return c;
}

static void unlink_chunk(struct shard *s, struct cache_chunk *ch, uint64_t h)
{
    struct cache_chunk **pp = &s->bucket[(h >> 8) & (s->nbucket - 1)];
    while (*pp != ch)
        pp = &(*pp)->hnext;
    *pp = ch->hnext;
    if (ch->next == ch) {
        s->hand = NULL;
    } else {
        ch->prev->next = ch->next;
        ch->next->prev = ch->prev;
        if (s->hand == ch)
            s->hand = ch->next;
    }
    s->bytes -= chunk_bytes(ch->n);
    s->chunks--;
}

void cache_free(struct cache *c)
{
    if (!c)
        return;
    for (unsigned i = 0; i < c->nshard; i++) {
        struct shard *s = &c->shard[i];
        for (uint64_t b = 0; s->bucket && b < s->nbucket; b++)
            for (struct cache_chunk *ch = s->bucket[b], *nx; ch; ch = nx) {
                nx = ch->hnext;
                free(ch);
            }
        free(s->bucket);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->filled);
    }
    free(c->shard);
    free(c);
}

static struct cache_chunk *lookup(struct shard *s, uint64_t h, uint64_t tensor,
                                  uint64_t chunk)
{
    for (struct cache_chunk *ch = s->bucket[(h >> 8) & (s->nbucket - 1)]; ch; ch = ch->hnext)
        if (ch->tensor == tensor && ch->chunk == chunk)
            return ch;
    return NULL;
}

/* Evicts unpinned chunks until need more bytes fit; gives up after two full
 * turns of the hand (everything pinned). */
static void make_room(struct shard *s, size_t need)
{
    uint64_t steps = 2 * s->chunks + 2;
    while (s->hand && s->bytes + need > s->cap && steps--) {
        struct cache_chunk *ch = s->hand;
        if (ch->pins) {
            s->hand = ch->next;
        } else if (ch->ref) {
            ch->ref = false;
            s->hand = ch->next;
        } else {
            unlink_chunk(s, ch, mix(ch->tensor, ch->chunk));
            free(ch);
            s->evictions++;
        }
    }
}

/* Drops one pin of ch (the shard lock is held).  A shard over its cap
 * (everything was pinned when a chunk came in) shrinks back as soon as
 * pins are released. */
static void unpin(struct shard *s, struct cache_chunk *ch)
{
    ch->pins--;
    if (s->bytes > s->cap)
        make_room(s, 0);
}

/* Inserts ch (pinned, filling) into s; the shard lock is held. */
static void insert(struct shard *s, struct cache_chunk *ch, uint64_t h)
{
    make_room(s, chunk_bytes(ch->n));
    uint64_t b = (h >> 8) & (s->nbucket - 1);
    ch->hnext = s->bucket[b];
    s->bucket[b] = ch;
    if (!s->hand) {
        ch->prev = ch->next = ch;
        s->hand = ch;
    } else {                        /* just behind the hand: swept last */
        ch->next = s->hand;
        ch->prev = s->hand->prev;
        s->hand->prev->next = ch;
        s->hand->prev = ch;
    }
    s->bytes += chunk_bytes(ch->n);
    s->chunks++;
}

/*
 * The one path for hits and misses.  A miss inserts a pinned placeholder
 * first, so a second reader of the same chunk waits for the first one's
 * fill instead of doing it again; the fill itself runs unlocked.
 * With only_if_absent (prefetch), an existing entry is left alone and NULL
 * is returned; so is NULL after a prefetch fill.
 */
static struct cache_chunk *get(struct cache *c, uint64_t tensor, uint64_t chunk,
                               size_t n, int *err, bool only_if_absent)
{
    if (n > CACHE_CHUNK_ELEMS) {    /* never sized by an unchecked number */
        *err = EINVAL;
        return NULL;
    }
    uint64_t h = mix(tensor, chunk);
    struct shard *s = &c->shard[h & (c->nshard - 1)];

    pthread_mutex_lock(&s->mu);
    for (;;) {
        struct cache_chunk *ch = lookup(s, h, tensor, chunk);
        if (!ch)
            break;
        if (only_if_absent) {
            pthread_mutex_unlock(&s->mu);
            return NULL;
        }
        if (!ch->filling) {
            ch->pins++;
            ch->ref = true;
            s->hits++;
            pthread_mutex_unlock(&s->mu);
            return ch;
        }
        /* Someone is filling it: wait, then look again (it may have
         * failed and been removed). */
        ch->pins++;
        while (ch->filling)
            pthread_cond_wait(&s->filled, &s->mu);
        ch->pins--;
        if (ch->fill_err) {
            int e = ch->fill_err;
            if (ch->pins == 0)
                free(ch);
            pthread_mutex_unlock(&s->mu);
            *err = e;
            return NULL;
        }
    }
    s->misses++;
    struct cache_chunk *ch = malloc(chunk_bytes(n));
    if (!ch) {
        pthread_mutex_unlock(&s->mu);
        *err = ENOMEM;
        return NULL;
    }
    ch->tensor = tensor;
    ch->chunk = chunk;
    ch->n = n;
    ch->pins = 1;
    ch->ref = true;
    ch->filling = true;
    ch->fill_err = 0;
    insert(s, ch, h);
    pthread_mutex_unlock(&s->mu);

    /* Fill outside the lock: dequantization is the slow part. */
    int e = c->fill(c->ctx, tensor, chunk, ch->data, n);

    pthread_mutex_lock(&s->mu);
    ch->filling = false;
    if (e) {
        /* Out of the table; waiters see fill_err and the last one frees. */
        unlink_chunk(s, ch, h);
        s->fill_errors++;
        ch->fill_err = e;
        ch->pins--;
        if (ch->pins == 0)
            free(ch);
        pthread_cond_broadcast(&s->filled);
        pthread_mutex_unlock(&s->mu);
        *err = e;
        return NULL;
    }
    pthread_cond_broadcast(&s->filled);
    if (only_if_absent) {
        unpin(s, ch);
        ch = NULL;
    }
    pthread_mutex_unlock(&s->mu);
    return ch;
}

struct cache_chunk *cache_get(struct cache *c, uint64_t tensor, uint64_t chunk,
                              size_t n, int *err)
{
    return get(c, tensor, chunk, n, err, false);
}

void cache_prefetch(struct cache *c, uint64_t tensor, uint64_t chunk, size_t n)
{
    int err;
    get(c, tensor, chunk, n, &err, true);
}

bool cache_contains(struct cache *c, uint64_t tensor, uint64_t chunk)
{
    uint64_t h = mix(tensor, chunk);
    struct shard *s = &c->shard[h & (c->nshard - 1)];
    pthread_mutex_lock(&s->mu);
    bool r = lookup(s, h, tensor, chunk) != NULL;
    pthread_mutex_unlock(&s->mu);
    return r;
}

uint64_t cache_capacity_chunks(const struct cache *c)
{
    return c->capacity / CACHE_CHUNK_BYTES;
}

const float *cache_data(const struct cache_chunk *ch) { return ch->data; }

void cache_put(struct cache *c, struct cache_chunk *ch)
{
    struct shard *s = &c->shard[mix(ch->tensor, ch->chunk) & (c->nshard - 1)];
    pthread_mutex_lock(&s->mu);
    unpin(s, ch);
    pthread_mutex_unlock(&s->mu);
}

void cache_clear(struct cache *c)
{
    for (unsigned i = 0; i < c->nshard; i++) {
        struct shard *s = &c->shard[i];
        pthread_mutex_lock(&s->mu);
        uint64_t cap = s->cap;
        s->cap = 0;
        make_room(s, 0);
        s->cap = cap;
        pthread_mutex_unlock(&s->mu);
    }
}

void cache_get_stats(struct cache *c, struct cache_stats *out)
{
    memset(out, 0, sizeof *out);
    out->capacity = c->capacity;
    for (unsigned i = 0; i < c->nshard; i++) {
        struct shard *s = &c->shard[i];
        pthread_mutex_lock(&s->mu);
        out->hits += s->hits;
        out->misses += s->misses;
        out->evictions += s->evictions;
        out->fill_errors += s->fill_errors;
        out->bytes_held += s->bytes;
        out->chunks_held += s->chunks;
        pthread_mutex_unlock(&s->mu);
    }
}

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
    struct cache_chunk *hnext;      /* hash bucket chain */
    struct cache_chunk *prev, *next;/* CLOCK ring */
    float data[];
};

struct shard {
    pthread_mutex_t mu;
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

struct cache_chunk *cache_get(struct cache *c, uint64_t tensor, uint64_t chunk,
                              size_t n, int *err)
{
    uint64_t h = mix(tensor, chunk);
    struct shard *s = &c->shard[h & (c->nshard - 1)];

    pthread_mutex_lock(&s->mu);
    struct cache_chunk *ch = lookup(s, h, tensor, chunk);
    if (ch) {
        ch->pins++;
        ch->ref = true;
        s->hits++;
        pthread_mutex_unlock(&s->mu);
        return ch;
    }
    s->misses++;
    pthread_mutex_unlock(&s->mu);

    /* Fill outside the lock: dequantization is the slow part. */
    struct cache_chunk *fresh = malloc(chunk_bytes(n));
    if (!fresh) {
        *err = ENOMEM;
        return NULL;
    }
    fresh->tensor = tensor;
    fresh->chunk = chunk;
    fresh->n = n;
    int e = c->fill(c->ctx, tensor, chunk, fresh->data, n);
    if (e) {
        free(fresh);
        pthread_mutex_lock(&s->mu);
        s->fill_errors++;
        pthread_mutex_unlock(&s->mu);
        *err = e;
        return NULL;
    }

    pthread_mutex_lock(&s->mu);
    ch = lookup(s, h, tensor, chunk);
    if (ch) {                       /* another thread filled it meanwhile */
        ch->pins++;
        ch->ref = true;
        pthread_mutex_unlock(&s->mu);
        free(fresh);
        return ch;
    }
    make_room(s, chunk_bytes(n));
    fresh->pins = 1;
    fresh->ref = true;
    uint64_t b = (h >> 8) & (s->nbucket - 1);
    fresh->hnext = s->bucket[b];
    s->bucket[b] = fresh;
    if (!s->hand) {
        fresh->prev = fresh->next = fresh;
        s->hand = fresh;
    } else {                        /* just behind the hand: swept last */
        fresh->next = s->hand;
        fresh->prev = s->hand->prev;
        s->hand->prev->next = fresh;
        s->hand->prev = fresh;
    }
    s->bytes += chunk_bytes(n);
    s->chunks++;
    pthread_mutex_unlock(&s->mu);
    return fresh;
}

const float *cache_data(const struct cache_chunk *ch) { return ch->data; }

void cache_put(struct cache *c, struct cache_chunk *ch)
{
    struct shard *s = &c->shard[mix(ch->tensor, ch->chunk) & (c->nshard - 1)];
    pthread_mutex_lock(&s->mu);
    ch->pins--;
    /* A shard over its cap (everything was pinned when this chunk came in)
     * shrinks back as soon as pins are released. */
    if (s->bytes > s->cap)
        make_room(s, 0);
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

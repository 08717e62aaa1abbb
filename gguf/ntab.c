/* gguf/ntab.c — names to values, open addressing (see ntab.h). */
#include "ntab.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a, then MurmurHash3's finalizer, so that every bit of the name
 * reaches the masked low bits (names that differ in a few bytes, like
 * blk.N.ffn_up.weight, would otherwise cluster). */
static uint64_t hash_bytes(const void *name, size_t n)
{
    const unsigned char *p = name;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t hash_of(const struct gguf_ntab *t, uint64_t value)
{
    size_t len;
    const void *name = t->key_of(t->ctx, value, &len);
    return hash_bytes(name, len);
}

enum gguf_err gguf_ntab_init(struct gguf_ntab *t, uint64_t expect,
                             gguf_ntab_key_fn key_of, const void *ctx)
{
    uint64_t cap = 16;
    if (expect > GGUF_NTAB_EXPECT_MAX)
        expect = GGUF_NTAB_EXPECT_MAX;
    while (cap < expect * 2)
        cap <<= 1;
    memset(t, 0, sizeof *t);
    t->key_of = key_of;
    t->ctx = ctx;
    t->slot = calloc(cap, sizeof *t->slot);
    if (!t->slot)
        return GGUF_E_NOMEM;
    t->mask = cap - 1;
    return GGUF_OK;
}

/* Doubles the slot array and re-inserts every value. */
static enum gguf_err grow(struct gguf_ntab *t)
{
    uint64_t ncap = (t->mask + 1) * 2;
    if (ncap > SIZE_MAX / sizeof *t->slot)
        return GGUF_E_NOMEM;
    uint64_t *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return GGUF_E_NOMEM;
    for (uint64_t i = 0; i <= t->mask; i++) {
        uint64_t e = t->slot[i];
        if (!e)
            continue;
        uint64_t h = hash_of(t, e - 1) & (ncap - 1);
        while (ns[h])
            h = (h + 1) & (ncap - 1);
        ns[h] = e;
    }
    free(t->slot);
    t->slot = ns;
    t->mask = ncap - 1;
    return GGUF_OK;
}

/* The slot holding name, or the empty slot where it would go. */
static uint64_t probe(const struct gguf_ntab *t, const void *name, size_t len)
{
    for (uint64_t h = hash_bytes(name, len) & t->mask;; h = (h + 1) & t->mask) {
        uint64_t e = t->slot[h];
        if (e == 0)
            return h;
        size_t el;
        const void *en = t->key_of(t->ctx, e - 1, &el);
        if (el == len && memcmp(en, name, len) == 0)
            return h;
    }
}

enum gguf_err gguf_ntab_add(struct gguf_ntab *t, uint64_t value, uint64_t *prev)
{
    uint64_t scratch;
    if (!prev)
        prev = &scratch;
    *prev = UINT64_MAX;
    if (value == UINT64_MAX)
        return GGUF_E_INVAL;
    if ((t->n + 1) * 2 > t->mask + 1) {
        enum gguf_err e = grow(t);
        if (e)
            return e;
    }
    size_t len;
    const void *name = t->key_of(t->ctx, value, &len);
    uint64_t h = probe(t, name, len);
    if (t->slot[h]) {
        *prev = t->slot[h] - 1;
        return GGUF_E_EXIST;
    }
    t->slot[h] = value + 1;
    t->n++;
    return GGUF_OK;
}

bool gguf_ntab_find(const struct gguf_ntab *t, const void *name, size_t len,
                    uint64_t *value)
{
    if (!t->slot)
        return false;
    uint64_t e = t->slot[probe(t, name, len)];
    if (!e)
        return false;
    if (value)
        *value = e - 1;
    return true;
}

void gguf_ntab_free(struct gguf_ntab *t)
{
    free(t->slot);
    t->slot = NULL;
    t->mask = t->n = 0;
}

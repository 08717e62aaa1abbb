/*
 * tests/unit/gb.h — a tiny GGUF byte builder for handcrafted test files
 * (any version and byte order).  Include after <cmocka.h>.
 */
#ifndef TESTS_UNIT_GB_H
#define TESTS_UNIT_GB_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gb {
    uint8_t *p;
    size_t len, cap;
    bool be, v1;
};

static inline void gb_put(struct gb *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static inline void gb_u8(struct gb *b, uint8_t v) { gb_put(b, &v, 1); }

static inline void gb_u32(struct gb *b, uint32_t v)
{
    if (b->be)
        v = __builtin_bswap32(v);
    gb_put(b, &v, 4);
}

static inline void gb_u64(struct gb *b, uint64_t v)
{
    if (b->be)
        v = __builtin_bswap64(v);
    gb_put(b, &v, 8);
}

static inline void gb_count(struct gb *b, uint64_t v)
{
    if (b->v1)
        gb_u32(b, (uint32_t)v);
    else
        gb_u64(b, v);
}

static inline void gb_str(struct gb *b, const char *s)
{
    gb_count(b, strlen(s));
    gb_put(b, s, strlen(s));
}

/* A tensor info with n_dims dims from ne[]. */
static inline void gb_tensor(struct gb *b, const char *name, uint32_t n_dims,
                             const uint64_t *ne, uint32_t type, uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        gb_count(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

/* "GGUF", version (v1 counts are u32 from here on), the two counts. */
static inline void gb_header(struct gb *b, uint32_t version, uint64_t n_tensors,
                             uint64_t n_kv)
{
    b->v1 = version == 1;
    gb_put(b, "GGUF", 4);
    gb_u32(b, version);
    gb_count(b, n_tensors);
    gb_count(b, n_kv);
}

/* Key/value records: key, type (GGUF_U32 = 4, GGUF_STRING = 8), value. */
static inline void gb_kv_u32(struct gb *b, const char *k, uint32_t v)
{
    gb_str(b, k);
    gb_u32(b, 4);
    gb_u32(b, v);
}

static inline void gb_kv_str(struct gb *b, const char *k, const char *v)
{
    gb_str(b, k);
    gb_u32(b, 8);
    gb_str(b, v);
}

/* Zero bytes up to a multiple of align. */
static inline void gb_pad(struct gb *b, size_t align)
{
    while (b->len % align)
        gb_u8(b, 0);
}

/* Shard k (0-based) of a model of count shards: shard 0 holds the metadata
 * (general.architecture llama, llama.context_length ctx); when count > 1
 * every shard carries split.no and split.count (count_key in shard 0: what
 * its split.count says) and shard 0 split.tensors.count; one f32 tensor
 * "blk.K.w" of 4 elements each, bytes k*16+1 .. k*16+16, aligned to 32. */
static inline struct gb gb_shard(unsigned k, unsigned count, uint32_t ctx, uint32_t count_key)
{
    struct gb b = { 0 };
    unsigned nkv = (k == 0 ? 2 : 0) + (count > 1 ? 2 + (k == 0) : 0);
    gb_header(&b, 3, 1, nkv);
    if (k == 0) {
        gb_kv_str(&b, "general.architecture", "llama");
        gb_kv_u32(&b, "llama.context_length", ctx);
    }
    if (count > 1) {
        gb_kv_u32(&b, "split.no", k);
        gb_kv_u32(&b, "split.count", k == 0 ? count_key : count);
        if (k == 0)
            gb_kv_u32(&b, "split.tensors.count", count);
    }
    char name[32];
    snprintf(name, sizeof name, "blk.%u.w", k);
    uint64_t ne[1] = { 4 };
    gb_tensor(&b, name, 1, ne, 0 /* f32 */, 0);
    gb_pad(&b, 32);
    for (unsigned i = 0; i < 16; i++)
        gb_u8(&b, (uint8_t)(k * 16 + i + 1));
    return b;
}

#endif

/*
 * gguf/bytes.h — integers in a GGUF file's byte order, read and written.
 *
 * A GGUF file is little-endian or, as a whole, big-endian (the version
 * field tells which: gguf/gguf.h).  Version 1 stores string lengths and
 * array counts — "counts" below — as u32; later versions as u64.  A struct
 * gguf_enc carries both facts, and every integer of a header is read and
 * written through the functions here, so byte order is handled in this one
 * place.
 *
 * Readers and writers take unaligned pointers (memcpy, never a cast) and do
 * no bounds checks: the caller has made sure the bytes are there.  The put
 * functions append to a gguf_buf and return false once it is out of memory
 * (gguf/buf.h).
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_BYTES_H
#define GGUF_BYTES_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "buf.h"

/* Byte order and count width of an encoding. */
struct gguf_enc {
    bool big_endian;
    bool v1;              /* 32-bit counts (string lengths, array counts) */
};

/* ---- reading ------------------------------------------------------------- */

static inline uint16_t gguf_rd16(const struct gguf_enc *e, const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return e->big_endian ? __builtin_bswap16(v) : v;
}

static inline uint32_t gguf_rd32(const struct gguf_enc *e, const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return e->big_endian ? __builtin_bswap32(v) : v;
}

static inline uint64_t gguf_rd64(const struct gguf_enc *e, const void *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return e->big_endian ? __builtin_bswap64(v) : v;
}

/* Bytes of a count field: 4 in version 1, else 8. */
static inline unsigned gguf_count_size(const struct gguf_enc *e)
{
    return e->v1 ? 4 : 8;
}

/* A count field (gguf_count_size bytes). */
static inline uint64_t gguf_rd_count(const struct gguf_enc *e, const void *p)
{
    return e->v1 ? gguf_rd32(e, p) : gguf_rd64(e, p);
}

/* ---- writing in place ------------------------------------------------------ */

static inline void gguf_wr16(const struct gguf_enc *e, void *p, uint16_t v)
{
    if (e->big_endian)
        v = __builtin_bswap16(v);
    memcpy(p, &v, 2);
}

static inline void gguf_wr32(const struct gguf_enc *e, void *p, uint32_t v)
{
    if (e->big_endian)
        v = __builtin_bswap32(v);
    memcpy(p, &v, 4);
}

static inline void gguf_wr64(const struct gguf_enc *e, void *p, uint64_t v)
{
    if (e->big_endian)
        v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
}

/* A count field.  In version 1 only the low 32 bits are written: callers
 * check that v fits (v <= UINT32_MAX) first. */
static inline void gguf_wr_count(const struct gguf_enc *e, void *p, uint64_t v)
{
    if (e->v1)
        gguf_wr32(e, p, (uint32_t)v);
    else
        gguf_wr64(e, p, v);
}

/* ---- appending to a buffer -------------------------------------------------- */

static inline bool gguf_put16(struct gguf_buf *b, const struct gguf_enc *e, uint16_t v)
{
    uint8_t x[2];
    gguf_wr16(e, x, v);
    return gguf_buf_put(b, x, 2);
}

static inline bool gguf_put32(struct gguf_buf *b, const struct gguf_enc *e, uint32_t v)
{
    uint8_t x[4];
    gguf_wr32(e, x, v);
    return gguf_buf_put(b, x, 4);
}

static inline bool gguf_put64(struct gguf_buf *b, const struct gguf_enc *e, uint64_t v)
{
    uint8_t x[8];
    gguf_wr64(e, x, v);
    return gguf_buf_put(b, x, 8);
}

/* A count field (same proviso as gguf_wr_count). */
static inline bool gguf_put_count(struct gguf_buf *b, const struct gguf_enc *e, uint64_t v)
{
    uint8_t x[8];
    gguf_wr_count(e, x, v);
    return gguf_buf_put(b, x, gguf_count_size(e));
}

#endif

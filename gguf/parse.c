/*
 * gguf/parse.c — reads and validates a GGUF header into a compact index.
 *
 * Layout (all integers in the file's byte order; "len" and "count" fields
 * are u32 in version 1 and u64 from version 2 on):
 *
 *   "GGUF" | u32 version | count n_tensors | count n_kv
 *   n_kv      × { string key | u32 vtype | value }
 *   n_tensors × { string name | u32 n_dims | dim ne[n_dims] | u32 type |
 *                 u64 offset }            (dim: u32 in v1, u64 after)
 *   padding to general.alignment | tensor data
 *
 *   string = len + bytes; array value = u32 elem vtype | count | elements.
 *
 * Every field is read through a cursor that fails before reading past the
 * bytes it has.  Counts are checked against the bytes left before anything
 * is sized by them, and the index grows geometrically as entries are
 * actually read, so a hostile count costs nothing.
 */
#include "gguf.h"
#include "source.h"
#include "types.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

const char *gguf_strerror(enum gguf_err e)
{
    switch (e) {
    case GGUF_OK: return "success";
    case GGUF_E_IO: return "read error";
    case GGUF_E_MAGIC: return "not a GGUF file";
    case GGUF_E_VERSION: return "unsupported GGUF version";
    case GGUF_E_TRUNCATED: return "file truncated";
    case GGUF_E_RANGE: return "value out of range";
    case GGUF_E_TYPE: return "unknown type";
    case GGUF_E_DUP: return "duplicate name";
    case GGUF_E_NOMEM: return "out of memory";
    case GGUF_E_SYNTAX: return "syntax error";
    case GGUF_E_INVAL: return "invalid argument";
    }
    return "unknown error";
}

uint16_t gguf_rd16(const struct gguf_enc *e, const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return e->big_endian ? __builtin_bswap16(v) : v;
}

uint32_t gguf_rd32(const struct gguf_enc *e, const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return e->big_endian ? __builtin_bswap32(v) : v;
}

uint64_t gguf_rd64(const struct gguf_enc *e, const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return e->big_endian ? __builtin_bswap64(v) : v;
}

/* ---- cursor ------------------------------------------------------------ */

struct cur {
    const uint8_t *b;
    uint64_t len;        /* bytes available in b */
    struct gguf_source *src;  /* non-NULL: b is ours (own) and grows by reads */
    uint8_t *own;
    uint64_t size;       /* bytes in the whole file */
    uint64_t off;
    struct gguf_enc enc;
    struct gguf_diag *diag;
    bool *need_more;
    const char *what;    /* context for messages: "key 'x'" etc. */
};

static enum gguf_err fail(struct cur *c, enum gguf_err e, uint64_t off,
                          const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum gguf_err fail(struct cur *c, enum gguf_err e, uint64_t off,
                          const char *fmt, ...)
{
    if (c->diag) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->diag->msg, sizeof c->diag->msg, fmt, ap);
        va_end(ap);
        c->diag->offset = off;
    }
    return e;
}

/* Reads more of the file into the cursor's own buffer so that at least upto
 * bytes are there; grows geometrically so the total work stays linear. */
static enum gguf_err refill(struct cur *c, uint64_t upto)
{
    uint64_t want = c->len * 2 > upto ? c->len * 2 : upto;
    if (want < (1u << 20))
        want = 1u << 20;
    if (want > c->size)
        want = c->size;
    uint8_t *nb = realloc(c->own, want ? want : 1);
    if (!nb)
        return fail(c, GGUF_E_NOMEM, c->off, "out of memory reading the header");
    c->own = nb;
    c->b = nb;
    while (c->len < want) {
        ssize_t r = c->src->ops->read(c->src, nb + c->len, (size_t)(want - c->len), c->len);
        if (r < 0)
            return fail(c, GGUF_E_IO, c->len, "read error: %s", strerror((int)-r));
        if (r == 0)
            return fail(c, GGUF_E_IO, c->len, "file shrank while being read");
        c->len += (uint64_t)r;
    }
    return GGUF_OK;
}

/* Makes sure n bytes can be read at the cursor. */
static enum gguf_err need(struct cur *c, uint64_t n, const char *field)
{
    if (n <= c->len - c->off)
        return GGUF_OK;
    if (c->src && n <= c->size - c->off)
        return refill(c, c->off + n);
    if (n > c->size - c->off)
        return fail(c, GGUF_E_TRUNCATED, c->off,
                    "%s%s%s runs past the end of the file (%llu bytes needed, "
                    "%llu left)", c->what ? c->what : "", c->what ? ": " : "",
                    field, (unsigned long long)n,
                    (unsigned long long)(c->size - c->off));
    if (c->need_more) {
        *c->need_more = true;
        if (c->diag)
            c->diag->offset = c->off + n;
    }
    return GGUF_E_TRUNCATED;
}

#define TRY(x) do { enum gguf_err e_ = (x); if (e_ != GGUF_OK) return e_; } while (0)

static enum gguf_err rd_u32(struct cur *c, uint32_t *v, const char *field)
{
    TRY(need(c, 4, field));
    *v = gguf_rd32(&c->enc, c->b + c->off);
    c->off += 4;
    return GGUF_OK;
}

static enum gguf_err rd_u64(struct cur *c, uint64_t *v, const char *field)
{
    TRY(need(c, 8, field));
    *v = gguf_rd64(&c->enc, c->b + c->off);
    c->off += 8;
    return GGUF_OK;
}

/* A length or count: u32 in version 1, u64 later. */
static enum gguf_err rd_count(struct cur *c, uint64_t *v, const char *field)
{
    if (c->enc.v1) {
        uint32_t v32;
        TRY(rd_u32(c, &v32, field));
        *v = v32;
        return GGUF_OK;
    }
    return rd_u64(c, v, field);
}

static unsigned count_size(const struct cur *c) { return c->enc.v1 ? 4 : 8; }

/* Reads a string: returns where its bytes start and how many. */
static enum gguf_err rd_str(struct cur *c, uint64_t *str_off, uint64_t *len,
                            const char *field)
{
    uint64_t at = c->off;
    TRY(rd_count(c, len, field));
    if (*len > c->size - c->off)
        return fail(c, GGUF_E_RANGE, at,
                    "%s%s%s length %llu exceeds the %llu bytes left in the file",
                    c->what ? c->what : "", c->what ? ": " : "", field,
                    (unsigned long long)*len,
                    (unsigned long long)(c->size - c->off));
    TRY(need(c, *len, field));
    *str_off = c->off;
    c->off += *len;
    return GGUF_OK;
}

static unsigned scalar_size(unsigned t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* Skips count elements of vtype t (an array's body), checking everything. */
static enum gguf_err skip_elems(struct cur *c, unsigned t, uint64_t count,
                                unsigned depth);

static enum gguf_err skip_array(struct cur *c, unsigned depth,
                                uint32_t *elem_type, uint64_t *count)
{
    uint64_t at = c->off;
    TRY(rd_u32(c, elem_type, "array element type"));
    if (*elem_type >= GGUF_VTYPE_COUNT)
        return fail(c, GGUF_E_TYPE, at, "%s%sunknown array element type %u",
                    c->what ? c->what : "", c->what ? ": " : "", *elem_type);
    if (*elem_type == GGUF_ARRAY && depth + 1 >= GGUF_MAX_NEST)
        return fail(c, GGUF_E_RANGE, at,
                    "%s%sarrays nested deeper than %d levels",
                    c->what ? c->what : "", c->what ? ": " : "", GGUF_MAX_NEST);
    at = c->off;
    TRY(rd_count(c, count, "array count"));
    /* Every element takes at least min bytes: a count that cannot fit in the
     * rest of the file is refused before anything walks it. */
    uint64_t min = scalar_size(*elem_type);
    if (*elem_type == GGUF_STRING)
        min = count_size(c);
    else if (*elem_type == GGUF_ARRAY)
        min = 4 + count_size(c);
    if (*count > (c->size - c->off) / min)
        return fail(c, GGUF_E_RANGE, at,
                    "%s%sarray count %llu does not fit in the %llu bytes left",
                    c->what ? c->what : "", c->what ? ": " : "",
                    (unsigned long long)*count,
                    (unsigned long long)(c->size - c->off));
    return skip_elems(c, *elem_type, *count, depth + 1);
}

static enum gguf_err skip_elems(struct cur *c, unsigned t, uint64_t count,
                                unsigned depth)
{
    unsigned sz = scalar_size(t);
    if (sz) {
        TRY(need(c, count * sz, "array data"));  /* count*sz <= size: checked */
        c->off += count * sz;
        return GGUF_OK;
    }
    for (uint64_t i = 0; i < count; i++) {
        if (t == GGUF_STRING) {
            uint64_t so, len;
            TRY(rd_str(c, &so, &len, "string"));
        } else {
            uint32_t et;
            uint64_t n;
            TRY(skip_array(c, depth, &et, &n));
        }
    }
    return GGUF_OK;
}

/* ---- a small open-addressing hash of names, for duplicate detection ---- */

struct nameset {
    uint64_t *slot;      /* index+1 of the entry, 0 = empty */
    uint64_t mask;
    uint64_t count;
};

static uint64_t hash_bytes(const uint8_t *p, uint64_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Sized for the declared count (already checked against the bytes left, so
 * at most about the file's size), up to 2^21 slots; beyond that the table
 * doubles at half load as names are actually read. */
static bool nameset_init(struct nameset *s, uint64_t n)
{
    uint64_t cap = 16;
    while (cap < n * 2 && cap < (1u << 21))
        cap <<= 1;
    s->slot = calloc(cap, sizeof *s->slot);
    s->mask = cap - 1;
    s->count = 0;
    return s->slot != NULL;
}

/* Looks name up; if absent inserts idx and returns UINT64_MAX, else
 * returns the index already there.  names(i) gives entry i's bytes. */
static uint64_t nameset_add(struct nameset *s, const uint8_t *base,
                            const uint8_t *p, uint64_t n, uint64_t idx,
                            const uint64_t *offs, const uint32_t *lens,
                            size_t stride)
{
    if ((s->count + 1) * 2 > s->mask + 1) {
        /* keep the load at most one half: double and re-insert */
        uint64_t ncap = (s->mask + 1) * 2;
        uint64_t *ns = calloc(ncap, sizeof *ns);
        if (!ns)
            return UINT64_MAX - 1;
        for (uint64_t i = 0; i <= s->mask; i++) {
            uint64_t e = s->slot[i];
            if (!e)
                continue;
            uint64_t eo = *(const uint64_t *)((const char *)offs + (e - 1) * stride);
            uint32_t el = *(const uint32_t *)((const char *)lens + (e - 1) * stride);
            uint64_t h = hash_bytes(base + eo, el) & (ncap - 1);
            while (ns[h])
                h = (h + 1) & (ncap - 1);
            ns[h] = e;
        }
        free(s->slot);
        s->slot = ns;
        s->mask = ncap - 1;
    }
    uint64_t h = hash_bytes(p, n) & s->mask;
    for (;; h = (h + 1) & s->mask) {
        uint64_t e = s->slot[h];
        if (e == 0) {
            s->slot[h] = idx + 1;
            s->count++;
            return UINT64_MAX;
        }
        e--;
        uint64_t eo = *(const uint64_t *)((const char *)offs + e * stride);
        uint32_t el = *(const uint32_t *)((const char *)lens + e * stride);
        if (el == n && memcmp(base + eo, p, n) == 0)
            return e;
    }
}

/* ---- notes: objections ggml would raise --------------------------------- */

static void note(char **notes, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void note(char **notes, const char *fmt, ...)
{
    char line[400];
    size_t lines = 0;
    for (const char *q = *notes; q && *q; q++)
        lines += *q == '\n';
    if (lines >= 32) {
        if (lines == 32 && !strstr(*notes, "(more objections not listed)"))
            fmt = "(more objections not listed)";
        else
            return;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t old = *notes ? strlen(*notes) : 0;
    size_t add = strlen(line);
    char *p = realloc(*notes, old + add + 2);
    if (!p)
        return;     /* notes are advisory: losing one is not an error */
    memcpy(p + old, line, add);
    p[old + add] = '\n';
    p[old + add + 1] = '\0';
    *notes = p;
}

/* Grows an array geometrically so it holds at least n+1 entries. */
static bool grow(void **arr, uint64_t *cap, uint64_t n, size_t elem)
{
    if (n < *cap)
        return true;
    uint64_t nc = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = nc;
    return true;
}

/* Prints a name for a message: at most 60 bytes, non-printables as '?'. */
static const char *shown(const uint8_t *p, uint64_t n, char buf[72])
{
    uint64_t k = n > 60 ? 60 : n, i;
    for (i = 0; i < k; i++)
        buf[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? (char)p[i] : '?';
    if (n > k) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

/* ---- the parser ---------------------------------------------------------- */

/* Orders tensor indices by data offset, then by index (deterministic). */
static int cmp_by_offset(const void *a, const void *b, void *arg)
{
    const struct gguf_tensor *t = arg;
    uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
    uint64_t x = t[i].offset, y = t[j].offset;
    if (x != y)
        return x < y ? -1 : 1;
    return i < j ? -1 : i > j;
}

static enum gguf_err parse_kvs(struct cur *c, struct gguf_file *f,
                               uint64_t n_kv, char **notes)
{
    uint64_t cap = 0, occ_cap = 0;
    uint32_t *occ = NULL;    /* per first occurrence: how many so far */
    struct nameset seen;
    if (!nameset_init(&seen, n_kv < 1u << 20 ? n_kv : 1u << 20))
        return GGUF_E_NOMEM;
    enum gguf_err err = GGUF_OK;
    bool have_align = false;
    char nb[72];

    for (uint64_t i = 0; i < n_kv; i++) {
        struct gguf_kv kv = { .rec_off = c->off, .count = 1, .dup = 1 };
        uint64_t key_off, key_len;
        c->what = NULL;
        char field[48];
        snprintf(field, sizeof field, "key #%llu", (unsigned long long)i);
        if ((err = rd_str(c, &key_off, &key_len, field)))
            break;
        if (key_len > GGUF_MAX_NAME) {
            err = fail(c, GGUF_E_RANGE, kv.rec_off,
                       "key #%llu is %llu bytes long (the limit is %d)",
                       (unsigned long long)i, (unsigned long long)key_len,
                       GGUF_MAX_NAME);
            break;
        }
        kv.key_off = key_off;
        kv.key_len = (uint32_t)key_len;
        char what[96];
        snprintf(what, sizeof what, "key '%s'",
                 shown(c->b + key_off, key_len, nb));
        c->what = what;

        uint64_t at = c->off;
        uint32_t vt;
        if ((err = rd_u32(c, &vt, "value type")))
            break;
        if (vt >= GGUF_VTYPE_COUNT) {
            err = fail(c, GGUF_E_TYPE, at, "%s: unknown value type %u", what, vt);
            break;
        }
        kv.type = (uint8_t)vt;
        kv.val_off = c->off;
        if (vt == GGUF_ARRAY) {
            uint32_t et;
            if ((err = skip_array(c, 0, &et, &kv.count)))
                break;
            kv.elem_type = (uint8_t)et;
            kv.val_off += 4 + count_size(c);
        } else if (vt == GGUF_STRING) {
            uint64_t so, len;
            if ((err = rd_str(c, &so, &len, "string value")))
                break;
        } else {
            if ((err = need(c, scalar_size(vt), "value")))
                break;
            c->off += scalar_size(vt);
        }
        kv.val_size = c->off - kv.val_off;

        /* general.alignment decides where tensor data starts: it must be
         * unambiguous. */
        if (key_len == 17 && memcmp(c->b + key_off, "general.alignment", 17) == 0) {
            if (vt != GGUF_U32) {
                err = fail(c, GGUF_E_TYPE, kv.rec_off,
                           "general.alignment has type %s, expected u32",
                           gguf_vtype_name(vt));
                break;
            }
            uint32_t a = gguf_rd32(&c->enc, c->b + kv.val_off);
            if (a == 0 || (a & (a - 1))) {
                err = fail(c, GGUF_E_RANGE, kv.val_off,
                           "general.alignment %u is not a power of two", a);
                break;
            }
            if (have_align && a != f->alignment) {
                err = fail(c, GGUF_E_RANGE, kv.rec_off,
                           "general.alignment occurs twice with different "
                           "values (%llu and %u)",
                           (unsigned long long)f->alignment, a);
                break;
            }
            have_align = true;
            f->alignment = a;
        }

        if (!grow((void **)&f->kv, &cap, f->n_kv, sizeof *f->kv)) {
            err = GGUF_E_NOMEM;
            break;
        }
        uint64_t prev = nameset_add(&seen, c->b, c->b + key_off, key_len,
                                    f->n_kv, &f->kv[0].key_off,
                                    &f->kv[0].key_len, sizeof *f->kv);
        if (prev == UINT64_MAX - 1) {
            err = GGUF_E_NOMEM;
            break;
        }
        if (!grow((void **)&occ, &occ_cap, f->n_kv, sizeof *occ)) {
            err = GGUF_E_NOMEM;
            break;
        }
        occ[f->n_kv] = 1;
        if (prev != UINT64_MAX) {
            /* occ[first] counts the occurrences of that key so far. */
            if (occ[prev] == UINT16_MAX) {
                err = fail(c, GGUF_E_RANGE, kv.rec_off,
                           "%s occurs more than %u times", what, UINT16_MAX);
                break;
            }
            kv.dup = (uint16_t)++occ[prev];
            note(notes, "key '%s' occurs more than once (occurrence %u shown as "
                 "'%s#%u'): ggml refuses duplicate keys", nb, kv.dup, nb, kv.dup);
        }
        f->kv[f->n_kv++] = kv;
    }
    c->what = NULL;
    free(seen.slot);
    free(occ);
    return err;
}

static enum gguf_err parse_tensors(struct cur *c, struct gguf_file *f,
                                   uint64_t n_tensors, char **notes)
{
    uint64_t cap = 0;
    struct nameset seen;
    if (!nameset_init(&seen, n_tensors < 1u << 20 ? n_tensors : 1u << 20))
        return GGUF_E_NOMEM;
    enum gguf_err err = GGUF_OK;
    char nb[72], what[96];
    bool long_noted = false, row_noted = false;

    for (uint64_t i = 0; i < n_tensors; i++) {
        struct gguf_tensor t = { .info_off = c->off };
        uint64_t name_off, name_len;
        char field[48];
        snprintf(field, sizeof field, "tensor #%llu name", (unsigned long long)i);
        if ((err = rd_str(c, &name_off, &name_len, field)))
            break;
        if (name_len > GGUF_MAX_NAME) {
            err = fail(c, GGUF_E_RANGE, t.info_off,
                       "tensor #%llu name is %llu bytes long (the limit is %d)",
                       (unsigned long long)i, (unsigned long long)name_len,
                       GGUF_MAX_NAME);
            break;
        }
        t.name_off = name_off;
        t.name_len = (uint32_t)name_len;
        snprintf(what, sizeof what, "tensor '%s'",
                 shown(c->b + name_off, name_len, nb));
        c->what = what;
        if (name_len > GGML_MAX_NAME_LEN && !long_noted) {
            note(notes, "tensor '%s' has a name longer than %d bytes: ggml "
                 "refuses it", nb, GGML_MAX_NAME_LEN);
            long_noted = true;
        }

        uint64_t at = c->off;
        if ((err = rd_u32(c, &t.n_dims, "n_dims")))
            break;
        if (t.n_dims > GGUF_MAX_DIMS) {
            err = fail(c, GGUF_E_RANGE, at, "%s: %u dimensions (at most %d)",
                       what, t.n_dims, GGUF_MAX_DIMS);
            break;
        }
        uint64_t n = 1;
        bool overflow = false;
        for (unsigned d = 0; d < GGUF_MAX_DIMS; d++) {
            uint64_t ne = 1;
            at = c->off;
            if (d < t.n_dims) {
                if ((err = rd_count(c, &ne, "ne")))   /* u32 in v1 */
                    break;
                if (ne > INT64_MAX) {
                    err = fail(c, GGUF_E_RANGE, at, "%s: ne[%u] = %lld is negative",
                               what, d, (long long)ne);
                    break;
                }
            }
            t.ne[d] = ne;
            if (ne && n > INT64_MAX / ne)
                overflow = true;
            n *= ne;
        }
        if (err)
            break;
        if (overflow) {
            err = fail(c, GGUF_E_RANGE, t.info_off,
                       "%s: element count overflows (ne = %llu x %llu x %llu x %llu)",
                       what, (unsigned long long)t.ne[0], (unsigned long long)t.ne[1],
                       (unsigned long long)t.ne[2], (unsigned long long)t.ne[3]);
            break;
        }
        t.n_elems = n;

        at = c->off;
        if ((err = rd_u32(c, &t.type, "type")))
            break;
        const struct ggml_type_info *ti = ggml_type_get(t.type);
        if (!ti) {
            /* A type gguffs does not know (newer than gguffs, or removed
             * from ggml): its size comes from the layout (check_ranges). */
            t.nbytes = 0;
        } else if (n % ti->blck_elems) {
            err = fail(c, GGUF_E_RANGE, t.info_off,
                       "%s: %llu elements is not a whole number of %s blocks "
                       "of %u", what, (unsigned long long)n, ti->name,
                       ti->blck_elems);
            break;
        }
        if (ti && t.ne[0] % ti->blck_elems && !row_noted) {
            note(notes, "%s: row length %llu is not a multiple of the %s block "
                 "size %u: ggml refuses it", what, (unsigned long long)t.ne[0],
                 ti->name, ti->blck_elems);
            row_noted = true;
        }
        if (ti) {
            /* n/blck <= INT64_MAX and blck_bytes <= 292: check the product. */
            uint64_t nb_blocks = n / ti->blck_elems;
            if (nb_blocks > UINT64_MAX / ti->blck_bytes) {
                err = fail(c, GGUF_E_RANGE, t.info_off, "%s: byte size overflows",
                           what);
                break;
            }
            t.nbytes = nb_blocks * ti->blck_bytes;
        }
        if ((err = rd_u64(c, &t.offset, "offset")))
            break;

        if (!grow((void **)&f->tensors, &cap, f->n_tensors, sizeof *f->tensors)) {
            err = GGUF_E_NOMEM;
            break;
        }
        uint64_t prev = nameset_add(&seen, c->b, c->b + name_off, name_len,
                                    f->n_tensors, &f->tensors[0].name_off,
                                    &f->tensors[0].name_len, sizeof *f->tensors);
        if (prev == UINT64_MAX - 1) {
            err = GGUF_E_NOMEM;
            break;
        }
        if (prev != UINT64_MAX) {
            err = fail(c, GGUF_E_DUP, t.info_off,
                       "tensor name '%s' occurs twice (tensors #%llu and #%llu)",
                       nb, (unsigned long long)prev, (unsigned long long)i);
            break;
        }
        f->tensors[f->n_tensors++] = t;
    }
    c->what = NULL;
    free(seen.slot);
    return err;
}

/*
 * Sizes of tensors whose type gguffs does not know (ggml_type_get() NULL:
 * newer than gguffs, or removed from ggml).  ord lists the tensors by
 * offset.  Such a tensor with no elements has no bytes, as ggml would
 * compute for any type.  Otherwise its bytes run from its offset to the
 * next offset where another tensor starts, or to the end of the data (the
 * end of the file), whichever comes first: in a file ggml wrote, that is
 * its data plus the padding up to the next tensor (the padding is part of
 * the range; nothing else can be).  The usual checks then apply to the
 * range (inside the file, no overlap).  Refused: such a tensor that starts
 * at or past the end of the data (no bytes for its elements), and two of
 * them at the same offset (which one ends where cannot be told).
 */
static enum gguf_err size_unknown(struct cur *c, struct gguf_file *f,
                                  const uint64_t *ord, uint64_t data_room,
                                  char **notes)
{
    char nb[72], nb2[72];
    uint64_t n = f->n_tensors;
    for (uint64_t k = 0, g; k < n; k = g) {
        uint64_t o = f->tensors[ord[k]].offset;
        for (g = k; g < n && f->tensors[ord[g]].offset == o; g++)
            ;
        bool to_end = g == n || f->tensors[ord[g]].offset > data_room;
        uint64_t bound = to_end ? data_room : f->tensors[ord[g]].offset;
        struct gguf_tensor *u = NULL;
        for (uint64_t j = k; j < g; j++) {
            struct gguf_tensor *t = &f->tensors[ord[j]];
            if (ggml_type_get(t->type) || t->n_elems == 0)
                continue;
            if (u)
                return fail(c, GGUF_E_RANGE, t->info_off,
                            "tensors '%s' and '%s' (type ids %u and %u, unknown "
                            "to gguffs) both start at offset %llu: their sizes "
                            "are ambiguous",
                            shown(f->hdr + u->name_off, u->name_len, nb),
                            shown(f->hdr + t->name_off, t->name_len, nb2),
                            u->type, t->type, (unsigned long long)o);
            u = t;
            shown(f->hdr + t->name_off, t->name_len, nb);
            if (o >= data_room)
                return fail(c, GGUF_E_RANGE, t->info_off,
                            "tensor '%s': type id %u is unknown to gguffs and "
                            "its offset %llu leaves no bytes for its %llu "
                            "elements (%llu bytes of tensor data from offset "
                            "%llu)", nb, t->type, (unsigned long long)o,
                            (unsigned long long)t->n_elems,
                            (unsigned long long)data_room,
                            (unsigned long long)f->data_off);
            t->nbytes = bound - o;
            note(notes, "tensor '%s': type id %u %s (raw bytes only, size %llu "
                 "taken from %s)", nb, t->type,
                 t->type < GGML_T_COUNT ? "removed from ggml" : "unknown to gguffs",
                 (unsigned long long)t->nbytes,
                 to_end ? "the end of the file" : "the next tensor's offset");
        }
    }
    return GGUF_OK;
}

/* Checks tensor byte ranges: inside the file, not overlapping; notes what
 * ggml would object to (alignment, gaps/order). */
static enum gguf_err check_ranges(struct cur *c, struct gguf_file *f, char **notes)
{
    char nb[72];
    uint64_t data_room = f->data_off <= f->file_size ? f->file_size - f->data_off : 0;
    bool misaligned = false;
    uint64_t *ord = NULL;
    enum gguf_err e = GGUF_OK;
    if (f->n_tensors == 0)
        return GGUF_OK;

    ord = malloc(f->n_tensors * sizeof *ord);
    if (!ord)
        return GGUF_E_NOMEM;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        ord[i] = i;
    qsort_r(ord, f->n_tensors, sizeof *ord, cmp_by_offset, f->tensors);
    if ((e = size_unknown(c, f, ord, data_room, notes)))
        goto out;

    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->nbytes == 0)
            continue;
        if (t->offset > data_room || t->nbytes > data_room - t->offset) {
            e = fail(c, GGUF_E_RANGE, t->info_off,
                     "tensor '%s': data [%llu, +%llu) lies outside the file "
                     "(%llu bytes of tensor data from offset %llu)",
                     shown(f->hdr + t->name_off, t->name_len, nb),
                     (unsigned long long)t->offset,
                     (unsigned long long)t->nbytes,
                     (unsigned long long)data_room,
                     (unsigned long long)f->data_off);
            goto out;
        }
        if (t->offset % f->alignment && !misaligned) {
            note(notes, "tensor '%s': offset %llu is not a multiple of the "
                 "alignment %llu: ggml refuses it",
                 shown(f->hdr + t->name_off, t->name_len, nb),
                 (unsigned long long)t->offset, (unsigned long long)f->alignment);
            misaligned = true;
        }
    }

    uint64_t end = 0, last = UINT64_MAX;
    for (uint64_t k = 0; k < f->n_tensors; k++) {
        const struct gguf_tensor *t = &f->tensors[ord[k]];
        if (t->nbytes == 0)
            continue;
        if (last != UINT64_MAX && t->offset < end) {
            const struct gguf_tensor *p = &f->tensors[last];
            char nb2[72];
            e = fail(c, GGUF_E_RANGE, t->info_off,
                "tensor '%s' [%llu, +%llu) overlaps tensor '%s' [%llu, +%llu)",
                shown(f->hdr + t->name_off, t->name_len, nb),
                (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                shown(f->hdr + p->name_off, p->name_len, nb2),
                (unsigned long long)p->offset, (unsigned long long)p->nbytes);
            goto out;
        }
        end = t->offset + t->nbytes;
        last = ord[k];
    }

    /* ggml expects tensor i at the padded end of tensor i-1. */
    {
        uint64_t expect = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            const struct gguf_tensor *t = &f->tensors[i];
            if (t->offset != expect) {
                note(notes, "tensor '%s' is at offset %llu where ggml expects "
                     "%llu (tensors not stored contiguously in order): ggml "
                     "refuses it", shown(f->hdr + t->name_off, t->name_len, nb),
                     (unsigned long long)t->offset, (unsigned long long)expect);
                break;
            }
            expect = t->offset + t->nbytes;
            expect += (f->alignment - expect % f->alignment) % f->alignment;
        }
    }
out:
    free(ord);
    return e;
}

static enum gguf_err parse_all(struct cur *c, struct gguf_file **out);

enum gguf_err gguf_parse(const uint8_t *buf, uint64_t len, uint64_t file_size,
                         struct gguf_file **out, struct gguf_diag *diag,
                         bool *need_more)
{
    struct gguf_diag scratch;
    if (!diag)
        diag = &scratch;
    diag->msg[0] = '\0';
    diag->offset = UINT64_MAX;
    *out = NULL;
    if (need_more)
        *need_more = false;
    if (len > file_size)
        len = file_size;

    struct cur c = { .b = buf, .len = len, .size = file_size, .diag = diag,
                     .need_more = need_more };
    return parse_all(&c, out);
}

/* Parses the whole header through c; on success *out owns a copy of the
 * header bytes (or c->own itself, which is then taken). */
static enum gguf_err parse_all(struct cur *c_, struct gguf_file **out)
{
    struct cur c = *c_;
    struct gguf_diag *diag = c.diag;
    uint64_t file_size = c.size;
    diag->msg[0] = '\0';
    diag->offset = UINT64_MAX;
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f)
        return GGUF_E_NOMEM;
    f->file_size = file_size;
    f->alignment = 32;
    char *notes = NULL;
    enum gguf_err err;

    if ((err = need(&c, 4, "magic")))
        goto out;
    if (memcmp(c.b, "GGUF", 4) != 0) {
        char m[8];
        for (int i = 0; i < 4; i++)
            m[i] = (c.b[i] >= 0x20 && c.b[i] < 0x7f) ? (char)c.b[i] : '?';
        m[4] = '\0';
        err = fail(&c, GGUF_E_MAGIC, 0,
                   "not a GGUF file (magic \"%s\", expected \"GGUF\")", m);
        goto out;
    }
    c.off = 4;
    uint32_t v;
    if ((err = rd_u32(&c, &v, "version")))
        goto out;
    if (v < 1 || v > 3) {
        uint32_t sw = __builtin_bswap32(v);
        if (sw >= 1 && sw <= 3) {
            c.enc.big_endian = true;
            v = sw;
        } else {
            err = fail(&c, GGUF_E_VERSION, 4,
                       "unsupported GGUF version %u (supported: 1, 2, 3)", v);
            goto out;
        }
    }
    f->version = v;
    c.enc.v1 = v == 1;
    f->enc = c.enc;
    if (v == 1)
        note(&notes, "GGUF version 1 (32-bit counts): ggml no longer reads it");
    if (c.enc.big_endian)
        note(&notes, "big-endian file: ggml on a little-endian machine refuses it");

    uint64_t n_tensors, n_kv, at = c.off;
    if ((err = rd_count(&c, &n_tensors, "tensor count")))
        goto out;
    /* the smallest tensor info: empty name, no dims: len, n_dims, type, offset */
    if (n_tensors > INT64_MAX || n_tensors > (file_size - c.off) / (c.enc.v1 ? 20 : 24)) {
        err = fail(&c, GGUF_E_RANGE, at,
                   "tensor count %llu cannot fit in a file of %llu bytes",
                   (unsigned long long)n_tensors, (unsigned long long)file_size);
        goto out;
    }
    at = c.off;
    if ((err = rd_count(&c, &n_kv, "key/value count")))
        goto out;
    if (n_kv > INT64_MAX || n_kv > (file_size - c.off) / (c.enc.v1 ? 9 : 13)) {
        err = fail(&c, GGUF_E_RANGE, at,
                   "key/value count %llu cannot fit in a file of %llu bytes",
                   (unsigned long long)n_kv, (unsigned long long)file_size);
        goto out;
    }
    if ((err = parse_kvs(&c, f, n_kv, &notes)))
        goto out;
    if ((err = parse_tensors(&c, f, n_tensors, &notes)))
        goto out;

    f->hdr_size = c.off;
    f->data_off = c.off + (f->alignment - c.off % f->alignment) % f->alignment;
    if (c.own) {
        /* take the buffer we read into, trimmed to the header */
        uint8_t *h = realloc(c.own, f->hdr_size ? f->hdr_size : 1);
        f->hdr = h ? h : c.own;
        c.own = NULL;
    } else {
        f->hdr = malloc(f->hdr_size ? f->hdr_size : 1);
        if (!f->hdr) {
            err = GGUF_E_NOMEM;
            goto out;
        }
        memcpy(f->hdr, c.b, f->hdr_size);
    }
    if ((err = check_ranges(&c, f, &notes)))
        goto out;
    f->notes = notes;
    notes = NULL;
    *out = f;
    c_->own = NULL;
    return GGUF_OK;

out:
    free(notes);
    free(c.own);
    c_->own = NULL;
    if (err == GGUF_E_NOMEM && diag->msg[0] == '\0') {
        snprintf(diag->msg, sizeof diag->msg, "out of memory while indexing");
        diag->offset = c.off;
    }
    gguf_close(f);
    return err;
}

void gguf_close(struct gguf_file *f)
{
    if (!f)
        return;
    free(f->hdr);
    free(f->kv);
    free(f->tensors);
    free(f->notes);
    free(f);
}

enum gguf_err gguf_open_source(struct gguf_source *src, struct gguf_file **out,
                               struct gguf_diag *diag)
{
    struct gguf_diag scratch;
    if (!diag)
        diag = &scratch;
    /* The cursor reads the header on demand (1 MiB first, then doubling),
     * so tensor data is never read and nothing is parsed twice. */
    struct cur c = { .size = src->size, .src = src, .diag = diag };
    *out = NULL;
    return parse_all(&c, out);
}

enum gguf_err gguf_open_fd(int fd, struct gguf_file **out, struct gguf_diag *diag)
{
    struct gguf_source *src;
    *out = NULL;
    enum gguf_err e = gguf_source_fd(fd, NULL, &src, diag);
    if (e)
        return e;
    e = gguf_open_source(src, out, diag);
    gguf_source_close(src);
    return e;
}

enum gguf_err gguf_open(const char *path, struct gguf_file **out,
                        struct gguf_diag *diag)
{
    struct gguf_source *src;
    *out = NULL;
    enum gguf_err e = gguf_source_file(path, &src, diag);
    if (e)
        return e;
    e = gguf_open_source(src, out, diag);
    gguf_source_close(src);
    return e;
}

int64_t gguf_find_key(const struct gguf_file *f, const char *key, size_t len)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key_len == len && memcmp(f->hdr + f->kv[i].key_off, key, len) == 0)
            return (int64_t)i;
    return -1;
}

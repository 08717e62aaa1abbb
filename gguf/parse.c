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
 * actually read, so a hostile count costs nothing.  Duplicate names are
 * found with a name table (ntab.h) over the names read so far.  Where the
 * tensor bytes lie is checked by layout.c once every record is read.
 */
#include "ntab.h"
#include "parse_impl.h"
#include "source.h"
#include "types.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

/* ---- the cursor ----------------------------------------------------------- */

struct cur {
    const uint8_t *b;
    uint64_t len;        /* bytes available in b */
    struct gguf_source *src;  /* non-NULL: b is ours (own) and grows by reads */
    uint8_t *own;
    uint64_t cap;        /* bytes allocated at own */
    uint64_t size;       /* bytes in the whole file */
    uint64_t off;
    struct gguf_enc enc;
    struct gguf_diag *diag;
    bool *need_more;
    const char *what;    /* context for messages: "key 'x'" etc. */
};

/* Past the first MiB, how far a local read waits for the disk beyond the
 * bytes the parser asked for (see refill). */
#define LOCAL_AHEAD (256u << 10)

/* Bytes of a local file that are in the page cache, read without waiting
 * for the disk: up to len at off, stopping at the first page that is not
 * (0 then, or on any error: a kernel or file system without RWF_NOWAIT). */
static uint64_t read_cached(int fd, uint8_t *buf, uint64_t len, uint64_t off)
{
    uint64_t got = 0;
    while (got < len) {
        struct iovec iov = { buf + got, (size_t)(len - got) };
        ssize_t r = preadv2(fd, &iov, 1, (off_t)(off + got), RWF_NOWAIT);
        if (r <= 0)
            break;
        got += (uint64_t)r;
    }
    return got;
}

/* Reads more of the file into the cursor's own buffer so that at least upto
 * bytes are there.  The buffer grows geometrically so the total work stays
 * linear.  From a local file (a source with a descriptor) the whole buffer
 * is filled, but past the first MiB the reads wait for the disk only up to
 * LOCAL_AHEAD past upto, and take the rest only where the page cache holds
 * it: what follows a header is tensor data, and reading up to twice a
 * header's size from a cold disk would make every re-open after an edit
 * that grew the header wait for tensor bytes it never uses.  From a remote
 * source each byte is a byte transferred, so only up to 1 MiB past upto is
 * read: a header of H bytes costs at most H + 1 MiB past the source's
 * first 2 MiB, not 2H; and a short read past upto ends the read-ahead (a
 * remote source returns one where the range it streams ends, rather than
 * ask for more). */
static enum gguf_err refill(struct cur *c, uint64_t upto)
{
    uint64_t want = c->len * 2 > upto ? c->len * 2 : upto;
    if (want < (1u << 20))
        want = 1u << 20;
    if (want > c->size)
        want = c->size;
    if (want > c->cap) {
        uint8_t *nb = realloc(c->own, want ? want : 1);
        if (!nb)
            return gguf_diag_set(c->diag, GGUF_E_NOMEM, c->off,
                                 "out of memory reading the header");
        c->own = nb;
        c->b = nb;
        c->cap = want;
    }
    uint64_t fill = c->cap, cached = 0;
    if (c->src->fd < 0 && upto + (1u << 20) < fill)
        fill = upto + (1u << 20);
    if (c->src->fd >= 0 && fill > (1u << 20)) {
        uint64_t wait = upto + LOCAL_AHEAD > (1u << 20) ? upto + LOCAL_AHEAD : 1u << 20;
        if (wait < fill) {
            cached = fill;     /* the rest, after the reads below */
            fill = wait;
        }
    }
    while (c->len < fill) {
        if (c->src->ops->head)
            c->src->ops->head(c->src, c->own, (size_t)c->len);
        ssize_t r = c->src->ops->read(c->src, c->own + c->len, (size_t)(fill - c->len),
                                      c->len);
        if (r < 0)
            return gguf_diag_set(c->diag, GGUF_E_IO, c->len, "read error: %s", strerror((int)-r));
        if (r == 0)
            return gguf_diag_set(c->diag, GGUF_E_IO, c->len, "file shrank while being read");
        bool short_read = (uint64_t)r < fill - c->len;
        c->len += (uint64_t)r;
        /* a remote source stops short where a range it streams ends
         * (remote/source.h): the read-ahead is not worth another request */
        if (short_read && c->len >= upto)
            break;
    }
    if (cached > c->len)
        c->len += read_cached(c->src->fd, c->own + c->len, cached - c->len, c->len);
    return GGUF_OK;
}

/* need()'s slow path: more bytes from the source, or the error. */
__attribute__((noinline, cold))
static enum gguf_err need_more(struct cur *c, uint64_t n, const char *field)
{
    if (c->src && n <= c->size - c->off)
        return refill(c, c->off + n);
    if (n > c->size - c->off)
        return gguf_diag_set(c->diag, GGUF_E_TRUNCATED, c->off,
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

/* Makes sure n bytes can be read at the cursor (inline: the parser asks
 * before every field, and the bytes are nearly always there). */
static inline enum gguf_err need(struct cur *c, uint64_t n, const char *field)
{
    if (__builtin_expect(n <= c->len - c->off, 1))
        return GGUF_OK;
    return need_more(c, n, field);
}

#define TRY(x) do { enum gguf_err e_ = (x); if (e_ != GGUF_OK) return e_; } while (0)

static inline enum gguf_err rd_u32(struct cur *c, uint32_t *v, const char *field)
{
    TRY(need(c, 4, field));
    *v = gguf_rd32(&c->enc, c->b + c->off);
    c->off += 4;
    return GGUF_OK;
}

static inline enum gguf_err rd_u64(struct cur *c, uint64_t *v, const char *field)
{
    TRY(need(c, 8, field));
    *v = gguf_rd64(&c->enc, c->b + c->off);
    c->off += 8;
    return GGUF_OK;
}

/* A length or count: u32 in version 1, u64 later. */
static inline enum gguf_err rd_count(struct cur *c, uint64_t *v, const char *field)
{
    if (c->enc.v1) {
        uint32_t v32;
        TRY(rd_u32(c, &v32, field));
        *v = v32;
        return GGUF_OK;
    }
    return rd_u64(c, v, field);
}

/* Reads a string: returns where its bytes start and how many. */
static inline enum gguf_err rd_str(struct cur *c, uint64_t *str_off, uint64_t *len,
                                   const char *field)
{
    uint64_t at = c->off;
    TRY(rd_count(c, len, field));
    if (*len > c->size - c->off)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, at,
                    "%s%s%s length %llu exceeds the %llu bytes left in the file",
                    c->what ? c->what : "", c->what ? ": " : "", field,
                    (unsigned long long)*len,
                    (unsigned long long)(c->size - c->off));
    TRY(need(c, *len, field));
    *str_off = c->off;
    c->off += *len;
    return GGUF_OK;
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
        return gguf_diag_set(c->diag, GGUF_E_TYPE, at, "%s%sunknown array element type %u",
                    c->what ? c->what : "", c->what ? ": " : "", *elem_type);
    if (*elem_type == GGUF_ARRAY && depth + 1 >= GGUF_MAX_NEST)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, at,
                    "%s%sarrays nested deeper than %d levels",
                    c->what ? c->what : "", c->what ? ": " : "", GGUF_MAX_NEST);
    at = c->off;
    TRY(rd_count(c, count, "array count"));
    /* Every element takes at least min bytes: a count that cannot fit in the
     * rest of the file is refused before anything walks it. */
    uint64_t min = gguf_vtype_size(*elem_type);
    if (*elem_type == GGUF_STRING)
        min = gguf_count_size(&c->enc);
    else if (*elem_type == GGUF_ARRAY)
        min = 4 + gguf_count_size(&c->enc);
    if (*count > (c->size - c->off) / min)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, at,
                    "%s%sarray count %llu does not fit in the %llu bytes left",
                    c->what ? c->what : "", c->what ? ": " : "",
                    (unsigned long long)*count,
                    (unsigned long long)(c->size - c->off));
    return skip_elems(c, *elem_type, *count, depth + 1);
}

static enum gguf_err skip_elems(struct cur *c, unsigned t, uint64_t count,
                                unsigned depth)
{
    unsigned sz = gguf_vtype_size(t);
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

/* ---- notes: objections ggml would raise --------------------------------- */

void gguf_note(char **notes, const char *fmt, ...)
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

/* The names of the entries read so far, for the duplicate tables: looked
 * up in the cursor's bytes at the time of the call (they move when the
 * cursor refills). */
struct names {
    const struct cur *c;
    const struct gguf_file *f;
};

static const void *kv_name(const void *ctx, uint64_t i, size_t *len)
{
    const struct names *n = ctx;
    *len = n->f->kv[i].key_len;
    return n->c->b + n->f->kv[i].key_off;
}

static const void *tensor_name(const void *ctx, uint64_t i, size_t *len)
{
    const struct names *n = ctx;
    *len = n->f->tensors[i].name_len;
    return n->c->b + n->f->tensors[i].name_off;
}

/* ---- key/values ----------------------------------------------------------- */

/* A record's name (a key or a tensor name) as messages show it. */
struct shown {
    char name[GGUF_DIAG_NAME_MAX];     /* the name */
    char what[96];                     /* "key 'NAME'" or "tensor 'NAME'" */
};

/* The value of a key/value record, after its type field, into kv. */
static enum gguf_err read_value(struct cur *c, struct gguf_kv *kv)
{
    kv->val_off = c->off;
    if (kv->type == GGUF_ARRAY) {
        uint32_t et;
        TRY(skip_array(c, 0, &et, &kv->count));
        kv->elem_type = (uint8_t)et;
        kv->val_off += 4 + gguf_count_size(&c->enc);
    } else if (kv->type == GGUF_STRING) {
        uint64_t so, len;
        TRY(rd_str(c, &so, &len, "string value"));
    } else {
        TRY(need(c, gguf_vtype_size(kv->type), "value"));
        c->off += gguf_vtype_size(kv->type);
    }
    kv->val_size = c->off - kv->val_off;
    return GGUF_OK;
}

/* The name that starts record #i (at rec_off; a key, or with tensor the
 * name of a tensor info): its place in the header, at most GGUF_MAX_NAME
 * bytes; from here on messages say which record they are about. */
static enum gguf_err read_name(struct cur *c, bool tensor, uint64_t i, uint64_t rec_off,
                               uint64_t *off, uint32_t *len, struct shown *sh)
{
    const char *kind = tensor ? "tensor" : "key", *sfx = tensor ? " name" : "";
    char field[48];
    uint64_t n;
    c->what = NULL;
    snprintf(field, sizeof field, "%s #%llu%s", kind, (unsigned long long)i, sfx);
    TRY(rd_str(c, off, &n, field));
    if (n > GGUF_MAX_NAME)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, rec_off, "%s is %llu bytes long "
                             "(the limit is %d)", field, (unsigned long long)n,
                             GGUF_MAX_NAME);
    *len = (uint32_t)n;
    snprintf(sh->what, sizeof sh->what, "%s '%s'", kind,
             gguf_diag_name(c->b + *off, n, sh->name));
    c->what = sh->what;
    return GGUF_OK;
}

/* Key/value record #i at the cursor into kv. */
static enum gguf_err read_kv(struct cur *c, uint64_t i, struct gguf_kv *kv,
                             struct shown *sh)
{
    *kv = (struct gguf_kv){ .rec_off = c->off, .count = 1, .dup = 1 };
    TRY(read_name(c, false, i, kv->rec_off, &kv->key_off, &kv->key_len, sh));

    uint64_t at = c->off;
    uint32_t vt;
    TRY(rd_u32(c, &vt, "value type"));
    if (vt >= GGUF_VTYPE_COUNT)
        return gguf_diag_set(c->diag, GGUF_E_TYPE, at, "%s: unknown value type %u",
                             sh->what, vt);
    kv->type = (uint8_t)vt;
    return read_value(c, kv);
}

/* general.alignment decides where tensor data starts: it must be a u32
 * power of two, and the same wherever it occurs. */
static enum gguf_err take_alignment(struct cur *c, struct gguf_file *f,
                                    const struct gguf_kv *kv, bool *have)
{
    if (kv->type != GGUF_U32)
        return gguf_diag_set(c->diag, GGUF_E_TYPE, kv->rec_off,
                             "general.alignment has type %s, expected u32",
                             gguf_vtype_name(kv->type));
    uint32_t a = gguf_rd32(&c->enc, c->b + kv->val_off);
    if (a == 0 || (a & (a - 1)))
        return gguf_diag_set(c->diag, GGUF_E_RANGE, kv->val_off,
                             "general.alignment %u is not a power of two", a);
    if (*have && a != f->alignment)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, kv->rec_off,
                             "general.alignment occurs twice with different "
                             "values (%llu and %u)",
                             (unsigned long long)f->alignment, a);
    *have = true;
    f->alignment = a;
    return GGUF_OK;
}

static enum gguf_err parse_kvs(struct cur *c, struct gguf_file *f,
                               uint64_t n_kv, char **notes)
{
    uint64_t cap = 0, occ_cap = 0;
    uint32_t *occ = NULL;    /* per first occurrence: how many so far */
    struct names nm = { c, f };
    struct gguf_ntab seen;
    enum gguf_err err = gguf_ntab_init(&seen, n_kv, kv_name, &nm);
    bool have_align = false;
    struct shown sh;

    for (uint64_t i = 0; !err && i < n_kv; i++) {
        struct gguf_kv kv;
        if ((err = read_kv(c, i, &kv, &sh)))
            break;
        if (gguf_key_is_alignment(c->b + kv.key_off, kv.key_len) &&
            (err = take_alignment(c, f, &kv, &have_align)))
            break;
        if (!grow((void **)&f->kv, &cap, f->n_kv, sizeof *f->kv) ||
            !grow((void **)&occ, &occ_cap, f->n_kv, sizeof *occ)) {
            err = GGUF_E_NOMEM;
            break;
        }
        f->kv[f->n_kv] = kv;
        occ[f->n_kv] = 1;
        uint64_t first;
        err = gguf_ntab_add(&seen, f->n_kv, &first);
        if (err == GGUF_E_EXIST) {
            /* occ[first] counts the occurrences of that key so far. */
            if (occ[first] == UINT16_MAX) {
                err = gguf_diag_set(c->diag, GGUF_E_RANGE, kv.rec_off,
                                    "%s occurs more than %u times", sh.what,
                                    UINT16_MAX);
                break;
            }
            err = GGUF_OK;
            f->kv[f->n_kv].dup = (uint16_t)++occ[first];
            gguf_note(notes, "key '%s' occurs more than once (occurrence %u shown "
                      "as '%s#%u'): ggml refuses duplicate keys", sh.name,
                      occ[first], sh.name, occ[first]);
        }
        if (!err)
            f->n_kv++;
    }
    c->what = NULL;
    gguf_ntab_free(&seen);
    free(occ);
    return err;
}

/* ---- tensor infos ---------------------------------------------------------- */

/* Reads ne[] (n_dims of them, the rest 1) and their product. */
static enum gguf_err read_dims(struct cur *c, struct gguf_tensor *t, const char *what)
{
    uint64_t n = 1;
    bool overflow = false;
    for (unsigned d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1, at = c->off;
        if (d < t->n_dims) {
            TRY(rd_count(c, &ne, "ne"));   /* u32 in v1 */
            if (ne > INT64_MAX)
                return gguf_diag_set(c->diag, GGUF_E_RANGE, at,
                                     "%s: ne[%u] = %lld is negative", what, d,
                                     (long long)ne);
        }
        t->ne[d] = ne;
        if (ne && n > INT64_MAX / ne)
            overflow = true;
        n *= ne;
    }
    if (overflow)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, t->info_off,
                             "%s: element count overflows (ne = %llu x %llu x "
                             "%llu x %llu)", what, (unsigned long long)t->ne[0],
                             (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                             (unsigned long long)t->ne[3]);
    t->n_elems = n;
    return GGUF_OK;
}

/* Tensors whose row is not a multiple of the block named one by one in the
 * notes; past them, one more note gives how many there are in all. */
#define ROW_NAMED 8

/* nbytes from the type (0 for a type gguffs does not know: the layout
 * gives it, gguf_layout_check); a row not a multiple of the block is
 * counted in *row_bad, and noted for the first ROW_NAMED tensors. */
static enum gguf_err size_by_type(struct cur *c, struct gguf_tensor *t,
                                  const char *what, uint64_t *row_bad, char **notes)
{
    const struct ggml_type_info *ti = ggml_type_get(t->type);
    t->nbytes = 0;
    if (!ti)
        return GGUF_OK;   /* newer than gguffs, or removed from ggml */
    if (t->n_elems % ti->blck_elems)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, t->info_off,
                             "%s: %llu elements is not a whole number of %s "
                             "blocks of %u", what, (unsigned long long)t->n_elems,
                             ti->name, ti->blck_elems);
    if (t->ne[0] % ti->blck_elems && (*row_bad)++ < ROW_NAMED)
        gguf_note(notes, "%s: row length %llu is not a multiple of the %s block "
                  "size %u: ggml refuses it", what, (unsigned long long)t->ne[0],
                  ti->name, ti->blck_elems);
    /* n/blck <= INT64_MAX and blck_bytes <= 292: check the product. */
    uint64_t blocks = t->n_elems / ti->blck_elems;
    if (blocks > UINT64_MAX / ti->blck_bytes)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, t->info_off,
                             "%s: byte size overflows", what);
    t->nbytes = blocks * ti->blck_bytes;
    return GGUF_OK;
}

/* Tensor info #i at the cursor into t. */
static enum gguf_err read_tensor(struct cur *c, uint64_t i, struct gguf_tensor *t,
                                 struct shown *sh, uint64_t *row_bad, char **notes)
{
    *t = (struct gguf_tensor){ .info_off = c->off };
    TRY(read_name(c, true, i, t->info_off, &t->name_off, &t->name_len, sh));

    uint64_t at = c->off;
    TRY(rd_u32(c, &t->n_dims, "n_dims"));
    if (t->n_dims > GGUF_MAX_DIMS)
        return gguf_diag_set(c->diag, GGUF_E_RANGE, at, "%s: %u dimensions (at most %d)",
                             sh->what, t->n_dims, GGUF_MAX_DIMS);
    TRY(read_dims(c, t, sh->what));
    TRY(rd_u32(c, &t->type, "type"));
    TRY(size_by_type(c, t, sh->what, row_bad, notes));
    return rd_u64(c, &t->offset, "offset");
}

static enum gguf_err parse_tensors(struct cur *c, struct gguf_file *f,
                                   uint64_t n_tensors, char **notes)
{
    uint64_t cap = 0;
    struct names nm = { c, f };
    struct gguf_ntab seen;
    enum gguf_err err = gguf_ntab_init(&seen, n_tensors, tensor_name, &nm);
    bool long_noted = false;
    uint64_t row_bad = 0;
    struct shown sh;

    for (uint64_t i = 0; !err && i < n_tensors; i++) {
        struct gguf_tensor t;
        if ((err = read_tensor(c, i, &t, &sh, &row_bad, notes)))
            break;
        if (t.name_len > GGML_MAX_NAME_LEN && !long_noted) {
            gguf_note(notes, "tensor '%s' has a name longer than %d bytes: ggml "
                      "refuses it", sh.name, GGML_MAX_NAME_LEN);
            long_noted = true;
        }
        if (!grow((void **)&f->tensors, &cap, f->n_tensors, sizeof *f->tensors)) {
            err = GGUF_E_NOMEM;
            break;
        }
        f->tensors[f->n_tensors] = t;
        uint64_t prev;
        err = gguf_ntab_add(&seen, f->n_tensors, &prev);
        if (err == GGUF_E_EXIST)
            err = gguf_diag_set(c->diag, GGUF_E_DUP, t.info_off,
                                "tensor name '%s' occurs twice (tensors #%llu and "
                                "#%llu)", sh.name, (unsigned long long)prev,
                                (unsigned long long)i);
        if (!err)
            f->n_tensors++;
    }
    if (!err && row_bad > ROW_NAMED)
        gguf_note(notes, "%llu tensors in all have a row length that is not a multiple of "
                  "their type's block size (the first %d named above): ggml refuses them",
                  (unsigned long long)row_bad, ROW_NAMED);
    c->what = NULL;
    gguf_ntab_free(&seen);
    return err;
}

/* ---- the header ------------------------------------------------------------ */

/* Magic, version (and from it the byte order) and the two counts, each
 * checked against what the file can hold. */
static enum gguf_err read_preamble(struct cur *c, struct gguf_file *f,
                                   uint64_t *n_tensors, uint64_t *n_kv, char **notes)
{
    TRY(need(c, 4, "magic"));
    if (memcmp(c->b, "GGUF", 4) != 0) {
        char m[8];
        for (int i = 0; i < 4; i++)
            m[i] = (c->b[i] >= 0x20 && c->b[i] < 0x7f) ? (char)c->b[i] : '?';
        m[4] = '\0';
        return gguf_diag_set(c->diag, GGUF_E_MAGIC, 0,
                             "not a GGUF file (magic \"%s\", expected \"GGUF\")", m);
    }
    c->off = 4;
    uint32_t v;
    TRY(rd_u32(c, &v, "version"));
    if (v < 1 || v > 3) {
        /* a big-endian file: the version reads right the other way round */
        static const struct gguf_enc be = { .big_endian = true };
        uint32_t sw = gguf_rd32(&be, c->b + 4);
        if (sw < 1 || sw > 3)
            return gguf_diag_set(c->diag, GGUF_E_VERSION, 4,
                                 "unsupported GGUF version %u (supported: 1, 2, 3)", v);
        c->enc.big_endian = true;
        v = sw;
    }
    f->version = v;
    c->enc.v1 = v == 1;
    f->enc = c->enc;
    if (v == 1)
        gguf_note(notes, "GGUF version 1 (32-bit counts): ggml no longer reads it (a mount's model.gguf is version 3)");
    if (c->enc.big_endian)
        gguf_note(notes, "big-endian file: ggml on a little-endian machine refuses it");

    uint64_t at = c->off;
    TRY(rd_count(c, n_tensors, "tensor count"));
    /* the smallest tensor info: empty name, no dims: len, n_dims, type, offset */
    if (*n_tensors > INT64_MAX || *n_tensors > (c->size - c->off) / (c->enc.v1 ? 20 : 24))
        return gguf_diag_set(c->diag, GGUF_E_RANGE, at,
                             "tensor count %llu cannot fit in a file of %llu bytes",
                             (unsigned long long)*n_tensors, (unsigned long long)c->size);
    at = c->off;
    TRY(rd_count(c, n_kv, "key/value count"));
    if (*n_kv > INT64_MAX || *n_kv > (c->size - c->off) / (c->enc.v1 ? 9 : 13))
        return gguf_diag_set(c->diag, GGUF_E_RANGE, at,
                             "key/value count %llu cannot fit in a file of %llu bytes",
                             (unsigned long long)*n_kv, (unsigned long long)c->size);
    return GGUF_OK;
}

/* Parses the whole header through c; on success *out owns a copy of the
 * header bytes (or the cursor's own buffer, trimmed). */
static enum gguf_err parse_all(struct cur *c, struct gguf_file **out)
{
    c->diag->msg[0] = '\0';
    c->diag->offset = UINT64_MAX;
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f)
        return GGUF_E_NOMEM;
    f->file_size = c->size;
    f->alignment = 32;
    char *notes = NULL;
    uint64_t n_tensors = 0, n_kv = 0;
    enum gguf_err err = read_preamble(c, f, &n_tensors, &n_kv, &notes);
    if (!err)
        err = parse_kvs(c, f, n_kv, &notes);
    if (!err)
        err = parse_tensors(c, f, n_tensors, &notes);
    if (err)
        goto out;

    f->hdr_size = c->off;
    f->data_off = c->off + (f->alignment - c->off % f->alignment) % f->alignment;
    /* the padding the cursor has already read stays with the header, so
     * that whoever looks at it next (a mount keeps non-zero padding) does
     * not read it again: from a remote source, that read would be one
     * more request */
    uint64_t have = c->len < f->data_off ? c->len : f->data_off;
    f->pad_have = have > f->hdr_size ? have - f->hdr_size : 0;
    if (f->pad_have > GGUF_PAD_HAVE_MAX)
        f->pad_have = GGUF_PAD_HAVE_MAX;
    uint64_t keep = f->hdr_size + f->pad_have;
    if (c->own) {
        uint8_t *h = realloc(c->own, keep ? keep : 1);
        f->hdr = h ? h : c->own;
        c->own = NULL;
    } else if ((f->hdr = malloc(keep ? keep : 1))) {
        memcpy(f->hdr, c->b, keep);
    } else {
        err = GGUF_E_NOMEM;
        goto out;
    }
    if ((err = gguf_layout_check(f, c->diag, &notes)))
        goto out;
    f->notes = notes;
    *out = f;
    return GGUF_OK;

out:
    free(notes);
    free(c->own);
    c->own = NULL;
    if (err == GGUF_E_NOMEM && c->diag->msg[0] == '\0') {
        snprintf(c->diag->msg, sizeof c->diag->msg, "out of memory while indexing");
        c->diag->offset = c->off;
    }
    gguf_close(f);
    return err;
}

enum gguf_err gguf_parse(const uint8_t *buf, uint64_t len, uint64_t file_size,
                         struct gguf_file **out, struct gguf_diag *diag,
                         bool *need_more)
{
    struct gguf_diag scratch;
    *out = NULL;
    if (need_more)
        *need_more = false;
    if (len > file_size)
        len = file_size;
    struct cur c = { .b = buf, .len = len, .size = file_size,
                     .diag = diag ? diag : &scratch, .need_more = need_more };
    return parse_all(&c, out);
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

/*
 * gguf/pad.c — sizing the padding key (see pad.h).
 *
 * The edit's header is parsed back (its tensor infos are f's), and the
 * padding key is given its new size by splicing hdr's bytes: its count and
 * zeros replaced, or a record appended after the last key/value.  The
 * record of a u8 array of n bytes is key length + key + type + element
 * type + count + n bytes, so the header's unpadded size is base + n:
 * n = T - base makes it exactly T, a multiple of the alignment (R and step
 * are), with no zeros after it.
 */
#include "pad.h"

#include <stdlib.h>
#include <string.h>

bool gguf_key_is_padding(const void *key, size_t len)
{
    return len == sizeof GGUF_KEY_PADDING - 1 && memcmp(key, GGUF_KEY_PADDING, len) == 0;
}

uint64_t gguf_pad_step(uint64_t block, uint64_t alignment)
{
    if (!block || !alignment || block > GGUF_PAD_MAX_STEP || alignment > GGUF_PAD_MAX_STEP)
        return 0;
    uint64_t a = block, b = alignment;
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    uint64_t lcm = block / a * alignment;     /* <= 2^52: no overflow */
    return lcm <= GGUF_PAD_MAX_STEP ? lcm : 0;
}

/* Is key/value i of f gguffs's padding: an array of u8, all zero? */
static bool is_pad(const struct gguf_file *f, uint64_t i)
{
    const struct gguf_kv *kv = &f->kv[i];
    if (!gguf_key_is_padding(f->hdr + kv->key_off, kv->key_len) ||
        kv->type != GGUF_ARRAY || kv->elem_type != GGUF_U8)
        return false;
    const uint8_t *p = f->hdr + kv->val_off;
    for (uint64_t k = 0; k < kv->count; k++)
        if (p[k])
            return false;
    return true;
}

/* How many keys of f are named gguffs.padding; *at the last one. */
static unsigned count_named(const struct gguf_file *f, uint64_t *at)
{
    unsigned n = 0;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_key_is_padding(f->hdr + f->kv[i].key_off, f->kv[i].key_len)) {
            n++;
            *at = i;
        }
    return n;
}

static enum gguf_err copy_out(const uint8_t *hdr, size_t hdr_len, struct gguf_buf *out,
                              struct gguf_diag *d)
{
    struct gguf_buf b = { 0 };
    if (!gguf_buf_put(&b, hdr, hdr_len))
        return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    gguf_buf_free(out);
    *out = b;
    return GGUF_OK;
}

uint64_t gguf_pad_copy_slack(uint64_t hdr)
{
    uint64_t eighth = hdr / GGUF_PAD_COPY_DIV;
    return eighth > GGUF_PAD_COPY_SLACK ? eighth : GGUF_PAD_COPY_SLACK;
}

/* The size T the header is given (0: leave it as it is); room and step
 * are multiples of align. */
static uint64_t target(uint64_t room, uint64_t base, uint64_t step, uint64_t align)
{
    if (base > UINT64_MAX / 4)
        return 0;
    if (base <= room) {
        /* it fits: in place, unless, where the file system clones, more
         * than a step and the slack would be left: then the data moves
         * down by whole steps, to the smallest size that keeps the slack */
        if (step == 0 || room - base < step + GGUF_PAD_SLACK)
            return room;
        return room - (room - base - GGUF_PAD_SLACK) / step * step;
    }
    /* outgrown: the data moves up by whole steps where it is cloned, by
     * whole multiples of the alignment where it is copied (a copy has no
     * use for block boundaries), to the smallest size that keeps the slack
     * of its path to spare */
    uint64_t s = step ? step : align;
    if (!s || s > GGUF_PAD_MAX_STEP)
        return 0;
    uint64_t want = base + (step ? GGUF_PAD_SLACK : gguf_pad_copy_slack(base));
    return room + (want - room + s - 1) / s * s;
}

enum gguf_err gguf_pad_fit(const struct gguf_file *f, const uint8_t *hdr, size_t hdr_len,
                           uint64_t step, struct gguf_buf *out, struct gguf_diag *d)
{
    struct gguf_diag scratch;
    if (!d)
        d = &scratch;
    gguf_diag_set(d, GGUF_OK, UINT64_MAX, "%s", "");
    uint64_t room = f->data_off;
    if (!gguf_has_tensor_data(f) || hdr_len == room)
        return copy_out(hdr, hdr_len, out, d);

    uint64_t data_len = f->file_size - f->data_off;
    struct gguf_file *nf = NULL;
    struct gguf_diag pd;
    enum gguf_err err = gguf_parse(hdr, hdr_len, hdr_len + data_len, &nf, &pd, NULL);
    if (err)
        return gguf_diag_set(d, err == GGUF_E_NOMEM ? err : GGUF_E_INVAL, UINT64_MAX,
                             "the new header does not parse: %s", pd.msg);
    uint64_t at = 0, f_at;
    unsigned named = count_named(nf, &at);
    bool have = named == 1 && is_pad(nf, at);
    if (!have && (named || count_named(f, &f_at))) {
        gguf_close(nf);
        return copy_out(hdr, hdr_len, out, d);
    }

    /* base: the unpadded size with a padding key of 0 bytes */
    unsigned cs = gguf_count_size(&f->enc);
    uint64_t rec = cs + (sizeof GGUF_KEY_PADDING - 1) + 4 + 4 + cs;
    uint64_t base = have ? nf->hdr_size - nf->kv[at].count : nf->hdr_size + rec;
    uint64_t t = target(room, base, step, f->alignment);
    uint64_t n = t - base;
    if (!t || (f->enc.v1 && (n > UINT32_MAX || nf->n_kv >= UINT32_MAX)) || n > SIZE_MAX - 16) {
        gguf_close(nf);
        return copy_out(hdr, hdr_len, out, d);
    }

    /* P(n): hdr's bytes with the padding key's value resized to n zeros
     * (its count patched), or with the key appended after the last
     * key/value (the key/value count patched).  hdr parsed as nf, so the
     * splice keeps every other record as it is, and needs no second
     * serialization and parse of a header that may be megabytes. */
    size_t cut, resume;     /* out: hdr[0, cut), the new bytes, hdr[resume, hdr_size) */
    if (have) {
        cut = (size_t)(nf->kv[at].val_off - cs);          /* its count field */
        resume = (size_t)(nf->kv[at].val_off + nf->kv[at].count);
    } else {
        cut = resume = (size_t)(nf->n_tensors ? nf->tensors[0].info_off : nf->hdr_size);
    }
    struct gguf_buf b = { 0 };
    uint8_t field[8];
    bool ok = gguf_buf_reserve(&b, (size_t)t) && gguf_buf_put(&b, hdr, cut);
    if (ok && !have) {
        /* key length, key, type array, element type u8 */
        gguf_wr_count(&f->enc, field, sizeof GGUF_KEY_PADDING - 1);
        ok = gguf_buf_put(&b, field, cs) &&
             gguf_buf_put(&b, GGUF_KEY_PADDING, sizeof GGUF_KEY_PADDING - 1);
        gguf_wr32(&f->enc, field, GGUF_ARRAY);
        gguf_wr32(&f->enc, field + 4, GGUF_U8);
        ok = ok && gguf_buf_put(&b, field, 8);
    }
    gguf_wr_count(&f->enc, field, n);
    ok = ok && gguf_buf_put(&b, field, cs) && gguf_buf_zeros(&b, (size_t)n) &&
         gguf_buf_put(&b, hdr + resume, (size_t)(nf->hdr_size - resume));
    if (ok && !have)   /* the key/value count, after magic, version and tensor count */
        gguf_wr_count(&f->enc, b.data + 8 + cs, nf->n_kv + 1);
    if (!ok)
        err = gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    else if (b.len != t)
        err = gguf_diag_set(d, GGUF_E_INVAL, UINT64_MAX, "internal error: the padded "
                            "header is %zu bytes, not %llu", b.len, (unsigned long long)t);
    gguf_close(nf);
    if (err) {
        gguf_buf_free(&b);
        return err;
    }
    gguf_buf_free(out);
    *out = b;
    return GGUF_OK;
}

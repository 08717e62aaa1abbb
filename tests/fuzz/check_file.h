/*
 * tests/fuzz/check_file.h — what must hold for any input to gguf_parse.
 * Shared by the parse fuzzer (tests/fuzz/parse.c) and the corruption sweeps
 * (tests/unit/test_corrupt.c), so both assert exactly the same things.
 *
 * check_gguf_bytes(buf, len) parses buf as a whole file of len bytes and:
 *
 *   - on failure: the error is a known code, the message is non-empty and
 *     NUL-terminated, the offset is <= len (UINT64_MAX only for
 *     out-of-memory), and *out is NULL;
 *   - on success, the index is consistent with the bytes:
 *       file_size == len, hdr_size <= len, data_off >= hdr_size is the
 *       first multiple of the (power-of-two) alignment, the counts equal
 *       the ones in the header, every key and value and tensor name lies
 *       inside the header in record order, every tensor's n_elems follows
 *       from ne[] and, for a type in gguf/types.h, nbytes from n_elems and
 *       the type; for a type id without an entry (unknown or removed),
 *       nbytes is 0 without elements, else runs exactly from the offset to
 *       the next offset where another tensor starts or to the end of the
 *       file, whichever is first, and no other such tensor with elements
 *       starts at the same offset; every tensor's data range lies inside
 *       the file and no two overlap, dup numbers count the earlier
 *       occurrences of a key;
 *     and everything a mount shows renders: every kv (gguf_render_kv), its
 *     type (gguf_kv_typedesc / gguf_typedesc_format), every key and
 *     tensor file name (encode, then decode gives the name back), info,
 *     info.json, and model.safetensors' layout (gguf/safetensors.h: GGUF_OK,
 *     or GGUF_E_RANGE for sizes past 2^63; a header of valid UTF-8 without
 *     control characters, its length prefix right, padded to 8; spans in
 *     order, contiguous, aligned, every tensor in one or left out), and
 *     hf/ (gguf/hf.h: built or refused in one line, its ranges inside
 *     their sources).
 *     Each kv's text parsed back with its type gives the same bytes (the
 *     contract's "reading a value and writing it back changes nothing"),
 *     except where the text cannot be written back at all (a string that
 *     is not UTF-8), and for nested arrays, whose text must be a fixpoint
 *     (see nested_ok below for why not bytes).
 *
 * Violations abort() with a message (CHECK from fuzz_common.h).  Returns
 * the parse result so callers can count acceptances and refusals.
 */
#ifndef GGUFFS_CHECK_FILE_H
#define GGUFFS_CHECK_FILE_H

#include "fuzz_common.h"

#include "gguf/gguf.h"
#include "gguf/info.h"
#include "gguf/names.h"
#include "gguf/safetensors.h"
#include "gguf/hf.h"
#include "gguf/types.h"
#include "gguf/value.h"

static int cf_cmp_u64pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static int cf_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The size of a tensor whose type has no entry in gguf/types.h, computed
 * independently of the parser: offs holds every tensor's offset, sorted. */
static inline void cf_check_unknown_size(const struct gguf_file *f, uint64_t i,
                                         const uint64_t *offs, uint64_t len)
{
    const struct gguf_tensor *t = &f->tensors[i];
    if (t->n_elems == 0) {
        CHECK(t->nbytes == 0, "tensor %llu: type %u, no elements, %llu bytes",
              (unsigned long long)i, t->type, (unsigned long long)t->nbytes);
        return;
    }
    uint64_t room = len > f->data_off ? len - f->data_off : 0;
    CHECK(t->offset < room, "tensor %llu: type %u at %llu past the data (%llu)",
          (unsigned long long)i, t->type, (unsigned long long)t->offset,
          (unsigned long long)room);
    /* first offset > t->offset */
    uint64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (offs[mid] <= t->offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t bound = lo < f->n_tensors && offs[lo] < room ? offs[lo] : room;
    CHECK(t->nbytes == bound - t->offset,
          "tensor %llu: type %u at %llu has %llu bytes, the next boundary is %llu",
          (unsigned long long)i, t->type, (unsigned long long)t->offset,
          (unsigned long long)t->nbytes, (unsigned long long)bound);
    for (uint64_t j = 0; j < f->n_tensors && f->n_tensors <= 1024; j++)
        CHECK(j == i || f->tensors[j].offset != t->offset ||
              ggml_type_get(f->tensors[j].type) || f->tensors[j].n_elems == 0,
              "tensors %llu and %llu: unknown types at the same offset accepted",
              (unsigned long long)i, (unsigned long long)j);
}

/* The encoded value of kv ("bin" in value.h): from after the type field. */
static inline void cf_kv_bin(const struct gguf_file *f, const struct gguf_kv *kv,
                             const uint8_t **p, uint64_t *n)
{
    uint64_t cs = f->enc.v1 ? 4 : 8;
    uint64_t start = kv->rec_off + cs + kv->key_len + 4;
    *p = f->hdr + start;
    *n = kv->val_off + kv->val_size - start;
}

static inline void cf_check_index(const uint8_t *buf, uint64_t len,
                                  const struct gguf_file *f)
{
    CHECK(f->file_size == len, "file_size %llu, len %llu",
          (unsigned long long)f->file_size, (unsigned long long)len);
    CHECK(f->hdr_size <= len && f->hdr_size >= 16, "hdr_size %llu of %llu",
          (unsigned long long)f->hdr_size, (unsigned long long)len);
    CHECK(memcmp(f->hdr, buf, f->hdr_size) == 0, "hdr is not a copy");
    CHECK(f->alignment && !(f->alignment & (f->alignment - 1)),
          "alignment %llu", (unsigned long long)f->alignment);
    CHECK(f->data_off >= f->hdr_size && f->data_off % f->alignment == 0 &&
          f->data_off - f->hdr_size < f->alignment,
          "data_off %llu hdr_size %llu alignment %llu",
          (unsigned long long)f->data_off, (unsigned long long)f->hdr_size,
          (unsigned long long)f->alignment);
    CHECK(f->version >= 1 && f->version <= 3 && f->enc.v1 == (f->version == 1),
          "version %u", f->version);
    /* counts as declared in the header */
    uint64_t nt, nk;
    if (f->enc.v1) {
        nt = gguf_rd32(&f->enc, buf + 8);
        nk = gguf_rd32(&f->enc, buf + 12);
    } else {
        nt = gguf_rd64(&f->enc, buf + 8);
        nk = gguf_rd64(&f->enc, buf + 16);
    }
    CHECK(nt == f->n_tensors && nk == f->n_kv, "counts %llu/%llu vs %llu/%llu",
          (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv,
          (unsigned long long)nt, (unsigned long long)nk);

    uint64_t prev_end = f->enc.v1 ? 16 : 24;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        CHECK(kv->rec_off == prev_end, "kv %llu starts at %llu, previous ended at %llu",
              (unsigned long long)i, (unsigned long long)kv->rec_off,
              (unsigned long long)prev_end);
        CHECK(kv->key_off > kv->rec_off && kv->key_off + kv->key_len <= f->hdr_size,
              "kv %llu key", (unsigned long long)i);
        CHECK(kv->type < GGUF_VTYPE_COUNT, "kv type %u", kv->type);
        CHECK(kv->type != GGUF_ARRAY || kv->elem_type < GGUF_VTYPE_COUNT,
              "kv elem type %u", kv->elem_type);
        CHECK(kv->type == GGUF_ARRAY || kv->count == 1, "scalar count %llu",
              (unsigned long long)kv->count);
        CHECK(kv->val_off >= kv->key_off + kv->key_len &&
              kv->val_off <= f->hdr_size && kv->val_size <= f->hdr_size - kv->val_off,
              "kv %llu value [%llu,+%llu) hdr %llu", (unsigned long long)i,
              (unsigned long long)kv->val_off, (unsigned long long)kv->val_size,
              (unsigned long long)f->hdr_size);
        CHECK(kv->dup >= 1, "dup 0");
        prev_end = kv->val_off + kv->val_size;
    }
    /* dup numbering (quadratic: only for modest key counts) */
    if (f->n_kv <= 256) {
        for (uint64_t i = 0; i < f->n_kv; i++) {
            unsigned n = 1;
            for (uint64_t j = 0; j < i; j++)
                n += f->kv[j].key_len == f->kv[i].key_len &&
                     memcmp(f->hdr + f->kv[j].key_off, f->hdr + f->kv[i].key_off,
                            f->kv[i].key_len) == 0;
            CHECK(f->kv[i].dup == n, "kv %llu dup %u, expected %u",
                  (unsigned long long)i, f->kv[i].dup, n);
        }
    }
    uint64_t *rng = f->n_tensors ? malloc(f->n_tensors * 2 * sizeof *rng) : NULL;
    uint64_t *offs = f->n_tensors ? malloc(f->n_tensors * sizeof *offs) : NULL;
    CHECK(!f->n_tensors || (rng && offs), "malloc");
    for (uint64_t i = 0; i < f->n_tensors; i++)
        offs[i] = f->tensors[i].offset;
    if (f->n_tensors > 1)
        qsort(offs, f->n_tensors, sizeof *offs, cf_cmp_u64);
    uint64_t nr = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        CHECK(t->info_off == prev_end, "tensor %llu info at %llu, expected %llu",
              (unsigned long long)i, (unsigned long long)t->info_off,
              (unsigned long long)prev_end);
        CHECK(t->name_off > t->info_off && t->name_off + t->name_len <= f->hdr_size,
              "tensor name");
        CHECK(t->n_dims <= GGUF_MAX_DIMS, "n_dims %u", t->n_dims);
        uint64_t n = 1;
        for (unsigned d = 0; d < GGUF_MAX_DIMS; d++) {
            CHECK(d < t->n_dims || t->ne[d] == 1, "ne[%u] beyond n_dims", d);
            CHECK(!t->ne[d] || n <= UINT64_MAX / t->ne[d], "ne overflow accepted");
            n *= t->ne[d];
        }
        CHECK(n == t->n_elems, "n_elems %llu vs %llu", (unsigned long long)t->n_elems,
              (unsigned long long)n);
        const struct ggml_type_info *ti = ggml_type_get(t->type);
        if (ti)
            CHECK(n % ti->blck_elems == 0 &&
                  t->nbytes == n / ti->blck_elems * ti->blck_bytes, "nbytes");
        else
            cf_check_unknown_size(f, i, offs, len);
        uint64_t cs = f->enc.v1 ? 4 : 8;
        prev_end = t->name_off + t->name_len + 4 + cs * t->n_dims + 4 + 8;
        CHECK(prev_end <= f->hdr_size, "tensor info past hdr");
        if (t->nbytes) {
            CHECK(t->offset <= len && f->data_off <= len - t->offset &&
                  t->nbytes <= len - f->data_off - t->offset,
                  "tensor %llu data [%llu + %llu, +%llu) outside a file of %llu",
                  (unsigned long long)i, (unsigned long long)f->data_off,
                  (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                  (unsigned long long)len);
            rng[2 * nr] = t->offset;
            rng[2 * nr + 1] = t->offset + t->nbytes;
            nr++;
        }
    }
    CHECK(prev_end == f->hdr_size, "header ends at %llu, hdr_size %llu",
          (unsigned long long)prev_end, (unsigned long long)f->hdr_size);
    if (nr > 1) {
        qsort(rng, nr, 2 * sizeof *rng, cf_cmp_u64pair);
        for (uint64_t k = 1; k < nr; k++)
            CHECK(rng[2 * k] >= rng[2 * k - 1], "tensor ranges overlap");
    }
    free(rng);
    free(offs);
}

/* Whether a nested array's text may legitimately not give back its bytes:
 * the type of a nested array is taken from its first elements (value.h), so
 * an inner array of another element type, or an empty one, cannot be
 * written back as it was.  For those the text must
 * still be a fixpoint: parse(text) renders to text again. */
static inline bool cf_is_nested(const struct gguf_typedesc *td)
{
    return td->depth >= 3;
}

/* Whether s[0..n) holds a string element that is not valid UTF-8: a
 * cheap over-approximation (any byte >= 0x80) is enough to skip the
 * bytes-equality check; the fixpoint check still runs when parse accepts. */
static inline bool cf_has_high_bytes(const uint8_t *p, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] >= 0x80)
            return true;
    return false;
}

static inline void cf_check_value_roundtrip(const struct gguf_file *f,
                                            const struct gguf_kv *kv,
                                            const struct gguf_typedesc *td,
                                            const struct gguf_buf *text)
{
    const uint8_t *bin;
    uint64_t bn;
    cf_kv_bin(f, kv, &bin, &bn);
    struct gguf_buf re = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_parse_value(&f->enc, td, text->data ? text->data : "",
                                       text->len, &re, &d);
    bool stringy = kv->type == GGUF_STRING ||
                   (kv->type == GGUF_ARRAY && kv->elem_type == GGUF_STRING);
    if (e == GGUF_E_NOMEM) {
        gguf_buf_free(&re);
        return;
    }
    if (e != GGUF_OK) {
        /* allowed only where the text cannot be written back as is */
        CHECK(cf_is_nested(td) || (stringy && cf_has_high_bytes(bin, bn)),
              "kv '%.*s' (%s): its text does not parse back: %s (at %llu)",
              (int)(kv->key_len > 60 ? 60 : kv->key_len),
              (const char *)f->hdr + kv->key_off, gguf_vtype_name(kv->type),
              d.msg, (unsigned long long)d.offset);
        gguf_buf_free(&re);
        return;
    }
    if (!cf_is_nested(td)) {
        CHECK(re.len == bn && memcmp(re.data, bin, bn) == 0,
              "kv '%.*s' (%s): text parses back to other bytes (%zu vs %llu)",
              (int)(kv->key_len > 60 ? 60 : kv->key_len),
              (const char *)f->hdr + kv->key_off, gguf_vtype_name(kv->type),
              re.len, (unsigned long long)bn);
    } else if (gguf_kv_uniform(f, kv)) {
        /* nested, one element type per level: the text is a fixpoint.
         * (Arrays of one level that differ in element type cannot be set
         * as text, gguf_kv_uniform: kvedit refuses them.) */
        uint64_t cs = f->enc.v1 ? 4 : 8;
        struct gguf_buf t2 = { 0 };
        CHECK(re.len >= 4 + cs, "short nested encoding");
        uint32_t et = gguf_rd32(&f->enc, (const uint8_t *)re.data);
        uint64_t cnt = f->enc.v1 ? gguf_rd32(&f->enc, (const uint8_t *)re.data + 4)
                                 : gguf_rd64(&f->enc, (const uint8_t *)re.data + 4);
        e = gguf_render_value(&f->enc, GGUF_ARRAY, (uint8_t)et,
                              (const uint8_t *)re.data + 4 + cs, cnt,
                              re.len - 4 - cs, &t2);
        CHECK(e == GGUF_OK || e == GGUF_E_NOMEM, "re-render failed: %d", e);
        CHECK(e != GGUF_OK || (t2.len == text->len &&
                               (t2.len == 0 || memcmp(t2.data, text->data, t2.len) == 0)),
              "nested kv '%.*s': text is not a fixpoint",
              (int)(kv->key_len > 60 ? 60 : kv->key_len),
              (const char *)f->hdr + kv->key_off);
        gguf_buf_free(&t2);
    }
    gguf_buf_free(&re);
}

static inline void cf_check_name(const uint8_t *name, uint32_t len, unsigned dup)
{
    struct gguf_buf enc = { 0 }, dec = { 0 };
    bool ok = gguf_name_encode((const char *)name, len, dup, &enc);
    if (ok && !enc.oom) {
        unsigned d2 = 0;
        CHECK(gguf_name_decode(enc.data, enc.len, &dec, &d2),
              "encoded name '%.*s' does not decode", (int)(enc.len > 80 ? 80 : enc.len),
              enc.data);
        CHECK(d2 == dup && dec.len == len && (len == 0 || memcmp(dec.data, name, len) == 0),
              "name does not survive encode/decode (dup %u -> %u)", dup, d2);
        CHECK(memchr(enc.data, '/', enc.len) == NULL && enc.len > 0 &&
              !(enc.len == 1 && enc.data[0] == '.') &&
              !(enc.len == 2 && enc.data[0] == '.' && enc.data[1] == '.') &&
              memchr(enc.data, '\0', enc.len) == NULL,
              "encoded name is not a file name");
    }
    gguf_buf_free(&enc);
    gguf_buf_free(&dec);
}

static inline void cf_st_get(void *ctx, uint64_t i, struct gguf_st_in *out)
{
    const struct gguf_file *f = ctx;
    const struct gguf_tensor *t = &f->tensors[i];
    out->name = (const char *)f->hdr + t->name_off;
    out->name_len = t->name_len;
    out->t = t;
    out->big_endian = f->enc.big_endian;
    out->has_f32 = ggml_type_get(t->type) != NULL && i % 3 != 0;   /* some without */
}

static inline void cf_check_safetensors(const struct gguf_file *f)
{
    struct gguf_st_layout l;
    struct gguf_diag d;
    enum gguf_err e = gguf_safetensors(f, f->n_tensors, cf_st_get, (void *)f, &l, &d);
    CHECK(e == GGUF_OK || e == GGUF_E_NOMEM || e == GGUF_E_RANGE, "safetensors: error %d", e);
    if (e == GGUF_OK) {
        const struct gguf_buf *h = &l.hdr;
        CHECK(h->len >= 16 && h->len % 8 == 0, "safetensors: header of %zu bytes", h->len);
        uint64_t n = 0;
        for (unsigned b = 0; b < 8; b++)
            n |= (uint64_t)(unsigned char)h->data[b] << (8 * b);
        CHECK(n == h->len - 8, "safetensors: length %llu, header %zu", (unsigned long long)n,
              h->len);
        CHECK(h->data[8] == '{', "safetensors: the JSON does not start with {");
        CHECK(gguf_utf8_valid(h->data + 8, h->len - 8, NULL) == h->len - 8,
              "safetensors: header not UTF-8");
        for (size_t k = 8; k < h->len; k++)
            CHECK((unsigned char)h->data[k] >= 0x20, "safetensors: control character at %zu", k);
        CHECK(l.n_span + l.n_omitted == f->n_tensors, "safetensors: %llu spans, %llu left out",
              (unsigned long long)l.n_span, (unsigned long long)l.n_omitted);
        uint64_t at = h->len;
        for (uint64_t i = 0; i < l.n_span; i++) {
            const struct gguf_st_span *s = &l.span[i];
            CHECK(s->start == at && s->start % s->esize == 0 && s->len % s->esize == 0,
                  "safetensors: span %llu at %llu (%llu expected), %llu bytes, esize %u",
                  (unsigned long long)i, (unsigned long long)s->start, (unsigned long long)at,
                  (unsigned long long)s->len, s->esize);
            at += s->len;
        }
        CHECK(l.size == at, "safetensors: size %llu, spans end at %llu",
              (unsigned long long)l.size, (unsigned long long)at);
    }
    gguf_st_free(&l);
}

/* hf/ (gguf/hf.h): built or refused in one line; its texts valid UTF-8
 * with no control character but newlines; its safetensors layout as
 * model.safetensors' (header padded to 64); every tensor's ranges inside
 * its sources' views, each piece non-empty (the first 64 pieces and the
 * last byte of each tensor: sizes may be huge). */
static inline void cf_check_hf(const struct gguf_file *f)
{
    struct gguf_hf hf;
    struct gguf_diag d;
    enum gguf_err e = gguf_hf_build(f, f->n_tensors, cf_st_get, (void *)f, &hf, &d);
    CHECK(e == GGUF_OK || e == GGUF_E_NOMEM || e == GGUF_E_NOENT, "hf: error %d", e);
    if (e == GGUF_E_NOENT)
        CHECK(d.msg[0] && strchr(d.msg, '\n') == NULL, "hf: refusal not one line: %s", d.msg);
    if (e != GGUF_OK) {
        gguf_hf_free(&hf);
        return;
    }
    const struct gguf_buf *texts[2] = { &hf.config, &hf.generation };
    for (int k = 0; k < 2; k++) {
        const struct gguf_buf *b = texts[k];
        CHECK(b->len && gguf_utf8_valid(b->data, b->len, NULL) == b->len, "hf: text not UTF-8");
        for (size_t j = 0; j < b->len; j++)
            CHECK((unsigned char)b->data[j] >= 0x20 || b->data[j] == '\n',
                  "hf: control character in a text at %zu", j);
    }
    for (uint64_t i = 0; i < hf.n; i++) {
        const struct gguf_hf_tensor *h = &hf.t[i];
        uint64_t es = gguf_hf_esize(h);
        if (h->n_elems > UINT64_MAX / 8)
            continue;
        uint64_t size = h->n_elems * es;
        for (unsigned s = 0; s < h->n_src; s++)
            CHECK(h->src[s] < f->n_tensors, "hf: source %llu", (unsigned long long)h->src[s]);
        uint64_t in = 0;
        for (int k = 0; k < 65 && in < size; k++) {
            if (k == 64)
                in = size - 1;
            struct gguf_hf_seg g;
            gguf_hf_seg(h, in, size - in, &g);
            const struct gguf_tensor *t = &f->tensors[h->src[g.src]];
            uint64_t view = h->f32 ? t->n_elems * 4 : t->nbytes;
            CHECK(g.len > 0 && g.len <= size - in && g.off <= view && g.len <= view - g.off,
                  "hf: %s: piece at %llu: source %u [%llu, +%llu) of %llu", h->name,
                  (unsigned long long)in, g.src, (unsigned long long)g.off,
                  (unsigned long long)g.len, (unsigned long long)view);
            in += g.len ? g.len : 1;
        }
    }
    struct gguf_st_layout l;
    e = gguf_hf_safetensors(f, &hf, &l, &d);
    CHECK(e == GGUF_OK || e == GGUF_E_NOMEM || e == GGUF_E_RANGE, "hf safetensors: error %d", e);
    if (e == GGUF_OK) {
        CHECK(l.hdr.len % 64 == 0, "hf safetensors: header of %zu bytes", l.hdr.len);
        uint64_t at = l.hdr.len;
        for (uint64_t i = 0; i < l.n_span; i++) {
            CHECK(l.span[i].start == at, "hf safetensors: span %llu not contiguous",
                  (unsigned long long)i);
            at += l.span[i].len;
        }
        CHECK(l.size == at, "hf safetensors: size");
    }
    gguf_st_free(&l);
    gguf_hf_free(&hf);
}

static inline void cf_render_all(const struct gguf_file *f)
{
    struct gguf_buf txt = { 0 }, ty = { 0 };
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        txt.len = ty.len = 0;
        enum gguf_err e = gguf_render_kv(f, kv, &txt);
        CHECK(e == GGUF_OK || e == GGUF_E_NOMEM, "render kv %llu: error %d",
              (unsigned long long)i, e);
        struct gguf_typedesc td;
        gguf_kv_typedesc(f, kv, &td);
        CHECK(gguf_typedesc_format(&td, &ty), "typedesc of kv %llu", (unsigned long long)i);
        struct gguf_typedesc td2;
        CHECK(gguf_typedesc_parse(ty.data, ty.len, &td2) && td2.depth == td.depth &&
              memcmp(td2.levels, td.levels, td.depth) == 0,
              "type name '%.*s' does not parse back", (int)ty.len, ty.data);
        if (e == GGUF_OK)
            cf_check_value_roundtrip(f, kv, &td, &txt);
        cf_check_name(f->hdr + kv->key_off, kv->key_len, kv->dup);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        cf_check_name(f->hdr + f->tensors[i].name_off, f->tensors[i].name_len, 1);
    txt.len = 0;
    enum gguf_err e = gguf_info_render(f, "fuzz.gguf", &txt);
    CHECK(e == GGUF_OK || e == GGUF_E_NOMEM, "info: error %d", e);
    /* info.json: valid UTF-8 whatever the file's bytes, and no control
     * character but its own newlines (strings escape theirs) */
    txt.len = 0;
    e = gguf_info_json(f, &txt);
    CHECK(e == GGUF_OK || e == GGUF_E_NOMEM, "info.json: error %d", e);
    if (e == GGUF_OK) {
        CHECK(gguf_utf8_valid(txt.data, txt.len, NULL) == txt.len, "info.json: not UTF-8");
        for (size_t k = 0; k < txt.len; k++)
            CHECK((unsigned char)txt.data[k] >= 0x20 || txt.data[k] == '\n',
                  "info.json: control character 0x%02x at %zu", (unsigned char)txt.data[k], k);
    }
    gguf_buf_free(&txt);
    gguf_buf_free(&ty);
    cf_check_safetensors(f);
    cf_check_hf(f);
}

static inline void cf_check_refusal(enum gguf_err e, const struct gguf_diag *d,
                                    const struct gguf_file *f, uint64_t len)
{
    CHECK(e > GGUF_OK && e <= GGUF_E_INVAL, "unknown error code %d", e);
    CHECK(f == NULL, "*out not NULL after an error");
    CHECK(memchr(d->msg, '\0', sizeof d->msg) != NULL, "message not terminated");
    CHECK(d->msg[0] != '\0', "error %d (%s) with an empty message", e, gguf_strerror(e));
    CHECK(d->offset <= len || (e == GGUF_E_NOMEM && d->offset == UINT64_MAX),
          "error offset %llu past the %llu bytes (%s)", (unsigned long long)d->offset,
          (unsigned long long)len, d->msg);
    CHECK(strchr(d->msg, '\n') == NULL, "message is not one line: %s", d->msg);
}

/* Parses buf[0..len) as a whole file and checks everything above. */
static inline enum gguf_err check_gguf_bytes(const uint8_t *buf, uint64_t len)
{
    struct gguf_file *f = NULL;
    struct gguf_diag d;
    enum gguf_err e = gguf_parse(buf, len, len, &f, &d, NULL);
    if (e != GGUF_OK) {
        cf_check_refusal(e, &d, f, len);
        return e;
    }
    CHECK(f != NULL, "GGUF_OK without a file");
    cf_check_index(buf, len, f);
    cf_render_all(f);
    gguf_close(f);
    return e;
}

#endif

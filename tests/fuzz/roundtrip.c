/*
 * tests/fuzz/roundtrip.c — libFuzzer harness for the header writer:
 * parse -> edit the key list -> gguf_header_build -> parse -> same index.
 *
 * Input: 8 bytes of edit seed, then a GGUF file (parsed with file_size = its
 * length; inputs the parser refuses end there).  The seed drives a small
 * generator that edits the list of key/values the way the mount does:
 * shuffles it, drops keys (never general.alignment, which the writer must
 * refuse to drop), duplicates some, adds new u32 keys, and replaces some
 * values by the encoding of their own text (render, then parse with the
 * key's type, as a `cat meta/K > meta/K` does).
 *
 * Properties:
 *   - gguf_header_build accepts the list (each value is a well-formed
 *     encoding, alignment untouched);
 *   - the unedited list gives back the original header bytes;
 *   - the built header followed by the original tensor data parses, with
 *     exactly the given key/values (key, type, value bytes, in order), the
 *     same tensor infos and alignment, tensor data starting right after the
 *     header, and passes every check of check_file.h (renders included).
 */
#include "check_file.h"

#include "gguf/edit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool is_alignment(const struct gguf_file *f, const struct gguf_kv *kv)
{
    return kv->key_len == 17 && memcmp(f->hdr + kv->key_off, "general.alignment", 17) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    uint64_t seed;
    memcpy(&seed, data, 8);
    size_t len = size - 8;
    struct guarded g = guarded_copy(data + 8, len);
    struct gguf_file *f = NULL;
    struct gguf_diag d;
    if (gguf_parse(g.p, len, len, &f, &d, NULL) != GGUF_OK) {
        guarded_free(&g);
        return 0;
    }

    /* the edit: at most 2n + 4 entries */
    uint64_t n0 = f->n_kv;
    size_t cap = (size_t)(2 * n0 + 4);
    struct gguf_newkv *kvs = calloc(cap, sizeof *kvs);
    struct gguf_buf *reenc = calloc(cap, sizeof *reenc);
    char (*names)[32] = calloc(cap, sizeof *names);
    uint8_t (*vals)[4] = calloc(cap, sizeof *vals);
    uint64_t *order = malloc((n0 ? n0 : 1) * sizeof *order);
    CHECK(kvs && reenc && names && vals && order, "malloc");
    for (uint64_t i = 0; i < n0; i++)
        order[i] = i;
    bool identity = (seed & 7) == 0;       /* 1 in 8: no edit at all */
    uint64_t r = seed;
    if (!identity && (fuzz_rand(&r) & 1)) {
        for (uint64_t i = n0; i > 1; i--) {     /* Fisher-Yates */
            uint64_t j = fuzz_rand(&r) % i, t = order[i - 1];
            order[i - 1] = order[j];
            order[j] = t;
        }
    }
    size_t n = 0;
    for (uint64_t k = 0; k < n0; k++) {
        uint64_t i = order[k];
        const struct gguf_kv *kv = &f->kv[i];
        unsigned roll = identity ? 15 : (unsigned)(fuzz_rand(&r) % 16);
        if (roll < 3 && !is_alignment(f, kv))
            continue;                                   /* drop */
        kvs[n] = gguf_newkv_of(f, i);
        if (roll == 3 || roll == 4) {                   /* rewrite its text */
            struct gguf_buf txt = { 0 };
            struct gguf_typedesc td;
            struct gguf_diag pd;
            gguf_kv_typedesc(f, kv, &td);
            if (td.depth < 3 && gguf_render_kv(f, kv, &txt) == GGUF_OK &&
                gguf_parse_value(&f->enc, &td, txt.data ? txt.data : "", txt.len,
                                 &reenc[n], &pd) == GGUF_OK) {
                kvs[n].val = (const uint8_t *)reenc[n].data;
                kvs[n].val_len = reenc[n].len;
            }
            gguf_buf_free(&txt);
        }
        n++;
        if (roll == 5 && n < cap)                       /* duplicate */
            kvs[n++] = gguf_newkv_of(f, i);
        if (roll == 6 && n < cap) {                     /* add a u32 key */
            uint32_t v = (uint32_t)fuzz_rand(&r);
            int kl = snprintf(names[n], sizeof names[n], "fuzz.added_%zu", n);
            for (int b = 0; b < 4; b++)
                vals[n][b] = (uint8_t)(f->enc.big_endian ? v >> (24 - 8 * b) : v >> (8 * b));
            kvs[n] = (struct gguf_newkv){ names[n], (size_t)kl, GGUF_U32, vals[n], 4 };
            n++;
        }
    }

    struct gguf_buf out = { 0 };
    struct gguf_diag bd;
    enum gguf_err e = gguf_header_build(f, kvs, n, &out, &bd);
    CHECK(e == GGUF_OK || e == GGUF_E_NOMEM, "gguf_header_build refused an edit: %s", bd.msg);
    if (e != GGUF_OK)
        goto done;
    /* padded where tensor bytes follow; a file without them ends with its
     * header (see test_known_alignment_padding) */
    bool has_data = false;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        has_data |= f->tensors[i].nbytes != 0;
    CHECK(!has_data || out.len % f->alignment == 0, "header not padded to the alignment");
    if (identity)
        CHECK(out.len >= f->hdr_size && memcmp(out.data, f->hdr, f->hdr_size) == 0,
              "an unedited key list does not give the same header bytes");

    /* the new file: built header + the original tensor data */
    uint64_t data_len = len > f->data_off ? len - f->data_off : 0;
    size_t nlen = out.len + (size_t)data_len;
    uint8_t *nb = malloc(nlen ? nlen : 1);
    CHECK(nb, "malloc");
    memcpy(nb, out.data, out.len);
    if (data_len)
        memcpy(nb + out.len, g.p + f->data_off, (size_t)data_len);
    struct guarded ng = guarded_copy(nb, nlen);
    free(nb);
    struct gguf_file *nf = NULL;
    e = gguf_parse(ng.p, nlen, nlen, &nf, &d, NULL);
    CHECK(e == GGUF_OK, "the built header does not parse: %s (at %llu)", d.msg,
          (unsigned long long)d.offset);
    CHECK(nf->n_kv == n, "%llu kvs, %zu given", (unsigned long long)nf->n_kv, n);
    for (size_t i = 0; i < n; i++) {
        const struct gguf_kv *kv = &nf->kv[i];
        const uint8_t *bin;
        uint64_t bn;
        cf_kv_bin(nf, kv, &bin, &bn);
        CHECK(kv->key_len == kvs[i].key_len &&
              memcmp(nf->hdr + kv->key_off, kvs[i].key, kvs[i].key_len) == 0,
              "kv %zu: key differs", i);
        CHECK(kv->type == kvs[i].type, "kv %zu: type %u, given %u", i, kv->type, kvs[i].type);
        CHECK(bn == kvs[i].val_len && memcmp(bin, kvs[i].val, bn) == 0,
              "kv %zu: value bytes differ", i);
    }
    CHECK(nf->n_tensors == f->n_tensors && nf->alignment == f->alignment &&
          (nf->data_off == out.len || !has_data) && nf->version == f->version &&
          nf->enc.big_endian == f->enc.big_endian, "header fields differ");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *a = &f->tensors[i], *b = &nf->tensors[i];
        CHECK(a->name_len == b->name_len &&
              memcmp(f->hdr + a->name_off, nf->hdr + b->name_off, a->name_len) == 0 &&
              a->n_dims == b->n_dims && memcmp(a->ne, b->ne, sizeof a->ne) == 0 &&
              a->type == b->type && a->offset == b->offset && a->nbytes == b->nbytes,
              "tensor %llu differs", (unsigned long long)i);
    }
    gguf_close(nf);
    check_gguf_bytes(ng.p, nlen);
    guarded_free(&ng);

done:
    gguf_buf_free(&out);
    for (size_t i = 0; i < cap; i++)
        gguf_buf_free(&reenc[i]);
    free(reenc);
    free(kvs);
    free(names);
    free(vals);
    free(order);
    gguf_close(f);
    guarded_free(&g);
    return 0;
}

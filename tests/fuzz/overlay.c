/*
 * tests/fuzz/overlay.c — libFuzzer harness for overlay files and the
 * spliced model they make (gguf/overlay.h).
 *
 * Input: one flags byte, a u32 (little-endian) base length, the base (a
 * GGUF file: the remote model), then the overlay file.  Flags bit 0: make
 * the overlay's two checksums right before parsing (else mutations stop at
 * the checksums and the header is never reached).  The base is parsed
 * (gguf_parse); when it is a model, it becomes an in-memory source of
 * identity "fuzz:base" and the overlay (placed right before a PROT_NONE
 * guard page) is parsed and matched against it.  Invariants:
 *   - a refusal carries a message, and an offset inside the overlay file
 *     (or at its end, for a header cut short), or none;
 *   - an accepted overlay gives a model with exactly the base's tensor
 *     infos (names, dims, types, offsets, sizes), version, byte order and
 *     alignment, whose data starts where its header ends when it has
 *     tensor bytes;
 *   - the spliced source holds the header then the base's bytes from
 *     base_data on (read in three pieces across the boundary), and
 *     gguf_open_source parses it to the same header.
 */
#include "fuzz_common.h"
#include "gguf/journal.h"
#include "gguf/overlay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct mem {
    struct gguf_source s;
    const uint8_t *p;
};

static ssize_t mem_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    const struct mem *m = (const struct mem *)s;
    if (off >= s->size)
        return 0;
    if (len > s->size - off)
        len = (size_t)(s->size - off);
    memcpy(buf, m->p + off, len);
    return (ssize_t)len;
}

static void mem_close(struct gguf_source *s) { (void)s; }

static const struct gguf_source_ops mem_ops = { .read = mem_read, .close = mem_close };

static void check_model(const struct gguf_overlay *ov, const struct gguf_file *g,
                        const struct gguf_file *b, struct gguf_source *base)
{
    CHECK(g->n_tensors == b->n_tensors, "tensor count %llu vs %llu",
          (unsigned long long)g->n_tensors, (unsigned long long)b->n_tensors);
    CHECK(g->version == b->version && g->enc.big_endian == b->enc.big_endian &&
          g->alignment == b->alignment, "version, byte order or alignment differ");
    for (uint64_t j = 0; j < g->n_tensors; j++) {
        const struct gguf_tensor *x = &g->tensors[j], *y = &b->tensors[j];
        CHECK(x->name_len == y->name_len &&
              memcmp(g->hdr + x->name_off, b->hdr + y->name_off, x->name_len) == 0 &&
              x->n_dims == y->n_dims && memcmp(x->ne, y->ne, sizeof x->ne) == 0 &&
              x->type == y->type && x->offset == y->offset && x->nbytes == y->nbytes,
              "tensor %llu differs", (unsigned long long)j);
    }
    CHECK(g->hdr_size <= ov->hdr_len && ov->hdr_len <= g->data_off, "header length %llu "
          "outside [%llu, %llu]", (unsigned long long)ov->hdr_len,
          (unsigned long long)g->hdr_size, (unsigned long long)g->data_off);
    if (gguf_has_tensor_data(g))
        CHECK(g->data_off == ov->hdr_len, "data at %llu, header length %llu",
              (unsigned long long)g->data_off, (unsigned long long)ov->hdr_len);
    CHECK(g->file_size == ov->hdr_len + (base->size - ov->base_data), "file size");

    struct gguf_source *sp;
    struct gguf_diag d;
    CHECK(gguf_splice_source(ov->hdr, (size_t)ov->hdr_len, base, ov->base_data, &sp, &d) ==
          GGUF_OK, "splice: %s", d.msg);
    CHECK(sp->size == g->file_size, "spliced size");
    size_t n = (size_t)sp->size;
    uint8_t *got = malloc(n ? n : 1);
    CHECK(got != NULL, "out of memory");
    /* three reads: up to just before the boundary, across it, the rest */
    size_t cut1 = ov->hdr_len > 3 ? (size_t)ov->hdr_len - 3 : 0;
    size_t cut2 = cut1 + 7 < n ? cut1 + 7 : n;
    CHECK(gguf_source_read_all(sp, got, cut1, 0) == 0, "read 1");
    CHECK(gguf_source_read_all(sp, got + cut1, cut2 - cut1, cut1) == 0, "read 2");
    CHECK(gguf_source_read_all(sp, got + cut2, n - cut2, cut2) == 0, "read 3");
    CHECK(sp->ops->read(sp, got, 1, n) == 0, "a read at the end is not 0");
    CHECK(memcmp(got, ov->hdr, (size_t)ov->hdr_len) == 0, "the header");
    const struct mem *m = (const struct mem *)base;
    CHECK(memcmp(got + ov->hdr_len, m->p + ov->base_data, n - (size_t)ov->hdr_len) == 0,
          "the base's data");
    free(got);
    struct gguf_file *g2;
    CHECK(gguf_open_source(sp, &g2, &d) == GGUF_OK, "the spliced source does not parse: %s",
          d.msg);
    CHECK(g2->hdr_size == g->hdr_size && memcmp(g2->hdr, g->hdr, g->hdr_size) == 0,
          "the spliced source parses to another header");
    gguf_close(g2);
    gguf_source_close(sp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    uint8_t flags = data[0];
    uint32_t blen = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 |
                    (uint32_t)data[4] << 24;
    if (blen > size - 5)
        return 0;
    const uint8_t *bp = data + 5;
    const uint8_t *op = bp + blen;
    size_t olen = size - 5 - blen;

    struct gguf_diag d;
    struct gguf_file *b;
    if (gguf_parse(bp, blen, blen, &b, &d, NULL) != GGUF_OK)
        return 0;
    struct guarded base_copy = guarded_copy(bp, blen);
    struct mem m = { .s = { .ops = &mem_ops, .size = blen, .name = (char *)"fuzz://base",
                            .identity = (char *)"fuzz:base", .fd = -1 },
                     .p = base_copy.p };

    uint8_t *o = malloc(olen ? olen : 1);
    CHECK(o != NULL, "out of memory");
    memcpy(o, op, olen);
    if ((flags & 1) && olen >= GGUF_OVERLAY_REC) {
        static const struct gguf_enc le = { 0 };
        gguf_wr64(&le, o + 48, gguf_cksum(o + GGUF_OVERLAY_REC, olen - GGUF_OVERLAY_REC));
        gguf_wr64(&le, o + 56, gguf_cksum(o, 56));
    }
    struct guarded ocopy = guarded_copy(o, olen);
    free(o);

    struct gguf_overlay ov;
    d.msg[0] = '\0';
    enum gguf_err e = gguf_overlay_parse(ocopy.p, olen, &ov, &d);
    if (e) {
        CHECK(d.msg[0] != '\0', "a refusal without a message (%d)", e);
        CHECK(d.offset == UINT64_MAX || d.offset < olen || (olen < GGUF_OVERLAY_REC && d.offset == 0),
              "offset %llu outside the overlay (%zu bytes)", (unsigned long long)d.offset, olen);
    } else {
        CHECK(ov.hdr_at + ov.hdr_len == olen, "lengths");
        struct gguf_file *g;
        d.msg[0] = '\0';
        e = gguf_overlay_match(&ov, &m.s, b, &g, &d);
        if (e) {
            CHECK(d.msg[0] != '\0', "a refusal without a message (%d)", e);
            CHECK(d.offset == UINT64_MAX || d.offset <= olen,
                  "offset %llu outside the overlay (%zu bytes): %s", (unsigned long long)d.offset,
                  olen, d.msg);
        } else {
            check_model(&ov, g, b, &m.s);
            gguf_close(g);
        }
        gguf_overlay_free(&ov);
    }
    guarded_free(&ocopy);
    guarded_free(&base_copy);
    gguf_close(b);
    return 0;
}

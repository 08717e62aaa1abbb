/*
 * tests/fuzz/parse.c — libFuzzer harness for the GGUF parser (gguf_parse).
 *
 * The input is a whole file.  It is copied to the end of pages followed by
 * a PROT_NONE guard page, so any read past the end faults, and parsed with
 * file_size = its length.  check_file.h then asserts the invariants of an
 * accepted file (every tensor range inside the file, hdr_size <= len,
 * data_off >= hdr_size, counts as declared, ...) and renders every kv, type,
 * file name and the info text; a refusal must carry a one-line message and
 * an offset within the file.
 *
 * The incremental path (a buffer holding only a prefix of a longer file,
 * need_more) is checked too: starting from a prefix chosen by the input's
 * last byte, the parser must ask for more bytes than it was given but no
 * more than the file has, and the final answer must be the same as the
 * whole-buffer one.  Each prefix gets its own guard page.
 */
#include "check_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_incremental(const uint8_t *data, size_t size,
                              enum gguf_err whole_err, const struct gguf_diag *whole)
{
    if (size < 2)
        return;
    uint64_t have = size * (uint64_t)data[size - 1] / 256;
    for (int step = 0; step < 6; step++) {
        struct guarded g = guarded_copy(data, (size_t)have);
        struct gguf_file *f = NULL;
        struct gguf_diag d;
        bool more = false;
        enum gguf_err e = gguf_parse(g.p, have, size, &f, &d, &more);
        guarded_free(&g);
        if (e == GGUF_E_TRUNCATED && more) {
            CHECK(f == NULL, "*out set on need_more");
            CHECK(d.offset > have && d.offset <= size,
                  "need_more asks for %llu bytes with %llu given of %zu",
                  (unsigned long long)d.offset, (unsigned long long)have, size);
            have = step < 4 ? d.offset : size;
            continue;
        }
        /* a final answer: the same as with the whole file in memory */
        CHECK(e == whole_err, "prefix of %llu/%zu bytes: error %d, whole file: %d (%s / %s)",
              (unsigned long long)have, size, e, whole_err, d.msg, whole->msg);
        if (e != GGUF_OK) {
            CHECK(strcmp(d.msg, whole->msg) == 0 && d.offset == whole->offset,
                  "prefix parse says \"%s\" at %llu, whole \"%s\" at %llu", d.msg,
                  (unsigned long long)d.offset, whole->msg,
                  (unsigned long long)whole->offset);
        } else {
            CHECK(f->hdr_size <= have, "accepted a prefix shorter than the header");
            gguf_close(f);
        }
        return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct guarded g = guarded_copy(data, size);
    enum gguf_err e = check_gguf_bytes(g.p, size);
    /* the diag of the whole-buffer parse, for the incremental comparison */
    struct gguf_file *f = NULL;
    struct gguf_diag d;
    enum gguf_err e2 = gguf_parse(g.p, size, size, &f, &d, NULL);
    CHECK(e2 == e, "parse is not deterministic");
    gguf_close(f);
    guarded_free(&g);
    check_incremental(data, size, e, &d);
    return 0;
}

/*
 * gguf/layout.c — where each tensor's bytes lie: sizes of tensors of
 * unknown types, ranges inside the file and not overlapping, and the
 * objections ggml would raise about alignment and order (gguf/gguf.h).
 */
#include "parse_impl.h"
#include "types.h"

#include <stdlib.h>

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

static enum gguf_err size_unknown(struct gguf_diag *d, struct gguf_file *f,
                                  const uint64_t *ord, uint64_t data_room,
                                  char **notes)
{
    char nb[GGUF_DIAG_NAME_MAX], nb2[GGUF_DIAG_NAME_MAX];
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
                return gguf_diag_set(d, GGUF_E_RANGE, t->info_off,
                            "tensors '%s' and '%s' (type ids %u and %u, unknown "
                            "to gguffs) both start at offset %llu: their sizes "
                            "are ambiguous",
                            gguf_diag_name(f->hdr + u->name_off, u->name_len, nb),
                            gguf_diag_name(f->hdr + t->name_off, t->name_len, nb2),
                            u->type, t->type, (unsigned long long)o);
            u = t;
            gguf_diag_name(f->hdr + t->name_off, t->name_len, nb);
            if (o >= data_room)
                return gguf_diag_set(d, GGUF_E_RANGE, t->info_off,
                            "tensor '%s': type id %u is unknown to gguffs and "
                            "its offset %llu leaves no bytes for its %llu "
                            "elements (%llu bytes of tensor data from offset "
                            "%llu)", nb, t->type, (unsigned long long)o,
                            (unsigned long long)t->n_elems,
                            (unsigned long long)data_room,
                            (unsigned long long)f->data_off);
            t->nbytes = bound - o;
            gguf_note(notes, "tensor '%s': type id %u %s (raw bytes only, size %llu "
                 "taken from %s)", nb, t->type,
                 t->type < GGML_T_COUNT ? "removed from ggml" : "unknown to gguffs",
                 (unsigned long long)t->nbytes,
                 to_end ? "the end of the file" : "the next tensor's offset");
        }
    }
    return GGUF_OK;
}

/* Every range inside the tensor data; notes the first misaligned offset. */
static enum gguf_err check_inside(const struct gguf_file *f, uint64_t data_room,
                                  struct gguf_diag *d, char **notes)
{
    char nb[GGUF_DIAG_NAME_MAX];
    bool misaligned = false;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->nbytes == 0)
            continue;
        if (t->offset > data_room || t->nbytes > data_room - t->offset)
            return gguf_diag_set(d, GGUF_E_RANGE, t->info_off,
                     "tensor '%s': data [%llu, +%llu) lies outside the file "
                     "(%llu bytes of tensor data from offset %llu)",
                     gguf_diag_name(f->hdr + t->name_off, t->name_len, nb),
                     (unsigned long long)t->offset,
                     (unsigned long long)t->nbytes,
                     (unsigned long long)data_room,
                     (unsigned long long)f->data_off);
        if (t->offset % f->alignment && !misaligned) {
            gguf_note(notes, "tensor '%s': offset %llu is not a multiple of the "
                 "alignment %llu: ggml refuses it",
                 gguf_diag_name(f->hdr + t->name_off, t->name_len, nb),
                 (unsigned long long)t->offset, (unsigned long long)f->alignment);
            misaligned = true;
        }
    }
    return GGUF_OK;
}

/* No two ranges overlap (ord: the tensors by offset). */
static enum gguf_err check_overlap(const struct gguf_file *f, const uint64_t *ord,
                                   struct gguf_diag *d)
{
    char nb[GGUF_DIAG_NAME_MAX], nb2[GGUF_DIAG_NAME_MAX];
    uint64_t end = 0, last = UINT64_MAX;
    for (uint64_t k = 0; k < f->n_tensors; k++) {
        const struct gguf_tensor *t = &f->tensors[ord[k]];
        if (t->nbytes == 0)
            continue;
        if (last != UINT64_MAX && t->offset < end) {
            const struct gguf_tensor *p = &f->tensors[last];
            return gguf_diag_set(d, GGUF_E_RANGE, t->info_off,
                "tensor '%s' [%llu, +%llu) overlaps tensor '%s' [%llu, +%llu)",
                gguf_diag_name(f->hdr + t->name_off, t->name_len, nb),
                (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                gguf_diag_name(f->hdr + p->name_off, p->name_len, nb2),
                (unsigned long long)p->offset, (unsigned long long)p->nbytes);
        }
        end = t->offset + t->nbytes;
        last = ord[k];
    }
    return GGUF_OK;
}

/* ggml expects tensor i at the padded end of tensor i-1: notes the first
 * that is not. */
static void note_order(const struct gguf_file *f, char **notes)
{
    char nb[GGUF_DIAG_NAME_MAX];
    uint64_t expect = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->offset != expect) {
            gguf_note(notes, "tensor '%s' is at offset %llu where ggml expects "
                 "%llu (tensors not stored contiguously in order): ggml "
                 "refuses it", gguf_diag_name(f->hdr + t->name_off, t->name_len, nb),
                 (unsigned long long)t->offset, (unsigned long long)expect);
            return;
        }
        expect = t->offset + t->nbytes;
        expect += (f->alignment - expect % f->alignment) % f->alignment;
    }
}

enum gguf_err gguf_layout_check(struct gguf_file *f, struct gguf_diag *d, char **notes)
{
    uint64_t data_room = f->data_off <= f->file_size ? f->file_size - f->data_off : 0;
    if (f->n_tensors == 0)
        return GGUF_OK;
    uint64_t *ord = malloc(f->n_tensors * sizeof *ord);
    if (!ord)
        return GGUF_E_NOMEM;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        ord[i] = i;
    qsort_r(ord, f->n_tensors, sizeof *ord, cmp_by_offset, f->tensors);
    enum gguf_err e = size_unknown(d, f, ord, data_room, notes);
    if (!e)
        e = check_inside(f, data_room, d, notes);
    if (!e)
        e = check_overlap(f, ord, d);
    if (!e)
        note_order(f, notes);
    free(ord);
    return e;
}

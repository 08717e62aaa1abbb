/*
 * core/digests.c — what is computed on first use and kept for the mount:
 * tensors/NAME/stats (over the f32 view, through the block cache),
 * tensors/NAME/xxh64 and sha256 (over raw), and /hashes (what
 * llama-gguf-hash --xxh64 --sha256 prints for model.gguf; the digests
 * and the lines are core/digest.c's).
 *
 * Tensor data never changes during a mount (an edit changes metadata
 * only, and keeps every tensor's index), so each text is computed once and
 * kept in fs->digests, shared by every version, freed at the end.  Two
 * threads that compute the same text at once both compute it; the first to
 * finish publishes it (compare-and-swap), the other frees its copy (one
 * /hashes computation at a time, though: hashes_mu).
 *
 * stats read the f32 view chunk by chunk through the block cache, as f32
 * reads do (a later f32 read of a tensor that fits in half the cache is
 * served from it, and stats after an f32 read fill only the chunks the
 * cache has dropped), with the workers (-o threads) filling the chunks
 * ahead: in parallel where there are workers (none by default on two
 * CPUs), else on the caller's thread.  A little-endian float32 tensor,
 * whose f32 view is its raw bytes and never goes through the cache, is
 * read from its source.  Digests read the raw bytes from the source, as
 * raw reads do (a local file, a split model's shards, a remote model's
 * blocks), DIGEST_PIECE bytes at a time; /hashes hashes every tensor once,
 * its own digests and the model's together, and keeps the tensors'.
 *
 * Every size is known without computing anything (hex digits of a fixed
 * length; /hashes: lines of fixed length around the names; a stats file:
 * a fixed-width layout, gguf/fstats.h), so only a read computes, and a
 * walk of the tree (ls -lR, du, find) reads no tensor data.
 *
 * Everything here runs with a reference to a state, not the state lock,
 * as reads do (core/mount.h): a computation may take a while (/hashes reads the
 * whole model, perhaps from a slow server), and an edit waiting for the
 * lock, which prefers writers, would hold every handler back meanwhile.
 */
#include "core/digests.h"
#include "core/f32.h"
#include "core/state.h"
#include "core/tensor.h"
#include "core/underneath.h"

#include "core/digest.h"
#include "gguf/buf.h"
#include "gguf/fstats.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Raw bytes are read this many at a time. */
#define DIGEST_PIECE (4u << 20)

/* A tensor's digests: the texts of its xxh64 and sha256 files. */
struct tdig {
    struct text xxh, sha;
    char x[CORE_XXH64_HEX], s[CORE_SHA256_HEX];
};

struct digests {
    uint64_t n;                          /* tensors */
    _Atomic(struct text *) *stats;       /* per tensor */
    _Atomic(struct tdig *) *dig;         /* per tensor */
    _Atomic(struct text *) hashes;
    _Atomic uint64_t hashes_size;        /* 0: not computed yet */
    pthread_mutex_t hashes_mu;           /* one /hashes computation at a time */
};

int core_digests_new(struct mount *fs, uint64_t n_tensors)
{
    struct digests *d = calloc(1, sizeof *d);
    /* n_tensors is bounded by the model's header, which holds their infos */
    if (!d || !(d->stats = calloc(n_tensors ? n_tensors : 1, sizeof *d->stats)) ||
        !(d->dig = calloc(n_tensors ? n_tensors : 1, sizeof *d->dig))) {
        if (d)
            free(d->stats);
        free(d);
        return ENOMEM;
    }
    d->n = n_tensors;
    pthread_mutex_init(&d->hashes_mu, NULL);
    fs->digests = d;
    return 0;
}

static void text_free(struct text *t)
{
    if (t)
        free(t->data);
    free(t);
}

void core_digests_free(struct mount *fs)
{
    struct digests *d = fs->digests;
    if (!d)
        return;
    for (uint64_t i = 0; i < d->n; i++) {
        text_free(atomic_load(&d->stats[i]));
        free(atomic_load(&d->dig[i]));
    }
    text_free(atomic_load(&d->hashes));
    pthread_mutex_destroy(&d->hashes_mu);
    free(d->stats);
    free(d->dig);
    free(d);
    fs->digests = NULL;
}

/* Publishes *t in slot (or frees it for the copy another thread published
 * first); the text now in the slot. */
static struct text *publish_text(_Atomic(struct text *) *slot, struct text *t)
{
    struct text *expected = NULL;
    if (atomic_compare_exchange_strong(slot, &expected, t))
        return t;
    text_free(t);
    return expected;
}

static struct text *text_of(struct gguf_buf *b)
{
    struct text *t = b->oom ? NULL : malloc(sizeof *t);
    if (!t) {
        gguf_buf_free(b);
        return NULL;
    }
    t->data = b->data;
    t->len = b->len;
    return t;
}

/* ---- stats ---------------------------------------------------------------- */

/* Tensor idx's stats, read from st (a reference the caller holds, or the
 * state lock).  0 or an errno. */
static int stats_compute(struct mount *fs, const struct state *st, uint64_t idx,
                         struct text **out)
{
    struct gguf_fstats acc;
    gguf_fstats_init(&acc);
    /* a stream of its own: the workers fill the chunks ahead of it */
    struct f32_stream *s = core_stream_new(fs);
    float *raw = NULL;
    int err = 0;
    /* A tensor that fits in half the cache keeps its chunks for a later
     * f32 read; a larger one would only push out what other readers keep
     * (its first chunks are gone by its end): its chunks pass through, as
     * a long sequential read's do (cache_once). */
    uint64_t chunks = core_chunks(st, idx);
    bool keep = chunks <= cache_capacity_blocks(fs->cache) / 2;
    const struct tref *r = &st->tens[idx];
    const struct gguf_shard *sh = &st->model->shards[r->shard];
    for (uint64_t c = 0; c < chunks && !err; c++) {
        size_t n = core_chunk_len(st, idx, c);
        if (core_f32_is_raw(st, idx)) {
            if (!raw && !(raw = malloc(fs->chunk_bytes)))
                err = ENOMEM;
            else if (gguf_source_read_all(sh->src, raw, n * sizeof(float),
                                          sh->gf->data_off + r->t->offset +
                                          c * fs->chunk_bytes) != 0) {
                core_source_failed(fs, sh->src, sh->gf->data_off + r->t->offset +
                                   c * fs->chunk_bytes, n * sizeof(float));
                err = EIO;
            } else if (core_under_check_shard(fs, st, r->shard)) {
                err = EIO;
            } else {
                gguf_fstats_add(&acc, raw, n);
            }
            continue;
        }
        struct f32_pin p;
        err = core_f32_pin(st, s, idx, c * fs->chunk_bytes, n * sizeof(float), &p);
        if (!err && p.n == 1) {
            gguf_fstats_add(&acc, p.iov[0].iov_base, n);
            /* kept: used 0 (nothing went to the kernel's page cache) */
            if (!keep)
                cache_once(fs->cache, p.b[0]);
        }
        core_f32_unpin(fs, &p, !keep);
    }
    if (s)
        core_stream_free(fs, s);
    free(raw);
    if (err)
        return err;
    char buf[GGUF_FSTATS_TEXT_MAX];
    size_t len = gguf_fstats_render(&acc, buf);
    if (len != GGUF_FSTATS_TEXT_LEN)
        return EIO;             /* the size stat gave: cannot differ */
    struct gguf_buf b = { 0 };
    gguf_buf_put(&b, buf, len);
    return (*out = text_of(&b)) ? 0 : ENOMEM;
}

/* ---- digests -------------------------------------------------------------- */

/* The hash states a pass feeds: a tensor's (NULL: not wanted) and the
 * model's (NULL: not wanted). */
struct hashing {
    struct core_hash *t;
    struct core_hash *m;
};

/* Feeds tensor idx's raw bytes (from the source raw reads use) to h, in
 * pieces of buf (DIGEST_PIECE bytes).  0 or an errno. */
static int hash_tensor(struct mount *fs, const struct state *st, uint64_t idx, uint8_t *buf,
                       const struct hashing *h)
{
    const struct tref *r = &st->tens[idx];
    const struct gguf_shard *sh = &st->model->shards[r->shard];
    uint64_t pos = sh->gf->data_off + r->t->offset, left = r->t->nbytes;
    while (left) {
        size_t n = left < DIGEST_PIECE ? (size_t)left : DIGEST_PIECE;
        if (gguf_source_read_all(sh->src, buf, n, pos) != 0) {
            core_source_failed(fs, sh->src, pos, n);
            return EIO;
        }
        /* the file changed underneath (underneath.c): checked after the
         * read, as f32 fills do */
        if (core_under_check_shard(fs, st, r->shard))
            return EIO;
        if ((h->t && core_hash_update(h->t, buf, n)) ||
            (h->m && core_hash_update(h->m, buf, n)))
            return ENOMEM;
        pos += n;
        left -= n;
    }
    return 0;
}

/* A tensor's digests from its finished hash states, published in its slot
 * (or the copy another thread published first); NULL when out of memory. */
static struct tdig *tdig_publish(struct digests *dg, uint64_t idx, struct core_hash *h)
{
    struct tdig *d = malloc(sizeof *d);
    if (!d)
        return NULL;
    if (core_hash_hex(h, d->x, d->s)) {
        free(d);
        return NULL;
    }
    d->xxh = (struct text){ d->x, sizeof d->x };
    d->sha = (struct text){ d->s, sizeof d->s };
    struct tdig *expected = NULL;
    if (atomic_compare_exchange_strong(&dg->dig[idx], &expected, d))
        return d;
    free(d);
    return expected;
}

/* Tensor idx's digests (st: held by the caller, under the state lock or
 * a reference).  0 or an errno. */
static int dig_compute(struct mount *fs, const struct state *st, uint64_t idx)
{
    uint8_t *buf = malloc(DIGEST_PIECE);
    struct core_hash *t = core_hash_new();
    int err = !buf || !t ? ENOMEM : core_hash_reset(t);
    struct hashing h = { t, NULL };
    if (!err)
        err = hash_tensor(fs, st, idx, buf, &h);
    if (!err && !tdig_publish(fs->digests, idx, t))
        err = ENOMEM;
    core_hash_free(t);
    free(buf);
    return err;
}

/* The bytes llama-gguf-hash prints as a tensor's name: its name up to a
 * NUL (a C string there). */
static void tensor_name(const struct state *st, uint64_t idx, const char **p, size_t *len)
{
    const struct tref *r = &st->tens[idx];
    const char *name = (const char *)st->model->shards[r->shard].gf->hdr + r->t->name_off;
    *p = name;
    *len = core_hash_name_len(name, r->t->name_len);
}

uint64_t core_hashes_size(const struct state *st)
{
    struct digests *dg = st->fs->digests;
    uint64_t n = atomic_load_explicit(&dg->hashes_size, memory_order_relaxed);
    if (n)
        return n;
    for (uint64_t j = 0; j < st->n_tensors; j++) {
        const char *name;
        size_t len;
        tensor_name(st, j, &name, &len);
        n += core_hash_line_len(CORE_XXH64_HEX, true, len) +
             core_hash_line_len(CORE_SHA256_HEX, true, len);
    }
    n += core_hash_line_len(CORE_XXH64_HEX, false, 0) +
         core_hash_line_len(CORE_SHA256_HEX, false, 0);
    atomic_store_explicit(&dg->hashes_size, n, memory_order_relaxed);
    return n;
}

/* /hashes: every tensor in model.gguf's order, its xxh64 and sha256 lines
 * (digests already known are reused, those computed are kept), then the
 * model's: the digests of all tensors' bytes in that order.  0 or an
 * errno. */
static int hashes_compute(struct mount *fs, const struct state *st, struct text **out)
{
    struct digests *dg = fs->digests;
    uint8_t *buf = malloc(DIGEST_PIECE);
    struct core_hash *t = core_hash_new(), *m = core_hash_new();
    struct gguf_buf b = { 0 };
    int err = !buf || !t || !m ? ENOMEM : core_hash_reset(m);
    for (uint64_t j = 0; !err && j < st->n_tensors; j++) {
        struct tdig *d = atomic_load(&dg->dig[j]);
        struct hashing h = { d ? NULL : t, m };
        if (!d)
            err = core_hash_reset(t);
        if (!err)
            err = hash_tensor(fs, st, j, buf, &h);
        if (!err && !d && !(d = tdig_publish(dg, j, t)))
            err = ENOMEM;
        if (err)
            break;
        const char *name;
        size_t len;
        tensor_name(st, j, &name, &len);
        core_hash_line(&b, "xxh64", d->xxh.data, d->xxh.len, name, len);
        core_hash_line(&b, "sha256", d->sha.data, d->sha.len, name, len);
    }
    if (!err) {
        char xh[CORE_XXH64_HEX], sh[CORE_SHA256_HEX];
        err = core_hash_hex(m, xh, sh);
        if (!err) {
            core_hash_line(&b, "xxh64", xh, sizeof xh, NULL, 0);
            core_hash_line(&b, "sha256", sh, sizeof sh, NULL, 0);
        }
    }
    core_hash_free(t);
    core_hash_free(m);
    free(buf);
    if (!err && b.len != core_hashes_size(st))
        err = b.oom ? ENOMEM : EIO;       /* the size stat gave: cannot differ */
    if (err) {
        gguf_buf_free(&b);
        return err;
    }
    return (*out = text_of(&b)) ? 0 : ENOMEM;
}

/* ---- the files ------------------------------------------------------------ */

/* The text of tensor idx's file tf if known, else NULL. */
static const struct text *known(const struct digests *dg, uint64_t idx, enum tensor_file tf)
{
    if (tf == TF_STATS)
        return atomic_load_explicit(&dg->stats[idx], memory_order_acquire);
    struct tdig *d = atomic_load_explicit(&dg->dig[idx], memory_order_acquire);
    return !d ? NULL : tf == TF_XXH64 ? &d->xxh : &d->sha;
}

const struct text *core_tensor_digest(struct state *st, uint64_t idx, enum tensor_file tf,
                                      int *err)
{
    struct mount *fs = st->fs;
    struct digests *dg = fs->digests;
    const struct text *t = known(dg, idx, tf);
    if (t)
        return t;
    if (tf == TF_STATS) {
        struct text *nt = NULL;
        *err = stats_compute(fs, st, idx, &nt);
        return *err ? NULL : publish_text(&dg->stats[idx], nt);
    }
    *err = dig_compute(fs, st, idx);
    return *err ? NULL : known(dg, idx, tf);
}

const struct text *core_hashes(struct state *st, int *err)
{
    struct digests *dg = st->fs->digests;
    struct text *t = atomic_load_explicit(&dg->hashes, memory_order_acquire);
    if (t)
        return t;
    /* one computation at a time: a second reader waits for the first's */
    pthread_mutex_lock(&dg->hashes_mu);
    *err = 0;
    if (!(t = atomic_load(&dg->hashes)) && !(*err = hashes_compute(st->fs, st, &t)))
        t = publish_text(&dg->hashes, t);
    pthread_mutex_unlock(&dg->hashes_mu);
    return *err ? NULL : t;
}

/* core/nodes.c — the inode layout (see core/mount.h): what an inode is, its
 * attributes, and the small texts the tree shows. */
#include "core/nodes.h"
#include "core/digests.h"
#include "core/model.h"
#include "core/state.h"
#include "core/tensor.h"
#include "cache/diskcache.h"

#include "cache/blocksrc.h"
#include "remote/source.h"

#include "gguf/fstats.h"
#include "gguf/types.h"
#include "gguf/value.h"
#include "kernels/dequant.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct root_entry core_root[] = {
    { "info", K_INFO },
    { "meta", K_META },
    { "tensors", K_TENSORS },
    { "stats", K_STATS },
    { "model.gguf", K_MODEL },
    { "info.json", K_INFO_JSON },
    { "model.safetensors", K_SAFETENSORS },
    { "hashes", K_HASHES },
    { "log", K_LOG },
    { "hf", K_HF },
};
const unsigned core_root_n = sizeof core_root / sizeof *core_root;

bool core_root_has(const struct state *st, unsigned e)
{
    return core_root[e].kind != K_HF || st->hf;
}

const char *const core_tensor_files[TF_COUNT] = { NULL, "raw", "f32", "type", "shape",
                                                   "raw.npy", "f32.npy", "stats", "xxh64",
                                                   "sha256" };

uint64_t core_root_ino(const struct state *st, unsigned e)
{
    switch (core_root[e].kind) {
    case K_INFO: return INO_INFO(st->gen);
    case K_MODEL: return INO_MODEL(st->gen);
    case K_INFO_JSON: return INO_INFO_JSON(st->gen);
    case K_SAFETENSORS: return INO_SAFETENSORS(st->gen);
    case K_HASHES: return INO_HASHES(st->gen);
    case K_META: return INO_META;
    case K_TENSORS: return INO_TENSORS;
    case K_LOG: return INO_LOG;
    case K_HF: return INO_HF;
    default: return INO_STATS;
    }
}

uint64_t core_tensor_ino(uint64_t idx, enum tensor_file tf)
{
    return TENSOR_BASE + idx * TENSOR_STRIDE + tf;
}

struct node core_classify(const struct state *st, uint64_t ino)
{
    struct node n = { K_NONE, 0, TF_DIR, 0 };
    switch (ino) {
    case INO_ROOT: n.kind = K_ROOT; return n;
    case INO_META: n.kind = K_META; return n;
    case INO_TENSORS: n.kind = K_TENSORS; return n;
    case INO_STATS: n.kind = K_STATS; return n;
    case INO_LOG: n.kind = K_LOG; return n;
    case INO_HF: n.kind = st->hf ? K_HF : K_NONE; return n;
    }
    if (ino >= VERSION_BASE && ino < TENSOR_BASE) {
        /* hashes: the same bytes in every version, so any version's */
        /* every slot from VS_HF_CONFIG on is a file of hf/ */
        static const enum kind k[VS_HF_CONFIG] = { K_INFO, K_MODEL, K_INFO_JSON, K_HASHES,
                                                   K_SAFETENSORS };
        uint64_t slot = VERSION_SLOT(ino);
        n.kind = slot < VS_HF_CONFIG ? k[slot] : K_HF_FILE;
        n.gen = (ino - VERSION_BASE) / VERSION_STRIDE;
        n.idx = slot;
        /* hf/'s files exist in a version that has hf/ and them (the
         * version's own state says: of another version, checked where it
         * is found, core_hf_size and open) */
        if (n.kind == K_HF_FILE && n.gen == st->gen && !core_hf_has(st, (enum version_slot)slot))
            n.kind = K_NONE;
    } else if (ino >= KV_BASE && ino < VERSION_BASE) {
        uint64_t id = ino - KV_BASE;
        if (id < st->n_ids && st->id_kv[id] >= 0) {
            n.kind = K_KV;
            n.idx = (uint64_t)st->id_kv[id];
        }
    } else if (ino >= TENSOR_BASE && (ino - TENSOR_BASE) / TENSOR_STRIDE < st->n_tensors) {
        uint64_t rel = ino - TENSOR_BASE;
        n.idx = rel / TENSOR_STRIDE;
        n.tf = (enum tensor_file)(rel % TENSOR_STRIDE);
        if (n.tf < TF_COUNT && core_tensor_has(st, n.idx, n.tf))
            n.kind = K_TENSOR;
    }
    return n;
}

struct state *core_version(struct state *st, uint64_t gen)
{
    return gen == st->gen ? core_state_ref(st) : core_state_by_gen(st->fs, gen);
}

/* ---- texts ------------------------------------------------------------------ */

const struct text *core_kv_text(struct state *st, uint64_t i)
{
    struct text *t = atomic_load_explicit(&st->kv_text[i], memory_order_acquire);
    if (t)
        return t;
    struct gguf_buf b = { 0 };
    if (gguf_render_kv(st_meta(st), &st_meta(st)->kv[i], &b) != GGUF_OK ||
        !(t = malloc(sizeof *t))) {
        gguf_buf_free(&b);
        return NULL;
    }
    t->data = b.data;
    t->len = b.len;
    struct text *expected = NULL;
    if (!atomic_compare_exchange_strong(&st->kv_text[i], &expected, t)) {
        free(t->data);       /* another thread won the race: use its copy */
        free(t);
        t = expected;
    }
    return t;
}

size_t core_tensor_text(const struct state *st, uint64_t idx, enum tensor_file tf,
                        char *buf, size_t cap)
{
    const struct gguf_tensor *t = st->tens[idx].t;
    int n;
    if (cap == 0)
        return 0;
    if (tf == TF_TYPE) {
        n = snprintf(buf, cap, "%s\n", ggml_type_name_of(t->type));
    } else {
        /* numpy order: ne reversed; a short buffer stops it (snprintf
         * counts what did not fit: past cap, buf + n is outside buf) */
        n = 0;
        buf[0] = '\0';
        for (unsigned d = t->n_dims; d-- > 0 && (size_t)n < cap;)
            n += snprintf(buf + n, cap - (size_t)n, "%s%llu", n ? " " : "",
                          (unsigned long long)t->ne[d]);
        if ((size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "\n");
    }
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

size_t core_stats_text(struct mount *fs, char *buf, size_t cap)
{
    if (cap == 0)
        return 0;
    struct cache_stats cs;
    cache_get_stats(fs->cache, &cs);
    typedef unsigned long long ull;
    int n = snprintf(buf, cap,
                     "hits %llu\nmisses %llu\nevictions %llu\nfill_errors %llu\n"
                     "waits %llu\nprefetched %llu\nprefetch_wasted %llu\n"
                     "chunks_held %llu\nbytes_held %llu\ncapacity %llu\n"
                     "chunk_bytes %llu\nkernel_level %s\n"
                     "edits_in_place %llu\nedits_cloned %llu\nedits_copied %llu\n"
                     "underneath_changed %d\nunderneath_replaced %d\n"
                     "underneath_eio %llu\nunderneath_refused %llu\n"
                     "underneath_followed %llu\nnotes_lost %llu\n",
                     (ull)cs.hits, (ull)cs.misses, (ull)cs.evictions, (ull)cs.fill_errors,
                     (ull)cs.waits, (ull)cs.prefetched, (ull)cs.prefetch_wasted,
                     (ull)cs.blocks_held, (ull)cs.bytes_held, (ull)cs.capacity,
                     (ull)fs->chunk_bytes, kern_dequant_level(),
                     (ull)atomic_load(&fs->edits_in_place), (ull)atomic_load(&fs->edits_cloned),
                     (ull)atomic_load(&fs->edits_copied),
                     !!(atomic_load(&fs->under) & UNDER_CHANGED),
                     !!(atomic_load(&fs->under) & UNDER_REPLACED),
                     (ull)atomic_load(&fs->under_eio), (ull)atomic_load(&fs->under_refused),
                     (ull)atomic_load(&fs->under_followed),
                     (ull)atomic_load(&fs->notes_lost));
    static const char *const kind[RK_COUNT] = { "raw", "f32", "model", "raw_npy", "f32_npy",
                                                "info_json", "safetensors", "tensor_stats",
                                                "xxh64", "sha256", "hashes", "hf" };
    for (int k = 0; k < RK_COUNT && n >= 0 && (size_t)n < cap; k++) {
        int m = snprintf(buf + n, cap - (size_t)n,
                         "reads_%s %llu\nread_bytes_%s %llu\nread_max_%s %llu\n",
                         kind[k], (ull)atomic_load(&fs->reads[k].n),
                         kind[k], (ull)atomic_load(&fs->reads[k].bytes),
                         kind[k], (ull)atomic_load(&fs->reads[k].max));
        n = m < 0 ? m : n + m;
    }
    if (n >= 0 && (size_t)n < cap && fs->remote) {
        /* every shard's HTTP counters, summed: the shards as opened at
         * mount (an overlay's base; without one, no edit swaps fs->st, so
         * it is read without the state lock: a read of stats holds a
         * reference only) */
        struct remote_stats sum = { 0 }, rs;
        const struct gguf_split *m = fs->base ? fs->base : fs->st->model;
        for (unsigned i = 0; i < m->n; i++) {
            struct remote *r = core_remote(m->shards[i].src, fs->remote);
            if (!r)
                continue;
            remote_get_stats(r, &rs);
            sum.requests += rs.requests;
            sum.bytes += rs.bytes;
            sum.retries += rs.retries;
            sum.redirects += rs.redirects;
            sum.reresolves += rs.reresolves;
            sum.errors += rs.errors;
        }
        n += snprintf(buf + n, cap - (size_t)n,
                      "remote_requests %llu\nremote_bytes %llu\nremote_retries %llu\n"
                      "remote_redirects %llu\nremote_reresolves %llu\nremote_errors %llu\n",
                      (unsigned long long)sum.requests, (unsigned long long)sum.bytes,
                      (unsigned long long)sum.retries, (unsigned long long)sum.redirects,
                      (unsigned long long)sum.reresolves, (unsigned long long)sum.errors);
    }
    if (n >= 0 && (size_t)n < cap && fs->rcache) {
        /* the block cache of remote bytes (blocksrc.h) */
        struct rcache_stats rs;
        rcache_get_stats(fs->rcache, &rs);
        n += snprintf(buf + n, cap - (size_t)n,
                      "remote_cache_hits %llu\nremote_cache_misses %llu\n"
                      "remote_prefetched %llu\nremote_prefetch_wasted %llu\n"
                      "remote_cache_fill_errors %llu\n"
                      "remote_cache_bytes_held %llu\nremote_cache_capacity %llu\n"
                      "remote_block_bytes %llu\n",
                      (ull)rs.hits, (ull)rs.misses, (ull)rs.prefetched,
                      (ull)rs.prefetch_wasted, (ull)rs.fill_errors,
                      (ull)rs.bytes_held, (ull)rs.capacity, (ull)rs.block_bytes);
    }
    if (n >= 0 && (size_t)n < cap && fs->n_dcache) {
        /* the disk cache (-o cache_dir): every shard's, summed */
        struct dcache_stats sum = { 0 }, ds;
        unsigned open = 0;
        for (unsigned i = 0; i < fs->n_dcache; i++) {
            if (!fs->dcache[i])
                continue;
            open++;
            dcache_get_stats(fs->dcache[i], &ds);
            sum.hits += ds.hits;
            sum.misses += ds.misses;
            sum.written += ds.written;
            sum.blocks += ds.blocks;
            sum.rejected += ds.rejected;
            sum.evicted += ds.evicted;
            sum.bytes_used += ds.bytes_used;
        }
        struct rcache_stats rs = { 0 };
        if (fs->rcache)
            rcache_get_stats(fs->rcache, &rs);
        if (open)
            n += snprintf(buf + n, cap - (size_t)n,
                          "disk_cache_hits %llu\ndisk_cache_misses %llu\n"
                          "disk_cache_stored %llu\ndisk_cache_rejected %llu\n"
                          "disk_cache_evicted %llu\ndisk_cache_bytes %llu\n"
                          "disk_cache_blocks %llu\ndisk_cache_spliced %llu\n",
                          (unsigned long long)sum.hits, (unsigned long long)sum.misses,
                          (unsigned long long)sum.written, (unsigned long long)sum.rejected,
                          (unsigned long long)sum.evicted, (unsigned long long)sum.bytes_used,
                          (unsigned long long)sum.blocks, (unsigned long long)rs.disk_spans);
    }
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

/* ---- attributes ------------------------------------------------------------- */

static void fill_common(const struct state *st, struct stat *out, uint64_t ino)
{
    memset(out, 0, sizeof *out);
    out->st_ino = ino;
    out->st_uid = st->model_st.st_uid;
    out->st_gid = st->model_st.st_gid;
    out->st_atim = st->model_st.st_atim;
    out->st_mtim = st->model_st.st_mtim;
    out->st_ctim = st->model_st.st_ctim;
    out->st_blksize = 1 << 20;
}

/* Permission bits, from the model file's own (README "The tree"; in full:
 * doc/DETAILS.md "The tree"): its read bits on every file, and on every
 * directory with x where r is set;
 * its write bits on meta/ and meta/'s files, unless edits are refused
 * whatever the caller (-o ro, a model gguffs could not open for writing at
 * mount).  The mount's default_permissions makes the kernel check them, so
 * meta/ of a model its group may write is writable by that group (with
 * allow_other).  Owner and times are the model's too (fill_common). */
mode_t core_perm(const struct state *st, enum perm_of of)
{
    const struct mount *fs = st->fs;
    mode_t m = st->model_st.st_mode & 0777;
    mode_t r = m & 0444, x = r >> 2;
    mode_t w = fs->read_only || fs->write_err ? 0 : m & 0222;
    switch (of) {
    case PERM_FILE: return r;
    case PERM_DIR: return r | x;
    case PERM_META_FILE: return r | w;
    default: return r | x | w;        /* PERM_META_DIR */
    }
}

void core_stat_pending(const struct state *st, uint64_t ino, size_t size, struct stat *out)
{
    fill_common(st, out, ino);
    out->st_mode = S_IFREG | core_perm(st, PERM_META_FILE);
    out->st_nlink = 1;
    out->st_size = (off_t)size;
}

static void stat_dir(struct stat *out, mode_t perm, uint64_t subdirs)
{
    out->st_mode = S_IFDIR | perm;
    out->st_nlink = 2 + (subdirs < 1u << 30 ? subdirs : 1u << 30);
}

static void stat_file(struct stat *out, mode_t perm, uint64_t size)
{
    out->st_mode = S_IFREG | perm;
    out->st_nlink = 1;
    out->st_size = (off_t)size;
}

int core_stat(struct mount *fs, struct state *st, uint64_t ino, struct stat *out)
{
    struct node n = core_classify(st, ino);
    fill_common(st, out, ino);
    char buf[STATS_TEXT_MAX];
    const mode_t ro = core_perm(st, PERM_FILE), dir = core_perm(st, PERM_DIR);
    switch (n.kind) {
    case K_NONE:
        return ENOENT;
    case K_ROOT:
        stat_dir(out, dir, 2);
        break;
    case K_META:
        stat_dir(out, core_perm(st, PERM_META_DIR), 0);
        break;
    case K_TENSORS:
        stat_dir(out, dir, st->n_tensors);
        break;
    case K_INFO:
    case K_MODEL:
    case K_INFO_JSON: {
        struct state *v = core_version(st, n.gen);
        if (!v)
            return ESTALE;
        const struct text *j = NULL;
        int je = n.kind == K_INFO_JSON ? core_info_json(v, &j) : 0;
        if (je) {
            core_state_put(v);
            return je;
        }
        stat_file(out, ro, n.kind == K_INFO ? v->info.len : j ? j->len : v->model_size);
        core_state_put(v);
        break;
    }
    case K_SAFETENSORS: {
        struct state *v = core_version(st, n.gen);
        if (!v)
            return ESTALE;
        const struct gguf_st_layout *l = NULL;
        int e = core_safetensors(v, &l);
        if (!e)
            stat_file(out, ro, l->size);
        core_state_put(v);
        if (e)
            return e;
        break;
    }
    case K_HF:
        stat_dir(out, dir, 0);
        break;
    case K_HF_FILE: {
        struct state *v = core_version(st, n.gen);
        if (!v)
            return ESTALE;
        uint64_t size = 0;
        int e = core_hf_size(v, (enum version_slot)n.idx, &size);
        core_state_put(v);
        if (e)
            return e;
        stat_file(out, ro, size);
        break;
    }
    case K_STATS:
        stat_file(out, ro, core_stats_text(fs, buf, sizeof buf));
        break;
    case K_HASHES:
        stat_file(out, ro, core_hashes_size(st));
        break;
    case K_LOG:
        stat_file(out, ro, fs->log_size ? fs->log_size() : 0);
        break;
    case K_KV: {
        const struct text *t = core_kv_text(st, n.idx);
        if (!t)
            return ENOMEM;
        stat_file(out, core_perm(st, PERM_META_FILE), t->len);
        break;
    }
    case K_TENSOR: {
        const struct gguf_tensor *t = st->tens[n.idx].t;
        if (n.tf == TF_DIR)
            stat_dir(out, dir, 0);
        else if (n.tf == TF_RAW)
            stat_file(out, ro, t->nbytes);
        else if (n.tf == TF_F32)
            stat_file(out, ro, t->n_elems * 4);
        else if (n.tf == TF_RAW_NPY || n.tf == TF_F32_NPY)
            stat_file(out, ro, core_npy_header(st, n.idx, n.tf, buf) +
                               (n.tf == TF_RAW_NPY ? t->nbytes : t->n_elems * 4));
        else if (n.tf == TF_XXH64 || n.tf == TF_SHA256)
            stat_file(out, ro, n.tf == TF_XXH64 ? 17 : 65);    /* hex digits, "\n" */
        else if (n.tf == TF_STATS)
            stat_file(out, ro, GGUF_FSTATS_TEXT_LEN);   /* fixed width: nothing computed */
        else
            stat_file(out, ro, core_tensor_text(st, n.idx, n.tf, buf, sizeof buf));
        break;
    }
    }
    out->st_blocks = (out->st_size + 511) / 512;
    return 0;
}

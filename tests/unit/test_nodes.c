/*
 * tests/unit/test_nodes.c — core/nodes.c without FUSE: what every inode of
 * the tree is (core_classify, the root's entries, tensors' files, meta/ keys
 * by id, a version's files and hf/'s), the attributes core_stat gives
 * (sizes equal to the texts the reads serve, the model file's owner, times
 * and modes, ESTALE for a version that is gone), a meta/ value rendered
 * once and kept (the same copy for every caller, and under threads; NULL
 * out of memory), and the type, shape and stats texts (every counter named;
 * a short buffer cut short, never overrun).
 *
 * A struct mount is set up as fs/main.c and fs/mount_open.c do (locks,
 * lists, key ids, the first state from core_open_model + core_state_new, a
 * block cache, the digests' table, the log's size hook), over small GGUF
 * files made with gb.h: keys of every type, tensors of f32, f16, q8_0,
 * q5_0, i8 and an unknown type, in both byte orders, and a split model.
 *
 * Wrapped (-Wl,--wrap): gguf_render_kv (to lose the race of rendering a
 * value to another thread, deterministically, or to run out of memory just
 * after it), remote_source_remote, remote_get_stats and dcache_get_stats
 * (a remote model's counters and its disk caches', faked).  Allocations
 * fail above mem_cap (tests/unit/work.h).
 *
 * Environment: TMPDIR.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/blocksrc.h"
#include "cache/cache.h"
#include "cache/diskcache.h"
#include "core/digests.h"
#include "core/model.h"
#include "core/nodes.h"
#include "core/state.h"
#include "core/tensor.h"
#include "gguf/fstats.h"
#include "gguf/split.h"
#include "gguf/types.h"
#include "gguf/value.h"
#include "kernels/dequant.h"
#include "remote/http.h"
#include "remote/source.h"

#include "gb.h"
#include "tmpfiles.h"
#include "work.h"

/* ---- models --------------------------------------------------------------------------- */

/* Key/value records beyond gb.h's: the key and its type, then the value. */
static void gb_key(struct gb *b, const char *k, uint32_t type)
{
    gb_str(b, k);
    gb_u32(b, type);
}

static void gb_f32(struct gb *b, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    gb_u32(b, v);
}

static void gb_f64(struct gb *b, double f)
{
    uint64_t v;
    memcpy(&v, &f, 8);
    gb_u64(b, v);
}

static void gb_u16(struct gb *b, uint16_t v)
{
    if (b->be)
        v = __builtin_bswap16(v);
    gb_put(b, &v, 2);
}

/* A meta/ key and the text its file shows (gguf/value.h). */
struct kvcase {
    const char *key, *text;
};

/* The keys of the main model, in the file's order; what each renders as. */
static const struct kvcase main_keys[] = {
    { "general.architecture", "llama\n" },
    { "llama.block_count", "1\n" },
    { "test.u8", "200\n" },
    { "test.i8", "-5\n" },
    { "test.u16", "60000\n" },
    { "test.i16", "-300\n" },
    { "test.i32", "-70000\n" },
    { "test.f32", "0.5\n" },
    { "test.bool", "true\n" },
    { "test.u64", "1099511627776\n" },
    { "test.i64", "-1\n" },
    { "test.f64", "0.25\n" },
    { "test.str", "hello\n" },
    { "test.arr_i32", "1\n2\n3\n" },
    { "test.arr_str", "a\nb\\nc\n" },
    { "test.empty", "" },
};
#define MAIN_KEYS (sizeof main_keys / sizeof *main_keys)

/* The tensors of the main model: ne, type, bytes (offsets: 64 apart). */
struct tcase {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
    uint64_t nbytes;
    const char *type_text, *shape_text;
};

#define TYPE_UNKNOWN 57u
static const struct tcase main_tensors[] = {
    { "token_embd.weight", 2, { 4, 2 }, GGML_T_F32, 32, "f32\n", "2 4\n" },
    { "blk.0.attn_norm.weight", 1, { 4 }, GGML_T_F16, 8, "f16\n", "4\n" },
    { "blk.0.ffn_up.weight", 2, { 32, 1 }, GGML_T_Q8_0, 34, "q8_0\n", "1 32\n" },
    { "q5.weight", 1, { 32 }, GGML_T_Q5_0, 22, "q5_0\n", "32\n" },
    { "ints", 4, { 1, 2, 1, 2 }, GGML_T_I8, 4, "i8\n", "2 1 2 1\n" },
    { "odd", 1, { 8 }, TYPE_UNKNOWN, 8, "type_57\n", "8\n" },
};
#define MAIN_TENSORS (sizeof main_tensors / sizeof *main_tensors)
enum { T_F32, T_F16, T_Q8_0, T_Q5_0, T_I8, T_ODD };

/* The main model: a llama (hf/ can show it) with main_keys and
 * main_tensors, little- or big-endian. */
static struct gb main_bytes(bool be)
{
    struct gb b = { .be = be };
    gb_header(&b, 3, MAIN_TENSORS, MAIN_KEYS);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.block_count", 1);
    gb_key(&b, "test.u8", GGUF_U8);
    gb_u8(&b, 200);
    gb_key(&b, "test.i8", GGUF_I8);
    gb_u8(&b, (uint8_t)-5);
    gb_key(&b, "test.u16", GGUF_U16);
    gb_u16(&b, 60000);
    gb_key(&b, "test.i16", GGUF_I16);
    gb_u16(&b, (uint16_t)-300);
    gb_key(&b, "test.i32", GGUF_I32);
    gb_u32(&b, (uint32_t)-70000);
    gb_key(&b, "test.f32", GGUF_F32);
    gb_f32(&b, 0.5f);
    gb_key(&b, "test.bool", GGUF_BOOL);
    gb_u8(&b, 1);
    gb_key(&b, "test.u64", GGUF_U64);
    gb_u64(&b, 1ull << 40);
    gb_key(&b, "test.i64", GGUF_I64);
    gb_u64(&b, UINT64_MAX);
    gb_key(&b, "test.f64", GGUF_F64);
    gb_f64(&b, 0.25);
    gb_kv_str(&b, "test.str", "hello");
    gb_key(&b, "test.arr_i32", GGUF_ARRAY);
    gb_u32(&b, GGUF_I32);
    gb_count(&b, 3);
    for (uint32_t i = 1; i <= 3; i++)
        gb_u32(&b, i);
    gb_key(&b, "test.arr_str", GGUF_ARRAY);
    gb_u32(&b, GGUF_STRING);
    gb_count(&b, 2);
    gb_str(&b, "a");
    gb_str(&b, "b\nc");
    gb_key(&b, "test.empty", GGUF_ARRAY);
    gb_u32(&b, GGUF_U8);
    gb_count(&b, 0);
    for (unsigned j = 0; j < MAIN_TENSORS; j++) {
        const struct tcase *t = &main_tensors[j];
        gb_tensor(&b, t->name, t->n_dims, t->ne, t->type, 64 * j);
    }
    gb_pad(&b, 32);
    for (unsigned j = 0; j < MAIN_TENSORS; j++) {
        size_t start = b.len;
        for (uint64_t i = 0; i < main_tensors[j].nbytes; i++)
            gb_u8(&b, (uint8_t)(j * 16 + i));
        if (j + 1 < MAIN_TENSORS)
            while (b.len - start < 64)
                gb_u8(&b, 0);
    }
    return b;
}

/* Another version of the main model: an architecture hf/ cannot show, a
 * value changed, keys gone and one added; one tensor. */
static struct gb other_bytes(void)
{
    struct gb b = { 0 };
    gb_header(&b, 3, 1, 3);
    gb_kv_str(&b, "general.architecture", "foo");
    gb_kv_str(&b, "test.str", "a longer value than before");
    gb_kv_u32(&b, "new.key", 7);
    uint64_t ne[1] = { 4 };
    gb_tensor(&b, "w", 1, ne, GGML_T_F32, 0);
    gb_pad(&b, 32);
    for (unsigned i = 0; i < 16; i++)
        gb_u8(&b, (uint8_t)i);
    return b;
}

/* Writes b (taken) to name in the test's directory; its path into path
 * (tpath's are overwritten by later calls). */
static void write_model(char path[static 4200], const char *name, struct gb b)
{
    snprintf(path, 4200, "%s", tpath(name));
    put_file(path, b.p, b.len);
    free(b.p);
}

/* ---- a mount, as fs/main.c and fs/mount_open.c set it up ----------------------------- */

static int no_fill(void *ctx, void *call, uint64_t a, uint64_t b, void *dst, size_t len)
{
    (void)ctx, (void)call, (void)a, (void)b;
    memset(dst, 0, len);
    return 0;
}

static size_t log_bytes;
static size_t fake_log_size(void)
{
    return log_bytes;
}

static void mount_init(struct mount *fs, bool read_only)
{
    core_mount_init(fs);
    fs->model_path = "model.gguf";
    fs->read_only = read_only;
    fs->req_bytes = fs->chunk_bytes = 4096;
    fs->log_size = fake_log_size;
    fs->cache = cache_new(fs->chunk_bytes, 1 << 20, no_fill, fs);
    assert_non_null(fs->cache);
}

/* Version gen of the model at path, with a reference; the first one
 * becomes fs->st, with the digests' table. */
static struct state *mount_version(struct mount *fs, const char *path, uint64_t gen)
{
    struct gguf_split *m;
    struct gguf_diag d;
    if (core_open_model(path, fs->read_only, false, NULL, NULL, NULL, 0, &m, &d) != GGUF_OK)
        fail_msg("%s: %s", path, d.msg);
    struct state *st;
    assert_int_equal(core_state_new(fs, m, gen, &st), 0);
    if (!fs->st) {
        fs->st = st;
        assert_int_equal(core_digests_new(fs, st->n_tensors), 0);
    }
    return st;
}

/* Ends the mount: every version but fs->st must have been put. */
static void mount_fini(struct mount *fs)
{
    core_digests_free(fs);
    cache_free(fs->cache);
    core_state_put(fs->st);
    assert_true(glist_empty(&fs->states));
    core_key_ids_free(&fs->ids);
    core_mount_fini(fs);
}

/* ---- wrapped calls -------------------------------------------------------------------- */

/* gguf_render_kv: after rendering, race_text is published as key race_i's
 * text of race_st (another thread won the race), or memory runs out
 * (starve_after). */
static struct state *race_st;
static uint64_t race_i;
static struct text *race_text;
static bool starve_after;

enum gguf_err __real_gguf_render_kv(const struct gguf_file *f, const struct gguf_kv *kv,
                                    struct gguf_buf *out);
enum gguf_err __wrap_gguf_render_kv(const struct gguf_file *f, const struct gguf_kv *kv,
                                    struct gguf_buf *out);
enum gguf_err __wrap_gguf_render_kv(const struct gguf_file *f, const struct gguf_kv *kv,
                                    struct gguf_buf *out)
{
    enum gguf_err e = __real_gguf_render_kv(f, kv, out);
    if (race_st) {
        atomic_store(&race_st->kv_text[race_i], race_text);
        race_st = NULL;
    }
    if (starve_after)
        mem_cap = 0;
    return e;
}

/* A source's remote: the source itself stands for it, but for no_remote
 * (a shard without one). */
static const struct gguf_source *no_remote;
struct remote *__wrap_remote_source_remote(struct gguf_source *src);
struct remote *__wrap_remote_source_remote(struct gguf_source *src)
{
    return src == no_remote ? NULL : (struct remote *)src;
}

void __wrap_remote_get_stats(const struct remote *r, struct remote_stats *out);
void __wrap_remote_get_stats(const struct remote *r, struct remote_stats *out)
{
    (void)r;
    memset(out, 0, sizeof *out);
    out->requests = 1;
    out->bytes = 2;
    out->retries = 3;
    out->redirects = 4;
    out->reresolves = 5;
    out->errors = 6;
}

void __wrap_dcache_get_stats(struct dcache *dc, struct dcache_stats *out);
void __wrap_dcache_get_stats(struct dcache *dc, struct dcache_stats *out)
{
    (void)dc;
    memset(out, 0, sizeof *out);
    out->hits = 10;
    out->misses = 20;
    out->written = 30;
    out->rejected = 40;
    out->evicted = 50;
    out->bytes_used = 60;
    out->blocks = 70;
}

/* ---- helpers -------------------------------------------------------------------------- */

static struct node classify(const struct state *st, uint64_t ino)
{
    return core_classify(st, ino);
}

static void assert_none(const struct state *st, uint64_t ino)
{
    struct node n = classify(st, ino);
    if (n.kind != K_NONE)
        fail_msg("inode %#llx is kind %d, not K_NONE", (unsigned long long)ino, n.kind);
}

static int64_t key_index(const struct state *st, const char *name)
{
    return core_ntab_find(&st->meta_names, name);
}

static uint64_t key_ino(const struct state *st, const char *name)
{
    int64_t i = key_index(st, name);
    assert_true(i >= 0);
    return KV_BASE + st->kv_id[i];
}

static unsigned root_entry(const char *name)
{
    for (unsigned e = 0; e < core_root_n; e++)
        if (!strcmp(core_root[e].name, name))
            return e;
    fail_msg("no root entry %s", name);
    return 0;
}

/* The value of counter name in a stats text, or -1 when absent. */
static long long counter(const char *text, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : p)
        if (!strncmp(p, name, nl) && p[nl] == ' ')
            return strtoll(p + nl + 1, NULL, 10);
    return -1;
}

/* A regular file of size bytes and permission bits perm. */
static void assert_file(const struct stat *s, mode_t perm, uint64_t size)
{
    assert_int_equal(s->st_mode, S_IFREG | perm);
    assert_int_equal(s->st_nlink, 1);
    assert_int_equal(s->st_size, (off_t)size);
    assert_int_equal(s->st_blocks, (blkcnt_t)((size + 511) / 512));
}

static void stat_ok(struct mount *fs, struct state *st, uint64_t ino, struct stat *s)
{
    int e = core_stat(fs, st, ino, s);
    if (e)
        fail_msg("core_stat of %#llx: %s", (unsigned long long)ino, strerror(e));
    assert_int_equal(s->st_ino, ino);
}

/* ---- what an inode is ----------------------------------------------------------------- */

/* The root's entries, their names and inodes; tensors' file names. */
static void root_entries(void **state)
{
    (void)state;
    static const char *const names[] = { "info", "meta", "tensors", "stats", "model.gguf",
                                         "info.json", "model.safetensors", "hashes", "log",
                                         "hf" };
    assert_int_equal(core_root_n, sizeof names / sizeof *names);
    for (unsigned e = 0; e < core_root_n; e++)
        assert_string_equal(core_root[e].name, names[e]);
    static const char *const tfiles[TF_COUNT] = { NULL, "raw", "f32", "type", "shape",
                                                  "raw.npy", "f32.npy", "stats", "xxh64",
                                                  "sha256" };
    assert_null(core_tensor_files[TF_DIR]);
    for (int tf = 1; tf < TF_COUNT; tf++)
        assert_string_equal(core_tensor_files[tf], tfiles[tf]);
    for (uint64_t j = 0; j < 3; j++)
        for (int tf = 0; tf < TF_COUNT; tf++)
            assert_int_equal(core_tensor_ino(j, (enum tensor_file)tf),
                             TENSOR_BASE + j * TENSOR_STRIDE + (uint64_t)tf);

    struct mount fs;
    mount_init(&fs, false);
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    struct state *st0 = mount_version(&fs, path, 0);
    struct state *st3 = mount_version(&fs, path, 3);    /* a later version of it */
    for (int v = 0; v < 2; v++) {
        struct state *st = v ? st3 : st0;
        assert_non_null(st->hf);
        const uint64_t want[] = { INO_INFO(st->gen), INO_META, INO_TENSORS, INO_STATS,
                                  INO_MODEL(st->gen), INO_INFO_JSON(st->gen),
                                  INO_SAFETENSORS(st->gen), INO_HASHES(st->gen), INO_LOG,
                                  INO_HF };
        for (unsigned e = 0; e < core_root_n; e++) {
            assert_true(core_root_has(st, e));
            uint64_t ino = core_root_ino(st, e);
            assert_int_equal(ino, want[e]);
            struct node n = classify(st, ino);
            assert_int_equal(n.kind, core_root[e].kind);
            if (ino >= VERSION_BASE)
                assert_int_equal(n.gen, st->gen);
        }
    }
    core_state_put(st3);
    mount_fini(&fs);
    unlink(path);
}

/* Every inode of the tree classifies back to what it is; every other
 * number is K_NONE. */
static void classify_tree(void **state)
{
    (void)state;
    struct mount fs;
    mount_init(&fs, false);
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    struct state *st = mount_version(&fs, path, 0);

    assert_int_equal(classify(st, INO_ROOT).kind, K_ROOT);
    assert_int_equal(classify(st, INO_META).kind, K_META);
    assert_int_equal(classify(st, INO_TENSORS).kind, K_TENSORS);
    assert_int_equal(classify(st, INO_STATS).kind, K_STATS);
    assert_int_equal(classify(st, INO_LOG).kind, K_LOG);
    assert_int_equal(classify(st, INO_HF).kind, K_HF);
    /* the numbers between the fixed ones and the keys */
    const uint64_t holes[] = { 0, 2, 8, 9, 15 };
    for (unsigned i = 0; i < sizeof holes / sizeof *holes; i++)
        assert_none(st, holes[i]);

    /* meta/: every key by its id, and its index */
    assert_int_equal(st_meta(st)->n_kv, MAIN_KEYS);
    for (unsigned i = 0; i < MAIN_KEYS; i++) {
        assert_int_equal(key_index(st, main_keys[i].key), (int64_t)i);
        struct node n = classify(st, key_ino(st, main_keys[i].key));
        assert_int_equal(n.kind, K_KV);
        assert_int_equal(n.idx, i);
    }
    assert_int_equal(st->n_ids, MAIN_KEYS);
    assert_none(st, KV_BASE + st->n_ids);           /* no such id */
    assert_none(st, VERSION_BASE - 1);

    /* tensors/: each tensor's directory and the files its type has */
    assert_int_equal(st->n_tensors, MAIN_TENSORS);
    for (uint64_t j = 0; j < MAIN_TENSORS; j++) {
        for (int tf = 0; tf < TENSOR_STRIDE; tf++) {
            uint64_t ino = TENSOR_BASE + j * TENSOR_STRIDE + (uint64_t)tf;
            struct node n = classify(st, ino);
            bool has = tf < TF_COUNT && core_tensor_has(st, j, (enum tensor_file)tf);
            assert_int_equal(n.kind, has ? K_TENSOR : K_NONE);
            if (has) {
                assert_int_equal(n.idx, j);
                assert_int_equal(n.tf, tf);
            }
        }
        /* every tensor has these */
        static const enum tensor_file always[] = { TF_DIR, TF_RAW, TF_TYPE, TF_SHAPE, TF_XXH64,
                                                   TF_SHA256 };
        for (unsigned k = 0; k < sizeof always / sizeof *always; k++)
            assert_int_equal(classify(st, core_tensor_ino(j, always[k])).kind, K_TENSOR);
    }
    /* f32 for types with a dequantizer, raw.npy for numpy's types */
    static const struct { unsigned j; enum tensor_file tf; bool has; } files[] = {
        { T_F32, TF_F32, true }, { T_F32, TF_RAW_NPY, true }, { T_F32, TF_F32_NPY, true },
        { T_F32, TF_STATS, true }, { T_F16, TF_RAW_NPY, true }, { T_F16, TF_F32, true },
        { T_Q8_0, TF_F32, true }, { T_Q8_0, TF_F32_NPY, true }, { T_Q8_0, TF_RAW_NPY, false },
        { T_Q5_0, TF_F32, true }, { T_Q5_0, TF_RAW_NPY, false }, { T_I8, TF_RAW_NPY, true },
        { T_ODD, TF_F32, false }, { T_ODD, TF_F32_NPY, false }, { T_ODD, TF_STATS, false },
        { T_ODD, TF_RAW_NPY, false }, { T_ODD, TF_RAW, true },
    };
    for (unsigned k = 0; k < sizeof files / sizeof *files; k++)
        assert_int_equal(classify(st, core_tensor_ino(files[k].j, files[k].tf)).kind,
                         files[k].has ? K_TENSOR : K_NONE);
    assert_none(st, core_tensor_ino(MAIN_TENSORS, TF_DIR));     /* past the last tensor */
    assert_none(st, core_tensor_ino(MAIN_TENSORS, TF_RAW));
    assert_none(st, UINT64_MAX);

    /* a version's files: this version's and any other's, with their gen */
    static const enum kind slot_kind[VS_HF_CONFIG] = { K_INFO, K_MODEL, K_INFO_JSON, K_HASHES,
                                                       K_SAFETENSORS };
    const uint64_t gens[] = { 0, 1, 12345 };
    for (unsigned g = 0; g < 3; g++)
        for (int s = 0; s < VERSION_STRIDE; s++) {
            struct node n = classify(st, INO_VERSION(gens[g], s));
            assert_int_equal(n.gen, gens[g]);
            assert_int_equal(n.idx, s);
            if (s < VS_HF_CONFIG)
                assert_int_equal(n.kind, slot_kind[s]);
            else if (gens[g] != st->gen)    /* checked in that version's state */
                assert_int_equal(n.kind, K_HF_FILE);
            else
                assert_int_equal(n.kind, core_hf_has(st, (enum version_slot)s) ? K_HF_FILE
                                                                                : K_NONE);
        }
    /* hf/: config.json and the rest, but no tokenizer in this model */
    assert_int_equal(classify(st, INO_HF_FILE(0, VS_HF_CONFIG)).kind, K_HF_FILE);
    assert_int_equal(classify(st, INO_HF_FILE(0, VS_HF_GENERATION)).kind, K_HF_FILE);
    assert_int_equal(classify(st, INO_HF_FILE(0, VS_HF_SAFETENSORS)).kind, K_HF_FILE);
    assert_none(st, INO_HF_FILE(0, VS_HF_TOKENIZER));
    assert_none(st, INO_HF_FILE(0, VS_HF_TOKENIZER_CONFIG));
    mount_fini(&fs);

    /* a model hf/ cannot show: no hf/, nor its files in this version */
    mount_init(&fs, false);
    char other[4200];
    write_model(other, "o.gguf", other_bytes());
    st = mount_version(&fs, other, 0);
    assert_null(st->hf);
    unsigned hf = root_entry("hf");
    assert_false(core_root_has(st, hf));
    for (unsigned e = 0; e < core_root_n; e++)
        if (e != hf)
            assert_true(core_root_has(st, e));
    assert_none(st, INO_HF);
    for (int s = VS_HF_CONFIG; s < VERSION_STRIDE; s++) {
        assert_none(st, INO_HF_FILE(0, s));
        assert_int_equal(classify(st, INO_HF_FILE(1, s)).kind, K_HF_FILE);
    }
    struct stat sb;
    assert_int_equal(core_stat(&fs, st, INO_HF, &sb), ENOENT);
    assert_int_equal(core_stat(&fs, st, INO_HF_FILE(0, VS_HF_CONFIG), &sb), ENOENT);
    mount_fini(&fs);
    unlink(path);
    unlink(other);
}

/* ---- attributes ----------------------------------------------------------------------- */

/* Sizes equal what a read serves; owner, times and modes are the model
 * file's. */
static void stat_sizes(void **state)
{
    (void)state;
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    /* a known owner, modes and times, and see them in every node */
    assert_int_equal(chmod(path, 0640), 0);
    bool owned = chown(path, 4321, 8765) == 0;
    struct timespec ts[2] = { { 1000000000, 123456789 }, { 1234567890, 987654321 } };
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);

    struct mount fs;
    mount_init(&fs, false);
    struct state *st = mount_version(&fs, path, 0);
    struct stat ms;                        /* after the open: its reads set atime */
    assert_int_equal(stat(path, &ms), 0);
    struct stat s;
    const mode_t r = 0440, rx = 0550, rw = 0640, rwx = 0750;

    /* every node: owner, times, block size */
    uint64_t inos[] = { INO_ROOT, INO_META, INO_TENSORS, INO_STATS, INO_LOG, INO_HF,
                        INO_INFO(0), INO_MODEL(0), INO_INFO_JSON(0), INO_HASHES(0),
                        INO_SAFETENSORS(0), INO_HF_FILE(0, VS_HF_CONFIG),
                        key_ino(st, "test.str"), core_tensor_ino(0, TF_RAW),
                        core_tensor_ino(0, TF_DIR), core_tensor_ino(T_ODD, TF_SHAPE) };
    for (unsigned i = 0; i < sizeof inos / sizeof *inos; i++) {
        stat_ok(&fs, st, inos[i], &s);
        assert_int_equal(s.st_uid, ms.st_uid);
        assert_int_equal(s.st_gid, ms.st_gid);
        if (owned)
            assert_true(s.st_uid == 4321 && s.st_gid == 8765);
        assert_int_equal(s.st_atim.tv_sec, ms.st_atim.tv_sec);
        assert_int_equal(s.st_atim.tv_nsec, ms.st_atim.tv_nsec);
        assert_int_equal(s.st_mtim.tv_sec, ts[1].tv_sec);
        assert_int_equal(s.st_mtim.tv_nsec, ts[1].tv_nsec);
        assert_int_equal(s.st_ctim.tv_sec, ms.st_ctim.tv_sec);
        assert_int_equal(s.st_ctim.tv_nsec, ms.st_ctim.tv_nsec);
        assert_int_equal(s.st_blksize, 1 << 20);
    }

    /* directories: the root's two subdirectories, tensors/' one per tensor */
    stat_ok(&fs, st, INO_ROOT, &s);
    assert_int_equal(s.st_mode, S_IFDIR | rx);
    assert_int_equal(s.st_nlink, 4);
    stat_ok(&fs, st, INO_META, &s);
    assert_int_equal(s.st_mode, S_IFDIR | rwx);
    assert_int_equal(s.st_nlink, 2);
    stat_ok(&fs, st, INO_TENSORS, &s);
    assert_int_equal(s.st_mode, S_IFDIR | rx);
    assert_int_equal(s.st_nlink, 2 + MAIN_TENSORS);
    stat_ok(&fs, st, INO_HF, &s);
    assert_int_equal(s.st_mode, S_IFDIR | rx);
    assert_int_equal(s.st_nlink, 2);

    /* the version's files: their texts' lengths */
    stat_ok(&fs, st, INO_INFO(0), &s);
    assert_int_equal(s.st_size, st->info.len);
    assert_file(&s, r, st->info.len);
    stat_ok(&fs, st, INO_MODEL(0), &s);
    assert_file(&s, r, (uint64_t)ms.st_size);      /* one file: model.gguf is it */
    assert_int_equal(st->model_size, ms.st_size);
    const struct text *j;
    assert_int_equal(core_info_json(st, &j), 0);
    stat_ok(&fs, st, INO_INFO_JSON(0), &s);
    assert_file(&s, r, j->len);
    assert_true(j->len > 2 && j->data[0] == '{');
    const struct gguf_st_layout *l;
    assert_int_equal(core_safetensors(st, &l), 0);
    stat_ok(&fs, st, INO_SAFETENSORS(0), &s);
    assert_file(&s, r, l->size);
    stat_ok(&fs, st, INO_HASHES(0), &s);
    /* per tensor an xxh64 line (40 bytes + the name) and a sha256 line
     * (88 + the name), then the model's (39 and 87): test_core.c's lines */
    uint64_t hashes = 39 + 87;
    for (unsigned t = 0; t < MAIN_TENSORS; t++)
        hashes += 40 + 88 + 2 * strlen(main_tensors[t].name);
    assert_file(&s, r, hashes);
    assert_int_equal(core_hashes_size(st), hashes);
    /* hf/'s files */
    for (int slot = VS_HF_CONFIG; slot <= VS_HF_GENERATION; slot++) {
        const char *data;
        size_t len;
        assert_int_equal(core_hf_text(st, (enum version_slot)slot, &data, &len), 0);
        stat_ok(&fs, st, INO_HF_FILE(0, slot), &s);
        assert_file(&s, r, len);
    }
    assert_int_equal(core_hf_safetensors(st, &l), 0);
    stat_ok(&fs, st, INO_HF_FILE(0, VS_HF_SAFETENSORS), &s);
    assert_file(&s, r, l->size);
    /* the stats file: its text's length */
    char buf[STATS_TEXT_MAX];
    size_t n = core_stats_text(&fs, buf, sizeof buf);
    assert_int_equal(n, strlen(buf));
    stat_ok(&fs, st, INO_STATS, &s);
    assert_file(&s, r, n);
    /* the log: the hook's size, 0 without one */
    log_bytes = 1234;
    stat_ok(&fs, st, INO_LOG, &s);
    assert_file(&s, r, 1234);
    fs.log_size = NULL;
    stat_ok(&fs, st, INO_LOG, &s);
    assert_file(&s, r, 0);

    /* meta/: each value's text, writable */
    for (unsigned i = 0; i < MAIN_KEYS; i++) {
        stat_ok(&fs, st, key_ino(st, main_keys[i].key), &s);
        assert_file(&s, rw, strlen(main_keys[i].text));
    }
    /* a key created and not committed: its handle's size */
    core_stat_pending(st, KV_BASE + 99, 17, &s);
    assert_int_equal(s.st_ino, KV_BASE + 99);
    assert_int_equal(s.st_mode, S_IFREG | rw);
    assert_int_equal(s.st_nlink, 1);
    assert_int_equal(s.st_size, 17);
    assert_int_equal(s.st_uid, ms.st_uid);
    assert_int_equal(s.st_mtim.tv_sec, ts[1].tv_sec);

    /* tensors: raw's bytes, f32's 4 per element, npy = header + data, the
     * digests' fixed widths, the type and shape texts */
    for (unsigned t = 0; t < MAIN_TENSORS; t++) {
        const struct tcase *c = &main_tensors[t];
        uint64_t elems = 1;
        for (unsigned d = 0; d < c->n_dims; d++)
            elems *= c->ne[d];
        stat_ok(&fs, st, core_tensor_ino(t, TF_DIR), &s);
        assert_int_equal(s.st_mode, S_IFDIR | rx);
        assert_int_equal(s.st_nlink, 2);
        stat_ok(&fs, st, core_tensor_ino(t, TF_RAW), &s);
        assert_file(&s, r, c->nbytes);
        stat_ok(&fs, st, core_tensor_ino(t, TF_TYPE), &s);
        assert_file(&s, r, strlen(c->type_text));
        stat_ok(&fs, st, core_tensor_ino(t, TF_SHAPE), &s);
        assert_file(&s, r, strlen(c->shape_text));
        stat_ok(&fs, st, core_tensor_ino(t, TF_XXH64), &s);
        assert_file(&s, r, 17);
        stat_ok(&fs, st, core_tensor_ino(t, TF_SHA256), &s);
        assert_file(&s, r, 65);
        char h[NPY_HEADER_MAX];
        if (core_tensor_has(st, t, TF_F32)) {
            stat_ok(&fs, st, core_tensor_ino(t, TF_F32), &s);
            assert_file(&s, r, elems * 4);
            stat_ok(&fs, st, core_tensor_ino(t, TF_STATS), &s);
            assert_file(&s, r, GGUF_FSTATS_TEXT_LEN);
            size_t hl = core_npy_header(st, t, TF_F32_NPY, h);
            assert_true(hl >= 64 && hl % 64 == 0 && !memcmp(h, "\x93NUMPY", 6));
            stat_ok(&fs, st, core_tensor_ino(t, TF_F32_NPY), &s);
            assert_file(&s, r, hl + elems * 4);
        } else {
            assert_int_equal(core_stat(&fs, st, core_tensor_ino(t, TF_F32), &s), ENOENT);
            assert_int_equal(core_stat(&fs, st, core_tensor_ino(t, TF_F32_NPY), &s), ENOENT);
            assert_int_equal(core_stat(&fs, st, core_tensor_ino(t, TF_STATS), &s), ENOENT);
        }
        if (core_tensor_has(st, t, TF_RAW_NPY)) {
            size_t hl = core_npy_header(st, t, TF_RAW_NPY, h);
            assert_true(hl >= 64 && hl % 64 == 0);
            stat_ok(&fs, st, core_tensor_ino(t, TF_RAW_NPY), &s);
            assert_file(&s, r, hl + c->nbytes);
        } else {
            assert_int_equal(core_stat(&fs, st, core_tensor_ino(t, TF_RAW_NPY), &s), ENOENT);
        }
    }
    assert_int_equal(core_stat(&fs, st, UINT64_MAX, &s), ENOENT);
    assert_int_equal(core_stat(&fs, st, KV_BASE + st->n_ids, &s), ENOENT);
    mount_fini(&fs);
    unlink(path);
}

/* Modes: the model file's read bits everywhere (x on directories where r
 * is set), its write bits on meta/ and its files unless edits are refused
 * (-o ro, a model that cannot be written). */
static void modes(void **state)
{
    (void)state;
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    static const mode_t file_modes[] = { 0600, 0640, 0644, 0666, 0444, 0604, 0200 };
    for (unsigned k = 0; k < sizeof file_modes / sizeof *file_modes; k++)
        for (int refuse = 0; refuse < 3; refuse++) {
            mode_t m = file_modes[k];
            assert_int_equal(chmod(path, m), 0);
            struct mount fs;
            mount_init(&fs, refuse == 1);
            struct state *st = mount_version(&fs, path, 0);
            if (refuse == 2)
                fs.write_err = EACCES;
            mode_t r = m & 0444, x = r >> 2, w = refuse ? 0 : m & 0222;
            assert_int_equal(core_perm(st, PERM_FILE), r);
            assert_int_equal(core_perm(st, PERM_DIR), r | x);
            assert_int_equal(core_perm(st, PERM_META_FILE), r | w);
            assert_int_equal(core_perm(st, PERM_META_DIR), r | x | w);
            /* as test_mount.py's want_modes */
            const struct { uint64_t ino; mode_t want; } nodes[] = {
                { INO_ROOT, S_IFDIR | r | x }, { INO_META, S_IFDIR | r | x | w },
                { key_ino(st, "test.str"), S_IFREG | r | w }, { INO_INFO(0), S_IFREG | r },
                { INO_MODEL(0), S_IFREG | r }, { INO_STATS, S_IFREG | r },
                { INO_TENSORS, S_IFDIR | r | x }, { core_tensor_ino(0, TF_DIR), S_IFDIR | r | x },
                { core_tensor_ino(0, TF_RAW), S_IFREG | r },
                { core_tensor_ino(0, TF_F32), S_IFREG | r },
                { core_tensor_ino(0, TF_TYPE), S_IFREG | r },
                { core_tensor_ino(0, TF_SHAPE), S_IFREG | r }, { INO_HF, S_IFDIR | r | x },
                { INO_HF_FILE(0, VS_HF_CONFIG), S_IFREG | r },
            };
            for (unsigned i = 0; i < sizeof nodes / sizeof *nodes; i++) {
                struct stat s;
                stat_ok(&fs, st, nodes[i].ino, &s);
                if (s.st_mode != nodes[i].want)
                    fail_msg("model %o, refuse %d: inode %#llx has mode %o, want %o", m,
                             refuse, (unsigned long long)nodes[i].ino, s.st_mode,
                             nodes[i].want);
            }
            struct stat s;
            core_stat_pending(st, KV_BASE + 1000, 0, &s);
            assert_int_equal(s.st_mode, S_IFREG | r | w);
            mount_fini(&fs);
        }
    unlink(path);
}

/* An older version's files: found while it lives (its own sizes), ESTALE
 * once it is gone; keys by id across versions. */
static void versions(void **state)
{
    (void)state;
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    char opath[4200];
    write_model(opath, "o.gguf", other_bytes());
    struct mount fs;
    mount_init(&fs, false);
    struct state *st0 = mount_version(&fs, path, 0);
    struct state *st1 = mount_version(&fs, opath, 1);
    core_state_ref(st0);                    /* an open info of version 0 */
    core_state_swap(&fs, st1);              /* st1 is current; st0 lives on */
    assert_ptr_equal(fs.st, st1);

    /* core_version: the state itself, another live one, or NULL */
    struct state *v = core_version(st1, 1);
    assert_ptr_equal(v, st1);
    core_state_put(v);
    v = core_version(st1, 0);
    assert_ptr_equal(v, st0);
    core_state_put(v);
    assert_null(core_version(st1, 2));

    /* version 0's files, seen from version 1: version 0's sizes */
    struct stat s;
    stat_ok(&fs, st1, INO_INFO(0), &s);
    assert_int_equal(s.st_size, st0->info.len);
    assert_int_not_equal(st0->info.len, st1->info.len);
    stat_ok(&fs, st1, INO_MODEL(0), &s);
    assert_int_equal(s.st_size, st0->model_size);
    stat_ok(&fs, st1, INO_INFO_JSON(0), &s);
    const struct text *j;
    assert_int_equal(core_info_json(st0, &j), 0);
    assert_int_equal(s.st_size, j->len);
    stat_ok(&fs, st1, INO_SAFETENSORS(0), &s);
    const struct gguf_st_layout *l;
    assert_int_equal(core_safetensors(st0, &l), 0);
    assert_int_equal(s.st_size, l->size);
    /* hf/ of version 0 (version 1 has none): its files, but not a
     * tokenizer version 0 does not have either */
    assert_null(st1->hf);
    stat_ok(&fs, st1, INO_HF_FILE(0, VS_HF_CONFIG), &s);
    assert_int_equal(s.st_size, st0->hf->config.len);
    assert_int_equal(core_stat(&fs, st1, INO_HF_FILE(0, VS_HF_TOKENIZER), &s), ENOENT);
    assert_int_equal(core_stat(&fs, st1, INO_HF_FILE(1, VS_HF_CONFIG), &s), ENOENT);
    stat_ok(&fs, st1, INO_INFO(1), &s);
    assert_int_equal(s.st_size, st1->info.len);

    /* keys: the same name, the same inode; a key gone, a key new */
    assert_int_equal(key_ino(st0, "test.str"), key_ino(st1, "test.str"));
    assert_int_equal(key_ino(st0, "general.architecture"), key_ino(st1, "general.architecture"));
    uint64_t gone = key_ino(st0, "test.u8"), added = key_ino(st1, "new.key");
    assert_int_equal(classify(st0, gone).kind, K_KV);
    assert_none(st1, gone);
    assert_int_equal(classify(st1, added).kind, K_KV);
    assert_int_equal(classify(st1, added).idx, key_index(st1, "new.key"));
    assert_none(st0, added);                /* registered after version 0 was built */
    stat_ok(&fs, st1, key_ino(st1, "test.str"), &s);
    assert_int_equal(s.st_size, strlen("a longer value than before\n"));
    stat_ok(&fs, st0, key_ino(st0, "test.str"), &s);
    assert_int_equal(s.st_size, strlen("hello\n"));

    /* version 0 gone (its last reference put): ESTALE, not its files */
    core_state_put(st0);
    assert_null(core_version(st1, 0));
    const uint64_t stale[] = { INO_INFO(0), INO_MODEL(0), INO_INFO_JSON(0), INO_SAFETENSORS(0),
                               INO_HF_FILE(0, VS_HF_CONFIG), INO_HF_FILE(0, VS_HF_SAFETENSORS),
                               INO_INFO(7), INO_MODEL(7) };
    for (unsigned i = 0; i < sizeof stale / sizeof *stale; i++)
        assert_int_equal(core_stat(&fs, st1, stale[i], &s), ESTALE);
    /* hashes: the same bytes in every version, so any version's */
    stat_ok(&fs, st1, INO_HASHES(0), &s);
    assert_int_equal(s.st_size, core_hashes_size(st1));
    mount_fini(&fs);
    unlink(path);
    unlink(opath);
}

/* Out of memory rendering what a stat must measure: the errno, and the
 * next stat succeeds. */
static void stat_oom(void **state)
{
    (void)state;
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    struct mount fs;
    mount_init(&fs, false);
    struct state *st = mount_version(&fs, path, 0);
    const uint64_t inos[] = { INO_INFO_JSON(0), INO_SAFETENSORS(0),
                              INO_HF_FILE(0, VS_HF_SAFETENSORS), key_ino(st, "test.str") };
    for (unsigned i = 0; i < sizeof inos / sizeof *inos; i++) {
        struct stat s;
        mem_cap = 0;
        int e = core_stat(&fs, st, inos[i], &s);
        mem_cap = SIZE_MAX;
        assert_int_equal(e, ENOMEM);
        stat_ok(&fs, st, inos[i], &s);
        assert_true(s.st_size > 0);
    }
    mount_fini(&fs);
    unlink(path);
}

/* ---- texts ---------------------------------------------------------------------------- */

/* A value is rendered once and kept: the same copy on every call. */
static void kv_texts(void **state)
{
    (void)state;
    for (int be = 0; be < 2; be++) {
        char path[4200];
        write_model(path, be ? "be.gguf" : "m.gguf", main_bytes(be));
        struct mount fs;
        mount_init(&fs, false);
        struct state *st = mount_version(&fs, path, 0);
        assert_int_equal(st_meta(st)->enc.big_endian, be);
        for (unsigned i = 0; i < MAIN_KEYS; i++) {
            assert_null(atomic_load(&st->kv_text[i]));
            const struct text *t = core_kv_text(st, i);
            assert_non_null(t);
            if (t->len != strlen(main_keys[i].text) ||
                (t->len && memcmp(t->data, main_keys[i].text, t->len)))
                fail_msg("%s: %.*s, want %s", main_keys[i].key, (int)t->len,
                         t->data ? t->data : "", main_keys[i].text);
            assert_ptr_equal(atomic_load(&st->kv_text[i]), t);     /* kept */
            work_reset();
            assert_ptr_equal(core_kv_text(st, i), t);
            assert_int_equal(work.allocs, 0);                     /* not rendered again */
        }
        mount_fini(&fs);
        unlink(path);
    }
}

/* Out of memory: NULL, nothing kept, nothing leaked; then it renders. */
static void kv_text_oom(void **state)
{
    (void)state;
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    struct mount fs;
    mount_init(&fs, false);
    struct state *st = mount_version(&fs, path, 0);
    int64_t i = key_index(st, "test.arr_str");
    size_t live = mem_live;
    mem_cap = 0;                           /* the rendering fails */
    assert_null(core_kv_text(st, (uint64_t)i));
    mem_cap = SIZE_MAX;
    assert_null(atomic_load(&st->kv_text[i]));
    assert_int_equal(mem_live, live);
    starve_after = true;                   /* rendered, but no room to keep it */
    const struct text *t = core_kv_text(st, (uint64_t)i);
    starve_after = false;
    mem_cap = SIZE_MAX;
    assert_null(t);
    assert_null(atomic_load(&st->kv_text[i]));
    assert_int_equal(mem_live, live);
    t = core_kv_text(st, (uint64_t)i);
    assert_non_null(t);
    assert_int_equal(t->len, strlen("a\nb\\nc\n"));
    mount_fini(&fs);
    unlink(path);
}

/* Another thread renders the same value first: its copy is the one
 * returned and kept, this one's freed. */
static void kv_text_race_lost(void **state)
{
    (void)state;
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    struct mount fs;
    mount_init(&fs, false);
    struct state *st = mount_version(&fs, path, 0);
    struct text *theirs = malloc(sizeof *theirs);
    assert_non_null(theirs);
    theirs->data = strdup("theirs\n");
    theirs->len = 7;
    size_t live = mem_live;
    race_i = (uint64_t)key_index(st, "test.str");
    race_text = theirs;
    race_st = st;
    const struct text *t = core_kv_text(st, race_i);
    assert_null(race_st);                  /* the race happened */
    assert_ptr_equal(t, theirs);
    assert_ptr_equal(atomic_load(&st->kv_text[race_i]), theirs);
    assert_int_equal(mem_live, live);      /* the loser's copy freed */
    assert_ptr_equal(core_kv_text(st, race_i), theirs);
    mount_fini(&fs);                       /* frees theirs with the state */
    unlink(path);
}

/* Threads asking for the same values at once all get one copy. */
#define KV_THREADS 4
struct kv_job {
    struct state *st;
    pthread_barrier_t *go;
    const struct text *got[MAIN_KEYS];
};

static void *kv_thread(void *arg)
{
    struct kv_job *j = arg;
    pthread_barrier_wait(j->go);
    for (unsigned i = 0; i < MAIN_KEYS; i++)
        j->got[i] = core_kv_text(j->st, i);
    return NULL;
}

static void kv_text_threads(void **state)
{
    (void)state;
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    for (int round = 0; round < 8; round++) {
        struct mount fs;
        mount_init(&fs, false);
        struct state *st = mount_version(&fs, path, 0);
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, KV_THREADS);
        struct kv_job jobs[KV_THREADS];
        pthread_t th[KV_THREADS];
        for (int k = 0; k < KV_THREADS; k++) {
            jobs[k] = (struct kv_job){ .st = st, .go = &go };
            assert_int_equal(pthread_create(&th[k], NULL, kv_thread, &jobs[k]), 0);
        }
        for (int k = 0; k < KV_THREADS; k++)
            pthread_join(th[k], NULL);
        pthread_barrier_destroy(&go);
        for (unsigned i = 0; i < MAIN_KEYS; i++) {
            assert_non_null(jobs[0].got[i]);
            assert_ptr_equal(jobs[0].got[i], atomic_load(&st->kv_text[i]));
            for (int k = 1; k < KV_THREADS; k++)
                assert_ptr_equal(jobs[k].got[i], jobs[0].got[i]);
            assert_int_equal(jobs[0].got[i]->len, strlen(main_keys[i].text));
        }
        mount_fini(&fs);
    }
    unlink(path);
}

/* type and shape (numpy's order), in both byte orders; a short buffer
 * holds what fits, NUL-terminated, and nothing past it. */
static void tensor_texts(void **state)
{
    (void)state;
    for (int be = 0; be < 2; be++) {
        char path[4200];
        write_model(path, be ? "be.gguf" : "m.gguf", main_bytes(be));
        struct mount fs;
        mount_init(&fs, false);
        struct state *st = mount_version(&fs, path, 0);
        for (unsigned t = 0; t < MAIN_TENSORS; t++) {
            char buf[64];
            size_t n = core_tensor_text(st, t, TF_TYPE, buf, sizeof buf);
            assert_string_equal(buf, main_tensors[t].type_text);
            assert_int_equal(n, strlen(buf));
            n = core_tensor_text(st, t, TF_SHAPE, buf, sizeof buf);
            assert_string_equal(buf, main_tensors[t].shape_text);
            assert_int_equal(n, strlen(buf));
            for (int tf = TF_TYPE; tf <= TF_SHAPE; tf++) {
                const char *full = tf == TF_TYPE ? main_tensors[t].type_text
                                                 : main_tensors[t].shape_text;
                size_t len = strlen(full);
                for (size_t cap = 0; cap <= len + 1; cap++) {
                    char b[96];
                    memset(b, 'Z', sizeof b);
                    n = core_tensor_text(st, t, (enum tensor_file)tf, b, cap);
                    size_t want = cap == 0 ? 0 : len < cap ? len : cap - 1;
                    if (n != want)
                        fail_msg("%s of tensor %u, cap %zu: %zu, want %zu",
                                 core_tensor_files[tf], t, cap, n, want);
                    if (cap) {
                        assert_memory_equal(b, full, n);
                        assert_int_equal(b[n], '\0');
                    }
                    for (size_t k = cap; k < sizeof b; k++)
                        if (b[k] != 'Z')
                            fail_msg("%s of tensor %u, cap %zu: byte %zu written",
                                     core_tensor_files[tf], t, cap, k);
                }
            }
        }
        /* big-endian: f32 for the types with a big-endian layout only */
        if (be) {
            assert_true(core_tensor_has(st, T_F32, TF_F32));
            assert_true(core_tensor_has(st, T_Q8_0, TF_F32));
            assert_false(core_tensor_has(st, T_Q5_0, TF_F32));
            assert_none(st, core_tensor_ino(T_Q5_0, TF_F32));
            char h[NPY_HEADER_MAX];
            size_t hl = core_npy_header(st, T_F32, TF_RAW_NPY, h);
            assert_non_null(memmem(h, hl, "'>f4'", 5));
            struct stat s;
            stat_ok(&fs, st, core_tensor_ino(T_F32, TF_RAW_NPY), &s);
            assert_int_equal(s.st_size, hl + main_tensors[T_F32].nbytes);
            stat_ok(&fs, st, core_tensor_ino(T_F32, TF_F32), &s);
            assert_int_equal(s.st_size, 8 * 4);
        }
        mount_fini(&fs);
        unlink(path);
    }
}

/* The stats file: every counter by name and value; remote models' and
 * disk caches' lines only where there are some. */
static const char *const stats_names[] = {
    "hits", "misses", "evictions", "fill_errors", "waits", "prefetched", "prefetch_wasted",
    "chunks_held", "bytes_held", "capacity", "chunk_bytes", "kernel_level", "edits_in_place",
    "edits_cloned", "edits_copied", "underneath_changed", "underneath_replaced",
    "underneath_eio", "underneath_refused", "underneath_followed", "notes_lost",
};
static const char *const read_kinds[RK_COUNT] = { "raw", "f32", "model", "raw_npy", "f32_npy",
                                                  "info_json", "safetensors", "tensor_stats",
                                                  "xxh64", "sha256", "hashes", "hf" };
static const char *const remote_names[] = { "remote_requests", "remote_bytes",
                                             "remote_retries", "remote_redirects",
                                             "remote_reresolves", "remote_errors" };
static const char *const rcache_names[] = {
    "remote_cache_hits", "remote_cache_misses", "remote_prefetched", "remote_prefetch_wasted",
    "remote_cache_fill_errors", "remote_cache_bytes_held", "remote_cache_capacity",
    "remote_block_bytes" };
static const char *const dcache_names[] = {
    "disk_cache_hits", "disk_cache_misses", "disk_cache_stored", "disk_cache_rejected",
    "disk_cache_evicted", "disk_cache_bytes", "disk_cache_blocks", "disk_cache_spliced" };

static void check_present(const char *text, const char *const *names, size_t n, bool present)
{
    for (size_t i = 0; i < n; i++) {
        bool has = counter(text, names[i]) != -1 || strstr(text, names[i]);
        if (has != present)
            fail_msg("%s %s in:\n%s", names[i], present ? "missing" : "present", text);
    }
}

/* Every cut of the text at cap bytes: what fits, NUL-terminated, the
 * length of that returned, nothing written past cap. */
static void check_caps(struct mount *fs, const char *full, size_t len)
{
    static char b[STATS_TEXT_MAX + 64];
    for (size_t cap = 0; cap <= len + 1; cap++) {
        memset(b, 'Z', sizeof b);
        size_t n = core_stats_text(fs, b, cap);
        size_t want = cap == 0 ? 0 : len < cap ? len : cap - 1;
        if (n != want)
            fail_msg("cap %zu: %zu, want %zu", cap, n, want);
        if (cap) {
            assert_memory_equal(b, full, n);
            assert_int_equal(b[n], '\0');
        }
        for (size_t k = cap; k < cap + 64; k++)
            if (b[k] != 'Z')
                fail_msg("cap %zu: byte %zu written", cap, k);
    }
}

static void stats_text(void **state)
{
    (void)state;
    kern_dequant_init();
    char path[4200];
    write_model(path, "m.gguf", main_bytes(false));
    struct mount fs;
    mount_init(&fs, false);
    mount_version(&fs, path, 0);
    char buf[STATS_TEXT_MAX];

    /* a fresh mount: zeros, the cache's size, the kernels' level */
    size_t n = core_stats_text(&fs, buf, sizeof buf);
    assert_int_equal(n, strlen(buf));
    check_present(buf, stats_names, sizeof stats_names / sizeof *stats_names, true);
    check_present(buf, remote_names, 6, false);
    check_present(buf, rcache_names, 8, false);
    check_present(buf, dcache_names, 8, false);
    assert_int_equal(counter(buf, "hits"), 0);
    assert_int_equal(counter(buf, "misses"), 0);
    assert_int_equal(counter(buf, "capacity"), 1 << 20);
    assert_int_equal(counter(buf, "chunk_bytes"), 4096);
    char lvl[64];
    snprintf(lvl, sizeof lvl, "\nkernel_level %s\n", kern_dequant_level());
    assert_non_null(strstr(buf, lvl));
    for (int k = 0; k < RK_COUNT; k++) {
        char name[64];
        snprintf(name, sizeof name, "reads_%s", read_kinds[k]);
        assert_int_equal(counter(buf, name), 0);
        snprintf(name, sizeof name, "read_bytes_%s", read_kinds[k]);
        assert_int_equal(counter(buf, name), 0);
        snprintf(name, sizeof name, "read_max_%s", read_kinds[k]);
        assert_int_equal(counter(buf, name), 0);
    }
    assert_int_equal(buf[n - 1], '\n');

    /* counters moved: each where it belongs */
    int err;
    struct cache_block *blk = cache_get(fs.cache, 1, 2, 100, NULL, &err);
    assert_non_null(blk);
    cache_put(fs.cache, blk, 0);
    blk = cache_get(fs.cache, 1, 2, 100, NULL, &err);
    assert_non_null(blk);
    cache_put(fs.cache, blk, 0);
    atomic_store(&fs.edits_in_place, 3);
    atomic_store(&fs.edits_cloned, 4);
    atomic_store(&fs.edits_copied, 5);
    atomic_store(&fs.under, UNDER_REPLACED);
    atomic_store(&fs.under_eio, 6);
    atomic_store(&fs.under_refused, 7);
    atomic_store(&fs.under_followed, 8);
    atomic_store(&fs.notes_lost, 9);
    for (int k = 0; k < RK_COUNT; k++) {
        atomic_store(&fs.reads[k].n, 100 + (uint64_t)k);
        atomic_store(&fs.reads[k].bytes, 200 + (uint64_t)k);
        atomic_store(&fs.reads[k].max, 300 + (uint64_t)k);
    }
    n = core_stats_text(&fs, buf, sizeof buf);
    assert_int_equal(counter(buf, "hits"), 1);
    assert_int_equal(counter(buf, "misses"), 1);
    assert_int_equal(counter(buf, "chunks_held"), 1);
    assert_int_equal(counter(buf, "edits_in_place"), 3);
    assert_int_equal(counter(buf, "edits_cloned"), 4);
    assert_int_equal(counter(buf, "edits_copied"), 5);
    assert_int_equal(counter(buf, "underneath_changed"), 0);
    assert_int_equal(counter(buf, "underneath_replaced"), 1);
    assert_int_equal(counter(buf, "underneath_eio"), 6);
    assert_int_equal(counter(buf, "underneath_refused"), 7);
    assert_int_equal(counter(buf, "underneath_followed"), 8);
    assert_int_equal(counter(buf, "notes_lost"), 9);
    for (int k = 0; k < RK_COUNT; k++) {
        char name[64];
        snprintf(name, sizeof name, "reads_%s", read_kinds[k]);
        assert_int_equal(counter(buf, name), 100 + k);
        snprintf(name, sizeof name, "read_bytes_%s", read_kinds[k]);
        assert_int_equal(counter(buf, name), 200 + k);
        snprintf(name, sizeof name, "read_max_%s", read_kinds[k]);
        assert_int_equal(counter(buf, name), 300 + k);
    }
    atomic_store(&fs.under, UNDER_CHANGED);
    core_stats_text(&fs, buf, sizeof buf);
    assert_int_equal(counter(buf, "underneath_changed"), 1);
    assert_int_equal(counter(buf, "underneath_replaced"), 0);
    check_caps(&fs, buf, strlen(buf));

    /* a remote model: every shard's HTTP counters, summed; the shards of
     * the overlay's base when there is one */
    fs.remote = true;
    core_stats_text(&fs, buf, sizeof buf);
    check_present(buf, remote_names, 6, true);
    for (unsigned i = 0; i < 6; i++)
        assert_int_equal(counter(buf, remote_names[i]), 1 + i);
    check_present(buf, rcache_names, 8, false);
    write_split(2);
    struct gguf_split *base;
    struct gguf_diag d;
    assert_int_equal(core_open_model(shard_name(0, 2), true, false, NULL, NULL, NULL, 0, &base,
                                     &d), GGUF_OK);
    assert_int_equal(base->n, 2);
    fs.base = base;
    core_stats_text(&fs, buf, sizeof buf);
    for (unsigned i = 0; i < 6; i++)
        assert_int_equal(counter(buf, remote_names[i]), 2 * (1 + i));
    no_remote = base->shards[1].src;       /* a shard without a remote: skipped */
    core_stats_text(&fs, buf, sizeof buf);
    for (unsigned i = 0; i < 6; i++)
        assert_int_equal(counter(buf, remote_names[i]), 1 + i);
    no_remote = NULL;

    /* the block cache of remote bytes */
    struct rcache_opts ro = { .block_bytes = 8192, .capacity = 1 << 20, .fetchers = 1 };
    fs.rcache = rcache_new(&ro);
    assert_non_null(fs.rcache);
    core_stats_text(&fs, buf, sizeof buf);
    check_present(buf, rcache_names, 8, true);
    assert_int_equal(counter(buf, "remote_block_bytes"), 8192);
    assert_int_equal(counter(buf, "remote_cache_capacity"), 1 << 20);
    assert_int_equal(counter(buf, "remote_cache_hits"), 0);
    check_present(buf, dcache_names, 8, false);

    /* disk caches: none open, no lines; open ones summed */
    struct dcache *dcs[3] = { NULL, NULL, NULL };
    fs.dcache = dcs;
    fs.n_dcache = 3;
    core_stats_text(&fs, buf, sizeof buf);
    check_present(buf, dcache_names, 8, false);
    dcs[0] = (struct dcache *)&fs;         /* faked: dcache_get_stats is wrapped */
    dcs[2] = (struct dcache *)&fs;
    core_stats_text(&fs, buf, sizeof buf);
    check_present(buf, dcache_names, 8, true);
    assert_int_equal(counter(buf, "disk_cache_hits"), 20);
    assert_int_equal(counter(buf, "disk_cache_misses"), 40);
    assert_int_equal(counter(buf, "disk_cache_stored"), 60);
    assert_int_equal(counter(buf, "disk_cache_rejected"), 80);
    assert_int_equal(counter(buf, "disk_cache_evicted"), 100);
    assert_int_equal(counter(buf, "disk_cache_bytes"), 120);
    assert_int_equal(counter(buf, "disk_cache_blocks"), 140);
    assert_int_equal(counter(buf, "disk_cache_spliced"), 0);
    /* every line at once: still within the file's room, and every cut */
    n = core_stats_text(&fs, buf, sizeof buf);
    assert_int_equal(n, strlen(buf));
    assert_true(n < sizeof buf - 1);
    check_caps(&fs, buf, n);
    /* a disk cache without the block cache */
    rcache_put(fs.rcache);
    fs.rcache = NULL;
    core_stats_text(&fs, buf, sizeof buf);
    check_present(buf, rcache_names, 8, false);
    assert_int_equal(counter(buf, "disk_cache_spliced"), 0);
    assert_int_equal(counter(buf, "disk_cache_hits"), 20);

    fs.dcache = NULL;
    fs.n_dcache = 0;
    fs.remote = false;
    fs.base = NULL;
    gguf_split_close(base);
    remove_split(2);
    struct stat s;
    stat_ok(&fs, fs.st, INO_STATS, &s);
    assert_int_equal(s.st_size, core_stats_text(&fs, buf, sizeof buf));
    mount_fini(&fs);
    unlink(path);
}

/* A split model: tensors of every shard, model.gguf as the merged file. */
static void split_model(void **state)
{
    (void)state;
    write_split(3);
    struct mount fs;
    mount_init(&fs, false);
    struct state *st = mount_version(&fs, shard_name(1, 3), 0);
    assert_int_equal(st->model->n, 3);
    assert_int_equal(st->n_tensors, 3);
    for (uint64_t j = 0; j < 3; j++) {
        assert_int_equal(st->tens[j].shard, j);
        for (int tf = 0; tf < TF_COUNT; tf++) {
            struct node n = classify(st, core_tensor_ino(j, (enum tensor_file)tf));
            assert_int_equal(n.kind, K_TENSOR);
            assert_int_equal(n.idx, j);
        }
        char buf[32];
        core_tensor_text(st, j, TF_SHAPE, buf, sizeof buf);
        assert_string_equal(buf, "4\n");
    }
    assert_none(st, core_tensor_ino(3, TF_DIR));
    /* meta/: the first shard's keys, split.* among them */
    assert_int_equal(classify(st, key_ino(st, "llama.context_length")).kind, K_KV);
    assert_int_equal(classify(st, key_ino(st, "split.count")).kind, K_KV);
    struct stat s;
    stat_ok(&fs, st, key_ino(st, "llama.context_length"), &s);
    assert_int_equal(s.st_size, 5);                     /* "2048\n" */
    /* model.gguf: the merged file; info.json describes it */
    stat_ok(&fs, st, INO_MODEL(0), &s);
    assert_int_equal(s.st_size, st->model_size);
    assert_int_equal(st->model_size, st->merged.size);
    struct stat sh;
    assert_int_equal(stat(shard_name(0, 3), &sh), 0);
    assert_true(st->model_size > (uint64_t)sh.st_size);
    const struct text *j;
    assert_int_equal(core_info_json(st, &j), 0);
    stat_ok(&fs, st, INO_INFO_JSON(0), &s);
    assert_int_equal(s.st_size, j->len);
    stat_ok(&fs, st, INO_INFO(0), &s);
    assert_int_equal(s.st_size, st->info.len);
    stat_ok(&fs, st, INO_TENSORS, &s);
    assert_int_equal(s.st_nlink, 5);
    mount_fini(&fs);
    remove_split(3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(root_entries),
        cmocka_unit_test(classify_tree),
        cmocka_unit_test(stat_sizes),
        cmocka_unit_test(modes),
        cmocka_unit_test(versions),
        cmocka_unit_test(stat_oom),
        cmocka_unit_test(kv_texts),
        cmocka_unit_test(kv_text_oom),
        cmocka_unit_test(kv_text_race_lost),
        cmocka_unit_test(kv_text_threads),
        cmocka_unit_test(tensor_texts),
        cmocka_unit_test(stats_text),
        cmocka_unit_test(split_model),
    };
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/gguffs-nodes-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir))
        return 1;
    int failed = cmocka_run_group_tests_name("nodes", tests, NULL, NULL);
    return rmdir(tmpdir) == 0 ? failed : 1;
}

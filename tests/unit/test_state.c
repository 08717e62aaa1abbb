/*
 * tests/unit/test_state.c — core/state.c, core/tensor.c and core/log.c
 * without a mount: versions of a model built from small GGUF files made
 * here (tests/unit/gb.h) on a struct mount set up as fs/main.c sets it up.
 *
 *   - a state's name tables, key ids (stable across versions: a name keeps
 *     its id, a new name gets a new one; core_key_index), the padding it
 *     keeps, its info text; a split model, a version 1 file, a remote
 *     model (remote/'s calls faked);
 *   - references: core_state_ref/put, the last put frees or hands the
 *     state to fs->free_later, core_state_by_gen finds a live version
 *     and never one whose count reached 0, core_state_current under the
 *     state lock (pthread_rwlock_rdlock is wrapped to count it);
 *   - info.json and the two safetensors layouts: made once, the same
 *     copy for every caller (threads at once; the builders are wrapped so
 *     that a caller deterministically loses the race once), the errors
 *     mapped (ENOMEM with nothing leaked and a later call succeeding,
 *     EFBIG, EIO);
 *   - hf/: a llama model with a tokenizer, one without, an architecture
 *     hf/ cannot show;
 *   - a tensor's files and NPY headers by type and byte order;
 *   - core_log with a handler and without (stderr).
 *
 * Allocations fail above mem_cap (tests/unit/work.h), which also counts
 * the bytes held: every test ends holding what it held when it began.
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

#include "core/log.h"
#include "core/model.h"
#include "core/state.h"
#include "core/tensor.h"
#include "gguf/hf_tokenizer.h"
#include "gguf/info.h"
#include "gguf/split.h"
#include "gguf/types.h"
#include "remote/http.h"
#include "remote/source.h"

#include "gb.h"
#include "tmpfiles.h"
#include "work.h"

static bool has(const char *data, size_t len, const char *s)
{
    return data && memmem(data, len, s, strlen(s)) != NULL;
}

/* ---- models --------------------------------------------------------------------------- */

enum kv_kind { K_STR, K_U32, K_F32, K_STRS };

struct kvspec {
    const char *key;
    enum kv_kind kind;
    const char *s;
    uint32_t u;
    float f;
    const char *const *strs;   /* K_STRS */
    unsigned n;
};

#define KSTR(k, v) { .key = (k), .kind = K_STR, .s = (v) }
#define KU32(k, v) { .key = (k), .kind = K_U32, .u = (v) }
#define KF32(k, v) { .key = (k), .kind = K_F32, .f = (v) }
#define KSTRS(k, a) { .key = (k), .kind = K_STRS, .strs = (a), .n = sizeof(a) / sizeof *(a) }
#define N(a) (sizeof(a) / sizeof *(a))

struct tspec {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
};

struct mspec {
    bool be;
    uint32_t version;          /* 0: 3 */
    const struct kvspec *kv;
    unsigned nkv;
    const struct tspec *t;
    unsigned nt;
    uint32_t align;            /* 0: 32 (no general.alignment key) */
    uint8_t pad;               /* the bytes between the header and the data */
    uint64_t *data_size;       /* the tensor data's size, if asked */
};

static void gb_kv(struct gb *b, const struct kvspec *k)
{
    gb_str(b, k->key);
    switch (k->kind) {
    case K_STR:
        gb_u32(b, GGUF_STRING);
        gb_str(b, k->s);
        break;
    case K_U32:
        gb_u32(b, GGUF_U32);
        gb_u32(b, k->u);
        break;
    case K_F32: {
        uint32_t u;
        memcpy(&u, &k->f, 4);
        gb_u32(b, GGUF_F32);
        gb_u32(b, u);
        break;
    }
    case K_STRS:
        gb_u32(b, GGUF_ARRAY);
        gb_u32(b, GGUF_STRING);
        gb_count(b, k->n);
        for (unsigned i = 0; i < k->n; i++)
            gb_str(b, k->strs[i]);
        break;
    }
}

/* The bytes of a tensor of t (32 for a type without an entry: the parser
 * takes its size from where the next tensor starts). */
static uint64_t tensor_bytes(const struct tspec *t)
{
    const struct ggml_type_info *ti = ggml_type_get(t->type);
    if (!ti)
        return 32;
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->ne[d];
    return n / ti->blck_elems * ti->blck_bytes;
}

/* A GGUF file of m: its header, the padding of m->pad bytes, then the
 * tensors' data (each aligned) when with_data, else none (the caller
 * says the file is larger: a mem source). */
static struct gb model_bytes(const struct mspec *m, bool with_data)
{
    struct gb b = { .be = m->be };
    uint32_t align = m->align ? m->align : 32;
    gb_header(&b, m->version ? m->version : 3, m->nt, m->nkv + (m->align != 0));
    if (m->align)
        gb_kv_u32(&b, "general.alignment", m->align);
    for (unsigned i = 0; i < m->nkv; i++)
        gb_kv(&b, &m->kv[i]);
    uint64_t off = 0;
    for (unsigned i = 0; i < m->nt; i++) {
        gb_tensor(&b, m->t[i].name, m->t[i].n_dims, m->t[i].ne, m->t[i].type, off);
        off += (tensor_bytes(&m->t[i]) + align - 1) / align * align;
    }
    while (b.len % align)
        gb_u8(&b, m->pad);
    if (m->data_size)
        *m->data_size = off;
    for (uint64_t i = 0; with_data && i < off; i++)
        gb_u8(&b, (uint8_t)(i * 7 + 1));
    return b;
}

/* m written to name in tmpdir; its path. */
static const char *model_file(const char *name, const struct mspec *m)
{
    struct gb b = model_bytes(m, true);
    const char *path = tpath(name);
    put_file(path, b.p, b.len);
    free(b.p);
    return path;
}

static struct gguf_split *open_path(const char *path)
{
    struct gguf_split *model = NULL;
    struct gguf_diag d;
    enum gguf_err e = core_open_model(path, true, false, NULL, NULL, NULL, 0, &model, &d);
    if (e != GGUF_OK)
        fail_msg("%s: %s", path, d.msg);
    return model;
}

/* ---- models in memory: any size, reads that fail, remote-like ------------------------- */

struct msrc {
    struct gguf_source s;       /* first: the source handed out */
    char name[256];
    struct gb b;                /* the bytes; zeros after them up to s.size */
    uint64_t fail_from;         /* reads at or past it fail (EIO) */
    bool remote;                /* stands for a remote object (fake remote/) */
};

static ssize_t msrc_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    const struct msrc *m = (const struct msrc *)s;
    size_t n = gguf_read_len(s->size, len, off);
    if (n && off + n > m->fail_from)
        return -EIO;
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)buf)[i] = off + i < m->b.len ? m->b.p[off + i] : 0;
    return (ssize_t)n;
}

static void msrc_close(struct gguf_source *s)
{
    struct msrc *m = (struct msrc *)s;
    free(m->b.p);
    free(m);
}

static const struct gguf_source_ops msrc_ops = { .read = msrc_read, .close = msrc_close };

/* What mem_open hands out next: the bytes, the size the source claims,
 * where reads start failing, whether it is remote. */
static struct mspec *mem_spec;
static uint64_t mem_size_extra, mem_fail_from = UINT64_MAX;
static bool mem_remote, mem_no_data;

static enum gguf_err mem_open(void *ctx, const char *name, struct gguf_source **out,
                              struct gguf_diag *d)
{
    (void)ctx;
    (void)d;
    struct msrc *m = calloc(1, sizeof *m);
    assert_non_null(m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->b = model_bytes(mem_spec, !mem_no_data);
    m->fail_from = mem_fail_from;
    m->remote = mem_remote;
    m->s.ops = &msrc_ops;
    m->s.size = m->b.len + mem_size_extra;
    m->s.name = m->name;
    m->s.identity = m->name;
    m->s.fd = -1;
    *out = &m->s;
    return GGUF_OK;
}

static struct gguf_split *open_mem(const char *name, struct mspec *m, uint64_t extra)
{
    mem_spec = m;
    mem_size_extra = extra;
    struct gguf_split *model = NULL;
    struct gguf_diag d;
    enum gguf_err e = gguf_split_open(name, mem_open, NULL, &model, &d);
    if (e != GGUF_OK)
        fail_msg("%s: %s", name, d.msg);
    mem_fail_from = UINT64_MAX;
    mem_remote = false;
    mem_no_data = false;
    mem_size_extra = 0;
    return model;
}

/* remote/'s side of a remote model, faked: an msrc made with mem_remote
 * stands for its remote object. */
struct remote *__wrap_remote_source_remote(struct gguf_source *src);
struct remote *__wrap_remote_source_remote(struct gguf_source *src)
{
    if (src && src->ops == &msrc_ops && ((struct msrc *)src)->remote)
        return (struct remote *)src;
    return NULL;
}

const char *__wrap_remote_display_url(const struct remote *r);
const char *__wrap_remote_display_url(const struct remote *r)
{
    return ((const struct msrc *)r)->name;
}

const char *__wrap_remote_identity(const struct remote *r);
const char *__wrap_remote_identity(const struct remote *r)
{
    (void)r;
    return "etag \"abc\"";
}

uint64_t __wrap_remote_size(const struct remote *r);
uint64_t __wrap_remote_size(const struct remote *r)
{
    return ((const struct msrc *)r)->s.size;
}

static const char *store_lines;
const char *__wrap_remote_store_lines(const struct remote *r);
const char *__wrap_remote_store_lines(const struct remote *r)
{
    (void)r;
    return store_lines;
}

/* ---- the mount ------------------------------------------------------------------------ */

/* As fs/main.c sets up what state.c uses. */
static void fs_init(struct mount *fs, const char *model_path)
{
    core_mount_init(fs);
    fs->model_path = model_path;
}

/* Every state was put; the mount's key ids freed. */
static void fs_fini(struct mount *fs)
{
    assert_true(glist_empty(&fs->states));
    core_key_ids_free(&fs->ids);
    assert_null(fs->ids.names);
    core_mount_fini(fs);
}

static struct state *new_state(struct mount *fs, struct gguf_split *m, uint64_t gen)
{
    struct state *st = NULL;
    assert_int_equal(core_state_new(fs, m, gen, &st), 0);
    assert_non_null(st);
    return st;
}

static unsigned n_states(struct mount *fs)
{
    unsigned n = 0;
    pthread_mutex_lock(&fs->states_mu);
    for (struct glist *l = fs->states.next; l != &fs->states; l = l->next)
        n++;
    pthread_mutex_unlock(&fs->states_mu);
    return n;
}

/* ---- messages, captured ---------------------------------------------------------------- */

static char logged[4096];
static int logged_level, n_logged;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void capture(int level, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&log_mu);
    size_t at = strlen(logged);
    vsnprintf(logged + at, sizeof logged - at, fmt, ap);
    logged_level = level;
    n_logged++;
    pthread_mutex_unlock(&log_mu);
}

static void log_reset(void)
{
    logged[0] = '\0';
    logged_level = -1;
    n_logged = 0;
    core_log_set(capture);
}

/* ---- the builders, wrapped: counted, and made to lose a race on demand ---------------- */

/* When set, the next call of the builder first runs the same core_ call
 * on race_st from inside (so that another copy is published while this
 * one is made): the outer call then loses the race. */
static _Atomic(struct state *) race_st;    /* read by every builder thread */
static const void *race_won;
static atomic_uint n_info_json, n_safetensors, n_hf_safetensors, n_tokenizer;

static struct state *race_take(void)
{
    return atomic_exchange(&race_st, NULL);
}

enum gguf_err __real_gguf_info_json(const struct gguf_file *f, struct gguf_buf *out);
enum gguf_err __wrap_gguf_info_json(const struct gguf_file *f, struct gguf_buf *out);
enum gguf_err __wrap_gguf_info_json(const struct gguf_file *f, struct gguf_buf *out)
{
    atomic_fetch_add(&n_info_json, 1);
    struct state *st = race_take();
    if (st) {
        const struct text *t = NULL;
        assert_int_equal(core_info_json(st, &t), 0);
        race_won = t;
    }
    return __real_gguf_info_json(f, out);
}

enum gguf_err __real_gguf_safetensors(const struct gguf_file *meta, uint64_t n, gguf_st_get get,
                                      void *ctx, struct gguf_st_layout *out,
                                      struct gguf_diag *diag);
enum gguf_err __wrap_gguf_safetensors(const struct gguf_file *meta, uint64_t n, gguf_st_get get,
                                      void *ctx, struct gguf_st_layout *out,
                                      struct gguf_diag *diag);
enum gguf_err __wrap_gguf_safetensors(const struct gguf_file *meta, uint64_t n, gguf_st_get get,
                                      void *ctx, struct gguf_st_layout *out,
                                      struct gguf_diag *diag)
{
    atomic_fetch_add(&n_safetensors, 1);
    struct state *st = race_take();
    if (st) {
        const struct gguf_st_layout *l = NULL;
        assert_int_equal(core_safetensors(st, &l), 0);
        race_won = l;
    }
    return __real_gguf_safetensors(meta, n, get, ctx, out, diag);
}

enum gguf_err __real_gguf_hf_safetensors(const struct gguf_file *meta, const struct gguf_hf *hf,
                                         struct gguf_st_layout *out, struct gguf_diag *diag);
enum gguf_err __wrap_gguf_hf_safetensors(const struct gguf_file *meta, const struct gguf_hf *hf,
                                         struct gguf_st_layout *out, struct gguf_diag *diag);
enum gguf_err __wrap_gguf_hf_safetensors(const struct gguf_file *meta, const struct gguf_hf *hf,
                                         struct gguf_st_layout *out, struct gguf_diag *diag)
{
    atomic_fetch_add(&n_hf_safetensors, 1);
    struct state *st = race_take();
    if (st) {
        const struct gguf_st_layout *l = NULL;
        assert_int_equal(core_hf_safetensors(st, &l), 0);
        race_won = l;
    }
    return __real_gguf_hf_safetensors(meta, hf, out, diag);
}

int __real_gguf_hf_tokenizer_json(const struct gguf_file *gf, struct gguf_buf *out, char *why,
                                  size_t whylen);
int __wrap_gguf_hf_tokenizer_json(const struct gguf_file *gf, struct gguf_buf *out, char *why,
                                  size_t whylen);
int __wrap_gguf_hf_tokenizer_json(const struct gguf_file *gf, struct gguf_buf *out, char *why,
                                  size_t whylen)
{
    atomic_fetch_add(&n_tokenizer, 1);
    struct state *st = race_take();
    if (st) {
        const char *d = NULL;
        size_t len = 0;
        int e = core_hf_text(st, VS_HF_TOKENIZER, &d, &len);
        assert_true(e == 0 || e == ENOENT);
        race_won = st->hf_tok[0];
    }
    return __real_gguf_hf_tokenizer_json(gf, out, why, whylen);
}

/* The name tables' failures on demand: gguf_ntab_init succeeding with
 * the memory spent right after it (so that the next allocation fails),
 * gguf_ntab_add failing once its countdown reaches 0 (-1: never). */
static bool starve_after_init;
static int ntab_add_fail_in = -1;

enum gguf_err __real_gguf_ntab_init(struct gguf_ntab *t, uint64_t expect, gguf_ntab_key_fn key_of,
                                    const void *ctx);
enum gguf_err __wrap_gguf_ntab_init(struct gguf_ntab *t, uint64_t expect, gguf_ntab_key_fn key_of,
                                    const void *ctx);
enum gguf_err __wrap_gguf_ntab_init(struct gguf_ntab *t, uint64_t expect, gguf_ntab_key_fn key_of,
                                    const void *ctx)
{
    enum gguf_err e = __real_gguf_ntab_init(t, expect, key_of, ctx);
    if (starve_after_init) {
        starve_after_init = false;
        mem_cap = 0;
    }
    return e;
}

enum gguf_err __real_gguf_ntab_add(struct gguf_ntab *t, uint64_t value, uint64_t *prev);
enum gguf_err __wrap_gguf_ntab_add(struct gguf_ntab *t, uint64_t value, uint64_t *prev);
enum gguf_err __wrap_gguf_ntab_add(struct gguf_ntab *t, uint64_t value, uint64_t *prev)
{
    if (ntab_add_fail_in == 0) {
        ntab_add_fail_in = -1;
        return GGUF_E_NOMEM;
    }
    if (ntab_add_fail_in > 0)
        ntab_add_fail_in--;
    return __real_gguf_ntab_add(t, value, prev);
}

/* The state lock's read side, counted (core_state_current takes it). */
static pthread_rwlock_t *watched_lock;
static atomic_uint n_rdlock;
int __real_pthread_rwlock_rdlock(pthread_rwlock_t *l);
int __wrap_pthread_rwlock_rdlock(pthread_rwlock_t *l);
int __wrap_pthread_rwlock_rdlock(pthread_rwlock_t *l)
{
    if (l == watched_lock)
        atomic_fetch_add(&n_rdlock, 1);
    return __real_pthread_rwlock_rdlock(l);
}

/* ---- a llama model ----------------------------------------------------------------------- */

static const char *const vocab[] = { "a", "b", "ab", "<|endoftext|>" };
static const char *const merges[] = { "a b" };

/* general.architecture arch with what hf/ needs for llama (2 blocks of 4
 * heads, 2 KV heads); a byte-level tokenizer when tok. */
#define LLAMA_KVS(arch, tok_model)                                               \
    KSTR("general.architecture", arch), KSTR("general.name", "tiny"),            \
    KU32(arch ".block_count", 2), KU32(arch ".context_length", 2048),            \
    KU32(arch ".attention.head_count", 4), KU32(arch ".attention.head_count_kv", 2), \
    KF32(arch ".attention.layer_norm_rms_epsilon", 1e-5f),                       \
    KU32("tokenizer.ggml.eos_token_id", 3), KSTR("tokenizer.ggml.model", tok_model), \
    KSTRS("tokenizer.ggml.tokens", vocab), KSTRS("tokenizer.ggml.merges", merges)

static const struct tspec llama_tensors[] = {
    { "token_embd.weight", 2, { 16, 4 }, GGML_T_F16 },
    { "blk.0.attn_q.weight", 2, { 16, 32 }, GGML_T_F32 },
    { "blk.0.attn_k.weight", 2, { 32, 16 }, GGML_T_Q8_0 },
    { "blk.0.attn_norm.weight", 1, { 16 }, GGML_T_F32 },
};

static const struct kvspec llama_kvs[] = { LLAMA_KVS("llama", "gpt2") };

/* ---- a state: its tables, its ids, its texts ----------------------------------------- */

/* A state of a llama file: every key and tensor by its file name, ids,
 * the file's attributes, the info text, on the mount's list. */
static void state_tables(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    struct kvspec kv[N(llama_kvs) + 3];
    memcpy(kv, llama_kvs, sizeof llama_kvs);
    /* a key whose name needs escaping, a duplicate, and a key literally
     * named as the duplicate's file name: the later one is hidden */
    kv[N(llama_kvs)] = (struct kvspec)KSTR("odd/key", "x");
    kv[N(llama_kvs) + 1] = (struct kvspec)KSTR("general.name", "again");
    kv[N(llama_kvs) + 2] = (struct kvspec)KSTR("general.name#2", "clash");
    struct mspec ms = { .kv = kv, .nkv = N(kv), .t = llama_tensors, .nt = N(llama_tensors) };
    const char *path = model_file("tables.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    struct gguf_split *m = open_path(path);
    struct state *st = new_state(&fs, m, 0);
    assert_ptr_equal(st->fs, &fs);
    assert_ptr_equal(st->model, m);
    assert_int_equal(st->gen, 0);
    assert_int_equal(atomic_load(&st->refs), 1);
    assert_int_equal(n_states(&fs), 1);

    /* keys: one name each, in the file's order */
    const struct gguf_file *gf = st_meta(st);
    assert_int_equal(st->meta_names.n, gf->n_kv);
    assert_int_equal(gf->n_kv, N(kv));
    assert_string_equal(st->meta_names.names[0], "general.architecture");
    assert_string_equal(st->meta_names.names[N(llama_kvs)], "odd%2Fkey");
    assert_string_equal(st->meta_names.names[N(llama_kvs) + 1], "general.name#2");
    assert_string_equal(st->meta_names.names[N(llama_kvs) + 2], "general.name%232");
    assert_int_equal(core_ntab_find(&st->meta_names, "general.name"), 1);
    assert_int_equal(core_ntab_find(&st->meta_names, "odd%2Fkey"), N(llama_kvs));
    assert_int_equal(core_ntab_find(&st->meta_names, "general.name#2"), N(llama_kvs) + 1);
    assert_int_equal(core_ntab_find(&st->meta_names, "odd/key"), -1);
    assert_int_equal(core_ntab_find(&st->meta_names, "nope"), -1);
    /* every key's id leads back to it */
    assert_int_equal(st->n_ids, gf->n_kv);
    for (uint64_t i = 0; i < gf->n_kv; i++) {
        assert_int_equal(core_key_index(st, st->kv_id[i]), (int64_t)i);
        assert_int_equal(core_key_id(&fs, st->meta_names.names[i]), (int64_t)st->kv_id[i]);
    }
    assert_int_equal(core_key_index(st, st->n_ids), -1);
    assert_int_equal(core_key_index(st, UINT64_MAX), -1);
    /* tensors, by their names */
    assert_int_equal(st->n_tensors, N(llama_tensors));
    assert_int_equal(st->tensor_names.n, N(llama_tensors));
    for (unsigned i = 0; i < N(llama_tensors); i++) {
        assert_string_equal(st->tensor_names.names[i], llama_tensors[i].name);
        assert_int_equal(core_ntab_find(&st->tensor_names, llama_tensors[i].name), i);
        assert_int_equal(st->tens[i].shard, 0);
        assert_ptr_equal(st->tens[i].t, &gf->tensors[i]);
    }
    assert_int_equal(core_ntab_find(&st->tensor_names, "blk.9.x"), -1);
    /* the file: its attributes and signature; all of it is model.gguf */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(st->model_st.st_ino, sb.st_ino);
    assert_int_equal(st->model_st.st_mode, sb.st_mode);
    assert_int_equal(st->sig[0].ino, sb.st_ino);
    assert_int_equal(st->sig[0].dev, sb.st_dev);
    assert_int_equal(st->sig[0].size, sb.st_size);
    assert_int_equal(st->model_size, (uint64_t)sb.st_size);
    assert_int_equal(st->merged.hdr.len, 0);
    /* zero padding: nothing kept */
    assert_null(st->pad);
    assert_false(st->pad_src);
    assert_int_equal(st->hdr_end, gf->data_off);
    /* info: the path, the views, hf/ */
    assert_true(has(st->info.data, st->info.len, path));
    assert_true(has(st->info.data, st->info.len, "views: info.json"));
    assert_true(has(st->info.data, st->info.len, "hf/: the model as a Hugging Face folder (llama)"));
    assert_false(has(st->info.data, st->info.len, "reads the whole model once"));
    assert_false(has(st->info.data, st->info.len, "overlay:"));
    assert_non_null(st->hf);

    /* a key's value as fs/nodes.c renders it on first use: the state's
     * until it is freed */
    struct text *v = malloc(sizeof *v);
    assert_non_null(v);
    v->data = strdup("tiny\n");
    v->len = 5;
    atomic_store(&st->kv_text[1], v);
    core_state_put(st);
    assert_int_equal(n_states(&fs), 0);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
    unlink(path);
}

/* core_sig_take: fstat's facts, false for a descriptor that is not one. */
static void sig_take(void **state)
{
    (void)state;
    const char *path = tpath("sig");
    put_file(path, "12345", 5);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct fsig s;
    assert_true(core_sig_take(fd, &s));
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    assert_int_equal(s.size, 5);
    assert_int_equal(s.ino, sb.st_ino);
    assert_int_equal(s.nlink, 1);
    assert_int_equal(s.mtime.tv_sec, sb.st_mtim.tv_sec);
    assert_int_equal(s.mtime.tv_nsec, sb.st_mtim.tv_nsec);
    close(fd);
    assert_false(core_sig_take(fd, &s));
    assert_false(core_sig_take(-1, &s));
    unlink(path);
}

/* A key's id outlives the versions: the same name keeps it in the next
 * version, a new name gets a new one, a removed name's id finds no key. */
static void key_ids(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    const struct kvspec kv0[] = { KU32("a", 1), KU32("b", 2), KU32("c", 3) };
    const struct kvspec kv1[] = { KU32("d", 4), KU32("c", 3), KU32("b", 2) };
    struct mspec ms0 = { .kv = kv0, .nkv = 3 }, ms1 = { .kv = kv1, .nkv = 3 };
    const char *p0 = model_file("ids0.gguf", &ms0);
    struct mount fs;
    fs_init(&fs, p0);
    struct state *s0 = new_state(&fs, open_path(p0), 0);
    const char *p1 = model_file("ids1.gguf", &ms1);
    struct state *s1 = new_state(&fs, open_path(p1), 1);
    assert_int_equal(n_states(&fs), 2);
    int64_t a = core_key_id(&fs, "a"), b = core_key_id(&fs, "b"), c = core_key_id(&fs, "c"),
            d = core_key_id(&fs, "d");
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    assert_int_equal(c, 2);
    assert_int_equal(d, 3);         /* new in version 1 */
    assert_int_equal(s1->kv_id[0], d);
    assert_int_equal(s1->kv_id[1], c);
    assert_int_equal(s1->kv_id[2], b);
    assert_int_equal(core_key_index(s0, b), 1);
    assert_int_equal(core_key_index(s1, b), 2);
    assert_int_equal(core_key_index(s0, d), -1);   /* registered after s0 */
    assert_int_equal(core_key_index(s1, a), -1);   /* gone in s1 */
    assert_int_equal(core_key_index(s1, d), 0);
    assert_int_equal(s0->n_ids, 3);
    assert_int_equal(s1->n_ids, 4);
    /* the registry grows (past its first table) and never renumbers */
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "k%d", i);
        assert_int_equal(core_key_id(&fs, name), 4 + i);
    }
    assert_int_equal(core_key_id(&fs, "k7"), 11);
    assert_int_equal(core_key_id(&fs, "c"), c);
    assert_int_equal(core_ntab_find(&fs.ids, "k299"), 303);
    /* a name that cannot be kept: -1, and nothing registered */
    size_t live = mem_live;
    mem_cap = 0;
    assert_int_equal(core_key_id(&fs, "new"), -1);
    mem_cap = SIZE_MAX;
    assert_int_equal(mem_live, live);
    assert_int_equal(core_key_id(&fs, "new"), 304);
    /* names that fail to register fail alone: asked again (with more
     * memory each time) they get the next id, and every name registered
     * before keeps its id.  At 512 names the list of names grows (to 8
     * KiB) and so do the name table's slots (to 16 KiB): both refuse */
    unsigned refused = 0;
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "m%d", i);
        int64_t id;
        for (mem_cap = 64; (id = core_key_id(&fs, name)) < 0; mem_cap *= 2) {
            refused++;
            assert_int_equal(core_ntab_find(&fs.ids, name), -1);
        }
        mem_cap = SIZE_MAX;
        assert_int_equal(id, 305 + i);
    }
    assert_true(refused >= 2);
    ntab_add_fail_in = 0;
    assert_int_equal(core_key_id(&fs, "added-later"), -1);
    assert_int_equal(core_key_id(&fs, "added-later"), 605);
    for (int i = 0; i < 300; i++) {
        char name[32];
        snprintf(name, sizeof name, "k%d", i);
        assert_int_equal(core_key_id(&fs, name), 4 + i);
        snprintf(name, sizeof name, "m%d", i);
        assert_int_equal(core_key_id(&fs, name), 305 + i);
    }
    core_state_put(s1);
    core_state_put(s0);
    fs_fini(&fs);
    /* a registry's first table that cannot be made */
    fs_init(&fs, p0);
    mem_cap = 0;
    assert_int_equal(core_key_id(&fs, "a"), -1);
    mem_cap = SIZE_MAX;
    assert_int_equal(core_key_id(&fs, "a"), 0);
    fs_fini(&fs);
    /* the first table made, the list of names not: nothing kept (the
     * table is made again by the next call) */
    fs_init(&fs, p0);
    starve_after_init = true;
    assert_int_equal(core_key_id(&fs, "a"), -1);
    mem_cap = SIZE_MAX;
    assert_int_equal(core_key_id(&fs, "a"), 0);
    assert_int_equal(core_key_id(&fs, "b"), 1);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
    unlink(p0);
    unlink(p1);
}

/* ---- references ------------------------------------------------------------------------ */

static struct state *handed[4];
static unsigned n_handed;
static bool later_takes;

static bool free_later(struct mount *fs, struct state *st)
{
    assert_ptr_equal(st->fs, fs);
    assert_int_equal(atomic_load(&st->refs), 0);
    assert_true(n_handed < N(handed));
    handed[n_handed++] = st;
    return later_takes;
}

/* ref/put count; the last put takes the state off the list and frees it,
 * or hands it to free_later (which frees it, or gives it back to be
 * freed); by_gen finds a live version only. */
static void refs(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    struct mspec ms = { .nt = 1, .t = llama_tensors };
    const char *path = model_file("refs.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    struct state *s0 = new_state(&fs, open_path(path), 0);
    struct state *s1 = new_state(&fs, open_path(path), 1);
    assert_int_equal(n_states(&fs), 2);
    assert_ptr_equal(core_state_ref(s0), s0);
    assert_int_equal(atomic_load(&s0->refs), 2);
    /* by_gen: a live version, with a reference */
    assert_ptr_equal(core_state_by_gen(&fs, 0), s0);
    assert_int_equal(atomic_load(&s0->refs), 3);
    assert_ptr_equal(core_state_by_gen(&fs, 1), s1);
    assert_int_equal(atomic_load(&s1->refs), 2);
    assert_null(core_state_by_gen(&fs, 2));
    core_state_put(s0);
    core_state_put(s0);
    core_state_put(s1);
    assert_int_equal(atomic_load(&s0->refs), 1);
    assert_int_equal(n_states(&fs), 2);
    core_state_put(NULL);
    /* a version whose count reached 0 (its last put not done yet) is not
     * found: it is on its way out */
    atomic_store(&s1->refs, 0);
    assert_null(core_state_by_gen(&fs, 1));
    atomic_store(&s1->refs, 1);
    assert_ptr_equal(core_state_by_gen(&fs, 1), s1);
    core_state_put(s1);

    /* the last put with free_later taking the state: off the list, not
     * freed until free_later's owner frees it */
    size_t held = mem_live;
    later_takes = true;
    n_handed = 0;
    atomic_store(&fs.free_later, free_later);
    core_state_put(s1);
    assert_int_equal(n_handed, 1);
    assert_ptr_equal(handed[0], s1);
    assert_int_equal(n_states(&fs), 1);
    assert_null(core_state_by_gen(&fs, 1));
    assert_int_equal(mem_live, held);
    core_state_free(handed[0]);
    assert_true(mem_live < held);
    /* free_later declining: the caller frees it */
    later_takes = false;
    held = mem_live;
    core_state_put(s0);
    assert_int_equal(n_handed, 2);
    assert_ptr_equal(handed[1], s0);
    assert_true(mem_live < held);
    assert_int_equal(n_states(&fs), 0);
    assert_null(core_state_by_gen(&fs, 0));
    atomic_store(&fs.free_later, NULL);
    core_state_free(NULL);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
    unlink(path);
}

/* core_state_current: fs->st with a reference, taken under the state lock
 * (read); several threads at once. */
struct cur_arg {
    struct mount *fs;
    pthread_barrier_t *go;
    struct state *got;
};

static void *cur_thread(void *p)
{
    struct cur_arg *a = p;
    pthread_barrier_wait(a->go);
    a->got = core_state_current(a->fs);
    return NULL;
}

static void current(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    struct mspec ms = { .nt = 1, .t = llama_tensors };
    const char *path = model_file("cur.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    fs.st = new_state(&fs, open_path(path), 0);
    watched_lock = &fs.lock;
    atomic_store(&n_rdlock, 0);
    struct state *st = core_state_current(&fs);
    assert_ptr_equal(st, fs.st);
    assert_int_equal(atomic_load(&st->refs), 2);
    assert_int_equal(atomic_load(&n_rdlock), 1);
    /* the lock is free again: a writer gets it */
    assert_int_equal(pthread_rwlock_trywrlock(&fs.lock), 0);
    pthread_rwlock_unlock(&fs.lock);
    core_state_put(st);
    enum { T = 4 };
    pthread_t th[T];
    struct cur_arg a[T];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, T);
    for (int i = 0; i < T; i++) {
        a[i] = (struct cur_arg){ &fs, &go, NULL };
        assert_int_equal(pthread_create(&th[i], NULL, cur_thread, &a[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_ptr_equal(a[i].got, fs.st);
    }
    pthread_barrier_destroy(&go);
    assert_int_equal(atomic_load(&n_rdlock), 1 + T);
    assert_int_equal(atomic_load(&fs.st->refs), 1 + T);
    for (int i = 0; i < T; i++)
        core_state_put(a[i].got);
    watched_lock = NULL;
    core_state_put(fs.st);
    fs.st = NULL;
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
    unlink(path);
}

/* ---- info.json -------------------------------------------------------------------------- */

struct json_arg {
    struct state *st;
    pthread_barrier_t *go;
    const struct text *got;
    int e;
};

static void *json_thread(void *p)
{
    struct json_arg *a = p;
    pthread_barrier_wait(a->go);
    a->e = core_info_json(a->st, &a->got);
    return NULL;
}

/* Made on first use, kept: the same copy for every caller, however many
 * ask at once; a caller that loses the race gets the winner's. */
static void info_json(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    struct mspec ms = { .kv = llama_kvs, .nkv = N(llama_kvs), .t = llama_tensors,
                        .nt = N(llama_tensors) };
    const char *path = model_file("json.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    struct state *st = new_state(&fs, open_path(path), 0);
    assert_null(atomic_load(&st->info_json));   /* nobody asked yet */
    enum { T = 6 };
    pthread_t th[T];
    struct json_arg a[T];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, T);
    atomic_store(&n_info_json, 0);
    for (int i = 0; i < T; i++) {
        a[i] = (struct json_arg){ st, &go, NULL, -1 };
        assert_int_equal(pthread_create(&th[i], NULL, json_thread, &a[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&go);
    const struct text *t = atomic_load(&st->info_json);
    assert_non_null(t);
    for (int i = 0; i < T; i++) {
        assert_int_equal(a[i].e, 0);
        assert_ptr_equal(a[i].got, t);
    }
    unsigned made = atomic_load(&n_info_json);
    assert_true(made >= 1 && made <= T);
    assert_true(t->len > 2 && t->data[0] == '{');
    assert_true(has(t->data, t->len, "blk.0.attn_k.weight"));
    assert_true(has(t->data, t->len, "general.architecture"));
    /* asked again: the kept copy, nothing made */
    const struct text *again = NULL;
    assert_int_equal(core_info_json(st, &again), 0);
    assert_ptr_equal(again, t);
    assert_int_equal(atomic_load(&n_info_json), made);
    core_state_put(st);

    /* a caller that loses the race: its copy freed, the winner's given */
    st = new_state(&fs, open_path(path), 1);
    race_st = st;
    race_won = NULL;
    const struct text *got = NULL;
    assert_int_equal(core_info_json(st, &got), 0);
    assert_non_null(race_won);
    assert_ptr_equal(got, race_won);
    assert_ptr_equal(atomic_load(&st->info_json), got);
    core_state_put(st);

    /* out of memory: ENOMEM, nothing kept or leaked, and the next call
     * makes it */
    st = new_state(&fs, open_path(path), 2);
    unsigned failed = 0;
    for (size_t cap = 0; cap < 65536; cap = cap * 2 + 1) {
        size_t live = mem_live;
        mem_cap = cap;
        int e = core_info_json(st, &got);
        mem_cap = SIZE_MAX;
        if (e == 0)
            break;
        failed++;
        assert_int_equal(e, ENOMEM);
        assert_null(atomic_load(&st->info_json));
        assert_int_equal(mem_live, live);
    }
    assert_true(failed > 0);
    assert_int_equal(core_info_json(st, &got), 0);
    assert_non_null(got);
    assert_ptr_equal(atomic_load(&st->info_json), got);
    core_state_put(st);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
    unlink(path);
}

/* ---- model.safetensors ------------------------------------------------------------------ */

static void safetensors(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    struct mspec ms = { .kv = llama_kvs, .nkv = N(llama_kvs), .t = llama_tensors,
                        .nt = N(llama_tensors) };
    const char *path = model_file("st.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    struct state *st = new_state(&fs, open_path(path), 0);
    assert_null(atomic_load(&st->safetensors));
    atomic_store(&n_safetensors, 0);
    const struct gguf_st_layout *l = NULL, *l2 = NULL;
    assert_int_equal(core_safetensors(st, &l), 0);
    assert_non_null(l);
    /* every tensor, the header padded as safetensors' readers want */
    assert_int_equal(l->n_span, N(llama_tensors));
    assert_int_equal(l->hdr.len % 8, 0);
    assert_true(l->size > l->hdr.len);
    assert_true(has(l->hdr.data, l->hdr.len, "\"blk.0.attn_k.weight\""));
    assert_true(has(l->hdr.data, l->hdr.len, "\"general.name\":\"tiny\""));
    assert_int_equal(core_safetensors(st, &l2), 0);
    assert_ptr_equal(l2, l);
    assert_int_equal(atomic_load(&n_safetensors), 1);
    core_state_put(st);

    /* a caller that loses the race */
    st = new_state(&fs, open_path(path), 1);
    race_st = st;
    race_won = NULL;
    assert_int_equal(core_safetensors(st, &l), 0);
    assert_non_null(race_won);
    assert_ptr_equal(l, race_won);
    core_state_put(st);

    /* out of memory: ENOMEM, nothing logged, kept or leaked */
    st = new_state(&fs, open_path(path), 2);
    log_reset();
    for (size_t cap = 0; cap < 65536; cap = cap * 2 + 1) {
        size_t live = mem_live;
        mem_cap = cap;
        int e = core_safetensors(st, &l);
        mem_cap = SIZE_MAX;
        if (e == 0)
            break;
        assert_int_equal(e, ENOMEM);
        assert_null(atomic_load(&st->safetensors));
        assert_int_equal(mem_live, live);
    }
    assert_int_equal(n_logged, 0);
    assert_int_equal(core_safetensors(st, &l), 0);
    assert_ptr_equal(atomic_load(&st->safetensors), l);
    core_state_put(st);
    core_log_set(NULL);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
    unlink(path);
}

/* A model whose views do not fit an off_t (a source claiming 4.9e18 bytes
 * of Q8_0: the f32 view is 2^64 bytes): model.safetensors and
 * hf/model.safetensors are EFBIG, logged with the tensor's name, and
 * stay unmade; the rest of the state is there. */
static void too_large(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    uint64_t rows = (uint64_t)1 << 57;
    const struct kvspec kv[] = { KSTR("general.architecture", "llama"),
                                 KU32("llama.block_count", 1) };
    const struct tspec ts[] = { { "token_embd.weight", 2, { 32, rows }, GGML_T_Q8_0 } };
    struct mspec ms = { .kv = kv, .nkv = N(kv), .t = ts, .nt = 1 };
    struct mount fs;
    fs_init(&fs, "huge.gguf");
    /* the data is not written: the source says it is there (zeros) */
    uint64_t data = 0;
    ms.data_size = &data;
    struct gb b = model_bytes(&ms, false);
    free(b.p);
    mem_no_data = true;
    struct state *st = new_state(&fs, open_mem("huge.gguf", &ms, data), 0);
    assert_true(st->model_size > ((uint64_t)1 << 62));
    log_reset();
    const struct gguf_st_layout *l = NULL;
    assert_int_equal(core_safetensors(st, &l), EFBIG);
    assert_int_equal(logged_level, LOG_ERR);
    assert_non_null(strstr(logged, "model.safetensors: "));
    assert_non_null(strstr(logged, "token_embd.weight"));
    assert_null(atomic_load(&st->safetensors));
    assert_non_null(st->hf);
    log_reset();
    assert_int_equal(core_hf_safetensors(st, &l), EFBIG);
    assert_non_null(strstr(logged, "hf/model.safetensors: "));
    assert_non_null(strstr(logged, "model.embed_tokens.weight"));
    uint64_t size = 0;
    assert_int_equal(core_hf_size(st, VS_HF_SAFETENSORS, &size), EFBIG);
    assert_null(atomic_load(&st->hf_st));
    core_log_set(NULL);
    core_state_put(st);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
}

/* ---- hf/ -------------------------------------------------------------------------------- */

/* A llama model with a byte-level tokenizer: every file of hf/, their
 * texts and sizes, hf/model.safetensors made once. */
static void hf_llama(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    struct mspec ms = { .kv = llama_kvs, .nkv = N(llama_kvs), .t = llama_tensors,
                        .nt = N(llama_tensors) };
    const char *path = model_file("hf.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    struct state *st = new_state(&fs, open_path(path), 0);
    assert_non_null(st->hf);
    assert_string_equal(st->hf->model_type, "llama");
    assert_int_equal(core_hf_files_n, 5);
    for (unsigned i = 0; i < core_hf_files_n; i++) {
        enum version_slot s = core_hf_files[i].slot;
        assert_true(s >= VS_HF_CONFIG && s < VERSION_STRIDE);
        assert_true(core_hf_has(st, s));
        uint64_t size = 0;
        assert_int_equal(core_hf_size(st, s, &size), 0);
        assert_true(size > 0);
        if (s == VS_HF_SAFETENSORS)
            continue;
        const char *d = NULL;
        size_t len = 0;
        assert_int_equal(core_hf_text(st, s, &d, &len), 0);
        assert_int_equal(len, size);
    }
    assert_string_equal(core_hf_files[0].name, "config.json");
    assert_false(core_hf_has(st, VS_INFO));
    assert_false(core_hf_has(st, VS_SAFETENSORS));
    assert_false(core_hf_has(st, VERSION_STRIDE));
    const char *d;
    size_t len;
    assert_int_equal(core_hf_text(st, VS_HF_CONFIG, &d, &len), 0);
    assert_true(has(d, len, "\"model_type\": \"llama\""));
    assert_true(has(d, len, "\"num_key_value_heads\": 2"));
    assert_ptr_equal(d, st->hf->config.data);
    assert_int_equal(core_hf_text(st, VS_HF_GENERATION, &d, &len), 0);
    assert_true(has(d, len, "\"eos_token_id\": 3"));
    assert_int_equal(core_hf_text(st, VS_HF_TOKENIZER, &d, &len), 0);
    assert_true(has(d, len, "\"merges\""));
    const char *tok = d;
    assert_int_equal(core_hf_text(st, VS_HF_TOKENIZER_CONFIG, &d, &len), 0);
    assert_true(has(d, len, "\"tokenizer_class\""));
    /* made once, kept */
    atomic_store(&n_tokenizer, 0);
    assert_int_equal(core_hf_text(st, VS_HF_TOKENIZER, &d, &len), 0);
    assert_ptr_equal(d, tok);
    assert_int_equal(atomic_load(&n_tokenizer), 0);
    /* no text for the safetensors file, nor for a slot that is not hf/'s */
    assert_int_equal(core_hf_text(st, VS_HF_SAFETENSORS, &d, &len), ENOENT);
    assert_int_equal(core_hf_text(st, VS_INFO, &d, &len), ENOENT);
    uint64_t size;
    assert_int_equal(core_hf_size(st, VS_INFO, &size), ENOENT);
    /* hf/model.safetensors: laid out once */
    atomic_store(&n_hf_safetensors, 0);
    const struct gguf_st_layout *l = NULL, *l2 = NULL;
    assert_int_equal(core_hf_safetensors(st, &l), 0);
    assert_int_equal(core_hf_safetensors(st, &l2), 0);
    assert_ptr_equal(l, l2);
    assert_int_equal(atomic_load(&n_hf_safetensors), 0);   /* made by core_hf_size above */
    assert_int_equal(core_hf_size(st, VS_HF_SAFETENSORS, &size), 0);
    assert_int_equal(size, l->size);
    assert_true(has(l->hdr.data, l->hdr.len, "model.layers.0.self_attn.q_proj.weight"));
    assert_true(has(l->hdr.data, l->hdr.len, "model.embed_tokens.weight"));
    core_state_put(st);

    /* callers that lose the races: the winners' copies */
    st = new_state(&fs, open_path(path), 1);
    race_st = st;
    race_won = NULL;
    assert_int_equal(core_hf_safetensors(st, &l), 0);
    assert_ptr_equal(l, race_won);
    race_st = st;
    race_won = NULL;
    assert_int_equal(core_hf_text(st, VS_HF_TOKENIZER, &d, &len), 0);
    assert_non_null(race_won);
    assert_ptr_equal(d, ((const struct text *)race_won)->data);
    core_state_put(st);

    /* out of memory: ENOMEM, nothing kept or leaked, the next call works */
    st = new_state(&fs, open_path(path), 2);
    log_reset();
    for (int slot = 0; slot < 3; slot++) {
        for (size_t cap = 0; cap < 65536; cap = cap * 2 + 1) {
            size_t live = mem_live;
            mem_cap = cap;
            int e = slot == 0   ? core_hf_safetensors(st, &l)
                    : slot == 1 ? core_hf_text(st, VS_HF_TOKENIZER, &d, &len)
                                : core_hf_text(st, VS_HF_TOKENIZER_CONFIG, &d, &len);
            mem_cap = SIZE_MAX;
            if (e == 0)
                break;
            assert_int_equal(e, ENOMEM);
            assert_int_equal(mem_live, live);
        }
    }
    assert_int_equal(n_logged, 0);
    assert_int_equal(core_hf_safetensors(st, &l), 0);
    assert_ptr_equal(atomic_load(&st->hf_st), l);
    assert_non_null(atomic_load(&st->hf_tok[0]));
    assert_non_null(atomic_load(&st->hf_tok[1]));
    core_log_set(NULL);
    core_state_put(st);
    /* core_hf_has: a tokenizer file that cannot be made now is not there
     * (nothing kept: it is made when asked again) */
    st = new_state(&fs, open_path(path), 3);
    mem_cap = 0;
    assert_false(core_hf_has(st, VS_HF_TOKENIZER));
    assert_true(core_hf_has(st, VS_HF_CONFIG));
    mem_cap = SIZE_MAX;
    assert_null(atomic_load(&st->hf_tok[0]));
    assert_true(core_hf_has(st, VS_HF_TOKENIZER));
    assert_true(core_hf_has(st, VS_HF_TOKENIZER_CONFIG));
    core_state_put(st);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
    unlink(path);
}

/* hf/ without a tokenizer the HF files can express: config.json and the
 * weights, no tokenizer files (said once); an architecture hf/ cannot
 * show: no hf/ at all, and info says why. */
static void hf_absent(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    const struct kvspec notok[] = { KSTR("general.architecture", "llama"),
                                    KU32("llama.block_count", 2),
                                    KSTR("tokenizer.ggml.model", "bpe-of-my-own") };
    struct mspec ms = { .kv = notok, .nkv = N(notok), .t = llama_tensors, .nt = 1 };
    const char *path = model_file("notok.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    struct state *st = new_state(&fs, open_path(path), 0);
    assert_non_null(st->hf);
    assert_true(core_hf_has(st, VS_HF_CONFIG));
    assert_true(core_hf_has(st, VS_HF_SAFETENSORS));
    log_reset();
    assert_false(core_hf_has(st, VS_HF_TOKENIZER));
    assert_false(core_hf_has(st, VS_HF_TOKENIZER_CONFIG));
    const char *d;
    size_t len;
    assert_int_equal(core_hf_text(st, VS_HF_TOKENIZER, &d, &len), ENOENT);
    assert_int_equal(core_hf_text(st, VS_HF_TOKENIZER_CONFIG, &d, &len), ENOENT);
    uint64_t size;
    assert_int_equal(core_hf_size(st, VS_HF_TOKENIZER, &size), ENOENT);
    assert_int_equal(n_logged, 1);      /* once per version */
    assert_int_equal(logged_level, LOG_INFO);
    assert_non_null(strstr(logged, "hf/: no tokenizer.json: "));
    assert_non_null(strstr(logged, "bpe-of-my-own"));
    core_log_set(NULL);
    core_state_put(st);
    unlink(path);

    const struct kvspec bert[] = { KSTR("general.architecture", "bert"), KU32("bert.block_count", 2) };
    ms = (struct mspec){ .kv = bert, .nkv = N(bert), .t = llama_tensors, .nt = 1 };
    path = model_file("bert.gguf", &ms);
    st = new_state(&fs, open_path(path), 1);
    assert_null(st->hf);
    assert_non_null(strstr(st->hf_why, "architecture 'bert'"));
    assert_null(strchr(st->hf_why, '\n'));
    char line[300];
    snprintf(line, sizeof line, "%s (no hf/)\n", st->hf_why);
    assert_true(has(st->info.data, st->info.len, line));
    for (unsigned i = 0; i < core_hf_files_n; i++) {
        assert_false(core_hf_has(st, core_hf_files[i].slot));
        assert_int_equal(core_hf_size(st, core_hf_files[i].slot, &size), ENOENT);
    }
    assert_int_equal(core_hf_text(st, VS_HF_CONFIG, &d, &len), ENOENT);
    const struct gguf_st_layout *l;
    assert_int_equal(core_hf_safetensors(st, &l), ENOENT);
    core_state_put(st);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
    unlink(path);
}

/* ---- tensors' files ---------------------------------------------------------------------- */

static const struct tspec typed[] = {
    { "f32", 2, { 8, 2 }, GGML_T_F32 },     { "f16", 1, { 16 }, GGML_T_F16 },
    { "q8_0", 1, { 32 }, GGML_T_Q8_0 },     { "q2_k", 1, { 256 }, GGML_T_Q2_K },
    { "i8", 1, { 8 }, GGML_T_I8 },          { "i16", 1, { 8 }, GGML_T_I16 },
    { "i32", 1, { 8 }, GGML_T_I32 },        { "i64", 1, { 8 }, GGML_T_I64 },
    { "f64", 1, { 8 }, GGML_T_F64 },        { "bf16", 1, { 8 }, GGML_T_BF16 },
    { "removed", 1, { 8 }, 4 },             { "last", 1, { 8 }, GGML_T_F32 },
};
enum { T_F32, T_F16, T_Q8_0, T_Q2_K, T_I8, T_I16, T_I32, T_I64, T_F64, T_BF16, T_REMOVED };

/* Which files each type has, by byte order; NPY headers. */
static void tensor_files(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    static const char *const le_descr[] = { "<f4", "<f2", NULL, NULL, "|i1", "<i2", "<i4",
                                            "<i8", "<f8", NULL, NULL };
    static const char *const be_descr[] = { ">f4", ">f2", NULL, NULL, "|i1", ">i2", ">i4",
                                            ">i8", ">f8", NULL, NULL };
    for (int be = 0; be < 2; be++) {
        struct mspec ms = { .be = be, .kv = llama_kvs, .nkv = 1, .t = typed, .nt = N(typed) };
        const char *path = model_file(be ? "be.gguf" : "le.gguf", &ms);
        struct mount fs;
        fs_init(&fs, path);
        struct state *st = new_state(&fs, open_path(path), 0);
        assert_int_equal(st_meta(st)->enc.big_endian, be);
        for (uint64_t i = 0; i < T_REMOVED + 1; i++) {
            const char *want = (be ? be_descr : le_descr)[i];
            const char *descr = core_npy_descr(st, i);
            if (want)
                assert_string_equal(descr, want);
            else
                assert_null(descr);
            /* always there */
            assert_true(core_tensor_has(st, i, TF_DIR));
            assert_true(core_tensor_has(st, i, TF_RAW));
            assert_true(core_tensor_has(st, i, TF_TYPE));
            assert_true(core_tensor_has(st, i, TF_SHAPE));
            assert_true(core_tensor_has(st, i, TF_XXH64));
            assert_true(core_tensor_has(st, i, TF_SHA256));
            assert_int_equal(core_tensor_has(st, i, TF_RAW_NPY), want != NULL);
            /* f32 views: types with a dequantizer, every one here but the
             * removed id (a big-endian file: those whose big-endian layout
             * is known, not q2_K's) */
            bool f32 = i != T_REMOVED && !(be && i == T_Q2_K);
            assert_int_equal(core_tensor_has(st, i, TF_F32), f32);
            assert_int_equal(core_tensor_has(st, i, TF_F32_NPY), f32);
            assert_int_equal(core_tensor_has(st, i, TF_STATS), f32);
            assert_int_equal(core_f32_is_raw(st, i), i == T_F32 && !be);
            /* NPY headers: whole lines of 64, NUMPY's magic; none without
             * the file */
            char buf[NPY_HEADER_MAX];
            for (int tf = TF_RAW_NPY; tf <= TF_F32_NPY; tf++) {
                memset(buf, 0, sizeof buf);
                size_t n = core_npy_header(st, i, tf, buf);
                bool there = core_tensor_has(st, i, tf);
                if (!there) {
                    assert_int_equal(n, 0);
                    continue;
                }
                assert_true(n > 0 && n <= NPY_HEADER_MAX);
                assert_int_equal(n % 64, 0);
                assert_memory_equal(buf, "\x93NUMPY\x01\x00", 8);
                assert_int_equal(buf[n - 1], '\n');
                const char *dt = tf == TF_F32_NPY ? "<f4" : want;
                char expect[32];
                snprintf(expect, sizeof expect, "'descr': '%s'", dt);
                assert_true(has(buf, n, expect));
            }
        }
        /* the shape, in numpy's order */
        char buf[NPY_HEADER_MAX];
        size_t n = core_npy_header(st, T_F32, TF_RAW_NPY, buf);
        assert_true(has(buf, n, "'shape': (2, 8)"));
        core_state_put(st);
        fs_fini(&fs);
        unlink(path);
    }
    assert_int_equal(mem_live, live0);
}

/* ---- the padding after the header -------------------------------------------------------- */

/* Non-zero padding is kept (an in-place edit rewrites it); megabytes of
 * it are read from the file instead; zeros are not kept. */
static void padding(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    struct mspec ms = { .kv = llama_kvs, .nkv = 2, .t = llama_tensors, .nt = 1, .pad = 0xab,
                        .align = 256 };
    const char *path = model_file("pad.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    struct state *st = new_state(&fs, open_path(path), 0);
    const struct gguf_file *gf = st_meta(st);
    uint64_t n = gf->data_off - gf->hdr_size;
    assert_true(n > 0);
    assert_int_equal(st->hdr_end, gf->data_off);
    assert_non_null(st->pad);
    assert_false(st->pad_src);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(st->pad[i], 0xab);
    core_state_put(st);
    unlink(path);

    /* 4 MiB of padding: more than kept and more than the parser read */
    ms.align = 4u << 20;
    path = model_file("bigpad.gguf", &ms);
    st = new_state(&fs, open_path(path), 1);
    gf = st_meta(st);
    assert_true(gf->data_off - gf->hdr_size > (1u << 20));
    assert_null(st->pad);
    assert_true(st->pad_src);
    core_state_put(st);
    /* the same of zeros: nothing kept, nothing to read */
    ms.pad = 0;
    path = model_file("bigpad.gguf", &ms);
    st = new_state(&fs, open_path(path), 2);
    assert_null(st->pad);
    assert_false(st->pad_src);
    core_state_put(st);
    unlink(path);

    /* a file without tensors that ends inside its padding: the padding
     * is what there is of it */
    ms.pad = 0xab;
    ms.align = 4096;
    ms.nt = 0;
    struct gb b = model_bytes(&ms, true);
    path = tpath("cut.gguf");
    put_file(path, b.p, b.len - 1000);
    free(b.p);
    st = new_state(&fs, open_path(path), 3);
    gf = st_meta(st);
    assert_int_equal(gf->file_size, b.len - 1000);
    assert_int_equal(st->hdr_end, gf->file_size);
    assert_true(st->hdr_end < gf->data_off);
    assert_non_null(st->pad);
    core_state_put(st);
    unlink(path);

    /* zero padding that cannot be read (a source failing 3 MiB in): the
     * error, nothing listed, the model still the caller's */
    ms.align = 4u << 20;
    ms.nt = 1;
    ms.pad = 0;
    mem_fail_from = 3u << 20;
    struct gguf_split *m = open_mem("failing.gguf", &ms, 0);
    struct state *none = (struct state *)1;
    assert_int_equal(core_state_new(&fs, m, 4, &none), EIO);
    assert_null(none);
    assert_int_equal(m->n, 1);
    gguf_split_close(m);
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
}

/* ---- split, version 1, remote ------------------------------------------------------------ */

static const char *shard_path(unsigned k, unsigned count, bool v1)
{
    char n[64];
    snprintf(n, sizeof n, "%s-%05u-of-%05u.gguf", v1 ? "v1" : "m", k + 1, count);
    return tpath(n);
}

static void write_shards(unsigned count, bool v1)
{
    for (unsigned k = 0; k < count; k++) {
        struct kvspec kv[4 + N(llama_kvs)];
        unsigned n = 0;
        if (k == 0)
            for (unsigned i = 0; i < N(llama_kvs); i++)
                kv[n++] = llama_kvs[i];
        kv[n++] = (struct kvspec)KU32("split.no", k);
        kv[n++] = (struct kvspec)KU32("split.count", count);
        if (k == 0)
            kv[n++] = (struct kvspec)KU32("split.tensors.count", N(llama_tensors));
        /* the tensors dealt over the shards */
        struct tspec ts[N(llama_tensors)];
        unsigned nt = 0;
        for (unsigned i = 0; i < N(llama_tensors); i++)
            if (i % count == k)
                ts[nt++] = llama_tensors[i];
        struct mspec ms = { .version = v1 ? 1 : 3, .kv = kv, .nkv = n, .t = ts, .nt = nt };
        struct gb b = model_bytes(&ms, true);
        put_file(shard_path(k, count, v1), b.p, b.len);
        free(b.p);
    }
}

/* A model of shards: one version of all of them, tensors shard by shard,
 * shown merged (model.gguf's size, info, info.json). */
static void split(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    for (int v1 = 0; v1 < 2; v1++) {
        write_shards(2, v1);
        const char *path = shard_path(0, 2, v1);
        struct mount fs;
        fs_init(&fs, path);
        struct state *st = new_state(&fs, open_path(path), 0);
        assert_int_equal(st->model->n, 2);
        assert_int_equal(st->n_tensors, N(llama_tensors));
        assert_true(st->merged.hdr.len > 0);
        assert_int_equal(st->model_size, st->merged.size);
        assert_null(st->pad);
        for (unsigned k = 0; k < 2; k++) {
            struct stat sb;
            assert_int_equal(stat(shard_path(k, 2, v1), &sb), 0);
            assert_int_equal(st->sig[k].ino, sb.st_ino);
        }
        /* shard by shard: 0 and 2 in the first, 1 and 3 in the second */
        const char *order[] = { "token_embd.weight", "blk.0.attn_k.weight",
                                "blk.0.attn_q.weight", "blk.0.attn_norm.weight" };
        for (unsigned j = 0; j < 4; j++) {
            assert_string_equal(st->tensor_names.names[j], order[j]);
            assert_int_equal(st->tens[j].shard, j / 2);
        }
        /* the keys are the first shard's (split.* included: meta/ shows
         * the first shard's file) */
        assert_true(core_ntab_find(&st->meta_names, "split.count") >= 0);
        assert_true(has(st->info.data, st->info.len, "split model of 2 shards: "));
        assert_true(has(st->info.data, st->info.len, shard_path(1, 2, v1)));
        assert_int_equal(has(st->info.data, st->info.len, "the shards are GGUF version 1"), v1);
        /* tensor.c: a tensor of the second shard */
        assert_true(core_tensor_has(st, 3, TF_F32));
        assert_true(core_f32_is_raw(st, 3));
        const struct text *t = NULL;
        assert_int_equal(core_info_json(st, &t), 0);
        assert_true(has(t->data, t->len, "blk.0.attn_norm.weight"));
        assert_false(has(t->data, t->len, "split.count"));   /* merged: split.* dropped */
        const struct gguf_st_layout *l;
        assert_int_equal(core_safetensors(st, &l), 0);
        assert_int_equal(l->n_span, 4);
        core_state_put(st);

        /* info.json of a merged header that does not parse: EIO, logged;
         * without memory to parse it: ENOMEM, not logged */
        st = new_state(&fs, open_path(path), 1);
        size_t len = st->merged.hdr.len;
        st->merged.hdr.len = 3;
        log_reset();
        assert_int_equal(core_info_json(st, &t), EIO);
        assert_int_equal(logged_level, LOG_ERR);
        assert_non_null(strstr(logged, "info.json: the merged header: "));
        st->merged.hdr.len = len;
        log_reset();
        size_t live = mem_live;
        mem_cap = 8;
        assert_int_equal(core_info_json(st, &t), ENOMEM);
        mem_cap = SIZE_MAX;
        assert_int_equal(mem_live, live);
        assert_int_equal(n_logged, 0);
        assert_int_equal(core_info_json(st, &t), 0);
        core_log_set(NULL);
        core_state_put(st);
        fs_fini(&fs);
        for (unsigned k = 0; k < 2; k++)
            unlink(shard_path(k, 2, v1));
    }
    /* a single file of version 1: served merged too */
    struct mspec ms = { .version = 1, .kv = llama_kvs, .nkv = 2, .t = llama_tensors, .nt = 2 };
    const char *path = model_file("one-v1.gguf", &ms);
    struct mount fs;
    fs_init(&fs, path);
    struct state *st = new_state(&fs, open_path(path), 0);
    assert_int_equal(st->model->n, 1);
    assert_true(st->merged.hdr.len > 0);
    assert_int_equal(st->model_size, st->merged.size);
    assert_true(st->model_size > st_meta(st)->file_size);   /* counts widened to 64 bits */
    assert_false(has(st->info.data, st->info.len, "split model"));
    core_state_put(st);
    fs_fini(&fs);
    unlink(path);
    assert_int_equal(mem_live, live0);
}

/* A remote model (remote/ faked): dated and owned as the mount's user,
 * info names the object, its identity and its store; an overlay is said. */
static void remote_model(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    struct mspec ms = { .kv = llama_kvs, .nkv = N(llama_kvs), .t = llama_tensors,
                        .nt = N(llama_tensors) };
    struct mount fs;
    fs_init(&fs, "https://example.invalid/m.gguf");
    fs.remote = true;
    fs.overlay = "/var/tmp/m.overlay";
    for (int store = 0; store < 2; store++) {
        store_lines = store ? "store: s3, region eu-west-1\n" : NULL;
        mem_remote = true;
        struct state *st = new_state(&fs, open_mem("https://example.invalid/m.gguf", &ms, 0),
                                     store);
        assert_int_equal(st->model_st.st_mode, S_IFREG | 0644);
        assert_int_equal(st->model_st.st_uid, getuid());
        assert_int_equal(st->model_st.st_gid, getgid());
        assert_true(st->model_st.st_mtim.tv_sec > 0);
        assert_int_equal(st->model_st.st_ctim.tv_sec, st->model_st.st_mtim.tv_sec);
        const struct text *i = &st->info;
        assert_true(has(i->data, i->len, "remote: https://example.invalid/m.gguf\n"
                                         "identity: etag \"abc\"\nsize: "));
        assert_int_equal(has(i->data, i->len, "store: s3, region eu-west-1\n"), store);
        assert_true(has(i->data, i->len, "overlay: /var/tmp/m.overlay\n\n"));
        assert_true(has(i->data, i->len, "reads the whole model once"));
        core_state_put(st);
    }
    store_lines = NULL;
    fs_fini(&fs);
    assert_int_equal(mem_live, live0);
}

/* ---- core_state_new's failures ------------------------------------------------------------ */

/* A model of kind k for new_nomem: a llama file with kept padding, a
 * split model, many keys and no tensors, many tensors (a long info). */
enum { MANY = 300 };
static char many_names[MANY][16];
static struct kvspec many_kvs[MANY];
static struct tspec many_tensors[MANY];

static const char *nomem_model(int kind)
{
    if (kind == 1) {
        write_shards(2, false);
        return shard_path(0, 2, false);
    }
    struct mspec ms = { .kv = llama_kvs, .nkv = N(llama_kvs), .t = llama_tensors,
                        .nt = N(llama_tensors), .pad = 1, .align = 64 };
    for (unsigned i = 0; i < MANY; i++) {
        snprintf(many_names[i], sizeof many_names[i], "x.%u", i);
        many_kvs[i] = (struct kvspec)KU32(many_names[i], i);
        many_tensors[i] = (struct tspec){ many_names[i], 1, { 8 }, GGML_T_F32 };
    }
    if (kind == 2)
        ms = (struct mspec){ .kv = many_kvs, .nkv = MANY };
    else if (kind == 3)
        ms = (struct mspec){ .kv = llama_kvs, .nkv = 1, .t = many_tensors, .nt = MANY };
    return model_file("nomem.gguf", &ms);
}

static void nomem_remove(int kind, const char *path)
{
    if (kind != 1)
        unlink(path);
    else
        for (unsigned k = 0; k < 2; k++)
            unlink(shard_path(k, 2, false));
}

/* Building a state that runs out of memory (any allocation above a cap,
 * or a name table's insertion): ENOMEM, nothing leaked or listed, the
 * model still the caller's; the key ids registered meanwhile stay (the
 * registry only grows) and the same model then builds with every key's
 * id leading back to it. */
static void new_nomem(void **state)
{
    (void)state;
    size_t live0 = mem_live;
    for (int kind = 0; kind < 4; kind++) {
        const char *path = nomem_model(kind);
        struct mount fs;
        fs_init(&fs, path);
        unsigned failed = 0;
        for (int how = 0; how < 2; how++) {
            for (size_t i = 0; i < (1u << 22); i = how ? i + 1 : i * 5 / 4 + 1) {
                struct gguf_split *m = open_path(path);
                struct state *st = (struct state *)1;
                if (how)
                    ntab_add_fail_in = (int)i;
                else
                    mem_cap = i;
                int e = core_state_new(&fs, m, 0, &st);
                mem_cap = SIZE_MAX;
                ntab_add_fail_in = -1;
                if (e == 0) {
                    core_state_put(st);
                    break;
                }
                failed++;
                assert_int_equal(e, ENOMEM);
                assert_null(st);
                assert_int_equal(n_states(&fs), 0);
                assert_int_equal(m->n, kind == 1 ? 2 : 1);
                gguf_split_close(m);
            }
        }
        assert_true(failed > 3);
        struct state *st = new_state(&fs, open_path(path), 0);
        for (uint64_t i = 0; i < st_meta(st)->n_kv; i++)
            assert_int_equal(core_key_index(st, st->kv_id[i]), (int64_t)i);
        core_state_put(st);
        fs_fini(&fs);
        nomem_remove(kind, path);
        assert_int_equal(mem_live, live0);
    }
}

/* ---- core_log ---------------------------------------------------------------------------- */

static void log_messages(void **state)
{
    (void)state;
    /* to the handler, formatted, with the level */
    log_reset();
    core_log(LOG_WARNING, "gguffs: %s %d\n", "x", 42);
    assert_int_equal(n_logged, 1);
    assert_int_equal(logged_level, LOG_WARNING);
    assert_string_equal(logged, "gguffs: x 42\n");
    /* without one: to stderr */
    core_log_set(NULL);
    const char *path = tpath("stderr");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, 2), 2);
    core_log(LOG_ERR, "gguffs: to %s\n", "stderr");
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    char buf[64] = { 0 };
    assert_true(pread(fd, buf, sizeof buf - 1, 0) > 0);
    assert_string_equal(buf, "gguffs: to stderr\n");
    close(fd);
    unlink(path);
    assert_int_equal(n_logged, 1);   /* the handler was not called */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(state_tables),
        cmocka_unit_test(sig_take),
        cmocka_unit_test(key_ids),
        cmocka_unit_test(refs),
        cmocka_unit_test(current),
        cmocka_unit_test(info_json),
        cmocka_unit_test(safetensors),
        cmocka_unit_test(too_large),
        cmocka_unit_test(hf_llama),
        cmocka_unit_test(hf_absent),
        cmocka_unit_test(tensor_files),
        cmocka_unit_test(padding),
        cmocka_unit_test(split),
        cmocka_unit_test(remote_model),
        cmocka_unit_test(new_nomem),
        cmocka_unit_test(log_messages),
    };
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/gguffs-state-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir))
        return 1;
    work_reset();
    int failed = cmocka_run_group_tests_name("state", tests, NULL, NULL);
    return rmdir(tmpdir) == 0 ? failed : 1;
}

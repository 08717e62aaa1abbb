/*
 * tests/unit/test_f32.c — the f32 view and what is computed on first use
 * and kept, without a mount: core/f32.c (chunks dequantized into the
 * block cache, pins, the workers that fill ahead of sequential streams)
 * and core/digests.c (a tensor's stats, xxh64 and sha256, /hashes).
 *
 * A struct mount is set up as fs/main.c does (locks, lists, the block
 * cache, the digests' table) over small GGUF files made here (gb.h), in
 * both byte orders, opened with core_open_model and indexed with
 * core_state_new.  The oracles: values made here (f16, f32, f64, i8,
 * q8_0 with a known scale), kernels/dequant.h's scalar reference on the
 * raw bytes (q4_K), gguf/fstats.h over the expected floats, libxxhash and
 * libcrypto over the raw bytes.
 *
 * Work is counted, never timed: gguf_source_read_all is wrapped
 * (-Wl,--wrap) to count reads (by the main thread or others), fail reads
 * of a range on demand, lower mem_cap once a read is done (memory runs
 * out in the middle of a computation), and hold other threads' reads at
 * a gate; the
 * cache's counters say what was filled and kept.  core_source_failed is
 * wrapped to see it called; core_hash_update to count the bytes hashed;
 * cache_thread_start to fail on demand;
 * pthread_join to open the gate when the workers are stopped.  Waits are
 * on the event, with a hang guard.  Allocations fail above mem_cap
 * (tests/unit/work.h), and every test ends with the memory it began with.
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
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <xxhash.h>

#include "cache/cache.h"
#include "core/digests.h"
#include "core/f32.h"
#include "core/log.h"
#include "core/model.h"
#include "core/state.h"
#include "gguf/fstats.h"
#include "gguf/split.h"
#include "gguf/types.h"
#include "kernels/dequant.h"

#include "gb.h"
#include "tmpfiles.h"
#include "work.h"

/* ---- wrapped calls: reads counted, failed, gated ------------------------------------ */

static pthread_t main_th;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static uint64_t rd_main, rd_other, rd_bytes;   /* reads of the main thread, others' */
static uint64_t fail_from, fail_to;            /* reads touching [from, to) fail */
static bool gate_closed;                       /* other threads' reads wait */
static unsigned gate_waiting;
static bool open_on_join;                      /* pthread_join opens the gate */
static bool threads_fail;                      /* cache_thread_start fails */
static bool cap_armed;                         /* a read sets mem_cap to: */
static size_t cap_after_read;
static unsigned failed_calls;                  /* core_source_failed */
static uint64_t failed_pos, failed_len;

/* Waits (g_mu held) until pred holds; false after the hang guard (60 s). */
static bool wait_for(bool (*pred)(void))
{
    struct timespec guard;
    clock_gettime(CLOCK_REALTIME, &guard);
    guard.tv_sec += 60;
    while (!pred())
        if (pthread_cond_timedwait(&g_cv, &g_mu, &guard) != 0)
            return pred();
    return true;
}

static bool gate_open(void) { return !gate_closed; }

int __real_gguf_source_read_all(struct gguf_source *s, void *buf, size_t len, uint64_t off);
int __wrap_gguf_source_read_all(struct gguf_source *s, void *buf, size_t len, uint64_t off);
int __wrap_gguf_source_read_all(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    bool other = !pthread_equal(pthread_self(), main_th);
    pthread_mutex_lock(&g_mu);
    if (other && gate_closed) {
        gate_waiting++;
        pthread_cond_broadcast(&g_cv);
        bool ok = wait_for(gate_open);
        gate_waiting--;
        if (!ok) {
            pthread_mutex_unlock(&g_mu);
            return ETIMEDOUT;   /* a hang: the test sees the error */
        }
    }
    bool fail = off < fail_to && off + len > fail_from;
    pthread_mutex_unlock(&g_mu);
    int r = fail ? EIO : __real_gguf_source_read_all(s, buf, len, off);
    pthread_mutex_lock(&g_mu);
    if (cap_armed)                      /* what comes after a read runs short */
        __atomic_store_n(&mem_cap, cap_after_read, __ATOMIC_RELAXED);
    if (other)
        rd_other++;
    else
        rd_main++;
    rd_bytes += len;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
    return r;
}

void __real_core_source_failed(struct mount *fs, struct gguf_source *src, uint64_t pos,
                               uint64_t len);
void __wrap_core_source_failed(struct mount *fs, struct gguf_source *src, uint64_t pos,
                               uint64_t len);
void __wrap_core_source_failed(struct mount *fs, struct gguf_source *src, uint64_t pos,
                               uint64_t len)
{
    pthread_mutex_lock(&g_mu);
    failed_calls++;
    failed_pos = pos;
    failed_len = len;
    pthread_mutex_unlock(&g_mu);
    __real_core_source_failed(fs, src, pos, len);
}

/* bytes fed to hash states (core/digest.c) */
static uint64_t hashed_bytes;

struct core_hash;
int __real_core_hash_update(struct core_hash *h, const void *p, size_t n);
int __wrap_core_hash_update(struct core_hash *h, const void *p, size_t n);
int __wrap_core_hash_update(struct core_hash *h, const void *p, size_t n)
{
    __atomic_add_fetch(&hashed_bytes, n, __ATOMIC_RELAXED);
    return __real_core_hash_update(h, p, n);
}

int __real_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);
int __wrap_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg);
int __wrap_cache_thread_start(pthread_t *th, void *(*fn)(void *), void *arg)
{
    if (threads_fail)
        return EAGAIN;
    return __real_cache_thread_start(th, fn, arg);
}

int __real_pthread_join(pthread_t th, void **ret);
int __wrap_pthread_join(pthread_t th, void **ret);
int __wrap_pthread_join(pthread_t th, void **ret)
{
    pthread_mutex_lock(&g_mu);
    if (open_on_join) {
        gate_closed = false;
        pthread_cond_broadcast(&g_cv);
    }
    pthread_mutex_unlock(&g_mu);
    return __real_pthread_join(th, ret);
}

static void counts_reset(void)
{
    pthread_mutex_lock(&g_mu);
    rd_main = rd_other = rd_bytes = 0;
    failed_calls = 0;
    __atomic_store_n(&hashed_bytes, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&g_mu);
}

static void fail_range(uint64_t from, uint64_t to)
{
    pthread_mutex_lock(&g_mu);
    fail_from = from;
    fail_to = to;
    pthread_mutex_unlock(&g_mu);
}

static void gate_set(bool closed)
{
    pthread_mutex_lock(&g_mu);
    gate_closed = closed;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static bool someone_at_gate(void) { return gate_waiting > 0; }

static void wait_at_gate(void)
{
    pthread_mutex_lock(&g_mu);
    bool ok = wait_for(someone_at_gate);
    pthread_mutex_unlock(&g_mu);
    assert_true(ok);
}

static uint64_t reads_main(void)
{
    pthread_mutex_lock(&g_mu);
    uint64_t n = rd_main;
    pthread_mutex_unlock(&g_mu);
    return n;
}

static uint64_t reads_other(void)
{
    pthread_mutex_lock(&g_mu);
    uint64_t n = rd_other;
    pthread_mutex_unlock(&g_mu);
    return n;
}

static uint64_t reads_all(void)
{
    pthread_mutex_lock(&g_mu);
    uint64_t n = rd_main + rd_other;
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* core/'s messages, kept */
static char logged[4096];
static size_t logged_len;

static void log_keep(int level, const char *fmt, va_list ap)
{
    (void)level;
    pthread_mutex_lock(&g_mu);
    if (logged_len < sizeof logged) {
        int n = vsnprintf(logged + logged_len, sizeof logged - logged_len, fmt, ap);
        if (n > 0)
            logged_len += (size_t)n < sizeof logged - logged_len ? (size_t)n
                                                                  : sizeof logged - logged_len - 1;
    }
    pthread_mutex_unlock(&g_mu);
}

static unsigned count_of(const char *hay, const char *needle)
{
    unsigned n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* ---- the models --------------------------------------------------------------------- */

enum { T_Q8, T_F16, T_F32, T_F64, T_Q4K, T_BIG, T_I8, T_TINY, NT };

/* A tensor of the models: its bytes in both orders and the floats of its
 * f32 view. */
struct tspec {
    const char *name;
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[2];
    uint64_t n;
    size_t nbytes;
    uint8_t *le, *be;
    float *f;
};

static struct tspec T[NT] = {
    [T_Q8] = { "blk.0.q8", GGML_T_Q8_0, 1, { 2560, 1 } },        /* 2.5 chunks of 4 KiB */
    [T_F16] = { "blk.0.f16", GGML_T_F16, 1, { 1500, 1 } },       /* a chunk and 476 floats */
    [T_F32] = { "blk.0.f32", GGML_T_F32, 2, { 400, 50 } },       /* 19 chunks and 544 floats */
    [T_F64] = { "blk.0.f64", GGML_T_F64, 1, { 1100, 1 } },       /* larger than its floats */
    [T_Q4K] = { "blk.0.q4k", GGML_T_Q4_K, 2, { 256, 12 } },      /* 3 chunks exactly */
    [T_BIG] = { "blk.1.big", GGML_T_F16, 1, { 16384, 1 } },      /* 16 chunks */
    [T_I8] = { "blk.1.i8", GGML_T_I8, 1, { (4u << 20) + 1000, 1 } }, /* past a digest piece */
    [T_TINY] = { "blk.1.tiny", GGML_T_Q8_0, 1, { 32, 1 } },      /* one block */
};

static uint32_t rnd_state = 12345;

static uint32_t rnd(void)
{
    rnd_state = rnd_state * 1103515245u + 12345u;
    return rnd_state >> 8;
}

/* An f16 as a float, by its bits (no kernel involved). */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, mant = h & 1023;
    uint32_t bits;
    if (exp == 0) {
        float v = (float)mant * (1.0f / 16777216.0f);   /* exact: mant * 2^-24 */
        memcpy(&bits, &v, 4);
        bits |= sign;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void swap_bytes(uint8_t *p, size_t w)
{
    for (size_t i = 0; i < w / 2; i++) {
        uint8_t t = p[i];
        p[i] = p[w - 1 - i];
        p[w - 1 - i] = t;
    }
}

/* Fills tensor t's bytes and floats. */
static void make_tensor(struct tspec *t)
{
    t->n = t->ne[0] * t->ne[1];
    const struct ggml_type_info *ti = ggml_type_get(t->type);
    t->nbytes = t->n / ti->blck_elems * ti->blck_bytes;
    t->le = malloc(t->nbytes);
    t->be = malloc(t->nbytes);
    t->f = malloc(t->n * sizeof(float));
    assert_true(t->le && t->be && t->f);
    for (uint64_t i = 0; i < t->n; i++) {
        switch (t->type) {
        case GGML_T_F16: {
            uint16_t h = (uint16_t)rnd();
            if ((h & 0x7c00) == 0x7c00)          /* no NaN: their payloads are the CPU's */
                h &= (i % 7) ? 0xfbff : 0xfc00;
            memcpy(t->le + 2 * i, &h, 2);
            t->f[i] = half_to_float(h);
            break;
        }
        case GGML_T_F32: {
            float v = ((float)(rnd() % 20001) - 10000.0f) / 64.0f;
            if (i % 997 == 5)
                v = i % 2 ? __builtin_inff() : __builtin_nanf("");
            if (i % 331 == 7)
                v = i % 2 ? -0.0f : 0.0f;
            memcpy(t->le + 4 * i, &v, 4);
            t->f[i] = v;
            break;
        }
        case GGML_T_F64: {
            double v = ((double)(rnd() % 200001) - 100000.0) / 3.0;
            memcpy(t->le + 8 * i, &v, 8);
            t->f[i] = (float)v;
            break;
        }
        case GGML_T_I8: {
            int8_t v = (int8_t)rnd();
            t->le[i] = (uint8_t)v;
            t->f[i] = (float)v;
            break;
        }
        case GGML_T_Q8_0:
            if (i % 32 == 0) {
                uint16_t d = 0x3800;             /* 0.5 */
                memcpy(t->le + i / 32 * 34, &d, 2);
            }
            t->le[i / 32 * 34 + 2 + i % 32] = (uint8_t)rnd();
            t->f[i] = (float)(int8_t)t->le[i / 32 * 34 + 2 + i % 32] * 0.5f;
            break;
        default:                                 /* q4_K: any bytes, the reference's floats */
            break;
        }
    }
    if (t->type == GGML_T_Q4_K) {
        for (size_t i = 0; i < t->nbytes; i++)
            t->le[i] = (uint8_t)rnd();
        kern_dequant_ref(t->type, t->le, t->f, t->n / 256);
    }
    /* big-endian: the plain types element by element, q8_0 its scale */
    memcpy(t->be, t->le, t->nbytes);
    if (t->type == GGML_T_Q8_0)
        for (size_t b = 0; b < t->nbytes; b += 34)
            swap_bytes(t->be + b, 2);
    else if (t->type != GGML_T_Q4_K)
        for (size_t b = 0; b < t->nbytes; b += ti->blck_bytes)
            swap_bytes(t->be + b, ti->blck_bytes);
}

static uint64_t t_off[NT];        /* data offsets in m.gguf */

/* Which tensors each file made holds, in order: a mount's tensor j is
 * T[map->idx[j]], and j_of[t] is where tensor t is in the mounted file
 * (-1: not there). */
struct file_map {
    char path[4200];
    unsigned idx[NT], n;
};
static struct file_map maps[4];
static unsigned n_maps;
static int j_of[NT];

/* The model with tensors idx[0..n) in that order (be: big-endian); the
 * tensors' data offsets into offs[tensor] (NULL: not kept). */
static void write_model(const char *path, const unsigned *idx, unsigned n, bool be,
                        uint64_t *offs)
{
    uint64_t own[NT];
    if (!offs)
        offs = own;
    struct file_map *m = NULL;
    for (unsigned i = 0; i < n_maps && !m; i++)
        if (strcmp(maps[i].path, path) == 0)
            m = &maps[i];
    if (!m) {
        assert_true(n_maps < 4);
        m = &maps[n_maps++];
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    memcpy(m->idx, idx, n * sizeof *idx);
    m->n = n;
    struct gb b = { .be = be };
    gb_header(&b, 3, n, 1);
    gb_kv_str(&b, "general.name", "f32 test");
    uint64_t off = 0;
    for (unsigned k = 0; k < n; k++) {
        const struct tspec *t = &T[idx[k]];
        gb_tensor(&b, t->name, t->n_dims, t->ne, t->type, off);
        offs[idx[k]] = off;
        off = (off + t->nbytes + 31) / 32 * 32;
    }
    gb_pad(&b, 32);
    size_t data = b.len;
    for (unsigned k = 0; k < n; k++) {
        const struct tspec *t = &T[idx[k]];
        while (b.len < data + offs[idx[k]])
            gb_u8(&b, 0);
        gb_put(&b, be ? t->be : t->le, t->nbytes);
    }
    put_file(path, b.p, b.len);
    free(b.p);
}

static const unsigned all_idx[NT] = { T_Q8, T_F16, T_F32, T_F64, T_Q4K, T_BIG, T_I8, T_TINY };
static const unsigned be_idx[] = { T_Q8, T_F16, T_F32, T_F64, T_BIG };
#define N_BE (sizeof be_idx / sizeof be_idx[0])

/* ---- a mount without FUSE (as fs/main.c sets one up) -------------------------------- */

static struct mount fs;
static size_t mem_base;

static void mount_up(const char *path, uint32_t chunk_bytes, uint64_t cache_size)
{
    core_mount_init(&fs);
    fs.read_only = true;
    fs.model_path = path;
    fs.cache_size = cache_size;
    fs.req_bytes = fs.chunk_bytes = chunk_bytes;
    for (unsigned t = 0; t < NT; t++)
        j_of[t] = -1;
    for (unsigned i = 0; i < n_maps; i++)
        if (strcmp(maps[i].path, path) == 0)
            for (unsigned j = 0; j < maps[i].n; j++)
                j_of[maps[i].idx[j]] = (int)j;
    struct gguf_split *model = NULL;
    struct gguf_diag d;
    assert_int_equal(core_open_model(path, true, false, NULL, NULL, NULL, 0, &model, &d),
                     GGUF_OK);
    assert_int_equal(core_state_new(&fs, model, 0, &fs.st), 0);
    fs.cache = cache_new(chunk_bytes + F32_CHUNK_SLACK, cache_size, core_fill_chunk, &fs);
    assert_non_null(fs.cache);
    assert_int_equal(core_digests_new(&fs, fs.st->n_tensors), 0);
    counts_reset();
}

static void mount_down(void)
{
    core_workers_stop(&fs);
    core_streams_free(&fs);
    core_digests_free(&fs);
    cache_free(fs.cache);
    core_state_put(fs.st);
    assert_true(glist_empty(&fs.states));
    core_key_ids_free(&fs.ids);
    core_mount_fini(&fs);
    fail_range(0, 0);
    gate_set(false);
    open_on_join = threads_fail = cap_armed = false;
    mem_cap = SIZE_MAX;
}

/* Every test ends with the memory it began with. */
static int setup(void **state)
{
    (void)state;
    mem_base = __atomic_load_n(&mem_live, __ATOMIC_RELAXED);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    size_t live = __atomic_load_n(&mem_live, __ATOMIC_RELAXED);
    if (live != mem_base) {
        fprintf(stderr, "leak: %zu bytes live, %zu before the test\n", live, mem_base);
        return -1;
    }
    return 0;
}

static struct cache_stats stats_now(void)
{
    struct cache_stats s;
    cache_get_stats(fs.cache, &s);
    return s;
}

/* Pins [off, off + len) of tensor t's view and checks the bytes against
 * the oracle's; the pin comes back in p. */
static void pin_check(unsigned t, struct f32_stream *s, uint64_t off, size_t len,
                      struct f32_pin *p)
{
    assert_true(j_of[t] >= 0);
    assert_int_equal(core_f32_pin(fs.st, s, (uint64_t)j_of[t], off, len, p), 0);
    const uint8_t *want = (const uint8_t *)T[t].f + off;
    size_t at = 0;
    for (size_t i = 0; i < p->n; i++) {
        assert_memory_equal(p->iov[i].iov_base, want + at, p->iov[i].iov_len);
        at += p->iov[i].iov_len;
    }
    assert_int_equal(at, p->len);
}

/* Every chunk of tensor t equals the oracle's floats. */
static void check_tensor(unsigned t)
{
    uint64_t j = (uint64_t)j_of[t];
    uint64_t chunks = core_chunks(fs.st, j);
    uint64_t cb = fs.chunk_bytes;
    for (uint64_t c = 0; c < chunks; c++) {
        if (t == T_I8 && c >= 3 && c + 3 < chunks)
            continue;                           /* its first and last chunks */
        struct f32_pin p;
        pin_check(t, NULL, c * cb, cb, &p);
        assert_int_equal(p.n, 1);
        assert_int_equal(p.len, core_chunk_len(fs.st, j, c) * sizeof(float));
        core_f32_unpin(&fs, &p, false);
    }
}

/* ---- f32: the bytes, the arithmetic, the pins ------------------------------------- */

/* Every chunk of every tensor is the oracle's dequantization, little- and
 * big-endian, with chunks of 4 KiB (one run of blocks per fill) and of
 * 64 KiB (the source read into the block's end and dequantized forward
 * in several runs). */
static void f32_bytes(void **state)
{
    (void)state;
    const uint32_t sizes[] = { 4096, 65536 };
    for (unsigned k = 0; k < 2; k++) {
        mount_up(tpath("m.gguf"), sizes[k], 8u << 20);
        for (unsigned t = 0; t < NT; t++)   /* f32: fs/ serves it as raw, but */
            check_tensor(t);                /* its chunks are chunks as any */
        mount_down();
        mount_up(tpath("be.gguf"), sizes[k], 8u << 20);
        for (unsigned i = 0; i < N_BE; i++)
            check_tensor(be_idx[i]);
        mount_down();
    }
}

/* Chunks at a tensor's end, pins cut at the view's end and at
 * F32_PIN_MAX chunks, and the fill callback's refusals. */
static void f32_chunks(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    const struct state *st = fs.st;
    assert_int_equal(core_chunks(st, T_Q8), 3);
    assert_int_equal(core_chunk_len(st, T_Q8, 0), 1024);
    assert_int_equal(core_chunk_len(st, T_Q8, 2), 512);
    assert_int_equal(core_chunks(st, T_F16), 2);
    assert_int_equal(core_chunk_len(st, T_F16, 1), 476);
    assert_int_equal(core_chunks(st, T_Q4K), 3);
    assert_int_equal(core_chunk_len(st, T_Q4K, 2), 1024);
    assert_int_equal(core_chunks(st, T_TINY), 1);
    assert_int_equal(core_chunk_len(st, T_TINY, 0), 32);

    struct f32_pin p;
    /* across the border of the last, partial chunk, cut at the end */
    pin_check(T_F16, NULL, 4000, 10000, &p);
    assert_int_equal(p.n, 2);
    assert_int_equal(p.len, 2000);
    assert_int_equal(p.iov[0].iov_len, 96);
    assert_int_equal(p.iov[1].iov_len, 1904);
    assert_int_equal(cache_len(p.b[1]), 476 * 4);
    core_f32_unpin(&fs, &p, true);
    assert_int_equal(p.n, 0);
    /* one byte before the end */
    pin_check(T_F16, NULL, 5999, 100, &p);
    assert_int_equal(p.len, 1);
    core_f32_unpin(&fs, &p, false);
    /* at most F32_PIN_MAX - 1 chunks' bytes, over F32_PIN_MAX chunks */
    pin_check(T_BIG, NULL, 100, 1u << 20, &p);
    assert_int_equal(p.n, F32_PIN_MAX);
    assert_int_equal(p.len, (F32_PIN_MAX - 1) * 4096);
    core_f32_unpin(&fs, &p, false);
    /* at or past the end, or nothing asked: nothing pinned */
    assert_int_equal(core_f32_pin(st, NULL, T_F16, 6000, 10, &p), 0);
    assert_int_equal(p.n, 0);
    assert_int_equal(p.len, 0);
    assert_int_equal(core_f32_pin(st, NULL, T_F16, 1u << 30, 10, &p), 0);
    assert_int_equal(p.n, 0);
    assert_int_equal(core_f32_pin(st, NULL, T_F16, 0, 0, &p), 0);
    assert_int_equal(p.n, 0);

    /* the fill callback: no state, or no such tensor */
    float *buf = malloc(4096 + F32_CHUNK_SLACK);
    assert_non_null(buf);
    assert_int_equal(core_fill_chunk(&fs, NULL, T_Q8, 0, buf, 4096), EINVAL);
    assert_int_equal(core_fill_chunk(&fs, (void *)st, NT, 0, buf, 4096), EINVAL);
    assert_int_equal(core_fill_chunk(&fs, (void *)st, T_Q8, 2, buf, 512 * 4), 0);
    assert_memory_equal(buf, T[T_Q8].f + 2048, 512 * 4);
    /* through the cache: filled once, then hits */
    struct cache_stats s0 = stats_now();
    int err = 0;
    struct cache_block *b = core_chunk_get(st, T_Q4K, 1, 4096, &err);
    assert_non_null(b);
    assert_memory_equal(cache_data(b), T[T_Q4K].f + 1024, 4096);
    cache_put(fs.cache, b, 0);
    b = core_chunk_get(st, T_Q4K, 1, 4096, &err);
    assert_non_null(b);
    cache_put(fs.cache, b, 0);
    struct cache_stats s1 = stats_now();
    assert_int_equal(s1.misses - s0.misses, 1);
    assert_int_equal(s1.hits - s0.hits, 1);
    free(buf);
    mount_down();
}

/* A pinned chunk is never evicted, however many chunks pass; unpinned
 * served, a chunk whose bytes all went out is the first reused; unpinned
 * unserved (or served in part), it stays. */
static void f32_pins(void **state)
{
    (void)state;
    /* a cache of a few blocks */
    mount_up(tpath("m.gguf"), 4096, 10 * 8192);
    uint64_t cap = cache_capacity_blocks(fs.cache);
    assert_true(cap >= 2 && cap < 16);
    struct f32_pin p0, p;
    pin_check(T_BIG, NULL, 0, 4096, &p0);
    for (uint64_t c = 1; c < 16; c++) {
        pin_check(T_BIG, NULL, c * 4096, 4096, &p);
        core_f32_unpin(&fs, &p, false);
    }
    assert_true(stats_now().evictions > 0);     /* the cache was full */
    assert_true(cache_contains(fs.cache, T_BIG, 0));
    assert_memory_equal(p0.iov[0].iov_base, T[T_BIG].f, 4096);
    core_f32_unpin(&fs, &p0, false);
    mount_down();

    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    pin_check(T_BIG, NULL, 0, 4096, &p);
    core_f32_unpin(&fs, &p, true);               /* served: used up */
    pin_check(T_BIG, NULL, 4096, 4096, &p);      /* takes chunk 0's block */
    core_f32_unpin(&fs, &p, false);              /* not served: kept */
    assert_false(cache_contains(fs.cache, T_BIG, 0));
    assert_int_equal(stats_now().evictions, 1);
    pin_check(T_BIG, NULL, 2 * 4096, 4096, &p);
    core_f32_unpin(&fs, &p, false);
    assert_true(cache_contains(fs.cache, T_BIG, 1));
    /* half of chunk 3 served: kept; the other half too: used up */
    pin_check(T_BIG, NULL, 3 * 4096, 2048, &p);
    core_f32_unpin(&fs, &p, true);
    pin_check(T_BIG, NULL, 4 * 4096, 4096, &p);
    core_f32_unpin(&fs, &p, false);
    assert_true(cache_contains(fs.cache, T_BIG, 3));
    pin_check(T_BIG, NULL, 3 * 4096 + 2048, 2048, &p);
    core_f32_unpin(&fs, &p, true);
    pin_check(T_BIG, NULL, 5 * 4096, 4096, &p);
    core_f32_unpin(&fs, &p, false);
    assert_false(cache_contains(fs.cache, T_BIG, 3));
    assert_true(cache_contains(fs.cache, T_BIG, 1) && cache_contains(fs.cache, T_BIG, 2) &&
                cache_contains(fs.cache, T_BIG, 4));
    assert_int_equal(stats_now().evictions, 2);
    mount_down();
}

/* A read that fails: EIO, core_source_failed told of the bytes, nothing
 * cached or pinned, and the next read tries again. */
static void f32_read_fails(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    const struct gguf_file *gf = st_meta(fs.st);
    /* chunk 1 of q8 (its blocks 32..63) */
    uint64_t pos = gf->data_off + t_off[T_Q8] + 32 * 34;
    fail_range(pos, pos + 1);
    struct f32_pin p;
    int err = 0;
    assert_null(core_chunk_get(fs.st, T_Q8, 1, 4096, &err));
    assert_int_equal(err, EIO);
    assert_int_equal(failed_calls, 1);
    assert_int_equal(failed_pos, pos);
    assert_int_equal(failed_len, 32 * 34);
    assert_false(cache_contains(fs.cache, T_Q8, 1));
    /* a pin of chunks 0..2: 2 is pinned first, then 1 fails: none held */
    assert_int_equal(core_f32_pin(fs.st, NULL, T_Q8, 0, 3 * 4096, &p), EIO);
    assert_int_equal(p.n, 0);
    assert_int_equal(failed_calls, 2);
    cache_clear(fs.cache);
    assert_int_equal(stats_now().blocks_held, 0);     /* no pin left */
    fail_range(0, 0);
    pin_check(T_Q8, NULL, 0, 3 * 4096, &p);
    assert_int_equal(p.n, 3);
    core_f32_unpin(&fs, &p, false);
    mount_down();
}

/* The model changed underneath: a fill reads, then finds the file not the
 * one indexed: EIO, the mount marked and told once; what the cache holds
 * is still served. */
static void f32_underneath(void **state)
{
    (void)state;
    unsigned one[] = { T_Q8, T_F32 };
    write_model(tpath("u.gguf"), one, 2, false, NULL);
    mount_up(tpath("u.gguf"), 4096, 8u << 20);
    core_log_set(log_keep);
    logged_len = 0;
    struct f32_pin p;
    pin_check(T_Q8, NULL, 0, 4096, &p);
    core_f32_unpin(&fs, &p, false);
    int fd = open(tpath("u.gguf"), O_RDWR);
    assert_true(fd >= 0);
    struct timespec when[2] = { { 1, 0 }, { 1, 0 } };
    assert_int_equal(futimens(fd, when), 0);
    close(fd);
    int err = 0;
    assert_null(core_chunk_get(fs.st, 0, 1, 4096, &err));
    assert_int_equal(err, EIO);
    assert_int_equal(atomic_load(&fs.under) & UNDER_CHANGED, UNDER_CHANGED);
    assert_int_equal(atomic_load(&fs.under_eio), 1);
    assert_false(cache_contains(fs.cache, 0, 1));
    assert_int_equal(core_f32_pin(fs.st, NULL, 0, 4096, 100, &p), EIO);
    assert_int_equal(atomic_load(&fs.under_eio), 2);
    pin_check(T_Q8, NULL, 0, 4096, &p);          /* cached: still this version's */
    core_f32_unpin(&fs, &p, false);
    /* digests read the file too: not computed now */
    assert_null(core_tensor_digest(fs.st, 1, TF_XXH64, &err));
    assert_int_equal(err, EIO);
    assert_null(core_tensor_digest(fs.st, 1, TF_STATS, &err));
    assert_int_equal(err, EIO);
    assert_null(core_tensor_digest(fs.st, 0, TF_STATS, &err));
    assert_int_equal(err, EIO);
    assert_null(core_hashes(fs.st, &err));
    assert_int_equal(err, EIO);
    assert_int_equal(count_of(logged, "changed underneath"), 1);
    core_log_set(NULL);
    mount_down();
    unlink(tpath("u.gguf"));
}

/* ---- f32: the workers ----------------------------------------------------------------- */

/* What the workers have been asked to fill: every claim is read by them
 * before the reader goes on (so none is taken back by the reader). */
static uint64_t claims_wanted;

static bool workers_caught_up(void) { return rd_other >= claims_wanted; }

static void wait_workers(void)
{
    claims_wanted = stats_now().prefetched;
    pthread_mutex_lock(&g_mu);
    bool ok = wait_for(workers_caught_up);
    pthread_mutex_unlock(&g_mu);
    assert_true(ok);
}

/* A sequential reader: the workers fill the chunks ahead of it, each
 * chunk filled once, never more than their depth ahead; a stream that
 * moves to another tensor starts at its chunk 0 with its window kept; a
 * random reader has nothing filled ahead; a read of several chunks has
 * its other chunks filled beside it. */
static void f32_workers(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    assert_true(cache_capacity_blocks(fs.cache) >= 64);
    assert_int_equal(core_workers_start(&fs, 2), 0);   /* depth 4 */
    struct f32_stream *s = core_stream_new(&fs);
    assert_non_null(s);
    struct f32_pin p;
    uint64_t most = 0;
    for (uint64_t c = 0; c < 16; c++) {
        pin_check(T_BIG, s, c * 4096, 4096, &p);
        core_f32_unpin(&fs, &p, true);
        wait_workers();
        /* chunks filled or queued past the one read: the depth at most,
         * and, before the end, all of it */
        uint64_t ahead = stats_now().prefetched + reads_main() - (c + 1);
        assert_true(ahead <= 4);
        most = ahead > most ? ahead : most;
    }
    assert_int_equal(most, 4);
    struct cache_stats s1 = stats_now();
    assert_int_equal(reads_all(), 16);             /* each chunk filled once */
    assert_int_equal(s1.misses, 16);
    assert_int_equal(reads_main(), 1);             /* the window opens at once */
    assert_int_equal(s1.hits, 16 - reads_main());

    /* the same stream on another tensor: ahead of its chunk 0 at once */
    pin_check(T_Q4K, s, 0, 4096, &p);
    core_f32_unpin(&fs, &p, true);
    assert_true(stats_now().prefetched > s1.prefetched);
    wait_workers();
    pin_check(T_Q4K, s, 4096, 2 * 4096, &p);
    core_f32_unpin(&fs, &p, true);
    assert_int_equal(reads_all(), 16 + 3);
    core_stream_free(&fs, s);
    /* the next sequential stream, alone again, gets the whole depth */
    s = core_stream_new(&fs);
    assert_non_null(s);
    uint64_t claimed0 = stats_now().prefetched, main0 = reads_main();
    most = 0;
    for (uint64_t c = 0; c < 6; c++) {
        pin_check(T_I8, s, (1000 + c) * 4096, 4096, &p);
        core_f32_unpin(&fs, &p, true);
        wait_workers();
        uint64_t ahead = stats_now().prefetched - claimed0 + reads_main() - main0 - (c + 1);
        most = ahead > most ? ahead : most;
    }
    assert_int_equal(most, 4);
    core_stream_free(&fs, s);
    /* two sequential streams at once share the depth: 2 ahead each */
    s = core_stream_new(&fs);
    struct f32_stream *s2 = core_stream_new(&fs);
    assert_true(s && s2);
    uint64_t most2[2] = { 0, 0 };
    for (uint64_t c = 0; c < 6; c++)
        for (unsigned k = 0; k < 2; k++) {
            uint64_t at0 = (k ? 3000 : 2000) + c;
            pin_check(T_I8, k ? s2 : s, at0 * 4096, 4096, &p);
            core_f32_unpin(&fs, &p, true);
            wait_workers();
            uint64_t ahead = 0;
            for (uint64_t a = at0 + 1; a <= at0 + 8; a++)
                ahead += cache_contains(fs.cache, T_I8, a);
            assert_true(ahead <= 2);
            most2[k] = ahead > most2[k] ? ahead : most2[k];
        }
    assert_int_equal(most2[0], 2);
    assert_int_equal(most2[1], 2);
    core_stream_free(&fs, s2);
    core_stream_free(&fs, s);

    /* a random reader: only what it reads */
    struct f32_stream *r = core_stream_new(&fs);
    assert_non_null(r);
    uint64_t pre = stats_now().prefetched;
    const uint64_t at[] = { 3000, 100, 2000, 50, 4000 };
    for (unsigned i = 0; i < 5; i++) {
        pin_check(T_I8, r, at[i] * 4096, 4096, &p);
        core_f32_unpin(&fs, &p, false);
    }
    assert_int_equal(stats_now().prefetched, pre);
    /* a read of three chunks, without a stream: the two after its first
     * are queued for the workers, every chunk filled once */
    counts_reset();
    uint64_t m0 = stats_now().misses;
    pin_check(T_I8, NULL, 10 * 4096 + 100, 2 * 4096, &p);
    assert_int_equal(p.n, 3);
    core_f32_unpin(&fs, &p, false);
    assert_int_equal(stats_now().misses - m0, 3);
    assert_int_equal(stats_now().prefetched - pre, 2);
    assert_int_equal(reads_all(), 3);
    /* stats with the workers: the chunks read once each (r stays open:
     * the streams left at the end are freed with the mount) */
    counts_reset();
    int err = 0;
    const struct text *t = core_tensor_digest(fs.st, T_F16, TF_STATS, &err);
    assert_non_null(t);
    assert_int_equal(reads_all(), 2);
    mount_down();
}

/* The workers' bound: with the queue full, a stream's chunk ahead is not
 * queued (given back for a later read); stopping drops what is queued,
 * not cached.  One worker, depth 2; three streams each read their chunk 0
 * (a fresh stream's window opens at once: chunk 1 is claimed): the worker
 * holds one stream's chunk 1 at the gate, another's waits in the queue,
 * the third finds the queue full. */
static void f32_workers_full(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    assert_int_equal(core_workers_start(&fs, 1), 0);
    gate_set(true);
    struct f32_stream *s[3];
    /* (f32's view is served as raw by fs/, but its chunks are chunks) */
    const unsigned tt[3] = { T_BIG, T_I8, T_F32 };
    struct f32_pin p;
    for (unsigned i = 0; i < 3; i++) {
        s[i] = core_stream_new(&fs);
        assert_non_null(s[i]);
        pin_check(tt[i], s[i], 0, 4096, &p);
        core_f32_unpin(&fs, &p, true);
    }
    wait_at_gate();
    assert_int_equal(stats_now().prefetched, 2);   /* the bound: no third */
    unsigned in = 0;
    for (unsigned i = 0; i < 3; i++)
        in += cache_contains(fs.cache, tt[i], 1);
    assert_int_equal(in, 2);
    /* stopping: the held fill finishes (the gate opens when the worker is
     * joined), the queued one is dropped: a failed fill, not cached */
    open_on_join = true;
    uint64_t errs = stats_now().fill_errors;
    core_workers_stop(&fs);
    assert_null(fs.workers);
    assert_int_equal(stats_now().fill_errors - errs, 1);
    assert_int_equal(reads_other(), 1);
    in = 0;
    for (unsigned i = 0; i < 3; i++)
        in += cache_contains(fs.cache, tt[i], 1);
    assert_int_equal(in, 1);
    for (unsigned i = 0; i < 3; i++)
        core_stream_free(&fs, s[i]);
    mount_down();
}

/* Workers that cannot start, or cannot be made: readers fill what they
 * read themselves; none for a cache too small or no threads asked. */
static void f32_workers_none(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    assert_int_equal(core_workers_start(&fs, 0), 0);
    assert_null(fs.workers);
    threads_fail = true;
    assert_int_equal(core_workers_start(&fs, 2), EAGAIN);
    threads_fail = false;
    struct f32_stream *s = core_stream_new(&fs);
    assert_non_null(s);
    struct f32_pin p;
    for (uint64_t c = 0; c < 6; c++) {
        pin_check(T_BIG, s, c * 4096, 4096, &p);
        core_f32_unpin(&fs, &p, true);
    }
    assert_int_equal(stats_now().prefetched, 0);
    assert_int_equal(reads_main(), 6);
    core_stream_free(&fs, s);
    core_workers_stop(&fs);
    core_workers_stop(&fs);                        /* none: a no-op */
    /* out of memory: nothing started, nothing kept */
    for (size_t cap = 0; cap <= 512; cap += 8) {
        mem_cap = cap;
        int e = core_workers_start(&fs, 2);
        mem_cap = SIZE_MAX;
        assert_true(e == 0 || e == ENOMEM);
        if (e)
            assert_null(fs.workers);
        core_workers_stop(&fs);
    }
    mem_cap = 0;
    assert_null(core_stream_new(&fs));
    mem_cap = SIZE_MAX;
    mount_down();

    mount_up(tpath("m.gguf"), 4096, 3 * 8192);     /* under 4 blocks: depth 0 */
    assert_int_equal(core_workers_start(&fs, 2), 0);
    assert_null(fs.workers);
    mount_down();
}

/* The fill's buffer of a type larger than its floats (f64), per thread:
 * out of memory, the fill fails with ENOMEM, nothing cached; the buffer
 * is freed when the thread ends. */
struct fill_job {
    size_t cap;
    int err;
};

static void *fill_thread(void *arg)
{
    struct fill_job *j = arg;
    __atomic_store_n(&mem_cap, j->cap, __ATOMIC_RELAXED);
    struct cache_block *b = core_chunk_get(fs.st, T_F64, 0, 4096, &j->err);
    __atomic_store_n(&mem_cap, SIZE_MAX, __ATOMIC_RELAXED);
    if (b) {
        j->err = memcmp(cache_data(b), T[T_F64].f, 4096) ? -1 : 0;
        cache_put(fs.cache, b, 0);
    }
    return NULL;
}

static void f32_thread_buffer(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    cache_reserve(fs.cache, 4);                 /* the cache needs no memory */
    const size_t caps[] = { 0, 16, 8191, SIZE_MAX };
    const int want[] = { ENOMEM, ENOMEM, ENOMEM, 0 };
    for (unsigned i = 0; i < 4; i++) {
        struct fill_job j = { caps[i], 0 };
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, fill_thread, &j), 0);
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_int_equal(j.err, want[i]);
        assert_int_equal(cache_contains(fs.cache, T_F64, 0), want[i] == 0);
    }
    mount_down();
}

/* ---- digests -------------------------------------------------------------------------- */

static void hex_of(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", p[i]);
}

/* xxhsum's and sha256sum's digests of tensor t's raw bytes (be: the
 * big-endian file's), as lines. */
static void want_digests(unsigned t, bool be, char xxh[18], char sha[66])
{
    const uint8_t *p = be ? T[t].be : T[t].le;
    snprintf(xxh, 18, "%016llx\n", (unsigned long long)XXH64(p, T[t].nbytes, 0));
    unsigned char md[32];
    unsigned len = 0;
    assert_int_equal(EVP_Digest(p, T[t].nbytes, md, &len, EVP_sha256(), NULL), 1);
    hex_of(md, 32, sha);
    sha[64] = '\n';
    sha[65] = 0;
}

/* fstats.h's text over tensor t's floats (tensor j of the mount), a
 * chunk at a time. */
static void want_stats(unsigned t, uint64_t j, char *out)
{
    struct gguf_fstats acc;
    gguf_fstats_init(&acc);
    for (uint64_t c = 0; c < core_chunks(fs.st, j); c++)
        gguf_fstats_add(&acc, T[t].f + c * (fs.chunk_bytes / 4), core_chunk_len(fs.st, j, c));
    assert_int_equal(gguf_fstats_render(&acc, out), GGUF_FSTATS_TEXT_LEN);
}

static void text_is(const struct text *t, const char *want, size_t len)
{
    assert_non_null(t);
    assert_int_equal(t->len, len);
    assert_memory_equal(t->data, want, len);
}

/* Each tensor's stats, xxh64 and sha256 are the oracles', computed once
 * and kept (a second call reads nothing); xxh64 and sha256 come from one
 * pass. */
static void digests_texts(void **state)
{
    (void)state;
    for (int be = 0; be < 2; be++) {
        mount_up(tpath(be ? "be.gguf" : "m.gguf"), 4096, 8u << 20);
        for (uint64_t j = 0; j < fs.st->n_tensors; j++) {
            unsigned t = be ? be_idx[j] : all_idx[j];
            char xxh[18], sha[66], stats[GGUF_FSTATS_TEXT_MAX];
            want_digests(t, be, xxh, sha);
            int err = 0;
            counts_reset();
            const struct text *x = core_tensor_digest(fs.st, j, TF_XXH64, &err);
            text_is(x, xxh, 17);
            assert_int_equal(rd_bytes, T[t].nbytes);     /* once over the raw bytes */
            assert_int_equal(reads_all(), (T[t].nbytes + (4u << 20) - 1) / (4u << 20));
            const struct text *sh = core_tensor_digest(fs.st, j, TF_SHA256, &err);
            text_is(sh, sha, 65);
            assert_ptr_equal(core_tensor_digest(fs.st, j, TF_XXH64, &err), x);
            assert_int_equal(rd_bytes, T[t].nbytes);     /* kept */
            if (t == T_I8)
                continue;                   /* 4 M floats: its stats are like the others' */
            want_stats(t, j, stats);
            counts_reset();
            const struct text *st = core_tensor_digest(fs.st, j, TF_STATS, &err);
            text_is(st, stats, GGUF_FSTATS_TEXT_LEN);
            assert_int_equal(reads_all(), core_chunks(fs.st, j));
            assert_ptr_equal(core_tensor_digest(fs.st, j, TF_STATS, &err), st);
            assert_int_equal(reads_all(), core_chunks(fs.st, j));
        }
        mount_down();
    }
}

/* stats go through the block cache as f32 reads do: a tensor that fits in
 * half of it keeps its chunks for a later read, and stats after an f32
 * read fill nothing; a larger one passes through without being kept. */
static void digests_stats_cache(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    struct f32_pin p;
    pin_check(T_Q8, NULL, 0, 3 * 4096, &p);
    core_f32_unpin(&fs, &p, true);
    counts_reset();
    int err = 0;
    char want[GGUF_FSTATS_TEXT_MAX];
    want_stats(T_Q8, T_Q8, want);
    text_is(core_tensor_digest(fs.st, T_Q8, TF_STATS, &err), want, GGUF_FSTATS_TEXT_LEN);
    assert_int_equal(reads_all(), 0);
    want_stats(T_Q4K, T_Q4K, want);
    text_is(core_tensor_digest(fs.st, T_Q4K, TF_STATS, &err), want, GGUF_FSTATS_TEXT_LEN);
    assert_int_equal(reads_all(), 3);
    uint64_t m = stats_now().misses;
    pin_check(T_Q4K, NULL, 0, 3 * 4096, &p);
    core_f32_unpin(&fs, &p, true);
    assert_int_equal(stats_now().misses, m);         /* served from the cache */
    mount_down();

    /* a cache of a few blocks: big (16 chunks) passes through */
    mount_up(tpath("m.gguf"), 4096, 10 * 8192);
    want_stats(T_BIG, T_BIG, want);
    text_is(core_tensor_digest(fs.st, T_BIG, TF_STATS, &err), want, GGUF_FSTATS_TEXT_LEN);
    struct cache_stats s = stats_now();
    assert_int_equal(s.misses, 16);
    assert_true(s.blocks_held <= 2);                 /* each reused for the next */
    mount_down();
}

/* /hashes: its size known before anything is computed, its text
 * llama-gguf-hash's over the raw bytes (each tensor's lines, then the
 * model's), every tensor read once, what was known reused, what was
 * computed kept. */
static void digests_hashes(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    uint64_t size = core_hashes_size(fs.st);
    assert_int_equal(core_hashes_size(fs.st), size);
    assert_int_equal(reads_all(), 0);
    int err = 0;
    const struct text *x0 = core_tensor_digest(fs.st, 0, TF_XXH64, &err);
    assert_non_null(x0);
    char *want = malloc(size + 1);
    assert_non_null(want);
    size_t at = 0;
    XXH64_state_t *mx = XXH64_createState();
    EVP_MD_CTX *ms = EVP_MD_CTX_new();
    assert_true(mx && ms);
    XXH64_reset(mx, 0);
    assert_int_equal(EVP_DigestInit_ex(ms, EVP_sha256(), NULL), 1);
    uint64_t total = 0;
    for (unsigned j = 0; j < NT; j++) {
        const struct tspec *t = &T[all_idx[j]];
        char xxh[18], sha[66];
        want_digests(all_idx[j], false, xxh, sha);
        xxh[16] = sha[64] = 0;
        at += (size_t)snprintf(want + at, size + 1 - at, "%-8s  %s  model.gguf:%s\n", "xxh64",
                               xxh, t->name);
        at += (size_t)snprintf(want + at, size + 1 - at, "%-8s  %s  model.gguf:%s\n", "sha256",
                               sha, t->name);
        XXH64_update(mx, t->le, t->nbytes);
        EVP_DigestUpdate(ms, t->le, t->nbytes);
        total += t->nbytes;
    }
    unsigned char md[32];
    unsigned len = 0;
    char sha[66];
    assert_int_equal(EVP_DigestFinal_ex(ms, md, &len), 1);
    hex_of(md, 32, sha);
    sha[64] = 0;
    at += (size_t)snprintf(want + at, size + 1 - at, "%-8s  %016llx  model.gguf\n", "xxh64",
                           (unsigned long long)XXH64_digest(mx));
    at += (size_t)snprintf(want + at, size + 1 - at, "%-8s  %s  model.gguf\n", "sha256", sha);
    XXH64_freeState(mx);
    EVP_MD_CTX_free(ms);
    assert_int_equal(at, size);

    counts_reset();
    const struct text *h = core_hashes(fs.st, &err);
    text_is(h, want, size);
    assert_int_equal(rd_bytes, total);               /* every tensor once */
    /* the model's digests over every byte, the tensors' over those of the
     * tensors whose digests were not known (tensor 0's was) */
    assert_int_equal(hashed_bytes, total + total - T[all_idx[0]].nbytes);
    assert_ptr_equal(core_hashes(fs.st, &err), h);    /* kept */
    assert_ptr_equal(core_tensor_digest(fs.st, 0, TF_XXH64, &err), x0);   /* reused */
    char xxh[18];
    want_digests(T_BIG, false, xxh, sha);
    text_is(core_tensor_digest(fs.st, T_BIG, TF_XXH64, &err), xxh, 17);
    assert_int_equal(rd_bytes, total);               /* the tensors' kept too */
    free(want);
    mount_down();
}

/* A read that fails: EIO, core_source_failed told, nothing kept, and the
 * next call computes it. */
static void digests_read_fails(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    const struct gguf_file *gf = st_meta(fs.st);
    uint64_t f32_at = gf->data_off + t_off[T_F32];
    fail_range(f32_at + 4096, f32_at + 4097);      /* chunk 1 of the f32 tensor */
    int err = 0;
    assert_null(core_tensor_digest(fs.st, T_F32, TF_STATS, &err));
    assert_int_equal(err, EIO);
    assert_int_equal(failed_calls, 1);
    assert_int_equal(failed_pos, f32_at + 4096);
    assert_int_equal(failed_len, 4096);
    assert_null(core_tensor_digest(fs.st, T_F32, TF_SHA256, &err));
    assert_int_equal(err, EIO);
    assert_int_equal(failed_pos, f32_at);
    assert_int_equal(failed_len, T[T_F32].nbytes);
    assert_null(core_hashes(fs.st, &err));
    assert_int_equal(err, EIO);
    uint64_t q8_at = gf->data_off + t_off[T_Q8];
    fail_range(q8_at, q8_at + 1);
    assert_null(core_tensor_digest(fs.st, T_Q8, TF_STATS, &err));
    assert_int_equal(err, EIO);
    assert_int_equal(failed_calls, 4);
    fail_range(0, 0);
    char want[GGUF_FSTATS_TEXT_MAX], xxh[18], sha[66];
    want_stats(T_F32, T_F32, want);
    text_is(core_tensor_digest(fs.st, T_F32, TF_STATS, &err), want, GGUF_FSTATS_TEXT_LEN);
    want_stats(T_Q8, T_Q8, want);
    text_is(core_tensor_digest(fs.st, T_Q8, TF_STATS, &err), want, GGUF_FSTATS_TEXT_LEN);
    want_digests(T_F32, false, xxh, sha);
    text_is(core_tensor_digest(fs.st, T_F32, TF_SHA256, &err), sha, 65);
    const struct text *h = core_hashes(fs.st, &err);
    assert_non_null(h);
    assert_int_equal(h->len, core_hashes_size(fs.st));
    mount_down();
}

/* Two threads computing the same text at once: both compute, the first
 * to finish publishes, the other frees its copy and returns the one
 * published.  The other thread is held at the gate (its first read) while
 * the main thread computes. */
struct digest_job {
    unsigned t;
    enum tensor_file tf;
    bool hashes;
    const struct text *got;
    int err;
};

static void *digest_thread(void *arg)
{
    struct digest_job *j = arg;
    j->got = j->hashes ? core_hashes(fs.st, &j->err)
                       : core_tensor_digest(fs.st, j->t, j->tf, &j->err);
    return NULL;
}

static void digests_race(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    const struct { unsigned t; enum tensor_file tf; bool hashes; unsigned mine; } cases[] = {
        { T_F32, TF_STATS, false, T_F32 },       /* read from the source (raw) */
        { T_F16, TF_XXH64, false, T_F16 },
        { 0, 0, true, T_Q8 },                    /* /hashes' digest of tensor 0 */
    };
    for (unsigned i = 0; i < 3; i++) {
        gate_set(true);
        struct digest_job j = { cases[i].t, cases[i].tf, cases[i].hashes, NULL, 0 };
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, digest_thread, &j), 0);
        wait_at_gate();
        int err = 0;
        enum tensor_file tf = cases[i].hashes ? TF_XXH64 : cases[i].tf;
        const struct text *mine = core_tensor_digest(fs.st, cases[i].mine, tf, &err);
        assert_non_null(mine);
        gate_set(false);
        assert_int_equal(pthread_join(th, NULL), 0);
        assert_non_null(j.got);
        if (cases[i].hashes)
            assert_ptr_equal(core_tensor_digest(fs.st, cases[i].mine, tf, &err), mine);
        else
            assert_ptr_equal(j.got, mine);
    }
    mount_down();
}

/* Out of memory anywhere in a computation: ENOMEM, nothing kept, nothing
 * leaked; with memory, the text. */
static void digests_enomem(void **state)
{
    (void)state;
    mount_up(tpath("m.gguf"), 4096, 8u << 20);
    const size_t caps[] = { 0, 8, 16, 24, 32, 48, 64, 96, 128, 200, 256, 300, 400, 512,
                            1024, 2048, 4095, 4096, 8191, 8192, 65536, 1u << 20,
                            (4u << 20) - 1, 4u << 20, SIZE_MAX };
    const unsigned ts[] = { T_F32, T_Q8, T_TINY };
    unsigned enomem = 0;
    for (unsigned c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        cache_clear(fs.cache);
        size_t live = __atomic_load_n(&mem_live, __ATOMIC_RELAXED);
        for (unsigned k = 0; k < 3; k++) {
            for (enum tensor_file tf = TF_STATS; tf <= TF_SHA256; tf++) {
                cache_clear(fs.cache);
                int err = 0;
                mem_cap = caps[c];
                const struct text *t = core_tensor_digest(fs.st, ts[k], tf, &err);
                mem_cap = SIZE_MAX;
                if (!t) {
                    assert_int_equal(err, ENOMEM);
                    enomem++;
                }
            }
        }
        int err = 0;
        mem_cap = caps[c];
        const struct text *h = core_hashes(fs.st, &err);
        mem_cap = SIZE_MAX;
        if (!h)
            assert_int_equal(err, ENOMEM);
        /* nothing but the texts kept: freed with the table */
        core_digests_free(&fs);
        cache_clear(fs.cache);
        assert_int_equal(core_digests_new(&fs, fs.st->n_tensors), 0);
        assert_int_equal(__atomic_load_n(&mem_live, __ATOMIC_RELAXED), live);
        if (caps[c] == SIZE_MAX)
            assert_non_null(h);
    }
    assert_true(enomem > 0);
    /* memory runs out after the first read: in the middle of a
     * computation, or when its text is made */
    enomem = 0;
    for (unsigned c = 0; c < sizeof caps / sizeof caps[0]; c++) {
        cache_clear(fs.cache);
        size_t live = __atomic_load_n(&mem_live, __ATOMIC_RELAXED);
        for (unsigned k = 0; k < 4; k++) {
            int err = 0;
            cap_after_read = caps[c];
            cap_armed = true;
            const struct text *t = k < 3 ? core_tensor_digest(fs.st, T_Q8, TF_STATS + k, &err)
                                         : core_hashes(fs.st, &err);
            cap_armed = false;
            mem_cap = SIZE_MAX;
            if (!t) {
                assert_int_equal(err, ENOMEM);
                enomem++;
            }
            assert_true(t || caps[c] != SIZE_MAX);
        }
        core_digests_free(&fs);
        cache_clear(fs.cache);
        assert_int_equal(core_digests_new(&fs, fs.st->n_tensors), 0);
        assert_int_equal(__atomic_load_n(&mem_live, __ATOMIC_RELAXED), live);
    }
    assert_true(enomem > 0);
    /* the table itself */
    core_digests_free(&fs);
    core_digests_free(&fs);                      /* none: a no-op */
    for (size_t cap = 0; cap <= 256; cap += 8) {
        mem_cap = cap;
        int e = core_digests_new(&fs, fs.st->n_tensors);
        mem_cap = SIZE_MAX;
        assert_true(e == 0 || e == ENOMEM);
        assert_true(e ? fs.digests == NULL : fs.digests != NULL);
        core_digests_free(&fs);
    }
    mem_cap = 256;                               /* the table, not its slots */
    assert_int_equal(core_digests_new(&fs, 1000), ENOMEM);
    mem_cap = SIZE_MAX;
    assert_null(fs.digests);
    assert_int_equal(core_digests_new(&fs, 0), 0);   /* no tensors: a table still */
    core_digests_free(&fs);
    assert_int_equal(core_digests_new(&fs, fs.st->n_tensors), 0);
    mount_down();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(f32_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(f32_chunks, setup, teardown),
        cmocka_unit_test_setup_teardown(f32_pins, setup, teardown),
        cmocka_unit_test_setup_teardown(f32_read_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(f32_underneath, setup, teardown),
        cmocka_unit_test_setup_teardown(f32_workers, setup, teardown),
        cmocka_unit_test_setup_teardown(f32_workers_full, setup, teardown),
        cmocka_unit_test_setup_teardown(f32_workers_none, setup, teardown),
        cmocka_unit_test_setup_teardown(f32_thread_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(digests_texts, setup, teardown),
        cmocka_unit_test_setup_teardown(digests_stats_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(digests_hashes, setup, teardown),
        cmocka_unit_test_setup_teardown(digests_read_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(digests_race, setup, teardown),
        cmocka_unit_test_setup_teardown(digests_enomem, setup, teardown),
    };
    main_th = pthread_self();
    work_reset();
    kern_dequant_init();
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/gguffs-f32-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir))
        return 1;
    for (unsigned i = 0; i < NT; i++)
        make_tensor(&T[i]);
    write_model(tpath("be.gguf"), be_idx, N_BE, true, NULL);
    write_model(tpath("m.gguf"), all_idx, NT, false, t_off);
    /* the main thread's fill buffer (f64), made once: not a test's */
    mount_up(tpath("m.gguf"), 65536, 8u << 20);
    struct f32_pin p;
    assert_int_equal(core_f32_pin(fs.st, NULL, T_F64, 0, 4, &p), 0);
    core_f32_unpin(&fs, &p, false);
    mount_down();
    int failed = cmocka_run_group_tests_name("f32", tests, NULL, NULL);
    for (unsigned i = 0; i < NT; i++) {
        free(T[i].le);
        free(T[i].be);
        free(T[i].f);
    }
    unlink(tpath("m.gguf"));
    unlink(tpath("be.gguf"));
    return rmdir(tmpdir) == 0 ? failed : 1;
}

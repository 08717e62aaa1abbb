/*
 * tests/unit/test_edit.c — gguf/edit: building headers and committing them.
 *
 *  - round trips (gguf_header_build -> gguf_commit -> gguf_open) of changed,
 *    added, removed, renamed, reordered and retyped keys, for versions 1-3,
 *    both byte orders, alignments 32/64/4096, by the in-place and the
 *    rewrite path: same key/values as given, same tensor infos, every
 *    tensor byte unchanged; ggml (the oracle) loads v2/v3 little-endian
 *    results;
 *  - general.alignment edits refused; malformed values refused;
 *  - commit refusals and preservation (changed model, leftover journal,
 *    mode/owner, symlinks, the copy fallback);
 *  - the padding key (gguf/pad.h): sizes, in place, whole steps, never
 *    re-added once deleted, others' keys of that name left alone;
 *    gguf_commit_edit where TMPDIR is (cloned on XFS/btrfs, copied and
 *    unpadded elsewhere: tests/integration/test_reflink.py runs this
 *    program with TMPDIR on loop-mounted XFS and btrfs);
 *  - crash injection: a child crashes (_exit) before every step of both
 *    commit paths (torn writes included; the clone of a padded rewrite, or
 *    its refusal; an in-place range written in runs of changed pages), and
 *    before every step of the recovery that follows; and real kill -9 at
 *    random moments.  After gguf_recover the model must be bit for bit the
 *    old or the new version;
 *  - an in-place edit writes only the pages that change (counted writes),
 *    and its journal holds only their old bytes (its run table read);
 *  - journals of the earlier format (GGUFFSJ1, one range) still recovered:
 *    the model old, new and torn; a run table gguffs does not write refused.
 *
 * Environment: GGUFFS_ORACLE (libggml-base.so; without it the ggml check is
 * skipped, unless CI is set), GGUFFS_CRASH_TRIALS (kill -9 trials, default
 * 240), TMPDIR.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gguf/edit.h"
#include "gguf/gguf.h"
#include "gguf/journal.h"     /* the journal's format: its own tests below */
#include "gguf/source.h"
#include "gguf/types.h"
#include "gguf/value.h"

/* ---- utilities ---------------------------------------------------------------- */

/* true if some tensor of f has bytes (then headers are padded). */
static bool has_data(const struct gguf_file *f)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].nbytes)
            return true;
    return false;
}

/* A source that hides its descriptor (fd -1), so that gguf_commit must read
 * the tensor data through it; counts the reads. */
struct nofd_source {
    struct gguf_source s;
    struct gguf_source *inner;
    unsigned reads;
};

static ssize_t nofd_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    struct nofd_source *n = (struct nofd_source *)s;
    n->reads++;
    return n->inner->ops->read(n->inner, buf, len, off);
}

static void nofd_close(struct gguf_source *s)
{
    gguf_source_close(((struct nofd_source *)s)->inner);
    free(s);
}

static const struct gguf_source_ops nofd_ops = { .read = nofd_read, .close = nofd_close };
static bool hide_fd;             /* commit_file wraps the source in a nofd_source */
static unsigned nofd_reads;      /* reads through the last one */

/* gguf_commit with the model's source opened now: the version f indexes,
 * unless the test changed the file behind its back. */
static enum gguf_err commit_file(const char *path, const struct gguf_file *f,
                                 const uint8_t *hdr, size_t len, bool *ip,
                                 struct gguf_diag *d)
{
    struct gguf_source *src;
    enum gguf_err e = gguf_source_file(path, &src, d);
    if (e)
        return e;
    if (hide_fd) {
        struct nofd_source *n = calloc(1, sizeof *n);
        assert_non_null(n);
        n->s = *src;
        n->s.ops = &nofd_ops;
        n->s.fd = -1;
        n->inner = src;
        src = &n->s;
    }
    e = gguf_commit(path, f, src, hdr, len, ip, d);
    if (hide_fd)
        nofd_reads = ((struct nofd_source *)src)->reads;
    gguf_source_close(src);
    return e;
}

static char tmpdir[4096];

/* tmpdir/name; the same name gives the same (lasting) buffer. */
static const char *tpath(const char *name)
{
    static char bufs[16][4200];
    static const char *names[16];
    unsigned k;
    for (k = 0; k < 16 && names[k]; k++)
        if (strcmp(names[k], name) == 0)
            return bufs[k];
    assert_true(k < 16);
    names[k] = name;
    snprintf(bufs[k], sizeof bufs[k], "%s/%s", tmpdir, name);
    return bufs[k];
}

static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
#define FNV0 1469598103934665603ull

static uint8_t *slurp(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return NULL;
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    uint8_t *p = malloc((size_t)st.st_size + 1);
    assert_non_null(p);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, p + got, (size_t)st.st_size - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return p;
}

static void spit(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(fd, (const uint8_t *)p + done, n - done);
        assert_true(w > 0);
        done += (size_t)w;
    }
    close(fd);
}

static uint64_t hash_file(const char *path, uint64_t from)
{
    size_t n;
    uint8_t *p = slurp(path, &n);
    assert_non_null(p);
    assert_true(from <= n);
    uint64_t h = fnv(FNV0, p + from, n - from);
    free(p);
    return h;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* An idle journal: kept by a committed in-place edit, "GGUFFSJ0" first. */
static bool journal_idle(const char *path)
{
    char m[8] = { 0 };
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return false;
    size_t r = fread(m, 1, sizeof m, fp);
    fclose(fp);
    return r == sizeof m && memcmp(m, "GGUFFSJ0", 8) == 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- the ggml oracle -------------------------------------------------------------- */

struct o_params { bool no_alloc; void **ctx; };
static void *(*o_init)(const char *, struct o_params);
static int64_t (*o_n_kv)(const void *);
static int64_t (*o_n_tensors)(const void *);
static size_t (*o_data_offset)(const void *);
static void (*o_free)(void *);
static bool oracle_needed;
static unsigned oracle_checks;

static void load_oracle(void)
{
    const char *path = getenv("GGUFFS_ORACLE");
    void *h = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    oracle_needed = getenv("CI") && *getenv("CI");
    if (!h) {
        fprintf(stderr, "test_edit: %s ggml oracle unavailable (%s): the ggml "
                "loading check is %s\n", oracle_needed ? "FAIL:" : "note:",
                path && *path ? dlerror() : "GGUFFS_ORACLE is not set",
                oracle_needed ? "required (CI is set)" : "skipped");
        return;
    }
    *(void **)&o_init = dlsym(h, "gguf_init_from_file");
    *(void **)&o_n_kv = dlsym(h, "gguf_get_n_kv");
    *(void **)&o_n_tensors = dlsym(h, "gguf_get_n_tensors");
    *(void **)&o_data_offset = dlsym(h, "gguf_get_data_offset");
    *(void **)&o_free = dlsym(h, "gguf_free");
    if (!o_init || !o_n_kv || !o_n_tensors || !o_data_offset || !o_free) {
        fprintf(stderr, "test_edit: %s lacks a gguf_* symbol\n", path);
        o_init = NULL;
        oracle_needed = true;
    }
}

static void oracle_check(const char *path, const struct gguf_file *f)
{
    if (!o_init) {
        if (oracle_needed)
            fail_msg("the ggml oracle is required (CI is set) but unavailable");
        return;
    }
    struct o_params p = { true, NULL };
    void *ctx = o_init(path, p);
    if (!ctx)
        fail_msg("ggml's gguf_init_from_file refuses %s", path);
    assert_int_equal(o_n_kv(ctx), (int64_t)f->n_kv);
    assert_int_equal(o_n_tensors(ctx), (int64_t)f->n_tensors);
    /* (without tensors ggml reports the unpadded header size) */
    if (f->n_tensors && o_data_offset(ctx) != f->data_off)
        fail_msg("%s: ggml's data offset is %zu, ours %llu (v%u, alignment %llu)",
                 path, o_data_offset(ctx), (unsigned long long)f->data_off,
                 f->version, (unsigned long long)f->alignment);
    o_free(ctx);
    oracle_checks++;
}

/* ---- a GGUF builder --------------------------------------------------------------- */

struct gb {
    struct gguf_buf b;
    struct gguf_enc e;
};

static void gb_put(struct gb *g, const void *p, size_t n)
{
    assert_true(gguf_buf_put(&g->b, p, n));
}

static void gb_u32(struct gb *g, uint32_t v)
{
    if (g->e.big_endian)
        v = __builtin_bswap32(v);
    gb_put(g, &v, 4);
}

static void gb_u64(struct gb *g, uint64_t v)
{
    if (g->e.big_endian)
        v = __builtin_bswap64(v);
    gb_put(g, &v, 8);
}

static void gb_count(struct gb *g, uint64_t v)
{
    if (g->e.v1)
        gb_u32(g, (uint32_t)v);
    else
        gb_u64(g, v);
}

static void gb_str(struct gb *g, const char *s, size_t n)
{
    gb_count(g, n);
    gb_put(g, s, n);
}

/* Encoded values ("bin") in encoding e; the result is owned by the caller. */
struct val {
    uint32_t type;
    struct gguf_buf b;
};

static struct val v_u32(const struct gguf_enc *e, uint32_t x)
{
    struct gb g = { .e = *e };
    gb_u32(&g, x);
    return (struct val){ GGUF_U32, g.b };
}

static struct val v_u64(const struct gguf_enc *e, uint64_t x)
{
    struct gb g = { .e = *e };
    gb_u64(&g, x);
    return (struct val){ GGUF_U64, g.b };
}

static struct val v_str(const struct gguf_enc *e, const char *s, size_t n)
{
    struct gb g = { .e = *e };
    gb_str(&g, s, n);
    return (struct val){ GGUF_STRING, g.b };
}

static struct val v_i32s(const struct gguf_enc *e, size_t n)
{
    struct gb g = { .e = *e };
    gb_u32(&g, GGUF_I32);
    gb_count(&g, n);
    for (size_t i = 0; i < n; i++)
        gb_u32(&g, (uint32_t)(i * 7919u));
    return (struct val){ GGUF_ARRAY, g.b };
}

/* A key/value list (the expected content of a header). */
struct ekv {
    char *key;
    size_t key_len;
    uint32_t type;
    uint8_t *val;
    size_t val_len;
};
struct kvl {
    size_t n;
    struct ekv *v;
};

static void kvl_free(struct kvl *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].key);
        free(l->v[i].val);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

static void ekv_set(struct ekv *k, const char *key, size_t key_len,
                    uint32_t type, const void *val, size_t val_len)
{
    char *nk = malloc(key_len + 1);
    uint8_t *nv = malloc(val_len + 1);
    assert_true(nk && nv);
    memcpy(nk, key, key_len);
    nk[key_len] = '\0';
    if (val_len)
        memcpy(nv, val, val_len);
    free(k->key);
    free(k->val);
    *k = (struct ekv){ nk, key_len, type, nv, val_len };
}

static size_t kvl_find(const struct kvl *l, const char *key)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].key_len == strlen(key) && memcmp(l->v[i].key, key, l->v[i].key_len) == 0)
            return i;
    fail_msg("no key %s", key);
    return 0;
}

/* Sets key to v (adding it at the end if absent); consumes v. */
static void kvl_set(struct kvl *l, const char *key, struct val v)
{
    size_t i;
    for (i = 0; i < l->n; i++)
        if (l->v[i].key_len == strlen(key) && memcmp(l->v[i].key, key, l->v[i].key_len) == 0)
            break;
    if (i == l->n) {
        l->v = realloc(l->v, (l->n + 1) * sizeof *l->v);
        assert_non_null(l->v);
        memset(&l->v[l->n++], 0, sizeof *l->v);
    }
    ekv_set(&l->v[i], key, strlen(key), v.type, v.b.data, v.b.len);
    gguf_buf_free(&v.b);
}

static void kvl_del(struct kvl *l, const char *key)
{
    size_t i = kvl_find(l, key);
    free(l->v[i].key);
    free(l->v[i].val);
    memmove(&l->v[i], &l->v[i + 1], (l->n - i - 1) * sizeof *l->v);
    l->n--;
}

static void kvl_rename(struct kvl *l, const char *from, const char *to)
{
    struct ekv *k = &l->v[kvl_find(l, from)];
    char *nk = strdup(to);
    assert_non_null(nk);
    free(k->key);
    k->key = nk;
    k->key_len = strlen(to);
}

/* Moves entry i to position j. */
static void kvl_move(struct kvl *l, size_t i, size_t j)
{
    struct ekv t = l->v[i];
    if (i < j)
        memmove(&l->v[i], &l->v[i + 1], (j - i) * sizeof t);
    else
        memmove(&l->v[j + 1], &l->v[j], (i - j) * sizeof t);
    l->v[j] = t;
}

static void kvl_of_file(struct kvl *l, const struct gguf_file *f)
{
    memset(l, 0, sizeof *l);
    l->v = calloc(f->n_kv + 1, sizeof *l->v);
    assert_non_null(l->v);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_newkv k = gguf_newkv_of(f, i);
        ekv_set(&l->v[i], k.key, k.key_len, k.type, k.val, k.val_len);
    }
    l->n = f->n_kv;
}

/* A view of the list as gguf_newkv (pointers into l). */
static struct gguf_newkv *kvl_view(const struct kvl *l)
{
    struct gguf_newkv *v = calloc(l->n + 1, sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < l->n; i++)
        v[i] = (struct gguf_newkv){ l->v[i].key, l->v[i].key_len, l->v[i].type,
                                    l->v[i].val, l->v[i].val_len };
    return v;
}

struct spec {
    uint32_t version;
    bool be;
    uint32_t align;        /* 0: no general.alignment (32 implied) */
    size_t data_floats[3]; /* sizes of three f32 tensors (0: absent) */
    bool dup;              /* a duplicated key */
    uint32_t types[3];     /* type ids written for them (0, f32, unless set:
                              ids gguffs does not know, for instance) */
};

static void add_kv(struct gb *g, uint64_t *n, const char *key, struct val v)
{
    gb_str(g, key, strlen(key));
    gb_u32(g, v.type);
    gb_put(g, v.b.data, v.b.len);
    gguf_buf_free(&v.b);
    ++*n;
}

/* Builds a model file per s at path; tensor data is random. */
static void make_model(const char *path, const struct spec *s)
{
    struct gb g = { .e = { .big_endian = s->be, .v1 = s->version == 1 } };
    const struct gguf_enc *e = &g.e;
    struct gb kv = { .e = *e };
    uint64_t n_kv = 0;
    add_kv(&kv, &n_kv, "general.architecture", v_str(e, "llama", 5));
    add_kv(&kv, &n_kv, "general.name", v_str(e, "a test model", 12));
    if (s->align)
        add_kv(&kv, &n_kv, "general.alignment", v_u32(e, s->align));
    add_kv(&kv, &n_kv, "llama.context_length", v_u32(e, 4096));
    add_kv(&kv, &n_kv, "llama.block_count", v_u64(e, 32));
    {
        struct gb a = { .e = *e };
        gb_u32(&a, GGUF_STRING);
        gb_count(&a, 3);
        gb_str(&a, "<s>", 3);
        gb_str(&a, "", 0);
        gb_str(&a, "a\nb", 3);
        add_kv(&kv, &n_kv, "tokenizer.ggml.tokens", (struct val){ GGUF_ARRAY, a.b });
    }
    {
        struct gb a = { .e = *e };
        uint8_t one = 1;
        gb_put(&a, &one, 1);
        add_kv(&kv, &n_kv, "general.flag", (struct val){ GGUF_BOOL, a.b });
    }
    add_kv(&kv, &n_kv, "llama.rope.scales", v_i32s(e, 5));
    if (s->dup)
        add_kv(&kv, &n_kv, "general.name", v_str(e, "second", 6));

    uint64_t n_t = 0, off = 0, align = s->align ? s->align : 32;
    struct gb ti = { .e = *e };
    for (unsigned i = 0; i < 3; i++) {
        if (!s->data_floats[i])
            continue;
        char name[32];
        snprintf(name, sizeof name, "blk.%u.weight", i);
        gb_str(&ti, name, strlen(name));
        gb_u32(&ti, 1);
        gb_count(&ti, s->data_floats[i]);
        gb_u32(&ti, s->types[i]);  /* f32 unless set */
        gb_u64(&ti, off);
        off += s->data_floats[i] * 4;
        off += (align - off % align) % align;
        n_t++;
    }
    gb_put(&g, "GGUF", 4);
    gb_u32(&g, s->version);
    gb_count(&g, n_t);
    gb_count(&g, n_kv);
    gb_put(&g, kv.b.data, kv.b.len);
    gb_put(&g, ti.b.data, ti.b.len);
    while (g.b.len % align)
        gb_put(&g, "", 1);
    size_t data_start = g.b.len;
    for (uint64_t i = 0; i < off; i += 8) {
        uint64_t r = rnd();
        gb_put(&g, &r, off - i < 8 ? off - i : 8);
    }
    assert_int_equal(g.b.len, data_start + off);
    spit(path, g.b.data, g.b.len);
    gguf_buf_free(&g.b);
    gguf_buf_free(&kv.b);
    gguf_buf_free(&ti.b);
}

static struct gguf_file *open_ok(const char *path)
{
    struct gguf_file *f;
    struct gguf_diag d;
    enum gguf_err e = gguf_open(path, &f, &d);
    if (e)
        fail_msg("gguf_open %s: %s", path, d.msg);
    return f;
}

/* The tensor info bytes of f. */
static const uint8_t *tinfo(const struct gguf_file *f, size_t *len)
{
    uint64_t at = f->n_tensors ? f->tensors[0].info_off : f->hdr_size;
    *len = f->hdr_size - at;
    return f->hdr + at;
}

/* Checks the model at path: key/values l, tensor infos and data as in the
 * original (tinfo bytes ti, data hash dh, data length dl). */
static void check_model(const char *path, const struct kvl *l, const uint8_t *ti,
                        size_t ti_len, uint64_t dh, uint64_t dl, uint32_t version,
                        bool be)
{
    struct gguf_file *f = open_ok(path);
    assert_int_equal(f->version, version);
    assert_int_equal(f->enc.big_endian, be);
    assert_int_equal(f->n_kv, l->n);
    for (size_t i = 0; i < l->n; i++) {
        struct gguf_newkv k = gguf_newkv_of(f, i);
        if (k.key_len != l->v[i].key_len || memcmp(k.key, l->v[i].key, k.key_len) ||
            k.type != l->v[i].type || k.val_len != l->v[i].val_len ||
            memcmp(k.val, l->v[i].val, k.val_len))
            fail_msg("%s: key/value #%zu differs", path, i);
    }
    size_t tl;
    const uint8_t *t = tinfo(f, &tl);
    assert_int_equal(tl, ti_len);
    assert_memory_equal(t, ti, tl);
    uint64_t start = f->file_size < f->data_off ? f->file_size : f->data_off;
    assert_int_equal(f->file_size - start, dl);
    assert_true(hash_file(path, start) == dh);
    bool dup = false, unknown = false;
    for (uint64_t i = 0; i < f->n_kv; i++)
        dup |= f->kv[i].dup > 1;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        unknown |= ggml_type_get(f->tensors[i].type) == NULL;
    if (version >= 2 && !be && !dup && !unknown)
        oracle_check(path, f);
    gguf_close(f);
}

/* ---- round trips ----------------------------------------------------------------- */

static unsigned n_in_place, n_rewrite;

/* Builds l for the model at path, commits it and checks the result.
 * expect: 1 in place, 0 rewrite, -1 either. */
static void apply(const char *path, const struct kvl *l, int expect)
{
    struct gguf_file *f = open_ok(path);
    size_t ti_len;
    const uint8_t *ti0 = tinfo(f, &ti_len);
    uint8_t *ti = malloc(ti_len + 1);
    assert_non_null(ti);
    memcpy(ti, ti0, ti_len);
    uint64_t start = f->file_size < f->data_off ? f->file_size : f->data_off;
    uint64_t dl = f->file_size - start, dh = hash_file(path, start);
    uint32_t version = f->version;
    bool be = f->enc.big_endian;

    struct gguf_newkv *v = kvl_view(l);
    struct gguf_buf h = { 0 };
    struct gguf_diag d;
    enum gguf_err e = gguf_header_build(f, v, l->n, &h, &d);
    if (e)
        fail_msg("gguf_header_build: %s", d.msg);
    /* padded where tensor bytes follow; a file without them ends with its
     * header (2026-11-23: a huge general.alignment made edits allocate it) */
    if (has_data(f))
        assert_int_equal(h.len % f->alignment, 0);
    else
        assert_true(h.len < (1u << 30));
    bool ip = false;
    e = commit_file(path, f, (const uint8_t *)h.data, h.len, &ip, &d);
    if (e)
        fail_msg("gguf_commit: %s", d.msg);
    uint64_t room = has_data(f) ? f->data_off : f->file_size;
    assert_int_equal(ip, h.len == room && f->file_size >= room);
    /* the expected path is stated for files with tensor data; without it
     * the rule above (the whole file is the room) decides */
    if (expect >= 0 && has_data(f))
        assert_int_equal(ip, expect);
    ip ? n_in_place++ : n_rewrite++;
    /* an in-place edit keeps its journal, idle, for the next one; a
     * rewrite removes it */
    assert_true(!exists(tpath("m.gguf.gguffs-journal")) || journal_idle(tpath("m.gguf.gguffs-journal")));
    if (!ip)
        assert_false(exists(tpath("m.gguf.gguffs-journal")));
    assert_false(exists(tpath("m.gguf.gguffs-new")));
    gguf_close(f);
    check_model(path, l, ti, ti_len, dh, dl, version, be);
    char what[200];
    assert_int_equal(gguf_recover(path, GGUF_RECOVER_CHECK, what, sizeof what, &d), GGUF_OK);
    assert_string_equal(what, "");
    if (exists(tpath("m.gguf.gguffs-journal"))) {
        /* the editor re-opening keeps it; a new mount removes it */
        assert_int_equal(gguf_recover(path, GGUF_RECOVER_FIX_LIVE, what, sizeof what, &d),
                         GGUF_OK);
        assert_string_equal(what, "");
        assert_true(exists(tpath("m.gguf.gguffs-journal")));
        if (n_in_place % 2) {
            assert_int_equal(gguf_recover(path, GGUF_RECOVER_FIX, what, sizeof what, &d),
                             GGUF_OK);
            assert_non_null(strstr(what, "idle journal"));
            assert_false(exists(tpath("m.gguf.gguffs-journal")));
        }
    }
    gguf_commit_end(path);
    assert_false(exists(tpath("m.gguf.gguffs-journal")));
    assert_int_equal(gguf_recover(path, GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
    assert_string_equal(what, "");
    free(ti);
    free(v);
    gguf_buf_free(&h);
}

static void round_trips(const struct spec *s)
{
    const char *path = tpath("m.gguf");
    make_model(path, s);
    struct gguf_file *f = open_ok(path);
    struct gguf_enc e = f->enc;
    uint64_t align = f->alignment;
    struct kvl l;
    kvl_of_file(&l, f);

    /* identity: the same bytes (the builder pads with zeros), nothing written */
    struct gguf_newkv *v = kvl_view(&l);
    struct gguf_buf h = { 0 };
    struct gguf_diag d;
    assert_int_equal(gguf_header_build(f, v, l.n, &h, &d), GGUF_OK);
    assert_int_equal(h.len, has_data(f) ? f->data_off : f->hdr_size);
    assert_memory_equal(h.data, f->hdr, f->hdr_size);
    free(v);
    gguf_buf_free(&h);
    gguf_close(f);
    apply(path, &l, 1);

    /* change a value, same size: in place */
    kvl_set(&l, "llama.context_length", v_u32(&e, 8192));
    apply(path, &l, 1);
    /* reorder: same size, in place */
    kvl_move(&l, l.n - 1, 0);
    apply(path, &l, 1);
    kvl_move(&l, 2, l.n - 1);
    apply(path, &l, 1);
    /* a string one byte longer: either */
    kvl_set(&l, "general.name", v_str(&e, "a test model!", 13));
    apply(path, &l, -1);
    /* add a key more than an alignment unit long: rewrite */
    char *big = malloc(align + 1);
    assert_non_null(big);
    memset(big, 'x', align + 1);
    kvl_set(&l, "general.description", v_str(&e, big, align + 1));
    apply(path, &l, 0);
    /* remove it again: rewrite */
    kvl_del(&l, "general.description");
    apply(path, &l, 0);
    /* rename, retype */
    kvl_rename(&l, "general.flag", "general.another_flag_name");
    apply(path, &l, -1);
    kvl_set(&l, "llama.context_length", v_u64(&e, 1ull << 40));
    apply(path, &l, -1);
    /* a 20k-element array (rewrite), then shrink it to 19 999 */
    kvl_set(&l, "tokenizer.ggml.scores", v_i32s(&e, 20000));
    apply(path, &l, 0);
    kvl_set(&l, "tokenizer.ggml.scores", v_i32s(&e, 19999));
    apply(path, &l, -1);
    /* remove every key but general.alignment */
    for (size_t i = l.n; i-- > 0;)
        if (!(l.v[i].key_len == 17 && memcmp(l.v[i].key, "general.alignment", 17) == 0))
            kvl_del(&l, l.v[i].key);
    assert_int_equal(l.n, s->align ? 1 : 0);
    apply(path, &l, -1);
    free(big);
    kvl_free(&l);
}

static void test_round_trips(void **state)
{
    (void)state;
    static const uint32_t aligns[] = { 0, 32, 64, 4096 };
    unsigned runs = 0;
    for (uint32_t version = 1; version <= 3; version++)
        for (int be = 0; be <= 1; be++)
            for (unsigned a = 0; a < 4; a++) {
                struct spec s = { .version = version, .be = be, .align = aligns[a],
                                  .data_floats = { 100, 1000 + a, 5000 } };
                round_trips(&s);
                runs++;
            }
    /* a duplicated key is kept; no tensors at all; a single tensor */
    struct spec dup = { .version = 3, .dup = true, .data_floats = { 10 } };
    round_trips(&dup);
    struct spec none = { .version = 2, .align = 64 };
    round_trips(&none);
    printf("round trips: %u files, %u in place, %u rewrites, %u ggml loads\n",
           runs + 2, n_in_place, n_rewrite, oracle_checks);
    assert_true(n_in_place > 50 && n_rewrite > 50);
}

/* Files with tensors of types gguffs does not know (their sizes derived
 * from the layout): every edit keeps the tensor infos, the sizes and every
 * data byte, for all versions and byte orders.  Unknown in the middle,
 * last, a removed id; alignments 32 and 64. */
static void test_unknown_types(void **state)
{
    (void)state;
    unsigned runs = 0, ip0 = n_in_place, rw0 = n_rewrite;
    for (uint32_t version = 1; version <= 3; version++)
        for (int be = 0; be <= 1; be++) {
            struct spec mid = { .version = version, .be = be,
                                .data_floats = { 100, 1001, 50 },
                                .types = { 0, 57, 0 } };
            struct spec last = { .version = version, .be = be, .align = 64,
                                 .data_floats = { 100, 1001, 77 },
                                 .types = { 0, 4, 4000000000u } };
            const struct spec *specs[] = { &mid, &last };
            for (int k = 0; k < 2; k++) {
                make_model(tpath("m.gguf"), specs[k]);
                struct gguf_file *f = open_ok(tpath("m.gguf"));
                uint64_t sizes[3];
                for (unsigned i = 0; i < 3; i++) {
                    assert_int_equal(f->tensors[i].type, specs[k]->types[i]);
                    sizes[i] = f->tensors[i].nbytes;
                }
                /* f32 is 4 bytes an element; the derived sizes run to the
                 * next tensor (padding included) or to the end */
                uint64_t a = f->alignment;
                for (unsigned i = 0; i < 3; i++) {
                    uint64_t want = specs[k]->data_floats[i] * 4;
                    if (specs[k]->types[i])
                        want = (want + a - 1) / a * a;
                    assert_int_equal(sizes[i], want);
                }
                gguf_close(f);
                round_trips(specs[k]);
                /* the sizes survive the edits */
                f = open_ok(tpath("m.gguf"));
                for (unsigned i = 0; i < 3; i++)
                    assert_int_equal(f->tensors[i].nbytes, sizes[i]);
                gguf_close(f);
                runs++;
            }
        }
    printf("unknown types: %u files, %u in place, %u rewrites\n", runs,
           n_in_place - ip0, n_rewrite - rw0);
}

/* A file with no tensors whose final padding is missing (the file ends with
 * the header): an in-place-sized edit must rewrite. */
static void test_unpadded_end(void **state)
{
    (void)state;
    struct spec s = { .version = 3 };
    const char *path = tpath("m.gguf");
    make_model(path, &s);
    size_t n;
    uint8_t *p = slurp(path, &n);
    struct gguf_file *f = open_ok(path);
    size_t end = f->hdr_size;
    gguf_close(f);
    if (end == n) {      /* add a byte to make sure there was padding */
        free(p);
        struct spec s2 = { .version = 3, .align = 64 };
        make_model(path, &s2);
        p = slurp(path, &n);
        f = open_ok(path);
        end = f->hdr_size;
        gguf_close(f);
    }
    assert_true(end < n);
    spit(path, p, end);
    free(p);
    f = open_ok(path);
    assert_true(f->file_size < f->data_off);
    struct kvl l;
    kvl_of_file(&l, f);
    gguf_close(f);
    kvl_set(&l, "llama.context_length", v_u32(&(struct gguf_enc){ 0 }, 1));
    apply(path, &l, 0);
    kvl_free(&l);
}

/* ---- the padding key (gguf/pad.h) ------------------------------------------------- */

/* f's key gguffs.padding: its index, or -1; its element count in *n. */
static int64_t pad_of(const struct gguf_file *f, uint64_t *n)
{
    int64_t i = gguf_find_key(f, GGUF_KEY_PADDING, strlen(GGUF_KEY_PADDING));
    *n = i >= 0 ? f->kv[i].count : 0;
    return i;
}

/* The header of l for f, fitted with step by gguf_pad_fit; checks what it
 * promises: f's tensor infos, the data start where the header ends, l's
 * key/values in l's order but for the padding key (added last, or its size
 * changed).  *nf: the fitted header parsed (to be closed). */
static struct gguf_buf fit_ok(const struct gguf_file *f, const struct kvl *l, uint64_t step,
                              struct gguf_buf *plain, struct gguf_file **nf)
{
    struct gguf_newkv *v = kvl_view(l);
    struct gguf_buf h = { 0 }, out = { 0 };
    struct gguf_diag d;
    if (gguf_header_build(f, v, l->n, &h, &d))
        fail_msg("gguf_header_build: %s", d.msg);
    free(v);
    if (gguf_pad_fit(f, (const uint8_t *)h.data, h.len, step, &out, &d))
        fail_msg("gguf_pad_fit: %s", d.msg);
    uint64_t dl = f->file_size > f->data_off ? f->file_size - f->data_off : 0;
    if (gguf_parse((const uint8_t *)out.data, out.len, out.len + dl, nf, &d, NULL))
        fail_msg("the fitted header does not parse: %s", d.msg);
    if (has_data(f))
        assert_int_equal((*nf)->data_off, out.len);
    size_t tl, ntl;
    const uint8_t *t = tinfo(f, &tl), *nt = tinfo(*nf, &ntl);
    assert_int_equal(tl, ntl);
    assert_memory_equal(t, nt, tl);
    size_t j = 0;
    for (uint64_t i = 0; i < (*nf)->n_kv; i++) {
        struct gguf_newkv k = gguf_newkv_of(*nf, i);
        bool pad = gguf_key_is_padding(k.key, k.key_len);
        if (j == l->n) {         /* past l's keys: only an added padding key */
            assert_true(pad && i == (*nf)->n_kv - 1);
            continue;
        }
        const struct ekv *e = &l->v[j++];
        assert_int_equal(k.key_len, e->key_len);
        assert_memory_equal(k.key, e->key, k.key_len);
        assert_int_equal(k.type, e->type);
        if (!pad) {
            assert_int_equal(k.val_len, e->val_len);
            assert_memory_equal(k.val, e->val, k.val_len);
        }
    }
    assert_int_equal(j, l->n);
    *plain = h;
    return out;
}

/* Commits the fitted header out to the model at path (indexed by f):
 * in place or not as expected; the file is then out + the old data. */
static void commit_fitted(const char *path, const struct gguf_file *f,
                          const struct gguf_buf *out, const struct gguf_file *nf,
                          bool in_place)
{
    uint64_t dh = hash_file(path, f->data_off), dl = f->file_size - f->data_off;
    size_t tl;
    const uint8_t *t = tinfo(f, &tl);
    uint8_t *ti = malloc(tl + 1);
    assert_non_null(ti);
    memcpy(ti, t, tl);
    struct gguf_diag d;
    bool ip;
    if (commit_file(path, f, (const uint8_t *)out->data, out->len, &ip, &d))
        fail_msg("gguf_commit: %s", d.msg);
    assert_int_equal(ip, in_place);
    struct kvl l;
    kvl_of_file(&l, nf);
    check_model(path, &l, ti, tl, dh, dl, f->version, f->enc.big_endian);
    kvl_free(&l);
    free(ti);
}

/* out, fitted without a step (the data copied) to a header of f that
 * outgrew its room, with n bytes of padding: the data moves up by whole
 * alignments, the key keeps the copy slack to spare, and no more than an
 * alignment beyond it. */
static void copy_padded(const struct gguf_file *f, const struct gguf_buf *out, uint64_t n)
{
    uint64_t slack = gguf_pad_copy_slack(out->len - n);
    assert_true(out->len > f->data_off && out->len % f->alignment == 0);
    assert_true(n >= slack && n < slack + f->alignment);
    assert_true(slack >= GGUF_PAD_COPY_SLACK && slack >= (out->len - n) / GGUF_PAD_COPY_DIV);
}

static void pad_cases(const struct spec *s)
{
    const char *path = tpath("m.gguf");
    make_model(path, s);
    struct gguf_file *f = open_ok(path), *nf;
    uint64_t step = gguf_pad_step(4096, f->alignment), n, n2;
    assert_true(step >= 4096 && step % f->alignment == 0);
    struct gguf_enc e = f->enc;
    struct kvl l;
    kvl_of_file(&l, f);
    /* a value of g bytes outgrows the header's room */
    size_t g = (size_t)f->data_off + 3000, g2 = g + 2 * (size_t)step + 2 * GGUF_PAD_SLACK;
    char *big = malloc(g2);
    assert_non_null(big);
    memset(big, 'd', g2);

    /* a growing edit: the padding key is added last; without a step (the
     * data copied) the data moves by whole alignments and the key keeps
     * the copy slack to spare; with one, by whole steps, 1 KiB to spare */
    kvl_set(&l, "general.description", v_str(&e, big, g));
    struct gguf_buf h, out = fit_ok(f, &l, 0, &h, &nf);
    assert_int_equal(pad_of(nf, &n), (int64_t)nf->n_kv - 1);
    copy_padded(f, &out, n);
    gguf_close(nf);
    gguf_buf_free(&out);
    gguf_buf_free(&h);
    out = fit_ok(f, &l, step, &h, &nf);
    assert_true(out.len > f->data_off && (out.len - f->data_off) % step == 0);
    assert_int_equal(pad_of(nf, &n), (int64_t)nf->n_kv - 1);
    assert_true(n >= GGUF_PAD_SLACK && n < GGUF_PAD_SLACK + step);
    commit_fitted(path, f, &out, nf, false);
    gguf_close(nf);
    gguf_close(f);
    gguf_buf_free(&out);
    gguf_buf_free(&h);

    /* the padding key takes growth and shrinking in place, without a step:
     * it changes by exactly what the value did (unless the header keeps
     * its room anyway: large alignments) */
    f = open_ok(path);
    kvl_free(&l);
    kvl_of_file(&l, f);
    pad_of(f, &n);
    const size_t sizes[] = { g, g + 100, g - 1900, g };
    for (int k = 1; k < 4; k++) {
        size_t was = sizes[k - 1];
        kvl_set(&l, "general.description", v_str(&e, big, sizes[k]));
        out = fit_ok(f, &l, 0, &h, &nf);
        assert_int_equal(out.len, f->data_off);
        pad_of(nf, &n2);
        if (h.len == f->data_off)
            assert_memory_equal(out.data, h.data, h.len);
        else
            assert_int_equal(n2 + sizes[k], n + was);
        commit_fitted(path, f, &out, nf, true);
        gguf_close(nf);
        gguf_close(f);
        gguf_buf_free(&out);
        gguf_buf_free(&h);
        f = open_ok(path);
        kvl_free(&l);
        kvl_of_file(&l, f);
        pad_of(f, &n);
    }

    /* growth past it: resized, without a step for the copy slack, with
     * one to move the data by whole steps */
    kvl_set(&l, "general.description", v_str(&e, big, g2));
    out = fit_ok(f, &l, 0, &h, &nf);
    assert_true(pad_of(nf, &n2) >= 0);
    copy_padded(f, &out, n2);
    assert_int_equal(nf->n_kv, f->n_kv);         /* no second padding key */
    gguf_close(nf);
    gguf_buf_free(&out);
    gguf_buf_free(&h);
    out = fit_ok(f, &l, step, &h, &nf);
    assert_true(out.len > f->data_off && (out.len - f->data_off) % step == 0);
    assert_true(pad_of(nf, &n2) >= 0 && n2 >= GGUF_PAD_SLACK && n2 < GGUF_PAD_SLACK + step);
    assert_int_equal(nf->n_kv, f->n_kv);         /* no second padding key */
    commit_fitted(path, f, &out, nf, false);
    gguf_close(nf);
    gguf_close(f);
    gguf_buf_free(&out);
    gguf_buf_free(&h);

    /* most of the header goes: in place without a step (a large pad); with
     * one the data moves down by whole steps */
    f = open_ok(path);
    kvl_free(&l);
    kvl_of_file(&l, f);
    kvl_del(&l, "general.description");
    out = fit_ok(f, &l, 0, &h, &nf);
    assert_int_equal(out.len, f->data_off);
    gguf_close(nf);
    gguf_buf_free(&out);
    gguf_buf_free(&h);
    out = fit_ok(f, &l, step, &h, &nf);
    assert_true(out.len < f->data_off && (f->data_off - out.len) % step == 0);
    assert_true(pad_of(nf, &n2) >= 0 && n2 >= GGUF_PAD_SLACK && n2 < GGUF_PAD_SLACK + step);
    commit_fitted(path, f, &out, nf, false);
    gguf_close(nf);
    gguf_close(f);
    gguf_buf_free(&out);
    gguf_buf_free(&h);

    /* deleted: never brought back */
    f = open_ok(path);
    kvl_free(&l);
    kvl_of_file(&l, f);
    kvl_del(&l, GGUF_KEY_PADDING);
    for (int k = 0; k < 2; k++) {
        out = fit_ok(f, &l, k ? step : 0, &h, &nf);
        assert_int_equal(out.len, h.len);
        assert_memory_equal(out.data, h.data, h.len);
        gguf_close(nf);
        gguf_buf_free(&out);
        gguf_buf_free(&h);
    }
    gguf_close(f);

    /* not gguffs's (a string; a u8 array holding a non-zero byte), or
     * twice: left alone, none added */
    make_model(path, s);
    f = open_ok(path);
    for (int k = 0; k < 3; k++) {
        kvl_free(&l);
        kvl_of_file(&l, f);
        if (k == 0) {
            kvl_set(&l, GGUF_KEY_PADDING, v_str(&e, "x", 1));
        } else {
            struct gb a = { .e = e };
            gb_u32(&a, GGUF_U8);
            gb_count(&a, 3);
            gb_put(&a, k == 1 ? "\0\1\0" : "\0\0\0", 3);
            kvl_set(&l, GGUF_KEY_PADDING, (struct val){ GGUF_ARRAY, a.b });
            if (k == 2) {      /* a second one */
                struct gb a2 = { .e = e };
                gb_u32(&a2, GGUF_U8);
                gb_count(&a2, 1);
                gb_put(&a2, "", 1);
                l.v = realloc(l.v, (l.n + 1) * sizeof *l.v);
                assert_non_null(l.v);
                memset(&l.v[l.n], 0, sizeof *l.v);
                ekv_set(&l.v[l.n++], GGUF_KEY_PADDING, strlen(GGUF_KEY_PADDING),
                        GGUF_ARRAY, a2.b.data, a2.b.len);
                gguf_buf_free(&a2.b);
            }
        }
        kvl_set(&l, "general.description", v_str(&e, big, g));
        for (int st = 0; st < 2; st++) {
            out = fit_ok(f, &l, st ? step : 0, &h, &nf);
            assert_int_equal(out.len, h.len);
            assert_memory_equal(out.data, h.data, h.len);
            gguf_close(nf);
            gguf_buf_free(&out);
            gguf_buf_free(&h);
        }
    }
    /* a header that shrank, with a step or without: the key added, in
     * place */
    kvl_free(&l);
    kvl_of_file(&l, f);
    kvl_del(&l, "general.name");
    kvl_del(&l, "tokenizer.ggml.tokens");
    kvl_del(&l, "llama.rope.scales");
    for (int st = 0; st < 2; st++) {
        out = fit_ok(f, &l, st ? step : 0, &h, &nf);
        if (h.len == f->data_off) {            /* the alignment's zeros took it */
            assert_memory_equal(out.data, h.data, h.len);
        } else {
            assert_true(pad_of(nf, &n) >= 0);
            assert_int_equal(out.len, f->data_off);
        }
        gguf_close(nf);
        gguf_buf_free(&out);
        gguf_buf_free(&h);
    }
    gguf_close(f);
    kvl_free(&l);
    free(big);
}

static void test_padding(void **state)
{
    (void)state;
    assert_int_equal(gguf_pad_step(4096, 32), 4096);
    assert_int_equal(gguf_pad_step(4096, 65536), 65536);
    assert_int_equal(gguf_pad_step(3000, 32), 12000);
    assert_int_equal(gguf_pad_step(4096, 0), 0);
    assert_int_equal(gguf_pad_step(0, 32), 0);
    assert_int_equal(gguf_pad_step(GGUF_PAD_MAX_STEP * 2, 32), 0);
    assert_int_equal(gguf_pad_step(GGUF_PAD_MAX_STEP / 2 * 3, GGUF_PAD_MAX_STEP), 0);
    static const uint32_t aligns[] = { 0, 64, 4096, 65536 };
    for (uint32_t version = 1; version <= 3; version++)
        for (int be = 0; be <= 1; be++)
            for (unsigned a = 0; a < 4; a++) {
                struct spec s = { .version = version, .be = be, .align = aligns[a],
                                  .data_floats = { 100, 3000 + a, 20000 } };
                pad_cases(&s);
            }
    /* no tensor bytes: nothing to keep in place */
    struct spec none = { .version = 3 };
    make_model(tpath("m.gguf"), &none);
    struct gguf_file *f = open_ok(tpath("m.gguf"));
    struct kvl l;
    kvl_of_file(&l, f);
    char big[5000];
    memset(big, 'd', sizeof big);
    kvl_set(&l, "general.description", v_str(&f->enc, big, sizeof big));
    struct gguf_file *nf;
    struct gguf_buf h, out = fit_ok(f, &l, 4096, &h, &nf);
    assert_int_equal(out.len, h.len);
    assert_memory_equal(out.data, h.data, h.len);
    gguf_close(nf);
    gguf_buf_free(&out);
    gguf_buf_free(&h);
    gguf_close(f);
    kvl_free(&l);
}

/* gguf_commit_edit where TMPDIR is: a growing edit is padded and copied
 * where the file system does not clone (ext4, tmpfs), padded and cloned
 * where it does (XFS with reflink, btrfs); the next growth that fits is in
 * place; the data is unchanged and ggml loads each version. */
static void test_commit_edit(void **state)
{
    (void)state;
    const char *path = tpath("m.gguf");
    struct spec s = { .version = 3, .data_floats = { 100, 300000, 20000 } };
    make_model(path, &s);
    uint64_t bs = gguf_clone_block(path);
    char big[9000];
    memset(big, 't', sizeof big);
    printf("commit_edit: TMPDIR %s (block %llu)\n", bs ? "clones" : "does not clone",
           (unsigned long long)bs);
    static const size_t sizes[] = { 3000, 3100, 2000, 9000, 100 };
    for (int k = 0; k < 5; k++) {
        struct gguf_file *f = open_ok(path);
        uint64_t dh = hash_file(path, f->data_off), dl = f->file_size - f->data_off, n;
        bool had = pad_of(f, &n) >= 0;
        struct kvl l;
        kvl_of_file(&l, f);
        kvl_set(&l, "tokenizer.chat_template", v_str(&f->enc, big, sizes[k]));
        struct gguf_newkv *v = kvl_view(&l);
        struct gguf_buf h = { 0 };
        struct gguf_diag d;
        assert_int_equal(gguf_header_build(f, v, l.n, &h, &d), GGUF_OK);
        struct gguf_source *src;
        assert_int_equal(gguf_source_file(path, &src, &d), GGUF_OK);
        struct gguf_commit_info info;
        if (gguf_commit_edit(path, f, src, (const uint8_t *)h.data, h.len, &info, &d))
            fail_msg("gguf_commit_edit: %s", d.msg);
        gguf_source_close(src);
        struct gguf_file *g = open_ok(path);
        bool has = pad_of(g, &n) >= 0;
        assert_true(has);
        if (k == 0)                 /* the first growth adds the key */
            assert_true(!had && !info.in_place);
        if (!bs) {
            /* copied once, with the copy slack to spare: every later edit
             * (at most 9000 - 3000 bytes more) is in place */
            assert_false(info.cloned);
            assert_int_equal(info.in_place, k > 0);
            if (k == 0)
                assert_true(n >= GGUF_PAD_COPY_SLACK);
        } else {
            /* the first growth clones; 100 bytes more fit in place; the
             * others clone (or fit) */
            assert_true(info.in_place || info.cloned);
            if (k == 0)
                assert_true(info.cloned);
            if (k == 1)
                assert_true(info.in_place);
        }
        assert_int_equal(g->file_size - g->data_off, dl);
        assert_true(hash_file(path, g->data_off) == dh);
        struct kvl want;
        kvl_of_file(&want, g);
        size_t tl;
        const uint8_t *t = tinfo(f, &tl);
        check_model(path, &want, t, tl, dh, dl, 3, false);
        kvl_free(&want);
        gguf_close(g);
        free(v);
        gguf_buf_free(&h);
        kvl_free(&l);
        gguf_close(f);
    }
}

/* A lock held on the file at path by another open file description:
 * F_OFD_GETLK from a new one sees a write lock. */
static bool write_locked(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    assert_int_equal(fcntl(fd, F_OFD_GETLK, &l), 0);
    close(fd);
    return l.l_type == F_WRLCK;
}

/* gguf_commit_edit_locked (one writer per model): a rewrite hands back the new file,
 * which is the model at path and already holds a write lock; an edit in
 * place hands back nothing (the caller's lock is on the same inode). */
static void test_commit_edit_locked(void **state)
{
    (void)state;
    const char *path = tpath("m.gguf");
    struct spec s = { .version = 3, .data_floats = { 100, 3000 } };
    make_model(path, &s);
    int lock = open(path, O_RDWR | O_CLOEXEC);
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    assert_int_equal(fcntl(lock, F_OFD_SETLK, &l), 0);
    assert_true(write_locked(path));
    char big[9000];
    memset(big, 't', sizeof big);
    static const size_t sizes[] = { 9000, 9000 };
    for (int k = 0; k < 2; k++) {
        if (k == 1)
            memset(big, 'u', sizeof big);   /* the same size: in place */
        struct gguf_file *f = open_ok(path);
        struct kvl kl;
        kvl_of_file(&kl, f);
        kvl_set(&kl, "tokenizer.chat_template", v_str(&f->enc, big, sizes[k]));
        struct gguf_newkv *v = kvl_view(&kl);
        struct gguf_buf h = { 0 };
        struct gguf_diag d;
        assert_int_equal(gguf_header_build(f, v, kl.n, &h, &d), GGUF_OK);
        struct gguf_source *src;
        assert_int_equal(gguf_source_file(path, &src, &d), GGUF_OK);
        struct gguf_commit_info info;
        int nfd = 123;
        if (gguf_commit_edit_locked(path, f, src, (const uint8_t *)h.data, h.len, &info,
                                    &nfd, &d))
            fail_msg("gguf_commit_edit_locked: %s", d.msg);
        gguf_source_close(src);
        if (info.in_place) {
            assert_int_equal(nfd, -1);
        } else {
            struct stat a, b;
            assert_true(nfd >= 0);
            assert_int_equal(fstat(nfd, &a), 0);
            assert_int_equal(stat(path, &b), 0);
            assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
            close(lock);
            lock = nfd;
        }
        assert_true(write_locked(path));
        assert_int_equal(info.in_place, k == 1);
        free(v);
        gguf_buf_free(&h);
        kvl_free(&kl);
        gguf_close(f);
    }
    close(lock);
    assert_false(write_locked(path));
}

static unsigned crash_at;
static const char *crash_name;
static unsigned steps_seen;
static char step_names[64][64];

static void hook_exit(unsigned n, const char *what, void *arg)
{
    (void)arg;
    if (n < 64)
        snprintf(step_names[n], sizeof step_names[n], "%s", what);
    steps_seen = n + 1;
    if (n == crash_at || (crash_name && strcmp(what, crash_name) == 0))
        _exit(77);
}

/* Commits h for f in a child that crashes (_exit) before the step named
 * step. */
static void crash_before(const char *path, const struct gguf_file *f,
                         const struct gguf_buf *h, const char *step)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        static struct gguf_edit_hooks hk;
        struct gguf_diag d;
        hk.step = hook_exit;
        crash_at = UINT32_MAX;
        crash_name = step;
        gguf_edit_hooks = &hk;
        bool x;
        commit_file(path, f, (const uint8_t *)h->data, h->len, &x, &d);
        _exit(1);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 77);
}

/* ---- refusals ------------------------------------------------------------------- */

static enum gguf_err build(const struct gguf_file *f, const struct kvl *l,
                           struct gguf_diag *d)
{
    struct gguf_newkv *v = kvl_view(l);
    struct gguf_buf h = { 0 };
    enum gguf_err e = gguf_header_build(f, v, l->n, &h, d);
    free(v);
    if (e)
        assert_null(h.data);
    gguf_buf_free(&h);
    return e;
}

static void test_alignment_refused(void **state)
{
    (void)state;
    const char *path = tpath("m.gguf");
    struct gguf_diag d;
    for (int be = 0; be <= 1; be++) {
        struct spec s = { .version = 3, .be = be, .align = 64, .data_floats = { 16 } };
        make_model(path, &s);
        struct gguf_file *f = open_ok(path);
        struct kvl l;
        kvl_of_file(&l, f);
        assert_int_equal(build(f, &l, &d), GGUF_OK);
        kvl_set(&l, "general.alignment", v_u32(&f->enc, 128));
        assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
        assert_non_null(strstr(d.msg, "general.alignment cannot be changed"));
        kvl_set(&l, "general.alignment", v_u64(&f->enc, 64));
        assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
        kvl_set(&l, "general.alignment", v_u32(&f->enc, 64));
        assert_int_equal(build(f, &l, &d), GGUF_OK);
        /* moving it is fine */
        kvl_move(&l, kvl_find(&l, "general.alignment"), l.n - 1);
        assert_int_equal(build(f, &l, &d), GGUF_OK);
        kvl_del(&l, "general.alignment");
        assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
        assert_non_null(strstr(d.msg, "cannot be removed"));
        /* renaming it away is removing it */
        kvl_set(&l, "general.alignment", v_u32(&f->enc, 64));
        kvl_rename(&l, "general.alignment", "general.alignmen");
        assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
        kvl_free(&l);
        gguf_close(f);
    }
    struct spec s = { .version = 2, .data_floats = { 16 } };
    make_model(path, &s);
    struct gguf_file *f = open_ok(path);
    struct kvl l;
    kvl_of_file(&l, f);
    kvl_set(&l, "general.alignment", v_u32(&f->enc, 32));
    assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "cannot be added"));
    kvl_free(&l);
    gguf_close(f);
}

static void test_malformed_refused(void **state)
{
    (void)state;
    const char *path = tpath("m.gguf");
    struct spec s = { .version = 3, .data_floats = { 16, 16 } };
    make_model(path, &s);
    struct gguf_file *f = open_ok(path);
    struct kvl l;
    struct gguf_diag d;
    kvl_of_file(&l, f);
    /* a string whose length says 12 but has 5 bytes */
    struct val v = v_str(&f->enc, "hello", 5);
    v.b.data[0] = 12;
    kvl_set(&l, "general.name", v);
    assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "general.name"));
    /* a u32 with 3 bytes */
    kvl_free(&l);
    kvl_of_file(&l, f);
    l.v[kvl_find(&l, "llama.context_length")].val_len = 3;
    assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "llama.context_length"));
    l.v[kvl_find(&l, "llama.context_length")].val_len = 4;
    /* unknown type; an array of an unknown type */
    l.v[0].type = 13;
    assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
    l.v[0].type = GGUF_STRING;
    struct val a = v_i32s(&f->enc, 2);
    a.b.data[0] = 77;
    kvl_set(&l, "x.arr", a);
    assert_int_equal(build(f, &l, &d), GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "x.arr"));
    kvl_free(&l);
    gguf_close(f);
}

static void test_commit_refusals(void **state)
{
    (void)state;
    const char *path = tpath("m.gguf"), *jr = tpath("m.gguf.gguffs-journal");
    struct spec s = { .version = 3, .data_floats = { 64, 64 } };
    struct gguf_diag d;
    char what[300];
    bool ip;
    for (int grow = 0; grow <= 1; grow++) {
        make_model(path, &s);
        struct gguf_file *f = open_ok(path);
        struct kvl l;
        kvl_of_file(&l, f);
        kvl_set(&l, "llama.context_length", v_u32(&f->enc, 1));
        if (grow)
            kvl_set(&l, "general.description", v_str(&f->enc, "0123456789012345678901234567890123456789", 40));
        struct gguf_newkv *v = kvl_view(&l);
        struct gguf_buf h = { 0 };
        assert_int_equal(gguf_header_build(f, v, l.n, &h, &d), GGUF_OK);
        assert_int_equal(h.len == f->data_off, !grow);

        /* a header byte changed behind our back */
        size_t n;
        uint8_t *orig = slurp(path, &n);
        orig[30] ^= 1;
        spit(path, orig, n);
        assert_int_equal(commit_file(path, f, (uint8_t *)h.data, h.len, &ip, &d), GGUF_E_INVAL);
        assert_non_null(strstr(d.msg, "changed since it was indexed"));
        orig[30] ^= 1;
        /* the size changed */
        spit(path, orig, n - 1);
        assert_int_equal(commit_file(path, f, (uint8_t *)h.data, h.len, &ip, &d), GGUF_E_INVAL);
        spit(path, orig, n);
        /* a leftover journal */
        spit(jr, "junk", 4);
        assert_int_equal(commit_file(path, f, (uint8_t *)h.data, h.len, &ip, &d), GGUF_E_INVAL);
        assert_non_null(strstr(d.msg, "gguf_recover"));
        size_t n2;
        uint8_t *now = slurp(path, &n2);
        assert_int_equal(n2, n);
        assert_memory_equal(now, orig, n);
        free(now);
        /* recovery removes the incomplete journal, then the commit works */
        assert_int_equal(gguf_recover(path, GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
        assert_non_null(strstr(what, "incomplete journal"));
        assert_false(exists(jr));
        /* a malformed header */
        assert_int_equal(commit_file(path, f, (uint8_t *)h.data, h.len - 1, &ip, &d), GGUF_E_INVAL);
        /* a leftover new file is replaced by a rewrite (and ignored by an
         * in-place edit) */
        spit(tpath("m.gguf.gguffs-new"), "junk", 4);
        assert_int_equal(commit_file(path, f, (uint8_t *)h.data, h.len, &ip, &d), GGUF_OK);
        assert_int_equal(ip, !grow);
        assert_int_equal(exists(tpath("m.gguf.gguffs-new")), !grow);
        unlink(tpath("m.gguf.gguffs-new"));
        free(orig);
        free(v);
        gguf_buf_free(&h);
        kvl_free(&l);
        gguf_close(f);
    }
    /* a journal that belongs to another file is left alone */
    make_model(path, &s);
    struct gguf_file *f = open_ok(path);
    struct kvl l;
    kvl_of_file(&l, f);
    kvl_set(&l, "llama.context_length", v_u32(&f->enc, 1));
    struct gguf_newkv *v = kvl_view(&l);
    struct gguf_buf h = { 0 };
    assert_int_equal(gguf_header_build(f, v, l.n, &h, &d), GGUF_OK);
    /* crash right after the journal is durable */
    crash_before(path, f, &h, "writing the header in place");
    assert_true(exists(jr));
    size_t n;
    uint8_t *orig = slurp(path, &n);
    spit(path, orig, n + 1);
    assert_int_equal(gguf_recover(path, GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "does not belong to the model"));
    assert_true(exists(jr));
    spit(path, orig, n);
    assert_int_equal(gguf_recover(path, GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
    assert_non_null(strstr(what, "had not been modified"));
    assert_false(exists(jr));
    free(orig);
    gguf_close(f);
    free(v);
    gguf_buf_free(&h);
    kvl_free(&l);
    assert_int_equal(gguf_recover(tpath("missing.gguf"), GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
    assert_string_equal(what, "");
}

static void test_preserve(void **state)
{
    (void)state;
    const char *path = tpath("m.gguf"), *link = tpath("link.gguf");
    struct spec s = { .version = 3, .data_floats = { 300000, 10 } };
    make_model(path, &s);
    assert_int_equal(chmod(path, 0640), 0);
    bool root = geteuid() == 0;
    if (root)
        assert_int_equal(chown(path, 1234, 2345), 0);
    unlink(link);
    assert_int_equal(symlink("m.gguf", link), 0);
    struct gguf_file *f = open_ok(link);
    struct kvl l;
    kvl_of_file(&l, f);
    gguf_close(f);
    char big[300];
    memset(big, 'y', sizeof big);
    kvl_set(&l, "general.description", v_str(&(struct gguf_enc){ 0 }, big, sizeof big));
    static struct gguf_edit_hooks hk = { .no_copy_file_range = true };
    for (int fallback = 0; fallback <= 1; fallback++) {
        gguf_edit_hooks = fallback ? &hk : NULL;
        apply(link, &l, 0);   /* through the link: a rewrite */
        gguf_edit_hooks = NULL;
        struct stat st;
        assert_int_equal(lstat(link, &st), 0);
        assert_true(S_ISLNK(st.st_mode));
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0640);
        if (root) {
            assert_int_equal(st.st_uid, 1234);
            assert_int_equal(st.st_gid, 2345);
        }
        assert_false(exists(tpath("link.gguf.gguffs-new")));
        kvl_set(&l, "general.description", v_str(&(struct gguf_enc){ 0 }, big, sizeof big - 100));
    }
    /* in place through the link */
    kvl_set(&l, "llama.context_length", v_u32(&(struct gguf_enc){ 0 }, 7));
    apply(link, &l, 1);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    kvl_free(&l);
    unlink(link);
}

/* A rewrite reads the old tensor data through the source given: with
 * copy_file_range from its descriptor, or through its read when it has
 * none; a source of another size is refused. */
static void test_commit_source(void **state)
{
    (void)state;
    const char *path = tpath("m.gguf");
    struct spec s = { .version = 3, .data_floats = { 300000, 10, 7 } };
    char big[300];
    memset(big, 'q', sizeof big);
    for (int hide = 0; hide <= 1; hide++) {
        make_model(path, &s);
        struct gguf_file *f = open_ok(path);
        struct kvl l;
        kvl_of_file(&l, f);
        gguf_close(f);
        kvl_set(&l, "general.description", v_str(&(struct gguf_enc){ 0 }, big, sizeof big));
        hide_fd = hide;
        nofd_reads = 0;
        apply(path, &l, 0);     /* a rewrite, checked byte for byte */
        hide_fd = false;
        if (hide)
            assert_true(nofd_reads >= 2);    /* 1.2 MB through 1 MiB reads */
        kvl_free(&l);
    }
    /* the source must be the version indexed */
    make_model(path, &s);
    struct gguf_file *f = open_ok(path);
    struct kvl l;
    kvl_of_file(&l, f);
    kvl_set(&l, "general.description", v_str(&f->enc, big, sizeof big));
    struct gguf_newkv *v = kvl_view(&l);
    struct gguf_buf h = { 0 };
    struct gguf_diag d;
    assert_int_equal(gguf_header_build(f, v, l.n, &h, &d), GGUF_OK);
    size_t n;
    uint8_t *orig = slurp(path, &n);
    spit(tpath("other.gguf"), orig, n - 1);
    struct gguf_source *src;
    assert_int_equal(gguf_source_file(tpath("other.gguf"), &src, &d), GGUF_OK);
    bool ip;
    assert_int_equal(gguf_commit(path, f, src, (uint8_t *)h.data, h.len, &ip, &d),
                     GGUF_E_INVAL);
    assert_non_null(strstr(d.msg, "source"));
    assert_int_equal(gguf_commit(path, f, NULL, (uint8_t *)h.data, h.len, &ip, &d),
                     GGUF_E_INVAL);
    gguf_source_close(src);
    assert_int_equal(hash_file(path, 0), fnv(FNV0, orig, n));
    unlink(tpath("other.gguf"));
    free(orig);
    free(v);
    gguf_buf_free(&h);
    kvl_free(&l);
    gguf_close(f);
}

/* GGUF_RECOVER_CHECK says what there is and touches nothing. */
static void test_recover_check(void **state)
{
    (void)state;
    const char *path = tpath("m.gguf"), *jr = tpath("m.gguf.gguffs-journal"),
               *nw = tpath("m.gguf.gguffs-new");
    struct spec s = { .version = 3, .data_floats = { 64, 64 } };
    struct gguf_diag d;
    char what[300];
    make_model(path, &s);
    uint64_t h0 = hash_file(path, 0);
    assert_int_equal(gguf_recover(path, GGUF_RECOVER_CHECK, what, sizeof what, &d), GGUF_OK);
    assert_string_equal(what, "");
    /* an incomplete journal and a leftover new file: the model is intact */
    spit(jr, "junk", 4);
    spit(nw, "junk", 4);
    assert_int_equal(gguf_recover(path, GGUF_RECOVER_CHECK, what, sizeof what, &d), GGUF_OK);
    assert_non_null(strstr(what, "incomplete journal"));
    assert_non_null(strstr(what, "unfinished new file"));
    assert_true(exists(jr) && exists(nw));
    assert_int_equal(gguf_recover(path, GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
    assert_false(exists(jr) || exists(nw));

    /* a complete journal: after a crash before the in-place write (0),
     * after it (1: the new bytes written, not yet fdatasync'd), and with the
     * write torn (2: the first half of the changed range old again) */
    size_t n0;
    uint8_t *orig = slurp(path, &n0);
    for (int written = 0; written <= 2; written++) {
        struct gguf_file *f = open_ok(path);
        struct kvl l;
        kvl_of_file(&l, f);
        kvl_set(&l, "llama.context_length", v_u32(&f->enc, 77));
        struct gguf_newkv *v = kvl_view(&l);
        struct gguf_buf h = { 0 };
        assert_int_equal(gguf_header_build(f, v, l.n, &h, &d), GGUF_OK);
        assert_int_equal(h.len, f->data_off);
        crash_before(path, f, &h, written ? "fdatasync of the model"
                                          : "writing the header in place");
        assert_true(exists(jr));
        if (written == 2) {
            size_t n, lo = 0, hi;
            uint8_t *now = slurp(path, &n);
            assert_int_equal(n, n0);
            while (now[lo] == orig[lo])
                lo++;
            for (hi = h.len; now[hi - 1] == orig[hi - 1];)
                hi--;
            memcpy(now + lo, orig + lo, (hi - lo + 1) / 2);
            spit(path, now, n);
            free(now);
        }
        uint64_t h1 = hash_file(path, 0);
        assert_int_equal(h1 == h0, written == 0);
        for (int again = 0; again < 2; again++) {
            what[0] = 'x';
            if (written == 1) {
                /* the edit is complete: the model can be read as it is */
                assert_int_equal(gguf_recover(path, GGUF_RECOVER_CHECK, what, sizeof what,
                                              &d), GGUF_OK);
                assert_non_null(strstr(what, "the model is the new version"));
            } else {
                assert_int_equal(gguf_recover(path, GGUF_RECOVER_CHECK, what, sizeof what,
                                              &d), GGUF_E_INTERRUPTED);
                assert_non_null(strstr(d.msg, "interrupted"));
                assert_non_null(strstr(d.msg, jr));
                assert_non_null(strstr(what, "interrupted"));
            }
            assert_true(exists(jr));
            assert_true(hash_file(path, 0) == h1);
        }
        /* a journal that belongs to another file: as FIX would answer */
        size_t n;
        uint8_t *now = slurp(path, &n);
        spit(path, now, n + 1);
        assert_int_equal(gguf_recover(path, GGUF_RECOVER_CHECK, what, sizeof what, &d),
                         GGUF_E_INVAL);
        assert_non_null(strstr(d.msg, "does not belong to the model"));
        spit(path, now, n);
        free(now);
        /* FIX finishes a complete edit, rolls the others back; then CHECK
         * finds nothing */
        assert_int_equal(gguf_recover(path, GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
        assert_non_null(strstr(what, written == 0 ? "had not been modified"
                                     : written == 1 ? "finished an interrupted edit"
                                     : "rolled back"));
        assert_true(hash_file(path, 0) == (written == 1 ? h1 : h0));
        assert_false(exists(jr));
        assert_int_equal(gguf_recover(path, GGUF_RECOVER_CHECK, what, sizeof what, &d),
                         GGUF_OK);
        assert_string_equal(what, "");
        if (written == 1)
            spit(path, orig, n0);       /* the old model again */
        free(v);
        gguf_buf_free(&h);
        kvl_free(&l);
        gguf_close(f);
    }
    free(orig);
    assert_int_equal(gguf_recover(tpath("missing.gguf"), GGUF_RECOVER_CHECK, what,
                                  sizeof what, &d), GGUF_OK);
    assert_string_equal(what, "");
}

/* ---- crash injection ----------------------------------------------------------- */

struct crash_case {
    const char *name;
    uint8_t *old;          /* the old file */
    size_t old_len;
    uint64_t h_old, h_new; /* whole-file hashes */
    uint8_t *hdr;          /* the new header */
    size_t hdr_len;
    bool in_place;
    bool fallback;         /* no copy_file_range */
    struct kvl l_old, l_new;
    uint8_t *idle;         /* an idle journal beside the model first (an
                              earlier in-place edit's), or NULL */
    size_t idle_len;
};

static const char *mpath(void) { return tpath("c.gguf"); }

static void reset_model(const struct crash_case *c)
{
    unlink(tpath("c.gguf.gguffs-journal"));
    unlink(tpath("c.gguf.gguffs-new"));
    spit(mpath(), c->old, c->old_len);
    if (c->idle)
        spit(tpath("c.gguf.gguffs-journal"), c->idle, c->idle_len);
}

/* Runs gguf_commit (or gguf_recover) in a child crashing before step n
 * (UINT_MAX: never).  Returns the child's exit status. */
static int child_run(const struct crash_case *c, bool recover, unsigned n)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        static struct gguf_edit_hooks hk;
        hk.step = hook_exit;
        hk.no_copy_file_range = c->fallback;
        crash_at = n;
        struct gguf_diag d;
        if (recover) {
            gguf_edit_hooks = &hk;
            _exit(gguf_recover(mpath(), GGUF_RECOVER_FIX, NULL, 0, &d) == GGUF_OK ? 0 : 1);
        }
        struct gguf_file *f;
        if (gguf_open(mpath(), &f, &d))
            _exit(2);
        gguf_edit_hooks = &hk;
        bool ip;
        enum gguf_err e = commit_file(mpath(), f, c->hdr, c->hdr_len, &ip, &d);
        _exit(e == GGUF_OK && ip == c->in_place ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* After a crash and gguf_recover: old (0) or new (1) version, checked. */
static int verify_after(const struct crash_case *c)
{
    struct gguf_diag d;
    char what[300];
    if (gguf_recover(mpath(), GGUF_RECOVER_FIX, what, sizeof what, &d))
        fail_msg("%s: gguf_recover: %s", c->name, d.msg);
    assert_false(exists(tpath("c.gguf.gguffs-journal")));
    assert_false(exists(tpath("c.gguf.gguffs-new")));
    uint64_t h = hash_file(mpath(), 0);
    if (h != c->h_old && h != c->h_new)
        fail_msg("%s: the model is neither the old nor the new version", c->name);
    int which = h == c->h_new;
    struct gguf_file *f = open_ok(mpath());
    size_t tl;
    const uint8_t *t = tinfo(f, &tl);
    uint8_t *ti = malloc(tl + 1);
    memcpy(ti, t, tl);
    uint64_t dl = f->file_size - f->data_off;
    gguf_close(f);
    check_model(mpath(), which ? &c->l_new : &c->l_old, ti, tl,
                fnv(FNV0, c->old + (c->old_len - dl), dl), dl, 3, false);
    free(ti);
    return which;
}

struct snap {
    uint8_t *m, *j, *n;
    size_t ml, jl, nl;
};

static void snap_take(struct snap *s)
{
    s->m = slurp(mpath(), &s->ml);
    s->j = slurp(tpath("c.gguf.gguffs-journal"), &s->jl);
    s->n = slurp(tpath("c.gguf.gguffs-new"), &s->nl);
}

static void snap_restore(const struct snap *s)
{
    reset_model(&(struct crash_case){ .old = s->m, .old_len = s->ml });
    if (s->j)
        spit(tpath("c.gguf.gguffs-journal"), s->j, s->jl);
    if (s->n)
        spit(tpath("c.gguf.gguffs-new"), s->n, s->nl);
}

static void snap_free(struct snap *s)
{
    free(s->m);
    free(s->j);
    free(s->n);
}

static unsigned crash_runs, crash_old, crash_new, recover_crash_runs;

/* Crashes the commit before every step; for each, also crashes the recovery
 * before every one of its steps. */
static void crash_every_step(const struct crash_case *c)
{
    reset_model(c);
    assert_int_equal(child_run(c, false, UINT32_MAX), 0);
    assert_int_equal(hash_file(mpath(), 0), c->h_new);
    /* count the steps (in this process; the hook only records) */
    reset_model(c);
    unsigned total;
    {
        pid_t pid = fork();
        if (pid == 0) {
            crash_at = UINT32_MAX;
            static struct gguf_edit_hooks hk;
            hk.step = hook_exit;
            hk.no_copy_file_range = c->fallback;
            gguf_edit_hooks = &hk;
            struct gguf_file *f;
            struct gguf_diag d;
            if (gguf_open(mpath(), &f, &d))
                _exit(255);
            bool ip;
            commit_file(mpath(), f, c->hdr, c->hdr_len, &ip, &d);
            _exit((int)steps_seen);
        }
        int st;
        waitpid(pid, &st, 0);
        assert_true(WIFEXITED(st));
        total = (unsigned)WEXITSTATUS(st);
    }
    assert_true(total >= 6 && total < 64);
    int prev = 0;
    unsigned olds = 0, news = 0;
    for (unsigned n = 0; n <= total; n++) {
        reset_model(c);
        int rc = child_run(c, false, n);
        assert_int_equal(rc, n < total ? 77 : 0);
        struct snap sn;
        snap_take(&sn);
        /* crash the recovery too, before each of its steps, then recover */
        for (unsigned m = 0;; m++) {
            snap_restore(&sn);
            int r = child_run(c, true, m);
            if (r == 0)
                break;
            assert_int_equal(r, 77);
            recover_crash_runs++;
            int w = verify_after(c);
            /* a crash while recovering lands on the same side */
            snap_restore(&sn);
            assert_int_equal(child_run(c, true, UINT32_MAX), 0);
            assert_int_equal(verify_after(c), w);
        }
        snap_free(&sn);
        int which = verify_after(c);
        /* monotonic: once the new version is reached, it stays */
        assert_true(which >= prev);
        prev = which;
        which ? news++ : olds++;
        crash_runs++;
    }
    crash_old += olds;
    crash_new += news;
    printf("%s: %u steps, crashes before each: %u old, %u new\n", c->name,
           total, olds, news);
    assert_true(olds > 0 && news > 0);
}

static unsigned kill_trials, kill_killed, kill_old, kill_new;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Starts a child committing; returns its pid once it is about to call
 * gguf_commit (with the model already open).  If rfd is not NULL, the pipe
 * stays open and the child writes there how long gguf_commit took (a
 * double, in seconds). */
static pid_t start_commit(const struct crash_case *c, int *rfd)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        struct gguf_file *f;
        struct gguf_diag d;
        if (gguf_open(mpath(), &f, &d))
            _exit(2);
        static struct gguf_edit_hooks hk;
        hk.no_copy_file_range = c->fallback;
        if (c->fallback)
            gguf_edit_hooks = &hk;
        signal(SIGPIPE, SIG_IGN);
        if (write(fds[1], "x", 1) != 1)
            _exit(3);
        bool ip;
        double t0 = now_s();
        enum gguf_err e = commit_file(mpath(), f, c->hdr, c->hdr_len, &ip, &d);
        double t = now_s() - t0;
        if (rfd && write(fds[1], &t, sizeof t) != sizeof t)
            _exit(4);
        _exit(e == GGUF_OK && ip == c->in_place ? 0 : 1);
    }
    close(fds[1]);
    char x;
    assert_int_equal(read(fds[0], &x, 1), 1);
    if (rfd)
        *rfd = fds[0];
    else
        close(fds[0]);
    return pid;
}

static void kill_at_random(const struct crash_case *c, unsigned trials)
{
    /* how long an uninterrupted commit takes */
    double dur = 0;
    for (int i = 0; i < 3; i++) {
        reset_model(c);
        int rfd;
        pid_t pid = start_commit(c, &rfd);
        double t;
        assert_int_equal(read(rfd, &t, sizeof t), sizeof t);
        close(rfd);
        int st;
        waitpid(pid, &st, 0);
        dur += t;
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    dur /= 3;
    unsigned killed = 0, olds = 0, news = 0;
    for (unsigned t = 0; t < trials; t++) {
        reset_model(c);
        pid_t pid = start_commit(c, NULL);
        double us = (double)(rnd() % 10000) / 10000.0 * dur * 1.2e6;
        struct timespec ts = { (time_t)(us / 1e6), (long)((us - (time_t)(us / 1e6) * 1e6) * 1000) };
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        if (WIFSIGNALED(st))
            killed++;
        else
            assert_int_equal(WEXITSTATUS(st), 0);
        int which = verify_after(c);
        which ? news++ : olds++;
        /* a commit that finished gave the new version */
        if (!WIFSIGNALED(st))
            assert_int_equal(which, 1);
    }
    kill_trials += trials;
    kill_killed += killed;
    kill_old += olds;
    kill_new += news;
    printf("%s: %u kill -9 trials (commit takes %.1f ms): %u killed mid-way, "
           "%u old, %u new\n", c->name, trials, dur * 1e3, killed, olds, news);
}

/* l's header for f, padded by gguf_pad_fit (step 0: where the data is
 * copied); *len its size. */
static uint8_t *padded_header(const struct gguf_file *f, const struct kvl *l, size_t *len)
{
    struct gguf_newkv *v = kvl_view(l);
    struct gguf_buf h = { 0 }, p = { 0 };
    struct gguf_diag d;
    assert_int_equal(gguf_header_build(f, v, l->n, &h, &d), GGUF_OK);
    assert_int_equal(gguf_pad_fit(f, (const uint8_t *)h.data, h.len, 0, &p, &d), GGUF_OK);
    gguf_buf_free(&h);
    free(v);
    *len = p.len;
    return (uint8_t *)p.data;
}

static void crash_case_init(struct crash_case *c, const char *name, int kind)
{
    memset(c, 0, sizeof *c);
    c->name = name;
    struct spec s = { .version = 3, .data_floats = { 512 * 1024, 300000, 77 } };
    const char *path = mpath();
    reset_model(&(struct crash_case){ .old = (uint8_t *)"", .old_len = 0 });
    make_model(path, &s);
    c->old = slurp(path, &c->old_len);
    c->h_old = fnv(FNV0, c->old, c->old_len);
    struct gguf_file *f = open_ok(path);
    if (kind == 6) {
        /* a long value and padding (a padded rewrite first: the old
         * version), then that value grown at its end by 3000 bytes: in
         * place, the padding taking it, its unchanged pages not written
         * again (gguf/commit.c write_changed: two runs) */
        static char a[24000];
        memset(a, 'a', sizeof a);
        struct kvl l0;
        kvl_of_file(&l0, f);
        kvl_set(&l0, "general.description", v_str(&f->enc, a, 20000));
        c->hdr = padded_header(f, &l0, &c->hdr_len);
        bool ip;
        struct gguf_diag d0;
        if (commit_file(path, f, c->hdr, c->hdr_len, &ip, &d0))
            fail_msg("%s: the padded rewrite: %s", name, d0.msg);
        assert_false(ip);
        kvl_free(&l0);
        free(c->hdr);
        gguf_close(f);
        free(c->old);
        c->old = slurp(path, &c->old_len);
        c->h_old = fnv(FNV0, c->old, c->old_len);
        f = open_ok(path);
        kvl_of_file(&c->l_old, f);
        kvl_of_file(&c->l_new, f);
        kvl_set(&c->l_new, "general.description", v_str(&f->enc, a, 23000));
        c->hdr = padded_header(f, &c->l_new, &c->hdr_len);
        c->in_place = true;
        assert_int_equal(c->hdr_len, f->data_off);
        struct gguf_file *nf;
        assert_int_equal(gguf_parse(c->hdr, c->hdr_len, c->hdr_len + f->file_size - f->data_off,
                                    &nf, &d0, NULL), GGUF_OK);
        kvl_free(&c->l_new);
        kvl_of_file(&c->l_new, nf);
        gguf_close(nf);
        c->h_new = fnv(fnv(FNV0, c->hdr, c->hdr_len), c->old + f->data_off,
                       c->old_len - f->data_off);
        gguf_close(f);
        return;
    }
    kvl_of_file(&c->l_old, f);
    kvl_of_file(&c->l_new, f);
    if (kind >= 4) {
        /* an idle journal is there: longer than the in-place edit's (it is
         * written over and cut), shorter than a rewrite's header */
        c->idle_len = kind == 4 ? 200000 : 100;
        c->idle = malloc(c->idle_len);
        for (size_t i = 0; i < c->idle_len; i++)
            c->idle[i] = (uint8_t)(i * 131 + 7);
        memcpy(c->idle, "GGUFFSJ0", 8);
        kind -= 4;
    }
    if (kind == 0) {
        /* in place: a value and a reorder (the written range is long) */
        kvl_set(&c->l_new, "llama.context_length", v_u32(&f->enc, 1234567));
        kvl_move(&c->l_new, 0, c->l_new.n - 1);
    } else {
        char big[5000];
        memset(big, 'z', sizeof big);
        kvl_set(&c->l_new, "general.description", v_str(&f->enc, big, sizeof big));
        c->fallback = kind == 2;
    }
    struct gguf_newkv *v = kvl_view(&c->l_new);
    struct gguf_buf h = { 0 };
    struct gguf_diag d;
    assert_int_equal(gguf_header_build(f, v, c->l_new.n, &h, &d), GGUF_OK);
    if (kind == 3) {
        /* padded: the data moves by whole 4 KiB blocks, so the rewrite
         * clones it where TMPDIR's file system can, else a refused clone
         * then the copy */
        struct gguf_buf p = { 0 };
        assert_int_equal(gguf_pad_fit(f, (const uint8_t *)h.data, h.len,
                                      gguf_pad_step(4096, f->alignment), &p, &d), GGUF_OK);
        assert_true(p.len > f->data_off && (p.len - f->data_off) % 4096 == 0);
        gguf_buf_free(&h);
        h = p;
        struct gguf_file *nf;
        assert_int_equal(gguf_parse((const uint8_t *)h.data, h.len,
                                    h.len + f->file_size - f->data_off, &nf, &d, NULL),
                         GGUF_OK);
        kvl_free(&c->l_new);
        kvl_of_file(&c->l_new, nf);
        gguf_close(nf);
    }
    c->hdr = (uint8_t *)h.data;
    c->hdr_len = h.len;
    c->in_place = h.len == f->data_off;
    assert_int_equal(c->in_place, kind == 0);
    c->h_new = fnv(fnv(FNV0, c->hdr, c->hdr_len), c->old + f->data_off,
                   c->old_len - f->data_off);
    free(v);
    gguf_close(f);
}

static void crash_case_free(struct crash_case *c)
{
    free(c->old);
    free(c->hdr);
    free(c->idle);
    kvl_free(&c->l_old);
    kvl_free(&c->l_new);
}

static const char *const crash_names[] = { "in place", "rewrite", "rewrite (pread/pwrite)",
                                           "rewrite (padded: cloned where TMPDIR clones)",
                                           "in place over an idle journal",
                                           "rewrite with an idle journal",
                                           "in place, a value grown into the padding "
                                           "(its unchanged pages not written)" };

static void test_crash_steps(void **state)
{
    (void)state;
    const char *const *names = crash_names;
    for (int k = 0; k < 7; k++) {
        struct crash_case c;
        crash_case_init(&c, names[k], k);
        crash_every_step(&c);
        crash_case_free(&c);
    }
    printf("crash injection: %u commit crashes (%u old, %u new), %u recovery "
           "crashes, all recovered to the old or new version\n", crash_runs,
           crash_old, crash_new, recover_crash_runs);
}

static unsigned model_writes;

static void hook_count_writes(unsigned n, const char *what, void *arg)
{
    (void)n;
    (void)arg;
    if (strcmp(what, "writing the header in place") == 0)
        model_writes++;
}

/* The journal's integers (little-endian, journal.h). */
static uint64_t rd64le(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void wr64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

/* An in-place edit writes only the pages of its range that change: a
 * value of 20000 bytes grown at its end by 3000, the padding taking it,
 * is two writes (its length field's page; from the page where it ended
 * to the padding's count), not one of the whole range. */
static void test_in_place_pages(void **state)
{
    (void)state;
    struct crash_case c;
    crash_case_init(&c, crash_names[6], 6);
    reset_model(&c);
    static struct gguf_edit_hooks hk = { .step = hook_count_writes };
    struct gguf_file *f = open_ok(mpath());
    bool ip = false;
    struct gguf_diag d;
    model_writes = 0;
    gguf_edit_hooks = &hk;
    enum gguf_err e = commit_file(mpath(), f, c.hdr, c.hdr_len, &ip, &d);
    gguf_edit_hooks = NULL;
    if (e)
        fail_msg("commit: %s", d.msg);
    assert_true(ip);
    /* the hooks split each write in two (a torn write's step) */
    assert_int_equal(model_writes, 2 * 2);
    assert_int_equal(hash_file(mpath(), 0), c.h_new);

    /* the journal, kept idle, holds the two runs: its table, their old
     * bytes, nothing else; every byte of the header outside them is the
     * same in the old and the new header */
    size_t jl;
    uint8_t *j = slurp(tpath("c.gguf.gguffs-journal"), &jl);
    assert_non_null(j);
    assert_memory_equal(j, "GGUFFSJ0", 8);
    uint64_t n = rd64le(j + 48), lo = rd64le(j + 16), span = rd64le(j + 24);
    assert_int_equal(n, 2);
    uint64_t at = GGUF_JREC + 16 * n, prev = 0, olen = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = rd64le(j + GGUF_JREC + 16 * i), len = rd64le(j + GGUF_JREC + 16 * i + 8);
        assert_true(off >= lo && off + len <= lo + span && off >= prev && len > 0);
        assert_true(off + len <= c.hdr_len);
        assert_memory_equal(j + at, c.old + off, len);
        assert_memory_not_equal(c.old + off, c.hdr + off, len);
        for (uint64_t b = prev; b < off; b++)
            assert_int_equal(c.old[b], c.hdr[b]);
        prev = off + len;
        at += len;
        olen += len;
    }
    assert_memory_equal(c.old + prev, c.hdr + prev, c.hdr_len - prev);
    assert_int_equal(jl, at);
    /* less than half of the range (the value's middle pages stay) */
    assert_true(olen * 2 < span);
    free(j);
    assert_int_equal(verify_after(&c), 1);
    gguf_close(f);
    crash_case_free(&c);
}

/* A J1 journal (journal.h: the whole range [lo, hi), as gguffs wrote them
 * before J2) of case 6's edit, its model old, new or torn. */
static void spit_j1(const struct crash_case *c)
{
    size_t lo = 0, hi = c->hdr_len;
    while (c->old[lo] == c->hdr[lo])
        lo++;
    while (c->old[hi - 1] == c->hdr[hi - 1])
        hi--;
    size_t len = hi - lo;
    uint8_t *j = calloc(1, GGUF_JREC + len);
    assert_non_null(j);
    memcpy(j, "GGUFFSJ1", 8);
    wr64le(j + 8, c->old_len);
    wr64le(j + 16, lo);
    wr64le(j + 24, len);
    wr64le(j + 32, gguf_cksum(c->old + lo, len));
    wr64le(j + 40, gguf_cksum(c->hdr + lo, len));
    wr64le(j + 48, 1);
    wr64le(j + 56, gguf_cksum(j, 56));
    memcpy(j + GGUF_JREC, c->old + lo, len);
    spit(tpath("c.gguf.gguffs-journal"), j, GGUF_JREC + len);
    free(j);
}

static void test_journal_v1(void **state)
{
    (void)state;
    struct crash_case c;
    crash_case_init(&c, crash_names[6], 6);
    uint8_t *nw = malloc(c.old_len);
    assert_non_null(nw);
    memcpy(nw, c.old, c.old_len);
    memcpy(nw, c.hdr, c.hdr_len);
    struct gguf_diag d;
    char what[300];
    /* the model old: the journal goes, the model stays old */
    reset_model(&c);
    spit_j1(&c);
    assert_int_equal(gguf_recover(mpath(), GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
    assert_non_null(strstr(what, "had not been modified"));
    assert_int_equal(verify_after(&c), 0);
    /* the model new: kept */
    reset_model(&c);
    spit(mpath(), nw, c.old_len);
    spit_j1(&c);
    assert_int_equal(gguf_recover(mpath(), GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
    assert_non_null(strstr(what, "finished an interrupted edit"));
    assert_int_equal(verify_after(&c), 1);
    /* the model torn (its first page new: the value's length): rolled back */
    reset_model(&c);
    uint8_t *torn = malloc(c.old_len);
    assert_non_null(torn);
    memcpy(torn, c.old, c.old_len);
    memcpy(torn, c.hdr, 4096);
    spit(mpath(), torn, c.old_len);
    spit_j1(&c);
    assert_int_equal(gguf_recover(mpath(), GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
    assert_non_null(strstr(what, "rolled back"));
    assert_int_equal(verify_after(&c), 0);
    free(torn);
    free(nw);
    crash_case_free(&c);
}

/* Journals whose checksums hold but whose run table gguf_commit does not
 * write: refused, the journal and the model left as they are; a table
 * longer than the file: incomplete (removed, the model untouched). */
static void test_journal_hostile(void **state)
{
    (void)state;
    struct crash_case c;
    crash_case_init(&c, crash_names[6], 6);
    static const struct gguf_jrun bad[][2] = {
        { { 100, 8 }, { 104, 8 } },        /* overlapping */
        { { 200, 8 }, { 100, 8 } },        /* descending */
        { { 100, 0 }, { 200, 8 } },        /* empty */
        { { 100, 8 }, { 5000, 8 } },       /* the second outside the span */
        { { 96, 8 }, { 200, 8 } },         /* the first before it */
    };
    struct gguf_diag d;
    char what[300];
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        reset_model(&c);
        size_t jl;
        uint8_t *j = gguf_journal_build(c.old_len, 100, 4000, bad[k], 2, c.old, c.hdr, &jl);
        assert_non_null(j);
        spit(tpath("c.gguf.gguffs-journal"), j, jl);
        enum gguf_err e = gguf_recover(mpath(), GGUF_RECOVER_FIX, what, sizeof what, &d);
        if (e != GGUF_E_INVAL)
            fail_msg("table %zu: gguf_recover gave %d (%s)", k, (int)e, d.msg);
        assert_non_null(strstr(d.msg, "run table"));
        assert_true(exists(tpath("c.gguf.gguffs-journal")));
        assert_int_equal(hash_file(mpath(), 0), c.h_old);
        /* a table of more runs than the file holds: the record says 2^40 */
        wr64le(j + 48, (uint64_t)1 << 40);
        wr64le(j + 56, gguf_cksum(j, 56));
        spit(tpath("c.gguf.gguffs-journal"), j, jl);
        assert_int_equal(gguf_recover(mpath(), GGUF_RECOVER_FIX, what, sizeof what, &d), GGUF_OK);
        assert_non_null(strstr(what, "incomplete journal"));
        assert_int_equal(verify_after(&c), 0);
        free(j);
    }
    crash_case_free(&c);
}

static void test_kill9(void **state)
{
    (void)state;
    const char *e = getenv("GGUFFS_CRASH_TRIALS");
    unsigned trials = e && *e ? (unsigned)strtoul(e, NULL, 10) : 240;
    const char *const *names = crash_names;
    static const unsigned share[] = { 1, 1, 1, 1, 1, 1, 1 };
    double t0 = now_s();
    for (int k = 0; k < 7; k++) {
        struct crash_case c;
        crash_case_init(&c, names[k], k);
        kill_at_random(&c, trials * share[k] / 7);
        crash_case_free(&c);
    }
    printf("kill -9: %u trials in %.1f s, %u killed mid-commit, %u old, %u new: "
           "all the old or the new version\n", kill_trials, now_s() - t0,
           kill_killed, kill_old, kill_new);
    if (trials >= 40)
        assert_true(kill_killed > 0);
}

static int setup(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/gguffs-edit-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(tmpdir))
        return -1;
    return 0;
}

static int reset_hooks(void **state)
{
    (void)state;
    gguf_edit_hooks = NULL;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    static const char *names[] = { "m.gguf", "c.gguf", "link.gguf", "other.gguf",
        "m.gguf.gguffs-journal", "m.gguf.gguffs-new", "c.gguf.gguffs-journal",
        "c.gguf.gguffs-new" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        unlink(tpath(names[i]));
    rmdir(tmpdir);
    return 0;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    load_oracle();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_round_trips, reset_hooks),
        cmocka_unit_test_teardown(test_unpadded_end, reset_hooks),
        cmocka_unit_test_teardown(test_unknown_types, reset_hooks),
        cmocka_unit_test_teardown(test_alignment_refused, reset_hooks),
        cmocka_unit_test_teardown(test_malformed_refused, reset_hooks),
        cmocka_unit_test_teardown(test_padding, reset_hooks),
        cmocka_unit_test_teardown(test_commit_edit, reset_hooks),
        cmocka_unit_test_teardown(test_commit_edit_locked, reset_hooks),
        cmocka_unit_test_teardown(test_commit_refusals, reset_hooks),
        cmocka_unit_test_teardown(test_preserve, reset_hooks),
        cmocka_unit_test_teardown(test_commit_source, reset_hooks),
        cmocka_unit_test_teardown(test_recover_check, reset_hooks),
        cmocka_unit_test_teardown(test_crash_steps, reset_hooks),
        cmocka_unit_test_teardown(test_in_place_pages, reset_hooks),
        cmocka_unit_test_teardown(test_journal_v1, reset_hooks),
        cmocka_unit_test_teardown(test_journal_hostile, reset_hooks),
        cmocka_unit_test_teardown(test_kill9, reset_hooks),
    };
    return cmocka_run_group_tests_name("edit", tests, setup, teardown);
}

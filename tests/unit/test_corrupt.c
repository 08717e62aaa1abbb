/*
 * tests/unit/test_corrupt.c — corruption sweeps over real and generated
 * GGUF files, hostile counts, and the parser's bounds on memory and time.
 *
 * Every input goes through check_gguf_bytes() (tests/fuzz/check_file.h, the
 * same checks as the parse fuzzer): it is either refused with a one-line
 * message and an offset within the file, or it parses into a consistent
 * index and then every kv, type, file name and the info text render.  Each
 * input is copied to the end of pages followed by a PROT_NONE guard page,
 * so a read past the end faults even without ASan (CI runs this under
 * ASan+UBSan as well).
 *
 *   truncations    every prefix of hyllama-dummy.gguf (11 KB), of the
 *                  first 100 KB of a vocab file, and of the header and
 *                  first 64 KB of data of sdcpp-taesd-decoder.gguf (then
 *                  every 4093rd length to its end): from GGUFFS_CORPUS
 *                  (tests/corpus, which the repository carries: a missing
 *                  file is a failure)
 *   mutations      seeded (reproducible) random bit flips, byte stores and
 *                  stores of boundary values into length/count fields of
 *                  those files and of generated v1 big-endian / v3 files
 *                  with nested arrays, duplicate keys and tensors
 *   fd path        gguf_open_fd (which reads the header incrementally)
 *                  agrees with gguf_parse on a 3.5 MB vocab and its prefixes
 *   hostile counts huge declared counts and lengths are refused with a
 *                  handful of allocations and without allocating by them
 *   memory         the peak of live heap bytes during a parse stays below
 *                  a small multiple of the file size (a counting allocator
 *                  wraps malloc/calloc/realloc/free: -Wl,--wrap in meson)
 *   work           parsing is linear in the number of keys and tensors:
 *                  counted, not timed (allocations, bytes allocated, bytes
 *                  moved by realloc, and name comparisons: memcmp is
 *                  wrapped too, and the parser's name table compares the
 *                  names of equal length it probes with memcmp), so the
 *                  check cannot flake under load
 *
 * With the argument --known-bugs the binary runs instead the cases that
 * show bugs reported but not fixed yet (meson: should_fail).  Regression
 * cases found by the fuzzers are at the end, with their bytes inline.
 *
 * GGUFFS_TEST_QUICK=1 shrinks the number of mutations (the sweeps of the
 * truncations always run in full).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../fuzz/check_file.h"
#include "gguf/edit.h"

/* the counting allocator and counted comparisons (-Wl,--wrap=...) */
#include "work.h"

/* ---- helpers ---------------------------------------------------------------- */

static bool quick(void) { return getenv("GGUFFS_TEST_QUICK") != NULL; }

/* What is being tried, printed if a CHECK aborts. */
static char current[256];

static void on_abort(int sig)
{
    (void)sig;
    static const char m[] = "\ntest_corrupt: the failing input: ";
    if (write(2, m, sizeof m - 1) < 0 || write(2, current, strlen(current)) < 0 ||
        write(2, "\n", 1) < 0) {
        /* nothing more to do */
    }
    signal(SIGABRT, SIG_DFL);
    raise(SIGABRT);
}

/* Parses a guarded copy of buf[0..len) with every check. */
static enum gguf_err check_guarded(const uint8_t *buf, size_t len)
{
    struct guarded g = guarded_copy(buf, len);
    enum gguf_err e = check_gguf_bytes(g.p, len);
    guarded_free(&g);
    return e;
}

struct blob {
    uint8_t *p;
    size_t len;
};

/* Reads GGUFFS_CORPUS/real/NAME (at most max bytes): the repository's own
 * corpus (tests/corpus), so a missing file is a failure, not a skip. */
static struct blob corpus_file(const char *name, size_t max)
{
    const char *c = getenv("GGUFFS_CORPUS");
    char path[4096];
    snprintf(path, sizeof path, "%s/real/%s", c ? c : "tests/corpus", name);
    struct blob b = { 0 };
    FILE *fp = fopen(path, "rb");
    if (!fp)
        fail_msg("%s: %s (the repository carries it: set GGUFFS_CORPUS to its tests/corpus)",
                 path, strerror(errno));
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    b.len = (size_t)sz < max ? (size_t)sz : max;
    b.p = malloc(b.len ? b.len : 1);
    assert_non_null(b.p);
    assert_int_equal(fread(b.p, 1, b.len, fp), b.len);
    fclose(fp);
    return b;
}

/* Every prefix length in [from, to] (and to itself); returns how many were
 * accepted. */
static size_t sweep_prefixes(const char *name, const uint8_t *p, size_t from, size_t to,
                             size_t stride, size_t *tried)
{
    size_t ok = 0;
    for (size_t len = from; len <= to; len += stride) {
        snprintf(current, sizeof current, "%s truncated to %zu bytes", name, len);
        ok += check_guarded(p, len) == GGUF_OK;
        ++*tried;
        if (len != to && len + stride > to)
            len = to - stride;      /* end exactly at to */
    }
    return ok;
}

/* ---- generated files ------------------------------------------------------- */

#include "gb.h"

static void gb_start(struct gb *b, uint32_t version, bool be, uint64_t n_tensors, uint64_t n_kv)
{
    memset(b, 0, sizeof *b);
    b->be = be;
    b->v1 = version == 1;
    gb_put(b, "GGUF", 4);
    gb_u32(b, version);
    gb_count(b, n_tensors);
    gb_count(b, n_kv);
}

static void gb_key(struct gb *b, const char *k, uint32_t type)
{
    gb_str(b, k);
    gb_u32(b, type);
}

/* A file with every value kind: scalars, strings, arrays of each, nested
 * arrays (mixed, empty), a duplicate key, and tensors of several types. */
static struct blob make_rich(uint32_t version, bool be)
{
    struct gb b;
    gb_start(&b, version, be, 4, 13);
    gb_key(&b, "general.architecture", GGUF_STRING);
    gb_str(&b, "llama");
    gb_key(&b, "general.alignment", GGUF_U32);
    gb_u32(&b, 64);
    gb_key(&b, "a.u8", GGUF_U8);
    gb_u8(&b, 200);
    gb_key(&b, "a.bool", GGUF_BOOL);
    gb_u8(&b, 1);
    gb_key(&b, "a.f32", GGUF_F32);
    gb_u32(&b, 0x7fc00001u);        /* a NaN with a payload */
    gb_key(&b, "a.f64", GGUF_F64);
    gb_u64(&b, 0x3ff8000000000000ull);
    gb_key(&b, "a.i64", GGUF_I64);
    gb_u64(&b, 0x8000000000000000ull);
    gb_key(&b, "a.strs", GGUF_ARRAY);
    gb_u32(&b, GGUF_STRING);
    gb_count(&b, 4);
    gb_str(&b, "x");
    gb_str(&b, "");
    gb_str(&b, "line\nbreak\\");
    gb_str(&b, "caf\xc3\xa9");
    gb_key(&b, "a.i16s", GGUF_ARRAY);
    gb_u32(&b, GGUF_I16);
    gb_count(&b, 3);
    for (int i = 0; i < 3; i++) {
        uint16_t v = (uint16_t)(i * 1000 - 1000);
        if (be)
            v = __builtin_bswap16(v);
        gb_put(&b, &v, 2);
    }
    gb_key(&b, "a.nested", GGUF_ARRAY);      /* array[array[i32]]: [[1,2],[]] */
    gb_u32(&b, GGUF_ARRAY);
    gb_count(&b, 2);
    gb_u32(&b, GGUF_I32);
    gb_count(&b, 2);
    gb_u32(&b, 1);
    gb_u32(&b, 2);
    gb_u32(&b, GGUF_I32);
    gb_count(&b, 0);
    gb_key(&b, "a.deep", GGUF_ARRAY);        /* array[array[array[string]]] */
    gb_u32(&b, GGUF_ARRAY);
    gb_count(&b, 1);
    gb_u32(&b, GGUF_ARRAY);
    gb_count(&b, 1);
    gb_u32(&b, GGUF_STRING);
    gb_count(&b, 2);
    gb_str(&b, "\"q\"");
    gb_str(&b, "t\tab");
    gb_key(&b, "a.u8", GGUF_U8);             /* duplicate key */
    gb_u8(&b, 7);
    gb_key(&b, "a/odd#2", GGUF_U64);
    gb_u64(&b, 42);
    uint64_t ne1[1] = { 8 }, ne2[2] = { 32, 2 }, ne4[4] = { 2, 1, 3, 1 };
    gb_tensor(&b, "t.f32", 1, ne1, 0, 0);            /* 32 bytes */
    gb_tensor(&b, "t.q4_0", 2, ne2, 2, 64);          /* 36 bytes */
    gb_tensor(&b, "t.f16", 4, ne4, 1, 128);          /* 12 bytes */
    gb_tensor(&b, "t.scalar", 0, NULL, 24, 192);     /* i8, 1 byte */
    gb_pad(&b, 64);
    for (int i = 0; i < 193; i++)
        gb_u8(&b, (uint8_t)(i * 37));
    return (struct blob){ b.p, b.len };
}

/* ---- truncations ------------------------------------------------------------- */

static void test_truncate_hyllama(void **state)
{
    (void)state;
    struct blob b = corpus_file("hyllama-dummy.gguf", SIZE_MAX);
    size_t tried = 0, ok = sweep_prefixes("hyllama-dummy.gguf", b.p, 0, b.len, 1, &tried);
    print_message("hyllama-dummy.gguf: %zu truncation lengths tried, %zu accepted\n",
                  tried, ok);
    assert_int_equal(ok, 1);            /* only the whole file */
    assert_int_equal(check_guarded(b.p, b.len), GGUF_OK);
    free(b.p);
}

static void test_truncate_taesd(void **state)
{
    (void)state;
    struct blob b = corpus_file("sdcpp-taesd-decoder.gguf", SIZE_MAX);
    struct gguf_file *f;
    struct gguf_diag d;
    assert_int_equal(gguf_parse(b.p, b.len, b.len, &f, &d, NULL), GGUF_OK);
    size_t dense = (size_t)f->data_off + 65536;
    gguf_close(f);
    size_t tried = 0;
    size_t ok = sweep_prefixes("sdcpp-taesd-decoder.gguf", b.p, 0, dense, 1, &tried);
    ok += sweep_prefixes("sdcpp-taesd-decoder.gguf", b.p, dense + 1, b.len, 4093, &tried);
    print_message("sdcpp-taesd-decoder.gguf: %zu truncation lengths tried (all of the "
                  "first %zu, then every 4093rd), %zu accepted\n", tried, dense, ok);
    assert_int_equal(ok, 1);
    free(b.p);
}

static void test_truncate_vocab(void **state)
{
    (void)state;
    struct blob b = corpus_file("llamacpp-vocab-llama-spm.gguf", 100 * 1024);
    size_t tried = 0, ok = sweep_prefixes("llamacpp-vocab-llama-spm.gguf", b.p, 0, b.len,
                                          1, &tried);
    print_message("llamacpp-vocab-llama-spm.gguf: %zu truncation lengths of its first "
                  "100 KiB tried, %zu accepted\n", tried, ok);
    assert_int_equal(ok, 0);            /* the header is longer than 100 KiB */
    free(b.p);
}

/* ---- the incremental fd path agrees with the in-memory parser ---------------- */

static int memfd_of(const uint8_t *p, size_t len)
{
    int fd = memfd_create("gguf", MFD_CLOEXEC);
    assert_true(fd >= 0);
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done);
        assert_true(w > 0);
        done += (size_t)w;
    }
    return fd;
}

static void test_fd_path(void **state)
{
    (void)state;
    struct blob b = corpus_file("llamacpp-vocab-dbrx.gguf", SIZE_MAX);
    /* whole file (3.5 MB: the reader grows its buffer 1 MiB, 2 MiB, 3.5 MiB)
     * and prefixes that end in each of those steps */
    size_t lens[] = { b.len, b.len - 1, b.len / 2, (1u << 20) - 1, 1u << 20,
                      (1u << 20) + 1, (2u << 20) + 3, 100, 0 };
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        size_t len = lens[i];
        snprintf(current, sizeof current, "dbrx through a memfd, %zu bytes", len);
        int fd = memfd_of(b.p, len);
        struct gguf_file *a = NULL, *m = NULL;
        struct gguf_diag da, dm;
        enum gguf_err ea = gguf_open_fd(fd, &a, &da);
        enum gguf_err em = gguf_parse(b.p, len, len, &m, &dm, NULL);
        close(fd);
        if (ea != em)
            fail_msg("%zu bytes: fd path %d (%s), memory %d (%s)", len, ea, da.msg, em, dm.msg);
        if (ea == GGUF_OK) {
            assert_int_equal(a->hdr_size, m->hdr_size);
            assert_int_equal(a->n_kv, m->n_kv);
            assert_memory_equal(a->hdr, m->hdr, a->hdr_size);
            for (uint64_t k = 0; k < a->n_kv; k++)
                assert_memory_equal(&a->kv[k], &m->kv[k], sizeof a->kv[k]);
        } else {
            assert_string_equal(da.msg, dm.msg);
            assert_int_equal(da.offset, dm.offset);
        }
        gguf_close(a);
        gguf_close(m);
    }
    assert_int_equal(check_guarded(b.p, b.len), GGUF_OK);
    free(b.p);
}

/* ---- random mutations ---------------------------------------------------------- */

#define SEED 20261123u

struct mstats {
    size_t tried, accepted;
};

/* Applies one mutation of kind k to p (len bytes; hdr: header size, where
 * most mutations land). */
static void mutate(uint8_t *p, size_t len, size_t hdr, unsigned k, uint64_t *r, char *what,
                   size_t cap)
{
    size_t span = (fuzz_rand(r) % 8 == 0 || hdr == 0) ? len : hdr;
    size_t pos = (size_t)(fuzz_rand(r) % span);
    switch (k) {
    case 0: {                                   /* 1 to 3 bit flips */
        unsigned n = 1 + (unsigned)(fuzz_rand(r) % 3);
        size_t o = (size_t)snprintf(what, cap, "bit flips:");
        for (unsigned i = 0; i < n; i++) {
            size_t at = i ? (size_t)(fuzz_rand(r) % span) : pos;
            unsigned bit = (unsigned)(fuzz_rand(r) % 8);
            p[at] ^= (uint8_t)(1u << bit);
            if (o < cap)
                o += (size_t)snprintf(what + o, cap - o, " %zu.%u", at, bit);
        }
        break;
    }
    case 1: {                                   /* a random byte */
        uint8_t v = (uint8_t)fuzz_rand(r);
        snprintf(what, cap, "byte %zu = 0x%02x", pos, v);
        p[pos] = v;
        break;
    }
    default: {                                  /* a boundary value, 1-8 bytes */
        static const uint64_t vals[] = {
            0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000,
            0x7fffffff, 0x80000000, 0xffffffff, 0x100000000ull, 0x7fffffffffffffffull,
            0x8000000000000000ull, 0xffffffffffffffffull, 0xfffffffffffffff0ull,
        };
        uint64_t v = vals[fuzz_rand(r) % (sizeof vals / sizeof *vals)];
        if (fuzz_rand(r) % 4 == 0)
            v = len + (uint64_t)(fuzz_rand(r) % 64) - 32;    /* near the file size */
        unsigned w = (unsigned[]){ 1, 2, 4, 8 }[fuzz_rand(r) % 4];
        if (pos + w > len)
            pos = len - w;
        bool be = fuzz_rand(r) & 1;
        for (unsigned i = 0; i < w; i++)
            p[pos + i] = (uint8_t)(v >> (8 * (be ? w - 1 - i : i)));
        snprintf(what, cap, "%u-byte %s store of 0x%llx at %zu", w, be ? "BE" : "LE",
                 (unsigned long long)v, pos);
        break;
    }
    }
}

static void mutation_sweep(const char *name, const struct blob *b, size_t trials,
                           uint32_t seed, struct mstats *st)
{
    struct gguf_file *f;
    struct gguf_diag d;
    size_t hdr = 0;
    if (gguf_parse(b->p, b->len, b->len, &f, &d, NULL) == GGUF_OK) {
        hdr = (size_t)f->data_off;
        gguf_close(f);
    }
    uint8_t *m = malloc(b->len);
    assert_non_null(m);
    for (size_t t = 0; t < trials; t++) {
        uint64_t r = ((uint64_t)seed << 32) ^ t;
        unsigned kind = (unsigned)(t % 3);
        memcpy(m, b->p, b->len);
        char what[160];
        unsigned n = 1 + (fuzz_rand(&r) % 4 == 0);      /* sometimes two mutations */
        size_t o = 0;
        for (unsigned i = 0; i < n; i++) {
            mutate(m, b->len, hdr, kind, &r, what + o, sizeof what - o);
            o = strlen(what);
            if (o + 2 < sizeof what) {
                what[o++] = ';';
                what[o] = '\0';
            }
        }
        snprintf(current, sizeof current, "%s, seed %u trial %zu: %s", name, seed, t, what);
        st->accepted += check_guarded(m, b->len) == GGUF_OK;
        st->tried++;
    }
    free(m);
}

static struct mstats mut_total;

static void run_mutations(const char *name, const struct blob *b, size_t trials)
{
    struct mstats st = { 0, 0 };
    mutation_sweep(name, b, trials, SEED, &st);
    print_message("%s: %zu mutations (seed %u), %zu still parse and render\n", name,
                  st.tried, SEED, st.accepted);
    mut_total.tried += st.tried;
    mut_total.accepted += st.accepted;
}

static void test_mutate_generated(void **state)
{
    (void)state;
    size_t n = quick() ? 3000 : 12000;
    for (uint32_t v = 1; v <= 3; v++) {
        for (int be = 0; be <= 1; be++) {
            struct blob b = make_rich(v, be);
            char name[64];
            snprintf(name, sizeof name, "generated v%u%s", v, be ? " big-endian" : "");
            snprintf(current, sizeof current, "%s, unmodified", name);
            assert_int_equal(check_guarded(b.p, b.len), GGUF_OK);
            run_mutations(name, &b, n / 2);
            free(b.p);
        }
    }
}

static void test_mutate_real(void **state)
{
    (void)state;
    size_t n = quick() ? 3000 : 12000;
    struct blob b = corpus_file("hyllama-dummy.gguf", SIZE_MAX);
    run_mutations("hyllama-dummy.gguf", &b, n);
    free(b.p);
    b = corpus_file("llamacpp-vocab-llama-v1.gguf", SIZE_MAX);    /* v1, 467 KB */
    run_mutations("llamacpp-vocab-llama-v1.gguf", &b, n / 10);
    free(b.p);
    /* 67 tensors: mutations of tensor infos (types, dims, offsets) */
    b = corpus_file("sdcpp-taesd-decoder.gguf", SIZE_MAX);
    run_mutations("sdcpp-taesd-decoder.gguf", &b, n / 40);
    free(b.p);
    print_message("mutations in total: %zu tried, %zu still parse\n", mut_total.tried,
                  mut_total.accepted);
}

/* ---- hostile counts: refused at once, nothing allocated by them ------------- */

struct hostile {
    const char *what;
    struct blob b;
};

static void test_hostile_counts(void **state)
{
    (void)state;
    struct hostile h[16];
    size_t nh = 0;
    struct gb b;
    /* declared counts far beyond the bytes */
    gb_start(&b, 3, false, 0, 0x7fffffffffffffffull);
    gb_key(&b, "k", GGUF_U8);
    gb_u8(&b, 1);
    h[nh++] = (struct hostile){ "n_kv = 2^63-1", { b.p, b.len } };
    gb_start(&b, 3, false, 1ull << 40, 1);
    gb_key(&b, "k", GGUF_U8);
    gb_u8(&b, 1);
    h[nh++] = (struct hostile){ "n_tensors = 2^40", { b.p, b.len } };
    gb_start(&b, 1, true, 0xffffffffu, 0xffffffffu);
    h[nh++] = (struct hostile){ "v1 BE counts = 2^32-1", { b.p, b.len } };
    gb_start(&b, 3, false, 0, 1);
    gb_count(&b, 0xffffffffffffffffull);
    h[nh++] = (struct hostile){ "key length 2^64-1", { b.p, b.len } };
    gb_start(&b, 3, false, 0, 1);
    gb_key(&b, "s", GGUF_STRING);
    gb_count(&b, 0x8000000000000000ull);
    h[nh++] = (struct hostile){ "string length 2^63", { b.p, b.len } };
    static const uint32_t et[] = { GGUF_U64, GGUF_U8, GGUF_STRING, GGUF_ARRAY };
    for (int i = 0; i < 4; i++) {
        gb_start(&b, 3, false, 0, 1);
        gb_key(&b, "a", GGUF_ARRAY);
        gb_u32(&b, et[i]);
        gb_count(&b, i == 1 ? 0xffffffffffffffffull : 1ull << 60);
        gb_put(&b, "0123456789abcdef", 16);
        h[nh++] = (struct hostile){ "array count 2^60 of each element kind", { b.p, b.len } };
    }
    gb_start(&b, 3, false, 0, 1);                       /* arrays nested 9 deep */
    gb_key(&b, "n", GGUF_ARRAY);
    for (int i = 0; i < 9; i++) {
        gb_u32(&b, GGUF_ARRAY);
        gb_count(&b, 1);
    }
    h[nh++] = (struct hostile){ "arrays nested 9 deep", { b.p, b.len } };
    gb_start(&b, 3, false, 1, 0);
    uint64_t ne[4] = { 1ull << 62, 1ull << 62, 4, 4 };
    gb_tensor(&b, "t", 4, ne, 0, 0);
    h[nh++] = (struct hostile){ "element count overflow", { b.p, b.len } };
    gb_start(&b, 3, false, 1, 0);
    uint64_t ne2[2] = { 1ull << 61, 2 };
    gb_tensor(&b, "t", 2, ne2, 0, 0xffffffffffffff00ull);
    h[nh++] = (struct hostile){ "tensor 2^62 elements at offset 2^64-256", { b.p, b.len } };

    for (size_t i = 0; i < nh; i++) {
        snprintf(current, sizeof current, "hostile: %s", h[i].what);
        mem_peak = mem_live;
        size_t base = mem_live;
        work_reset();
        enum gguf_err e = check_guarded(h[i].b.p, h[i].b.len);
        struct work w = work;
        size_t peak = mem_peak - base;
        if (e == GGUF_OK)
            fail_msg("%s: accepted", h[i].what);
        /* guarded_copy uses mmap, not malloc: peak is the parser's */
        if (peak > 4096 + 64 * h[i].b.len)
            fail_msg("%s: %zu bytes allocated for a %zu-byte file", h[i].what, peak,
                     h[i].b.len);
        /* refused at once: no loop driven by the declared count */
        if (w.allocs > 16 || w.cmps > 16)
            fail_msg("%s: %llu allocations and %llu comparisons before the refusal",
                     h[i].what, (unsigned long long)w.allocs, (unsigned long long)w.cmps);
        free(h[i].b.p);
    }
}

/* ---- memory: peak heap during a parse vs file size ---------------------------- */

/* n distinct keys of the smallest record (8 + 3 + 4 + 1 bytes). */
static struct blob many_keys(uint64_t n)
{
    size_t len = 24 + (size_t)n * 16;
    uint8_t *p = malloc(len), *q = p + 24;
    assert_non_null(p);
    uint32_t v = 3;
    uint64_t z = 0;
    memcpy(p, "GGUF", 4);
    memcpy(p + 4, &v, 4);
    memcpy(p + 8, &z, 8);
    memcpy(p + 16, &n, 8);
    for (uint64_t i = 0; i < n; i++, q += 16) {
        uint64_t kl = 3;
        uint32_t t = GGUF_U8;
        memcpy(q, &kl, 8);
        q[8] = (uint8_t)i;
        q[9] = (uint8_t)(i >> 8);
        q[10] = (uint8_t)(i >> 16);
        memcpy(q + 11, &t, 4);
        q[15] = 1;
    }
    return (struct blob){ p, len };
}

/* n tensors of the smallest kind: 3-byte names, 0 dims (one i8 element). */
static struct blob many_tensors(uint64_t n)
{
    size_t info = 8 + 3 + 4 + 4 + 8;
    size_t hdr = 24 + (size_t)n * info;
    size_t data_off = (hdr + 31) / 32 * 32;
    size_t len = data_off + (size_t)n;
    uint8_t *p = calloc(1, len), *q = p + 24;
    assert_non_null(p);
    uint32_t v = 3;
    uint64_t z = 0;
    memcpy(p, "GGUF", 4);
    memcpy(p + 4, &v, 4);
    memcpy(p + 8, &n, 8);
    memcpy(p + 16, &z, 8);
    for (uint64_t i = 0; i < n; i++, q += info) {
        uint64_t nl = 3;
        uint32_t nd = 0, ty = 24;      /* i8 */
        memcpy(q, &nl, 8);
        q[8] = (uint8_t)i;
        q[9] = (uint8_t)(i >> 8);
        q[10] = (uint8_t)(i >> 16);
        memcpy(q + 11, &nd, 4);
        memcpy(q + 15, &ty, 4);
        memcpy(q + 19, &i, 8);
    }
    return (struct blob){ p, len };
}

/* Parses b and returns the peak of live heap bytes during the parse; *w
 * (if not NULL) gets the work it counted. */
static size_t parse_peak(const struct blob *b, struct work *w)
{
    struct gguf_file *f;
    struct gguf_diag d;
    size_t base = mem_live;
    mem_peak = base;
    work_reset();
    enum gguf_err e = gguf_parse(b->p, b->len, b->len, &f, &d, NULL);
    if (w)
        *w = work;
    if (e != GGUF_OK)
        fail_msg("parse: %s", d.msg);
    size_t peak = mem_peak - base;
    gguf_close(f);
    return peak;
}

#define MEM_FACTOR 16      /* bytes of heap per byte of file, at most */

static void test_memory_bound(void **state)
{
    (void)state;
    struct blob files[4];
    const char *names[4];
    size_t nf = 0;
    files[nf] = many_keys(100000);
    names[nf++] = "100000 keys of 16 bytes";
    files[nf] = many_tensors(60000);
    names[nf++] = "60000 tensors of 27 bytes + 1 data byte";
    files[nf] = make_rich(3, false);
    names[nf++] = "generated v3 file";
    struct blob hy = corpus_file("llamacpp-vocab-dbrx.gguf", SIZE_MAX);
    files[nf] = hy;
    names[nf++] = "llamacpp-vocab-dbrx.gguf";
    for (size_t i = 0; i < nf; i++) {
        size_t peak = parse_peak(&files[i], NULL);
        double ratio = (double)peak / (double)files[i].len;
        print_message("%s (%zu bytes): peak heap %zu bytes (%.2f x the file)\n",
                      names[i], files[i].len, peak, ratio);
        if (peak > MEM_FACTOR * files[i].len + 65536)
            fail_msg("%s: the parser held %zu bytes for a %zu-byte file (more than %d x)",
                     names[i], peak, files[i].len, MEM_FACTOR);
        free(files[i].p);
    }
}

/* ---- work: linear in the number of keys and tensors -------------------------- */

/* Counted, not timed: 8 x the entries may cost at most WORK_FACTOR x each
 * count (linear is 8, quadratic 64; the allocators' geometric growth moves
 * a power-of-two ratio by at most a step), plus a small constant. */
#define WORK_FACTOR 10

static void check_linear(const char *what, const char *count, uint64_t a, uint64_t b)
{
    print_message("  %-36s %12llu -> %12llu (x%.2f)\n", count, (unsigned long long)a,
                  (unsigned long long)b, a ? (double)b / (double)a : 0.0);
    if (b > WORK_FACTOR * a + 4096)
        fail_msg("%s: 8x the entries cost %.1fx the %s (%llu -> %llu; linear is 8x)", what,
                 a ? (double)b / (double)a : 0.0, count, (unsigned long long)a,
                 (unsigned long long)b);
}

static void test_linear_work(void **state)
{
    (void)state;
    /* 8n stays below 2^20 names; beyond, the name table grows (see
     * test_known_many_distinct_keys) */
    uint64_t n = quick() ? 50000 : 100000;
    for (int kind = 0; kind < 2; kind++) {
        const char *what = kind ? "tensors" : "keys";
        struct work w[2];
        for (int s = 0; s < 2; s++) {
            uint64_t k = s ? 8 * n : n;
            struct blob b = kind ? many_tensors(k) : many_keys(k);
            cmp_budget = 64 * k;       /* quadratic would need ~k^2/table */
            parse_peak(&b, &w[s]);
            cmp_budget = UINT64_MAX;
            free(b.p);
            /* names of equal length that meet in the name table are
             * compared with memcmp (at most half load: about 0.3 per name
             * here); if this fails, the way comparisons are counted broke,
             * not the parser */
            if (w[s].cmps < k / 16)
                fail_msg("%s: %llu names, only %llu memcmp calls counted: the name table no "
                         "longer compares with memcmp; change how probes are counted here",
                         what, (unsigned long long)k, (unsigned long long)w[s].cmps);
        }
        print_message("%s: %llu, then %llu:\n", what, (unsigned long long)n,
                      (unsigned long long)(8 * n));
        check_linear(what, "allocations", w[0].allocs, w[1].allocs);
        check_linear(what, "bytes allocated", w[0].alloc_bytes, w[1].alloc_bytes);
        check_linear(what, "bytes moved by realloc", w[0].moved_bytes, w[1].moved_bytes);
        check_linear(what, "name comparisons (memcmp)", w[0].cmps, w[1].cmps);
    }
}

/* ---- known bugs (run with --known-bugs; meson: should_fail) ------------------ */

/*
 * Found while writing the linear-time check: the
 * duplicate-name hash of parse.c (struct nameset) is sized for at most
 * 2^20 names (2^21 slots) and never grows.  With more distinct keys (or
 * tensor names) linear probing slows down quadratically as the table
 * fills, and once 2^21 names are in it the next insertion loops forever:
 * gguffs hangs at 100% CPU on a 33 MB file of 2^21 + 1 keys of 16 bytes
 * (2,090,000 keys already take more than a minute; 1,000,000 take 0.5 s).
 * The bytes: "GGUF", u32 3, u64 0 tensors, u64 N keys, then N records
 * { u64 3, 3 distinct bytes, u32 0 (u8), u8 1 } — many_keys(N) above.
 */
static void test_known_many_distinct_keys(void **state)
{
    (void)state;
    uint64_t n = (1ull << 21) + 1;
    struct blob b = many_keys(n);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct gguf_file *f;
        struct gguf_diag d;
        /* a table at half load probes ~1.5 names per insertion; a full one
         * probes without end: the budget stops it (no clock involved) */
        cmp_budget = 16 * n;
        work_reset();
        enum gguf_err e = gguf_parse(b.p, b.len, b.len, &f, &d, NULL);
        _exit(e == GGUF_OK ? 0 : 2);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    free(b.p);
    if (WIFEXITED(st) && WEXITSTATUS(st) == CMP_BUDGET_EXIT)
        fail_msg("parsing %llu distinct keys (%zu bytes) made more than %llu name "
                 "comparisons: the name table does not grow", (unsigned long long)n, b.len,
                 (unsigned long long)(16 * n));
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/*
 * Found while sizing the memory test: the tensor
 * count is checked against the file size assuming each tensor info takes
 * at least 28 bytes (24 in v1), but a 0-dimensional tensor (accepted: one
 * element) with a 2-byte name takes 8 + 2 + 4 + 4 + 8 = 26 (v1: 22), so a
 * valid file of many such tensors is refused: "tensor count 1000 cannot fit
 * in a file of 27048 bytes (at byte offset 8)".  The smallest tensor info is
 * 24 bytes (v1: 20).  The bytes: "GGUF", u32 3, u64 1000 tensors, u64 0
 * keys, 1000 infos { u64 2, u16 i, u32 0 dims, u32 24 (i8), u64 i }, zero
 * padding to 32, 1000 data bytes.
 */
static void test_known_small_tensor_infos(void **state)
{
    (void)state;
    uint64_t n = 1000;
    size_t info = 8 + 2 + 4 + 4 + 8;
    size_t hdr = 24 + (size_t)n * info, data_off = (hdr + 31) / 32 * 32;
    size_t len = data_off + (size_t)n;
    uint8_t *p = calloc(1, len), *q = p + 24;
    assert_non_null(p);
    uint32_t v = 3;
    uint64_t z = 0;
    memcpy(p, "GGUF", 4);
    memcpy(p + 4, &v, 4);
    memcpy(p + 8, &n, 8);
    memcpy(p + 16, &z, 8);
    for (uint64_t i = 0; i < n; i++, q += info) {
        uint64_t nl = 2;
        uint32_t nd = 0, ty = 24;
        memcpy(q, &nl, 8);
        q[8] = (uint8_t)i;
        q[9] = (uint8_t)(i >> 8);
        memcpy(q + 10, &nd, 4);
        memcpy(q + 14, &ty, 4);
        memcpy(q + 18, &i, 8);
    }
    struct gguf_file *f;
    struct gguf_diag d;
    enum gguf_err e = gguf_parse(p, len, len, &f, &d, NULL);
    free(p);
    if (e != GGUF_OK)
        fail_msg("a valid file of %llu 0-dim tensors is refused: %s (at %llu)",
                 (unsigned long long)n, d.msg, (unsigned long long)d.offset);
    gguf_close(f);
}

/*
 * Found by tests/fuzz/roundtrip.c (an out-of-memory after millions of
 * runs): gguf_header_build pads the new header to
 * general.alignment even when the file has no tensor data, and the parser
 * accepts any power-of-two alignment up to 2^31 in a file of any size.  So
 * an edit of meta/ in a 60-byte file with general.alignment = 2^31 makes
 * gguffs allocate a 2 GiB header (and gguf_commit would write a 2 GiB
 * file).  The fuzzer's input was a 771-byte v1 file with alignment 2^29.
 * The bytes below: v3, no tensors, general.alignment u32 2^31, a u8 key.
 * Here the allocation is refused by the counting allocator (mem_cap), so
 * the case fails without using the memory.
 */
static const uint8_t align_2g[] = {
    'G', 'G', 'U', 'F', 3, 0, 0, 0,                 /* version 3 */
    0, 0, 0, 0, 0, 0, 0, 0,                         /* 0 tensors */
    2, 0, 0, 0, 0, 0, 0, 0,                         /* 2 keys */
    17, 0, 0, 0, 0, 0, 0, 0, 'g', 'e', 'n', 'e', 'r', 'a', 'l', '.',
    'a', 'l', 'i', 'g', 'n', 'm', 'e', 'n', 't',
    4, 0, 0, 0, 0, 0, 0, 0x80,                      /* u32 2^31 */
    1, 0, 0, 0, 0, 0, 0, 0, 'a', 0, 0, 0, 0, 1,     /* "a": u8 1 */
};

static void test_known_alignment_padding(void **state)
{
    (void)state;
    struct gguf_file *f;
    struct gguf_diag d;
    enum gguf_err e = gguf_parse(align_2g, sizeof align_2g, sizeof align_2g, &f, &d, NULL);
    if (e != GGUF_OK)
        return;             /* refusing such an alignment is one possible fix */
    struct gguf_newkv kvs[2] = { gguf_newkv_of(f, 0), gguf_newkv_of(f, 1) };
    struct gguf_buf out = { 0 };
    size_t limit = 64 * sizeof align_2g + 65536;
    mem_cap = limit;
    mem_refused = 0;
    mem_peak = mem_live;
    size_t base = mem_live;
    e = gguf_header_build(f, kvs, 2, &out, &d);
    size_t peak = mem_peak - base, refused = mem_refused;
    unsigned long long align = (unsigned long long)f->alignment;
    mem_cap = SIZE_MAX;
    gguf_buf_free(&out);
    gguf_close(f);
    if (refused || peak > limit)
        fail_msg("an edit of a %zu-byte file allocates more than %zu bytes (a request "
                 "of %zu refused; the header is padded to %llu bytes): %s",
                 sizeof align_2g, limit, refused, align, e == GGUF_OK ? "built" : d.msg);
}

/* ---- regression cases from the fuzzers -------------------------------------- */

/* (none yet: the fuzz runs of 2026-11-23 found no crash in gguf/; see
 * doc/RELIABILITY.md) */

int main(int argc, char **argv)
{
    signal(SIGABRT, on_abort);
    /* Known-bug cases go into a group run with --known-bugs (registered in
     * meson with should_fail) until they are fixed; there are none now. */
    (void)argc, (void)argv;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncate_hyllama),
        cmocka_unit_test(test_truncate_taesd),
        cmocka_unit_test(test_truncate_vocab),
        cmocka_unit_test(test_fd_path),
        cmocka_unit_test(test_mutate_generated),
        cmocka_unit_test(test_mutate_real),
        cmocka_unit_test(test_hostile_counts),
        cmocka_unit_test(test_memory_bound),
        cmocka_unit_test(test_linear_work),
        /* fixed 2026-11-23: the name table grows; the smallest tensor info
         * is 24 bytes; headers of files without tensor bytes are not padded */
        cmocka_unit_test(test_known_many_distinct_keys),
        cmocka_unit_test(test_known_small_tensor_infos),
        cmocka_unit_test(test_known_alignment_padding),
    };
    return cmocka_run_group_tests_name("corrupt", tests, NULL, NULL);
}

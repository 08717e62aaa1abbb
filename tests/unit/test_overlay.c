/*
 * tests/unit/test_overlay.c — overlay files and spliced sources
 * (gguf/overlay.h): a round trip through a file, the spliced model read
 * at every boundary and parsed, every byte flipped and every truncation
 * refused with an offset inside the file, hostile overlays with correct
 * checksums (random header mutations: refused, or accepted only with the
 * base's tensor infos), an overlay of another base, and a crash (_exit)
 * at every step of gguf_overlay_write: the file is then the old or the
 * new overlay, byte for byte.
 *
 * Environment: TMPDIR.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf/commit.h"
#include "gguf/journal.h"
#include "gguf/kvedit.h"
#include "gguf/overlay.h"

#include "gb.h"

static char tmpdir[4096];

/* ---- an in-memory base ---------------------------------------------------------- */

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

/* A model of two f32 tensors (12 and 32 bytes) with patterned data. */
static struct gb base_model(uint32_t ctx)
{
    struct gb b = { 0 };
    gb_header(&b, 3, 2, 2);
    gb_kv_str(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.context_length", ctx);
    uint64_t ne_a[1] = { 3 }, ne_b[2] = { 4, 2 };
    gb_tensor(&b, "a", 1, ne_a, 0, 0);
    gb_tensor(&b, "b", 2, ne_b, 0, 32);
    gb_pad(&b, 32);
    for (unsigned i = 0; i < 64; i++)
        gb_u8(&b, (uint8_t)(i * 7 + 1));
    return b;
}

static void mem_init(struct mem *m, const struct gb *b, const char *id)
{
    memset(m, 0, sizeof *m);
    m->s.ops = &mem_ops;
    m->s.size = b->len;
    m->s.fd = -1;
    m->s.name = (char *)"mem://base";
    m->s.identity = (char *)id;
    m->p = b->p;
}

struct fixture {
    struct gb b;
    struct mem m;
    struct gguf_file *gf;
    struct gguf_buf hdr;          /* llama.context_length set to 8192 */
    struct gguf_overlay ov;       /* pointing into the above */
    char path[4200];
};

static void fixture_init(struct fixture *f)
{
    memset(f, 0, sizeof *f);
    f->b = base_model(4096);
    mem_init(&f->m, &f->b, "etag:\"base-1\"");
    struct gguf_diag d;
    assert_int_equal(gguf_open_source(&f->m.s, &f->gf, &d), GGUF_OK);
    assert_int_equal(gguf_kvedit_set(f->gf, 1, "8192", 4, &f->hdr, &d), GGUF_OK);
    f->ov = (struct gguf_overlay){ .identity = f->m.s.identity, .name = f->m.s.name,
                                   .base_size = f->m.s.size,
                                   .base_data = gguf_overlay_base_data(f->gf),
                                   .hdr = (uint8_t *)f->hdr.data, .hdr_len = f->hdr.len };
    snprintf(f->path, sizeof f->path, "%s/gguffs-test-overlay-%d", tmpdir, (int)getpid());
    unlink(f->path);
}

static void fixture_free(struct fixture *f)
{
    unlink(f->path);
    gguf_buf_free(&f->hdr);
    gguf_close(f->gf);
    free(f->b.p);
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return p;
}

/* Both checksums made right again. */
static void reseal(uint8_t *p, size_t n)
{
    static const struct gguf_enc le = { 0 };
    gguf_wr64(&le, p + 48, gguf_cksum(p + 64, n - 64));
    gguf_wr64(&le, p + 56, gguf_cksum(p, 56));
}

/* ---- the cases ------------------------------------------------------------------- */

static void round_trip(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct gguf_diag d;
    struct gguf_overlay r;
    assert_int_equal(gguf_overlay_read(f.path, &r, &d), GGUF_E_NOENT);
    bool renamed;
    assert_int_equal(gguf_overlay_write(f.path, &f.ov, &renamed, &d), GGUF_OK);
    assert_true(renamed);
    assert_int_equal(gguf_overlay_read(f.path, &r, &d), GGUF_OK);
    assert_string_equal(r.identity, f.ov.identity);
    assert_string_equal(r.name, f.ov.name);
    assert_int_equal(r.base_size, f.b.len);
    assert_int_equal(r.base_data, f.gf->data_off);
    assert_int_equal(r.hdr_len, f.hdr.len);
    assert_memory_equal(r.hdr, f.hdr.data, f.hdr.len);
    assert_int_equal(r.sum, f.ov.sum);
    assert_int_equal(r.hdr_at, 64 + strlen(r.identity) + strlen(r.name));
    uint64_t sum;
    assert_int_equal(gguf_overlay_sum(f.path, &sum), 1);
    assert_int_equal(sum, f.ov.sum);

    /* the model it makes */
    struct gguf_file *g;
    assert_int_equal(gguf_overlay_match(&r, &f.m.s, f.gf, &g, &d), GGUF_OK);
    int64_t ctx;
    assert_true(gguf_key_int(g, "llama.context_length", &ctx));
    assert_int_equal(ctx, 8192);
    assert_int_equal(g->data_off, f.hdr.len);
    struct gguf_source *sp;
    assert_int_equal(gguf_splice_source(r.hdr, (size_t)r.hdr_len, &f.m.s, r.base_data, &sp, &d),
                     GGUF_OK);
    assert_ptr_equal(sp->below, &f.m.s);
    assert_null(f.m.s.below);
    assert_int_equal(sp->fd, -1);
    assert_string_not_equal(sp->identity, f.m.s.identity);
    size_t data_len = f.b.len - (size_t)f.gf->data_off;
    size_t total = f.hdr.len + data_len;
    assert_int_equal(sp->size, total);
    uint8_t *want = malloc(total), *got = malloc(total + 8);
    memcpy(want, f.hdr.data, f.hdr.len);
    memcpy(want + f.hdr.len, f.b.p + f.gf->data_off, data_len);
    for (size_t a = 0; a <= total; a++)
        for (size_t n = 0; n <= total - a + 4; n += 1 + n / 3) {
            ssize_t k = sp->ops->read(sp, got, n, a);
            size_t exp = a + n <= total ? n : total - a;
            assert_int_equal(k, (ssize_t)exp);
            assert_memory_equal(got, want + a, exp);
        }
    assert_int_equal(sp->ops->read(sp, got, 4, total + 100), 0);
    struct gguf_file *g2;
    assert_int_equal(gguf_open_source(sp, &g2, &d), GGUF_OK);
    assert_int_equal(g2->hdr_size, g->hdr_size);
    assert_memory_equal(g2->hdr, g->hdr, g->hdr_size);
    gguf_close(g2);
    gguf_source_close(sp);
    /* a borrowed base: the same bytes and identity */
    assert_int_equal(gguf_splice_source(NULL, 0, &f.m.s, 0, &sp, &d), GGUF_OK);
    assert_string_equal(sp->identity, f.m.s.identity);
    assert_int_equal(sp->ops->read(sp, got, total + 8, 0), (ssize_t)f.b.len < (ssize_t)(total + 8) ? (ssize_t)f.b.len : (ssize_t)(total + 8));
    assert_memory_equal(got, f.b.p, f.b.len < total + 8 ? f.b.len : total + 8);
    gguf_source_close(sp);
    assert_int_equal(gguf_splice_source(NULL, 0, &f.m.s, f.b.len + 1, &sp, &d), GGUF_E_INVAL);
    free(want);
    free(got);
    gguf_close(g);
    gguf_overlay_free(&r);
    fixture_free(&f);
}

static void another_base(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct gguf_diag d;
    assert_int_equal(gguf_overlay_write(f.path, &f.ov, NULL, &d), GGUF_OK);
    struct gguf_overlay r;
    assert_int_equal(gguf_overlay_read(f.path, &r, &d), GGUF_OK);
    struct gguf_file *g;
    /* another identity */
    struct mem other;
    mem_init(&other, &f.b, "etag:\"base-2\"");
    assert_int_equal(gguf_overlay_match(&r, &other.s, f.gf, &g, &d), GGUF_E_INVAL);
    assert_int_equal(d.offset, 64);
    assert_non_null(strstr(d.msg, "another model"));
    /* another size, same identity */
    other.s.identity = f.m.s.identity;
    other.s.size = f.b.len - 1;
    assert_int_equal(gguf_overlay_match(&r, &other.s, f.gf, &g, &d), GGUF_E_INVAL);
    /* same identity, another layout (another context length changes nothing
     * in the tensor infos; another model does) */
    struct gb b2 = { 0 };
    gb_header(&b2, 3, 1, 1);
    gb_kv_str(&b2, "general.architecture", "llama");
    uint64_t ne[1] = { 3 };
    gb_tensor(&b2, "a", 1, ne, 0, 0);
    gb_pad(&b2, 32);
    while (b2.len < f.b.len)
        gb_u8(&b2, 0);
    struct mem m2;
    mem_init(&m2, &b2, f.m.s.identity);
    struct gguf_file *gf2;
    assert_int_equal(gguf_open_source(&m2.s, &gf2, &d), GGUF_OK);
    enum gguf_err e = gguf_overlay_match(&r, &m2.s, gf2, &g, &d);
    assert_int_equal(e, GGUF_E_INVAL);
    assert_true(d.offset >= 24 && d.offset < 64 + r.hdr_at + r.hdr_len);
    gguf_close(gf2);
    free(b2.p);
    gguf_overlay_free(&r);
    fixture_free(&f);
}

static void damaged(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct gguf_diag d;
    assert_int_equal(gguf_overlay_write(f.path, &f.ov, NULL, &d), GGUF_OK);
    size_t n;
    uint8_t *file = slurp(f.path, &n);
    assert_non_null(file);
    uint8_t *c = malloc(n);
    struct gguf_overlay r;
    /* every bit flip is refused (the checksums), with an offset inside */
    for (size_t i = 0; i < n; i++)
        for (unsigned bit = 0; bit < 8; bit++) {
            memcpy(c, file, n);
            c[i] ^= (uint8_t)(1u << bit);
            enum gguf_err e = gguf_overlay_parse(c, n, &r, &d);
            assert_int_not_equal(e, GGUF_OK);
            assert_true(d.offset < n);
        }
    /* every truncation too */
    for (size_t k = 0; k < n; k++) {
        enum gguf_err e = gguf_overlay_parse(file, k, &r, &d);
        assert_int_not_equal(e, GGUF_OK);
        assert_true(d.offset < n);
    }
    /* the offsets of the record's refusals */
    memcpy(c, file, n);
    c[0] = 'X';
    assert_int_equal(gguf_overlay_parse(c, n, &r, &d), GGUF_E_MAGIC);
    assert_int_equal(d.offset, 0);
    memcpy(c, file, n);
    c[20] ^= 1;
    assert_int_equal(gguf_overlay_parse(c, n, &r, &d), GGUF_E_INVAL);
    assert_int_equal(d.offset, 56);
    memcpy(c, file, n);
    c[n - 1] ^= 1;
    assert_int_equal(gguf_overlay_parse(c, n, &r, &d), GGUF_E_INVAL);
    assert_int_equal(d.offset, 48);
    static const struct { size_t at; uint64_t v; unsigned w; uint64_t off; } fields[] = {
        { 8, 2, 4, 8 }, { 12, 0, 4, 12 }, { 12, 5000, 4, 12 }, { 40, 9000, 4, 40 },
        { 44, 1, 4, 44 }, { 24, 1u << 20, 8, 24 }, { 32, 1, 8, 32 }, { 32, UINT64_MAX, 8, 32 },
    };
    static const struct gguf_enc le = { 0 };
    for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) {
        memcpy(c, file, n);
        if (fields[k].w == 4)
            gguf_wr32(&le, c + fields[k].at, (uint32_t)fields[k].v);
        else
            gguf_wr64(&le, c + fields[k].at, fields[k].v);
        reseal(c, n);
        assert_int_not_equal(gguf_overlay_parse(c, n, &r, &d), GGUF_OK);
        assert_int_equal(d.offset, fields[k].off);
    }
    free(c);
    free(file);
    fixture_free(&f);
}

/* Random mutations of the header with both checksums right: the overlay
 * parses (only the record is checked), and gguf_overlay_match refuses it
 * or gives a model with exactly the base's tensor infos, ending where the
 * data starts. */
static void hostile(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct gguf_diag d;
    assert_int_equal(gguf_overlay_write(f.path, &f.ov, NULL, &d), GGUF_OK);
    size_t n;
    uint8_t *file = slurp(f.path, &n);
    uint8_t *c = malloc(n);
    size_t hdr_at = n - f.hdr.len;
    uint64_t rng = 0x243F6A8885A308D3ull;
    unsigned accepted = 0;
    for (unsigned t = 0; t < 20000; t++) {
        memcpy(c, file, n);
        unsigned flips = 1 + t % 4;
        for (unsigned k = 0; k < flips; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = hdr_at + (size_t)((rng >> 33) % f.hdr.len);
            c[at] = (uint8_t)(rng >> 8);
        }
        reseal(c, n);
        struct gguf_overlay r;
        assert_int_equal(gguf_overlay_parse(c, n, &r, &d), GGUF_OK);
        struct gguf_file *g;
        enum gguf_err e = gguf_overlay_match(&r, &f.m.s, f.gf, &g, &d);
        if (e == GGUF_OK) {
            accepted++;
            assert_int_equal(g->n_tensors, f.gf->n_tensors);
            for (uint64_t j = 0; j < g->n_tensors; j++) {
                assert_int_equal(g->tensors[j].offset, f.gf->tensors[j].offset);
                assert_int_equal(g->tensors[j].nbytes, f.gf->tensors[j].nbytes);
                assert_int_equal(g->tensors[j].type, f.gf->tensors[j].type);
            }
            assert_int_equal(g->data_off, r.hdr_len);
            gguf_close(g);
        } else {
            /* (a header cut short: at the end of the file) */
            assert_true(d.offset == UINT64_MAX || d.offset <= n);
        }
        gguf_overlay_free(&r);
    }
    /* values of keys may change: some mutations are valid overlays */
    assert_true(accepted > 0);
    free(c);
    free(file);
    fixture_free(&f);
}

/* ---- crashes during gguf_overlay_write --------------------------------------------- */

static unsigned crash_at;

static void crash_step(unsigned n, const char *what, void *arg)
{
    (void)what;
    (void)arg;
    if (n == crash_at)
        _exit(42);
}

static void crash(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    struct gguf_diag d;
    assert_int_equal(gguf_overlay_write(f.path, &f.ov, NULL, &d), GGUF_OK);
    size_t old_n;
    uint8_t *old = slurp(f.path, &old_n);
    /* the new version: another value, a header of another size */
    struct gguf_buf hdr2 = { 0 };
    assert_int_equal(gguf_kvedit_create(f.gf, "general.name", 12, NULL, "a longer name here",
                                        18, &hdr2, &d), GGUF_OK);
    struct gguf_overlay ov2 = f.ov;
    ov2.hdr = (uint8_t *)hdr2.data;
    ov2.hdr_len = hdr2.len;
    char newpath[4300];
    snprintf(newpath, sizeof newpath, "%s%s", f.path, GGUF_NEW_SUFFIX);
    unsigned outcomes[2] = { 0, 0 };
    uint8_t *newb = NULL;
    size_t new_n = 0;
    for (crash_at = 0;; crash_at++) {
        /* back to the old version */
        FILE *fp = fopen(f.path, "wb");
        assert_non_null(fp);
        assert_int_equal(fwrite(old, 1, old_n, fp), old_n);
        fclose(fp);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            static struct gguf_edit_hooks hooks = { .step = crash_step };
            gguf_edit_hooks = &hooks;
            struct gguf_diag cd;
            _exit(gguf_overlay_write(f.path, &ov2, NULL, &cd) == GGUF_OK ? 0 : 1);
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        int code = WEXITSTATUS(st);
        assert_true(code == 0 || code == 42);
        size_t n;
        uint8_t *now = slurp(f.path, &n);
        assert_non_null(now);
        if (code == 0) {
            /* ran to its end: the new version; no more steps to crash in */
            free(newb);
            newb = now;
            new_n = n;
            assert_int_equal(access(newpath, F_OK), -1);
            break;
        }
        bool is_old = n == old_n && memcmp(now, old, n) == 0;
        struct gguf_overlay r;
        /* old, or an intact overlay with the new header */
        if (!is_old) {
            assert_int_equal(gguf_overlay_parse(now, n, &r, &d), GGUF_OK);
            assert_int_equal(r.hdr_len, hdr2.len);
            assert_memory_equal(r.hdr, hdr2.data, hdr2.len);
            gguf_overlay_free(&r);
        }
        outcomes[!is_old]++;
        free(now);
        /* a leftover is removed by gguf_overlay_clean */
        assert_int_equal(gguf_overlay_clean(f.path), 0);
        assert_int_equal(access(newpath, F_OK), -1);
        assert_true(crash_at < 100);
    }
    assert_true(outcomes[0] > 0);        /* crashes before the rename */
    assert_true(outcomes[1] > 0);        /* and after it */
    assert_non_null(newb);
    struct gguf_overlay r;
    assert_int_equal(gguf_overlay_parse(newb, new_n, &r, &d), GGUF_OK);
    gguf_overlay_free(&r);
    free(newb);
    free(old);
    gguf_buf_free(&hdr2);
    fixture_free(&f);
}

static void leftover(void **state)
{
    (void)state;
    struct fixture f;
    fixture_init(&f);
    char newpath[4300];
    snprintf(newpath, sizeof newpath, "%s%s", f.path, GGUF_NEW_SUFFIX);
    FILE *fp = fopen(newpath, "wb");
    assert_non_null(fp);
    fputs("half", fp);
    fclose(fp);
    struct gguf_diag d;
    /* a write replaces a leftover */
    assert_int_equal(gguf_overlay_write(f.path, &f.ov, NULL, &d), GGUF_OK);
    assert_int_equal(access(newpath, F_OK), -1);
    assert_int_equal(gguf_overlay_clean(f.path), 0);     /* nothing there: fine */
    /* not an overlay */
    fp = fopen(f.path, "wb");
    fputs("GGUF not an overlay, long enough to hold a record of sixty-four bytes....", fp);
    fclose(fp);
    uint64_t sum;
    assert_int_equal(gguf_overlay_sum(f.path, &sum), -1);
    struct gguf_overlay r;
    assert_int_equal(gguf_overlay_read(f.path, &r, &d), GGUF_E_MAGIC);
    assert_int_equal(d.offset, 0);
    fixture_free(&f);
    assert_int_equal(gguf_overlay_sum(f.path, &sum), 0);
}

int main(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s", t && *t ? t : "/tmp");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(another_base),
        cmocka_unit_test(damaged),
        cmocka_unit_test(hostile),
        cmocka_unit_test(crash),
        cmocka_unit_test(leftover),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

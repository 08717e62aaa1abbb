/*
 * tests/unit/test_split.c — split models (gguf/split.h) from handcrafted
 * shards: shard names, opening through any shard (files, and an opener
 * of in-memory sources that records the order of opens and reads), every
 * refusal, and the merged header parsed back against the expected layout.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/header.h"
#include "gguf/split.h"
#include "gguf/types.h"

#include "gb.h"

static char tmpdir[4096];

/* ---- shards -------------------------------------------------------------------------- */

/* How to build shard no (0-based) of a model. */
struct spec {
    unsigned count;           /* shards */
    uint32_t version;
    bool be;
    int64_t tensors_count;    /* split.tensors.count in shard 0; -1: none */
    /* per-shard deviations (index = shard) */
    int64_t claim_no[8];      /* split.no written; -1: the shard's own */
    uint32_t version_of[8];   /* 0: spec.version */
    bool be_of[8];            /* byte order flipped */
    const char *dup_name[8];  /* an extra tensor of this name */
};

/* Tensors: shard k holds "blk.k.a" (f32, 3 elements: 12 bytes) and
 * "blk.k.b" (f32, 8 elements), each aligned to 32. */
static void build_shard(struct gb *b, const struct spec *s, unsigned k)
{
    memset(b, 0, sizeof *b);
    b->be = s->be != s->be_of[k];
    uint32_t v = s->version_of[k] ? s->version_of[k] : s->version;
    unsigned nt = 2 + (s->dup_name[k] != NULL);
    unsigned nkv = 2 + (k == 0 ? 2 + (s->tensors_count >= 0) : 0);
    gb_header(b, v, nt, nkv);
    if (k == 0) {
        gb_kv_str(b, "general.architecture", "llama");
        gb_kv_u32(b, "llama.context_length", 2048);
    }
    /* split.no as u16, split.count as i32, split.tensors.count as u64:
     * any integer type will do */
    gb_str(b, "split.no");
    gb_u32(b, GGUF_U16);
    uint16_t no = (uint16_t)(s->claim_no[k] >= 0 ? s->claim_no[k] : k);
    if (b->be)
        no = __builtin_bswap16(no);
    gb_put(b, &no, 2);
    gb_str(b, "split.count");
    gb_u32(b, GGUF_I32);
    gb_u32(b, s->count);
    if (k == 0 && s->tensors_count >= 0) {
        gb_str(b, "split.tensors.count");
        gb_u32(b, GGUF_U64);
        gb_u64(b, (uint64_t)s->tensors_count);
    }
    char name[32];
    uint64_t ne_a[1] = { 3 }, ne_b[1] = { 8 };
    snprintf(name, sizeof name, "blk.%u.a", k);
    gb_tensor(b, name, 1, ne_a, GGML_T_F32, 0);
    snprintf(name, sizeof name, "blk.%u.b", k);
    gb_tensor(b, name, 1, ne_b, GGML_T_F32, 32);
    if (s->dup_name[k])
        gb_tensor(b, s->dup_name[k], 1, ne_a, GGML_T_F32, 64);
    gb_pad(b, 32);
    for (unsigned i = 0; i < 32 + 32 + (s->dup_name[k] ? 12 : 0); i++)
        gb_u8(b, (uint8_t)(k * 100 + i));
}

static char *shard_path(unsigned k, unsigned count)
{
    char *p = malloc(4200);
    snprintf(p, 4200, "%s/m-%05u-of-%05u.gguf", tmpdir, k + 1, count);
    return p;
}

static void write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    close(fd);
}

static void write_model(const struct spec *s)
{
    for (unsigned k = 0; k < s->count; k++) {
        struct gb b;
        build_shard(&b, s, k);
        char *p = shard_path(k, s->count);
        write_file(p, b.p, b.len);
        free(p);
        free(b.p);
    }
}

static void remove_model(unsigned count)
{
    for (unsigned k = 0; k < count; k++) {
        char *p = shard_path(k, count);
        unlink(p);
        free(p);
    }
}

static struct spec spec3(void)
{
    struct spec s = { .count = 3, .version = 3, .tensors_count = 6 };
    for (int k = 0; k < 8; k++)
        s.claim_no[k] = -1;
    return s;
}

/* Opens the model through shard k with the file opener. */
static enum gguf_err open_via(unsigned k, unsigned count, struct gguf_split **out,
                              struct gguf_diag *d)
{
    char *p = shard_path(k, count);
    enum gguf_err e = gguf_split_open(p, gguf_split_open_file, NULL, out, d);
    free(p);
    return e;
}

/* ---- names ---------------------------------------------------------------------------- */

static void test_names(void **state)
{
    (void)state;
    size_t pl;
    unsigned no, count;
    assert_true(gguf_split_name_parse("dir/m-00002-of-00004.gguf", &pl, &no, &count));
    assert_int_equal(pl, 5);
    assert_int_equal(no, 2);
    assert_int_equal(count, 4);
    assert_true(gguf_split_name_parse("-00001-of-00001.gguf", &pl, &no, &count));
    assert_int_equal(pl, 0);
    assert_true(gguf_split_name_parse("x-99999-of-99999.gguf", &pl, &no, &count));
    assert_int_equal(no, 99999);
    static const char *bad[] = {
        "m.gguf", "m-1-of-2.gguf", "m-00001-of-0002.gguf", "m-00001-of-00002.ggu",
        "m-00001-of-00002.gguf.x", "m-0000a-of-00002.gguf", "m_00001-of-00002.gguf",
        "m-00001_of-00002.gguf", "m-00001-of-0000+.gguf", "m-+0001-of-00002.gguf",
        "", "-00001-of-00002.gguf\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (gguf_split_name_parse(bad[i], &pl, &no, &count))
            fail_msg("\"%s\" parsed as a shard name", bad[i]);

    char *n = gguf_split_name("dir/model-00003-of-00009.gguf", 9, 2, 4);
    assert_string_equal(n, "dir/model-00002-of-00004.gguf");
    free(n);
    n = gguf_split_name("", 0, 1, 1);
    assert_string_equal(n, "-00001-of-00001.gguf");
    assert_true(gguf_split_name_parse(n, &pl, &no, &count) && no == 1 && count == 1);
    free(n);
}

/* ---- opening ---------------------------------------------------------------------------- */

static void test_single(void **state)
{
    (void)state;
    char path[4200];
    snprintf(path, sizeof path, "%s/single.gguf", tmpdir);
    struct spec s = spec3();
    struct gb b;
    /* no split.* at all */
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 1);
    gb_kv_str(&b, "general.name", "single");
    write_file(path, b.p, b.len);
    free(b.p);
    struct gguf_split *m;
    struct gguf_diag d;
    assert_int_equal(gguf_split_open(path, gguf_split_open_file, NULL, &m, &d), GGUF_OK);
    assert_int_equal(m->n, 1);
    assert_int_equal(m->given, 0);
    assert_string_equal(m->shards[0].name, path);
    assert_non_null(m->shards[0].src);
    assert_int_equal(m->n_tensors, 0);
    gguf_split_close(m);
    /* split.count 1: one shard, whatever the name */
    s.count = 1;
    build_shard(&b, &s, 0);
    write_file(path, b.p, b.len);
    free(b.p);
    assert_int_equal(gguf_split_open(path, gguf_split_open_file, NULL, &m, &d), GGUF_OK);
    assert_int_equal(m->n, 1);
    assert_int_equal(m->n_tensors, 2);
    gguf_split_close(m);
    /* the same in version 1: merged (as a mount's model.gguf) as version 3
     * with every key, split.* too (they are not a split model's) */
    s.version = 1;
    build_shard(&b, &s, 0);
    write_file(path, b.p, b.len);
    free(b.p);
    assert_int_equal(gguf_split_open(path, gguf_split_open_file, NULL, &m, &d), GGUF_OK);
    assert_int_equal(m->n, 1);
    struct gguf_merged mg;
    assert_int_equal(gguf_split_merge(m, &mg, &d), GGUF_OK);
    struct gguf_file *f;
    assert_int_equal(gguf_parse((const uint8_t *)mg.hdr.data, mg.hdr.len, mg.size, &f, &d, NULL),
                     GGUF_OK);
    assert_int_equal(f->version, 3);
    assert_int_equal(f->n_kv, m->shards[0].gf->n_kv);
    assert_true(gguf_find_key(f, "split.count", 11) >= 0);
    assert_int_equal(f->n_tensors, 2);
    gguf_close(f);
    gguf_merged_free(&mg);
    gguf_split_close(m);
    s.version = 3;
    /* a file that does not parse: the parser's message, no name prefix */
    write_file(path, "GGUX\3\0\0\0", 8);
    assert_int_equal(gguf_split_open(path, gguf_split_open_file, NULL, &m, &d), GGUF_E_MAGIC);
    assert_null(m);
    assert_true(strncmp(d.msg, "not a GGUF file", 15) == 0);
    assert_int_equal(d.offset, 0);
    unlink(path);
    /* a file that is not there */
    assert_int_equal(gguf_split_open(path, gguf_split_open_file, NULL, &m, &d), GGUF_E_NOENT);
    assert_null(m);
}

static void test_open_any_shard(void **state)
{
    (void)state;
    for (int variant = 0; variant < 3; variant++) {
        struct spec s = spec3();
        s.be = variant == 1;
        s.version = variant == 2 ? 1 : 3;
        if (variant == 2)
            s.tensors_count = -1;      /* optional */
        write_model(&s);
        for (unsigned g = 0; g < 3; g++) {
            struct gguf_split *m;
            struct gguf_diag d;
            if (open_via(g, 3, &m, &d) != GGUF_OK)
                fail_msg("via shard %u: %s", g + 1, d.msg);
            assert_int_equal(m->n, 3);
            assert_int_equal(m->given, g);
            assert_int_equal(m->n_tensors, 6);
            for (unsigned k = 0; k < 3; k++) {
                char *p = shard_path(k, 3);
                assert_string_equal(m->shards[k].name, p);
                free(p);
                int64_t no;
                assert_true(gguf_key_int(m->shards[k].gf, "split.no", &no));
                assert_int_equal(no, k);
                assert_int_equal(m->shards[k].gf->n_tensors, 2);
                assert_true(m->shards[k].src->size == m->shards[k].gf->file_size);
            }
            assert_true(gguf_find_key(m->shards[0].gf, "general.architecture", 20) >= 0);
            gguf_split_close(m);
        }
        remove_model(3);
    }
}

/* ---- an opener of in-memory sources ------------------------------------------------------ */

struct mem_source {
    struct gguf_source s;
    const uint8_t *p;
    struct memfs *fs;
    unsigned k;
};

#define LOG_MAX 64
struct memfs {
    struct gb shard[3];
    char *names[3];
    char log[LOG_MAX];        /* 'o' k: opened shard k; 'r' k: read it */
    unsigned n_log;
    bool fail_io;             /* the third shard's open fails (not missing) */
};

static void logc(struct memfs *fs, char what, unsigned k)
{
    if (fs->n_log + 2 <= LOG_MAX) {
        fs->log[fs->n_log++] = what;
        fs->log[fs->n_log++] = (char)('0' + k);
    }
}

static ssize_t mem_read(struct gguf_source *s, void *buf, size_t len, uint64_t off)
{
    struct mem_source *m = (struct mem_source *)s;
    if (!m->fs->n_log || m->fs->log[m->fs->n_log - 2] != 'r' ||
        m->fs->log[m->fs->n_log - 1] != (char)('0' + m->k))
        logc(m->fs, 'r', m->k);
    if (off >= s->size)
        return 0;
    size_t n = s->size - off < len ? (size_t)(s->size - off) : len;
    memcpy(buf, m->p + off, n);
    return (ssize_t)n;
}

static void mem_close(struct gguf_source *s)
{
    free(s->name);
    free(s->identity);
    free(s);
}

static const struct gguf_source_ops mem_ops = { .read = mem_read, .close = mem_close };

static enum gguf_err mem_open(void *ctx, const char *name, struct gguf_source **out,
                              struct gguf_diag *d)
{
    struct memfs *fs = ctx;
    for (unsigned k = 0; k < 3; k++) {
        if (!fs->names[k] || strcmp(fs->names[k], name) != 0)
            continue;
        if (fs->fail_io && k == 2)
            return gguf_diag_set(d, GGUF_E_IO, UINT64_MAX, "connection refused");
        struct mem_source *m = calloc(1, sizeof *m);
        assert_non_null(m);
        m->s.ops = &mem_ops;
        m->s.size = fs->shard[k].len;
        m->s.name = strdup(name);
        m->s.identity = strdup("mem");
        m->s.fd = -1;
        m->p = fs->shard[k].p;
        m->fs = fs;
        m->k = k;
        logc(fs, 'o', k);
        *out = &m->s;
        return GGUF_OK;
    }
    return gguf_diag_set(d, GGUF_E_NOENT, UINT64_MAX, "404");
}

static void test_opener(void **state)
{
    (void)state;
    struct memfs fs = { 0 };
    struct spec s = spec3();
    for (unsigned k = 0; k < 3; k++) {
        build_shard(&fs.shard[k], &s, k);
        fs.names[k] = malloc(64);
        snprintf(fs.names[k], 64, "https://h/m-%05u-of-00003.gguf", k + 1);
    }
    struct gguf_split *m;
    struct gguf_diag d;
    assert_int_equal(gguf_split_open(fs.names[1], mem_open, &fs, &m, &d), GGUF_OK);
    assert_int_equal(m->n, 3);
    assert_int_equal(m->given, 1);
    /* the named shard is opened and read, then every other shard is opened
     * before any of them is read */
    fs.log[fs.n_log] = '\0';
    assert_string_equal(fs.log, "o1r1o0o2r0r2");
    gguf_split_close(m);

    /* a missing shard (the opener says NOENT) is named */
    free(fs.names[2]);
    fs.names[2] = NULL;
    assert_int_equal(gguf_split_open(fs.names[0], mem_open, &fs, &m, &d), GGUF_E_NOENT);
    assert_string_equal(d.msg, "shard 3 of 3 is missing: https://h/m-00003-of-00003.gguf");
    /* any other failure of the opener is the shard's */
    fs.names[2] = strdup("https://h/m-00003-of-00003.gguf");
    fs.fail_io = true;
    assert_int_equal(gguf_split_open(fs.names[0], mem_open, &fs, &m, &d), GGUF_E_IO);
    assert_string_equal(d.msg, "https://h/m-00003-of-00003.gguf: connection refused");
    assert_null(m);
    for (unsigned k = 0; k < 3; k++) {
        free(fs.names[k]);
        free(fs.shard[k].p);
    }
}

/* ---- refusals ------------------------------------------------------------------------------- */

/* Opening via shard g of the model s fails with e and a message holding want
 * (prefixed with shard k's path when k != g; k < 0: no prefix). */
static void refused(const struct spec *s, unsigned g, enum gguf_err e, int k,
                    const char *want)
{
    write_model(s);
    struct gguf_split *m = (void *)1;
    struct gguf_diag d;
    enum gguf_err got = open_via(g, s->count, &m, &d);
    remove_model(s->count);
    if (got != e)
        fail_msg("error %d (%s), expected %d", got, got ? d.msg : "ok", e);
    assert_null(m);
    if (!strstr(d.msg, want))
        fail_msg("\"%s\" does not say \"%s\"", d.msg, want);
    if (k >= 0 && (unsigned)k != g) {
        char *p = shard_path((unsigned)k, s->count);
        if (strncmp(d.msg, p, strlen(p)) != 0 || d.msg[strlen(p)] != ':')
            fail_msg("\"%s\" does not start with the shard's name %s", d.msg, p);
        free(p);
    } else {
        assert_true(d.msg[0] != '/');
    }
}

static void test_refusals(void **state)
{
    (void)state;
    struct spec s = spec3();
    /* every shard says it is shard i of count */
    s.claim_no[2] = 1;
    refused(&s, 0, GGUF_E_INVAL, 2, "does not belong to this split model "
            "(split.no/split.count should be 2/3)");
    refused(&s, 1, GGUF_E_INVAL, 2, "does not belong");
    /* the named shard's own split.no must match its name */
    refused(&s, 2, GGUF_E_INVAL, -1, "split.count is 3 but the file is not named "
            "PREFIX-00002-of-00003.gguf with a matching split.no");
    s = spec3();
    /* same version and byte order */
    s.version_of[1] = 2;
    refused(&s, 0, GGUF_E_INVAL, 1, "GGUF version or byte order differs");
    s = spec3();
    s.be_of[2] = true;
    refused(&s, 1, GGUF_E_INVAL, 2, "GGUF version or byte order differs");
    s = spec3();
    /* split.tensors.count */
    s.tensors_count = 7;
    refused(&s, 0, GGUF_E_INVAL, -1, "split.tensors.count is 7 but the shards hold "
            "6 tensors");
    refused(&s, 2, GGUF_E_INVAL, 0, "split.tensors.count is 7");
    /* a tensor name in two shards */
    s = spec3();
    s.tensors_count = 7;
    s.dup_name[2] = "blk.0.b";
    refused(&s, 0, GGUF_E_DUP, 2, "tensor name 'blk.0.b' occurs in two shards (1 and 3)");
    refused(&s, 2, GGUF_E_DUP, 2, "occurs in two shards");

    /* a missing shard is named */
    s = spec3();
    write_model(&s);
    char *p3 = shard_path(2, 3), *p1 = shard_path(0, 3), *p2 = shard_path(1, 3);
    unlink(p3);
    struct gguf_split *m;
    struct gguf_diag d;
    assert_int_equal(open_via(0, 3, &m, &d), GGUF_E_NOENT);
    char want[4300];
    snprintf(want, sizeof want, "shard 3 of 3 is missing: %s", p3);
    assert_string_equal(d.msg, want);
    /* a shard that does not parse: its message, its name, its offset */
    write_file(p3, "GGUF\x07\0\0\0", 8);
    assert_int_equal(open_via(1, 3, &m, &d), GGUF_E_VERSION);
    snprintf(want, sizeof want, "%s: unsupported GGUF version 7", p3);
    assert_true(strncmp(d.msg, want, strlen(want)) == 0);
    assert_int_equal(d.offset, 4);
    char line[8192];
    gguf_diag_format(&d, p2, line, sizeof line);
    snprintf(want, sizeof want, "%s: %s: unsupported GGUF version 7 (supported: 1, 2, "
             "3) (at byte offset 4)", p2, p3);
    assert_string_equal(line, want);
    remove_model(3);
    free(p1);
    free(p2);
    free(p3);
}

/* The named file's name and split.no/split.count must agree; split.no is
 * within the count; at most GGUF_SPLIT_MAX shards. */
static void test_bad_numbering(void **state)
{
    (void)state;
    char path[4200];
    struct gguf_split *m;
    struct gguf_diag d;
    struct { const char *name; unsigned count; int64_t no; } cases[] = {
        { "model.gguf", 3, 0 },               /* not a shard name */
        { "m-00001-of-00004.gguf", 3, 0 },    /* count differs */
        { "m-00002-of-00003.gguf", 3, 0 },    /* number differs */
        { "m-00005-of-00004.gguf", 4, 4 },    /* split.no past the count */
        { "m-00000-of-00004.gguf", 4, -1 },   /* shard 0 (split.no -1) */
        { "m-00001-of-00000.gguf", 100000, 0 },  /* too many (name: 00000) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct spec s = spec3();
        s.count = cases[i].count;
        s.claim_no[0] = cases[i].no;
        struct gb b;
        build_shard(&b, &s, 0);
        if (cases[i].no < 0) {      /* split.no as i8 -1 */
            free(b.p);
            memset(&b, 0, sizeof b);
            gb_header(&b, 3, 0, 2);
            gb_str(&b, "split.no");
            gb_u32(&b, GGUF_I8);
            gb_u8(&b, 0xff);
            gb_str(&b, "split.count");
            gb_u32(&b, GGUF_U32);
            gb_u32(&b, s.count);
        }
        snprintf(path, sizeof path, "%s/%s", tmpdir, cases[i].name);
        write_file(path, b.p, b.len);
        free(b.p);
        enum gguf_err e = gguf_split_open(path, gguf_split_open_file, NULL, &m, &d);
        unlink(path);
        if (e != GGUF_E_INVAL)
            fail_msg("%s (split.no %lld of %u): error %d (%s)", cases[i].name,
                     (long long)cases[i].no, cases[i].count, e, e ? d.msg : "opened");
        assert_non_null(strstr(d.msg, "is not named PREFIX-"));
    }
}

/* ---- the merged header --------------------------------------------------------------------- */

static void test_merge(void **state)
{
    (void)state;
    /* v3 LE, v3 BE, v1 LE, v1 BE: version 1 is merged as version 3 */
    for (int variant = 0; variant < 4; variant++) {
        struct spec s = spec3();
        s.be = variant & 1;
        s.version = variant >= 2 ? 1 : 3;
        write_model(&s);
        struct gguf_split *m;
        struct gguf_diag d;
        assert_int_equal(open_via(1, 3, &m, &d), GGUF_OK);
        struct gguf_merged mg;
        assert_int_equal(gguf_split_merge(m, &mg, &d), GGUF_OK);
        assert_int_equal(mg.n_tensors, 6);
        /* each tensor's 12 or 32 bytes, each padded to 32 */
        assert_int_equal(mg.size, mg.hdr.len + 6 * 32);
        assert_int_equal(mg.hdr.len % 32, 0);

        struct gguf_file *f;
        assert_int_equal(gguf_parse((const uint8_t *)mg.hdr.data, mg.hdr.len, mg.size,
                                    &f, &d, NULL), GGUF_OK);
        const struct gguf_file *f0 = m->shards[0].gf;
        assert_int_equal(f->version, s.version == 1 ? 3 : f0->version);
        assert_false(f->enc.v1);
        assert_int_equal(f->enc.big_endian, s.be);
        assert_int_equal(f->data_off, mg.hdr.len);
        assert_null(f->notes == NULL ? NULL : strstr(f->notes, "contiguously"));
        /* the first shard's keys without split.*, as they are */
        assert_int_equal(f->n_kv, 2);
        for (uint64_t i = 0; i < 2; i++) {
            assert_int_equal(f->kv[i].key_len, f0->kv[i].key_len);
            assert_memory_equal(f->hdr + f->kv[i].key_off, f0->hdr + f0->kv[i].key_off,
                                f->kv[i].key_len);
            assert_int_equal(f->kv[i].type, f0->kv[i].type);
            if (s.version == 1) {
                /* re-encoded: the same value as text */
                struct gguf_buf ta = { 0 }, tb = { 0 };
                assert_int_equal(gguf_render_kv(f, &f->kv[i], &ta), GGUF_OK);
                assert_int_equal(gguf_render_kv(f0, &f0->kv[i], &tb), GGUF_OK);
                assert_int_equal(ta.len, tb.len);
                assert_memory_equal(ta.data, tb.data, ta.len);
                gguf_buf_free(&ta);
                gguf_buf_free(&tb);
                continue;
            }
            uint64_t a = f->kv[i].rec_off, b = f0->kv[i].rec_off;
            uint64_t la = f->kv[i].val_off + f->kv[i].val_size - a;
            assert_int_equal(la, f0->kv[i].val_off + f0->kv[i].val_size - b);
            assert_memory_equal(f->hdr + a, f0->hdr + b, la);
        }
        assert_int_equal(gguf_find_key(f, "split.no", 8), -1);
        /* every tensor, shard by shard, at contiguous aligned offsets */
        assert_int_equal(f->n_tensors, 6);
        for (unsigned j = 0; j < 6; j++) {
            const struct gguf_tensor *t = &f->tensors[j];
            const struct gguf_file *fk = m->shards[j / 2].gf;
            const struct gguf_tensor *o = &fk->tensors[j % 2];
            assert_int_equal(t->name_len, o->name_len);
            assert_memory_equal(f->hdr + t->name_off, fk->hdr + o->name_off, t->name_len);
            assert_int_equal(t->type, o->type);
            assert_int_equal(t->n_dims, o->n_dims);
            assert_memory_equal(t->ne, o->ne, sizeof t->ne);
            assert_int_equal(t->nbytes, o->nbytes);
            assert_int_equal(t->offset, 32 * j);
            assert_int_equal(mg.offset[j], t->offset);
        }
        gguf_close(f);
        gguf_merged_free(&mg);
        gguf_split_close(m);
        remove_model(3);
    }
}

/* gguf_put_kv_as: a value encoded in one encoding (v1 or not, either byte
 * order) written in another parses back to the same text. */
static void test_kv_as(void **state)
{
    (void)state;
    static const struct {
        const char *type, *text;
    } vals[] = {
        { "u8", "200\n" }, { "i16", "-300\n" }, { "u32", "4000000000\n" },
        { "i64", "-1152921504606846976\n" }, { "f32", "1.5\n" }, { "f64", "-2.25\n" },
        { "bool", "true\n" }, { "string", "h\xc3\xa9llo\n" }, { "string", "" },
        { "array[string]", "a\n\nbc\n" }, { "array[u16]", "1\n65535\n" },
        { "array[f64]", "0.5\n-1e+300\n" }, { "array[i32]", "" },
        { "array[array[i32]]", "[1, 2]\n[]\n[3]\n" },
        { "array[array[string]]", "[\"a\", \"bc\"]\n[\"d\"]\n" },
        { "array[array[array[u64]]]", "[[1], [2, 3]]\n[]\n" },
    };
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        struct gguf_typedesc td;
        assert_true(gguf_typedesc_parse(vals[i].type, strlen(vals[i].type), &td));
        for (int from_v = 0; from_v < 4; from_v++) {
            struct gguf_enc from = { .big_endian = from_v & 1, .v1 = from_v >= 2 };
            struct gguf_buf bin = { 0 };
            struct gguf_diag d;
            assert_int_equal(gguf_parse_value(&from, &td, vals[i].text, strlen(vals[i].text),
                                              &bin, &d), GGUF_OK);
            for (int to_v = 0; to_v < 4; to_v++) {
                struct gguf_enc to = { .big_endian = to_v & 1, .v1 = to_v >= 2 };
                struct gguf_newkv kv = { "k", 1, td.levels[0], (const uint8_t *)bin.data, bin.len };
                struct gguf_buf h = { 0 }, txt = { 0 };
                gguf_put_preamble(&h, &to, to.v1 ? 1 : 3, 0, 1);
                assert_true(gguf_put_kv_as(&h, &to, &from, &kv));
                struct gguf_file *f;
                assert_int_equal(gguf_parse((const uint8_t *)h.data, h.len, h.len, &f, &d, NULL),
                                 GGUF_OK);
                assert_int_equal(f->hdr_size, h.len);
                assert_int_equal(f->enc.big_endian, to.big_endian);
                assert_int_equal(f->enc.v1, to.v1);
                assert_int_equal(gguf_render_kv(f, &f->kv[0], &txt), GGUF_OK);
                assert_int_equal(txt.len, strlen(vals[i].text) + (td.depth == 1 &&
                                 td.levels[0] == GGUF_STRING && !*vals[i].text));
                assert_memory_equal(txt.data, vals[i].text, strlen(vals[i].text));
                gguf_close(f);
                gguf_buf_free(&h);
                gguf_buf_free(&txt);
            }
            /* a value cut short is refused */
            if (bin.len > 1) {
                struct gguf_newkv kv = { "k", 1, td.levels[0], (const uint8_t *)bin.data,
                                         bin.len - 1 };
                struct gguf_enc to = { .big_endian = !from.big_endian, .v1 = !from.v1 };
                struct gguf_buf h = { 0 };
                assert_false(gguf_put_kv_as(&h, &to, &from, &kv));
                gguf_buf_free(&h);
            }
            gguf_buf_free(&bin);
        }
    }
}

static int setup(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/gguffs-split-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return rmdir(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_open_any_shard),
        cmocka_unit_test(test_opener),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bad_numbering),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_kv_as),
    };
    return cmocka_run_group_tests_name("split", tests, setup, teardown);
}

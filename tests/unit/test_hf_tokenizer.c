/*
 * tests/unit/test_hf_tokenizer.c — the Hugging Face tokenizer files
 * (gguf/hf_tokenizer.h) from handcrafted metadata: merges derived from
 * scores in transformers' order, byte-level respelling and the ids of
 * added tokens, the post-processor and the config, JSON escaping of odd
 * tokens, and hostile or odd vocabularies (wrong types, ids out of range,
 * invalid UTF-8, bad merges, duplicates, a megabyte token, v1 and
 * big-endian files) refused in one line or handled, never a crash.  The
 * integration test (tests/integration/test_hf_tokenizer.py) checks the
 * files against transformers itself.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "gb.h"
#include "gguf/gguf.h"
#include "gguf/hf_tokenizer.h"

/* One key/value of a test model. */
enum kind { K_STR, K_U32, K_I32, K_BOOL, K_STRS, K_F32S, K_I32S, K_U32S };
struct kv {
    const char *key;
    enum kind kind;
    const char *s;             /* K_STR */
    int64_t i;                 /* K_U32, K_I32, K_BOOL */
    const char *const *strs;   /* K_STRS */
    const size_t *lens;        /* K_STRS: lengths (NULL: strlen) */
    const double *nums;        /* K_F32S, K_I32S, K_U32S */
    size_t n;                  /* K_STRS, K_F32S, K_I32S, K_U32S */
};

static void put_f32(struct gb *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    gb_u32(b, u);
}

/* A GGUF (version 3 unless v1; little-endian unless be) holding kvs. */
static struct gguf_file *model(const struct kv *kvs, size_t n, bool v1, bool be)
{
    struct gb b = { .be = be };
    gb_header(&b, v1 ? 1 : 3, 0, n);
    for (size_t k = 0; k < n; k++) {
        const struct kv *e = &kvs[k];
        gb_str(&b, e->key);
        switch (e->kind) {
        case K_STR: gb_u32(&b, 8); gb_str(&b, e->s); break;
        case K_U32: gb_u32(&b, 4); gb_u32(&b, (uint32_t)e->i); break;
        case K_I32: gb_u32(&b, 5); gb_u32(&b, (uint32_t)(int32_t)e->i); break;
        case K_BOOL: gb_u32(&b, 7); gb_u8(&b, (uint8_t)e->i); break;
        case K_STRS:
            gb_u32(&b, 9);
            gb_u32(&b, 8);
            gb_count(&b, e->n);
            for (size_t i = 0; i < e->n; i++) {
                size_t len = e->lens ? e->lens[i] : strlen(e->strs[i]);
                gb_count(&b, len);
                gb_put(&b, e->strs[i], len);
            }
            break;
        case K_F32S: case K_I32S: case K_U32S:
            gb_u32(&b, 9);
            gb_u32(&b, e->kind == K_F32S ? 6 : e->kind == K_I32S ? 5 : 4);
            gb_count(&b, e->n);
            for (size_t i = 0; i < e->n; i++) {
                if (e->kind == K_F32S)
                    put_f32(&b, (float)e->nums[i]);
                else
                    gb_u32(&b, (uint32_t)(int32_t)e->nums[i]);
            }
            break;
        }
    }
    struct gguf_file *f;
    struct gguf_diag d;
    assert_int_equal(gguf_parse(b.p, b.len, b.len, &f, &d, NULL), GGUF_OK);
    free(b.p);
    return f;
}

/* Both files' text (NUL-terminated, caller frees), or NULL with the result
 * in *r and the reason in why. */
static char *gen(const struct gguf_file *f, bool config, int *r, char *why, size_t wl)
{
    struct gguf_buf o = { 0 };
    *r = config ? gguf_hf_tokenizer_config_json(f, &o, why, wl)
                : gguf_hf_tokenizer_json(f, &o, why, wl);
    if (*r != 0) {
        gguf_buf_free(&o);
        return NULL;
    }
    assert_false(o.oom);
    assert_true(gguf_buf_putc(&o, '\0'));
    return o.data;
}

static char *ok(const struct gguf_file *f, bool config)
{
    int r;
    char why[256] = "";
    char *t = gen(f, config, &r, why, sizeof why);
    if (r != 0)
        fail_msg("refused: %s", why);
    return t;
}

/* Refused with exit 1 and a one-line reason containing want. */
static void refused(const struct gguf_file *f, const char *want)
{
    for (int config = 0; config < 2; config++) {
        int r;
        char why[256] = "";
        char *t = gen(f, config, &r, why, sizeof why);
        assert_null(t);
        assert_int_equal(r, 1);
        assert_true(why[0] != '\0');
        assert_null(strchr(why, '\n'));
        if (!strstr(why, want))
            fail_msg("reason '%s' does not say '%s'", why, want);
    }
}

static void has(const char *t, const char *want)
{
    assert_non_null(t);
    if (!strstr(t, want))
        fail_msg("'%s' not in:\n%.3000s", want, t ? t : "");
}

static void hasnt(const char *t, const char *want)
{
    if (strstr(t, want))
        fail_msg("'%s' unexpectedly in:\n%.3000s", want, t ? t : "");
}

/* Occurrences of s in t (by hand: a sanitizer's strstr measures the whole
 * text on every call, which would make this quadratic). */
static size_t count(const char *t, const char *s)
{
    size_t n = 0, k = strlen(s);
    for (const char *p = t; *p; p++)
        if (!strncmp(p, s, k)) {
            n++;
            p += k - 1;
        }
    return n;
}

#define KSTR(k, v) { .key = (k), .kind = K_STR, .s = (v) }
#define KU32(k, v) { .key = (k), .kind = K_U32, .i = (v) }
#define KBOOL(k, v) { .key = (k), .kind = K_BOOL, .i = (v) }
#define KSTRS(k, a) { .key = (k), .kind = K_STRS, .strs = (a), .n = sizeof(a) / sizeof *(a) }
#define KNUMS(k, kd, a) { .key = (k), .kind = (kd), .nums = (a), .n = sizeof(a) / sizeof *(a) }
#define N(a) (sizeof(a) / sizeof *(a))

/* Sentencepiece: merges from scores, best first, ties by the pieces'
 * lengths in characters, then by their ids; <s> first; the config. */
static void spm_derived(void **state)
{
    (void)state;
    static const char *const tok[] = { "<unk>", "<s>", "</s>", "a", "b", "ab", "ba", "aba",
                                       "\xc3\xa9", "a\xc3\xa9" };
    static const double sc[] = { 0, 0, 0, 0, 0, -1, -2, -0.5, 0, -3 };
    static const double ty[] = { 2, 3, 3, 1, 1, 1, 1, 1, 1, 1 };
    struct kv kvs[] = {
        KSTR("general.architecture", "llama"), KSTR("tokenizer.ggml.model", "llama"),
        KSTRS("tokenizer.ggml.tokens", tok), KNUMS("tokenizer.ggml.scores", K_F32S, sc),
        KNUMS("tokenizer.ggml.token_type", K_I32S, ty), KU32("tokenizer.ggml.bos_token_id", 1),
        KU32("tokenizer.ggml.eos_token_id", 2), KU32("tokenizer.ggml.unknown_token_id", 0),
        KSTR("tokenizer.chat_template", "{{ bos_token }}\"q\"\n"),
    };
    struct gguf_file *f = model(kvs, N(kvs), false, false);
    char *t = ok(f, false);
    has(t, "\"merges\":[\n[\"ab\",\"a\"],\n[\"a\",\"ba\"],\n[\"a\",\"b\"],\n[\"b\",\"a\"],\n"
           "[\"a\",\"\xc3\xa9\"]]");
    has(t, "\"byte_fallback\":true");
    has(t, "\"type\":\"Metaspace\"");
    has(t, "\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\"");
    has(t, "\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}");
    has(t, "{\"id\":0,\"content\":\"<unk>\"");
    hasnt(t, "\"normalizer\":{");
    free(t);
    t = ok(f, true);
    has(t, "\"add_bos_token\": true");
    has(t, "\"add_eos_token\": false");
    has(t, "\"bos_token\": \"<s>\"");
    has(t, "\"unk_token\": \"<unk>\"");
    has(t, "\"pad_token\": null");
    has(t, "\"chat_template\": \"{{ bos_token }}\\\"q\\\"\\n\"");
    has(t, "\"tokenizer_class\": \"TokenizersBackend\"");
    free(t);
    gguf_close(f);
}

/* Byte-level: respelling, control tokens outside the alphabet skipped,
 * specials not in the vocabulary added past it in transformers' order,
 * the pre-tokenizer's regex by name, GPT-2's for an unknown name. */
static void bpe(void **state)
{
    (void)state;
    static const double ty[] = { 1, 1, 1, 1, 3, 3, 4, 1 };
    static const char *const mg[] = { "a b", "\xc4\xa0 a" };
    static const char *const pres[] = { "qwen2", "gpt-2" };
    for (int p = 0; p < 2; p++) {
        static const char *const tok[] = { "a", "b", "ab", "a b", "<|im_end|>", "<\xef\xbd\x9c" "bos>",
                                            "<think>", "\xc4\xa0" "a", "\xc4\xa0" };
        struct kv kvs[] = {
            KSTR("general.architecture", "qwen2"), KSTR("tokenizer.ggml.model", "gpt2"),
            KSTR("tokenizer.ggml.pre", pres[p]), KSTRS("tokenizer.ggml.tokens", tok),
            KNUMS("tokenizer.ggml.token_type", K_I32S, ty), KSTRS("tokenizer.ggml.merges", mg),
            KU32("tokenizer.ggml.bos_token_id", 5), KU32("tokenizer.ggml.eos_token_id", 4),
            KBOOL("tokenizer.ggml.add_bos_token", 1), KBOOL("tokenizer.ggml.add_eos_token", 1),
        };
        struct gguf_file *f = model(kvs, N(kvs), false, false);
        char *t = ok(f, false);
        has(t, "\n\"a\xc4\xa0" "b\":3");                       /* respelled */
        has(t, "\n\"<\xc3\xaf\xc2\xbd\xc4\xbe" "bos>\":5");     /* bytes of U+FF5C */
        /* added: <|endoftext|> (the builder's default, new), <|im_end|>
         * (control), <think> (user-defined), then bos as spelled (new) */
        has(t, "{\"id\":9,\"content\":\"<|endoftext|>\"");
        has(t, "{\"id\":4,\"content\":\"<|im_end|>\",\"single_word\":false,\"lstrip\":false,"
               "\"rstrip\":false,\"normalized\":false,\"special\":true}");
        has(t, "{\"id\":6,\"content\":\"<think>\",\"single_word\":false,\"lstrip\":false,"
               "\"rstrip\":false,\"normalized\":false,\"special\":false}");
        has(t, "{\"id\":10,\"content\":\"<\xef\xbd\x9c" "bos>\"");
        has(t, "\"ids\":[10]");
        has(t, "\"ids\":[4]");
        has(t, "[{\"SpecialToken\":{\"id\":\"<\xef\xbd\x9c" "bos>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\","
               "\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<|im_end|>\",\"type_id\":0}}]");
        has(t, "\"merges\":[\n[\"a\",\"b\"],\n[\"\xc4\xa0\",\"a\"]]");
        if (p == 0)
            has(t, "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
                   "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}|");
        else
            has(t, "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                   "\"trim_offsets\":true,\"use_regex\":true}");
        free(t);
        t = ok(f, true);
        has(t, "\"bos_token\": \"<\xef\xbd\x9c" "bos>\"");
        has(t, "\"add_eos_token\": true");
        has(t, "\"unk_token\": null");
        free(t);
        gguf_close(f);
    }
}

/* Odd tokens: escaped for JSON, a duplicate listed once under its last id,
 * empty tokens, v1 and big-endian files read alike. */
static void odd_tokens(void **state)
{
    (void)state;
    static const char *const tok[] = { "<unk>", "<s>", "</s>", "\"", "\\", "\n\t\r", "\x01",
                                       "x\0y", "", "dup", "\xf0\x9f\x98\x80", "dup", "\x7f" };
    static const size_t len[] = { 5, 3, 4, 1, 1, 3, 1, 3, 0, 3, 4, 3, 1 };
    static const double sc[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    for (int v = 0; v < 3; v++) {
        struct kv kvs[] = {
            KSTR("tokenizer.ggml.model", "llama"),
            { .key = "tokenizer.ggml.tokens", .kind = K_STRS, .strs = tok, .lens = len, .n = N(tok) },
            KNUMS("tokenizer.ggml.scores", K_F32S, sc),
        };
        struct gguf_file *f = model(kvs, N(kvs), v == 1, v == 2);
        char *t = ok(f, false);
        has(t, "\n\"\\\"\":3");
        has(t, "\n\"\\\\\":4");
        has(t, "\n\"\\n\\t\\r\":5");
        has(t, "\n\"\\u0001\":6");
        has(t, "\n\"x\\u0000y\":7");
        has(t, "\n\"\":8");
        has(t, "\n\"\xf0\x9f\x98\x80\":10");
        has(t, "\n\"dup\":11");
        hasnt(t, "\"dup\":9");
        has(t, "\n\"\x7f\":12");
        assert_int_equal(count(t, "\"dup\""), 1);
        free(t);
        t = ok(f, true);
        has(t, "\"bos_token\": null");
        has(t, "\"add_bos_token\": false");  /* no bos to add */
        free(t);
        gguf_close(f);
    }
}

/* Every way the metadata can be wrong: one line, exit 1, never a crash. */
static void hostile(void **state)
{
    (void)state;
    static const char *const tok[] = { "<unk>", "<s>", "</s>", "a", "b", "ab" };
    static const char *const bad8[] = { "<unk>", "\xff" "bad", "a" };
    static const double sc[] = { 0, 0, 0, 0, 0, -1 };
    static const char *const m_nospace[] = { "ab" };
    static const char *const m_two[] = { "a b c" };
    static const char *const m_oov[] = { "a c" };
    static const char *const m_res[] = { "b a" };
    static const double nums[] = { 1, 2 };
    static const double nan2[] = { 0, 0 };
    static const double nan3[] = { 0, 0, NAN };
    struct {
        struct kv kvs[5];
        size_t n;
        const char *why;
    } cases[] = {
        { { KSTR("general.architecture", "llama") }, 1, "no tokenizer.ggml.model" },
        { { KSTR("tokenizer.ggml.model", "bert"), KSTRS("tokenizer.ggml.tokens", tok) }, 2, "'bert'" },
        { { KU32("tokenizer.ggml.model", 3) }, 1, "not a UTF-8 string" },
        { { KSTR("tokenizer.ggml.model", "llama") }, 1, "no vocabulary" },
        { { KSTR("tokenizer.ggml.model", "llama"), KNUMS("tokenizer.ggml.tokens", K_U32S, nums) }, 2,
          "not an array of strings" },
        { { KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", bad8),
            KNUMS("tokenizer.ggml.scores", K_F32S, sc) }, 3, "element 1 is not valid UTF-8" },
        { { KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", tok) }, 2,
          "neither tokenizer.ggml.merges nor tokenizer.ggml.scores" },
        { { KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", tok),
            KSTR("tokenizer.ggml.scores", "x") }, 3, "scores is not an array of numbers" },
        { { KSTR("tokenizer.ggml.model", "gpt2"), KSTRS("tokenizer.ggml.tokens", tok),
            KSTRS("tokenizer.ggml.merges", m_nospace) }, 3, "not two tokens" },
        { { KSTR("tokenizer.ggml.model", "gpt2"), KSTRS("tokenizer.ggml.tokens", tok),
            KSTRS("tokenizer.ggml.merges", m_two) }, 3, "not two tokens" },
        { { KSTR("tokenizer.ggml.model", "gpt2"), KSTRS("tokenizer.ggml.tokens", tok),
            KSTRS("tokenizer.ggml.merges", m_oov) }, 3, "not in the vocabulary" },
        { { KSTR("tokenizer.ggml.model", "gpt2"), KSTRS("tokenizer.ggml.tokens", tok),
            KSTRS("tokenizer.ggml.merges", m_res) }, 3, "not in the vocabulary" },
        { { KSTR("tokenizer.ggml.model", "gpt2"), KSTRS("tokenizer.ggml.tokens", tok) }, 2,
          "without tokenizer.ggml.merges" },
        { { KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", tok),
            KNUMS("tokenizer.ggml.scores", K_F32S, sc), KU32("tokenizer.ggml.bos_token_id", 6) }, 4,
          "outside the vocabulary" },
        { { KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", tok),
            KNUMS("tokenizer.ggml.scores", K_F32S, sc),
            { .key = "tokenizer.ggml.eos_token_id", .kind = K_I32, .i = -7 } }, 4,
          "outside the vocabulary" },
        { { KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", tok),
            KNUMS("tokenizer.ggml.scores", K_F32S, sc), KSTR("tokenizer.ggml.padding_token_id", "1") }, 4,
          "not an integer" },
        { { KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", tok),
            KNUMS("tokenizer.ggml.scores", K_F32S, sc), KSTR("tokenizer.ggml.add_bos_token", "no") }, 4,
          "not a bool" },
        { { KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", tok),
            KNUMS("tokenizer.ggml.scores", K_F32S, sc), KSTR("tokenizer.chat_template", "\xc0\x80") }, 4,
          "chat_template is not a UTF-8 string" },
        { { KSTR("tokenizer.ggml.model", "t5"), KSTRS("tokenizer.ggml.tokens", tok) }, 2,
          "without tokenizer.ggml.scores" },
        { { KSTR("tokenizer.ggml.model", "t5"), KSTRS("tokenizer.ggml.tokens", tok),
            KNUMS("tokenizer.ggml.scores", K_F32S, nan2) }, 3, "fewer than 3 tokens" },
        { { KSTR("tokenizer.ggml.model", "t5"), KSTRS("tokenizer.ggml.tokens", tok),
            KNUMS("tokenizer.ggml.scores", K_F32S, nan3) }, 3, "score 2 is not a finite number" },
        { { KSTR("tokenizer.ggml.model", "unigram"), KSTRS("tokenizer.ggml.tokens", tok) }, 2,
          "'unigram' is not supported" },
    };
    for (size_t i = 0; i < N(cases); i++) {
        struct gguf_file *f = model(cases[i].kvs, cases[i].n, false, false);
        refused(f, cases[i].why);
        /* a why[] too small is cut, never overrun; none at all is fine */
        struct gguf_buf o = { 0 };
        char small[8];
        memset(small, 'x', sizeof small);
        assert_int_equal(gguf_hf_tokenizer_json(f, &o, small, 4), 1);
        assert_int_equal(small[3], '\0');
        assert_int_equal(small[4], 'x');
        gguf_buf_free(&o);
        assert_int_equal(gguf_hf_tokenizer_json(f, &o, NULL, 0), 1);
        gguf_buf_free(&o);
        gguf_close(f);
    }
    /* a negative id counts from the end, as a Python list index does */
    struct kv neg[] = {
        KSTR("tokenizer.ggml.model", "llama"), KSTRS("tokenizer.ggml.tokens", tok),
        KNUMS("tokenizer.ggml.scores", K_F32S, sc),
        { .key = "tokenizer.ggml.eos_token_id", .kind = K_I32, .i = -1 },
    };
    struct gguf_file *f = model(neg, N(neg), false, false);
    char *t = ok(f, true);
    has(t, "\"eos_token\": \"ab\"");
    free(t);
    gguf_close(f);
}

/* Sizes: an empty vocabulary, a megabyte token (deriving merges is linear
 * in its bytes), and a vocabulary of every run of 'a' up to 300 (every
 * split of each is a merge: 44850 of them). */
static void sizes(void **state)
{
    (void)state;
    struct kv empty[] = {
        KSTR("tokenizer.ggml.model", "llama"),
        { .key = "tokenizer.ggml.tokens", .kind = K_STRS, .n = 0 },
        { .key = "tokenizer.ggml.scores", .kind = K_F32S, .n = 0 },
    };
    struct gguf_file *f = model(empty, N(empty), false, false);
    char *t = ok(f, false);
    has(t, "\"vocab\":{},\"merges\":[]");
    has(t, "{\"id\":0,\"content\":\"<s>\"");     /* the builder's defaults, added */
    has(t, "{\"id\":2,\"content\":\"<unk>\"");
    free(t);
    gguf_close(f);

    size_t big = 1 << 20;
    char *mb = malloc(big);
    assert_non_null(mb);
    memset(mb, 'a', big);
    const char *tok[] = { "a", mb, "aa" };
    size_t len[] = { 1, big, 2 };
    double sc[] = { 0, -1, -2 };
    struct kv kvs[] = {
        KSTR("tokenizer.ggml.model", "llama"),
        { .key = "tokenizer.ggml.tokens", .kind = K_STRS, .strs = tok, .lens = len, .n = 3 },
        { .key = "tokenizer.ggml.scores", .kind = K_F32S, .nums = sc, .n = 3 },
    };
    f = model(kvs, N(kvs), false, false);
    t = ok(f, false);
    /* splits of the long token: a + (2^20-1 a's) no, (2^20-2 a's) + aa no,
     * ...: none; "aa" -> a + a */
    has(t, "\"merges\":[\n[\"a\",\"a\"]]");
    free(t);
    gguf_close(f);
    free(mb);

    enum { RUNS = 300 };
    char *runs[RUNS];
    double rs[RUNS];
    for (int i = 0; i < RUNS; i++) {
        runs[i] = malloc(i + 2);
        memset(runs[i], 'a', i + 1);
        runs[i][i + 1] = '\0';
        rs[i] = -i;
    }
    struct kv rk[] = {
        KSTR("tokenizer.ggml.model", "llama"),
        { .key = "tokenizer.ggml.tokens", .kind = K_STRS, .strs = (const char *const *)runs, .n = RUNS },
        { .key = "tokenizer.ggml.scores", .kind = K_F32S, .nums = rs, .n = RUNS },
    };
    f = model(rk, N(rk), false, false);
    t = ok(f, false);
    assert_int_equal(count(t, "\n[\""), RUNS * (RUNS - 1) / 2);
    /* "aaa" (score -2): the longer left piece first */
    has(t, "\n[\"a\",\"a\"],\n[\"aa\",\"a\"],\n[\"a\",\"aa\"],\n[\"aaa\",\"a\"]");
    free(t);
    gguf_close(f);
    for (int i = 0; i < RUNS; i++)
        free(runs[i]);
}

/* gemma-family: tokens of spaces respelled with "▁" (any whitespace with a
 * space in it), merges by place in the file (no scores needed), Gemma's
 * specials and pipeline, "<mask>" named in the config; "gemma4" keeps its
 * spelling, merges from scores, and adds no bos. */
static void gemma(void **state)
{
    (void)state;
    static const char *const tok[] = { "<pad>", "<eos>", "<bos>", "<unk>", "  ", "\xe2\x96\x81",
                                       "\xe2\x96\x81\xe2\x96\x81", " \n", "\n", "a", "\xe2\x96\x81" "a" };
    static const double sc[] = { 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1 };
    for (int g4 = 0; g4 < 2; g4++) {
        struct kv kvs[] = {
            KSTR("general.architecture", "gemma3"), KSTR("tokenizer.ggml.model", g4 ? "gemma4" : "llama"),
            KSTRS("tokenizer.ggml.tokens", tok), KU32("tokenizer.ggml.bos_token_id", 2),
            KNUMS("tokenizer.ggml.scores", K_F32S, sc),
        };
        struct gguf_file *f = model(kvs, N(kvs) - (g4 ? 0 : 1), false, false);
        char *t = ok(f, false);
        has(t, "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"}");
        has(t, "\"behavior\":\"MergedWithPrevious\"");
        has(t, "\"unk_token\":\"<unk>\"");
        /* a default, new: its id is the count of distinct spellings, as
         * the tokenizers library counts (9 when respelled: it then shares
         * "a"'s id, as it does in transformers) */
        has(t, g4 ? "{\"id\":11,\"content\":\"<mask>\"" : "{\"id\":9,\"content\":\"<mask>\"");
        if (!g4) {
            /* "  " and "▁▁" both spell ▁▁: the later one keeps it; " \n" too */
            has(t, "\n\"\xe2\x96\x81\xe2\x96\x81\":7");
            hasnt(t, "\"  \":");
            /* by place (the last one of a spelling): ▁▁ (7) splits into
             * ▁ + ▁, "▁a" (10) after it */
            has(t, "\"merges\":[\n[\"\xe2\x96\x81\",\"\xe2\x96\x81\"],\n[\"\xe2\x96\x81\",\"a\"]]");
            has(t, "\"single\":[{\"SpecialToken\":{\"id\":\"<bos>\"");
        } else {
            has(t, "\n\"  \":4");
            has(t, "\"single\":[{\"Sequence\"");
        }
        free(t);
        t = ok(f, true);
        has(t, "\"mask_token\": \"<mask>\"");
        has(t, g4 ? "\"add_bos_token\": false" : "\"add_bos_token\": true");
        free(t);
        gguf_close(f);
    }
}

/* t5: a unigram model of the (token, score) pairs as far as the scores go,
 * the first 100 "[PADn]" tokens renamed to sentinels (last first), the
 * sentinels added as special tokens and named in the config, no bos. */
static void t5(void **state)
{
    (void)state;
    static const char *const tok[] = { "<pad>", "</s>", "<unk>", "\xe2\x96\x81" "a", "[PAD4]", "[PAD5]",
                                       "[PADx]", "extra" };
    static const double sc[] = { 0, 0, 0, -1.5, 0, 0, 0.1 };
    struct kv kvs[] = {
        KSTR("general.architecture", "t5"), KSTR("tokenizer.ggml.model", "t5"),
        KSTRS("tokenizer.ggml.tokens", tok), KNUMS("tokenizer.ggml.scores", K_F32S, sc),
        KU32("tokenizer.ggml.eos_token_id", 1), KBOOL("tokenizer.ggml.add_eos_token", 1),
    };
    struct gguf_file *f = model(kvs, N(kvs), false, false);
    char *t = ok(f, false);
    has(t, "\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"byte_fallback\":false,\"vocab\":[\n"
           "[\"<pad>\",0],\n[\"</s>\",0],\n[\"<unk>\",0],\n[\"\xe2\x96\x81" "a\",-1.5],\n"
           "[\"<extra_id_99>\",0],\n[\"<extra_id_98>\",0],\n[\"[PADx]\",0.10000000149011612]]}}");
    hasnt(t, "\"extra\"");                           /* past the scores */
    has(t, "{\"id\":4,\"content\":\"<extra_id_99>\"");
    has(t, "{\"id\":7,\"content\":\"<extra_id_0>\"");  /* new: after the 7 entries */
    has(t, "\"single\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"</s>\"");
    has(t, "\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"}");
    free(t);
    t = ok(f, true);
    has(t, "\"extra_special_tokens\": [\"<extra_id_0>\", \"<extra_id_1>\"");
    has(t, "\"add_bos_token\": false");
    free(t);
    gguf_close(f);
}

/* phi3: the prefix space from a normalizer, no pre-tokenizer. */
static void phi3(void **state)
{
    (void)state;
    static const char *const tok[] = { "<unk>", "<s>", "</s>", "a" };
    static const double sc[] = { 0, 0, 0, 0 };
    struct kv kvs[] = {
        KSTR("general.architecture", "phi3"), KSTR("tokenizer.ggml.model", "llama"),
        KSTRS("tokenizer.ggml.tokens", tok), KNUMS("tokenizer.ggml.scores", K_F32S, sc),
        KBOOL("tokenizer.ggml.add_bos_token", 0),
    };
    struct gguf_file *f = model(kvs, N(kvs), false, false);
    char *t = ok(f, false);
    has(t, "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\"");
    has(t, "\"pre_tokenizer\":null");
    has(t, "\"single\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]");
    free(t);
    gguf_close(f);
}

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* Random vocabularies of short tokens over a small alphabet (so pieces and
 * merges often exist; now and then a byte that is not UTF-8, empty tokens,
 * duplicates), merges that split a token (their pieces mostly added to the
 * vocabulary), random types, special ids and flags: every run either
 * refuses in one line or writes both files; never a crash (ASan/UBSan
 * builds check the memory).  A fixed seed: the same vocabularies every run. */
static void random_vocabularies(void **state)
{
    (void)state;
    static const char *const units[] = { "a", "b", " ", "\xc3\xa9", "\xe2\x96\x81", "<", ">", "\xff" };
    static const char *const models[] = { "llama", "gpt2", "gemma4", "t5" };
    static const char *const archs[] = { "llama", "gemma2", "phi3", "qwen2" };
    uint64_t x = 0x9e3779b97f4a7c15u;
    enum { MAXT = 30, MAXU = 4 };
    char store[3 * MAXT][MAXU * 3 + 1], mstore[MAXT][2 * MAXU * 3 + 2];
    const char *tok[3 * MAXT], *mg[MAXT];
    size_t tlen[3 * MAXT], mlen[MAXT], cut[3 * MAXT];
    double sc[3 * MAXT], ty[3 * MAXT];
    int done = 0, refusals = 0;
    for (int round = 0; round < 3000; round++) {
        size_t n = rnd(&x) % MAXT, nm = 0;
        for (size_t i = 0; i < n; i++) {
            size_t nu = rnd(&x) % (MAXU + 1);
            tlen[i] = 0;
            cut[i] = 0;
            for (size_t k = 0; k < nu; k++) {
                size_t span = rnd(&x) % 50 ? 7 : 8;   /* now and then 0xff */
                const char *u = units[rnd(&x) % span];
                if (k == nu / 2)
                    cut[i] = tlen[i];
                memcpy(store[i] + tlen[i], u, strlen(u));
                tlen[i] += strlen(u);
            }
        }
        size_t base = n;
        for (size_t i = 0; i < base && nm < MAXT; i++) {
            if (cut[i] == 0 || rnd(&x) % 2)
                continue;
            /* the merge "LEFT RIGHT" of token i, and (mostly) its pieces */
            memcpy(mstore[nm], store[i], cut[i]);
            mstore[nm][cut[i]] = ' ';
            memcpy(mstore[nm] + cut[i] + 1, store[i] + cut[i], tlen[i] - cut[i]);
            mlen[nm] = tlen[i] + 1;
            mg[nm] = mstore[nm];
            nm++;
            if (rnd(&x) % 8 && n + 2 <= 3 * MAXT) {
                memcpy(store[n], store[i], cut[i]);
                tlen[n++] = cut[i];
                memcpy(store[n], store[i] + cut[i], tlen[i] - cut[i]);
                tlen[n] = tlen[i] - cut[i];
                n++;
            }
        }
        for (size_t i = 0; i < n; i++) {
            tok[i] = store[i];
            sc[i] = (double)(rnd(&x) % 7) - 3;
            ty[i] = (double)(rnd(&x) % 7);
        }
        /* (drawn one by one: the order of an initializer's expressions is
         * unspecified) */
        const char *arch = archs[rnd(&x) % 4], *mod = models[rnd(&x) % 4];
        size_t nsc = rnd(&x) % (n + 1), nty = rnd(&x) % (n + 1);
        int64_t add_eos = (int64_t)(rnd(&x) % 2);
        int64_t bos = (int64_t)(rnd(&x) % (n + 1)) - 1, eos = (int64_t)(rnd(&x) % (n + 1)) - 1;
        struct kv kvs[] = {
            KSTR("general.architecture", arch),
            KSTR("tokenizer.ggml.model", mod),
            { .key = "tokenizer.ggml.tokens", .kind = K_STRS, .strs = tok, .lens = tlen, .n = n },
            { .key = "tokenizer.ggml.scores", .kind = K_F32S, .nums = sc, .n = nsc },
            { .key = "tokenizer.ggml.token_type", .kind = K_I32S, .nums = ty, .n = nty },
            KBOOL("tokenizer.ggml.add_eos_token", add_eos),
            { .key = "tokenizer.ggml.bos_token_id", .kind = K_I32, .i = bos },
            { .key = "tokenizer.ggml.eos_token_id", .kind = K_I32, .i = eos },
            { .key = "tokenizer.ggml.merges", .kind = K_STRS, .strs = mg, .lens = mlen, .n = nm },
        };
        /* with or without merges, special ids */
        size_t nk = rnd(&x) % 3 ? N(kvs) : N(kvs) - 1 - rnd(&x) % 3;
        bool v1 = rnd(&x) % 5 == 0, be = rnd(&x) % 5 == 0;
        struct gguf_file *f = model(kvs, nk, v1, be);
        for (int config = 0; config < 2; config++) {
            int r;
            char why[256] = "";
            char *t = gen(f, config, &r, why, sizeof why);
            assert_true(r == 0 || r == 1);
            if (r == 0) {
                assert_non_null(t);
                assert_int_equal(t[strlen(t) - 1], '\n');
                done++;
            } else {
                assert_true(why[0] != '\0');
                assert_null(strchr(why, '\n'));
                refusals++;
            }
            free(t);
        }
        gguf_close(f);
    }
    print_message("%d written, %d refused\n", done, refusals);
    /* both outcomes were seen often */
    assert_true(done > 500);
    assert_true(refusals > 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spm_derived), cmocka_unit_test(bpe), cmocka_unit_test(odd_tokens),
        cmocka_unit_test(hostile), cmocka_unit_test(sizes), cmocka_unit_test(phi3),
        cmocka_unit_test(gemma), cmocka_unit_test(t5), cmocka_unit_test(random_vocabularies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

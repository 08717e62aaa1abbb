/*
 * tests/unit/test_hf.c — the Hugging Face folder (gguf/hf.h): config.json
 * and generation_config.json of handmade headers, the tensor map (names,
 * shapes, transforms, what is left out), the byte ranges of llama's Q/K
 * rows and of joined experts against the permutation written out, and
 * what has no HF view (an unknown architecture, a tensor of an odd shape,
 * hostile block numbers), hf/model.safetensors too large (EFBIG).  tests/integration/test_hf.py loads the folder
 * with transformers itself.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gb.h"
#include "gguf/diag.h"
#include "gguf/gguf.h"
#include "gguf/hf.h"
#include "gguf/types.h"

static void gb_kv_f32(struct gb *b, const char *k, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    gb_str(b, k);
    gb_u32(b, 6);
    gb_u32(b, u);
}

struct tspec {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[4];
    uint32_t type;
};

/* A header with kvs written by kv() and the tensors of ts (no data). */
static struct gguf_file *model(const char *arch, const char *name, const struct tspec *ts,
                               unsigned nt, uint32_t heads, uint32_t kv_heads)
{
    struct gb b = { 0 };
    gb_header(&b, 3, nt, 7);
    gb_kv_str(&b, "general.architecture", arch);
    gb_kv_str(&b, "general.name", name);
    char k[64];
    snprintf(k, sizeof k, "%s.block_count", arch);
    gb_kv_u32(&b, k, 2);
    snprintf(k, sizeof k, "%s.attention.head_count", arch);
    gb_kv_u32(&b, k, heads);
    snprintf(k, sizeof k, "%s.attention.head_count_kv", arch);
    gb_kv_u32(&b, k, kv_heads);
    snprintf(k, sizeof k, "%s.attention.layer_norm_rms_epsilon", arch);
    gb_kv_f32(&b, k, 1e-5f);
    gb_kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    uint64_t off = 0;
    for (unsigned i = 0; i < nt; i++) {
        gb_tensor(&b, ts[i].name, ts[i].n_dims, ts[i].ne, ts[i].type, off);
        uint64_t n = 1;
        for (unsigned d = 0; d < ts[i].n_dims; d++)
            n *= ts[i].ne[d];
        off += (n * (ts[i].type == GGML_T_F16 ? 2 : 4) + 31) / 32 * 32;
    }
    gb_pad(&b, 32);
    size_t hl = b.len;
    for (uint64_t i = 0; i < off; i++)
        gb_u8(&b, 0);
    struct gguf_file *gf = NULL;
    struct gguf_diag d;
    assert_int_equal(gguf_parse(b.p, b.len, b.len, &gf, &d, NULL), GGUF_OK);
    (void)hl;
    free(b.p);
    return gf;
}

static void get(void *ctx, uint64_t i, struct gguf_st_in *out)
{
    const struct gguf_file *gf = ctx;
    const struct gguf_tensor *t = &gf->tensors[i];
    out->name = (const char *)gf->hdr + t->name_off;
    out->name_len = t->name_len;
    out->t = t;
    out->big_endian = false;
    out->has_f32 = true;
}

static const struct gguf_hf_tensor *by_name(const struct gguf_hf *hf, const char *name)
{
    for (uint64_t i = 0; i < hf->n; i++)
        if (!strcmp(hf->t[i].name, name))
            return &hf->t[i];
    return NULL;
}

static bool has(const struct gguf_buf *b, const char *s)
{
    return b->data && memmem(b->data, b->len, s, strlen(s)) != NULL;
}

static void test_llama(void **state)
{
    (void)state;
    /* 4 heads of 8 rows (dim 4), 2 KV heads; ne[0] = 16 */
    const struct tspec ts[] = {
        { "token_embd.weight", 2, { 16, 50 }, GGML_T_F16 },
        { "blk.0.attn_q.weight", 2, { 16, 32 }, GGML_T_F16 },
        { "blk.0.attn_k.weight", 2, { 16, 16 }, GGML_T_Q8_0 },
        { "blk.1.attn_norm.weight", 1, { 16 }, GGML_T_F32 },
        { "rope_freqs.weight", 1, { 4 }, GGML_T_F32 },
        { "blk.01.attn_v.weight", 2, { 16, 16 }, GGML_T_F32 },
        { "blk.2.attn_v.weight", 2, { 16, 16 }, GGML_T_F32 },
        { "blk.18446744073709551617.attn_v.weight", 2, { 16, 16 }, GGML_T_F32 },
    };
    struct gguf_file *gf = model("llama", "tiny", ts, 8, 4, 2);
    struct gguf_hf hf;
    struct gguf_diag d;
    assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_OK);
    assert_string_equal(hf.model_type, "llama");
    /* rope_freqs, blk.01 (not gguf-py's spelling) and blocks past the
     * count have no HF parameter */
    assert_int_equal(hf.n, 4);
    assert_true(has(&hf.config, "\"model_type\": \"llama\""));
    assert_true(has(&hf.config, "\"tie_word_embeddings\": true"));
    assert_true(has(&hf.config, "\"num_key_value_heads\": 2"));
    assert_true(has(&hf.config, "\"rms_norm_eps\": 9.9999997473787516e-06"));
    assert_true(has(&hf.config, "\"eos_token_id\": 2"));
    assert_true(has(&hf.config, "\"vocab_size\": 50"));   /* token_embd's rows */
    assert_true(has(&hf.config, "\"architectures\": [\"LlamaForCausalLM\"]"));
    assert_true(has(&hf.config, "\"_model_name_or_path\": \"tiny\""));
    assert_true(has(&hf.generation, "\"eos_token_id\": 2"));
    assert_false(has(&hf.generation, "bos_token_id"));

    const struct gguf_hf_tensor *e = by_name(&hf, "model.embed_tokens.weight");
    assert_non_null(e);
    assert_int_equal(e->op, GGUF_HF_COPY);
    assert_false(e->f32);                 /* F16: its bytes */
    assert_int_equal(e->shape[0], 50);
    assert_int_equal(e->shape[1], 16);

    /* Q: HF row r of (head, half j, i) comes from GGUF row (head, i, j) */
    const struct gguf_hf_tensor *q = by_name(&hf, "model.layers.0.self_attn.q_proj.weight");
    assert_non_null(q);
    assert_int_equal(q->op, GGUF_HF_QK_ROWS);
    assert_int_equal(q->heads, 4);
    assert_false(q->f32);
    const uint64_t row = 16 * 2, dim = 4;
    for (uint64_t r = 0; r < 32; r++) {
        uint64_t h = r / (2 * dim), j = (r % (2 * dim)) / dim, i = r % dim;
        struct gguf_hf_seg g;
        gguf_hf_seg(q, r * row + 3, 1000, &g);
        assert_int_equal(g.src, 0);
        assert_int_equal(g.off, (h * 2 * dim + 2 * i + j) * row + 3);
        assert_int_equal(g.len, row - 3);      /* cut at the row's end */
    }
    /* K with the KV heads, served as F32 (a Q8_0 tensor) */
    const struct gguf_hf_tensor *k = by_name(&hf, "model.layers.0.self_attn.k_proj.weight");
    assert_non_null(k);
    assert_int_equal(k->heads, 2);
    assert_true(k->f32);
    struct gguf_hf_seg g;
    gguf_hf_seg(k, 4 * 16 * 4, 16 * 4, &g);    /* HF row 4 = head 0, j 1, i 0 */
    assert_int_equal(g.off, 1 * 16 * 4);
    assert_non_null(by_name(&hf, "model.layers.1.input_layernorm.weight"));

    /* the layout: HF names and shapes, F16 kept, Q8_0 as F32 */
    struct gguf_st_layout l;
    assert_int_equal(gguf_hf_safetensors(gf, &hf, &l, &d), GGUF_OK);
    assert_int_equal(l.n_span, 4);
    assert_int_equal(l.hdr.len % 64, 0);       /* the data 64-byte aligned */
    assert_true(has(&l.hdr, "\"model.layers.0.self_attn.k_proj.weight\":{\"dtype\":\"F32\","
                            "\"shape\":[16,16]"));
    assert_true(has(&l.hdr, "\"model.embed_tokens.weight\":{\"dtype\":\"F16\","
                            "\"shape\":[50,16]"));
    gguf_st_free(&l);
    gguf_hf_free(&hf);
    gguf_close(gf);
}

static void test_mistral_gemma(void **state)
{
    (void)state;
    const struct tspec ts[] = { { "output.weight", 2, { 16, 50 }, GGML_T_F32 },
                                { "blk.0.post_ffw_norm.weight", 1, { 16 }, GGML_T_F32 },
                                { "blk.0.attn_q.weight", 2, { 16, 32 }, GGML_T_F32 } };
    struct gguf_file *gf = model("llama", "mistral", ts, 3, 4, 2);
    struct gguf_hf hf;
    struct gguf_diag d;
    assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_OK);
    assert_string_equal(hf.model_type, "mistral");
    assert_true(has(&hf.config, "\"tie_word_embeddings\": false"));
    assert_true(has(&hf.config, "MistralForCausalLM"));
    assert_non_null(by_name(&hf, "lm_head.weight"));
    assert_null(by_name(&hf, "model.layers.0.post_feedforward_layernorm.weight"));
    gguf_hf_free(&hf);
    gguf_close(gf);

    gf = model("gemma3", "g", ts, 3, 4, 2);
    assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_OK);
    assert_string_equal(hf.model_type, "gemma3_text");
    const struct gguf_hf_tensor *n = by_name(&hf, "model.layers.0.post_feedforward_layernorm.weight");
    assert_non_null(n);
    assert_int_equal(n->op, GGUF_HF_MINUS1);
    assert_true(n->f32);
    /* gemma's Q rows are not permuted */
    assert_int_equal(by_name(&hf, "model.layers.0.self_attn.q_proj.weight")->op, GGUF_HF_COPY);
    gguf_hf_free(&hf);
    gguf_close(gf);
}

static void test_moe(void **state)
{
    (void)state;
    /* E 3 experts of F 4 rows of H 8 */
    const struct tspec ts[] = {
        { "blk.0.ffn_gate_exps.weight", 3, { 8, 4, 3 }, GGML_T_F32 },
        { "blk.0.ffn_up_exps.weight", 3, { 8, 4, 3 }, GGML_T_F32 },
        { "blk.0.ffn_down_exps.weight", 3, { 4, 8, 3 }, GGML_T_F32 },
        { "blk.0.ffn_gate_inp_shexp.weight", 1, { 8 }, GGML_T_F32 },
    };
    struct gguf_file *gf = model("qwen2moe", "m", ts, 4, 2, 2);
    struct gguf_hf hf;
    struct gguf_diag d;
    assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_OK);
    assert_string_equal(hf.model_type, "qwen2_moe");
    assert_int_equal(hf.n, 3);
    const struct gguf_hf_tensor *j = by_name(&hf, "model.layers.0.mlp.experts.gate_up_proj");
    assert_non_null(j);
    assert_int_equal(j->op, GGUF_HF_JOIN);
    assert_int_equal(j->n_dims, 3);
    assert_int_equal(j->shape[0], 3);
    assert_int_equal(j->shape[1], 8);
    assert_int_equal(j->shape[2], 8);
    /* per expert: 4 rows of gate (128 bytes), then 4 of up */
    const uint64_t blk = 4 * 8 * 4;
    for (uint64_t e = 0; e < 3; e++)
        for (unsigned s = 0; s < 2; s++) {
            struct gguf_hf_seg g;
            gguf_hf_seg(j, (2 * e + s) * blk + 8, 10000, &g);
            assert_int_equal(g.src, s);
            assert_int_equal(g.off, e * blk + 8);
            assert_int_equal(g.len, blk - 8);
        }
    const struct gguf_hf_tensor *sg = by_name(&hf, "model.layers.0.mlp.shared_expert_gate.weight");
    assert_non_null(sg);
    assert_int_equal(sg->n_dims, 2);
    assert_int_equal(sg->shape[0], 1);
    assert_int_equal(sg->shape[1], 8);
    assert_non_null(by_name(&hf, "model.layers.0.mlp.experts.down_proj"));
    gguf_hf_free(&hf);
    gguf_close(gf);

    /* gate without its up: no HF view, said in one line */
    gf = model("qwen3moe", "m", ts, 1, 2, 2);
    assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_E_NOENT);
    assert_non_null(strstr(d.msg, "blk.0.ffn_gate_exps.weight"));
    assert_null(strchr(d.msg, '\n'));
    gguf_hf_free(&hf);
    gguf_close(gf);
}

static void test_refused(void **state)
{
    (void)state;
    const struct tspec ts[] = { { "blk.0.attn_q.weight", 2, { 16, 30 }, GGML_T_F32 } };
    struct gguf_hf hf;
    struct gguf_diag d;
    struct gguf_file *gf = model("bert", "b", ts, 1, 4, 4);
    assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_E_NOENT);
    assert_non_null(strstr(d.msg, "architecture 'bert'"));
    gguf_hf_free(&hf);
    gguf_close(gf);
    /* 30 rows are not whole pairs of 4 heads: refused, not served wrong */
    gf = model("llama", "b", ts, 1, 4, 4);
    assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_E_NOENT);
    assert_non_null(strstr(d.msg, "blk.0.attn_q.weight"));
    gguf_hf_free(&hf);
    gguf_close(gf);
    /* a head count of 0: no permutation (the loader skips it too), no
     * division by zero */
    gf = model("llama", "b", ts, 1, 0, 0);
    assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_OK);
    assert_int_equal(hf.t[0].op, GGUF_HF_COPY);
    gguf_hf_free(&hf);
    gguf_close(gf);
}

/* hf/model.safetensors of a tensor whose f32 view is 2^64 bytes (a
 * header claiming a file of 4.9e18 bytes: a sparse file may be that
 * large): refused as too large, EFBIG at the errno edge core/state.c maps
 * it through (gguf_err_errno_made), and its name said; what fits is laid
 * out.  (The layout's other errors: GGUF_E_NOMEM, ENOMEM; GGUF_E_RANGE,
 * EIO, cannot come from a parsed file: test_safetensors.c.) */
static void test_too_large(void **state)
{
    (void)state;
    for (int huge = 0; huge < 2; huge++) {
        uint64_t rows = huge ? (uint64_t)1 << 57 : 4;   /* Q8_0: 34 bytes a row of 32 */
        struct gb b = { 0 };
        gb_header(&b, 3, 1, 2);
        gb_kv_str(&b, "general.architecture", "llama");
        gb_kv_u32(&b, "llama.block_count", 1);
        const uint64_t ne[2] = { 32, rows };
        gb_tensor(&b, "token_embd.weight", 2, ne, GGML_T_Q8_0, 0);
        gb_pad(&b, 32);
        struct gguf_file *gf = NULL;
        struct gguf_diag d;
        assert_int_equal(gguf_parse(b.p, b.len, b.len + rows * 34, &gf, &d, NULL), GGUF_OK);
        struct gguf_hf hf;
        assert_int_equal(gguf_hf_build(gf, gf->n_tensors, get, gf, &hf, &d), GGUF_OK);
        assert_int_equal(hf.n, 1);
        struct gguf_st_layout l;
        enum gguf_err e = gguf_hf_safetensors(gf, &hf, &l, &d);
        if (huge) {
            assert_int_equal(e, GGUF_E_TOOBIG);
            assert_int_equal(gguf_err_errno_made(e), EFBIG);
            assert_non_null(strstr(d.msg, "model.embed_tokens.weight"));
        } else {
            assert_int_equal(e, GGUF_OK);
            assert_int_equal(l.n_span, 1);
        }
        gguf_st_free(&l);
        gguf_hf_free(&hf);
        gguf_close(gf);
        free(b.p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_mistral_gemma),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_too_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

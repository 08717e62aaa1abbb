/*
 * gguf/hf.h — a model as a Hugging Face model folder (the mount's hf/):
 * config.json, generation_config.json, and what each tensor of
 * hf/model.safetensors is made of.
 *
 * What transformers' own GGUF loader (from_pretrained(dir, gguf_file=...),
 * transformers 5.24: integrations/ggml.py GGUF_CONFIG_MAPPING and
 * modeling_gguf_pytorch_utils.py load_gguf_checkpoint) derives from the
 * metadata, written out, so that from_pretrained(MNT/hf) builds the same
 * model with the same weights:
 *
 *   - architectures: llama (and mistral: a llama file whose general.name is
 *     "mistral"), qwen2, qwen3, qwen2moe, qwen3moe, phi3, gemma2, gemma3,
 *     nemotron, starcoder2, stablelm (use_qkv_bias and use_parallel_residual
 *     from the tensors' names, as the loader sets them).
 *     Any other has no HF view: gguf_hf_build says why in one line.
 *   - config.json: the mapped keys (GGUF_CONFIG_MAPPING of the
 *     architecture, general.architecture as model_type, the tokenizer's
 *     bos/eos/unk/pad ids), a one-element array as its element, as the
 *     loader does; tie_word_embeddings when there is no output.weight;
 *     vocab_size from tokenizer.ggml.tokens when the architecture has no
 *     vocab_size key (else token_embd's rows); the fix-ups (mistral,
 *     qwen2_moe, qwen3_moe, gemma3_text, qwen3_moe's norm_topk_prob); then
 *     "architectures" (the CausalLM class) and "torch_dtype": "float32"
 *     (the loader's own dtype: every tensor it makes is float32, and the
 *     F16/BF16 tensors served as bytes widen to it exactly).
 *   - generation_config.json: bos_token_id, eos_token_id, pad_token_id as
 *     the tokenizer keys give them (the ones present).
 *   - the tensors: GGUF names mapped to HF names (gguf-py's TensorNameMap
 *     inverted for these architectures; GGUF tensors with no HF parameter,
 *     rope_freqs and kin, are left out as the loader leaves them), with
 *     what the loader undoes: llama's Q/K rows un-permuted (K with the KV
 *     head count), gemma's and nemotron's norms minus 1 (in float32), the MoE experts'
 *     gate and up joined into gate_up_proj [E, 2F, H] (gate first) and
 *     qwen2moe's shared expert gate as [1, H].
 *
 * How a tensor's bytes are made (gguf_hf_seg): from one or two GGUF
 * tensors, in their raw bytes (F32, F16 or BF16 of a little-endian file,
 * with no value changed: spliced) or their f32 views (every other type,
 * and every tensor whose values change), by ranges: a row permutation is
 * row ranges of the source, the joined experts alternate between the two
 * sources expert by expert; nothing is copied here.
 *
 * Bounds: one struct gguf_hf_tensor (about 200 bytes) per mapped tensor,
 * allocated as they are found (a model of another architecture costs
 * nothing), the two JSON texts (proportional to the mapped keys).
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_HF_H
#define GGUF_HF_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "diag.h"
#include "gguf.h"
#include "safetensors.h"

/* The longest HF name made (model.layers.N.mlp.shared_expert.gate_proj.weight
 * with N of 20 digits is 69 bytes). */
#define GGUF_HF_NAME_MAX 96

enum gguf_hf_op {
    GGUF_HF_COPY,      /* the source as it is (a shape change at most) */
    GGUF_HF_QK_ROWS,   /* llama's Q/K permutation undone: rows of heads */
    GGUF_HF_MINUS1,    /* every value minus 1 (gemma's norms) */
    GGUF_HF_JOIN,      /* per expert: src[0]'s block, then src[1]'s */
};

struct gguf_hf_tensor {
    char name[GGUF_HF_NAME_MAX];
    uint32_t name_len;
    uint32_t n_dims;
    uint64_t shape[GGUF_MAX_DIMS];   /* numpy order */
    uint64_t n_elems;
    uint64_t src[2];                 /* the caller's tensor indices */
    unsigned n_src;
    enum gguf_hf_op op;
    uint64_t heads;                  /* GGUF_HF_QK_ROWS: heads of the tensor */
    const struct gguf_tensor *t;     /* src[0]'s info */
    bool big_endian;                 /* of src[0]'s file */
    bool has_f32;                    /* every source has an f32 view */
    bool f32;                        /* served as F32 from the f32 views;
                                        else the sources' raw bytes */
};

struct gguf_hf {
    const char *model_type;          /* "llama", "mistral", "qwen2_moe", ... */
    struct gguf_hf_tensor *t;        /* in the caller's order of src[0] */
    uint64_t n;
    struct gguf_buf config;          /* config.json */
    struct gguf_buf generation;      /* generation_config.json */
};

/*
 * The HF view of a model: meta holds the metadata (a split model's first
 * shard), get gives each of its n tensors (gguf/safetensors.h).  *out is
 * zeroed first; free it with gguf_hf_free, also after a failure.
 * GGUF_OK; GGUF_E_NOENT with diag's message saying why in one line (an
 * architecture transformers cannot load from GGUF, a tensor whose shape
 * is not what the mapping needs); GGUF_E_NOMEM.
 */
enum gguf_err gguf_hf_build(const struct gguf_file *meta, uint64_t n, gguf_st_get get,
                            void *ctx, struct gguf_hf *out, struct gguf_diag *diag);
void gguf_hf_free(struct gguf_hf *hf);

/* hf/model.safetensors' layout (gguf/safetensors.h: its header and spans;
 * span.tensor is an index in hf->t), the header padded to a multiple of 64
 * bytes. */
enum gguf_err gguf_hf_safetensors(const struct gguf_file *meta, const struct gguf_hf *hf,
                                  struct gguf_st_layout *out, struct gguf_diag *diag);

/* Where bytes of an HF tensor come from: len bytes of source src (0 or
 * 1: h->src[src]) at off in its view (its f32 view when h->f32, else its
 * raw bytes). */
struct gguf_hf_seg {
    unsigned src;
    uint64_t off, len;
};

/* The first piece of bytes [in, in + n) of h (n > 0, in + n at most
 * its size): up to where the source stops being contiguous. */
void gguf_hf_seg(const struct gguf_hf_tensor *h, uint64_t in, uint64_t n,
                 struct gguf_hf_seg *out);

/* Bytes of one element as h is served (4 when h->f32). */
unsigned gguf_hf_esize(const struct gguf_hf_tensor *h);

#endif

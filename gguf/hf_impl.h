/*
 * gguf/hf_impl.h — shared between the two files of the Hugging Face
 * folder (hf_config.c: the architectures, config.json and
 * generation_config.json; hf.c: the tensors' names, shapes and bytes).
 * Not for users of the library: see hf.h for what is promised.
 */
#ifndef GGUF_HF_IMPL_H
#define GGUF_HF_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "gguf.h"

enum family { F_LLAMA, F_QWEN2, F_QWEN3, F_PHI3, F_GEMMA, F_MOE, F_NEMOTRON, F_STARCODER2,
              F_STABLELM };

struct keymap {
    const char *gguf, *hf;
};

struct arch {
    const char *gguf;           /* general.architecture */
    const char *model_type;     /* the config's (after the loader's fix-ups) */
    const char *cls;            /* architectures[0] */
    enum family fam;
    const struct keymap *keys;
};

/* The architecture general.architecture names (len bytes at name), as the
 * loader takes it: a llama file whose general.name is "mistral" is its
 * mistral.  NULL when transformers loads no such architecture from GGUF. */
const struct arch *hf_arch_find(const struct gguf_file *meta, const char *name, uint64_t len);

/* The value of key (a C string), first occurrence, or NULL. */
const struct gguf_kv *hf_find(const struct gguf_file *f, const char *key);

/* A string value's bytes (NULL: kv NULL, not a string, or not valid). */
const char *hf_str_val(const struct gguf_file *f, const struct gguf_kv *kv, uint64_t *len);

/* An integer value (a one-element array's too), for the loader's use of
 * it (head counts). */
bool hf_int_val(const struct gguf_file *f, const char *key, int64_t *out);

/* What the loader learns from the tensors' names (stablelm). */
struct seen {
    bool tied;            /* no output.weight */
    bool qkv_bias;        /* a tensor named *attn_{q,k,v}.bias* */
    bool ffn_norm;        /* a tensor named *ffn_norm* */
};

/* config.json of the model f of architecture a into out (out->oom on a
 * failed allocation); vocab_fallback: vocab_size when neither the
 * architecture's key nor tokenizer.ggml.tokens gives it. */
void hf_write_config(const struct gguf_file *f, const struct arch *a, const struct seen *seen,
                     uint64_t vocab_fallback, struct gguf_buf *out);

/* generation_config.json: the tokenizer's bos, eos and pad ids present. */
void hf_write_generation(const struct gguf_file *f, struct gguf_buf *out);

#endif

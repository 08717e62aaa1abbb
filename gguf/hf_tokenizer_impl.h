/*
 * gguf/hf_tokenizer_impl.h — shared between the three files that make
 * tokenizer.json and tokenizer_config.json (hf_tokenizer.c reads and checks
 * the metadata, hf_tokenizer_vocab.c builds the vocabulary, merges and added
 * tokens, hf_tokenizer_json.c writes both files).  Not for users of the
 * library: see hf_tokenizer.h for what is promised.
 *
 * Everything works on one analysis (struct hft).  Strings are views into
 * the parsed header (gf->hdr), which the parser already bounded by the
 * file; every length is still checked against hdr_size before it is used.
 * Functions returning int return 0, 1 when the file is refused (h->why
 * says why), or -1 when out of memory.
 */
#ifndef GGUF_HF_TOKENIZER_IMPL_H
#define GGUF_HF_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "gguf.h"

/* A string: len bytes at p (not NUL-terminated). */
struct sv {
    const char *p;
    uint32_t n;
};

/* ---- a table of strings -> u32, open addressing (hf_tokenizer_vocab.c) --- */

struct ent {
    uint64_t h;
    const char *p;
    uint32_t n;
    uint32_t v;           /* UINT32_MAX: empty */
};

struct tab {
    struct ent *e;
    size_t mask;
};

/* The value of p[0..n) in t, or -1. */
int64_t hft_tab_get(const struct tab *t, const char *p, uint32_t n);

/* ---- the analysis -------------------------------------------------------- */

enum { SP_BOS, SP_EOS, SP_UNK, SP_PAD, SP_N };

struct added {
    struct sv s;
    uint32_t id;
    bool special;
};

struct pair {
    struct sv l, r;
};

struct hft {
    const struct gguf_file *gf;
    char *why;
    size_t whylen;
    bool bpe;             /* gpt2: byte-level; else sentencepiece */
    bool phi3;            /* the prefix space from a normalizer */
    bool gemma;           /* GemmaTokenizer's pipeline */
    bool gemma_outer;     /* a gemma-family architecture: transformers' class
                             for it names "<mask>" its mask token */
    bool t5;              /* unigram (T5Tokenizer) */
    uint32_t n_model;     /* tokens in the model: n, or for t5 as far as
                             the scores go */
    const uint8_t *scores;/* t5: tokenizer.ggml.scores' elements */
    uint8_t scores_t;
    char extra[100][16];  /* t5: "<extra_id_N>" */
    bool gemma_spaces;    /* gemma-family: tokens of spaces respelled with
                             "▁", merges ordered by place in the file */
    const char *split;    /* the pre-tokenizer's regex, or NULL: GPT-2's */
    uint32_t n;           /* tokens */
    struct sv *tok;       /* as the file spells them */
    struct sv *voc;       /* as the vocabulary spells them (respelled: bpe) */
    char *spell;          /* the respelled bytes */
    struct tab vt;        /* voc -> its last index */
    uint32_t vocab_len;   /* distinct strings in voc */
    const uint8_t *types; /* tokenizer.ggml.token_type's elements, or NULL */
    uint64_t n_types;
    uint8_t types_t;
    struct pair *merges;
    size_t n_merges;
    struct added *add;
    size_t n_add, cap_add;
    struct tab at;        /* added content -> index in add */
    int64_t max_added;    /* -1: none */
    bool has_sp[SP_N];
    struct sv sp[SP_N];   /* bos, eos, unk, pad as the file spells them */
    bool add_bos, add_eos;
    bool has_tmpl;
    struct sv tmpl;       /* tokenizer.chat_template */
};

/* Puts the reason a file is refused into h->why; returns 1. */
int hft_refuse(struct hft *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The elements of an array of strings (each checked: inside the header,
 * valid UTF-8), into a new array of views. */
int hft_str_array(struct hft *h, const struct gguf_kv *kv, const char *what, struct sv **out,
                  uint64_t *count);

/* Element of numeric type t at p (validated: fits in the header) as a
 * double. */
double hft_num_at(const struct gguf_enc *e, uint8_t t, const uint8_t *p);

/* ---- the vocabulary (hf_tokenizer_vocab.c) -------------------------------- */

/* h->voc from h->tok: byte-level respelling (gpt2) ... */
int hft_respell(struct hft *h);
/* ... or the gemma family's tokens of spaces as "▁"s. */
int hft_respell_spaces(struct hft *h);
/* h->vt: voc -> the last index spelling it; h->vocab_len. */
int hft_index_vocab(struct hft *h);
/* t5: h->extra, and the "[PADn]" tokens renamed to them in h->voc. */
void hft_t5_sentinels(struct hft *h);
/* h->merges from tokenizer.ggml.merges (kv), each checked. */
int hft_file_merges(struct hft *h, const struct gguf_kv *kv);
/* h->merges derived from the vocabulary and the scores sc (n_sc elements
 * of type st; NULL: by place in the file). */
int hft_derive_merges(struct hft *h, const uint8_t *sc, uint64_t n_sc, uint8_t st);
/* h->add: the added tokens, in transformers' order. */
int hft_add_tokens(struct hft *h);
/* The id a token has now: an added token's, else the model's; -1 if none. */
int64_t hft_id_of(const struct hft *h, struct sv s);

/* ---- the files (hf_tokenizer_json.c): 0, or -1 out of memory -------------- */

int hft_emit_tokenizer(struct gguf_buf *o, const struct hft *h);
int hft_emit_config(struct gguf_buf *o, const struct hft *h);

#endif

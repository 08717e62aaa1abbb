/*
 * gguf/hf_tokenizer.h — a model's tokenizer as Hugging Face files:
 * tokenizer.json (the `tokenizers` library's fast-tokenizer file) and
 * tokenizer_config.json, generated from the GGUF metadata.
 *
 * The reference is transformers' own GGUF path,
 * `AutoTokenizer.from_pretrained(dir, gguf_file=...)` (transformers 5.x,
 * integrations/gguf/gguf_tokenizer_mapping.py and the classes it calls):
 * the files describe the tokenizer that path builds, so that
 * `AutoTokenizer.from_pretrained(folder)` on them gives the same ids, the
 * same added and special tokens and the same decoding.  In particular:
 *
 *   tokenizer.ggml.model "llama" (sentencepiece vocabularies): a BPE model
 *     over the tokens as the file spells them, with byte fallback (the
 *     <0xXX> tokens) and fuse_unk, no unk token in the model; the merges of
 *     tokenizer.ggml.merges when the file has them, else derived from the
 *     vocabulary and tokenizer.ggml.scores as transformers' generate_merges
 *     does (every split of a token into two tokens, best score first, ties
 *     by the lengths of the two pieces in characters, then by their ids);
 *     a Metaspace pre-tokenizer ("▁", prepend to the first word); decoding
 *     "▁" back to spaces, bytes fused, one leading space stripped.  For
 *     general.architecture "phi3" the prefix space comes from a normalizer
 *     instead (as transformers builds it).  For the gemma family (gemma,
 *     gemma2, gemma3) Gemma's pipeline (spaces normalized to "▁", split
 *     after each, unk token "<unk>", no strip when decoding), tokens of
 *     whitespace holding a space stored as spaces respelled as one "▁" per
 *     character, and merges derived by place in the file rather than by
 *     score (transformers' gemma_tokenizer).
 *   tokenizer.ggml.model "gemma4": Gemma's pipeline over the tokens as
 *     spelled, merges from the file or the scores, no bos added.
 *   tokenizer.ggml.model "t5": a unigram model of the (token, score) pairs
 *     as far as both arrays go (unk id 2, scores written to round-trip),
 *     the first 100 tokens named "[PADn]" renamed to the sentinels
 *     "<extra_id_99>" down to "<extra_id_0>"; whitespace split, Metaspace
 *     always prepending; the 100 sentinels added as special tokens (new
 *     ids where the vocabulary lacks them) and named extra_special_tokens
 *     in the config (transformers' unigram_tokenizer and T5Tokenizer).
 *   tokenizer.ggml.model "gpt2" (byte-level BPE): tokens written with
 *     characters outside GPT-2's byte alphabet are respelled byte by byte
 *     into it (as transformers does; such a token then matches only its
 *     bytes); the merges of tokenizer.ggml.merges; a ByteLevel
 *     pre-tokenizer: with the split regex transformers keeps for
 *     tokenizer.ggml.pre (llama3/llama-bpe/dbrx/smaug-bpe and kin, qwen2
 *     and kin, qwen35, tekken, gpt-4o/llama4 and kin), and GPT-2's own
 *     split for any other or no pre-tokenizer name — transformers'
 *     behaviour, not llama.cpp's, for names it does not know.
 *
 *   Added tokens, in the order transformers adds them (which fixes the ids
 *   of those not in the vocabulary): the builder class's defaults ("<s>",
 *   "</s>", "<unk>" for sentencepiece, "<bos>", "<eos>", "<unk>", "<pad>",
 *   "<mask>" for Gemma's, "</s>", "<unk>", "<pad>" and the sentinels for
 *   T5's, "<|endoftext|>" for byte-level; one missing from the vocabulary
 *   gets the next id, counted as the tokenizers library counts: distinct
 *   spellings for BPE, so a vocabulary with duplicates makes it collide as
 *   it does in transformers, entries for unigram), then the tokens
 *   typed CONTROL (3) as special tokens (byte-level: only those spelled in
 *   the byte alphabet), then those typed USER_DEFINED (4) that are in the
 *   vocabulary as plain added tokens, then bos/eos/unk/pad from the
 *   tokenizer.ggml.*_token_id keys as the file spells them.  The
 *   post-processor puts bos first when add_bos_token holds (sentencepiece:
 *   unless tokenizer.ggml.add_bos_token says false), eos last when
 *   add_eos_token does.
 *
 *   tokenizer_config.json: tokenizer_class "TokenizersBackend" (the file is
 *   taken as written, whatever class the model type would pick),
 *   bos/eos/unk/pad_token (and mask_token "<mask>" for a gemma-family
 *   architecture, which transformers' class for it names), add_bos_token,
 *   add_eos_token, clean_up_tokenization_spaces false, and chat_template
 *   from tokenizer.chat_template when present.
 *
 * Refused (return 1, why[] says what in one line; transformers refuses the
 * same files or has no tokenizer for them): no tokenizer.ggml.model or one
 * other than "llama", "gpt2", "gemma4" and "t5"; a unigram vocabulary
 * without scores, with a score that is not finite or with fewer than 3
 * tokens; a byte-level vocabulary without merges
 * (transformers would derive them: not generated); no tokenizer.ggml.tokens,
 * or not an array of strings; a token, merge, pre-tokenizer name or chat
 * template that is not valid UTF-8 (transformers decodes every string
 * strictly and fails on the file); a merge that is not two tokens separated
 * by one space, or whose pieces or result are not in the vocabulary (the
 * tokenizers library refuses such a merge); a sentencepiece vocabulary with
 * neither merges nor scores; a special token id that is not an integer or
 * is outside the vocabulary (a negative one counts from the end, as a
 * Python list index does); a flag that is not a bool or an integer; 2^31
 * tokens or more.

 * Keys are looked up by their first occurrence, as everywhere in gguffs
 * (transformers' reader takes the last of duplicated keys).  Version 1 and
 * big-endian files, which transformers' reader refuses, are read as the
 * rest of gguffs reads them.
 *
 * JSON strings are escaped for any bytes: '"', '\\' and control characters
 * escaped, valid UTF-8 kept as is (every string written was checked to be
 * valid UTF-8 first; an invalid sequence would be written as U+FFFD).
 *
 * Work and memory are proportional to the size of the metadata: a few
 * dozen bytes per token and per merge, every length and count checked
 * against the header before use; deriving merges costs time linear in the
 * vocabulary's bytes (substrings are found by hash, not copied).  Each
 * call does the whole analysis (both files refuse alike): about 50 ms for
 * a 32000-token sentencepiece vocabulary whose merges are derived.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_HF_TOKENIZER_H
#define GGUF_HF_TOKENIZER_H

#include <stddef.h>

#include "buf.h"
#include "gguf.h"

/* Fills *out (appending to an empty gguf_buf) with the file's text.
 * 0: done; 1: this model's tokenizer cannot be expressed (unknown
 * tokenizer.ggml.model or pre-tokenizer, no vocabulary): why[] says so
 * in one line, the file is then absent from hf/; -1: out of memory.
 * On 1 and -1 out may hold a partial text: the caller discards it.
 * (A pre-tokenizer name transformers does not know is not refused: its
 * GGUF path then splits as GPT-2 does, and so do these files.)  Both
 * functions refuse the same models with the same reason. */
int gguf_hf_tokenizer_json(const struct gguf_file *gf, struct gguf_buf *out,
                           char *why, size_t whylen);
int gguf_hf_tokenizer_config_json(const struct gguf_file *gf, struct gguf_buf *out,
                                  char *why, size_t whylen);

#endif

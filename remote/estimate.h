/*
 * remote/estimate.h — where a GGUF header probably ends, from its first
 * bytes: so that a remote model's header is fetched as one bounded range
 * (remote/source.h) instead of an open-ended one that lets the server fill
 * its socket buffers past the header.
 *
 * Pure: no libcurl, no allocation, no gguf/ — the bytes are hostile (they
 * come from a server) and are only walked, every count checked against the
 * bytes there are and the file's size, with saturating arithmetic; the walk
 * is linear in n.  tests/fuzz/fuzz_estimate.c runs it on arbitrary bytes.
 */
#ifndef REMOTE_ESTIMATE_H
#define REMOTE_ESTIMATE_H

#include <stdbool.h>
#include <stdint.h>

/* bytes[0..n) are the first n bytes of a file of size bytes.  true with
 * *end: where its header (key/values and tensor infos) probably ends —
 * what the bytes hold exactly, the rest of a value they cut at the average
 * length of its elements so far, and for what is not there yet what
 * llama.cpp's converters write after a vocabulary of N tokens (scores and
 * token types, merges for a "gpt2" tokenizer, 64 bytes a key/value and
 * 16 KiB, 96 bytes a tensor info).  An estimate, not a bound.  false when
 * the bytes are not a little-endian GGUF v1-v3 header this walk knows. */
bool remote_header_estimate(const uint8_t *bytes, uint64_t n, uint64_t size, uint64_t *end);

#endif

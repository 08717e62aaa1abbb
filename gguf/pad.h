/*
 * gguf/pad.h — the padding key: room in the header that lets a metadata
 * edit keep the tensor data where it is, or move it by whole file system
 * blocks, so that the edit costs O(metadata) however large the model.
 *
 * A GGUF file's tensor data starts at the header's end rounded up to
 * general.alignment.  An edit that changes the header's size moves the
 * data: a rewrite of the whole file.  The key gguffs.padding, an array of
 * u8 holding only zeros (readers ignore keys they do not know), absorbs
 * the difference:
 *
 *   - resized, so that the header keeps exactly its room: the edit is
 *     written in place (any file system);
 *   - where the file system can clone (FICLONERANGE: XFS with reflink,
 *     btrfs), sized so that the data start moves by a multiple of the
 *     file system's block size (and of the alignment): the new file shares
 *     the old one's data blocks instead of copying them (gguf/commit.h);
 *     GGUF_PAD_SLACK to spare, as the next rewrite is cheap anyway;
 *   - elsewhere (ext4, tmpfs, ...: the rewrite copies every tensor byte),
 *     sized so that the data start moves by a multiple of the alignment,
 *     with gguf_pad_copy_slack() to spare: the copy that cannot be avoided
 *     buys room for the next growing edits, which are then in place.
 *
 * gguf_pad_fit decides.  It adds the key to a header that has none (on
 * every file system), unless the edit deletes it: the edit that removes it
 * is written as it is (a rewrite that gives the room back), and a later
 * edit that changes the header's size adds it again.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_PAD_H
#define GGUF_PAD_H

#include "header.h"

#define GGUF_KEY_PADDING "gguffs.padding"

/* A growing header that gets a padding key is given at least this much
 * room to spare, so that the next small edits are written in place. */
#define GGUF_PAD_SLACK 1024

/*
 * Where a growing edit must copy the model (the file system does not
 * clone), the padding key is given at least GGUF_PAD_COPY_SLACK bytes to
 * spare, or 1/GGUF_PAD_COPY_DIV of the header (without the key) when that
 * is more: gguf_pad_copy_slack().  Why these:
 *   - what is edited by hand grows by little: a chat template is 1-10 KB
 *     and a `sed -i` of it adds bytes to KB; 64 KiB takes tens of such
 *     edits in place (each O(header) under the journal) before the next
 *     copy.  It costs 64 KiB of zeros in a file of hundreds of MB to tens
 *     of GB (a 1 GiB model: 0.006 %), read and skipped once by a loader;
 *   - 1/8 of the header for large headers (a 150k-token vocabulary with
 *     its merges: several MB): what a tool adds to those (tokens, merges)
 *     scales with them, and room in proportion makes a series of growing
 *     edits copy the model O(log) times, not once per edit, as a vector's
 *     capacity does.  The header is held in memory by gguffs and by
 *     llama.cpp's loader (the key is read as an array): 1/8 more of it is
 *     little next to the tensors;
 *   - not more: the zeros stay in the file and in every copy of it.
 * The clone path keeps GGUF_PAD_SLACK: its rewrite costs O(metadata).
 */
#define GGUF_PAD_COPY_SLACK ((uint64_t)64 << 10)
#define GGUF_PAD_COPY_DIV 8

/* The largest step (block size and alignment) padding is sized for;
 * beyond it an edit is not padded (on the copy path: an alignment beyond
 * it). */
#define GGUF_PAD_MAX_STEP ((uint64_t)64 << 20)

/* The room to spare a copied header of hdr bytes (without the padding
 * key's bytes) is given: max(GGUF_PAD_COPY_SLACK, hdr / GGUF_PAD_COPY_DIV). */
uint64_t gguf_pad_copy_slack(uint64_t hdr);

/* true if key (len bytes) is "gguffs.padding". */
bool gguf_key_is_padding(const void *key, size_t len);

/* The step the data start may move by on a file system cloning blocks of
 * block bytes, for a file aligned to alignment: their least common
 * multiple; 0 if either is 0 or the step exceeds GGUF_PAD_MAX_STEP. */
uint64_t gguf_pad_step(uint64_t block, uint64_t alignment);

/*
 * Fits hdr (hdr_len bytes, a header for f as gguf_header_build makes it:
 * the edit's key/values with f's tensor infos) to f's layout, into out
 * (replacing what out held).  R is f->data_off, the room of f's header.
 *
 * The padding key of hdr is its only key named gguffs.padding, if that is
 * an array of u8 whose bytes are all zero; P(n) is hdr with that key
 * holding n bytes, and base the unpadded size of P(0).  When hdr has none
 * and neither hdr nor f has any key of that name (so an edit that deletes
 * it is written without it), P(n) is hdr with one appended at the end of
 * the key/values.  Otherwise nothing is fitted.
 *
 *   - f has no tensor bytes, hdr_len == R, or nothing is fitted: out is
 *     hdr as it is;
 *   - base <= R, and step == 0 or R - base < step + GGUF_PAD_SLACK: out is
 *     P(R - base), exactly R bytes (an edit in place);
 *   - step > 0: out is P(n) of T = R + k * step bytes, with the smallest
 *     integer k (negative when a large part of the header went away) for
 *     which n >= GGUF_PAD_SLACK: the data start moves by k whole steps;
 *   - step == 0 and base > R (the header outgrows its room; the rewrite
 *     copies the data): out is P(n) of T = R + k * alignment bytes, with
 *     the smallest k for which n >= gguf_pad_copy_slack(base); hdr as it
 *     is when the alignment exceeds GGUF_PAD_MAX_STEP.
 *
 * step is 0 (the file system does not clone) or gguf_pad_step() of its
 * block size and f's alignment.  out parses to hdr's key/values but for
 * the padding key's size (hdr's bytes with only that record spliced).  Errors: hdr does
 * not parse for f (GGUF_E_INVAL), GGUF_E_NOMEM; out is then unchanged.
 */
enum gguf_err gguf_pad_fit(const struct gguf_file *f, const uint8_t *hdr, size_t hdr_len,
                           uint64_t step, struct gguf_buf *out, struct gguf_diag *d);

#endif

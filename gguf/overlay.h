/*
 * gguf/overlay.h — edits of a model that cannot be written (a remote one),
 * kept in a local overlay file, and the model they make.
 *
 * An overlay holds one edited header of a base model (a byte source:
 * remote/source.h) and the base's identity.  The edited model is the
 * edited header followed by the base's tensor data: a spliced source
 * (gguf_splice_source) presents
 *
 *     [edited header, hdr_len bytes][the base's bytes from base_data to its end]
 *
 * so tensor offsets, relative to the data start, point at the base's
 * tensor bytes unchanged, and reading the spliced source from start to end
 * is the edited model as one file.  The header is one built by
 * gguf/header.h or gguf/kvedit.h for the base (or a previous overlay of
 * it): same tensor infos, alignment, version and byte order.
 *
 * Overlay file format (integers little-endian):
 *
 *   0  "GGUFFSOV"          8  version (u32, 1)     12 identity length (u32)
 *   16 base size (u64)     24 base_data (u64)      32 header length (u64)
 *   40 name length (u32)   44 zero (u32)           48 checksum of bytes [64, end)
 *   56 checksum of bytes [0, 56)
 *   64 identity, then name (the base's name for messages: a URL without
 *      credentials), then the edited GGUF header
 *
 * The file is exactly 64 + identity + name + header bytes long.  It is
 * written whole to PATH.gguffs-new (with the mode of the PATH it
 * replaces; 0644 less the umask for a new one), fsync'ed, renamed over PATH
 * and the directory fsync'ed (gguf_overlay_write): at any moment, whatever happens
 * (kill -9, power loss), PATH is the old overlay or the new one, and a
 * leftover PATH.gguffs-new is only ever an unfinished write, removed by
 * gguf_overlay_clean.
 *
 * Everything read from an overlay file is checked (hostile input): the
 * magic, both checksums, every length against the file's size, the
 * identity (printable ASCII), then, against the base (gguf_overlay_match),
 * the identity, size and data start, and the header itself, parsed and
 * compared with the base's tensor infos.  Refusals name the byte offset in
 * the overlay file they concern.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_OVERLAY_H
#define GGUF_OVERLAY_H

#include "gguf.h"
#include "source.h"

#define GGUF_OVERLAY_VERSION 1
#define GGUF_OVERLAY_REC 64
#define GGUF_OVERLAY_ID_MAX 4096      /* longest identity accepted */
#define GGUF_OVERLAY_NAME_MAX 8192    /* longest name accepted */

struct gguf_overlay {
    char *identity;      /* the base's identity (gguf/source.h) */
    char *name;          /* the base's name, for messages */
    uint64_t base_size;  /* the base's size */
    uint64_t base_data;  /* where the base's tensor data starts:
                            min(data_off, size) of the base */
    uint8_t *hdr;        /* the edited header */
    uint64_t hdr_len;
    uint64_t hdr_at;     /* where it starts in the file (read overlays) */
    uint64_t sum;        /* the checksum at byte 56: tells versions apart */
};

/* Reads and checks the overlay file at path (not yet against a base).
 * GGUF_E_NOENT when there is no such file; GGUF_E_IO when it cannot be
 * read; GGUF_E_MAGIC, GGUF_E_VERSION, GGUF_E_RANGE or GGUF_E_INVAL for a
 * file that is not an intact overlay, with d's offset in the file. */
enum gguf_err gguf_overlay_read(const char *path, struct gguf_overlay *ov,
                                struct gguf_diag *d);

/* The same for the size bytes of an overlay file held in memory. */
enum gguf_err gguf_overlay_parse(const uint8_t *data, uint64_t size, struct gguf_overlay *ov,
                                 struct gguf_diag *d);

/* Checks that ov was made for the base (its source and index) and parses
 * its header as the spliced model's (*out, free with gguf_close).
 * GGUF_E_INVAL for an overlay of another base ("made for NAME (identity
 * ...)"), or a header that does not fit the base (other tensor infos,
 * alignment, version or byte order); parse errors as gguf_parse's; d's
 * offset is in the overlay file (ov->hdr_at added). */
enum gguf_err gguf_overlay_match(const struct gguf_overlay *ov, const struct gguf_source *base,
                                 const struct gguf_file *base_gf, struct gguf_file **out,
                                 struct gguf_diag *d);

/* Where the base's tensor data starts, as an overlay records it. */
uint64_t gguf_overlay_base_data(const struct gguf_file *base_gf);

/* Writes ov (identity, name, base_size, base_data, hdr, hdr_len) to path
 * crash-safely (see above); sets ov->sum.  *renamed (may be NULL) says
 * whether the new file took path's place: true with an error only when the
 * final directory fsync failed (the new overlay is in place, maybe not
 * durable).  GGUF_E_IO with d naming the step and the errno text;
 * PATH.gguffs-new is removed on failure. */
enum gguf_err gguf_overlay_write(const char *path, struct gguf_overlay *ov, bool *renamed,
                                 struct gguf_diag *d);
/* The same for a writer that holds an OFD write lock on the overlay (or
 * will): *lock_fd is set to -1, or, once the new file took path's place,
 * to a descriptor of it holding an OFD write lock (whole file) taken
 * before the rename, which the caller keeps.  A lock that cannot be taken
 * fails the write before the rename. */
enum gguf_err gguf_overlay_write_locked(const char *path, struct gguf_overlay *ov,
                                        bool *renamed, int *lock_fd, struct gguf_diag *d);

/* The checksum recorded at byte 56 of the overlay at path: 1 (in *sum), 0
 * when there is no such file, -1 when it cannot be read or is not an
 * overlay (errno EINVAL). */
int gguf_overlay_sum(const char *path, uint64_t *sum);

/* Removes PATH.gguffs-new, an interrupted gguf_overlay_write; 0, or -1
 * with errno (ENOENT is not an error). */
int gguf_overlay_clean(const char *path);

void gguf_overlay_free(struct gguf_overlay *ov);

/*
 * The spliced source: bytes [0, hdr_len) from a copy of hdr, then base's
 * bytes from base_off to its end (size hdr_len + base->size - base_off).
 * base is not owned: it must outlive the source.  hdr_len 0 and base_off
 * 0 give a source that reads base as it is (a borrowed base).  Its name
 * is base's; its identity base's when it shows base's bytes unchanged,
 * else "overlay:CHECKSUM:" and base's; no descriptor (fd -1); below is
 * base.  GGUF_E_INVAL for base_off past base's end, GGUF_E_NOMEM.
 */
enum gguf_err gguf_splice_source(const uint8_t *hdr, size_t hdr_len,
                                 struct gguf_source *base, uint64_t base_off,
                                 struct gguf_source **out, struct gguf_diag *d);

#endif

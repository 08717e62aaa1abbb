/*
 * remote/source.h — a remote object as a gguf_source (gguf/source.h).
 *
 * remote_source_open opens the remote (remote_open: one request plus
 * redirects, which also fetches the first REMOTE_PREFIX_SIZE bytes) and
 * wraps it as a byte source, so that the gguf/ core reads a remote model
 * exactly as it reads a local file.  Its size and identity are the
 * remote's; its name is the redacted URL; it has no file descriptor
 * (fd -1).  Its read serves, in this order:
 *
 *   1. bytes of the prefix, from memory (no request);
 *   2. while the model is being opened (until remote_source_opened), bytes
 *      after the prefix from a stream of ranges ("Range: bytes=OFF-LAST",
 *      remote/http.h), as long as the reads follow one another (each
 *      starts where the last one ended) — the header parser's reads do.
 *      LAST is 1 MiB past where the header probably ends, estimated from
 *      the bytes before OFF (the parser's copy, handed over by
 *      gguf_source_ops.head, or the prefix: what they hold, the rest of a
 *      value they cut at its average element length, and what
 *      llama.cpp's converters write after a vocabulary of N tokens:
 *      scores, token types, merges for a "gpt2" tokenizer, tensor infos;
 *      no copy of the header is kept); a read that reaches LAST is
 *      short there (gguf/parse.c's read-ahead stops).  Once a range is
 *      half read, if the bytes read so far say the header ends past it,
 *      the next range (1 MiB past that estimate) is asked for at once, so
 *      that its round trip overlaps the rest of this one's transfer; a
 *      read past a range without one starts the next range, estimated
 *      again from more bytes (from the third range on, with twice the
 *      margin of the one before).  So a header longer than the prefix
 *      costs one request more when the estimate made at the prefix's end
 *      holds, and two when it falls short by more than 1 MiB (merges
 *      several times the tokens) — the second of them sent while the
 *      first is still arriving, not a round trip after it — and the server
 *      sends at most about 1 MiB past the header, where an open-ended
 *      range would let it fill the socket buffers (megabytes) before the
 *      stream is cut.  Bytes the walk does not know (not GGUF v1-v3
 *      little-endian) get one open-ended range.  The first read that does
 *      not follow stops the stream for good;
 *   3. everything else by remote_read (validated range requests, retries).
 *
 * A read is short only at the end of the file or of a stream range (see
 * 2.); a failure is -EIO (or -ENOMEM), with the reason available from
 * remote_last_error.  Reads may come from any number of threads; while
 * the stream is on they are served one at a time, so call
 * remote_source_opened as soon as the header is parsed (gguf_open_source
 * returned), before sharing the source.
 *
 * Closing the source (gguf_source_close) stops the stream and closes the
 * remote.
 */
#ifndef REMOTE_SOURCE_H
#define REMOTE_SOURCE_H

#include "gguf/source.h"
#include "http.h"

/* Opens opts->url as a source (errors as remote_open's). */
enum gguf_err remote_source_open(const struct remote_opts *opts, struct gguf_source **out,
                                 struct gguf_diag *diag);

/* The model is open: stops the stream; reads past the prefix are plain
 * range requests from now on.  Call it once, before reads of several
 * threads.  src is a source remote_source_open made (its caller knows:
 * it opened it). */
void remote_source_opened(struct gguf_source *src);

/* The remote behind a source made by remote_source_open (for its stats,
 * identity, last error, remote_drop_prefix — see remote/http.h).  Only for
 * such a source: the caller knows it made one. */
struct remote *remote_source_remote(struct gguf_source *src);

#endif

/*
 * gguf/edit.h — rewriting a GGUF file's metadata, crash-safely.
 *
 * An edit is a new list of key/values for a model file.  It is applied in
 * two calls:
 *
 *   gguf_header_build()  serializes the new header (key/values, the file's
 *                        tensor infos unchanged, padding) in memory;
 *   gguf_commit()        puts it into the model file, either in place
 *                        (guarded by an undo journal) or by writing a new
 *                        file beside it and renaming it over the model.
 *
 * and gguf_recover() is called before a model is opened (at mount) to
 * finish what a crash interrupted.  Together they guarantee: whatever
 * happens during gguf_commit (an error, kill -9, power loss at any point),
 * after gguf_recover the model is bit for bit either the old or the new
 * version.  Once gguf_commit has returned GGUF_OK the new version is
 * durable.  Tensor data is never read into memory: the rewrite streams it
 * (copy_file_range, else through a 1 MiB buffer), and memory use is
 * proportional to the header only.
 *
 * Files beside the model (MODEL is the model's path with symbolic links
 * resolved, so a link to a model keeps pointing at it):
 *
 *   MODEL.gguffs-journal  undo journal of an in-place edit: the old bytes
 *                         of the header range being overwritten.
 *   MODEL.gguffs-new      the new file of a rewrite, before its rename.
 *
 * The directory holding the model must therefore be writable.  Calls for
 * the same model must not run concurrently (the caller serializes them);
 * nothing else may write the model meanwhile (gguf_commit checks that the
 * header on disk is still the one indexed in f, and refuses otherwise).
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_EDIT_H
#define GGUF_EDIT_H

#include "value.h"

/*
 * One key/value of a new header: key bytes (key_len of them, no NUL
 * needed), value type (enum gguf_vtype), and the value encoded as in
 * value.h "bin", in the file's encoding (byte order and count width of
 * f->enc): what gguf_parse_value() produces, or what gguf_newkv_of()
 * returns for a key/value already in the file.
 */
struct gguf_newkv {
    const char *key;
    size_t key_len;
    uint32_t type;
    const uint8_t *val;
    size_t val_len;
};

/* The key/value kv_index of f, as it is in the file (pointers into f->hdr,
 * valid while f is open): copying untouched keys into a new list. */
struct gguf_newkv gguf_newkv_of(const struct gguf_file *f, uint64_t kv_index);

/*
 * Serializes a full header for file f into out (appended; out->len is then
 * the header's padded size): "GGUF", f's version and byte order, counts,
 * the n given key/values in the given order, then f's tensor infos copied
 * byte for byte (tensor offsets are relative to the data start, so the
 * tensor data keeps its bytes), then zero padding up to f->alignment.
 *
 * Refused with GGUF_E_INVAL and a diag naming the key:
 *   - a list that changes general.alignment (another value or type), drops
 *     it when f has it, or adds it when f has none (its default, 32, is
 *     implied);
 *   - a key longer than GGUF_MAX_NAME, an unknown type, more key/values
 *     than a version 1 file can count;
 *   - values whose encoding is not well formed: the built header is parsed
 *     back (gguf_parse) and must give exactly the given records, f's tensor
 *     infos and f's data size.
 * Key names and duplicates are the caller's business (a duplicate present
 * in the file can be kept).  On error out is unchanged.
 */
enum gguf_err gguf_header_build(const struct gguf_file *f,
                                const struct gguf_newkv *kvs, size_t n,
                                struct gguf_buf *out, struct gguf_diag *d);

/*
 * Writes a new header hdr (hdr_len bytes, from gguf_header_build for f)
 * into the model at path, whose current index is f.  First checks that the
 * file is still the one f describes (same size, same header bytes).
 *
 * In place, when hdr_len == f->data_off (*in_place = true): only the range
 * [lo, hi) where the new header differs from the old is written.
 *   1. MODEL.gguffs-journal is created (O_EXCL) and written: a 64-byte
 *      record (magic, model size, lo, hi - lo, checksum of the payload,
 *      checksum of the record) and the old bytes [lo, hi) as payload;
 *   2. fsync(journal), fsync(directory): the journal is durable;
 *   3. pwrite of the new bytes [lo, hi) into the model, fsync(model);
 *   4. unlink(journal), fsync(directory): the edit is committed.
 *   An identical header writes nothing.  The model is opened O_RDWR here
 *   only; its inode, mode, owner and links stay as they are.
 *
 * Otherwise by rewrite (*in_place = false):
 *   1. MODEL.gguffs-new is created (O_EXCL, a leftover is removed first)
 *      and written: the new header, then the tensor data [f->data_off,
 *      file end) streamed with copy_file_range (a reflink on filesystems
 *      that can), falling back to pread/pwrite through a 1 MiB buffer;
 *   2. fchmod to the model's mode, fchown to its owner and group when they
 *      differ (failure is an error: ownership never silently changes);
 *   3. fsync(new file), rename over MODEL, fsync(directory).
 *   The model gets a new inode: readers holding the old one keep reading
 *   the old version; other hard links to it keep the old version; extended
 *   attributes and ACLs are not copied.
 *
 * The mtime is that of the write (an edit is a modification).
 *
 * Errors (GGUF_E_IO, or GGUF_E_INVAL for a model that changed since f was
 * indexed, a leftover journal — call gguf_recover — or a malformed hdr):
 * diag names the step and the errno text; temporary files are removed and
 * the model is the old version.  One exception: if the final fsync of the
 * directory after the rename fails, the new version is in place but maybe
 * not durable; diag then says "new version in place".  Callers re-open the
 * model after every gguf_commit, whatever it returned.
 */
enum gguf_err gguf_commit(const char *path, const struct gguf_file *f,
                          const uint8_t *hdr, size_t hdr_len, bool *in_place,
                          struct gguf_diag *d);

/*
 * Run before opening the model at path (at mount, never while an edit of it
 * is running).  Idempotent: a crash during gguf_recover is recovered by the
 * next call.
 *   - MODEL.gguffs-journal complete (record and payload checksums match,
 *     its length is exact): the edit it guards may have been partly
 *     written, so the old bytes are written back, fsync, then the journal
 *     is removed (+ directory fsync): the model is the old version.  If the
 *     model's size is not the one the journal records, the journal belongs
 *     to another file: nothing is done, GGUF_E_INVAL.
 *   - journal incomplete: it was never made durable, so the model was not
 *     touched: it is removed.
 *   - MODEL.gguffs-new: a rewrite that did not reach its rename; the model
 *     is the old version: it is removed.
 * *what (cap bytes, may be NULL) is set to a short description of what was
 * done, "" if nothing.  A model that does not exist is not an error here
 * (nothing is done).
 */
enum gguf_err gguf_recover(const char *path, char *what, size_t cap,
                           struct gguf_diag *d);

/*
 * Testing.  When gguf_edit_hooks is non-NULL (it is NULL unless a test
 * sets it), step() is called before every action of gguf_commit and
 * gguf_recover that changes what is on disk (each create, write, fsync,
 * rename, unlink), with a step number counting from 0 in each call and a
 * short name.  A test's step() may _exit() to simulate a crash there.
 * While hooks are set, writes of the journal, header and copied data are
 * split in two with a step between, so that torn writes are simulated too.
 * no_copy_file_range forces the pread/pwrite fallback.  Production code
 * pays one pointer test per step.
 */
struct gguf_edit_hooks {
    void (*step)(unsigned n, const char *what, void *arg);
    void *arg;
    bool no_copy_file_range;
};
extern struct gguf_edit_hooks *gguf_edit_hooks;

#endif

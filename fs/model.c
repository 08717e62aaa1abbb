/*
 * fs/model.c — opening the model a mount shows: a single file or every
 * shard of a split model (gguf/split.h), each through a byte source, after
 * finishing (or, read-only, refusing) an interrupted edit of the file that
 * edits go to.
 */
#include "fs.h"

#include "gguf/commit.h"
#include "gguf/overlay.h"
#include "remote/source.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct opener {
    bool read_only;
};

/* The file that holds the metadata, and so receives edits: a file that is
 * not named as a shard, or shard 1.  Before it is opened, an interrupted
 * edit is rolled back or finished; a read-only mount cannot, so it refuses
 * the model while one is there. */
static enum gguf_err open_file(void *ctx, const char *name, struct gguf_source **out,
                               struct gguf_diag *d)
{
    const struct opener *o = ctx;
    size_t plen;
    unsigned no, count;
    if (!gguf_split_name_parse(name, &plen, &no, &count) || no == 1) {
        char what[256];
        enum gguf_err e = gguf_recover(name, o->read_only ? GGUF_RECOVER_CHECK
                                                          : GGUF_RECOVER_FIX,
                                       what, sizeof what, d);
        if (e == GGUF_E_INTERRUPTED)
            return gguf_diag_set(d, e, UINT64_MAX, "an edit was interrupted; mount once "
                                 "without -o ro to roll it back");
        if (e)
            return e;
        if (what[0] && !o->read_only)
            fprintf(stderr, "gguffs: %s: %s\n", name, what);
    }
    return gguf_split_open_file(NULL, name, out, d);
}

/* A shard of a remote model: its URL opened with the mount's options. */
static enum gguf_err open_url(void *ctx, const char *name, struct gguf_source **out,
                              struct gguf_diag *d)
{
    struct remote_opts ro = *(const struct remote_opts *)ctx;
    ro.url = name;
    /* a shard that is not there (404) is GGUF_E_NOENT: the split code
     * names it */
    return remote_source_open(&ro, out, d);
}

struct remote *ggfs_remote(struct gguf_source *src)
{
    struct gguf_source *in = gguf_splice_base(src);
    return remote_source_remote(in ? in : src);
}

enum gguf_err ggfs_open_model(const char *path, bool read_only,
                              const struct remote_opts *remote, struct gguf_split **out,
                              struct gguf_diag *d)
{
    struct opener o = { read_only };
    enum gguf_err e = remote ? gguf_split_open(path, open_url, (void *)remote, out, d)
                             : gguf_split_open(path, open_file, &o, out, d);
    if (e)
        return e;
    /* the headers are parsed: remote reads from any thread from now on */
    for (unsigned i = 0; i < (*out)->n; i++)
        remote_source_opened((*out)->shards[i].src);
    /* Tensor reads are mostly long sequential runs: a larger readahead
     * window keeps the disk busy while FUSE replies. */
    for (unsigned i = 0; i < (*out)->n; i++)
        if ((*out)->shards[i].src->fd >= 0)
            posix_fadvise((*out)->shards[i].src->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return GGUF_OK;
}

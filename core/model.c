/*
 * core/model.c — opening the model a mount shows: a single file or every
 * shard of a split model (gguf/split.h), each through a byte source, after
 * finishing (or, read-only, refusing) an interrupted edit of the file that
 * edits go to.
 *
 * Remote split models: the shards are opened in parallel.  Opening a
 * remote source costs its first request (the prefix, with the header in
 * it), so a URL named PREFIX-0000K-of-0000N.gguf starts the opens of all N
 * shards at once, from up to SHARD_OPENERS threads of this file (gguf/
 * stays free of threads), the named shard first, then shard 1, 2, ...:
 * the order in which gguf_split_open asks for them.  The opener it is
 * given then only hands out the results, in its order, waiting for the
 * ones not yet done, so its errors are those of opening one shard after
 * another: the first failure in that order is the one reported ("shard 3
 * of 4 is missing: URL"), whichever answer came first.  After a failure
 * no shard later in the order is started (the split code will not ask for
 * it): a URL naming more shards than the server has costs at most
 * SHARD_OPENERS requests more than opening them one by one.  Shards that
 * were opened but not asked for (the named file is not split after all,
 * or the open failed) are closed.  The headers are then parsed one shard
 * after another by gguf_split_open, from the prefixes already fetched (a
 * shard header longer than REMOTE_PREFIX_SIZE streams the rest then).
 */
#include "model.h"

#include "cache/blocksrc.h"
#include "cache/thread.h"
#include "gguf/commit.h"
#include "gguf/split.h"
#include "remote/source.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opener {
    enum gguf_recover_mode mode;
    char *note;                 /* what a recovery did, for the caller to log */
    size_t note_cap;
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
        enum gguf_err e = gguf_recover(name, o->mode, what, sizeof what, d);
        if (e == GGUF_E_INTERRUPTED)
            return gguf_diag_set(d, e, UINT64_MAX, "an edit was interrupted; mount once "
                                 "without -o ro to roll it back");
        if (e)
            return e;
        if (what[0] && o->mode != GGUF_RECOVER_CHECK && o->note_cap)
            snprintf(o->note, o->note_cap, "%s: %s", name, what);
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

/* ---- the shards of a remote split model, opened in parallel ------------------------- */

#define SHARD_OPENERS 16

enum shard_state { SH_WAITING, SH_RUNNING, SH_DONE, SH_TAKEN };

struct shard_open {
    char *name;                 /* as gguf_split_open builds it */
    enum shard_state state;
    enum gguf_err e;
    struct gguf_diag *d;        /* when e: why (NULL if memory was short) */
    struct gguf_source *src;
};

struct parallel {
    const struct remote_opts *ro;
    unsigned n;
    struct shard_open *sh;      /* [n], in the order asked for: named one first */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned next;              /* the next one to start */
    unsigned stop;              /* none at or past this is started */
    pthread_t th[SHARD_OPENERS];
    unsigned threads;
};

/* Opens sh[i] (claimed: SH_RUNNING) outside the lock, then records it. */
static void run_one(struct parallel *p, unsigned i)
{
    struct shard_open *o = &p->sh[i];
    struct gguf_source *src = NULL;
    struct gguf_diag d = { 0 };
    enum gguf_err e = open_url((void *)p->ro, o->name, &src, &d);
    pthread_mutex_lock(&p->mu);
    o->src = src;
    o->e = e;
    if (e && (o->d = malloc(sizeof *o->d)) != NULL)
        *o->d = d;
    o->state = SH_DONE;
    if (e && i + 1 < p->stop)
        p->stop = i + 1;        /* nothing after a failure will be asked for */
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *opener_main(void *arg)
{
    struct parallel *p = arg;
    pthread_mutex_lock(&p->mu);
    while (p->next < p->stop) {
        unsigned i = p->next++;
        if (p->sh[i].state != SH_WAITING)
            continue;           /* claimed by the opener itself */
        p->sh[i].state = SH_RUNNING;
        pthread_mutex_unlock(&p->mu);
        run_one(p, i);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The opener given to gguf_split_open: the result for name, waited for
 * (or opened here if no thread started it). */
static enum gguf_err take_url(void *ctx, const char *name, struct gguf_source **out,
                              struct gguf_diag *d)
{
    struct parallel *p = ctx;
    unsigned i = 0;
    while (i < p->n && strcmp(p->sh[i].name, name) != 0)
        i++;
    if (i == p->n)              /* not one of ours (cannot happen): one by one */
        return open_url((void *)p->ro, name, out, d);
    pthread_mutex_lock(&p->mu);
    struct shard_open *o = &p->sh[i];
    if (o->state == SH_WAITING) {
        o->state = SH_RUNNING;
        pthread_mutex_unlock(&p->mu);
        run_one(p, i);
        pthread_mutex_lock(&p->mu);
    }
    while (o->state == SH_RUNNING)
        pthread_cond_wait(&p->cv, &p->mu);
    enum gguf_err e = o->e;
    if (o->state == SH_TAKEN) {
        /* asked twice (cannot happen): open it again */
        pthread_mutex_unlock(&p->mu);
        return open_url((void *)p->ro, name, out, d);
    }
    *out = o->src;
    o->src = NULL;
    o->state = SH_TAKEN;
    if (e && d) {
        if (o->d)
            *d = *o->d;
        else
            gguf_diag_set(d, e, UINT64_MAX, "%s", gguf_strerror(e));
    }
    pthread_mutex_unlock(&p->mu);
    return e;
}

/* Fills p for the shards of url (named PREFIX-0000K-of-0000N.gguf) and
 * starts its threads; false when url is not such a name or memory is
 * short (then the shards are opened one by one). */
static bool parallel_start(struct parallel *p, const char *url, const struct remote_opts *ro)
{
    size_t plen;
    unsigned no, count;
    memset(p, 0, sizeof *p);
    if (!gguf_split_name_parse(url, &plen, &no, &count) || count < 2 || no < 1 ||
        no > count)
        return false;
    p->sh = calloc(count, sizeof *p->sh);
    if (!p->sh)
        return false;
    p->ro = ro;
    p->n = count;
    /* the named shard, then the others in order (gguf_split_open's order) */
    for (unsigned i = 0, k = 1; i < count; i++) {
        unsigned shard;
        if (i == 0) {
            shard = no;
        } else {
            if (k == no)
                k++;
            shard = k++;
        }
        p->sh[i].name = gguf_split_name(url, plen, shard, count);
        if (!p->sh[i].name) {
            for (unsigned j = 0; j < i; j++)
                free(p->sh[j].name);
            free(p->sh);
            return false;
        }
    }
    p->stop = count;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    unsigned want = count < SHARD_OPENERS ? count : SHARD_OPENERS;
    for (unsigned t = 0; t < want; t++) {
        if (cache_thread_start(&p->th[t], opener_main, p) != 0)
            break;              /* fewer threads; take_url opens the rest */
        p->threads++;
    }
    return true;
}

/* Stops starting opens, waits for the threads, closes what was not taken. */
static void parallel_end(struct parallel *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 0;
    pthread_mutex_unlock(&p->mu);
    for (unsigned t = 0; t < p->threads; t++)
        pthread_join(p->th[t], NULL);
    for (unsigned i = 0; i < p->n; i++) {
        gguf_source_close(p->sh[i].src);
        free(p->sh[i].d);
        free(p->sh[i].name);
    }
    free(p->sh);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
}

static enum gguf_err open_remote(const char *url, const struct remote_opts *ro,
                                 struct gguf_split **out, struct gguf_diag *d)
{
    struct parallel p;
    if (!parallel_start(&p, url, ro))
        return gguf_split_open(url, open_url, (void *)ro, out, d);
    enum gguf_err e = gguf_split_open(url, take_url, &p, out, d);
    parallel_end(&p);
    return e;
}

struct remote *core_remote(struct gguf_source *src, bool remote)
{
    if (!remote || !src)
        return NULL;
    /* an overlay's spliced source, over the block cache, over the remote:
     * the wrappers name what they read through */
    while (src->below)
        src = src->below;
    return remote_source_remote(src);
}

enum gguf_err core_open_model(const char *path, bool read_only, bool reopen,
                              const struct remote_opts *remote, struct rcache *rc,
                              char *note, size_t note_cap,
                              struct gguf_split **out, struct gguf_diag *d)
{
    struct opener o = { read_only ? GGUF_RECOVER_CHECK : GGUF_RECOVER_FIX, note,
                        note ? note_cap : 0 };
    if (o.note_cap)
        note[0] = '\0';
    if (!read_only && !remote && reopen)
        o.mode = GGUF_RECOVER_FIX_LIVE;     /* the idle journal stays for the next edit */
    enum gguf_err e = remote ? open_remote(path, remote, out, d)
                             : gguf_split_open(path, open_file, &o, out, d);
    if (e)
        return e;
    /* the headers are parsed: remote reads from any thread from now on */
    for (unsigned i = 0; remote && i < (*out)->n; i++) {
        struct gguf_source **src = &(*out)->shards[i].src;
        remote_source_opened(*src);
        if (!rc)
            continue;
        struct remote *r = remote_source_remote(*src);
        /* Tensor bytes through the block cache; the prefix (the header)
         * stays where it is, in memory.  The disk cache (-o cache_dir)
         * would be handed to blocksrc_wrap here (struct blocksrc_disk,
         * one per remote identity). */
        size_t plen;
        remote_prefix(r, &plen);
        struct gguf_source *inner = *src;
        *src = NULL;
        if (blocksrc_wrap(rc, inner, plen, NULL, src) != GGUF_OK) {
            gguf_split_close(*out);
            *out = NULL;
            return gguf_diag_set(d, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
        }
    }
    /* Tensor reads are mostly long sequential runs: a larger readahead
     * window keeps the disk busy while FUSE replies. */
    for (unsigned i = 0; i < (*out)->n; i++)
        if ((*out)->shards[i].src->fd >= 0)
            posix_fadvise((*out)->shards[i].src->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return GGUF_OK;
}

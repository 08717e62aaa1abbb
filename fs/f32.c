/*
 * fs/f32.c — the f32 view: dequantizing a chunk of a tensor into the cache,
 * and the workers that fill the chunks ahead of a sequential reader.
 */
#include "fs.h"

#include "gguf/types.h"
#include "kernels/dequant.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

size_t ggfs_chunk_len(const struct state *st, uint64_t tensor, uint64_t chunk)
{
    uint64_t n = st->tens[tensor].t->n_elems - chunk * CACHE_CHUNK_ELEMS;
    return (size_t)(n < CACHE_CHUNK_ELEMS ? n : CACHE_CHUNK_ELEMS);
}

/* Element size of the plain types a big-endian file may hold (the only
 * types of such a file with an f32 view, see nodes.c). */
static unsigned plain_elem_size(uint32_t type)
{
    switch (type) {
    case GGML_T_F32: case GGML_T_I32: return 4;
    case GGML_T_F16: case GGML_T_BF16: case GGML_T_I16: return 2;
    case GGML_T_I64: case GGML_T_F64: return 8;
    default: return 1;
    }
}

static void swap_elems(uint8_t *p, size_t bytes, unsigned size)
{
    for (size_t i = 0; i + size <= bytes; i += size)
        for (unsigned a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t x = p[i + a];
            p[i + a] = p[i + b];
            p[i + b] = x;
        }
}

/* Per-thread buffer for the source bytes of one chunk.  libfuse starts and
 * ends worker threads as load changes, so the buffer is freed by a
 * thread-exit destructor rather than left behind. */
struct srcbuf {
    uint8_t *p;
    size_t cap;
};
static pthread_key_t src_key;
static pthread_once_t src_once = PTHREAD_ONCE_INIT;

static void srcbuf_free(void *v)
{
    struct srcbuf *b = v;
    free(b->p);
    free(b);
}

static void src_key_init(void) { pthread_key_create(&src_key, srcbuf_free); }

static uint8_t *thread_buffer(size_t bytes)
{
    pthread_once(&src_once, src_key_init);
    struct srcbuf *b = pthread_getspecific(src_key);
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b || pthread_setspecific(src_key, b) != 0) {
            free(b);
            return NULL;
        }
    }
    if (bytes > b->cap) {
        uint8_t *np = realloc(b->p, bytes);
        if (!np)
            return NULL;
        b->p = np;
        b->cap = bytes;
    }
    return b->p;
}

int ggfs_fill_chunk(void *ctx, uint64_t tensor, uint64_t chunk, float *dst, size_t n)
{
    struct ggfs *fs = ctx;
    const struct state *st = fs->st;       /* under the state lock (read) */
    const struct tref *r = &st->tens[tensor];
    const struct ggml_type_info *ti = ggml_type_get(r->t->type);
    uint64_t first_block = chunk * (CACHE_CHUNK_ELEMS / ti->blck_elems);
    size_t n_blocks = n / ti->blck_elems;
    size_t bytes = n_blocks * ti->blck_bytes;
    uint8_t *buf = thread_buffer(bytes);
    if (!buf)
        return ENOMEM;
    const struct gguf_shard *sh = &st->model->shards[r->shard];
    uint64_t pos = sh->gf->data_off + r->t->offset + first_block * ti->blck_bytes;
    /* a read error, or the file shrank underneath */
    if (gguf_source_read_all(sh->src, buf, bytes, pos) != 0) {
        ggfs_source_failed(fs, sh->src);
        return EIO;
    }
    if (sh->gf->enc.big_endian)
        swap_elems(buf, bytes, plain_elem_size(r->t->type));
    ggfs_dequant(r->t->type, buf, dst, n_blocks);
    return 0;
}

/* ---- dequantization workers ---------------------------------------------
 *
 * A sequential reader of f32 asks for one chunk at a time (the kernel's
 * readahead sends 128 KiB requests).  To use every core for one reader, a
 * read of chunk c queues c+1 .. c+depth of the same tensor, and workers
 * fill them into the cache while the reader is busy with c.  The queue is
 * bounded; when it is full, hints are dropped (they are only hints).
 */

#define QUEUE_CAP 256

struct workers {
    struct ggfs *fs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *threads;
    unsigned n_threads;
    unsigned depth;
    bool stop;
    uint64_t q_tensor[QUEUE_CAP], q_chunk[QUEUE_CAP];   /* under mu */
    unsigned head, len;
};

static void *worker_main(void *arg)
{
    struct workers *wk = arg;
    struct ggfs *fs = wk->fs;
    pthread_mutex_lock(&wk->mu);
    for (;;) {
        while (!wk->stop && wk->len == 0)
            pthread_cond_wait(&wk->cv, &wk->mu);
        if (wk->stop)
            break;
        uint64_t t = wk->q_tensor[wk->head], c = wk->q_chunk[wk->head];
        wk->head = (wk->head + 1) % QUEUE_CAP;
        wk->len--;
        pthread_mutex_unlock(&wk->mu);
        pthread_rwlock_rdlock(&fs->lock);
        if (t < fs->st->n_tensors)
            cache_prefetch(fs->cache, t, c, ggfs_chunk_len(fs->st, t, c));
        pthread_rwlock_unlock(&fs->lock);
        pthread_mutex_lock(&wk->mu);
    }
    pthread_mutex_unlock(&wk->mu);
    return NULL;
}

int ggfs_workers_start(struct ggfs *fs, unsigned n)
{
    /* Prefetching more chunks than a quarter of the cache would evict what
     * the reader is about to use. */
    uint64_t cap = cache_capacity_chunks(fs->cache) / 4;
    unsigned depth = 2 * n < cap ? 2 * n : (unsigned)cap;
    if (n == 0 || depth == 0)
        return 0;
    struct workers *wk = calloc(1, sizeof *wk);
    if (!wk || !(wk->threads = calloc(n, sizeof *wk->threads))) {
        free(wk);
        return ENOMEM;
    }
    wk->fs = fs;
    wk->depth = depth;
    pthread_mutex_init(&wk->mu, NULL);
    pthread_cond_init(&wk->cv, NULL);
    int e = 0;
    sigset_t all, old;
    sigfillset(&all);
    /* Signals must reach the thread running the FUSE loop. */
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (unsigned i = 0; i < n && !e; i++) {
        e = pthread_create(&wk->threads[i], NULL, worker_main, wk);
        if (!e)
            wk->n_threads = i + 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    fs->workers = wk;
    return e;
}

void ggfs_workers_stop(struct ggfs *fs)
{
    struct workers *wk = fs->workers;
    if (!wk)
        return;
    pthread_mutex_lock(&wk->mu);
    wk->stop = true;
    pthread_cond_broadcast(&wk->cv);
    pthread_mutex_unlock(&wk->mu);
    for (unsigned i = 0; i < wk->n_threads; i++)
        pthread_join(wk->threads[i], NULL);
    pthread_mutex_destroy(&wk->mu);
    pthread_cond_destroy(&wk->cv);
    free(wk->threads);
    free(wk);
    fs->workers = NULL;
}

void ggfs_prefetch_after(struct ggfs *fs, const struct state *st, uint64_t tensor,
                         uint64_t chunk)
{
    struct workers *wk = fs->workers;
    if (!wk || !wk->n_threads)
        return;
    uint64_t n_chunks = (st->tens[tensor].t->n_elems + CACHE_CHUNK_ELEMS - 1)
                        / CACHE_CHUNK_ELEMS;
    pthread_mutex_lock(&wk->mu);
    for (uint64_t c = chunk + 1; c <= chunk + wk->depth && c < n_chunks; c++) {
        if (wk->len == QUEUE_CAP)
            break;
        if (cache_contains(fs->cache, tensor, c))
            continue;
        /* skip what is queued already */
        bool queued = false;
        for (unsigned k = 0; k < wk->len && !queued; k++) {
            unsigned i = (wk->head + k) % QUEUE_CAP;
            queued = wk->q_tensor[i] == tensor && wk->q_chunk[i] == c;
        }
        if (queued)
            continue;
        unsigned tail = (wk->head + wk->len) % QUEUE_CAP;
        wk->q_tensor[tail] = tensor;
        wk->q_chunk[tail] = c;
        wk->len++;
        pthread_cond_signal(&wk->cv);
    }
    pthread_mutex_unlock(&wk->mu);
}

/*
 * fs/f32.c — the f32 view: byte range -> quantization blocks -> cache
 * chunks -> dequantized floats.
 */
#include "fs.h"

#include "gguf/types.h"
#include "kernels/dequant.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Types whose elements are plain numbers: in a big-endian file they can be
 * byte-swapped element by element before conversion.  Quantized blocks of
 * a big-endian file have no agreed layout, so they get no f32 view. */
static unsigned plain_elem_size(uint32_t type)
{
    switch (type) {
    case GGML_T_F32: case GGML_T_I32: return 4;
    case GGML_T_F16: case GGML_T_BF16: case GGML_T_I16: return 2;
    case GGML_T_I64: case GGML_T_F64: return 8;
    case GGML_T_I8: return 1;
    default: return 0;
    }
}

bool ggfs_has_f32(uint64_t i)
{
    const struct gguf_tensor *t = &g_fs.gf->tensors[i];
    if (!ggfs_dequant_supported(t->type))
        return false;
    return !g_fs.gf->enc.big_endian || plain_elem_size(t->type) != 0;
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
    (void)ctx;
    const struct gguf_tensor *t = &g_fs.gf->tensors[tensor];
    const struct ggml_type_info *ti = ggml_type_get(t->type);
    uint64_t first_block = chunk * (CACHE_CHUNK_ELEMS / ti->blck_elems);
    size_t n_blocks = n / ti->blck_elems;
    size_t bytes = n_blocks * ti->blck_bytes;
    uint8_t *src_buf = thread_buffer(bytes);
    if (!src_buf)
        return ENOMEM;
    uint64_t pos = g_fs.gf->data_off + t->offset + first_block * ti->blck_bytes;
    size_t got = 0;
    while (got < bytes) {
        ssize_t r = pread(g_fs.fd, src_buf + got, bytes - got, (off_t)(pos + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return EIO;        /* read error, or the file shrank underneath */
        got += (size_t)r;
    }
    if (g_fs.gf->enc.big_endian)
        swap_elems(src_buf, bytes, plain_elem_size(t->type));
    ggfs_dequant(t->type, src_buf, dst, n_blocks);
    return 0;
}

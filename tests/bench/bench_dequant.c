/*
 * tests/bench/bench_dequant.c — dequantization throughput of ggml's own
 * to_float against ours (kern_dequant), same data, same process.
 *
 *   bench_dequant LIBGGML_BASE_SO [REPS [MB [TYPE...]]]
 *
 * For each type (default: every type both ggml and we can dequantize),
 * blocks are made by ggml's quantizer (ggml_quantize_chunk) from random
 * floats: a pool is quantized, then blocks are drawn from it at random until
 * the input decodes to MB MiB of float32 (default 64).  Each run times
 * ggml's to_float over the whole input, ours on one thread and ours split
 * over all online CPUs; the median of REPS (default 7) runs is reported.
 * The outputs are compared bit for bit.
 *
 * Prints one line per type: "TYPE GGML_GBS OURS1_GBS OURSN_GBS" (GB/s of
 * float32 output, 1 GB = 1e9 bytes), with " MISMATCH" appended when our
 * output differs from ggml's.  Lines starting with '#' are comments.
 */
#include "gguf/types.h"
#include "kernels/dequant.h"
#include "tests/kernels/ggml_oracle.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The rest of ggml's API that this uses besides ggml_oracle.h's. */
typedef int64_t (*blck_size_fn)(int type);
typedef size_t (*type_size_fn)(int type);
typedef const char *(*type_name_fn)(int type);

static struct ggml_oracle g;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* xorshift64* and a Box-Muller normal. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static float rnd_normal(void)
{
    double u = ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
    double v = (double)(rnd() >> 11) / 9007199254740992.0;
    /* cheap approximation is fine: any spread of values will do */
    double r = u < 1e-300 ? 30.0 : __builtin_sqrt(-2.0 * __builtin_log(u));
    return (float)(r * __builtin_cos(6.283185307179586 * v));
}

struct job {
    uint32_t type;
    const uint8_t *src;
    float *dst;
    size_t n_blocks;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    kern_dequant(j->type, j->src, j->dst, j->n_blocks);
    return NULL;
}

static void ours_threads(uint32_t type, const uint8_t *src, float *dst, size_t n_blocks,
                         size_t bbytes, size_t belems, int nthreads)
{
    pthread_t th[256];
    struct job jobs[256];
    size_t per = n_blocks / (size_t)nthreads, extra = n_blocks % (size_t)nthreads, b = 0;
    for (int i = 0; i < nthreads; i++) {
        size_t nb = per + ((size_t)i < extra);
        jobs[i] = (struct job){ type, src + b * bbytes, dst + b * belems, nb };
        b += nb;
    }
    for (int i = 1; i < nthreads; i++)
        if (pthread_create(&th[i], NULL, run_job, &jobs[i]) != 0) {
            run_job(&jobs[i]);
            th[i] = 0;
        }
    run_job(&jobs[0]);
    for (int i = 1; i < nthreads; i++)
        if (th[i])
            pthread_join(th[i], NULL);
}

/* Types whose ggml quantizer is slow (search over grids): a smaller pool. */
static bool slow_quantizer(const char *name)
{
    return strncmp(name, "iq1", 3) == 0 || strncmp(name, "iq2", 3) == 0 ||
           strncmp(name, "iq3", 3) == 0;
}

/* Fills buf with n_blocks blocks of type: a pool quantized by ggml, blocks
 * drawn from it at random.  Returns false if ggml cannot quantize it. */
static bool make_input(int type, const struct ggml_type_traits *tr, uint8_t *buf,
                       size_t n_blocks)
{
    size_t be = (size_t)tr->blck_size, bb = tr->type_size;
    size_t per_row_blocks = be >= 256 ? 16 : be > 1 ? 128 : 4096;
    size_t pool_blocks = slow_quantizer(tr->type_name) ? 16 * per_row_blocks
                                                       : 64 * per_row_blocks;
    if (pool_blocks > n_blocks)
        pool_blocks = (n_blocks + per_row_blocks - 1) / per_row_blocks * per_row_blocks;
    size_t nrows = pool_blocks / per_row_blocks, n_per_row = per_row_blocks * be;
    float *x = malloc(pool_blocks * be * sizeof *x);
    float *im = malloc(n_per_row * sizeof *im);
    uint8_t *pool = malloc(pool_blocks * bb);
    if (!x || !im || !pool) {
        free(x), free(im), free(pool);
        return false;
    }
    for (size_t b = 0; b < pool_blocks; b++) {
        float scale = (float)(0.02 + (double)(rnd() % 1000) / 250.0);
        for (size_t i = 0; i < be; i++)
            x[b * be + i] = rnd_normal() * scale;
    }
    for (size_t i = 0; i < n_per_row; i++)
        im[i] = 1.0f;
    g.quantize_init(type);
    size_t got = g.quantize_chunk(type, x, pool, 0, (int64_t)nrows, (int64_t)n_per_row,
                            g.requires_imatrix(type) ? im : NULL);
    bool ok = got == pool_blocks * bb;
    if (ok)
        for (size_t b = 0; b < n_blocks; b++)
            memcpy(buf + b * bb, pool + (rnd() % pool_blocks) * bb, bb);
    free(x), free(im), free(pool);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_dequant LIBGGML_BASE_SO [REPS [MB [TYPE...]]]\n");
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 7;
    if (reps < 1 || reps > 1000)
        reps = 7;
    double mb = argc > 3 ? atof(argv[3]) : 64;
    if (!(mb > 0 && mb < 65536))
        mb = 64;
    const char *why = ggml_oracle_load(argv[1], &g);
    if (why) {
        fprintf(stderr, "bench_dequant: %s\n", why);
        return 1;
    }
    blck_size_fn bsize = (blck_size_fn)dlsym(g.handle, "ggml_blck_size");
    type_size_fn tsize = (type_size_fn)dlsym(g.handle, "ggml_type_size");
    type_name_fn tname = (type_name_fn)dlsym(g.handle, "ggml_type_name");
    if (!bsize || !tsize || !tname) {
        fprintf(stderr, "bench_dequant: ggml symbols missing\n");
        return 1;
    }
    const char *isa = kern_dequant_init();
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads = ncpu < 1 ? 1 : ncpu > 256 ? 256 : (int)ncpu;
    printf("# ours: %s, %d threads; %.0f MiB of float32 per run, median of %d runs\n", isa,
           nthreads, mb, reps);
    printf("# type ggml_gbs ours1_gbs oursN_gbs\n");
    fflush(stdout);

    size_t out_bytes = (size_t)(mb * 1048576.0);
    float *y_ggml = malloc(out_bytes + 1024 * 4), *y_ours = malloc(out_bytes + 1024 * 4);
    double *t_g = calloc((size_t)reps, sizeof(double)), *t_1 = calloc((size_t)reps, sizeof(double)),
           *t_n = calloc((size_t)reps, sizeof(double));
    if (!y_ggml || !y_ours || !t_g || !t_1 || !t_n)
        return 1;
    memset(y_ggml, 0, out_bytes);
    memset(y_ours, 0, out_bytes);
    int status = 0;
    for (int type = 0; type < GGML_T_COUNT; type++) {
        const struct ggml_type_info *ti = ggml_type_get((uint32_t)type);
        if (!ti)
            continue;
        if (argc > 4) {
            bool want = false;
            for (int a = 4; a < argc; a++)
                want |= strcmp(argv[a], ti->name) == 0;
            if (!want)
                continue;
        }
        const struct ggml_type_traits *tr = g.traits(type);
        if (!tr || !tr->type_name || strcmp(tr->type_name, ti->name) != 0 ||
            strcmp(tname(type), ti->name) != 0 || tr->blck_size != bsize(type) ||
            tr->type_size != tsize(type) || (uint64_t)tr->blck_size != ti->blck_elems ||
            tr->type_size != ti->blck_bytes) {
            fprintf(stderr, "bench_dequant: %s: ggml's type traits do not match the "
                    "declared layout or our type table\n", ti->name);
            return 1;
        }
        if (!tr->to_float || !kern_dequant_supported((uint32_t)type))
            continue;
        size_t be = ti->blck_elems, bb = ti->blck_bytes;
        size_t n_blocks = out_bytes / 4 / be;
        size_t n = n_blocks * be;
        uint8_t *src = malloc(n_blocks * bb + 64);
        if (!src)
            return 1;
        if (!make_input(type, tr, src, n_blocks)) {
            fprintf(stderr, "bench_dequant: %s: ggml could not quantize\n", ti->name);
            free(src);
            continue;
        }
        /* warm up both, and compare */
        tr->to_float(src, y_ggml, (int64_t)n);
        kern_dequant((uint32_t)type, src, y_ours, n_blocks);
        bool same = memcmp(y_ggml, y_ours, n * 4) == 0;
        memset(y_ours, 0, n * 4);
        ours_threads((uint32_t)type, src, y_ours, n_blocks, bb, be, nthreads);
        same = same && memcmp(y_ggml, y_ours, n * 4) == 0;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            tr->to_float(src, y_ggml, (int64_t)n);
            double t1 = now_s();
            kern_dequant((uint32_t)type, src, y_ours, n_blocks);
            double t2 = now_s();
            ours_threads((uint32_t)type, src, y_ours, n_blocks, bb, be, nthreads);
            double t3 = now_s();
            t_g[r] = t1 - t0;
            t_1[r] = t2 - t1;
            t_n[r] = t3 - t2;
        }
        double gb = (double)n * 4 / 1e9;
        printf("%s %.3f %.3f %.3f%s\n", ti->name, gb / median(t_g, reps), gb / median(t_1, reps),
               gb / median(t_n, reps), same ? "" : " MISMATCH");
        fflush(stdout);
        if (!same) {
            size_t i = 0;
            while (i < n && memcmp(&y_ggml[i], &y_ours[i], 4) == 0)
                i++;
            uint32_t a = 0, b = 0;
            if (i < n) {
                memcpy(&a, &y_ours[i], 4);
                memcpy(&b, &y_ggml[i], 4);
            }
            fprintf(stderr, "bench_dequant: %s: output differs from ggml at element %zu "
                    "(ours 0x%08x, ggml 0x%08x)\n", ti->name, i, a, b);
            status = 3;
        }
        free(src);
    }
    free(y_ggml);
    free(y_ours);
    free(t_g), free(t_1), free(t_n);
    dlclose(g.handle);
    return status;
}

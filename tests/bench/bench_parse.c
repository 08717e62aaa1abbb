/*
 * tests/bench/bench_parse.c — header parse time of gguf_open() against
 * ggml's gguf_init_from_file(no_alloc) on the same file, same process.
 *
 *   bench_parse FILE LIBGGML_BASE_SO [REPS]
 *
 * Prints: "ours_ms=<median> ggml_ms=<median> ratio=<ours/ggml>".
 */
#include "gguf/gguf.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct ggml_gguf_init_params {
    bool no_alloc;
    void **ctx;
};
typedef void *(*init_fn)(const char *, struct ggml_gguf_init_params);
typedef void (*free_fn)(void *);

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_parse FILE LIBGGML_BASE_SO [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 21;
    if (reps < 1 || reps > 10000)
        reps = 21;
    void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "bench_parse: %s\n", dlerror());
        return 1;
    }
    init_fn init = (init_fn)dlsym(lib, "gguf_init_from_file");
    free_fn gfree = (free_fn)dlsym(lib, "gguf_free");
    if (!init || !gfree) {
        fprintf(stderr, "bench_parse: gguf symbols missing\n");
        return 1;
    }
    double *ours = calloc((size_t)reps, sizeof *ours);
    double *theirs = calloc((size_t)reps, sizeof *theirs);
    for (int r = 0; r < reps; r++) {
        /* alternate, so that both see the same cache and CPU state */
        double t0 = now_ms();
        struct gguf_file *f;
        struct gguf_diag d;
        if (gguf_open(argv[1], &f, &d) != GGUF_OK) {
            fprintf(stderr, "bench_parse: %s (at byte offset %llu)\n", d.msg,
                    (unsigned long long)d.offset);
            return 1;
        }
        gguf_close(f);
        double t1 = now_ms();
        void *g = init(argv[1], (struct ggml_gguf_init_params){ true, NULL });
        double t2 = now_ms();
        if (!g) {
            fprintf(stderr, "bench_parse: ggml refused %s\n", argv[1]);
            return 1;
        }
        gfree(g);
        ours[r] = t1 - t0;
        theirs[r] = t2 - t1;
    }
    qsort(ours, (size_t)reps, sizeof *ours, cmp_d);
    qsort(theirs, (size_t)reps, sizeof *theirs, cmp_d);
    double o = ours[reps / 2], t = theirs[reps / 2];
    printf("ours_ms=%.3f ggml_ms=%.3f ratio=%.4f\n", o, t, o / t);
    free(ours);
    free(theirs);
    dlclose(lib);
    return 0;
}

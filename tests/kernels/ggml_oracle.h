/*
 * tests/kernels/ggml_oracle.h — the part of ggml's C API that the kernel
 * test (test_dequant.c) and benchmark (tests/bench/bench_dequant.c) call
 * in libggml-base.so, the oracle, which they load with dlopen.
 *
 * ggml ships no headers with that library: these are declared here, from
 * ggml.h (MIT, "The ggml authors").  struct ggml_type_traits is declared
 * by hand, so a caller checks its layout against known facts (a type's
 * name, block size and bytes) before trusting what it reads through it.
 */
#ifndef TESTS_KERNELS_GGML_ORACLE_H
#define TESTS_KERNELS_GGML_ORACLE_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*ggml_to_float_t)(const void *x, float *y, int64_t k);

/* ggml_get_type_traits(type): what ggml knows of a type. */
struct ggml_type_traits {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    ggml_to_float_t to_float; /* NULL for types ggml cannot dequantize */
    void *from_float_ref;
};

/* The oracle's functions. */
struct ggml_oracle {
    void *handle; /* from dlopen, for further dlsym */
    const struct ggml_type_traits *(*traits)(int type);
    size_t (*quantize_chunk)(int type, const float *src, void *dst,
                             int64_t start, int64_t nrows, int64_t n_per_row,
                             const float *imatrix);
    void (*quantize_init)(int type);
    bool (*requires_imatrix)(int type);
};

/* Loads the library at path into o.  Returns NULL, or what went wrong
 * (dlerror's text, or "missing symbol NAME"). */
static inline const char *ggml_oracle_load(const char *path, struct ggml_oracle *o)
{
    o->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!o->handle)
        return dlerror();
    o->traits = (const struct ggml_type_traits *(*)(int))dlsym(o->handle, "ggml_get_type_traits");
    if (!o->traits)
        return "missing symbol ggml_get_type_traits";
    o->quantize_chunk = (size_t (*)(int, const float *, void *, int64_t, int64_t, int64_t,
                                    const float *))dlsym(o->handle, "ggml_quantize_chunk");
    if (!o->quantize_chunk)
        return "missing symbol ggml_quantize_chunk";
    o->quantize_init = (void (*)(int))dlsym(o->handle, "ggml_quantize_init");
    if (!o->quantize_init)
        return "missing symbol ggml_quantize_init";
    o->requires_imatrix = (bool (*)(int))dlsym(o->handle, "ggml_quantize_requires_imatrix");
    if (!o->requires_imatrix)
        return "missing symbol ggml_quantize_requires_imatrix";
    return NULL;
}

#endif

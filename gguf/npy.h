/*
 * gguf/npy.h — the header of an NPY file (numpy's .npy format, version
 * 1.0) for a tensor's bytes: what raw.npy and f32.npy put before them, so
 * that numpy.load reads the tensor as numpy.save would have written it.
 *
 * Promises (gguf_npy_header):
 *   - the bytes are those numpy.save writes for a C-order array of that
 *     dtype and shape (numpy/lib/format.py, _write_array_header and
 *     _wrap_header): "\x93NUMPY", version 1 0, the header's length as a
 *     little-endian u16, the dict's repr with its keys sorted
 *     ({'descr': ..., 'fortran_order': False, 'shape': (...), }), room for
 *     the first dimension to grow to 21 digits (none for a 0-d array),
 *     spaces, and "\n" at a multiple of 64 bytes;
 *   - the shape is numpy's order: GGUF's ne[] reversed (ne[0], the row
 *     length, varies fastest, so it is numpy's last axis); one dimension
 *     is written "(n,)", none "()";
 *   - with at most GGUF_MAX_DIMS dimensions of any u64 and a dtype of at
 *     most GGUF_NPY_DESCR_MAX bytes the header fits GGUF_NPY_HEADER_MAX
 *     (well below format 1.0's 65535); anything larger is refused (0),
 *     never written past buf.
 *
 * No FUSE, no allocation, no printing.
 */
#ifndef GGUF_NPY_H
#define GGUF_NPY_H

#include <stddef.h>
#include <stdint.h>

/* The longest header gguf_npy_header writes, and the longest dtype it
 * takes (numpy's dtype.str, "<f4", "|i1": three bytes). */
#define GGUF_NPY_HEADER_MAX 256
#define GGUF_NPY_DESCR_MAX 8

/* Writes the NPY header of an array of dtype descr and n_dims dimensions
 * ne[0..n_dims) (GGUF's order) into buf (GGUF_NPY_HEADER_MAX bytes); its
 * length, a multiple of 64.  0 (nothing written) when n_dims is over
 * GGUF_MAX_DIMS or descr is longer than GGUF_NPY_DESCR_MAX. */
size_t gguf_npy_header(const char *descr, uint32_t n_dims, const uint64_t *ne, char *buf);

#endif

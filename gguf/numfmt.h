/*
 * gguf/numfmt.h — numbers as text: decimal integers, and floats as the
 * shortest text that reads back to the same bits.
 *
 * Floats (gguf_fmt_f32, gguf_fmt_f64):
 *   - the fewest significant digits for which strtof (f32) or strtod (f64)
 *     gives back exactly the same bits, correctly rounded;
 *   - fixed notation when the decimal exponent is in [-4, 16), otherwise as
 *     %g does: "1e-06", "10000", "0.0001", "1e+16", "3.4028235e+38"; no
 *     trailing ".0";
 *   - "-0", "inf", "-inf"; "nan" and "-nan" for the default quiet NaN, and
 *     "nan(0xPAYLOAD)" (the mantissa bits in hex) for any other NaN, so that
 *     every bit pattern has a text of its own.
 * Integers: optional '-', then decimal digits, no leading zeros.
 *
 * Speed matters: vocabularies carry 100k+ scores per key.  A float costs
 * one snprintf of all its digits, a few strtof/strtod calls and one final
 * snprintf, not a printf per precision; integers below 2^24 (f32) or 2^53
 * (f64) are written as integers directly.
 *
 * Formatting and strtod depend on LC_NUMERIC; gguffs never calls
 * setlocale, so both use the "C" locale.
 *
 * This library includes no FUSE header and performs no printing.
 */
#ifndef GGUF_NUMFMT_H
#define GGUF_NUMFMT_H

#include <stddef.h>
#include <stdint.h>

/* Room that any of the calls below needs, NUL included. */
#define GGUF_FMT_MAX 48

/* Write NUL-terminated text into buf (at least GGUF_FMT_MAX bytes, or cap
 * bytes, cap >= GGUF_FMT_MAX) and return its length. */
size_t gguf_fmt_u64(uint64_t v, char *buf);
size_t gguf_fmt_i64(int64_t v, char *buf);
size_t gguf_fmt_f32(float v, char *buf, size_t cap);
size_t gguf_fmt_f64(double v, char *buf, size_t cap);

#endif

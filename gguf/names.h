/*
 * gguf/names.h — key and tensor names as file names, and back.
 *
 * A GGUF key or tensor name is any byte string; a file name cannot contain
 * '/' or NUL, cannot be "." or ".." and cannot be empty.  Names are shown
 * with this escaping (and user-written file names are decoded the same way):
 *
 *   '/' -> "%2F"   '%' -> "%25"   NUL -> "%00"   a leading '.' -> "%2E"
 *   the empty name -> "%"
 *
 * and, in a name that ends in '#' followed only by digits, that last '#'
 * -> "%23" (so that "x#2" cannot be mistaken for the 2nd occurrence of x).
 * Every other byte is kept as it is.  A later occurrence of a duplicated key
 * is shown as NAME#2, NAME#3, ... (the suffix is added after escaping).
 * Decoding accepts exactly what encoding produces, plus lower-case hex.
 */
#ifndef GGUF_NAMES_H
#define GGUF_NAMES_H

#include "value.h"

/* Appends the file name for name (len bytes) and duplicate number dup
 * (1 = first occurrence, no suffix) to out. */
bool gguf_name_encode(const char *name, size_t len, unsigned dup,
                      struct gguf_buf *out);

/* Decodes a file name into out (appends the raw name) and *dup (1 when
 * there is no "#N" suffix).  Returns false if fname is not a well-formed
 * encoding (a bare '%' that is not the whole name, bad hex, "#0", ...). */
bool gguf_name_decode(const char *fname, size_t len, struct gguf_buf *out,
                      unsigned *dup);

/* true if name follows the GGUF rule for new keys: non-empty ASCII, '.'-
 * separated lower_snake_case segments ([a-z0-9_]+), shorter than 65536. */
bool gguf_key_name_valid(const char *name, size_t len);

/* true if fname (a file name created in meta/) is a tool's temporary file
 * rather than an attempt at a new key: a name starting with '.' or '#'
 * (editor swap, lock and autosave files), ending with '~' (backups), GNU
 * sed -i's "sed" + 6 letters or digits, or digits only (vim's "4913"
 * probe).  Such files are kept aside until renamed over a key. */
bool gguf_name_is_scratch(const char *fname, size_t len);

#endif

/*
 * gguf/lookup.c — questions asked of a parsed file (gguf.h): a key by
 * name, a key's integer value, whether a name is general.alignment,
 * whether any tensor has bytes.  Linear scans: the callers ask a handful
 * of times per header, never per record.
 */
#include "bytes.h"
#include "gguf.h"

#include <string.h>

int64_t gguf_find_key(const struct gguf_file *f, const char *key, size_t len)
{
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (f->kv[i].key_len == len && memcmp(f->hdr + f->kv[i].key_off, key, len) == 0)
            return (int64_t)i;
    return -1;
}

bool gguf_key_int(const struct gguf_file *f, const char *key, int64_t *out)
{
    int64_t i = gguf_find_key(f, key, strlen(key));
    if (i < 0)
        return false;
    const struct gguf_kv *kv = &f->kv[i];
    const uint8_t *p = f->hdr + kv->val_off;
    switch (kv->type) {
    case GGUF_U8: *out = p[0]; return true;
    case GGUF_I8: *out = (int8_t)p[0]; return true;
    case GGUF_U16: *out = gguf_rd16(&f->enc, p); return true;
    case GGUF_I16: *out = (int16_t)gguf_rd16(&f->enc, p); return true;
    case GGUF_U32: *out = gguf_rd32(&f->enc, p); return true;
    case GGUF_I32: *out = (int32_t)gguf_rd32(&f->enc, p); return true;
    case GGUF_I64: *out = (int64_t)gguf_rd64(&f->enc, p); return true;
    case GGUF_U64: {
        uint64_t v = gguf_rd64(&f->enc, p);
        if (v > INT64_MAX)
            return false;
        *out = (int64_t)v;
        return true;
    }
    default: return false;
    }
}

bool gguf_key_is_alignment(const void *key, size_t len)
{
    return len == 17 && memcmp(key, GGUF_KEY_ALIGNMENT, 17) == 0;
}

bool gguf_has_tensor_data(const struct gguf_file *f)
{
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].nbytes)
            return true;
    return false;
}

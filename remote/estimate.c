/* remote/estimate.c — where a GGUF header probably ends (see estimate.h). */
#include "estimate.h"

#include <string.h>

/* A walk over the bytes of a header read so far (little-endian GGUF v1-v3). */
struct walk {
    const uint8_t *b;
    uint64_t n, pos, size;
    unsigned cw;                /* bytes of a count: 4 in v1, 8 later */
};

static bool w_has(const struct walk *w, uint64_t k)
{
    return k <= w->n - w->pos;
}

static uint64_t w_get(struct walk *w, unsigned k)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < k; i++)
        v |= (uint64_t)w->b[w->pos + i] << (8 * i);
    w->pos += k;
    return v;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* Bytes of a scalar value type (0 for string, array, unknown). */
static unsigned scalar_size(uint32_t t)
{
    static const uint8_t sz[13] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    return t < 13 ? sz[t] : 0;
}

/* Where the header (key/values and tensor infos) probably ends, from its
 * first w->n bytes: what they hold exactly, the rest of a value they cut
 * (an array of strings at the average length of its elements so far),
 * and for what is not there yet what llama.cpp's converters write after
 * a vocabulary of N tokens: scores and token types (4 N bytes each, unless
 * seen), merges for a "gpt2" (BPE) tokenizer (N strings of two tokens),
 * 64 bytes a key/value and 16 KiB (a chat template), 96 bytes a tensor
 * info.  An estimate, not a bound: the next range starts where it fell
 * short.  false when the bytes are not a header this walk knows. */
static bool estimate_end(struct walk *w, uint64_t *out)
{
    if (!w_has(w, 8) || memcmp(w->b, "GGUF", 4) != 0)
        return false;
    w->pos = 4;
    uint32_t ver = (uint32_t)w_get(w, 4);
    if (ver < 1 || ver > 3)
        return false;
    w->cw = ver == 1 ? 4 : 8;
    if (!w_has(w, 2 * w->cw))
        return false;
    uint64_t n_tensors = w_get(w, w->cw), n_kv = w_get(w, w->cw);
    uint64_t ntok = 0, tok_bytes = 0, extra = 0, k;
    bool cut = false, gpt2 = false, seen_scores = false, seen_types = false, seen_merges = false;
    for (k = 0; k < n_kv && !cut; k++) {
        if (!w_has(w, w->cw)) {
            cut = true;
            break;
        }
        uint64_t klen = w_get(w, w->cw);
        if (klen > 65535)
            return false;
        if (!w_has(w, klen + 4)) {
            cut = true;
            break;
        }
        const char *key = (const char *)w->b + w->pos;
        w->pos += klen;
#define IS(name) (klen == sizeof(name) - 1 && memcmp(key, name, klen) == 0)
        bool tokens = IS("tokenizer.ggml.tokens"), model = IS("tokenizer.ggml.model");
        seen_scores |= IS("tokenizer.ggml.scores");
        seen_types |= IS("tokenizer.ggml.token_type");
        seen_merges |= IS("tokenizer.ggml.merges");
#undef IS
        uint32_t vt = (uint32_t)w_get(w, 4);
        if (scalar_size(vt)) {
            if (!w_has(w, scalar_size(vt))) {
                extra = scalar_size(vt);
                cut = true;
            } else {
                w->pos += scalar_size(vt);
            }
        } else if (vt == 8) {
            if (!w_has(w, w->cw)) {
                cut = true;
                break;
            }
            uint64_t slen = w_get(w, w->cw);
            if (slen > w->size)
                return false;
            if (!w_has(w, slen)) {
                extra = slen - (w->n - w->pos);
                cut = true;
            } else {
                if (model)
                    gpt2 = slen == 4 && memcmp(w->b + w->pos, "gpt2", 4) == 0;
                w->pos += slen;
            }
        } else if (vt == 9) {
            if (!w_has(w, 4 + w->cw)) {
                cut = true;
                break;
            }
            uint32_t et = (uint32_t)w_get(w, 4);
            uint64_t cnt = w_get(w, w->cw);
            if (scalar_size(et)) {
                uint64_t bytes = sat_mul(cnt, scalar_size(et));
                if (bytes > w->size)
                    return false;
                if (!w_has(w, bytes)) {
                    extra = bytes - (w->n - w->pos);
                    cut = true;
                } else {
                    w->pos += bytes;
                }
            } else if (et == 8) {
                if (cnt > w->size / w->cw)
                    return false;
                uint64_t start = w->pos, i;
                for (i = 0; i < cnt; i++) {
                    if (!w_has(w, w->cw))
                        break;
                    uint64_t at = w->pos;
                    uint64_t l = w_get(w, w->cw);
                    if (l > w->size)
                        return false;
                    if (!w_has(w, l)) {
                        w->pos = at;
                        break;
                    }
                    w->pos += l;
                }
                uint64_t avg = i ? (w->pos - start) / i : 16;
                if (tokens) {
                    ntok = cnt;
                    tok_bytes = avg;
                }
                if (i < cnt) {
                    extra = sat_mul(cnt - i, avg);
                    cut = true;
                }
            } else {
                return false;
            }
        } else {
            return false;
        }
    }
    uint64_t end = sat_add(w->pos, extra);
    if (cut) {
        uint64_t left = n_kv - k;       /* after the one cut */
        if (ntok) {
            if (!seen_scores)
                end = sat_add(end, sat_mul(ntok, 4));
            if (!seen_types)
                end = sat_add(end, sat_mul(ntok, 4));
            if (gpt2 && !seen_merges && tok_bytes >= w->cw)
                end = sat_add(end, sat_mul(ntok, w->cw + 2 * (tok_bytes - w->cw) + 1));
        }
        end = sat_add(end, sat_add(sat_mul(left, 64), 16u << 10));
        end = sat_add(end, sat_mul(n_tensors, 96));
    } else {
        /* the tensor infos: name, n_dims, dims, type, offset */
        uint64_t start = w->pos, t;
        for (t = 0; t < n_tensors; t++) {
            uint64_t at = w->pos;
            if (!w_has(w, w->cw))
                break;
            uint64_t l = w_get(w, w->cw);
            if (l > 65535 || !w_has(w, l + 4)) {
                w->pos = at;
                break;
            }
            w->pos += l;
            uint64_t nd = w_get(w, 4);
            if (nd > 64)
                return false;
            if (!w_has(w, nd * w->cw + 12)) {
                w->pos = at;
                break;
            }
            w->pos += nd * w->cw + 12;
        }
        uint64_t avg = t ? (w->pos - start) / t : 96;
        end = sat_add(w->pos, sat_mul(n_tensors - t, avg));
    }
    *out = end;
    return true;
}

bool remote_header_estimate(const uint8_t *bytes, uint64_t n, uint64_t size, uint64_t *end)
{
    struct walk w = { .b = bytes, .n = n, .size = size };
    return bytes && estimate_end(&w, end);
}

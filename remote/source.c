/* remote/source.c — a remote object as a gguf_source (see source.h). */
#include "source.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Past the end the bytes read so far foretell, a stream range runs this
 * much further (and at least this far: the parser reads 1 MiB ahead);
 * from the third range on twice as far as the one before, so that a header
 * the estimate keeps missing costs a logarithmic number of requests. */
#define EST_MARGIN (1u << 20)

struct remote_source {
    struct gguf_source s;
    struct remote *r;
    atomic_bool opening;        /* the stream may be used */
    pthread_mutex_t mu;         /* the fields below */
    struct remote_stream *st;   /* the current range, or NULL */
    uint64_t st_last;           /* its last byte */
    uint64_t next;              /* after a range: where the next one starts */
    unsigned ranges;            /* ranges started */
    bool no_stream;             /* plain ranges from now on */
    /* the parser's bytes 0..head_len-1 (rsrc_head), for the read from
     * head_len that follows only: from_stream clears it; a read it does not
     * reach is served by the prefix, so head_len < any offset from_stream
     * sees and a stale pointer is never used */
    const uint8_t *head;
    size_t head_len;
};

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

/* ---- where the header ends: an estimate from its first bytes ------------------------ */

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

/* The last byte of the next stream range, from off: the margin past where
 * the header's first off bytes say it ends, and at least past off;
 * UINT64_MAX (to the end of the file) when they say nothing. */
static uint64_t range_last(struct remote_source *rs, uint64_t off)
{
    uint64_t end;
    size_t plen;
    const uint8_t *prefix = remote_prefix(rs->r, &plen);
    struct walk w = { .b = rs->head, .n = rs->head_len, .size = rs->s.size };
    if (!rs->head || rs->head_len != off) {
        w.b = prefix;           /* without the parser's bytes: the prefix's */
        w.n = plen;
    }
    if (!w.b || w.n != off || !estimate_end(&w, &end))
        return UINT64_MAX;
    if (end < off)
        end = off;
    unsigned doublings = rs->ranges < 2 ? 0 : rs->ranges - 1;
    if (doublings > 10)
        doublings = 10;
    return sat_add(end, ((uint64_t)EST_MARGIN << doublings) - 1);
}

static void stream_end(struct remote_source *rs)
{
    remote_stream_stop(rs->st);
    rs->st = NULL;
}

/* Serves what follows the stream's position from the stream; returns the
 * bytes taken (0: the caller reads with remote_read) and sets *range_end
 * when they end the current range (the caller returns a short read). */
static size_t from_stream(struct remote_source *rs, uint8_t *buf, size_t len, uint64_t off,
                          bool *range_end)
{
    size_t n = 0;
    pthread_mutex_lock(&rs->mu);
    if (!atomic_load(&rs->opening) || rs->no_stream)
        goto out;
    if ((rs->st && remote_stream_pos(rs->st) != off) || (!rs->st && rs->next && rs->next != off)) {
        if (rs->st)
            stream_end(rs);     /* not followed: plain ranges from now on */
        rs->no_stream = true;
        goto out;
    }
    if (!rs->st) {
        uint64_t last = range_last(rs, off);
        rs->st = remote_stream_start(rs->r, off, last);
        if (!rs->st) {
            rs->no_stream = true;
            goto out;
        }
        rs->ranges++;
        rs->st_last = last < rs->s.size - 1 ? last : rs->s.size - 1;
    }
    size_t want = len;
    if (want > rs->st_last - off + 1)
        want = (size_t)(rs->st_last - off + 1);
    n = remote_stream_read(rs->st, buf, want);
    if (n < want) {
        stream_end(rs);         /* ended early or failed */
        rs->no_stream = true;
    } else if (off + n == rs->st_last + 1) {
        stream_end(rs);         /* the range is done; the next read starts another */
        rs->next = rs->st_last + 1;
        *range_end = rs->next < rs->s.size;
    }
out:
    rs->head = NULL;
    pthread_mutex_unlock(&rs->mu);
    return n;
}

static ssize_t rsrc_read(struct gguf_source *s, void *vbuf, size_t len, uint64_t off)
{
    struct remote_source *rs = (struct remote_source *)s;
    uint8_t *buf = vbuf;
    if (off >= s->size || len == 0)
        return 0;
    if (len > s->size - off)
        len = (size_t)(s->size - off);
    if (len > (size_t)SSIZE_MAX)
        len = (size_t)SSIZE_MAX & ~(size_t)4095;
    size_t done = 0;
    size_t plen;
    const uint8_t *prefix = remote_prefix(rs->r, &plen);
    if (prefix && off < plen) {
        done = len < plen - off ? len : (size_t)(plen - off);
        memcpy(buf, prefix + off, done);
    }
    if (done < len && atomic_load(&rs->opening)) {
        bool range_end = false;
        done += from_stream(rs, buf + done, len - done, off + done, &range_end);
        if (range_end && done < len)
            return (ssize_t)done;
    }
    while (done < len) {
        ssize_t r = remote_read(rs->r, buf + done, len - done, off + done);
        if (r < 0)
            return r;
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static void rsrc_head(struct gguf_source *s, const void *bytes, size_t len)
{
    struct remote_source *rs = (struct remote_source *)s;
    if (!atomic_load(&rs->opening))
        return;
    pthread_mutex_lock(&rs->mu);
    rs->head = bytes;
    rs->head_len = len;
    pthread_mutex_unlock(&rs->mu);
}

static void rsrc_close(struct gguf_source *s)
{
    struct remote_source *rs = (struct remote_source *)s;
    remote_source_opened(s);
    remote_close(rs->r);
    pthread_mutex_destroy(&rs->mu);
    free(s->name);
    free(s->identity);
    free(rs);
}

static const struct gguf_source_ops remote_ops = { .read = rsrc_read, .close = rsrc_close,
                                                    .head = rsrc_head };

enum gguf_err remote_source_open(const struct remote_opts *opts, struct gguf_source **out,
                                 struct gguf_diag *diag)
{
    *out = NULL;
    struct remote *r;
    enum gguf_err e = remote_open(opts, &r, diag);
    if (e)
        return e;
    struct remote_source *rs = calloc(1, sizeof *rs);
    if (rs) {
        rs->s.name = dup_str(remote_display_url(r));
        rs->s.identity = dup_str(remote_identity(r));
    }
    if (!rs || !rs->s.name || !rs->s.identity) {
        if (rs) {
            free(rs->s.name);
            free(rs->s.identity);
            free(rs);
        }
        remote_close(r);
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    rs->s.ops = &remote_ops;
    rs->s.size = remote_size(r);
    rs->s.fd = -1;
    rs->r = r;
    atomic_init(&rs->opening, true);
    pthread_mutex_init(&rs->mu, NULL);
    *out = &rs->s;
    return GGUF_OK;
}

void remote_source_opened(struct gguf_source *s)
{
    if (!s || s->ops != &remote_ops)
        return;
    struct remote_source *rs = (struct remote_source *)s;
    pthread_mutex_lock(&rs->mu);
    atomic_store(&rs->opening, false);
    if (rs->st)
        stream_end(rs);
    rs->head = NULL;
    pthread_mutex_unlock(&rs->mu);
}

struct remote *remote_source_remote(struct gguf_source *s)
{
    if (!s || s->ops != &remote_ops)
        return NULL;
    return ((struct remote_source *)s)->r;
}

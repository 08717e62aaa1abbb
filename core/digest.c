/*
 * core/digest.c — xxh64 (libxxhash) and sha256 (OpenSSL's libcrypto) over
 * the same bytes, and the lines of /hashes, as llama-gguf-hash prints
 * them.  What reads the bytes and keeps the texts is core/digests.c's.
 */
#include "digest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <xxhash.h>

struct core_hash {
    XXH64_state_t *x;
    EVP_MD_CTX *s;
};

struct core_hash *core_hash_new(void)
{
    struct core_hash *h = malloc(sizeof *h);
    if (!h)
        return NULL;
    h->x = XXH64_createState();
    h->s = EVP_MD_CTX_new();
    if (!h->x || !h->s) {
        core_hash_free(h);
        return NULL;
    }
    return h;
}

void core_hash_free(struct core_hash *h)
{
    if (!h)
        return;
    EVP_MD_CTX_free(h->s);
    XXH64_freeState(h->x);
    free(h);
}

int core_hash_reset(struct core_hash *h)
{
    return XXH64_reset(h->x, 0) == XXH_ERROR || !EVP_DigestInit_ex(h->s, EVP_sha256(), NULL) ?
           ENOMEM : 0;
}

int core_hash_update(struct core_hash *h, const void *p, size_t n)
{
    return XXH64_update(h->x, p, n) == XXH_ERROR || !EVP_DigestUpdate(h->s, p, n) ? ENOMEM : 0;
}

/* Lower-case hex of n bytes, then "\n", into out (2n + 1 bytes, no NUL). */
static void hex_line(const unsigned char *p, size_t n, char *out)
{
    static const char digit[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digit[p[i] >> 4];
        out[2 * i + 1] = digit[p[i] & 15];
    }
    out[2 * n] = '\n';
}

int core_hash_hex(struct core_hash *h, char xxh[CORE_XXH64_HEX], char sha[CORE_SHA256_HEX])
{
    /* xxh64 as llama-gguf-hash prints it: the canonical (big-endian) bytes */
    XXH64_canonical_t c;
    XXH64_canonicalFromHash(&c, XXH64_digest(h->x));
    hex_line(c.digest, sizeof c.digest, xxh);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (!EVP_DigestFinal_ex(h->s, md, &len) || len != 32)
        return ENOMEM;
    hex_line(md, 32, sha);
    return 0;
}

uint64_t core_hash_line_len(uint64_t hex_len, bool named, uint64_t name_len)
{
    /* "%-8s  " (the types are at most 8), hex, "  model.gguf", ":" name, "\n" */
    return 8 + 2 + (hex_len - 1) + 12 + (named ? 1 + name_len : 0) + 1;
}

void core_hash_line(struct gguf_buf *b, const char *type, const char *hex, size_t hex_len,
                    const char *name, size_t name_len)
{
    gguf_buf_printf(b, "%-8s  ", type);
    gguf_buf_put(b, hex, hex_len - 1);
    gguf_buf_put(b, "  model.gguf", 12);
    if (name) {
        gguf_buf_putc(b, ':');
        gguf_buf_put(b, name, name_len);
    }
    gguf_buf_putc(b, '\n');
}

size_t core_hash_name_len(const char *name, size_t len)
{
    const char *nul = memchr(name, '\0', len);
    return nul ? (size_t)(nul - name) : len;
}

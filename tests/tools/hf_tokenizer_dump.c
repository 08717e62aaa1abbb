/*
 * tests/tools/hf_tokenizer_dump.c — writes a GGUF's tokenizer as Hugging
 * Face files (gguf/hf_tokenizer.h): DIR/tokenizer.json and
 * DIR/tokenizer_config.json.
 *
 *     hf_tokenizer_dump MODEL.gguf DIR
 *
 * Exit 0: both written; 1: the tokenizer is not expressible (the one-line
 * reason on stderr, nothing written); 2: usage, an unreadable model or a
 * failed write.  tests/integration/test_hf_tokenizer.py compares what
 * transformers makes of the files with its own GGUF path.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/hf_tokenizer.h"

static int write_file(const char *dir, const char *name, const struct gguf_buf *b)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        fprintf(stderr, "hf_tokenizer_dump: %s: path too long\n", dir);
        return 2;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->data, 1, b->len, f) != b->len || fclose(f) != 0) {
        fprintf(stderr, "hf_tokenizer_dump: %s: %s\n", path, strerror(errno));
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: hf_tokenizer_dump MODEL.gguf DIR\n");
        return 2;
    }
    struct gguf_file *gf;
    struct gguf_diag d;
    if (gguf_open(argv[1], &gf, &d) != GGUF_OK) {
        fprintf(stderr, "hf_tokenizer_dump: %s: %s\n", argv[1], d.msg);
        return 2;
    }
    struct gguf_buf tj = { 0 }, tc = { 0 };
    char why[256];
    int r = gguf_hf_tokenizer_json(gf, &tj, why, sizeof why);
    if (r == 0)
        r = gguf_hf_tokenizer_config_json(gf, &tc, why, sizeof why);
    int rc = 0;
    if (r != 0) {
        fprintf(stderr, "hf_tokenizer_dump: %s: %s\n", argv[1], why);
        rc = r > 0 ? 1 : 2;
    } else {
        rc = write_file(argv[2], "tokenizer.json", &tj);
        if (!rc)
            rc = write_file(argv[2], "tokenizer_config.json", &tc);
    }
    gguf_buf_free(&tj);
    gguf_buf_free(&tc);
    gguf_close(gf);
    return rc;
}

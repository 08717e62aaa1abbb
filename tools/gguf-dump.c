/*
 * tools/gguf-dump.c — prints what MOUNTPOINT/info shows, without FUSE.
 * Linked against gguf/ alone: the build proves the core needs no FUSE.
 */
#include "gguf/info.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gguf-dump MODEL.gguf\n");
        return 2;
    }
    struct gguf_file *f;
    struct gguf_diag d;
    if (gguf_open(argv[1], &f, &d) != GGUF_OK) {
        char line[512];
        gguf_diag_format(&d, argv[1], line, sizeof line);
        fprintf(stderr, "gguf-dump: %s\n", line);
        return 1;
    }
    struct gguf_buf b = { 0 };
    enum gguf_err e = gguf_info_render(f, argv[1], &b);
    if (e == GGUF_OK)
        fwrite(b.data, 1, b.len, stdout);
    gguf_buf_free(&b);
    gguf_close(f);
    return e == GGUF_OK ? 0 : 1;
}

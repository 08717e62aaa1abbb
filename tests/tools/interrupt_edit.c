/*
 * tests/tools/interrupt_edit.c — leaves an edit interrupted, as a crash
 * would: sets KEY of MODEL to VALUE as a mount does (gguf_commit_edit:
 * padded where that keeps the edit in place or lets it clone) and exits at
 * the commit step named STEP, or at its K-th occurrence with "STEP@K"
 * (default "writing the header in place@2": with a same-size value, the
 * new header is written in place up to its half, a torn write, and the
 * undo journal is still there), or, when STEP is "#N", before the step
 * numbered N (0, 1, ...: every step in turn, torn writes included, as the
 * test hooks split them).
 *
 *   interrupt_edit MODEL KEY VALUE [STEP]
 *
 * Prints "stopped before step N: NAME" when it stops; "done: in place |
 * cloned | copied, header H bytes" when the commit ran to its end.  Exit
 * status 0 when it stopped at that step, 1 on any error (with a line on
 * stderr), 2 if the commit ran to its end without reaching the step.
 * For tests of recovery through the mount (tests/integration).
 */
#include "gguf/commit.h"
#include "gguf/kvedit.h"
#include "gguf/source.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct gguf_edit_hooks hooks;

static void stop_at(unsigned n, const char *what, void *arg)
{
    static unsigned seen;
    const char *step = arg, *at = strrchr(step, '@');
    size_t len = at ? (size_t)(at - step) : strlen(step);
    unsigned long k = at ? strtoul(at + 1, NULL, 10) : 1;
    bool hit = step[0] == '#' ? strtoul(step + 1, NULL, 10) == n
             : strlen(what) == len && memcmp(what, step, len) == 0 && ++seen == k;
    if (hit) {
        printf("stopped before step %u: %s\n", n, what);
        fflush(stdout);
        _exit(0);
    }
}

int main(int argc, char *argv[])
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: interrupt_edit MODEL KEY VALUE [STEP]\n");
        return 1;
    }
    const char *step = argc == 5 ? argv[4] : "writing the header in place@2";
    struct gguf_source *src = NULL;
    struct gguf_file *f = NULL;
    struct gguf_diag d;
    struct gguf_buf hdr = { 0 };
    char line[1024];
    int rc = 1;
    enum gguf_err e = gguf_source_file(argv[1], &src, &d);
    if (!e && (e = gguf_open_source(src, &f, &d)) == GGUF_OK) {
        int64_t i = gguf_find_key(f, argv[2], strlen(argv[2]));
        e = i < 0 ? gguf_diag_set(&d, GGUF_E_NOENT, UINT64_MAX, "no key %s", argv[2])
                  : gguf_kvedit_set(f, (uint64_t)i, argv[3], strlen(argv[3]), &hdr, &d);
        hooks.step = stop_at;
        hooks.arg = (void *)step;
        gguf_edit_hooks = &hooks;
        struct gguf_commit_info how;
        if (!e)
            e = gguf_commit_edit(argv[1], f, src, (const uint8_t *)hdr.data, hdr.len, &how,
                                 &d);
        if (!e) {
            printf("done: %s, header %llu bytes\n", how.in_place ? "in place" : how.cloned
                   ? "cloned" : "copied", (unsigned long long)how.hdr_len);
            rc = 2;
        }
    }
    if (rc == 1) {
        gguf_diag_format(&d, argv[1], line, sizeof line);
        fprintf(stderr, "interrupt_edit: %s\n", line);
    }
    gguf_buf_free(&hdr);
    gguf_close(f);
    gguf_source_close(src);
    return rc;
}

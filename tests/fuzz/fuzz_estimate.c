/*
 * tests/fuzz/fuzz_estimate.c — libFuzzer harness for the estimate of where
 * a remote model's header ends (remote/estimate.h), which walks the first
 * bytes a server sent.
 *
 * The input is those bytes, copied to a heap block of their exact size
 * (ASan catches a read past it).  The file they begin is as large as the
 * input, or, when its last byte is odd, 2^20 times larger (so that counts
 * checked against the file's size can be large).  Every prefix length the
 * parser could hand over (up to 65, spread over the input) is tried on
 * the same bytes: the walk must not read past n (ASan), must end
 * (libFuzzer's -timeout catches a walk that is not linear), must overflow
 * nothing (UBSan), must not claim an estimate from fewer than the 8 bytes
 * of magic and version, and must give the same answer twice.
 */
#include "fuzz_common.h"
#include "remote/estimate.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *b = malloc(size ? size : 1);
    if (!b)
        return 0;
    memcpy(b, data, size);
    uint64_t file = size;
    if (size && (data[size - 1] & 1))
        file = (uint64_t)size << 20;
    /* every length, up to 64 of them spread over the input */
    size_t step = size / 64 + 1;
    for (size_t n = 0; n <= size; n += step) {
        uint64_t end = 0;
        if (remote_header_estimate(b, n, file, &end) && n < 8)
            __builtin_trap();           /* a header needs its first 8 bytes */
        uint64_t again = 0;
        bool ok = remote_header_estimate(b, n, file, &again);
        if (ok && again != end)
            __builtin_trap();           /* pure: the same bytes, the same answer */
    }
    free(b);
    return 0;
}

/*
 * tests/unit/test_diskcache.c — the persistent disk cache (cache/diskcache.h),
 * without FUSE: CRC32C (known value, the SSE4.2 code against the portable
 * one), round trips, a reopen that finds the blocks, a foreign or damaged
 * file rebuilt (another identity, another block size, a flipped header
 * byte, a truncated map, a data file of the wrong length), a flipped data
 * byte or entry (that block dropped, the others kept), the bound (the
 * files' st_blocks after a flush, eviction of this model's blocks and of
 * other idle models, least recently used first, never of one that is
 * open), the lock, one sync per block against batches (counted), holds
 * for spliced replies (checked once, a damaged block dropped, never
 * evicted while held) and checks ahead, and 8 threads reading, holding and
 * writing at once under a bound that keeps evicting.
 *
 * Nothing here sleeps or looks at a clock: flushes are asked for
 * (dcache_flush, dcache_close) and counted.  Worker threads count what
 * they saw; the main thread checks the counts.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/blocksrc.h"
#include "cache/diskcache.h"

#define BS (64u << 10)               /* block size of the tests */
#define NB 21u                       /* blocks: 20 full and a short one */
#define SIZE ((uint64_t)(NB - 1) * BS + 12345)
#define BIG (1ull << 40)             /* a bound that is never reached */

static char dir[4096];

/* Byte i of block b of the object seeded seed. */
static uint8_t pat(unsigned seed, uint64_t b, size_t i)
{
    uint32_t x = (uint32_t)(b * 2654435761u) ^ (uint32_t)(i * 40503u) ^ (seed * 97u);
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    return (uint8_t)(x >> 15);
}

static void fill(unsigned seed, uint64_t b, uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = pat(seed, b, i);
}

static bool check(unsigned seed, uint64_t b, const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pat(seed, b, i))
            return false;
    return true;
}

static size_t blen(uint64_t b)
{
    return b + 1 < NB ? BS : (size_t)(SIZE - (uint64_t)(NB - 1) * BS);
}

static void rm_dir_files(void)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.')
            unlinkat(dirfd(d), de->d_name, 0);
    closedir(d);
}

static int setup(void **state)
{
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/gguffs-dcache-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir))
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    rm_dir_files();
    rmdir(dir);
    return 0;
}

static int clean(void **state)
{
    (void)state;
    rm_dir_files();
    return 0;
}

static struct dcache *open_ok(const char *id, uint64_t size, uint64_t max)
{
    struct dcache *dc = NULL;
    struct gguf_diag d;
    enum gguf_err e = dcache_open(dir, id, size, BS, max, &dc, &d);
    if (e)
        fail_msg("dcache_open: %s", d.msg);
    return dc;
}

static void write_block(struct dcache *dc, unsigned seed, uint64_t b)
{
    static uint8_t buf[BS];
    fill(seed, b, buf, blen(b));
    dcache_write(dc, b, buf, blen(b));
}

/* true if the cache has block b with exactly its bytes */
static bool read_block(struct dcache *dc, unsigned seed, uint64_t b)
{
    static uint8_t buf[BS];
    if (!dcache_read(dc, b, buf, blen(b)))
        return false;
    assert_true(check(seed, b, buf, blen(b)));
    return true;
}

static void path_of(const char *id, uint64_t size, const char *ext, char *out, size_t cap)
{
    char base[32];
    dcache_file_base(id, size, base, sizeof base);
    snprintf(out, cap, "%s/%s.%s", dir, base, ext);
}

static void flip_byte(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t c;
    assert_int_equal(pread(fd, &c, 1, off), 1);
    c ^= 0x10;
    assert_int_equal(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

static uint64_t allocated(const char *path)
{
    struct stat s;
    if (stat(path, &s) != 0)
        return 0;
    return (uint64_t)s.st_blocks * 512;
}

/* Every dc-* file of dir: bytes allocated. */
static uint64_t dir_allocated(void)
{
    DIR *d = opendir(dir);
    uint64_t sum = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        struct stat s;
        if (strncmp(de->d_name, "dc-", 3) == 0 && fstatat(dirfd(d), de->d_name, &s, 0) == 0)
            sum += (uint64_t)s.st_blocks * 512;
    }
    closedir(d);
    return sum;
}

/* ---- CRC32C ----------------------------------------------------------------- */

static void test_crc(void **state)
{
    (void)state;
    assert_int_equal(dcache_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(dcache_crc32c_sw(0, "123456789", 9), 0xE3069283u);
    static uint8_t buf[4096 + 16];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = pat(7, 3, i);
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len < 100; len += 7)
            assert_int_equal(dcache_crc32c(0, buf + off, len), dcache_crc32c_sw(0, buf + off, len));
    /* continuing a CRC is the CRC of the whole */
    uint32_t c = dcache_crc32c(0, buf, 1000);
    assert_int_equal(dcache_crc32c(c, buf + 1000, 3000), dcache_crc32c(0, buf, 4000));
    assert_int_equal(dcache_crc32c(0, buf, 4096), dcache_crc32c_sw(0, buf, 4096));
    /* long runs take three interleaved streams joined at the end: every
     * length around the switch and the thirds' rounding, and a start CRC */
    for (size_t off = 0; off < 9; off += 3)
        for (size_t len = 1000; len < 1100; len++)
            assert_int_equal(dcache_crc32c(0x1234567u, buf + off, len),
                             dcache_crc32c_sw(0x1234567u, buf + off, len));
    static uint8_t big[(1u << 20) + 77];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = pat(11, 5, i);
    assert_int_equal(dcache_crc32c(0, big, sizeof big), dcache_crc32c_sw(0, big, sizeof big));
    assert_int_equal(dcache_crc32c(9, big + 1, sizeof big - 1), dcache_crc32c_sw(9, big + 1, sizeof big - 1));
}

/* ---- round trips ---------------------------------------------------------------- */

static void test_round_trip(void **state)
{
    (void)state;
    struct dcache *dc = open_ok("etag:\"abc\"", SIZE, BIG);
    struct dcache_stats s;
    dcache_get_stats(dc, &s);
    assert_true(s.reset);           /* new files */
    assert_int_equal(dcache_blocks(dc), NB);
    assert_int_equal(dcache_block_len(dc, NB - 1), 12345);
    assert_int_equal(dcache_block_len(dc, NB), 0);
    for (uint64_t b = 0; b < NB; b++)
        assert_false(read_block(dc, 1, b));
    for (uint64_t b = 0; b < NB; b += 2)
        write_block(dc, 1, b);
    /* readable at once, before any flush */
    for (uint64_t b = 0; b < NB; b++)
        assert_int_equal(read_block(dc, 1, b), b % 2 == 0);
    /* a wrong length is a miss, and is not stored */
    uint8_t buf[BS];
    assert_false(dcache_read(dc, 0, buf, BS - 1));
    dcache_write(dc, 1, buf, BS - 1);
    assert_false(dcache_read(dc, 1, buf, BS));
    assert_false(dcache_read(dc, NB, buf, BS));
    dcache_flush(dc);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.stored, (NB + 1) / 2);
    assert_int_equal(s.blocks, (NB + 1) / 2);
    assert_int_equal(s.hits, (NB + 1) / 2);
    assert_int_equal(s.rejected, 0);
    assert_int_equal(s.evicted, 0);
    /* storing again changes nothing */
    write_block(dc, 1, 0);
    dcache_flush(dc);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.stored, (NB + 1) / 2);
    dcache_close(dc);

    /* reopened: the blocks are there */
    dc = open_ok("etag:\"abc\"", SIZE, BIG);
    dcache_get_stats(dc, &s);
    assert_false(s.reset);
    assert_int_equal(s.blocks, (NB + 1) / 2);
    for (uint64_t b = 0; b < NB; b++)
        assert_int_equal(read_block(dc, 1, b), b % 2 == 0);
    write_block(dc, 1, 1);
    dcache_close(dc);          /* close flushes */
    dc = open_ok("etag:\"abc\"", SIZE, BIG);
    assert_true(read_block(dc, 1, 1));
    /* another size of the same identity: other files */
    struct dcache *other = open_ok("etag:\"abc\"", SIZE + 1, BIG);
    assert_false(read_block(other, 1, 0));
    dcache_close(other);
    dcache_close(dc);
}

static void test_empty_object(void **state)
{
    (void)state;
    struct dcache *dc = open_ok("size:0", 0, BIG);
    assert_int_equal(dcache_blocks(dc), 0);
    uint8_t b[1];
    assert_false(dcache_read(dc, 0, b, 0));
    dcache_write(dc, 0, b, 0);
    dcache_close(dc);
}

static void test_bad_args(void **state)
{
    (void)state;
    struct dcache *dc;
    struct gguf_diag d;
    assert_int_equal(dcache_open(dir, "x", SIZE, 1000, BIG, &dc, &d), GGUF_E_INVAL);
    assert_int_equal(dcache_open(dir, "x", SIZE, 0, BIG, &dc, &d), GGUF_E_INVAL);
    /* too many blocks for a hostile size: refused before any allocation */
    assert_int_equal(dcache_open(dir, "x", UINT64_MAX / 2, 4096, BIG, &dc, &d), GGUF_E_RANGE);
    assert_int_equal(dcache_open(dir, "x", UINT64_MAX, BS, BIG, &dc, &d), GGUF_E_RANGE);
    /* a bound below the map and one block */
    assert_int_equal(dcache_open(dir, "x", SIZE, BS, BS, &dc, &d), GGUF_E_RANGE);
    char *id = malloc(DCACHE_MAX_IDENTITY + 2);
    memset(id, 'a', DCACHE_MAX_IDENTITY + 1);
    id[DCACHE_MAX_IDENTITY + 1] = 0;
    assert_int_equal(dcache_open(dir, id, SIZE, BS, BIG, &dc, &d), GGUF_E_RANGE);
    id[DCACHE_MAX_IDENTITY] = 0;     /* the longest that is kept */
    assert_int_equal(dcache_open(dir, id, SIZE, BS, BIG, &dc, &d), GGUF_OK);
    write_block(dc, 2, 3);
    dcache_close(dc);
    assert_int_equal(dcache_open(dir, id, SIZE, BS, BIG, &dc, &d), GGUF_OK);
    assert_true(read_block(dc, 2, 3));
    dcache_close(dc);
    free(id);
}

/* ---- foreign and damaged files ------------------------------------------------ */

/* A cache of "id" with blocks 0..NB-1 stored, closed. */
static void make_full(const char *id, unsigned seed)
{
    struct dcache *dc = open_ok(id, SIZE, BIG);
    for (uint64_t b = 0; b < NB; b++)
        write_block(dc, seed, b);
    dcache_close(dc);
}

static void expect_reset(const char *id, bool reset)
{
    struct dcache *dc = open_ok(id, SIZE, BIG);
    struct dcache_stats s;
    dcache_get_stats(dc, &s);
    assert_int_equal(s.reset, reset);
    assert_int_equal(s.blocks, reset ? 0 : NB);
    for (uint64_t b = 0; b < NB; b++)
        assert_int_equal(read_block(dc, 5, b), !reset);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.rejected, 0);
    dcache_close(dc);
}

static void test_foreign(void **state)
{
    (void)state;
    /* the files of identity A under identity B's names (as a hash
     * collision would have them): B finds them foreign */
    make_full("etag:\"A\"", 5);
    char a_map[4200], a_data[4200], b_map[4200], b_data[4200];
    path_of("etag:\"A\"", SIZE, "map", a_map, sizeof a_map);
    path_of("etag:\"A\"", SIZE, "data", a_data, sizeof a_data);
    path_of("etag:\"B\"", SIZE, "map", b_map, sizeof b_map);
    path_of("etag:\"B\"", SIZE, "data", b_data, sizeof b_data);
    assert_int_equal(rename(a_map, b_map), 0);
    assert_int_equal(rename(a_data, b_data), 0);
    expect_reset("etag:\"B\"", true);
    /* and B's files are B's now */
    struct dcache *dc = open_ok("etag:\"B\"", SIZE, BIG);
    struct dcache_stats s;
    dcache_get_stats(dc, &s);
    assert_false(s.reset);
    dcache_close(dc);
    /* another block size: rebuilt too */
    make_full("etag:\"C\"", 5);
    struct gguf_diag d;
    assert_int_equal(dcache_open(dir, "etag:\"C\"", SIZE, 2 * BS, BIG, &dc, &d), GGUF_OK);
    dcache_get_stats(dc, &s);
    assert_true(s.reset);
    assert_int_equal(s.blocks, 0);
    dcache_close(dc);
}

static void test_corrupt_header(void **state)
{
    (void)state;
    char map[4200], data[4200];
    path_of("etag:\"H\"", SIZE, "map", map, sizeof map);
    path_of("etag:\"H\"", SIZE, "data", data, sizeof data);
    /* every byte of the header's fixed fields and of the identity, and
     * one of the checksum */
    static const off_t at[] = { 0, 7, 8, 12, 16, 23, 24, 28, 32, 40, 44, 48, 52, 4095 };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        make_full("etag:\"H\"", 5);
        expect_reset("etag:\"H\"", false);
        flip_byte(map, at[i]);
        expect_reset("etag:\"H\"", true);
    }
    /* a truncated map, a map one byte too long, a data file cut short */
    make_full("etag:\"H\"", 5);
    assert_int_equal(truncate(map, 4096 + 8 * NB - 3), 0);
    expect_reset("etag:\"H\"", true);
    make_full("etag:\"H\"", 5);
    assert_int_equal(truncate(map, 4096 + 8 * NB + 1), 0);
    expect_reset("etag:\"H\"", true);
    make_full("etag:\"H\"", 5);
    assert_int_equal(truncate(data, (off_t)SIZE - 1), 0);
    expect_reset("etag:\"H\"", true);
    make_full("etag:\"H\"", 5);
    assert_int_equal(truncate(map, 100), 0);
    expect_reset("etag:\"H\"", true);
    /* an empty map */
    make_full("etag:\"H\"", 5);
    assert_int_equal(truncate(map, 0), 0);
    expect_reset("etag:\"H\"", true);
    /* the map is not a regular file: an error, nothing touched */
    unlink(map);
    assert_int_equal(mkdir(map, 0700), 0);
    struct dcache *dc;
    struct gguf_diag d;
    assert_int_equal(dcache_open(dir, "etag:\"H\"", SIZE, BS, BIG, &dc, &d), GGUF_E_IO);
    assert_non_null(strstr(d.msg, ".map"));
    rmdir(map);
}

static void test_corrupt_block(void **state)
{
    (void)state;
    char map[4200], data[4200];
    path_of("etag:\"D\"", SIZE, "map", map, sizeof map);
    path_of("etag:\"D\"", SIZE, "data", data, sizeof data);
    make_full("etag:\"D\"", 5);
    /* a flipped byte in block 3's bytes and in the last block's */
    flip_byte(data, 3 * BS + 777);
    flip_byte(data, (off_t)SIZE - 1);
    /* block 6's entry: its CRC; block 8's: its check */
    flip_byte(map, 4096 + 8 * 6 + 1);
    flip_byte(map, 4096 + 8 * 8 + 6);
    struct dcache *dc = open_ok("etag:\"D\"", SIZE, BIG);
    struct dcache_stats s;
    dcache_get_stats(dc, &s);
    assert_false(s.reset);
    assert_int_equal(s.blocks, NB - 2);     /* the two bad entries: absent */
    for (uint64_t b = 0; b < NB; b++)
        assert_int_equal(read_block(dc, 5, b), b != 3 && b != 6 && b != 8 && b != NB - 1);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.rejected, 2);
    assert_int_equal(s.blocks, NB - 4);
    /* dropped: a second read is a plain miss, and the block can be stored
     * again */
    assert_false(read_block(dc, 5, 3));
    dcache_get_stats(dc, &s);
    assert_int_equal(s.rejected, 2);
    dcache_flush(dc);
    /* the bad blocks were punched after their entries were cleared */
    write_block(dc, 5, 3);
    write_block(dc, 5, 6);
    assert_true(read_block(dc, 5, 3));
    assert_true(read_block(dc, 5, 6));
    dcache_close(dc);
    dc = open_ok("etag:\"D\"", SIZE, BIG);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.blocks, NB - 2);
    assert_true(read_block(dc, 5, 3));
    assert_true(read_block(dc, 5, 6));
    assert_false(read_block(dc, 5, 8));
    assert_false(read_block(dc, 5, NB - 1));
    dcache_get_stats(dc, &s);
    assert_int_equal(s.rejected, 0);
    dcache_close(dc);
    /* a block whose bytes were zeroed (a hole punched behind our back) */
    make_full("etag:\"Z\"", 5);
    path_of("etag:\"Z\"", SIZE, "data", data, sizeof data);
    int fd = open(data, O_RDWR);
    assert_int_equal(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 2 * BS, BS), 0);
    close(fd);
    dc = open_ok("etag:\"Z\"", SIZE, BIG);
    assert_false(read_block(dc, 5, 2));
    assert_true(read_block(dc, 5, 1));
    dcache_get_stats(dc, &s);
    assert_int_equal(s.rejected, 1);
    dcache_close(dc);
}

/* true if dcache_hold holds block b at bytes that are exactly its own
 * (left held: the caller releases). */
static bool hold_block(struct dcache *dc, unsigned seed, uint64_t b)
{
    static uint8_t buf[BS];
    int fd = -1;
    uint64_t pos = 0;
    if (!dcache_hold(dc, b, blen(b), &fd, &pos))
        return false;
    assert_int_equal(pos, b * BS);
    assert_int_equal(pread(fd, buf, blen(b), (off_t)pos), (ssize_t)blen(b));
    assert_true(check(seed, b, buf, blen(b)));
    return true;
}

/* Holds for replies spliced from the data file: only durable blocks, their
 * bytes checked once per process (not again while they stay), a damaged
 * one dropped, a held one never evicted. */
static void test_hold(void **state)
{
    (void)state;
    struct dcache *dc = open_ok("etag:\"K\"", SIZE, BIG);
    struct dcache_stats s;
    /* absent, or written but not yet durable: not held */
    assert_false(hold_block(dc, 5, 0));
    assert_false(dcache_has(dc, 0));
    write_block(dc, 5, 0);
    assert_false(dcache_has(dc, 0));
    assert_false(hold_block(dc, 5, 0));
    dcache_flush(dc);
    assert_true(dcache_has(dc, 0));
    /* what this process stored is not read back to be checked */
    assert_true(hold_block(dc, 5, 0));
    dcache_release(dc, 0);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.hits, 0);
    int fd;
    uint64_t pos;
    assert_false(dcache_hold(dc, 0, BS - 1, &fd, &pos));     /* a wrong length */
    assert_false(dcache_hold(dc, NB, BS, &fd, &pos));
    dcache_close(dc);
    make_full("etag:\"K\"", 5);
    char data[4200];
    path_of("etag:\"K\"", SIZE, "data", data, sizeof data);
    flip_byte(data, 4 * BS + 99);
    /* reopened: the first hold of each block checks it (a hit), the next
     * ones do not; the damaged block is dropped at its first hold */
    dc = open_ok("etag:\"K\"", SIZE, BIG);
    for (int round = 0; round < 2; round++)
        for (uint64_t b = 0; b < NB; b++) {
            assert_int_equal(hold_block(dc, 5, b), b != 4);
            if (b != 4)
                dcache_release(dc, b);
        }
    dcache_get_stats(dc, &s);
    assert_int_equal(s.hits, NB - 1);
    assert_int_equal(s.rejected, 1);
    assert_int_equal(s.misses, 1);
    assert_false(dcache_has(dc, 4));
    assert_false(read_block(dc, 5, 4));
    /* a block dcache_read checked is not checked again */
    dcache_close(dc);
    dc = open_ok("etag:\"K\"", SIZE, BIG);
    assert_true(read_block(dc, 5, 7));
    assert_true(hold_block(dc, 5, 7));
    dcache_release(dc, 7);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.hits, 1);
    dcache_close(dc);
    /* under a bound that keeps evicting, held blocks stay (both holds of
     * block 1 must go before it may) */
    uint64_t max = 12288 + 4 * (uint64_t)BS;
    rm_dir_files();
    dc = open_ok("etag:\"K2\"", SIZE, max);
    write_block(dc, 5, 1);
    dcache_flush(dc);
    assert_true(hold_block(dc, 5, 1));
    assert_true(hold_block(dc, 5, 1));
    for (uint64_t b = 2; b < NB; b++) {
        write_block(dc, 5, b);
        dcache_flush(dc);
    }
    dcache_get_stats(dc, &s);
    assert_true(s.evicted >= NB - 2 - 4);
    assert_true(dcache_has(dc, 1));
    assert_true(hold_block(dc, 5, 1));          /* (its bytes are still there) */
    dcache_release(dc, 1);
    dcache_release(dc, 1);
    dcache_release(dc, 1);
    dcache_close(dc);
}

/* Checks asked for ahead run on the cache's thread: a hold later finds the
 * block checked; a damaged block is dropped there. */
static void test_check_ahead(void **state)
{
    (void)state;
    make_full("etag:\"CA\"", 5);
    char data[4200];
    path_of("etag:\"CA\"", SIZE, "data", data, sizeof data);
    flip_byte(data, 9 * BS + 5);
    struct dcache *dc = open_ok("etag:\"CA\"", SIZE, BIG);
    for (uint64_t b = 0; b < 10; b++)
        dcache_check_ahead(dc, b);
    dcache_check_ahead(dc, NB);                 /* past the end: nothing */
    dcache_checks_wait(dc);
    struct dcache_stats s;
    dcache_get_stats(dc, &s);
    assert_int_equal(s.checked_ahead, 10);
    assert_int_equal(s.hits, 9);
    assert_int_equal(s.rejected, 1);
    assert_false(dcache_has(dc, 9));
    /* checked: holds read nothing more; asking again does nothing */
    for (uint64_t b = 0; b < 9; b++) {
        assert_true(hold_block(dc, 5, b));
        dcache_release(dc, b);
        dcache_check_ahead(dc, b);
    }
    dcache_checks_wait(dc);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.hits, 9);
    assert_int_equal(s.checked_ahead, 10);
    /* a check asked for and a hold of the same block at once: one check */
    dcache_check_ahead(dc, 12);
    assert_true(hold_block(dc, 5, 12));
    dcache_release(dc, 12);
    dcache_checks_wait(dc);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.hits, 10);
    dcache_close(dc);
}

/* Space under blocks that are not stored (written, then a crash before
 * their flush) is given back at the next open. */
static void test_orphan_space(void **state)
{
    (void)state;
    struct dcache *dc = open_ok("etag:\"O\"", SIZE, BIG);
    dcache_close(dc);
    char data[4200];
    path_of("etag:\"O\"", SIZE, "data", data, sizeof data);
    int fd = open(data, O_RDWR);
    static uint8_t buf[BS];
    fill(5, 4, buf, BS);
    assert_int_equal(pwrite(fd, buf, BS, 4 * BS), BS);
    assert_int_equal(pwrite(fd, buf, BS, 9 * BS), BS);
    fsync(fd);
    close(fd);
    assert_true(allocated(data) >= 2 * BS);
    dc = open_ok("etag:\"O\"", SIZE, BIG);
    assert_false(read_block(dc, 5, 4));
    assert_int_equal(allocated(data), 0);
    dcache_close(dc);
}

/* ---- the bound ----------------------------------------------------------------- */

static void test_bound(void **state)
{
    (void)state;
    char map[4200], data[4200];
    path_of("etag:\"M\"", SIZE, "map", map, sizeof map);
    path_of("etag:\"M\"", SIZE, "data", data, sizeof data);
    /* room for the map (8 KiB: 4096 + 21 * 8 in pages), a page for the
     * extent tree, and 8 blocks */
    uint64_t max = 12288 + 8 * (uint64_t)BS;
    struct dcache *dc = open_ok("etag:\"M\"", SIZE, max);
    struct dcache_stats s;
    for (uint64_t b = 0; b < NB; b++) {
        write_block(dc, 5, b);
        dcache_flush(dc);
        assert_true(allocated(map) + allocated(data) <= max);
        dcache_get_stats(dc, &s);
        assert_true(s.bytes_used <= max);
    }
    dcache_get_stats(dc, &s);
    assert_true(s.evicted > 0);
    assert_true(s.blocks <= 8);
    assert_true(s.blocks >= 1);
    assert_int_equal(s.stored, NB);
    /* what is there reads right; the last block written is there */
    unsigned n = 0;
    for (uint64_t b = 0; b < NB; b++)
        n += read_block(dc, 5, b);
    assert_int_equal(n, s.blocks);
    assert_true(read_block(dc, 5, NB - 1));
    dcache_close(dc);
    assert_true(allocated(map) + allocated(data) <= max);
    /* reopened with a bound that holds less than what is there: the
     * first write makes room */
    dc = open_ok("etag:\"M\"", SIZE, 12288 + 2 * (uint64_t)BS);
    write_block(dc, 5, 0);
    dcache_flush(dc);
    assert_true(allocated(map) + allocated(data) <= 12288 + 2 * (uint64_t)BS);
    dcache_close(dc);
}

/* Other models: idle ones are removed, least recently used first; an open
 * one is not touched. */
static void test_bound_others(void **state)
{
    (void)state;
    make_full("etag:\"old\"", 5);
    make_full("etag:\"new\"", 5);
    char old_map[4200], new_map[4200];
    path_of("etag:\"old\"", SIZE, "map", old_map, sizeof old_map);
    path_of("etag:\"new\"", SIZE, "map", new_map, sizeof new_map);
    /* recency from the maps' mtimes, set here rather than waited for */
    struct timespec t[2] = { { 1000000, 0 }, { 1000000, 0 } };
    assert_int_equal(utimensat(AT_FDCWD, old_map, t, 0), 0);
    t[0].tv_sec = t[1].tv_sec = 2000000;
    assert_int_equal(utimensat(AT_FDCWD, new_map, t, 0), 0);
    uint64_t others = dir_allocated();
    /* a bound that holds both and 4 blocks of a third: no removal */
    uint64_t max = others + 12288 + 4 * (uint64_t)BS;
    struct dcache *dc = open_ok("etag:\"third\"", SIZE, max);
    for (uint64_t b = 0; b < 4; b++)
        write_block(dc, 5, b);
    dcache_flush(dc);
    struct dcache_stats s;
    dcache_get_stats(dc, &s);
    assert_int_equal(s.models_removed, 0);
    assert_int_equal(s.evicted, 0);
    /* one block more: the least recently used model goes, whole */
    write_block(dc, 5, 4);
    dcache_flush(dc);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.models_removed, 1);
    assert_int_equal(s.evicted, 0);
    assert_int_equal(access(old_map, F_OK), -1);
    assert_int_equal(access(new_map, F_OK), 0);
    assert_true(dir_allocated() <= max);
    dcache_close(dc);

    /* an open model is never removed: the writer evicts its own blocks */
    rm_dir_files();
    make_full("etag:\"busy\"", 5);
    struct dcache *busy = open_ok("etag:\"busy\"", SIZE, BIG);
    others = dir_allocated();
    max = others + 12288 + 4 * (uint64_t)BS;
    dc = open_ok("etag:\"third\"", SIZE, max);
    for (uint64_t b = 0; b < NB; b++) {
        write_block(dc, 5, b);
        dcache_flush(dc);
        assert_true(dir_allocated() <= max);
    }
    dcache_get_stats(dc, &s);
    assert_int_equal(s.models_removed, 0);
    assert_true(s.evicted > 0);
    dcache_close(dc);
    dcache_get_stats(busy, &s);
    assert_int_equal(s.blocks, NB);
    for (uint64_t b = 0; b < NB; b++)
        assert_true(read_block(busy, 5, b));
    dcache_close(busy);
    /* a bound that an open model fills: nothing stored, counted */
    rm_dir_files();
    make_full("etag:\"busy\"", 5);
    busy = open_ok("etag:\"busy\"", SIZE, BIG);
    dc = open_ok("etag:\"fourth\"", SIZE, dir_allocated() + 12288 + (uint64_t)BS / 2);
    write_block(dc, 5, 0);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.skipped, 1);
    assert_false(read_block(dc, 5, 0));
    dcache_close(dc);
    dcache_close(busy);
}

/* Shards of one model in a group: they share the bound and never remove or
 * count each other. */
static void test_group(void **state)
{
    (void)state;
    struct dcache_group *g = dcache_group_new();
    assert_non_null(g);
    uint64_t max = 2 * 12288 + 10 * (uint64_t)BS;
    struct dcache *a, *b;
    struct gguf_diag d;
    assert_int_equal(dcache_open_in(g, dir, "etag:\"s1\"", SIZE, BS, max, &a, &d), GGUF_OK);
    assert_int_equal(dcache_open_in(g, dir, "etag:\"s2\"", SIZE, BS, max, &b, &d), GGUF_OK);
    for (uint64_t k = 0; k < NB; k++) {
        write_block(a, 5, k);
        write_block(b, 6, k);
        dcache_flush(a);
        dcache_flush(b);
        assert_true(dir_allocated() <= max);
    }
    struct dcache_stats sa, sb;
    dcache_get_stats(a, &sa);
    dcache_get_stats(b, &sb);
    assert_int_equal(sa.models_removed + sb.models_removed, 0);
    assert_int_equal(sa.others_bytes, 0);
    assert_true(sa.blocks >= 1 && sb.blocks >= 1);
    assert_true(sa.blocks + sb.blocks <= 10);
    assert_true(sa.bytes_used + sb.bytes_used <= max);
    dcache_close(a);
    dcache_close(b);
    dcache_group_free(g);
}

/* ---- the lock -------------------------------------------------------------------- */

static void test_lock(void **state)
{
    (void)state;
    struct dcache *a = open_ok("etag:\"L\"", SIZE, BIG), *b;
    write_block(a, 5, 0);
    struct gguf_diag d;
    assert_int_equal(dcache_open(dir, "etag:\"L\"", SIZE, BS, BIG, &b, &d), GGUF_E_EXIST);
    assert_non_null(strstr(d.msg, "in use"));
    /* another process */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct dcache *c;
        _exit(dcache_open(dir, "etag:\"L\"", SIZE, BS, BIG, &c, &d) == GGUF_E_EXIST ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the holder is untouched */
    assert_true(read_block(a, 5, 0));
    dcache_close(a);
    b = open_ok("etag:\"L\"", SIZE, BIG);
    assert_true(read_block(b, 5, 0));
    dcache_close(b);
}

static void test_check_dir(void **state)
{
    (void)state;
    struct gguf_diag d;
    char sub[4200], file[4200];
    snprintf(sub, sizeof sub, "%s/made", dir);
    assert_int_equal(dcache_check_dir(sub, &d), GGUF_OK);
    struct stat s;
    assert_int_equal(stat(sub, &s), 0);
    assert_true(S_ISDIR(s.st_mode));
    assert_int_equal(s.st_mode & 0777, 0700);
    assert_int_equal(dcache_check_dir(sub, &d), GGUF_OK);
    rmdir(sub);
    /* mkdir -p: every missing directory made 0700 whatever the umask; one
     * that exists is left as it is */
    char mid[4200];
    snprintf(mid, sizeof mid, "%s/no", dir);
    snprintf(sub, sizeof sub, "%s/no/such/", dir);
    mode_t old = umask(0277);
    enum gguf_err e = dcache_check_dir(sub, &d);
    umask(old);
    assert_int_equal(e, GGUF_OK);
    assert_int_equal(stat(mid, &s), 0);
    assert_int_equal(s.st_mode & 07777, 0700);
    assert_int_equal(stat(sub, &s), 0);
    assert_int_equal(s.st_mode & 07777, 0700);
    assert_int_equal(chmod(mid, 0755), 0);
    snprintf(sub, sizeof sub, "%s/no/other", dir);
    assert_int_equal(dcache_check_dir(sub, &d), GGUF_OK);
    assert_int_equal(stat(mid, &s), 0);
    assert_int_equal(s.st_mode & 07777, 0755);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/no/such", dir);
    rmdir(sub);
    rmdir(mid);
    snprintf(file, sizeof file, "%s/file", dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    close(fd);
    assert_int_equal(dcache_check_dir(file, &d), GGUF_E_IO);
    assert_non_null(strstr(d.msg, "Not a directory"));
    /* a file above it: named, nothing made */
    snprintf(sub, sizeof sub, "%s/file/a/b", dir);
    assert_int_equal(dcache_check_dir(sub, &d), GGUF_E_IO);
    assert_non_null(strstr(d.msg, sub));
    assert_non_null(strstr(d.msg, ": Not a directory"));
    unlink(file);
    assert_int_equal(dcache_check_dir("", &d), GGUF_E_INVAL);
}

/* ---- syncs: one per block against batches ---------------------------------------- */

static void test_batching(void **state)
{
    (void)state;
    struct dcache *dc = open_ok("etag:\"S\"", SIZE, BIG);
    struct dcache_stats s;
    dcache_set_batch(dc, 1);
    for (uint64_t b = 0; b < 8; b++) {
        write_block(dc, 5, b);
        dcache_get_stats(dc, &s);
        /* durable and marked when the write returns: two syncs each */
        assert_int_equal(s.stored, b + 1);
        assert_int_equal(s.syncs, 2 * (b + 1));
    }
    /* a batch of 100 (by count only): nothing synced until the flush,
     * then two syncs for the 8 blocks */
    dcache_set_batch(dc, 100);
    for (uint64_t b = 8; b < 16; b++)
        write_block(dc, 5, b);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.stored, 8);
    assert_int_equal(s.syncs, 16);
    /* written counts them at once (what the mount's stats show) */
    assert_int_equal(s.written, 16);
    assert_int_equal(s.blocks, 16);
    dcache_flush(dc);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.stored, 16);
    assert_int_equal(s.syncs, 18);
    /* a batch of 4: the flusher syncs every 4 (waited for: the flush
     * count, seen by dcache_flush's own pass adding none) */
    dcache_set_batch(dc, 4);
    for (uint64_t b = 16; b < NB; b++)
        write_block(dc, 5, b);
    dcache_flush(dc);
    dcache_get_stats(dc, &s);
    assert_int_equal(s.stored, NB);
    assert_true(s.syncs <= 18 + 2 * 2);
    dcache_close(dc);
}

/* ---- threads ------------------------------------------------------------------------ */

#define THREADS 8
#define OPS 400

struct worker {
    struct dcache *dc;
    unsigned seed;
    unsigned reads, hits, bad, writes, holds;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    uint8_t *buf = malloc(BS);
    uint32_t x = w->seed * 2654435761u + 1;
    for (int i = 0; i < OPS; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        uint64_t b = x % NB;
        if ((x >> 8) % 3 == 0) {
            fill(5, b, buf, blen(b));
            dcache_write(w->dc, b, buf, blen(b));
            w->writes++;
        } else if ((x >> 12) % 4 == 0) {
            /* a hold (a reply spliced from the file): the bytes stay right
             * until the release, however much the others evict */
            int fd;
            uint64_t pos;
            if ((x >> 16) % 2)
                dcache_check_ahead(w->dc, (b + 1) % NB);
            if (dcache_hold(w->dc, b, blen(b), &fd, &pos)) {
                w->holds++;
                w->bad += pread(fd, buf, blen(b), (off_t)pos) != (ssize_t)blen(b) ||
                          !check(5, b, buf, blen(b));
                dcache_release(w->dc, b);
            }
        } else {
            w->reads++;
            if (dcache_read(w->dc, b, buf, blen(b))) {
                w->hits++;
                w->bad += !check(5, b, buf, blen(b));
            }
        }
        if ((x >> 20) % 97 == 0)
            dcache_flush(w->dc);
    }
    free(buf);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    char map[4200], data[4200];
    path_of("etag:\"T\"", SIZE, "map", map, sizeof map);
    path_of("etag:\"T\"", SIZE, "data", data, sizeof data);
    /* room for 6 blocks of 21: every few writes evict */
    uint64_t max = 12288 + 6 * (uint64_t)BS;
    struct dcache *dc = open_ok("etag:\"T\"", SIZE, max);
    dcache_set_batch(dc, 3);
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){ .dc = dc, .seed = (unsigned)i + 1 };
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    unsigned reads = 0, hits = 0, bad = 0, holds = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        reads += w[i].reads;
        hits += w[i].hits;
        bad += w[i].bad;
        holds += w[i].holds;
    }
    struct dcache_stats s;
    dcache_flush(dc);
    dcache_get_stats(dc, &s);
    assert_int_equal(bad, 0);
    assert_true(holds > 0);
    assert_int_equal(s.rejected, 0);
    /* every stored block was this process's own write: holds check none */
    assert_int_equal(s.hits, hits);
    assert_int_equal(s.checked_ahead, 0);
    assert_int_equal(s.hits + s.misses, reads);
    assert_true(hits > 0);
    assert_true(s.evicted > 0);
    if (allocated(map) + allocated(data) > max)
        fail_msg("map %llu + data %llu > max %llu (counted %llu, %llu blocks)",
                 (unsigned long long)allocated(map), (unsigned long long)allocated(data),
                 (unsigned long long)max, (unsigned long long)s.bytes_used,
                 (unsigned long long)s.blocks);
    /* the count of blocks held is the blocks that read */
    unsigned held = 0;
    for (uint64_t b = 0; b < NB; b++)
        held += read_block(dc, 5, b);
    assert_int_equal(held, s.blocks);
    dcache_close(dc);
    /* and what is left is right */
    dc = open_ok("etag:\"T\"", SIZE, max);
    unsigned n = 0;
    for (uint64_t b = 0; b < NB; b++)
        n += read_block(dc, 5, b);
    dcache_get_stats(dc, &s);
    assert_int_equal(n, s.hits);
    assert_int_equal(s.rejected, 0);
    dcache_close(dc);
}

/* The hooks a block cache of remote bytes gets (dcache_blocksrc_hooks):
 * each reaches the disk cache beneath; and the name of an object's cache
 * (dcache_key), refused for an identity that is only a size. */
static void test_hooks(void **state)
{
    (void)state;
    struct dcache *dc = open_ok("etag:\"K\"", SIZE, BIG);
    struct blocksrc_disk h;
    dcache_blocksrc_hooks(dc, &h);
    assert_ptr_equal(h.ctx, dc);
    static uint8_t buf[BS];
    assert_false(h.read(h.ctx, 3, buf, blen(3)));
    assert_false(h.has(h.ctx, 3));
    fill(9, 3, buf, blen(3));
    h.write(h.ctx, 3, buf, blen(3));
    dcache_flush(dc);
    assert_true(h.has(h.ctx, 3));
    h.check_ahead(h.ctx, 3);
    dcache_checks_wait(dc);
    memset(buf, 0, sizeof buf);
    assert_true(h.read(h.ctx, 3, buf, blen(3)));
    assert_true(check(9, 3, buf, blen(3)));
    int fd;
    uint64_t pos;
    assert_true(h.hold(h.ctx, 3, blen(3), &fd, &pos));
    assert_int_equal(pos, 3 * (uint64_t)BS);
    assert_int_equal(pread(fd, buf, blen(3), (off_t)pos), (ssize_t)blen(3));
    assert_true(check(9, 3, buf, blen(3)));
    h.release(h.ctx, 3);
    dcache_close(dc);

    char *key;
    struct gguf_diag d;
    assert_int_equal(dcache_key("etag:\"K\"", "https://h/m.gguf", &key, &d), GGUF_OK);
    assert_string_equal(key, "etag:\"K\" https://h/m.gguf");
    free(key);
    assert_int_equal(dcache_key("size:123", "https://h/m.gguf", &key, &d), GGUF_E_INVAL);
    assert_null(key);
    assert_non_null(strstr(d.msg, "neither ETag nor Last-Modified"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc),
        cmocka_unit_test_teardown(test_hooks, clean),
        cmocka_unit_test_setup(test_hold, clean),
        cmocka_unit_test_setup(test_check_ahead, clean),
        cmocka_unit_test_teardown(test_round_trip, clean),
        cmocka_unit_test_teardown(test_empty_object, clean),
        cmocka_unit_test_teardown(test_bad_args, clean),
        cmocka_unit_test_teardown(test_foreign, clean),
        cmocka_unit_test_teardown(test_corrupt_header, clean),
        cmocka_unit_test_teardown(test_corrupt_block, clean),
        cmocka_unit_test_teardown(test_orphan_space, clean),
        cmocka_unit_test_teardown(test_bound, clean),
        cmocka_unit_test_teardown(test_bound_others, clean),
        cmocka_unit_test_teardown(test_group, clean),
        cmocka_unit_test_teardown(test_lock, clean),
        cmocka_unit_test_teardown(test_check_dir, clean),
        cmocka_unit_test_teardown(test_batching, clean),
        cmocka_unit_test_teardown(test_threads, clean),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

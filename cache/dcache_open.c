/* cache/dcache_open.c — the disk cache's directory (dcache_check_dir) and
 * open: the arguments, the map's lock, the data file, the header checked
 * (or both files rebuilt) and the entries loaded (see diskcache.h,
 * "Never trusted", "Crash-safe" and "One process per model"). */
#include "dcache_impl.h"
#include "gguf/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p: makes dir and the directories above it that are missing, each
 * with mode 0700 whatever the umask (a cache of someone's downloads is
 * theirs alone); those that exist are left as they are.  0, or an errno
 * with *at the length of the prefix of dir that could not be made. */
static int make_dirs(const char *dir, size_t *at)
{
    char *p = strdup(dir);
    if (!p)
        return ENOMEM;
    int e = 0;
    size_t n = strlen(p);
    for (size_t i = 1; i <= n && !e; i++) {
        if (i < n && (p[i] != '/' || p[i - 1] == '/'))
            continue;           /* not the end of a component */
        char c = p[i];
        p[i] = '\0';
        struct stat s;
        if (stat(p, &s) == 0) {
            if (!S_ISDIR(s.st_mode))
                e = ENOTDIR;
        } else if (errno != ENOENT) {
            e = errno;
        } else if (mkdir(p, 0700) == 0) {
            /* the umask may have taken bits of 0700 away */
            if (stat(p, &s) != 0 || ((s.st_mode & 07777) != 0700 && chmod(p, 0700) != 0))
                e = errno;
        } else if (errno != EEXIST) {   /* EEXIST: made by someone else meanwhile */
            e = errno;
        }
        if (e)
            *at = i;
        p[i] = c;
    }
    free(p);
    return e;
}

enum gguf_err dcache_check_dir(const char *dir, struct gguf_diag *diag)
{
    struct stat s;
    if (!dir || !*dir)
        return gguf_diag_set(diag, GGUF_E_INVAL, UINT64_MAX, "cache_dir: empty");
    size_t at = 0;
    int e = make_dirs(dir, &at);
    if (e == ENOMEM)
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    if (e && at < strlen(dir))
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %.*s: %s",
                             dir, (int)at, dir, strerror(e));
    if (e)
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %s", dir, strerror(e));
    if (stat(dir, &s) != 0)
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %s", dir,
                             strerror(errno));
    if (!S_ISDIR(s.st_mode))
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %s", dir,
                             strerror(ENOTDIR));
    if (access(dir, R_OK | W_OK | X_OK) != 0)
        return gguf_diag_set(diag, GGUF_E_IO, UINT64_MAX, "cache_dir=%s: %s", dir,
                             strerror(errno));
    return GGUF_OK;
}

/* The header this cache would write. */
static void make_header(const struct dcache *dc, const char *identity, uint8_t *h)
{
    size_t idlen = strlen(identity);
    memset(h, 0, HDR_SIZE);
    memcpy(h + H_MAGIC, MAGIC, 8);
    gguf_wr32(&dc_le, h + H_VERSION, VERSION);
    gguf_wr32(&dc_le, h + H_HDRSIZE, HDR_SIZE);
    gguf_wr64(&dc_le, h + H_SIZE, dc->size);
    gguf_wr32(&dc_le, h + H_BLOCK, dc->block_bytes);
    gguf_wr32(&dc_le, h + H_IDLEN, (uint32_t)idlen);
    gguf_wr64(&dc_le, h + H_NBLOCKS, dc->nblocks);
    memcpy(h + H_ID, identity, idlen);
    gguf_wr32(&dc_le, h + H_CRC, dcache_crc32c(0, h, HDR_SIZE));
}

/* Empties both files and writes a new header: every entry "not stored". */
static int rebuild(struct dcache *dc, const uint8_t *hdr)
{
    /* data first: no byte of the old data survives under the new map */
    if (ftruncate(dc->data_fd, 0) != 0 || ftruncate(dc->map_fd, 0) != 0 ||
        fsync(dc->data_fd) != 0 || fsync(dc->map_fd) != 0)
        return errno;
    if (ftruncate(dc->map_fd, (off_t)(HDR_SIZE + dc->nblocks * ENTRY_SIZE)) != 0)
        return errno;
    if (!gguf_pwrite_all(dc->map_fd, hdr, HDR_SIZE, 0))
        return errno;
    if (ftruncate(dc->data_fd, (off_t)dc->size) != 0 || fsync(dc->data_fd) != 0 ||
        fsync(dc->map_fd) != 0)
        return errno;
    return 0;
}

/* Loads the entries of a valid map; invalid entries are cleared (synced);
 * space under blocks not stored is given back.  0 or an errno. */
static int load(struct dcache *dc)
{
    size_t n = (size_t)dc->nblocks * ENTRY_SIZE, chunk = 1 << 16;
    uint8_t *buf = malloc(chunk);
    if (!buf)
        return ENOMEM;
    bool cleared = false;
    int err = 0;
    for (size_t off = 0; off < n && !err; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;
        if (!gguf_pread_all(dc->map_fd, buf, len, HDR_SIZE + off))
            err = errno;
        for (size_t i = 0; i < len && !err; i += ENTRY_SIZE) {
            uint64_t b = (off + i) / ENTRY_SIZE;
            uint32_t crc = gguf_rd32(&dc_le, buf + i), chk = gguf_rd32(&dc_le, buf + i + 4);
            if (chk == dc_entry_check(b, crc, (uint32_t)dcache_block_len(dc, b))) {
                dc->b[b].state = B_PRESENT;
                dc->readable++;
                dc->b[b].crc = crc;
                dc_own_add(dc, (int64_t)dc_blk_room(dc, b));
            } else if (crc || chk) {
                err = dc_write_entry(dc, b, 0, false);
                cleared = true;
            }
        }
    }
    free(buf);
    if (!err && cleared && fdatasync(dc->map_fd) != 0)
        err = errno;
    if (err)
        return err;
    /* data under blocks not stored: written before a crash, or cleared and
     * not punched yet */
    off_t pos = 0;
    while (pos < (off_t)dc->size) {
        off_t d = lseek(dc->data_fd, pos, SEEK_DATA);
        if (d < 0)
            break;
        off_t h = lseek(dc->data_fd, d, SEEK_HOLE);
        if (h < 0)
            h = (off_t)dc->size;
        for (uint64_t b = (uint64_t)d / dc->block_bytes;
             b < dc->nblocks && b * dc->block_bytes < (uint64_t)h; b++)
            if (dc->b[b].state == B_ABSENT)
                dc_punch(dc->data_fd, b * dc->block_bytes, dc_blk_room(dc, b));
        pos = h > d ? h : d + 1;
    }
    return 0;
}

enum gguf_err dcache_open(const char *dir, const char *identity, uint64_t size,
                          uint32_t block_bytes, uint64_t max_bytes, struct dcache **out,
                          struct gguf_diag *diag)
{
    return dcache_open_in(NULL, dir, identity, size, block_bytes, max_bytes, out, diag);
}

/* ---- dcache_open_in, step by step ------------------------------------------- */

/* The arguments, and the sizes they give (blocks; the bytes counted for the
 * map): GGUF_OK, or the error with diag. */
static enum gguf_err check_args(const char *dir, const char *identity, uint64_t size,
                                uint32_t block_bytes, uint64_t max_bytes, uint64_t *nblocks_out,
                                uint64_t *map_bytes_out, struct gguf_diag *diag)
{
    if (!dir || !identity || block_bytes == 0 || block_bytes % PAGE || block_bytes > (1u << 30))
        return gguf_diag_set(diag, GGUF_E_INVAL, UINT64_MAX,
                             "disk cache: bad arguments (block size %" PRIu32 ")", block_bytes);
    if (strlen(identity) > DCACHE_MAX_IDENTITY)
        return gguf_diag_set(diag, GGUF_E_RANGE, UINT64_MAX,
                             "disk cache: identity longer than %u bytes", DCACHE_MAX_IDENTITY);
    uint64_t nblocks = size / block_bytes + (size % block_bytes != 0);
    if (nblocks > DCACHE_MAX_BLOCKS || size > (uint64_t)INT64_MAX)
        return gguf_diag_set(diag, GGUF_E_RANGE, UINT64_MAX,
                             "disk cache: %" PRIu64 " bytes is more than %u blocks of %" PRIu32,
                             size, DCACHE_MAX_BLOCKS, block_bytes);
    /* the map, and the file system's blocks that map a fragmented data file
     * (ext4's extent tree, XFS's bmap btree: they count in st_blocks), a
     * page per 256 blocks */
    uint64_t map_bytes = (HDR_SIZE + nblocks * ENTRY_SIZE + PAGE - 1) / PAGE * PAGE +
                         (nblocks / 256 + 1) * PAGE;
    if (max_bytes < map_bytes + block_bytes)
        return gguf_diag_set(diag, GGUF_E_RANGE, UINT64_MAX,
                             "disk cache: cache_max %" PRIu64 " is less than the map "
                             "(%" PRIu64 " bytes) and one block", max_bytes, map_bytes);
    *nblocks_out = nblocks;
    *map_bytes_out = map_bytes;
    return GGUF_OK;
}

/* A dcache with its locks, its numbers and an empty block table, no file
 * open, in no group; NULL: out of memory. */
static struct dcache *dc_new(const char *dir, uint64_t size, uint64_t nblocks,
                             uint32_t block_bytes, uint64_t max_bytes, uint64_t map_bytes)
{
    struct dcache *dc = calloc(1, sizeof *dc);
    if (!dc)
        return NULL;
    dc->map_fd = dc->data_fd = -1;
    pthread_mutex_init(&dc->mu, NULL);
    pthread_mutex_init(&dc->flush_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&dc->cond, &ca);
    pthread_cond_init(&dc->checked, NULL);
    pthread_cond_init(&dc->cwork, NULL);
    pthread_condattr_destroy(&ca);
    dc->size = size;
    dc->nblocks = nblocks;
    dc->block_bytes = block_bytes;
    dc->max_bytes = max_bytes;
    dc->map_bytes = map_bytes;
    dc->dir = strdup(dir);
    dc->b = calloc(nblocks ? nblocks : 1, sizeof *dc->b);
    if (!dc->dir || !dc->b) {
        dc_free(dc);
        return NULL;
    }
    return dc;
}

/* Lists dc's file base in group: false if out of memory. */
static bool join_group(struct dcache *dc, struct dcache_group *group)
{
    dc->group = group;
    pthread_mutex_lock(&group->mu);
    if (group->n == group->cap) {
        size_t cap = group->cap ? 2 * group->cap : 8;
        char (*nb)[24] = realloc(group->bases, cap * sizeof *nb);
        if (nb) {
            group->bases = nb;
            group->cap = cap;
        }
    }
    if (group->n < group->cap) {
        memcpy(group->bases[group->n++], dc->base, sizeof dc->base);
        dc->in_group = true;
    }
    pthread_mutex_unlock(&group->mu);
    return dc->in_group;
}

/* Opens the map and takes its lock: 0, or an errno (*busy: another process
 * or dcache holds it).  The lock is the map's: after taking it, make sure
 * the file is still the one at that name (a process removing it to make
 * room holds the lock while it unlinks). */
static int lock_map(struct dcache *dc, const char *map_path, bool *busy)
{
    for (int tries = 0;; tries++) {
        dc->map_fd = open(map_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (dc->map_fd < 0)
            return errno;
        if (flock(dc->map_fd, LOCK_EX | LOCK_NB) != 0) {
            int err = errno;
            *busy = err == EWOULDBLOCK;
            return err;
        }
        struct stat a, b;
        if (fstat(dc->map_fd, &a) != 0)
            return errno;
        if (stat(map_path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            return S_ISREG(a.st_mode) ? 0 : EINVAL;
        close(dc->map_fd);
        dc->map_fd = -1;
        if (tries == 3)
            return EAGAIN;
    }
}

/* Opens the data file and checks it can take holes; the two files' stat
 * into *ms, *ds: 0 or an errno. */
static int open_data(struct dcache *dc, const char *data_path, struct stat *ms, struct stat *ds)
{
    dc->data_fd = open(data_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (dc->data_fd < 0)
        return errno;
    if (fstat(dc->map_fd, ms) != 0 || fstat(dc->data_fd, ds) != 0)
        return errno;
    if (!S_ISREG(ds->st_mode))
        return EINVAL;
    /* eviction punches holes: a file system that cannot would let the
     * files outgrow the bound (a no-op punch past the end tells) */
    if (fallocate(dc->data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)((ds->st_size + PAGE) / PAGE * PAGE), PAGE) != 0)
        return errno;
    return 0;
}

/* Loads the files if the map's header and both lengths are what this
 * cache would have written, else rebuilds them (stats.reset); hdr has room
 * for two headers.  0 or an errno. */
static int check_or_rebuild(struct dcache *dc, const char *identity, const struct stat *ms,
                            const struct stat *ds, uint8_t *hdr)
{
    /* valid only if every word is what this cache would have written */
    uint8_t *want = hdr, *have = hdr + HDR_SIZE;
    make_header(dc, identity, want);
    bool valid = (uint64_t)ms->st_size == HDR_SIZE + dc->nblocks * ENTRY_SIZE &&
                 (uint64_t)ds->st_size == dc->size &&
                 gguf_pread_all(dc->map_fd, have, HDR_SIZE, 0) &&
                 memcmp(want, have, HDR_SIZE) == 0;
    if (valid)
        return load(dc);
    dc->st.reset = true;
    return rebuild(dc, want);
}

enum gguf_err dcache_open_in(struct dcache_group *group, const char *dir, const char *identity,
                             uint64_t size, uint32_t block_bytes, uint64_t max_bytes,
                             struct dcache **out, struct gguf_diag *diag)
{
    *out = NULL;
    uint64_t nblocks = 0, map_bytes = 0;
    enum gguf_err ge = check_args(dir, identity, size, block_bytes, max_bytes, &nblocks,
                                  &map_bytes, diag);
    if (ge != GGUF_OK)
        return ge;
    struct dcache *dc = dc_new(dir, size, nblocks, block_bytes, max_bytes, map_bytes);
    uint8_t *hdr = malloc(2 * HDR_SIZE);
    if (!dc || !hdr) {
        free(hdr);
        if (dc)
            dc_free(dc);
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    dcache_set_batch(dc, 0);
    dcache_file_base(identity, size, dc->base, sizeof dc->base);
    if (group && !join_group(dc, group)) {
        free(hdr);
        dc_free(dc);
        return gguf_diag_set(diag, GGUF_E_NOMEM, UINT64_MAX, "out of memory");
    }
    pthread_mutex_lock(&dc->mu);
    dc_own_add(dc, (int64_t)map_bytes);
    pthread_mutex_unlock(&dc->mu);
    char map_path[4096], data_path[4096];
    if ((size_t)snprintf(map_path, sizeof map_path, "%s/%s.map", dir, dc->base) >=
        sizeof map_path) {
        free(hdr);
        dc_free(dc);
        return gguf_diag_set(diag, GGUF_E_INVAL, UINT64_MAX, "cache_dir: path too long");
    }
    snprintf(data_path, sizeof data_path, "%s/%s.data", dir, dc->base);
    bool busy = false;
    const char *what = map_path;
    struct stat ms, ds;
    int err = lock_map(dc, map_path, &busy);
    if (!err) {
        what = data_path;
        err = open_data(dc, data_path, &ms, &ds);
    }
    if (!err) {
        what = map_path;
        err = check_or_rebuild(dc, identity, &ms, &ds, hdr);
    }
    free(hdr);
    if (err) {
        dc_free(dc);
        if (busy)
            return gguf_diag_set(diag, GGUF_E_EXIST, UINT64_MAX,
                                 "%s: in use by another process", map_path);
        return gguf_diag_set(diag, err == ENOMEM ? GGUF_E_NOMEM : GGUF_E_IO, UINT64_MAX,
                             "%s: %s", what, strerror(err));
    }
    /* recency: this model was used now */
    futimens(dc->map_fd, NULL);
    dc_measure_others(dc);
    *out = dc;
    return GGUF_OK;
}

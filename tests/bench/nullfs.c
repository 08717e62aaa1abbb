/*
 * tests/bench/nullfs.c — the ceiling for reads through FUSE: a low-level
 * server that does no work.
 *
 *   nullfs [options] MOUNTPOINT NAME:RAW_SIZE:F32_SIZE ...
 *
 * Exposes the path shape of a gguffs mount, tensors/NAME/raw and
 * tensors/NAME/f32, with the sizes given (bytes, K/M/G suffixes), and
 * answers every read from one static buffer (fuse_reply_iov, no copy on
 * our side, no allocation, no lock).  It counts the reads it answers and
 * their sizes: the file `stats` at the root (read with direct_io, so always
 * current) shows them, and what the kernel asked of it is known.  The session is set up as gguffs sets
 * up its own (fs/session.c ggfs_session_run, fs/ops.c ggfs_op_init): same libfuse,
 * FUSE_USE_VERSION 312, multi-threaded loop with the same command-line
 * options, splice capabilities, max_write 1 MiB (libfuse then lets the
 * kernel send 1 MiB requests), no AUTO_INVAL_DATA, keep_cache on open,
 * entry and attribute timeouts of a year, default_permissions.  Walks
 * are set up as gguffs's too: readdirplus, no OPENDIR (listings kept by
 * the kernel), POSIX ACLs (kept by the kernel), getxattr answered (no
 * xattr: gguffs has xattrs on meta/'s files, so it cannot say ENOSYS).
 *
 * Options (besides libfuse's: -f, -s, -d, -o clone_fd, ...):
 *   -o direct_io       files are opened with direct_io (no page cache)
 *   -o files=N         each tensor's folder lists N files (2 to 64): raw,
 *                      f32, then f2, f3, ... of 64 bytes each, as many as
 *                      a gguffs tensor folder has, for walks of the tree
 *   -o readahead=SIZE  the kernel's readahead for this mount (its bdi's
 *                      read_ahead_kb), set after mounting as gguffs does;
 *                      0 or absent: the kernel's default
 *
 * Run by scripts/bench (not a test).
 */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "fs/mountinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_TENSORS 4096
#define MAX_NAME 255
#define MAX_FILE_SIZE (1ull << 40)
#define BUF_BYTES (1u << 20)             /* the largest request (max_write) */
#define MAX_IOV 64                       /* replies up to 64 MiB, if asked */
#define TIMEOUT (365.0 * 86400)

/* inodes: 1 root, 2 tensors/, 3 stats, then 1 + files per tensor: NAME/,
 * raw, f32, f2, ... */
#define INO_ROOT 1
#define INO_TENSORS 2
#define INO_STATS 3
#define INO_BASE 4
#define MAX_FILES 64
#define SMALL_FILE 64                    /* the size of f2, f3, ... */

/* Counters of the reads of tensor files: requests, bytes replied, and
 * requests by size, rounded up to a power of two from 4 KiB to 1 MiB, then
 * larger. */
#define N_BUCKETS 10
static struct {
    unsigned long long reads, bytes, bucket[N_BUCKETS];
} counts;
/* the stats text: fixed-width numbers, so its size never changes */
#define STATS_LINE 32
#define STATS_LINES (2 + N_BUCKETS)
#define STATS_BYTES (STATS_LINES * STATS_LINE)

struct tensor {
    char *name;
    uint64_t size[2];                    /* raw, f32 */
};

struct nullfs {
    struct tensor *t;
    size_t n;
    int direct_io;
    unsigned files;                      /* files per tensor folder */
    unsigned stride;                     /* inodes per tensor: 1 + files */
    char *files_opt;
    char *readahead;
    char *mountpoint;                    /* as given (the first non-option) */
};

static char file_names[MAX_FILES][8] = { "raw", "f32" };
static char buf[BUF_BYTES];

/* "512M" -> bytes; false on anything else. */
static int parse_size(const char *s, const char *end_at, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (p == end_at || *p < '0' || *p > '9')
        return 0;
    for (; p < end_at && *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    unsigned shift = 0;
    if (p < end_at) {
        switch (*p) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return 0;
        }
        p++;
    }
    if (p != end_at || v > (MAX_FILE_SIZE >> shift))
        return 0;
    *out = v << shift;
    return 1;
}

/* "NAME:RAW:F32" -> a new tensor; a one-line error and 0 on anything else. */
static int add_tensor(struct nullfs *nf, const char *arg)
{
    const char *c1 = strchr(arg, ':');
    const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    const char *end = arg + strlen(arg);
    struct tensor t = { 0 };
    if (!c2 || c1 == arg || (size_t)(c1 - arg) > MAX_NAME || memchr(arg, '/', (size_t)(c1 - arg)) ||
        !parse_size(c1 + 1, c2, &t.size[0]) || !parse_size(c2 + 1, end, &t.size[1])) {
        fprintf(stderr, "nullfs: %s: not NAME:RAW_SIZE:F32_SIZE (sizes up to 1024G)\n", arg);
        return 0;
    }
    if ((c1 - arg == 1 && arg[0] == '.') || (c1 - arg == 2 && arg[0] == '.' && arg[1] == '.')) {
        fprintf(stderr, "nullfs: %s: not a name\n", arg);
        return 0;
    }
    for (size_t i = 0; i < nf->n; i++)
        if (strlen(nf->t[i].name) == (size_t)(c1 - arg) &&
            memcmp(nf->t[i].name, arg, (size_t)(c1 - arg)) == 0) {
            fprintf(stderr, "nullfs: %s: name given twice\n", arg);
            return 0;
        }
    if (nf->n == MAX_TENSORS) {
        fprintf(stderr, "nullfs: more than %d tensors\n", MAX_TENSORS);
        return 0;
    }
    t.name = strndup(arg, (size_t)(c1 - arg));
    struct tensor *grown = t.name ? realloc(nf->t, (nf->n + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(t.name);
        fprintf(stderr, "nullfs: out of memory\n");
        return 0;
    }
    nf->t = grown;
    nf->t[nf->n++] = t;
    return 1;
}

/* ---- the tree --------------------------------------------------------------- */

static int stat_ino(const struct nullfs *nf, fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = ino;
    if (ino == INO_ROOT || ino == INO_TENSORS) {
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
        return 0;
    }
    if (ino == INO_STATS) {
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = STATS_BYTES;
        return 0;
    }
    if (ino < INO_BASE || (ino - INO_BASE) / nf->stride >= nf->n)
        return ENOENT;
    size_t i = (ino - INO_BASE) / nf->stride, k = (ino - INO_BASE) % nf->stride;
    uint64_t size = k == 1 || k == 2 ? nf->t[i].size[k - 1] : SMALL_FILE;
    if (k == 0) {
        st->st_mode = S_IFDIR | 0555;
        st->st_nlink = 2;
    } else {
        st->st_mode = S_IFREG | 0444;
        st->st_nlink = 1;
        st->st_size = (off_t)size;
        st->st_blksize = 4096;
        st->st_blocks = (blkcnt_t)((size + 511) / 512);
    }
    return 0;
}

static void reply_entry(fuse_req_t req, const struct nullfs *nf, fuse_ino_t ino)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    if (stat_ino(nf, ino, &e.attr) != 0)
        return (void)fuse_reply_err(req, ENOENT);
    e.ino = ino;
    e.generation = 1;
    e.attr_timeout = TIMEOUT;
    e.entry_timeout = TIMEOUT;
    fuse_reply_entry(req, &e);
}

static const char *const stats_names[STATS_LINES] = {
    "reads", "bytes", "size_le_4k", "size_le_8k", "size_le_16k", "size_le_32k",
    "size_le_64k", "size_le_128k", "size_le_256k", "size_le_512k", "size_le_1m", "size_larger",
};

static size_t stats_text(char *out)
{
    char line[STATS_LINE + 1];
    unsigned long long v[STATS_LINES];
    v[0] = __atomic_load_n(&counts.reads, __ATOMIC_RELAXED);
    v[1] = __atomic_load_n(&counts.bytes, __ATOMIC_RELAXED);
    for (int b = 0; b < N_BUCKETS; b++)
        v[2 + b] = __atomic_load_n(&counts.bucket[b], __ATOMIC_RELAXED);
    for (int i = 0; i < STATS_LINES; i++) {
        /* name, the number right-aligned, a newline: STATS_LINE bytes */
        snprintf(line, sizeof line, "%-12.12s %18llu\n", stats_names[i], v[i]);
        memcpy(out + (size_t)i * STATS_LINE, line, STATS_LINE);
    }
    return STATS_BYTES;
}

static void count_read(size_t size)
{
    int b = 0;
    while (b < N_BUCKETS - 1 && size > (4096u << b))
        b++;
    __atomic_fetch_add(&counts.reads, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counts.bytes, size, __ATOMIC_RELAXED);
    __atomic_fetch_add(&counts.bucket[b], 1, __ATOMIC_RELAXED);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    /* as gguffs (fs/ops.c ggfs_op_init) */
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE)
        conn->want |= FUSE_CAP_SPLICE_MOVE;
    conn->max_write = 1u << 20;
    conn->max_readahead = conn->max_readahead ? conn->max_readahead : UINT32_MAX;
    conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
    if (conn->capable & FUSE_CAP_POSIX_ACL)
        conn->want |= FUSE_CAP_POSIX_ACL;
    if (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT)
        conn->want |= FUSE_CAP_NO_OPENDIR_SUPPORT;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    const struct nullfs *nf = fuse_req_userdata(req);
    if (parent == INO_ROOT) {
        if (strcmp(name, "tensors") == 0)
            return reply_entry(req, nf, INO_TENSORS);
        if (strcmp(name, "stats") == 0)
            return reply_entry(req, nf, INO_STATS);
    } else if (parent == INO_TENSORS) {
        for (size_t i = 0; i < nf->n; i++)
            if (strcmp(name, nf->t[i].name) == 0)
                return reply_entry(req, nf, INO_BASE + nf->stride * i);
    } else if (parent >= INO_BASE && (parent - INO_BASE) % nf->stride == 0 &&
               (parent - INO_BASE) / nf->stride < nf->n) {
        for (unsigned k = 0; k < nf->files; k++)
            if (strcmp(name, file_names[k]) == 0)
                return reply_entry(req, nf, parent + 1 + k);
    }
    fuse_reply_err(req, ENOENT);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    const struct nullfs *nf = fuse_req_userdata(req);
    struct stat st;
    int e = stat_ino(nf, ino, &st);
    if (e)
        return (void)fuse_reply_err(req, e);
    fuse_reply_attr(req, &st, TIMEOUT);
}

/* Adds entry number i of directory ino; false when ino has no entry i. */
static int dir_entry(const struct nullfs *nf, fuse_ino_t ino, size_t i, const char **name,
                     fuse_ino_t *child)
{
    if (i == 0) {
        *name = ".";
        *child = ino;
        return 1;
    }
    if (i == 1) {
        *name = "..";
        *child = ino == INO_ROOT ? INO_ROOT : ino == INO_TENSORS ? INO_ROOT : INO_TENSORS;
        return 1;
    }
    i -= 2;
    if (ino == INO_ROOT) {
        if (i >= 2)
            return 0;
        *name = i == 0 ? "tensors" : "stats";
        *child = i == 0 ? INO_TENSORS : INO_STATS;
        return 1;
    }
    if (ino == INO_TENSORS) {
        if (i >= nf->n)
            return 0;
        *name = nf->t[i].name;
        *child = INO_BASE + nf->stride * i;
        return 1;
    }
    if (i >= nf->files)
        return 0;
    *name = file_names[i];
    *child = ino + 1 + i;
    return 1;
}

static void readdir_any(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
    const struct nullfs *nf = fuse_req_userdata(req);
    struct stat st;
    if (stat_ino(nf, ino, &st) != 0)
        return (void)fuse_reply_err(req, ENOENT);
    if (!S_ISDIR(st.st_mode))
        return (void)fuse_reply_err(req, ENOTDIR);
    if (size > 65536)
        size = 65536;
    char *out = malloc(size ? size : 1);
    if (!out)
        return (void)fuse_reply_err(req, ENOMEM);
    size_t used = 0;
    const char *name;
    fuse_ino_t child;
    for (size_t i = off < 0 ? 0 : (size_t)off; dir_entry(nf, ino, i, &name, &child); i++) {
        size_t len;
        if (plus) {
            /* as gguffs: "." and ".." without attributes */
            struct fuse_entry_param e;
            memset(&e, 0, sizeof e);
            stat_ino(nf, child, &e.attr);
            if (i >= 2) {
                e.ino = child;
                e.generation = 1;
                e.attr_timeout = TIMEOUT;
                e.entry_timeout = TIMEOUT;
            }
            len = fuse_add_direntry_plus(req, out + used, size - used, name, &e, (off_t)(i + 1));
        } else {
            struct stat cst;
            stat_ino(nf, child, &cst);
            len = fuse_add_direntry(req, out + used, size - used, name, &cst, (off_t)(i + 1));
        }
        if (len > size - used)
            break;
        used += len;
    }
    fuse_reply_buf(req, out, used);
    free(out);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)fi;
    readdir_any(req, ino, size, off, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    (void)fi;
    readdir_any(req, ino, size, off, 1);
}

/* The kernel opens directories itself from the first ENOSYS on (the
 * capability asked at init) and keeps their listings, as with gguffs. */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino, (void)fi;
    fuse_reply_err(req, ENOSYS);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    (void)ino, (void)name, (void)size;
    fuse_reply_err(req, ENODATA);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    const struct nullfs *nf = fuse_req_userdata(req);
    struct stat st;
    if (stat_ino(nf, ino, &st) != 0)
        return (void)fuse_reply_err(req, ENOENT);
    if (S_ISDIR(st.st_mode))
        return (void)fuse_reply_err(req, EISDIR);
    if ((fi->flags & O_ACCMODE) != O_RDONLY)
        return (void)fuse_reply_err(req, EROFS);
    if (nf->direct_io || ino == INO_STATS)
        fi->direct_io = 1;
    else
        fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

/* The whole point: every read is answered from buf, repeated as needed. */
static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)fi;
    const struct nullfs *nf = fuse_req_userdata(req);
    if (ino == INO_STATS) {
        char text[STATS_BYTES];
        size_t n = stats_text(text);
        if (off < 0 || (uint64_t)off >= n)
            return (void)fuse_reply_buf(req, NULL, 0);
        return (void)fuse_reply_buf(req, text + off,
                                    size < n - (size_t)off ? size : n - (size_t)off);
    }
    if (ino < INO_BASE || (ino - INO_BASE) % nf->stride == 0 || (ino - INO_BASE) / nf->stride >= nf->n)
        return (void)fuse_reply_err(req, EISDIR);
    size_t file = (ino - INO_BASE) % nf->stride;
    uint64_t fsize = file <= 2 ? nf->t[(ino - INO_BASE) / nf->stride].size[file - 1] : SMALL_FILE;
    if (off < 0 || (uint64_t)off >= fsize)
        return (void)fuse_reply_buf(req, NULL, 0);
    if (size > fsize - (uint64_t)off)
        size = (size_t)(fsize - (uint64_t)off);
    if (size > (size_t)MAX_IOV * BUF_BYTES)
        size = (size_t)MAX_IOV * BUF_BYTES;
    struct iovec iov[MAX_IOV];
    int n = 0;
    for (size_t left = size; left; n++) {
        size_t k = left < BUF_BYTES ? left : BUF_BYTES;
        iov[n].iov_base = buf;
        iov[n].iov_len = k;
        left -= k;
    }
    count_read(size);
    fuse_reply_iov(req, iov, n);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .opendir = op_opendir,
    .getxattr = op_getxattr,
    .open = op_open,
    .read = op_read,
};

/* ---- mounting ---------------------------------------------------------------- */

/* The device ("0:NN", its bdi's name) of the newest nullfs mount on
 * mountpoint; false if not found.  (A stat of the mount point would wait for
 * a loop that is not running yet.)  gguffs's own parser (fs/mountinfo.c). */
static int find_dev(const char *mountpoint, char dev[32])
{
    return ggfs_mountinfo_self("fuse.nullfs", mountpoint, dev) >= 0;
}

/* The kernel takes the smaller of the bdi's readahead and the INIT reply's
 * max_readahead when it handles that reply, and the INIT request carried
 * the readahead the bdi had at mount time (128 KiB): a read_ahead_kb
 * written between mounting and the reply is undone.  So it is written once
 * a request after INIT got its answer: a stat of the mount point, from a
 * thread, once the loop runs. */
struct ra_job {
    char path[96];
    const char *mountpoint;
    uint64_t bytes;
};

static void *set_readahead(void *arg)
{
    struct ra_job *j = arg;
    struct stat st;
    if (stat(j->mountpoint, &st) != 0) {
        fprintf(stderr, "nullfs: %s: %s\n", j->mountpoint, strerror(errno));
        return NULL;
    }
    FILE *f = fopen(j->path, "we");
    if (!f || fprintf(f, "%llu\n", (unsigned long long)(j->bytes >> 10)) < 0 || fclose(f) != 0)
        fprintf(stderr, "nullfs: %s: cannot set readahead: %s\n", j->path, strerror(errno));
    return NULL;
}

enum { KEY_DIRECT_IO };

static const struct fuse_opt opt_spec[] = {
    { "readahead=%s", offsetof(struct nullfs, readahead), 0 },
    { "files=%s", offsetof(struct nullfs, files_opt), 0 },
    FUSE_OPT_KEY("direct_io", KEY_DIRECT_IO),
    FUSE_OPT_END
};

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct nullfs *nf = data;
    (void)outargs;
    switch (key) {
    case KEY_DIRECT_IO:
        nf->direct_io = 1;
        return 0;
    case FUSE_OPT_KEY_NONOPT:
        if (!nf->mountpoint) {
            nf->mountpoint = strdup(arg);
            return nf->mountpoint ? 1 : -1;   /* keep: for fuse_parse_cmdline */
        }
        return add_tensor(nf, arg) ? 0 : -1;
    }
    return 1;
}

static void usage(const char *prog)
{
    printf("usage: %s [options] MOUNTPOINT NAME:RAW_SIZE:F32_SIZE ...\n\n"
           "A FUSE server that does no work: tensors/NAME/{raw,f32,...} of the sizes given\n"
           "(bytes, K/M/G suffixes), every read answered from one static buffer;\n"
           "`stats` counts the reads answered and their sizes.\n\n"
           "  -o direct_io          open files with direct_io\n"
           "  -o files=N            N files per tensor folder (2 to 64): raw, f32, f2, ...\n"
           "  -o readahead=SIZE     the mount's readahead (bdi read_ahead_kb; root)\n\n",
           prog);
    fuse_cmdline_help();
    fuse_lowlevel_help();
}

int main(int argc, char *argv[])
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct nullfs nf = { 0 };
    struct fuse_cmdline_opts copts = { 0 };
    struct fuse_session *se = NULL;
    int ret = 1;
    uint64_t ra = 0;

    if (fuse_opt_parse(&args, &nf, opt_spec, opt_proc) != 0)
        goto out;
    if (fuse_parse_cmdline(&args, &copts) != 0)
        goto out;
    if (copts.show_help) {
        usage(argv[0]);
        ret = 0;
        goto out;
    }
    if (!copts.mountpoint || nf.n == 0) {
        fprintf(stderr, "usage: nullfs [options] MOUNTPOINT NAME:RAW_SIZE:F32_SIZE ... (see -h)\n");
        goto out;
    }
    if (nf.readahead && (!parse_size(nf.readahead, nf.readahead + strlen(nf.readahead), &ra) ||
                         ra > (1ull << 30))) {
        fprintf(stderr, "nullfs: readahead=%s: not a size up to 1G\n", nf.readahead);
        goto out;
    }
    nf.files = 2;
    if (nf.files_opt) {
        char *end;
        unsigned long v = strtoul(nf.files_opt, &end, 10);
        if (*end || end == nf.files_opt || v < 2 || v > MAX_FILES) {
            fprintf(stderr, "nullfs: files=%s: not a number from 2 to %d\n", nf.files_opt, MAX_FILES);
            goto out;
        }
        nf.files = (unsigned)v;
    }
    nf.stride = 1 + nf.files;
    for (unsigned k = 2; k < nf.files; k++)
        snprintf(file_names[k], sizeof file_names[k], "f%u", k % 100u);
    /* float32 1.0 everywhere: real pages (not the shared zero page), and
     * valid f32 for whoever looks */
    for (size_t i = 0; i < BUF_BYTES; i += 4)
        memcpy(buf + i, &(float){ 1.0f }, 4);

    if (fuse_opt_add_arg(&args, "-ofsname=nullfs") != 0 ||
        fuse_opt_add_arg(&args, "-osubtype=nullfs") != 0 ||
        fuse_opt_add_arg(&args, "-odefault_permissions") != 0)
        goto out;
    se = fuse_session_new(&args, &ops, sizeof ops, &nf);
    if (!se)
        goto out;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    if (fuse_session_mount(se, copts.mountpoint) != 0)
        goto out_signals;
    /* libfuse made the mount point absolute and canonical, as mountinfo has it */
    struct ra_job ra_job = { .mountpoint = copts.mountpoint, .bytes = ra };
    char dev[32];
    if (ra) {
        if (!find_dev(copts.mountpoint, dev)) {
            fprintf(stderr, "nullfs: %s: mount not found in /proc/self/mountinfo\n",
                    copts.mountpoint);
            goto out_unmount;
        }
        snprintf(ra_job.path, sizeof ra_job.path, "/sys/class/bdi/%s/read_ahead_kb", dev);
    }
    fuse_daemonize(copts.foreground);
    /* after the fork: threads do not survive it */
    /* detached: a stat left unanswered (unmounted at once) must not hold
     * up the exit; ra_job lives on main's stack until then */
    pthread_t ra_thread;
    if (ra && pthread_create(&ra_thread, NULL, set_readahead, &ra_job) == 0)
        pthread_detach(ra_thread);
    if (copts.singlethread) {
        ret = fuse_session_loop(se);
    } else {
        struct fuse_loop_config *cfg = fuse_loop_cfg_create();
        fuse_loop_cfg_set_clone_fd(cfg, copts.clone_fd);
        if (copts.max_idle_threads <= 100000)
            fuse_loop_cfg_set_idle_threads(cfg, copts.max_idle_threads);
        if (copts.max_threads > 0 && copts.max_threads <= 100000)
            fuse_loop_cfg_set_max_threads(cfg, copts.max_threads);
        ret = fuse_session_loop_mt(se, cfg);
        fuse_loop_cfg_destroy(cfg);
    }
    ret = ret < 0;
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out:
    for (size_t i = 0; i < nf.n; i++)
        free(nf.t[i].name);
    free(nf.t);
    free(nf.readahead);
    free(nf.files_opt);
    free(nf.mountpoint);
    free(copts.mountpoint);
    fuse_opt_free_args(&args);
    return ret;
}

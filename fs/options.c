/* fs/options.c — gguffs's command line (see options.h). */
#include "options.h"

#include "remote/url.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef GGUFFS_VERSION
#define GGUFFS_VERSION "0.0.0"
#endif

/* What opt_proc collects before the values are checked. */
struct raw_options {
    struct options *o;
    char *cache_size;
    char *threads;
    char *readahead;
    char *connections;
    char *timeout;
    char *bearer_token_file;
    char *ca_file;
    char *remote_cache;
    char *remote_block;
    char *overlay;
    char *cache_dir;
    char *cache_max;
    char *log_file;
    char *aws_profile;
    char *s3_endpoint;
    char *s3_region;
    char *s3_addressing;
};

enum { KEY_RO, KEY_RW, KEY_DUMP };

/* What mount(8) and mount.fuse3 may hand over besides our own options.
 * mount(8) runs "mount.fuse3 MODEL MNT -o OPTS -t fuse.gguffs", which runs
 * "gguffs MODEL MNT -o OPTS,dev,suid" (dropping user, nouser, users, auto,
 * noauto, nofail, _netdev, setuid= and drop_privileges).  libmount itself
 * drops the userspace options of fstab (defaults, nofail, x-*, comment=,
 * ...) and always passes rw or ro; mount.fuse3 run by hand does not.
 * libfuse takes ro, rw, dev, nodev, suid, nosuid, exec, noexec, sync,
 * async, dirsync, atime, noatime; it refuses the rest, so they are
 * accepted here and dropped: the fstab bookkeeping options, and the atime
 * and other kernel flags that mean nothing for gguffs (its times are the
 * model file's, it has no symlinks). */
#define GGUFFS_DISCARD(t) FUSE_OPT_KEY(t, FUSE_OPT_KEY_DISCARD)

static const struct fuse_opt opt_spec[] = {
    { "cache_size=%s", offsetof(struct raw_options, cache_size), 0 },
    { "threads=%s", offsetof(struct raw_options, threads), 0 },
    { "readahead=%s", offsetof(struct raw_options, readahead), 0 },
    { "connections=%s", offsetof(struct raw_options, connections), 0 },
    { "timeout=%s", offsetof(struct raw_options, timeout), 0 },
    { "bearer_token_file=%s", offsetof(struct raw_options, bearer_token_file), 0 },
    { "ca_file=%s", offsetof(struct raw_options, ca_file), 0 },
    { "remote_cache=%s", offsetof(struct raw_options, remote_cache), 0 },
    { "remote_block=%s", offsetof(struct raw_options, remote_block), 0 },
    { "overlay=%s", offsetof(struct raw_options, overlay), 0 },
    { "cache_dir=%s", offsetof(struct raw_options, cache_dir), 0 },
    { "cache_max=%s", offsetof(struct raw_options, cache_max), 0 },
    { "log_file=%s", offsetof(struct raw_options, log_file), 0 },
    { "aws_profile=%s", offsetof(struct raw_options, aws_profile), 0 },
    { "s3_endpoint=%s", offsetof(struct raw_options, s3_endpoint), 0 },
    { "s3_region=%s", offsetof(struct raw_options, s3_region), 0 },
    { "s3_addressing=%s", offsetof(struct raw_options, s3_addressing), 0 },
    FUSE_OPT_KEY("ro", KEY_RO),
    FUSE_OPT_KEY("rw", KEY_RW),
    FUSE_OPT_KEY("--dump", KEY_DUMP),
    GGUFFS_DISCARD("defaults"), GGUFFS_DISCARD("auto"), GGUFFS_DISCARD("noauto"),
    GGUFFS_DISCARD("nofail"), GGUFFS_DISCARD("user"), GGUFFS_DISCARD("nouser"),
    GGUFFS_DISCARD("users"), GGUFFS_DISCARD("owner"), GGUFFS_DISCARD("group"),
    GGUFFS_DISCARD("_netdev"), GGUFFS_DISCARD("comment="),
    GGUFFS_DISCARD("relatime"), GGUFFS_DISCARD("norelatime"),
    GGUFFS_DISCARD("strictatime"), GGUFFS_DISCARD("nostrictatime"),
    GGUFFS_DISCARD("lazytime"), GGUFFS_DISCARD("nolazytime"),
    GGUFFS_DISCARD("diratime"), GGUFFS_DISCARD("nodiratime"),
    GGUFFS_DISCARD("iversion"), GGUFFS_DISCARD("noiversion"),
    GGUFFS_DISCARD("mand"), GGUFFS_DISCARD("nomand"),
    GGUFFS_DISCARD("silent"), GGUFFS_DISCARD("loud"),
    GGUFFS_DISCARD("symfollow"), GGUFFS_DISCARD("nosymfollow"),
    FUSE_OPT_END
};

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct options *o = ((struct raw_options *)data)->o;
    (void)outargs;
    switch (key) {
    case KEY_RO:
        o->ro = 1;
        return 1;              /* keep: the kernel mount is read-only too */
    case KEY_RW:
        o->ro = 0;             /* the last of ro and rw wins, as for mount(8) */
        return 1;              /* keep: libfuse clears MS_RDONLY */
    case KEY_DUMP:
        o->dump = 1;
        return 0;
    case FUSE_OPT_KEY_OPT:
        /* x-systemd.automount, X-mount.mkdir, ...: for mount(8) and
         * systemd, not for the file system */
        if (strncmp(arg, "x-", 2) == 0 || strncmp(arg, "X-", 2) == 0)
            return 0;
        if (strcmp(arg, "allow_other") == 0 || strcmp(arg, "allow_root") == 0)
            o->allow_other = 1;
        else if (strcmp(arg, "default_permissions") == 0)
            o->default_permissions = 1;
        return 1;
    case FUSE_OPT_KEY_NONOPT:
        if (!o->model) {
            o->model = strdup(arg);
            return 0;
        }
        if (!o->mountpoint)
            o->mountpoint = strdup(arg);
        return 1;              /* the mount point, for fuse_parse_cmdline */
    }
    return 1;
}

static void usage(const char *prog)
{
    printf("usage: %s [options] MODEL.gguf MOUNTPOINT\n"
           "       %s [options] URL MOUNTPOINT\n"
           "       %s [options] --dump MODEL.gguf|URL\n"
           "       mount -t fuse.gguffs MODEL.gguf MOUNTPOINT [-o OPTIONS]\n\n"
           "Mounts a GGUF model file as a directory tree:\n"
           "  info                   summary of header, keys and tensors, and what\n"
           "                         ggml would object to\n"
           "  info.json              the same summary as JSON\n"
           "  stats                  counters: caches, reads, edits, remote requests\n"
           "  log                    the last 200 messages: refused edits and why,\n"
           "                         failed commits, remote errors\n"
           "  model.gguf             the model as one GGUF file (edits applied,\n"
           "                         split shards merged), read-only\n"
           "  model.safetensors      the tensors as one safetensors file, read-only\n"
           "  hashes                 what llama-gguf-hash --xxh64 --sha256 prints\n"
           "  hf/                    the model as a Hugging Face folder (config.json,\n"
           "                         generation_config.json, model.safetensors,\n"
           "                         tokenizer.json, tokenizer_config.json)\n"
           "  meta/KEY               one text file per metadata key (writable)\n"
           "  tensors/NAME/raw       the tensor's bytes as stored\n"
           "  tensors/NAME/f32       the tensor dequantized to float32\n"
           "  tensors/NAME/type      ggml type name\n"
           "  tensors/NAME/shape     shape in numpy order\n"
           "  tensors/NAME/raw.npy   raw as a .npy file (types numpy has)\n"
           "  tensors/NAME/f32.npy   f32 as a .npy file\n"
           "  tensors/NAME/stats     count, nan, inf, zeros, min, max, absmax, mean,\n"
           "                         std of f32\n"
           "  tensors/NAME/sha256    sha256sum of raw\n"
           "  tensors/NAME/xxh64     xxhsum (XXH64) of raw\n\n"
           "gguffs options:\n"
           "  -o ro                  never write MODEL.gguf (meta/ is read-only)\n"
           "  -o rw                  edits of meta/ go to MODEL.gguf (the default)\n"
           "  -o cache_size=SIZE     dequantization cache in bytes (K/M/G suffixes;\n"
           "                         default 256M)\n"
           "  -o threads=N           dequantization workers, 0 to 1024, that fill f32\n"
           "                         chunks ahead of sequential readers (default: one\n"
           "                         per CPU beyond two)\n"
           "  -o readahead=SIZE      the kernel's readahead for this mount (K/M/G\n"
           "                         suffixes; default 4M; 0: the kernel's default),\n"
           "                         rounded to whole read requests; needs root (for\n"
           "                         another user: ignored, said once on stderr)\n"
           "  -o log_file=FILE       append messages (refused edits, read errors) to\n"
           "                         FILE (created with mode 0600), one line each with\n"
           "                         a timestamp; without it they go to syslog once\n"
           "                         daemonized, to stderr with -f; the mount's log\n"
           "                         file keeps the last 200 in every case\n"
           "Remote models (URL: http://..., https://..., hf://ORG/REPO/FILE[@REV],\n"
           "s3://BUCKET/KEY or gs://BUCKET/OBJECT; read-only without an overlay;\n"
           "HF_ENDPOINT replaces https://huggingface.co, HF_TOKEN is the token unless\n"
           "bearer_token_file is given; for gs:// GOOGLE_OAUTH_ACCESS_TOKEN is, and\n"
           "STORAGE_EMULATOR_HOST replaces https://storage.googleapis.com; s3:// uses\n"
           "the AWS CLI's credentials and settings: AWS_ACCESS_KEY_ID and\n"
           "AWS_SECRET_ACCESS_KEY, AWS_PROFILE in ~/.aws/credentials and ~/.aws/config,\n"
           "AWS_REGION, AWS_ENDPOINT_URL; with none, requests are anonymous):\n"
           "  -o overlay=FILE        edits of meta/ go to this local file (created by\n"
           "                         the first edit; a later mount with it shows them\n"
           "                         again); model.gguf is the edited model\n"
           "  -o connections=N       parallel HTTP connections (1 to 256; default 8)\n"
           "  -o timeout=SECONDS     how long a read may wait while nothing comes,\n"
           "                         retries included (then EIO), and connecting\n"
           "                         (1 to 3600; default 30)\n"
           "  -o bearer_token_file=FILE  the token sent as Authorization: Bearer to\n"
           "                         the URL's host (never to hosts it redirects to)\n"
           "  -o ca_file=FILE        PEM CA certificates to verify TLS servers with\n"
           "                         (default: the system's)\n"
           "  -o remote_cache=SIZE   in-memory cache of remote bytes (K/M/G suffixes;\n"
           "                         default 256M): raw, f32 and model.gguf read\n"
           "                         through it, with parallel ranged requests and\n"
           "                         readahead for sequential readers\n"
           "  -o remote_block=SIZE   its block: the bytes of one request (64K to 64M;\n"
           "                         default 4M; remote_cache holds at least 4)\n"
           "  -o cache_dir=DIR       keep the blocks read in DIR (made if missing, with\n"
           "                         its missing parents, mode 0700): a later mount of\n"
           "                         the same remote file reads them from there\n"
           "                         (checked, never trusted); DIR is not ~-expanded\n"
           "  -o cache_max=SIZE      bytes DIR may hold (K/M/G suffixes; default 10G);\n"
           "                         least recently used models go first\n"           "  -o aws_profile=NAME    s3://: the AWS profile (instead of AWS_PROFILE;\n"
           "                         AWS_ACCESS_KEY_ID is then not looked at)\n"
           "  -o s3_endpoint=URL     s3://: an S3-compatible store (Ceph RGW, Swift,\n"
           "                         MinIO, R2, ...) instead of AWS; path-style requests\n"
           "  -o s3_region=REGION    s3://: the region requests are signed for\n"
           "  -o s3_addressing=path|virtual  s3://: ENDPOINT/BUCKET/KEY or\n"
           "                         BUCKET.ENDPOINT/KEY\n"
           "  --dump                 print the info summary of MODEL.gguf (or of URL:\n"
           "                         its header only is fetched), no mount\n"
           "  -h, --help             this help\n"
           "  -V, --version          print the version\n\n"
           "Accepted for mount(8) and /etc/fstab, with no effect on gguffs:\n"
           "  -o defaults,auto,noauto,nofail,user,nouser,users,owner,group,_netdev\n"
           "  -o comment=TEXT, -o x-NAME, -o X-NAME\n"
           "  -o relatime,norelatime,strictatime,nostrictatime,lazytime,nolazytime\n"
           "  -o diratime,nodiratime,iversion,noiversion,mand,nomand,silent,loud\n"
           "  -o symfollow,nosymfollow\n"
           "Passed to the kernel as mount flags:\n"
           "  -o dev,nodev,suid,nosuid,exec,noexec,atime,noatime\n"
           "  -o sync,async,dirsync\n\n"
           "Unmount with: fusermount3 -u MOUNTPOINT (or umount MOUNTPOINT as root)\n\n"
           "FUSE options:\n", prog, prog, prog);
    fuse_cmdline_help();
    fuse_lowlevel_help();
}

/* "-ofsname=PATH" with the commas and backslashes of PATH escaped. */
char *options_fsname(const char *path)
{
    size_t n = strlen(path);
    char *s = malloc(2 * n + 16), *p = s;
    if (!s)
        return NULL;
    p += sprintf(p, "-ofsname=");
    for (; *path; path++) {
        if (*path == ',' || *path == '\\')
            *p++ = '\\';
        *p++ = *path;
    }
    *p = '\0';
    return s;
}

void options_mountpoint_error(const char *mp, int e)
{
    if (e == ENOTCONN)
        fprintf(stderr, "gguffs: %s: %s (the gguffs that served it ended without "
                "unmounting: fusermount3 -u %s, then mount again)\n", mp, strerror(e), mp);
    else
        fprintf(stderr, "gguffs: %s: %s\n", mp, strerror(e));
}

/* "512M" -> bytes; false on anything else. */
static bool parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    }
    if (errno || *end || v > (UINT64_MAX >> shift))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}


/* What libfuse says while check_fuse_options tries the options: each
 * fuse_log call's text, kept (its message of unknown options, "fuse:
 * unknown option(s): `-o foo,bar --bogus'", comes in pieces: one call
 * for the start, one per argument). */
#define TRIAL_PIECES 64
static struct {
    char *piece[TRIAL_PIECES];
    unsigned n;
} trial;

static void trial_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
    (void)level;
    char *p;
    if (trial.n < TRIAL_PIECES && vasprintf(&p, fmt, ap) >= 0)
        trial.piece[trial.n++] = p;
}

/* Appends to line (cap bytes) the names in an argument libfuse did not
 * take: "-o", "-oNAME,NAME" or "NAME,NAME" after "-o", or another
 * argument ("--bogus"), each as 'NAME', separated by ", "; *count counts
 * them. */
static void add_names(char *line, size_t cap, const char *arg, bool after_o, unsigned *count)
{
    if (!after_o && strncmp(arg, "-o", 2) != 0) {
        size_t l = strlen(line);
        snprintf(line + l, cap - l, "%s'%s'", *count ? ", " : "", arg);
        (*count)++;
        return;
    }
    const char *p = after_o ? arg : arg + 2;
    while (*p) {
        /* one name: up to a comma not escaped by a backslash */
        const char *q = p;
        while (*q && *q != ',')
            q += q[0] == '\\' && q[1] ? 2 : 1;
        size_t l = strlen(line);
        snprintf(line + l, cap - l, "%s'%.*s'", *count ? ", " : "", (int)(q - p), p);
        (*count)++;
        p = *q ? q + 1 : q;
    }
}

/* The options libfuse is given that it does not know make its session
 * refuse to start, with a message in pieces that went out as several
 * lines (and only after the model was opened).  So a session is made
 * here, once, with a copy of the arguments and libfuse's messages kept
 * (trial_log): nothing is mounted or opened by it.  false after one line:
 * "gguffs: unknown option 'foo' (gguffs --help)". */
static bool check_fuse_options(const struct fuse_args *args)
{
    struct fuse_args copy = FUSE_ARGS_INIT(0, NULL);
    for (int i = 0; i < args->argc; i++)
        if (fuse_opt_add_arg(&copy, args->argv[i]) != 0) {
            fuse_opt_free_args(&copy);
            fprintf(stderr, "gguffs: out of memory\n");
            return false;
        }
    static const struct fuse_lowlevel_ops none;
    fuse_set_log_func(trial_log);
    struct fuse_session *se = fuse_session_new(&copy, &none, sizeof none, NULL);
    fuse_set_log_func(NULL);
    fuse_opt_free_args(&copy);
    if (se)
        fuse_session_destroy(se);
    /* what libfuse said, as one text */
    char text[1024] = "", line[1024] = "";
    for (unsigned i = 0; i < trial.n; i++) {
        size_t l = strlen(text);
        snprintf(text + l, sizeof text - l, "%s", trial.piece[i]);
    }
    unsigned count = 0;
    static const char unknown[] = "fuse: unknown option(s): `";
    size_t tl = strlen(text), ul = sizeof unknown - 1;
    if (!se && tl > ul + 2 && strncmp(text, unknown, ul) == 0 &&
        strcmp(text + tl - 2, "'\n") == 0) {
        /* the arguments left, separated by spaces: "-o", "NAME,NAME" after
         * it, "-oNAME", "--bogus" */
        text[tl - 2] = '\0';
        bool after_o = false;
        for (char *save, *a = strtok_r(text + ul, " ", &save); a; a = strtok_r(NULL, " ", &save)) {
            bool o = strcmp(a, "-o") == 0;
            if (!o)
                add_names(line, sizeof line, a, after_o, &count);
            after_o = o;
        }
    } else if (!se) {
        /* another refusal (a bad value of one of libfuse's options): its
         * words, on one line */
        snprintf(line, sizeof line, "%s", strncmp(text, "fuse: ", 6) == 0 ? text + 6 : text);
        for (char *c = line; *c; c++)
            if (*c == '\n')
                *c = ' ';
        size_t l = strlen(line);
        while (l && line[l - 1] == ' ')
            line[--l] = '\0';
    }
    for (unsigned i = 0; i < trial.n; i++)
        free(trial.piece[i]);
    trial.n = 0;
    if (se)
        return true;
    if (count)
        fprintf(stderr, "gguffs: unknown option%s %s (gguffs --help)\n", count > 1 ? "s" : "",
                line);
    else
        fprintf(stderr, "gguffs: %s (gguffs --help)\n", line[0] ? line : "bad options");
    return false;
}

/* "N" with min <= N <= max (min is 0 or 1) -> N; false on anything else. */
static bool parse_uint(const char *s, unsigned min, unsigned max, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(s, &end, 10);
    if (errno || *end || s[0] < (min ? '1' : '0') || s[0] > '9' || n < min || n > max)
        return false;
    *out = (unsigned)n;
    return true;
}


enum options_result options_parse(int argc, char *argv[], struct options *o,
                                  struct fuse_args *args)
{
    memset(o, 0, sizeof *o);
    *args = (struct fuse_args)FUSE_ARGS_INIT(argc, argv);
    struct raw_options raw = { .o = o };
    enum options_result r = OPTS_ERROR;
    if (fuse_opt_parse(args, &raw, opt_spec, opt_proc) != 0)
        goto out;
    /* Say what is wrong with the mount point ourselves, in our format,
     * before libfuse resolves it. */
    struct stat mst;
    if (o->mountpoint && stat(o->mountpoint, &mst) != 0) {
        options_mountpoint_error(o->mountpoint, errno);
        goto out;
    }
    if (fuse_parse_cmdline(args, &o->copts) != 0) {
        fprintf(stderr, "gguffs: bad arguments (see gguffs --help)\n");
        goto out;
    }
    r = OPTS_DONE;
    if (o->copts.show_help) {
        usage(argv[0]);
        goto out;
    }
    if (o->copts.show_version) {
        printf("gguffs %s (libfuse %s)\n", GGUFFS_VERSION, fuse_pkgversion());
        goto out;
    }
    r = OPTS_ERROR;
    if (o->dump && !o->model) {
        fprintf(stderr, "gguffs: --dump needs MODEL.gguf\n");
        goto out;
    }
    if (!o->dump && (!o->model || !o->copts.mountpoint)) {
        fprintf(stderr, "usage: gguffs [options] MODEL.gguf MOUNTPOINT (see --help)\n");
        goto out;
    }
    if (!check_fuse_options(args))
        goto out;
    o->cache_size = DEFAULT_CACHE_SIZE;
    if (raw.cache_size && !parse_size(raw.cache_size, &o->cache_size)) {
        fprintf(stderr, "gguffs: cache_size=%s: not a size (bytes, with an "
                "optional K, M or G suffix)\n", raw.cache_size);
        goto out;
    }
    o->readahead = DEFAULT_READAHEAD;
    o->readahead_given = raw.readahead != NULL;
    if (raw.readahead && (!parse_size(raw.readahead, &o->readahead) ||
                          o->readahead > (1ull << 30))) {
        fprintf(stderr, "gguffs: readahead=%s: not a size up to 1G (bytes, with an "
                "optional K, M or G suffix)\n", raw.readahead);
        goto out;
    }
    o->threads = -1;
    unsigned threads;
    if (raw.threads && !parse_uint(raw.threads, 0, 1024, &threads)) {
        fprintf(stderr, "gguffs: threads=%s: not a number of threads (0 to 1024)\n",
                raw.threads);
        goto out;
    }
    if (raw.threads)
        o->threads = (int)threads;
    o->remote = remote_url_is_remote(o->model);
    if (!o->remote && (raw.connections || raw.timeout || raw.bearer_token_file ||
                       raw.ca_file || raw.remote_cache || raw.remote_block || raw.cache_dir ||
                       raw.cache_max)) {
        fprintf(stderr, "gguffs: connections, timeout, bearer_token_file, ca_file, "
                "remote_cache, remote_block, cache_dir and cache_max are options of remote "
                "models (http://, https://, hf://, s3://, gs://)\n");
        goto out;
    }
    bool s3 = strncasecmp(o->model, "s3://", 5) == 0;
    if (!s3 && (raw.aws_profile || raw.s3_endpoint || raw.s3_region || raw.s3_addressing)) {
        fprintf(stderr, "gguffs: aws_profile, s3_endpoint, s3_region and s3_addressing are "
                "options of s3:// models\n");
        goto out;
    }
    if (s3 && raw.bearer_token_file) {
        fprintf(stderr, "gguffs: bearer_token_file is not an option of s3:// models (their "
                "requests are signed with the AWS credentials: AWS_ACCESS_KEY_ID, a profile)\n");
        goto out;
    }
    if (raw.s3_addressing && strcmp(raw.s3_addressing, "path") != 0 &&
        strcmp(raw.s3_addressing, "virtual") != 0) {
        fprintf(stderr, "gguffs: s3_addressing=%s: path or virtual\n", raw.s3_addressing);
        goto out;
    }
    if ((raw.aws_profile && !raw.aws_profile[0]) || (raw.s3_endpoint && !raw.s3_endpoint[0]) ||
        (raw.s3_region && !raw.s3_region[0])) {
        fprintf(stderr, "gguffs: aws_profile, s3_endpoint and s3_region need a value\n");
        goto out;
    }
    o->remote_cache = DEFAULT_REMOTE_CACHE;
    if (raw.remote_cache && !parse_size(raw.remote_cache, &o->remote_cache)) {
        fprintf(stderr, "gguffs: remote_cache=%s: not a size (bytes, with an "
                "optional K, M or G suffix)\n", raw.remote_cache);
        goto out;
    }
    o->remote_block = DEFAULT_REMOTE_BLOCK;
    if (raw.remote_block && (!parse_size(raw.remote_block, &o->remote_block) ||
                             o->remote_block < (64u << 10) || o->remote_block > (64u << 20))) {
        fprintf(stderr, "gguffs: remote_block=%s: not a size from 64K to 64M (bytes, "
                "with an optional K, M or G suffix)\n", raw.remote_block);
        goto out;
    }
    /* room for a block being read, blocks fetched ahead and in parallel */
    if (o->remote_cache / 4 < o->remote_block) {
        fprintf(stderr, "gguffs: remote_cache=%llu bytes: at least 4 blocks of remote_block "
                "(%llu bytes)\n", (unsigned long long)o->remote_cache,
                (unsigned long long)o->remote_block);
        goto out;
    }
    if (!o->remote && raw.overlay) {
        fprintf(stderr, "gguffs: overlay is an option of remote models (http://, https://, "
                "hf://, s3://, gs://): a local model is edited in place\n");
        goto out;
    }
    if (raw.overlay && !raw.overlay[0]) {
        fprintf(stderr, "gguffs: overlay=: needs a file name\n");
        goto out;
    }
    o->cache_max = DEFAULT_CACHE_MAX;
    if (raw.cache_max && !parse_size(raw.cache_max, &o->cache_max)) {
        fprintf(stderr, "gguffs: cache_max=%s: not a size (bytes, with an "
                "optional K, M or G suffix)\n", raw.cache_max);
        goto out;
    }
    if (raw.cache_max && !raw.cache_dir) {
        fprintf(stderr, "gguffs: cache_max needs cache_dir=DIR\n");
        goto out;
    }
    if (raw.cache_dir && !raw.cache_dir[0]) {
        fprintf(stderr, "gguffs: cache_dir=: an empty path\n");
        goto out;
    }
    if (raw.connections && (!parse_uint(raw.connections, 1, 256, &o->connections))) {
        fprintf(stderr, "gguffs: connections=%s: not a number from 1 to 256\n",
                raw.connections);
        goto out;
    }
    if (raw.timeout && (!parse_uint(raw.timeout, 1, 3600, &o->timeout))) {
        fprintf(stderr, "gguffs: timeout=%s: not a number of seconds from 1 to 3600\n",
                raw.timeout);
        goto out;
    }
    if (raw.log_file && !raw.log_file[0]) {
        fprintf(stderr, "gguffs: log_file=: needs a file name\n");
        goto out;
    }
    o->log_file = raw.log_file;
    raw.log_file = NULL;
    o->bearer_token_file = raw.bearer_token_file;
    o->ca_file = raw.ca_file;
    o->overlay = raw.overlay;
    o->cache_dir = raw.cache_dir;
    raw.bearer_token_file = raw.ca_file = raw.overlay = raw.cache_dir = NULL;
    o->aws_profile = raw.aws_profile;
    o->s3_endpoint = raw.s3_endpoint;
    o->s3_region = raw.s3_region;
    o->s3_addressing = raw.s3_addressing;
    raw.aws_profile = raw.s3_endpoint = raw.s3_region = raw.s3_addressing = NULL;
    if (o->remote && !o->overlay)
        o->ro = true;          /* no overlay: nothing to write to */
    r = OPTS_RUN;
out:
    free(raw.connections);
    free(raw.timeout);
    free(raw.bearer_token_file);
    free(raw.ca_file);
    free(raw.remote_cache);
    free(raw.remote_block);
    free(raw.overlay);
    free(raw.cache_dir);
    free(raw.cache_max);
    free(raw.log_file);
    free(raw.aws_profile);
    free(raw.s3_endpoint);
    free(raw.s3_region);
    free(raw.s3_addressing);
    free(raw.cache_size);
    free(raw.threads);
    free(raw.readahead);
    return r;
}

void options_free(struct options *o, struct fuse_args *args)
{
    free(o->bearer_token_file);
    free(o->ca_file);
    free(o->overlay);
    free(o->cache_dir);
    free(o->log_file);
    free(o->aws_profile);
    free(o->s3_endpoint);
    free(o->s3_region);
    free(o->s3_addressing);
    free(o->copts.mountpoint);
    free(o->model);
    free(o->mountpoint);
    fuse_opt_free_args(args);
}

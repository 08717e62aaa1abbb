/*
 * fs/options.h — gguffs's command line.
 *
 * gguffs [options] MODEL.gguf MOUNTPOINT, as given by a user, by mount(8)
 * through mount.fuse3, or from /etc/fstab.  The gguffs options are parsed
 * here; libfuse's own (-f, -d, -s, -o allow_other, ...) pass through to
 * fuse_parse_cmdline and fuse_session_new.
 */
#ifndef FS_OPTIONS_H
#define FS_OPTIONS_H

#include "fs.h"

#define DEFAULT_CACHE_SIZE (256ull << 20)
#define DEFAULT_READAHEAD (4ull << 20)
#define DEFAULT_REMOTE_CACHE (256ull << 20)
#define DEFAULT_REMOTE_BLOCK (4ull << 20)
#define DEFAULT_CACHE_MAX (10ull << 30)

struct options {
    char *model;
    char *mountpoint;           /* as given; fuse_parse_cmdline resolves it */
    uint64_t cache_size;        /* -o cache_size, or the default */
    int threads;                /* -o threads, 0 to 1024 (-1: the default) */
    uint64_t readahead;         /* -o readahead, bytes (0: the kernel's) */
    bool readahead_given;       /* -o readahead was given (not the default) */
    /* a model given as a URL (http://, https://, hf://, s3://, gs://) */
    bool remote;
    unsigned connections;       /* -o connections (0: the default) */
    unsigned timeout;           /* -o timeout, seconds (0: the default) */
    char *bearer_token_file;    /* -o bearer_token_file */
    char *ca_file;              /* -o ca_file */
    uint64_t remote_cache;      /* -o remote_cache, bytes */
    uint64_t remote_block;      /* -o remote_block, bytes */
    char *overlay;              /* -o overlay: as given */
    char *cache_dir;            /* -o cache_dir: the disk cache (NULL: none) */
    uint64_t cache_max;         /* -o cache_max, or the default */
    char *log_file;             /* -o log_file: messages appended there (NULL: none) */
    /* s3:// models (remote/s3.h): each NULL when not given */
    char *aws_profile;          /* -o aws_profile */
    char *s3_endpoint;          /* -o s3_endpoint */
    char *s3_region;            /* -o s3_region */
    char *s3_addressing;        /* -o s3_addressing: path or virtual */
    bool ro;
    bool dump;
    bool allow_other;           /* allow_other or allow_root given */
    bool default_permissions;
    struct fuse_cmdline_opts copts;   /* libfuse's: foreground, mount point, ... */
};

enum options_result { OPTS_RUN, OPTS_DONE, OPTS_ERROR };

/* Parses argv into o and args (what libfuse's session gets).  OPTS_DONE:
 * --help or --version was printed; OPTS_ERROR: a one-line error was
 * printed.  Free with options_free in every case. */
enum options_result options_parse(int argc, char *argv[], struct options *o,
                                  struct fuse_args *args);
void options_free(struct options *o, struct fuse_args *args);

/* "-ofsname=PATH" with the commas and backslashes of PATH escaped. */
char *options_fsname(const char *path);

/* The one-line error for a mount point that stat() failed on with errno
 * e.  ENOTCONN is a mount left by a gguffs that ended without unmounting
 * (killed): the line says so and gives the command that clears it. */
void options_mountpoint_error(const char *mp, int e);

#endif

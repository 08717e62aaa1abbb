/*
 * fs/main.c — gguffs: mount a GGUF model file as a directory tree.
 *
 *   gguffs [options] MODEL.gguf MOUNTPOINT
 *
 * The model is opened and validated before anything is mounted: a bad file
 * is refused with one line on stderr and a non-zero exit.  Then the mount
 * is made, the process daemonizes (unless -f) and the parent returns once
 * the mount is in place.
 */
#include "fs.h"

#include "gguf/edit.h"
#include "gguf/info.h"
#include "kernels/dequant.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef GGUFFS_VERSION
#define GGUFFS_VERSION "0.0.0"
#endif

struct ggfs g_fs;

#define DEFAULT_CACHE_SIZE (256ull << 20)

struct options {
    char *model;
    char *mountpoint;           /* as given; fuse_parse_cmdline resolves it */
    char *cache_size;
    char *threads;
    int ro;
    int dump;
    int allow_other;            /* allow_other or allow_root given */
    int default_permissions;
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
    { "cache_size=%s", offsetof(struct options, cache_size), 0 },
    { "threads=%s", offsetof(struct options, threads), 0 },
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
    struct options *o = data;
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
           "       %s --dump MODEL.gguf\n"
           "       mount -t fuse.gguffs MODEL.gguf MOUNTPOINT [-o OPTIONS]\n\n"
           "Mounts a GGUF model file as a directory tree:\n"
           "  info                   summary of header, keys and tensors\n"
           "  stats                  counters of the dequantization cache\n"
           "  model.gguf             the model as one GGUF file (edits applied,\n"
           "                         split shards merged), read-only\n"
           "  meta/KEY               one text file per metadata key (writable)\n"
           "  tensors/NAME/raw       the tensor's bytes as stored\n"
           "  tensors/NAME/f32       the tensor dequantized to float32\n"
           "  tensors/NAME/type      ggml type name\n"
           "  tensors/NAME/shape     shape in numpy order\n\n"
           "gguffs options:\n"
           "  -o ro                  never write MODEL.gguf (meta/ is read-only)\n"
           "  -o rw                  edits of meta/ go to MODEL.gguf (the default)\n"
           "  -o cache_size=SIZE     dequantization cache in bytes (K/M/G suffixes;\n"
           "                         default 256M)\n"
           "  -o threads=N           dequantization workers (default: one per CPU)\n"
           "  --dump                 print the info summary of MODEL.gguf, no mount\n"
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
           "FUSE options:\n", prog, prog);
    fuse_cmdline_help();
    fuse_lowlevel_help();
}

/* "-ofsname=PATH" with the commas and backslashes of PATH escaped. */
static char *fsname_opt(const char *path)
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

/* true if dir is the root of a FUSE mount: mounting over it would hide a
 * live mount (most often a gguffs mounted there before). */
static bool already_fuse_mounted(const char *dir, const struct stat *st)
{
    struct statfs sf;
    if (statfs(dir, &sf) != 0 || sf.f_type != 0x65735546 /* FUSE_SUPER_MAGIC */)
        return false;
    char *parent = malloc(strlen(dir) + 4);
    if (!parent)
        return false;
    sprintf(parent, "%s/..", dir);
    struct stat pst;
    bool root = stat(parent, &pst) == 0 && pst.st_dev != st->st_dev;
    free(parent);
    return root;
}

/* The id /proc gives our mount (fdinfo's mnt_id): the newest gguffs mount
 * on mountpoint in /proc/self/mountinfo; -1 if not found. */
static long long find_mnt_id(const char *mountpoint)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    long long id = -1;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        long long mid;
        char mp[4096], fstype[64];
        if (sscanf(line, "%lld %*d %*s %*s %4095s", &mid, mp) != 2)
            continue;
        const char *sep = strstr(line, " - ");
        if (!sep || sscanf(sep + 3, "%63s", fstype) != 1 || strcmp(fstype, "fuse.gguffs") != 0)
            continue;
        /* mountinfo escapes space, tab, newline and backslash as \ooo */
        char un[4096];
        size_t k = 0;
        for (const char *p = mp; *p && k + 1 < sizeof un; k++) {
            if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
                p[3] >= '0' && p[3] <= '7') {
                un[k] = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
                p += 4;
            } else {
                un[k] = *p++;
            }
        }
        un[k] = '\0';
        if (strcmp(un, mountpoint) == 0)
            id = mid;
    }
    free(line);
    fclose(f);
    return id;
}

static int refuse(const char *model, const struct gguf_diag *d)
{
    if (d->offset != UINT64_MAX)
        fprintf(stderr, "gguffs: %s: %s (at byte offset %llu)\n", model, d->msg,
                (unsigned long long)d->offset);
    else
        fprintf(stderr, "gguffs: %s: %s\n", model, d->msg);
    return 1;
}

static int dump(const char *model)
{
    struct gguf_file *gf;
    struct gguf_diag d;
    if (gguf_open(model, &gf, &d) != GGUF_OK)
        return refuse(model, &d);
    struct gguf_buf b = { 0 };
    enum gguf_err e = gguf_info_render(gf, model, &b);
    if (e == GGUF_OK)
        fwrite(b.data, 1, b.len, stdout);
    gguf_buf_free(&b);
    gguf_close(gf);
    return e == GGUF_OK ? 0 : 1;
}

int main(int argc, char *argv[])
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct options o = { 0 };
    struct fuse_cmdline_opts copts = { 0 };
    int ret = 1;

    if (fuse_opt_parse(&args, &o, opt_spec, opt_proc) != 0)
        goto out_args;
    /* Say what is wrong with the mount point ourselves, in our format,
     * before libfuse resolves it. */
    struct stat mst;
    if (o.mountpoint && stat(o.mountpoint, &mst) != 0) {
        fprintf(stderr, "gguffs: %s: %s\n", o.mountpoint, strerror(errno));
        goto out_args;
    }
    if (fuse_parse_cmdline(&args, &copts) != 0) {
        fprintf(stderr, "gguffs: bad arguments (see gguffs --help)\n");
        goto out_args;
    }
    if (copts.show_help) {
        usage(argv[0]);
        ret = 0;
        goto out_args;
    }
    if (copts.show_version) {
        printf("gguffs %s (libfuse %s)\n", GGUFFS_VERSION, fuse_pkgversion());
        ret = 0;
        goto out_args;
    }
    if (o.dump) {
        if (!o.model) {
            fprintf(stderr, "gguffs: --dump needs MODEL.gguf\n");
            goto out_args;
        }
        ret = dump(o.model);
        goto out_args;
    }
    if (!o.model || !copts.mountpoint) {
        fprintf(stderr, "usage: gguffs [options] MODEL.gguf MOUNTPOINT (see --help)\n");
        goto out_args;
    }
    uint64_t cache_bytes = 0;
    if (o.cache_size && !parse_size(o.cache_size, &cache_bytes)) {
        fprintf(stderr, "gguffs: cache_size=%s: not a size (bytes, with an "
                "optional K, M or G suffix)\n", o.cache_size);
        goto out_args;
    }
    g_fs.cache_size = o.cache_size ? cache_bytes : DEFAULT_CACHE_SIZE;
    g_fs.threads = 0;
    if (o.threads) {
        char *end;
        errno = 0;
        unsigned long n = strtoul(o.threads, &end, 10);
        if (errno || *end || o.threads[0] < '1' || o.threads[0] > '9' || n > 1024) {
            fprintf(stderr, "gguffs: threads=%s: not a number of threads (1 to 1024)\n",
                    o.threads);
            goto out_args;
        }
        g_fs.threads = (unsigned)n;
    }

    /* "/dev/fd/N": mount.fuse3 -o drop_privileges made the mount and hands
     * over its /dev/fuse descriptor, which libfuse then uses as is. */
    unsigned fuse_fd;
    char fd_tail;
    if (sscanf(copts.mountpoint, "/dev/fd/%u%c", &fuse_fd, &fd_tail) == 1) {
        /* That mount lacks the default_permissions gguffs adds to its own
         * mounts: with allow_other, anyone could write meta/. */
        if (o.allow_other && !o.default_permissions) {
            fprintf(stderr, "gguffs: with drop_privileges, allow_other needs "
                    "default_permissions too (umount the mount point, mount again)\n");
            goto out_args;
        }
    } else {
        if (stat(copts.mountpoint, &mst) != 0) {
            fprintf(stderr, "gguffs: %s: %s\n", copts.mountpoint, strerror(errno));
            goto out_args;
        }
        if (!S_ISDIR(mst.st_mode)) {
            fprintf(stderr, "gguffs: %s: not a directory\n", copts.mountpoint);
            goto out_args;
        }
        if (already_fuse_mounted(copts.mountpoint, &mst)) {
            fprintf(stderr, "gguffs: %s: already a FUSE mount point (unmount it first)\n",
                    copts.mountpoint);
            goto out_args;
        }
    }

    /* Open and validate the model before anything is mounted. */
    g_fs.model_path = o.model;
    g_fs.read_only = o.ro;
    g_fs.timeout = 365.0 * 86400;
    /* Edits rename files beside the model and daemonizing changes to /:
     * keep the absolute path. */
    char *real = realpath(o.model, NULL);
    if (!real) {
        fprintf(stderr, "gguffs: %s: %s\n", o.model, strerror(errno));
        goto out_args;
    }
    g_fs.model_real = real;
    if (!o.ro) {
        /* Finish what a crash interrupted: the model is then the old or
         * the new version of an edit, never a mix. */
        char what[256];
        struct gguf_diag rd;
        if (gguf_recover(real, what, sizeof what, &rd) != GGUF_OK) {
            refuse(o.model, &rd);
            goto out_args;
        }
        if (what[0])
            fprintf(stderr, "gguffs: %s: %s\n", o.model, what);
    } else {
        char *j = malloc(strlen(real) + 32);
        if (j) {
            sprintf(j, "%s.gguffs-journal", real);
            bool interrupted = access(j, F_OK) == 0;
            free(j);
            if (interrupted) {
                fprintf(stderr, "gguffs: %s: an edit was interrupted; mount once "
                        "without -o ro to roll it back\n", o.model);
                goto out_args;
            }
        }
    }
    struct shard *shards;
    unsigned n_shards;
    char err[512];
    int e = ggfs_open_model(real, &shards, &n_shards, err, sizeof err);
    if (e) {
        /* name the model as the user gave it when the message is about it */
        size_t rl = strlen(real);
        if (strncmp(err, real, rl) == 0 && err[rl] == ':')
            fprintf(stderr, "gguffs: %s%s\n", o.model, err + rl);
        else
            fprintf(stderr, "gguffs: %s: %s\n", o.model, err);
        goto out_args;
    }
    /* edits go to the first shard, wherever the user pointed */
    char *first = strdup(shards[0].path);
    if (!first) {
        ggfs_shards_free(shards, n_shards);
        goto out_args;
    }
    free(real);
    g_fs.model_real = first;
    e = ggfs_state_new(shards, n_shards, o.model, 0, &g_fs.st);
    if (e) {
        ggfs_shards_free(shards, n_shards);
        fprintf(stderr, "gguffs: %s: %s\n", o.model,
                e == EEXIST ? "a tensor name occurs in two shards" : strerror(e));
        goto out_args;
    }
    /* Readers must not starve a commit waiting to swap the state in. */
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&g_fs.lock, &ra);
    pthread_mutex_init(&g_fs.commit_mu, NULL);
    pthread_rwlockattr_destroy(&ra);
    ggfs_dequant_init();
    g_fs.cache = cache_new(g_fs.cache_size, ggfs_fill_chunk, NULL);
    if (!g_fs.cache) {
        fprintf(stderr, "gguffs: out of memory\n");
        goto out_tree;
    }

    char *fsname = fsname_opt(o.model);
    if (!fsname || fuse_opt_add_arg(&args, fsname) != 0 ||
        fuse_opt_add_arg(&args, "-osubtype=gguffs") != 0 ||
        fuse_opt_add_arg(&args, "-odefault_permissions") != 0) {
        free(fsname);
        fprintf(stderr, "gguffs: out of memory\n");
        goto out_tree;
    }
    free(fsname);

    struct fuse_session *se = fuse_session_new(&args, &ggfs_ops, sizeof ggfs_ops, NULL);
    if (!se)
        goto out_tree;
    g_fs.se = se;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    if (fuse_session_mount(se, copts.mountpoint) != 0) {
        fprintf(stderr, "gguffs: %s: cannot mount\n", copts.mountpoint);
        goto out_signals;
    }
    g_fs.mnt_id = find_mnt_id(copts.mountpoint);
    /* The mount exists now: requests queue until the loop runs, so the
     * parent may return. */
    fuse_daemonize(copts.foreground);
    /* after the fork: threads do not survive it */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    ggfs_workers_start(g_fs.threads ? g_fs.threads : ncpu > 0 ? (unsigned)ncpu : 1);
    ggfs_notify_start();

    if (copts.singlethread) {
        ret = fuse_session_loop(se);
    } else {
        struct fuse_loop_config *cfg = fuse_loop_cfg_create();
        fuse_loop_cfg_set_clone_fd(cfg, copts.clone_fd);
        if (copts.max_idle_threads <= 100000)      /* UINT_MAX: not given */
            fuse_loop_cfg_set_idle_threads(cfg, copts.max_idle_threads);
        if (copts.max_threads > 0 && copts.max_threads <= 100000)
            fuse_loop_cfg_set_max_threads(cfg, copts.max_threads);
        ret = fuse_session_loop_mt(se, cfg);
        fuse_loop_cfg_destroy(cfg);
    }
    /* the loop returns the signal number after SIGTERM/SIGINT: a clean end */
    ret = ret < 0;
    ggfs_workers_stop();
    /* Unmount before the notifier is joined: a notification it is sending
     * may wait for a kernel lock held by a request nobody will answer now;
     * unmounting aborts those requests and so frees it. */
    fuse_session_unmount(se);
    ggfs_notify_stop();
    ggfs_edit_stop();
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out_tree:
    cache_free(g_fs.cache);
    ggfs_state_put(g_fs.st);
out_args:
    free(copts.mountpoint);
    free(o.model);
    free((char *)g_fs.model_real);
    free(o.mountpoint);
    free(o.cache_size);
    free(o.threads);
    fuse_opt_free_args(&args);
    return ret;
}

/*
 * core/follow.c — a read-only mount that follows the edits a read-write
 * mount of the same local model makes: the writer's records beside the
 * model (MODEL.gguffs-edits), and the follower's checks of them (see
 * follow.h for the design and what it promises).
 */
#include "core/follow.h"
#include "core/log.h"
#include "core/model.h"
#include "core/state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEEP 8              /* records kept: edits a follower may lag behind */
#define HEAD 64
#define REC 144
#define IMAGE (HEAD + KEEP * REC)

enum { KIND_IN_PLACE = 1, KIND_REWRITE = 2 };

static const char magic[8] = { 'G', 'G', 'U', 'F', 'F', 'S', 'E', '1' };
static const struct gguf_enc le = { .big_endian = false, .v1 = false };

/* One commit, as the writer saw it. */
struct rec {
    uint64_t seq, kind, doff_before, doff_after;
    struct fsig before, after;
};

/* The file's records as read once. */
struct snap {
    bool present;           /* the file is there */
    bool busy;              /* a commit is under way (its lock is held) */
    bool ok;                /* the records verified */
    uint64_t writer, seq;
    unsigned n;
    struct rec r[KEEP];
};

struct follow {
    char *path;             /* MODEL.gguffs-edits */
    const char *file;       /* its name in the folder */
    bool follower;          /* else the writer */
    /* the writer's, under commit_mu */
    bool wrote;             /* the file is this mount's: removed at the end */
    bool warned;
    int wfd;                /* open during a commit */
    uint64_t writer, seq;
    unsigned n;
    struct rec r[KEEP];
    struct fsig before;
    uint64_t before_doff;
    /* the follower's: the signature of the file at the path as the
     * current version knows it (under sig_mu), and the writer's records
     * last adopted (under commit_mu) */
    struct fsig known;
    uint64_t seen_writer, seen_seq;
    bool open_warned;
};

/* ---- the format ------------------------------------------------------------- */

/* FNV-1a (64 bits) of the header's first 56 bytes, then of n records. */
static uint64_t cksum(const uint8_t *img, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < HEAD + n * REC; i++) {
        if (i == 56)
            i = HEAD;       /* the checksum itself */
        h ^= img[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void put_sig(uint8_t *p, const struct fsig *s)
{
    gguf_wr64(&le, p, (uint64_t)s->dev);
    gguf_wr64(&le, p + 8, (uint64_t)s->ino);
    gguf_wr64(&le, p + 16, (uint64_t)s->size);
    gguf_wr64(&le, p + 24, (uint64_t)s->mtime.tv_sec);
    gguf_wr64(&le, p + 32, (uint64_t)s->mtime.tv_nsec);
    gguf_wr64(&le, p + 40, (uint64_t)s->ctime.tv_sec);
    gguf_wr64(&le, p + 48, (uint64_t)s->ctime.tv_nsec);
}

static void get_sig(const uint8_t *p, struct fsig *s)
{
    memset(s, 0, sizeof *s);
    s->dev = (dev_t)gguf_rd64(&le, p);
    s->ino = (ino_t)gguf_rd64(&le, p + 8);
    s->size = (off_t)gguf_rd64(&le, p + 16);
    s->mtime.tv_sec = (time_t)gguf_rd64(&le, p + 24);
    s->mtime.tv_nsec = (long)gguf_rd64(&le, p + 32);
    s->ctime.tv_sec = (time_t)gguf_rd64(&le, p + 40);
    s->ctime.tv_nsec = (long)gguf_rd64(&le, p + 48);
}

/* The writer's records as the file's bytes; their length. */
static size_t encode(const struct follow *fl, uint8_t *img)
{
    memset(img, 0, IMAGE);
    memcpy(img, magic, 8);
    gguf_wr64(&le, img + 8, fl->writer);
    gguf_wr64(&le, img + 16, fl->seq);
    gguf_wr64(&le, img + 24, fl->n);
    for (unsigned i = 0; i < fl->n; i++) {
        uint8_t *p = img + HEAD + (size_t)i * REC;
        const struct rec *r = &fl->r[i];
        gguf_wr64(&le, p, r->seq);
        gguf_wr64(&le, p + 8, r->kind);
        gguf_wr64(&le, p + 16, r->doff_before);
        gguf_wr64(&le, p + 24, r->doff_after);
        put_sig(p + 32, &r->before);
        put_sig(p + 88, &r->after);
    }
    gguf_wr64(&le, img + 56, cksum(img, fl->n));
    return HEAD + (size_t)fl->n * REC;
}

/* The records in the len bytes at img, checked (hostile until then):
 * false for anything the writer does not write. */
static bool decode(const uint8_t *img, size_t len, struct snap *s)
{
    if (len < HEAD || memcmp(img, magic, 8) != 0)
        return false;
    uint64_t n = gguf_rd64(&le, img + 24);
    if (n > KEEP || len < HEAD + n * REC)
        return false;
    if (cksum(img, (size_t)n) != gguf_rd64(&le, img + 56))
        return false;
    s->writer = gguf_rd64(&le, img + 8);
    s->seq = gguf_rd64(&le, img + 16);
    s->n = (unsigned)n;
    for (unsigned i = 0; i < s->n; i++) {
        const uint8_t *p = img + HEAD + (size_t)i * REC;
        struct rec *r = &s->r[i];
        r->seq = gguf_rd64(&le, p);
        r->kind = gguf_rd64(&le, p + 8);
        r->doff_before = gguf_rd64(&le, p + 16);
        r->doff_after = gguf_rd64(&le, p + 24);
        get_sig(p + 32, &r->before);
        get_sig(p + 88, &r->after);
        if ((r->kind != KIND_IN_PLACE && r->kind != KIND_REWRITE) ||
            (r->kind == KIND_IN_PLACE && r->doff_before != r->doff_after))
            return false;
    }
    return true;
}

/* The same file with the same bytes: device, inode, size, mtime, ctime
 * (the link count aside: both sides took it with fstat of one file). */
static bool same(const struct fsig *a, const struct fsig *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
           a->ctime.tv_sec == b->ctime.tv_sec && a->ctime.tv_nsec == b->ctime.tv_nsec;
}

static bool lock_held(int fd)
{
    struct flock l = { .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    return fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

/* Reads the records: whether a commit is under way (the lock, first: a
 * commit that has ended wrote its record before it let the lock go), then
 * the records.  No file (or not a regular file): no evidence. */
static void take(const struct follow *fl, struct snap *s)
{
    memset(s, 0, sizeof *s);
    /* not a link, and never a wait (a FIFO put there) */
    int fd = open(fl->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat sb;
    if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        return;
    s->present = true;
    s->busy = lock_held(fd);
    if (!s->busy) {
        uint8_t img[IMAGE];
        ssize_t r;
        while ((r = pread(fd, img, sizeof img, 0)) < 0 && errno == EINTR)
            ;
        s->ok = r > 0 && decode(img, (size_t)r, s);
        /* a torn read of a record being written: a commit began since */
        if (!s->ok)
            s->busy = lock_held(fd);
    }
    close(fd);
}

/* Whether the records lead from the signature from to the one to, each
 * record's before the previous one's after (the first one's from);
 * in_place: only edits in place (the data never moved).  Reaching to at
 * any step counts: records after it are edits made since. */
static bool chain(const struct snap *s, const struct fsig *from, const struct fsig *to,
                  bool in_place)
{
    if (same(from, to))
        return true;
    struct fsig cur = *from;
    bool started = false;
    for (unsigned i = 0; i < s->n; i++) {
        const struct rec *r = &s->r[i];
        if (!same(&r->before, &cur)) {
            if (started)
                return false;       /* another history */
            continue;
        }
        if (in_place && r->kind != KIND_IN_PLACE)
            return false;
        started = true;
        cur = r->after;
        if (same(&cur, to))
            return true;
    }
    return false;
}

/* Every live version whose shard 0 was known as want learns now (the
 * records verified that only gguffs' header writes lie between). */
static void learn(struct mount *fs, const struct fsig *want, const struct fsig *now)
{
    struct follow *fl = fs->follow;
    pthread_mutex_lock(&fs->states_mu);
    pthread_mutex_lock(&fs->sig_mu);
    for (struct glist *l = fs->states.next; l != &fs->states; l = l->next) {
        struct state *st = GLIST_ENTRY(l, struct state, link);
        if (st->sig && st->model->n && same(&st->sig[0], want))
            st->sig[0] = *now;
    }
    if (same(&fl->known, want))
        fl->known = *now;
    pthread_mutex_unlock(&fs->sig_mu);
    pthread_mutex_unlock(&fs->states_mu);
}

/* ---- the mount's role -------------------------------------------------------- */

int core_follow_init(struct mount *fs)
{
    if (fs->remote || fs->overlay || !fs->model_real || !fs->st->sig)
        return 0;
    struct follow *fl = calloc(1, sizeof *fl);
    size_t len = strlen(fs->model_real);
    if (!fl || !(fl->path = malloc(len + sizeof CORE_EDITS_SUFFIX))) {
        free(fl);
        return ENOMEM;
    }
    memcpy(fl->path, fs->model_real, len);
    memcpy(fl->path + len, CORE_EDITS_SUFFIX, sizeof CORE_EDITS_SUFFIX);
    const char *slash = strrchr(fl->path, '/');
    fl->file = slash ? slash + 1 : fl->path;
    fl->wfd = -1;
    fl->follower = fs->read_only || fs->write_err;
    if (fl->follower) {
        fl->known = fs->st->sig[0];
    } else {
        if (getrandom(&fl->writer, sizeof fl->writer, GRND_NONBLOCK) != sizeof fl->writer)
            fl->writer = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
        /* a leftover of a mount that ended without removing it: this
         * mount holds the model's lock, no other writer can be using it */
        if (fs->lock_fd >= 0)
            unlink(fl->path);
    }
    fs->follow = fl;
    return 0;
}

void core_follow_fini(struct mount *fs)
{
    struct follow *fl = fs->follow;
    if (!fl)
        return;
    if (fl->wfd >= 0)
        close(fl->wfd);
    if (fl->wrote)
        unlink(fl->path);
    free(fl->path);
    free(fl);
    fs->follow = NULL;
}

bool core_follows(const struct mount *fs)
{
    return fs->follow && fs->follow->follower;
}

const char *core_follow_file(const struct mount *fs)
{
    return core_follows(fs) ? fs->follow->file : NULL;
}

/* ---- the writer ------------------------------------------------------------------ */

static void warn_once(struct mount *fs, const char *what, int e)
{
    struct follow *fl = fs->follow;
    if (fl->warned)
        return;
    fl->warned = true;
    core_log(LOG_WARNING, "gguffs: %s: %s %s: %s; a read-only mount of the model cannot "
             "follow its edits (it fails reads with EIO after one)\n", fs->model_path, what,
             fl->path, strerror(e));
}

void core_follow_begin(struct mount *fs, const struct state *old)
{
    struct follow *fl = fs->follow;
    if (!fl || fl->follower || !old->sig)
        return;
    pthread_mutex_lock(&fs->sig_mu);
    fl->before = old->sig[0];
    pthread_mutex_unlock(&fs->sig_mu);
    fl->before_doff = st_meta(old)->data_off;
    /* this mount's first record starts the file afresh; not a link,
     * never a wait (a FIFO put there) */
    fl->wfd = open(fl->path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK |
                   (fl->wrote ? 0 : O_TRUNC), 0644);
    struct stat sb;
    if (fl->wfd >= 0 && (fstat(fl->wfd, &sb) != 0 || !S_ISREG(sb.st_mode))) {
        close(fl->wfd);
        fl->wfd = -1;
        errno = EINVAL;
    }
    if (fl->wfd < 0) {
        warn_once(fs, "cannot create", errno);
        return;
    }
    fl->wrote = true;
    struct flock l = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    if (fcntl(fl->wfd, F_OFD_SETLK, &l) != 0)
        warn_once(fs, "cannot lock", errno);
}

void core_follow_end(struct mount *fs, const struct state *ns)
{
    struct follow *fl = fs->follow;
    if (!fl || fl->wfd < 0)
        return;
    if (ns && ns->sig) {
        if (fl->n == KEEP) {
            memmove(fl->r, fl->r + 1, (KEEP - 1) * sizeof *fl->r);
            fl->n--;
        }
        struct rec *r = &fl->r[fl->n++];
        r->seq = ++fl->seq;
        r->before = fl->before;
        pthread_mutex_lock(&fs->sig_mu);
        r->after = ns->sig[0];
        pthread_mutex_unlock(&fs->sig_mu);
        r->doff_before = fl->before_doff;
        r->doff_after = st_meta(ns)->data_off;
        r->kind = r->after.dev == r->before.dev && r->after.ino == r->before.ino
                  ? KIND_IN_PLACE : KIND_REWRITE;
        if (r->kind == KIND_IN_PLACE && r->doff_after != r->doff_before)
            r->kind = KIND_REWRITE;     /* cannot be: in place keeps the room */
        uint8_t img[IMAGE];
        size_t len = encode(fl, img);
        ssize_t w;
        while ((w = pwrite(fl->wfd, img, len, 0)) < 0 && errno == EINTR)
            ;
        if (w != (ssize_t)len)
            warn_once(fs, "cannot write", w < 0 ? errno : EIO);
    }
    /* unlocked before the close: the close's event (IN_CLOSE_WRITE) wakes
     * the followers once the lock is gone */
    struct flock u = { .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    fcntl(fl->wfd, F_OFD_SETLK, &u);
    close(fl->wfd);
    fl->wfd = -1;
}

/* ---- the follower ------------------------------------------------------------------ */

enum follow_verdict core_follow_check(struct mount *fs, const struct fsig *want,
                                      const struct fsig *now)
{
    struct follow *fl = fs->follow;
    if (!fl || !fl->follower)
        return FOLLOW_NO;
    for (int tries = 0; tries < 3; tries++) {
        struct snap s;
        take(fl, &s);
        if (s.busy)
            return FOLLOW_BUSY;
        if (!s.ok)
            continue;       /* torn by a commit that began and ended since */
        if (!chain(&s, want, now, true))
            return FOLLOW_NO;
        learn(fs, want, now);
        return FOLLOW_OK;
    }
    return FOLLOW_NO;
}

enum follow_verdict core_follow_path(struct mount *fs, const struct fsig *now)
{
    struct follow *fl = fs->follow;
    if (!fl || !fl->follower)
        return FOLLOW_NO;
    pthread_mutex_lock(&fs->sig_mu);
    struct fsig known = fl->known;
    pthread_mutex_unlock(&fs->sig_mu);
    for (int tries = 0; tries < 3; tries++) {
        struct snap s;
        take(fl, &s);
        if (s.busy)
            return FOLLOW_BUSY;
        if (s.ok)
            return chain(&s, &known, now, false) ? FOLLOW_OK : FOLLOW_NO;
    }
    return FOLLOW_NO;
}

/* Whether the tensors of a and b are the same and lie the same way
 * relative to their data (names, types, shapes, sizes, offsets, the
 * data's length, byte order, alignment). */
static bool same_tensors(const struct gguf_file *a, const struct gguf_file *b)
{
    bool da = gguf_has_tensor_data(a), db = gguf_has_tensor_data(b);
    if (a->n_tensors != b->n_tensors || a->alignment != b->alignment || da != db ||
        a->enc.big_endian != b->enc.big_endian)
        return false;
    if (da && (a->file_size < a->data_off || b->file_size < b->data_off ||
               a->file_size - a->data_off != b->file_size - b->data_off))
        return false;
    for (uint64_t j = 0; j < a->n_tensors; j++) {
        const struct gguf_tensor *x = &a->tensors[j], *y = &b->tensors[j];
        if (x->name_len != y->name_len ||
            memcmp(a->hdr + x->name_off, b->hdr + y->name_off, x->name_len) != 0 ||
            x->n_dims != y->n_dims || memcmp(x->ne, y->ne, sizeof x->ne) != 0 ||
            x->type != y->type || x->offset != y->offset || x->nbytes != y->nbytes)
            return false;
    }
    return true;
}

static bool same_header(const struct gguf_file *a, const struct gguf_file *b)
{
    return a->hdr_size == b->hdr_size && a->data_off == b->data_off &&
           memcmp(a->hdr, b->hdr, a->hdr_size) == 0;
}

static void sig_of_stat(const struct stat *sb, struct fsig *out)
{
    *out = (struct fsig){ sb->st_dev, sb->st_ino, sb->st_size, sb->st_nlink, sb->st_mtim,
                          sb->st_ctim };
}

/* One try of core_follow_update: what it returns (0: adopted in place,
 * or nothing to adopt), or -1 to try again (a commit began meanwhile). */
static int adopt(struct mount *fs)
{
    struct follow *fl = fs->follow;
    struct state *old = fs->st;
    const char *path = fs->model_real;
    struct snap s1, s2;
    /* the file first, then the records: a change seen is one a commit
     * under way makes (the lock is held) or one recorded since */
    struct stat sb;
    if (stat(path, &sb) != 0)
        return 0;           /* removed: the check of the path says so */
    struct fsig now;
    sig_of_stat(&sb, &now);
    take(fl, &s1);
    if (s1.busy)
        return 0;           /* its end (the file's close) wakes us again */
    if (s1.present && !s1.ok)
        return -1;          /* torn by a commit that began and ended since */
    pthread_mutex_lock(&fs->sig_mu);
    struct fsig known = fl->known;
    pthread_mutex_unlock(&fs->sig_mu);
    bool fresh = s1.ok && (s1.writer != fl->seen_writer || s1.seq != fl->seen_seq);
    if (same(&known, &now) && !fresh)
        return 0;           /* nothing new */
    if (!same(&known, &now) && !(s1.ok && chain(&s1, &known, &now, false))) {
        /* changed, and not by edits gguffs recorded */
        bool moved = known.dev != now.dev || known.ino != now.ino;
        return moved ? UNDER_REPLACED : UNDER_CHANGED;
    }
    struct gguf_split *model;
    struct gguf_diag d;
    if (core_open_model(path, true, false, NULL, NULL, NULL, 0, &model, &d) != GGUF_OK) {
        if (!fl->open_warned)
            core_log(LOG_ERR, "gguffs: %s: following an edit: %s\n", fs->model_path, d.msg);
        fl->open_warned = true;
        return 0;
    }
    /* what was parsed is the file recorded: no commit began meanwhile */
    struct fsig got;
    take(fl, &s2);
    bool stable = core_sig_take(model->shards[0].src->fd, &got) && same(&got, &now) &&
                  !s2.busy && s2.ok == s1.ok && s2.writer == s1.writer && s2.seq == s1.seq;
    if (!stable) {
        gguf_split_close(model);
        return -1;
    }
    /* tensor data never moves with an edit: the same tensors, the same
     * way, and the other shards as they were */
    bool ok = model->n == old->model->n;
    for (unsigned i = 0; ok && i < model->n; i++) {
        ok = same_tensors(old->model->shards[i].gf, model->shards[i].gf);
        struct fsig si;
        if (ok && i > 0) {
            pthread_mutex_lock(&fs->sig_mu);
            struct fsig want = old->sig[i];
            pthread_mutex_unlock(&fs->sig_mu);
            ok = core_sig_take(model->shards[i].src->fd, &si) && same(&si, &want);
        }
    }
    if (!ok) {
        gguf_split_close(model);
        core_log(LOG_ERR, "gguffs: %s: not following an edit: its tensors are not "
                 "those of the version mounted\n", fs->model_path);
        return UNDER_CHANGED;
    }
    bool moved = known.dev != now.dev || known.ino != now.ino;
    if (!moved) {
        /* edits in place: the versions reading this file go on reading it */
        learn(fs, &known, &now);
        if (same_header(st_meta(old), model->shards[0].gf)) {
            gguf_split_close(model);
            fl->seen_writer = s1.writer;
            fl->seen_seq = s1.seq;
            return 0;       /* the version shown already */
        }
    }
    struct state *ns;
    int e = core_state_new(fs, model, old->gen + 1, &ns);
    if (e) {
        gguf_split_close(model);
        core_log(LOG_ERR, "gguffs: %s: following an edit: %s\n", fs->model_path,
                 strerror(e));
        return 0;
    }
    fl->seen_writer = s1.writer;
    fl->seen_seq = s1.seq;
    if (moved) {
        /* a rewrite: the versions before read the old file, whose bytes
         * gguffs does not write again; the path's file is the new one */
        pthread_mutex_lock(&fs->sig_mu);
        fl->known = now;
        fs->path_dev = now.dev;
        fs->path_ino = now.ino;
        pthread_mutex_unlock(&fs->sig_mu);
    }
    atomic_fetch_add(&fs->under_followed, 1);
    core_state_swap(fs, ns);
    return moved ? FOLLOW_NEW_FILE : 0;
}

int core_follow_update(struct mount *fs)
{
    if (!core_follows(fs))
        return 0;
    int r = 0;
    pthread_mutex_lock(&fs->commit_mu);
    for (int tries = 0; tries < 3 && !atomic_load(&fs->under); tries++)
        if ((r = adopt(fs)) >= 0)
            break;
    pthread_mutex_unlock(&fs->commit_mu);
    return r < 0 ? 0 : r;
}

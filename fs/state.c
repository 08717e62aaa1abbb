/* fs/state.c — one version of the model: index, name tables, rendered text. */
#include "fs.h"

#include "gguf/info.h"
#include "gguf/names.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h ^ (h >> 31);
}

int64_t ntab_find(const struct ntab *t, const char *name)
{
    if (!t->slot)
        return -1;
    for (uint64_t h = hash_str(name) & t->mask;; h = (h + 1) & t->mask) {
        uint32_t e = t->slot[h];
        if (e == 0)
            return -1;
        if (strcmp(t->names[e - 1], name) == 0)
            return e - 1;
    }
}

static void ntab_free(struct ntab *t)
{
    for (uint64_t i = 0; i < t->n; i++)
        free(t->names[i]);
    free(t->names);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

/* Adds n names produced by name_of(i); a clash (two entries with the same
 * file name: a key literally named "x#2" next to a duplicated "x") keeps the
 * first and hides the later one from lookups (readdir still lists it). */
static int ntab_build(struct ntab *t, uint64_t n,
                      bool (*name_of)(uint64_t i, struct gguf_buf *out))
{
    uint64_t cap = 16;
    while (cap < n * 2)
        cap <<= 1;
    t->names = calloc(n ? n : 1, sizeof *t->names);
    t->slot = calloc(cap, sizeof *t->slot);
    t->mask = cap - 1;
    if (!t->names || !t->slot)
        return ENOMEM;
    struct gguf_buf b = { 0 };
    for (uint64_t i = 0; i < n; i++) {
        b.len = 0;
        if (!name_of(i, &b) || !gguf_buf_putc(&b, '\0')) {
            gguf_buf_free(&b);
            return ENOMEM;
        }
        t->names[i] = strdup(b.data);
        if (!t->names[i]) {
            gguf_buf_free(&b);
            return ENOMEM;
        }
        t->n = i + 1;
        if (ntab_find(t, t->names[i]) >= 0)
            continue;
        uint64_t h = hash_str(t->names[i]) & t->mask;
        while (t->slot[h])
            h = (h + 1) & t->mask;
        t->slot[h] = (uint32_t)(i + 1);
    }
    gguf_buf_free(&b);
    return 0;
}

/* ---- key ids: stable inode numbers for meta/ files ------------------------
 *
 * A key's inode is KV_BASE + the id of its file name, so that a file stays
 * the same file when other keys are added, removed or renamed (an open
 * meta/B must not turn into meta/C because A was deleted).  The registry
 * only grows; it is changed only while a state is built, and states are
 * built one at a time (at mount, then under the commit lock).
 */
static struct {
    char **names;
    uint64_t *slot;      /* id+1, 0 = empty */
    uint64_t mask, n, cap;
} reg;

static int64_t reg_find(const char *name)
{
    if (!reg.slot)
        return -1;
    for (uint64_t h = hash_str(name) & reg.mask;; h = (h + 1) & reg.mask) {
        uint64_t e = reg.slot[h];
        if (e == 0)
            return -1;
        if (strcmp(reg.names[e - 1], name) == 0)
            return (int64_t)(e - 1);
    }
}

static bool reg_rehash(uint64_t nslots)
{
    uint64_t *ns = calloc(nslots, sizeof *ns);
    if (!ns)
        return false;
    for (uint64_t i = 0; i < reg.n; i++) {
        uint64_t h = hash_str(reg.names[i]) & (nslots - 1);
        while (ns[h])
            h = (h + 1) & (nslots - 1);
        ns[h] = i + 1;
    }
    free(reg.slot);
    reg.slot = ns;
    reg.mask = nslots - 1;
    return true;
}

int64_t ggfs_key_id(const char *fname)
{
    int64_t id = reg_find(fname);
    if (id >= 0)
        return id;
    if (reg.n == reg.cap) {
        uint64_t nc = reg.cap ? reg.cap * 2 : 64;
        char **nn = realloc(reg.names, nc * sizeof *nn);
        if (!nn)
            return -1;
        reg.names = nn;
        reg.cap = nc;
    }
    if ((reg.n + 1) * 2 > reg.mask + 1 || !reg.slot)
        if (!reg_rehash(reg.slot ? (reg.mask + 1) * 2 : 128))
            return -1;
    char *copy = strdup(fname);
    if (!copy)
        return -1;
    reg.names[reg.n] = copy;
    uint64_t h = hash_str(copy) & reg.mask;
    while (reg.slot[h])
        h = (h + 1) & reg.mask;
    reg.slot[h] = reg.n + 1;
    return (int64_t)reg.n++;
}

/* ntab_build's callbacks see the file being indexed through this. */
static _Thread_local const struct gguf_file *building;

static bool kv_name(uint64_t i, struct gguf_buf *out)
{
    const struct gguf_kv *kv = &building->kv[i];
    return gguf_name_encode((const char *)building->hdr + kv->key_off,
                            kv->key_len, kv->dup, out);
}

static _Thread_local const struct state *building_st;

static bool tensor_name(uint64_t i, struct gguf_buf *out)
{
    const struct tref *r = &building_st->tens[i];
    return gguf_name_encode((const char *)building_st->shards[r->shard].gf->hdr +
                            r->t->name_off, r->t->name_len, 1, out);
}

/* ---- versions: counted states ---------------------------------------------
 *
 * Every live state is on one list, so that an inode of an older version
 * (info or model.gguf held open across an edit) can find its state.  A
 * state leaves the list when its last reference goes, under the same lock
 * that ggfs_state_by_gen takes its reference under.
 */
static pthread_mutex_t states_mu = PTHREAD_MUTEX_INITIALIZER;
static struct state *states;

static void states_add(struct state *st)
{
    pthread_mutex_lock(&states_mu);
    st->lnext = states;
    if (states)
        states->lprev = st;
    states = st;
    pthread_mutex_unlock(&states_mu);
}

struct state *ggfs_state_ref(struct state *st)
{
    pthread_mutex_lock(&states_mu);
    st->refs++;
    pthread_mutex_unlock(&states_mu);
    return st;
}

struct state *ggfs_state_by_gen(uint64_t gen)
{
    pthread_mutex_lock(&states_mu);
    struct state *st = states;
    while (st && st->gen != gen)
        st = st->lnext;
    if (st)
        st->refs++;
    pthread_mutex_unlock(&states_mu);
    return st;
}

void ggfs_state_put(struct state *st)
{
    if (!st)
        return;
    pthread_mutex_lock(&states_mu);
    bool last = --st->refs == 0;
    if (last) {
        if (st->lprev)
            st->lprev->lnext = st->lnext;
        else if (states == st)
            states = st->lnext;
        if (st->lnext)
            st->lnext->lprev = st->lprev;
    }
    pthread_mutex_unlock(&states_mu);
    if (last && !ggfs_notify_free_state(st))
        ggfs_state_free(st);
}

/* Keeps the padding after the header of a single-file model (see struct
 * state): an in-place edit rewrites it. */
#define PAD_KEEP_MAX (1u << 20)

static bool read_all(int fd, uint8_t *buf, size_t len, uint64_t pos)
{
    for (size_t got = 0; got < len;) {
        ssize_t r = pread(fd, buf + got, len - got, (off_t)(pos + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static int keep_padding(struct state *st)
{
    const struct gguf_file *gf = st->gf;
    st->hdr_end = gf->data_off < gf->file_size ? gf->data_off : gf->file_size;
    uint64_t n = st->hdr_end - gf->hdr_size;
    if (n == 0)
        return 0;
    size_t cap = n < PAD_KEEP_MAX ? (size_t)n : PAD_KEEP_MAX;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return ENOMEM;
    bool zero = true;
    for (uint64_t done = 0; done < n && zero; done += cap) {
        size_t len = n - done < cap ? (size_t)(n - done) : cap;
        if (!read_all(st->fd, buf, len, gf->hdr_size + done)) {
            free(buf);
            return EIO;
        }
        zero = all_zero(buf, len);
    }
    if (!zero && n <= cap)
        st->pad = buf;         /* the usual case of non-zero padding */
    else
        free(buf);
    st->pad_fd = !zero && n > cap;   /* megabytes of it: read from the file */
    return 0;
}

void ggfs_state_free(struct state *st)
{
    if (!st)
        return;
    free(st->pad);
    ntab_free(&st->meta_names);
    ntab_free(&st->tensor_names);
    if (st->kv_text) {
        for (uint64_t i = 0; i < st->gf->n_kv; i++) {
            struct text *t = atomic_load(&st->kv_text[i]);
            if (t) {
                free(t->data);
                free(t);
            }
        }
        free(st->kv_text);
    }
    free(st->info.data);
    free(st->kv_id);
    free(st->id_kv);
    free(st->tens);
    free(st->vt_off);
    free(st->model_hdr.data);
    ggfs_shards_free(st->shards, st->n_shards);
    free(st);
}

int ggfs_state_new(struct shard *shards, unsigned n, const char *path,
                   uint64_t gen, struct state **out)
{
    *out = NULL;
    struct gguf_file *gf = shards[0].gf;
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++)
        total += shards[i].gf->n_tensors;
    if (gf->n_kv > UINT32_MAX / 2 || total > (UINT64_MAX - TENSOR_BASE) / TENSOR_STRIDE)
        return EOVERFLOW;
    struct state *st = calloc(1, sizeof *st);
    if (!st)
        return ENOMEM;
    st->refs = 1;
    st->gen = gen;
    st->gf = gf;
    st->fd = shards[0].fd;
    st->n_tensors = total;
    st->tens = calloc(total ? total : 1, sizeof *st->tens);
    if (!st->tens) {
        free(st);
        return ENOMEM;
    }
    for (unsigned i = 0, j = 0; i < n; i++)
        for (uint64_t k = 0; k < shards[i].gf->n_tensors; k++, j++) {
            st->tens[j].t = &shards[i].gf->tensors[k];
            st->tens[j].shard = i;
        }
    st->shards = shards;
    st->n_shards = n;
    fstat(st->fd, &st->model_st);
    building = gf;
    building_st = st;
    int e = ntab_build(&st->meta_names, gf->n_kv, kv_name);
    if (!e)
        e = ntab_build(&st->tensor_names, total, tensor_name);
    building = NULL;
    building_st = NULL;
    /* within one file the parser refuses repeated tensor names; across
     * shards they are refused here */
    for (uint64_t j = 0; !e && n > 1 && j < total; j++)
        if (ntab_find(&st->tensor_names, st->tensor_names.names[j]) != (int64_t)j)
            e = EEXIST;
    if (!e && n > 1) {
        e = ggfs_build_merged(st);
    } else if (!e) {
        st->model_size = gf->file_size;
        e = keep_padding(st);
    }
    if (!e) {
        st->kv_text = calloc(gf->n_kv ? gf->n_kv : 1, sizeof *st->kv_text);
        st->kv_id = calloc(gf->n_kv ? gf->n_kv : 1, sizeof *st->kv_id);
        e = st->kv_text && st->kv_id ? 0 : ENOMEM;
    }
    for (uint64_t i = 0; !e && i < gf->n_kv; i++) {
        int64_t id = ggfs_key_id(st->meta_names.names[i]);
        if (id < 0)
            e = ENOMEM;
        else
            st->kv_id[i] = (uint64_t)id;
    }
    if (!e) {
        /* ids registered later (pending creations) are past n_ids */
        st->n_ids = reg.n;
        st->id_kv = malloc((st->n_ids ? st->n_ids : 1) * sizeof *st->id_kv);
        if (!st->id_kv)
            e = ENOMEM;
        for (uint64_t i = 0; !e && i < st->n_ids; i++)
            st->id_kv[i] = -1;
        /* a name hidden by a clash (see ntab_build) keeps its kv index only
         * if it is the first with that name */
        for (uint64_t i = gf->n_kv; !e && i-- > 0;)
            st->id_kv[st->kv_id[i]] = (int64_t)i;
    }
    if (!e) {
        /* A split model is described as the one file model.gguf shows,
         * after a line naming its shards. */
        struct gguf_buf b = { 0 };
        struct gguf_file *merged = NULL;
        const struct gguf_file *shown = gf;
        if (n > 1) {
            struct gguf_diag d;
            if (gguf_parse((const uint8_t *)st->model_hdr.data, st->model_hdr.len,
                           st->model_size, &merged, &d, NULL) == GGUF_OK)
                shown = merged;
            gguf_buf_printf(&b, "split model of %u shards:", n);
            for (unsigned i = 0; i < n; i++)
                gguf_buf_printf(&b, " %s", shards[i].path);
            gguf_buf_printf(&b, "\nmetadata from the first shard; shown as model.gguf "
                            "(split.* keys dropped)\n\n");
        }
        if (gguf_info_render(shown, path, &b) != GGUF_OK || b.oom) {
            gguf_buf_free(&b);
            e = ENOMEM;
        } else {
            st->info.data = b.data;
            st->info.len = b.len;
        }
        gguf_close(merged);
    }
    if (e) {
        st->shards = NULL;  /* still the caller's */
        st->n_shards = 0;
        ggfs_state_free(st);
        return e;
    }
    states_add(st);
    *out = st;
    return 0;
}

/* core/state.c — one version of the model: name tables, key ids, rendered
 * text; and the counted list of live versions. */
#include "core/state.h"
#include "core/log.h"
#include "core/model.h"
#include "core/tensor.h"

#include "remote/source.h"

#include "gguf/hf_tokenizer.h"
#include "gguf/info.h"
#include "gguf/names.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- name tables: file names (NUL-terminated, owned) in a gguf_ntab ---- */

static const void *name_of(const void *ctx, uint64_t i, size_t *len)
{
    char *const *names = *(char **const *)ctx;
    *len = strlen(names[i]);
    return names[i];
}

int64_t core_ntab_find(const struct ntab *t, const char *name)
{
    uint64_t v;
    return t->names && gguf_ntab_find(&t->t, name, strlen(name), &v) ? (int64_t)v : -1;
}

static void ntab_free(struct ntab *t)
{
    for (uint64_t i = 0; i < t->n; i++)
        free(t->names[i]);
    free(t->names);
    gguf_ntab_free(&t->t);
    memset(t, 0, sizeof *t);
}

/* The file name of entry i of a state's keys or tensors. */
typedef bool (*name_fn)(const struct state *st, uint64_t i, struct gguf_buf *out);

/* Adds n names produced by name_of(st, i); a clash (two entries with the
 * same file name: a key literally named "x#2" next to a duplicated "x")
 * keeps the first and hides the later one from lookups (readdir still
 * lists it). */
static int ntab_build(struct ntab *t, const struct state *st, uint64_t n, name_fn make)
{
    t->names = calloc(n ? n : 1, sizeof *t->names);
    if (!t->names || gguf_ntab_init(&t->t, n, name_of, &t->names) != GGUF_OK)
        return ENOMEM;
    struct gguf_buf b = { 0 };
    int e = 0;
    for (uint64_t i = 0; i < n && !e; i++) {
        b.len = 0;
        if (!make(st, i, &b) || !gguf_buf_putc(&b, '\0') || !(t->names[i] = strdup(b.data))) {
            e = ENOMEM;
            break;
        }
        t->n = i + 1;
        enum gguf_err ge = gguf_ntab_add(&t->t, i, NULL);
        if (ge && ge != GGUF_E_EXIST)
            e = ENOMEM;
    }
    gguf_buf_free(&b);
    return e;
}

static bool kv_name(const struct state *st, uint64_t i, struct gguf_buf *out)
{
    const struct gguf_file *gf = st_meta(st);
    const struct gguf_kv *kv = &gf->kv[i];
    return gguf_name_encode((const char *)gf->hdr + kv->key_off, kv->key_len, kv->dup, out);
}

static bool tensor_name(const struct state *st, uint64_t i, struct gguf_buf *out)
{
    const struct tref *r = &st->tens[i];
    return gguf_name_encode((const char *)st->model->shards[r->shard].gf->hdr + r->t->name_off,
                            r->t->name_len, 1, out);
}

/* ---- key ids: stable inode numbers for meta/ files ------------------------
 *
 * A key's inode is KV_BASE + the id of its file name, so that a file stays
 * the same file when other keys are added, removed or renamed (an open
 * meta/B must not turn into meta/C because A was deleted).  The registry
 * only grows; it is changed only while a state is built, and states are
 * built one at a time (at mount, then under the commit lock).
 */
int64_t core_key_id(struct mount *fs, const char *fname)
{
    struct ntab *r = &fs->ids;
    int64_t id = core_ntab_find(r, fname);
    if (id >= 0)
        return id;
    if (KV_BASE + r->n + 1 >= VERSION_BASE)
        return -1;
    if (!r->names && gguf_ntab_init(&r->t, 64, name_of, &r->names) != GGUF_OK)
        return -1;
    if (r->n == r->cap) {
        uint64_t nc = r->cap ? r->cap * 2 : 64;
        char **nn = realloc(r->names, nc * sizeof *nn);
        if (!nn) {
            /* the first call: the table just made goes too (the next
             * call makes it again, as !r->names says) */
            if (!r->names)
                gguf_ntab_free(&r->t);
            return -1;
        }
        r->names = nn;
        r->cap = nc;
    }
    if (!(r->names[r->n] = strdup(fname)))
        return -1;
    if (gguf_ntab_add(&r->t, r->n, NULL) != GGUF_OK) {
        free(r->names[r->n]);
        return -1;
    }
    return (int64_t)r->n++;
}

void core_key_ids_free(struct ntab *ids)
{
    ntab_free(ids);
}

/* ---- versions: counted states ---------------------------------------------
 *
 * Every live state is on one list, so that an inode of an older version
 * (info or model.gguf held open across an edit) can find its state.  A
 * state leaves the list when its last reference goes, under the lock
 * that core_state_by_gen searches the list under; references themselves
 * are an atomic count (see core_state_ref).
 */
static void states_add(struct state *st)
{
    struct mount *fs = st->fs;
    pthread_mutex_lock(&fs->states_mu);
    glist_add(&fs->states, &st->link);
    pthread_mutex_unlock(&fs->states_mu);
}

/* A reference is counted without a lock: the caller holds one already (or
 * the state lock, under which fs->st holds the mount's), so the count is
 * above 0 and the state cannot go meanwhile.  Only core_state_by_gen finds
 * a state it holds no reference to, on the list, and takes one only while
 * the count is above 0 (a state at 0 is on its way out). */
struct state *core_state_ref(struct state *st)
{
    atomic_fetch_add_explicit(&st->refs, 1, memory_order_relaxed);
    return st;
}

struct state *core_state_current(struct mount *fs)
{
    pthread_rwlock_rdlock(&fs->lock);
    struct state *st = core_state_ref(fs->st);
    pthread_rwlock_unlock(&fs->lock);
    return st;
}

struct state *core_state_by_gen(struct mount *fs, uint64_t gen)
{
    struct state *found = NULL;
    pthread_mutex_lock(&fs->states_mu);
    for (struct glist *l = fs->states.next; l != &fs->states && !found; l = l->next) {
        struct state *st = GLIST_ENTRY(l, struct state, link);
        unsigned r = atomic_load(&st->refs);
        while (st->gen == gen && r > 0 && !found)
            if (atomic_compare_exchange_weak(&st->refs, &r, r + 1))
                found = st;
    }
    pthread_mutex_unlock(&fs->states_mu);
    return found;
}

void core_state_put(struct state *st)
{
    if (!st)
        return;
    struct mount *fs = st->fs;
    /* release: what this holder did with the state happens before its
     * free; the last holder acquires it */
    if (atomic_fetch_sub_explicit(&st->refs, 1, memory_order_acq_rel) != 1)
        return;
    /* at 0 nobody can take a reference again (core_state_by_gen skips
     * it), so it leaves the list now */
    pthread_mutex_lock(&fs->states_mu);
    glist_del(&st->link);
    pthread_mutex_unlock(&fs->states_mu);
    /* closing a replaced model file may take a while: on another thread
     * when one is there to do it (fs->free_later) */
    bool (*later)(struct mount *, struct state *) = atomic_load(&fs->free_later);
    if (!later || !later(fs, st))
        core_state_free(st);
}

bool core_sig_take(int fd, struct fsig *out)
{
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0)
        return false;
    *out = (struct fsig){ sb.st_dev, sb.st_ino, sb.st_size, sb.st_nlink, sb.st_mtim, sb.st_ctim };
    return true;
}

/* ---- building a state ------------------------------------------------------ */

/* Keeps the padding after the header of a single-file model (see struct
 * state): an in-place edit rewrites it. */
#define PAD_KEEP_MAX (1u << 20)

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

static int keep_padding(struct state *st)
{
    const struct gguf_file *gf = st_meta(st);
    struct gguf_source *src = st->model->shards[0].src;
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
        /* the parser kept what it had read of the padding (no request to
         * a remote source for it) */
        int e = 0;
        if (done + len <= gf->pad_have)
            memcpy(buf, gf->hdr + gf->hdr_size + done, len);
        else
            e = gguf_source_read_all(src, buf, len, gf->hdr_size + done);
        if (e) {
            free(buf);
            return e;
        }
        zero = all_zero(buf, len);
    }
    if (!zero && n <= cap)
        st->pad = buf;         /* the usual case of non-zero padding */
    else
        free(buf);
    st->pad_src = !zero && n > cap;   /* megabytes of it: read from the file */
    return 0;
}

void core_state_free(struct state *st)
{
    if (!st)
        return;
    free(st->pad);
    free(st->sig);
    ntab_free(&st->meta_names);
    ntab_free(&st->tensor_names);
    if (st->kv_text) {
        for (uint64_t i = 0; i < st_meta(st)->n_kv; i++) {
            struct text *t = atomic_load(&st->kv_text[i]);
            if (t) {
                free(t->data);
                free(t);
            }
        }
        free(st->kv_text);
    }
    free(st->info.data);
    struct text *j = atomic_load(&st->info_json);
    if (j) {
        free(j->data);
        free(j);
    }
    struct gguf_st_layout *sl = atomic_load(&st->safetensors);
    if (sl) {
        gguf_st_free(sl);
        free(sl);
    }
    sl = atomic_load(&st->hf_st);
    if (sl) {
        gguf_st_free(sl);
        free(sl);
    }
    for (int i = 0; i < 2; i++) {
        struct text *t = atomic_load(&st->hf_tok[i]);
        if (t) {
            free(t->data);
            free(t);
        }
    }
    if (st->hf) {
        gguf_hf_free(st->hf);
        free(st->hf);
    }
    free(st->kv_id);
    free(st->id_kv);
    free(st->tens);
    gguf_merged_free(&st->merged);
    gguf_split_close(st->model);
    free(st);
}

/* Every tensor of every shard, in order; tensor names are unique. */
static int index_tensors(struct state *st)
{
    uint64_t total = 0;
    for (unsigned i = 0; i < st->model->n; i++)
        total += st->model->shards[i].gf->n_tensors;
    if (total > (UINT64_MAX - TENSOR_BASE) / TENSOR_STRIDE)
        return EOVERFLOW;
    st->n_tensors = total;
    st->tens = calloc(total ? total : 1, sizeof *st->tens);
    if (!st->tens)
        return ENOMEM;
    for (unsigned i = 0, j = 0; i < st->model->n; i++)
        for (uint64_t k = 0; k < st->model->shards[i].gf->n_tensors; k++, j++) {
            st->tens[j].t = &st->model->shards[i].gf->tensors[k];
            st->tens[j].shard = i;
        }
    /* tensor names are unique: the parser refuses repeats in one file,
     * gguf_split_open across shards */
    return ntab_build(&st->tensor_names, st, total, tensor_name);
}

/* Names, ids and the lazily rendered texts of the keys. */
static int index_keys(struct mount *fs, struct state *st)
{
    const struct gguf_file *gf = st_meta(st);
    if (gf->n_kv > UINT32_MAX / 2)
        return EOVERFLOW;
    int e = ntab_build(&st->meta_names, st, gf->n_kv, kv_name);
    if (e)
        return e;
    st->kv_text = calloc(gf->n_kv ? gf->n_kv : 1, sizeof *st->kv_text);
    st->kv_id = calloc(gf->n_kv ? gf->n_kv : 1, sizeof *st->kv_id);
    if (!st->kv_text || !st->kv_id)
        return ENOMEM;
    for (uint64_t i = 0; i < gf->n_kv; i++) {
        int64_t id = core_key_id(fs, st->meta_names.names[i]);
        if (id < 0)
            return ENOMEM;
        st->kv_id[i] = (uint64_t)id;
    }
    /* ids registered later (pending creations) are past n_ids */
    st->n_ids = fs->ids.n;
    st->id_kv = malloc((st->n_ids ? st->n_ids : 1) * sizeof *st->id_kv);
    if (!st->id_kv)
        return ENOMEM;
    for (uint64_t i = 0; i < st->n_ids; i++)
        st->id_kv[i] = -1;
    /* a name hidden by a clash (see ntab_build) keeps its kv index only if
     * it is the first with that name */
    for (uint64_t i = gf->n_kv; i-- > 0;)
        st->id_kv[st->kv_id[i]] = (int64_t)i;
    return 0;
}

static void st_tensor(void *ctx, uint64_t i, struct gguf_st_in *out);

/* hf/: the HF view of this version (gguf/hf.h), made with the state (a
 * name and a few numbers a tensor: cheap), so that the tree knows at
 * once whether hf/ exists; why not, in one line, for info.  0 or ENOMEM. */
static int build_hf(struct state *st)
{
    struct gguf_hf *hf = malloc(sizeof *hf);
    if (!hf)
        return ENOMEM;
    struct gguf_diag d;
    enum gguf_err e = gguf_hf_build(st_meta(st), st->n_tensors, st_tensor, st, hf, &d);
    if (e == GGUF_OK) {
        st->hf = hf;
        return 0;
    }
    gguf_hf_free(hf);
    free(hf);
    if (e == GGUF_E_NOMEM)
        return ENOMEM;
    snprintf(st->hf_why, sizeof st->hf_why, "%s", d.msg);
    return 0;
}

/* info: a split model is described as the one file model.gguf shows,
 * after a line naming its shards. */
static int render_info(struct state *st, const char *path)
{
    struct gguf_buf b = { 0 };
    struct gguf_file *merged = NULL;
    const struct gguf_file *shown = st_meta(st);
    if (st->model->n > 1) {
        struct gguf_diag d;
        if (gguf_parse((const uint8_t *)st->merged.hdr.data, st->merged.hdr.len,
                       st->model_size, &merged, &d, NULL) == GGUF_OK)
            shown = merged;
        gguf_buf_printf(&b, "split model of %u shards:", st->model->n);
        for (unsigned i = 0; i < st->model->n; i++)
            gguf_buf_printf(&b, " %s", st->model->shards[i].src->name);
        gguf_buf_printf(&b, "\nmetadata from the first shard; shown as model.gguf "
                        "(split.* keys dropped)\n");
        if (st_meta(st)->enc.v1)
            gguf_buf_printf(&b, "the shards are GGUF version 1; model.gguf is served "
                            "as version 3\n");
        gguf_buf_putc(&b, '\n');
    }
    for (unsigned i = 0; i < st->model->n; i++) {
        struct remote *r = core_remote(st->model->shards[i].src, st->fs->remote);
        if (r) {
            /* an object in a store: where, which region, whose credentials */
            const char *store = remote_store_lines(r);
            gguf_buf_printf(&b, "remote: %s\nidentity: %s\nsize: %llu bytes\n%s%s",
                            remote_display_url(r), remote_identity(r),
                            (unsigned long long)remote_size(r), store ? store : "",
                            i + 1 == st->model->n ? "\n" : "");
        }
    }
    if (st->fs->overlay)
        gguf_buf_printf(&b, "overlay: %s\n\n", st->fs->overlay);
    /* the views of the same facts (what the summary below does not say) */
    gguf_buf_printf(&b, "views: info.json (this summary as JSON); tensors/NAME/f32.npy and, for "
                    "f32, f16, f64 and i8 ... i64 tensors, raw.npy (f32 and raw as NumPy .npy "
                    "files)\n");
    if (st->hf)
        gguf_buf_printf(&b, "hf/: the model as a Hugging Face folder (%s): config.json, "
                        "generation_config.json, model.safetensors\n", st->hf->model_type);
    else
        gguf_buf_printf(&b, "%s (no hf/)\n", st->hf_why);
    gguf_buf_printf(&b, "computed on first use, then kept: tensors/NAME/stats (count, nan, inf, "
                    "zeros, min, max, absmax, mean, std of f32), tensors/NAME/xxh64 and sha256 "
                    "(of raw), hashes (llama-gguf-hash --xxh64 --sha256 of model.gguf%s)\n\n",
                    st->fs->remote ? ": reads the whole model once" : "");
    int e = 0;
    enum gguf_err ge = gguf_info_render(shown, path, &b);
    if (ge != GGUF_OK || b.oom) {
        gguf_buf_free(&b);
        e = ge != GGUF_OK ? gguf_err_errno_made(ge) : ENOMEM;
    } else {
        st->info.data = b.data;
        st->info.len = b.len;
    }
    gguf_close(merged);
    return e;
}

/* info.json: the file info describes (a split model merged, as
 * model.gguf shows it), as JSON; rendered on first use (a stat or a read),
 * like meta/'s values: its size follows the header's, so a version nobody
 * asks about costs nothing. */
int core_info_json(struct state *st, const struct text **out)
{
    struct text *t = atomic_load_explicit(&st->info_json, memory_order_acquire);
    *out = t;
    if (t)
        return 0;
    struct gguf_file *merged = NULL;
    const struct gguf_file *shown = st_meta(st);
    if (st->model->n > 1) {
        struct gguf_diag d;
        enum gguf_err pe = gguf_parse((const uint8_t *)st->merged.hdr.data, st->merged.hdr.len,
                                      st->model_size, &merged, &d, NULL);
        if (pe != GGUF_OK) {
            if (pe != GGUF_E_NOMEM)
                core_log(LOG_ERR, "gguffs: info.json: the merged header: %s\n", d.msg);
            return gguf_err_errno_made(pe);
        }
        shown = merged;
    }
    struct gguf_buf b = { 0 };
    enum gguf_err e = gguf_info_json(shown, &b);
    gguf_close(merged);
    if (e != GGUF_OK || b.oom || !(t = malloc(sizeof *t))) {
        gguf_buf_free(&b);
        return e != GGUF_OK ? gguf_err_errno_made(e) : ENOMEM;
    }
    t->data = b.data;
    t->len = b.len;
    struct text *expected = NULL;
    if (!atomic_compare_exchange_strong(&st->info_json, &expected, t)) {
        free(t->data);       /* another thread won the race: use its copy */
        free(t);
        t = expected;
    }
    *out = t;
    return 0;
}

/* Tensor i of st as model.safetensors' layout wants it. */
static void st_tensor(void *ctx, uint64_t i, struct gguf_st_in *out)
{
    const struct state *st = ctx;
    const struct tref *r = &st->tens[i];
    const struct gguf_file *gf = st->model->shards[r->shard].gf;
    out->name = (const char *)gf->hdr + r->t->name_off;
    out->name_len = r->t->name_len;
    out->t = r->t;
    out->big_endian = gf->enc.big_endian;
    out->has_f32 = core_tensor_has(st, i, TF_F32);
}

/* The end of laying out file (model.safetensors or hf/model.safetensors)
 * into l, which the builder returned e for: on success l, laid out by this
 * thread, becomes the state's *slot, unless another thread put its own
 * there first (then l is freed and theirs is *out); on failure l is freed,
 * d's reason logged (but for a lack of memory) and the code mapped at the
 * errno edge (gguf_err_errno_made: EFBIG for a file too large, ENOMEM,
 * else EIO). */
static int publish_layout(_Atomic(struct gguf_st_layout *) *slot, struct gguf_st_layout *l,
                          enum gguf_err e, const struct gguf_diag *d, const char *file,
                          const struct gguf_st_layout **out)
{
    if (e != GGUF_OK) {
        gguf_st_free(l);
        free(l);
        if (e != GGUF_E_NOMEM)
            core_log(LOG_ERR, "gguffs: %s: %s\n", file, d->msg);
        return gguf_err_errno_made(e);
    }
    struct gguf_st_layout *expected = NULL;
    if (atomic_compare_exchange_strong(slot, &expected, l)) {
        *out = l;
        return 0;
    }
    gguf_st_free(l);
    free(l);
    *out = expected;
    return 0;
}

/* model.safetensors: laid out on first use (a stat or a read), like
 * info.json; its header has the version's string keys. */
int core_safetensors(struct state *st, const struct gguf_st_layout **out)
{
    struct gguf_st_layout *l = atomic_load_explicit(&st->safetensors, memory_order_acquire);
    if (l) {
        *out = l;
        return 0;
    }
    if (!(l = malloc(sizeof *l)))
        return ENOMEM;
    struct gguf_diag d;
    enum gguf_err e = gguf_safetensors(st_meta(st), st->n_tensors, st_tensor, st, l, &d);
    return publish_layout(&st->safetensors, l, e, &d, "model.safetensors", out);
}

int core_hf_safetensors(struct state *st, const struct gguf_st_layout **out)
{
    if (!st->hf)
        return ENOENT;
    struct gguf_st_layout *l = atomic_load_explicit(&st->hf_st, memory_order_acquire);
    if (l) {
        *out = l;
        return 0;
    }
    if (!(l = malloc(sizeof *l)))
        return ENOMEM;
    struct gguf_diag d;
    enum gguf_err e = gguf_hf_safetensors(st_meta(st), st->hf, l, &d);
    return publish_layout(&st->hf_st, l, e, &d, "hf/model.safetensors", out);
}

/* The tokenizer's file of slot (VS_HF_TOKENIZER or _CONFIG), made on
 * first use from the model's first metadata (a split model's tokenizer is
 * in its first shard) and kept in the state, as info.json is; data NULL
 * when it cannot be expressed (why: logged once per version).  0 or
 * ENOMEM. */
static int hf_tok(struct state *st, enum version_slot slot, const struct text **out)
{
    _Atomic(struct text *) *p = &st->hf_tok[slot == VS_HF_TOKENIZER_CONFIG];
    struct text *t = atomic_load_explicit(p, memory_order_acquire);
    *out = t;
    if (t)
        return 0;
    struct gguf_buf b = { 0 };
    char why[256];
    int r = slot == VS_HF_TOKENIZER
                ? gguf_hf_tokenizer_json(st_meta(st), &b, why, sizeof why)
                : gguf_hf_tokenizer_config_json(st_meta(st), &b, why, sizeof why);
    if (r < 0 || b.oom || !(t = malloc(sizeof *t))) {
        gguf_buf_free(&b);
        return ENOMEM;
    }
    if (r > 0) {
        gguf_buf_free(&b);
        t->data = NULL;
        t->len = 0;
    } else {
        t->data = b.data;
        t->len = b.len;
    }
    struct text *expected = NULL;
    if (!atomic_compare_exchange_strong(p, &expected, t)) {
        free(t->data);       /* another thread won the race: use its copy */
        free(t);
        t = expected;
    } else if (r > 0 && slot == VS_HF_TOKENIZER) {
        core_log(LOG_INFO, "gguffs: hf/: no tokenizer.json: %s\n", why);
    }
    *out = t;
    return 0;
}

const struct hf_file core_hf_files[] = {
    { "config.json", VS_HF_CONFIG },
    { "generation_config.json", VS_HF_GENERATION },
    { "model.safetensors", VS_HF_SAFETENSORS },
    /* made on first use by state.c's core_hf_text; absent when
     * gguf_hf_tokenizer_* says the tokenizer cannot be expressed */
    { "tokenizer.json", VS_HF_TOKENIZER },
    { "tokenizer_config.json", VS_HF_TOKENIZER_CONFIG },
};
const unsigned core_hf_files_n = sizeof core_hf_files / sizeof *core_hf_files;

bool core_hf_has(const struct state *st, enum version_slot slot)
{
    if (!st->hf || slot < VS_HF_CONFIG || slot >= VERSION_STRIDE)
        return false;
    if (slot != VS_HF_TOKENIZER && slot != VS_HF_TOKENIZER_CONFIG)
        return true;
    /* the tokenizer's files: present when their text could be made (the
     * state's cache of them is not its meaning: made once, kept) */
    const struct text *t;
    return hf_tok((struct state *)st, slot, &t) == 0 && t->data;
}

/* hf/'s texts: config.json, generation_config.json (made with the
 * state), the tokenizer's files (made on first use) */
int core_hf_text(struct state *st, enum version_slot slot, const char **data,
                 size_t *len)
{
    if (!st->hf)
        return ENOENT;
    if (slot == VS_HF_TOKENIZER || slot == VS_HF_TOKENIZER_CONFIG) {
        const struct text *t;
        int e = hf_tok(st, slot, &t);
        if (e)
            return e;
        if (!t->data)
            return ENOENT;
        *data = t->data;
        *len = t->len;
        return 0;
    }
    const struct gguf_buf *b = slot == VS_HF_CONFIG ? &st->hf->config
                             : slot == VS_HF_GENERATION ? &st->hf->generation : NULL;
    if (!b)
        return ENOENT;
    *data = b->data;
    *len = b->len;
    return 0;
}

int core_hf_size(struct state *st, enum version_slot slot, uint64_t *size)
{
    if (slot == VS_HF_SAFETENSORS) {
        const struct gguf_st_layout *l = NULL;
        int e = core_hf_safetensors(st, &l);
        if (!e)
            *size = l->size;
        return e;
    }
    const char *d;
    size_t len;
    int e = core_hf_text(st, slot, &d, &len);
    if (!e)
        *size = len;
    return e;
}

int core_state_new(struct mount *fs, struct gguf_split *model, uint64_t gen,
                   struct state **out)
{
    *out = NULL;
    struct state *st = calloc(1, sizeof *st);
    if (!st)
        return ENOMEM;
    st->fs = fs;
    atomic_init(&st->refs, 1);
    st->gen = gen;
    st->model = model;
    if (model->shards[0].src->fd >= 0) {
        fstat(model->shards[0].src->fd, &st->model_st);
    } else {
        /* a remote model: the mounting user's, dated from the mount,
         * modes as of a file made with umask 022 (nodes.c derives the
         * tree's from them) */
        st->model_st.st_mode = S_IFREG | 0644;
        st->model_st.st_uid = getuid();
        st->model_st.st_gid = getgid();
        clock_gettime(CLOCK_REALTIME, &st->model_st.st_mtim);
        st->model_st.st_atim = st->model_st.st_ctim = st->model_st.st_mtim;
    }
    /* what each local shard is now (underneath.c) */
    st->sig = calloc(model->n, sizeof *st->sig);
    int e = st->sig ? 0 : ENOMEM;
    for (unsigned i = 0; !e && i < model->n; i++)
        core_sig_take(model->shards[i].src->fd, &st->sig[i]);
    if (!e)
        e = index_tensors(st);
    /* a split model is served merged; so is a version 1 file, whose
     * model.gguf is version 3 (gguf/split.h) */
    if (!e && (model->n > 1 || model->shards[0].gf->enc.v1)) {
        struct gguf_diag d;
        e = gguf_err_errno(gguf_split_merge(model, &st->merged, &d));
        st->model_size = st->merged.size;
    } else if (!e) {
        st->model_size = st_meta(st)->file_size;
        e = keep_padding(st);
    }
    if (!e)
        e = index_keys(fs, st);
    if (!e)
        e = build_hf(st);
    if (!e)
        e = render_info(st, fs->model_path);
    if (e) {
        free(st->kv_text);     /* nothing rendered yet */
        st->kv_text = NULL;
        st->model = NULL;      /* still the caller's */
        gguf_merged_free(&st->merged);
        core_state_free(st);
        return e;
    }
    states_add(st);
    *out = st;
    return 0;
}

/* ---- a new version made current ------------------------------------------ */

void core_state_swap(struct mount *fs, struct state *ns)
{
    struct state *old = fs->st;
    pthread_rwlock_wrlock(&fs->lock);
    fs->st = ns;
    pthread_rwlock_unlock(&fs->lock);
    void (*told)(struct mount *, const struct state *, const struct state *) =
        atomic_load(&fs->swapped);
    if (told)
        told(fs, old, ns);
    /* The old version lives on while info or model.gguf of it is open.
     * Freeing it closes its descriptor; after a rewrite that is the last
     * reference to the old file, and the file system then frees its blocks
     * (a second for 4 GB on ext4 or btrfs): core_state_put does that on
     * another thread when fs->free_later is set, which nobody waits for,
     * so the writer's close() does not wait for it. */
    core_state_put(old);
}

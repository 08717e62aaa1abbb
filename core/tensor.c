/* core/tensor.c — what files a tensor has, and its views' layout (tensor.h). */
#include "core/tensor.h"

#include "gguf/types.h"
#include "kernels/dequant.h"

bool core_tensor_has(const struct state *st, uint64_t idx, enum tensor_file tf)
{
    if (tf == TF_RAW_NPY)
        return core_npy_descr(st, idx) != NULL;
    if (tf != TF_F32 && tf != TF_F32_NPY && tf != TF_STATS)
        return true;
    const struct tref *r = &st->tens[idx];
    if (!kern_dequant_supported(r->t->type))
        return false;
    /* a big-endian file: the types whose big-endian layout is defined */
    return !st->model->shards[r->shard].gf->enc.big_endian ||
           kern_dequant_be_supported(r->t->type);
}

/* float32 stored little-endian is its own f32 view: served like raw */
bool core_f32_is_raw(const struct state *st, uint64_t idx)
{
    const struct tref *r = &st->tens[idx];
    return r->t->type == GGML_T_F32 && !st->model->shards[r->shard].gf->enc.big_endian;
}

const char *core_npy_descr(const struct state *st, uint64_t idx)
{
    const struct tref *r = &st->tens[idx];
    bool be = st->model->shards[r->shard].gf->enc.big_endian;
    switch (r->t->type) {
    case GGML_T_F32: return be ? ">f4" : "<f4";
    case GGML_T_F16: return be ? ">f2" : "<f2";
    case GGML_T_F64: return be ? ">f8" : "<f8";
    case GGML_T_I8: return "|i1";
    case GGML_T_I16: return be ? ">i2" : "<i2";
    case GGML_T_I32: return be ? ">i4" : "<i4";
    case GGML_T_I64: return be ? ">i8" : "<i8";
    default: return NULL;
    }
}

size_t core_npy_header(const struct state *st, uint64_t idx, enum tensor_file tf, char *buf)
{
    const struct gguf_tensor *t = st->tens[idx].t;
    const char *descr = tf == TF_F32_NPY ? "<f4" : core_npy_descr(st, idx);
    if (!descr || !core_tensor_has(st, idx, tf))
        return 0;
    return gguf_npy_header(descr, t->n_dims, t->ne, buf);
}

/*
 * gguf/hf_tokenizer_json.c — tokenizer.json and tokenizer_config.json
 * written from the analysis (for hf_tokenizer.c; see hf_tokenizer_impl.h):
 * the added tokens, the normalizer, pre-tokenizer, post-processor and
 * decoder transformers builds for the file's tokenizer, the model
 * (vocabulary and merges, or a unigram's scores), and the config.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hf_tokenizer_impl.h"
#include "value.h"

static const char *const sp_name[SP_N] = { "bos_token", "eos_token", "unk_token", "pad_token" };

/* A JSON string: '"', '\' and control characters escaped, valid UTF-8 as
 * it is, any byte that does not start a valid sequence as U+FFFD. */
static void jstr(struct gguf_buf *o, const char *p, size_t n)
{
    gguf_buf_putc(o, '"');
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && (unsigned char)p[j] >= 0x20 && (unsigned char)p[j] < 0x80 && p[j] != '"' &&
               p[j] != '\\')
            j++;
        gguf_buf_put(o, p + i, j - i);
        i = j;
        if (i >= n)
            break;
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x80) {
            size_t v = gguf_utf8_valid(p + i, n - i < 4 ? n - i : 4, NULL);
            unsigned l = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
            if (v >= l) {
                gguf_buf_put(o, p + i, l);
                i += l;
            } else {
                gguf_buf_put(o, "\\ufffd", 6);
                i++;
            }
            continue;
        }
        i++;
        switch (c) {
        case '"': gguf_buf_put(o, "\\\"", 2); break;
        case '\\': gguf_buf_put(o, "\\\\", 2); break;
        case '\n': gguf_buf_put(o, "\\n", 2); break;
        case '\r': gguf_buf_put(o, "\\r", 2); break;
        case '\t': gguf_buf_put(o, "\\t", 2); break;
        default: gguf_buf_printf(o, "\\u%04x", c); break;
        }
    }
    gguf_buf_putc(o, '"');
}

static void jsv(struct gguf_buf *o, struct sv s)
{
    jstr(o, s.p, s.n);
}

static void jc(struct gguf_buf *o, const char *s)
{
    gguf_buf_put(o, s, strlen(s));
}

static int by_id(const void *a, const void *b)
{
    const struct added *x = *(const struct added *const *)a, *y = *(const struct added *const *)b;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* A TemplateProcessing piece. */
static void tp_special(struct gguf_buf *o, struct sv s, int type_id)
{
    jc(o, "{\"SpecialToken\":{\"id\":");
    jsv(o, s);
    gguf_buf_printf(o, ",\"type_id\":%d}}", type_id);
}

/* One sequence of a template: its bos and eos as the model adds them,
 * around sequence id (A or B) of type type_id. */
static void tp_sequence(struct gguf_buf *o, const struct hft *h, char id, int type_id)
{
    if (h->add_bos) {
        tp_special(o, h->sp[SP_BOS], type_id);
        jc(o, ",");
    }
    gguf_buf_printf(o, "{\"Sequence\":{\"id\":\"%c\",\"type_id\":%d}}", id, type_id);
    if (h->add_eos) {
        jc(o, ",");
        tp_special(o, h->sp[SP_EOS], type_id);
    }
}

static void post_processor(struct gguf_buf *o, const struct hft *h)
{
    jc(o, "{\"type\":\"TemplateProcessing\",\"single\":[");
    tp_sequence(o, h, 'A', 0);
    jc(o, "],\"pair\":[");
    tp_sequence(o, h, 'A', 0);
    jc(o, ",");
    tp_sequence(o, h, 'B', 1);
    jc(o, "],\"special_tokens\":{");
    bool first = true;
    for (int k = SP_BOS; k <= SP_EOS; k++) {
        if (!(k == SP_BOS ? h->add_bos : h->add_eos))
            continue;
        if (k == SP_EOS && h->add_bos && h->sp[SP_EOS].n == h->sp[SP_BOS].n &&
            !memcmp(h->sp[SP_EOS].p, h->sp[SP_BOS].p, h->sp[SP_BOS].n))
            continue;           /* one entry per token */
        if (!first)
            jc(o, ",");
        first = false;
        jsv(o, h->sp[k]);
        jc(o, ":{\"id\":");
        jsv(o, h->sp[k]);
        gguf_buf_printf(o, ",\"ids\":[%" PRId64 "],\"tokens\":[", hft_id_of(h, h->sp[k]));
        jsv(o, h->sp[k]);
        jc(o, "]}");
    }
    jc(o, "}}");
}

int hft_emit_tokenizer(struct gguf_buf *o, const struct hft *h)
{
    jc(o, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[");
    const struct added **ord = malloc((h->n_add ? h->n_add : 1) * sizeof *ord);
    if (!ord)
        return -1;
    for (size_t i = 0; i < h->n_add; i++)
        ord[i] = &h->add[i];
    qsort(ord, h->n_add, sizeof *ord, by_id);
    for (size_t i = 0; i < h->n_add; i++) {
        gguf_buf_printf(o, "%s\n{\"id\":%" PRIu32 ",\"content\":", i ? "," : "", ord[i]->id);
        jsv(o, ord[i]->s);
        gguf_buf_printf(o, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                           "\"normalized\":false,\"special\":%s}",
                        ord[i]->special ? "true" : "false");
    }
    free(ord);
    jc(o, "],\n\"normalizer\":");
    if (h->gemma)
        jc(o, "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}");
    else if (h->phi3)
        jc(o, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\u2581\"},"
              "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}]}");
    else
        jc(o, "null");
    jc(o, ",\n\"pre_tokenizer\":");
    if (h->t5) {
        jc(o, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":"
              "\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"always\",\"split\":true}]}");
    } else if (h->gemma) {
        jc(o, "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\","
              "\"invert\":false}");
    } else if (!h->bpe) {
        jc(o, h->phi3 ? "null"
                      : "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"first\","
                        "\"split\":false}");
    } else if (h->split) {
        jc(o, "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":");
        jstr(o, h->split, strlen(h->split));
        jc(o, "},\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
              "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}");
    } else {
        jc(o, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}");
    }
    jc(o, ",\n\"post_processor\":");
    post_processor(o, h);
    jc(o, ",\n\"decoder\":");
    if (h->t5)
        jc(o, "{\"type\":\"Metaspace\",\"replacement\":\"\u2581\",\"prepend_scheme\":\"always\",\"split\":true}");
    else if (h->bpe)
        jc(o, "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true}");
    else
        jc(o, h->gemma ? "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
                         "\"\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}]}"
                       : "{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
                         "\"\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
                         "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}");
    if (h->t5) {
        jc(o, ",\n\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"byte_fallback\":false,\"vocab\":[");
        unsigned esz = gguf_vtype_size(h->scores_t);
        for (uint32_t i = 0; i < h->n_model; i++) {
            jc(o, i ? ",\n[" : "\n[");
            jsv(o, h->voc[i]);
            gguf_buf_printf(o, ",%.17g]", hft_num_at(&h->gf->enc, h->scores_t, h->scores + (size_t)i * esz));
            if (o->oom)
                return -1;
        }
        jc(o, "]}}\n");
        return o->oom ? -1 : 0;
    }
    jc(o, h->gemma ? ",\n\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\","
                   : ",\n\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,");
    if (h->bpe)
        jc(o, "\"continuing_subword_prefix\":\"\",\"end_of_word_suffix\":\"\",\"fuse_unk\":false,"
              "\"byte_fallback\":false,");
    else
        jc(o, "\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,"
              "\"byte_fallback\":true,");
    jc(o, "\"ignore_merges\":false,\"vocab\":{");
    bool first = true;
    for (uint32_t i = 0; i < h->n; i++) {
        if (hft_tab_get(&h->vt, h->voc[i].p, h->voc[i].n) != i)
            continue;               /* a later token spells it the same */
        if (!first)
            gguf_buf_putc(o, ',');
        first = false;
        gguf_buf_putc(o, '\n');
        jsv(o, h->voc[i]);
        gguf_buf_printf(o, ":%" PRIu32, i);
        if (o->oom)
            return -1;
    }
    jc(o, "},\"merges\":[");
    for (size_t i = 0; i < h->n_merges; i++) {
        jc(o, i ? ",\n[" : "\n[");
        jsv(o, h->merges[i].l);
        gguf_buf_putc(o, ',');
        jsv(o, h->merges[i].r);
        gguf_buf_putc(o, ']');
        if (o->oom)
            return -1;
    }
    jc(o, "]}}\n");
    return o->oom ? -1 : 0;
}

static void cfg_token(struct gguf_buf *o, const struct hft *h, int k)
{
    gguf_buf_printf(o, "  \"%s\": ", sp_name[k]);
    if (h->has_sp[k])
        jsv(o, h->sp[k]);
    else
        jc(o, "null");
    jc(o, ",\n");
}

int hft_emit_config(struct gguf_buf *o, const struct hft *h)
{
    gguf_buf_printf(o, "{\n  \"add_bos_token\": %s,\n  \"add_eos_token\": %s,\n"
                       "  \"backend\": \"tokenizers\",\n",
                    h->add_bos ? "true" : "false", h->add_eos ? "true" : "false");
    cfg_token(o, h, SP_BOS);
    if (h->has_tmpl) {
        jc(o, "  \"chat_template\": ");
        jsv(o, h->tmpl);
        jc(o, ",\n");
    }
    jc(o, "  \"clean_up_tokenization_spaces\": false,\n");
    cfg_token(o, h, SP_EOS);
    if (h->t5) {
        /* T5Tokenizer names its sentinels as extra special tokens */
        jc(o, "  \"extra_special_tokens\": [");
        for (int k = 0; k < 100; k++)
            gguf_buf_printf(o, "%s\"%s\"", k ? ", " : "", h->extra[k]);
        jc(o, "],\n");
    }
    if (h->gemma_outer)
        jc(o, "  \"mask_token\": \"<mask>\",\n");
    cfg_token(o, h, SP_PAD);
    jc(o, "  \"tokenizer_class\": \"TokenizersBackend\",\n");
    gguf_buf_printf(o, "  \"unk_token\": ");
    if (h->has_sp[SP_UNK])
        jsv(o, h->sp[SP_UNK]);
    else
        jc(o, "null");
    jc(o, "\n}\n");
    return o->oom ? -1 : 0;
}

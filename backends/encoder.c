/* encoder.c - see encoder.h. */
#include "backends/encoder.h"

#include <stdio.h>
#include <stdlib.h>

#include "backends/wordpiece.h"
#include "kernels/pool.h"

int encoder_tokenizer_load(struct model *m, struct error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", m->cfg.dir);
    struct wordpiece *w;
    int rc = wordpiece_load(path, &w, err);
    if (rc)
        return rc;
    if (wordpiece_vocab_size(w) > m->cfg.encoder.vocab) {
        int n = wordpiece_vocab_size(w);
        wordpiece_free(w);
        return error_set(err, BG_ECONFIG, "%s: ids up to %d, but config.json's vocab_size is %d "
                         "(the tokenizer is not this model's)", path, n - 1, m->cfg.encoder.vocab);
    }
    /* sentence_bert_config.json's do_lower_case: lowercased before the
     * tokenizer's own normalizer, whose accent stripping stays as its
     * tokenizer.json says. */
    if (m->cfg.encoder.do_lower_case)
        wordpiece_set_lowercase(w);
    m->tokenizer = w;
    return 0;
}

void encoder_tokenizer_free(struct model *m)
{
    wordpiece_free(m->tokenizer);
    m->tokenizer = NULL;
}

static void encoder_row_put(float *row, const int32_t *ids, int n)
{
    row[0] = (float)n;
    for (int i = 0; i < n; i++)
        row[1 + i] = (float)ids[i];
}

int encoder_row_from_text(const struct model *m, const char *text, size_t len, bool truncate,
                          float *row, int *tokens, struct error *err)
{
    int max = m->cfg.encoder.max_seq_length;
    if (!m->tokenizer)
        return error_set(err, BG_ENOTREADY, "model %s: not loaded", m->cfg.name);
    int32_t stack[512];
    int32_t *ids = max <= 512 ? stack : malloc((size_t)max * sizeof *ids);
    if (!ids)
        return error_set(err, BG_ENOMEM, "out of memory tokenizing");
    int n = 0;
    bool cut = false;
    int rc = wordpiece_encode(m->tokenizer, text, len, max, ids, max, &n, &cut, err);
    if (rc == 0 && cut && !truncate) {
        /* The length named in the answer: counted again without the cut,
         * nothing stored. */
        int64_t total = 0;
        if (wordpiece_count(m->tokenizer, text, len, &total, NULL) == 0)
            rc = error_set(err, BG_ETOOLONG, "input of %lld tokens is longer than the model's "
                           "maximum of %d (send \"truncate\": true to cut it)", (long long)total,
                           max);
        else
            rc = error_set(err, BG_ETOOLONG, "input is longer than the model's maximum of %d "
                           "tokens (send \"truncate\": true to cut it)", max);
    }
    if (rc == 0) {
        encoder_row_put(row, ids, n);
        if (tokens)
            *tokens = n;
    }
    if (ids != stack)
        free(ids);
    return rc;
}

int encoder_row_from_ids(const struct model *m, const int64_t *ids, size_t n, bool truncate,
                         float *row, int *tokens, struct error *err)
{
    const struct hf_bert_config *e = &m->cfg.encoder;
    if (n == 0)
        return error_set(err, BG_EINVAL, "an empty list of token ids (a sequence holds at least "
                         "one)");
    if (n > (size_t)e->max_seq_length && !truncate)
        return error_set(err, BG_ETOOLONG, "input of %zu tokens is longer than the model's "
                         "maximum of %d (send \"truncate\": true to cut it)", n,
                         e->max_seq_length);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            return error_set(err, BG_EINVAL, "token id %lld (at %zu) is outside the model's "
                             "vocabulary (0 to %d)", (long long)ids[i], i, e->vocab - 1);
    int keep = n > (size_t)e->max_seq_length ? e->max_seq_length : (int)n;
    row[0] = (float)keep;
    for (int i = 0; i < keep; i++)
        row[1 + i] = (float)ids[i];
    /* A cut sequence still ends as it did (with [SEP], when it did). */
    if ((size_t)keep < n)
        row[keep] = (float)ids[n - 1];
    if (tokens)
        *tokens = keep;
    return 0;
}

void encoder_rows_cost(const float *rows, size_t ld_row, int n, int64_t *tokens,
                       int64_t *tokens_sq, int *max_len)
{
    *tokens = *tokens_sq = 0;
    *max_len = 0;
    for (int r = 0; r < n; r++) {
        int len = encoder_row_tokens(rows + (size_t)r * ld_row);
        *tokens += len;
        *tokens_sq += (int64_t)len * len;
        if (len > *max_len)
            *max_len = len;
    }
}

void encoder_output_normalize(float *out, int rows, int hidden)
{
    pool_l2_normalize(out, rows, hidden);
}

void encoder_row_warm(const struct model *m, float *row, int len)
{
    const struct hf_bert_config *e = &m->cfg.encoder;
    if (len > e->max_seq_length)
        len = e->max_seq_length;
    if (len < 2)
        len = 2;
    int32_t cls = m->tokenizer ? wordpiece_special_id(m->tokenizer, WORDPIECE_CLS) : 0;
    int32_t sep = m->tokenizer ? wordpiece_special_id(m->tokenizer, WORDPIECE_SEP) : 0;
    row[0] = (float)len;
    row[1] = (float)cls;
    /* Ids spread over the vocabulary: the warmup touches what requests will. */
    for (int i = 1; i < len - 1; i++)
        row[1 + i] = (float)((1000 + (int64_t)i * 7919) % e->vocab);
    row[len] = (float)sep;
}

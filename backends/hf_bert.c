/* hf_bert.c - see hf_bert.h. */
#include "backends/hf_bert.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#define HF_BERT_MAX_DIM 65536

/* A positive integer field (def > 0: its value when absent). */
static int hf_int(const char *file, json_t *o, const char *key, int def, int *out,
                  struct error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v && def > 0) {
        *out = def;
        return 0;
    }
    if (!v || !json_is_integer(v))
        return error_set(err, BG_ECONFIG, "%s: %s: expected a positive integer%s", file, key,
                         v ? "" : " (missing)");
    /* Said as the range it is: "a positive integer" of 2,000,000. */
    if (json_integer_value(v) < 1 || json_integer_value(v) > HF_BERT_MAX_DIM * 16)
        return error_set(err, BG_ECONFIG, "%s: %s: %lld, expected an integer from 1 to %d", file,
                         key, (long long)json_integer_value(v), HF_BERT_MAX_DIM * 16);
    *out = (int)json_integer_value(v);
    return 0;
}

/* A string field that must be absent or one of the values allowed. */
static int hf_str(const char *file, json_t *o, const char *key, const char *const *allowed,
                  const char *what, struct error *err)
{
    json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    for (const char *const *a = allowed; *a; a++)
        if (json_is_string(v) && strcmp(json_string_value(v), *a) == 0)
            return 0;
    return error_set(err, BG_ECONFIG, "%s: %s: \"%s\": %s", file, key,
                     json_is_string(v) ? json_string_value(v) : "(not a string)", what);
}

static bool hf_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Loads a JSON object; a missing optional file is *root NULL and 0. */
static int hf_json(const char *path, bool required, json_t **root, struct error *err)
{
    *root = NULL;
    if (!required && !hf_exists(path))
        return 0;
    json_error_t je;
    *root = json_load_file(path, 0, &je);
    if (!*root) {
        if (!hf_exists(path))
            return error_set(err, BG_EIO, "%s: %s", path, strerror(ENOENT));
        return error_set(err, BG_ECONFIG, "%s: line %d: %s", path, je.line, je.text);
    }
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return error_set(err, BG_ECONFIG, "%s: expected a JSON object", path);
    }
    return 0;
}

static int hf_graph(const char *file, json_t *c, struct hf_bert_config *o, struct error *err)
{
    static const char *const bert[] = {"bert", NULL};
    static const char *const gelu[] = {"gelu", NULL};
    static const char *const absolute[] = {"absolute", NULL};
    int rc;
    if (!json_object_get(c, "model_type"))
        return error_set(err, BG_ECONFIG, "%s: model_type: missing; a BERT-family folder says "
                         "\"bert\"", file);
    if ((rc = hf_str(file, c, "model_type", bert, "only BERT-family encoders (\"bert\") are "
                     "implemented", err)) ||
        (rc = hf_str(file, c, "hidden_act", gelu, "only \"gelu\" (the erf form) is implemented",
                     err)) ||
        (rc = hf_str(file, c, "position_embedding_type", absolute,
                     "only \"absolute\" position embeddings are implemented", err)))
        return rc;
    if (json_is_true(json_object_get(c, "is_decoder")) ||
        json_is_true(json_object_get(c, "add_cross_attention")))
        return error_set(err, BG_ECONFIG, "%s: is_decoder / add_cross_attention: true: only "
                         "encoders are implemented", file);
    if ((rc = hf_int(file, c, "hidden_size", 0, &o->hidden, err)) ||
        (rc = hf_int(file, c, "num_hidden_layers", 0, &o->layers, err)) ||
        (rc = hf_int(file, c, "num_attention_heads", 0, &o->heads, err)) ||
        (rc = hf_int(file, c, "intermediate_size", 0, &o->intermediate, err)) ||
        (rc = hf_int(file, c, "max_position_embeddings", 512, &o->max_positions, err)) ||
        (rc = hf_int(file, c, "vocab_size", 0, &o->vocab, err)) ||
        (rc = hf_int(file, c, "type_vocab_size", 2, &o->type_vocab, err)))
        return rc;
    if (o->hidden > HF_BERT_MAX_DIM || o->intermediate > HF_BERT_MAX_DIM)
        return error_set(err, BG_ECONFIG, "%s: hidden_size %d / intermediate_size %d: at most %d",
                         file, o->hidden, o->intermediate, HF_BERT_MAX_DIM);
    if (o->hidden % o->heads != 0)
        return error_set(err, BG_ECONFIG, "%s: num_attention_heads: %d does not divide "
                         "hidden_size %d", file, o->heads, o->hidden);
    o->head_dim = o->hidden / o->heads;
    json_t *eps = json_object_get(c, "layer_norm_eps");
    o->layer_norm_eps = eps ? json_number_value(eps) : 1e-12;
    if (eps && (!json_is_number(eps) || o->layer_norm_eps <= 0 || o->layer_norm_eps > 1))
        return error_set(err, BG_ECONFIG, "%s: layer_norm_eps: expected a number in (0, 1]", file);
    return 0;
}

/* 1_Pooling/config.json (or where modules.json says): one plain mode. */
static int hf_pooling(const char *path, const struct hf_bert_config *g, enum pool_mode *mode,
                      struct error *err)
{
    json_t *p;
    int rc = hf_json(path, true, &p, err);
    if (rc)
        return rc;
    static const struct {
        const char *key;
        int mode;                     /* -1: not implemented */
    } modes[] = {
        {"pooling_mode_mean_tokens", POOL_MEAN},
        {"pooling_mode_cls_token", POOL_CLS},
        {"pooling_mode_max_tokens", POOL_MAX},
        {"pooling_mode_mean_sqrt_len_tokens", -1},
        {"pooling_mode_weightedmean_tokens", -1},
        {"pooling_mode_lasttoken", -1},
    };
    int chosen = 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0] && rc == 0; i++) {
        if (!json_is_true(json_object_get(p, modes[i].key)))
            continue;
        if (modes[i].mode < 0)
            rc = error_set(err, BG_ECONFIG, "%s: %s: true: not implemented (mean, cls and max "
                           "pooling are)", path, modes[i].key);
        else if (chosen++)
            rc = error_set(err, BG_ECONFIG, "%s: %s: true beside another pooling mode: one mode "
                           "at a time is implemented", path, modes[i].key);
        else
            *mode = (enum pool_mode)modes[i].mode;
    }
    json_t *dim = json_object_get(p, "word_embedding_dimension");
    if (rc == 0 && !chosen)
        rc = error_set(err, BG_ECONFIG, "%s: no pooling_mode_* is true", path);
    if (rc == 0 && dim && json_integer_value(dim) != g->hidden)
        rc = error_set(err, BG_ECONFIG, "%s: word_embedding_dimension: %lld, but hidden_size is "
                       "%d", path, (long long)json_integer_value(dim), g->hidden);
    json_decref(p);
    return rc;
}

/* modules.json: Transformer, then Pooling, then an optional Normalize. */
static int hf_modules(const char *dir, struct hf_bert_config *o, struct error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/modules.json", dir);
    json_error_t je;
    if (!hf_exists(path))
        return 0;
    json_t *m = json_load_file(path, 0, &je);
    if (!m || !json_is_array(m)) {
        json_decref(m);
        return error_set(err, BG_ECONFIG, "%s: expected a JSON array of modules", path);
    }
    /* The one pipeline served: Transformer, then Pooling, then Normalize
     * (optional), each once, in that order, as sentence-transformers runs
     * them. Read in any order, a Normalize before the Pooling (the tokens
     * normalized, then pooled: another vector) or a second Pooling was
     * served as the usual pipeline. */
    static const char *const stage[] = {"Transformer", "Pooling", "Normalize"};
    int rc = 0, next = 0;   /* the stage expected next */
    size_t i;
    json_t *mod;
    json_array_foreach(m, i, mod) {
        const char *type = json_string_value(json_object_get(mod, "type"));
        const char *sub = json_string_value(json_object_get(mod, "path"));
        /* The class by its full name, as sentence-transformers imports
         * it: another package's class of the same last name (a
         * "mypkg.Normalize") is some other computation. */
        static const char pkg[] = "sentence_transformers.models.";
        const char *name = type && strncmp(type, pkg, sizeof pkg - 1) == 0
                           ? type + sizeof pkg - 1 : "";
        int k = 0;
        while (k < 3 && strcmp(name, stage[k]) != 0)
            k++;
        if (k == 3) {
            rc = error_set(err, BG_ECONFIG, "%s: modules[%zu].type: \"%s\": not implemented "
                           "(sentence_transformers.models.Transformer, Pooling and Normalize "
                           "are)", path, i, type ? type : "");
            break;
        }
        if (k != next) {
            rc = error_set(err, BG_ECONFIG, "%s: modules[%zu]: %s %s: served are Transformer, "
                           "Pooling and, optionally, Normalize, each once, in that order", path,
                           i, stage[k], k < next ? "again, or after a later module" :
                                                   next == 0 ? "before the Transformer"
                                                             : "before the Pooling");
            break;
        }
        next = k + 1;
        if (k == 2)
            o->normalize = true;
        if (k == 1) {
            if (!sub || strstr(sub, "..")) {
                rc = error_set(err, BG_ECONFIG, "%s: modules[%zu].path: the Pooling module's "
                               "folder, within the model's", path, i);
                break;
            }
            char pool[4400];
            snprintf(pool, sizeof pool, "%.4000s/%.200s/config.json", dir, sub);
            if ((rc = hf_pooling(pool, o, &o->pooling, err)))
                break;
        }
    }
    if (rc == 0 && next < 2)
        rc = error_set(err, BG_ECONFIG, "%s: no %s module: served are Transformer, Pooling and, "
                       "optionally, Normalize", path, stage[next]);
    json_decref(m);
    return rc;
}

/* Without a max_seq_length of its own (sentence_bert_config.json),
 * sentence-transformers cuts at the tokenizer's model_max_length where
 * that is smaller than the position table: cut at the table's end, a long
 * text's vector was another (cosine 0.88, the encoder's white-box audit).
 * Read with every number a double: "no limit" is written
 * 1000000000000000019884624838656, past what an integer holds. A file
 * that does not read sets no limit (the tokenizer itself is
 * tokenizer.json's). A value below the table's end must be a whole number
 * of at least 2 ([CLS] and [SEP]): 16.5 was ignored, and 0, where 1 was
 * refused; and it applies only without sentence_bert_config's own (a
 * folder with max_seq_length 32 and model_max_length 1 was refused). */
static int hf_tokenizer_cut(const char *dir, struct hf_bert_config *out, struct error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/tokenizer_config.json", dir);
    json_t *tc = hf_exists(path) ? json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL) : NULL;
    json_t *mml = json_is_object(tc) ? json_object_get(tc, "model_max_length") : NULL;
    int rc = 0;
    /* A string ("12") was ignored, the cut left at the table's end. */
    if (mml && !json_is_number(mml) && !json_is_null(mml)) {
        rc = error_set(err, BG_ECONFIG, "%s: model_max_length: must be a number of tokens",
                       path);
    } else if (json_is_number(mml) && json_number_value(mml) < out->max_positions) {
        double v = json_number_value(mml);
        if (v != (double)(int)v || v < 2)
            rc = error_set(err, BG_ECONFIG, "%s: model_max_length: %g %s", path, v,
                           v != (double)(int)v ? "is not a whole number of tokens"
                                               : "leaves no room for [CLS] and [SEP] (2 at "
                                                 "least)");
        else
            out->max_seq_length = (int)v;
    }
    json_decref(tc);
    /* [CLS] and [SEP] take two (a table of one position failed only at
     * the warmup, naming neither file nor field). */
    if (rc == 0 && out->max_seq_length < 2) {
        snprintf(path, sizeof path, "%.4000s/config.json", dir);
        rc = error_set(err, BG_ECONFIG, "%s: max_position_embeddings: %d leaves no room for "
                       "[CLS] and [SEP] (2 at least)", path, out->max_seq_length);
    }
    return rc;
}

int hf_bert_config_load(const char *dir, struct hf_bert_config *out, struct error *err)
{
    memset(out, 0, sizeof *out);
    out->pooling = POOL_MEAN;
    char path[4200];
    snprintf(path, sizeof path, "%.4000s/config.json", dir);
    json_t *c;
    int rc = hf_json(path, true, &c, err);
    if (rc)
        return rc;
    rc = hf_graph(path, c, out, err);
    json_decref(c);
    if (rc || (rc = hf_modules(dir, out, err)))
        return rc;
    out->max_seq_length = out->max_positions;
    snprintf(path, sizeof path, "%.4000s/sentence_bert_config.json", dir);
    json_t *s;
    if ((rc = hf_json(path, false, &s, err)))
        return rc;
    if (s && json_object_get(s, "max_seq_length")) {
        rc = hf_int(path, s, "max_seq_length", 0, &out->max_seq_length, err);
        if (rc == 0 && out->max_seq_length > out->max_positions)
            rc = error_set(err, BG_ECONFIG, "%s: max_seq_length: %d, more than "
                           "max_position_embeddings %d", path, out->max_seq_length,
                           out->max_positions);
        /* [CLS] and [SEP] take two: a text needs room for them at least. */
        if (rc == 0 && out->max_seq_length < 2)
            rc = error_set(err, BG_ECONFIG, "%s: max_seq_length: %d leaves no room for [CLS] "
                           "and [SEP] (2 at least)", path, out->max_seq_length);
    } else {
        rc = hf_tokenizer_cut(dir, out, err);
    }
    /* sentence-transformers lowercases each text before its tokenizer
     * when this is set (a tokenizer that does not lowercase then saw
     * [UNK] for every capitalised word). */
    json_t *lower = s ? json_object_get(s, "do_lower_case") : NULL;
    if (rc == 0 && lower && !json_is_boolean(lower))
        rc = error_set(err, BG_ECONFIG, "%s: do_lower_case: expected true or false", path);
    out->do_lower_case = json_is_true(lower);
    json_decref(s);
    if (rc)
        return rc;
    /* A default prompt is prepended to every text by sentence-transformers'
     * encode(): served without it, every vector would differ from the
     * model's (e5's "query: ", bge's instructions). Not implemented. */
    snprintf(path, sizeof path, "%.4000s/config_sentence_transformers.json", dir);
    json_t *st;
    if ((rc = hf_json(path, false, &st, err)))
        return rc;
    json_t *dp = st ? json_object_get(st, "default_prompt_name") : NULL;
    if (dp && !json_is_null(dp))
        rc = error_set(err, BG_ECONFIG, "%s: default_prompt_name: \"%s\": not implemented "
                       "(batchgate applies no prompts; null serves the texts as sent)", path,
                       json_is_string(dp) ? json_string_value(dp) : "(not a string)");
    json_decref(st);
    return rc;
}

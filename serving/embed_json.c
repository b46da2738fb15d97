/* embed_json.c - see embed_json.h. */
#include "serving/embed_json.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "backends/encoder.h"
#include "common/jsonfmt.h"
#include "serving/tensor_json.h"

/* A body jansson refused: invalid JSON, or valid JSON holding a number
 * past what it reads (a token id of 2^64 was "invalid JSON: too big
 * integer", blaming the client's encoder). */
static int embed_json_refused(const json_error_t *je, struct error *err)
{
    char at[48];
    tensor_json_where(at, sizeof at, je->line, je->column);
    if (json_error_out_of_range(je->text))
        return error_set(err, BG_EINVAL, "a number out of range at %s: valid JSON, but numbers "
                         "are read up to 2^63-1 (no token id or field is that large)", at);
    return error_set(err, BG_EINVAL, "invalid JSON at %s: %s", at, je->text);
}

int embed_openai_model(const char *body, size_t len, char *name, size_t cap, char *param,
                       size_t pcap, struct error *err)
{
    json_error_t je;
    snprintf(param, pcap, "%s", "");
    /* Read as the decoder reads the body (duplicate keys refused), so that
     * which of two "model" keys names the model cannot differ between the
     * two. */
    /* The model is not known yet: the bound of any body (jsonfmt.h). */
    uint64_t values = json_values_at_least(body, len);
    if (values > JSON_VALUES_ANY)
        return error_set(err, BG_EINVAL, "the body holds %llu JSON values, more than "
                         "%u: refused before it is read", (unsigned long long)values,
                         JSON_VALUES_ANY);
    json_t *root = json_loadb(body, len, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return embed_json_refused(&je, err);
    json_t *m = json_is_object(root) ? json_object_get(root, "model") : NULL;
    int rc = 0;
    if (!tensor_json_name(m) || json_string_length(m) == 0 || json_string_length(m) >= cap) {
        snprintf(param, pcap, "model");
        rc = error_set(err, BG_EINVAL, "model: must be the name of a model (a string of 1 to %zu "
                       "bytes, without NUL)", cap - 1);
    } else {
        memcpy(name, json_string_value(m), json_string_length(m) + 1);
    }
    json_decref(root);
    return rc;
}

static int embed_fail(struct embed_request *e, const char *param, struct error *err, int code,
                      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int embed_fail(struct embed_request *e, const char *param, struct error *err, int code,
                      const char *fmt, ...)
{
    snprintf(e->param, sizeof e->param, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    error_setv(err, code, fmt, ap);
    va_end(ap);
    return -code;
}

static int embed_bool(json_t *root, const char *key, bool *out, struct embed_request *e,
                      struct error *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))   /* null is omitted, as OpenAI's API takes it */
        return 0;
    if (!json_is_boolean(v))
        return embed_fail(e, key, err, BG_EINVAL, "%s: must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

/* One input: a string, or (OpenAI) an array of token ids. */
static int embed_row(const struct model *m, json_t *v, int row, const char *field,
                     struct infer_request *r, struct embed_request *e, struct error *err)
{
    float *dst = r->input + (size_t)row * (size_t)m->cfg.input.row_elems;
    int tokens = 0, rc;
    struct error ie = {0};
    if (json_is_string(v)) {
        rc = encoder_row_from_text(m, json_string_value(v), json_string_length(v), r->truncate,
                                   dst, &tokens, &ie);
    } else if (json_is_array(v) && e->api == EMBED_OPENAI) {
        size_t n = json_array_size(v);
        int64_t stack[512];
        int64_t *ids = n <= 512 ? stack : malloc(n * sizeof *ids);
        if (!ids)
            return embed_fail(e, field, err, BG_ENOMEM, "out of memory");
        rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
            json_t *id = json_array_get(v, i);
            if (!json_is_integer(id))
                rc = error_set(&ie, BG_EINVAL, "element %zu is not a token id (an integer)", i);
            else
                ids[i] = json_integer_value(id);
        }
        if (rc == 0)
            rc = encoder_row_from_ids(m, ids, n, r->truncate, dst, &tokens, &ie);
        if (ids != stack)
            free(ids);
    } else {
        rc = error_set(&ie, BG_EINVAL, e->api == EMBED_OPENAI
                                           ? "must be a string or an array of token ids"
                                           : "must be a string");
    }
    if (rc)
        return embed_fail(e, field, err, ie.code, "%s[%d]: %s", field, row, ie.msg);
    r->tokens += tokens;
    return 0;
}

static int embed_decode_root(const struct model *m, json_t *root, struct infer_request *r,
                             struct embed_request *e, struct error *err)
{
    const struct model_config *c = &m->cfg;
    const char *field = e->api == EMBED_OPENAI ? "input" : "inputs";
    if (!json_is_object(root))
        return embed_fail(e, "", err, BG_EINVAL, "the body must be a JSON object with \"%s\"",
                          field);
    int rc;
    if ((rc = embed_bool(root, "truncate", &r->truncate, e, err)))
        return rc;
    /* TEI keeps a text's end for "Left"; these kernels keep its start.
     * Taken silently, the vectors of long texts would differ from TEI's, so
     * only what is done here is accepted: on both routes, as `truncate` is
     * (a client moving from TEI's to OpenAI's route keeps its fields). */
    json_t *dir = json_object_get(root, "truncation_direction");
    if (dir && !json_is_null(dir) &&
        (!json_is_string(dir) || strcasecmp(json_string_value(dir), "right") != 0))
        return embed_fail(e, "truncation_direction", err, BG_EINVAL,
                          "truncation_direction: only \"Right\" is served (a text past "
                          "the maximum length keeps its start)");
    /* A prompt changes the vector (sentence-transformers prepends it to
     * the text); this server applies none (a folder that names a default
     * one is refused at load), so one asked for is refused, not ignored. */
    json_t *prompt = json_object_get(root, "prompt_name");
    if (prompt && !json_is_null(prompt))
        return embed_fail(e, "prompt_name", err, BG_EINVAL,
                          "prompt_name: model %s applies no prompts (put the prompt's text "
                          "before each input)", c->name);
    /* Both routes (TEI's /embed has `dimensions` too): a shorter vector
     * asked for and the full one given was a silent wrong answer. */
    json_t *dim = json_object_get(root, "dimensions");
    if (json_is_null(dim))
        dim = NULL;
    if (dim && !json_is_integer(dim))
        return embed_fail(e, "dimensions", err, BG_EINVAL,
                          "dimensions: must be an integer (model %s gives %d)", c->name,
                          c->encoder.hidden);
    if (dim && json_integer_value(dim) != c->encoder.hidden)
        return embed_fail(e, "dimensions", err, BG_EINVAL,
                          "dimensions: model %s gives %d dimensions and does not shorten "
                          "them (omit the field, or send %d)", c->name, c->encoder.hidden,
                          c->encoder.hidden);
    if (e->api == EMBED_TEI) {
        if ((rc = embed_bool(root, "normalize", &e->normalize, e, err)))
            return rc;
    } else {
        json_t *fmt = json_object_get(root, "encoding_format");
        if (json_is_null(fmt))
            fmt = NULL;   /* omitted */
        if (fmt && (!tensor_json_name(fmt) || (strcmp(json_string_value(fmt), "float") != 0 &&
                                             strcmp(json_string_value(fmt), "base64") != 0)))
            return embed_fail(e, "encoding_format", err, BG_EINVAL,
                              "encoding_format: must be \"float\" or \"base64\"");
        e->base64 = fmt && strcmp(json_string_value(fmt), "base64") == 0;
        /* OpenAI's schema types "user" (a string it logs, unused here);
         * a client sending an object would learn of its mistake there. */
        json_t *user = json_object_get(root, "user");
        if (user && !json_is_null(user) && !json_is_string(user))
            return embed_fail(e, "user", err, BG_EINVAL, "user: must be a string");
    }
    json_t *in = json_object_get(root, field);
    if (!in)
        return embed_fail(e, field, err, BG_EINVAL, "%s: missing", field);
    /* One input, or a list of them: [1, 2, 3] is one sequence of ids. */
    bool one = json_is_string(in) ||
               (e->api == EMBED_OPENAI && json_is_array(in) && json_array_size(in) > 0 &&
                json_is_integer(json_array_get(in, 0)));
    size_t n = one ? 1 : json_is_array(in) ? json_array_size(in) : 0;
    if (n == 0)
        return embed_fail(e, field, err, BG_EINVAL, "%s: must be %s", field,
                          e->api == EMBED_OPENAI ? "a string, an array of strings, an array of "
                                                   "token ids or an array of such arrays"
                                                 : "a string or a non-empty array of strings");
    if (n > (size_t)c->batching.max_batch_size)
        return embed_fail(e, field, err, BG_EINVAL, "%s: %zu inputs; model %s takes 1 to %d per "
                          "request (batching.max_batch_size)", field, n, c->name,
                          c->batching.max_batch_size);
    /* OpenAI's schema: texts, or token arrays, not a mix of the two. */
    json_t *first = one ? NULL : json_array_get(in, 0);
    for (size_t i = 1; first && i < n; i++)
        if ((json_is_string(first) && json_is_array(json_array_get(in, i))) ||
            (json_is_array(first) && json_is_string(json_array_get(in, i))))
            return embed_fail(e, field, err, BG_EINVAL, "%s: an array of strings or an array "
                              "of token id arrays, not both (element %zu differs from element "
                              "0)", field, i);
    r->rows = (int)n;
    r->input = malloc(n * (size_t)c->input.row_elems * sizeof(float));
    if (!r->input)
        return embed_fail(e, field, err, BG_ENOMEM, "out of memory for %zu inputs", n);
    for (size_t i = 0; i < n; i++)
        if ((rc = embed_row(m, one ? in : json_array_get(in, i), (int)i, field, r, e, err)))
            return rc;
    return 0;
}

int embed_decode(const struct model *m, enum embed_api api, const char *body, size_t len,
                 struct infer_request *r, struct embed_request *e, struct error *err)
{
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    e->api = api;
    r->truncate = true;
    e->normalize = api == EMBED_TEI || m->cfg.encoder.normalize;
    if (m->cfg.kind != MODEL_KIND_ENCODER)
        return embed_fail(e, "model", err, BG_EINVAL, "model %s is not an embedding model (it "
                          "takes %s tensors: use /v2/models/%s/infer)", m->cfg.name,
                          m->cfg.input.datatype, m->cfg.name);
    /* At most max_batch_size inputs of token ids, each as long as OpenAI
     * takes one (8192) or the model's maximum (longer ones are cut):
     * past that, refused before it is parsed (jsonfmt.h). */
    uint64_t values = json_values_at_least(body, len);
    uint64_t most = (uint64_t)m->cfg.batching.max_batch_size *
                        ((uint64_t)(m->cfg.encoder.max_seq_length > 8192
                                        ? m->cfg.encoder.max_seq_length : 8192) + 2) + 4096;
    if (values > most)
        return embed_fail(e, "input", err, BG_EINVAL, "the body holds %llu JSON values; model "
                          "%s takes at most %d inputs of up to %d tokens: refused "
                          "before it is read", (unsigned long long)values, m->cfg.name,
                          m->cfg.batching.max_batch_size,
                          m->cfg.encoder.max_seq_length > 8192 ? m->cfg.encoder.max_seq_length
                                                               : 8192);
    json_error_t je;
    /* Texts may hold NUL (tokenized as the library does: a control). */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) {
        struct error je_err = {0};
        embed_json_refused(&je, &je_err);
        return embed_fail(e, "", err, BG_EINVAL, "%s", je_err.msg);
    }
    int rc = embed_decode_root(m, root, r, e, err);
    json_decref(root);
    if (rc) {
        free(r->input);
        r->input = NULL;
    }
    return rc;
}

/* ---- answers ---- */

static void embed_base64(struct buf *b, const float *v, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)v;   /* little-endian floats, as OpenAI's */
    size_t len = n * sizeof(float);
    if (buf_reserve(b, (len + 2) / 3 * 4 + 2) < 0)
        return;
    char *o = b->data + b->len;
    *o++ = '"';
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t x = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = tab[x >> 18];
        *o++ = tab[(x >> 12) & 63];
        *o++ = tab[(x >> 6) & 63];
        *o++ = tab[x & 63];
    }
    if (i < len) {
        uint32_t x = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
        *o++ = tab[x >> 18];
        *o++ = tab[(x >> 12) & 63];
        *o++ = i + 1 < len ? tab[(x >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
}

static int embed_floats(struct buf *b, const float *v, size_t n)
{
    if (buf_append(b, "[", 1) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if ((i && buf_append(b, ",", 1) < 0) || json_append_float(b, v[i]) < 0)
            return -1;
    return buf_append(b, "]", 1);
}

int embed_encode(const struct model_config *c, const struct embed_request *e,
                 const struct infer_request *r, const float *out, struct buf *b)
{
    size_t H = (size_t)c->output.row_elems;
    if (e->api == EMBED_TEI) {
        buf_append(b, "[", 1);
        for (int i = 0; i < r->rows; i++) {
            if (i)
                buf_append(b, ",", 1);
            if (embed_floats(b, out + (size_t)i * H, H) < 0)
                return -1;
        }
        return buf_append(b, "]", 1);
    }
    buf_append(b, "{\"object\":\"list\",\"data\":[", 25);
    for (int i = 0; i < r->rows; i++) {
        buf_appendf(b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        if (e->base64)
            embed_base64(b, out + (size_t)i * H, H);
        else if (embed_floats(b, out + (size_t)i * H, H) < 0)
            return -1;
        buf_append(b, "}", 1);
    }
    buf_append(b, "],\"model\":", 10);
    json_append_string(b, c->name, strlen(c->name));
    return buf_appendf(b, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}",
                       (long long)r->tokens, (long long)r->tokens);
}

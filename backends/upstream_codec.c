/* upstream_codec.c - request bodies and strict answer reading for the
 * upstream backend (upstream_codec.h says what an answer may be). */
#include "backends/upstream_codec.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/jsonfmt.h"

/* The least magnitude that rounds to infinity as FP32 (FLT_MAX plus half an
 * ulp): a finite number past it did not fit the output's FP32. */
#define UPSTREAM_FP32_OVERFLOW 0x1.ffffffp127

void upstream_codec_request(const struct model_config *mc, const float *in, int rows,
                            struct buf *b)
{
    size_t row = (size_t)mc->input.row_elems;
    if (mc->upstream.protocol == UPSTREAM_KSERVE_V2) {
        buf_appendf(b, "{\"inputs\":[{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":[%d",
                    mc->input.name, rows);
        for (int i = 0; i < mc->input.ndims; i++)
            buf_appendf(b, ",%lld", (long long)mc->input.shape[i]);
        buf_append(b, "],\"data\":[", 10);
        for (size_t k = 0; k < (size_t)rows * row; k++) {
            if (k)
                buf_append(b, ",", 1);
            json_append_float(b, in[k]);
        }
        /* Only the output served here: a server of several outputs would
         * otherwise answer them all, in an order of its own. */
        buf_appendf(b, "]}],\"outputs\":[{\"name\":\"%s\"}]}", mc->output.name);
    } else {
        /* Each instance nested as the input's shape: TF Serving reads a
         * row's shape from its nesting, and refused a flat row of a [2,3]
         * input ("Expecting shape"). */
        int64_t shape[MODEL_MAX_DIMS + 1];
        shape[0] = rows;
        for (int i = 0; i < mc->input.ndims; i++)
            shape[i + 1] = mc->input.shape[i];
        buf_append(b, "{\"instances\":", 13);
        json_append_nested(b, &in, shape, mc->input.ndims + 1, json_append_float);
        buf_append(b, "}", 1);
    }
}

struct reader {
    float *out;
    size_t n, cap;
    char *why;
    size_t why_cap;
};

static int reader_fail(struct reader *rd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rd->why, rd->why_cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* Appends v's numbers (nested arrays row-major) to rd; where names the
 * field in messages. Counts past cap without writing, so a long answer's
 * count can be told. */
static int reader_take(struct reader *rd, json_t *v, const char *where, int depth)
{
    if (depth > 32)
        return reader_fail(rd, "malformed answer: %s nested deeper than 32 levels", where);
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
            if (reader_take(rd, e, where, depth + 1) < 0)
                return -1;
        return 0;
    }
    float x;
    if (json_is_null(v)) {
        x = NAN;
    } else if (json_is_number(v)) {
        double d = json_number_value(v);
        x = fabs(d) < UPSTREAM_FP32_OVERFLOW ? (float)d : (d < 0 ? -INFINITY : INFINITY);
    } else {
        return reader_fail(rd, "malformed answer: %s element %zu is not a number", where, rd->n);
    }
    if (rd->n < rd->cap)
        rd->out[rd->n] = x;
    rd->n++;
    return 0;
}

static bool upstream_numeric_datatype(const char *dt)
{
    static const char *const ok[] = {"FP16", "BF16", "FP32", "FP64", "INT8",  "INT16",
                                     "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strcmp(dt, ok[i]) == 0)
            return true;
    return false;
}

static int upstream_read_kserve(const struct model_config *mc, json_t *root, int rows,
                                struct reader *rd)
{
    const char *name = mc->output.name;
    json_t *outputs = json_object_get(root, "outputs");
    if (!json_is_array(outputs))
        return reader_fail(rd, "malformed answer: no \"outputs\" array");
    json_t *o = NULL, *e;
    size_t i;
    json_array_foreach(outputs, i, e) {
        json_t *n = json_object_get(e, "name");
        if (json_is_string(n) && strcmp(json_string_value(n), name) == 0) {
            o = e;
            break;
        }
    }
    if (!o)
        return reader_fail(rd, "malformed answer: no output named \"%s\" (the model's "
                           "outputs[0].name)", name);
    json_t *dt = json_object_get(o, "datatype");
    if (!json_is_string(dt) || !upstream_numeric_datatype(json_string_value(dt)))
        return reader_fail(rd, "malformed answer: output \"%s\" datatype %s is not a number "
                           "type", name, json_is_string(dt) ? json_string_value(dt) : "missing");
    json_t *shape = json_object_get(o, "shape");
    long long count = 1;
    if (!json_is_array(shape) || json_array_size(shape) < 1)
        return reader_fail(rd, "malformed answer: output \"%s\" has no shape", name);
    json_array_foreach(shape, i, e) {
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return reader_fail(rd, "malformed answer: output \"%s\" shape[%zu] is not a "
                               "size", name, i);
        /* Past cap + 1 the product only has to stay wrong, not overflow. */
        long long v = json_integer_value(e), cap = (long long)rd->cap;
        count = (v != 0 && count > cap / v + 1) ? cap + 1 : count * v;
    }
    if (json_integer_value(json_array_get(shape, 0)) != rows || count != (long long)rd->cap) {
        char text[96];
        size_t k = (size_t)snprintf(text, sizeof text, "[");
        json_array_foreach(shape, i, e)
            if (k < sizeof text)
                k += (size_t)snprintf(text + k, sizeof text - k, "%s%lld", i ? "," : "",
                                      (long long)json_integer_value(e));
        if (k < sizeof text)
            snprintf(text + k, sizeof text - k, "]");
        return reader_fail(rd, "malformed answer: output \"%s\" of shape %s for %d rows of "
                           "%lld values", name, text, rows, (long long)mc->output.row_elems);
    }
    json_t *data = json_object_get(o, "data");
    if (!json_is_array(data))
        return reader_fail(rd, "malformed answer: output \"%s\" has no data (binary outputs "
                           "are not read)", name);
    if (reader_take(rd, data, "data", 0) < 0)
        return -1;
    if (rd->n != rd->cap)
        return reader_fail(rd, "malformed answer (%zu of %zu output values)", rd->n, rd->cap);
    return 0;
}

static int upstream_read_tfserving(const struct model_config *mc, json_t *root, int rows,
                                   struct reader *rd)
{
    json_t *preds = json_object_get(root, "predictions");
    if (!json_is_array(preds))
        return reader_fail(rd, "malformed answer: no \"predictions\" array");
    if (json_array_size(preds) != (size_t)rows)
        return reader_fail(rd, "malformed answer: %zu predictions for %d instances",
                           json_array_size(preds), rows);
    size_t width = (size_t)mc->output.row_elems;
    size_t i;
    json_t *p;
    json_array_foreach(preds, i, p) {
        /* A model of several outputs answers an object per row. */
        if (json_is_object(p) && !(p = json_object_get(p, mc->output.name)))
            return reader_fail(rd, "malformed answer: predictions[%zu] has no \"%s\"", i,
                               mc->output.name);
        size_t before = rd->n;
        char where[48];
        snprintf(where, sizeof where, "predictions[%zu]", i);
        if (!json_is_array(p) && width != 1)
            return reader_fail(rd, "malformed answer: %s is one number, the output has %zu "
                               "per row", where, width);
        if (reader_take(rd, p, where, 0) < 0)
            return -1;
        if (rd->n - before != width)
            return reader_fail(rd, "malformed answer: %s holds %zu values, the output has %zu "
                               "per row", where, rd->n - before, width);
    }
    return 0;
}

int upstream_codec_answer(const struct model_config *mc, const char *body, size_t len,
                          int rows, float *out, char *why, size_t cap)
{
    struct reader rd = {out, 0, (size_t)rows * (size_t)mc->output.row_elems, why, cap};
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, 0, &je);
    if (!root && body && mc->upstream.protocol == UPSTREAM_TFSERVING) {
        /* TF Serving writes a non-finite value as a bare NaN or Infinity,
         * which no JSON parser takes: read as null, a value that is not
         * finite (the whole batch failed, every row of it). */
        struct buf fixed = BUF_INIT;
        if (json_nonfinite_to_null(body, len, &fixed) > 0)
            root = json_loadb(fixed.data, fixed.len, 0, &je);
        buf_free(&fixed);
    }
    /* What the parser said: valid JSON it cannot hold (1e400: "real
     * number overflow"; an integer past 64 bits) read as "not a JSON
     * object" sent the reader looking at the wrong thing. */
    if (!root)
        return reader_fail(&rd, "malformed answer: %s at line %d, column %d: %s",
                           json_error_out_of_range(je.text)
                               ? "a number out of the parser's range"
                               : "invalid JSON",
                           je.line, je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return reader_fail(&rd, "malformed answer: not a JSON object");
    }
    int rc = mc->upstream.protocol == UPSTREAM_KSERVE_V2
                 ? upstream_read_kserve(mc, root, rows, &rd)
                 : upstream_read_tfserving(mc, root, rows, &rd);
    json_decref(root);
    return rc;
}

void upstream_codec_error(const char *body, size_t len, char *msg, size_t cap)
{
    msg[0] = '\0';
    json_error_t je;
    json_t *root = json_loadb(body ? body : "", len, 0, &je);
    json_t *e = json_object_get(root, "error");
    if (json_is_object(e))   /* OpenAI's shape, from a server that speaks it too */
        e = json_object_get(e, "message");
    if (json_is_string(e)) {
        /* Printable ASCII only: it goes into a log line and a client's error. */
        size_t k = 0;
        for (const char *s = json_string_value(e); *s && k + 1 < cap; s++)
            msg[k++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
        msg[k] = '\0';
    }
    json_decref(root);
}

bool upstream_codec_tfs_available(const char *body, size_t len, char *msg, size_t cap)
{
    json_t *root = json_loadb(body, len, 0, NULL);
    json_t *vs = json_is_object(root) ? json_object_get(root, "model_version_status") : NULL;
    bool ok = false;
    size_t i, n = 0;
    json_t *v;
    char states[96] = "";
    json_array_foreach(vs, i, v) {
        const char *st = json_string_value(json_object_get(v, "state"));
        if (st && strcmp(st, "AVAILABLE") == 0)
            ok = true;
        if (st && n++ < 4)
            snprintf(states + strlen(states), sizeof states - strlen(states), "%s%.16s",
                     states[0] ? ", " : "", st);
    }
    if (!ok)
        snprintf(msg, cap, json_is_array(vs) ? "no version AVAILABLE (%s)"
                                             : "not a TF Serving model status%s",
                 json_is_array(vs) ? (states[0] ? states : "none listed") : "");
    json_decref(root);
    return ok;
}

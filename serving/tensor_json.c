/* tensor_json.c - see tensor_json.h. Requests are parsed with jansson;
 * answers are written by hand into a buffer (no tree, no per-number
 * allocation) since they are on every request's path. */
#include "serving/tensor_json.h"

#include "backends/encoder.h"
#include "backends/labels.h"
#include "common/jsonfmt.h"
#include "common/memguard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ---- encoding helpers ---- */

int json_append_string(struct buf *out, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    if (buf_reserve(out, len * 6 + 2) < 0)
        return -1;
    char *p = out->data + out->len;
    *p++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *p++ = '\\';
            *p++ = (char)c;
        } else if (c < 0x20) {
            *p++ = '\\';
            *p++ = 'u';
            *p++ = '0';
            *p++ = '0';
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
        } else {
            *p++ = (char)c;
        }
    }
    *p++ = '"';
    out->len = (size_t)(p - out->data);
    return 0;
}

static int tensor_append_floats(struct buf *out, const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i && buf_append(out, ",", 1) < 0)
            return -1;
        if (json_append_float(out, v[i]) < 0)
            return -1;
    }
    return 0;
}

static void tensor_append_shape(struct buf *out, int rows, const struct model_tensor *t)
{
    buf_appendf(out, "[%d", rows);
    for (int i = 0; i < t->ndims; i++)
        buf_appendf(out, ",%lld", (long long)t->shape[i]);
    buf_append(out, "]", 1);
}

static void tensor_format_model_shape(const struct model_tensor *t, char *s, size_t cap)
{
    int n = snprintf(s, cap, "[-1");
    for (int i = 0; i < t->ndims && n > 0 && (size_t)n < cap; i++)
        n += snprintf(s + n, cap - (size_t)n, ", %lld", (long long)t->shape[i]);
    if (n > 0 && (size_t)n < cap)
        snprintf(s + n, cap - (size_t)n, "]");
}

/* ---- decoding helpers ---- */

/* The least magnitude that rounds to infinity as FP32: FLT_MAX plus half
 * its ulp. Below it a number rounds to FLT_MAX, so the 3.40282347e+38 that
 * printing FLT_MAX with 9 digits gives (ours, numpy's "3.4028235e38") reads
 * back as the finite number it was. */
#define TENSOR_FP32_OVERFLOW 0x1.ffffffp127

/* Binary bytes carry any float: the same rule as JSON's numbers, that inputs
 * are finite, holds for them (a NaN would travel to an upstream server as
 * JSON null and fail its whole batch). */
static int tensor_check_finite(const float *x, size_t n, const char *where, const char *field,
                               struct error *err)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return error_set(err, BG_EINVAL, "%s%s: element %zu is %s; input numbers must be "
                             "finite", where, field, i, isnan(x[i]) ? "NaN" : "infinite");
    return 0;
}

struct flat {
    float *dst;
    size_t n, cap;
    const char *field;
    struct error *err;
};

/* Flattens nested arrays of numbers into dst, in row-major order. */
static int tensor_flatten(json_t *v, struct flat *f, int depth)
{
    if (depth > 32)
        return error_set(f->err, BG_EINVAL, "%s: nested deeper than 32 levels", f->field);
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            int rc = tensor_flatten(e, f, depth + 1);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (!json_is_number(v))
        return error_set(f->err, BG_EINVAL, "%s: element %zu is not a number", f->field, f->n);
    double d = json_number_value(v);
    if (!(fabs(d) < TENSOR_FP32_OVERFLOW))
        return error_set(f->err, BG_EINVAL, "%s: element %zu (%g) is out of FP32 range", f->field,
                         f->n, d);
    if (f->n < f->cap)
        f->dst[f->n] = (float)d;
    f->n++;
    return 0;
}

static int tensor_get_bool_param(json_t *params, const char *key, bool *out, const char *where,
                          struct error *err)
{
    json_t *v = json_object_get(params, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return error_set(err, BG_EINVAL, "%sparameters.%s: must be true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

/* A parameters object (request's, an input's or an output's), once the
 * parameters read have been checked with their own messages: the
 * protocol's $parameter values are strings, numbers or booleans. Others
 * were taken and ignored, so a misspelt nesting went unnoticed; Triton
 * refuses them too. */
static int tensor_params_check(json_t *params, const char *where, struct error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(params, key, v)
        if (!json_is_string(v) && !json_is_number(v) && !json_is_boolean(v))
            return error_set(err, BG_EINVAL, "%sparameters.%.64s: must be a string, a number or "
                             "a boolean, not %s", where, key,
                             json_is_object(v) ? "an object" : json_is_array(v) ? "an array"
                                                                              : "null");
    return 0;
}

/* Triton's uint64 parameters: a gRPC uint64_param past INT64_MAX comes
 * (pbjson) as a whole real in [2^63, 2^64). */
static bool tensor_param_past_int64(json_t *v)
{
    return json_is_real(v) && json_real_value(v) >= 0x1p63 &&
           json_real_value(v) <= 0x1p64 &&   /* 2^64-1 as a double */
           json_real_value(v) == floor(json_real_value(v));
}

static int tensor_decode_request_params(json_t *params, struct infer_request *out, struct error *err)
{
    if (!params)
        return 0;
    if (!json_is_object(params))
        return error_set(err, BG_EINVAL, "parameters: must be an object");
    json_t *v;
    if ((v = json_object_get(params, "priority"))) {
        /* Past the levels served it is the default, as in Triton. */
        bool big = tensor_param_past_int64(v);
        if (!big && (!json_is_integer(v) || json_integer_value(v) < 0))
            return error_set(err, BG_EINVAL,
                             "parameters.priority: must be an integer >= 0 (1 is the highest, 0 "
                             "the model's default)");
        out->has_priority = true;
        out->priority = big || json_integer_value(v) > MODEL_PRIORITY_MAX ? 0
                                                                          : json_integer_value(v);
    }
    if ((v = json_object_get(params, "timeout"))) {
        /* Past INT64_MAX microseconds: no hurry, as INT64_MAX is. */
        bool big = tensor_param_past_int64(v);
        if (!big && (!json_is_integer(v) || json_integer_value(v) < 0))
            return error_set(err, BG_EINVAL,
                             "parameters.timeout: must be an integer number of microseconds >= 0");
        out->has_timeout = true;
        out->timeout_us = big ? INT64_MAX : json_integer_value(v);
    }
    int rc = tensor_get_bool_param(params, "truncate", &out->truncate, "", err);
    if (!rc)
        rc = tensor_get_bool_param(params, "binary_data_output", &out->binary_output, "", err);
    return rc ? rc : tensor_params_check(params, "", err);
}

const char *tensor_json_where(char *out, size_t cap, int line, int column)
{
    if (line <= 1)
        snprintf(out, cap, "column %d", column);
    else
        snprintf(out, cap, "line %d, column %d", line, column);
    return out;
}

/* What to add to a parse error. The body's NaN or Infinity: Python's
 * json.dumps writes them for numpy's nan and inf, TF Serving reads them,
 * and "invalid token near 'NaN'" did not say that they are the trouble.
 * An integer past 64 bits is valid JSON that the parser cannot hold:
 * "invalid JSON" alone blamed the client's encoder. */
static const char *tensor_json_hint(const char *body, size_t len, const json_error_t *jerr)
{
    if (json_error_out_of_range(jerr->text))
        return strstr(jerr->text, "integer")
                   ? " (valid JSON, but integers are read from -2^63 to 2^63-1: no shape or "
                     "count takes more; write a value that large with a decimal point or an "
                     "exponent)"
                   : " (valid JSON, but past the largest number a double holds, and FP32's)";
    return json_nonfinite_to_null(body, len, NULL) > 0 ? " (NaN and Infinity are not JSON numbers: batchgate takes finite numbers only)"
                 : "";
}

/* Refuses, before it is parsed, a body holding far more JSON values than
 * any request the model takes could (json_values_at_least: an 8 MiB body
 * of zeros took the process from 11 MB to 215 MB before it was found to
 * be too many rows; at the 64 MiB body limit, 1.6 GB a request). */
#define TENSOR_JSON_SLACK 4096   /* names, shapes, parameters beside the data */
static int tensor_json_bounded(const struct model_config *m, const char *body, size_t len,
                               struct error *err)
{
    /* A row's nodes: its numbers, its lists when nested as its shape (1 +
     * d0 + d0 d1 + ...), and a named row's object: a flat 4,096 beside
     * the numbers refused full batches of nested rows (8192 rows of [1]
     * counted 16,398). */
    uint64_t lists = 0, prod = 1;
    for (int k = 0; k < m->input.ndims; k++) {
        lists += prod;
        prod *= (uint64_t)(m->input.shape[k] > 0 ? m->input.shape[k] : 1);
    }
    uint64_t per_row = (uint64_t)(m->input.row_elems > 0 ? m->input.row_elems : 1) + lists + 3;
    uint64_t most = (uint64_t)m->batching.max_batch_size * per_row + TENSOR_JSON_SLACK;
    uint64_t n = json_values_at_least(body, len);
    if (n <= most)
        return 0;
    return error_set(err, BG_EINVAL, "the body holds %llu JSON values; model %s takes "
                     "at most %d rows of %lld values (max_batch_size): refused before it is "
                     "read", (unsigned long long)n, m->name, m->batching.max_batch_size,
                     (long long)m->input.row_elems);
}

bool tensor_json_name(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

/* ---- text (an encoder's BYTES input) ---- */

/* Row `row` of a text input from s: tokenized into out->input. */
static int tensor_text_row(const struct model *model, const char *where, int row, const char *s,
                           size_t len, struct infer_request *out, struct error *err)
{
    int tokens;
    struct error e = {0};
    int rc = encoder_row_from_text(model, s, len, out->truncate,
                                   out->input + (size_t)row * (size_t)model->cfg.input.row_elems,
                                   &tokens, &e);
    if (rc)
        return error_set(err, e.code, "%sdata[%d]: %s", where, row, e.msg);
    out->tokens += tokens;
    return 0;
}

/* A BYTES input of `rows` texts: JSON strings (nested as the shape is, or
 * flat), or binary elements; `size_field` names the parameter that gave
 * their bytes (binary_data_size, or shared_memory_byte_size for a region). */
static int tensor_decode_text(const struct model *model, json_t *data, const char *where,
                              const char **bin, size_t bin_size, const char *size_field,
                              struct infer_request *out, struct error *err)
{
    int rows = out->rows;
    if (*bin) {
        const unsigned char *p = (const unsigned char *)*bin;
        size_t left = bin_size;
        for (int r = 0; r < rows; r++) {
            if (left < 4)
                return error_set(err, BG_EINVAL, "%sparameters.%s: element %d's "
                                 "4-byte length is missing (%d elements expected)", where,
                                 size_field, r, rows);
            size_t n = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 |
                       (size_t)p[3] << 24;
            if (n > left - 4)
                return error_set(err, BG_EINVAL, "%sparameters.%s: element %d "
                                 "says %zu bytes, only %zu are left", where, size_field, r, n,
                                 left - 4);
            int rc = tensor_text_row(model, where, r, (const char *)p + 4, n, out, err);
            if (rc)
                return rc;
            p += 4 + n;
            left -= 4 + n;
        }
        if (left != 0)
            return error_set(err, BG_EINVAL, "%sparameters.%s: %zu bytes after "
                             "the %d elements of the shape", where, size_field, left, rows);
        *bin += bin_size;
        return 0;
    }
    /* [t0, t1, ...] or, for a shape [rows, 1], [[t0], [t1], ...] */
    if (!json_is_array(data) || json_array_size(data) != (size_t)rows)
        return error_set(err, BG_EINVAL, "%sdata: must be an array of %d strings (one per row)",
                         where, rows);
    for (int r = 0; r < rows; r++) {
        json_t *v = json_array_get(data, (size_t)r);
        if (json_is_array(v) && json_array_size(v) == 1)
            v = json_array_get(v, 0);
        if (!json_is_string(v))
            return error_set(err, BG_EINVAL, "%sdata[%d]: must be a string", where, r);
        int rc = tensor_text_row(model, where, r, json_string_value(v), json_string_length(v),
                                 out, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- system shared memory (Triton's extension) ---- */

/* A tensor's shared memory parameters into ref (ref->set false when it has
 * none). Triton's rule: region and byte_size go together, offset is
 * optional (0). */
static int tensor_shm_params(json_t *params, const char *where, struct tensor_shm *ref,
                             struct error *err)
{
    memset(ref, 0, sizeof *ref);
    if (!params)
        return 0;
    json_t *reg = json_object_get(params, "shared_memory_region");
    json_t *bs = json_object_get(params, "shared_memory_byte_size");
    json_t *off = json_object_get(params, "shared_memory_offset");
    if (!reg && !bs && !off)
        return 0;
    if (!reg)
        return error_set(err, BG_EINVAL, "%sparameters.shared_memory_region: missing (%s "
                         "names no region without it)", where,
                         bs ? "shared_memory_byte_size" : "shared_memory_offset");
    if (!tensor_json_name(reg) || json_string_length(reg) == 0 ||
        json_string_length(reg) >= sizeof ref->region)
        return error_set(err, BG_EINVAL, "%sparameters.shared_memory_region: must be the name "
                         "of a registered region (a string of 1 to %zu bytes)", where,
                         sizeof ref->region - 1);
    if (!bs)
        return error_set(err, BG_EINVAL, "%sparameters.shared_memory_byte_size: missing "
                         "(required with shared_memory_region)", where);
    if (!json_is_integer(bs) || json_integer_value(bs) < 0)
        return error_set(err, BG_EINVAL, "%sparameters.shared_memory_byte_size: must be an "
                         "integer >= 0", where);
    if (off && (!json_is_integer(off) || json_integer_value(off) < 0))
        return error_set(err, BG_EINVAL, "%sparameters.shared_memory_offset: must be an "
                         "integer >= 0", where);
    ref->set = true;
    memcpy(ref->region, json_string_value(reg), json_string_length(reg) + 1);
    ref->byte_size = (uint64_t)json_integer_value(bs);
    ref->offset = off ? (uint64_t)json_integer_value(off) : 0;
    return 0;
}

/* The resolver's answer for ref; `where` is "inputs[0]." (its dot dropped
 * for the resolver's messages). */
static int tensor_shm_resolve(const struct tensor_shm_resolver *shm, const struct tensor_shm *ref,
                              const char *where, void **bytes, struct error *err)
{
    if (!shm || !shm->resolve)
        return error_set(err, BG_EINVAL, "%sparameters.shared_memory_region: system shared "
                         "memory is served on POST /v2/models/{model}/infer only", where);
    char what[48];
    size_t n = strlen(where);
    snprintf(what, sizeof what, "%.*s", (int)(n && where[n - 1] == '.' ? n - 1 : n), where);
    return shm->resolve(shm->ctx, ref, what, bytes, err);
}

int tensor_shm_gone(const struct tensor_shm *ref, const char *where, struct error *err)
{
    return error_set(err, BG_EINVAL, "%sparameters.shared_memory_region: \"%s\" no longer holds "
                     "bytes [%llu, %llu): its shared memory object was truncated after it was "
                     "registered", where, ref->region, (unsigned long long)ref->offset,
                     (unsigned long long)(ref->offset + ref->byte_size));
}

/* One entry of "inputs". `bin`/`bin_len` is what is left of the binary section. */
static int tensor_decode_input(const struct model *model, json_t *in, int idx, const char **bin,
                        size_t *bin_len, const struct tensor_shm_resolver *shm,
                        struct infer_request *out, struct error *err)
{
    const struct model_config *m = &model->cfg;
    bool text = m->kind == MODEL_KIND_ENCODER;
    char where[48];
    snprintf(where, sizeof where, "inputs[%d].", idx);
    const struct model_tensor *t = &m->input;
    if (!json_is_object(in))
        return error_set(err, BG_EINVAL, "inputs[%d]: must be an object", idx);
    json_t *name = json_object_get(in, "name");
    if (!tensor_json_name(name))
        return error_set(err, BG_EINVAL, "%sname: must be a string (without NUL)", where);
    if (strcmp(json_string_value(name), t->name) != 0)
        return error_set(err, BG_EINVAL, "%sname: model %s has no input \"%s\" (its input is \"%s\")",
                         where, m->name, json_string_value(name), t->name);
    json_t *dt = json_object_get(in, "datatype");
    if (!tensor_json_name(dt))
        return error_set(err, BG_EINVAL, "%sdatatype: must be a string such as \"FP32\"", where);
    if (strcmp(json_string_value(dt), t->datatype) != 0)
        return error_set(err, BG_EINVAL, "%sdatatype: \"%s\" does not match the model's \"%s\"",
                         where, json_string_value(dt), t->datatype);
    json_t *shape = json_object_get(in, "shape");
    char want[128];
    tensor_format_model_shape(t, want, sizeof want);
    /* Texts may come as [rows] as well as [rows, 1]: Triton's clients send both. */
    bool flat = text && json_is_array(shape) && json_array_size(shape) == 1;
    if (!json_is_array(shape) || (json_array_size(shape) != (size_t)t->ndims + 1 && !flat))
        return error_set(err, BG_EINVAL,
                         "%sshape: must be [rows, ...] matching the model's %s", where, want);
    int64_t dims[MODEL_MAX_DIMS + 1];
    for (size_t i = 0; i < json_array_size(shape); i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d))
            return error_set(err, BG_EINVAL, "%sshape[%zu]: must be an integer", where, i);
        dims[i] = json_integer_value(d);
    }
    if (dims[0] < 1 || dims[0] > m->batching.max_batch_size)
        return error_set(err, BG_EINVAL, "%sshape[0]: %lld rows; model %s takes 1 to %d per request",
                         where, (long long)dims[0], m->name, m->batching.max_batch_size);
    for (int i = 0; i < t->ndims && !flat; i++)
        if (dims[i + 1] != t->shape[i])
            return error_set(err, BG_EINVAL, "%sshape[%d]: %lld does not match the model's %s",
                             where, i + 1, (long long)dims[i + 1], want);
    out->rows = (int)dims[0];
    size_t count = (size_t)out->rows * (size_t)t->row_elems;
    out->input = malloc(count * sizeof(float));
    if (!out->input)
        return error_set(err, BG_ENOMEM, "out of memory for %zu input elements", count);
    json_t *params = json_object_get(in, "parameters");
    if (params && !json_is_object(params))
        return error_set(err, BG_EINVAL, "%sparameters: must be an object", where);
    json_t *bsize = params ? json_object_get(params, "binary_data_size") : NULL;
    json_t *data = json_object_get(in, "data");
    struct tensor_shm ref;
    int rc = tensor_shm_params(params, where, &ref, err);
    if (rc)
        return rc;
    if (ref.set) {
        if (data || bsize)
            return error_set(err, BG_EINVAL, "%s%s: given with parameters.shared_memory_region "
                             "(the tensor is in one or the other)", where,
                             data ? "data" : "parameters.binary_data_size");
        if (!text && ref.byte_size != count * sizeof(float))
            return error_set(err, BG_EINVAL,
                             "%sparameters.shared_memory_byte_size: %llu bytes, but shape %lld x "
                             "%lld FP32 needs %zu", where, (unsigned long long)ref.byte_size,
                             (long long)out->rows, (long long)t->row_elems,
                             count * sizeof(float));
        void *bytes;
        if ((rc = tensor_shm_resolve(shm, &ref, where, &bytes, err)))
            return rc;
        /* Copied out first, under memguard: the client owns the object and
         * may have shrunk it since it registered it (a read past its end
         * raised SIGBUS and killed the server). */
        if (text) {   /* the binary extension's elements */
            char *copy = malloc(ref.byte_size ? (size_t)ref.byte_size : 1);
            if (!copy)
                return error_set(err, BG_ENOMEM, "out of memory for %llu bytes of shared memory",
                                 (unsigned long long)ref.byte_size);
            if (memguard_copy(copy, bytes, (size_t)ref.byte_size) < 0)
                rc = tensor_shm_gone(&ref, where, err);
            const char *p = copy;
            if (!rc)
                rc = tensor_decode_text(model, NULL, where, &p, (size_t)ref.byte_size,
                                        "shared_memory_byte_size", out, err);
            free(copy);
            return rc;
        }
        /* little-endian FP32, as in Triton */
        if (memguard_copy(out->input, bytes, count * sizeof(float)) < 0)
            return tensor_shm_gone(&ref, where, err);
        return tensor_check_finite(out->input, count, where, "shared memory", err);
    }
    if (bsize) {
        if (data)
            return error_set(err, BG_EINVAL, "%sdata: given with parameters.binary_data_size "
                             "(the tensor is in one or the other)", where);
        if (!json_is_integer(bsize) || json_integer_value(bsize) < 0)
            return error_set(err, BG_EINVAL, "%sparameters.binary_data_size: must be an integer >= 0",
                             where);
        size_t n = (size_t)json_integer_value(bsize);
        if (text && (!*bin || *bin_len < n))
            return error_set(err, BG_EINVAL,
                             "%sparameters.binary_data_size: %zu bytes, but only %zu binary bytes "
                             "follow the JSON header", where, n, *bin ? *bin_len : 0);
        if (text) {
            const char *start = *bin;
            rc = tensor_decode_text(model, NULL, where, bin, n, "binary_data_size", out, err);
            *bin_len -= (size_t)(*bin - start);
            return rc;
        }
        if (n != count * sizeof(float))
            return error_set(err, BG_EINVAL,
                             "%sparameters.binary_data_size: %zu bytes, but shape %lld x %lld "
                             "FP32 needs %zu", where, n, (long long)out->rows,
                             (long long)t->row_elems, count * sizeof(float));
        if (!*bin || *bin_len < n)
            return error_set(err, BG_EINVAL,
                             "%sparameters.binary_data_size: %zu bytes, but only %zu binary bytes "
                             "follow the JSON header", where, n, *bin ? *bin_len : 0);
        memcpy(out->input, *bin, n);   /* little-endian FP32, as the extension specifies */
        *bin += n;
        *bin_len -= n;
        return tensor_check_finite(out->input, count, where, "binary data", err);
    }
    if (!data)
        return error_set(err, BG_EINVAL, "%sdata: missing (or give parameters.binary_data_size)",
                         where);
    if (text) {
        const char *none = NULL;
        return tensor_decode_text(model, data, where, &none, 0, NULL, out, err);
    }
    char field[64];
    snprintf(field, sizeof field, "%sdata", where);
    struct flat f = {out->input, 0, count, field, err};
    rc = tensor_flatten(data, &f, 0);
    if (rc)
        return rc;
    if (f.n != count)
        return error_set(err, BG_EINVAL, "%sdata: %zu numbers, but shape [%d x %lld] needs %zu",
                         where, f.n, out->rows, (long long)t->row_elems, count);
    return 0;
}

static const char *tensor_json_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_REAL: return "a fraction";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    default: return "an integer";
    }
}

/* outputs[i].parameters.classification: Triton's extension, k >= 1 and at
 * most the output's elements per row (Triton answers fewer then; a count
 * it cannot give is refused here, as the client asked for k). */
static int tensor_decode_classification(const struct model_config *m, json_t *params,
                                        const char *where, struct infer_request *out,
                                        struct error *err)
{
    json_t *v = json_object_get(params, "classification");
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return error_set(err, BG_EINVAL, "%sparameters.classification: must be an integer >= 1 "
                         "(how many classes to answer), got %s", where, tensor_json_type(v));
    json_int_t k = json_integer_value(v);
    if (k < 1)
        return error_set(err, BG_EINVAL, "%sparameters.classification: must be an integer >= 1 "
                         "(how many classes to answer), got %lld", where, (long long)k);
    if (k > m->output.row_elems)
        return error_set(err, BG_EINVAL, "%sparameters.classification: %lld classes asked, but "
                         "output \"%s\" has %lld elements per row", where, (long long)k,
                         m->output.name, (long long)m->output.row_elems);
    out->class_count = k;
    return 0;
}

/* `truncate` is read at the top of the body only: given on an input or
 * an output it was taken and ignored (a text cut though the client said
 * not to; the encoder's audit, then the re-test for outputs). */
static int tensor_request_param_misplaced(const json_t *params, const char *where,
                                          struct error *err)
{
    if (json_is_object(params) && json_object_get(params, "truncate"))
        return error_set(err, BG_EINVAL, "%sparameters.truncate: a parameter of the request: "
                         "give it as parameters.truncate at the top of the body", where);
    return 0;
}

static int tensor_decode_outputs(const struct model_config *m, json_t *outs,
                                 const struct tensor_shm_resolver *shm, struct infer_request *out,
                                 struct error *err)
{
    if (!outs)
        return 0;
    if (!json_is_array(outs))
        return error_set(err, BG_EINVAL, "outputs: must be an array");
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o) {
        json_t *name = json_is_object(o) ? json_object_get(o, "name") : NULL;
        if (!tensor_json_name(name))
            return error_set(err, BG_EINVAL, "outputs[%zu].name: must be a string (without NUL)",
                             i);
        if (strcmp(json_string_value(name), m->output.name) != 0)
            return error_set(err, BG_EINVAL,
                             "outputs[%zu].name: model %s has no output \"%s\" (its output is "
                             "\"%s\")", i, m->name, json_string_value(name), m->output.name);
        /* A model has one output: a second entry names it again, and its
         * parameters would silently replace the first's. */
        if (i > 0)
            return error_set(err, BG_EINVAL, "outputs[%zu].name: \"%s\" is asked for twice",
                             i, m->output.name);
        json_t *params = json_object_get(o, "parameters");
        if (params) {
            char where[40];
            snprintf(where, sizeof where, "outputs[%zu].", i);
            if (!json_is_object(params))
                return error_set(err, BG_EINVAL, "%sparameters: must be an object", where);
            int rc = tensor_request_param_misplaced(params, where, err);
            if (rc)
                return rc;
            rc = tensor_get_bool_param(params, "binary_data", &out->binary_output, where, err);
            if (rc || (rc = tensor_shm_params(params, where, &out->output_shm, err)) ||
                (rc = tensor_decode_classification(m, params, where, out, err)))
                return rc;
            /* The region would have to hold strings whose lengths only
             * the answer knows: not served (Triton's clients do not ask). */
            if (out->output_shm.set && out->class_count)
                return error_set(err, BG_EINVAL, "%sparameters: classification and "
                                 "shared_memory_region on one output are not served: ask for "
                                 "the classes in the answer's body, or the tensor in the region",
                                 where);
            if (out->output_shm.set) {
                size_t need = (size_t)out->rows * (size_t)m->output.row_elems * sizeof(float);
                if (out->output_shm.byte_size < need)
                    return error_set(err, BG_EINVAL, "%sparameters.shared_memory_byte_size: "
                                     "%llu bytes is too small for the output (%d rows x %lld "
                                     "FP32 are %zu bytes)", where,
                                     (unsigned long long)out->output_shm.byte_size, out->rows,
                                     (long long)m->output.row_elems, need);
                if ((rc = tensor_shm_resolve(shm, &out->output_shm, where,
                                             &out->output_shm_bytes, err)))
                    return rc;
            }
            if ((rc = tensor_params_check(params, where, err)))
                return rc;
        }
    }
    return 0;
}

int tensor_decode_kserve(const struct model *model, const char *body, size_t len,
                         int64_t json_len, struct infer_request *out, struct error *err)
{
    return tensor_decode_kserve_shm(model, body, len, json_len, NULL, out, err);
}

int tensor_decode_kserve_shm(const struct model *model, const char *body, size_t len,
                             int64_t json_len, const struct tensor_shm_resolver *shm,
                             struct infer_request *out, struct error *err)
{
    memset(out, 0, sizeof *out);
    out->truncate = true;
    const char *bin = NULL;
    size_t bin_len = 0, jlen = len;
    if (json_len >= 0) {
        if ((size_t)json_len > len)
            return error_set(err, BG_EINVAL,
                             "Inference-Header-Content-Length: %lld is larger than the body (%zu "
                             "bytes)", (long long)json_len, len);
        jlen = (size_t)json_len;
        bin = body + jlen;
        bin_len = len - jlen;
    }
    if (jlen == 0 && len > 0)
        return error_set(err, BG_EINVAL, "Inference-Header-Content-Length: 0, but the JSON head "
                         "of a KServe v2 infer request is never empty (the header is its length "
                         "in bytes, the binary tensor data follow it)");
    if (jlen == 0)
        return error_set(err, BG_EINVAL, "empty body: expected a KServe v2 infer request");
    int bounded = tensor_json_bounded(&model->cfg, body, jlen, err);
    if (bounded)
        return bounded;
    json_error_t jerr;
    char at[48];
    json_t *root = json_loadb(body, jlen, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    /* Bytes after the JSON without the header: binary data sent without
     * saying where they start (jansson's "end of file expected"). */
    bool trailing = !root && json_len < 0 && strstr(jerr.text, "end of file expected");
    if (!root)
        return error_set(err, BG_EINVAL, "invalid JSON at %s: %s%s",
                         tensor_json_where(at, sizeof at, jerr.line, jerr.column), jerr.text,
                         trailing ? " (binary tensor data after the JSON need the "
                                    "Inference-Header-Content-Length header: the JSON's length)"
                                  : tensor_json_hint(body, jlen, &jerr));
    int rc = tensor_decode_kserve_head(model, root, bin, bin_len, shm, out, err);
    json_decref(root);
    return rc;
}

int tensor_decode_kserve_head(const struct model *model, json_t *root, const char *bin,
                              size_t bin_len, const struct tensor_shm_resolver *shm,
                              struct infer_request *out, struct error *err)
{
    const struct model_config *m = &model->cfg;
    memset(out, 0, sizeof *out);
    out->truncate = true;
    int rc = 0;
    if (!json_is_object(root)) {
        rc = error_set(err, BG_EINVAL, "the body must be a JSON object with \"inputs\"");
        goto out;
    }
    json_t *id = json_object_get(root, "id");
    if (id) {
        if (!tensor_json_name(id) || json_string_length(id) >= sizeof out->id) {
            rc = error_set(err, BG_EINVAL, "id: must be a string of at most %zu bytes, without "
                           "NUL", sizeof out->id - 1);
            goto out;
        }
        memcpy(out->id, json_string_value(id), json_string_length(id) + 1);
        out->has_id = true;
    }
    if ((rc = tensor_decode_request_params(json_object_get(root, "parameters"), out, err)))
        goto out;
    json_t *inputs = json_object_get(root, "inputs");
    if (!json_is_array(inputs) || json_array_size(inputs) == 0) {
        rc = error_set(err, BG_EINVAL, "inputs: must be a non-empty array");
        goto out;
    }
    if (json_array_size(inputs) != 1) {
        rc = error_set(err, BG_EINVAL, "inputs: model %s takes exactly one input (\"%s\"), got %zu",
                       m->name, m->input.name, json_array_size(inputs));
        goto out;
    }
    json_t *in0 = json_array_get(inputs, 0), *in0p = json_object_get(in0, "parameters");
    if ((rc = tensor_request_param_misplaced(in0p, "inputs[0].", err)))
        goto out;
    if ((rc = tensor_decode_input(model, in0, 0, &bin, &bin_len, shm, out, err)) ||
        (in0p && (rc = tensor_params_check(in0p, "inputs[0].", err))) ||
        (rc = tensor_decode_outputs(m, json_object_get(root, "outputs"), shm, out, err)))
        goto out;
    if (bin && bin_len != 0) {
        rc = error_set(err, BG_EINVAL, "%zu binary bytes after the JSON header belong to no input",
                       bin_len);
        goto out;
    }
out:
    if (rc) {
        free(out->input);
        out->input = NULL;
    }
    return rc;
}

/* ---- classification (Triton's extension) ---- */

/* Whether class a of the row v ranks before class b: the larger value
 * first, NaN after every number, equal values (and two NaNs) by index. A
 * total order, so the answer is the same whatever the selection does. */
static bool tensor_class_before(const float *v, uint32_t a, uint32_t b)
{
    bool na = isnan(v[a]), nb = isnan(v[b]);
    if (na != nb)
        return nb;
    if (!na && v[a] != v[b])
        return v[a] > v[b];
    return a < b;
}

/* h[0..n) is a heap whose root ranks last; restores it below i. */
static void tensor_class_sift(const float *v, uint32_t *h, size_t n, size_t i)
{
    for (;;) {
        size_t last = i, l = 2 * i + 1, r = l + 1;
        if (l < n && tensor_class_before(v, h[last], h[l]))
            last = l;
        if (r < n && tensor_class_before(v, h[last], h[r]))
            last = r;
        if (last == i)
            return;
        uint32_t t = h[i];
        h[i] = h[last];
        h[last] = t;
        i = last;
    }
}

/* The k classes of the row v[0..n) that rank first, in order, into top:
 * a heap of the best k seen so far, its worst at the root, so O(n log k)
 * and k indices of memory whatever the output's size. */
static void tensor_class_topk(const float *v, size_t n, size_t k, uint32_t *top)
{
    for (size_t i = 0; i < k; i++)
        top[i] = (uint32_t)i;
    for (size_t i = k / 2; i-- > 0;)
        tensor_class_sift(v, top, k, i);
    for (size_t i = k; i < n; i++)
        if (tensor_class_before(v, (uint32_t)i, top[0])) {
            top[0] = (uint32_t)i;
            tensor_class_sift(v, top, k, 0);
        }
    for (size_t m = k; m-- > 1;) {   /* the worst left goes to the end */
        uint32_t t = top[0];
        top[0] = top[m];
        top[m] = t;
        tensor_class_sift(v, top, m, 0);
    }
}

/* "value:index[:label]" of class i into el. */
static int tensor_class_string(struct buf *el, float value, uint32_t i, const struct labels *l)
{
    buf_reset(el);
    int rc = isnan(value) ? buf_appendf(el, "nan:%u", i)   /* glibc would print "-nan" for some */
                          : buf_appendf(el, "%f:%u", (double)value, i);
    size_t len;
    const char *label = labels_get(l, i, &len);
    if (rc < 0 || (len && (buf_append(el, ":", 1) < 0 || buf_append(el, label, len) < 0)))
        return -1;
    return 0;
}

/* The output's classes: "data":[...] strings, or (binary) their
 * length-prefixed bytes, which go in *bin. */
static int tensor_append_classes(const struct model *model, const struct infer_request *r,
                                 const float *output, struct buf *out, struct buf *bin)
{
    size_t n = (size_t)model->cfg.output.row_elems;
    size_t k = (size_t)r->class_count < n ? (size_t)r->class_count : n;
    uint32_t *top = malloc(k * sizeof *top);
    struct buf el = BUF_INIT;
    int rc = top ? 0 : -1;
    for (int row = 0; rc == 0 && row < r->rows; row++) {
        const float *v = output + (size_t)row * n;
        tensor_class_topk(v, n, k, top);
        for (size_t j = 0; rc == 0 && j < k; j++) {
            if (tensor_class_string(&el, v[top[j]], top[j], model->labels) < 0) {
                rc = -1;
            } else if (bin) {
                uint8_t len[4] = {(uint8_t)el.len, (uint8_t)(el.len >> 8),
                                  (uint8_t)(el.len >> 16), (uint8_t)(el.len >> 24)};
                rc = buf_append(bin, len, 4) < 0 || buf_append(bin, el.data, el.len) < 0 ? -1
                                                                                           : 0;
            } else {
                rc = (row || j ? buf_append(out, ",", 1) : 0) < 0 ||
                             json_append_string(out, el.data, el.len) < 0 ? -1 : 0;
            }
        }
    }
    buf_free(&el);
    free(top);
    return rc;
}

int tensor_encode_kserve(const struct model *model, int version, const struct infer_request *r,
                         const float *output, struct buf *out, int64_t *json_len)
{
    const struct model_config *m = &model->cfg;
    size_t count = (size_t)r->rows * (size_t)m->output.row_elems;
    buf_append(out, "{\"model_name\":", 14);
    json_append_string(out, m->name, strlen(m->name));
    buf_appendf(out, ",\"model_version\":\"%d\"", version > 0 ? version : 1);
    if (r->has_id) {
        buf_append(out, ",\"id\":", 6);
        json_append_string(out, r->id, strlen(r->id));
    }
    buf_append(out, ",\"outputs\":[{\"name\":", 20);
    json_append_string(out, m->output.name, strlen(m->output.name));
    if (r->class_count > 0) {
        int64_t k = r->class_count < m->output.row_elems ? r->class_count : m->output.row_elems;
        buf_appendf(out, ",\"datatype\":\"BYTES\",\"shape\":[%d,%lld]", r->rows, (long long)k);
        if (!r->binary_output) {
            *json_len = -1;
            buf_append(out, ",\"data\":[", 9);
            if (tensor_append_classes(model, r, output, out, NULL) < 0)
                return -1;
            return buf_append(out, "]}]}", 4);
        }
        struct buf bin = BUF_INIT;
        int rc = tensor_append_classes(model, r, output, out, &bin);
        if (rc == 0) {
            buf_appendf(out, ",\"parameters\":{\"binary_data_size\":%zu}}]}", bin.len);
            *json_len = (int64_t)out->len;
            rc = bin.len ? buf_append(out, bin.data, bin.len) : 0;
        }
        buf_free(&bin);
        return rc;
    }
    buf_appendf(out, ",\"datatype\":\"%s\",\"shape\":", m->output.datatype);
    tensor_append_shape(out, r->rows, &m->output);
    if (r->output_shm.set) {
        /* As Triton answers it: no data and no parameters. Triton's C++
         * client (perf_analyzer's) takes any output "parameters" to hold a
         * binary_data_size and fails without one; the client knows where
         * it asked the bytes to go. */
        *json_len = -1;
        return buf_append(out, "}]}", 3);
    }
    if (r->binary_output) {
        buf_appendf(out, ",\"parameters\":{\"binary_data_size\":%zu}}]}", count * sizeof(float));
        *json_len = (int64_t)out->len;
        return buf_append(out, output, count * sizeof(float));
    }
    *json_len = -1;
    buf_append(out, ",\"data\":[", 9);
    if (tensor_append_floats(out, output, count) < 0)
        return -1;
    return buf_append(out, "]}]}", 4);
}

/* TF Serving's rows carry their shape in their nesting: a row of a [2,3]
 * input is [[a,b,c],[d,e,f]]. Counted alone, its numbers took a 3x2 row
 * [[a,b],[c,d],[e,f]] for a 2x3 one (200, predictions of a scrambled
 * input) and ragged rows too. A row nests as the input's shape, or is one
 * flat list of its numbers (row-major: it cannot be misread) or a lone
 * number; what else it is, is said with where ("[1][0]", from idx[]). */
static int tensor_tfs_nesting(json_t *v, const struct model_tensor *in, int depth, size_t *idx,
                              const char *field, struct error *err)
{
    bool list = json_is_array(v);
    size_t n = list ? json_array_size(v) : 0;
    if (depth < in->ndims && list && (in->shape[depth] <= 0 || n == (size_t)in->shape[depth])) {
        for (size_t i = 0; i < n; i++) {
            idx[depth] = i;
            int rc = tensor_tfs_nesting(json_array_get(v, i), in, depth + 1, idx, field, err);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (depth == in->ndims && !list)
        return 0;
    /* Said with where, and the shape: made only now, not for every list. */
    char at[MODEL_MAX_DIMS * 24 + 1] = "", shape[160] = "[";
    for (int d = 0; d < depth; d++)
        snprintf(at + strlen(at), sizeof at - strlen(at), "[%zu]", idx[d]);
    for (int d = 0; d < in->ndims; d++)
        snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? "," : "",
                 (long long)in->shape[d]);
    strcat(shape, "]");
    if (depth == in->ndims)
        return error_set(err, BG_EINVAL, "%s%s: a list nested deeper than the row shape %s of "
                         "input \"%s\"", field, at, shape, in->name);
    if (!list)
        return error_set(err, BG_EINVAL, "%s%s: a number where the row shape %s of input \"%s\" "
                         "has a list of %lld (a row nests as the shape, or is one flat list of "
                         "%lld numbers)", field, at, shape, in->name, (long long)in->shape[depth],
                         (long long)in->row_elems);
    return error_set(err, BG_EINVAL, "%s%s: a list of %zu where the row shape %s of input "
                     "\"%s\" has %lld (a row nests as the shape, or is one flat list of "
                     "%lld numbers)", field, at, n, shape, in->name,
                     (long long)in->shape[depth], (long long)in->row_elems);
}

/* A row of a TF Serving request is well nested (tensor_tfs_nesting). */
static int tensor_tfs_row(json_t *row, const struct model_tensor *in, const char *field,
                          struct error *err)
{
    if (!json_is_array(row))
        return 0;   /* a lone number: counted by the caller */
    size_t i;
    json_t *e;
    bool flat = true;
    json_array_foreach(row, i, e) flat = flat && !json_is_array(e) && !json_is_object(e);
    if (flat)
        return 0;
    size_t idx[MODEL_MAX_DIMS];
    return tensor_tfs_nesting(row, in, 0, idx, field, err);
}

/* A row's form: what TF Serving reads as its shape. Every row of a request
 * has one form (TF Serving refuses rows of other shapes, and a list beside
 * an object; both were taken). */
static const char *const tensor_tfs_forms[] = {"a number", "a flat list", "a nested list"};
static int tensor_tfs_form(const json_t *row)
{
    if (!json_is_array(row))
        return 0;
    size_t i;
    json_t *e;
    json_array_foreach(row, i, e) if (json_is_array(e) || json_is_object(e)) return 2;
    return 1;
}

int tensor_decode_tfs(const struct model_config *m, const char *body, size_t len,
                      struct infer_request *out, struct error *err)
{
    memset(out, 0, sizeof *out);
    if (m->kind == MODEL_KIND_ENCODER)
        return error_set(err, BG_EINVAL, "model %s takes text: use KServe v2 (a BYTES input), "
                         "POST /v1/embeddings or POST /embed", m->name);
    int bounded = tensor_json_bounded(m, body, len, err);
    if (bounded)
        return bounded;
    json_error_t jerr;
    char at[48];
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return error_set(err, BG_EINVAL, "invalid JSON at %s: %s%s",
                         tensor_json_where(at, sizeof at, jerr.line, jerr.column), jerr.text,
                         tensor_json_hint(body, len, &jerr));
    int rc = 0;
    /* Row form ("instances") or columnar form ("inputs": the input's tensor,
     * batch first, or {"<input name>": tensor}); with one input and one
     * output the two differ only in how they are wrapped. */
    json_t *inst = json_is_object(root) ? json_object_get(root, "instances") : NULL;
    json_t *cols = json_is_object(root) ? json_object_get(root, "inputs") : NULL;
    json_t *sig = json_is_object(root) ? json_object_get(root, "signature_name") : NULL;
    const char *key = cols ? "inputs" : "instances";
    if (inst && cols) {
        rc = error_set(err, BG_EINVAL, "give one of \"instances\" (rows) or \"inputs\" "
                       "(columns), not both");
        goto out;
    }
    /* "" is the default signature, as in TF Serving. */
    if (sig && !(json_is_string(sig) && (strcmp(json_string_value(sig), "serving_default") == 0 ||
                                         json_string_value(sig)[0] == '\0'))) {
        rc = error_set(err, BG_EINVAL, "signature_name: model %s has only the signature "
                       "\"serving_default\"", m->name);
        goto out;
    }
    if (cols) {
        out->tfs_columnar = true;
        if (json_is_object(cols)) {
            /* The input by its name; other keys are not looked at, as TF
             * Serving looks up the signature's inputs alone (they were
             * 400). */
            json_t *v = json_object_get(cols, m->input.name);
            if (!v) {
                rc = error_set(err, BG_EINVAL, "inputs: missing the input \"%s\"",
                               m->input.name);
                goto out;
            }
            cols = v;
        }
        inst = cols;
    }
    if (!json_is_array(inst) || json_array_size(inst) == 0) {
        rc = cols ? error_set(err, BG_EINVAL, "inputs: must be a non-empty array, one row of "
                              "input \"%s\" per element", m->input.name)
                  : error_set(err, BG_EINVAL, "instances: must be a non-empty array of rows "
                              "(or give \"inputs\", the columnar form)");
        goto out;
    }
    size_t rows = json_array_size(inst);
    if (rows > (size_t)m->batching.max_batch_size) {
        rc = error_set(err, BG_EINVAL, "%s: %zu rows; model %s takes 1 to %d per request",
                       key, rows, m->name, m->batching.max_batch_size);
        goto out;
    }
    out->rows = (int)rows;
    size_t per = (size_t)m->input.row_elems;
    out->input = malloc(rows * per * sizeof(float));
    if (!out->input) {
        rc = error_set(err, BG_ENOMEM, "out of memory");
        goto out;
    }
    int form0 = -1;
    bool named0 = false;
    for (size_t i = 0; i < rows; i++) {
        json_t *row = json_array_get(inst, i);
        char field[48];
        snprintf(field, sizeof field, "%s[%zu]", key, i);
        bool named = !cols && json_is_object(row);
        int form = tensor_tfs_form(named ? json_object_get(row, m->input.name) : row);
        if (i == 0) {
            form0 = form;
            named0 = named;
        } else if (form != form0 || named != named0) {
            rc = error_set(err, BG_EINVAL, "%s: %s%s where %s[0] is %s%s: every row takes one "
                           "form, as TF Serving reads them", field,
                           named ? "an object of " : "", tensor_tfs_forms[form], key,
                           named0 ? "an object of " : "", tensor_tfs_forms[form0]);
            goto out;
        }
        if (named) {
            json_t *v = json_object_get(row, m->input.name);
            if (!v || json_object_size(row) != 1) {
                rc = error_set(err, BG_EINVAL, "%s: must hold exactly the input \"%s\"", field,
                               m->input.name);
                goto out;
            }
            row = v;
        }
        struct flat f = {out->input + i * per, 0, per, field, err};
        if ((rc = tensor_flatten(row, &f, 0)))
            goto out;
        if (f.n != per) {
            rc = error_set(err, BG_EINVAL, "%s: %zu numbers, but a row of input \"%s\" has %zu",
                           field, f.n, m->input.name, per);
            goto out;
        }
        if ((rc = tensor_tfs_row(row, &m->input, field, err)))
            goto out;
    }
out:
    json_decref(root);
    if (rc) {
        free(out->input);
        out->input = NULL;
    }
    return rc;
}

int tensor_encode_tfs(const struct model_config *m, const struct infer_request *r,
                      const float *output, struct buf *out)
{
    int64_t shape[MODEL_MAX_DIMS + 1];
    shape[0] = r->rows;
    for (int i = 0; i < m->output.ndims; i++)
        shape[i + 1] = m->output.shape[i];
    if (r->tfs_columnar)
        buf_append(out, "{\"outputs\":", 11);
    else
        buf_append(out, "{\"predictions\":", 15);
    const float *p = output;
    if (json_append_nested(out, &p, shape, m->output.ndims + 1, json_append_float_tfs) < 0)
        return -1;
    return buf_append(out, "}", 1);
}

/* fuzz_tensor_json.c - the infer request decoders of tensor_json.c: KServe v2
 * JSON, KServe v2 with the binary tensor extension, TF-Serving predict.
 *
 * Input layout: byte 0 picks the decoder (bits 0-1: JSON, binary, TF-Serving,
 * or all three) and the model (bits 2-3, one of `specs`); bytes 1-2 are the
 * Inference-Header-Content-Length for the binary decoder (little-endian;
 * 0xffff stands for "absent", which the gateway sends as -1); the rest is the
 * body.
 *
 * Beyond "no crash, no leak": a decoded request must hold rows within the
 * model's batch size and finite values, and what the encoders write for it
 * must be valid JSON (the JSON part of a binary answer included). A
 * classification answer (outputs[].parameters.classification) must hold
 * rows x k length-prefixed elements in its binary part; digits has labels,
 * with quotes and control characters, as the served one does. The output
 * the encoders see has ties and a NaN. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backends/labels.h"
#include "common/jsonfmt.h"
#include "serving/tensor_json.h"

struct spec {
    const char *name, *in, *out;
    int in_ndims, out_ndims;
    int64_t in_shape[3], out_shape[2];
    int max_batch;
};

/* digits as served, a 2-D input, a one-number model, a 3-D input. */
static const struct spec specs[4] = {
    {"digits", "input", "output", 1, 1, {64}, {10}, 64},
    {"m", "x", "y", 2, 1, {2, 3}, {2}, 4},
    {"one", "in", "out", 1, 1, {1}, {1}, 1},
    {"cube", "input", "output", 3, 2, {2, 2, 2}, {3, 1}, 8},
};

static void tensor_of(struct model_tensor *t, const char *name, int ndims, const int64_t *shape)
{
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->datatype, sizeof t->datatype, "FP32");
    t->ndims = ndims;
    t->row_elems = 1;
    for (int i = 0; i < ndims; i++) {
        t->shape[i] = shape[i];
        t->row_elems *= shape[i];
    }
}

static void model_of(const struct spec *s, struct model_config *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", s->name);
    tensor_of(&m->input, s->in, s->in_ndims, s->in_shape);
    tensor_of(&m->output, s->out, s->out_ndims, s->out_shape);
    m->batching.max_batch_size = s->max_batch;
}

static void must_be_json(const char *p, size_t n)
{
    json_error_t jerr;
    json_t *v = json_loadb(p, n, 0, &jerr);
    if (!v) {
        fprintf(stderr, "encoder wrote invalid JSON (%s): %.*s\n", jerr.text, (int)n, p);
        abort();
    }
    json_decref(v);
}

/* TF Serving's answers write a value that is not finite as its bare NaN
 * or Infinity, as TF Serving does (not JSON): JSON once those read as
 * null. */
static void must_be_tfs_json(const char *p, size_t n)
{
    struct buf b = BUF_INIT;
    if (json_nonfinite_to_null(p, n, &b) < 0)
        abort();
    must_be_json(b.data ? b.data : "", b.len);
    buf_free(&b);
}

/* digits' labels, made once (the harness keeps no other state). */
static struct labels *digits_labels(void)
{
    static struct labels *l;
    static const char text[] = "zero\n\"one\"\ntw\\o\r\nthr\tee\n\nfive\nsix:6\nseven\n"
                               "eight\nnine\nextra line\n";
    struct error err = {0};
    if (!l && labels_parse(text, sizeof text - 1, "fuzz", 10, &l, &err) != 0)
        abort();
    return l;
}

/* The binary part of a classification answer: rows x k elements, each a
 * 4-byte length and its bytes, nothing after. */
static void check_classes(const struct infer_request *r, const struct model_config *m,
                          const char *p, size_t n)
{
    int64_t k = r->class_count;
    if (k < 1 || k > m->output.row_elems)
        abort();
    for (int64_t e = 0; e < (int64_t)r->rows * k; e++) {
        if (n < 4)
            abort();
        uint32_t len = (uint32_t)(uint8_t)p[0] | (uint32_t)(uint8_t)p[1] << 8 |
                       (uint32_t)(uint8_t)p[2] << 16 | (uint32_t)(uint8_t)p[3] << 24;
        if (len < 3 || len > n - 4)   /* at least "v:i" */
            abort();
        p += 4 + len;
        n -= 4 + len;
    }
    if (n != 0)
        abort();
}

/* A decoded request is sane, and its answer encodes to valid JSON. */
static void check_decoded(const struct model *mm, const struct infer_request *r,
                          bool json_only)
{
    const struct model_config *m = &mm->cfg;
    if (r->rows < 1 || r->rows > m->batching.max_batch_size || !r->input)
        abort();
    size_t n = (size_t)r->rows * (size_t)m->input.row_elems;
    for (size_t i = 0; i < n; i++)
        if (json_only && !isfinite(r->input[i]))
            abort();   /* JSON numbers in FP32 range; only raw binary bytes can be NaN */
    size_t on = (size_t)r->rows * (size_t)m->output.row_elems;
    float *output = calloc(on ? on : 1, sizeof *output);
    if (!output)
        abort();
    for (size_t i = 0; i < on; i++)
        output[i] = (float)(i % 4) * 0.5f - 1.0f;
    if (on > 1)
        output[1] = NAN;
    struct buf out = BUF_INIT;
    int64_t json_len = -1;
    if (tensor_encode_kserve(mm, 1, r, output, &out, &json_len) < 0)
        abort();
    if (r->binary_output && r->class_count) {
        if (json_len < 0 || (size_t)json_len > out.len)
            abort();
        must_be_json(out.data, (size_t)json_len);
        check_classes(r, m, out.data + json_len, out.len - (size_t)json_len);
    } else if (r->binary_output) {
        if (json_len < 0 || (size_t)json_len + on * sizeof(float) != out.len)
            abort();
        must_be_json(out.data, (size_t)json_len);
    } else {
        must_be_json(out.data, out.len);
    }
    buf_reset(&out);
    if (tensor_encode_tfs(m, r, output, &out) < 0)
        abort();
    must_be_tfs_json(out.data, out.len);
    buf_free(&out);
    free(output);
}

static void run_kserve(const struct model_config *m, const char *body, size_t len,
                       int64_t json_len)
{
    struct infer_request r;
    struct error err = {0};
    static struct model mm;   /* the decoder takes a model; a config is all these have */
    mm.cfg = *m;
    mm.labels = strcmp(m->name, "digits") == 0 ? digits_labels() : NULL;
    int rc = tensor_decode_kserve(&mm, body, len, json_len, &r, &err);
    if (rc == 0)
        check_decoded(&mm, &r, json_len < 0);
    else if (r.input || err.code == 0 || !err.msg[0])
        abort();   /* an error frees the rows and says why */
    free(r.input);
}

static void run_tfs(const struct model_config *m, const char *body, size_t len)
{
    struct infer_request r;
    struct error err = {0};
    static struct model mm;
    mm.cfg = *m;
    int rc = tensor_decode_tfs(m, body, len, &r, &err);
    if (rc == 0)
        check_decoded(&mm, &r, true);
    else if (r.input || err.code == 0 || !err.msg[0])
        abort();
    free(r.input);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    struct model_config m;
    model_of(&specs[(data[0] >> 2) & 3], &m);
    unsigned hlen = data[1] | (unsigned)data[2] << 8;
    int64_t json_len = hlen == 0xffff ? -1 : (int64_t)hlen;
    const char *body = (const char *)data + 3;
    size_t len = size - 3;
    switch (data[0] & 3) {
    case 0: run_kserve(&m, body, len, -1); break;
    case 1: run_kserve(&m, body, len, json_len); break;
    case 2: run_tfs(&m, body, len); break;
    default:
        run_kserve(&m, body, len, -1);
        run_kserve(&m, body, len, json_len);
        run_tfs(&m, body, len);
        break;
    }
    return 0;
}

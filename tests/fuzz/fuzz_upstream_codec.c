/* fuzz_upstream_codec.c - a model server's answer to one batch of the
 * upstream backend (backends/upstream_codec.c): upstream_codec_answer on a
 * KServe v2 or TF-Serving body, and the same bytes as an error body
 * (upstream_codec_error) and a TF Serving model status
 * (upstream_codec_tfs_available).
 *
 * Input layout: byte 0 bits 0-1 pick the model's output (y [2]; probs [10];
 * out [1]; logits [2,3]), bit 2 the protocol (0 KServe v2, 1 TF Serving),
 * bits 3-5 the rows of the batch (1 to 8); byte 1 the size of the message
 * buffers (1 to 256); the rest is the body.
 *
 * Beyond "no crash, no leak" (the output rows and the message buffers are
 * exact-size heap blocks: a write past either is caught): an answer read
 * wrote every one of rows x row_elems values (none is left as the harness's
 * marker; each is a number, or NaN for null and TF Serving's bare NaN and
 * Infinity: upstream_codec.h), and is strict: the same body for one row
 * more or one fewer, or for an output one value wider per row, fails (a
 * value too many or too few would hand one client's numbers to another);
 * a failure says why, "malformed answer..." cut to the buffer and
 * terminated in it; reading twice gives the same values and message; the
 * error text is printable ASCII terminated within its buffer; a model
 * status that is not AVAILABLE says why within its buffer. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/upstream_codec.h"

/* A float's bits no reader writes: a NaN with a payload of its own. */
#define MARK 0x7fa5a5a5u

static void model(struct model_config *m, int which, enum upstream_protocol p, int wider)
{
    static const struct {
        const char *name;
        int ndims;
        int64_t shape[2];
    } out[4] = {{"y", 1, {2, 0}}, {"probs", 1, {10, 0}}, {"out", 1, {1, 0}},
                {"logits", 2, {2, 3}}};
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "m");
    snprintf(m->input.name, sizeof m->input.name, "x");
    snprintf(m->input.datatype, sizeof m->input.datatype, "FP32");
    m->input.ndims = 1;
    m->input.shape[0] = 4;
    m->input.row_elems = 4;
    snprintf(m->output.name, sizeof m->output.name, "%s", out[which].name);
    snprintf(m->output.datatype, sizeof m->output.datatype, "FP32");
    m->output.ndims = out[which].ndims;
    m->output.row_elems = 1;
    for (int i = 0; i < m->output.ndims; i++) {
        m->output.shape[i] = out[which].shape[i] + (i == m->output.ndims - 1 ? wider : 0);
        m->output.row_elems *= m->output.shape[i];
    }
    m->backend = MODEL_BACKEND_UPSTREAM;
    m->upstream.protocol = p;
}

static bool terminated(const char *s, size_t cap)
{
    return memchr(s, '\0', cap) != NULL;
}

/* upstream_codec_answer into an exact-size output; returns its rc, the
 * values in *vals (malloc'ed, n of them) and the message in why. */
static int answer(const struct model_config *m, const uint8_t *body, size_t len, int rows,
                  float **vals, size_t *n, char *why, size_t cap)
{
    *n = (size_t)rows * (size_t)m->output.row_elems;
    float *out = malloc(*n * sizeof *out);
    if (!out)
        abort();
    for (size_t i = 0; i < *n; i++) {
        uint32_t mark = MARK;
        memcpy(&out[i], &mark, sizeof mark);
    }
    memset(why, 0x55, cap);
    int rc = upstream_codec_answer(m, (const char *)body, len, rows, out, why, cap);
    if (rc != 0 && rc != -1)
        abort();
    if (rc == 0) {
        for (size_t i = 0; i < *n; i++) {
            uint32_t bits;
            memcpy(&bits, &out[i], sizeof bits);
            if (bits == MARK)
                abort();   /* a value the answer did not give */
        }
    } else {
        static const char lead[] = "malformed answer";
        size_t k = sizeof lead - 1 < cap - 1 ? sizeof lead - 1 : cap - 1;
        if (!terminated(why, cap) || strncmp(why, lead, k) != 0)
            abort();
    }
    *vals = out;
    return rc;
}

static void strict(const struct model_config *m, const uint8_t *body, size_t len, int rows,
                   char *why, size_t cap)
{
    float *v;
    size_t n;
    if (answer(m, body, len, rows + 1, &v, &n, why, cap) == 0)
        abort();
    free(v);
    if (rows > 1) {
        if (answer(m, body, len, rows - 1, &v, &n, why, cap) == 0)
            abort();
        free(v);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int which = data[0] & 3;
    enum upstream_protocol proto = (data[0] & 4) ? UPSTREAM_TFSERVING : UPSTREAM_KSERVE_V2;
    int rows = (data[0] >> 3 & 7) + 1;
    size_t cap = (size_t)data[1] + 1;
    data += 2;
    size -= 2;

    struct model_config *m = malloc(sizeof *m);   /* 10 KiB: off the stack */
    char *why = malloc(cap), *why2 = malloc(cap);
    if (!m || !why || !why2)
        abort();
    model(m, which, proto, 0);
    float *a, *b;
    size_t n;
    int rc = answer(m, data, size, rows, &a, &n, why, cap);
    if (answer(m, data, size, rows, &b, &n, why2, cap) != rc)
        abort();
    if (rc == 0 ? memcmp(a, b, n * sizeof *a) != 0 : strcmp(why, why2) != 0)
        abort();
    free(a);
    free(b);
    if (rc == 0) {
        strict(m, data, size, rows, why, cap);
        model(m, which, proto, 1);
        if (answer(m, data, size, rows, &a, &n, why, cap) == 0)
            abort();
        free(a);
    }

    /* The same bytes as an error body: printable ASCII within cap. */
    memset(why, 0x55, cap);
    upstream_codec_error((const char *)data, size, why, cap);
    if (!terminated(why, cap))
        abort();
    for (const char *p = why; *p; p++)
        if (*p < 0x20 || *p >= 0x7f)
            abort();

    /* And as a TF Serving model status. */
    memset(why, 0x55, cap);
    if (!upstream_codec_tfs_available((const char *)data, size, why, cap) &&
        (!terminated(why, cap) || (cap > 1 && !why[0])))
        abort();

    free(m);
    free(why);
    free(why2);
    return 0;
}

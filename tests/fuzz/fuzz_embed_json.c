/* fuzz_embed_json.c - what an encoder model takes from the network: OpenAI's
 * /v1/embeddings and TEI's /embed bodies (serving/embed_json.c), KServe v2's
 * BYTES input as JSON strings and as the binary extension's length-prefixed
 * elements (serving/tensor_json.c), each text through the WordPiece
 * tokenizer (backends/wordpiece*.c, the hand-written fixture of
 * tests/data/wordpiece), and a body's Content-Encoding (http/decode.c).
 *
 * Input layout: byte 0 picks the path (bits 0-2: OpenAI, TEI, KServe JSON,
 * KServe binary, the model name of an OpenAI body, an inflated body) and
 * max_seq_length (bits 3-5: 2 to 9); bytes 1-2 the binary header length;
 * the rest is the body.
 *
 * Beyond "no crash, no leak": decoded rows hold 1 to max_seq_length ids,
 * each in the vocabulary, tokens add up, and the answers are valid JSON. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "backends/encoder.h"
#include "backends/wordpiece.h"
#include "common/buf.h"
#include "http/http.h"
#include "serving/embed_json.h"
#include "serving/tensor_json.h"

#ifndef FUZZ_TOKENIZER
#error "FUZZ_TOKENIZER: the path of tests/data/wordpiece/tokenizer.json"
#endif

#define HIDDEN 4
#define VOCAB 38

static struct model *fuzz_model(int max_seq)
{
    static struct model m;
    if (!m.tokenizer) {
        struct error err = {0};
        if (wordpiece_load(FUZZ_TOKENIZER, &m.tokenizer, &err) != 0) {
            fprintf(stderr, "fuzz_embed_json: %s\n", err.msg);
            abort();
        }
        struct model_config *c = &m.cfg;
        snprintf(c->name, sizeof c->name, "enc");
        c->kind = MODEL_KIND_ENCODER;
        c->encoder.hidden = HIDDEN;
        c->encoder.vocab = VOCAB;
        snprintf(c->input.name, sizeof c->input.name, "text");
        snprintf(c->input.datatype, sizeof c->input.datatype, "BYTES");
        c->input.ndims = 1;
        c->input.shape[0] = 1;
        snprintf(c->output.name, sizeof c->output.name, "embedding");
        snprintf(c->output.datatype, sizeof c->output.datatype, "FP32");
        c->output.ndims = 1;
        c->output.shape[0] = HIDDEN;
        c->output.row_elems = HIDDEN;
        c->batching.max_batch_size = 4;
    }
    m.cfg.encoder.max_seq_length = max_seq;
    m.cfg.input.row_elems = 1 + max_seq;
    return &m;
}

static void must_be_json(const char *p, size_t n)
{
    json_error_t jerr;
    json_t *v = json_loadb(p, n, 0, &jerr);
    if (!v) {
        fprintf(stderr, "wrote invalid JSON (%s): %.*s\n", jerr.text, (int)n, p);
        abort();
    }
    json_decref(v);
}

/* The rows are what the backends may trust. */
static void check_rows(const struct model *m, const struct infer_request *r)
{
    if (r->rows < 1 || r->rows > m->cfg.batching.max_batch_size || !r->input)
        abort();
    int64_t sum = 0;
    for (int i = 0; i < r->rows; i++) {
        const float *row = r->input + (size_t)i * (size_t)m->cfg.input.row_elems;
        int n = encoder_row_tokens(row);
        if (n < 1 || n > m->cfg.encoder.max_seq_length)
            abort();
        for (int k = 0; k < n; k++)
            if (!(row[1 + k] >= 0 && row[1 + k] < VOCAB) || row[1 + k] != (float)(int)row[1 + k])
                abort();
        sum += n;
    }
    if (sum != r->tokens)
        abort();
}

static void run_embed(struct model *m, enum embed_api api, const char *body, size_t len)
{
    struct infer_request r;
    struct embed_request e;
    struct error err = {0};
    if (embed_decode(m, api, body, len, &r, &e, &err) != 0) {
        if (r.input || err.code == 0 || !err.msg[0])
            abort();
        return;
    }
    check_rows(m, &r);
    float *out = calloc((size_t)r.rows * HIDDEN, sizeof *out);
    if (!out)
        abort();
    for (int i = 0; i < r.rows * HIDDEN; i++)
        out[i] = (float)i - 1.5f;
    struct buf b = BUF_INIT;
    if (embed_encode(&m->cfg, &e, &r, out, &b) < 0)
        abort();
    must_be_json(b.data, b.len);
    buf_free(&b);
    free(out);
    free(r.input);
}

static void run_kserve(struct model *m, const char *body, size_t len, int64_t json_len)
{
    struct infer_request r;
    struct error err = {0};
    if (tensor_decode_kserve(m, body, len, json_len, &r, &err) != 0) {
        if (r.input || err.code == 0 || !err.msg[0])
            abort();
        return;
    }
    check_rows(m, &r);
    free(r.input);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    struct model *m = fuzz_model(2 + ((data[0] >> 3) & 7));
    unsigned hlen = data[1] | (unsigned)data[2] << 8;
    const char *body = (const char *)data + 3;
    size_t len = size - 3;
    switch (data[0] & 7) {
    case 0: run_embed(m, EMBED_OPENAI, body, len); break;
    case 1: run_embed(m, EMBED_TEI, body, len); break;
    case 2: run_kserve(m, body, len, -1); break;
    case 3: run_kserve(m, body, len, hlen == 0xffff ? -1 : (int64_t)hlen); break;
    case 4: {
        char name[16], param[16];
        struct error err = {0};
        if (embed_openai_model(body, len, name, sizeof name, param, sizeof param, &err) == 0 &&
            strlen(name) == 0)
            abort();
        break;
    }
    default: {
        /* The encoding named by the first bytes (up to a NUL), the rest inflated. */
        const char *nul = memchr(body, 0, len < 16 ? len : 16);
        size_t el = nul ? (size_t)(nul - body) : 0;
        struct buf out = BUF_INIT;
        char msg[256];
        size_t max = 1 + (hlen & 0x3fff) * 64;
        int st = http_body_decode(body, el, body + el, len - el, max, &out, msg, sizeof msg);
        if (st == 0 ? out.len > max : (out.len != 0 || !msg[0]))
            abort();
        buf_free(&out);
        break;
    }
    }
    return 0;
}

/* test_embed_json.c - serving/embed_json (OpenAI's and TEI's embeddings
 * bodies) and backends/encoder (text rows) on the hand-written tokenizer
 * of tests/data/wordpiece: every decode error with its status and field,
 * truncation, token-id inputs, and the answers' shapes (base64 included).
 * The forward pass itself is tests/e2e/test_embeddings.py's. */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/encoder.h"
#include "backends/wordpiece.h"
#include "common/jsonfmt.h"
#include "serving/embed_json.h"
#include "serving/tensor_json.h"

static struct model *the_model(void)
{
    static struct model m;
    static bool loaded;
    if (!loaded) {
        const char *slash = strrchr(__FILE__, '/');
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%.*s/../data/wordpiece/tokenizer.json",
                 slash ? (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".");
        struct error err = {0};
        if (wordpiece_load(path, &m.tokenizer, &err) != 0)
            fail_msg("%s", err.msg);
        struct model_config *c = &m.cfg;
        snprintf(c->name, sizeof c->name, "enc");
        c->kind = MODEL_KIND_ENCODER;
        c->encoder.hidden = 4;
        c->encoder.vocab = 38;
        c->encoder.max_seq_length = 6;
        c->encoder.normalize = true;
        snprintf(c->input.name, sizeof c->input.name, "text");
        snprintf(c->input.datatype, sizeof c->input.datatype, "BYTES");
        c->input.ndims = 1;
        c->input.shape[0] = 1;
        c->input.row_elems = 1 + 6;
        snprintf(c->output.name, sizeof c->output.name, "embedding");
        snprintf(c->output.datatype, sizeof c->output.datatype, "FP32");
        c->output.ndims = 1;
        c->output.shape[0] = 4;
        c->output.row_elems = 4;
        c->batching.max_batch_size = 3;
        loaded = true;
    }
    return &m;
}

/* A shared-memory resolver whose region is the bytes at ctx. */
static int region_resolve(void *ctx, const struct tensor_shm *ref, const char *what, void **bytes,
                          struct error *err)
{
    (void)ref;
    (void)what;
    (void)err;
    *bytes = ctx;
    return 0;
}

static int decode(enum embed_api api, const char *body, struct infer_request *r,
                  struct embed_request *e, struct error *err)
{
    return embed_decode(the_model(), api, body, strlen(body), r, e, err);
}

/* The rows of r as "n: id id ..." lines. */
static void rows_text(const struct infer_request *r, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < r->rows; i++) {
        const float *row = r->input + (size_t)i * 7;
        o += (size_t)snprintf(out + o, cap - o, "%s%d:", i ? " | " : "", encoder_row_tokens(row));
        for (int k = 0; k < encoder_row_tokens(row); k++)
            o += (size_t)snprintf(out + o, cap - o, " %d", (int)row[1 + k]);
    }
}

static void test_inputs(void **state)
{
    (void)state;
    struct infer_request r;
    struct embed_request e;
    struct error err = {0};
    char s[256];
    /* One string, a list, token ids, lists of ids: hello=5 world=6 ,=7 !=8 */
    assert_int_equal(decode(EMBED_OPENAI, "{\"model\":\"enc\",\"input\":\"hello world\"}", &r, &e,
                            &err), 0);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "4: 2 5 6 3");
    assert_int_equal(r.tokens, 4);
    assert_true(e.normalize);
    assert_false(e.base64);
    free(r.input);
    assert_int_equal(decode(EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[\"hello\",\"\"],"
                                          "\"encoding_format\":\"base64\"}", &r, &e, &err), 0);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "3: 2 5 3 | 2: 2 3");
    assert_int_equal(r.tokens, 5);
    assert_true(e.base64);
    free(r.input);
    assert_int_equal(decode(EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[2,5,3]}", &r, &e, &err), 0);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "3: 2 5 3");
    free(r.input);
    /* null is omitted, as OpenAI's API takes it. */
    assert_int_equal(decode(EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[[2,5,3],[6]],"
                                          "\"encoding_format\":null,\"truncate\":null,"
                                          "\"dimensions\":null}", &r, &e, &err), 0);
    assert_false(e.base64);
    free(r.input);
    assert_int_equal(decode(EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[[2,5,3],[6]],"
                                          "\"dimensions\":4}", &r, &e, &err), 0);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "3: 2 5 3 | 1: 6");
    free(r.input);
    /* Cut at max_seq_length (6): [CLS] 4 tokens [SEP]; ids keep their last. */
    assert_int_equal(decode(EMBED_OPENAI, "{\"model\":\"enc\",\"input\":\"hello world hello "
                                          "world hello\"}", &r, &e, &err), 0);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "6: 2 5 6 5 6 3");
    free(r.input);
    assert_int_equal(decode(EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[2,5,6,5,6,5,6,3]}", &r,
                            &e, &err), 0);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "6: 2 5 6 5 6 3");
    free(r.input);
    /* TEI: normalize is the request's, default true. */
    assert_int_equal(decode(EMBED_TEI, "{\"inputs\":[\"world\"],\"normalize\":false}", &r, &e,
                            &err), 0);
    assert_false(e.normalize);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "3: 2 6 3");
    free(r.input);
}

static void test_errors(void **state)
{
    (void)state;
    static const struct {
        enum embed_api api;
        const char *body;
        int code;
        const char *param, *msg;
    } cases[] = {
        {EMBED_OPENAI, "{\"model\":\"enc\"", -BG_EINVAL, "", "invalid JSON"},
        {EMBED_OPENAI, "[1]", -BG_EINVAL, "", "must be a JSON object with \"input\""},
        {EMBED_OPENAI, "{\"model\":\"enc\"}", -BG_EINVAL, "input", "input: missing"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[]}", -BG_EINVAL, "input",
         "a string, an array of strings, an array of token ids"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":5}", -BG_EINVAL, "input", "input: must be"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[\"a\",\"b\",\"a\",\"b\"]}", -BG_EINVAL,
         "input", "4 inputs; model enc takes 1 to 3 per request"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[\"a\",7]}", -BG_EINVAL, "input",
         "input[1]: must be a string or an array of token ids"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[[2,\"x\"]]}", -BG_EINVAL, "input",
         "input[0]: element 1 is not a token id"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[[2,38]]}", -BG_EINVAL, "input",
         "input[0]: token id 38 (at 1) is outside the model's vocabulary (0 to 37)"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[[]]}", -BG_EINVAL, "input",
         "input[0]: an empty list of token ids"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":\"a\",\"encoding_format\":\"int8\"}",
         -BG_EINVAL, "encoding_format", "must be \"float\" or \"base64\""},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":\"a\",\"dimensions\":3}", -BG_EINVAL,
         "dimensions", "gives 4 dimensions and does not shorten them"},
        /* A string: its type is what is wrong (it said "send 4" to "4"). */
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":\"a\",\"dimensions\":\"4\"}", -BG_EINVAL,
         "dimensions", "dimensions: must be an integer"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":\"a\",\"truncate\":1}", -BG_EINVAL,
         "truncate", "truncate: must be true or false"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":\"hello world hello world hello\","
                       "\"truncate\":false}", -BG_ETOOLONG, "input",
         "input[0]: input of 7 tokens is longer than the model's maximum of 6"},
        {EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[2,5,6,5,6,5,6,3],\"truncate\":false}",
         -BG_ETOOLONG, "input", "input of 8 tokens is longer than the model's maximum of 6"},
        {EMBED_TEI, "{\"inputs\":[[2,5]]}", -BG_EINVAL, "inputs", "inputs[0]: must be a string"},
        {EMBED_TEI, "{\"inputs\":\"a\",\"normalize\":\"yes\"}", -BG_EINVAL, "normalize",
         "normalize: must be true or false"},
        {EMBED_TEI, "{}", -BG_EINVAL, "inputs", "inputs: missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct infer_request r;
        struct embed_request e;
        struct error err = {0};
        int rc = decode(cases[i].api, cases[i].body, &r, &e, &err);
        if (rc != cases[i].code || !strstr(err.msg, cases[i].msg) ||
            strcmp(e.param, cases[i].param) != 0)
            fail_msg("%s: got %d \"%s\" (param \"%s\"), want %d \"...%s...\" (param \"%s\")",
                     cases[i].body, rc, err.msg, e.param, cases[i].code, cases[i].msg,
                     cases[i].param);
        assert_null(r.input);
    }
    /* Invalid UTF-8 reaches the tokenizer only through KServe's binary
     * form (JSON cannot carry it); the model's name, first. */
    char name[16], param[16];
    struct error err = {0};
    assert_int_equal(embed_openai_model("{\"model\":\"\"}", 12, name, sizeof name, param,
                                        sizeof param, &err), -BG_EINVAL);
    assert_string_equal(param, "model");
    assert_int_equal(embed_openai_model("{\"input\":\"a\"}", 13, name, sizeof name, param,
                                        sizeof param, &err), -BG_EINVAL);
    static const char nul[] = "{\"model\":\"enc\\u0000zzz\"}";   /* not "enc" */
    assert_int_equal(embed_openai_model(nul, sizeof nul - 1, name, sizeof name, param,
                                        sizeof param, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "without NUL"));
    assert_int_equal(embed_openai_model("{\"model\":", 9, name, sizeof name, param,
                                        sizeof param, &err), -BG_EINVAL);
    assert_string_equal(param, "");
    assert_non_null(strstr(err.msg, "invalid JSON"));
    assert_int_equal(embed_openai_model("{\"model\":\"enc\"}", 15, name, sizeof name, param,
                                        sizeof param, &err), 0);
    assert_string_equal(name, "enc");
    /* A model that is not an encoder. */
    struct model dense = {0};
    snprintf(dense.cfg.name, sizeof dense.cfg.name, "digits");
    snprintf(dense.cfg.input.datatype, sizeof dense.cfg.input.datatype, "FP32");
    struct infer_request r;
    struct embed_request e;
    assert_int_equal(embed_decode(&dense, EMBED_OPENAI, "{}", 2, &r, &e, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "model digits is not an embedding model"));
    assert_string_equal(e.param, "model");
    /* Far more values than any request the model takes: refused before
     * the body is parsed (each value a parsed node), and before the model
     * is known past any body's bound. */
    struct buf big = BUF_INIT;
    buf_appendf(&big, "{\"model\":\"enc\",\"input\":[[");
    for (int i = 0; i < 300000; i++)
        buf_append(&big, i ? ",1" : "1", i ? 2 : 1);
    buf_append(&big, "]]}", 3);
    assert_int_equal(embed_decode(the_model(), EMBED_OPENAI, big.data, big.len, &r, &e, &err),
                     -BG_EINVAL);
    if (!strstr(err.msg, "JSON values; model enc takes at most"))
        fail_msg("%s", err.msg);
    assert_string_equal(e.param, "input");
    buf_reset(&big);
    buf_appendf(&big, "{\"model\":\"enc\",\"input\":[");
    for (int i = 0; i < (int)JSON_VALUES_ANY + 10; i++)
        buf_append(&big, i ? ",1" : "1", i ? 2 : 1);
    buf_append(&big, "]}", 2);
    assert_int_equal(embed_openai_model(big.data, big.len, name, sizeof name, param,
                                        sizeof param, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "refused before it is read"));
    buf_free(&big);
}

/* A buf holds no terminating NUL. */
static void assert_buf(const struct buf *b, const char *want)
{
    if (b->len != strlen(want) || memcmp(b->data, want, b->len) != 0)
        fail_msg("got %.*s, want %s", (int)b->len, b->data, want);
}

static void test_answers(void **state)
{
    (void)state;
    struct infer_request r;
    struct embed_request e;
    struct error err = {0};
    assert_int_equal(decode(EMBED_OPENAI, "{\"model\":\"enc\",\"input\":[\"hello\",\"world\"]}",
                            &r, &e, &err), 0);
    const float out[8] = {1, 0, 0, 0, 0.5f, -0.5f, 0.25f, 0};
    struct buf b = BUF_INIT;
    assert_int_equal(embed_encode(&the_model()->cfg, &e, &r, out, &b), 0);
    assert_buf(&b, "{\"object\":\"list\",\"data\":[{\"object\":\"embedding\",\"index\":0,"
                                "\"embedding\":[1,0,0,0]},{\"object\":\"embedding\",\"index\":1,"
                                "\"embedding\":[0.5,-0.5,0.25,0]}],\"model\":\"enc\",\"usage\":"
                                "{\"prompt_tokens\":6,\"total_tokens\":6}}");
    buf_free(&b);
    /* base64 of the little-endian floats: 1.0f is 00 00 80 3f. */
    e.base64 = true;
    r.rows = 1;
    assert_int_equal(embed_encode(&the_model()->cfg, &e, &r, out, &b), 0);
    assert_non_null(memmem(b.data, b.len, "\"embedding\":\"AACAPwAAAAAAAAAAAAAAAA==\"", 38));
    buf_free(&b);
    e.api = EMBED_TEI;
    r.rows = 2;
    assert_int_equal(embed_encode(&the_model()->cfg, &e, &r, out, &b), 0);
    assert_buf(&b, "[[1,0,0,0],[0.5,-0.5,0.25,0]]");
    buf_free(&b);
    free(r.input);
    /* The normalization the front ends apply. */
    float v[4] = {3, 4, 0, 0};
    encoder_output_normalize(v, 1, 4);
    assert_float_equal(v[0], 0.6f, 1e-7);
    assert_float_equal(v[1], 0.8f, 1e-7);
}

/* KServe v2's BYTES input: JSON strings, [rows] or [rows, 1], and the
 * binary extension's length-prefixed elements, every bound checked. */
static void test_kserve_text(void **state)
{
    (void)state;
    const struct model *m = the_model();
    struct infer_request r;
    struct error err = {0};
    char s[256];
    const char *json = "{\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[2,1],"
                       "\"data\":[[\"hello\"],[\"world !\"]]}]}";
    assert_int_equal(tensor_decode_kserve(m, json, strlen(json), -1, &r, &err), 0);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "3: 2 5 3 | 4: 2 6 8 3");
    assert_int_equal(r.tokens, 7);
    free(r.input);
    json = "{\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":"
           "[\"hello world hello world hello\"]}],\"parameters\":{\"truncate\":false}}";
    assert_int_equal(tensor_decode_kserve(m, json, strlen(json), -1, &r, &err), -BG_ETOOLONG);
    assert_non_null(strstr(err.msg, "inputs[0].data[0]: input of 7 tokens"));
    json = "{\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[2],\"data\":"
           "[\"a\"]}]}";
    assert_int_equal(tensor_decode_kserve(m, json, strlen(json), -1, &r, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "must be an array of 2 strings"));
    json = "{\"inputs\":[{\"name\":\"text\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[1]}]}";
    assert_int_equal(tensor_decode_kserve(m, json, strlen(json), -1, &r, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "\"FP32\" does not match the model's \"BYTES\""));
    /* Binary: "hello", "a!" */
    const char hdr[] = "{\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\",\"shape\":[2,1],"
                       "\"parameters\":{\"binary_data_size\":15}}]}";
    char body[256];
    size_t hl = strlen(hdr);
    memcpy(body, hdr, hl);
    memcpy(body + hl, "\x05\x00\x00\x00hello\x02\x00\x00\x00" "a!", 15);
    assert_int_equal(tensor_decode_kserve(m, body, hl + 15, (int64_t)hl, &r, &err), 0);
    rows_text(&r, s, sizeof s);
    assert_string_equal(s, "3: 2 5 3 | 4: 2 15 8 3");
    free(r.input);
    /* An element's length past the end, a missing length, bytes left over,
     * invalid UTF-8. */
    static const struct {
        const char *bytes;
        size_t n, size;
        const char *msg;
    } bad[] = {
        {"\x05\x00\x00\x00hello\x09\x00\x00\x00" "a!", 15, 15, "element 1 says 9 bytes, only 2"},
        {"\x05\x00\x00\x00hello\x02\x00", 11, 11, "element 1's 4-byte length is missing"},
        {"\x01\x00\x00\x00h\x01\x00\x00\x00hxx", 12, 12, "2 bytes after the 2 elements"},
        {"\x01\x00\x00\x00h\x01\x00\x00\x00\xff", 10, 10, "data[1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char h2[256];
        int n2 = snprintf(h2, sizeof h2, "{\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\","
                          "\"shape\":[2,1],\"parameters\":{\"binary_data_size\":%zu}}]}", bad[i].size);
        memcpy(body, h2, (size_t)n2);
        memcpy(body + n2, bad[i].bytes, bad[i].n);
        int rc = tensor_decode_kserve(m, body, (size_t)n2 + bad[i].n, n2, &r, &err);
        if (rc != -BG_EINVAL || !strstr(err.msg, bad[i].msg))
            fail_msg("case %zu: %d \"%s\", want \"%s\"", i, rc, err.msg, bad[i].msg);
        assert_null(r.input);
    }
    /* The same elements in a shared-memory region: the errors name the
     * region's size, not binary_data_size, which the request never gave. */
    for (size_t i = 0; i < 3; i++) {
        char h2[256];
        snprintf(h2, sizeof h2, "{\"inputs\":[{\"name\":\"text\",\"datatype\":\"BYTES\","
                 "\"shape\":[2,1],\"parameters\":{\"shared_memory_region\":\"r\","
                 "\"shared_memory_byte_size\":%zu}}]}", bad[i].size);
        struct tensor_shm_resolver res = {region_resolve, (void *)bad[i].bytes};
        int rc = tensor_decode_kserve_shm(m, h2, strlen(h2), -1, &res, &r, &err);
        if (rc != -BG_EINVAL || !strstr(err.msg, bad[i].msg) ||
            !strstr(err.msg, "inputs[0].parameters.shared_memory_byte_size: "))
            fail_msg("shm case %zu: %d \"%s\", want \"%s\"", i, rc, err.msg, bad[i].msg);
        assert_null(r.input);
    }
    /* TF-Serving's predict does not take text. */
    assert_int_equal(tensor_decode_tfs(&m->cfg, "{\"instances\":[\"a\"]}", 19, &r, &err),
                     -BG_EINVAL);
    assert_non_null(strstr(err.msg, "takes text: use KServe v2"));
}

/* A tokenizer whose ids pass the model's vocabulary is not the model's. */
static void test_tokenizer_must_fit_the_vocabulary(void **state)
{
    (void)state;
    const char *slash = strrchr(__FILE__, '/');
    struct model m = {0};
    snprintf(m.cfg.dir, sizeof m.cfg.dir, "%.*s/../data/wordpiece",
             slash ? (int)(slash - __FILE__) : 1, slash ? __FILE__ : ".");
    m.cfg.encoder.vocab = 10;   /* the fixture's ids go up to 37 */
    struct error err = {0};
    assert_int_equal(encoder_tokenizer_load(&m, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "ids up to 37, but config.json's vocab_size is 10"));
    assert_null(m.tokenizer);
    m.cfg.encoder.vocab = 38;
    assert_int_equal(encoder_tokenizer_load(&m, &err), 0);
    assert_non_null(m.tokenizer);
    encoder_tokenizer_free(&m);
    assert_null(m.tokenizer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inputs),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_answers),
        cmocka_unit_test(test_kserve_text),
        cmocka_unit_test(test_tokenizer_must_fit_the_vocabulary),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    wordpiece_free(the_model()->tokenizer);
    return rc;
}

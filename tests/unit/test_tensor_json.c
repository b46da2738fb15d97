/* test_tensor_json.c - KServe v2 / TF-Serving decoding (every 400 path names
 * its field) and encoding (JSON and the binary extension), and Triton's
 * classification extension (ties, NaN, labels; against a full sort). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "backends/labels.h"
#include "serving/tensor_json.h"

static struct model_config model(void)
{
    struct model_config m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "m");
    snprintf(m.input.name, sizeof m.input.name, "input");
    snprintf(m.input.datatype, sizeof m.input.datatype, "FP32");
    m.input.ndims = 2;
    m.input.shape[0] = 2;
    m.input.shape[1] = 3;
    m.input.row_elems = 6;
    snprintf(m.output.name, sizeof m.output.name, "output");
    snprintf(m.output.datatype, sizeof m.output.datatype, "FP32");
    m.output.ndims = 1;
    m.output.shape[0] = 2;
    m.output.row_elems = 2;
    m.batching.max_batch_size = 4;
    return m;
}

/* The decoder takes a model (an encoder's tokenizer is its); these are
 * configs only. */
static const struct model *as_model(const struct model_config *c)
{
    static struct model mm;
    mm.cfg = *c;
    return &mm;
}

static int decode(const char *json, struct infer_request *r, struct error *err)
{
    struct model_config m = model();
    return tensor_decode_kserve(as_model(&m), json, strlen(json), -1, r, err);
}

static void test_flat_and_nested(void **state)
{
    (void)state;
    struct infer_request r;
    struct error err = {0};
    const char *flat = "{\"id\":\"42\",\"parameters\":{\"priority\":2,\"timeout\":5000},"
                       "\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],"
                       "\"data\":[1,2,3,4,5,6,7,8,9,10,11,12.5]}]}";
    assert_int_equal(decode(flat, &r, &err), 0);
    assert_int_equal(r.rows, 2);
    assert_string_equal(r.id, "42");
    assert_true(r.has_priority && r.priority == 2);
    assert_true(r.has_timeout && r.timeout_us == 5000);
    assert_true(r.input[11] == 12.5f);
    free(r.input);
    /* Past the levels, up to a uint64 from gRPC (a real past INT64_MAX):
     * the default (0), as Triton reads it. */
    static const char *const past[] = {"1000001", "9223372036854775807",
                                       "18446744073709551615.0"};
    for (size_t i = 0; i < sizeof past / sizeof past[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"parameters\":{\"priority\":%s},\"inputs\":[{\"name\":"
                 "\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],\"data\":[1,2,3,4,5,6]}]}",
                 past[i]);
        assert_int_equal(decode(body, &r, &err), 0);
        assert_true(r.has_priority && r.priority == 0);
        free(r.input);
        /* A timeout so large: no hurry (it was refused past INT64_MAX). */
        snprintf(body, sizeof body, "{\"parameters\":{\"timeout\":%s},\"inputs\":[{\"name\":"
                 "\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],\"data\":[1,2,3,4,5,6]}]}",
                 past[i]);
        assert_int_equal(decode(body, &r, &err), 0);
        assert_true(r.has_timeout && r.timeout_us == (i == 0 ? 1000001 : INT64_MAX));
        free(r.input);
    }
    const char *nested = "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
                         "\"data\":[[[1,2,3],[4,5,6]]]}]}";
    assert_int_equal(decode(nested, &r, &err), 0);
    assert_int_equal(r.rows, 1);
    assert_false(r.has_id);
    assert_true(r.input[5] == 6.0f);
    free(r.input);
}

struct bad {
    const char *json;
    const char *mention;
};

static void test_every_error_names_the_field(void **state)
{
    (void)state;
    static const struct bad cases[] = {
        {"", "empty body"},
        {"{", "invalid JSON"},
        /* One line (a job's line): its column, not "line 1" (read as the
         * job's first line); a body of several lines keeps its line. */
        {"{\"inputs\": [1,]}", "invalid JSON at column 15"},
        {"{\n\"inputs\": [1,]}", "invalid JSON at line 2, column"},
        /* Valid JSON the parser cannot hold: said so, not "invalid" alone. */
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[9223372036854775808,"
         "2,3],\"data\":[]}]}", "valid JSON, but integers are read from -2^63 to 2^63-1"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1e400,2,3,4,5,6]}]}", "valid JSON, but past the largest number a double holds"},
        {"[]", "JSON object"},
        {"{}", "inputs"},
        {"{\"inputs\":[]}", "inputs"},
        {"{\"inputs\":[1]}", "inputs[0]"},
        {"{\"inputs\":[{},{}]}", "exactly one input"},
        {"{\"id\":5,\"inputs\":[{}]}", "id"},
        {"{\"parameters\":[],\"inputs\":[{}]}", "parameters"},
        {"{\"parameters\":{\"priority\":-1},\"inputs\":[{}]}", "parameters.priority"},
        {"{\"parameters\":{\"timeout\":\"x\"},\"inputs\":[{}]}", "parameters.timeout"},
        /* Read at the top only: on the input it was taken and ignored. */
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6],\"parameters\":{\"truncate\":false}}]}",
         "inputs[0].parameters.truncate: a parameter of the request"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6]}],\"outputs\":[{\"name\":\"output\","
         "\"parameters\":{\"truncate\":false}}]}",
         "outputs[0].parameters.truncate: a parameter of the request"},
        {"{\"parameters\":{\"binary_data_output\":1},\"inputs\":[{}]}", "binary_data_output"},
        /* $parameter values are strings, numbers or booleans, whatever
         * the name: other values were taken and ignored. */
        {"{\"parameters\":{\"x\":{\"priority\":1}},\"inputs\":[{}]}",
         "parameters.x: must be a string, a number or a boolean, not an object"},
        {"{\"parameters\":{\"x\":null},\"inputs\":[{}]}", "parameters.x"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6],\"parameters\":{\"y\":[1]}}]}",
         "inputs[0].parameters.y: must be a string, a number or a boolean, not an array"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6]}],\"outputs\":[{\"name\":\"output\",\"parameters\":"
         "{\"z\":null}}]}", "outputs[0].parameters.z"},
        /* One output: named twice, the second's parameters replaced the
         * first's without a word. */
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6]}],\"outputs\":[{\"name\":\"output\"},{\"name\":\"output\","
         "\"parameters\":{\"binary_data\":true}}]}", "outputs[1].name: \"output\" is asked for twice"},
        {"{\"inputs\":[{\"datatype\":\"FP32\",\"shape\":[1,2,3],\"data\":[]}]}", "inputs[0].name"},
        {"{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,2,3],\"data\":[]}]}",
         "no input \"x\""},
        {"{\"inputs\":[{\"name\":\"input\",\"shape\":[1,2,3],\"data\":[]}]}", "inputs[0].datatype"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"INT64\",\"shape\":[1,2,3],\"data\":[]}]}",
         "INT64"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"data\":[]}]}", "inputs[0].shape"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,6],\"data\":[]}]}",
         "[-1, 2, 3]"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,4],\"data\":[]}]}",
         "shape[2]"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[0,2,3],\"data\":[]}]}",
         "shape[0]"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[5,2,3],\"data\":[]}]}",
         "1 to 4"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,\"3\"],\"data\":[]}]}",
         "shape[2]"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3]}]}", "data"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],\"data\":[1,2]}]}",
         "2 numbers"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6,7]}]}", "7 numbers"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,\"6\"]}]}", "element 5"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,1e300]}]}", "FP32 range"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6]}],\"outputs\":[{\"name\":\"nope\"}]}", "outputs[0].name"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6]}],\"outputs\":{}}", "outputs"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"parameters\":{\"binary_data_size\":24}}]}", "binary"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}", "32 levels"},
        /* A NUL cut names short when read as C strings: "input\0zz" passed
         * as "input", an id echoed as "ab". */
        {"{\"inputs\":[{\"name\":\"input\\u0000zz\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6]}]}", "inputs[0].name: must be a string (without NUL)"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\\u0000x\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6]}]}", "inputs[0].datatype"},
        {"{\"id\":\"ab\\u0000cd\",\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\","
         "\"shape\":[1,2,3],\"data\":[1,2,3,4,5,6]}]}", "without NUL"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
         "\"data\":[1,2,3,4,5,6]}],\"outputs\":[{\"name\":\"output\\u0000\"}]}",
         "outputs[0].name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct infer_request r;
        struct error err = {0};
        int rc = decode(cases[i].json, &r, &err);
        if (rc != -BG_EINVAL)
            fail_msg("case %zu (%s): expected -BG_EINVAL, got %d", i, cases[i].json, rc);
        if (!strstr(err.msg, cases[i].mention))
            fail_msg("case %zu: \"%s\" should mention \"%s\"", i, err.msg, cases[i].mention);
        assert_null(r.input);
    }
}

static void test_binary_in_and_out(void **state)
{
    (void)state;
    struct model_config m = model();
    const char *hdr = "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
                      "\"parameters\":{\"binary_data_size\":24}}],"
                      "\"outputs\":[{\"name\":\"output\",\"parameters\":{\"binary_data\":true}}]}";
    float vals[6] = {1, -2, 3.5f, 4, 5, 6};
    size_t hl = strlen(hdr);
    char *body = malloc(hl + sizeof vals);
    memcpy(body, hdr, hl);
    memcpy(body + hl, vals, sizeof vals);
    struct infer_request r;
    struct error err = {0};
    assert_int_equal(tensor_decode_kserve(as_model(&m), body, hl + sizeof vals, (int64_t)hl, &r, &err), 0);
    assert_memory_equal(r.input, vals, sizeof vals);
    assert_true(r.binary_output);
    /* Too few binary bytes, too many, and a header length past the body. */
    struct infer_request bad;
    assert_int_equal(tensor_decode_kserve(as_model(&m), body, hl + 20, (int64_t)hl, &bad, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "binary"));
    assert_int_equal(tensor_decode_kserve(as_model(&m), body, hl + sizeof vals, (int64_t)hl - 1, &bad, &err),
                     -BG_EINVAL);
    assert_int_equal(tensor_decode_kserve(as_model(&m), body, hl + sizeof vals, (int64_t)(hl + 100), &bad,
                                          &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "Inference-Header-Content-Length"));

    float out[2] = {0.25f, -1.0f};
    struct buf b = BUF_INIT;
    int64_t jl = 0;
    assert_int_equal(tensor_encode_kserve(as_model(&m), 1, &r, out, &b, &jl), 0);
    assert_true(jl > 0);
    assert_int_equal(b.len, (size_t)jl + sizeof out);
    assert_memory_equal(b.data + jl, out, sizeof out);
    json_t *j = json_loadb(b.data, (size_t)jl, 0, NULL);
    assert_non_null(j);
    json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "parameters"),
                                                        "binary_data_size")), 8);
    json_decref(j);
    buf_free(&b);
    free(r.input);
    free(body);
}

static void test_json_answer_roundtrips_floats(void **state)
{
    (void)state;
    struct model_config m = model();
    struct infer_request r = {.rows = 2, .has_id = true};
    snprintf(r.id, sizeof r.id, "a\"b\\c\n");
    float out[4] = {0.1f, 1.0f / 3.0f, -123456.789f, 1e-30f};
    struct buf b = BUF_INIT;
    int64_t jl = 0;
    assert_int_equal(tensor_encode_kserve(as_model(&m), 1, &r, out, &b, &jl), 0);
    assert_int_equal(jl, -1);
    json_error_t je;
    json_t *j = json_loadb(b.data, b.len, 0, &je);
    if (!j)
        fail_msg("not JSON: %s: %.*s", je.text, (int)b.len, b.data);
    assert_string_equal(json_string_value(json_object_get(j, "id")), r.id);
    assert_string_equal(json_string_value(json_object_get(j, "model_name")), "m");
    json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
    json_t *shape = json_object_get(o, "shape");
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), 2);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 2);
    json_t *data = json_object_get(o, "data");
    for (int i = 0; i < 4; i++)
        assert_true((float)json_number_value(json_array_get(data, (size_t)i)) == out[i]);
    json_decref(j);
    buf_free(&b);
}

static void test_tfs(void **state)
{
    (void)state;
    struct model_config m = model();
    struct infer_request r;
    struct error err = {0};
    const char *ok = "{\"instances\":[[[1,2,3],[4,5,6]],[[1,1,1],[1,1,1]]]}";
    assert_int_equal(tensor_decode_tfs(&m, ok, strlen(ok), &r, &err), 0);
    /* Every row in one form, as TF Serving reads them (a list beside an
     * object, a flat row beside a nested one, were taken). */
    static const char *const mixed[] = {
        "{\"instances\":[[[1,2,3],[4,5,6]],{\"input\":[[1,1,1],[1,1,1]]}]}",
        "{\"instances\":[[[1,2,3],[4,5,6]],[1,1,1,1,1,1]]}",
        "{\"inputs\":[[1,2,3,4,5,6],[[1,1,1],[1,1,1]]]}"};
    for (size_t k = 0; k < sizeof mixed / sizeof mixed[0]; k++) {
        struct infer_request bad;
        assert_int_equal(tensor_decode_tfs(&m, mixed[k], strlen(mixed[k]), &bad, &err),
                         -BG_EINVAL);
        assert_non_null(strstr(err.msg, "[1]: "));
        assert_non_null(strstr(err.msg, "every row takes one form"));
    }
    free(r.input);
    ok = "{\"instances\":[{\"input\":[[1,2,3],[4,5,6]]},{\"input\":[[1,1,1],[1,1,1]]}]}";
    assert_int_equal(tensor_decode_tfs(&m, ok, strlen(ok), &r, &err), 0);
    assert_int_equal(r.rows, 2);
    assert_true(r.input[6] == 1.0f);
    float out[4] = {1, 2, 3, 4};
    struct buf b = BUF_INIT;
    assert_int_equal(tensor_encode_tfs(&m, &r, out, &b), 0);
    /* Floats as floats (1.0: numpy reads 1 as an integer), as TF Serving. */
    assert_int_equal(b.len, strlen("{\"predictions\":[[1.0,2.0],[3.0,4.0]]}"));
    assert_memory_equal(b.data, "{\"predictions\":[[1.0,2.0],[3.0,4.0]]}", b.len);
    buf_free(&b);
    free(r.input);
    /* The columnar form, bare or named, answers "outputs". */
    static const char *cols[] = {
        "{\"inputs\":[[[1,2,3],[4,5,6]],[[1,1,1],[1,1,1]]],\"signature_name\":\"serving_default\"}",
        "{\"inputs\":{\"input\":[[1,2,3,4,5,6],[1,1,1,1,1,1]]},\"signature_name\":\"\"}",
        /* Keys beside the input are not looked at, as in TF Serving. */
        "{\"inputs\":{\"input\":[[1,2,3,4,5,6],[1,1,1,1,1,1]],\"extra\":1}}"};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(tensor_decode_tfs(&m, cols[i], strlen(cols[i]), &r, &err), 0);
        assert_int_equal(r.rows, 2);
        assert_true(r.input[5] == 6.0f && r.input[6] == 1.0f);
        assert_true(r.tfs_columnar);
        assert_int_equal(tensor_encode_tfs(&m, &r, out, &b), 0);
        assert_int_equal(b.len, strlen("{\"outputs\":[[1.0,2.0],[3.0,4.0]]}"));
        assert_memory_equal(b.data, "{\"outputs\":[[1.0,2.0],[3.0,4.0]]}", b.len);
        buf_reset(&b);
        free(r.input);
    }
    buf_free(&b);
    static const struct { const char *body, *says; } bad[] = {
        {"{}", "instances: must be a non-empty array of rows (or give \"inputs\""},
        {"{\"instances\":[]}", "instances: must be"},
        {"{\"instances\":[[1,2]]}", "instances[0]: 2 numbers"},
        {"{\"instances\":[{\"x\":[1,2,3,4,5,6]}]}", "instances[0]: must hold exactly"},
        {"{\"instances\":[[1],[1],[1],[1],[1]]}", "instances: 5 rows"},
        {"nope", "invalid JSON"},
        {"{\"inputs\":[[1,2,3,4,5,6]],\"instances\":[[1,2,3,4,5,6]]}", "not both"},
        {"{\"inputs\":[]}", "inputs: must be a non-empty array"},
        {"{\"inputs\":[1,2,3]}", "inputs[0]: 1 numbers"},
        {"{\"inputs\":{\"x\":[[1,2,3,4,5,6]]}}", "inputs: missing the input \"input\""},
        {"{\"inputs\":[{\"input\":[1,2,3,4,5,6]}]}", "inputs[0]"},
        {"{\"inputs\":[[1],[1],[1],[1],[1]]}", "inputs: 5 rows"},
        {"{\"inputs\":[[1,2,3,4,5,6]],\"signature_name\":\"predict\"}", "serving_default"},
        /* A row's nesting is its shape: a 3x2 row of a [2,3] input was read
         * as the 2x3 one, ragged rows too (200, a scrambled input). */
        {"{\"instances\":[[[1,2],[3,4],[5,6]]]}",
         "instances[0]: a list of 3 where the row shape [2,3] of input \"input\" has 2"},
        {"{\"instances\":[[[1,2,3],[4,5],[6]]]}", "instances[0]: a list of 3 where"},
        {"{\"instances\":[[[1,2,3],[4,[5],6]]]}",
         "instances[0][1][1]: a list nested deeper than the row shape [2,3]"},
        {"{\"instances\":[[[1,2,3,4],[5,6]]]}", "instances[0][0]: a list of 4 where"},
        {"{\"instances\":[[1,[2,3,4],5,6]]}", "instances[0]: a list of 4 where"},
        {"{\"instances\":[[6,[1,2,3,4,5]]]}",
         "instances[0][0]: a number where the row shape [2,3] of input \"input\" has a list "
         "of 3"},
        {"{\"inputs\":[[[1,2],[3,4],[5,6]]]}", "inputs[0]: a list of 3 where"},
        {"{\"instances\":[{\"input\":[[1,2],[3,4],[5,6]]}]}", "instances[0]: a list of 3"},
        {"{\"instances\":[[[1,2,3],[4,5,NaN]]]}",
         "(NaN and Infinity are not JSON numbers: batchgate takes finite numbers only)"},
        {"{\"instances\":[[-Infinity,2,3,4,5,6]]}", "finite numbers only"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(tensor_decode_tfs(&m, bad[i].body, strlen(bad[i].body), &r, &err),
                         -BG_EINVAL);
        assert_null(r.input);
        if (!strstr(err.msg, bad[i].says))
            fail_msg("%s: \"%s\" does not say \"%s\"", bad[i].body, err.msg, bad[i].says);
    }
}

/* Every float the encoder prints reads back as the same float. */
static void test_floats_round_trip(void **state)
{
    (void)state;
    struct model_config m = model();
    enum { N = 100000 };
    m.output.ndims = 1;
    m.output.shape[0] = N;
    m.output.row_elems = N;
    float *v = malloc(N * sizeof(float));
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        uint32_t bits = x;
        float f;
        memcpy(&f, &bits, 4);
        if (!isfinite(f))
            f = (float)i * 0.37f - 1000.0f;
        /* Half random bit patterns (every magnitude), half everyday values. */
        v[i] = i % 2 ? f : (float)((int)(x % 2000001) - 1000000) / (float)(1 + x % 997);
    }
    v[0] = 0.1f;
    v[1] = -0.0f;
    v[2] = 1e-6f;
    v[3] = 99999999.0f;
    v[4] = 123456789.0f;
    v[5] = 0.00001f;
    struct buf b = BUF_INIT;
    struct infer_request one = {.rows = 1};
    assert_int_equal(tensor_encode_tfs(&m, &one, v, &b), 0);
    assert_int_equal(buf_append(&b, "", 1), 0);
    const char *p = strstr(b.data, "[[") + 2;
    for (int i = 0; i < N; i++) {
        char *end;
        float r = strtof(p, &end);
        if (end == p || (r != v[i] && !(r == 0 && v[i] == 0)))
            fail_msg("element %d: %.9g printed as \"%.20s\"", i, (double)v[i], p);
        p = end + 1;
    }
    buf_free(&b);
    free(v);
}

/* ---- system shared memory: a fake resolver over one array ---- */

static unsigned char shm_mem[256];
static int shm_calls;

static int fake_resolve(void *ctx, const struct tensor_shm *ref, const char *what, void **bytes,
                        struct error *err)
{
    (void)ctx;
    shm_calls++;
    if (strcmp(ref->region, "r") != 0)
        return error_set(err, BG_EINVAL, "%s: no region \"%s\"", what, ref->region);
    if (ref->offset + ref->byte_size > sizeof shm_mem)
        return error_set(err, BG_EINVAL, "%s: past the end", what);
    *bytes = shm_mem + ref->offset;
    return 0;
}

static int decode_shm(const char *json, struct infer_request *r, struct error *err)
{
    struct model_config m = model();
    struct tensor_shm_resolver res = {fake_resolve, NULL};
    return tensor_decode_kserve_shm(as_model(&m), json, strlen(json), -1, &res, r, err);
}

/* The gRPC front end hands the infer handler the JSON head it wrote,
 * already parsed (tensor_decode_kserve_head): every body must decode the
 * same both ways, failures with the same message. */
static void test_decoded_head_matches_the_text(void **state)
{
    (void)state;
    float in[12];
    for (int i = 0; i < 12; i++)
        in[i] = (float)i - 3.25f;
    memcpy(shm_mem + 16, in, sizeof in);
    static const struct {
        const char *head;
        int bin_bytes;   /* of `in`, after the head; -1: no binary part */
    } cases[] = {
        {"{\"id\":\"a\",\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\","
         "\"shape\":[2,2,3],\"data\":[1,2,3,4,5,6,7,8,9,10,11,12]}]}", -1},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],"
         "\"parameters\":{\"binary_data_size\":48}}],\"outputs\":[{\"name\":\"output\","
         "\"parameters\":{\"binary_data\":true}}],\"parameters\":{\"binary_data_output\":true,"
         "\"priority\":2,\"timeout\":5000}}", 48},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,6],"
         "\"parameters\":{\"binary_data_size\":24}}]}", 48},   /* 24 bytes left over */
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,6],"
         "\"parameters\":{\"binary_data_size\":48}}]}", 24},   /* short */
        {"{\"inputs\":[{\"name\":\"nope\",\"datatype\":\"FP32\",\"shape\":[2,6],"
         "\"parameters\":{\"binary_data_size\":48}}]}", 48},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],"
         "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":48,"
         "\"shared_memory_offset\":16}}],\"outputs\":[{\"name\":\"output\",\"parameters\":"
         "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":20,"
         "\"shared_memory_offset\":100}}]}", -1},
        {"{\"inputs\":[]}", -1},
        {"[1,2]", -1},
    };
    struct model_config m = model();
    struct tensor_shm_resolver res = {fake_resolve, NULL};
    int decoded = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t hl = strlen(cases[c].head), bl = cases[c].bin_bytes > 0 ? (size_t)cases[c].bin_bytes : 0;
        char *body = malloc(hl + bl + 1);
        assert_non_null(body);
        memcpy(body, cases[c].head, hl);
        memcpy(body + hl, in, bl);
        int64_t json_len = cases[c].bin_bytes >= 0 ? (int64_t)hl : -1;
        struct infer_request a, b;
        struct error ea = {0}, eb = {0};
        int ra = tensor_decode_kserve_shm(as_model(&m), body, hl + bl, json_len, &res, &a, &ea);
        json_t *head = json_loadb(body, hl, 0, NULL);
        assert_non_null(head);
        int rb = tensor_decode_kserve_head(as_model(&m), head, json_len >= 0 ? body + hl : NULL, bl,
                                           &res, &b, &eb);
        json_decref(head);
        assert_int_equal(ra, rb);
        assert_string_equal(ea.msg, eb.msg);
        if (ra == 0) {
            decoded++;
            assert_int_equal(a.rows, b.rows);
            assert_string_equal(a.id, b.id);
            assert_int_equal(a.has_id, b.has_id);
            assert_int_equal(a.binary_output, b.binary_output);
            assert_int_equal(a.priority, b.priority);
            assert_int_equal(a.timeout_us, b.timeout_us);
            assert_int_equal(a.output_shm.set, b.output_shm.set);
            assert_ptr_equal(a.output_shm_bytes, b.output_shm_bytes);
            assert_memory_equal(a.input, b.input, (size_t)a.rows * 6 * sizeof(float));
            free(a.input);
            free(b.input);
        }
        free(body);
    }
    assert_int_equal(decoded, 3);   /* the first two and shared memory; the rest fail alike */
}

static void test_shared_memory(void **state)
{
    (void)state;
    float in[12];
    for (int i = 0; i < 12; i++)
        in[i] = (float)i + 0.5f;
    memcpy(shm_mem + 16, in, sizeof in);
    struct infer_request r;
    struct error err = {0};
    /* 2 rows x 6 FP32 = 48 bytes at offset 16; the output (2 x 2 FP32 =
     * 16 bytes) at 100, in a window of 20. */
    const char *ok = "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],"
                     "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":48,"
                     "\"shared_memory_offset\":16}}],\"outputs\":[{\"name\":\"output\",\"parameters\":"
                     "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":20,"
                     "\"shared_memory_offset\":100}}]}";
    assert_int_equal(decode_shm(ok, &r, &err), 0);
    assert_int_equal(r.rows, 2);
    assert_memory_equal(r.input, in, sizeof in);
    assert_true(r.output_shm.set);
    assert_ptr_equal(r.output_shm_bytes, shm_mem + 100);
    struct model_config m = model();
    float out[4] = {1, 2, 3, 4};
    struct buf b = BUF_INIT;
    int64_t jl = 0;
    assert_int_equal(tensor_encode_kserve(as_model(&m), 1, &r, out, &b, &jl), 0);
    assert_int_equal(jl, -1);
    buf_append(&b, "", 1);
    /* As Triton: name, datatype, shape; no data, no parameters. */
    assert_string_equal(b.data, "{\"model_name\":\"m\",\"model_version\":\"1\",\"outputs\":[{\"name\":"
                                "\"output\",\"datatype\":\"FP32\",\"shape\":[2,2]}]}");
    buf_free(&b);
    free(r.input);

    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"parameters\":"
         "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":44}}]}",
         "inputs[0].parameters.shared_memory_byte_size: 44 bytes, but shape 2 x 6 FP32 needs 48"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"parameters\":"
         "{\"shared_memory_region\":\"r\"}}]}",
         "inputs[0].parameters.shared_memory_byte_size: missing"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"parameters\":"
         "{\"shared_memory_byte_size\":48}}]}",
         "inputs[0].parameters.shared_memory_region: missing"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"parameters\":"
         "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":48,"
         "\"shared_memory_offset\":-1}}]}",
         "inputs[0].parameters.shared_memory_offset: must be an integer >= 0"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"parameters\":"
         "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":48},\"data\":[1]}]}",
         "inputs[0].data: given with parameters.shared_memory_region"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"parameters\":"
         "{\"shared_memory_region\":\"q\",\"shared_memory_byte_size\":48}}]}",
         "inputs[0]: no region \"q\""},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"parameters\":"
         "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":48,"
         "\"shared_memory_offset\":250}}]}",
         "inputs[0]: past the end"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"data\":"
         "[1,2,3,4,5,6,7,8,9,10,11,12]}],\"outputs\":[{\"name\":\"output\",\"parameters\":"
         "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":15}}]}",
         "outputs[0].parameters.shared_memory_byte_size: 15 bytes is too small for the output "
         "(2 rows x 2 FP32 are 16 bytes)"},
        {"{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[2,2,3],\"data\":"
         "[1,2,3,4,5,6,7,8,9,10,11,12]}],\"outputs\":[{\"name\":\"output\",\"parameters\":"
         "{\"classification\":1,\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":16}}]}",
         "outputs[0].parameters: classification and shared_memory_region on one output are not "
         "served"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        assert_int_equal(decode_shm(bad[i].json, &r, &err), -BG_EINVAL);
        if (!strstr(err.msg, bad[i].msg))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.msg, bad[i].msg);
        assert_null(r.input);
    }
    /* Without a resolver (jobs, TF-Serving): refused, naming the route. */
    shm_calls = 0;
    assert_int_equal(decode("{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":"
                            "[2,2,3],\"parameters\":{\"shared_memory_region\":\"r\","
                            "\"shared_memory_byte_size\":48}}]}", &r, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "served on POST /v2/models/{model}/infer only"));
    assert_int_equal(shm_calls, 0);
}

/* ---- classification (Triton's extension) ---- */

/* A body of far more values than the model takes is refused before it is
 * parsed (each value a parsed node: 8 MiB of zeros took 200 MB), on both
 * protocols; at the model's size it is read as ever. */
static void test_oversized_bodies_refused_unread(void **state)
{
    (void)state;
    struct model_config m = model();   /* 4 rows of 6: 24 values, and the slack */
    struct infer_request r;
    struct error err = {0};
    size_t n = 10000;
    struct buf b = BUF_INIT;
    buf_appendf(&b, "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\","
                    "\"shape\":[%zu,2,3],\"data\":[", n);
    for (size_t i = 0; i < n * 6; i++)
        buf_append(&b, i ? ",0" : "0", i ? 2 : 1);
    buf_append(&b, "]}]}", 4);
    assert_int_equal(tensor_decode_kserve(as_model(&m), b.data, b.len, -1, &r, &err),
                     -BG_EINVAL);
    assert_non_null(strstr(err.msg, "JSON values; model m takes at most 4 rows of 6"));
    buf_reset(&b);
    buf_appendf(&b, "{\"instances\":[");
    for (size_t i = 0; i < n; i++)
        buf_append(&b, i ? ",[[0,0,0],[0,0,0]]" : "[[0,0,0],[0,0,0]]", i ? 18 : 17);
    buf_append(&b, "]}", 2);
    assert_int_equal(tensor_decode_tfs(&m, b.data, b.len, &r, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "refused before it is read"));
    /* Full batches of nested or named rows pass: the bound counts each
     * row's lists and object (a flat 4,096 beside the numbers refused 8192
     * rows of [1] nested, and 4096 rows of [2, 3]). */
    struct model_config one = model();
    one.input.ndims = 1;
    one.input.shape[0] = 1;
    one.input.row_elems = 1;
    one.batching.max_batch_size = 8192;
    buf_reset(&b);
    buf_appendf(&b, "{\"instances\":[");
    for (int i = 0; i < 8192; i++)
        buf_appendf(&b, "%s{\"input\":[1.0]}", i ? "," : "");
    buf_appendf(&b, "]}");
    if (tensor_decode_tfs(&one, b.data, b.len, &r, &err) != 0)
        fail_msg("%s", err.msg);
    free(r.input);
    buf_reset(&b);
    buf_appendf(&b, "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\","
                    "\"shape\":[8192,1],\"data\":[");
    for (int i = 0; i < 8192; i++)
        buf_appendf(&b, "%s[1.0]", i ? "," : "");
    buf_appendf(&b, "]}]}");
    if (tensor_decode_kserve(as_model(&one), b.data, b.len, -1, &r, &err) != 0)
        fail_msg("%s", err.msg);
    free(r.input);
    m.batching.max_batch_size = 4096;   /* rows of [2, 3], nested */
    buf_reset(&b);
    buf_appendf(&b, "{\"instances\":[");
    for (int i = 0; i < 4096; i++)
        buf_appendf(&b, "%s[[1,1,1],[1,1,1]]", i ? "," : "");
    buf_appendf(&b, "]}");
    if (tensor_decode_tfs(&m, b.data, b.len, &r, &err) != 0)
        fail_msg("%s", err.msg);
    free(r.input);
    m.batching.max_batch_size = 4;
    /* Commas inside strings are no values: a long parameter passes. */
    buf_reset(&b);
    buf_appendf(&b, "{\"parameters\":{\"note\":\"");
    for (size_t i = 0; i < 200; i++)
        buf_append(&b, ",,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,", 100);
    buf_appendf(&b, "\"},\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\",\"shape\":[1,2,3],"
                    "\"data\":[1,2,3,4,5,6]}]}");
    if (tensor_decode_kserve(as_model(&m), b.data, b.len, -1, &r, &err) != 0)
        fail_msg("%s", err.msg);
    free(r.input);
    buf_free(&b);
}

static void test_classification_decode(void **state)
{
    (void)state;
    struct infer_request r;
    struct error err = {0};
    static const char head[] = "{\"inputs\":[{\"name\":\"input\",\"datatype\":\"FP32\","
                               "\"shape\":[1,2,3],\"data\":[1,2,3,4,5,6]}],"
                               "\"outputs\":[{\"name\":\"output\",\"parameters\":{";
    char body[512];
    snprintf(body, sizeof body, "%s\"classification\":2,\"binary_data\":true}}]}", head);
    assert_int_equal(decode(body, &r, &err), 0);
    assert_int_equal(r.class_count, 2);
    assert_true(r.binary_output);
    free(r.input);
    snprintf(body, sizeof body, "%s}}]}", head);
    assert_int_equal(decode(body, &r, &err), 0);
    assert_int_equal(r.class_count, 0);   /* none asked: the tensor */
    free(r.input);
    static const struct bad cases[] = {
        {"0", "outputs[0].parameters.classification: must be an integer >= 1 (how many classes "
              "to answer), got 0"},
        {"-1", "got -1"},
        {"3", "outputs[0].parameters.classification: 3 classes asked, but output \"output\" has 2 "
              "elements per row"},
        {"9223372036854775807", "9223372036854775807 classes asked"},
        {"\"x\"", "must be an integer >= 1 (how many classes to answer), got a string"},
        {"1.5", "got a fraction"},
        {"true", "got a boolean"},
        {"null", "got null"},
        {"[1]", "got an array"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(body, sizeof body, "%s\"classification\":%s}}]}", head, cases[i].json);
        r.input = (float *)1;
        assert_int_equal(decode(body, &r, &err), -BG_EINVAL);
        assert_null(r.input);
        if (!strstr(err.msg, cases[i].mention))
            fail_msg("classification %s: \"%s\" should mention \"%s\"", cases[i].json, err.msg,
                     cases[i].mention);
    }
}

/* A model of 6 classes, with the labels `labels` ("" none). */
static const struct model *class_model(const char *labels)
{
    static struct model mm;
    labels_free(mm.labels);
    memset(&mm, 0, sizeof mm);
    mm.cfg = model();
    mm.cfg.output.shape[0] = 6;
    mm.cfg.output.row_elems = 6;
    struct error err = {0};
    if (labels[0] && labels_parse(labels, strlen(labels), "t", 6, &mm.labels, &err) != 0)
        fail_msg("%s", err.msg);
    return &mm;
}

/* Row 0: ties, NaN, infinities, a value "%f" prints as 0; row 1: all equal. */
static const float class_out[12] = {0.5f, 2.0f, NAN, 2.0f, -INFINITY, 1e-7f,
                                    -1, -1, -1, -1, -1, -1};

static void expect_classes(const char *what, json_t *data, const char *const *want, size_t n)
{
    if (json_array_size(data) != n)
        fail_msg("%s: %zu elements, want %zu", what, json_array_size(data), n);
    for (size_t i = 0; i < n; i++) {
        const char *got = json_string_value(json_array_get(data, i));
        if (!got || strcmp(got, want[i]) != 0)
            fail_msg("%s[%zu]: got \"%s\", want \"%s\"", what, i, got ? got : "(not a string)",
                     want[i]);
    }
}

static json_t *class_answer(const struct model *mm, int64_t k, bool binary, json_t **elems)
{
    struct infer_request r = {.rows = 2, .class_count = k, .binary_output = binary};
    struct buf b = BUF_INIT;
    int64_t jl = 0;
    assert_int_equal(tensor_encode_kserve(mm, 1, &r, class_out, &b, &jl), 0);
    json_error_t je;
    json_t *j = json_loadb(b.data, binary ? (size_t)jl : b.len, 0, &je);
    if (!j)
        fail_msg("not JSON: %s: %.*s", je.text, (int)b.len, b.data);
    json_t *o = json_array_get(json_object_get(j, "outputs"), 0);
    assert_string_equal(json_string_value(json_object_get(o, "datatype")), "BYTES");
    json_t *shape = json_object_get(o, "shape");
    assert_int_equal(json_array_size(shape), 2);
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), 2);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), k);
    if (!binary) {
        assert_int_equal(jl, -1);
        *elems = json_incref(json_object_get(o, "data"));
    } else {
        /* Triton's BYTES in binary: a 4-byte little-endian length, the bytes. */
        assert_null(json_object_get(o, "data"));
        json_int_t size = json_integer_value(
            json_object_get(json_object_get(o, "parameters"), "binary_data_size"));
        assert_int_equal((size_t)jl + (size_t)size, b.len);
        *elems = json_array();
        const unsigned char *p = (const unsigned char *)b.data + jl;
        size_t left = (size_t)size;
        while (left) {
            assert_true(left >= 4);
            size_t n = p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
            assert_true(n <= left - 4);
            json_array_append_new(*elems, json_stringn((const char *)p + 4, n));
            p += 4 + n;
            left -= 4 + n;
        }
    }
    buf_free(&b);
    return j;
}

static void test_classification_encode(void **state)
{
    (void)state;
    static const char *const all[12] = {
        "2.000000:1", "2.000000:3", "0.500000:0", "0.000000:5", "-inf:4", "nan:2",
        "-1.000000:0", "-1.000000:1", "-1.000000:2", "-1.000000:3", "-1.000000:4", "-1.000000:5"};
    static const char *const top2[4] = {"2.000000:1", "2.000000:3", "-1.000000:0", "-1.000000:1"};
    /* Line 3 ("") is a class without a label; ':' and '"' are a label's own. */
    static const char *const lab[4] = {"2.000000:1:one", "2.000000:3", "-1.000000:0:ze\"ro",
                                       "-1.000000:1:one"};
    for (int binary = 0; binary < 2; binary++) {
        json_t *elems;
        json_t *j = class_answer(class_model(""), 6, binary, &elems);
        expect_classes(binary ? "binary k=6" : "json k=6", elems, all, 12);
        json_decref(elems);
        json_decref(j);
        j = class_answer(class_model(""), 2, binary, &elems);
        expect_classes(binary ? "binary k=2" : "json k=2", elems, top2, 4);
        json_decref(elems);
        json_decref(j);
        j = class_answer(class_model("ze\"ro\r\none\ntwo\n\nfour\nfi:ve\n"), 2, binary, &elems);
        expect_classes(binary ? "binary labels" : "json labels", elems, lab, 4);
        json_decref(elems);
        json_decref(j);
    }
    class_model("");
}

/* The selection against a full sort, on rows with many ties and NaNs. */
static const float *class_ref_row;
static int class_ref_cmp(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    float fx = class_ref_row[x], fy = class_ref_row[y];
    if (isnan(fx) != isnan(fy))
        return isnan(fx) ? 1 : -1;
    if (!isnan(fx) && fx != fy)
        return fx > fy ? -1 : 1;
    return x < y ? -1 : 1;
}

static void test_classification_against_sort(void **state)
{
    (void)state;
    enum { N = 257 };
    static struct model mm;
    mm.cfg = model();
    mm.cfg.output.shape[0] = N;
    mm.cfg.output.row_elems = N;
    float v[N];
    uint32_t ref[N];
    uint32_t x = 7;
    for (int round = 0; round < 40; round++) {
        for (int i = 0; i < N; i++) {
            x = x * 1664525u + 1013904223u;
            v[i] = x % 17 == 0 ? NAN : (float)((int)(x >> 24) % 9) - 4.0f;
            ref[i] = (uint32_t)i;
        }
        class_ref_row = v;
        qsort(ref, N, sizeof ref[0], class_ref_cmp);
        int64_t k = 1 + (int64_t)(x % N);
        struct infer_request r = {.rows = 1, .class_count = k};
        struct buf b = BUF_INIT;
        int64_t jl;
        assert_int_equal(tensor_encode_kserve(&mm, 1, &r, v, &b, &jl), 0);
        json_t *j = json_loadb(b.data, b.len, 0, NULL);
        assert_non_null(j);
        json_t *data = json_object_get(json_array_get(json_object_get(j, "outputs"), 0), "data");
        assert_int_equal(json_array_size(data), (size_t)k);
        for (int64_t i = 0; i < k; i++) {
            const char *s = json_string_value(json_array_get(data, (size_t)i));
            const char *colon = strchr(s, ':');
            assert_non_null(colon);
            if ((uint32_t)atoi(colon + 1) != ref[i])
                fail_msg("round %d, k %lld, place %lld: \"%s\", want index %u", round,
                         (long long)k, (long long)i, s, ref[i]);
        }
        json_decref(j);
        buf_free(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat_and_nested),
        cmocka_unit_test(test_every_error_names_the_field),
        cmocka_unit_test(test_binary_in_and_out),
        cmocka_unit_test(test_json_answer_roundtrips_floats),
        cmocka_unit_test(test_tfs),
        cmocka_unit_test(test_floats_round_trip),
        cmocka_unit_test(test_shared_memory),
        cmocka_unit_test(test_decoded_head_matches_the_text),
        cmocka_unit_test(test_oversized_bodies_refused_unread),
        cmocka_unit_test(test_classification_decode),
        cmocka_unit_test(test_classification_encode),
        cmocka_unit_test(test_classification_against_sort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

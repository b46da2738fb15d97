/* test_upstream_codec.c - the upstream backend's TF-Serving calls: rows
 * nested as the input's shape, and TF Serving's bare NaN and Infinity in
 * an answer read as values that are not finite. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backends/upstream_codec.h"

static struct model_config model(enum upstream_protocol protocol)
{
    struct model_config m;
    memset(&m, 0, sizeof m);
    snprintf(m.name, sizeof m.name, "m");
    snprintf(m.input.name, sizeof m.input.name, "x");
    m.input.ndims = 2;
    m.input.shape[0] = 2;
    m.input.shape[1] = 3;
    m.input.row_elems = 6;
    snprintf(m.output.name, sizeof m.output.name, "y");
    m.output.ndims = 1;
    m.output.shape[0] = 2;
    m.output.row_elems = 2;
    m.upstream.protocol = protocol;
    return m;
}

/* TF Serving reads a row's shape from its nesting: a flat row of a [2,3]
 * input was refused there ("Expecting shape"). */
static void test_tfs_request_nests_rows(void **state)
{
    (void)state;
    struct model_config m = model(UPSTREAM_TFSERVING);
    const float in[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12.5f};
    struct buf b = BUF_INIT;
    upstream_codec_request(&m, in, 2, &b);
    const char *want = "{\"instances\":[[[1,2,3],[4,5,6]],[[7,8,9],[10,11,12.5]]]}";
    if (b.len != strlen(want) || memcmp(b.data, want, b.len) != 0)
        fail_msg("got %.*s", (int)b.len, b.data);
    buf_free(&b);
}

/* One row's NaN failed the whole batch (then "not a JSON object"): every
 * request batched with it got 502. */
static void test_tfs_answer_nan_tokens(void **state)
{
    (void)state;
    struct model_config m = model(UPSTREAM_TFSERVING);
    const char *body = "{\"predictions\":[[NaN,1.5],[-Infinity,Infinity]]}";
    float out[4];
    char why[256] = "";
    assert_int_equal(upstream_codec_answer(&m, body, strlen(body), 2, out, why, sizeof why), 0);
    assert_true(isnan(out[0]));
    assert_true(out[1] == 1.5f);
    assert_true(isnan(out[2]) && isnan(out[3]));   /* read as null: not finite */
    /* Still strict otherwise, and KServe v2 answers are JSON. */
    const char *bad = "{\"predictions\":[[NaN,1.5],[NaN]]}";
    assert_int_equal(upstream_codec_answer(&m, bad, strlen(bad), 2, out, why, sizeof why), -1);
    assert_non_null(strstr(why, "predictions[1] holds 1 values"));
    struct model_config k = model(UPSTREAM_KSERVE_V2);
    const char *kb = "{\"outputs\":[{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[1,2],"
                     "\"data\":[NaN,1]}]}";
    assert_int_equal(upstream_codec_answer(&k, kb, strlen(kb), 1, out, why, sizeof why), -1);
    assert_non_null(strstr(why, "malformed answer: invalid JSON at line 1, column"));
    /* Valid JSON past the parser's numbers: said so, not "not a JSON
     * object" (an upfault pass). */
    const char *big[] = {"{\"outputs\":[{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[1,2],"
                         "\"data\":[1e400,1]}]}",
                         "{\"outputs\":[{\"name\":\"y\",\"datatype\":\"FP32\",\"shape\":[1,2],"
                         "\"data\":[123456789012345678901234567890,1]}]}"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(upstream_codec_answer(&k, big[i], strlen(big[i]), 1, out, why, sizeof why),
                         -1);
        if (!strstr(why, "a number out of the parser's range at line 1, column"))
            fail_msg("case %d: %s", i, why);
    }
    const char *arr = "[1]";
    assert_int_equal(upstream_codec_answer(&k, arr, strlen(arr), 1, out, why, sizeof why), -1);
    assert_non_null(strstr(why, "not a JSON object"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tfs_request_nests_rows),
        cmocka_unit_test(test_tfs_answer_nan_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_jsonfmt.c - TF Serving's float text, nested arrays, and its bare
 * NaN and Infinity read as null. (json_append_float's round trip is
 * test_tensor_json's.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "common/jsonfmt.h"

static void expect_text(struct buf *b, const char *want)
{
    if (b->len != strlen(want) || (b->len && memcmp(b->data, want, b->len) != 0))
        fail_msg("got \"%.*s\", want \"%s\"", (int)b->len, b->data, want);
    buf_reset(b);
}

static void test_float_tfs(void **state)
{
    (void)state;
    static const struct {
        float v;
        const char *text;
    } cases[] = {{1.0f, "1.0"},      {-3.0f, "-3.0"},        {0.5f, "0.5"},
                 {0.0f, "0.0"},      {-0.0f, "-0.0"},        {1e20f, "1e+20"},
                 {NAN, "NaN"},       {INFINITY, "Infinity"}, {-INFINITY, "-Infinity"},
                 {123456.0f, "123456.0"}, {0.6f, "0.6"},     {1e6f, "1e+06"},
                 {0.1f, "0.1"},      {0.099999994f, "0.099999994"},
                 {1.0000001f, "1.00000012"}, {3e-5f, "3e-05"}, {1234567.0f, "1234567.0"},
                 {16777216.0f, "16777216.0"}, {123456789.0f, "123456792.0"},
                 {1e9f, "1e+09"}};
    struct buf b = BUF_INIT;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(json_append_float_tfs(&b, cases[i].v), 0);
        expect_text(&b, cases[i].text);
    }
    /* TF Serving's rule itself (WriteDecimal: absl::StrCat's six digits,
     * read back, else %.9g; ".0" without '.' or 'e') on many floats of
     * every range, against the fast path and its fallbacks. */
    uint32_t x = 2463534242u;
    for (int i = 0; i < 400000; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        float f;
        uint32_t bits = i % 2 ? x : (x & 0x807fffffu) | ((uint32_t)(110 + x % 40) << 23);
        memcpy(&f, &bits, sizeof f);   /* odd: any float; even: 1e-5 .. 1e6 */
        if (!isfinite(f) || f == 0.0f)
            continue;
        char want[48];
        int n = snprintf(want, sizeof want, "%.6g", (double)f);
        if (strtof(want, NULL) != f)
            n = snprintf(want, sizeof want, "%.9g", (double)f);
        if (!strchr(want, '.') && !strchr(want, 'e'))
            snprintf(want + n, sizeof want - (size_t)n, ".0");
        assert_int_equal(json_append_float_tfs(&b, f), 0);
        expect_text(&b, want);
    }
    /* The plain writer keeps JSON: null, and 1 as 1. */
    assert_int_equal(json_append_float(&b, NAN), 0);
    expect_text(&b, "null");
    assert_int_equal(json_append_float(&b, 1.0f), 0);
    expect_text(&b, "1");
    buf_free(&b);
}

/* The nodes a parse would make, about, counted without parsing: strings
 * (with escaped quotes) hide what is in them. */
static void test_values_at_least(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t n;
    } cases[] = {{"0", 1},
                 {"[1,2,3]", 4},                          /* exact for numbers */
                 {"{\"a\":[1,2],\"b\":{}}", 8},           /* keys and empties count */
                 {"[\"a,b:[{\", \"c\\\",d\"]", 3},        /* not what strings hold */
                 {"[[],[[]]]", 6}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(json_values_at_least(cases[i].text, strlen(cases[i].text)),
                         cases[i].n);
}

static void test_nested(void **state)
{
    (void)state;
    const float v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const float *p = v;
    struct buf b = BUF_INIT;
    assert_int_equal(json_append_nested(&b, &p, (const int64_t[]){2, 2, 3}, 3,
                                        json_append_float), 0);
    expect_text(&b, "[[[1,2,3],[4,5,6]],[[7,8,9],[10,11,12]]]");
    assert_ptr_equal(p, v + 12);
    p = v;
    assert_int_equal(json_append_nested(&b, &p, (const int64_t[]){2}, 1, json_append_float_tfs),
                     0);
    expect_text(&b, "[1.0,2.0]");
    buf_free(&b);
}

static void test_nonfinite_to_null(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
        int n;
    } cases[] = {
        {"{\"predictions\":[[NaN,1,-Infinity],[Infinity]]}",
         "{\"predictions\":[[null,1,null],[null]]}", 3},
        /* Inside strings, escaped quotes included, nothing changes. */
        {"{\"a\":\"NaN Infinity\",\"b\":\"x\\\"NaN\",\"c\":NaN}",
         "{\"a\":\"NaN Infinity\",\"b\":\"x\\\"NaN\",\"c\":null}", 1},
        /* Nor in longer words, nor what is already JSON. */
        {"[NaNa,Infinityx,-1,null,1e5]", "[NaNa,Infinityx,-1,null,1e5]", 0},
        {"NaN", "null", 1},
        {"", "", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct buf b = BUF_INIT;
        assert_int_equal(json_nonfinite_to_null(cases[i].in, strlen(cases[i].in), &b),
                         cases[i].n);
        expect_text(&b, cases[i].out);
        buf_free(&b);
        assert_int_equal(json_nonfinite_to_null(cases[i].in, strlen(cases[i].in), NULL),
                         cases[i].n);   /* counted only */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_tfs),
        cmocka_unit_test(test_values_at_least),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_nonfinite_to_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

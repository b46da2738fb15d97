/* test_schema.c - the configuration schema on a table of every type: defaults,
 * parsing, ranges, messages with nested paths, "did you mean", docs, and the
 * real tables of the server and model configurations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "backends/model.h"
#include "common/schema.h"
#include "tests/unit/scratch.h"
#include "gateway/config.h"

struct t_item {
    char name[16];
    int weight;
};

struct t_inner {
    int64_t big;
    double ratio;
};

enum t_color { T_RED = 3, T_GREEN = 7 };

struct t_conf {
    bool flag;
    int count;
    size_t bytes;
    char label[8];
    char path[32];
    char mode[16];
    int color;
    char hosts[2][64];
    int ports[2];
    int nurls;
    struct t_inner inner;
    struct t_item items[3];
    int nitems;
    int sizes[4];
    int nsizes;
    struct t_item one;
    int lo, hi;               /* "span": "LO-HI", a custom field */
    int checks;               /* how often t_check ran */
};

static int t_parse_span(void *base, json_t *v, const struct schema_field *f,
                        struct schema_ctx *ctx)
{
    struct t_conf *c = base;
    const char *s = v ? json_string_value(v) : f->sdef;
    if (!s || sscanf(s, "%d-%d", &c->lo, &c->hi) != 2)
        return schema_fail_value(ctx, f, v);
    return 0;
}

static int t_check_inner(void *obj, json_t *json, struct schema_ctx *ctx)
{
    const struct t_inner *in = obj;
    if (in->ratio > 0.5 && in->big > 100)
        return schema_fail(ctx, "ratio", "must be at most 0.5 when big is over 100");
    return 0;
}

static int t_check_item(void *obj, json_t *json, struct schema_ctx *ctx)
{
    const struct t_item *it = obj;
    if (strcmp(it->name, "bad") == 0)
        return schema_fail(ctx, NULL, "an item may not be called bad");
    return 0;
}

static const struct schema_name t_colors[] = {{"red", T_RED}, {"green", T_GREEN}, {NULL, 0}};
static const struct schema_name t_modes[] = {{"fast", 0}, {"careful", 0}, {NULL, 0}};

static const struct schema_field t_inner_fields[] = {
    {SCHEMA_F_INT64("big", struct t_inner, big), .min = -5, .max = (int64_t)1 << 40, .def = 9,
     .doc = "a large one"},
    {SCHEMA_F_DOUBLE("ratio", struct t_inner, ratio), .fmin = 0, .fmax = 1, .fdef = 0.25,
     .doc = "a fraction"},
    SCHEMA_END_ROW,
};

static const struct schema_field t_item_fields[] = {
    {SCHEMA_F_STRING("name", struct t_item, name), .flags = SCHEMA_REQUIRED | SCHEMA_NONEMPTY,
     .doc = "its name"},
    {SCHEMA_F_INT("weight", struct t_item, weight), .min = 1, .max = 16, .def = 4,
     .doc = "its weight"},
    SCHEMA_END_ROW,
};

static const struct schema_field t_item = {
    .type = SCHEMA_OBJECT, .fields = t_item_fields, .check = t_check_item,
};
static const struct schema_field t_size = {.type = SCHEMA_INT, .min = 1, .max = 100,
                                           .hint = "sizes are rows"};

static const struct schema_field t_fields[] = {
    {SCHEMA_F_BOOL("flag", struct t_conf, flag), .def = true, .doc = "a switch"},
    {SCHEMA_F_INT("count", struct t_conf, count), .min = 1, .max = 16, .def = 2,
     .doc = "a count"},
    {SCHEMA_F_SIZE("bytes", struct t_conf, bytes), .min = 0, .max = 1000, .def = 512,
     .doc = "a size"},
    {SCHEMA_F_STRING("label", struct t_conf, label), .sdef = "abc", .doc = "a short label"},
    {SCHEMA_F_STRING("path", struct t_conf, path), .flags = SCHEMA_SLASH, .doc_default = "none",
     .doc = "a path"},
    {SCHEMA_F_STRING("mode", struct t_conf, mode), .names = t_modes, .sdef = "fast",
     .doc = "a string choice"},
    {SCHEMA_F_ENUM("color", struct t_conf, color, t_colors), .sdef = "green", .doc = "an enum"},
    {SCHEMA_F_URLS("urls", struct t_conf, hosts, ports, nurls), .min = 1, .doc = "servers"},
    {SCHEMA_F_OBJECT("inner", struct t_conf, inner, t_inner_fields), .check = t_check_inner,
     .flags = SCHEMA_EXT, .doc = "a section"},
    {SCHEMA_F_ARRAY("items", struct t_conf, items, nitems, &t_item), .doc = "objects"},
    {SCHEMA_F_ARRAY("sizes", struct t_conf, sizes, nsizes, &t_size), .min = 1,
     .doc = "integers"},
    {SCHEMA_F_ONE("one", struct t_conf, one, &t_item), .doc = "exactly one object"},
    {SCHEMA_F_CUSTOM("span", t_parse_span), .sdef = "1-2", .expect = "a string \"LO-HI\"",
     .doc = "irregular"},
    {SCHEMA_F_IGNORE("comment"), .doc = "ignored"},
    SCHEMA_END_ROW,
};

/* Parses json over the defaults; returns the code and leaves the message in err. */
static int t_load(const char *json, struct t_conf *c, struct error *err)
{
    json_t *root;
    memset(c, 0, sizeof *c);
    schema_defaults(t_fields, c);
    error_clear(err);
    int rc = schema_json_parse(json, strlen(json), "t.json", &root, err);
    if (rc == 0) {
        rc = schema_parse(t_fields, c, root, "t.json", err);
        json_decref(root);
    }
    return rc;
}

static void t_expect_error(const char *json, const char *msg)
{
    struct t_conf c;
    struct error err;
    int rc = t_load(json, &c, &err);
    if (rc != -BG_ECONFIG || strcmp(err.msg, msg) != 0)
        fail_msg("%s:\n  got  %d \"%s\"\n  want \"%s\"", json, rc, err.msg, msg);
}

static void test_table_is_valid(void **state)
{
    (void)state;
    char msg[200] = "";
    if (schema_validate(t_fields, msg, sizeof msg) != 0)
        fail_msg("%s", msg);
    if (schema_validate(config_schema(), msg, sizeof msg) != 0)
        fail_msg("server config: %s", msg);
    if (schema_validate(model_config_schema(), msg, sizeof msg) != 0)
        fail_msg("model config: %s", msg);
}

static void test_defaults(void **state)
{
    (void)state;
    struct t_conf c;
    struct error err;
    assert_int_equal(t_load("{}", &c, &err), 0);
    assert_true(c.flag);
    assert_int_equal(c.count, 2);
    assert_int_equal(c.bytes, 512);
    assert_string_equal(c.label, "abc");
    assert_string_equal(c.path, "");
    assert_string_equal(c.mode, "fast");
    assert_int_equal(c.color, T_GREEN);
    assert_int_equal(c.nurls, 0);
    assert_int_equal(c.inner.big, 9);
    assert_true(c.inner.ratio == 0.25);
    assert_int_equal(c.nitems, 0);
    assert_int_equal(c.nsizes, 0);
    assert_int_equal(c.one.weight, 4);
    assert_int_equal(c.lo, 1);
    assert_int_equal(c.hi, 2);
}

static void test_every_type(void **state)
{
    (void)state;
    struct t_conf c;
    struct error err;
    const char *json =
        "{\"flag\": false, \"count\": 16, \"bytes\": 0, \"label\": \"1234567\", \"path\": \"/p\","
        " \"mode\": \"careful\", \"color\": \"red\","
        " \"urls\": [\"http://a:1\", \"http://b:65535/\"],"
        " \"inner\": {\"big\": 100, \"ratio\": 1},"
        " \"items\": [{\"name\": \"x\"}, {\"name\": \"y\", \"weight\": 16}],"
        " \"sizes\": [1, 100], \"one\": [{\"name\": \"solo\", \"weight\": 1}],"
        " \"span\": \"5-9\", \"comment\": {\"anything\": [1]}}";
    if (t_load(json, &c, &err) != 0)
        fail_msg("%s", err.msg);
    assert_false(c.flag);
    assert_int_equal(c.count, 16);
    assert_int_equal(c.bytes, 0);
    assert_string_equal(c.label, "1234567");
    assert_string_equal(c.path, "/p");
    assert_string_equal(c.mode, "careful");
    assert_int_equal(c.color, T_RED);
    assert_int_equal(c.nurls, 2);
    assert_string_equal(c.hosts[1], "b");
    assert_int_equal(c.ports[0], 1);
    assert_int_equal(c.ports[1], 65535);
    assert_int_equal(c.inner.big, 100);
    assert_true(c.inner.ratio == 1.0);
    assert_int_equal(c.nitems, 2);
    assert_string_equal(c.items[0].name, "x");
    assert_int_equal(c.items[0].weight, 4);   /* each element starts from the defaults */
    assert_int_equal(c.items[1].weight, 16);
    assert_int_equal(c.nsizes, 2);
    assert_int_equal(c.sizes[1], 100);
    assert_string_equal(c.one.name, "solo");
    assert_int_equal(c.lo, 5);
    assert_int_equal(c.hi, 9);
}

static void test_parse_keeps_what_is_not_given(void **state)
{
    (void)state;
    struct t_conf c;
    struct error err = {0};
    json_t *root;
    assert_int_equal(t_load("{\"count\": 3}", &c, &err), 0);
    assert_int_equal(schema_json_parse("{\"bytes\": 7}", 12, "u.json", &root, &err), 0);
    assert_int_equal(schema_parse(t_fields, &c, root, "u.json", &err), 0);
    json_decref(root);
    assert_int_equal(c.count, 3);   /* a second file goes over the first */
    assert_int_equal(c.bytes, 7);
}

static void test_ranges(void **state)
{
    (void)state;
    struct t_conf c;
    struct error err;
    assert_int_equal(t_load("{\"count\": 1}", &c, &err), 0);
    assert_int_equal(t_load("{\"inner\": {\"big\": -5}}", &c, &err), 0);
    assert_int_equal(t_load("{\"inner\": {\"big\": 1099511627776, \"ratio\": 0.5}}", &c, &err),
                     0);
    assert_int_equal(c.inner.big, (int64_t)1 << 40);
    assert_int_equal(t_load("{\"inner\": {\"ratio\": 0}}", &c, &err), 0);
    t_expect_error("{\"count\": 40}", "t.json: count: must be an integer between 1 and 16, got 40");
    t_expect_error("{\"count\": 0}", "t.json: count: must be an integer between 1 and 16, got 0");
    t_expect_error("{\"bytes\": -1}",
                   "t.json: bytes: must be an integer between 0 and 1000, got -1");
    t_expect_error("{\"inner\": {\"big\": -6}}",
                   "t.json: inner.big: must be an integer between -5 and 1099511627776, got -6");
    t_expect_error("{\"inner\": {\"ratio\": 1.5}}",
                   "t.json: inner.ratio: must be a number between 0 and 1, got 1.5");
    t_expect_error("{\"count\": 99999999999999}",
                   "t.json: count: must be an integer between 1 and 16, got 99999999999999");
}

static void test_wrong_types(void **state)
{
    (void)state;
    t_expect_error("{\"flag\": 1}", "t.json: flag: must be true or false, got 1");
    t_expect_error("{\"count\": \"4\"}", "t.json: count: must be an integer between 1 and 16, "
                                         "got \"4\"");
    t_expect_error("{\"count\": 4.0}", "t.json: count: must be an integer between 1 and 16, "
                                       "got 4.0");
    t_expect_error("{\"count\": null}", "t.json: count: must be an integer between 1 and 16, "
                                        "got null");
    t_expect_error("{\"label\": 5}", "t.json: label: must be a string, got 5");
    t_expect_error("{\"color\": true}", "t.json: color: must be one of red, green, got true");
    t_expect_error("{\"inner\": []}", "t.json: inner: must be an object, got []");
    t_expect_error("{\"items\": {}}", "t.json: items: must be a list of at most 3 objects, got {}");
    t_expect_error("{\"urls\": \"http://a:1\"}", "t.json: urls: must be a list of 1 to 2 URLs "
                   "like \"http://HOST:PORT\", got \"http://a:1\"");
    t_expect_error("{\"span\": 3}", "t.json: span: must be a string \"LO-HI\", got 3");
    t_expect_error("[1]", "t.json: the top level must be a JSON object");
}

static void test_strings(void **state)
{
    (void)state;
    t_expect_error("{\"label\": \"12345678\"}", "t.json: label: must be a string of at most 7 "
                                                "bytes, got 8 bytes");
    t_expect_error("{\"path\": \"p\"}", "t.json: path: \"p\" must start with /");
    t_expect_error("{\"path\": \"\"}", "t.json: path: \"\" must start with /");
    t_expect_error("{\"mode\": \"carefull\"}", "t.json: mode: \"carefull\" is not one of fast, "
                                               "careful; did you mean \"careful\"?");
    t_expect_error("{\"color\": \"blue\"}", "t.json: color: \"blue\" is not one of red, green");
    t_expect_error("{\"items\": [{\"name\": \"\"}]}",
                   "t.json: items[0].name: must be a non-empty string, got \"\"");
}

static void test_nested_paths(void **state)
{
    (void)state;
    t_expect_error("{\"items\": [{\"name\": \"a\"}, {\"name\": \"b\"}, {\"name\": \"c\", "
                   "\"weight\": 40}]}",
                   "t.json: items[2].weight: must be an integer between 1 and 16, got 40");
    t_expect_error("{\"sizes\": [5, 0]}", "t.json: sizes[1]: must be an integer between 1 and "
                                          "100, got 0 (sizes are rows)");
    t_expect_error("{\"one\": [{\"name\": \"a\", \"weight\": \"x\"}]}",
                   "t.json: one[0].weight: must be an integer between 1 and 16, got \"x\"");
    t_expect_error("{\"urls\": [\"http://a:1\", \"ftp://b\"]}",
                   "t.json: urls[1]: must be a URL like \"http://HOST:PORT\" "
                   "(\"http://[IPV6]:PORT\"), got \"ftp://b\"");
    t_expect_error("{\"urls\": [\"http://a\"]}",
                   "t.json: urls[0]: must be a URL like \"http://HOST:PORT\" "
                   "(\"http://[IPV6]:PORT\"), got \"http://a\"");
    t_expect_error("{\"urls\": [\"http://a:1/x\"]}",
                   "t.json: urls[0]: must be a URL like \"http://HOST:PORT\" "
                   "(\"http://[IPV6]:PORT\"), got \"http://a:1/x\"");
    /* One server twice (a trailing slash, another case): its series
     * came twice in /metrics. */
    t_expect_error("{\"urls\": [\"http://a:1\", \"http://A:1/\"]}",
                   "t.json: urls[1]: names the same server as [0] (A:1): list each once");
}

static void test_unknown_fields(void **state)
{
    (void)state;
    t_expect_error("{\"cuont\": 1}", "t.json: cuont: unknown field; did you mean \"count\"?");
    t_expect_error("{\"inner\": {\"ratoi\": 1}}",
                   "t.json: inner.ratoi: unknown field; did you mean \"ratio\"?");
    t_expect_error("{\"items\": [{\"name\": \"a\"}, {\"wieght\": 1}]}",
                   "t.json: items[1].wieght: unknown field; did you mean \"weight\"?");
    t_expect_error("{\"inner\": {\"zzz\": 1}}",
                   "t.json: inner.zzz: unknown field (known here: big, ratio)");
    /* An unknown field is reported before a bad value elsewhere in the object. */
    t_expect_error("{\"count\": 0, \"lable\": \"x\"}",
                   "t.json: lable: unknown field; did you mean \"label\"?");
}

static void test_suggest(void **state)
{
    (void)state;
    static const char *const names[] = {"max_connections", "max_header_bytes", "timeout_ms",
                                        "limits", "idle_timeout_ms"};
    struct { const char *typo, *want; } cases[] = {
        {"max_conections", "max_connections"}, {"max_headers", "max_header_bytes"},
        {"timeout", "timeout_ms"}, {"limts", "limits"}, {"lmiits", "limits"},
        {"idle_timeuot_ms", "idle_timeout_ms"}, {"nope", NULL}, {"x", NULL}, {"", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = schema_suggest(cases[i].typo, names, 5);
        if (!(got == cases[i].want || (got && cases[i].want && !strcmp(got, cases[i].want))))
            fail_msg("%s: got %s, want %s", cases[i].typo, got ? got : "none",
                     cases[i].want ? cases[i].want : "none");
    }
}

static void test_required_and_counts(void **state)
{
    (void)state;
    t_expect_error("{\"items\": [{\"weight\": 2}]}",
                   "t.json: items[0].name: missing (must be a non-empty string)");
    t_expect_error("{\"items\": [{\"name\": \"a\"}, {\"name\": \"b\"}, {\"name\": \"c\"}, "
                   "{\"name\": \"d\"}]}",
                   "t.json: items: must be a list of at most 3 objects, got an array of 4");
    t_expect_error("{\"sizes\": []}", "t.json: sizes: must be a list of 1 to 4 integers, got []");
    t_expect_error("{\"one\": []}", "t.json: one: must be a list of exactly 1 object, got []");
    t_expect_error("{\"urls\": []}",
                   "t.json: urls: must be a list of 1 to 2 URLs like \"http://HOST:PORT\", got []");
    t_expect_error("{\"urls\": [\"http://a:1\", \"http://b:1\", \"http://c:1\"]}",
                   "t.json: urls: must be a list of 1 to 2 URLs like \"http://HOST:PORT\", got "
                   "an array of 3");
}

static void test_checks(void **state)
{
    (void)state;
    t_expect_error("{\"inner\": {\"big\": 101, \"ratio\": 0.75}}",
                   "t.json: inner.ratio: must be at most 0.5 when big is over 100");
    t_expect_error("{\"items\": [{\"name\": \"ok\"}, {\"name\": \"bad\"}]}",
                   "t.json: items[1]: an item may not be called bad");
    t_expect_error("{\"span\": \"x\"}", "t.json: span: must be a string \"LO-HI\", got \"x\"");
}

static void test_json_errors(void **state)
{
    (void)state;
    t_expect_error("{\"a\": 1, \"a\": 2}",
                   "t.json: line 1, column 12: invalid JSON: duplicate object key near '\"a\"'");
    struct error err = {0};
    json_t *root;
    assert_int_equal(schema_json_read("/nonexistent/x.json", 100, &root, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "/nonexistent/x.json: cannot open"));
    char path[4096];
    test_scratch_template(path, sizeof path, "schema");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "{\n  \"count\": 3,\n  oops\n}\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    assert_int_equal(schema_json_read(path, 1000, &root, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "line 3"));
    assert_int_equal(schema_json_read(path, 10, &root, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "larger than 10 bytes"));
    unlink(path);
}

static void test_doc(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    schema_doc(f, t_fields);
    fclose(f);
    static const char *const rows[] = {
        "| field | values | default | meaning |\n| --- | --- | --- | --- |\n",
        "| `flag` | boolean | `true` | a switch |\n",
        "| `count` | integer 1..16 | `2` | a count |\n",
        "| `label` | string | `\"abc\"` | a short label |\n",
        "| `path` | path (`/...`) | none | a path |\n",
        "| `mode` | `fast`, `careful` | `\"fast\"` | a string choice |\n",
        "| `color` | `red`, `green` | `\"green\"` | an enum |\n",
        "| `urls` | 1..2 URLs `http://HOST:PORT` (`http://[IPV6]:PORT`) | `[]` | servers |\n",
        "| `inner.big` *(ext)* | integer -5..1099511627776 | `9` | a large one |\n",
        "| `inner.ratio` *(ext)* | number 0..1 | `0.25` | a fraction |\n",
        "| `items` | list of 0..3 objects | `[]` | objects |\n",
        "| `items[].name` | non-empty string | required | its name |\n",
        "| `sizes` | list of 1..4 integers 1..100 | `[]` | integers |\n",
        "| `one[].weight` | integer 1..16 | `4` | its weight |\n",
        "| `span` | a string \"LO-HI\" | `\"1-2\"` | irregular |\n",
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!strstr(text, rows[i]))
            fail_msg("row %s not in:\n%s", rows[i], text);
    free(text);
}

static void test_validate_catches_bad_rows(void **state)
{
    (void)state;
    char msg[200];
    const struct schema_field out_of_range[] = {
        {SCHEMA_F_INT("count", struct t_conf, count), .min = 1, .max = 16, .def = 0, .doc = "d"},
        SCHEMA_END_ROW,
    };
    assert_int_equal(schema_validate(out_of_range, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "count"));
    const struct schema_field twice[] = {
        {SCHEMA_F_BOOL("flag", struct t_conf, flag), .doc = "d"},
        {SCHEMA_F_BOOL("flag", struct t_conf, flag), .doc = "d"},
        SCHEMA_END_ROW,
    };
    assert_int_equal(schema_validate(twice, msg, sizeof msg), -1);
    const struct schema_field no_doc[] = {
        {SCHEMA_F_BOOL("flag", struct t_conf, flag)},
        SCHEMA_END_ROW,
    };
    assert_int_equal(schema_validate(no_doc, msg, sizeof msg), -1);
    const struct schema_field wide_item = {.type = SCHEMA_INT64, .min = 0, .max = 1};
    const struct schema_field stride[] = {
        {SCHEMA_F_ARRAY("sizes", struct t_conf, sizes, nsizes, &wide_item), .doc = "d"},
        SCHEMA_END_ROW,
    };
    assert_int_equal(schema_validate(stride, msg, sizeof msg), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_valid),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_parse_keeps_what_is_not_given),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_nested_paths),
        cmocka_unit_test(test_unknown_fields),
        cmocka_unit_test(test_suggest),
        cmocka_unit_test(test_required_and_counts),
        cmocka_unit_test(test_checks),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_doc),
        cmocka_unit_test(test_validate_catches_bad_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

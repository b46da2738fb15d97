/* test_config.c - defaults, every field, and errors that name file and field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gateway/config.h"
#include "tests/unit/scratch.h"

static void assert_error_mentions(const struct error *err, const char *a, const char *b)
{
    if (!strstr(err->msg, a) || (b && !strstr(err->msg, b)))
        fail_msg("error \"%s\" should mention \"%s\"%s%s", err->msg, a, b ? " and " : "",
                 b ? b : "");
}

static void test_defaults(void **state)
{
    (void)state;
    struct config c;
    config_defaults(&c);
    assert_string_equal(c.http.listen_host, "127.0.0.1");
    assert_int_equal(c.http.listen_port, 8000);
    assert_int_equal(c.http.io_threads, 0);
    assert_string_equal(c.model_repository, "models");
    assert_int_equal(c.http.limits.max_header_bytes, 16384);
    assert_int_equal(c.http.limits.max_body_bytes, 67108864);
    assert_int_equal(c.http.limits.max_connections, 10000);
    assert_int_equal(c.http.limits.header_timeout_ms, 10000);
    assert_int_equal(c.http.limits.idle_timeout_ms, 60000);
    assert_string_equal(c.state_dir, "state");
    assert_string_equal(c.jobs.dir, "");   /* <state_dir>/jobs, resolved by the jobs runner */
    assert_int_equal(c.jobs.max_input_bytes, 1073741824);
}

static void test_full(void **state)
{
    (void)state;
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    const char *json = "{\"listen\": \"0.0.0.0:9000\", \"io_threads\": 3,"
                       " \"model_repository\": \"/srv/models\","
                       " \"limits\": {\"max_header_bytes\": 1024, \"max_body_bytes\": 10,"
                       "  \"max_connections\": 5, \"header_timeout_ms\": 100,"
                       "  \"idle_timeout_ms\": 200},"
                       " \"shutdown_timeout_ms\": 1500, \"log_level\": \"debug\","
                       " \"debug_endpoints\": true}";
    assert_int_equal(config_load_string(&c, json, "x.json", &err), 0);
    assert_string_equal(c.http.listen_host, "0.0.0.0");
    assert_int_equal(c.http.listen_port, 9000);
    assert_int_equal(c.http.io_threads, 3);
    assert_string_equal(c.model_repository, "/srv/models");
    assert_int_equal(c.http.limits.max_header_bytes, 1024);
    assert_int_equal(c.http.limits.max_body_bytes, 10);
    assert_int_equal(c.http.limits.max_connections, 5);
    assert_int_equal(c.http.limits.header_timeout_ms, 100);
    assert_int_equal(c.http.limits.idle_timeout_ms, 200);
    assert_int_equal(c.shutdown_timeout_ms, 1500);
    assert_int_equal(c.log_level, LOG_DEBUG);
    assert_true(c.debug_endpoints);
}

static void test_partial_keeps_defaults(void **state)
{
    (void)state;
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    assert_int_equal(config_load_string(&c, "{\"limits\": {\"max_body_bytes\": 5}}", "p.json", &err), 0);
    assert_int_equal(c.http.limits.max_body_bytes, 5);
    assert_int_equal(c.http.limits.max_header_bytes, 16384);
    assert_int_equal(c.http.listen_port, 8000);
}

struct bad_case {
    const char *json;
    const char *mention1, *mention2;
};

static void test_errors_name_file_and_field(void **state)
{
    (void)state;
    static const struct bad_case cases[] = {
        {"{", "bad.json", "line 1"},
        {"[]", "bad.json", "object"},
        {"{\"limts\": {}}", "bad.json", "limts"},
        {"{\"limits\": {\"max_header_bytes\": \"big\"}}", "bad.json", "limits.max_header_bytes"},
        {"{\"limits\": {\"max_header_bytes\": 10}}",
         "limits.max_header_bytes: must be an integer between 256 and 16777216, got 10", NULL},
        {"{\"limits\": {\"max_connections\": 0}}", "limits.max_connections", NULL},
        {"{\"limits\": {\"header_timeout_ms\": -1}}", "limits.header_timeout_ms", NULL},
        {"{\"limits\": {\"idle_timeout_ms\": 1.5}}", "limits.idle_timeout_ms", "integer"},
        {"{\"limits\": {\"max_body_bytes\": -1}}", "limits.max_body_bytes", NULL},
        {"{\"limits\": {\"nope\": 1}}", "limits.nope", "unknown"},
        {"{\"limits\": 3}", "limits", "object"},
        {"{\"io_threads\": -2}", "io_threads", NULL},
        {"{\"io_threads\": \"4\"}", "io_threads", "integer"},
        {"{\"listen\": 8000}", "listen", "string"},
        {"{\"listen\": \"localhost\"}", "listen", "HOST:PORT"},
        {"{\"listen\": \"localhost:99999\"}", "listen", "0..65535"},
        {"{\"listen\": \":80\"}", "listen", "host"},
        {"{\"listen\": \"::1:80\"}", "listen", "bracketed"},
        {"{\"model_repository\": \"\"}", "model_repository", NULL},
        {"{\"log_level\": \"loud\"}", "log_level", NULL},
        {"{\"debug_endpoints\": 1}", "debug_endpoints", NULL},
        {"{\"state_dir\": \"\"}", "state_dir", NULL},
        {"{\"jobs\": {\"max_input_bytes\": 0}}", "jobs.max_input_bytes", "between 1"},
        {"{\"jobs\": {\"dri\": \"x\"}}", "jobs.dri", "unknown"},
        {"{\"io_threads\": 1, \"io_threads\": 2}", "bad.json", "duplicate"},
        {"{\"proxy\": {\"routes\": [{\"prefix\": \"/a/\", \"urls\": [\"http://h:1\"],"
         " \"idempotent\": 1}]}}", "proxy.routes[0].idempotent", "true or false"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct config c;
        struct error err = {0};
        config_defaults(&c);
        int rc = config_load_string(&c, cases[i].json, "bad.json", &err);
        if (rc != -BG_ECONFIG)
            fail_msg("case %zu (%s): expected -BG_ECONFIG, got %d", i, cases[i].json, rc);
        assert_error_mentions(&err, cases[i].mention1, cases[i].mention2);
        assert_non_null(strstr(err.msg, "bad.json"));
    }
}

static void expect_message(const char *json, const char *msg)
{
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    if (config_load_string(&c, json, "h.json", &err) != -BG_ECONFIG || strcmp(err.msg, msg) != 0)
        fail_msg("%s:\n  got  \"%s\"\n  want \"%s\"", json, err.msg, msg);
}

static void test_unknown_fields_suggest(void **state)
{
    (void)state;
    expect_message("{\"limits\": {\"max_conections\": 10}}",
                   "h.json: limits.max_conections: unknown field; did you mean "
                   "\"max_connections\"?");
    expect_message("{\"log_levle\": \"info\"}",
                   "h.json: log_levle: unknown field; did you mean \"log_level\"?");
    expect_message("{\"proxy\": {\"routes\": [{\"prefix\": \"/a/\", \"urls\": [\"http://h:1\"]},"
                   " {\"prefix\": \"/b/\", \"urls\": [\"http://h:1\"], \"pipelin\": 2}]}}",
                   "h.json: proxy.routes[1].pipelin: unknown field; did you mean \"pipeline\"?");
    /* Nothing close: the section's fields are listed instead. */
    expect_message("{\"limits\": {\"nope\": 1}}",
                   "h.json: limits.nope: unknown field (known here: max_header_bytes, "
                   "max_body_bytes, max_connections, header_timeout_ms, idle_timeout_ms)");
    expect_message("{\"log_level\": \"wran\"}",
                   "h.json: log_level: \"wran\" is not one of debug, info, warn, error; did you "
                   "mean \"warn\"?");
}

static void test_proxy_routes(void **state)
{
    (void)state;
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    const char *json = "{\"proxy\": {\"routes\": ["
                       "{\"prefix\": \"/a/\", \"urls\": [\"http://h1:81\", \"http://h2:82/\"],"
                       " \"strip_prefix\": true, \"pipeline\": 16, \"health_path\": \"/hz\","
                       " \"health_interval_ms\": 10},"
                       "{\"prefix\": \"/b/\", \"urls\": [\"http://h3:83\"]}],"
                       " \"timeout_ms\": 5, \"max_idle\": 1, \"model_metadata\": false}}";
    if (config_load_string(&c, json, "p.json", &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c.proxy.nroutes, 2);
    const struct config_proxy_route *a = &c.proxy.routes[0], *b = &c.proxy.routes[1];
    assert_string_equal(a->prefix, "/a/");
    assert_int_equal(a->nurls, 2);
    assert_string_equal(a->hosts[1], "h2");
    assert_int_equal(a->ports[1], 82);
    assert_true(a->strip_prefix);
    assert_int_equal(a->pipeline, 16);
    assert_string_equal(a->health_path, "/hz");
    assert_int_equal(a->health_interval_ms, 10);
    /* The second route has its own defaults, not the first one's values. */
    assert_false(b->strip_prefix);
    assert_int_equal(b->pipeline, 1);
    assert_string_equal(b->health_path, "");
    assert_int_equal(b->health_interval_ms, 2000);
    assert_int_equal(c.proxy.timeout_ms, 5);
    assert_int_equal(c.proxy.max_idle, 1);
    assert_false(c.proxy.model_metadata);
    assert_false(c.model_repository_set);
    expect_message("{\"proxy\": {\"routes\": [{\"prefix\": \"/a/\", \"urls\": [\"http://h:1\"]},"
                   " {\"prefix\": \"/a/\", \"urls\": [\"http://h:2\"]}]}}",
                   "h.json: proxy.routes[1]: prefix \"/a/\" appears twice");
    expect_message("{\"proxy\": {\"routes\": [{\"prefix\": \"/a/\", \"urls\": [\"http://h:1\","
                   " \"http://h\"]}]}}",
                   "h.json: proxy.routes[0].urls[1]: must be a URL like \"http://HOST:PORT\", "
                   "got \"http://h\"");
    expect_message("{\"proxy\": {\"routes\": [{\"prefix\": \"/a/\"}]}}",
                   "h.json: proxy.routes[0].urls: missing (must be a list of 1 to 8 URLs like "
                   "\"http://HOST:PORT\")");
}

static void test_model_repository_set_when_given(void **state)
{
    (void)state;
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    assert_int_equal(config_load_string(&c, "{\"model_repository\": \"m\"}", "r.json", &err), 0);
    assert_true(c.model_repository_set);
    assert_string_equal(c.model_repository, "m");
}

static void test_listen_forms(void **state)
{
    (void)state;
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    assert_int_equal(config_set_listen(&c, "[::1]:8080", "--listen", &err), 0);
    assert_string_equal(c.http.listen_host, "::1");
    assert_int_equal(c.http.listen_port, 8080);
    assert_int_equal(config_set_listen(&c, "localhost:0", "--listen", &err), 0);
    assert_string_equal(c.http.listen_host, "localhost");
    assert_int_equal(c.http.listen_port, 0);
    assert_int_not_equal(config_set_listen(&c, "[::1]8080", "--listen", &err), 0);
    assert_int_not_equal(config_set_listen(&c, "host:80x", "--listen", &err), 0);
    assert_int_not_equal(config_set_listen(&c, "host:", "--listen", &err), 0);
    assert_non_null(strstr(err.msg, "--listen"));
}

static void test_missing_file(void **state)
{
    (void)state;
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    assert_int_equal(config_load_file(&c, "/nonexistent/bg.json", &err), -BG_ECONFIG);
    assert_error_mentions(&err, "/nonexistent/bg.json", "cannot open");
}

static void test_file_roundtrip(void **state)
{
    (void)state;
    char path[4096];
    test_scratch_template(path, sizeof path, "config");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *json = "{\n  \"io_threads\": 2,\n  \"limits\": {\"max_connections\": \"x\"}\n}\n";
    assert_int_equal(write(fd, json, strlen(json)), (ssize_t)strlen(json));
    close(fd);
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    assert_int_equal(config_load_file(&c, path, &err), -BG_ECONFIG);
    assert_error_mentions(&err, path, "limits.max_connections");
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_partial_keeps_defaults),
        cmocka_unit_test(test_errors_name_file_and_field),
        cmocka_unit_test(test_unknown_fields_suggest),
        cmocka_unit_test(test_proxy_routes),
        cmocka_unit_test(test_model_repository_set_when_given),
        cmocka_unit_test(test_listen_forms),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_file_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

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
#include "serving/jobs.h"
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
    assert_int_equal(c.jobs.runner_priority, JOBS_PRIORITY_LOW);   /* the default */
    assert_int_equal(config_load_string(&c, "{\"jobs\": {\"runner_priority\": \"idle\"}}",
                                        "x.json", &err), 0);
    assert_int_equal(c.jobs.runner_priority, JOBS_PRIORITY_IDLE);
    assert_true(c.metrics.triton_names);   /* Triton's names on /metrics by default */
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
        {"{\"shared_memory\": {\"allow_remote\": \"yes\"}}", "shared_memory.allow_remote",
         "true or false"},
        {"{\"shared_memory\": {\"allow_remotes\": true}}", "shared_memory.allow_remotes",
         "unknown"},
        {"{\"state_dir\": \"\"}", "state_dir", NULL},
        {"{\"jobs\": {\"max_input_bytes\": 0}}", "jobs.max_input_bytes", "between 1"},
        {"{\"jobs\": {\"dri\": \"x\"}}", "jobs.dri", "unknown"},
        {"{\"jobs\": {\"runner_priority\": 10}}", "jobs.runner_priority", NULL},
        {"{\"metrics\": {\"triton_names\": \"no\"}}", "metrics.triton_names", "true or false"},
        {"{\"metrics\": {\"triton\": false}}", "metrics.triton", "unknown"},
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
    /* "" was taken as the default, silently, where state_dir's "" is refused. */
    expect_message("{\"jobs\": {\"dir\": \"\"}}",
                   "h.json: jobs.dir: must be a non-empty string, got \"\"");
    expect_message("{\"jobs\": {\"runner_priority\": \"idel\"}}",
                   "h.json: jobs.runner_priority: \"idel\" is not one of low, idle, normal; did "
                   "you mean \"idle\"?");
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
                   "h.json: proxy.routes[0].urls[1]: must be a URL like \"http://HOST:PORT\" "
                   "(\"http://[IPV6]:PORT\"), got \"http://h\"");
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

/* ---- auth and tenants (SPEC.md "Tenants and keys") ---- */

#define KA "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define KB "sha256:BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
#define KC "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static struct config tc;   /* large (the tenants table): kept off the stack */

static int load_tenants(const char *json, struct error *err)
{
    config_defaults(&tc);
    return config_load_string(&tc, json, "t.json", err);
}

static void expect_tenants_error(const char *json, const char *a, const char *b)
{
    struct error err = {0};
    if (load_tenants(json, &err) != -BG_ECONFIG)
        fail_msg("%s: expected a configuration error mentioning \"%s\"", json, a);
    assert_error_mentions(&err, a, b);
}

static void test_tenants_defaults(void **state)
{
    (void)state;
    config_defaults(&tc);
    assert_int_equal(tc.tenants.n, 1);
    const struct tenant_config *d = &tc.tenants.t[0];
    assert_string_equal(d->name, "default");
    assert_false(tc.tenants.auth_required);
    assert_int_equal(d->nkeys, 0);
    assert_int_equal(d->nmodels, 0);          /* every model */
    assert_true(d->share == 0 && d->limit == 1 && d->lend);
    assert_int_equal(d->max_inflight, 0);
    assert_true(d->rate_rows_per_s == 0);
    assert_false(d->admin);
    /* A file without tenants keeps them. */
    struct error err = {0};
    assert_int_equal(load_tenants("{\"io_threads\": 2}", &err), 0);
    assert_int_equal(tc.tenants.n, 1);
    assert_false(tc.tenants.auth_required);
}

static void test_tenants_full(void **state)
{
    (void)state;
    struct error err = {0};
    const char *json =
        "{\"tenants\": ["
        " {\"name\": \"search\", \"keys\": [\"" KA "\", \"" KB "\"], \"models\": [\"dig*\", \"x\"],"
        "  \"share\": 0.7, \"limit\": 0.9, \"lend\": false, \"max_inflight\": 8,"
        "  \"rate_rows_per_s\": 2.5, \"admin\": true},"
        " {\"name\": \"research\", \"share\": 0.3}]}";
    assert_int_equal(load_tenants(json, &err), 0);
    assert_int_equal(tc.tenants.n, 3);
    assert_string_equal(tc.tenants.t[0].name, "default");
    const struct tenant_config *s = &tc.tenants.t[1];
    assert_string_equal(s->name, "search");
    assert_int_equal(s->nkeys, 2);
    assert_int_equal(s->keys[0][0], 0xaa);
    assert_int_equal(s->keys[1][31], 0xbb);   /* upper-case hex too */
    assert_int_equal(s->nmodels, 2);
    assert_string_equal(s->models[0], "dig*");
    assert_true(s->share == 0.7 && s->limit == 0.9 && !s->lend && s->admin);
    assert_int_equal(s->max_inflight, 8);
    assert_true(s->rate_rows_per_s == 2.5);
    const struct tenant_config *r = &tc.tenants.t[2];
    assert_string_equal(r->name, "research");
    assert_true(r->share == 0.3 && r->limit == 1 && r->lend && !r->admin);
    assert_int_equal(r->nkeys, 0);
    /* Keys exist: auth.required defaults to true. */
    assert_true(tc.tenants.auth_required);
}

/* "[true once any tenant has keys]": the default follows the keys; a value
 * written in the file wins either way. */
static void test_auth_required_default_follows_keys(void **state)
{
    (void)state;
    struct error err = {0};
    assert_int_equal(load_tenants("{\"tenants\": [{\"name\": \"a\"}]}", &err), 0);
    assert_false(tc.tenants.auth_required);
    assert_int_equal(load_tenants("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" KA "\"]}]}",
                                  &err), 0);
    assert_true(tc.tenants.auth_required);
    assert_int_equal(load_tenants("{\"auth\": {\"required\": false}, \"tenants\": [{\"name\": "
                                  "\"a\", \"keys\": [\"" KA "\"]}]}", &err), 0);
    assert_false(tc.tenants.auth_required);
    assert_int_equal(load_tenants("{\"auth\": {\"required\": true}}", &err), 0);
    assert_true(tc.tenants.auth_required);
    assert_int_equal(load_tenants("{\"auth\": {}}", &err), 0);
    assert_false(tc.tenants.auth_required);
}

static void test_configured_default_is_t0(void **state)
{
    (void)state;
    struct error err = {0};
    const char *json = "{\"tenants\": [{\"name\": \"a\", \"share\": 0.2},"
                       " {\"name\": \"default\", \"share\": 0.5, \"models\": [\"pub-*\"],"
                       "  \"max_inflight\": 3}, {\"name\": \"b\", \"share\": 0.1}]}";
    assert_int_equal(load_tenants(json, &err), 0);
    assert_int_equal(tc.tenants.n, 3);
    assert_string_equal(tc.tenants.t[0].name, "default");
    assert_true(tc.tenants.t[0].share == 0.5);
    assert_int_equal(tc.tenants.t[0].max_inflight, 3);
    assert_string_equal(tc.tenants.t[0].models[0], "pub-*");
    assert_string_equal(tc.tenants.t[1].name, "a");
    assert_string_equal(tc.tenants.t[2].name, "b");
    /* Alone, too. */
    assert_int_equal(load_tenants("{\"tenants\": [{\"name\": \"default\", \"admin\": true}]}",
                                  &err), 0);
    assert_int_equal(tc.tenants.n, 1);
    assert_true(tc.tenants.t[0].admin);
}

/* `devices`: labels, budgets and prices; every refusal names the field. */
static void test_devices(void **state)
{
    (void)state;
    struct config c;
    struct error err = {0};
    config_defaults(&c);
    assert_int_equal(config_load_string(&c, "{\"devices\": {\"cpu0\": {\"memory_budget_bytes\": "
                                            "1048576, \"price_per_hour\": 0.2}, \"cuda1\": {}}}",
                                        "d.json", &err), 0);
    assert_int_equal(c.ndevices, 2);
    assert_string_equal(c.devices[0].name, "cpu0");
    assert_true(c.devices[0].memory_budget_bytes == 1048576);
    assert_true(c.devices[0].price_per_hour == 0.2);
    assert_true(c.devices[1].memory_budget_bytes == 0);
    assert_false(c.devices[1].keep_context);
    expect_message("{\"devices\": []}", "h.json: devices: expected an object, got an array");
    expect_message("{\"devices\": {\"gpu\": {}}}",
                   "h.json: devices.gpu: a device label is cpu, cuda or synthetic and a number "
                   "without leading zeros, at most 65535 (\"cpu0\", \"cuda1\")");
    /* The shape of a label, but no backend's: its price would apply nowhere. */
    expect_message("{\"devices\": {\"gpu0\": {\"price_per_hour\": 1}}}",
                   "h.json: devices.gpu0: a device label is cpu, cuda or synthetic and a number "
                   "without leading zeros, at most 65535 (\"cpu0\", \"cuda1\")");
    /* Labels no backend writes: cpu0's budget set as "cpu00" bound nothing. */
    expect_message("{\"devices\": {\"cpu00\": {\"memory_budget_bytes\": 1000}}}",
                   "h.json: devices.cpu00: a device label is cpu, cuda or synthetic and a number "
                   "without leading zeros, at most 65535 (\"cpu0\", \"cuda1\")");
    expect_message("{\"devices\": {\"cpu4294967296\": {}}}",
                   "h.json: devices.cpu4294967296: a device label is cpu, cuda or synthetic and a "
                   "number without leading zeros, at most 65535 (\"cpu0\", \"cuda1\")");
    assert_int_equal(config_load_string(&c, "{\"devices\": {\"cuda10\": {}, \"synthetic0\": "
                                            "{}}}", "d.json", &err), 0);
    expect_message("{\"devices\": {\"cpu0\": 3}}", "h.json: devices.cpu0: expected an object");
    expect_message("{\"devices\": {\"cpu0\": {\"memory_budget_bytes\": -1}}}",
                   "h.json: devices.cpu0.memory_budget_bytes: expected a whole number of bytes >= 0");
    expect_message("{\"devices\": {\"cpu0\": {\"price_per_hour\": \"x\"}}}",
                   "h.json: devices.cpu0.price_per_hour: expected a number from 0 to 1000000");
    /* The ledger's costs are millionths in 64 bits: 1e308 wrote -9.2e12. */
    expect_message("{\"devices\": {\"cpu0\": {\"price_per_hour\": 1e308}}}",
                   "h.json: devices.cpu0.price_per_hour: expected a number from 0 to 1000000");
    expect_message("{\"devices\": {\"cpu0\": {\"budget\": 1}}}",
                   "h.json: devices.cpu0.budget: unknown field (known: memory_budget_bytes, "
                   "price_per_hour, release_context)");
    expect_message("{\"devices\": {\"cuda0\": {\"release_context\": 1}}}",
                   "h.json: devices.cuda0.release_context: expected true or false");
}

static void test_tenant_key_errors(void **state)
{
    (void)state;
    /* Not the digest form; the value itself is never in the message (it may
     * be the raw key pasted by mistake). */
    struct error err = {0};
    assert_int_equal(load_tenants("{\"tenants\": [{\"name\": \"a\", \"keys\": "
                                  "[\"my-secret-key-123\"]}]}", &err), -BG_ECONFIG);
    assert_error_mentions(&err, "t.json: tenants[0].keys[0]: must be \"sha256:\" and 64 hex",
                          "hash-key");
    if (strstr(err.msg, "my-secret"))
        fail_msg("the message shows the value: %s", err.msg);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"sha256:abc\"]}]}",
                         "tenants[0].keys[0]: must be \"sha256:\"", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" KA "\", \"sha256:"
                         "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz\"]}]}",
                         "tenants[0].keys[1]: must be", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" KA "0\"]}]}",
                         "tenants[0].keys[0]", NULL);                /* 65 digits */
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"SHA256:"
                         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]}]}",
                         "tenants[0].keys[0]", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": [42]}]}",
                         "tenants[0].keys[0]: must be", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": \"" KA "\"}]}",
                         "tenants[0].keys: must be a list", NULL);
    char many[2048] = "{\"tenants\": [{\"name\": \"a\", \"keys\": [";
    for (int i = 0; i < 17; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"sha256:%064d\"",
                 i ? "," : "", i);
    strcat(many, "]}]}");
    expect_tenants_error(many, "tenants[0].keys: must be a list of at most 16", NULL);
    /* The same key twice: across tenants, and within one. */
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" KA "\", \"" KC "\"]},"
                         " {\"name\": \"b\", \"keys\": [\"" KB "\", \"" KC "\"]}]}",
                         "tenants[1].keys[1]: the same key as tenants[0].keys[1]", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" KA "\", \"" KA "\"]}]}",
                         "tenants[0].keys[1]: the same key as tenants[0].keys[0]", NULL);
    /* Upper and lower case hex are the same digest. */
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"keys\": [\"" KB "\"]}, {\"name\": "
                         "\"b\", \"keys\": [\"sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
                         "bbbbbbbbbbbbbbbb\"]}]}", "tenants[1].keys[0]: the same key", NULL);
}

static void test_tenant_errors(void **state)
{
    (void)state;
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\"}, {\"name\": \"a\"}]}",
                         "tenants[1].name: \"a\" is also the name of tenants[0]", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"default\"}, {\"name\": \"default\"}]}",
                         "tenants[1].name", "tenants[0]");
    expect_tenants_error("{\"tenants\": [{\"share\": 0.5}]}", "tenants[0].name: missing", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"\"}]}", "tenants[0].name", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a b\"}]}",
                         "tenants[0].name: \"a b\" may hold only", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"share\": 1.5}]}",
                         "tenants[0].share: must be a number between 0 and 1, got 1.5", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"share\": -0.1}]}",
                         "tenants[0].share: must be a number between 0 and 1", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"limit\": 2}]}",
                         "tenants[0].limit: must be a number between 0 and 1, got 2", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"share\": 0.6, \"limit\": 0.5}]}",
                         "tenants[0].limit: 0.5 is below share 0.6", NULL);
    /* 0 read as "no limit" at all (the whole device). */
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"limit\": 0}]}",
                         "tenants[0].limit: 0 would leave the tenant no device time", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"share\": 0.7}, {\"name\": \"b\","
                         " \"share\": 0.4}]}",
                         "tenants: the shares add up to 1.1 (a 0.7, b 0.4)", "at most");
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"max_inflight\": -1}]}",
                         "tenants[0].max_inflight: must be an integer between 0 and", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"rate_rows_per_s\": -5}]}",
                         "tenants[0].rate_rows_per_s: must be a number between 0", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"models\": [\"\"]}]}",
                         "tenants[0].models[0]", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"models\": \"*\"}]}",
                         "tenants[0].models: must be a list", NULL);
    /* Read as none given, an empty list let the tenant use every model. */
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"models\": []}]}",
                         "tenants[0].models: must be a list of 1 to 32 strings, got []", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"admin\": \"yes\"}]}",
                         "tenants[0].admin: must be true or false", NULL);
    expect_tenants_error("{\"tenants\": [{\"name\": \"a\", \"lend\": 1}]}",
                         "tenants[0].lend: must be true or false", NULL);
    expect_tenants_error("{\"tenants\": {\"name\": \"a\"}}", "tenants: must be a list", NULL);
    expect_tenants_error("{\"auth\": {\"required\": \"yes\"}}", "auth.required: must be true or "
                         "false", NULL);
    /* Shares that add up to exactly 1 are fine, rounding included. */
    struct error err = {0};
    assert_int_equal(load_tenants("{\"tenants\": [{\"name\": \"a\", \"share\": 0.7}, {\"name\": "
                                  "\"b\", \"share\": 0.2}, {\"name\": \"c\", \"share\": 0.1}]}",
                                  &err), 0);
    /* 63 tenants fit beside "default"; 64 do not. */
    char *big = malloc(64 * 40 + 64);
    assert_non_null(big);
    strcpy(big, "{\"tenants\": [");
    for (int i = 0; i < 64; i++)
        sprintf(big + strlen(big), "%s{\"name\": \"t%d\"}", i ? "," : "", i);
    strcat(big, "]}");
    expect_tenants_error(big, "tenants: must be a list of at most 63 objects", NULL);
    free(big);
}

static void test_tenant_unknown_fields(void **state)
{
    (void)state;
    expect_message("{\"tenants\": [{\"name\": \"a\", \"max_inflght\": 3}]}",
                   "h.json: tenants[0].max_inflght: unknown field; did you mean "
                   "\"max_inflight\"?");
    expect_message("{\"auth\": {\"requried\": true}}",
                   "h.json: auth.requried: unknown field; did you mean \"required\"?");
    expect_message("{\"tenant\": []}", "h.json: tenant: unknown field; did you mean "
                   "\"tenants\"?");
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
        cmocka_unit_test(test_tenants_defaults),
        cmocka_unit_test(test_tenants_full),
        cmocka_unit_test(test_auth_required_default_follows_keys),
        cmocka_unit_test(test_configured_default_is_t0),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_tenant_key_errors),
        cmocka_unit_test(test_tenant_errors),
        cmocka_unit_test(test_tenant_unknown_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_model_config.c - config.json of a model: defaults, every field, and
 * errors that name the file, the field and the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "backends/model.h"

static int parse(const char *json, struct model_config *c, struct error *err)
{
    return model_config_parse(json, strlen(json), "models/m/config.json", "m", c, err);
}

static void test_full(void **state)
{
    (void)state;
    struct model_config c;
    struct error err = {0};
    const char *json =
        "{\"name\":\"m\",\"backend\":\"cpu\","
        "\"inputs\":[{\"name\":\"in\",\"datatype\":\"FP32\",\"shape\":[8,8]}],"
        "\"outputs\":[{\"name\":\"out\",\"datatype\":\"FP32\",\"shape\":[10],"
        "\"labels\":\"sub/..names.txt\"}],"
        "\"layers\":[{\"type\":\"dense\",\"weight\":\"0.weight\",\"bias\":\"0.bias\","
        "\"activation\":\"gelu\"},{\"type\":\"dense\",\"weight\":\"2.weight\"},{\"type\":\"softmax\"}],"
        "\"batching\":{\"max_batch_size\":32,\"preferred_batch_sizes\":[8,16],"
        "\"max_queue_delay_us\":500,\"latency_budget_ms\":20,\"max_queue_size\":100},"
        "\"instances\":{\"count\":2,\"devices\":[0,1]},\"scheduling\":{\"weight\":3}}";
    assert_int_equal(parse(json, &c, &err), 0);
    assert_string_equal(c.name, "m");
    assert_int_equal(c.backend, MODEL_BACKEND_CPU);
    assert_int_equal(c.input.row_elems, 64);
    assert_int_equal(c.output.row_elems, 10);
    assert_string_equal(c.output.labels, "sub/..names.txt");   /* ".." only as a segment */
    assert_string_equal(c.input.labels, "");
    assert_int_equal(c.nlayers, 3);
    assert_int_equal(c.layers[0].act, DENSE_ACT_GELU);
    assert_string_equal(c.layers[1].bias, "");
    assert_int_equal(c.layers[2].type, MODEL_LAYER_SOFTMAX);
    assert_int_equal(c.batching.max_batch_size, 32);
    assert_int_equal(c.batching.npreferred, 2);
    assert_int_equal(c.batching.max_queue_delay_us, 500);
    assert_int_equal(c.batching.latency_budget_ms, 20);
    assert_int_equal(c.batching.max_queue_size, 100);
    assert_int_equal(c.instance_count, 2);
    assert_int_equal(c.ndevices, 2);
    assert_int_equal(c.sched_weight, 3);
}

static void test_defaults_and_name_from_folder(void **state)
{
    (void)state;
    struct model_config c;
    struct error err = {0};
    const char *json = "{\"backend\":\"synthetic\","
                       "\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],"
                       "\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]}";
    assert_int_equal(parse(json, &c, &err), 0);
    assert_string_equal(c.name, "m");
    assert_string_equal(c.input.datatype, "FP32");
    assert_int_equal(c.batching.max_batch_size, 64);
    assert_int_equal(c.batching.max_queue_delay_us, 1000);
    assert_int_equal(c.batching.max_queue_size, 4096);
    assert_int_equal(c.instance_count, 1);
    assert_int_equal(c.synthetic.base_us, 2000);
    assert_int_equal(c.synthetic.per_row_us, 20);
    assert_int_equal(c.synthetic.mode, SYNTHETIC_SLEEP);
    assert_int_equal(c.sched_weight, 1);
}

struct bad {
    const char *json;
    const char *mention;
};

#define IO "\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]"
#define DENSE "\"layers\":[{\"type\":\"dense\",\"weight\":\"w\"}]"

static void test_upstream(void **state)
{
    (void)state;
    struct model_config c;
    struct error err = {0};
    const char *json = "{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":"
                       "[\"http://127.0.0.1:8001\",\"http://srv:9000/\"],\"protocol\":\"tfserving\","
                       "\"max_inflight\":3,\"timeout_ms\":500}}";
    assert_int_equal(parse(json, &c, &err), 0);
    assert_int_equal(c.upstream.nurls, 2);
    assert_string_equal(c.upstream.hosts[1], "srv");
    assert_int_equal(c.upstream.ports[0], 8001);
    assert_int_equal(c.upstream.protocol, UPSTREAM_TFSERVING);
    assert_string_equal(c.upstream.model, "m");   /* defaults to our name */
    assert_int_equal(c.upstream.max_inflight, 3);
    assert_int_equal(c.upstream.timeout_ms, 500);
    assert_string_equal(c.upstream.health_path, "/v1/models/m");   /* tfserving's own */
    assert_int_equal(c.upstream.health_interval_ms, 2000);
    assert_true(c.upstream.idempotent);   /* inference is a pure function */
    json = "{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
           "\"idempotent\":false}}";
    assert_int_equal(parse(json, &c, &err), 0);
    assert_false(c.upstream.idempotent);
}

static void test_errors(void **state)
{
    (void)state;
    static const struct bad cases[] = {
        {"{", "invalid JSON"},
        {"{\"backend\":\"tpu\"," IO "," DENSE "}", "backend: \"tpu\""},
        {"{\"bakend\":\"cpu\"," IO "," DENSE "}", "bakend: unknown field"},
        {"{\"name\":\"other\"," IO "," DENSE "}", "differs from its folder"},
        {"{\"name\":\"m\"," DENSE "}", "inputs"},
        {"{\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}", "inputs"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[4]},{\"name\":\"z\",\"shape\":[4]}],"
         "\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}", "exactly one tensor"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[0]}],\"outputs\":[{\"name\":\"y\",\"shape\":[2]}],"
         DENSE "}", "inputs[0].shape[0]"},
        {"{\"inputs\":[{\"name\":\"x\",\"datatype\":\"INT8\",\"shape\":[4]}],"
         "\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}", "inputs[0].datatype"},
        {"{\"inputs\":[{\"shape\":[4]}],\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}",
         "inputs[0].name"},
        {"{" IO "}", "layers"},
        {"{" IO ",\"layers\":[{\"type\":\"conv\"}]}", "layers[0].type"},
        {"{" IO ",\"layers\":[{\"type\":\"dense\"}]}", "layers[0].weight"},
        {"{" IO ",\"layers\":[{\"type\":\"dense\",\"weight\":\"w\",\"activation\":\"swish\"}]}",
         "layers[0].activation"},
        {"{" IO ",\"layers\":[{\"type\":\"softmax\",\"weight\":\"w\"}]}", "layers[0].weight"},
        {"{\"backend\":\"synthetic\"," IO "," DENSE "}", "takes no layers"},
        {"{" IO "," DENSE ",\"batching\":{\"max_batch_size\":0}}", "batching.max_batch_size"},
        {"{" IO "," DENSE ",\"batching\":{\"preferred_batch_sizes\":[100]}}",
         "preferred_batch_sizes[0]"},
        {"{" IO "," DENSE ",\"batching\":{\"max_queue_delay_us\":-1}}", "max_queue_delay_us"},
        {"{" IO "," DENSE ",\"batching\":{\"max_queue_size\":\"big\"}}", "max_queue_size"},
        {"{" IO "," DENSE ",\"batching\":{\"delay\":1}}", "batching.delay"},
        {"{" IO "," DENSE ",\"instances\":{\"count\":0}}", "instances.count"},
        {"{" IO "," DENSE ",\"instances\":{\"devices\":[-1]}}", "instances.devices[0]"},
        {"{" IO "," DENSE ",\"scheduling\":{\"weight\":0}}",
         "scheduling.weight: must be an integer between 1 and 1000"},
        {"{" IO "," DENSE ",\"scheduling\":{\"weight\":1001}}", "scheduling.weight"},
        {"{" IO "," DENSE ",\"scheduling\":{\"share\":2}}", "scheduling.share"},
        {"{\"backend\":\"synthetic\"," IO ",\"synthetic\":{\"mode\":\"nap\"}}", "synthetic.mode"},
        {"{\"backend\":\"synthetic\"," IO ",\"synthetic\":{\"base_us\":-5}}", "synthetic.base_us"},
        {"{\"backend\":\"upstream\"," IO "}", "upstream"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[]}}", "upstream.urls"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"ftp://h:1\"]}}",
         "upstream.urls[0]"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h\"]}}",
         "upstream.urls[0]"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:99999\"]}}",
         "upstream.urls[0]"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
         "\"protocol\":\"grpc\"}}", "upstream.protocol"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
         "\"max_inflight\":0}}", "upstream.max_inflight"},
        /* Sent in request lines: a CR LF made one call two requests. */
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
         "\"model\":\"m/infer HTTP/1.1\\r\\nX: 1\"}}", "upstream.model: byte 1"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
         "\"health_path\":\"/h x\"}}", "upstream.health_path: byte 2"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
         "\"timeout\":5}}", "upstream.timeout: unknown"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
         "\"health_path\":\"ready\"}}", "upstream.health_path"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
         "\"health_interval_ms\":-1}}", "upstream.health_interval_ms"},
        {"{\"backend\":\"upstream\"," IO ",\"upstream\":{\"urls\":[\"http://h:1\"],"
         "\"idempotent\":1}}", "upstream.idempotent: must be true or false"},
        {"{" IO "," DENSE ",\"batching\":{\"batch_timeout_ms\":-1}}", "batching.batch_timeout_ms"},
        {"{\"backend\":\"upstream\"," IO "," DENSE ",\"upstream\":{\"urls\":[\"http://h:1\"]}}",
         "takes no layers"},
        /* labels: an output's, a path inside the model's folder */
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[4],\"labels\":\"l.txt\"}],"
         "\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}", "inputs[0].labels: unknown"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],\"outputs\":[{\"name\":\"y\","
         "\"shape\":[2],\"labels\":\"/etc/passwd\"}]," DENSE "}",
         "outputs[0].labels: \"/etc/passwd\""},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],\"outputs\":[{\"name\":\"y\","
         "\"shape\":[2],\"labels\":\"a/../../b\"}]," DENSE "}", "inside the model's folder"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],\"outputs\":[{\"name\":\"y\","
         "\"shape\":[2],\"labels\":\"..\"}]," DENSE "}", "outputs[0].labels"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],\"outputs\":[{\"name\":\"y\","
         "\"shape\":[2],\"labels\":\"\"}]," DENSE "}", "outputs[0].labels"},
        {"{\"inputs\":[{\"name\":\"x\",\"shape\":[4]}],\"outputs\":[{\"name\":\"y\","
         "\"shape\":[2],\"labels\":3}]," DENSE "}", "outputs[0].labels"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct model_config c;
        struct error err = {0};
        int rc = parse(cases[i].json, &c, &err);
        if (rc != -BG_ECONFIG)
            fail_msg("case %zu (%s): expected -BG_ECONFIG, got %d", i, cases[i].json, rc);
        if (!strstr(err.msg, cases[i].mention) || !strstr(err.msg, "models/m/config.json"))
            fail_msg("case %zu: \"%s\" should name the file and mention \"%s\"", i, err.msg,
                     cases[i].mention);
    }
}

static void expect_message(const char *json, const char *dir_name, const char *msg)
{
    struct model_config c;
    struct error err = {0};
    int rc = model_config_parse(json, strlen(json), "models/m/config.json", dir_name, &c, &err);
    if (rc != -BG_ECONFIG || strcmp(err.msg, msg) != 0)
        fail_msg("%s:\n  got  %d \"%s\"\n  want \"%s\"", json, rc, err.msg, msg);
}

static void test_unknown_fields_suggest(void **state)
{
    (void)state;
    expect_message("{\"bakend\":\"cpu\"," IO "," DENSE "}", "m",
                   "models/m/config.json: bakend: unknown field; did you mean \"backend\"?");
    expect_message("{" IO "," DENSE ",\"instances\":{\"threads\":2}}", "m",
                   "models/m/config.json: instances.threads: 2, but only an encoder model "
                   "computes a batch on several threads (docs/EMBEDDINGS.md); use "
                   "instances.count for more batches at once");
    expect_message("{" IO "," DENSE ",\"batching\":{\"max_batch_szie\":8}}", "m",
                   "models/m/config.json: batching.max_batch_szie: unknown field; did you mean "
                   "\"max_batch_size\"?");
    expect_message("{" IO ",\"layers\":[{\"type\":\"softmax\"},{\"type\":\"dense\","
                   "\"weight\":\"w\",\"activaton\":\"relu\"}]}", "m",
                   "models/m/config.json: layers[1].activaton: unknown field; did you mean "
                   "\"activation\"?");
    expect_message("{\"inputs\":[{\"name\":\"x\",\"shpae\":[4]}],"
                   "\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}", "m",
                   "models/m/config.json: inputs[0].shpae: unknown field; did you mean "
                   "\"shape\"?");
    expect_message("{\"backend\":\"cdua\"," IO "," DENSE "}", "m",
                   "models/m/config.json: backend: \"cdua\" is not one of auto, cpu, cuda, "
                   "synthetic, upstream, openai; did you mean \"cuda\"?");
    expect_message("{\"backend\":\"synthetic\"," IO ",\"synthetic\":{\"speed\":1}}", "m",
                   "models/m/config.json: synthetic.speed: unknown field (known here: base_us, "
                   "per_row_us, mode)");
}

static void test_name_rules(void **state)
{
    (void)state;
    expect_message("{" IO "," DENSE "}", NULL,
                   "models/m/config.json: name: missing (must be a non-empty string)");
    expect_message("{\"name\":\"a b\"," IO "," DENSE "}", NULL,
                   "models/m/config.json: name: \"a b\" may use only letters, digits, _ - .");
    expect_message("{\"name\":\"\"," IO "," DENSE "}", "m",
                   "models/m/config.json: name: must be a non-empty string, got \"\"");
}

static void test_messages(void **state)
{
    (void)state;
    expect_message("{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP16\",\"shape\":[4]}],"
                   "\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}", "m",
                   "models/m/config.json: inputs[0].datatype: \"FP16\" is not one of FP32 (the "
                   "only datatype served for now)");
    expect_message("{\"inputs\":[{\"name\":\"x\",\"shape\":[-1,4]}],"
                   "\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}", "m",
                   "models/m/config.json: inputs[0].shape[0]: must be an integer between 1 and "
                   "16777216, got -1 (the shape is per row: the batch dimension is implicit)");
    expect_message("{\"inputs\":[{\"name\":\"x\",\"shape\":[4096,4096,4096]}],"
                   "\"outputs\":[{\"name\":\"y\",\"shape\":[2]}]," DENSE "}", "m",
                   "models/m/config.json: inputs[0].shape: more than 16777216 elements per row");
    expect_message("{" IO "," DENSE ",\"batching\":{\"max_batch_size\":8,"
                   "\"preferred_batch_sizes\":[4,9]}}", "m",
                   "models/m/config.json: batching.preferred_batch_sizes[1]: 9 is more than "
                   "max_batch_size (8)");
    expect_message("{" IO ",\"layers\":[{\"type\":\"softmax\",\"activation\":\"none\"}]}",
                   "m", "models/m/config.json: layers[0].activation: a softmax layer takes only "
                        "\"type\"");
    expect_message("{\"backend\":\"upstream\"," IO ",\"upstream\":{\"protocol\":\"tfserving\"}}",
                   "m", "models/m/config.json: upstream.urls: missing (the upstream backend needs "
                        "1 to 8 URLs like \"http://HOST:PORT\")");
}

static void test_upstream_defaults(void **state)
{
    (void)state;
    struct model_config c;
    struct error err = {0};
    const char *json = "{\"backend\":\"upstream\",\"platform\":\"anything\"," IO ","
                       "\"upstream\":{\"urls\":[\"http://h:1\"],\"model\":\"theirs\"}}";
    if (parse(json, &c, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(c.upstream.protocol, UPSTREAM_KSERVE_V2);
    assert_string_equal(c.upstream.model, "theirs");
    assert_string_equal(c.upstream.health_path, "/v2/health/ready");
    assert_int_equal(c.upstream.max_inflight, 4);
    assert_int_equal(c.upstream.timeout_ms, 10000);
    assert_int_equal(c.batching.default_priority, 1);
    assert_int_equal(c.batching.priority_aging_ms, 1000);
    assert_int_equal(c.batching.batch_timeout_ms, 30000);
    assert_string_equal(c.batching.policy, "adaptive");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_defaults_and_name_from_folder),
        cmocka_unit_test(test_upstream),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_unknown_fields_suggest),
        cmocka_unit_test(test_name_rules),
        cmocka_unit_test(test_messages),
        cmocka_unit_test(test_upstream_defaults),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

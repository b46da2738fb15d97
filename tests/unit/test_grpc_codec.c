/* test_grpc_codec.c - gateway/grpc_codec (each call of
 * inference.GRPCInferenceService as its HTTP request, and the HTTP answer
 * as the response message) and gateway/pbjson (a JSON value as a protobuf
 * message by descriptor): the status table of docs/GRPC.md, the method
 * table, every served call's method, path and body, ModelInfer's binary
 * extension body both ways, every error with its code and message, and
 * pbjson's skipping of what does not fit. Input messages are packed with
 * the generated protobuf-c code and outputs read back with it, so the
 * bytes are the ones a gRPC client sends and receives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "gateway/grpc_codec.h"
#include "gateway/pbjson.h"
#include "http/http.h"
#include "proto/grpc_service.pb-c.h"

/* The oneof cases' long names, shorter. */
#define IP_CASE(x) INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_##x
#define REPO_CASE(x) INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_##x
#define LOG_REQ_CASE(x) INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_##x
#define LOG_RESP_CASE(x) INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_##x

/* ---- helpers ---- */

static const struct grpc_method *method(const char *name)
{
    const struct grpc_method *m = grpc_method_find(name, strlen(name));
    if (!m)
        fail_msg("no method \"%s\"", name);
    return m;
}

/* limits.max_body_bytes as grpc_to_http is given it. */
static size_t to_http_limit = 64 << 20;

/* grpc_to_http of the raw bytes (msg, len) for call `name`. */
static int to_http_raw(const char *name, const void *msg, size_t len,
                       struct grpc_http_request *out, char *err, size_t cap)
{
    memset(out, 0, sizeof *out);
    out->body = (struct buf)BUF_INIT;
    err[0] = '\0';
    return grpc_to_http(method(name), msg, len, to_http_limit, out, err, cap);
}

/* msg packed as a client packs it, then grpc_to_http. */
static int to_http(const char *name, const ProtobufCMessage *msg, struct grpc_http_request *out,
                   char *err, size_t cap)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n + 1);
    assert_non_null(b);
    assert_int_equal(protobuf_c_message_pack(msg, b), n);
    int rc = to_http_raw(name, b, n, out, err, cap);
    free(b);
    return rc;
}

/* The request's JSON: its first json_len bytes, or the whole body. */
static json_t *body_json(const struct grpc_http_request *r)
{
    size_t n = r->json_len >= 0 ? (size_t)r->json_len : r->body.len;
    json_error_t je;
    json_t *j = json_loadb(r->body.data, n, 0, &je);
    if (!j)
        fail_msg("the body is not JSON (%s): %.*s", je.text, (int)n,
                 r->body.data ? r->body.data : "");
    return j;
}

/* grpc_from_http of call `name` on an answer of (len) bytes. */
static int from_http_n(const char *name, int status, const char *body, size_t len,
                       const char *headers, struct buf *out, char *err, size_t cap)
{
    struct grpc_http_answer a = {.status = status, .body = body, .len = len, .headers = headers};
    *out = (struct buf)BUF_INIT;
    err[0] = '\0';
    return grpc_from_http(method(name), &a, out, err, cap);
}

static int from_http(const char *name, int status, const char *body, struct buf *out, char *err,
                     size_t cap)
{
    return from_http_n(name, status, body, body ? strlen(body) : 0, NULL, out, err, cap);
}

static json_t *jget(json_t *o, const char *path)
{
    /* "a.b.c": nested object keys; "a.0": an array index */
    char key[128];
    for (const char *p = path; o && *p;) {
        size_t n = strcspn(p, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        if (json_is_array(o))
            o = json_array_get(o, (size_t)strtoul(key, NULL, 10));
        else
            o = json_object_get(o, key);
        p += n + (p[n] == '.');
    }
    return o;
}

static const char *jstr(json_t *o, const char *path)
{
    json_t *v = jget(o, path);
    if (!json_is_string(v))
        fail_msg("%s is not a string", path);
    return json_string_value(v);
}

static long long jint(json_t *o, const char *path)
{
    json_t *v = jget(o, path);
    if (!json_is_integer(v))
        fail_msg("%s is not an integer", path);
    return json_integer_value(v);
}

static void assert_contains(const char *s, const char *sub)
{
    if (!s || !strstr(s, sub))
        fail_msg("\"%s\" does not contain \"%s\"", s ? s : "(null)", sub);
}

/* The served calls and the ones answered UNIMPLEMENTED. */
static const char *const served[] = {
    "ServerLive",      "ServerReady",     "ModelReady",          "ServerMetadata",
    "ModelMetadata",   "ModelInfer",      "ModelStreamInfer",    "ModelConfig",
    "ModelStatistics", "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload",
    "LogSettings",
    "SystemSharedMemoryStatus", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister",
    "CudaSharedMemoryStatus",   "CudaSharedMemoryRegister",   "CudaSharedMemoryUnregister",
};
static const char *const unserved[] = {
    "TraceSetting",
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* An InferParameter of each kind. */
static Inference__InferParameter param_bool(bool b)
{
    Inference__InferParameter p = INFERENCE__INFER_PARAMETER__INIT;
    p.parameter_choice_case = IP_CASE(BOOL_PARAM);
    p.bool_param = b;
    return p;
}
static Inference__InferParameter param_int(int64_t v)
{
    Inference__InferParameter p = INFERENCE__INFER_PARAMETER__INIT;
    p.parameter_choice_case = IP_CASE(INT64_PARAM);
    p.int64_param = v;
    return p;
}
static Inference__InferParameter param_str(char *s)
{
    Inference__InferParameter p = INFERENCE__INFER_PARAMETER__INIT;
    p.parameter_choice_case = IP_CASE(STRING_PARAM);
    p.string_param = s;
    return p;
}
static Inference__InferParameter param_double(double d)
{
    Inference__InferParameter p = INFERENCE__INFER_PARAMETER__INIT;
    p.parameter_choice_case = IP_CASE(DOUBLE_PARAM);
    p.double_param = d;
    return p;
}

/* ---- status codes ---- */

/* Every row of docs/GRPC.md "Errors": the HTTP status maps to its code;
 * other 5xx are INTERNAL, other 4xx INVALID_ARGUMENT. */
static void test_code_of_http(void **state)
{
    (void)state;
    static const struct { int http, grpc; } rows[] = {
        {200, GRPC_OK},
        {400, GRPC_INVALID_ARGUMENT},
        {401, GRPC_UNAUTHENTICATED},
        {403, GRPC_PERMISSION_DENIED},
        {404, GRPC_NOT_FOUND},
        {405, GRPC_UNIMPLEMENTED},
        {501, GRPC_UNIMPLEMENTED},
        {408, GRPC_DEADLINE_EXCEEDED},
        {504, GRPC_DEADLINE_EXCEEDED},
        {409, GRPC_FAILED_PRECONDITION},
        {413, GRPC_RESOURCE_EXHAUSTED},
        {429, GRPC_RESOURCE_EXHAUSTED},
        {431, GRPC_RESOURCE_EXHAUSTED},
        {499, GRPC_CANCELLED},
        {502, GRPC_UNAVAILABLE},
        {503, GRPC_UNAVAILABLE},
        {500, GRPC_INTERNAL},   /* other 5xx */
        {505, GRPC_INTERNAL},
        {507, GRPC_INTERNAL},
        {599, GRPC_INTERNAL},
        {402, GRPC_INVALID_ARGUMENT},   /* other 4xx */
        {410, GRPC_INVALID_ARGUMENT},
        {415, GRPC_INVALID_ARGUMENT},
        {422, GRPC_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < COUNT(rows); i++)
        if (grpc_code_of_http(rows[i].http) != rows[i].grpc)
            fail_msg("HTTP %d: code %d, want %d", rows[i].http, grpc_code_of_http(rows[i].http),
                     rows[i].grpc);
    /* The numbers are grpc/status.h's. */
    assert_int_equal(GRPC_CANCELLED, 1);
    assert_int_equal(GRPC_UNIMPLEMENTED, 12);
    assert_int_equal(GRPC_UNAUTHENTICATED, 16);
}

/* Each code's name as grpc/status.h spells it; out of range: UNKNOWN. */
static void test_code_name(void **state)
{
    (void)state;
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    for (int c = 0; c < (int)COUNT(names); c++)
        assert_string_equal(grpc_code_name(c), names[c]);
    assert_string_equal(grpc_code_name(GRPC_NOT_FOUND), "NOT_FOUND");
    assert_string_equal(grpc_code_name(-1), "UNKNOWN");
    assert_string_equal(grpc_code_name(17), "UNKNOWN");
}

/* ---- the method table ---- */

/* Every served name is found under its own name and is served; unknown
 * names, prefixes, longer names and other cases are not found; the length
 * given is the name's (no NUL needed). */
static void test_method_find(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(served); i++) {
        const struct grpc_method *m = method(served[i]);
        assert_string_equal(grpc_method_name(m), served[i]);
        assert_null(grpc_method_unserved(m));
    }
    static const char *const none[] = {"",       "Nope",       "Model",      "ModelInfe",
                                       "Server", "ModelInferX", "modelinfer", "ServerLive ",
                                       "/inference.GRPCInferenceService/ModelInfer"};
    for (size_t i = 0; i < COUNT(none); i++)
        if (grpc_method_find(none[i], strlen(none[i])))
            fail_msg("\"%s\" found", none[i]);
    /* A prefix of the buffer: its length decides. */
    const struct grpc_method *m = grpc_method_find("ModelInferXYZ", 10);
    assert_non_null(m);
    assert_string_equal(grpc_method_name(m), "ModelInfer");
    assert_null(grpc_method_find("ModelInfer", 5));
    assert_null(grpc_method_find("ServerLive", 9));
}

/* The shared-memory and trace calls are in the table, unserved with a
 * reason naming the extension, and grpc_to_http answers UNIMPLEMENTED
 * with that reason. */
static void test_method_unserved(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(unserved); i++) {
        const struct grpc_method *m = method(unserved[i]);
        const char *why = grpc_method_unserved(m);
        assert_non_null(why);
        assert_contains(why, "tracing");
        struct grpc_http_request r;
        char err[256];
        assert_int_equal(to_http_raw(unserved[i], "", 0, &r, err, sizeof err), GRPC_UNIMPLEMENTED);
        assert_string_equal(err, why);
        assert_int_equal(r.body.len, 0);
        grpc_http_request_free(&r);
    }
}

/* Only ModelStreamInfer streams. */
static void test_method_streams(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(served); i++)
        assert_int_equal(grpc_method_streams(method(served[i])),
                         strcmp(served[i], "ModelStreamInfer") == 0);
    for (size_t i = 0; i < COUNT(unserved); i++)
        assert_false(grpc_method_streams(method(unserved[i])));
}

/* ---- requests ---- */

/* ServerLive, ServerReady, ServerMetadata: GET of their path, no body. */
static void test_to_http_server(void **state)
{
    (void)state;
    static const struct { const char *name, *path; } rows[] = {
        {"ServerLive", "/v2/health/live"},
        {"ServerReady", "/v2/health/ready"},
        {"ServerMetadata", "/v2"},
    };
    for (size_t i = 0; i < COUNT(rows); i++) {
        struct grpc_http_request r;
        char err[256];
        assert_int_equal(to_http_raw(rows[i].name, "", 0, &r, err, sizeof err), GRPC_OK);
        assert_int_equal(r.method, HTTP_M_GET);
        assert_string_equal(r.path, rows[i].path);
        assert_int_equal(r.body.len, 0);
        assert_int_equal(r.json_len, -1);
        grpc_http_request_free(&r);
    }
}

/* A model call with (name, version) packed as fields 1 and 2: all of
 * ModelReady, ModelMetadata, ModelConfig and ModelStatistics requests
 * are that message. */
static int model_call(const char *call, const char *name, const char *version,
                      struct grpc_http_request *r, char *err, size_t cap)
{
    Inference__ModelReadyRequest m = INFERENCE__MODEL_READY_REQUEST__INIT;
    m.name = (char *)name;
    m.version = (char *)version;
    return to_http(call, &m.base, r, err, cap);
}

/* ModelReady, ModelMetadata, ModelConfig, ModelStatistics: GET of the
 * model's path with and without a version; ModelStatistics without a name
 * is every model's. */
static void test_to_http_model_paths(void **state)
{
    (void)state;
    static const struct { const char *call, *name, *version, *path; } rows[] = {
        {"ModelReady", "m", "", "/v2/models/m/ready"},
        {"ModelReady", "m", "3", "/v2/models/m/versions/3/ready"},
        {"ModelMetadata", "bert-base", "", "/v2/models/bert-base"},
        {"ModelMetadata", "bert-base", "1", "/v2/models/bert-base/versions/1"},
        {"ModelConfig", "m.v2", "", "/v2/models/m.v2/config"},
        {"ModelConfig", "m", "12", "/v2/models/m/versions/12/config"},
        {"ModelStatistics", "m", "", "/v2/models/m/stats"},
        {"ModelStatistics", "m", "2", "/v2/models/m/versions/2/stats"},
        {"ModelStatistics", "", "", "/v2/models/stats"},
        {"ModelStatistics", "", "2", "/v2/models/stats"},
        /* A model named stats: by version, and its other calls as any. */
        {"ModelMetadata", "stats", "1", "/v2/models/stats/versions/1"},
        {"ModelReady", "stats", "", "/v2/models/stats/ready"},
        {"ModelConfig", "stats", "", "/v2/models/stats/config"},
    };
    for (size_t i = 0; i < COUNT(rows); i++) {
        struct grpc_http_request r;
        char err[256];
        int rc = model_call(rows[i].call, rows[i].name, rows[i].version, &r, err, sizeof err);
        if (rc != GRPC_OK)
            fail_msg("%s(%s, %s): %d %s", rows[i].call, rows[i].name, rows[i].version, rc, err);
        assert_int_equal(r.method, HTTP_M_GET);
        assert_string_equal(r.path, rows[i].path);
        assert_int_equal(r.body.len, 0);
        assert_int_equal(r.json_len, -1);
        grpc_http_request_free(&r);
    }
    /* Its metadata with no version: GET /v2/models/stats is every model's
     * statistics, which answered OK with an empty message. */
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(model_call("ModelMetadata", "stats", "", &r, err, sizeof err),
                     GRPC_INVALID_ARGUMENT);
    assert_non_null(strstr(err, "by version only"));
    grpc_http_request_free(&r);
}

/* RepositoryIndex: POST /v2/repository/index with {"ready": b}. */
static void test_to_http_repository_index(void **state)
{
    (void)state;
    for (int ready = 0; ready < 2; ready++) {
        Inference__RepositoryIndexRequest m = INFERENCE__REPOSITORY_INDEX_REQUEST__INIT;
        m.ready = ready;
        m.repository_name = "ignored";
        struct grpc_http_request r;
        char err[256];
        assert_int_equal(to_http("RepositoryIndex", &m.base, &r, err, sizeof err), GRPC_OK);
        assert_int_equal(r.method, HTTP_M_POST);
        assert_string_equal(r.path, "/v2/repository/index");
        json_t *j = body_json(&r);
        assert_true(json_is_boolean(json_object_get(j, "ready")));
        assert_int_equal(json_is_true(json_object_get(j, "ready")), ready);
        assert_int_equal(json_object_size(j), 1);
        json_decref(j);
        grpc_http_request_free(&r);
    }
}

/* RepositoryModelLoad and Unload: POST /v2/repository/models/NAME/load or
 * /unload; each parameter in "parameters" by its kind, bytes in base64
 * (every padding length, '+' and '/'); a parameter with no value left out. */
static void test_to_http_repository_load(void **state)
{
    (void)state;
    Inference__ModelRepositoryParameter pv[7];
    Inference__RepositoryModelLoadRequest__ParametersEntry pe[7], *pp[7];
    static const char *const keys[] = {"config", "flag", "n",     "file:1/a.bin",
                                       "file:b", "file:c", "none"};
    for (int i = 0; i < 7; i++) {
        pv[i] = (Inference__ModelRepositoryParameter)INFERENCE__MODEL_REPOSITORY_PARAMETER__INIT;
        pe[i] = (Inference__RepositoryModelLoadRequest__ParametersEntry)
            INFERENCE__REPOSITORY_MODEL_LOAD_REQUEST__PARAMETERS_ENTRY__INIT;
        pe[i].key = (char *)keys[i];
        pe[i].value = &pv[i];
        pp[i] = &pe[i];
    }
    pv[0].parameter_choice_case = REPO_CASE(STRING_PARAM);
    pv[0].string_param = "{\"max_batch_size\":4}";
    pv[1].parameter_choice_case = REPO_CASE(BOOL_PARAM);
    pv[1].bool_param = 1;
    pv[2].parameter_choice_case = REPO_CASE(INT64_PARAM);
    pv[2].int64_param = -7;
    static uint8_t b0[] = {'a', 'b', 'c', 0xfb, 0xff}, b1[] = {'a'}, b2[] = {0, 0xff, 0xfe};
    pv[3].parameter_choice_case = REPO_CASE(BYTES_PARAM);
    pv[3].bytes_param = (ProtobufCBinaryData){sizeof b0, b0};
    pv[4].parameter_choice_case = REPO_CASE(BYTES_PARAM);
    pv[4].bytes_param = (ProtobufCBinaryData){sizeof b1, b1};
    pv[5].parameter_choice_case = REPO_CASE(BYTES_PARAM);
    pv[5].bytes_param = (ProtobufCBinaryData){sizeof b2, b2};
    /* pv[6]: no member set */

    Inference__RepositoryModelLoadRequest m = INFERENCE__REPOSITORY_MODEL_LOAD_REQUEST__INIT;
    m.model_name = "m1";
    m.repository_name = "";
    m.n_parameters = 7;
    m.parameters = pp;
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(to_http("RepositoryModelLoad", &m.base, &r, err, sizeof err), GRPC_OK);
    assert_int_equal(r.method, HTTP_M_POST);
    assert_string_equal(r.path, "/v2/repository/models/m1/load");
    json_t *j = body_json(&r);
    json_t *p = json_object_get(j, "parameters");
    assert_true(json_is_object(p));
    assert_string_equal(jstr(p, "config"), "{\"max_batch_size\":4}");
    assert_true(json_is_true(json_object_get(p, "flag")));
    assert_int_equal(jint(p, "n"), -7);
    assert_string_equal(json_string_value(json_object_get(p, "file:1/a.bin")), "YWJj+/8=");
    assert_string_equal(json_string_value(json_object_get(p, "file:b")), "YQ==");
    assert_string_equal(json_string_value(json_object_get(p, "file:c")), "AP/+");
    assert_null(json_object_get(p, "none"));
    assert_int_equal(json_object_size(p), 6);
    json_decref(j);
    grpc_http_request_free(&r);

    /* Unload: the same shape, its own path; no parameters → {}. */
    Inference__RepositoryModelUnloadRequest u = INFERENCE__REPOSITORY_MODEL_UNLOAD_REQUEST__INIT;
    u.model_name = "m1";
    assert_int_equal(to_http("RepositoryModelUnload", &u.base, &r, err, sizeof err), GRPC_OK);
    assert_int_equal(r.method, HTTP_M_POST);
    assert_string_equal(r.path, "/v2/repository/models/m1/unload");
    j = body_json(&r);
    assert_true(json_is_object(json_object_get(j, "parameters")));
    assert_int_equal(json_object_size(json_object_get(j, "parameters")), 0);
    json_decref(j);
    grpc_http_request_free(&r);

    /* Unload with a parameter: passed the same way. */
    Inference__RepositoryModelUnloadRequest__ParametersEntry ue =
        INFERENCE__REPOSITORY_MODEL_UNLOAD_REQUEST__PARAMETERS_ENTRY__INIT, *uep = &ue;
    ue.key = "unload_dependents";
    ue.value = &pv[1];
    u.n_parameters = 1;
    u.parameters = &uep;
    assert_int_equal(to_http("RepositoryModelUnload", &u.base, &r, err, sizeof err), GRPC_OK);
    j = body_json(&r);
    assert_true(json_is_true(jget(j, "parameters.unload_dependents")));
    json_decref(j);
    grpc_http_request_free(&r);
}

/* LogSettings: no settings → GET /v2/logging (read them); some → POST
 * with each value as its JSON type; a setting with no value is refused. */
static void test_to_http_log_settings(void **state)
{
    (void)state;
    Inference__LogSettingsRequest m = INFERENCE__LOG_SETTINGS_REQUEST__INIT;
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(to_http("LogSettings", &m.base, &r, err, sizeof err), GRPC_OK);
    assert_int_equal(r.method, HTTP_M_GET);
    assert_string_equal(r.path, "/v2/logging");
    assert_int_equal(r.body.len, 0);
    grpc_http_request_free(&r);

    Inference__LogSettingsRequest__SettingValue v[4];
    Inference__LogSettingsRequest__SettingsEntry e[4], *ep[4];
    static const char *const keys[] = {"log_info", "log_verbose_level", "log_format", "log_file"};
    for (int i = 0; i < 4; i++) {
        v[i] = (Inference__LogSettingsRequest__SettingValue)
            INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__INIT;
        e[i] = (Inference__LogSettingsRequest__SettingsEntry)
            INFERENCE__LOG_SETTINGS_REQUEST__SETTINGS_ENTRY__INIT;
        e[i].key = (char *)keys[i];
        e[i].value = &v[i];
        ep[i] = &e[i];
    }
    v[0].parameter_choice_case = LOG_REQ_CASE(BOOL_PARAM);
    v[0].bool_param = 0;
    v[1].parameter_choice_case = LOG_REQ_CASE(UINT32_PARAM);
    v[1].uint32_param = 4000000000u;
    v[2].parameter_choice_case = LOG_REQ_CASE(STRING_PARAM);
    v[2].string_param = "ISO8601";
    v[3].parameter_choice_case = LOG_REQ_CASE(STRING_PARAM);
    v[3].string_param = "";
    m.n_settings = 4;
    m.settings = ep;
    assert_int_equal(to_http("LogSettings", &m.base, &r, err, sizeof err), GRPC_OK);
    assert_int_equal(r.method, HTTP_M_POST);
    assert_string_equal(r.path, "/v2/logging");
    json_t *j = body_json(&r);
    assert_true(json_is_false(json_object_get(j, "log_info")));
    assert_int_equal(jint(j, "log_verbose_level"), 4000000000LL);
    assert_string_equal(jstr(j, "log_format"), "ISO8601");
    assert_string_equal(jstr(j, "log_file"), "");
    assert_int_equal(json_object_size(j), 4);
    json_decref(j);
    grpc_http_request_free(&r);

    /* A setting whose value has no member set. */
    v[2].parameter_choice_case = LOG_REQ_CASE(_NOT_SET);
    assert_int_equal(to_http("LogSettings", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "log_format");
    assert_contains(err, "no value");
    grpc_http_request_free(&r);
}

/* A model name that cannot be one path segment ('/', '%', ' ', '?', '#',
 * a control character, empty, over 256 characters) is INVALID_ARGUMENT
 * naming the model name, in every call that takes one; 256 characters is
 * fine. A version with '/' is refused the same way. */
static void test_to_http_bad_names(void **state)
{
    (void)state;
    char long_name[258], max_name[257];
    memset(long_name, 'a', 257);
    long_name[257] = '\0';
    memset(max_name, 'b', 256);
    max_name[256] = '\0';
    const char *const bad[] = {"a/b", "a%2Fb", "a b", "a?b", "a#b", "a\tb", "", long_name,
                               "..\x7f", ".", ".."};
    static const char *const calls[] = {"ModelReady", "ModelMetadata", "ModelConfig",
                                        "ModelStatistics", "RepositoryModelLoad",
                                        "RepositoryModelUnload", "ModelInfer", "ModelStreamInfer"};
    for (size_t c = 0; c < COUNT(calls); c++) {
        for (size_t i = 0; i <= COUNT(bad); i++) {
            const char *name = i < COUNT(bad) ? bad[i] : max_name;
            bool ok = i == COUNT(bad) ||
                      (name[0] == '\0' && strcmp(calls[c], "ModelStatistics") == 0);
            struct grpc_http_request r;
            char err[256];
            int rc;
            if (strncmp(calls[c], "Repository", 10) == 0) {
                Inference__RepositoryModelLoadRequest m =
                    INFERENCE__REPOSITORY_MODEL_LOAD_REQUEST__INIT;
                m.model_name = (char *)name;
                rc = to_http(calls[c], &m.base, &r, err, sizeof err);
            } else if (strstr(calls[c], "Infer")) {
                Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
                m.model_name = (char *)name;
                rc = to_http(calls[c], &m.base, &r, err, sizeof err);
            } else {
                rc = model_call(calls[c], name, "", &r, err, sizeof err);
            }
            if (ok && rc != GRPC_OK)
                fail_msg("%s(\"%.20s\"): %d %s", calls[c], name, rc, err);
            if (!ok) {
                if (rc != GRPC_INVALID_ARGUMENT)
                    fail_msg("%s(\"%.20s\"): %d, want INVALID_ARGUMENT", calls[c], name, rc);
                assert_contains(err, "model name");
                assert_contains(err, "256");
            }
            if (ok && i == COUNT(bad))
                assert_non_null(strstr(r.path, max_name));
            grpc_http_request_free(&r);
        }
    }
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(model_call("ModelReady", "m", "1/2", &r, err, sizeof err),
                     GRPC_INVALID_ARGUMENT);
    assert_contains(err, "version");
    grpc_http_request_free(&r);
    /* A dot segment, cleaned away before routing: "m/versions/.." was m's
     * default version. */
    assert_int_equal(model_call("ModelReady", "m", "..", &r, err, sizeof err),
                     GRPC_INVALID_ARGUMENT);
    grpc_http_request_free(&r);
    /* Not an integer: INVALID_ARGUMENT as Triton answers (it was a version
     * looked for, NOT_FOUND); leading zeros are left to the route ("01" is
     * version 1 there). */
    static const char *const not_int[] = {"abc", "1a", "-1", "+2", "1.0", "0x1"};
    for (size_t i = 0; i < COUNT(not_int); i++) {
        int rc = model_call("ModelMetadata", "m", not_int[i], &r, err, sizeof err);
        if (rc != GRPC_INVALID_ARGUMENT)
            fail_msg("version \"%s\": %d, want INVALID_ARGUMENT", not_int[i], rc);
        assert_contains(err, "must be an integer");
        assert_contains(err, not_int[i]);
        grpc_http_request_free(&r);
    }
    assert_int_equal(model_call("ModelMetadata", "m", "01", &r, err, sizeof err), GRPC_OK);
    assert_string_equal(r.path, "/v2/models/m/versions/01");
    grpc_http_request_free(&r);
    Inference__ModelInferRequest im = INFERENCE__MODEL_INFER_REQUEST__INIT;
    im.model_name = "m";
    im.model_version = "v 1";
    assert_int_equal(to_http("ModelInfer", &im.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "version");
    grpc_http_request_free(&r);
}

/* Bytes that are not a protobuf message are INTERNAL (gRPC's status for
 * "error parsing request proto", what grpc-core and so Triton answer)
 * naming the request message, for every served call (even those whose
 * message is empty). */
static void test_to_http_garbage(void **state)
{
    (void)state;
    static const struct { const char *b; size_t n; } garbage[] = {
        {"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 12},   /* a tag that never ends */
        {"\x0a\x7f" "abc", 5},                                      /* field 1: 127 bytes of 3 */
        {"\x0f\x01", 2},                                            /* wire type 7 */
        {"\x08", 1},                                                /* a varint cut off */
    };
    for (size_t c = 0; c < COUNT(served); c++)
        for (size_t g = 0; g < COUNT(garbage); g++) {
            struct grpc_http_request r;
            char err[256];
            int rc = to_http_raw(served[c], garbage[g].b, garbage[g].n, &r, err, sizeof err);
            if (rc != GRPC_INTERNAL)
                fail_msg("%s, garbage %zu: %d %s", served[c], g, rc, err);
            assert_contains(err, "not a valid");
            assert_contains(err, "Request");
            assert_int_equal(r.body.len, 0);
            grpc_http_request_free(&r);
        }
}

/* A string holding a NUL byte is refused, naming the field, at any depth
 * (protobuf-c would hand over "x\0y" as "x": an id echoed cut short, a
 * model name naming another). Bytes fields may hold any byte. */
static void test_to_http_nul_in_strings(void **state)
{
    (void)state;
    static const struct { const char *call, *b; size_t n; const char *field; } cases[] = {
        /* model_name "digits", id "x\0y" */
        {"ModelInfer", "\x0a\x06" "digits" "\x1a\x03x\0y", 13, "id"},
        {"ModelStreamInfer", "\x0a\x06" "digits" "\x1a\x01\0", 11, "id"},
        {"ModelMetadata", "\x0a\x04" "di\0t", 6, "name"},
        /* inputs[0] (field 5): name "x\0" */
        {"ModelInfer", "\x0a\x06" "digits" "\x2a\x04\x0a\x02x\0", 14, "name"},
    };
    for (size_t c = 0; c < COUNT(cases); c++) {
        struct grpc_http_request r;
        char err[256];
        int rc = to_http_raw(cases[c].call, cases[c].b, cases[c].n, &r, err, sizeof err);
        if (rc != GRPC_INVALID_ARGUMENT)
            fail_msg("case %zu: %d %s", c, rc, err);
        char want[64];
        snprintf(want, sizeof want, "%s: a string holding a NUL byte", cases[c].field);
        assert_contains(err, want);
        grpc_http_request_free(&r);
    }
    /* raw_input_contents (field 7, bytes) with NUL bytes pass this check. */
    struct grpc_http_request r;
    char err[256];
    static const char ok[] = "\x0a\x06" "digits" "\x3a\x04\0\0\0\0";
    int rc = to_http_raw("ModelInfer", ok, sizeof ok - 1, &r, err, sizeof err);
    if (rc == GRPC_INVALID_ARGUMENT && strstr(err, "NUL"))
        fail_msg("bytes refused: %s", err);
    grpc_http_request_free(&r);
    /* Strings that are not UTF-8 (proto3 strings are): INVALID_ARGUMENT
     * naming the field. They made no JSON: "out of memory" as NOT_FOUND or
     * RESOURCE_EXHAUSTED, and a load's config override was dropped. */
    static const struct {
        const char *call, *b;
        size_t n;
        const char *field;
    } bad[] = {
        {"ModelReady", "\x0a\x01\xff", 3, "name"},
        {"ModelReady", "\x0a\x02\xc0\xaf", 4, "name"},            /* overlong '/' */
        {"ModelReady", "\x0a\x03\xed\xa0\x80", 5, "name"},        /* a surrogate */
        {"ModelReady", "\x0a\x04\xf4\x90\x80\x80", 6, "name"},    /* past U+10FFFF */
        {"ModelReady", "\x0a\x02\xe2\x82", 4, "name"},            /* cut short */
        {"ModelInfer", "\x0a\x06" "digits" "\x1a\x02" "\xff\xfe", 12, "id"},
        /* inputs[0] (field 5): datatype (field 2) "FP\xff" */
        {"ModelInfer", "\x0a\x06" "digits" "\x2a\x05\x12\x03" "FP\xff", 15, "datatype"},
    };
    for (size_t c = 0; c < COUNT(bad); c++) {
        rc = to_http_raw(bad[c].call, bad[c].b, bad[c].n, &r, err, sizeof err);
        if (rc != GRPC_INVALID_ARGUMENT)
            fail_msg("utf-8 case %zu: %d %s", c, rc, err);
        char want[64];
        snprintf(want, sizeof want, "%s: a string that is not UTF-8", bad[c].field);
        assert_contains(err, want);
        grpc_http_request_free(&r);
    }
    /* A stream's error for such a message still names the request (its
     * response echoes model and id), less the field refused. */
    static const struct {
        const char *b;
        size_t n;
        const char *id;
    } echoed[] = {
        /* id "r7", inputs[0].datatype "FP\xff" */
        {"\x0a\x06" "digits" "\x1a\x02" "r7" "\x2a\x05\x12\x03" "FP\xff", 19, "r7"},
        /* id "\xff\xfe": left out */
        {"\x0a\x06" "digits" "\x1a\x02" "\xff\xfe", 12, ""},
    };
    for (size_t c = 0; c < COUNT(echoed); c++) {
        rc = to_http_raw("ModelStreamInfer", echoed[c].b, echoed[c].n, &r, err, sizeof err);
        assert_int_equal(rc, GRPC_INVALID_ARGUMENT);
        Inference__ModelInferResponse *e = inference__model_infer_response__unpack(
            NULL, r.echo.len, (const uint8_t *)r.echo.data);
        assert_non_null(e);
        assert_string_equal(e->model_name, "digits");
        assert_string_equal(e->id, echoed[c].id);
        inference__model_infer_response__free_unpacked(e, NULL);
        grpc_http_request_free(&r);
    }
    /* UTF-8 of every length passes. */
    static const char good[] = "\x0a\x0a" "d\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80";
    rc = to_http_raw("ModelReady", good, sizeof good - 1, &r, err, sizeof err);
    assert_int_equal(rc, GRPC_OK);
    grpc_http_request_free(&r);
}

/* ---- ModelInfer requests ---- */

/* raw_input_contents: the body is the JSON header then each input's raw
 * bytes in order; json_len is the header's length; each input carries its
 * binary_data_size, shape, datatype and own parameters; no outputs asked:
 * "parameters":{"binary_data_output":true}; the id passes. Also for
 * ModelStreamInfer's messages, and with a model version. */
static void test_infer_raw(void **state)
{
    (void)state;
    static const uint8_t a[] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40}, b[] = {1, 2, 3};
    Inference__ModelInferRequest__InferInputTensor in[2] = {
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT,
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT};
    Inference__ModelInferRequest__InferInputTensor *inp[2] = {&in[0], &in[1]};
    int64_t sa[] = {1, 2}, sb[] = {3};
    in[0].name = "x";
    in[0].datatype = "FP32";
    in[0].n_shape = 2;
    in[0].shape = sa;
    in[1].name = "y";
    in[1].datatype = "UINT8";
    in[1].n_shape = 1;
    in[1].shape = sb;
    Inference__InferParameter ip = param_int(5);
    Inference__ModelInferRequest__InferInputTensor__ParametersEntry ipe =
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__PARAMETERS_ENTRY__INIT, *ipep = &ipe;
    ipe.key = "input_param";
    ipe.value = &ip;
    in[1].n_parameters = 1;
    in[1].parameters = &ipep;
    ProtobufCBinaryData raw[2] = {{sizeof a, (uint8_t *)a}, {sizeof b, (uint8_t *)b}};
    Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.model_name = "m";
    m.id = "req-1";
    m.n_inputs = 2;
    m.inputs = inp;
    m.n_raw_input_contents = 2;
    m.raw_input_contents = raw;

    static const char *const calls[] = {"ModelInfer", "ModelStreamInfer"};
    for (size_t c = 0; c < 2; c++) {
        struct grpc_http_request r;
        char err[256];
        assert_int_equal(to_http(calls[c], &m.base, &r, err, sizeof err), GRPC_OK);
        assert_int_equal(r.method, HTTP_M_POST);
        assert_string_equal(r.path, "/v2/models/m/infer");
        assert_true(r.json_len > 0);
        assert_int_equal(r.body.len, (size_t)r.json_len + sizeof a + sizeof b);
        assert_memory_equal(r.body.data + r.json_len, a, sizeof a);
        assert_memory_equal(r.body.data + r.json_len + sizeof a, b, sizeof b);
        json_t *j = body_json(&r);
        assert_string_equal(jstr(j, "id"), "req-1");
        assert_int_equal(json_array_size(json_object_get(j, "inputs")), 2);
        assert_string_equal(jstr(j, "inputs.0.name"), "x");
        assert_string_equal(jstr(j, "inputs.0.datatype"), "FP32");
        assert_int_equal(json_array_size(jget(j, "inputs.0.shape")), 2);
        assert_int_equal(jint(j, "inputs.0.shape.0"), 1);
        assert_int_equal(jint(j, "inputs.0.shape.1"), 2);
        assert_int_equal(jint(j, "inputs.0.parameters.binary_data_size"), sizeof a);
        assert_int_equal(json_object_size(jget(j, "inputs.0.parameters")), 1);
        assert_string_equal(jstr(j, "inputs.1.name"), "y");
        assert_string_equal(jstr(j, "inputs.1.datatype"), "UINT8");
        assert_int_equal(jint(j, "inputs.1.shape.0"), 3);
        assert_int_equal(jint(j, "inputs.1.parameters.binary_data_size"), sizeof b);
        assert_int_equal(jint(j, "inputs.1.parameters.input_param"), 5);
        assert_null(json_object_get(j, "outputs"));
        assert_true(json_is_true(jget(j, "parameters.binary_data_output")));
        assert_int_equal(json_object_size(jget(j, "parameters")), 1);
        json_decref(j);
        grpc_http_request_free(&r);
    }

    /* With a version; no id: none in the header. */
    m.model_version = "2";
    m.id = "";
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_OK);
    assert_string_equal(r.path, "/v2/models/m/versions/2/infer");
    json_t *j = body_json(&r);
    assert_null(json_object_get(j, "id"));
    json_decref(j);
    grpc_http_request_free(&r);
}

/* Outputs asked for: each with "binary_data": true beside its own
 * parameters; request parameters of each kind (int64, bool, string,
 * double) pass through beside binary_data_output. */
static void test_infer_outputs_and_parameters(void **state)
{
    (void)state;
    static const uint8_t a[] = {9, 9, 9, 9};
    Inference__ModelInferRequest__InferInputTensor in =
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT, *inp = &in;
    int64_t s[] = {1};
    in.name = "x";
    in.datatype = "INT32";
    in.n_shape = 1;
    in.shape = s;
    ProtobufCBinaryData raw = {sizeof a, (uint8_t *)a};

    Inference__ModelInferRequest__InferRequestedOutputTensor o[2] = {
        INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT,
        INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT};
    Inference__ModelInferRequest__InferRequestedOutputTensor *op[2] = {&o[0], &o[1]};
    o[0].name = "probs";
    o[1].name = "labels";
    Inference__InferParameter cls = param_int(3);
    Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry ope =
        INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__PARAMETERS_ENTRY__INIT,
        *opep = &ope;
    ope.key = "classification";
    ope.value = &cls;
    o[1].n_parameters = 1;
    o[1].parameters = &opep;

    Inference__InferParameter pv[4] = {param_int(-1234567890123LL), param_bool(true),
                                       param_str("high"), param_double(0.25)};
    Inference__ModelInferRequest__ParametersEntry pe[4], *pp[4];
    static const char *const keys[] = {"timeout", "sequence_start", "priority_class", "temp"};
    for (int i = 0; i < 4; i++) {
        pe[i] = (Inference__ModelInferRequest__ParametersEntry)
            INFERENCE__MODEL_INFER_REQUEST__PARAMETERS_ENTRY__INIT;
        pe[i].key = (char *)keys[i];
        pe[i].value = &pv[i];
        pp[i] = &pe[i];
    }

    Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.model_name = "m";
    m.n_inputs = 1;
    m.inputs = &inp;
    m.n_raw_input_contents = 1;
    m.raw_input_contents = &raw;
    m.n_outputs = 2;
    m.outputs = op;
    m.n_parameters = 4;
    m.parameters = pp;
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_OK);
    json_t *j = body_json(&r);
    assert_int_equal(json_array_size(json_object_get(j, "outputs")), 2);
    assert_string_equal(jstr(j, "outputs.0.name"), "probs");
    assert_true(json_is_true(jget(j, "outputs.0.parameters.binary_data")));
    assert_int_equal(json_object_size(jget(j, "outputs.0.parameters")), 1);
    assert_string_equal(jstr(j, "outputs.1.name"), "labels");
    assert_true(json_is_true(jget(j, "outputs.1.parameters.binary_data")));
    assert_int_equal(jint(j, "outputs.1.parameters.classification"), 3);
    assert_int_equal(jint(j, "parameters.timeout"), -1234567890123LL);
    assert_true(json_is_true(jget(j, "parameters.sequence_start")));
    assert_string_equal(jstr(j, "parameters.priority_class"), "high");
    assert_true(json_is_real(jget(j, "parameters.temp")));
    assert_true(json_real_value(jget(j, "parameters.temp")) == 0.25);
    assert_true(json_is_true(jget(j, "parameters.binary_data_output")));
    json_decref(j);
    assert_int_equal(r.body.len, (size_t)r.json_len + sizeof a);
    grpc_http_request_free(&r);
}

/* A ModelInfer of model "m" with the one input named "t": its datatype
 * and shape, typed contents c or the raw bytes raw (either may be NULL). */
static int one_input(const char *datatype, int64_t *shape, size_t n_shape,
                     Inference__InferTensorContents *c, ProtobufCBinaryData *raw,
                     struct grpc_http_request *r, char *err, size_t cap)
{
    Inference__ModelInferRequest__InferInputTensor in =
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT, *inp = &in;
    in.name = "t";
    in.datatype = (char *)datatype;
    in.n_shape = n_shape;
    in.shape = shape;
    in.contents = c;
    Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.model_name = "m";
    m.n_inputs = 1;
    m.inputs = &inp;
    m.n_raw_input_contents = raw ? 1 : 0;
    m.raw_input_contents = raw;
    return to_http("ModelInfer", &m.base, r, err, cap);
}

/* One input of typed contents, n values (its shape [n]), in a request of
 * its own. */
static void typed_input(const char *datatype, int64_t n, Inference__InferTensorContents *c,
                        const uint8_t *want, size_t want_len)
{
    int64_t s[] = {n};
    struct grpc_http_request r;
    char err[256];
    int rc = one_input(datatype, s, 1, c, NULL, &r, err, sizeof err);
    if (rc != GRPC_OK)
        fail_msg("%s: %d %s", datatype, rc, err);
    json_t *j = body_json(&r);
    if (jint(j, "inputs.0.parameters.binary_data_size") != (long long)want_len)
        fail_msg("%s: binary_data_size %lld, want %zu", datatype,
                 jint(j, "inputs.0.parameters.binary_data_size"), want_len);
    assert_string_equal(jstr(j, "inputs.0.datatype"), datatype);
    json_decref(j);
    assert_int_equal(r.body.len, (size_t)r.json_len + want_len);
    if (want_len && memcmp(r.body.data + r.json_len, want, want_len) != 0)
        fail_msg("%s: the bytes differ", datatype);
    grpc_http_request_free(&r);
}

/* Typed contents of each datatype become the little-endian bytes the
 * binary extension carries (BYTES: each element a 4-byte little-endian
 * length, then its bytes). */
static void test_infer_typed_contents(void **state)
{
    (void)state;
    Inference__InferTensorContents c;

    float f[] = {1.5f, -2.0f};
    c = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_fp32_contents = 2;
    c.fp32_contents = f;
    static const uint8_t wf[] = {0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0};
    typed_input("FP32", 2, &c, wf, sizeof wf);

    int32_t i32[] = {-1, 7};
    c = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_int_contents = 2;
    c.int_contents = i32;
    static const uint8_t wi[] = {0xff, 0xff, 0xff, 0xff, 7, 0, 0, 0};
    typed_input("INT32", 2, &c, wi, sizeof wi);
    static const uint8_t wi16[] = {0xff, 0xff, 7, 0};
    typed_input("INT16", 2, &c, wi16, sizeof wi16);
    static const uint8_t wi8[] = {0xff, 7};
    typed_input("INT8", 2, &c, wi8, sizeof wi8);

    int64_t i64[] = {-5, 1LL << 40};
    c = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_int64_contents = 2;
    c.int64_contents = i64;
    static const uint8_t wl[] = {0xfb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                 0, 0, 0, 0, 0, 1, 0, 0};
    typed_input("INT64", 2, &c, wl, sizeof wl);

    protobuf_c_boolean bo[] = {1, 0, 1};
    c = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_bool_contents = 3;
    c.bool_contents = bo;
    static const uint8_t wb[] = {1, 0, 1};
    typed_input("BOOL", 3, &c, wb, sizeof wb);

    ProtobufCBinaryData by[] = {{2, (uint8_t *)"hi"}, {0, NULL}, {3, (uint8_t *)"a\0b"}};
    c = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_bytes_contents = 3;
    c.bytes_contents = by;
    static const uint8_t wy[] = {2, 0, 0, 0, 'h', 'i', 0, 0, 0, 0, 3, 0, 0, 0, 'a', 0, 'b'};
    typed_input("BYTES", 3, &c, wy, sizeof wy);

    uint32_t u32[] = {513, 0xffffffffu};
    c = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_uint_contents = 2;
    c.uint_contents = u32;
    static const uint8_t wu[] = {1, 2, 0, 0, 0xff, 0xff, 0xff, 0xff};
    typed_input("UINT32", 2, &c, wu, sizeof wu);
    static const uint8_t wu16[] = {1, 2, 0xff, 0xff};
    typed_input("UINT16", 2, &c, wu16, sizeof wu16);
    static const uint8_t wu8[] = {1, 0xff};
    typed_input("UINT8", 2, &c, wu8, sizeof wu8);

    uint64_t u64[] = {2};
    c = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_uint64_contents = 1;
    c.uint64_contents = u64;
    static const uint8_t wu64[] = {2, 0, 0, 0, 0, 0, 0, 0};
    typed_input("UINT64", 1, &c, wu64, sizeof wu64);

    double d[] = {1.0};
    c = (Inference__InferTensorContents)INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_fp64_contents = 1;
    c.fp64_contents = d;
    static const uint8_t wd[] = {0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
    typed_input("FP64", 1, &c, wd, sizeof wd);

}

/* Typed contents that do not fit the input, said in gRPC's terms (the
 * HTTP request they would become could only blame binary_data_size): a
 * count the shape does not take, another type's field, raw bytes of
 * another size than the shape's. */
static void test_infer_contents_against_the_shape(void **state)
{
    (void)state;
    static const struct {
        const char *dt;
        int64_t dim;
        int nfloat, nint;
        const char *want;
    } cases[] = {
        {"FP32", 64, 63, 0, "input \"t\": contents.fp32_contents has 63 values, but shape [1, 64] "
                            "needs 64"},
        {"FP32", 2, 0, 2, "input \"t\": contents.int_contents given, but datatype FP32 reads "
                          "contents.fp32_contents"},
        {"INT32", 2, 2, 2, "contents.fp32_contents given, but datatype INT32"},
        {"BF16", 2, 2, 0, "input \"t\": datatype \"BF16\" travels in raw_input_contents only"},
    };
    float f[64] = {0};
    int32_t i32[64] = {0};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
        c.n_fp32_contents = (size_t)cases[k].nfloat;
        c.fp32_contents = f;
        c.n_int_contents = (size_t)cases[k].nint;
        c.int_contents = i32;
        int64_t shape[] = {1, cases[k].dim};
        struct grpc_http_request r;
        char err[256];
        assert_int_equal(one_input(cases[k].dt, shape, 2, &c, NULL, &r, err, sizeof err),
                         GRPC_INVALID_ARGUMENT);
        grpc_http_request_free(&r);   /* a failed call keeps its echo for the caller */
        if (!strstr(err, cases[k].want))
            fail_msg("case %zu: \"%s\", want \"%s\"", k, err, cases[k].want);
    }
    /* raw_input_contents: 252 bytes for [1, 64] FP32. */
    uint8_t bytes[252] = {0};
    ProtobufCBinaryData raw = {sizeof bytes, bytes};
    int64_t shape[] = {1, 64};
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(one_input("FP32", shape, 2, NULL, &raw, &r, err, sizeof err),
                     GRPC_INVALID_ARGUMENT);
    grpc_http_request_free(&r);
    assert_non_null(strstr(err, "raw_input_contents[0] (input \"t\"): 252 bytes, but shape "
                                "[1, 64] of FP32 needs 256"));
    /* BYTES: length-prefixed elements, said in gRPC's terms too (they were
     * blamed on binary_data_size, which a gRPC client never sends). */
    static const struct { const char *b; size_t n; int64_t rows; const char *want; } bytes_cases[] = {
        {"\x64\x00\x00\x00" "abc", 7, 1, "element 0 says 100 bytes, only 3 are left"},
        {"\x01\x00\x00\x00" "a\x01\x00", 7, 2, "element 1's 4-byte length is cut short (2 bytes left)"},
        {"\x01\x00\x00\x00" "a", 5, 2, "1 elements, but shape [2, 1] needs 2"},
    };
    for (size_t k = 0; k < sizeof bytes_cases / sizeof bytes_cases[0]; k++) {
        ProtobufCBinaryData rb = {bytes_cases[k].n, (uint8_t *)bytes_cases[k].b};
        int64_t bshape[] = {bytes_cases[k].rows, 1};
        assert_int_equal(one_input("BYTES", bshape, 2, NULL, &rb, &r, err, sizeof err),
                         GRPC_INVALID_ARGUMENT);
        grpc_http_request_free(&r);
        if (!strstr(err, bytes_cases[k].want))
            fail_msg("bytes case %zu: \"%s\", want \"%s\"", k, err, bytes_cases[k].want);
    }
    ProtobufCBinaryData ok = {10, (uint8_t *)"\x01\x00\x00\x00" "a\x01\x00\x00\x00" "b"};
    int64_t two[] = {2, 1};
    assert_int_equal(one_input("BYTES", two, 2, NULL, &ok, &r, err, sizeof err), GRPC_OK);
    grpc_http_request_free(&r);
}

/* Two typed inputs: their bytes one after the other, each its size. */
static void test_infer_typed_two_inputs(void **state)
{
    (void)state;
    float f[] = {3.0f};
    int64_t l[] = {1, 2};
    Inference__InferTensorContents c0 = INFERENCE__INFER_TENSOR_CONTENTS__INIT,
                                   c1 = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c0.n_fp32_contents = 1;
    c0.fp32_contents = f;
    c1.n_int64_contents = 2;
    c1.int64_contents = l;
    Inference__ModelInferRequest__InferInputTensor in[2] = {
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT,
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT};
    Inference__ModelInferRequest__InferInputTensor *inp[2] = {&in[0], &in[1]};
    int64_t s0[] = {1}, s1[] = {2};
    in[0].name = "a";
    in[0].datatype = "FP32";
    in[0].contents = &c0;
    in[0].n_shape = 1;
    in[0].shape = s0;
    in[1].name = "b";
    in[1].datatype = "INT64";
    in[1].contents = &c1;
    in[1].n_shape = 1;
    in[1].shape = s1;
    Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.model_name = "m";
    m.n_inputs = 2;
    m.inputs = inp;
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_OK);
    json_t *j = body_json(&r);
    assert_int_equal(jint(j, "inputs.0.parameters.binary_data_size"), 4);
    assert_int_equal(jint(j, "inputs.1.parameters.binary_data_size"), 16);
    json_decref(j);
    static const uint8_t want[] = {0, 0, 0x40, 0x40, 1, 0, 0, 0, 0, 0, 0, 0,
                                   2, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(r.body.len, (size_t)r.json_len + sizeof want);
    assert_memory_equal(r.body.data + r.json_len, want, sizeof want);
    grpc_http_request_free(&r);
}

/* Typed contents take more room read than on the wire (a packed INT64
 * zero: 1 byte there, 8 unpacked and 8 converted). Past the body limit
 * once converted, or past twice the limit and 1 MiB once unpacked, the
 * call is RESOURCE_EXHAUSTED before more is allocated; a 58 KB gzipped
 * message was a 480 MB body before the handler refused it. */
static void test_infer_typed_contents_bounded(void **state)
{
    (void)state;
    enum { N = 300000 };
    int64_t *zeros = calloc(N, sizeof *zeros);
    assert_non_null(zeros);
    Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    c.n_int64_contents = N;
    c.int64_contents = zeros;
    Inference__ModelInferRequest__InferInputTensor in =
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
    Inference__ModelInferRequest__InferInputTensor *inp[1] = {&in};
    int64_t shape[] = {1, N};
    in.name = "x";
    in.datatype = "INT64";
    in.contents = &c;
    in.n_shape = 2;
    in.shape = shape;
    Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.model_name = "m";
    m.n_inputs = 1;
    m.inputs = inp;
    struct grpc_http_request r;
    char err[512];
    /* 2.4 MB converted, past a 1 MiB limit; unpacked within 3 MiB. */
    to_http_limit = 1 << 20;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err),
                     GRPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err, "contents.int64_contents become 2400000 bytes"));
    assert_non_null(strstr(err, "limits.max_body_bytes (1048576)"));
    assert_int_equal(r.body.len, 0);
    grpc_http_request_free(&r);
    /* 2.4 MB unpacked, past 2 x 256 KiB + 1 MiB: refused as it is read. */
    to_http_limit = 256 << 10;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err),
                     GRPC_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err, "once read"));
    grpc_http_request_free(&r);
    /* Within the limit: served, the whole tensor carried. */
    to_http_limit = 4 << 20;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_OK);
    assert_int_equal(r.body.len, (size_t)r.json_len + 8 * N);
    grpc_http_request_free(&r);
    to_http_limit = 64 << 20;
    free(zeros);
}

/* Each malformed ModelInfer is INVALID_ARGUMENT with a message naming the
 * problem: raw_input_contents not one per input, an input with both
 * contents and raw bytes, a datatype typed contents cannot carry (FP16),
 * an input with no contents at all. */
static void test_infer_errors(void **state)
{
    (void)state;
    static const uint8_t a[] = {1, 2};
    Inference__InferTensorContents c = INFERENCE__INFER_TENSOR_CONTENTS__INIT;
    Inference__ModelInferRequest__InferInputTensor in[2] = {
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT,
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT};
    Inference__ModelInferRequest__InferInputTensor *inp[2] = {&in[0], &in[1]};
    in[0].name = "first";
    in[0].datatype = "FP16";
    in[1].name = "second";
    in[1].datatype = "FP16";
    ProtobufCBinaryData raw[2] = {{sizeof a, (uint8_t *)a}, {sizeof a, (uint8_t *)a}};
    Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.model_name = "m";
    m.n_inputs = 2;
    m.inputs = inp;
    struct grpc_http_request r;
    char err[256];

    /* One raw for two inputs. */
    m.n_raw_input_contents = 1;
    m.raw_input_contents = raw;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "1 raw_input_contents for 2 inputs");
    grpc_http_request_free(&r);

    /* Three raw for two inputs... */
    ProtobufCBinaryData raw3[3] = {raw[0], raw[1], raw[0]};
    m.n_raw_input_contents = 3;
    m.raw_input_contents = raw3;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "3 raw_input_contents for 2 inputs");
    grpc_http_request_free(&r);

    /* ...and raw bytes with no input at all. */
    m.n_inputs = 0;
    m.n_raw_input_contents = 1;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "1 raw_input_contents for 0 inputs");
    grpc_http_request_free(&r);
    m.n_inputs = 2;

    /* Both contents and raw bytes for the second input. */
    m.n_raw_input_contents = 2;
    m.raw_input_contents = raw;
    in[1].contents = &c;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "\"second\"");
    assert_contains(err, "both contents and raw_input_contents");
    grpc_http_request_free(&r);

    /* Typed contents of FP16: raw only. */
    m.n_raw_input_contents = 0;
    m.raw_input_contents = NULL;
    in[0].contents = &c;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "\"first\"");
    assert_contains(err, "FP16");
    assert_contains(err, "raw_input_contents");
    grpc_http_request_free(&r);

    /* No datatype at all is the same. */
    in[0].datatype = "";
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "datatype \"\"");
    grpc_http_request_free(&r);

    /* No contents and no raw. */
    in[0].datatype = "FP32";
    in[0].contents = NULL;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "\"first\"");
    assert_contains(err, "no contents and no raw_input_contents");
    grpc_http_request_free(&r);
}

/* ---- answers ---- */

/* ModelReady and ServerReady: 200 → ready, 503 → not ready (OK, as
 * Triton answers); 404 → NOT_FOUND with the answer's "error" copied.
 * ServerLive: 200 → live; 503 → UNAVAILABLE. */
/* Shared memory calls: each kind's status, register and unregister as
 * their HTTP routes, a region name %-escaped into one path segment. */
static void test_to_http_shared_memory(void **state)
{
    (void)state;
    struct grpc_http_request r;
    char err[256];
    Inference__SystemSharedMemoryStatusRequest st = INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_REQUEST__INIT;
    assert_int_equal(to_http("SystemSharedMemoryStatus", &st.base, &r, err, sizeof err), GRPC_OK);
    assert_int_equal(r.method, HTTP_M_GET);
    assert_string_equal(r.path, "/v2/systemsharedmemory/status");
    grpc_http_request_free(&r);
    st.name = "in put/1%";
    assert_int_equal(to_http("SystemSharedMemoryStatus", &st.base, &r, err, sizeof err), GRPC_OK);
    assert_string_equal(r.path, "/v2/systemsharedmemory/region/in%20put%2F1%25/status");
    grpc_http_request_free(&r);

    Inference__SystemSharedMemoryRegisterRequest reg =
        INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_REQUEST__INIT;
    reg.name = "in";
    reg.key = "/k";
    reg.offset = 4096;
    reg.byte_size = 768;
    assert_int_equal(to_http("SystemSharedMemoryRegister", &reg.base, &r, err, sizeof err),
                     GRPC_OK);
    assert_int_equal(r.method, HTTP_M_POST);
    assert_string_equal(r.path, "/v2/systemsharedmemory/region/in/register");
    json_t *j = body_json(&r);
    assert_string_equal(jstr(j, "key"), "/k");
    assert_int_equal(jint(j, "offset"), 4096);
    assert_int_equal(jint(j, "byte_size"), 768);
    json_decref(j);
    grpc_http_request_free(&r);
    reg.name = "";
    assert_int_equal(to_http("SystemSharedMemoryRegister", &reg.base, &r, err, sizeof err),
                     GRPC_INVALID_ARGUMENT);
    assert_contains(err, "name");
    grpc_http_request_free(&r);

    Inference__SystemSharedMemoryUnregisterRequest un =
        INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_REQUEST__INIT;
    assert_int_equal(to_http("SystemSharedMemoryUnregister", &un.base, &r, err, sizeof err),
                     GRPC_OK);
    assert_int_equal(r.method, HTTP_M_POST);
    assert_string_equal(r.path, "/v2/systemsharedmemory/unregister");
    grpc_http_request_free(&r);
    un.name = "in";
    assert_int_equal(to_http("SystemSharedMemoryUnregister", &un.base, &r, err, sizeof err),
                     GRPC_OK);
    assert_string_equal(r.path, "/v2/systemsharedmemory/region/in/unregister");
    grpc_http_request_free(&r);
    /* ".." was a dot segment: /region/../unregister is /unregister, every
     * region gone. */
    for (int k = 0; k < 2; k++) {
        un.name = k ? ".." : ".";
        assert_int_equal(to_http("SystemSharedMemoryUnregister", &un.base, &r, err, sizeof err),
                         GRPC_INVALID_ARGUMENT);
        assert_contains(err, "dot segment");
        grpc_http_request_free(&r);
    }

    Inference__CudaSharedMemoryUnregisterRequest cu =
        INFERENCE__CUDA_SHARED_MEMORY_UNREGISTER_REQUEST__INIT;
    assert_int_equal(to_http("CudaSharedMemoryUnregister", &cu.base, &r, err, sizeof err),
                     GRPC_OK);
    assert_string_equal(r.path, "/v2/cudasharedmemory/unregister");
    grpc_http_request_free(&r);
    Inference__CudaSharedMemoryRegisterRequest cr =
        INFERENCE__CUDA_SHARED_MEMORY_REGISTER_REQUEST__INIT;
    cr.name = "g";
    cr.byte_size = 16;
    assert_int_equal(to_http("CudaSharedMemoryRegister", &cr.base, &r, err, sizeof err), GRPC_OK);
    assert_string_equal(r.path, "/v2/cudasharedmemory/region/g/register");
    grpc_http_request_free(&r);
}

/* An input in shared memory takes no raw_input_contents entry and gets no
 * binary_data_size; an output into a region is not asked as binary. */
static void test_infer_shared_memory(void **state)
{
    (void)state;
    static const uint8_t b[] = {1, 2, 3};
    Inference__ModelInferRequest__InferInputTensor in[2] = {
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT,
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT};
    Inference__ModelInferRequest__InferInputTensor *inp[2] = {&in[0], &in[1]};
    int64_t sa[] = {1, 4}, sb[] = {3};
    in[0].name = "x";
    in[0].datatype = "FP32";
    in[0].n_shape = 2;
    in[0].shape = sa;
    in[1].name = "y";
    in[1].datatype = "UINT8";
    in[1].n_shape = 1;
    in[1].shape = sb;
    Inference__InferParameter region = param_str("r"), size = param_int(16);
    Inference__ModelInferRequest__InferInputTensor__ParametersEntry pe[2] = {
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__PARAMETERS_ENTRY__INIT,
        INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__PARAMETERS_ENTRY__INIT};
    Inference__ModelInferRequest__InferInputTensor__ParametersEntry *pep[2] = {&pe[0], &pe[1]};
    pe[0].key = "shared_memory_region";
    pe[0].value = &region;
    pe[1].key = "shared_memory_byte_size";
    pe[1].value = &size;
    in[0].n_parameters = 2;
    in[0].parameters = pep;
    Inference__ModelInferRequest__InferRequestedOutputTensor out =
        INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__INIT, *outp = &out;
    Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry oe[2] = {
        INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__PARAMETERS_ENTRY__INIT,
        INFERENCE__MODEL_INFER_REQUEST__INFER_REQUESTED_OUTPUT_TENSOR__PARAMETERS_ENTRY__INIT};
    Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry *oep[2] = {&oe[0],
                                                                                         &oe[1]};
    oe[0].key = "shared_memory_region";
    oe[0].value = &region;
    oe[1].key = "shared_memory_byte_size";
    oe[1].value = &size;
    out.name = "z";
    out.n_parameters = 2;
    out.parameters = oep;
    ProtobufCBinaryData raw[1] = {{sizeof b, (uint8_t *)b}};
    Inference__ModelInferRequest m = INFERENCE__MODEL_INFER_REQUEST__INIT;
    m.model_name = "m";
    m.n_inputs = 2;
    m.inputs = inp;
    m.n_raw_input_contents = 1;   /* y's only */
    m.raw_input_contents = raw;
    m.n_outputs = 1;
    m.outputs = &outp;
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_OK);
    assert_int_equal(r.body.len, (size_t)r.json_len + sizeof b);
    assert_memory_equal(r.body.data + r.json_len, b, sizeof b);
    json_t *j = body_json(&r);
    assert_string_equal(jstr(j, "inputs.0.parameters.shared_memory_region"), "r");
    assert_int_equal(jint(j, "inputs.0.parameters.shared_memory_byte_size"), 16);
    assert_null(jget(j, "inputs.0.parameters.binary_data_size"));
    assert_int_equal(jint(j, "inputs.1.parameters.binary_data_size"), sizeof b);
    assert_string_equal(jstr(j, "outputs.0.parameters.shared_memory_region"), "r");
    assert_null(jget(j, "outputs.0.parameters.binary_data"));
    json_decref(j);
    grpc_http_request_free(&r);

    /* Two raw entries for one input outside shared memory: refused. */
    ProtobufCBinaryData two[2] = {{sizeof b, (uint8_t *)b}, {sizeof b, (uint8_t *)b}};
    m.n_raw_input_contents = 2;
    m.raw_input_contents = two;
    assert_int_equal(to_http("ModelInfer", &m.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_contains(err, "2 raw_input_contents for 1 inputs not in shared memory");
    grpc_http_request_free(&r);
}

/* Shared memory status: HTTP's array as the map by name. */
static void test_from_shared_memory_status(void **state)
{
    (void)state;
    struct buf out;
    char err[256];
    assert_int_equal(from_http("SystemSharedMemoryStatus", 200,
                               "[{\"name\":\"a\",\"key\":\"/ka\",\"offset\":0,\"byte_size\":64},"
                               "{\"name\":\"b\",\"key\":\"/kb\",\"offset\":4096,\"byte_size\":8}]",
                               &out, err, sizeof err),
                     GRPC_OK);
    Inference__SystemSharedMemoryStatusResponse *st =
        inference__system_shared_memory_status_response__unpack(NULL, out.len,
                                                                 (uint8_t *)out.data);
    assert_non_null(st);
    assert_int_equal(st->n_regions, 2);
    for (size_t i = 0; i < 2; i++) {
        const Inference__SystemSharedMemoryStatusResponse__RegionStatus *v = st->regions[i]->value;
        assert_string_equal(st->regions[i]->key, v->name);
        if (strcmp(v->name, "b") == 0) {
            assert_string_equal(v->key, "/kb");
            assert_int_equal(v->offset, 4096);
            assert_int_equal(v->byte_size, 8);
        } else {
            assert_string_equal(v->name, "a");
            assert_int_equal(v->byte_size, 64);
        }
    }
    inference__system_shared_memory_status_response__free_unpacked(st, NULL);
    buf_free(&out);
    /* None registered: the empty message; CUDA's the same way. */
    assert_int_equal(from_http("CudaSharedMemoryStatus", 200, "[]", &out, err, sizeof err),
                     GRPC_OK);
    assert_int_equal(out.len, 0);
    buf_free(&out);
    assert_int_equal(from_http("SystemSharedMemoryStatus", 404,
                               "{\"error\":\"no system shared memory region \\\"x\\\"\"}", &out,
                               err, sizeof err),
                     GRPC_NOT_FOUND);
    assert_contains(err, "no system shared memory region");
    buf_free(&out);
    assert_int_equal(from_http("SystemSharedMemoryStatus", 200, "{}", &out, err, sizeof err),
                     GRPC_INTERNAL);
    buf_free(&out);
}

static void test_from_ready_live(void **state)
{
    (void)state;
    static const char *const calls[] = {"ModelReady", "ServerReady"};
    for (size_t c = 0; c < 2; c++) {
        struct buf out;
        char err[256];
        assert_int_equal(from_http(calls[c], 200, "", &out, err, sizeof err), GRPC_OK);
        Inference__ModelReadyResponse *m =
            inference__model_ready_response__unpack(NULL, out.len, (uint8_t *)out.data);
        assert_non_null(m);
        assert_true(m->ready);
        inference__model_ready_response__free_unpacked(m, NULL);
        buf_free(&out);

        assert_int_equal(from_http(calls[c], 503, "{\"error\":\"draining\"}", &out, err, sizeof err),
                         GRPC_OK);
        m = inference__model_ready_response__unpack(NULL, out.len, (uint8_t *)out.data);
        assert_non_null(m);
        assert_false(m->ready);
        inference__model_ready_response__free_unpacked(m, NULL);
        buf_free(&out);

        /* A model or version not there: not ready, as Triton answers
         * ModelReady (tritonclient's is_model_ready returns False). */
        int rc = from_http(calls[c], 404, "{\"error\":\"unknown model \\\"x\\\"\"}", &out, err,
                           sizeof err);
        if (c == 0) {
            assert_int_equal(rc, GRPC_OK);
            m = inference__model_ready_response__unpack(NULL, out.len, (uint8_t *)out.data);
            assert_non_null(m);
            assert_false(m->ready);
            inference__model_ready_response__free_unpacked(m, NULL);
        } else {
            assert_int_equal(rc, GRPC_NOT_FOUND);
            assert_string_equal(err, "unknown model \"x\"");
            assert_int_equal(out.len, 0);
        }
        buf_free(&out);
    }
    struct buf out;
    char err[256];
    assert_int_equal(from_http("ServerLive", 200, "", &out, err, sizeof err), GRPC_OK);
    Inference__ServerLiveResponse *l =
        inference__server_live_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(l);
    assert_true(l->live);
    inference__server_live_response__free_unpacked(l, NULL);
    buf_free(&out);
    assert_int_equal(from_http("ServerLive", 503, "{\"error\":\"shutting down\"}", &out, err,
                               sizeof err),
                     GRPC_UNAVAILABLE);
    assert_string_equal(err, "shutting down");
    buf_free(&out);
}

/* An error answer's message: KServe's {"error": "..."}, OpenAI's
 * {"error": {"message": ...}}, else "HTTP status N"; the code is the
 * status's; for every kind of answer (JSON, infer, empty, ready). */
static void test_from_errors(void **state)
{
    (void)state;
    static const char *const calls[] = {"ModelMetadata", "ModelInfer", "ModelStreamInfer",
                                        "RepositoryModelLoad", "ModelConfig", "LogSettings",
                                        "RepositoryIndex", "ModelReady"};
    for (size_t c = 0; c < COUNT(calls); c++) {
        struct buf out;
        char err[256];
        assert_int_equal(from_http(calls[c], 400, "{\"error\":\"bad shape\"}", &out, err,
                                   sizeof err),
                         GRPC_INVALID_ARGUMENT);
        assert_string_equal(err, "bad shape");
        assert_int_equal(out.len, 0);
        buf_free(&out);
        assert_int_equal(from_http(calls[c], 429,
                                   "{\"error\":{\"message\":\"queue full\",\"type\":\"x\"}}", &out,
                                   err, sizeof err),
                         GRPC_RESOURCE_EXHAUSTED);
        assert_string_equal(err, "queue full");
        buf_free(&out);
        assert_int_equal(from_http(calls[c], 502, "<html>bad gateway</html>", &out, err,
                                   sizeof err),
                         GRPC_UNAVAILABLE);
        assert_string_equal(err, "HTTP status 502");
        buf_free(&out);
        assert_int_equal(from_http(calls[c], 500, "", &out, err, sizeof err), GRPC_INTERNAL);
        assert_string_equal(err, "HTTP status 500");
        buf_free(&out);
        /* JSON, but no string "error". */
        assert_int_equal(from_http(calls[c], 403, "{\"error\":5}", &out, err, sizeof err),
                         GRPC_PERMISSION_DENIED);
        assert_string_equal(err, "HTTP status 403");
        buf_free(&out);
        assert_int_equal(from_http(calls[c], 401, "[\"error\"]", &out, err, sizeof err),
                         GRPC_UNAUTHENTICATED);
        assert_string_equal(err, "HTTP status 401");
        buf_free(&out);
    }
    /* A long message is cut to the space given, NUL-terminated. */
    struct buf out;
    char small[8];
    assert_int_equal(from_http("ModelMetadata", 404, "{\"error\":\"0123456789abc\"}", &out, small,
                               sizeof small),
                     GRPC_NOT_FOUND);
    assert_string_equal(small, "0123456");
    buf_free(&out);
}

static Inference__ModelInferResponse *unpack_infer(const struct buf *out)
{
    Inference__ModelInferResponse *m =
        inference__model_infer_response__unpack(NULL, out->len, (const uint8_t *)out->data);
    if (!m)
        fail_msg("not a ModelInferResponse");
    return m;
}

/* The value of key in an InferParameter map (the entries share a layout). */
static const Inference__InferParameter *param_of(size_t n,
                                                 Inference__ModelInferResponse__ParametersEntry **e,
                                                 const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i]->key, key) == 0)
            return e[i]->value;
    return NULL;
}

/* A binary answer (JSON header of Inference-Header-Content-Length bytes,
 * then the outputs' bytes): each output's bytes in raw_output_contents in
 * order; binary_data_size taken out of the output's parameters (and the
 * parameters dropped when nothing is left); names, datatypes, shapes,
 * model, version, id and the answer's parameters kept. */
static void test_from_infer_binary(void **state)
{
    (void)state;
    static const char head[] =
        "{\"model_name\":\"m\",\"model_version\":\"1\",\"id\":\"req-1\","
        "\"parameters\":{\"sequence_id\":7,\"note\":\"n\"},"
        "\"outputs\":[{\"name\":\"probs\",\"datatype\":\"FP32\",\"shape\":[1,2],"
        "\"parameters\":{\"binary_data_size\":8}},"
        "{\"name\":\"ids\",\"datatype\":\"INT64\",\"shape\":[1],"
        "\"parameters\":{\"binary_data_size\":8,\"classification\":true}},"
        "{\"name\":\"empty\",\"datatype\":\"FP32\",\"shape\":[0],"
        "\"parameters\":{\"binary_data_size\":0}}]}";
    static const uint8_t bin[] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, 42, 0, 0, 0, 0, 0, 0, 0};
    char body[sizeof head - 1 + sizeof bin];
    memcpy(body, head, sizeof head - 1);
    memcpy(body + sizeof head - 1, bin, sizeof bin);
    char headers[128];
    snprintf(headers, sizeof headers,
             "Content-Type: application/octet-stream\r\nInference-Header-Content-Length: %zu\r\n",
             sizeof head - 1);
    static const char *const calls[] = {"ModelInfer", "ModelStreamInfer"};
    for (size_t c = 0; c < 2; c++) {
        struct buf out;
        char err[256];
        int rc = from_http_n(calls[c], 200, body, sizeof body, headers, &out, err, sizeof err);
        if (rc != GRPC_OK)
            fail_msg("%d %s", rc, err);
        Inference__ModelInferResponse *m = unpack_infer(&out);
        assert_string_equal(m->model_name, "m");
        assert_string_equal(m->model_version, "1");
        assert_string_equal(m->id, "req-1");
        const Inference__InferParameter *p = param_of(m->n_parameters, m->parameters, "sequence_id");
        assert_non_null(p);
        assert_int_equal(p->parameter_choice_case,
                         IP_CASE(INT64_PARAM));
        assert_int_equal(p->int64_param, 7);
        p = param_of(m->n_parameters, m->parameters, "note");
        assert_non_null(p);
        assert_string_equal(p->string_param, "n");
        assert_int_equal(m->n_outputs, 3);
        assert_string_equal(m->outputs[0]->name, "probs");
        assert_string_equal(m->outputs[0]->datatype, "FP32");
        assert_int_equal(m->outputs[0]->n_shape, 2);
        assert_int_equal(m->outputs[0]->shape[1], 2);
        assert_int_equal(m->outputs[0]->n_parameters, 0);
        assert_null(m->outputs[0]->contents);
        assert_string_equal(m->outputs[1]->name, "ids");
        assert_int_equal(m->outputs[1]->n_parameters, 1);
        assert_string_equal(m->outputs[1]->parameters[0]->key, "classification");
        assert_true(m->outputs[1]->parameters[0]->value->bool_param);
        assert_int_equal(m->outputs[2]->n_parameters, 0);
        assert_int_equal(m->n_raw_output_contents, 3);
        assert_int_equal(m->raw_output_contents[0].len, 8);
        assert_memory_equal(m->raw_output_contents[0].data, bin, 8);
        assert_int_equal(m->raw_output_contents[1].len, 8);
        assert_memory_equal(m->raw_output_contents[1].data, bin + 8, 8);
        assert_int_equal(m->raw_output_contents[2].len, 0);
        inference__model_infer_response__free_unpacked(m, NULL);
        buf_free(&out);
    }

    /* The header's name in any case, its value after spaces. */
    snprintf(headers, sizeof headers, "inference-header-content-length:   %zu\r\n",
             sizeof head - 1);
    struct buf out;
    char err[256];
    assert_int_equal(from_http_n("ModelInfer", 200, body, sizeof body, headers, &out, err,
                                 sizeof err),
                     GRPC_OK);
    Inference__ModelInferResponse *m = unpack_infer(&out);
    assert_int_equal(m->n_raw_output_contents, 3);
    assert_memory_equal(m->raw_output_contents[1].data, bin + 8, 8);
    inference__model_infer_response__free_unpacked(m, NULL);
    buf_free(&out);
}

/* An answer whose outputs are JSON "data" (FP32, INT32, INT64, BYTES):
 * each packed into raw_output_contents, little-endian (BYTES with 4-byte
 * lengths), "data" not in the message; mixed with a binary output, each
 * keeps its order. */
static void test_from_infer_json_data(void **state)
{
    (void)state;
    static const char head[] =
        "{\"model_name\":\"m\",\"outputs\":["
        "{\"name\":\"f\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[1.5,-2]},"
        "{\"name\":\"bin\",\"datatype\":\"UINT8\",\"shape\":[3],"
        "\"parameters\":{\"binary_data_size\":3}},"
        "{\"name\":\"l\",\"datatype\":\"INT64\",\"shape\":[2],\"data\":[-3,4000000000]},"
        "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],\"data\":[\"ab\",\"\"]},"
        "{\"name\":\"i\",\"datatype\":\"INT32\",\"shape\":[1],\"data\":[-2]}]}";
    char body[sizeof head - 1 + 3];
    memcpy(body, head, sizeof head - 1);
    memcpy(body + sizeof head - 1, "\x07\x08\x09", 3);
    char headers[96];
    snprintf(headers, sizeof headers, "Inference-Header-Content-Length: %zu\r\n", sizeof head - 1);
    struct buf out;
    char err[256];
    int rc = from_http_n("ModelInfer", 200, body, sizeof body, headers, &out, err, sizeof err);
    if (rc != GRPC_OK)
        fail_msg("%d %s", rc, err);
    Inference__ModelInferResponse *m = unpack_infer(&out);
    assert_int_equal(m->n_outputs, 5);
    assert_int_equal(m->n_raw_output_contents, 5);
    static const uint8_t wf[] = {0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0};
    assert_int_equal(m->raw_output_contents[0].len, sizeof wf);
    assert_memory_equal(m->raw_output_contents[0].data, wf, sizeof wf);
    assert_int_equal(m->raw_output_contents[1].len, 3);
    assert_memory_equal(m->raw_output_contents[1].data, "\x07\x08\x09", 3);
    static const uint8_t wl[] = {0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                 0x00, 0x28, 0x6b, 0xee, 0, 0, 0, 0};
    assert_int_equal(m->raw_output_contents[2].len, sizeof wl);
    assert_memory_equal(m->raw_output_contents[2].data, wl, sizeof wl);
    static const uint8_t ws[] = {2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0};
    assert_int_equal(m->raw_output_contents[3].len, sizeof ws);
    assert_memory_equal(m->raw_output_contents[3].data, ws, sizeof ws);
    static const uint8_t wi[] = {0xfe, 0xff, 0xff, 0xff};
    assert_int_equal(m->raw_output_contents[4].len, sizeof wi);
    assert_memory_equal(m->raw_output_contents[4].data, wi, sizeof wi);
    for (size_t i = 0; i < m->n_outputs; i++)
        assert_null(m->outputs[i]->contents);
    assert_string_equal(m->outputs[3]->name, "s");
    assert_int_equal(m->outputs[3]->n_shape, 1);
    assert_int_equal(m->outputs[3]->shape[0], 2);
    inference__model_infer_response__free_unpacked(m, NULL);
    buf_free(&out);

    /* All JSON, no header: the whole body is the JSON; an empty "data". */
    static const char all_json[] =
        "{\"outputs\":[{\"name\":\"e\",\"datatype\":\"FP32\",\"shape\":[0],\"data\":[]},"
        "{\"name\":\"f\",\"datatype\":\"FP32\",\"shape\":[1],\"data\":[0.5]}]}";
    rc = from_http("ModelInfer", 200, all_json, &out, err, sizeof err);
    if (rc != GRPC_OK)
        fail_msg("%d %s", rc, err);
    m = unpack_infer(&out);
    assert_int_equal(m->n_raw_output_contents, 2);
    assert_int_equal(m->raw_output_contents[0].len, 0);
    assert_int_equal(m->raw_output_contents[1].len, 4);
    assert_memory_equal(m->raw_output_contents[1].data, "\0\0\0\x3f", 4);
    inference__model_infer_response__free_unpacked(m, NULL);
    buf_free(&out);
}

/* Answers that are not a KServe v2 answer are INTERNAL: binary_data_size
 * past the end of the body (or negative), a 200 that is not JSON (or not
 * an object), "data" of a datatype not converted. */
static void test_from_infer_bad(void **state)
{
    (void)state;
    static const char head[] = "{\"outputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[2],"
                               "\"parameters\":{\"binary_data_size\":8}}]}";
    char body[sizeof head - 1 + 7];
    memcpy(body, head, sizeof head - 1);
    memset(body + sizeof head - 1, 1, 7);
    char headers[96];
    snprintf(headers, sizeof headers, "Inference-Header-Content-Length: %zu\r\n", sizeof head - 1);
    struct buf out;
    char err[256];
    assert_int_equal(from_http_n("ModelInfer", 200, body, sizeof body, headers, &out, err,
                                 sizeof err),
                     GRPC_INTERNAL);
    assert_contains(err, "binary_data_size past");
    assert_int_equal(out.len, 0);
    buf_free(&out);

    /* Two outputs that together run past the end. */
    static const char head2[] =
        "{\"outputs\":[{\"name\":\"a\",\"datatype\":\"UINT8\",\"shape\":[4],"
        "\"parameters\":{\"binary_data_size\":4}},{\"name\":\"b\",\"datatype\":\"UINT8\","
        "\"shape\":[4],\"parameters\":{\"binary_data_size\":4}}]}";
    char body2[sizeof head2 - 1 + 6];
    memcpy(body2, head2, sizeof head2 - 1);
    memset(body2 + sizeof head2 - 1, 1, 6);
    snprintf(headers, sizeof headers, "Inference-Header-Content-Length: %zu\r\n", sizeof head2 - 1);
    assert_int_equal(from_http_n("ModelInfer", 200, body2, sizeof body2, headers, &out, err,
                                 sizeof err),
                     GRPC_INTERNAL);
    assert_contains(err, "output 1");
    buf_free(&out);

    static const char neg[] = "{\"outputs\":[{\"name\":\"a\",\"datatype\":\"FP32\",\"shape\":[2],"
                              "\"parameters\":{\"binary_data_size\":-1}}]}";
    assert_int_equal(from_http("ModelInfer", 200, neg, &out, err, sizeof err), GRPC_INTERNAL);
    buf_free(&out);

    assert_int_equal(from_http("ModelInfer", 200, "not json", &out, err, sizeof err),
                     GRPC_INTERNAL);
    assert_contains(err, "not a KServe v2 answer");
    buf_free(&out);
    assert_int_equal(from_http("ModelInfer", 200, "[1,2]", &out, err, sizeof err), GRPC_INTERNAL);
    buf_free(&out);
    assert_int_equal(from_http("ModelInfer", 200, "", &out, err, sizeof err), GRPC_INTERNAL);
    buf_free(&out);

    static const char fp16[] =
        "{\"outputs\":[{\"name\":\"a\",\"datatype\":\"FP16\",\"shape\":[1],\"data\":[1]}]}";
    assert_int_equal(from_http("ModelInfer", 200, fp16, &out, err, sizeof err), GRPC_INTERNAL);
    assert_contains(err, "unsupported datatype");
    buf_free(&out);
    static const char bytes_num[] =
        "{\"outputs\":[{\"name\":\"a\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[1]}]}";
    assert_int_equal(from_http("ModelInfer", 200, bytes_num, &out, err, sizeof err),
                     GRPC_INTERNAL);
    buf_free(&out);
}

/* ModelConfig: the config JSON under "config", enums by name (data_type
 * TYPE_FP32, instance_group kind KIND_CPU), dims, and dynamic_batching as
 * the scheduling oneof's member. */
static void test_from_model_config(void **state)
{
    (void)state;
    static const char cfg[] =
        "{\"name\":\"m\",\"platform\":\"batchgate\",\"backend\":\"cpu\",\"max_batch_size\":8,"
        "\"input\":[{\"name\":\"x\",\"data_type\":\"TYPE_FP32\",\"dims\":[4,-1]}],"
        "\"output\":[{\"name\":\"y\",\"data_type\":\"TYPE_INT64\",\"dims\":[2]}],"
        "\"instance_group\":[{\"name\":\"g\",\"kind\":\"KIND_CPU\",\"count\":2}],"
        "\"dynamic_batching\":{\"preferred_batch_size\":[4,8],"
        "\"max_queue_delay_microseconds\":500},"
        "\"batchgate_extra\":{\"a\":1}}";
    struct buf out;
    char err[256];
    int rc = from_http("ModelConfig", 200, cfg, &out, err, sizeof err);
    if (rc != GRPC_OK)
        fail_msg("%d %s", rc, err);
    Inference__ModelConfigResponse *r =
        inference__model_config_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(r);
    Inference__ModelConfig *c = r->config;
    assert_non_null(c);
    assert_string_equal(c->name, "m");
    assert_string_equal(c->platform, "batchgate");
    assert_string_equal(c->backend, "cpu");
    assert_int_equal(c->max_batch_size, 8);
    assert_int_equal(c->n_input, 1);
    assert_string_equal(c->input[0]->name, "x");
    assert_int_equal(c->input[0]->data_type, INFERENCE__DATA_TYPE__TYPE_FP32);
    assert_int_equal(c->input[0]->n_dims, 2);
    assert_int_equal(c->input[0]->dims[0], 4);
    assert_int_equal(c->input[0]->dims[1], -1);
    assert_int_equal(c->n_output, 1);
    assert_int_equal(c->output[0]->data_type, INFERENCE__DATA_TYPE__TYPE_INT64);
    assert_int_equal(c->n_instance_group, 1);
    assert_int_equal(c->instance_group[0]->kind, INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU);
    assert_int_equal(c->instance_group[0]->count, 2);
    assert_int_equal(c->scheduling_choice_case,
                     INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING);
    assert_non_null(c->dynamic_batching);
    assert_int_equal(c->dynamic_batching->n_preferred_batch_size, 2);
    assert_int_equal(c->dynamic_batching->preferred_batch_size[1], 8);
    assert_int_equal(c->dynamic_batching->max_queue_delay_microseconds, 500);
    inference__model_config_response__free_unpacked(r, NULL);
    buf_free(&out);

    /* Not JSON: INTERNAL. */
    assert_int_equal(from_http("ModelConfig", 200, "{oops", &out, err, sizeof err), GRPC_INTERNAL);
    assert_contains(err, "not JSON");
    buf_free(&out);
}

/* ModelStatistics: the known fields set (nested durations, batch stats,
 * uint64 counts), fields the message lacks skipped at every level. */
static void test_from_statistics(void **state)
{
    (void)state;
    static const char js[] =
        "{\"model_stats\":[{\"name\":\"m\",\"version\":\"1\",\"last_inference\":1700000000123,"
        "\"inference_count\":10,\"execution_count\":4,\"tenants\":{\"t1\":3},"
        "\"inference_stats\":{\"success\":{\"count\":10,\"ns\":123456789},"
        "\"queue\":{\"count\":10,\"ns\":99,\"p99_ns\":5},\"shed\":{\"count\":1}},"
        "\"batch_stats\":[{\"batch_size\":2,\"compute_infer\":{\"count\":3,\"ns\":7}}],"
        "\"gpu\":[1,2,3]}],\"batchgate\":{\"uptime\":5}}";
    struct buf out;
    char err[256];
    int rc = from_http("ModelStatistics", 200, js, &out, err, sizeof err);
    if (rc != GRPC_OK)
        fail_msg("%d %s", rc, err);
    Inference__ModelStatisticsResponse *r =
        inference__model_statistics_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(r);
    assert_int_equal(r->n_model_stats, 1);
    Inference__ModelStatistics *s = r->model_stats[0];
    assert_string_equal(s->name, "m");
    assert_string_equal(s->version, "1");
    assert_int_equal(s->last_inference, 1700000000123ULL);
    assert_int_equal(s->inference_count, 10);
    assert_int_equal(s->execution_count, 4);
    assert_non_null(s->inference_stats);
    assert_int_equal(s->inference_stats->success->count, 10);
    assert_int_equal(s->inference_stats->success->ns, 123456789);
    assert_int_equal(s->inference_stats->queue->ns, 99);
    assert_null(s->inference_stats->fail);
    assert_int_equal(s->n_batch_stats, 1);
    assert_int_equal(s->batch_stats[0]->batch_size, 2);
    assert_int_equal(s->batch_stats[0]->compute_infer->count, 3);
    assert_int_equal(s->batch_stats[0]->compute_infer->ns, 7);
    assert_null(s->batch_stats[0]->compute_input);
    assert_int_equal(s->n_memory_usage, 0);
    assert_int_equal(s->n_response_stats, 0);
    /* Nothing else in the bytes: the message packs back to the same size. */
    assert_int_equal(inference__model_statistics_response__get_packed_size(r), out.len);
    inference__model_statistics_response__free_unpacked(r, NULL);
    buf_free(&out);
}

/* RepositoryIndex: the answer is an array, under "models". */
static void test_from_repository_index(void **state)
{
    (void)state;
    static const char js[] = "[{\"name\":\"a\",\"version\":\"1\",\"state\":\"READY\"},"
                             "{\"name\":\"b\",\"state\":\"UNAVAILABLE\",\"reason\":\"no file\"}]";
    struct buf out;
    char err[256];
    assert_int_equal(from_http("RepositoryIndex", 200, js, &out, err, sizeof err), GRPC_OK);
    Inference__RepositoryIndexResponse *r =
        inference__repository_index_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(r);
    assert_int_equal(r->n_models, 2);
    assert_string_equal(r->models[0]->name, "a");
    assert_string_equal(r->models[0]->version, "1");
    assert_string_equal(r->models[0]->state, "READY");
    assert_string_equal(r->models[0]->reason, "");
    assert_string_equal(r->models[1]->name, "b");
    assert_string_equal(r->models[1]->state, "UNAVAILABLE");
    assert_string_equal(r->models[1]->reason, "no file");
    inference__repository_index_response__free_unpacked(r, NULL);
    buf_free(&out);

    assert_int_equal(from_http("RepositoryIndex", 200, "[]", &out, err, sizeof err), GRPC_OK);
    r = inference__repository_index_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(r);
    assert_int_equal(r->n_models, 0);
    inference__repository_index_response__free_unpacked(r, NULL);
    buf_free(&out);
}

static const Inference__LogSettingsResponse__SettingValue *
setting_of(const Inference__LogSettingsResponse *r, const char *key)
{
    for (size_t i = 0; i < r->n_settings; i++)
        if (strcmp(r->settings[i]->key, key) == 0)
            return r->settings[i]->value;
    return NULL;
}

/* LogSettings: the answer's object is the settings map, each value's
 * oneof member chosen by its JSON type (bool, integer → uint32, string);
 * values no member takes are left out. */
static void test_from_log_settings(void **state)
{
    (void)state;
    static const char js[] = "{\"log_file\":\"\",\"log_info\":true,\"log_warning\":false,"
                             "\"log_verbose_level\":2,\"log_format\":\"default\","
                             "\"bad_list\":[1],\"bad_null\":null,\"bad_negative\":-1,"
                             "\"bad_real\":1.5,\"bad_big\":5000000000}";
    struct buf out;
    char err[256];
    assert_int_equal(from_http("LogSettings", 200, js, &out, err, sizeof err), GRPC_OK);
    Inference__LogSettingsResponse *r =
        inference__log_settings_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(r);
    const Inference__LogSettingsResponse__SettingValue *v = setting_of(r, "log_file");
    assert_non_null(v);
    assert_int_equal(v->parameter_choice_case,
                     LOG_RESP_CASE(STRING_PARAM));
    assert_string_equal(v->string_param, "");
    v = setting_of(r, "log_info");
    assert_int_equal(v->parameter_choice_case,
                     LOG_RESP_CASE(BOOL_PARAM));
    assert_true(v->bool_param);
    v = setting_of(r, "log_warning");
    assert_int_equal(v->parameter_choice_case,
                     LOG_RESP_CASE(BOOL_PARAM));
    assert_false(v->bool_param);
    v = setting_of(r, "log_verbose_level");
    assert_int_equal(v->parameter_choice_case,
                     LOG_RESP_CASE(UINT32_PARAM));
    assert_int_equal(v->uint32_param, 2);
    v = setting_of(r, "log_format");
    assert_string_equal(v->string_param, "default");
    static const char *const bad[] = {"bad_list", "bad_null", "bad_negative", "bad_real",
                                      "bad_big"};
    for (size_t i = 0; i < COUNT(bad); i++)
        if (setting_of(r, bad[i]))
            fail_msg("%s: kept", bad[i]);
    assert_int_equal(r->n_settings, 5);
    inference__log_settings_response__free_unpacked(r, NULL);
    buf_free(&out);
}

/* ServerMetadata and ModelMetadata: the answer field for field, the
 * tensors' shapes as int64. */
static void test_from_metadata(void **state)
{
    (void)state;
    struct buf out;
    char err[256];
    assert_int_equal(from_http("ServerMetadata", 200,
                               "{\"name\":\"batchgate\",\"version\":\"0.1\","
                               "\"extensions\":[\"binary_tensor_data\",\"model_repository\"]}",
                               &out, err, sizeof err),
                     GRPC_OK);
    Inference__ServerMetadataResponse *s =
        inference__server_metadata_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(s);
    assert_string_equal(s->name, "batchgate");
    assert_int_equal(s->n_extensions, 2);
    assert_string_equal(s->extensions[1], "model_repository");
    inference__server_metadata_response__free_unpacked(s, NULL);
    buf_free(&out);

    assert_int_equal(from_http("ModelMetadata", 200,
                               "{\"name\":\"m\",\"versions\":[\"1\"],\"platform\":\"p\","
                               "\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\","
                               "\"shape\":[-1,4]}],\"outputs\":[]}",
                               &out, err, sizeof err),
                     GRPC_OK);
    Inference__ModelMetadataResponse *m =
        inference__model_metadata_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(m);
    assert_string_equal(m->name, "m");
    assert_int_equal(m->n_versions, 1);
    assert_int_equal(m->n_inputs, 1);
    assert_string_equal(m->inputs[0]->datatype, "FP32");
    assert_int_equal(m->inputs[0]->n_shape, 2);
    assert_int_equal(m->inputs[0]->shape[0], -1);
    assert_int_equal(m->n_outputs, 0);
    inference__model_metadata_response__free_unpacked(m, NULL);
    buf_free(&out);
}

/* RepositoryModelLoad/Unload: 200 (whatever the body) → the empty
 * message, OK; an error → its code and message. */
static void test_from_empty(void **state)
{
    (void)state;
    static const char *const calls[] = {"RepositoryModelLoad", "RepositoryModelUnload"};
    for (size_t c = 0; c < 2; c++) {
        struct buf out;
        char err[256];
        assert_int_equal(from_http(calls[c], 200, "{\"loaded\":true}", &out, err, sizeof err),
                         GRPC_OK);
        assert_int_equal(out.len, 0);
        Inference__RepositoryModelLoadResponse *r =
            inference__repository_model_load_response__unpack(NULL, out.len, (uint8_t *)"");
        assert_non_null(r);
        inference__repository_model_load_response__free_unpacked(r, NULL);
        buf_free(&out);
        assert_int_equal(from_http(calls[c], 409, "{\"error\":\"busy\"}", &out, err, sizeof err),
                         GRPC_FAILED_PRECONDITION);
        assert_string_equal(err, "busy");
        buf_free(&out);
    }
}

/* ModelStreamInferResponse: an answer's bytes are infer_response (field
 * 2), an error is error_message (field 1); long ones take a multi-byte
 * length. */
static void test_stream_response(void **state)
{
    (void)state;
    Inference__ModelInferResponse ir = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    ir.model_name = "m";
    ir.id = "x";
    uint8_t raw[300];
    memset(raw, 0xab, sizeof raw);
    ProtobufCBinaryData rc = {sizeof raw, raw};
    ir.n_raw_output_contents = 1;
    ir.raw_output_contents = &rc;
    size_t n = inference__model_infer_response__get_packed_size(&ir);
    uint8_t *b = malloc(n);
    inference__model_infer_response__pack(&ir, b);

    struct buf out = BUF_INIT;
    assert_int_equal(grpc_stream_response(b, n, NULL, &out), 0);
    assert_int_equal((uint8_t)out.data[0], 0x12);
    Inference__ModelStreamInferResponse *s =
        inference__model_stream_infer_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(s);
    assert_string_equal(s->error_message, "");
    assert_non_null(s->infer_response);
    assert_string_equal(s->infer_response->model_name, "m");
    assert_string_equal(s->infer_response->id, "x");
    assert_int_equal(s->infer_response->n_raw_output_contents, 1);
    assert_memory_equal(s->infer_response->raw_output_contents[0].data, raw, sizeof raw);
    inference__model_stream_infer_response__free_unpacked(s, NULL);
    buf_free(&out);
    free(b);

    /* An empty answer is still infer_response, present and empty. */
    assert_int_equal(grpc_stream_response(NULL, 0, NULL, &out), 0);
    assert_int_equal(out.len, 2);
    s = inference__model_stream_infer_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(s);
    assert_non_null(s->infer_response);
    inference__model_stream_infer_response__free_unpacked(s, NULL);
    buf_free(&out);

    char msg[200];
    memset(msg, 'e', sizeof msg - 1);
    msg[sizeof msg - 1] = '\0';
    memcpy(msg, "unknown model", 13);
    assert_int_equal(grpc_stream_response(NULL, 0, msg, &out), 0);
    assert_int_equal((uint8_t)out.data[0], 0x0a);
    s = inference__model_stream_infer_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(s);
    assert_string_equal(s->error_message, msg);
    assert_null(s->infer_response);
    inference__model_stream_infer_response__free_unpacked(s, NULL);
    buf_free(&out);

    /* Appended: after what out already holds. */
    assert_int_equal(buf_append(&out, "abc", 3), 0);
    assert_int_equal(grpc_stream_response(NULL, 0, "e", &out), 0);
    assert_int_equal(out.len, 6);
    assert_memory_equal(out.data, "abc\x0a\x01" "e", 6);
    buf_free(&out);
}

/* A ModelInfer request that cannot be served still echoes its model,
 * version and id, and an in-stream error carries them beside its message. */
static void test_stream_error_echo(void **state)
{
    (void)state;
    Inference__ModelInferRequest im = INFERENCE__MODEL_INFER_REQUEST__INIT;
    im.model_name = "digits";
    im.model_version = "v 1";   /* not a version: refused */
    im.id = "req-7";
    struct grpc_http_request r;
    char err[256];
    assert_int_equal(to_http("ModelInfer", &im.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_true(r.echo.len > 0);
    struct buf out = BUF_INIT;
    assert_int_equal(grpc_stream_response(r.echo.data, r.echo.len, err, &out), 0);
    Inference__ModelStreamInferResponse *s =
        inference__model_stream_infer_response__unpack(NULL, out.len, (uint8_t *)out.data);
    assert_non_null(s);
    assert_string_equal(s->error_message, err);
    assert_non_null(s->infer_response);
    assert_string_equal(s->infer_response->model_name, "digits");
    assert_string_equal(s->infer_response->model_version, "v 1");
    assert_string_equal(s->infer_response->id, "req-7");
    assert_int_equal(s->infer_response->n_outputs, 0);
    inference__model_stream_infer_response__free_unpacked(s, NULL);
    buf_free(&out);
    grpc_http_request_free(&r);

    /* No id: the echo names the model only; other calls echo nothing. */
    im.id = "";
    im.model_version = "";
    assert_int_equal(to_http("ModelInfer", &im.base, &r, err, sizeof err), GRPC_OK);
    Inference__ModelInferResponse *e =
        inference__model_infer_response__unpack(NULL, r.echo.len, (uint8_t *)r.echo.data);
    assert_non_null(e);
    assert_string_equal(e->model_name, "digits");
    assert_string_equal(e->id, "");
    inference__model_infer_response__free_unpacked(e, NULL);
    grpc_http_request_free(&r);
    assert_int_equal(model_call("ModelReady", "m", "1", &r, err, sizeof err), GRPC_OK);
    assert_int_equal(r.echo.len, 0);
    grpc_http_request_free(&r);
    /* Nothing named at all: an empty echo (the error goes alone). */
    im.model_name = "";
    assert_int_equal(to_http("ModelInfer", &im.base, &r, err, sizeof err), GRPC_INVALID_ARGUMENT);
    assert_int_equal(r.echo.len, 0);
    assert_null(r.echo.data);
    grpc_http_request_free(&r);
}

/* ---- pbjson ---- */

static json_t *parse(const char *s)
{
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    if (!j)
        fail_msg("%s: %s", s, je.text);
    return j;
}

/* Enums by name or number; an unknown name or number is skipped. */
static void test_pbjson_enums(void **state)
{
    (void)state;
    struct pbjson_arena *a = pbjson_arena_new();
    json_t *j = parse("{\"input\":[{\"name\":\"a\",\"data_type\":11},"
                      "{\"name\":\"b\",\"data_type\":\"TYPE_INT64\"},"
                      "{\"name\":\"c\",\"data_type\":9999},"
                      "{\"name\":\"d\",\"data_type\":\"TYPE_NOPE\"},"
                      "{\"name\":\"e\",\"data_type\":9.0}]}");
    Inference__ModelConfig *c =
        (Inference__ModelConfig *)pbjson_message(&inference__model_config__descriptor, j, a);
    assert_non_null(c);
    assert_int_equal(c->n_input, 5);
    assert_int_equal(c->input[0]->data_type, INFERENCE__DATA_TYPE__TYPE_FP32);
    assert_int_equal(c->input[1]->data_type, INFERENCE__DATA_TYPE__TYPE_INT64);
    assert_int_equal(c->input[2]->data_type, INFERENCE__DATA_TYPE__TYPE_INVALID);
    assert_int_equal(c->input[3]->data_type, INFERENCE__DATA_TYPE__TYPE_INVALID);
    assert_int_equal(c->input[4]->data_type, INFERENCE__DATA_TYPE__TYPE_INT64);
    json_decref(j);
    pbjson_arena_free(a);
}

/* A value of the wrong JSON type is skipped, the rest of the message kept:
 * a string for an int, a number for a string, an int for a bool, an
 * object for a repeated field, a scalar for a message field, an int out of
 * range for int32, a real that is not whole for an int. */
static void test_pbjson_wrong_types(void **state)
{
    (void)state;
    struct pbjson_arena *a = pbjson_arena_new();
    json_t *j = parse("{\"name\":7,\"platform\":\"p\",\"max_batch_size\":\"8\","
                      "\"input\":{\"name\":\"x\"},\"version_policy\":\"latest\","
                      "\"dynamic_batching\":[1],"
                      "\"instance_group\":[{\"count\":3000000000,\"name\":\"g\"},"
                      "{\"count\":1.5,\"kind\":true}],"
                      "\"output\":[{\"name\":\"y\",\"is_non_linear_format_io\":1}]}");
    Inference__ModelConfig *c =
        (Inference__ModelConfig *)pbjson_message(&inference__model_config__descriptor, j, a);
    assert_non_null(c);
    assert_string_equal(c->name, "");
    assert_string_equal(c->platform, "p");
    assert_int_equal(c->max_batch_size, 0);
    assert_int_equal(c->n_input, 0);
    assert_null(c->version_policy);
    assert_int_equal(c->scheduling_choice_case, INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE__NOT_SET);
    assert_int_equal(c->n_instance_group, 2);
    assert_int_equal(c->instance_group[0]->count, 0);
    assert_string_equal(c->instance_group[0]->name, "g");
    assert_int_equal(c->instance_group[1]->count, 0);
    assert_int_equal(c->instance_group[1]->kind, INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_AUTO);
    assert_int_equal(c->n_output, 1);
    assert_false(c->output[0]->is_non_linear_format_io);
    /* It packs (nothing half-set). */
    size_t n = protobuf_c_message_get_packed_size(&c->base);
    uint8_t *b = malloc(n + 1);
    protobuf_c_message_pack(&c->base, b);
    Inference__ModelConfig *back = inference__model_config__unpack(NULL, n, b);
    assert_non_null(back);
    assert_string_equal(back->platform, "p");
    assert_null(back->version_policy);
    inference__model_config__free_unpacked(back, NULL);
    free(b);
    json_decref(j);
    pbjson_arena_free(a);
}

/* uint64: a negative value skipped, a whole real taken; int64 extremes. */
static void test_pbjson_uint64(void **state)
{
    (void)state;
    struct pbjson_arena *a = pbjson_arena_new();
    json_t *j = parse("{\"last_inference\":-1,\"inference_count\":9007199254740993,"
                      "\"execution_count\":3.0,\"memory_usage\":[{\"id\":-9223372036854775808,"
                      "\"byte_size\":-5,\"type\":\"GPU\"}]}");
    Inference__ModelStatistics *s =
        (Inference__ModelStatistics *)pbjson_message(&inference__model_statistics__descriptor, j, a);
    assert_non_null(s);
    assert_int_equal(s->last_inference, 0);
    assert_int_equal(s->inference_count, 9007199254740993ULL);
    assert_int_equal(s->execution_count, 3);
    assert_int_equal(s->n_memory_usage, 1);
    assert_true(s->memory_usage[0]->id == INT64_MIN);
    assert_int_equal(s->memory_usage[0]->byte_size, 0);
    assert_string_equal(s->memory_usage[0]->type, "GPU");
    json_decref(j);
    pbjson_arena_free(a);
}

/* A repeated field of mixed types keeps the good elements in order: for
 * scalars (dims) and for messages (inputs: an element that is not an
 * object is not an input). */
static void test_pbjson_repeated_mixed(void **state)
{
    (void)state;
    struct pbjson_arena *a = pbjson_arena_new();
    json_t *j = parse("{\"input\":[{\"name\":\"a\",\"dims\":[1,\"2\",3,null,4.0,4.5,true,5]},"
                      "7,\"b\",null,[],{\"name\":\"c\"}],"
                      "\"cc_model_filenames\":{\"k\":\"v\",\"n\":1}}");
    Inference__ModelConfig *c =
        (Inference__ModelConfig *)pbjson_message(&inference__model_config__descriptor, j, a);
    assert_non_null(c);
    assert_int_equal(c->n_input, 2);
    assert_string_equal(c->input[0]->name, "a");
    assert_int_equal(c->input[0]->n_dims, 4);
    assert_int_equal(c->input[0]->dims[0], 1);
    assert_int_equal(c->input[0]->dims[1], 3);
    assert_int_equal(c->input[0]->dims[2], 4);
    assert_int_equal(c->input[0]->dims[3], 5);
    assert_string_equal(c->input[1]->name, "c");
    /* A map: the entries whose value fits. */
    assert_int_equal(c->n_cc_model_filenames, 1);
    assert_string_equal(c->cc_model_filenames[0]->key, "k");
    assert_string_equal(c->cc_model_filenames[0]->value, "v");
    json_decref(j);
    pbjson_arena_free(a);
}

/* Nested messages at depth, null values anywhere skipped, and a scalar for
 * a oneof-only message (InferParameter) picking the member of its type. */
static void test_pbjson_nested_and_null(void **state)
{
    (void)state;
    struct pbjson_arena *a = pbjson_arena_new();
    json_t *j = parse("{\"model_name\":null,\"id\":\"i\",\"parameters\":{\"b\":true,\"i\":-4,"
                      "\"d\":0.5,\"s\":\"x\",\"n\":null,\"o\":{\"int64_param\":9}},"
                      "\"outputs\":[{\"name\":\"o\",\"shape\":null,"
                      "\"contents\":{\"fp32_contents\":[1,2.5],\"bytes_contents\":[\"ab\"]},"
                      "\"parameters\":{\"k\":1}}]}");
    Inference__ModelInferResponse *m = (Inference__ModelInferResponse *)pbjson_message(
        &inference__model_infer_response__descriptor, j, a);
    assert_non_null(m);
    assert_string_equal(m->model_name, "");
    assert_string_equal(m->id, "i");
    const Inference__InferParameter *p = param_of(m->n_parameters, m->parameters, "b");
    assert_int_equal(p->parameter_choice_case, IP_CASE(BOOL_PARAM));
    assert_true(p->bool_param);
    p = param_of(m->n_parameters, m->parameters, "i");
    assert_int_equal(p->parameter_choice_case, IP_CASE(INT64_PARAM));
    assert_int_equal(p->int64_param, -4);
    p = param_of(m->n_parameters, m->parameters, "d");
    assert_int_equal(p->parameter_choice_case, IP_CASE(DOUBLE_PARAM));
    assert_true(p->double_param == 0.5);
    p = param_of(m->n_parameters, m->parameters, "s");
    assert_int_equal(p->parameter_choice_case, IP_CASE(STRING_PARAM));
    assert_string_equal(p->string_param, "x");
    p = param_of(m->n_parameters, m->parameters, "o");
    assert_int_equal(p->parameter_choice_case, IP_CASE(INT64_PARAM));
    assert_int_equal(p->int64_param, 9);
    assert_null(param_of(m->n_parameters, m->parameters, "n"));
    assert_int_equal(m->n_parameters, 5);
    assert_int_equal(m->n_outputs, 1);
    Inference__ModelInferResponse__InferOutputTensor *o = m->outputs[0];
    assert_string_equal(o->name, "o");
    assert_int_equal(o->n_shape, 0);
    assert_non_null(o->contents);
    assert_int_equal(o->contents->n_fp32_contents, 2);
    assert_true(o->contents->fp32_contents[1] == 2.5f);
    assert_int_equal(o->contents->n_bytes_contents, 1);
    assert_int_equal(o->contents->bytes_contents[0].len, 2);
    assert_memory_equal(o->contents->bytes_contents[0].data, "ab", 2);
    assert_int_equal(o->n_parameters, 1);
    assert_int_equal(o->parameters[0]->value->int64_param, 1);
    json_decref(j);

    /* Not an object for a message that is not oneof-only: the empty message. */
    j = parse("[1,2]");
    Inference__ModelStatistics *s =
        (Inference__ModelStatistics *)pbjson_message(&inference__model_statistics__descriptor, j, a);
    assert_non_null(s);
    assert_string_equal(s->name, "");
    json_decref(j);
    pbjson_arena_free(a);
}

/* pbjson_oneof_value: the set member as JSON; none set → NULL. */
static void test_pbjson_oneof_value(void **state)
{
    (void)state;
    Inference__InferParameter p = param_bool(true);
    json_t *v = pbjson_oneof_value(&p.base);
    assert_true(json_is_true(v));
    json_decref(v);
    p = param_int(-9);
    v = pbjson_oneof_value(&p.base);
    assert_int_equal(json_integer_value(v), -9);
    json_decref(v);
    p = param_str("s");
    v = pbjson_oneof_value(&p.base);
    assert_string_equal(json_string_value(v), "s");
    json_decref(v);
    p = param_double(1.25);
    v = pbjson_oneof_value(&p.base);
    assert_true(json_is_real(v) && json_real_value(v) == 1.25);
    json_decref(v);
    p = (Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
    p.parameter_choice_case = IP_CASE(UINT64_PARAM);
    p.uint64_param = UINT64_MAX;
    v = pbjson_oneof_value(&p.base);
    assert_true(json_is_real(v));
    json_decref(v);
    p.uint64_param = 12;
    v = pbjson_oneof_value(&p.base);
    assert_int_equal(json_integer_value(v), 12);
    json_decref(v);
    p = (Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
    assert_null(pbjson_oneof_value(&p.base));
}

/* The arena: zeroed, aligned, and large blocks beside small ones. */
static void test_pbjson_arena(void **state)
{
    (void)state;
    struct pbjson_arena *a = pbjson_arena_new();
    assert_non_null(a);
    for (int i = 0; i < 100; i++) {
        size_t n = (size_t)(i * 997 % 40000) + 1;
        unsigned char *p = pbjson_alloc(a, n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 16, 0);
        for (size_t k = 0; k < n; k++)
            assert_int_equal(p[k], 0);
        memset(p, 0xee, n);
    }
    char *s = pbjson_strndup(a, "hello world", 5);
    assert_string_equal(s, "hello");
    pbjson_arena_free(a);
    pbjson_arena_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_code_of_http),
        cmocka_unit_test(test_infer_typed_contents_bounded),
        cmocka_unit_test(test_code_name),
        cmocka_unit_test(test_method_find),
        cmocka_unit_test(test_method_unserved),
        cmocka_unit_test(test_method_streams),
        cmocka_unit_test(test_to_http_server),
        cmocka_unit_test(test_to_http_model_paths),
        cmocka_unit_test(test_to_http_repository_index),
        cmocka_unit_test(test_to_http_repository_load),
        cmocka_unit_test(test_to_http_log_settings),
        cmocka_unit_test(test_to_http_bad_names),
        cmocka_unit_test(test_to_http_garbage),
        cmocka_unit_test(test_to_http_nul_in_strings),
        cmocka_unit_test(test_infer_raw),
        cmocka_unit_test(test_infer_outputs_and_parameters),
        cmocka_unit_test(test_infer_typed_contents),
        cmocka_unit_test(test_infer_typed_two_inputs),
        cmocka_unit_test(test_infer_contents_against_the_shape),
        cmocka_unit_test(test_infer_errors),
        cmocka_unit_test(test_to_http_shared_memory),
        cmocka_unit_test(test_infer_shared_memory),
        cmocka_unit_test(test_from_shared_memory_status),
        cmocka_unit_test(test_from_ready_live),
        cmocka_unit_test(test_from_errors),
        cmocka_unit_test(test_from_infer_binary),
        cmocka_unit_test(test_from_infer_json_data),
        cmocka_unit_test(test_from_infer_bad),
        cmocka_unit_test(test_from_model_config),
        cmocka_unit_test(test_from_statistics),
        cmocka_unit_test(test_from_repository_index),
        cmocka_unit_test(test_from_log_settings),
        cmocka_unit_test(test_from_metadata),
        cmocka_unit_test(test_from_empty),
        cmocka_unit_test(test_stream_response),
        cmocka_unit_test(test_stream_error_echo),
        cmocka_unit_test(test_pbjson_enums),
        cmocka_unit_test(test_pbjson_wrong_types),
        cmocka_unit_test(test_pbjson_uint64),
        cmocka_unit_test(test_pbjson_repeated_mixed),
        cmocka_unit_test(test_pbjson_nested_and_null),
        cmocka_unit_test(test_pbjson_oneof_value),
        cmocka_unit_test(test_pbjson_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

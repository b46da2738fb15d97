/* fuzz_grpc_codec.c - the gRPC transcoder (gateway/grpc_codec.c and the
 * JSON → protobuf walk of gateway/pbjson.c): a call's request message into
 * the HTTP request it means, and an HTTP answer back into the response
 * message.
 *
 * Input layout: byte 0 picks the method (modulo the 13 names below, found
 * with grpc_method_find); byte 1 bit 0 the direction:
 *   0  to_http: the rest is the packed request message (grpc_to_http);
 *   1  from_http: byte 2 picks the status (modulo {200, 400, 404, 429, 503,
 *      504}), bytes 3-4 are the Inference-Header-Content-Length header
 *      (little-endian; 0xffff: absent), the rest is the body (JSON, or JSON
 *      and binary tensors); an empty body is passed as NULL, as an inner
 *      request's empty streamed answer reaches grpc_call_done.
 *
 * Beyond "no crash, no leak" (LeakSanitizer): a request that converts has a
 * "/v2..." path, a GET has no body, a JSON body parses (its head, with
 * Inference-Header-Content-Length), and a ModelInfer body's binary part is
 * exactly the sum of its inputs' binary_data_size (each message of a
 * ModelStreamInfer too); an answer that converts unpacks as the method's
 * response message, and a streaming call's answer or error, wrapped by
 * grpc_stream_response, as a ModelStreamInferResponse; an error has a code,
 * and a message unless it is the answer's own ({"error": ""}).
 *
 * The same harness runs in the normal test suite with allocations failing
 * (tests/oom/oom_replay.c: test_oom_grpc_codec); these checks hold there too,
 * but for jansson's own allocations while it parses an answer (from_http),
 * which do not fail there (tests/oom/failalloc.h says why). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/grpc_codec.h"
#include "http/http.h"
#include "proto/grpc_service.pb-c.h"

#define SVC(n) &inference__##n##__descriptor
static const struct {
    const char *name;
    const ProtobufCMessageDescriptor *resp;   /* NULL: unserved, nothing to unpack */
} methods[] = {
    {"ServerLive", SVC(server_live_response)},
    {"ServerReady", SVC(server_ready_response)},
    {"ModelReady", SVC(model_ready_response)},
    {"ServerMetadata", SVC(server_metadata_response)},
    {"ModelMetadata", SVC(model_metadata_response)},
    {"ModelInfer", SVC(model_infer_response)},
    {"ModelConfig", SVC(model_config_response)},
    {"ModelStatistics", SVC(model_statistics_response)},
    {"RepositoryIndex", SVC(repository_index_response)},
    {"RepositoryModelLoad", SVC(repository_model_load_response)},
    {"RepositoryModelUnload", SVC(repository_model_unload_response)},
    {"LogSettings", SVC(log_settings_response)},
    /* Each message of the stream is a ModelInfer; its answer, a
     * ModelInferResponse, is wrapped by grpc_stream_response. */
    {"ModelStreamInfer", SVC(model_infer_response)},
    {"SystemSharedMemoryStatus", SVC(system_shared_memory_status_response)},
    {"SystemSharedMemoryRegister", SVC(system_shared_memory_register_response)},
    {"SystemSharedMemoryUnregister", SVC(system_shared_memory_unregister_response)},
    {"CudaSharedMemoryStatus", SVC(cuda_shared_memory_status_response)},
    {"CudaSharedMemoryRegister", SVC(cuda_shared_memory_register_response)},
    {"CudaSharedMemoryUnregister", SVC(cuda_shared_memory_unregister_response)},
};
#undef SVC
#define NMETHODS (sizeof methods / sizeof methods[0])

static const int statuses[] = {200, 400, 404, 429, 503, 504};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* tests/oom/failalloc.c, when the harness is linked there (test_oom_grpc_codec). */
__attribute__((weak)) void failalloc_spare_jansson(int spare);
__attribute__((weak)) int failalloc_fired(void);

static bool failure_injected(void) { return failalloc_fired && failalloc_fired(); }

/* Under tests/oom, jansson's allocations fail only where the codec builds
 * JSON, not where jansson parses it, the harness's own checks included
 * (failalloc.h says why). */
static void spare_jansson(int spare)
{
    if (failalloc_spare_jansson)
        failalloc_spare_jansson(spare);
}

static void fail(const char *what, const char *method)
{
    fprintf(stderr, "fuzz_grpc_codec: %s: %s\n", method, what);
    abort();
}

/* from_answer: the message is the answer's own ({"error": ""} may be empty). */
static void check_error(int code, const char *err, const char *method, bool from_answer)
{
    if (code < 1 || code > 16)
        fail("not a gRPC status code", method);
    if (!from_answer && !err[0])
        fail("an error without a message", method);
}

/* The sum of inputs[].parameters.binary_data_size of a ModelInfer head. */
static long long binary_sizes(json_t *head)
{
    long long sum = 0;
    size_t i;
    json_t *in;
    json_array_foreach(json_object_get(head, "inputs"), i, in) {
        json_t *p = json_object_get(in, "parameters");
        if (json_is_string(json_object_get(p, "shared_memory_region")))
            continue;   /* its bytes are in the region, none in the body */
        json_t *n = json_object_get(p, "binary_data_size");
        if (!json_is_integer(n) || json_integer_value(n) < 0)
            return -1;
        sum += json_integer_value(n);
    }
    return sum;
}

static void check_stream_response(const struct buf *ok, const char *err,
                                  const struct buf *echo, const char *name);

static void to_http(const struct grpc_method *m, const char *name, const uint8_t *msg,
                    size_t len)
{
    struct grpc_http_request hr = {.body = BUF_INIT};
    char err[1024] = "";
    int code = grpc_to_http(m, msg, len, 1 << 20, &hr, err, sizeof err);
    if (code != GRPC_OK) {
        check_error(code, err, name, false);
        if (hr.echo.len)   /* an in-stream error naming its request */
            check_stream_response(NULL, err, &hr.echo, name);
        grpc_http_request_free(&hr);
        return;
    }
    if (strnlen(hr.path, sizeof hr.path) == sizeof hr.path || strncmp(hr.path, "/v2", 3) != 0)
        fail("a path that is not /v2...", name);
    if (hr.method != HTTP_M_GET && hr.method != HTTP_M_POST)
        fail("neither GET nor POST", name);
    if (hr.method == HTTP_M_GET && hr.body.len)
        fail("a GET with a body", name);
    if (hr.json_len > (int64_t)hr.body.len)
        fail("Inference-Header-Content-Length past the body", name);
    bool injected = failure_injected();
    spare_jansson(1);
    size_t jl = hr.json_len >= 0 ? (size_t)hr.json_len : hr.body.len;
    json_error_t je;
    json_t *j = hr.body.len ? json_loadb(hr.body.data, jl, 0, &je) : NULL;
    if (hr.body.len && !json_is_object(j) && injected) {
        /* tests/oom: jansson's json_dumps drops an object key whose write
         * failed and goes on (failalloc.h), which no caller can see. */
        json_decref(j);
        grpc_http_request_free(&hr);
        return;
    }
    if (hr.body.len && !json_is_object(j)) {
        fprintf(stderr, "%s\n", je.text);
        fail("a body that is not a JSON object", name);
    }
    if (strcmp(name, "ModelInfer") == 0 || grpc_method_streams(m)) {
        if (hr.json_len < 0 || !j)
            fail("an infer request without its JSON head", name);
        if (binary_sizes(j) != (long long)(hr.body.len - jl))
            fail("binary_data_size does not add up to the binary part", name);
    }
    json_decref(j);
    grpc_http_request_free(&hr);
}

/* A streaming call's answer as the ModelStreamInferResponse grpc.c sends:
 * the ModelInferResponse (ok) or the error message (with the request's
 * echo, when there is one), and it must unpack. */
static void check_stream_response(const struct buf *ok, const char *err,
                                  const struct buf *echo, const char *name)
{
    struct buf wrapped = BUF_INIT;
    int rc = ok ? grpc_stream_response(ok->data, ok->len, NULL, &wrapped)
                : grpc_stream_response(echo ? echo->data : NULL, echo ? echo->len : 0, err,
                                       &wrapped);
    if (rc == 0) {
        ProtobufCMessage *msg = protobuf_c_message_unpack(
            &inference__model_stream_infer_response__descriptor, NULL, wrapped.len,
            wrapped.data ? (const uint8_t *)wrapped.data : (const uint8_t *)"");
        if (!msg)
            fail("the stream's answer does not unpack as a ModelStreamInferResponse", name);
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    buf_free(&wrapped);
}

static void from_http(const struct grpc_method *m, int mi, const uint8_t *data, size_t size)
{
    const char *name = methods[mi].name;
    if (size < 3)
        return;
    unsigned jl = (unsigned)data[1] | (unsigned)data[2] << 8;
    char headers[96] = "";
    if (jl != 0xffff)
        snprintf(headers, sizeof headers, "Content-Type: application/octet-stream\r\n"
                                          "Inference-Header-Content-Length: %u\r\n", jl);
    struct grpc_http_answer a = {
        .status = statuses[data[0] % (sizeof statuses / sizeof statuses[0])],
        .body = size > 3 ? (const char *)data + 3 : NULL,
        .len = size - 3,
        .headers = headers[0] ? headers : NULL,
    };
    struct buf out = BUF_INIT;
    char err[1024] = "";
    int code = grpc_from_http(m, &a, &out, err, sizeof err);
    if (grpc_method_streams(m))
        check_stream_response(code == GRPC_OK ? &out : NULL, err, NULL, name);
    if (code != GRPC_OK) {
        check_error(code, err, name, true);
    } else if (methods[mi].resp) {
        ProtobufCMessage *msg = protobuf_c_message_unpack(
            methods[mi].resp, NULL, out.len, out.data ? (const uint8_t *)out.data : (const uint8_t *)"");
        /* (protobuf-c allocates from its shared library, which tests/oom's
         * --wrap does not reach: NULL means a message that does not parse.) */
        if (!msg)
            fail("the answer does not unpack as the response message", name);
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    spare_jansson(data[1] & 1);
    int mi = data[0] % (int)NMETHODS;
    const struct grpc_method *m = grpc_method_find(methods[mi].name, strlen(methods[mi].name));
    if (!m)
        abort();
    if (data[1] & 1)
        from_http(m, mi, data + 2, size - 2);
    else
        to_http(m, methods[mi].name, data + 2, size - 2);
    return 0;
}

/* grpc_codec.h - each call of the KServe v2 gRPC service
 * (inference.GRPCInferenceService) as the HTTP request of the KServe v2
 * protocol it means, and the HTTP answer as the call's response message.
 *
 * batchgate has one implementation of the protocol's meaning: the HTTP
 * handlers. A gRPC call is decoded (protobuf-c), turned into that HTTP
 * request (a ModelInfer into the binary tensor extension's body, so the
 * tensors stay binary), and the answer turned back (JSON answers by the
 * response message's descriptor: pbjson.h). Pure: bytes in, bytes out; no
 * request, no connection (the fuzzer calls it). docs/GRPC.md has the
 * table of calls. */
#ifndef BG_GATEWAY_GRPC_CODEC_H
#define BG_GATEWAY_GRPC_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* gRPC status codes (grpc/status.h's numbers, which are the protocol's). */
enum grpc_code {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_ALREADY_EXISTS = 6,
    GRPC_PERMISSION_DENIED = 7,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_ABORTED = 10,
    GRPC_OUT_OF_RANGE = 11,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
    GRPC_DATA_LOSS = 15,
    GRPC_UNAUTHENTICATED = 16,
};

/* The code an HTTP status means (docs/GRPC.md "Errors"). */
int grpc_code_of_http(int status);
const char *grpc_code_name(int code);

/* The HTTP request a call means. */
struct json_t;

struct grpc_http_request {
    int method;                  /* HTTP_M_GET or HTTP_M_POST (http.h) */
    char path[640];
    struct buf body;             /* the caller frees it */
    int64_t json_len;            /* Inference-Header-Content-Length; -1: none */
    /* ModelInfer: the request's model_name, model_version and id as
     * ModelInferResponse bytes, for an in-stream error to carry (Triton
     * echoes the id there, so that a client running many requests on one
     * stream can tell which failed). The caller frees it. */
    struct buf echo;
    /* ModelInfer: the body's JSON head as the jansson value it was written
     * from (a reference the caller releases; NULL for other calls), for
     * http_inner_set_decoded. */
    struct json_t *head;
    /* The most tensor bytes the body may carry (grpc_to_http's limit). */
    size_t limit;
};

/* Its answer. */
struct grpc_http_answer {
    int status;
    const char *body;
    size_t len;
    const char *headers;         /* "Name: value\r\n" lines, or NULL */
};

struct grpc_method;
/* By name ("ModelInfer"); NULL when the service has no such call. */
const struct grpc_method *grpc_method_find(const char *name, size_t len);
const char *grpc_method_name(const struct grpc_method *m);
/* The service's calls, served or not, in a fixed order: 0 .. count - 1. */
int grpc_method_count(void);
const struct grpc_method *grpc_method_at(int i);
int grpc_method_index(const struct grpc_method *m);
/* A call whose messages stream both ways (ModelStreamInfer): each message
 * is converted as the method's one message is, and each answer is wrapped
 * by grpc_stream_response. */
bool grpc_method_streams(const struct grpc_method *m);
/* A ModelStreamInferResponse appended to out: the ModelInferResponse
 * bytes; or (error non-NULL) the error message, with the
 * ModelInferResponse bytes beside it when there are any (an echo). 0, or
 * -1 out of memory. */
int grpc_stream_response(const void *infer_response, size_t len, const char *error,
                         struct buf *out);
/* Calls batchgate does not serve (shared memory, tracing, streaming):
 * answered UNIMPLEMENTED with the reason. NULL for the others. */
const char *grpc_method_unserved(const struct grpc_method *m);

/* The request message (msg, len) as its HTTP request. limit is
 * limits.max_body_bytes: the tensor bytes a ModelInfer's body may carry,
 * and half what the message may take once unpacked (RESOURCE_EXHAUSTED
 * past either). Returns GRPC_OK, or a code with a message in err. Either
 * way out is freed with grpc_http_request_free. */
int grpc_to_http(const struct grpc_method *m, const uint8_t *msg, size_t len, size_t limit,
                 struct grpc_http_request *out, char *err, size_t cap);
void grpc_http_request_free(struct grpc_http_request *r);
/* The HTTP answer as the response message, appended to out. Returns
 * GRPC_OK, or a code with a message in err (the answer's own error). */
int grpc_from_http(const struct grpc_method *m, const struct grpc_http_answer *a,
                   struct buf *out, char *err, size_t cap);

#endif

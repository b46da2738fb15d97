/* grpc.h - the KServe v2 gRPC service on the HTTP/2 port (docs/GRPC.md).
 *
 * One route takes every call of inference.GRPCInferenceService: the
 * message is unframed (and inflated, with grpc-encoding), turned into the
 * HTTP request it means (grpc_codec.h) with the call's metadata as its
 * headers (API keys included) and grpc-timeout as X-Request-Timeout-Ms,
 * and routed as an inner request (http.h) through the HTTP router, guard
 * and all: the same handlers, tenants, batcher and counters serve both
 * protocols. The answer goes back framed, with grpc-status and
 * grpc-message in the trailers. */
#ifndef BG_GATEWAY_GRPC_H
#define BG_GATEWAY_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct router;
struct http_request;
struct grpc_service;

/* http: the HTTP router the calls are routed through (it must outlive the
 * service); max_message_bytes: a message's bound after inflation
 * (limits.max_body_bytes). NULL when out of memory. */
struct grpc_service *grpc_service_new(const struct router *http, size_t max_message_bytes);
/* Who may have a costly message read (compressed, or over
 * GRPC_EARLY_CHECK_BYTES) before its route, and so the HTTP guard, is
 * known: fn(req, ctx) false refuses it UNAUTHENTICATED unread (a gzip'ed
 * 61 KB message without a key was inflated and parsed, 250 ms and 115 MB,
 * before its status 16). NULL (the default): no one is refused early. */
void grpc_service_set_caller_check(struct grpc_service *g,
                                   bool (*fn)(const struct http_request *req, void *ctx),
                                   void *ctx);
/* Adds the service's route to h2, the HTTP/2 port's router. */
int grpc_service_register(struct grpc_service *g, struct router *h2, struct error *err);
void grpc_service_free(struct grpc_service *g);

/* What the service answered, for /metrics (any thread): calls by method
 * (0 .. grpc_service_methods() - 1; the last is every name the service
 * does not have, "other") and by final status code (0..16); a
 * ModelStreamInfer stream's messages by outcome (answered, or answered with
 * an error in the stream); the streams open now. */
int grpc_service_methods(void);
const char *grpc_service_method_name(int method);
uint64_t grpc_service_calls(const struct grpc_service *g, int method, int code);
uint64_t grpc_service_stream_messages(const struct grpc_service *g, bool ok);
int64_t grpc_service_streams_open(const struct grpc_service *g);

#endif

/* pbjson.h - a JSON value as a protobuf message, by the message's
 * descriptor (protobuf-c's reflection).
 *
 * The KServe v2 HTTP answers are, field for field, the JSON form of the
 * gRPC protocol's messages (model metadata, configuration, statistics,
 * the repository index, log settings): one walk of the descriptor turns
 * any of them into its message, so the gRPC front end needs no converter
 * per message, and a field added to an HTTP answer reaches gRPC clients
 * by its name. Keys the message lacks are skipped (batchgate's extra
 * statistics); a value of the wrong JSON type is skipped too rather than
 * failing a whole answer. A scalar where the message wants a message
 * whose fields are all one `oneof` (InferParameter, log SettingValue)
 * picks the member of the scalar's type. Enums are read by name
 * ("TYPE_FP32") or number. Maps are JSON objects.
 *
 * Everything is allocated from an arena freed at once. */
#ifndef BG_GATEWAY_PBJSON_H
#define BG_GATEWAY_PBJSON_H

#include <stddef.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

struct pbjson_arena;

struct pbjson_arena *pbjson_arena_new(void);
void pbjson_arena_free(struct pbjson_arena *a);
/* Zeroed memory that lives as long as the arena; NULL when out of memory. */
void *pbjson_alloc(struct pbjson_arena *a, size_t n);
char *pbjson_strndup(struct pbjson_arena *a, const char *s, size_t n);

/* The message of descriptor d from the JSON value j (an object, or a
 * scalar for a oneof-only message); NULL when out of memory. */
ProtobufCMessage *pbjson_message(const ProtobufCMessageDescriptor *d, json_t *j,
                                 struct pbjson_arena *a);

/* A scalar oneof-only message (InferParameter) as the JSON value of its
 * set member; NULL when none is set or out of memory (a new reference). */
json_t *pbjson_oneof_value(const ProtobufCMessage *m);

#endif

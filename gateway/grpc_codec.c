/* grpc_codec.c - see grpc_codec.h. */
#include "gateway/grpc_codec.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "common/utf8.h"
#include "gateway/pbjson.h"
#include "http/http.h"
#include "proto/grpc_service.pb-c.h"

/* ---- status codes ---- */

int grpc_code_of_http(int status)
{
    switch (status) {
    case 200: return GRPC_OK;
    case 400: return GRPC_INVALID_ARGUMENT;
    case 401: return GRPC_UNAUTHENTICATED;
    case 403: return GRPC_PERMISSION_DENIED;
    case 404: return GRPC_NOT_FOUND;
    case 405:
    case 501: return GRPC_UNIMPLEMENTED;
    case 408:
    case 504: return GRPC_DEADLINE_EXCEEDED;
    case 409: return GRPC_FAILED_PRECONDITION;
    case 413:
    case 429:
    case 431: return GRPC_RESOURCE_EXHAUSTED;
    case 499: return GRPC_CANCELLED;
    case 502:
    case 503: return GRPC_UNAVAILABLE;
    default: return status >= 500 ? GRPC_INTERNAL : status >= 400 ? GRPC_INVALID_ARGUMENT
                                                                  : GRPC_UNKNOWN;
    }
}

const char *grpc_code_name(int code)
{
    static const char *const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    return code >= 0 && code <= 16 ? names[code] : "UNKNOWN";
}

static int grpc_fail(char *err, size_t cap, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int grpc_fail(char *err, size_t cap, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return code;
}

/* ---- paths ---- */

/* A model name or version as one path segment: what the HTTP router can
 * match (it does not decode %-escapes), so '/', '?', '#', '%' and
 * control characters cannot be in it. */
/* "." and ".." would be dot segments of the path, cleaned away before
 * routing (RFC 3986 5.2.4): version ".." ran the default version, a region
 * named ".." was every region. */
static bool grpc_dots(const char *s) { return !strcmp(s, ".") || !strcmp(s, ".."); }

static bool grpc_segment_ok(const char *s)
{
    if (!s || !*s || strlen(s) > 256 || grpc_dots(s))
        return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p <= ' ' || *p == '/' || *p == '?' || *p == '#' || *p == '%' || *p == 0x7f)
            return false;
    return true;
}

/* "/v2/models/NAME[/versions/V]SUFFIX" */
static int grpc_model_path(struct grpc_http_request *out, const char *name, const char *version,
                           const char *suffix, char *err, size_t cap)
{
    if (!grpc_segment_ok(name))
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                         "the model name must be 1 to 256 characters without '/', '?', '#', "
                         "'%%', spaces or control characters, and not '.' or '..'");
    /* Triton reads it as an integer (std::stol): "abc" is INVALID_ARGUMENT
     * there, not a version to look for (NOT_FOUND). Spaces and signs it
     * reads past are refused here: the same version has one spelling,
     * leading zeros aside. */
    if (version && *version &&
        (strlen(version) > 64 || version[strspn(version, "0123456789")] != '\0'))
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                         "the model version must be an integer (digits alone), not \"%.64s\"",
                         version);
    if (version && *version)
        snprintf(out->path, sizeof out->path, "/v2/models/%s/versions/%s%s", name, version,
                 suffix);
    else
        snprintf(out->path, sizeof out->path, "/v2/models/%s%s", name, suffix);
    return GRPC_OK;
}

/* "/v2/repository/models/NAME" + verb */
static int grpc_repo_path(struct grpc_http_request *out, const char *name, const char *verb,
                          char *err, size_t cap)
{
    int rc = grpc_model_path(out, name, NULL, verb, err, cap);
    if (rc == GRPC_OK) {   /* "/v2/models/..." → "/v2/repository/models/..." */
        memmove(out->path + 14, out->path + 3, strlen(out->path + 3) + 1);
        memcpy(out->path, "/v2/repository", 14);
    }
    return rc;
}

static int grpc_body_json(struct grpc_http_request *out, json_t *j, char *err, size_t cap)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s || buf_append(&out->body, s, strlen(s)) < 0) {
        free(s);
        return grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    free(s);
    return GRPC_OK;
}

/* ---- requests ---- */

typedef int (*grpc_to_fn)(const ProtobufCMessage *msg, struct grpc_http_request *out, char *err,
                          size_t cap);

static int grpc_live_to(const ProtobufCMessage *msg, struct grpc_http_request *out, char *err,
                        size_t cap)
{
    (void)msg, (void)err, (void)cap;
    snprintf(out->path, sizeof out->path, "/v2/health/live");
    return GRPC_OK;
}

static int grpc_ready_to(const ProtobufCMessage *msg, struct grpc_http_request *out, char *err,
                         size_t cap)
{
    (void)msg, (void)err, (void)cap;
    snprintf(out->path, sizeof out->path, "/v2/health/ready");
    return GRPC_OK;
}

static int grpc_server_meta_to(const ProtobufCMessage *msg, struct grpc_http_request *out,
                               char *err, size_t cap)
{
    (void)msg, (void)err, (void)cap;
    snprintf(out->path, sizeof out->path, "/v2");
    return GRPC_OK;
}

static int grpc_model_ready_to(const ProtobufCMessage *msg, struct grpc_http_request *out,
                               char *err, size_t cap)
{
    const Inference__ModelReadyRequest *r = (const void *)msg;
    return grpc_model_path(out, r->name, r->version, "/ready", err, cap);
}

static int grpc_model_meta_to(const ProtobufCMessage *msg, struct grpc_http_request *out,
                              char *err, size_t cap)
{
    const Inference__ModelMetadataRequest *r = (const void *)msg;
    /* GET /v2/models/stats is every model's statistics (Triton's HTTP
     * route): as a model's metadata its JSON fit no field, and the call
     * answered OK with an empty message, for a model named stats or none. */
    if (r->name && strcmp(r->name, "stats") == 0 && !(r->version && *r->version))
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                         "a model named \"stats\" has its metadata by version only (give "
                         "version): its name is the HTTP route of every model's statistics, "
                         "as on Triton");
    return grpc_model_path(out, r->name, r->version, "", err, cap);
}

static int grpc_model_config_to(const ProtobufCMessage *msg, struct grpc_http_request *out,
                                char *err, size_t cap)
{
    const Inference__ModelConfigRequest *r = (const void *)msg;
    return grpc_model_path(out, r->name, r->version, "/config", err, cap);
}

static int grpc_model_stats_to(const ProtobufCMessage *msg, struct grpc_http_request *out,
                               char *err, size_t cap)
{
    const Inference__ModelStatisticsRequest *r = (const void *)msg;
    if (!r->name || !*r->name) {   /* every model */
        snprintf(out->path, sizeof out->path, "/v2/models/stats");
        return GRPC_OK;
    }
    return grpc_model_path(out, r->name, r->version, "/stats", err, cap);
}

static int grpc_index_to(const ProtobufCMessage *msg, struct grpc_http_request *out, char *err,
                         size_t cap)
{
    const Inference__RepositoryIndexRequest *r = (const void *)msg;
    out->method = HTTP_M_POST;
    snprintf(out->path, sizeof out->path, "/v2/repository/index");
    return grpc_body_json(out, json_pack("{s:b}", "ready", r->ready), err, cap);
}

/* A repository parameter as the HTTP body's value: bytes (a "file:"
 * override's contents) in base64, as the HTTP protocol carries them. */
static json_t *grpc_repo_param(const Inference__ModelRepositoryParameter *p)
{
    switch (p->parameter_choice_case) {
    case INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
        return json_boolean(p->bool_param);
    case INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
        return json_integer(p->int64_param);
    case INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
        return json_string(p->string_param);
    case INFERENCE__MODEL_REPOSITORY_PARAMETER__PARAMETER_CHOICE_BYTES_PARAM: {
        static const char b64[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t n = p->bytes_param.len;
        char *s = malloc(4 * ((n + 2) / 3) + 1);
        if (!s)
            return NULL;
        size_t k = 0;
        const uint8_t *d = p->bytes_param.data;
        for (size_t i = 0; i < n; i += 3) {
            uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                         (i + 2 < n ? d[i + 2] : 0);
            s[k++] = b64[v >> 18 & 63];
            s[k++] = b64[v >> 12 & 63];
            s[k++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
            s[k++] = i + 2 < n ? b64[v & 63] : '=';
        }
        s[k] = '\0';
        json_t *j = json_string(s);
        free(s);
        return j;
    }
    default: return NULL;
    }
}

/* RepositoryModelLoad and RepositoryModelUnload: the same fields (their
 * parameter entries are two generated types of one shape). */
static int grpc_repo_to(const ProtobufCMessage *msg, struct grpc_http_request *out, char *err,
                        size_t cap)
{
    bool load = msg->descriptor == &inference__repository_model_load_request__descriptor;
    const Inference__RepositoryModelLoadRequest *lr = (const void *)msg;
    const Inference__RepositoryModelUnloadRequest *ur = (const void *)msg;
    out->method = HTTP_M_POST;
    int rc = grpc_repo_path(out, load ? lr->model_name : ur->model_name,
                            load ? "/load" : "/unload", err, cap);
    if (rc)
        return rc;
    json_t *params = json_object();
    size_t n = load ? lr->n_parameters : ur->n_parameters;
    for (size_t i = 0; params && i < n; i++) {
        const char *key = load ? lr->parameters[i]->key : ur->parameters[i]->key;
        const Inference__ModelRepositoryParameter *p =
            load ? lr->parameters[i]->value : ur->parameters[i]->value;
        json_t *v = p ? grpc_repo_param(p) : NULL;
        if (v)
            json_object_set_new(params, key, v);
    }
    return grpc_body_json(out, params ? json_pack("{s:o}", "parameters", params) : NULL, err, cap);
}

static int grpc_log_to(const ProtobufCMessage *msg, struct grpc_http_request *out, char *err,
                       size_t cap)
{
    const Inference__LogSettingsRequest *r = (const void *)msg;
    snprintf(out->path, sizeof out->path, "/v2/logging");
    if (r->n_settings == 0)
        return GRPC_OK;   /* nothing to change: the settings are read */
    out->method = HTTP_M_POST;
    json_t *o = json_object();
    for (size_t i = 0; o && i < r->n_settings; i++) {
        json_t *v = r->settings[i]->value ? pbjson_oneof_value(&r->settings[i]->value->base)
                                          : NULL;
        if (!v) {
            json_decref(o);
            return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT, "settings[\"%s\"]: no value",
                             r->settings[i]->key);
        }
        json_object_set_new(o, r->settings[i]->key, v);
    }
    return grpc_body_json(out, o, err, cap);
}

/* ---- shared memory ---- */

/* "/v2/{kind}sharedmemory[/region/NAME]/VERB", NAME %-escaped (the HTTP
 * routes decode it): a region name is the client's, any bytes. */
static int grpc_shm_path(struct grpc_http_request *out, const char *kind, const char *name,
                         const char *verb, char *err, size_t cap)
{
    int n = snprintf(out->path, sizeof out->path, "/v2/%ssharedmemory", kind);
    if (name && grpc_dots(name))
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT, "a region may not be named '.' or "
                         "'..' (a path's dot segment)");
    if (name && *name) {
        n += snprintf(out->path + n, sizeof out->path - (size_t)n, "/region/");
        for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
            if ((size_t)n + 4 >= sizeof out->path)
                return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT, "the region name is too long");
            bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                         (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' ||
                         *p == '~';
            n += plain ? snprintf(out->path + n, sizeof out->path - (size_t)n, "%c", *p)
                       : snprintf(out->path + n, sizeof out->path - (size_t)n, "%%%02X", *p);
        }
    }
    if ((size_t)n + strlen(verb) + 1 >= sizeof out->path)
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT, "the region name is too long");
    snprintf(out->path + n, sizeof out->path - (size_t)n, "/%s", verb);
    return GRPC_OK;
}

static const char *grpc_shm_kind(const ProtobufCMessage *msg)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    return d == &inference__cuda_shared_memory_status_request__descriptor ||
                   d == &inference__cuda_shared_memory_register_request__descriptor ||
                   d == &inference__cuda_shared_memory_unregister_request__descriptor
               ? "cuda" : "system";
}

/* Status and Unregister of either kind: one string, name (field 1). */
static int grpc_shm_named_to(const ProtobufCMessage *msg, struct grpc_http_request *out,
                             char *err, size_t cap)
{
    const Inference__SystemSharedMemoryStatusRequest *r = (const void *)msg;
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    bool status = d == &inference__system_shared_memory_status_request__descriptor ||
                  d == &inference__cuda_shared_memory_status_request__descriptor;
    out->method = status ? HTTP_M_GET : HTTP_M_POST;
    return grpc_shm_path(out, grpc_shm_kind(msg), r->name, status ? "status" : "unregister", err,
                         cap);
}

static int grpc_shm_register_to(const ProtobufCMessage *msg, struct grpc_http_request *out,
                                char *err, size_t cap)
{
    out->method = HTTP_M_POST;
    json_t *j;
    const char *name;
    if (msg->descriptor == &inference__cuda_shared_memory_register_request__descriptor) {
        const Inference__CudaSharedMemoryRegisterRequest *r = (const void *)msg;
        name = r->name;   /* refused by the HTTP route: no CUDA regions here */
        j = json_pack("{s:I, s:I}", "device_id", (json_int_t)r->device_id, "byte_size",
                      (json_int_t)r->byte_size);
    } else {
        const Inference__SystemSharedMemoryRegisterRequest *r = (const void *)msg;
        name = r->name;
        if (r->offset > INT64_MAX || r->byte_size > INT64_MAX)
            return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT, "offset or byte_size too large");
        j = json_pack("{s:s, s:I, s:I}", "key", r->key ? r->key : "", "offset",
                      (json_int_t)r->offset, "byte_size", (json_int_t)r->byte_size);
    }
    if (!name || !*name) {
        json_decref(j);
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT, "name: a region needs a name");
    }
    int rc = grpc_shm_path(out, grpc_shm_kind(msg), name, "register", err, cap);
    if (rc) {
        json_decref(j);
        return rc;
    }
    return grpc_body_json(out, j, err, cap);
}

/* ---- ModelInfer: the binary tensor extension's body ---- */

/* The elements an input's shape holds; -1 when a dimension is negative or
 * the product does not fit (the handler says what is wrong with it). */
static int64_t grpc_shape_elems(const Inference__ModelInferRequest__InferInputTensor *in)
{
    int64_t n = 1;
    for (size_t k = 0; k < in->n_shape; k++) {
        if (in->shape[k] < 0 || (in->shape[k] && n > INT64_MAX / in->shape[k]))
            return -1;
        n *= in->shape[k];
    }
    return n;
}

static void grpc_shape_text(const Inference__ModelInferRequest__InferInputTensor *in, char *out,
                            size_t cap)
{
    size_t k = 0, used = (size_t)snprintf(out, cap, "[");
    for (; k < in->n_shape && used < cap; k++)
        used += (size_t)snprintf(out + used, cap - used, "%s%lld", k ? ", " : "",
                                 (long long)in->shape[k]);
    if (used < cap)
        snprintf(out + used, cap - used, "]");
}

/* The typed contents fields, and how many values each holds. */
static const char *const grpc_contents_names[] = {
    "fp32_contents", "fp64_contents", "int_contents", "int64_contents",
    "uint_contents", "uint64_contents", "bool_contents", "bytes_contents",
};
#define GRPC_CONTENTS_FIELDS (sizeof grpc_contents_names / sizeof grpc_contents_names[0])

static void grpc_contents_counts(const Inference__InferTensorContents *c,
                                 size_t n[GRPC_CONTENTS_FIELDS])
{
    size_t v[GRPC_CONTENTS_FIELDS] = {c->n_fp32_contents,  c->n_fp64_contents,
                                      c->n_int_contents,   c->n_int64_contents,
                                      c->n_uint_contents,  c->n_uint64_contents,
                                      c->n_bool_contents,  c->n_bytes_contents};
    memcpy(n, v, sizeof v);
}

/* The typed contents field (index into grpc_contents_names) a datatype
 * reads, and its bytes per element in the binary form (0: BYTES,
 * length-prefixed); -1 for a datatype with none. */
static int grpc_contents_field(const char *dt, int *field)
{
    static const struct {
        const char *dt;
        int field, size;
    } map[] = {
        {"FP32", 0, 4}, {"FP64", 1, 8}, {"INT32", 2, 4}, {"INT16", 2, 2}, {"INT8", 2, 1},
        {"INT64", 3, 8}, {"UINT32", 4, 4}, {"UINT16", 4, 2}, {"UINT8", 4, 1},
        {"UINT64", 5, 8}, {"BOOL", 6, 1}, {"BYTES", 7, 0},
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(dt, map[i].dt) == 0) {
            *field = map[i].field;
            return map[i].size;
        }
    return -1;
}

/* Element i of the typed field `field` as bits: a float's pattern, an
 * integer sign- or zero-extended. */
static uint64_t grpc_contents_bits(const Inference__InferTensorContents *c, int field, size_t i)
{
    uint32_t f32;
    uint64_t f64;
    switch (field) {
    case 0:
        memcpy(&f32, &c->fp32_contents[i], 4);
        return f32;
    case 1:
        memcpy(&f64, &c->fp64_contents[i], 8);
        return f64;
    case 2:
        return (uint64_t)(int64_t)c->int_contents[i];
    case 3:
        return (uint64_t)c->int64_contents[i];
    case 4:
        return c->uint_contents[i];
    case 5:
        return c->uint64_contents[i];
    default:
        return c->bool_contents[i] != 0;
    }
}

/* raw_input_contents[k] against the input's shape and datatype: a size
 * the shape does not take is named here, in gRPC's terms (the HTTP
 * request it becomes would blame binary_data_size, which the client never
 * sent). */
static int grpc_raw_check(const Inference__ModelInferRequest__InferInputTensor *in, size_t k,
                          const ProtobufCBinaryData *rb, char *err, size_t cap)
{
    size_t len = rb->len;
    int field;
    int size = grpc_contents_field(in->datatype ? in->datatype : "", &field);
    int64_t elems = grpc_shape_elems(in);
    /* BYTES: 4-byte little-endian lengths, each before its element. A
     * length past the end, or a count the shape does not take, was blamed
     * on binary_data_size too. */
    if (in->datatype && strcmp(in->datatype, "BYTES") == 0) {
        size_t at = 0;
        int64_t n = 0;
        while (at < len) {
            if (len - at < 4)
                return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                                 "raw_input_contents[%zu] (input \"%s\"): element %lld's "
                                 "4-byte length is cut short (%zu bytes left)", k,
                                 in->name ? in->name : "", (long long)n, len - at);
            const uint8_t *p = rb->data + at;
            uint32_t el = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                          (uint32_t)p[3] << 24;
            at += 4;
            if (el > len - at)
                return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                                 "raw_input_contents[%zu] (input \"%s\"): element %lld says %u "
                                 "bytes, only %zu are left", k, in->name ? in->name : "",
                                 (long long)n, el, len - at);
            at += el;
            n++;
        }
        if (elems >= 0 && n != elems) {
            char shape[96];
            grpc_shape_text(in, shape, sizeof shape);
            return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                             "raw_input_contents[%zu] (input \"%s\"): %lld elements, but shape "
                             "%s needs %lld", k, in->name ? in->name : "", (long long)n, shape,
                             (long long)elems);
        }
        return GRPC_OK;
    }
    if (size <= 0 || elems < 0 || elems > INT64_MAX / size || (uint64_t)elems * size == len)
        return GRPC_OK;
    char shape[96];
    grpc_shape_text(in, shape, sizeof shape);
    return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                     "raw_input_contents[%zu] (input \"%s\"): %zu bytes, but shape %s of %s "
                     "needs %lld", k, in->name ? in->name : "", len, shape, in->datatype,
                     (long long)(elems * size));
}

/* An input's typed contents against its datatype and shape, and the
 * bytes they become in the binary extension's form (*need), which must
 * fit in `room`: a packed zero is one byte on the wire and 8 here (60 MB
 * of INT64 zeros, 58 KB gzipped, became a 480 MB body before the handler
 * refused it). Named in gRPC's terms: once converted, the bytes' size
 * would be blamed on binary_data_size, which the client never sent. */
static int grpc_contents_check(const Inference__ModelInferRequest__InferInputTensor *in,
                               size_t room, size_t limit, size_t *need, char *err, size_t cap)
{
    const Inference__InferTensorContents *c = in->contents;
    const char *dt = in->datatype ? in->datatype : "";
    if (!c)
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                         "input \"%s\": no contents and no raw_input_contents", in->name);
    int field;
    size_t n[GRPC_CONTENTS_FIELDS];
    grpc_contents_counts(c, n);
    int64_t elems = grpc_shape_elems(in);
    int size = grpc_contents_field(dt, &field);
    if (size < 0)
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                         "input \"%s\": datatype \"%s\" travels in raw_input_contents only",
                         in->name, dt);
    for (size_t f = 0; f < GRPC_CONTENTS_FIELDS; f++)
        if (n[f] && (int)f != field)
            return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                             "input \"%s\": contents.%s given, but datatype %s reads "
                             "contents.%s", in->name, grpc_contents_names[f], dt,
                             grpc_contents_names[field]);
    if (elems >= 0 && (uint64_t)elems != n[field]) {
        char shape[96];
        grpc_shape_text(in, shape, sizeof shape);
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                         "input \"%s\": contents.%s has %zu values, but shape %s needs "
                         "%lld", in->name, grpc_contents_names[field], n[field], shape,
                         (long long)elems);
    }
    uint64_t bytes = 0;
    for (size_t i = 0; size == 0 && i < c->n_bytes_contents; i++)
        bytes += 4 + (uint64_t)c->bytes_contents[i].len;
    if (size > 0)
        bytes = (uint64_t)n[field] * (uint64_t)size;
    if (bytes > room)
        return grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED,
                         "input \"%s\": contents.%s become %llu bytes of tensor data; with "
                         "the inputs before it, past limits.max_body_bytes (%zu)", in->name,
                         grpc_contents_names[field], (unsigned long long)bytes, limit);
    *need = (size_t)bytes;
    return GRPC_OK;
}

/* An input's typed contents (checked) as the raw bytes the binary
 * extension carries (little-endian, as raw_input_contents are), appended
 * to out, which has room for them. */
static void grpc_contents_write(const Inference__ModelInferRequest__InferInputTensor *in,
                                struct buf *out)
{
    const Inference__InferTensorContents *c = in->contents;
    int field = 0;
    int size = grpc_contents_field(in->datatype, &field);
    size_t n[GRPC_CONTENTS_FIELDS];
    grpc_contents_counts(c, n);
    unsigned char *w = (unsigned char *)out->data + out->len;
    if (size == 0) {   /* BYTES: each element's 4-byte length, then its bytes */
        for (size_t i = 0; i < c->n_bytes_contents; i++) {
            uint32_t len = (uint32_t)c->bytes_contents[i].len;
            for (int k = 0; k < 4; k++)
                *w++ = (unsigned char)(len >> (8 * k));
            if (len)
                memcpy(w, c->bytes_contents[i].data, len);
            w += len;
        }
    }
    for (size_t i = 0; size > 0 && i < n[field]; i++) {
        /* The low `size` bytes, little-endian: INT8/16 and UINT8/16 travel
         * in the 32-bit fields and narrow as C's conversion does. */
        uint64_t v = grpc_contents_bits(c, field, i);
        for (int k = 0; k < size; k++)
            *w++ = (unsigned char)(v >> (8 * k));
    }
    out->len = (size_t)((char *)w - out->data);
}

/* Whether the input names a region: its shared_memory_region is a string
 * (a parameter with no value, or another kind, is not carried to the
 * HTTP request, so it must not take the input's bytes away either). */
static bool grpc_input_in_shm(const Inference__ModelInferRequest__InferInputTensor *in)
{
    for (size_t k = 0; k < in->n_parameters; k++)
        if (in->parameters[k]->key && in->parameters[k]->value &&
            in->parameters[k]->value->parameter_choice_case ==
                INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM &&
            strcmp(in->parameters[k]->key, "shared_memory_region") == 0)
            return true;
    return false;
}

/* A field echoed as the request sent it, or left out when it is the one
 * refused (`bad`: a NUL would echo it cut short, naming another request;
 * bytes that are not UTF-8 would make the response unreadable). */
static char *grpc_echo_field(char *v, const char *name, const char *bad)
{
    return (bad && strcmp(name, bad) == 0) || !utf8_valid(v, strlen(v)) ? (char *)"" : v;
}

/* ModelInferResponse's model_name, model_version and id, as the request
 * names them, but for the field `bad` (NULL: none) refused in it (an
 * out-of-memory echo is left empty: the error goes alone). */
static void grpc_infer_echo(const Inference__ModelInferRequest *r, const char *bad,
                            struct buf *echo)
{
    Inference__ModelInferResponse e = INFERENCE__MODEL_INFER_RESPONSE__INIT;
    e.model_name = grpc_echo_field(r->model_name, "model_name", bad);
    e.model_version = grpc_echo_field(r->model_version, "model_version", bad);
    e.id = grpc_echo_field(r->id, "id", bad);
    size_t n = inference__model_infer_response__get_packed_size(&e);
    if (n == 0 || buf_reserve(echo, n) < 0)   /* nothing named, or out of memory */
        return;
    echo->len += inference__model_infer_response__pack(&e, (uint8_t *)echo->data + echo->len);
}

static int grpc_infer_to(const ProtobufCMessage *msg, struct grpc_http_request *out, char *err,
                         size_t cap)
{
    const Inference__ModelInferRequest *r = (const void *)msg;
    out->method = HTTP_M_POST;
    grpc_infer_echo(r, NULL, &out->echo);
    int rc = grpc_model_path(out, r->model_name, r->model_version, "/infer", err, cap);
    if (rc)
        return rc;
    /* An input in shared memory has no bytes here, and no entry in
     * raw_input_contents (Triton counts only the others). */
    size_t nshm = 0;
    for (size_t i = 0; i < r->n_inputs; i++)
        nshm += grpc_input_in_shm(r->inputs[i]);
    if (r->n_raw_input_contents && r->n_raw_input_contents != r->n_inputs - nshm)
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                         "%zu raw_input_contents for %zu inputs not in shared memory: give "
                         "every such input's bytes in raw_input_contents, in the order of "
                         "inputs, or none", r->n_raw_input_contents, r->n_inputs - nshm);
    /* Two passes: the inputs checked and their sizes written in the JSON
     * head, then the head and every input's bytes written once, into a
     * body of their exact size (a converted copy, then the body it was
     * copied into, held a large tensor three times with the message). */
    size_t data = 0;   /* the tensor bytes of the inputs so far */
    json_t *root = json_object(), *inputs = json_array(), *params = json_object();
    /* root takes inputs; with no root, json_object_set_new frees it. */
    if (json_object_set_new(root, "inputs", inputs) < 0 || !params) {
        rc = grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        goto done;
    }
    if (r->id && *r->id)
        json_object_set_new(root, "id", json_string(r->id));
    for (size_t i = 0, raw = 0; i < r->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *in = r->inputs[i];
        size_t nbytes = 0;
        bool in_shm = grpc_input_in_shm(in);
        if (in_shm) {
            if (in->contents)
                rc = grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                               "input \"%s\": both contents and shared_memory_region",
                               in->name);
        } else if (r->n_raw_input_contents) {
            const ProtobufCBinaryData *rb = &r->raw_input_contents[raw++];
            if (in->contents)
                rc = grpc_fail(err, cap, GRPC_INVALID_ARGUMENT,
                               "input \"%s\": both contents and raw_input_contents", in->name);
            else
                rc = grpc_raw_check(in, raw - 1, rb, err, cap);
            nbytes = rb->len;
        } else {
            rc = grpc_contents_check(in, out->limit - (data < out->limit ? data : out->limit),
                                     out->limit, &nbytes, err, cap);
        }
        if (rc)
            goto done;
        data += nbytes;
        /* The shape and binary_data_size are there whole, or the call
         * fails: one lost to a failed allocation would describe other
         * bytes than those sent. */
        json_t *shape = json_array(), *ip = json_object(), *t = NULL;
        bool ok = shape && ip;
        for (size_t k = 0; ok && k < in->n_shape; k++)
            ok = json_array_append_new(shape, json_integer(in->shape[k])) == 0;
        /* Every parameter arrives or the call fails: one lost (a region's
         * name) would make the rest describe other bytes. */
        bool bad_param = false;
        for (size_t k = 0; ok && k < in->n_parameters; k++) {
            const Inference__InferParameter *pv = in->parameters[k]->value;
            json_t *v = pv ? pbjson_oneof_value(&pv->base) : NULL;
            if (v)
                ok = json_object_set_new(ip, in->parameters[k]->key, v) == 0;
            else if (pv && pv->parameter_choice_case !=
                               INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE__NOT_SET)
                ok = !(bad_param = true);
        }
        if (bad_param) {
            json_decref(shape);
            json_decref(ip);
            rc = grpc_fail(err, cap, GRPC_INVALID_ARGUMENT, "input \"%s\": a parameter that is "
                           "not a value (a string must be UTF-8)", in->name ? in->name : "");
            goto done;
        }
        ok = ok && (in_shm || json_object_set_new(ip, "binary_data_size",
                                                  json_integer((json_int_t)nbytes)) == 0);
        if (ok) {   /* json_pack takes shape and ip, even when it fails */
            t = json_pack("{s:s, s:s, s:o, s:o}", "name", in->name ? in->name : "", "datatype",
                          in->datatype ? in->datatype : "", "shape", shape, "parameters", ip);
        } else {
            json_decref(shape);
            json_decref(ip);
        }
        if (!t || json_array_append_new(inputs, t) < 0) {
            rc = grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
            goto done;
        }
    }
    if (r->n_outputs) {
        json_t *outputs = json_array();
        json_object_set_new(root, "outputs", outputs);
        for (size_t i = 0; outputs && i < r->n_outputs; i++) {
            const Inference__ModelInferRequest__InferRequestedOutputTensor *o = r->outputs[i];
            json_t *op = json_object();
            for (size_t k = 0; op && k < o->n_parameters; k++) {
                json_t *v = o->parameters[k]->value
                                ? pbjson_oneof_value(&o->parameters[k]->value->base) : NULL;
                if (v)
                    json_object_set_new(op, o->parameters[k]->key, v);
            }
            /* Its bytes travel in raw_output_contents, unless they go to
             * shared memory (then its raw entry is empty, as Triton's). */
            if (op && !json_object_get(op, "shared_memory_region"))
                json_object_set_new(op, "binary_data", json_true());
            json_array_append_new(outputs, json_pack("{s:s, s:o*}", "name",
                                                     o->name ? o->name : "", "parameters", op));
        }
    }
    for (size_t i = 0; i < r->n_parameters; i++) {
        json_t *v = r->parameters[i]->value ? pbjson_oneof_value(&r->parameters[i]->value->base)
                                            : NULL;
        if (v)
            json_object_set_new(params, r->parameters[i]->key, v);
    }
    json_object_set_new(params, "binary_data_output", json_true());
    json_object_set(root, "parameters", params);
    char *head = json_dumps(root, JSON_COMPACT);
    size_t hlen = head ? strlen(head) : 0;
    if (!head || buf_reserve(&out->body, hlen + data) < 0) {
        free(head);
        rc = grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        goto done;
    }
    buf_append(&out->body, head, hlen);   /* within the room reserved */
    free(head);
    out->json_len = (int64_t)hlen;
    for (size_t i = 0, raw = 0; i < r->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *in = r->inputs[i];
        if (grpc_input_in_shm(in))
            continue;
        if (r->n_raw_input_contents) {
            const ProtobufCBinaryData *rb = &r->raw_input_contents[raw++];
            if (rb->len)
                buf_append(&out->body, rb->data, rb->len);
        } else {
            grpc_contents_write(in, &out->body);
        }
    }
    out->head = json_incref(root);
done:
    json_decref(params);
    json_decref(root);
    return rc;
}

/* ---- answers ---- */

/* The error of an HTTP answer ({"error": "..."}) into err; its code. */
static int grpc_answer_error(const struct grpc_http_answer *a, char *err, size_t cap)
{
    json_t *j = a->body && a->len ? json_loadb(a->body, a->len, 0, NULL) : NULL;
    json_t *e = json_is_object(j) ? json_object_get(j, "error") : NULL;
    if (json_is_object(e))   /* OpenAI's shape */
        e = json_object_get(e, "message");
    if (json_is_string(e))
        snprintf(err, cap, "%s", json_string_value(e));
    else
        snprintf(err, cap, "HTTP status %d", a->status);
    json_decref(j);
    return grpc_code_of_http(a->status);
}

static int grpc_pack(const ProtobufCMessage *m, struct buf *out, char *err, size_t cap)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    if (n == 0)
        return GRPC_OK;   /* all fields default: no bytes, and out->data may be NULL */
    if (buf_reserve(out, n) < 0)
        return grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
    protobuf_c_message_pack(m, (uint8_t *)out->data + out->len);
    out->len += n;
    return GRPC_OK;
}

/* A JSON answer as message d, the JSON put under `wrap` first when set. */
static int grpc_from_json(const ProtobufCMessageDescriptor *d, const char *wrap,
                          const struct grpc_http_answer *a, struct buf *out, char *err, size_t cap)
{
    if (a->status != 200)
        return grpc_answer_error(a, err, cap);
    json_error_t je;
    json_t *j = a->len ? json_loadb(a->body, a->len, 0, &je) : json_object();
    if (!j)
        return grpc_fail(err, cap, GRPC_INTERNAL, "the answer is not JSON: %s", je.text);
    if (wrap) {
        json_t *w = json_object();
        json_object_set_new(w, wrap, j);
        j = w;
    }
    struct pbjson_arena *ar = pbjson_arena_new();
    ProtobufCMessage *m = ar ? pbjson_message(d, j, ar) : NULL;
    int rc = m ? grpc_pack(m, out, err, cap)
               : grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
    pbjson_arena_free(ar);
    json_decref(j);
    return rc;
}

/* Header `name`'s value in "Name: value\r\n" lines, as a number; -1 when absent. */
static long long grpc_header_number(const char *headers, const char *name)
{
    size_t nl = strlen(name);
    for (const char *p = headers; p && *p;) {
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':')
            return strtoll(p + nl + 1, NULL, 10);
        const char *eol = strstr(p, "\r\n");
        p = eol ? eol + 2 : NULL;
    }
    return -1;
}

/* An output given as JSON "data" (not binary) into raw bytes. */
static int grpc_data_raw(json_t *data, const char *dt, struct buf *out)
{
    size_t i;
    json_t *v;
    json_array_foreach(data, i, v) {
        if (strcmp(dt, "BYTES") == 0) {
            if (!json_is_string(v))
                return -1;
            uint32_t len = (uint32_t)json_string_length(v);
            if (buf_append(out, &len, 4) < 0 || buf_append(out, json_string_value(v), len) < 0)
                return -1;
        } else if (strcmp(dt, "FP32") == 0) {
            float f = (float)json_number_value(v);
            if (buf_append(out, &f, 4) < 0)
                return -1;
        } else if (strcmp(dt, "INT64") == 0) {
            int64_t x = json_integer_value(v);
            if (buf_append(out, &x, 8) < 0)
                return -1;
        } else if (strcmp(dt, "INT32") == 0) {
            int32_t x = (int32_t)json_integer_value(v);
            if (buf_append(out, &x, 4) < 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

static int grpc_infer_from(const struct grpc_http_answer *a, struct buf *out, char *err,
                           size_t cap)
{
    if (a->status != 200)
        return grpc_answer_error(a, err, cap);
    long long jl = grpc_header_number(a->headers, "Inference-Header-Content-Length");
    size_t json_len = jl >= 0 && (size_t)jl <= a->len ? (size_t)jl : a->len;
    json_error_t je;
    json_t *j = json_loadb(a->body, json_len, 0, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return grpc_fail(err, cap, GRPC_INTERNAL, "the answer is not a KServe v2 answer");
    }
    const uint8_t *bin = (const uint8_t *)a->body + json_len;
    size_t bin_left = a->len - json_len;
    json_t *outputs = json_object_get(j, "outputs");
    size_t nout = json_array_size(outputs);
    struct pbjson_arena *ar = pbjson_arena_new();
    ProtobufCBinaryData *raw = ar ? pbjson_alloc(ar, (nout + 1) * sizeof *raw) : NULL;
    struct buf conv = BUF_INIT;   /* outputs given as JSON data, made raw */
    int rc = GRPC_OK;
    size_t off = 0;
    if (!raw) {
        rc = grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        goto done;
    }
    /* First pass: where each output's bytes are (binary ones in order). */
    size_t *conv_off = pbjson_alloc(ar, (nout + 1) * sizeof *conv_off);
    for (size_t i = 0; conv_off && i < nout; i++) {
        json_t *o = json_array_get(outputs, i);
        json_t *p = json_object_get(o, "parameters");
        json_t *bs = json_object_get(p, "binary_data_size");
        if (json_is_integer(bs)) {
            json_int_t n = json_integer_value(bs);
            if (n < 0 || (size_t)n > bin_left - off) {
                rc = grpc_fail(err, cap, GRPC_INTERNAL, "output %zu: binary_data_size past the "
                               "answer", i);
                goto done;
            }
            raw[i].data = (uint8_t *)bin + off;
            raw[i].len = (size_t)n;
            off += (size_t)n;
            json_object_del(p, "binary_data_size");
            if (json_object_size(p) == 0)
                json_object_del(o, "parameters");
        } else {
            conv_off[i] = conv.len;
            json_t *dt = json_object_get(o, "datatype");
            if (grpc_data_raw(json_object_get(o, "data"), json_string_value(dt) ?
                              json_string_value(dt) : "", &conv) < 0) {
                rc = grpc_fail(err, cap, GRPC_INTERNAL, "output %zu: data of an unsupported "
                               "datatype", i);
                goto done;
            }
            raw[i].len = conv.len - conv_off[i];
            raw[i].data = NULL;   /* set once conv stops moving */
            json_object_del(o, "data");
        }
    }
    /* conv.data is NULL while every converted output is empty (no "data"):
     * NULL + 0 is UB, and they point at "" instead. */
    for (size_t i = 0; conv_off && i < nout; i++)
        if (!raw[i].data)
            raw[i].data = conv.data ? (uint8_t *)conv.data + conv_off[i] : (uint8_t *)"";
    Inference__ModelInferResponse *m =
        conv_off ? (Inference__ModelInferResponse *)pbjson_message(
                       &inference__model_infer_response__descriptor, j, ar)
                 : NULL;
    if (!m) {
        rc = grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
        goto done;
    }
    m->n_raw_output_contents = nout;
    m->raw_output_contents = raw;
    rc = grpc_pack(&m->base, out, err, cap);
done:
    buf_free(&conv);
    pbjson_arena_free(ar);
    json_decref(j);
    return rc;
}

/* Shared memory status: HTTP answers [{"name", ...}, ...] (Triton's HTTP
 * form), gRPC a map from each name to its status. */
static int grpc_shm_status_from(const ProtobufCMessageDescriptor *d,
                                const struct grpc_http_answer *a, struct buf *out, char *err,
                                size_t cap)
{
    if (a->status != 200)
        return grpc_answer_error(a, err, cap);
    json_t *arr = json_loadb(a->body ? a->body : "", a->len, 0, NULL);
    if (!json_is_array(arr)) {
        json_decref(arr);
        return grpc_fail(err, cap, GRPC_INTERNAL, "the status answer is not an array");
    }
    json_t *map = json_object(), *root = json_pack("{s:o}", "regions", map);
    size_t i;
    json_t *v;
    int rc = root ? GRPC_OK : GRPC_RESOURCE_EXHAUSTED;
    json_array_foreach(arr, i, v) {
        json_t *name = json_object_get(v, "name");
        if (rc == GRPC_OK && json_is_string(name) &&
            json_object_set(map, json_string_value(name), v) < 0)
            rc = GRPC_RESOURCE_EXHAUSTED;
    }
    struct pbjson_arena *ar = rc == GRPC_OK ? pbjson_arena_new() : NULL;
    ProtobufCMessage *m = ar ? pbjson_message(d, root, ar) : NULL;
    rc = m ? grpc_pack(m, out, err, cap)
           : grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory");
    pbjson_arena_free(ar);
    json_decref(root);
    json_decref(arr);
    return rc;
}

/* ServerLive, ServerReady, ModelReady: the answer's status is the answer.
 * `no`, `no2`: the other statuses that answer false (0: none). */
static int grpc_bool_from(const ProtobufCMessageDescriptor *d, const struct grpc_http_answer *a,
                          int no, int no2, struct buf *out, char *err, size_t cap)
{
    bool yes = a->status == 200;
    if (!yes && !(no && a->status == no) && !(no2 && a->status == no2))
        return grpc_answer_error(a, err, cap);
    /* Each of the three messages is one bool, field 1. */
    uint8_t msg[2] = {0x08, yes ? 1 : 0};
    (void)d;
    return buf_append(out, msg, sizeof msg) < 0
               ? grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "out of memory") : GRPC_OK;
}

/* ---- the table ---- */

enum grpc_answer_kind {
    ANSWER_JSON,        /* the JSON answer as resp (under wrap) */
    ANSWER_SHM_STATUS,  /* an array of regions, as the map "regions" by name */
    ANSWER_LIVE,        /* 200: true; anything else an error */
    ANSWER_READY,       /* 200: true; 503: false */
    ANSWER_MODEL_READY, /* 200: true; 503 and 404: false, as Triton answers an unknown model */
    ANSWER_EMPTY,       /* 200: the empty message */
    ANSWER_INFER,
};

struct grpc_method {
    const char *name;
    const ProtobufCMessageDescriptor *req;
    grpc_to_fn to;
    const ProtobufCMessageDescriptor *resp;
    enum grpc_answer_kind kind;
    const char *wrap;
    const char *unserved;   /* why it is UNIMPLEMENTED */
};

#define SVC(n) &inference__##n##__descriptor
static const struct grpc_method grpc_methods[] = {
    {"ServerLive", SVC(server_live_request), grpc_live_to, SVC(server_live_response),
     ANSWER_LIVE, NULL, NULL},
    {"ServerReady", SVC(server_ready_request), grpc_ready_to, SVC(server_ready_response),
     ANSWER_READY, NULL, NULL},
    {"ModelReady", SVC(model_ready_request), grpc_model_ready_to, SVC(model_ready_response),
     ANSWER_MODEL_READY, NULL, NULL},
    {"ServerMetadata", SVC(server_metadata_request), grpc_server_meta_to,
     SVC(server_metadata_response), ANSWER_JSON, NULL, NULL},
    {"ModelMetadata", SVC(model_metadata_request), grpc_model_meta_to,
     SVC(model_metadata_response), ANSWER_JSON, NULL, NULL},
    {"ModelInfer", SVC(model_infer_request), grpc_infer_to, SVC(model_infer_response),
     ANSWER_INFER, NULL, NULL},
    {"ModelConfig", SVC(model_config_request), grpc_model_config_to, SVC(model_config_response),
     ANSWER_JSON, "config", NULL},
    {"ModelStatistics", SVC(model_statistics_request), grpc_model_stats_to,
     SVC(model_statistics_response), ANSWER_JSON, NULL, NULL},
    {"RepositoryIndex", SVC(repository_index_request), grpc_index_to,
     SVC(repository_index_response), ANSWER_JSON, "models", NULL},
    {"RepositoryModelLoad", SVC(repository_model_load_request), grpc_repo_to,
     SVC(repository_model_load_response), ANSWER_EMPTY, NULL, NULL},
    {"RepositoryModelUnload", SVC(repository_model_unload_request), grpc_repo_to,
     SVC(repository_model_unload_response), ANSWER_EMPTY, NULL, NULL},
    {"LogSettings", SVC(log_settings_request), grpc_log_to, SVC(log_settings_response),
     ANSWER_JSON, "settings", NULL},
    /* Each message of the stream is a ModelInfer (grpc_method_stream_of). */
    {"ModelStreamInfer", SVC(model_infer_request), grpc_infer_to,
     SVC(model_stream_infer_response), ANSWER_INFER, NULL, NULL},
    {"SystemSharedMemoryStatus", SVC(system_shared_memory_status_request), grpc_shm_named_to,
     SVC(system_shared_memory_status_response), ANSWER_SHM_STATUS, NULL, NULL},
    {"SystemSharedMemoryRegister", SVC(system_shared_memory_register_request),
     grpc_shm_register_to, SVC(system_shared_memory_register_response), ANSWER_EMPTY, NULL,
     NULL},
    {"SystemSharedMemoryUnregister", SVC(system_shared_memory_unregister_request),
     grpc_shm_named_to, SVC(system_shared_memory_unregister_response), ANSWER_EMPTY, NULL,
     NULL},
    /* As over HTTP: no CUDA region is ever registered (register is
     * refused), but status and unregister answer, as perf_analyzer calls
     * them at start and exit with --shared-memory. */
    {"CudaSharedMemoryStatus", SVC(cuda_shared_memory_status_request), grpc_shm_named_to,
     SVC(cuda_shared_memory_status_response), ANSWER_SHM_STATUS, NULL, NULL},
    {"CudaSharedMemoryRegister", SVC(cuda_shared_memory_register_request), grpc_shm_register_to,
     SVC(cuda_shared_memory_register_response), ANSWER_EMPTY, NULL, NULL},
    {"CudaSharedMemoryUnregister", SVC(cuda_shared_memory_unregister_request),
     grpc_shm_named_to, SVC(cuda_shared_memory_unregister_response), ANSWER_EMPTY, NULL, NULL},
    {"TraceSetting", NULL, NULL, NULL, ANSWER_EMPTY, NULL, "tracing is not served"},
};
#undef SVC

const struct grpc_method *grpc_method_find(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof grpc_methods / sizeof grpc_methods[0]; i++)
        if (strlen(grpc_methods[i].name) == len && memcmp(grpc_methods[i].name, name, len) == 0)
            return &grpc_methods[i];
    return NULL;
}

const char *grpc_method_name(const struct grpc_method *m) { return m->name; }
int grpc_method_count(void) { return (int)(sizeof grpc_methods / sizeof grpc_methods[0]); }
const struct grpc_method *grpc_method_at(int i) { return &grpc_methods[i]; }
int grpc_method_index(const struct grpc_method *m) { return (int)(m - grpc_methods); }
bool grpc_method_streams(const struct grpc_method *m) { return strcmp(m->name, "ModelStreamInfer") == 0; }

/* A varint (protobuf's base-128) appended. */
static int grpc_varint_put(struct buf *out, uint64_t v)
{
    uint8_t b[10];
    int n = 0;
    do {
        b[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            b[n] |= 0x80;
        n++;
    } while (v);
    return buf_append(out, b, (size_t)n);
}

int grpc_stream_response(const void *infer_response, size_t len, const char *error,
                         struct buf *out)
{
    /* ModelStreamInferResponse: error_message = 1, infer_response = 2. */
    if (error) {
        /* A proto3 string is UTF-8, or the client's parser refuses the
         * whole response and the stream with it: a message cut inside a
         * character at its buffer's end killed the stream (gRPC audit). */
        size_t el = strlen(error), at;
        if (buf_append(out, "\x0a", 1) < 0 || grpc_varint_put(out, el) < 0 ||
            (at = out->len, buf_append(out, error, el)) < 0)
            return -1;
        for (size_t i = 0; i < el;) {
            uint8_t *c = (uint8_t *)out->data + at + i;
            size_t k = utf8_seq_len(c, el - i);
            if (!k)
                *c = '?';
            i += k ? k : 1;
        }
        if (!len)
            return 0;
    }
    return buf_append(out, "\x12", 1) < 0 || grpc_varint_put(out, len) < 0 ||
                   (len && buf_append(out, infer_response, len) < 0) ? -1 : 0;
}
const char *grpc_method_unserved(const struct grpc_method *m) { return m->unserved; }

void grpc_http_request_free(struct grpc_http_request *r)
{
    buf_free(&r->body);
    buf_free(&r->echo);
    json_decref(r->head);
    r->head = NULL;
}

static bool grpc_varint_get(const uint8_t *p, size_t len, size_t *i, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *i < len; shift += 7) {
        uint8_t b = p[(*i)++];
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* The first string field (nested messages' too) that is not one: holding
 * a NUL byte, or bytes that are not UTF-8; by name, *why saying which, or
 * NULL. protobuf-c hands strings over as C strings, unchecked: "a\0b"
 * would be read as "a" (a request id echoed cut short, a model name
 * naming another model), and bytes that are not UTF-8 made no JSON for the
 * HTTP request ("out of memory", NOT_FOUND or RESOURCE_EXHAUSTED; a load's
 * config override dropped, the files' config loaded instead). Read from
 * the wire, which unpack already checked. */
static const char *grpc_string_with_nul(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                                        size_t len, int depth, const char **why)
{
    size_t i = 0;
    uint64_t key, l;
    while (depth < 32 && i < len && grpc_varint_get(p, len, &i, &key)) {
        switch (key & 7) {
        case 0:
            if (!grpc_varint_get(p, len, &i, &l))
                return NULL;
            break;
        case 1: i += 8; break;
        case 5: i += 4; break;
        case 2: {
            if (!grpc_varint_get(p, len, &i, &l) || l > len - i)
                return NULL;
            const ProtobufCFieldDescriptor *f =
                protobuf_c_message_descriptor_get_field(d, (unsigned)(key >> 3));
            if (f && f->type == PROTOBUF_C_TYPE_STRING && memchr(p + i, 0, (size_t)l)) {
                *why = "a string holding a NUL byte (not served: it would be read cut short "
                       "there)";
                return f->name;
            }
            if (f && f->type == PROTOBUF_C_TYPE_STRING && !utf8_valid(p + i, (size_t)l)) {
                *why = "a string that is not UTF-8 (proto3 strings are)";
                return f->name;
            }
            if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
                const char *name = grpc_string_with_nul(f->descriptor, p + i, (size_t)l, depth + 1,
                                                        why);
                if (name)
                    return name;
            }
            i += (size_t)l;
            break;
        }
        default:
            return NULL;
        }
    }
    return NULL;
}

/* protobuf-c's allocations for one message, counted against a budget:
 * what a message takes once unpacked is not its size on the wire (a
 * packed INT64 zero is 1 byte there and 8 unpacked, a bytes entry its own
 * allocation), and a gzipped message of 58 KB unpacked to 480 MB. What
 * each allocation really holds is counted (malloc's rounding and header:
 * 2,000,000 one-byte entries held 162 MB under a budget of 135 MB counted
 * by size), and given back when freed (unpack frees its scratch: counted
 * for good, a message of many fields was refused at a third of it). */
struct grpc_unpack_budget {
    size_t left;
    bool over;
};

#define GRPC_MALLOC_HEADER 16   /* glibc's chunk header beside the usable size */

static void *grpc_budget_alloc(void *data, size_t size)
{
    struct grpc_unpack_budget *b = data;
    void *p = size + GRPC_MALLOC_HEADER <= b->left ? malloc(size) : NULL;
    size_t held = p ? malloc_usable_size(p) + GRPC_MALLOC_HEADER : 0;
    if (!p || held > b->left) {
        free(p);
        b->over = true;
        return NULL;
    }
    b->left -= held;
    return p;
}

static void grpc_budget_free(void *data, void *p)
{
    struct grpc_unpack_budget *b = data;
    if (p)
        b->left += malloc_usable_size(p) + GRPC_MALLOC_HEADER;
    free(p);
}

int grpc_to_http(const struct grpc_method *m, const uint8_t *msg, size_t len, size_t limit,
                 struct grpc_http_request *out, char *err, size_t cap)
{
    out->method = HTTP_M_GET;
    out->path[0] = '\0';
    out->json_len = -1;
    out->head = NULL;
    out->limit = limit;
    if (m->unserved)
        return grpc_fail(err, cap, GRPC_UNIMPLEMENTED, "%s", m->unserved);
    /* Twice the body limit and 1 MiB: a message of raw tensor bytes up to
     * the limit unpacks to about its size, with room for its structure. */
    size_t budget = limit > (SIZE_MAX - (1 << 20)) / 2 ? SIZE_MAX : 2 * limit + (1 << 20);
    struct grpc_unpack_budget b = {.left = budget};
    ProtobufCAllocator alloc = {grpc_budget_alloc, grpc_budget_free, &b};
    ProtobufCMessage *req = protobuf_c_message_unpack(m->req, &alloc, len, msg);
    if (!req && b.over)
        return grpc_fail(err, cap, GRPC_RESOURCE_EXHAUSTED, "the %s takes more than %zu bytes "
                         "once read (twice limits.max_body_bytes and 1 MiB): typed contents "
                         "take more room read than sent (a small integer 8 bytes, each "
                         "bytes_contents entry an allocation of its own); send large tensors "
                         "in raw_input_contents", m->req->name, budget);
    if (!req)   /* gRPC's status for "error parsing request proto", as grpc-core says it */
        return grpc_fail(err, cap, GRPC_INTERNAL, "the request is not a valid %s",
                         m->req->name);
    const char *why = NULL;
    const char *nul = grpc_string_with_nul(m->req, msg, len, 0, &why);
    if (nul) {
        /* In a stream the error is that message's response: it names the
         * request as far as it can be read, as any other error does. */
        if (m->to == grpc_infer_to)
            grpc_infer_echo((const Inference__ModelInferRequest *)req, nul, &out->echo);
        protobuf_c_message_free_unpacked(req, &alloc);
        return grpc_fail(err, cap, GRPC_INVALID_ARGUMENT, "%s: %s", nul, why);
    }
    int rc = m->to(req, out, err, cap);
    protobuf_c_message_free_unpacked(req, &alloc);
    return rc;
}

int grpc_from_http(const struct grpc_method *m, const struct grpc_http_answer *a, struct buf *out,
                   char *err, size_t cap)
{
    switch (m->kind) {
    case ANSWER_LIVE: return grpc_bool_from(m->resp, a, 0, 0, out, err, cap);
    case ANSWER_READY: return grpc_bool_from(m->resp, a, 503, 0, out, err, cap);
    /* tritonclient's is_model_ready raised for a model not there, where
     * Triton's answers false and code written for it branches on that. */
    case ANSWER_MODEL_READY: return grpc_bool_from(m->resp, a, 503, 404, out, err, cap);
    case ANSWER_EMPTY: return a->status == 200 ? GRPC_OK : grpc_answer_error(a, err, cap);
    case ANSWER_INFER: return grpc_infer_from(a, out, err, cap);
    case ANSWER_SHM_STATUS: return grpc_shm_status_from(m->resp, a, out, err, cap);
    case ANSWER_JSON:
    default: return grpc_from_json(m->resp, m->wrap, a, out, err, cap);
    }
}

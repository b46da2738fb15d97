/* target.c - see target.h. */
#include "loadgen/target.h"

#include <netdb.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

int lg_parse_number(const char *s, double lo, double hi, bool integer, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!s[0] || *end || errno || !isfinite(v) || v < lo || v > hi || (integer && v != floor(v)))
        return -1;
    *out = v;
    return 0;
}

int lg_target_parse(const char *url, struct lg_target *t)
{
    if (strncmp(url, "http://", 7) != 0)
        return -1;
    const char *p = url + 7, *slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    char hostport[250];
    if (hl == 0 || hl >= sizeof hostport)
        return -1;
    memcpy(hostport, p, hl);
    hostport[hl] = '\0';
    snprintf(t->path, sizeof t->path, "%s", slash ? slash : "/");
    t->port = 80;
    char *colon = strrchr(hostport, ':');
    if (hostport[0] == '[') {
        char *end = strchr(hostport, ']');
        if (!end)
            return -1;
        *end = '\0';
        snprintf(t->host, sizeof t->host, "%s", hostport + 1);
        const char *port = end[1] == ':' ? end + 2 : end[1] ? "bad" : NULL;
        double num = 80;
        if (port && lg_parse_number(port, 1, 65535, true, &num) < 0)
            return -1;
        t->port = (int)num;
    } else {
        if (colon) {
            *colon = '\0';
            double num;
            if (lg_parse_number(colon + 1, 1, 65535, true, &num) < 0)
                return -1;   /* "http://h:80x" read as port 80 */
            t->port = (int)num;
        }
        snprintf(t->host, sizeof t->host, "%s", hostport);
    }
    return t->port > 0 && t->port < 65536 ? 0 : -1;
}

/* A blocking GET (model metadata, /metrics) with `extra` header lines
 * ("N: V\r\n"...): the body, or NULL. */
static char *lg_target_get(const struct lg_target *t, const char *path, const char *extra, int *status)
{
    char port[16];
    snprintf(port, sizeof port, "%d", t->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(t->host, port, &hints, &ai))
        return NULL;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {10, 0};
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    freeaddrinfo(ai);
    struct buf b = BUF_INIT;
    buf_appendf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n", path, t->host,
                extra ? extra : "");
    if (send(fd, b.data, b.len, MSG_NOSIGNAL) != (ssize_t)b.len) {
        close(fd);
        buf_free(&b);
        return NULL;
    }
    buf_reset(&b);
    for (;;) {
        if (buf_reserve(&b, 65536) < 0)
            break;
        ssize_t n = read(fd, b.data + b.len, b.cap - b.len - 1);
        if (n <= 0)
            break;
        b.len += (size_t)n;
    }
    close(fd);
    if (!b.data) {
        return NULL;
    }
    b.data[b.len] = '\0';
    *status = 0;
    sscanf(b.data, "HTTP/%*s %d", status);
    char *body = strstr(b.data, "\r\n\r\n");
    char *out = body ? strdup(body + 4) : NULL;
    buf_free(&b);
    return out;
}

static uint64_t lg_target_rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* KServe v2 infer bodies of random FP32 rows of the model's input shape. */
static int lg_target_model_requests(const struct lg_target *t, const char *model, int batch,
                                    bool binary, const char *extra, uint64_t seed,
                                    struct lg_request *out, int n, char *msg, int cap)
{
    char path[512];
    snprintf(path, sizeof path, "/v2/models/%s", model);
    int status = 0;
    char *meta = lg_target_get(t, path, extra, &status);
    if (!meta || status != 200) {
        snprintf(msg, (size_t)cap, "GET http://%s:%d%s: %s", t->host, t->port, path,
                 meta ? meta : "no answer");
        free(meta);
        return -1;
    }
    json_t *root = json_loads(meta, 0, NULL);
    free(meta);
    json_t *in = root ? json_array_get(json_object_get(root, "inputs"), 0) : NULL;
    json_t *shape = in ? json_object_get(in, "shape") : NULL;
    const char *name = in ? json_string_value(json_object_get(in, "name")) : NULL;
    const char *dt = in ? json_string_value(json_object_get(in, "datatype")) : NULL;
    if (!name || !json_is_array(shape) || !dt || strcmp(dt, "FP32") != 0) {
        snprintf(msg, (size_t)cap, "model %s: metadata without an FP32 input (only FP32 is generated)",
                 model);
        json_decref(root);
        return -1;
    }
    long long elems = 1;
    struct buf sh = BUF_INIT;
    buf_appendf(&sh, "[%d", batch);
    for (size_t i = 1; i < json_array_size(shape); i++) {
        long long d = json_integer_value(json_array_get(shape, i));
        elems *= d > 0 ? d : 1;
        buf_appendf(&sh, ",%lld", d);
    }
    buf_append(&sh, "]", 2);
    uint64_t s = seed ? seed : 1;
    for (int k = 0; k < n; k++) {
        struct buf body = BUF_INIT;
        size_t json_len = 0;
        if (binary) {
            /* Triton's binary tensor extension: a JSON header, then raw
             * little-endian FP32, and the output asked for in binary too. */
            buf_appendf(&body, "{\"inputs\":[{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":%s,"
                               "\"parameters\":{\"binary_data_size\":%lld}}],"
                               "\"parameters\":{\"binary_data_output\":true}}",
                        name, sh.data, elems * batch * 4);
            json_len = body.len;
            for (long long i = 0; i < elems * batch; i++) {
                float f = (float)((double)(lg_target_rnd(&s) % 20001) / 10000.0 - 1.0);
                buf_append(&body, &f, 4);
            }
        } else {
            buf_appendf(&body, "{\"inputs\":[{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":%s,\"data\":[",
                        name, sh.data);
            for (long long i = 0; i < elems * batch; i++)
                buf_appendf(&body, "%s%.4f", i ? "," : "", (double)(lg_target_rnd(&s) % 20001) / 10000.0 - 1.0);
            buf_append(&body, "]}]}", 4);
        }
        buf_appendf(&out[k].bytes, "POST /v2/models/%s/infer HTTP/1.1\r\nHost: %s\r\n"
                                   "Content-Type: %s\r\nContent-Length: %zu\r\n",
                    model, t->host, binary ? "application/octet-stream" : "application/json",
                    body.len);
        if (binary)
            buf_appendf(&out[k].bytes, "Inference-Header-Content-Length: %zu\r\n", json_len);
        buf_appendf(&out[k].bytes, "%s\r\n", extra);
        buf_append(&out[k].bytes, body.data, body.len);
        buf_free(&body);
    }
    buf_free(&sh);
    json_decref(root);
    return 0;
}

static double lg_target_metric(const char *text, const char *name, const char *model)
{
    char key[512];
    snprintf(key, sizeof key, "%s{model=\"%s\"} ", name, model);
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : -1;
}

void lg_target_view_read(const struct lg_target *t, const char *model, struct lg_server_view *v)
{
    memset(v, 0, sizeof *v);
    int status = 0;
    char *text = model ? lg_target_get(t, "/metrics", NULL, &status) : NULL;
    if (!text || status != 200) {
        free(text);
        return;
    }
    v->queue_sum = lg_target_metric(text, "batchgate_queue_duration_seconds_sum", model);
    v->queue_count = lg_target_metric(text, "batchgate_queue_duration_seconds_count", model);
    v->compute_sum = lg_target_metric(text, "batchgate_compute_duration_seconds_sum", model);
    v->compute_count = lg_target_metric(text, "batchgate_compute_duration_seconds_count", model);
    v->batch_sum = lg_target_metric(text, "batchgate_batch_size_sum", model);
    v->batch_count = lg_target_metric(text, "batchgate_batch_size_count", model);
    v->ok = v->queue_count >= 0 && v->compute_count >= 0 && v->batch_count >= 0;
    free(text);
}



int lg_target_requests(const struct lg_opts *o, const char *model, int batch, double budget_ms,
                       int priority, const char *key, uint64_t seed, struct lg_request *reqs,
                       int *nreq, char *msg, int cap)
{
    struct buf h = BUF_INIT;
    buf_append(&h, o->headers.data ? o->headers.data : "", o->headers.len);
    if (key)
        buf_appendf(&h, "Authorization: Bearer %s\r\n", key);
    int rc = 0;
    if (model) {
        if (budget_ms > 0)
            buf_appendf(&h, "X-Request-Timeout-Ms: %.0f\r\n", budget_ms);
        if (priority > 0)
            buf_appendf(&h, "X-Priority: %d\r\n", priority);
        buf_append(&h, "", 1);
        rc = lg_target_model_requests(&o->t, model, batch, o->binary, h.data, seed, reqs,
                                      LG_MODEL_REQS, msg, cap);
        *nreq = LG_MODEL_REQS;
    } else {
        buf_append(&h, "", 1);
        int n = o->nbodies ? o->nbodies : 1;
        const char *line = o->bodies.data;
        for (int k = 0; k < n; k++) {
            const char *body = o->nbodies ? line : o->body.data ? o->body.data : "";
            size_t len = o->nbodies ? strlen(line) : o->body.len;
            buf_appendf(&reqs[k].bytes, "%s %s HTTP/1.1\r\nHost: %s\r\n", o->method, o->t.path,
                        o->t.host);
            if (o->has_body || o->nbodies || strcmp(o->method, "GET") != 0)
                buf_appendf(&reqs[k].bytes, "Content-Length: %zu\r\n", len);
            buf_appendf(&reqs[k].bytes, "%s\r\n", h.data);
            buf_append(&reqs[k].bytes, body, len);
            if (o->nbodies)
                line += len + 1;
        }
        *nreq = n;
    }
    buf_free(&h);
    return rc;
}

struct lg_config lg_target_step(const struct lg_opts *o, struct lg_request *reqs, int nreq,
                                bool open_loop, double target, double budget_ms, uint64_t seed)
{
    struct lg_config c = {
        .requests = reqs, .nrequests = nreq, .open_loop = open_loop,
        .head = strcasecmp(o->method ? o->method : "GET", "HEAD") == 0,
        .rate = open_loop ? target : 0, .poisson = !o->constant,
        .concurrency = open_loop ? 0 : (int)target, .max_connections = o->max_conns,
        .warmup_s = o->warmup, .duration_s = o->duration,
        .budget_ns = (int64_t)(budget_ms * 1e6), .drain_ms = o->drain_ms,
        .seed = seed, .progress = !o->quiet && isatty(2),
    };
    snprintf(c.host, sizeof c.host, "%s", o->t.host);
    c.port = o->t.port;
    return c;
}

void lg_target_view_apply(const struct lg_server_view *before, const struct lg_server_view *after,
                          struct report_step *st)
{
    if (!before->ok || !after->ok)
        return;
    double q = after->queue_count - before->queue_count;
    double cc = after->compute_count - before->compute_count;
    st->server = true;
    st->server_queue_ms = q > 0 ? (after->queue_sum - before->queue_sum) / q * 1e3 : 0;
    st->server_compute_ms = cc > 0 ? (after->compute_sum - before->compute_sum) / cc * 1e3 : 0;
    double bc = after->batch_count - before->batch_count;
    st->server_batch = bc > 0 ? (after->batch_sum - before->batch_sum) / bc : 0;
}

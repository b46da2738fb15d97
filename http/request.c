/* request.c - the request core: the request object (allocation,
 * recycling, accessors) and the answering API of http.h. The rules that hold
 * whatever protocol carries the request live here (one answer per request,
 * a streamed answer begun before it is written to, the error body's
 * format); the wire work is the protocol's (r->proto: conn.c). */
#include "http/http_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/utf8.h"

/* Buffer bytes a recycled request keeps, each of head, body and held answer. */
#define HTTP_REQUEST_KEEP (4u << 10)

struct http_request *http_request_new(struct http_conn *conn, const struct http_proto *proto)
{
    struct http_request *r = calloc(1, sizeof *r);
    if (r) {
        r->conn = conn;
        r->proto = proto;
    }
    return r;
}

void http_request_reset(struct http_request *r)
{
    struct http_conn *conn = r->conn;
    const struct http_proto *proto = r->proto;
    struct buf head = r->head, body = r->body, resp = r->resp, trailers = r->trailers;
    struct http_header *hdrs = r->hdrs;
    int cap = r->hdrs_cap;
    buf_reset(&head);
    buf_reset(&body);
    buf_reset(&resp);
    buf_reset(&trailers);
    /* A spare waits in its IO thread's pool (conn.c: conn_recycle) for
     * any request of any connection: it keeps buffers for a typical request
     * only. A rare large body or answer (or a refused oversized one) would
     * otherwise stay in the pool for good, and the pool's memory would
     * creep up to 32 times the largest of each (the soak saw it). */
    buf_shrink(&head, HTTP_REQUEST_KEEP);
    buf_shrink(&body, HTTP_REQUEST_KEEP);
    buf_shrink(&resp, HTTP_REQUEST_KEEP);
    if (r->decoded_free)
        r->decoded_free(r->decoded);
    free(r->params_decoded);
    if (cap > 64) {   /* a request with very many headers: its index goes too */
        free(hdrs);
        hdrs = NULL;
        cap = 0;
    }
    memset(r, 0, sizeof *r);
    r->conn = conn;
    r->proto = proto;
    r->head = head;
    r->body = body;
    r->resp = resp;
    r->trailers = trailers;
    r->hdrs = hdrs;
    r->hdrs_cap = cap;
}

void http_request_free(struct http_request *r)
{
    if (!r)
        return;
    buf_free(&r->head);
    buf_free(&r->body);
    buf_free(&r->resp);
    buf_free(&r->trailers);
    free(r->hdrs);
    if (r->decoded_free)
        r->decoded_free(r->decoded);
    free(r->params_decoded);
    free(r);
}

static const struct {
    const char *name;
    int bit;
    uint8_t llh;
} http_methods[] = {
    {"GET", HTTP_M_GET, HTTP_GET},          {"HEAD", HTTP_M_HEAD, HTTP_HEAD},
    {"POST", HTTP_M_POST, HTTP_POST},       {"PUT", HTTP_M_PUT, HTTP_PUT},
    {"DELETE", HTTP_M_DELETE, HTTP_DELETE}, {"OPTIONS", HTTP_M_OPTIONS, HTTP_OPTIONS},
    {"PATCH", HTTP_M_PATCH, HTTP_PATCH},
};

int http_method_from_name(const char *name, size_t len, uint8_t *llhttp_method)
{
    for (size_t i = 0; i < sizeof http_methods / sizeof http_methods[0]; i++)
        if (strlen(http_methods[i].name) == len && memcmp(http_methods[i].name, name, len) == 0) {
            *llhttp_method = http_methods[i].llh;
            return http_methods[i].bit;
        }
    *llhttp_method = HTTP_CONNECT;   /* a name llhttp_method_name knows; never routed */
    return HTTP_M_OTHER;
}

/* 1 when a path segment is ".", 2 when "..", 0 otherwise; "%2e" counts as
 * a dot (RFC 3986 6.2.2.2: an encoded unreserved character is the
 * character), as a server behind would decode it. */
static int http_dot_segment(const char *s, size_t n)
{
    int dots = 0;
    for (size_t i = 0; i < n; dots++) {
        if (s[i] == '.')
            i++;
        else if (n - i >= 3 && s[i] == '%' && s[i + 1] == '2' && (s[i + 2] | 0x20) == 'e')
            i += 3;
        else
            return 0;
    }
    return dots <= 2 ? dots : 0;
}

/* Whether the path holds a dot segment ("." or "..", "%2e" counting as a
 * dot): such a request is refused (400), not routed. Cleaned away (RFC
 * 3986 5.2.4), "/tfs/../admin" would be served as "/admin" and a route's
 * parameter of ".." would climb out of it: a region named ".." became
 * /v2/systemsharedmemory/unregister, every region. Forwarded as it came, a
 * server behind that normalises would serve a path outside the route's
 * prefix. Clients remove dot segments before they send (RFC 3986 5.2);
 * one that did not is asking for a path it cannot name. */
static bool http_path_has_dots(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '/')
            continue;
        size_t e = i + 1;
        while (e < n && p[e] != '/')
            e++;
        if (http_dot_segment(p + i + 1, e - i - 1))
            return true;
        i = e - 1;
    }
    return false;
}

void http_request_check_path(struct http_request *r)
{
    r->dot_path = r->path_len > r->path_off &&
                  http_path_has_dots(r->head.data + r->path_off, r->path_len - r->path_off);
}

/* The URL goes first in `head`, before any header (parse.c's layout). */
int http_request_set_target(struct http_request *r, int method, const char *url, size_t len)
{
    if (r->head.len != 0 || len > UINT32_MAX / 2)
        return -1;
    r->method = HTTP_M_OTHER;
    r->llhttp_method = HTTP_CONNECT;
    for (size_t i = 0; i < sizeof http_methods / sizeof http_methods[0]; i++)
        if (http_methods[i].bit == method) {
            r->method = method;
            r->llhttp_method = http_methods[i].llh;
        }
    if (buf_append(&r->head, url, len) < 0)
        return -1;
    r->url_len = (uint32_t)len;
    const char *q = len ? memchr(r->head.data, '?', len) : NULL;
    r->path_len = q ? (uint32_t)(q - r->head.data) : r->url_len;
    r->path_off = 0;
    http_request_check_path(r);
    return 0;
}

int http_request_add_header(struct http_request *r, const char *name, size_t name_len,
                            const char *value, size_t value_len)
{
    if (name_len > UINT32_MAX / 4 || value_len > UINT32_MAX / 4)
        return -1;
    if (r->nhdrs == r->hdrs_cap) {
        int cap = r->hdrs_cap ? r->hdrs_cap * 2 : 16;
        struct http_header *h = realloc(r->hdrs, (size_t)cap * sizeof *h);
        if (!h)
            return -1;
        r->hdrs = h;
        r->hdrs_cap = cap;
    }
    size_t at = r->head.len;
    if (buf_append(&r->head, name, name_len) < 0 || buf_append(&r->head, value, value_len) < 0) {
        r->head.len = at;
        return -1;
    }
    r->hdrs[r->nhdrs++] = (struct http_header){.name_off = (uint32_t)at,
                                               .name_len = (uint32_t)name_len,
                                               .val_off = (uint32_t)(at + name_len),
                                               .val_len = (uint32_t)value_len};
    return 0;
}

int http_request_method(const struct http_request *r) { return r->method; }

const char *http_request_method_name(const struct http_request *r)
{
    return llhttp_method_name((llhttp_method_t)r->llhttp_method);
}

const char *http_request_path(const struct http_request *r, size_t *len)
{
    *len = r->path_len - r->path_off;
    if (*len == 0 && r->path_off) {   /* "http://host" alone: its path is "/" */
        *len = 1;
        return "/";
    }
    return *len ? r->head.data + r->path_off : "";
}

const char *http_request_query(const struct http_request *r, size_t *len)
{
    if (r->path_len >= r->url_len) {
        *len = 0;
        return NULL;
    }
    *len = r->url_len - r->path_len - 1;
    return r->head.data + r->path_len + 1;
}

static int http_hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int http_pct_decode(const char *in, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        char c = in[i];
        if (c == '%') {
            if (len - i < 3 || http_hex(in[i + 1]) < 0 || http_hex(in[i + 2]) < 0)
                return -1;
            c = (char)(http_hex(in[i + 1]) * 16 + http_hex(in[i + 2]));
            i += 2;
        }
        if (n >= cap || c == '\0')
            return -1;
        out[n++] = c;
    }
    return (int)n;
}

int http_request_query_param(const struct http_request *r, const char *key, char *out,
                             size_t cap)
{
    size_t qlen, klen = strlen(key);
    const char *q = http_request_query(r, &qlen);
    const char *p = q, *end = q ? q + qlen : NULL;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pe = amp ? amp : end;
        if ((size_t)(pe - p) >= klen && memcmp(p, key, klen) == 0 &&
            (p + klen == pe || p[klen] == '=')) {
            const char *v = p + klen + (p + klen < pe);
            int n = cap ? http_pct_decode(v, (size_t)(pe - v), out, cap - 1) : -1;
            if (n < 0)
                return -1;
            out[n] = '\0';
            return 1;
        }
        p = amp ? amp + 1 : NULL;
    }
    return 0;
}

const char *http_request_header(const struct http_request *r, const char *name, size_t *len)
{
    size_t n = strlen(name);
    for (int i = 0; i < r->nhdrs; i++) {
        const struct http_header *h = &r->hdrs[i];
        if (h->name_len == n && strncasecmp(r->head.data + h->name_off, name, n) == 0) {
            *len = h->val_len;
            return h->val_len ? r->head.data + h->val_off : "";
        }
    }
    *len = 0;
    return NULL;
}

int http_request_header_times(const struct http_request *r, const char *name)
{
    size_t n = strlen(name);
    int k = 0;
    for (int i = 0; i < r->nhdrs; i++) {
        const struct http_header *h = &r->hdrs[i];
        k += h->name_len == n && strncasecmp(r->head.data + h->name_off, name, n) == 0;
    }
    return k;
}

int http_request_header_count(const struct http_request *r) { return r->nhdrs; }

void http_request_header_at(const struct http_request *r, int i, const char **name,
                            size_t *name_len, const char **value, size_t *value_len)
{
    const struct http_header *h = &r->hdrs[i];
    *name = r->head.data + h->name_off;
    *name_len = h->name_len;
    *value = h->val_len ? r->head.data + h->val_off : "";
    *value_len = h->val_len;
}

int http_request_minor(const struct http_request *r) { return r->http_minor; }

const char *http_request_body(const struct http_request *r, size_t *len)
{
    *len = r->body.len;
    return r->body.len ? r->body.data : NULL;
}

void http_request_release_body(struct http_request *r) { buf_free(&r->body); }

int http_request_has_body(const struct http_request *r) { return r->has_body; }
int64_t http_request_content_length(const struct http_request *r)
{
    return r->has_body ? r->content_length : 0;
}

void http_request_on_abort(struct http_request *r, void (*fn)(struct http_request *, void *),
                           void *arg)
{
    r->abort_fn = fn;
    r->abort_arg = arg;
}

void http_request_abort_on_fin(struct http_request *r)
{
    r->fin_leaves = true;
    if (r->proto->fin_leaves)
        r->proto->fin_leaves(r);
}

void http_request_on_drain(struct http_request *r, void (*fn)(struct http_request *, void *),
                           void *arg)
{
    r->drain_fn = fn;
    r->drain_arg = arg;
}

void http_request_on_body(struct http_request *r, http_body_fn fn, void *arg)
{
    r->body_fn = fn;
    r->body_arg = arg;
    if (!r->streaming) {
        /* Dispatched whole: the body is all here. */
        fn(r, arg, r->body.len ? r->body.data : "", r->body.len, 1, 0, NULL);
    }
}

void http_request_pause_body(struct http_request *r, int paused)
{
    if (r->body_paused == (paused != 0))
        return;
    r->body_paused = paused != 0;
    r->proto->body_paused(r);
}

void http_request_body_at_rest(struct http_request *r, int state)
{
    bool rest = state == HTTP_BODY_AT_REST;
    if (rest && (!r->body_at_rest || r->body_serving))
        r->t_rest_ns = now_ns();   /* the client's turn starts now: after the last answer */
    r->body_at_rest = state != HTTP_BODY_MOVING;
    r->body_serving = state == HTTP_BODY_SERVING;
}

void http_request_peer(const struct http_request *r, char *out, size_t cap)
{
    r->proto->peer(r, out, cap);
}

struct event_base *http_request_event_base(const struct http_request *r)
{
    return r->proto->thread(r)->base;
}

struct mailbox *http_request_mailbox(const struct http_request *r)
{
    return r->proto->thread(r)->mailbox;
}

int http_request_thread(const struct http_request *r) { return r->proto->thread(r)->index; }
int64_t http_request_received_ns(const struct http_request *r) { return r->t_received_ns; }
int64_t http_request_arrival_ns(const struct http_request *r) { return r->t_arrival_ns; }
void http_request_set_tag(struct http_request *r, int tag) { r->tag = tag; }
int http_request_tag(const struct http_request *r) { return r->tag; }

void *http_request_decoded(const struct http_request *r, const char *kind)
{
    return r->decoded && strcmp(r->decoded_kind, kind) == 0 ? r->decoded : NULL;
}

void http_request_set_error_style(struct http_request *r, enum http_error_style style)
{
    r->err_style = style;
}

void http_request_set_error_param(struct http_request *r, const char *param)
{
    snprintf(r->err_param, sizeof r->err_param, "%s", param ? param : "");
}

void http_request_set_error_reason(struct http_request *r, const char *reason)
{
    snprintf(r->err_reason, sizeof r->err_reason, "%s", reason ? reason : "");
}

/* ---- answering ---- */

void http_request_set_trailers(struct http_request *r, const char *trailers)
{
    buf_reset(&r->trailers);
    if (trailers && buf_append(&r->trailers, trailers, strlen(trailers)) == 0)
        buf_append(&r->trailers, "", 1);   /* kept NUL-terminated; len counts it */
}

const struct http_compression *http_request_compression(const struct http_request *r)
{
    return r->proto->compresses ? r->proto->thread(r)->compression : NULL;
}

int http_request_deflate(struct http_request *r, enum http_coding c, const void *in, size_t len,
                         struct buf *out)
{
    const struct http_compression *cfg = http_request_compression(r);
    return cfg ? http_coding_encode(&r->proto->thread(r)->deflater, c, cfg->level, in, len, out)
               : -1;
}

void http_respond(struct http_request *r, int status, const char *content_type, const void *body,
                  size_t len, const char *extra_headers)
{
    if (r->responded || r->resp_begun)
        return;   /* a second answer is a bug in the caller; the first one stands */
    struct buf z = BUF_INIT, h = BUF_INIT;
    const struct http_compression *c = http_request_compression(r);
    size_t al = 0;
    const char *ae = c ? http_request_header(r, "Accept-Encoding", &al) : NULL;
    switch (http_answer_encode(c, c ? &r->proto->thread(r)->deflater : NULL, ae, al, content_type,
                               body, len, extra_headers, &z, &h)) {
    case 2:
        r->proto->respond(r, status, content_type, z.data, z.len, h.data);
        break;
    case 1:
        r->proto->respond(r, status, content_type, body, len, h.data);
        break;
    default:
        r->proto->respond(r, status, content_type, body, len, extra_headers);
    }
    buf_free(&z);
    buf_free(&h);
}

void http_respond_error(struct http_request *r, int status, const char *extra_headers,
                        const char *fmt, ...)
{
    char msg[560];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, 512, fmt, ap);
    va_end(ap);
    /* A message quoting the client's bytes (a %-decoded model name), or
     * cut inside a character, is no JSON string: jansson refused it and
     * the answer said "out of memory". */
    utf8_scrub(msg);
    json_t *obj;
    if (r->err_style == HTTP_ERRORS_OPENAI) {
        if (r->err_reason[0] && n >= 0)
            snprintf(msg + (n < 512 ? n : 511), sizeof msg - (n < 512 ? (size_t)n : 511),
                     " (%s)", r->err_reason);
        /* OpenAI's error types by status; its clients pick their exception
         * by status and show `message`. */
        const char *type = status == 401   ? "authentication_error"
                           : status == 403 ? "permission_error"
                           : status == 404 ? "not_found_error"
                           : status == 429 ? "rate_limit_error"
                           : status >= 500 ? "server_error"
                                           : "invalid_request_error";
        obj = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg, "type", type,
                        "param", r->err_param[0] ? json_string(r->err_param) : json_null(),
                        "code", status == 429 ? json_string("rate_limit_exceeded") : json_null());
    } else if (r->err_reason[0]) {
        obj = json_pack("{s:s, s:s}", "error", msg, "reason", r->err_reason);
    } else {
        obj = json_pack("{s:s}", "error", msg);
    }
    char *body = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    if (body) {
        http_respond(r, status, "application/json", body, strlen(body), extra_headers);
    } else {
        static const char fallback[] = "{\"error\":\"out of memory\"}";
        http_respond(r, status, "application/json", fallback, sizeof fallback - 1, extra_headers);
    }
    free(body);
    json_decref(obj);
}

int http_respond_begin(struct http_request *r, int status, int64_t content_length, int no_body,
                       const char *headers, size_t headers_len)
{
    if (r->responded || r->resp_begun)
        return -1;
    r->resp_begun = true;
    r->status = status;
    if (r->aborted)
        return -1;
    return r->proto->respond_begin(r, status, content_length, no_body, headers, headers_len);
}

int http_respond_write(struct http_request *r, const void *data, size_t len)
{
    if (r->responded || !r->resp_begun || r->aborted)
        return -1;
    return r->proto->respond_write(r, data, len);
}

void http_respond_finish(struct http_request *r, int broken)
{
    if (r->responded)
        return;
    if (!r->resp_begun) {
        http_respond_error(r, 502, NULL, "the upstream answer ended before its head");
        return;
    }
    r->proto->respond_finish(r, broken);
}

size_t http_respond_buffered(const struct http_request *r) { return r->proto->respond_buffered(r); }

size_t http_conn_buffered(const struct http_request *r) { return r->proto->conn_buffered(r); }

struct http_conn_answers *http_request_conn_answers(struct http_request *r)
{
    return r->proto->conn_answers ? r->proto->conn_answers(r) : NULL;
}

void http_request_answer_expected(struct http_request *r, size_t bytes)
{
    if (r->proto->answer_expected)
        r->proto->answer_expected(r, bytes);
}

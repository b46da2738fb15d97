/* http_parse.c - llhttp glue: bytes in, requests and limit decisions out.
 *
 * The parser pauses at the end of every request's headers and at the end of
 * every request, so the connection can answer `Expect: 100-continue`, refuse
 * an oversized body before reading it, switch timers, and apply pipelining
 * backpressure between requests. No sockets here: unit tests feed bytes. */
#include "http/http_impl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static struct http_parse *parse_of(llhttp_t *l) { return (struct http_parse *)l->data; }

static int parse_fail(struct http_parse *hp, int status, const char *msg)
{
    hp->error_status = status;
    snprintf(hp->error_msg, sizeof hp->error_msg, "%s", msg);
    return HPE_USER;
}

static int parse_on_message_begin(llhttp_t *l)
{
    struct http_parse *hp = parse_of(l);
    hp->cur = hp->alloc(hp->alloc_ctx);
    if (!hp->cur)
        return parse_fail(hp, 503, "out of memory for a new request");
    hp->phase = HTTP_PHASE_HEAD;
    hp->in_value = false;
    hp->trailer_bytes = hp->ext_bytes = 0;
    hp->in_trailer = hp->trailer_fields = false;
    return 0;
}

/* A chunked body's trailer section (its fields come through the header
 * callbacks after the body began, which drop them): dropped, as RFC 9110 6.5.1 lets a
 * recipient do. Merged into the headers, they passed every limit (40 MiB
 * of them was taken whole) and reached the handlers as headers (a
 * Content-Encoding sent after the body undid it). Its bytes are held to
 * limits.max_header_bytes as they arrive, raw (http_parse_feed), from
 * where its first field begins to its end: counted from the callbacks,
 * the whitespace llhttp skips before a value let 40 MiB of spaces
 * through; counted from the last chunk's line, the few bytes of framing
 * before the fields counted or not as the reads fell (a trailer 2 bytes
 * under the limit was refused at most splits of the upload, taken at
 * one: the re-test). */
/* The last chunk (size 0): its trailer section follows. */
static int parse_on_chunk_header(llhttp_t *l)
{
    struct http_parse *hp = parse_of(l);
    if (l->content_length == 0)
        hp->in_trailer = true;
    return 0;
}

/* Chunk extensions (";name=value" after a chunk's size) carry nothing
 * batchgate uses, and are read and dropped; their bytes are held to
 * limits.max_header_bytes for the whole body, as RFC 9112 7.1.1 asks a
 * server to limit them: unbounded, one request took 1 GiB of them on its
 * last chunk and held its connection for as long as it sent (the
 * re-test). Each extension counts its name, its value and 1 for its ';'
 * (empty ones must count too). */
static int parse_chunk_ext(struct http_parse *hp, size_t n)
{
    if ((hp->ext_bytes += n) <= hp->max_header_bytes)
        return 0;
    char msg[160];
    snprintf(msg, sizeof msg, "the chunked body's chunk extensions exceed "
             "limits.max_header_bytes (%zu)", hp->max_header_bytes);
    return parse_fail(hp, 400, msg);
}

static int parse_on_chunk_ext_name(llhttp_t *l, const char *at, size_t n)
{
    (void)at;
    return parse_chunk_ext(parse_of(l), n);
}

static int parse_on_chunk_ext_value(llhttp_t *l, const char *at, size_t n)
{
    (void)at;
    return parse_chunk_ext(parse_of(l), n);
}

static int parse_on_chunk_ext_name_complete(llhttp_t *l)
{
    return parse_chunk_ext(parse_of(l), 1);
}

/* A trailer field begins at `at` (in the piece being fed): the count
 * starts there. */
static void parse_trailer_field(struct http_parse *hp, const char *at)
{
    if (!hp->in_trailer || hp->trailer_fields)
        return;
    hp->trailer_fields = true;
    hp->trailer_here = true;
    hp->trailer_at = at;
}

static int parse_on_url(llhttp_t *l, const char *at, size_t n)
{
    struct http_parse *hp = parse_of(l);
    if (buf_append(&hp->cur->head, at, n) < 0)
        return parse_fail(hp, 503, "out of memory for the request line");
    hp->cur->url_len += (uint32_t)n;
    return 0;
}

static int parse_on_header_field(llhttp_t *l, const char *at, size_t n)
{
    struct http_parse *hp = parse_of(l);
    struct http_request *r = hp->cur;
    if (hp->phase == HTTP_PHASE_BODY) {
        parse_trailer_field(hp, at);
        return 0;   /* a trailer field: dropped (parse_on_chunk_header) */
    }
    if (r->nhdrs == 0 || hp->in_value) {
        if (r->nhdrs == r->hdrs_cap) {
            int cap = r->hdrs_cap ? r->hdrs_cap * 2 : 16;
            struct http_header *h = realloc(r->hdrs, (size_t)cap * sizeof *h);
            if (!h)
                return parse_fail(hp, 503, "out of memory for headers");
            r->hdrs = h;
            r->hdrs_cap = cap;
        }
        struct http_header *h = &r->hdrs[r->nhdrs++];
        h->name_off = (uint32_t)r->head.len;
        h->name_len = h->val_off = h->val_len = 0;
        hp->in_value = false;
    }
    if (buf_append(&r->head, at, n) < 0)
        return parse_fail(hp, 503, "out of memory for headers");
    r->hdrs[r->nhdrs - 1].name_len += (uint32_t)n;
    return 0;
}

static int parse_on_header_value(llhttp_t *l, const char *at, size_t n)
{
    struct http_parse *hp = parse_of(l);
    struct http_request *r = hp->cur;
    if (hp->phase == HTTP_PHASE_BODY)
        return 0;   /* a trailer field: dropped (parse_on_chunk_header) */
    struct http_header *h = &r->hdrs[r->nhdrs - 1];
    if (!hp->in_value) {
        h->val_off = (uint32_t)r->head.len;
        hp->in_value = true;
    }
    if (buf_append(&r->head, at, n) < 0)
        return parse_fail(hp, 503, "out of memory for headers");
    h->val_len += (uint32_t)n;
    return 0;
}

/* RFC 9110 5.5: the whitespace around a field's value is not part of it.
 * llhttp leaves out the leading whitespace, not the trailing: a number
 * such as "Inference-Header-Content-Length: 110 " was refused. */
static int parse_on_header_value_complete(llhttp_t *l)
{
    struct http_request *r = parse_of(l)->cur;
    if (r->nhdrs == 0 || parse_of(l)->phase == HTTP_PHASE_BODY)
        return 0;
    struct http_header *h = &r->hdrs[r->nhdrs - 1];
    while (h->val_len && (r->head.data[h->val_off + h->val_len - 1] == ' ' ||
                          r->head.data[h->val_off + h->val_len - 1] == '\t'))
        h->val_len--;
    return 0;
}

static int parse_method_bit(uint8_t m)
{
    switch (m) {
    case HTTP_GET: return HTTP_M_GET;
    case HTTP_HEAD: return HTTP_M_HEAD;
    case HTTP_POST: return HTTP_M_POST;
    case HTTP_PUT: return HTTP_M_PUT;
    case HTTP_DELETE: return HTTP_M_DELETE;
    case HTTP_OPTIONS: return HTTP_M_OPTIONS;
    case HTTP_PATCH: return HTTP_M_PATCH;
    default: return HTTP_M_OTHER;
    }
}

/* Where the path starts in a request target of `len` bytes (up to '?'):
 * past "http://authority" in the absolute form, which RFC 9112 3.2.2 has
 * a server accept (what a client sends to a proxy); the authority is not
 * routed on. 0 for the origin form. */
static uint32_t parse_path_off(const char *url, uint32_t len)
{
    uint32_t s = len >= 7 && strncasecmp(url, "http://", 7) == 0     ? 7
                 : len >= 8 && strncasecmp(url, "https://", 8) == 0 ? 8
                                                                     : 0;
    if (!s)
        return 0;
    while (s < len && url[s] != '/')
        s++;
    return s;
}

/* The path is known once the target is: an error in the headers that
 * follow is then worded for the route it was headed to (router_style). */
static int parse_on_url_complete(llhttp_t *l)
{
    struct http_request *r = parse_of(l)->cur;
    const char *q = r->url_len ? memchr(r->head.data, '?', r->url_len) : NULL;
    r->path_len = q ? (uint32_t)(q - r->head.data) : r->url_len;
    r->path_off = parse_path_off(r->head.data, r->path_len);
    http_request_check_path(r);
    if (r->dot_path)
        return parse_fail(parse_of(l), 400, HTTP_DOT_PATH_MSG);
    return 0;
}

/* Transfer-Encoding: llhttp has refused a final coding other than chunked.
 * Only chunked alone is read (RFC 9112 6.1): another coding before it
 * would reach the handler undone, and a proxied call without its label,
 * so 501; and an HTTP/1.0 request's framing by it cannot be trusted by
 * whatever stands before us (request smuggling), so 400, and the
 * connection closes. 0 when none or chunked. */
static int parse_transfer_coding(struct http_parse *hp, struct http_request *r, bool chunked)
{
    for (int i = 0; i < r->nhdrs; i++) {
        const struct http_header *h = &r->hdrs[i];
        if (h->name_len != 17 ||
            strncasecmp(r->head.data + h->name_off, "Transfer-Encoding", 17) != 0)
            continue;
        if (r->http_minor == 0)
            return parse_fail(hp, 400, "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 6.1: "
                                       "its framing cannot be trusted); send Content-Length");
        const char *v = r->head.data + h->val_off;
        size_t n = h->val_len;
        while (n && (*v == ' ' || *v == '\t'))
            v++, n--;
        while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
            n--;
        if (chunked && (n != 7 || strncasecmp(v, "chunked", 7) != 0)) {
            hp->error_status = 501;
            snprintf(hp->error_msg, sizeof hp->error_msg,
                     "Transfer-Encoding \"%.*s\": only chunked is supported",
                     (int)(n > 80 ? 80 : n), v);
            return HPE_USER;
        }
    }
    return 0;
}

static int parse_on_headers_complete(llhttp_t *l)
{
    struct http_parse *hp = parse_of(l);
    struct http_request *r = hp->cur;
    r->llhttp_method = llhttp_get_method(l);
    r->method = parse_method_bit(r->llhttp_method);
    r->http_major = llhttp_get_http_major(l);
    r->http_minor = llhttp_get_http_minor(l);
    r->keep_alive = llhttp_should_keep_alive(l) != 0;
    hp->upgrade = llhttp_get_upgrade(l) != 0;
    hp->phase = HTTP_PHASE_BODY;
    if (r->http_major != 1)
        return parse_fail(hp, 505, "only HTTP/1.0 and HTTP/1.1 are supported");
    /* RFC 9112 3.2: an HTTP/1.1 request carries exactly one Host. */
    int hosts = 0;
    for (int i = 0; i < r->nhdrs; i++) {
        if (r->hdrs[i].name_len == 0)   /* ": v": a field name is a token (RFC 9110 5.1) */
            return parse_fail(hp, 400, "a header line with an empty name");
        if (r->hdrs[i].name_len == 4 && strncasecmp(r->head.data + r->hdrs[i].name_off, "Host", 4) == 0) {
            hosts++;
            /* RFC 9112 3.2: uri-host [ ":" port ], or 400. */
            const char *v = r->head.data + r->hdrs[i].val_off;
            uint32_t vl = r->hdrs[i].val_len;
            for (uint32_t k = 0; k < vl; k++)
                if (!v[k] ||
                    (!isalnum((unsigned char)v[k]) && !strchr("-._~%!$&'()*+,;=:[]", v[k])))
                    return parse_fail(hp, 400, "the Host header is not a host[:port]");
            /* The port: after the last ':' past any "[v6]", digits, <= 65535. */
            const char *close = vl ? memchr(v, ']', vl) : NULL;
            const char *from = close ? close + 1 : v, *colon = NULL;
            for (const char *c = from; c < v + vl; c++)
                if (*c == ':')
                    colon = c;
            if (colon && !close && memchr(v, ':', (size_t)(colon - v)))
                colon = NULL;   /* a bare IPv6 address is refused by the RFC anyway: no port */
            long port = 0;
            for (const char *c = colon ? colon + 1 : v + vl; c < v + vl; c++) {
                if (*c < '0' || *c > '9' || (port = port * 10 + (*c - '0')) > 65535)
                    return parse_fail(hp, 400, "the Host header's port is not a port");
            }
        }
    }
    if (r->http_minor >= 1 && hosts != 1)
        return parse_fail(hp, 400, hosts ? "more than one Host header" : "missing Host header (required by HTTP/1.1)");
    int te = parse_transfer_coding(hp, r, (l->flags & F_CHUNKED) != 0);
    if (te)
        return te;
    size_t vlen;
    const char *expect = http_request_header(r, "Expect", &vlen);
    if (expect) {
        if (vlen == 12 && strncasecmp(expect, "100-continue", 12) == 0) {
            r->expect_continue = r->http_minor >= 1;
        } else {
            return parse_fail(hp, 417, "the Expect header supports only 100-continue");
        }
    }
    /* Refuse an oversized declared body before reading a byte of it. */
    if ((l->flags & F_CONTENT_LENGTH) && l->content_length > hp->max_body_bytes) {
        snprintf(hp->error_msg, sizeof hp->error_msg,
                 "body of %llu bytes exceeds limits.max_body_bytes (%zu)",
                 (unsigned long long)l->content_length, hp->max_body_bytes);
        hp->error_status = 413;
        return HPE_USER;
    }
    /* Pause only when a body follows: a bodyless request completes in the
     * same llhttp_execute call (nothing would resume it otherwise). */
    bool has_body = (l->flags & F_CHUNKED) || ((l->flags & F_CONTENT_LENGTH) && l->content_length > 0);
    r->has_body = has_body;
    r->content_length = (l->flags & F_CONTENT_LENGTH) && !(l->flags & F_CHUNKED)
                            ? (int64_t)l->content_length : -1;
    return has_body ? HPE_PAUSED : 0;
}

static int parse_on_body(llhttp_t *l, const char *at, size_t n)
{
    struct http_parse *hp = parse_of(l);
    struct http_request *r = hp->cur;
    /* Counted apart from body.len: a streaming request's body is handed
     * over (and the buffer emptied) as it arrives. */
    if (r->body_total + n > hp->max_body_bytes) {
        snprintf(hp->error_msg, sizeof hp->error_msg,
                 "body exceeds limits.max_body_bytes (%zu)", hp->max_body_bytes);
        hp->error_status = 413;
        return HPE_USER;
    }
    if (buf_append(&r->body, at, n) < 0)
        return parse_fail(hp, 503, "out of memory for the request body");
    r->body_total += n;
    return 0;
}

static int parse_on_message_complete(llhttp_t *l)
{
    struct http_parse *hp = parse_of(l);
    hp->phase = HTTP_PHASE_IDLE;
    /* Re-evaluated at the end: a body read to EOF changes it (not for requests, but cheap). */
    hp->cur->keep_alive = hp->cur->keep_alive && llhttp_should_keep_alive(l) != 0;
    return HPE_PAUSED;
}

/* llhttp keeps a pointer to the settings, so they must outlive every parser;
 * a constant table built at compile time is shared by all IO threads without
 * a race (a lazily built one was a data race TSan caught). */
static const llhttp_settings_t parse_settings = {
    .on_message_begin = parse_on_message_begin,
    .on_url = parse_on_url,
    .on_url_complete = parse_on_url_complete,
    .on_header_field = parse_on_header_field,
    .on_header_value = parse_on_header_value,
    .on_header_value_complete = parse_on_header_value_complete,
    .on_headers_complete = parse_on_headers_complete,
    .on_body = parse_on_body,
    .on_chunk_header = parse_on_chunk_header,
    .on_chunk_extension_name = parse_on_chunk_ext_name,
    .on_chunk_extension_value = parse_on_chunk_ext_value,
    .on_chunk_extension_name_complete = parse_on_chunk_ext_name_complete,
    .on_message_complete = parse_on_message_complete,
};

void http_parse_init(struct http_parse *hp, size_t max_header_bytes, size_t max_body_bytes,
                     struct http_request *(*alloc)(void *), void *alloc_ctx)
{
    memset(hp, 0, sizeof *hp);
    llhttp_init(&hp->llh, HTTP_REQUEST, &parse_settings);
    hp->llh.data = hp;
    hp->max_header_bytes = max_header_bytes;
    hp->max_body_bytes = max_body_bytes;
    hp->alloc = alloc;
    hp->alloc_ctx = alloc_ctx;
}

bool http_parse_mid_request(const struct http_parse *hp)
{
    return hp->phase != HTTP_PHASE_IDLE;
}

/* Whether the line that `at` (in data[0..len)) is in starts as a request
 * line would: a token, then a space. */
static bool parse_looks_like_method(const char *data, size_t len, const char *at)
{
    const char *s = at;
    while (s > data && s[-1] != '\n')
        s--;
    size_t n = len - (size_t)(s - data), i = 0;
    while (i < n && i < 32 && s[i] &&
           (isalnum((unsigned char)s[i]) || strchr("!#$%&'*+-.^_`|~", s[i])))
        i++;
    return i > 0 && i < n && s[i] == ' ';
}

static enum http_parse_event parse_error(struct http_parse *hp, int status, const char *msg)
{
    hp->error_status = status;
    snprintf(hp->error_msg, sizeof hp->error_msg, "%s", msg);
    return HTTP_PARSE_ERROR;
}

enum http_parse_event http_parse_feed(struct http_parse *hp, const char *data, size_t len,
                                      size_t *consumed)
{
    *consumed = 0;
    if (len == 0)
        return HTTP_PARSE_MORE;
    enum http_parse_phase start = hp->phase;
    hp->trailer_here = false;
    hp->error_status = 0;
    llhttp_errno_t e = llhttp_execute(&hp->llh, data, len);
    size_t used = len;
    if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
        used = (size_t)(llhttp_get_error_pos(&hp->llh) - data);
        if (e == HPE_PAUSED_UPGRADE) {
            /* We speak no other protocol: answer this request, then close. */
            hp->upgrade = true;
            llhttp_resume_after_upgrade(&hp->llh);
        } else {
            llhttp_resume(&hp->llh);
        }
    } else if (e != HPE_OK) {
        *consumed = (size_t)(llhttp_get_error_pos(&hp->llh) - data);
        if (hp->error_status)   /* one of our callbacks refused (413, 417, 505, ...) */
            return HTTP_PARSE_ERROR;
        if (hp->phase == HTTP_PHASE_HEAD && hp->head_bytes + *consumed > hp->max_header_bytes)
            goto too_large;
        /* RFC 9110 15.6.2: a method the server does not know is 501 (they
         * are case-sensitive: "get" is one of them); a line that is no
         * method and target at all stays 400. */
        if (e == HPE_INVALID_METHOD &&
            parse_looks_like_method(data, len, llhttp_get_error_pos(&hp->llh)))
            return parse_error(hp, 501, "unknown method: " HTTP_SERVED_METHODS " are served "
                                        "(methods are case-sensitive)");
        if (e == HPE_PAUSED_H2_UPGRADE)
            return parse_error(hp, 505, "an HTTP/2 connection preface: this port speaks "
                                        "HTTP/1.1; gRPC is on grpc_listen");
        char msg[160];
        snprintf(msg, sizeof msg, "malformed HTTP request: %s", llhttp_get_error_reason(&hp->llh));
        return parse_error(hp, 400, msg);
    }
    *consumed = used;
    /* The trailer section, raw: the piece's bytes from where its first
     * field began (parse_trailer_field), or all of them past a piece it
     * began in. Read after the parse: a request that began in this piece
     * reset the former one's state. */
    size_t from = hp->trailer_here ? (size_t)(hp->trailer_at - data) : 0;
    if (hp->trailer_fields && used > from &&
        (hp->trailer_bytes += used - from) > hp->max_header_bytes) {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "the chunked body's trailer section exceeds limits.max_header_bytes (%zu)",
                 hp->max_header_bytes);
        return parse_error(hp, 431, msg);
    }
    if (start != HTTP_PHASE_BODY) {
        /* Everything before the end of the headers counts: request line,
         * headers, their CRLFs and any blank lines before the request. A
         * bodyless request ends where its headers end, so `used` is exact
         * for it too. */
        if (hp->head_bytes + used > hp->max_header_bytes)
            goto too_large;
        hp->head_bytes += used;
    }
    enum http_parse_event ev = HTTP_PARSE_MORE;
    if (e == HPE_PAUSED_UPGRADE)
        ev = HTTP_PARSE_REQUEST;
    else if (e == HPE_PAUSED)
        ev = hp->phase == HTTP_PHASE_BODY ? HTTP_PARSE_HEADERS : HTTP_PARSE_REQUEST;
    if (ev != HTTP_PARSE_MORE)
        hp->head_bytes = 0;   /* the head is over: this request's or the next one's */
    return ev;

too_large:;
    char msg[160];
    snprintf(msg, sizeof msg, "request line and headers exceed limits.max_header_bytes (%zu)",
             hp->max_header_bytes);
    return parse_error(hp, 431, msg);
}

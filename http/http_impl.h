/* http_internal.h - the HTTP request object and parser shared by http_parse.c,
 * http_request.c and http_conn.c. Nothing outside http/ includes it. */
#ifndef BG_HTTP_INTERNAL_H
#define BG_HTTP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>

#include "common/buf.h"
#include "http/http.h"

struct http_conn;

struct http_header {
    uint32_t name_off, name_len;   /* offsets into http_request.head */
    uint32_t val_off, val_len;
};

/* One request of a connection's pipeline. Owned by its connection while in
 * use; recycled through its IO thread's spares (http_conn.c: conn_recycle). */
struct http_request {
    struct http_request *next;     /* the connection's queue, in arrival order */
    struct http_conn *conn;
    int method;                    /* enum http_method bit */
    uint8_t llhttp_method;
    uint8_t http_major, http_minor;
    bool keep_alive;               /* the client allows reuse after this one */
    bool expect_continue;          /* "Expect: 100-continue" not yet answered */
    bool responded;                /* http_respond was called */
    bool close_after;              /* the response closes the connection */
    bool aborted;                  /* the connection went away first */
    bool accepted;                 /* fully received and dispatched (counts as in flight) */
    int status;                    /* of the response, for logs and metrics */
    struct buf head;               /* URL, then header names and values, back to back */
    uint32_t url_len;
    uint32_t path_len;             /* URL up to '?' */
    struct http_header *hdrs;
    int nhdrs, hdrs_cap;
    struct buf body;
    struct buf resp;               /* a response produced before its turn to be written */
    int64_t t_received_ns;         /* last byte of the request read */
    int64_t t_arrival_ns;          /* its first byte reached this host (kernel timestamp) */
    void (*abort_fn)(struct http_request *, void *);
    void *abort_arg;
    /* Streaming (http.h): dispatched at its headers, body handed over as read. */
    bool streaming;
    bool body_done;                /* the last body byte was read */
    bool body_paused;              /* the handler stopped the body */
    bool resp_begun;               /* http_respond_begin was called */
    bool resp_chunked;             /* the answer is chunk-framed */
    bool resp_no_body;             /* HEAD, 204, 304: body bytes are dropped */
    bool has_body;                 /* the request declares one */
    int64_t content_length;        /* declared, -1 none or chunked */
    uint64_t body_total;           /* body bytes read so far (max_body_bytes) */
    http_body_fn body_fn;
    void *body_arg;
    void (*drain_fn)(struct http_request *, void *);
    void *drain_arg;
};

struct http_request *http_request_new(struct http_conn *conn);
void http_request_reset(struct http_request *req);   /* keeps the storage for reuse */
void http_request_free(struct http_request *req);

/* ---- parser: llhttp plus the limits of SPEC.md ---- */

enum http_parse_event {
    HTTP_PARSE_MORE,       /* all input consumed, nothing to report */
    HTTP_PARSE_HEADERS,    /* the current request's headers are complete */
    HTTP_PARSE_REQUEST,    /* the current request is complete */
    HTTP_PARSE_ERROR,      /* answer error_status with error_msg, then close */
};

enum http_parse_phase { HTTP_PHASE_IDLE, HTTP_PHASE_HEAD, HTTP_PHASE_BODY };

struct http_parse {
    llhttp_t llh;
    size_t max_header_bytes;
    size_t max_body_bytes;
    enum http_parse_phase phase;
    size_t head_bytes;             /* bytes of the current request's head so far */
    struct http_request *cur;      /* being parsed; set by the owner on HTTP_PARSE_MORE/IDLE */
    struct http_request *(*alloc)(void *ctx);   /* called at the first byte of a request */
    void *alloc_ctx;
    bool in_value;                 /* last header callback was a value */
    bool upgrade;                  /* the request asked for a protocol switch */
    int error_status;
    char error_msg[160];
};

void http_parse_init(struct http_parse *hp, size_t max_header_bytes, size_t max_body_bytes,
                     struct http_request *(*alloc)(void *), void *alloc_ctx);
/* Parses from data until an event; *consumed bytes are done with (the rest
 * must be passed again). After HTTP_PARSE_REQUEST, hp->cur is the finished
 * request and the parser is ready for the next one. */
enum http_parse_event http_parse_feed(struct http_parse *hp, const char *data, size_t len,
                                      size_t *consumed);
/* The peer closed its side: is a request left incomplete? */
bool http_parse_mid_request(const struct http_parse *hp);

#endif

/* inner.c - requests made inside the process on another's behalf (http.h
 * "inner requests"). The gRPC front end turns each call into the HTTP
 * request it means and routes it here, so one handler, one guard and one
 * set of counters serve both protocols. An inner request is an ordinary
 * request of the request core whose protocol, instead of a socket, hands
 * the answer to a function. */
#include "http/http_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct inner {
    struct mailbox_msg msg;           /* the deferred free */
    struct http_request *r;
    struct io_thread *t;              /* outer's */
    char peer[64];                    /* outer's */
    http_inner_done_fn done;
    void *arg;
    void (*expected)(void *arg, size_t bytes);   /* http_inner_on_expected */
    void *expected_arg;
    bool dispatching;                 /* inside http_inner_dispatch */
    bool answered;                    /* done was called */
    int status;                       /* a streamed answer's, until finished */
    char *stream_headers;             /* a streamed answer's head */
};

static struct inner *inner_of(const struct http_request *r) { return r->pdata; }

static void inner_free(struct http_request *r)
{
    struct inner *in = inner_of(r);
    free(in->stream_headers);
    free(in);
    http_request_free(r);
}

static void inner_free_msg(struct mailbox_msg *msg)
{
    inner_free(((struct inner *)msg)->r);
}

/* After done: a handler may still hold the request for the rest of the
 * function that answered it, so the free waits for the thread's mailbox
 * (which also runs at the thread's exit), or for http_inner_dispatch's
 * return when the answer came from inside it. */
static void inner_answered(struct http_request *r)
{
    struct inner *in = inner_of(r);
    in->answered = true;
    if (in->dispatching)
        return;
    in->msg.fn = inner_free_msg;
    mailbox_post(in->t->mailbox, &in->msg);
}

static void inner_respond(struct http_request *r, int status, const char *content_type,
                          const void *body, size_t len, const char *extra_headers)
{
    struct inner *in = inner_of(r);
    r->responded = true;
    r->status = status;
    in->done(in->arg, status, content_type, body, len, extra_headers);
    inner_answered(r);
}

static int inner_respond_begin(struct http_request *r, int status, int64_t content_length,
                               int no_body, const char *headers, size_t headers_len)
{
    (void)content_length;
    (void)no_body;
    struct inner *in = inner_of(r);
    in->status = status;
    in->stream_headers = strndup(headers ? headers : "", headers ? headers_len : 0);
    return in->stream_headers ? 0 : -1;
}

static int inner_respond_write(struct http_request *r, const void *data, size_t len)
{
    return buf_append(&r->resp, data, len) < 0 ? -1 : 0;
}

static void inner_respond_finish(struct http_request *r, int broken)
{
    struct inner *in = inner_of(r);
    int status = in->status ? in->status : r->status;   /* begun after an abort: not here */
    r->responded = true;
    r->status = broken ? 502 : status;
    if (broken)
        in->done(in->arg, 502, "application/json", "{\"error\":\"the answer broke off\"}", 33,
                 NULL);
    else
        in->done(in->arg, status, NULL, r->resp.data, r->resp.len, in->stream_headers);
    inner_answered(r);
}

static void inner_answer_expected(struct http_request *r, size_t bytes)
{
    struct inner *in = inner_of(r);
    if (in->expected && !in->answered)
        in->expected(in->expected_arg, bytes);
}

static size_t inner_respond_buffered(const struct http_request *r)
{
    (void)r;
    return 0;
}

static void inner_body_paused(struct http_request *r) { (void)r; }

static void inner_peer(const struct http_request *r, char *out, size_t cap)
{
    snprintf(out, cap, "%s", inner_of(r)->peer);
}

static struct io_thread *inner_thread(const struct http_request *r) { return inner_of(r)->t; }

static const struct http_proto inner_proto = {
    .respond = inner_respond,
    .respond_begin = inner_respond_begin,
    .respond_write = inner_respond_write,
    .respond_finish = inner_respond_finish,
    .respond_buffered = inner_respond_buffered,
    .conn_buffered = inner_respond_buffered,
    .answer_expected = inner_answer_expected,
    .body_paused = inner_body_paused,
    .peer = inner_peer,
    .thread = inner_thread,
};

struct http_request *http_inner_new(struct http_request *outer, int method, const char *path,
                                    size_t path_len)
{
    struct http_request *r = http_request_new(NULL, &inner_proto);
    struct inner *in = calloc(1, sizeof *in);
    if (!r || !in) {
        free(in);
        http_request_free(r);
        return NULL;
    }
    r->pdata = in;
    in->r = r;
    in->t = outer->proto->thread(outer);
    outer->proto->peer(outer, in->peer, sizeof in->peer);
    r->http_major = 1;
    r->http_minor = 1;
    r->keep_alive = true;
    r->t_arrival_ns = outer->t_arrival_ns;
    r->t_received_ns = outer->t_received_ns;
    if (http_request_set_target(r, method, path, path_len) < 0) {
        inner_free(r);
        return NULL;
    }
    return r;
}

void http_inner_set_decoded(struct http_request *r, const char *kind, void *obj,
                            void (*free_fn)(void *))
{
    if (r->decoded_free)
        r->decoded_free(r->decoded);
    r->decoded_kind = kind;
    r->decoded = obj;
    r->decoded_free = free_fn;
}

void http_inner_arrived(struct http_request *r, int64_t at_ns)
{
    r->t_arrival_ns = r->t_received_ns = at_ns;
}

int http_inner_add_header(struct http_request *r, const char *name, size_t name_len,
                          const char *value, size_t value_len)
{
    return http_request_add_header(r, name, name_len, value, value_len);
}

int http_inner_set_body(struct http_request *r, const void *body, size_t len)
{
    buf_reset(&r->body);
    if (len && buf_append(&r->body, body, len) < 0)
        return -1;
    r->has_body = len > 0;
    r->content_length = (int64_t)len;
    r->body_total = len;
    r->body_done = true;
    return 0;
}

void http_inner_on_expected(struct http_request *r, void (*fn)(void *arg, size_t bytes),
                            void *arg)
{
    struct inner *in = inner_of(r);
    in->expected = fn;
    in->expected_arg = arg;
}

void http_inner_dispatch(struct http_request *r, const struct router *router,
                         http_inner_done_fn done, void *arg)
{
    struct inner *in = inner_of(r);
    in->done = done;
    in->arg = arg;
    in->dispatching = true;
    r->accepted = true;
    router_dispatch(router, r);
    in->dispatching = false;
    if (in->answered)
        inner_free(r);
}

void http_inner_discard(struct http_request *r)
{
    if (r)
        inner_free(r);
}

void http_inner_abort(struct http_request *r)
{
    if (r->responded || r->aborted)
        return;
    r->aborted = true;
    if (r->abort_fn)
        r->abort_fn(r, r->abort_arg);
}

/* h2.c - one HTTP/2 client connection: cleartext with prior knowledge
 * (RFC 9113 3.3), which is how gRPC clients speak without TLS.
 *
 * nghttp2 does the framing, HPACK, flow control and the protocol's own
 * checks (pseudo-headers, forbidden headers, content-length against DATA).
 * This file joins it to the IO thread: reads into the thread's buffer and
 * nghttp2_session_mem_recv, writes from nghttp2_session_mem_send through
 * our own output buffer (so a slow reader stops our reading, as on
 * HTTP/1.1), one timer, drain and forced close. Each stream is a request of
 * the request core: it streams (dispatched through the HTTP/2 router at the
 * end of its headers, its body handed over as DATA arrives) and is answered
 * with headers, a body and trailers.
 *
 * Limits, beyond those of HTTP/1.1 that hold here too (limits.*):
 * SETTINGS_MAX_CONCURRENT_STREAMS, and streams a client reset that are
 * still being answered count against it too (a reset does not stop the
 * work at once: CVE-2023-44487's rapid reset makes a server work for
 * streams the client already dropped); RST_STREAM frames by a token bucket
 * (h2_rst_burst, refilled at grpc.max_resets_per_s; nghttp2's, looser,
 * behind it); SETTINGS, PING and PRIORITY frames per second;
 * CONTINUATION frames per header block (nghttp2's, 8); the header list
 * against limits.max_header_bytes (431), each stream's body against
 * limits.max_body_bytes (the handler gets 413). A flood is answered by
 * GOAWAY(ENHANCE_YOUR_CALM) and a close. */
#include "http/http_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "common/clock.h"
#include "common/evwatch.h"
#include "common/log.h"

/* Stop asking nghttp2 for output (and stop reading) above this much unsent. */
/* While draining, how often streams in the middle of a message are looked
 * at again: once between messages they end (h2_on_timer). */
#define H2_DRAIN_LOOK_NS (10 * 1000000LL)
#define H2_OUT_HIGH_WATER (4u << 20)
#define H2_OUT_KEEP (16u << 10)
/* RFC 9113 6.5.2: each header's size counts 32 bytes of overhead. */
#define H2_HEADER_OVERHEAD 32

struct h2_conn;

struct h2_stream {
    struct list link;                 /* c->streams */
    struct h2_conn *c;
    struct http_request *req;
    int32_t id;
    bool open;                        /* nghttp2 still has it */
    bool committed;                   /* the target is in req */
    bool body_end;                    /* END_STREAM seen or the body failed */
    bool too_big;                     /* the header list passed limits.max_header_bytes */
    int busy;                         /* our callbacks on the stack: defer the free */
    size_t hdr_bytes;
    int64_t t_progress;               /* its header block began, or its body last moved */
    size_t resp_off;                  /* of req->resp handed to nghttp2 */
    size_t held;                      /* DATA bytes not given back to its window (h2_consume) */
    char method[16];
    struct buf path, authority;       /* pseudo-headers, until the target is set */
    bool resp_done;                   /* the answer's body is complete in req->resp */
};

struct h2_conn {
    struct io_thread *t;
    struct list link;                 /* t->h2conns */
    int fd;                           /* -1 once closed */
    nghttp2_session *ng;
    struct event *ev_read, *ev_write, *ev_timer;
    struct buf out;
    struct list streams;
    int nstreams;                     /* in c->streams: open or still being answered */
    bool reading, writing;
    bool in_recv;                     /* in mem_recv or h2_on_timer's scan: answers wait */
    bool goaway;                      /* a GOAWAY was sent: close once idle */
    bool lost;                        /* an event could not be added: close from the timer */
    int holds;
    int64_t t_last_active, t_last_rx;
    int64_t t_last_write;             /* the last send that moved bytes, or when out emptied */
    /* The last DATA frame of an answer nghttp2 framed (or when nothing
     * waited): a client holding its windows shut while it sends PINGs
     * keeps bytes moving (their ACKs) and no answer. */
    int64_t t_last_data;
    int64_t t_timer_due;              /* when ev_timer fires */
    int64_t ctl_window_start;
    int ctl_frames;                   /* SETTINGS, PING, PRIORITY in the current second */
    double rst_tokens;                /* RST_STREAM frames the client may still send */
    int64_t rst_refill_ns;
    struct http_conn_answers answers; /* the gRPC layer's (http_request_conn_answers) */
    char peer[64];
};

static const struct http_proto h2_proto;
static void h2_flush(struct h2_conn *c);
static void h2_arm_timer(struct h2_conn *c, int ms);
static void h2_close_socket(struct h2_conn *c);
static void h2_maybe_free(struct h2_conn *c);

static struct h2_conn *h2_from_link(struct list *q) { return list_data(q, struct h2_conn, link); }
static struct h2_stream *h2_stream_from_link(struct list *q)
{
    return list_data(q, struct h2_stream, link);
}

static void h2_hold(struct h2_conn *c) { c->holds++; }
static void h2_release(struct h2_conn *c)
{
    if (--c->holds == 0)
        h2_maybe_free(c);
}

/* ---- streams ---- */

static struct h2_stream *h2_stream_new(struct h2_conn *c, int32_t id)
{
    struct h2_stream *st = calloc(1, sizeof *st);
    struct http_request *r = st ? http_request_new(NULL, NULL) : NULL;
    if (!r) {
        free(st);
        return NULL;
    }
    r->proto = &h2_proto;
    r->pdata = st;
    r->streaming = true;
    r->http_major = 2;
    r->keep_alive = true;
    r->content_length = -1;
    r->t_arrival_ns = c->t_last_rx;
    st->t_progress = c->t_last_rx;
    st->c = c;
    st->req = r;
    st->id = id;
    st->open = true;
    list_insert_tail(&c->streams, &st->link);
    c->nstreams++;
    /* Its header block is due within header_timeout_ms (h2_on_timer). */
    int ms = c->t->limits->header_timeout_ms;
    if (c->t_timer_due > c->t_last_rx + (int64_t)ms * 1000000)
        h2_arm_timer(c, ms + 1);
    return st;
}

/* Freed once nghttp2 is done with it and its request was answered. */
static void h2_stream_maybe_free(struct h2_stream *st)
{
    if (st->open || st->busy || !st->req->responded)
        return;
    struct h2_conn *c = st->c;
    list_remove(&st->link);
    c->nstreams--;
    buf_free(&st->path);
    buf_free(&st->authority);
    http_request_free(st->req);
    free(st);
    if (c->fd < 0)
        h2_maybe_free(c);
}

/* The body is over: the handler is told (once). */
static void h2_body_end(struct h2_stream *st, int status, const char *msg)
{
    struct http_request *r = st->req;
    if (st->body_end)
        return;
    st->body_end = true;
    r->body_done = status == 0;
    if (r->body_fn && !r->responded)   /* answered: the handler may be gone */
        r->body_fn(r, r->body_arg, status ? NULL : "", 0, 1, status, msg);
}

/* The client dropped the stream, or the connection went: the handler stops early. */
static void h2_stream_gone(struct h2_stream *st)
{
    struct http_request *r = st->req;
    st->open = false;
    if (r->responded)
        return;
    if (!r->accepted) {   /* its header block never ended: nobody will answer it */
        r->responded = true;
        return;
    }
    r->aborted = true;
    st->busy++;
    if (!st->body_end && r->body_fn)
        h2_body_end(st, 499, "the client reset the stream before the end of its body");
    if (!r->responded && r->abort_fn)
        r->abort_fn(r, r->abort_arg);
    st->busy--;
}

/* ---- answers ---- */

/* "Name: value\r\n" lines as nghttp2 name-value pairs (names lowercased
 * in a copy): the count, or -1 when out of memory. HTTP/1.1's connection
 * headers have no place in HTTP/2 (RFC 9113 8.2.2) and are left out. */
static int h2_nv_from_lines(const char *lines, char **scratch, nghttp2_nv *nv, int cap)
{
    *scratch = NULL;
    if (!lines || !*lines)
        return 0;
    char *s = strdup(lines);
    if (!s)
        return -1;
    *scratch = s;
    int n = 0;
    for (char *p = s; *p && n < cap;) {
        char *eol = strstr(p, "\r\n");
        char *end = eol ? eol : p + strlen(p);
        char *colon = memchr(p, ':', (size_t)(end - p));
        if (colon && colon > p) {
            for (char *q = p; q < colon; q++)
                *q = (char)(*q >= 'A' && *q <= 'Z' ? *q + 32 : *q);
            size_t nl = (size_t)(colon - p);
            char *v = colon + 1;
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            static const char *const hop[] = {"connection", "keep-alive", "proxy-connection",
                                              "transfer-encoding", "upgrade"};
            bool skip = false;
            for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
                skip |= strlen(hop[i]) == nl && memcmp(hop[i], p, nl) == 0;
            if (!skip)
                nv[n++] = (nghttp2_nv){(uint8_t *)p, (uint8_t *)v, nl, (size_t)(end - v),
                                       NGHTTP2_NV_FLAG_NONE};
        }
        p = eol ? eol + 2 : end;
    }
    return n;
}

/* The answer's body to nghttp2, from r->resp past resp_off. A streamed
 * answer with nothing more yet is deferred (h2_respond_write resumes it);
 * at the end, the trailers, if any, follow the last DATA frame. */
static ssize_t h2_read_body(nghttp2_session *ng, int32_t id, uint8_t *out, size_t len,
                            uint32_t *flags, nghttp2_data_source *src, void *user)
{
    (void)user;
    struct h2_stream *st = src->ptr;
    struct http_request *r = st->req;
    size_t left = r->resp.len - st->resp_off;
    size_t n = left < len ? left : len;
    if (n)   /* an answer of trailers only has no data at all */
        memcpy(out, r->resp.data + st->resp_off, n);
    st->resp_off += n;
    if (st->resp_off < r->resp.len)
        return (ssize_t)n;
    if (!st->resp_done) {   /* streaming: all sent so far; the buffer starts over */
        buf_reset(&r->resp);
        st->resp_off = 0;
        return n ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
    }
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (r->trailers.len) {
        nghttp2_nv nv[16];
        char *scratch;
        int k = h2_nv_from_lines(r->trailers.data, &scratch, nv, 16);
        if (k > 0 && nghttp2_submit_trailer(ng, id, nv, (size_t)k) == 0)
            *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        free(scratch);
    }
    return (ssize_t)n;
}

static void h2_count_answer(struct h2_conn *c, struct http_request *r, int status)
{
    struct io_thread *t = c->t;
    r->responded = true;
    r->status = status;
    if (r->accepted) {
        atomic_store_explicit(&t->inflight,
                              atomic_load_explicit(&t->inflight, memory_order_relaxed) - 1,
                              memory_order_relaxed);
        if (status >= 100 && status < 100 + SERVER_STATUSES)
            atomic_store_explicit(&t->responses[status - 100],
                                  atomic_load_explicit(&t->responses[status - 100],
                                                       memory_order_relaxed) + 1,
                                  memory_order_relaxed);
    }
}

/* The answer's HEADERS, and its body's provider when `data`; 0 or -1. */
static int h2_submit(struct h2_stream *st, int status, const char *content_type,
                     const char *headers, bool data)
{
    struct h2_conn *c = st->c;
    unsigned sc = (unsigned)(status < 100 || status > 999 ? 500 : status);
    char code[4] = {(char)('0' + sc / 100), (char)('0' + sc / 10 % 10), (char)('0' + sc % 10),
                    '\0'};
    nghttp2_nv nv[40];
    int n = 0;
    nv[n++] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)code, 7, 3, NGHTTP2_NV_FLAG_NONE};
    if (content_type)
        nv[n++] = (nghttp2_nv){(uint8_t *)"content-type", (uint8_t *)content_type, 12,
                               strlen(content_type), NGHTTP2_NV_FLAG_NONE};
    char *scratch;
    int k = h2_nv_from_lines(headers, &scratch, nv + n, 40 - n);
    n += k > 0 ? k : 0;
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = h2_read_body};
    st->resp_off = 0;
    int rc = nghttp2_submit_response(c->ng, st->id, nv, (size_t)n, data ? &prd : NULL);
    free(scratch);
    if (rc != 0) {
        nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
        return -1;
    }
    return 0;
}

/* Output for the socket, from a handler's call: written from the loop, never
 * inside the caller, as on HTTP/1.1 (conn_want_write). A send that fails
 * closes the connection and ends every stream's handler, which the caller,
 * still using its request, could not survive (the gRPC front end's
 * streamed answers did not, 67a2e0d). One activation costs no system call;
 * answers given in the same loop pass go out in one write. While nghttp2
 * reads (in_recv) the flush after mem_recv sends them. */
static void h2_flush_soon(struct h2_conn *c)
{
    if (!c->in_recv && !c->writing && c->fd >= 0)
        event_active(c->ev_write, EV_WRITE, 0);
}

/* An answer waits to be read: the timer looks at it within
 * idle_timeout_ms (a slow reader, h2_on_timer). */
static void h2_watch_answer(struct h2_conn *c)
{
    int ms = c->t->limits->idle_timeout_ms;
    if (c->t_timer_due > now_ns() + (int64_t)ms * 1000000)
        h2_arm_timer(c, ms + 1);
}

static void h2_respond(struct http_request *r, int status, const char *content_type,
                       const void *body, size_t len, const char *extra_headers)
{
    struct h2_stream *st = r->pdata;
    struct h2_conn *c = st->c;
    h2_count_answer(c, r, status);
    h2_watch_answer(c);
    if (!st->open || c->fd < 0) {   /* nobody to send it to */
        h2_stream_maybe_free(st);
        return;
    }
    buf_reset(&r->resp);
    st->resp_done = true;
    if (r->method == HTTP_M_HEAD)
        len = 0;   /* RFC 9110 9.3.2: no content; a client's framing breaks on any */
    if (len && buf_append(&r->resp, body, len) < 0)
        nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    else
        h2_submit(st, status, content_type, extra_headers,
                  r->resp.len > 0 || r->trailers.len > 0);
    h2_flush_soon(c);
}

/* A streamed answer (gRPC's streaming calls): its HEADERS go at once, each
 * piece as it is written, the trailers at the end. */
static int h2_respond_begin(struct http_request *r, int status, int64_t content_length,
                            int no_body, const char *headers, size_t headers_len)
{
    (void)content_length;
    (void)no_body;
    struct h2_stream *st = r->pdata;
    struct h2_conn *c = st->c;
    if (!st->open || c->fd < 0)
        return -1;
    char *h = strndup(headers ? headers : "", headers ? headers_len : 0);
    if (!h)
        return -1;
    h2_watch_answer(c);
    buf_reset(&r->resp);
    int rc = h2_submit(st, status, NULL, h, true);
    free(h);
    h2_flush_soon(c);
    return rc;
}

static int h2_respond_write(struct http_request *r, const void *data, size_t len)
{
    struct h2_stream *st = r->pdata;
    struct h2_conn *c = st->c;
    if (!st->open || c->fd < 0)
        return -1;
    if (r->method == HTTP_M_HEAD)
        return 0;   /* no content (h2_respond) */
    if (buf_append(&r->resp, data, len) < 0)
        return -1;
    nghttp2_session_resume_data(c->ng, st->id);
    h2_flush_soon(c);
    return 0;
}

static void h2_respond_finish(struct http_request *r, int broken)
{
    struct h2_stream *st = r->pdata;
    struct h2_conn *c = st->c;
    h2_count_answer(c, r, r->status);
    if (!st->open || c->fd < 0) {
        h2_stream_maybe_free(st);
        return;
    }
    if (broken) {
        nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    } else {
        st->resp_done = true;
        nghttp2_session_resume_data(c->ng, st->id);
    }
    h2_flush_soon(c);
}

static size_t h2_respond_buffered(const struct http_request *r)
{
    const struct h2_stream *st = r->pdata;
    return r->resp.len - st->resp_off;
}

static size_t h2_conn_buffered(const struct http_request *r)
{
    const struct h2_conn *c = ((const struct h2_stream *)r->pdata)->c;
    size_t n = buf_unread(&c->out);
    const struct list *q;
    list_foreach(q, &c->streams) {
        const struct h2_stream *st = h2_stream_from_link((struct list *)q);
        if (st->open && st->req && st->resp_off < st->req->resp.len)
            n += st->req->resp.len - st->resp_off;
    }
    return n;
}

static struct http_conn_answers *h2_conn_answers(struct http_request *r)
{
    return &((struct h2_stream *)r->pdata)->c->answers;
}

/* The handler stopped or resumed the body: resuming gives the stream's
 * window back what arrived while it was stopped (h2_consume). */
static void h2_body_paused(struct http_request *r)
{
    struct h2_stream *st = r->pdata;
    struct h2_conn *c = st->c;
    if (r->body_paused || !st->held)
        return;
    if (st->open && c->fd >= 0)
        nghttp2_session_consume_stream(c->ng, st->id, st->held);
    st->held = 0;
    st->t_progress = now_ns();   /* the stall clock starts over */
    h2_flush_soon(c);
}

/* The client's address, looked up the first time it is wanted. */
static const char *h2_conn_peer(struct h2_conn *c)
{
    if (!c->peer[0] && c->fd >= 0) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getpeername(c->fd, (struct sockaddr *)&ss, &sl) == 0) {
            if (ss.ss_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, c->peer,
                          sizeof c->peer);
            else if (ss.ss_family == AF_INET6)
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, c->peer,
                          sizeof c->peer);
        }
    }
    return c->peer;
}

static void h2_peer(const struct http_request *r, char *out, size_t cap)
{
    snprintf(out, cap, "%s", h2_conn_peer(((struct h2_stream *)r->pdata)->c));
}

static struct io_thread *h2_thread(const struct http_request *r)
{
    return ((struct h2_stream *)r->pdata)->c->t;
}

static const struct http_proto h2_proto = {
    .respond = h2_respond,
    .respond_begin = h2_respond_begin,
    .respond_write = h2_respond_write,
    .respond_finish = h2_respond_finish,
    .respond_buffered = h2_respond_buffered,
    .conn_buffered = h2_conn_buffered,
    .conn_answers = h2_conn_answers,
    .body_paused = h2_body_paused,
    .peer = h2_peer,
    .thread = h2_thread,
    .compresses = true,
};

/* ---- nghttp2's callbacks (inside mem_recv) ---- */

static struct h2_stream *h2_stream_of(struct h2_conn *c, int32_t id)
{
    return nghttp2_session_get_stream_user_data(c->ng, id);
}

/* The RST_STREAM bucket's size: twice the rate, plus every stream a client
 * may have open. A client cancelling all its calls at once (250 futures of
 * one channel) lost the connection, its other calls with it; the streams
 * it resets are bounded by max_concurrent_streams anyway. */
static double h2_rst_burst(const struct http_h2_config *hc)
{
    return 2.0 * hc->max_resets_per_s + hc->max_concurrent_streams;
}

/* A flood: GOAWAY(ENHANCE_YOUR_CALM), and the connection closes once it is sent. */
static int h2_calm(struct h2_conn *c, const char *what)
{
    const char *peer = h2_conn_peer(c);
    unsigned long long held = 0;
    if (!c->t->flood_log || log_gate_pass(c->t->flood_log, now_ns(), &held)) {
        char more[80] = "";
        if (held)
            snprintf(more, sizeof more, "; %llu more connection%s closed so since the last line",
                     held, held == 1 ? "" : "s");
        log_warn("http2: %s from %s: closing the connection (ENHANCE_YOUR_CALM%s)", what,
                 peer[0] ? peer : "a client", more);
    }
    nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
    return 0;
}

static int h2_on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    struct h2_conn *c = user;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    /* nghttp2 holds the open streams to max_concurrent_streams. Those the
     * client reset that are still being answered count besides, up to as
     * many again: a rapid reset makes the server work for at most twice
     * the bound, and a client cancelling calls under load (a deadline, a
     * cancelled future) does not have its other calls refused while the
     * cancelled ones finish, as it did when they shared the one bound. */
    if (c->goaway || c->nstreams >= 2 * c->t->h2->max_concurrent_streams) {
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                  NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    struct h2_stream *st = h2_stream_new(c, f->hd.stream_id);
    if (!st)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;   /* reset: INTERNAL_ERROR */
    nghttp2_session_set_stream_user_data(ng, f->hd.stream_id, st);
    return 0;
}

static int h2_on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name,
                        size_t nlen, const uint8_t *value, size_t vlen, uint8_t flags, void *user)
{
    (void)ng;
    (void)flags;
    struct h2_conn *c = user;
    struct h2_stream *st = h2_stream_of(c, f->hd.stream_id);
    if (!st || st->req->accepted || st->too_big)
        return 0;   /* refused, or the client's trailers (gRPC sends none) */
    st->hdr_bytes += nlen + vlen + H2_HEADER_OVERHEAD;
    if (st->hdr_bytes > c->t->limits->max_header_bytes) {
        st->too_big = true;
        return 0;
    }
    struct http_request *r = st->req;
    int rc = 0;
    if (nlen > 0 && name[0] == ':') {   /* nghttp2 puts them first */
        if (nlen == 7 && memcmp(name, ":method", 7) == 0)
            snprintf(st->method, sizeof st->method, "%.*s", (int)vlen, (const char *)value);
        else if (nlen == 5 && memcmp(name, ":path", 5) == 0)
            rc = buf_append(&st->path, value, vlen);
        else if (nlen == 10 && memcmp(name, ":authority", 10) == 0)
            rc = buf_append(&st->authority, value, vlen);
        return rc < 0 ? NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE : 0;
    }
    if (!st->committed) {
        st->committed = true;
        if (http_request_set_target(r, HTTP_M_OTHER, st->path.data ? st->path.data : "",
                                    st->path.len) < 0 ||
            (st->authority.len && http_request_add_header(r, "host", 4, st->authority.data,
                                                          st->authority.len) < 0))
            return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    /* A value's surrounding spaces and tabs are not part of it (RFC 9110
     * 5.5), as parse.c reads HTTP/1.1's: "Bearer KEY " is the key. */
    while (vlen > 0 && (value[0] == ' ' || value[0] == '\t'))
        value++, vlen--;
    while (vlen > 0 && (value[vlen - 1] == ' ' || value[vlen - 1] == '\t'))
        vlen--;
    if (http_request_add_header(r, (const char *)name, nlen, (const char *)value, vlen) < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

/* The end of a request's headers: dispatched, as a streaming request. */
static void h2_dispatch(struct h2_conn *c, struct h2_stream *st, bool end_stream)
{
    struct http_request *r = st->req;
    struct io_thread *t = c->t;
    if (!st->committed) {
        st->committed = true;
        if (http_request_set_target(r, HTTP_M_OTHER, st->path.data ? st->path.data : "",
                                    st->path.len) < 0 ||
            (st->authority.len && http_request_add_header(r, "host", 4, st->authority.data,
                                                          st->authority.len) < 0)) {
            nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
            return;
        }
    }
    r->method = http_method_from_name(st->method, strlen(st->method), &r->llhttp_method);
    r->t_received_ns = now_ns();
    r->has_body = !end_stream;
    size_t cl_len;
    const char *cl = http_request_header(r, "content-length", &cl_len);
    if (cl && cl_len > 0 && cl_len < 19) {
        int64_t v = 0;
        for (size_t i = 0; i < cl_len && cl[i] >= '0' && cl[i] <= '9'; i++)
            v = v * 10 + (cl[i] - '0');
        r->content_length = v;
    }
    r->accepted = true;
    st->t_progress = c->t_last_rx;
    atomic_store_explicit(&t->inflight,
                          atomic_load_explicit(&t->inflight, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    st->busy++;
    if (st->too_big) {
        router_refuse(t->h2->router, r, 431, "the header list exceeds limits.max_header_bytes "
                      "(%zu)", t->limits->max_header_bytes);
    } else if (r->dot_path) {
        router_refuse(t->h2->router, r, 400, "%s", HTTP_DOT_PATH_MSG);
    } else if (r->content_length > 0 && (uint64_t)r->content_length > t->limits->max_body_bytes) {
        router_refuse(t->h2->router, r, 413, "body of %lld bytes exceeds limits.max_body_bytes "
                      "(%zu)", (long long)r->content_length, t->limits->max_body_bytes);
    } else {
        router_dispatch(t->h2->router, r);
        if (end_stream)
            h2_body_end(st, 0, NULL);
    }
    st->busy--;
    h2_stream_maybe_free(st);
}

static int h2_on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    struct h2_conn *c = user;
    struct h2_stream *st = f->hd.stream_id ? h2_stream_of(c, f->hd.stream_id) : NULL;
    bool end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
    switch (f->hd.type) {
    case NGHTTP2_HEADERS:
        if (!st)
            break;
        if (!st->req->accepted)
            h2_dispatch(c, st, end);
        else if (end)
            h2_body_end(st, 0, NULL);   /* the client's trailers end its body */
        break;
    case NGHTTP2_DATA:
        if (st && end)
            h2_body_end(st, 0, NULL);
        break;
    case NGHTTP2_RST_STREAM: {
        /* Rapid reset: a bucket of h2_rst_burst, refilled at
         * max_resets_per_s. nghttp2's own (looser, h2_conn_new) would
         * answer GOAWAY(INTERNAL_ERROR) and say nothing to the log. */
        int64_t now = now_ns();
        double rate = c->t->h2->max_resets_per_s, burst = h2_rst_burst(c->t->h2);
        c->rst_tokens += (double)(now - c->rst_refill_ns) * 1e-9 * rate;
        c->rst_refill_ns = now;
        if (c->rst_tokens > burst)
            c->rst_tokens = burst;
        if (c->rst_tokens < 1)
            return h2_calm(c, "more RST_STREAM frames than grpc.max_resets_per_s (rapid reset)");
        c->rst_tokens -= 1;
        break;
    }
    case NGHTTP2_SETTINGS:
    case NGHTTP2_PING:
    case NGHTTP2_PRIORITY:
        if (f->hd.flags & NGHTTP2_FLAG_ACK)
            break;
        {
            int64_t now = now_ns();
            if (now - c->ctl_window_start >= 1000000000) {
                c->ctl_window_start = now;
                c->ctl_frames = 0;
            }
            if (++c->ctl_frames > c->t->h2->max_control_per_s)
                return h2_calm(c, "more SETTINGS, PING and PRIORITY frames a second than "
                                  "grpc.max_control_frames_per_s");
        }
        break;
    default:
        break;
    }
    (void)ng;
    return 0;
}

/* An answer sent whole before the client finished its request: the rest is
 * not wanted (RFC 9113 8.1: RST_STREAM(NO_ERROR) after the answer). Not
 * submitted with the answer: a RST_STREAM queued marks the stream closing
 * at once, and nghttp2 then drops the answer's frames still queued. */
static int h2_on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *user)
{
    struct h2_conn *c = user;
    if (f->hd.type == NGHTTP2_DATA)
        c->t_last_data = now_ns();
    if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
        nghttp2_session_get_stream_remote_close(ng, f->hd.stream_id) == 0)
        nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

/* Flow control is ours (nghttp2_option_set_no_auto_window_update): every
 * byte of DATA handed to h2_on_data is given back to the client's windows
 * here, at once, except the stream's share of bytes that arrived while its
 * handler had the body stopped (http_request_pause_body): those are
 * given back when it resumes (h2_body_paused). The connection's window is
 * always given back, so a stopped stream never holds up the others; the
 * client may send a stopped stream at most its window
 * (grpc.initial_window_bytes) more. */
static void h2_consume(struct h2_conn *c, int32_t id, size_t len, bool hold)
{
    if (hold)
        nghttp2_session_consume_connection(c->ng, len);
    else
        nghttp2_session_consume(c->ng, id, len);
}

static int h2_on_data(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data,
                      size_t len, void *user)
{
    (void)ng;
    (void)flags;
    struct h2_conn *c = user;
    struct h2_stream *st = h2_stream_of(c, id);
    if (!st || st->body_end || st->req->responded) {
        h2_consume(c, id, len, false);
        return 0;
    }
    struct http_request *r = st->req;
    st->t_progress = c->t_last_rx;
    r->body_total += len;
    /* A body handed to its handler as it arrives is the handler's to bound
     * (gRPC bounds each message of a stream); one kept here is bounded here. */
    if (!r->body_fn && r->body_total > c->t->limits->max_body_bytes) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body exceeds limits.max_body_bytes (%zu)",
                 c->t->limits->max_body_bytes);
        st->busy++;
        h2_body_end(st, 413, msg);
        st->busy--;
        h2_stream_maybe_free(st);
        h2_consume(c, id, len, false);
        return 0;
    }
    if (r->body_fn) {
        st->busy++;
        r->body_fn(r, r->body_arg, (const char *)data, len, 0, 0, NULL);
        bool hold = st->open && !st->body_end && r->body_paused;
        if (hold)
            st->held += len;
        st->busy--;
        h2_stream_maybe_free(st);
        h2_consume(c, id, len, hold);
    } else if (buf_append(&r->body, data, len) < 0) {
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    } else {
        h2_consume(c, id, len, false);
    }
    return 0;
}

static int h2_on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *user)
{
    (void)error_code;
    struct h2_conn *c = user;
    struct h2_stream *st = h2_stream_of(c, id);
    if (!st)
        return 0;
    nghttp2_session_set_stream_user_data(ng, id, NULL);
    h2_stream_gone(st);
    h2_stream_maybe_free(st);
    return 0;
}

/* ---- the socket ---- */

static void h2_watch(struct h2_conn *c, struct event *ev, bool *flag, bool on)
{
    if (*flag == on || c->fd < 0)
        return;
    *flag = on;
    if (on) {
        if (evwatch_add(ev, NULL, c->ev_timer) < 0)
            c->lost = true;
    } else
        event_del(ev);
}

static void h2_write(struct h2_conn *c)
{
    while (buf_unread(&c->out) > 0) {
        ssize_t n = send(c->fd, c->out.data + c->out.off, buf_unread(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            c->out.off += (size_t)n;
            c->t_last_write = now_ns();
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            h2_watch(c, c->ev_write, &c->writing, true);
            return;
        }
        h2_close_socket(c);
        return;
    }
    buf_reset(&c->out);
    buf_shrink(&c->out, H2_OUT_KEEP);
    h2_watch(c, c->ev_write, &c->writing, false);
}

/* Answers wait to go out: in our buffer, in nghttp2's queue, or still in
 * a stream's body behind a window the client keeps shut. */
static bool h2_answers_wait(struct h2_conn *c)
{
    if (buf_unread(&c->out) > 0 || nghttp2_session_want_write(c->ng))
        return true;
    struct list *q;
    list_foreach(q, &c->streams) {
        const struct h2_stream *st = h2_stream_from_link(q);
        if (st->open && st->resp_off < st->req->resp.len)
            return true;   /* a stream idle between its pieces waits for nobody */
    }
    return false;
}

/* nghttp2's output into ours, written; reading follows what is unsent. */
static void h2_flush(struct h2_conn *c)
{
    if (c->fd < 0)
        return;
    h2_hold(c);
    for (;;) {
        while (buf_unread(&c->out) < H2_OUT_HIGH_WATER) {
            const uint8_t *data;
            ssize_t n = nghttp2_session_mem_send(c->ng, &data);
            if (n < 0) {
                h2_close_socket(c);
                h2_release(c);
                return;
            }
            if (n == 0)
                break;
            if (buf_append(&c->out, data, (size_t)n) < 0) {
                h2_close_socket(c);
                h2_release(c);
                return;
            }
        }
        bool more = buf_unread(&c->out) >= H2_OUT_HIGH_WATER;   /* nghttp2 may hold more */
        h2_write(c);
        /* All written and more may wait: take it now. Nothing else would
         * ask (no write event is watched once the buffer is empty, and a
         * client whose window is open sends nothing), so an answer over
         * the high water stalled until a timer, 10 s or 60 s. */
        if (c->fd < 0 || !more || buf_unread(&c->out) > 0)
            break;
    }
    if (c->fd >= 0 && !h2_answers_wait(c))   /* nothing waits: the slow-reader clocks start over */
        c->t_last_write = c->t_last_data = now_ns();
    if (c->fd >= 0) {
        bool unsent = buf_unread(&c->out) > 0;
        if (!unsent && !nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng))
            h2_close_socket(c);   /* GOAWAY sent both ways, or a fatal error answered */
        else if (!unsent && c->goaway && c->nstreams == 0 &&
                 !nghttp2_session_want_write(c->ng))
            h2_close_socket(c);   /* draining and done */
        else
            h2_watch(c, c->ev_read, &c->reading, buf_unread(&c->out) < H2_OUT_HIGH_WATER);
    }
    h2_release(c);
}

static void h2_close_socket(struct h2_conn *c)
{
    if (c->fd < 0)
        return;
    event_del(c->ev_read);
    event_del(c->ev_write);
    event_del(c->ev_timer);
    close(c->fd);
    c->fd = -1;
    c->reading = c->writing = false;
    io_thread_conn_closed(c->t);
    h2_hold(c);
    struct list *q, *tmp;
    list_foreach_safe(q, tmp, &c->streams) {
        struct h2_stream *st = h2_stream_from_link(q);
        if (st->open) {
            h2_stream_gone(st);
            h2_stream_maybe_free(st);
        }
    }
    h2_release(c);
}

static void h2_free(struct h2_conn *c)
{
    struct list *q, *tmp;
    list_foreach_safe(q, tmp, &c->streams) {   /* thread exit: handlers never answered */
        struct h2_stream *st = h2_stream_from_link(q);
        list_remove(&st->link);
        buf_free(&st->path);
        buf_free(&st->authority);
        http_request_free(st->req);
        free(st);
    }
    nghttp2_session_del(c->ng);
    event_free(c->ev_read);
    event_free(c->ev_write);
    event_free(c->ev_timer);
    buf_free(&c->out);
    list_remove(&c->link);
    io_thread_conn_gone(c->t);
    free(c);
}

static void h2_maybe_free(struct h2_conn *c)
{
    if (c->fd < 0 && c->nstreams == 0 && c->holds == 0)
        h2_free(c);
}

static void h2_on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct h2_conn *c = arg;
    struct io_thread *t = c->t;
    ssize_t n = recv(fd, t->rbuf, sizeof t->rbuf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    h2_hold(c);
    if (n <= 0) {   /* FIN or reset: HTTP/2 has no half-close worth waiting on */
        h2_close_socket(c);
        h2_release(c);
        return;
    }
    c->t_last_active = c->t_last_rx = now_ns();
    c->in_recv = true;
    ssize_t rv = nghttp2_session_mem_recv(c->ng, (const uint8_t *)t->rbuf, (size_t)n);
    c->in_recv = false;
    if (rv < 0) {
        /* A connection error: nghttp2 queued a GOAWAY where it could. */
        log_debug("http2: %s: closing the connection", nghttp2_strerror((int)rv));
        if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC || rv == NGHTTP2_ERR_NOMEM) {
            h2_close_socket(c);
            h2_release(c);
            return;
        }
        nghttp2_session_terminate_session(c->ng, NGHTTP2_PROTOCOL_ERROR);
    }
    h2_flush(c);
    h2_release(c);
}

static void h2_on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    h2_flush(arg);
}

/* One timer: the client preface within header_timeout_ms, then an idle
 * connection (no stream) closes after idle_timeout_ms with a GOAWAY. While
 * streams are open, header_timeout_ms holds as on HTTP/1.1 (slowloris): a
 * header block unfinished that long closes the connection (no other frame
 * may come between its frames), a body that has not moved that long is
 * ended for its handler with 408; a stream being served runs no timer. */
static void h2_arm_timer(struct h2_conn *c, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    c->t_timer_due = now_ns() + (int64_t)ms * 1000000;
    if (evwatch_add(c->ev_timer, &tv, c->ev_timer) < 0)
        c->lost = true;
}

static void h2_on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct h2_conn *c = arg;
    if (c->fd < 0)
        return;
    if (c->lost) {   /* libevent had no memory to watch it: end it rather than hang */
        h2_hold(c);
        h2_close_socket(c);
        h2_release(c);
        return;
    }
    const struct http_limits *l = c->t->limits;
    int64_t idle_ns = (int64_t)l->idle_timeout_ms * 1000000;
    int64_t header_ns = (int64_t)l->header_timeout_ms * 1000000;
    int64_t now = now_ns();
    int64_t quiet = now - c->t_last_active;
    bool stalled_headers = false;
    int64_t next_ns = idle_ns;   /* until the next check while streams are open */
    if (c->nstreams > 0) {
        h2_hold(c);
        c->in_recv = true;   /* no flush (nor close) under the walk */
        struct list *q, *tmp;
        list_foreach_safe(q, tmp, &c->streams) {
            struct h2_stream *st = h2_stream_from_link(q);
            if (!st->open || st->req->responded || (st->req->accepted && st->body_end))
                continue;
            /* Between whole messages a stream is idle, not stalled; while
             * its handler answers some, or has stopped its body (its output
             * is full), neither. */
            bool rest = st->req->accepted && st->req->body_at_rest;
            bool serving = rest && st->req->body_serving;
            bool paused = st->req->body_paused;
            if (c->t->draining && st->req->accepted) {
                /* A stream that would wait for the client's next message
                 * holds the drain to its deadline: its body ends (503) once
                 * it is between messages with nothing owed, and the handler
                 * closes it. Until then, looked at often (a stream paused
                 * with messages waiting, past 128 in flight, was looked at
                 * again only after idle_timeout_ms: the drain ran out). */
                if (rest && !serving && !paused) {
                    st->busy++;
                    h2_body_end(st, 503, "the server is shutting down");
                    st->busy--;
                    h2_stream_maybe_free(st);
                    continue;
                }
                if (next_ns > H2_DRAIN_LOOK_NS)
                    next_ns = H2_DRAIN_LOOK_NS;
            }
            if (paused || serving)
                continue;
            int64_t since = st->t_progress;
            if (rest && st->req->t_rest_ns > since)
                since = st->req->t_rest_ns;   /* idle from its last answer, not its last message */
            int64_t limit = rest ? idle_ns : header_ns;
            if (now - since < limit) {
                if (since + limit - now < next_ns)
                    next_ns = since + limit - now;
                continue;
            }
            if (!st->req->accepted) {
                stalled_headers = true;
            } else if (!st->body_end) {
                st->busy++;
                h2_body_end(st, 408, rest ? "request stream idle longer than limits.idle_timeout_ms"
                                          : "request body stalled longer than "
                                            "limits.header_timeout_ms");
                st->busy--;
                h2_stream_maybe_free(st);
            }
        }
        c->in_recv = false;
        if (!stalled_headers)
            h2_flush(c);
        bool closed = c->fd < 0;
        h2_release(c);   /* may free it once closed */
        if (closed)
            return;
    }
    /* A slow reader, as on HTTP/1.1: answers wait to be sent (in our
     * buffer, or in nghttp2's behind a window the client keeps shut) and
     * for idle_timeout_ms nothing left, or no answer's DATA did (PING
     * ACKs alone kept such a client's streams for ever). */
    bool unsent = h2_answers_wait(c);
    int64_t moved = c->t_last_write < c->t_last_data ? c->t_last_write : c->t_last_data;
    bool slow_reader = unsent && now - moved >= idle_ns;
    if (unsent && !slow_reader && moved + idle_ns - now < next_ns)
        next_ns = moved + idle_ns - now;
    if (!unsent)   /* the clocks run from when answers start to wait */
        c->t_last_write = c->t_last_data = now;
    if (!stalled_headers && !slow_reader && (c->nstreams > 0 || quiet < idle_ns)) {
        int64_t left_ms = (c->nstreams > 0 ? next_ns : idle_ns - quiet) / 1000000 + 1;
        h2_arm_timer(c, (int)left_ms);
        return;
    }
    if (stalled_headers)
        log_debug("http2: a header block from %s unfinished after limits.header_timeout_ms: "
                  "closing the connection", h2_conn_peer(c));
    if (slow_reader)
        log_debug("http2: %s read none of its answers for limits.idle_timeout_ms: closing the "
                  "connection", h2_conn_peer(c));
    h2_hold(c);
    nghttp2_session_terminate_session(c->ng, NGHTTP2_NO_ERROR);
    c->goaway = true;
    h2_flush(c);
    h2_close_socket(c);
    h2_release(c);
}

struct h2_conn *h2_conn_new(struct io_thread *t, int fd)
{
    const struct http_h2_config *hc = t->h2;
    struct h2_conn *c = calloc(1, sizeof *c);
    nghttp2_session_callbacks *cbs = NULL;
    nghttp2_option *opt = NULL;
    if (!c)
        goto fail;
    c->t = t;
    c->fd = fd;
    list_init(&c->streams);
    c->ev_read = event_new(t->base, fd, EV_READ | EV_PERSIST, h2_on_read, c);
    c->ev_write = event_new(t->base, fd, EV_WRITE | EV_PERSIST, h2_on_write, c);
    c->ev_timer = evtimer_new(t->base, h2_on_timer, c);
    if (!c->ev_read || !c->ev_write || !c->ev_timer)
        goto fail;
    if (nghttp2_session_callbacks_new(&cbs) != 0 || nghttp2_option_new(&opt) != 0)
        goto fail;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, h2_on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, h2_on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, h2_on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, h2_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, h2_on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, h2_on_frame_send);
    /* Rapid reset: h2_on_frame_recv's bucket answers it. nghttp2's (Debian's
     * 1.52 carries it) stays behind as a backstop, twice as loose so that
     * ours always comes first: its GOAWAY says INTERNAL_ERROR, unlogged. */
    nghttp2_option_set_stream_reset_rate_limit(opt, (uint64_t)(h2_rst_burst(hc) * 2),
                                               (uint64_t)hc->max_resets_per_s * 2);
    /* gRPC metadata may begin or end with a space (grpc-core takes it);
     * nghttp2's RFC 9113 8.2.1 check reset such a stream, unsaid. The
     * value is trimmed where it is read (h2_on_header), as HTTP/1.1's. */
    nghttp2_option_set_no_rfc9113_leading_and_trailing_ws_validation(opt, 1);
    nghttp2_option_set_max_continuations(opt, 8);
    nghttp2_option_set_max_settings(opt, 32);
    nghttp2_option_set_max_outbound_ack(opt, 1000);
    nghttp2_option_set_no_auto_window_update(opt, 1);   /* h2_consume */
    if (nghttp2_session_server_new2(&c->ng, cbs, c, opt) != 0)
        goto fail;
    nghttp2_session_callbacks_del(cbs);
    nghttp2_option_del(opt);
    cbs = NULL;
    opt = NULL;
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)hc->max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (uint32_t)hc->initial_window_bytes},
        {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, (uint32_t)hc->max_frame_bytes},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)t->limits->max_header_bytes},
    };
    if (nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
        nghttp2_session_set_local_window_size(c->ng, NGHTTP2_FLAG_NONE, 0,
                                              hc->connection_window_bytes) != 0)
        goto fail;
    c->t_last_active = c->t_last_rx = c->rst_refill_ns = c->t_last_write = c->t_last_data =
        now_ns();
    c->rst_tokens = h2_rst_burst(hc);
    list_insert_head(&t->h2conns, &c->link);
    t->nconns++;
    h2_watch(c, c->ev_read, &c->reading, true);
    h2_arm_timer(c, t->limits->header_timeout_ms > t->limits->idle_timeout_ms
                        ? t->limits->header_timeout_ms : t->limits->idle_timeout_ms);
    h2_flush(c);   /* our SETTINGS go first */
    return c;

fail:
    if (cbs)
        nghttp2_session_callbacks_del(cbs);
    if (opt)
        nghttp2_option_del(opt);
    if (c) {
        if (c->ng)
            nghttp2_session_del(c->ng);
        if (c->ev_read)
            event_free(c->ev_read);
        if (c->ev_write)
            event_free(c->ev_write);
        if (c->ev_timer)
            event_free(c->ev_timer);
        free(c);
    }
    close(fd);
    io_thread_conn_closed(t);
    return NULL;
}

void h2_conn_drain_all(struct io_thread *t)
{
    t->draining = true;
    struct list *q, *tmp;
    list_foreach_safe(q, tmp, &t->h2conns) {
        struct h2_conn *c = h2_from_link(q);
        if (c->fd < 0 || c->goaway)
            continue;
        h2_hold(c);
        /* Streams already begun are answered; newer ones are refused. */
        c->goaway = true;
        nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(c->ng), NGHTTP2_NO_ERROR,
                              NULL, 0);
        h2_flush(c);
        if (c->fd >= 0 && c->nstreams > 0)
            h2_arm_timer(c, 0);   /* the walk ends streams idle between messages */
        h2_release(c);
    }
}

uint64_t h2_conn_abort_all(struct io_thread *t)
{
    uint64_t left = 0;
    struct list *q, *tmp;
    list_foreach_safe(q, tmp, &t->h2conns) {
        struct h2_conn *c = h2_from_link(q);
        struct list *s;
        list_foreach(s, &c->streams)
            left += !h2_stream_from_link(s)->req->responded;
        h2_hold(c);
        h2_close_socket(c);
        h2_release(c);
    }
    return left;
}

void h2_conn_thread_free(struct io_thread *t)
{
    struct list *q, *tmp;
    list_foreach_safe(q, tmp, &t->h2conns) {
        struct h2_conn *c = h2_from_link(q);
        if (c->fd >= 0) {
            close(c->fd);
            c->fd = -1;
            io_thread_conn_closed(t);
        }
        h2_free(c);
    }
}

/* conn.c - one HTTP/1.1 client connection on its IO thread: the protocol
 * side of a request. The answering API of http.h lives in the request core
 * (request.c), which reaches this file only through conn_proto.
 *
 * Input: read into `in`, feed llhttp (parse.c) one event at a time,
 * queue each request in arrival order and dispatch it through the router.
 * Output: a response produced for the request at the head of the queue is
 * serialized straight into `out`; one produced early (a later pipelined
 * request finishing first) waits in its request until the head catches up.
 *
 * One timer per connection enforces, depending on what the connection is
 * doing: header_timeout_ms from the first byte of a request to the end of its
 * headers (slowloris), header_timeout_ms of no progress while reading a body,
 * idle_timeout_ms for an idle keep-alive connection or a client that stops
 * reading its responses. The timer is re-armed lazily: only when a deadline
 * moves earlier; when it fires it recomputes and re-arms for the rest.
 *
 * Lifetime: the socket closes when the exchange ends; the struct lives on
 * (a "zombie") while a handler still holds one of its requests, and is freed
 * when the last one is answered.
 *
 * Why one file of ~1100 lines: a connection is one state machine. Reading,
 * the pipeline queue, the single timer, lingering close and the output side
 * share its invariants (conn_hold/conn_release around every entry point,
 * the head-of-queue rule for output, `in_process` against re-entry); split,
 * a dozen statics would become an internal API that any file could break.
 * What is not HTTP/1.1-specific already lives elsewhere: the answering API
 * in request.c, parsing in parse.c, serializing in response.c. */
#include "http/http_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/clock.h"
#include "common/evwatch.h"
#include "common/log.h"
#include "http/http.h"
#include "http/response.h"

/* Requests parsed ahead of their answers on one connection. */
#define CONN_MAX_PIPELINE 64
/* Stop reading while this much output waits for a slow reader. */
#define CONN_OUT_HIGH_WATER (4u << 20)
/* A read with unparsed bytes of its own still reads at least this much. */
#define CONN_READ_CHUNK IO_THREAD_READ_BUF
/* After a final response, read and discard for this long so the client sees
 * the response rather than a reset (RFC 9112 §9.6). */
#define CONN_LINGER_MS 2000
#define CONN_LINGER_MAX_BYTES (1u << 20)
/* Output buffer kept by a connection once everything is written. */
#define CONN_OUT_KEEP (4u << 10)
/* A streaming answer's handler is asked for more below this much unsent output. */
#define CONN_OUT_LOW_WATER (64u << 10)

struct http_conn {
    struct io_thread *t;
    struct list link;                 /* t->conns */
    int fd;                           /* -1 once closed */
    struct event *ev_read, *ev_write, *ev_timer;
    struct buf in, out;
    struct http_parse parse;
    struct http_request *q_head, *q_tail;
    int q_len;
    int outstanding;                  /* requests not yet answered */
    bool reading, writing;
    bool read_eof;                    /* the client sent FIN */
    bool closing;                     /* parse no further requests */
    bool close_after_write;           /* the final response is in `out` */
    bool lingering;
    bool in_process;                  /* guards process_input against re-entry */
    bool in_borrowed;                 /* `in` is the thread's rbuf, during one read */
    bool lost;                        /* an event could not be added: close from the loop */
    int holds;                        /* callbacks on the stack: defer the free */
    uint64_t nrequests;               /* requests begun on this connection */
    int64_t t_accept, t_head_start, t_last_read, t_last_write;
    int64_t t_last_rx;                /* the kernel's receive time of the last read's data */
    int64_t timer_deadline;           /* 0: not armed */
    size_t linger_bytes;
    char peer[48];                    /* the client's address, once asked for */
};

static void conn_process_input(struct http_conn *c);
static void conn_flush(struct http_conn *c);
static const struct http_proto conn_proto;

/* ---- the input buffer ----
 * An idle keep-alive connection holds no input buffer: each read lands in
 * its thread's rbuf, lent to it for that read only, and whatever the parser
 * left unconsumed (a partial request, pipelined ones waiting their turn) is
 * copied into a buffer of the connection's own before the read returns. So
 * memory follows the bytes in flight, not the number of open connections
 * (it was 16-32 KiB for every connection, busy or not). */

static void conn_in_free(struct http_conn *c)
{
    if (c->in_borrowed)
        c->in = (struct buf)BUF_INIT;   /* the thread's; conn_in_return is a no-op now */
    else
        buf_free(&c->in);
}

/* Lends the thread's buffer when nothing unparsed is pending. */
static void conn_in_borrow(struct http_conn *c)
{
    if (buf_unread(&c->in) > 0)
        return;
    buf_free(&c->in);
    c->in = (struct buf){.data = c->t->rbuf, .cap = sizeof c->t->rbuf};
    c->in_borrowed = true;
}

/* Gives the thread's buffer back, keeping a copy of what is left unparsed.
 * Returns -1 when that copy cannot be made (the connection must go). */
static int conn_in_return(struct http_conn *c)
{
    if (!c->in_borrowed)
        return 0;
    struct buf lent = c->in;
    c->in = (struct buf)BUF_INIT;
    c->in_borrowed = false;
    size_t left = buf_unread(&lent);
    return left ? buf_append(&c->in, buf_head(&lent), left) : 0;
}

static void conn_arm_timer(struct http_conn *c);
static void conn_close_socket(struct http_conn *c);
static void conn_maybe_free(struct http_conn *c);

static struct http_conn *conn_from_link(struct list *q) { return list_data(q, struct http_conn, link); }

/* ---- request queue ---- */

/* Request objects come from the thread's spares, not the connection's: an
 * idle keep-alive connection holds none, so the memory of a burst (its
 * headers, bodies and held responses) stays with the thread, bounded by
 * IO_THREAD_SPARE_REQUESTS, rather than with every connection it touched
 * (it was 4 spares per connection: ~75 KiB for each idle connection after
 * four pipelined 8 KiB requests). */
static struct http_request *conn_alloc_request(void *arg)
{
    struct http_conn *c = arg;
    struct io_thread *t = c->t;
    struct http_request *r = t->spare;
    if (r) {
        t->spare = r->next;
        t->nspare--;
        r->next = NULL;
        r->conn = c;
    } else if (!(r = http_request_new(c, &conn_proto))) {
        return NULL;
    }
    if (c->q_tail)
        c->q_tail->next = r;
    else
        c->q_head = r;
    c->q_tail = r;
    c->q_len++;
    c->outstanding++;
    r->t_arrival_ns = c->t_last_rx ? c->t_last_rx : now_ns();
    /* The first request's headers are due header_timeout_ms after accept;
     * later ones, after the read that brought their first byte. */
    c->t_head_start = c->nrequests++ == 0 ? c->t_accept : c->t_last_read;
    return r;
}

static struct http_request *conn_pop_head(struct http_conn *c)
{
    struct http_request *r = c->q_head;
    c->q_head = r->next;
    if (!c->q_head)
        c->q_tail = NULL;
    c->q_len--;
    r->next = NULL;
    return r;
}

static void conn_recycle(struct http_conn *c, struct http_request *r)
{
    struct io_thread *t = c->t;
    if (t->nspare >= IO_THREAD_SPARE_REQUESTS) {
        http_request_free(r);
        return;
    }
    http_request_reset(r);
    r->next = t->spare;
    t->spare = r;
    t->nspare++;
}

static void conn_free(struct http_conn *c);

void http_conn_thread_free(struct io_thread *t)
{
    while (!list_empty(&t->conns))
        conn_free(conn_from_link(list_first(&t->conns)));
    while (t->spare) {
        struct http_request *r = t->spare;
        t->spare = r->next;
        http_request_free(r);
    }
    t->nspare = 0;
}

/* ---- events ---- */

/* A connection whose events cannot be added (evwatch.h) would wait
 * forever, its requests with it: it is marked lost and closed from its
 * timer's callback, as a forced stop closes it. Found by tests/oom. */
static void conn_watch(struct http_conn *c, struct event *ev, const struct timeval *tv)
{
    if (evwatch_add(ev, tv, c->ev_timer) < 0)
        c->lost = true;
}

static void conn_set_reading(struct http_conn *c, bool on)
{
    if (c->fd < 0 || on == c->reading)
        return;
    if (on)
        conn_watch(c, c->ev_read, NULL);
    else
        event_del(c->ev_read);
    c->reading = on;
}

static void conn_set_writing(struct http_conn *c, bool on)
{
    if (c->fd < 0 || on == c->writing)
        return;
    if (on)
        conn_watch(c, c->ev_write, NULL);
    else
        event_del(c->ev_write);
    c->writing = on;
}

/* The request being read streams its body to a handler that asked to wait. */
static bool conn_body_paused(const struct http_conn *c)
{
    const struct http_request *r = c->parse.cur;
    return r && r->streaming && r->body_paused && !r->responded;
}

/* A streaming request's body is still being read: even on a connection that
 * will take no further request (`closing`), its body must be, for its
 * handler's sake (found by fuzz_http_conn). */
static bool conn_mid_stream(const struct http_conn *c)
{
    const struct http_request *r = c->parse.cur;
    return r && r->streaming && c->parse.phase == HTTP_PHASE_BODY;
}

static bool conn_can_parse(const struct http_conn *c)
{
    return (!c->closing || conn_mid_stream(c)) && c->fd >= 0 && !c->lingering &&
           c->q_len < CONN_MAX_PIPELINE && buf_unread(&c->out) < CONN_OUT_HIGH_WATER &&
           !conn_body_paused(c);
}

/* Reading continues while requests can be parsed, and during lingering close. */
static void conn_update_reading(struct http_conn *c)
{
    conn_set_reading(c, !c->read_eof && (c->lingering || conn_can_parse(c)));
}

/* ---- closing ---- */

static void conn_close_socket(struct http_conn *c)
{
    if (c->fd < 0)
        return;
    event_del(c->ev_read);
    event_del(c->ev_write);
    event_del(c->ev_timer);
    c->reading = c->writing = false;
    close(c->fd);
    c->fd = -1;
    c->timer_deadline = 0;
    conn_in_free(c);
    buf_free(&c->out);
    io_thread_conn_closed(c->t);
}

static void conn_free(struct http_conn *c)
{
    conn_close_socket(c);
    struct http_request *r, *next;
    for (r = c->q_head; r; r = next) {
        next = r->next;
        http_request_free(r);
    }
    event_free(c->ev_read);
    event_free(c->ev_write);
    event_free(c->ev_timer);
    struct io_thread *t = c->t;
    list_remove(&c->link);
    free(c);
    io_thread_conn_gone(t);
}

static void conn_maybe_free(struct http_conn *c)
{
    if (c->fd < 0 && c->outstanding == 0 && c->holds == 0)
        conn_free(c);
}

/* Every entry point holds the connection so that a close deep inside
 * (a failed write, an abort) never frees it under the caller's feet. */
static void conn_hold(struct http_conn *c) { c->holds++; }
static void conn_release(struct http_conn *c)
{
    c->holds--;
    conn_maybe_free(c);
}

/* The socket is done with (reset, timeout, forced close): handlers still
 * holding requests are told, and the struct waits for their answers. */
static void conn_drop_partial(struct http_conn *c);
static void conn_read(struct http_conn *c, int fd);

/* Tells the owners of the unanswered requests (with only_fin, those that
 * read a FIN as leaving) that the client is gone. */
static void conn_abort_requests(struct http_conn *c, bool only_fin)
{
    /* on_abort may answer at once, which unlinks r: restart the walk each time. */
    conn_hold(c);
    for (;;) {
        struct http_request *r = c->q_head;
        while (r && (r->aborted || r->responded || (only_fin && !r->fin_leaves)))
            r = r->next;
        if (!r)
            break;
        r->aborted = true;
        if (r->abort_fn)
            r->abort_fn(r, r->abort_arg);
    }
    conn_release(c);
}

static uint64_t conn_abort(struct http_conn *c)
{
    /* A request still being read was never accepted: nobody else holds it
     * (unless it streams to a handler already), so it goes with the socket. */
    if (c->parse.cur && !c->parse.cur->streaming)
        conn_drop_partial(c);
    uint64_t left = (uint64_t)c->outstanding;
    conn_close_socket(c);
    /* Drop what was answered but not written; tell owners of the rest. */
    struct http_request **pp = &c->q_head, *r;
    c->q_tail = NULL;
    while ((r = *pp)) {
        if (r->responded) {
            *pp = r->next;
            c->q_len--;
            http_request_free(r);
        } else {
            c->q_tail = r;
            pp = &r->next;
        }
    }
    conn_abort_requests(c, false);
    return left;
}

static void conn_linger(struct http_conn *c)
{
    if (c->read_eof) {
        conn_abort(c);
        return;
    }
    shutdown(c->fd, SHUT_WR);
    c->lingering = true;
    c->linger_bytes = 0;
    conn_in_free(c);
    conn_update_reading(c);
    struct timeval tv = {CONN_LINGER_MS / 1000, (CONN_LINGER_MS % 1000) * 1000};
    c->timer_deadline = now_ns() + (int64_t)CONN_LINGER_MS * 1000000;
    conn_watch(c, c->ev_timer, &tv);
}

/* ---- output ---- */

static void conn_write(struct http_conn *c)
{
    while (buf_unread(&c->out) > 0) {
        ssize_t n = send(c->fd, buf_head(&c->out), buf_unread(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            buf_consume(&c->out, (size_t)n);
            c->t_last_write = now_ns();
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            conn_set_writing(c, true);
            conn_arm_timer(c);
            return;
        }
        /* EPIPE, ECONNRESET: the client is gone. */
        conn_abort(c);
        return;
    }
    conn_set_writing(c, false);
    /* Written out: only a small buffer stays with the connection (most
     * answers fit it, so the common case allocates nothing); a large one is
     * freed rather than kept by every idle connection it once served. */
    buf_shrink(&c->out, CONN_OUT_KEEP);
    if (c->close_after_write) {
        conn_linger(c);
        return;
    }
    if (c->read_eof && c->q_len == 0) {
        conn_abort(c);
        return;
    }
    conn_arm_timer(c);
}

static void conn_emit_continue(struct http_conn *c)
{
    struct http_request *h = c->q_head;
    if (h && h->expect_continue && !h->responded && h == c->parse.cur &&
        c->parse.phase == HTTP_PHASE_BODY) {
        h->expect_continue = false;
        http_response_write_continue(&c->out);
    }
}

/* Moves every answered request at the head of the queue into `out`, then writes. */
static void conn_flush(struct http_conn *c)
{
    if (c->fd < 0)
        return;
    /* A streaming request answered before its body ended stays until the
     * parser is done with it (its answer is already in `out`). */
    while (c->q_head && c->q_head->responded && c->q_head != c->parse.cur) {
        struct http_request *r = conn_pop_head(c);
        if (buf_unread(&r->resp) > 0)
            buf_append(&c->out, buf_head(&r->resp), buf_unread(&r->resp));
        bool last = r->close_after;
        conn_recycle(c, r);
        if (last) {
            c->close_after_write = true;
            break;
        }
    }
    /* A streaming answer that waited for its turn goes out now. */
    struct http_request *h = c->q_head;
    if (h && h->resp_begun && buf_unread(&h->resp) > 0 && !c->close_after_write) {
        buf_append(&c->out, buf_head(&h->resp), buf_unread(&h->resp));
        buf_reset(&h->resp);
    }
    /* Nothing left to answer on a closing or draining connection: close
     * once the output is written. */
    if (c->q_len == 0 && (c->closing || c->t->draining) && !http_parse_mid_request(&c->parse))
        c->close_after_write = true;
    conn_emit_continue(c);
    conn_write(c);
    if (c->fd < 0)
        return;
    /* A streaming answer at the head: its handler may send more now. */
    h = c->q_head;
    if (h && h->resp_begun && !h->responded && h->drain_fn &&
        buf_unread(&c->out) < CONN_OUT_LOW_WATER) {
        h->drain_fn(h, h->drain_arg);
        if (c->fd < 0)
            return;
    }
    /* Answers drain the pipeline: parse what waited behind the backpressure. */
    if (!c->in_process && conn_can_parse(c) && buf_unread(&c->in) > 0)
        conn_process_input(c);
    else
        conn_update_reading(c);
}

static enum http_conn_header conn_header_for(const struct http_request *r)
{
    if (r->close_after)
        return HTTP_CONN_CLOSE;
    return r->http_minor == 0 ? HTTP_CONN_KEEP_ALIVE : HTTP_CONN_DEFAULT;
}

/* Marks r answered. Returns false when the client is gone: r is then
 * unlinked and freed (and maybe its connection) and nothing is to be written. */
static bool conn_mark_answered(struct http_request *r, int status)
{
    struct http_conn *c = r->conn;
    r->responded = true;
    r->status = status;
    c->outstanding--;
    if (status >= 100 && status < 100 + SERVER_STATUSES) {
        _Atomic uint64_t *n = &c->t->responses[status - 100];   /* only this thread writes */
        atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    }
    if (r->accepted)
        atomic_fetch_sub_explicit(&c->t->inflight, 1, memory_order_relaxed);
    if (!r->aborted && c->fd >= 0)
        return true;
    if (c->fd >= 0 && c->read_eof) {
        /* A half-closed client's request that read the FIN as leaving,
         * dropped: it keeps its place as an empty answer that ends the
         * connection. The answers before it go out, in order; none after
         * it (each would be read as the answer before its own: the
         * pipeline one place off), and with nothing left the connection
         * closes. It stayed open, counted, until the idle timeout (60 s). */
        buf_reset(&r->resp);
        r->close_after = true;
        if (c->parse.cur == r)
            c->parse.cur = NULL;
        conn_hold(c);
        conn_flush(c);
        conn_release(c);
        return false;
    }
    struct http_request **pp = &c->q_head, *prev = NULL;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (*pp) {
        *pp = r->next;
        if (c->q_tail == r)
            c->q_tail = prev;
        c->q_len--;
    }
    if (c->parse.cur == r)
        c->parse.cur = NULL;
    http_request_free(r);
    conn_maybe_free(c);
    return false;
}

/* The last response of a closing or draining connection says so. A request
 * still being parsed is the tail, so `r == tail` means nothing else will
 * follow this answer. */
static void conn_decide_close(struct http_conn *c, struct http_request *r)
{
    if (!r->keep_alive || (r == c->q_tail && (c->closing || c->t->draining)))
        r->close_after = true;
    if (r->close_after)
        c->closing = true;
}

static void conn_respond(struct http_request *r, int status, const char *content_type,
                         const void *body, size_t len, const char *extra_headers)
{
    struct http_conn *c = r->conn;
    if (!conn_mark_answered(r, status))
        return;
    conn_hold(c);
    conn_decide_close(c, r);
    struct http_response resp = {
        .status = status,
        .content_type = content_type,
        .body = body,
        .body_len = len,
        .omit_body = r->method == HTTP_M_HEAD,
        .extra_headers = extra_headers,
        .conn = conn_header_for(r),
    };
    struct buf *dst = r == c->q_head ? &c->out : &r->resp;
    if (http_response_write(dst, &resp, io_thread_date(c->t)) < 0) {
        log_error("out of memory writing a %d response; closing the connection", status);
        conn_abort(c);
    } else if (r == c->q_head && !c->in_process) {
        conn_flush(c);
    }
    conn_release(c);
}

/* ---- streaming answers ---- */

/* Output for the socket: written from the loop, never from inside the
 * caller (a failed write closes the connection, which the caller could not
 * survive). A one-shot activation costs no system call; the answer's end
 * (http_respond_finish) usually writes everything first anyway. */
static void conn_want_write(struct http_conn *c, const struct buf *dst)
{
    if (dst == &c->out && !c->writing)
        event_active(c->ev_write, EV_WRITE, 0);
}

static int conn_respond_begin(struct http_request *r, int status, int64_t content_length,
                              int no_body, const char *headers, size_t headers_len)
{
    struct http_conn *c = r->conn;
    if (c->fd < 0)
        return -1;
    enum http_framing fr;
    r->resp_no_body = no_body || r->method == HTTP_M_HEAD;
    if (r->resp_no_body)
        fr = content_length >= 0 ? HTTP_FRAME_LENGTH : HTTP_FRAME_NONE;
    else if (content_length >= 0)
        fr = HTTP_FRAME_LENGTH;
    else if (r->http_minor >= 1)
        fr = HTTP_FRAME_CHUNKED;
    else
        fr = HTTP_FRAME_NONE, r->keep_alive = false;   /* HTTP/1.0: the close ends the body */
    r->resp_chunked = fr == HTTP_FRAME_CHUNKED;
    conn_decide_close(c, r);
    struct http_response resp = {
        .status = status,
        .framing = fr,
        .body_len = content_length >= 0 ? (size_t)content_length : 0,
        .omit_body = true,
        .extra_headers = headers_len ? headers : NULL,
        .extra_len = headers_len,
        .conn = conn_header_for(r),
    };
    struct buf *dst = r == c->q_head ? &c->out : &r->resp;
    if (http_response_write(dst, &resp, io_thread_date(c->t)) < 0)
        return -1;
    conn_want_write(c, dst);
    return 0;
}

static int conn_respond_write(struct http_request *r, const void *data, size_t len)
{
    struct http_conn *c = r->conn;
    if (c->fd < 0)
        return -1;
    if (r->resp_no_body || len == 0)
        return 0;
    struct buf *dst = r == c->q_head ? &c->out : &r->resp;
    int rc = 0;
    if (r->resp_chunked)
        rc = buf_appendf(dst, "%zx\r\n", len);
    if (rc == 0)
        rc = buf_append(dst, data, len);
    if (rc == 0 && r->resp_chunked)
        rc = buf_append(dst, "\r\n", 2);
    if (rc < 0)
        return -1;
    conn_want_write(c, dst);
    return 0;
}

static void conn_respond_finish(struct http_request *r, int broken)
{
    struct http_conn *c = r->conn;
    if (!conn_mark_answered(r, r->status))
        return;
    conn_hold(c);
    struct buf *dst = r == c->q_head ? &c->out : &r->resp;
    if (broken) {
        /* Cut short: closing is the only honest end of a framed body. */
        r->close_after = true;
        c->closing = true;
    } else if (r->resp_chunked && !r->resp_no_body && buf_append(dst, "0\r\n\r\n", 5) < 0) {
        r->close_after = true;
        c->closing = true;
    }
    if (r == c->q_head && !c->in_process)
        conn_flush(c);
    conn_release(c);
}

static size_t conn_respond_buffered(const struct http_request *r)
{
    const struct http_conn *c = r->conn;
    if (c->fd < 0)
        return 0;
    return r == c->q_head ? buf_unread(&c->out) : buf_unread(&r->resp);
}

static size_t conn_conn_buffered(const struct http_request *r)
{
    const struct http_conn *c = r->conn;
    return c->fd < 0 ? 0 : buf_unread(&c->out);
}

static void conn_body_paused_changed(struct http_request *r)
{
    struct http_conn *c = r->conn;
    bool paused = r->body_paused;
    if (c->fd < 0 || c->in_process)
        return;   /* the input loop re-checks on its next round */
    conn_hold(c);
    if (!paused)
        c->t_last_read = now_ns();   /* the body timer restarts: the wait was ours */
    if (!paused && conn_can_parse(c) && buf_unread(&c->in) > 0) {
        conn_process_input(c);
    } else {
        conn_update_reading(c);
        conn_arm_timer(c);
    }
    conn_release(c);
}

static void conn_peer(const struct http_request *r, char *out, size_t cap)
{
    struct http_conn *c = r->conn;
    if (!c->peer[0] && c->fd >= 0) {   /* once per connection */
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (getpeername(c->fd, (struct sockaddr *)&ss, &len) == 0) {
            if (ss.ss_family == AF_INET)
                inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, c->peer, sizeof c->peer);
            else if (ss.ss_family == AF_INET6)
                inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, c->peer,
                          sizeof c->peer);
        }
    }
    snprintf(out, cap, "%s", c->peer);
}

static struct io_thread *conn_thread(const struct http_request *r) { return r->conn->t; }

/* ---- input ---- */

/* The client sent FIN: the requests that read it as leaving are aborted;
 * the others are answered to the half-closed client, then it closes. */
static void conn_after_fin(struct http_conn *c)
{
    conn_abort_requests(c, true);
    if (c->fd < 0)
        return;
    if (c->q_len == 0 && buf_unread(&c->out) == 0) {
        conn_abort(c);
        return;
    }
    c->closing = true;
    conn_flush(c);
}

static void conn_on_fin_late(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    (void)fd;
    (void)what;
    if (c->fd >= 0)
        conn_after_fin(c);
    conn_release(c);
}

static void conn_fin_leaves(struct http_request *r)
{
    struct http_conn *c = r->conn;
    /* The FIN came while the request waited (for a model's load): it
     * leaves on the loop's next turn, not from inside its owner's call. */
    if (!c->read_eof || c->fd < 0 || r->responded || r->aborted)
        return;
    conn_hold(c);
    if (event_base_once(c->t->base, -1, EV_TIMEOUT, conn_on_fin_late, c,
                        &(struct timeval){0, 0}) != 0)
        conn_release(c);
}

static const struct http_proto conn_proto = {
    .respond = conn_respond,
    .respond_begin = conn_respond_begin,
    .respond_write = conn_respond_write,
    .respond_finish = conn_respond_finish,
    .respond_buffered = conn_respond_buffered,
    .conn_buffered = conn_conn_buffered,
    .body_paused = conn_body_paused_changed,
    .peer = conn_peer,
    .thread = conn_thread,
    .fin_leaves = conn_fin_leaves,
    .compresses = true,
};

static void conn_fail_request(struct http_conn *c, int status, const char *msg)
{
    struct http_request *r = c->parse.cur;
    if (r && r->streaming && !r->responded) {
        /* Its handler holds it: it learns why and answers (or, when its
         * answer has begun, nothing sensible can follow: close). */
        c->closing = true;
        c->parse.cur = NULL;
        c->parse.phase = HTTP_PHASE_IDLE;
        r->close_after = true;
        r->keep_alive = false;
        if (r->resp_begun || !r->body_fn) {
            conn_abort(c);
            return;
        }
        r->body_fn(r, r->body_arg, NULL, 0, 1, status, msg);
        return;
    }
    /* An error before any request began (out of memory) still gets an answer. */
    if (!r || r->responded || c->q_tail != r)
        r = conn_alloc_request(c);
    c->closing = true;
    if (!r) {
        conn_abort(c);
        return;
    }
    r->close_after = true;
    r->keep_alive = false;
    if (r->http_major == 0)
        r->http_minor = 1;
    /* The parser is done with this connection: no header or body timer. */
    c->parse.cur = NULL;
    c->parse.phase = HTTP_PHASE_IDLE;
    router_style(c->t->router, r);   /* worded for its route (OpenAI's shape) */
    http_respond_error(r, status, NULL, "%s", msg);
}

/* A body sent with a Content-Encoding is inflated before any handler sees
 * it (streaming routes, the proxy's, pass it on as sent); true when it
 * could not be, and the request was answered. */
static bool conn_decode_body(struct http_conn *c, struct http_request *r)
{
    size_t n;
    const char *enc = http_request_header(r, "Content-Encoding", &n);
    if (!enc || r->body.len == 0)
        return false;   /* no content, nothing to decode (GET /v2 with one was 400) */
    struct buf out = BUF_INIT;
    char msg[256];
    int status;
    int times = http_request_header_times(r, "Content-Encoding");
    if (times > 1) {
        /* Fields given twice are one list (RFC 9110 5.3): two codings,
         * which one field is refused for too. Only the first was undone,
         * and a proxy before us that undid both saw another body. */
        snprintf(msg, sizeof msg, "given in %d fields; one coding at most (gzip, deflate or "
                 "identity)", times);
        status = 415;
    } else {
        status = http_body_decode(enc, n, r->body.data, r->body.len,
                                  c->t->limits->max_body_bytes, &out, msg, sizeof msg);
    }
    if (status) {
        buf_free(&out);
        router_style(c->t->router, r);
        http_respond_error(r, status, NULL, "Content-Encoding: %s", msg);
        return true;
    }
    buf_free(&r->body);
    r->body = out;
    return false;
}

static void conn_dispatch(struct http_conn *c, struct http_request *r)
{
    r->t_received_ns = c->t_last_read;   /* the read that brought the last byte */
    r->accepted = true;
    atomic_fetch_add_explicit(&c->t->inflight, 1, memory_order_relaxed);
    if (c->parse.upgrade || !r->keep_alive) {
        r->keep_alive = false;
        c->closing = true;
    }
    if (c->t->draining) {
        r->close_after = true;
        c->closing = true;
        http_respond_error(r, 503, NULL, "the server is shutting down");
        return;
    }
    if (conn_decode_body(c, r))
        return;
    router_dispatch(c->t->router, r);
}

/* Hands the body read so far to a streaming request's handler. Runs only
 * inside conn_process_input, where nothing writes or closes synchronously,
 * so r outlives the call. */
static void conn_deliver_body(struct http_conn *c, struct http_request *r)
{
    (void)c;
    if (r->responded || !r->body_fn) {
        buf_reset(&r->body);   /* answered early: the rest of the body is read and dropped */
        return;
    }
    if (r->body.len == 0 && !r->body_done)
        return;
    r->body_fn(r, r->body_arg, r->body.len ? r->body.data : "", r->body.len, r->body_done, 0,
               NULL);
    /* The handler copied what it needed; r itself may be answered by now
     * (but not freed: the parser or the queue still holds it). */
    buf_reset(&r->body);
}

/* "Expect: 100-continue" asks whether the body is wanted before it is sent
 * (RFC 9110 10.1.1): a request that its route (404, 405) or the guard
 * (401, 403) would refuse is answered now, in place of the 100, and the
 * connection closes after that answer (its body is never read). Every
 * other request with a body is asked the same of its route and guard:
 * without a key, a gzip'ed body of 64 KB was read and inflated to 64 MiB
 * (~100 ms of the IO thread) before its 401. A route that streams decides
 * at its dispatch, below. */
static bool conn_refused_before_body(struct http_conn *c)
{
    struct http_request *r = c->parse.cur;
    if (!r || c->t->draining || c->parse.upgrade || router_streams(c->t->router, r))
        return false;
    bool keep = r->keep_alive, close = r->close_after;
    r->close_after = true;   /* said by the answer, if it is given now */
    r->keep_alive = false;
    if (r->expect_continue ? router_precheck(c->t->router, r)
                           : router_guard_early(c->t->router, r)) {
        r->close_after = close;
        r->keep_alive = keep;
        return false;
    }
    r->expect_continue = false;
    c->closing = true;
    c->parse.cur = NULL;
    c->parse.phase = HTTP_PHASE_IDLE;
    return true;
}

/* At the end of a request's headers: a route that streams takes it now. */
static void conn_dispatch_early(struct http_conn *c)
{
    struct http_request *r = c->parse.cur;
    if (!r || c->t->draining || c->parse.upgrade)
        return;
    if (!router_streams(c->t->router, r))
        return;
    r->streaming = true;
    r->accepted = true;
    atomic_fetch_add_explicit(&c->t->inflight, 1, memory_order_relaxed);
    /* A last request (HTTP/1.0, Connection: close) still has its body to
     * read: the connection stops parsing after it, at its end (below). */
    router_dispatch(c->t->router, r);
}

static void conn_process_input(struct http_conn *c)
{
    conn_hold(c);
    c->in_process = true;
    while (conn_can_parse(c) && buf_unread(&c->in) > 0) {
        size_t used;
        enum http_parse_event ev =
            http_parse_feed(&c->parse, buf_head(&c->in), buf_unread(&c->in), &used);
        buf_consume(&c->in, used);
        if (ev == HTTP_PARSE_MORE) {
            if (c->parse.cur && c->parse.cur->streaming)
                conn_deliver_body(c, c->parse.cur);
            break;
        }
        if (ev == HTTP_PARSE_HEADERS) {
            if (conn_refused_before_body(c))
                break;
            conn_emit_continue(c);
            conn_dispatch_early(c);
            if (c->fd < 0)
                break;
            continue;
        }
        if (ev == HTTP_PARSE_REQUEST) {
            struct http_request *r = c->parse.cur;
            c->parse.cur = NULL;
            if (r->streaming) {
                r->t_received_ns = c->t_last_read;
                r->body_done = true;
                if (!r->keep_alive)
                    c->closing = true;
                conn_deliver_body(c, r);
            } else {
                conn_dispatch(c, r);
            }
            if (c->fd < 0)
                break;
            continue;
        }
        conn_fail_request(c, c->parse.error_status, c->parse.error_msg);
        break;
    }
    c->in_process = false;
    if (c->fd >= 0) {
        if (c->closing && !conn_mid_stream(c))
            buf_reset(&c->in);
        else
            buf_compact(&c->in);
        /* A buffer of its own that is all parsed goes: the next read
         * borrows the thread's again. */
        if (!c->in_borrowed && buf_unread(&c->in) == 0)
            buf_free(&c->in);
        conn_flush(c);
    }
    conn_release(c);
}

/* The request the parser was in the middle of when the client stopped sending. */
static void conn_drop_partial(struct http_conn *c)
{
    struct http_request *r = c->parse.cur, **pp = &c->q_head, *prev = NULL;
    c->parse.cur = NULL;
    c->parse.phase = HTTP_PHASE_IDLE;
    if (!r || r->responded)
        return;
    while (*pp && *pp != r) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return;
    *pp = r->next;
    if (c->q_tail == r)
        c->q_tail = prev;
    c->q_len--;
    c->outstanding--;
    http_request_free(r);
}

static void conn_read(struct http_conn *c, int fd)
{
    if (c->lingering) {
        char sink[16384];
        ssize_t n = read(fd, sink, sizeof sink);
        if (n > 0) {
            c->linger_bytes += (size_t)n;
            if (c->linger_bytes <= CONN_LINGER_MAX_BYTES)
                return;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        }
        conn_abort(c);
        return;
    }
    conn_in_borrow(c);
    if (buf_reserve(&c->in, CONN_READ_CHUNK) < 0) {
        conn_in_return(c);
        conn_abort(c);
        return;
    }
    /* recvmsg for the kernel's receive timestamp of the oldest data read:
     * a request's budget counts from when it reached this host, so time it
     * spent queued in the socket while the thread was busy counts too. */
    struct iovec iov = {c->in.data + c->in.len, c->in.cap - c->in.len};
    union {
        char buf[CMSG_SPACE(sizeof(struct timespec))];
        struct cmsghdr align;
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(fd, &msg, 0);
    if (n > 0) {
        c->in.len += (size_t)n;
        c->t_last_read = now_ns();
        c->t_last_rx = c->t_last_read;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm))
            if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts, real;
                memcpy(&ts, CMSG_DATA(cm), sizeof ts);
                clock_gettime(CLOCK_REALTIME, &real);
                int64_t ago = ((int64_t)real.tv_sec - ts.tv_sec) * 1000000000 +
                              (real.tv_nsec - ts.tv_nsec);
                /* A wall clock step makes nonsense: then the read's own time. */
                if (ago > 0 && ago < 10 * (int64_t)1000000000)
                    c->t_last_rx = c->t_last_read - ago;
            }
        conn_process_input(c);
        if (conn_in_return(c) < 0)
            conn_abort(c);   /* out of memory for the unparsed rest */
        return;
    }
    int err = errno;
    conn_in_return(c);   /* nothing was added to it */
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK || err == EINTR))
        return;
    if (n < 0) {
        conn_abort(c);   /* reset */
        return;
    }
    /* FIN: the client will send nothing more, but may still read the answers
     * to what it sent (a half-close). A request cut off midway is dropped. */
    c->read_eof = true;
    conn_set_reading(c, false);
    if (c->parse.cur && c->parse.cur->streaming && !c->parse.cur->responded) {
        /* Accepted already (its handler streams it): it is answered like a
         * malformed body, and the half-closed client can still read that. */
        conn_fail_request(c, 400, "the client closed its side before the end of the request body");
        if (c->fd < 0)
            return;
    } else if (http_parse_mid_request(&c->parse)) {
        conn_drop_partial(c);
    }
    conn_after_fin(c);
}

static void conn_on_read(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    (void)what;
    conn_hold(c);
    conn_read(c, fd);
    conn_release(c);
}

static void conn_on_write(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    (void)fd;
    (void)what;
    conn_hold(c);
    conn_flush(c);
    conn_release(c);
}

/* ---- timers ---- */

enum conn_wait { WAIT_NONE, WAIT_FIRST_REQUEST, WAIT_HEADERS, WAIT_BODY, WAIT_WRITE, WAIT_IDLE };

static enum conn_wait conn_waiting_for(const struct http_conn *c, int64_t *deadline)
{
    const struct http_limits *lim = c->t->limits;
    int64_t header_ns = (int64_t)lim->header_timeout_ms * 1000000;
    int64_t idle_ns = (int64_t)lim->idle_timeout_ms * 1000000;
    if (c->parse.phase == HTTP_PHASE_HEAD) {
        *deadline = c->t_head_start + header_ns;
        return WAIT_HEADERS;
    }
    if (c->parse.phase == HTTP_PHASE_BODY && !conn_body_paused(c)) {
        *deadline = c->t_last_read + header_ns;
        return WAIT_BODY;
    }
    if (buf_unread(&c->out) > 0) {
        *deadline = c->t_last_write + idle_ns;
        return WAIT_WRITE;
    }
    if (c->q_len > 0)
        return WAIT_NONE;   /* handlers are working; requests carry their own deadlines */
    if (c->t_last_read == 0) {
        *deadline = c->t_accept + header_ns;
        return WAIT_FIRST_REQUEST;
    }
    int64_t last = c->t_last_read > c->t_last_write ? c->t_last_read : c->t_last_write;
    *deadline = last + idle_ns;
    return WAIT_IDLE;
}

static void conn_timer_at(struct http_conn *c, int64_t deadline, int64_t now)
{
    int64_t us = (deadline > now ? (deadline - now) / 1000 : 0) + 1;
    struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
    c->timer_deadline = deadline;
    conn_watch(c, c->ev_timer, &tv);
}

static void conn_arm_timer(struct http_conn *c)
{
    if (c->fd < 0 || c->lingering)
        return;
    int64_t deadline = 0;
    if (conn_waiting_for(c, &deadline) == WAIT_NONE)
        return;   /* a stale armed timer fires, finds nothing due and stays off */
    if (c->timer_deadline == 0 || deadline < c->timer_deadline)
        conn_timer_at(c, deadline, now_ns());
}

static void conn_timer_expired(struct http_conn *c)
{
    c->timer_deadline = 0;
    if (c->lost) {
        log_error("out of memory: cannot watch the connection of fd %d; closing it", c->fd);
        conn_abort(c);
        return;
    }
    if (c->lingering) {
        conn_abort(c);
        return;
    }
    int64_t deadline = 0, now = now_ns();
    enum conn_wait w = conn_waiting_for(c, &deadline);
    if (w == WAIT_NONE)
        return;
    if (deadline > now) {
        conn_timer_at(c, deadline, now);
        return;
    }
    /* The client's bytes stopped while answers it has not read are still
     * in the socket's send queue: a pipelining client that reads late with
     * a small receive buffer. Its kernel, fed segments it has no room for,
     * can hold its own sends back until it reads (a 408 here threw away
     * the answers the kernel held, 300 of them). That is a client not
     * reading its answers: idle_timeout_ms from the last write, then a
     * close as for any such client. */
    int unacked = 0;
    if ((w == WAIT_HEADERS || w == WAIT_BODY) && ioctl(c->fd, TIOCOUTQ, &unacked) == 0 &&
        unacked > 0) {
        int64_t idle_end = c->t_last_write + (int64_t)c->t->limits->idle_timeout_ms * 1000000;
        if (idle_end > now) {
            int64_t step = (int64_t)c->t->limits->header_timeout_ms * 1000000;
            conn_timer_at(c, now + step < idle_end ? now + step : idle_end, now);
            return;
        }
        conn_abort(c);
        return;
    }
    switch (w) {
    case WAIT_HEADERS:
        log_debug("fd %d: headers not complete within %d ms; 408", c->fd,
                  c->t->limits->header_timeout_ms);
        conn_fail_request(c, 408, "request headers not received within limits.header_timeout_ms");
        return;
    case WAIT_BODY:
        conn_fail_request(c, 408, "request body stalled longer than limits.header_timeout_ms");
        return;
    case WAIT_FIRST_REQUEST:
    case WAIT_WRITE:
    case WAIT_IDLE:
    default:
        conn_abort(c);
        return;
    }
}

static void conn_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct http_conn *c = arg;
    (void)fd;
    (void)what;
    conn_hold(c);
    conn_timer_expired(c);
    conn_release(c);
}

/* ---- lifecycle ---- */

struct http_conn *http_conn_new(struct io_thread *t, int fd)
{
    struct http_conn *c = calloc(1, sizeof *c);
    if (!c)
        goto fail;
    c->t = t;
    c->fd = fd;
    c->ev_read = event_new(t->base, fd, EV_READ | EV_PERSIST, conn_on_read, c);
    c->ev_write = event_new(t->base, fd, EV_WRITE | EV_PERSIST, conn_on_write, c);
    c->ev_timer = evtimer_new(t->base, conn_on_timer, c);
    if (!c->ev_read || !c->ev_write || !c->ev_timer)
        goto fail;
    http_parse_init(&c->parse, t->limits->max_header_bytes, t->limits->max_body_bytes,
                    conn_alloc_request, c);
    c->t_accept = now_ns();
    int one = 1;   /* receive timestamps (conn_read): best effort */
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    list_insert_head(&t->conns, &c->link);
    t->nconns++;
    conn_update_reading(c);
    conn_arm_timer(c);
    return c;

fail:
    if (c) {
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

static void conn_drain(struct http_conn *c)
{
    if (c->fd < 0 || c->lingering)
        return;
    if (c->q_len == 0 && !http_parse_mid_request(&c->parse) && buf_unread(&c->out) == 0) {
        /* Idle. A request that reached the socket since the pending pass
         * gets its answer (503: the server is draining) instead of a reset:
         * look once more right before closing, which narrows the race every
         * keep-alive close has with a crossing request to microseconds. */
        char probe;
        if (!c->read_eof && recv(c->fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
            conn_read(c, c->fd);
            if (c->fd >= 0 && (c->q_len > 0 || http_parse_mid_request(&c->parse) ||
                               buf_unread(&c->out) > 0)) {
                conn_flush(c);
                return;
            }
            if (c->fd < 0)
                return;
        }
        conn_abort(c);   /* idle: nothing to finish */
        return;
    }
    /* Busy: the last answer carries Connection: close (http_respond), and
     * conn_flush closes once everything accepted is written. */
    conn_flush(c);
}

static void conn_take_pending(struct http_conn *c)
{
    conn_hold(c);
    /* A few reads at most: what the kernel holds now, bounded by its buffer. */
    for (int i = 0; i < 64 && c->fd >= 0 && !c->read_eof && !c->lingering && conn_can_parse(c);
         i++) {
        char probe;
        ssize_t n = recv(c->fd, &probe, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n <= 0)
            break;
        conn_read(c, c->fd);
    }
    conn_release(c);
}

void http_conn_drain_all(struct io_thread *t)
{
    struct list *q, *tmp;
    list_foreach_safe(q, tmp, &t->conns)
        conn_take_pending(conn_from_link(q));   /* may free it */
    t->draining = true;
    list_foreach_safe(q, tmp, &t->conns) {
        struct http_conn *c = conn_from_link(q);
        conn_hold(c);
        conn_drain(c);
        conn_release(c);   /* may free it */
    }
}

uint64_t http_conn_abort_all(struct io_thread *t)
{
    uint64_t left = 0;
    struct list *q, *tmp;
    list_foreach_safe(q, tmp, &t->conns)
        left += conn_abort(conn_from_link(q));
    return left;
}

/* fuzz_http_conn.c - bytes from a client through the real connection code:
 * the http/ library (conn.c: reads, pipelining, ordering, lingering close;
 * parse.c: llhttp and the limits; router.c, request.c, response.c), driven
 * as one IO thread without a server.
 *
 * One connection per input, over a socketpair, on an event_base that this
 * harness pumps without blocking. The handlers answer at once, echo the
 * body, or answer a few loop passes later (so later pipelined requests
 * finish first and their answers must wait their turn). Under /stream/ a
 * prefix route streams, the way the reverse proxy does: the body arrives
 * piece by piece and is echoed piece by piece, pausing the body while the
 * answer is not written out.
 *
 * Input layout: byte 0 is flags (below), bytes 1 and 2 pick where the rest
 * is cut into three writes (k/255 of its length), the rest is what the
 * client sends. Each run must end with no connection, no open socket, no
 * request in flight and (LeakSanitizer) no memory left.
 *
 * The same harness runs in the normal test suite with allocations failing
 * (tests/oom/oom_replay.c): its own allocations then fail too, and its
 * handlers answer 503 as the real ones do.
 *
 * Timeouts are a minute long so they never fire: which timer fires would
 * depend on the machine's speed, and a fuzzer needs the same input to do the
 * same thing every time. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <linux/sockios.h>

#include "http/http_impl.h"

enum {
    F_HALF_CLOSE = 1 << 0,    /* send FIN after the input, then read the answers */
    F_DRAIN = 1 << 1,         /* a server drain begins after the first write */
    F_ABORT_ANSWERS = 1 << 2, /* a deferred request whose client left is answered in on_abort */
    F_SLOW_READER = 1 << 3,   /* read no answer until all input is written */
    F_NO_READ = 1 << 4,       /* close without reading the answers at all */
};

struct deferred {
    struct harness *h;
    struct http_request *req;
    struct event *ev;
    int passes;               /* loop passes left before answering */
};

/* One streaming echo (/stream/...). */
struct stream {
    struct harness *h;
    struct http_request *req;
    struct event *ev;         /* /stream/late: the answer ends one pass after the body */
    bool begun;
};

struct harness {
    struct event_base *base;
    struct http_limits limits;
    struct router *router;
    struct io_thread t;
    int ndeferred;            /* deferred answers and stream timers pending */
    int nstreams;             /* streams not finished */
    int closed;               /* io_thread_conn_closed calls this run */
    uint8_t flags;
    bool show;                /* BG_FUZZ_SHOW=1: copy the answers to stderr (debugging a crash) */
};

/* The server's part: a closed socket gives its slot back. */
static void harness_conn_closed(struct io_thread *t)
{
    struct harness *h = (struct harness *)((char *)t - offsetof(struct harness, t));
    h->closed++;
}

/* ---- handlers ---- */

static void h_live(struct http_request *req, const struct route_match *m, void *ctx)
{
    http_respond(req, 200, NULL, NULL, 0, NULL);
}

static void h_model(struct http_request *req, const struct route_match *m, void *ctx)
{
    const struct route_param *p = route_match_param(m, "model");
    char body[512];
    int n = snprintf(body, sizeof body, "{\"name\":\"%.*s\",\"ready\":true}",
                     (int)(p->len > 400 ? 400 : p->len), p->value);
    http_respond(req, 200, "application/json", body, (size_t)n, NULL);
}

static void h_echo(struct http_request *req, const struct route_match *m, void *ctx)
{
    size_t len;
    const char *body = http_request_body(req, &len);
    http_respond(req, 200, "application/octet-stream", body, len, NULL);
}

/* Looks at the query and a header, the way the infer handlers read
 * X-Request-Timeout-Ms and Inference-Header-Content-Length. */
static void h_query(struct http_request *req, const struct route_match *m, void *ctx)
{
    size_t qlen = 0, hlen = 0;
    const char *q = http_request_query(req, &qlen);
    const char *hv = http_request_header(req, "x-request-timeout-ms", &hlen);
    char body[256];
    int n = snprintf(body, sizeof body, "%s %.*s|%.*s", http_request_method_name(req),
                     (int)(qlen > 100 ? 100 : qlen), q ? q : "", (int)(hlen > 100 ? 100 : hlen),
                     hv ? hv : "");
    http_respond(req, 200, "text/plain", body, (size_t)n, NULL);
}

static void h_busy(struct http_request *req, const struct route_match *m, void *ctx)
{
    http_respond_error(req, 429, "Retry-After: 1\r\n", "queue of model %.*s is full",
                       (int)m->params[0].len, m->params[0].value);
}

static void deferred_free(struct deferred *d)
{
    d->h->ndeferred--;
    event_free(d->ev);
    free(d);
}

static void deferred_answer(struct deferred *d)
{
    struct http_request *req = d->req;
    deferred_free(d);
    static const char out[] = "{\"outputs\":[]}";
    http_respond(req, 200, "application/json", out, sizeof out - 1, NULL);
}

static void deferred_fire(evutil_socket_t fd, short what, void *arg)
{
    struct deferred *d = arg;
    if (d->passes-- > 0) {
        struct timeval zero = {0, 0};
        evtimer_add(d->ev, &zero);
        return;
    }
    deferred_answer(d);
}

static void deferred_abort(struct http_request *req, void *arg)
{
    struct deferred *d = arg;
    if (d->h->flags & F_ABORT_ANSWERS)
        deferred_answer(d);   /* like batcher_cancel answering at once */
}

/* Answers a few passes later, the way a batch completes through the mailbox:
 * the version digit says how many. */
static void h_deferred(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct harness *h = ctx;
    const struct route_param *v = route_match_param(m, "version");
    struct deferred *d = calloc(1, sizeof *d);
    if (d)
        d->ev = evtimer_new(h->base, deferred_fire, d);
    if (!d || !d->ev) {
        /* Out of memory (tests/oom injects it): refused, as real handlers do. */
        free(d);
        http_respond_error(req, 503, NULL, "out of memory");
        return;
    }
    d->h = h;
    d->req = req;
    d->passes = v->value[0] & 3;
    h->ndeferred++;
    http_request_on_abort(req, deferred_abort, d);
    struct timeval zero = {0, 0};
    evtimer_add(d->ev, &zero);
}

/* ---- streaming (a prefix route, like the reverse proxy) ---- */

/* Streamed answers pause the body above this much unwritten output. */
#define STREAM_HIGH_WATER 4096

static void stream_free(struct stream *s)
{
    /* The request outlives us until the connection is done with it. */
    http_request_on_abort(s->req, NULL, NULL);
    http_request_on_drain(s->req, NULL, NULL);
    if (s->ev) {
        if (evtimer_pending(s->ev, NULL))
            s->h->ndeferred--;
        event_free(s->ev);
    }
    s->h->nstreams--;
    free(s);
}

static void stream_end_later(evutil_socket_t fd, short what, void *arg)
{
    struct stream *s = arg;
    struct http_request *req = s->req;
    s->h->ndeferred--;
    event_free(s->ev);
    s->ev = NULL;
    stream_free(s);
    http_respond_finish(req, 0);
}

static void stream_body(struct http_request *req, void *arg, const char *data, size_t len,
                        int end, int status, const char *msg)
{
    struct stream *s = arg;
    if (!data) {
        /* The body failed midway (400, 413, 408): end the answer. */
        bool begun = s->begun;
        stream_free(s);
        if (begun)
            http_respond_finish(req, 1);
        else
            http_respond_error(req, status, NULL, "%s", msg);
        return;
    }
    if (!s->begun) {
        static const char hdr[] = "Content-Type: application/octet-stream\r\n";
        /* A declared length is kept (Content-Length framing); else chunked. */
        s->begun = true;
        http_respond_begin(req, 200, http_request_content_length(req), 0, hdr, sizeof hdr - 1);
    }
    http_respond_write(req, data, len);
    if (end) {
        if (s->ev) {
            struct timeval zero = {0, 0};
            evtimer_add(s->ev, &zero);
            s->h->ndeferred++;
            return;
        }
        stream_free(s);
        http_respond_finish(req, 0);
        return;
    }
    if (http_respond_buffered(req) > STREAM_HIGH_WATER)
        http_request_pause_body(req, 1);
}

static void stream_drain(struct http_request *req, void *arg)
{
    http_request_pause_body(req, 0);
}

static void stream_abort(struct http_request *req, void *arg)
{
    struct stream *s = arg;
    bool begun = s->begun;
    stream_free(s);
    if (begun)
        http_respond_finish(req, 1);
    else
        http_respond_error(req, 502, NULL, "client gone");   /* discarded */
}

static bool path_has(const struct http_request *req, const char *word)
{
    size_t len;
    const char *p = http_request_path(req, &len);
    size_t n = strlen(word);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(p + i, word, n) == 0)
            return true;
    return false;
}

static void h_stream(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct harness *h = ctx;
    if (path_has(req, "/reject")) {
        /* Answered at the end of the headers: the body is never read. */
        http_respond_error(req, 400, NULL, "refused before the body");
        return;
    }
    struct stream *s = calloc(1, sizeof *s);
    if (s && path_has(req, "/late") && !(s->ev = evtimer_new(h->base, stream_end_later, s))) {
        free(s);
        s = NULL;
    }
    if (!s) {
        http_respond_error(req, 503, NULL, "out of memory");   /* tests/oom */
        return;
    }
    s->h = h;
    s->req = req;
    h->nstreams++;
    http_request_on_abort(req, stream_abort, s);
    http_request_on_drain(req, stream_drain, s);
    http_request_on_body(req, stream_body, s);   /* last: may deliver at once */
}

/* ---- set-up, once per process ---- */

static struct harness *harness_new(void)
{
    struct harness *h = calloc(1, sizeof *h);
    struct error err = {0};
    if (!h || !(h->router = router_new()))
        abort();
    /* Small limits, so inputs reach them. */
    h->limits = (struct http_limits){.max_header_bytes = 4096,
                                       .max_body_bytes = 65536,
                                       .max_connections = 16,
                                       .header_timeout_ms = 60000,
                                       .idle_timeout_ms = 60000};
    static const struct {
        int methods;
        const char *pattern;
        route_handler_fn fn;
    } routes[] = {
        {HTTP_M_GET, "/v2/health/live", h_live},
        {HTTP_M_GET, "/v2/models/{model}", h_model},
        {HTTP_M_POST, "/v2/models/{model}/infer", h_echo},
        {HTTP_M_POST, "/v2/models/{model}/versions/{version}/infer", h_deferred},
        {HTTP_M_PUT | HTTP_M_DELETE, "/v2/repository/models/{model}/load", h_busy},
        {HTTP_M_GET | HTTP_M_POST | HTTP_M_OPTIONS | HTTP_M_PATCH, "/q", h_query},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (router_add(h->router, routes[i].methods, routes[i].pattern, routes[i].fn, h, &err))
            abort();
    if (router_add_prefix(h->router, "/stream/", h_stream, h, &err))
        abort();
    io_thread_init(&h->t);
    h->t.conn_closed = harness_conn_closed;
    h->t.limits = &h->limits;
    h->t.router = h->router;
    const char *show = getenv("BG_FUZZ_SHOW");
    h->show = show && strcmp(show, "1") == 0;
    return h;
}

static struct harness *harness;   /* the fuzzer's process-wide fixture */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    harness = harness_new();
    return 0;
}

/* ---- one client ---- */

/* Reads and discards what the server sent; returns the byte count. */
static size_t read_answers(const struct harness *h, int fd)
{
    char sink[65536];
    size_t total = 0;
    ssize_t n;
    while ((n = recv(fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
        total += (size_t)n;
        if (h->show)
            fwrite(sink, 1, (size_t)n, stderr);
    }
    return total;
}

/* Bytes the client sent that the server has not read yet. */
static int unread_by_server(int fd)
{
    int n = 0;
    return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
}

/* Runs the loop until nothing moves for a few passes: no answer bytes, no
 * deferred answer pending, no input taken by the server. fd is the client's
 * socket, or -1 once it is closed. */
static void pump(struct harness *h, int fd, bool read)
{
    int idle = 0, outq = fd >= 0 ? unread_by_server(fd) : 0;
    for (int pass = 0; pass < 100000 && idle < 3; pass++) {
        event_base_loop(h->base, EVLOOP_NONBLOCK);
        bool moved = h->ndeferred > 0;
        if (fd >= 0) {
            if (read && read_answers(h, fd) > 0)
                moved = true;
            int q = unread_by_server(fd);
            if (q != outq)
                moved = true;
            outq = q;
        }
        idle = moved ? 0 : idle + 1;
    }
}

/* Writes all of p unless the server stops reading for good. */
static void client_send(struct harness *h, int fd, const uint8_t *p, size_t n, bool read)
{
    int stuck = 0;
    while (n > 0 && stuck < 3) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            stuck = 0;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return;   /* the server closed: the rest is never read */
        /* A full socket: let the server read, and read its answers so it
         * can go on parsing (a slow reader gives in here). */
        pump(h, fd, true);
        stuck++;
    }
}

static void harness_drain(struct harness *h)
{
    http_conn_drain_all(&h->t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    struct harness *h = harness;
    h->flags = data[0];
    h->closed = 0;
    const uint8_t *in = data + 3;
    size_t n = size - 3;
    size_t cut[4] = {0, n * data[1] / 255, n * data[2] / 255, n};
    if (cut[1] > cut[2]) {
        size_t x = cut[1];
        cut[1] = cut[2];
        cut[2] = x;
    }

    /* A fresh event base per input, so libevent's own growth (its fd map,
     * its timer heap) happens in every run and meets tests/oom's failures. */
    if (!(h->base = event_base_new()))
        return 0;   /* out of memory (tests/oom) */
    h->t.base = h->base;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    if (!http_conn_new(&h->t, sv[0])) {
        /* Out of memory (tests/oom): the socket is closed and counted so. */
        close(sv[1]);
        if (h->closed != 1 || !list_empty(&h->t.conns) || (fcntl(sv[0], F_GETFD) != -1 || errno != EBADF))
            abort();
        event_base_free(h->base);
        h->base = h->t.base = NULL;
        return 0;
    }
    bool read = !(h->flags & (F_SLOW_READER | F_NO_READ));
    for (int i = 0; i < 3; i++) {
        client_send(h, sv[1], in + cut[i], cut[i + 1] - cut[i], read);
        pump(h, sv[1], read);
        if (i == 0 && (h->flags & F_DRAIN))
            harness_drain(h);
    }
    if (h->flags & F_HALF_CLOSE) {
        shutdown(sv[1], SHUT_WR);
        pump(h, sv[1], read);
        /* The client sent everything and reads: nothing it sent may be
         * left waiting for a timer (a body no one reads, an answer never
         * started). A paused stream of a client that does not read may. */
        if (read && atomic_load(&h->t.inflight) != 0) {
            fprintf(stderr, "%lld accepted request(s) unanswered after the client sent "
                    "everything and half-closed\n", (long long)atomic_load(&h->t.inflight));
            abort();
        }
        /* Nor may the connection itself: the server saw the FIN (or lost
         * its watch on the socket, tests/oom) and closed. */
        if (read && h->closed != 1) {
            fprintf(stderr, "the connection is still open after the client half-closed and "
                    "read every answer\n");
            abort();
        }
    }
    if (!(h->flags & F_NO_READ))
        pump(h, sv[1], true);
    close(sv[1]);
    pump(h, -1, false);

    /* Deferred answers come within four passes, and pump waits for them. */
    if (h->ndeferred)
        abort();
    /* What is left waits on a timer (lingering, idle keep-alive, a body
     * that never came): close it the way a forced stop does (streams are
     * told through on_abort), then free what remains as an exiting IO
     * thread does. */
    http_conn_abort_all(&h->t);
    if (h->nstreams || h->ndeferred)
        abort();   /* a stream was never ended, or its abort never came */
    http_conn_thread_free(&h->t);
    if (h->t.nconns != 0 || h->closed != 1)
        abort();   /* a connection counted twice, or never closed */
    if (atomic_load(&h->t.inflight) != 0)
        abort();   /* an accepted request was never answered */
    if (fcntl(sv[0], F_GETFD) != -1 || errno != EBADF)
        abort();   /* the server's socket leaked */
    h->t.draining = false;
    event_base_free(h->base);
    h->base = h->t.base = NULL;
    return 0;
}

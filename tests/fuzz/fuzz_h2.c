/* fuzz_h2.c - bytes from an HTTP/2 client through the real HTTP/2
 * connection code (http/h2.c on nghttp2: the preface, frames, HPACK, flow
 * control, the stream and flood limits, streams as requests of the request
 * core, answers with trailers), driven as one IO thread without a server,
 * the way fuzz_http_conn drives http/conn.c.
 *
 * One connection per input, over a socketpair, on an event_base that this
 * harness pumps without blocking. One prefix route, "/", answers every
 * stream the way the gRPC front end does (gateway/grpc.c: the body
 * collected by http_request_on_body, then trailers and an answer), in five
 * ways chosen by the path's last segment (the method):
 *   ...Ready...       at once, at the end of the headers (before any body:
 *                     the server resets the rest with NO_ERROR)
 *   ...Load...        at once, an error with extra headers (429,
 *                     Retry-After, and a Connection header HTTP/2 drops)
 *   ...Infer...       after the body, from a zero timer 0-3 loop passes
 *                     later (path length & 3), so resets, GOAWAY and the
 *                     close can come before the answer
 *   ...Metadata...    after the body, streamed (http_respond_begin, two
 *                     writes, finish); ...Statistics...: the same, broken
 *   anything else     after the body, at once (an echo)
 * An echo's body past 1024 bytes is refused mid-body (RESOURCE_EXHAUSTED,
 * like gRPC's message-size check), the rest of it unwanted; a body that
 * fails (413 past max_body_bytes, 400 a reset) is answered with the status
 * the library gives.
 *
 * Input layout: byte 0 is flags (below), byte 1 cuts the rest into two
 * writes (k/255 of its length), the rest is what the client sends after the
 * connection preface ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", which the harness
 * sends first unless flag 1 says the input carries its own, so a bad
 * preface is reached too). Limits: 1024 header bytes, 4096 body bytes, 8
 * concurrent streams, 8 KiB stream and 32 KiB connection windows, 16 KiB
 * frames, 10 resets and 20 control frames a second; the server's socket
 * has a 4 KiB send buffer, so its writes come back short.
 *
 * After each input: every deferred answer came (no timer left), every
 * stream the handler took was answered, the server closed its socket once
 * the client closed its own, and no connection is left behind (not even
 * one kept for streams it never dispatched); the socket closed exactly once;
 * nothing in flight; and in what the client read, no stream was reset with
 * NO_ERROR before the server's answer on it ended (RFC 9113 8.1: such a
 * reset follows a complete answer, else the answer never arrives). During
 * the run: no answer closes the connection under the handler giving it
 * (call_answer). Timeouts are a minute so they never fire (the same
 * input must do the same thing every time). BG_FUZZ_SHOW=1 copies the
 * server's bytes to stderr.
 *
 * The same harness runs in the normal test suite with allocations failing
 * (tests/oom/oom_replay.c: test_oom_h2); its handlers then answer 503. */
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

#include "common/log.h"
#include "http/http_impl.h"

enum {
    F_RAW = 1 << 0,           /* no preface from the harness: the input has its own (or not) */
    F_HALF_CLOSE = 1 << 1,    /* shut down the client's writing side after the input */
    F_DRAIN = 1 << 2,         /* a server drain (GOAWAY) after the first write */
    F_ABORT_ANSWERS = 1 << 3, /* a deferred answer whose stream went is given from on_abort */
    F_NO_READ = 1 << 4,       /* the client reads nothing until it closes */
    F_SEND_FAILS = 1 << 5,    /* the server's sends fail (EPIPE) after the first part */
};

#define MAX_MESSAGE 1024      /* an echo refuses bodies past this, mid-body */

enum kind { K_ECHO, K_LATER, K_STREAMED, K_BROKEN };

struct harness {
    struct event_base *base;
    struct http_limits limits;
    struct http_h2_config h2;
    struct router *router;
    struct io_thread t;
    struct log_gate flood_log;    /* the server's, as server_new gives it */
    int ncalls;               /* handler states not yet answered */
    int ndeferred;            /* zero timers pending */
    int closed;               /* io_thread_conn_closed calls this run */
    uint8_t flags;
    bool show;
    struct buf out;           /* what the server sent, for check_frames */
    bool out_cut;             /* not all of it (past OUT_KEEP, or a failed append) */
};

#define OUT_KEEP (4u << 20)

static void check(bool ok, const char *what);

/* One stream the handler took. */
struct call {
    struct harness *h;
    struct http_request *req;
    enum kind kind;
    struct buf body;
    struct event *ev;         /* K_LATER */
    int passes;
    bool pending;             /* ev is armed */
};

static void harness_conn_closed(struct io_thread *t)
{
    struct harness *h = (struct harness *)((char *)t - offsetof(struct harness, t));
    h->closed++;
}

/* The path's last segment (the gRPC method's name) holds `word`. */
static bool method_has(const struct http_request *req, const char *word)
{
    size_t len;
    const char *p = http_request_path(req, &len);
    size_t from = len, n = strlen(word);
    while (from > 0 && p[from - 1] != '/')
        from--;
    for (size_t i = from; i + n <= len; i++)
        if (memcmp(p + i, word, n) == 0)
            return true;
    return false;
}

/* ---- answers ---- */

/* The handler is done with the request: it forgets it. Its body callback
 * stays set: after an answer the library must not call it (http.h; conn.c
 * drops the rest of a body answered early). */
static void call_free(struct call *c)
{
    http_request_on_abort(c->req, NULL, NULL);
    if (c->ev) {
        if (c->pending)
            c->h->ndeferred--;
        event_free(c->ev);
    }
    buf_free(&c->body);
    c->h->ncalls--;
    free(c);
}

static void answer_ok(struct http_request *req, const struct buf *body)
{
    http_request_set_trailers(req, "grpc-status: 0\r\ngrpc-message: ok\r\n");
    http_respond(req, 200, "application/grpc", body->data, body->len, NULL);
}

static void answer_grpc_error(struct http_request *req, int code, const char *msg)
{
    char tr[160];
    snprintf(tr, sizeof tr, "grpc-status: %d\r\ngrpc-message: %s\r\n", code, msg);
    http_request_set_trailers(req, tr);
    http_respond(req, 200, "application/grpc", NULL, 0, NULL);
}

/* The whole answer, now, the way the call's kind gives it. No answer may
 * close the connection under the handler giving it: a send that fails
 * ends every stream's handler, and the caller still holds its request
 * (the gRPC front end's streamed answers crashed so, 67a2e0d); the
 * library writes from the loop instead (F_SEND_FAILS makes the send fail). */
static void call_answer(struct call *c)
{
    struct harness *h = c->h;
    int closed = h->closed;
    struct http_request *req = c->req;
    struct buf body = c->body;
    c->body = (struct buf)BUF_INIT;
    enum kind kind = c->kind;
    call_free(c);
    if (kind == K_STREAMED || kind == K_BROKEN) {
        static const char hdr[] = "Content-Type: application/grpc\r\nX-Streamed: yes\r\n";
        http_respond_begin(req, 200, -1, 0, hdr, sizeof hdr - 1);
        size_t half = body.len / 2;
        http_respond_write(req, body.data ? body.data : "", half);
        if (kind == K_BROKEN) {
            http_respond_finish(req, 1);
        } else {
            http_respond_write(req, body.data ? body.data + half : "", body.len - half);
            http_request_set_trailers(req, "grpc-status: 0\r\n");
            http_respond_finish(req, 0);
        }
    } else {
        answer_ok(req, &body);
    }
    buf_free(&body);
    check(h->closed == closed, "an answer closed the connection under the handler giving it");
}

static void call_fire(evutil_socket_t fd, short what, void *arg)
{
    struct call *c = arg;
    if (c->passes-- > 0) {
        struct timeval zero = {0, 0};
        evtimer_add(c->ev, &zero);
        return;
    }
    c->pending = false;
    c->h->ndeferred--;
    call_answer(c);
}

static void call_body(struct http_request *req, void *arg, const char *data, size_t len, int end,
                      int status, const char *msg)
{
    struct call *c = arg;
    if (!data) {
        /* The body failed (413 past max_body_bytes, 400 a reset): answered so. */
        call_free(c);
        http_respond_error(req, status, NULL, "%s", msg);
        return;
    }
    if (c->kind == K_ECHO && c->body.len + len > MAX_MESSAGE) {
        /* Refused mid-body: the rest is not wanted. */
        call_free(c);
        answer_grpc_error(req, 8, "message larger than 1024 bytes");
        return;
    }
    if (len && buf_append(&c->body, data, len) < 0) {
        call_free(c);
        http_respond_error(req, 503, NULL, "out of memory");   /* tests/oom */
        return;
    }
    if (!end)
        return;
    if (c->kind != K_LATER) {
        call_answer(c);
        return;
    }
    struct timeval zero = {0, 0};
    if (evtimer_add(c->ev, &zero) < 0) {
        call_free(c);
        http_respond_error(req, 503, NULL, "out of memory");   /* tests/oom */
        return;
    }
    c->pending = true;
    c->h->ndeferred++;
}

/* The stream went before its answer (reset, GOAWAY, the connection closed).
 * Only a deferred call can be here: the others answered with their body's end. */
static void call_abort(struct http_request *req, void *arg)
{
    struct call *c = arg;
    if (!(c->h->flags & F_ABORT_ANSWERS) || !c->pending)
        return;   /* its timer answers, into the void */
    event_del(c->ev);
    c->pending = false;
    c->h->ndeferred--;
    call_answer(c);
}

static void h_route(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct harness *h = ctx;
    if (method_has(req, "Ready")) {
        answer_grpc_error(req, 0, "ready");
        return;
    }
    if (method_has(req, "Load")) {
        http_respond_error(req, 429, "Retry-After: 1\r\nConnection: close\r\nX-Queue: full\r\n",
                           "queue full");
        return;
    }
    char peer[64];
    http_request_peer(req, peer, sizeof peer);   /* a socketpair's: "" */
    struct call *c = calloc(1, sizeof *c);
    if (!c) {
        http_respond_error(req, 503, NULL, "out of memory");   /* tests/oom */
        return;
    }
    c->h = h;
    c->req = req;
    c->body = (struct buf)BUF_INIT;
    c->kind = method_has(req, "Infer")        ? K_LATER
              : method_has(req, "Metadata")   ? K_STREAMED
              : method_has(req, "Statistics") ? K_BROKEN
                                            : K_ECHO;
    if (c->kind == K_LATER) {
        size_t plen;
        http_request_path(req, &plen);
        c->passes = (int)(plen & 3);
        if (!(c->ev = evtimer_new(http_request_event_base(req), call_fire, c))) {
            free(c);
            http_respond_error(req, 503, NULL, "out of memory");   /* tests/oom */
            return;
        }
    }
    h->ncalls++;
    http_request_on_abort(req, call_abort, c);
    http_request_on_body(req, call_body, c);
}

/* ---- set-up, once per process ---- */

static struct harness *harness_new(void)
{
    struct harness *h = calloc(1, sizeof *h);
    struct error err = {0};
    if (!h || !(h->router = router_new()))
        abort();
    h->limits = (struct http_limits){.max_header_bytes = 1024,
                                       .max_body_bytes = 4096,
                                       .max_connections = 16,
                                       .header_timeout_ms = 60000,
                                       .idle_timeout_ms = 60000};
    h->h2 = (struct http_h2_config){.listen_port = -1,
                                    .router = h->router,
                                    .max_concurrent_streams = 8,
                                    .initial_window_bytes = 8192,
                                    .connection_window_bytes = 32768,
                                    .max_frame_bytes = 16384,
                                    .max_resets_per_s = 10,
                                    .max_control_per_s = 20};
    if (router_add_prefix(h->router, "/", h_route, h, &err))
        abort();
    io_thread_init(&h->t);
    h->t.conn_closed = harness_conn_closed;
    h->t.limits = &h->limits;
    h->t.h2 = &h->h2;
    h->t.flood_log = &h->flood_log;
    h->t.router = h->router;
    const char *show = getenv("BG_FUZZ_SHOW");
    h->show = show && strcmp(show, "1") == 0;
    /* Each flood logs a warning: a million lines would slow the fuzzer
     * down, and say nothing (BG_FUZZ_SHOW=1 keeps them). */
    char msg[128];
    struct log *quiet = h->show ? NULL : log_open(NULL, LOG_ERROR, msg, sizeof msg);
    if (quiet)
        log_set_default(quiet);
    return h;
}

static struct harness *harness;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    harness = harness_new();
    return 0;
}

/* ---- the client ---- */

static size_t read_answers(struct harness *h, int fd)
{
    char sink[65536];
    size_t total = 0;
    ssize_t n;
    while ((n = recv(fd, sink, sizeof sink, MSG_DONTWAIT)) > 0) {
        total += (size_t)n;
        if (h->show)
            fwrite(sink, 1, (size_t)n, stderr);
        if (!h->out_cut && (h->out.len + (size_t)n > OUT_KEEP ||
                            buf_append(&h->out, sink, (size_t)n) < 0))
            h->out_cut = true;
    }
    return total;
}

static int unread_by_server(int fd)
{
    int n = 0;
    return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
}

/* Runs the loop until nothing moves for a few passes (fd: the client's
 * socket, or -1 once closed). */
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
            return;   /* the server closed */
        pump(h, fd, read);
        stuck++;
    }
}

static void check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_h2: %s\n", what);
        abort();
    }
}

/* The server's frames, as the client read them: a RST_STREAM(NO_ERROR)
 * only follows a complete answer on its stream (RFC 9113 8.1), so an
 * answer given before the client's body ended reached the client. */
static void check_frames(const struct harness *h)
{
    enum { TRACKED = 1024 };
    static uint8_t ended[TRACKED / 8];   /* streams (id / 2) the server ended */
    memset(ended, 0, sizeof ended);
    const uint8_t *p = (const uint8_t *)h->out.data;
    size_t left = h->out.len;
    while (left >= 9) {
        size_t len = (size_t)p[0] << 16 | (size_t)p[1] << 8 | p[2];
        uint8_t type = p[3], flags = p[4];
        uint32_t id = ((uint32_t)p[5] << 24 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 8 | p[8]) &
                      0x7fffffff;
        if (len > left - 9)
            break;   /* the connection closed mid-frame */
        bool tracked = id / 2 < TRACKED;
        if ((type == 0 || type == 1) && (flags & 1) && tracked)   /* DATA, HEADERS: END_STREAM */
            ended[id / 2 / 8] |= (uint8_t)(1u << (id / 2 % 8));
        if (type == 3 && len == 4 && tracked && (p[9] | p[10] | p[11] | p[12]) == 0 &&
            !(ended[id / 2 / 8] & (1u << (id / 2 % 8)))) {
            fprintf(stderr, "fuzz_h2: RST_STREAM(NO_ERROR) on stream %u before its answer "
                    "ended (the answer is lost)\n", id);
            abort();
        }
        p += 9 + len;
        left -= 9 + len;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    if (size < 2)
        return 0;
    struct harness *h = harness;
    h->flags = data[0];
    h->closed = 0;
    buf_reset(&h->out);
    h->out_cut = false;
    const uint8_t *in = data + 2;
    size_t n = size - 2, cut = n * data[1] / 255;

    /* A fresh event base per input, as fuzz_http_conn (libevent's growth
     * meets tests/oom's failures in every run). */
    if (!(h->base = event_base_new()))
        return 0;
    h->t.base = h->base;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    /* A small send buffer: the server's writes come back short and it
     * waits for the socket (h2_on_write), as with a slow client. */
    int sndbuf = 4096;
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (!h2_conn_new(&h->t, sv[0])) {
        /* Out of memory (tests/oom): the socket is closed and counted so. */
        close(sv[1]);
        check(h->closed == 1 && list_empty(&h->t.h2conns) && h->t.nconns == 0,
              "a connection that failed to start was not closed once");
        check(fcntl(sv[0], F_GETFD) == -1 && errno == EBADF, "the server's socket leaked");
        event_base_free(h->base);
        h->base = h->t.base = NULL;
        return 0;
    }
    bool read = !(h->flags & F_NO_READ);
    if (!(h->flags & F_RAW))
        client_send(h, sv[1], (const uint8_t *)preface, sizeof preface - 1, read);
    client_send(h, sv[1], in, cut, read);
    pump(h, sv[1], read);
    if (h->flags & F_DRAIN)
        h2_conn_drain_all(&h->t);
    if (h->flags & F_SEND_FAILS)
        shutdown(sv[0], SHUT_WR);
    client_send(h, sv[1], in + cut, n - cut, read);
    pump(h, sv[1], read);
    if (h->flags & F_HALF_CLOSE) {
        shutdown(sv[1], SHUT_WR);
        pump(h, sv[1], read);
    }
    if (read)
        pump(h, sv[1], true);
    close(sv[1]);
    pump(h, -1, false);

    check(h->ndeferred == 0, "a deferred answer never came");
    check(h->ncalls == 0, "a stream the handler took was never ended");
    check(h->closed == 1, "the server kept its socket after the client closed");
    check(list_empty(&h->t.h2conns) && h->t.nconns == 0,
          "a closed connection with every stream answered was not freed");
    check(atomic_load(&h->t.inflight) == 0, "an accepted stream was never answered");
    if (!h->out_cut)
        check_frames(h);
    buf_shrink(&h->out, 64u << 10);
    /* What a forced stop and an exiting IO thread do, in case the checks
     * above are ever relaxed: nothing should be left for them. */
    h2_conn_abort_all(&h->t);
    h2_conn_thread_free(&h->t);
    check(h->closed == 1, "the socket was closed twice");
    check(fcntl(sv[0], F_GETFD) == -1 && errno == EBADF, "the server's socket leaked");
    h->t.draining = false;
    event_base_free(h->base);
    h->base = h->t.base = NULL;
    return 0;
}

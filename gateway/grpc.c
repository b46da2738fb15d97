/* grpc.c - see grpc.h. A call's path: grpc_route (headers) →
 * grpc_call_body (the message arrives) → grpc_call_take → grpc_msg_start
 * (unframe, inflate, grpc_to_http, http_inner_dispatch) → the HTTP handler
 * → grpc_msg_done (grpc_from_http, framed answer and trailers). */
#include "gateway/grpc.h"

#include <stdatomic.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>
#include <jansson.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/utf8.h"
#include "gateway/grpc_codec.h"
#include "http/http.h"
#include "serving/tensor_json.h"

#define GRPC_SERVICE_PREFIX "/inference.GRPCInferenceService/"

/* A ModelStreamInfer stream's messages are taken (started as inferences)
 * only while the stream has room: fewer than GRPC_STREAM_RUNNING_MAX of
 * them running, and its answers not yet sent below GRPC_STREAM_OUT_HIGH
 * bytes (once over, until they are below GRPC_STREAM_OUT_LOW: a client
 * that does not read). Without room, its body is stopped: the client may
 * send at most its HTTP/2 window more, which waits in call->in; so a
 * stream holds bounded memory however many messages its client sends. An
 * answer's end makes room; a client that reads is noticed by polling every
 * GRPC_STREAM_OUT_POLL_MS while the answers wait. */
#define GRPC_STREAM_RUNNING_MAX 128
#define GRPC_STREAM_OUT_HIGH (1u << 20)
#define GRPC_STREAM_OUT_LOW (256u << 10)
#define GRPC_STREAM_OUT_POLL_MS 10

/* A connection's answers in the works: each message started reserves the
 * size its handler says its answer will be (http_request_answer_expected:
 * an inference's outputs, said when its rows are known, before it is
 * computed), until the answer is written; with those written and not yet
 * sent (a client that reads nothing, its windows shut) past
 * GRPC_CONN_ANSWERS_HIGH, no call of the connection starts another
 * message until they go out. A message whose handler has not said yet (a
 * lazy load under way) reserves the largest answer written there, and at
 * most GRPC_CONN_UNREPORTED_MAX such run. The bounds per stream above did
 * not bound the connection: 128 messages of a stream were taken before
 * any answer existed, and 256 streams of answers sat behind shut windows
 * (1 MiB answers: 740 MB held by one connection; the gRPC audit). Guessed
 * from the answers written alone, a first answer of 100 bytes (an error)
 * let 200 MB be held, and 16 MiB halved a reading client's batches of
 * 1 MiB answers (the re-test): 64 MiB leaves batches of 64 such. */
#define GRPC_CONN_ANSWERS_HIGH (64u << 20)
#define GRPC_CONN_UNREPORTED_MAX 64

#define GRPC_CODES 17   /* OK .. UNAUTHENTICATED */

/* A message this large (or compressed) costs enough to read that its
 * caller is checked first (grpc_service_set_caller_check). */
#define GRPC_EARLY_CHECK_BYTES 65536

struct grpc_service {
    const struct router *http;
    size_t max_message_bytes;
    bool (*caller_ok)(const struct http_request *req, void *ctx);
    void *caller_ctx;
    /* For /metrics: [method][code], the last method "other". */
    _Atomic uint64_t (*calls)[GRPC_CODES];
    _Atomic uint64_t stream_messages[2];   /* error, ok */
    _Atomic int64_t streams_open;
};

static void grpc_count(struct grpc_service *g, const struct grpc_method *m, int code)
{
    int i = m ? grpc_method_index(m) : grpc_method_count();
    if (code >= 0 && code < GRPC_CODES)
        atomic_fetch_add_explicit(&g->calls[i][code], 1, memory_order_relaxed);
}

struct grpc_call;

/* One message's HTTP request, while it runs. */
struct grpc_msg {
    struct grpc_msg *next, *prev;
    struct grpc_call *call;
    struct http_request *inner;
    struct buf echo;                 /* its model, version and id (grpc_http_request) */
    size_t reserved;                 /* of the connection's answers (grpc_conn_reserve) */
    bool unreported;                 /* its handler has not said its answer's size */
};

struct grpc_call {
    struct grpc_service *g;
    struct http_request *req;        /* the HTTP/2 stream */
    const struct grpc_method *m;
    bool stream;                     /* ModelStreamInfer: messages both ways */
    bool drained;                    /* the server drains: it ends UNAVAILABLE, not OK */
    enum http_coding coding;         /* the stream's answers' grpc-encoding */
    bool open;                       /* counted in streams_open */
    struct buf in;                   /* request bytes not yet a whole message */
    struct grpc_msg *running;        /* messages whose HTTP request runs */
    int nrunning;
    int nmsgs;                       /* messages taken */
    bool ended;                      /* the client's side is over */
    bool taking;                     /* in grpc_call_take: a nested call returns */
    bool out_full;                   /* answers over GRPC_STREAM_OUT_HIGH, not yet below LOW */
    struct event *out_poll;          /* while out_full: looks again for room */
    struct event *deadline;          /* grpc-timeout's: the call ends DEADLINE_EXCEEDED */
    long long timeout_ms;
    bool answered;                   /* the stream's answer is finished: req is gone */
    int holds;                       /* our functions on the stack: defer the free */
    /* Failed or abandoned while HTTP requests ran: they are stopped, and
     * the call ends with this once the last is answered. Not before: an
     * answered stream lets its connection, and at shutdown its IO thread,
     * go, while an inference would still come back to that thread. */
    bool stopping;
    int stop_code;
    char stop_msg[512];
    /* A stream refused its next message (over max_body_bytes): no more is
     * read, and once the messages taken are answered it ends with this. */
    int last_code;
};

/* ---- answering ---- */

/* grpc-message is percent-encoded UTF-8 (the protocol's rule: bytes
 * outside printable ASCII, and '%', encoded). Cut at a character, never
 * inside one, and a byte that is not UTF-8 (a message cut short before
 * it came here) is '?': clients decode the text as UTF-8. */
static void grpc_pct_encode(const char *msg, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)msg;
    size_t k = 0, n = strlen(msg);
    for (size_t i = 0; i < n;) {
        size_t len = utf8_seq_len(p + i, n - i);
        const unsigned char *c = len ? p + i : (const unsigned char *)"?";
        size_t clen = len ? len : 1;
        size_t need = clen == 1 && c[0] >= 0x20 && c[0] <= 0x7e && c[0] != '%' ? 1 : 3 * clen;
        if (k + need >= cap)
            break;
        for (size_t j = 0; j < clen; j++) {
            if (need == 1) {
                out[k++] = (char)c[j];
            } else {
                out[k++] = '%';
                out[k++] = hex[c[j] >> 4];
                out[k++] = hex[c[j] & 15];
            }
        }
        i += len ? len : 1;
    }
    out[k] = '\0';
}

/* The compression the client takes for its answers (grpc-accept-encoding)
 * when the server's settings ask for it (http.h "compressed answers"). */
static enum http_coding grpc_answer_coding(struct http_request *req)
{
    const struct http_compression *c = http_request_compression(req);
    size_t l;
    const char *v = http_request_header(req, "grpc-accept-encoding", &l);
    return c && c->grpc && v ? http_coding_pick(v, l) : HTTP_CODING_IDENTITY;
}

/* Appends one length-prefixed message: compressed as `coding` (flag 1)
 * when it is min_bytes or more and shrinks, else as it is (flag 0, which
 * the protocol allows under any grpc-encoding). Returns whether it was
 * compressed, or -1 out of memory. */
static int grpc_frame(struct http_request *req, enum http_coding coding, const void *msg,
                      size_t len, struct buf *out)
{
    const struct http_compression *c = http_request_compression(req);
    size_t at = out->len;
    if (buf_append(out, "\0\0\0\0\0", 5) < 0)
        return -1;
    bool packed = false;
    if (coding != HTTP_CODING_IDENTITY && c && len >= (size_t)c->min_bytes && len > 0) {
        if (http_request_deflate(req, coding, msg, len, out) == 0 && out->len - at - 5 < len)
            packed = true;
        else
            out->len = at + 5;   /* it did not shrink (or no memory): as it is */
    }
    if (!packed && len && buf_append(out, msg, len) < 0)
        return -1;
    size_t n = out->len - at - 5;
    uint8_t hdr[5] = {packed, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8),
                      (uint8_t)n};
    memcpy(out->data + at, hdr, 5);
    return packed;
}

/* Every answer says what the server reads (the compression spec: a
 * server MUST when it refuses an encoding with UNIMPLEMENTED; grpc-core
 * sends it always), so a client can pick another at once. */
#define GRPC_ACCEPT_ENCODING "grpc-accept-encoding: identity,deflate,gzip\r\n"

/* Answers the call: the message (framed) when code is OK, else the error
 * with its message; retry_after_s > 0 adds that trailer (a 429's). */
static void grpc_answer(struct http_request *req, int code, const char *msg, const void *body,
                        size_t len, long long retry_after_s)
{
    char enc[1600], trailers[1800];
    grpc_pct_encode(msg ? msg : "", enc, sizeof enc);
    int n = snprintf(trailers, sizeof trailers, "grpc-status: %d\r\n", code);
    if (code != GRPC_OK && enc[0])
        n += snprintf(trailers + n, sizeof trailers - (size_t)n, "grpc-message: %s\r\n", enc);
    if (retry_after_s > 0)
        snprintf(trailers + n, sizeof trailers - (size_t)n, "retry-after: %lld\r\n",
                 retry_after_s);
    http_request_set_trailers(req, trailers);
    if (code != GRPC_OK || !body) {
        http_respond(req, 200, "application/grpc", NULL, 0, GRPC_ACCEPT_ENCODING);
        return;
    }
    struct buf framed = BUF_INIT;
    enum http_coding coding = grpc_answer_coding(req);
    int packed = grpc_frame(req, coding, body, len, &framed);
    if (packed < 0) {
        buf_free(&framed);
        grpc_answer(req, GRPC_RESOURCE_EXHAUSTED, "out of memory framing the answer", NULL, 0, 0);
        return;
    }
    char head[128];
    snprintf(head, sizeof head, GRPC_ACCEPT_ENCODING "%s%s%s", packed ? "grpc-encoding: " : "",
             packed ? http_coding_name(coding) : "", packed ? "\r\n" : "");
    http_respond(req, 200, "application/grpc", framed.data, framed.len, head);
    buf_free(&framed);
}

static void grpc_call_free(struct grpc_call *call)
{
    if (call->open)
        atomic_fetch_sub_explicit(&call->g->streams_open, 1, memory_order_relaxed);
    if (call->out_poll)
        event_free(call->out_poll);
    if (call->deadline)
        event_free(call->deadline);
    buf_free(&call->in);
    free(call);
}

/* A finished call is freed once its last HTTP request is answered. */
static void grpc_call_maybe_free(struct grpc_call *call)
{
    if (call->answered && call->nrunning == 0 && call->holds == 0)
        grpc_call_free(call);
}

/* ---- the connection's answers in the works (GRPC_CONN_ANSWERS_HIGH) ---- */

/* Whether the call's connection may start another message now. The walk
 * over the connection's streams (http_conn_buffered) is bounded by
 * max_concurrent_streams and is small beside decoding the message. */
static bool grpc_conn_room(struct grpc_call *call)
{
    struct http_conn_answers *a = http_request_conn_answers(call->req);
    if (!a)
        return true;
    if (a->unreported >= GRPC_CONN_UNREPORTED_MAX)
        return false;
    return a->reserved + http_conn_buffered(call->req) < GRPC_CONN_ANSWERS_HIGH;
}

static void grpc_conn_reserve(struct grpc_call *call, struct grpc_msg *m)
{
    struct http_conn_answers *a = http_request_conn_answers(call->req);
    if (!a)
        return;
    m->reserved = a->largest;
    m->unreported = true;
    a->reserved += m->reserved;
    a->unreported++;
}

/* Takes m's reservation off its connection; the connection's books, or
 * NULL once the call is answered (its stream may be gone). */
static struct http_conn_answers *grpc_conn_unreserve(struct grpc_call *call, struct grpc_msg *m)
{
    struct http_conn_answers *a = call->answered ? NULL : http_request_conn_answers(call->req);
    if (!a)
        return NULL;
    a->reserved -= m->reserved < a->reserved ? m->reserved : a->reserved;
    a->unreported -= m->unreported && a->unreported > 0;
    m->reserved = 0;
    m->unreported = false;
    return a;
}

/* The message's handler says how large its answer will be. */
static void grpc_msg_expected(void *arg, size_t bytes)
{
    struct grpc_msg *m = arg;
    struct http_conn_answers *a = grpc_conn_unreserve(m->call, m);
    if (!a)
        return;
    a->reserved += bytes;
    m->reserved = bytes;
}

/* m's answer came, of `len` bytes (0: none to write), or the call ended:
 * its reservation goes. */
static void grpc_conn_release(struct grpc_call *call, struct grpc_msg *m, size_t len)
{
    struct http_conn_answers *a = grpc_conn_unreserve(call, m);
    if (a && len > a->largest)
        a->largest = len;
}

/* The unary answer, or a streaming call's end (its status in the
 * trailers). Once. */
static void grpc_call_end(struct grpc_call *call, int code, const char *msg, const void *body,
                          size_t len, long long retry_after_s)
{
    if (call->answered)
        return;
    /* The answers of its messages still running will not be written. */
    for (struct grpc_msg *m = call->running; m; m = m->next)
        grpc_conn_release(call, m, 0);
    call->answered = true;
    grpc_count(call->g, call->m, code);
    if (!call->stream) {
        grpc_answer(call->req, code, msg, body, len, retry_after_s);
        return;
    }
    char enc[1600], trailers[1800];
    grpc_pct_encode(msg ? msg : "", enc, sizeof enc);
    int n = snprintf(trailers, sizeof trailers, "grpc-status: %d\r\n", code);
    if (code != GRPC_OK && enc[0])
        snprintf(trailers + n, sizeof trailers - (size_t)n, "grpc-message: %s\r\n", enc);
    http_request_set_trailers(call->req, trailers);
    http_respond_finish(call->req, 0);
}

/* Stops every running HTTP request (the client went away, or the call
 * failed): their answers come back all the same, and are dropped. */
static void grpc_call_stop_all(struct grpc_call *call)
{
    for (struct grpc_msg *m = call->running, *next; m; m = next) {
        next = m->next;
        http_inner_abort(m->inner);
    }
}

/* Ends the call with code and msg once no HTTP request of it runs,
 * stopping those that do. */
static void grpc_call_fail(struct grpc_call *call, int code, const char *msg)
{
    if (call->answered || call->stopping)
        return;
    if (call->nrunning == 0) {
        grpc_call_end(call, code, msg, NULL, 0, 0);
        return;
    }
    call->stopping = true;
    call->stop_code = code;
    snprintf(call->stop_msg, sizeof call->stop_msg, "%.500s", msg ? msg : "");
    grpc_call_stop_all(call);
}

/* A message of a stream written back framed; -1 when the client is gone.
 * A write whose send fails closes the connection at once, and the call
 * may have ended inside it (its request freed with the stream): nothing
 * more is written then. The caller holds the call (grpc_msg_done). */
static int grpc_stream_write(struct grpc_call *call, const struct buf *msg)
{
    struct buf framed = BUF_INIT;
    int rc = grpc_frame(call->req, call->coding, msg->data, msg->len, &framed) < 0
                 ? -1 : http_respond_write(call->req, framed.data, framed.len);
    buf_free(&framed);
    return rc < 0 || call->answered || call->stopping ? -1 : 0;
}

/* A stream's message that failed before or instead of its HTTP request:
 * the stream goes on (Triton's rule: the error is that response's), and
 * the response names the request's model, version and id when they could
 * be read (echo), so that the client knows which of its requests failed. */
static void grpc_stream_error(struct grpc_call *call, const char *err, const struct buf *echo)
{
    atomic_fetch_add_explicit(&call->g->stream_messages[0], 1, memory_order_relaxed);
    struct buf out = BUF_INIT;
    if (grpc_stream_response(echo ? echo->data : NULL, echo ? echo->len : 0, err, &out) < 0 ||
        grpc_stream_write(call, &out) < 0)
        grpc_call_fail(call, GRPC_UNAVAILABLE, "the client is gone");
    buf_free(&out);
}

/* Retry-After's seconds in "Name: value\r\n" lines; 0 when absent. */
static long long grpc_retry_after(const char *headers)
{
    for (const char *p = headers; p && *p;) {
        if (strncasecmp(p, "Retry-After:", 12) == 0)
            return strtoll(p + 12, NULL, 10);
        const char *eol = strstr(p, "\r\n");
        p = eol ? eol + 2 : NULL;
    }
    return 0;
}

static void grpc_call_take(struct grpc_call *call);
static void grpc_call_check_end(struct grpc_call *call);

/* A message's HTTP request answered (on the IO thread). */
static void grpc_msg_done(void *arg, int status, const char *content_type, const void *body,
                          size_t len, const char *headers)
{
    (void)content_type;
    struct grpc_msg *m = arg;
    struct grpc_call *call = m->call;
    if (m->prev)
        m->prev->next = m->next;
    else
        call->running = m->next;
    if (m->next)
        m->next->prev = m->prev;
    call->nrunning--;
    /* Released before its answer is written: from then on it is counted
     * as written and unsent (http_conn_buffered) until it goes out. The
     * largest answer learned is the body's size, framed about as large. */
    grpc_conn_release(call, m, len);
    struct buf echo = m->echo;
    free(m);
    /* Writing may end the connection at once (a send that fails closes the
     * socket, and the stream's end comes back through grpc_call_body, which
     * would free the call): it is held until this function is done. */
    call->holds++;
    if (call->answered || call->stopping) {   /* stopped: nobody wants it */
        if (call->stopping && call->nrunning == 0)
            grpc_call_end(call, call->stop_code, call->stop_msg, NULL, 0, 0);
        buf_free(&echo);
        call->holds--;
        grpc_call_maybe_free(call);
        return;
    }
    struct grpc_http_answer a = {.status = status, .body = body, .len = len, .headers = headers};
    struct buf out = BUF_INIT;
    char err[1024] = "";
    int code = grpc_from_http(call->m, &a, &out, err, sizeof err);
    if (!call->stream) {
        grpc_call_end(call, code, err, out.data ? out.data : "", out.len,
                      code == GRPC_OK ? 0 : grpc_retry_after(headers));
    } else if (code != GRPC_OK) {
        grpc_stream_error(call, err, &echo);
    } else {
        atomic_fetch_add_explicit(&call->g->stream_messages[1], 1, memory_order_relaxed);
        struct buf wrapped = BUF_INIT;
        if (grpc_stream_response(out.data, out.len, NULL, &wrapped) < 0 ||
            grpc_stream_write(call, &wrapped) < 0)
            grpc_call_fail(call, GRPC_UNAVAILABLE, "the client is gone");
        buf_free(&wrapped);
    }
    buf_free(&out);
    buf_free(&echo);
    if (call->stream) {   /* room for the messages that waited, or the end */
        grpc_call_take(call);   /* which says where the body stands */
        grpc_call_check_end(call);
    }
    call->holds--;
    grpc_call_maybe_free(call);
}

/* ---- the request ---- */

/* The free function of a ModelInfer head handed to the inner request. */
static void grpc_json_release(void *j) { json_decref(j); }

/* grpc-timeout ("100m", "5S", ...: at most 8 digits and a unit) in
 * milliseconds, rounded up; -1 when absent, -2 when malformed. */
static long long grpc_timeout_ms(struct http_request *req)
{
    size_t len;
    const char *v = http_request_header(req, "grpc-timeout", &len);
    if (!v)
        return -1;
    if (len < 2 || len > 9)
        return -2;
    long long x = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -2;
        x = x * 10 + (v[i] - '0');
    }
    switch (v[len - 1]) {
    case 'H': return x * 3600000;
    case 'M': return x * 60000;
    case 'S': return x * 1000;
    case 'm': return x;
    case 'u': return (x + 999) / 1000;
    case 'n': return (x + 999999) / 1000000;
    default: return -2;
    }
}

/* The call's metadata become the HTTP request's headers, but for what is
 * the gRPC framing's own, and what describes the HTTP body the codec
 * writes (metadata "inference-header-content-length: 5" was read as the
 * body's and the call refused, blaming an HTTP header the client never
 * sent; "content-encoding" would have the body inflated: the gRPC audit). */
static bool grpc_header_passes(const char *name, size_t len)
{
    static const char *const own[] = {"content-type", "content-length", "te", "host",
                                      "inference-header-content-length", "content-encoding",
                                      "transfer-encoding"};
    if (len >= 5 && strncasecmp(name, "grpc-", 5) == 0)
        return false;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strlen(own[i]) == len && strncasecmp(own[i], name, len) == 0)
            return false;
    return true;
}

/* One framed message (flag, length, bytes) as its HTTP request, started.
 * Returns GRPC_OK, or a code with the reason in err (nothing started) and
 * the request's echo in *echo when it could be read (the caller frees it). */
static int grpc_msg_start(struct grpc_call *call, const uint8_t *p, size_t mlen, char *err,
                          size_t cap, struct buf *echo)
{
    struct http_request *req = call->req;
    struct buf inflated = BUF_INIT;
    const uint8_t *msg = p + 5;
    if ((p[0] == 1 || mlen > GRPC_EARLY_CHECK_BYTES) && call->g->caller_ok &&
        !call->g->caller_ok(req, call->g->caller_ctx)) {
        snprintf(err, cap, "no API key this server knows: send it as the metadata "
                 "\"authorization: Bearer KEY\" or \"x-api-key: KEY\"");
        return GRPC_UNAUTHENTICATED;
    }
    if (p[0] == 1) {   /* compressed, by grpc-encoding */
        size_t elen;
        const char *enc = http_request_header(req, "grpc-encoding", &elen);
        if (!enc || elen == 0 || (elen == 8 && strncasecmp(enc, "identity", 8) == 0)) {
            /* INTERNAL, as grpc-go and grpc core answer it: the flag and the
             * header disagree (the bytes would be read as the message; an
             * empty grpc-encoding was, and no header was UNIMPLEMENTED). */
            snprintf(err, cap, "the message's compressed flag is set under %s",
                     enc && elen ? "grpc-encoding identity" : "no grpc-encoding");
            return GRPC_INTERNAL;
        }
        int times = http_request_header_times(req, "grpc-encoding");
        if (times > 1) {
            /* Fields given twice are one list (RFC 9110 5.3), codings
             * stacked, which gRPC has not: the first was undone alone.
             * As HTTP's Content-Encoding given twice (415). */
            snprintf(err, cap, "grpc-encoding given in %d fields; one coding at most", times);
            return GRPC_UNIMPLEMENTED;
        }
        int st = http_body_decode(enc, elen, msg, mlen, call->g->max_message_bytes, &inflated,
                                  err, cap);
        if (st) {
            buf_free(&inflated);
            /* Data that does not inflate is INTERNAL in gRPC's own servers
             * (a decompression failure), not INVALID_ARGUMENT. */
            return st == 415 ? GRPC_UNIMPLEMENTED : st == 413 ? GRPC_RESOURCE_EXHAUSTED
                                                              : GRPC_INTERNAL;
        }
        msg = (const uint8_t *)inflated.data;
        mlen = inflated.len;
    } else if (p[0] != 0) {
        snprintf(err, cap, "the message's compressed flag is neither 0 nor 1");
        return GRPC_INTERNAL;
    }
    struct grpc_http_request hr = {.body = BUF_INIT};
    int code = grpc_to_http(call->m, msg ? msg : (const uint8_t *)"", mlen,
                            call->g->max_message_bytes, &hr, err, cap);
    buf_free(&inflated);
    struct http_request *inner = NULL;
    struct grpc_msg *m = NULL;
    if (code == GRPC_OK) {
        inner = http_inner_new(req, hr.method, hr.path, strlen(hr.path));
        /* A stream's message arrived now, with the read that completed it:
         * its budget and its statistics do not count the stream's age. */
        if (inner && call->stream)
            http_inner_arrived(inner, now_ns());
        m = calloc(1, sizeof *m);
        int hc = http_request_header_count(req), bad = !inner || !m;
        for (int i = 0; !bad && i < hc; i++) {
            const char *name, *value;
            size_t nl, vl;
            http_request_header_at(req, i, &name, &nl, &value, &vl);
            if (grpc_header_passes(name, nl))
                bad |= http_inner_add_header(inner, name, nl, value, vl) < 0;
        }
        /* The call's deadline is its budget, unless its metadata name one
         * of their own (x-request-timeout-ms, as over HTTP): a client may
         * wait longer than it wants the batcher to plan for. A stream's
         * deadline is the whole stream's, not a message's budget. */
        char num[32];
        size_t xl;
        long long ms = call->stream || http_request_header(req, "x-request-timeout-ms", &xl)
                           ? -1 : grpc_timeout_ms(req);
        if (!bad && ms >= 0) {
            int k = snprintf(num, sizeof num, "%lld", ms);
            bad |= http_inner_add_header(inner, "X-Request-Timeout-Ms", 20, num, (size_t)k) < 0;
        }
        if (!bad && hr.json_len >= 0) {
            int k = snprintf(num, sizeof num, "%lld", (long long)hr.json_len);
            bad |= http_inner_add_header(inner, "Inference-Header-Content-Length", 31, num,
                                         (size_t)k) < 0;
        }
        if (!bad && hr.body.len)
            bad |= http_inner_add_header(inner, "Content-Type", 12, "application/json", 16) < 0 ||
                   http_inner_set_body(inner, hr.body.data, hr.body.len) < 0;
        if (!bad && hr.head) {   /* the infer handler skips parsing the text again */
            http_inner_set_decoded(inner, TENSOR_KSERVE_HEAD, hr.head, grpc_json_release);
            hr.head = NULL;
        }
        if (bad) {
            code = GRPC_RESOURCE_EXHAUSTED;
            snprintf(err, cap, "out of memory");
        }
    }
    buf_free(&hr.body);
    json_decref(hr.head);   /* not handed over: a failure */
    if (code != GRPC_OK) {
        http_inner_discard(inner);
        free(m);
        *echo = hr.echo;   /* the caller's, for the error */
        return code;
    }
    m->echo = hr.echo;
    m->call = call;
    m->inner = inner;
    grpc_conn_reserve(call, m);
    http_inner_on_expected(inner, grpc_msg_expected, m);
    m->next = call->running;
    if (m->next)
        m->next->prev = m;
    call->running = m;
    call->nrunning++;
    call->nmsgs++;
    http_inner_dispatch(inner, call->g->http, grpc_msg_done, m);
    return GRPC_OK;
}

/* Whether a stream may start another message now (GRPC_STREAM_*); a
 * unary call always may. */
static bool grpc_call_room(struct grpc_call *call)
{
    if (!grpc_conn_room(call))
        return false;
    if (!call->stream)
        return true;
    size_t out = http_respond_buffered(call->req);
    call->out_full = out >= (call->out_full ? GRPC_STREAM_OUT_LOW : GRPC_STREAM_OUT_HIGH);
    return !call->out_full && call->nrunning < GRPC_STREAM_RUNNING_MAX;
}

static void grpc_call_on_out_poll(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct grpc_call *call = arg;
    call->holds++;
    grpc_call_take(call);
    grpc_call_check_end(call);
    call->holds--;
    grpc_call_maybe_free(call);
}

/* A stream's body runs while it has room and stops while it has none;
 * waiting on its answers to be read, or on its connection's (a unary
 * call's whole message too), it looks again shortly. */
static void grpc_call_flow(struct grpc_call *call)
{
    if (call->answered || call->stopping)
        return;
    bool room = grpc_call_room(call);
    if (call->stream)
        http_request_pause_body(call->req, !room);
    if (!call->out_full && (room || call->in.len < 5))
        return;
    if (!call->out_poll)
        call->out_poll = evtimer_new(http_request_event_base(call->req), grpc_call_on_out_poll,
                                     call);
    struct timeval tv = {0, GRPC_STREAM_OUT_POLL_MS * 1000};
    if (!call->out_poll || evtimer_add(call->out_poll, &tv) < 0)
        grpc_call_fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory for the stream's timer");
}

/* Where a stream's body stands for its timers (http.h): a piece of a
 * message pending is moving; none, it rests, or is served while answers
 * are owed (a message waiting 3 s for its batch was ended as idle, its
 * computed answer lost). */
static void grpc_call_rest(struct grpc_call *call)
{
    if (!call->stream || call->answered)
        return;
    http_request_body_at_rest(call->req, call->in.len ? HTTP_BODY_MOVING
                                         : call->nrunning ? HTTP_BODY_SERVING
                                                          : HTTP_BODY_AT_REST);
}

/* A message refused for its size (declared, or once inflated): a stream's
 * messages taken are answered first, each its one answer (they were
 * dropped with the stream), then it ends RESOURCE_EXHAUSTED and nothing
 * after it is read; with none running, the call ends at once. */
static void grpc_call_refuse_rest(struct grpc_call *call, const char *why)
{
    if (call->stream && call->nrunning > 0) {
        call->last_code = GRPC_RESOURCE_EXHAUSTED;
        snprintf(call->stop_msg, sizeof call->stop_msg, "%.400s", why);
        call->ended = true;
        return;
    }
    grpc_call_fail(call, GRPC_RESOURCE_EXHAUSTED, why);
}

/* The whole messages in call->in, taken: a unary call's one (at the end
 * of its body), a stream's as they arrive and while it has room. A message
 * answered at once (inside grpc_msg_start) calls back here: the loop that
 * runs already takes what it made room for. */
static void grpc_call_take(struct grpc_call *call)
{
    if (call->taking)
        return;
    call->taking = true;
    size_t off = 0;
    while (!call->answered && !call->stopping && call->in.len - off >= 5 &&
           grpc_call_room(call)) {
        const uint8_t *p = (const uint8_t *)call->in.data + off;
        size_t mlen = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
        if (mlen > call->g->max_message_bytes) {
            char why[160];
            snprintf(why, sizeof why, "a message of %zu bytes exceeds limits.max_body_bytes (%zu)",
                     mlen, call->g->max_message_bytes);
            grpc_call_refuse_rest(call, why);
            off = call->in.len;
            break;
        }
        if (call->in.len - off - 5 < mlen)
            break;   /* the rest is on its way */
        if (!call->stream && (call->nmsgs > 0 || call->in.len - off - 5 > mlen)) {
            /* gRPC's status for a request cardinality violation */
            grpc_call_fail(call, GRPC_UNIMPLEMENTED, "a unary call carries exactly one message");
            break;
        }
        char err[1024];
        struct buf echo = BUF_INIT;
        int code = grpc_msg_start(call, p, mlen, err, sizeof err, &echo);
        if (code == GRPC_RESOURCE_EXHAUSTED && call->stream) {
            /* Past max_body_bytes once inflated (or out of memory): as one
             * declared too big, not an error answer the stream reads on
             * past (a re-test found the compressed one did). */
            buf_free(&echo);
            grpc_call_refuse_rest(call, err);
            off = call->in.len;
            break;
        }
        if (code != GRPC_OK) {
            if (call->stream)
                grpc_stream_error(call, err, &echo);
            else
                grpc_call_end(call, code, err, NULL, 0, 0);
        }
        buf_free(&echo);
        off += 5 + mlen;
    }
    if (off) {
        memmove(call->in.data, call->in.data + off, call->in.len - off);
        call->in.len -= off;
    }
    call->taking = false;
    grpc_call_rest(call);
    grpc_call_flow(call);
}

/* The client's side is over: the call ends once nothing of it is left. */
static void grpc_call_check_end(struct grpc_call *call)
{
    if (!call->ended || call->answered || call->stopping)
        return;
    if (call->in.len) {   /* whole messages waiting for room, or a piece of one */
        if (grpc_call_room(call))
            /* INTERNAL: gRPC's own servers' status for an unexpected end
             * of the stream (grpc-go's io.ErrUnexpectedEOF). */
            grpc_call_fail(call, GRPC_INTERNAL, "the message is cut short");
    } else if (!call->stream && call->nmsgs == 0) {
        grpc_call_end(call, GRPC_UNIMPLEMENTED, "the request carries no message", NULL, 0, 0);
    } else if (call->stream && call->nrunning == 0 && call->last_code) {
        grpc_call_end(call, call->last_code, call->stop_msg, NULL, 0, 0);
    } else if (call->stream && call->nrunning == 0) {
        /* Drained: every message taken is answered; UNAVAILABLE tells the
         * client to go on elsewhere (gRPC's retryable code). */
        grpc_call_end(call, call->drained ? GRPC_UNAVAILABLE : GRPC_OK,
                      call->drained ? "the server is shutting down: open the stream again "
                                      "elsewhere" : NULL, NULL, 0, 0);
    }
}

static void grpc_call_body_take(struct grpc_call *call, const char *data, size_t len, int end,
                                int status, const char *msg);

static void grpc_call_body(struct http_request *req, void *arg, const char *data, size_t len,
                           int end, int status, const char *msg)
{
    (void)req;
    struct grpc_call *call = arg;
    if (call->answered || call->stopping) {
        grpc_call_maybe_free(call);
        return;
    }
    call->holds++;   /* a message answered at once may end the call under us */
    grpc_call_body_take(call, data, len, end, status, msg);
    call->holds--;
    grpc_call_maybe_free(call);
}

static void grpc_call_body_take(struct grpc_call *call, const char *data, size_t len, int end,
                                int status, const char *msg)
{
    if (status == 503 && call->stream && call->in.len == 0) {
        /* The server drains and the stream is between messages (h2.c):
         * the messages taken are answered, then it ends. */
        call->drained = true;
        call->ended = true;
        grpc_call_check_end(call);
        return;
    }
    if (status) {   /* the client reset the stream (499: CANCELLED), or its body broke */
        grpc_call_fail(call, grpc_code_of_http(status), msg);
        return;
    }
    if (call->last_code)
        return;   /* refused from a message on: what follows is not read */
    if (len && buf_append(&call->in, data, len) < 0) {
        grpc_call_fail(call, GRPC_RESOURCE_EXHAUSTED, "out of memory for the message");
        return;
    }
    if (!call->stream && call->in.len > call->g->max_message_bytes + 5) {
        char why[160];
        snprintf(why, sizeof why, "the message exceeds limits.max_body_bytes (%zu)",
                 call->g->max_message_bytes);
        grpc_call_fail(call, GRPC_RESOURCE_EXHAUSTED, why);
        return;
    }
    if (call->stream || end)
        grpc_call_take(call);
    if (end) {
        call->ended = true;
        grpc_call_check_end(call);
    }
}

/* The client reset the stream: the HTTP requests stop early (their
 * handlers' on_abort: a queued inference leaves the batcher). */
static void grpc_call_abort(struct http_request *req, void *arg)
{
    (void)req;
    struct grpc_call *call = arg;
    call->holds++;
    grpc_call_fail(call, GRPC_CANCELLED, "the client reset the stream");
    call->holds--;
    grpc_call_maybe_free(call);
}

/* The service's method the request's path names; NULL for none. */
static const struct grpc_method *grpc_method_of(const struct http_request *req)
{
    size_t plen, pre = sizeof GRPC_SERVICE_PREFIX - 1;
    const char *path = http_request_path(req, &plen);
    return plen > pre && memcmp(path, GRPC_SERVICE_PREFIX, pre) == 0
               ? grpc_method_find(path + pre, plen - pre) : NULL;
}

static void grpc_call_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct grpc_call *call = arg;
    char why[96];
    snprintf(why, sizeof why, "the call's deadline (grpc-timeout, %lld ms) passed",
             call->timeout_ms);
    call->holds++;
    grpc_call_fail(call, GRPC_DEADLINE_EXCEEDED, why);
    call->holds--;
    grpc_call_maybe_free(call);
}

/* grpc-timeout is the call's deadline, as gRPC's servers keep it: at it
 * the call ends DEADLINE_EXCEEDED, its queued inferences leave the
 * batcher and nothing more is read. A unary call's budget already came
 * from it, but a stream (whose messages have none of their own), or a
 * body that never ended, ran on to idle_timeout_ms or header_timeout_ms.
 * Messages computing when it passes are waited for (their answers come
 * back to this thread), then dropped. 0, or -1 out of memory. */
static int grpc_call_set_deadline(struct grpc_call *call, long long timeout_ms)
{
    call->timeout_ms = timeout_ms;
    int64_t left_ns = timeout_ms * 1000000 - (now_ns() - http_request_arrival_ns(call->req));
    if (left_ns < 0)
        left_ns = 0;
    call->deadline = evtimer_new(http_request_event_base(call->req), grpc_call_on_deadline, call);
    struct timeval tv = {(time_t)(left_ns / 1000000000), (suseconds_t)(left_ns % 1000000000 / 1000)};
    return call->deadline && evtimer_add(call->deadline, &tv) == 0 ? 0 : -1;
}

static void grpc_route(struct http_request *req, const struct route_match *rm, void *ctx)
{
    (void)rm;
    struct grpc_service *g = ctx;
    size_t ctl;
    const char *ct = http_request_header(req, "content-type", &ctl);
    if (!ct || ctl < 16 || strncasecmp(ct, "application/grpc", 16) != 0 ||
        (ctl > 16 && ct[16] != '+' && ct[16] != ';')) {
        /* Not gRPC: the protocol says 415, in HTTP. */
        http_respond_error(req, 415, NULL, "this port serves gRPC (content-type "
                                           "application/grpc); KServe v2 over HTTP is on "
                                           "`listen`");
        return;
    }
    if (http_request_method(req) != HTTP_M_POST) {
        http_respond_error(req, 405, "Allow: POST\r\n", "gRPC calls are POSTs");
        return;
    }
    size_t plen;
    const char *path = http_request_path(req, &plen);
    const struct grpc_method *m = grpc_method_of(req);
    if (!m) {
        char msg[400];
        snprintf(msg, sizeof msg, "unknown call %.*s (the service is "
                                  "inference.GRPCInferenceService)",
                 (int)(plen > 300 ? 300 : plen), path);
        grpc_count(g, NULL, GRPC_UNIMPLEMENTED);
        grpc_answer(req, GRPC_UNIMPLEMENTED, msg, NULL, 0, 0);
        return;
    }
    if (grpc_method_unserved(m)) {
        grpc_count(g, m, GRPC_UNIMPLEMENTED);
        grpc_answer(req, GRPC_UNIMPLEMENTED, grpc_method_unserved(m), NULL, 0, 0);
        return;
    }
    /* As grpc-go answers them: a codec it does not have, and a timeout it
     * cannot read, are INTERNAL; a deadline of 0 has passed already (it
     * was read as none, and the call ran). */
    const char *refusal = NULL;
    int refused = GRPC_OK;
    long long timeout_ms = grpc_timeout_ms(req);
    size_t sub = 0;   /* the subtype after '+', up to parameters */
    while (ctl > 16 && ct[16] == '+' && 17 + sub < ctl && ct[17 + sub] != ';')
        sub++;
    if (ctl > 16 && ct[16] == '+' && !(sub == 5 && strncasecmp(ct + 17, "proto", 5) == 0)) {
        refused = GRPC_INTERNAL;
        refusal = "only protobuf messages are served (content-type application/grpc or "
                  "application/grpc+proto)";
    } else if (timeout_ms == -2) {
        refused = GRPC_INTERNAL;
        refusal = "malformed grpc-timeout: at most 8 digits and a unit of H, M, S, m, u or n";
    } else if (timeout_ms == 0) {
        refused = GRPC_DEADLINE_EXCEEDED;
        refusal = "the call's deadline (grpc-timeout 0) had passed when it arrived";
    }
    if (refused != GRPC_OK) {
        grpc_count(g, m, refused);
        grpc_answer(req, refused, refusal, NULL, 0, 0);
        return;
    }
    struct grpc_call *call = calloc(1, sizeof *call);
    if (!call) {
        grpc_count(g, m, GRPC_RESOURCE_EXHAUSTED);
        grpc_answer(req, GRPC_RESOURCE_EXHAUSTED, "out of memory", NULL, 0, 0);
        return;
    }
    call->g = g;
    call->req = req;
    call->m = m;
    call->stream = grpc_method_streams(m);
    /* Past 2^31 ms (24 days) a deadline is none: 8 digits of hours would
     * overflow the nanoseconds and fire at once. */
    if (timeout_ms > 0 && timeout_ms < 2147483648LL &&
        grpc_call_set_deadline(call, timeout_ms) < 0) {
        grpc_count(g, m, GRPC_RESOURCE_EXHAUSTED);
        grpc_answer(req, GRPC_RESOURCE_EXHAUSTED, "out of memory for the call's deadline", NULL,
                    0, 0);
        grpc_call_free(call);
        return;
    }
    if (call->stream) {   /* the answers stream as the messages do */
        char head[160];
        call->coding = grpc_answer_coding(req);
        int hl = snprintf(head, sizeof head,
                          "content-type: application/grpc\r\n" GRPC_ACCEPT_ENCODING "%s%s%s",
                          call->coding ? "grpc-encoding: " : "",
                          call->coding ? http_coding_name(call->coding) : "",
                          call->coding ? "\r\n" : "");
        if (http_respond_begin(req, 200, -1, 0, head, (size_t)hl) < 0) {
            call->answered = true;
            grpc_count(g, m, GRPC_RESOURCE_EXHAUSTED);
            http_respond_finish(req, 0);
            grpc_call_free(call);
            return;
        }
        call->open = true;
        atomic_fetch_add_explicit(&g->streams_open, 1, memory_order_relaxed);
    }
    http_request_on_abort(req, grpc_call_abort, call);
    if (call->stream)   /* between messages from the start */
        http_request_body_at_rest(req, HTTP_BODY_AT_REST);
    http_request_on_body(req, grpc_call_body, call);
}

struct grpc_service *grpc_service_new(const struct router *http, size_t max_message_bytes)
{
    struct grpc_service *g = calloc(1, sizeof *g);
    if (g)
        g->calls = calloc((size_t)grpc_service_methods(), sizeof *g->calls);
    if (!g || !g->calls) {
        free(g);
        return NULL;
    }
    g->http = http;
    g->max_message_bytes = max_message_bytes;
    return g;
}

/* The HTTP/2 layer's own refusals (431, 413 at the headers) of a gRPC
 * call, said as gRPC: its clients read only grpc-status (an HTTP 431 was
 * UNKNOWN to them). Anything else, as HTTP. */
static void grpc_refuse(struct http_request *req, int status, const char *msg, void *ctx)
{
    struct grpc_service *g = ctx;
    size_t ctl;
    const char *ct = http_request_header(req, "content-type", &ctl);
    if (!ct || ctl < 16 || strncasecmp(ct, "application/grpc", 16) != 0) {
        http_respond_error(req, status, NULL, "%s", msg);
        return;
    }
    int code = grpc_code_of_http(status);
    grpc_count(g, grpc_method_of(req), code);
    grpc_answer(req, code, msg, NULL, 0, 0);
}

int grpc_service_register(struct grpc_service *g, struct router *h2, struct error *err)
{
    router_set_refuse(h2, grpc_refuse, g);
    return router_add_prefix(h2, "/", grpc_route, g, err);
}

void grpc_service_set_caller_check(struct grpc_service *g,
                                   bool (*fn)(const struct http_request *req, void *ctx),
                                   void *ctx)
{
    g->caller_ok = fn;
    g->caller_ctx = ctx;
}

void grpc_service_free(struct grpc_service *g)
{
    if (g)
        free(g->calls);
    free(g);
}

int grpc_service_methods(void) { return grpc_method_count() + 1; }

const char *grpc_service_method_name(int method)
{
    return method < grpc_method_count() ? grpc_method_name(grpc_method_at(method)) : "other";
}

uint64_t grpc_service_calls(const struct grpc_service *g, int method, int code)
{
    return atomic_load_explicit(&g->calls[method][code], memory_order_relaxed);
}

uint64_t grpc_service_stream_messages(const struct grpc_service *g, bool ok)
{
    return atomic_load_explicit(&g->stream_messages[ok], memory_order_relaxed);
}

int64_t grpc_service_streams_open(const struct grpc_service *g)
{
    return atomic_load_explicit(&g->streams_open, memory_order_relaxed);
}

/* httpc.h - outbound HTTP/1.1: the servers batchgate calls (model servers
 * behind the upstream backend, reverse-proxy targets), their keep-alive
 * connections, their health and their accounting.
 *
 * A target is one server ("http://host:port"), shared by every thread that
 * calls it: in-flight count, busy time (time with at least one call in
 * flight), failures by reason and health live there, behind a mutex taken
 * once per call. A pool is a target's idle keep-alive connections on ONE
 * event base: the upstream backend has one per URL on its loop, the proxy one
 * per URL per IO thread, so connections never cross threads.
 *
 * A call: httpc_open (idle connection or a new one) -> httpc_send the request
 * bytes (any number of times: bodies stream) -> callbacks deliver the
 * response head, its body in pieces with the framing removed, then done or
 * error. After done the connection is back in its pool (or closed when the
 * server did not keep it alive); after error it is closed.
 *
 * Pipelining (opt-in per pool, per call): calls opened with HTTPC_PIPELINE
 * in the same pass of the event loop share one connection, up to the pool's
 * `pipeline` of them, and their requests leave in one send at the end of
 * the pass; the answers come back in order, often several to one read. A
 * connection that already has requests out is never given more, so a call
 * only ever waits behind calls that became ready at the same instant. When
 * the connection is lost, each call behind the first learns that its answer
 * never came (a reset), and may be repeated when it is idempotent. */
#ifndef BG_HTTPC_H
#define BG_HTTPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct event_base;

enum httpc_fail {
    HTTPC_FAIL_CONNECT,      /* refused, unreachable: nothing reached the server */
    HTTPC_FAIL_RESET,        /* closed or reset before the answer was complete */
    HTTPC_FAIL_TIMEOUT,      /* no (complete) answer in time; the caller's timer */
    HTTPC_FAIL_STATUS,       /* answered 5xx (counted by callers that treat it so) */
    HTTPC_FAIL_MALFORMED,    /* not HTTP, or a body the caller could not use */
    HTTPC_FAIL_COUNT
};
/* "connect", "reset", "timeout", "status", "malformed": metric labels. */
extern const char *const httpc_fail_names[HTTPC_FAIL_COUNT];

/* "http://HOST:PORT" with an optional path ("/" or more) after the port.
 * Returns 0 with host, *port and *path (NULL when none; points into url),
 * or -1 when url is not of that form. */
int httpc_url_parse(const char *url, char *host, size_t host_cap, int *port, const char **path);

/* ---- targets ---- */

struct httpc_target;

/* Resolves host:port now (a name that does not resolve is a config error).
 * who names its owner in log lines ("model m", "route /x/"); `name` names
 * the server in what clients read ("upstream.urls[1]": its place in the
 * configuration, not its address, which is the operator's to know). */
struct httpc_target *httpc_target_new(const char *host, int port, const char *who,
                                      const char *name, struct error *err);
/* t, just set up by a reloaded owner, against prev, what its previous
 * copy uses at the same place: the same server (name, owner, host, port,
 * and the address it resolved to now) is prev, taken as one more owner
 * (t is freed), so its counters (calls, failures, busy time), its health
 * and its connections go on across the reload; otherwise t. */
struct httpc_target *httpc_target_continue(struct httpc_target *t, struct httpc_target *prev);
/* Its owner lets go: it is retired, and freed once no pool of it is left
 * (each pool holds a reference: a pool cached on some thread never points
 * at freed memory). */
void httpc_target_free(struct httpc_target *t);
/* Another reference (its pools take one), and whether the owner let go:
 * a cache of pools drops a retired target's pool once it has no call open
 * (httpc_pool_open), on the pool's own thread. */
struct httpc_target *httpc_target_ref(struct httpc_target *t);
bool httpc_target_retired(const struct httpc_target *t);
const char *httpc_target_url(const struct httpc_target *t);        /* "http://host:port" */
const char *httpc_target_name(const struct httpc_target *t);       /* as given */
const char *httpc_target_authority(const struct httpc_target *t);  /* "host:port" for Host */

/* Health. Passive: 3 failed calls in a row take a target out. With active
 * probes on (httpc_target_probe_result is called), it stays out until a
 * probe passes; without, it is tried again after 2 s.
 *
 * Active: a probe that cannot connect (refused, unreachable: nothing
 * listens there) takes the target out at once; other failures (an answer
 * other than 200, none in time, a malformed one) only at the
 * HTTPC_PROBE_FAILS_TO_DOWN-th in a row, so that one slow answer from a
 * loaded server does not take it out of the rotation. One pass brings it
 * back. */
#define HTTPC_PROBE_FAILS_TO_DOWN 3
enum httpc_probe_result { HTTPC_PROBE_PASS, HTTPC_PROBE_FAIL, HTTPC_PROBE_UNREACHABLE };
bool httpc_target_usable(const struct httpc_target *t, int64_t now_ns);
/* The server said it is overloaded and did not take the call (a 503 or
 * 429 with its Retry-After, 1 when none): httpc_pick passes it by while
 * another is usable, for that long (60 s at most) or until it answers a
 * call sent after this. It stays healthy: it works, and is asked when no
 * other is. */
void httpc_target_hold(struct httpc_target *t, int seconds);
/* Returns +1 when this result brought the target back, -1 when it took it
 * out, 0 when neither; the change is logged here, with `why` (the probe's
 * outcome: "HTTP 503", "no answer in 1000 ms") and, like a call's, at most
 * one line a second about the target. */
int httpc_target_probe_result(struct httpc_target *t, enum httpc_probe_result r, const char *why);
/* The usable target not held (httpc_target_hold) with the fewest calls
 * in flight among those whose expected wait (calls in flight and this
 * one, times its average time to an answer) is within twice the least
 * (one not answered yet always is) and, when some are, within budget_ns
 * (the call's time left; 0: none; when none is, the soonest expected),
 * skipping those whose bit (index in ts) is set in `tried`; when none is
 * usable and not held, the one that comes back (or whose hold ends)
 * first; NULL only when every target was tried. A target passed by for
 * its speed 64 times and for 2 s since its last measure (each trial that
 * leaves it as slow doubles both), with no call in flight, is picked
 * instead as a trial, unless the call has a deadline (budget_ns > 0: then
 * httpc_pick_copy_trial owes it one). */
struct httpc_target *httpc_pick(struct httpc_target *const *ts, int n, unsigned tried,
                                int64_t budget_ns, int *index);
/* A trial that httpc_pick owed a target but could not make, the call
 * having a deadline: under deadlines alone a server passed by for a slow
 * spell was never measured again. The index of such
 * a target (not `except`, the call's own; taking calls, none in flight,
 * due as httpc_pick's trials are), now counted as tried, to which the
 * caller may send a copy of its call, whose answer only measures it; -1
 * when none is due. */
int httpc_pick_copy_trial(struct httpc_target *const *ts, int n, int except);
/* The copy sent to it got no usable answer (a 5xx, a timeout, a reset,
 * one that does not parse): its measure from before the trial is put back
 * (httpc took a 200's time before it was read), so it stays passed by.
 * Cleared, it made the server a candidate of every call, and calls with
 * deadlines went to a server failing or hanging (the re-test: 52 of 3770
 * answered 502). The failure counts toward its health all the same. */
void httpc_target_trial_failed(struct httpc_target *t);
/* A call to target i of ts that took ns, against the other usable
 * targets: when it, or i's average time to an answer, is more than twice
 * the least of theirs (i is far slower than another, or just turned so),
 * that least over the larger of the two, below 0.5; else 1. */
double httpc_target_speed_ratio(struct httpc_target *const *ts, int n, int i, int64_t ns);
/* A call's outcome as its caller judged it (connection-level failures are
 * recorded by httpc itself before on_error, and a whole answer below 500 as
 * a success before on_done unless the call is HTTPC_JUDGED; a 5xx is left
 * to the caller). Like httpc_target_probe_result they return +1 when the
 * call brought the target back, -1 when it took it out, else 0; the change
 * is logged here, naming the owner. */
int httpc_target_succeeded(struct httpc_target *t);
int httpc_target_failed(struct httpc_target *t, enum httpc_fail why);
/* A failure counted by kind only, not toward health (a probe's; a 4xx,
 * the request's own). */
void httpc_target_count_failure(struct httpc_target *t, enum httpc_fail why);

struct httpc_target_stats {
    int inflight;
    uint64_t calls;                         /* calls begun */
    uint64_t pipelined;                     /* of them, sent behind another on one connection */
    uint64_t failures[HTTPC_FAIL_COUNT];
    double busy_s;                          /* with a call in flight, since created */
    double age_s;                           /* since created */
    double util_10s;                        /* busy fraction of the last 10 whole seconds */
    bool healthy;                           /* usable now */
};
void httpc_target_stats(struct httpc_target *t, struct httpc_target_stats *out);

/* ---- connections ---- */

struct httpc_pool;
struct httpc_call;

/* Most calls one connection carries at once (pool `pipeline`). */
#define HTTPC_PIPELINE_MAX 16

/* max_idle: idle keep-alive connections kept; pipeline: 1 (off) to
 * HTTPC_PIPELINE_MAX calls per connection for HTTPC_PIPELINE calls. */
struct httpc_pool *httpc_pool_new(struct httpc_target *t, struct event_base *base, int max_idle,
                                  int pipeline);
/* A connect that has not completed this long fails as a refused one does
 * (HTTPC_FAIL_CONNECT: nothing was sent, the call may go to another
 * server). HTTPC_CONNECT_TIMEOUT_MS unless set; a host that drops SYNs held
 * each call for its whole timeout, on the same server. */
#define HTTPC_CONNECT_TIMEOUT_MS 5000
void httpc_pool_set_connect_timeout(struct httpc_pool *p, int ms);   /* ms <= 0: none */
/* The health prober's own pool (httpc_probe.c): its calls are not the
 * target's traffic, so they stay out of its in-flight count and busy time,
 * and their outcomes out of its passive health (the prober reports through
 * httpc_target_probe_result); their failures are still counted by kind. */
void httpc_pool_mark_probe(struct httpc_pool *p);
/* Closes the idle connections. Calls still open on the pool must have ended. */
void httpc_pool_free(struct httpc_pool *p);
struct httpc_target *httpc_pool_target(const struct httpc_pool *p);
/* Calls in progress on the pool (its own thread). */
int httpc_pool_open(const struct httpc_pool *p);

struct httpc_header {
    const char *name, *value;
    size_t name_len, value_len;
};

struct httpc_head {
    int status;
    int http_minor;
    int64_t content_length;            /* -1: not given (chunked or until close) */
    bool chunked;
    const struct httpc_header *hdrs;   /* valid during on_head only */
    int nhdrs;
};

/* Callbacks run on the pool's event base. on_head and on_body return 0, or
 * -1 to end the call at once (the connection is closed, nothing more is
 * called). Exactly one of on_done and on_error ends every call that the
 * caller does not end with httpc_abort. */
struct httpc_cb {
    int (*on_head)(void *arg, const struct httpc_head *h);
    int (*on_body)(void *arg, const char *data, size_t len);
    void (*on_done)(void *arg);
    void (*on_error)(void *arg, enum httpc_fail why, const char *msg);
    void (*on_sent)(void *arg);        /* optional: everything sent so far is written */
};

/* The answer to this request has no body whatever its headers say (HEAD). */
#define HTTPC_NO_BODY 1u
/* The request is whole in what is sent right after httpc_open, and may
 * share a connection with other such calls (see Pipelining above): only for
 * requests that are safe to repeat. on_sent is not called for such a call
 * while it shares its connection. */
#define HTTPC_PIPELINE 2u
/* On a new connection of its own, never an idle or shared one: a repeat
 * after a loss on a reused connection must not meet another stale one. */
#define HTTPC_FRESH 4u
/* The request is not whole at open (a body that streams in): until
 * httpc_request_end, an answer that ends first (a server answering early,
 * RFC 9112 9.5) leaves the connection closed, not idle: the server would
 * read the next call's request as the rest of this one's body. */
#define HTTPC_REQUEST_STREAMS 8u
/* The caller judges the answer: a whole one below 500 is no success of
 * the server until it says so (httpc_target_succeeded), as a 5xx is no
 * failure until it says so. An answer that does not parse, counted a
 * success first, restarted the count of failures in a row at every call,
 * so that a server answering only unusable 200s was never taken out. */
#define HTTPC_JUDGED 16u

/* Starts a call on an idle connection of the pool or a new one, or behind
 * another HTTPC_PIPELINE call (the target counts it in flight until it
 * ends). *reused tells whether the connection was in use before: then it
 * may have been closed by the server just before, or lost with the call
 * ahead, and a reset with no answer says nothing about the request. NULL
 * when no socket can be made (error in err). */
struct httpc_call *httpc_open(struct httpc_pool *p, const struct httpc_cb *cb, void *arg,
                              unsigned flags, bool *reused, struct error *err);
/* The same on a socket already connected to the pool's server (tests and
 * the fuzzer drive a call through a socketpair). Takes fd (closed on failure). */
struct httpc_call *httpc_adopt(struct httpc_pool *p, int fd, const struct httpc_cb *cb, void *arg,
                               unsigned flags, struct error *err);
/* Queues request bytes; they are written as the socket allows. -1: out of memory. */
int httpc_send(struct httpc_call *c, const void *data, size_t len);
/* Bytes queued and not yet written (request body backpressure). */
size_t httpc_unsent(const struct httpc_call *c);
/* An HTTPC_REQUEST_STREAMS call's request is all queued now. */
void httpc_request_end(struct httpc_call *c);
/* Stops (true) or resumes reading the answer (response body backpressure);
 * a call behind others pauses once its answer is next. */
void httpc_pause(struct httpc_call *c, bool paused);
/* Ends the call now, calling nothing for it: closes the connection, or,
 * when other calls share it, reads the call's answer in its turn and drops
 * it. From its own on_head/on_body it closes the connection (the calls
 * behind are told). */
void httpc_abort(struct httpc_call *c);

/* ---- active health probes (httpc_probe.c) ---- */

struct httpc_prober;

/* From base's loop, every interval_ms: `GET path` to each of the n targets
 * on a connection of the probe's own. A 200 keeps a target in (or brings it
 * back); anything else, a failure, or no answer by the next tick counts
 * against it (httpc_target_probe_result: out at once when the connection
 * is refused, else at the third in a row). `who` names the
 * owner in log lines ("model m", "route /x/"). NULL: out of memory. Events
 * may be added from another thread (libevent's pthreads support). */
struct httpc_prober *httpc_prober_new(struct event_base *base, struct httpc_target *const *ts,
                                      int n, const char *path, int interval_ms, const char *who);
/* The same, and each probe's outcome to sink(arg, index, status, body, len)
 * on base's thread: the answer's status and body (up to 4 MiB) once it is
 * complete, or status 0 (no body) when the probe failed; called after the
 * target's health took the outcome in. An LLM pool's metrics scrape is its
 * health probe. */
typedef void httpc_probe_sink(void *arg, int index, int status, const char *body, size_t len);
struct httpc_prober *httpc_prober_new_sink(struct event_base *base,
                                           struct httpc_target *const *ts, int n,
                                           const char *path, int interval_ms, const char *who,
                                           httpc_probe_sink *sink, void *sink_arg);
/* A 200 passes only if judge(arg, body, len, why, cap) says so (it writes
 * why it does not): an answer whose status says nothing of the server's
 * health (TF Serving answers its model status 200 whatever the model's
 * state). Before the first tick. */
typedef bool httpc_probe_judge(void *arg, const char *body, size_t len, char *why, size_t cap);
void httpc_prober_set_judge(struct httpc_prober *pr, httpc_probe_judge *judge, void *arg);
/* On base's thread, or once its loop has stopped. */
void httpc_prober_free(struct httpc_prober *pr);

#endif

/* upcall.h - the one upstream-call driver: how a call to the servers behind
 * batchgate picks its server, is timed, and is repeated after a failure.
 * The reverse proxy (gateway/proxy.c) and the upstream backend
 * (backends/upstream.c) are its clients; what stays theirs is what they send
 * and what they do with the answer.
 *
 * A call has a set of targets (httpc.h). Each try picks the usable target
 * with the fewest calls in flight among those not tried yet (httpc_pick:
 * healthy first, then the one back first), opens a connection from the
 * client's pool for it and lets the client send its request (ops->send).
 *
 * Retry policy (nginx's proxy_next_upstream "error", for both clients):
 *   - a refused or unreachable connect: always (nothing reached a server);
 *   - a reset or close before the answer's head: only for an idempotent
 *     call (UPCALL_IDEMPOTENT), as the server may have seen the request
 *     (RFC 9110 9.2.2); on a connection that was reused (kept alive, or
 *     shared by pipelining) it is the keep-alive race, on a fresh one the
 *     server died or dropped it (a node killed mid-call);
 *   - never once the answer's head arrived, never after a timeout (the
 *     server may still be working on it: repeating would double the load at
 *     the moment a server is slow), a malformed answer or a status, and never
 *     when the client can no longer replay its request (upcall_no_replay);
 *     except that a client may judge an answer "not processed" (a 503 or
 *     429 of an overloaded server) and ask for another target (upcall_next).
 * A repeat goes alone (not pipelined), on a fresh connection (HTTPC_FRESH),
 * to a target the call has not tried. The one exception: a loss on a reused
 * connection says nothing against its server, so when no target not tried
 * yet is usable (a lone target, or the others taken out) that server gets
 * the call once more. So a call makes at most one try per target, plus one.
 *
 * Timer: upcall_arm (re)starts it for timeout_ms from now; past it the call
 * ends with BG_EDEADLINE and a timeout is counted against the target. When
 * libevent has no memory for the timer it is not armed and the call ends
 * from the loop with BG_ENOMEM (evwatch.h), never from inside the caller.
 *
 * Accounting is httpc's: connection failures are counted by httpc itself,
 * a timeout by the driver, what the client judges of an answer (a 5xx, an
 * unusable body) through upcall_blame, and with HTTPC_JUDGED a usable
 * answer through upcall_succeeded. */
#ifndef BG_UPCALL_H
#define BG_UPCALL_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "common/httpc.h"

struct event_base;
struct upcall;

/* Flags of upcall_start: HTTPC_NO_BODY, HTTPC_PIPELINE,
 * HTTPC_REQUEST_STREAMS and HTTPC_JUDGED pass to httpc_open (a repeat
 * drops HTTPC_PIPELINE, and HTTPC_REQUEST_STREAMS once upcall_request_end
 * came), and: */
#define UPCALL_IDEMPOTENT 0x100u   /* may be repeated after a loss before the answer's head */

/* The client's side, called on the event base of upcall_new with the
 * client's `arg`. The driver touches nothing of the call after a callback
 * returns, so a client may stop or free it from inside any of them. */
struct upcall_ops {
    /* The client's pool for targets[index] on this event base; NULL: out of memory. */
    struct httpc_pool *(*pool)(void *arg, struct httpc_target *t, int index);
    /* Queues the whole request so far with upcall_send (each try calls it
     * again on its new connection). 0, or -1 when out of memory. */
    int (*send)(void *arg, struct upcall *u, const struct httpc_target *t);
    /* As httpc_cb; a client returns -1 only after ending the call itself
     * (upcall_stop, directly or by freeing its own call). */
    int (*on_head)(void *arg, const struct httpc_head *h);
    int (*on_body)(void *arg, const char *data, size_t len);
    void (*on_done)(void *arg);                                 /* the connection is back in its pool */
    /* The call failed for good: BG_EUPSTREAM (no usable answer: connect,
     * reset, malformed), BG_EDEADLINE (timeout_ms passed) or BG_ENOMEM; msg
     * says what happened, for the client's answer. */
    void (*on_fail)(void *arg, int code, const char *msg);
    void (*on_sent)(void *arg);                                 /* optional, as httpc_cb */
};

/* One call object, reused call after call (upcall_start ... upcall_stop).
 * `timeout_name` (a string literal: "proxy.timeout_ms") names the setting in
 * messages. NULL: out of memory. */
struct upcall *upcall_new(struct event_base *base, const struct upcall_ops *ops, void *arg,
                          int timeout_ms, const char *timeout_name);
/* The timer of the calls from now on (a client whose calls differ: the
 * proxy's tapped calls take their model's timeout). */
void upcall_set_timeout(struct upcall *u, int timeout_ms, const char *timeout_name);
/* The instant the next calls are wanted by (now_ns's clock; 0: none): a
 * try goes to a server expected to answer by then, when one is
 * (httpc_pick). */
void upcall_set_deadline(struct upcall *u, int64_t deadline_ns);
/* Stops a call in progress (nothing is called) and frees u. NULL is fine. */
void upcall_free(struct upcall *u);

/* The first try over targets ts[0..n) (at most 32; the array must outlive
 * the call), then upcall_arm when the answer is awaited. Returns 0 (then exactly
 * one of on_done and on_fail comes, unless upcall_stop first), or a negative
 * code with err filled when no try could start (nothing is called then). */
int upcall_start(struct upcall *u, struct httpc_target *const *ts, int n, unsigned flags,
                 struct error *err);
/* Ends the call now, calling nothing: the connection is closed (or its
 * answer dropped in its turn) and the timer stopped. Safe when idle. */
void upcall_stop(struct upcall *u);

/* The call's timer, from now (again when armed already), and off. Off
 * leaves a pending "could not arm" alarm alone: that call must still end. */
void upcall_arm(struct upcall *u);
void upcall_disarm(struct upcall *u);

/* The request may not be repeated any more (its client let go of bytes it
 * would need to send again). upcall_replayable: may it still be? (no once
 * the answer's head arrived). */
void upcall_no_replay(struct upcall *u);
bool upcall_replayable(const struct upcall *u);

/* On the connection of the try in progress (httpc_send, httpc_unsent,
 * httpc_pause). upcall_send: -1 when out of memory or no try is in progress. */
bool upcall_running(const struct upcall *u);
int upcall_send(struct upcall *u, const void *data, size_t len);
/* The request is all sent (HTTPC_REQUEST_STREAMS): httpc_request_end. */
void upcall_request_end(struct upcall *u);
size_t upcall_unsent(const struct upcall *u);
void upcall_pause(struct upcall *u, bool paused);

/* The answer of the last try said it was not processed (a 503 or 429 of an
 * overloaded server), and the call ended (on_done came): one more try, as
 * a repeat, on a target not tried yet that is taking calls, within the
 * call's timer. 0 when that try started (on_done or on_fail comes again);
 * -BG_EUPSTREAM when no such target is left, or a negative code with err
 * filled when the try could not start (nothing is called then). */
int upcall_next(struct upcall *u, struct error *err);
/* A failure the client judged against the target of the last try (a 5xx,
 * an answer it cannot use). */
void upcall_blame(struct upcall *u, enum httpc_fail why);
/* With HTTPC_JUDGED: the answer of the last try was usable, a success of
 * its target (the count of failures in a row starts again). */
void upcall_succeeded(struct upcall *u);
/* The target of the last try (NULL before any), its URL ("upstream" before
 * any), and how many tries the call made. */
struct httpc_target *upcall_target(const struct upcall *u);
const char *upcall_url(const struct upcall *u);
/* The same server as clients may read of it (httpc_target_name). */
const char *upcall_name(const struct upcall *u);
int upcall_tries(const struct upcall *u);
/* What ended the call's last failed try (on_fail: HTTPC_FAIL_CONNECT when
 * its server was never reached). */
enum httpc_fail upcall_last_fail(const struct upcall *u);

#endif

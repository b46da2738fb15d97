/* engine.h - one step of load: open loop (requests sent at scheduled
 * instants, Poisson or constant, whatever the server does) or closed loop
 * (C connections, each sending its next request when the previous answer
 * arrives), over keep-alive HTTP/1.1 connections on one libevent loop, with
 * responses parsed by llhttp.
 *
 * Open-loop latency runs from each request's *intended* send time: when the
 * server (or the connection pool) stalls, the requests that should have
 * gone out meanwhile carry the stall in their latency instead of silently
 * not being sent (coordinated omission). */
#ifndef BG_LG_ENGINE_H
#define BG_LG_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/hist.h"
#include "loadgen/llmans.h"
#include "loadgen/llmreq.h"

struct lg_request {
    struct buf bytes;            /* a whole HTTP request, sent as is */
};

struct lg_config {
    char host[256];
    int port;
    struct lg_request *requests; /* rotated through */
    int nrequests;
    bool head;                   /* the requests are HEAD: answers carry no body */
    bool open_loop;
    double rate;                 /* open loop: requests per second (mean, with a trace) */
    /* Open loop with a trace: the rate follows a compressed day, from
     * `trough` at the window's start to `peak` half a period later and back,
     * (1 - cos)/2 between (warmup runs at the trough). 0: a constant rate. */
    double trace_period_s;
    double trace_peak, trace_trough;
    bool poisson;                /* open loop: exponential gaps (else constant) */
    int concurrency;             /* closed loop: connections, each one request at a time */
    int max_connections;         /* open loop: pool limit */
    double warmup_s, duration_s;
    int64_t budget_ns;           /* goodput counts answers within this; 0: every 2xx */
    int drain_ms;                /* wait this long for answers after the window */
    uint64_t seed;
    bool progress;               /* print a progress line each second to stderr */
    /* OpenAI mode: the requests come from here instead of `requests`, and
     * each 2xx answer is read as a completion (streamed or whole) into the
     * result's `llm`. A run's steps share it (its request count runs on). */
    struct llmreq *llm;
};

struct lg_result {
    struct hist latency;         /* measured requests: intended send to last byte */
    uint64_t codes[600];
    uint64_t errors;             /* connect failures, resets, malformed responses, timeouts */
    uint64_t refused;            /* of which: the connection could not be made (not accepted) */
    uint64_t lost;               /* of which: sent whole, then the connection ended unanswered */
    uint64_t closed_idle;        /* of which: sent on a kept-alive connection that the server
                                  * closed as the request crossed it (no byte came back) */
    uint64_t unsent;             /* of which: due in the window, still waiting for a
                                  * connection (--connections all busy) when it ended:
                                  * dropped then, never sent in the drain */
    uint64_t sent;               /* requests sent whose intended time was in the window (a
                                  * request still waiting for a connection at the end was
                                  * never sent: it is an error, not a send) */
    uint64_t answered;
    uint64_t good;               /* 2xx within budget */
    uint64_t late_sends;         /* sent > 1 ms after intended with a connection free, or
                                  * a new one allowed: the generator itself was late */
    double duration_s;           /* the window (--duration) */
    /* The window, or longer: from its start to the last answer counted when
     * that came after its end (vegeta's duration + wait). Answers to the
     * window's requests arrive in the drain too; over the window alone, a
     * server that fell behind read as keeping up with the asked rate. */
    double span_s;
    double achieved_rate;        /* sent / duration */
    double throughput;           /* answered / span */
    double goodput;              /* good / span */
    int connections;             /* opened during the step */
    /* OpenAI mode: TTFT, ITL, TPOT, e2e and tokens of the whole answers. A
     * 2xx answer that broke (llm.broken) is an error, not an answer. */
    struct llmans_stats llm;
};

/* Runs one step. Returns 0, or -1 with msg (cannot resolve, nothing connects). */
int lg_run_step(const struct lg_config *c, struct lg_result *r, char *msg, int cap);

#endif

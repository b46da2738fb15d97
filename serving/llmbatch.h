/* llmbatch.h - the calls of the Batch API's lines (docs/LLM.md "Batch API"):
 * one thread with its own event loop that sends each line to an endpoint of
 * its pool only while that endpoint has idle capacity (llmpool_pick_idle:
 * nothing waiting there, below the pool's offline.max_running), reads the
 * answer whole and hands the line back.
 *
 * The IO threads' request path is not usable here (a call through the
 * reverse proxy belongs to a client's request), so the calls are made as
 * the upstream backend and the pool's scrape make theirs: common/upcall.h
 * over common/httpc.h on this thread's loop, one target per call (the
 * endpoint the idle rule chose). A call counts in the endpoint's flight
 * (llmpool_pick_idle .. llmpool_end_idle), so online picking sees it, and
 * on the endpoint's device (busy time).
 *
 * A line that gets no answer (refused, reset, timeout) or a 5xx is tried
 * again on idle capacity, up to LLMBATCH_TRIES in all, on an endpoint it
 * has not tried while the pool has one (a failing endpoint answers fast and
 * looks idle); then it is handed back with what the last try got. Lines wait
 * in arrival order within their group (a submitter's batch); groups take
 * turns by their lines in flight; a line whose pool has no idle endpoint
 * lets the lines of other pools pass. */
#ifndef BG_LLMBATCH_H
#define BG_LLMBATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"

struct llmbatch;
struct served_model;

#define LLMBATCH_TRIES 3
#define LLMBATCH_ANSWER_MAX (8u << 20)   /* a larger answer fails the line */

/* One line's call. The submitter fills the first part and owns the line
 * again when `done` hands it back. */
struct llmbatch_line {
    struct llmbatch_line *next;       /* the caller's queues, then the submitter's */
    struct served_model *sm;          /* a pool, held by the submitter (sm->pool) */
    char path[32];                    /* "/v1/chat/completions", ... */
    char *body;                       /* the request as sent (malloc'ed; the submitter frees it) */
    size_t len;
    bool stream;                      /* body asks for a stream: the answer handed back is
                                         the whole one assembled from it (llmstream.h) */
    int64_t line;                     /* the submitter's: its number */
    uint64_t group;                   /* the submitter's: what llmbatch_cancel_group takes back (> 0) */
    double weight;                    /* the submitter's: its group's weight in the turns (> 0;
                                         the same for every line of a group; 0 reads as 1;
                                         llmbatch_set_weight changes it) */
    void *arg;                        /* the submitter's */
    int tenant;                       /* the submitter's: whose use each try's time is */
    /* The outcome: */
    int status;                       /* the answer's HTTP status; 0: none (see error) */
    struct buf answer;                /* its body (the submitter frees it) */
    char error[300];                  /* status 0: why; "" with status 0: cancelled */
    int endpoint;                     /* the last try's, -1 none */
    int tries;
    int tried[LLMBATCH_TRIES];        /* the endpoints of the tries so far */
    unsigned not_found;               /* bit k: tried[k] answered 404 (llmpool_found_elsewhere) */
    int64_t ns;                       /* the last try's time, its start to its end */
    int64_t t0;
    /* The caller's: */
    struct llmbatch *b;
    uint64_t round;                   /* the dispatch round that found it no endpoint */
    double charged;                   /* its group's pass charged as it took its place */
    struct upcall *up;
    bool starting;                    /* streamed, no byte of the answer yet (llmpool_started) */
    int64_t t_try;                    /* the try in flight's start, for its tenant's time; 0 none */
    struct httpc_target *target[1];
};

/* done: on the caller's thread, each line handed back (answered, failed for
 * good, or taken back by llmbatch_cancel). */
struct llmbatch *llmbatch_new(void (*done)(struct llmbatch_line *l, void *arg), void *arg,
                              struct error *err);
void llmbatch_free(struct llmbatch *b);   /* takes every line back first */

/* Any thread. */
void llmbatch_submit(struct llmbatch *b, struct llmbatch_line *l);
/* The group's weight in the turns from now on, for its lines already
 * waiting too (a governance window's switch of the shares). */
void llmbatch_set_weight(struct llmbatch *b, uint64_t group, double weight);
/* Takes every line back (calls in flight are closed: their servers stop
 * generating) and returns once `done` has run for each. */
void llmbatch_cancel(struct llmbatch *b);
/* The same for the lines of one group only; the others run on. */
void llmbatch_cancel_group(struct llmbatch *b, uint64_t group);
/* Lines that gave way to online calls (offline.preempt) since start. */
uint64_t llmbatch_preempted(struct llmbatch *b);

#endif

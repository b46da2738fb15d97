/* sim.h - the batcher's queue and policy driven on a virtual clock with
 * simulated instances whose execution time is known: deterministic, fast,
 * and the same code that runs in the server. The property tests run
 * thousands of random traces through it; loadgen/bench/policy_sim compares
 * the deadline-aware policy with the fixed delay on the same traces.
 *
 * A trace may mix online requests with offline ones (a job's lines,
 * infer_item.offline): they go through the same bqueue_push and bqueue_take
 * as in the server, so the offline rules of queue.h are the server's, and
 * with `check` set sim_run verifies them at every batch (sim.c says what
 * exactly).
 *
 * Requests may carry tokens (an encoder's texts): the simulated device
 * then costs a + b*tokens + c*(sum of squared lengths), or with `padded`
 * a + b*rows*maxlen + c*rows*maxlen^2 (every row padded to the batch's
 * longest), and the batcher sees the tokens unless `rows_only` hides them
 * (the row batching of before, on the same trace and device). */
#ifndef BG_SIM_H
#define BG_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/model.h"

struct sim_request {
    /* input */
    int64_t arrival_ns;
    int rows;
    int64_t budget_ns;        /* 0: no deadline; ignored when offline */
    int priority;             /* 0: the model's default; ignored when offline */
    bool offline;             /* a job's line: no deadline, no priority, never refused */
    int tokens;               /* 0: one per row (and the device costs rows) */
    int64_t tokens_sq;        /* its rows' squared lengths summed; 0: not given */
    int max_len;              /* its longest row; 0: tokens / rows */
    /* output */
    int status;               /* 0 computed, BG_EDEADLINE, BG_EQUEUEFULL */
    int answers;              /* must end as 1 */
    int64_t start_ns, done_ns;
    int batch_rows;
    int batch;                /* index of the batch it ran in (0, 1, ... in cut order), -1: none */
    int batch_offline_rows;   /* of batch_rows, how many were offline */
    int instance;             /* the instance that ran it, -1: none */
};

struct sim_config {
    struct model_batching batching;   /* policy, sizes, delays, limits */
    int instances;
    double slow_factor;               /* instances after the first take this many times as
                                       * long (0 or 1: all alike) */
    double exec_a_ns, exec_b_ns;      /* a batch of R rows takes a + b*R (R tokens: below) */
    double exec_c_ns;                 /* ... + c * its rows' squared lengths summed */
    bool padded;                      /* the device pads every row to the batch's longest */
    bool rows_only;                   /* the batcher is not told the requests' tokens */
    double jitter;                    /* 0, or relative noise of each batch's time */
    uint64_t seed;                    /* for the jitter */
    int64_t guard_ns;                 /* a fixed answer guard (guard.h); 0: none */
    bool check;                       /* verify the invariants at every event */
};

struct sim_stats {
    int64_t span_ns;                  /* first arrival to last answer */
    int64_t busy_ns;                  /* instance-time executing, all instances */
    int batches;
    int64_t rows;
    int offline_batches;              /* batches of offline rows only */
    int offline_gap_batches;          /* ... of them, cut while online requests waited */
    int fill_batches;                 /* online batches that carried offline rows */
    int64_t offline_rows;             /* offline rows computed, in either */
    int64_t tokens;                   /* tokens computed (rows for requests without) */
    int64_t cells;                    /* rows x the longest row, summed over batches */
    char violation[256];              /* first broken invariant, empty when none */
};

/* reqs sorted by arrival. Returns 0, or -1 with st->violation set (with
 * `check`: the first invariant broken). */
int sim_run(const struct sim_config *c, struct sim_request *reqs, int n, struct sim_stats *st);

#endif

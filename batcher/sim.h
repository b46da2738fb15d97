/* sim.h - the batcher's queue and policy driven on a virtual clock with
 * simulated instances whose execution time is known: deterministic, fast,
 * and the same code that runs in the server. The property tests run
 * thousands of random traces through it; loadgen/bench/policy_sim compares
 * the deadline-aware policy with the fixed delay on the same traces. */
#ifndef BG_SIM_H
#define BG_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/model.h"

struct sim_request {
    /* input */
    int64_t arrival_ns;
    int rows;
    int64_t budget_ns;        /* 0: no deadline */
    int priority;             /* 0: the model's default */
    /* output */
    int status;               /* 0 computed, BG_EDEADLINE, BG_EQUEUEFULL */
    int answers;              /* must end as 1 */
    int64_t start_ns, done_ns;
    int batch_rows;
};

struct sim_config {
    struct model_batching batching;   /* policy, sizes, delays, limits */
    int instances;
    double exec_a_ns, exec_b_ns;      /* a batch of R rows takes a + b*R */
    double jitter;                    /* 0, or relative noise of each batch's time */
    uint64_t seed;                    /* for the jitter */
    bool check;                       /* verify the invariants at every event */
};

struct sim_stats {
    int64_t span_ns;                  /* first arrival to last answer */
    int64_t busy_ns;                  /* instance-time executing, all instances */
    int batches;
    int64_t rows;
    char violation[256];              /* first broken invariant, empty when none */
};

/* reqs sorted by arrival. Returns 0, or -1 with st->violation set. */
int sim_run(const struct sim_config *c, struct sim_request *reqs, int n, struct sim_stats *st);

#endif

/* rate.h - a queue's observed arrival rate in rows per nanosecond, for the
 * policy's "is waiting for company worth it" rule (policy.h).
 *
 * An exponentially decaying count: every admitted request adds its rows,
 * and the count decays with time constant tau, so under a steady rate r it
 * settles at r * tau and rate_value() returns r. With no arrivals the value
 * decays to zero on its own, which is the safe side: a rate that is too low
 * only makes the policy start work sooner. It also starts at zero, so a
 * freshly loaded model never waits on a guess. The clock is passed in (the
 * batcher's now_ns(), the simulator's virtual clock), never read here. Not
 * thread-safe: the batcher guards it with its queue lock. */
#ifndef BG_RATE_H
#define BG_RATE_H

#include <stdint.h>

/* 100 ms: hundreds of arrivals at the rates where waiting can pay (rows
 * arriving faster than one per batch setup time), and a burst that ended
 * stops counting within a few tenths of a second. */
#define RATE_TAU_NS 100000000LL

struct rate {
    double count;        /* decayed rows, as of t_ns */
    int64_t t_ns;        /* the last update (meaningless while count is 0) */
    int64_t tau_ns;
};

void rate_init(struct rate *r, int64_t tau_ns);
/* `rows` arrived at now_ns (now_ns never goes back; an earlier one counts as now). */
void rate_add(struct rate *r, int64_t now_ns, int rows);
/* Rows per nanosecond at now_ns; 0 before any arrival. */
double rate_value(const struct rate *r, int64_t now_ns);

#endif

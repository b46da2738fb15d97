/* rate.h - a queue's observed arrival rate in rows per nanosecond, for the
 * policy's "is waiting for company worth it" rule (policy.h).
 *
 * The rows of the last RATE_WINDOW admitted requests over the time from the
 * first of them to now (that first one's own rows left out: the interval
 * starts at it). Counting arrivals rather than a time window makes the
 * estimate as quick at 100 000 rows/s as at 10: a burst after a silence is
 * seen after a few requests (an average over a fixed time would still be
 * diluted by the silence), and with no arrivals the value falls as 1/t on
 * its own, which is the safe side: a rate that is too low only makes the
 * policy start work sooner. Below two arrivals it is zero, so a freshly
 * loaded model never waits on a guess. The clock is passed in (the
 * batcher's now_ns(), the simulator's virtual clock), never read here. Not
 * thread-safe: the batcher guards it with its queue lock. */
#ifndef BG_RATE_H
#define BG_RATE_H

#include <stdint.h>

#define RATE_WINDOW 16

struct rate {
    int64_t t_ns[RATE_WINDOW];   /* ring of arrival instants */
    int rows[RATE_WINDOW];
    int n, next;
};

void rate_init(struct rate *r);
/* `rows` arrived at now_ns. */
void rate_add(struct rate *r, int64_t now_ns, int rows);
/* Rows per nanosecond at now_ns; 0 before two arrivals. */
double rate_value(const struct rate *r, int64_t now_ns);

#endif

/* rate.c - see rate.h. */
#include "batcher/rate.h"

#include <math.h>

void rate_init(struct rate *r, int64_t tau_ns)
{
    r->count = 0;
    r->t_ns = 0;
    r->tau_ns = tau_ns > 0 ? tau_ns : RATE_TAU_NS;
}

static double rate_decayed(const struct rate *r, int64_t now_ns)
{
    if (r->count == 0 || now_ns <= r->t_ns)
        return r->count;
    return r->count * exp(-(double)(now_ns - r->t_ns) / (double)r->tau_ns);
}

void rate_add(struct rate *r, int64_t now_ns, int rows)
{
    double c = rate_decayed(r, now_ns);
    r->count = c + rows;
    if (c == 0 || now_ns > r->t_ns)
        r->t_ns = now_ns;
}

double rate_value(const struct rate *r, int64_t now_ns)
{
    return rate_decayed(r, now_ns) / (double)r->tau_ns;
}

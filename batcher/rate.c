/* rate.c - see rate.h. */
#include "batcher/rate.h"

#include <string.h>

void rate_init(struct rate *r)
{
    memset(r, 0, sizeof *r);
}

void rate_add(struct rate *r, int64_t now_ns, int rows)
{
    r->t_ns[r->next] = now_ns;
    r->rows[r->next] = rows;
    r->next = (r->next + 1) % RATE_WINDOW;
    if (r->n < RATE_WINDOW)
        r->n++;
}

double rate_value(const struct rate *r, int64_t now_ns)
{
    if (r->n < 2)
        return 0;
    int first = (r->next - r->n + RATE_WINDOW) % RATE_WINDOW;
    int64_t rows = 0;
    for (int i = 1; i < r->n; i++)
        rows += r->rows[(first + i) % RATE_WINDOW];
    int64_t span = now_ns - r->t_ns[first];
    if (span < 1)
        span = 1;   /* a burst in one instant (a virtual clock): as fast as can be said */
    return (double)rows / (double)span;
}

/* admit.c - see admit.h.
 *
 * The rate as a generic cell rate algorithm: `tat` is when the bucket will
 * be full again. A request of n rows costs n / rate seconds; it fits when,
 * after paying, the bucket would be at most one second (its depth) away
 * from full: max(tat, now) + cost - depth <= now. A request larger than one
 * second's worth fits only into a full bucket (tat <= now), so it is
 * admitted, never refused for good, and its debt delays the next ones: the
 * long-run rate holds either way. */
#include "gateway/admit.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADMIT_NS 1000000000LL
/* The bucket's depth: one second's worth of rows. */
#define ADMIT_DEPTH_NS ADMIT_NS
/* A cost past this is a rate too small to matter; it keeps int64 from overflowing. */
#define ADMIT_COST_MAX_NS (INT64_C(1) << 60)

struct admit_tenant {
    _Alignas(64) _Atomic int inflight;
    _Atomic int64_t tat;              /* ns (now_ns clock); 0: full since forever */
    int max_inflight;                 /* 0: not counted */
    double rate;                      /* rows per second; 0: unlimited */
};

struct admit {
    const struct tenants_config *t;
    struct admit_tenant *ten;         /* [t->n] */
};

struct admit *admit_new(const struct tenants_config *t, struct error *err)
{
    struct admit *a = calloc(1, sizeof *a);
    size_t bytes = ((size_t)t->n * sizeof(struct admit_tenant) + 63) / 64 * 64;
    if (a)
        a->ten = aligned_alloc(64, bytes);
    if (!a || !a->ten) {
        free(a);
        error_set(err, BG_ENOMEM, "out of memory for the tenants' admission");
        return NULL;
    }
    memset(a->ten, 0, bytes);
    a->t = t;
    for (int i = 0; i < t->n; i++) {
        a->ten[i].max_inflight = t->t[i].max_inflight;
        a->ten[i].rate = t->t[i].rate_rows_per_s;
    }
    return a;
}

void admit_free(struct admit *a)
{
    if (!a)
        return;
    free(a->ten);
    free(a);
}

static int admit_secs_up(int64_t ns)
{
    int64_t s = (ns + ADMIT_NS - 1) / ADMIT_NS;
    return s < 1 ? 1 : s > 86400 ? 86400 : (int)s;
}

/* Takes n rows from the bucket, or says when they will be there. */
static int admit_rate(struct admit_tenant *t, int rows, int64_t now, int64_t *wait_ns)
{
    double c = (double)rows / t->rate * 1e9;
    int64_t cost = c < (double)ADMIT_COST_MAX_NS ? (int64_t)ceil(c) : ADMIT_COST_MAX_NS;
    int64_t depth = cost > ADMIT_DEPTH_NS ? cost : ADMIT_DEPTH_NS;
    int64_t tat = atomic_load_explicit(&t->tat, memory_order_relaxed);
    for (;;) {
        int64_t base = tat > now ? tat : now;
        int64_t next = base + cost;
        if (next - depth > now) {
            *wait_ns = next - depth - now;
            return -1;
        }
        if (atomic_compare_exchange_weak_explicit(&t->tat, &tat, next, memory_order_relaxed,
                                                  memory_order_relaxed))
            return 0;
    }
}

int admit_enter(struct admit *a, int tenant, int rows, int64_t now_ns, struct admit_refusal *why)
{
    if (tenant < 0 || tenant >= a->t->n)
        tenant = 0;
    struct admit_tenant *t = &a->ten[tenant];
    const char *name = a->t->t[tenant].name;
    if (t->max_inflight > 0) {
        int n = atomic_fetch_add_explicit(&t->inflight, 1, memory_order_relaxed) + 1;
        if (n > t->max_inflight) {
            atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_relaxed);
            why->reason = "max_inflight";
            why->retry_after_s = 1;
            snprintf(why->msg, sizeof why->msg, "tenant \"%s\" has %d requests in flight, its "
                     "max_inflight", name, t->max_inflight);
            return -BG_ETENANTLIMIT;
        }
    }
    int64_t wait;
    if (t->rate > 0 && admit_rate(t, rows, now_ns, &wait) < 0) {
        if (t->max_inflight > 0)
            atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_relaxed);
        why->reason = "rate_rows_per_s";
        why->retry_after_s = admit_secs_up(wait);
        snprintf(why->msg, sizeof why->msg, "tenant \"%s\" is over its rate_rows_per_s (%g): "
                 "the request's %d row%s fit in %.3f s", name, t->rate, rows, rows == 1 ? "" : "s",
                 (double)wait / 1e9);
        return -BG_ETENANTLIMIT;
    }
    return 0;
}

void admit_leave(struct admit *a, int tenant)
{
    if (tenant < 0 || tenant >= a->t->n)
        tenant = 0;
    if (a->ten[tenant].max_inflight > 0)
        atomic_fetch_sub_explicit(&a->ten[tenant].inflight, 1, memory_order_relaxed);
}

int admit_inflight(const struct admit *a, int tenant)
{
    return tenant >= 0 && tenant < a->t->n
               ? atomic_load_explicit(&a->ten[tenant].inflight, memory_order_relaxed)
               : 0;
}

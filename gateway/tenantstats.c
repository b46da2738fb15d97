/* tenantstats.c - see tenantstats.h. Each shard is one block per IO thread
 * starting on its own cache line. */
#include "gateway/tenantstats.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "serving/modelstats.h"

const char *const tenantstats_refusal_names[TS_REFUSED_COUNT] = {
    "no_key", "unknown_key", "admin_route", "model",
};

struct tenantstats {
    int nio, ntenants, nmodels;
    size_t stride;                    /* counters per shard, rounded to a cache line */
    _Atomic uint64_t *c;              /* [nio][stride]: refusals, then [tenant][model][code] */
};

struct tenantstats *tenantstats_new(int io_threads, int tenants, int models)
{
    struct tenantstats *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->nio = io_threads > 0 ? io_threads : 1;
    s->ntenants = tenants > 0 ? tenants : 1;
    s->nmodels = models > 0 ? models : 1;
    size_t n = TS_REFUSED_COUNT + (size_t)s->ntenants * (size_t)s->nmodels * MODELSTATS_CODES;
    s->stride = (n + 7) / 8 * 8;
    size_t bytes = (size_t)s->nio * s->stride * sizeof(uint64_t);
    s->c = aligned_alloc(64, bytes);
    if (!s->c) {
        free(s);
        return NULL;
    }
    memset(s->c, 0, bytes);
    return s;
}

void tenantstats_free(struct tenantstats *s)
{
    if (!s)
        return;
    free(s->c);
    free(s);
}

static int tenantstats_code_index(int status)
{
    for (int i = 0; i < MODELSTATS_CODES - 1; i++)
        if (modelstats_codes[i] == status)
            return i;
    return MODELSTATS_CODES - 1;
}

static size_t tenantstats_at(const struct tenantstats *s, int tenant, int model, int code_idx)
{
    return TS_REFUSED_COUNT +
           ((size_t)tenant * (size_t)s->nmodels + (size_t)model) * MODELSTATS_CODES +
           (size_t)code_idx;
}

void tenantstats_request(struct tenantstats *s, int thread, int tenant, int model, int status)
{
    if (!s || thread < 0 || thread >= s->nio || tenant < 0 || tenant >= s->ntenants ||
        model < 0 || model >= s->nmodels)
        return;
    _Atomic uint64_t *c = &s->c[(size_t)thread * s->stride +
                                tenantstats_at(s, tenant, model, tenantstats_code_index(status))];
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

void tenantstats_refused(struct tenantstats *s, int thread, enum tenantstats_refusal r)
{
    if (!s || thread < 0 || thread >= s->nio || (int)r < 0 || r >= TS_REFUSED_COUNT)
        return;
    atomic_fetch_add_explicit(&s->c[(size_t)thread * s->stride + (size_t)r], 1,
                              memory_order_relaxed);
}

static uint64_t tenantstats_sum(const struct tenantstats *s, size_t at)
{
    uint64_t n = 0;
    for (int i = 0; i < s->nio; i++)
        n += atomic_load_explicit(&s->c[(size_t)i * s->stride + at], memory_order_relaxed);
    return n;
}

uint64_t tenantstats_requests(const struct tenantstats *s, int tenant, int model, int code_idx)
{
    if (!s || tenant < 0 || tenant >= s->ntenants || model < 0 || model >= s->nmodels ||
        code_idx < 0 || code_idx >= MODELSTATS_CODES)
        return 0;
    return tenantstats_sum(s, tenantstats_at(s, tenant, model, code_idx));
}

uint64_t tenantstats_refusals(const struct tenantstats *s, enum tenantstats_refusal r)
{
    return s && (int)r >= 0 && r < TS_REFUSED_COUNT ? tenantstats_sum(s, (size_t)r) : 0;
}

/* tenantstats.h - answered inference requests per tenant, model and status
 * code (tenant_requests_total{tenant,model,code}, SPEC.md "Metrics added"),
 * and the requests the front door refused (auth_refusals_total{reason}).
 *
 * Recorded by the IO thread that answers, into its own shard (relaxed
 * atomics on memory no other writer touches, as serving/modelstats.c does):
 * no lock and no shared cache line on the request path. /metrics sums the
 * shards when asked. Models are served models' indexes (serving_at). */
#ifndef BG_TENANTSTATS_H
#define BG_TENANTSTATS_H

#include <stdint.h>

enum tenantstats_refusal {
    TS_REFUSED_NO_KEY,                /* 401: auth.required and no key */
    TS_REFUSED_UNKNOWN_KEY,           /* 401: a key no tenant holds */
    TS_REFUSED_ADMIN_ROUTE,           /* 403: an admin route, not an admin */
    TS_REFUSED_MODEL,                 /* 403: a model outside the tenant's globs */
    TS_REFUSED_COUNT
};
extern const char *const tenantstats_refusal_names[TS_REFUSED_COUNT];

struct tenantstats;

struct tenantstats *tenantstats_new(int io_threads, int tenants, int models);
void tenantstats_free(struct tenantstats *s);

/* IO thread `thread`: an inference request of `tenant` on model `model`
 * was answered with `status` (a code outside modelstats_codes counts as
 * "other"). */
void tenantstats_request(struct tenantstats *s, int thread, int tenant, int model, int status);
void tenantstats_refused(struct tenantstats *s, int thread, enum tenantstats_refusal r);

/* Summed over the shards: code_idx indexes modelstats_codes. */
uint64_t tenantstats_requests(const struct tenantstats *s, int tenant, int model, int code_idx);
uint64_t tenantstats_refusals(const struct tenantstats *s, enum tenantstats_refusal r);

#endif

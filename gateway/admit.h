/* admit.h - per-tenant admission of inference requests (SPEC.md "Tenants
 * and keys"): `max_inflight` (requests of the tenant in flight at once, all
 * models together) and `rate_rows_per_s` (rows per second, a bucket
 * holding one second's worth and at least one request). Past either: 429
 * with a computed Retry-After and the reason.
 *
 * On the request path of every IO thread, so no lock: one atomic counter
 * per tenant for in-flight requests and one atomic time per tenant for the
 * rate (the generic cell rate algorithm: the bucket is the distance between
 * now and a "theoretical arrival time", advanced by compare-and-swap). A
 * tenant without limits costs two loads. Each tenant's state has its own
 * cache line. */
#ifndef BG_ADMIT_H
#define BG_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "serving/tenant.h"
#include "state/state.h"

struct admit;

/* Why a request was refused: the 429's body and Retry-After. */
struct admit_refusal {
    const char *reason;               /* "max_inflight", "rate_rows_per_s", "tokens_per_minute", "tokens_per_day" */
    int retry_after_s;                /* at least 1 */
    bool no_retry;                    /* waiting will not cure it soon: x-should-retry: false */
    char msg[400];
};

/* The table must outlive the struct admit. */
struct admit *admit_new(const struct tenants_config *t, struct error *err);
void admit_free(struct admit *a);

/* A request of `rows` rows of `tenant` at now_ns (clock.h): 0, and the
 * request holds a place until admit_leave; or -BG_ETENANTLIMIT with *why
 * (no place held, no tokens taken). */
int admit_enter(struct admit *a, int tenant, int rows, int64_t now_ns, struct admit_refusal *why);
/* The request admitted by admit_enter was answered. */
void admit_leave(struct admit *a, int tenant);
/* A request admitted with `rows` was refused before it was computed (its
 * model's queue full, its deadline past at submit): its rows go back to
 * the tenant's rate_rows_per_s bucket (they were spent, and a client
 * retrying a 429 queue_full met a 429 rate_rows_per_s too). */
void admit_refund(struct admit *a, int tenant, int rows);
/* Requests of the tenant in flight now (counted only under a max_inflight). */
int admit_inflight(const struct admit *a, int tenant);

/* LLM pools' token quotas (tokens_per_minute over the last 60 s,
 * tokens_per_day over the UTC day; unix_s the wall clock). A call reserves
 * its estimate at entry: 0, or -BG_ETENANTLIMIT with *why (nothing
 * reserved). A call larger than a whole quota is admitted into an empty
 * window only. At its end the estimate gives way to the tokens it used.
 * Under one mutex per tenant with quotas; a tenant without costs a load. */
int admit_tokens_enter(struct admit *a, int tenant, int64_t estimate, int64_t now_ns,
                       int64_t unix_s, struct admit_refusal *why);
void admit_tokens_leave(struct admit *a, int tenant, int64_t estimate, int64_t used,
                        int64_t now_ns, int64_t unix_s);
bool admit_has_token_quota(const struct admit *a, int tenant);
/* Tokens a previous process counted (the usage ledger's rows, at start):
 * `used` tokens of which the last was used `ago_s` seconds before now.
 * They count toward the day when that moment is in today (UTC), and
 * toward the minute, from that moment, when it is less than 60 s ago: the
 * latest moment they could have been used, so the window never holds less
 * than the old process's did. A tenant without token quotas: nothing. */
void admit_tokens_restore(struct admit *a, int tenant, int64_t used, int64_t ago_s,
                          int64_t now_ns, int64_t unix_s);
/* Whether a model's ledger rows are tokens a quota counts (an LLM pool's;
 * another model's rows are inferences). */
typedef bool (*admit_counted_fn)(const char *model, void *arg);
/* At start, before any call: the tokens of today's minutes in the usage
 * ledger (state_usage_query), online class (batch lines are not charged),
 * of the models `counted` accepts, for each tenant with token quotas,
 * restored as above. How many ledger rows were carried, or a negative code
 * with err set. Nothing is read without token quotas. */
int admit_restore_ledger(struct admit *a, const struct tenants_config *tc, struct state *st,
                         admit_counted_fn counted, void *arg, int64_t now_ns, int64_t unix_s,
                         struct error *err);
/* Tokens the tenant used by its quotas' count: in the 60 s up to now_ns,
 * and today (UTC); 0 and 0 without token quotas. */
void admit_tokens_used(struct admit *a, int tenant, int64_t now_ns, int64_t unix_s,
                       int64_t *minute, int64_t *day);

#endif

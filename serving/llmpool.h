/* llmpool.h - an LLM pool at run time: its endpoints' state (batchgate's
 * calls in flight to each, what each last reported on its metrics page,
 * whether it is in), the picker that chooses the endpoint of each call
 * (picker.h), and what the pool measured (time to first token, inter-token
 * latency, tokens, sheds) for /metrics and the ledger.
 *
 * One per loaded copy of a pool model (backends/openai.c holds its servers
 * as httpc targets). The scrape of every endpoint's metrics page is also
 * its health probe (httpc_prober_new_sink): an endpoint that fails or stops
 * answering it is taken out until a scrape passes again; without scraping
 * (metrics_interval_ms 0) only failed calls take an endpoint out. The
 * scrape runs on the pool's own thread; everything else is called from the
 * IO threads, concurrently. */
#ifndef BG_LLMPOOL_H
#define BG_LLMPOOL_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "common/error.h"
#include "serving/scrape.h"

struct llmpool;
struct httpc_target;

/* Priorities of a pool's requests: SPEC's service_tier names, highest first. */
enum llm_priority { LLM_PRIO_HIGH, LLM_PRIO_DEFAULT, LLM_PRIO_LOW, LLM_PRIO_COUNT };
extern const char *const llm_priority_names[LLM_PRIO_COUNT];   /* "priority", "default", "flex" */

/* For a model_is_pool model once loaded; ntenants: the tenants counted in
 * llm_tokens_total (index 0 the default tenant). NULL with err filled. */
struct llmpool *llmpool_new(struct model *m, int ntenants, struct error *err);
/* The scrape thread (nothing to start without metrics_interval_ms). */
int llmpool_start(struct llmpool *p, struct error *err);
/* Stops the scrape thread; calls in flight are the IO threads' and end there. */
void llmpool_stop(struct llmpool *p);
void llmpool_free(struct llmpool *p);

const struct model *llmpool_model(const struct llmpool *p);
int llmpool_size(const struct llmpool *p);
struct httpc_target *llmpool_target(const struct llmpool *p, int e);

/* Whether an endpoint not in tried[0..ntried) is usable now: another try
 * could go somewhere. */
bool llmpool_has_untried(const struct llmpool *p, const int *tried, int ntried);
/* A call whose tries tried[k] for each bit k of not_found answered 404
 * was answered 2xx by another endpoint: the model is not on those, each
 * a failure of its endpoint (counted, 3 in a row take it out). A 404
 * alone blames nobody: it may be the request's own. */
void llmpool_found_elsewhere(struct llmpool *p, const int *tried, int ntried,
                             unsigned not_found);
/* The endpoint for a call whose prompt starts with these block hashes
 * (picker_prefix_hashes), skipping the endpoints in tried[0..ntried); -1
 * when none is left. The call counts in flight at e until llmpool_end. `why`
 * (optional): the picker's reason, for the debug log. */
int llmpool_pick(struct llmpool *p, const uint64_t *blocks, int nblocks, const int *tried,
                 int ntried, const char **why);
/* The call reached e's server: e now holds the prompt's blocks (pending
 * ones for a streamed call until its first content: picker_record_pending;
 * a whole answer says nothing sooner, so those count at once). */
void llmpool_sent(struct llmpool *p, int e, const uint64_t *blocks, int nblocks, bool streamed);
/* A streamed call sent to e (llmpool_sent's `streamed`) got its first
 * content (blocks: its prompt's, now confirmed held), or ended without any
 * (blocks NULL): it no longer counts as starting there
 * (picker_endpoint.starting). Once per such call. */
void llmpool_started(struct llmpool *p, int e, const uint64_t *blocks, int nblocks);
void llmpool_end(struct llmpool *p, int e);
/* An offline call (a Batch API line): the endpoint with idle capacity now
 * by the pool's `offline` settings (picker_pick_idle), not one of
 * skip[0..nskip), or -1. It counts in flight (online picks see it) until
 * llmpool_end_idle; a streamed one also as starting until llmpool_started
 * (an online pick then prefers an endpoint whose lines are past their
 * prefill, which a new call does not wait behind). */
int llmpool_pick_idle(struct llmpool *p, const int *skip, int nskip, bool streamed);
void llmpool_end_idle(struct llmpool *p, int e);
/* With offline.preempt: how many online calls were picked for e since the
 * last ask while offline calls were in flight there (each asks one offline
 * call to give way); taken, so that each is answered once. */
int llmpool_preempt_take(struct llmpool *p, int e);
/* Every usable endpoint is saturated (queue or KV cache at its
 * saturation level): low priorities are shed. */
bool llmpool_saturated(struct llmpool *p);

/* What a call measured, charged to endpoint e and tenant (index < ntenants). */
void llmpool_ttft(struct llmpool *p, int e, int tenant, int64_t ns);
void llmpool_itl(struct llmpool *p, int e, int64_t ns);
void llmpool_tokens(struct llmpool *p, int e, int tenant, int64_t prompt, int64_t completion);
void llmpool_shed(struct llmpool *p, enum llm_priority prio);

/* ---- for /metrics ---- */
#define LLM_TTFT_BUCKETS 14
#define LLM_ITL_BUCKETS 12
extern const double llm_ttft_bounds[LLM_TTFT_BUCKETS];   /* seconds, ascending */
extern const double llm_itl_bounds[LLM_ITL_BUCKETS];

struct llm_hist {
    uint64_t bucket[LLM_TTFT_BUCKETS + 1];   /* not cumulative; the last: above every bound */
    uint64_t count;
    double sum_s;
};

struct llm_endpoint_view {
    bool usable;
    int inflight;
    int starting;                    /* of inflight, streamed with no content yet */
    struct scrape_load load;         /* fields -1 where never reported */
    double scraped_age_s;            /* -1: never */
    struct llm_hist ttft, itl;
    uint64_t calls;                  /* picked */
    uint64_t prompt_tokens, completion_tokens;
};
void llmpool_endpoint(struct llmpool *p, int e, struct llm_endpoint_view *out);
/* Tokens by tenant: out[t * 2] prompt, out[t * 2 + 1] completion, for t <
 * the pool's ntenants; returns ntenants. */
int llmpool_tenant_tokens(struct llmpool *p, uint64_t *out, int max_tenants);
/* Time to first token by tenant into out[0..), for t < ntenants; returns
 * how many. */
int llmpool_tenant_ttft(struct llmpool *p, struct llm_hist *out, int max_tenants);
void llmpool_sheds(struct llmpool *p, uint64_t out[LLM_PRIO_COUNT]);

#endif

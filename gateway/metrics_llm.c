/* metrics_llm.c - see metrics_llm.h. Each family's samples are written
 * together, pool after pool, as the text format wants them. */
#include "gateway/metrics_llm.h"

#include <stdlib.h>

#include "batcher/work.h"
#include "common/buf.h"
#include "common/httpc.h"
#include "gateway/auth.h"
#include "gateway/promtext.h"
#include "serving/llmpool.h"

#define P "batchgate_"

/* model="m",<key>="v" */
static void llm_labels_kv(struct buf *b, const char *model, const char *key, const char *v)
{
    buf_append(b, "model=\"", 7);
    promtext_label(b, model);
    buf_appendf(b, "\",%s=\"", key);
    promtext_label(b, v);
    buf_append(b, "\"", 1);
}

static void llm_hist(struct buf *b, const char *name, const char *model, const char *key,
                     const char *v, const struct llm_hist *h, const double *bounds, int nb)
{
    uint64_t cum = 0;
    for (int i = 0; i < nb; i++) {
        cum += h->bucket[i];
        buf_appendf(b, P "%s_bucket{", name);
        llm_labels_kv(b, model, key, v);
        buf_appendf(b, ",le=\"%g\"} %llu\n", bounds[i], (unsigned long long)cum);
    }
    buf_appendf(b, P "%s_bucket{", name);
    llm_labels_kv(b, model, key, v);
    buf_appendf(b, ",le=\"+Inf\"} %llu\n" P "%s_sum{", (unsigned long long)h->count, name);
    llm_labels_kv(b, model, key, v);
    buf_appendf(b, "} %.9g\n" P "%s_count{", h->sum_s, name);
    llm_labels_kv(b, model, key, v);
    buf_appendf(b, "} %llu\n", (unsigned long long)h->count);
}

int metrics_llm_render(struct buf *b, const struct metrics_llm_pool *p, int n,
                       const struct auth *auth)
{
    if (n == 0)
        return 0;
    /* One view per endpoint, taken once, so every family agrees. */
    int total = 0;
    for (int i = 0; i < n; i++)
        total += llmpool_size(p[i].pool);
    struct llm_endpoint_view *v = calloc((size_t)total, sizeof *v);
    if (!v)
        return -1;
    for (int i = 0, k = 0; i < n; i++)
        for (int e = 0; e < llmpool_size(p[i].pool); e++)
            llmpool_endpoint(p[i].pool, e, &v[k++]);
#define EACH_ENDPOINT                                                                  \
    for (int i = 0, k = 0; i < n; i++)                                                 \
        for (int e = 0; e < llmpool_size(p[i].pool); e++, k++)
#define URL httpc_target_url(llmpool_target(p[i].pool, e))

    promtext_head(b, P, "llm_time_to_first_token_seconds", "histogram",
                  "From a request's arrival to the first chunk of generated text, by endpoint.");
    EACH_ENDPOINT llm_hist(b, "llm_time_to_first_token_seconds", p[i].name, "endpoint", URL,
                           &v[k].ttft, llm_ttft_bounds, LLM_TTFT_BUCKETS);
    promtext_head(b, P, "llm_inter_token_latency_seconds", "histogram",
                  "Between successive chunks of generated text of one streamed answer.");
    EACH_ENDPOINT llm_hist(b, "llm_inter_token_latency_seconds", p[i].name, "endpoint", URL,
                           &v[k].itl, llm_itl_bounds, LLM_ITL_BUCKETS);
    promtext_head(b, P, "llm_endpoint_tokens_total", "counter",
                  "Tokens of the answered calls by endpoint (kind: prompt, completion).");
    EACH_ENDPOINT {
        buf_appendf(b, P "llm_endpoint_tokens_total{");
        llm_labels_kv(b, p[i].name, "endpoint", URL);
        buf_appendf(b, ",kind=\"prompt\"} %llu\n" P "llm_endpoint_tokens_total{",
                    (unsigned long long)v[k].prompt_tokens);
        llm_labels_kv(b, p[i].name, "endpoint", URL);
        buf_appendf(b, ",kind=\"completion\"} %llu\n", (unsigned long long)v[k].completion_tokens);
    }
    static const struct {
        const char *name, *help;
    } gauges[] = {
        {"endpoint_inflight", "batchgate's calls in flight to the endpoint."},
        {"endpoint_starting", "Of those, streamed calls with no content back yet (the picker's queue)."},
        {"endpoint_up", "1 while the endpoint takes calls (its metrics scrape and calls pass)."},
        {"endpoint_waiting", "Requests queued in the endpoint, as its metrics last said."},
        {"endpoint_running", "Requests the endpoint is generating for, as its metrics last said."},
        {"endpoint_kv_cache_usage", "The endpoint's KV cache in use (0..1), where it reports it."},
    };
    for (int g = 0; g < (int)(sizeof gauges / sizeof gauges[0]); g++) {
        promtext_head(b, P, gauges[g].name, "gauge", gauges[g].help);
        EACH_ENDPOINT {
            double x = g == 0   ? v[k].inflight
                       : g == 1 ? v[k].starting
                       : g == 2 ? v[k].usable
                       : g == 3 ? v[k].load.waiting
                       : g == 4 ? v[k].load.running
                                : v[k].load.kv_cache;
            if (x < 0)
                continue;   /* the server does not report it */
            buf_appendf(b, P "%s{", gauges[g].name);
            llm_labels_kv(b, p[i].name, "endpoint", URL);
            buf_appendf(b, "} %.9g\n", x);
        }
    }
    free(v);
#undef EACH_ENDPOINT
#undef URL
    promtext_head(b, P, "llm_tokens_total", "counter",
                  "Tokens of the answered calls by pool and tenant (kind: prompt, completion).");
    for (int i = 0; i < n; i++) {
        uint64_t tok[2 * WORK_TENANTS_MAX];
        int nt = llmpool_tenant_tokens(p[i].pool, tok, WORK_TENANTS_MAX);
        for (int t = 0; t < nt; t++) {
            if (!tok[2 * t] && !tok[2 * t + 1] && t > 0)
                continue;
            const char *tenant = auth ? auth_tenant_name(auth, t) : "default";
            for (int kind = 0; kind < 2; kind++) {
                buf_appendf(b, P "llm_tokens_total{model=\"");
                promtext_label(b, p[i].name);
                buf_appendf(b, "\",tenant=\"");
                promtext_label(b, tenant);
                buf_appendf(b, "\",kind=\"%s\"} %llu\n", kind ? "completion" : "prompt",
                            (unsigned long long)tok[2 * t + kind]);
            }
        }
    }
    promtext_head(b, P, "llm_tenant_time_to_first_token_seconds", "histogram",
                  "Time to first token by pool and tenant (tenants with answers only).");
    for (int i = 0; i < n; i++) {
        struct llm_hist *th = calloc(WORK_TENANTS_MAX, sizeof *th);
        if (!th)
            return -1;
        int nt = llmpool_tenant_ttft(p[i].pool, th, WORK_TENANTS_MAX);
        for (int t = 0; t < nt; t++)
            if (th[t].count)
                llm_hist(b, "llm_tenant_time_to_first_token_seconds", p[i].name, "tenant",
                         auth ? auth_tenant_name(auth, t) : "default", &th[t], llm_ttft_bounds,
                         LLM_TTFT_BUCKETS);
        free(th);
    }
    promtext_head(b, P, "llm_shed_total", "counter",
                  "Requests answered 429 because every endpoint was saturated, by priority.");
    for (int i = 0; i < n; i++) {
        uint64_t sheds[LLM_PRIO_COUNT];
        llmpool_sheds(p[i].pool, sheds);
        for (int q = 0; q < LLM_PRIO_COUNT; q++) {
            buf_appendf(b, P "llm_shed_total{model=\"");
            promtext_label(b, p[i].name);
            buf_appendf(b, "\",priority=\"%s\"} %llu\n", llm_priority_names[q],
                        (unsigned long long)sheds[q]);
        }
    }
    return 0;
}

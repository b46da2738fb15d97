/* llmpool.c - see llmpool.h. */
#include "serving/llmpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <event2/thread.h>

#include "common/clock.h"
#include "common/httpc.h"
#include "common/log.h"
#include "serving/picker.h"

const char *const llm_priority_names[LLM_PRIO_COUNT] = {"priority", "default", "flex"};

/* Time to first token spans a cached prompt on a fast server (~10 ms) to a
 * long prompt on a loaded one (a minute); inter-token latency ~1 ms to 1 s. */
const double llm_ttft_bounds[LLM_TTFT_BUCKETS] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75,
                                                  1,    2.5,   5,    10,  20,   40,  80};
const double llm_itl_bounds[LLM_ITL_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04,
                                                0.06,  0.08,   0.1,   0.25, 0.5,  1};

struct lp_endpoint {
    struct httpc_target *t;
    _Atomic int inflight;
    _Atomic int offline_inflight;       /* of inflight, the Batch API's */
    _Atomic int preempt;                /* online picks asking an offline call to give way */
    _Atomic int starting;               /* streamed calls with no content yet (picker.h) */
    /* Under the pool's mutex: */
    struct scrape_load load;
    int64_t scraped_ns;
    int inflight_at_scrape;             /* ours then: the scrape may count them already */
    bool was_out;                       /* taken out since the last good scrape */
    struct llm_hist ttft, itl;
    uint64_t calls, prompt_tokens, completion_tokens;
};

struct llmpool {
    struct model *m;
    int n;
    int ntenants;
    pthread_mutex_t mu;                 /* the endpoints' scraped and measured fields */
    struct picker *picker;              /* thread-safe itself */
    struct event_base *base;            /* the scrape thread's */
    struct httpc_prober *prober;
    pthread_t thread;
    bool running;
    uint64_t sheds[LLM_PRIO_COUNT];
    uint64_t *tenant_tokens;            /* [ntenants * 2] */
    struct llm_hist *tenant_ttft;       /* [ntenants] */
    struct lp_endpoint ep[];
};

static void llmpool_hist_record(struct llm_hist *h, const double *bounds, int nb, double s)
{
    int i = 0;
    while (i < nb && s > bounds[i])
        i++;
    h->bucket[i]++;
    h->count++;
    h->sum_s += s;
}

/* Whether a server answering its scrape again has lost its prefix cache
 * since the last one: its prompt-token counter went backwards (a counter
 * restarts at 0 with its process); without that counter, whether it was
 * taken out in between (it may have restarted unseen). A server whose
 * scrapes were only slow for a while keeps its blocks in the picker. */
static const char *llmpool_restarted(const struct lp_endpoint *ep, const struct scrape_load *now)
{
    if (now->prompt_tokens >= 0 && ep->load.prompt_tokens >= 0)
        return now->prompt_tokens < ep->load.prompt_tokens ? "its prompt token counter went back"
                                                           : NULL;
    return ep->was_out ? "back after being taken out" : NULL;
}

/* The prober's sink, on the scrape thread: each endpoint's metrics page,
 * after the target's health took the outcome in (httpc.h). */
static void llmpool_on_scrape(void *arg, int e, int status, const char *body, size_t len)
{
    struct llmpool *p = arg;
    struct lp_endpoint *ep = &p->ep[e];
    struct scrape_load load;
    bool ok = status == 200 && scrape_parse(body, len, &load) == 0;
    const char *forget = NULL;
    pthread_mutex_lock(&p->mu);
    if (ok) {
        forget = llmpool_restarted(ep, &load);
        ep->load = load;
        ep->scraped_ns = now_ns();
        ep->inflight_at_scrape = atomic_load(&ep->inflight);
        ep->was_out = false;
    } else if (!httpc_target_usable(ep->t, now_ns())) {
        ep->was_out = true;
    }
    pthread_mutex_unlock(&p->mu);
    if (forget) {
        log_info("model %s: endpoint %s may have restarted (%s): the picker forgets what "
                 "it cached", p->m->cfg.name, httpc_target_url(ep->t), forget);
        picker_forget(p->picker, e);
    }
    if (!ok && status == 200)
        log_debug("model %s: endpoint %s: its metrics page is not Prometheus text",
                  p->m->cfg.name, httpc_target_url(ep->t));
}

static void *llmpool_main(void *arg)
{
    struct llmpool *p = arg;
    event_base_loop(p->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

struct llmpool *llmpool_new(struct model *m, int ntenants, struct error *err)
{
    struct httpc_target *const *ts;
    int n = model_servers(m, &ts);
    if (n <= 0) {
        error_set(err, BG_EINTERNAL, "model %s: a pool without endpoints", m->cfg.name);
        return NULL;
    }
    struct llmpool *p = calloc(1, sizeof *p + (size_t)n * sizeof p->ep[0]);
    if (!p) {
        error_set(err, BG_ENOMEM, "model %s: out of memory", m->cfg.name);
        return NULL;
    }
    p->m = m;
    p->n = n;
    p->ntenants = ntenants > 0 ? ntenants : 1;
    pthread_mutex_init(&p->mu, NULL);
    const struct model_pool *c = &m->cfg.pool;
    struct picker_config pc = {
        .policy = c->policy == POOL_PICK_ROUND_ROBIN     ? PICKER_ROUND_ROBIN
                  : c->policy == POOL_PICK_LEAST_INFLIGHT ? PICKER_LEAST_INFLIGHT
                                                          : PICKER_SCORE,
        .w_queue = c->w_queue,
        .w_kv_cache = c->w_kv_cache,
        .w_prefix = c->w_prefix,
        .sat_waiting = c->sat_waiting,
        .sat_kv_cache = c->sat_kv_cache,
        .affinity_entries = c->affinity_entries,
        .metrics_interval_ms = c->metrics_interval_ms,
    };
    p->picker = picker_new(&pc, n);
    p->tenant_tokens = calloc((size_t)p->ntenants * 2, sizeof *p->tenant_tokens);
    p->tenant_ttft = calloc((size_t)p->ntenants, sizeof *p->tenant_ttft);
    if (!p->picker || !p->tenant_tokens || !p->tenant_ttft) {
        llmpool_free(p);
        error_set(err, BG_ENOMEM, "model %s: out of memory", m->cfg.name);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        p->ep[i].t = ts[i];
        p->ep[i].load = (struct scrape_load){.waiting = -1, .running = -1, .kv_cache = -1,
                                             .prompt_tokens = -1, .cached_prompt_tokens = -1,
                                             .computed_prompt_tokens = -1};
    }
    return p;
}

int llmpool_start(struct llmpool *p, struct error *err)
{
    const struct model_pool *c = &p->m->cfg.pool;
    if (c->metrics_interval_ms <= 0)
        return 0;
    p->base = event_base_new();
    char who[300];
    snprintf(who, sizeof who, "model %s", p->m->cfg.name);
    struct httpc_target *const *ts;
    model_servers(p->m, &ts);
    if (p->base)
        p->prober = httpc_prober_new_sink(p->base, ts, p->n, c->metrics_path,
                                          c->metrics_interval_ms, who, llmpool_on_scrape, p);
    if (!p->prober)
        return error_set(err, BG_ENOMEM, "model %s: out of memory for the metrics scrape",
                         p->m->cfg.name);
    int rc = pthread_create(&p->thread, NULL, llmpool_main, p);
    if (rc)
        return error_set(err, BG_EINTERNAL, "model %s: cannot start the metrics scrape: %s",
                         p->m->cfg.name, strerror(rc));
    p->running = true;
    return 0;
}

void llmpool_stop(struct llmpool *p)
{
    if (!p)
        return;
    if (p->running) {
        event_base_loopbreak(p->base);
        pthread_join(p->thread, NULL);
        p->running = false;
    }
    httpc_prober_free(p->prober);
    p->prober = NULL;
    if (p->base)
        event_base_free(p->base);
    p->base = NULL;
}

void llmpool_free(struct llmpool *p)
{
    if (!p)
        return;
    llmpool_stop(p);
    picker_free(p->picker);
    free(p->tenant_tokens);
    free(p->tenant_ttft);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

const struct model *llmpool_model(const struct llmpool *p) { return p->m; }
int llmpool_size(const struct llmpool *p) { return p->n; }
struct httpc_target *llmpool_target(const struct llmpool *p, int e) { return p->ep[e].t; }

/* The picker's view of every endpoint now. */
static void llmpool_view(struct llmpool *p, struct picker_endpoint *v, int64_t now)
{
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < p->n; i++) {
        struct lp_endpoint *ep = &p->ep[i];
        v[i] = (struct picker_endpoint){
            .usable = httpc_target_usable(ep->t, now),
            .inflight = atomic_load_explicit(&ep->inflight, memory_order_relaxed),
            .load = ep->load,
            .scraped_ns = ep->scraped_ns,
            .inflight_at_scrape = ep->inflight_at_scrape,
            .offline_inflight = atomic_load_explicit(&ep->offline_inflight, memory_order_relaxed),
            .starting = atomic_load_explicit(&ep->starting, memory_order_relaxed),
            .slots = p->m->cfg.pool.slots,
        };
    }
    pthread_mutex_unlock(&p->mu);
}

int llmpool_pick_idle(struct llmpool *p, const int *skip, int nskip, bool streamed)
{
    const struct model_pool *c = &p->m->cfg.pool;
    if (c->offline_max_running <= 0)
        return -1;
    struct picker_endpoint stack[32], *v = p->n <= 32 ? stack : malloc((size_t)p->n * sizeof *v);
    if (!v)
        return -1;
    int64_t now = now_ns();
    llmpool_view(p, v, now);
    struct picker_idle idle = {.max_running = c->offline_max_running,
                               .max_inflight = c->offline_max_inflight};
    int e = picker_pick_idle(p->picker, v, p->n, &idle, skip, nskip, now);
    if (v != stack)
        free(v);
    if (e >= 0) {
        atomic_fetch_add(&p->ep[e].inflight, 1);
        atomic_fetch_add(&p->ep[e].offline_inflight, 1);
        if (streamed)
            atomic_fetch_add(&p->ep[e].starting, 1);
        pthread_mutex_lock(&p->mu);
        p->ep[e].calls++;
        pthread_mutex_unlock(&p->mu);
    }
    return e;
}

void llmpool_end_idle(struct llmpool *p, int e)
{
    atomic_fetch_sub(&p->ep[e].offline_inflight, 1);
    atomic_fetch_sub(&p->ep[e].inflight, 1);
}

bool llmpool_has_untried(const struct llmpool *p, const int *tried, int ntried)
{
    int64_t now = now_ns();
    for (int i = 0; i < p->n; i++) {
        bool was = false;
        for (int k = 0; k < ntried && !was; k++)
            was = tried[k] == i;
        if (!was && httpc_target_usable(p->ep[i].t, now))
            return true;
    }
    return false;
}

void llmpool_found_elsewhere(struct llmpool *p, const int *tried, int ntried,
                             unsigned not_found)
{
    for (int k = 0; k < ntried && k < 32; k++)
        if ((not_found & (1u << k)) && tried[k] >= 0 && tried[k] < p->n)
            httpc_target_failed(p->ep[tried[k]].t, HTTPC_FAIL_STATUS);
}

int llmpool_pick(struct llmpool *p, const uint64_t *blocks, int nblocks, const int *tried,
                 int ntried, const char **why)
{
    struct picker_endpoint stack[32], *v = p->n <= 32 ? stack : malloc((size_t)p->n * sizeof *v);
    if (!v)
        return -1;
    int64_t now = now_ns();
    llmpool_view(p, v, now);
    int e = picker_pick_except(p->picker, v, p->n, blocks, nblocks, tried, ntried, now, why);
    if (v != stack)
        free(v);
    if (e >= 0) {
        atomic_fetch_add(&p->ep[e].inflight, 1);
        if (p->m->cfg.pool.offline_preempt &&
            atomic_load_explicit(&p->ep[e].offline_inflight, memory_order_relaxed) > 0)
            atomic_fetch_add(&p->ep[e].preempt, 1);
        pthread_mutex_lock(&p->mu);
        p->ep[e].calls++;
        pthread_mutex_unlock(&p->mu);
    }
    return e;
}

int llmpool_preempt_take(struct llmpool *p, int e)
{
    return atomic_exchange(&p->ep[e].preempt, 0);
}

void llmpool_sent(struct llmpool *p, int e, const uint64_t *blocks, int nblocks, bool streamed)
{
    if (streamed)
        atomic_fetch_add(&p->ep[e].starting, 1);
    if (nblocks > 0 && streamed)
        picker_record_pending(p->picker, e, blocks, nblocks);
    else if (nblocks > 0)
        picker_record(p->picker, e, blocks, nblocks);
}

void llmpool_started(struct llmpool *p, int e, const uint64_t *blocks, int nblocks)
{
    atomic_fetch_sub(&p->ep[e].starting, 1);
    if (blocks && nblocks > 0)
        picker_confirm(p->picker, e, blocks, nblocks);
}

void llmpool_end(struct llmpool *p, int e) { atomic_fetch_sub(&p->ep[e].inflight, 1); }

bool llmpool_saturated(struct llmpool *p)
{
    struct picker_endpoint stack[32], *v = p->n <= 32 ? stack : malloc((size_t)p->n * sizeof *v);
    if (!v)
        return false;
    int64_t now = now_ns();
    llmpool_view(p, v, now);
    bool sat = picker_saturated(p->picker, v, p->n, now);
    if (v != stack)
        free(v);
    return sat;
}

void llmpool_ttft(struct llmpool *p, int e, int tenant, int64_t ns)
{
    if (tenant < 0 || tenant >= p->ntenants)
        tenant = 0;
    pthread_mutex_lock(&p->mu);
    llmpool_hist_record(&p->ep[e].ttft, llm_ttft_bounds, LLM_TTFT_BUCKETS, (double)ns / 1e9);
    llmpool_hist_record(&p->tenant_ttft[tenant], llm_ttft_bounds, LLM_TTFT_BUCKETS,
                        (double)ns / 1e9);
    pthread_mutex_unlock(&p->mu);
}

void llmpool_itl(struct llmpool *p, int e, int64_t ns)
{
    pthread_mutex_lock(&p->mu);
    llmpool_hist_record(&p->ep[e].itl, llm_itl_bounds, LLM_ITL_BUCKETS, (double)ns / 1e9);
    pthread_mutex_unlock(&p->mu);
}

void llmpool_tokens(struct llmpool *p, int e, int tenant, int64_t prompt, int64_t completion)
{
    if (tenant < 0 || tenant >= p->ntenants)
        tenant = 0;
    pthread_mutex_lock(&p->mu);
    if (e >= 0 && e < p->n) {
        p->ep[e].prompt_tokens += (uint64_t)(prompt > 0 ? prompt : 0);
        p->ep[e].completion_tokens += (uint64_t)(completion > 0 ? completion : 0);
    }
    p->tenant_tokens[tenant * 2] += (uint64_t)(prompt > 0 ? prompt : 0);
    p->tenant_tokens[tenant * 2 + 1] += (uint64_t)(completion > 0 ? completion : 0);
    pthread_mutex_unlock(&p->mu);
}

void llmpool_shed(struct llmpool *p, enum llm_priority prio)
{
    pthread_mutex_lock(&p->mu);
    p->sheds[prio]++;
    pthread_mutex_unlock(&p->mu);
}

void llmpool_endpoint(struct llmpool *p, int e, struct llm_endpoint_view *out)
{
    int64_t now = now_ns();
    struct lp_endpoint *ep = &p->ep[e];
    pthread_mutex_lock(&p->mu);
    *out = (struct llm_endpoint_view){
        .usable = httpc_target_usable(ep->t, now),
        .inflight = atomic_load(&ep->inflight),
        .starting = atomic_load(&ep->starting),
        .load = ep->load,
        .scraped_age_s = ep->scraped_ns ? (double)(now - ep->scraped_ns) / 1e9 : -1,
        .ttft = ep->ttft,
        .itl = ep->itl,
        .calls = ep->calls,
        .prompt_tokens = ep->prompt_tokens,
        .completion_tokens = ep->completion_tokens,
    };
    pthread_mutex_unlock(&p->mu);
}

int llmpool_tenant_tokens(struct llmpool *p, uint64_t *out, int max_tenants)
{
    int n = p->ntenants < max_tenants ? p->ntenants : max_tenants;
    pthread_mutex_lock(&p->mu);
    memcpy(out, p->tenant_tokens, (size_t)n * 2 * sizeof *out);
    pthread_mutex_unlock(&p->mu);
    return n;
}

int llmpool_tenant_ttft(struct llmpool *p, struct llm_hist *out, int max_tenants)
{
    int n = p->ntenants < max_tenants ? p->ntenants : max_tenants;
    pthread_mutex_lock(&p->mu);
    memcpy(out, p->tenant_ttft, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&p->mu);
    return n;
}

void llmpool_sheds(struct llmpool *p, uint64_t out[LLM_PRIO_COUNT])
{
    pthread_mutex_lock(&p->mu);
    memcpy(out, p->sheds, sizeof p->sheds);
    pthread_mutex_unlock(&p->mu);
}

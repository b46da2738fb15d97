/* api_metrics.c - GET /metrics: every metric of SPEC.md in the Prometheus
 * text format 0.0.4, summed from the per-thread shards at scrape time
 * (modelstats.h), in base units (seconds, bytes). */
#include "gateway/api.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/httpc.h"
#include "gateway/admit.h"
#include "gateway/auth.h"
#include "gateway/grpc.h"
#include "gateway/grpc_codec.h"
#include "gateway/tenantstats.h"
#include "serving/modelstats.h"
#include "gateway/metrics_triton.h"
#include "gateway/promtext.h"
#include "gateway/metrics_llm.h"
#include "gateway/nvml.h"
#include "gateway/proxy.h"
#include "http/http.h"
#include "serving/jobs.h"
#include "serving/ledger.h"
#include "serving/lifecycle.h"
#include "serving/serving.h"
#include "state/state.h"

#define P "batchgate_"

static void metrics_head(struct buf *b, const char *name, const char *type, const char *help)
{
    promtext_head(b, P, name, type, help);
}

static void metrics_label(struct buf *b, const char *v) { promtext_label(b, v); }

/* model="m", and version="v" for a model serving several versions side by
 * side (one series per version). */
static void metrics_model(struct buf *b, const struct served_model *sm)
{
    buf_append(b, "model=\"", 7);
    metrics_label(b, sm->model.cfg.name);
    buf_append(b, "\"", 1);
    if (served_pinned_version(sm))
        buf_appendf(b, ",version=\"%d\"", served_pinned_version(sm));
}

static void metrics_hist(struct buf *b, const char *name, const struct served_model *sm,
                 const struct modelstats_hist *h, const double *bounds, int nb)
{
    uint64_t cum = 0;
    for (int i = 0; i < nb; i++) {
        cum += h->bucket[i];
        if (bounds[i] >= 1e29)
            continue;   /* the overflow bucket only feeds +Inf */
        buf_appendf(b, P "%s_bucket{", name);
        metrics_model(b, sm);
        buf_appendf(b, ",le=\"%g\"} %llu\n", bounds[i], (unsigned long long)cum);
    }
    for (int i = nb; i < MODELSTATS_LAT_BUCKETS; i++)
        cum += h->bucket[i];
    buf_appendf(b, P "%s_bucket{", name);
    metrics_model(b, sm);
    buf_appendf(b, ",le=\"+Inf\"} %llu\n" P "%s_sum{", (unsigned long long)cum, name);
    metrics_model(b, sm);
    buf_appendf(b, "} %.15g\n" P "%s_count{", h->sum, name);
    metrics_model(b, sm);
    buf_appendf(b, "} %llu\n", (unsigned long long)h->count);
}

/* name{model="m"[,version="v"][,extra]} value */
static void metrics_sample(struct buf *b, const char *name, const struct served_model *sm,
                           const char *extra, double v)
{
    buf_appendf(b, P "%s{", name);
    metrics_model(b, sm);
    buf_appendf(b, "%s%s} %.15g\n", extra && *extra ? "," : "", extra ? extra : "", v);
}

/* A model's device rows (serving_model_devices), gathered once per scrape
 * so that every family shows the same devices with the same numbers. */
struct metrics_devices {
    struct served_model *sm;          /* the model's copy, held for the scrape */
    bool hidden;                      /* removed or retired: no per-model series */
    struct served_device *d;
    int n, cap;
    bool oom;
};

static void metrics_device_add(const struct served_device *d, void *arg)
{
    struct metrics_devices *v = arg;
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        struct served_device *d2 = realloc(v->d, (size_t)cap * sizeof *d2);
        if (!d2) {
            v->oom = true;
            return;
        }
        v->d = d2;
        v->cap = cap;
    }
    v->d[v->n++] = *d;
}

/* The servers behind: upstream models' servers (their device rows) and
 * proxy routes' URLs, each with its owner's metrics_label ("model" or "route"). */
struct target_row {
    /* model="m",upstream="url" or route="/x/",... (escaped), whole: cut at
     * a fixed size (299 bytes), a long prefix or URL ended a label value
     * inside an escape or without its quote, and Prometheus refused the
     * whole page. */
    char *owner;
    struct httpc_target_stats st;
};

struct target_rows {
    struct target_row *r;
    int n, cap;
};

static int metrics_target_row_add(struct target_rows *rows, const char *key, const char *name,
                          const char *url, const struct httpc_target_stats *st)
{
    if (rows->n == rows->cap) {
        int cap = rows->cap ? rows->cap * 2 : 8;
        struct target_row *r2 = realloc(rows->r, (size_t)cap * sizeof *r2);
        if (!r2)
            return -1;
        rows->r = r2;
        rows->cap = cap;
    }
    struct buf lb = BUF_INIT;
    buf_appendf(&lb, "%s=\"", key);
    metrics_label(&lb, name);
    buf_append(&lb, "\",upstream=\"", 12);
    metrics_label(&lb, url);
    buf_append(&lb, "\"", 1);
    char *owner = lb.data ? strndup(lb.data, lb.len) : NULL;
    buf_free(&lb);
    if (!owner)
        return -1;
    struct target_row *r = &rows->r[rows->n++];
    r->owner = owner;
    r->st = *st;
    return 0;
}

static void metrics_target_rows_free(struct target_rows *rows)
{
    for (int i = 0; i < rows->n; i++)
        free(rows->r[i].owner);
    free(rows->r);
}

static int metrics_collect_targets(struct api_state *st, const struct metrics_devices *devs,
                           struct target_rows *rows)
{
    int n = st->serving ? serving_count(st->serving) : 0;
    for (int o = 0; o < n && devs[o].sm; o++)
        for (int i = 0; i < devs[o].n && !devs[o].hidden; i++) {
            const struct served_device *d = &devs[o].d[i];
            if (d->dev.kind == BACKEND_DEVICE_UPSTREAM &&
                metrics_target_row_add(rows, "model", devs[o].sm->model.cfg.name, d->url,
                               &d->server) < 0)
                return -1;
        }
    for (int o = 0; o < proxy_route_count(st->proxy); o++) {
        struct httpc_target *const *ts = NULL;
        int nt = proxy_route_targets(st->proxy, o, &ts);
        for (int i = 0; i < nt; i++) {
            struct httpc_target_stats ts_st;
            httpc_target_stats(ts[i], &ts_st);
            if (metrics_target_row_add(rows, "route", proxy_route_prefix(st->proxy, o),
                               httpc_target_url(ts[i]), &ts_st) < 0)
                return -1;
        }
    }
    return rows->n;
}

/* ---- tenants' device time (serving/shares.h) ---- */

/* NAME{tenant="t",device="d" (both escaped, as every label value here:
 * the names are checked today, the text should not rest on it). */
static void metrics_tenant_device(struct buf *b, const char *family, const char *tenant,
                                  const char *device)
{
    buf_appendf(b, P "%s{tenant=\"", family);
    metrics_label(b, tenant);
    buf_append(b, "\",device=\"", 10);
    metrics_label(b, device);
    buf_append(b, "\"", 1);
}

static void metrics_render_tenant_devices(struct api_state *st, struct buf *b)
{
    const struct tenants_config *tc = st->serving ? serving_tenants(st->serving) : NULL;
    if (!tc || tc->n <= 1)
        return;
    struct served_tenant_row *r = NULL;
    int n = serving_tenant_rows(st->serving, &r);
    metrics_head(b, "tenant_device_seconds_total", "counter",
                 "Device time charged to each tenant (a batch's time split over its rows), by "
                 "device and class (docs/TENANTS.md).");
    for (int i = 0; i < n; i++)
        for (int c = 0; c < 2; c++) {
            metrics_tenant_device(b, "tenant_device_seconds_total", tc->t[r[i].tenant].name,
                                  r[i].device);
            buf_appendf(b, ",class=\"%s\"} %.15g\n", c ? "offline" : "online",
                        r[i].st.busy_s[c]);
        }
    metrics_head(b, "tenant_borrowed_seconds_total", "counter",
                 "The part of each tenant's device time used above its share (lent by others).");
    for (int i = 0; i < n; i++) {
        metrics_tenant_device(b, "tenant_borrowed_seconds_total", tc->t[r[i].tenant].name,
                              r[i].device);
        buf_appendf(b, "} %.15g\n", r[i].st.borrowed_s);
    }
    metrics_head(b, "tenant_share", "gauge",
                 "Each tenant's share of the device in force now (a time window's, or its own).");
    for (int i = 0; i < n; i++) {
        metrics_tenant_device(b, "tenant_share", tc->t[r[i].tenant].name, r[i].device);
        buf_appendf(b, "} %.15g\n", r[i].st.share);
    }
    free(r);
}

/* ---- the usage ledger (serving/ledger.h) ---- */

static void metrics_render_costs(struct api_state *st, struct buf *b)
{
    struct ledger_cost *c = NULL;
    int n = ledger_costs(st->ledger, &c);
    metrics_head(b, "cost_total", "counter",
                 "devices.<dev>.price_per_hour x the held time charged to the tenant since the "
                 "start: busy time to who used it, idle time to the model's tenants by shares "
                 "(docs/USAGE.md).");
    for (int i = 0; i < n; i++) {
        buf_append(b, P "cost_total{tenant=\"", sizeof P "cost_total{tenant=\"" - 1);
        metrics_label(b, c[i].tenant);
        buf_append(b, "\",device=\"", 10);
        metrics_label(b, c[i].device);
        buf_appendf(b, "\"} %.15g\n", c[i].cost);
    }
    free(c);
}

static void metrics_render_energy(struct api_state *st, struct buf *b)
{
    int n = nvml_device_count(st->nvml);
    bool head = false;
    for (int d = 0; d < n; d++) {
        double j;
        if (nvml_device_energy(st->nvml, d, &j) < 0)
            continue;
        if (!head)
            metrics_head(b, "energy_joules_total", "counter",
                         "Energy the GPU used since its driver loaded, as NVML reports it.");
        head = true;
        buf_appendf(b, P "energy_joules_total{device=\"cuda%d\"} %.3f\n", d, j);
    }
}

static void metrics_render_targets(struct api_state *st, const struct metrics_devices *devs,
                           struct buf *b)
{
    struct target_rows tr = {0};
    int n = metrics_collect_targets(st, devs, &tr);
    struct target_row *rows = tr.r;
    if (n <= 0) {
        metrics_target_rows_free(&tr);
        return;
    }
    metrics_head(b, "upstream_busy_seconds_total", "counter",
         "Time with at least one call in flight to the server behind (upstream model or proxy "
         "route).");
    for (int i = 0; i < n; i++)
        buf_appendf(b, P "upstream_busy_seconds_total{%s} %.15g\n", rows[i].owner, rows[i].st.busy_s);
    metrics_head(b, "upstream_utilization_ratio", "gauge", "Busy fraction over the last 10 seconds.");
    for (int i = 0; i < n; i++)
        buf_appendf(b, P "upstream_utilization_ratio{%s} %.15g\n", rows[i].owner,
                    rows[i].st.util_10s);
    metrics_head(b, "upstream_inflight", "gauge", "Calls in flight to the server now.");
    for (int i = 0; i < n; i++)
        buf_appendf(b, P "upstream_inflight{%s} %d\n", rows[i].owner, rows[i].st.inflight);
    metrics_head(b, "upstream_calls_total", "counter",
                 "Calls begun to the server (health probes and metrics scrapes are not calls).");
    for (int i = 0; i < n; i++)
        buf_appendf(b, P "upstream_calls_total{%s} %llu\n", rows[i].owner,
                    (unsigned long long)rows[i].st.calls);
    metrics_head(b, "upstream_pipelined_calls_total", "counter",
         "Calls sent behind another on one connection (proxy.routes[].pipeline).");
    for (int i = 0; i < n; i++)
        buf_appendf(b, P "upstream_pipelined_calls_total{%s} %llu\n", rows[i].owner,
                    (unsigned long long)rows[i].st.pipelined);
    metrics_head(b, "upstream_failures_total", "counter",
         "Failed calls by reason: connect, reset, timeout, status (5xx), malformed.");
    for (int i = 0; i < n; i++)
        for (int k = 0; k < HTTPC_FAIL_COUNT; k++)
            buf_appendf(b, P "upstream_failures_total{%s,reason=\"%s\"} %llu\n", rows[i].owner,
                        httpc_fail_names[k], (unsigned long long)rows[i].st.failures[k]);
    metrics_head(b, "upstream_healthy", "gauge", "1 while the server takes calls, 0 while it is taken out.");
    for (int i = 0; i < n; i++)
        buf_appendf(b, P "upstream_healthy{%s} %d\n", rows[i].owner, rows[i].st.healthy ? 1 : 0);
    metrics_target_rows_free(&tr);
}

static void metrics_scrape_free(struct modelstats_snapshot *snaps, struct metrics_devices *devs,
                             int n)
{
    for (int i = 0; i < n && snaps; i++)
        modelstats_snapshot_free(&snaps[i]);
    for (int i = 0; i < n && devs; i++) {
        free(devs[i].d);
        served_release(devs[i].sm);
    }
    free(snaps);
    free(devs);
}

/* The tenants' families (docs/TENANTS.md): answers per tenant, model and
 * code; the front door's refusals; requests in flight under a max_inflight. */
static void metrics_render_tenants(struct api_state *st, const struct metrics_devices *devs,
                                   struct buf *b)
{
    if (!st->auth || !st->tenantstats)
        return;
    const struct tenants_config *t = auth_tenants(st->auth);
    int n = st->serving ? serving_count(st->serving) : 0;
    metrics_head(b, "tenant_requests_total", "counter",
                 "Inference requests answered, by tenant, model and status code.");
    for (int ti = 0; ti < t->n; ti++)
        for (int mi = 0; mi < n && devs[mi].sm; mi++)
            for (int c = 0; c < MODELSTATS_CODES; c++) {
                uint64_t v = tenantstats_requests(st->tenantstats, ti, mi, c);
                if (!v || devs[mi].hidden)
                    continue;
                buf_appendf(b, P "tenant_requests_total{tenant=\"");
                metrics_label(b, t->t[ti].name);
                buf_appendf(b, "\",");
                metrics_model(b, devs[mi].sm);
                if (modelstats_codes[c])
                    buf_appendf(b, ",code=\"%d\"} %llu\n", modelstats_codes[c],
                                (unsigned long long)v);
                else
                    buf_appendf(b, ",code=\"other\"} %llu\n", (unsigned long long)v);
            }
    metrics_head(b, "auth_refusals_total", "counter",
                 "Requests refused at the front door: 401 no_key or unknown_key, 403 admin_route "
                 "or model.");
    for (int r = 0; r < TS_REFUSED_COUNT; r++)
        buf_appendf(b, P "auth_refusals_total{reason=\"%s\"} %llu\n",
                    tenantstats_refusal_names[r],
                    (unsigned long long)tenantstats_refusals(st->tenantstats, r));
    metrics_head(b, "tenant_inflight_requests", "gauge",
                 "Inference requests of the tenant in flight, for tenants with a max_inflight.");
    for (int ti = 0; ti < t->n; ti++)
        if (t->t[ti].max_inflight > 0 && st->admit) {
            buf_appendf(b, P "tenant_inflight_requests{tenant=\"");
            metrics_label(b, t->t[ti].name);
            buf_appendf(b, "\"} %d\n", admit_inflight(st->admit, ti));
        }
    /* LLM pools' token quotas: what each window holds, beside its limit. */
    static const char *const windows[3] = {"minute", "day", "batch_day"};
    static const struct {
        const char *name, *help;
    } fams[2] = {
        {"tenant_quota_tokens_used", "LLM pools: tokens counted toward the tenant's quota: in "
                                     "the last 60 s (window minute), today UTC (window day), "
                                     "its Batch API lines' today UTC (window batch_day)."},
        {"tenant_quota_tokens", "LLM pools: the tenant's token quota: tokens_per_minute "
                                "(window minute), tokens_per_day (window day), "
                                "batch_tokens_per_day (window batch_day)."},
    };
    int64_t used[TENANTS_MAX][3] = {{0}};
    int64_t now = now_ns(), unix_s = time(NULL);
    for (int ti = 0; ti < t->n; ti++) {
        if (st->admit)
            admit_tokens_used(st->admit, ti, now, unix_s, &used[ti][0], &used[ti][1]);
        used[ti][2] = jobs_batch_tokens_today(st->jobs, ti);
    }
    for (int f = 0; f < 2; f++) {
        metrics_head(b, fams[f].name, "gauge", fams[f].help);
        for (int w = 0; w < 3; w++)
            for (int ti = 0; ti < t->n; ti++) {
                int64_t limit = w == 2   ? t->t[ti].batch_tokens_per_day
                                : w == 1 ? t->t[ti].tokens_per_day
                                         : t->t[ti].tokens_per_minute;
                if (limit <= 0 || (w < 2 ? !st->admit : !st->jobs))
                    continue;
                buf_appendf(b, P "%s{tenant=\"", fams[f].name);
                metrics_label(b, t->t[ti].name);
                buf_appendf(b, "\",window=\"%s\"} %lld\n", windows[w],
                            (long long)(f ? limit : used[ti][w]));
            }
    }
}

int api_metrics_render(struct api_state *st, struct buf *b)
{
    int n = st->serving ? serving_count(st->serving) : 0;
    struct modelstats_snapshot *snaps = calloc((size_t)(n ? n : 1), sizeof *snaps);
    /* One more, zeroed: its NULL sm ends the walks of the helpers, which
     * count the models again (the table may have grown meanwhile). */
    struct metrics_devices *devs = calloc((size_t)n + 1, sizeof *devs);
    bool oom = !snaps || !devs;
    for (int i = 0; i < n && !oom; i++) {
        devs[i].sm = serving_acquire_at(st->serving, i);
        devs[i].hidden = !serving_shown_at(st->serving, i);
        modelstats_snapshot(devs[i].sm->stats, &snaps[i]);
        serving_model_devices(devs[i].sm, &snaps[i], metrics_device_add, &devs[i]);
        oom = devs[i].oom;
    }
    if (oom) {
        metrics_scrape_free(snaps, devs, n);
        return -1;
    }
#define EACH_MODEL for (int mi = 0; mi < n; mi++) if (!devs[mi].hidden)
#define SM (devs[mi].sm)
#define NAME (SM)

    metrics_head(b, "requests_total", "counter", "Inference requests answered, by model and status code.");
    EACH_MODEL for (int c = 0; c < MODELSTATS_CODES; c++) {
        if (!snaps[mi].codes[c])
            continue;
        char extra[32];
        if (modelstats_codes[c])
            snprintf(extra, sizeof extra, "code=\"%d\"", modelstats_codes[c]);
        else
            snprintf(extra, sizeof extra, "code=\"other\"");
        metrics_sample(b, "requests_total", NAME, extra, (double)snaps[mi].codes[c]);
    }
    metrics_head(b, "request_duration_seconds", "histogram",
         "Last byte of the request received to the response queued for write.");
    EACH_MODEL metrics_hist(b, "request_duration_seconds", NAME, &snaps[mi].request,
                    modelstats_lat_bounds_s, MODELSTATS_LAT_BUCKETS);
    metrics_head(b, "queue_duration_seconds", "histogram", "Time a request waited in the batcher.");
    EACH_MODEL metrics_hist(b, "queue_duration_seconds", NAME, &snaps[mi].queue, modelstats_lat_bounds_s,
                    MODELSTATS_LAT_BUCKETS);
    metrics_head(b, "compute_duration_seconds", "histogram", "One batch on the backend.");
    EACH_MODEL metrics_hist(b, "compute_duration_seconds", NAME, &snaps[mi].compute,
                    modelstats_lat_bounds_s, MODELSTATS_LAT_BUCKETS);
    metrics_head(b, "batch_size", "histogram", "Rows per executed batch.");
    EACH_MODEL metrics_hist(b, "batch_size", NAME, &snaps[mi].batch, modelstats_row_bounds,
                    MODELSTATS_ROW_BUCKETS);
    metrics_head(b, "queue_depth", "gauge", "Requests waiting in the model's queue.");
    /* batcher, ops and instances are the loader's until it publishes READY. */
#define READY (atomic_load(&SM->state) == SERVED_READY)
    EACH_MODEL metrics_sample(b, "queue_depth", NAME, NULL, READY ? batcher_depth(SM->batcher) : 0);
    metrics_head(b, "rejected_requests_total", "counter",
         "Requests refused or dropped before computing, by reason.");
    EACH_MODEL for (int r = 0; r < MS_REJECT_COUNT; r++) {
        char extra[48];
        snprintf(extra, sizeof extra, "reason=\"%s\"", modelstats_reason_names[r]);
        metrics_sample(b, "rejected_requests_total", NAME, extra, (double)snaps[mi].rejected[r]);
    }
    metrics_head(b, "requests_cancelled_total", "counter",
         "Requests whose client left before the answer: before their batch (queued), or once "
         "in one (computed for nobody).");
    EACH_MODEL for (int c = 0; c < 2; c++)
        metrics_sample(b, "requests_cancelled_total", NAME,
                       c ? "stage=\"computed\"" : "stage=\"queued\"",
                       (double)snaps[mi].cancelled[c]);
    metrics_head(b, "model_cold_start_seconds", "gauge", "The last load of the model, by phase.");
    EACH_MODEL {
        const struct cold_start *cs = &SM->model.cold;
        /* A copy being loaded writes its own as it goes; an unloaded or
         * failed one holds the last load's (served_shell_new). */
        int state = atomic_load(&SM->state);
        if (state == SERVED_LOADING || cs->total_s <= 0)
            continue;
        metrics_sample(b, "model_cold_start_seconds", NAME, "phase=\"read\"", cs->read_s);
        metrics_sample(b, "model_cold_start_seconds", NAME, "phase=\"prepare\"", cs->prepare_s + cs->context_s);
        metrics_sample(b, "model_cold_start_seconds", NAME, "phase=\"warmup\"", cs->warmup_s);
        metrics_sample(b, "model_cold_start_seconds", NAME, "phase=\"total\"", cs->total_s);
    }
    metrics_head(b, "model_loaded", "gauge", "1 when the model is loaded and serving, else 0.");
    EACH_MODEL metrics_sample(b, "model_loaded", NAME, NULL, atomic_load(&SM->state) == SERVED_READY);
    metrics_head(b, "model_capacity_rows_per_second", "gauge",
                 "Rows per second the model's instances can serve at full batches within its "
                 "latency budget, by their fitted latency models (0 until loaded and measured); "
                 "demand / capacity is the replicas it needs (docs/DEPLOY.md).");
    EACH_MODEL metrics_sample(b, "model_capacity_rows_per_second", NAME, NULL,
                              served_capacity_rows_per_s(SM));
    metrics_head(b, "model_demand_rows_per_second", "gauge",
                 "Inference rows arriving per second over the last 10 s, refused ones included "
                 "(a request refused before its rows were read counts as the window's mean).");
    EACH_MODEL metrics_sample(b, "model_demand_rows_per_second", NAME, NULL,
                              snaps[mi].demand_rows_per_s);
    /* Each family's samples in one group after its TYPE (the text format's
     * rule; a parser that meets a family again makes it a second, untyped
     * one): two passes over the models. */
    metrics_head(b, "model_loads_total", "counter",
                 "Loads of the model (at start, on request, lazy), by result (ok, failed).");
    EACH_MODEL {
        struct served_lifecycle_stats ls;
        served_lifecycle_stats(SM, &ls);
        metrics_sample(b, "model_loads_total", NAME, "result=\"ok\"", (double)ls.loads_ok);
        metrics_sample(b, "model_loads_total", NAME, "result=\"failed\"", (double)ls.loads_failed);
    }
    metrics_head(b, "model_unloads_total", "counter",
                 "Unloads of the model, by reason (api, idle, evicted, reload, removed).");
    EACH_MODEL {
        struct served_lifecycle_stats ls;
        served_lifecycle_stats(SM, &ls);
        for (int r = 0; r < SERVED_UNLOAD_REASONS; r++) {
            char extra[32];
            snprintf(extra, sizeof extra, "reason=\"%s\"", served_unload_reason_names[r]);
            metrics_sample(b, "model_unloads_total", NAME, extra, (double)ls.unloads[r]);
        }
    }
    metrics_head(b, "model_resident_bytes", "gauge",
                 "What the model's current copy holds on each device (weights and buffers).");
    EACH_MODEL for (int i = 0; i < devs[mi].n; i++) {
        const struct served_device *d = &devs[mi].d[i];
        if (d->dev.kind == BACKEND_DEVICE_UPSTREAM)
            continue;
        char extra[96];
        snprintf(extra, sizeof extra, "device=\"%s\"", d->dev.name);
        metrics_sample(b, "model_resident_bytes", NAME, extra, (double)d->memory_bytes);
    }
    {
        struct served_memory_row *mr = NULL;
        int nm = st->serving ? serving_memory_rows(st->serving, &mr) : 0;
        metrics_head(b, "device_resident_bytes", "gauge",
                     "What the models resident on the device hold, draining copies included.");
        for (int i = 0; i < nm; i++)
            buf_appendf(b, P "device_resident_bytes{device=\"%s\"} %zu\n", mr[i].device,
                        mr[i].resident_bytes);
        metrics_head(b, "device_memory_budget_bytes", "gauge",
                     "devices.<dev>.memory_budget_bytes (0: no bound).");
        for (int i = 0; i < nm; i++)
            buf_appendf(b, P "device_memory_budget_bytes{device=\"%s\"} %zu\n", mr[i].device,
                        mr[i].budget_bytes);
        free(mr);
    }
    static const struct {
        const char *name, *help;
        size_t field;   /* a uint64_t of struct modelstats_instance, summed over instances */
    } token_metrics[] = {
        {"batch_tokens_total", "Tokens computed in batches (rows for models without tokens).",
         offsetof(struct modelstats_instance, tokens)},
        {"batch_padded_tokens_total",
         "Rows x the longest row, per batch: what a padded layout would hold.",
         offsetof(struct modelstats_instance, padded_tokens)},
    };
    for (size_t k = 0; k < sizeof token_metrics / sizeof token_metrics[0]; k++) {
        metrics_head(b, token_metrics[k].name, "counter", token_metrics[k].help);
        EACH_MODEL {
            double t = 0;
            for (int i = 0; i < snaps[mi].ninstances && snaps[mi].inst; i++) {
                uint64_t v;
                memcpy(&v, (const char *)&snaps[mi].inst[i] + token_metrics[k].field, sizeof v);
                t += (double)v;
            }
            metrics_sample(b, token_metrics[k].name, NAME, NULL, t);
        }
    }
    metrics_head(b, "batch_fill_ratio", "gauge", "Rows computed over the rows their batches could hold (max_batch_size).");
    EACH_MODEL {
        metrics_sample(b, "batch_fill_ratio", NAME, NULL, modelstats_fill(&snaps[mi]));
    }
    static const struct {
        const char *name, *type, *help;
    } dev_metrics[] = {
        {"device_busy_seconds_total", "counter",
         "Time with a batch executing, per model instance (upstream: with a call in flight, per "
         "server), by class: online requests or offline job lines (a batch's time splits by "
         "rows)."},
        {"device_idle_seconds_total", "counter",
         "Time with the model loaded and nothing executing, per model instance (or server)."},
        {"device_utilization_ratio", "gauge", "Busy fraction over the last 10 seconds."},
        {"device_memory_bytes", "gauge", "Weights and buffers held by the model instance."},
    };
    for (int k = 0; k < 4; k++) {
        metrics_head(b, dev_metrics[k].name, dev_metrics[k].type, dev_metrics[k].help);
        EACH_MODEL for (int i = 0; i < devs[mi].n; i++) {
            const struct served_device *d = &devs[mi].d[i];
            char dev[80];
            snprintf(dev, sizeof dev, "device=\"%s\"", d->dev.name);
            if (k == 0) {
                double off = d->busy_offline_s < d->busy_s ? d->busy_offline_s : d->busy_s;
                snprintf(dev, sizeof dev, "device=\"%s\",class=\"online\"", d->dev.name);
                metrics_sample(b, dev_metrics[k].name, NAME, dev, d->busy_s - off);
                snprintf(dev, sizeof dev, "device=\"%s\",class=\"offline\"", d->dev.name);
                metrics_sample(b, dev_metrics[k].name, NAME, dev, off);
                continue;
            }
            double v = k == 1 ? d->idle_s : k == 2 ? d->util_10s : (double)d->memory_bytes;
            metrics_sample(b, dev_metrics[k].name, NAME, dev, v);
        }
    }
    static const struct {
        const char *name, *type, *help;
    } sched_metrics[] = {
        {"device_scheduler_wait_seconds_total", "counter",
         "Time the model's batches waited for a slot on a device shared with other models "
         "(docs/SCHEDULING.md), summed over batches."},
        {"device_scheduler_weight", "gauge",
         "The model's scheduling.weight on each device it shares (docs/SCHEDULING.md)."},
    };
    for (int f = 0; f < 2; f++) {
        metrics_head(b, sched_metrics[f].name, sched_metrics[f].type, sched_metrics[f].help);
        EACH_MODEL {
            if (!READY)
                continue;
            for (int k = 0; k < SM->nsched; k++) {
                struct devsched_member_stats ms;
                devsched_member_stats(SM->sched[k].dev, SM->sched[k].member, &ms);
                char extra[80];
                snprintf(extra, sizeof extra, "device=\"%s\"", devsched_name(SM->sched[k].dev));
                metrics_sample(b, sched_metrics[f].name, NAME, extra,
                               f == 0 ? ms.wait_s : ms.weight);
            }
        }
    }
    metrics_head(b, "latency_model_seconds", "gauge",
         "Each instance's fitted exec(rows) = a + b*rows (+ margin), in seconds.");
    EACH_MODEL for (int i = 0; i < devs[mi].n; i++) {
        const struct served_device *d = &devs[mi].d[i];
        static const char *const params[3] = {"a", "b", "margin"};
        double v[3] = {d->lat_a_s, d->lat_b_s, d->lat_margin_s};
        for (int p = 0; p < 3; p++) {
            char extra[96];
            snprintf(extra, sizeof extra, "device=\"%s\",param=\"%s\"", d->dev.name, params[p]);
            metrics_sample(b, "latency_model_seconds", NAME, extra, v[p]);
        }
    }
    if (st->jobs) {
        metrics_head(b, "job_lines_total", "counter",
                     "Job lines given their result line, by model and result (ok, failed).");
        EACH_MODEL {
            uint64_t ok, failed;
            jobs_lines(st->jobs, mi, &ok, &failed);
            metrics_sample(b, "job_lines_total", NAME, "result=\"ok\"", (double)ok);
            metrics_sample(b, "job_lines_total", NAME, "result=\"failed\"", (double)failed);
        }
        int64_t counts[STATE_JOB_NSTATES];
        if (state_job_counts(jobs_state(st->jobs), counts, NULL) == 0) {
            metrics_head(b, "jobs", "gauge", "Jobs in the state database, by state.");
            for (int k = 0; k < STATE_JOB_NSTATES; k++)
                buf_appendf(b, P "jobs{state=\"%s\"} %lld\n", state_job_state_name(k),
                            (long long)counts[k]);
        }
        int64_t bcounts[STATE_BATCH_NSTATUS];
        if (state_batch_counts(jobs_state(st->jobs), bcounts, NULL) == 0) {
            metrics_head(b, "batches", "gauge",
                         "Batch API batches in the state database, by status.");
            for (int k = 0; k < STATE_BATCH_NSTATUS; k++)
                buf_appendf(b, P "batches{status=\"%s\"} %lld\n", state_batch_status_name(k),
                            (long long)bcounts[k]);
        }
    }
    metrics_head(b, "answer_guard_seconds", "gauge",
         "How much earlier than their deadlines requests are planned: the recent p99 of how late "
         "answers left against their batch's planned finish.");
    EACH_MODEL {
        if (READY)
            metrics_sample(b, "answer_guard_seconds", NAME, NULL, (double)batcher_guard_ns(SM->batcher) / 1e9);
    }
    if (nvml_device_count(st->nvml) > 0) {
        static const char *const names[4] = {"nvml_gpu_utilization_ratio",
                                             "nvml_memory_utilization_ratio",
                                             "nvml_memory_used_bytes", "nvml_memory_total_bytes"};
        static const char *const helps[4] = {
            "GPU busy fraction as NVML (the NVIDIA driver) reports it, whole device.",
            "Memory controller busy fraction as NVML reports it.",
            "Device memory in use as NVML reports it (all processes).",
            "Device memory as NVML reports it."};
        for (int k = 0; k < 4; k++) {
            metrics_head(b, names[k], "gauge", helps[k]);
            for (int d = 0; d < nvml_device_count(st->nvml); d++) {
                struct nvml_device nd;
                if (nvml_device_read(st->nvml, d, &nd) < 0)
                    continue;
                /* Bytes as integers, whatever their size. */
                if (k >= 2)
                    buf_appendf(b, P "%s{device=\"cuda%d\"} %llu\n", names[k], d,
                                (unsigned long long)(k == 2 ? nd.mem_used : nd.mem_total));
                else
                    buf_appendf(b, P "%s{device=\"cuda%d\"} %.15g\n", names[k], d,
                                k == 0 ? nd.gpu_util : nd.mem_util);
            }
        }
    }
    metrics_render_energy(st, b);
    metrics_render_tenant_devices(st, b);
    metrics_render_costs(st, b);
    metrics_render_targets(st, devs, b);
    metrics_render_tenants(st, devs, b);
    metrics_head(b, "inflight_requests", "gauge", "HTTP requests accepted and not yet answered.");
    buf_appendf(b, P "inflight_requests %lld\n",
                (long long)(st->server ? server_inflight(st->server) : 0));
    if (st->server) {
        metrics_head(b, "http_responses_total", "counter",
             "Answers on every route (inference, metadata, health, proxied, errors), by status.");
        struct server_http_stats hs;
        server_http_stats(st->server, &hs);
        for (int k = 0; k < SERVER_STATUSES; k++)
            if (hs.responses[k])
                buf_appendf(b, P "http_responses_total{code=\"%d\"} %llu\n", k + 100,
                            (unsigned long long)hs.responses[k]);
        metrics_head(b, "http_connections", "gauge", "Client connections open now.");
        buf_appendf(b, P "http_connections %d\n", hs.connections);
        metrics_head(b, "http_connections_accepted_total", "counter", "Client connections accepted.");
        buf_appendf(b, P "http_connections_accepted_total %llu\n",
                    (unsigned long long)hs.accepted);
    }
    if (st->grpc) {
        metrics_head(b, "grpc_calls_total", "counter",
                     "gRPC calls answered, by method and final status (the calls that "
                     "happened).");
        for (int m = 0; m < grpc_service_methods(); m++)
            for (int c = 0; c <= GRPC_UNAUTHENTICATED; c++) {
                uint64_t v = grpc_service_calls(st->grpc, m, c);
                if (v)
                    buf_appendf(b, P "grpc_calls_total{method=\"%s\",code=\"%s\"} %llu\n",
                                grpc_service_method_name(m), grpc_code_name(c),
                                (unsigned long long)v);
            }
        metrics_head(b, "grpc_stream_messages_total", "counter",
                     "ModelStreamInfer messages answered in their stream, by outcome.");
        for (int ok = 1; ok >= 0; ok--)
            buf_appendf(b, P "grpc_stream_messages_total{outcome=\"%s\"} %llu\n",
                        ok ? "ok" : "error",
                        (unsigned long long)grpc_service_stream_messages(st->grpc, ok));
        metrics_head(b, "grpc_streams_open", "gauge", "ModelStreamInfer streams open now.");
        buf_appendf(b, P "grpc_streams_open %lld\n",
                    (long long)grpc_service_streams_open(st->grpc));
    }
    metrics_head(b, "process_start_to_ready_seconds", "gauge",
         "From process start until every model was loaded and the server ready.");
    int64_t ready = atomic_load(&st->ready_ns);
    buf_appendf(b, P "process_start_to_ready_seconds %.6f\n",
                ready ? (double)(ready - st->start_ns) / 1e9 : 0.0);
    /* The LLM pools' own families. */
    int rc = 0;
    struct metrics_llm_pool *lp = calloc((size_t)(n ? n : 1), sizeof *lp);
    int nlp = 0;
    EACH_MODEL if (lp && READY && SM->pool)
        lp[nlp++] = (struct metrics_llm_pool){.name = SM->model.cfg.name, .pool = SM->pool};
    rc = lp ? metrics_llm_render(b, lp, nlp, st->auth) : -1;
    free(lp);
    /* Triton's names, from the same snapshots as the series above. */
    if (st->triton_names) {
        struct metrics_triton_model *tm = calloc((size_t)(n ? n : 1), sizeof *tm);
        int ntm = 0;
        EACH_MODEL if (tm) {
            tm[ntm++] = (struct metrics_triton_model){
                .name = SM->model.cfg.name, .version = SM->version, .snap = &snaps[mi],
                .pending = READY ? batcher_depth(SM->batcher) : 0};
        }
        if (!tm || metrics_triton_render(b, tm, ntm, st->nvml, st->procstat) < 0)
            rc = -1;
        free(tm);
    }
    metrics_scrape_free(snaps, devs, n);
    return rc;
#undef READY
#undef EACH_MODEL
#undef SM
#undef NAME
}

static void metrics_route(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct buf b = BUF_INIT;
    if (api_metrics_render(ctx, &b) < 0) {
        buf_free(&b);
        http_respond_error(req, 500, NULL, "out of memory rendering metrics");
        return;
    }
    http_respond(req, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, NULL);
    buf_free(&b);
}

int api_metrics_register(struct router *r, struct api_state *st, struct error *err)
{
    return router_add(r, HTTP_M_GET, "/metrics", metrics_route, st, err);
}

/* modelstats_json.c - see modelstats_json.h. Counters come from the model's
 * modelstats snapshot, the device rows from serving_model_devices (as on
 * /metrics), so the two name the same devices with the same numbers. */
#include "gateway/modelstats_json.h"

#include <string.h>

#include "common/buf.h"
#include "serving/serving.h"
#include "serving/tensor_json.h"

static void modelstats_json_duration(struct buf *b, const char *name, uint64_t count,
                                     uint64_t ns)
{
    buf_appendf(b, "\"%s\":{\"count\":%llu,\"ns\":%llu}", name, (unsigned long long)count,
                (unsigned long long)ns);
}

struct modelstats_json_devices {
    struct buf *b;
    int n;
    double busy_s, held_s;            /* summed: the compute debt */
};

/* One entry of "instances": an instance, or a server behind the model. */
static void modelstats_json_device(const struct served_device *d, void *arg)
{
    struct modelstats_json_devices *w = arg;
    struct buf *b = w->b;
    w->busy_s += d->busy_s;
    w->held_s += d->held_s;
    buf_appendf(b, "%s{\"device\":", w->n++ ? "," : "");
    json_append_string(b, d->dev.name, strlen(d->dev.name));
    if (d->url) {
        buf_append(b, ",\"url\":", 7);
        json_append_string(b, d->url, strlen(d->url));
    }
    buf_appendf(b, ",\"busy_seconds\":%.6f,\"busy_offline_seconds\":%.6f,\"idle_seconds\":%.6f,"
                   "\"utilization_10s\":%.4f",
                d->busy_s, d->busy_offline_s, d->idle_s, d->util_10s);
    if (d->dev.kind == BACKEND_DEVICE_UPSTREAM) {
        buf_appendf(b, ",\"inflight\":%d,\"calls\":%llu,\"healthy\":%s,\"failures\":{",
                    d->server.inflight, (unsigned long long)d->server.calls,
                    d->server.healthy ? "true" : "false");
        for (int k = 0; k < HTTPC_FAIL_COUNT; k++)
            buf_appendf(b, "%s\"%s\":%llu", k ? "," : "", httpc_fail_names[k],
                        (unsigned long long)d->server.failures[k]);
        buf_append(b, "}", 1);
    } else {
        buf_appendf(b, ",\"batches\":%llu,\"rows\":%llu", (unsigned long long)d->batches,
                    (unsigned long long)d->rows);
    }
    buf_appendf(b, ",\"latency_model\":{\"a_seconds\":%.9f,\"b_seconds_per_row\":%.9f,"
                   "\"margin_seconds\":%.9f}}", d->lat_a_s, d->lat_b_s, d->lat_margin_s);
}

/* Triton's statistics extension (the numbers of modelstats_triton, which
 * /metrics' nv_ series show too), plus what batchgate adds: latency
 * percentiles (split into queue and compute, within the histogram's bucket
 * resolution), each device's fitted latency model and busy time, and the
 * compute debt: device-seconds held against used. */
void modelstats_json_append(struct buf *out, struct served_model *sm, int tenant)
{
    struct modelstats_snapshot s;
    modelstats_snapshot(sm->stats, &s);
    const struct model_config *c = &sm->model.cfg;
    struct buf *b = out;
    buf_append(b, "{\"name\":", 8);
    json_append_string(b, c->name, strlen(c->name));
    struct modelstats_triton tr;
    modelstats_triton(&s, &tr);
    uint64_t rows = tr.inference_count, batches = tr.execution_count;
    buf_appendf(b, ",\"version\":\"%d\",\"last_inference\":%lld,"
                   "\"inference_count\":%llu,\"execution_count\":%llu,\"inference_stats\":{",
                sm->version, (long long)s.last_inference_ms, (unsigned long long)rows,
                (unsigned long long)batches);
    const struct {
        const char *name;
        const struct modelstats_duration *d;
    } req[] = {
        {"success", &tr.success}, {"fail", &tr.fail}, {"queue", &tr.queue},
        {"compute_input", &tr.compute_input}, {"compute_infer", &tr.compute_infer},
        {"compute_output", &tr.compute_output},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        modelstats_json_duration(b, req[i].name, req[i].d->count, req[i].d->ns);
        buf_append(b, ",", 1);
    }
    /* No response cache: Triton's clients (perf_analyzer) read these. */
    modelstats_json_duration(b, "cache_hit", 0, 0);
    buf_append(b, ",", 1);
    modelstats_json_duration(b, "cache_miss", 0, 0);
    buf_append(b, "},\"batch_stats\":[", 17);
    int first = 1;
    for (int r = 1; r <= s.max_batch && s.batch_count_by_size; r++) {
        uint64_t n = s.batch_count_by_size[r];
        if (!n)
            continue;
        /* count: batches of this size, the same for the three phases. */
        buf_appendf(b, "%s{\"batch_size\":%d,", first ? "" : ",", r);
        modelstats_json_duration(b, "compute_input", n, s.batch_in_ns_by_size[r]);
        buf_append(b, ",", 1);
        modelstats_json_duration(b, "compute_infer", n, s.batch_ns_by_size[r]);
        buf_append(b, ",", 1);
        modelstats_json_duration(b, "compute_output", n, s.batch_out_ns_by_size[r]);
        buf_append(b, "}", 1);
        first = 0;
    }
    buf_appendf(b, "],\"latency_seconds\":{\"request\":{\"p50\":%.6f,\"p90\":%.6f,\"p99\":%.6f},"
                   "\"queue\":{\"p50\":%.6f,\"p90\":%.6f,\"p99\":%.6f},"
                   "\"compute\":{\"p50\":%.6f,\"p90\":%.6f,\"p99\":%.6f}},\"instances\":[",
                modelstats_quantile(&s.request, 0.5), modelstats_quantile(&s.request, 0.9),
                modelstats_quantile(&s.request, 0.99), modelstats_quantile(&s.queue, 0.5),
                modelstats_quantile(&s.queue, 0.9), modelstats_quantile(&s.queue, 0.99),
                modelstats_quantile(&s.compute, 0.5), modelstats_quantile(&s.compute, 0.9),
                modelstats_quantile(&s.compute, 0.99));
    struct modelstats_json_devices w = {.b = b};
    serving_model_devices(sm, &s, modelstats_json_device, &w);
    double fill = modelstats_fill(&s);
    /* The loader owns the batcher until it publishes READY. */
    bool ready = atomic_load(&sm->state) == SERVED_READY;
    buf_appendf(b, "],\"answer_guard_seconds\":%.6f,\"compute_debt\":{",
                ready ? (double)batcher_guard_ns(sm->batcher) / 1e9 : 0.0);
    buf_appendf(b, "\"device_seconds_held\":%.6f,"
                   "\"device_seconds_used\":%.6f,\"device_seconds_idle\":%.6f,"
                   "\"batch_fill\":%.4f}", w.held_s, w.busy_s,
                w.held_s > w.busy_s ? w.held_s - w.busy_s : 0, fill);
    /* With tenants: each tenant's rows and device time on this model. */
    const struct tenants_config *tc = sm->tenants;
    if (tc && tc->n > 1) {
        buf_append(b, ",\"tenants\":[", 12);
        for (int t = 0, k = 0; t < tc->n; t++) {
            if (!s.tenant_rows[t] || (tenant >= 0 && t != tenant))
                continue;   /* another tenant's use is not this caller's to see */
            buf_appendf(b, "%s{\"name\":", k++ ? "," : "");
            json_append_string(b, tc->t[t].name, strlen(tc->t[t].name));
            buf_appendf(b, ",\"rows\":%llu,\"device_seconds\":%.6f}",
                        (unsigned long long)s.tenant_rows[t], s.tenant_busy_s[t]);
        }
        buf_append(b, "]", 1);
    }
    buf_append(b, "}", 1);
    modelstats_snapshot_free(&s);
}

/* api_dashboard.c - GET /dashboard: one self-contained page (no CDN, no
 * build step beyond embedding gateway/dashboard.html in the binary) that
 * polls GET /dashboard/data every second and draws, per model: throughput,
 * queue and compute latency percentiles over the last seconds, the batch
 * size distribution, queue depth, device utilization and idle time, memory
 * and cold start. */
#include "gateway/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "serving/modelstats.h"
#include "gateway/modelstats_json.h"
#include "http/http.h"
#include "serving/lifecycle.h"
#include "serving/serving.h"
#include "serving/tensor_json.h"

extern const char dashboard_html[];
extern const unsigned long dashboard_html_len;

static void dashboard_page(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    (void)ctx;
    http_respond(req, 200, "text/html; charset=utf-8", dashboard_html, dashboard_html_len,
                 "Cache-Control: no-cache\r\n");
}

static void dashboard_append_counts(struct buf *b, const char *name, const struct modelstats_hist *h)
{
    buf_appendf(b, ",\"%s\":[", name);
    for (int i = 0; i < MODELSTATS_LAT_BUCKETS; i++)
        buf_appendf(b, "%s%llu", i ? "," : "", (unsigned long long)h->bucket[i]);
    buf_append(b, "]", 1);
}

/* Each tenant's device time by device and class, against its share
 * (docs/TENANTS.md); the page turns the totals into rates. */
static void dashboard_append_tenants(struct api_state *st, struct buf *b)
{
    const struct tenants_config *tc = st->serving ? serving_tenants(st->serving) : NULL;
    if (!tc || tc->n <= 1)
        return;
    struct served_tenant_row *r = NULL;
    int n = serving_tenant_rows(st->serving, &r);
    buf_append(b, ",\"tenants\":[", 12);
    for (int i = 0; i < n; i++) {
        buf_appendf(b, "%s{\"device\":", i ? "," : "");
        json_append_string(b, r[i].device, strlen(r[i].device));
        buf_append(b, ",\"tenant\":", 10);
        json_append_string(b, tc->t[r[i].tenant].name, strlen(tc->t[r[i].tenant].name));
        buf_appendf(b, ",\"share\":%g,\"online_seconds\":%.6f,\"offline_seconds\":%.6f,"
                       "\"borrowed_seconds\":%.6f,\"fraction_1s\":%.4f}", r[i].st.share,
                    r[i].st.busy_s[0], r[i].st.busy_s[1], r[i].st.borrowed_s, r[i].st.fraction);
    }
    buf_append(b, "]", 1);
    free(r);
}

/* Each device's resident model memory against its budget. */
static void dashboard_append_memory(struct api_state *st, struct buf *b)
{
    struct served_memory_row *r = NULL;
    int n = st->serving ? serving_memory_rows(st->serving, &r) : 0;
    buf_append(b, ",\"memory\":[", 11);
    for (int i = 0; i < n; i++) {
        buf_appendf(b, "%s{\"device\":", i ? "," : "");
        json_append_string(b, r[i].device, strlen(r[i].device));
        buf_appendf(b, ",\"resident_bytes\":%zu,\"budget_bytes\":%zu}", r[i].resident_bytes,
                    r[i].budget_bytes);
    }
    buf_append(b, "]", 1);
    free(r);
}

static void dashboard_data(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct api_state *st = ctx;
    struct buf b = BUF_INIT;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now_ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* Others': this poll is one of them until it is answered (an idle
     * server read "1 request(s) in flight" on its own dashboard). */
    int64_t inflight = st->server ? server_inflight(st->server) - 1 : 0;
    buf_appendf(&b, "{\"time\":%lld,\"inflight\":%lld,\"models\":[", now_ms,
                (long long)(inflight > 0 ? inflight : 0));
    int n = st->serving ? serving_count(st->serving) : 0;
    for (int i = 0; i < n; i++) {
        struct served_model *sm = serving_acquire_at(st->serving, i);
        int state = atomic_load(&sm->state);
        const char *sname = state == SERVED_READY     ? "ready"
                            : state == SERVED_LOADING ? "loading"
                            : state == SERVED_FAILED  ? "failed"
                                                      : "unloaded";
        buf_appendf(&b, "%s{\"name\":", i ? "," : "");
        char shown[MODEL_NAME_MAX + 24];   /* one panel per version served side by side */
        if (served_pinned_version(sm))
            snprintf(shown, sizeof shown, "%s (version %d)", sm->model.cfg.name,
                     served_pinned_version(sm));
        else
            snprintf(shown, sizeof shown, "%s", sm->model.cfg.name);
        json_append_string(&b, shown, strlen(shown));
        buf_appendf(&b, ",\"time\":%lld,\"state\":\"%s\",\"reason\":", now_ms, sname);
        /* The loader writes reason, cold start and instances until it
         * publishes the state: read them only once it has. */
        const char *reason = state != SERVED_READY ? sm->model.reason : "";
        json_append_string(&b, reason, strlen(reason));
        static const struct cold_start none;
        const struct cold_start *cs = state == SERVED_READY ? &sm->model.cold : &none;
        buf_appendf(&b, ",\"backend\":\"%s\",\"queue_depth\":%d,\"memory_bytes\":%zu,"
                        "\"cold_start\":{\"read\":%.6f,\"prepare\":%.6f,\"warmup\":%.6f,"
                        "\"total\":%.6f}",
                    state == SERVED_READY ? model_backend_name(&sm->model)
                                          : model_backend_name_of(sm->model.cfg.backend),
                    state == SERVED_READY ? batcher_depth(sm->batcher) : 0,
                    state == SERVED_READY ? model_memory_bytes(&sm->model) : (size_t)0,
                    cs->read_s, cs->prepare_s + cs->context_s, cs->warmup_s, cs->total_s);
        if (sm->stats) {
            struct modelstats_snapshot s;
            modelstats_snapshot(sm->stats, &s);
            buf_append(&b, ",\"hist\":{\"bounds\":[", 19);
            for (int k = 0; k < MODELSTATS_LAT_BUCKETS; k++)
                buf_appendf(&b, "%s%g", k ? "," : "", modelstats_lat_bounds_s[k]);
            buf_append(&b, "]", 1);
            dashboard_append_counts(&b, "request", &s.request);
            dashboard_append_counts(&b, "queue", &s.queue);
            dashboard_append_counts(&b, "compute", &s.compute);
            buf_append(&b, "},\"stats\":", 10);
            modelstats_snapshot_free(&s);
            modelstats_json_append(&b, sm, -1);
        }
        buf_append(&b, "}", 1);
        served_release(sm);
    }
    buf_append(&b, "]", 1);
    dashboard_append_memory(st, &b);
    dashboard_append_tenants(st, &b);
    buf_append(&b, "}", 1);
    http_respond(req, 200, "application/json", b.data, b.len, "Cache-Control: no-cache\r\n");
    buf_free(&b);
}

int api_dashboard_register(struct router *r, struct api_state *st, struct error *err)
{
    int rc;
    if ((rc = router_add(r, HTTP_M_GET, "/dashboard", dashboard_page, st, err)) ||
        (rc = router_add(r, HTTP_M_GET, "/dashboard/data", dashboard_data, st, err)))
        return rc;
    return 0;
}

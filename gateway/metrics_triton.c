/* metrics_triton.c - see metrics_triton.h. Types, label names and help
 * texts are Triton's (its docs/user_guide/metrics.md): counters in
 * microseconds, labels model and version on every model's series, reason
 * on failures, gpu_uuid on the GPU gauges. */
#include "gateway/metrics_triton.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/buf.h"
#include "gateway/nvml.h"
#include "gateway/procstat.h"
#include "gateway/promtext.h"
#include "serving/modelstats.h"

/* name{model="m",version="v"[,extra]} value: integers, as Triton prints
 * its counters (microseconds truncated from the stats' nanoseconds). */
static void metrics_triton_sample(struct buf *b, const char *name,
                                  const struct metrics_triton_model *m,
                                  const char *extra, uint64_t v)
{
    buf_appendf(b, "%s{model=\"", name);
    promtext_label(b, m->name);
    buf_appendf(b, "\",version=\"%d\"%s%s} %llu\n", m->version, extra ? "," : "",
                extra ? extra : "", (unsigned long long)v);
}

enum metrics_triton_field {
    MT_SUCCESS, MT_INFERENCES, MT_EXECS, MT_REQUEST_US, MT_QUEUE_US, MT_INPUT_US, MT_INFER_US,
    MT_OUTPUT_US
};

static uint64_t metrics_triton_value(const struct modelstats_triton *t, enum metrics_triton_field f)
{
    switch (f) {
    case MT_SUCCESS: return t->success.count;
    case MT_INFERENCES: return t->inference_count;
    case MT_EXECS: return t->execution_count;
    /* Successful requests only, as Triton's (its failures add to the
     * failure count alone): duration / success is the mean latency that
     * dashboards compute from the pair. */
    case MT_REQUEST_US: return t->success.ns / 1000;
    case MT_QUEUE_US: return t->queue.ns / 1000;
    case MT_INPUT_US: return t->compute_input.ns / 1000;
    case MT_INFER_US: return t->compute_infer.ns / 1000;
    case MT_OUTPUT_US: return t->compute_output.ns / 1000;
    }
    return 0;
}

static int metrics_triton_models(struct buf *b, const struct metrics_triton_model *m, int n)
{
    struct modelstats_triton *t = calloc((size_t)(n > 0 ? n : 1), sizeof *t);
    if (!t)
        return -1;
    for (int i = 0; i < n; i++)
        modelstats_triton(m[i].snap, &t[i]);
    promtext_head(b, "", "nv_inference_request_success", "counter",
                  "Number of successful inference requests, all batch sizes");
    for (int i = 0; i < n; i++)
        metrics_triton_sample(b, "nv_inference_request_success", &m[i], NULL,
                       metrics_triton_value(&t[i], MT_SUCCESS));
    promtext_head(b, "", "nv_inference_request_failure", "counter",
                  "Number of failed inference requests, all batch sizes");
    for (int i = 0; i < n; i++)
        for (int r = 0; r < MS_FAIL_COUNT; r++) {
            char extra[32];
            snprintf(extra, sizeof extra, "reason=\"%s\"", modelstats_fail_names[r]);
            metrics_triton_sample(b, "nv_inference_request_failure", &m[i], extra,
                           t[i].fail_by_reason[r]);
        }
    static const struct {
        const char *name, *help;
        enum metrics_triton_field f;
    } counters[] = {
        {"nv_inference_count", "Number of inferences performed (does not include cached requests)",
         MT_INFERENCES},
        {"nv_inference_exec_count",
         "Number of model executions performed (does not include cached requests)", MT_EXECS},
        {"nv_inference_request_duration_us",
         "Cumulative inference request duration in microseconds (includes cached requests)",
         MT_REQUEST_US},
        {"nv_inference_queue_duration_us",
         "Cumulative inference queuing duration in microseconds (includes cached requests)",
         MT_QUEUE_US},
        {"nv_inference_compute_input_duration_us",
         "Cumulative compute input duration in microseconds (does not include cached requests)",
         MT_INPUT_US},
        {"nv_inference_compute_infer_duration_us",
         "Cumulative compute inference duration in microseconds (does not include cached "
         "requests)", MT_INFER_US},
        {"nv_inference_compute_output_duration_us",
         "Cumulative inference compute output duration in microseconds (does not include cached "
         "requests)", MT_OUTPUT_US},
    };
    for (size_t k = 0; k < sizeof counters / sizeof counters[0]; k++) {
        promtext_head(b, "", counters[k].name, "counter", counters[k].help);
        for (int i = 0; i < n; i++)
            metrics_triton_sample(b, counters[k].name, &m[i], NULL,
                                  metrics_triton_value(&t[i], counters[k].f));
    }
    promtext_head(b, "", "nv_inference_pending_request_count", "gauge",
                  "Instantaneous number of pending requests awaiting execution per-model.");
    for (int i = 0; i < n; i++)
        metrics_triton_sample(b, "nv_inference_pending_request_count", &m[i], NULL,
                       m[i].pending > 0 ? (uint64_t)m[i].pending : 0);
    free(t);
    return 0;
}

static void metrics_triton_gpus(struct buf *b, struct nvml *nvml)
{
    int n = nvml_device_count(nvml);
    if (n <= 0)
        return;
    static const struct {
        const char *name, *help;
    } g[3] = {
        {"nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)"},
        {"nv_gpu_memory_total_bytes", "GPU total memory, in bytes"},
        {"nv_gpu_memory_used_bytes", "GPU used memory, in bytes"},
    };
    for (int k = 0; k < 3; k++) {
        promtext_head(b, "", g[k].name, "gauge", g[k].help);
        for (int d = 0; d < n; d++) {
            struct nvml_device nd;
            char uuid[96];
            if (nvml_device_read(nvml, d, &nd) < 0)
                continue;
            if (nvml_device_uuid(nvml, d, uuid, (int)sizeof uuid) < 0)
                snprintf(uuid, sizeof uuid, "cuda%d", d);   /* a driver that cannot say */
            buf_appendf(b, "%s{gpu_uuid=\"", g[k].name);
            promtext_label(b, uuid);
            if (k == 0)
                buf_appendf(b, "\"} %.15g\n", nd.gpu_util);
            else
                buf_appendf(b, "\"} %llu\n",
                            (unsigned long long)(k == 1 ? nd.mem_total : nd.mem_used));
        }
    }
}

static void metrics_triton_cpu(struct buf *b, struct procstat *ps)
{
    double util;
    if (ps && procstat_cpu_utilization(ps, &util) == 0) {
        promtext_head(b, "", "nv_cpu_utilization", "gauge", "CPU utilization rate [0.0 - 1.0]");
        buf_appendf(b, "nv_cpu_utilization %.15g\n", util);
    }
    uint64_t total, used;
    if (procstat_memory(&total, &used) == 0) {
        promtext_head(b, "", "nv_cpu_memory_total_bytes", "gauge",
                      "CPU total memory (RAM), in bytes");
        buf_appendf(b, "nv_cpu_memory_total_bytes %llu\n", (unsigned long long)total);
        promtext_head(b, "", "nv_cpu_memory_used_bytes", "gauge",
                      "CPU used memory (RAM), in bytes");
        buf_appendf(b, "nv_cpu_memory_used_bytes %llu\n", (unsigned long long)used);
    }
}

int metrics_triton_render(struct buf *b, const struct metrics_triton_model *m, int n,
                          struct nvml *nvml, struct procstat *ps)
{
    if (metrics_triton_models(b, m, n) < 0)
        return -1;
    metrics_triton_gpus(b, nvml);
    metrics_triton_cpu(b, ps);
    return 0;
}

/* metrics_triton.h - Triton's metric names on /metrics (nv_inference_*,
 * nv_gpu_*, nv_cpu_*), beside batchgate's own, so that dashboards and
 * alerts written for Triton read batchgate (docs/METRICS.md "Triton's
 * names"; off with metrics.triton_names: false). Each model's numbers come
 * from the same snapshot as its batchgate_ series in the same scrape, and
 * from modelstats_triton, as the stats endpoint's do. */
#ifndef BG_METRICS_TRITON_H
#define BG_METRICS_TRITON_H

struct buf;
struct nvml;
struct procstat;
struct modelstats_snapshot;

struct metrics_triton_model {
    const char *name;
    int version;                               /* the label version="N" */
    const struct modelstats_snapshot *snap;
    int pending;                               /* requests waiting in its queue now */
};

/* Appends the nv_ families for these models, the GPUs NVML sees (none
 * without NVML) and the host's CPU and memory (procstat may be NULL: no
 * nv_cpu_utilization then). 0, or -1 when out of memory. */
int metrics_triton_render(struct buf *b, const struct metrics_triton_model *m, int n,
                          struct nvml *nvml, struct procstat *ps);

#endif

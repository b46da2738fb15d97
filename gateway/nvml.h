/* nvml.h - the GPU's own view of itself (utilization, memory) through
 * NVIDIA's NVML, loaded with dlopen at run time: no build dependency, and on
 * a machine without the driver nvml_open returns NULL and nothing else
 * changes. Only the metrics use it, labelled as NVML's numbers. */
#ifndef BG_NVML_H
#define BG_NVML_H

#include <stdint.h>

struct nvml;

struct nvml_device {
    double gpu_util;          /* 0..1, the driver's sample over its last period */
    double mem_util;          /* 0..1, memory controller busy */
    uint64_t mem_used, mem_total;
};

/* NULL (and a reason in msg) when libnvidia-ml.so.1 is absent or fails. */
struct nvml *nvml_open(char *msg, int cap);
void nvml_close(struct nvml *n);
int nvml_device_count(struct nvml *n);
/* 0, or -1 when the device cannot be read now. */
int nvml_device_read(struct nvml *n, int index, struct nvml_device *out);

/* The energy the GPU used since the driver loaded, in J; -1 when the GPU or
 * driver cannot say (before Volta). */
int nvml_device_energy(struct nvml *n, int index, double *joules);

/* The GPU's UUID ("GPU-8c5b..."), NUL-terminated in out; -1 when the driver
 * cannot say. Triton labels its GPU gauges with it (gpu_uuid). */
int nvml_device_uuid(struct nvml *n, int index, char *out, int cap);

#endif

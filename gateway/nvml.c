/* nvml.c - see nvml.h. The few NVML types used are declared here as the
 * stable C ABI documents them. */
#include "gateway/nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef void *nvml_dev_t;
struct nvml_util { unsigned int gpu, memory; };
struct nvml_mem { unsigned long long total, free, used; };

struct nvml {
    void *lib;
    int count;
    nvml_dev_t dev[64];
    int (*shutdown)(void);
    int (*util)(nvml_dev_t, struct nvml_util *);
    int (*mem)(nvml_dev_t, struct nvml_mem *);
    int (*energy)(nvml_dev_t, unsigned long long *);   /* mJ since the driver loaded; optional */
    int (*uuid)(nvml_dev_t, char *, unsigned int);      /* "GPU-..."; optional */
};

struct nvml *nvml_open(char *msg, int cap)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(msg, (size_t)cap, "NVML not available (libnvidia-ml.so.1 not found)");
        return NULL;
    }
    struct nvml *n = calloc(1, sizeof *n);
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*count)(unsigned int *) = (int (*)(unsigned int *))dlsym(lib, "nvmlDeviceGetCount_v2");
    int (*handle)(unsigned int, nvml_dev_t *) =
        (int (*)(unsigned int, nvml_dev_t *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    if (n) {
        n->lib = lib;
        n->shutdown = (int (*)(void))dlsym(lib, "nvmlShutdown");
        n->util = (int (*)(nvml_dev_t, struct nvml_util *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
        n->mem = (int (*)(nvml_dev_t, struct nvml_mem *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
        /* Volta and later; older GPUs answer NOT_SUPPORTED, a driver
         * without it has no symbol: energy is then absent. */
        n->energy = (int (*)(nvml_dev_t, unsigned long long *))dlsym(
            lib, "nvmlDeviceGetTotalEnergyConsumption");
        n->uuid = (int (*)(nvml_dev_t, char *, unsigned int))dlsym(lib, "nvmlDeviceGetUUID");
    }
    unsigned int c = 0;
    if (!n || !init || !count || !handle || !n->util || !n->mem || !n->shutdown || init() != 0) {
        snprintf(msg, (size_t)cap, "NVML present but unusable (missing symbols or init failed)");
        free(n);
        dlclose(lib);
        return NULL;
    }
    if (count(&c) != 0)
        c = 0;
    for (unsigned int i = 0; i < c && i < 64; i++)
        if (handle(i, &n->dev[n->count]) == 0)
            n->count++;
    snprintf(msg, (size_t)cap, "NVML: %d device(s)", n->count);
    return n;
}

void nvml_close(struct nvml *n)
{
    if (!n)
        return;
    n->shutdown();
    dlclose(n->lib);
    free(n);
}

int nvml_device_count(struct nvml *n) { return n ? n->count : 0; }

int nvml_device_read(struct nvml *n, int index, struct nvml_device *out)
{
    struct nvml_util u;
    struct nvml_mem m;
    if (!n || index < 0 || index >= n->count || n->util(n->dev[index], &u) != 0 ||
        n->mem(n->dev[index], &m) != 0)
        return -1;
    out->gpu_util = u.gpu / 100.0;
    out->mem_util = u.memory / 100.0;
    out->mem_used = m.used;
    out->mem_total = m.total;
    return 0;
}

int nvml_device_energy(struct nvml *n, int index, double *joules)
{
    unsigned long long mj;
    if (!n || !n->energy || index < 0 || index >= n->count || n->energy(n->dev[index], &mj) != 0)
        return -1;
    *joules = (double)mj / 1e3;
    return 0;
}

int nvml_device_uuid(struct nvml *n, int index, char *out, int cap)
{
    if (!n || !n->uuid || index < 0 || index >= n->count || cap < 2 ||
        n->uuid(n->dev[index], out, (unsigned int)cap) != 0)
        return -1;
    out[cap - 1] = '\0';
    return 0;
}

/* fake_nvml.c - a stand-in for NVIDIA's libnvidia-ml.so.1 with one GPU, so
 * that the NVML path of /metrics (gateway/nvml.c) runs where no driver is:
 * tests/e2e/test_metrics.py puts its folder on LD_LIBRARY_PATH. The GPU
 * draws a steady 250 W since the library was initialized, reports 40%
 * busy and 1 of 80 GiB used, UUID GPU-fake-0. Only the entry points batchgate resolves. */
#include <stdint.h>
#include <time.h>

struct fake_util { unsigned int gpu, memory; };
struct fake_mem { unsigned long long total, free, used; };

/* The NVML entry points, as the library exports them. */
int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned int *n);
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev);
int nvmlDeviceGetUtilizationRates(void *dev, struct fake_util *u);
int nvmlDeviceGetMemoryInfo(void *dev, struct fake_mem *m);
int nvmlDeviceGetTotalEnergyConsumption(void *dev, unsigned long long *mj);
int nvmlDeviceGetUUID(void *dev, char *uuid, unsigned int len);

static struct timespec fake_t0;

static double fake_elapsed_s(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - fake_t0.tv_sec) + (double)(now.tv_nsec - fake_t0.tv_nsec) / 1e9;
}

int nvmlInit_v2(void)
{
    clock_gettime(CLOCK_MONOTONIC, &fake_t0);
    return 0;
}

int nvmlShutdown(void) { return 0; }

int nvmlDeviceGetCount_v2(unsigned int *n)
{
    *n = 1;
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **dev)
{
    *dev = (void *)(uintptr_t)(i + 1);
    return i == 0 ? 0 : 2;   /* NVML_ERROR_INVALID_ARGUMENT */
}

int nvmlDeviceGetUtilizationRates(void *dev, struct fake_util *u)
{
    (void)dev;
    u->gpu = 40;
    u->memory = 10;
    return 0;
}

int nvmlDeviceGetMemoryInfo(void *dev, struct fake_mem *m)
{
    (void)dev;
    m->total = 80ULL << 30;
    m->used = 1ULL << 30;
    m->free = m->total - m->used;
    return 0;
}

/* millijoules: 250 W since init, from 1 MJ already used before. */
int nvmlDeviceGetTotalEnergyConsumption(void *dev, unsigned long long *mj)
{
    (void)dev;
    *mj = 1000000000ULL + (unsigned long long)(fake_elapsed_s() * 250.0 * 1000.0);
    return 0;
}

int nvmlDeviceGetUUID(void *dev, char *uuid, unsigned int len)
{
    (void)dev;
    static const char id[] = "GPU-fake-0";
    if (len < sizeof id)
        return 7;   /* NVML_ERROR_INSUFFICIENT_SIZE */
    for (unsigned int i = 0; i < sizeof id; i++)
        uuid[i] = id[i];
    return 0;
}

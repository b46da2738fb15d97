/* embed.cu - embed.h's embed_sum_cuda: BERT's input embeddings on the GPU.
 *
 * One warp per token row; consecutive lanes read consecutive columns of the
 * three table rows (coalesced) and write the F32 sum word + position + type
 * in that order, as embed_sum, so the bits are the CPU's (the widening of
 * halves is exact and the two additions are the same). A row finds its
 * sequence, and so its position, by a binary search over the device
 * offsets: no per-token position array has to be built or uploaded.
 * Memory-bound: three table rows read and one row written per token. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/cpu/embed_internal.h"
#include "kernels/embed.h"
}

#define EMBED_WARPS 8   /* rows per block of 256 threads */

/* A table as the kernel sees it; p == NULL: not added. */
struct embed_tab {
    const void *p;
    int dt;       /* enum dtype */
    int rows;
};

/* Element i of t widened to F32 (exact). The dtype branch is the same for
 * the whole warp. */
__device__ __forceinline__ float embed_ld(const embed_tab &t, size_t i)
{
    switch (t.dt) {
    case DTYPE_F16: return __half2float(static_cast<const __half *>(t.p)[i]);
    case DTYPE_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(t.p)[i]);
    default: return static_cast<const float *>(t.p)[i];
    }
}

__global__ void __launch_bounds__(EMBED_WARPS * 32)
embed_sum_kernel(embed_tab word, embed_tab pos, embed_tab type, int hidden,
                 const int32_t *__restrict__ ids, const int32_t *__restrict__ type_ids,
                 const int *__restrict__ cu, int nseq, int total, float *__restrict__ out)
{
    const int w = (int)(blockIdx.x * (unsigned)EMBED_WARPS + (threadIdx.x >> 5));
    const int lane = threadIdx.x & 31;
    if (w >= total)
        return;   /* the whole warp */
    const int t = cu[0] + w;
    /* The last sequence starting at or before t is the one holding it
     * (empty sequences share their start with the next one). */
    int lo = 0, hi = nseq - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (cu[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int position = t - cu[lo];
    const int id = ids[t], ty = type_ids ? type_ids[t] : 0;
    /* The host checked its copy; this guards against a device copy that
     * differs from it: never read outside a table. */
    const bool ok = id >= 0 && id < word.rows && position >= 0 &&
                    (!pos.p || position < pos.rows) && (!type.p || (ty >= 0 && ty < type.rows));
    float *o = out + (size_t)t * (size_t)hidden;
    const size_t wr = (size_t)id * (size_t)hidden, pr = (size_t)position * (size_t)hidden,
                 tr = (size_t)ty * (size_t)hidden;
    for (int c = lane; c < hidden; c += 32) {
        float v = NAN;
        if (ok) {
            v = embed_ld(word, wr + (size_t)c);
            if (pos.p)
                v += embed_ld(pos, pr + (size_t)c);
            if (type.p)
                v += embed_ld(type, tr + (size_t)c);
        }
        o[c] = v;
    }
}

static embed_tab embed_tab_of(const struct embed_table *t)
{
    embed_tab r = {NULL, DTYPE_F32, 0};
    if (t) {
        r.p = t->data;
        r.dt = (int)t->dt;
        r.rows = t->rows;
    }
    return r;
}

static bool embed_aligned(const struct embed_table *t)
{
    return !t || (uintptr_t)t->data % dtype_size(t->dt) == 0;
}

extern "C" int embed_sum_cuda(const struct embed_table *word, const struct embed_table *pos,
                              const struct embed_table *type, int hidden,
                              const struct embed_ids *host, const struct embed_ids *dev, int nseq,
                              float *out_dev, void *stream, char *msg, size_t cap)
{
    if (!host || !dev) {
        snprintf(msg, cap, "embed: the host and device ids are both needed");
        return -1;
    }
    if (embed_check_batch(word, pos, type, hidden, host->ids, host->type_ids, host->cu_seqlens,
                          nseq, msg, cap) < 0)
        return -1;
    if (!embed_aligned(word) || !embed_aligned(pos) || !embed_aligned(type)) {
        snprintf(msg, cap, "embed: a device table is not aligned to its element size");
        return -1;
    }
    const long total = nseq > 0 ? (long)host->cu_seqlens[nseq] - host->cu_seqlens[0] : 0;
    if (total == 0)
        return 0;
    /* Type ids checked on the host but absent on the device would silently
     * become type 0; device type ids without host ones were not checked, so
     * the kernel is given none. */
    if (!dev->ids || !dev->cu_seqlens || !out_dev || (host->type_ids && !dev->type_ids)) {
        snprintf(msg, cap, "embed: a device array (ids, type ids, offsets or out) is missing");
        return -1;
    }
    const unsigned blocks = (unsigned)((total + EMBED_WARPS - 1) / EMBED_WARPS);
    embed_sum_kernel<<<blocks, EMBED_WARPS * 32, 0, static_cast<cudaStream_t>(stream)>>>(
        embed_tab_of(word), embed_tab_of(pos), embed_tab_of(type), hidden, dev->ids,
        host->type_ids ? dev->type_ids : NULL, dev->cu_seqlens, nseq, (int)total, out_dev);
    CUDA_TRY(cudaGetLastError(), msg, cap);
    return 0;
}

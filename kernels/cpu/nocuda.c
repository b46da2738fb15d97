/* nocuda.c - the CUDA entry points of kernels/ in a build without nvcc:
 * each says so, so the cuda backend reports itself unavailable. */
#include <stdio.h>

#include "kernels/attention.h"
#include "kernels/cuda_rt.h"
#include "kernels/dense.h"
#include "kernels/embed.h"
#include "kernels/kernels.h"
#include "kernels/layernorm.h"
#include "kernels/pool.h"
#include "kernels/softmax.h"

#define NO_CUDA(msg, cap) snprintf((msg), (cap), "CUDA unavailable: built without nvcc")

int kernels_cuda_built(void) { return 0; }

int kernels_cuda_devices(char *msg, size_t cap)
{
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_set_device(int device, char *msg, size_t cap)
{
    (void)device;
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_device_reset(int device, char *msg, size_t cap)
{
    (void)device;
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_mem_info(size_t *f, size_t *t, char *msg, size_t cap)
{
    *f = *t = 0;
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_device_name(int device, char *out, size_t cap)
{
    (void)device;
    NO_CUDA(out, cap);
    return -1;
}

void *cuda_rt_malloc(size_t bytes, char *msg, size_t cap)
{
    (void)bytes;
    NO_CUDA(msg, cap);
    return NULL;
}

void cuda_rt_free(void *p) { (void)p; }

void *cuda_rt_host_alloc(size_t bytes, char *msg, size_t cap)
{
    (void)bytes;
    NO_CUDA(msg, cap);
    return NULL;
}

void cuda_rt_host_free(void *p) { (void)p; }

int cuda_rt_upload(void *dst, const void *src, size_t bytes, char *msg, size_t cap)
{
    (void)dst, (void)src, (void)bytes;
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_download(void *dst, const void *src, size_t bytes, char *msg, size_t cap)
{
    (void)dst, (void)src, (void)bytes;
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_stream_create(struct cuda_stream **out, char *msg, size_t cap)
{
    *out = NULL;
    NO_CUDA(msg, cap);
    return -1;
}

void cuda_rt_stream_destroy(struct cuda_stream *s) { (void)s; }
void *cuda_rt_stream_handle(struct cuda_stream *s) { (void)s; return NULL; }

int cuda_rt_upload_async(void *dst, const void *src, size_t bytes, struct cuda_stream *s,
                         char *msg, size_t cap)
{
    (void)dst, (void)src, (void)bytes, (void)s;
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_download_async(void *dst, const void *src, size_t bytes, struct cuda_stream *s,
                           char *msg, size_t cap)
{
    (void)dst, (void)src, (void)bytes, (void)s;
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_timer_start(struct cuda_stream *s, char *msg, size_t cap)
{
    (void)s;
    NO_CUDA(msg, cap);
    return -1;
}

int64_t cuda_rt_timer_stop(struct cuda_stream *s, char *msg, size_t cap)
{
    (void)s;
    NO_CUDA(msg, cap);
    return -1;
}

int cuda_rt_stream_sync(struct cuda_stream *s, char *msg, size_t cap)
{
    (void)s;
    NO_CUDA(msg, cap);
    return -1;
}

int dense_cuda_prepare(const void *w, enum dtype wdt, const void *b, enum dtype bdt,
                       int out_features, int in_features, enum dense_act act,
                       struct dense_cuda **out, char *msg, size_t cap)
{
    (void)w, (void)wdt, (void)b, (void)bdt, (void)out_features, (void)in_features, (void)act;
    *out = NULL;
    NO_CUDA(msg, cap);
    return -1;
}

int dense_cuda_run(const struct dense_cuda *d, const float *x, int rows, float *y, void *stream,
                   char *msg, size_t cap)
{
    (void)d, (void)x, (void)rows, (void)y, (void)stream;
    NO_CUDA(msg, cap);
    return -1;
}

size_t dense_cuda_bytes(const struct dense_cuda *d) { (void)d; return 0; }
void dense_cuda_free(struct dense_cuda *d) { (void)d; }
const char *dense_cuda_kernel_name(const struct dense_cuda *d, int rows)
{
    (void)d;
    (void)rows;
    return "none";
}

int softmax_cuda_rows(const float *x, float *y, int rows, int n, void *stream, char *msg, size_t cap)
{
    (void)x, (void)y, (void)rows, (void)n, (void)stream;
    NO_CUDA(msg, cap);
    return -1;
}

int layernorm_rows_cuda(const float *x, const float *r, const float *gamma, const float *beta,
                        float eps, float *y, int rows, int dim, void *stream, char *msg,
                        size_t cap)
{
    (void)x, (void)r, (void)gamma, (void)beta, (void)eps, (void)y, (void)rows, (void)dim;
    (void)stream;
    NO_CUDA(msg, cap);
    return -1;
}

int attention_varlen_cuda(const struct attention_args *a, const int *cu_seqlens_dev, void *stream,
                          char *msg, size_t cap)
{
    (void)a, (void)cu_seqlens_dev, (void)stream;
    NO_CUDA(msg, cap);
    return -1;
}

int embed_sum_cuda(const struct embed_table *word, const struct embed_table *pos,
                   const struct embed_table *type, int hidden, const struct embed_ids *host,
                   const struct embed_ids *dev, int nseq, float *out_dev, void *stream, char *msg,
                   size_t cap)
{
    (void)word, (void)pos, (void)type, (void)hidden, (void)host, (void)dev, (void)nseq;
    (void)out_dev, (void)stream;
    NO_CUDA(msg, cap);
    return -1;
}

int pool_rows_cuda(enum pool_mode mode, unsigned flags, const float *x_dev, size_t ldx, int hidden,
                   const int *cu_seqlens, const int *cu_seqlens_dev, int nseq, float *out_dev,
                   void *stream, char *msg, size_t cap)
{
    (void)mode, (void)flags, (void)x_dev, (void)ldx, (void)hidden, (void)cu_seqlens;
    (void)cu_seqlens_dev, (void)nseq, (void)out_dev, (void)stream;
    NO_CUDA(msg, cap);
    return -1;
}

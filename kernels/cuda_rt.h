/* cuda_rt.h - the little of the CUDA runtime the backends need, as plain C
 * (backends/ compiles without CUDA headers): devices, device and pinned
 * memory, streams, copies, and timing with events. Every call's result is
 * checked; failures return -1 (or NULL) with the CUDA error in msg. In a
 * build without nvcc every function fails with "built without nvcc". */
#ifndef BG_CUDA_RT_H
#define BG_CUDA_RT_H

#include <stddef.h>
#include <stdint.h>

struct cuda_stream;   /* a stream plus two events for timing */

int cuda_rt_set_device(int device, char *msg, size_t cap);
/* Destroys the device's primary context and everything in it (device
 * memory, streams): what a process holds on a GPU it no longer uses. Only
 * when nothing on the device is in use. */
int cuda_rt_device_reset(int device, char *msg, size_t cap);
/* Free and total memory of the current device. */
int cuda_rt_mem_info(size_t *free_bytes, size_t *total_bytes, char *msg, size_t cap);
/* "NVIDIA H200 (sm_90, 139.8 GiB)" */
int cuda_rt_device_name(int device, char *out, size_t cap);

void *cuda_rt_malloc(size_t bytes, char *msg, size_t cap);          /* device memory */
void cuda_rt_free(void *p);
void *cuda_rt_host_alloc(size_t bytes, char *msg, size_t cap);      /* pinned host memory */
void cuda_rt_host_free(void *p);
/* Synchronous copies (weights at load). */
int cuda_rt_upload(void *dst, const void *src, size_t bytes, char *msg, size_t cap);
int cuda_rt_download(void *dst, const void *src, size_t bytes, char *msg, size_t cap);

int cuda_rt_stream_create(struct cuda_stream **out, char *msg, size_t cap);
void cuda_rt_stream_destroy(struct cuda_stream *s);
void *cuda_rt_stream_handle(struct cuda_stream *s);                 /* the cudaStream_t */
int cuda_rt_upload_async(void *dst, const void *src, size_t bytes, struct cuda_stream *s,
                         char *msg, size_t cap);
int cuda_rt_download_async(void *dst, const void *src, size_t bytes, struct cuda_stream *s,
                           char *msg, size_t cap);
/* Records the start event; _stop records the end event, waits for it and
 * returns the time between them in nanoseconds (or -1). */
int cuda_rt_timer_start(struct cuda_stream *s, char *msg, size_t cap);
int64_t cuda_rt_timer_stop(struct cuda_stream *s, char *msg, size_t cap);
int cuda_rt_stream_sync(struct cuda_stream *s, char *msg, size_t cap);

#endif

/* dense.h - a fully connected layer on the CPU, PyTorch nn.Linear layout:
 *
 *     y[r][o] = act(sum_i x[r][i] * W[o][i] + b[o])
 *
 * W is [out_features][in_features] row-major, x is F32 [rows][in_features],
 * y is F32 [rows][out_features], both row-major and dense.
 *
 * dense_cpu_prepare copies the weights once into a layout blocked for the
 * register tiles (panels of 16 outputs, 32 on AVX-512, k-blocks of 128 or
 * 256 inputs, 64-byte aligned, out_features padded to a whole panel with
 * zeros), so the caller may unmap or free its copy afterwards.
 * F16 and BF16 weights stay halves:
 * memory is about out*in*2 bytes, as in the file, and the kernel widens them
 * to F32 as it goes (exact; accumulation is F32), which makes rows == 1 about
 * twice as fast as with F32 weights. F32 weights take out*in*4 bytes, and so
 * do F16 weights on the generic path (no fast F16 conversion there; BF16 is
 * a shift and stays half). dense_cpu_bytes says what is held.
 *
 * dense_cpu_run is single-threaded, allocates nothing (it uses about 33 KiB
 * of stack) and only reads the prepared struct, so any number of threads may
 * run one layer at once. A row's result does not depend on the batch it is
 * in: alone or with others it gets the same bits (on one kernel path).
 * rows == 1 streams every weight exactly once (a memory-bound matrix-vector
 * product); larger batches are register-tiled (12 rows x 32 outputs on
 * AVX-512, 6 x 16 on AVX2, 4 x 16 portable) and still read each weight from
 * memory once per call. */
#ifndef BG_DENSE_H
#define BG_DENSE_H

#include <stddef.h>

#include "kernels/dtype.h"
#include "kernels/kernels.h"

/* Activation fused into the layer's epilogue. GELU is PyTorch's exact form
 * 0.5*x*(1+erf(x/sqrt(2))), not the tanh approximation. */
enum dense_act { DENSE_ACT_NONE, DENSE_ACT_RELU, DENSE_ACT_GELU, DENSE_ACT_TANH, DENSE_ACT_SIGMOID };

/* "none", "relu", "gelu", "tanh", "sigmoid" (NULL or "" mean none) into *out.
 * Returns 0, or -1 for any other name (*out untouched). */
int dense_act_parse(const char *name, enum dense_act *out);
/* The name dense_act_parse accepts for act; "?" outside the enum. */
const char *dense_act_name(enum dense_act act);

/* Weights prepared for this CPU (packed and aligned). Owned by the caller of
 * dense_cpu_prepare, freed with dense_cpu_free; read-only once prepared. */
struct dense_cpu;

/* Prepares W ([out_features][in_features], element type wdt) and the bias b
 * ([out_features] of bdt, or NULL for none) for dense_cpu_run with the
 * fastest kernel path of this CPU. w and b may be unaligned (they can point
 * into an mmap'ed file) and are not referenced after the call.
 * Returns 0 with *out set, or -1 with a reason in msg (bad shape, dtype or
 * activation, out of memory) and *out untouched. */
int dense_cpu_prepare(const void *w, enum dtype wdt, const void *b, enum dtype bdt,
                      int out_features, int in_features, enum dense_act act,
                      struct dense_cpu **out, char *msg, size_t cap);
/* dense_cpu_prepare on a given kernel path; -1 when this CPU cannot run it. */
int dense_cpu_prepare_isa(enum kernels_isa isa, const void *w, enum dtype wdt, const void *b,
                          enum dtype bdt, int out_features, int in_features, enum dense_act act,
                          struct dense_cpu **out, char *msg, size_t cap);

/* y = act(x W^T + b) for rows rows (0 does nothing). x and y must not overlap. */
void dense_cpu_run(const struct dense_cpu *d, const float *x, int rows, float *y);

/* Bytes of memory d holds (weights, bias, the struct), for accounting. */
size_t dense_cpu_bytes(const struct dense_cpu *d);
/* The packed weights (*bytes of them) and the bias ([out_features] F32, then
 * zeros to the panel width): what a cache of prepared layers stores. */
const void *dense_cpu_packed(const struct dense_cpu *d, size_t *bytes, const float **bias);
/* A layer over weights packed by dense_cpu_prepare of a source of type wdt,
 * by this build on a CPU with the same kernels (a cache file mapped back):
 * nothing is copied, the caller keeps `packed` (DENSE_ALIGN-aligned, bytes
 * long) alive and unchanged until dense_cpu_free. -1 with msg when bytes
 * or the alignment is not what this CPU's layout needs. */
int dense_cpu_prepare_packed(const void *packed, size_t bytes, enum dtype wdt, const float *bias,
                             int out_features, int in_features, enum dense_act act,
                             struct dense_cpu **out, char *msg, size_t cap);
/* The path d runs on (never AUTO). */
enum kernels_isa dense_cpu_isa(const struct dense_cpu *d);
int dense_cpu_out_features(const struct dense_cpu *d);
int dense_cpu_in_features(const struct dense_cpu *d);

/* Frees d; NULL is a no-op. */
void dense_cpu_free(struct dense_cpu *d);

/* ---- the same layer on an NVIDIA GPU (kernels/cuda/dense.cu) ----
 *
 * dense_cuda_prepare uploads W and b to the current device, W in the dtype
 * given (F16 and BF16 stay halves on the device: half the memory), b as F32.
 * dense_cuda_run enqueues one kernel on `stream` (a cudaStream_t, see
 * cuda_rt.h) computing y = act(x W^T + b) from device buffers, with the bias
 * and the activation in the kernel's epilogue and F32 accumulation:
 * rows <= 8 use a matrix-vector kernel (one warp per output, every weight read
 * once, 16-byte loads when rows of W are 16-byte aligned); larger batches a
 * 64x64-tiled kernel that reuses each weight across the batch, except that
 * F16 and BF16 weights with rows >= DENSE_CUDA_TC_MIN_ROWS (on sm_80 and
 * newer) take a tensor-core kernel, which rounds x to the weight's type as
 * cuBLAS's mixed-precision GEMM does (docs/KERNELS.md). Any shape is handled
 * (bounds-checked tiles). In a build without nvcc these fail. */
struct dense_cuda;
/* The smallest batch that takes the tensor cores: a wmma fragment is 16 rows
 * deep, so below 16 most of every MMA would multiply padding, and such
 * batches are memory-bound anyway (the other kernels stream W as fast). */
#define DENSE_CUDA_TC_MIN_ROWS 16
int dense_cuda_prepare(const void *w, enum dtype wdt, const void *b, enum dtype bdt,
                       int out_features, int in_features, enum dense_act act,
                       struct dense_cuda **out, char *msg, size_t cap);
int dense_cuda_run(const struct dense_cuda *d, const float *x_dev, int rows, float *y_dev,
                   void *stream, char *msg, size_t cap);
size_t dense_cuda_bytes(const struct dense_cuda *d);
void dense_cuda_free(struct dense_cuda *d);
/* The kernel dense_cuda_run picks for a batch of rows: "gemv", "tiled-f32",
 * "tc-32x32" or "tc-64x64" (tensor cores, block tile), "none" for rows <= 0
 * (and in a build without nvcc). For tests and benchmarks. */
const char *dense_cuda_kernel_name(const struct dense_cuda *d, int rows);

#endif

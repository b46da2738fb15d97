/* softmax.h - row-wise softmax over F32 [rows][n] on the CPU.
 *
 * Numerically stable (each row's maximum is subtracted before exp), so rows
 * like {1000, -1000} give {1, 0} instead of NaN. A row holding a NaN or +inf,
 * or only -inf, comes out all NaN (as in PyTorch). Single-threaded, allocates
 * nothing. */
#ifndef BG_SOFTMAX_H
#define BG_SOFTMAX_H

#include "kernels/kernels.h"

/* y[r][:] = softmax(x[r][:]) for rows rows of n elements. In place (x == y)
 * or out of place; partially overlapping x and y are not allowed. rows or n
 * of 0 (or less) do nothing. */
void softmax_rows(const float *x, float *y, int rows, int n);

/* softmax_rows on a given kernel path: 0, or -1 (y untouched) when this CPU
 * cannot run isa. */
int softmax_rows_isa(enum kernels_isa isa, const float *x, float *y, int rows, int n);

/* The same on the GPU: device buffers, one block per row, enqueued on
 * `stream` (a cudaStream_t). Fails in a build without nvcc. */
int softmax_cuda_rows(const float *x_dev, float *y_dev, int rows, int n, void *stream, char *msg,
                      size_t cap);

#endif

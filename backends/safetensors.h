/* safetensors.h - read-only access to a .safetensors weight file.
 *
 * The format (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian header length N, N bytes of JSON naming each tensor's dtype,
 * shape and byte range, then the data buffer those ranges index into.
 *
 * safetensors_open() validates the whole header before any tensor byte is
 * touched: sizes, shapes, offsets and overlaps are checked against the file,
 * so a hostile or truncated file fails with a message instead of reading out
 * of bounds. The file is then mmap'ed read-only and tensors point into the
 * mapping; nothing is copied. An open file is immutable: any number of
 * threads may read it at once, and only safetensors_close() frees it.
 *
 * The file must not shrink while open: touching a mapped page past its new
 * end faults (SIGBUS). Replace model files by writing a new file and
 * rename()-ing it over the old one, never by rewriting in place.
 *
 * Every dtype of the format is understood so that any valid file opens, but
 * only F32, F16 and BF16 are usable as weights (st_tensor.usable). */
#ifndef BG_SAFETENSORS_H
#define BG_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"
#include "common/error.h"

#define ST_MAX_DIMS 8
/* The reference implementation's limit; also bounds what one open() parses. */
#define ST_MAX_HEADER_BYTES 100000000u

struct safetensors;

struct st_tensor {
    const char *name;
    const char *dtype_name;        /* as in the file: "F32", "I64", "F8_E4M3", ... */
    int usable;                    /* 1 when dtype_name is F32, F16 or BF16 */
    enum dtype dtype;              /* valid only when usable */
    int ndim;                      /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS];
    int64_t nelem;                 /* product of shape; 1 for a scalar */
    const void *data;              /* into the mapping, read-only, NOT aligned in general:
                                    * read elements with memcpy */
    size_t nbytes;
};

/* Opens, validates and maps path. Returns 0 and sets *out, or -BG_EIO when
 * the file cannot be opened or read, or -BG_EINVAL when it is not a valid
 * safetensors file; err's message names the path, the tensor and the numbers
 * that disagree. */
int safetensors_open(const char *path, struct safetensors **out, struct error *err);
/* The same validation over bytes already in memory (the fuzzer's entry
 * point; safetensors_open maps the file and calls the same code). `name`
 * stands for the file in messages. Nothing is copied: `data` must outlive the
 * handle, and tensors point into it. */
int safetensors_open_mem(const char *name, const void *data, size_t len,
                         struct safetensors **out, struct error *err);
void safetensors_close(struct safetensors *st);

/* Tensors in file order (by data offset), 0 <= i < count. */
int safetensors_count(const struct safetensors *st);
const struct st_tensor *safetensors_at(const struct safetensors *st, int i);
/* NULL when there is no tensor of that name. */
const struct st_tensor *safetensors_find(const struct safetensors *st, const char *name);

/* The tensor `name` as a weight: 0 and *out set, or -BG_EINVAL with a message
 * when it is missing or its dtype is not F32/F16/BF16. */
int safetensors_weight(const struct safetensors *st, const char *name,
                       const struct st_tensor **out, struct error *err);

/* A "__metadata__" value, NULL when absent. */
const char *safetensors_metadata(const struct safetensors *st, const char *key);

const char *safetensors_path(const struct safetensors *st);
size_t safetensors_file_bytes(const struct safetensors *st);

#endif

/* tensor_json.h - the KServe v2 and TF-Serving wire formats of tensors:
 * decoding an infer request into rows of FP32, encoding the answer.
 *
 * Pure functions over bytes: no HTTP, no queues (the fuzzers call these). A
 * decode error is -BG_EINVAL with a message naming the field, e.g.
 * "inputs[0].shape: [3, 65] does not match the model's [-1, 64]". */
#ifndef BG_TENSOR_JSON_H
#define BG_TENSOR_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/error.h"
#include "backends/backend.h"
#include "backends/model.h"

/* Triton's system shared memory parameters of a tensor
 * (`shared_memory_region`, `shared_memory_offset`, `shared_memory_byte_size`). */
#define TENSOR_SHM_NAME_MAX 128
struct tensor_shm {
    bool set;
    char region[TENSOR_SHM_NAME_MAX];
    uint64_t offset, byte_size;
};

/* Where a tensor's bytes in shared memory are: the decoder asks with the
 * tensor's parameters once they passed its own checks; the caller maps
 * (gateway/shmreg.h) and keeps the memory valid until the request is
 * answered. Returns 0 with *bytes (byte_size of them), or a negative
 * BG_E* code with a message naming `what` ("inputs[0]"). */
struct tensor_shm_resolver {
    int (*resolve)(void *ctx, const struct tensor_shm *ref, const char *what, void **bytes,
                   struct error *err);
    void *ctx;
};
/* The error for a tensor whose region's bytes were gone when read or
 * written (memguard_copy failed: the client truncated the object); `where`
 * is the tensor's prefix ("inputs[0]."). Returns -BG_EINVAL. */
int tensor_shm_gone(const struct tensor_shm *ref, const char *where, struct error *err);

struct infer_request {
    char id[256];
    bool has_id;
    int rows;
    float *input;                 /* rows x input.row_elems, malloc'ed; caller frees */
    bool binary_output;           /* answer with the binary tensor extension */
    bool has_priority, has_timeout;
    int64_t priority;             /* parameters.priority */
    int64_t timeout_us;           /* parameters.timeout */
    bool truncate;                /* parameters.truncate (text inputs): cut past the maximum
                                   * length rather than refuse (413); default true */
    int64_t tokens;               /* a text input's tokens, all rows; 0 for FP32 inputs */
    struct tensor_shm output_shm; /* the output goes into shared memory (set), not the body */
    void *output_shm_bytes;       /* where: output_shm.byte_size bytes, from the resolver */
    /* outputs[].parameters.classification (Triton's extension): the top
     * class_count of each row answered as BYTES "value:index[:label]"; 0:
     * the tensor itself. Checked against the output's size at decode. */
    int64_t class_count;
    bool tfs_columnar;            /* TF-Serving's columnar form: answer {"outputs": ...} */
};

/* A KServe v2 infer body for the model m (an encoder's BYTES text input is
 * tokenized with its tokenizer: a JSON array of strings, or the binary
 * extension's elements, each a 4-byte little-endian length and its bytes).
 * `json_len` is the Inference-Header-Content-Length (the JSON part of a
 * binary-extension body) or -1 when the body is all JSON. */
int tensor_decode_kserve(const struct model *m, const char *body, size_t len,
                         int64_t json_len, struct infer_request *out, struct error *err);
/* The same, with tensors in shared memory served through `shm` (NULL:
 * their parameters are refused, 400). An input's shared_memory_byte_size
 * must be exactly what its shape needs (FP32: rows x elements x 4; an
 * encoder's BYTES: the binary extension's elements), an output's at least
 * the output's bytes; the input's bytes are copied out before this
 * returns, the output's address is left in out->output_shm_bytes. */
int tensor_decode_kserve_shm(const struct model *m, const char *body, size_t len,
                             int64_t json_len, const struct tensor_shm_resolver *shm,
                             struct infer_request *out, struct error *err);
/* The same from the JSON head already parsed (`head`, a jansson object the
 * caller keeps) and the binary part after it (bin_len bytes at bin; NULL
 * when the body is all JSON): what the gRPC front end hands the infer
 * handler (http_inner_set_decoded, of kind TENSOR_KSERVE_HEAD), sparing a
 * second parse of the text it wrote. */
#define TENSOR_KSERVE_HEAD "kserve_v2 head (jansson)"
/* Where a JSON syntax error is, for its message: "column C" in a body of
 * one line (a job's line, a usual request: "line 1" read as the job's
 * line 1), else "line L, column C". Returns out. */
const char *tensor_json_where(char *out, size_t cap, int line, int column);
struct json_t;
/* A JSON string holding no NUL: what every name, datatype, id and choice
 * must be. Bodies are parsed with JSON_ALLOW_NUL for the texts (a \u0000
 * in a text tokenizes as the tokenizers package does), and a name read as
 * a C string would be cut at one: "input\u0000zz" would pass as "input". */
bool tensor_json_name(const struct json_t *v);
int tensor_decode_kserve_head(const struct model *m, struct json_t *head, const char *bin,
                              size_t bin_len, const struct tensor_shm_resolver *shm,
                              struct infer_request *out, struct error *err);

/* The answer: JSON, or (binary_output) a JSON header followed by the raw
 * bytes, whose length goes in *json_len (-1 when all JSON). An output
 * in shared memory (r->output_shm.set) is answered as Triton does, with its
 * name, datatype and shape only: the caller copies the bytes into the
 * region.
 *
 * With r->class_count the output is Triton's classification: BYTES of shape
 * [rows, class_count], each element "value:index" or, where the model has
 * labels (m->labels), "value:index:label" (an empty label line gives
 * "value:index"); the value printed as C's "%f" (6 decimals: Triton's
 * std::to_string), "nan", "inf" or "-inf". Per row, larger values first;
 * NaN after every number; equal values by index, lowest first. In binary
 * form each element is a 4-byte little-endian length and its bytes. */
int tensor_encode_kserve(const struct model *m, int version, const struct infer_request *r,
                         const float *output, struct buf *out, int64_t *json_len);

/* TF-Serving's REST predict. Row form: {"instances": [row, ...]} (each row
 * nested per the input's shape, or {"<input name>": row}) -> {"predictions":
 * [...]}. Columnar form (out->tfs_columnar): {"inputs": tensor} or {"inputs":
 * {"<input name>": tensor}}, the tensor batch first -> {"outputs": [...]}.
 * "signature_name" may name only "serving_default". */
int tensor_decode_tfs(const struct model_config *m, const char *body, size_t len,
                      struct infer_request *out, struct error *err);
int tensor_encode_tfs(const struct model_config *m, const struct infer_request *r,
                      const float *output, struct buf *out);

/* Appends s as a JSON string literal (quotes included). */
int json_append_string(struct buf *out, const char *s, size_t len);

#endif

/* upstream_codec.h - the wire form of the upstream backend's calls: one
 * batch's rows as a KServe v2 or TF-Serving request body, and the server's
 * answer read back into the batch's output rows.
 *
 * An answer is read strictly, because the rows it carries go back to
 * several clients: a value too many or too few in any row would hand one
 * client's numbers to another. What is accepted:
 *   KServe v2   "outputs": the entry named as the model's output (the call
 *               asks for that one only); a numeric datatype (its numbers
 *               become FP32); "shape" [rows, ...] of rows x row_elems
 *               elements; "data" flat or nested, row-major, of exactly
 *               that many numbers
 *   TF-Serving  "predictions": one entry per row; each a number (an output
 *               of one element), an array (nested for several dimensions)
 *               of exactly row_elems numbers, or an object holding the
 *               output by name (a model of several outputs)
 * A JSON null is a number that is not finite (what batchgate and others
 * print for NaN and inf): it is NaN in the row; so are TF Serving's bare
 * NaN, Infinity and -Infinity, which are not JSON. Anything else fails the
 * batch with a message naming what differs (502 to its requests).
 * A TF-Serving request's instances are nested as the input's shape. */
#ifndef BG_UPSTREAM_CODEC_H
#define BG_UPSTREAM_CODEC_H

#include <stddef.h>

#include "backends/model.h"
#include "common/buf.h"

/* Appends the request body for rows x input.row_elems floats to b. */
void upstream_codec_request(const struct model_config *mc, const float *in, int rows,
                            struct buf *b);

/* Reads a 200 answer's body into out (rows x output.row_elems). 0, or -1
 * with why (a sentence naming the field and what was wrong). */
int upstream_codec_answer(const struct model_config *mc, const char *body, size_t len,
                          int rows, float *out, char *why, size_t cap);

/* The "error" member of a JSON error body (Triton's, TF Serving's,
 * batchgate's), cut to fit cap, for a failed call's message; "" when the
 * body has none. */
void upstream_codec_error(const char *body, size_t len, char *msg, size_t cap);
/* Whether a TF Serving model status answer (GET /v1/models/{m}, which is
 * 200 whatever the model's state) has a version AVAILABLE; else false and
 * why in msg (the states it has, or that it is no status answer). */
bool upstream_codec_tfs_available(const char *body, size_t len, char *msg, size_t cap);

#endif

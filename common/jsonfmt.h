/* jsonfmt.h - writing JSON numbers fast: the answer of a wide model is
 * thousands of floats, and snprintf("%g") was most of an IO thread's time.
 * Shared by the gateway's tensor codec and the upstream backend. */
#ifndef BG_JSONFMT_H
#define BG_JSONFMT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"

/* Appends v with 9 significant digits (always enough to read back the same
 * float), trailing zeros trimmed; non-finite values as null (JSON has no
 * inf/NaN). Returns 0 or -1 (out of memory). */
int json_append_float(struct buf *out, float v);

/* As TF Serving writes a float (its WriteDecimal): six significant digits
 * where they read back as the same float (0.6, where nine gave
 * 0.600000024), else nine; always a float's text (1.0, not 1, which numpy
 * reads as an integer) and non-finite values as the bare tokens NaN,
 * Infinity and -Infinity (its documented JSON mapping; Python's json
 * reads them). */
int json_append_float_tfs(struct buf *out, float v);

typedef int (*json_float_fn)(struct buf *out, float v);
/* shape[0] x ... x shape[ndims-1] floats from *v (advanced past them) as
 * nested arrays, each written by `put`. */
int json_append_nested(struct buf *out, const float **v, const int64_t *shape, int ndims,
                       json_float_fn put);

/* The text with every bare NaN, Infinity and -Infinity (outside strings;
 * TF Serving writes them, JSON has none) replaced by null, into out:
 * returns how many were replaced, or -1 (out of memory). out NULL: only
 * counts them. */
int json_nonfinite_to_null(const char *text, size_t len, struct buf *out);
/* About the number of nodes a parse of text makes, values and object keys
 * (one more than its commas, colons and opening brackets outside strings:
 * exact for an array of numbers), counted without parsing: each is a
 * parsed node of ~50 bytes, so a body of far more values than its reader
 * takes is refused before it is parsed (8 MiB of zeros took 200 MB).
 * JSON_VALUES_ANY bounds a body whose reader has no tighter bound (a
 * model not known yet, an LLM call's). */
uint64_t json_values_at_least(const char *text, size_t len);
#define JSON_VALUES_ANY (1u << 22)

/* Whether jansson's error text is a number it cannot hold ("real number
 * overflow", "too big integer"): valid JSON, not a malformed body. */
bool json_error_out_of_range(const char *jansson_text);

#endif

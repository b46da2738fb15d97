/* labels.h - the class labels of a model's output: a text file in the
 * model's folder, one label a line, named by the output's "labels" in
 * config.json. Triton's classification extension answers "value:index:label"
 * with them (serving/tensor_json.h).
 *
 * Read once when the model loads, immutable after: IO threads read it
 * while encoding answers without a lock. */
#ifndef BG_LABELS_H
#define BG_LABELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct labels;

/* Reads `path` (at most LABELS_MAX_BYTES). `want` is the output's elements
 * per row: a file with fewer labels is refused, naming both counts; lines
 * past `want` are ignored (Triton's label files are read the same way). A
 * file that is not UTF-8 is refused (labels go into JSON strings). Errors:
 * -BG_ECONFIG with "PATH: ...". */
int labels_load(const char *path, int64_t want, struct labels **out, struct error *err);

/* The same from text already in memory; `name` names it in messages. */
int labels_parse(const char *text, size_t len, const char *name, int64_t want,
                 struct labels **out, struct error *err);

void labels_free(struct labels *l);

/* How many labels are kept: `want`. */
int64_t labels_count(const struct labels *l);

/* Label i (0-based): *len bytes at the result, not NUL-terminated; a
 * trailing "\r" is not part of it. i past the end gives "" (length 0). */
const char *labels_get(const struct labels *l, int64_t i, size_t *len);

#define LABELS_MAX_BYTES (64u << 20)

#endif

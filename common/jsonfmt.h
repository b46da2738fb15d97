/* jsonfmt.h - writing JSON numbers fast: the answer of a wide model is
 * thousands of floats, and snprintf("%g") was most of an IO thread's time.
 * Shared by the gateway's tensor codec and the upstream backend. */
#ifndef BG_JSONFMT_H
#define BG_JSONFMT_H

#include "common/buf.h"

/* Appends v with 9 significant digits (always enough to read back the same
 * float), trailing zeros trimmed; non-finite values as null (JSON has no
 * inf/NaN). Returns 0 or -1 (out of memory). */
int json_append_float(struct buf *out, float v);

#endif

/* sse.h - server-sent events as OpenAI-compatible servers stream them: where
 * an event ends, and its data. Shared by the reader of answers passing
 * through to clients (gateway/llmtap.c) and the assembler of Batch API lines'
 * streams (serving/llmstream.c). Pure functions over bytes.
 *
 * Lines end with CRLF, LF or a lone CR (the SSE spec's three); an event
 * ends at a blank line; its data is the values of its `data:` lines (one
 * leading space dropped) joined by "\n"; comments (":"), `event:`, `id:`
 * and `retry:` lines carry none. Read for LF alone, a stream of CR-ended
 * lines was one event until the server closed: held back from the client,
 * its usage lost. */
#ifndef BG_SSE_H
#define BG_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/buf.h"

/* Where the first complete event in p[from..len) ends (just after its blank
 * line), or 0 when none is complete there. A caller fed in pieces may
 * resume the search SSE_END_BACK bytes before the old end of its buffer (an
 * end, "\r\n\r\n" at most, can straddle pieces). */
#define SSE_END_BACK 3
size_t sse_event_end(const char *p, size_t len, size_t from);

/* The data of the event ev[0..len) appended to out; whether it had a data
 * line. -1 when out could not grow. */
int sse_event_data(const char *ev, size_t len, struct buf *out);

#endif

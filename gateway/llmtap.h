/* llmtap.h - what batchgate reads of an LLM server's answer on its way to
 * the client (gateway/api_llm.c): a stream's server-sent events split as
 * they complete and passed on one by one, each chunk with generated text
 * reported as it passes (time to first token, inter-token gaps), the
 * usage the server reports, and the usage event that batchgate asked for
 * dropped when the client did not ask for it. A whole (non-streamed)
 * answer's usage too. Chunks are read for text without being parsed (any
 * non-empty `content`, `reasoning_content`, `text`, a tool call's
 * `arguments` or `refusal`, in any choice); only
 * an event with a `usage` that is not null is parsed. Pure: no I/O, the clock passed in; bounded: an
 * event larger than LLMTAP_EVENT_MAX passes through as it comes, read as
 * one content chunk, and reading goes on after it. */
#ifndef BG_LLMTAP_H
#define BG_LLMTAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define LLMTAP_EVENT_MAX (1u << 20)

struct llmtap {
    bool want_usage;                  /* the client asked for the usage event */
    bool skipping;                    /* inside an event over LLMTAP_EVENT_MAX: passed as it is */
    int oversized;                    /* such events in this answer */
    struct buf ev;                    /* the event being assembled */
    size_t scan;                      /* ev is searched for an event's end from here */
    /* What was read: */
    int64_t chunks;                   /* events carrying generated text */
    bool usage_seen;
    int64_t prompt_tokens, completion_tokens;
    /* Called for each event with generated text, at `now` as given to
     * llmtap_feed; optional. */
    void (*on_content)(void *arg, int64_t now_ns);
    void *arg;
};

void llmtap_init(struct llmtap *t);
void llmtap_free(struct llmtap *t);
/* For a new answer (keeps the memory; want_usage and the callback stay). */
void llmtap_reset(struct llmtap *t);
/* Bytes of an event stream as they arrive at now_ns: appends to out what
 * the client gets now (the complete events, less a usage event it did not
 * ask for). 0, or -1 out of memory. */
int llmtap_feed(struct llmtap *t, const char *data, size_t len, int64_t now_ns, struct buf *out);
/* The stream ended: an event the server did not close goes as it is. */
void llmtap_end(struct llmtap *t, struct buf *out);
/* A whole answer's usage (its JSON body); nothing when it has none. */
void llmtap_usage_of(struct llmtap *t, const char *body, size_t len);

#endif

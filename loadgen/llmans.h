/* llmans.h - an OpenAI completion's answer as batchgate-load receives it,
 * and the LLM metrics of a step (docs/LOADGEN.md "OpenAI mode").
 *
 * A streamed answer is server-sent events, fed in whatever pieces the
 * socket gives (an event may be split across reads, several may come in
 * one, lines may end in \r\n): each `data:` event is a JSON chunk, the
 * last one `data: [DONE]`. A chunk that carries content (a chat delta's
 * non-empty `content` or `reasoning_content`, a completion's non-empty
 * `text`) is a token arrival: the first one gives the time to first
 * token, the gaps between them the inter-token latencies. The usage chunk
 * (`stream_options.include_usage`) gives the token counts. A whole
 * (non-streamed) answer is one JSON body. Everything is bounded: an event
 * or a body over its cap makes the answer broken, never a bigger buffer. */
#ifndef BG_LG_LLMANS_H
#define BG_LG_LLMANS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/hist.h"

#define LLMANS_EVENT_MAX (1 << 20)    /* one SSE line or event, bytes */
#define LLMANS_BODY_MAX (16 << 20)    /* a whole answer's body, bytes */
#define LLMANS_GAPS_MAX 65536         /* inter-token gaps kept per answer */

struct llmans {
    bool stream;
    int64_t first_ns, last_ns;   /* content chunks: the first and the latest (0: none) */
    uint64_t chunks;             /* chunks that carried content */
    int64_t prompt_tokens;       /* from usage; -1 when the answer gave none */
    int64_t completion_tokens;
    bool done;                   /* data: [DONE] seen */
    const char *failed;          /* why the answer is broken; NULL while it is not */
    bool cr;                     /* the last byte fed was \r (a \n next ends no line) */
    bool has_data;               /* the event being read has a data: line */
    struct buf line;             /* the line being read */
    struct buf data;             /* the event's data (joined by \n), or the whole body */
    int64_t *gaps;               /* ns between successive content chunks */
    size_t ngaps, capgaps;
};

/* The LLM side of one step: successful answers only, as vLLM's serving
 * benchmark counts them. */
struct llmans_stats {
    struct hist ttft, itl, tpot, e2e;
    uint64_t requests;           /* answers whole (2xx, stream ended by [DONE]) */
    uint64_t prompt_tokens, output_tokens;
    uint64_t broken;             /* 2xx answers that broke (also counted in errors) */
    char first_broken[96];       /* the first one's reason */
};

void llmans_init(struct llmans *a);
void llmans_free(struct llmans *a);
/* Starts a new answer (keeps the buffers' memory). */
void llmans_begin(struct llmans *a, bool stream);
/* Body bytes of a 2xx answer, as they arrive at `now`. */
void llmans_feed(struct llmans *a, const char *p, size_t n, int64_t now);
/* The body ended (at `now`): 0 when the answer is whole, -1 when broken
 * (a->failed says why: an event that is not JSON, an error event, no
 * [DONE], a body that is not a completion, a cap exceeded). */
int llmans_end(struct llmans *a, int64_t now);

void llmans_stats_reset(struct llmans_stats *s);
/* A whole answer of a request intended at `intended`, ended at `end`. */
void llmans_stats_record(struct llmans_stats *s, const struct llmans *a, int64_t intended,
                         int64_t end);
void llmans_stats_broken(struct llmans_stats *s, const char *why);
void llmans_stats_merge(struct llmans_stats *dst, const struct llmans_stats *src);

#endif

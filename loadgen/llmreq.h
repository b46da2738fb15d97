/* llmreq.h - the requests of batchgate-load's OpenAI mode (docs/LOADGEN.md
 * "OpenAI mode"): chat or completion bodies from a JSONL file of prompts
 * (lines in order, cycling) or from synthetic length distributions with
 * shared prefixes, each a whole HTTP/1.1 request.
 *
 * Request k of a run is a function of (--seed, k) alone, whatever the
 * timing: the synthetic workload a run sends is the same every time, and
 * `--dry-run N` prints exactly the bodies a run would send first. k runs on
 * across the steps of a sweep, so a later step does not repeat an earlier
 * one's prompts (which a server's prefix cache would answer at once). */
#ifndef BG_LG_LLMREQ_H
#define BG_LG_LLMREQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

#define LLMREQ_WORDS_MAX 200000    /* words in one synthetic part, at most */
#define LLMREQ_PREFIXES_MAX 1024

/* A length drawn normal(mean, sd), rounded, clipped to >= 1. */
struct llmreq_len {
    double mean, sd;
};

/* --synthetic in=MEAN[:SD],out=MEAN[:SD],prefixes=K,prefix_len=WORDS */
struct llmreq_synth {
    struct llmreq_len in;        /* words of each request's own text */
    struct llmreq_len out;       /* max_tokens */
    bool out_set;                /* else --max-tokens */
    int prefixes;                /* shared prefixes (0: none) */
    int prefix_len;              /* words each */
};

struct llmreq_opts {
    bool chat;                   /* /v1/chat/completions, else /v1/completions */
    bool stream;
    const char *model;
    int max_tokens;              /* where a line or the spec gives none */
    const char *host;
    const char *url_path;        /* the --url's path: a prefix, or the route itself */
    const char *headers;         /* extra header lines, "N: V\r\n" each, or NULL */
    const char *api_key;         /* Authorization: Bearer, or NULL */
    uint64_t seed;
};

struct llmreq;

/* "in=200:50,out=64:16,prefixes=4,prefix_len=512" into *s. Returns 0, or -1
 * with msg naming the part that is wrong. */
int llmreq_synth_parse(const char *spec, struct llmreq_synth *s, char *msg, int cap);
/* From a JSONL file of {"prompt": ...} or {"messages": [...]} objects. */
int llmreq_from_prompts(const struct llmreq_opts *o, const char *path, struct llmreq **out,
                        char *msg, int cap);
int llmreq_from_synth(const struct llmreq_opts *o, const struct llmreq_synth *s,
                      struct llmreq **out, char *msg, int cap);
void llmreq_free(struct llmreq *w);

bool llmreq_stream(const struct llmreq *w);
/* The route the requests go to ("/v1/chat/completions" or a prefix of it). */
const char *llmreq_path(const struct llmreq *w);
/* Request k's JSON body (malloc'd, NUL-terminated), or NULL (out of memory). */
char *llmreq_body(const struct llmreq *w, uint64_t k);
/* Appends the run's next request (head and body) to out; -1: out of memory. */
int llmreq_append_next(struct llmreq *w, struct buf *out);

#endif

/* scrape.h - what an LLM server's /metrics says about its load (issue 24,
 * docs/LLM.md "Picking an endpoint"): a pure parser of the Prometheus text
 * exposition (version 0.0.4, and OpenMetrics text, which reads the same for
 * what is taken here) into the few numbers the endpoint picker
 * (serving/picker.h) scores on. No allocation, no clock, one pass.
 *
 * The series recognised, by server (names checked against each server's
 * source; llama.cpp's against the build docs/LLM.md measured):
 *
 *   vLLM       waiting vllm:num_requests_waiting, running vllm:num_requests_running,
 *              kv_cache vllm:kv_cache_usage_perc (before the v1 engine
 *              vllm:gpu_cache_usage_perc, a fraction 0..1 as well), prompt_tokens
 *              vllm:prompt_tokens_total, cached vllm:prefix_cache_hits_total
 *   llama.cpp  (--metrics) waiting llamacpp:requests_deferred, running
 *              llamacpp:requests_processing, no KV gauge, prompt_tokens
 *              llamacpp:prompt_tokens_total, cached llamacpp:prompt_tokens_cached_total
 *   SGLang     waiting sglang:num_queue_reqs, running sglang:num_running_reqs,
 *              kv_cache sglang:token_usage, prompt_tokens sglang:prompt_tokens_total,
 *              cached sglang:cached_tokens_total
 *   TGI        waiting tgi_queue_size, running tgi_batch_current_size
 *
 * A series is summed over its label sets (vLLM and SGLang label by
 * model_name, and by engine or dp_rank under data parallelism; a server of
 * two models reports both), except kv_cache, a fraction, which takes the
 * largest (the fullest cache is the one a new request may wait on). A server
 * that has both KV names is read by the v1 one. */
#ifndef BG_SCRAPE_H
#define BG_SCRAPE_H

#include <stddef.h>

/* Which server family the series came from (the one that gave `waiting`,
 * else `running`, else any field). */
enum scrape_server { SCRAPE_UNKNOWN, SCRAPE_VLLM, SCRAPE_LLAMACPP, SCRAPE_SGLANG, SCRAPE_TGI };

struct scrape_load {
    double waiting;     /* requests queued in the server, -1 unknown */
    double running;     /* requests being decoded, -1 unknown */
    double kv_cache;    /* KV cache usage 0..1, -1 unknown */
    /* Counters as each server counts them, -1 unknown. prompt_tokens is all
     * prompt tokens for vLLM and SGLang (cached ones included) but only the
     * computed ones for llama.cpp (its prompt_tokens_total leaves the cached
     * ones out); computed_prompt_tokens below is the same thing for all. */
    double prompt_tokens, cached_prompt_tokens;
    /* Prompt tokens the server computed rather than took from its cache:
     * llama.cpp's prompt_tokens_total; vLLM's and SGLang's prompt_tokens
     * minus cached_prompt_tokens (-1 when either is unknown). */
    double computed_prompt_tokens;
    int recognised;     /* how many of the known series were found; 0: not a server we understand */
    enum scrape_server server;
};

/* Parses Prometheus text exposition from an endpoint into *out (every field
 * -1 that the text does not give). Returns 0, or -1 when the text is not
 * parseable at all (no line is a comment or a sample, yet not all are
 * blank: an HTML error page, JSON); *out is filled in both cases.
 *
 * Never reads past len; text need not be NUL-terminated. A line that does
 * not parse is skipped (the rest still count); so is a last line without
 * its line feed, which the format requires (a body cut short would
 * otherwise turn "12" into "1"). Handled: # HELP / # TYPE and other
 * comments, labels (escaped quotes, backslashes and \n in values, spaces
 * around them, a trailing comma), NaN and +-Inf values (a sample that is not
 * finite counts as absent, and so does a series whose sum overflows: every
 * field is finite or -1), timestamps, OpenMetrics exemplars, CRLF line
 * ends. Work is linear in len. */
int scrape_parse(const char *text, size_t len, struct scrape_load *out);

/* The family's name for logs: "vllm", "llama.cpp", "sglang", "tgi", "unknown". */
const char *scrape_server_name(enum scrape_server s);

#endif

/* metrics_llm.h - the LLM pools' families on /metrics (SPEC.md "LLM
 * pools"): time to first token and inter-token latency per endpoint,
 * tokens per tenant, what each endpoint last reported, and sheds. */
#ifndef BG_METRICS_LLM_H
#define BG_METRICS_LLM_H

struct buf;
struct llmpool;
struct auth;

struct metrics_llm_pool {
    const char *name;               /* the pool's model name */
    struct llmpool *pool;
};
/* Appends the families (prefix batchgate_) for these pools; tenant names
 * from auth (NULL: index 0 is "default"). 0, or -1 when out of memory. */
int metrics_llm_render(struct buf *b, const struct metrics_llm_pool *p, int n,
                       const struct auth *auth);

#endif

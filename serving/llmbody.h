/* llmbody.h - the checks an OpenAI request body for an LLM pool passes
 * before it is sent, online (gateway/api_llm.c) or as a Batch API line
 * (serving/jobs_batch.c): the fields that decide how a call is streamed
 * and how many tokens it may take must mean one thing. A server that reads
 * "stream": "yes" or "max_tokens": "5000" leniently (vLLM does) would
 * stream or generate past what the quota reserved. */
#ifndef BG_LLMBODY_H
#define BG_LLMBODY_H

#include <stddef.h>

#include <jansson.h>

#include "common/error.h"

/* max_tokens, max_completion_tokens, n_predict: at most this many. */
#define LLMBODY_TOKENS_MAX (1 << 30)
/* n and best_of: OpenAI's own bound on n. */
#define LLMBODY_CHOICES_MAX 128

/* 0, or -BG_EINVAL with the reason and the field named in param. */
int llmbody_check(const json_t *root, char *param, size_t pcap, struct error *err);

#endif

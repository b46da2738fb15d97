/* tokens.h - token counts an LLM server reports in its answer's `usage`.
 *
 * They are charged to tenants' quotas and summed into counters, so they are
 * believed only within a range no call comes near: a server answering
 * prompt_tokens -100000 handed its tenant a million tokens of quota back,
 * and 9223372036854775807 overflowed the sum. Outside it, the caller counts
 * as if no usage had come (its own estimate). */
#ifndef BG_TOKENS_H
#define BG_TOKENS_H

#include <stdbool.h>
#include <stdint.h>

#define TOKENS_REPORTED_MAX (INT64_C(1) << 40)

static inline bool tokens_reported_ok(int64_t n) { return n >= 0 && n <= TOKENS_REPORTED_MAX; }

#endif

/* usage_query.h - the parameters of a usage ledger query (SPEC.md "Usage
 * and cost"), parsed the same way for GET /v2/usage and `batchgate
 * report`, and the rows rendered as JSON or CSV. */
#ifndef BG_USAGE_QUERY_H
#define BG_USAGE_QUERY_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "state/state.h"

/* More periods than this in one answer: 400 (step). */
#define USAGE_QUERY_MAX_PERIODS 100000

struct usage_query {
    int64_t from, to, step;           /* Unix seconds */
    int group_by;                     /* STATE_USAGE_BY_* */
    char tenant[64];                  /* "": every tenant's rows */
};

/* The instants the API takes and writes: 0001-01-01T00:00:00Z through
 * 9999-12-31T23:59:59Z. */
#define USAGE_TIME_MIN (-62135596800LL)
#define USAGE_TIME_MAX 253402300799LL

/* RFC 3339 ("2026-12-03T10:00:00Z", "...+01:00", fractions dropped), a
 * date ("2026-12-03", midnight UTC) or Unix seconds, within
 * USAGE_TIME_MIN..MAX: 0, or -1. */
int usage_parse_time(const char *s, int64_t *out);
/* "tenant,model,class,device" (any of them, any order; "" none): 0 or -1. */
int usage_parse_group_by(const char *s, int *mask);
/* The parameters checked together (step >= 60, from < to, not too many
 * periods): 0, or -1 with the parameter's name in *param and why in msg. */
int usage_query_check(const struct usage_query *q, const char **param, char *msg, size_t cap);
/* "2026-12-03T10:00:00Z" into out (at least 21 bytes). */
void usage_format_time(int64_t t, char *out, size_t cap);

/* Rows in memory (a query's answer). */
struct usage_rows {
    struct state_usage_row *r;
    int n, cap;
    int failed;                       /* out of memory while collecting */
};
/* A state_usage_fn collecting into a struct usage_rows. */
void usage_rows_collect(const struct state_usage_row *r, void *arg);
void usage_rows_free(struct usage_rows *rows);

/* Keys not grouped by are left out of JSON and empty in CSV. */
void usage_render_json(struct buf *b, const struct usage_query *q, const struct usage_rows *rows);
void usage_render_csv(struct buf *b, const struct usage_query *q, const struct usage_rows *rows);

#endif

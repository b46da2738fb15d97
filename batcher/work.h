/* work.h - the unit of work: one request's rows (struct infer_item) and a
 * batch of them (struct batch), and the one function that ends an item.
 *
 * An item belongs to its submitter (the gateway's request, a job's line)
 * and is lent: to the batcher from batcher_submit while queued, to a worker
 * (or an event-loop backend's feed) while its batch runs, back to the
 * submitter through work_complete. Every path that ends an item (computed,
 * failed, expired, cancelled, shut down, abandoned by the watchdog) ends it
 * with work_complete, which calls the submitter's `complete` exactly once:
 * a second attempt is refused and logged, never delivered. Backends never
 * see an item: a worker gathers a batch's rows into a buffer for them
 * (backends/backend.h, struct backend_io). */
#ifndef BG_WORK_H
#define BG_WORK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/list.h"

/* Tenants an item may belong to (serving/tenant.h's table has as many). */
#define WORK_TENANTS_MAX 64

struct infer_item {
    struct infer_item *next;          /* the batch it was taken into (or a list of expired ones) */
    struct list q_svc;                /* the batcher's queue in service order */
    struct list q_arr;                /* ... in arrival order */
    struct list q_dl;                 /* ... in deadline order (only with a deadline) */
    struct list q_ten;                /* ... in service order among its tenant's */
    int rows;
    /* The work units it costs the device (work_tokens): for an encoder the
     * tokens of its rows, set by the submitter; 0 means one unit per row,
     * as for every model that is not sequence-shaped. The batcher plans
     * (latency model, max_batch_tokens, arrival rate) in these units. */
    int tokens;
    /* The sum over its rows of the squared sequence length (attention's
     * quadratic term, latmodel.h); 0: not given. Give it for every item of
     * a model or for none: the latency model fits the term only from
     * batches that carry it. */
    int64_t tokens_sq;
    /* The longest of its rows in tokens, for padding (batch_padding) and
     * length grouping; 0: not given (then tokens / rows, rounded up). */
    int max_len;
    const float *input;               /* rows x input.row_elems */
    float *output;                    /* rows x output.row_elems */
    int64_t t_arrival_ns;             /* last byte of the request received */
    int64_t t_dequeue_ns;             /* taken into a batch */
    int64_t t_planned_ns;             /* when the batcher planned that batch to finish */
    int64_t t_compute_ns;             /* the batch's execution time */
    /* The batch's gathering of rows into the backend's buffer and
     * scattering of its answers: each item of a batch carries the whole
     * batch's times, as it does the execution's (Triton's compute_input,
     * compute_output; docs/METRICS.md). */
    int64_t t_input_ns, t_output_ns;
    int64_t deadline_ns;              /* 0: none */
    int priority;                     /* 1 is the highest; the batcher fills in the default */
    int tenant;                       /* index in the tenants table (serving/tenant.h), 0 to
                                       * WORK_TENANTS_MAX - 1; 0: default */
    int batch_rows;                   /* rows of the batch it ran in */
    int status;                       /* 0, or a BG_E* code (set by work_complete) */
    int retry_after_s;                /* BG_EUNAVAILABLE, BG_ETENANTLIMIT: the seconds the
                                       * answer's Retry-After says */
    char error[200];
    bool queued;                      /* batcher-internal */
    /* Expired while the scheduler held its tenant back (its `limit`, or
     * time another tenant reserves): the tenant's refusal, not the
     * model's (batcher-internal, set by bqueue_expire). */
    bool held;
    /* Offline work (a job's line): queued apart, run only in device time no
     * online request needs, never aged, no deadline (batcher/queue.h). */
    bool offline;
    atomic_bool ended;                /* work_complete ran (reset by batcher_submit) */
    /* The submitter's: called once, by work_complete, from whichever thread
     * ends the item; it may free the item. */
    void (*complete)(struct infer_item *it);
};

struct batch {
    struct infer_item *head;          /* the batch's requests, linked by next */
    int nitems;
    int rows;
    int64_t tokens;                   /* the members' work_tokens: rows unless tokens are given */
    int64_t tokens_sq;                /* the members' tokens_sq; 0 when one did not give it */
    int max_len;                      /* the longest row (work_max_len), for batch_padding */
    int64_t budget;                   /* the tokens the policy filled it up to (see policy.h) */
    int max_rows;                     /* the max_batch_size it was cut under (batch_fill_ratio) */
    int64_t gather_ns;                /* its rows gathered (serving/batchrun.h), for statistics */
};

/* What an item costs in the batcher's units: its tokens, or its rows. */
static inline int work_tokens(const struct infer_item *it)
{
    return it->tokens > 0 ? it->tokens : it->rows;
}

/* Its longest row in tokens: max_len, or its tokens spread evenly. */
static inline int work_max_len(const struct infer_item *it)
{
    int r = it->rows > 0 ? it->rows : 1;
    return it->max_len > 0 ? it->max_len : (work_tokens(it) + r - 1) / r;
}

/* Ends the item: status 0 (its output rows are written) or a BG_E* code
 * with msg (NULL: keep the message already in it->error), then
 * it->complete. Returns 0, or -1 when the item had already ended (a bug
 * upstream of here: logged, and `complete` is not called again). */
int work_complete(struct infer_item *it, int status, const char *msg);
/* Ends every item of a list linked by `next` alike. */
void work_complete_list(struct infer_item *head, int status, const char *msg);
/* Ends every item of a batch with its own status (outputs written, or the
 * error each was given); the batch is empty after. */
void batch_complete(struct batch *b);

/* Rows of a batch that are offline (job lines). */
int batch_offline_rows(const struct batch *b);

/* The part of a batch's exec_ns that is item it's: by its tokens (its
 * rows for a model without tokens), for charging device time to tenants. */
int64_t batch_item_ns(const struct batch *b, const struct infer_item *it, int64_t exec_ns);
/* The whole batch's parts by class ([0] online, [1] offline job lines)
 * and tenant, each batch_item_ns of BATCH_PARTS_SCALE summed: the one
 * tally the device's shares and the usage ledger charge by, kept while a
 * batch runs (its items may be answered by the watchdog meanwhile). All
 * 0 for an empty batch. */
#define BATCH_PARTS_SCALE (1u << 30)
void batch_parts(const struct batch *b, uint32_t part[2][WORK_TENANTS_MAX]);
/* Sets b->tokens, tokens_sq and max_len from its members (the queue does
 * when it cuts a batch). */
void batch_sum(struct batch *b);
/* The share of a padded layout's positions that would be padding: 1 -
 * tokens / (rows x the longest row). 0 for a batch of rows (every row one
 * token) and for an empty batch. A packed kernel computes none of it; a
 * padded one (a GPU, a server behind the upstream backend) computes all. */
double batch_padding(const struct batch *b);

#endif

/* batcher.h - a model's request queue shared by its instance workers:
 * admission (queue limit, early 504 for budgets that cannot be met), expiry
 * of queued requests at the instant they become hopeless, and batches cut by
 * the policy (policy.h) from each instance's fitted latency model. The
 * unit of work it queues and hands out is work.h's.
 *
 * Threads: any thread submits and cancels; instance workers block in
 * batcher_next until a batch is due (a timed wait to the policy's next
 * decision instant, no polling); one reaper thread answers requests whose
 * deadline can no longer be met while every instance is busy. Items are
 * borrowed, never copied, and each is completed exactly once: by a worker
 * after running it, or here (cancelled, expired, closed). */
#ifndef BG_BATCHER_H
#define BG_BATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/model.h"
#include "batcher/policy.h"
#include "batcher/work.h"
#include "common/error.h"

struct batcher;

struct batcher *batcher_new(const char *model_name, const struct model_batching *cfg,
                            int instances, struct error *err);
void batcher_free(struct batcher *b);

/* Seeds an instance's latency model (the warmup batches at load): a batch
 * of `rows` rows and `tokens` tokens (0: as many as rows) whose rows'
 * squared lengths sum to tokens_sq (0: not given) ran in exec_ns. */
void batcher_seed(struct batcher *b, int instance, int rows, int64_t tokens, int64_t tokens_sq,
                  int64_t exec_ns);

/* Queues the item. Returns 0, or -BG_EQUEUEFULL, -BG_EINVAL (rows, or
 * tokens over batching.max_batch_tokens),
 * -BG_EDEADLINE (its budget cannot be met even alone) or -BG_ESHUTDOWN, with
 * a message; then the item is not queued and `complete` is not called. */
int batcher_submit(struct batcher *b, struct infer_item *it, struct error *err);

/* Whether a request of `tenant` would be refused for a full queue now (a
 * snapshot: the front door asks before decoding a body, so a flood costs
 * the IO threads as little as possible). */
bool batcher_full_for(struct batcher *b, int tenant);

/* The client went away: a queued item leaves the queue at once and
 * completes with BG_ECANCELLED (its rows are never computed). One a worker
 * already took runs with its batch (taking its rows out mid-batch would
 * save nothing: the batch's time hardly depends on one row) and completes
 * as usual; the HTTP layer drops the answer. */
void batcher_cancel(struct batcher *b, struct infer_item *it);

/* Worker side: blocks until a batch is due for `instance`; 0, or -1 once closed. */
int batcher_next(struct batcher *b, int instance, struct batch *out);
/* Event-loop side (the upstream backend): never blocks. Returns 1 with a
 * batch, 0 when none is due (*wake_ns: when to ask again, POLICY_NEVER for
 * "when something is submitted"), -1 once closed. */
int batcher_try_next(struct batcher *b, int instance, struct batch *out, int64_t *wake_ns);
/* Called (from the submitting thread, outside the queue's lock) after each
 * successful submit, so an event loop can wake up and ask again. Returns
 * once no submitter calls the previous waker any more: a loop can free what
 * its waker touches after setting NULL. */
void batcher_set_waker(struct batcher *b, void (*waker)(void *arg), void *arg);

/* The instant a batch taken for `instance` must start by for its earliest
 * deadline to hold (less its predicted execution and the answer guard);
 * 0 when none of its rows has a deadline. What a device scheduler ranks
 * waiting batches by (serving/devsched.h). */
int64_t batcher_start_by(struct batcher *b, int instance, const struct batch *bt);
/* Tells the policy whether the device `instance` runs on has other work
 * (other models' batches running or waiting) while this queue would wait
 * for company: then waiting leaves the device no idler (policy_load's
 * device_has_other_work). Called under the queue's lock, so it must not
 * call back into this batcher. Set before the workers start. */
void batcher_set_device_probe(struct batcher *b, bool (*other_work)(void *arg, int instance),
                              void *arg);

/* Ranks the tenants with queued requests for a batch about to be cut for
 * `instance` (serving/shares.h: who is owed device time first): fills
 * order[] from has[] and returns how many may be served; *retry_ns: when
 * to ask again if some were held back; *offline_first: job lines are owed
 * their guaranteed part of the device (a time window's offline_share), so
 * a batch of them goes before the online requests; off_held[t]: tenant t's
 * job lines wait (over its limit). Called under the queue's lock, also
 * when only job lines are queued (has[] all false). NULL (the default):
 * one service order for all. */
typedef int (*batcher_rank_fn)(void *arg, int instance, int64_t now_ns, const bool *has,
                               int *order, int64_t *retry_ns, int64_t *held_ns,
                               bool *offline_first, bool *off_held);
void batcher_set_tenant_rank(struct batcher *b, batcher_rank_fn rank, void *arg);
/* (With a ranking the queue is also fair to tenants when full: see
 * queue.h; a request that made room is answered 429.) */

/* Worker side: a batch ran; its time refines the instance's latency model
 * (in the batch's tokens and tokens_sq). */
void batcher_done(struct batcher *b, int instance, const struct batch *bt, int64_t exec_ns);

/* IO side: a computed item's answer was queued for writing at answered_ns.
 * How late that was against the batch's plan teaches the guard (guard.h). */
void batcher_answered(struct batcher *b, const struct infer_item *it, int64_t answered_ns);
/* The current guard: deadlines are planned this many ns early. */
int64_t batcher_guard_ns(struct batcher *b);

/* Stops workers and reaper; completes every queued item with BG_ESHUTDOWN. */
void batcher_close(struct batcher *b);

int batcher_depth(struct batcher *b);
/* The fitted model of an instance: exec(tokens) ~= a + b*tokens (+ margin),
 * ns (tokens are rows for a model without tokens; the quadratic term, when
 * one was fitted, is left out here). */
void batcher_latency_model(struct batcher *b, int instance, double *a_ns, double *b_ns,
                           double *margin_ns);


#endif

/* batcher.h - a model's request queue: admission, and batches for its
 * instance workers as the policy (policy.h) decides.
 *
 * Threads: any thread submits and cancels; instance workers block in
 * batcher_next until a batch is due (a timed wait to the policy's next
 * decision instant, no polling). Items are borrowed, never copied: the
 * batcher links them through infer_item.prev/next and completes each exactly
 * once (queue closed, cancelled while queued) or hands it to a worker. */
#ifndef BG_BATCHER_H
#define BG_BATCHER_H

#include "backend.h"
#include "error.h"
#include "model.h"

struct batcher;

/* The batching section of the model's config; name is used in messages. */
struct batcher *batcher_new(const char *model_name, const struct model_batching *cfg);
void batcher_free(struct batcher *b);

/* Queues the item. Returns 0, -BG_EQUEUEFULL (max_queue_size), -BG_EINVAL
 * (more rows than max_batch_size) or -BG_ESHUTDOWN, with a message. On error
 * the item is not queued and `complete` is not called. */
int batcher_submit(struct batcher *b, struct infer_item *it, struct error *err);

/* The client went away: a queued item leaves the queue at once and
 * completes with BG_ECANCELLED (its rows are never computed); one a worker
 * already took is only flagged, and its answer is dropped. */
void batcher_cancel(struct batcher *b, struct infer_item *it);

/* Worker side: blocks until a batch is due; 0, or -1 once closed. */
int batcher_next(struct batcher *b, struct batch *out);

/* Stops the workers and completes every queued item with BG_ESHUTDOWN. */
void batcher_close(struct batcher *b);

int batcher_depth(struct batcher *b);

/* A batch_source for model_workers_start. */
struct batch_source batcher_source(struct batcher *b);

#endif

/* feed.h - the feed of a model on a loop backend (upstream): the backend's
 * event loop polls it for batches without blocking (struct backend_feed);
 * the feed takes them from the model's batcher, gathers their rows into the
 * slot's buffer and ends them when the backend reports (batchrun.h). */
#ifndef BG_FEED_H
#define BG_FEED_H

#include "common/error.h"

struct served_model;
struct feed;

/* Makes the slots and starts the backend's loop on the feed. */
int feed_start(struct served_model *sm, struct feed **out, struct error *err);
/* Stops the loop (batches in flight end with 503; the batcher must be
 * closed first) and frees the feed. */
void feed_stop(struct feed *f);

#endif

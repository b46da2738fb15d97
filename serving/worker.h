/* worker.h - the instance workers of a model on a compute backend: one
 * thread per instance pulls a batch from the model's batcher, waits for a
 * slot on its device (the device scheduler, when the instance is placed on
 * a shared device), gathers the rows into the instance's buffer, runs the
 * backend, and ends the batch (batchrun.h); plus the batch watchdog when
 * batching.batch_timeout_ms is set. */
#ifndef BG_WORKER_H
#define BG_WORKER_H

#include <stdbool.h>

#include "common/error.h"

struct served_model;
struct devsched;
struct shares;
struct workers;

/* Where an instance runs its batches: a member of a device scheduler, or
 * (dev NULL) on its own. */
struct worker_place {
    struct devsched *dev;
    int member;
    struct shares *shares;            /* the tenant shares its batches are charged to, or NULL */
};

/* Starts the threads; place has one entry per instance. The model's
 * batcher and statistics must exist. */
int workers_start(struct served_model *sm, const struct worker_place *place,
                  struct workers **out, struct error *err);
/* Joins the threads (the batcher must be closed first). A worker stuck in
 * a call the watchdog abandoned is waited for a little, then left: then
 * workers_stranded is true and the model's memory must stay. */
void workers_join(struct workers *w);
bool workers_stranded(const struct workers *w);
/* After workers_join; keeps what a stranded worker may still touch. */
void workers_free(struct workers *w);

#endif

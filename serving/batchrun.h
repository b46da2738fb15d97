/* batchrun.h - what every runner of batches does around one: the instance
 * workers of compute backends (worker.c) and the feed of loop backends
 * (feed.c) gather a batch's rows into the backend's buffer the same way and
 * end it the same way: answers scattered, the batch recorded (the
 * instance's latency model, the model's statistics) before any answer
 * leaves, every item ended once. */
#ifndef BG_BATCHRUN_H
#define BG_BATCHRUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batcher/work.h"

struct modelstats_flight;
struct served_model;
struct shares;

/* Copies the batch's rows, in order, into dst (row_elems floats a row),
 * and keeps how long that took in b->gather_ns (Triton's compute_input). */
void batchrun_gather(struct batch *b, float *dst, size_t row_elems);

/* The batch ran on `instance` for exec_ns. status 0: each item's rows are
 * copied from out (the scatter, timed: Triton's compute_output), each item
 * is given the batch's gather, execution and scatter times, and the batch
 * is recorded (and charged to its tenants on `shares`, when not NULL; in
 * the statistics, their use on `instance` itself, or for a loop backend's
 * batch (`flight` not NULL) on the server it went to last:
 * modelstats_batch_end); else every item fails with
 * status and msg, except that with `late_is_timeout` an item whose deadline
 * passed gets 504 (its budget ran out, whatever else went wrong). Every
 * item is ended (work_complete); the batch is empty after. The batcher's
 * latency model learns learn_ns (exec_ns but for a server routed around
 * for its speed: feed.c). */
void batchrun_end(struct served_model *sm, int instance, struct modelstats_flight *flight,
                  struct shares *shares,
                  struct batch *b, const float *out, int status, const char *msg,
                  int64_t exec_ns, int64_t learn_ns, bool late_is_timeout);

#endif

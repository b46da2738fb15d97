/* batchrun.c - see batchrun.h. */
#include "serving/batchrun.h"

#include <stdio.h>
#include <string.h>

#include "batcher/batcher.h"
#include "common/clock.h"
#include "serving/modelstats.h"
#include "serving/serving.h"
#include "serving/shares.h"

void batchrun_gather(struct batch *b, float *dst, size_t row_elems)
{
    int64_t t0 = now_ns();
    for (const struct infer_item *it = b->head; it; it = it->next) {
        memcpy(dst, it->input, (size_t)it->rows * row_elems * sizeof(float));
        dst += (size_t)it->rows * row_elems;
    }
    b->gather_ns = now_ns() - t0;
}

void batchrun_end(struct served_model *sm, int instance, struct modelstats_flight *flight,
                  struct shares *shares,
                  struct batch *b, const float *out, int status, const char *msg,
                  int64_t exec_ns, int64_t learn_ns, bool late_is_timeout)
{
    size_t row = (size_t)sm->model.cfg.output.row_elems;
    int64_t now = late_is_timeout && status ? now_ns() : 0;
    int64_t t0 = now_ns();
    for (struct infer_item *it = b->head; it; it = it->next) {
        it->batch_rows = b->rows;
        if (status == 0) {
            memcpy(it->output, out, (size_t)it->rows * row * sizeof(float));
            out += (size_t)it->rows * row;
            it->status = 0;
            continue;
        }
        bool late = late_is_timeout && it->deadline_ns && now >= it->deadline_ns &&
                    status != BG_ESHUTDOWN;
        it->status = late ? BG_EDEADLINE : status;
        snprintf(it->error, sizeof it->error, "%s", msg ? msg : "");
    }
    /* Every request of the batch is charged the whole batch's gather,
     * execution and scatter, as Triton charges each request of a batch the
     * batch's compute: the request waited for all of it (docs/METRICS.md). */
    int64_t scatter_ns = now_ns() - t0;
    for (struct infer_item *it = b->head; it; it = it->next) {
        it->t_input_ns = b->gather_ns;
        it->t_compute_ns = exec_ns;
        it->t_output_ns = scatter_ns;
    }
    /* Recorded before the answers leave: whoever reads the statistics after
     * getting an answer sees its batch counted. */
    if (status == 0)
        batcher_done(sm->batcher, instance, b, learn_ns);
    /* Always: the usage ledger charges device time to tenants, the default
     * one included, and a failed batch held the device too. The scheduler's
     * shares take the same time (gather and scatter included, failed
     * batches too: they took exec_ns alone, and tenant_device_seconds_total
     * fell short of device_busy_seconds_total by up to 1%). */
    int64_t held_ns = modelstats_batch_end(sm->stats, instance, flight, b, status == 0,
                                           b->gather_ns, exec_ns, scatter_ns);
    if (shares && held_ns > 0)   /* tenants configured */
        shares_charge(shares, now_ns(), b, held_ns);
    batch_complete(b);
}

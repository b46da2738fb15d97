/* synthetic.c - a backend whose cost and answers are known exactly, for
 * testing and benchmarking the batcher: a batch of R rows takes
 * base_us + per_row_us * R (sleeping, or spinning to occupy a core like a
 * real kernel would), and output element j of a row is
 *     sum(input row) + j
 * so every answer can be checked without a model. */
#include "backends/backend_impl.h"

#include <time.h>

#include "common/clock.h"

static int synthetic_model_load(struct model *m, struct cold_start *cs, struct error *err)
{
    (void)cs;
    (void)err;
    m->shared = NULL;
    m->shared_bytes = 0;
    return 0;
}

static void synthetic_model_unload(struct model *m) { (void)m; }

static int synthetic_instance_load(struct instance *in, struct error *err)
{
    (void)err;
    in->state = NULL;
    in->memory_bytes = 0;
    return 0;
}

static void synthetic_instance_unload(struct instance *in) { (void)in; }

static int synthetic_run(struct instance *in, struct backend_io *b, struct error *err)
{
    (void)err;
    const struct model_config *c = &in->model->cfg;
    int64_t start = now_ns();
    int64_t cost_ns = (c->synthetic.base_us + c->synthetic.per_row_us * b->rows) * 1000;
    int64_t in_row = c->input.row_elems, out_row = c->output.row_elems;
    for (int r = 0; r < b->rows; r++) {
        double sum = 0;
        for (int64_t i = 0; i < in_row; i++)
            sum += b->in[r * in_row + i];
        for (int64_t j = 0; j < out_row; j++)
            b->out[r * out_row + j] = (float)(sum + (double)j);
    }
    int64_t end = start + cost_ns;
    if (c->synthetic.mode == SYNTHETIC_SPIN) {
        while (now_ns() < end)
            ;
    } else {
        int64_t left;
        while ((left = end - now_ns()) > 0) {
            struct timespec ts = {(time_t)(left / 1000000000), (long)(left % 1000000000)};
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

const struct backend_i backend_synthetic = {
    .name = "synthetic",
    .kind = BACKEND_COMPUTE,
    .device_kind = BACKEND_DEVICE_CPU,
    .model_load = synthetic_model_load,
    .model_unload = synthetic_model_unload,
    .instance_load = synthetic_instance_load,
    .run = synthetic_run,
    .instance_unload = synthetic_instance_unload,
};

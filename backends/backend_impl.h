/* backend_impl.h - what a backend implements, for backends/ only. Callers
 * use backend.h; the registry (backend.c) is the one table of backends.
 *
 * Every backend loads and unloads a model and its instances. A compute
 * backend implements `run`; a loop backend implements `loop_start`,
 * `loop_stop` and `loop_slots` (and no `run`). Members marked optional may
 * be NULL. */
#ifndef BG_BACKEND_IMPL_H
#define BG_BACKEND_IMPL_H

#include "backends/backend.h"
#include "common/httpc.h"

/* Compute: batches run on instances (model_run). Loop: batches pulled by the
 * backend's own event loop (model_loop_start). Pool: no batches; the model
 * is servers that batch themselves (an LLM pool: serving/llmpool.h). */
enum backend_kind { BACKEND_COMPUTE, BACKEND_LOOP, BACKEND_POOL };

struct backend_i {
    const char *name;                 /* the config's and the device label's name */
    enum backend_kind kind;
    enum backend_device_kind device_kind;
    bool encoders;                    /* runs MODEL_KIND_ENCODER models (model.h) */
    /* Optional: whether the backend can run on this machine; 0 with the
     * reason in why when not. NULL: always. */
    int (*available)(char *why, size_t cap);
    /* Loads what the instances share (weights); times read and prepare. */
    int (*model_load)(struct model *m, struct cold_start *cs, struct error *err);
    void (*model_unload)(struct model *m);
    /* Per-instance state (scratch buffers, streams). */
    int (*instance_load)(struct instance *in, struct error *err);
    void (*instance_unload)(struct instance *in);
    /* Optional: host memory the rows are gathered into and scattered from
     * (pinned, for the copy engine). Called after instance_load; NULL:
     * plain malloc/free. */
    void *(*host_alloc)(struct instance *in, size_t bytes, char *msg, size_t cap);
    void (*host_free)(struct instance *in, void *p);
    /* Compute: io->out from io->in for io->rows rows; may set io->device_ns. */
    int (*run)(struct instance *in, struct backend_io *io, struct error *err);
    /* Loop: see backend.h, model_loop_start. */
    int (*loop_start)(struct model *m, const struct backend_feed *feed, struct error *err);
    void (*loop_stop)(struct model *m);
    int (*loop_slots)(const struct model *m);
    /* Optional: the model's devices when they are not its instances (the
     * servers behind a loop backend); see backend.h, model_devices. */
    void (*devices)(const struct model *m, model_device_fn fn, void *arg);
    /* Optional: the model serves; keep what was prepared at load for the
     * next load (model_keep). */
    void (*keep)(struct model *m);
    /* Optional: frees what the backend keeps on device `id` once no model
     * is loaded there (cuda: the primary context); backend_release_device. */
    int (*release_device)(int id, char *msg, size_t cap);
    /* Optional: the servers its batches go to (model_servers). */
    int (*servers)(const struct model *m, struct httpc_target *const **out);
};

extern const struct backend_i backend_cpu;
extern const struct backend_i backend_cuda;
extern const struct backend_i backend_synthetic;
extern const struct backend_i backend_openai;
extern const struct backend_i backend_upstream;

/* For a backend that calls servers (upstream, openai), in its model_load:
 * server i just set up (t), or m->prev's server i instead when it is the
 * same one (httpc_target_continue), so that its counters go on across a
 * reload. Through prev's own `servers`: backend.c calls the backends, and
 * they do not call it back. */
static inline struct httpc_target *backend_server_continue(const struct model *m, int i,
                                                           struct httpc_target *t)
{
    struct httpc_target *const *prev = NULL;
    const struct model *p = m->prev;
    int n = p && p->backend && p->backend->servers ? p->backend->servers(p, &prev) : 0;
    return i >= 0 && i < n ? httpc_target_continue(t, prev[i]) : t;
}

#endif

/* backend.h - loaded models and the backends that run them.
 *
 * A model is loaded once (weights shared by its instances where the backend
 * allows) on the backend its config names. Backends come in two kinds
 * (backend_impl.h holds the interface they implement):
 *   - compute backends (cpu, cuda, synthetic) run a batch on one instance
 *     when asked: model_run, from a worker thread per instance (serving/);
 *   - loop backends (upstream) run their own event loop and pull batches
 *     from a feed without blocking: model_loop_start.
 * Either way a backend sees rows in host buffers (struct backend_io), never
 * a request: who the rows belong to is the caller's (batcher/work.h). */
#ifndef BG_BACKEND_H
#define BG_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "backends/model.h"

struct backend_i;                     /* backends/backend_impl.h */
struct httpc_target;

/* One batch's rows as a backend sees them. */
struct backend_io {
    const float *in;                  /* rows x input.row_elems */
    float *out;                       /* rows x output.row_elems */
    int rows;
    int64_t device_ns;                /* set by backends that time the batch on the device */
    int retry_after_s;                /* a failed batch (BG_EUNAVAILABLE): when to try again */
    int64_t deadline_ns;              /* a loop backend's batch: its earliest deadline; 0 none */
};

struct model;

struct instance {
    struct model *model;
    int index;
    int device;                       /* device index for accelerators, else -1 */
    void *state;                      /* the backend's, per instance */
    size_t memory_bytes;              /* held by this instance (buffers, device weights) */
    /* Gather/scatter buffers of max_batch_size rows, from the backend's
     * host-buffer op (pinned memory on cuda, plain memory elsewhere). */
    float *in, *out;
    int nwarm;                        /* warmup batches: the first latency samples */
    int warm_rows[2 * (MODEL_MAX_PREFERRED + 2)];
    /* Each warmup batch's tokens (= rows for a model without tokens) and
     * its rows' squared lengths summed (0: not given): the latency model
     * is in tokens (batcher/latmodel.h). */
    int64_t warm_tokens[2 * (MODEL_MAX_PREFERRED + 2)];
    int64_t warm_tokens_sq[2 * (MODEL_MAX_PREFERRED + 2)];
    int64_t warm_ns[2 * (MODEL_MAX_PREFERRED + 2)];
};

/* Test hooks (POST /debug/fault): the next `count` batches of a model
 * fail (500), hang for `ms` (past batching.batch_timeout_ms: the watchdog's
 * case) or run `ms` slower. Off unless debug_endpoints is set. */
enum model_fault { MODEL_FAULT_NONE, MODEL_FAULT_FAIL, MODEL_FAULT_HANG, MODEL_FAULT_SLOW };

/* Cold start of the last load, by phase, in seconds. */
struct cold_start {
    double context_s;                 /* accelerator context creation (cuda), part of prepare */
    double read_s;                    /* files opened, mapped and validated */
    double prepare_s;                 /* weights converted, packed, uploaded */
    double warmup_s;                  /* first batches run */
    double total_s;
};

/* What a backend's work runs on. Metrics and statistics name a model's
 * devices through model_devices, so nothing above tests a backend's name or
 * fields to know what kind of device a model runs on. */
enum backend_device_kind {
    BACKEND_DEVICE_CPU,               /* the host's cores (cpu, synthetic); the default */
    BACKEND_DEVICE_GPU,               /* an accelerator (cuda) */
    BACKEND_DEVICE_UPSTREAM,          /* the servers behind (upstream) */
};

struct wordpiece;
struct labels;

struct model {
    struct model_config cfg;
    const struct backend_i *backend;  /* set by model_load */
    /* Not loaded: the backend its load would pick, when the config says
     * "auto" (backend_auto_pick), so the metadata's platform does not
     * change with the load state; NULL: the config's. */
    const char *planned;
    /* An encoder's tokenizer (encoder.h), loaded with the model: requests
     * are tokenized by their IO thread once the model is loaded. */
    struct wordpiece *tokenizer;
    /* The output's labels (labels.h) when its config names a file, loaded
     * with the model: classification answers read them. */
    struct labels *labels;
    void *shared;                     /* the backend's shared state (weights) */
    size_t shared_bytes;
    struct instance *instances;
    int ninstances;
    bool ready;
    char reason[600];                 /* why not ready */
    struct cold_start cold;
    /* Set by the caller before model_load: no warmup batch (the same files
     * passed a full warmup at an earlier load; the caller seeds the latency
     * model with its timings). */
    bool warm_light;
    /* Set by the caller before model_load: where the cpu backend keeps
     * packed weights between loads (backends/packcache.h); NULL: nowhere. */
    const char *cache_dir;
    /* Set by the caller before model_load, for a reload: the copy serving
     * now (NULL: none). A server it calls that this copy calls too, alike,
     * goes on as the same target (httpc_target_continue), so its busy time
     * and health go on across the reload: the old copy's calls still in
     * flight count on it, the usage ledger's too. Read during the load only. */
    const struct model *prev;
    /* Fault injection (tests): mode, batches left, milliseconds. */
    _Atomic int fault_mode, fault_count, fault_ms;
};

/* Picks the backend ("auto": cuda when built and a device is usable, else
 * cpu), loads the model and its instances and runs the warmup batches.
 * On failure the model stays, not ready, with the reason. */
int model_load(struct model *m, struct error *err);
void model_unload(struct model *m);
size_t model_memory_bytes(const struct model *m);
/* What instance i holds, as its backend counts it (weights, and the device
 * buffers a backend keeps: instance.memory_bytes), and on instance 0 the
 * weights the instances share. The model's is the sum over its instances;
 * every surface (/metrics, the dashboard, the log, the memory budget)
 * counts with this one. The host's per-batch row buffers are not in it:
 * they were on the dashboard only, so a synthetic model showed 192 bytes
 * there and 0 on /metrics. */
size_t model_instance_bytes(const struct model *m, int i);
/* The backend a loaded model runs on ("cpu", "cuda", ...); before a load,
 * `planned` where the caller set it, else the one its config names. */
const char *model_backend_name(const struct model *m);
/* The backend "auto" picks now for a model of that kind, by name. It asks
 * the CUDA runtime for its devices: not on an IO thread. */
const char *backend_auto_pick(bool encoder);

/* ---- compute backends ---- */

/* Whether the loaded model's backend runs batches on its instances
 * (model_run) rather than in its own loop (model_loop_start). */
bool model_is_compute(const struct model *m);
/* Whether the model is an LLM pool (runs no batches: serving/llmpool.h);
 * before a load, whether its config says so. */
bool model_is_pool(const struct model *m);
/* Runs io->rows rows on the instance (the faults of model_fault_set first). */
int model_run(struct instance *in, struct backend_io *io, struct error *err);

/* ---- loop backends ---- */

/* Where a loop backend's batches come from: the serving layer's feed. */
struct backend_feed {
    /* Never blocks. 1: *io holds a batch for the backend's `slot`
     * (0 .. model_loop_slots - 1, each with at most one batch out); 0: none
     * due, ask again at *wake_ns (INT64_MAX: when the waker rings); -1: the
     * feed is closed. */
    int (*poll)(void *ctx, int slot, struct backend_io **io, int64_t *wake_ns);
    /* The slot's batch ended after exec_ns: status 0 with io->out written,
     * or a BG_E* code and a message for all its rows. */
    void (*finish)(void *ctx, int slot, int status, const char *msg, int64_t exec_ns);
    /* The slot's batch was sent to `server` (its index in the backend's
     * servers, model_servers) now: each try, a try at another server
     * ending the one before. NULL: not told. */
    void (*sent)(void *ctx, int slot, int server);
    /* The feed rings waker(arg) from the submitting thread whenever work
     * arrives; NULL stops it. */
    void (*set_waker)(void *ctx, void (*waker)(void *arg), void *arg);
    void *ctx;
};
/* Batches a loop backend keeps in flight at most. */
int model_loop_slots(const struct model *m);
/* Starts the backend's loop on the feed; model_loop_stop ends every batch
 * still in flight (finish with BG_ESHUTDOWN) and returns once the loop is
 * gone. */
int model_loop_start(struct model *m, const struct backend_feed *feed, struct error *err);
void model_loop_stop(struct model *m);

/* ---- devices ---- */

/* One device of a loaded model: an instance of a compute backend, or a
 * server behind a backend that sends its batches to servers. */
struct model_device {
    enum backend_device_kind kind;
    char name[48];                    /* the `device` label: "cpu0", "cuda0", "upstream1" */
    int instance;                     /* the instance that runs there; -1 for a server */
    struct httpc_target *target;      /* the server; NULL for an instance */
};
typedef void (*model_device_fn)(const struct model_device *d, void *arg);
/* Calls fn for each device of a loaded model, in order: one per instance
 * (named by the device it was placed on, else by its index), or one per
 * server (by its index in upstream.urls). Nothing for a model not loaded. */
void model_devices(const struct model *m, model_device_fn fn, void *arg);
/* The kind of device a loaded model runs on (CPU when not loaded). */
enum backend_device_kind model_device_kind(const struct model *m);
/* The servers a loaded model's batches go to (a backend that calls
 * servers); 0 and NULL for others. */
int model_servers(const struct model *m, struct httpc_target *const **out);

/* After model_load, once the model serves: the backend keeps what it
 * prepared for the next load of the same files (the cpu backend writes its
 * packed weights under cache_dir). Off the request path: the caller's
 * thread does it while the model already answers. */
void model_keep(struct model *m);
/* The device labelled `label` ("cuda0") has no model loaded any more: its
 * backend frees what it kept there (the CUDA context: the next load on it
 * creates one again, timed as the cold start's context phase). 0 when
 * done or when the backend keeps nothing; -1 with msg. */
int backend_release_device(const char *label, char *msg, size_t cap);
void model_fault_set(struct model *m, enum model_fault mode, int count, int ms);

#endif

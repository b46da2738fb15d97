/* backend.h - the backend interface, the unit of work (a batch of requests'
 * rows), loaded models and their instance workers.
 *
 * A model is loaded once (weights shared by its instances where the backend
 * allows) and served by `instances.count` worker threads. Each worker pulls
 * a batch from its batch source (the model's batcher), gathers the rows into
 * one contiguous buffer, runs the backend, scatters the output rows back and
 * completes every request. Backends never see HTTP; the gateway learns of a
 * finished request only through infer_item.complete. */
#ifndef BG_BACKEND_H
#define BG_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/list.h"
#include "backends/model.h"

/* One request's rows as the batcher and the workers see it. Owned by the
 * gateway (embedded in its per-request state); the batcher, then a worker,
 * borrow it from batcher_submit until `complete` is called. */
struct infer_item {
    struct infer_item *next;          /* the batch it was taken into (or a list of expired ones) */
    struct list q_svc;                /* the batcher's queue in service order */
    struct list q_arr;                /* ... in arrival order */
    struct list q_dl;                 /* ... in deadline order (only with a deadline) */
    int rows;
    const float *input;               /* rows x input.row_elems */
    float *output;                    /* rows x output.row_elems */
    int64_t t_arrival_ns;             /* last byte of the request received */
    int64_t t_dequeue_ns;             /* taken into a batch */
    int64_t t_planned_ns;             /* when the batcher planned that batch to finish */
    int64_t t_compute_ns;             /* the batch's execution time */
    int64_t deadline_ns;              /* 0: none */
    int priority;                     /* 1 is the highest; the batcher fills in the default */
    int batch_rows;                   /* rows of the batch it ran in */
    int status;                       /* 0, or a BG_E* code */
    char error[200];
    bool queued;                      /* batcher-internal */
    /* Offline work (a job's line): queued apart, run only in device time no
     * online request needs, never aged, no deadline (batcher/queue.h). */
    bool offline;
    /* Called exactly once, from whichever thread finishes the item. */
    void (*complete)(struct infer_item *it);
};

struct batch {
    struct infer_item *head;          /* the batch's requests, linked by next */
    int nitems;
    int rows;
    int row_budget;                   /* what the policy filled it up to (see policy.h) */
    int64_t device_ns;                /* set by backends that time the batch on the device */
    float *in;                        /* rows x input.row_elems, gathered */
    float *out;                       /* rows x output.row_elems */
};

struct model;
struct batch_source;
struct httpc_target;

struct instance {
    struct model *model;
    int index;
    int device;                       /* device index for accelerators, else -1 */
    void *state;                      /* the backend's, per instance */
    size_t memory_bytes;              /* held by this instance (buffers, device weights) */
    pthread_t thread;
    bool running;
    float *in, *out;                  /* gather/scatter buffers, max_batch_size rows; an
                                       * instance_load may swap in its own (pinned memory)
                                       * and then frees them in instance_unload */
    /* The watchdog's view of the batch running now (under model->wd_mu). */
    struct infer_item *wd_items;      /* NULL: not running a batch */
    int64_t wd_deadline, wd_started;
    bool wd_abandoned;                /* the watchdog answered its requests */
    int nwarm;                        /* warmup batches: the first latency samples */
    int warm_rows[2 * (MODEL_MAX_PREFERRED + 2)];
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

struct backend_ops {
    const char *name;
    enum backend_device_kind device_kind;
    /* Loads what the instances share (weights); times read and prepare. */
    int (*model_load)(struct model *m, struct cold_start *cs, struct error *err);
    void (*model_unload)(struct model *m);
    /* Per-instance state (scratch buffers, streams). */
    int (*instance_load)(struct instance *in, struct error *err);
    /* Computes b->out from b->in for b->rows rows. */
    int (*run)(struct instance *in, struct batch *b, struct error *err);
    void (*instance_unload)(struct instance *in);
    /* Optional: a backend that runs its own event loop instead of one
     * worker thread per instance (upstream). start is given the batch source;
     * stop returns once the loop is gone (the source is closed first). */
    int (*start)(struct model *m, struct batch_source src, struct error *err);
    void (*stop)(struct model *m);
};

struct model {
    struct model_config cfg;
    const struct backend_ops *ops;
    void *shared;                     /* the backend's shared state (weights) */
    size_t shared_bytes;
    struct instance *instances;
    int ninstances;
    bool ready;
    char reason[600];                 /* why not ready */
    struct cold_start cold;
    /* The servers the model's batches go to (upstream backend): their busy
     * time, failures and health are reported per server. */
    struct httpc_target **targets;
    int ntargets;
    /* Fault injection (tests): mode, batches left, milliseconds. */
    _Atomic int fault_mode, fault_count, fault_ms;
    /* The batch watchdog (batching.batch_timeout_ms): one thread per model. */
    pthread_mutex_t wd_mu;
    pthread_cond_t wd_cv;
    pthread_t wd_thread;
    bool wd_running, wd_stop;
    bool wd_stranded;                 /* a worker never came back: keep its memory */
};

/* Picks the backend ("auto": cuda when built and a device is usable, else
 * cpu), loads the model and its instances and runs the warmup batches.
 * On failure the model stays, not ready, with the reason. */
int model_load(struct model *m, struct error *err);
void model_unload(struct model *m);
size_t model_memory_bytes(const struct model *m);

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

/* The backends built into this binary; NULL when `b` has none. */
const struct backend_ops *backend_find(enum model_backend b, char *why, size_t cap);
extern const struct backend_ops backend_cpu;
extern const struct backend_ops backend_cuda;
extern const struct backend_ops backend_synthetic;
extern const struct backend_ops backend_upstream;

/* Where a worker gets its batches: the model's batcher, or a test double. */
struct batch_source {
    /* Blocks until a batch is ready for this instance; fills
     * b->head/nitems/rows. Returns 0, or -1 when the source is closed and
     * the worker must exit. */
    int (*next)(void *ctx, int instance, struct batch *b);
    /* The batch ran for exec_ns (feeds the instance's latency model). */
    /* `offline_rows` of the rows were job lines (infer_item.offline): the
     * device time splits between the classes by rows. */
    void (*done)(void *ctx, int instance, int rows, int offline_rows, int64_t exec_ns);
    /* For backends with their own event loop (upstream): never blocks;
     * 1 and a batch, 0 and when to ask again (*wake_ns), -1 closed. */
    int (*try_next)(void *ctx, int instance, struct batch *b, int64_t *wake_ns);
    /* Rings waker(arg) from the submitting thread whenever a request arrives. */
    void (*set_waker)(void *ctx, void (*waker)(void *arg), void *arg);
    /* Optional, for compute backends (worker.c): the device scheduler's
     * hooks (docs/SCHEDULING.md), kept as plain callbacks so backends/
     * needs nothing of batcher/. acquire blocks until the instance's
     * device has a slot for batch b; release gives the slot back after
     * exec_ns of device time. When the worker already holds its next
     * batch (`next`, taken with try_next), release hands the slot back
     * and asks for one for `next` in one step. NULL: the instance runs
     * on its own, as it always did. */
    void (*acquire)(void *ctx, int instance, const struct batch *b);
    void (*release)(void *ctx, int instance, int64_t exec_ns, const struct batch *next);
    void *ctx;
};

void model_fault_set(struct model *m, enum model_fault mode, int count, int ms);

/* Starts one worker thread per instance (and the batch watchdog). */
int model_workers_start(struct model *m, struct batch_source src, struct error *err);
/* Joins them (the source must be closed first). */
void model_workers_join(struct model *m);

/* Hands every item of a finished batch back (item->complete), once the
 * batch's statistics are recorded (worker.c; upstream.c ends its batches
 * the same way). */
void worker_complete_batch(struct batch *b);
/* Rows of a batch that are offline (job lines). */
int batch_offline_rows(const struct batch *b);

#endif

/* lifecycle.h - models loaded, reloaded and unloaded while serving
 * (SPEC.md "Models: load, unload, memory", docs/MODELS.md "Lifecycle").
 *
 * One thread per serving table does every load and unload, in the order
 * asked, so two loads never race for a device's memory budget and no IO
 * thread ever waits on a disk or a device. It:
 *   - loads a model on request (the repository API, a request for a lazy
 *     or unloaded model, a job), and reloads a loaded one: the new copy
 *     serves once ready, the old one drains (what it was given is answered)
 *     and is freed when its last holder lets go;
 *   - unloads on request, after `lifecycle.idle_unload_s` without a
 *     request, and to make room: before a load would take a device past its
 *     `memory_budget_bytes`, the least recently used idle models there are
 *     unloaded (never one with a request or job in hand); a model that
 *     cannot fit even alone is refused with the numbers;
 *   - answers everyone waiting on a load when it ends, with the reason when
 *     it failed (the model is then UNAVAILABLE with it in the index). */
#ifndef BG_LIFECYCLE_H
#define BG_LIFECYCLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct serving;
struct served_model;

/* `devices.<name>` of the configuration. */
#define SERVING_MAX_DEVICE_CONFIGS 32
struct serving_device_config {
    char name[48];                    /* a device label: "cpu0", "cuda1", ... */
    size_t memory_budget_bytes;       /* 0: no bound */
    double price_per_hour;            /* the usage ledger's */
    bool keep_context;                /* release_context false: keep the device's context */
};

enum served_unload_reason {
    SERVED_UNLOAD_API,                /* POST .../unload */
    SERVED_UNLOAD_IDLE,               /* lifecycle.idle_unload_s */
    SERVED_UNLOAD_EVICTED,            /* room for another model under the budget */
    SERVED_UNLOAD_RELOAD,             /* a new copy took its place */
    SERVED_UNLOAD_REMOVED,            /* its folder left the repository (repository_poll_s) */
    SERVED_UNLOAD_REASONS
};
extern const char *const served_unload_reason_names[SERVED_UNLOAD_REASONS];

/* Before serving_start. */
void serving_set_devices(struct serving *s, const struct serving_device_config *d, int n);
/* devices.<dev>.price_per_hour, 0 when not configured. */
double serving_device_price(const struct serving *s, const char *dev);
/* repository_poll_s: every that many seconds the repository is scanned:
 * new model folders are added (eager ones loaded), changed ones (config,
 * the served version's weights, a new version) reloaded, removed ones
 * unloaded. 0: never. Before serving_start. */
void serving_set_poll(struct serving *s, int seconds);
/* How long a model that left the repository keeps its series in /metrics
 * (serving_shown_at); set before serving_start. */
void serving_set_removed_keep(struct serving *s, int seconds);

/* fn(arg) is called on the lifecycle thread after each load that made a
 * copy READY, whichever path asked for it (a request, the repository API,
 * a poll, a job): the jobs runner tries a job waiting for a broken model
 * then, not at its next look. One listener; before serving_start. */
void serving_on_loaded(struct serving *s, void (*fn)(void *arg), void *arg);

/* A load or unload ended: rc 0, or a BG_E* code with msg (-BG_EQUEUEFULL:
 * no room on its device right now, worth a retry). After a load that
 * succeeded, sm is the new copy with a reference taken for the callee
 * (served_release it): a request that waited is served by the copy it
 * waited for, even if the next load evicts it from the table meanwhile.
 * Called on the lifecycle thread: hand the answer to an IO thread. */
typedef void (*lifecycle_done_fn)(void *arg, int rc, const char *msg, struct served_model *sm);

/* Loads model `name` (reloads it when loaded) from its folder, or from
 * `override` (a config.json, the one used until the next load without
 * one). done (may be NULL) is called when it ended. -BG_ENOTFOUND: no such
 * model. */
int serving_load(struct serving *s, const char *name, size_t len, const char *override,
                 size_t olen, lifecycle_done_fn done, void *arg, struct error *err);
/* Unloads it once what was given to it is answered. -BG_ENOTFOUND: no such
 * model; -BG_ENOTREADY: it is not loaded. */
int serving_unload(struct serving *s, const char *name, size_t len, struct error *err);

/* A request found sm not READY. When its model is unloaded (or loading)
 * and the expected load time fits before deadline_ns (0: none), it waits:
 * returns 0 and done is called when the load ended. Otherwise returns
 * -BG_ENOTREADY with the reason and, when a load will make it ready,
 * *retry_after_ns its estimate (a load is started all the same). A model
 * whose last load failed is not loaded again by requests (it waits for
 * the repository API). */
int serving_wait_loaded(struct serving *s, struct served_model *sm, int64_t deadline_ns,
                        lifecycle_done_fn done, void *arg, int64_t *retry_after_ns,
                        struct error *err);
/* The jobs thread's: the model's READY copy (a reference) of `version`
 * (0: the one its name reaches), loading it first and waiting for that load
 * to end when it is not. NULL with the reason otherwise. */
struct served_model *serving_acquire_loaded(struct serving *s, const char *name, size_t len,
                                            int version, struct error *err);
/* The same without waiting: the READY copy (a reference); or NULL with
 * *loading when a load is under way or queued for it, done(arg, ...) called
 * (on the lifecycle thread) when it ends: ask again then (a copy done hands
 * over is the callee's to release); or NULL with the reason: BG_ENOTFOUND
 * for a model unknown or gone from the repository, BG_ENOTREADY for one
 * there that is not served now (its load failed). */
struct served_model *serving_acquire_or_wait(struct serving *s, const char *name, size_t len,
                                             int version, lifecycle_done_fn done, void *arg,
                                             bool *loading, struct error *err);

/* Triton's repository index: one row per model. */
struct served_index_row {
    char name[128];
    int version;                      /* the one it serves (or would) */
    const char *state;                /* READY, LOADING, UNLOADING, UNAVAILABLE */
    bool failed;                      /* UNAVAILABLE because its load failed: requests do
                                       * not load it again (the repository API does) */
    char reason[1024];
};
/* The rows into *out (the caller frees it); how many, or -1 out of memory. */
int serving_index(struct serving *s, struct served_index_row **out);

/* A model's lifecycle counters. */
struct served_lifecycle_stats {
    uint64_t loads_ok, loads_failed;
    uint64_t unloads[SERVED_UNLOAD_REASONS];
};
void served_lifecycle_stats(const struct served_model *sm, struct served_lifecycle_stats *out);

/* Each configured or used device: what resident models hold, its budget. */
struct served_memory_row {
    char device[48];
    size_t resident_bytes, budget_bytes;
};
int serving_memory_rows(struct serving *s, struct served_memory_row **out);

/* The lifecycle thread: started by serving_start, stopped (tasks still
 * queued answered -BG_ESHUTDOWN) by serving_stop. A copy's last holder
 * letting go wakes it (served_release). lifecycle_stop waits for it until
 * deadline_ns (now_ns's clock; 0: for as long as it takes): false when it
 * is still in a load then (a file that never finishes reading), its
 * waiters answered -BG_ESHUTDOWN meanwhile; call it again to wait more. */
int lifecycle_start(struct serving *s, struct error *err);
bool lifecycle_stop(struct serving *s, int64_t deadline_ns);

#endif

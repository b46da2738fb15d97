/* serving.h - the models this process serves: the repository scanned at
 * start, each model loaded on its backend, paired with its batcher, placed
 * on its devices' schedulers, and run by its instance workers (worker.h)
 * or, on a loop backend, through its feed (feed.h).
 *
 * A model (an entry of the table, by name) is served by one copy at a time
 * (struct served_model): a loaded copy (READY), or a shell that has the
 * configuration only (LOADING, FAILED, UNLOADED: metadata still answers).
 * Loads, reloads and unloads (serving/lifecycle.c) build a new copy and
 * swap it in; the old one drains: it finishes what was given to it and is
 * freed when the last holder lets go. Whoever uses a copy holds a
 * reference (serving_acquire .. served_release): a request from lookup to
 * its answer, a job for its run, a reader for one scrape. The table only
 * grows (entries are never moved or freed before serving_free), so lookups
 * take one entry lock, never a table lock. */
#ifndef BG_SERVING_H
#define BG_SERVING_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "batcher/work.h"
#include "batcher/batcher.h"
#include "serving/devsched.h"
#include "serving/shares.h"
#include "serving/tenant.h"
#include "common/error.h"
#include "common/httpc.h"
#include "serving/llmpool.h"
#include "serving/modelstats.h"
#include "serving/tenant.h"


/* A copy's state. A shell: LOADING (its model's load runs), FAILED (the
 * last load failed: model.reason), UNLOADED (not loaded: lazy, unloaded,
 * evicted, idle: model.reason says which). READY: loaded and serving. */
enum served_state { SERVED_LOADING, SERVED_READY, SERVED_FAILED, SERVED_UNLOADED };

/* A model's place on a scheduled device (batcher/devsched.h). */
struct served_sched {
    struct devsched *dev;             /* owned by the serving table */
    int member;                       /* the model's index there */
    int device_id;                    /* instances with this device id use it */
    struct shares *shares;            /* the device's tenant shares; NULL without tenants */
};

struct served_model {
    struct model model;
    struct batcher *batcher;
    /* The devices it shares by weight (docs/SCHEDULING.md); written by the
     * loader before the workers start, read-only after. */
    struct served_sched sched[MODEL_MAX_DEVICES];
    int nsched;
    /* Tenant shares (serving/shares.h) of the instances on no shared
     * device, and of a loop backend's batches: the model is their device.
     * NULL without tenants. */
    struct shares *own_shares;
    const struct tenants_config *tenants;   /* the serving table's (serving_set_tenants) */
    struct workers *workers;          /* compute backends */
    struct feed *feed;                /* loop backends */
    struct llmpool *pool;             /* LLM pools (model_is_pool): their endpoints, the picker */
    _Atomic int state;               /* enum served_state; model.reason is set before FAILED */
    struct modelstats *stats;        /* the entry's (shared by its copies) */
    int holds_stats;                 /* the instances it holds in stats (modelstats_loaded)
                                      * until stopped; 0: none */
    struct served_entry *entry;      /* the model it is a copy of */
    int version;                     /* the version it serves (1 for an unversioned folder) */
    _Atomic int refs;                /* holders; the table holds one while it is current */
    struct served_model *next;       /* the lifecycle's list of draining copies */
};

struct served_entry;

struct serving;

/* Scans `dir` (one folder per model with a config.json). A folder whose
 * config is invalid becomes a FAILED model with the reason; only an
 * unreadable repository is an error. `required`: a missing directory is an
 * error (it was asked for explicitly) rather than an empty repository. */
int serving_open(const char *dir, bool required, int io_threads, struct serving **out,
                 struct error *err);
/* The tenants whose shares the devices keep (serving/shares.h); before
 * serving_start. Without it, or with the default tenant alone, nothing
 * is ranked by tenant. The table must outlive the serving table. */
void serving_set_tenants(struct serving *s, const struct tenants_config *t);
/* Puts shares in force on every device (a time window's; NULL: the
 * tenants' own), and offline_share: the governor's apply function. */
void serving_apply_shares(struct serving *s, const double *share, double offline_share);
/* The table set there, or NULL. */
const struct tenants_config *serving_tenants(const struct serving *s);
/* The shares in force now, share[0 .. tenants n - 1]: a time window's, or
 * the tenants' own. */
void serving_shares_in_force(struct serving *s, double *share);
/* Each tenant's account on each device, as /metrics and the dashboard
 * show it: the shares of every model on a device with that label summed
 * (models on no shared device keep their own). */
struct served_tenant_row {
    char device[48];
    int tenant;                       /* index in serving_tenants */
    struct shares_tenant_stats st;
};
/* The rows into *out (the caller frees it); how many (0 without tenants). */
int serving_tenant_rows(struct serving *s, struct served_tenant_row **out);
/* Where backends keep prepared weights between loads of a model (the cpu
 * backend's packed layers: backends/packcache.h); NULL or "": nowhere.
 * Before serving_start. */
void serving_set_cache_dir(struct serving *s, const char *dir);
/* Starts the lifecycle thread (serving/lifecycle.h), which loads every
 * eager model first (cold start timed and logged) and starts its workers;
 * requests for one meanwhile wait on its load. The caller takes signals
 * meanwhile (a stop during a long start is not deferred to its end) and
 * polls serving_started. An error when the thread cannot start: the loads
 * ran on the calling thread then, and nothing loads or unloads after. */
int serving_start(struct serving *s, struct error *err);
/* Whether the start's eager loads are over (or were given up: serving_stop). */
bool serving_started(const struct serving *s);
/* A stop began (the drain): the start's eager loads not begun are given
 * up and their waiters answered 503, and a request for a model not loaded
 * is 503 rather than a wait on a load; a load under way ends as it would,
 * answering its waiters, within the drain's time (serving_stop). */
void serving_begin_stop(struct serving *s);
/* Models in the table (it only grows). */
int serving_count(const struct serving *s);
/* The current copy of model i, or of the model named (NULL: none), with a
 * reference the caller gives back with served_release. */
struct served_model *serving_acquire_at(struct serving *s, int i);
struct served_model *serving_acquire(struct serving *s, const char *name, size_t len);
void served_release(struct served_model *sm);
/* Whether the model of that name is an LLM pool (loaded or not). */
bool serving_is_pool(struct serving *s, const char *name);
/* The copy of the model's given version (a model serving several has an
 * entry per version), with a reference; NULL: it serves no such version. */
struct served_model *serving_acquire_version(struct serving *s, const char *name, size_t len,
                                             int version);
/* The versions the model serves or would (not retired), into out. */
int serving_versions(struct serving *s, const char *name, size_t len, int *out, int max);
/* The version sm's entry is pinned to when its model serves several side
 * by side (metrics then label it); 0 otherwise. */
int served_pinned_version(const struct served_model *sm);
/* Whether the model at i has its per-model series in /metrics: it is in
 * the repository, or left it (its folder removed, or a version its policy
 * retired) less than removed_metrics_keep_s ago, so that scrapes see its
 * last values and its unload. Shown for ever, every version ever deployed
 * stayed in /metrics (132 series each). */
bool serving_shown_at(struct serving *s, int i);
/* Whether the model at i is in the repository now (its folder there, its
 * version one the policy serves). */
bool serving_listed_at(struct serving *s, int i);
/* model_capacity_rows_per_second: the rows per second the copy's instances
 * (a loop backend's slots) can serve at full batches within the latency
 * budget: each at B / exec(B), B the largest batch (at most
 * max_batch_size) whose execution by its fitted latency model, with the
 * margin, fits batching.latency_budget_ms (no budget: max_batch_size).
 * 0 while not READY or before any batch was measured. */
double served_capacity_rows_per_s(struct served_model *sm);
/* The model's index in the table (tenant statistics are kept by it). */
int served_index(const struct served_model *sm);
/* A request was given to the copy now (idle unload and eviction count from
 * the last one). */
void served_touch(struct served_model *sm);
/* Every model that should be loaded is: eager ones not unloaded on request,
 * not removed, not failed, loaded at least once (one unloaded by policy
 * since, idle or evicted, loads on demand). When not, the first that is
 * not is named in who (cap bytes; NULL: none wanted). */
bool serving_all_ready(struct serving *s, char *who, size_t cap);
/* One device row, as /metrics, /v2/models/{m}/stats and the dashboard
 * show it: a model instance, or a server behind an upstream model. Busy
 * time is time with a batch executing on the instance, or with at least one
 * call in flight to the server; utilization is per instance or per server
 * (busywin.h), so it stays within 1. */
struct served_device {
    struct model_device dev;          /* kind, `device` label, instance or server */
    const char *url;                  /* the server's (while loaded); NULL for an instance */
    double busy_s, idle_s;            /* idle: held and not busy */
    double busy_offline_s;            /* of busy_s, job lines' share (rows); 0 for a server */
    double held_s;                    /* since the instance loaded, the server was set up */
    double util_10s;                  /* busy fraction of the last 10 whole seconds */
    uint64_t batches, rows;           /* the instance's; 0 for a server */
    size_t memory_bytes;              /* the instance's weights and buffers; 0 for a server */
    double lat_a_s, lat_b_s, lat_margin_s;   /* its latency model (a server: the model's) */
    struct httpc_target_stats server; /* a server's calls, health, failures; zero otherwise */
};
typedef void (*served_device_fn)(const struct served_device *d, void *arg);
/* Calls fn for each device of a READY model, from `snap` (the model's
 * modelstats snapshot, the caller's) and the servers' own accounts; for a
 * model not loaded now, for each instance of the last copy that loaded,
 * where it ran (its counters go on; no memory, no latency model; a
 * server's rows go with it). The one place device rows are built. */
void serving_model_devices(struct served_model *sm, const struct modelstats_snapshot *snap,
                           served_device_fn fn, void *arg);
/* The device instance `instance` of the model last ran on, in any copy
 * (one a reload to fewer instances took away included), into out; false
 * when no copy had it. */
bool serving_instance_device(struct served_model *sm, int instance, char *out, size_t cap);
/* Stops the lifecycle thread (eager loads not begun are given up), the
 * batchers (queued requests fail with 503) and joins the workers. A load
 * under way is waited for until deadline_ns (now_ns's clock; 0: as long as
 * it takes): false when it goes on past it, and then serving_free must not
 * be called (the process exits instead). Again after false: waits more. */
bool serving_stop(struct serving *s, int64_t deadline_ns);
void serving_free(struct serving *s);

#endif

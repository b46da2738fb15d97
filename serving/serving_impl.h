/* serving_impl.h - the serving table's insides, shared by serving.c (the
 * table, copies, lookups) and lifecycle.c (loads, unloads, the memory
 * budget, draining). Nothing outside serving/ includes it. */
#ifndef BG_SERVING_IMPL_H
#define BG_SERVING_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "serving/lifecycle.h"
#include "serving/serving.h"

/* The table's capacity: entries are never moved (lookups run without a
 * table lock), so the array of pointers is allocated once. */
#define SERVING_MAX_MODELS 4096

/* A request waiting for a load (serving_wait_loaded). */
struct served_waiter {
    struct served_waiter *next;
    lifecycle_done_fn done;
    void *arg;
};

/* What a poll compares (lifecycle.c): config.json and the served version's
 * weights (inode, size, mtime; -1 when missing), and that version. */
struct served_sig {
    int64_t config[4], weights[4];    /* inode, size, mtime, permission bits */
    int version;
};

struct served_entry {
    struct serving *serving;
    int index;
    char name[MODEL_NAME_MAX];
    char dir[4096];
    pthread_mutex_t mu;               /* cur, the fields below up to `stats` */
    struct served_model *cur;         /* never NULL once the entry is published */
    int draining;                     /* swapped-out READY copies not freed yet */
    /* Loads queued or running: a request's wait joins them (the first to
     * end answers it). A count: an override load queued behind a plain one
     * was forgotten when the plain one ended, and a request then queued a
     * third load, which replaced the override's copy. */
    int loads_pending;
    bool unload_asked;                /* unloaded on request: not "wanted" until loaded again */
    char error[1024];                 /* the last failed reload's reason while an older copy serves */
    struct served_waiter *waiters;    /* requests waiting for the queued load */
    struct modelstats *stats;         /* shared by its copies; replaced with new sizes only */
    /* Where the instances of the last copy that loaded ran: the device
     * rows while no copy is loaded, since their counters go on. */
    struct model_device *seen;
    int nseen;
    /* Where each instance index last ran, in any copy (under mu): a copy
     * with fewer instances leaves the others where they were, for the
     * ledger to charge their last work there (serving_instance_device). */
    char (*placed)[48];
    int nplaced;
    /* The tenants' device time of its copies freed since the start, where
     * a copy kept its own accounts (shares.h; on a device no scheduler
     * shares): tenant_device_seconds_total goes on from them. */
    bool has_gone;
    char gone_device[48];
    struct shares_tenant_stats gone[TENANTS_MAX];
    /* The lifecycle thread's alone. */
    struct served_sig sig;            /* the files as the last load (attempt) saw them */
    struct served_sig loaded_sig;     /* ... as the last successful load saw them */
    /* Instance 0's warmup timings of the last full warmup: a load of the
     * same files again warms with one batch and seeds these instead. */
    int warm_n;
    int warm_rows[2 * (MODEL_MAX_PREFERRED + 2)];
    int64_t warm_tokens[2 * (MODEL_MAX_PREFERRED + 2)];
    int64_t warm_tokens_sq[2 * (MODEL_MAX_PREFERRED + 2)];
    int64_t warm_ns[2 * (MODEL_MAX_PREFERRED + 2)];
    bool removed;                     /* its folder left the repository */
    /* When it left the repository (removed, or retired: the lifecycle
     * thread sets it; metrics read it); 0 while it is in it. */
    _Atomic int64_t unlisted_ns;
    bool keep_pending;                /* a load to model_keep once it serves */
    int pinned;                       /* the one version it serves; 0: its policy's one */
    /* Under mu. A version its policy no longer selects that serves on in
     * place of a selected one not ready (standing_in), and a selected one
     * not ready that another serves for (covered: not a readiness fault). */
    bool standing_in, covered;
    char *override;                   /* the repository API's config.json for its loads;
                                         NULL: the folder's (the lifecycle thread's) */
    /* Under mu: loads queued with a config.json of the repository API's,
     * and whether `override` is set. A load without one must not join a
     * load that will read one (it reads the folder's again). */
    int override_pending;
    bool override_kept;
    bool retired;                     /* pinned to a version its policy no longer serves
                                       * (written by the lifecycle thread under mu) */
    /* Read without the lock. */
    _Atomic int64_t last_used_ns;     /* the last request given to a copy */
    _Atomic int64_t cold_ns;          /* the last load's cold start; 0: none yet */
    _Atomic size_t bytes;             /* the last loaded copy's resident bytes; 0: none yet */
    _Atomic uint64_t loads[2];        /* ok, failed */
    _Atomic uint64_t unloads[SERVED_UNLOAD_REASONS];
};

/* One queued lifecycle task. */
struct lifecycle_task {
    struct lifecycle_task *next;
    enum { TASK_LOAD, TASK_UNLOAD, TASK_ADD, TASK_START } kind;   /* TASK_START: the
                                         start's eager loads (serving_start) */
    struct served_entry *e;           /* TASK_ADD: none yet, the folder's `name` */
    char name[MODEL_NAME_MAX];
    enum served_unload_reason reason;
    char *override;                   /* a config.json for this load; NULL: the file's */
    lifecycle_done_fn done;           /* NULL: none */
    void *arg;
    bool for_request;                 /* TASK_LOAD asked by a request finding it not
                                         loaded: nothing to do if another load did */
};

struct serving {
    char dir[4096];
    int io_threads;
    /* What "auto" picks for a model (index 0) and an encoder (1), asked
     * once at the start: the shells of models not loaded report it. */
    const char *auto_pick[2];
    struct served_entry **entries;    /* SERVING_MAX_MODELS slots */
    _Atomic int n;
    /* One scheduler per device models are placed on (docs/SCHEDULING.md);
     * built by the loader, freed with the table. */
    struct devsched **devs;
    struct shares **dev_shares;       /* the tenant shares of devs[i]; NULL without tenants */
    int ndevs;
    const struct tenants_config *tenants;   /* NULL, or the caller's (serving_set_tenants) */
    /* The shares in force (serving_apply_shares), for shares made after:
     * a device's first model may load after the governor applied a window. */
    pthread_mutex_t shares_mu;
    bool applied;
    double applied_share[TENANTS_MAX], applied_offline;
    /* The lifecycle (lifecycle.c): its thread, tasks, draining copies. */
    struct serving_device_config devcfg[SERVING_MAX_DEVICE_CONFIGS];
    int ndevcfg;
    pthread_mutex_t lc_mu;            /* tasks, drain, stop */
    pthread_cond_t lc_cv;
    struct lifecycle_task *tasks, **tasks_tail;
    struct served_model *drain;       /* swapped-out copies, freed at refs 0 */
    /* Copies served_copy_free could not free (a worker stranded in an
     * abandoned call): their memory stays held, and counts on their
     * devices (the budget, device_resident_bytes), which are not released
     * under them. Under lc_mu. */
    struct served_model *stranded;
    /* The copy lifecycle_load_now is loading, not in the table yet, and
     * the device it is budgeted on (the lifecycle thread's): in use, not
     * released when the room made for it frees the last other copy there
     * (released, a CUDA device was reset under the new copy, or just
     * before it set up there again). */
    struct served_model *loading;
    const char (*loading_devs)[48];
    int loading_ndevs;
    bool lc_started, lc_stop;
    pthread_t lc_thread;
    int start_n;                      /* entries when the start's loads were queued */
    _Atomic bool started;             /* the start's eager loads are over */
    _Atomic bool stopping;            /* serving_begin_stop */
    _Atomic int start_loading;        /* the start's load under way: its index; -1 none */
    int poll_s;                       /* repository_poll_s; 0: no polling */
    bool repo_unreadable;             /* the last poll could not open the folder */
    int64_t removed_keep_ns;          /* removed_metrics_keep_s (serving_shown_at) */
    /* Folders skipped for their name, said once each (the start's scan,
     * then the lifecycle thread's polls: never at once): their names'
     * hashes. A ring of 16 names said 17 bad folders again at every poll. */
#define SERVING_BAD_FOLDERS 1024
    uint64_t bad_folders[SERVING_BAD_FOLDERS];
    int nbad_folders;
    char cache_dir[4096];             /* packed weights between loads; "": none */
    _Atomic double read_bps;          /* measured model read rate; 0: none yet */
    void (*on_loaded)(void *arg);     /* serving_on_loaded's listener, or NULL */
    void *on_loaded_arg;
};

/* lifecycle.c for serving.c: loads e now on the calling thread (at
 * start, before the lifecycle thread runs). */
int lifecycle_load_now(struct serving *s, struct served_entry *e, const char *override,
                       struct error *err);

/* serving.c for lifecycle.c */

/* A new entry for the folder `name`, published; pinned: the one version
 * it serves (0: as its version_policy says, one version). */
int served_entry_add(struct serving *s, const char *name, int pinned, struct error *err);
/* A model folder: one entry, or one per version its policy serves. */
int serving_add_model(struct serving *s, const char *name, struct error *err);
/* Whether cfg's version_policy serves several versions side by side. */
bool served_policy_multi(const struct model_config *cfg);
/* The versions cfg's policy serves from dir (highest first for latest;
 * specific ones as listed, missing or not); how many. */
int served_versions_selected(const char *dir, const struct model_config *cfg, int *out);
/* The model's configuration, from its folder or `override` (a config.json),
 * its version (0: unversioned) and cfg->dir where its weights are. */
int served_config_read(const struct served_entry *e, const char *override,
                       struct model_config *cfg, int *version, struct error *err);
void served_sig_read(const struct served_entry *e, const struct model_config *cfg, int version,
                     struct served_sig *sig);
/* 0, or -BG_ECONFIG when a name cfg answers to (its own, a pool's
 * aliases) is one another model answers to: requests would reach one or
 * the other by load order. */
int served_names_check(struct serving *s, const struct served_entry *e,
                       const struct model_config *cfg, struct error *err);

/* A shell copy of e (no model loaded) in `state` with the reason. */
struct served_model *served_shell_new(struct serving *s, struct served_entry *e,
                                      const struct model_config *cfg, int state,
                                      const char *reason);
/* Loads a copy whose model.cfg is set: 0, or -1 with model.reason. */
int served_copy_load(struct serving *s, struct served_model *sm);
/* Stops what served_copy_load started: the batcher (what is still queued
 * is answered 503), then the workers or the feed. */
void served_copy_stop(struct served_model *sm);
/* Stops and frees a copy nobody holds (a shell too). false: a worker of
 * it is still inside an abandoned backend call (watchdog.h), which may
 * touch the copy when it returns: it is not freed, and what it holds is
 * held until the process exits. */
bool served_copy_free(struct served_model *sm);
/* A folder of the repository whose name is no model name: said in the
 * log (its bytes shown safely), never served. */
void serving_warn_bad_folder(struct serving *s, const char *name);
/* Whether a model folder's config.json (path) is there: 1, readable or
 * not (a symlink that loops or leads nowhere is there: the model is listed
 * as failed with the reason, not passed by without a word); 0 not there;
 * -1 cannot be told (an I/O error, a folder that cannot be searched). */
int served_config_there(const char *path);
/* Whether a folder's name is said for the first time (a warning about
 * it, from the start's scan or a poll, is then written; each poll sees it
 * again). */
bool serving_folder_first_said(struct serving *s, const char *name);
/* A ready copy just made its entry's current: its own tenant shares (a
 * loop backend's) take the time window in force now. */
void served_shares_refresh(struct serving *s, struct served_model *sm);
/* Bytes a loaded copy holds on the device labelled `dev`. */
size_t served_copy_bytes_on(const struct served_model *sm, const char *dev);
/* A load's own config for e, one of the versions of a model serving
 * several side by side: 0 when its version_policy keeps e's version
 * served; else the refusal (its version_policy was ignored, the load 200:
 * which versions are served side by side follows config.json). */
int served_policy_keeps(const struct served_entry *e, const struct model_config *cfg,
                        struct error *err);
/* The labels of the devices a model's instances will use ("cpu0",
 * "cuda1", ...; each once, its first instance's first: where its weights
 * count before it is loaded); how many (at most max). */
int served_config_devices(const struct serving *s, const struct model_config *cfg,
                          char (*out)[48], int max);

#endif

/* lifecycle.c - see lifecycle.h. */
#include "serving/lifecycle.h"
#include "serving/serving_impl.h"

#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"

const char *const served_unload_reason_names[SERVED_UNLOAD_REASONS] = {
    "api", "idle", "evicted", "reload", "removed",
};

/* Until a load has measured one (bytes of weights file per second of a
 * whole load): a rate most loads beat, so the first estimate errs long (a
 * request then gets 503 with a Retry-After rather than a 504 after waiting
 * in vain). */
#define LIFECYCLE_DEFAULT_READ_BPS (200.0 * 1000 * 1000)
/* Besides reading: preparing, warming up, starting workers. */
#define LIFECYCLE_FIXED_NS (20 * 1000000LL)
#define LIFECYCLE_TICK_NS (100 * 1000000LL)

void serving_set_devices(struct serving *s, const struct serving_device_config *d, int n)
{
    if (n > SERVING_MAX_DEVICE_CONFIGS)
        n = SERVING_MAX_DEVICE_CONFIGS;
    memcpy(s->devcfg, d, (size_t)n * sizeof *d);
    s->ndevcfg = n;
}

double serving_device_price(const struct serving *s, const char *dev)
{
    for (int i = 0; i < s->ndevcfg; i++)
        if (strcmp(s->devcfg[i].name, dev) == 0)
            return s->devcfg[i].price_per_hour;
    return 0;
}

static size_t lc_budget(const struct serving *s, const char *dev)
{
    for (int i = 0; i < s->ndevcfg; i++)
        if (strcmp(s->devcfg[i].name, dev) == 0)
            return s->devcfg[i].memory_budget_bytes;
    return 0;
}

/* The next entry named name after entry index `after` (-1: the first). */
static struct served_entry *lc_find_next(struct serving *s, const char *name, size_t len,
                                         int after)
{
    int n = atomic_load(&s->n);
    for (int i = after + 1; i < n; i++)
        if (strlen(s->entries[i]->name) == len && memcmp(s->entries[i]->name, name, len) == 0)
            return s->entries[i];
    return NULL;
}

/* The first entry named name (a model serving several versions has more). */
static struct served_entry *lc_find(struct serving *s, const char *name, size_t len)
{
    return lc_find_next(s, name, len, -1);
}

/* The weights file's size in `dir` (a config's `dir`: the model's folder,
 * or its version's, where a versioned model's weights are; the model's
 * own folder holds none, and a model never loaded was estimated at 0
 * bytes and 20 ms): what a model never loaded is expected to hold. */
static size_t lc_file_bytes(const char *dir)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

static size_t lc_estimate_bytes(const struct served_entry *e, const char *dir)
{
    size_t b = atomic_load(&e->bytes);
    return b ? b : lc_file_bytes(dir);
}

/* The expected load time: the last cold start, else the file at the
 * measured read rate. Under e->mu (e->cur's configuration says where its
 * weights are). */
static int64_t lc_estimate_ns(struct serving *s, const struct served_entry *e)
{
    int64_t cold = atomic_load(&e->cold_ns);
    if (cold > 0)
        return cold;
    double bps = atomic_load(&s->read_bps);
    if (bps <= 0)
        bps = LIFECYCLE_DEFAULT_READ_BPS;
    return (int64_t)((double)lc_file_bytes(e->cur->model.cfg.dir) / bps * 1e9) +
           LIFECYCLE_FIXED_NS;
}

/* ---- the drain: swapped-out copies, freed when nobody holds them ---- */

/* Gives up the table's reference of a copy just swapped out. */
static void lc_retire(struct serving *s, struct served_model *old)
{
    pthread_mutex_lock(&s->lc_mu);
    old->next = s->drain;
    s->drain = old;
    pthread_mutex_unlock(&s->lc_mu);
    atomic_fetch_sub(&old->refs, 1);
}

static bool lc_keep_context(const struct serving *s, const char *dev)
{
    for (int i = 0; i < s->ndevcfg; i++)
        if (strcmp(s->devcfg[i].name, dev) == 0)
            return s->devcfg[i].keep_context;
    return false;
}

struct lc_labels {
    char name[MODEL_MAX_DEVICES][48];
    int n;
    const char *find;                 /* lc_label_add's: set found when seen */
    bool found;
};

static void lc_label_add(const struct model_device *d, void *arg)
{
    struct lc_labels *l = arg;
    if (l->find) {
        l->found |= strcmp(d->name, l->find) == 0;
        return;
    }
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->name[i], d->name) == 0)
            return;
    if (l->n < MODEL_MAX_DEVICES)
        snprintf(l->name[l->n++], sizeof l->name[0], "%s", d->name);
}

/* Whether a loaded copy (current or draining) has an instance on dev. */
static bool lc_device_in_use(struct serving *s, const char *dev)
{
    struct lc_labels l = {.find = dev};
    int n = atomic_load(&s->n);
    for (int i = 0; i < n && !l.found; i++) {
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        if (atomic_load(&e->cur->state) == SERVED_READY)
            model_devices(&e->cur->model, lc_label_add, &l);
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_lock(&s->lc_mu);
    for (struct served_model *d = s->drain; d && !l.found; d = d->next)
        if (atomic_load(&d->state) == SERVED_READY)
            model_devices(&d->model, lc_label_add, &l);
    for (struct served_model *d = s->stranded; d && !l.found; d = d->next)
        model_devices(&d->model, lc_label_add, &l);
    pthread_mutex_unlock(&s->lc_mu);
    /* The copy being loaded (serving_impl.h). */
    if (!l.found && s->loading)
        model_devices(&s->loading->model, lc_label_add, &l);
    for (int i = 0; i < s->loading_ndevs && !l.found; i++)
        l.found = strcmp(s->loading_devs[i], dev) == 0;
    return l.found;
}

/* A copy was freed from these devices: those left without a model give
 * back what their backend keeps there (the CUDA context), unless their
 * release_context is false. */
static void lc_release_devices(struct serving *s, const struct lc_labels *l)
{
    for (int i = 0; i < l->n; i++) {
        if (lc_keep_context(s, l->name[i]) || lc_device_in_use(s, l->name[i]))
            continue;
        log_debug("device %s: no model is left on it; what its backend keeps there is released",
                  l->name[i]);
        char msg[256] = "";
        if (backend_release_device(l->name[i], msg, sizeof msg) != 0)
            log_warn("device %s: no model is left on it, but releasing it failed: %s",
                     l->name[i], msg);
    }
}

/* Frees every draining copy nobody holds any more. */
static void lc_sweep(struct serving *s)
{
    for (;;) {
        struct served_model *done = NULL;
        pthread_mutex_lock(&s->lc_mu);
        for (struct served_model **p = &s->drain; *p; p = &(*p)->next)
            if (atomic_load(&(*p)->refs) == 0) {
                done = *p;
                *p = done->next;
                break;
            }
        pthread_mutex_unlock(&s->lc_mu);
        if (!done)
            return;
        struct served_entry *e = done->entry;
        bool was_ready = atomic_load(&done->state) == SERVED_READY;
        struct lc_labels labels = {.n = 0};
        if (was_ready) {
            log_info("model %s: a copy drained and was unloaded (%.1f MiB freed)", e->name,
                     (double)model_memory_bytes(&done->model) / (1 << 20));
            model_devices(&done->model, lc_label_add, &labels);
        }
        if (!served_copy_free(done)) {
            /* Freed, it left the drain and its memory was counted nowhere:
             * a budget let the next model load over it. Counted again
             * before it is said: between the line and the list, the
             * metrics read 0 (make test, under load). */
            double mib = (double)model_memory_bytes(&done->model) / (1 << 20);
            pthread_mutex_lock(&s->lc_mu);
            done->next = s->stranded;
            s->stranded = done;
            pthread_mutex_unlock(&s->lc_mu);
            log_warn("model %s: a copy's worker is still inside an abandoned batch: the copy "
                     "(%.1f MiB) stays until the process exits, counted on its devices",
                     e->name, mib);
        }
        /* Weights under glibc's mmap threshold (32 MiB once a large block
         * was freed) come from the heap, and free() keeps them there: the
         * process would still hold what the unload was for. */
        if (was_ready)
            malloc_trim(0);
        lc_release_devices(s, &labels);
        if (was_ready) {
            pthread_mutex_lock(&e->mu);
            e->draining--;
            pthread_mutex_unlock(&e->mu);
        }
    }
}

/* ---- unloading ---- */

/* Swaps a shell in for e's READY copy (under e->mu) and returns the old
 * one, which the caller retires once the lock is dropped; NULL when there
 * is none, or idle_only is set and someone besides the table holds it. */
static struct served_model *lc_unload_locked(struct serving *s, struct served_entry *e,
                                             enum served_unload_reason why, const char *reason,
                                             bool idle_only)
{
    struct served_model *cur = e->cur;
    if (atomic_load(&cur->state) != SERVED_READY)
        return NULL;
    if (idle_only && atomic_load(&cur->refs) != 1)
        return NULL;
    struct served_model *sh = served_shell_new(s, e, &cur->model.cfg, SERVED_UNLOADED, reason);
    if (!sh)
        return NULL;
    e->cur = sh;
    e->draining++;
    atomic_fetch_add(&e->unloads[why], 1);
    return cur;
}

static bool lc_unload(struct serving *s, struct served_entry *e, enum served_unload_reason why,
                      const char *reason, bool idle_only)
{
    pthread_mutex_lock(&e->mu);
    struct served_model *old = lc_unload_locked(s, e, why, reason, idle_only);
    pthread_mutex_unlock(&e->mu);
    if (!old)
        return false;
    log_info("model %s: unloading (%s)", e->name, reason);
    lc_retire(s, old);
    return true;
}

/* ---- the memory budget ---- */

/* What resident copies hold on dev: current ones and draining ones. Only
 * the lifecycle thread swaps and frees copies, so it reads e->cur without
 * a reference. */
static size_t lc_resident(struct serving *s, const char *dev)
{
    size_t sum = 0;
    int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        sum += served_copy_bytes_on(e->cur, dev);
        pthread_mutex_unlock(&e->mu);
    }
    pthread_mutex_lock(&s->lc_mu);
    for (struct served_model *d = s->drain; d; d = d->next)
        sum += served_copy_bytes_on(d, dev);
    for (struct served_model *d = s->stranded; d; d = d->next)
        sum += served_copy_bytes_on(d, dev);
    pthread_mutex_unlock(&s->lc_mu);
    return sum;
}

/* Unloads the least recently used idle models on dev (not `self`) until
 * `need` more bytes fit under its budget. 0, or -BG_ERESOURCE... with the
 * numbers. */
static int lc_make_room(struct serving *s, struct served_entry *self, const char *dev,
                        size_t need, size_t budget, struct error *err)
{
    if (need > budget)
        return error_set(err, BG_ENOTREADY,
                         "model %s needs about %zu bytes on %s, more than its memory_budget_bytes "
                         "(%zu): it cannot fit even alone", self->name, need, dev, budget);
    for (;;) {
        lc_sweep(s);
        size_t resident = lc_resident(s, dev);
        if (resident + need <= budget)
            return 0;
        struct served_entry *victim = NULL;
        int64_t oldest = INT64_MAX;
        int n = atomic_load(&s->n);
        for (int i = 0; i < n; i++) {
            struct served_entry *e = s->entries[i];
            if (e == self)
                continue;
            pthread_mutex_lock(&e->mu);
            bool idle = atomic_load(&e->cur->refs) == 1 && served_copy_bytes_on(e->cur, dev) > 0;
            pthread_mutex_unlock(&e->mu);
            int64_t used = atomic_load(&e->last_used_ns);
            if (idle && used < oldest) {
                oldest = used;
                victim = e;
            }
        }
        char why[320];
        snprintf(why, sizeof why, "evicted: room for %s on %s (memory_budget_bytes)", self->name,
                 dev);
        if (!victim || !lc_unload(s, victim, SERVED_UNLOAD_EVICTED, why, true)) {
            if (victim)
                continue;   /* it took a request meanwhile: look again */
            return error_set(err, BG_EQUEUEFULL,
                             "model %s needs about %zu bytes on %s: %zu of its memory_budget_bytes "
                             "(%zu) are held by models with requests in hand or still draining; "
                             "retry", self->name, need, dev, resident, budget);
        }
        lc_sweep(s);
    }
}

/* ---- loading ---- */

/* Swaps a shell in for e's current copy when that is not READY. */
static void lc_set_shell(struct serving *s, struct served_entry *e, const struct model_config *cfg,
                         int state, const char *reason)
{
    pthread_mutex_lock(&e->mu);
    struct served_model *cur = e->cur;
    struct served_model *sh = NULL;
    if (atomic_load(&cur->state) != SERVED_READY &&
        (sh = served_shell_new(s, e, cfg ? cfg : &cur->model.cfg, state, reason)))
        e->cur = sh;
    pthread_mutex_unlock(&e->mu);
    if (sh)
        lc_retire(s, cur);
}

static bool lc_sig_equal(const struct served_sig *a, const struct served_sig *b)
{
    return memcmp(a->config, b->config, sizeof a->config) == 0 &&
           memcmp(a->weights, b->weights, sizeof a->weights) == 0 && a->version == b->version;
}

int lifecycle_load_now(struct serving *s, struct served_entry *e, const char *override,
                       struct error *err)
{
    struct model_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return error_set(err, BG_ENOMEM, "out of memory");
    /* A load nobody gave a configuration (a request after an idle unload,
     * a poll's reload) keeps the one the repository API gave last: it was
     * lost, the model back on the folder's config.json unasked. */
    bool asked = override != NULL;
    if (!override)
        override = e->override;
    int version = 0;
    int rc = served_config_read(e, override, cfg, &version, err);
    if (rc == 0 && asked)
        rc = served_policy_keeps(e, cfg, err);
    bool cfg_ok = rc == 0;
    if (rc == 0 && (rc = served_names_check(s, e, cfg, err)) != 0)
        cfg->pool.naliases = 0;   /* its shell answers to its own name only */
    served_sig_read(e, cfg, version, &e->sig);   /* a failed load too: retried when they change */
    /* Every device its instances use is held to its budget once it is
     * loaded (the first alone was: a model on [0, 1] held cpu1 at ten
     * times its budget); before, the first, where its weights are
     * expected (what the others hold is known once measured: a CPU
     * model's instances share their weights). */
    char devs[MODEL_MAX_DEVICES][48];
    int ndevs = 0;
    if (rc == 0) {
        ndevs = served_config_devices(s, cfg, devs, MODEL_MAX_DEVICES);
        s->loading_devs = (const char(*)[48])devs;
        s->loading_ndevs = ndevs;
        size_t budget = ndevs ? lc_budget(s, devs[0]) : 0;
        if (budget)
            rc = lc_make_room(s, e, devs[0], lc_estimate_bytes(e, cfg->dir), budget, err);
    }
    struct served_model *sm = NULL;
    if (rc == 0) {
        lc_set_shell(s, e, cfg, SERVED_LOADING, "loading");
        sm = served_shell_new(s, e, cfg, SERVED_LOADING, "loading");
        if (sm) {
            sm->version = version ? version : 1;
            /* The same files loaded before: one warmup batch, and the last
             * full warmup's timings for the latency model. */
            sm->model.warm_light = !override && e->warm_n > 0 &&
                                   lc_sig_equal(&e->sig, &e->loaded_sig);
        }
        if (!sm) {
            rc = error_set(err, BG_ENOMEM, "out of memory");
        } else {
            /* The copy serving now goes on until the swap below (only this
             * thread swaps): its servers may go on into the new copy. */
            struct served_model *old = e->cur;
            sm->model.prev = atomic_load(&old->state) == SERVED_READY ? &old->model : NULL;
            s->loading = sm;
            int lrc = served_copy_load(s, sm);
            sm->model.prev = NULL;
            if (lrc != 0)
                rc = error_set(err, BG_EBACKEND, "%s", sm->model.reason);
        }
    }
    for (int d = 0; d < ndevs && rc == 0; d++) {
        /* Measured now: the estimate was the file's size. */
        size_t budget = lc_budget(s, devs[d]);
        size_t have = served_copy_bytes_on(sm, devs[d]);
        if (budget && (rc = lc_make_room(s, e, devs[d], have, budget, err)) != 0) {
            s->loading = NULL;
            s->loading_ndevs = 0;
            served_copy_free(sm);
            sm = NULL;
        }
    }
    s->loading = NULL;   /* in the table below, or freed */
    s->loading_ndevs = 0;
    if (rc != 0) {
        free(sm);   /* a shell (or NULL): nothing loaded in it */
        atomic_fetch_add(&e->loads[1], 1);
        pthread_mutex_lock(&e->mu);
        bool serving_old = atomic_load(&e->cur->state) == SERVED_READY;
        if (serving_old)
            snprintf(e->error, sizeof e->error, "the last load failed (the previous copy serves): "
                     "%s", err->msg);
        pthread_mutex_unlock(&e->mu);
        /* No room now is no fault of the model: the next request tries again. */
        if (!serving_old)
            lc_set_shell(s, e, cfg_ok ? cfg : NULL,
                         rc == -BG_EQUEUEFULL ? SERVED_UNLOADED : SERVED_FAILED, err->msg);
        if (serving_old)
            log_error("model %s: the new copy did not load (the previous copy serves on): %s",
                      e->name, err->msg);
        else
            log_error("model %s: not loaded: %s", e->name, err->msg);
        free(cfg);
        return rc;
    }
    const struct model *m = &sm->model;
    /* The rate a model never loaded is estimated at: bytes of weights file
     * per second of a whole load (read, prepare, warmup), from the last
     * load that prepared its weights (not one that mapped them back). */
    if (m->cold.prepare_s > 0 && m->cold.total_s > 0) {
        double bps = (double)lc_file_bytes(m->cfg.dir) / m->cold.total_s;
        if (bps > 0)
            atomic_store(&s->read_bps, bps);
    }
    atomic_store(&e->cold_ns, (int64_t)(m->cold.total_s * 1e9));
    e->loaded_sig = e->sig;
    /* The warmup timings kept for the next load of the same files (one
     * light warmup then) are those of the folder's configuration alone: a
     * load back from an override took the override's (a 1 ms model
     * predicted at 99 ms, its budgeted requests 504). */
    if (override)
        e->warm_n = 0;
    if (asked) {
        char *keep = strdup(override);
        if (keep) {   /* out of memory: the next load reads the folder's, as before */
            free(e->override);
            e->override = keep;
            pthread_mutex_lock(&e->mu);
            e->override_kept = true;
            pthread_mutex_unlock(&e->mu);
        }
    }
    e->keep_pending = true;
    /* What it holds where the budget counts first (model_instance_bytes). */
    size_t on_dev = ndevs ? served_copy_bytes_on(sm, devs[0]) : 0;
    atomic_store(&e->bytes, on_dev ? on_dev : model_memory_bytes(m));
    atomic_store(&e->last_used_ns, now_ns());   /* idle from its load on */
    atomic_fetch_add(&e->loads[0], 1);
    pthread_mutex_lock(&e->mu);
    struct served_model *old = e->cur;
    e->cur = sm;
    e->unload_asked = false;
    e->error[0] = '\0';
    bool reload = atomic_load(&old->state) == SERVED_READY;
    if (reload) {
        e->draining++;
        atomic_fetch_add(&e->unloads[SERVED_UNLOAD_RELOAD], 1);
    }
    pthread_mutex_unlock(&e->mu);
    served_shares_refresh(s, sm);
    if (reload)
        log_info("model %s: reloaded; the previous copy drains", e->name);
    lc_retire(s, old);
    free(cfg);
    if (s->on_loaded)
        s->on_loaded(s->on_loaded_arg);
    return 0;
}

/* ---- the thread ---- */

/* Queues t for the thread; after serving_stop began, frees it and refuses. */
static int lc_enqueue(struct serving *s, struct lifecycle_task *t, struct error *err)
{
    t->next = NULL;
    pthread_mutex_lock(&s->lc_mu);
    if (s->lc_stop) {
        pthread_mutex_unlock(&s->lc_mu);
        free(t->override);
        free(t);
        return error_set(err, BG_ESHUTDOWN, "the server is shutting down");
    }
    *s->tasks_tail = t;
    s->tasks_tail = &t->next;
    pthread_cond_signal(&s->lc_cv);
    pthread_mutex_unlock(&s->lc_mu);
    return 0;
}

/* Queues a load of e (under e->mu): one at a time per entry; a request's
 * wait joins the one queued. */
static int lc_queue_load_locked(struct serving *s, struct served_entry *e, char *override,
                                lifecycle_done_fn done, void *arg, bool for_request,
                                struct error *err)
{
    struct lifecycle_task *t = calloc(1, sizeof *t);
    if (!t) {
        free(override);
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    *t = (struct lifecycle_task){.kind = TASK_LOAD, .e = e, .override = override, .done = done,
                                 .arg = arg, .for_request = for_request};
    int rc = lc_enqueue(s, t, err);
    if (rc == 0) {
        e->loads_pending++;
        e->override_pending += override != NULL;
    }
    return rc;
}

/* Answers whoever waits on e's load; load_ended: the answer is that load's
 * own (one pending load fewer), not a refusal before it ran. */
static void lc_answer(struct served_entry *e, int rc, const char *msg, bool load_ended)
{
    pthread_mutex_lock(&e->mu);
    struct served_waiter *w = e->waiters;
    e->waiters = NULL;
    if (load_ended && e->loads_pending > 0)
        e->loads_pending--;   /* this one */
    /* Each waiter gets its own reference to the copy it waited for. */
    struct served_model *sm = rc == 0 && atomic_load(&e->cur->state) == SERVED_READY ? e->cur : NULL;
    for (struct served_waiter *x = w; x && sm; x = x->next)
        atomic_fetch_add(&sm->refs, 1);
    pthread_mutex_unlock(&e->mu);
    while (w) {
        struct served_waiter *next = w->next;
        w->done(w->arg, rc, msg, sm);
        free(w);
        w = next;
    }
}

/* A load ended (rc its answer). */
static void lc_answer_waiters(struct served_entry *e, int rc, const char *msg)
{
    lc_answer(e, rc, msg, true);
}

/* A load nobody asked through the queue (a model found eager at start, a
 * folder or version added): requests that come meanwhile (the server
 * listens already) wait on it, as on a queued one, rather than queue a
 * second load that would then reload what this one loaded. */
static void lc_load_unasked(struct serving *s, struct served_entry *e)
{
    struct error err = {0};
    pthread_mutex_lock(&e->mu);
    bool queued = e->loads_pending > 0;
    if (!queued)
        e->loads_pending++;
    pthread_mutex_unlock(&e->mu);
    if (queued)
        return;   /* a request's load is queued already: it serves */
    int rc = lifecycle_load_now(s, e, NULL, &err);   /* a failure is logged and in the index */
    lc_answer_waiters(e, rc, err.msg);
}

/* A task's own callback, with a reference like the waiters'. */
static void lc_done(struct served_entry *e, lifecycle_done_fn done, void *arg, int rc,
                    const char *msg)
{
    if (!done)
        return;
    struct served_model *sm = NULL;
    if (rc == 0) {
        pthread_mutex_lock(&e->mu);
        if (atomic_load(&e->cur->state) == SERVED_READY) {
            sm = e->cur;
            atomic_fetch_add(&sm->refs, 1);
        }
        pthread_mutex_unlock(&e->mu);
    }
    done(arg, rc, msg, sm);
}

/* A folder the repository API asked to load before the poll saw it (as
 * Triton's explicit model control loads a folder added since its start):
 * added on this thread, as the poll adds, then loaded for the caller. */
static struct served_entry *lc_add_asked(struct serving *s, const char *name, struct error *err)
{
    struct served_entry *e = lc_find(s, name, strlen(name));
    if (e)
        return e;   /* the poll was quicker */
    int before = atomic_load(&s->n);
    if (serving_add_model(s, name, err) != 0 && !lc_find(s, name, strlen(name)))
        return NULL;
    log_info("model %s: added to the repository (repository API)", name);
    e = lc_find(s, name, strlen(name));
    /* Its other versions served side by side load as the poll's would. */
    for (int i = before; i < atomic_load(&s->n); i++)
        if (s->entries[i] != e && atomic_load(&s->entries[i]->cur->state) == SERVED_LOADING)
            lc_load_unasked(s, s->entries[i]);
    return e;
}

static bool lc_stopping(struct serving *s)
{
    pthread_mutex_lock(&s->lc_mu);
    bool stop = s->lc_stop;
    pthread_mutex_unlock(&s->lc_mu);
    return stop;
}

/* The start's eager loads, one after another; after a stop began, those
 * not begun are given up (their waiters answered). */
static void lc_start_loads(struct serving *s)
{
    for (int i = 0; i < s->start_n; i++) {
        struct served_entry *e = s->entries[i];
        if (atomic_load(&e->cur->state) != SERVED_LOADING)
            continue;
        atomic_store(&s->start_loading, i);
        if (atomic_load(&s->stopping) || lc_stopping(s)) {
            log_info("model %s: not loaded: the server stops", e->name);
            lc_set_shell(s, e, NULL, SERVED_UNLOADED, "the server stopped before it loaded");
            lc_answer_waiters(e, -BG_ESHUTDOWN, "the server is shutting down");
            continue;
        }
        struct error err = {0};
        int rc = lifecycle_load_now(s, e, NULL, &err);   /* a failure is logged and in the index */
        lc_answer_waiters(e, rc, err.msg);
    }
    atomic_store(&s->start_loading, -1);
    atomic_store(&s->started, true);
}

/* Answers e's waiters rc (a refusal), its pending loads left as they are
 * (the thread answers its own when it comes to them). */
static void lc_refuse_waiters(struct served_entry *e, int rc, const char *msg)
{
    lc_answer(e, rc, msg, false);
}

static void lc_run(struct serving *s, struct lifecycle_task *t)
{
    struct error err = {0};
    int rc = 0;
    if (t->kind == TASK_START) {
        lc_start_loads(s);
        free(t);
        return;
    }
    if ((t->kind == TASK_LOAD || t->kind == TASK_ADD) && atomic_load(&s->stopping)) {
        /* Queued before the drain began: it would run during it, one
         * after another, holding the stop (7 s for three lazy loads). */
        if (t->kind == TASK_LOAD)
            lc_answer_waiters(t->e, -BG_ESHUTDOWN, "the server is shutting down");
        if (t->done)
            t->done(t->arg, -BG_ESHUTDOWN, "the server is shutting down", NULL);
        free(t->override);
        free(t);
        return;
    }
    if (t->kind == TASK_ADD && !(t->e = lc_add_asked(s, t->name, &err))) {
        if (t->done)
            t->done(t->arg, err.code ? -err.code : -BG_ENOTFOUND, err.msg, NULL);
        free(t->override);
        free(t);
        return;
    }
    if (t->kind == TASK_LOAD || t->kind == TASK_ADD) {
        if (t->kind == TASK_ADD) {
            /* Requests that find the new folder loading wait on this load
             * (they queued a second one, which then reloaded it). */
            pthread_mutex_lock(&t->e->mu);
            t->e->loads_pending++;
            pthread_mutex_unlock(&t->e->mu);
        }
        if (t->kind == TASK_LOAD && !t->for_request && !t->override) {
            /* The repository API's load without a configuration: the
             * folder's config.json again, as Triton's. */
            free(t->e->override);
            t->e->override = NULL;
            pthread_mutex_lock(&t->e->mu);
            t->e->override_kept = false;
            pthread_mutex_unlock(&t->e->mu);
        }
        /* A request queued this load in a window where it saw no load
         * under way (before the start's eager loads were marked): the
         * model another load brought in meanwhile serves it, rather than
         * a reload of the same files. */
        if (!(t->for_request && atomic_load(&t->e->cur->state) == SERVED_READY))
            rc = lifecycle_load_now(s, t->e, t->override, &err);
        if (t->kind == TASK_LOAD && t->override) {
            pthread_mutex_lock(&t->e->mu);
            t->e->override_pending--;
            pthread_mutex_unlock(&t->e->mu);
        }
        lc_answer_waiters(t->e, rc, err.msg);
    } else {
        pthread_mutex_lock(&t->e->mu);
        t->e->unload_asked = true;
        pthread_mutex_unlock(&t->e->mu);
        lc_unload(s, t->e, t->reason, "unloaded (repository API)", false);
    }
    lc_done(t->e, t->done, t->arg, rc, err.msg);
    free(t->override);
    free(t);
}

/* ---- the repository poll ---- */


/* 1 when the repository holds at least one model folder (one with a
 * config.json), 0 when it holds none, -errno when it cannot be read. */
static int lc_repo_holds_model(const struct serving *s)
{
    DIR *root = opendir(s->dir);
    if (!root)
        return -errno;
    bool any = false;
    struct dirent *de;
    while (!any && (de = readdir(root))) {
        char path[8300];
        snprintf(path, sizeof path, "%s/%s/config.json", s->dir, de->d_name);
        any = de->d_name[0] != '.' && served_config_there(path) == 1;
    }
    closedir(root);
    return any;
}

/* One model folder as it is now against the last load's view of it. */
static void lc_poll_entry(struct serving *s, struct served_entry *e)
{
    char path[8300];
    snprintf(path, sizeof path, "%s/config.json", e->dir);
    int there = served_config_there(path);
    if (there != 1) {
        if (e->removed || there < 0)
            return;   /* removed is said once; an I/O error (a stale mount) is no removal */
        /* Asked after the folder was missed: the repository unmounted (or
         * moved away) since this poll found it whole is no removal either
         * (the next poll says so), nor a folder that is there again once
         * the repository is back. A move during a poll unloaded every
         * model (CI: the repository moved away between the poll's look at
         * it and its look at the models' folders). */
        if (lc_repo_holds_model(s) != 1 || served_config_there(path) != 0)
            return;
        /* Written under mu: readiness reads it on an IO thread
         * (serving_all_ready); this thread alone writes it. */
        pthread_mutex_lock(&e->mu);
        e->removed = true;
        pthread_mutex_unlock(&e->mu);
        atomic_store(&e->unlisted_ns, now_ns());
        memset(&e->sig, 0, sizeof e->sig);
        log_info("model %s: its folder left the repository", e->name);
        lc_unload(s, e, SERVED_UNLOAD_REMOVED, "removed from the repository", false);
        /* Not loaded again by a request: there is nothing to load. */
        lc_set_shell(s, e, NULL, SERVED_FAILED, "removed from the repository");
        return;
    }
    struct model_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return;
    struct error err = {0};
    int version = 0;
    /* As its loads read it: with the API's configuration when one is kept
     * (read without it, a version its policy picks other than the
     * folder's was a change at every poll: reloaded for ever). */
    int rc = served_config_read(e, e->override, cfg, &version, &err);
    struct served_sig now;
    served_sig_read(e, cfg, version, &now);
    if (!e->removed && lc_sig_equal(&now, &e->sig)) {
        free(cfg);
        return;
    }
    pthread_mutex_lock(&e->mu);
    e->removed = false;
    pthread_mutex_unlock(&e->mu);
    if (!e->retired)
        atomic_store(&e->unlisted_ns, 0);
    pthread_mutex_lock(&e->mu);
    int state = atomic_load(&e->cur->state);
    bool asked_off = e->unload_asked;
    pthread_mutex_unlock(&e->mu);
    /* Loaded, failed, or an eager model: load what is there now (a loaded
     * copy serves on if that fails). A lazy or unloaded model loads on its
     * next request; its shell takes the new configuration. */
    bool load = state == SERVED_READY || state == SERVED_FAILED ||
                (state == SERVED_UNLOADED && rc == 0 && !cfg->lifecycle.lazy && !asked_off);
    log_info("model %s: changed in the repository%s", e->name,
             load ? "; loading it" : "; loaded by its next request");
    if (load) {
        lc_load_unasked(s, e);   /* requests meanwhile wait on it, not on a second load */
    } else {
        e->sig = now;
        if (rc == 0)
            lc_set_shell(s, e, cfg, SERVED_UNLOADED, "not loaded (changed in the repository; "
                                                    "the next request loads it)");
    }
    free(cfg);
}

/* Sets e's standing_in and covered; whether standing_in was not set. */
static bool lc_set_cover(struct served_entry *e, bool standing_in, bool covered)
{
    pthread_mutex_lock(&e->mu);
    bool was = e->standing_in;
    e->standing_in = standing_in;
    e->covered = covered;
    pthread_mutex_unlock(&e->mu);
    return !was;
}

/* A model serving several versions: a version its policy now selects
 * gets an entry (loaded when eager); an entry whose version it no longer
 * selects is unloaded and retired, once what it would make way for
 * serves. `first` is the name's first entry. */
static void lc_poll_versions(struct serving *s, struct served_entry *first)
{
    struct model_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return;
    struct error err = {0};
    int vs[MODEL_MAX_VERSIONS], nv = 0;
    if (model_config_load(first->dir, first->name, cfg, &err) == 0 && served_policy_multi(cfg))
        nv = served_versions_selected(first->dir, cfg, vs);
    int n = atomic_load(&s->n);
    for (int k = 0; k < nv; k++) {
        struct served_entry *have = NULL;
        for (int i = 0; i < n && !have; i++)
            if (strcmp(s->entries[i]->name, first->name) == 0 && s->entries[i]->pinned == vs[k])
                have = s->entries[i];
        if (have) {
            if (have->retired) {   /* selected again */
                pthread_mutex_lock(&have->mu);
                have->retired = false;
                pthread_mutex_unlock(&have->mu);
                atomic_store(&have->unlisted_ns, 0);
                memset(&have->sig, 0, sizeof have->sig);   /* the entry poll loads it */
            }
            continue;
        }
        if (served_entry_add(s, first->name, vs[k], &err) != 0) {
            log_error("model %s: version %d not added: %s", first->name, vs[k], err.msg);
            continue;
        }
        struct served_entry *e = s->entries[atomic_load(&s->n) - 1];
        log_info("model %s: version %d added (version_policy)", e->name, vs[k]);
        if (atomic_load(&e->cur->state) == SERVED_LOADING)
            lc_load_unasked(s, e);
    }
    /* The selected versions not serving (a new version's files half
     * copied or corrupt): as many versions no longer selected serve on in
     * their place, newest first, as a reload's old copy serves on. A new
     * version that did not load retired a working one, and the server
     * was not ready. */
    n = atomic_load(&s->n);
    struct served_entry *down[MODEL_MAX_VERSIONS], *old[MODEL_MAX_VERSIONS];
    int ndown = 0, nold = 0;
    for (int i = 0; i < n && nv > 0; i++) {
        struct served_entry *e = s->entries[i];
        if (strcmp(e->name, first->name) != 0 || !e->pinned || e->retired)
            continue;
        bool selected = false;
        for (int k = 0; k < nv; k++)
            selected |= vs[k] == e->pinned;
        if (selected && atomic_load(&e->cur->state) == SERVED_FAILED && ndown < MODEL_MAX_VERSIONS)
            down[ndown++] = e;
        else if (selected)
            lc_set_cover(e, false, false);
        else if (nold < MODEL_MAX_VERSIONS)
            old[nold++] = e;
    }
    for (int a = 0; a < nold; a++)   /* newest first */
        for (int b = a + 1; b < nold; b++)
            if (old[b]->pinned > old[a]->pinned) {
                struct served_entry *x = old[a];
                old[a] = old[b];
                old[b] = x;
            }
    int standing = 0;
    for (int a = 0; a < nold; a++) {
        struct served_entry *e = old[a];
        if (standing < ndown && atomic_load(&e->cur->state) == SERVED_READY) {
            if (lc_set_cover(e, true, false))
                log_warn("model %s: version %d serves on: version %d, selected by its "
                         "version_policy, is not ready", e->name, e->pinned,
                         down[standing]->pinned);
            lc_set_cover(down[standing++], false, true);
            continue;
        }
        lc_set_cover(e, false, false);
        pthread_mutex_lock(&e->mu);
        e->retired = true;
        pthread_mutex_unlock(&e->mu);
        atomic_store(&e->unlisted_ns, now_ns());
        char why[160];
        snprintf(why, sizeof why, "version %d is not served any more (version_policy)", e->pinned);
        log_info("model %s: %s", e->name, why);
        lc_unload(s, e, SERVED_UNLOAD_REMOVED, why, false);
        lc_set_shell(s, e, NULL, SERVED_FAILED, why);
    }
    free(cfg);
}

/* New model folders become models; changed ones reload; removed ones
 * unload; a model serving several versions follows its policy. */
static void lc_poll(struct serving *s)
{
    /* The repository itself unreadable (unmounted, moved, a network mount
     * gone) is no removal of every model: they serve on as they are until
     * it is back. It read as every folder gone: all unloaded, and ready
     * still 200. */
    int any = lc_repo_holds_model(s);
    if (any < 0) {
        if (!s->repo_unreadable)
            log_error("model repository %s cannot be read (%s): its models stay as they are "
                      "until it can", s->dir, strerror(-any));
        s->repo_unreadable = true;
        return;
    }
    /* Nor is a repository that holds no model folder at all while models
     * are served: an unmount leaves its empty mount point. (Emptied on
     * purpose, its models go through the repository API's unload.) */
    bool served = false;
    for (int i = 0; i < atomic_load(&s->n) && !served; i++)
        served = !s->entries[i]->removed && !s->entries[i]->retired;
    if (!any && served) {
        if (!s->repo_unreadable)
            log_error("model repository %s holds no model folder now (unmounted?): its models "
                      "stay as they are until it holds one (unload them through the repository "
                      "API to take them away)", s->dir);
        s->repo_unreadable = true;
        return;
    }
    if (s->repo_unreadable)
        log_info("model repository %s can be read again", s->dir);
    s->repo_unreadable = false;
    int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        bool first = e->pinned;
        for (int j = 0; j < i && first; j++)
            first = strcmp(s->entries[j]->name, e->name) != 0;
        if (first)
            lc_poll_versions(s, e);
    }
    n = atomic_load(&s->n);
    for (int i = 0; i < n; i++)
        if (!s->entries[i]->retired)
            lc_poll_entry(s, s->entries[i]);
    DIR *d = opendir(s->dir);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        char path[8300];
        if (de->d_name[0] == '.' || (strlen(de->d_name) < MODEL_NAME_MAX &&
                                     lc_find(s, de->d_name, strlen(de->d_name))))
            continue;
        snprintf(path, sizeof path, "%s/%s/config.json", s->dir, de->d_name);
        if (served_config_there(path) != 1)
            continue;
        if (!model_name_ok(de->d_name)) {
            serving_warn_bad_folder(s, de->d_name);
            continue;
        }
        struct error err = {0};
        int before = atomic_load(&s->n);
        if (serving_add_model(s, de->d_name, &err) != 0) {
            /* Once: every poll sees the folder again (it was said at each,
             * followed by "added", for ever). */
            if (serving_folder_first_said(s, de->d_name))
                log_error("model %s: found in the repository but not (all) added: %s",
                          de->d_name, err.msg);
        } else {
            log_info("model %s: added to the repository", de->d_name);
        }
        for (int i = before; i < atomic_load(&s->n); i++)
            if (atomic_load(&s->entries[i]->cur->state) == SERVED_LOADING)
                lc_load_unasked(s, s->entries[i]);
    }
    closedir(d);
}

void serving_on_loaded(struct serving *s, void (*fn)(void *arg), void *arg)
{
    s->on_loaded = fn;
    s->on_loaded_arg = arg;
}

void serving_set_poll(struct serving *s, int seconds) { s->poll_s = seconds > 0 ? seconds : 0; }

void serving_set_removed_keep(struct serving *s, int seconds)
{
    s->removed_keep_ns = (int64_t)(seconds > 0 ? seconds : 0) * 1000000000;
}

/* Loads that serve now: their backends keep what they prepared (the cpu
 * backend's packed weights) for the next load, after whoever waited was
 * answered. */
static void lc_keep(struct serving *s)
{
    int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        if (!e->keep_pending)
            continue;
        e->keep_pending = false;
        pthread_mutex_lock(&e->mu);
        struct served_model *sm = atomic_load(&e->cur->state) == SERVED_READY ? e->cur : NULL;
        if (sm)
            atomic_fetch_add(&sm->refs, 1);
        pthread_mutex_unlock(&e->mu);
        if (!sm)
            continue;
        model_keep(&sm->model);   /* only this thread frees copies: it stays */
        served_release(sm);
    }
}

/* Models idle past their idle_unload_s. */
static void lc_idle(struct serving *s, int64_t now)
{
    int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        int idle_s = e->cur->model.cfg.lifecycle.idle_unload_s;
        bool ready = atomic_load(&e->cur->state) == SERVED_READY;
        pthread_mutex_unlock(&e->mu);
        if (!ready || idle_s <= 0 || now - atomic_load(&e->last_used_ns) < idle_s * 1000000000LL)
            continue;
        char why[96];
        snprintf(why, sizeof why, "unloaded after %d s without a request (idle_unload_s)", idle_s);
        lc_unload(s, e, SERVED_UNLOAD_IDLE, why, true);
    }
}

static void *lc_main(void *arg)
{
    struct serving *s = arg;
    int64_t last_idle = 0, last_poll = now_ns();
    pthread_mutex_lock(&s->lc_mu);
    while (!s->lc_stop) {
        struct lifecycle_task *t = s->tasks;
        if (t) {
            s->tasks = t->next;
            if (!s->tasks)
                s->tasks_tail = &s->tasks;
        } else {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += LIFECYCLE_TICK_NS;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->lc_cv, &s->lc_mu, &ts);
        }
        pthread_mutex_unlock(&s->lc_mu);
        if (t)
            lc_run(s, t);
        lc_keep(s);
        lc_sweep(s);
        int64_t now = now_ns();
        if (now - last_idle >= LIFECYCLE_TICK_NS) {
            lc_idle(s, now);
            last_idle = now;
        }
        if (s->poll_s > 0 && now - last_poll >= s->poll_s * 1000000000LL) {
            lc_poll(s);
            last_poll = now_ns();
        }
        pthread_mutex_lock(&s->lc_mu);
    }
    pthread_mutex_unlock(&s->lc_mu);
    return NULL;
}

int lifecycle_start(struct serving *s, struct error *err)
{
    int rc = pthread_create(&s->lc_thread, NULL, lc_main, s);
    if (rc)
        return error_set(err, BG_ENOMEM, "cannot start the lifecycle thread: %s", strerror(rc));
    s->lc_started = true;
    return 0;
}

/* Joins the thread by deadline_ns (0: however long): false if it runs on. */
static bool lc_join(struct serving *s, int64_t deadline_ns)
{
    if (!s->lc_started)
        return true;
    if (deadline_ns) {
        struct timespec at;
        clock_gettime(CLOCK_REALTIME, &at);
        int64_t left = deadline_ns - now_ns();
        if (left < 0)
            left = 0;
        at.tv_sec += (time_t)(left / 1000000000);
        at.tv_nsec += (long)(left % 1000000000);
        if (at.tv_nsec >= 1000000000L) {
            at.tv_sec++;
            at.tv_nsec -= 1000000000L;
        }
        if (pthread_timedjoin_np(s->lc_thread, NULL, &at) != 0)
            return false;
    } else {
        pthread_join(s->lc_thread, NULL);
    }
    s->lc_started = false;
    return true;
}

bool lifecycle_stop(struct serving *s, int64_t deadline_ns)
{
    pthread_mutex_lock(&s->lc_mu);
    s->lc_stop = true;
    struct lifecycle_task *t = s->tasks;
    s->tasks = NULL;
    s->tasks_tail = &s->tasks;
    pthread_cond_broadcast(&s->lc_cv);
    pthread_mutex_unlock(&s->lc_mu);
    bool joined = lc_join(s, deadline_ns);
    if (!joined) {
        /* A load that does not end (a file that never finishes reading, a
         * network mount gone): whoever waits on it is answered now, not
         * when it ends, and the stop goes on without it. */
        int n = atomic_load(&s->n);
        for (int i = 0; i < n; i++)
            lc_answer_waiters(s->entries[i], -BG_ESHUTDOWN, "the server is shutting down");
        atomic_store(&s->started, true);
    }
    while (t) {
        struct lifecycle_task *next = t->next;
        if (t->kind == TASK_LOAD)
            lc_answer_waiters(t->e, -BG_ESHUTDOWN, "the server is shutting down");
        if (t->kind == TASK_START) {   /* the thread never ran it */
            for (int i = 0; i < s->start_n; i++)
                lc_answer_waiters(s->entries[i], -BG_ESHUTDOWN, "the server is shutting down");
            atomic_store(&s->started, true);
        }
        if (t->done)
            t->done(t->arg, -BG_ESHUTDOWN, "the server is shutting down", NULL);
        free(t->override);
        free(t);
        t = next;
    }
    return joined;
}

int serving_start(struct serving *s, struct error *err)
{
    int n = atomic_load(&s->n);
    /* Every eager model is taken as loading before the first load starts:
     * a request for the tenth waits on the tenth's load (lc_load_unasked). */
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        if (atomic_load(&e->cur->state) == SERVED_LOADING)
            e->loads_pending++;
        pthread_mutex_unlock(&e->mu);
    }
    s->start_n = n;
    atomic_store(&s->start_loading, -1);
    /* The loads are the thread's first task, before any a request or the
     * repository API queues; the caller's thread stays free to take a
     * signal (it loaded them itself, and a SIGTERM waited for the last). */
    struct lifecycle_task *t = calloc(1, sizeof *t);
    if (t) {
        t->kind = TASK_START;
        pthread_mutex_lock(&s->lc_mu);
        t->next = s->tasks;
        s->tasks = t;
        if (s->tasks_tail == &s->tasks)
            s->tasks_tail = &t->next;
        pthread_mutex_unlock(&s->lc_mu);
    }
    int rc = t ? lifecycle_start(s, err) : error_set(err, BG_ENOMEM, "out of memory");
    if (rc == 0)
        return 0;
    if (t) {   /* still first in the list: taken back, run here */
        pthread_mutex_lock(&s->lc_mu);
        s->tasks = t->next;
        if (!s->tasks)
            s->tasks_tail = &s->tasks;
        pthread_mutex_unlock(&s->lc_mu);
        free(t);
    }
    lc_start_loads(s);
    return rc;
}

bool serving_started(const struct serving *s) { return atomic_load(&s->started); }

void serving_begin_stop(struct serving *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, true);
    /* Requests waiting on a start's load not begun: answered now, not when
     * the drain times out (the thread is in a load, maybe a long one). */
    int now = atomic_load(&s->start_loading);
    for (int i = now + 1; now >= 0 && i < s->start_n; i++)
        lc_refuse_waiters(s->entries[i], -BG_ESHUTDOWN, "the server is shutting down");
}

bool serving_stop(struct serving *s, int64_t deadline_ns)
{
    if (!s)
        return true;
    /* No load or unload after this; draining copies are stopped below with
     * the current ones. */
    bool stopped = lifecycle_stop(s, deadline_ns);
    int n = atomic_load(&s->n);
    /* Under each entry's lock: a load still running may swap its copy. */
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        if (e->cur->batcher)
            batcher_close(e->cur->batcher);
        pthread_mutex_unlock(&e->mu);
    }
    /* Not stopped, the lifecycle thread is still in a load: it may retire
     * a copy into the drain, or free one from it (lc_sweep), meanwhile.
     * The draining copies are walked under lc_mu and held, a reference
     * each, while they are stopped: none is freed, or stopped by the
     * sweep, under this. */
    pthread_mutex_lock(&s->lc_mu);
    int ndrain = 0;
    for (struct served_model *d = s->drain; d; d = d->next)
        ndrain++;
    struct served_model **drain = calloc((size_t)ndrain + 1, sizeof *drain);
    ndrain = 0;
    for (struct served_model *d = s->drain; d && drain; d = d->next) {
        atomic_fetch_add(&d->refs, 1);
        drain[ndrain++] = d;
        if (d->batcher)
            batcher_close(d->batcher);
    }
    pthread_mutex_unlock(&s->lc_mu);
    /* Workers still holding a batch run it without waiting for a slot. */
    for (int i = 0; i < s->ndevs; i++)
        devsched_close(s->devs[i]);
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        struct served_model *cur = e->cur;
        atomic_fetch_add(&cur->refs, 1);
        pthread_mutex_unlock(&e->mu);
        served_copy_stop(cur);
        served_release(cur);
    }
    for (int i = 0; i < ndrain; i++) {
        served_copy_stop(drain[i]);
        served_release(drain[i]);
    }
    for (struct served_model *d = drain ? NULL : s->drain; d; d = d->next)
        served_copy_stop(d);   /* no memory to hold them: as they are */
    free(drain);
    return stopped;
}

/* ---- the entry points ---- */

static int serving_load_one(struct serving *s, struct served_entry *e, const char *override,
                            size_t olen, lifecycle_done_fn done, void *arg, struct error *err);

/* A folder of the repository not known yet, with a config.json: added and
 * loaded by the thread (lc_add_asked); else 404. */
static int lc_queue_add(struct serving *s, const char *name, size_t len, const char *override,
                        size_t olen, lifecycle_done_fn done, void *arg, struct error *err)
{
    char path[8400];
    struct stat st;
    if (len >= MODEL_NAME_MAX)   /* its folder may exist: that is not why */
        return error_set(err, BG_EINVAL, "\"%.40s...\" is no model name: at most %d characters",
                         name, MODEL_NAME_MAX - 1);
    snprintf(path, sizeof path, "%s/%.*s/config.json", s->dir, (int)(len > 200 ? 200 : len), name);
    if (len == 0 || memchr(name, '/', len) || name[0] == '.' ||
        stat(path, &st) != 0)
        return error_set(err, BG_ENOTFOUND, "unknown model \"%.*s\" (no folder of that name "
                         "with a config.json in the repository)", (int)(len > 128 ? 128 : len),
                         name);
    struct lifecycle_task *t = calloc(1, sizeof *t);
    char *ov = override ? strndup(override, olen) : NULL;
    if (!t || (override && !ov)) {
        free(t);
        free(ov);
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    *t = (struct lifecycle_task){.kind = TASK_ADD, .override = ov, .done = done, .arg = arg};
    memcpy(t->name, name, len);
    return lc_enqueue(s, t, err);
}

/* A load of every version of a model (serving_load): the versions'
 * outcomes gathered into one answer. Their callbacks run on the lifecycle
 * thread; the caller queues them meanwhile on its own. */
struct lc_versions {
    lifecycle_done_fn done;
    void *arg;
    _Atomic int left;                 /* versions to answer, and the caller while it queues */
    bool abandoned;                   /* a version could not be queued: the caller answered */
    int rc;                           /* the first failure's */
    char msg[1024];
    struct served_model *sm;          /* the last copy loaded (a reference) */
};

/* One of v's answers is in, or will not come; the last answers the
 * caller. */
static void lc_versions_end(struct lc_versions *v)
{
    if (atomic_fetch_sub_explicit(&v->left, 1, memory_order_acq_rel) != 1)
        return;
    if (v->rc && v->sm) {
        served_release(v->sm);
        v->sm = NULL;
    }
    if (!v->abandoned)
        v->done(v->arg, v->rc, v->rc ? v->msg : NULL, v->sm);
    else if (v->sm)
        served_release(v->sm);
    free(v);
}

static void lc_versions_done(void *arg, int rc, const char *msg, struct served_model *sm)
{
    struct lc_versions *v = arg;
    if (rc && !v->rc) {
        v->rc = rc;
        snprintf(v->msg, sizeof v->msg, "%s", msg ? msg : "the load failed");
    }
    if (sm) {
        if (v->sm)
            served_release(v->sm);
        v->sm = sm;
    }
    lc_versions_end(v);
}

int serving_load(struct serving *s, const char *name, size_t len, const char *override,
                 size_t olen, lifecycle_done_fn done, void *arg, struct error *err)
{
    struct served_entry *e = lc_find(s, name, len);
    if (!e)
        return lc_queue_add(s, name, len, override, olen, done, arg, err);
    /* Known, but its folder left the repository: as a name never seen
     * (it read as a bad config.json, 400 "cannot open"). */
    char path[8300];
    struct stat st;
    snprintf(path, sizeof path, "%s/config.json", e->dir);
    if (stat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return error_set(err, BG_ENOTFOUND, "model %s: its folder is no longer in the repository "
                         "(no %s)", e->name, path);
    /* Every version it serves (retired ones not). */
    struct served_entry *served[MODEL_MAX_VERSIONS];
    int n = 0;
    for (struct served_entry *x = e; x && n < MODEL_MAX_VERSIONS;
         x = lc_find_next(s, name, len, x->index))
        if (!x->retired)
            served[n++] = x;
    if (n == 0)
        served[n++] = e;
    if (n == 1)
        return serving_load_one(s, served[0], override, olen, done, arg, err);
    /* The answer waits for them all: the first failure, else the last
     * version's copy (it was the last version's outcome alone: one
     * version failing before another that loaded was 200). */
    struct lc_versions *v = calloc(1, sizeof *v);
    if (!v)
        return error_set(err, BG_ENOMEM, "out of memory");
    v->done = done;
    v->arg = arg;
    atomic_init(&v->left, n + 1);   /* and this caller's, until every version is queued */
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0)
            rc = serving_load_one(s, served[i], override, olen, lc_versions_done, v, err);
        if (rc)   /* this version and those after it will not answer */
            lc_versions_end(v);
    }
    if (rc)
        v->abandoned = true;   /* the caller answers the error; the others' outcomes go */
    lc_versions_end(v);
    return rc;
}

static int serving_load_one(struct serving *s, struct served_entry *e, const char *override,
                            size_t olen, lifecycle_done_fn done, void *arg, struct error *err)
{
    char *ov = NULL;
    if (override && !(ov = strndup(override, olen)))
        return error_set(err, BG_ENOMEM, "out of memory");
    pthread_mutex_lock(&e->mu);
    int rc;
    if (e->loads_pending > 0 && !ov && e->override_pending == 0 && !e->override_kept) {
        /* A load of the same files is queued: this one is it. Nobody to
         * answer (a version's load but the last one's): nothing to wait
         * for (a waiter without a callback was called through NULL). Not
         * when a load queued would read a configuration of the API's (its
         * body's, or the one kept for a request's load): this load is the
         * one that reads the folder's again (it was swallowed, and the
         * override kept for ever). */
        struct served_waiter *w = done ? calloc(1, sizeof *w) : NULL;
        if (!done) {
            rc = 0;
        } else if (!w) {
            rc = error_set(err, BG_ENOMEM, "out of memory");
        } else {
            *w = (struct served_waiter){e->waiters, done, arg};
            e->waiters = w;
            rc = 0;
        }
    } else {
        rc = lc_queue_load_locked(s, e, ov, done, arg, false, err);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

int serving_unload(struct serving *s, const char *name, size_t len, struct error *err)
{
    struct served_entry *e = lc_find(s, name, len);
    if (!e)
        return error_set(err, BG_ENOTFOUND, "unknown model \"%.*s\"", (int)(len > 128 ? 128 : len),
                         name);
    for (; e; e = lc_find_next(s, name, len, e->index)) {   /* every version */
        struct lifecycle_task *t = calloc(1, sizeof *t);
        if (!t)
            return error_set(err, BG_ENOMEM, "out of memory");
        *t = (struct lifecycle_task){.kind = TASK_UNLOAD, .e = e, .reason = SERVED_UNLOAD_API};
        int rc = lc_enqueue(s, t, err);
        if (rc)
            return rc;
    }
    return 0;
}

int serving_wait_loaded(struct serving *s, struct served_model *sm, int64_t deadline_ns,
                        lifecycle_done_fn done, void *arg, int64_t *retry_after_ns,
                        struct error *err)
{
    struct served_entry *e = sm->entry;
    *retry_after_ns = 0;
    pthread_mutex_lock(&e->mu);
    int state = atomic_load(&e->cur->state);
    if (state == SERVED_READY) {
        pthread_mutex_unlock(&e->mu);
        return 1;
    }
    if (atomic_load(&s->stopping)) {
        /* No load begins for a request now, nor is one waited on: the
         * drain would wait for it (or cut it short). */
        int rc = error_set(err, BG_ESHUTDOWN, "model %s is not loaded and the server is "
                           "shutting down", e->name);
        pthread_mutex_unlock(&e->mu);
        return rc;
    }
    if (state == SERVED_FAILED && e->loads_pending == 0) {
        int rc = error_set(err, BG_ENOTREADY, "model %s is not ready: %s", e->name,
                           e->cur->model.reason);
        pthread_mutex_unlock(&e->mu);
        return rc;
    }
    int64_t est = lc_estimate_ns(s, e);
    int rc = 0;
    if (e->loads_pending == 0)
        rc = lc_queue_load_locked(s, e, NULL, NULL, NULL, true, err);
    if (rc == 0 && deadline_ns && now_ns() + est > deadline_ns) {
        *retry_after_ns = est;
        rc = error_set(err, BG_ENOTREADY, "model %s is not loaded; loading it takes about %.0f ms, "
                       "more than the request's latency budget leaves (it is loading now)",
                       e->name, (double)est / 1e6);
    } else if (rc == 0) {
        struct served_waiter *w = calloc(1, sizeof *w);
        if (!w) {
            rc = error_set(err, BG_ENOMEM, "out of memory");
        } else {
            *w = (struct served_waiter){e->waiters, done, arg};
            e->waiters = w;
        }
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

struct lc_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    struct served_model *sm;          /* the copy loaded, with its reference: held from
                                         the load's end, so that no eviction for the
                                         next load takes it before the job does */
    int rc;                           /* the load's answer */
};

static void lc_sync_done(void *arg, int rc, const char *msg, struct served_model *sm)
{
    (void)msg;
    struct lc_sync *w = arg;
    pthread_mutex_lock(&w->mu);
    w->sm = sm;
    w->rc = rc;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The copy of the version asked, or the one the name reaches. */
static struct served_model *lc_acquire(struct serving *s, const char *name, size_t len,
                                       int version)
{
    return version > 0 ? serving_acquire_version(s, name, len, version)
                       : serving_acquire(s, name, len);
}

/* lc_acquire, or NULL saying why. */
static struct served_model *lc_acquire_known(struct serving *s, const char *name, size_t len,
                                             int version, struct error *err)
{
    struct served_model *sm = lc_acquire(s, name, len, version);
    if (!sm && version > 0)
        error_set(err, BG_ENOTFOUND, "model \"%.*s\" serves no version %d now",
                  (int)(len > 128 ? 128 : len), name, version);
    else if (!sm)
        error_set(err, BG_ENOTFOUND, "unknown model \"%.*s\"", (int)(len > 128 ? 128 : len),
                  name);
    return sm;
}

/* sm when READY; else NULL saying why (its reference let go). */
static struct served_model *lc_ready(struct served_model *sm, struct error *err)
{
    if (!sm || atomic_load(&sm->state) == SERVED_READY)
        return sm;
    error_set(err, BG_ENOTREADY, "model %s is not ready: %s", sm->model.cfg.name,
              sm->model.reason);
    served_release(sm);
    return NULL;
}

struct served_model *serving_acquire_or_wait(struct serving *s, const char *name, size_t len,
                                             int version, lifecycle_done_fn done, void *arg,
                                             bool *loading, struct error *err)
{
    *loading = false;
    struct served_model *sm = lc_acquire_known(s, name, len, version, err);
    if (!sm || atomic_load(&sm->state) == SERVED_READY)
        return sm;
    if (atomic_load(&sm->entry->unlisted_ns)) {
        /* Its folder (or its version) left the repository: unknown, for a
         * caller that would wait for a model that is only not ready. */
        error_set(err, BG_ENOTFOUND, "model %s left the repository", sm->model.cfg.name);
        served_release(sm);
        return NULL;
    }
    int64_t retry;
    int rc = serving_wait_loaded(s, sm, 0, done, arg, &retry, err);
    served_release(sm);
    if (rc < 0)
        return NULL;
    if (rc == 0) {
        *loading = true;
        error_set(err, BG_ENOTREADY, "model \"%.*s\" is loading", (int)(len > 128 ? 128 : len),
                  name);
        return NULL;
    }
    return lc_ready(lc_acquire_known(s, name, len, version, err), err);   /* READY since */
}

struct served_model *serving_acquire_loaded(struct serving *s, const char *name, size_t len,
                                            int version, struct error *err)
{
    struct served_model *sm = lc_acquire_known(s, name, len, version, err);
    if (!sm)
        return NULL;
    if (atomic_load(&sm->state) == SERVED_READY)
        return sm;
    struct lc_sync w = {.done = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    int64_t retry;
    int rc = serving_wait_loaded(s, sm, 0, lc_sync_done, &w, &retry, err);
    served_release(sm);
    if (rc == 0) {
        /* A load always ends (failed, or answered at shutdown). */
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (rc < 0)
        return NULL;
    if (w.sm)
        return w.sm;   /* the reference the load's answer carried */
    if (w.rc == -BG_ESHUTDOWN) {   /* no fault of the model: the caller waits for the next start */
        error_set(err, BG_ESHUTDOWN, "the server is shutting down");
        return NULL;
    }
    return lc_ready(lc_acquire_known(s, name, len, version, err), err);
}

/* ---- what is shown ---- */

int serving_index(struct serving *s, struct served_index_row **out)
{
    int n = atomic_load(&s->n);
    struct served_index_row *r = calloc((size_t)(n ? n : 1), sizeof *r);
    if (!r)
        return -1;
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        int state = atomic_load(&e->cur->state);
        snprintf(r[i].name, sizeof r[i].name, "%s", e->name);
        r[i].version = e->cur->version;
        r[i].failed = state == SERVED_FAILED;
        r[i].state = state == SERVED_READY     ? "READY"
                     : state == SERVED_LOADING ? "LOADING"
                     : e->draining > 0         ? "UNLOADING"
                                               : "UNAVAILABLE";
        snprintf(r[i].reason, sizeof r[i].reason, "%s",
                 state == SERVED_READY ? e->error : e->cur->model.reason);
        pthread_mutex_unlock(&e->mu);
    }
    *out = r;
    return n;
}

void served_lifecycle_stats(const struct served_model *sm, struct served_lifecycle_stats *out)
{
    const struct served_entry *e = sm->entry;
    out->loads_ok = atomic_load(&e->loads[0]);
    out->loads_failed = atomic_load(&e->loads[1]);
    for (int i = 0; i < SERVED_UNLOAD_REASONS; i++)
        out->unloads[i] = atomic_load(&e->unloads[i]);
}

/* A device row for dev (made on first sight). */
static struct served_memory_row *lc_row(struct served_memory_row **r, int *n, int *cap,
                                        const char *dev)
{
    for (int i = 0; i < *n; i++)
        if (strcmp((*r)[i].device, dev) == 0)
            return &(*r)[i];
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 8;
        struct served_memory_row *nr = realloc(*r, (size_t)nc * sizeof *nr);
        if (!nr)
            return NULL;
        *r = nr;
        *cap = nc;
    }
    struct served_memory_row *row = &(*r)[(*n)++];
    memset(row, 0, sizeof *row);
    snprintf(row->device, sizeof row->device, "%s", dev);
    return row;
}

struct lc_rows {
    struct served_memory_row **r;
    int *n, *cap;
};

static void lc_row_device(const struct model_device *d, void *arg)
{
    struct lc_rows *w = arg;
    lc_row(w->r, w->n, w->cap, d->name);
}

int serving_memory_rows(struct serving *s, struct served_memory_row **out)
{
    struct served_memory_row *r = NULL;
    int n = 0, cap = 0;
    for (int i = 0; i < s->ndevcfg; i++) {
        struct served_memory_row *row = lc_row(&r, &n, &cap, s->devcfg[i].name);
        if (row)
            row->budget_bytes = s->devcfg[i].memory_budget_bytes;
    }
    struct lc_rows w = {&r, &n, &cap};
    int models = atomic_load(&s->n);
    for (int i = 0; i < models; i++) {
        struct served_model *sm = serving_acquire_at(s, i);
        if (atomic_load(&sm->state) == SERVED_READY)
            model_devices(&sm->model, lc_row_device, &w);
        served_release(sm);
    }
    /* And the devices of the copies draining or stranded there alone. */
    pthread_mutex_lock(&s->lc_mu);
    for (struct served_model *d = s->drain; d; d = d->next)
        if (atomic_load(&d->state) == SERVED_READY)
            model_devices(&d->model, lc_row_device, &w);
    for (struct served_model *d = s->stranded; d; d = d->next)
        model_devices(&d->model, lc_row_device, &w);
    pthread_mutex_unlock(&s->lc_mu);
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < models; i++) {
            struct served_model *sm = serving_acquire_at(s, i);
            r[k].resident_bytes += served_copy_bytes_on(sm, r[k].device);
            served_release(sm);
        }
        pthread_mutex_lock(&s->lc_mu);
        for (struct served_model *d = s->drain; d; d = d->next)
            r[k].resident_bytes += served_copy_bytes_on(d, r[k].device);
        for (struct served_model *d = s->stranded; d; d = d->next)
            r[k].resident_bytes += served_copy_bytes_on(d, r[k].device);
        pthread_mutex_unlock(&s->lc_mu);
    }
    *out = r;
    return n;
}

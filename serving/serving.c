/* serving.c - see serving.h. */
#include "serving/serving.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "serving/feed.h"
#include "serving/worker.h"

struct serving {
    char dir[4096];
    int io_threads;
    struct served_model *models;
    int n;
    /* One scheduler per device models are placed on (docs/SCHEDULING.md);
     * built by the loader, freed with the table. */
    struct devsched **devs;
    int ndevs;
    const struct tenants_config *tenants;   /* main's; NULL: "default" alone */
};

static int serving_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int serving_open(const char *dir, bool required, int io_threads, struct serving **out,
                 struct error *err)
{
    struct serving *s = calloc(1, sizeof *s);
    if (!s)
        return error_set(err, BG_ENOMEM, "out of memory");
    s->io_threads = io_threads;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    *out = s;
    DIR *d = opendir(dir);
    if (!d) {
        if (!required && errno == ENOENT) {
            log_warn("model repository %s does not exist: serving no models", dir);
            return 0;
        }
        int e = errno;
        free(s);
        *out = NULL;
        return error_set(err, BG_ECONFIG, "model_repository: cannot open %s: %s", dir, strerror(e));
    }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char path[8192];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/config.json", dir, de->d_name);
        if (stat(path, &st) != 0)
            continue;   /* not a model folder */
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        if (!(names[n] = strdup(de->d_name)))
            break;
        n++;
    }
    closedir(d);
    if (n > 1)   /* qsort of an empty, NULL list is undefined (UBSan said so) */
        qsort(names, (size_t)n, sizeof *names, serving_name_cmp);
    s->models = calloc((size_t)(n ? n : 1), sizeof *s->models);
    if (!s->models) {
        for (int i = 0; i < n; i++)
            free(names[i]);
        free(names);
        free(s);
        *out = NULL;
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        struct served_model *sm = &s->models[s->n++];
        char mdir[8192];
        snprintf(mdir, sizeof mdir, "%s/%s", dir, names[i]);
        struct error e = {0};
        int bad = model_config_load(mdir, names[i], &sm->model.cfg, &e) != 0;
        /* Statistics exist from the start: requests to a model that failed
         * or is loading are counted too (as not_ready). */
        sm->stats = modelstats_new(io_threads, bad ? 1 : sm->model.cfg.instance_count,
                                   bad ? 1 : sm->model.cfg.batching.max_batch_size);
        if (bad) {
            snprintf(sm->model.cfg.name, sizeof sm->model.cfg.name, "%s", names[i]);
            snprintf(sm->model.reason, sizeof sm->model.reason, "%s", e.msg);
            atomic_store(&sm->state, SERVED_FAILED);
            log_error("model %s: not loaded: %s", names[i], e.msg);
        } else {
            atomic_store(&sm->state, SERVED_LOADING);
        }
        free(names[i]);
    }
    free(names);
    log_info("model repository %s: %d model%s", dir, s->n, s->n == 1 ? "" : "s");
    return 0;
}

/* ---- device scheduling (docs/SCHEDULING.md) ----
 *
 * An instance is scheduled on the device it is placed on: its entry in
 * instances.devices, or device 0 for an accelerator (where cuda runs an
 * instance without one). A cpu or synthetic instance without a placement is
 * not scheduled: instance counts on the host were sized per model, and
 * pooling every host model under one set of slots would cut the
 * parallelism of deployments that never asked for sharing. The upstream
 * backend runs its own event loop and is not scheduled either. */

static int serving_sched_device_id(const struct model *m, int instance)
{
    int dev = m->instances[instance].device;
    if (dev < 0 && model_device_kind(m) == BACKEND_DEVICE_GPU)
        dev = 0;
    return dev;
}

static const struct served_sched *serving_sched_of(const struct served_model *sm, int instance)
{
    if (instance < 0 || instance >= sm->model.ninstances)
        return NULL;
    int id = serving_sched_device_id(&sm->model, instance);
    for (int k = 0; k < sm->nsched; k++)
        if (sm->sched[k].device_id == id)
            return &sm->sched[k];
    return NULL;
}

/* The device's scheduler, made on first use. */
static struct devsched *serving_devsched_get(struct serving *s, const char *name,
                                             struct error *err)
{
    for (int i = 0; i < s->ndevs; i++)
        if (strcmp(devsched_name(s->devs[i]), name) == 0)
            return s->devs[i];
    struct devsched **nd = realloc(s->devs, (size_t)(s->ndevs + 1) * sizeof *nd);
    if (!nd) {
        error_set(err, BG_ENOMEM, "out of memory for the scheduler of device %s", name);
        return NULL;
    }
    s->devs = nd;
    struct devsched *d = devsched_new(name, err);
    if (d)
        s->devs[s->ndevs++] = d;
    return d;
}

/* Makes the model a member of each device its instances are placed on. */
static int serving_sched_join(struct serving *s, struct served_model *sm, struct error *err)
{
    struct model *m = &sm->model;
    if (!model_is_compute(m))
        return 0;
    for (int i = 0; i < m->ninstances; i++) {
        int id = serving_sched_device_id(m, i);
        if (id < 0 || serving_sched_of(sm, i))
            continue;
        int here = 0;
        for (int j = 0; j < m->ninstances; j++)
            here += serving_sched_device_id(m, j) == id;
        char name[48];
        snprintf(name, sizeof name, "%s%d", model_backend_name(m), id);
        struct devsched *d = serving_devsched_get(s, name, err);
        if (!d)
            return -BG_ENOMEM;
        int member = devsched_join(d, m->cfg.name, m->cfg.sched_weight, here, err);
        if (member < 0)
            return member;
        sm->sched[sm->nsched++] = (struct served_sched){d, member, id};
    }
    return 0;
}

/* Stops what serving_load_one started: the batcher (queued requests are
 * answered), then the workers or the feed. */
static void serving_model_stop(struct served_model *sm)
{
    if (sm->batcher)
        batcher_close(sm->batcher);
    workers_join(sm->workers);
    feed_stop(sm->feed);
    sm->feed = NULL;
}

/* batcher_set_device_probe's: whether other models use the instance's
 * device now (running or waiting for a slot). */
static bool serving_device_other_work(void *arg, int instance)
{
    const struct served_sched *x = serving_sched_of(arg, instance);
    return x && devsched_others_active(x->dev, x->member);
}

/* One worker per instance, each on its device's scheduler where it has one. */
static int serving_workers_start(struct served_model *sm, struct error *err)
{
    struct model *m = &sm->model;
    if (sm->nsched > 0)
        batcher_set_device_probe(sm->batcher, serving_device_other_work, sm);
    struct worker_place *place = calloc((size_t)m->ninstances, sizeof *place);
    if (!place)
        return error_set(err, BG_ENOMEM, "out of memory");
    for (int i = 0; i < m->ninstances; i++) {
        const struct served_sched *x = serving_sched_of(sm, i);
        if (x)
            place[i] = (struct worker_place){x->dev, x->member};
    }
    int rc = workers_start(sm, place, &sm->workers, err);
    free(place);
    return rc;
}

static void serving_load_one(struct serving *s, struct served_model *sm)
{
    struct model *m = &sm->model;
    struct error err = {0};
    if (model_load(m, &err) != 0) {
        log_error("model %s: not loaded: %s", m->cfg.name, m->reason);
        atomic_store(&sm->state, SERVED_FAILED);
        return;
    }
    sm->batcher = batcher_new(m->cfg.name, &m->cfg.batching, m->ninstances, &err);
    if (sm->batcher)
        for (int i = 0; i < m->ninstances; i++)
            for (int w = 0; w < m->instances[i].nwarm; w++)
                batcher_seed(sm->batcher, i, m->instances[i].warm_rows[w],
                             m->instances[i].warm_ns[w]);
    int started = -1;
    if (sm->batcher && !sm->stats)
        error_set(&err, BG_ENOMEM, "out of memory for statistics");
    else if (sm->batcher && serving_sched_join(s, sm, &err) == 0) {
        modelstats_loaded(sm->stats);
        started = model_is_compute(m) ? serving_workers_start(sm, &err)
                                      : feed_start(sm, &sm->feed, &err);
    }
    if (started != 0) {
        snprintf(m->reason, sizeof m->reason, "cannot start workers: %s", err.msg);
        log_error("model %s: %s", m->cfg.name, m->reason);
        serving_model_stop(sm);
        atomic_store(&sm->state, SERVED_FAILED);
        return;
    }
    char ctx[48] = "";
    if (m->cold.context_s > 0)
        snprintf(ctx, sizeof ctx, ", of which device context %.1f", m->cold.context_s * 1e3);
    log_info("model %s: loaded on %s, %d instance%s, %.1f MiB; cold start %.1f ms "
             "(read %.1f, prepare %.1f%s, warmup %.1f)", m->cfg.name, model_backend_name(m), m->ninstances,
             m->ninstances == 1 ? "" : "s", (double)model_memory_bytes(m) / (1 << 20),
             m->cold.total_s * 1e3, m->cold.read_s * 1e3, m->cold.prepare_s * 1e3 + m->cold.context_s * 1e3, ctx,
             m->cold.warmup_s * 1e3);
    atomic_store(&sm->state, SERVED_READY);
}

void serving_load_all(struct serving *s)
{
    for (int i = 0; i < s->n; i++)
        if (atomic_load(&s->models[i].state) == SERVED_LOADING)
            serving_load_one(s, &s->models[i]);
}

struct devices_walk {
    struct served_model *sm;
    const struct modelstats_snapshot *snap;
    served_device_fn fn;
    void *arg;
};

static void serving_device_row(const struct model_device *d, void *arg)
{
    struct devices_walk *w = arg;
    struct served_model *sm = w->sm;
    struct served_device r = {.dev = *d};
    if (d->target) {
        httpc_target_stats(d->target, &r.server);
        r.url = httpc_target_url(d->target);
        r.busy_s = r.server.busy_s;
        r.held_s = r.server.age_s;
        r.util_10s = r.server.util_10s;
    } else {
        if (!w->snap->inst || d->instance >= w->snap->ninstances)
            return;   /* the snapshot ran out of memory for its instances */
        const struct modelstats_instance *in = &w->snap->inst[d->instance];
        r.busy_s = in->busy_s;
        r.busy_offline_s = in->busy_offline_s;
        r.held_s = in->loaded_s;
        r.util_10s = in->util_10s;
        r.batches = in->batches;
        r.rows = in->rows;
        /* Weights the instances share count on instance 0. */
        r.memory_bytes = sm->model.instances[d->instance].memory_bytes +
                         (d->instance == 0 ? sm->model.shared_bytes : 0);
    }
    r.idle_s = r.held_s > r.busy_s ? r.held_s - r.busy_s : 0;
    /* A server has no instance of its own: the model's batches all go
     * through instance 0's latency model (the upstream loop's). */
    double a = 0, b = 0, margin = 0;
    batcher_latency_model(sm->batcher, d->instance >= 0 ? d->instance : 0, &a, &b, &margin);
    r.lat_a_s = a / 1e9;
    r.lat_b_s = b / 1e9;
    r.lat_margin_s = margin / 1e9;
    w->fn(&r, w->arg);
}

void serving_model_devices(struct served_model *sm, const struct modelstats_snapshot *snap,
                           served_device_fn fn, void *arg)
{
    /* The loader owns batcher, ops and instances until it publishes READY. */
    if (atomic_load(&sm->state) != SERVED_READY || !sm->batcher)
        return;
    struct devices_walk w = {.sm = sm, .snap = snap, .fn = fn, .arg = arg};
    model_devices(&sm->model, serving_device_row, &w);
}

int serving_count(const struct serving *s) { return s->n; }
void serving_set_tenants(struct serving *s, const struct tenants_config *t) { s->tenants = t; }
const struct tenants_config *serving_tenants(const struct serving *s) { return s->tenants; }
struct served_model *serving_at(struct serving *s, int i) { return &s->models[i]; }

struct served_model *serving_find(struct serving *s, const char *name, size_t len)
{
    for (int i = 0; i < s->n; i++) {
        const char *mn = s->models[i].model.cfg.name;
        if (strlen(mn) == len && memcmp(mn, name, len) == 0)
            return &s->models[i];
    }
    return NULL;
}

bool serving_all_ready(struct serving *s)
{
    for (int i = 0; i < s->n; i++)
        if (atomic_load(&s->models[i].state) != SERVED_READY)
            return false;
    return true;
}

void serving_stop(struct serving *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        if (s->models[i].batcher)
            batcher_close(s->models[i].batcher);
    /* Workers still holding a batch run it without waiting for a slot. */
    for (int i = 0; i < s->ndevs; i++)
        devsched_close(s->devs[i]);
    for (int i = 0; i < s->n; i++)
        serving_model_stop(&s->models[i]);
}

void serving_free(struct serving *s)
{
    if (!s)
        return;
    /* A worker stranded in an abandoned call may still touch its model,
     * batcher, statistics and device slot when the call returns: those
     * stay, left to the process exit. */
    bool stranded = false;
    for (int i = 0; i < s->n; i++) {
        struct served_model *sm = &s->models[i];
        bool left = workers_stranded(sm->workers);
        stranded |= left;
        workers_free(sm->workers);
        sm->workers = NULL;
        if (left)
            continue;
        model_unload(&sm->model);
        batcher_free(sm->batcher);
        modelstats_free(sm->stats);
    }
    for (int i = 0; i < s->ndevs && !stranded; i++)
        devsched_free(s->devs[i]);
    if (!stranded)
        free(s->devs);
    free(s->models);
    free(s);
}

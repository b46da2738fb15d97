/* serving.c - see serving.h. */
#include "serving/serving.h"
#include "serving/serving_impl.h"

#include <dirent.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"
#include "serving/feed.h"
#include "serving/worker.h"

/* A new shares account gets the shares in force. */
/* The window's shares in force, when one was applied; under shares_mu. */
static void serving_shares_init_locked(struct serving *s, struct shares *sh)
{
    if (s->applied)
        shares_set(sh, s->applied_share, s->applied_offline);
}

static void serving_shares_init(struct serving *s, struct shares *sh)
{
    pthread_mutex_lock(&s->shares_mu);
    serving_shares_init_locked(s, sh);
    pthread_mutex_unlock(&s->shares_mu);
}

/* A copy's own shares are set from the window in force when they are made,
 * but serving_apply_shares reaches only copies that are ready and in the
 * table: a window that switched while this one loaded would have passed it
 * by until the next switch. Once published, it takes the latest here; any
 * later switch finds it in the table. */
void served_shares_refresh(struct serving *s, struct served_model *sm)
{
    if (sm->own_shares)
        serving_shares_init(s, sm->own_shares);
}

/* Whether tenants' shares are kept: more tenants than "default". */
static bool serving_has_tenants(const struct serving *s)
{
    return s->tenants && s->tenants->n > 1;
}

void serving_set_tenants(struct serving *s, const struct tenants_config *t) { s->tenants = t; }
const struct tenants_config *serving_tenants(const struct serving *s) { return s->tenants; }

static int serving_name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The numeric subfolders of dir (version folders), highest first; how
 * many (at most max), or -1 when dir cannot be read. */
static int served_version_dirs(const char *dir, int *out, int max)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        size_t len = strspn(nm, "0123456789");
        if (len == 0 || nm[len] || len > 9 || nm[0] == '0')
            continue;
        char path[8192];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        int v = atoi(nm), k;
        if (n < max)
            k = n++;
        else if (out[max - 1] < v)
            k = max - 1;   /* full: it replaces the lowest kept */
        else
            continue;
        while (k > 0 && out[k - 1] < v) {   /* insertion, highest first */
            out[k] = out[k - 1];
            k--;
        }
        out[k] = v;
    }
    closedir(d);
    return n;
}

bool served_policy_multi(const struct model_config *cfg)
{
    return cfg->version_policy.nspecific > 1 ||
           (cfg->version_policy.nspecific == 0 && cfg->version_policy.latest > 1);
}

int served_versions_selected(const char *dir, const struct model_config *cfg, int *out)
{
    const int spec = cfg->version_policy.nspecific;
    if (spec > 0) {   /* as listed, once each; missing ones fail on their own */
        int n = 0;
        for (int i = 0; i < spec; i++) {
            bool dup = false;
            for (int j = 0; j < n; j++)
                dup |= out[j] == cfg->version_policy.specific[i];
            if (!dup)
                out[n++] = cfg->version_policy.specific[i];
        }
        return n;
    }
    int n = served_version_dirs(dir, out, MODEL_MAX_VERSIONS);
    if (n <= 0)
        return 0;
    return n < cfg->version_policy.latest ? n : cfg->version_policy.latest;
}

/* The version folder an entry serves: its pinned one (a model serving
 * several versions has an entry per version), else the highest numeric
 * subfolder or version_policy.specific's; 0 when the folder has none (its
 * files are at its top, served as version 1). */
static int served_pick_version(const struct served_entry *e, const struct model_config *cfg,
                               int *version, struct error *err)
{
    *version = 0;
    int have[MODEL_MAX_VERSIONS];
    int n = served_version_dirs(e->dir, have, MODEL_MAX_VERSIONS);
    if (n < 0)
        return error_set(err, BG_ECONFIG, "model %s: cannot open %s: %s", cfg->name, e->dir,
                         strerror(errno));
    int want = e->pinned ? e->pinned
               : cfg->version_policy.nspecific ? cfg->version_policy.specific[0] : 0;
    if (!e->pinned && served_policy_multi(cfg))
        return error_set(err, BG_ECONFIG, "model %s: version_policy serves several versions; a "
                         "change between one and several applies at the next start", cfg->name);
    if (!want) {
        *version = n > 0 ? have[0] : 0;
        return 0;
    }
    char path[8300];
    struct stat st;
    snprintf(path, sizeof path, "%s/%d", e->dir, want);
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return error_set(err, BG_ECONFIG, "model %s: version_policy%s: version %d is not in %s "
                         "(no folder %d/)", cfg->name, e->pinned ? "" : ".specific", want, e->dir,
                         want);
    *version = want;
    return 0;
}

int served_policy_keeps(const struct served_entry *e, const struct model_config *cfg,
                        struct error *err)
{
    if (!e->pinned)
        return 0;
    if (!served_policy_multi(cfg))
        return error_set(err, BG_ECONFIG, "model %s: the load's version_policy serves one "
                         "version; a change between one and several applies at the next "
                         "start", cfg->name);
    int sel[MODEL_MAX_VERSIONS];
    int ns = served_versions_selected(e->dir, cfg, sel);
    for (int i = 0; i < ns; i++)
        if (sel[i] == e->pinned)
            return 0;
    return error_set(err, BG_ECONFIG, "model %s: the load's version_policy does not serve "
                     "version %d, which is served now: the versions served side by side change "
                     "through config.json (the repository poll, or the next start), not a "
                     "load's config", cfg->name, e->pinned);
}

int served_config_read(const struct served_entry *e, const char *override,
                       struct model_config *cfg, int *version, struct error *err)
{
    int rc = override ? model_config_load_text(e->dir, e->name, override, strlen(override),
                                               "the load request's config", cfg, err)
                      : model_config_load(e->dir, e->name, cfg, err);
    *version = 0;
    if (rc == 0)
        rc = served_pick_version(e, cfg, version, err);
    /* The weights are the folder's (or its version's) whatever the config says. */
    if (*version)
        snprintf(cfg->dir, sizeof cfg->dir, "%.4000s/%d", e->dir, *version);
    else
        snprintf(cfg->dir, sizeof cfg->dir, "%s", e->dir);
    return rc;
}

int served_config_there(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 || lstat(path, &st) == 0)
        return 1;
    return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
}

static void served_stat(const char *path, int64_t out[4])
{
    struct stat st;
    if (stat(path, &st) != 0) {
        out[0] = out[1] = out[2] = out[3] = -1;
        return;
    }
    out[0] = (int64_t)st.st_ino;
    out[1] = (int64_t)st.st_size;
    out[2] = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    /* A chmod changes no byte nor the mtime: a load refused for
     * permission ("Permission denied") was not tried again once fixed. */
    out[3] = (int64_t)(st.st_mode & 07777);
}

void served_sig_read(const struct served_entry *e, const struct model_config *cfg, int version,
                     struct served_sig *sig)
{
    char path[8300];
    memset(sig, 0, sizeof *sig);
    snprintf(path, sizeof path, "%s/config.json", e->dir);
    served_stat(path, sig->config);
    snprintf(path, sizeof path, "%s/model.safetensors", cfg->dir);
    served_stat(path, sig->weights);
    sig->version = version;
}

/* A new entry for the model folder dir/name, published with a shell copy:
 * FAILED when its config is invalid, else LOADING (eager) or UNLOADED
 * (lazy). */
/* How many instances a model's statistics keep: its instances (loaded:
 * `loaded`, else as configured); an LLM pool's calls count per endpoint,
 * and an upstream model's batches per server, so that the usage ledger
 * charges each server what was sent to it. */
static int served_stats_instances(const struct model_config *cfg, int loaded)
{
    if (cfg->backend == MODEL_BACKEND_OPENAI)
        return cfg->pool.nendpoints > 0 ? cfg->pool.nendpoints : 1;
    if (cfg->backend == MODEL_BACKEND_UPSTREAM)
        return cfg->upstream.nurls > 0 ? cfg->upstream.nurls : 1;
    return loaded > 0 ? loaded : cfg->instance_count;
}

int served_entry_add(struct serving *s, const char *name, int pinned, struct error *err)
{
    int n = atomic_load(&s->n);
    if (n >= SERVING_MAX_MODELS)
        return error_set(err, BG_ECONFIG, "model %s: batchgate keeps at most %d models, those "
                         "removed from the repository included, until it restarts", name,
                         SERVING_MAX_MODELS);
    struct served_entry *e = calloc(1, sizeof *e);
    struct model_config *cfg = calloc(1, sizeof *cfg);
    if (!e || !cfg) {
        free(e);
        free(cfg);
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    e->serving = s;
    e->index = n;
    e->pinned = pinned;
    snprintf(e->name, sizeof e->name, "%s", name);
    if (strlen(s->dir) + 1 + strlen(name) >= sizeof e->dir) {
        free(e);
        free(cfg);
        return error_set(err, BG_ECONFIG, "model %s: its folder's path is too long", name);
    }
    snprintf(e->dir, sizeof e->dir, "%.3900s/%.127s", s->dir, name);
    pthread_mutex_init(&e->mu, NULL);
    struct error ce = {0};
    int version = 0;
    int bad = served_config_read(e, NULL, cfg, &version, &ce) != 0;
    if (bad)
        snprintf(cfg->name, sizeof cfg->name, "%s", name);
    served_sig_read(e, cfg, version, &e->sig);
    /* Statistics exist from the start: requests to a model that failed
     * or is not loaded are counted too (as not_ready). */
    e->stats = modelstats_new(s->io_threads, bad ? 1 : served_stats_instances(cfg, 0),
                              bad ? 1 : cfg->batching.max_batch_size);
    const char *reason = bad ? ce.msg
                         : cfg->lifecycle.lazy ? "not loaded yet (lifecycle.load \"lazy\": the "
                                                 "first request loads it)"
                                               : "";
    int state = bad ? SERVED_FAILED : cfg->lifecycle.lazy ? SERVED_UNLOADED : SERVED_LOADING;
    struct served_model *sh = e->stats ? served_shell_new(s, e, cfg, state, reason) : NULL;
    if (sh)
        sh->version = version ? version : pinned ? pinned : 1;
    free(cfg);
    if (!sh) {
        modelstats_free(e->stats);
        pthread_mutex_destroy(&e->mu);
        free(e);
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    e->cur = sh;
    if (bad) {   /* a load at start that failed, as model_loads_total counts it */
        atomic_fetch_add(&e->loads[1], 1);
        log_error("model %s: not loaded: %s", name, ce.msg);
    }
    s->entries[n] = e;
    atomic_store(&s->n, n + 1);   /* published: lookups see it whole */
    return 0;
}

bool serving_folder_first_said(struct serving *s, const char *name)
{
    /* By the name's hash (FNV-1a: a collision only silences a name). Past
     * SERVING_BAD_FOLDERS names one line says the others go unnamed. */
    uint64_t h = hash_str(name);
    int n = s->nbad_folders < SERVING_BAD_FOLDERS ? s->nbad_folders : SERVING_BAD_FOLDERS;
    for (int i = 0; i < n; i++)
        if (s->bad_folders[i] == h)
            return false;
    if (s->nbad_folders >= SERVING_BAD_FOLDERS) {
        if (s->nbad_folders == SERVING_BAD_FOLDERS && ++s->nbad_folders)
            log_warn("model repository: over %d folders skipped or refused; the others are "
                     "not named", SERVING_BAD_FOLDERS);
        return false;
    }
    s->bad_folders[s->nbad_folders++] = h;
    return true;
}

void serving_warn_bad_folder(struct serving *s, const char *name)
{
    if (!serving_folder_first_said(s, name))
        return;
    char shown[3 * 64 + 1];
    size_t k = 0;
    const unsigned char *p = (const unsigned char *)name;
    for (; *p && k + 4 < sizeof shown; p++)
        k += (size_t)snprintf(shown + k, sizeof shown - k, *p > ' ' && *p < 0x7f ? "%c" : "\\x%02x",
                              *p);
    if (strlen(name) >= MODEL_NAME_MAX)
        log_warn("model repository: folder \"%s%s\" skipped: a model's name is at most %d "
                 "characters (rename the folder)", shown, *p ? "..." : "", MODEL_NAME_MAX - 1);
    else
        log_warn("model repository: folder \"%s\" skipped: a model's name may use only "
                 "letters, digits, _ - . (rename the folder)", shown);
}

int serving_add_model(struct serving *s, const char *name, struct error *err)
{
    if (!model_name_ok(name))
        return error_set(err, BG_ENOTFOUND, "\"%.80s\" is no model name: letters, digits, _ - . "
                         "only, at most %d of them", name, MODEL_NAME_MAX - 1);
    /* A policy serving several versions: an entry per version, pinned. */
    char dir[8300];
    snprintf(dir, sizeof dir, "%s/%s", s->dir, name);
    struct model_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return error_set(err, BG_ENOMEM, "out of memory");
    struct error ce = {0};
    int vs[MODEL_MAX_VERSIONS], nv = 0;
    if (model_config_load(dir, name, cfg, &ce) == 0 && served_policy_multi(cfg))
        nv = served_versions_selected(dir, cfg, vs);
    free(cfg);
    if (nv == 0)
        return served_entry_add(s, name, 0, err);
    for (int i = 0; i < nv; i++) {
        int rc = served_entry_add(s, name, vs[i], err);
        if (rc)
            return rc;
    }
    return 0;
}

int serving_open(const char *dir, bool required, int io_threads, struct serving **out,
                 struct error *err)
{
    struct serving *s = calloc(1, sizeof *s);
    if (s && !(s->entries = calloc(SERVING_MAX_MODELS, sizeof *s->entries))) {
        free(s);
        s = NULL;
    }
    if (!s)
        return error_set(err, BG_ENOMEM, "out of memory");
    s->io_threads = io_threads;
    s->auto_pick[0] = backend_auto_pick(false);
    s->auto_pick[1] = backend_auto_pick(true);
    pthread_mutex_init(&s->shares_mu, NULL);
    pthread_mutex_init(&s->lc_mu, NULL);
    pthread_cond_init(&s->lc_cv, NULL);
    s->tasks_tail = &s->tasks;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    *out = s;
    DIR *d = opendir(dir);
    if (!d) {
        if (!required && errno == ENOENT) {
            log_warn("model repository %s does not exist: serving no models", dir);
            return 0;
        }
        int e = errno;
        serving_free(s);
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
        snprintf(path, sizeof path, "%s/%s/config.json", dir, de->d_name);
        if (served_config_there(path) != 1)
            continue;   /* not a model folder */
        if (!model_name_ok(de->d_name)) {
            /* Listed as a failed model, its name went raw into /metrics
             * (a scrape Prometheus refused whole), JSON and the dashboard. */
            serving_warn_bad_folder(s, de->d_name);
            continue;
        }
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
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0)
            rc = serving_add_model(s, names[i], err);
        free(names[i]);
    }
    free(names);
    if (rc) {
        serving_free(s);
        *out = NULL;
        return rc;
    }
    /* Models are folders; a model serving several versions side by side
     * has an entry each. */
    int count = atomic_load(&s->n);
    if (count > n)
        log_info("model repository %s: %d model%s (%d entries with their versions)", dir, n,
                 n == 1 ? "" : "s", count);
    else
        log_info("model repository %s: %d model%s", dir, count, count == 1 ? "" : "s");
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
/* The device's scheduler (and tenant shares), made on first use; its index. */
static int serving_devsched_get(struct serving *s, const char *name, struct error *err)
{
    for (int i = 0; i < s->ndevs; i++)
        if (strcmp(devsched_name(s->devs[i]), name) == 0)
            return i;
    /* Under the lock its readers hold (apply, the rows): a realloc moves
     * the arrays they walk. */
    pthread_mutex_lock(&s->shares_mu);
    struct devsched **nd = realloc(s->devs, (size_t)(s->ndevs + 1) * sizeof *nd);
    if (nd)
        s->devs = nd;
    struct shares **ns = nd ? realloc(s->dev_shares, (size_t)(s->ndevs + 1) * sizeof *ns) : NULL;
    if (ns)
        s->dev_shares = ns;
    pthread_mutex_unlock(&s->shares_mu);
    if (!nd || !ns)
        return error_set(err, BG_ENOMEM, "out of memory for the scheduler of device %s", name);
    struct devsched *d = devsched_new(name, err);
    if (!d)
        return -err->code;
    struct shares *sh = NULL;
    if (serving_has_tenants(s) && !(sh = shares_new(name, s->tenants, 1, err))) {
        devsched_free(d);
        return -err->code;
    }
    devsched_set_shares(d, sh);
    pthread_mutex_lock(&s->shares_mu);   /* the device list is read by apply and the rows */
    if (sh)   /* in the same hold as it joins the list apply walks: no switch between */
        serving_shares_init_locked(s, sh);
    s->devs[s->ndevs] = d;
    s->dev_shares[s->ndevs] = sh;
    int k = s->ndevs++;
    pthread_mutex_unlock(&s->shares_mu);
    return k;
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
        int k = serving_devsched_get(s, name, err);
        if (k < 0)
            return k;
        struct devsched *d = s->devs[k];
        int member = devsched_join(d, m->cfg.name, m->cfg.sched_weight, here, err);
        if (member < 0)
            return member;
        sm->sched[sm->nsched++] = (struct served_sched){d, member, id, s->dev_shares[k]};
    }
    return 0;
}

struct serving_devices_name {
    char name[48];
    bool cut;
};

/* The devices' names joined ("cpu0+cpu1"); "+..." where they do not fit. */
static void serving_devices_join(const struct model_device *d, void *arg)
{
    struct serving_devices_name *a = arg;
    size_t n = strlen(a->name), k = strlen(d->name);
    if (a->cut)
        return;
    if (!n && k < sizeof a->name) {
        memcpy(a->name, d->name, k + 1);
    } else if (n + 1 + k + 5 <= sizeof a->name) {   /* room for "+...\0" after it */
        a->name[n] = '+';
        memcpy(a->name + n + 1, d->name, k + 1);
    } else {
        if (n + 5 <= sizeof a->name)
            memcpy(a->name + n, "+...", 5);
        a->cut = true;
    }
}

/* The tenant shares an instance's batches are charged to and ranked by
 * (instance -1: a loop backend's); NULL without tenants. */
static struct shares *serving_shares_of(struct served_model *sm, int instance)
{
    const struct served_sched *x = serving_sched_of(sm, instance);
    return x ? x->shares : sm->own_shares;
}

/* batcher_set_tenant_rank's: the instance's device decides. */
static int serving_tenant_rank(void *arg, int instance, int64_t now_ns, const bool *has,
                               int *order, int64_t *retry_ns, int64_t *held_ns,
                               bool *offline_first, bool *off_held)
{
    struct shares *sh = serving_shares_of(arg, instance);
    *offline_first = shares_offline_owed(sh, now_ns);
    return shares_rank(sh, now_ns, has, order, retry_ns, held_ns, off_held);
}

/* With tenants: a model with an instance on no shared device (or on a loop
 * backend) is its own device for the shares, and every batch it cuts is
 * ranked by tenant. */
static int serving_shares_join(struct serving *s, struct served_model *sm, struct error *err)
{
    struct model *m = &sm->model;
    if (!serving_has_tenants(s))
        return 0;
    /* sm->tenants is the shell's from its creation (served_shell_new):
     * written again here, while the stats endpoint may read it, it raced. */
    bool own = !model_is_compute(m);
    for (int i = 0; i < m->ninstances && !own; i++)
        own = !serving_sched_of(sm, i);
    if (own) {
        /* Named by every device it covers: one account for all of them
         * (named by the first, a 2-instance model's tenants showed all
         * their time on cpu0 and none on cpu1). */
        char name[48] = "";
        struct serving_devices_name all = {.name = ""};
        model_devices(m, serving_devices_join, &all);
        snprintf(name, sizeof name, "%s", all.name[0] ? all.name : model_backend_name(m));
        int slots = model_is_compute(m) ? m->ninstances : model_loop_slots(m);
        if (!(sm->own_shares = shares_new(name, s->tenants, slots, err)))
            return -err->code;
        serving_shares_init(s, sm->own_shares);
    }
    batcher_set_tenant_rank(sm->batcher, serving_tenant_rank, sm);
    return 0;
}

void served_copy_stop(struct served_model *sm)
{
    if (sm->batcher)
        batcher_close(sm->batcher);
    workers_join(sm->workers);
    feed_stop(sm->feed);
    sm->feed = NULL;
    llmpool_stop(sm->pool);
    if (sm->holds_stats)   /* its instances' held time stops with it (unless another copy's runs) */
        modelstats_unloaded(sm->stats, sm->holds_stats);
    sm->holds_stats = 0;
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
            place[i] = (struct worker_place){x->dev, x->member, x->shares};
        else
            place[i].shares = sm->own_shares;
    }
    int rc = workers_start(sm, place, &sm->workers, err);
    free(place);
    return rc;
}

struct served_model *served_shell_new(struct serving *s, struct served_entry *e,
                                      const struct model_config *cfg, int state,
                                      const char *reason)
{
    struct served_model *sm = calloc(1, sizeof *sm);
    if (!sm)
        return NULL;
    sm->model.cfg = *cfg;
    if (cfg->backend == MODEL_BACKEND_AUTO)
        sm->model.planned = s->auto_pick[cfg->kind == MODEL_KIND_ENCODER];
    snprintf(sm->model.reason, sizeof sm->model.reason, "%s", reason ? reason : "");
    sm->entry = e;
    sm->version = e->cur ? e->cur->version : 1;
    /* The last load's cold start, shown while unloaded (SPEC.md: "the
     * last load"; its series went with the copy). Read on the lifecycle
     * thread, which writes it. */
    if (e->cur)
        sm->model.cold = e->cur->model.cold;
    /* Its tenants' rows and time stay readable while it is out (the stats
     * endpoint dropped them); the tenants are read at start only. */
    sm->tenants = s->tenants;
    sm->stats = e->stats;
    atomic_store(&sm->refs, 1);   /* the table's, once swapped in */
    atomic_store(&sm->state, state);
    return sm;
}

/* The entry's statistics fit the copy's instances and batch sizes; a
 * reload that grows them starts new ones, of both sizes' larger, which go
 * on from the old (modelstats_retire; the old stay writable by the copies
 * that point at them, and are freed with the table). */
static int served_stats_fit(struct served_entry *e, const struct model *m)
{
    int ninst = served_stats_instances(&m->cfg, m->ninstances);
    int maxb = m->cfg.batching.max_batch_size;
    if (modelstats_fits(e->stats, ninst, maxb))
        return 0;
    int old_inst = modelstats_instances(e->stats), old_maxb = modelstats_max_batch(e->stats);
    struct modelstats *ns = modelstats_new(modelstats_io_threads(e->stats),
                                           ninst > old_inst ? ninst : old_inst,
                                           maxb > old_maxb ? maxb : old_maxb);
    if (!ns)
        return -1;
    pthread_mutex_lock(&e->mu);
    modelstats_retire(ns, e->stats);   /* freed with ns */
    e->stats = ns;
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void serving_set_cache_dir(struct serving *s, const char *dir)
{
    snprintf(s->cache_dir, sizeof s->cache_dir, "%s", dir ? dir : "");
}

struct seen_walk {
    struct model_device *d;
    int n, cap;
};

static void served_seen_add(const struct model_device *d, void *arg)
{
    struct seen_walk *w = arg;
    if (!d->target && w->n < w->cap)   /* a server's counters are its own, gone with it */
        w->d[w->n++] = *d;
}

/* Remembers where the copy's instances run (served_entry.seen). */
static void served_seen_set(struct served_entry *e, const struct model *m)
{
    struct seen_walk w = {.cap = m->ninstances > 0 ? m->ninstances : 1};
    if (!(w.d = calloc((size_t)w.cap, sizeof *w.d)))
        return;   /* the last copy's stay */
    model_devices(m, served_seen_add, &w);
    pthread_mutex_lock(&e->mu);
    free(e->seen);
    e->seen = w.d;
    e->nseen = w.n;
    for (int i = 0; i < w.n; i++) {
        int k = w.d[i].instance;
        if (k >= e->nplaced) {
            char (*p)[48] = realloc(e->placed, (size_t)(k + 1) * sizeof *p);
            if (!p)
                break;
            memset(p + e->nplaced, 0, (size_t)(k + 1 - e->nplaced) * sizeof *p);
            e->placed = p;
            e->nplaced = k + 1;
        }
        snprintf(e->placed[k], sizeof e->placed[k], "%s", w.d[i].name);
    }
    pthread_mutex_unlock(&e->mu);
}

bool serving_instance_device(struct served_model *sm, int instance, char *out, size_t cap)
{
    struct served_entry *e = sm->entry;
    if (!e || instance < 0)
        return false;
    pthread_mutex_lock(&e->mu);
    bool found = instance < e->nplaced && e->placed[instance][0];
    if (found)
        snprintf(out, cap, "%s", e->placed[instance]);
    pthread_mutex_unlock(&e->mu);
    return found;
}

int served_copy_load(struct serving *s, struct served_model *sm)
{
    struct model *m = &sm->model;
    struct error err = {0};
    m->cache_dir = s->cache_dir[0] ? s->cache_dir : NULL;
    if (model_load(m, &err) != 0)
        return -1;   /* m->reason says why; the caller logs it (lifecycle_load_now) */
    if (served_stats_fit(sm->entry, m) != 0) {
        snprintf(m->reason, sizeof m->reason, "out of memory for statistics");
        model_unload(m);
        return -1;
    }
    sm->stats = sm->entry->stats;
    sm->batcher = batcher_new(m->cfg.name, &m->cfg.batching, m->ninstances, &err);
    struct served_entry *e = sm->entry;
    if (sm->batcher)
        for (int i = 0; i < m->ninstances; i++) {
            /* A light load (lifecycle.c decides) runs no warmup: the timings
             * of the last full one of the same files seed it instead. */
            for (int w = 0; m->warm_light && w < e->warm_n; w++)
                batcher_seed(sm->batcher, i, e->warm_rows[w], e->warm_tokens[w],
                             e->warm_tokens_sq[w], e->warm_ns[w]);
            const struct instance *in = &m->instances[i];
            for (int w = 0; w < in->nwarm; w++)
                batcher_seed(sm->batcher, i, in->warm_rows[w], in->warm_tokens[w],
                             in->warm_tokens_sq[w], in->warm_ns[w]);
        }
    if (sm->batcher && !m->warm_light && m->ninstances > 0) {
        e->warm_n = m->instances[0].nwarm;
        memcpy(e->warm_rows, m->instances[0].warm_rows, sizeof e->warm_rows);
        memcpy(e->warm_tokens, m->instances[0].warm_tokens, sizeof e->warm_tokens);
        memcpy(e->warm_tokens_sq, m->instances[0].warm_tokens_sq, sizeof e->warm_tokens_sq);
        memcpy(e->warm_ns, m->instances[0].warm_ns, sizeof e->warm_ns);
    }
    int started = -1;
    if (sm->batcher && model_is_pool(m)) {
        /* A pool runs no batches here: its servers batch (llmpool.h). Its
         * batcher stays empty, so that every reader of a copy finds one. */
        sm->holds_stats = served_stats_instances(&m->cfg, m->ninstances);
        modelstats_loaded(sm->stats, sm->holds_stats);
        int nt = s->tenants ? s->tenants->n : 1;
        sm->pool = llmpool_new(m, nt, &err);
        started = sm->pool ? llmpool_start(sm->pool, &err) : -1;
    } else if (sm->batcher && serving_sched_join(s, sm, &err) == 0 &&
        serving_shares_join(s, sm, &err) == 0) {
        sm->holds_stats = served_stats_instances(&m->cfg, m->ninstances);
        modelstats_loaded(sm->stats, sm->holds_stats);
        started = model_is_compute(m) ? serving_workers_start(sm, &err)
                                      : feed_start(sm, &sm->feed, &err);
    }
    if (started != 0) {
        snprintf(m->reason, sizeof m->reason, "cannot start workers: %s", err.msg);
        log_error("model %s: %s", m->cfg.name, m->reason);
        served_copy_stop(sm);
        workers_free(sm->workers);
        sm->workers = NULL;
        /* Its places on the devices it joined (64 at most each: a device
         * that failed 64 starts took no model any more). */
        for (int i = 0; i < sm->nsched; i++)
            devsched_leave(sm->sched[i].dev, sm->sched[i].member);
        sm->nsched = 0;
        batcher_free(sm->batcher);
        sm->batcher = NULL;
        shares_free(sm->own_shares);
        sm->own_shares = NULL;
        llmpool_free(sm->pool);
        sm->pool = NULL;
        model_unload(m);
        return -1;
    }
    char ctx[48] = "";
    if (m->cold.context_s > 0)
        snprintf(ctx, sizeof ctx, ", of which device context %.1f", m->cold.context_s * 1e3);
    char ver[24] = "";
    if (served_pinned_version(sm))   /* one of several versions served side by side */
        snprintf(ver, sizeof ver, " version %d", sm->version);
    log_info("model %s%s: loaded on %s, %d instance%s, %.1f MiB; cold start %.1f ms "
             "(read %.1f, prepare %.1f%s, warmup %.1f)", m->cfg.name, ver, model_backend_name(m), m->ninstances,
             m->ninstances == 1 ? "" : "s", (double)model_memory_bytes(m) / (1 << 20),
             m->cold.total_s * 1e3, m->cold.read_s * 1e3, m->cold.prepare_s * 1e3 + m->cold.context_s * 1e3, ctx,
             m->cold.warmup_s * 1e3);
    served_seen_set(e, m);
    atomic_store(&sm->state, SERVED_READY);
    return 0;
}

/* The copy's own tenant accounts go to its entry's, before they are freed. */
static void served_shares_fold(struct served_model *sm)
{
    struct served_entry *e = sm->entry;
    if (!sm->own_shares || !e)
        return;
    pthread_mutex_lock(&e->mu);
    snprintf(e->gone_device, sizeof e->gone_device, "%s", shares_device(sm->own_shares));
    for (int t = 0; t < shares_tenants(sm->own_shares) && t < TENANTS_MAX; t++) {
        struct shares_tenant_stats ts;
        shares_tenant_stats(sm->own_shares, t, &ts);
        e->gone[t].busy_s[0] += ts.busy_s[0];
        e->gone[t].busy_s[1] += ts.busy_s[1];
        e->gone[t].borrowed_s += ts.borrowed_s;
        e->gone[t].share = ts.share;
    }
    e->has_gone = true;
    pthread_mutex_unlock(&e->mu);
}

bool served_copy_free(struct served_model *sm)
{
    if (!sm)
        return true;
    served_copy_stop(sm);
    /* A worker stranded in an abandoned call may still touch the copy when
     * the call returns: it stays, left to the process exit. */
    if (workers_stranded(sm->workers)) {
        workers_free(sm->workers);
        sm->workers = NULL;
        return false;
    }
    workers_free(sm->workers);
    /* Its places on the devices are free for the next copy (they were
     * kept: after 64 loads a device took no model any more). */
    for (int i = 0; i < sm->nsched; i++)
        devsched_leave(sm->sched[i].dev, sm->sched[i].member);
    llmpool_free(sm->pool);
    model_unload(&sm->model);
    batcher_free(sm->batcher);
    served_shares_fold(sm);
    shares_free(sm->own_shares);
    free(sm);
    return true;
}

size_t served_copy_bytes_on(const struct served_model *sm, const char *dev)
{
    size_t n = 0;
    const struct model *m = &sm->model;
    if (atomic_load(&sm->state) != SERVED_READY)
        return 0;
    for (int i = 0; i < m->ninstances; i++) {
        char name[48];
        int id = m->instances[i].device;
        snprintf(name, sizeof name, "%s%d", model_backend_name(m), id >= 0 ? id : i);
        if (strcmp(name, dev) == 0)
            n += model_instance_bytes(m, i);
    }
    return n;
}

int served_config_devices(const struct serving *s, const struct model_config *cfg,
                          char (*out)[48], int max)
{
    /* "auto" is the backend the start picked for this kind (it was
     * budgeted on the cpu whatever it ran on). */
    const char *be = cfg->backend == MODEL_BACKEND_CUDA ? "cuda"
                     : cfg->backend == MODEL_BACKEND_SYNTHETIC ? "synthetic"
                     : cfg->backend == MODEL_BACKEND_UPSTREAM ? "upstream"
                     : cfg->backend == MODEL_BACKEND_AUTO &&
                               s->auto_pick[cfg->kind == MODEL_KIND_ENCODER] &&
                               strcmp(s->auto_pick[cfg->kind == MODEL_KIND_ENCODER], "cuda") == 0
                         ? "cuda"
                         : "cpu";
    /* Instance i runs on devices[i % ndevices] (backend.c), labelled as
     * served_copy_bytes_on labels it. */
    int ninst = cfg->instance_count > 0 ? cfg->instance_count : 1;
    int n = 0;
    for (int i = 0; i < ninst && n < max; i++) {
        int id = cfg->ndevices > 0 ? cfg->devices[i % cfg->ndevices] : -1;
        char label[48];
        snprintf(label, sizeof label, "%s%d", be, id >= 0 ? id : i);
        bool seen = false;
        for (int k = 0; k < n && !seen; k++)
            seen = strcmp(out[k], label) == 0;
        if (!seen)
            memcpy(out[n++], label, sizeof label);
    }
    return n;
}

struct devices_walk {
    struct served_model *sm;
    bool loaded;                      /* sm's batcher and instances are there */
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
        r.idle_s = r.held_s > r.busy_s ? r.held_s - r.busy_s : 0;
    } else {
        if (!w->snap->inst || d->instance >= w->snap->ninstances)
            return;   /* the snapshot ran out of memory for its instances */
        const struct modelstats_instance *in = &w->snap->inst[d->instance];
        r.busy_s = in->busy_s;
        r.busy_offline_s = in->busy_offline_s;
        r.held_s = in->held_s;
        r.idle_s = in->idle_s;
        r.util_10s = in->util_10s;
        r.batches = in->batches;
        r.rows = in->rows;
        /* Weights the instances share count on instance 0. */
        if (w->loaded)
            r.memory_bytes = model_instance_bytes(&sm->model, d->instance);
    }
    /* A server has no instance of its own: the model's batches all go
     * through instance 0's latency model (the upstream loop's). */
    double a = 0, b = 0, margin = 0;
    if (w->loaded)
        batcher_latency_model(sm->batcher, d->instance >= 0 ? d->instance : 0, &a, &b, &margin);
    r.lat_a_s = a / 1e9;
    r.lat_b_s = b / 1e9;
    r.lat_margin_s = margin / 1e9;
    w->fn(&r, w->arg);
}

void serving_model_devices(struct served_model *sm, const struct modelstats_snapshot *snap,
                           served_device_fn fn, void *arg)
{
    struct devices_walk w = {.sm = sm, .snap = snap, .fn = fn, .arg = arg};
    /* The loader owns batcher, ops and instances until it publishes READY. */
    if (atomic_load(&sm->state) == SERVED_READY && sm->batcher) {
        w.loaded = true;
        model_devices(&sm->model, serving_device_row, &w);
        return;
    }
    /* Not loaded: the instances where the last copy left them, so that
     * their counters stay in view (a series that vanished while a model
     * was out would be a gap to every scraper). */
    struct served_entry *e = sm->entry;
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    int n = e->nseen;
    struct model_device *seen = n ? malloc((size_t)n * sizeof *seen) : NULL;
    if (seen)
        memcpy(seen, e->seen, (size_t)n * sizeof *seen);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < n && seen; i++)
        serving_device_row(&seen[i], &w);
    free(seen);
}


double served_capacity_rows_per_s(struct served_model *sm)
{
    if (atomic_load(&sm->state) != SERVED_READY || !sm->batcher)
        return 0;
    const struct model_config *c = &sm->model.cfg;
    bool compute = model_is_compute(&sm->model);
    int slots = compute ? sm->model.ninstances : model_loop_slots(&sm->model);
    double budget_ns = (double)c->batching.latency_budget_ms * 1e6, total = 0;
    for (int i = 0; i < slots; i++) {
        double a, b, margin;
        /* A loop backend's slots share instance 0's latency model. */
        batcher_latency_model(sm->batcher, compute ? i : 0, &a, &b, &margin);
        int rows = c->batching.max_batch_size;
        if (budget_ns > 0 && b > 0 && a + b * rows + margin > budget_ns) {
            double fit = (budget_ns - a - margin) / b;
            rows = fit >= 1 ? (int)fit : 1;
        }
        double exec = a + b * rows;
        if (exec > 0)
            total += rows / (exec / 1e9);
    }
    return total;
}

int serving_count(const struct serving *s) { return atomic_load(&s->n); }

static struct served_model *served_entry_acquire(struct served_entry *e)
{
    pthread_mutex_lock(&e->mu);
    struct served_model *sm = e->cur;
    atomic_fetch_add(&sm->refs, 1);
    pthread_mutex_unlock(&e->mu);
    return sm;
}

struct served_model *serving_acquire_at(struct serving *s, int i)
{
    if (i < 0 || i >= atomic_load(&s->n))
        return NULL;
    return served_entry_acquire(s->entries[i]);
}

static bool served_named(const struct served_entry *e, const char *name, size_t len)
{
    return strlen(e->name) == len && memcmp(e->name, name, len) == 0;
}

/* A model serving several versions has an entry per version: the name
 * alone reaches the highest READY one, else the highest not retired, else
 * the first. */
struct served_model *serving_acquire(struct serving *s, const char *name, size_t len)
{
    int n = atomic_load(&s->n), best = -1;
    int64_t best_rank = -1;
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        if (!served_named(e, name, len))
            continue;
        if (!e->pinned)
            return served_entry_acquire(e);   /* the only one of its name */
        pthread_mutex_lock(&e->mu);
        int ready = atomic_load(&e->cur->state) == SERVED_READY;
        bool retired = e->retired;
        pthread_mutex_unlock(&e->mu);
        /* READY first, then not retired, then by version. */
        int64_t rank = (int64_t)(ready ? 2 : !retired ? 1 : 0) << 32 | (int64_t)e->pinned;
        if (rank > best_rank) {
            best_rank = rank;
            best = i;
        }
    }
    return best >= 0 ? served_entry_acquire(s->entries[best]) : NULL;
}

int served_names_check(struct serving *s, const struct served_entry *e,
                       const struct model_config *cfg, struct error *err)
{
    int n = atomic_load(&s->n), rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        struct served_entry *o = s->entries[i];
        if (o == e || strcmp(o->name, e->name) == 0)   /* itself, or another of its versions */
            continue;
        pthread_mutex_lock(&o->mu);
        if (atomic_load(&o->cur->state) == SERVED_FAILED) {   /* reaches nothing */
            pthread_mutex_unlock(&o->mu);
            continue;
        }
        const struct model_config *oc = &o->cur->model.cfg;
        for (int k = 0; cfg->kind == MODEL_KIND_POOL && k < cfg->pool.naliases && rc == 0; k++)
            if (model_config_answers_to(oc, cfg->pool.aliases[k]))
                rc = error_set(err, BG_ECONFIG, "model %s: aliases[%d]: \"%s\" is already a name "
                               "of model %s (a name reaches one model)", cfg->name, k,
                               cfg->pool.aliases[k], o->name);
        if (rc == 0 && oc->kind == MODEL_KIND_POOL && model_config_answers_to(oc, cfg->name))
            rc = error_set(err, BG_ECONFIG, "model %s: its name is an alias of pool %s (a name "
                           "reaches one model)", cfg->name, o->name);
        pthread_mutex_unlock(&o->mu);
    }
    return rc;
}

bool serving_is_pool(struct serving *s, const char *name)
{
    struct served_model *sm = serving_acquire(s, name, strlen(name));
    bool pool = sm && sm->model.cfg.kind == MODEL_KIND_POOL;
    if (sm)
        served_release(sm);
    return pool;
}

struct served_model *serving_acquire_version(struct serving *s, const char *name, size_t len,
                                             int version)
{
    int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        if (!served_named(e, name, len))
            continue;
        struct served_model *sm = served_entry_acquire(e);
        if (sm->version == version)
            return sm;
        served_release(sm);
    }
    return NULL;
}

int serving_versions(struct serving *s, const char *name, size_t len, int *out, int max)
{
    int n = atomic_load(&s->n), k = 0;
    for (int i = 0; i < n && k < max; i++) {
        struct served_entry *e = s->entries[i];
        if (!served_named(e, name, len))
            continue;
        pthread_mutex_lock(&e->mu);
        if (!e->retired)
            out[k++] = e->cur->version;
        pthread_mutex_unlock(&e->mu);
    }
    return k;
}

int served_pinned_version(const struct served_model *sm) { return sm->entry->pinned; }

bool serving_shown_at(struct serving *s, int i)
{
    if (i < 0 || i >= atomic_load(&s->n))
        return false;
    int64_t at = atomic_load(&s->entries[i]->unlisted_ns);
    return at == 0 || now_ns() - at < s->removed_keep_ns;
}

bool serving_listed_at(struct serving *s, int i)
{
    return i >= 0 && i < atomic_load(&s->n) && atomic_load(&s->entries[i]->unlisted_ns) == 0;
}

void served_release(struct served_model *sm)
{
    /* The table's reference is dropped when a copy is swapped out: reaching
     * zero here means the copy drains and this was its last holder. */
    if (!sm)
        return;
    struct serving *s = sm->entry->serving;   /* sm may be freed once let go */
    if (atomic_fetch_sub(&sm->refs, 1) == 1) {
        pthread_mutex_lock(&s->lc_mu);
        pthread_cond_signal(&s->lc_cv);
        pthread_mutex_unlock(&s->lc_mu);
    }
}

int served_index(const struct served_model *sm) { return sm->entry->index; }

void served_touch(struct served_model *sm)
{
    atomic_store_explicit(&sm->entry->last_used_ns, now_ns(), memory_order_relaxed);
}

bool serving_all_ready(struct serving *s, char *who, size_t cap)
{
    int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        /* Eager, not unloaded on request, still in the repository. One
         * that loaded once and was then unloaded by policy (idle_unload_s,
         * eviction for room) loads again on demand, like a lazy one: its
         * absence is no fault, and a readiness probe failing on it would
         * keep the traffic that would reload it away for good. */
        bool wanted = !e->cur->model.cfg.lifecycle.lazy && !e->unload_asked && !e->retired &&
                      !e->removed;
        /* A folder or version the poll found after the start that never
         * loaded (half copied, broken) is no fault of readiness: the server
         * serves all it served. Counted, one broken copy-in-progress took
         * every pod of a fleet out of its Service at once. */
        wanted = wanted && (e->index < s->start_n || atomic_load(&e->loads[0]) > 0);
        int state = atomic_load(&e->cur->state);
        /* A new version that did not load while an older one serves in its
         * place (lifecycle.c: lc_poll_versions) is as a reload that failed
         * with the old copy serving on: no fault of readiness. */
        bool ok = !wanted || state == SERVED_READY || e->covered ||
                  (state != SERVED_FAILED && atomic_load(&e->loads[0]) > 0);
        if (!ok && who)
            snprintf(who, cap, "%s", e->cur->model.cfg.name);
        pthread_mutex_unlock(&e->mu);
        if (!ok)
            return false;
    }
    return true;
}

struct serving_tenant_rows {
    struct served_tenant_row *r;
    int n, cap;
};

/* Adds one tenant's time on a device to its row (made when new). */
static void serving_tenant_add(struct serving_tenant_rows *rows, int t, const char *device,
                               const struct shares_tenant_stats *ts)
{
    struct served_tenant_row *row = NULL;
    for (int i = 0; i < rows->n && !row; i++)
        if (rows->r[i].tenant == t && strcmp(rows->r[i].device, device) == 0)
            row = &rows->r[i];
    if (!row) {
        if (rows->n == rows->cap) {
            int cap = rows->cap ? rows->cap * 2 : 16;
            struct served_tenant_row *nr = realloc(rows->r, (size_t)cap * sizeof *nr);
            if (!nr)
                return;   /* out of memory: the rows so far */
            rows->r = nr;
            rows->cap = cap;
        }
        row = &rows->r[rows->n++];
        memset(row, 0, sizeof *row);
        snprintf(row->device, sizeof row->device, "%s", device);
        row->tenant = t;
        row->st.share = ts->share;
    }
    row->st.busy_s[0] += ts->busy_s[0];
    row->st.busy_s[1] += ts->busy_s[1];
    row->st.borrowed_s += ts->borrowed_s;
    row->st.fraction += ts->fraction;
}

static void serving_tenant_collect(struct shares *sh, struct serving_tenant_rows *rows)
{
    for (int t = 0; t < shares_tenants(sh); t++) {
        struct shares_tenant_stats ts;
        shares_tenant_stats(sh, t, &ts);
        serving_tenant_add(rows, t, shares_device(sh), &ts);
    }
}

void serving_apply_shares(struct serving *s, const double *share, double offline_share)
{
    pthread_mutex_lock(&s->shares_mu);
    s->applied = share != NULL;
    for (int t = 0; share && s->tenants && t < s->tenants->n; t++)
        s->applied_share[t] = share[t];
    s->applied_offline = offline_share;
    for (int i = 0; i < s->ndevs; i++)
        if (s->dev_shares[i])
            shares_set(s->dev_shares[i], share, offline_share);
    pthread_mutex_unlock(&s->shares_mu);
    int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        struct served_model *sm = serving_acquire_at(s, i);
        if (atomic_load(&sm->state) == SERVED_READY && sm->own_shares)
            shares_set(sm->own_shares, share, offline_share);
        served_release(sm);
    }
}

void serving_shares_in_force(struct serving *s, double *share)
{
    int n = s->tenants ? s->tenants->n : 0;
    pthread_mutex_lock(&s->shares_mu);
    for (int t = 0; t < n; t++)
        share[t] = s->applied ? s->applied_share[t] : s->tenants->t[t].share;
    pthread_mutex_unlock(&s->shares_mu);
}

int serving_tenant_rows(struct serving *s, struct served_tenant_row **out)
{
    struct serving_tenant_rows rows = {0};
    pthread_mutex_lock(&s->shares_mu);
    for (int i = 0; i < s->ndevs; i++)
        if (s->dev_shares[i])
            serving_tenant_collect(s->dev_shares[i], &rows);
    pthread_mutex_unlock(&s->shares_mu);
    int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        struct served_model *sm = serving_acquire_at(s, i);
        if (atomic_load(&sm->state) == SERVED_READY && sm->own_shares)
            serving_tenant_collect(sm->own_shares, &rows);
        served_release(sm);
        /* Its freed copies' time: the counters go on across unloads. */
        struct served_entry *e = s->entries[i];
        pthread_mutex_lock(&e->mu);
        for (int t = 0; e->has_gone && s->tenants && t < s->tenants->n; t++)
            serving_tenant_add(&rows, t, e->gone_device, &e->gone[t]);
        pthread_mutex_unlock(&e->mu);
    }
    /* Copies draining after a reload still hold their accounts. */
    pthread_mutex_lock(&s->lc_mu);
    for (struct served_model *d = s->drain; d; d = d->next)
        if (atomic_load(&d->state) == SERVED_READY && d->own_shares)
            serving_tenant_collect(d->own_shares, &rows);
    pthread_mutex_unlock(&s->lc_mu);
    *out = rows.r;
    return rows.n;
}

void serving_free(struct serving *s)
{
    if (!s)
        return;
    /* A worker stranded in an abandoned call may still touch its model,
     * batcher, statistics and device slot when the call returns: those
     * stay, left to the process exit. */
    bool stranded = s->stranded != NULL;   /* copies the lifecycle could not free */
    int n = atomic_load(&s->n);
    struct served_model *all = s->drain;
    s->drain = NULL;
    for (int i = 0; i < n; i++) {
        s->entries[i]->cur->next = all;
        all = s->entries[i]->cur;
    }
    while (all) {
        struct served_model *next = all->next;
        stranded |= workers_stranded(all->workers);
        served_copy_free(all);
        all = next;
    }
    for (int i = 0; i < n && !stranded; i++) {
        struct served_entry *e = s->entries[i];
        modelstats_free(e->stats);
        free(e->seen);
        free(e->placed);
        free(e->override);
        pthread_mutex_destroy(&e->mu);
        free(e);
    }
    for (int i = 0; i < s->ndevs && !stranded; i++) {
        devsched_free(s->devs[i]);
        shares_free(s->dev_shares[i]);
    }
    if (!stranded) {
        free(s->devs);
        free(s->dev_shares);
        free(s->entries);
    }
    for (struct lifecycle_task *t = s->tasks; t; ) {
        struct lifecycle_task *next = t->next;
        free(t->override);
        free(t);
        t = next;
    }
    pthread_mutex_destroy(&s->shares_mu);
    pthread_mutex_destroy(&s->lc_mu);
    pthread_cond_destroy(&s->lc_cv);
    if (!stranded)
        free(s);
}

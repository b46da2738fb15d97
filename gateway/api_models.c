/* api_models.c - the model routes of the KServe v2 protocol (metadata,
 * ready, Triton-form config, infer), TF-Serving's predict, and for encoder
 * models OpenAI's /v1/embeddings and TEI's /embed (serving/embed_json.h).
 *
 * An infer request is decoded on the IO thread, submitted to the model's
 * batcher, computed by an instance worker, and comes back to this IO thread
 * through its mailbox (models_infer_call_complete -> models_infer_call_deliver), where the
 * answer is encoded and queued in request order. A client that leaves while
 * its request is queued takes it out of the queue (models_infer_call_abort). */
#include "gateway/api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "batcher/batcher.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/memguard.h"
#include "gateway/admit.h"
#include "gateway/auth.h"
#include "gateway/jscratch.h"
#include "gateway/modelstats_json.h"
#include "http/http.h"
#include "gateway/proxy.h"
#include "gateway/tenantstats.h"
#include "serving/lifecycle.h"
#include "serving/serving.h"
#include "backends/encoder.h"
#include "serving/embed_json.h"
#include "serving/tensor_json.h"


enum infer_format { FORMAT_KSERVE, FORMAT_TFS, FORMAT_EMBED };

struct infer_call {
    struct mailbox_msg msg;          /* first: the mailbox hands back &msg */
    struct infer_item item;
    struct http_request *req;
    struct mailbox *mb;
    struct api_state *st;
    struct served_model *sm;
    bool admitted;                   /* holds a place of its tenant's (admit.h) until freed */
    struct infer_request r;
    float *output;
    enum infer_format format;
    struct embed_request embed;      /* FORMAT_EMBED */
    struct api_shm_use shm;          /* shared memory regions it reads and writes (api_shm.c) */
    int64_t waited_ns;               /* > 0: it waited this long for its model to load */
    bool client_gone;                /* hung up (its batch may still run): not counted */
};

static struct infer_call *models_call_of_item(struct infer_item *it)
{
    return (struct infer_call *)((char *)it - offsetof(struct infer_call, item));
}

/* ---- accounting (modelstats.h) ---- */

static enum modelstats_reason models_reason_of(int code)
{
    switch (code < 0 ? -code : code) {
    case BG_EQUEUEFULL: return MS_REJECT_QUEUE_FULL;
    case BG_EDEADLINE: return MS_REJECT_DEADLINE;
    case BG_ENOTREADY: return MS_REJECT_NOT_READY;
    case BG_ESHUTDOWN: return MS_REJECT_SHUTDOWN;
    case BG_ETOOLONG: return MS_REJECT_TOO_LONG;
    default: return MS_REJECT_BAD_REQUEST;
    }
}

/* An inference request of this model was answered with `status`: the
 * model's counters, and its tenant's (the guard left it on the request).
 * `ran`: its item, when it was computed (modelstats_request). */
void api_count_request(struct api_state *st, struct served_model *sm, struct http_request *req,
                       int status, int64_t total_ns, int64_t queue_ns,
                       const struct infer_item *ran)
{
    if (sm->stats)
        modelstats_request(sm->stats, http_request_thread(req), status, total_ns, queue_ns, ran);
    if (st->tenantstats)
        tenantstats_request(st->tenantstats, http_request_thread(req), auth_tenant(req),
                            served_index(sm), status);
}

static void models_account(struct api_state *st, struct served_model *sm,
                           struct http_request *req, int status, int64_t queue_ns,
                           const struct infer_item *ran)
{
    api_count_request(st, sm, req, status, now_ns() - http_request_received_ns(req), queue_ns,
                      ran);
}

/* ... not answered: its client left (`computed`: once in a batch). Not in
 * requests_total, which counts answers (docs/METRICS.md). */
static void models_count_cancelled(struct served_model *sm, struct http_request *req,
                                   bool computed)
{
    if (sm->stats)
        modelstats_cancelled(sm->stats, http_request_thread(req), computed,
                             now_ns() - http_request_received_ns(req));
}

/* ... refused before or instead of computing (code: a BG_E*). */
static void models_account_reject(struct api_state *st, struct served_model *sm,
                                  struct http_request *req, int code, int status)
{
    if (sm->stats)
        modelstats_reject(sm->stats, http_request_thread(req), models_reason_of(code));
    models_account(st, sm, req, status, -1, NULL);
}

/* ---- lookup ---- */

enum models_need {
    NEED_ANY,                         /* any state (ready, stats) */
    NEED_CONFIG,                      /* its configuration is valid (metadata, config) */
    NEED_READY,                       /* loaded */
};

/* 404 for a version the model does not serve, naming every version it
 * serves (not only one copy: it named 3 alone for a model serving 3 and 2);
 * `fallback` when the list cannot be had. */
static void models_version_404(struct http_request *req, struct api_state *st, const char *name,
                               const struct route_param *v, int fallback)
{
    int vs[MODEL_MAX_VERSIONS];
    int nv = st->serving ? serving_versions(st->serving, name, strlen(name), vs,
                                            MODEL_MAX_VERSIONS) : 0;
    char list[128] = "";
    size_t used = 0;
    for (int i = 0; i < nv && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%d",
                                 i == 0 ? "" : i == nv - 1 ? " and " : ", ", vs[i]);
    if (nv <= 0)
        snprintf(list, sizeof list, "%d", fallback);
    http_respond_error(req, 404, NULL, "model %s has no version \"%.*s\" (it serves version%s "
                       "%s: version_policy)", name, (int)(v->len > 64 ? 64 : v->len), v->value,
                       nv > 1 ? "s" : "", list);
}

/* The route's version, if it names one, is the one sm serves; else answers
 * 404, lets sm go and returns false. */
static bool models_check_version(struct http_request *req, const struct route_match *m,
                                 struct api_state *st, struct served_model *sm)
{
    const struct route_param *v = route_match_param(m, "version");
    if (!v || api_version_number(v) == sm->version)
        return true;
    models_version_404(req, st, sm->model.cfg.name, v, sm->version);
    served_release(sm);
    return false;
}

int api_version_number(const struct route_param *v)
{
    /* Digits alone; leading zeros are read as Triton and TF Serving read
     * them ("01" is version 1: they were 404). */
    int64_t n = 0;
    for (size_t i = 0; i < v->len; i++) {
        if (v->value[i] < '0' || v->value[i] > '9')
            return 0;
        n = n * 10 + (v->value[i] - '0');
        if (n > INT32_MAX)
            return 0;
    }
    return (int)n;
}

long api_tfs_predict_len(const struct route_param *last)
{
    static const char verb[] = ":predict";
    size_t n = sizeof verb - 1;
    if (last->len < n || memcmp(last->value + last->len - n, verb, n) != 0)
        return -1;
    return (long)(last->len - n);
}

int api_route_version(struct http_request *req, const struct route_match *m,
                      struct api_state *st, const char *name)
{
    const struct route_param *v = route_match_param(m, "version");
    if (!v)
        return 0;
    int want = api_version_number(v);
    struct served_model *vm = want > 0 && st->serving
                                  ? serving_acquire_version(st->serving, name, strlen(name), want)
                                  : NULL;
    if (vm) {
        served_release(vm);
        return want;
    }
    models_version_404(req, st, name, v, 0);
    return -1;
}

/* Finds the model of the route (a reference: served_release it) and checks
 * the version and the state; answers 404/503 itself and returns NULL. */
static struct served_model *models_lookup(struct http_request *req, const struct route_match *m,
                                          struct api_state *st, enum models_need need, bool infer)
{
    const struct route_param *p = route_match_param(m, "model");
    struct served_model *sm = st->serving ? serving_acquire(st->serving, p->value, p->len) : NULL;
    if (!sm) {
        http_respond_error(req, 404, NULL, "unknown model \"%.*s\"",
                           (int)(p->len > 128 ? 128 : p->len),
                           p->value);
        return NULL;
    }
    /* A version named in the route: that version's copy, if served. */
    const struct route_param *v = route_match_param(m, "version");
    if (v && served_pinned_version(sm)) {
        int want = api_version_number(v);
        struct served_model *vm = want > 0
                                      ? serving_acquire_version(st->serving, p->value, p->len, want)
                                      : NULL;
        if (vm) {
            served_release(sm);
            sm = vm;
        }
    }
    if (!models_check_version(req, m, st, sm))
        return NULL;
    int state = atomic_load(&sm->state);
    if ((need == NEED_READY && state != SERVED_READY) ||
        (need == NEED_CONFIG && state == SERVED_FAILED)) {
        if (infer)
            models_account_reject(st, sm, req, BG_ENOTREADY, 503);
        if (state == SERVED_LOADING)
            http_respond_error(req, 503, "Retry-After: 1\r\n", "model %s is loading",
                               sm->model.cfg.name);
        else
            http_respond_error(req, 503, NULL, "model %s is not ready: %s", sm->model.cfg.name,
                               sm->model.reason);
        served_release(sm);
        return NULL;
    }
    return sm;
}

/* ---- waiting for a load (a lazy or unloaded model) ---- */

typedef api_run_fn models_run_fn;

struct models_wait {
    struct mailbox_msg msg;           /* first: the mailbox hands back &msg */
    struct http_request *req;
    struct route_match m;             /* params point into the request's path, the model's
                                       * into `model` (it may come from the body) */
    char model[MODEL_NAME_MAX];
    struct api_state *st;
    struct mailbox *mb;
    models_run_fn run;
    int rc;
    struct served_model *sm;          /* the copy loaded for it (a reference) */
    char why[512];
    /* The request's budget runs out before the load ends (its time was
     * not known, or it runs long): answered then, 503, so that nobody is
     * held past their deadline; the load's outcome then only frees this.
     * Both run on the request's IO thread. */
    struct event *deadline;
    bool answered;
};

static void models_wait_free(struct models_wait *w)
{
    if (w->deadline)
        event_free(w->deadline);
    free(w);
}

/* A waiting request answered 503 "model M <what>", counted as the model's
 * not_ready refusal (the model looked up again: the wait held no copy). */
static void models_wait_refuse(struct models_wait *w, const char *headers, const char *what,
                               ...) __attribute__((format(printf, 3, 4)));
static void models_wait_refuse(struct models_wait *w, const char *headers, const char *what, ...)
{
    const struct route_param *p = route_match_param(&w->m, "model");
    struct served_model *sm = serving_acquire(w->st->serving, p->value, p->len);
    if (sm) {
        models_account_reject(w->st, sm, w->req, BG_ENOTREADY, 503);
        served_release(sm);
    }
    char msg[700];
    va_list ap;
    va_start(ap, what);
    vsnprintf(msg, sizeof msg, what, ap);
    va_end(ap);
    http_respond_error(w->req, 503, headers, "model %.*s %s", (int)(p->len > 128 ? 128 : p->len),
                       p->value, msg);
}

/* IO thread: the load ended. */
static void models_wait_deliver(struct mailbox_msg *msg)
{
    struct models_wait *w = (struct models_wait *)msg;
    if (w->answered) {
        served_release(w->sm);
    } else if (w->rc == 0 && w->sm) {
        http_request_on_abort(w->req, NULL, NULL);   /* w goes below: the run sets its own */
        w->run(w->req, &w->m, w->st, w->sm);   /* the run owns the reference now */
    } else {
        models_wait_refuse(w, w->rc == -BG_EQUEUEFULL ? "Retry-After: 1\r\n" : NULL,
                           "did not load: %s", w->rc ? w->why : "it was unloaded again at once");
    }
    models_wait_free(w);
}

/* IO thread: the budget ran out while the load goes on. */
static void models_wait_expired(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct models_wait *w = arg;
    w->answered = true;
    models_wait_refuse(w, "Retry-After: 1\r\n", "is not loaded: loading it takes longer than "
                       "the request's latency budget left (it is loading now)");
}

/* IO thread: the client left while its request waited for the load: it is
 * answered now (499, discarded), not computed once the load ends (it was,
 * and counted 200). */
static void models_wait_abort(struct http_request *req, void *arg)
{
    struct models_wait *w = arg;
    if (w->answered)
        return;
    w->answered = true;
    if (w->deadline)
        evtimer_del(w->deadline);
    /* Not an answer (requests_total): a cancelled request, before any
     * batch. */
    const struct route_param *p = route_match_param(&w->m, "model");
    struct served_model *sm = serving_acquire(w->st->serving, p->value, p->len);
    if (sm) {
        models_count_cancelled(sm, req, false);
        served_release(sm);
    }
    http_respond_error(req, 499, NULL, "the client left while model %.*s loaded",
                       (int)(p->len > 128 ? 128 : p->len), p->value);
}

/* The lifecycle thread: hand the outcome to the request's IO thread. */
static void models_wait_done(void *arg, int rc, const char *why, struct served_model *sm)
{
    struct models_wait *w = arg;
    w->rc = rc;
    w->sm = sm;
    snprintf(w->why, sizeof w->why, "%s", why ? why : "");
    mailbox_post(w->mb, &w->msg);
}

/* The latency budget a request states in its headers, else its model's
 * (what a wait for a load is measured against: the body is not decoded
 * before the model is loaded). 0: none. */
static int64_t models_header_deadline(struct http_request *req, const struct model_config *c);

/* The model of an inference route, loaded: its READY copy (a reference),
 * or NULL when the request was answered or waits for a load (run is
 * called again then, with waited set). A request waits once, and only
 * when its budget covers the expected load time; else 503 with
 * Retry-After, the load going on for the next one. */
static struct served_model *models_ready_or_wait(struct http_request *req,
                                                 const struct route_match *m,
                                                 const struct route_match *rerun_m,
                                                 struct api_state *st, models_run_fn run,
                                                 struct served_model *held)
{
    if (held)   /* the copy it waited for: the version is checked as for any */
        return models_check_version(req, m, st, held) ? held : NULL;
    struct served_model *sm = models_lookup(req, m, st, NEED_ANY, true);
    if (!sm)
        return NULL;
    if (sm->model.cfg.kind == MODEL_KIND_POOL) {
        /* Its servers speak OpenAI's API, not tensors (api_llm.c). */
        http_respond_error(req, 400, NULL, "model %s is an LLM pool: it answers POST "
                           "/v1/chat/completions, /v1/completions and /v1/embeddings",
                           sm->model.cfg.name);
        served_release(sm);
        return NULL;
    }
    if (atomic_load(&sm->state) == SERVED_READY)
        return sm;
    return api_models_wait(req, rerun_m, st, sm, run) == 1
               ? models_lookup(req, m, st, NEED_READY, true)
               : NULL;
}

int api_models_wait(struct http_request *req, const struct route_match *rerun_m,
                    struct api_state *st, struct served_model *sm, api_run_fn run)
{
    if (atomic_load(&sm->state) == SERVED_FAILED) {
        models_account_reject(st, sm, req, BG_ENOTREADY, 503);
        http_respond_error(req, 503, NULL, "model %s is not ready: %s", sm->model.cfg.name,
                           sm->model.reason);
        served_release(sm);
        return 0;
    }
    struct models_wait *w = calloc(1, sizeof *w);
    if (!w) {
        http_respond_error(req, 500, NULL, "out of memory");
        served_release(sm);
        return 0;
    }
    *w = (struct models_wait){.req = req, .m = *rerun_m, .st = st, .mb = http_request_mailbox(req),
                              .run = run};
    for (int i = 0; i < w->m.nparams; i++)
        if (strcmp(w->m.params[i].name, "model") == 0) {
            struct route_param *p = &w->m.params[i];
            p->len = p->len < sizeof w->model ? p->len : sizeof w->model - 1;
            memcpy(w->model, p->value, p->len);
            p->value = w->model;
        }
    w->msg.fn = models_wait_deliver;
    int64_t retry = 0;
    struct error err = {0};
    int64_t deadline = models_header_deadline(req, &sm->model.cfg);
    /* Armed before the wait is queued: the load's outcome may arrive on
     * this thread's mailbox any time after. */
    if (deadline > 0) {
        w->deadline = evtimer_new(http_request_event_base(req), models_wait_expired, w);
        int64_t left = deadline - now_ns();
        left = left > 0 ? left : 0;
        struct timeval tv = {(time_t)(left / 1000000000), (suseconds_t)(left % 1000000000 / 1000)};
        if (w->deadline)
            evtimer_add(w->deadline, &tv);
    }
    int rc = serving_wait_loaded(st->serving, sm, deadline, models_wait_done, w, &retry, &err);
    if (rc == 0) {
        http_request_on_abort(req, models_wait_abort, w);
        http_request_abort_on_fin(req);   /* as in the queue, below */
    }
    if (rc == 1) {                    /* loaded meanwhile */
        models_wait_free(w);
        served_release(sm);
        return 1;
    }
    if (rc < 0) {
        models_wait_free(w);
        char hdr[48] = "";
        if (retry > 0)
            snprintf(hdr, sizeof hdr, "Retry-After: %lld\r\n",
                     (long long)((retry + 999999999) / 1000000000));
        models_account_reject(st, sm, req, BG_ENOTREADY, error_http_status(-rc));
        http_respond_error(req, error_http_status(-rc), hdr[0] ? hdr : NULL, "%s", err.msg);
    }
    served_release(sm);
    return 0;
}

static void models_respond_buf(struct http_request *req, int status, struct buf *b)
{
    http_respond(req, status, "application/json", b->data, b->len, NULL);
    buf_free(b);
}

/* ---- metadata, ready, config ---- */

static void models_append_tensor_meta(struct buf *b, const struct model_tensor *t)
{
    buf_append(b, "{\"name\":", 8);
    json_append_string(b, t->name, strlen(t->name));
    buf_appendf(b, ",\"datatype\":\"%s\",\"shape\":[-1", t->datatype);
    for (int i = 0; i < t->ndims; i++)
        buf_appendf(b, ",%lld", (long long)t->shape[i]);
    buf_append(b, "]}", 2);
}

static void models_metadata(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    struct served_model *sm = models_lookup(req, m, ctx, NEED_CONFIG, false);
    if (!sm)
        return;
    const struct model_config *c = &sm->model.cfg;
    /* A model served by a KServe v2 server: that server's metadata is the
     * truth (its own name for the model, its platform), so it goes there. */
    if (st->proxy && proxy_model_metadata(st->proxy) && atomic_load(&sm->state) == SERVED_READY &&
        model_device_kind(&sm->model) == BACKEND_DEVICE_UPSTREAM &&
        c->kind != MODEL_KIND_POOL && c->upstream.protocol == UPSTREAM_KSERVE_V2) {
        char path[512];
        const struct route_param *v = route_match_param(m, "version");
        int n = snprintf(path, sizeof path, "/v2/models/%s%s%.*s", c->upstream.model,
                         v ? "/versions/" : "", v ? (int)v->len : 0, v ? v->value : "");
        struct httpc_target *const *servers;
        int nservers = model_servers(&sm->model, &servers);
        proxy_forward(st->proxy, req, servers, nservers, path,
                      (size_t)n < sizeof path ? (size_t)n : sizeof path - 1);
        served_release(sm);
        return;
    }
    struct buf b = BUF_INIT;
    buf_append(&b, "{\"name\":", 8);
    json_append_string(&b, c->name, strlen(c->name));
    /* A route naming a version lists that one alone, as Triton answers;
     * without one, every version served. */
    int vs[MODEL_MAX_VERSIONS];
    int nv = 1;
    vs[0] = sm->version;
    if (!route_match_param(m, "version"))
        nv = serving_versions(st->serving, c->name, strlen(c->name), vs, MODEL_MAX_VERSIONS);
    buf_append(&b, ",\"versions\":[", 13);
    for (int i = 0; i < nv; i++)
        buf_appendf(&b, "%s\"%d\"", i ? "," : "", vs[i]);
    if (c->kind == MODEL_KIND_POOL) {
        /* Its servers speak OpenAI's API, no tensors (docs/LLM.md): its
         * servers' model name instead of inputs and outputs. */
        buf_append(&b, "],\"platform\":\"batchgate_llm_pool\",\"inputs\":[],\"outputs\":[],"
                       "\"served_model_name\":", 79);
        json_append_string(&b, c->pool.served_model_name, strlen(c->pool.served_model_name));
        buf_append(&b, "}", 1);
        models_respond_buf(req, 200, &b);
        served_release(sm);
        return;
    }
    buf_appendf(&b, "],\"platform\":\"batchgate_%s\",\"inputs\":[", model_backend_name(&sm->model));
    models_append_tensor_meta(&b, &c->input);
    buf_append(&b, "],\"outputs\":[", 13);
    models_append_tensor_meta(&b, &c->output);
    buf_append(&b, "]}", 2);
    models_respond_buf(req, 200, &b);
    served_release(sm);
}

/* One tensor of TF Serving's signature (a TensorInfo): the batch
 * dimension first, -1. */
static void models_tfs_tensor(struct buf *b, const struct model_tensor *t)
{
    json_append_string(b, t->name, strlen(t->name));
    BUF_LIT(b, ":{\"dtype\":\"DT_FLOAT\",\"tensor_shape\":{\"dim\":["
               "{\"size\":\"-1\",\"name\":\"\"}");
    for (int i = 0; i < t->ndims; i++)
        buf_appendf(b, ",{\"size\":\"%lld\",\"name\":\"\"}", (long long)t->shape[i]);
    BUF_LIT(b, "],\"unknown_rank\":false},\"name\":");
    json_append_string(b, t->name, strlen(t->name));
    BUF_LIT(b, "}");
}

/* GET /v1/models/{model}[/versions/{version}]/metadata: TF Serving's
 * GetModelMetadataResponse, the one signature :predict serves (clients
 * read the input's name and shape from it). */
static void models_tfs_metadata(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct served_model *sm = models_lookup(req, m, ctx, NEED_CONFIG, false);
    if (!sm)
        return;
    const struct model_config *c = &sm->model.cfg;
    if (c->kind == MODEL_KIND_POOL || c->kind == MODEL_KIND_ENCODER) {
        http_respond_error(req, 400, NULL, "model %s has no TF Serving signature: %s", c->name,
                           c->kind == MODEL_KIND_POOL
                               ? "it is an LLM pool (OpenAI's API: docs/LLM.md)"
                               : "it takes text (KServe v2's BYTES input, POST /v1/embeddings "
                                 "or POST /embed)");
        served_release(sm);
        return;
    }
    struct buf b = BUF_INIT;
    BUF_LIT(&b, "{\"model_spec\":{\"name\":");
    json_append_string(&b, c->name, strlen(c->name));
    buf_appendf(&b, ",\"signature_name\":\"\",\"version\":\"%d\"},\"metadata\":{"
                "\"signature_def\":{\"signature_def\":{\"serving_default\":{\"inputs\":{",
                sm->version > 0 ? sm->version : 1);
    models_tfs_tensor(&b, &c->input);
    BUF_LIT(&b, "},\"outputs\":{");
    models_tfs_tensor(&b, &c->output);
    BUF_LIT(&b, "},\"method_name\":\"tensorflow/serving/predict\"}}}}}");
    models_respond_buf(req, 200, &b);
    served_release(sm);
}

static void models_ready(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct served_model *sm = models_lookup(req, m, ctx, NEED_ANY, false);
    if (!sm)
        return;
    struct buf b = BUF_INIT;
    int state = atomic_load(&sm->state);
    buf_append(&b, "{\"name\":", 8);
    json_append_string(&b, sm->model.cfg.name, strlen(sm->model.cfg.name));
    /* Readiness is ours (docs/PROXY.md): a model whose servers are all out
     * of service (health probes, failed calls) is not ready for clients. */
    char out_why[160] = "";
    struct httpc_target *const *servers;
    int nservers = state == SERVED_READY ? model_servers(&sm->model, &servers) : 0;
    if (nservers > 0) {
        int64_t now = now_ns();
        int usable = 0;
        for (int i = 0; i < nservers; i++)
            usable += httpc_target_usable(servers[i], now);
        if (!usable)
            snprintf(out_why, sizeof out_why, "none of its %d server%s is in service (taken out "
                     "by health probes or failed calls; see the log)", nservers,
                     nservers == 1 ? "" : "s");
    }
    if (state == SERVED_READY && !out_why[0]) {
        buf_append(&b, ",\"ready\":true}", 14);
        models_respond_buf(req, 200, &b);
        served_release(sm);
        return;
    }
    const char *why = out_why[0] ? out_why : state == SERVED_LOADING ? "loading" : sm->model.reason;
    buf_append(&b, ",\"ready\":false,\"reason\":", 24);
    json_append_string(&b, why, strlen(why));
    buf_append(&b, "}", 1);
    models_respond_buf(req, 503, &b);
    served_release(sm);
}

static void models_append_triton_tensor(struct buf *b, const struct model_tensor *t)
{
    buf_append(b, "{\"name\":", 8);
    json_append_string(b, t->name, strlen(t->name));
    /* Triton's model configuration calls BYTES tensors TYPE_STRING. */
    buf_appendf(b, ",\"data_type\":\"TYPE_%s\",\"dims\":[",
                strcmp(t->datatype, "BYTES") == 0 ? "STRING" : t->datatype);
    for (int i = 0; i < t->ndims; i++)
        buf_appendf(b, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    buf_append(b, "]", 1);
    if (t->labels[0]) {   /* Triton's name for an output's labels file */
        buf_append(b, ",\"label_filename\":", 18);
        json_append_string(b, t->labels, strlen(t->labels));
    }
    buf_append(b, "}", 1);
}

static void models_config_route(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct served_model *sm = models_lookup(req, m, ctx, NEED_CONFIG, false);
    if (!sm)
        return;
    const struct model_config *c = &sm->model.cfg;
    const struct model_batching *bt = &c->batching;
    struct buf b = BUF_INIT;
    buf_append(&b, "{\"name\":", 8);
    json_append_string(&b, c->name, strlen(c->name));
    buf_appendf(&b, ",\"platform\":\"batchgate_%s\",\"backend\":\"%s\",\"max_batch_size\":%d,"
                    "\"input\":[", model_backend_name(&sm->model), model_backend_name(&sm->model),
                bt->max_batch_size);
    models_append_triton_tensor(&b, &c->input);
    buf_append(&b, "],\"output\":[", 12);
    models_append_triton_tensor(&b, &c->output);
    buf_append(&b, "],\"dynamic_batching\":{\"preferred_batch_size\":[", 46);
    for (int i = 0; i < bt->npreferred; i++)
        buf_appendf(&b, "%s%d", i ? "," : "", bt->preferred[i]);
    buf_appendf(&b, "],\"max_queue_delay_microseconds\":%lld,\"default_queue_policy\":"
                    "{\"max_queue_size\":%d,\"default_timeout_microseconds\":%lld}},"
                    "\"instance_group\":[{\"count\":%d,\"kind\":\"%s\"}]}",
                (long long)bt->max_queue_delay_us, bt->max_queue_size,
                (long long)bt->latency_budget_ms * 1000, c->instance_count,
                model_device_kind(&sm->model) == BACKEND_DEVICE_GPU ? "KIND_GPU" : "KIND_CPU");
    models_respond_buf(req, 200, &b);
    served_release(sm);
}

/* Whose rows a caller sees in a model's "tenants": an admin every
 * tenant's (-1), a tenant its own (it saw the others' use of the model). */
static int models_stats_tenant(const struct api_state *st, const struct http_request *req)
{
    return !st->auth || auth_is_admin(st->auth, auth_tenant(req)) ? -1 : auth_tenant(req);
}

static void models_stats(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    struct served_model *sm = models_lookup(req, m, ctx, NEED_ANY, false);
    if (!sm)
        return;
    struct buf b = BUF_INIT;
    buf_append(&b, "{\"model_stats\":[", 16);
    int vs[MODEL_MAX_VERSIONS];
    const char *name = sm->model.cfg.name;
    int nv = route_match_param(m, "version") || !served_pinned_version(sm)
                 ? 0 : serving_versions(st->serving, name, strlen(name), vs, MODEL_MAX_VERSIONS);
    if (nv <= 0) {
        modelstats_json_append(&b, sm, models_stats_tenant(st, req));
    } else {
        /* Without a version, every version served, as Triton answers it
         * (the name alone reaches the highest for inference only). */
        for (int i = 0, k = 0; i < nv; i++) {
            struct served_model *v = serving_acquire_version(st->serving, name, strlen(name),
                                                             vs[i]);
            if (!v)
                continue;
            if (k++)
                buf_append(&b, ",", 1);
            modelstats_json_append(&b, v, models_stats_tenant(st, req));
            served_release(v);
        }
    }
    buf_append(&b, "]}", 2);
    models_respond_buf(req, 200, &b);
    served_release(sm);
}

/* GET /v2/models/stats: every model the caller's tenant may use, in the
 * repository's order, as tritonclient's get_inference_statistics() with no
 * model asks. */
static void models_stats_all(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct api_state *st = ctx;
    struct buf b = BUF_INIT;
    buf_append(&b, "{\"model_stats\":[", 16);
    int n = st->serving ? serving_count(st->serving) : 0, k = 0;
    for (int i = 0; i < n; i++) {
        struct served_model *sm = serving_acquire_at(st->serving, i);
        if (!sm)
            continue;
        const char *name = sm->model.cfg.name;
        if (!st->auth || auth_may_use_model(st->auth, auth_tenant(req), name, strlen(name))) {
            if (k++)
                buf_append(&b, ",", 1);
            modelstats_json_append(&b, sm, models_stats_tenant(st, req));
        }
        served_release(sm);
    }
    buf_append(&b, "]}", 2);
    models_respond_buf(req, 200, &b);
}

/* ---- infer ---- */

/* This IO thread's arena for jansson while a body is decoded (jscratch.h);
 * NULL (plain malloc) where main made none, as in the tests. */
static struct jscratch *models_scratch_of(struct api_state *st, struct http_request *req)
{
    int t = http_request_thread(req);
    return st->jscratch && t >= 0 && t < st->njscratch ? st->jscratch[t] : NULL;
}

static void models_infer_call_free(struct infer_call *call)
{
    if (call->admitted)
        admit_leave(call->st->admit, call->item.tenant);
    served_release(call->sm);
    api_shm_use_release(&call->shm);   /* after the answer: its output was copied in */
    free(call->r.input);
    free(call->output);
    free(call);
}

/* IO thread: the worker (or the batcher) is done with the item. */
static void models_infer_call_deliver(struct mailbox_msg *msg)
{
    struct infer_call *call = (struct infer_call *)msg;
    struct infer_item *it = &call->item;
    struct http_request *req = call->req;
    const struct model_config *c = &call->sm->model.cfg;
    if (it->status != 0) {
        int status = it->status == BG_ECANCELLED ? 499 : error_http_status(it->status);
        if (call->client_gone)
            models_count_cancelled(call->sm, req, it->t_dequeue_ns != 0);
        else if ((it->status == BG_EDEADLINE && !it->t_dequeue_ns) || it->status == BG_ESHUTDOWN)
            models_account_reject(call->st, call->sm, req, it->status, status);
        /* A 504 after its batch began (the watchdog abandoned it, or an
         * upstream batch failed past its budget) is no refusal: it ran and
         * failed, and its queue wait is counted, as any failed batch's. */
        else if (it->status != BG_ECANCELLED)
            models_account(call->st, call->sm, req, status,
                           it->t_dequeue_ns ? it->t_dequeue_ns - it->t_arrival_ns : -1, NULL);
        /* The tenant's refusal (batcher_answer_expired): the reason named,
         * and when to try again, as the admission limits' 429. */
        const char *hdr = NULL;
        char ra[40];
        if (it->status == BG_ETENANTLIMIT || it->status == BG_EUNAVAILABLE) {
            /* Over its limit: when its use will have decayed under it
             * (queue.c); or the servers behind are overloaded. */
            if (it->status == BG_ETENANTLIMIT)
                http_request_set_error_reason(req, "limit");
            snprintf(ra, sizeof ra, "Retry-After: %d\r\n",
                     it->retry_after_s > 0 ? it->retry_after_s : 1);
            hdr = ra;
        }
        http_respond_error(req, status, hdr, "model %s: %s", c->name, it->error);
        models_infer_call_free(call);
        return;
    }
    int64_t queue_ns = it->t_dequeue_ns - it->t_arrival_ns;
    if ((call->format == FORMAT_EMBED && call->embed.normalize) ||
        (call->format == FORMAT_KSERVE && c->kind == MODEL_KIND_ENCODER && c->encoder.normalize))
        encoder_output_normalize(call->output, call->r.rows, (int)c->output.row_elems);
    /* An output in shared memory: the region is held by the call, so it
     * is still mapped even if it was unregistered meanwhile; but the
     * client may have truncated its object (memguard.h): then 400, and
     * the answer counted so. */
    if (call->r.output_shm.set &&
        memguard_copy(call->r.output_shm_bytes, call->output,
                      (size_t)call->r.rows * (size_t)c->output.row_elems * sizeof(float)) < 0) {
        struct error err = {0};
        tensor_shm_gone(&call->r.output_shm, "outputs[0].", &err);
        if (call->client_gone)
            models_count_cancelled(call->sm, req, true);
        else
            models_account(call->st, call->sm, req, 400, queue_ns, NULL);
        http_respond_error(req, 400, NULL, "model %s: %s", c->name, err.msg);
        models_infer_call_free(call);
        return;
    }
    /* A client that hung up while its batch ran is no success: its rows
     * were computed (the device's time is the batch's), but nobody got
     * an answer. */
    if (call->client_gone)
        models_count_cancelled(call->sm, req, true);
    else
        models_account(call->st, call->sm, req, 200, queue_ns, it);
    struct buf b = BUF_INIT;
    int64_t json_len = -1;
    int rc;
    if (call->format == FORMAT_EMBED)
        rc = embed_encode(c, &call->embed, &call->r, call->output, &b);
    else if (call->format == FORMAT_TFS)
        rc = tensor_encode_tfs(c, &call->r, call->output, &b);
    else
        rc = tensor_encode_kserve(&call->sm->model, call->sm->version, &call->r, call->output, &b,
                                  &json_len);
    if (rc < 0) {
        buf_free(&b);
        http_respond_error(req, 500, NULL, "out of memory encoding the answer");
    } else if (json_len >= 0) {
        char hdr[64];
        snprintf(hdr, sizeof hdr, "Inference-Header-Content-Length: %lld\r\n", (long long)json_len);
        http_respond(req, 200, "application/octet-stream", b.data, b.len, hdr);
        buf_free(&b);
    } else {
        models_respond_buf(req, 200, &b);
    }
    /* How late against the batch's plan this answer leaves: the batcher
     * plans that much early from now on (batcher/guard.h). */
    batcher_answered(call->sm->batcher, it, now_ns());
    models_infer_call_free(call);
}

/* A call for a request to sm, holding sm's reference from here on; NULL
 * when out of memory (answered 500, the reference let go). */
static struct infer_call *models_call_new(struct http_request *req, struct api_state *st,
                                          struct served_model *sm)
{
    struct infer_call *call = calloc(1, sizeof *call);
    if (!call) {
        http_respond_error(req, 500, NULL, "out of memory");
        served_release(sm);
        return NULL;
    }
    call->sm = sm;
    call->st = st;
    return call;
}

/* The body could not be decoded: counted, answered with err, freed. */
static void models_call_refuse(struct http_request *req, struct infer_call *call,
                               const struct error *err)
{
    models_account_reject(call->st, call->sm, req, err->code, error_http_status(err->code));
    http_respond_error(req, error_http_status(err->code), NULL, "%s", err->msg);
    models_infer_call_free(call);
}

/* Any thread: hand the finished item back to its IO thread. */
static void models_infer_call_complete(struct infer_item *it)
{
    struct infer_call *call = models_call_of_item(it);
    mailbox_post(call->mb, &call->msg);
}

/* IO thread: the client went away. */
static void models_infer_call_abort(struct http_request *req, void *arg)
{
    (void)req;
    struct infer_call *call = arg;
    call->client_gone = true;
    batcher_cancel(call->sm->batcher, &call->item);
}

/* A non-negative integer header; -1 when absent, -2 when malformed. */
static int64_t models_header_int(struct http_request *req, const char *name)
{
    size_t len;
    const char *v = http_request_header(req, name, &len);
    if (!v)
        return -1;
    if (len == 0 || len > 18 || http_request_header_times(req, name) > 1)
        return -2;   /* two values: neither is taken */
    int64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -2;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

/* A budget longer than this is no budget in practice, and a deadline this
 * far off keeps the sums of the planning (deadline + margins) in range:
 * ten years. */
#define MODELS_BUDGET_MAX_NS (INT64_C(10) * 365 * 86400 * 1000000000)

/* The deadline of a request that arrived at arrival_ns with a budget of n
 * units of unit_ns (n <= 0: none, 0). Saturates: a budget of 2^63 us is
 * a very long one, not a negative one (it wrapped, and a client asking
 * for no hurry got a 504). */
static int64_t models_deadline(int64_t arrival_ns, int64_t n, int64_t unit_ns)
{
    if (n <= 0)
        return 0;
    return arrival_ns + (n > MODELS_BUDGET_MAX_NS / unit_ns ? MODELS_BUDGET_MAX_NS : n * unit_ns);
}

/* Budget and priority: the body's parameters, else the X- headers, else the
 * model's defaults. Returns 0, or answers 400 and returns -1. */
static int models_infer_budget(struct http_request *req, const struct model_config *c,
                        struct infer_call *call)
{
    struct infer_item *it = &call->item;
    /* From when the request reached this host, not when it was read: time
     * in the socket while the IO thread was busy is the client's time too. */
    int64_t arrival = http_request_arrival_ns(req);
    if (call->r.has_timeout) {
        it->deadline_ns = models_deadline(arrival, call->r.timeout_us, 1000);
    } else {
        int64_t ms = models_header_int(req, "X-Request-Timeout-Ms");
        if (ms == -2) {
            http_respond_error(req, 400, NULL, "X-Request-Timeout-Ms: must be one whole number "
                                               "of milliseconds");
            return -1;
        }
        it->deadline_ns = models_deadline(arrival, ms >= 0 ? ms : c->batching.latency_budget_ms,
                                          1000000);
    }
    int64_t prio = call->r.has_priority ? call->r.priority : models_header_int(req, "X-Priority");
    if (prio == -2 || prio > MODEL_PRIORITY_MAX) {
        http_respond_error(req, 400, NULL, "%s: must be one whole number from 0 to %d (1 is the "
                           "highest, 0 the model's default)",
                           call->r.has_priority ? "parameters.priority" : "X-Priority",
                           MODEL_PRIORITY_MAX);
        return -1;
    }
    it->priority = prio > 0 ? (int)prio : 0;   /* 0: the batcher applies the default */
    return 0;
}

static int64_t models_header_deadline(struct http_request *req, const struct model_config *c)
{
    int64_t ms = models_header_int(req, "X-Request-Timeout-Ms");
    return models_deadline(http_request_arrival_ns(req),
                           ms >= 0 ? ms : c->batching.latency_budget_ms, 1000000);
}

/* The tenant's max_inflight and rate_rows_per_s (admit.h): 0, or answers
 * 429 and returns -1. */
static int models_admit(struct http_request *req, struct api_state *st, struct infer_call *call)
{
    struct admit_refusal why;
    if (!st->admit)
        return 0;
    if (admit_enter(st->admit, call->item.tenant, call->item.rows, now_ns(), &why) == 0) {
        call->admitted = true;
        return 0;
    }
    api_refuse_tenant(req, &why);
    return -1;
}

void api_refuse_tenant(struct http_request *req, const struct admit_refusal *why)
{
    char hdr[96];
    snprintf(hdr, sizeof hdr, "Retry-After: %d\r\n%s", why->retry_after_s,
             why->no_retry ? "x-should-retry: false\r\n" : "");
    http_request_set_error_reason(req, why->reason);
    http_respond_error(req, error_http_status(BG_ETENANTLIMIT), hdr, "%s", why->msg);
}

/* A full queue refuses before the body is decoded: under a flood (one
 * tenant at several times the capacity) decoding what will be refused
 * anyway is what makes the IO threads late for everyone else's answers.
 * The queue decides again at submit; this only saves the work. Returns -1
 * when it answered 429. */
static int models_refuse_full(struct http_request *req, struct api_state *st,
                              struct served_model *sm)
{
    if (!batcher_full_for(sm->batcher, auth_tenant(req)))
        return 0;
    if (sm->stats)
        modelstats_arrival(sm->stats, http_request_thread(req), -1);
    models_account_reject(st, sm, req, BG_EQUEUEFULL, error_http_status(BG_EQUEUEFULL));
    http_respond_error(req, error_http_status(BG_EQUEUEFULL), "Retry-After: 1\r\n",
                       "model %s: queue full (%d requests waiting, batching.max_queue_size)",
                       sm->model.cfg.name, sm->model.cfg.batching.max_queue_size);
    return -1;
}

bool api_models_precheck(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    const struct route_param *p = route_match_param(m, "model");
    if (!p || !st->serving || http_request_method(req) != HTTP_M_POST ||
        (strncmp(m->pattern, "/v2/models/", 11) != 0 && strncmp(m->pattern, "/v1/models/", 11) != 0))
        return true;
    /* TF Serving's verb shares the segment ("digits:predict"). */
    const char *colon = memchr(p->value, ':', p->len);
    size_t n = colon ? (size_t)(colon - p->value) : p->len;
    struct served_model *sm = serving_acquire(st->serving, p->value, n);
    if (!sm) {
        http_respond_error(req, 404, NULL, "unknown model \"%.*s\"", (int)(n > 128 ? 128 : n),
                           p->value);
        return false;
    }
    /* A full queue (of the copy serving now: a version named in the route
     * is left to the handler) refuses as the handler would. */
    bool ok = true;
    if (strstr(m->pattern, "/infer") && !route_match_param(m, "version") &&
        atomic_load(&sm->state) == SERVED_READY && sm->batcher)
        ok = models_refuse_full(req, st, sm) == 0;
    served_release(sm);
    return ok;
}

static void models_infer_submit(struct http_request *req, struct api_state *st,
                                struct served_model *sm, struct infer_call *call)
{
    const struct model_config *c = &sm->model.cfg;
    /* Decoded: call->r holds the rows (malloc'ed), and the body's text need
     * not wait in the queue with them. */
    http_request_release_body(req);
    if (sm->stats)   /* demand: every decoded request, whatever its answer */
        modelstats_arrival(sm->stats, http_request_thread(req), call->r.rows);
    call->req = req;
    call->st = st;
    call->sm = sm;
    call->mb = http_request_mailbox(req);
    call->msg.fn = models_infer_call_deliver;
    size_t out_bytes = (size_t)call->r.rows * (size_t)c->output.row_elems * sizeof(float);
    /* Said before it is computed: a gRPC connection reserves room for it
     * (gateway/grpc.c), so a client that reads nothing cannot have answers
     * computed and held without bound. */
    http_request_answer_expected(req, out_bytes);
    call->output = malloc(out_bytes);
    if (!call->output) {
        http_respond_error(req, 500, NULL, "out of memory for the output");
        models_infer_call_free(call);
        return;
    }
    struct infer_item *it = &call->item;
    it->rows = call->r.rows;
    it->input = call->r.input;
    if (c->kind == MODEL_KIND_ENCODER)   /* the batcher plans in tokens */
    {
        int64_t tokens;
        encoder_rows_cost(call->r.input, (size_t)c->input.row_elems, call->r.rows, &tokens,
                          &it->tokens_sq, &it->max_len);
        it->tokens = (int)tokens;
    }
    it->output = call->output;
    it->t_arrival_ns = http_request_received_ns(req);
    it->tenant = auth_tenant(req);
    if (models_infer_budget(req, c, call) < 0) {
        models_account_reject(st, sm, req, BG_EINVAL, 400);
        models_infer_call_free(call);
        return;
    }
    if (models_admit(req, st, call) < 0) {
        /* Not the model's refusal (rejected_requests_total has no reason
         * for it): counted as an answer of the model and of the tenant. */
        models_account(st, sm, req, error_http_status(BG_ETENANTLIMIT), -1, NULL);
        models_infer_call_free(call);
        return;
    }
    it->complete = models_infer_call_complete;
    served_touch(sm);
    struct error err = {0};
    int rc = batcher_submit(sm->batcher, it, &err);
    if (rc == -BG_EDEADLINE && call->waited_ns > 0) {
        /* The load took the budget (its time was not known, or it ran
         * long): the model is not why it cannot be met, and it is ready
         * now. As SPEC.md says for a budget the load does not fit. */
        rc = error_set(&err, BG_ENOTREADY, "model %s was not loaded: loading it took %.0f ms of "
                       "the request's latency budget, which cannot be met now (it is loaded: "
                       "retry)", c->name, (double)call->waited_ns / 1e6);
    }
    if (rc) {
        /* A request over max_batch_tokens: its inputs are what is too long
         * (OpenAI's error names the field, as the decode's do). */
        if (rc == -BG_ETOOLONG && call->format == FORMAT_EMBED)
            http_request_set_error_param(req, call->embed.api == EMBED_OPENAI ? "input" : "inputs");
        models_account_reject(st, sm, req, rc, error_http_status(rc));
        if (call->admitted)   /* computed for nobody: its rows are not spent */
            admit_refund(st->admit, call->item.tenant, call->item.rows);
        http_respond_error(req, error_http_status(rc),
                           rc == -BG_EQUEUEFULL || rc == -BG_ENOTREADY ? "Retry-After: 1\r\n"
                                                                       : NULL,
                           "%s", err.msg);
        models_infer_call_free(call);
        return;
    }
    http_request_on_abort(req, models_infer_call_abort, call);
    /* A client that timed out closes its socket (a FIN, not a reset): its
     * rows were computed and counted a 200, the work nobody waits for,
     * most of it under overload (http.h: http_request_abort_on_fin). */
    http_request_abort_on_fin(req);
}

static void models_infer_run(struct http_request *req, const struct route_match *m,
                             struct api_state *st, struct served_model *held)
{
    struct served_model *sm = models_ready_or_wait(req, m, m, st, models_infer_run, held);
    if (!sm)
        return;
    if (models_refuse_full(req, st, sm)) {
        served_release(sm);
        return;
    }
    size_t len;
    const char *body = http_request_body(req, &len);
    int64_t json_len = models_header_int(req, "Inference-Header-Content-Length");
    if (json_len == -2) {
        models_account_reject(st, sm, req, BG_EINVAL, 400);
        http_respond_error(req, 400, NULL, "Inference-Header-Content-Length: not a length (one "
                           "header: the JSON head's size in bytes, digits only)");
        served_release(sm);
        return;
    }
    struct infer_call *call = models_call_new(req, st, sm);
    if (call && held)
        call->waited_ns = now_ns() - http_request_received_ns(req);
    if (!call)
        return;
    struct error err = {0};
    struct jscratch *js = models_scratch_of(st, req);
    jscratch_begin(js);
    call->shm = (struct api_shm_use){.st = st, .req = req};
    struct tensor_shm_resolver shm = {api_shm_resolve, &call->shm};
    /* An inner request from the gRPC front end carries the head it wrote as
     * text already parsed (http_inner_set_decoded); the same checks apply,
     * the binary part is still the body's after json_len. */
    struct json_t *head = http_request_decoded(req, TENSOR_KSERVE_HEAD);
    int drc = head && json_len >= 0 && (size_t)json_len <= len
                  ? tensor_decode_kserve_head(&sm->model, head, body + json_len,
                                              len - (size_t)json_len, &shm, &call->r, &err)
                  : tensor_decode_kserve_shm(&sm->model, body, len, json_len, &shm, &call->r,
                                             &err);
    jscratch_end(js);
    if (drc) {
        models_call_refuse(req, call, &err);
        return;
    }
    call->format = FORMAT_KSERVE;
    models_infer_submit(req, st, sm, call);
}

static void models_infer(struct http_request *req, const struct route_match *m, void *ctx)
{
    models_infer_run(req, m, ctx, NULL);
}

static void models_tfs_run(struct http_request *req, const struct route_match *m,
                           struct api_state *st, struct served_model *held);

/* POST /v1/models/{model}:predict (and .../versions/{v}:predict): the verb
 * shares the last path segment, so it is split off here. */
static void models_tfs_predict(struct http_request *req, const struct route_match *m, void *ctx)
{
    models_tfs_run(req, m, ctx, NULL);
}

static void models_tfs_run(struct http_request *req, const struct route_match *m,
                           struct api_state *st, struct served_model *held)
{
    struct route_match mm = *m;
    struct route_param *last = &mm.params[mm.nparams - 1];
    long name_len = api_tfs_predict_len(last);
    if (name_len < 0) {
        http_respond_error(req, 404, NULL, "only :predict is served on /v1/models/...");
        served_release(held);
        return;
    }
    last->len = (size_t)name_len;
    /* A wait runs this again with the route as matched (m), not as split. */
    struct served_model *sm = models_ready_or_wait(req, &mm, m, st, models_tfs_run, held);
    if (!sm)
        return;
    if (models_refuse_full(req, st, sm)) {
        served_release(sm);
        return;
    }
    size_t len;
    const char *body = http_request_body(req, &len);
    struct infer_call *call = models_call_new(req, st, sm);
    if (call && held)
        call->waited_ns = now_ns() - http_request_received_ns(req);
    if (!call)
        return;
    struct error err = {0};
    struct jscratch *js = models_scratch_of(st, req);
    jscratch_begin(js);
    int drc = tensor_decode_tfs(&sm->model.cfg, body ? body : "", len, &call->r, &err);
    jscratch_end(js);
    if (drc) {
        models_call_refuse(req, call, &err);
        return;
    }
    call->format = FORMAT_TFS;
    models_infer_submit(req, st, sm, call);
}

/* ---- embeddings: OpenAI's POST /v1/embeddings, TEI's POST /embed ---- */

/* The model of an embeddings request: OpenAI's `model`; for /embed (TEI
 * serves one model) the repository's only encoder. 0 with name, or
 * answers and returns -1. */
static int models_embed_target(struct http_request *req, struct api_state *st,
                               enum embed_api api, char *name, size_t cap)
{
    size_t len;
    const char *body = http_request_body(req, &len);
    struct error err = {0};
    if (api == EMBED_OPENAI) {
        char param[16];
        if (embed_openai_model(body ? body : "", len, name, cap, param, sizeof param, &err) == 0)
            return 0;
        http_request_set_error_param(req, param);
        http_respond_error(req, 400, NULL, "%s", err.msg);
        return -1;
    }
    /* Models, not entries: a model serving two versions is two entries
     * of one name (it was "there are 2"). The first few are named. */
    enum { SEEN = 8 };
    char seen[SEEN][MODEL_NAME_MAX];
    int found = 0, n = st->serving ? serving_count(st->serving) : 0;
    for (int i = 0; i < n; i++) {
        struct served_model *sm = serving_acquire_at(st->serving, i);
        if (!sm)
            continue;
        const char *nm = sm->model.cfg.name;
        bool again = false;
        for (int k = 0; k < found && k < SEEN && !again; k++)
            again = strcmp(seen[k], nm) == 0;
        if (sm->model.cfg.kind == MODEL_KIND_ENCODER && !again) {
            if (found < SEEN)
                snprintf(seen[found], sizeof seen[found], "%s", nm);
            found++;
        }
        served_release(sm);
    }
    if (found == 1) {
        snprintf(name, cap, "%s", seen[0]);
        return 0;
    }
    char names[400] = "";
    size_t used = 0;
    for (int k = 0; k < found && k < SEEN && used < sizeof names; k++)
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", k ? ", " : "",
                                 seen[k]);
    if (found)
        http_respond_error(req, 400, NULL, "POST /embed serves the repository's only encoder "
                           "model, and there are %d (%s): use POST /v1/embeddings with \"model\"",
                           found, names);
    else
        http_respond_error(req, 404, NULL, "POST /embed: the repository has no encoder model (a "
                           "Hugging Face folder: docs/EMBEDDINGS.md)");
    return -1;
}

static void models_embed_run(struct http_request *req, const struct route_match *m,
                             struct api_state *st, struct served_model *held, enum embed_api api,
                             models_run_fn again)
{
    char name[MODEL_NAME_MAX];
    struct route_match mm = {.nparams = 1, .pattern = m->pattern};
    if (held) {
        mm = *m;   /* the wait's copy: its model param names the model */
    } else {
        if (models_embed_target(req, st, api, name, sizeof name) < 0)
            return;
        mm.params[0] = (struct route_param){.name = "model", .value = name, .len = strlen(name)};
        if (!auth_check_model(st->auth, req, name, strlen(name)))
            return;
        struct served_model *known = st->serving ? serving_acquire(st->serving, name,
                                                                   strlen(name)) : NULL;
        if (!known && api == EMBED_OPENAI) {
            /* As OpenAI and the chat routes answer it (the openai client
             * showed two errors for one mistake). */
            http_request_set_error_param(req, "model");
            http_respond_error(req, 404, NULL, "The model `%s` does not exist", name);
            return;
        }
        served_release(known);
    }
    struct served_model *sm = models_ready_or_wait(req, &mm, &mm, st, again, held);
    if (!sm)
        return;
    if (models_refuse_full(req, st, sm)) {
        served_release(sm);
        return;
    }
    struct infer_call *call = models_call_new(req, st, sm);
    if (!call)
        return;
    if (held)
        call->waited_ns = now_ns() - http_request_received_ns(req);
    size_t len;
    const char *body = http_request_body(req, &len);
    struct error err = {0};
    struct jscratch *js = models_scratch_of(st, req);
    jscratch_begin(js);
    int drc = embed_decode(&sm->model, api, body ? body : "", len, &call->r, &call->embed, &err);
    jscratch_end(js);
    if (drc) {
        http_request_set_error_param(req, call->embed.param);
        models_call_refuse(req, call, &err);
        return;
    }
    call->format = FORMAT_EMBED;
    models_infer_submit(req, st, sm, call);
}

static void models_openai_embed_run(struct http_request *req, const struct route_match *m,
                                    struct api_state *st, struct served_model *held)
{
    models_embed_run(req, m, st, held, EMBED_OPENAI, models_openai_embed_run);
}

static void models_tei_embed_run(struct http_request *req, const struct route_match *m,
                                 struct api_state *st, struct served_model *held)
{
    models_embed_run(req, m, st, held, EMBED_TEI, models_tei_embed_run);
}

void api_models_openai_embed(struct http_request *req, const struct route_match *m, void *ctx)
{
    models_openai_embed_run(req, m, ctx, NULL);
}

static void models_tei_embed(struct http_request *req, const struct route_match *m, void *ctx)
{
    models_tei_embed_run(req, m, ctx, NULL);
}

int api_models_register(struct router *r, struct api_state *st, struct error *err)
{
    static const char *const stats[] = {"statistics", NULL};
    static const char *const config[] = {"model_configuration", NULL};
    static const char *const infer[] = {"binary_tensor_data", "classification", NULL};
    static const struct api_route routes[] = {
        /* Before /v2/models/{model}: the first route that matches wins. */
        {HTTP_M_GET, "/v2/models/stats", models_stats_all, stats},
        {HTTP_M_GET, "/v2/models/{model}", models_metadata, NULL},
        {HTTP_M_GET, "/v2/models/{model}/versions/{version}", models_metadata, NULL},
        {HTTP_M_GET, "/v2/models/{model}/ready", models_ready, NULL},
        {HTTP_M_GET, "/v2/models/{model}/versions/{version}/ready", models_ready, NULL},
        {HTTP_M_GET, "/v2/models/{model}/config", models_config_route, config},
        {HTTP_M_GET, "/v2/models/{model}/versions/{version}/config", models_config_route, config},
        {HTTP_M_GET, "/v2/models/{model}/stats", models_stats, stats},
        {HTTP_M_GET, "/v2/models/{model}/versions/{version}/stats", models_stats, stats},
        {HTTP_M_POST, "/v2/models/{model}/infer", models_infer, infer},
        {HTTP_M_POST, "/v2/models/{model}/versions/{version}/infer", models_infer, infer},
        {HTTP_M_POST, "/v1/models/{model}", models_tfs_predict, NULL},
        {HTTP_M_POST, "/v1/models/{model}/versions/{version}", models_tfs_predict, NULL},
        {HTTP_M_GET, "/v1/models/{model}/metadata", models_tfs_metadata, NULL},
        {HTTP_M_GET, "/v1/models/{model}/versions/{version}/metadata", models_tfs_metadata, NULL},
        {HTTP_M_POST, "/embed", models_tei_embed, NULL},
    };
    return api_routes_add(r, st, routes, sizeof routes / sizeof routes[0], err);
}

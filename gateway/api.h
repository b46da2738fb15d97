/* api.h - the HTTP API's route handlers, registered into the router by main. */
#ifndef BG_API_H
#define BG_API_H

#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "common/error.h"
#include "http/http.h"

struct buf;
struct serving;
struct server;
struct nvml;
struct procstat;
struct proxy;
struct grpc_service;
struct jobs;
struct auth;
struct admit;
struct tenantstats;
struct shmreg;
struct tensor_shm;

#define API_EXTENSIONS_MAX 16

/* Process state the health routes report. Owned by main. */
struct api_state {
    _Atomic bool ready;       /* startup finished (models loaded, from the inference issue on) */
    _Atomic bool draining;    /* SIGTERM received: not ready any more */
    struct serving *serving;  /* the models; NULL when none */
    const char *log_file;     /* the config's log_file; NULL or "": stderr (/v2/logging) */
    struct server *server;    /* for in-flight counts; set once it exists */
    int64_t start_ns;         /* process start (now_ns clock) */
    _Atomic int64_t ready_ns; /* when startup finished; 0 before */
    struct nvml *nvml;        /* the driver's own GPU view; NULL without NVML */
    struct procstat *procstat; /* the host's CPU and memory (procstat.h); may be NULL */
    bool triton_names;        /* metrics.triton_names: Triton's nv_ series on /metrics */
    struct proxy *proxy;      /* the reverse proxy; NULL when not built */
    struct grpc_service *grpc; /* the gRPC port's service (grpc.h); NULL when it is off */
    struct jscratch **jscratch; /* per IO thread: body decoding's arena (jscratch.h); may be NULL */
    int njscratch;
    struct jobs *jobs;        /* offline jobs (jobs.h); NULL when the state database is not open */
    /* Tenants (docs/TENANTS.md): who calls (auth.h; its guard runs before
     * every handler), their admission limits (admit.h) and their counters
     * (tenantstats.h). NULL where main made none (the tests): every request
     * is then the tenant `default`, unlimited, uncounted. */
    struct auth *auth;
    struct admit *admit;
    struct tenantstats *tenantstats;
    struct governor *governor;  /* time windows (serving/governance.h); NULL without tenants */
    struct ledger *ledger;    /* the usage ledger (serving/ledger.h); NULL without a state database */
    /* Long reads of the state database, off the IO threads (offload.h). */
    struct offload *offload;
    /* Triton's extensions the registered routes implement (api_routes.c). */
    const char *extensions[API_EXTENSIONS_MAX];
    int nextensions;
    /* Triton's system shared memory regions (shmreg.h; NULL: none served)
     * and whether clients off loopback may use them (shared_memory.allow_remote). */
    struct shmreg *shm;
    bool shm_allow_remote;
};

/* One route of the HTTP API and the Triton extensions it implements, by
 * Triton's names (NULL-terminated; NULL for none). GET /v2 lists the union
 * over the routes registered, so adding a route is the only way to add a
 * name, and a route left out (the proxy's, debug's) takes its name along. */
struct api_route {
    int methods;
    const char *pattern;
    route_handler_fn fn;
    const char *const *extensions;
};
/* Adds each route (ctx st) and records its extensions in st. */
int api_routes_add(struct router *r, struct api_state *st, const struct api_route *routes,
                   size_t n, struct error *err);
/* The recorded names as a JSON array, in the order first registered;
 * 0, or -1 out of memory. */
int api_extensions_append(const struct api_state *st, struct buf *out);

/* An error of the error.h vocabulary (code positive or negated) answered
 * with its status; a storage refusal that passes (BG_ESTORAGE: a full disk,
 * a database lock) with Retry-After, as clients retry a 503. */
void api_respond_code(struct http_request *req, int code, const char *msg);

/* The query's parameters against the `n` names the route takes: one given
 * twice is 400 (only the first is read, which a client cannot tell), and
 * so is one the route does not take (a typo read as absent) unless
 * `others_ok` (OpenAI's routes: clients add their own, Azure's
 * `api-version`). `route` names it in the message. 0, or -1 answered. */
int api_query_check(struct http_request *req, const char *const *known, int n, bool others_ok,
                    const char *route);

/* The request's body as a JSON object (a new reference), or NULL after
 * answering 400: invalid JSON with its line and column, anything else as
 * "must be a JSON object". `shape` says what the object holds, for the
 * message ({"key", "offset", "byte_size"}). An empty body is {} when
 * empty_ok. Duplicate keys are refused: which one would count is a guess. */
json_t *api_body_object(struct http_request *req, bool empty_ok, const char *shape);

/* 200 with the first `bytes` of the file at path (api_file.c), written as
 * the client takes it (HEAD: the head alone; 0 bytes: an empty answer,
 * whether the file exists or not). 0; or -1 with why, before
 * anything was answered (the file cannot be opened, or holds fewer bytes):
 * the caller answers. */
int api_respond_file(struct http_request *req, const char *path, int64_t bytes,
                     const char *content_type, char *why, size_t cap);

/* GET /v2/health/live, /v2/health/ready, /v2 */
int api_health_register(struct router *r, struct api_state *st, struct error *err);
/* GET/POST /v2/models/{model}[/versions/{v}][/ready|/config|/infer],
 * POST /v1/models/{model}:predict */
int api_models_register(struct router *r, struct api_state *st, struct error *err);
/* GET/POST /v2/logging: Triton's logging extension (api_logging.c). */
int api_logging_register(struct router *r, struct api_state *st, struct error *err);
/* Whether a route answers errors in OpenAI's shape (its clients' routes;
 * method: enum http_method's bit). */
bool api_openai_route(const char *pattern, int method);
/* router_set_precheck's (Expect: 100-continue): a POST naming a model no
 * folder holds is 404, and an inference its full queue would refuse 429,
 * before the client sends the body. */
bool api_models_precheck(struct http_request *req, const struct route_match *m, void *ctx);
/* Whether a path no route serves lies in OpenAI's own namespace (/v1/files,
 * /v1/batches, /v1/chat, ...; not /v1/models/..., TF Serving's too): its
 * 404 is then in OpenAI's shape. */
bool api_openai_path(const char *path, size_t len);
/* OpenAI's routes (api_llm.c): POST /v1/chat/completions, /v1/completions,
 * /v1/embeddings (LLM pools, and batchgate's encoders), GET /v1/models and
 * /v1/models/{model}. */
int api_llm_register(struct router *r, struct api_state *st, struct error *err);
/* A request of model sm (an inference, or an LLM pool's call) answered with
 * `status`, total_ns after it arrived: the model's counters
 * (requests_total) and its tenant's (tenant_requests_total counts what
 * requests_total counts). queue_ns and ran as modelstats_request's. */
struct infer_item;
struct served_model;
void api_count_request(struct api_state *st, struct served_model *sm, struct http_request *req,
                       int status, int64_t total_ns, int64_t queue_ns,
                       const struct infer_item *ran);
/* 429 for a tenant's limit (admit.h), in the route's error shape, with
 * the limit named as the `reason`, Retry-After and, when waiting will not
 * cure it soon, x-should-retry: false. */
struct admit_refusal;
void api_refuse_tenant(struct http_request *req, const struct admit_refusal *why);
/* A handler run again once the model it waited for is loaded, with a
 * reference to the copy it waited for (NULL: the first run). */
typedef void (*api_run_fn)(struct http_request *req, const struct route_match *m,
                           struct api_state *st, struct served_model *held);
/* A request found sm (a reference it hands over) not READY: when the
 * model's load (started here if none is under way) is expected to end
 * within the request's latency budget, the request waits, and run is
 * called again on its thread with the copy loaded (m's "model" parameter
 * names the model); otherwise it is answered 503 (with Retry-After when a
 * load will make it ready). A model whose last load failed is 503 with
 * the reason. Returns 1 when the model was loaded meanwhile (nothing was
 * answered: look it up again), else 0. */
int api_models_wait(struct http_request *req, const struct route_match *m,
                    struct api_state *st, struct served_model *sm, api_run_fn run);
/* POST /v1/embeddings on batchgate's own encoder models (api_models.c);
 * api_llm.c's route hands it what is not a pool's. */
void api_models_openai_embed(struct http_request *req, const struct route_match *m, void *ctx);
/* The version number a route's {version} parameter names: digits alone,
 * leading zeros read as Triton reads them ("2" and "02" are 2; "+2", " 2"
 * name none); 0 for none, or past 2^31-1. */
int api_version_number(const struct route_param *v);
/* The version a route names ({version}), checked against the versions the
 * model `name` serves: 0 when the route names none, that version when it
 * is served, -1 after answering 404 naming the versions served. */
int api_route_version(struct http_request *req, const struct route_match *m,
                      struct api_state *st, const char *name);
/* TF Serving's verb rides in a route's last parameter ({model} or
 * {version}, "digits:predict"): the length before ":predict", or -1 when
 * the parameter does not end in it (no verb, or another one). */
long api_tfs_predict_len(const struct route_param *last);
/* POST /v2/models/{model}/jobs, GET /v2/jobs, GET/DELETE /v2/jobs/{id},
 * GET /v2/jobs/{id}/results (SPEC.md "Jobs"). */
int api_jobs_register(struct router *r, struct api_state *st, struct error *err);
/* OpenAI's Batch API: /v1/files and /v1/batches (docs/LLM.md "Batch API"). */
int api_batch_register(struct router *r, struct api_state *st, struct error *err);
/* GET /v2/usage, GET /dashboard/usage (SPEC.md "Usage and cost"). */
int api_usage_register(struct router *r, struct api_state *st, struct error *err);
/* GET and PUT /v2/governance (SPEC.md "Time windows"). */
int api_governance_register(struct router *r, struct api_state *st, struct error *err);
int api_repository_register(struct router *r, struct api_state *st, struct error *err);
/* Triton's system shared memory extension (api_shm.c):
 * GET /v2/systemsharedmemory[/region/{name}]/status,
 * POST /v2/systemsharedmemory/region/{name}/register,
 * POST /v2/systemsharedmemory[/region/{name}]/unregister. */
int api_shm_register(struct router *r, struct api_state *st, struct error *err);
/* Inference's use of regions: what one request holds (embedded in the
 * request's call, so the common path allocates nothing; zeroed it holds
 * nothing), released by api_shm_use_release once the answer is written,
 * and the resolver over it (serving/tensor_json.h: struct
 * tensor_shm_resolver, ctx the use), which refuses callers off loopback or
 * without an admin key (403). */
struct shmreg_region;
struct api_shm_use {
    struct api_state *st;
    struct http_request *req;
    struct shmreg_region *held[2];   /* the input's and the output's region */
    int nheld;
};
void api_shm_use_release(struct api_shm_use *u);
int api_shm_resolve(void *ctx, const struct tensor_shm *ref, const char *what, void **bytes,
                    struct error *err);
/* GET /dashboard (a self-contained live page) and GET /dashboard/data (its JSON). */
int api_dashboard_register(struct router *r, struct api_state *st, struct error *err);
/* GET /metrics (Prometheus text format 0.0.4) */
int api_metrics_register(struct router *r, struct api_state *st, struct error *err);
/* The exposition itself, for tests: appends to out. */
int api_metrics_render(struct api_state *st, struct buf *out);
/* GET /debug/delay?ms=N[&id=X], POST /debug/echo, POST /debug/fault: test
 * hooks, off unless the config enables debug_endpoints. */
int api_debug_register(struct router *r, struct api_state *st, struct error *err);

#endif

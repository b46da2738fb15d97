/* model.h - a model: its config.json, validated, and its loaded state.
 *
 * A model directory holds config.json (SPEC.md) and, for the cpu and cuda
 * backends, model.safetensors. model_config_load validates everything that
 * can be checked without the weights; model_load (backend.h) checks the
 * weights against the layers. Errors name the file, the field and the
 * problem. */
#ifndef BG_MODEL_H
#define BG_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/dense.h"
#include "common/error.h"
#include "backends/hf_bert.h"

#define MODEL_NAME_MAX 128
#define MODEL_TENSOR_NAME_MAX 128
#define MODEL_MAX_DIMS 8
#define MODEL_MAX_LAYERS 64
#define MODEL_MAX_PREFERRED 16
#define MODEL_MAX_DEVICES 16
#define MODEL_MAX_VERSIONS 16       /* versions of one model served side by side */

enum model_backend {
    MODEL_BACKEND_AUTO,
    MODEL_BACKEND_CPU,
    MODEL_BACKEND_CUDA,
    MODEL_BACKEND_SYNTHETIC,
    MODEL_BACKEND_UPSTREAM,
    MODEL_BACKEND_OPENAI,
};
const char *model_backend_name_of(enum model_backend b);

/* What a model computes: a stack of layers from its config.json, or an
 * encoder read from a Hugging Face folder as it is (text in, one
 * embedding per text out: backends/encoder.h). */
enum model_kind { MODEL_KIND_LAYERS, MODEL_KIND_ENCODER, MODEL_KIND_POOL };

/* An input or output tensor; `shape` excludes the batch dimension. */
struct model_tensor {
    char name[MODEL_TENSOR_NAME_MAX];
    char datatype[16];           /* "FP32"; "BYTES" for an encoder's text input */
    int ndims;
    int64_t shape[MODEL_MAX_DIMS];
    /* Floats of one row in the batch buffers: the product of shape, except
     * for an encoder's text input, whose row carries its tokens (count, then
     * ids: backends/encoder.h), 1 + max_seq_length. */
    int64_t row_elems;
    /* An output's labels file (classification answers "value:index:label"),
     * relative to the model's folder; "" none. Read by model_load (labels.h). */
    char labels[256];
};

enum model_layer_type { MODEL_LAYER_DENSE, MODEL_LAYER_SOFTMAX };

struct model_layer {
    enum model_layer_type type;
    char weight[MODEL_TENSOR_NAME_MAX];
    char bias[MODEL_TENSOR_NAME_MAX];   /* empty: no bias */
    enum dense_act act;
    int64_t in, out;                    /* filled from the weights at load */
};

/* The lowest priority a request may ask for (1 is the highest). */
#define MODEL_PRIORITY_MAX 1000000

struct model_batching {
    int max_batch_size;
    int preferred[MODEL_MAX_PREFERRED];
    int npreferred;
    int64_t max_queue_delay_us;
    int64_t latency_budget_ms;
    int max_queue_size;
    int default_priority;        /* for requests that give none (or 0); 1 is the highest */
    int64_t priority_aging_ms;   /* the oldest request goes first after this long; 0: never */
    char policy[16];             /* "adaptive" (default), "deadline" or "fixed_delay" (Triton's) */
    int64_t batch_timeout_ms;    /* a batch still running after this is abandoned (504); 0: never */
    /* Tokens a batch may hold (batcher/work.h: a request's work units, its
     * rows unless it gives tokens); 0: no token budget, rows alone. */
    int max_batch_tokens;
    bool group_by_length;        /* with max_batch_tokens: batch similar lengths (batcher/group.h) */
};

enum synthetic_mode { SYNTHETIC_SLEEP, SYNTHETIC_SPIN };

#define MODEL_MAX_UPSTREAMS 8
enum upstream_protocol { UPSTREAM_KSERVE_V2, UPSTREAM_TFSERVING };

/* The model servers an upstream model is batched in front of. */
struct model_upstream {
    char hosts[MODEL_MAX_UPSTREAMS][256];
    int ports[MODEL_MAX_UPSTREAMS];
    int nurls;
    enum upstream_protocol protocol;
    char model[MODEL_NAME_MAX];       /* its name upstream (default: ours) */
    int max_inflight;                 /* batches in flight at once, all URLs */
    int timeout_ms;                   /* one upstream call */
    char health_path[256];            /* probed with GET; 200 means healthy */
    int health_interval_ms;           /* 0: no active probes */
    bool idempotent;                  /* a call lost on a reused connection may be sent again */
};

#define MODEL_MAX_ENDPOINTS 128
#define MODEL_MAX_ALIASES 8
enum pool_policy { POOL_PICK_SCORE, POOL_PICK_ROUND_ROBIN, POOL_PICK_LEAST_INFLIGHT };

/* An LLM pool (`"backend": "openai"`, MODEL_KIND_POOL): OpenAI-compatible
 * servers that batch inside themselves; batchgate picks the endpoint of
 * each call (serving/llmpool.h) and forwards it (docs/LLM.md). */
struct model_pool {
    char hosts[MODEL_MAX_ENDPOINTS][128];
    int ports[MODEL_MAX_ENDPOINTS];
    int nendpoints;
    char served_model_name[MODEL_NAME_MAX];   /* its name on the servers (default: ours) */
    char aliases[MODEL_MAX_ALIASES][MODEL_NAME_MAX];
    int naliases;
    enum pool_policy policy;
    double w_queue, w_kv_cache, w_prefix;     /* picker.weights */
    int slots;                                /* picker.slots: each endpoint's; 0 unknown */
    int affinity_entries;                     /* picker.affinity_entries: blocks */
    double sat_waiting, sat_kv_cache;         /* saturation */
    int metrics_interval_ms;                  /* 0: no scraping */
    char metrics_path[128];
    int timeout_ms;                           /* no answer, or no piece of a stream, this long */
    int tries;                                /* endpoints one call may try before its first byte */
    /* offline: the Batch API's lines use an endpoint only below these */
    int offline_max_running;                  /* its running + batchgate's unseen calls */
    int offline_max_inflight;                 /* batch calls in flight per endpoint */
    bool offline_preempt;                     /* an online call's pick closes a batch call there */
};

struct model_config {
    char name[MODEL_NAME_MAX];
    char dir[4096];
    char config_path[4200];      /* what messages about its settings name */
    /* output.labels against the model's folder, set where the config is
     * read from a folder (dir becomes a version's folder later). */
    char labels_path[4400];
    enum model_kind kind;
    struct hf_bert_config encoder;  /* MODEL_KIND_ENCODER: the folder's graph */
    enum model_backend backend;
    struct model_tensor input, output;  /* one of each for the backends built so far */
    struct model_layer layers[MODEL_MAX_LAYERS];
    int nlayers;
    struct model_batching batching;
    int instance_count;
    int instance_threads;         /* instances.threads: threads one batch is computed with */
    int devices[MODEL_MAX_DEVICES];
    int ndevices;
    int sched_weight;             /* scheduling.weight: its share of a shared device */
    struct {
        int latest;               /* version_policy.latest: how many of the highest */
        int specific[MODEL_MAX_VERSIONS];   /* version_policy.specific: these */
        int nspecific;
    } version_policy;
    struct {
        int lazy;                 /* load: 0 "eager", 1 "lazy" (loaded by its first request) */
        int idle_unload_s;        /* unloaded after this long without a request; 0: never */
    } lifecycle;
    struct {
        int64_t base_us, per_row_us;
        enum synthetic_mode mode;
    } synthetic;
    struct model_upstream upstream;
    struct model_pool pool;
};

/* The schema (common/schema.h) of config.json: defaults, checks and the
 * field table of docs/MODELS.md (`batchgate --config-fields model`). */
struct schema_field;
const struct schema_field *model_config_schema(void);

/* Reads and validates dir/config.json. `dir_name` is the folder's name: the
 * model's name defaults to it and, when given, must match it.
 *
 * A config.json with a `model_type` is a Hugging Face folder served as it
 * is (MODEL_KIND_ENCODER, hf_bert.h): its tensors come from the folder, and
 * batchgate's own settings (batching, instances, lifecycle, ...) from an
 * optional batchgate.json beside it, in config.json's schema less inputs,
 * outputs and layers. */
int model_config_load(const char *dir, const char *dir_name, struct model_config *cfg,
                      struct error *err);
/* Whether s may name a model: 1 to MODEL_NAME_MAX - 1 letters, digits,
 * '_', '-', '.' (names appear in URLs, metric labels, JSON and the
 * dashboard; a folder named otherwise is no model). */
bool model_name_ok(const char *s);
/* A config given as text (a load request's) for the folder dir: for a
 * Hugging Face folder it stands for batchgate.json; otherwise it is the
 * whole config.json, as model_config_parse. */
int model_config_load_text(const char *dir, const char *dir_name, const char *json, size_t len,
                           const char *path, struct model_config *cfg, struct error *err);
int model_config_parse(const char *json, size_t len, const char *path, const char *dir_name,
                       struct model_config *cfg, struct error *err);

/* Whether requests may reach the model by `name`: its own, or one of a
 * pool's aliases. */
bool model_config_answers_to(const struct model_config *c, const char *name);

#endif

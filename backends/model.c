/* model.c - config.json of a model (SPEC.md): its schema (common/schema.h),
 * the rules between fields that a table cannot state, and loading. */
#include "backends/model.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/schema.h"

/* A config.json is a few KiB; anything near this is not one. */
#define MODEL_CONFIG_MAX (16u << 20)
/* Elements of one row of a tensor, and so of each dimension. */
#define MODEL_ROW_MAX (1 << 24)

static const struct schema_name model_backends[] = {
    {"auto", MODEL_BACKEND_AUTO},           {"cpu", MODEL_BACKEND_CPU},
    {"cuda", MODEL_BACKEND_CUDA},           {"synthetic", MODEL_BACKEND_SYNTHETIC},
    {"upstream", MODEL_BACKEND_UPSTREAM},   {"openai", MODEL_BACKEND_OPENAI},
    {NULL, 0},
};

const char *model_backend_name_of(enum model_backend b)
{
    for (const struct schema_name *n = model_backends; n->name; n++)
        if (n->value == (int)b)
            return n->name;
    return "?";
}

/* ---- inputs and outputs ---- */

static int model_check_tensor(void *obj, json_t *json, struct schema_ctx *ctx)
{
    struct model_tensor *t = obj;
    t->row_elems = 1;
    for (int i = 0; i < t->ndims; i++) {
        t->row_elems *= t->shape[i];   /* both at most 2^24: no overflow */
        if (t->row_elems > MODEL_ROW_MAX)
            return schema_fail(ctx, "shape", "more than %d elements per row", MODEL_ROW_MAX);
    }
    return 0;
}

static const struct schema_name model_datatypes[] = {{"FP32", 0}, {NULL, 0}};

static const struct schema_field model_dim = {
    .type = SCHEMA_INT64, .min = 1, .max = MODEL_ROW_MAX,
    .hint = "the shape is per row: the batch dimension is implicit",
};

/* The rows inputs and outputs share; an output has one more (labels), so
 * each has its table and the docs list labels under outputs only. */
#define MODEL_TENSOR_ROWS                                                                 \
    {SCHEMA_F_STRING("name", struct model_tensor, name),                                  \
     .flags = SCHEMA_REQUIRED | SCHEMA_NONEMPTY,                                          \
     .doc = "the tensor's name in requests and answers"},                                 \
    {SCHEMA_F_STRING("datatype", struct model_tensor, datatype), .names = model_datatypes, \
     .sdef = "FP32", .hint = "the only datatype served for now",                          \
     .doc = "the only one served for now (an encoder folder's text input is `BYTES`: "     \
            "docs/EMBEDDINGS.md)"},                                                       \
    {SCHEMA_F_ARRAY("shape", struct model_tensor, shape, ndims, &model_dim),              \
     .flags = SCHEMA_REQUIRED, .min = 1,                                                  \
     .doc = "per row, without the batch dimension (reported as a leading -1)"}

static const struct schema_field model_input_fields[] = {
    MODEL_TENSOR_ROWS,
    SCHEMA_END_ROW,
};

static const struct schema_field model_output_fields[] = {
    MODEL_TENSOR_ROWS,
    {SCHEMA_F_STRING("labels", struct model_tensor, labels), .flags = SCHEMA_NONEMPTY,
     .doc_default = "none",
     .doc = "a file in the model's folder, one label a line, at least one per element of a "
            "row: classification answers `value:index:label` (docs/MODELS.md, \"Classification\"); "
            "read at load, which fails without it"},
    SCHEMA_END_ROW,
};

static const struct schema_field model_input = {
    .type = SCHEMA_OBJECT, .fields = model_input_fields, .check = model_check_tensor,
};

/* Whether a relative path names something outside its folder: absolute,
 * or with a ".." segment. */
static bool model_path_escapes(const char *p)
{
    if (p[0] == '/')
        return true;
    for (const char *s = p; s;) {
        if (s[0] == '.' && s[1] == '.' && (s[2] == '/' || s[2] == '\0'))
            return true;
        s = strchr(s, '/');
        if (s)
            s++;
    }
    return false;
}

/* A labels path stays inside the model's folder: a config may come from a
 * load request, and every label can be read back in answers. */
static int model_check_output(void *obj, json_t *json, struct schema_ctx *ctx)
{
    const struct model_tensor *t = obj;
    if (model_path_escapes(t->labels))
        return schema_fail(ctx, "labels", "\"%s\" must be a path inside the model's folder "
                           "(relative, no \"..\")", t->labels);
    return model_check_tensor(obj, json, ctx);
}

static const struct schema_field model_output = {
    .type = SCHEMA_OBJECT, .fields = model_output_fields, .check = model_check_output,
};

/* ---- layers ---- */

static const struct schema_name model_layer_types[] = {
    {"dense", MODEL_LAYER_DENSE}, {"softmax", MODEL_LAYER_SOFTMAX}, {NULL, 0},
};

static const struct schema_name model_activations[] = {
    {"relu", DENSE_ACT_RELU}, {"gelu", DENSE_ACT_GELU},       {"tanh", DENSE_ACT_TANH},
    {"sigmoid", DENSE_ACT_SIGMOID}, {"none", DENSE_ACT_NONE}, {NULL, 0},
};

/* The fields a layer takes depend on its type. */
static int model_check_layer(void *obj, json_t *json, struct schema_ctx *ctx)
{
    const struct model_layer *l = obj;
    static const char *const dense_only[] = {"weight", "bias", "activation"};
    if (l->type == MODEL_LAYER_DENSE && !l->weight[0])
        return schema_fail(ctx, "weight", "missing (a dense layer needs its weight tensor's name)");
    if (l->type == MODEL_LAYER_SOFTMAX)
        for (size_t i = 0; i < sizeof dense_only / sizeof dense_only[0]; i++)
            if (json_object_get(json, dense_only[i]))
                return schema_fail(ctx, dense_only[i], "a softmax layer takes only \"type\"");
    return 0;
}

static const struct schema_field model_layer_fields[] = {
    {SCHEMA_F_ENUM("type", struct model_layer, type, model_layer_types), .flags = SCHEMA_REQUIRED,
     .doc = "`dense`: y = act(x · Wᵀ + b); `softmax`: over each row"},
    {SCHEMA_F_STRING("weight", struct model_layer, weight), .flags = SCHEMA_NONEMPTY,
     .doc_default = "required (dense)",
     .doc = "dense: the tensor in model.safetensors, `[out_features, in_features]`"},
    {SCHEMA_F_STRING("bias", struct model_layer, bias), .flags = SCHEMA_NONEMPTY,
     .doc_default = "none", .doc = "dense: the bias tensor, `[out_features]`"},
    {SCHEMA_F_ENUM("activation", struct model_layer, act, model_activations), .sdef = "none",
     .doc = "dense: applied to the layer's output (gelu in its erf form, as PyTorch)"},
    SCHEMA_END_ROW,
};

static const struct schema_field model_layer = {
    .type = SCHEMA_OBJECT, .fields = model_layer_fields, .check = model_check_layer,
};

/* ---- batching ---- */

static int model_check_batching(void *obj, json_t *json, struct schema_ctx *ctx)
{
    const struct model_batching *b = obj;
    for (int i = 0; i < b->npreferred; i++)
        if (b->preferred[i] > b->max_batch_size) {
            char member[48];
            snprintf(member, sizeof member, "preferred_batch_sizes[%d]", i);
            return schema_fail(ctx, member, "%d is more than max_batch_size (%d)",
                               b->preferred[i], b->max_batch_size);
        }
    return 0;
}

static const struct schema_field model_batch_size = {.type = SCHEMA_INT, .min = 1, .max = 65536};

static const struct schema_name model_policies[] = {
    {"adaptive", 0}, {"deadline", 0}, {"fixed_delay", 0}, {NULL, 0}};

static const struct schema_field model_batching_fields[] = {
    {SCHEMA_F_INT("max_batch_size", struct model_batching, max_batch_size),
     .min = 1, .max = 65536, .def = 64, .doc = "rows per batch; a request carries 1 to this many"},
    {SCHEMA_F_ARRAY("preferred_batch_sizes", struct model_batching, preferred, npreferred,
                    &model_batch_size),
     .doc = "sizes to aim for, each at most `max_batch_size`"},
    {SCHEMA_F_INT64("max_queue_delay_us", struct model_batching, max_queue_delay_us),
     .min = 0, .max = 60000000, .def = 1000,
     .doc = "longest a request waits for company; with `adaptive` only an upper bound"},
    {SCHEMA_F_INT64("latency_budget_ms", struct model_batching, latency_budget_ms),
     .min = 0, .max = 3600000, .def = 0, .doc = "default deadline of a request; 0 = none"},
    {SCHEMA_F_INT("max_queue_size", struct model_batching, max_queue_size),
     .min = 1, .max = 1 << 24, .def = 4096, .doc = "requests waiting; 429 past it"},
    {SCHEMA_F_INT("default_priority", struct model_batching, default_priority),
     .min = 1, .max = MODEL_PRIORITY_MAX, .def = 1,
     .doc = "for requests that give none (or 0); 1 is the highest (docs/BATCHING.md)"},
    {SCHEMA_F_INT64("priority_aging_ms", struct model_batching, priority_aging_ms),
     .min = 0, .max = 3600000, .def = 1000,
     .doc = "the oldest request goes first after waiting this long; 0 = never (docs/BATCHING.md)"},
    {SCHEMA_F_STRING("policy", struct model_batching, policy), .names = model_policies,
     .sdef = "adaptive",
     .doc = "`adaptive` waits for company only when the arrival rate and latency model say it "
            "pays; `deadline` always waits `max_queue_delay_us` (the default before); "
            "`fixed_delay` is Triton's (docs/BATCHING.md)"},
    {SCHEMA_F_INT64("batch_timeout_ms", struct model_batching, batch_timeout_ms),
     .min = 0, .max = 3600000, .def = 30000,
     .doc = "a batch whose backend call has not returned after this long is abandoned, its "
            "requests get 504 (below); 0 = never"},
    {SCHEMA_F_INT("max_batch_tokens", struct model_batching, max_batch_tokens),
     .min = 0, .max = 1 << 26, .def = 0,
     .doc = "tokens per batch besides `max_batch_size` rows, for models whose requests carry "
            "tokens (encoders); a request over it is refused; 0 = no token budget "
            "(docs/BATCHING.md, Token budgets)"},
    {SCHEMA_F_BOOL("group_by_length", struct model_batching, group_by_length),
     .doc = "with `max_batch_tokens`: a batch cut from a longer queue prefers requests of "
            "similar length; for backends that pad (an upstream server), not the packed cpu "
            "encoder (docs/BATCHING.md, Token budgets)"},
    SCHEMA_END_ROW,
};

/* ---- instances, synthetic, upstream ---- */

static const struct schema_field model_device = {.type = SCHEMA_INT, .min = 0, .max = 255};

static const struct schema_field model_instances_fields[] = {
    {SCHEMA_F_INT("count", struct model_config, instance_count),
     .min = 1, .max = 256, .def = 1, .doc = "instances of the model, each with its worker"},
    {SCHEMA_F_INT("threads", struct model_config, instance_threads),
     .min = 1, .max = 256, .def = 1,
     .doc = "threads each instance computes a batch with (encoder models on the cpu backend; "
            "more than 1 is refused for other models): one "
            "instance of N threads answers a lone request about N times sooner; N instances of "
            "one thread each run N batches at once (docs/EMBEDDINGS.md)"},
    {SCHEMA_F_ARRAY("devices", struct model_config, devices, ndevices, &model_device),
     .doc = "the device of each instance (cuda: default device 0); models placed on one "
            "device share it by `scheduling.weight`"},
    SCHEMA_END_ROW,
};

/* Device scheduling (serving/devsched.h, docs/SCHEDULING.md). */
static const struct schema_field model_scheduling_fields[] = {
    {SCHEMA_F_INT("weight", struct model_config, sched_weight),
     .min = 1, .max = 1000, .def = 1,
     .doc = "the model's share of device time on a device it shares with other models "
            "(docs/SCHEDULING.md)"},
    SCHEMA_END_ROW,
};

/* Which numeric subfolders' weights are served (serving/serving.c,
 * docs/MODELS.md "Versions"). */
static const struct schema_field model_version = {.type = SCHEMA_INT, .min = 1, .max = 1000000000};

static const struct schema_field model_version_fields[] = {
    {SCHEMA_F_INT("latest", struct model_config, version_policy.latest),
     .min = 1, .max = MODEL_MAX_VERSIONS, .def = 1,
     .doc = "serve the N highest versions side by side"},
    {SCHEMA_F_ARRAY("specific", struct model_config, version_policy.specific,
                    version_policy.nspecific, &model_version),
     .doc = "`[n, ...]`: serve these versions instead of the highest"},
    SCHEMA_END_ROW,
};

/* When the model is resident (serving/lifecycle.c, docs/MODELS.md). */
static const struct schema_name model_load_modes[] = {
    {"eager", 0}, {"lazy", 1}, {NULL, 0},
};

static const struct schema_field model_lifecycle_fields[] = {
    {SCHEMA_F_ENUM("load", struct model_config, lifecycle.lazy, model_load_modes),
     .sdef = "eager",
     .doc = "`eager`: loaded at start; `lazy`: loaded by its first request (which waits when "
            "its budget covers the expected load time, else 503 with `Retry-After`)"},
    {SCHEMA_F_INT("idle_unload_s", struct model_config, lifecycle.idle_unload_s),
     .min = 0, .max = 31536000, .def = 0,
     .doc = "unloaded after this many seconds without a request; 0: never"},
    SCHEMA_END_ROW,
};

static const struct schema_name model_synthetic_modes[] = {
    {"sleep", SYNTHETIC_SLEEP}, {"spin", SYNTHETIC_SPIN}, {NULL, 0},
};

static const struct schema_field model_synthetic_fields[] = {
    {SCHEMA_F_INT64("base_us", struct model_config, synthetic.base_us),
     .min = 0, .max = 60000000, .def = 2000,
     .doc = "time of a batch: `base_us + per_row_us × rows`"},
    {SCHEMA_F_INT64("per_row_us", struct model_config, synthetic.per_row_us),
     .min = 0, .max = 60000000, .def = 20, .doc = "see base_us"},
    {SCHEMA_F_ENUM("mode", struct model_config, synthetic.mode, model_synthetic_modes),
     .sdef = "sleep", .doc = "`spin` occupies a core like a real kernel"},
    SCHEMA_END_ROW,
};

static const struct schema_name model_protocols[] = {
    {"kserve_v2", UPSTREAM_KSERVE_V2}, {"tfserving", UPSTREAM_TFSERVING}, {NULL, 0},
};

static const struct schema_field model_upstream_fields[] = {
    {SCHEMA_F_URLS("urls", struct model_upstream, hosts, ports, nurls), .min = 1,
     .doc_default = "required (upstream)", .doc = "the model servers batched in front of, each once (a server named twice is "
             "refused: its series would come twice in `/metrics`)"},
    {SCHEMA_F_ENUM("protocol", struct model_upstream, protocol, model_protocols),
     .sdef = "kserve_v2", .doc = "how a batch is sent: KServe v2 `infer` or TF Serving `:predict`"},
    {SCHEMA_F_STRING("model", struct model_upstream, model),
     .flags = SCHEMA_NONEMPTY | SCHEMA_SEGMENT,
     .doc_default = "ours", .doc = "its name upstream (no `/`, `?`, `#`, space or control "
                                   "character: it goes into the calls' paths)"},
    {SCHEMA_F_INT("max_inflight", struct model_upstream, max_inflight),
     .min = 1, .max = 4096, .def = 4, .doc = "batches in flight at once, all URLs together"},
    {SCHEMA_F_INT("timeout_ms", struct model_upstream, timeout_ms),
     .min = 1, .max = 3600000, .def = 10000, .doc = "one upstream call; past it: 502 (or 504)"},
    {SCHEMA_F_STRING("health_path", struct model_upstream, health_path),
     .flags = SCHEMA_NONEMPTY | SCHEMA_SLASH,
     .doc_default = "`/v2/health/ready` (kserve_v2), `/v1/models/{model}` (tfserving)",
     .doc = "probed with `GET`; a refused connection takes a URL out at once, any other failure "
            "(not 200, no answer within the interval; for tfserving's model status, no "
            "version `AVAILABLE`: it is 200 whatever the state) at the third in a row"},
    {SCHEMA_F_INT("health_interval_ms", struct model_upstream, health_interval_ms),
     .min = 0, .max = 3600000, .def = 2000, .doc = "0 turns active probes off"},
    /* Inference is a pure function: a call lost with a reused connection is
     * sent again (common/upcall.h); false for a server whose answers have
     * side effects. */
    {SCHEMA_F_BOOL("idempotent", struct model_upstream, idempotent), .def = true,
     .doc = "a batch lost with a reused keep-alive connection is sent again (docs/PROXY.md "
            "\"Retries\"); `false` for a server whose answers have side effects"},
    SCHEMA_END_ROW,
};

/* ---- LLM pools ---- */


static int model_parse_aliases(void *base, json_t *v, const struct schema_field *f,
                               struct schema_ctx *ctx)
{
    struct model_config *c = base;
    (void)f;
    c->pool.naliases = 0;
    if (!v)
        return 0;
    if (!json_is_array(v) || json_array_size(v) > MODEL_MAX_ALIASES)
        return schema_fail(ctx, NULL, "must be a list of at most %d names", MODEL_MAX_ALIASES);
    size_t i;
    json_t *a;
    json_array_foreach(v, i, a) {
        char member[32];
        snprintf(member, sizeof member, "[%zu]", i);
        const char *s = json_string_value(a);
        if (!s || !s[0] || json_string_length(a) >= MODEL_NAME_MAX || !model_name_ok(s))
            return schema_fail(ctx, member, "must be a name of 1 to %d letters, digits, _ - . "
                               "(as model names)", MODEL_NAME_MAX - 1);
        snprintf(c->pool.aliases[i], sizeof c->pool.aliases[i], "%s", s);
    }
    c->pool.naliases = (int)json_array_size(v);
    return 0;
}

static const struct schema_name model_pool_policies[] = {
    {"score", POOL_PICK_SCORE},
    {"round_robin", POOL_PICK_ROUND_ROBIN},
    {"least_inflight", POOL_PICK_LEAST_INFLIGHT},
    {NULL, 0},
};

static const struct schema_field model_pool_weights[] = {
    {SCHEMA_F_DOUBLE("queue", struct model_config, pool.w_queue), .fmin = 0, .fmax = 1000,
     .fdef = 1, .doc = "against an endpoint's queue (its waiting requests and ours in flight)"},
    {SCHEMA_F_DOUBLE("kv_cache", struct model_config, pool.w_kv_cache), .fmin = 0, .fmax = 1000,
     .fdef = 1, .doc = "against its KV cache usage, where the server reports it"},
    {SCHEMA_F_DOUBLE("prefix", struct model_config, pool.w_prefix), .fmin = 0, .fmax = 1000,
     .fdef = 2, .doc = "for the share of the prompt's leading blocks it holds"},
    SCHEMA_END_ROW,
};

static const struct schema_field model_pool_picker[] = {
    {SCHEMA_F_ENUM("policy", struct model_config, pool.policy, model_pool_policies),
     .sdef = "score", .doc = "`round_robin` and `least_inflight` stay to compare against"},
    {SCHEMA_F_SECTION("weights", model_pool_weights), .doc = "the score's terms"},
    {SCHEMA_F_INT("slots", struct model_config, pool.slots), .min = 0, .max = 100000, .def = 0,
     .doc = "each endpoint's parallel slots (llama-server's `-np`, its `/props` "
            "`total_slots`): calls beyond batchgate's last scrape take free slots before they "
            "queue, and where no KV cache gauge is scraped slot use stands in for it "
            "(docs/LLM.md); 0: unknown"},
    {SCHEMA_F_INT("affinity_entries", struct model_config, pool.affinity_entries), .min = 1024,
     .max = 16777216, .def = 65536,
     .doc = "prompt blocks (64 bytes of text each) the prefix affinity table remembers, least "
            "recently recorded evicted first; about 100 bytes each"},
    SCHEMA_END_ROW,
};

static const struct schema_field model_pool_saturation[] = {
    {SCHEMA_F_DOUBLE("waiting", struct model_config, pool.sat_waiting), .fmin = 0.5,
     .fmax = 1e6, .fdef = 8, .doc = "an endpoint with this many requests queued is saturated"},
    {SCHEMA_F_DOUBLE("kv_cache", struct model_config, pool.sat_kv_cache), .fmin = 0.01,
     .fmax = 1, .fdef = 0.9, .doc = "or with its KV cache this full"},
    SCHEMA_END_ROW,
};

static const struct schema_field model_pool_offline[] = {
    {SCHEMA_F_INT("max_running", struct model_config, pool.offline_max_running), .min = 0,
     .max = 100000, .def = 4,
     .doc = "a Batch API line goes to an endpoint only while its running requests (as scraped, "
            "plus batchgate's calls since) are below this, and nothing waits there; 0: batches "
            "never use this pool"},
    {SCHEMA_F_INT("max_inflight_per_endpoint", struct model_config, pool.offline_max_inflight),
     .min = 1, .max = 100000, .def = 4,
     .doc = "Batch API lines in flight to one endpoint, at most"},
    {SCHEMA_F_BOOL("preempt", struct model_config, pool.offline_preempt), .def = false,
     .doc = "an online call sent to an endpoint closes a Batch API line's call there (the line "
            "waits and runs again later): online calls share the server with no line, at the "
            "cost of the line's work so far"},
    SCHEMA_END_ROW,
};

/* ---- config.json ---- */

static const struct schema_field model_fields[] = {
    {SCHEMA_F_STRING("name", struct model_config, name), .flags = SCHEMA_NONEMPTY,
     .doc_default = "the folder's",
     .doc = "must equal the folder's name; letters, digits, `_ - .`"},
    {SCHEMA_F_ENUM("backend", struct model_config, backend, model_backends), .sdef = "auto",
     .doc = "`auto`: cuda when usable, else cpu (see below)"},
    {SCHEMA_F_ONE("inputs", struct model_config, input, &model_input), .flags = SCHEMA_REQUIRED,
     .hint = "exactly one tensor is supported by the cpu, cuda and synthetic backends",
     .doc = "the input tensor"},
    {SCHEMA_F_ONE("outputs", struct model_config, output, &model_output), .flags = SCHEMA_REQUIRED,
     .hint = "exactly one tensor is supported by the cpu, cuda and synthetic backends",
     .doc = "the output tensor"},
    {SCHEMA_F_ARRAY("layers", struct model_config, layers, nlayers, &model_layer),
     .doc_default = "required (cpu, cuda)",
     .doc = "cpu and cuda: applied in order; other backends take none"},
    {SCHEMA_F_OBJECT("batching", struct model_config, batching, model_batching_fields),
     .check = model_check_batching, .doc = "how requests are batched"},
    {SCHEMA_F_SECTION("instances", model_instances_fields), .doc = "where the model runs"},
    {SCHEMA_F_SECTION("scheduling", model_scheduling_fields),
     .doc = "how it shares a device with other models"},
    {SCHEMA_F_SECTION("version_policy", model_version_fields),
     .doc = "which version folder (`<n>/model.safetensors`) is served"},
    {SCHEMA_F_SECTION("lifecycle", model_lifecycle_fields),
     .doc = "when it is loaded and unloaded (docs/MODELS.md, \"Lifecycle\")"},
    {SCHEMA_F_SECTION("synthetic", model_synthetic_fields), .doc = "the synthetic backend"},
    {SCHEMA_F_OBJECT("upstream", struct model_config, upstream, model_upstream_fields),
     .doc = "the upstream backend"},
    {SCHEMA_F_URLS("endpoints", struct model_config, pool.hosts, pool.ports, pool.nendpoints),
     .min = 1,
     .doc_default = "required (openai)", .doc = "an LLM pool's OpenAI-compatible servers, each once"},
    {SCHEMA_F_STRING("served_model_name", struct model_config, pool.served_model_name),
     .doc_default = "ours", .doc = "openai: the model's name on its servers"},
    {SCHEMA_F_CUSTOM("aliases", model_parse_aliases), .expect = "a list of names",
     .doc_default = "`[]`", .doc = "openai: other names requests may use"},
    {SCHEMA_F_SECTION("picker", model_pool_picker), .doc = "openai: how an endpoint is chosen"},
    {SCHEMA_F_SECTION("saturation", model_pool_saturation),
     .doc = "openai: when an endpoint counts as saturated (shedding)"},
    {SCHEMA_F_INT("metrics_interval_ms", struct model_config, pool.metrics_interval_ms),
     .min = 0, .max = 600000, .def = 200,
     .doc = "openai: how often each endpoint's metrics are scraped; 0: never"},
    {SCHEMA_F_STRING("metrics_path", struct model_config, pool.metrics_path),
     .flags = SCHEMA_SLASH, .sdef = "/metrics", .doc = "openai: where they are"},
    {SCHEMA_F_INT("timeout_ms", struct model_config, pool.timeout_ms), .min = 100,
     .max = 3600000, .def = 300000,
     .doc = "openai: no answer, or no piece of a stream, for this long: 504 (or a cut stream)"},
    {SCHEMA_F_INT("tries", struct model_config, pool.tries), .min = 1, .max = 8, .def = 3,
     .doc = "openai: endpoints a call may try while nothing reached its client"},
    {SCHEMA_F_SECTION("offline", model_pool_offline),
     .doc = "openai: the idle capacity the Batch API's lines may use (docs/LLM.md, \"Batch API\")"},
    {SCHEMA_F_IGNORE("platform"),
     .doc = "Triton's; accepted and ignored (`GET /v2/models/{m}` reports "
            "`batchgate_<backend>`)"},
    SCHEMA_END_ROW,
};

const struct schema_field *model_config_schema(void)
{
    return model_fields;
}

bool model_config_answers_to(const struct model_config *c, const char *name)
{
    if (strcmp(c->name, name) == 0)
        return true;
    for (int i = 0; c->kind == MODEL_KIND_POOL && i < c->pool.naliases; i++)
        if (strcmp(c->pool.aliases[i], name) == 0)
            return true;
    return false;
}

bool model_name_ok(const char *s)
{
    /* Names appear in URLs and metric labels: keep them to a portable set. */
    if (!*s || strlen(s) >= MODEL_NAME_MAX)
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return false;
    return true;
}

/* An encoder's tensors and layers are its folder's; what batchgate.json
 * may say about them was refused before the parse (model_encoder_json). */
static int model_check_encoder(struct model_config *c, const char *path, struct error *err)
{
    if (c->backend != MODEL_BACKEND_AUTO && c->backend != MODEL_BACKEND_CPU &&
        c->backend != MODEL_BACKEND_CUDA)
        return error_set(err, BG_ECONFIG, "%s: backend: \"%s\" does not run an encoder (auto, "
                         "cpu or cuda do)", path, model_backend_name_of(c->backend));
    int64_t cap = c->batching.max_batch_tokens;
    if (cap > 0 && cap < c->encoder.max_seq_length)
        return error_set(err, BG_ECONFIG, "%s: batching.max_batch_tokens: %lld is less than the "
                         "model's max_seq_length (%d): a text of full length could never run",
                         path, (long long)cap, c->encoder.max_seq_length);
    /* Text (the schema knows FP32 only, which a user's config may not
     * change); its row: the token count, then up to max_seq_length ids. */
    snprintf(c->input.datatype, sizeof c->input.datatype, "BYTES");
    c->input.row_elems = 1 + (int64_t)c->encoder.max_seq_length;
    return 0;
}

static int model_check_pool(struct model_config *c, const char *path, struct error *err)
{
    struct model_pool *p = &c->pool;
    if (!p->nendpoints)
        return error_set(err, BG_ECONFIG, "%s: endpoints: missing (an openai pool needs 1 to %d "
                         "URLs like \"http://HOST:PORT\" of OpenAI-compatible servers)", path,
                         MODEL_MAX_ENDPOINTS);
    if (!p->served_model_name[0])
        snprintf(p->served_model_name, sizeof p->served_model_name, "%s", c->name);
    for (int i = 0; i < p->naliases; i++) {
        if (strcmp(p->aliases[i], c->name) == 0)
            return error_set(err, BG_ECONFIG, "%s: aliases[%d]: \"%s\" is the pool's own name",
                             path, i, p->aliases[i]);
        for (int k = 0; k < i; k++)
            if (strcmp(p->aliases[i], p->aliases[k]) == 0)
                return error_set(err, BG_ECONFIG, "%s: aliases[%d]: \"%s\" is given twice",
                                 path, i, p->aliases[i]);
    }
    c->instance_count = 1;
    snprintf(c->input.datatype, sizeof c->input.datatype, "BYTES");
    snprintf(c->output.datatype, sizeof c->output.datatype, "BYTES");
    return 0;
}

/* What depends on more than one field, or on the folder. */
static int model_config_check(struct model_config *c, json_t *root, const char *path,
                              const char *dir_name, struct error *err)
{
    if (!c->name[0] && !dir_name)
        return error_set(err, BG_ECONFIG, "%s: name: missing (must be a non-empty string)", path);
    if (!c->name[0])
        snprintf(c->name, sizeof c->name, "%s", dir_name);
    if (dir_name && strcmp(c->name, dir_name) != 0)
        return error_set(err, BG_ECONFIG, "%s: name: \"%s\" differs from its folder \"%s\"", path,
                         c->name, dir_name);
    if (!model_name_ok(c->name))
        return error_set(err, BG_ECONFIG, "%s: name: \"%s\" may use only letters, digits, _ - .",
                         path, c->name);
    const char *backend = model_backend_name_of(c->backend);
    if (c->kind == MODEL_KIND_ENCODER)
        return model_check_encoder(c, path, err);
    if (c->kind == MODEL_KIND_POOL)
        return model_check_pool(c, path, err);
    if (c->pool.nendpoints)
        return error_set(err, BG_ECONFIG, "%s: endpoints: only an openai pool (`\"backend\": "
                         "\"openai\"`) has endpoints; the upstream backend's servers are "
                         "upstream.urls", path);
    if (c->instance_threads > 1)
        return error_set(err, BG_ECONFIG, "%s: instances.threads: %d, but only an encoder model "
                         "computes a batch on several threads (docs/EMBEDDINGS.md); use "
                         "instances.count for more batches at once", path, c->instance_threads);
    bool layered = c->backend != MODEL_BACKEND_SYNTHETIC && c->backend != MODEL_BACKEND_UPSTREAM;
    if (!layered && c->nlayers > 0)
        return error_set(err, BG_ECONFIG, "%s: layers: the %s backend takes no layers", path,
                         backend);
    if (layered && c->nlayers == 0)
        return error_set(err, BG_ECONFIG, "%s: layers: the %s backend needs at least one layer",
                         path, backend);
    if (c->backend != MODEL_BACKEND_UPSTREAM)
        return 0;
    struct model_upstream *u = &c->upstream;
    if (!json_object_get(root, "upstream"))
        return error_set(err, BG_ECONFIG, "%s: upstream: the upstream backend needs an object "
                                          "with urls", path);
    if (!u->nurls)
        return error_set(err, BG_ECONFIG, "%s: upstream.urls: missing (the upstream backend "
                                          "needs 1 to %d URLs like \"http://HOST:PORT\")", path,
                         MODEL_MAX_UPSTREAMS);
    if (!u->model[0])
        snprintf(u->model, sizeof u->model, "%s", c->name);
    /* The protocol's own readiness endpoint unless told otherwise. */
    if (!u->health_path[0] && u->protocol == UPSTREAM_KSERVE_V2)
        snprintf(u->health_path, sizeof u->health_path, "/v2/health/ready");
    else if (!u->health_path[0])
        snprintf(u->health_path, sizeof u->health_path, "/v1/models/%s", u->model);
    return 0;
}

static void model_config_init(struct model_config *c, const char *path)
{
    memset(c, 0, sizeof *c);
    schema_defaults(model_fields, c);
    snprintf(c->config_path, sizeof c->config_path, "%s", path);
}

/* A pool's requests are OpenAI's, not tensors: its config names none, and
 * the tensors its metadata shows (text in, text out) are put in here. */
static int model_pool_json(struct model_config *c, json_t *root, const char *path,
                           struct error *err)
{
    static const char *const not_pool[] = {"inputs", "outputs", "layers", "upstream",
                                           "instances", "synthetic"};
    for (size_t i = 0; i < sizeof not_pool / sizeof not_pool[0]; i++)
        if (json_object_get(root, not_pool[i]))
            return error_set(err, BG_ECONFIG, "%s: %s: an openai pool takes no %s (its servers "
                             "are its `endpoints`; docs/LLM.md); remove it", path, not_pool[i],
                             not_pool[i]);
    json_object_set_new(root, "inputs",
                        json_pack("[{s:s, s:s, s:[i]}]", "name", "prompt", "datatype", "FP32",
                                  "shape", 1));
    json_object_set_new(root, "outputs",
                        json_pack("[{s:s, s:s, s:[i]}]", "name", "text", "datatype", "FP32",
                                  "shape", 1));
    c->kind = MODEL_KIND_POOL;
    return 0;
}

static int model_config_from_json(struct model_config *c, json_t *root, const char *path,
                                  const char *dir_name, struct error *err)
{
    json_t *b = json_is_object(root) ? json_object_get(root, "backend") : NULL;
    if (b && json_is_string(b) && strcmp(json_string_value(b), "openai") == 0 &&
        model_pool_json(c, root, path, err) != 0) {
        json_decref(root);
        return -err->code;
    }
    int rc = schema_parse(model_fields, c, root, path, err);
    if (rc == 0)
        rc = model_config_check(c, root, path, dir_name, err);
    json_decref(root);
    return rc;
}

int model_config_parse(const char *json, size_t len, const char *path, const char *dir_name,
                       struct model_config *c, struct error *err)
{
    json_t *root;
    model_config_init(c, path);
    int rc = schema_json_parse(json, len, path, &root, err);
    return rc ? rc : model_config_from_json(c, root, path, dir_name, err);
}

/* ---- a Hugging Face folder served as it is ---- */

/* Whether dir/config.json is a Hugging Face model's (it names its
 * model_type; batchgate's config.json has no such field). */
static bool model_dir_is_hf(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = NULL;
    struct error e = {0};
    if (schema_json_read(path, MODEL_CONFIG_MAX, &root, &e) != 0)
        return false;
    bool hf = json_is_object(root) && json_object_get(root, "model_type") != NULL;
    json_decref(root);
    return hf;
}

/* batchgate's settings for an encoder folder (root: batchgate.json's
 * object, consumed) with the tensors the folder implies put in. */
static int model_encoder_json(struct model_config *c, json_t *root, const char *path,
                              const char *dir_name, struct error *err)
{
    static const char *const folder_owned[] = {"inputs", "outputs", "layers"};
    if (!json_is_object(root)) {
        json_decref(root);
        return error_set(err, BG_ECONFIG, "%s: must be a JSON object", path);
    }
    for (size_t i = 0; i < sizeof folder_owned / sizeof folder_owned[0]; i++)
        if (json_object_get(root, folder_owned[i])) {
            json_decref(root);
            return error_set(err, BG_ECONFIG, "%s: %s: an encoder's tensors and layers come from "
                             "its Hugging Face folder (text in, one embedding out); remove it",
                             path, folder_owned[i]);
        }
    json_object_set_new(root, "inputs",
                        json_pack("[{s:s, s:s, s:[i]}]", "name", "text", "datatype", "FP32",
                                  "shape", 1));
    json_object_set_new(root, "outputs",
                        json_pack("[{s:s, s:s, s:[i]}]", "name", "embedding", "datatype", "FP32",
                                  "shape", c->encoder.hidden));
    c->kind = MODEL_KIND_ENCODER;
    return model_config_from_json(c, root, path, dir_name, err);
}

/* The folder's graph, then batchgate.json (or `text`, a load request's). */
static int model_encoder_load(const char *dir, const char *dir_name, const char *text,
                              size_t len, const char *text_path, struct model_config *c,
                              struct error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/batchgate.json", dir);
    model_config_init(c, text ? text_path : path);
    int rc = hf_bert_config_load(dir, &c->encoder, err);
    if (rc)
        return rc;
    json_t *root = NULL;
    struct stat st;
    if (text)
        rc = schema_json_parse(text, len, text_path, &root, err);
    else if (stat(path, &st) == 0)
        rc = schema_json_read(path, MODEL_CONFIG_MAX, &root, err);
    else
        root = json_object();   /* every setting its default */
    if (rc)
        return rc;
    if (!root)
        return error_set(err, BG_ENOMEM, "%s: out of memory", path);
    return model_encoder_json(c, root, text ? text_path : path, dir_name, err);
}

/* c was read from the folder dir: where its files are. */
static void model_config_set_dir(struct model_config *c, const char *dir)
{
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    if (c->output.labels[0])
        snprintf(c->labels_path, sizeof c->labels_path, "%.4096s/%s", dir, c->output.labels);
}

int model_config_load_text(const char *dir, const char *dir_name, const char *json, size_t len,
                           const char *path, struct model_config *c, struct error *err)
{
    int rc = model_dir_is_hf(dir)
                 ? model_encoder_load(dir, dir_name, json, len, path, c, err)
                 : model_config_parse(json, len, path, dir_name, c, err);
    model_config_set_dir(c, dir);
    return rc;
}

int model_config_load(const char *dir, const char *dir_name, struct model_config *c,
                      struct error *err)
{
    char path[4200];
    json_t *root;
    if (model_dir_is_hf(dir)) {
        int rc = model_encoder_load(dir, dir_name, NULL, 0, NULL, c, err);
        model_config_set_dir(c, dir);
        return rc;
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    model_config_init(c, path);
    int rc = schema_json_read(path, MODEL_CONFIG_MAX, &root, err);
    if (rc == 0)
        rc = model_config_from_json(c, root, path, dir_name, err);
    model_config_set_dir(c, dir);
    return rc;
}

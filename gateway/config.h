/* config.h - the gateway's configuration: defaults, the JSON file, validation.
 *
 * Every field of SPEC.md's config file lives here. Loading never exits: it
 * returns -BG_ECONFIG with a message naming the file, the field and the
 * problem, and main turns that into exit status 2. */
#ifndef BG_CONFIG_H
#define BG_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "common/log.h"
#include "http/http.h"
#include "serving/ledger.h"
#include "serving/lifecycle.h"
#include "serving/tenant.h"

#define CONFIG_MAX_PROXY_ROUTES 16
#define CONFIG_MAX_PROXY_URLS 8

/* Requests under `prefix` go to one of `urls` as they are (a reverse proxy). */
struct config_proxy_route {
    char prefix[256];
    char hosts[CONFIG_MAX_PROXY_URLS][256];
    int ports[CONFIG_MAX_PROXY_URLS];
    int nurls;
    bool strip_prefix;         /* "/tfs/v1/x" under "/tfs/" goes upstream as "/v1/x" */
    int pipeline;              /* bodiless GET/HEAD/OPTIONS ready together share a connection, up to this many */
    char health_path[256];     /* "": passive health only; else probed every health_interval_ms */
    int health_interval_ms;
    bool idempotent;           /* a POST may be repeated after a lost keep-alive connection too */
};

struct config_proxy {
    struct config_proxy_route routes[CONFIG_MAX_PROXY_ROUTES];
    int nroutes;
    int timeout_ms;            /* connect to the answer's head, and any stall of a body after */
    int connect_timeout_ms;    /* a connect not done by then: as refused, the next server */
    int max_idle;              /* keep-alive connections kept per upstream per IO thread */
    bool model_metadata;       /* GET /v2/models/{m} of kserve_v2 upstream models goes upstream */
};

/* Offline jobs (docs/JOBS.md). */
struct config_jobs {
    char dir[4096];            /* inputs and results; "": <state_dir>/jobs */
    size_t max_input_bytes;    /* a job's input (body or input_path file); 413 past it */
    size_t max_file_bytes;     /* a /v1/files upload (the Batch API); 413 past it */
    int64_t file_expiry_s;     /* Batch API files without their own expires_after; 0: never */
    int64_t retention_s;       /* an ended job is forgotten after it; 0: never */
    int runner_priority;       /* enum jobs_priority (serving/jobs.h) */
};

/* /metrics (docs/METRICS.md). */
struct config_metrics {
    bool triton_names;         /* Triton's nv_ series beside batchgate's */
};

/* Triton's system shared memory extension (gateway/api_shm.c). */
struct config_shared_memory {
    bool allow_remote;         /* serve it to clients off loopback too */
};

struct config {
    /* listen, io_threads and limits: what the HTTP server takes as it is
     * (port 0 = ephemeral, logged once bound; io_threads 0 = one per online
     * core, resolved by main). */
    struct http_server_config http;
    char model_repository[4096];
    bool model_repository_set;  /* given explicitly: it must exist */
    int repository_poll_s;     /* 0: the repository is scanned once, at start */
    int removed_metrics_keep_s;   /* a model gone from the repository keeps its series so long */
    int shutdown_timeout_ms;   /* bound on the SIGTERM drain */
    char log_file[4096];       /* empty = stderr */
    enum log_level log_level;
    bool debug_endpoints;      /* /debug/... routes used by the tests */
    struct config_proxy proxy;
    char state_dir[4096];      /* the SQLite database (state/state.h) */
    struct config_jobs jobs;
    struct ledger_config usage;   /* the usage ledger (serving/ledger.h) */
    struct config_metrics metrics;
    struct config_shared_memory shared_memory;
    /* `auth` and `tenants` (SPEC.md "Tenants and keys"): t[0] is always
     * the tenant "default"; read by the gateway (keys, routes, admission)
     * and the scheduler (shares). */
    struct tenants_config tenants;
    /* `governance` (SPEC.md "Time windows"), parsed against the tenants;
     * NULL when the file has none. Owned: config_release frees it, unless
     * main handed it to the governor (and set it NULL). */
    struct governance *governance;
    /* `devices` (SPEC.md "Models: load, unload, memory"): by label. */
    struct serving_device_config devices[SERVING_MAX_DEVICE_CONFIGS];
    int ndevices;
};

void config_defaults(struct config *c);
/* Frees what the config owns (its governance). */
void config_release(struct config *c);
/* The schema (common/schema.h) of the file: defaults, checks and the field
 * table of docs/CONFIG.md (`batchgate --config-fields`) come from it. */
struct schema_field;
const struct schema_field *config_schema(void);
/* Reads and validates a JSON config file over the current values of c. */
int config_load_file(struct config *c, const char *path, struct error *err);
/* The same, keeping the file as read in *root (the caller's to
 * json_decref; NULL on error): what was applied, without a second read of
 * a file that may have changed meanwhile (or a FIFO, read once). */
struct json_t;
int config_load_file_keep(struct config *c, const char *path, struct json_t **root,
                          struct error *err);
/* Same from a string; `name` stands for the file in messages. */
int config_load_string(struct config *c, const char *json, const char *name, struct error *err);
/* "HOST:PORT" or "[v6]:PORT" into c->http.listen_host/listen_port; `what` names the source in messages. */
int config_set_listen(struct config *c, const char *hostport, const char *what, struct error *err);
/* The same for grpc_listen into c->http.h2; "off": no gRPC port. */
int config_set_grpc_listen(struct config *c, const char *hostport, const char *what,
                           struct error *err);

#endif

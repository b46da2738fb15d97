/* config.c - see config.h. The file is described by the schema tables below
 * (common/schema.h): they apply the defaults, read and check the file, and
 * print the field table of docs/CONFIG.md (`batchgate --config-fields`).
 * Unknown fields are errors: a typo in a limit must not silently fall back
 * to the default. */
#include "gateway/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/httpc.h"
#include "common/schema.h"
#include "gateway/config_impl.h"
#include "serving/governance.h"
#include "serving/jobs.h"

/* A configuration file is a few KiB; anything near this is a wrong path. */
#define CONFIG_FILE_MAX (16u << 20)

/* "HOST:PORT" or "[V6]:PORT" into host (cap 256) and port. */
static int config_parse_hostport(const char *hostport, char *out_host, int *out_port,
                                 const char *what, struct error *err)
{
    const char *colon;
    char host[256];
    if (hostport[0] == '[') {
        const char *end = strchr(hostport, ']');
        if (!end || end[1] != ':')
            return error_set(err, BG_ECONFIG, "%s: \"%s\" is not [IPV6]:PORT", what, hostport);
        colon = end + 1;
        size_t n = (size_t)(end - hostport - 1);
        if (n == 0 || n >= sizeof host)
            return error_set(err, BG_ECONFIG, "%s: empty or too long host in \"%s\"", what, hostport);
        memcpy(host, hostport + 1, n);
        host[n] = '\0';
    } else {
        colon = strrchr(hostport, ':');
        if (!colon)
            return error_set(err, BG_ECONFIG, "%s: \"%s\" is not HOST:PORT", what, hostport);
        size_t n = (size_t)(colon - hostport);
        if (n == 0 || n >= sizeof host)
            return error_set(err, BG_ECONFIG, "%s: empty or too long host in \"%s\"", what, hostport);
        if (memchr(hostport, ':', n))
            return error_set(err, BG_ECONFIG, "%s: IPv6 address must be bracketed: [%.*s]:PORT",
                             what, (int)n, hostport);
        memcpy(host, hostport, n);
        host[n] = '\0';
    }
    /* Digits only: strtol took " 24113", "+24113" and "-0" (a random port). */
    size_t digits = strspn(colon + 1, "0123456789");
    long port = digits >= 1 && digits <= 5 && colon[1 + digits] == '\0' ? atol(colon + 1) : -1;
    if (port < 0 || port > 65535)
        return error_set(err, BG_ECONFIG, "%s: port in \"%s\" must be 0..65535", what, hostport);
    snprintf(out_host, 256, "%s", host);
    *out_port = (int)port;
    return 0;
}

int config_set_listen(struct config *c, const char *hostport, const char *what, struct error *err)
{
    return config_parse_hostport(hostport, c->http.listen_host, &c->http.listen_port, what, err);
}

int config_set_grpc_listen(struct config *c, const char *hostport, const char *what,
                           struct error *err)
{
    if (strcmp(hostport, "off") == 0) {
        c->http.h2.listen_host[0] = '\0';
        c->http.h2.listen_port = -1;
        return 0;
    }
    return config_parse_hostport(hostport, c->http.h2.listen_host, &c->http.h2.listen_port, what,
                                 err);
}

/* "listen" is one string for two members; the default goes through the same parser. */
static int config_parse_listen(void *base, json_t *v, const struct schema_field *f,
                               struct schema_ctx *ctx)
{
    struct config *c = base;
    if (!v)
        return config_set_listen(c, f->sdef, "listen", NULL);
    if (!json_is_string(v))
        return schema_fail_value(ctx, f, v);
    char what[4200];
    snprintf(what, sizeof what, "%s: %s", ctx->file, ctx->path);
    return config_set_listen(c, json_string_value(v), what, ctx->err);
}

static int config_parse_grpc_listen(void *base, json_t *v, const struct schema_field *f,
                                    struct schema_ctx *ctx)
{
    struct config *c = base;
    if (!v)
        return config_set_grpc_listen(c, f->sdef, "grpc_listen", NULL);
    if (!json_is_string(v))
        return schema_fail_value(ctx, f, v);
    char what[4200];
    snprintf(what, sizeof what, "%s: %s", ctx->file, ctx->path);
    return config_set_grpc_listen(c, json_string_value(v), what, ctx->err);
}

/* A prefix picks one route: two routes with the same one would hide the second. */
static int config_check_proxy(void *obj, json_t *json, struct schema_ctx *ctx)
{
    const struct config_proxy *p = obj;
    for (int i = 1; i < p->nroutes; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(p->routes[k].prefix, p->routes[i].prefix) == 0) {
                char member[32];
                snprintf(member, sizeof member, "routes[%d]", i);
                return schema_fail(ctx, member, "prefix \"%s\" appears twice",
                                   p->routes[i].prefix);
            }
    return 0;
}

static const struct schema_field config_limits_fields[] = {
    /* Below 256 not even a request line with a Host fits. */
    {SCHEMA_F_SIZE("max_header_bytes", struct http_limits, max_header_bytes),
     .min = 256, .max = 16 << 20, .def = 16384,
     .doc = "request line + headers, every byte through the blank line that ends them (CRLFs "
            "included); past it: 431 and close. A chunked body's trailer fields (read and "
            "dropped) are held to it too, from the first field's start through the blank "
            "line that ends them, and so are its chunk extensions, all of its chunks' "
            "together (400 past it)"},
    {SCHEMA_F_SIZE("max_body_bytes", struct http_limits, max_body_bytes),
     .min = 0, .max = (int64_t)1 << 40, .def = 67108864,
     .doc = "decoded body size; a larger `Content-Length` is refused with 413 right after the "
            "headers, before any body byte is read; a chunked body is refused as soon as it "
            "grows past the limit"},
    {SCHEMA_F_INT("max_connections", struct http_limits, max_connections),
     .min = 1, .max = 1 << 24, .def = 10000,
     .doc = "open client connections, all IO threads together"},
    {SCHEMA_F_INT("header_timeout_ms", struct http_limits, header_timeout_ms),
     .min = 1, .max = 3600 * 1000, .def = 10000, .doc = "see timeouts below"},
    {SCHEMA_F_INT("idle_timeout_ms", struct http_limits, idle_timeout_ms),
     .min = 1, .max = 24 * 3600 * 1000, .def = 60000, .doc = "see timeouts below"},
    SCHEMA_END_ROW,
};

static const struct schema_field config_compression_fields[] = {
    {SCHEMA_F_BOOL("responses", struct http_compression, responses),
     .def = 0,
     .doc = "whole HTTP answers leave gzip- or deflate-compressed when the client's "
            "`Accept-Encoding` takes it and they shrink. Off by default: Python's and Go's "
            "HTTP clients ask for gzip whether it helps or not, and on a gateway bound by "
            "its own CPU it costs a quarter of the throughput (docs/CONFIG.md)"},
    {SCHEMA_F_BOOL("grpc", struct http_compression, grpc),
     .def = 0,
     .doc = "gRPC answer messages too, in a coding `grpc-accept-encoding` lists (gRPC "
            "clients list what they can read without asking for it: off, as Triton's "
            "default)"},
    {SCHEMA_F_INT("min_bytes", struct http_compression, min_bytes),
     .min = 0, .max = 1 << 30, .def = 1024,
     .doc = "smaller answers leave as they are (below about a packet, compression saves no "
            "time)"},
    {SCHEMA_F_INT("level", struct http_compression, level),
     .min = 1, .max = 9, .def = 1,
     .doc = "zlib's level: 1 is the fastest (JSON shrinks 3-5x already), 9 the smallest"},
    SCHEMA_END_ROW,
};

static const struct schema_field config_route_fields[] = {
    {SCHEMA_F_STRING("prefix", struct config_proxy_route, prefix),
     .flags = SCHEMA_REQUIRED | SCHEMA_SLASH,
     .doc = "every method on every path under it (`/tfs/`) goes to the route's servers"},
    {SCHEMA_F_URLS("urls", struct config_proxy_route, hosts, ports, nurls),
     .flags = SCHEMA_REQUIRED, .min = 1,
     .doc = "the route's servers, each once; each request goes to the usable one with the "
            "fewest calls in flight (docs/PROXY.md)"},
    {SCHEMA_F_BOOL("strip_prefix", struct config_proxy_route, strip_prefix),
     .def = false, .doc = "`/tfs/v1/x` under `/tfs/` goes upstream as `/v1/x`"},
    {SCHEMA_F_INT("pipeline", struct config_proxy_route, pipeline),
     .min = 1, .max = HTTPC_PIPELINE_MAX, .def = 1,
     .doc = "bodiless `GET`/`HEAD`/`OPTIONS` requests that reach the route in the same pass of "
            "the event loop share an upstream connection, up to this many, and leave in one "
            "send (HTTP/1.1 pipelining; docs/PROXY.md \"Pipelining upstream\"). 1: off, each "
            "request has a connection to itself"},
    {SCHEMA_F_STRING("health_path", struct config_proxy_route, health_path),
     .flags = SCHEMA_SLASH, .doc_default = "none",
     .doc = "a path on the route's servers (`\"/healthz\"`) probed with `GET` every "
            "`health_interval_ms`; a refused connection takes a server out at once, any other "
            "failure (not 200, no answer in time) at the third in a row, until a probe passes "
            "(docs/PROXY.md). Without it: passive health only"},
    {SCHEMA_F_INT("health_interval_ms", struct config_proxy_route, health_interval_ms),
     .min = 10, .max = 3600 * 1000, .def = 2000,
     .doc = "the probe interval, and how long a probe may take"},
    /* The route's POSTs may be repeated like GETs after a lost reused
     * connection (common/upcall.h); other methods follow RFC 9110 9.2.2. */
    {SCHEMA_F_BOOL("idempotent", struct config_proxy_route, idempotent),
     .def = false,
     .doc = "`true`: the route's POSTs may be sent again after a lost keep-alive connection, "
            "like GET, HEAD, OPTIONS, PUT and DELETE always are (RFC 9110 §9.2.2; docs/PROXY.md "
            "\"Retries\"). Upstream models have the same switch, `upstream.idempotent`, on by "
            "default (docs/MODELS.md)"},
    SCHEMA_END_ROW,
};

static const struct schema_field config_route = {.type = SCHEMA_OBJECT,
                                                 .fields = config_route_fields};

static const struct schema_field config_proxy_fields[] = {
    {SCHEMA_F_ARRAY("routes", struct config_proxy, routes, nroutes, &config_route),
     .doc = "reverse-proxy routes, each `{\"prefix\": \"/tfs/\", \"urls\": "
            "[\"http://HOST:PORT\", ...]}` and the fields below (docs/PROXY.md)"},
    {SCHEMA_F_INT("timeout_ms", struct config_proxy, timeout_ms),
     .min = 1, .max = 24 * 3600 * 1000, .def = 60000,
     .doc = "a proxied request's answer must begin within this long of the request being sent, "
            "and its body must not stall longer; past it: 504 (or, once the answer began, the "
            "client's connection is closed short), never sent again"},
    {SCHEMA_F_INT("connect_timeout_ms", struct config_proxy, connect_timeout_ms),
     .min = 1, .max = 24 * 3600 * 1000, .def = 5000,
     .doc = "a connect to a route's server not done within this long fails as a refused one "
            "does: the request goes to a server not tried yet (nothing was sent), else 502. "
            "A host that drops connects held each request for `timeout_ms`, on the same "
            "server. Upstream models and LLM pools connect within 5 s too"},
    {SCHEMA_F_INT("max_idle", struct config_proxy, max_idle),
     .min = 1, .max = 100000, .def = 64,
     .doc = "keep-alive connections kept per upstream server per IO thread"},
    {SCHEMA_F_BOOL("model_metadata", struct config_proxy, model_metadata),
     .def = true,
     .doc = "`GET /v2/models/{m}` of kserve_v2 upstream models is proxied to their servers"},
    SCHEMA_END_ROW,
};

static const struct schema_name config_jobs_priorities[] = {
    {"low", JOBS_PRIORITY_LOW}, {"idle", JOBS_PRIORITY_IDLE}, {"normal", JOBS_PRIORITY_NORMAL},
    {NULL, 0},
};

static const struct schema_field config_jobs_fields[] = {
    {SCHEMA_F_STRING("dir", struct config_jobs, dir),
     .flags = SCHEMA_NONEMPTY,   /* "" was the default silently: omit it for that */
     .doc_default = "<state_dir>/jobs",
     .doc = "job inputs (a submitted body is written here) and results files; an `input_path` "
            "must lie under it (docs/JOBS.md); one server's alone as state_dir is, the default "
            "one too (`batchgate.lock` in it)"},
    {SCHEMA_F_SIZE("max_input_bytes", struct config_jobs, max_input_bytes),
     .min = 1, .max = (int64_t)1 << 40, .def = 1073741824,
     .doc = "a job's input, as a body or an `input_path` file; past it: 413 (a body is also "
            "bound by `limits.max_body_bytes`)"},
    {SCHEMA_F_SIZE("max_file_bytes", struct config_jobs, max_file_bytes),
     .min = 1, .max = (int64_t)1 << 40, .def = 209715200,
     .doc = "a file uploaded to `POST /v1/files` for the Batch API (docs/LLM.md); past it: 413 "
            "(the upload is also bound by `limits.max_body_bytes`)"},
    {SCHEMA_F_INT64("file_expiry_s", struct config_jobs, file_expiry_s),
     .min = 0, .max = 2592000, .def = 2592000,
     .doc = "Batch API files (uploads and a batch's output and error files) that name no "
            "`expires_after` are deleted that many seconds after they were created (OpenAI's "
            "default: 30 days); 0 keeps them until deleted"},
    {SCHEMA_F_INT64("retention_s", struct config_jobs, retention_s),
     .min = 0, .max = 315360000, .def = 2592000,
     .doc = "an ended job (completed, failed or cancelled) is forgotten that many seconds after "
            "it ended: its row, its results file and the copy of a submitted body (an "
            "`input_path` file is the user's and stays); 0 keeps every job (docs/JOBS.md)"},
    {SCHEMA_F_ENUM("runner_priority", struct config_jobs, runner_priority,
                   config_jobs_priorities),
     .flags = SCHEMA_EXT, .sdef = "low",
     .doc = "the host CPU share of the thread that reads job and Batch API lines and writes "
            "their results (about 10 us of CPU a line): `low` (nice 10: yields to the IO "
            "threads nine to one, yet keeps feeding the device on a host other processes keep "
            "busy), `idle` (SCHED_IDLE: only CPU nothing else wants; on a busy host the device "
            "then gets almost no job lines), `normal` (docs/JOBS.md \"Host CPU\")"},
    SCHEMA_END_ROW,
};

static const struct schema_field config_usage_fields[] = {
    {SCHEMA_F_INT("flush_s", struct ledger_config, flush_s),
     .min = 1, .max = 60, .def = 60,
     .doc = "the ledger's rows are written every that many seconds, in one transaction; a "
            "crash loses at most that much (docs/USAGE.md)"},
    {SCHEMA_F_INT("minute_retention_days", struct ledger_config, minute_retention_days),
     .min = 1, .max = 3660, .def = 7,
     .doc = "minute rows older than this are rolled up into hour rows"},
    {SCHEMA_F_INT("hour_retention_days", struct ledger_config, hour_retention_days),
     .min = 1, .max = 36600, .def = 400,
     .doc = "hour rows older than this are deleted"},
    SCHEMA_END_ROW,
};

static const struct schema_field config_metrics_fields[] = {
    {SCHEMA_F_BOOL("triton_names", struct config_metrics, triton_names),
     .def = true,
     .doc = "`/metrics` also carries Triton's names (`nv_inference_request_success`, "
            "`nv_inference_queue_duration_us`, ..., `nv_gpu_*`, `nv_cpu_*`) beside batchgate's, "
            "so Triton's dashboards and alerts read it (docs/METRICS.md)"},
    SCHEMA_END_ROW,
};

static const struct schema_field config_shm_fields[] = {
    {SCHEMA_F_BOOL("allow_remote", struct config_shared_memory, allow_remote),
     .def = false,
     .doc = "serve Triton's system shared memory extension (`/v2/systemsharedmemory/...` and "
            "inference with `shared_memory_region`) to clients off loopback too; a region maps "
            "memory of the server's host by a name the client gives, so by default only "
            "clients on 127.0.0.0/8 and ::1 may use it (403 for others; docs/MODELS.md)"},
    SCHEMA_END_ROW,
};

static const struct schema_name config_log_levels[] = {
    {"debug", LOG_DEBUG}, {"info", LOG_INFO}, {"warn", LOG_WARN}, {"error", LOG_ERROR}, {NULL, 0},
};

static const struct schema_field config_grpc_fields[] = {
    {SCHEMA_F_INT("max_concurrent_streams", struct http_h2_config, max_concurrent_streams),
     .min = 1, .max = 65536, .def = 256,
     .doc = "open streams of one connection at a time (SETTINGS_MAX_CONCURRENT_STREAMS); streams "
            "the client reset that are still being answered may take as many again, past which "
            "a new stream is refused (REFUSED_STREAM), so a rapid reset cannot pile up work "
            "(CVE-2023-44487). A client that opens more than the bound loses the connection "
            "(GOAWAY PROTOCOL_ERROR, nghttp2's rule)"},
    {SCHEMA_F_INT("initial_window_bytes", struct http_h2_config, initial_window_bytes),
     .min = 65535, .max = 2147483647, .def = 1048576,
     .doc = "each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE): how much of a request "
            "a client may send before batchgate reads it"},
    {SCHEMA_F_INT("connection_window_bytes", struct http_h2_config, connection_window_bytes),
     .min = 65535, .max = 2147483647, .def = 16777216,
     .doc = "the connection's receive window, all its streams together"},
    {SCHEMA_F_INT("max_frame_bytes", struct http_h2_config, max_frame_bytes),
     .min = 16384, .max = 16777215, .def = 16384,
     .doc = "SETTINGS_MAX_FRAME_SIZE: the largest frame a client may send"},
    {SCHEMA_F_INT("max_resets_per_s", struct http_h2_config, max_resets_per_s),
     .min = 1, .max = 1000000, .def = 100,
     .doc = "RST_STREAM frames a connection may send per second (a bucket of twice that plus "
            "`max_concurrent_streams`); past it: GOAWAY(ENHANCE_YOUR_CALM) and the connection "
            "closes (rapid reset)"},
    {SCHEMA_F_INT("max_control_frames_per_s", struct http_h2_config, max_control_per_s),
     .min = 1, .max = 1000000, .def = 100,
     .doc = "SETTINGS, PING and PRIORITY frames a connection may send per second; past it: "
            "GOAWAY(ENHANCE_YOUR_CALM) and a close (SETTINGS and PING floods)"},
    SCHEMA_END_ROW,
};

static const struct schema_field config_fields[] = {
    {SCHEMA_F_CUSTOM("listen", config_parse_listen),
     .sdef = "127.0.0.1:8000", .expect = "a string \"HOST:PORT\" or \"[IPV6]:PORT\"",
     .doc = "port 0 takes a free port, logged as `listening on HOST:PORT`"},
    {SCHEMA_F_CUSTOM("grpc_listen", config_parse_grpc_listen),
     .sdef = "127.0.0.1:8001", .expect = "a string \"HOST:PORT\", \"[IPV6]:PORT\" or \"off\"",
     .doc = "the KServe v2 gRPC port (HTTP/2 cleartext, docs/GRPC.md); port 0 takes a free "
            "port, logged as `gRPC on HOST:PORT`; \"off\": none"},
    {SCHEMA_F_OBJECT("grpc", struct config, http.h2, config_grpc_fields),
     .doc = "HTTP/2 limits of the gRPC port (`limits` hold there too: header list, message "
            "size, connections, timeouts)"},
    {SCHEMA_F_INT("io_threads", struct config, http.io_threads),
     .min = 0, .max = 1024, .def = 0,
     .doc = "IO threads; 0 = one per CPU this process may use (its CPU affinity and its cgroup "
            "CPU quota, e.g. a container's `limits.cpu`, rounded up)"},
    {SCHEMA_F_STRING("model_repository", struct config, model_repository),
     .flags = SCHEMA_NONEMPTY, .sdef = "models",
     .doc = "folder with one folder per model; named here (or by `--models`) it must exist; "
            "unnamed and with no `models` folder where it runs, the bundled one beside the "
            "executable (`../share/batchgate/models` installed, `../models` built)"},
    {SCHEMA_F_INT("repository_poll_s", struct config, repository_poll_s),
     .min = 0, .max = 86400, .def = 0,
     .doc = "every that many seconds the repository is scanned: new models added, changed ones "
            "reloaded, removed ones unloaded (docs/MODELS.md \"Lifecycle\"); 0: never"},
    {SCHEMA_F_INT("removed_metrics_keep_s", struct config, removed_metrics_keep_s),
     .min = 0, .max = 86400, .def = 300,
     .doc = "a model that left the repository (its folder removed, or a version its "
            "`version_policy` retired) keeps its per-model series in `/metrics` that many "
            "seconds, so that scrapes see its last values and its unload, then they go "
            "(docs/METRICS.md)"},
    {SCHEMA_F_OBJECT("limits", struct config, http.limits, config_limits_fields),
     .doc = "HTTP limits"},
    {SCHEMA_F_OBJECT("compression", struct config, http.compression, config_compression_fields),
     .flags = SCHEMA_EXT, .doc = "compressed answers (docs/CONFIG.md \"Compressed answers\")"},
    {SCHEMA_F_INT("shutdown_timeout_ms", struct config, shutdown_timeout_ms),
     .flags = SCHEMA_EXT, .min = 0, .max = 3600 * 1000, .def = 30000,
     .doc = "bound on the SIGTERM drain"},
    {SCHEMA_F_STRING("log_file", struct config, log_file),
     .flags = SCHEMA_EXT, .doc_default = "stderr",
     .doc = "append log lines here; SIGHUP reopens it (for logrotate)"},
    {SCHEMA_F_ENUM("log_level", struct config, log_level, config_log_levels),
     .flags = SCHEMA_EXT, .sdef = "info", .doc = "same as `--log-level`"},
    {SCHEMA_F_OBJECT("proxy", struct config, proxy, config_proxy_fields),
     .flags = SCHEMA_EXT, .check = config_check_proxy, .doc = "the reverse proxy"},
    {SCHEMA_F_STRING("state_dir", struct config, state_dir),
     .flags = SCHEMA_NONEMPTY, .sdef = "state",
     .doc = "folder of the SQLite database (jobs and their progress, the usage ledger) and of "
            "`packed/` (the cpu "
            "backend's packed weights between loads); created if missing; one server's "
            "alone (a second one started on it exits 1: `batchgate.lock`)"},
    {SCHEMA_F_OBJECT("jobs", struct config, jobs, config_jobs_fields),
     .doc = "offline batch jobs (docs/JOBS.md)"},
    {SCHEMA_F_OBJECT("usage", struct config, usage, config_usage_fields),
     .doc = "the usage ledger in the state database (docs/USAGE.md)"},
    {SCHEMA_F_OBJECT("metrics", struct config, metrics, config_metrics_fields),
     .doc = "what `GET /metrics` shows"},
    {SCHEMA_F_OBJECT("shared_memory", struct config, shared_memory, config_shm_fields),
     .flags = SCHEMA_EXT, .doc = "Triton's system shared memory extension"},
    {SCHEMA_F_OBJECT("auth", struct config, tenants, config_auth_fields),
     .doc = "API keys (docs/TENANTS.md)"},
    /* The file's tenants go to t[1..]: t[0] is "default" whatever the file
     * says (config_tenants_finish moves a configured "default" there). */
    {.name = "tenants", .type = SCHEMA_ARRAY, .offset = offsetof(struct config, tenants.t[1]),
     .size = sizeof(struct tenant_config), .max = TENANTS_MAX - 1,
     .count_offset = offsetof(struct config, tenants.n), .item = &config_tenant_item,
     .doc = "who may use which models with which keys, and their shares of device time and "
            "limits (docs/TENANTS.md); each element has the fields below"},
    /* Read by governance_parse (serving/governance.h) once the tenants it
     * names are known: config_load_json. */
    {SCHEMA_F_IGNORE("governance"), .expect = "object", .doc_default = "none",
     .doc = "time windows: `{\"timezone\": \"Area/City\", \"windows\": [{\"name\", \"days\", "
            "\"from\", \"to\", \"shares\": {TENANT: SHARE}, \"offline_share\"}]}` "
            "(docs/TENANTS.md); SIGHUP and `PUT /v2/governance` replace it"},
    /* A map by device label: config_devices_parse. */
    {SCHEMA_F_IGNORE("devices"), .expect = "object", .doc_default = "none",
     .doc = "per device label (`cpu`, `cuda` or `synthetic` and a number: `cpu0`, `cuda1`; "
            "another is refused): `{\"memory_budget_bytes\": N, \"price_per_hour\": X, "
            "\"release_context\": true}`: what the resident models may hold there (0: no "
            "bound), what an hour of it costs (0 to 1,000,000), and whether a GPU's context is "
            "released when no model is left on it (docs/MODELS.md \"Lifecycle\")"},
    {SCHEMA_F_BOOL("debug_endpoints", struct config, debug_endpoints),
     .flags = SCHEMA_EXT, .def = false,
     .doc = "enables `GET /debug/delay?ms=N&id=X` (answers after a timer), `POST /debug/echo` "
            "(returns the decoded body) and `POST /debug/fault {\"model\", \"mode\": "
            "\"fail\"\\|\"hang\"\\|\"slow\"\\|\"none\", \"count\", \"ms\"}` (the model's next "
            "batches fail with 500, hang or slow down: fault injection) and `GET /debug/memory` "
            "(the heap in use and held, each malloc arena, and SQLite's share: `sqlite_bytes`, "
            "of it the state database's page caches `sqlite_cache_bytes`); the tests and the "
            "soaks use them; never enable in production"},
    SCHEMA_END_ROW,
};

const struct schema_field *config_schema(void)
{
    return config_fields;
}

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    schema_defaults(config_fields, c);
    config_tenants_defaults(&c->tenants);
}

void config_release(struct config *c)
{
    governance_free(c->governance);
    c->governance = NULL;
}

/* `devices`: {"cpu0": {"memory_budget_bytes": N, "price_per_hour": X}, ...}. */
static int config_devices_parse(struct config *c, json_t *devs, const char *file,
                                struct error *err)
{
    const char *name;
    json_t *v;
    if (!json_is_object(devs))
        return error_set(err, BG_ECONFIG, "%s: devices: expected an object, got %s", file,
                         json_is_array(devs) ? "an array" : "another type");
    c->ndevices = 0;
    json_object_foreach(devs, name, v) {
        size_t n = strlen(name), k = 0;
        while (k < n && name[k] >= 'a' && name[k] <= 'z')
            k++;
        bool ok = k > 0 && k < n && n < sizeof c->devices[0].name;
        for (size_t i = k; i < n && ok; i++)
            ok = name[i] >= '0' && name[i] <= '9';
        /* As the backends write labels ("cpu%d"): "cpu00" or "cpu4294967296"
         * named no device, and the budget or price meant for cpu0 applied
         * nowhere (cpu0 ran without a bound). */
        ok = ok && (n - k == 1 || name[k] != '0') && n - k <= 5 && atoi(name + k) <= 65535;
        /* The backends whose instances sit on devices: "gpu0" would name
         * none, and its price or budget would apply nowhere, silently. */
        ok = ok && ((k == 3 && strncmp(name, "cpu", 3) == 0) ||
                    (k == 4 && strncmp(name, "cuda", 4) == 0) ||
                    (k == 9 && strncmp(name, "synthetic", 9) == 0));
        if (!ok)
            return error_set(err, BG_ECONFIG, "%s: devices.%s: a device label is cpu, cuda or "
                             "synthetic and a number without leading zeros, at most 65535 "
                             "(\"cpu0\", \"cuda1\")", file, name);
        if (c->ndevices == SERVING_MAX_DEVICE_CONFIGS)
            return error_set(err, BG_ECONFIG, "%s: devices: more than %d devices", file,
                             SERVING_MAX_DEVICE_CONFIGS);
        if (!json_is_object(v))
            return error_set(err, BG_ECONFIG, "%s: devices.%s: expected an object", file, name);
        struct serving_device_config *d = &c->devices[c->ndevices++];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "%s", name);
        const char *key;
        json_t *f;
        json_object_foreach(v, key, f) {
            if (strcmp(key, "memory_budget_bytes") == 0) {
                if (!json_is_integer(f) || json_integer_value(f) < 0)
                    return error_set(err, BG_ECONFIG, "%s: devices.%s.memory_budget_bytes: "
                                     "expected a whole number of bytes >= 0", file, name);
                d->memory_budget_bytes = (size_t)json_integer_value(f);
            } else if (strcmp(key, "release_context") == 0) {
                if (!json_is_boolean(f))
                    return error_set(err, BG_ECONFIG, "%s: devices.%s.release_context: expected "
                                     "true or false", file, name);
                d->keep_context = !json_is_true(f);
            } else if (strcmp(key, "price_per_hour") == 0) {
                /* Bounded: the ledger stores costs in millionths in 64 bits;
                 * 1e308 an hour wrote a cost of -9.2e12 (helper's config
                 * audit). A million an hour is a year of one device in a row
                 * with room to spare. */
                if (!json_is_number(f) || json_number_value(f) < 0 ||
                    json_number_value(f) > 1e6)
                    return error_set(err, BG_ECONFIG, "%s: devices.%s.price_per_hour: expected "
                                     "a number from 0 to 1000000", file, name);
                d->price_per_hour = json_number_value(f);
            } else {
                return error_set(err, BG_ECONFIG, "%s: devices.%s.%s: unknown field (known: "
                                 "memory_budget_bytes, price_per_hour, release_context)", file,
                                 name, key);
            }
        }
    }
    return 0;
}

static int config_load_json(struct config *c, json_t *root, const char *file, struct error *err)
{
    int rc = schema_parse(config_fields, c, root, file, err);
    if (rc == 0 && json_object_get(root, "devices"))
        rc = config_devices_parse(c, json_object_get(root, "devices"), file, err);
    if (rc == 0)
        rc = config_tenants_finish(&c->tenants, root, file, err);
    if (rc == 0 && json_object_get(root, "governance")) {
        struct governance *g = NULL;
        char where[4200];
        snprintf(where, sizeof where, "%s: governance", file);
        if ((rc = governance_parse(json_object_get(root, "governance"), &c->tenants, where, &g,
                                   err)) == 0) {
            governance_free(c->governance);
            c->governance = g;
        }
    }
    if (rc == 0 && json_object_get(root, "model_repository"))
        c->model_repository_set = true;
    return rc;
}

int config_load_string(struct config *c, const char *json, const char *name, struct error *err)
{
    json_t *root;
    int rc = schema_json_parse(json, strlen(json), name, &root, err);
    if (rc == 0) {
        rc = config_load_json(c, root, name, err);
        json_decref(root);
    }
    return rc;
}

int config_load_file_keep(struct config *c, const char *path, json_t **keep, struct error *err)
{
    json_t *root;
    if (keep)
        *keep = NULL;
    int rc = schema_json_read(path, CONFIG_FILE_MAX, &root, err);
    if (rc == 0) {
        rc = config_load_json(c, root, path, err);
        if (rc == 0 && keep)
            *keep = json_incref(root);
        json_decref(root);
    }
    return rc;
}

int config_load_file(struct config *c, const char *path, struct error *err)
{
    return config_load_file_keep(c, path, NULL, err);
}
